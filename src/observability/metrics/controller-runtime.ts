// The controller-runtime-compatible families and the controller and workqueue hooks that feed them.
//
// Names and label sets follow controller-runtime (pkg/internal/controller/metrics, pkg/metrics/
// workqueue.go) so its dashboards and alerts work, with one addition: every series has a `cluster`
// label. Workqueue series carry name=controller=<controller> as controller-runtime sets them (its
// `priority` label on workqueue_depth is left out: we have no priority queue).
//
// Reconcile outcomes map onto controller-runtime's `result` values exactly as its reconcileHandler
// counts them:
//   success        → result="success"
//   requeue_after  → result="requeue_after"
//   conflict       → result="requeue"  (a 409 requeued with backoff: what a reconciler that catches
//                                       it returns, Result{Requeue: true}; not an error)
//   error          → result="error",  reconcile_errors_total
//   terminal_error → result="error",  reconcile_errors_total, terminal_reconcile_errors_total
//   panic          → result="error",  reconcile_errors_total, reconcile_panics_total
//
// Counters, gauges and histograms the queue and workers touch are fast series (./fast-series.ts):
// nothing on the hot path goes through prom-client's label handling.
import { Gauge, type Registry } from "prom-client"
import type { ControllerHooks, ReconcileOutcome } from "../../engine/controller.ts"
import type { WorkQueueMetricsHooks } from "../../engine/workqueue/workqueue.ts"
import {
  FastHistogram,
  type FastHistogramSeries,
  type FastSeries,
  fastCounter,
  fastGauge,
  type Labels,
} from "./fast-series.ts"

const reconcileResults = ["success", "error", "requeue", "requeue_after"] as const
type ReconcileResult = (typeof reconcileResults)[number]

const resultOf: Record<ReconcileOutcome, ReconcileResult> = {
  success: "success",
  requeue_after: "requeue_after",
  conflict: "requeue",
  error: "error",
  terminal_error: "error",
  panic: "error",
}

/** controller-runtime's controller_runtime_reconcile_time_seconds buckets. */
export const reconcileTimeBuckets: ReadonlyArray<number> = [
  0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1.0, 1.25,
  1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60,
]

/**
 * controller-runtime's workqueue duration buckets, prometheus.ExponentialBuckets(10e-9, 10, 12):
 * 10 ns to 1000 s (client-go's own provider stops at 10 s; controller-runtime's covers long waits).
 * Written out so the `le` labels print as 1e-8 rather than 1.0000000000000001e-7.
 */
export const workqueueDurationBuckets: ReadonlyArray<number> = [
  1e-8, 1e-7, 1e-6, 1e-5, 1e-4, 1e-3, 0.01, 0.1, 1, 10, 100, 1000,
]

export interface ControllerRuntimeMetrics {
  /** Creates the cluster's series at zero for every known controller (idempotent). */
  addCluster(cluster: string): void
  /**
   * Sets controller_runtime_max_concurrent_reconciles for every controller of the cluster, now and for
   * controllers added later. Until it is called the cluster has no such series: there is no default.
   */
  setMaxConcurrentReconciles(cluster: string, workers: number): void
  /** Removes every series of the cluster; hooks bound to it stop writing. */
  forgetCluster(cluster: string): void
  /** Adds the controller's series to every known cluster (idempotent). */
  addController(controller: string): void
  /** Reconciles of clusters not added (or forgotten) are not counted. */
  controllerHooks(controller: string): ControllerHooks
  /**
   * Hooks for one member's workqueue, bound to this incarnation of the cluster (added when unknown):
   * after forgetCluster they are inert, so a dying queue cannot bring stale series back.
   */
  queueHooks(cluster: string, controller: string): WorkQueueMetricsHooks
}

interface ControllerSeries {
  readonly labels: Labels
  readonly total: Record<ReconcileResult, FastSeries>
  readonly errors: FastSeries
  readonly terminal: FastSeries
  readonly panics: FastSeries
  readonly active: FastSeries
  readonly time: FastHistogramSeries
}

interface QueueSeries {
  readonly labels: Labels
  readonly adds: FastSeries
  readonly depth: FastSeries
  readonly retries: FastSeries
  readonly queueDuration: FastHistogramSeries
  readonly workDuration: FastHistogramSeries
}

interface ClusterState {
  readonly cluster: string
  // false once forgotten: hooks bound to this incarnation stop writing
  live: boolean
  // undefined until the member says how many workers it runs
  maxConcurrentReconciles: number | undefined
  readonly controllers: Map<string, ControllerSeries>
  readonly queues: Map<string, QueueSeries>
}

