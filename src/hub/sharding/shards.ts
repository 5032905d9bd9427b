// Sharding (--sharding, ADR 0011): several hub replicas split the members. Each replica announces itself
// with its own Lease (fleetcheck-hub-<identity hash>, renewed every retryPeriod); the live replicas are
// those whose Lease changed within its duration on our clock (client-go's observedTime rule, as the
// leader election reads its Lease). Each member is assigned to one live replica by rendezvous hashing
// (assignment.ts), and worked only by the replica holding its Lease fleetcheck-member-<cluster>: a
// leader election per member whose holder is kept alive by its replica Lease (term.ts has the rules):
//
//   acquire   only the assignee, only when the Lease is missing, released, or expired on its clock
//             (leaseDuration since it last saw the member Lease or its holder's replica Lease change;
//             the holder's replica Lease is read afresh first); every write carries the resourceVersion
//             read, so two replicas cannot both win
//   hold      no write: writes for the member are refused from renewDeadline after the start of the last
//             write proving us alive (our acquiring write, or an unbroken chain of our replica Lease's
//             renewals since), asked by every write as its bytes go to the socket: a replica frozen by
//             SIGSTOP writes nothing when it thaws
//   hand over when the assignment moves (a replica joined or left): the member's work stops first, then
//             the Lease is released (empty holder, 1 s) so the new assignee takes it at its next round
//   lose      the fence closed, or another's write of the Lease in our cache: the work stops at once,
//             without a drain, as a lost leader's does
//
// Leases are read through one informer (label fleetcheck.io/shard-lease), so a round costs one PUT (our
// replica Lease) and nothing else; member Leases are written only when they change hands. On shutdown the
// work drains first (renewals go on), then every held Lease is released and the replica's own Lease
// deleted, so the others take over at once.
import { Clock, Deferred, Effect, type Scope } from "effect"
import { memberLeaseName, replicaLeaseName, shardLeaseLabel } from "../../api/names.ts"
import { makeInformer } from "../../engine/informer/informer.ts"
import { isAlreadyExists, isConflict, isNotFound, type KubeClient } from "../../kube/client.ts"
import { leases, pathOf } from "../../kube/resources.ts"
import {
  heldUntil,
  type Lease,
  type LeaseObservation,
  leaseRecordKey,
  microTime,
  observeLease,
} from "../leader-election.ts"
import { assigneeOf } from "./assignment.ts"
import { decideTermStep, fenceOpen, holderAliveUntil } from "./term.ts"

export interface ShardingOptions {
  /** The hub client, unfenced: it renews the Leases. */
  readonly client: KubeClient
  readonly namespace: string
  /** This replica's identity: the holder it writes, and its rendezvous key. */
  readonly identity: string
  readonly leaseDurationMs: number
  readonly renewDeadlineMs: number
  readonly retryPeriodMs: number
  readonly resyncMs: number
}

/**
 * One member's fence, as the member's work and writes use it. Without sharding the hub's leader fence
 * stands in for it (see {@link unshardedFence}).
 */
export interface MemberFence {
  /** Whether a write for this member may go out now (asked again as its bytes go to the socket). */
  readonly mayWrite: Effect.Effect<boolean>
  /** The same, synchronously. */
  readonly mayWriteNow: () => boolean
  /** Completes when this member's Lease is lost (not when it is handed over): a drain ends at once. */
  readonly lostLease: Effect.Effect<void>
  /** Whether this replica works the member now: its registration writes only then. */
  readonly owned: () => boolean
  /**
   * Runs `work` for every term this replica holds the member's Lease (term 1, 2, ...), each in a scope
   * of its own closed when the term ends (lost or handed over); never returns. Without sharding, one
   * term that never ends.
   */
  readonly whileOwned: (
    work: (term: number) => Effect.Effect<void, never, Scope.Scope>,
  ) => Effect.Effect<never>
  /**
   * The registration recorded what this member's work may hold (its finalizer on the Secret): the work
   * may start once the Lease is held too.
   */
  readonly markRecorded: () => void
}

