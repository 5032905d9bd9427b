// Which live replica works a member: rendezvous (highest-random-weight) hashing. Every replica computes
// it alone from the same two inputs (the member's name, the live replicas' identities), so replicas that
// see the same replicas agree without talking. When a replica joins, only the members it now scores
// highest move to it (about 1/N of them); when one leaves, only its own members move, spread over the
// others. Replicas that briefly disagree on who is live cannot both work a member: the member's Lease
// decides (shards.ts).
import { createHash } from "node:crypto"

/** The member's score on a replica: the first 8 bytes of sha256(member NUL replica), as a bigint. */
export const rendezvousScore = (member: string, replica: string): bigint =>
  createHash("sha256").update(member).update("\0").update(replica).digest().readBigUInt64BE(0)

/** The replica with the highest score (ties, which sha256 makes vanishingly rare, by identity). */
export const assigneeOf = (member: string, replicas: ReadonlyArray<string>): string | undefined => {
  let best: string | undefined
  let bestScore = -1n
  for (const r of replicas) {
    const score = rendezvousScore(member, r)
    if (score > bestScore || (score === bestScore && best !== undefined && r < best)) {
      best = r
      bestScore = score
    }
  }
  return best
}

/** Every member's assignee; members with no live replica are left out. */
export const assignAll = (
  members: Iterable<string>,
  replicas: ReadonlyArray<string>,
): Map<string, string> => {
  const out = new Map<string, string>()
  for (const m of members) {
    const r = assigneeOf(m, replicas)
    if (r !== undefined) out.set(m, r)
  }
  return out
}
