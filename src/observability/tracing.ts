// Tracing: Effect spans (Effect.fn, Effect.withSpan) become OpenTelemetry spans through
// @effect/opentelemetry's NodeSdk layer. What is exported follows the standard OTEL_* environment:
//   OTEL_SDK_DISABLED=true, OTEL_TRACES_EXPORTER=none → nothing
//   OTEL_TRACES_EXPORTER=otlp|console (comma list)   → those exporters
//   unset, but an OTLP endpoint is set                → otlp
//   nothing set                                       → nothing
// otlp speaks OTEL_EXPORTER_OTLP_[TRACES_]PROTOCOL: http/protobuf (the default) or http/json; the
// exporter itself reads the endpoint, headers, timeout and compression from the environment, and the
// BatchSpanProcessor reads OTEL_BSP_*, the provider OTEL_TRACES_SAMPLER[_ARG].
//
// Even with nothing exported the OTel tracer stays installed (with a no-op processor), so spans still
// get W3C trace and span ids, sampling follows a traceparent's flags, and behaviour does not change
// when an exporter is turned on.
import * as NodeSdk from "@effect/opentelemetry/NodeSdk"
import * as OtelTracer from "@effect/opentelemetry/OtelTracer"
import type * as Resource from "@effect/opentelemetry/Resource"
import { createContextKey, context as otelContext } from "@opentelemetry/api"
import {
  BatchSpanProcessor,
  ConsoleSpanExporter,
  NoopSpanProcessor,
  type SpanExporter,
  type SpanProcessor,
} from "@opentelemetry/sdk-trace-base"
import { Context, Data, Effect, Exit, Layer, Option, Result, Tracer } from "effect"

