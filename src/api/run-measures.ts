// What a finished run measured (restore duration, data age): one definition for the objectives
// conditions (src/reconcile/objectives.ts) and the report (report.ts), so both count alike.
import type { LastRun, Phase } from "./backupcheck.ts"

export interface RunMeasures {
  readonly restoreDurationMs: number | undefined
  readonly dataAgeMs: number | undefined
  /** The newest record's time the age is measured from (the validation's report wins). */
  readonly dataTimestamp: string | undefined
}

const span = (from: string | undefined, to: string | undefined): number | undefined => {
  if (from === undefined || to === undefined) return undefined
  const ms = Date.parse(to) - Date.parse(from)
  return Number.isFinite(ms) ? Math.max(0, ms) : undefined
}

const phase = (run: LastRun, name: Phase["name"]) => run.phases?.find((p) => p.name === name)

/**
 * A finished run's measures. Restore duration: the restore phase's start to completion (a run recorded
 * before phases existed: the run's). Data age: the run's completion minus the newest reported
 * dataTimestamp (validation's, else restore's), so it says how old the data was when it was proven.
 */
export const measureRun = (run: LastRun): RunMeasures => {
  const restore = phase(run, "restore")
  const restoreDurationMs =
    restore !== undefined
      ? span(restore.startTime, restore.completionTime)
      : span(run.startTime, run.completionTime)
  const dataTimestamp = phase(run, "validation")?.dataTimestamp ?? restore?.dataTimestamp
  return { restoreDurationMs, dataAgeMs: span(dataTimestamp, run.completionTime), dataTimestamp }
}

/** The last finished run: lastRun once it has finished, else the newest run in history. */
