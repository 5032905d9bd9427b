// fleetcheck's own families: per member cluster and per informer, the hub-wide in-flight gauge, and the
// per-check families with their fleet-level counts (./check-series.ts, outside prom-client).
//
// fleetcheck_backupcheck_verified is one series per check, 1 (True), 0 (False) or -1 (Unknown):
// `count by (cluster) (fleetcheck_backupcheck_verified == 0)` counts failing checks. A series per
// status (kube-state-metrics' style) would triple the biggest family.
//
// Every prom-client family is listed by the labels it is keyed on (perMember, perInformer), and removal
// walks those lists: a family added to a list is removed with its cluster without more code.
import { Counter, type Gauge, Histogram, type Registry } from "prom-client"
import {
  type CheckFacts,
  type CheckSeriesMode,
  type CheckVerifiedStatus,
  type CheckViewFacts,
  makeCheckSeries,
} from "./check-series.ts"
import { type FastSeries, fastGauge } from "./fast-series.ts"

export type { CheckFacts, CheckVerifiedStatus, CheckViewFacts } from "./check-series.ts"

export interface FleetGauges {
  /** Creates the cluster's member and informer series at zero (idempotent). */
  addCluster(cluster: string): void
  /** Removes every series with this cluster label (its checks' included). */
  forgetCluster(cluster: string): void
  setCheckVerified(
    cluster: string,
    namespace: string,
    name: string,
    status: CheckVerifiedStatus,
    lastSuccess?: Date,
    view?: CheckViewFacts,
  ): void
  /** The check's spec and run facts for the alerts (a check without series yet is skipped). */
  setCheckFacts(cluster: string, namespace: string, name: string, facts: CheckFacts): void
  /** Whether this hub does the leader's work (with sharding: works its share of the members). */
  setLeader(leader: boolean): void
  deleteCheck(cluster: string, namespace: string, name: string): void
  setMemberConnected(cluster: string, connected: boolean): void
  setMemberReady(cluster: string, ready: boolean): void
  setInformerObjects(cluster: string, resource: string, objects: number): void
  incInformerRestarts(cluster: string, resource: string): void
  /** A scheduled slot was skipped because the previous run was still active (concurrencyPolicy Forbid). */
  incRunSkipped(cluster: string): void
  /**
   * A request to the member was sent again after the API server refused it with a Retry-After (429, or
   * a 5xx): client-go's rest_client_request_retries_total, keyed by cluster instead of host.
   */
  incRequestRetry(cluster: string, verb: string, code: number): void
  /** A run's verdict was written: how long its restore phase took (once per run, by the hub that wrote it). */
  observeRestoreDuration(cluster: string, seconds: number): void
  /**
   * The age of the restored data when the check's last run verified it (ADR 0009); undefined: no run
   * reported a dataTimestamp. A per-check series (check-series.ts), shown as --check-metrics says.
   */
  setCheckRecoveryPointAge(
    cluster: string,
    namespace: string,
    name: string,
    seconds: number | undefined,
  ): void
  addGlobalInflight(delta: number): void
  /** MemberCluster status writes waiting for a permit of the hub-wide bound (+1 / −1). */
  addStatusWritesWaiting(delta: number): void
  /** MemberCluster status writes holding a permit (+1 / −1). */
  addStatusWritesInflight(delta: number): void
  /** How long a MemberCluster status write waited for its permit. */
  observeStatusWriteWait(seconds: number): void
  /** The per-check families in the text format, written a slice at a time (see check-series.ts). */
  renderChecks(): Promise<string>
}

/** A status write waits for none to a few status rounds, longer when the hub API server is slow. */
export const statusWriteWaitBuckets = [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120]

/** Restores take seconds to hours: 1 s to 8 h. */
export const restoreDurationBuckets = [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 28800]

interface ClusterState {
  // Set on every member's status round (500 times a second at 1,000 members): fast series, a field write
  // each instead of prom-client's label hashing (copied into prom-client when scraped).
  readonly connected: FastSeries
  readonly ready: FastSeries
  /** fleetcheck_informer_objects by resource: the resources this cluster has informer series for. */
  readonly resources: Map<string, FastSeries>
  /** The {code, verb} pairs of rest_client_request_retries_total this cluster has series for. */
  readonly retried: Map<string, { readonly code: string; readonly verb: string }>
}

