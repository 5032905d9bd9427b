import * as OtelTracer from "@effect/opentelemetry/OtelTracer"
import { assert, describe, it } from "@effect/vitest"
import { context, type Context as OtelContext, ROOT_CONTEXT, SpanStatusCode, trace } from "@opentelemetry/api"
import {
  BatchSpanProcessor,
  InMemorySpanExporter,
  type ReadableSpan,
  SimpleSpanProcessor,
} from "@opentelemetry/sdk-trace-base"
import { Effect, Option, Result } from "effect"
import {
  linkToTraceparent,
  otelContextPropagates,
  recordSpan,
  spanContextFromTraceparent,
  spanProcessorsFromEnv,
  TracingLive,
  traceExportersFromEnv,
  traceparentOf,
  withLinkToTraceparent,
} from "../../src/observability/tracing.ts"

// The NodeSdk layer shuts its processors down when its scope closes, and InMemorySpanExporter.shutdown()
// empties it: each test therefore reads its spans inside the effect the layer is provided to.
const withExporter = <A, E>(body: (spans: () => ReadonlyArray<ReadableSpan>) => Effect.Effect<A, E>) => {
  const exporter = new InMemorySpanExporter()
  return body(() => exporter.getFinishedSpans()).pipe(
    Effect.provide(
      TracingLive({ serviceName: "fleetcheck-test", spanProcessor: new SimpleSpanProcessor(exporter) }),
    ),
  )
}

const byName = (spans: ReadonlyArray<ReadableSpan>, name: string): ReadableSpan => {
  const found = spans.filter((s) => s.name === name)
  assert.strictEqual(found.length, 1, `one span named ${name}, got ${spans.map((s) => s.name).join(", ")}`)
  return found[0]!
}

const runTraceId = "4bf92f3577b34da6a3ce929d0e0e4736"
const runSpanId = "00f067aa0ba902b7"
const runTraceparent = `00-${runTraceId}-${runSpanId}-01`

describe("tracing: Effect spans arrive as OpenTelemetry spans", () => {
  it.effect("an Effect.fn root span carries its attributes; a child nests under it", () =>
    withExporter((spans) =>
      Effect.gen(function* () {
        const child = Effect.fn("Kube.getJob")(function* () {
          yield* Effect.annotateCurrentSpan("k8s.job.name", "restore-1")
        })
        const reconcile = Effect.fn("reconcile backupcheck", {
          root: true,
          attributes: {
            "k8s.cluster.name": "east",
            "k8s.namespace.name": "db",
            "fleetcheck.reconcile.id": "r1",
          },
        })(function* () {
          yield* child()
          yield* Effect.annotateCurrentSpan("fleetcheck.outcome", "success")
        })
        // started inside another span: root: true must still make it a root
        yield* reconcile().pipe(Effect.withSpan("outer"))

        const root = byName(spans(), "reconcile backupcheck")
        const inner = byName(spans(), "Kube.getJob")
        assert.strictEqual(root.parentSpanContext, undefined)
        assert.strictEqual(root.attributes["k8s.cluster.name"], "east")
        assert.strictEqual(root.attributes["k8s.namespace.name"], "db")
        assert.strictEqual(root.attributes["fleetcheck.reconcile.id"], "r1")
        assert.strictEqual(root.attributes["fleetcheck.outcome"], "success")
        assert.strictEqual(root.status.code, SpanStatusCode.OK)
        assert.match(root.spanContext().traceId, /^[0-9a-f]{32}$/)
        assert.notStrictEqual(root.spanContext().traceId, byName(spans(), "outer").spanContext().traceId)

        assert.strictEqual(inner.spanContext().traceId, root.spanContext().traceId)
        assert.strictEqual(inner.parentSpanContext?.spanId, root.spanContext().spanId)
        assert.strictEqual(inner.attributes["k8s.job.name"], "restore-1")
        assert.strictEqual(root.resource.attributes["service.name"], "fleetcheck-test")
      }),
    ),
  )

  it.effect("a failed span is marked as an error", () =>
    withExporter((spans) =>
      Effect.gen(function* () {
        yield* Effect.fail("conflict").pipe(Effect.withSpan("Kube.patchStatus"), Effect.ignore)
        const span = byName(spans(), "Kube.patchStatus")
        assert.strictEqual(span.status.code, SpanStatusCode.ERROR)
      }),
    ),
  )
})

