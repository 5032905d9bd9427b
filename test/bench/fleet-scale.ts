// One hub at scale: M namespace-scoped members (one namespace each, fleetcheck.io/namespaces) spread over
// A real kube-apiservers sharing one etcd, C BackupChecks per member seeded already verified (status
// written through the status subresource as the hub writes it), registered by Secret with a `fleetcheck
// hub` (its defaults, leader election off) in a process of its own. Prints:
//   start → every member Ready with every check counted verified; the API burst of that start
//   heap and RSS after GC: total, per member, per cached check, and again after the idle window
//   converged CPU, API requests per member per minute, MemberCluster status writes per minute
//   /metrics: series, bytes, render time and the event loop's longest stall during the render
//   event → reconcile start under a steady rate of BackupCheck updates spread over every member
//   (event-driver.ts): the hub's workqueue wait p50/p99, and the same seen from outside the hub (the
//   PATCH's answer → a worker takes the check); the rate the member API servers counted next to the
//   driver's, the updates dropped at its in-flight cap, PATCH and etcd latencies at the API servers, and
//   every process's CPU (/proc) with the events and in the quiet seconds before them
//   a wave: P% of every member's checks due at the same minute; time to all verified, fastest / median /
//   slowest member, peak concurrent restore Jobs (Jobs are completed by this script after a hold time,
//   as a Job controller would: no kubelet runs here)
//   node test/bench/fleet-scale.ts [members=100] [checksPerMember=100] [apiservers=10] [hub flags...]
// Environment: IDLE_SECONDS (60), IDLE_SLICE_SECONDS (60: the idle window's CPU and reconciles are also
// printed per slice this long, e.g. to see a resync's burst in a window longer than --resync-period),
// EVENT_RATE (500), EVENT_SECONDS (30), EVENT_DRIVERS ("h2": a comma
// list of event runs on the same fleet, each "h1|h2|etcd[@rate][+rt]": h1 = HTTPS keep-alive Agent, h2 = one
// HTTP/2 connection per API server, etcd = the same change written into the API servers' storage, so
// that only their watch path runs (event-driver.ts), @rate instead of EVENT_RATE, +rt = the hub's threads
// SCHED_FIFO for that run, +core = the hub alone on the last core and the fleet and driver on the others for that run, +main = the hub's main thread alone on the last core and everything else, the hub's other threads too, on the others, +pod[=<millicores>] = the hub in a cpu cgroup weighted as a pod's CPU request (default 1000m) and everything else in one weighted as the machine's other cores' worth, as on a node whose other pods request the rest), EVENT_INFLIGHT (256: updates due beyond it are dropped and counted), EVENT_SOCKETS (32: h1's
// sockets per API server), EVENT_H2_SESSIONS (1: h2's connections per API server), EVENT_QUIET_SECONDS
// (5: the CPU floor read before each run, again until the machine is at most EVENT_SETTLED_PERCENT (30) of
// a core busy, for at most EVENT_SETTLE_SECONDS (300)), GOMAXPROCS / GOGC / GOMEMLIMIT (not read here: the API servers
// and etcd inherit this script's environment; the events' lines name them when set),
// WAVE_PERCENT (10),
// JOB_HOLD_MS (5000), WAVE_MAX_SECONDS (1200: then the wave's figures are printed over what verified),
// WAVE_PATCH_MS (5: the time allowed per schedule patch when choosing the wave's minute; at 1,000 × 100
// a patch took about 25 ms, so use 40 there),
// AFTER_WAVE_SECONDS (60: memory and sockets are measured again this long after the wave), SKIP_WAVE=1, PROFILE_EVENTS=<file> (the hub's CPU profile during the events), PROFILE_EVENTS_HEAP=<file> (what the hub allocated during the events, major GCs' collections included; with PROFILE_EVENTS_HEAP_ALL=1 the scavenges' too: every allocation),
// PROFILE_START=<file> (the hub's CPU profile from its start until every member is Ready),
// PROFILE_IDLE=<file> (the hub's CPU profile over the idle window), PROFILE_IDLE_HEAP=<file> (what the hub
// allocated over the idle window and still held at its end, V8's sampling heap profile; with
// PROFILE_IDLE_HEAP_PROMOTED=1 also what major GCs collected meanwhile: what was promoted), SNAPSHOT=<file> (a heap snapshot
// once converged), SNAPSHOT_AFTER_WAVE=<file> (one after the wave's last measurement; read it with
// heap-summary.ts), HUB_LD_PRELOAD=<library> (preloaded into the hub process only, e.g. another
// malloc), HUB_ENV="NAME=value ..." (more environment for the hub process only), HUB_NODE_FLAGS="<flags>" (node and V8
// flags of the hub process, e.g. --max-semi-space-size=16), HUB_NICE=<n> (the hub's scheduling priority, e.g.
// -10, so the apiservers, etcd and this script sharing the cores do not queue it), HUB_OWN_CORE=1 (the hub
// alone on the last core for the whole run, everything else on the others), HUB_LOG=<file> (the hub
// process's stdout and stderr, its logs, appended there instead of dropped), EVENT_RT=<1..99> (the
// SCHED_FIFO priority of +rt runs; set alone, the events run as "h2+rt"), KNOBS="<hub
// flags>;<hub flags>" (after the rest, the same fleet under a hub with each set of flags: start,
// converged CPU over its own idle window, requests, memory; node:<flag> is a node/V8 flag of that hub
// process, e.g. KNOBS="--probe-interval 1m;node:--heap-growing-percent=50"), PROFILE_KNOBS=<prefix> (each
// KNOBS hub's CPU profile over its idle window, in <prefix>-<n>.cpuprofile, n from 1).
import { type ChildProcess, execFileSync, fork } from "node:child_process"
import { openSync } from "node:fs"
import * as https from "node:https"
import { availableParallelism, setPriority } from "node:os"
import {
  installFleetcheck,
  type LocalCluster,
  registerWithSecret,
  startFleet,
} from "../../clusters/local-fleet/index.ts"
import { parseBackupCheck } from "../../src/api/backupcheck.ts"
import { finalizerName, labelBackupCheck, labelRun, namespacesAnnotation } from "../../src/api/names.ts"
import { jobNameFor, runIDForTime, specHashFor, traceparentFor } from "../../src/reconcile/run-identity.ts"
import { sleep } from "../support/wait.ts"
import { ask, servingPort } from "./child-process.ts"
import {
  answerToReconcile,
  type CpuUse,
  cpuGroups,
  driveEvents,
  type EventTransport,
  fleetProcesses,
  histogramQuantile,
  serverSample,
  serversDelta,
  watchCpu,
} from "./event-driver.ts"

const [members, perMember, apiserverCount] = [100, 100, 10].map((d, i) =>
  Number(process.argv[2 + i] ?? d),
) as [number, number, number]
const hubFlags = process.argv.slice(5)
const env = (name: string, d: number) => Number(process.env[name] ?? d)
const idleSeconds = env("IDLE_SECONDS", 60)
const idleSliceSeconds = env("IDLE_SLICE_SECONDS", 60)
const eventRate = env("EVENT_RATE", 500)
const eventSeconds = env("EVENT_SECONDS", 30)
const wavePercent = env("WAVE_PERCENT", 10)
const jobHoldMs = env("JOB_HOLD_MS", 5_000)
const waveMaxSeconds = env("WAVE_MAX_SECONDS", 1_200)
const afterWaveSeconds = env("AFTER_WAVE_SECONDS", 60)
const wavePatchMs = env("WAVE_PATCH_MS", 5)
const group = "/apis/fleetcheck.io/v1alpha1"

const t0 = Date.now()
const log = (line: string) =>
  process.stderr.write(`[${((Date.now() - t0) / 1000).toFixed(0).padStart(5)} s] ${line}\n`)
const out: string[] = []
const print = (line: string) => {
  out.push(line)
  console.log(line)
}
const mib = (b: number) => `${(b / 1024 / 1024).toFixed(1)} MiB`
/** The hub process's memory after GC and the sockets it holds (scale-hub-process.ts "measure"). */
/** Established connections to the hub apiserver and to member apiservers (the rest: the hub's own server's). */
const connectionsTo = (m: any) => {
  const byPort = Object.entries((m.byRemotePort ?? {}) as Record<string, number>)
  const hub = byPort.filter(([p]) => Number(p) === hubPort).reduce((n, [, v]) => n + v, 0)
  const members = byPort.filter(([p]) => memberPorts.has(Number(p))).reduce((n, [, v]) => n + v, 0)
  return `${hub} to the hub apiserver, ${members} to member apiservers`
}
/**
 * The hub process's environment: its kubeconfig, HUB_LD_PRELOAD as its LD_PRELOAD, and HUB_ENV's
 * "NAME=value" words (e.g. MALLOC_ARENA_MAX=2) for the hub alone.
 */
const hubEnv = (hub: LocalCluster) => ({
  ...process.env,
  KUBECONFIG: hub.kubeconfigPath,
  ...(process.env.HUB_LD_PRELOAD ? { LD_PRELOAD: process.env.HUB_LD_PRELOAD } : {}),
  ...Object.fromEntries(
    (process.env.HUB_ENV ?? "")
      .split(/\s+/)
      .filter((w) => w.includes("="))
      .map((w) => [w.slice(0, w.indexOf("=")), w.slice(w.indexOf("=") + 1)]),
  ),
})
/**
 * A fixed piece of work (parse and print 2,000 BackupCheck-like objects, ten times) and the CPU it took
 * in this process, in ms: a slower machine (another VM's load on the host, a lower clock) shows as a
 * higher figure, which tells a hub that did more from a machine that ran slower.
 */
