// What one request for a fleet-sized view costs: 1,000 members × 100 checks (100,000 BackupChecks,
// about 2% failing and 1% unknown) held in memory exactly as the hub holds them, served by the hub's
// real HTTP server on loopback. Prints, for the dashboard overview (page 1, failing first), the fleet
// API's first page, a full walk of the API with limit/continue, and the unpaged answer: time per
// request (median of several; a first page rebuilds the whole view, as every dashboard request does,
// while a walk's continue pages are cut from the snapshot its first page kept) and bytes on the wire.
// Everything runs on the event loop that, in a hub, also renews the lease: the times are the pauses
// one request causes there.
//
//   node test/bench/fleet-view.ts [members] [checks per member] [limit]     (defaults 1000 100 500)
import { performance } from "node:perf_hooks"
import { defaultHubConfig } from "../../src/hub/config.ts"
import { fleetPage, fleetView } from "../../src/hub/fleet-state.ts"
import { startHubHttp } from "../../src/hub/http.ts"
import { makeMetrics } from "../../src/observability/metrics/index.ts"
import { membersMap, syntheticFleet } from "../support/fleet-members.ts"

const clusters = Number(process.argv[2] ?? 1000)
const checksPer = Number(process.argv[3] ?? 100)
const limit = Number(process.argv[4] ?? 500)

const t0 = performance.now()
const members = membersMap(syntheticFleet(clusters, checksPer))
console.log(
  `fleet: ${clusters} members × ${checksPer} checks = ${(clusters * checksPer).toLocaleString("en-US")} BackupChecks, built in ${(performance.now() - t0).toFixed(0)} ms`,
)

const ms = (x: number) => `${x.toFixed(1)} ms`
const kib = (bytes: number) =>
  bytes >= 1024 * 1024 ? `${(bytes / 1024 / 1024).toFixed(2)} MiB` : `${(bytes / 1024).toFixed(1)} KiB`
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!

// The pure parts, without HTTP: building and sorting the view, and cutting one page.
{
  const times: number[] = []
  let view = fleetView(members.values(), Date.now())
  for (let i = 0; i < 5; i++) {
    const s = performance.now()
    view = fleetView(members.values(), Date.now())
    times.push(performance.now() - s)
  }
  const s = performance.now()
  fleetPage(view, limit, undefined, {})
  console.log(
    `fleetView (all ${view.checks.length.toLocaleString("en-US")} checks, sorted): ${ms(median(times))} median of 5; fleetPage: ${ms(performance.now() - s)}`,
  )
}

const { server, port } = await startHubHttp({
  config: defaultHubConfig,
  host: "127.0.0.1",
  port: 0,
  members,
  fleetChecks: new Map(),
  metrics: makeMetrics(),
  isLeader: () => true,
  availability: () => ({ answers: true }),
  identity: "bench",
  access: undefined,
  serves: "all",
  tls: undefined,
})
const base = `http://127.0.0.1:${port}`

const get = async (path: string) => {
  const s = performance.now()
  const res = await fetch(`${base}${path}`)
  const body = await res.text()
  if (res.status !== 200) throw new Error(`${path}: HTTP ${res.status}: ${body.slice(0, 200)}`)
  return { ms: performance.now() - s, bytes: Buffer.byteLength(body), body }
}

const measure = async (label: string, path: string, runs = 5) => {
  await get(path) // warm up
  const results = []
  for (let i = 0; i < runs; i++) results.push(await get(path))
  console.log(
    `${label.padEnd(50)} ${ms(median(results.map((r) => r.ms))).padStart(9)}  ${kib(results[0]!.bytes).padStart(10)}`,
  )
  return results[0]!
}

console.log(`\n${"request".padEnd(50)} ${"time".padStart(9)}  ${"size".padStart(10)}`)
await measure("GET / (overview, page 1)", "/")
await measure("GET /?failing=true", "/?failing=true")
await measure("GET /?page=500", "/?page=500")
await measure("GET /cluster?name=cluster-0500", "/cluster?name=cluster-0500")
await measure(
  "GET /check?cluster=…&namespace=…&name=…",
  "/check?cluster=cluster-0500&namespace=team-0&name=db-000-nightly",
)
await measure(`GET /api/v1/fleet?limit=${limit} (first page)`, `/api/v1/fleet?limit=${limit}`)
await measure("GET /api/v1/fleet?limit=100 (first page)", "/api/v1/fleet?limit=100")
await measure("GET /api/v1/fleet?failing=true&limit=100", "/api/v1/fleet?failing=true&limit=100")
await measure(
  "GET /api/v1/fleet?label=env%3Dstaging&limit=100",
  "/api/v1/fleet?label=env%3Dstaging&limit=100",
)
await measure("GET /api/v1/fleet (unpaged, everything)", "/api/v1/fleet", 3)

// A full walk, the way `fleetcheck status` reads the fleet.
{
  const s = performance.now()
  let pages = 0
  let bytes = 0
  let checks = 0
  let slowest = 0
  let token: string | undefined
  do {
    const r = await get(
      `/api/v1/fleet?limit=${limit}${token ? `&continue=${encodeURIComponent(token)}` : ""}`,
    )
    const body = JSON.parse(r.body) as { checks: unknown[]; metadata?: { continue?: string } }
    pages++
    bytes += r.bytes
    checks += body.checks.length
    slowest = Math.max(slowest, r.ms)
    token = body.metadata?.continue
  } while (token)
  if (checks !== clusters * checksPer)
    throw new Error(`walk saw ${checks} checks, expected ${clusters * checksPer}`)
  console.log(
    `full walk, limit=${limit}: ${pages} pages, ${checks.toLocaleString("en-US")} checks, ${kib(bytes)}, ${ms(performance.now() - s)} in all, slowest page ${ms(slowest)}`,
  )
}
const mem = process.memoryUsage()
console.log(`heap used ${kib(mem.heapUsed)}, RSS ${kib(mem.rss)}`)
server.close()
