// Which scheduled verification run is due, and when the next one is. Everything here is a function of
// its arguments (no clock, no I/O), so two hubs looking at the same object at the same time agree on
// the run. The schedule grammar is src/api/syntax.ts; run ids and Job names are run-identity.ts.
import { createHash } from "node:crypto"
import type { Cron } from "croner"
import type { ConcurrencyPolicy } from "../api/backupcheck.ts"
import { parseSchedule } from "../api/syntax.ts"
import { type Instant, runIDForGeneration, runIDForTime } from "./run-identity.ts"

// For each compiled schedule, the slot interval last asked about: croner takes ~0.1 ms per lookup,
// too slow for thousands of converged reconciles a second, while the answer only changes when a
// scheduled time passes. parseSchedule returns the same Cron for the same schedule, so a WeakMap keyed
// by it is both the cache and its bound. Memoization only; results are the same as without it.
interface Slot {
  /** Latest scheduled time <= the time asked about, and the first after it (ms; NaN = none). */
  readonly prev: number
  readonly next: number
  /** The scheduled time before prev, looked up once when a start window asks for it. */
  before?: number
}
const slots = new WeakMap<Cron, Slot>()

/** The scheduled times around `at`: the latest at or before it, and the first after it. */
const slotAround = (cron: Cron, at: number): Slot => {
  const slot = slots.get(cron)
  if (slot !== undefined && slot.prev <= at && at < slot.next) return slot
  // previousRuns excludes a run exactly at the reference: +1 ms makes it "at or before".
  const prev = cron.previousRuns(1, new Date(at + 1))[0]?.getTime() ?? Number.NaN
  const next = cron.nextRun(new Date(at))?.getTime() ?? Number.NaN
  // A NaN end never compares true, so a slot missing an end is recomputed on every call.
  const fresh = { prev, next }
  slots.set(cron, fresh)
  return fresh
}

/** The scheduled time before `slot` (whose window has not opened yet), memoized on the slot. */
const slotBefore = (cron: Cron, slot: Slot): number => {
  if (slot.before === undefined) {
    slot.before = Number.isNaN(slot.prev)
      ? Number.NaN
      : (cron.previousRuns(1, new Date(slot.prev))[0]?.getTime() ?? Number.NaN)
  }
  return slot.before
}

/**
 * Where in its start window a scheduled slot starts (spec.startWindow): a whole number of seconds in
 * [0, window), from sha256 over the check's key (its uid) and the slot's time. Deterministic, so every
 * hub and every restart agree on the start; spread evenly over the window, so a fleet whose checks
 * share a schedule does not restore all at once; different from slot to slot, so no check is always
 * the last. A window under a second has no offset.
 */
export const startOffsetMs = (checkKey: string, scheduledTime: number, windowMs: number): number => {
  const seconds = Math.floor(windowMs / 1000)
  if (seconds <= 0) return 0
  const digest = createHash("sha256").update(`${checkKey}\u0000${scheduledTime}`).digest()
  // 48 bits scaled to the window: uniform to within 2^-48 for any window a schedule allows.
  return Math.floor((digest.readUIntBE(0, 6) / 2 ** 48) * seconds) * 1000
}

/** One verification run. Its runID names the Job and labels it (fleetcheck.io/run). */
export interface DueRun {
  readonly runID: string
  /** The scheduled time (epoch ms) the run stands for; absent for per-generation runs. */
  readonly scheduledTime?: number | undefined
}