const calibrationText = JSON.stringify(
  Array.from({ length: 2_000 }, (_, i) => ({
    apiVersion: "fleetcheck.io/v1alpha1",
    kind: "BackupCheck",
    metadata: {
      name: `check-${i}`,
      namespace: `ns-${i % 100}`,
      labels: { team: "bench" },
      resourceVersion: `${i}`,
    },
    spec: { backup: { name: `b-${i}`, source: `s3://backups/ns/${i}` }, schedule: "*/5 * * * *" },
    status: {
      conditions: [{ type: "Verified", status: "True", reason: "RestoreSucceeded", message: `run ${i}` }],
    },
  })),
)
const calibrationCpuMs = () => {
  const before = process.cpuUsage()
  let n = 0
  for (let k = 0; k < 10; k++) n += JSON.stringify(JSON.parse(calibrationText)).length
  const used = process.cpuUsage(before)
  if (n === 0) throw new Error("unreachable")
  return (used.user + used.system) / 1000
}

/** Node and V8 flags of the hub process: --expose-gc, and HUB_NODE_FLAGS (e.g. --max-semi-space-size=16). */
const hubExecArgv = [
  "--expose-gc",
  ...(process.env.HUB_NODE_FLAGS ?? "").split(/\s+/).filter((f) => f !== ""),
]
// HUB_OWN_CORE=1: the hub alone on the machine's last core from its start to the end, every other
// process (API servers, etcd, this script) on the others: the hub as a pod given a CPU of its own by the
// kubelet's static CPU manager. Its threads inherit the core from the fork (this script is on it for the
// fork); give it what bin/run-node would on one CPU, --single-threaded-gc, in HUB_NODE_FLAGS.
const hubOwnCore = process.env.HUB_OWN_CORE === "1"
/** The machine's last core, counted before this script pins itself anywhere. */
const lastCore = availableParallelism() - 1
const pinThreads = (cores: string, pid: number) =>
  execFileSync("taskset", ["-a", "-p", "-c", cores, String(pid)])
/** The hub process alone on the last core, every other process of `pids` on the others. */
const pinHubAlone = (pids: ReadonlyMap<number, string>) => {
  for (const [pid, role] of pids)
    pinThreads(role === "hub process" ? String(lastCore) : `0-${lastCore - 1}`, pid)
}
/** Forks a hub process, on the last core alone under HUB_OWN_CORE. */
const forkHub = (
  hub: LocalCluster,
  execArgv: ReadonlyArray<string>,
  flags: ReadonlyArray<string>,
  hubLog?: number,
) => {
  if (hubOwnCore) pinThreads(String(lastCore), process.pid)
  try {
    return fork(new URL("./scale-hub-process.ts", import.meta.url).pathname, flags, {
      execArgv: [...execArgv],
      env: hubEnv(hub),
      stdio: ["ignore", hubLog ?? "ignore", hubLog ?? "inherit", "ipc"],
    })
  } finally {
    if (hubOwnCore) pinThreads(`0-${lastCore - 1}`, process.pid)
  }
}
const memberPorts = new Set<number>()
let hubPort = 0
/** Per V8 space (the larger ones): in use / committed after GC. */
const spacesLine = (m: any) =>
  ((m.spaces ?? []) as Array<{ name: string; used: number; size: number }>)
    .filter((s) => s.size >= 1024 * 1024)
    .map((s) => `${s.name.replace(/_space$/, "")} ${mib(s.used)} / ${mib(s.size)}`)
    .join(", ")
const memoryLine = (m: any) =>
  `heap ${mib(m.heap)} (heap total ${mib(m.heapTotal)}, external ${mib(m.external)}, array buffers ${mib(m.arrayBuffers)}), rss ${mib(m.rss)} (brk heap ${mib(m.rssBrk)}, other anonymous ${mib(m.rssAnonMaps)}, of which V8 heap pages ${mib(m.v8Physical)} and other threads' malloc arenas ${mib(m.rssArenas)}); V8 spaces used / committed: ${spacesLine(m)}; V8 malloced ${mib(m.v8Malloced)}; ${m.socketFds} socket fds, ${m.tcpEstablished} established TCP connections (${connectionsTo(m)})`
type ThreadTicks = Record<string, { user: number; system: number; threads: number }>
/** CPU per thread name between two readings of the hub's threads (clock ticks of 10 ms), busiest first. */
const threadsLine = (before: ThreadTicks, after: ThreadTicks, ms: number) =>
  Object.entries(after)
    .map(([name, t]) => {
      const b = before[name] ?? { user: 0, system: 0 }
      return { name, threads: t.threads, user: t.user - b.user, system: t.system - b.system }
    })
    .filter((t) => t.user + t.system > 0)
    .sort((a, b) => b.user + b.system - (a.user + a.system))
    .map(
      (t) =>
        `${t.name}${t.threads > 1 ? ` ×${t.threads}` : ""} ${(((t.user + t.system) * 10 * 100) / ms).toFixed(1)}% (${((t.system * 10 * 100) / ms).toFixed(1)}% system)`,
    )
    .join(", ")
const pct = (sorted: ReadonlyArray<number>, p: number) =>
  sorted.length === 0
    ? Number.NaN
    : sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))]!

// ---- HTTP to the apiservers: keep-alive JSON, bounded concurrency ----------------------------------
const agents = new Map<LocalCluster, https.Agent>()
const agentOf = (c: LocalCluster) => {
  let a = agents.get(c)
  if (!a) {
    a = new https.Agent({ keepAlive: true, maxSockets: 32, ca: c.caPem })
    agents.set(c, a)
  }
  return a
}
const call = (
  c: LocalCluster,
  method: string,
  path: string,
  body?: unknown,
  contentType = "application/json",
): Promise<{ status: number; body: any; text: string }> =>
  new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body)
    const req = https.request(
      new URL(path, c.server),
      {
        method,
        agent: agentOf(c),
        headers: {
          authorization: `Bearer ${c.adminToken}`,
          accept: "application/json",
          ...(payload
            ? {
                "content-type": contentType,
                "content-length": Buffer.byteLength(payload),
              }
            : {}),
        },
        timeout: 120_000,
      },
      (res) => {
        const chunks: Buffer[] = []
        res.on("data", (d: Buffer) => chunks.push(d))
        res.on("end", () => {
          const text = Buffer.concat(chunks).toString("utf8")
          let parsed: any
          try {
            parsed = text && text[0] === "{" ? JSON.parse(text) : undefined
          } catch {
            parsed = undefined
          }
          resolve({ status: res.statusCode ?? 0, body: parsed, text })
        })
      },
    )
    req.once("timeout", () => req.destroy(new Error(`${method} ${path}: timeout`)))
    req.once("error", reject)
    if (payload) req.write(payload)
    req.end()
  })
const must = async (what: string, p: Promise<{ status: number; text: string }>) => {
  const r = await p
  if (r.status >= 300) throw new Error(`${what}: ${r.status} ${r.text.slice(0, 400)}`)
  return r as { status: number; body: any; text: string }
}
const pool = async <T>(items: ReadonlyArray<T>, n: number, fn: (t: T) => Promise<void>) => {
  let i = 0
  await Promise.all(
    Array.from({ length: n }, async () => {
      while (i < items.length) await fn(items[i++]!)
    }),
  )
}

/** A watch on one apiserver: every event's type and object, until stop(). */
/** Watches the bench itself had to start again because the API server ended them (see watch). */
let watchRestarts = 0
/**
 * Watches `path` from a LIST's resourceVersion. The API server ends a watch whose reader falls behind
 * (its watch cache closes a watcher it cannot hand an event to in time: apiserver_terminated_watchers_total),
 * which this script, busy with thousands of Jobs at the wave's peak, can be: an ended watch is started
 * again from a fresh LIST whose items are handed over as ADDED, so no Job or verdict goes unseen. A watch
 * that delivers nothing, not even a bookmark, for `watchSilenceMs` is started again the same way: in one
 * 1,000 × 100 wave no verdict of one API server's members reached its restarted watch, though a LIST
 * found every one of them afterwards.
 */
const watchSilenceMs = 120_000
const watch = (c: LocalCluster, path: string, onEvent: (type: string, obj: any) => void) => {
  let req: ReturnType<typeof https.request> | undefined
  let silence: NodeJS.Timeout | undefined
  let stopped = false
  const sep = path.includes("?") ? "&" : "?"
  // A LIST that fails (the API server hung up on it at the wave's peak) is tried again a second later:
  // a watch given up would leave that server's Jobs uncompleted and its checks never verified.
  const relist = () =>
    start(true).catch((e) => {
      log(`watch ${path} on ${c.name}: ${e}; listing again in 1 s`)
      setTimeout(() => {
        if (!stopped) relist()
      }, 1_000)
    })
  const start = async (again: boolean): Promise<void> => {
    // Again: every item, in pages (one LIST of an API server's 10,000 checks outlived the API server's
    // 60 s request timeout at a wave's peak, and the count stopped there); first: only a resourceVersion.
    let list = (await must("list", call(c, "GET", `${path}${sep}limit=${again ? 500 : 1}`))).body
    if (stopped) return
    if (again)
      for (;;) {
        for (const item of list.items ?? []) onEvent("ADDED", item)
        const next = list.metadata?.continue
        if (!next) break
        list = (
          await must("list", call(c, "GET", `${path}${sep}limit=500&continue=${encodeURIComponent(next)}`))
        ).body
        if (stopped) return
      }
    let restarted = false
    const restart = (why: string) => {
      if (stopped || restarted) return
      restarted = true
      clearTimeout(silence)
      req?.destroy()
      watchRestarts++
      log(`watch ${path} on ${c.name} ${why}; listing and watching again`)
      relist()
    }
    // Bookmarks (about one a minute) tell a quiet watch from a silent one.
    const heard = () => {
      clearTimeout(silence)
      silence = setTimeout(() => restart(`delivered nothing for ${watchSilenceMs / 1000} s`), watchSilenceMs)
    }
    heard()
    req = https.request(
      new URL(
        `${path}${sep}watch=true&allowWatchBookmarks=true&resourceVersion=${list.metadata.resourceVersion}`,
        c.server,
      ),
      { ca: c.caPem, headers: { authorization: `Bearer ${c.adminToken}` } },
      (res) => {
        let buf = ""
        res.setEncoding("utf8")
        res.on("data", (d: string) => {
          heard()
          buf += d
          let nl = buf.indexOf("\n")
          while (nl >= 0) {
            const line = buf.slice(0, nl)
            buf = buf.slice(nl + 1)
            if (line) {
              const ev = JSON.parse(line)
              if (ev.type === "ERROR") restart(`answered ${ev.object?.reason ?? "an ERROR"}`)
              else onEvent(ev.type, ev.object)
            }
            nl = buf.indexOf("\n")
          }
        })
        res.on("end", () => restart("ended"))
        res.on("error", () => restart("failed"))
      },
    )
    req.on("error", () => restart("failed"))
    req.end()
  }
  const started = start(false)
  return {
    started,
    stop: () => {
      stopped = true
      clearTimeout(silence)
      req?.destroy()
    },
  }
}

