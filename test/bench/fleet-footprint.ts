// Prints how long a ready N-cluster fleet takes to start and the resident memory of each process kind.
//   node test/bench/fleet-footprint.ts [clusters=3]
import { readFileSync } from "node:fs"
import { startFleet } from "../../clusters/local-fleet/index.ts"
import { sleep } from "../support/wait.ts"

const n = Number(process.argv[2] ?? 3)
const rssKiB = (pid: number): number => {
  try {
    const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))
    return m ? Number(m[1]) : 0
  } catch {
    return 0
  }
}
const pgrepEtcd = (runDir: string): number[] =>
  readFileSync(`${runDir}/pgids`, "utf8")
    .split("\n")
    .filter(Boolean)
    .map(Number)
    .filter((pid) => {
      try {
        return (readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[0] ?? "").endsWith("/etcd")
      } catch {
        return false
      }
    })

const t0 = performance.now()
const fleet = await startFleet({ clusters: Array.from({ length: n }, (_, i) => `c${i + 1}`), log: () => {} })
const startSeconds = (performance.now() - t0) / 1000
// Let the control planes settle (post-start hooks, controller caches) before measuring.
await sleep(10_000)
const byKind = new Map<string, number[]>()
const add = (kind: string, kib: number) => byKind.set(kind, [...(byKind.get(kind) ?? []), kib])
for (const pid of pgrepEtcd(fleet.runDir)) add("etcd (shared)", rssKiB(pid))
for (const c of fleet.clusters) {
  for (const p of c.processes()) add(p.name.slice(c.name.length + 1), rssKiB(p.pid))
}
console.log(`fleet of ${n} clusters ready in ${startSeconds.toFixed(1)} s`)
for (const [kind, values] of byKind) {
  const avg = values.reduce((a, b) => a + b, 0) / values.length / 1024
  console.log(`rss ${kind.padEnd(24)} ${avg.toFixed(0)} MiB each (${values.length} running)`)
}
await fleet.stop()
