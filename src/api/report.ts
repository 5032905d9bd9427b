// Audit evidence (issue 12, ADR 0009): every check's runs in a period, from the run history the checks
// keep (status.history), with pass rate, restore durations and data ages against the objectives, last
// success, staleness and the longest gap without a successful verification (from the check's creation
// when it was created in the period), and whether the history covers the whole period. One zod schema
// for the hub's answer (/api/v1/report) and `fleetcheck report`, and one pure builder, so the numbers
// are tested without a cluster and every reader computes them alike.
import * as z from "zod"
import type { BackupCheck, LastRun } from "./backupcheck.ts"
import { conditionStatuses } from "./condition.ts"
// A run's data age is measured as DataAgeObjectiveMet measures it: one pure function, no cycle
// (objectives.ts reads only src/api's types and syntax).
import { measureRun } from "./run-measures.ts"
import { durationPattern, parseDuration } from "./syntax.ts"

/** What the report is evidence for: the controls that ask for tested backups. */
export const reportControls = [
  { id: "ISO/IEC 27001:2022 A.8.13", title: "Information backup: backups are tested regularly" },
  { id: "SOC 2 A1.2", title: "Recovery infrastructure, including backup restoration, is tested" },
  { id: "NIST SP 800-53 CP-9(2)", title: "System backup: test backup information by restoring it" },
  {
    id: "DORA Art. 12",
    title: "Backup policies, restoration and recovery procedures are tested periodically",
  },
] as const

export const ReportRunSchema = z.object({
  runID: z.string(),
  backupName: z.string().optional(),
  startTime: z.string(),
  completionTime: z.string().optional(),
  result: z.enum(["Succeeded", "Failed"]),
  /** The deciding phase's reason (the validation's when it ran). */
  reason: z.string().optional(),
  restoreSeconds: z.number().optional(),
  /** The newest record in the restored data as the run reported it (the validation's, else the restore's). */
  dataTimestamp: z.string().optional(),
  /**
   * How old the restored data was when the run ended (completionTime minus dataTimestamp), in seconds;
   * absent when the run reported no dataTimestamp.
   */
  dataAgeSeconds: z.number().optional(),
  traceID: z.string().optional(),
})
export type ReportRun = z.output<typeof ReportRunSchema>

export const ReportCheckSchema = z.object({
  cluster: z.string(),
  namespace: z.string(),
  name: z.string(),
  backup: z.string(),
  /** Verified as every view shows it now (Unknown while the cluster is unreachable). */
  verified: z.enum(conditionStatuses),
  /** Finished runs that started in the period, newest first. */
  runs: z.array(ReportRunSchema),
  passed: z.number(),
  failed: z.number(),
  /** passed / runs, or null without runs. */
  passRate: z.number().nullable(),
  restoreSeconds: z.object({ min: z.number(), median: z.number(), max: z.number() }).optional(),
  maxRestoreDuration: z.string().optional(),
  /** Runs whose restore took longer than maxRestoreDuration (succeeded or not, as RestoreTimeObjectiveMet). */
  restoreObjectiveMissed: z.number(),
  maxDataAge: z.string().optional(),
  /**
   * Successful runs whose data was older than maxDataAge when they ended (as DataAgeObjectiveMet: a
   * failed run proves no data age, a run without a dataTimestamp is not measured); 0 without maxDataAge.
   */
  dataAgeObjectiveMissed: z.number(),
  lastSuccessfulTime: z.string().optional(),
  /** Seconds from the last success to the report's end; absent without any success. */
  stalenessSeconds: z.number().optional(),
  /** metadata.creationTimestamp: when the check was created. */
  creationTimestamp: z.string().optional(),
  /**
   * The longest time without a successful verification, in seconds, between the later of the period's
   * start and the check's creation and the period's end (time before the check existed is no gap).
   */
  longestGapSeconds: z.number(),
  /**
   * True when the check's history is full (historyLimit runs) and its oldest run started after the
   * period began: runs of the period may have been dropped.
   */
  historyTruncated: z.boolean(),
  /**
   * True only when the runs above are every run the check had in the whole period: the history is not
   * truncated, and the check existed when the period began (one created later cannot cover the time
   * before it existed). A check without a readable creationTimestamp counts as existing at the start.
   */
  historyComplete: z.boolean(),
})
export type ReportCheck = z.output<typeof ReportCheckSchema>