describe("tracing: W3C traceparent", () => {
  it.effect("a span started from a traceparent joins that trace as a child of its span", () =>
    withExporter((spans) =>
      Effect.gen(function* () {
        const parent = spanContextFromTraceparent(runTraceparent)
        assert.isDefined(parent)
        const child = Effect.fn("Kube.listPods")(function* () {})
        yield* child().pipe(
          Effect.withSpan("verification", { parent, attributes: { "fleetcheck.run": "7" } }),
        )

        const verification = byName(spans(), "verification")
        assert.strictEqual(verification.spanContext().traceId, runTraceId)
        assert.strictEqual(verification.parentSpanContext?.spanId, runSpanId)
        assert.strictEqual(verification.parentSpanContext?.isRemote, true)
        assert.strictEqual(verification.attributes["fleetcheck.run"], "7")
        const nested = byName(spans(), "Kube.listPods")
        assert.strictEqual(nested.spanContext().traceId, runTraceId)
        assert.strictEqual(nested.parentSpanContext?.spanId, verification.spanContext().spanId)
      }),
    ),
  )

  it.effect("an unsampled traceparent keeps its trace id but records nothing", () =>
    withExporter((spans) =>
      Effect.gen(function* () {
        const parent = spanContextFromTraceparent(`00-${runTraceId}-${runSpanId}-00`)
        const span = yield* Effect.currentSpan.pipe(Effect.withSpan("verification", { parent }))
        assert.strictEqual(span.traceId, runTraceId)
        assert.isFalse(span.sampled)
        assert.strictEqual(traceparentOf(span), `00-${runTraceId}-${span.spanId}-00`)
        assert.deepStrictEqual(spans(), [])
      }),
    ),
  )

  it("rejects malformed traceparents, so a bad header starts a new trace", () => {
    const bad = [
      "",
      "garbage",
      `00-${runTraceId}-${runSpanId}`, // no flags
      `00-${runTraceId.toUpperCase()}-${runSpanId}-01`, // upper case
      `ff-${runTraceId}-${runSpanId}-01`, // forbidden version
      `00-${"0".repeat(32)}-${runSpanId}-01`, // all-zero trace id
      `00-${runTraceId}-${"0".repeat(16)}-01`, // all-zero span id
      `00-${runTraceId}-${runSpanId}-01-extra`, // version 00 has exactly four fields
      `00-${runTraceId}1-${runSpanId}-01`, // trace id too long
    ]
    for (const tp of bad) assert.isUndefined(spanContextFromTraceparent(tp), tp)
    // a later version may add fields; what we understand is still read
    assert.strictEqual(
      spanContextFromTraceparent(`01-${runTraceId}-${runSpanId}-01-more`)?.traceId,
      runTraceId,
    )
    const parsed = spanContextFromTraceparent(` ${runTraceparent} `)
    assert.strictEqual(parsed?.spanId, runSpanId)
    assert.isTrue(parsed?.sampled)
    assert.strictEqual(parsed && traceparentOf(parsed), runTraceparent)
  })
})

