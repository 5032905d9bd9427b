// The fault soak: a real local fleet, an in-process hub (started and stopped through the one launcher),
// N BackupChecks on several members with minute schedules and mixed passing, failing and hanging
// restores, a seeded fault driver, and the independent observer (observer.ts) that judges the result.
//
// Faults run in two lanes, each drawing from its own seeded generator, so the order is reproducible per
// lane (their interleaving follows the machine's timing):
//   disruption lane, one at a time, a few seconds each:  member API server killed and restarted, member
//     frozen and thawed, hub stopped (SIGTERM-like) and started again, the hub's member credentials
//     revoked (ClusterRoleBinding deleted) and restored;
//   object lane, paced so N faults take about `targetMs`:  a running restore Job deleted, a finished Job
//     deleted by hand, the check's restore spec flipped (pass, fail, hang, delays), history limits set to
//     0 (restored later), `ttlSecondsAfterFinished: 0` in the template (removed later), the check deleted
//     and re-created, a foreign Job created under the name of the check's next scheduled run (deleted
//     after that slot).
// Each lane first injects each of its kinds once (in seeded order), then draws by weight; cheap faults
// weigh more. The driver also plays the TTL-after-finished controller (which the local fleet does not
// run): it deletes finished restore Jobs carrying ttlSecondsAfterFinished 0, so a TTL that reached a Job
// would bite. Three more checks are stuck for good (NameConflict with a labelled foreign Job,
// NameConflict with an unlabelled one, a Job the API server refuses), each under its own registration
// (the same member, one namespace each), so the hub's reconcile rate for each is its own metric series.
//
// At the end: faults stop, everything is restored, the fleet settles, every check is deleted and the
// checks still present after the finalizer wait are reported as stuck.
import { createWriteStream } from "node:fs"
import { Logger, References } from "effect"
import {
  apiRequest,
  installFleetcheck,
  type LocalCluster,
  type LocalFleet,
  renderKubeconfig,
  startFleet,
} from "../../clusters/local-fleet/index.ts"
import {
  defaultHubNamespace,
  finalizerName,
  labelBackupCheck,
  labelRun,
  namespacesAnnotation,
  registrationLabel,
} from "../../src/api/names.ts"
import { type RunningHub, startHub } from "./hub.ts"
import { type Observer, type ObserverReport, startObserver } from "./observer.ts"
import { samplesOf, sumOf } from "./prometheus-text.ts"
import { sleep, waitUntil } from "./wait.ts"

// -------------------------------------------------------------------------------------------------
// Seeded randomness

/** mulberry32: small, fast, good enough to make a soak reproducible. */
export const seededRandom = (seed: number) => {
  let a = seed >>> 0
  return () => {
    a = (a + 0x6d2b79f5) >>> 0
    let t = a
    t = Math.imul(t ^ (t >>> 15), t | 1)
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61)
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296
  }
}
type Rng = ReturnType<typeof seededRandom>
const pick = <T>(rng: Rng, xs: ReadonlyArray<T>): T => xs[Math.floor(rng() * xs.length)]!
const between = (rng: Rng, lo: number, hi: number) => lo + rng() * (hi - lo)
const shuffle = <T>(rng: Rng, xs: ReadonlyArray<T>): T[] => {
  const out = [...xs]
  for (let i = out.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1))
    ;[out[i], out[j]] = [out[j]!, out[i]!]
  }
  return out
}
const weighted = <K extends string>(rng: Rng, weights: Readonly<Record<K, number>>): K => {
  const entries = Object.entries(weights) as Array<[K, number]>
  let x = rng() * entries.reduce((s, [, w]) => s + w, 0)
  for (const [k, w] of entries) {
    x -= w
    if (x < 0) return k
  }
  return entries.at(-1)![0]
}

// -------------------------------------------------------------------------------------------------
// Faults

export const disruptionWeights = {
  "member-apiserver-restart": 3,
  "member-freeze": 3,
  "hub-restart": 3,
  "credentials-revoked": 3,
} as const
export const objectWeights = {
  "job-deleted-running": 20,
  "job-deleted-finished": 14,
  "spec-flipped": 24,
  "history-limit-0": 8,
  "ttl-0-template": 6,
  "check-recreated": 6,
  "foreign-job-future-run": 6,
} as const
export type FaultKind = keyof typeof disruptionWeights | keyof typeof objectWeights

// -------------------------------------------------------------------------------------------------
// Checks

const ns = "apps"
type Variant =
  | { readonly kind: "pass"; readonly delay: string }
  | { readonly kind: "fail"; readonly delay: string; readonly exitCode: number }
  | { readonly kind: "hang" }

const annotationsOf = (v: Variant): Record<string, string> =>
  v.kind === "pass"
    ? { "fleetcheck.io/simulate": "succeed", "fleetcheck.io/simulate-delay": v.delay }
    : v.kind === "fail"
      ? {
          "fleetcheck.io/simulate": "fail",
          "fleetcheck.io/simulate-delay": v.delay,
          "fleetcheck.io/simulate-exit-code": String(v.exitCode),
        }
      : { "fleetcheck.io/simulate": "hang" }

const randomVariant = (rng: Rng, not?: Variant): Variant => {
  for (;;) {
    const x = rng()
    const v: Variant =
      x < 0.55
        ? { kind: "pass", delay: `${Math.round(between(rng, 300, 12_000))}ms` }
        : x < 0.85
          ? {
              kind: "fail",
              delay: `${Math.round(between(rng, 300, 8_000))}ms`,
              exitCode: rng() < 0.5 ? 1 : 3,
            }
          : { kind: "hang" }
    if (not === undefined || JSON.stringify(v) !== JSON.stringify(not)) return v
  }
}

