// One member Lease's term, decided without I/O: what a round of shards.ts does for one member, from what
// it holds, what it last read and its own monotonic clock. A member's Lease names who works it; that
// holder's liveness is proven by its own replica Lease, renewed every retry period (ADR 0011 decision
// 4, amended: renewing every member Lease every retry period cost 1,000 members ÷ 2 s = 500 writes a
// second). The leader election's rules, per member:
//
//   acquire   only the assignee, only once announced, only when the Lease is missing, released (empty
//             holder) or expired on OUR clock: leaseDuration since we last saw either the member Lease
//             or its holder's replica Lease change (the remote renewTime is never compared with our
//             clock); a takeover from a named holder first reads that holder's replica Lease afresh
//   hold      nothing to write: the replica Lease's renewals keep every member it holds
//   lose      no successful renewal of our replica Lease (nor our acquiring write) within renewDeadline:
//             the term ends at once, without a drain; so does a newer write of the Lease by another
//   hand over the assignment moved: the term ends (the work stops); once it has stopped, the Lease is
//             released; a Lease still naming us after a term lost without a takeover is released too
//             once another replica is assigned (our renewals would otherwise keep it from them)
//
// The fence asks the same clock: a write for the member goes out only while the Lease is held and less
// than renewDeadline has passed since the start of the last successful write proving us alive (our
// acquiring write of this Lease, or a renewal of our replica Lease). Nobody takes the member before
// leaseDuration has passed since they saw that write, which is later.
import { heldUntil, type LeaseObservation, type LeaseSpec } from "../leader-election.ts"

export interface TermTimings {
  readonly leaseDurationMs: number
  readonly renewDeadlineMs: number
}

/** What a round knows about one member. */
export interface TermView {
  readonly identity: string
  /** Whom the assignment names now; undefined when the member is gone or no replica is live. */
  readonly assignee: string | undefined
  /** This replica has announced itself, so members may be assigned to it. */
  readonly announced: boolean
  /** This replica's acquiring write of the Lease won and its term has not ended. */
  readonly held: boolean
  /**
   * Monotonic ms at which the last successful write proving us alive was sent: the acquiring write of
   * this Lease or our replica Lease's last renewal, whichever started later.
   */
  readonly aliveSinceMs: number | undefined
  /** The Lease cache shows another replica's write (or a deletion) after ours. */
  readonly taken: boolean
  /** A hand-over has started: the work is stopping, then the Lease is released. */
  readonly releasing: boolean
  /** Terms whose work is still running. */
  readonly working: number
  /** The Lease as last read (undefined: there is none). */
  readonly lease: LeaseSpec | undefined
  readonly exists: boolean
  /** When, on our clock, the Lease's record was last seen to change. */
  readonly observation: LeaseObservation
  /** When, on our clock, the holder's replica Lease was last seen to change (undefined: not seen). */
  readonly holderSeenAliveAtMs: number | undefined
  readonly nowMs: number
}

export type TermStep =
  /** Held, but not proven alive within the renew deadline (or taken): the work stops at once. */
  | { readonly _tag: "Lost"; readonly taken: boolean }
  /** Handing over and the work has stopped: release the Lease (or delete it when the member is gone). */
  | { readonly _tag: "Release"; readonly handOver: boolean }
  /** Held: nothing to write (our replica Lease's renewals keep it). */
  | { readonly _tag: "Keep"; readonly handOver: boolean }
  /**
   * Take it: create it when missing, else update it carrying the resourceVersion read. `confirm` names
   * the holder whose replica Lease must be read afresh first (a takeover from a holder seen expired).
   */
  | {
      readonly _tag: "Acquire"
      readonly create: boolean
      readonly takeover: boolean
      readonly confirm: string | undefined
    }
  /**
   * Not held, yet the Lease still names us (a term lost without a takeover) and another replica is
   * assigned: release it, or our replica Lease's renewals would keep it from the assignee for good.
   */
  | { readonly _tag: "Disown" }
  /** Not ours to take now: another replica is assigned or holds it, or we have not announced. */
  | { readonly _tag: "Wait" }

/** Whether a write for the member may go out now (the member's fence). */
export const fenceOpen = (
  held: boolean,
  aliveSinceMs: number | undefined,
  nowMs: number,
  renewDeadlineMs: number,
): boolean => held && aliveSinceMs !== undefined && nowMs - aliveSinceMs < renewDeadlineMs

/**
 * Until when, on our clock, a held Lease's holder counts as working it: leaseDuration (the Lease's own,
 * else ours) after we last saw the Lease or the holder's replica Lease change. A released Lease (empty
 * holder) is held by nobody.
 */
export const holderAliveUntil = (
  lease: LeaseSpec | undefined,
  observation: LeaseObservation,
  holderSeenAliveAtMs: number | undefined,
  leaseDurationMs: number,
): number => {
  if ((lease?.holderIdentity ?? "") === "") return Number.NEGATIVE_INFINITY
  const seen =
    holderSeenAliveAtMs === undefined
      ? observation
      : { ...observation, atMs: Math.max(observation.atMs, holderSeenAliveAtMs) }
  return heldUntil(lease, seen, leaseDurationMs)
}

/**
 * One round's step for one member. `handOver` says the assignment moved this round: the term ends (its
 * work is told to stop) before the step is carried out.
 */
export const decideTermStep = (v: TermView, t: TermTimings): TermStep => {
  if (v.held) {
    // A round that came too late (a stall, SIGSTOP): the fence has closed already; so has the term.
    if (!fenceOpen(v.held, v.aliveSinceMs, v.nowMs, t.renewDeadlineMs)) return { _tag: "Lost", taken: false }
    if (v.taken) return { _tag: "Lost", taken: true }
    const handOver = v.assignee !== v.identity && !v.releasing
    if ((v.releasing || handOver) && v.working === 0) return { _tag: "Release", handOver }
    return { _tag: "Keep", handOver }
  }
  const holder = v.lease?.holderIdentity ?? ""
  if (v.exists && holder === v.identity && v.assignee !== v.identity) return { _tag: "Disown" }
  if (v.assignee !== v.identity || !v.announced) return { _tag: "Wait" }
  const other = v.exists && holder !== "" && holder !== v.identity
  if (other && holderAliveUntil(v.lease, v.observation, v.holderSeenAliveAtMs, t.leaseDurationMs) > v.nowMs)
    return { _tag: "Wait" }
  return {
    _tag: "Acquire",
    create: !v.exists,
    takeover: holder !== v.identity,
    confirm: other ? holder : undefined,
  }
}
