// The steady-events driver of fleet-scale.ts and what it measures around it: metadata-only PATCHes of
// BackupChecks at a fixed rate over the member API servers, with a cap on requests in flight (an update
// due while the cap is reached is dropped and counted, never sent late), and the evidence of where the
// time went: what the API servers counted (apiserver_request_total), their PATCH and etcd latencies
// (apiserver_request_duration_seconds, etcd_request_duration_seconds), and the CPU of every process of
// the fleet read from /proc, the machine's idle time included.
//
// Three transports: "h1", node's https keep-alive Agent (HTTP/1.1, one TLS connection per request in
// flight, up to `socketsPerServer`, the rest waits in the Agent), "h2", one HTTP/2 connection per API
// server with every PATCH a stream of it (kube-apiserver announces 100 concurrent streams a connection;
// `sessionsPerServer` connections share a server's streams round robin), and "etcd", the same change
// written straight into the API servers' storage (below): the events reach the hub through the API
// servers' own watch path, without the write path the 2-core machine cannot run at 500/s beside the rest.
import { existsSync, mkdirSync, readdirSync, readFileSync, rmdirSync, writeFileSync } from "node:fs"
import * as http from "node:http"
import * as http2 from "node:http2"
import * as https from "node:https"
import { monitorEventLoopDelay } from "node:perf_hooks"

export interface EventServer {
  readonly name: string
  readonly server: string
  readonly caPem: string
  readonly adminToken: string
}

export type EventTransport = "h1" | "h2" | "etcd"

export interface DriveOptions {
  readonly transport: EventTransport
  readonly rate: number
  readonly seconds: number
  readonly maxInflight: number
  /** h1: sockets per API server (the Agent's maxSockets). */
  readonly socketsPerServer: number
  /** h2: connections per API server. */
  readonly sessionsPerServer: number
  /** etcd: the API servers' shared etcd (client URL); each server's keys are under /<its name>/registry. */
  readonly etcdUrl?: string
  /** The i-th update: where it goes and what it patches. */
  readonly target: (i: number) => {
    readonly server: EventServer
    readonly path: string
    readonly body: string
    /** What the hub's workqueue calls the object ("namespace/name"). */
    readonly key: string
  }
}

export interface DriveResult {
  readonly sent: number
  readonly dropped: number
  /** Answers by status code ("error" for a request that failed without one). */
  readonly codes: ReadonlyMap<string, number>
  /** Each PATCH answered 2xx: its key, when it was sent and answered (epoch ms, performance clock). */
  readonly answers: ReadonlyArray<{
    readonly key: string
    readonly sentAt: number
    readonly answeredAt: number
  }>
  /** Round trip of each answered PATCH as the driver saw it, ms, sorted. */
  readonly latencies: ReadonlyArray<number>
  /** Answers completed in each whole second of the sending window. */
  readonly perSecond: ReadonlyArray<number>
  /** From the first update to the last answer. */
  readonly wallMs: number
  /** This process's CPU over that time (user + system), ms. */
  readonly cpuMs: number
  /** TLS connections the driver opened (handshakes). */
  readonly connections: number
  /** The driver's event-loop delay p99 and max, ms. */
  readonly loopP99Ms: number
  readonly loopMaxMs: number
  /** Ticks (10 ms) at which the in-flight cap was reached. */
  readonly capTicks: number
  readonly ticks: number
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms))
const fail = (message: string): never => {
  throw new Error(message)
}

type Send = (server: EventServer, path: string, body: string) => Promise<number>

const h1Sender = (socketsPerServer: number) => {
  const agents = new Map<string, https.Agent>()
  const seen = new WeakSet<object>()
  let connections = 0
  const send: Send = (s, path, body) =>
    new Promise((resolve, reject) => {
      let agent = agents.get(s.server)
      if (!agent) {
        agent = new https.Agent({ keepAlive: true, maxSockets: socketsPerServer, ca: s.caPem })
        agents.set(s.server, agent)
      }
      const req = https.request(
        new URL(path, s.server),
        {
          method: "PATCH",
          agent,
          headers: {
            authorization: `Bearer ${s.adminToken}`,
            accept: "application/json",
            "content-type": "application/merge-patch+json",
            "content-length": Buffer.byteLength(body),
          },
          timeout: 120_000,
        },
        (res) => {
          res.resume()
          res.on("end", () => resolve(res.statusCode ?? 0))
          res.on("error", reject)
        },
      )
      req.on("socket", (sock) => {
        if (!seen.has(sock)) {
          seen.add(sock)
          connections++
        }
      })
      req.once("timeout", () => req.destroy(new Error("timeout")))
      req.once("error", reject)
      req.end(body)
    })
  return {
    send,
    connections: () => connections,
    close: () => {
      for (const a of agents.values()) a.destroy()
    },
  }
}

