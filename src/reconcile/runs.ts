// Run bookkeeping: which of a check's restore Jobs are active or finished, which of them the status
// has recorded, and which finished ones the history limits let go. Pure functions of the Jobs in the
// cache and status.lastRun, so the rules (ADR 0004) are unit-tested without a cluster.
//
// status.lastRun is the record. A Job is recorded when it is lastRun's Job and lastRun holds its
// result, or when it belongs to an older run than lastRun (created no later than lastRun started):
// the hub records runs in creation order, so an older run was decided before lastRun began.
import type { LastRun } from "../api/backupcheck.ts"
import { labelPhase, labelRun } from "../api/names.ts"
import type { CachedJob } from "./cached-job.ts"

export type JobPhase = "Active" | "Succeeded" | "Failed"

const hasCondition = (job: CachedJob, type: string) =>
  job.status?.conditions?.some((c) => c.type === type && c.status === "True") ?? false

/** Succeeded or Failed once the Job controller says so (the same conditions jobOutcome reads). */
export const jobPhase = (job: CachedJob): JobPhase =>
  hasCondition(job, "Complete") || hasCondition(job, "SuccessCriteriaMet")
    ? "Succeeded"
    : hasCondition(job, "Failed") || hasCondition(job, "FailureTarget")
      ? "Failed"
      : "Active"

/** The run a Job belongs to (its fleetcheck.io/run label; run ids are short, so never hashed). */
export const runIDOf = (job: CachedJob): string | undefined => job.metadata?.labels?.[labelRun]

/** A run's validation Job (labelled fleetcheck.io/phase=validation); every other owned Job is a restore Job. */
export const isValidationJob = (job: CachedJob): boolean =>
  job.metadata?.labels?.[labelPhase] === "validation"

/** creationTimestamp in ms (1 s resolution; 0 when absent). */
export const createdAt = (job: CachedJob): number =>
  Date.parse(String(job.metadata?.creationTimestamp ?? "")) || 0

const revision = (job: CachedJob) => Number(job.metadata?.resourceVersion ?? 0) || 0

/** Oldest first: creation time, then resourceVersion (etcd's revision) for ties within a second. */
export const oldestFirst = (a: CachedJob, b: CachedJob): number =>
  createdAt(a) - createdAt(b) || revision(a) - revision(b)

/** Whether the status (lastRun) holds this Job's result, or the Job belongs to a run older than lastRun. */
export const isRecorded = (lastRun: LastRun | undefined, job: CachedJob): boolean => {
  if (lastRun === undefined) return false
  if (runIDOf(job) === lastRun.runID) return lastRun.result !== "Running"
  return createdAt(job) <= Date.parse(lastRun.startTime)
}

/**
 * The Jobs of runs newer than lastRun, oldest first: created by a hub whose status write was lost, or
 * by another hub whose write this cache has not seen yet. lastRun's own Job is not among them.
 */
export const newerRuns = (lastRun: LastRun | undefined, jobs: ReadonlyArray<CachedJob>): CachedJob[] =>
  jobs
    .filter(
      (job) =>
        !isValidationJob(job) &&
        runIDOf(job) !== undefined &&
        runIDOf(job) !== lastRun?.runID &&
        !isRecorded(lastRun, job),
    )
    .sort(oldestFirst)

export interface HistoryLimits {
  readonly successfulRunsHistoryLimit: number
  readonly failedRunsHistoryLimit: number
}

/**
 * The finished Jobs to delete: beyond the newest N succeeded and M failed ones, and only among Jobs
 * whose result `recordedLastRun` already holds. Callers pass lastRun as the cache shows it, not as the
 * reconcile is about to write it: with a limit of 0 a Job is deleted only once its verdict is visible
 * in the cached BackupCheck, so a reconcile reading a stale check never finds a Running run without
 * its Job. Active Jobs are never touched; lastRun's Job counts as the newest of its kind. The limits
 * count runs by their restore Jobs; a validation Job goes with its run's restore Job (or once that is
 * gone, as soon as the validation is recorded and finished).
 */
export const jobsToPrune = (
  recordedLastRun: LastRun | undefined,
  jobs: ReadonlyArray<CachedJob>,
  limits: HistoryLimits,
): CachedJob[] => {
  // Most checks keep their last run's Job and no more: no more restore Jobs than the smaller limit
  // and no validation Job leave nothing to prune (this runs on every converged reconcile).
  if (
    jobs.length <= Math.min(limits.successfulRunsHistoryLimit, limits.failedRunsHistoryLimit) &&
    !jobs.some(isValidationJob)
  ) {
    return []
  }
  const current = (job: CachedJob) =>
    recordedLastRun !== undefined && runIDOf(job) === recordedLastRun.runID ? 1 : 0
  const restores = jobs.filter((job) => !isValidationJob(job))
  const newestFirst = [...restores].sort((a, b) => current(b) - current(a) || oldestFirst(b, a))
  const keep = { Succeeded: limits.successfulRunsHistoryLimit, Failed: limits.failedRunsHistoryLimit }
  const seen = { Succeeded: 0, Failed: 0 }
  const prune: CachedJob[] = []
  for (const job of newestFirst) {
    const phase = jobPhase(job)
    if (phase === "Active" || job.metadata?.deletionTimestamp || !isRecorded(recordedLastRun, job)) continue
    seen[phase]++
    if (seen[phase] > keep[phase]) prune.push(job)
  }
  const pruned = new Set(prune.map(runIDOf))
  const withRestore = new Set(restores.filter((j) => !j.metadata?.deletionTimestamp).map(runIDOf))
  for (const job of jobs) {
    if (!isValidationJob(job) || jobPhase(job) === "Active" || job.metadata?.deletionTimestamp) continue
    if (!isRecorded(recordedLastRun, job)) continue
    if (pruned.has(runIDOf(job)) || !withRestore.has(runIDOf(job))) prune.push(job)
  }
  return prune
}
