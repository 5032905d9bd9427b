// Reads what a finished restore Job says: success or failure, a stable reason, and a bounded message
// taken from the restore container's termination message. Pure, so every mapping is unit-tested.
import type { V1Pod } from "@kubernetes/client-node"
import { parseTerminationMessage } from "../api/termination-message.ts"
import type { CachedJob } from "./cached-job.ts"

/** Exit code a restore tool uses to say "restored, but the checksum did not match" (README, ADR 0004). */
export const checksumMismatchExitCode = 3

/** Termination messages become condition messages; bound them so one noisy tool cannot bloat status. */
export const maxMessageBytes = 1024

export type JobOutcome =
  | { readonly phase: "Running" }
  | {
      readonly phase: "Succeeded" | "Failed"
      readonly reason: string
      readonly message: string
      readonly completionTime: string | undefined
      /** From a structured termination message: the newest record in the restored data. */
      readonly dataTimestamp?: string | undefined
      /** From a structured termination message: counts the tool reported. */
      readonly counts?: Readonly<Record<string, number>> | undefined
      /** From a structured termination message: the backup the tool chose to restore. */
      readonly recoveryPoint?: { readonly id: string; readonly time: string } | undefined
    }

export const boundMessage = (message: string, maxBytes = maxMessageBytes): string => {
  // Control characters (except newline and tab) make status unreadable in terminals and UIs.
  const clean = message.replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, "").trim()
  const bytes = Buffer.from(clean, "utf8")
  if (bytes.length <= maxBytes) return clean
  // Cut on a character boundary, then mark the cut.
  let cut = bytes.subarray(0, maxBytes - 3).toString("utf8")
  if (cut.endsWith("\uFFFD")) cut = cut.slice(0, -1)
  return `${cut}...`
}

const jobCondition = (job: CachedJob, type: string) =>
  job.status?.conditions?.find((c) => c.type === type && c.status === "True")

/** The most recent terminated container state among the Job's pods (the restore container's verdict). */
const lastTermination = (pods: ReadonlyArray<V1Pod>) => {
  const terms: Array<{
    exitCode: number
    reason?: string | undefined
    message?: string | undefined
    finishedAt: number
  }> = []
  for (const pod of pods) {
    for (const status of [
      ...(pod.status?.containerStatuses ?? []),
      ...(pod.status?.initContainerStatuses ?? []),
    ]) {
      const t = status.state?.terminated
      if (!t) continue
      terms.push({
        exitCode: t.exitCode,
        reason: t.reason,
        message: t.message,
        finishedAt: t.finishedAt ? new Date(t.finishedAt).getTime() : 0,
      })
    }
  }
  // A failed container explains a failed Job better than a sibling that exited 0; then the latest wins.
  terms.sort((a, b) => Number(b.exitCode !== 0) - Number(a.exitCode !== 0) || b.finishedAt - a.finishedAt)
  return terms[0]
}

const waitingImageProblem = (pods: ReadonlyArray<V1Pod>) => {
  for (const pod of pods) {
    for (const status of pod.status?.containerStatuses ?? []) {
      const reason = status.state?.waiting?.reason
      if (reason === "ErrImagePull" || reason === "ImagePullBackOff" || reason === "InvalidImageName") {
        return `${reason}: ${status.state?.waiting?.message ?? status.image}`
      }
    }
  }
  return undefined
}

export interface OutcomeContext {
  readonly backupName: string
  readonly startedAt: string | undefined
  /**
   * Which phase the Job ran (default restore). A validation Job's verdict is ValidationSucceeded,
   * ValidationTimedOut (deadline) or ValidationFailed (any other failure, exit code 3 included).
   */
  readonly phase?: "restore" | "validation" | undefined
}

const validationReasons: Readonly<Record<string, string>> = {
  RestoreSucceeded: "ValidationSucceeded",
  RestoreTimedOut: "ValidationTimedOut",
}

