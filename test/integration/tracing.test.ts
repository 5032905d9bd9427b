// Traces over the wire: a real `fleetcheck hub` process exports OTLP/HTTP (JSON) to a small receiver in
// this test. One verification arrives as one trace: the run's trace id is status.lastRun.traceID and the
// Job's TRACEPARENT; the hub's verification span sits in it under the TRACEPARENT's span; reconcile root
// spans carry the SPEC attributes, link to the run's trace, and have the API calls as children.
import { type ChildProcess, spawn } from "node:child_process"
import { createServer, type Server } from "node:http"
import type { AddressInfo } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  installFleetcheck,
  type LocalCluster,
  type LocalFleet,
  registerWithSecret,
  startFleet,
} from "../../clusters/local-fleet/index.ts"
import { waitUntil } from "../support/wait.ts"

const bin = new URL("../../bin/fleetcheck", import.meta.url).pathname
const ns = "shop"

interface ReceivedSpan {
  traceId: string
  spanId: string
  parentSpanId: string
  name: string
  attributes: Record<string, unknown>
  links: Array<{ traceId: string; spanId: string }>
  status?: { code?: number }
  service: string
}

/** OTLP/JSON ids are hex; tolerate base64 from exporters that send bytes. */
const hexId = (id: string | undefined) =>
  !id ? "" : /^[0-9a-f]+$/i.test(id) ? id.toLowerCase() : Buffer.from(id, "base64").toString("hex")
const attrs = (list: Array<{ key: string; value: Record<string, unknown> }> = []) =>
  Object.fromEntries(list.map((a) => [a.key, Object.values(a.value)[0]]))

