// `fleetcheck hub`: runs the hub. Flags fall back to FLEETCHECK_* environment variables, then to
// defaults; everything is validated before anything starts, and a bad value exits with a message.
import { parseArgs } from "node:util"
import { KubeConfig } from "@kubernetes/client-node"
import { Effect, Exit, Layer, Logger, References, Scope } from "effect"
import * as z from "zod"
import { type HubHandle, runHub } from "../hub/hub.ts"
import { defaultMemberTimings } from "../hub/member.ts"
import { makeMetrics } from "../observability/metrics/index.ts"
import { TracingLive } from "../observability/tracing.ts"
import { defaultPolicy } from "../registration/kubeconfig-policy.ts"

const flags = {
  kubeconfig: {
    type: "string",
    env: "KUBECONFIG",
    help: "hub kubeconfig (default: in-cluster, then KUBECONFIG)",
  },
  namespace: {
    type: "string",
    env: "FLEETCHECK_NAMESPACE",
    help: "hub namespace (default fleetcheck-system)",
  },
  "http-address": {
    type: "string",
    env: "FLEETCHECK_HTTP_ADDRESS",
    help: "host:port for health, metrics, API, dashboard (default 0.0.0.0:8080)",
  },
  "leader-elect": { type: "string", env: "FLEETCHECK_LEADER_ELECT", help: "true|false (default true)" },
  "max-concurrent-reconciles": {
    type: "string",
    env: "FLEETCHECK_MAX_CONCURRENT_RECONCILES",
    help: "hub-wide cap (default 32)",
  },
  "workers-per-member": { type: "string", env: "FLEETCHECK_WORKERS_PER_MEMBER", help: "default 4" },
  "probe-interval": {
    type: "string",
    env: "FLEETCHECK_PROBE_INTERVAL_MS",
    help: "member probe period in ms (default 10000)",
  },
  "probe-failure-threshold": { type: "string", env: "FLEETCHECK_PROBE_FAILURE_THRESHOLD", help: "default 3" },
  "cache-sync-timeout": { type: "string", env: "FLEETCHECK_CACHE_SYNC_TIMEOUT_MS", help: "default 30000" },
  "running-poll": {
    type: "string",
    env: "FLEETCHECK_RUNNING_POLL_MS",
    help: "poll while a restore Job runs, ms (default 30000)",
  },
  "allow-exec": {
    type: "string",
    env: "FLEETCHECK_ALLOW_EXEC",
    help: "accept exec credential plugins (default false)",
  },
  "allow-auth-provider": { type: "string", env: "FLEETCHECK_ALLOW_AUTH_PROVIDER", help: "default false" },
  "allow-file-paths": { type: "string", env: "FLEETCHECK_ALLOW_FILE_PATHS", help: "default false" },
  "allow-insecure-skip-tls-verify": {
    type: "string",
    env: "FLEETCHECK_ALLOW_INSECURE",
    help: "default false",
  },
  "log-level": { type: "string", env: "FLEETCHECK_LOG_LEVEL", help: "Debug|Info|Warn|Error (default Info)" },
} as const

const bool = z.enum(["true", "false"]).transform((v) => v === "true")
const int = (min: number, max: number) => z.coerce.number().int().min(min).max(max)

const HubFlags = z.object({
  kubeconfig: z.string().min(1).optional(),
  namespace: z
    .string()
    .regex(/^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/, "a DNS-1123 label")
    .default("fleetcheck-system"),
  "http-address": z
    .string()
    .regex(/^[^:]*:\d{1,5}$/, "host:port")
    .default("0.0.0.0:8080"),
  "leader-elect": bool.default(true),
  "max-concurrent-reconciles": int(1, 10_000).default(32),
  "workers-per-member": int(1, 256).default(4),
  "probe-interval": int(100, 3_600_000).default(10_000),
  "probe-failure-threshold": int(1, 100).default(3),
  "cache-sync-timeout": int(100, 3_600_000).default(30_000),
  "running-poll": int(100, 3_600_000).default(30_000),
  "allow-exec": bool.default(false),
  "allow-auth-provider": bool.default(false),
  "allow-file-paths": bool.default(false),
  "allow-insecure-skip-tls-verify": bool.default(false),
  "log-level": z.enum(["Debug", "Info", "Warn", "Error"]).default("Info"),
})

