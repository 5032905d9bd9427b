// One engaged member's whole life, run as one fiber in the hub's FiberMap (keyed by cluster name):
// its engine, a health probe with failure/success thresholds, a cache-sync watch with a timeout (a
// member that cannot sync shows why and never blocks the others), and the MemberCluster status
// writer. Interrupting the fiber closes the member's scope: workers drain, sockets close.
import type { KubeConfig } from "@kubernetes/client-node"
import { Clock, Effect, type Scope, type Semaphore } from "effect"
import type { MemberCluster, MemberClusterStatus } from "../api/membercluster.ts"
import { apiVersion } from "../api/names.ts"
import { type MemberEngine, startMemberEngine } from "../engine/member-engine.ts"
import { isNotFound, KubeApiError, type KubeClient } from "../kube/client.ts"
import type { FleetMetrics } from "../observability/metrics/index.ts"
import { type MemberEntry, memberClusterStatus } from "./fleet-state.ts"

export interface MemberTimings {
  /** How often the member's API server is probed (default 10 s). */
  readonly probeIntervalMs: number
  /** Consecutive failed probes before Connected=False (default 3). */
  readonly probeFailureThreshold: number
  /** Consecutive good probes before Connected=True again (default 1). */
  readonly probeSuccessThreshold: number
  /** How long caches may take to sync before Ready=False says so (default 30 s). */
  readonly cacheSyncTimeoutMs: number
  /** How often the MemberCluster status is recomputed and written when changed (default 2 s). */
  readonly statusIntervalMs: number
  /** Grace for in-flight reconciles when the member stops (default 30 s). */
  readonly drainGraceMs: number
  /** Backstop poll while a restore Job runs (default 30 s). */
  readonly runningPollMs: number
  readonly workersPerMember: number
  /** CredentialsExpiringSoon this long before expiry (default 7 days). */
  readonly expiryWarningMs: number
}

export const defaultMemberTimings: MemberTimings = {
  probeIntervalMs: 10_000,
  probeFailureThreshold: 3,
  probeSuccessThreshold: 1,
  cacheSyncTimeoutMs: 30_000,
  statusIntervalMs: 2_000,
  drainGraceMs: 30_000,
  runningPollMs: 30_000,
  workersPerMember: 4,
  expiryWarningMs: 7 * 24 * 3600_000,
}

export interface MemberDeps {
  readonly hubClient: KubeClient
  readonly globalLimit: Semaphore.Semaphore
  readonly timings: MemberTimings
  readonly metrics?: FleetMetrics
  /** Drain grace when the member stops now: shorter once the lease is lost (see hub.ts). */
  readonly drainGraceMs?: () => number
}

export interface MemberSpec {
  readonly entry: MemberEntry
  readonly kubeConfig: KubeConfig
  readonly credentialExpiry?: Date
  /** From the Secret's fleetcheck.io/namespaces annotation; undefined means cluster-wide. */
  readonly namespaces?: ReadonlyArray<string> | undefined
}

const memberClusterPath = (name: string, sub = "") =>
  `/apis/fleetcheck.io/v1alpha1/memberclusters/${encodeURIComponent(name)}${sub}`

/**
 * Creates the MemberCluster when missing, keeps its labels equal to the Secret's, and writes the status
 * when it changed. The status write carries the resourceVersion read just before, so a concurrent
 * writer's fields are never silently overwritten (a conflict waits for the next round).
 */
