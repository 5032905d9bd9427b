// The fault soak, short: the bench's driver and independent observer (test/support/fault-driver.ts,
// test/support/observer.ts) with 24 faults over two members (each kind at least once, in seeded order),
// asserting the promise: no duplicate Job, no lost verdict, no false green beyond the propagation grace,
// no finalizer left behind. The long run (1,000 faults) is `npx node test/bench/fault-soak.ts`.
// FLEETCHECK_SOAK_SEED reruns a seed; the figures are printed either way, and the hub's Info log is kept
// in $TMPDIR/fleetcheck-soak-<seed>.log, so a failure comes with the hub's side of it.
import { tmpdir } from "node:os"
import { join } from "node:path"
import { describe, expect, it } from "vitest"
import { formatReport, runSoak } from "../support/fault-driver.ts"

const faults = 24
const seed = Number(process.env.FLEETCHECK_SOAK_SEED ?? Math.floor(Math.random() * 2 ** 31))
const hubLogFile = join(tmpdir(), `fleetcheck-soak-${seed}.log`)

describe("fault soak (short)", () => {
  it(`${faults} faults (seed ${seed}): no duplicates, no lost verdicts, no false green, no stuck finalizer`, async () => {
    const result = await runSoak({
      faults,
      seed,
      members: 2,
      checksPerMember: 4,
      targetMs: 45_000,
      settleMs: 10_000,
      hubLogFile,
      log: () => {},
    })
    process.stderr.write(
      `${formatReport(result, `FLEETCHECK_SOAK_SEED=${seed} npx vitest run --config config/vitest.config.ts test/integration/fault-soak.test.ts`)}\nhub log: ${hubLogFile}\n`,
    )
    const o = result.observer
    // Every kind was injected at least once.
    expect(Object.keys(result.injected).length).toBe(11)
    expect(o.duplicates).toEqual([])
    expect(o.lostVerdicts).toEqual([])
    expect(o.wrongVerdicts).toEqual([])
    expect(o.unbackedSuccesses).toEqual([])
    expect(o.falseGreen.beyondGraceS).toBe(0)
    expect(result.stuckFinalizers).toEqual([])
  }, 300_000)
})
