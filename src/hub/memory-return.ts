// Gives memory back after a burst. A wave of restores parses thousands of watch events and responses
// at once; afterwards V8 keeps the heap pages their garbage occupied mapped and resident, outside its
// own heap statistics, and its memory reducer does not release them: only a memory-reducing ("last
// resort") collection does (docs/performance.md, "Memory"). So the hub's RSS stayed near its
// peak with a fifth of it live. This loop watches what the process holds beyond V8's resident heap;
// once that grew by the threshold, the RSS stopped growing and no reconcile runs (the burst is over), it
// runs that collection: one pause of the main thread, several milliseconds per MiB of live heap on a busy
// machine (seconds at 100,000 cached checks), at most once per interval. Off unless a threshold is set.
import * as v8 from "node:v8"
import { runInNewContext } from "node:vm"
import { Effect } from "effect"

export interface MemoryReturnPolicy {
  /** Growth of the memory held beyond V8's resident heap, over its lowest level since the last return. */
  readonly thresholdBytes: number
  /** Growth of the RSS between two samples under which the burst counts as over. */
  readonly settleBytes: number
  /** Least time between two returns. */
  readonly minIntervalMs: number
}

export interface MemorySample {
  readonly at: number
  readonly rssBytes: number
  /** V8's heap pages it counts as resident (total_physical_size). */
  readonly heapResidentBytes: number
  /** Whether the hub is working (a reconcile holds a permit of the hub-wide limit). */
  readonly busy: boolean
}

export interface MemoryReturnState {
  /** The lowest held-beyond-the-heap figure since the last return (or the start). */
  readonly floor: number | undefined
  /** The previous sample's RSS, and whether the hub was working then. */
  readonly previousRss: number | undefined
  readonly previousBusy: boolean
  readonly lastReturnAt: number | undefined
}

export const initialMemoryReturnState: MemoryReturnState = {
  floor: undefined,
  previousRss: undefined,
  previousBusy: true,
  lastReturnAt: undefined,
}

const heldBeyondHeap = (s: MemorySample) => s.rssBytes - s.heapResidentBytes

/** Whether to return memory now, and the state after this sample. */
export const decideMemoryReturn = (
  policy: MemoryReturnPolicy,
  state: MemoryReturnState,
  sample: MemorySample,
): { readonly run: boolean; readonly state: MemoryReturnState } => {
  const held = heldBeyondHeap(sample)
  const floor = Math.min(state.floor ?? held, held)
  const grown = held - floor >= policy.thresholdBytes
  // Over: the RSS stopped growing and no reconcile ran at this sample or the one before (a wave's RSS
  // can stand still for a sample while its reconciles go on).
  const settled =
    state.previousRss !== undefined &&
    sample.rssBytes - state.previousRss < policy.settleBytes &&
    !sample.busy &&
    !state.previousBusy
  const spaced = state.lastReturnAt === undefined || sample.at - state.lastReturnAt >= policy.minIntervalMs
  return {
    run: grown && settled && spaced,
    state: { ...state, floor, previousRss: sample.rssBytes, previousBusy: sample.busy },
  }
}

/**
 * The state after a return, from a sample taken right after it: growth is measured from there, so
 * memory the collection could not give back (native buffers, malloc's) does not trigger it again.
 */
export const afterMemoryReturn = (sample: MemorySample): MemoryReturnState => ({
  floor: heldBeyondHeap(sample),
  previousRss: sample.rssBytes,
  previousBusy: sample.busy,
  lastReturnAt: sample.at,
})

/** The hub's timings; the threshold is the `--memory-return-threshold` setting. */
export const memoryReturnTimings = {
  sampleEveryMs: 30_000,
  settleBytes: 32 * 1024 * 1024,
  minIntervalMs: 5 * 60_000,
} as const

export interface MemoryReturnOptions extends MemoryReturnPolicy {
  readonly sampleEveryMs: number
  /** Whether the hub is working now (see MemorySample.busy). */
  readonly busy: () => boolean
}

const sampleNow = (busy: () => boolean): MemorySample => ({
  at: Date.now(),
  rssBytes: process.memoryUsage.rss(),
  heapResidentBytes: v8.getHeapStatistics().total_physical_size,
  busy: busy(),
})

type Gc = (options: { type: "major"; execution: "sync"; flavor: "last-resort" }) => void

/** V8's gc(), whether or not node was started with --expose-gc (a new context gets it once the flag is set). */
const exposedGc = (): Gc => {
  const global = (globalThis as { gc?: unknown }).gc
  if (typeof global === "function") return global as Gc
  v8.setFlagsFromString("--expose-gc")
  return runInNewContext("gc") as Gc
}

const mib = (bytes: number) => Math.round(bytes / 1024 / 1024)

/** Samples every sampleEveryMs for the life of its fiber; a threshold of 0 turns it off. */
export const runMemoryReturn = (options: MemoryReturnOptions): Effect.Effect<void> =>
  Effect.gen(function* () {
    if (options.thresholdBytes <= 0) return
    const gc = exposedGc()
    let state = initialMemoryReturnState
    while (true) {
      yield* Effect.sleep(options.sampleEveryMs)
      const before = sampleNow(options.busy)
      const decision = decideMemoryReturn(options, state, before)
      state = decision.state
      if (!decision.run) continue
      const startedAt = performance.now()
      gc({ type: "major", execution: "sync", flavor: "last-resort" })
      const pauseMs = Math.round(performance.now() - startedAt)
      const after = sampleNow(options.busy)
      state = afterMemoryReturn(after)
      yield* Effect.logInfo("returned memory held after a burst").pipe(
        Effect.annotateLogs({
          rssBeforeMiB: mib(before.rssBytes),
          rssAfterMiB: mib(after.rssBytes),
          heapResidentMiB: mib(after.heapResidentBytes),
          pauseMs,
        }),
      )
    }
  })