const h2Sender = (sessionsPerServer: number) => {
  const sessions = new Map<string, http2.ClientHttp2Session[]>()
  let next = 0
  let connections = 0
  const sessionFor = (s: EventServer) => {
    let list = sessions.get(s.server)
    if (!list) {
      list = []
      sessions.set(s.server, list)
    }
    const i = next++ % sessionsPerServer
    let session = list[i]
    if (!session || session.closed || session.destroyed) {
      const opened = http2.connect(s.server, { ca: s.caPem })
      connections++
      // A failed connection fails its streams; the next update opens a new one.
      opened.on("error", () => {})
      list[i] = opened
      session = opened
    }
    return session
  }
  const send: Send = (s, path, body) =>
    new Promise((resolve, reject) => {
      const stream = sessionFor(s).request({
        ":method": "PATCH",
        ":path": path,
        authorization: `Bearer ${s.adminToken}`,
        accept: "application/json",
        "content-type": "application/merge-patch+json",
        "content-length": String(Buffer.byteLength(body)),
      })
      let status = 0
      stream.setTimeout(120_000, () => stream.close(http2.constants.NGHTTP2_CANCEL))
      stream.on("response", (h) => {
        status = Number(h[":status"] ?? 0)
      })
      stream.on("error", reject)
      stream.on("close", () => (status ? resolve(status) : reject(new Error("stream closed unanswered"))))
      stream.resume()
      stream.end(body)
    })
  return {
    send,
    connections: () => connections,
    close: () => {
      for (const list of sessions.values()) for (const s of list) s.close()
    },
  }
}

/**
 * "etcd": each update is the merge patch applied to the object as the API server stored it, written back
 * with a transaction that succeeds only if nobody wrote the key since it was read (etcd's JSON gateway,
 * keep-alive HTTP/1.1). Custom resources are stored as their JSON, under
 * /<server>/registry/<group>/<plural>/<namespace>/<name> here (each API server's --etcd-prefix); the API
 * server's watch cache reads the write, gives it the key's new revision as resourceVersion and sends it
 * to its watchers as any MODIFIED event. Answers 200, or 409 when the key changed twice under it.
 */
export const etcdSender = (etcdUrl: string) => {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 64 })
  const known = new Map<string, { object: unknown; revision: string }>()
  const b64 = (s: string) => Buffer.from(s).toString("base64")
  const post = (path: string, body: unknown) =>
    new Promise<any>((resolve, reject) => {
      const data = JSON.stringify(body)
      const req = http.request(
        new URL(path, etcdUrl),
        {
          method: "POST",
          agent,
          headers: { "content-type": "application/json", "content-length": Buffer.byteLength(data) },
          timeout: 120_000,
        },
        (res) => {
          const chunks: Buffer[] = []
          res.on("data", (c: Buffer) => chunks.push(c))
          res.on("end", () => {
            if ((res.statusCode ?? 0) >= 300) reject(new Error(`etcd ${path}: ${res.statusCode}`))
            else resolve(JSON.parse(Buffer.concat(chunks).toString("utf8")))
          })
          res.on("error", reject)
        },
      )
      req.once("timeout", () => req.destroy(new Error("timeout")))
      req.once("error", reject)
      req.end(data)
    })
  const storageKey = (s: EventServer, path: string) => {
    const m = /^\/apis\/([^/]+)\/[^/]+\/namespaces\/([^/]+)\/([^/]+)\/([^/]+)$/.exec(path)
    if (!m) throw new Error(`etcd transport: ${path} is not a namespaced custom resource`)
    return `/${s.name}/registry/${m[1]}/${m[3]}/${m[2]}/${m[4]}`
  }
  const read = async (key: string) => {
    const res = await post("/v3/kv/range", { key: b64(key) })
    const kv = res.kvs?.[0]
    if (!kv) throw new Error(`etcd transport: no object at ${key}`)
    const entry = {
      object: JSON.parse(Buffer.from(kv.value, "base64").toString("utf8")) as unknown,
      revision: String(kv.mod_revision),
    }
    known.set(key, entry)
    return entry
  }
  // RFC 7386.
  const mergePatch = (target: unknown, patch: unknown): unknown => {
    const isObject = (v: unknown): v is Record<string, unknown> =>
      v !== null && typeof v === "object" && !Array.isArray(v)
    if (!isObject(patch)) return patch
    const out: Record<string, unknown> = isObject(target) ? { ...target } : {}
    for (const [k, v] of Object.entries(patch)) {
      if (v === null) delete out[k]
      else out[k] = mergePatch(out[k], v)
    }
    return out
  }
  const send: Send = async (s, path, body) => {
    const key = storageKey(s, path)
    const patch: unknown = JSON.parse(body)
    for (let attempt = 0; attempt < 2; attempt++) {
      const entry = known.get(key) ?? (await read(key))
      const object = mergePatch(entry.object, patch)
      const res = await post("/v3/kv/txn", {
        compare: [{ key: b64(key), target: "MOD", result: "EQUAL", mod_revision: entry.revision }],
        success: [{ request_put: { key: b64(key), value: b64(JSON.stringify(object)) } }],
      })
      if (res.succeeded) {
        known.set(key, { object, revision: String(res.header.revision) })
        return 200
      }
      known.delete(key)
    }
    return 409
  }
  return { send, connections: () => 0, close: () => agent.destroy() }
}

