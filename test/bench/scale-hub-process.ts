// The hub of fleet-scale.ts in a process of its own (started with --expose-gc): `fleetcheck hub` flags
// after the script name (defaults otherwise, leader election off), the hub cluster's kubeconfig from
// KUBECONFIG. It answers IPC requests with what only the process itself can see:
//   measure        heap used, heap total, external, array buffers and RSS (its brk heap and anonymous
//                  mappings apart) after forced garbage collections; V8's resident heap pages and each
//                  space's used / committed bytes; socket fds, established TCP connections
//   sockets        the socket fds and established TCP connections only (no GC): sampled during the wave
//   cpu            process.cpuUsage() (user + system µs) and a monotonic timestamp
//   threads        CPU (user, system; clock ticks) per thread name as the kernel counts it
//                  (/proc/self/task): the main thread apart from V8's workers (GC) and libuv's pool
//   reconciles     how many reconciles the hub finished since it started (its controller hooks)
//   gc             the garbage collections node reported since the process started, by kind (major,
//                  minor), with their main-thread pauses (ms); the incremental marking steps between a
//                  major GC's start and its pause are not in them (they show in the main thread's CPU)
//   latency-start  start recording every workqueue take: the key, when it was taken (epoch ms, sub-ms: the
//                  driver matches them to its writes), its wait (add → take, ms) and the main thread's run
//                  delay during that wait (runnable but not running, the kernel's schedstat); and the
//                  event-loop delay and GC pauses
//   latency-stop   the recorded takes, the GC pauses in the window (start, ms, major|minor), the main thread's run delay
//                  over the window and the event-loop delay
//   scrape         one render of /metrics in-process: ms, bytes, series, longest event-loop stall during it
//   snapshot       write a heap snapshot to the path given
//   profile-start  start the CPU profiler; profile-stop writes the profile to the path given
//   heap-sampling-start  start V8's sampling heap profiler; heap-sampling-stop writes its profile
//                  (.heapprofile: what was allocated where, sampled every 32 KiB) to the path given
import { openSync, readdirSync, readFileSync, readlinkSync, readSync, writeFileSync } from "node:fs"
import { Session } from "node:inspector/promises"
import { constants, monitorEventLoopDelay, PerformanceObserver, performance } from "node:perf_hooks"
import { getHeapSpaceStatistics, getHeapStatistics, writeHeapSnapshot } from "node:v8"
import { hubFlagNames, resolveHubConfig } from "../../src/hub/config.ts"
import { launchHub } from "../../src/hub/launch.ts"
import { makeMetrics } from "../../src/observability/metrics/index.ts"
import { sleep } from "../support/wait.ts"

const flags: Record<string, string> = {}
const argv = process.argv.slice(2)
const known = new Set(hubFlagNames())
for (let i = 0; i < argv.length; i += 2) {
  const flag = (argv[i] ?? "").replace(/^--/, "")
  if (!known.has(flag)) throw new Error(`unknown hub flag ${argv[i]}`)
  flags[flag] = argv[i + 1] ?? ""
}
const config = resolveHubConfig(
  {
    "leader-elect": "false",
    "http-address": "127.0.0.1:0",
    // The bench scrapes /metrics without a token.
    "secure-serving": "false",
    "log-level": "Warn",
    ...flags,
  },
  {},
)

// The main thread's time spent runnable but waiting for a core, ns (/proc/<pid>/task/<pid>/schedstat,
// field 2). Read with one open file and at most once a millisecond (the waits it is set against have
// ms resolution): an open, read and close on every add and take was 7% of the hub's main thread at
// 500 events a second, work the measured hub does not do.
const schedstat = openSync(`/proc/self/task/${process.pid}/schedstat`, "r")
const schedstatBuffer = Buffer.alloc(128)
let runDelayReadAt = Number.NEGATIVE_INFINITY
let runDelayRead = 0
const mainThreadRunDelayNs = () => {
  const now = performance.now()
  if (now - runDelayReadAt < 1) return runDelayRead
  const n = readSync(schedstat, schedstatBuffer, 0, schedstatBuffer.length, 0)
  runDelayRead = Number(schedstatBuffer.toString("latin1", 0, n).split(" ")[1] ?? 0)
  runDelayReadAt = now
  return runDelayRead
}
let runDelay0 = 0

let reconciles = 0
/**
 * Inside a latency window only: each take as ["namespace/name", taken at (performance.timeOrigin + now:
 * one clock with the driver's), wait ms, the main thread's run delay during the wait ms], and the GC
 * pauses [start (epoch ms), ms].
 */
