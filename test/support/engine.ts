// Runs a real member engine from a test: its own Scope, closed by stop(); logs at Warn and above
// unless FLEETCHECK_TEST_LOG=debug, so failures stay readable.
import { KubeConfig } from "@kubernetes/client-node"
import { Effect, Exit, References, Scope } from "effect"
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

export const startEngine = async (
  cluster: LocalCluster,
  options: Partial<Omit<MemberEngineOptions, "kubeConfig" | "cluster">> = {},
): Promise<RunningEngine> => {
  const kubeConfig = new KubeConfig()
  kubeConfig.loadFromString(cluster.kubeconfig)
  const scope = await Effect.runPromise(Scope.make())
  const engine = await Effect.runPromise(
    startMemberEngine(engineOptions(cluster.name, kubeConfig, options)).pipe(
      Scope.provide(scope),
      Effect.provideService(References.MinimumLogLevel, logLevel),
    ),
  )
  await Effect.runPromise(engine.awaitSynced.pipe(Effect.timeout("30 seconds")))
  return { engine, stop: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}