interface CheckDef {
  readonly member: LocalCluster
  readonly name: string
  readonly scheduled: boolean
  readonly policy: "Forbid" | "Replace"
  variant: Variant
  busy: boolean
}

const checkObject = (d: CheckDef) => ({
  apiVersion: "fleetcheck.io/v1alpha1",
  kind: "BackupCheck",
  metadata: { name: d.name, namespace: ns },
  spec: {
    backup: { name: `${d.name}-backup` },
    ...(d.scheduled ? { schedule: "* * * * *" } : {}),
    timeout: "30s",
    concurrencyPolicy: d.policy,
    jobTemplate: {
      spec: {
        template: {
          metadata: { annotations: annotationsOf(d.variant) },
          spec: { containers: [{ name: "restore", image: "restore:1" }] },
        },
      },
    },
  },
})

const checkPath = (namespace: string, name?: string) =>
  `/apis/fleetcheck.io/v1alpha1/namespaces/${namespace}/backupchecks${name ? `/${name}` : ""}`
const jobsPath = (namespace: string, name?: string) =>
  `/apis/batch/v1/namespaces/${namespace}/jobs${name ? `/${name}` : ""}`
const crbPath = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"

/** The run id of a scheduled time, as ADR 0004 states it: s + compact UTC time, lower case. */
const scheduledRunID = (ms: number) => {
  const s = new Date(ms).toISOString()
  return `s${s.slice(0, 4)}${s.slice(5, 7)}${s.slice(8, 10)}t${s.slice(11, 13)}${s.slice(14, 16)}z`
}

const mergePatch = (c: LocalCluster, path: string, body: unknown) =>
  apiRequest(c.server, c.caPem, c.adminToken, "PATCH", path, body, "application/merge-patch+json")

const isFinished = (job: any) =>
  (job?.status?.conditions ?? []).some(
    (c: any) => (c.type === "Complete" || c.type === "Failed") && c.status === "True",
  )
const ownedBy = (job: any, uid: string) =>
  (job?.metadata?.ownerReferences ?? []).some((r: any) => r.controller === true && r.uid === uid)

// -------------------------------------------------------------------------------------------------
// The soak

export interface SoakOptions {
  readonly faults: number
  readonly seed: number
  /** Member clusters (the last one is registered with its own ServiceAccount identity). Default 3. */
  readonly members?: number
  readonly checksPerMember?: number
  /** About how long injecting the faults takes (the object lane is paced to it). */
  readonly targetMs?: number
  readonly graceMs?: number
  /** How long the fleet settles after the last fault before checks are deleted. */
  readonly settleMs?: number
  readonly finalizerWaitMs?: number
  /** Progress lines (default stderr). */
  readonly log?: (line: string) => void
  /** Where the hub's log lines go (Info and above); default: discarded (FLEETCHECK_TEST_LOG: console). */
  readonly hubLogFile?: string
}

export interface StuckRate {
  readonly check: string
  readonly reason: string
  readonly reconciles: number
  readonly reconcilesPerMin: number
  readonly reconcilesPerMinLast5: number
  /** Reconciles in the first minute of each hub process (its backoff starts at 5 ms), on average. */
  readonly firstMinutePerHubStart: number
  /** The rate once a hub process is older than a minute (its backoff has grown), over that time. */
  readonly afterFirstMinutePerMin: number | undefined
  readonly afterFirstMinuteMinutes: number
  readonly jobPosts: number | undefined
  readonly jobPostsPerMin: number | undefined
}

export interface SoakResult {
  readonly seed: number
  readonly faultsRequested: number
  readonly injected: Readonly<Record<string, number>>
  readonly attemptsWithoutTarget: number
  readonly faultErrors: ReadonlyArray<string>
  readonly ttlControllerDeletions: number
  readonly observer: ObserverReport
  readonly stuckFinalizers: ReadonlyArray<string>
  readonly recreateTimeouts: ReadonlyArray<string>
  readonly stuckRates: ReadonlyArray<StuckRate>
  readonly wallMs: number
  readonly faultPhaseMs: number
  readonly hubStarts: number
}

const stuckChecks = [
  {
    ns: "stuck-labelled",
    name: "conflict",
    reason: "NameConflict (foreign Job with our labels, in the hub's cache)",
  },
  { ns: "stuck-unlabelled", name: "conflict", reason: "NameConflict (foreign Job without labels: POST 409)" },
  { ns: "stuck-refused", name: "refused", reason: "JobCreateFailed (the API server refuses the Job: 422)" },
] as const

