// One engaged member's whole life, run as one fiber in the hub's FiberMap (keyed by cluster name):
// its engine, a health probe with failure/success thresholds, a cache-sync watch with a timeout (a
// member that cannot sync shows why and never blocks the others), and the MemberCluster status
// writer. Interrupting the fiber closes the member's scope: workers drain, sockets close.
import { Clock, Deferred, Effect, Exit, Option, Queue, Scope, Semaphore } from "effect"
import type { MemberCluster, MemberClusterStatus } from "../api/membercluster.ts"
import { apiVersion } from "../api/names.ts"
import type { GlobalLimit } from "../engine/global-limit.ts"
import type { PriorityLimit } from "../engine/priority-limit.ts"
import {
  isAlreadyExists,
  isConflict,
  isNotFound,
  KubeApiError,
  type KubeClient,
  type KubeError,
} from "../kube/client.ts"
import { backupChecks, memberClusters, pathOf } from "../kube/resources.ts"
import { credentialsExpiringSoon } from "../kubeconfig/policy.ts"
import { checkFacts } from "../observability/metrics/check-facts.ts"
import type { FleetMetrics } from "../observability/metrics/index.ts"
import { VerdictLog } from "../observability/verdict-log.ts"
import { jsonEqual } from "../reconcile/merge-patch.ts"
import { lastFinishedRun, measureRun } from "../reconcile/objectives.ts"
import type { HubConfig } from "./config.ts"
import {
  type CheckView,
  checkViews,
  isReachable,
  type MemberEntry,
  memberClusterStatus,
  type ProbeState,
  unseenBecause,
} from "./fleet-state.ts"
import type { CredentialFeed } from "./member-credential.ts"
import { type MemberEngine, startMemberEngine } from "./member-engine.ts"
import type { ClusterIdentities, IdentityClaim } from "./registration/cluster-identity.ts"
import type { MemberFence } from "./sharding/shards.ts"
import { newsOf, sameExceptProbeTime } from "./status-news.ts"
import type { StatusTicker } from "./status-ticker.ts"

/** The hub settings a member's life depends on (see config.ts for each one's meaning and default). */
export type MemberSettings = Pick<
  HubConfig,
  | "probeIntervalMs"
  | "probeFailureThreshold"
  | "probeSuccessThreshold"
  | "cacheSyncTimeoutMs"
  | "statusIntervalMs"
  | "statusRefreshMs"
  | "runningPollMs"
  | "agentImage"
  | "veleroNotInstalledPollMs"
  | "sandboxCleanupTimeoutMs"
  | "sandboxOrphanGraceMs"
  | "resyncPeriodMs"
  | "workersPerMember"
  | "expiryWarningMs"
  | "execPluginTimeoutMs"
  | "http2"
>

export interface MemberDeps {
  readonly hubClient: KubeClient
  readonly globalLimit: GlobalLimit
  /**
   * Hub-wide permits for members whose caches are listing: one is held from the engine's start until
   * its caches synced or the cache-sync timeout passed (a member that cannot sync never holds up the
   * others for longer). At hub start this staggers the members' LISTs, and the parsed lists they bring
   * into memory, instead of every member listing at once.
   */
  readonly syncLimit: Semaphore.Semaphore
  /** The hub-wide timer of every member's status round (status-ticker.ts), at --status-interval. */
  readonly statusTicker: StatusTicker
  /**
   * Hub-wide permits for MemberCluster status writes, bad news first (see syncMemberClusterBounded):
   * a wave that changes every member's status each round is not a thousand writes at once.
   */
  readonly statusWrites: PriorityLimit
  readonly settings: MemberSettings
  readonly metrics: FleetMetrics
  /** Drain grace when the member stops now: none once the lease is lost (see hub.ts). */
  readonly drainGraceMs: () => number
  /**
   * This member's fence: the leader's without sharding; with it, the member's Lease (ADR 0011). A
   * replica that does not work the member keeps its caches and probe for the views, and writes nothing.
   */
  readonly fence: MemberFence
  readonly userAgent: string
  /** The hub's registry of cluster identities: one engine works a real cluster (cluster-identity.ts). */
  readonly identities?: ClusterIdentities | undefined
}

export interface MemberSpec {
  readonly entry: MemberEntry
  /** The connection and the current credential; later credentials are swapped in place. */
  readonly credential: CredentialFeed
  /** From the registration's namespace scope; undefined means cluster-wide. */
  readonly namespaces?: ReadonlyArray<string> | undefined
  /** A ClusterProfile provider's extension config, for an exec plugin with provideClusterInfo. */
  readonly execClusterConfig?: unknown
  /** Records an Event when the exec plugin stops producing credentials (once per distinct failure). */
  readonly onExecPluginFailed: (message: string) => Effect.Effect<void>
  /** The registering object's creationTimestamp: of two registrations of one cluster, the earlier works. */
  readonly created?: string | undefined
  /** Records an Event when this registration turns out to duplicate an earlier one of the same cluster. */
  readonly onDuplicate?: ((message: string) => Effect.Effect<void>) | undefined
}

const memberClusterPath = (name: string, subresource?: string) =>
  pathOf(memberClusters, { name, subresource })

