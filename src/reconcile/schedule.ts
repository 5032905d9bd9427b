import { createHash } from "node:crypto"
import { Cron } from "croner"

// Pure scheduling: which verification run is due, when the next one is, and what its Job is called.
// Everything here is a function of its arguments (no clock, no I/O), so two hubs looking at the same
// object at the same time agree on the run and on the Job name.

// ---------------------------------------------------------------------------------------------------
// Durations

/** Why a duration did not parse. */
export interface DurationError {
  readonly error: string
}

/** Go-style durations as the API accepts them: "0" or integer parts with h, m, s, ms, e.g. 1h30m. */
export const durationPattern = /^(0|([0-9]+(ms|h|m|s))+)$/

const unitMs: Record<string, number> = { h: 3_600_000, m: 60_000, s: 1000, ms: 1 }
// Go's time.Duration is int64 nanoseconds; anything longer is a typo, not a schedule.
const maxDurationMs = 9_223_372_036_854

/**
 * Parses a Go-style duration (h, m, s, ms; integer parts, any order) into milliseconds, or says why
 * not: `typeof parseDuration(s) === "number"` is the success test.
 */
export const parseDuration = (s: string): number | DurationError => {
  if (typeof s !== "string" || !durationPattern.test(s)) {
    return { error: `invalid duration "${String(s)}": use a Go duration like 30m, 1h30m or 45s` }
  }
  let ms = 0
  for (const part of s.matchAll(/([0-9]+)(ms|h|m|s)/g)) {
    ms += Number(part[1]) * unitMs[part[2]!]!
  }
  if (!Number.isSafeInteger(ms) || ms > maxDurationMs) return { error: `invalid duration "${s}": too long` }
  return ms
}

/** Formats milliseconds the way Go prints durations, to whole seconds: 41s, 2m5s, 1h0m0s. */
export const formatDuration = (ms: number): string => {
  const total = Math.max(0, Math.round(ms / 1000))
  const h = Math.floor(total / 3600)
  const m = Math.floor((total % 3600) / 60)
  const s = total % 60
  if (h > 0) return `${h}h${m}m${s}s`
  if (m > 0) return `${m}m${s}s`
  return `${s}s`
}

// ---------------------------------------------------------------------------------------------------
// Cron schedules and time zones

const field = String.raw`(\*|\?|[0-9]{1,2}|[A-Za-z]{3})(-(\*|\?|[0-9]{1,2}|[A-Za-z]{3}))?(/[0-9]{1,2})?`
const fieldList = `${field}(,${field})*`
/**
 * Five cron fields (numbers, ranges, steps, lists, month and day names, ? for *) or one of the
 * standard macros, as Kubernetes CronJob accepts them. croner extensions (L, W, #, seconds, years)
 * are refused so a schedule means the same thing everywhere. RE2-compatible for the CRD.
 */
export const cronPattern = new RegExp(
  `^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|${fieldList}( +${fieldList}){4})$`,
)

/** IANA names only (Area/Location, or a bare name such as UTC); no offsets, no "Local". */
export const timeZonePattern = /^[A-Za-z][A-Za-z0-9_+-]*(\/[A-Za-z0-9_+-]+)*$/

// Intl.DateTimeFormat costs ~0.3 ms, and every reconcile validates its check's spec: remember answers.
const timeZoneCache = new Map<string, string | undefined>()

/** An error message when `tz` is not an IANA time zone this runtime (and Go's tzdata) can load. */
export const checkTimeZone = (tz: string): string | undefined => {
  if (timeZoneCache.has(tz)) return timeZoneCache.get(tz)
  const error = timeZoneError(tz)
  if (timeZoneCache.size >= 1024) timeZoneCache.clear()
  timeZoneCache.set(tz, error)
  return error
}

const timeZoneError = (tz: string): string | undefined => {
  if (!timeZonePattern.test(tz) || tz === "Local") {
    return `invalid time zone "${tz}": use an IANA name like Europe/Berlin or UTC`
  }
  let resolved: string
  try {
    resolved = new Intl.DateTimeFormat("en-US", { timeZone: tz }).resolvedOptions().timeZone
  } catch {
    return `unknown time zone "${tz}": use an IANA name like Europe/Berlin or UTC`
  }
  // Intl ignores case, Go's time.LoadLocation does not: the API server and other tools would differ.
  if (resolved !== tz && resolved.toLowerCase() === tz.toLowerCase()) {
    return `invalid time zone "${tz}": names are case-sensitive, did you mean "${resolved}"?`
  }
  return undefined
}