export class TracingConfigError extends Data.TaggedError("TracingConfigError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

export interface TracingOptions {
  /** service.name (default: OTEL_SERVICE_NAME, or service.name in OTEL_RESOURCE_ATTRIBUTES, else "fleetcheck"). */
  readonly serviceName?: string
  /** Replaces the processors chosen from the environment (tests pass SimpleSpanProcessor(InMemorySpanExporter)). */
  readonly spanProcessor?: SpanProcessor | ReadonlyArray<SpanProcessor>
}

export type TraceExporterKind = "otlp-http/protobuf" | "otlp-http/json" | "console"

type Env = Readonly<Record<string, string | undefined>>

const envValue = (env: Env, key: string): string | undefined => {
  const value = env[key]?.trim()
  return value === undefined || value === "" ? undefined : value
}

/** The trace exporters the environment asks for, in order; a value we cannot honour is an error. */
export const traceExportersFromEnv = (
  env: Env,
): Result.Result<ReadonlyArray<TraceExporterKind>, TracingConfigError> => {
  if (envValue(env, "OTEL_SDK_DISABLED")?.toLowerCase() === "true") return Result.succeed([])
  const listed = envValue(env, "OTEL_TRACES_EXPORTER")
    ?.split(",")
    .map((name) => name.trim().toLowerCase())
    .filter((name) => name !== "")
  const endpoint =
    envValue(env, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") ?? envValue(env, "OTEL_EXPORTER_OTLP_ENDPOINT")
  const names = listed !== undefined && listed.length > 0 ? listed : endpoint !== undefined ? ["otlp"] : []
  // "none" anywhere wins: the safer reading of a contradictory setting
  if (names.includes("none")) return Result.succeed([])
  const kinds: Array<TraceExporterKind> = []
  for (const name of new Set(names)) {
    if (name === "console") {
      kinds.push("console")
    } else if (name === "otlp") {
      const protocol =
        envValue(env, "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") ??
        envValue(env, "OTEL_EXPORTER_OTLP_PROTOCOL") ??
        "http/protobuf"
      if (protocol === "http/protobuf") kinds.push("otlp-http/protobuf")
      else if (protocol === "http/json") kinds.push("otlp-http/json")
      else {
        return Result.fail(
          new TracingConfigError({
            message: `OTLP protocol "${protocol}" is not supported for traces; use http/protobuf or http/json`,
          }),
        )
      }
    } else {
      return Result.fail(
        new TracingConfigError({
          message: `OTEL_TRACES_EXPORTER "${name}" is not supported; use otlp, console or none`,
        }),
      )
    }
  }
  return Result.succeed(kinds)
}

// Exporter modules are imported only when used: the protobuf one pulls in protobufjs, which a hub
// that exports nothing should not pay for at start-up.
const makeExporter = (kind: TraceExporterKind): Effect.Effect<SpanExporter, TracingConfigError> =>
  Effect.tryPromise({
    try: async (): Promise<SpanExporter> => {
      switch (kind) {
        case "otlp-http/protobuf":
          return new (await import("@opentelemetry/exporter-trace-otlp-proto")).OTLPTraceExporter()
        case "otlp-http/json":
          return new (await import("@opentelemetry/exporter-trace-otlp-http")).OTLPTraceExporter()
        case "console":
          return new ConsoleSpanExporter()
      }
    },
    catch: (cause) => new TracingConfigError({ message: `cannot create the ${kind} trace exporter`, cause }),
  })

/** Batch processors for the exporters the environment asks for; none when nothing is configured. */
export const spanProcessorsFromEnv = (
  env: Env = process.env,
): Effect.Effect<ReadonlyArray<SpanProcessor>, TracingConfigError> =>
  Effect.gen(function* () {
    const kinds = yield* Effect.fromResult(traceExportersFromEnv(env))
    const processors: Array<SpanProcessor> = []
    for (const kind of kinds) processors.push(new BatchSpanProcessor(yield* makeExporter(kind)))
    return processors as ReadonlyArray<SpanProcessor>
  })

const serviceNameFromEnv = (env: Env): boolean =>
  envValue(env, "OTEL_SERVICE_NAME") !== undefined ||
  /(^|,)\s*service\.name\s*=/.test(envValue(env, "OTEL_RESOURCE_ATTRIBUTES") ?? "")

/**
 * Whether OpenTelemetry's global context manager propagates contexts: `context.with(c, f)` makes `c`
 * the active context inside `f`. None is registered by the hub, and then OpenTelemetry's default
 * no-op manager runs `f` with the root context still active.
 */
export const otelContextPropagates = (): boolean => {
  const probe = otelContext.active().setValue(propagationProbe, true)
  return otelContext.with(probe, () => otelContext.active() === probe)
}
const propagationProbe = createContextKey("fleetcheck/observability/tracing/propagation-probe")

/**
 * The OpenTelemetry tracer's spans, without its per-operation context hook when no context manager
 * propagates contexts. The hook makes each Effect operation run under `context.with(the current span)`
 * so OpenTelemetry-instrumented libraries see the span; it builds two OpenTelemetry contexts per
 * operation, and with the no-op manager nothing can ever read them: that was about 40% of a converged
 * reconcile's CPU (issue 11). Every span is created, parented and exported exactly as before.
 */
const spansOnlyWhenContextIsInert = Layer.effect(
  Tracer.Tracer,
  Effect.map(
    Effect.tracer,
    (tracer): Tracer.Tracer =>
      tracer.context === undefined || otelContextPropagates()
        ? tracer
        : Tracer.make({ span: (options) => tracer.span(options) }),
  ),
)

/**
 * The tracing layer: provide it once, at the top of the app. Its scope's end flushes and shuts the
 * processors down (an InMemorySpanExporter is emptied then: read test spans before).
 */
export const TracingLive = (
  options: TracingOptions = {},
): Layer.Layer<Resource.Resource, TracingConfigError> =>
  spansOnlyWhenContextIsInert.pipe(
    Layer.provideMerge(
      NodeSdk.layer(
        Effect.gen(function* () {
          const env = process.env
          const chosen = options.spanProcessor ?? (yield* spanProcessorsFromEnv(env))
          const processors = Array.isArray(chosen) ? chosen : [chosen as SpanProcessor]
          // an explicit name wins; otherwise the environment's, and only then our default
          const serviceName = options.serviceName ?? (serviceNameFromEnv(env) ? undefined : "fleetcheck")
          return {
            spanProcessor: processors.length > 0 ? processors : [new NoopSpanProcessor()],
            ...(serviceName !== undefined ? { resource: { serviceName } } : {}),
          }
        }),
      ),
    ),
  )

const traceparentPattern = /^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})(-.*)?$/
const allZero = /^0+$/

