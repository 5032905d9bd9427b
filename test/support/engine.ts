// Runs a real member engine from a test: its own Scope, closed by stop(); logs at Warn and above
// unless FLEETCHECK_TEST_LOG=debug, so failures stay readable.
import { KubeConfig } from "@kubernetes/client-node"
import { Effect, Exit, Layer, References, Scope } from "effect"
import type { LocalCluster } from "../../clusters/local-fleet/index.ts"
import { defaultHubConfig } from "../../src/hub/config.ts"
import {
  type MemberEngine,
  type MemberEngineOptions,
  startMemberEngine,
} from "../../src/hub/member-engine.ts"

export interface RunningEngine {
  readonly engine: MemberEngine
  readonly stop: () => Promise<void>
}

const levels = { debug: "Debug", info: "Info", warn: "Warn", error: "Error" } as const
export const logLevel = levels[(process.env.FLEETCHECK_TEST_LOG ?? "warn") as keyof typeof levels] ?? "Warn"

/** A member engine's options with the hub's defaults, as a hub that always leads would pass them. */
export const engineOptions = (
  cluster: string,
  kubeConfig: KubeConfig,
  overrides: Partial<Omit<MemberEngineOptions, "kubeConfig" | "cluster">> = {},
): MemberEngineOptions => ({
  cluster,
  kubeConfig,
  userAgent: "fleetcheck-test",
  http2: defaultHubConfig.http2,
  execTimeoutMs: defaultHubConfig.execPluginTimeoutMs,
  namespaces: undefined,
  workers: defaultHubConfig.workersPerMember,
  globalLimit: undefined,
  runningPollMs: defaultHubConfig.runningPollMs,
  agentImage: defaultHubConfig.agentImage,
  sandboxCleanupTimeoutMs: defaultHubConfig.sandboxCleanupTimeoutMs,
  sandboxOrphanGraceMs: defaultHubConfig.sandboxOrphanGraceMs,
  resyncMs: defaultHubConfig.resyncPeriodMs,
  drainGraceMs: () => defaultHubConfig.drainGraceMs,
  mayWrite: Effect.succeed(true),
  lostLease: Effect.never,
  onRunSkipped: () => {},
  onThrottleRetry: () => {},
  onRunRecorded: () => {},
  onWatchFailure: () => {},
  controllerHooks: undefined,
  queueHooks: undefined,
  ...overrides,
})

/**
 * `services`: a layer built into the engine's scope and provided to it, such as a tracer whose spans a
 * test reads, or a logger that keeps every line (it may set its own minimum level).
 */
export const startEngine = async <ROut = never, E = never>(
  cluster: LocalCluster,
  options: Partial<Omit<MemberEngineOptions, "kubeConfig" | "cluster">> = {},
  services?: Layer.Layer<ROut, E>,
): Promise<RunningEngine> => {
  const kubeConfig = new KubeConfig()
  kubeConfig.loadFromString(cluster.kubeconfig)
  const scope = await Effect.runPromise(Scope.make())
  const level = Layer.succeed(References.MinimumLogLevel, logLevel)
  const provided = await Effect.runPromise(
    Layer.buildWithScope(services ? Layer.merge(level, services) : level, scope),
  )
  const engine = await Effect.runPromise(
    startMemberEngine(engineOptions(cluster.name, kubeConfig, options)).pipe(
      Scope.provide(scope),
      Effect.provide(provided),
    ),
  )
  await Effect.runPromise(engine.awaitSynced.pipe(Effect.timeout("30 seconds")))
  return { engine, stop: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}
