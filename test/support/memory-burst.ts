// A process that holds some live objects, parses a burst of short-lived JSON (as a wave's watch events
// and responses are parsed), then runs the hub's memory return (src/hub/memory-return.ts) with short
// timings and the threshold given (MiB; 0 = off), started before the burst as the hub starts it. Prints one JSON line: its RSS right
// after the burst and at the end, in bytes. Run by test/unit/memory-return.test.ts in a process of its
// own, so no other test's memory counts.
//   node test/support/memory-burst.ts <thresholdMiB> <waitMs>
import { Effect, Fiber } from "effect"
import { runMemoryReturn } from "../../src/hub/memory-return.ts"

const mib = 1024 * 1024
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const live: unknown[] = []
for (let i = 0; i < 50_000; i++) live.push({ name: `check-${i}`, spec: { n: i } })
const threshold = Number(process.argv[2]) * mib
// Started before the burst, as the hub starts it: its first samples see the memory before it.
const loop = Effect.runFork(
  runMemoryReturn({
    thresholdBytes: threshold,
    settleBytes: 64 * mib,
    minIntervalMs: 60_000,
    sampleEveryMs: 250,
    busy: () => false,
  }),
)
await sleep(600)
let held: unknown[] = []
for (let r = 0; r < 30; r++) {
  for (let i = 0; i < 100_000; i++)
    held.push(
      JSON.parse(`{"metadata":{"name":"job-${i}","resourceVersion":"${r}"},"status":{"succeeded":1}}`),
    )
  if (held.length > 500_000) held = []
}
held = []
const afterBurst = process.memoryUsage.rss()
// Waits `waitMs`, or with a threshold until the RSS fell by twice it (a busy machine delays the burst's
// end: V8 sweeps it on other threads).
const waitMs = Number(process.argv[3])
const started = Date.now()
while (
  Date.now() - started < waitMs &&
  !(threshold > 0 && process.memoryUsage.rss() < afterBurst - 2 * threshold)
)
  await sleep(100)
const waitedMs = Date.now() - started
await Effect.runPromise(Fiber.interrupt(loop))
process.stdout.write(
  `${JSON.stringify({ afterBurst, end: process.memoryUsage.rss(), waitedMs, live: live.length })}\n`,
)