export const syncMemberCluster = Effect.fnUntraced(function* (hubClient: KubeClient, entry: MemberEntry) {
  const now = yield* Clock.currentTimeMillis
  let current = yield* hubClient
    .request<MemberCluster>({ method: "GET", path: memberClusterPath(entry.name) })
    .pipe(Effect.catchIf(isNotFound, () => Effect.succeed(undefined)))
  if (!current) {
    current = yield* hubClient.request<MemberCluster>({
      method: "POST",
      path: "/apis/fleetcheck.io/v1alpha1/memberclusters",
      body: {
        apiVersion,
        kind: "MemberCluster",
        metadata: { name: entry.name, labels: entry.labels },
        spec: {},
      },
    })
  } else if (JSON.stringify(current.metadata.labels ?? {}) !== JSON.stringify(entry.labels)) {
    const removed = Object.fromEntries(
      Object.keys(current.metadata.labels ?? {})
        .filter((k) => !(k in entry.labels))
        .map((k) => [k, null]),
    )
    current = yield* hubClient.request<MemberCluster>({
      method: "PATCH",
      path: memberClusterPath(entry.name),
      contentType: "application/merge-patch+json",
      body: {
        metadata: {
          resourceVersion: current.metadata.resourceVersion,
          labels: { ...removed, ...entry.labels },
        },
      },
    })
  }
  const desired: MemberClusterStatus = memberClusterStatus(entry, current.status, now)
  const withoutProbeTime = (s: MemberClusterStatus | undefined) =>
    JSON.stringify({ ...s, lastProbeTime: undefined })
  // The probe time alone changing is not worth a write every interval: refresh it at most once a minute.
  const probeTimeStale =
    !current.status?.lastProbeTime ||
    (desired.lastProbeTime !== undefined &&
      Date.parse(desired.lastProbeTime) - Date.parse(current.status.lastProbeTime) >= 60_000)
  if (
    withoutProbeTime(desired) !== withoutProbeTime(current.status) ||
    (probeTimeStale && desired.lastProbeTime)
  ) {
    yield* hubClient.request({
      method: "PATCH",
      path: memberClusterPath(entry.name, "/status"),
      contentType: "application/merge-patch+json",
      body: { metadata: { resourceVersion: current.metadata.resourceVersion }, status: desired },
    })
  }
  entry.lastStatus = desired
})

/** One probe: GET /version with a short deadline; 401/403 mean the credentials are refused. */
const probeOnce = Effect.fnUntraced(function* (
  engine: MemberEngine,
  entry: MemberEntry,
  timings: MemberTimings,
) {
  const result = yield* engine.client
    .request<{ gitVersion?: string }>({
      method: "GET",
      path: "/version",
      timeoutMs: Math.min(5_000, timings.probeIntervalMs),
    })
    .pipe(Effect.result)
  const p = entry.probe
  p.lastProbeTime = yield* Clock.currentTimeMillis
  if (result._tag === "Success") {
    p.consecutiveSuccesses++
    p.consecutiveFailures = 0
    p.credentialsValid = true
    p.kubernetesVersion = result.success.gitVersion ?? p.kubernetesVersion
    if (p.connected !== true && p.consecutiveSuccesses >= timings.probeSuccessThreshold) {
      if (p.connected === false) yield* Effect.logInfo("member reachable again")
      p.connected = true
      delete p.lastError
    }
    return
  }
  const e = result.failure
  p.consecutiveFailures++
  p.consecutiveSuccesses = 0
  p.lastError = e.message
  if (e instanceof KubeApiError && (e.status === 401 || e.status === 403)) p.credentialsValid = false
  // The first probe decides at once; after that, only a run of failures flips a connected member.
  if (p.connected === undefined || p.consecutiveFailures >= timings.probeFailureThreshold) {
    if (p.connected !== false) yield* Effect.logWarning("member unreachable", e.message)
    p.connected = false
  }
})