export const ReportSchema = z.object({
  generatedAt: z.string(),
  since: z.string(),
  until: z.string(),
  controls: z.array(z.object({ id: z.string(), title: z.string() })),
  totals: z.object({
    checks: z.number(),
    runs: z.number(),
    passed: z.number(),
    failed: z.number(),
    passRate: z.number().nullable(),
    restoreObjectiveMissed: z.number(),
    dataAgeObjectiveMissed: z.number(),
    checksWithoutSuccess: z.number(),
  }),
  checks: z.array(ReportCheckSchema),
})
export type Report = z.output<typeof ReportSchema>

/** The longest period a report covers (a year and a day: more than any history keeps). */
export const maxReportPeriodMs = 366 * 86_400_000

/**
 * `--since`: days (`30d`), a Go duration (`72h`), or an RFC 3339 time; the start of the period, or why
 * not. The period is at most a year and a day.
 */
export const parseSince = (
  since: string,
  now: number,
): { readonly start: number } | { readonly error: string } => {
  const days = /^([0-9]{1,3})d$/.exec(since)
  let start: number
  if (days) start = now - Number(days[1]) * 86_400_000
  else if (durationPattern.test(since)) {
    const ms = parseDuration(since)
    if (typeof ms !== "number") return { error: ms.error }
    start = now - ms
  } else if (/^[0-9]{4}-[0-9]{2}-[0-9]{2}T/.test(since) && Number.isFinite(Date.parse(since)))
    start = Date.parse(since)
  else
    return {
      error: `since must be days like 30d, a Go duration like 72h, or an RFC 3339 time; got ${JSON.stringify(since.slice(0, 64))}`,
    }
  if (start > now) return { error: "since must not be in the future" }
  if (now - start > maxReportPeriodMs) return { error: "since reaches back more than 366 days" }
  return { start }
}

export interface ReportInput {
  readonly cluster: string
  readonly check: BackupCheck
  readonly verified: (typeof conditionStatuses)[number]
}

const ms = (t: string | undefined) => (t === undefined ? Number.NaN : Date.parse(t))
const seconds = (a: number, b: number) => Math.max(0, Math.round((b - a) / 1000))

const restoreSecondsOf = (run: LastRun): number | undefined => {
  const restore = run.phases?.find((p) => p.name === "restore")
  const from = ms(restore?.startTime ?? run.startTime)
  const to = ms(restore?.completionTime ?? run.completionTime)
  return Number.isFinite(from) && Number.isFinite(to) ? seconds(from, to) : undefined
}

const median = (sorted: ReadonlyArray<number>) =>
  sorted.length % 2 === 1
    ? sorted[(sorted.length - 1) / 2]!
    : (sorted[sorted.length / 2 - 1]! + sorted[sorted.length / 2]!) / 2