export const runSoak = async (options: SoakOptions): Promise<SoakResult> => {
  const t0 = Date.now()
  const log = options.log ?? ((l: string) => process.stderr.write(`${l}\n`))
  const memberCount = options.members ?? 3
  const perMember = options.checksPerMember ?? 8
  const targetMs = options.targetMs ?? options.faults * 1_200
  const rngSetup = seededRandom(options.seed)
  const rngA = seededRandom(options.seed ^ 0x5a5a5a5a)
  const rngB = seededRandom(options.seed ^ 0x3c3c3c3c)
  const memberNames = Array.from({ length: memberCount }, (_, i) => `m${i + 1}`)
  const fleet: LocalFleet = await startFleet({
    clusters: [{ name: "hub", workloads: false }, ...memberNames],
    log: (l) => log(`[fleet] ${l}`),
  })
  const hubCluster = fleet.cluster("hub")
  const members = memberNames.map((n) => fleet.cluster(n))
  const first = members[0]!
  const saMember = members.at(-1)!
  let hub: RunningHub | undefined
  let observer: Observer | undefined
  let hubStarts = 0
  const hubLog = options.hubLogFile ? createWriteStream(options.hubLogFile, { flags: "a" }) : undefined
  // Reconcile errors are the point here (stuck checks, faults): the hub's lines go to the file, or
  // nowhere unless FLEETCHECK_TEST_LOG asks for them on the console.
  const logger = hubLog
    ? Logger.make((o) => {
        hubLog.write(
          `${new Date().toISOString()} ${o.logLevel} ${Array.isArray(o.message) ? o.message.map(String).join(" ") : String(o.message)} ${JSON.stringify(o.fiber.getRef(References.CurrentLogAnnotations))}\n`,
        )
      })
    : process.env.FLEETCHECK_TEST_LOG
      ? undefined
      : Logger.make(() => {})
  const hubStartedAt = new Map<RunningHub, number>()
  const launch = async () => {
    hubStarts++
    const h = await startHub(hubCluster, hubLog ? { logLevel: "Info" } : {}, logger ? { logger } : {})
    hubStartedAt.set(h, Date.now())
    return h
  }
  try {
    // ---------------------------------------------------------------------------------------------
    // Setup: CRDs, namespaces, registrations (the first member scoped to `apps` beside three stuck
    // registrations of one namespace each; the last member with its own ServiceAccount identity).
    await installFleetcheck(hubCluster, members)
    for (const m of members) await m.api("POST", "/api/v1/namespaces", { metadata: { name: ns } })
    const register = async (name: string, kubeconfig: string, namespaces?: string) => {
      const res = await hubCluster.api("POST", `/api/v1/namespaces/${defaultHubNamespace}/secrets`, {
        apiVersion: "v1",
        kind: "Secret",
        metadata: {
          name,
          namespace: defaultHubNamespace,
          labels: { [registrationLabel]: "true" },
          ...(namespaces ? { annotations: { [namespacesAnnotation]: namespaces } } : {}),
        },
        data: { kubeconfig: Buffer.from(kubeconfig).toString("base64") },
      })
      if (res.status !== 201) throw new Error(`registering ${name}: ${JSON.stringify(res.body)}`)
    }
    const applied = await saMember.kubectl([
      "apply",
      "--server-side",
      "-k",
      new URL("../../deploy/member", import.meta.url).pathname,
    ])
    if (applied.code !== 0) throw new Error(`deploy/member on ${saMember.name}: ${applied.stderr}`)
    const token = await saMember.api(
      "POST",
      "/api/v1/namespaces/fleetcheck-system/serviceaccounts/fleetcheck-hub-identity/token",
      { apiVersion: "authentication.k8s.io/v1", kind: "TokenRequest", spec: { expirationSeconds: 86_400 } },
    )
    if (token.status !== 201) throw new Error(`token for ${saMember.name}: ${JSON.stringify(token.body)}`)
    const binding = (await saMember.api("GET", `${crbPath}/fleetcheck-member`)).body
    for (const m of members) {
      if (m === saMember)
        await register(m.name, renderKubeconfig(m.name, m.server, m.caPem, token.body.status.token))
      else await register(m.name, m.kubeconfig, m === first ? ns : undefined)
    }
    // The stuck checks: each under its own registration of the first member.
    for (const s of stuckChecks) {
      await first.api("POST", "/api/v1/namespaces", { metadata: { name: s.ns } })
      await register(`${first.name}-${s.ns}`, first.kubeconfig, s.ns)
      if (s.name === "conflict") {
        const labelled = s.ns === "stuck-labelled"
        const res = await first.api("POST", jobsPath(s.ns), {
          apiVersion: "batch/v1",
          kind: "Job",
          metadata: {
            name: "conflict-g1",
            namespace: s.ns,
            ...(labelled ? { labels: { [labelBackupCheck]: "conflict", [labelRun]: "g1" } } : {}),
          },
          spec: {
            backoffLimit: 0,
            template: {
              metadata: { annotations: { "fleetcheck.io/simulate": "succeed" } },
              spec: { restartPolicy: "Never", containers: [{ name: "foreign", image: "foreign:1" }] },
            },
          },
        })
        if (res.status !== 201) throw new Error(`foreign Job in ${s.ns}: ${JSON.stringify(res.body)}`)
      }
      const res = await first.api("POST", checkPath(s.ns), {
        apiVersion: "fleetcheck.io/v1alpha1",
        kind: "BackupCheck",
        metadata: { name: s.name, namespace: s.ns },
        spec: {
          backup: { name: `${s.ns}-backup` },
          jobTemplate: {
            spec: {
              template: {
                spec: {
                  // Valid for the CRD, refused by the Job API: a container name must be a DNS label.
                  containers: [
                    { name: s.name === "refused" ? "Not_A_Label" : "restore", image: "restore:1" },
                  ],
                },
              },
            },
          },
        },
      })
      if (res.status !== 201) throw new Error(`stuck check in ${s.ns}: ${JSON.stringify(res.body)}`)
    }

    observer = startObserver(members, { graceMs: options.graceMs ?? 5_000, log })
    const obs = observer
    await waitUntil("the observer's streams", 60_000, () => obs.allUp())

    const defs: CheckDef[] = []
    for (const m of members)
      for (let i = 0; i < perMember; i++)
        defs.push({
          member: m,
          name: `c${i}`,
          scheduled: i % 5 !== 4,
          policy: i % 3 === 2 ? "Replace" : "Forbid",
          variant: randomVariant(rngSetup),
          busy: false,
        })
    for (const d of defs) {
      const res = await d.member.api("POST", checkPath(ns), checkObject(d))
      if (res.status !== 201)
        throw new Error(`creating ${d.member.name}/${d.name}: ${JSON.stringify(res.body)}`)
    }
    hub = await launch()
    log(
      `[soak] seed ${options.seed}: ${defs.length} checks on ${members.length} members, hub up at ${hub.url} after ${((Date.now() - t0) / 1000).toFixed(1)} s of setup`,
    )

    // ---------------------------------------------------------------------------------------------
    // Stuck-check rates: the hub's reconcile counter per registration, the API server's refused POSTs.
    const stuckClusters = stuckChecks.map((s) => `${first.name}-${s.ns}`)
    const reconcileSamples: Array<{ t: number; total: Record<string, number> }> = []
    const reconcileTotal: Record<string, number> = {}
    /** Reconciles in the first minute of a hub's life (fresh backoff), and after it. */
    const early: Record<string, number> = {}
    const late: Record<string, number> = {}
    let lateMs = 0
    let prevSampleT = 0
    const lastSeen = new Map<string, number>()
    let sampledHub: RunningHub | undefined
    const postCodes = { "409": 0, "422": 0 }
    const lastPost = { "409": -1, "422": -1 }
    const sampleRates = async () => {
      const h = hub
      if (h) {
        try {
          const text = await (await fetch(`${h.url}/metrics`, { signal: AbortSignal.timeout(5_000) })).text()
          const t = Date.now()
          const born = hubStartedAt.get(h) ?? t
          if (sampledHub !== h) {
            sampledHub = h
            lastSeen.clear()
            prevSampleT = born
          }
          const isLate = t - born > 60_000
          if (isLate) lateMs += t - Math.max(prevSampleT, born + 60_000)
          prevSampleT = t
          const now: Record<string, number> = {}
          for (const { labels, value } of samplesOf(text, "controller_runtime_reconcile_total")) {
            const cluster = labels.cluster
            if (!cluster || !stuckClusters.includes(cluster)) continue
            now[cluster] = (now[cluster] ?? 0) + value
          }
          for (const [cluster, v] of Object.entries(now)) {
            const prev = lastSeen.get(cluster) ?? 0
            const d = Math.max(0, v - prev)
            reconcileTotal[cluster] = (reconcileTotal[cluster] ?? 0) + d
            const bucket = isLate ? late : early
            bucket[cluster] = (bucket[cluster] ?? 0) + d
            lastSeen.set(cluster, v)
          }
          reconcileSamples.push({ t: Date.now(), total: { ...reconcileTotal } })
        } catch {
          // the hub is restarting
        }
      }
      try {
        const res = await first.api("GET", "/metrics")
        if (res.status === 200 && typeof res.body === "string") {
          const posts = (code: string) =>
            sumOf(res.body as string, "apiserver_request_total", { resource: "jobs", verb: "POST", code })
          const now = { "409": posts("409"), "422": posts("422") }
          for (const code of ["409", "422"] as const) {
            const prev = lastPost[code]
            postCodes[code] += prev < 0 ? 0 : now[code] >= prev ? now[code] - prev : now[code]
            lastPost[code] = now[code]
          }
        }
      } catch {
        // the member is down
      }
    }
    await sampleRates()
    const ratesFrom = Date.now()
    const postsAtStart = { ...postCodes }

    // ---------------------------------------------------------------------------------------------
    // Fault lanes
    const injected: Record<string, number> = {}
    let total = 0
    let noTarget = 0
    const errors: string[] = []
    const down = new Set<string>()
    const pending: Array<Promise<void>> = []
    const recreateTimeouts: string[] = []
    const foreignJobs: Array<{ member: LocalCluster; name: string; uid: string }> = []
    let done = false
    // The run ends once the requested number is reached AND every kind was injected: the lanes run at
    // their own pace, and the object lane alone could reach the number while the disruption lane, a few
    // seconds per fault, was still on its first pass (a short soak in CI ended with member-freeze never
    // injected). Past the number neither lane draws more; a kind that never finds a target ends the run
    // at the deadline instead, and the report shows the kind missing.
    const kindsLeft = new Set<string>([...Object.keys(disruptionWeights), ...Object.keys(objectWeights)])
    const drawMore = () => total < options.faults
    const count = (kind: FaultKind, detail: string) => {
      injected[kind] = (injected[kind] ?? 0) + 1
      kindsLeft.delete(kind)
      total++
      if (total >= options.faults && kindsLeft.size === 0) done = true
      if (total % 50 === 0 || total === options.faults) {
        const r = obs.report()
        log(
          `[soak] ${total}/${options.faults} faults after ${((Date.now() - t0) / 1000).toFixed(0)} s; duplicates ${r.duplicates.length}, lost ${r.lostVerdicts.length}, false green raw ${r.falseGreen.rawS} s / beyond grace ${r.falseGreen.beyondGraceS} s; last: ${kind} ${detail}`,
        )
      }
    }
    const available = (d: CheckDef) => !d.busy && !down.has(d.member.name)

    const disruption = async (kind: keyof typeof disruptionWeights) => {
      switch (kind) {
        case "member-apiserver-restart": {
          const m = pick(rngA, members)
          const downMs = between(rngA, 1_000, 6_000)
          down.add(m.name)
          const end = obs.blind(m.name, "apiserver stopped")
          try {
            await m.stopApiServer()
            count(kind, `${m.name} for ${(downMs / 1000).toFixed(1)} s`)
            await sleep(downMs)
            await m.startApiServer()
          } finally {
            end()
            down.delete(m.name)
          }
          return
        }
        case "member-freeze": {
          const m = pick(rngA, members)
          const ms = between(rngA, 2_000, 6_000)
          down.add(m.name)
          const end = obs.blind(m.name, "apiserver frozen")
          m.freezeApiServer()
          try {
            count(kind, `${m.name} for ${(ms / 1000).toFixed(1)} s`)
            await sleep(ms)
          } finally {
            m.thawApiServer()
            end()
            down.delete(m.name)
          }
          return
        }
        case "hub-restart": {
          const ms = between(rngA, 200, 3_000)
          const end = obs.blind("*", "hub stopped")
          try {
            await hub?.stop()
            hub = undefined
            count(kind, `down ${(ms / 1000).toFixed(1)} s`)
            await sleep(ms)
            hub = await launch()
          } finally {
            end()
          }
          return
        }
        case "credentials-revoked": {
          const ms = between(rngA, 2_000, 8_000)
          const end = obs.blind(saMember.name, "credentials revoked")
          try {
            const del = await saMember.api("DELETE", `${crbPath}/fleetcheck-member`)
            if (del.status !== 200) throw new Error(`deleting the binding: ${del.status}`)
            count(kind, `${saMember.name} for ${(ms / 1000).toFixed(1)} s`)
            await sleep(ms)
          } finally {
            const { metadata, ...rest } = binding
            await waitUntil("the binding re-created", 60_000, async () => {
              const r = await saMember.api("POST", crbPath, {
                ...rest,
                metadata: { name: metadata.name, labels: metadata.labels },
              })
              return r.status === 201 || r.status === 409
            })
            end()
          }
          return
        }
      }
    }

    /** A random check of an available member; undefined when none is. */
    const someCheck = (filter: (d: CheckDef) => boolean = () => true) => {
      const candidates = defs.filter((d) => available(d) && filter(d))
      return candidates.length === 0 ? undefined : pick(rngB, candidates)
    }
    const jobsOf = async (d: CheckDef) => {
      const c = await d.member.api("GET", checkPath(ns, d.name))
      if (c.status !== 200) return undefined
      const res = await d.member.api(
        "GET",
        `${jobsPath(ns)}?labelSelector=${encodeURIComponent(`${labelBackupCheck}=${d.name}`)}`,
      )
      if (res.status !== 200) return undefined
      return (res.body.items as any[]).filter((j) => ownedBy(j, c.body.metadata.uid))
    }
    /** Reads, changes and writes a check's spec (retried on Conflict). */
    const editSpec = async (d: CheckDef, edit: (spec: any) => void) => {
      for (let i = 0; i < 5; i++) {
        const cur = await d.member.api("GET", checkPath(ns, d.name))
        if (cur.status !== 200 || cur.body.metadata.deletionTimestamp) return false
        edit(cur.body.spec)
        const put = await d.member.api("PUT", checkPath(ns, d.name), cur.body)
        if (put.status === 200) return true
        if (put.status !== 409) throw new Error(`PUT ${d.name}: ${put.status} ${JSON.stringify(put.body)}`)
      }
      return false
    }
    const later = (ms: number, what: string, fn: () => Promise<void>) => {
      pending.push(
        sleep(ms)
          .then(fn)
          .catch((e) => {
            errors.push(`${what}: ${String(e)}`)
          }),
      )
    }
    const whenUp = async (d: CheckDef) => {
      await waitUntil(`${d.member.name} up`, 120_000, () => !down.has(d.member.name), 200)
    }

    /** One object fault; false when it found nothing to act on. */
    const objectFault = async (kind: keyof typeof objectWeights): Promise<boolean> => {
      switch (kind) {
        case "job-deleted-running":
        case "job-deleted-finished": {
          const wantFinished = kind === "job-deleted-finished"
          for (let attempt = 0; attempt < 6; attempt++) {
            const d = someCheck()
            if (!d) return false
            const jobs = await jobsOf(d)
            const target = (jobs ?? []).filter(
              (j) => !j.metadata.deletionTimestamp && isFinished(j) === wantFinished,
            )
            if (target.length === 0) continue
            const job = pick(rngB, target)
            const del = await d.member.api("DELETE", jobsPath(ns, job.metadata.name), {
              apiVersion: "v1",
              kind: "DeleteOptions",
              propagationPolicy: "Background",
              preconditions: { uid: job.metadata.uid },
            })
            if (del.status !== 200 && del.status !== 202) continue
            obs.note(d.member.name, ns, d.name, `${kind} ${job.metadata.name}`)
            count(kind, `${d.member.name}/${d.name} ${job.metadata.name}`)
            return true
          }
          return false
        }
        case "spec-flipped": {
          const d = someCheck()
          if (!d) return false
          const v = randomVariant(rngB, d.variant)
          const ok = await editSpec(d, (spec) => {
            spec.jobTemplate.spec.template.metadata = { annotations: annotationsOf(v) }
          })
          if (!ok) return false
          d.variant = v
          obs.note(d.member.name, ns, d.name, `${kind} to ${JSON.stringify(v)}`)
          count(kind, `${d.member.name}/${d.name} ${v.kind}`)
          return true
        }
        case "history-limit-0": {
          const d = someCheck()
          if (!d) return false
          const res = await mergePatch(d.member, checkPath(ns, d.name), {
            spec: { successfulRunsHistoryLimit: 0, failedRunsHistoryLimit: 0 },
          })
          if (res.status !== 200) return false
          obs.note(d.member.name, ns, d.name, kind)
          count(kind, `${d.member.name}/${d.name}`)
          later(between(rngB, 10_000, 40_000), `history limits of ${d.name} back`, async () => {
            await whenUp(d)
            await mergePatch(d.member, checkPath(ns, d.name), {
              spec: { successfulRunsHistoryLimit: 3, failedRunsHistoryLimit: 1 },
            })
          })
          return true
        }
        case "ttl-0-template": {
          const d = someCheck()
          if (!d) return false
          const res = await mergePatch(d.member, checkPath(ns, d.name), {
            spec: { jobTemplate: { spec: { ttlSecondsAfterFinished: 0 } } },
          })
          if (res.status !== 200) return false
          obs.note(d.member.name, ns, d.name, kind)
          count(kind, `${d.member.name}/${d.name}`)
          later(between(rngB, 20_000, 60_000), `ttl of ${d.name} removed`, async () => {
            await whenUp(d)
            await mergePatch(d.member, checkPath(ns, d.name), {
              spec: { jobTemplate: { spec: { ttlSecondsAfterFinished: null } } },
            })
          })
          return true
        }
        case "check-recreated": {
          const d = someCheck()
          if (!d) return false
          const del = await d.member.api("DELETE", checkPath(ns, d.name))
          if (del.status !== 200 && del.status !== 202) return false
          d.busy = true
          obs.note(d.member.name, ns, d.name, kind)
          count(kind, `${d.member.name}/${d.name}`)
          pending.push(
            (async () => {
              try {
                const deadline = Date.now() + 90_000
                for (;;) {
                  const r = await d.member.api("GET", checkPath(ns, d.name)).catch(() => ({ status: 0 }))
                  if (r.status === 404) break
                  if (Date.now() > deadline) {
                    recreateTimeouts.push(`${d.member.name}/${d.name}: still present 90 s after deletion`)
                    return
                  }
                  await sleep(500)
                }
                await waitUntil(`${d.name} re-created`, 120_000, async () => {
                  if (down.has(d.member.name)) return false
                  const r = await d.member.api("POST", checkPath(ns), checkObject(d))
                  return r.status === 201
                })
              } catch (e) {
                errors.push(`re-creating ${d.name}: ${String(e)}`)
              } finally {
                d.busy = false
              }
            })(),
          )
          return true
        }
        case "foreign-job-future-run": {
          // Not on the first member: its API server's 409s for Job POSTs measure a stuck check.
          const d = someCheck((x) => x.scheduled && x.member !== first)
          if (!d) return false
          // The next slot at least 4 s away, so the hub has not created its Job yet.
          const slot = Math.ceil((Date.now() + 4_000) / 60_000) * 60_000
          const runID = scheduledRunID(slot)
          const name = `${d.name}-${runID}`
          const labelled = rngB() < 0.5
          const res = await d.member.api("POST", jobsPath(ns), {
            apiVersion: "batch/v1",
            kind: "Job",
            metadata: {
              name,
              namespace: ns,
              ...(labelled ? { labels: { [labelBackupCheck]: d.name, [labelRun]: runID } } : {}),
            },
            spec: {
              backoffLimit: 0,
              template: {
                metadata: { annotations: { "fleetcheck.io/simulate": "succeed" } },
                spec: { restartPolicy: "Never", containers: [{ name: "foreign", image: "foreign:1" }] },
              },
            },
          })
          if (res.status !== 201) return false
          foreignJobs.push({ member: d.member, name, uid: res.body.metadata.uid })
          obs.note(d.member.name, ns, d.name, `${kind} ${name}${labelled ? " (labelled)" : ""}`)
          count(kind, `${d.member.name}/${name}`)
          later(slot - Date.now() + between(rngB, 5_000, 15_000), `foreign Job ${name} deleted`, async () => {
            await whenUp(d)
            await d.member.api("DELETE", jobsPath(ns, name), {
              apiVersion: "v1",
              kind: "DeleteOptions",
              propagationPolicy: "Background",
              preconditions: { uid: res.body.metadata.uid },
            })
          })
          return true
        }
      }
    }

    // The TTL-after-finished controller the local fleet does not run.
    let ttlDeletions = 0
    const ttlController = (async () => {
      while (!done) {
        for (const m of members) {
          if (down.has(m.name)) continue
          try {
            const res = await m.api(
              "GET",
              `/apis/batch/v1/jobs?labelSelector=${encodeURIComponent(labelBackupCheck)}`,
            )
            for (const j of res.body?.items ?? []) {
              if (j.spec?.ttlSecondsAfterFinished !== 0 || !isFinished(j)) continue
              const del = await m.api("DELETE", jobsPath(j.metadata.namespace, j.metadata.name), {
                apiVersion: "v1",
                kind: "DeleteOptions",
                propagationPolicy: "Background",
                preconditions: { uid: j.metadata.uid },
              })
              if (del.status === 200) ttlDeletions++
            }
          } catch {
            // down meanwhile
          }
        }
        await sleep(2_000)
      }
    })()
    const rateSampler = (async () => {
      while (!done) {
        await sleep(5_000)
        await sampleRates()
      }
    })()

    const faultStart = Date.now()
    const deadline = setTimeout(
      () => {
        done = true
      },
      Math.max(4 * targetMs, 180_000),
    )
    const laneA = (async () => {
      const queue: Array<keyof typeof disruptionWeights> = shuffle(
        rngA,
        Object.keys(disruptionWeights) as Array<keyof typeof disruptionWeights>,
      )
      await sleep(between(rngA, 3_000, 8_000))
      while (!done) {
        const kind = queue.shift() ?? (drawMore() ? weighted(rngA, disruptionWeights) : undefined)
        if (kind === undefined) {
          await sleep(500)
          continue
        }
        try {
          await disruption(kind)
        } catch (e) {
          errors.push(`${kind}: ${String(e)}`)
        }
        // Time to recover before the next disruption.
        await sleep(between(rngA, 3_000, 8_000))
      }
    })()
    const laneB = (async () => {
      const queue: Array<keyof typeof objectWeights> = shuffle(
        rngB,
        Object.keys(objectWeights) as Array<keyof typeof objectWeights>,
      )
      const period = targetMs / options.faults
      while (!done) {
        await sleep(Math.max(100, faultStart + (total + 1) * period - Date.now()))
        if (done) break
        const kind = queue[0] ?? (drawMore() ? weighted(rngB, objectWeights) : undefined)
        if (kind === undefined) {
          await sleep(500)
          continue
        }
        try {
          if (await objectFault(kind)) queue.shift()
          else {
            noTarget++
            await sleep(300)
          }
        } catch (e) {
          errors.push(`${kind}: ${String(e)}`)
          await sleep(500)
        }
      }
    })()
    await Promise.all([laneA, laneB])
    clearTimeout(deadline)
    const faultPhaseMs = Date.now() - faultStart
    log(`[soak] ${total} faults injected in ${(faultPhaseMs / 1000).toFixed(0)} s; waiting for restores`)
    await Promise.all(pending)
    await ttlController
    await rateSampler
    await sampleRates()
    const ratesTo = Date.now()

    // ---------------------------------------------------------------------------------------------
    // Settle, then delete every check and wait for the finalizers.
    await waitUntil("the observer's streams after the faults", 120_000, () => obs.allUp())
    await sleep(options.settleMs ?? 20_000)
    const all: Array<{ member: LocalCluster; ns: string; name: string }> = []
    for (const m of members) {
      const res = await m.api("GET", "/apis/fleetcheck.io/v1alpha1/backupchecks")
      for (const c of res.body?.items ?? [])
        all.push({ member: m, ns: c.metadata.namespace, name: c.metadata.name })
    }
    log(`[soak] deleting ${all.length} checks`)
    const deletedAt = Date.now()
    for (const c of all) await c.member.api("DELETE", checkPath(c.ns, c.name))
    const finalizerWaitMs = options.finalizerWaitMs ?? 60_000
    const remaining = async () => {
      const left: string[] = []
      for (const m of members) {
        const res = await m.api("GET", "/apis/fleetcheck.io/v1alpha1/backupchecks")
        for (const c of res.body?.items ?? [])
          left.push(
            `${m.name}/${c.metadata.namespace}/${c.metadata.name} finalizers=${JSON.stringify(c.metadata.finalizers ?? [])}${(c.metadata.finalizers ?? []).includes(finalizerName) ? " (fleetcheck.io/cleanup left behind)" : ""}`,
          )
      }
      return left
    }
    let left = await remaining()
    while (left.length > 0 && Date.now() - deletedAt < finalizerWaitMs) {
      await sleep(1_000)
      left = await remaining()
    }
    log(`[soak] checks left ${((Date.now() - deletedAt) / 1000).toFixed(1)} s after deletion: ${left.length}`)
    for (const f of foreignJobs)
      await f.member
        .api("DELETE", jobsPath(ns, f.name), {
          apiVersion: "v1",
          kind: "DeleteOptions",
          propagationPolicy: "Background",
          preconditions: { uid: f.uid },
        })
        .catch(() => undefined)
    await sleep(2_000)
    await observer.stop()
    const report = observer.report()
    observer = undefined

    const minutes = (ratesTo - ratesFrom) / 60_000
    const last5 = reconcileSamples.filter((s) => s.t >= ratesTo - 5 * 60_000)
    const stuckRates: StuckRate[] = stuckChecks.map((s, i) => {
      const cluster = stuckClusters[i]!
      const totalR = reconcileTotal[cluster] ?? 0
      const a = last5[0]
      const b = last5.at(-1)
      const lastMin = a && b && b.t > a.t ? (b.t - a.t) / 60_000 : 0
      const lastR = a && b ? (b.total[cluster] ?? 0) - (a.total[cluster] ?? 0) : 0
      const code = s.ns === "stuck-unlabelled" ? "409" : s.ns === "stuck-refused" ? "422" : undefined
      const posts = code ? postCodes[code] - postsAtStart[code] : undefined
      return {
        check: `${first.name}/${s.ns}/${s.name} (registration ${cluster})`,
        reason: s.reason,
        reconciles: totalR,
        reconcilesPerMin: minutes > 0 ? totalR / minutes : 0,
        reconcilesPerMinLast5: lastMin > 0 ? lastR / lastMin : 0,
        firstMinutePerHubStart: (early[cluster] ?? 0) / Math.max(1, hubStarts),
        afterFirstMinutePerMin: lateMs > 0 ? (late[cluster] ?? 0) / (lateMs / 60_000) : undefined,
        afterFirstMinuteMinutes: lateMs / 60_000,
        jobPosts: posts,
        jobPostsPerMin: posts === undefined || minutes <= 0 ? undefined : posts / minutes,
      }
    })
    return {
      seed: options.seed,
      faultsRequested: options.faults,
      injected,
      attemptsWithoutTarget: noTarget,
      faultErrors: errors,
      ttlControllerDeletions: ttlDeletions,
      observer: report,
      stuckFinalizers: left,
      recreateTimeouts,
      stuckRates,
      wallMs: Date.now() - t0,
      faultPhaseMs,
      hubStarts,
    }
  } finally {
    await observer?.stop()
    await hub?.stop()
    hubLog?.end()
    for (const m of members) m.thawApiServer()
    await fleet.stop()
  }
}