export const runMember = Effect.fnUntraced(function* (spec: MemberSpec, deps: MemberDeps) {
  const { entry } = spec
  const { timings, metrics } = deps
  entry.refused = undefined
  entry.synced = false
  entry.probe = { consecutiveFailures: 0, consecutiveSuccesses: 0 }
  entry.credentialExpiry = spec.credentialExpiry
  const engine = yield* startMemberEngine({
    cluster: entry.name,
    kubeConfig: spec.kubeConfig,
    namespaces: spec.namespaces,
    workers: timings.workersPerMember,
    globalLimit: deps.globalLimit,
    runningPollMs: timings.runningPollMs,
    drainGraceMs: deps.drainGraceMs ?? timings.drainGraceMs,
    ...(metrics
      ? {
          controllerHooks: metrics.controllerHooks("backupcheck"),
          queueHooks: metrics.queueHooks(entry.name),
        }
      : {}),
  })
  entry.engineRunning = true
  entry.checks = () => engine.checks.store.list()
  metrics?.initCluster(entry.name, { maxConcurrentReconciles: timings.workersPerMember })
  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      entry.engineRunning = false
      entry.synced = false
      entry.checks = () => []
    }),
  )

  yield* engine.awaitSynced.pipe(
    Effect.timeout(timings.cacheSyncTimeoutMs),
    Effect.matchEffect({
      onSuccess: () =>
        Effect.sync(() => {
          entry.synced = true
          delete entry.syncError
        }).pipe(Effect.andThen(Effect.logInfo("member caches synced"))),
      onFailure: () =>
        Effect.gen(function* () {
          entry.syncError = `caches not synced after ${timings.cacheSyncTimeoutMs} ms: ${entry.probe.lastError ?? "the API server did not answer the LIST"}`
          yield* Effect.logWarning("member cache sync timed out; still trying", entry.syncError)
          yield* engine.awaitSynced
          entry.synced = true
          delete entry.syncError
          yield* Effect.logInfo("member caches synced late")
        }),
    }),
    Effect.forkScoped,
  )

  const probeLoop = Effect.gen(function* () {
    while (true) {
      yield* probeOnce(engine, entry, timings)
      const now = yield* Clock.currentTimeMillis
      entry.expiringSoon =
        spec.credentialExpiry !== undefined && spec.credentialExpiry.getTime() - now < timings.expiryWarningMs
      metrics?.setMemberConnected(entry.name, entry.probe.connected === true)
      yield* Effect.sleep(timings.probeIntervalMs)
    }
  })
  yield* Effect.forkScoped(probeLoop)

  const restartsSeen = new Map<string, number>()
  const statusLoop = Effect.gen(function* () {
    while (true) {
      metrics?.setMemberReady(entry.name, entry.synced)
      metrics?.setInformerObjects(entry.name, "backupchecks.fleetcheck.io", engine.checks.store.size)
      metrics?.setInformerObjects(entry.name, "jobs.batch", engine.jobs.store.size)
      for (const [resource, informer] of [
        ["backupchecks.fleetcheck.io", engine.checks],
        ["jobs.batch", engine.jobs],
      ] as const) {
        const seen = restartsSeen.get(resource) ?? 0
        for (let i = seen; i < informer.watchRestarts; i++) metrics?.incInformerRestarts(entry.name, resource)
        restartsSeen.set(resource, informer.watchRestarts)
      }
      for (const c of engine.checks.store.list()) {
        const v = (c.status?.conditions ?? []).find((x) => x.type === "Verified")
        const reachable = entry.engineRunning && entry.probe.connected === true
        metrics?.setCheckVerified(
          entry.name,
          c.metadata.namespace ?? "",
          c.metadata.name,
          reachable ? (v?.status ?? "Unknown") : "Unknown",
          c.status?.lastSuccessfulTime ? new Date(c.status.lastSuccessfulTime) : undefined,
        )
      }
      // Metrics first, then the MemberCluster: whoever sees the new status finds the metrics current.
      yield* syncMemberCluster(deps.hubClient, entry).pipe(
        Effect.catch((e) => Effect.logWarning("writing MemberCluster status failed; retrying", String(e))),
      )
      yield* Effect.sleep(timings.statusIntervalMs)
    }
  })
  yield* Effect.forkScoped(statusLoop)
  return engine
}) as (spec: MemberSpec, deps: MemberDeps) => Effect.Effect<MemberEngine, never, Scope.Scope>
