// spec.objectives as conditions (ADR 0009): RestoreTimeObjectiveMet compares the restore phase's
// duration with maxRestoreDuration, DataAgeObjectiveMet compares the age of the restored data (the
// newest record a phase reported, at the time the run verified it) with maxDataAge. Pure functions of
// the spec and the last finished run, so a converged check computes the same conditions every time
// and writes nothing; no clock is read (staleness is maxStaleness's job).
import type { LastRun, Phase } from "../api/backupcheck.ts"
import { formatDuration, parseDuration } from "../api/syntax.ts"

export const objectiveConditionTypes = {
  RestoreTimeObjectiveMet: "RestoreTimeObjectiveMet",
  DataAgeObjectiveMet: "DataAgeObjectiveMet",
} as const

export const objectiveReasons = {
  ObjectiveMet: "ObjectiveMet",
  ObjectiveMissed: "ObjectiveMissed",
  /** No finished run yet, or the run did not produce the value (a failed restore, no dataTimestamp). */
  NotMeasured: "NotMeasured",
} as const

export interface Objectives {
  readonly maxRestoreDuration?: string | undefined
  readonly maxDataAge?: string | undefined
}

export interface ObjectiveCondition {
  readonly type: string
  readonly status: "True" | "False" | "Unknown"
  readonly reason: string
  readonly message: string
}

/** What a finished run measured: the restore phase's duration and the restored data's age (ms). */
import { measureRun, type RunMeasures } from "../api/run-measures.ts"

export { measureRun, type RunMeasures }

const phase = (run: LastRun, name: Phase["name"]) => run.phases?.find((p) => p.name === name)

export const lastFinishedRun = (status: {
  readonly lastRun?: LastRun | undefined
  readonly history?: ReadonlyArray<LastRun> | undefined
}): LastRun | undefined =>
  status.lastRun !== undefined && status.lastRun.result !== "Running"
    ? status.lastRun
    : status.history?.find((r) => r.result !== "Running")

const msOf = (d: string | undefined): number | undefined => {
  if (d === undefined) return undefined
  const ms = parseDuration(d)
  return typeof ms === "number" ? ms : undefined
}

/**
 * The objective conditions for the objectives the spec sets (one each; none without objectives).
 * `run` is the last finished run of the current spec, or undefined when there is none.
 */
export const evaluateObjectives = (
  objectives: Objectives | undefined,
  run: LastRun | undefined,
): ObjectiveCondition[] => {
  const out: ObjectiveCondition[] = []
  const maxRestore = msOf(objectives?.maxRestoreDuration)
  const maxAge = msOf(objectives?.maxDataAge)
  // measured only for an objective to compare with: a converged check without objectives parses no times
  const measures =
    run === undefined || (maxRestore === undefined && maxAge === undefined) ? undefined : measureRun(run)
  if (maxRestore !== undefined) {
    const type = objectiveConditionTypes.RestoreTimeObjectiveMet
    const took = measures?.restoreDurationMs
    const restore = run === undefined ? undefined : phase(run, "restore")
    const restoreOk = restore !== undefined ? restore.result === "Succeeded" : run?.result === "Succeeded"
    const goal = `objective ${objectives?.maxRestoreDuration}`
    if (run === undefined || took === undefined) {
      out.push({
        type,
        status: "Unknown",
        reason: objectiveReasons.NotMeasured,
        message: `no finished restore yet (${goal})`,
      })
    } else if (took > maxRestore) {
      // Over the objective whether or not it succeeded: a restore that ran that long missed it.
      out.push({
        type,
        status: "False",
        reason: objectiveReasons.ObjectiveMissed,
        message: `restore ${restoreOk ? "took" : "failed after"} ${formatDuration(took)}, over the ${goal} (run ${run.runID})`,
      })
    } else if (!restoreOk) {
      out.push({
        type,
        status: "Unknown",
        reason: objectiveReasons.NotMeasured,
        message: `restore failed after ${formatDuration(took)}: no restore time to compare with the ${goal} (run ${run.runID})`,
      })
    } else {
      out.push({
        type,
        status: "True",
        reason: objectiveReasons.ObjectiveMet,
        message: `restore took ${formatDuration(took)}, within the ${goal} (run ${run.runID})`,
      })
    }
  }
  if (maxAge !== undefined) {
    const type = objectiveConditionTypes.DataAgeObjectiveMet
    const age = measures?.dataAgeMs
    const goal = `objective ${objectives?.maxDataAge}`
    if (run === undefined) {
      out.push({
        type,
        status: "Unknown",
        reason: objectiveReasons.NotMeasured,
        message: `no finished run yet (${goal})`,
      })
    } else if (run.result !== "Succeeded" || age === undefined) {
      out.push({
        type,
        status: "Unknown",
        reason: objectiveReasons.NotMeasured,
        message:
          run.result !== "Succeeded"
            ? `run ${run.runID} failed: the age of its data is not proven (${goal})`
            : `run ${run.runID} reported no dataTimestamp (structured termination message) to measure against the ${goal}`,
      })
    } else {
      const met = age <= maxAge
      out.push({
        type,
        status: met ? "True" : "False",
        reason: met ? objectiveReasons.ObjectiveMet : objectiveReasons.ObjectiveMissed,
        message: `restored data was ${formatDuration(age)} old (newest record ${measures?.dataTimestamp}), ${met ? "within" : "over"} the ${goal} (run ${run.runID})`,
      })
    }
  }
  return out
}