/**
 * Whether a status the hub wrote (seen) must be written again: it changed, or its probe time is due.
 * The probe time alone changing is not worth a write every status interval: it is refreshed every
 * `refreshMs` (--status-refresh-interval).
 */
const writeDue = (
  seen: NonNullable<MemberEntry["lastSeen"]>,
  desired: MemberClusterStatus,
  now: number,
  refreshMs: number,
) =>
  now - seen.at >= refreshMs ||
  probeTimeStale(desired, seen.status, refreshMs) ||
  !sameExceptProbeTime(desired, seen.status)

/**
 * Creates the MemberCluster when missing, keeps its labels equal to the Secret's, and writes the status
 * when it changed (compared as JSON values: the API server returns keys in its own order). Every status
 * write carries a resourceVersion the hub read or wrote, so a concurrent writer's fields are never
 * silently overwritten (a conflict waits for the next round).
 *
 * What the hub last read or wrote is kept on the entry (lastSeen): while it is younger than
 * `refreshMs` (--status-refresh-interval) and the labels agree, an unchanged status sends nothing. A
 * change, or the probe-time refresh, is one PATCH carrying lastSeen's resourceVersion, with no GET
 * before it: any write by someone else since (labels, spec, status) fails it with a conflict and a
 * deletion with NotFound, and then the object is read (or created) and written as on the first round.
 * So the refresh still finds a MemberCluster deleted or edited behind the hub's back. Any other
 * failure leaves lastSeen unset, so the next round reads it again. `views` saves building the check
 * views again.
 */
export const syncMemberCluster = (
  hubClient: KubeClient,
  entry: MemberEntry,
  refreshMs: number,
  views?: ReadonlyArray<CheckView>,
): Effect.Effect<void, KubeError> =>
  Semaphore.withPermit(syncLockOf(entry))(syncOnce(hubClient, entry, refreshMs, views))

/**
 * One sync of a member's MemberCluster at a time: the registration controller and the member's status
 * loop both sync it, and at engagement both found it missing and both created it (the loser read it
 * again; about 700 extra POSTs and 1,400 GETs for 1,000 members). The second now waits and finds what
 * the first wrote.
 */
const syncLocks = new WeakMap<MemberEntry, Semaphore.Semaphore>()
const syncLockOf = (entry: MemberEntry) => {
  let lock = syncLocks.get(entry)
  if (lock === undefined) {
    lock = Semaphore.makeUnsafe(1)
    syncLocks.set(entry, lock)
  }
  return lock
}