// -------------------------------------------------------------------------------------------------
// The printout

const refLine = (r: {
  check: string
  runID: string
  job: string
  outcome: string
  finishedAt?: string | undefined
  detail: string
}) =>
  `    ${r.check} run ${r.runID} (Job ${r.job}, ${r.outcome}${r.finishedAt ? ` seen ${r.finishedAt}` : ""}): ${r.detail}`

export const formatReport = (r: SoakResult, command: string): string => {
  const o = r.observer
  const fg = o.falseGreen
  const lines: string[] = []
  const total = Object.values(r.injected).reduce((a, b) => a + b, 0)
  lines.push(`fault soak: ${total} faults injected (${r.faultsRequested} requested), seed ${r.seed}`)
  lines.push("faults by kind:")
  for (const k of [...Object.keys(disruptionWeights), ...Object.keys(objectWeights)])
    lines.push(`  ${k.padEnd(28)} ${r.injected[k] ?? 0}`)
  lines.push(
    `  (attempts that found no target: ${r.attemptsWithoutTarget}; hub starts: ${r.hubStarts}; TTL-controller deletions: ${r.ttlControllerDeletions}; fault errors: ${r.faultErrors.length})`,
  )
  for (const e of r.faultErrors.slice(0, 10)) lines.push(`    error: ${e}`)
  lines.push(
    `observed: ${o.checks} checks, ${o.runs} runs (${Object.entries(o.outcomes)
      .map(([k, v]) => `${k} ${v}`)
      .join(", ")}), ${o.finishedRuns} finished; restore Jobs with ttlSecondsAfterFinished: ${o.jobsWithTtl}`,
  )
  lines.push(`duplicate Jobs (runs with more than one Job uid): ${o.duplicates.length}`)
  for (const d of o.duplicates.slice(0, 10)) lines.push(refLine(d))
  lines.push(`lost verdicts: ${o.lostVerdicts.length}`)
  for (const d of o.lostVerdicts.slice(0, 10)) lines.push(refLine(d))
  lines.push(
    `  (not counted: cut by deletion within the grace ${o.cutByDeletion.length}, unverifiable across an observer stream gap ${o.unverifiable.length}, finished but still unrecorded at the end ${o.pendingUnrecorded.length})`,
  )
  for (const d of [...o.unverifiable, ...o.pendingUnrecorded].slice(0, 10)) lines.push(refLine(d))
  lines.push(`wrong verdicts (Job failed, recorded Succeeded): ${o.wrongVerdicts.length}`)
  for (const d of o.wrongVerdicts.slice(0, 10)) lines.push(refLine(d))
  lines.push(
    `conservative verdicts (Job succeeded, recorded Failed), by reason: ${JSON.stringify(o.conservativeVerdicts)}`,
  )
  lines.push(
    `unbacked success verdicts (no owned Job of the run seen completing): ${o.unbackedSuccesses.length}`,
  )
  for (const d of o.unbackedSuccesses.slice(0, 10)) lines.push(refLine(d))
  lines.push(`vanished runs never recorded although superseded: ${o.vanishedUnrecorded.length}`)
  for (const d of o.vanishedUnrecorded.slice(0, 10)) lines.push(refLine(d))
  lines.push(
    `false-green seconds: raw ${fg.rawS}; beyond the ${o.graceMs / 1000} s grace (hub sight) ${fg.beyondGraceS}; beyond the grace by wall clock ${fg.strictBeyondGraceS}; episodes ${fg.episodes}`,
  )
  for (const [k, v] of Object.entries(fg.byClause))
    lines.push(`  ${k.padEnd(16)} raw ${v.rawS} s, beyond grace ${v.beyondGraceS} s`)
  lines.push(
    `  (informational: green while the latest finished run of another restore spec failed: ${fg.otherSpecFailureGreenS} s)`,
  )
  if (fg.worst.length > 0) lines.push("  worst episodes:")
  for (const e of fg.worst) {
    lines.push(
      `  - ${e.check} (uid ${e.uid.slice(0, 8)}) ${[...e.clauses].join("+")}${e.run ? ` run ${e.run}` : ""}: raw ${(e.rawMs / 1000).toFixed(2)} s, beyond grace ${(e.beyondMs / 1000).toFixed(2)} s (wall ${(e.strictBeyondMs / 1000).toFixed(2)} s), from ${new Date(e.start).toISOString()}, fact visible ${new Date(e.fact).toISOString()}`,
    )
    if (e.beyondMs > 0 || e === fg.worst[0]) for (const l of e.timeline ?? []) lines.push(`      ${l}`)
  }
  lines.push(`stuck finalizers (checks still present 60 s after deletion): ${r.stuckFinalizers.length}`)
  for (const s of r.stuckFinalizers) lines.push(`    ${s}`)
  if (r.recreateTimeouts.length > 0) lines.push(`  during the run: ${r.recreateTimeouts.join("; ")}`)
  lines.push("stuck checks (no progress possible), hub reconciles and API requests:")
  for (const s of r.stuckRates)
    lines.push(
      `  ${s.check}: ${s.reason}: ${s.reconciles} reconciles, ${s.reconcilesPerMin.toFixed(2)}/min over the run, ${s.reconcilesPerMinLast5.toFixed(2)}/min over the last 5 min; ${s.firstMinutePerHubStart.toFixed(1)} in the first minute of each hub process (backoff from 5 ms), ${s.afterFirstMinutePerMin === undefined ? "no hub process lived longer" : `${s.afterFirstMinutePerMin.toFixed(2)}/min after it (over ${s.afterFirstMinuteMinutes.toFixed(1)} min)`}${s.jobPosts === undefined ? "; no Job POSTs (conflict seen in the cache)" : `; refused Job POSTs ${s.jobPosts} (${(s.jobPostsPerMin ?? 0).toFixed(2)}/min)`}`,
    )
  lines.push(`observer stream gaps (relists after 410): ${JSON.stringify(o.streamGaps)}`)
  lines.push(
    `blind time declared: ${Object.entries(o.blindSeconds)
      .map(([k, v]) => `${k} ${v.toFixed(1)} s`)
      .join(", ")}`,
  )
  lines.push(
    `wall time ${(r.wallMs / 1000).toFixed(1)} s (faults ${(r.faultPhaseMs / 1000).toFixed(1)} s); command: ${command}`,
  )
  return lines.join("\n")
}
