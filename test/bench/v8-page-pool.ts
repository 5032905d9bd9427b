// What V8 keeps resident after an allocation burst, apart from the hub: a process holds a few MiB of
// live objects, parses JSON objects in a burst (as a wave's watch events and responses are parsed), and
// after forced GCs prints its RSS by kind of mapping against V8's own heap statistics. V8 allocates its
// heap in 256 KiB pages, each its own anonymous mapping; pages V8 no longer counts (total_physical_size)
// but keeps mapped and resident show as "256 KiB pages outside V8's count". Then one memory-reducing
// ("last resort") GC, which returns them. Each case runs in a child process with its own node flags:
//   node test/bench/v8-page-pool.ts [bursts=60]
//   (cases: node's defaults; --max-semi-space-size=16; add more with EXTRA_FLAGS="--flag ...")
import { spawnSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { fileURLToPath } from "node:url"
import { getHeapStatistics } from "node:v8"

const mib = (b: number) => `${(b / 1024 / 1024).toFixed(1)} MiB`

/** Resident bytes of anonymous mappings: V8-page-sized ones (256 KiB) and all of them. */
const anonymous = () => {
  let page = false
  let anon = false
  let pages = 0
  let all = 0
  for (const line of readFileSync("/proc/self/smaps", "utf8").split("\n")) {
    const m = /^([0-9a-f]+)-([0-9a-f]+) \S+ \S+ \S+ \S+\s*(\S*)/.exec(line)
    if (m) {
      anon = m[3] === ""
      page = anon && Number.parseInt(m[2]!, 16) - Number.parseInt(m[1]!, 16) === 256 * 1024
    } else if (line.startsWith("Rss:")) {
      const bytes = Number(line.split(/\s+/)[1]) * 1024
      if (anon) all += bytes
      if (page) pages += bytes
    }
  }
  return { pages, all }
}

const gc = (globalThis as { gc?: (options?: object) => void }).gc
if (gc === undefined) {
  const bursts = process.argv[2] ?? "60"
  const cases = [[], ["--max-semi-space-size=16"], (process.env.EXTRA_FLAGS ?? "").split(/\s+/)].filter(
    (c, i) => i < 2 || c.some((f) => f !== ""),
  )
  for (const flags of cases) {
    console.log(`node ${flags.join(" ") || "(defaults)"}:`)
    const r = spawnSync(
      process.execPath,
      ["--expose-gc", ...flags, ...process.execArgv, fileURLToPath(import.meta.url), bursts],
      { stdio: "inherit" },
    )
    if (r.status !== 0) process.exit(r.status ?? 1)
  }
  process.exit(0)
}

const report = (what: string) => {
  gc()
  gc()
  const v8 = getHeapStatistics()
  const a = anonymous()
  console.log(
    `  ${what}: rss ${mib(process.memoryUsage.rss())}; V8 heap used ${mib(v8.used_heap_size)}, committed ${mib(v8.total_heap_size)}, resident ${mib(v8.total_physical_size)}; anonymous ${mib(a.all)}, of which 256 KiB pages ${mib(a.pages)}: ${mib(Math.max(0, a.pages - v8.total_physical_size))} outside V8's count`,
  )
}

const bursts = Number(process.argv[2] ?? 60)
const live: unknown[] = []
for (let i = 0; i < 50_000; i++) live.push({ name: `check-${i}`, spec: { n: i } })
report("before the burst")
let held: unknown[] = []
for (let r = 0; r < bursts; r++) {
  for (let i = 0; i < 100_000; i++)
    held.push(
      JSON.parse(`{"metadata":{"name":"job-${i}","resourceVersion":"${r}"},"status":{"succeeded":1}}`),
    )
  if (held.length > 500_000) held = []
}
held = []
report("after the burst, forced GCs")
await new Promise((r) => setTimeout(r, 15_000))
report("15 s later (V8's memory reducer had time to run)")
gc({ type: "major", execution: "sync", flavor: "last-resort" })
report("after one memory-reducing GC")
if (live.length === 0) console.log("unreachable: keeps the live objects alive")