const syncOnce = Effect.fnUntraced(function* (
  hubClient: KubeClient,
  entry: MemberEntry,
  refreshMs: number,
  views?: ReadonlyArray<CheckView>,
) {
  const now = yield* Clock.currentTimeMillis
  const seen = entry.lastSeen
  if (seen !== undefined && jsonEqual(seen.labels, entry.labels)) {
    const desired = memberClusterStatus(entry, seen.status, now, views)
    if (!writeDue(seen, desired, now, refreshMs)) {
      entry.lastStatus = desired
      return
    }
    delete entry.lastSeen
    const written = yield* writeStatus(hubClient, entry.name, seen.resourceVersion, desired).pipe(
      Effect.catchIf(
        (e) => isConflict(e) || isNotFound(e),
        () => Effect.succeed(undefined),
      ),
    )
    if (written !== undefined) {
      remember(entry, desired, written, now)
      return
    }
  }
  delete entry.lastSeen
  let current = yield* hubClient
    .request<MemberCluster>({
      method: "GET",
      path: memberClusterPath(entry.name),
    })
    .pipe(Effect.catchIf(isNotFound, () => Effect.succeed(undefined)))
  if (!current) {
    // The registration controller and the member's status loop may both create it: the loser reads it.
    current = yield* hubClient
      .request<MemberCluster>({
        method: "POST",
        path: pathOf(memberClusters),
        body: {
          apiVersion,
          kind: "MemberCluster",
          metadata: { name: entry.name, labels: entry.labels },
          spec: {},
        },
      })
      .pipe(
        Effect.catchIf(isAlreadyExists, () =>
          hubClient.request<MemberCluster>({
            method: "GET",
            path: memberClusterPath(entry.name),
          }),
        ),
      )
  } else if (!jsonEqual(current.metadata.labels ?? {}, entry.labels)) {
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
  const desired: MemberClusterStatus = memberClusterStatus(entry, current.status, now, views)
  if (!sameExceptProbeTime(desired, current.status) || probeTimeStale(desired, current.status, refreshMs))
    current = yield* writeStatus(hubClient, entry.name, current.metadata.resourceVersion, desired)
  remember(entry, desired, current, now)
})

/**
 * The member's status round under the hub-wide bound on MemberCluster status writes (ADR 0010,
 * decision 9). A round with nothing to write takes no permit. One with something to write
 * waits for a permit in the class its news deserves (status-news.ts: bad news first), looking again
 * every `recheckMs` while it waits (news that turned bad moves it up), and only once it holds a permit
 * builds the status it writes, from the member's state and `views()` as they are then: a member that
 * waited writes its latest state once, never a backlog of stale ones. A member stopped while it waits
 * (its scope closed) gives its place up.
 */
export const syncMemberClusterBounded = Effect.fnUntraced(function* (
  hubClient: KubeClient,
  entry: MemberEntry,
  statusWrites: PriorityLimit,
  views: () => ReadonlyArray<CheckView>,
  timings: Pick<MemberSettings, "statusIntervalMs" | "statusRefreshMs">,
) {
  const news = (now: number) => {
    const written = entry.lastSeen?.status ?? entry.lastStatus
    const desired = memberClusterStatus(entry, written, now, views())
    return { desired, news: newsOf(written, desired) }
  }
  const now = yield* Clock.currentTimeMillis
  if (statusUnchanged(entry, views(), now, timings.statusRefreshMs)) return
  const first = news(now)
  yield* statusWrites.withPermit(
    first.news,
    Effect.suspend(() => syncMemberCluster(hubClient, entry, timings.statusRefreshMs, views())),
    {
      everyMs: timings.statusIntervalMs,
      priority: Effect.map(Clock.currentTimeMillis, (t) => news(t).news),
    },
  )
})

/**
 * Whether the member's MemberCluster needs no write now: what the hub last read or wrote is under a
 * refresh period old, the labels agree, and the status to write is the same (its probe time aside). Then
 * only the status it would have written is kept (entry.lastStatus, for the views). Plain, no effect: the
 * status ticker asks it of every member every round, and wakes the member's fiber only when it is false.
 */
export const statusUnchanged = (
  entry: MemberEntry,
  views: ReadonlyArray<CheckView> | undefined,
  now: number,
  refreshMs: number,
): boolean => {
  const seen = entry.lastSeen
  if (seen === undefined || !jsonEqual(seen.labels, entry.labels)) return false
  const desired = memberClusterStatus(entry, seen.status, now, views)
  if (writeDue(seen, desired, now, refreshMs)) return false
  entry.lastStatus = desired
  return true
}

/** Whether the written probe time is a refresh period behind the desired one (or missing). */
const probeTimeStale = (
  desired: MemberClusterStatus,
  written: MemberClusterStatus | undefined,
  refreshMs: number,
) =>
  desired.lastProbeTime !== undefined &&
  (!written?.lastProbeTime ||
    Date.parse(desired.lastProbeTime) - Date.parse(written.lastProbeTime) >= refreshMs)

/** A status merge patch that applies only to the resourceVersion given (409 Conflict otherwise). */
const writeStatus = (
  hubClient: KubeClient,
  name: string,
  resourceVersion: string | undefined,
  status: MemberClusterStatus,
) =>
  hubClient.request<MemberCluster>({
    method: "PATCH",
    path: memberClusterPath(name, "status"),
    contentType: "application/merge-patch+json",
    body: { metadata: { resourceVersion }, status },
  })

const remember = (entry: MemberEntry, desired: MemberClusterStatus, current: MemberCluster, now: number) => {
  entry.lastStatus = desired
  entry.lastSeen = {
    resourceVersion: current.metadata.resourceVersion,
    labels: { ...(current.metadata.labels ?? {}) },
    status: current.status,
    at: now,
  }
}

/** The longest a probe waits for its answer while the member's connection shows the server alive. */
const busyProbeTimeoutMs = 30_000
/** While a failed probe awaits confirmation (failure threshold), probes come this often. */
const confirmFailureEveryMs = 1_000
/**
 * An unreachable member is probed at least this often, whatever the probe interval: it is back within
 * this long of its API server (its watches may be waiting out a backoff of up to 30 s meanwhile).
 */
const unreachableProbeEveryMs = 10_000

/**
 * The member answers the hub again: its caches' lists and watches may be waiting out a backoff of up to
 * 30 s. Resume them now, and do not vouch for the caches until they have listed or watched again.
 */
const resumeCaches = (engine: MemberEngine, entry: MemberEntry) => {
  if (
    engine.checks.failingSince === undefined &&
    engine.jobs.failingSince === undefined &&
    engine.namespaces?.failingSince === undefined
  )
    return
  entry.catchingUp = true
  engine.checks.resumeNow()
  engine.jobs.resumeNow()
  engine.namespaces?.resumeNow()
}

/**
 * One probe: a LIST of at most one BackupCheck where the hub works, with a short deadline of silence:
 * it fails when the member's connection delivered nothing for 5 s (a dead, hung or blackholed API server
 * is noticed as fast as with a plain 5 s deadline). While the connection keeps delivering answers to the
 * member's other requests (over HTTP/2 they share it), the API server is alive but busy, and the probe
 * waits for its own answer up to the probe interval (at most 30 s), so a burst the server is working
 * through does not make the member look unreachable (ADR 0013). Unlike
 * GET /version (which any authenticated identity may call), it fails when the hub's RBAC was revoked
 * (403) or the CRD removed (404), so a member the hub can no longer act on never looks healthy. The
 * server's version is read on the first success only.
 */
const probeOnce = Effect.fnUntraced(function* (
  engine: MemberEngine,
  entry: MemberEntry,
  timings: MemberSettings,
  namespace: string | undefined,
) {
  const timeoutMs = Math.min(5_000, timings.probeIntervalMs)
  const result = yield* engine.client
    .request({
      method: "GET",
      path: pathOf(backupChecks, { namespace }),
      query: { limit: "1" },
      // Only the answer's status matters: its body (the check it lists) is not decoded.
      discardBody: true,
      silenceTimeoutMs: timeoutMs,
      timeoutMs: Math.max(timeoutMs, Math.min(busyProbeTimeoutMs, timings.probeIntervalMs)),
    })
    .pipe(Effect.result)
  const p = entry.probe
  p.lastProbeTime = yield* Clock.currentTimeMillis
  // Was the hub kept out (unreachable, refused) before this probe? Then checks that failed meanwhile
  // are queued again at once when it answers, instead of after their backoff.
  const wasKeptOut =
    p.connected === false ||
    p.denied !== undefined ||
    p.credentialsValid === false ||
    engine.refusedSinceRequeue()
  const answered =
    result._tag === "Success" ||
    (result.failure instanceof KubeApiError && [401, 403, 404].includes(result.failure.status))
  if (answered) {
    p.consecutiveSuccesses++
    p.consecutiveFailures = 0
    if (p.connected !== true && p.consecutiveSuccesses >= timings.probeSuccessThreshold) {
      if (p.connected === false) {
        yield* Effect.logInfo("member reachable again")
        resumeCaches(engine, entry)
      }
      p.connected = true
      delete p.lastError
    }
  }
  if (result._tag === "Success") {
    p.credentialsValid = true
    delete p.denied
    if (wasKeptOut && p.connected === true) {
      yield* Effect.logInfo("member answers the hub again; requeueing its checks")
      // Refused (401, 403, 404) while reachable, the caches' lists and watches failed too and back off
      // as long: without this, a check whose spec changed meanwhile kept its old verdict until they
      // retried on their own (up to 30 s after access came back).
      resumeCaches(engine, entry)
      yield* engine.requeueAll
    }
    if (p.kubernetesVersion === undefined) {
      const version = yield* engine.client
        .request<{ gitVersion?: unknown }>({ method: "GET", path: "/version", timeoutMs })
        .pipe(Effect.option)
      const gitVersion = version._tag === "Some" ? version.value.gitVersion : undefined
      if (typeof gitVersion === "string") p.kubernetesVersion = gitVersion.slice(0, 64)
    }
    return
  }
  const e = result.failure
  p.lastError = e.message
  // An exec plugin that failed (or no credential yet): the credentials are the problem, not the network.
  if (
    (e instanceof KubeApiError && e.status === 401) ||
    (e._tag === "KubeTransportError" && e.code === "Credentials")
  ) {
    p.credentialsValid = false
    p.credentialsFailure = e._tag === "KubeApiError" ? "Unauthorized" : "ExecPluginFailed"
    return
  }
  if (e instanceof KubeApiError && (e.status === 403 || e.status === 404)) {
    p.credentialsValid = true
    const reason = e.status === 403 ? "Forbidden" : "WatchFailing"
    if (p.denied?.reason !== reason)
      yield* Effect.logWarning("member refuses the hub's BackupCheck LIST").pipe(
        Effect.annotateLogs({ status: e.status, error: e.message }),
      )
    p.denied = {
      reason,
      message:
        e.status === 403
          ? `the hub's identity may not list BackupChecks: ${e.message}`
          : `BackupChecks are not served (is the CRD installed?): ${e.message}`,
    }
    return
  }
  countProbeFailure(p, e, timings)
  // The first probe decides at once; after that, only a run of failures flips a connected member.
  if (p.connected === undefined || p.consecutiveFailures >= timings.probeFailureThreshold) {
    if (p.connected !== false)
      yield* Effect.logWarning("member unreachable").pipe(Effect.annotateLogs({ error: e.message }))
    p.connected = false
  }
})

/**
 * A connection lost for an unanswered PING: its API server sent nothing at all for the PING's timeout
 * (15 s) after a silence that prompted the PING (30 s idle, or a request's deadline of at least 5 s):
 * 20 s or more, longer than the failed probes of a confirmation cover (three 5 s deadlines a second
 * apart). That silence counts for all but one of the failures that make the member unreachable; the
 * probe it wakes, on a new connection, is the one that confirms it (a hub that was itself too busy to
 * read the answer gets its answer then, and nothing flips). Other lost connections (refused, reset) only
 * wake the probe: a restarting API server answers the next one.
 */
export const countPingTimeout = (
  probe: ProbeState,
  error: KubeError,
  timings: Pick<MemberSettings, "probeFailureThreshold">,
): void => {
  if (error._tag !== "KubeTransportError" || error.code !== "PingTimeout" || probe.connected === false) return
  probe.consecutiveFailures = Math.max(probe.consecutiveFailures, timings.probeFailureThreshold - 1)
  probe.consecutiveSuccesses = 0
}

/**
 * One failed probe. A probe lost with its connection to a PING timeout is that connection's silence,
 * already counted once when the watches on it reported it (countPingTimeout), not a further failure:
 * the probe that follows, on a new connection, still confirms it.
 */
export const countProbeFailure = (
  probe: ProbeState,
  error: KubeError,
  timings: Pick<MemberSettings, "probeFailureThreshold">,
): void => {
  if (error._tag === "KubeTransportError" && error.code === "PingTimeout")
    countPingTimeout(probe, error, timings)
  else probe.consecutiveFailures++
  probe.consecutiveSuccesses = 0
}

/**
 * Whether the member's caches can be trusted: a LIST/WATCH failing for longer than the probe of an
 * unreachable member tolerates (its interval × failure threshold) makes the member Ready=False, and its
 * checks Unknown. Not the healthy member's interval: a longer one saves probes, and must not leave a
 * cache that stopped following its API server trusted for longer.
 */
export const watchFailureToleranceMs = (
  timings: Pick<MemberSettings, "probeIntervalMs" | "probeFailureThreshold">,
) => Math.min(timings.probeIntervalMs, unreachableProbeEveryMs) * timings.probeFailureThreshold

const watchFailureOf = (
  engine: MemberEngine,
  timings: MemberSettings,
  now: number,
): MemberEntry["watchFailure"] => {
  const tolerance = watchFailureToleranceMs(timings)
  // Every status round asks: nothing is allocated unless an informer is failing.
  if (
    engine.checks.failingSince === undefined &&
    engine.jobs.failingSince === undefined &&
    engine.namespaces?.failingSince === undefined
  )
    return undefined
  for (const informer of [engine.checks, engine.jobs, ...(engine.namespaces ? [engine.namespaces] : [])]) {
    const since = informer.failingSince
    if (since === undefined || now - since < tolerance) continue
    const failure = informer.lastFailure
    const forbidden = failure?.status === 401 || failure?.status === 403
    return {
      reason: forbidden ? "Forbidden" : "WatchFailing",
      message: `list/watch failing for ${Math.round((now - since) / 1000)} s: ${failure?.message ?? "unknown error"}`,
    }
  }
  return undefined
}

/** A UID as the API server writes it: a bounded, printable value, never anything else into status. */
const uidPattern = /^[0-9a-zA-Z-]{1,64}$/
/** Backoff of the identity read while the member does not answer: 1 s doubling to 30 s. */
const identifyBackoff = { baseMs: 1_000, maxMs: 30_000 }

/**
 * Asks the member who it is (the kube-system namespace UID), records it, and then follows the registry:
 * while an earlier registration of the same cluster exists, this one is a duplicate (shown on its
 * MemberCluster, its workers stopped by the engine). An identity that may not read kube-system (a
 * registration scoped to namespaces) leaves the cluster unidentified: duplicates are then found by
 * URL and CA only.
 */
const identifyCluster = Effect.fnUntraced(function* (
  engine: MemberEngine,
  entry: MemberEntry,
  claim: IdentityClaim,
  onDuplicate: ((message: string) => Effect.Effect<void>) | undefined,
  viewsChanged: () => void,
) {
  for (let delay = identifyBackoff.baseMs; ; delay = Math.min(delay * 2, identifyBackoff.maxMs)) {
    const read = yield* engine.client
      .request<{ metadata?: { uid?: unknown } }>({
        method: "GET",
        path: "/api/v1/namespaces/kube-system",
        timeoutMs: 10_000,
      })
      .pipe(Effect.result)
    if (read._tag === "Success") {
      const uid = read.success.metadata?.uid
      if (typeof uid === "string" && uidPattern.test(uid)) {
        entry.clusterID = uid
        claim.identify(uid)
      } else {
        yield* Effect.logWarning("the member's kube-system namespace has no usable uid; cluster unidentified")
        claim.unidentifiable()
      }
      break
    }
    const e = read.failure
    if (e instanceof KubeApiError && (e.status === 403 || e.status === 404)) {
      yield* Effect.logInfo(
        "the hub's identity may not read the kube-system namespace; duplicates are found by URL and CA only",
      ).pipe(Effect.annotateLogs({ status: e.status }))
      claim.unidentifiable()
      break
    }
    yield* Effect.logDebug("reading the member's cluster identity failed; retrying").pipe(
      Effect.annotateLogs({ error: e.message, retryInMs: delay }),
    )
    yield* Effect.sleep(delay)
  }
  let announced: string | undefined
  while (true) {
    const next = claim.nextChange()
    const rival = claim.rival()
    if (rival?.name !== entry.duplicateOf?.name) {
      entry.duplicateOf = rival
      viewsChanged()
      if (rival && announced !== rival.name) {
        announced = rival.name
        const message = `${rival.name} registered the same cluster (kube-system UID ${rival.clusterID}) earlier; this registration does no work until ${rival.name} is removed`
        yield* Effect.logWarning("registration duplicates an earlier one of the same cluster").pipe(
          Effect.annotateLogs({ earlier: rival.name, clusterID: rival.clusterID }),
        )
        if (onDuplicate) yield* onDuplicate(message)
      } else if (!rival) announced = undefined
    }
    yield* next
  }
})

export const runMember = Effect.fnUntraced(function* (spec: MemberSpec, deps: MemberDeps) {
  const { entry } = spec
  const { settings: timings, metrics } = deps
  entry.refused = undefined
  entry.synced = false
  delete entry.lastSeen
  entry.probe = { consecutiveFailures: 0, consecutiveSuccesses: 0 }
  entry.catchingUp = false
  delete entry.watchFailure
  entry.credentialExpiry = spec.credential.current.expiry
  // A broken connection seen by the informers (refused, reset, closed) wakes the prober at once.
  let wakeProbe = Deferred.makeUnsafe<void>()
  const onWatchFailure = (error: KubeError) => {
    if (error._tag !== "KubeTransportError") return
    countPingTimeout(entry.probe, error, timings)
    Deferred.doneUnsafe(wakeProbe, Effect.void)
  }
  // The verdict log is the hub's (launch provides it); engines started without one emit nothing.
  const verdictLog = yield* Effect.serviceOption(VerdictLog)
  // Engagement waits for a sync permit (see MemberDeps.syncLimit), held in a scope of its own: given
  // back once the caches synced or the sync timed out, or with the member's scope when it stops (the
  // permit is taken and its release registered in one uninterruptible step).
  const syncPermit = yield* Scope.fork(yield* Effect.scope)
  yield* Semaphore.takeScoped(deps.syncLimit, 1).pipe(Scope.provide(syncPermit))
  const giveSyncPermit = Scope.close(syncPermit, Exit.void)
  // Joined before the engine starts, left after it stopped (finalizers run last-registered first).
  delete entry.clusterID
  delete entry.duplicateOf
  const claim: IdentityClaim | undefined = deps.identities?.join(
    entry.name,
    spec.created ?? "",
    spec.namespaces,
  )
  if (claim) yield* Effect.addFinalizer(() => Effect.sync(() => claim.leave()))
  // A member's series are exported by the hub replica working it only (all of them without sharding).
  let exporting = deps.fence.owned()
  const engine = yield* startMemberEngine({
    identity: claim,
    onWatchFailure,
    onThrottleRetry: (method, status) => {
      if (exporting) metrics.incRequestRetry(entry.name, method, status)
    },
    cluster: entry.name,
    kubeConfig: spec.credential.current.kubeConfig,
    userAgent: deps.userAgent,
    http2: timings.http2,
    execTimeoutMs: timings.execPluginTimeoutMs,
    ...(spec.execClusterConfig !== undefined ? { execClusterConfig: spec.execClusterConfig } : {}),
    namespaces: spec.namespaces,
    workers: timings.workersPerMember,
    globalLimit: deps.globalLimit,
    runningPollMs: timings.runningPollMs,
    agentImage: timings.agentImage,
    veleroNotInstalledPollMs: timings.veleroNotInstalledPollMs,
    sandboxCleanupTimeoutMs: timings.sandboxCleanupTimeoutMs,
    sandboxOrphanGraceMs: timings.sandboxOrphanGraceMs,
    resyncMs: timings.resyncPeriodMs,
    drainGraceMs: deps.drainGraceMs,
    mayWrite: deps.fence.mayWrite,
    lostLease: deps.fence.lostLease,
    whileOwned: deps.fence.whileOwned,
    onRunSkipped: () => metrics.incRunSkipped(entry.name),
    onRunRecorded: (namespace, name, run, traceparent) => {
      const took = measureRun(run).restoreDurationMs
      if (took !== undefined) metrics.observeRestoreDuration(entry.name, took / 1000)
      if (Option.isSome(verdictLog))
        verdictLog.value.emit({ cluster: entry.name, namespace, name, run, traceparent })
    },
    controllerHooks: metrics.controllerHooks("backupcheck"),
    queueHooks: metrics.queueHooks(entry.name),
  })
  entry.engineRunning = true
  // A duplicate registration shows none of the checks: the earlier one vouches for them.
  entry.checks = () => (entry.duplicateOf ? [] : engine.checks.store.list())
  entry.access = {
    client: engine.client,
    clientFencedBy: engine.clientFencedBy,
    checks: engine.checks,
    namespaces: spec.namespaces,
  }
  if (exporting) metrics.initCluster(entry.name, { maxConcurrentReconciles: timings.workersPerMember })
  // Series follow the objects: a deleted check's go with it, a stopped member's with the member.
  engine.checks.addHandler({
    onDelete: (c) => metrics.deleteCheck(entry.name, c.metadata.namespace ?? "", c.metadata.name),
  })
  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      entry.engineRunning = false
      entry.synced = false
      entry.catchingUp = false
      entry.checks = () => []
      delete entry.views
      delete entry.access
      metrics.forgetMember(entry.name)
    }),
  )

  // A new credential of the same connection (a rotated token or certificate) goes into the running
  // client: informers, caches and watches stay. The newest one wins when several arrive at once.
  let staticExpiry = spec.credential.current.expiry
  const rotations = yield* Queue.sliding<void>(1)
  yield* Effect.acquireRelease(
    Effect.sync(() => spec.credential.subscribe(() => Queue.offerUnsafe(rotations, undefined))),
    (unsubscribe) => Effect.sync(unsubscribe),
  )
  yield* Effect.gen(function* () {
    while (true) {
      yield* Queue.take(rotations)
      const next = spec.credential.current
      const swapped = yield* engine.setCredential(next.kubeConfig).pipe(Effect.result)
      if (swapped._tag === "Failure") {
        yield* Effect.logWarning("swapping in the new credential failed; the old one stays").pipe(
          Effect.annotateLogs({ error: swapped.failure.message }),
        )
        continue
      }
      staticExpiry = next.expiry
      entry.credentialExpiry = next.expiry
      yield* Effect.logInfo("credential rotated in place")
      // The probe tells at once whether the member accepts it.
      Deferred.doneUnsafe(wakeProbe, Effect.void)
    }
  }).pipe(Effect.forkScoped)

  yield* engine.awaitSynced.pipe(
    Effect.timeout(timings.cacheSyncTimeoutMs),
    Effect.ensuring(giveSyncPermit),
    Effect.matchEffect({
      onSuccess: () =>
        Effect.sync(() => {
          entry.synced = true
          delete entry.syncError
        }).pipe(Effect.andThen(Effect.logInfo("member caches synced"))),
      onFailure: () =>
        Effect.gen(function* () {
          entry.syncError = `caches not synced after ${timings.cacheSyncTimeoutMs} ms: ${entry.probe.lastError ?? "the API server did not answer the LIST"}`
          yield* Effect.logWarning("member cache sync timed out; still trying").pipe(
            Effect.annotateLogs({ error: entry.syncError }),
          )
          yield* engine.awaitSynced
          entry.synced = true
          delete entry.syncError
          yield* Effect.logInfo("member caches synced late")
        }),
    }),
    Effect.forkScoped,
  )

  let execFailureReported: string | undefined
  const probeLoop = Effect.gen(function* () {
    while (true) {
      const woken = wakeProbe
      yield* probeOnce(engine, entry, timings, spec.namespaces?.[0])
      const failure = entry.probe.credentialsValid === false ? entry.probe.credentialsFailure : undefined
      if (failure === "ExecPluginFailed" && entry.probe.lastError !== execFailureReported) {
        execFailureReported = entry.probe.lastError
        yield* spec.onExecPluginFailed(entry.probe.lastError ?? "exec credential plugin failed")
      } else if (failure === undefined) execFailureReported = undefined
      const now = yield* Clock.currentTimeMillis
      // An exec credential is renewed by its plugin: its expiry matters only while renewing fails.
      const exec = engine.credentialState()
      const renewalFailing = exec.execFailure !== undefined
      entry.credentialExpiry = exec.expiry ?? staticExpiry
      entry.renewalFailure = exec.execFailure
      entry.expiringSoon =
        exec.expiry !== undefined
          ? renewalFailing && credentialsExpiringSoon(exec.expiry, new Date(now), timings.expiryWarningMs)
          : credentialsExpiringSoon(staticExpiry, new Date(now), timings.expiryWarningMs)
      if (exporting) metrics.setMemberConnected(entry.name, entry.probe.connected === true)
      // A failed probe is confirmed quickly rather than a full interval later: with the defaults a dead
      // member shows Connected=False in a few seconds, not 30.
      const p = entry.probe
      const confirming = p.consecutiveFailures > 0 && p.connected !== false
      if (Deferred.isDoneUnsafe(woken)) wakeProbe = Deferred.makeUnsafe<void>()
      yield* Effect.raceFirst(
        Effect.sleep(
          Math.min(
            timings.probeIntervalMs,
            confirming ? confirmFailureEveryMs : p.connected === false ? unreachableProbeEveryMs : Infinity,
          ),
        ),
        Deferred.await(wakeProbe),
      )
    }
  })
  yield* Effect.forkScoped(probeLoop)

  // The check views (and their series) are rebuilt only when a check's status or generation changed or
  // the member's reachability did: a converged member's status round then touches none of its checks.
  let checksChanged = true
  engine.checks.addHandler({
    onAdd: () => {
      checksChanged = true
    },
    onUpdate: (before, after) => {
      if (
        before !== after &&
        (before.metadata.generation !== after.metadata.generation || !jsonEqual(before.status, after.status))
      )
        checksChanged = true
    },
    onDelete: () => {
      checksChanged = true
    },
  })
  if (claim)
    yield* Effect.forkScoped(
      identifyCluster(engine, entry, claim, spec.onDuplicate, () => {
        checksChanged = true
      }),
    )
  let views: ReadonlyArray<CheckView> = []
  let viewsUnseen: string | undefined
  const restartsSeen = new Map<string, number>()
  // The same views the fleet API shows: Unknown while unreachable or not verified for this spec. Asked
  // again once a status write holds its permit, so what it writes is the state then.
  const currentViews = () => {
    const because = unseenBecause(entry)
    // A string only while the member is unseen: a converged member's round allocates none.
    const unseen = because === undefined ? undefined : `${because.reason}\n${because.message}`
    if (checksChanged || unseen !== viewsUnseen) {
      checksChanged = false
      viewsUnseen = unseen
      views = checkViews(entry)
      for (const c of exporting ? views : []) {
        metrics.setCheckVerified(
          entry.name,
          c.namespace,
          c.name,
          c.status,
          c.lastSuccessfulTime ? new Date(c.lastSuccessfulTime) : undefined,
          { reason: c.reason, objectives: c.objectives },
        )
      }
      // Facts of each check's spec and last finished runs (ADR 0009), so they change only with the checks.
      for (const c of exporting ? entry.checks() : []) {
        const run = c.status === undefined ? undefined : lastFinishedRun(c.status)
        const age = run === undefined ? undefined : measureRun(run).dataAgeMs
        metrics.setCheckRecoveryPointAge(
          entry.name,
          c.metadata.namespace ?? "",
          c.metadata.name,
          age === undefined ? undefined : age / 1000,
        )
        metrics.setCheckFacts(entry.name, c.metadata.namespace ?? "", c.metadata.name, checkFacts(c))
      }
    }
    return views
  }
  entry.views = currentViews
  // The status round, every --status-interval: its plain part runs on the hub-wide ticker (see
  // status-ticker.ts), and only a round with effects left (a log line, a MemberCluster write) wakes this
  // member's fiber. A converged member's round therefore costs no timer and no fiber resumption.
  let loggedWatchFailure: NonNullable<MemberEntry["watchFailure"]> | undefined
  let owned = deps.fence.owned()
  /** The round's plain part; whether it left effects for the member's fiber (statusEffects). */
  const statusRound = (now: number): boolean => {
    owned = deps.fence.owned()
    if (owned !== exporting) {
      exporting = owned
      if (owned) {
        metrics.initCluster(entry.name, { maxConcurrentReconciles: timings.workersPerMember })
        checksChanged = true
        restartsSeen.clear()
      } else metrics.forgetMember(entry.name)
    }
    const watchFailure = watchFailureOf(engine, timings, now)
    if (watchFailure?.reason !== entry.watchFailure?.reason && watchFailure) loggedWatchFailure = watchFailure
    if (watchFailure) entry.watchFailure = watchFailure
    else delete entry.watchFailure
    if (
      entry.catchingUp &&
      engine.checks.failingSince === undefined &&
      engine.jobs.failingSince === undefined
    )
      entry.catchingUp = false
    if (exporting) {
      metrics.setMemberReady(entry.name, entry.synced && isReachable(entry))
      metrics.setInformerObjects(entry.name, "backupchecks.fleetcheck.io", engine.checks.store.size)
      metrics.setInformerObjects(entry.name, "jobs.batch", engine.jobs.store.size)
      for (const [resource, informer] of [
        ["backupchecks.fleetcheck.io", engine.checks],
        ["jobs.batch", engine.jobs],
      ] as const) {
        const seen = restartsSeen.get(resource) ?? 0
        for (let i = seen; i < informer.watchRestarts; i++) metrics.incInformerRestarts(entry.name, resource)
        restartsSeen.set(resource, informer.watchRestarts)
      }
    }
    // Metrics first, then the MemberCluster: whoever sees the new status finds the metrics current.
    // Only the replica working the member writes it (its writes fenced by the member's Lease).
    if (!owned) {
      currentViews()
      delete entry.lastSeen
      return loggedWatchFailure !== undefined
    }
    return (
      loggedWatchFailure !== undefined ||
      !statusUnchanged(entry, currentViews(), now, timings.statusRefreshMs)
    )
  }
  /** The round's effects: its log line, and the MemberCluster sync when something is to be written. */
  const statusEffects = Effect.gen(function* () {
    const failure = loggedWatchFailure
    loggedWatchFailure = undefined
    if (failure)
      yield* Effect.logWarning("member caches cannot list/watch").pipe(
        Effect.annotateLogs({ reason: failure.reason, error: failure.message }),
      )
    if (owned)
      yield* syncMemberClusterBounded(deps.hubClient, entry, deps.statusWrites, currentViews, timings).pipe(
        Effect.catch((e) =>
          Effect.logWarning("writing MemberCluster status failed; retrying").pipe(
            Effect.annotateLogs({ error: e.message }),
          ),
        ),
      )
  })
  // Woken by the ticker when a round has effects, one run of them at a time. The round's plain part runs
  // on every tick even while effects are pending: a MemberCluster write can wait its turn under the
  // hub-wide bound for many rounds (ADR 0010, decision 9), and the watch health every view
  // reads must stay current meanwhile. Effects found while others are pending fold into the next run.
  const roundWithEffects = yield* Queue.sliding<void>(1)
  let effectsPending = false
  const round = (now: number) => {
    if (!statusRound(now) || effectsPending) return
    effectsPending = true
    Queue.offerUnsafe(roundWithEffects, undefined)
  }
  const statusLoop = Effect.gen(function* () {
    // The first round at once (as the member engages), the others on the ticker.
    round(yield* Clock.currentTimeMillis)
    yield* deps.statusTicker.register(entry.name, round)
    while (true) {
      yield* Queue.take(roundWithEffects)
      yield* statusEffects.pipe(
        Effect.ensuring(
          Effect.sync(() => {
            effectsPending = false
          }),
        ),
      )
    }
  })
  yield* Effect.forkScoped(Effect.scoped(statusLoop))
  return engine
}) as (spec: MemberSpec, deps: MemberDeps) => Effect.Effect<MemberEngine, never, Scope.Scope>
