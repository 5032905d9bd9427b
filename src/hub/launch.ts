// The one place a hub is assembled: `fleetcheck hub`, `fleetcheck dev`, the tests and the benchmarks all
// call launchHub. It builds the hub's scope, its logger (JSON lines at the configured level), tracing
// (from the standard OTEL_* environment) and metrics, then runs the hub in that scope. stop() closes
// the scope the way SIGTERM does: members drain, the lease is released, spans are flushed.
import { KubeConfig } from "@kubernetes/client-node"
import { Effect, Exit, Layer, Logger, References, Scope } from "effect"
import { readProviderFile } from "../clusterprofile/provider-file.ts"
import type { FleetMetrics } from "../observability/metrics/index.ts"
import { makeMetrics } from "../observability/metrics/index.ts"
import { TracingLive, type TracingOptions } from "../observability/tracing.ts"
import { VerdictLogLive, type VerdictLogOptions } from "../observability/verdict-log.ts"
import type { HubConfig } from "./config.ts"
import { type HubHandle, runHub } from "./hub.ts"
import { makeLeaderIdentity } from "./leader-election.ts"
import {
  loadServingFiles,
  type ServingCert,
  ServingCertError,
  selfSignedServingCert,
} from "./serving/serving-cert.ts"

export interface LaunchOptions {
  readonly config: HubConfig
  /** The hub cluster's credentials; unset: the config's kubeconfig file, else in-cluster, else $KUBECONFIG. */
  readonly kubeConfig?: KubeConfig
  /** Unset: hostname plus a random suffix, unique per process. */
  readonly identity?: string
  /** Export the Node.js process metrics too (the `hub` command does; in-process test hubs do not). */
  readonly processMetrics?: boolean
  /**
   * The process is the hub's own: give memory back after bursts (memory-return.ts, with the config's
   * threshold). The `hub` command does; in-process test hubs, sharing their process, do not.
   */
  readonly returnMemory?: boolean
  /** Replaces the JSON console logger (tests capture log lines with it). */
  readonly logger?: Logger.Logger<unknown, void>
  readonly tracing?: TracingOptions
  /** The hub's metrics; unset: a fresh registry (benchmarks pass their own to observe the hooks). */
  readonly metrics?: FleetMetrics
  /** Verdict log records (default: from the OTEL_* environment, like traces). */
  readonly verdictLog?: VerdictLogOptions
}

export interface LaunchedHub extends HubHandle {
  readonly url: string
  /** The dashboard's own listener (for the API server's service proxy), when `dashboardAddress` is set. */
  readonly dashboardUrl: string | undefined
  readonly metrics: FleetMetrics
  /** The certificate the hub serves at start (secure serving), for clients to trust; undefined: plain HTTP. */
  readonly servingCert: ServingCert | undefined
  /** Closes the hub's scope as SIGTERM does; resolves once members drained and the lease is released. */
  readonly stop: () => Promise<void>
}

const hubKubeConfig = (config: HubConfig): KubeConfig => {
  const kc = new KubeConfig()
  if (config.kubeconfig) kc.loadFromFile(config.kubeconfig)
  else kc.loadFromDefault()
  return kc
}

/**
 * Secure serving's certificate, before anything starts: the files' pair, checked (a missing, unreadable
 * or mismatched file stops the hub with a clear message), or a self-signed one when no files are named.
 */
export const readServingCert = (config: HubConfig): ServingCert | undefined => {
  if (!config.secureServing) {
    if (config.tlsCertFile !== undefined || config.tlsPrivateKeyFile !== undefined)
      throw new ServingCertError({ message: "--tls-cert-file is served only with --secure-serving true" })
    return undefined
  }
  if (config.tlsCertFile !== undefined && config.tlsPrivateKeyFile !== undefined)
    return loadServingFiles(config.tlsCertFile, config.tlsPrivateKeyFile)
  if (config.tlsCertFile !== undefined || config.tlsPrivateKeyFile !== undefined)
    throw new ServingCertError({ message: "--tls-cert-file and --tls-private-key-file go together" })
  return selfSignedServingCert(config.httpAddress.host)
}

export const launchHub = async (options: LaunchOptions): Promise<LaunchedHub> => {
  const { config } = options
  const metrics =
    options.metrics ??
    makeMetrics({
      processMetrics: options.processMetrics === true,
      checkSeries: config.checkMetrics,
      memberHistograms: config.memberHistograms,
    })
  const logging = Layer.merge(
    Logger.layer([options.logger ?? Logger.consoleJson]),
    Layer.succeed(References.MinimumLogLevel, config.logLevel),
  )
  // Read before anything starts: a broken provider file stops the hub with a clear message.
  const accessProviders = config.clusterprofileProviderFile
    ? readProviderFile(config.clusterprofileProviderFile)
    : undefined
  const servingCert = readServingCert(config)
  const scope = Effect.runSync(Scope.make())
  const close = () => Effect.runPromise(Scope.close(scope, Exit.void).pipe(Effect.provide(logging)))
  try {
    // Built into the hub's scope: the tracer provider must outlive this call and flush on stop.
    const services = await Effect.runPromise(
      Layer.buildWithScope(
        Layer.mergeAll(
          logging,
          TracingLive({ serviceName: "fleetcheck-hub", ...options.tracing }),
          VerdictLogLive({ serviceName: "fleetcheck-hub", ...options.verdictLog }),
        ),
        scope,
      ),
    )
    const hub = await Effect.runPromise(
      runHub({
        config,
        hubKubeConfig: options.kubeConfig ?? hubKubeConfig(config),
        identity: options.identity ?? makeLeaderIdentity(),
        metrics,
        accessProviders,
        servingCert,
        returnMemory: options.returnMemory === true,
      }).pipe(Scope.provide(scope), Effect.provide(services)),
    )
    const urlOf = (host: string, port: number, scheme = "http") =>
      `${scheme}://${host === "0.0.0.0" || host === "::" ? "127.0.0.1" : host.includes(":") ? `[${host}]` : host}:${port}`
    let stopped: Promise<void> | undefined
    return {
      ...hub,
      url: urlOf(config.httpAddress.host, hub.port, servingCert ? "https" : "http"),
      dashboardUrl:
        config.dashboardAddress && hub.dashboardPort !== undefined
          ? urlOf(config.dashboardAddress.host, hub.dashboardPort)
          : undefined,
      metrics,
      servingCert,
      stop: () => {
        stopped ??= close()
        return stopped
      },
    }
  } catch (error) {
    await close()
    throw error
  }
}
