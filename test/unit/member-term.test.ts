// A member Lease's term (sharding, ADR 0011) as pure decisions: acquire only when missing, released or
// expired on the reader's clock (by the Lease's and its holder's replica Lease's last seen change, never
// by a remote renewTime), keep it while our replica Lease's renewals prove us alive, lose it at the
// renew deadline or when another's write shows in the cache, hand over when the assignment moves
// (release once the work stopped), and the fence that closes with the renew deadline.
import { assert, describe, it } from "@effect/vitest"
import { defaultHubConfig } from "../../src/hub/config.ts"
import { type LeaseSpec, observeLease } from "../../src/hub/leader-election.ts"
import { decideTermStep, fenceOpen, holderAliveUntil, type TermView } from "../../src/hub/sharding/term.ts"

/** The hub's configured defaults (src/hub/config.ts), the only place they are written. */
const timings = {
  leaseDurationMs: defaultHubConfig.leaseDurationMs,
  renewDeadlineMs: defaultHubConfig.renewDeadlineMs,
}
const me = "hub-a_1"
const other = "hub-b_2"
const now = 1_000_000
const spec = (holder: string, renewTime = "2026-12-01T08:00:00.000000Z"): LeaseSpec => ({
  holderIdentity: holder,
  leaseDurationSeconds: timings.leaseDurationMs / 1000,
  renewTime,
  acquireTime: renewTime,
  leaseTransitions: 0,
})

/** A round's view: assigned to us and announced, not held, the Lease missing; `seenAt` its last change. */
const view = (v: Partial<TermView> & { seenAt?: number } = {}): TermView => {
  const { seenAt = now, ...rest } = v
  return {
    identity: me,
    assignee: me,
    announced: true,
    held: false,
    aliveSinceMs: undefined,
    taken: false,
    releasing: false,
    working: 0,
    lease: undefined,
    exists: false,
    observation: observeLease(undefined, v.lease, seenAt),
    holderSeenAliveAtMs: undefined,
    nowMs: now,
    ...rest,
  }
}
const step = (v: Partial<TermView> & { seenAt?: number }) => decideTermStep(view(v), timings)
const expired = now - timings.leaseDurationMs - 1

describe("acquiring a member Lease", () => {
  it("the assignee creates a missing Lease, once it has announced itself", () => {
    assert.deepStrictEqual(step({}), { _tag: "Acquire", create: true, takeover: true, confirm: undefined })
    assert.deepStrictEqual(step({ announced: false }), { _tag: "Wait" })
  })

  it("only the assignee: another replica's member is left alone even when free", () => {
    assert.deepStrictEqual(step({ assignee: other }), { _tag: "Wait" })
    assert.deepStrictEqual(step({ assignee: undefined, exists: true, lease: spec("") }), { _tag: "Wait" })
  })

  it("a released Lease (empty holder) is taken at once, with nobody to confirm", () => {
    assert.deepStrictEqual(step({ exists: true, lease: spec("") }), {
      _tag: "Acquire",
      create: false,
      takeover: true,
      confirm: undefined,
    })
  })

  it("another holder's Lease only once it expired on our clock, whatever its renewTime says", () => {
    const held = { exists: true, lease: spec(other, "2020-01-01T00:00:00.000000Z") }
    // Seen changing just now: held, though its remote renewTime is years old.
    assert.deepStrictEqual(step({ ...held, seenAt: now }), { _tag: "Wait" })
    assert.deepStrictEqual(step({ ...held, seenAt: now - timings.leaseDurationMs + 1 }), { _tag: "Wait" })
    // Expired: taken over, after reading the holder's replica Lease afresh.
    assert.deepStrictEqual(step({ ...held, seenAt: expired }), {
      _tag: "Acquire",
      create: false,
      takeover: true,
      confirm: other,
    })
    // A renewTime in the future changes nothing either: only our clock counts.
    const future = { exists: true, lease: spec(other, "2099-01-01T00:00:00.000000Z") }
    assert.strictEqual(step({ ...future, seenAt: expired })._tag, "Acquire")
  })

  it("a holder whose replica Lease we saw change lately still holds it, however old its member Lease", () => {
    const held = { exists: true, lease: spec(other), seenAt: now - 10 * timings.leaseDurationMs }
    assert.deepStrictEqual(step({ ...held, holderSeenAliveAtMs: now - 1_000 }), { _tag: "Wait" })
    assert.deepStrictEqual(step({ ...held, holderSeenAliveAtMs: expired })._tag, "Acquire")
    // Never seen: the member Lease's own last change decides.
    assert.deepStrictEqual(step({ ...held, holderSeenAliveAtMs: undefined })._tag, "Acquire")
  })

  it("a Lease still naming us from an earlier term is taken back without a transition or a check", () => {
    assert.deepStrictEqual(step({ exists: true, lease: spec(me) }), {
      _tag: "Acquire",
      create: false,
      takeover: false,
      confirm: undefined,
    })
  })
})

