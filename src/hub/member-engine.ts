// One member cluster's BackupCheck engine: its client, its informers (BackupChecks; restore Jobs by
// label), one workqueue and the BackupCheck controller's workers, built from the generic machinery in
// src/engine, all inside the caller's Scope so that closing the
// scope (disengage, rebuild, lost leadership) stops every fiber and socket of this member at once.
import type { KubeConfig, V1Namespace } from "@kubernetes/client-node"
import { Effect, type Scope } from "effect"
import type { BackupCheck, LastRun } from "../api/backupcheck.ts"
import { labelBackupCheck, labelSandbox } from "../api/names.ts"
import {
  type ControllerHooks,
  type ControllerStats,
  makeControllerStats,
  runController,
} from "../engine/controller.ts"
import type { GlobalLimit } from "../engine/global-limit.ts"
import { type InformerSet, makeInformerSet } from "../engine/informer/informer-set.ts"
import { makeWorkQueue, type WorkQueue, type WorkQueueMetricsHooks } from "../engine/workqueue/workqueue.ts"
import {
  type CredentialState,
  type KubeClient,
  type KubeError,
  type KubeRequest,
  type KubeTransportError,
  makeKubeClient,
} from "../kube/client.ts"
import { backupChecks, jobs as jobResource, namespaces as namespaceResource } from "../kube/resources.ts"
import { gateWrites } from "../kube/write-gate.ts"
import {
  makeBackupCheckReconciler,
  ownerUidIndex,
  sandboxKeyIndex,
  sandboxUidIndex,
} from "../reconcile/backupcheck-reconciler.ts"
import { type CachedJob, cachedJob } from "../reconcile/cached-job.ts"
import { sandboxCheckKey, sandboxCheckUid } from "../reconcile/sandbox.ts"
import { defaultHubConfig } from "./config.ts"
import type { IdentityClaim } from "./registration/cluster-identity.ts"
import type { MemberFence } from "./sharding/shards.ts"

export interface MemberEngineOptions {
  readonly cluster: string
  /** The first credential and the connection; later credentials come through setCredential. */
  readonly kubeConfig: KubeConfig
  /** User-Agent of every request (names the hub process in the member's audit log). */
  readonly userAgent: string
  /** Offer HTTP/2 to the member's API server (--http2). */
  readonly http2: boolean
  /** Deadline of one exec credential plugin run. */
  readonly execTimeoutMs: number
  /** A ClusterProfile provider's extension config, for an exec plugin with provideClusterInfo. */
  readonly execClusterConfig?: unknown
  /** Watch and reconcile only these namespaces (fleetcheck.io/namespaces); default cluster-wide. */
  readonly namespaces?: ReadonlyArray<string> | undefined
  /** Worker fibers for this member. */
  readonly workers: number
  /** Hub-wide cap on concurrent reconciles, shared by every member (undefined: no cap). */
  readonly globalLimit: GlobalLimit | undefined
  /** Backstop poll while a restore Job runs. */
  readonly runningPollMs: number
  /** The restore agent's image, for checks with spec.restore (config.ts). */
  readonly agentImage: string
  /** How often a Velero check looks again for Velero where it is not installed (config.ts; its default when unset). */
  readonly veleroNotInstalledPollMs?: number | undefined
  /** How long a deleted check's finalizer waits for its sandboxes (config.ts). */
  readonly sandboxCleanupTimeoutMs: number
  /** Age at which an unrecorded sandbox without an active Job is an orphan (config.ts). */
  readonly sandboxOrphanGraceMs: number
  /** Periodic resync of the informers (0: never). */
  readonly resyncMs: number
  /**
   * How long in-flight reconciles may finish when the engine stops, asked at that moment: 0 once the
   * hub's lease is lost (see hub.ts), and then queued keys are dropped and in-flight calls aborted.
   */
  readonly drainGraceMs: () => number
  /** The leader fence: writes are refused once it says no (see kube/write-gate.ts). */
  readonly mayWrite: Effect.Effect<boolean>
  /** Completes when the hub's lease is lost: a drain in progress ends at once. */
  readonly lostLease: Effect.Effect<void>
  /**
   * Sharding (ADR 0011): runs the workers for each term this hub replica holds the member's Lease, in
   * a scope closed when the term ends; the caches stay between terms. Unset: one term, the engine's life.
   */
  readonly whileOwned?: MemberFence["whileOwned"]
  /**
   * One engine per real cluster (registration/cluster-identity.ts): the workers start once no earlier
   * registration of the same cluster ID works there, and stop when one appears. Unset: no such wait.
   */
  readonly identity?: Pick<IdentityClaim, "awaitSole" | "awaitRival" | "setWorking"> | undefined
  /** A LIST/WATCH of this member failed: a faster sign of a dead member than the next probe. */
  readonly onWatchFailure: (error: KubeError) => void
  /** A throttled request to the member is sent again (kube/client.ts throttleRetryWaitMs), for the metrics. */
  readonly onThrottleRetry: (method: string, status: number) => void
  /** A scheduled slot was skipped (concurrencyPolicy Forbid), for the metrics. */
  readonly onRunSkipped: (namespace: string, name: string) => void
  /** A run's verdict was written by this hub (see the reconciler's option). */
  readonly onRunRecorded: (namespace: string, name: string, run: LastRun, traceparent: string) => void
  readonly controllerHooks: ControllerHooks | undefined
  readonly queueHooks: WorkQueueMetricsHooks | undefined
}

