// Every verdict once as an OpenTelemetry log record (issue 12, ADR 0009), so long-term audit evidence
// lands in the user's log store. Configured like traces from the standard OTEL_* environment:
//   OTEL_SDK_DISABLED=true, OTEL_LOGS_EXPORTER=none → nothing
//   OTEL_LOGS_EXPORTER=otlp|console (comma list)    → those exporters
//   unset, but an OTLP endpoint is set              → otlp
// otlp speaks OTEL_EXPORTER_OTLP_[LOGS_]PROTOCOL, http/protobuf (default) or http/json; the exporter
// reads its endpoint and headers from the same environment. Records go through a batch processor,
// flushed when the hub's scope closes. "Once": the hub whose status write recorded the verdict emits
// it, after the write (two hubs cannot both write one verdict: the write carries a resourceVersion).
import { context, TraceFlags, trace } from "@opentelemetry/api"
import { type Logger, SeverityNumber } from "@opentelemetry/api-logs"
import { resourceFromAttributes } from "@opentelemetry/resources"
import {
  BatchLogRecordProcessor,
  ConsoleLogRecordExporter,
  LoggerProvider,
  type LogRecordExporter,
  type LogRecordProcessor,
} from "@opentelemetry/sdk-logs"
import { Context, Data, Effect, Layer, Result } from "effect"
import type { LastRun } from "../api/backupcheck.ts"