describe("tracing: links", () => {
  it.effect("linkToTraceparent links the current span to the run's trace", () =>
    withExporter((spans) =>
      Effect.gen(function* () {
        const linked = yield* linkToTraceparent(runTraceparent, { "fleetcheck.link": "verification" }).pipe(
          Effect.withSpan("reconcile backupcheck", { root: true }),
        )
        assert.isTrue(linked)
        const reconcile = byName(spans(), "reconcile backupcheck")
        assert.notStrictEqual(reconcile.spanContext().traceId, runTraceId)
        assert.strictEqual(reconcile.links.length, 1)
        const link = reconcile.links[0]!
        assert.strictEqual(link.context.traceId, runTraceId)
        assert.strictEqual(link.context.spanId, runSpanId)
        assert.strictEqual(link.attributes?.["fleetcheck.link"], "verification")

        // nothing to link to, or nothing to link from: a no-op, never a failure
        assert.isFalse(yield* linkToTraceparent("garbage").pipe(Effect.withSpan("other")))
        assert.strictEqual(byName(spans(), "other").links.length, 0)
      }),
    ),
  )

  it.effect("withLinkToTraceparent links the enclosing span, then runs the body", () =>
    withExporter((spans) =>
      Effect.gen(function* () {
        const value = yield* Effect.succeed(42).pipe(
          withLinkToTraceparent(runTraceparent),
          Effect.withSpan("reconcile backupcheck"),
        )
        assert.strictEqual(value, 42)
        const links = byName(spans(), "reconcile backupcheck").links
        assert.deepStrictEqual(
          links.map((l) => [l.context.traceId, l.context.spanId]),
          [[runTraceId, runSpanId]],
        )
      }),
    ),
  )
})

describe("tracing: recordSpan", () => {
  it.effect("records a finished span with explicit times under a traceparent", () =>
    withExporter((spans) =>
      Effect.gen(function* () {
        const start = new Date("2026-11-29T10:00:00.000Z")
        const end = new Date("2026-11-29T10:05:30.250Z")
        const span = yield* recordSpan({
          name: "verification",
          parent: spanContextFromTraceparent(runTraceparent),
          startTime: start,
          endTime: end,
          attributes: { "k8s.cluster.name": "east", "fleetcheck.run.outcome": "failed" },
          error: "restore Job failed",
        })
        assert.strictEqual(span.traceId, runTraceId)
        const exported = byName(spans(), "verification")
        assert.strictEqual(exported.spanContext().spanId, span.spanId)
        assert.strictEqual(exported.parentSpanContext?.spanId, runSpanId)
        assert.deepStrictEqual(exported.startTime, [start.getTime() / 1000, 0])
        assert.deepStrictEqual(exported.endTime, [Math.floor(end.getTime() / 1000), 250_000_000])
        assert.strictEqual(exported.attributes["k8s.cluster.name"], "east")
        assert.strictEqual(exported.status.code, SpanStatusCode.ERROR)
        assert.strictEqual(exported.status.message, "restore Job failed")
      }),
    ),
  )
})

