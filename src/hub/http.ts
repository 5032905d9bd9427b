// The hub's HTTP face: /healthz (the process serves), /readyz (this hub can answer for the fleet: it
// leads and has listed the registrations), /metrics (the private Prometheus registry), /api/v1/fleet
// (JSON, filterable by ?cluster= and ?failing=true) and the dashboard at / (server-rendered, no
// JavaScript needed). A hub that cannot answer truthfully (a standby, or a leader still syncing) says
// so with 503 and why, on the API and the dashboard alike: an empty view is never "all verified".
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { FleetMetrics } from "../observability/metrics/index.ts"
import { renderDashboard, renderUnavailable } from "./dashboard.ts"
import { type FleetView, fleetView, type MemberEntry } from "./fleet-state.ts"

/** Whether this hub's view is the fleet's, and if not, why. */
export type Availability =
  | { readonly answers: true }
  | { readonly answers: false; readonly reason: "Standby" | "Syncing"; readonly message: string }

export interface HubHttpOptions {
  readonly host: string
  readonly port: number
  readonly members: Map<string, MemberEntry>
  readonly metrics: FleetMetrics
  readonly isLeader: () => boolean
  readonly availability: () => Availability
  readonly identity: string
}

const send = (res: ServerResponse, status: number, contentType: string, body: string) => {
  res.writeHead(status, { "content-type": contentType, "cache-control": "no-store" })
  res.end(body)
}

export const viewFromQuery = (members: Map<string, MemberEntry>, url: URL): FleetView => {
  const cluster = url.searchParams.get("cluster") ?? undefined
  const failing = url.searchParams.get("failing")
  return fleetView(members.values(), Date.now(), {
    ...(cluster ? { cluster } : {}),
    ...(failing === "true" || failing === "1" ? { failing: true } : {}),
  })
}

const handle = async (options: HubHttpOptions, req: IncomingMessage, res: ServerResponse) => {
  const url = new URL(req.url ?? "/", "http://hub.invalid")
  if (req.method !== "GET" && req.method !== "HEAD")
    return send(res, 405, "text/plain", "method not allowed\n")
  switch (url.pathname) {
    case "/healthz":
      return send(res, 200, "text/plain", "ok\n")
    case "/readyz": {
      // Members that are syncing or refused show on their MemberCluster; they never hold the hub unready.
      const available = options.availability()
      return available.answers
        ? send(res, 200, "text/plain", "ok\n")
        : send(res, 503, "text/plain", `${available.message}\n`)
    }
    case "/metrics":
      return send(res, 200, options.metrics.contentType, await options.metrics.render())
    case "/api/v1/fleet": {
      const available = options.availability()
      if (!available.answers) {
        return send(
          res,
          503,
          "application/json",
          `${JSON.stringify({ reason: available.reason, message: available.message, leader: options.isLeader(), hub: options.identity }, null, 2)}\n`,
        )
      }
      const view = viewFromQuery(options.members, url)
      return send(
        res,
        200,
        "application/json",
        `${JSON.stringify({ ...view, leader: options.isLeader(), hub: options.identity }, null, 2)}\n`,
      )
    }
    case "/": {
      const available = options.availability()
      if (!available.answers)
        return send(
          res,
          503,
          "text/html; charset=utf-8",
          renderUnavailable(available.message, options.identity),
        )
      return send(
        res,
        200,
        "text/html; charset=utf-8",
        renderDashboard(viewFromQuery(options.members, url), {
          leader: options.isLeader(),
          hub: options.identity,
        }),
      )
    }
    default:
      return send(res, 404, "text/plain", "not found\n")
  }
}

/** Starts listening; resolves with the server and the port actually bound (port 0 picks a free one). */
export const startHubHttp = (options: HubHttpOptions): Promise<{ server: Server; port: number }> =>
  new Promise((resolve, reject) => {
    const server = createServer((req, res) => {
      handle(options, req, res).catch((e: unknown) => {
        if (!res.headersSent)
          send(res, 500, "text/plain", `internal error: ${e instanceof Error ? e.message : String(e)}\n`)
      })
    })
    server.once("error", reject)
    server.listen(options.port, options.host, () => {
      const addr = server.address()
      resolve({ server, port: typeof addr === "object" && addr ? addr.port : options.port })
    })
  })