export interface MemberEngine {
  readonly cluster: string
  readonly client: KubeClient
  /**
   * The same connection and credential with writes gated by another fence: the placement Lease's holder
   * writes placed checks into members other replicas work (ADR 0011 decision 8).
   */
  readonly clientFencedBy: (mayWrite: Effect.Effect<boolean>) => KubeClient
  /**
   * Swaps the credential in place (same connection): informers, caches and open watches stay, so a
   * rotated token costs no relist. See RotatingKubeClient.setCredential.
   */
  readonly setCredential: (kubeConfig: KubeConfig) => Effect.Effect<void, KubeTransportError>
  readonly credentialState: () => CredentialState
  readonly checks: InformerSet<BackupCheck>
  readonly jobs: InformerSet<CachedJob>
  /** Sandbox namespaces (fleetcheck.io/sandbox=true); none for a member scoped to namespaces. */
  readonly namespaces: InformerSet<V1Namespace> | undefined
  readonly queue: WorkQueue
  readonly stats: ControllerStats
  readonly hasSynced: () => boolean
  /** Resolves when both caches have listed once; callers bound it with their own timeout. */
  readonly awaitSynced: Effect.Effect<void>
  /** Whether the member refused one of this engine's requests (401/403) since the last requeueAll. */
  readonly refusedSinceRequeue: () => boolean
  /**
   * Queues every cached check now, with its backoff history cleared: after the member was unreachable
   * or refused the hub, checks that failed meanwhile would otherwise wait out a backoff of up to
   * 1000 s while their status may say something the hub can no longer vouch for.
   */
  readonly requeueAll: Effect.Effect<void>
}

const checkKey = (obj: { metadata?: { namespace?: string; name?: string } }) =>
  `${obj.metadata?.namespace ?? ""}/${obj.metadata?.name ?? ""}`

/**
 * The BackupCheck that controls this Job, as a queue key (Owns(Job) in controller-runtime terms); a
 * Job in a sandbox has no owner there and names its check in an annotation.
 */
const ownerKey = (job: CachedJob): string | undefined => {
  const owner = job.metadata?.ownerReferences?.find((r) => r.controller && r.kind === "BackupCheck")
  return owner ? `${job.metadata?.namespace ?? ""}/${owner.name}` : sandboxCheckKey(job)
}

/**
 * A member's connection is PINGed after this long without a frame, and closed when the PING (and
 * everything else) stays unanswered as long again. client-go waits 30 s and 15 s; a frozen API server
 * (hung, SIGSTOPped, blackholed) must be Connected=False within 15 s with the defaults: 4 s + 4 s,
 * then the probe on a new connection (its 5 s deadline of silence) confirms it. An API server answers a
 * PING from its connection's read loop, however slow its handlers are, so a busy but healthy member
 * answers; one frame of any stream counts as an answer too. A PING costs a few bytes per member.
 */
export const memberPingIdleMs = 4_000
export const memberPingTimeoutMs = 4_000

