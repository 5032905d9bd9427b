// status.history: the finished runs of a check, newest first, bounded by spec.historyLimit (ADR 0009).
// Pure, so the bounding rules are unit-tested without a cluster; the reconciler adds every verdict it
// records (RunSuperseded and RestoreJobMissing included) and trims on every write.
import type { BackupCheckStatus, LastRun } from "../api/backupcheck.ts"

/**
 * The history with `run` in front: a run already in it (the same runID, recorded again by a hub that
 * missed the first write) is replaced, not repeated. At most `limit` runs.
 */
export const withRun = (
  history: ReadonlyArray<LastRun> | undefined,
  run: LastRun,
  limit: number,
): LastRun[] => [run, ...(history ?? []).filter((h) => h.runID !== run.runID)].slice(0, Math.max(0, limit))

/**
 * The status with its history cut to `limit` runs (the field goes away at 0 or when empty), so a
 * lowered historyLimit takes effect without waiting for a run. The same object when nothing changes.
 */
export const boundHistory = (status: BackupCheckStatus, limit: number): BackupCheckStatus => {
  const history = status.history
  if (history === undefined) return status
  if (history.length > 0 && history.length <= limit) return status
  const { history: _dropped, ...rest } = status
  return limit <= 0 || history.length === 0 ? rest : { ...rest, history: history.slice(0, limit) }
}
