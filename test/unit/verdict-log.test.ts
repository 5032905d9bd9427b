// Every verdict once as an OpenTelemetry log record: the exporters chosen from OTEL_* env, and a record
// as an OTLP receiver in the test gets it (the real OTLP/HTTP JSON exporter, over loopback).
import { createServer, type Server } from "node:http"
import { afterAll, assert, beforeAll, describe, it, vi } from "@effect/vitest"
import { Effect, Result } from "effect"
import type { LastRun } from "../../src/api/backupcheck.ts"
import { logExportersFromEnv, VerdictLog, VerdictLogLive } from "../../src/observability/verdict-log.ts"

describe("logExportersFromEnv", () => {
  const kinds = (env: Record<string, string>) => Result.getOrThrow(logExportersFromEnv(env))
  it("follows the standard variables, like traces", () => {
    assert.deepStrictEqual(kinds({}), [])
    assert.deepStrictEqual(kinds({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318" }), ["otlp-http/protobuf"])
    assert.deepStrictEqual(
      kinds({
        OTEL_EXPORTER_OTLP_LOGS_ENDPOINT: "http://c:4318/v1/logs",
        OTEL_EXPORTER_OTLP_LOGS_PROTOCOL: "http/json",
      }),
      ["otlp-http/json"],
    )
    assert.deepStrictEqual(kinds({ OTEL_LOGS_EXPORTER: "console,otlp" }), ["console", "otlp-http/protobuf"])
    assert.deepStrictEqual(kinds({ OTEL_LOGS_EXPORTER: "none", OTEL_EXPORTER_OTLP_ENDPOINT: "http://c" }), [])
    assert.deepStrictEqual(kinds({ OTEL_SDK_DISABLED: "true", OTEL_LOGS_EXPORTER: "otlp" }), [])
    assert.isTrue(Result.isFailure(logExportersFromEnv({ OTEL_LOGS_EXPORTER: "kafka" })))
    assert.isTrue(
      Result.isFailure(
        logExportersFromEnv({ OTEL_LOGS_EXPORTER: "otlp", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" }),
      ),
    )
  })
})

describe("verdict log records over OTLP", () => {
  let server: Server
  const received: unknown[] = []
  let endpoint = ""
  beforeAll(async () => {
    server = createServer((req, res) => {
      let body = ""
      req.on("data", (d) => {
        body += String(d)
      })
      req.on("end", () => {
        if (req.url === "/v1/logs") received.push(JSON.parse(body))
        res.writeHead(200, { "content-type": "application/json" }).end("{}")
      })
    })
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r))
    const address = server.address()
    endpoint = `http://127.0.0.1:${typeof address === "object" && address ? address.port : 0}/v1/logs`
  })
  afterAll(() => new Promise<void>((r) => server.close(() => r())))

  const run: LastRun = {
    jobName: "orders-g1",
    runID: "g1",
    backupName: "orders-2026-11-30",
    startTime: "2026-12-01T02:00:00Z",
    completionTime: "2026-12-01T02:01:30Z",
    result: "Failed",
    phases: [
      {
        name: "restore",
        result: "Succeeded",
        reason: "RestoreSucceeded",
        startTime: "2026-12-01T02:00:00Z",
        completionTime: "2026-12-01T02:00:41Z",
      },
      {
        name: "validation",
        result: "Failed",
        reason: "ValidationFailed",
        startTime: "2026-12-01T02:00:42Z",
        completionTime: "2026-12-01T02:01:30Z",
        message: "1199 rows, expected 1200",
        dataTimestamp: "2026-12-01T01:58:00Z",
      },
    ],
    traceID: "0af7651916cd43dd8448eb211c80319c",
    specHash: "0123456789abcdef",
  }

  it.effect("emits one record per verdict, in the run's trace, flushed when the hub's scope closes", () =>
    Effect.gen(function* () {
      vi.stubEnv("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", endpoint)
      vi.stubEnv("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "http/json")
      // Provided for this effect alone: the layer's scope closes (and flushes) when it ends.
      yield* Effect.gen(function* () {
        const log = yield* VerdictLog
        log.emit({
          cluster: "eu-1",
          namespace: "shop",
          name: "orders",
          run,
          traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        })
      }).pipe(Effect.provide(VerdictLogLive({ serviceName: "fleetcheck-hub-test" })))
      vi.unstubAllEnvs()
      const records = received.flatMap((r: any) =>
        r.resourceLogs.flatMap((rl: any) =>
          rl.scopeLogs.flatMap((sl: any) => sl.logRecords.map((lr: any) => ({ resource: rl.resource, lr }))),
        ),
      )
      assert.strictEqual(records.length, 1)
      const { resource, lr } = records[0]!
      const attrs = Object.fromEntries(
        lr.attributes.map((a: any) => [
          a.key,
          a.value.stringValue ?? a.value.doubleValue ?? a.value.intValue,
        ]),
      )
      assert.deepInclude(attrs, {
        "event.name": "fleetcheck.verdict",
        "k8s.cluster.name": "eu-1",
        "k8s.namespace.name": "shop",
        "fleetcheck.check.name": "orders",
        "fleetcheck.run.id": "g1",
        "fleetcheck.result": "Failed",
        "fleetcheck.reason": "ValidationFailed",
        "fleetcheck.message": "1199 rows, expected 1200",
        "fleetcheck.backup.name": "orders-2026-11-30",
        "fleetcheck.restore.duration_seconds": 41,
        "fleetcheck.data_timestamp": "2026-12-01T01:58:00Z",
        "fleetcheck.phases": "restore=Succeeded,validation=Failed",
      })
      assert.strictEqual(lr.severityText, "WARN")
      assert.match(lr.body.stringValue, /eu-1\/shop\/orders run g1: Failed \(ValidationFailed\)/)
      assert.strictEqual(lr.traceId, "0af7651916cd43dd8448eb211c80319c")
      assert.strictEqual(lr.spanId, "b7ad6b7169203331")
      assert.include(JSON.stringify(resource), "fleetcheck-hub-test")
    }),
  )

  it.effect("without exporters configured, emitting costs nothing and sends nothing", () =>
    Effect.gen(function* () {
      const before = received.length
      yield* Effect.gen(function* () {
        const log = yield* VerdictLog
        log.emit({ cluster: "c", namespace: "n", name: "x", run })
      }).pipe(Effect.provide(VerdictLogLive({ env: {} })))
      assert.strictEqual(received.length, before)
    }),
  )
})
