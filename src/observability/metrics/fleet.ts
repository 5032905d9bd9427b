// fleetcheck's own families: one series per BackupCheck, per member cluster and per informer, and the
// hub-wide in-flight gauge.
//
// fleetcheck_backupcheck_verified is one series per check, 1 (True), 0 (False) or -1 (Unknown):
// `count by (cluster) (fleetcheck_backupcheck_verified == 0)` counts failing checks. A series per
// status (kube-state-metrics' style) would triple the biggest family, and prom-client renders a
// family in one synchronous block (about 10 µs a series here), which stalls the event loop.
//
// Every family is listed by the labels it is keyed on (perCheck, perMember, perInformer), and removal
// walks those lists: a family added to a list is removed with its check or cluster without more code.
import { Counter, Gauge, type Registry } from "prom-client"
import { fastGauge, type Labels } from "./fast-series.ts"

export type CheckVerifiedStatus = "True" | "False" | "Unknown"

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
  ): void
  deleteCheck(cluster: string, namespace: string, name: string): void
  setMemberConnected(cluster: string, connected: boolean): void
  setMemberReady(cluster: string, ready: boolean): void
  setInformerObjects(cluster: string, resource: string, objects: number): void
  incInformerRestarts(cluster: string, resource: string): void
  /** A scheduled slot was skipped because the previous run was still active (concurrencyPolicy Forbid). */
  incRunSkipped(cluster: string): void
  addGlobalInflight(delta: number): void
}

const verifiedValue: Record<CheckVerifiedStatus, number> = { True: 1, False: 0, Unknown: -1 }

interface ClusterState {
  // "namespace/name" → the check's labels
  readonly checks: Map<string, Labels>
  readonly resources: Set<string>
}

// "namespace/name" cannot collide: Kubernetes names contain no "/"
const checkKey = (namespace: string, name: string): string => `${namespace}/${name}`

export const makeFleetGauges = (registry: Registry, initialResources: ReadonlyArray<string>): FleetGauges => {
  const registers = [registry]

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
  const runsSkipped = new Counter({
    name: "fleetcheck_backupcheck_runs_skipped_total",
    help: "Scheduled runs not started because the previous run was still active (concurrencyPolicy Forbid)",
    labelNames: ["cluster"],
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

  // keyed on {cluster, namespace, name}, {cluster} and {cluster, resource}
  const perCheck: ReadonlyArray<Gauge | Counter> = [checkVerified, checkLastSuccess]
  const perMember: ReadonlyArray<Gauge | Counter> = [memberConnected, memberReady, runsSkipped]
  const perInformer: ReadonlyArray<Gauge | Counter> = [informerObjects, informerRestarts]

  const clusters = new Map<string, ClusterState>()

  const ensureResource = (cluster: string, state: ClusterState, resource: string): void => {
    if (state.resources.has(resource)) return
    const labels = { cluster, resource }
    informerObjects.set(labels, 0)
    informerRestarts.inc(labels, 0)
    state.resources.add(resource)
  }

  const addCluster = (cluster: string): ClusterState => {
    const existing = clusters.get(cluster)
    if (existing !== undefined) return existing
    const state: ClusterState = { checks: new Map(), resources: new Set() }
    clusters.set(cluster, state)
    memberConnected.set({ cluster }, 0)
    memberReady.set({ cluster }, 0)
    runsSkipped.inc({ cluster }, 0)
    for (const resource of initialResources) ensureResource(cluster, state, resource)
    return state
  }

  const removeCheck = (state: ClusterState, key: string, labels: Labels): void => {
    for (const family of perCheck) family.remove(labels)
    state.checks.delete(key)
  }

  const forgetCluster = (cluster: string): void => {
    const state = clusters.get(cluster)
    if (state === undefined) return
    clusters.delete(cluster)
    for (const [key, labels] of state.checks) removeCheck(state, key, labels)
    for (const resource of state.resources) {
      for (const family of perInformer) family.remove({ cluster, resource })
    }
    for (const family of perMember) family.remove({ cluster })
  }

  const setCheckVerified = (
    cluster: string,
    namespace: string,
    name: string,
    status: CheckVerifiedStatus,
    lastSuccess?: Date,
  ): void => {
    const state = addCluster(cluster)
    const key = checkKey(namespace, name)
    let labels = state.checks.get(key)
    if (labels === undefined) {
      labels = { cluster, namespace, name }
      state.checks.set(key, labels)
      checkLastSuccess.set(labels, 0)
    }
    checkVerified.set(labels, verifiedValue[status])
    const millis = lastSuccess?.getTime()
    // an invalid Date keeps the previous value rather than exporting NaN
    if (millis !== undefined && Number.isFinite(millis)) checkLastSuccess.set(labels, millis / 1000)
  }

  const deleteCheck = (cluster: string, namespace: string, name: string): void => {
    const state = clusters.get(cluster)
    if (state === undefined) return
    const key = checkKey(namespace, name)
    const labels = state.checks.get(key)
    if (labels !== undefined) removeCheck(state, key, labels)
  }

  return {
    addCluster: (cluster) => {
      addCluster(cluster)
    },
    forgetCluster,
    setCheckVerified,
    deleteCheck,
    setMemberConnected: (cluster, connected) => {
      addCluster(cluster)
      memberConnected.set({ cluster }, connected ? 1 : 0)
    },
    setMemberReady: (cluster, ready) => {
      addCluster(cluster)
      memberReady.set({ cluster }, ready ? 1 : 0)
    },
    setInformerObjects: (cluster, resource, objects) => {
      if (!Number.isFinite(objects)) return
      ensureResource(cluster, addCluster(cluster), resource)
      informerObjects.set({ cluster, resource }, objects)
    },
    incInformerRestarts: (cluster, resource) => {
      ensureResource(cluster, addCluster(cluster), resource)
      informerRestarts.inc({ cluster, resource })
    },
    incRunSkipped: (cluster) => {
      addCluster(cluster)
      runsSkipped.inc({ cluster })
    },
    addGlobalInflight: (delta) => {
      if (Number.isFinite(delta)) globalInflight.value += delta
    },
  }
}