/** apiserver_terminated_watchers_total summed over resources. */
const scrapeTerminatedWatchers = async (c: LocalCluster): Promise<number> => {
  const r = await must("apiserver metrics", call(c, "GET", "/metrics"))
  return r.text
    .split("\n")
    .filter((l) => l.startsWith("apiserver_terminated_watchers_total{"))
    .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(" ") + 1)), 0)
}

// ---- apiserver request counters (apiserver_request_total) --------------------------------------------
type Counts = Map<string, number> // a key from the series' labels → count
/** Sums apiserver_request_total by the key `keyOf` gives a series (undefined leaves it out). */
const scrapeRequestTotals = async (
  c: LocalCluster,
  keyOf: (labels: Record<string, string>) => string | undefined,
): Promise<Counts> => {
  const r = await must("apiserver metrics", call(c, "GET", "/metrics"))
  const counts: Counts = new Map()
  for (const line of r.text.split("\n")) {
    if (!line.startsWith("apiserver_request_total{")) continue
    const labels = Object.fromEntries([...line.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]))
    const key = keyOf(labels)
    if (key === undefined) continue
    const value = Number(line.slice(line.lastIndexOf(" ") + 1))
    counts.set(key, (counts.get(key) ?? 0) + value)
  }
  return counts
}
const verbAndResource = (labels: Record<string, string>) =>
  `${labels.verb} ${labels.resource}${labels.subresource ? `/${labels.subresource}` : ""}`
/** Requests by "VERB resource[/subresource]". */
const scrapeRequests = (c: LocalCluster) => scrapeRequestTotals(c, verbAndResource)
/** Requests an apiserver refused or failed (429, 5xx), by "CODE VERB resource[/subresource]". */
const scrapeRefused = (c: LocalCluster) =>
  scrapeRequestTotals(c, (labels) =>
    labels.code === "429" || labels.code?.startsWith("5")
      ? `${labels.code} ${verbAndResource(labels)}`
      : undefined,
  )
/** Requests an apiserver answered with 4xx or 5xx, by "CODE VERB resource[/subresource]" (409 = Conflict). */
const scrapeFailed = (c: LocalCluster) =>
  scrapeRequestTotals(c, (labels) =>
    labels.code?.startsWith("4") || labels.code?.startsWith("5")
      ? `${labels.code} ${verbAndResource(labels)}`
      : undefined,
  )
const delta = (after: Counts, before: Counts, only?: (key: string) => boolean): Counts => {
  const d: Counts = new Map()
  for (const [k, v] of after) {
    const n = v - (before.get(k) ?? 0)
    if (n > 0 && (only === undefined || only(k))) d.set(k, n)
  }
  return d
}
const sum = (c: Counts, only: (key: string) => boolean = () => true) =>
  [...c].reduce((n, [k, v]) => (only(k) ? n + v : n), 0)
const memberResources = /^\w+ (backupchecks|jobs|pods|events)(\/|$)/
const hubResources = /^\w+ (memberclusters|secrets|leases|events)(\/|$)/

// ---- the hub process ---------------------------------------------------------------------------------
/**
 * The hub's idle window (IDLE_SECONDS) in slices (IDLE_SLICE_SECONDS, 60 by default: one probe-time
 * refresh period each), each with the hub's CPU and the reconciles it finished, so a resync's burst shows
 * beside the average; CPU per thread and the GCs over the whole window.
 */
const idleWindow = async (proc: ChildProcess) => {
  const cpu0 = await ask<any>(proc, { cmd: "cpu" })
  const threads0 = await ask<any>(proc, { cmd: "threads" })
  const gc0 = await ask<any>(proc, { cmd: "gc" })
  const slices: Array<{ cpu: number; reconciles: number; seconds: number; calibrationMs: number }> = []
  let sliceCpu = cpu0
  let sliceReconciles = (await ask<any>(proc, { cmd: "reconciles" })).reconciles as number
  const reconciles0 = sliceReconciles
  for (let left = idleSeconds; left > 0; left -= idleSliceSeconds) {
    await sleep(Math.min(left, idleSliceSeconds) * 1000)
    const c = await ask<any>(proc, { cmd: "cpu" })
    const r = (await ask<any>(proc, { cmd: "reconciles" })).reconciles as number
    slices.push({
      cpu: (c.cpuMicros - sliceCpu.cpuMicros) / 1000 / (c.at - sliceCpu.at),
      reconciles: r - sliceReconciles,
      seconds: (c.at - sliceCpu.at) / 1000,
      calibrationMs: calibrationCpuMs(),
    })
    sliceCpu = c
    sliceReconciles = r
  }
  const threads1 = await ask<any>(proc, { cmd: "threads" })
  const gc1 = await ask<any>(proc, { cmd: "gc" })
  const ms = sliceCpu.at - cpu0.at
  return {
    ms,
    cpu: (sliceCpu.cpuMicros - cpu0.cpuMicros) / 1000 / ms,
    reconciles: sliceReconciles - reconciles0,
    slices,
    threads: threadsLine(threads0.threads, threads1.threads, ms),
    gc: {
      major: gc1.major.count - gc0.major.count,
      majorPauseMs: gc1.major.pauseMs - gc0.major.pauseMs,
      minor: gc1.minor.count - gc0.minor.count,
      minorPauseMs: gc1.minor.pauseMs - gc0.minor.pauseMs,
    },
  }
}

const printIdleWindow = (title: string, w: Awaited<ReturnType<typeof idleWindow>>) => {
  print(
    `${title}: ${(w.cpu * 100).toFixed(1)}% of one core (${((w.cpu * 100) / members).toFixed(3)}% per member) over ${(w.ms / 1000).toFixed(0)} s; ${w.reconciles} reconciles in it`,
  )
  const sliceCpus = w.slices.map((x) => x.cpu * 100)
  print(
    `  machine speed, the CPU a fixed piece of JSON work took in this script after each slice (same work, so a higher figure is a slower machine, e.g. another VM's load): ${w.slices.map((x) => `${x.calibrationMs.toFixed(0)} ms`).join(", ")}`,
  )
  print(
    `  per ${idleSliceSeconds} s slice: ${w.slices.map((x) => `${(x.cpu * 100).toFixed(1)}% (${x.reconciles} reconciles${Math.abs(x.seconds - idleSliceSeconds) > 1 ? `, ${x.seconds.toFixed(0)} s` : ""})`).join(", ")}; max ${Math.max(...sliceCpus).toFixed(1)}%, min ${Math.min(...sliceCpus).toFixed(1)}%`,
  )
  print(`  by thread (user + system, % of one core): ${w.threads}`)
  print(
    `  garbage collections (node's count, main-thread pauses; a major GC's incremental marking steps are not in its pause): ${w.gc.major} major, ${w.gc.majorPauseMs.toFixed(0)} ms; ${w.gc.minor} minor, ${w.gc.minorPauseMs.toFixed(0)} ms`,
  )
}

