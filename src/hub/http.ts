// The hub's HTTP face: /healthz (the process serves), /readyz (this hub can answer for the fleet: it
// leads and has listed the registrations), /metrics (the private Prometheus registry), /api/v1/fleet
// (JSON, filtered and paged server-side) and the dashboard (server-rendered, no JavaScript): the
// overview at /, a cluster at /cluster?name=, a check at /check?cluster=&namespace=&name=. A hub that
// cannot answer truthfully (a standby, or a leader still syncing) says so with 503 and why, on the API
// and the dashboard alike: an empty view is never "all verified".
//
// Every answer carries the same security headers (a CSP that allows no script and only the
// dashboard's own stylesheet, nosniff, no referrer, no framing, no caching). Every route declares its
// query parameters: an unknown, repeated or oversized one is a 400 that says which, never ignored.
// The dashboard links relatively only, so it works under any path prefix (kubectl proxy, the API
// server's service proxy).
//
// With secure serving (ADR 0007) every route but /healthz and /readyz needs a bearer token that the
// hub's API server authenticates and authorizes (access-review.ts: the fleet API as `get` on a
// fleetcheck.io resource, every other path as a non-resource URL); the verdict comes before routing,
// so an anonymous caller learns nothing but 401. The dashboard may also be served on a listener of its
// own without a token: the API server's service proxy does not forward the user's token, so there the
// user's own RBAC (services/proxy) decides, and the network must admit only the API server.
import { randomBytes } from "node:crypto"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { createServer as createHttpsServer, type Server as HttpsServer } from "node:https"
import { type ConditionStatus, conditionStatuses } from "../api/condition.ts"
import type { FleetCheckView } from "../api/fleet.ts"
import { parseSince } from "../api/report.ts"
import type { FleetMetrics } from "../observability/metrics/index.ts"
import { type AccessReview, type ReviewTarget, verbOf } from "./access-review.ts"
import { defaultHubConfig, type HubConfig } from "./config.ts"
import { renderCheckPage, renderClusterPage } from "./dashboard/detail.ts"
import { styleHash } from "./dashboard/layout.ts"
import { renderError, renderOverview, renderUnavailable } from "./dashboard/overview.ts"
import {
  checkViews,
  decodeContinue,
  type FleetFilter,
  type FleetView,
  filterFingerprint,
  fleetCheckList,
  fleetPage,
  fleetReport,
  fleetView,
  type MemberEntry,
  parseLabelSelector,
} from "./fleet-state.ts"
import { handshakeTimeoutMs, type ServingPair, tlsServerOptions } from "./serving/serving-cert.ts"

/** Whether this hub's view is the fleet's, and if not, why. */
export type Availability =
  | { readonly answers: true }
  | { readonly answers: false; readonly reason: "Standby" | "Syncing"; readonly message: string }

export type DashboardSettings = Pick<HubConfig, "dashboardPageSize" | "traceUrlTemplate">

export interface HubHttpOptions {
  readonly host: string
  readonly port: number
  readonly members: Map<string, MemberEntry>
  /** FleetBackupChecks as the leader's placement controller last computed them. */
  readonly fleetChecks: ReadonlyMap<string, FleetCheckView>
  readonly metrics: FleetMetrics
  readonly isLeader: () => boolean
  /**
   * What the dashboard says this hub is: "leader" or "standby" unless given; with sharding, which
   * replica of how many and what it works (hub.ts).
   */
  readonly role?: () => string
  readonly availability: () => Availability
  readonly identity: string
  /** The dashboard's settings (page size, trace link template). */
  readonly config: DashboardSettings
  /** Secure serving: every route but the probes needs a token the API server accepts; undefined: none. */
  readonly access: AccessReview | undefined
  /** `all` routes, or the dashboard's only (its own listener, for the API server's service proxy). */
  readonly serves: "all" | "dashboard"
  /** Serve HTTPS with this certificate and key (secure serving); undefined: plain HTTP. */
  readonly tls: ServingPair | undefined
}

/** The policy every answer carries: no script, no plugin, no frame, only the dashboard's stylesheet. */
export const contentSecurityPolicy = [
  "default-src 'none'",
  `style-src '${styleHash}'`,
  "form-action 'self'",
  "base-uri 'none'",
  "frame-ancestors 'none'",
].join("; ")

const securityHeaders = {
  "content-security-policy": contentSecurityPolicy,
  "x-content-type-options": "nosniff",
  "referrer-policy": "no-referrer",
  "cache-control": "no-store",
}

const contentTypes = {
  text: "text/plain; charset=utf-8",
  html: "text/html; charset=utf-8",
  json: "application/json; charset=utf-8",
} as const

const send = (res: ServerResponse, status: number, contentType: string, body: string) => {
  res.writeHead(status, { ...securityHeaders, "content-type": contentType })
  res.end(body)
}

