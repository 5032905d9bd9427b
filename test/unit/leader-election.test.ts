// Leader election under TestClock against an in-memory Lease endpoint with per-client faults: option
// validation, client-go's observedTime expiry rule (never the remote clock), takeover, stopping before
// the lease can expire, draining while still renewing on shutdown, release, and a dying `leading`.

import { assert, describe, it } from "@effect/vitest"
import { Cause, Clock, Effect, Exit, Fiber, type Scope } from "effect"
import { TestClock } from "effect/testing"
import { defaultHubConfig } from "../../src/hub/config.ts"
import {
  isHeldByOther,
  LeaderElectionConfigError,
  type LeaderElector,
  type Lease,
  type LeaseSpec,
  makeLeaderElector,
  microTime,
  observeLease,
  resolveLeaderElectionOptions,
  runLeaderElection,
} from "../../src/hub/leader-election.ts"
import { KubeApiError, type KubeClient, type KubeRequest, KubeTransportError } from "../../src/kube/client.ts"

/** The hub's configured defaults (src/hub/config.ts), the only place they are written. */
const defaultTimings = {
  leaseDurationMs: defaultHubConfig.leaseDurationMs,
  renewDeadlineMs: defaultHubConfig.renewDeadlineMs,
  retryPeriodMs: defaultHubConfig.retryPeriodMs,
}

const ns = "fleetcheck-system"
const name = "fleetcheck-hub"
const collectionPath = `/apis/coordination.k8s.io/v1/namespaces/${ns}/leases`
const itemPath = `${collectionPath}/${name}`

interface Write {
  readonly by: string
  readonly at: number
  readonly spec: LeaseSpec
}

/** One Lease with resourceVersion semantics; each client can be cut off ("down") or stalled ("hang"). */
const makeServer = () => {
  let lease: Lease | undefined
  let rv = 0
  const writes: Write[] = []
  const apiError = (req: KubeRequest, status: number, reason: string) =>
    new KubeApiError({ cluster: "hub", method: req.method, path: req.path, status, reason, message: reason })
  const store = (l: Lease) => {
    rv += 1
    lease = structuredClone({ ...l, metadata: { ...l.metadata, resourceVersion: String(rv) } })
    return structuredClone(lease)
  }
  const handle = (by: string, req: KubeRequest): Effect.Effect<unknown, KubeApiError> =>
    Effect.gen(function* () {
      const at = yield* Clock.currentTimeMillis
      if (req.path !== (req.method === "POST" ? collectionPath : itemPath))
        return yield* apiError(req, 404, "NotFound")
      if (req.method === "GET") {
        if (!lease) return yield* apiError(req, 404, "NotFound")
        return structuredClone(lease)
      }
      const body = req.body as Lease
      if (req.method === "POST") {
        if (lease) return yield* apiError(req, 409, "AlreadyExists")
        writes.push({ by, at, spec: structuredClone(body.spec ?? {}) })
        return store(body)
      }
      if (!lease) return yield* apiError(req, 404, "NotFound")
      if (body.metadata.resourceVersion !== lease.metadata.resourceVersion) {
        return yield* apiError(req, 409, "Conflict")
      }
      writes.push({ by, at, spec: structuredClone(body.spec ?? {}) })
      return store(body)
    })
  const client = (by: string) => {
    const state = { mode: "ok" as "ok" | "down" | "hang", getDelayMs: 0 }
    const kube: KubeClient = {
      cluster: "hub",
      request: <T>(req: KubeRequest) =>
        (state.mode === "down"
          ? Effect.fail(
              new KubeTransportError({
                cluster: "hub",
                method: req.method,
                path: req.path,
                message: "ECONNREFUSED",
              }),
            )
          : state.mode === "hang"
            ? Effect.never
            : Effect.andThen(
                Effect.sleep(req.method === "GET" ? state.getDelayMs : 0),
                handle(by, req),
              )) as Effect.Effect<T, KubeApiError | KubeTransportError>,
      watch: () => {
        throw new Error("not used")
      },
    }
    return { kube, state }
  }
  return {
    client,
    writes,
    lease: () => lease,
    remove: () => {
      lease = undefined
    },
    /** A writer outside the election (kubectl, another tool). */
    put: (spec: LeaseSpec) =>
      store({
        apiVersion: "coordination.k8s.io/v1",
        kind: "Lease",
        metadata: {
          name,
          namespace: ns,
          ...(lease ? { resourceVersion: lease.metadata.resourceVersion } : {}),
        },
        spec,
      }),
  }
}

