// Leader election over a coordination.k8s.io/v1 Lease with client-go's semantics
// (k8s.io/client-go/tools/leaderelection): a held lease is free only once leaseDuration has passed on
// OUR clock since we last saw its record change (never compare the remote renewTime with the local
// clock: clocks may be skewed, only their rates are assumed equal); every write is an update carrying
// the resourceVersion we read, so two contenders cannot both win (a Conflict means we lost).
//
// This is not fencing: a leader that stalls longer than leaseDuration may still act after a successor
// started. The margin is leaseDuration - renewDeadline (5 s by default): leader work is stopped at
// renewDeadline after the last successful renewal and must finish its finalizers within that margin.
// Deterministic names and optimistic concurrency on every write are the second line of defence.
import { hostname } from "node:os"
import { Cause, Clock, Data, Deferred, Effect, Exit, Fiber, Random, Scope } from "effect"
import { hubLeaseName } from "../api/names.ts"
import { isAlreadyExists, isConflict, isNotFound, type KubeClient, type KubeError } from "../kube/client.ts"
import { leases, pathOf } from "../kube/resources.ts"

/** client-go's JitterFactor: a standby waits retryPeriod × [1, 2.2) between attempts. */
const jitterFactor = 1.2

export interface LeaderElectionOptions {
  readonly client: KubeClient
  readonly namespace: string
  /** Lease name; the hub uses {@link hubLeaseName}. */
  readonly name: string
  /** Unique per process (see {@link makeLeaderIdentity}): two processes with one identity both lead. */
  readonly identity: string
  /** How long a standby waits, since it last saw the lease change, before taking it over. */
  readonly leaseDurationMs: number
  /** How long the leader keeps trying to renew before it stops leading. */
  readonly renewDeadlineMs: number
  /** Interval between renewals and between acquire attempts (jittered for standbys). */
  readonly retryPeriodMs: number
}

export interface ResolvedLeaderElectionOptions {
  readonly client: KubeClient
  readonly namespace: string
  readonly name: string
  readonly identity: string
  readonly leaseDurationMs: number
  readonly renewDeadlineMs: number
  readonly retryPeriodMs: number
}

export class LeaderElectionConfigError extends Data.TaggedError("LeaderElectionConfigError")<{
  readonly message: string
}> {}

/** Hostname plus a random suffix, as client-go users do (hostname + "_" + uuid). */
export const makeLeaderIdentity = (host: string = hostname()): string =>
  `${host}_${crypto.randomUUID().slice(0, 8)}`

const positive = (n: number) => Number.isFinite(n) && n > 0

/** Checks client-go's constraints: leaseDuration > renewDeadline > 1.2 × retryPeriod. */
export const resolveLeaderElectionOptions = (
  options: LeaderElectionOptions,
): Effect.Effect<ResolvedLeaderElectionOptions, LeaderElectionConfigError> => {
  const { leaseDurationMs, renewDeadlineMs, retryPeriodMs } = options
  const fail = (message: string) => Effect.fail(new LeaderElectionConfigError({ message }))
  if (options.namespace === "") return fail("leader election: namespace must not be empty")
  if (options.name === "") return fail("leader election: lease name must not be empty")
  if (options.identity === "") return fail("leader election: identity must not be empty")
  for (const [k, v] of [
    ["leaseDurationMs", leaseDurationMs],
    ["renewDeadlineMs", renewDeadlineMs],
    ["retryPeriodMs", retryPeriodMs],
  ] as const) {
    if (!positive(v)) return fail(`leader election: ${k} must be a positive number of milliseconds, got ${v}`)
  }
  if (leaseDurationMs <= renewDeadlineMs) {
    return fail(
      `leader election: leaseDuration (${leaseDurationMs} ms) must be greater than renewDeadline (${renewDeadlineMs} ms)`,
    )
  }
  if (renewDeadlineMs <= jitterFactor * retryPeriodMs) {
    return fail(
      `leader election: renewDeadline (${renewDeadlineMs} ms) must be greater than ${jitterFactor} × retryPeriod (${retryPeriodMs} ms)`,
    )
  }
  return Effect.succeed({
    client: options.client,
    namespace: options.namespace,
    name: options.name,
    identity: options.identity,
    leaseDurationMs,
    renewDeadlineMs,
    retryPeriodMs,
  })
}