// ---- run ----------------------------------------------------------------------------------------------
const names = ["hub", ...Array.from({ length: apiserverCount }, (_, i) => `a${i + 1}`)]
log(`starting ${names.length} apiservers (hub + ${apiserverCount} for members)`)
const fleet = await startFleet({
  clusters: names.map((name) => ({
    name,
    workloads: false,
    controllerManager: false,
  })),
  log: () => {},
})
let hubProc: ChildProcess | undefined
try {
  const hubCluster = fleet.cluster("hub")
  const servers = fleet.clusters.filter((c) => c.name !== "hub")
  hubPort = Number(new URL(hubCluster.server).port)
  for (const c of servers) memberPorts.add(Number(new URL(c.server).port))
  await installFleetcheck(hubCluster, servers)
  const memberList = Array.from({ length: members }, (_, j) => {
    const name = `m-${String(j).padStart(4, "0")}`
    return { name, namespace: name, server: servers[j % servers.length]! }
  })
  const serverOf = new Map(memberList.map((m) => [m.namespace, m.server]))

  // Seed: namespaces, checks (with the hub's finalizer), then a verified status for each.
  log(`seeding ${members} × ${perMember} = ${members * perMember} checks`)
  const seedStart = Date.now()
  const verifiedAt = new Date(Date.now() - 60_000).toISOString().replace(/\.\d{3}Z$/, "Z")
  const startedAt = new Date(Date.now() - 65_000).toISOString().replace(/\.\d{3}Z$/, "Z")
  await pool(memberList, 16, async (m) => {
    await must(
      `ns ${m.namespace}`,
      call(m.server, "POST", "/api/v1/namespaces", {
        metadata: { name: m.namespace },
      }),
    )
  })
  const work = memberList.flatMap((m) => Array.from({ length: perMember }, (_, k) => ({ m, k })))
  let seeded = 0
  await Promise.all(
    servers.map((server) =>
      pool(
        work.filter((w) => w.m.server === server),
        8,
        async ({ m, k }) => {
          const name = `check-${String(k).padStart(3, "0")}`
          const created = await must(
            `create ${m.namespace}/${name}`,
            call(m.server, "POST", `${group}/namespaces/${m.namespace}/backupchecks`, {
              apiVersion: "fleetcheck.io/v1alpha1",
              kind: "BackupCheck",
              metadata: {
                name,
                namespace: m.namespace,
                finalizers: [finalizerName],
                labels: { team: "bench" },
              },
              spec: {
                backup: {
                  name: `${name}-backup`,
                  source: `s3://backups/${m.namespace}/${name}`,
                },
                jobTemplate: {
                  spec: {
                    template: {
                      spec: {
                        containers: [{ name: "restore", image: "restore:1.4" }],
                      },
                    },
                  },
                },
              },
            }),
          )
          const parsed = parseBackupCheck(created.body)
          if (!parsed.success) throw new Error(`seeded check does not parse: ${parsed.error}`)
          const uid: string = created.body.metadata.uid
          await must(
            `status ${m.namespace}/${name}`,
            call(
              m.server,
              "PATCH",
              `${group}/namespaces/${m.namespace}/backupchecks/${name}/status`,
              {
                metadata: {
                  resourceVersion: created.body.metadata.resourceVersion,
                },
                status: {
                  observedGeneration: 1,
                  conditions: [
                    {
                      type: "Verified",
                      status: "True",
                      observedGeneration: 1,
                      lastTransitionTime: verifiedAt,
                      reason: "RestoreSucceeded",
                      message: `${name}-backup restored and verified in 5s`,
                    },
                  ],
                  lastRun: {
                    jobName: jobNameFor(name, "g1"),
                    runID: "g1",
                    startTime: startedAt,
                    completionTime: verifiedAt,
                    result: "Succeeded",
                    traceID: traceparentFor(uid, "g1").traceID,
                    specHash: specHashFor(parsed.data.spec),
                  },
                  lastSuccessfulTime: verifiedAt,
                },
              },
              "application/merge-patch+json",
            ),
          )
          if (++seeded % 5000 === 0) log(`seeded ${seeded}`)
        },
      ),
    ),
  )
  const seedSeconds = (Date.now() - seedStart) / 1000
  log(`seeded in ${seedSeconds.toFixed(0)} s`)

  // Registration Secrets before the hub starts: its start is then the whole fleet's engagement.
  for (const m of memberList) {
    await must(
      `secret ${m.name}`,
      call(hubCluster, "POST", "/api/v1/namespaces/fleetcheck-system/secrets", {
        apiVersion: "v1",
        kind: "Secret",
        metadata: {
          name: m.name,
          namespace: "fleetcheck-system",
          labels: { "fleetcheck.io/kubeconfig": "true", env: "bench" },
          annotations: { [namespacesAnnotation]: m.namespace },
        },
        data: {
          kubeconfig: Buffer.from(m.server.kubeconfig).toString("base64"),
        },
      }),
    )
  }
  void registerWithSecret // registration by Secret, as registerWithSecret does, plus the namespaces annotation

  const allServers = [hubCluster, ...servers]
  const scrapeAll = async () =>
    new Map(await Promise.all(allServers.map(async (c) => [c, await scrapeRequests(c)] as const)))
  const beforeStart = await scrapeAll()
  type Scrapes = Awaited<ReturnType<typeof scrapeAll>>
  /** What a hub sent between two scrapes: requests to the member API servers, and by kind to the hub's. */
  const requestsBetween = (before: Scrapes, after: Scrapes) => {
    let toMembers = 0
    for (const c of servers)
      toMembers += sum(delta(after.get(c)!, before.get(c)!), (k) => memberResources.test(k))
    const toHub = delta(after.get(hubCluster)!, before.get(hubCluster)!, (k) => hubResources.test(k))
    return { toMembers, toHub }
  }

  // The hub.
  log(`starting the hub (flags: ${hubFlags.join(" ") || "defaults"})`)
  const hubStart = Date.now()
  // HUB_LOG: the hub's logs (stdout) and stderr kept in a file, to read what its reconcile errors were.
  const hubLog = process.env.HUB_LOG ? openSync(process.env.HUB_LOG, "a") : undefined
  if (hubOwnCore) for (const pid of fleetProcesses(fleet.runDir).keys()) pinThreads(`0-${lastCore - 1}`, pid)
  hubProc = forkHub(hubCluster, hubExecArgv, hubFlags, hubLog)
  const proc = hubProc
  // HUB_NICE (e.g. -10): the hub gets the CPU before the apiservers, etcd and this script that share the
  // machine's cores, so its latencies are its own rather than the machine's queue.
  if (process.env.HUB_NICE && proc.pid !== undefined) setPriority(proc.pid, Number(process.env.HUB_NICE))
  const port = await servingPort(proc)
  const hubUrl = `http://127.0.0.1:${port}`
  const startProfile = process.env.PROFILE_START
  if (startProfile) await ask(proc, { cmd: "profile-start" })

  // Start burst: requests per apiserver per 5 s while the fleet engages.
  let peakWindow = { server: "", requests: 0 }
  let last = beforeStart
  let readyAt = 0
  let firstReadyAt = 0
  while (true) {
    await sleep(5_000)
    const now = await scrapeAll()
    for (const c of allServers) {
      const n = sum(delta(now.get(c)!, last.get(c)!), (k) =>
        (c === hubCluster ? hubResources : memberResources).test(k),
      )
      if (n > peakWindow.requests) peakWindow = { server: c.name, requests: n }
    }
    last = now
    const list = await must("memberclusters", call(hubCluster, "GET", `${group}/memberclusters`))
    const ready = (list.body.items as any[]).filter(
      (mc) =>
        (mc.status?.conditions ?? []).some((x: any) => x.type === "Ready" && x.status === "True") &&
        mc.status?.counts?.verified === perMember,
    ).length
    if (ready > 0 && firstReadyAt === 0) firstReadyAt = Date.now()
    log(`${ready}/${members} members Ready with ${perMember} verified checks`)
    if (ready === members) {
      readyAt = Date.now()
      break
    }
    if (Date.now() - hubStart > 30 * 60_000) throw new Error("the fleet did not become Ready in 30 min")
  }
  if (startProfile) await ask(proc, { cmd: "profile-stop", path: startProfile })
  const startCpu = await ask<any>(proc, { cmd: "cpu" })
  const afterStart = await scrapeAll()
  const startSeconds = (readyAt - hubStart) / 1000
  const burst = (c: LocalCluster) =>
    delta(afterStart.get(c)!, beforeStart.get(c)!, (k) =>
      (c === hubCluster ? hubResources : memberResources).test(k),
    )
  const memberBurst: Counts = new Map()
  for (const c of servers) for (const [k, v] of burst(c)) memberBurst.set(k, (memberBurst.get(k) ?? 0) + v)
  const perServerLists = servers.map((c) => sum(burst(c), (k) => k.startsWith("LIST ")))

  // Converged: settle, then measure memory, CPU, requests and status writes over the idle window.
  await sleep(20_000)
  const mem0 = await ask<any>(proc, { cmd: "measure" })
  if (process.env.SNAPSHOT) await ask(proc, { cmd: "snapshot", path: process.env.SNAPSHOT })
  const scrape0 = await ask<any>(proc, { cmd: "scrape" })
  const httpT0 = performance.now()
  const httpBody = await (await fetch(`${hubUrl}/metrics`)).text()
  const httpMs = performance.now() - httpT0
  log(`idle window of ${idleSeconds} s`)
  const idleBefore = await scrapeAll()
  const idleProfile = process.env.PROFILE_IDLE
  if (idleProfile) await ask(proc, { cmd: "profile-start" })
  const idleHeapProfile = process.env.PROFILE_IDLE_HEAP
  if (idleHeapProfile)
    await ask(proc, { cmd: "heap-sampling-start", promoted: process.env.PROFILE_IDLE_HEAP_PROMOTED === "1" })
  const idle = await idleWindow(proc)
  if (idleProfile) await ask(proc, { cmd: "profile-stop", path: idleProfile })
  if (idleHeapProfile) await ask(proc, { cmd: "heap-sampling-stop", path: idleHeapProfile })
  const idleAfter = await scrapeAll()
  const mem1 = await ask<any>(proc, { cmd: "measure" })
  const idleMinutes = idle.ms / 60_000
  const { toMembers: memberIdle, toHub: hubIdle } = requestsBetween(idleBefore, idleAfter)
  const statusWrites = sum(hubIdle, (k) => /^(PATCH|PUT) memberclusters\/status$/.test(k))
  const checkWritesIdle = servers.reduce(
    (n, c) =>
      n +
      sum(delta(idleAfter.get(c)!, idleBefore.get(c)!), (k) =>
        /^(PATCH|PUT|POST|DELETE) (backupchecks|jobs)/.test(k),
      ),
    0,
  )

  print(
    `fleet-scale: ${members} members × ${perMember} checks = ${members * perMember} checks on ${apiserverCount} member apiservers (+1 hub apiserver), hub flags: ${hubFlags.join(" ") || "defaults"}`,
  )
  print(`seeded (create + status) in ${seedSeconds.toFixed(0)} s`)
  print(
    `hub start → all ${members} members Ready with every check verified: ${startSeconds.toFixed(1)} s (first member after ${((firstReadyAt - hubStart) / 1000).toFixed(1)} s; polled every 5 s); hub CPU since its process started ${(startCpu.cpuMicros / 1e6).toFixed(1)} s`,
  )
  print(
    `start burst on member apiservers: ${[...memberBurst]
      .sort()
      .map(([k, v]) => `${k} ${v}`)
      .join(", ")}`,
  )
  print(
    `  LISTs per apiserver: min ${Math.min(...perServerLists)} max ${Math.max(...perServerLists)}; busiest 5 s on one apiserver: ${peakWindow.requests} requests (${peakWindow.server})`,
  )
  print(
    `  writes to BackupChecks/Jobs during start: ${sum(memberBurst, (k) => /^(PATCH|PUT|POST|DELETE) /.test(k))} (0 = the seeded status was what the hub would write)`,
  )
  print(
    `start burst on the hub apiserver: ${[...burst(hubCluster)]
      .sort()
      .map(([k, v]) => `${k} ${v}`)
      .join(", ")}`,
  )
  print(
    `memory after GC, converged: heap ${mib(mem0.heap)} (heap total ${mib(mem0.heapTotal)}, external ${mib(mem0.external)}, array buffers ${mib(mem0.arrayBuffers ?? 0)}), rss ${mib(mem0.rss)}; per member ${mib(mem0.heap / members)} heap; per check ${(mem0.heap / (members * perMember) / 1024).toFixed(2)} KiB heap (whole heap / checks)`,
  )
  print(
    `memory after GC, after the ${idleSeconds} s idle window: heap ${mib(mem1.heap)} (${mem1.heap >= mem0.heap ? "+" : ""}${mib(mem1.heap - mem0.heap)}), rss ${mib(mem1.rss)} (${mem1.rss >= mem0.rss ? "+" : ""}${mib(mem1.rss - mem0.rss)})`,
  )
  print(`  before the events and the wave: ${memoryLine(mem1)}`)
  printIdleWindow("converged CPU", idle)
  print(
    `API requests at steady state: ${(memberIdle / members / idleMinutes).toFixed(1)} per member per minute to member apiservers, ${(sum(hubIdle) / members / idleMinutes).toFixed(1)} per member per minute to the hub apiserver (${[
      ...hubIdle,
    ]
      .sort()
      .map(([k, v]) => `${k} ${v}`)
      .join(", ")})`,
  )
  print(
    `MemberCluster status writes: ${(statusWrites / idleMinutes).toFixed(1)} per minute (${(statusWrites / members / idleMinutes).toFixed(2)} per member per minute); BackupCheck/Job writes while idle: ${checkWritesIdle}`,
  )
  print(
    `/metrics: ${scrape0.series} series, ${(scrape0.bytes / 1024 / 1024).toFixed(2)} MB, render ${scrape0.ms.toFixed(0)} ms in-process (longest event-loop stall ${scrape0.stallMs.toFixed(0)} ms); over HTTP ${httpMs.toFixed(0)} ms, ${httpBody.length} bytes`,
  )

  // Steady events: metadata-only updates of random checks, spread over members (event-driver.ts), once
  // per EVENT_DRIVERS entry; what the member API servers counted and the CPU of every process beside.
  const rtPriority = process.env.EVENT_RT ?? "1"
  const phases = (process.env.EVENT_DRIVERS ?? (process.env.EVENT_RT ? "h2+rt" : "h2"))
    .split(",")
    .map((p) => p.trim())
    .filter((p) => p !== "")
  const eventInflight = env("EVENT_INFLIGHT", 256)
  const pids = fleetProcesses(fleet.runDir)
  pids.set(process.pid, "driver")
  if (proc.pid !== undefined) pids.set(proc.pid, "hub process")
  const memberNames = new Set(servers.map((c) => c.name))
  const profilePath = process.env.PROFILE_EVENTS
  const heapProfilePath = process.env.PROFILE_EVENTS_HEAP
  const quietSeconds = env("EVENT_QUIET_SECONDS", 5)
  const settledPercent = env("EVENT_SETTLED_PERCENT", 30)
  const settleSeconds = env("EVENT_SETTLE_SECONDS", 300)
  // The fleet's Go processes (API servers, etcd) inherit this script's environment.
  const goEnv = ["GOMAXPROCS", "GOGC", "GOMEMLIMIT"]
    .filter((n) => process.env[n])
    .map((n) => `${n}=${process.env[n]}`)
  // EVENT_SECONDS=0: no events at all (nothing printed for them).
  for (const [phaseIndex, phase] of (eventSeconds > 0 ? phases : []).entries()) {
    // "h1", "h2" or "etcd", then "@<rate>" for another rate than EVENT_RATE, then "+rt", then "+core",
    // "+main" or "+pod[=<millicores>]".
    const parsed = /^(h1|h2|etcd)(?:@(\d+))?(\+rt)?(\+core|\+main|\+pod(?:=(\d+))?)?$/.exec(phase)
    if (!parsed)
      throw new Error(
        `EVENT_DRIVERS: ${phase} is not h1|h2|etcd[@rate][+rt][+core|+main|+pod[=<millicores>]]`,
      )
    const transport = parsed[1] as EventTransport
    const rate = parsed[2] ? Number(parsed[2]) : eventRate
    // +rt (or EVENT_RT alone): for the events only, every hub thread runs SCHED_FIFO (chrt), so the ~30
    // runnable apiserver, etcd and driver threads on 2 cores cannot queue it (nice only weighs the main
    // thread against each of them); the kernel still keeps 5% of each core for the others.
    const rt = parsed[3] !== undefined
    // +core: for the events only, the hub alone on the last core and every other process of the fleet
    // (API servers, etcd, this driver) on the others (taskset, every thread): the hub as a pod with a
    // core of its own would run, at its ordinary priority. Such a pod's hub runs with --single-threaded-gc
    // (bin/run-node sees one CPU); this one is pinned after its start, so give it in HUB_NODE_FLAGS.
    // +main: the hub's main thread alone on the last core, its other threads (V8's workers, libuv's
    // pool) with the rest: what the event loop does when neither the fleet nor its own GC workers take
    // its core, as on a node with cores to spare.
    const ownCore = parsed[4] === "+core"
    const mainCore = parsed[4] === "+main"
    // +pod: the kubelet's CPU requests, as cgroup v1 cpu.shares (request millicores × 1024 / 1000): the
    // hub in a group of its own with its request (default 1000m), every other process (the fleet, this
    // driver) in one group with the rest of the machine's cores requested, a node whose other pods
    // request all it has left. All at ordinary priority, on all cores: only the weights differ.
    const podMillicores = parsed[4]?.startsWith("+pod") ? Number(parsed[5] ?? 1000) : undefined
    const pinned = ownCore
      ? `hub alone on core ${lastCore}`
      : mainCore
        ? `hub's main thread alone on core ${lastCore}`
        : podMillicores !== undefined
          ? `hub in a cpu cgroup requesting ${podMillicores}m`
          : ""
    const label = `${transport} at ${rate}/s${rt ? `, hub SCHED_FIFO ${rtPriority}` : ""}${pinned ? `, ${pinned}, ${podMillicores !== undefined ? `the rest in one requesting ${(lastCore + 1) * 1000 - podMillicores}m` : `the rest on cores 0-${lastCore - 1}`}` : ""}${goEnv.length ? `, API servers and etcd with ${goEnv.join(" ")}` : ""}`
    // What the machine's processes use with no events: the floor the events' CPU is read against. Read
    // again until the machine has settled (at 1,000 × 100 the member API servers kept most of a core busy
    // for minutes after the seeding, and events then measured their load as much as the hub), up to a
    // limit, so that a run says whether it began on a quiet machine.
    const settleStart = Date.now()
    let quiet: CpuUse
    for (;;) {
      const quietWatch = watchCpu(pids)
      await sleep(quietSeconds * 1000)
      quiet = quietWatch.stop()
      if (quiet.busyPercent <= settledPercent || Date.now() - settleStart >= settleSeconds * 1000) break
      log(
        `events (${label}): ${quiet.busyPercent.toFixed(0)}% of a core busy without events, above ${settledPercent}%; waiting for the machine to settle`,
      )
    }
    const settleWaited = (Date.now() - settleStart) / 1000 - quietSeconds
    const settled =
      quiet.busyPercent <= settledPercent
        ? settleWaited >= 1
          ? `; began after ${settleWaited.toFixed(0)} s waiting for the machine to settle below ${settledPercent}% of a core`
          : ""
        : `; the machine did not settle below ${settledPercent}% of a core within ${settleSeconds} s (EVENT_SETTLE_SECONDS)`
    log(`events (${label}): ${rate}/s for ${eventSeconds} s`)
    if (profilePath) await ask(proc, { cmd: "profile-start" })
    if (heapProfilePath)
      await ask(proc, {
        cmd: "heap-sampling-start",
        promoted: true,
        all: process.env.PROFILE_EVENTS_HEAP_ALL === "1",
      })
    const chrt = (args: ReadonlyArray<string>) => execFileSync("chrt", [...args, String(proc.pid)])
    const evCpu0 = await ask<any>(proc, { cmd: "cpu" })
    const evThreads0 = await ask<any>(proc, { cmd: "threads" })
    const samples0 = await Promise.all(
      servers.map(async (c) => serverSample((await must("metrics", call(c, "GET", "/metrics"))).text)),
    )
    const cpuWatch = watchCpu(pids)
    if (rt) chrt(["-a", "-f", "-p", rtPriority])
    if (ownCore) pinHubAlone(pids)
    const pods =
      podMillicores === undefined
        ? undefined
        : cpuGroups({ hub: podMillicores, node: (lastCore + 1) * 1000 - podMillicores })
    if (pods) for (const [pid, role] of pids) pods.move(pid, role === "hub process" ? "hub" : "node")
    if (mainCore) {
      for (const pid of pids.keys()) pinThreads(`0-${lastCore - 1}`, pid)
      // Without -a, taskset sets the one thread whose id it is given: the process id is its main thread.
      execFileSync("taskset", ["-p", "-c", String(lastCore), String(proc.pid)])
    }
    await ask(proc, { cmd: "latency-start" })
    const drive = await driveEvents({
      transport,
      rate,
      seconds: eventSeconds,
      maxInflight: eventInflight,
      socketsPerServer: env("EVENT_SOCKETS", 32),
      sessionsPerServer: env("EVENT_H2_SESSIONS", 1),
      etcdUrl: fleet.etcdUrl,
      target: (i) => {
        const m = memberList[i % members]!
        const k = Math.floor(Math.random() * perMember)
        return {
          server: m.server,
          path: `${group}/namespaces/${m.namespace}/backupchecks/check-${String(k).padStart(3, "0")}`,
          body: JSON.stringify({ metadata: { annotations: { "bench/tick": `${phaseIndex}-${i}` } } }),
          key: `${m.namespace}/check-${String(k).padStart(3, "0")}`,
        }
      },
    })
    const cpu = cpuWatch.stop()
    await sleep(2_000)
    const lat = await ask<any>(proc, { cmd: "latency-stop" })
    if (rt) chrt(["-a", "-o", "-p", "0"])
    // Back where the run keeps them: the hub alone on the last core under HUB_OWN_CORE, else all anywhere.
    if (ownCore || mainCore) {
      if (hubOwnCore) pinHubAlone(pids)
      else for (const pid of pids.keys()) pinThreads(`0-${lastCore}`, pid)
    }
    if (pods) pods.remove(pids.keys())
    const evCpu1 = await ask<any>(proc, { cmd: "cpu" })
    const evThreads1 = await ask<any>(proc, { cmd: "threads" })
    const samples1 = await Promise.all(
      servers.map(async (c) => serverSample((await must("metrics", call(c, "GET", "/metrics"))).text)),
    )
    if (heapProfilePath)
      await ask(proc, {
        cmd: "heap-sampling-stop",
        path: phases.length > 1 ? `${heapProfilePath}.${phaseIndex}` : heapProfilePath,
      })
    if (profilePath)
      await ask(proc, {
        cmd: "profile-stop",
        path: phases.length > 1 ? `${profilePath}.${phaseIndex}` : profilePath,
      })
    const evCpu = (evCpu1.cpuMicros - evCpu0.cpuMicros) / 1000 / (evCpu1.at - evCpu0.at)
    // Each take: [key, taken at (epoch ms), wait ms, the main thread's run delay during it ms].
    const takes = lat.takes as Array<[string, number, number, number]>
    const waits = takes.map(([, , w]) => w).sort((a, b) => a - b)
    const counted = serversDelta(
      servers.map((c) => c.name),
      samples0,
      samples1,
    )
    // What reached the member API servers: their PATCHes, or for writes into storage the events their
    // watch caches read from etcd.
    const viaStorage = transport === "etcd"
    const delivered = sum(viaStorage ? counted.cacheEventsByServer : counted.byServer)
    const answered = drive.latencies.length
    const seconds = drive.wallMs / 1000
    const steady = [...drive.perSecond].slice(1).sort((a, b) => a - b)
    print(
      `events (${label}): ${drive.sent} updates due at ${rate}/s for ${eventSeconds} s; the driver sent ${drive.sent - drive.dropped} (${((drive.sent - drive.dropped) / eventSeconds).toFixed(0)}/s), dropped ${drive.dropped} at its cap of ${eventInflight} in flight (cap reached at ${drive.capTicks} of ${drive.ticks} 10 ms ticks); answers ${[...drive.codes].map(([k, v]) => `${k} ${v}`).join(", ")}; answered per second (after the first) min ${steady[0] ?? 0}, median ${pct(steady, 50)}; ${viaStorage ? `written into etcd; the member API servers' watch caches read ${delivered} BackupCheck events (${(delivered / seconds).toFixed(0)}/s over the ${seconds.toFixed(1)} s to the last answer; by server ${[...counted.cacheEventsByServer].map(([k, v]) => `${k} ${v}`).join(", ")}) and sent ${counted.watchEvents} to watchers` : `the member API servers counted ${delivered} PATCHes of BackupChecks (${(delivered / seconds).toFixed(0)}/s over the ${seconds.toFixed(1)} s to the last answer; by code ${[...counted.codes].map(([k, v]) => `${k} ${v}`).join(", ")}; by server ${[...counted.byServer].map(([k, v]) => `${k} ${v}`).join(", ")})`}`,
    )
    const ms = (s: number) => `${(s * 1000).toFixed(1)} ms`
    if (!viaStorage)
      print(
        `events (${label}): PATCH round trip at the driver p50 ${pct(drive.latencies, 50)?.toFixed(1)} ms, p99 ${pct(drive.latencies, 99)?.toFixed(1)} ms, max ${drive.latencies.at(-1)?.toFixed(0)} ms over ${answered}; at the API servers (apiserver_request_duration_seconds, interpolated in buckets) p50 ${ms(histogramQuantile(counted.patchSeconds, 0.5))}, p99 ${ms(histogramQuantile(counted.patchSeconds, 0.99))}; their etcd updates (etcd_request_duration_seconds) p50 ${ms(histogramQuantile(counted.etcdSeconds, 0.5))}, p99 ${ms(histogramQuantile(counted.etcdSeconds, 0.99))}; driver: ${drive.connections} TLS connections opened, event-loop delay p99 ${drive.loopP99Ms.toFixed(1)} ms, max ${drive.loopMaxMs.toFixed(0)} ms`,
      )
    const cpuLine = (c: typeof cpu) => {
      const role = (r: string) => c.byRole.get(r) ?? 0
      const members = [...c.byRole].filter(([r]) => memberNames.has(r)).reduce((n, [, v]) => n + v, 0)
      const named = [...c.byRole.values()].reduce((n, v) => n + v, 0)
      return {
        members,
        text: `driver ${role("driver").toFixed(0)}, member API servers ${members.toFixed(0)}, hub API server ${role(hubCluster.name).toFixed(0)}, etcd ${role("etcd").toFixed(0)}, hub ${role("hub process").toFixed(0)}, other processes ${c.others.reduce((n, [, v]) => n + v, 0).toFixed(0)} (${c.others
          .slice(0, 3)
          .map(([k, v]) => `${k} ${v.toFixed(0)}`)
          .join(
            ", ",
          )}), no process living a second (the kernel, short commands) ${Math.max(0, c.busyPercent - named - c.others.reduce((n, [, v]) => n + v, 0)).toFixed(0)}; machine idle ${c.idlePercent.toFixed(0)}% of ${c.cores.toFixed(1)} cores`,
      }
    }
    const busy = cpuLine(cpu)
    const still = cpuLine(quiet)
    // Member API server CPU per delivered PATCH, above their quiet floor.
    const perPatchMs = ((busy.members - still.members) * 10 * seconds) / Math.max(1, delivered)
    print(
      `events (${label}): CPU, % of one core (/proc): while sending: ${busy.text}; in the ${quietSeconds} s before, no events: ${still.text}; member API servers ${perPatchMs.toFixed(2)} ms of CPU per ${viaStorage ? "event" : "PATCH"} above that floor, the driver ${(drive.cpuMs / Math.max(1, answered)).toFixed(3)} ms${settled}`,
    )
    if (delivered / seconds < rate * 0.95)
      print(
        `events (${label}): ${rate}/s NOT delivered (${(delivered / seconds).toFixed(0)}/s): the machine was ${cpu.idlePercent.toFixed(0)}% idle, the member API servers used ${(busy.members / 100).toFixed(2)} cores at ${perPatchMs.toFixed(2)} ms per PATCH (${rate}/s would need ${((perPatchMs * rate) / 1000 + still.members / 100).toFixed(2)} cores for them alone), the driver ${(cpu.byRole.get("driver") ?? 0).toFixed(0)}% of one core; PATCH p99 at the API servers ${ms(histogramQuantile(counted.patchSeconds, 0.99))}`,
      )
    print(
      `event → reconcile start (workqueue wait, ms resolution) under ${(delivered / seconds).toFixed(0)} updates/s delivered (API servers' count) for ${eventSeconds} s: p50 ${pct(waits, 50)} ms, p99 ${pct(waits, 99)} ms, max ${waits.at(-1)} ms over ${waits.length} reconciles; event-loop delay p99 ${lat.loopP99Ms.toFixed(1)} ms, max ${lat.loopMaxMs.toFixed(0)} ms, event-loop utilization ${(lat.elu * 100).toFixed(0)}%, hub CPU ${(evCpu * 100).toFixed(0)}% of a core${rt ? `, hub SCHED_FIFO ${rtPriority}` : ", hub not real-time"}${pinned ? `, ${pinned}` : ""}${drive.dropped ? ` (${drive.dropped} updates not sent: ${eventInflight} in flight)` : ""}`,
    )
    // The long waits against the hub's GC pauses: a wait that began before a pause ended and ended after it
    // began overlapped it.
    const longWaits = takes.filter(([, , w]) => w >= 5)
    const pauses = lat.gcPauses as Array<[number, number, "major" | "minor"]>
    const pausesOf = (kind: "major" | "minor") => {
      const of = pauses.filter(([, , k]) => k === kind)
      return `${of.length} ${kind} (${of.reduce((n, [, d]) => n + d, 0).toFixed(0)} ms, longest ${Math.max(0, ...of.map(([, d]) => d)).toFixed(1)} ms)`
    }
    const overlapping = longWaits.filter(([, at, w]) => pauses.some(([s, d]) => s < at && s + d > at - w - 1))
    // And against the other reconciles begun meanwhile: a wait behind many was a burst's queue.
    const takenAt = takes.map(([, at]) => at).sort((a, b) => a - b)
    const takenWithin = (from: number, to: number) => {
      let n = 0
      for (const t of takenAt) if (t > from && t < to) n++
      return n
    }
    const behind = longWaits.map(([, at, w]) => takenWithin(at - w - 1, at)).sort((a, b) => a - b)
    print(
      `event → reconcile start: ${longWaits.length} waits of 5 ms or more, ${overlapping.length} of them overlapping one of the hub's ${pauses.length} GC pauses in the window (${pauses.reduce((n, [, d]) => n + d, 0).toFixed(0)} ms in all, longest ${Math.max(0, ...pauses.map(([, d]) => d)).toFixed(1)} ms; ${pausesOf("major")}, ${pausesOf("minor")}); reconciles begun during such a wait p50 ${behind.length > 0 ? pct(behind, 50) : 0}, max ${behind.at(-1) ?? 0}; the hub's main thread was runnable but not running (kernel run delay) ${(lat.runDelayMs as number).toFixed(0)} ms of the window; the hub's threads (% of one core): ${threadsLine(evThreads0.threads, evThreads1.threads, evCpu1.at - evCpu0.at)}`,
    )
    // Each wait less the time the kernel kept the hub's main thread off a core meanwhile: what the hub
    // itself took (its event loop busy with other work, GC), apart from the cores it shared.
    const ownWaits = takes.map(([, , w, d]) => Math.max(0, w - d)).sort((a, b) => a - b)
    const delays = takes.map(([, , , d]) => d).sort((a, b) => a - b)
    print(
      `event → reconcile start less the main thread's run delay during each wait: p50 ${pct(ownWaits, 50)?.toFixed(1)} ms, p99 ${pct(ownWaits, 99)?.toFixed(1)} ms, max ${ownWaits.at(-1)?.toFixed(0)} ms; the run delay within a wait p50 ${pct(delays, 50)?.toFixed(1)} ms, p99 ${pct(delays, 99)?.toFixed(1)} ms`,
    )
    const e2e = answerToReconcile(
      drive.answers,
      takes.map(([key, at]) => [key, at] as const),
    )
    const e2eMs = (p: number) => pct(e2e.delays, p)?.toFixed(1)
    print(
      `event → reconcile start seen from outside the hub (from the driver reading the write's answer to a hub worker taking the check; watch delivery, decoding and workqueue wait, 0 when the reconcile began first): p50 ${e2eMs(50)} ms, p99 ${e2eMs(99)} ms, max ${e2eMs(100)} ms over ${e2e.delays.length} writes${e2e.unseen ? `, ${e2e.unseen} with no reconcile seen` : ""}${rt ? `, hub SCHED_FIFO ${rtPriority}` : ", hub not real-time"}`,
    )
  }

  if (process.env.SKIP_WAVE !== "1" && wavePercent > 0) {
    // The wave: the first P% of every member's checks get a daily schedule at one minute; nothing else changes.
    const perMemberWave = Math.max(1, Math.round((perMember * wavePercent) / 100))
    const waveChecks = memberList.flatMap((m) =>
      Array.from({ length: perMemberWave }, (_, k) => ({
        m,
        name: `check-${String(k).padStart(3, "0")}`,
      })),
    )
    const patchBy = Date.now() + 60_000 + waveChecks.length * wavePatchMs
    const slot = Math.ceil((patchBy + 20_000) / 60_000) * 60_000
    const slotDate = new Date(slot)
    const schedule = `${slotDate.getUTCMinutes()} ${slotDate.getUTCHours()} * * *`
    const runID = runIDForTime(slot)
    log(
      `wave: ${waveChecks.length} checks scheduled "${schedule}" (run ${runID}, in ${((slot - Date.now()) / 1000).toFixed(0)} s)`,
    )
    // The script plays the Job controller: a restore Job completes jobHoldMs after it appears.
    let active = 0
    let peakActive = 0
    let jobsSeen = 0
    const timers = new Set<NodeJS.Timeout>()
    const seen = new Set<string>()
    const completer = servers.map((c) =>
      watch(c, `/apis/batch/v1/jobs?labelSelector=${encodeURIComponent(labelBackupCheck)}`, (type, job) => {
        const key = `${c.name}/${job.metadata.namespace}/${job.metadata.name}`
        if (type !== "ADDED" || seen.has(key) || job.status?.conditions?.length) return
        seen.add(key)
        jobsSeen++
        active++
        peakActive = Math.max(peakActive, active)
        // A Job controller retries a status write the API server failed (a 504 under the wave's load);
        // one given up would leave its check running, and the wave unfinished, for the bench's fault.
        const complete = (attempt: number) => {
          const now = new Date().toISOString().replace(/\.\d{3}Z$/, "Z")
          const started = new Date(Date.now() - jobHoldMs).toISOString().replace(/\.\d{3}Z$/, "Z")
          const retry = (why: string) => {
            log(`completing ${key}: ${why}; again in 1 s (attempt ${attempt})`)
            const again = setTimeout(() => {
              timers.delete(again)
              complete(attempt + 1)
            }, 1_000)
            timers.add(again)
          }
          call(
            c,
            "PATCH",
            `/apis/batch/v1/namespaces/${job.metadata.namespace}/jobs/${job.metadata.name}/status`,
            {
              status: {
                startTime: started,
                completionTime: now,
                succeeded: 1,
                conditions: [
                  {
                    type: "SuccessCriteriaMet",
                    status: "True",
                    lastTransitionTime: now,
                    lastProbeTime: now,
                  },
                  {
                    type: "Complete",
                    status: "True",
                    lastTransitionTime: now,
                    lastProbeTime: now,
                  },
                ],
              },
            },
            "application/merge-patch+json",
          ).then(
            (r) => {
              if (r.status >= 300 && r.status !== 404) return retry(`${r.status} ${r.text.slice(0, 300)}`)
              if (r.status === 404) log(`completing ${key}: 404, the Job is gone`)
              active--
            },
            (e) => retry(String(e)),
          )
        }
        const t = setTimeout(() => {
          timers.delete(t)
          complete(1)
        }, jobHoldMs)
        timers.add(t)
      }),
    )
    const done = new Map<string, number>() // namespace/name → verified at
    const waveSet = new Set(waveChecks.map((w) => `${w.m.namespace}/${w.name}`))
    const checkWatch = servers.map((c) =>
      watch(c, `${group}/backupchecks`, (_type, o) => {
        const key = `${o.metadata.namespace}/${o.metadata.name}`
        if (!waveSet.has(key) || done.has(key)) return
        const lr = o.status?.lastRun
        const v = (o.status?.conditions ?? []).find((x: any) => x.type === "Verified")
        if (lr?.runID === runID && lr.result === "Succeeded" && v?.status === "True")
          done.set(key, Date.now())
      }),
    )
    await Promise.all([...completer, ...checkWatch].map((w) => w.started))
    await pool(waveChecks, 32, async ({ m, name }) => {
      await must(
        `schedule ${m.namespace}/${name}`,
        call(
          m.server,
          "PATCH",
          `${group}/namespaces/${m.namespace}/backupchecks/${name}`,
          { spec: { schedule } },
          "application/merge-patch+json",
        ),
      )
    })
    log(`schedules patched; waiting for ${slotDate.toISOString()}`)
    if (Date.now() > slot)
      throw new Error("patching the schedules took past the slot; rerun with a larger WAVE_PATCH_MS")
    const waveCpu0 = await ask<any>(proc, { cmd: "cpu" })
    const refusedBefore = await Promise.all(servers.map(scrapeRefused))
    const failedBefore = await Promise.all(allServers.map(scrapeFailed))
    const terminatedBefore = await Promise.all(servers.map(scrapeTerminatedWatchers))
    let peakSockets = { socketFds: 0, tcpEstablished: 0 }
    let peakRss = 0
    while (done.size < waveChecks.length) {
      await sleep(2_000)
      const now = await ask<any>(proc, { cmd: "sockets" })
      if (now.tcpEstablished > peakSockets.tcpEstablished) peakSockets = now
      peakRss = Math.max(peakRss, now.rss)
      if (Date.now() > slot)
        log(`wave: ${done.size}/${waveChecks.length} verified, ${active} Jobs active, ${jobsSeen} created`)
      // Cut short (a lock hold has an end): the figures below are then over the checks verified so far.
      if (Date.now() - slot > waveMaxSeconds * 1000) {
        log(`wave: stopped waiting ${waveMaxSeconds} s after the slot`)
        break
      }
    }
    const waveCpu1 = await ask<any>(proc, { cmd: "cpu" })
    // What the member apiservers refused during the wave (their max-inflight limits answer 429).
    const refused: Counts = new Map()
    for (const [i, c] of servers.entries())
      for (const [k, v] of delta(await scrapeRefused(c), refusedBefore[i]!))
        refused.set(k, (refused.get(k) ?? 0) + v)
    log(
      `wave: member apiservers refused or failed ${sum(refused)} requests${refused.size ? ` (${[...refused].map(([k, v]) => `${k} ${v}`).join(", ")})` : ""}`,
    )
    // Every 4xx/5xx any apiserver answered during the wave, this script's requests included (its merge
    // patches carry no resourceVersion, so a 409 here is the hub's).
    for (const [i, c] of allServers.entries()) {
      const failed = delta(await scrapeFailed(c), failedBefore[i]!)
      if (failed.size)
        print(
          `wave: ${c.name} answered ${[...failed].map(([k, v]) => `${k} ${v}`).join(", ")} (apiserver_request_total, code 4xx/5xx)`,
        )
    }
    // Watchers the apiservers closed for falling behind (this script's, or the hub's informers'), and
    // what the wave left, read by LIST (no watch involved): the run's Jobs, and its checks verified.
    let terminated = 0
    for (const [i, c] of servers.entries())
      terminated += (await scrapeTerminatedWatchers(c)) - terminatedBefore[i]!
    let runJobs = 0
    let runVerified = 0
    for (const c of servers) {
      const jobs = (
        await must(
          "list jobs",
          call(c, "GET", `/apis/batch/v1/jobs?labelSelector=${encodeURIComponent(`${labelRun}=${runID}`)}`),
        )
      ).body
      runJobs += jobs.items.length
      const checks = (await must("list checks", call(c, "GET", `${group}/backupchecks`))).body
      for (const o of checks.items) {
        const v = (o.status?.conditions ?? []).find((x: any) => x.type === "Verified")
        if (
          waveSet.has(`${o.metadata.namespace}/${o.metadata.name}`) &&
          o.status?.lastRun?.runID === runID &&
          o.status.lastRun.result === "Succeeded" &&
          v?.status === "True"
        )
          runVerified++
      }
    }
    print(
      `wave, read by LIST when it ended: ${runJobs} Jobs of the run exist, ${runVerified}/${waveChecks.length} checks verified for it; watchers the member apiservers closed for falling behind: ${terminated} (apiserver_terminated_watchers_total); this script's watches started again: ${watchRestarts}`,
    )
    // What the hub made of them: requests it sent again after Retry-After, and reconciles that failed.
    const hubTotal = (text: string, name: string) =>
      text
        .split("\n")
        .filter((l) => l.startsWith(`${name}{`) || l.startsWith(`${name} `))
        .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(" ") + 1)), 0)
    const hubMetrics = await (await fetch(`${hubUrl}/metrics`)).text()
    const byController = new Map<string, number>()
    for (const l of hubMetrics.split("\n"))
      if (l.startsWith("controller_runtime_reconcile_errors_total{")) {
        const controller = /controller="([^"]*)"/.exec(l)?.[1] ?? "?"
        byController.set(
          controller,
          (byController.get(controller) ?? 0) + Number(l.slice(l.lastIndexOf(" ") + 1)),
        )
      }
    // Conflicts on the hub's own writes are requeued and counted as result="requeue", not as errors.
    const conflicts = hubMetrics
      .split("\n")
      .filter((l) => l.startsWith("controller_runtime_reconcile_total{") && l.includes('result="requeue"'))
      .reduce((n, l) => n + Number(l.slice(l.lastIndexOf(" ") + 1)), 0)
    print(
      `wave: the hub sent ${hubTotal(hubMetrics, "rest_client_request_retries_total")} throttled requests again (rest_client_request_retries_total); reconcile errors since the hub started ${hubTotal(hubMetrics, "controller_runtime_reconcile_errors_total")} (${[...byController].map(([k, v]) => `${k} ${v}`).join(", ")}); reconciles requeued after a Conflict ${conflicts}`,
    )
    for (const w of [...completer, ...checkWatch]) w.stop()
    for (const t of timers) clearTimeout(t)
    // A member is done when all its wave checks verified; a wave cut short counts only those members.
    const byMember = new Map<string, { n: number; last: number }>()
    for (const [key, at] of done) {
      const ns = key.slice(0, key.indexOf("/"))
      const m = byMember.get(ns) ?? { n: 0, last: 0 }
      byMember.set(ns, { n: m.n + 1, last: Math.max(m.last, at - slot) })
    }
    const finish = [...byMember.values()]
      .filter((m) => m.n === perMemberWave)
      .map((m) => m.last)
      .sort((a, b) => a - b)
    const median = pct(finish, 50)
    const missing = waveChecks.length - done.size
    const verifiedBy = (s: number) => [...done.values()].filter((at) => at - slot <= s * 1000).length
    print(
      `wave: ${waveChecks.length} checks (${perMemberWave} per member) due at one minute, Jobs completed ${jobHoldMs / 1000} s after creation: ${missing > 0 ? `NOT ALL VERIFIED (${done.size} seen verified, ${finish.length}/${members} members with all theirs; the member figures are over those) ` : ""}verified 30/60/90/120 s after the slot: ${[30, 60, 90, 120].map(verifiedBy).join("/")}; Jobs created ${jobsSeen}; last verified ${(finish.at(-1)! / 1000).toFixed(1)} s after the slot; members done after fastest ${(finish[0]! / 1000).toFixed(1)} s, median ${(median / 1000).toFixed(1)} s, slowest ${(finish.at(-1)! / 1000).toFixed(1)} s (slowest/median ${(finish.at(-1)! / median).toFixed(2)}); peak concurrent Jobs ${peakActive}; hub CPU during the wave ${(((waveCpu1.cpuMicros - waveCpu0.cpuMicros) / 1000 / (waveCpu1.at - waveCpu0.at)) * 100).toFixed(0)}% of a core`,
    )
    const mem2 = await ask<any>(proc, { cmd: "measure" })
    const scrape2 = await ask<any>(proc, { cmd: "scrape" })
    print(
      `during the wave (2 s samples): at most ${peakSockets.tcpEstablished} established TCP connections (${connectionsTo(peakSockets)}; ${peakSockets.socketFds} socket fds then), rss at most ${mib(peakRss)}`,
    )
    print(
      `after the wave: ${memoryLine(mem2)}; /metrics ${scrape2.series} series, ${(scrape2.bytes / 1024 / 1024).toFixed(2)} MB, render ${scrape2.ms.toFixed(0)} ms (stall ${scrape2.stallMs.toFixed(0)} ms)`,
    )
    await sleep(afterWaveSeconds * 1000)
    print(`${afterWaveSeconds} s after the wave: ${memoryLine(await ask<any>(proc, { cmd: "measure" }))}`)
    // Last, since writing it costs the hub time and memory: what the heap holds after the wave.
    if (process.env.SNAPSHOT_AFTER_WAVE)
      await ask(proc, { cmd: "snapshot", path: process.env.SNAPSHOT_AFTER_WAVE })
    void serverOf
  }
  // Knobs: the same fleet under hubs with other settings, one after the other (KNOBS="flags;flags"); a
  // flag written node:<flag> is the hub process's node/V8 flag (after HUB_NODE_FLAGS), the rest are the
  // hub's. Each hub gets HUB_NICE and HUB_LOG as the first did, and the same idle window.
  let knobCount = 0
  for (const knob of (process.env.KNOBS ?? "").split(";").filter((k) => k.trim() !== "")) {
    const tokens = knob.trim().split(/\s+/)
    const nodeFlags = tokens.filter((t) => t.startsWith("node:")).map((t) => t.slice("node:".length))
    const flags = tokens.filter((t) => !t.startsWith("node:"))
    hubProc.kill("SIGKILL")
    await sleep(2_000)
    log(`knob ${knob.trim()}: starting its hub`)
    const started = Date.now()
    const kp = forkHub(hubCluster, [...hubExecArgv, ...nodeFlags], flags, hubLog)
    hubProc = kp
    if (process.env.HUB_NICE && kp.pid !== undefined) setPriority(kp.pid, Number(process.env.HUB_NICE))
    const kport = await servingPort(kp)
    // Ready from the hub's own view: every member's fleetcheck_member_cluster_ready is 1.
    while (true) {
      const text = await (await fetch(`http://127.0.0.1:${kport}/metrics`)).text()
      const ready = text
        .split("\n")
        .filter((l) => l.startsWith("fleetcheck_member_cluster_ready{") && l.endsWith(" 1"))
      if (ready.length === members) break
      await sleep(1_000)
    }
    const readySeconds = (Date.now() - started) / 1000
    await sleep(20_000)
    log(`knob ${knob.trim()}: idle window of ${idleSeconds} s`)
    const kb = await scrapeAll()
    const knobProfile = process.env.PROFILE_KNOBS
      ? `${process.env.PROFILE_KNOBS}-${++knobCount}.cpuprofile`
      : undefined
    if (knobProfile) await ask(kp, { cmd: "profile-start" })
    const kw = await idleWindow(kp)
    if (knobProfile) await ask(kp, { cmd: "profile-stop", path: knobProfile })
    const ka = await scrapeAll()
    const km = await ask<any>(kp, { cmd: "measure" })
    const minutes = kw.ms / 60_000
    const { toMembers, toHub } = requestsBetween(kb, ka)
    print(
      `knob ${knob.trim()}: ready ${readySeconds.toFixed(0)} s after start (1 s polls of its /metrics); requests per member per minute ${(toMembers / members / minutes).toFixed(1)} to members, ${(sum(toHub) / members / minutes).toFixed(1)} to the hub apiserver; after GC heap ${mib(km.heap)}, rss ${mib(km.rss)}`,
    )
    printIdleWindow(`  knob ${knob.trim()}: converged CPU`, kw)
  }
  print(
    `(hub in its own process, ${hubExecArgv.join(" ")}${hubOwnCore ? `, alone on core ${lastCore} from its start` : ""}; figures after forced GC; bench total ${((Date.now() - t0) / 1000).toFixed(0)} s)`,
  )
} catch (e) {
  // Said before the teardown: once the fleet is stopping, the process can end with nothing left to run.
  log(`failed: ${e instanceof Error ? e.message : String(e)}`)
  process.exitCode = 1
} finally {
  hubProc?.kill("SIGKILL")
  for (const a of agents.values()) a.destroy()
  await fleet.stop()
}
