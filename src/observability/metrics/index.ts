// The hub's Prometheus metrics, in a private prom-client Registry (never the global one, so nothing a
// dependency registers leaks into /metrics and tests can build as many as they like).
//
//   ./controller-runtime.ts  controller_runtime_* and workqueue_*, with the controller and queue hooks
//   ./fleet.ts               fleetcheck_*: checks, members, informers, the hub-wide in-flight gauge;
//                            client-go's rest_client_request_retries_total per member
//   ./fast-series.ts         plain-number counters and gauges for the hot path, copied in when scraped
//
// Every per-member series has a `cluster` label. A cluster is known from its first mention (initCluster,
// queueHooks or any fleet setter) until forgetMember or forgetAll, and all its series are created and
// removed together.
import { setImmediate as yieldToEventLoop } from "node:timers/promises"
import { collectDefaultMetrics, Registry } from "prom-client"
import type { ControllerHooks } from "../../engine/controller.ts"
import type { WorkQueueMetricsHooks } from "../../engine/workqueue/workqueue.ts"
import type { CheckSeriesMode } from "./check-series.ts"
import { makeControllerRuntimeMetrics } from "./controller-runtime.ts"
import { type FleetGauges, makeFleetGauges } from "./fleet.ts"
import { type FleetCheckGauges, makeFleetCheckGauges } from "./fleet-checks.ts"

export { type CheckSeriesMode, checkSeriesModes } from "./check-series.ts"
export { reconcileTimeBuckets, workqueueDurationBuckets } from "./controller-runtime.ts"
export type { CheckFacts, CheckVerifiedStatus, CheckViewFacts } from "./fleet.ts"

export interface MetricsOptions {
  /** Controllers whose series each cluster gets at once (default ["backupcheck"]); the first is queueHooks' default. */
  readonly controllers?: ReadonlyArray<string>
  /** Informer resources whose series each cluster gets at once (default the member engine's two). */
  readonly resources?: ReadonlyArray<string>
  /** Also expose prom-client's process_* and nodejs_* metrics (default false: the hub's main turns it on). */
  readonly processMetrics?: boolean
  /** Which checks get per-check series (the hub passes --check-metrics; default all). */
  readonly checkSeries?: CheckSeriesMode
  /** The three histograms per member, with a cluster label (the hub passes --member-histograms; default false). */
  readonly memberHistograms?: boolean
}

export interface InitClusterOptions {
  /** Worker fibers per controller for this member, exported as controller_runtime_max_concurrent_reconciles. */
  readonly maxConcurrentReconciles: number
}

/**
 * The hub's metrics: the controller-runtime families through hooks, fleetcheck's own gauges (see
 * FleetGauges; a check's lastSuccess omitted keeps its previous timestamp, deleteCheck removes every
 * series of that check), and the cluster lifecycle across both.
 */
export interface FleetMetrics
  extends Omit<FleetGauges, "addCluster" | "forgetCluster" | "renderChecks">,
    Omit<FleetCheckGauges, "forgetFleetChecks"> {
  readonly registry: Registry
  /** The Content-Type header for render()'s output. */
  readonly contentType: string
  /** The text exposition of every metric in the registry (registry.metrics(), yielding between families). */
  render(): Promise<string>
  /** Hooks for runController. Reconciles of clusters not initialised (or forgotten) are not counted. */
  controllerHooks(controller: string): ControllerHooks
  /**
   * Hooks for one member's workqueue: initialises the cluster, and observes this incarnation of it
   * only (after forgetMember or forgetAll they are inert, so a dying queue cannot bring stale series back).
   */
  queueHooks(cluster: string, controller?: string): WorkQueueMetricsHooks
  /**
   * Creates the cluster's series at zero (idempotent), as controller-runtime does on controller start,
   * and sets controller_runtime_max_concurrent_reconciles to exactly the worker count given. A cluster
   * first seen elsewhere (queueHooks, a setter) has no max_concurrent_reconciles series until then.
   */
  initCluster(cluster: string, options: InitClusterOptions): void
  /** Removes every series of the cluster, in every family. Call it after the member's scope has closed. */
  forgetMember(cluster: string): void
  /**
   * Removes every per-cluster, per-check and per-FleetBackupCheck series (every cluster forgotten), as
   * when the hub loses leadership. Hub-wide series stay: fleetcheck_reconcile_global_inflight and the status-write gauges keep counting held permits.
   */
  forgetAll(): void
}