interface Mark {
  readonly id: string
  readonly kind: "start" | "stop"
  readonly at: number
}

/** Records when each identity's leader work starts and when its scope's finalizer has run. */
const recordingLeading = (id: string, marks: Mark[], drainMs = 0) =>
  Effect.gen(function* () {
    marks.push({ id, kind: "start", at: yield* Clock.currentTimeMillis })
    yield* Effect.addFinalizer(() =>
      Effect.gen(function* () {
        if (drainMs > 0) yield* Effect.sleep(drainMs)
        marks.push({ id, kind: "stop", at: yield* Clock.currentTimeMillis })
      }),
    )
  })

/** Moves virtual time in small steps so every fiber gets to run at each instant. */
const advance = (ms: number, stepMs = 50) =>
  Effect.gen(function* () {
    for (let t = 0; t < ms; t += stepMs) {
      yield* TestClock.adjust(stepMs)
      for (let i = 0; i < 5; i++) yield* Effect.yieldNow
    }
  })

/**
 * Interrupts electors while moving virtual time, so a release stuck on a hung client times out (its
 * wait is uninterruptible: without time passing a regression would hang the run instead of failing).
 */
const stop = (...fibers: ReadonlyArray<Fiber.Fiber<unknown, unknown>>) =>
  Effect.gen(function* () {
    let done = false
    yield* Effect.forkChild(
      Effect.ensuring(
        Fiber.interruptAll(fibers),
        Effect.sync(() => {
          done = true
        }),
      ),
    )
    for (let i = 0; i < 600 && !done; i++) yield* advance(100)
    assert.isTrue(done, "electors did not stop within 60 s of virtual time")
  })

const elector = (client: KubeClient, identity: string, timings: Partial<Record<string, number>> = {}) =>
  makeLeaderElector({ client, namespace: ns, name, identity, ...defaultTimings, ...timings })

const start = (e: LeaderElector, marks: Mark[], drainMs = 0) =>
  Effect.forkChild(e.run(recordingLeading(e.identity, marks, drainMs)))

const lastWriteBy = (writes: ReadonlyArray<Write>, by: string) => writes.filter((w) => w.by === by).at(-1)

describe("leader election options", () => {
  const client = makeServer().client("x").kube
  const base = { client, namespace: ns, name, identity: "me", ...defaultTimings }

  it.effect("defaults to client-go's 15 s / 10 s / 2 s", () =>
    Effect.gen(function* () {
      const o = yield* resolveLeaderElectionOptions(base)
      assert.deepStrictEqual([o.leaseDurationMs, o.renewDeadlineMs, o.retryPeriodMs], [15_000, 10_000, 2_000])
    }),
  )

  it.effect("requires leaseDuration > renewDeadline > 1.2 × retryPeriod", () =>
    Effect.gen(function* () {
      const bad = [
        { leaseDurationMs: 10_000, renewDeadlineMs: 10_000 },
        { leaseDurationMs: 15_000, renewDeadlineMs: 2_400, retryPeriodMs: 2_000 },
        { retryPeriodMs: 0 },
        { leaseDurationMs: Number.NaN },
        { identity: "" },
        { namespace: "" },
      ]
      for (const b of bad) {
        const e = yield* Effect.flip(resolveLeaderElectionOptions({ ...base, ...b }))
        assert.instanceOf(e, LeaderElectionConfigError)
        assert.match(e.message, /^leader election: /)
      }
      const ok = yield* resolveLeaderElectionOptions({
        ...base,
        leaseDurationMs: 3_000,
        renewDeadlineMs: 2_000,
        retryPeriodMs: 500,
      })
      assert.strictEqual(ok.retryPeriodMs, 500)
      const e = yield* Effect.flip(runLeaderElection({ ...base, renewDeadlineMs: 20_000 }, Effect.void))
      assert.include(e.message, "leaseDuration (15000 ms) must be greater than renewDeadline (20000 ms)")
    }),
  )
})