export class VerdictLogConfigError extends Data.TaggedError("VerdictLogConfigError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

export type LogExporterKind = "otlp-http/protobuf" | "otlp-http/json" | "console"

type Env = Readonly<Record<string, string | undefined>>

const envValue = (env: Env, key: string): string | undefined => {
  const value = env[key]?.trim()
  return value === undefined || value === "" ? undefined : value
}

/** The log exporters the environment asks for, in order; a value we cannot honour is an error. */
export const logExportersFromEnv = (
  env: Env,
): Result.Result<ReadonlyArray<LogExporterKind>, VerdictLogConfigError> => {
  if (envValue(env, "OTEL_SDK_DISABLED")?.toLowerCase() === "true") return Result.succeed([])
  const listed = envValue(env, "OTEL_LOGS_EXPORTER")
    ?.split(",")
    .map((name) => name.trim().toLowerCase())
    .filter((name) => name !== "")
  const endpoint =
    envValue(env, "OTEL_EXPORTER_OTLP_LOGS_ENDPOINT") ?? envValue(env, "OTEL_EXPORTER_OTLP_ENDPOINT")
  const names = listed !== undefined && listed.length > 0 ? listed : endpoint !== undefined ? ["otlp"] : []
  if (names.includes("none")) return Result.succeed([])
  const kinds: Array<LogExporterKind> = []
  for (const name of new Set(names)) {
    if (name === "console") kinds.push("console")
    else if (name === "otlp") {
      const protocol =
        envValue(env, "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL") ??
        envValue(env, "OTEL_EXPORTER_OTLP_PROTOCOL") ??
        "http/protobuf"
      if (protocol === "http/protobuf") kinds.push("otlp-http/protobuf")
      else if (protocol === "http/json") kinds.push("otlp-http/json")
      else
        return Result.fail(
          new VerdictLogConfigError({
            message: `OTLP protocol "${protocol}" is not supported for logs; use http/protobuf or http/json`,
          }),
        )
    } else
      return Result.fail(
        new VerdictLogConfigError({
          message: `OTEL_LOGS_EXPORTER "${name}" is not supported; use otlp, console or none`,
        }),
      )
  }
  return Result.succeed(kinds)
}

// Imported only when used, as the trace exporters are.
const makeExporter = (kind: LogExporterKind): Effect.Effect<LogRecordExporter, VerdictLogConfigError> =>
  Effect.tryPromise({
    try: async (): Promise<LogRecordExporter> => {
      switch (kind) {
        case "otlp-http/protobuf":
          return new (await import("@opentelemetry/exporter-logs-otlp-proto")).OTLPLogExporter()
        case "otlp-http/json":
          return new (await import("@opentelemetry/exporter-logs-otlp-http")).OTLPLogExporter()
        case "console":
          return new ConsoleLogRecordExporter()
      }
    },
    catch: (cause) => new VerdictLogConfigError({ message: `cannot create the ${kind} log exporter`, cause }),
  })

/** One recorded verdict: where, which run, and the run as status.history holds it. */
export interface VerdictRecord {
  readonly cluster: string
  readonly namespace: string
  readonly name: string
  readonly run: LastRun
  /** The run's W3C traceparent (its trace and the span id the Job received). */
  readonly traceparent?: string | undefined
}

/** The record's attributes: flat, bounded (status strings are bounded by the schema), no secrets. */
export const verdictAttributes = (v: VerdictRecord): Record<string, string | number> => {
  const { run } = v
  const deciding = run.phases?.at(-1)
  const restore = run.phases?.find((p) => p.name === "restore")
  const restoreMs =
    restore?.startTime && restore.completionTime
      ? Date.parse(restore.completionTime) - Date.parse(restore.startTime)
      : Number.NaN
  const dataTimestamp =
    run.phases?.find((p) => p.name === "validation")?.dataTimestamp ?? restore?.dataTimestamp
  const attributes: Record<string, string | number> = {
    "event.name": "fleetcheck.verdict",
    "k8s.cluster.name": v.cluster,
    "k8s.namespace.name": v.namespace,
    "k8s.job.name": run.jobName,
    "fleetcheck.check.name": v.name,
    "fleetcheck.run.id": run.runID,
    "fleetcheck.result": run.result,
    "fleetcheck.run.start_time": run.startTime,
  }
  if (deciding?.reason) attributes["fleetcheck.reason"] = deciding.reason
  if (deciding?.message) attributes["fleetcheck.message"] = deciding.message
  if (run.backupName) attributes["fleetcheck.backup.name"] = run.backupName
  if (run.completionTime) attributes["fleetcheck.run.completion_time"] = run.completionTime
  if (Number.isFinite(restoreMs))
    attributes["fleetcheck.restore.duration_seconds"] = Math.max(0, restoreMs) / 1000
  if (dataTimestamp) attributes["fleetcheck.data_timestamp"] = dataTimestamp
  if (run.phases?.length)
    attributes["fleetcheck.phases"] = run.phases.map((p) => `${p.name}=${p.result}`).join(",")
  if (run.specHash) attributes["fleetcheck.spec_hash"] = run.specHash
  if (run.traceID) attributes["fleetcheck.trace_id"] = run.traceID
  return attributes
}

const traceparentPattern = /^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$/

/** Emits one verdict record on `logger`, in the run's trace when its traceparent is known. */
export const emitVerdict = (logger: Logger, v: VerdictRecord): void => {
  const match = v.traceparent === undefined ? null : traceparentPattern.exec(v.traceparent)
  const ctx = match
    ? trace.setSpanContext(context.active(), {
        traceId: match[1]!,
        spanId: match[2]!,
        traceFlags: TraceFlags.SAMPLED,
      })
    : context.active()
  const failed = v.run.result !== "Succeeded"
  const reason = v.run.phases?.at(-1)?.reason
  const when = Date.parse(v.run.completionTime ?? "")
  logger.emit({
    severityNumber: failed ? SeverityNumber.WARN : SeverityNumber.INFO,
    severityText: failed ? "WARN" : "INFO",
    body: `${v.cluster}/${v.namespace}/${v.name} run ${v.run.runID}: ${v.run.result}${reason ? ` (${reason})` : ""}`,
    attributes: verdictAttributes(v),
    ...(Number.isFinite(when) ? { timestamp: when } : {}),
    context: ctx,
  })
}

/** The hub's verdict log: emit is synchronous and never throws (the SDK queues and batches). */
export class VerdictLog extends Context.Service<VerdictLog, { readonly emit: (v: VerdictRecord) => void }>()(
  "fleetcheck/observability/VerdictLog",
) {}

export interface VerdictLogOptions {
  /** service.name (default OTEL_SERVICE_NAME, else "fleetcheck"). */
  readonly serviceName?: string
  /** Replaces the processors chosen from the environment (tests). */
  readonly processors?: ReadonlyArray<LogRecordProcessor>
  /** The environment to read (default process.env). */
  readonly env?: Env
}

/**
 * The verdict log: a LoggerProvider from the environment, shut down (and flushed) with the layer's
 * scope; without configured exporters a no-op that costs nothing.
 */
export const VerdictLogLive = (
  options: VerdictLogOptions = {},
): Layer.Layer<VerdictLog, VerdictLogConfigError> =>
  Layer.effect(
    VerdictLog,
    Effect.gen(function* () {
      const env = options.env ?? process.env
      let processors = options.processors
      if (processors === undefined) {
        const kinds = yield* Effect.fromResult(logExportersFromEnv(env))
        const made: LogRecordProcessor[] = []
        for (const kind of kinds)
          made.push(new BatchLogRecordProcessor({ exporter: yield* makeExporter(kind) }))
        processors = made
      }
      if (processors.length === 0) return VerdictLog.of({ emit: () => {} })
      const serviceName = options.serviceName ?? envValue(env, "OTEL_SERVICE_NAME") ?? "fleetcheck"
      const provider = yield* Effect.acquireRelease(
        Effect.sync(
          () =>
            new LoggerProvider({
              resource: resourceFromAttributes({ "service.name": serviceName }),
              processors: [...processors],
            }),
        ),
        (p) =>
          Effect.tryPromise(() => p.shutdown()).pipe(
            Effect.catch((e) =>
              Effect.logWarning("flushing verdict log records failed").pipe(
                Effect.annotateLogs({ error: String(e) }),
              ),
            ),
          ),
      )
      const logger = provider.getLogger("fleetcheck.verdicts")
      return VerdictLog.of({ emit: (v) => emitVerdict(logger, v) })
    }),
  )