const backupcheckController = "backupcheck"
const defaultResources = ["backupchecks.fleetcheck.io", "jobs.batch"]

export const makeMetrics = (options: MetricsOptions = {}): FleetMetrics => {
  const registry = new Registry()
  if (options.processMetrics === true) collectDefaultMetrics({ register: registry })

  const controllers = options.controllers ?? [backupcheckController]
  const defaultController = controllers[0] ?? backupcheckController
  const controllerRuntime = makeControllerRuntimeMetrics(
    registry,
    controllers,
    options.memberHistograms === true,
  )
  const fleet = makeFleetGauges(registry, options.resources ?? defaultResources, options.checkSeries ?? "all")
  const fleetChecks = makeFleetCheckGauges(registry)

  const clusters = new Set<string>()

  const ensureCluster = (cluster: string): void => {
    if (clusters.has(cluster)) return
    clusters.add(cluster)
    controllerRuntime.addCluster(cluster)
    fleet.addCluster(cluster)
  }

  const forgetMember = (cluster: string): void => {
    clusters.delete(cluster)
    controllerRuntime.forgetCluster(cluster)
    fleet.forgetCluster(cluster)
  }

  // registry.metrics() formats every family in one synchronous run (a quarter of a second for 40k
  // series on a slow core); family by family, with a turn of the event loop between, the stall is
  // bounded by the largest family. The registry's part is byte for byte what registry.metrics()
  // returns; the per-check families (outside prom-client, written a slice at a time) follow it.
  const render = async (): Promise<string> => {
    const parts: Array<string> = []
    for (const metric of registry.getMetricsAsArray()) {
      parts.push(await registry.getSingleMetricAsString(metric.name))
      await yieldToEventLoop()
    }
    const checks = await fleet.renderChecks()
    if (checks !== "") parts.push(checks)
    return `${parts.join("\n\n")}\n`
  }

  return {
    registry,
    contentType: registry.contentType,
    render,
    controllerHooks: controllerRuntime.controllerHooks,
    queueHooks: (cluster, controller = defaultController) => {
      ensureCluster(cluster)
      return controllerRuntime.queueHooks(cluster, controller)
    },
    initCluster: (cluster, init) => {
      ensureCluster(cluster)
      controllerRuntime.setMaxConcurrentReconciles(cluster, init.maxConcurrentReconciles)
    },
    forgetMember,
    forgetAll: () => {
      for (const cluster of [...clusters]) forgetMember(cluster)
      fleetChecks.forgetFleetChecks()
    },
    setFleetCheck: fleetChecks.setFleetCheck,
    deleteFleetCheck: fleetChecks.deleteFleetCheck,
    setCheckVerified: (cluster, namespace, name, status, lastSuccess, view) => {
      ensureCluster(cluster)
      fleet.setCheckVerified(cluster, namespace, name, status, lastSuccess, view)
    },
    setCheckFacts: fleet.setCheckFacts,
    setLeader: fleet.setLeader,
    deleteCheck: fleet.deleteCheck,
    setMemberConnected: (cluster, connected) => {
      ensureCluster(cluster)
      fleet.setMemberConnected(cluster, connected)
    },
    setMemberReady: (cluster, ready) => {
      ensureCluster(cluster)
      fleet.setMemberReady(cluster, ready)
    },
    setInformerObjects: (cluster, resource, objects) => {
      if (!Number.isFinite(objects)) return
      ensureCluster(cluster)
      fleet.setInformerObjects(cluster, resource, objects)
    },
    incInformerRestarts: (cluster, resource) => {
      ensureCluster(cluster)
      fleet.incInformerRestarts(cluster, resource)
    },
    incRequestRetry: (cluster, verb, code) => {
      ensureCluster(cluster)
      fleet.incRequestRetry(cluster, verb, code)
    },
    incRunSkipped: (cluster) => {
      ensureCluster(cluster)
      fleet.incRunSkipped(cluster)
    },
    observeRestoreDuration: (cluster, seconds) => {
      ensureCluster(cluster)
      fleet.observeRestoreDuration(cluster, seconds)
    },
    setCheckRecoveryPointAge: fleet.setCheckRecoveryPointAge,
    addGlobalInflight: fleet.addGlobalInflight,
    addStatusWritesWaiting: fleet.addStatusWritesWaiting,
    addStatusWritesInflight: fleet.addStatusWritesInflight,
    observeStatusWriteWait: fleet.observeStatusWriteWait,
  }
}