/** Sends `rate` updates a second for `seconds`, then waits for every answer. */
export const driveEvents = async (o: DriveOptions): Promise<DriveResult> => {
  const sender =
    o.transport === "etcd"
      ? etcdSender(o.etcdUrl ?? fail("the etcd transport needs etcdUrl"))
      : o.transport === "h2"
        ? h2Sender(o.sessionsPerServer)
        : h1Sender(o.socketsPerServer)
  const codes = new Map<string, number>()
  const latencies: number[] = []
  const answers: Array<{ key: string; sentAt: number; answeredAt: number }> = []
  const perSecond = Array.from({ length: Math.ceil(o.seconds) }, () => 0)
  const loop = monitorEventLoopDelay({ resolution: 1 })
  let sent = 0
  let dropped = 0
  let inflight = 0
  let ticks = 0
  let capTicks = 0
  const count = (code: string) => codes.set(code, (codes.get(code) ?? 0) + 1)
  loop.enable()
  const cpu0 = process.cpuUsage()
  const start = performance.now()
  while (performance.now() - start < o.seconds * 1000) {
    ticks++
    const due = Math.floor(((performance.now() - start) / 1000) * o.rate)
    if (sent < due && inflight >= o.maxInflight) capTicks++
    while (sent < due) {
      if (inflight >= o.maxInflight) {
        dropped += due - sent
        sent = due
        break
      }
      const { server, path, body, key } = o.target(sent)
      inflight++
      sent++
      const t = performance.now()
      sender
        .send(server, path, body)
        .then(
          (status) => {
            const now = performance.now()
            latencies.push(now - t)
            if (status < 300)
              answers.push({
                key,
                sentAt: performance.timeOrigin + t,
                answeredAt: performance.timeOrigin + now,
              })
            const second = Math.floor((now - start) / 1000)
            if (second < perSecond.length) perSecond[second]!++
            count(String(status))
          },
          () => count("error"),
        )
        .finally(() => inflight--)
    }
    await sleep(10)
  }
  while (inflight > 0) await sleep(5)
  const wallMs = performance.now() - start
  const cpu = process.cpuUsage(cpu0)
  loop.disable()
  sender.close()
  return {
    sent,
    dropped,
    codes,
    answers,
    latencies: latencies.sort((a, b) => a - b),
    perSecond,
    wallMs,
    cpuMs: (cpu.user + cpu.system) / 1000,
    connections: sender.connections(),
    loopP99Ms: loop.percentile(99) / 1e6,
    loopMaxMs: loop.max / 1e6,
    capTicks,
    ticks,
  }
}

