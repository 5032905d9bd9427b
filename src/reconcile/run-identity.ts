// Who a verification run is: its run id, its Job's name, its label values and its trace context. Each
// is a pure function of the check and the run (ADR 0004), so every hub, every retry and every restart
// derives the same names, and the API server's AlreadyExists dedups a run that two hubs start at once.
import { createHash } from "node:crypto"

/** A time as Date or epoch milliseconds. */
export type Instant = Date | number

const toMs = (t: Instant | string): number =>
  t instanceof Date ? t.getTime() : typeof t === "number" ? t : Date.parse(t)

// ---------------------------------------------------------------------------------------------------
// Run ids

/** The run of a spec generation (no schedule, or a scheduled check proving a new spec): g<generation>. */
export const runIDForGeneration = (generation: number): string => `g${generation}`

/** s + the scheduled time in compact ISO 8601 UTC, lower-cased for names: s20261129t0300z. */
export const runIDForTime = (scheduledTime: Instant): string => {
  const iso = new Date(toMs(scheduledTime)).toISOString() // 2026-11-29T03:00:00.000Z
  const date = `${iso.slice(0, 4)}${iso.slice(5, 7)}${iso.slice(8, 10)}`
  const seconds = iso.slice(17, 19)
  // Five-field cron is minute-aligned; seconds appear only if a caller passes another time.
  return `s${date}t${iso.slice(11, 13)}${iso.slice(14, 16)}${seconds === "00" ? "" : seconds}z`
}

// ---------------------------------------------------------------------------------------------------
// Names and label values

const dns1123Label = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/
const maxLabelLength = 63
const hashLength = 10

/** The first 10 hex digits of sha256 over the parts (NUL-separated): keeps shortened names apart. */
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

/** The validation Job's name for a run: the restore Job's scheme, for the run id + "-validate". */
export const validationJobNameFor = (checkName: string, runID: string): string =>
  jobNameFor(checkName, `${runID}-validate`)

/**
 * Label values are at most 63 characters; longer check names are shortened with a stable hash. The
 * Job's controller ownerReference (by uid) stays the exact link back to its check.
 */
export const labelValueFor = (value: string): string => {
  if (value.length <= maxLabelLength) return value
  return `${value.slice(0, 52).replace(/[-_.]+$/, "")}-${shortHash(value)}`
}

// ---------------------------------------------------------------------------------------------------
// What a run verifies

/** JSON with object keys sorted, so equal values hash equally whatever order their keys came in. */
const canonicalJSON = (value: unknown): string => {
  if (Array.isArray(value)) return `[${value.map(canonicalJSON).join(",")}]`
  if (value !== null && typeof value === "object") {
    const entries = Object.entries(value)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${canonicalJSON(v)}`).join(",")}}`
  }
  return JSON.stringify(value) ?? "null"
}

/**
 * The restore spec a run verifies: spec.backup, spec.jobTemplate or spec.restore and spec.recoveryPoint,
 * spec.timeout and spec.validation
 * (16 hex digits of sha256 over their canonical JSON; an absent validation hashes as before it existed). Scheduling fields (schedule, timeZone, suspend, maxStaleness,
 * history limits, concurrencyPolicy) are left out: editing them does not change what a verdict says.
 * Takes the parsed spec, so a default the API server filled in and the same default left implicit
 * hash alike.
 */
export const specHashFor = (spec: {
  readonly backup: unknown
  readonly jobTemplate?: unknown
  readonly restore?: unknown
  readonly recoveryPoint?: unknown
  readonly timeout: string
  readonly validation?: unknown
}): string =>
  createHash("sha256")
    .update(
      canonicalJSON({
        backup: spec.backup,
        jobTemplate: spec.jobTemplate,
        restore: spec.restore,
        recoveryPoint: spec.recoveryPoint,
        timeout: spec.timeout,
        validation: spec.validation,
      }),
    )
    .digest("hex")
    .slice(0, 16)

// ---------------------------------------------------------------------------------------------------
// Trace context

/** W3C trace context for a run: derived from the check's uid and the run id, so it is the same on every hub. */
export const traceparentFor = (uid: string, runID: string): { traceparent: string; traceID: string } => {
  const digest = createHash("sha256").update(`${uid}/${runID}`).digest("hex")
  const traceID = digest.slice(0, 32)
  const spanID = digest.slice(32, 48)
  return { traceID, traceparent: `00-${traceID}-${spanID}-01` }
}