// Compiled schedules, and for each the slot interval last asked about: croner takes ~0.1 ms per
// lookup, too slow for thousands of converged reconciles a second, while the answer only changes
// when a scheduled time passes. Memoization only; results are the same as without it.
interface CompiledSchedule {
  readonly cron: Cron
  /** Latest scheduled time <= the time asked about, and the first after it (ms; NaN = none). */
  slot: { readonly prev: number; readonly next: number } | undefined
}
const scheduleCache = new Map<string, CompiledSchedule>()
const scheduleCacheLimit = 1024

const newCron = (schedule: string, timeZone: string | undefined): Cron =>
  // Fixed options: 5 fields, Vixie's OR of day-of-month and day-of-week, paused (never schedules a timer).
  new Cron(schedule, { mode: "5-part", timezone: timeZone ?? "UTC", paused: true, domAndDow: false })

type CompileResult =
  | { readonly success: true; readonly compiled: CompiledSchedule }
  | { readonly success: false; readonly error: string }

const compile = (schedule: string, timeZone: string | undefined): CompileResult => {
  const key = `${timeZone ?? ""}\u0000${schedule}`
  const cached = scheduleCache.get(key)
  if (cached !== undefined) return { success: true, compiled: cached }
  if (!cronPattern.test(schedule)) {
    return {
      success: false,
      error: `invalid schedule "${schedule}": use 5 cron fields like "0 3 * * *" or a macro like @daily`,
    }
  }
  if (timeZone !== undefined) {
    const tzError = checkTimeZone(timeZone)
    if (tzError !== undefined) return { success: false, error: tzError }
  }
  let cron: Cron
  try {
    cron = newCron(schedule, timeZone)
  } catch (e) {
    const reason = (e instanceof Error ? e.message : String(e)).replace(/^CronPattern: /, "")
    return { success: false, error: `invalid schedule "${schedule}": ${reason}` }
  }
  // "0 0 30 2 *" parses but never fires; a fixed reference keeps the check pure.
  if (cron.nextRun(new Date(Date.UTC(2000, 0, 1))) === null) {
    return { success: false, error: `invalid schedule "${schedule}": it never runs` }
  }
  if (scheduleCache.size >= scheduleCacheLimit) scheduleCache.clear()
  const compiled: CompiledSchedule = { cron, slot: undefined }
  scheduleCache.set(key, compiled)
  return { success: true, compiled }
}

/** The scheduled times around `at`: the latest at or before it, and the first after it. */
const slotAround = (compiled: CompiledSchedule, at: number): { prev: number; next: number } => {
  const slot = compiled.slot
  if (slot !== undefined && slot.prev <= at && at < slot.next) return slot
  // previousRuns excludes a run exactly at the reference: +1 ms makes it "at or before".
  const prev = compiled.cron.previousRuns(1, new Date(at + 1))[0]?.getTime() ?? Number.NaN
  const next = compiled.cron.nextRun(new Date(at))?.getTime() ?? Number.NaN
  // A NaN end never compares true, so a slot missing an end is recomputed on every call.
  compiled.slot = { prev, next }
  return compiled.slot
}

export type ScheduleResult =
  | { readonly success: true; readonly cron: Cron }
  | { readonly success: false; readonly error: string }

/**
 * Validates and compiles a schedule, in timeZone or UTC when absent (Kubernetes CronJob would use the
 * controller manager's zone; the hub's own zone must not matter, so UTC).
 */
export const parseSchedule = (schedule: string, timeZone?: string): ScheduleResult => {
  const result = compile(schedule, timeZone)
  return result.success ? { success: true, cron: result.compiled.cron } : result
}

// ---------------------------------------------------------------------------------------------------
// Due runs

/** One verification run. Its runID names the Job and labels it (fleetcheck.io/run). */
export interface DueRun {
  readonly runID: string
  /** The scheduled time (epoch ms) the run stands for; absent for per-generation runs. */
  readonly scheduledTime?: number | undefined
}

/** A time as Date or epoch milliseconds. */
export type Instant = Date | number

export interface DueRunInput {
  /** metadata.generation of the BackupCheck. */
  readonly generation: number
  readonly schedule?: string | undefined
  readonly timeZone?: string | undefined
  /** metadata.creationTimestamp: scheduled times at or before it never run. */
  readonly creationTime: Instant
  /** status.lastRun: a different run started at or after a scheduled time covers that time. */
  readonly lastRun?: { readonly runID: string; readonly startTime: Instant | string } | undefined
  readonly now: Instant
}

export interface DueRunResult {
  /** The run that should exist now, or undefined when none is due. */
  readonly run: DueRun | undefined
  /** The first scheduled time after now (epoch ms); undefined without a schedule. */
  readonly nextRunTime: number | undefined
  /** Set (and nothing due) when schedule or timeZone is invalid; parseBackupCheck rejects those first. */
  readonly error?: string | undefined
}