// ---- what the API servers saw -------------------------------------------------------------------------
/** One API server's counters for the events: PATCHes of BackupChecks by code, and two histograms. */
export interface ServerSample {
  readonly patches: ReadonlyMap<string, number>
  /** apiserver_request_duration_seconds of PATCH backupchecks: cumulative count by upper bound (s). */
  readonly patchSeconds: ReadonlyMap<number, number>
  /** etcd_request_duration_seconds of updates of backupchecks (the write's read-modify-write). */
  readonly etcdSeconds: ReadonlyMap<number, number>
  /** BackupCheck events the watch cache read from etcd (apiserver_watch_cache_events_received_total). */
  readonly cacheEvents: number
  /** BackupCheck events sent to watchers (apiserver_watch_events_total). */
  readonly watchEvents: number
}

const labelsOf = (line: string) =>
  Object.fromEntries([...line.matchAll(/(\w+)="([^"]*)"/g)].map((m) => [m[1]!, m[2]!]))
const sampleValue = (line: string) => Number(line.slice(line.lastIndexOf(" ") + 1))
const addBucket = (m: Map<number, number>, le: string, v: number) => {
  const bound = le === "+Inf" ? Number.POSITIVE_INFINITY : Number(le)
  m.set(bound, (m.get(bound) ?? 0) + v)
}

/** Reads the counters out of an API server's /metrics text. */
export const serverSample = (metrics: string): ServerSample => {
  const patches = new Map<string, number>()
  const patchSeconds = new Map<number, number>()
  const etcdSeconds = new Map<number, number>()
  let cacheEvents = 0
  let watchEvents = 0
  for (const line of metrics.split("\n")) {
    if (line.startsWith("apiserver_watch_cache_events_received_total{")) {
      if (/backupcheck/.test(labelsOf(line).resource ?? "")) cacheEvents += sampleValue(line)
    } else if (line.startsWith("apiserver_watch_events_total{")) {
      if (/backupcheck/.test(labelsOf(line).resource ?? "")) watchEvents += sampleValue(line)
    } else if (line.startsWith("apiserver_request_total{")) {
      const l = labelsOf(line)
      if (l.verb === "PATCH" && l.resource === "backupchecks" && !l.subresource)
        patches.set(l.code ?? "?", (patches.get(l.code ?? "?") ?? 0) + sampleValue(line))
    } else if (line.startsWith("apiserver_request_duration_seconds_bucket{")) {
      const l = labelsOf(line)
      if (l.verb === "PATCH" && l.resource === "backupchecks" && !l.subresource)
        addBucket(patchSeconds, l.le ?? "+Inf", sampleValue(line))
    } else if (line.startsWith("etcd_request_duration_seconds_bucket{")) {
      const l = labelsOf(line)
      // The label names the resource as group-qualified plural or as kind, by version.
      if (
        (l.operation === "update" || l.operation === "GuaranteedUpdate") &&
        /backupcheck/i.test(l.type ?? l.resource ?? "")
      )
        addBucket(etcdSeconds, l.le ?? "+Inf", sampleValue(line))
    }
  }
  return { patches, patchSeconds, etcdSeconds, cacheEvents, watchEvents }
}

const minus = (a: ReadonlyMap<number, number>, b: ReadonlyMap<number, number>) =>
  new Map([...a].map(([k, v]) => [k, v - (b.get(k) ?? 0)] as const))
const plus = (a: ReadonlyMap<number, number>, b: ReadonlyMap<number, number>) => {
  const m = new Map(a)
  for (const [k, v] of b) m.set(k, (m.get(k) ?? 0) + v)
  return m
}

/** The q-quantile of a cumulative histogram, linear within its bucket (as Prometheus' histogram_quantile). */
export const histogramQuantile = (cumulative: ReadonlyMap<number, number>, q: number): number => {
  const bounds = [...cumulative.keys()].sort((a, b) => a - b)
  const total = cumulative.get(Number.POSITIVE_INFINITY) ?? 0
  if (total === 0) return Number.NaN
  const rank = q * total
  let prevBound = 0
  let prevCount = 0
  for (const b of bounds) {
    const c = cumulative.get(b)!
    if (c >= rank) {
      if (b === Number.POSITIVE_INFINITY) return prevBound
      return prevBound + ((b - prevBound) * (rank - prevCount)) / Math.max(1, c - prevCount)
    }
    prevBound = b
    prevCount = c
  }
  return prevBound
}

/** What the API servers counted between two samples of each: PATCHes by server and code, and the histograms. */
export const serversDelta = (
  names: ReadonlyArray<string>,
  before: ReadonlyArray<ServerSample>,
  after: ReadonlyArray<ServerSample>,
) => {
  const byServer = new Map<string, number>()
  const cacheEventsByServer = new Map<string, number>()
  let watchEvents = 0
  const codes = new Map<string, number>()
  let patchSeconds = new Map<number, number>()
  let etcdSeconds = new Map<number, number>()
  for (const [i, name] of names.entries()) {
    const a = after[i]!
    const b = before[i]!
    let n = 0
    for (const [code, v] of a.patches) {
      const d = v - (b.patches.get(code) ?? 0)
      if (d > 0) codes.set(code, (codes.get(code) ?? 0) + d)
      n += d
    }
    byServer.set(name, n)
    cacheEventsByServer.set(name, a.cacheEvents - b.cacheEvents)
    watchEvents += a.watchEvents - b.watchEvents
    patchSeconds = plus(patchSeconds, minus(a.patchSeconds, b.patchSeconds))
    etcdSeconds = plus(etcdSeconds, minus(a.etcdSeconds, b.etcdSeconds))
  }
  return { byServer, cacheEventsByServer, watchEvents, codes, patchSeconds, etcdSeconds }
}

// ---- CPU of the machine's processes, from /proc -------------------------------------------------------
/** Jiffies (utime + stime) of a process, all its threads; undefined when it is gone. */
const jiffies = (pid: number): number | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, "utf8")
    const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ")
    return Number(f[11]) + Number(f[12])
  } catch {
    return undefined
  }
}

