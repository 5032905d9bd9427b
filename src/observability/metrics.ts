// The hub's Prometheus metrics, in a private prom-client Registry (never the global one, so nothing a
// dependency registers leaks into /metrics and tests can build as many as they like).
//
// Names and label sets follow controller-runtime (pkg/internal/controller/metrics, pkg/metrics/
// workqueue.go) so its dashboards and alerts work, with one addition: every per-member series has a
// `cluster` label. Workqueue series carry name=controller=<controller> as controller-runtime sets them
// (its `priority` label on workqueue_depth is left out: we have no priority queue).
//
// Reconcile outcomes map onto controller-runtime's `result` values exactly as its reconcileHandler
// counts them:
//   success        → result="success"
//   requeue_after  → result="requeue_after"
//   error          → result="error",  reconcile_errors_total
//   terminal_error → result="error",  reconcile_errors_total, terminal_reconcile_errors_total
//   panic          → result="error",  reconcile_errors_total, reconcile_panics_total
// result="requeue" (Result{Requeue: true}) has no counterpart here; it is pre-initialised at 0 so
// queries written against controller-runtime still find the series.
//
// fleetcheck_backupcheck_verified is one series per check, 1 (True), 0 (False) or -1 (Unknown):
// `count by (cluster) (fleetcheck_backupcheck_verified == 0)` counts failing checks. A series per
// status (kube-state-metrics' style) would triple the biggest family, and prom-client renders a
// family in one synchronous block (about 10 µs a series here), which stalls the event loop.
//
// Hot path: prom-client's labelled children still hash and validate their labels on every call
// (0.5–3 µs each), so the counters and gauges the queue and workers touch are plain numbers copied
// into prom-client when scraped (its `collect` callback); only the histograms go through prom-client
// on the hot path, with their children cached.
import { setImmediate as yieldToEventLoop } from "node:timers/promises"
import { Counter, collectDefaultMetrics, Gauge, Histogram, Registry } from "prom-client"
import type { ControllerHooks, ReconcileOutcome } from "../engine/controller.ts"
import type { WorkQueueMetricsHooks } from "../engine/workqueue/workqueue.ts"

export type CheckVerifiedStatus = "True" | "False" | "Unknown"

export interface MetricsOptions {
  /** Controllers whose series initCluster pre-initialises (default ["backupcheck"]); the first is queueHooks' default. */
  readonly controllers?: ReadonlyArray<string>
  /** Informer resources whose series initCluster pre-initialises (default the member engine's two). */
  readonly resources?: ReadonlyArray<string>
  /** controller_runtime_max_concurrent_reconciles unless initCluster says otherwise (default 4, the controller's). */
  readonly maxConcurrentReconciles?: number
  /** Also expose prom-client's process_* and nodejs_* metrics (default false: the hub's main turns it on). */
  readonly processMetrics?: boolean
}

export interface InitClusterOptions {
  /** Worker fibers per controller for this member (controller_runtime_max_concurrent_reconciles). */
  readonly maxConcurrentReconciles?: number
}

export interface FleetMetrics {
  readonly registry: Registry
  /** The Content-Type header for render()'s output. */
  readonly contentType: string
  /** The text exposition of every metric in the registry (registry.metrics(), yielding between families). */
  render(): Promise<string>
  /** Hooks for runController. Reconciles of clusters not initialised (or forgotten) are not counted. */
  controllerHooks(controller: string): ControllerHooks
  /**
   * Hooks for one member's workqueue: initialises the cluster, and observes this incarnation of it
   * only (after forgetMember they are inert, so a dying queue cannot bring stale series back).
   */
  queueHooks(cluster: string, controller?: string): WorkQueueMetricsHooks
  /** Creates the cluster's series at zero (idempotent), as controller-runtime does on controller start. */
  initCluster(cluster: string, options?: InitClusterOptions): void
  /** Removes every series of the cluster. Call it after the member's scope has closed. */
  forgetMember(cluster: string): void
  /** lastSuccess omitted keeps the previous timestamp (0 when there never was one). */
  setCheckVerified(
    cluster: string,
    namespace: string,
    name: string,
    status: CheckVerifiedStatus,
    lastSuccess?: Date,
  ): void
  deleteCheck(cluster: string, namespace: string, name: string): void
  setMemberConnected(cluster: string, connected: boolean): void
  setMemberReady(cluster: string, ready: boolean): void
  setInformerObjects(cluster: string, resource: string, objects: number): void
  incInformerRestarts(cluster: string, resource: string): void
  /** Reconciles holding a permit of the hub-wide limit (+1 on acquire, -1 on release). */
  addGlobalInflight(delta: number): void
}