/** coordination.k8s.io/v1 LeaseSpec; unknown fields (strategy, preferredHolder) are carried through. */
export interface LeaseSpec {
  holderIdentity?: string | null
  leaseDurationSeconds?: number | null
  acquireTime?: string | null
  renewTime?: string | null
  leaseTransitions?: number | null
  [field: string]: unknown
}

export interface Lease {
  apiVersion?: string
  kind?: string
  metadata: { name: string; namespace?: string; resourceVersion?: string; [field: string]: unknown }
  spec?: LeaseSpec
}

/** What a contender last saw of the lease, and when on its own monotonic clock. */
export interface LeaseObservation {
  readonly key: string
  readonly atMs: number
}

/** The fields whose change proves the holder is alive (client-go compares the whole record). */
export const leaseRecordKey = (spec: LeaseSpec | undefined): string =>
  JSON.stringify([
    spec?.holderIdentity ?? "",
    spec?.renewTime ?? "",
    spec?.acquireTime ?? "",
    spec?.leaseDurationSeconds ?? null,
    spec?.leaseTransitions ?? null,
  ])

/** client-go's observedTime rule: the clock restarts only when the record changed since last seen. */
export const observeLease = (
  previous: LeaseObservation | undefined,
  spec: LeaseSpec | undefined,
  nowMs: number,
): LeaseObservation => {
  const key = leaseRecordKey(spec)
  return previous !== undefined && previous.key === key ? previous : { key, atMs: nowMs }
}

/**
 * True when someone else holds the lease and, by our clock, it has not expired since we observed its
 * last change. An empty holder (released) is never held. A missing leaseDurationSeconds counts as
 * `fallbackDurationMs` (ours), the cautious reading.
 */
export const isHeldByOther = (
  spec: LeaseSpec | undefined,
  identity: string,
  observation: LeaseObservation,
  nowMs: number,
  fallbackDurationMs: number,
): boolean => {
  const holder = spec?.holderIdentity ?? ""
  if (holder === "" || holder === identity) return false
  return heldUntil(spec, observation, fallbackDurationMs) > nowMs
}

/** When, on our clock, the lease as last observed expires (see isHeldByOther). */
export const heldUntil = (
  spec: LeaseSpec | undefined,
  observation: LeaseObservation,
  fallbackDurationMs: number,
): number => {
  const seconds = spec?.leaseDurationSeconds
  const durationMs = typeof seconds === "number" && seconds > 0 ? seconds * 1000 : fallbackDurationMs
  return observation.atMs + durationMs
}

/**
 * How often a standby reads the lease. client-go waits retryPeriod × [1, 2.2) between attempts, so a
 * standby sees a renewal up to 4.4 s late and then waits for its next jittered attempt after the
 * lease expired: failover takes up to 15 + 4.4 + 4.4 s. A standby here reads every fifth of the
 * leader's safety margin (leaseDuration − renewDeadline; 1 s with the defaults, never more than
 * retryPeriod) and tries again the moment the lease expires on its clock, so failover takes at most
 * leaseDuration plus one poll. Safety does not change: the lease still counts from when we saw its last
 * change, and the old leader stopped at renewDeadline.
 */
export const standbyPollMs = (o: {
  leaseDurationMs: number
  renewDeadlineMs: number
  retryPeriodMs: number
}) => Math.min(o.retryPeriodMs, Math.max(100, (o.leaseDurationMs - o.renewDeadlineMs) / 5))

/** metav1.MicroTime's wire format: RFC 3339 with six fractional digits. */
export const microTime = (epochMs: number): string => new Date(epochMs).toISOString().replace("Z", "000Z")