/** The hub's leader fence as every member's fence: what the hub did before sharding. */
export const unshardedFence = (leader: {
  readonly mayWrite: Effect.Effect<boolean>
  readonly lostLease: Effect.Effect<void>
}): MemberFence => ({
  mayWrite: leader.mayWrite,
  mayWriteNow: () => Effect.runSync(leader.mayWrite),
  lostLease: leader.lostLease,
  owned: () => true,
  // The term's scope stays open for good: the workers it forks live as long as the engine.
  whileOwned: (work) => Effect.scoped(Effect.andThen(work(1), Effect.never)),
  markRecorded: () => {},
})

/**
 * What a sharded replica is, as its dashboard says: which of the live replicas (sorted by identity, as
 * every replica lists them), how many members it works, and whether it places FleetBackupChecks.
 */
export const describeShare = (share: {
  readonly identity: string
  readonly live: ReadonlyArray<string>
  readonly working: number
  readonly members: number
  readonly placing: boolean
}): string => {
  const position = share.live.indexOf(share.identity) + 1
  const of = position > 0 ? `replica ${position} of ${share.live.length}` : "replica not announced yet"
  const placing = share.placing ? ", placing FleetBackupChecks" : ""
  return `${of}, working ${share.working} of ${share.members} member${share.members === 1 ? "" : "s"}${placing}`
}

/** Why a member is not worked by any live replica, for the views. */
export interface Ownerless {
  readonly reason: "NoOwner"
  readonly message: string
}

export interface Sharding {
  readonly identity: string
  /** The Lease informer has listed once: the views can tell who works which member. */
  readonly synced: () => boolean
  /** Live replicas by identity (this one included), sorted. */
  readonly liveReplicas: () => ReadonlyArray<string>
  /** This replica's fence for a member (one per member, kept while the member is registered). */
  readonly fenceFor: (member: string) => MemberFence
  /** Whether this replica works the member now. */
  readonly owns: (member: string) => boolean
  /** Who holds the member's Lease, when a live holder does, as this replica last saw it. */
  readonly holderOf: (member: string) => string | undefined
  /** Why no live replica works the member, or undefined when one does (see {@link Ownerless}). */
  readonly ownerless: (member: string) => Ownerless | undefined
  /**
   * Runs the rounds until the scope closes, then releases every held member Lease and deletes the
   * replica's own. `members` lists every registered member; `onChange` is told when this replica's
   * hold on one changes (its registration runs again).
   */
  readonly run: (hooks: ShardingHooks) => Effect.Effect<void, never, Scope.Scope>
}

export interface ShardingHooks {
  /** Every registered member (and those still being let go). */
  readonly members: () => Iterable<string>
  /** This replica's hold on a member changed: its registration runs again. */
  readonly onChange: (member: string) => void
  /**
   * Whether this replica is ready to take members: it announces itself (and so is assigned members)
   * only from then on, so a starting replica's caches are warm when work moves to it.
   */
  readonly ready: () => boolean
}

interface MemberState {
  readonly name: string
  readonly leaseName: string
  /** Our last written copy while we hold it. */
  lease: Lease | undefined
  observation: LeaseObservation | undefined
  held: boolean
  /** Monotonic ms at which this term's acquiring write was sent. */
  acquiredStartMs: number | undefined
  /** The epoch of this replica's own Lease the term began in: a broken chain of renewals ends it. */
  epoch: number
  /** The Lease cache has shown our acquiring write: any later version is another's (taken). */
  seenOurs: boolean
  /** The assignment moved: the work stops, then the Lease is released. */
  releasing: boolean
  recorded: boolean
  term: number
  /** Terms whose work is running now. */
  working: number
  /** The current (or next) term's signals, replaced as one when a term ends. */
  signals: TermSignals
}