const toMs = (t: Instant | string): number =>
  t instanceof Date ? t.getTime() : typeof t === "number" ? t : Date.parse(t)

export const runIDForGeneration = (generation: number): string => `g${generation}`

/** s + the scheduled time in compact ISO 8601 UTC, lower-cased for names: s20261129t0300z. */
export const runIDForTime = (scheduledTime: Instant): string => {
  const iso = new Date(toMs(scheduledTime)).toISOString() // 2026-11-29T03:00:00.000Z
  const date = `${iso.slice(0, 4)}${iso.slice(5, 7)}${iso.slice(8, 10)}`
  const seconds = iso.slice(17, 19)
  // Five-field cron is minute-aligned; seconds appear only if a caller passes another time.
  return `s${date}t${iso.slice(11, 13)}${iso.slice(14, 16)}${seconds === "00" ? "" : seconds}z`
}

/** The first scheduled time after `now` (epoch ms), or undefined without a valid schedule. */
export const nextRunTime = (input: {
  readonly schedule?: string | undefined
  readonly timeZone?: string | undefined
  readonly now: Instant
}): number | undefined => {
  if (input.schedule === undefined) return undefined
  const compiled = compile(input.schedule, input.timeZone)
  if (!compiled.success) return undefined
  const next = slotAround(compiled.compiled, toMs(input.now)).next
  return Number.isNaN(next) ? undefined : next
}

/**
 * The run that is due now. Stable while nothing changes, so every reconcile (and every hub) names
 * the same run and the same Job.
 *
 * Without a schedule: one run per spec generation, runID g<generation>, always returned; the caller
 * compares it with status.lastRun.runID to tell a new run from the current one.
 *
 * With a schedule: the latest scheduled time T <= now that is after the creation time (missed runs
 * collapse into the latest one), runID s<UTC time of T>. T is covered, and no run is due, when a
 * different last run started at or after T (a run of an earlier generation or schedule), so editing
 * the schedule does not fire an immediate catch-up run; CronJob's lastScheduleTime does the same.
 */
export const dueRun = (input: DueRunInput): DueRunResult => {
  if (input.schedule === undefined) {
    return { run: { runID: runIDForGeneration(input.generation) }, nextRunTime: undefined }
  }
  const compiled = compile(input.schedule, input.timeZone)
  if (!compiled.success) return { run: undefined, nextRunTime: undefined, error: compiled.error }
  const { prev, next } = slotAround(compiled.compiled, toMs(input.now))
  const nextRunTime = Number.isNaN(next) ? undefined : next
  if (Number.isNaN(prev) || prev <= toMs(input.creationTime)) return { run: undefined, nextRunTime }
  const runID = runIDForTime(prev)
  const last = input.lastRun
  if (last !== undefined && last.runID !== runID && toMs(last.startTime) >= prev) {
    return { run: undefined, nextRunTime }
  }
  return { run: { runID, scheduledTime: prev }, nextRunTime }
}

// ---------------------------------------------------------------------------------------------------
// Names

const dns1123Label = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/
const maxLabelLength = 63
const hashLength = 10

const shortHash = (...parts: ReadonlyArray<string>): string =>
  createHash("sha256").update(parts.join("\u0000")).digest("hex").slice(0, hashLength)

const sanitize = (s: string): string =>
  s
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, "-")
    .replace(/^-+|-+$/g, "")

/**
 * The restore Job's name for a run: `<check>-<runID>` when that is a valid DNS-1123 label of at most
 * 63 characters; otherwise the check name is sanitized and truncated and a short hash of the original
 * (check, runID) pair keeps it unique: `<truncated>-<hash>-<runID>`. Deterministic, so two hubs (or one
 * hub with a stale cache) compute the same name and the API server's AlreadyExists dedups the run.
 */
export const jobNameFor = (checkName: string, runID: string): string => {
  const plain = `${checkName}-${runID}`
  if (plain.length <= maxLabelLength && dns1123Label.test(plain) && dns1123Label.test(runID)) return plain
  const hash = shortHash(checkName, runID)
  let suffix = sanitize(runID)
  // A runID is short by construction; a foreign one is cut so the hash and some prefix still fit.
  if (suffix.length > 20) suffix = suffix.slice(0, 20).replace(/-+$/, "")
  const tail = suffix === "" ? hash : `${hash}-${suffix}`
  const room = maxLabelLength - tail.length - 1
  const prefix = sanitize(checkName).slice(0, room).replace(/-+$/, "")
  return prefix === "" ? tail : `${prefix}-${tail}`
}
