// What the per-check alert series say about a BackupCheck's spec and recorded runs (CheckFacts), as
// pure functions of the check: every hub replica, and the same hub after a restart, exports the same.
import type { BackupCheck, LastRun } from "../../api/backupcheck.ts"
import { parseDuration, parseSchedule } from "../../api/syntax.ts"
import type { CheckFacts } from "./check-series.ts"

const msOf = (d: string | undefined): number | undefined => {
  if (d === undefined) return undefined
  const ms = parseDuration(d)
  return typeof ms === "number" ? ms : undefined
}

/**
 * Unix ms by which the check's next successful verification is due, counted from its last success
 * (or its creation): spec.maxStaleness when set (the hub's own VerificationStale), or else two
 * schedule slots later plus the start window and timeout (one failed or skipped run is tolerated; the
 * next must succeed). Undefined for a suspended check and for one without schedule or maxStaleness.
 */
export const verificationDeadlineMs = (check: BackupCheck): number | undefined => {
  const spec = check.spec
  if (spec === undefined || spec.suspend === true) return undefined
  const since = Date.parse(check.status?.lastSuccessfulTime ?? check.metadata.creationTimestamp ?? "")
  if (!Number.isFinite(since)) return undefined
  const maxStaleness = msOf(spec.maxStaleness)
  if (maxStaleness !== undefined) return since + maxStaleness
  if (spec.schedule === undefined) return undefined
  const compiled = parseSchedule(spec.schedule, spec.timeZone)
  if (!compiled.success) return undefined
  const first = compiled.cron.nextRun(new Date(since))
  const second = first === null ? null : compiled.cron.nextRun(first)
  if (second === null) return undefined
  return second.getTime() + (msOf(spec.startWindow) ?? 0) + (msOf(spec.timeout) ?? 0)
}

/** Recorded runs whose sandbox cleanup Failed (lastRun first: it is the current state of its run). */
export const sandboxCleanupsFailed = (status: BackupCheck["status"]): number | undefined => {
  const runs = new Map<string, LastRun>()
  for (const run of [status?.lastRun, ...(status?.history ?? [])]) {
    if (run?.sandbox !== undefined && !runs.has(run.runID ?? "")) runs.set(run.runID ?? "", run)
  }
  if (runs.size === 0) return undefined
  let failed = 0
  for (const run of runs.values()) if (run.sandbox?.cleanup === "Failed") failed++
  return failed
}

export const checkFacts = (check: BackupCheck): CheckFacts => {
  const deadline = verificationDeadlineMs(check)
  const restoreTime = msOf(check.spec?.objectives?.maxRestoreDuration)
  const dataAge = msOf(check.spec?.objectives?.maxDataAge)
  return {
    verificationDeadline: deadline === undefined ? undefined : deadline / 1000,
    objectiveSeconds: {
      ...(restoreTime !== undefined ? { restoreTime: restoreTime / 1000 } : {}),
      ...(dataAge !== undefined ? { dataAge: dataAge / 1000 } : {}),
    },
    sandboxCleanupsFailed: sandboxCleanupsFailed(check.status),
  }
}