/**
 * The fleet's processes by role: etcd, each kube-apiserver by its cluster (its --etcd-prefix), found by
 * their command lines naming the fleet's run directory.
 */
export const fleetProcesses = (runDir: string): Map<number, string> => {
  const found = new Map<number, string>()
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    let cmdline: string
    try {
      cmdline = readFileSync(`/proc/${entry}/cmdline`, "utf8")
    } catch {
      continue
    }
    if (!cmdline.includes(runDir)) continue
    const args = cmdline.split("\0")
    const prefix = args.find((a) => a.startsWith("--etcd-prefix=/"))
    if (prefix) found.set(Number(entry), prefix.split("/")[1]!)
    else if (args[0]?.endsWith("/etcd")) found.set(Number(entry), "etcd")
  }
  return found
}

/** cgroup v1's cpu controller, where the kubelet sets a pod's cpu.shares from its CPU request. */
const cpuCgroupRoot = "/sys/fs/cgroup/cpu"

/**
 * Named cpu cgroups weighted as pods requesting `millicores` each (cpu.shares = millicores × 1024 /
 * 1000, the kubelet's formula, at least 2), under one parent of this bench's; move() puts a whole
 * process (every thread) in one, remove() puts the given processes back in the root group and deletes
 * the groups.
 */
export const cpuGroups = (millicores: Readonly<Record<string, number>>) => {
  if (!existsSync(`${cpuCgroupRoot}/cpu.shares`))
    throw new Error(`+pod needs cgroup v1's cpu controller at ${cpuCgroupRoot}`)
  const parent = `${cpuCgroupRoot}/fleetcheck-bench-${process.pid}`
  mkdirSync(parent, { recursive: true })
  const dirs = new Map<string, string>()
  for (const [name, m] of Object.entries(millicores)) {
    const dir = `${parent}/${name}`
    mkdirSync(dir, { recursive: true })
    writeFileSync(`${dir}/cpu.shares`, String(Math.max(2, Math.round((m * 1024) / 1000))))
    dirs.set(name, dir)
  }
  return {
    move: (pid: number, name: string) => {
      const dir = dirs.get(name)
      if (dir === undefined) throw new Error(`no cpu group ${name}`)
      writeFileSync(`${dir}/cgroup.procs`, String(pid))
    },
    remove: (pids: Iterable<number>) => {
      for (const pid of pids) {
        try {
          writeFileSync(`${cpuCgroupRoot}/cgroup.procs`, String(pid))
        } catch {
          // gone meanwhile
        }
      }
      for (const dir of dirs.values()) rmdirSync(dir)
      rmdirSync(parent)
    },
  }
}