describe("lease expiry rule (client-go observedTime)", () => {
  const ancient: LeaseSpec = {
    holderIdentity: "other",
    leaseDurationSeconds: 15,
    renewTime: "2000-01-01T00:00:00.000000Z",
  }

  it("a lease whose remote renewTime is ancient is still held for leaseDuration after we first see it", () => {
    const seen = observeLease(undefined, ancient, 1_000)
    assert.isTrue(isHeldByOther(ancient, "me", seen, 1_000, 15_000))
    assert.isTrue(isHeldByOther(ancient, "me", seen, 15_999, 15_000))
    assert.isFalse(isHeldByOther(ancient, "me", seen, 16_000, 15_000))
  })

  it("the clock restarts only when the record changes", () => {
    const first = observeLease(undefined, ancient, 0)
    const same = observeLease(first, { ...ancient }, 10_000)
    assert.strictEqual(same.atMs, 0)
    const renewed = observeLease(same, { ...ancient, renewTime: "2000-01-01T00:00:02.000000Z" }, 12_000)
    assert.strictEqual(renewed.atMs, 12_000)
    assert.isTrue(isHeldByOther(ancient, "me", renewed, 26_000, 15_000))
  })

  it("an empty holder or our own identity is never held by another", () => {
    const seen = observeLease(undefined, ancient, 0)
    assert.isFalse(isHeldByOther({ ...ancient, holderIdentity: "" }, "me", seen, 0, 15_000))
    assert.isFalse(isHeldByOther(ancient, "other", seen, 0, 15_000))
  })

  it("uses the lease's own duration (1 s after a release), or ours when it has none", () => {
    const seen = observeLease(undefined, ancient, 0)
    assert.isFalse(isHeldByOther({ ...ancient, leaseDurationSeconds: 1 }, "me", seen, 1_000, 15_000))
    assert.isTrue(isHeldByOther({ ...ancient, leaseDurationSeconds: null }, "me", seen, 14_999, 15_000))
  })

  it("writes MicroTime with six fractional digits", () => {
    assert.strictEqual(microTime(Date.UTC(2026, 10, 29, 3, 0, 52, 123)), "2026-11-29T03:00:52.123000Z")
  })
})