/**
 * The parent Effect needs to continue a W3C trace: pass it as `Effect.withSpan(name, { parent })`
 * or `Effect.fn(name, { parent })`. Undefined when the header is malformed (version ff, all-zero
 * ids, extra fields on version 00), so a bad TRACEPARENT starts a fresh trace instead of failing.
 * The flags travel along: an unsampled parent gives unsampled children.
 */
export const spanContextFromTraceparent = (
  traceparent: string,
  tracestate?: string,
): Tracer.ExternalSpan | undefined => {
  const match = traceparentPattern.exec(traceparent.trim())
  if (match === null) return undefined
  const version = match[1]!
  const traceId = match[2]!
  const spanId = match[3]!
  const flags = match[4]!
  if (version === "ff" || (version === "00" && match[5] !== undefined)) return undefined
  if (allZero.test(traceId) || allZero.test(spanId)) return undefined
  return OtelTracer.makeExternalSpan({
    traceId,
    spanId,
    traceFlags: Number.parseInt(flags, 16),
    ...(tracestate !== undefined && tracestate !== "" ? { traceState: tracestate } : {}),
  })
}

/** The W3C traceparent of a span, e.g. for a Job's TRACEPARENT so its spans join this trace. */
export const traceparentOf = (span: Tracer.AnySpan): string =>
  `00-${span.traceId}-${span.spanId}-${span.sampled ? "01" : "00"}`

/** A link for `Effect.withSpan(name, { links: [...] })`; undefined for a malformed traceparent. */
export const traceparentLink = (
  traceparent: string,
  attributes: Readonly<Record<string, unknown>> = {},
): Tracer.SpanLink | undefined => {
  const span = spanContextFromTraceparent(traceparent)
  return span === undefined ? undefined : { span, attributes }
}

/**
 * Links the current span (e.g. the reconcile span) to the trace of a traceparent. Succeeds with
 * false, doing nothing, when there is no current span or the traceparent is malformed.
 */
export const linkToTraceparent = (
  traceparent: string,
  attributes: Readonly<Record<string, unknown>> = {},
): Effect.Effect<boolean> =>
  Effect.map(Effect.option(Effect.currentSpan), (current) => {
    const link = traceparentLink(traceparent, attributes)
    if (Option.isNone(current) || link === undefined) return false
    current.value.addLinks([link])
    return true
  })

/** As linkToTraceparent, then runs the effect: `body.pipe(withLinkToTraceparent(tp))`. */
export const withLinkToTraceparent =
  (traceparent: string, attributes: Readonly<Record<string, unknown>> = {}) =>
  <A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R> =>
    Effect.andThen(linkToTraceparent(traceparent, attributes), self)

export interface RecordSpanOptions {
  readonly name: string
  readonly startTime: Date
  readonly endTime: Date
  /** The span's parent, e.g. spanContextFromTraceparent(run traceparent); absent: a new trace. */
  readonly parent?: Tracer.AnySpan
  readonly attributes?: Readonly<Record<string, unknown>>
  readonly links?: ReadonlyArray<Tracer.SpanLink>
  readonly kind?: Tracer.SpanKind
  /** Marks the span as failed, with this message. */
  readonly error?: string
}

const nanosOf = (date: Date): bigint => BigInt(date.getTime()) * 1_000_000n

/**
 * Records a finished span with explicit times, through whichever tracer is installed: for work whose
 * start the hub only knows afterwards (a restore Job's lifetime, possibly across a hub restart).
 */
export const recordSpan = (options: RecordSpanOptions): Effect.Effect<Tracer.Span> =>
  Effect.map(Effect.tracer, (tracer) => {
    const span = tracer.span({
      name: options.name,
      parent: Option.fromUndefinedOr(options.parent),
      annotations: Context.empty(),
      links: [...(options.links ?? [])],
      startTime: nanosOf(options.startTime),
      kind: options.kind ?? "internal",
      root: options.parent === undefined,
      sampled: options.parent?.sampled ?? true,
    })
    for (const [key, value] of Object.entries(options.attributes ?? {})) span.attribute(key, value)
    span.end(
      nanosOf(options.endTime),
      options.error === undefined ? Exit.void : Exit.fail(new Error(options.error)),
    )
    return span
  })
