// The hub, started by capability as controller-runtime's Manager is: HTTP (health, metrics, fleet API)
// first, then leader election, and only while leading the registration controller and every member
// engine. Losing the lease or SIGTERM closes the leading scope: member engines drain their in-flight
// reconciles (bounded grace), then the lease is released so a standby takes over at once.
import type { KubeConfig } from "@kubernetes/client-node"
import { Effect, type Scope, Semaphore } from "effect"
import type { FleetCheckView } from "../api/fleet.ts"
import { hubLeaseName, placementLeaseName } from "../api/names.ts"
import type { AccessProviders } from "../clusterprofile/provider-file.ts"
import { makeGlobalLimit } from "../engine/global-limit.ts"
import { makePriorityLimit } from "../engine/priority-limit.ts"
import { type KubeClient, makeKubeClient } from "../kube/client.ts"
import { gateWrites } from "../kube/write-gate.ts"
import type { FleetMetrics } from "../observability/metrics/index.ts"
import {
  type AccessReview,
  makeAccessReview,
  readSubjectAccessReview,
  readTokenReview,
  subjectAccessReviewBody,
  tokenReviewBody,
} from "./access-review.ts"
import type { HubConfig } from "./config.ts"
import type { MemberEntry } from "./fleet-state.ts"
import { type Availability, startHubHttp } from "./http.ts"
import { makeLeaderElector } from "./leader-election.ts"
import { memoryReturnTimings, runMemoryReturn } from "./memory-return.ts"
import { runPlacement } from "./placement/controller.ts"
import { runPlacementMirror } from "./placement/mirror.ts"
import { type Registration, runRegistration } from "./registration.ts"
import { closeServer } from "./serving/close-server.ts"
import { type ServingCert, tlsServerOptions, watchServingFiles } from "./serving/serving-cert.ts"
import { describeShare, makeSharding, type Sharding, unshardedFence } from "./sharding/shards.ts"
import { statusNewsClasses } from "./status-news.ts"
import { makeStatusTicker } from "./status-ticker.ts"

export interface HubOptions {
  readonly config: HubConfig
  readonly hubKubeConfig: KubeConfig
  /** Unique per process: the Lease holder and the Events' reporting instance. */
  readonly identity: string
  readonly metrics: FleetMetrics
  /** From --clusterprofile-provider-file, read at startup; undefined: ClusterProfiles are not read. */
  readonly accessProviders: AccessProviders | undefined
  /** Secure serving's certificate, read or made at startup; undefined: plain HTTP (no secure serving). */
  readonly servingCert: ServingCert | undefined
  /**
   * The process is the hub's own: give memory back after bursts (memory-return.ts, with the config's
   * threshold). In-process test hubs, sharing their process, do not.
   */
  readonly returnMemory: boolean
}

export interface HubHandle {
  readonly identity: string
  readonly members: Map<string, MemberEntry>
  /**
   * FleetBackupChecks as the placement controller last computed them (empty unless leading); with
   * sharding, on a replica not placing them, as the placement holder last wrote their status.
   */
  readonly fleetChecks: ReadonlyMap<string, FleetCheckView>
  readonly isLeader: () => boolean
  readonly port: number
  /** The dashboard's own listener's port, when `dashboardAddress` is set. */
  readonly dashboardPort: number | undefined
}

/**
 * The leader fence every piece of leader work holds: whether a write may still go out, and a signal
 * that the lease is gone. Without leader election the hub always leads.
 */
export interface LeaderFence {
  readonly mayWrite: Effect.Effect<boolean>
  readonly lostLease: Effect.Effect<void>
}

/**
 * How long member engines may drain when they stop now. On SIGTERM the lease is still renewed while
 * they drain, so they get the full grace (cut short if the lease goes meanwhile). Once the lease is
 * lost they get none: as in controller-runtime, leader work stops at once, queued keys are dropped and
 * in-flight requests aborted, because a successor may lead as soon as the lease expires.
 */
export const drainGraceFor = (config: HubConfig, stillLeader: boolean): number =>
  stillLeader ? config.drainGraceMs : 0