export const startMemberEngine = Effect.fnUntraced(function* (options: MemberEngineOptions) {
  const { cluster } = options
  // API calls give the hub-wide permit back while they wait (engine/global-limit.ts); writes are fenced.
  const raw = yield* makeKubeClient({
    cluster,
    kubeConfig: options.kubeConfig,
    userAgent: options.userAgent,
    http2: options.http2,
    execTimeoutMs: options.execTimeoutMs,
    ...(options.execClusterConfig !== undefined ? { execClusterConfig: options.execClusterConfig } : {}),
    onThrottleRetry: options.onThrottleRetry,
    pingIdleMs: memberPingIdleMs,
    pingTimeoutMs: memberPingTimeoutMs,
  })
  const limit = options.globalLimit
  // A reconcile the member refused (401/403) backs off; once access is back, requeueAll undoes that.
  let refusedSince = false
  const noteRefusal = (e: KubeError) => {
    if (e._tag === "KubeApiError" && (e.status === 401 || e.status === 403)) refusedSince = true
  }
  const clientFencedBy = (mayWrite: Effect.Effect<boolean>): KubeClient => {
    const fenced = gateWrites(raw, mayWrite)
    return {
      ...fenced,
      request: <T>(req: KubeRequest) => {
        const sent = limit ? limit.duringIo(fenced.request<T>(req)) : fenced.request<T>(req)
        return Effect.tapError(sent, (e) => Effect.sync(() => noteRefusal(e)))
      },
    }
  }
  const client = clientFencedBy(options.mayWrite)

  const queue = yield* makeWorkQueue({
    name: cluster,
    ...(options.queueHooks ? { metrics: options.queueHooks } : {}),
  })
  const checks = yield* makeInformerSet<BackupCheck>({
    client,
    namespaces: options.namespaces,
    name: "backupchecks",
    onFailure: options.onWatchFailure,
    resource: backupChecks,
    resyncMs: options.resyncMs,
  })
  const jobs = yield* makeInformerSet<CachedJob>({
    client,
    namespaces: options.namespaces,
    name: "jobs",
    onFailure: options.onWatchFailure,
    resource: jobResource,
    labelSelector: labelBackupCheck,
    // Only what the reconciler reads: a wave leaves one Job per check here (ADR 0010).
    transform: cachedJob,
    indexers: {
      [ownerUidIndex]: (job: CachedJob) =>
        (job.metadata?.ownerReferences ?? []).filter((r) => r.controller).map((r) => r.uid),
      [sandboxUidIndex]: (job: CachedJob) => {
        const uid = sandboxCheckUid(job)
        return uid === undefined ? [] : [uid]
      },
    },
    resyncMs: options.resyncMs,
  })
  // Sandboxes are namespaces: only a member watched cluster-wide can have them (ADR 0009).
  const namespaces =
    options.namespaces === undefined || options.namespaces.length === 0
      ? yield* makeInformerSet<V1Namespace>({
          client,
          namespaces: undefined,
          name: "namespaces",
          onFailure: options.onWatchFailure,
          resource: namespaceResource,
          labelSelector: `${labelSandbox}=true`,
          indexers: {
            [sandboxUidIndex]: (n: V1Namespace) => {
              const uid = sandboxCheckUid(n)
              return uid === undefined ? [] : [uid]
            },
            [sandboxKeyIndex]: (n: V1Namespace) => {
              const key = sandboxCheckKey(n)
              return key === undefined ? [] : [key]
            },
          },
          resyncMs: options.resyncMs,
        })
      : undefined

  // Handlers only enqueue keys: the reconciler reads everything else from the caches.
  const enqueue = (key: string | undefined) => {
    if (key) queue.addUnsafe(key)
  }
  checks.addHandler({
    onAdd: (o) => enqueue(checkKey(o)),
    onUpdate: (_, o) => enqueue(checkKey(o)),
    onDelete: (o) => enqueue(checkKey(o)),
  })
  jobs.addHandler({
    onAdd: (j) => enqueue(ownerKey(j)),
    onUpdate: (_, j) => enqueue(ownerKey(j)),
    onDelete: (j) => enqueue(ownerKey(j)),
  })
  // A sandbox's events queue its check: its cleanup advances, and the relist at engage sweeps orphans.
  namespaces?.addHandler({
    onAdd: (n) => enqueue(sandboxCheckKey(n)),
    onUpdate: (_, n) => enqueue(sandboxCheckKey(n)),
    onDelete: (n) => enqueue(sandboxCheckKey(n)),
  })

  const reconcile = makeBackupCheckReconciler({
    cluster,
    client,
    checks: checks.store,
    jobs: jobs.store,
    namespaces: namespaces?.store,
    runningPollMs: options.runningPollMs,
    agentImage: options.agentImage,
    veleroNotInstalledPollMs: options.veleroNotInstalledPollMs ?? defaultHubConfig.veleroNotInstalledPollMs,
    sandboxCleanupTimeoutMs: options.sandboxCleanupTimeoutMs,
    sandboxOrphanGraceMs: options.sandboxOrphanGraceMs,
    onRunSkipped: options.onRunSkipped,
    onRunRecorded: options.onRunRecorded,
  })
  // Workers start only once both caches are synced: reconciling from a half-filled cache would
  // create Jobs that already exist and report checks as missing.
  const awaitSynced = Effect.all(
    [checks.awaitSynced, jobs.awaitSynced, ...(namespaces ? [namespaces.awaitSynced] : [])],
    { discard: true },
  )
  const stats = makeControllerStats()
  // Stopping: the queue stops (draining in-flight reconciles for the grace the hub grants now, unless
  // the lease goes meanwhile), and only then are the workers interrupted, which aborts their requests.
  // Scope finalizers run last-registered first, so this one is registered after the workers exist:
  // registered before them, it would run after their interruption and drain nothing.
  const drain = Effect.suspend(() => {
    const graceMs = options.drainGraceMs()
    if (graceMs <= 0) return queue.shutDown
    return queue.shutDownWithDrain.pipe(
      Effect.timeout(graceMs),
      Effect.catch(() => Effect.logWarning("in-flight reconciles did not finish within the drain grace")),
      Effect.raceFirst(
        options.lostLease.pipe(Effect.andThen(Effect.logWarning("lease lost while draining; stopping now"))),
      ),
    )
  })
  const requeueAll = Effect.suspend(() => {
    refusedSince = false
    return Effect.forEach(checks.store.keys(), (key) => Effect.andThen(queue.forget(key), queue.add(key)), {
      discard: true,
    })
  })
  // One term of work: the workers, in the term's scope. Between terms (sharding) the handlers keep
  // queueing keys and nothing takes them; a later term queues every check again, since the keys a
  // closed term interrupted were dropped.
  const term = (n: number) =>
    Effect.gen(function* () {
      if (n > 1) yield* requeueAll
      yield* runController({
        stats,
        name: "backupcheck",
        cluster,
        queue,
        reconcile,
        workers: options.workers,
        ...(options.globalLimit ? { globalLimit: options.globalLimit } : {}),
        ...(options.controllerHooks ? { hooks: options.controllerHooks } : {}),
      })
    })
  const whileOwned =
    options.whileOwned ??
    ((work: (n: number) => Effect.Effect<void, never, Scope.Scope>) =>
      Effect.andThen(Effect.scoped(Effect.andThen(work(1), Effect.never)), Effect.never))
  const { identity } = options
  yield* Effect.gen(function* () {
    yield* awaitSynced
    if (identity === undefined) return yield* whileOwned(term)
    for (let demoted = false; ; demoted = true) {
      yield* identity.awaitSole
      // Keys interrupted when a rival stopped this engine's workers were dropped: queue them again.
      if (demoted) yield* requeueAll
      identity.setWorking(true)
      // An earlier registration of this cluster appeared: stop working (raceFirst waits for the
      // workers' interruption), then wait until it is gone.
      yield* whileOwned(term).pipe(
        Effect.raceFirst(identity.awaitRival),
        Effect.ensuring(Effect.sync(() => identity.setWorking(false))),
      )
    }
  }).pipe(Effect.forkScoped)
  // Registered after the work's fork, so it runs first: the queue drains while the workers still run.
  yield* Effect.addFinalizer(() => drain)

  const engine: MemberEngine = {
    cluster,
    client,
    clientFencedBy,
    setCredential: raw.setCredential,
    credentialState: raw.credentialState,
    checks,
    jobs,
    namespaces,
    queue,
    stats,
    hasSynced: () => checks.hasSynced() && jobs.hasSynced() && (namespaces?.hasSynced() ?? true),
    awaitSynced,
    refusedSinceRequeue: () => refusedSince,
    requeueAll,
  }
  return engine
}) as (options: MemberEngineOptions) => Effect.Effect<MemberEngine, never, Scope.Scope>
