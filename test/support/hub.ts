// Runs a real hub in the test process against a local hub cluster, with short timings so fault tests
// finish in seconds. stop() closes its scope the way SIGTERM does (drain, release the lease).
import { KubeConfig } from "@kubernetes/client-node"
import { Effect, Exit, References, Scope } from "effect"
import type { LocalCluster } from "../../clusters/local-fleet/index.ts"
import { type HubHandle, type HubOptions, runHub } from "../../src/hub/hub.ts"
import { defaultMemberTimings } from "../../src/hub/member.ts"
import { makeMetrics } from "../../src/observability/metrics/index.ts"
import { defaultPolicy } from "../../src/registration/kubeconfig-policy.ts"
import { logLevel } from "./engine.ts"

export interface RunningHub {
  readonly hub: HubHandle
  readonly url: string
  readonly stop: () => Promise<void>
}

export const hubNamespace = "fleetcheck-system"

export const fastTimings = {
  ...defaultMemberTimings,
  probeIntervalMs: 500,
  probeFailureThreshold: 3,
  probeSuccessThreshold: 1,
  cacheSyncTimeoutMs: 5_000,
  statusIntervalMs: 500,
  drainGraceMs: 5_000,
  runningPollMs: 2_000,
}

export const startHub = async (
  hubCluster: LocalCluster,
  overrides: Partial<HubOptions> = {},
): Promise<RunningHub> => {
  const kc = new KubeConfig()
  kc.loadFromString(hubCluster.kubeconfig)
  const scope = await Effect.runPromise(Scope.make())
  const hub = await Effect.runPromise(
    runHub({
      hubKubeConfig: kc,
      namespace: hubNamespace,
      policy: defaultPolicy,
      timings: fastTimings,
      maxConcurrentReconciles: 32,
      http: { host: "127.0.0.1", port: 0 },
      leaderElection: {
        enabled: false,
        leaseDurationMs: 15_000,
        renewDeadlineMs: 10_000,
        retryPeriodMs: 2_000,
      },
      metrics: makeMetrics(),
      ...overrides,
    }).pipe(Scope.provide(scope), Effect.provideService(References.MinimumLogLevel, logLevel)),
  )
  return {
    hub,
    url: `http://127.0.0.1:${hub.port}`,
    stop: () => Effect.runPromise(Scope.close(scope, Exit.void)),
  }
}