describe("leader election", () => {
  it.effect("creates the lease, leads, and renews every retryPeriod", () =>
    Effect.gen(function* () {
      const server = makeServer()
      const marks: Mark[] = []
      const a = yield* elector(server.client("a").kube, "a")
      const fiber = yield* start(a, marks)
      yield* advance(100)
      assert.isTrue(a.isLeader())
      assert.strictEqual(server.lease()?.spec?.holderIdentity, "a")
      assert.strictEqual(server.lease()?.spec?.leaseDurationSeconds, 15)
      assert.strictEqual(server.lease()?.spec?.leaseTransitions, 0)
      yield* advance(6_000)
      assert.strictEqual(server.writes.length, 4) // create + renewals at 2, 4 and 6 s
      assert.deepStrictEqual(
        marks.map((m) => m.kind),
        ["start"],
      )
      yield* stop(fiber)
    }),
  )

  it.effect("a standby waits leaseDuration on its own clock, however old the remote renewTime", () =>
    Effect.gen(function* () {
      const server = makeServer()
      server.put({
        holderIdentity: "ghost",
        leaseDurationSeconds: 15,
        renewTime: "2000-01-01T00:00:00.000000Z",
      })
      const marks: Mark[] = []
      const b = yield* elector(server.client("b").kube, "b")
      const fiber = yield* start(b, marks)
      yield* advance(10_000)
      assert.isFalse(b.isLeader())
      assert.strictEqual(b.observedHolder(), "ghost")
      // The ghost renews once: the wait restarts from when b sees the change.
      server.put({
        ...server.lease()?.spec,
        renewTime: "2000-01-01T00:00:10.000000Z",
      })
      yield* advance(14_000)
      assert.isFalse(b.isLeader())
      // Seen within one jittered poll (≤ 4.4 s), held 15 s more, taken at the next poll.
      yield* advance(12_000)
      assert.isTrue(b.isLeader())
      assert.strictEqual(server.lease()?.spec?.holderIdentity, "b")
      assert.strictEqual(server.lease()?.spec?.leaseTransitions, 1)
      const takeover = marks[0]!.at
      assert.isAtLeast(takeover, 10_000 + 15_000)
      yield* stop(fiber)
    }),
  )

  it.effect("a cut-off leader stops before its lease can expire; the standby takes over only after", () =>
    Effect.gen(function* () {
      const server = makeServer()
      const marks: Mark[] = []
      const ca = server.client("a")
      const a = yield* elector(ca.kube, "a")
      const fa = yield* start(a, marks)
      yield* advance(100)
      const b = yield* elector(server.client("b").kube, "b")
      const fb = yield* start(b, marks)
      yield* advance(5_000)
      assert.isTrue(a.isLeader())
      assert.isFalse(b.isLeader())
      ca.state.mode = "hang"
      yield* advance(30_000)
      assert.isFalse(a.isLeader())
      assert.isTrue(b.isLeader())
      const lastRenew = lastWriteBy(server.writes, "a")!.at
      const aStop = marks.find((m) => m.id === "a" && m.kind === "stop")!.at
      const bStart = marks.find((m) => m.id === "b" && m.kind === "start")!.at
      assert.isAtMost(aStop - lastRenew, 10_000 + 100)
      assert.isBelow(aStop - lastRenew, 15_000)
      assert.isBelow(aStop, bStart)
      assert.isAtLeast(bStart - lastRenew, 15_000)
      assert.strictEqual(server.lease()?.spec?.leaseTransitions, 1)
      // The old leader recovers as a standby: it sees b's renewals and does not lead again.
      ca.state.mode = "ok"
      yield* advance(20_000)
      assert.isFalse(a.isLeader())
      assert.isTrue(b.isLeader())
      yield* stop(fa, fb)
    }),
  )

  it.effect("the write fence closes renewDeadline after the last renewal, before the lease can expire", () =>
    Effect.gen(function* () {
      const server = makeServer()
      const marks: Mark[] = []
      const ca = server.client("a")
      const a = yield* elector(ca.kube, "a")
      assert.isFalse(yield* a.mayWrite, "no writes before leading")
      const lost = yield* Effect.forkChild(a.lostLease)
      const fa = yield* start(a, marks)
      yield* advance(3_000)
      assert.isTrue(yield* a.mayWrite)
      // Frozen: time passes, but no renewal goes out (a hung hub API, or SIGSTOP seen from inside).
      ca.state.mode = "hang"
      const lastRenew = lastWriteBy(server.writes, "a")!.at
      let closedAt: number | undefined
      for (let t = 0; t < 20_000 && closedAt === undefined; t += 50) {
        yield* advance(50)
        if (!(yield* a.mayWrite)) closedAt = yield* Clock.currentTimeMillis
      }
      assert.isDefined(closedAt)
      assert.isAtMost(closedAt! - lastRenew, 10_000 + 100)
      assert.isBelow(closedAt! - lastRenew, 15_000, "closed before a standby could take the lease")
      yield* advance(1_000)
      assert.isDefined(lost.pollUnsafe(), "lostLease completed")
      yield* stop(fa)
    }),
  )

  it.effect("a lease lost during a shutdown drain ends the drain's wait (lostLease) at once", () =>
    Effect.gen(function* () {
      const server = makeServer()
      const marks: Mark[] = []
      const ca = server.client("a")
      const a = yield* elector(ca.kube, "a")
      // Leader work that drains for up to 60 s unless the lease goes, as member engines do.
      const work = Effect.gen(function* () {
        marks.push({ id: "a", kind: "start", at: yield* Clock.currentTimeMillis })
        yield* Effect.addFinalizer(() =>
          Effect.sleep(60_000).pipe(
            Effect.raceFirst(a.lostLease),
            Effect.andThen(Clock.currentTimeMillis),
            Effect.map((at) => marks.push({ id: "a", kind: "stop", at })),
          ),
        )
      })
      const fa = yield* Effect.forkChild(a.run(work))
      yield* advance(3_000)
      const interrupted = yield* Effect.forkChild(Fiber.interrupt(fa))
      yield* advance(1_000)
      ca.state.mode = "down"
      const lastRenew = lastWriteBy(server.writes, "a")!.at
      yield* advance(15_000)
      const aStop = marks.find((m) => m.kind === "stop")?.at
      assert.isDefined(aStop, "the drain ended")
      assert.isBelow(aStop! - lastRenew, 10_000 + 1_000)
      assert.isFalse(yield* a.mayWrite)
      yield* Fiber.join(interrupted)
    }),
  )

  it.effect("a standby takes over within leaseDuration plus one poll (1 s) of the last renewal", () =>
    Effect.gen(function* () {
      const server = makeServer()
      const marks: Mark[] = []
      const ca = server.client("a")
      const a = yield* elector(ca.kube, "a")
      const fa = yield* start(a, marks)
      yield* advance(100)
      const b = yield* elector(server.client("b").kube, "b")
      const fb = yield* start(b, marks)
      yield* advance(7_300)
      // The leader dies (its requests hang): its last renewal is its last write.
      ca.state.mode = "hang"
      yield* advance(25_000)
      assert.isTrue(b.isLeader())
      const lastRenew = lastWriteBy(server.writes, "a")!.at
      const bStart = marks.find((m) => m.id === "b" && m.kind === "start")!.at
      assert.isAtLeast(bStart - lastRenew, 15_000)
      assert.isAtMost(bStart - lastRenew, 15_000 + 1_200 + 100)
      yield* stop(fa, fb)
    }),
  )

  it.effect("refused connections (fast failures) also stop the leader at renewDeadline", () =>
    Effect.gen(function* () {
      const server = makeServer()
      const marks: Mark[] = []
      const ca = server.client("a")
      const a = yield* elector(ca.kube, "a", {
        leaseDurationMs: 3_000,
        renewDeadlineMs: 2_000,
        retryPeriodMs: 500,
      })
      const fa = yield* start(a, marks)
      yield* advance(1_200)
      ca.state.mode = "down"
      yield* advance(4_000)
      const lastRenew = lastWriteBy(server.writes, "a")!.at
      const aStop = marks.find((m) => m.kind === "stop")!.at
      assert.isAtMost(aStop - lastRenew, 2_000 + 50)
      assert.isFalse(a.isLeader())
      // Back online: the lease still names a and nobody else wanted it, so a leads again.
      ca.state.mode = "ok"
      yield* advance(2_000)
      assert.isTrue(a.isLeader())
      assert.strictEqual(server.lease()?.spec?.leaseTransitions, 0)
      yield* stop(fa)
    }),
  )

  it.effect("the renew deadline counts from the winning write, not from a slow read before it", () =>
    Effect.gen(function* () {
      const server = makeServer()
      const marks: Mark[] = []
      const ca = server.client("a")
      ca.state.getDelayMs = 8_000
      const a = yield* elector(ca.kube, "a")
      const fa = yield* start(a, marks)
      yield* advance(8_100)
      assert.isTrue(a.isLeader())
      // Renewals of a current copy need no GET, so the slow reads no longer matter.
      yield* advance(12_000)
      assert.isTrue(a.isLeader())
      assert.deepStrictEqual(
        marks.map((m) => m.kind),
        ["start"],
      )
      ca.state.getDelayMs = 0 // the release reads first
      yield* stop(fa)
    }),
  )

  it.effect("a leader whose lease was taken stops at its next renewal", () =>
    Effect.gen(function* () {
      const server = makeServer()
      const marks: Mark[] = []
      const a = yield* elector(server.client("a").kube, "a")
      const fa = yield* start(a, marks)
      yield* advance(1_000)
      server.put({ ...server.lease()?.spec, holderIdentity: "intruder" })
      yield* advance(1_500)
      assert.isFalse(a.isLeader())
      assert.strictEqual(marks.filter((m) => m.kind === "stop").length, 1)
      yield* stop(fa)
    }),
  )

  it.effect("a leader whose Lease was deleted re-creates it and keeps leading", () =>
    Effect.gen(function* () {
      const server = makeServer()
      const marks: Mark[] = []
      const a = yield* elector(server.client("a").kube, "a")
      const fa = yield* start(a, marks)
      yield* advance(1_000)
      server.remove()
      yield* advance(2_500)
      assert.isTrue(a.isLeader())
      assert.strictEqual(server.lease()?.spec?.holderIdentity, "a")
      assert.deepStrictEqual(
        marks.map((m) => m.kind),
        ["start"],
      )
      yield* stop(fa)
    }),
  )

  it.effect("shutdown drains leader work while still renewing, then releases for an immediate takeover", () =>
    Effect.gen(function* () {
      const server = makeServer()
      const marks: Mark[] = []
      const a = yield* elector(server.client("a").kube, "a")
      // a's work takes 20 s to drain: longer than leaseDuration, so only renewals keep b out.
      const fa = yield* Effect.forkChild(a.run(recordingLeading("a", marks, 20_000)))
      yield* advance(100)
      const b = yield* elector(server.client("b").kube, "b")
      const fb = yield* start(b, marks)
      yield* advance(3_000)
      const interrupted = yield* Effect.forkChild(Fiber.interrupt(fa))
      yield* advance(19_000)
      assert.isFalse(b.isLeader())
      assert.strictEqual(server.lease()?.spec?.holderIdentity, "a")
      yield* advance(1_500)
      yield* Fiber.join(interrupted)
      const released = server.writes.find((w) => w.by === "a" && w.spec.holderIdentity === "")
      assert.isDefined(released)
      assert.strictEqual(released?.spec.leaseDurationSeconds, 1)
      yield* advance(5_000)
      assert.isTrue(b.isLeader())
      const aStop = marks.find((m) => m.id === "a" && m.kind === "stop")!.at
      const bStart = marks.find((m) => m.id === "b" && m.kind === "start")!.at
      assert.isAtMost(aStop, released!.at)
      assert.isBelow(bStart - released!.at, 2_000 * 2.2 + 200)
      assert.strictEqual(server.lease()?.spec?.leaseTransitions, 1)
      yield* stop(fb)
    }),
  )

  it.effect("two contenders starting together: exactly one leads", () =>
    Effect.gen(function* () {
      const server = makeServer()
      const marks: Mark[] = []
      const electors = yield* Effect.all(["a", "b", "c"].map((id) => elector(server.client(id).kube, id)))
      const fibers = yield* Effect.all(electors.map((e) => start(e, marks)))
      for (let i = 0; i < 40; i++) {
        yield* advance(500)
        assert.strictEqual(electors.filter((e) => e.isLeader()).length, 1)
      }
      const leader = electors.find((e) => e.isLeader())!
      assert.strictEqual(server.lease()?.spec?.holderIdentity, leader.identity)
      yield* stop(...fibers)
    }),
  )

  it.effect("a defect in leader work stops it, releases the lease and ends run with the defect", () =>
    Effect.gen(function* () {
      const server = makeServer()
      const a = yield* elector(server.client("a").kube, "a")
      const fa = yield* Effect.forkChild(
        a.run(
          Effect.gen(function* () {
            yield* Effect.sleep(1_000)
            return yield* Effect.die(new Error("boom"))
          }) as Effect.Effect<void, never, Scope.Scope>,
        ),
      )
      yield* advance(1_500)
      const exit = yield* Fiber.await(fa)
      assert.isTrue(Exit.isFailure(exit) && Cause.hasDies(exit.cause))
      assert.strictEqual(server.lease()?.spec?.holderIdentity, "")
      assert.isFalse(a.isLeader())
    }),
  )
})