/** Every process's jiffies and short name (/proc/<pid>/comm). */
const allProcesses = () => {
  const found = new Map<number, { readonly comm: string; readonly jiffies: number }>()
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue
    const j = jiffies(Number(entry))
    if (j === undefined) continue
    let comm = "?"
    try {
      comm = readFileSync(`/proc/${entry}/comm`, "utf8").trim()
    } catch {
      // ended between the two reads
    }
    found.set(Number(entry), { comm, jiffies: j })
  }
  return found
}

const machineJiffies = () => {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number)
  return { total: f.reduce((a, b) => a + b, 0), idle: (f[3] ?? 0) + (f[4] ?? 0) }
}

export interface CpuUse {
  /** % of one core per role of the `roles` given (summed over its processes). */
  readonly byRole: ReadonlyMap<string, number>
  /** Every other process by name, % of one core, the busiest first. */
  readonly others: ReadonlyArray<readonly [string, number]>
  readonly idlePercent: number
  readonly busyPercent: number
  readonly cores: number
}

/**
 * Watches every process's CPU from now until stop(), reading /proc each second: a process started
 * in between is counted whole from its first reading, so only processes living under a second (and the
 * kernel's own time) are left to the machine's busy total without a name.
 */
export const watchCpu = (roles: ReadonlyMap<number, string>) => {
  const ticksPerSecond = 100 // USER_HZ on Linux
  const m0 = machineJiffies()
  const at0 = performance.now()
  let prev = allProcesses()
  const ticks = new Map<number, { comm: string; ticks: number }>()
  const read = () => {
    const now = allProcesses()
    for (const [pid, p] of now) {
      const d = p.jiffies - (prev.get(pid)?.jiffies ?? 0)
      const t = ticks.get(pid) ?? { comm: p.comm, ticks: 0 }
      ticks.set(pid, { comm: p.comm, ticks: t.ticks + d })
    }
    prev = now
  }
  const timer = setInterval(read, 1_000)
  return {
    stop: (): CpuUse => {
      clearInterval(timer)
      read()
      const m1 = machineJiffies()
      const seconds = (performance.now() - at0) / 1000
      const share = (t: number) => (t / ticksPerSecond / seconds) * 100
      const byRole = new Map<string, number>()
      const others = new Map<string, number>()
      for (const [pid, p] of ticks) {
        const role = roles.get(pid)
        if (role !== undefined) byRole.set(role, (byRole.get(role) ?? 0) + share(p.ticks))
        else if (p.ticks > 0) others.set(p.comm, (others.get(p.comm) ?? 0) + share(p.ticks))
      }
      const cores = (m1.total - m0.total) / ticksPerSecond / seconds
      const idleCores = (m1.idle - m0.idle) / ticksPerSecond / seconds
      return {
        byRole,
        others: [...others].sort((x, y) => y[1] - x[1]),
        idlePercent: (idleCores / Math.max(cores, 1e-9)) * 100,
        busyPercent: (cores - idleCores) * 100,
        cores,
      }
    },
  }
}

/**
 * Event → reconcile start from outside the hub: for each PATCH answered, the first time a hub worker took
 * its key after the PATCH was sent, less the answer's time (0 when the hub took it before the driver read
 * the answer: the watch event outran the response). It covers the watch's delivery, the hub's decoding
 * and informer, and the workqueue wait. PATCHes of one key before a single take share that take.
 */
export const answerToReconcile = (
  answers: DriveResult["answers"],
  takes: ReadonlyArray<readonly [string, number]>,
) => {
  const byKey = new Map<string, number[]>()
  for (const [key, at] of takes) {
    const list = byKey.get(key) ?? []
    list.push(at)
    byKey.set(key, list)
  }
  for (const list of byKey.values()) list.sort((a, b) => a - b)
  const delays: number[] = []
  let unseen = 0
  for (const a of answers) {
    const list = byKey.get(a.key) ?? []
    let lo = 0
    let hi = list.length
    while (lo < hi) {
      const mid = (lo + hi) >> 1
      if (list[mid]! < a.sentAt) lo = mid + 1
      else hi = mid
    }
    if (lo === list.length) unseen++
    else delays.push(Math.max(0, list[lo]! - a.answeredAt))
  }
  return { delays: delays.sort((a, b) => a - b), unseen }
}