export const jobOutcome = (job: CachedJob, pods: ReadonlyArray<V1Pod>, ctx: OutcomeContext): JobOutcome => {
  const outcome = restoreOutcome(job, pods, ctx)
  if (ctx.phase !== "validation" || outcome.phase === "Running") return outcome
  return { ...outcome, reason: validationReasons[outcome.reason] ?? "ValidationFailed" }
}

const restoreOutcome = (job: CachedJob, pods: ReadonlyArray<V1Pod>, ctx: OutcomeContext): JobOutcome => {
  const noun = ctx.phase === "validation" ? "validation" : "restore"
  const complete = jobCondition(job, "Complete") ?? jobCondition(job, "SuccessCriteriaMet")
  const failed = jobCondition(job, "Failed") ?? jobCondition(job, "FailureTarget")
  if (!complete && !failed) return { phase: "Running" }
  const lastTerm = lastTermination(pods)
  // A structured termination message (JSON: message, dataTimestamp, counts) gives its message here and
  // its facts to the run; any other text is the message as it is.
  const report = parseTerminationMessage(lastTerm?.message)
  const term = lastTerm && { ...lastTerm, message: report.message }
  const facts = {
    ...(report.dataTimestamp !== undefined ? { dataTimestamp: report.dataTimestamp } : {}),
    ...(report.counts !== undefined ? { counts: report.counts } : {}),
    ...(report.recoveryPoint !== undefined ? { recoveryPoint: report.recoveryPoint } : {}),
  }
  const completionTime =
    job.status?.completionTime?.toString() ??
    (complete ?? failed)?.lastTransitionTime?.toString() ??
    undefined
  if (complete) {
    const seconds =
      ctx.startedAt && completionTime
        ? Math.max(
            0,
            Math.round((new Date(completionTime).getTime() - new Date(ctx.startedAt).getTime()) / 1000),
          )
        : undefined
    const took = seconds === undefined ? "" : ` in ${seconds}s`
    const fallback =
      noun === "validation"
        ? `${ctx.backupName} validated${took}`
        : `${ctx.backupName} restored and verified${took}`
    return {
      phase: "Succeeded",
      reason: "RestoreSucceeded",
      message: boundMessage(term?.message || fallback),
      completionTime,
      ...facts,
    }
  }
  const jobReason = failed?.reason ?? ""
  const detail = term?.message || failed?.message || ""
  const withDetail = (summary: string) => boundMessage(detail ? `${summary}: ${detail}` : summary)
  if (jobReason === "DeadlineExceeded") {
    const image = waitingImageProblem(pods)
    return {
      phase: "Failed",
      reason: "RestoreTimedOut",
      message: boundMessage(
        `${noun} of ${ctx.backupName} did not finish within the timeout${image ? ` (${image})` : ""}${detail ? `: ${detail}` : ""}`,
      ),
      completionTime,
      ...facts,
    }
  }
  if (term?.reason === "OOMKilled") {
    return {
      phase: "Failed",
      reason: "RestoreOOMKilled",
      message: withDetail(`${noun} of ${ctx.backupName} ran out of memory (OOMKilled)`),
      completionTime,
      ...facts,
    }
  }
  if (term?.exitCode === checksumMismatchExitCode && noun === "restore") {
    return {
      phase: "Failed",
      reason: "ChecksumMismatch",
      message: boundMessage(detail || `${ctx.backupName} restored but its checksum did not match`),
      completionTime,
      ...facts,
    }
  }
  if (report.reason !== undefined && noun === "restore") {
    // The restore agent (or a custom tool) named why: RepositoryAuthFailed says more than exit code 1.
    return {
      phase: "Failed",
      reason: report.reason,
      message: withDetail(`${noun} of ${ctx.backupName} failed`),
      completionTime,
      ...facts,
    }
  }
  const exit = term ? ` (exit code ${term.exitCode})` : ""
  return {
    phase: "Failed",
    reason: "RestoreFailed",
    message: withDetail(`${noun} of ${ctx.backupName} failed${exit}`),
    completionTime,
    ...facts,
  }
}