const sendJson = (res: ServerResponse, status: number, body: unknown) =>
  send(res, status, contentTypes.json, `${JSON.stringify(body, null, 2)}\n`)

/** A Kubernetes-style Status for API errors, so clients read them the way they read the API server's. */
const statusBody = (code: number, reason: string, message: string) => ({
  kind: "Status",
  apiVersion: "v1",
  status: "Failure",
  message,
  reason,
  code,
})

/** Longest value of any query parameter; a continue token carries three names, so it may be longer. */
export const maxParamLength = 256
export const maxContinueLength = 2048
/** Longest request target; node's own header limit (16 KiB) stays the outer bound. */
export const maxUrlLength = 4096
/** The largest page the fleet API serves; without `limit` it answers with everything. */
export const maxLimit = 10_000

type Params = Readonly<Record<string, string>>

/** The route's parameters as a map, or why the query is refused. */
export const readParams = (
  url: URL,
  allowed: ReadonlyArray<string>,
): { readonly ok: true; readonly params: Params } | { readonly ok: false; readonly error: string } => {
  const params: Record<string, string> = {}
  for (const [key, value] of url.searchParams) {
    const shownKey = JSON.stringify(key.length > 40 ? `${key.slice(0, 40)}…` : key)
    if (!allowed.includes(key))
      return {
        ok: false,
        error:
          allowed.length === 0
            ? `unknown query parameter ${shownKey}: this path takes none`
            : `unknown query parameter ${shownKey}; this path takes ${allowed.join(", ")}`,
      }
    if (Object.hasOwn(params, key)) return { ok: false, error: `query parameter ${shownKey} given twice` }
    const max = key === "continue" ? maxContinueLength : maxParamLength
    if (value.length > max)
      return { ok: false, error: `query parameter ${shownKey} is longer than ${max} characters` }
    params[key] = value
  }
  return { ok: true, params }
}

const boolParam = (key: string, v: string | undefined) =>
  v === undefined || v === "false" || v === "0"
    ? { ok: true as const, value: false }
    : v === "true" || v === "1"
      ? { ok: true as const, value: true }
      : { ok: false as const, error: `${key} must be true or false` }

const intParam = (key: string, v: string, min: number, max: number) =>
  /^[0-9]{1,9}$/.test(v) && Number(v) >= min && Number(v) <= max
    ? { ok: true as const, value: Number(v) }
    : { ok: false as const, error: `${key} must be a whole number from ${min} to ${max}` }

/** The filters every fleet view takes: cluster, namespace, status, failing, label. */
export const filterParams = ["cluster", "namespace", "status", "failing", "label"] as const

export const readFilter = (
  params: Params,
): { readonly ok: true; readonly filter: FleetFilter } | { readonly ok: false; readonly error: string } => {
  const failing = boolParam("failing", params.failing)
  if (!failing.ok) return failing
  // An empty value is no filter: the dashboard's form sends every field, "any" status as "".
  const status = params.status || undefined
  if (status !== undefined && !conditionStatuses.includes(status as ConditionStatus))
    return { ok: false, error: `status must be one of ${conditionStatuses.join(", ")}` }
  const label = params.label === undefined ? undefined : parseLabelSelector(params.label)
  if (label && !label.ok) return label
  return {
    ok: true,
    filter: {
      ...(params.cluster ? { cluster: params.cluster } : {}),
      ...(params.namespace ? { namespace: params.namespace } : {}),
      ...(status ? { status: status as ConditionStatus } : {}),
      ...(failing.value ? { failing: true } : {}),
      ...(label && label.selector.length > 0 ? { label: label.selector } : {}),
    },
  }
}

const dashboardRoutes: Readonly<Record<string, ReadonlyArray<string>>> = {
  "/": [...filterParams, "page"],
  "/cluster": ["name", "page"],
  "/check": ["cluster", "namespace", "name"],
}
const routes: Readonly<Record<string, ReadonlyArray<string>>> = {
  "/healthz": [],
  "/readyz": [],
  "/metrics": [],
  "/api/v1/fleet": [...filterParams, "limit", "continue"],
  "/api/v1/report": ["since", "cluster"],
  ...dashboardRoutes,
}

/**
 * What secure serving authorizes each fleet API route as: a resource of the fleetcheck.io group, since
 * the non-resource URLs under /api/ are every authenticated user's by the built-in system:discovery role.
 */
export const apiResources: Readonly<Record<string, ReviewTarget>> = {
  "/api/v1/fleet": { group: "fleetcheck.io", resource: "fleet" },
  "/api/v1/report": { group: "fleetcheck.io", resource: "report" },
}
export const reviewTargetOf = (path: string): ReviewTarget => apiResources[path] ?? { path }

