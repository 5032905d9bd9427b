// The grammar of the BackupCheck API's strings: Go durations, five-field cron schedules and IANA time
// zones. Pure and synchronous, so the schemas (src/api/backupcheck.ts), the CRD generator and the
// reconciler all read a field the same way; the patterns are RE2-compatible, because the API server
// evaluates them with Go's regexp.
import { Cron } from "croner"

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

// A converged reconcile reads the same few durations (timeout, maxStaleness, validationWindow) every
// time: parsed ones are remembered, a bounded set (cleared when full) since specs are input.
const parsedDurations = new Map<string, number>()
const maxParsedDurations = 1024

/**
 * Parses a Go-style duration (h, m, s, ms; integer parts, any order) into milliseconds, or says why
 * not: `typeof parseDuration(s) === "number"` is the success test.
 */
export const parseDuration = (s: string): number | DurationError => {
  const known = parsedDurations.get(s)
  if (known !== undefined) return known
  const parsed = parseDurationOnce(s)
  if (typeof parsed === "number") {
    if (parsedDurations.size >= maxParsedDurations) parsedDurations.clear()
    parsedDurations.set(s, parsed)
  }
  return parsed
}

const parseDurationOnce = (s: string): number | DurationError => {
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
// Time zones

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

// ---------------------------------------------------------------------------------------------------
// Cron schedules

const field = String.raw`(\*|\?|[0-9]{1,2}|[A-Za-z]{3})(-(\*|\?|[0-9]{1,2}|[A-Za-z]{3}))?(/[0-9]{1,2})?`
const fieldList = `${field}(,${field})*`
/**
 * Five cron fields (numbers, ranges, steps, lists, month and day names, ? for *) or one of the
 * standard macros, as Kubernetes CronJob accepts them. croner extensions (L, W, #, seconds, years)
 * are refused so a schedule means the same thing everywhere.
 */
export const cronPattern = new RegExp(
  `^(@(yearly|annually|monthly|weekly|daily|midnight|hourly)|${fieldList}( +${fieldList}){4})$`,
)

export type ScheduleResult =
  | { readonly success: true; readonly cron: Cron }
  | { readonly success: false; readonly error: string }

// Compiled schedules by (time zone, schedule): croner parses in ~0.1 ms, and every reconcile both
// validates its check's spec and asks for the due run. The same Cron object comes back for the same
// key, so callers may memoize per Cron (src/reconcile/schedule.ts does). Bounded; results are the
// same as without it.
const scheduleCache = new Map<string, ScheduleResult>()
const scheduleCacheLimit = 1024

const newCron = (schedule: string, timeZone: string | undefined): Cron =>
  // Fixed options: 5 fields, Vixie's OR of day-of-month and day-of-week, paused (never schedules a timer).
  new Cron(schedule, { mode: "5-part", timezone: timeZone ?? "UTC", paused: true, domAndDow: false })

const compile = (schedule: string, timeZone: string | undefined): ScheduleResult => {
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
  return { success: true, cron }
}

/**
 * Validates and compiles a schedule, in timeZone or UTC when absent (Kubernetes CronJob would use the
 * controller manager's zone; the hub's own zone must not matter, so UTC).
 */
export const parseSchedule = (schedule: string, timeZone?: string): ScheduleResult => {
  const key = `${timeZone ?? ""}\u0000${schedule}`
  const cached = scheduleCache.get(key)
  if (cached !== undefined) return cached
  const result = compile(schedule, timeZone)
  if (scheduleCache.size >= scheduleCacheLimit) scheduleCache.clear()
  scheduleCache.set(key, result)
  return result
}

// The shortest interval of each compiled schedule (parseSchedule returns one Cron per schedule, so the
// WeakMap is bounded by its cache).
const shortestIntervals = new WeakMap<Cron, number>()
/** How many consecutive slots shortestIntervalMs looks at; croner takes ~0.07 ms per slot. */
const intervalSamples = 128
const intervalReference = new Date(Date.UTC(2000, 0, 1))

/**
 * The shortest time between two consecutive slots of a compiled schedule (ms; Infinity when it fires
 * at most once), over its first 128 slots after 2000-01-01 UTC: a pure function, so every hub and every
 * reconcile agrees. A schedule's shortest gap repeats within a day (minute and hour fields) or within
 * its day pattern, which 128 slots cover for every schedule whose gaps matter to a restore timeout.
 */
export const shortestIntervalMs = (cron: Cron): number => {
  const cached = shortestIntervals.get(cron)
  if (cached !== undefined) return cached
  const runs = cron.nextRuns(intervalSamples, intervalReference)
  let shortest = Number.POSITIVE_INFINITY
  for (let i = 1; i < runs.length; i++) {
    shortest = Math.min(shortest, runs[i]!.getTime() - runs[i - 1]!.getTime())
  }
  shortestIntervals.set(cron, shortest)
  return shortest
}

// ---------------------------------------------------------------------------------------------------
// CIDRs (spec.sandbox.egress): the CRD says the same with CEL's isCIDR().

const ipv4CidrPattern =
  /^(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\.(0|[1-9][0-9]{0,2})\/(0|[1-9][0-9]?)$/

/** The longest CIDR text accepted (a full IPv6 address with a prefix). */
export const maxCidrLength = 43

/**
 * Whether a string is an IPv4 CIDR a.b.c.d/n (octets ≤ 255 without leading zeros, n ≤ 32) or an IPv6
 * CIDR x::y/n (n ≤ 128; the address parsed by the URL parser, zones and IPv4-embedded forms refused).
 */
export const isCidr = (s: string): boolean => {
  if (typeof s !== "string" || s.length > maxCidrLength) return false
  const v4 = ipv4CidrPattern.exec(s)
  if (v4) return v4.slice(1, 5).every((o) => Number(o) <= 255) && Number(v4[5]) <= 32
  const slash = s.lastIndexOf("/")
  const address = s.slice(0, slash)
  if (slash < 0 || !address.includes(":") || !/^[0-9a-fA-F:]+$/.test(address)) return false
  const prefix = s.slice(slash + 1)
  if (!/^(0|[1-9][0-9]{0,2})$/.test(prefix) || Number(prefix) > 128) return false
  try {
    return new URL(`http://[${address}]/`).hostname.length > 2
  } catch {
    return false
  }
}