export interface LeaderElector {
  readonly identity: string
  /** True from "became leader" until leader work starts stopping (lost lease or shutdown). */
  readonly isLeader: () => boolean
  /** The holder the lease named when last read ("" when released, undefined before the first read). */
  readonly observedHolder: () => string | undefined
  /**
   * Who leads now as far as this contender can tell: itself while leading, else the holder last read
   * while its lease has not expired on our clock (the observedTime rule); undefined when nobody does.
   */
  readonly liveHolder: Effect.Effect<string | undefined>
  /**
   * The fence for leader work's writes: true only while leading and less than renewDeadline has passed
   * on the monotonic clock since the start of the last successful renewal. After that a successor may
   * soon lead (leaseDuration after our last renewal, on its clock), so no write may go out any more,
   * whatever leader work is doing at that moment.
   */
  readonly mayWrite: Effect.Effect<boolean>
  /**
   * Completes when the current term ends because the lease is lost, including during a shutdown drain
   * (then the drain must end at once: keeping on would act without a lease). Never completes otherwise.
   */
  readonly lostLease: Effect.Effect<void>
  /**
   * Campaigns forever. While leader, `leading` runs in its own Scope (fibers it forks into that scope
   * keep running after it returns); the lease is renewed every retryPeriod. A renewal that has not
   * succeeded within renewDeadline of the last good one (or a lease found taken) interrupts `leading`,
   * closes its scope and waits for its finalizers, then the elector campaigns again.
   *
   * Interrupting `run` (SIGTERM): `leading` is stopped first while renewals go on (so the lease stays
   * held while in-flight work drains under the caller's grace period), then the lease is released
   * (empty holder, leaseDurationSeconds 1) so a standby takes over at once. A defect in `leading`
   * stops it, releases the lease and is re-raised. Run one `run` per elector at a time.
   */
  readonly run: <R>(
    leading: Effect.Effect<void, never, R>,
  ) => Effect.Effect<never, never, Exclude<R, Scope.Scope>>
}

// writeStartedMs: just before the winning write was sent. No contender can have seen the change
// earlier, so leaseDuration counted from here ends no later than any contender's view of the expiry.
// (The step's start is no reference: a GET that hung through an outage would eat the whole term.)
type StepOutcome =
  | { readonly _tag: "Leader"; readonly writeStartedMs: number }
  | { readonly _tag: "HeldByOther"; readonly holder: string }

const monoMs = Effect.map(Clock.monotonicTimeNanos, (n) => Number(n / 1_000_000n))

const describe = (e: KubeError | Cause.TimeoutError, timeoutMs: number): string =>
  Cause.isTimeoutError(e) ? `no answer within ${Math.round(timeoutMs)} ms` : e.message

