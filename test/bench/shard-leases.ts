// What sharding's Leases cost (ADR 0011): 3 replicas (shard-leases-replica.ts, one process each, the real
// sharding code) share 1,000 synthetic members on one real kube-apiserver, at the hub's default Lease
// timings unless flags are given. Once every member's Lease is held, for a window: the hub API server's
// requests per second (its own apiserver_request_total, by verb and resource), its CPU and etcd's
// (from /proc), and each replica's CPU (process.cpuUsage over IPC). Prints figures; asserts nothing.
//
//   flock /tmp/fleetcheck-heavy.lock npx node test/bench/shard-leases.ts [members] [window s] [hub flags]
//   e.g. ... test/bench/shard-leases.ts 1000 60
import { type ChildProcess, fork } from "node:child_process"
import { readFileSync } from "node:fs"
import { startFleet } from "../../clusters/local-fleet/index.ts"
import { defaultHubNamespace, shardLeaseLabel } from "../../src/api/names.ts"
import { leases, pathOf } from "../../src/kube/resources.ts"
import { sleep } from "../support/wait.ts"
import { ask } from "./child-process.ts"

const [countText = "1000", windowText = "60", ...hubFlags] = process.argv.slice(2)
const memberCount = Number(countText)
const windowMs = Number(windowText) * 1000
const replicaCount = 3
const t0 = Date.now()
const log = (line: string) =>
  process.stderr.write(`[${((Date.now() - t0) / 1000).toFixed(0).padStart(4)} s] ${line}\n`)

/** CPU seconds (user + system) a process has used, from /proc/<pid>/stat (clock ticks of 10 ms). */
const procCpuSeconds = (pid: number): number => {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
  return (Number(fields[11]) + Number(fields[12])) / 100
}

const fleet = await startFleet({ clusters: [{ name: "hub", workloads: false, controllerManager: false }] })
const children: ChildProcess[] = []
try {
  const hub = fleet.cluster("hub")
  await hub.api("POST", "/api/v1/namespaces", { metadata: { name: defaultHubNamespace } })
  const apiserver = hub.processes().find((p) => p.name.endsWith("kube-apiserver"))
  // etcd: the fleet's own (its process groups are listed in the run directory).
  const etcd = readFileSync(`${fleet.runDir}/pgids`, "utf8")
    .split("\n")
    .filter(Boolean)
    .map(Number)
    .map((pid) => ({ pid }))
    .find(({ pid }) => {
      try {
        return (readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0")[0] ?? "").endsWith("/etcd")
      } catch {
        return false
      }
    })
  /** apiserver_request_total by "VERB resource", summed over codes. */
  const requests = async () => {
    const r = await hub.api("GET", "/metrics")
    const counts = new Map<string, number>()
    for (const line of String(r.body).split("\n")) {
      if (!line.startsWith("apiserver_request_total{")) continue
      const labels = Object.fromEntries([...line.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1], m[2]]))
      const key = `${labels.verb} ${labels.resource}${labels.subresource ? `/${labels.subresource}` : ""}`
      counts.set(key, (counts.get(key) ?? 0) + Number(line.slice(line.lastIndexOf(" ") + 1)))
    }
    return counts
  }

  log(
    `starting ${replicaCount} replicas for ${memberCount} members (flags: ${hubFlags.join(" ") || "defaults"})`,
  )
  for (let i = 0; i < replicaCount; i++) {
    const child = fork(
      new URL("./shard-leases-replica.ts", import.meta.url).pathname,
      [`bench-r${i + 1}`, String(memberCount), ...hubFlags],
      {
        env: { ...process.env, KUBECONFIG: hub.kubeconfigPath },
        stdio: ["ignore", "ignore", "inherit", "ipc"],
      },
    )
    children.push(child)
  }
  const started = Date.now()
  while (true) {
    const r = await hub.api(
      "GET",
      `${pathOf(leases, { namespace: defaultHubNamespace })}?labelSelector=${encodeURIComponent(`${shardLeaseLabel}=member`)}`,
    )
    const heldCount = ((r.body?.items ?? []) as any[]).filter(
      (l) => (l.spec?.holderIdentity ?? "") !== "",
    ).length
    if (heldCount === memberCount) break
    if (Date.now() - started > 300_000)
      throw new Error(`only ${heldCount} of ${memberCount} member Leases held`)
    await sleep(1_000)
  }
  const shares = await Promise.all(children.map((c) => ask<{ held: number }>(c, { cmd: "held" })))
  log(
    `every member Lease held ${Date.now() - started} ms after start: ${shares.map((s) => s.held).join(", ")}`,
  )
  // Settle (the acquisition burst and the informer's list are behind us), then measure a window.
  await sleep(10_000)
  const before = {
    requests: await requests(),
    apiserver: apiserver ? procCpuSeconds(apiserver.pid) : Number.NaN,
    etcd: etcd ? procCpuSeconds(etcd.pid) : Number.NaN,
    replicas: await Promise.all(children.map((c) => ask<{ cpuUs: number; atMs: number }>(c, { cmd: "cpu" }))),
    at: Date.now(),
  }
  await sleep(windowMs)
  const after = {
    requests: await requests(),
    apiserver: apiserver ? procCpuSeconds(apiserver.pid) : Number.NaN,
    etcd: etcd ? procCpuSeconds(etcd.pid) : Number.NaN,
    replicas: await Promise.all(children.map((c) => ask<{ cpuUs: number; atMs: number }>(c, { cmd: "cpu" }))),
    at: Date.now(),
  }
  const seconds = (after.at - before.at) / 1000
  const rows = [...after.requests]
    .map(([k, v]) => [k, v - (before.requests.get(k) ?? 0)] as const)
    .filter(([, n]) => n > 0)
    .sort((a, b) => b[1] - a[1])
  const total = rows.reduce((n, [, v]) => n + v, 0)
  const leaseWrites = rows
    .filter(([k]) => /^(PUT|POST|PATCH|DELETE) leases$/.test(k))
    .reduce((n, [, v]) => n + v, 0)
  const pct = (cpuSeconds: number) => `${((cpuSeconds / seconds) * 100).toFixed(1)}% of a core`
  console.log(
    `shard-leases: ${memberCount} members, ${replicaCount} replicas, flags: ${hubFlags.join(" ") || "defaults"}; window ${seconds.toFixed(0)} s`,
  )
  console.log(
    `  hub API server requests: ${(total / seconds).toFixed(1)}/s, Lease writes ${(leaseWrites / seconds).toFixed(1)}/s`,
  )
  for (const [k, v] of rows.slice(0, 8)) console.log(`    ${k}: ${(v / seconds).toFixed(1)}/s`)
  console.log(
    `  kube-apiserver CPU: ${pct(after.apiserver - before.apiserver)}; etcd CPU: ${pct(after.etcd - before.etcd)}`,
  )
  after.replicas.forEach((r, i) => {
    const b = before.replicas[i]!
    console.log(`  replica ${i + 1} (${shares[i]!.held} members) CPU: ${pct((r.cpuUs - b.cpuUs) / 1e6)}`)
  })
} finally {
  for (const c of children) c.kill("SIGKILL")
  await fleet.stop()
}
