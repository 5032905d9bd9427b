// `npm run bench -- NAME [ARGS...]` runs one benchmark; `npm run bench` lists them. Benchmarks print
// figures and are run by hand (they take minutes, some need the machine to themselves); the suite has
// a short version of each. Every file in test/bench/ is either a benchmark below or a support module
// (test/unit/bench-index.test.ts fails when one is neither).
import { spawnSync } from "node:child_process"

interface Benchmark {
  readonly what: string
  /** Arguments as the file's own header documents them, defaults in its usage. */
  readonly args: string
}

export const benchmarks: Readonly<Record<string, Benchmark>> = {
  "credential-rotation": {
    what: "token rotations and expiries under a running hub",
    args: "[rotations=20] [expiries=20]",
  },
  failover: { what: "failover time of real hub processes, default lease timings", args: "[runs=10]" },
  "fault-soak": {
    what: "injected faults → duplicate Jobs, lost verdicts (SPEC §11 bar)",
    args: "[faults=1000] [seed]",
  },
  "fleet-footprint": { what: "start time and resident memory of a local fleet", args: "[clusters=3]" },
  "fleet-scale": {
    what: "one hub at scale: M members × N checks",
    args: "[members=100] [checksPerMember=100] [apiservers=10] [hub flags...]",
  },
  "fleet-view": {
    what: "cost of one fleet-sized view request",
    args: "[members=1000] [checks=100] [limit=500]",
  },
  "hub-memory": { what: "hub memory idle and with checks", args: "[checksPerMember=500]" },
  "informer-store": { what: "informer cache heap per object", args: "[N]" },
  reconcile: {
    what: "converged reconciles per second, beside controller-runtime",
    args: "[checks=300] [rounds=20]",
  },
  "restore-agent": { what: "restore agent vs raw restic, same repository", args: "[MiB=1024] [rounds=3]" },
  "restore-agent-postgres": { what: "restore agent vs raw pg_restore", args: "[rows=1000000] [rounds=3]" },
  "shard-leases": {
    what: "what sharding's Leases cost, 3 replicas",
    args: "[members] [window s] [hub flags]",
  },
  "tls-scrape": { what: "what TLS adds to a /metrics scrape", args: "[members=100] [checks=100] [n=200]" },
  "v8-page-pool": { what: "what V8 keeps resident after allocation bursts", args: "[bursts=60]" },
  workqueue: { what: "workqueue throughput through the Effect API", args: "" },
  "cpu-profile-summary": {
    what: "summarise a .cpuprofile a benchmark wrote",
    args: "<file.cpuprofile> [top=30] [focus]",
  },
  "heap-summary": {
    what: "summarise a .heapsnapshot a benchmark wrote",
    args: "<file.heapsnapshot> [top=25]",
  },
}

/** Modules the benchmarks import or spawn; not run on their own. */
export const supportModules: ReadonlyArray<string> = [
  "run",
  "child-process",
  "event-driver",
  "go-reference",
  "hub-process",
  "scale-hub-process",
  "shard-leases-replica",
]

const main = (argv: ReadonlyArray<string>): number => {
  const [name, ...args] = argv
  const bench = name === undefined ? undefined : benchmarks[name]
  if (bench === undefined) {
    if (name !== undefined) console.error(`no benchmark ${JSON.stringify(name)}\n`)
    console.log("npm run bench -- NAME [ARGS...]\n")
    const width = Math.max(...Object.keys(benchmarks).map((n) => n.length))
    for (const [n, b] of Object.entries(benchmarks)) console.log(`  ${n.padEnd(width)}  ${b.what}  ${b.args}`)
    return name === undefined ? 0 : 2
  }
  const file = new URL(`./${name}.ts`, import.meta.url).pathname
  const r = spawnSync(process.execPath, [file, ...args], { stdio: "inherit" })
  return r.status ?? 1
}

if (import.meta.main) process.exitCode = main(process.argv.slice(2))
