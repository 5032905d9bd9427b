// One member Lease's term, decided without I/O: what a round of shards.ts does for one member, from what
// it holds, what it last read and its own monotonic clock. The leader election's rules, per member:
//
//   acquire   only the assignee, only once announced, only when the Lease is missing, released (empty
//             holder) or expired on OUR clock (leaseDuration since we saw its record change; the remote
//             renewTime is never compared with our clock)
//   renew     every retryPeriod (a round woken early does not renew what was renewed just now)
//   lose      no successful renewal within renewDeadline: the term ends at once, without a drain; a
//             renewal answered Conflict or NotFound that finds another holder (or none) ends it too
//   hand over the assignment moved: the term ends (the work stops) and renewals go on until the work
//             has stopped; then the Lease is released
//
// The fence asks the same clock: a write for the member goes out only while the Lease is held and less
// than renewDeadline has passed since the start of the last successful renewal.
import { isHeldByOther, type LeaseObservation, type LeaseSpec } from "../leader-election.ts"

export interface TermTimings {
  readonly leaseDurationMs: number
  readonly renewDeadlineMs: number
  readonly retryPeriodMs: number
}

/** What a round knows about one member. */
export interface TermView {
  readonly identity: string
  /** Whom the assignment names now; undefined when the member is gone or no replica is live. */
  readonly assignee: string | undefined
  /** This replica has announced itself, so members may be assigned to it. */
  readonly announced: boolean
  /** This replica's last write of the Lease won and its term has not ended. */
  readonly held: boolean
  /** Monotonic ms at which the last successful write of this term was sent. */
  readonly lastRenewStartMs: number | undefined
  /** A hand-over has started: the work is stopping, then the Lease is released. */
  readonly releasing: boolean
  /** Terms whose work is still running. */
  readonly working: number
  /** The Lease as last read (undefined: there is none). */
  readonly lease: LeaseSpec | undefined
  readonly exists: boolean
  /** When, on our clock, the Lease's record was last seen to change. */
  readonly observation: LeaseObservation
  readonly nowMs: number
}

export type TermStep =
  /** Held, but not renewed within the renew deadline: the fence has closed; the work stops at once. */
  | { readonly _tag: "Lost" }
  /** Handing over and the work has stopped: release the Lease (or delete it when the member is gone). */
  | { readonly _tag: "Release"; readonly handOver: boolean }
  /** Renew it (while handing over too, so the Lease stays held while the work stops). */
  | { readonly _tag: "Renew"; readonly handOver: boolean }
  /** Renewed within the last half retry period: nothing to write this round. */
  | { readonly _tag: "Keep"; readonly handOver: boolean }
  /** Take it: create it when missing, else update it carrying the resourceVersion read. */
  | { readonly _tag: "Acquire"; readonly create: boolean; readonly takeover: boolean }
  /** Not ours to take now: another replica is assigned or holds it, or we have not announced. */
  | { readonly _tag: "Wait" }

/** Whether a write for the member may go out now (the member's fence). */
export const fenceOpen = (
  held: boolean,
  lastRenewStartMs: number | undefined,
  nowMs: number,
  renewDeadlineMs: number,
): boolean => held && lastRenewStartMs !== undefined && nowMs - lastRenewStartMs < renewDeadlineMs

/**
 * One round's step for one member. `handOver` says the assignment moved this round: the term ends (its
 * work is told to stop) before the step is carried out.
 */
export const decideTermStep = (v: TermView, t: TermTimings): TermStep => {
  if (v.held) {
    // A round that came too late (a stall, SIGSTOP): the fence has closed already; so has the term.
    if (!fenceOpen(v.held, v.lastRenewStartMs, v.nowMs, t.renewDeadlineMs)) return { _tag: "Lost" }
    const handOver = v.assignee !== v.identity && !v.releasing
    if ((v.releasing || handOver) && v.working === 0) return { _tag: "Release", handOver }
    if (v.nowMs - v.lastRenewStartMs! < t.retryPeriodMs / 2) return { _tag: "Keep", handOver }
    return { _tag: "Renew", handOver }
  }
  if (v.assignee !== v.identity || !v.announced) return { _tag: "Wait" }
  if (v.exists && isHeldByOther(v.lease, v.identity, v.observation, v.nowMs, t.leaseDurationMs))
    return { _tag: "Wait" }
  return {
    _tag: "Acquire",
    create: !v.exists,
    takeover: (v.lease?.holderIdentity ?? "") !== v.identity,
  }
}

/**
 * A renewal refused as stale (Conflict) or with the Lease gone (NotFound) reads it again: still ours
 * (an earlier write of ours landed after we gave up on it), renew from the fresh copy; else it is taken.
 */
export const afterStaleRenewal = (fresh: LeaseSpec | undefined, identity: string): "Renew" | "Taken" =>
  fresh?.holderIdentity === identity ? "Renew" : "Taken"