export const runHub = Effect.fnUntraced(function* (
  options: HubOptions,
): Effect.fn.Return<HubHandle, never, Scope.Scope> {
  const { config, identity, metrics } = options
  const members = new Map<string, MemberEntry>()
  /** FleetBackupChecks as the placement controller last computed them (leader only). */
  const fleetChecks = new Map<string, FleetCheckView>()
  // What the placement controller needs besides its clients, the same for a leader and a sharded holder.
  const placementOptions = {
    namespace: config.namespace,
    members,
    statusIntervalMs: config.statusIntervalMs,
    resyncMs: config.resyncPeriodMs,
    reportingInstance: identity,
    views: fleetChecks,
    onView: (v: FleetCheckView) =>
      metrics.setFleetCheck(v.namespace, v.name, v.verified.status, v.counts, v.drills),
    onGone: (namespace: string, name: string) => metrics.deleteFleetCheck(namespace, name),
  }
  let leading = false
  let registrationSynced = false
  let leaderName: () => string | undefined = () => identity
  let sharding: Sharding | undefined
  /** With sharding: whether this replica holds the placement Lease. */
  let placing = () => false
  // Whether this hub's view is the fleet's (`leader` in the fleet API; `fleetcheck status` exits 3 when
  // not): the leader's, or with sharding every replica's once it answers (ADR 0011).
  const speaksForFleet = () => (sharding ? availability().answers : leading)
  const availability = (): Availability =>
    sharding
      ? // Every replica answers for the whole fleet once it has listed the registrations and the Leases
        // that say who works which member (a member nobody works shows Unknown, never green).
        registrationSynced && sharding.synced()
        ? { answers: true }
        : {
            answers: false,
            reason: "Syncing",
            message: "syncing: the member registrations or the sharding Leases are not listed yet",
          }
      : !leading
        ? {
            answers: false,
            reason: "Standby",
            message: `standby: this hub does not lead; the leader is ${leaderName() || "not known yet"}`,
          }
        : !registrationSynced
          ? {
              answers: false,
              reason: "Syncing",
              message: "syncing: the member registrations are not listed yet",
            }
          : { answers: true }
  // What the dashboard says this process is: the leader or a standby, or with sharding its share.
  const role = () => {
    if (!sharding) return leading ? "leader" : "standby"
    let working = 0
    for (const name of members.keys()) if (sharding.owns(name)) working++
    return describeShare({
      identity,
      live: sharding.liveReplicas(),
      working,
      members: members.size,
      placing: placing(),
    })
  }
  // Two clients for the hub's own API server, each with its own connection (ADR 0013). Every Lease
  // request (leader election, sharding's replica and member Leases, the placement Lease) goes through
  // `leaseClient`, never fenced: a renewal never waits for a stream behind the hub's own writes and
  // watches, and one that timed out moves the next try to a new connection at once. Everything else
  // goes through `workClient`; leader work gets it fenced. Every request names this hub process, so the
  // API servers' audit logs tell replicas apart.
  const userAgent = `fleetcheck-hub/${identity}`
  const leaseClient = yield* makeKubeClient({
    cluster: "hub",
    kubeConfig: options.hubKubeConfig,
    userAgent,
    http2: config.http2,
    replaceSuspectConnection: true,
  })
  const workClient = yield* makeKubeClient({
    cluster: "hub",
    kubeConfig: options.hubKubeConfig,
    userAgent,
    http2: config.http2,
  })
  let fence: LeaderFence = { mayWrite: Effect.succeed(true), lostLease: Effect.never }
  const hubClient = gateWrites(
    workClient,
    Effect.suspend(() => fence.mayWrite),
  )

  // Secure serving reviews callers' tokens at the hub's own API server with the hub's own identity,
  // unfenced: a review writes nothing, and a standby must answer its callers too.
  const access: AccessReview | undefined = config.secureServing
    ? yield* makeKubeAccessReview(workClient)
    : undefined
  const listen = (address: HubConfig["httpAddress"], serves: "all" | "dashboard") =>
    Effect.gen(function* () {
      // TLS where the tokens travel: the guarded listener. The dashboard's own listener carries none
      // (the API server's proxy connects to it), so it stays plain HTTP.
      const servingCert = serves === "all" ? options.servingCert : undefined
      const { server, port } = yield* Effect.promise(() =>
        startHubHttp({
          host: address.host,
          port: address.port,
          members,
          fleetChecks,
          metrics,
          isLeader: speaksForFleet,
          role,
          availability,
          identity,
          config,
          // The dashboard's own listener is for the API server's service proxy, which carries no token.
          access: serves === "all" ? access : undefined,
          serves,
          tls: servingCert?.pair,
        }),
      )
      // In-flight requests get the drain grace; a kept-alive connection does not hold the hub open.
      yield* Effect.addFinalizer(() => Effect.promise(() => closeServer(server, config.drainGraceMs)))
      yield* Effect.logInfo(serves === "all" ? "hub serving" : "dashboard serving").pipe(
        Effect.annotateLogs({
          address: `${address.host}:${port}`,
          identity,
          ...(serves === "all" ? { secureServing: config.secureServing } : {}),
          scheme: servingCert ? "https" : "http",
          ...(servingCert
            ? {
                certificate: servingCert.source,
                certificateSha256: servingCert.fingerprint,
                certificateNotAfter: servingCert.notAfter,
              }
            : {}),
        }),
      )
      if (servingCert?.source === "files" && "setSecureContext" in server)
        yield* reloadOnChange(config, servingCert, (next) =>
          server.setSecureContext(tlsServerOptions(next.pair)),
        )
      return port
    })
  const port = yield* listen(config.httpAddress, "all")
  const dashboardPort = config.dashboardAddress
    ? yield* listen(config.dashboardAddress, "dashboard")
    : undefined

  const globalLimit = yield* makeGlobalLimit(config.maxConcurrentReconciles, metrics.addGlobalInflight)
  const syncLimit = yield* Semaphore.make(config.maxConcurrentSyncs)
  if (options.returnMemory)
    yield* Effect.forkScoped(
      runMemoryReturn({
        ...memoryReturnTimings,
        thresholdBytes: config.memoryReturnThresholdMib * 1024 * 1024,
        busy: () => globalLimit.inUse() > 0,
      }),
    )
  const statusTicker = yield* makeStatusTicker(config.statusIntervalMs)
  const statusWrites = makePriorityLimit(config.maxConcurrentStatusWrites, statusNewsClasses, {
    onWaiting: metrics.addStatusWritesWaiting,
    onInUse: metrics.addStatusWritesInflight,
    onServed: metrics.observeStatusWriteWait,
  })
  let drainGrace = () => config.drainGraceMs
  const leaderWork = Effect.gen(function* () {
    leading = true
    metrics.setLeader(true)
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        leading = false
        metrics.setLeader(false)
        registrationSynced = false
        members.clear()
        fleetChecks.clear()
        // A former leader exports nothing about members or checks: the new leader does.
        metrics.forgetAll()
      }),
    )
    yield* Effect.logInfo("leading: starting registration and member engines")
    const leaderFence = unshardedFence({
      mayWrite: Effect.suspend(() => fence.mayWrite),
      lostLease: Effect.suspend(() => fence.lostLease),
    })
    yield* runPlacement({ ...placementOptions, hubClient })
    yield* runRegistration({
      hubClient,
      config,
      globalLimit,
      syncLimit,
      statusTicker,
      statusWrites,
      members,
      metrics,
      reportingInstance: identity,
      userAgent,
      drainGraceMs: () => drainGrace(),
      fenceFor: () => leaderFence,
      hubClientFor: () => hubClient,
      accessProviders: options.accessProviders,
      onSynced: () => {
        registrationSynced = true
      },
    })
    return yield* Effect.never
  })

  if (config.sharding) {
    // Sharding (ADR 0011): no leader; every replica runs the registration, works the members whose
    // Lease it holds, and keeps read-only caches of the others for the views.
    const shards = yield* makeSharding({
      client: leaseClient,
      namespace: config.namespace,
      identity,
      leaseDurationMs: config.leaseDurationMs,
      renewDeadlineMs: config.renewDeadlineMs,
      retryPeriodMs: config.retryPeriodMs,
      resyncMs: config.resyncPeriodMs,
    })
    sharding = shards
    const placement = yield* makeLeaderElector({
      client: leaseClient,
      namespace: config.namespace,
      name: placementLeaseName,
      identity,
      leaseDurationMs: config.leaseDurationMs,
      renewDeadlineMs: config.renewDeadlineMs,
      retryPeriodMs: config.retryPeriodMs,
    }).pipe(Effect.orDie)
    placing = placement.isLeader
    const shardedWork = Effect.gen(function* () {
      metrics.setLeader(true)
      yield* Effect.addFinalizer(() =>
        Effect.sync(() => {
          metrics.setLeader(false)
          registrationSynced = false
          members.clear()
          metrics.forgetAll()
        }),
      )
      yield* Effect.logInfo("sharding: announcing this replica, starting registration").pipe(
        Effect.annotateLogs({ identity }),
      )
      let registration: Registration | undefined
      let syncedAt: number | undefined
      // Started before the registration, so its Leases are released only after the members drained.
      yield* shards.run({
        members: () => registration?.names() ?? [],
        onChange: (member) => registration?.enqueue(member),
        // Members move here only once this replica's caches of every registered member synced (or
        // failed to): work that moves here then starts at once. Never later than the sync timeout.
        ready: () => {
          if (!registrationSynced || registration === undefined) return false
          syncedAt ??= Date.now()
          if (Date.now() - syncedAt > config.cacheSyncTimeoutMs) return true
          const all = [...members.values()]
          return (
            all.length >= registration.names().size &&
            all.every((m) => m.synced || m.syncError !== undefined || m.refused !== undefined)
          )
        },
      })
      registration = yield* runRegistration({
        // Every write for a member goes through that member's fenced client; anything else is refused.
        hubClient: gateWrites(workClient, Effect.succeed(false)),
        config,
        globalLimit,
        syncLimit,
        statusTicker,
        statusWrites,
        members,
        metrics,
        reportingInstance: identity,
        userAgent,
        drainGraceMs: (member) => (shards.fenceFor(member).mayWriteNow() ? config.drainGraceMs : 0),
        fenceFor: shards.fenceFor,
        hubClientFor: (member) => gateWrites(workClient, shards.fenceFor(member).mayWrite),
        ownerlessFor: (member) => () => shards.ownerless(member),
        accessProviders: options.accessProviders,
        onSynced: () => {
          registrationSynced = true
        },
      })
      // FleetBackupChecks (ADR 0011 decision 8): placed by whichever replica holds the placement Lease,
      // through clients fenced by that Lease (placed checks are plain BackupChecks: each is reconciled
      // by its member's holder); every other replica shows the status the holder wrote.
      yield* runPlacementMirror({
        client: workClient,
        namespace: config.namespace,
        resyncMs: config.resyncPeriodMs,
        refreshMs: config.retryPeriodMs,
        views: fleetChecks,
        holding: placement.isLeader,
        holder: placement.liveHolder,
      })
      const placementWork = Effect.gen(function* () {
        // A former holder exports nothing about FleetBackupChecks: the new holder does.
        yield* Effect.addFinalizer(() =>
          Effect.sync(() => {
            for (const v of fleetChecks.values()) metrics.deleteFleetCheck(v.namespace, v.name)
          }),
        )
        yield* Effect.logInfo("holding the placement Lease: placing FleetBackupChecks")
        yield* runPlacement({
          ...placementOptions,
          hubClient: gateWrites(workClient, placement.mayWrite),
          memberWriter: (access) => access.clientFencedBy(placement.mayWrite),
        })
        return yield* Effect.never
      })
      yield* Effect.forkScoped(placement.run(placementWork))
      return yield* Effect.never
    })
    yield* Effect.forkScoped(Effect.scoped(shardedWork))
  } else if (!config.leaderElect) {
    yield* Effect.forkScoped(Effect.scoped(leaderWork))
  } else {
    // Validated before anything starts: bad timings are a startup error, not a hub that never leads.
    const elector = yield* makeLeaderElector({
      client: leaseClient,
      namespace: config.namespace,
      name: hubLeaseName,
      identity,
      leaseDurationMs: config.leaseDurationMs,
      renewDeadlineMs: config.renewDeadlineMs,
      retryPeriodMs: config.retryPeriodMs,
    }).pipe(Effect.orDie)
    drainGrace = () => drainGraceFor(config, elector.isLeader())
    fence = { mayWrite: elector.mayWrite, lostLease: elector.lostLease }
    leaderName = () => elector.observedHolder()
    yield* Effect.forkScoped(elector.run(leaderWork))
  }
  return { identity, members, fleetChecks, isLeader: speaksForFleet, port, dashboardPort }
})