let takes: Array<[string, number, number, number]> | undefined
let gcPauses: Array<[number, number, "major" | "minor"]> | undefined
/** The main thread's run delay (ns) when each key now queued was added, in a latency window. */
const runDelayAtAdd = new Map<string, number>()
const metrics = makeMetrics({
  processMetrics: true,
  checkSeries: config.checkMetrics,
  memberHistograms: config.memberHistograms,
})
const wrapped: typeof metrics = {
  ...metrics,
  controllerHooks: (controller) => {
    const hooks = metrics.controllerHooks(controller)
    return {
      ...hooks,
      onReconcile: (cluster, outcome, seconds) => {
        reconciles++
        hooks.onReconcile?.(cluster, outcome, seconds)
      },
    }
  },
  queueHooks: (cluster, controller) => {
    const hooks = metrics.queueHooks(cluster, controller)
    return {
      ...hooks,
      onAdd: (key: string) => {
        if (takes !== undefined) {
          const queued = `${cluster}/${controller}/${key}`
          if (!runDelayAtAdd.has(queued)) runDelayAtAdd.set(queued, mainThreadRunDelayNs())
        }
        hooks.onAdd?.(key)
      },
      onGet: (key: string, queuedMs: number) => {
        if (takes !== undefined) {
          const queued = `${cluster}/${controller}/${key}`
          const added = runDelayAtAdd.get(queued)
          runDelayAtAdd.delete(queued)
          const runDelayMs = added === undefined ? 0 : (mainThreadRunDelayNs() - added) / 1e6
          takes.push([key, performance.timeOrigin + performance.now(), queuedMs, runDelayMs])
        }
        hooks.onGet?.(key, queuedMs)
      },
    }
  },
}

// Every GC from the start, counted by kind: what a window's major GCs were is then a difference.
const gcs = { major: { count: 0, pauseMs: 0 }, minor: { count: 0, pauseMs: 0 } }
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    const kind = (e as { detail?: { kind?: number } }).detail?.kind
    const g =
      kind === constants.NODE_PERFORMANCE_GC_MAJOR
        ? gcs.major
        : kind === constants.NODE_PERFORMANCE_GC_MINOR
          ? gcs.minor
          : undefined
    if (g === undefined) continue
    g.count++
    g.pauseMs += e.duration
    gcPauses?.push([performance.timeOrigin + e.startTime, e.duration, g === gcs.major ? "major" : "minor"])
  }
}).observe({ entryTypes: ["gc"] })

// As the `hub` command runs it: memory given back after bursts (memory-return.ts).
const hub = await launchHub({ config, metrics: wrapped, returnMemory: true })
const loopDelay = monitorEventLoopDelay({ resolution: 1 })
const profiler = new Session()
profiler.connect()
let elu = performance.eventLoopUtilization()

/**
 * What the kernel says this process holds: socket fds, and how many of them are established TCP
 * connections (their inodes in /proc/self/net/tcp{,6}, state 01), an observer the hub's code does not feed.
 */