export const makeLeaderElector = (
  options: LeaderElectionOptions,
): Effect.Effect<LeaderElector, LeaderElectionConfigError> =>
  Effect.map(resolveLeaderElectionOptions(options), (o) => {
    const { client, identity, leaseDurationMs, renewDeadlineMs, retryPeriodMs } = o
    const leasePath = pathOf(leases, { namespace: o.namespace })
    const itemPath = pathOf(leases, { namespace: o.namespace, name: o.name })
    const leaseDurationSeconds = Math.ceil(leaseDurationMs / 1000)
    // One request may not use the whole renew window: a stuck connection then still leaves room for a
    // retry on a fresh one. The deadline is the request's own, so the client sees the timeout (and the
    // hub's Lease client moves the retry to a new connection; ADR 0013), not an interruption.
    const attemptTimeoutMs = Math.max(retryPeriodMs, renewDeadlineMs / 2)

    let leader = false
    // The start of the last successful renewal of the current term (monotonic ms); undefined off term.
    let lastRenewStartMs: number | undefined
    let lostSignal = Deferred.makeUnsafe<void>()
    let lease: Lease | undefined
    let observation: LeaseObservation | undefined
    let holder: string | undefined

    const annotate = Effect.annotateLogs({ lease: `${o.namespace}/${o.name}`, identity })

    const remember = Effect.fnUntraced(function* (l: Lease) {
      lease = l
      holder = l.spec?.holderIdentity ?? ""
      observation = observeLease(observation, l.spec, yield* monoMs)
    })

    const put = (l: Lease, timeoutMs: number) =>
      client.request<Lease>({ method: "PUT", path: itemPath, body: l, timeoutMs })

    // The clock readings for a write: wall time for the record, monotonic time for our deadline.
    const writeTimes = Effect.all({ wall: Effect.map(Clock.currentTimeMillis, microTime), mono: monoMs })

    // client-go's tryAcquireOrRenew: one GET (skipped by a leader holding a fresh copy), then at most
    // one create or update; each request within `timeoutMs`.
    const step = Effect.fnUntraced(function* (timeoutMs: number): Effect.fn.Return<StepOutcome, KubeError> {
      if (leader && lease !== undefined && lease.spec?.holderIdentity === identity) {
        const t = yield* writeTimes
        const fast = yield* Effect.result(
          put({ ...lease, spec: { ...lease.spec, renewTime: t.wall } }, timeoutMs),
        )
        if (fast._tag === "Success") {
          yield* remember(fast.success)
          return { _tag: "Leader", writeStartedMs: t.mono }
        }
        // Our copy is stale (an earlier write landed after we gave up on it, another writer, or the
        // Lease was deleted): re-read and decide on fresh state.
        if (!isConflict(fast.failure) && !isNotFound(fast.failure)) return yield* Effect.fail(fast.failure)
      }
      const got = yield* Effect.result(client.request<Lease>({ method: "GET", path: itemPath, timeoutMs }))
      if (got._tag === "Failure") {
        if (!isNotFound(got.failure)) return yield* Effect.fail(got.failure)
        const t = yield* writeTimes
        const created = yield* Effect.result(
          client.request<Lease>({
            method: "POST",
            path: leasePath,
            body: {
              apiVersion: "coordination.k8s.io/v1",
              kind: "Lease",
              metadata: { name: o.name, namespace: o.namespace },
              spec: {
                holderIdentity: identity,
                leaseDurationSeconds,
                acquireTime: t.wall,
                renewTime: t.wall,
                leaseTransitions: 0,
              },
            } satisfies Lease,
            timeoutMs,
          }),
        )
        if (created._tag === "Success") {
          yield* remember(created.success)
          return { _tag: "Leader", writeStartedMs: t.mono }
        }
        if (isAlreadyExists(created.failure)) return { _tag: "HeldByOther", holder: "" }
        return yield* Effect.fail(created.failure)
      }
      const current = got.success
      yield* remember(current)
      const spec = current.spec ?? {}
      const previousHolder = spec.holderIdentity ?? ""
      if (isHeldByOther(spec, identity, observation!, yield* monoMs, leaseDurationMs)) {
        return { _tag: "HeldByOther", holder: previousHolder }
      }
      const takeover = previousHolder !== identity
      const t = yield* writeTimes
      const updated = yield* Effect.result(
        put(
          {
            ...current,
            spec: {
              ...spec,
              holderIdentity: identity,
              leaseDurationSeconds,
              renewTime: t.wall,
              ...(takeover
                ? { acquireTime: t.wall, leaseTransitions: (spec.leaseTransitions ?? 0) + 1 }
                : { acquireTime: spec.acquireTime ?? t.wall }),
            },
          },
          timeoutMs,
        ),
      )
      if (updated._tag === "Failure") {
        // Someone wrote between our read and our write: they won this round.
        if (isConflict(updated.failure)) return { _tag: "HeldByOther", holder: previousHolder }
        return yield* Effect.fail(updated.failure)
      }
      yield* remember(updated.success)
      return { _tag: "Leader", writeStartedMs: t.mono }
    })

    // A step within `timeoutMs`, each of its requests within the attempt deadline as well.
    const timedStep = (timeoutMs: number) =>
      step(Math.max(1, Math.min(timeoutMs, attemptTimeoutMs))).pipe(
        Effect.timeout(Math.max(1, timeoutMs)),
        Effect.result,
        Effect.map((r) =>
          r._tag === "Success" ? r : { _tag: "Failure" as const, message: describe(r.failure, timeoutMs) },
        ),
      )

    // Campaign until we hold the lease; returns when (monotonic ms) our winning write was sent.
    const acquire = Effect.gen(function* () {
      let lastProblem = ""
      let lastHolder: string | undefined
      while (true) {
        const r = yield* timedStep(renewDeadlineMs)
        if (r._tag === "Success" && r.success._tag === "Leader") return r.success.writeStartedMs
        if (r._tag === "Success" && r.success._tag === "HeldByOther") {
          lastProblem = ""
          if (r.success.holder !== "" && r.success.holder !== lastHolder) {
            lastHolder = r.success.holder
            yield* Effect.logInfo("lease held by another candidate").pipe(
              Effect.annotateLogs({ holder: r.success.holder }),
            )
          }
        } else if (r._tag === "Failure") {
          // Log each new problem once; a steady outage would otherwise log every retryPeriod.
          if (r.message !== lastProblem) {
            yield* Effect.logWarning("could not read or take the lease; retrying").pipe(
              Effect.annotateLogs({ error: r.message }),
            )
            lastProblem = r.message
          }
        }
        // Held by another: read again soon (standbyPollMs), and exactly when it expires by our clock.
        // Failed: back off as client-go does.
        const jitter = yield* Random.next
        const now = yield* monoMs
        const expiresIn =
          r._tag === "Success" && observation !== undefined
            ? heldUntil(lease?.spec, observation, leaseDurationMs) - now
            : Number.POSITIVE_INFINITY
        const pollMs =
          r._tag === "Success"
            ? standbyPollMs({ leaseDurationMs, renewDeadlineMs, retryPeriodMs }) * (1 + jitter * 0.2)
            : retryPeriodMs * (1 + jitter * jitterFactor)
        yield* Effect.sleep(Math.max(1, Math.min(pollMs, expiresIn + 1)))
      }
    })

    // Renews until a renewal has not succeeded within renewDeadline of the last good one, or the lease
    // is found taken; returns why. `lastRenew` is shared with the caller for the overrun check.
    const renew = (lastRenew: { ms: number }) =>
      Effect.gen(function* () {
        while (true) {
          const deadline = lastRenew.ms + renewDeadlineMs
          yield* Effect.sleep(Math.max(0, Math.min(retryPeriodMs, deadline - (yield* monoMs))))
          let lastProblem = ""
          while (true) {
            const startedMs = yield* monoMs
            const remaining = deadline - startedMs
            if (remaining <= 0) {
              return `no successful renewal within ${renewDeadlineMs} ms${lastProblem ? ` (${lastProblem})` : ""}`
            }
            const r = yield* timedStep(remaining)
            if (r._tag === "Success" && r.success._tag === "Leader") {
              lastRenew.ms = r.success.writeStartedMs
              lastRenewStartMs = r.success.writeStartedMs
              break
            }
            if (r._tag === "Success" && r.success._tag === "HeldByOther") {
              return `lease taken by ${r.success.holder || "another candidate"}`
            }
            if (r._tag === "Failure") {
              if (lastProblem === "")
                yield* Effect.logWarning("lease renewal failed; retrying").pipe(
                  Effect.annotateLogs({ error: r.message }),
                )
              lastProblem = r.message
            }
            // Attempts start a retry period apart, as client-go's: one that timed out is retried at once.
            const now = yield* monoMs
            const left = deadline - now
            if (left > 0) yield* Effect.sleep(Math.max(0, Math.min(retryPeriodMs - (now - startedMs), left)))
          }
        }
      })

    // client-go's release on cancel: empty holder and a 1 s duration so a standby need not wait.
    const release = Effect.gen(function* () {
      const r = yield* Effect.gen(function* () {
        const current = yield* client.request<Lease>({
          method: "GET",
          path: itemPath,
          timeoutMs: renewDeadlineMs,
        })
        if ((current.spec?.holderIdentity ?? "") !== identity) return false
        const now = microTime(yield* Clock.currentTimeMillis)
        const released = yield* put(
          {
            ...current,
            spec: {
              ...current.spec,
              holderIdentity: "",
              leaseDurationSeconds: 1,
              acquireTime: now,
              renewTime: now,
              leaseTransitions: current.spec?.leaseTransitions ?? 0,
            },
          },
          renewDeadlineMs,
        )
        yield* remember(released)
        return true
      }).pipe(Effect.timeout(renewDeadlineMs), Effect.result)
      if (r._tag === "Success") {
        if (r.success) yield* Effect.logInfo("released lease")
        else yield* Effect.logInfo("lease no longer ours; nothing to release")
      } else {
        yield* Effect.logWarning("could not release the lease; a standby takes over once it expires").pipe(
          Effect.annotateLogs({ error: describe(r.failure, renewDeadlineMs) }),
        )
      }
    })

    type Died = { readonly _tag: "Died"; readonly cause: Cause.Cause<never> }
    type LeadEnd = { readonly _tag: "Lost"; readonly reason: string } | Died

    // One term as leader. Uninterruptible except while waiting, so the stop order is always: stop
    // `leading` (interrupt, close its scope, wait for finalizers), stop renewing, then release.
    const lead = <R>(leading: Effect.Effect<void, never, R>, acquiredAtMs: number) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.gen(function* () {
          leader = true
          lastRenewStartMs = acquiredAtMs
          yield* Effect.logInfo("became leader")
          const lastRenew = { ms: acquiredAtMs }
          const leadScope = yield* Scope.make()
          const renewFiber = yield* Effect.forkDetach(renew(lastRenew))
          const leadingFiber = yield* Effect.forkDetach(Scope.provide(leading, leadScope))
          const lost = Effect.map(
            Fiber.await(renewFiber),
            (exit): LeadEnd =>
              Exit.isSuccess(exit)
                ? { _tag: "Lost", reason: exit.value }
                : { _tag: "Lost", reason: "renewal failed" },
          )
          // `leading` may return early (its scoped fibers keep working); only a defect ends the term.
          const died = Effect.flatMap(Fiber.await(leadingFiber), (exit) =>
            Exit.isFailure(exit)
              ? Effect.succeed<LeadEnd>({ _tag: "Died", cause: exit.cause })
              : Effect.never,
          )
          const end = yield* Effect.exit(restore(Effect.raceFirst(lost, died)))
          // Undefined when `run` itself was interrupted (shutdown).
          const outcome = end._tag === "Success" ? end.value : undefined

          // Lost or died: we no longer lead. Shutting down: still the leader (renewing) while work drains.
          if (outcome !== undefined) leader = false
          if (outcome?._tag === "Lost") {
            yield* Deferred.succeed(lostSignal, undefined)
            yield* Effect.logWarning("lost lease; stopping leader work").pipe(
              Effect.annotateLogs({ reason: outcome.reason }),
            )
          } else if (outcome?._tag === "Died")
            yield* Effect.logError("leader work died; stopping it, releasing the lease")
          else yield* Effect.logInfo("shutting down: stopping leader work, then releasing the lease")
          // A drain on shutdown still watches the renewals: losing the lease meanwhile ends it at once.
          const lostWhileDraining = yield* Effect.forkDetach(
            Effect.andThen(Fiber.await(renewFiber), () =>
              Effect.andThen(
                Effect.sync(() => {
                  leader = false
                }),
                Deferred.succeed(lostSignal, undefined),
              ),
            ),
          )
          yield* Fiber.interrupt(leadingFiber)
          yield* Scope.close(leadScope, Exit.void)
          leader = false
          lastRenewStartMs = undefined
          yield* Fiber.interrupt(lostWhileDraining)
          yield* Fiber.interrupt(renewFiber)
          // Whoever waits from now on waits for the next term's loss.
          if (Deferred.isDoneUnsafe(lostSignal)) lostSignal = Deferred.makeUnsafe<void>()

          if (outcome?._tag === "Lost") {
            const overrunMs = (yield* monoMs) - (lastRenew.ms + leaseDurationMs)
            if (overrunMs >= 0) {
              yield* Effect.logError("leader work outlived the lease: a new leader may be acting").pipe(
                Effect.annotateLogs({ overrunMs }),
              )
            } else {
              yield* Effect.logInfo("leader work stopped before the lease could expire").pipe(
                Effect.annotateLogs({ marginMs: -overrunMs }),
              )
            }
            return
          }
          yield* release
          // End `run` the way the term ended: interrupted, or with the defect of `leading`.
          return yield* Effect.failCause(end._tag === "Failure" ? end.cause : (outcome as Died).cause)
        }),
      )

    const run = <R>(
      leading: Effect.Effect<void, never, R>,
    ): Effect.Effect<never, never, Exclude<R, Scope.Scope>> =>
      Effect.gen(function* () {
        while (true) {
          const acquiredAtMs = yield* acquire
          yield* lead(leading, acquiredAtMs)
        }
      }).pipe(annotate)

    const mayWrite = Effect.map(
      monoMs,
      (now) => leader && lastRenewStartMs !== undefined && now - lastRenewStartMs < renewDeadlineMs,
    )

    return {
      identity,
      isLeader: () => leader,
      observedHolder: () => holder,
      liveHolder: Effect.map(monoMs, (now) => {
        if (leader) return identity
        if (!holder || holder === identity || observation === undefined) return undefined
        return heldUntil(lease?.spec, observation, leaseDurationMs) > now ? holder : undefined
      }),
      mayWrite,
      lostLease: Effect.suspend(() => Deferred.await(lostSignal)),
      run,
    }
  })

/** Builds an elector from `options` and campaigns forever with `leading` (see {@link LeaderElector.run}). */
export const runLeaderElection = <R>(
  options: LeaderElectionOptions,
  leading: Effect.Effect<void, never, R>,
): Effect.Effect<never, LeaderElectionConfigError, Exclude<R, Scope.Scope>> =>
  Effect.flatMap(makeLeaderElector(options), (elector) => elector.run(leading))