export const makeFleetGauges = (
  registry: Registry,
  initialResources: ReadonlyArray<string>,
  checkSeriesMode: CheckSeriesMode,
): FleetGauges => {
  const registers = [registry]
  const checkSeries = makeCheckSeries(registry, checkSeriesMode)

  const memberConnected = fastGauge(
    {
      name: "fleetcheck_member_cluster_connected",
      help: "1 when the hub holds a working connection to the member cluster",
      labelNames: ["cluster"],
    },
    registry,
  )
  const memberReady = fastGauge(
    {
      name: "fleetcheck_member_cluster_ready",
      help: "1 when the member cluster's engine is engaged with synced caches",
      labelNames: ["cluster"],
    },
    registry,
  )
  const informerObjects = fastGauge(
    {
      name: "fleetcheck_informer_objects",
      help: "Objects in the informer's cache",
      labelNames: ["cluster", "resource"],
    },
    registry,
  )
  const informerRestarts = new Counter({
    name: "fleetcheck_informer_restarts_total",
    help: "Times the informer had to relist or restart its watch after a failure",
    labelNames: ["cluster", "resource"],
    registers,
  })
  const runsSkipped = new Counter({
    name: "fleetcheck_backupcheck_runs_skipped_total",
    help: "Scheduled runs not started because the previous run was still active (concurrencyPolicy Forbid)",
    labelNames: ["cluster"],
    registers,
  })
  // client-go's name and labels, host replaced by cluster; a series appears with its first retry.
  const requestRetries = new Counter({
    name: "rest_client_request_retries_total",
    help: "Requests sent again after the API server refused them with a Retry-After (429, or 5xx), by status code and verb",
    labelNames: ["cluster", "code", "verb"],
    registers,
  })
  // Observed once per finished run, with the SPEC's `cluster` label: a member's 16 series appear with its
  // first recorded run (not at zero: an idle member adds nothing to a fleet-scale scrape).
  const restoreDuration = new Histogram({
    name: "fleetcheck_restore_duration_seconds",
    help: "How long the restore phase of each finished verification run took",
    labelNames: ["cluster"],
    buckets: restoreDurationBuckets,
    registers,
  })
  // touched twice per reconcile (permit acquired, released): a fast series, not prom-client's inc
  const globalInflight = fastGauge(
    {
      name: "fleetcheck_reconcile_global_inflight",
      help: "Reconciles currently holding a permit of the hub-wide concurrency limit",
      labelNames: [],
    },
    registry,
  ).series({})
  // hub-wide and never removed: FleetcheckHubAbsent fires when no scraped hub has it at 1
  const leader = fastGauge(
    {
      name: "fleetcheck_hub_leader",
      help: "1 while this hub does the leader's work (with --sharding: while it works its share of the members)",
      labelNames: [],
    },
    registry,
  ).series({})

  // the hub-wide bound on MemberCluster status writes (ADR 0010, decision 9)
  const statusWritesWaiting = fastGauge(
    {
      name: "fleetcheck_member_cluster_status_writes_waiting",
      help: "MemberCluster status writes waiting for a permit of the hub-wide bound",
      labelNames: [],
    },
    registry,
  ).series({})
  const statusWritesInflight = fastGauge(
    {
      name: "fleetcheck_member_cluster_status_writes_inflight",
      help: "MemberCluster status writes holding a permit of the hub-wide bound",
      labelNames: [],
    },
    registry,
  ).series({})
  const statusWriteWait = new Histogram({
    name: "fleetcheck_member_cluster_status_write_wait_seconds",
    help: "How long each MemberCluster status write waited for a permit of the hub-wide bound",
    labelNames: [],
    buckets: statusWriteWaitBuckets,
    registers,
  })

  // keyed on {cluster} and {cluster, resource} (the fast series apart: removed through ClusterState)
  const perMember: ReadonlyArray<Gauge | Counter | Histogram> = [runsSkipped, restoreDuration]
  const perInformer: ReadonlyArray<Gauge | Counter> = [informerRestarts]

  const clusters = new Map<string, ClusterState>()

  const ensureResource = (cluster: string, state: ClusterState, resource: string): FastSeries => {
    const existing = state.resources.get(resource)
    if (existing !== undefined) return existing
    const labels = { cluster, resource }
    const objects = informerObjects.series(labels)
    informerRestarts.inc(labels, 0)
    state.resources.set(resource, objects)
    return objects
  }

  const addCluster = (cluster: string): ClusterState => {
    const existing = clusters.get(cluster)
    if (existing !== undefined) return existing
    const state: ClusterState = {
      connected: memberConnected.series({ cluster }),
      ready: memberReady.series({ cluster }),
      resources: new Map(),
      retried: new Map(),
    }
    clusters.set(cluster, state)
    checkSeries.addCluster(cluster)
    runsSkipped.inc({ cluster }, 0)
    for (const resource of initialResources) ensureResource(cluster, state, resource)
    return state
  }

  const forgetCluster = (cluster: string): void => {
    const state = clusters.get(cluster)
    if (state === undefined) return
    clusters.delete(cluster)
    checkSeries.forgetCluster(cluster)
    for (const [resource, objects] of state.resources) {
      informerObjects.remove(objects)
      for (const family of perInformer) family.remove({ cluster, resource })
    }
    memberConnected.remove(state.connected)
    memberReady.remove(state.ready)
    for (const family of perMember) family.remove({ cluster })
    for (const labels of state.retried.values()) requestRetries.remove({ cluster, ...labels })
  }

  const setCheckVerified = (
    cluster: string,
    namespace: string,
    name: string,
    status: CheckVerifiedStatus,
    lastSuccess?: Date,
    view?: CheckViewFacts,
  ): void => {
    addCluster(cluster)
    checkSeries.set(cluster, namespace, name, status, lastSuccess, view)
  }

  return {
    addCluster: (cluster) => {
      addCluster(cluster)
    },
    forgetCluster,
    setCheckVerified,
    setCheckFacts: checkSeries.setFacts,
    setLeader: (isLeader) => {
      leader.value = isLeader ? 1 : 0
    },
    deleteCheck: checkSeries.delete,
    setMemberConnected: (cluster, connected) => {
      addCluster(cluster).connected.value = connected ? 1 : 0
    },
    setMemberReady: (cluster, ready) => {
      addCluster(cluster).ready.value = ready ? 1 : 0
    },
    setInformerObjects: (cluster, resource, objects) => {
      if (!Number.isFinite(objects)) return
      ensureResource(cluster, addCluster(cluster), resource).value = objects
    },
    incInformerRestarts: (cluster, resource) => {
      ensureResource(cluster, addCluster(cluster), resource)
      informerRestarts.inc({ cluster, resource })
    },
    incRequestRetry: (cluster, verb, code) => {
      const state = addCluster(cluster)
      const labels = { code: String(code), verb }
      state.retried.set(`${labels.code} ${verb}`, labels)
      requestRetries.inc({ cluster, ...labels })
    },
    incRunSkipped: (cluster) => {
      addCluster(cluster)
      runsSkipped.inc({ cluster })
    },
    observeRestoreDuration: (cluster, seconds) => {
      if (!Number.isFinite(seconds) || seconds < 0) return
      addCluster(cluster)
      restoreDuration.observe({ cluster }, seconds)
    },
    setCheckRecoveryPointAge: checkSeries.setRecoveryPointAge,
    addGlobalInflight: (delta) => {
      if (Number.isFinite(delta)) globalInflight.value += delta
    },
    addStatusWritesWaiting: (delta) => {
      if (Number.isFinite(delta)) statusWritesWaiting.value += delta
    },
    addStatusWritesInflight: (delta) => {
      if (Number.isFinite(delta)) statusWritesInflight.value += delta
    },
    observeStatusWriteWait: (seconds) => {
      if (Number.isFinite(seconds) && seconds >= 0) statusWriteWait.observe(seconds)
    },
    renderChecks: checkSeries.render,
  }
}
