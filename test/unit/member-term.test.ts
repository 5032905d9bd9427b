// A member Lease's term (sharding, ADR 0011) as pure decisions: acquire only when missing, released or
// expired on the reader's clock (never by the remote renewTime), renew, lose on the renew deadline or
// when the Lease is found taken, hand over when the assignment moves (renewing until the work stopped,
// then releasing), and the fence that closes with the renew deadline.
import { assert, describe, it } from "@effect/vitest"
import { defaultHubConfig } from "../../src/hub/config.ts"
import { type LeaseSpec, observeLease } from "../../src/hub/leader-election.ts"
import { afterStaleRenewal, decideTermStep, fenceOpen, type TermView } from "../../src/hub/sharding/term.ts"

/** The hub's configured defaults (src/hub/config.ts), the only place they are written. */
const timings = {
  leaseDurationMs: defaultHubConfig.leaseDurationMs,
  renewDeadlineMs: defaultHubConfig.renewDeadlineMs,
  retryPeriodMs: defaultHubConfig.retryPeriodMs,
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
    lastRenewStartMs: undefined,
    releasing: false,
    working: 0,
    lease: undefined,
    exists: false,
    observation: observeLease(undefined, v.lease, seenAt),
    nowMs: now,
    ...rest,
  }
}
const step = (v: Partial<TermView> & { seenAt?: number }) => decideTermStep(view(v), timings)

describe("acquiring a member Lease", () => {
  it("the assignee creates a missing Lease, once it has announced itself", () => {
    assert.deepStrictEqual(step({}), { _tag: "Acquire", create: true, takeover: true })
    assert.deepStrictEqual(step({ announced: false }), { _tag: "Wait" })
  })

  it("only the assignee: another replica's member is left alone even when free", () => {
    assert.deepStrictEqual(step({ assignee: other }), { _tag: "Wait" })
    assert.deepStrictEqual(step({ assignee: undefined, exists: true, lease: spec("") }), { _tag: "Wait" })
  })

  it("a released Lease (empty holder) is taken at once", () => {
    assert.deepStrictEqual(step({ exists: true, lease: spec("") }), {
      _tag: "Acquire",
      create: false,
      takeover: true,
    })
  })

  it("another holder's Lease only once it expired on our clock, whatever its renewTime says", () => {
    const held = { exists: true, lease: spec(other, "2020-01-01T00:00:00.000000Z") }
    // Seen changing just now: held, though its remote renewTime is years old.
    assert.deepStrictEqual(step({ ...held, seenAt: now }), { _tag: "Wait" })
    assert.deepStrictEqual(step({ ...held, seenAt: now - timings.leaseDurationMs + 1 }), { _tag: "Wait" })
    assert.deepStrictEqual(step({ ...held, seenAt: now - timings.leaseDurationMs - 1 }), {
      _tag: "Acquire",
      create: false,
      takeover: true,
    })
    // A renewTime in the future changes nothing either: only our clock counts.
    const future = { exists: true, lease: spec(other, "2099-01-01T00:00:00.000000Z") }
    assert.deepStrictEqual(step({ ...future, seenAt: now - timings.leaseDurationMs - 1 })._tag, "Acquire")
  })

  it("a Lease still naming us from an earlier term is taken back without a transition", () => {
    assert.deepStrictEqual(step({ exists: true, lease: spec(me) }), {
      _tag: "Acquire",
      create: false,
      takeover: false,
    })
  })
})

describe("holding a member Lease", () => {
  const held = (since: number, v: Partial<TermView> = {}) =>
    step({ held: true, lastRenewStartMs: now - since, exists: true, lease: spec(me), ...v })

  it("renews every retry period; a round woken early does not renew what was renewed just now", () => {
    assert.deepStrictEqual(held(timings.retryPeriodMs), { _tag: "Renew", handOver: false })
    assert.deepStrictEqual(held(timings.retryPeriodMs / 2), { _tag: "Renew", handOver: false })
    assert.deepStrictEqual(held(timings.retryPeriodMs / 2 - 1), { _tag: "Keep", handOver: false })
  })

  it("is lost once no renewal succeeded within the renew deadline, even while handing over", () => {
    assert.deepStrictEqual(held(timings.renewDeadlineMs - 1)._tag, "Renew")
    assert.deepStrictEqual(held(timings.renewDeadlineMs), { _tag: "Lost" })
    assert.deepStrictEqual(held(timings.renewDeadlineMs + 60_000), { _tag: "Lost" })
    assert.deepStrictEqual(held(timings.renewDeadlineMs, { releasing: true, assignee: other }), {
      _tag: "Lost",
    })
    assert.deepStrictEqual(step({ held: true, lastRenewStartMs: undefined }), { _tag: "Lost" })
  })

  it("hands over when the assignment moves: the term ends, renewals go on until the work stopped, then release", () => {
    // The round that sees the move ends the term; the work is still running, so the Lease is renewed.
    assert.deepStrictEqual(held(timings.retryPeriodMs, { assignee: other, working: 1 }), {
      _tag: "Renew",
      handOver: true,
    })
    // Later rounds while the work stops: renew, no second hand-over.
    assert.deepStrictEqual(held(timings.retryPeriodMs, { assignee: other, working: 1, releasing: true }), {
      _tag: "Renew",
      handOver: false,
    })
    // Stopped: release.
    assert.deepStrictEqual(held(1, { assignee: other, working: 0, releasing: true }), {
      _tag: "Release",
      handOver: false,
    })
    // A term whose work never started is released in the round that sees the move.
    assert.deepStrictEqual(held(1, { assignee: other, working: 0 }), { _tag: "Release", handOver: true })
    // The member is gone (no assignee): handed over the same way, then its Lease is deleted.
    assert.deepStrictEqual(held(1, { assignee: undefined, working: 0 }), { _tag: "Release", handOver: true })
  })

  it("a stale renewal that finds another holder, or no Lease, has lost it; one that finds us renews", () => {
    assert.strictEqual(afterStaleRenewal(spec(me), me), "Renew")
    assert.strictEqual(afterStaleRenewal(spec(other), me), "Taken")
    assert.strictEqual(afterStaleRenewal(spec(""), me), "Taken")
    assert.strictEqual(afterStaleRenewal(undefined, me), "Taken")
  })
})

describe("the member fence", () => {
  it("is open only while held and less than the renew deadline after the last successful renewal", () => {
    const d = timings.renewDeadlineMs
    assert.isTrue(fenceOpen(true, now - d + 1, now, d))
    assert.isFalse(fenceOpen(true, now - d, now, d))
    assert.isFalse(fenceOpen(false, now, now, d))
    assert.isFalse(fenceOpen(true, undefined, now, d))
  })

  it("closes before another replica could take the Lease: renewDeadline < leaseDuration", () => {
    // The fence closes renewDeadline after our last renewal was sent; nobody can see it expire before
    // leaseDuration after it reached the server, which is later.
    assert.isBelow(timings.renewDeadlineMs, timings.leaseDurationMs)
    const sentAt = now
    const takeableFrom = sentAt + timings.leaseDurationMs
    assert.isFalse(fenceOpen(true, sentAt, takeableFrom - 1, timings.renewDeadlineMs))
  })
})
