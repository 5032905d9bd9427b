// The hub's memory return (src/hub/memory-return.ts): when it runs, from samples, and, in a process of
// its own (test/support/memory-burst.ts), that it gives back what V8 keeps resident after a burst.
import { execFileSync } from "node:child_process"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"
import {
  afterMemoryReturn,
  decideMemoryReturn,
  initialMemoryReturnState,
  type MemoryReturnPolicy,
  type MemoryReturnState,
} from "../../src/hub/memory-return.ts"

const mib = 1024 * 1024
const policy: MemoryReturnPolicy = {
  thresholdBytes: 256 * mib,
  settleBytes: 32 * mib,
  minIntervalMs: 300_000,
}
/** A sample whose memory held beyond V8's heap is `heldMib` (the heap itself 500 MiB). */
const sample = (at: number, heldMib: number, busy = false) => ({
  at,
  rssBytes: (500 + heldMib) * mib,
  heapResidentBytes: 500 * mib,
  busy,
})

/** Feeds samples (seconds, held MiB, hub working) in order; the times at which a return would run. */
const runsFor = (
  samples: ReadonlyArray<readonly [number, number, boolean?]>,
  after?: (at: number) => number,
) => {
  let state: MemoryReturnState = initialMemoryReturnState
  const runs: number[] = []
  for (const [s, held, busy] of samples) {
    const d = decideMemoryReturn(policy, state, sample(s * 1000, held, busy))
    state = d.state
    if (d.run) {
      runs.push(s)
      state = afterMemoryReturn(sample(s * 1000, after?.(s) ?? 100))
    }
  }
  return runs
}

describe("memory return", () => {
  it("runs once the memory held beyond the heap grew by the threshold and stopped growing", () => {
    // A burst from 100 to 700 MiB: not while it grows, at the first sample after it settled.
    expect(
      runsFor([
        [0, 100],
        [30, 300],
        [60, 500],
        [90, 700],
        [120, 710],
        [150, 712],
      ]),
    ).toEqual([120])
  })

  it("waits while reconciles run, though the RSS stands still (a wave), until two samples find none", () => {
    expect(
      runsFor([
        [0, 100],
        [30, 500, true],
        [60, 505, true],
        [90, 505, false],
        [120, 506, true],
        [150, 506, false],
        [180, 506, false],
      ]),
    ).toEqual([180])
  })

  it("does not run for growth under the threshold, nor on the first sample", () => {
    expect(runsFor([[0, 2_000]])).toEqual([])
    expect(
      runsFor([
        [0, 100],
        [30, 300],
        [60, 340],
        [90, 350],
      ]),
    ).toEqual([])
  })

  it("measures growth from the lowest level seen, not from the start", () => {
    expect(
      runsFor([
        [0, 400],
        [30, 120],
        [60, 390],
        [90, 395],
      ]),
    ).toEqual([90])
  })

  it("runs at most once per interval, and measures the next growth from what the return left", () => {
    // The first return leaves 450 MiB it could not give back: 450 → 700 is under the threshold.
    const bursts: Array<[number, number]> = [
      [0, 100],
      [30, 700],
      [60, 700],
      [90, 900],
      [120, 960],
      [150, 960],
      [330, 960],
      [390, 960],
    ]
    expect(runsFor(bursts, () => 450)).toEqual([60, 390])
    // Within the interval it waits even when the growth is there (960 - 450 ≥ 256 from 150 s on).
    expect(runsFor(bursts.slice(0, 6), () => 450)).toEqual([60])
  })

  it("gives back what V8 keeps resident after a burst, which it otherwise keeps", () => {
    const child = fileURLToPath(new URL("../support/memory-burst.ts", import.meta.url))
    const run = (thresholdMib: number, waitMs: number) =>
      JSON.parse(
        // Its last line: the return's own log line comes before it.
        execFileSync(process.execPath, [child, String(thresholdMib), String(waitMs)], { encoding: "utf8" })
          .trim()
          .split("\n")
          .at(-1) ?? "",
      ) as {
        afterBurst: number
        end: number
        waitedMs: number
      }
    // With it the process falls well below its peak (it waits up to 15 s for that); without it, given
    // as long, most of the burst's pages stay: V8's own memory reducer may give back some (0 in most
    // runs, 68 MiB once on a loaded machine, where the first run had waited long), never half as much.
    const on = run(64, 15_000)
    const off = run(0, Math.max(2_000, on.waitedMs))
    expect(on.afterBurst - on.end).toBeGreaterThan(128 * mib)
    expect(off.afterBurst - off.end).toBeLessThan((on.afterBurst - on.end) / 2)
  })
})