// prom-client throws on a non-finite observation, and hooks must not throw: a clock stepping back
// or a NaN is observed as 0
const validSeconds = (s: number): number => (Number.isFinite(s) && s > 0 ? s : 0)
const secondsOf = (ms: number): number => validSeconds(ms / 1000)

export const makeControllerRuntimeMetrics = (
  registry: Registry,
  initialControllers: ReadonlyArray<string>,
  memberHistograms: boolean,
): ControllerRuntimeMetrics => {
  const registers = [registry]
  const controllerLabels = ["controller", "cluster"]
  const queueLabels = ["name", "controller", "cluster"]
  // Histograms are 42 and 2 × 14 series each: per member they were three quarters of every member's
  // series. Hub-wide (controller-runtime's own label sets) unless asked for per member.
  const histogramControllerLabels = memberHistograms ? controllerLabels : ["controller"]
  const histogramQueueLabels = memberHistograms ? queueLabels : ["name", "controller"]
  const histogramLabels = (labels: Labels): Labels => {
    if (memberHistograms) return labels
    const { cluster: _, ...rest } = labels
    return rest
  }

  const reconcileTotal = fastCounter(
    {
      name: "controller_runtime_reconcile_total",
      help: "Total number of reconciliations per controller",
      labelNames: ["controller", "cluster", "result"],
    },
    registry,
  )
  const reconcileErrors = fastCounter(
    {
      name: "controller_runtime_reconcile_errors_total",
      help: "Total number of reconciliation errors per controller",
      labelNames: controllerLabels,
    },
    registry,
  )
  const terminalErrors = fastCounter(
    {
      name: "controller_runtime_terminal_reconcile_errors_total",
      help: "Total number of terminal reconciliation errors per controller",
      labelNames: controllerLabels,
    },
    registry,
  )
  const reconcilePanics = fastCounter(
    {
      name: "controller_runtime_reconcile_panics_total",
      help: "Total number of reconciliation panics per controller",
      labelNames: controllerLabels,
    },
    registry,
  )
  const reconcileTime = new FastHistogram({
    name: "controller_runtime_reconcile_time_seconds",
    help: "Length of time per reconciliation per controller",
    labelNames: histogramControllerLabels,
    buckets: reconcileTimeBuckets,
    registry,
  })
  const maxConcurrent = new Gauge({
    name: "controller_runtime_max_concurrent_reconciles",
    help: "Maximum number of concurrent reconciles per controller",
    labelNames: controllerLabels,
    registers,
  })
  const activeWorkers = fastGauge(
    {
      name: "controller_runtime_active_workers",
      help: "Number of currently used workers per controller",
      labelNames: controllerLabels,
    },
    registry,
  )

  const queueDepth = fastGauge(
    { name: "workqueue_depth", help: "Current depth of workqueue", labelNames: queueLabels },
    registry,
  )
  const queueAdds = fastCounter(
    {
      name: "workqueue_adds_total",
      help: "Total number of adds handled by workqueue",
      labelNames: queueLabels,
    },
    registry,
  )
  const queueLatency = new FastHistogram({
    name: "workqueue_queue_duration_seconds",
    help: "How long in seconds an item stays in workqueue before being requested",
    labelNames: histogramQueueLabels,
    buckets: workqueueDurationBuckets,
    registry,
  })
  const workDuration = new FastHistogram({
    name: "workqueue_work_duration_seconds",
    help: "How long in seconds processing an item from workqueue takes.",
    labelNames: histogramQueueLabels,
    buckets: workqueueDurationBuckets,
    registry,
  })
  const queueRetries = fastCounter(
    {
      name: "workqueue_retries_total",
      help: "Total number of retries handled by workqueue",
      labelNames: queueLabels,
    },
    registry,
  )

  const controllers = new Set<string>(initialControllers)
  const clusters = new Map<string, ClusterState>()

  const ensureController = (state: ClusterState, controller: string): ControllerSeries => {
    const existing = state.controllers.get(controller)
    if (existing !== undefined) return existing
    const labels = { controller, cluster: state.cluster }
    const total = {} as Record<ReconcileResult, FastSeries>
    for (const result of reconcileResults) {
      total[result] = reconcileTotal.series({ controller, cluster: state.cluster, result })
    }
    // ensure, never zero: without --member-histograms the series is hub-wide, shared with every member
    reconcileTime.ensure(histogramLabels(labels))
    if (state.maxConcurrentReconciles !== undefined) maxConcurrent.set(labels, state.maxConcurrentReconciles)
    const series: ControllerSeries = {
      labels,
      total,
      errors: reconcileErrors.series(labels),
      terminal: terminalErrors.series(labels),
      panics: reconcilePanics.series(labels),
      active: activeWorkers.series(labels),
      time: reconcileTime.series(histogramLabels(labels)),
    }
    state.controllers.set(controller, series)
    return series
  }

  const ensureQueue = (state: ClusterState, controller: string): QueueSeries => {
    const existing = state.queues.get(controller)
    if (existing !== undefined) return existing
    const labels = { name: controller, controller, cluster: state.cluster }
    queueLatency.ensure(histogramLabels(labels))
    workDuration.ensure(histogramLabels(labels))
    const series: QueueSeries = {
      labels,
      adds: queueAdds.series(labels),
      depth: queueDepth.series(labels),
      retries: queueRetries.series(labels),
      queueDuration: queueLatency.series(histogramLabels(labels)),
      workDuration: workDuration.series(histogramLabels(labels)),
    }
    state.queues.set(controller, series)
    return series
  }

  const addCluster = (cluster: string): ClusterState => {
    let state = clusters.get(cluster)
    if (state === undefined) {
      state = {
        cluster,
        live: true,
        maxConcurrentReconciles: undefined,
        controllers: new Map(),
        queues: new Map(),
      }
      clusters.set(cluster, state)
    }
    for (const controller of controllers) {
      ensureController(state, controller)
      ensureQueue(state, controller)
    }
    return state
  }

  const setMaxConcurrentReconciles = (cluster: string, workers: number): void => {
    const state = addCluster(cluster)
    state.maxConcurrentReconciles = workers
    for (const series of state.controllers.values()) maxConcurrent.set(series.labels, workers)
  }

  const addController = (controller: string): void => {
    if (controllers.has(controller)) return
    controllers.add(controller)
    for (const state of clusters.values()) {
      ensureController(state, controller)
      ensureQueue(state, controller)
    }
  }

  const forgetCluster = (cluster: string): void => {
    const state = clusters.get(cluster)
    if (state === undefined) return
    state.live = false
    clusters.delete(cluster)
    for (const series of state.controllers.values()) {
      for (const result of reconcileResults) reconcileTotal.remove(series.total[result])
      reconcileErrors.remove(series.errors)
      terminalErrors.remove(series.terminal)
      reconcilePanics.remove(series.panics)
      activeWorkers.remove(series.active)
      if (memberHistograms) reconcileTime.remove(series.labels)
      maxConcurrent.remove(series.labels)
    }
    for (const series of state.queues.values()) {
      queueAdds.remove(series.adds)
      queueDepth.remove(series.depth)
      queueRetries.remove(series.retries)
      if (memberHistograms) {
        queueLatency.remove(series.labels)
        workDuration.remove(series.labels)
      }
    }
  }

  const controllerHooks = (controller: string): ControllerHooks => {
    addController(controller)
    const seriesOf = (cluster: string): ControllerSeries | undefined =>
      clusters.get(cluster)?.controllers.get(controller)
    return {
      onReconcile: (cluster, outcome, seconds) => {
        const series = seriesOf(cluster)
        if (series === undefined) return
        series.total[resultOf[outcome]].value++
        if (outcome === "error" || outcome === "terminal_error" || outcome === "panic") series.errors.value++
        if (outcome === "terminal_error") series.terminal.value++
        else if (outcome === "panic") series.panics.value++
        series.time.observe(validSeconds(seconds))
      },
      onActiveWorkers: (cluster, delta) => {
        const series = seriesOf(cluster)
        if (series !== undefined) series.active.value += delta
      },
    }
  }

  const queueHooks = (cluster: string, controller: string): WorkQueueMetricsHooks => {
    addController(controller)
    const state = addCluster(cluster)
    const { adds, depth, queueDuration, workDuration: work, retries } = ensureQueue(state, controller)
    // adds, depth and retries of a forgotten incarnation are detached objects: writing them is harmless
    return {
      onAdd: () => {
        adds.value++
      },
      onDepth: (n) => {
        depth.value = n
      },
      onGet: (_key, queuedMs) => {
        if (state.live) queueDuration.observe(secondsOf(queuedMs))
      },
      onDone: (_key, workMs) => {
        if (state.live) work.observe(secondsOf(workMs))
      },
      onRetry: () => {
        retries.value++
      },
    }
  }

  return {
    addCluster: (cluster) => {
      addCluster(cluster)
    },
    setMaxConcurrentReconciles,
    forgetCluster,
    addController,
    controllerHooks,
    queueHooks,
  }
}