export interface DueRunInput {
  /** metadata.generation of the BackupCheck. */
  readonly generation: number
  readonly schedule?: string | undefined
  readonly timeZone?: string | undefined
  /** metadata.creationTimestamp: scheduled times at or before it never run. */
  readonly creationTime: Instant
  /**
   * status.lastRun: a different run started at or after a scheduled time covers that time; with Forbid,
   * one that was still running at a scheduled time (Running, or completed after it) skips that time.
   */
  readonly lastRun?:
    | {
        readonly runID: string
        readonly startTime: Instant | string
        readonly completionTime?: Instant | string | undefined
        readonly result?: string | undefined
      }
    | undefined
  /** spec.concurrencyPolicy; default Forbid. */
  readonly concurrencyPolicy?: ConcurrencyPolicy | undefined
  /** spec.startWindow in ms: each slot starts at startOffsetMs(checkKey, slot, window) after it. */
  readonly startWindowMs?: number | undefined
  /** What the start offset derives from (the check's uid); required with a start window. */
  readonly checkKey?: string | undefined
  readonly now: Instant
}

export interface DueRunResult {
  /** The run that should exist now, or undefined when none is due. */
  readonly run: DueRun | undefined
  /** The first scheduled start after now (epoch ms; slot plus offset); undefined without a schedule. */
  readonly nextRunTime: number | undefined
  /** Set (and nothing due) when schedule or timeZone is invalid; parseBackupCheck rejects those first. */
  readonly error?: string | undefined
  /** Forbid: the latest scheduled time, skipped because lastRun was still running when it came. */
  readonly skipped?: DueRun | undefined
}

const toMs = (t: Instant | string): number =>
  t instanceof Date ? t.getTime() : typeof t === "number" ? t : Date.parse(t)

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
 * With concurrencyPolicy Forbid, T is skipped (returned as `skipped`, nothing due) when a different
 * last run that started before T was still running at T: Running now, or completed after T. The
 * skipped time never runs late; the next one does. With Replace, T is due and the caller supersedes
 * the run still active.
 *
 * With a start window, slot T starts at T + startOffsetMs(checkKey, T, window) and is due only from
 * then on: until its start, the slot before T is the latest one (the window is shorter than the
 * schedule's interval, so that one has started). Coverage still compares with T itself; whether the
 * last run was still active is asked at T's start.
 */
export const dueRun = (input: DueRunInput): DueRunResult => {
  if (input.schedule === undefined) {
    return { run: { runID: runIDForGeneration(input.generation) }, nextRunTime: undefined }
  }
  const compiled = parseSchedule(input.schedule, input.timeZone)
  if (!compiled.success) return { run: undefined, nextRunTime: undefined, error: compiled.error }
  const now = toMs(input.now)
  const window = input.startWindowMs ?? 0
  const key = input.checkKey ?? ""
  const offset = (slot: number) => (window > 0 ? startOffsetMs(key, slot, window) : 0)
  const around = slotAround(compiled.cron, now)
  let prev = around.prev
  let nextStart = Number.isNaN(around.next) ? Number.NaN : around.next + offset(around.next)
  if (window > 0 && !Number.isNaN(prev) && prev + offset(prev) > now) {
    // prev's window has not reached its start: prev is the next start (unless it was at or before the
    // check's creation, so it never runs), and the slot before it is due.
    if (prev > toMs(input.creationTime)) nextStart = prev + offset(prev)
    prev = slotBefore(compiled.cron, around)
  }
  const nextRunTime = Number.isNaN(nextStart) ? undefined : nextStart
  if (Number.isNaN(prev) || prev <= toMs(input.creationTime)) return { run: undefined, nextRunTime }
  const runID = runIDForTime(prev)
  const last = input.lastRun
  if (last !== undefined && last.runID !== runID) {
    if (toMs(last.startTime) >= prev) return { run: undefined, nextRunTime }
    const start = prev + offset(prev)
    const activeAtStart =
      last.result === "Running" || (last.completionTime !== undefined && toMs(last.completionTime) > start)
    if ((input.concurrencyPolicy ?? "Forbid") === "Forbid" && activeAtStart) {
      return { run: undefined, nextRunTime, skipped: { runID, scheduledTime: prev } }
    }
  }
  return { run: { runID, scheduledTime: prev }, nextRunTime }
}