/**
 * Watches the certificate files for the life of the hub's scope: a good new pair is served to new
 * connections (logged with its fingerprint), a bad one refused with an error log and the old one kept.
 */
const reloadOnChange = Effect.fnUntraced(function* (
  config: HubConfig,
  initial: ServingCert,
  apply: (next: ServingCert) => void,
) {
  const services = yield* Effect.context<never>()
  const log = (effect: Effect.Effect<void>) =>
    Effect.runFork(
      effect.pipe(
        Effect.annotateLogs({ certFile: config.tlsCertFile, keyFile: config.tlsPrivateKeyFile }),
        Effect.provideContext(services),
      ),
    )
  yield* Effect.acquireRelease(
    Effect.sync(() =>
      watchServingFiles({
        certFile: config.tlsCertFile!,
        keyFile: config.tlsPrivateKeyFile!,
        initial,
        apply: (next) => {
          apply(next)
          log(
            Effect.logInfo("serving certificate reloaded").pipe(
              Effect.annotateLogs({
                certificateSha256: next.fingerprint,
                certificateNotAfter: next.notAfter,
              }),
            ),
          )
        },
        refused: (error) =>
          log(
            Effect.logError("serving certificate refused; the previous one is still served").pipe(
              Effect.annotateLogs({ error }),
            ),
          ),
        watchFailed: (error) =>
          log(
            Effect.logWarning("cannot watch the serving certificate's directory; polling it only").pipe(
              Effect.annotateLogs({ error }),
            ),
          ),
      }),
    ),
    (w) => Effect.sync(() => w.close()),
  )
})