describe("tracing over OTLP/HTTP", () => {
  let fleet: LocalFleet
  let hubCluster: LocalCluster
  let member: LocalCluster
  let receiver: Server
  let hub: ChildProcess | undefined
  const spans: ReceivedSpan[] = []

  beforeAll(async () => {
    receiver = createServer((req, res) => {
      let body = ""
      req.setEncoding("utf8")
      req.on("data", (c: string) => {
        body += c
      })
      req.on("end", () => {
        if (req.url === "/v1/traces") {
          const doc = JSON.parse(body)
          for (const rs of doc.resourceSpans ?? []) {
            const service = String(attrs(rs.resource?.attributes)["service.name"] ?? "")
            for (const ss of rs.scopeSpans ?? []) {
              for (const s of ss.spans ?? []) {
                spans.push({
                  traceId: hexId(s.traceId),
                  spanId: hexId(s.spanId),
                  parentSpanId: hexId(s.parentSpanId),
                  name: s.name,
                  attributes: attrs(s.attributes),
                  links: (s.links ?? []).map((l: any) => ({
                    traceId: hexId(l.traceId),
                    spanId: hexId(l.spanId),
                  })),
                  status: s.status,
                  service,
                })
              }
            }
          }
        }
        res.writeHead(200, { "content-type": "application/json" })
        res.end("{}")
      })
    })
    await new Promise<void>((r) => receiver.listen(0, "127.0.0.1", () => r()))
    fleet = await startFleet({
      clusters: [{ name: "hub", workloads: false, controllerManager: false }, "member"],
    })
    hubCluster = fleet.cluster("hub")
    member = fleet.cluster("member")
    await installFleetcheck(hubCluster, [member])
    await member.api("POST", "/api/v1/namespaces", { metadata: { name: ns } })
    await registerWithSecret(hubCluster, member, {})
    const port = (receiver.address() as AddressInfo).port
    hub = spawn(
      bin,
      ["hub", "--http-address", "127.0.0.1:0", "--leader-elect", "false", "--running-poll", "2s"],
      {
        env: {
          ...process.env,
          KUBECONFIG: hubCluster.kubeconfigPath,
          OTEL_EXPORTER_OTLP_ENDPOINT: `http://127.0.0.1:${port}`,
          OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
          OTEL_BSP_SCHEDULE_DELAY: "200",
          FLEETCHECK_LOG_LEVEL: "Warn",
        },
        stdio: ["ignore", "inherit", "inherit"],
      },
    )
  })

  afterAll(async () => {
    if (hub && hub.exitCode === null) {
      hub.kill("SIGTERM")
      await new Promise((r) => hub?.once("exit", r))
    }
    await fleet?.stop()
    await new Promise((r) => receiver?.close(r))
  })

  it("one verification arrives as one trace with the expected spans and attributes", async () => {
    const res = await member.api("POST", `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`, {
      apiVersion: "fleetcheck.io/v1alpha1",
      kind: "BackupCheck",
      metadata: { name: "orders", namespace: ns },
      spec: {
        backup: { name: "orders-2026-11-29" },
        jobTemplate: {
          spec: {
            template: {
              metadata: { annotations: { "fleetcheck.io/simulate-delay": "1s" } },
              spec: { containers: [{ name: "restore", image: "restore:1" }] },
            },
          },
        },
      },
    })
    expect(res.status).toBe(201)
    const check = await waitUntil("Verified=True", 60_000, async () => {
      const o = (await member.api("GET", `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks/orders`))
        .body
      const v = (o.status?.conditions ?? []).find((c: any) => c.type === "Verified")
      return v?.status === "True" ? o : undefined
    })
    const traceID: string = check.status.lastRun.traceID
    const job = (
      await member.api("GET", `/apis/batch/v1/namespaces/${ns}/jobs/${check.status.lastRun.jobName}`)
    ).body
    const traceparent: string = job.spec.template.spec.containers[0].env.find(
      (e: any) => e.name === "TRACEPARENT",
    ).value
    const [, tpTrace, tpSpan] = traceparent.split("-")
    expect(tpTrace).toBe(traceID)

    const verification = await waitUntil("the verification span", 20_000, async () =>
      spans.find((s) => s.name === "verification" && s.traceId === traceID),
    )
    console.log(`verification span: ${JSON.stringify(verification)}`)
    expect(verification.parentSpanId).toBe(tpSpan)
    expect(verification.service).toBe("fleetcheck-hub")
    expect(verification.attributes).toMatchObject({
      "k8s.cluster.name": "member",
      "k8s.namespace.name": ns,
      "k8s.job.name": check.status.lastRun.jobName,
      "fleetcheck.check.name": "orders",
      "fleetcheck.run.id": "g1",
      "fleetcheck.result": "Succeeded",
      "fleetcheck.reason": "RestoreSucceeded",
    })

    const reconciles = spans.filter(
      (s) => s.name === "reconcile backupcheck" && s.attributes["fleetcheck.check.name"] === "orders",
    )
    expect(reconciles.length).toBeGreaterThan(0)
    for (const r of reconciles) {
      expect(r.parentSpanId).toBe("")
      expect(r.attributes).toMatchObject({ "k8s.cluster.name": "member", "k8s.namespace.name": ns })
      expect(String(r.attributes["fleetcheck.reconcile.id"])).not.toBe("")
      expect(["success", "requeue_after", "conflict", "error"]).toContain(
        r.attributes["fleetcheck.reconcile.outcome"],
      )
    }
    const linked = reconciles.filter((r) => r.links.some((l) => l.traceId === traceID))
    expect(linked.length).toBeGreaterThan(0)
    const calls = spans.filter(
      (s) => s.name === "kube.request" && reconciles.some((r) => r.spanId === s.parentSpanId),
    )
    expect(calls.length).toBeGreaterThan(0)
    expect(
      calls.some(
        (c) =>
          c.attributes["http.request.method"] === "POST" &&
          String(c.attributes["url.path"]).endsWith("/jobs"),
      ),
    ).toBe(true)
    for (const c of calls) expect(String(c.attributes["url.path"])).not.toMatch(/token|secret/i)
    console.log(
      `trace ${traceID}: ${reconciles.length} reconcile spans (${linked.length} linked), ${calls.length} API-call children, verification ${verification.spanId}`,
    )
  })
})
