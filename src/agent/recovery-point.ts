// Which backup a run restores (spec.recoveryPoint, AWS Backup's restore testing model): the newest,
// or one at random within a window so that old points get proven too. "Random" is seeded by the run
// id: a retried pod of the same run restores the same point, and a new run may pick another.
import { createHash } from "node:crypto"
import type { RecoveryPointSpec } from "../api/restore.ts"
import { parseDuration } from "../api/syntax.ts"
import { AgentFailure } from "./protocol.ts"

export interface Candidate {
  readonly id: string
  /** RFC 3339 */
  readonly time: string
}

export const chooseRecoveryPoint = <C extends Candidate>(
  candidates: ReadonlyArray<C>,
  spec: RecoveryPointSpec,
  runID: string,
  now: Date,
  what: string,
): C => {
  const dated = candidates
    .filter((c) => Number.isFinite(Date.parse(c.time)))
    .sort((a, b) => Date.parse(a.time) - Date.parse(b.time) || (a.id < b.id ? -1 : 1))
  if (dated.length === 0) throw new AgentFailure("RecoveryPointNotFound", `no ${what} found`)
  if (spec.policy === "Latest") return dated[dated.length - 1] as C
  const window = spec.window === undefined ? undefined : parseDuration(spec.window)
  const inWindow =
    typeof window === "number" ? dated.filter((c) => Date.parse(c.time) >= now.getTime() - window) : dated
  if (inWindow.length === 0)
    throw new AgentFailure(
      "RecoveryPointNotFound",
      `no ${what} within the last ${spec.window} (${dated.length} older; newest ${dated[dated.length - 1]?.time})`,
    )
  const seed = createHash("sha256").update(runID).digest().readUIntBE(0, 6)
  return inWindow[seed % inWindow.length] as C
}