/**
 * One term's signals, taken together: work that saw `startable` complete reads `ended` from the same
 * object, so a term that ended meanwhile ends its work at once instead of running into the next term.
 */
interface TermSignals {
  /** Completes when the term may start: the Lease held and the member recorded. */
  readonly startable: Deferred.Deferred<void>
  /** Completes when the term ends (lost or handed over). */
  readonly ended: Deferred.Deferred<void>
  /** Completes when the term ends because the Lease was lost. */
  readonly lost: Deferred.Deferred<void>
}

const newSignals = (): TermSignals => ({
  startable: Deferred.makeUnsafe<void>(),
  ended: Deferred.makeUnsafe<void>(),
  lost: Deferred.makeUnsafe<void>(),
})

// One monotonic clock for the rounds and for the fence, which is asked synchronously as bytes go out.
const nowMono = () => performance.now()
const monoMs = Effect.sync(nowMono)

/** Members whose Lease writes go out at once in a round. */
const roundConcurrency = 16

export const makeSharding = (options: ShardingOptions): Effect.Effect<Sharding, never, Scope.Scope> =>
  Effect.gen(function* () {
    const { client, namespace, identity, leaseDurationMs, renewDeadlineMs, retryPeriodMs } = options
    const leaseDurationSeconds = Math.ceil(leaseDurationMs / 1000)
    const attemptTimeoutMs = Math.max(retryPeriodMs, renewDeadlineMs / 2)
    const collection = pathOf(leases, { namespace })
    const itemPath = (name: string) => pathOf(leases, { namespace, name })
    const ownLeaseName = replicaLeaseName(identity)

    const informer = yield* makeInformer<Lease>({
      client,
      name: "shard-leases",
      resource: leases,
      namespace,
      labelSelector: shardLeaseLabel,
      resyncMs: options.resyncMs,
    })
    let synced = false
    yield* informer.awaitSynced.pipe(
      Effect.andThen(
        Effect.sync(() => {
          synced = true
        }),
      ),
      Effect.forkScoped,
    )

    const replicaObservations = new Map<string, LeaseObservation>()
    let live: ReadonlyArray<string> = [identity]
    const states = new Map<string, MemberState>()

    const stateOf = (member: string): MemberState => {
      let st = states.get(member)
      if (!st) {
        st = {
          name: member,
          leaseName: memberLeaseName(member),
          lease: undefined,
          observation: undefined,
          held: false,
          acquiredStartMs: undefined,
          epoch: 0,
          seenOurs: false,
          releasing: false,
          recorded: false,
          term: 0,
          working: 0,
          signals: newSignals(),
        }
        states.set(member, st)
      }
      return st
    }

    // This replica's proof of life: the start of its own Lease's last successful renewal, and the epoch
    // of an unbroken chain of them (each renewal answered within a lease duration of the previous one's
    // start, so nobody can have seen that one expire in between; see term.ts).
    let own: { aliveSinceMs: number; epoch: number } | undefined
    const proven = (startMs: number) => {
      const doneMs = nowMono()
      own =
        own !== undefined && doneMs < own.aliveSinceMs + leaseDurationMs
          ? { aliveSinceMs: startMs, epoch: own.epoch }
          : { aliveSinceMs: startMs, epoch: (own?.epoch ?? 0) + 1 }
    }
    /** The start of the last write proving us alive for this member's term (see TermView.aliveSinceMs). */
    const aliveSinceOf = (st: MemberState): number | undefined => {
      if (!st.held || st.acquiredStartMs === undefined) return undefined
      return own !== undefined && own.epoch === st.epoch
        ? Math.max(st.acquiredStartMs, own.aliveSinceMs)
        : st.acquiredStartMs
    }
    const mayWriteNow = (st: MemberState) => fenceOpen(st.held, aliveSinceOf(st), nowMono(), renewDeadlineMs)

    /** Starts a term once both the Lease is held and the registration has recorded the member. */
    const maybeStartable = (st: MemberState) => {
      if (st.held && st.recorded && !st.releasing) Deferred.doneUnsafe(st.signals.startable, Effect.void)
    }

    /** Ends the current term: fresh signals for the next one are in place before the old ones fire. */
    const endTerm = (st: MemberState, lost: boolean) => {
      const ending = st.signals
      st.signals = newSignals()
      st.recorded = false
      if (lost) Deferred.doneUnsafe(ending.lost, Effect.void)
      Deferred.doneUnsafe(ending.ended, Effect.void)
      // A term that ended before its work started (no record yet): the work waiting for it moves on to
      // the next term's signals instead of waiting on these for good.
      Deferred.doneUnsafe(ending.startable, Effect.void)
    }

    const fences = new Map<string, MemberFence>()
    const fenceFor = (member: string): MemberFence => {
      const existing = fences.get(member)
      if (existing) return existing
      const st = stateOf(member)
      const fence: MemberFence = {
        mayWrite: Effect.sync(() => mayWriteNow(st)),
        mayWriteNow: () => mayWriteNow(st),
        lostLease: Effect.suspend(() => Deferred.await(st.signals.lost)),
        owned: () => st.held && !st.releasing,
        markRecorded: () => {
          st.recorded = true
          maybeStartable(st)
        },
        whileOwned: (work) =>
          Effect.gen(function* () {
            while (true) {
              const signals = st.signals
              yield* Deferred.await(signals.startable)
              // Ended before it could start: wait for the next term.
              if (Deferred.isDoneUnsafe(signals.ended)) continue
              const ended = signals.ended
              st.term++
              st.working++
              yield* Effect.scoped(
                Effect.raceFirst(Effect.andThen(work(st.term), Effect.never), Deferred.await(ended)),
              ).pipe(
                Effect.ensuring(
                  Effect.sync(() => {
                    st.working--
                  }),
                ),
              )
            }
          }),
      }
      fences.set(member, fence)
      return fence
    }

    /** The member's Lease as the informer has it, observed on our clock. */
    const observe = (st: MemberState, now: number): Lease | undefined => {
      const current = informer.store.get(`${namespace}/${st.leaseName}`)
      st.observation = observeLease(st.observation, current?.spec, now)
      const ours = st.lease?.metadata.resourceVersion
      if (st.held && ours !== undefined && current?.metadata.resourceVersion === ours) st.seenOurs = true
      return current
    }
    /** When, on our clock, a holder's replica Lease was last seen to change (undefined: never seen). */
    const holderSeenAliveAt = (holder: string | null | undefined): number | undefined =>
      holder ? replicaObservations.get(replicaLeaseName(holder))?.atMs : undefined

    const holderOf = (member: string): string | undefined => {
      const st = states.get(member)
      if (st?.held) return identity
      const current = informer.store.get(`${namespace}/${memberLeaseName(member)}`)
      const holder = current?.spec?.holderIdentity ?? ""
      if (holder === "" || holder === identity) return undefined
      // Observed on read, so a Lease that stopped changing expires in our eyes even between rounds.
      const observation = observeLease(st?.observation, current?.spec, nowMono())
      if (st) st.observation = observation
      return holderAliveUntil(current?.spec, observation, holderSeenAliveAt(holder), leaseDurationMs) >
        nowMono()
        ? holder
        : undefined
    }

    const ownerless = (member: string): Ownerless | undefined => {
      if (holderOf(member) !== undefined) return undefined
      return {
        reason: "NoOwner",
        message: synced
          ? `no live hub replica holds this member's Lease ${memberLeaseName(member)}: nothing verifies its checks now`
          : "this hub replica has not read the sharding Leases yet",
      }
    }

    const leaseBody = (name: string, role: "replica" | "member", wall: string): Lease => ({
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { name, namespace, labels: { [shardLeaseLabel]: role } } as Lease["metadata"],
      spec: {
        holderIdentity: identity,
        leaseDurationSeconds,
        acquireTime: wall,
        renewTime: wall,
        leaseTransitions: 0,
      },
    })

    // A renewal or release of a held Lease goes out only while the member's fence is open, checked
    // again as its bytes go to the socket: a thawed replica sends no late renewal (kube/write-gate.ts).
    const put = (l: Lease, fence?: () => boolean) =>
      client.request<Lease>({
        method: "PUT",
        path: itemPath(l.metadata.name),
        body: l,
        timeoutMs: attemptTimeoutMs,
        ...(fence ? { fence } : {}),
      })
    const post = (l: Lease) =>
      client.request<Lease>({ method: "POST", path: collection, body: l, timeoutMs: attemptTimeoutMs })
    const get = (name: string) =>
      client.request<Lease>({ method: "GET", path: itemPath(name), timeoutMs: attemptTimeoutMs })
    const writeTimes = Effect.all({ wall: Effect.map(Clock.currentTimeMillis, microTime), mono: monoMs })

    // A round runs early when a member Lease is released or deleted (its assignee takes it at once) or
    // a replica appears (holders hand its members over at once); the replica Lease's renewal waits until due.
    let wake = Deferred.makeUnsafe<void>()
    const roleOf = (l: Lease) => (l.metadata.labels as Record<string, string> | undefined)?.[shardLeaseLabel]
    informer.addHandler({
      onAdd: (l) => {
        if (roleOf(l) === "replica") Deferred.doneUnsafe(wake, Effect.void)
      },
      onUpdate: (_, l) => {
        if (roleOf(l) === "member" && (l.spec?.holderIdentity ?? "") === "")
          Deferred.doneUnsafe(wake, Effect.void)
      },
      onDelete: (l) => {
        if (roleOf(l) === "member") Deferred.doneUnsafe(wake, Effect.void)
      },
    })

    // ---- the replica's own Lease --------------------------------------------------------------------
    let ownLease: Lease | undefined
    let lastAnnounceMs: number | undefined
    let firstAnnouncedMs: number | undefined
    const announce = Effect.gen(function* () {
      const t = yield* writeTimes
      if (ownLease) {
        const renewed = yield* Effect.result(
          put({ ...ownLease, spec: { ...ownLease.spec, renewTime: t.wall } }),
        )
        if (renewed._tag === "Success") {
          ownLease = renewed.success
          proven(t.mono)
          return
        }
        if (!isConflict(renewed.failure) && !isNotFound(renewed.failure))
          return yield* Effect.fail(renewed.failure)
      }
      // First round, or our copy is stale (deleted or written behind our back): write it afresh.
      const current = yield* get(ownLeaseName).pipe(
        Effect.catchIf(isNotFound, () => Effect.succeed(undefined)),
      )
      const body = leaseBody(ownLeaseName, "replica", t.wall)
      ownLease = current
        ? yield* put({
            ...current,
            metadata: { ...current.metadata, labels: body.metadata.labels },
            spec: body.spec,
          })
        : yield* post(body)
      proven(t.mono)
      firstAnnouncedMs ??= t.mono
    }).pipe(
      Effect.catch((e) =>
        Effect.logWarning("renewing this replica's Lease failed; retrying").pipe(
          Effect.annotateLogs({ lease: ownLeaseName, error: e.message }),
        ),
      ),
    )

    const refreshLive = (now: number) => {
      const ids = new Set<string>([identity])
      const seen = new Set<string>()
      const dead: Lease[] = []
      for (const l of informer.store.list()) {
        const labels = l.metadata.labels as Record<string, string> | undefined
        if (labels?.[shardLeaseLabel] !== "replica") continue
        const name = l.metadata.name
        seen.add(name)
        const obs = observeLease(replicaObservations.get(name), l.spec, now)
        replicaObservations.set(name, obs)
        const holder = l.spec?.holderIdentity ?? ""
        const until = heldUntil(l.spec, obs, leaseDurationMs)
        if (holder !== "" && until > now) ids.add(holder)
        // Expired for another lease duration on our clock: deleted, so a replica starting later does not
        // count it live for a lease duration of its own (members it would assign there would wait).
        if (name !== ownLeaseName && until + leaseDurationMs < now) dead.push(l)
      }
      for (const name of replicaObservations.keys()) if (!seen.has(name)) replicaObservations.delete(name)
      const next = [...ids].sort()
      const before = live
      live = next
      const logged =
        next.join("\n") === before.join("\n")
          ? Effect.void
          : Effect.logInfo("live hub replicas changed").pipe(
              Effect.annotateLogs({ replicas: next.join(","), before: before.join(",") }),
            )
      // A replica alive after all (partitioned) writes its Lease again at its next round.
      const collect = Effect.forEach(
        dead,
        (l) =>
          client
            .request({
              method: "DELETE",
              path: itemPath(l.metadata.name),
              body: { preconditions: { resourceVersion: l.metadata.resourceVersion } },
              timeoutMs: attemptTimeoutMs,
            })
            .pipe(
              Effect.andThen(
                Effect.logInfo("deleted the Lease of a hub replica gone for two lease durations").pipe(
                  Effect.annotateLogs({ lease: l.metadata.name, holder: l.spec?.holderIdentity ?? "" }),
                ),
              ),
              // Another replica deleted it first, or it was renewed meanwhile (a Conflict): both fine.
              Effect.catch((e) =>
                Effect.logDebug("not deleting a stale replica Lease").pipe(
                  Effect.annotateLogs({ lease: l.metadata.name, error: e.message }),
                ),
              ),
            ),
        { discard: true },
      )
      return Effect.andThen(logged, collect)
    }

    // ---- one member's round ---------------------------------------------------------------------------
    const memberRound = (st: MemberState, registered: boolean, onChange: (m: string) => void) =>
      Effect.gen(function* () {
        const now = yield* monoMs
        const current = observe(st, now)
        const assignee = registered ? assigneeOf(st.name, live) : undefined
        const annotate = Effect.annotateLogs({ cluster: st.name, lease: st.leaseName })

        const step = decideTermStep(
          {
            identity,
            assignee,
            announced: firstAnnouncedMs !== undefined,
            held: st.held,
            aliveSinceMs: aliveSinceOf(st),
            taken:
              st.held &&
              st.seenOurs &&
              current?.metadata.resourceVersion !== st.lease?.metadata.resourceVersion,
            releasing: st.releasing,
            working: st.working,
            lease: current?.spec,
            exists: current !== undefined,
            observation: st.observation!,
            holderSeenAliveAtMs: holderSeenAliveAt(current?.spec?.holderIdentity),
            nowMs: now,
          },
          { leaseDurationMs, renewDeadlineMs },
        )
        if (step._tag === "Wait") return
        if (step._tag === "Disown") {
          const wall = microTime(yield* Clock.currentTimeMillis)
          const spec = current!.spec ?? {}
          // A member that is gone loses its Lease altogether.
          const write = registered
            ? put({
                ...current!,
                spec: {
                  ...spec,
                  holderIdentity: "",
                  leaseDurationSeconds: 1,
                  acquireTime: wall,
                  renewTime: wall,
                },
              })
            : client.request({
                method: "DELETE",
                path: itemPath(st.leaseName),
                body: { preconditions: { resourceVersion: current!.metadata.resourceVersion } },
                timeoutMs: attemptTimeoutMs,
              })
          return yield* write.pipe(
            Effect.andThen(
              Effect.logInfo(
                "released a member Lease still naming this replica; another replica is assigned",
              ).pipe(annotate),
            ),
            // Written meanwhile (our cache was behind): nothing of ours to release.
            Effect.catchIf(
              (e) => isConflict(e) || isNotFound(e),
              () => Effect.void,
            ),
          )
        }
        if (step._tag === "Lost") {
          st.held = false
          st.lease = undefined
          endTerm(st, true)
          onChange(st.name)
          return yield* (
            step.taken
              ? Effect.logWarning("member Lease taken by another replica; stopped its work").pipe(
                  Effect.annotateLogs({ holder: current?.spec?.holderIdentity ?? "(deleted)" }),
                )
              : Effect.logWarning(
                  "member Lease not kept: this replica's Lease not renewed within the renew deadline; stopped its work",
                )
          ).pipe(annotate)
        }
        if (step._tag !== "Acquire" && step.handOver) {
          st.releasing = true
          endTerm(st, false)
          onChange(st.name)
          yield* Effect.logInfo("member assigned to another replica; stopping its work to hand it over").pipe(
            annotate,
            Effect.annotateLogs({ assignee: assignee ?? "none" }),
          )
        }
        if (step._tag === "Release") return yield* release(st, registered, onChange)
        if (step._tag === "Keep") return

        // A takeover from a holder we saw expire: its replica Lease read afresh (our cache may lag);
        // changed since we last saw it, the holder is alive after all.
        if (step.confirm !== undefined) {
          const name = replicaLeaseName(step.confirm)
          const fresh = yield* get(name).pipe(Effect.catchIf(isNotFound, () => Effect.succeed(undefined)))
          const seen = replicaObservations.get(name)
          if (fresh && (seen === undefined || seen.key !== leaseRecordKey(fresh.spec))) {
            replicaObservations.set(name, observeLease(seen, fresh.spec, yield* monoMs))
            return
          }
        }
        const t = yield* writeTimes
        const spec = current?.spec ?? {}
        const { takeover } = step
        const written = current
          ? yield* Effect.result(
              put({
                ...current,
                spec: {
                  ...spec,
                  holderIdentity: identity,
                  leaseDurationSeconds,
                  acquireTime: t.wall,
                  renewTime: t.wall,
                  leaseTransitions: (spec.leaseTransitions ?? 0) + (takeover ? 1 : 0),
                },
              }),
            )
          : yield* Effect.result(post(leaseBody(st.leaseName, "member", t.wall)))
        if (written._tag === "Failure") {
          // Another replica won the race: it works the member.
          if (isConflict(written.failure) || isAlreadyExists(written.failure)) return
          return yield* Effect.fail(written.failure)
        }
        st.lease = written.success
        st.held = true
        st.releasing = false
        st.acquiredStartMs = t.mono
        st.epoch = own?.epoch ?? 0
        st.seenOurs = false
        maybeStartable(st)
        onChange(st.name)
        yield* Effect.logInfo("acquired member Lease").pipe(
          annotate,
          Effect.annotateLogs({ previousHolder: spec.holderIdentity ?? "" }),
        )
      })

    /** Hands the Lease over (empty holder, 1 s), or deletes it when the member is gone. */
    const release = (st: MemberState, registered: boolean, onChange: (m: string) => void) =>
      Effect.gen(function* () {
        const lease = st.lease
        // Still within the term's renew deadline, or not sent at all (the Lease then expires).
        const aliveSince = aliveSinceOf(st)
        const open = () => fenceOpen(true, aliveSince, nowMono(), renewDeadlineMs)
        st.held = false
        st.releasing = false
        st.lease = undefined
        st.acquiredStartMs = undefined
        if (lease) {
          if (registered) {
            const wall = microTime(yield* Clock.currentTimeMillis)
            yield* put(
              {
                ...lease,
                spec: {
                  ...lease.spec,
                  holderIdentity: "",
                  leaseDurationSeconds: 1,
                  acquireTime: wall,
                  renewTime: wall,
                },
              },
              open,
            )
          } else {
            yield* client.request({
              method: "DELETE",
              path: itemPath(st.leaseName),
              body: { preconditions: { resourceVersion: lease.metadata.resourceVersion } },
              fence: open,
            })
          }
        }
        onChange(st.name)
        yield* Effect.logInfo(
          registered ? "released member Lease" : "deleted the Lease of a member that is gone",
        ).pipe(Effect.annotateLogs({ cluster: st.name, lease: st.leaseName }))
      }).pipe(
        Effect.catch((e) =>
          Effect.logWarning("releasing a member Lease failed; it expires on its own").pipe(
            Effect.annotateLogs({ cluster: st.name, lease: st.leaseName, error: e.message }),
          ),
        ),
      )

    const round = (hooks: ShardingHooks) =>
      Effect.gen(function* () {
        if (firstAnnouncedMs === undefined && !hooks.ready()) return
        const now = yield* monoMs
        if (lastAnnounceMs === undefined || now - lastAnnounceMs >= retryPeriodMs / 2) {
          lastAnnounceMs = now
          yield* announce
        }
        if (!synced) return
        yield* refreshLive(yield* monoMs)
        const registered = new Set(hooks.members())
        for (const m of registered) stateOf(m)
        const all = [...states.values()]
        yield* Effect.forEach(
          all,
          (st) =>
            memberRound(st, registered.has(st.name), hooks.onChange).pipe(
              Effect.timeout(attemptTimeoutMs * 2),
              Effect.catch((e) =>
                Effect.logWarning("member Lease round failed; retrying").pipe(
                  Effect.annotateLogs({
                    cluster: st.name,
                    lease: st.leaseName,
                    error: "message" in e ? String(e.message) : String(e),
                  }),
                ),
              ),
            ),
          { concurrency: roundConcurrency, discard: true },
        )
        // Forget members that are gone and no longer held (their fence with them).
        for (const st of all)
          if (!registered.has(st.name) && !st.held && st.working === 0) {
            states.delete(st.name)
            fences.delete(st.name)
          }
      })

    const shutdown = Effect.gen(function* () {
      const held = [...states.values()].filter((st) => st.held)
      for (const st of held) if (!st.releasing) endTerm(st, false)
      yield* Effect.forEach(held, (st) => release(st, true, () => {}), {
        concurrency: roundConcurrency,
        discard: true,
      })
      yield* client
        .request({ method: "DELETE", path: itemPath(ownLeaseName), timeoutMs: attemptTimeoutMs })
        .pipe(
          Effect.tap(() => Effect.logInfo("deleted this replica's Lease")),
          Effect.catch((e) =>
            Effect.logWarning("deleting this replica's Lease failed; it expires on its own").pipe(
              Effect.annotateLogs({ error: e.message }),
            ),
          ),
        )
    }).pipe(Effect.timeout(renewDeadlineMs), Effect.ignore)

    const run = (hooks: ShardingHooks) =>
      Effect.gen(function* () {
        // Registered before the loop's fork, so it runs after the loop stopped.
        yield* Effect.addFinalizer(() => shutdown)
        yield* Effect.gen(function* () {
          while (true) {
            const started = yield* monoMs
            wake = Deferred.makeUnsafe<void>()
            yield* round(hooks)
            const elapsed = (yield* monoMs) - started
            // Every retryPeriod, and at once when a member Lease is released or a replica appears.
            yield* Effect.raceFirst(Effect.sleep(Math.max(10, retryPeriodMs - elapsed)), Deferred.await(wake))
            yield* Effect.sleep(10)
          }
        }).pipe(Effect.annotateLogs({ identity }), Effect.forkScoped)
      })

    return {
      identity,
      synced: () => synced,
      liveReplicas: () => live,
      fenceFor,
      owns: (member) => {
        const st = states.get(member)
        return st?.held === true && !st.releasing
      },
      holderOf,
      ownerless,
      run,
    }
  })