/** The routes every caller may read, secure serving or not: the kubelet's probes carry no token. */
export const openPaths: ReadonlyArray<string> = ["/healthz", "/readyz"]

const isApi = (path: string) => path.startsWith("/api/")

/** How long the view behind a paged walk is kept, and how many walks keep one at once. */
export const snapshotTtlMs = 30_000
export const maxSnapshots = 4

/**
 * The views that paged walks are reading, so a walk's continue pages are cut from the view its first
 * page was (one consistent fleet, as a Kubernetes list is read at one resourceVersion) and cost a
 * slice instead of a rebuild of the whole fleet. A page whose snapshot is gone (expired, evicted, or
 * answered by another replica) is cut from a fresh view after the same keys: still every item once
 * unless it changed status meanwhile.
 */
const makeSnapshots = () => {
  const kept = new Map<string, { view: FleetView; fingerprint: string; expires: number }>()
  const prune = (now: number) => {
    for (const [id, s] of kept) if (s.expires <= now) kept.delete(id)
  }
  return {
    newId: () => randomBytes(12).toString("base64url"),
    take: (id: string, filter: FleetFilter): FleetView | undefined => {
      const now = Date.now()
      prune(now)
      const s = kept.get(id)
      kept.delete(id)
      return s && s.fingerprint === filterFingerprint(filter) ? s.view : undefined
    },
    keep: (id: string, view: FleetView, filter: FleetFilter) => {
      const now = Date.now()
      prune(now)
      while (kept.size >= maxSnapshots) kept.delete(kept.keys().next().value!)
      kept.set(id, { view, fingerprint: filterFingerprint(filter), expires: now + snapshotTtlMs })
    },
  }
}
type Snapshots = ReturnType<typeof makeSnapshots>