export const hubUsage = Object.entries(flags)
  .map(([name, f]) => `  --${name.padEnd(32)} ${f.help} [env ${f.env}]`)
  .join("\n")

export const parseHubFlags = (args: ReadonlyArray<string>, env: NodeJS.ProcessEnv) => {
  const { values } = parseArgs({
    args: [...args],
    options: Object.fromEntries(Object.keys(flags).map((k) => [k, { type: "string" as const }])),
    strict: true,
  })
  const merged: Record<string, string | undefined> = {}
  for (const [name, f] of Object.entries(flags))
    merged[name] = (values[name] as string | undefined) ?? env[f.env]
  const parsed = HubFlags.safeParse(
    Object.fromEntries(Object.entries(merged).filter(([, v]) => v !== undefined)),
  )
  if (!parsed.success) {
    throw new Error(
      `invalid hub flags: ${parsed.error.issues.map((i) => `--${i.path.join(".")}: ${i.message}`).join("; ")}`,
    )
  }
  return parsed.data
}

export const runHubCommand = async (args: ReadonlyArray<string>): Promise<number> => {
  if (args.includes("--help") || args.includes("-h")) {
    process.stdout.write(`Usage: fleetcheck hub [flags]\n\n${hubUsage}\n`)
    return 0
  }
  const f = parseHubFlags(args, process.env)
  const kc = new KubeConfig()
  if (f.kubeconfig) kc.loadFromFile(f.kubeconfig)
  else kc.loadFromDefault()
  const [host, port] = [
    f["http-address"].slice(0, f["http-address"].lastIndexOf(":")),
    Number(f["http-address"].split(":").at(-1)),
  ]
  const metrics = makeMetrics({ processMetrics: true })
  const scope = Effect.runSync(Scope.make())
  const logger = Layer.merge(
    Logger.layer([Logger.consoleJson]),
    Layer.succeed(References.MinimumLogLevel, f["log-level"]),
  )
  // Built into the hub's scope: the tracer provider must outlive this call and flush on shutdown.
  const services = await Effect.runPromise(
    Layer.buildWithScope(Layer.merge(logger, TracingLive({ serviceName: "fleetcheck-hub" })), scope),
  )
  const started = Effect.runPromise(
    runHub({
      hubKubeConfig: kc,
      namespace: f.namespace,
      policy: {
        ...defaultPolicy,
        allowExec: f["allow-exec"],
        allowAuthProvider: f["allow-auth-provider"],
        allowFilePaths: f["allow-file-paths"],
        allowInsecureSkipTlsVerify: f["allow-insecure-skip-tls-verify"],
      },
      timings: {
        ...defaultMemberTimings,
        probeIntervalMs: f["probe-interval"],
        probeFailureThreshold: f["probe-failure-threshold"],
        cacheSyncTimeoutMs: f["cache-sync-timeout"],
        runningPollMs: f["running-poll"],
        workersPerMember: f["workers-per-member"],
      },
      maxConcurrentReconciles: f["max-concurrent-reconciles"],
      http: { host: host || "0.0.0.0", port },
      leaderElection: {
        enabled: f["leader-elect"],
        leaseDurationMs: 15_000,
        renewDeadlineMs: 10_000,
        retryPeriodMs: 2_000,
      },
      metrics,
    }).pipe(Scope.provide(scope), Effect.provide(services)),
  )
  const hub: HubHandle = await started
  void hub
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      process.stderr.write(
        `fleetcheck hub: ${signal}; draining in-flight reconciles and releasing the lease\n`,
      )
      Effect.runPromise(Scope.close(scope, Exit.void).pipe(Effect.provide(logger))).then(() => resolve())
    }
    process.once("SIGTERM", () => stop("SIGTERM"))
    process.once("SIGINT", () => stop("SIGINT"))
  })
  return 0
}