const reconcileResults = ["success", "error", "requeue", "requeue_after"] as const
type ReconcileResult = (typeof reconcileResults)[number]

const resultOf: Record<ReconcileOutcome, ReconcileResult> = {
  success: "success",
  requeue_after: "requeue_after",
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

const defaultResources = ["backupchecks.fleetcheck.io", "jobs.batch"]

const verifiedValue: Record<CheckVerifiedStatus, number> = { True: 1, False: 0, Unknown: -1 }

type Labels = Record<string, string>

/** One series of a hot counter or gauge: the hot path only touches `value`. */
interface FastSeries {
  readonly labels: Labels
  value: number
  // the part of a counter's value already added to prom-client
  flushed: number
}

interface FastMetric {
  /** Creates the series at zero. */
  series(labels: Labels): FastSeries
  /** Drops the series; later writes to the object are never exported. */
  remove(series: FastSeries): void
}

interface MetricConfig {
  readonly name: string
  readonly help: string
  readonly labelNames: ReadonlyArray<string>
}

const fastCounter = (config: MetricConfig, registry: Registry): FastMetric => {
  const live = new Set<FastSeries>()
  const metric: Counter = new Counter({
    ...config,
    labelNames: [...config.labelNames],
    registers: [registry],
    collect: () => {
      for (const s of live) {
        if (s.value === s.flushed) continue
        metric.inc(s.labels, s.value - s.flushed)
        s.flushed = s.value
      }
    },
  })
  return {
    series: (labels) => {
      const s: FastSeries = { labels, value: 0, flushed: 0 }
      metric.inc(labels, 0)
      live.add(s)
      return s
    },
    remove: (s) => {
      live.delete(s)
      metric.remove(s.labels)
    },
  }
}

const fastGauge = (config: MetricConfig, registry: Registry): FastMetric => {
  const live = new Set<FastSeries>()
  const metric: Gauge = new Gauge({
    ...config,
    labelNames: [...config.labelNames],
    registers: [registry],
    collect: () => {
      for (const s of live) metric.set(s.labels, s.value)
    },
  })
  return {
    series: (labels) => {
      const s: FastSeries = { labels, value: 0, flushed: 0 }
      metric.set(labels, 0)
      live.add(s)
      return s
    },
    remove: (s) => {
      live.delete(s)
      metric.remove(s.labels)
    },
  }
}

interface ControllerSeries {
  readonly labels: Labels
  readonly total: Record<ReconcileResult, FastSeries>
  readonly errors: FastSeries
  readonly terminal: FastSeries
  readonly panics: FastSeries
  readonly active: FastSeries
  readonly time: Histogram.Internal<string>
}

interface QueueSeries {
  readonly labels: Labels
  readonly adds: FastSeries
  readonly depth: FastSeries
  readonly retries: FastSeries
  readonly queueDuration: Histogram.Internal<string>
  readonly workDuration: Histogram.Internal<string>
}

interface CheckSeries {
  readonly labels: Labels
}

interface ClusterState {
  readonly cluster: string
  // false once forgotten: hooks bound to this incarnation stop writing
  live: boolean
  maxConcurrentReconciles: number
  readonly controllers: Map<string, ControllerSeries>
  readonly queues: Map<string, QueueSeries>
  readonly checks: Map<string, CheckSeries>
  readonly resources: Set<string>
}

// prom-client throws on a non-finite observation, and hooks must not throw: a clock stepping back
// or a NaN is observed as 0
const validSeconds = (s: number): number => (Number.isFinite(s) && s > 0 ? s : 0)
const secondsOf = (ms: number): number => validSeconds(ms / 1000)

export const makeMetrics = (options: MetricsOptions = {}): FleetMetrics => {
  const registry = new Registry()
  const registers = [registry]
  if (options.processMetrics === true) collectDefaultMetrics({ register: registry })

  const controllerLabels = ["controller", "cluster"]
  const queueLabels = ["name", "controller", "cluster"]

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
  const reconcileTime = new Histogram({
    name: "controller_runtime_reconcile_time_seconds",
    help: "Length of time per reconciliation per controller",
    labelNames: controllerLabels,
    buckets: [...reconcileTimeBuckets],
    registers,
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
  const queueLatency = new Histogram({
    name: "workqueue_queue_duration_seconds",
    help: "How long in seconds an item stays in workqueue before being requested",
    labelNames: queueLabels,
    buckets: [...workqueueDurationBuckets],
    registers,
  })
  const workDuration = new Histogram({
    name: "workqueue_work_duration_seconds",
    help: "How long in seconds processing an item from workqueue takes.",
    labelNames: queueLabels,
    buckets: [...workqueueDurationBuckets],
    registers,
  })
  const queueRetries = fastCounter(
    {
      name: "workqueue_retries_total",
      help: "Total number of retries handled by workqueue",
      labelNames: queueLabels,
    },
    registry,
  )

  const checkVerified = new Gauge({
    name: "fleetcheck_backupcheck_verified",
    help: "The BackupCheck's Verified condition: 1 True, 0 False, -1 Unknown",
    labelNames: ["cluster", "namespace", "name"],
    registers,
  })
  const checkLastSuccess = new Gauge({
    name: "fleetcheck_backupcheck_last_success_timestamp_seconds",
    help: "Unix time of the BackupCheck's last successful verification (0: never)",
    labelNames: ["cluster", "namespace", "name"],
    registers,
  })
  const memberConnected = new Gauge({
    name: "fleetcheck_member_cluster_connected",
    help: "1 when the hub holds a working connection to the member cluster",
    labelNames: ["cluster"],
    registers,
  })
  const memberReady = new Gauge({
    name: "fleetcheck_member_cluster_ready",
    help: "1 when the member cluster's engine is engaged with synced caches",
    labelNames: ["cluster"],
    registers,
  })
  const informerObjects = new Gauge({
    name: "fleetcheck_informer_objects",
    help: "Objects in the informer's cache",
    labelNames: ["cluster", "resource"],
    registers,
  })
  const informerRestarts = new Counter({
    name: "fleetcheck_informer_restarts_total",
    help: "Times the informer had to relist or restart its watch after a failure",
    labelNames: ["cluster", "resource"],
    registers,
  })
  const globalInflight = new Gauge({
    name: "fleetcheck_reconcile_global_inflight",
    help: "Reconciles currently holding a permit of the hub-wide concurrency limit",
    registers,
  })
  globalInflight.set(0)

  const controllers = new Set<string>(options.controllers ?? ["backupcheck"])
  const defaultController = controllers.values().next().value ?? "backupcheck"
  const resources = options.resources ?? defaultResources
  const defaultMaxConcurrent = options.maxConcurrentReconciles ?? 4
  const clusters = new Map<string, ClusterState>()

  const ensureController = (state: ClusterState, controller: string): ControllerSeries => {
    const existing = state.controllers.get(controller)
    if (existing !== undefined) return existing
    const labels = { controller, cluster: state.cluster }
    const total = {} as Record<ReconcileResult, FastSeries>
    for (const result of reconcileResults) {
      total[result] = reconcileTotal.series({ controller, cluster: state.cluster, result })
    }
    reconcileTime.zero(labels)
    maxConcurrent.set(labels, state.maxConcurrentReconciles)
    const series: ControllerSeries = {
      labels,
      total,
      errors: reconcileErrors.series(labels),
      terminal: terminalErrors.series(labels),
      panics: reconcilePanics.series(labels),
      active: activeWorkers.series(labels),
      time: reconcileTime.labels(labels),
    }
    state.controllers.set(controller, series)
    return series
  }

  const ensureQueue = (state: ClusterState, controller: string): QueueSeries => {
    const existing = state.queues.get(controller)
    if (existing !== undefined) return existing
    const labels = { name: controller, controller, cluster: state.cluster }
    queueLatency.zero(labels)
    workDuration.zero(labels)
    const series: QueueSeries = {
      labels,
      adds: queueAdds.series(labels),
      depth: queueDepth.series(labels),
      retries: queueRetries.series(labels),
      queueDuration: queueLatency.labels(labels),
      workDuration: workDuration.labels(labels),
    }
    state.queues.set(controller, series)
    return series
  }

  const ensureResource = (state: ClusterState, resource: string): void => {
    if (state.resources.has(resource)) return
    const labels = { cluster: state.cluster, resource }
    informerObjects.set(labels, 0)
    informerRestarts.inc(labels, 0)
    state.resources.add(resource)
  }

  const initCluster = (cluster: string, init?: InitClusterOptions): ClusterState => {
    let state = clusters.get(cluster)
    if (state === undefined) {
      state = {
        cluster,
        live: true,
        maxConcurrentReconciles: init?.maxConcurrentReconciles ?? defaultMaxConcurrent,
        controllers: new Map(),
        queues: new Map(),
        checks: new Map(),
        resources: new Set(),
      }
      clusters.set(cluster, state)
      memberConnected.set({ cluster }, 0)
      memberReady.set({ cluster }, 0)
    } else if (init?.maxConcurrentReconciles !== undefined) {
      state.maxConcurrentReconciles = init.maxConcurrentReconciles
      for (const series of state.controllers.values())
        maxConcurrent.set(series.labels, init.maxConcurrentReconciles)
    }
    for (const controller of controllers) {
      ensureController(state, controller)
      ensureQueue(state, controller)
    }
    for (const resource of resources) ensureResource(state, resource)
    return state
  }

  const addController = (controller: string): void => {
    if (controllers.has(controller)) return
    controllers.add(controller)
    for (const state of clusters.values()) {
      ensureController(state, controller)
      ensureQueue(state, controller)
    }
  }

  const removeCheck = (state: ClusterState, key: string, check: CheckSeries): void => {
    checkVerified.remove(check.labels)
    checkLastSuccess.remove(check.labels)
    state.checks.delete(key)
  }

  const forgetMember = (cluster: string): void => {
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
      reconcileTime.remove(series.labels)
      maxConcurrent.remove(series.labels)
    }
    for (const series of state.queues.values()) {
      queueAdds.remove(series.adds)
      queueDepth.remove(series.depth)
      queueRetries.remove(series.retries)
      queueLatency.remove(series.labels)
      workDuration.remove(series.labels)
    }
    for (const [key, check] of state.checks) removeCheck(state, key, check)
    for (const resource of state.resources) {
      informerObjects.remove({ cluster, resource })
      informerRestarts.remove({ cluster, resource })
    }
    memberConnected.remove({ cluster })
    memberReady.remove({ cluster })
  }

  const stateOf = (cluster: string): ClusterState => clusters.get(cluster) ?? initCluster(cluster)

  // "namespace/name" cannot collide: Kubernetes names contain no "/"
  const checkKey = (namespace: string, name: string): string => `${namespace}/${name}`

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

  const queueHooks = (cluster: string, controller: string = defaultController): WorkQueueMetricsHooks => {
    addController(controller)
    const state = initCluster(cluster)
    const series = ensureQueue(state, controller)
    const { adds, depth, queueDuration, workDuration: work, retries } = series
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

  const setCheckVerified = (
    cluster: string,
    namespace: string,
    name: string,
    status: CheckVerifiedStatus,
    lastSuccess?: Date,
  ): void => {
    const state = stateOf(cluster)
    const key = checkKey(namespace, name)
    let check = state.checks.get(key)
    if (check === undefined) {
      check = { labels: { cluster, namespace, name } }
      state.checks.set(key, check)
      checkLastSuccess.set(check.labels, 0)
    }
    checkVerified.set(check.labels, verifiedValue[status])
    const millis = lastSuccess?.getTime()
    // an invalid Date keeps the previous value rather than exporting NaN
    if (millis !== undefined && Number.isFinite(millis)) checkLastSuccess.set(check.labels, millis / 1000)
  }

  const deleteCheck = (cluster: string, namespace: string, name: string): void => {
    const state = clusters.get(cluster)
    if (state === undefined) return
    const key = checkKey(namespace, name)
    const check = state.checks.get(key)
    if (check !== undefined) removeCheck(state, key, check)
  }

  // registry.metrics() formats every family in one synchronous run (a quarter of a second for 40k
  // series on a slow core); family by family, with a turn of the event loop between, the stall is
  // bounded by the largest family. The output is byte for byte what registry.metrics() returns.
  const render = async (): Promise<string> => {
    const parts: Array<string> = []
    for (const metric of registry.getMetricsAsArray()) {
      parts.push(await registry.getSingleMetricAsString(metric.name))
      await yieldToEventLoop()
    }
    return `${parts.join("\n\n")}\n`
  }

  return {
    registry,
    contentType: registry.contentType,
    render,
    controllerHooks,
    queueHooks,
    initCluster: (cluster, init) => {
      initCluster(cluster, init)
    },
    forgetMember,
    setCheckVerified,
    deleteCheck,
    setMemberConnected: (cluster, connected) => {
      stateOf(cluster)
      memberConnected.set({ cluster }, connected ? 1 : 0)
    },
    setMemberReady: (cluster, ready) => {
      stateOf(cluster)
      memberReady.set({ cluster }, ready ? 1 : 0)
    },
    setInformerObjects: (cluster, resource, objects) => {
      if (!Number.isFinite(objects)) return
      ensureResource(stateOf(cluster), resource)
      informerObjects.set({ cluster, resource }, objects)
    },
    incInformerRestarts: (cluster, resource) => {
      ensureResource(stateOf(cluster), resource)
      informerRestarts.inc({ cluster, resource })
    },
    addGlobalInflight: (delta) => {
      if (Number.isFinite(delta)) globalInflight.inc(delta)
    },
  }
}