const handle = async (
  options: HubHttpOptions,
  snapshots: Snapshots,
  req: IncomingMessage,
  res: ServerResponse,
) => {
  const settings = options.config ?? defaultHubConfig
  const target = req.url ?? "/"
  const url = new URL(target.startsWith("/") ? target : "/", "http://hub.invalid")
  const path = url.pathname
  const fail = (status: number, reason: string, message: string, headers: Record<string, string> = {}) => {
    for (const [k, v] of Object.entries(headers)) res.setHeader(k, v)
    return isApi(path)
      ? sendJson(res, status, statusBody(status, reason, message))
      : path === "/" || path === "/cluster" || path === "/check"
        ? send(res, status, contentTypes.html, renderError(status, message))
        : send(res, status, contentTypes.text, `${message}\n`)
  }
  if (req.method !== "GET" && req.method !== "HEAD")
    return fail(405, "MethodNotAllowed", "method not allowed")
  if (target.length > maxUrlLength) return fail(414, "RequestURITooLong", "the request URL is too long")
  if (options.access && !openPaths.includes(path)) {
    const verdict = await options.access.review(
      req.headers.authorization,
      reviewTargetOf(path),
      verbOf(req.method),
    )
    if (verdict.status !== 200)
      return fail(
        verdict.status,
        verdict.reason,
        verdict.message,
        verdict.status === 401
          ? { "www-authenticate": 'Bearer realm="fleetcheck"' }
          : verdict.status === 429
            ? { "retry-after": "1" }
            : {},
      )
  }
  const allowed = (options.serves === "dashboard" ? dashboardRoutes : routes)[path]
  if (allowed === undefined) return fail(404, "NotFound", "not found")
  const read = readParams(url, allowed)
  if (!read.ok) return fail(400, "BadRequest", read.error)
  const params = read.params
  switch (path) {
    case "/healthz":
      return send(res, 200, contentTypes.text, "ok\n")
    case "/readyz": {
      // Members that are syncing or refused show on their MemberCluster; they never hold the hub unready.
      const available = options.availability()
      return available.answers
        ? send(res, 200, contentTypes.text, "ok\n")
        : send(res, 503, contentTypes.text, `${available.message}\n`)
    }
    case "/metrics":
      return send(res, 200, options.metrics.contentType, await options.metrics.render())
  }
  if (path === "/api/v1/report") {
    const available = options.availability()
    if (!available.answers)
      return sendJson(res, 503, { reason: available.reason, message: available.message })
    if (!params.since) return fail(400, "BadRequest", "since is required (e.g. 30d)")
    const now = Date.now()
    const since = parseSince(params.since, now)
    if ("error" in since) return fail(400, "BadRequest", since.error)
    return sendJson(res, 200, fleetReport(options.members.values(), since.start, now, params.cluster))
  }
  const filter = readFilter(params)
  if (!filter.ok) return fail(400, "BadRequest", filter.error)
  const available = options.availability()
  const info = { leader: options.isLeader(), hub: options.identity }
  if (path === "/api/v1/fleet") {
    if (!available.answers)
      return sendJson(res, 503, { reason: available.reason, message: available.message, ...info })
    const limit = params.limit === undefined ? undefined : intParam("limit", params.limit, 1, maxLimit)
    if (limit && !limit.ok) return fail(400, "BadRequest", limit.error)
    const cursor = params.continue === undefined ? undefined : decodeContinue(params.continue, filter.filter)
    if (cursor && !cursor.ok) return fail(400, "BadRequest", cursor.error)
    if (cursor && !limit) return fail(400, "BadRequest", "continue needs limit")
    // FleetBackupChecks are few: they come whole with the first page, never on a continue page.
    const fleetChecks = fleetCheckList(options.fleetChecks.values(), filter.filter)
    if (!limit)
      return sendJson(res, 200, {
        ...fleetView(options.members.values(), Date.now(), filter.filter),
        fleetChecks,
        ...info,
      })
    const kept =
      cursor?.cursor.snapshot === undefined
        ? undefined
        : snapshots.take(cursor.cursor.snapshot, filter.filter)
    const view = kept ?? fleetView(options.members.values(), Date.now(), filter.filter)
    const id = kept ? cursor?.cursor.snapshot : snapshots.newId()
    const page = fleetPage(view, limit.value, cursor?.cursor, filter.filter, id)
    if (page.metadata?.continue && id) snapshots.keep(id, view, filter.filter)
    return sendJson(res, 200, { ...page, ...(cursor ? {} : { fleetChecks }), ...info })
  }
  if (!available.answers)
    return send(res, 503, contentTypes.html, renderUnavailable(available.message, options.identity))
  const page =
    params.page === undefined ? { ok: true as const, value: 1 } : intParam("page", params.page, 1, 1_000_000)
  if (!page.ok) return fail(400, "BadRequest", page.error)
  const dashboard = {
    ...info,
    role: options.role?.() ?? (info.leader ? "leader" : "standby"),
    pageSize: settings.dashboardPageSize,
    traceUrlTemplate: settings.traceUrlTemplate,
  }
  switch (path) {
    case "/": {
      const view = {
        ...fleetView(options.members.values(), Date.now(), filter.filter),
        fleetChecks: fleetCheckList(options.fleetChecks.values(), filter.filter),
      }
      return send(
        res,
        200,
        contentTypes.html,
        renderOverview(view, { ...dashboard, page: page.value, params }),
      )
    }
    case "/cluster": {
      const name = params.name
      if (!name) return fail(400, "BadRequest", "name is required")
      const view = fleetView(options.members.values(), Date.now(), { cluster: name })
      const cluster = view.clusters[0]
      if (!cluster) return fail(404, "NotFound", `no member cluster named ${JSON.stringify(name)}`)
      return send(
        res,
        200,
        contentTypes.html,
        renderClusterPage(cluster, view.checks, { ...dashboard, page: page.value }),
      )
    }
    case "/check": {
      const { cluster, namespace, name } = params
      if (!cluster || !namespace || !name)
        return fail(400, "BadRequest", "cluster, namespace and name are required")
      const member = options.members.get(cluster)
      const object = member
        ?.checks()
        .find((c) => c.metadata.namespace === namespace && c.metadata.name === name)
      const check = member && checkViews(member).find((c) => c.namespace === namespace && c.name === name)
      if (!member || !object || !check)
        return fail(404, "NotFound", `no BackupCheck ${namespace}/${name} in cluster ${cluster}`)
      const clusterView = fleetView([member], Date.now()).clusters[0]!
      return send(res, 200, contentTypes.html, renderCheckPage(check, object, clusterView, dashboard))
    }
  }
}

/**
 * Starts listening (HTTPS when `tls` is given; its certificate can be replaced on the running server
 * with setSecureContext); resolves with the server and the port actually bound (port 0 picks a free one).
 */
export const startHubHttp = (
  options: HubHttpOptions,
): Promise<{ server: Server | HttpsServer; port: number }> =>
  new Promise((resolve, reject) => {
    const snapshots = makeSnapshots()
    const listener = (req: IncomingMessage, res: ServerResponse) => {
      handle(options, snapshots, req, res).catch((e: unknown) => {
        if (!res.headersSent)
          send(res, 500, contentTypes.text, `internal error: ${e instanceof Error ? e.message : String(e)}\n`)
      })
    }
    // HTTP/1.1 only (node's https server does not speak HTTP/2), as controller-runtime turns HTTP/2 off.
    const server = options.tls
      ? createHttpsServer(
          { ...tlsServerOptions(options.tls), handshakeTimeout: handshakeTimeoutMs },
          listener,
        )
      : createServer(listener)
    server.once("error", reject)
    server.listen(options.port, options.host, () => {
      const addr = server.address()
      resolve({ server, port: typeof addr === "object" && addr ? addr.port : options.port })
    })
  })