describe("a Lease naming us that we no longer hold", () => {
  it("is released once another replica is assigned (our renewals would keep it from them), else retaken", () => {
    assert.deepStrictEqual(step({ exists: true, lease: spec(me), assignee: other }), { _tag: "Disown" })
    assert.deepStrictEqual(step({ exists: true, lease: spec(me), assignee: undefined }), { _tag: "Disown" })
    assert.strictEqual(step({ exists: true, lease: spec(me) })._tag, "Acquire")
    assert.deepStrictEqual(step({ exists: true, lease: spec(other), assignee: other }), { _tag: "Wait" })
  })
})

describe("holding a member Lease", () => {
  const held = (aliveFor: number, v: Partial<TermView> = {}) =>
    step({ held: true, aliveSinceMs: now - aliveFor, exists: true, lease: spec(me), ...v })

  it("writes nothing while our replica Lease's renewals prove us alive", () => {
    assert.deepStrictEqual(held(0), { _tag: "Keep", handOver: false })
    assert.deepStrictEqual(held(timings.renewDeadlineMs - 1), { _tag: "Keep", handOver: false })
  })

  it("is lost once not proven alive within the renew deadline, even while handing over", () => {
    assert.deepStrictEqual(held(timings.renewDeadlineMs), { _tag: "Lost", taken: false })
    assert.deepStrictEqual(held(timings.renewDeadlineMs + 60_000), { _tag: "Lost", taken: false })
    assert.deepStrictEqual(held(timings.renewDeadlineMs, { releasing: true, assignee: other }), {
      _tag: "Lost",
      taken: false,
    })
    assert.deepStrictEqual(step({ held: true, aliveSinceMs: undefined }), { _tag: "Lost", taken: false })
  })

  it("is lost when the cache shows another's write after ours", () => {
    assert.deepStrictEqual(held(0, { taken: true }), { _tag: "Lost", taken: true })
  })

  it("hands over when the assignment moves: the term ends, and once the work stopped, release", () => {
    // The round that sees the move ends the term; the work is still running: nothing written yet.
    assert.deepStrictEqual(held(0, { assignee: other, working: 1 }), { _tag: "Keep", handOver: true })
    // Later rounds while the work stops: no second hand-over.
    assert.deepStrictEqual(held(0, { assignee: other, working: 1, releasing: true }), {
      _tag: "Keep",
      handOver: false,
    })
    // Stopped: release.
    assert.deepStrictEqual(held(0, { assignee: other, working: 0, releasing: true }), {
      _tag: "Release",
      handOver: false,
    })
    // A term whose work never started is released in the round that sees the move.
    assert.deepStrictEqual(held(0, { assignee: other, working: 0 }), { _tag: "Release", handOver: true })
    // The member is gone (no assignee): handed over the same way, then its Lease is deleted.
    assert.deepStrictEqual(held(0, { assignee: undefined, working: 0 }), { _tag: "Release", handOver: true })
  })
})

describe("who holds a member Lease, as every replica's views read it", () => {
  it("nobody when released; the holder until a lease duration after the later of the two last changes", () => {
    const obs = observeLease(undefined, spec(other), now - 20_000)
    assert.strictEqual(
      holderAliveUntil(spec(""), obs, now, timings.leaseDurationMs),
      Number.NEGATIVE_INFINITY,
    )
    assert.strictEqual(
      holderAliveUntil(spec(other), obs, undefined, timings.leaseDurationMs),
      now - 20_000 + 15_000,
    )
    assert.strictEqual(
      holderAliveUntil(spec(other), obs, now - 1_000, timings.leaseDurationMs),
      now - 1_000 + 15_000,
    )
  })
})

describe("the member fence", () => {
  it("is open only while held and less than the renew deadline after the last proof of life", () => {
    const d = timings.renewDeadlineMs
    assert.isTrue(fenceOpen(true, now - d + 1, now, d))
    assert.isFalse(fenceOpen(true, now - d, now, d))
    assert.isFalse(fenceOpen(false, now, now, d))
    assert.isFalse(fenceOpen(true, undefined, now, d))
  })

  it("closes before another replica could take the Lease: renewDeadline < leaseDuration", () => {
    // The fence closes renewDeadline after our last proof was sent; nobody can see the member expire
    // before leaseDuration after they saw that write, which is later.
    assert.isBelow(timings.renewDeadlineMs, timings.leaseDurationMs)
    const sentAt = now
    const takeableFrom = holderAliveUntil(
      spec(me),
      observeLease(undefined, spec(me), sentAt),
      sentAt,
      timings.leaseDurationMs,
    )
    assert.isFalse(fenceOpen(true, sentAt, takeableFrom - 1, timings.renewDeadlineMs))
  })
})