/** Access review through the hub's own client; a review the API server did not answer is logged here. */
const makeKubeAccessReview = Effect.fnUntraced(function* (client: KubeClient) {
  const services = yield* Effect.context<never>()
  const run = <A>(what: string, effect: Effect.Effect<A, unknown>) =>
    Effect.runPromiseWith(services)(
      effect.pipe(
        Effect.tapError((e) =>
          Effect.logWarning(`${what} failed; the caller is answered 503`).pipe(
            Effect.annotateLogs({ error: e instanceof Error ? e.message : String(e) }),
          ),
        ),
      ),
    )
  const post = (path: string, body: unknown) =>
    client.request<unknown>({ method: "POST", path, body, timeoutMs: 10_000 })
  return makeAccessReview({
    authenticate: (token) =>
      run(
        "TokenReview",
        post("/apis/authentication.k8s.io/v1/tokenreviews", tokenReviewBody(token)).pipe(
          Effect.flatMap((b) => Effect.try(() => readTokenReview(b))),
        ),
      ),
    authorize: (user, path, verb) =>
      run(
        "SubjectAccessReview",
        post(
          "/apis/authorization.k8s.io/v1/subjectaccessreviews",
          subjectAccessReviewBody(user, path, verb),
        ).pipe(Effect.flatMap((b) => Effect.try(() => readSubjectAccessReview(b)))),
      ),
  })
})