describe("tracing: configuration", () => {
  const plan = (env: Record<string, string>) => {
    const result = traceExportersFromEnv(env)
    return Result.isSuccess(result) ? result.success : `error: ${result.failure.message}`
  }

  it("exports only what the OTEL_* environment asks for", () => {
    assert.deepStrictEqual(plan({}), [])
    assert.deepStrictEqual(plan({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://collector:4318" }), [
      "otlp-http/protobuf",
    ])
    assert.deepStrictEqual(plan({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "http://c:4318/v1/traces" }), [
      "otlp-http/protobuf",
    ])
    assert.deepStrictEqual(
      plan({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_EXPORTER_OTLP_PROTOCOL: "http/json" }),
      ["otlp-http/json"],
    )
    assert.deepStrictEqual(
      plan({
        OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318",
        OTEL_EXPORTER_OTLP_PROTOCOL: "http/json",
        OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: "http/protobuf",
      }),
      ["otlp-http/protobuf"],
    )
    assert.deepStrictEqual(
      plan({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_TRACES_EXPORTER: "none" }),
      [],
    )
    assert.deepStrictEqual(
      plan({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_SDK_DISABLED: "true" }),
      [],
    )
    // an explicit exporter needs no endpoint (OTLP then uses its default, localhost:4318)
    assert.deepStrictEqual(plan({ OTEL_TRACES_EXPORTER: "otlp, console" }), ["otlp-http/protobuf", "console"])
    assert.deepStrictEqual(plan({ OTEL_TRACES_EXPORTER: "" }), [])
    assert.match(String(plan({ OTEL_TRACES_EXPORTER: "zipkin" })), /^error: .*zipkin/)
    assert.match(
      String(plan({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://c:4318", OTEL_EXPORTER_OTLP_PROTOCOL: "grpc" })),
      /^error: .*grpc/,
    )
  })

  it.effect("builds a batching OTLP processor when an endpoint is configured", () =>
    Effect.gen(function* () {
      const processors = yield* spanProcessorsFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: "http://127.0.0.1:9" })
      assert.strictEqual(processors.length, 1)
      assert.instanceOf(processors[0], BatchSpanProcessor)
      yield* Effect.promise(() => Promise.all(processors.map((p) => p.shutdown())))
      assert.deepStrictEqual(yield* spanProcessorsFromEnv({}), [])
    }),
  )

  it.effect("with nothing configured, spans are still OpenTelemetry spans with W3C ids", () =>
    Effect.gen(function* () {
      const span = yield* Effect.currentSpan.pipe(Effect.withSpan("reconcile backupcheck"))
      assert.isTrue(
        Option.isSome(yield* Effect.serviceOption(OtelTracer.OtelTracer)),
        "the OTel tracer is installed",
      )
      assert.match(span.traceId, /^[0-9a-f]{32}$/)
      assert.match(span.spanId, /^[0-9a-f]{16}$/)
      assert.match(traceparentOf(span), /^00-[0-9a-f]{32}-[0-9a-f]{16}-01$/)
    }).pipe(Effect.provide(TracingLive())),
  )

  // The OTel tracer's per-operation context hook only matters to a context manager that propagates.
  it.effect(
    "without a propagating context manager the tracer has no context hook, and every span is still exported",
    () =>
      withExporter((spans) =>
        Effect.gen(function* () {
          assert.isFalse(
            otelContextPropagates(),
            "OpenTelemetry's default context manager does not propagate",
          )
          assert.strictEqual((yield* Effect.tracer).context, undefined)
          const parent = Effect.gen(function* () {
            yield* Effect.void.pipe(Effect.withSpan("child"))
            // nothing outside Effect sees a span: the active context stays the root
            assert.strictEqual(trace.getActiveSpan(), undefined)
          }).pipe(Effect.withSpan("parent", { root: true }))
          for (let i = 0; i < 3; i++) yield* parent
          const exported = spans()
          assert.strictEqual(exported.filter((s) => s.name === "parent").length, 3)
          const children = exported.filter((s) => s.name === "child")
          assert.strictEqual(children.length, 3)
          for (const child of children) {
            const own = exported.find((s) => s.spanContext().spanId === child.parentSpanContext?.spanId)
            assert.strictEqual(own?.name, "parent")
            assert.strictEqual(own?.spanContext().traceId, child.spanContext().traceId)
          }
        }),
      ),
  )

  it.effect(
    "with a propagating context manager the hook stays: OpenTelemetry code sees the current span",
    () => {
      // The smallest propagating manager: a stack of the contexts `with` entered.
      const stack: Array<OtelContext> = []
      const manager = {
        active: () => stack.at(-1) ?? ROOT_CONTEXT,
        with: <A extends unknown[], F extends (...args: A) => ReturnType<F>>(
          ctx: OtelContext,
          fn: F,
          thisArg?: ThisParameterType<F>,
          ...args: A
        ): ReturnType<F> => {
          stack.push(ctx)
          try {
            return fn.call(thisArg, ...args)
          } finally {
            stack.pop()
          }
        },
        bind: <T>(_ctx: OtelContext, target: T): T => target,
        enable() {
          return this
        },
        disable() {
          stack.length = 0
          return this
        },
      }
      return Effect.acquireUseRelease(
        Effect.sync(() => context.setGlobalContextManager(manager)),
        () =>
          withExporter((spans) =>
            Effect.gen(function* () {
              assert.isTrue(otelContextPropagates())
              assert.isFunction((yield* Effect.tracer).context)
              const seen = yield* Effect.sync(() => trace.getActiveSpan()?.spanContext().spanId).pipe(
                Effect.withSpan("reconcile backupcheck", { root: true }),
              )
              assert.strictEqual(seen, byName(spans(), "reconcile backupcheck").spanContext().spanId)
            }),
          ),
        () => Effect.sync(() => context.disable()),
      )
    },
  )
})
