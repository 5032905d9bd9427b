// The fault soak (SPEC §11 bar: at least 1,000 injected faults → 0 duplicate Jobs, 0 lost verdicts,
// 0 false-green seconds, 0 stuck finalizers, computed by an observer independent of the hub). Starts a
// local fleet (hub cluster + 3 members), an in-process hub, the seeded fault driver and the observer
// (test/support/fault-driver.ts, test/support/observer.ts, which state every definition), then prints
// the faults by kind and the observer's figures. Exits 1 when any of the four figures is not 0.
//   npx node test/bench/fault-soak.ts [faults=1000] [seed]
// FLEETCHECK_SOAK_MINUTES sets how long injecting the faults takes (default: 1.2 s per fault);
// the hub's Info log goes to $TMPDIR/fleetcheck-soak-<seed>.log.
import { tmpdir } from "node:os"
import { join } from "node:path"
import { formatReport, runSoak } from "../support/fault-driver.ts"

const faults = Number(process.argv[2] ?? 1000)
if (!Number.isInteger(faults) || faults < 1)
  throw new Error(`faults must be a positive integer, got ${process.argv[2]}`)
const seed = process.argv[3] === undefined ? Math.floor(Math.random() * 2 ** 31) : Number(process.argv[3])
if (!Number.isInteger(seed)) throw new Error(`seed must be an integer, got ${process.argv[3]}`)
const minutes = Number(process.env.FLEETCHECK_SOAK_MINUTES ?? (faults * 1.2) / 60)
const command = `npx node test/bench/fault-soak.ts ${faults} ${seed}`
const hubLogFile = join(tmpdir(), `fleetcheck-soak-${seed}.log`)
console.log(`fault soak: ${faults} faults, seed ${seed} (rerun: ${command}); hub log ${hubLogFile}`)

const result = await runSoak({ faults, seed, targetMs: minutes * 60_000, hubLogFile })
console.log(formatReport(result, command))
const o = result.observer
const bad =
  o.duplicates.length +
  o.lostVerdicts.length +
  result.stuckFinalizers.length +
  (o.falseGreen.beyondGraceS > 0 ? 1 : 0)
process.exit(bad === 0 ? 0 : 1)