const sockets = () => {
  const inodes = new Set<string>()
  for (const fd of readdirSync("/proc/self/fd")) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/self/fd/${fd}`))
      if (m) inodes.add(m[1]!)
    } catch {
      // closed between the listing and the readlink
    }
  }
  let established = 0
  // Established connections by the port they go to ("<hex ip>:<hex port>" in the rem_address column).
  const byRemotePort: Record<number, number> = {}
  for (const table of ["/proc/self/net/tcp", "/proc/self/net/tcp6"]) {
    for (const line of readFileSync(table, "utf8").split("\n").slice(1)) {
      const f = line.trim().split(/\s+/)
      if (f[3] !== "01" || !inodes.has(f[9] ?? "")) continue
      established++
      const port = Number.parseInt((f[2] ?? "").split(":")[1] ?? "", 16)
      byRemotePort[port] = (byRemotePort[port] ?? 0) + 1
    }
  }
  return { socketFds: inodes.size, tcpEstablished: established, byRemotePort }
}
/**
 * Resident memory by kind of mapping (/proc/self/smaps): the brk heap (glibc malloc's main arena: TLS
 * state, libuv, most native allocations of the main thread) and other anonymous mappings (the V8 heap,
 * other malloc arenas, thread stacks), and of those the other threads' malloc arenas.
 */
const rssByMapping = () => {
  let kind = ""
  let brk = 0
  let anon = 0
  let arenas = 0
  for (const line of readFileSync("/proc/self/smaps", "utf8").split("\n")) {
    if (/^[0-9a-f]+-[0-9a-f]+ /.test(line)) {
      const [range, perms, , , , name] = line.trim().split(/\s+/)
      // glibc's other malloc arenas (one per thread, up to 8 per core) live in 64 MiB heaps aligned
      // to 64 MiB: the used part is an anonymous rw mapping starting at such a boundary.
      const start = BigInt(`0x${(range ?? "").split("-")[0]}`)
      const arena = name === undefined && perms === "rw-p" && start % 0x4000000n === 0n
      kind = name === undefined ? (arena ? "arena" : "anon") : name === "[heap]" ? "brk" : "other"
    } else if (line.startsWith("Rss:")) {
      const kb = Number(line.split(/\s+/)[1]) * 1024
      if (kind === "brk") brk += kb
      else if (kind === "anon" || kind === "arena") anon += kb
      if (kind === "arena") arenas += kb
    }
  }
  return { rssBrk: brk, rssAnonMaps: anon, rssArenas: arenas }
}

/** CPU clock ticks (user, system) per thread name, summed over the threads of that name. */
const threadTicks = () => {
  const byName: Record<string, { user: number; system: number; threads: number }> = {}
  for (const tid of readdirSync("/proc/self/task")) {
    let stat: string
    try {
      stat = readFileSync(`/proc/self/task/${tid}/stat`, "utf8")
    } catch {
      continue // the thread ended between the listing and the read
    }
    const name = stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")"))
    // After the name: state is field 3, utime 14 and stime 15 (proc(5)).
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    const t = byName[name] ?? { user: 0, system: 0, threads: 0 }
    byName[name] = t
    t.user += Number(fields[11])
    t.system += Number(fields[12])
    t.threads++
  }
  return byName
}

process.on("message", async (msg: any) => {
  switch (msg.cmd) {
    case "measure": {
      for (let i = 0; i < 4; i++) {
        globalThis.gc?.()
        await sleep(100)
      }
      const m = process.memoryUsage()
      const v8 = getHeapStatistics()
      process.send?.({
        // The V8 heap's pages that are resident (part of the other anonymous mappings), and per space
        // what is in use against what V8 keeps committed: the difference is free space V8 holds.
        v8Physical: v8.total_physical_size,
        v8Malloced: v8.malloced_memory,
        spaces: getHeapSpaceStatistics().map((s) => ({
          name: s.space_name,
          used: s.space_used_size,
          size: s.space_size,
          physical: s.physical_space_size,
        })),
        heap: m.heapUsed,
        heapTotal: m.heapTotal,
        rss: m.rss,
        ...rssByMapping(),
        external: m.external,
        arrayBuffers: m.arrayBuffers,
        ...sockets(),
      })
      return
    }
    case "sockets":
      process.send?.({ ...sockets(), rss: process.memoryUsage.rss() })
      return
    case "cpu": {
      const u = process.cpuUsage()
      process.send?.({ cpuMicros: u.user + u.system, at: performance.now() })
      return
    }
    case "threads":
      process.send?.({ threads: threadTicks() })
      return
    case "reconciles":
      process.send?.({ reconciles })
      return
    case "gc":
      process.send?.({ major: { ...gcs.major }, minor: { ...gcs.minor } })
      return
    case "heap-sampling-start":
      await profiler.post("HeapProfiler.enable")
      // With `promoted`, also what a major GC collected since: everything that outlived the young
      // generation, which is what the major GCs of a converged hub are paid for.
      await profiler.post("HeapProfiler.startSampling", {
        samplingInterval: 32 * 1024,
        ...(msg.promoted === true || msg.all === true ? { includeObjectsCollectedByMajorGC: true } : {}),
        // With `all`, what scavenges collected too: every allocation, the young generation's churn.
        ...(msg.all === true ? { includeObjectsCollectedByMinorGC: true } : {}),
      })
      process.send?.({ ok: true })
      return
    case "heap-sampling-stop": {
      const { profile } = await profiler.post("HeapProfiler.stopSampling")
      writeFileSync(msg.path, JSON.stringify(profile))
      process.send?.({ path: msg.path })
      return
    }
    case "profile-start":
      await profiler.post("Profiler.enable")
      await profiler.post("Profiler.start")
      process.send?.({ ok: true })
      return
    case "profile-stop": {
      const { profile } = await profiler.post("Profiler.stop")
      writeFileSync(msg.path, JSON.stringify(profile))
      process.send?.({ path: msg.path })
      return
    }
    case "latency-start":
      runDelay0 = mainThreadRunDelayNs()
      elu = performance.eventLoopUtilization()
      takes = []
      gcPauses = []
      loopDelay.reset()
      loopDelay.enable()
      process.send?.({ ok: true })
      return
    case "latency-stop": {
      loopDelay.disable()
      const taken = takes ?? []
      const pauses = gcPauses ?? []
      takes = undefined
      gcPauses = undefined
      runDelayAtAdd.clear()
      process.send?.({
        elu: performance.eventLoopUtilization(elu).utilization,
        takes: taken,
        gcPauses: pauses,
        runDelayMs: (mainThreadRunDelayNs() - runDelay0) / 1e6,
        loopP99Ms: loopDelay.percentile(99) / 1e6,
        loopMaxMs: loopDelay.max / 1e6,
      })
      return
    }
    case "scrape": {
      // The longest gap between 1 ms timer ticks while the render runs is the loop's longest stall.
      let last = performance.now()
      let stall = 0
      const tick = setInterval(() => {
        const now = performance.now()
        stall = Math.max(stall, now - last)
        last = now
      }, 1)
      const t0 = performance.now()
      const text = await metrics.render()
      const ms = performance.now() - t0
      clearInterval(tick)
      stall = Math.max(stall, performance.now() - last)
      let series = 0
      for (const line of text.split("\n")) if (line !== "" && !line.startsWith("#")) series++
      process.send?.({
        ms,
        bytes: Buffer.byteLength(text),
        series,
        stallMs: stall,
      })
      return
    }
    case "snapshot":
      process.send?.({ path: writeHeapSnapshot(msg.path) })
      return
  }
})
// The bench died (a timeout, Ctrl-C): this hub goes with it rather than running on alone.
process.on("disconnect", () => process.exit(0))
process.send?.({ port: hub.port })