/** One check's evidence for [start, end]. */
export const reportCheck = (input: ReportInput, start: number, end: number): ReportCheck => {
  const { check } = input
  // The cache holds objects as the API server returned them: read what may be missing defensively.
  const history = Array.isArray(check.status?.history) ? check.status.history : []
  const inPeriod = history.filter((r) => {
    const t = ms(r.startTime)
    return r.result !== "Running" && t >= start && t <= end
  })
  const measures = inPeriod.map(measureRun)
  const runs: ReportRun[] = inPeriod.map((r, i) => {
    const deciding = r.phases?.at(-1)
    const restoreSeconds = restoreSecondsOf(r)
    const { dataTimestamp, dataAgeMs } = measures[i]!
    return {
      runID: r.runID,
      ...(r.backupName !== undefined ? { backupName: r.backupName } : {}),
      startTime: r.startTime,
      ...(r.completionTime !== undefined ? { completionTime: r.completionTime } : {}),
      result: r.result === "Succeeded" ? "Succeeded" : "Failed",
      ...(deciding?.reason !== undefined ? { reason: deciding.reason } : {}),
      ...(restoreSeconds !== undefined ? { restoreSeconds } : {}),
      ...(dataTimestamp !== undefined ? { dataTimestamp } : {}),
      ...(dataAgeMs !== undefined ? { dataAgeSeconds: Math.round(dataAgeMs / 1000) } : {}),
      ...(r.traceID !== undefined ? { traceID: r.traceID } : {}),
    }
  })
  const passed = runs.filter((r) => r.result === "Succeeded").length
  const durations = runs
    .filter((r) => r.result === "Succeeded" && r.restoreSeconds !== undefined)
    .map((r) => r.restoreSeconds!)
    .sort((a, b) => a - b)
  const maxRestore = check.spec?.objectives?.maxRestoreDuration
  const maxRestoreMs = maxRestore === undefined ? undefined : parseDuration(maxRestore)
  const restoreObjectiveMissed =
    typeof maxRestoreMs === "number"
      ? // In milliseconds, as RestoreTimeObjectiveMet compares them: 600.4 s misses 10m.
        measures.filter((m) => m.restoreDurationMs !== undefined && m.restoreDurationMs > maxRestoreMs).length
      : 0
  const maxAge = check.spec?.objectives?.maxDataAge
  const maxAgeMs = maxAge === undefined ? undefined : parseDuration(maxAge)
  // Compared in milliseconds, as the condition compares them (the seconds shown are rounded).
  const dataAgeObjectiveMissed =
    typeof maxAgeMs === "number"
      ? inPeriod.filter((r, i) => {
          const age = measures[i]!.dataAgeMs
          return r.result === "Succeeded" && age !== undefined && age > maxAgeMs
        }).length
      : 0
  // The check's lifetime in the period starts at the later of the period's start and its creation.
  const createdAt = ms(check.metadata.creationTimestamp)
  const createdInPeriod = Number.isFinite(createdAt) && createdAt > start
  const from = createdInPeriod ? Math.min(createdAt, end) : start
  // Gaps: between the lifetime's edges and every successful completion inside the period (a completion
  // stamped before the creation, by a skewed clock, counts as at the creation).
  const successes = runs
    .filter((r) => r.result === "Succeeded")
    .map((r) => ms(r.completionTime))
    .filter((t) => Number.isFinite(t) && t >= start && t <= end)
    .map((t) => Math.max(t, from))
    .sort((a, b) => a - b)
  const points = [from, ...successes, end]
  let longestGap = 0
  for (let i = 1; i < points.length; i++)
    longestGap = Math.max(longestGap, seconds(points[i - 1]!, points[i]!))
  const lastSuccess = check.status?.lastSuccessfulTime
  const oldest = history.at(-1)
  const limit = check.spec?.historyLimit ?? 0
  // A full history whose oldest run started after the period began may have dropped runs in it.
  const historyTruncated = history.length >= limit && oldest !== undefined && ms(oldest.startTime) > start
  const created = check.metadata.creationTimestamp
  return {
    cluster: input.cluster,
    namespace: check.metadata.namespace,
    name: check.metadata.name,
    backup: check.spec?.backup?.name ?? "",
    verified: input.verified,
    runs,
    passed,
    failed: runs.length - passed,
    passRate: runs.length === 0 ? null : passed / runs.length,
    ...(durations.length > 0
      ? { restoreSeconds: { min: durations[0]!, median: median(durations), max: durations.at(-1)! } }
      : {}),
    ...(maxRestore !== undefined ? { maxRestoreDuration: maxRestore } : {}),
    restoreObjectiveMissed,
    ...(maxAge !== undefined ? { maxDataAge: maxAge } : {}),
    dataAgeObjectiveMissed,
    ...(lastSuccess !== undefined ? { lastSuccessfulTime: lastSuccess } : {}),
    ...(lastSuccess !== undefined && Number.isFinite(ms(lastSuccess))
      ? { stalenessSeconds: seconds(ms(lastSuccess), end) }
      : {}),
    ...(typeof created === "string" ? { creationTimestamp: created } : {}),
    longestGapSeconds: longestGap,
    historyTruncated,
    historyComplete: !historyTruncated && !createdInPeriod,
  }
}

/** The report over every input, in cluster/namespace/name order. */
export const buildReport = (inputs: ReadonlyArray<ReportInput>, start: number, end: number): Report => {
  const checks = inputs
    .map((i) => reportCheck(i, start, end))
    .sort((a, b) =>
      `${a.cluster}/${a.namespace}/${a.name}` < `${b.cluster}/${b.namespace}/${b.name}` ? -1 : 1,
    )
  const runs = checks.reduce((n, c) => n + c.runs.length, 0)
  const passed = checks.reduce((n, c) => n + c.passed, 0)
  const iso = (t: number) => new Date(t).toISOString().replace(/\.000Z$/, "Z")
  return {
    generatedAt: iso(end),
    since: iso(start),
    until: iso(end),
    controls: reportControls.map((c) => ({ ...c })),
    totals: {
      checks: checks.length,
      runs,
      passed,
      failed: runs - passed,
      passRate: runs === 0 ? null : passed / runs,
      restoreObjectiveMissed: checks.reduce((n, c) => n + c.restoreObjectiveMissed, 0),
      dataAgeObjectiveMissed: checks.reduce((n, c) => n + c.dataAgeObjectiveMissed, 0),
      checksWithoutSuccess: checks.filter((c) => c.passed === 0).length,
    },
    checks,
  }
}
