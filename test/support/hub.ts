// Runs a real hub in the test process against a local hub cluster through the one launcher, with short
// timings so fault tests finish in seconds. stop() closes its scope the way SIGTERM does (drain,
// release the lease).
import { KubeConfig } from "@kubernetes/client-node"
import type { LocalCluster } from "../../clusters/local-fleet/index.ts"
import { defaultHubNamespace } from "../../src/api/names.ts"
import { defaultHubConfig, type HubConfig } from "../../src/hub/config.ts"
import { type LaunchedHub, type LaunchOptions, launchHub } from "../../src/hub/launch.ts"
import { logLevel } from "./engine.ts"

export const hubNamespace = defaultHubNamespace

/** The hub's defaults with fault-test timings: probes every 500 ms, short sync timeout and drain. */
export const fastConfig: HubConfig = {
  ...defaultHubConfig,
  httpAddress: { host: "127.0.0.1", port: 0 },
  // Tests read the API without tokens; the secure-serving tests turn it on.
  secureServing: false,
  leaderElect: false,
  probeIntervalMs: 500,
  probeFailureThreshold: 3,
  probeSuccessThreshold: 1,
  cacheSyncTimeoutMs: 5_000,
  statusIntervalMs: 500,
  drainGraceMs: 5_000,
  runningPollMs: 2_000,
  logLevel,
}

export type RunningHub = LaunchedHub

export const startHub = async (
  hubCluster: LocalCluster,
  config: Partial<HubConfig> = {},
  options: Omit<LaunchOptions, "config" | "kubeConfig"> = {},
): Promise<RunningHub> => {
  const kubeConfig = new KubeConfig()
  kubeConfig.loadFromString(hubCluster.kubeconfig)
  return launchHub({ config: { ...fastConfig, ...config }, kubeConfig, ...options })
}
