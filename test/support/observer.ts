// An observer independent of the hub, for fault soaks: it reads the members' BackupChecks and restore
// Jobs with its own requests (LIST, then WATCH from the list's resourceVersion, as the admin of each
// member) and judges the hub's promise from what the API servers hold. It imports names only from the
// product; nothing of the hub's code, caches or views.
//
// Definitions (per check uid; a check deleted and re-created is a new check):
//
// - run: a restore Job controlled by the check (controller ownerReference uid = check uid), keyed by
//   its `fleetcheck.io/run` label. Jobs with the labels but no such owner are foreign and never a run.
//   Runs are ordered by creationTimestamp, then by the resourceVersion the observer first saw them at.
//   A run's outcome: Succeeded (Job condition Complete=True, or SuccessCriteriaMet=True, which the Job
//   controller sets first once the outcome is decided), Failed (Failed=True or FailureTarget=True),
//   Vanished (the Job was deleted before any of those), Unknown (it disappeared while the observer's
//   stream had a gap, so nobody here saw how it ended). "Finished" is any of those; finishSeenAt is the
//   time the observer first saw it.
// - duplicate Jobs: more than one Job uid ever seen for one (check uid, run id).
// - recorded: some status version the observer saw had `status.lastRun` (or an entry of
//   `status.history`, if present) with that run id and result Succeeded or Failed.
// - lost verdict: a run the observer saw finish Succeeded or Failed that was never recorded, although
//   the status moved on to a later run (lastRun names a run whose Job was created after this one), or
//   the check was deleted after the hub had had `grace` of sight (below) since the run finished.
//   Deleted sooner: "cut by deletion" (reported, not lost). When the observer's BackupCheck stream had
//   a gap (a relist after 410) between the run's creation and the moment it was superseded, the
//   recording may have been missed: "unverifiable" (reported with the run, not counted as lost).
// - restore spec (the observer's own notion, not the hub's hash): spec.backup.name and the pod
//   template's `fleetcheck.io/simulate*` annotations; for a Job, its FLEETCHECK_BACKUP_NAME env and the
//   same annotations. It is what decides how the restore ends on this fleet.
// - false green: the check's Verified condition is True (and the check is not being deleted) while
//     failed:          the latest finished run of the current restore spec failed or vanished, or
//     unproven:        no run of the current restore spec has finished (phantom green), or
//     staleGeneration: metadata.generation > the condition's observedGeneration.
//   The fact that makes it false became visible at: the run's finishSeenAt (or the time the current
//   restore spec was first seen, if later); the time the current restore spec was first seen; the time
//   the newer generation was first seen. Time is counted only while the observer's streams of that
//   member are up (when the API server is down nobody can read the condition). The Job stream and the
//   BackupCheck stream are separate watches and may deliver out of order by milliseconds: a run the
//   status records as Succeeded counts as a finished success for up to `skew` (1 s) before its Job's
//   success reaches the observer; if it does not arrive by then, it does not count (and a success
//   never seen is reported as unbacked below).
//   - raw: all such time.
//   - beyond grace: such time at which the hub has had at least `grace` of sight since the fact became
//     visible. Sight is wall time minus the intervals the fault driver declares blind for that member
//     (hub stopped, member API server stopped or frozen, the hub's member credentials revoked); the
//     hub's own reconnect and resync after a blind interval count as sight. Time inside a blind interval
//     is never beyond grace.
//   - strict beyond grace: the same with wall time (blind intervals not excused), for transparency.
//   Also reported (informational, ADR 0004 allows it): green while the latest finished run of another
//   restore spec failed.
// - unbacked success: a status recording run R as Succeeded although the observer never saw an owned
//   Job of R complete (e.g. a foreign Job's result taken for the run's).
// - wrong verdict: recorded Succeeded for a run whose Job failed (or the reverse, reported apart as
//   conservative, with the recorded reason).
import { request } from "node:https"
import type { LocalCluster } from "../../clusters/local-fleet/index.ts"
import { labelBackupCheck, labelRun } from "../../src/api/names.ts"

type Outcome = "Succeeded" | "Failed" | "Vanished" | "Unknown"

interface Run {
  readonly jobUid: string
  readonly jobName: string
  readonly checkUid: string
  readonly runID: string
  readonly createdMs: number
  readonly orderRV: number
  readonly content: string
  readonly firstSeen: number
  readonly ttl: number | undefined
  outcome: Outcome | undefined
  finishSeenAt: number | undefined
  deletedAt: number | undefined
  supersededAt: number | undefined
  supersededBy: string | undefined
}

interface Recorded {
  readonly result: string
  readonly reason: string | undefined
  readonly at: number
}

interface Check {
  readonly uid: string
  readonly cluster: string
  readonly namespace: string
  readonly name: string
  readonly key: string
  readonly firstSeen: number
  generation: number
  genSince: number
  content: string
  contentSince: number
  verified: { status: string; reason: string; observedGeneration: number | undefined } | undefined
  lastRunID: string | undefined
  lastRunResult: string | undefined
  lastRunStart: number | undefined
  deletedAt: number | undefined
  gone: boolean
  readonly recorded: Map<string, Recorded>
  readonly runs: Set<Run>
  episode: Episode | undefined
  statusKey: string
}

export interface Episode {
  readonly check: string
  readonly uid: string
  readonly start: number
  end: number | undefined
  clauses: Set<string>
  fact: number
  run: string | undefined
  rawMs: number
  beyondMs: number
  strictBeyondMs: number
  timeline: string[] | undefined
}

interface Blind {
  readonly scope: string
  readonly why: string
  readonly start: number
  end: number | undefined
}

export interface RunRef {
  readonly check: string
  readonly uid: string
  readonly runID: string
  readonly job: string
  readonly outcome: string
  readonly finishedAt: string | undefined
  readonly detail: string
}

export interface FalseGreenFigures {
  readonly rawS: number
  readonly beyondGraceS: number
  readonly strictBeyondGraceS: number
  readonly byClause: Readonly<Record<string, { rawS: number; beyondGraceS: number }>>
  readonly episodes: number
  readonly worst: ReadonlyArray<Episode>
  readonly otherSpecFailureGreenS: number
}

export interface ObserverReport {
  readonly graceMs: number
  readonly checks: number
  readonly runs: number
  readonly finishedRuns: number
  readonly outcomes: Readonly<Record<string, number>>
  readonly duplicates: ReadonlyArray<RunRef & { readonly jobUids: ReadonlyArray<string> }>
  readonly lostVerdicts: ReadonlyArray<RunRef>
  readonly cutByDeletion: ReadonlyArray<RunRef>
  readonly unverifiable: ReadonlyArray<RunRef>
  readonly pendingUnrecorded: ReadonlyArray<RunRef>
  readonly wrongVerdicts: ReadonlyArray<RunRef>
  readonly conservativeVerdicts: Readonly<Record<string, number>>
  readonly unbackedSuccesses: ReadonlyArray<RunRef>
  readonly vanishedUnrecorded: ReadonlyArray<RunRef>
  readonly jobsWithTtl: number
  readonly falseGreen: FalseGreenFigures
  readonly streamGaps: Readonly<Record<string, number>>
  readonly blindSeconds: Readonly<Record<string, number>>
}

export interface ObserverOptions {
  /** Propagation grace for false greens and deletions (default 5 s). */
  readonly graceMs?: number
  /** How long a recorded success may wait for its Job's success on the other stream (default 1 s). */
  readonly skewMs?: number
  /** How often the false-green predicate is evaluated (default 250 ms). */
  readonly tickMs?: number
  /** Diagnostic lines (default: none). */
  readonly log?: (line: string) => void
}

const simulateKeys = (annotations: Record<string, string> | undefined) =>
  Object.entries(annotations ?? {})
    .filter(([k]) => k.startsWith("fleetcheck.io/simulate"))
    .sort(([a], [b]) => (a < b ? -1 : 1))

const checkContent = (obj: any): string =>
  JSON.stringify([
    obj?.spec?.backup?.name ?? "",
    simulateKeys(obj?.spec?.jobTemplate?.spec?.template?.metadata?.annotations),
  ])

const jobContent = (job: any): string => {
  const env: Array<{ name: string; value?: string }> = job?.spec?.template?.spec?.containers?.[0]?.env ?? []
  return JSON.stringify([
    env.find((e) => e.name === "FLEETCHECK_BACKUP_NAME")?.value ?? "",
    simulateKeys(job?.spec?.template?.metadata?.annotations),
  ])
}

const jobFinished = (job: any): "Succeeded" | "Failed" | undefined => {
  const conds: Array<{ type: string; status: string }> = job?.status?.conditions ?? []
  const has = (type: string) => conds.some((c) => c.type === type && c.status === "True")
  if (has("Complete") || has("SuccessCriteriaMet")) return "Succeeded"
  if (has("Failed") || has("FailureTarget")) return "Failed"
  return undefined
}

const conditionsOf = (job: any): string =>
  (job?.status?.conditions ?? [])
    .filter((c: any) => c.status === "True")
    .map((c: any) => c.type)
    .join(",") || "none"

const ownerUid = (obj: any): string | undefined =>
  (obj?.metadata?.ownerReferences ?? []).find((r: any) => r.controller === true && r.kind === "BackupCheck")
    ?.uid

const iso = (ms: number | undefined) => (ms === undefined ? undefined : new Date(ms).toISOString())
const hms = (ms: number) => new Date(ms).toISOString().slice(11, 23)

type Handler = (type: string, obj: any, now: number) => void

/**
 * LIST then WATCH one collection of one cluster, forever: a watch that ends resumes from the last
 * resourceVersion (no gap); a 410 relists (a gap: events between were not seen).
 */
const streamCollection = (
  cluster: LocalCluster,
  path: string,
  handlers: {
    readonly event: Handler
    readonly relisted: (items: any[], now: number, gap: boolean) => void
    readonly up: (up: boolean) => void
  },
  isStopped: () => boolean,
) => {
  let rv: string | undefined
  let synced = false
  let current: { destroy: () => void } | undefined
  const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
  const list = async () => {
    const items: any[] = []
    let cont: string | undefined
    let listRV = ""
    do {
      const sep = path.includes("?") ? "&" : "?"
      const res = await cluster.api(
        "GET",
        `${path}${sep}limit=500${cont ? `&continue=${encodeURIComponent(cont)}` : ""}`,
      )
      if (res.status !== 200) throw new Error(`LIST ${path}: ${res.status}`)
      items.push(...(res.body.items ?? []))
      cont = res.body.metadata?.continue || undefined
      listRV = res.body.metadata?.resourceVersion ?? listRV
    } while (cont)
    return { items, listRV }
  }
  const watch = (fromRV: string) =>
    new Promise<"ended" | "gone">((resolve, reject) => {
      const sep = path.includes("?") ? "&" : "?"
      const url = new URL(
        `${path}${sep}watch=1&allowWatchBookmarks=true&timeoutSeconds=45&resourceVersion=${fromRV}`,
        cluster.server,
      )
      const req = request(
        url,
        {
          method: "GET",
          ca: cluster.caPem,
          headers: { authorization: `Bearer ${cluster.adminToken}`, accept: "application/json" },
        },
        (res) => {
          if (res.statusCode === 410) {
            res.resume()
            resolve("gone")
            return
          }
          if (res.statusCode !== 200) {
            res.resume()
            reject(new Error(`WATCH ${path}: ${res.statusCode}`))
            return
          }
          handlers.up(true)
          let buf = ""
          let gone = false
          res.setEncoding("utf8")
          res.on("data", (chunk: string) => {
            buf += chunk
            let nl = buf.indexOf("\n")
            while (nl >= 0) {
              const line = buf.slice(0, nl)
              buf = buf.slice(nl + 1)
              nl = buf.indexOf("\n")
              if (line.trim() === "") continue
              let ev: any
              try {
                ev = JSON.parse(line)
              } catch {
                continue
              }
              if (ev.type === "ERROR") {
                if (ev.object?.code === 410) gone = true
                continue
              }
              const newRV = ev.object?.metadata?.resourceVersion
              if (ev.type !== "BOOKMARK") handlers.event(ev.type, ev.object, Date.now())
              if (newRV) rv = newRV
            }
          })
          res.on("end", () => resolve(gone ? "gone" : "ended"))
          res.on("error", reject)
          res.on("aborted", () => reject(new Error("aborted")))
        },
      )
      // A frozen API server keeps the connection open and silent; the watch resumes after the thaw.
      req.setTimeout(120_000, () => req.destroy(new Error("idle")))
      req.once("error", reject)
      req.end()
      current = req
    })
  const loop = async () => {
    while (!isStopped()) {
      try {
        if (rv === undefined) {
          const { items, listRV } = await list()
          handlers.relisted(items, Date.now(), synced)
          synced = true
          rv = listRV
          handlers.up(true)
        }
        const how = await watch(rv)
        if (how === "gone") rv = undefined
      } catch {
        handlers.up(false)
        if (!isStopped()) await sleep(300)
      }
    }
  }
  const done = loop()
  return {
    stop: async () => {
      current?.destroy()
      await done
    },
  }
}

export type Observer = ReturnType<typeof startObserver>

/** Starts watching every member's BackupChecks and labelled Jobs; figures come from report(). */
export const startObserver = (members: ReadonlyArray<LocalCluster>, options: ObserverOptions = {}) => {
  const graceMs = options.graceMs ?? 5_000
  const tickMs = options.tickMs ?? 250
  const skewMs = options.skewMs ?? 1_000
  const log = options.log ?? (() => {})
  let stopped = false
  const checks = new Map<string, Check>()
  const runsByJobUid = new Map<string, Run>()
  /** check uid + run id → Job uids ever seen. */
  const jobUidsByRun = new Map<string, Set<string>>()
  /** Runs whose check the observer has not seen yet (watch order between the two streams). */
  const orphanRuns = new Map<string, Set<Run>>()
  const timelines = new Map<string, Array<{ t: number; text: string }>>()
  const blinds: Blind[] = []
  const up = new Map<string, { checks: boolean; jobs: boolean }>()
  /** Per member: when each gap in the BackupCheck stream was closed by a relist. */
  const checkGaps = new Map<string, number[]>()
  const gapCounts: Record<string, number> = {}
  const episodes: Episode[] = []
  let jobsWithTtl = 0
  let otherSpecFailureGreenMs = 0
  const byClause: Record<string, { rawMs: number; beyondMs: number }> = {
    failed: { rawMs: 0, beyondMs: 0 },
    unproven: { rawMs: 0, beyondMs: 0 },
    staleGeneration: { rawMs: 0, beyondMs: 0 },
  }
  let rawMs = 0
  let beyondMs = 0
  let strictBeyondMs = 0

  const note = (key: string, at: number, text: string) => {
    let t = timelines.get(key)
    if (!t) {
      t = []
      timelines.set(key, t)
    }
    t.push({ t: at, text })
    if (t.length > 600) t.splice(0, t.length - 500)
  }

  const runsOf = (uid: string): Set<Run> => {
    const c = checks.get(uid)
    if (c) return c.runs
    let s = orphanRuns.get(uid)
    if (!s) {
      s = new Set()
      orphanRuns.set(uid, s)
    }
    return s
  }

  const order = (a: Run, b: Run) => a.createdMs - b.createdMs || a.orderRV - b.orderRV

  // ----------------------------------------------------------------------------------------------
  // BackupChecks

  const onCheck = (cluster: string, type: string, obj: any, now: number) => {
    const uid: string | undefined = obj?.metadata?.uid
    if (!uid) return
    const key = `${cluster}/${obj.metadata.namespace}/${obj.metadata.name}`
    let c = checks.get(uid)
    if (!c) {
      c = {
        uid,
        cluster,
        namespace: obj.metadata.namespace,
        name: obj.metadata.name,
        key,
        firstSeen: now,
        generation: obj.metadata.generation ?? 1,
        genSince: now,
        content: checkContent(obj),
        contentSince: now,
        verified: undefined,
        lastRunID: undefined,
        lastRunResult: undefined,
        lastRunStart: undefined,
        deletedAt: undefined,
        gone: false,
        recorded: new Map(),
        runs: orphanRuns.get(uid) ?? new Set(),
        episode: undefined,
        statusKey: "",
      }
      orphanRuns.delete(uid)
      checks.set(uid, c)
      note(key, now, `check seen (uid ${uid.slice(0, 8)}, generation ${c.generation})`)
    }
    if (type === "DELETED") {
      c.deletedAt ??= now
      c.gone = true
      note(key, now, "check gone")
      closeEpisode(c, now)
      return
    }
    if (obj.metadata.deletionTimestamp && c.deletedAt === undefined) {
      c.deletedAt = now
      note(key, now, "check deletion requested")
      closeEpisode(c, now)
    }
    const generation = obj.metadata.generation ?? 1
    if (generation !== c.generation) {
      c.generation = generation
      c.genSince = now
    }
    const content = checkContent(obj)
    if (content !== c.content) {
      c.content = content
      c.contentSince = now
      note(key, now, `restore spec now ${content} (generation ${generation})`)
    }
    const status = obj.status ?? {}
    const cond = (status.conditions ?? []).find((x: any) => x.type === "Verified")
    c.verified = cond
      ? { status: cond.status, reason: cond.reason, observedGeneration: cond.observedGeneration }
      : undefined
    const lastRun = status.lastRun
    c.lastRunID = lastRun?.runID
    c.lastRunResult = lastRun?.result
    c.lastRunStart = lastRun?.startTime ? Date.parse(lastRun.startTime) : undefined
    const finals: Array<{ runID: string; result: string }> = [
      ...(lastRun ? [lastRun] : []),
      ...(Array.isArray(status.history) ? status.history : []),
    ]
    for (const r of finals) {
      if (r?.runID && (r.result === "Succeeded" || r.result === "Failed") && !c.recorded.has(r.runID)) {
        c.recorded.set(r.runID, {
          result: r.result,
          reason: r === lastRun ? cond?.reason : undefined,
          at: now,
        })
      }
    }
    // Runs older than lastRun's run are superseded in the status from now on.
    if (lastRun?.runID) {
      const lastJob = [...c.runs].find((r) => r.runID === lastRun.runID)
      for (const r of c.runs) {
        if (r.runID === lastRun.runID || r.supersededAt !== undefined) continue
        const older = lastJob
          ? order(r, lastJob) < 0
          : c.lastRunStart !== undefined && r.createdMs < c.lastRunStart
        if (older) {
          r.supersededAt = now
          r.supersededBy = lastRun.runID
        }
      }
    }
    const statusKey = `gen ${generation} Verified=${cond?.status ?? "-"}/${cond?.reason ?? "-"} og=${cond?.observedGeneration ?? "-"} lastRun=${lastRun?.runID ?? "-"}/${lastRun?.result ?? "-"}`
    if (statusKey !== c.statusKey) {
      c.statusKey = statusKey
      note(key, now, statusKey)
    }
  }

  // ----------------------------------------------------------------------------------------------
  // Jobs

  const finishRun = (r: Run, outcome: Outcome, now: number, key: string | undefined) => {
    if (r.outcome !== undefined) return
    r.outcome = outcome
    r.finishSeenAt = now
    if (key) note(key, now, `job ${r.jobName} (run ${r.runID}) ${outcome}`)
  }

  const keyOfUid = (uid: string) => checks.get(uid)?.key

  const onJob = (type: string, obj: any, now: number, live: boolean) => {
    const jobUid: string | undefined = obj?.metadata?.uid
    if (!jobUid) return
    const checkUid = ownerUid(obj)
    const runID: string | undefined = obj.metadata?.labels?.[labelRun]
    if (!checkUid || !runID) return // foreign or unlabelled: never a run
    let r = runsByJobUid.get(jobUid)
    if (!r) {
      r = {
        jobUid,
        jobName: obj.metadata.name,
        checkUid,
        runID,
        createdMs: Date.parse(obj.metadata.creationTimestamp ?? "") || now,
        orderRV: Number(obj.metadata.resourceVersion ?? 0) + (live && type === "ADDED" ? 0 : 0.5),
        content: jobContent(obj),
        firstSeen: now,
        ttl: obj.spec?.ttlSecondsAfterFinished,
        outcome: undefined,
        finishSeenAt: undefined,
        deletedAt: undefined,
        supersededAt: undefined,
        supersededBy: undefined,
      }
      if (r.ttl !== undefined) jobsWithTtl++
      runsByJobUid.set(jobUid, r)
      runsOf(checkUid).add(r)
      const k = `${checkUid}/${runID}`
      let uids = jobUidsByRun.get(k)
      if (!uids) {
        uids = new Set()
        jobUidsByRun.set(k, uids)
      }
      uids.add(jobUid)
      const key = keyOfUid(checkUid)
      if (key)
        note(
          key,
          now,
          `job ${r.jobName} (run ${runID}) seen, uid ${jobUid.slice(0, 8)}${uids.size > 1 ? " DUPLICATE" : ""}`,
        )
      // A status that already names a later run supersedes this one.
      const c = checks.get(checkUid)
      if (
        c?.lastRunID &&
        c.lastRunID !== runID &&
        c.lastRunStart !== undefined &&
        r.createdMs < c.lastRunStart
      ) {
        r.supersededAt = now
        r.supersededBy = c.lastRunID
      }
    }
    const key = keyOfUid(checkUid)
    const finished = jobFinished(obj)
    if (finished) finishRun(r, finished, now, key)
    if (type === "DELETED") {
      r.deletedAt = now
      if (r.outcome === undefined) finishRun(r, "Vanished", now, key)
      if (key) note(key, now, `job ${r.jobName} deleted (conditions ${conditionsOf(obj)})`)
    }
  }

  const relistJobs = (cluster: string, items: any[], now: number) => {
    const present = new Set<string>()
    for (const it of items) {
      if (it?.metadata?.uid) present.add(it.metadata.uid)
      onJob("ADDED", it, now, false)
    }
    for (const r of runsByJobUid.values()) {
      if (r.deletedAt !== undefined || present.has(r.jobUid)) continue
      if (checks.get(r.checkUid)?.cluster !== cluster) continue
      r.deletedAt = now
      if (r.outcome === undefined) finishRun(r, "Unknown", now, keyOfUid(r.checkUid))
    }
  }

  const relistChecks = (cluster: string, items: any[], now: number) => {
    const present = new Set<string>()
    for (const it of items) {
      if (it?.metadata?.uid) present.add(it.metadata.uid)
      onCheck(cluster, "MODIFIED", it, now)
    }
    for (const c of checks.values()) {
      if (c.cluster === cluster && !c.gone && !present.has(c.uid))
        onCheck(cluster, "DELETED", { metadata: { uid: c.uid } }, now)
    }
  }

  const streams = members.flatMap((m) => {
    up.set(m.name, { checks: false, jobs: false })
    const state = up.get(m.name)!
    return [
      streamCollection(
        m,
        "/apis/fleetcheck.io/v1alpha1/backupchecks",
        {
          event: (type, obj, now) => onCheck(m.name, type, obj, now),
          relisted: (items, now, gap) => {
            if (gap) {
              gapCounts[m.name] = (gapCounts[m.name] ?? 0) + 1
              let g = checkGaps.get(m.name)
              if (!g) {
                g = []
                checkGaps.set(m.name, g)
              }
              g.push(now)
              log(`observer: ${m.name} BackupCheck stream relisted after a gap`)
            }
            relistChecks(m.name, items, now)
          },
          up: (u) => {
            state.checks = u
          },
        },
        () => stopped,
      ),
      streamCollection(
        m,
        `/apis/batch/v1/jobs?labelSelector=${encodeURIComponent(labelBackupCheck)}`,
        {
          event: (type, obj, now) => onJob(type, obj, now, true),
          relisted: (items, now, gap) => {
            if (gap) gapCounts[`${m.name}/jobs`] = (gapCounts[`${m.name}/jobs`] ?? 0) + 1
            relistJobs(m.name, items, now)
          },
          up: (u) => {
            state.jobs = u
          },
        },
        () => stopped,
      ),
    ]
  })

  // ----------------------------------------------------------------------------------------------
  // Sight

  /** Milliseconds of [a, b] outside every blind interval of the member (or of the whole hub). */
  const sighted = (member: string, a: number, b: number): number => {
    if (b <= a) return 0
    const spans = blinds
      .filter((x) => (x.scope === member || x.scope === "*") && x.start < b && (x.end ?? b) > a)
      .map((x) => [Math.max(a, x.start), Math.min(b, x.end ?? b)] as const)
      .sort((x, y) => x[0] - y[0])
    let covered = 0
    let curS = -1
    let curE = -1
    for (const [s, e] of spans) {
      if (s > curE) {
        if (curE > curS) covered += curE - curS
        curS = s
        curE = e
      } else if (e > curE) curE = e
    }
    if (curE > curS) covered += curE - curS
    return b - a - covered
  }

  const blindNow = (member: string, t: number) =>
    blinds.some((x) => (x.scope === member || x.scope === "*") && x.start <= t && (x.end ?? t + 1) > t)

  // ----------------------------------------------------------------------------------------------
  // False green, evaluated every tick

  const timelineOf = (key: string, from: number, to: number) =>
    (timelines.get(key) ?? [])
      .filter((l) => l.t >= from && l.t <= to)
      .slice(-80)
      .map((l) => `${hms(l.t)} ${l.text}`)

  const closeEpisode = (c: Check, now: number) => {
    const e = c.episode
    if (!e) return
    e.end = now
    c.episode = undefined
    e.timeline = timelineOf(c.key, e.fact - 15_000, now + 5_000)
  }

  /** The clauses that make a green check false now, with the earliest time their fact became visible. */
  const falseNow = (c: Check, now: number) => {
    const clauses: string[] = []
    let fact = Number.POSITIVE_INFINITY
    let run: string | undefined
    /** A success the status recorded less than `skew` ago whose Job's success is still on its way. */
    const inFlightSuccess = (r: Run) => {
      const rec = r.outcome === undefined ? c.recorded.get(r.runID) : undefined
      return rec?.result === "Succeeded" && now - rec.at <= skewMs
    }
    const outcomeOf = (r: Run) => (inFlightSuccess(r) ? "Succeeded" : r.outcome)
    const finished = [...c.runs].filter((r) => outcomeOf(r) !== undefined).sort(order)
    const same = finished.filter((r) => r.content === c.content)
    const latestSame = same.at(-1)
    if (latestSame && (outcomeOf(latestSame) === "Failed" || outcomeOf(latestSame) === "Vanished")) {
      clauses.push("failed")
      fact = Math.min(fact, Math.max(latestSame.finishSeenAt ?? now, c.contentSince))
      run = latestSame.runID
    } else if (!latestSame) {
      clauses.push("unproven")
      fact = Math.min(fact, c.contentSince)
    }
    const og = c.verified?.observedGeneration
    if (og !== undefined && c.generation > og) {
      clauses.push("staleGeneration")
      fact = Math.min(fact, c.genSince)
    }
    const latestAll = finished.at(-1)
    const otherSpecFailed =
      clauses.length === 0 &&
      latestAll !== undefined &&
      latestAll.content !== c.content &&
      (outcomeOf(latestAll) === "Failed" || outcomeOf(latestAll) === "Vanished")
    return { clauses, fact, run, otherSpecFailed }
  }

  let lastTick = Date.now()
  const tick = () => {
    const now = Date.now()
    const dt = now - lastTick
    lastTick = now
    for (const c of checks.values()) {
      if (c.gone || c.deletedAt !== undefined) continue
      const view = up.get(c.cluster)
      if (!view?.checks || !view.jobs) continue
      if (c.verified?.status !== "True") {
        closeEpisode(c, now)
        continue
      }
      const f = falseNow(c, now)
      if (f.otherSpecFailed) otherSpecFailureGreenMs += dt
      if (f.clauses.length === 0) {
        closeEpisode(c, now)
        continue
      }
      const t0 = now - dt
      let e = c.episode
      if (!e) {
        e = {
          check: c.key,
          uid: c.uid,
          start: t0,
          end: undefined,
          clauses: new Set(),
          fact: f.fact,
          run: f.run,
          rawMs: 0,
          beyondMs: 0,
          strictBeyondMs: 0,
          timeline: undefined,
        }
        c.episode = e
        episodes.push(e)
        note(c.key, now, `FALSE GREEN begins: ${f.clauses.join("+")} (fact visible ${hms(f.fact)})`)
      }
      for (const cl of f.clauses) e.clauses.add(cl)
      e.fact = Math.min(e.fact, f.fact)
      e.run ??= f.run
      e.rawMs += dt
      rawMs += dt
      // Beyond grace: the part of (t0, now] after the hub had `grace` of sight since the fact.
      let beyond = 0
      if (!blindNow(c.cluster, now)) {
        const s1 = sighted(c.cluster, f.fact, now)
        const s0 = sighted(c.cluster, f.fact, t0)
        beyond = Math.max(0, s1 - Math.max(s0, graceMs))
      }
      const strict = Math.max(0, now - Math.max(t0, f.fact + graceMs))
      e.beyondMs += beyond
      e.strictBeyondMs += strict
      beyondMs += beyond
      strictBeyondMs += strict
      for (const cl of f.clauses) {
        byClause[cl]!.rawMs += dt
        byClause[cl]!.beyondMs += beyond
      }
    }
  }
  const timer = setInterval(tick, tickMs)

  // ----------------------------------------------------------------------------------------------
  // Report

  const ref = (r: Run, detail: string): RunRef => ({
    check: keyOfUid(r.checkUid) ?? `?/${r.checkUid}`,
    uid: r.checkUid,
    runID: r.runID,
    job: r.jobName,
    outcome: r.outcome ?? "Running",
    finishedAt: iso(r.finishSeenAt),
    detail,
  })

  const gapBetween = (member: string, a: number, b: number) =>
    (checkGaps.get(member) ?? []).some((t) => t >= a && t <= b + 1_000)

  const report = (): ObserverReport => {
    const now = Date.now()
    const duplicates: Array<RunRef & { jobUids: string[] }> = []
    for (const uids of jobUidsByRun.values()) {
      if (uids.size < 2) continue
      const runs = [...uids].map((u) => runsByJobUid.get(u)!).sort(order)
      duplicates.push({
        ...ref(
          runs[0]!,
          runs.map((r) => `${r.jobUid} created ${iso(r.createdMs)} ${r.outcome ?? "Running"}`).join("; "),
        ),
        jobUids: [...uids],
      })
    }
    const lost: RunRef[] = []
    const cut: RunRef[] = []
    const unverifiable: RunRef[] = []
    const pending: RunRef[] = []
    const wrong: RunRef[] = []
    const conservative: Record<string, number> = {}
    const vanishedUnrecorded: RunRef[] = []
    const outcomes: Record<string, number> = {}
    let finished = 0
    for (const r of runsByJobUid.values()) {
      outcomes[r.outcome ?? "Running"] = (outcomes[r.outcome ?? "Running"] ?? 0) + 1
      const c = checks.get(r.checkUid)
      if (r.outcome === undefined) continue
      finished++
      const rec = c?.recorded.get(r.runID)
      if (r.outcome === "Vanished" || r.outcome === "Unknown") {
        const cutByCheckDeletion = c?.deletedAt !== undefined && (r.deletedAt ?? 0) >= c.deletedAt
        if (!rec && !cutByCheckDeletion && r.supersededAt !== undefined)
          vanishedUnrecorded.push(ref(r, `superseded by ${r.supersededBy} at ${iso(r.supersededAt)}`))
        continue
      }
      if (rec) {
        if (rec.result !== r.outcome) {
          if (rec.result === "Succeeded")
            wrong.push(ref(r, `Job ${r.outcome}, recorded ${rec.result} at ${iso(rec.at)}`))
          else conservative[rec.reason ?? "?"] = (conservative[rec.reason ?? "?"] ?? 0) + 1
        }
        continue
      }
      if (!c) {
        pending.push(ref(r, "its check was never seen"))
        continue
      }
      if (r.supersededAt !== undefined) {
        const detail = `superseded in the status by run ${r.supersededBy} at ${iso(r.supersededAt)}`
        if (gapBetween(c.cluster, r.firstSeen, r.supersededAt))
          unverifiable.push(ref(r, `${detail}; the BackupCheck stream had a gap meanwhile`))
        else lost.push(ref(r, detail))
        continue
      }
      if (c.deletedAt !== undefined) {
        const sight = sighted(c.cluster, r.finishSeenAt ?? c.deletedAt, c.deletedAt)
        const detail = `check deleted at ${iso(c.deletedAt)}, ${(sight / 1000).toFixed(1)} s of hub sight after the run finished`
        if (sight >= graceMs) lost.push(ref(r, detail))
        else cut.push(ref(r, detail))
        continue
      }
      pending.push(
        ref(r, `finished, not recorded yet (${((now - (r.finishSeenAt ?? now)) / 1000).toFixed(1)} s)`),
      )
    }
    const unbacked: RunRef[] = []
    for (const c of checks.values()) {
      for (const [runID, rec] of c.recorded) {
        if (rec.result !== "Succeeded") continue
        const ok = [...c.runs].some((r) => r.runID === runID && r.outcome === "Succeeded")
        const unknown = [...c.runs].some((r) => r.runID === runID && r.outcome === "Unknown")
        if (!ok && !unknown)
          unbacked.push({
            check: c.key,
            uid: c.uid,
            runID,
            job: "-",
            outcome: "none seen",
            finishedAt: undefined,
            detail: `recorded Succeeded at ${iso(rec.at)}; owned Jobs seen for it: ${
              [...c.runs]
                .filter((r) => r.runID === runID)
                .map((r) => `${r.jobName} ${r.outcome ?? "Running"}`)
                .join(", ") || "none"
            }`,
          })
      }
    }
    // Open episodes get their timeline now.
    for (const c of checks.values()) {
      if (c.episode && !c.episode.timeline) {
        c.episode.timeline = timelineOf(c.key, c.episode.fact - 15_000, Date.now())
      }
    }
    const worst = [...episodes].sort((a, b) => b.beyondMs - a.beyondMs || b.rawMs - a.rawMs).slice(0, 5)
    const blindSeconds: Record<string, number> = {}
    for (const b of blinds)
      blindSeconds[`${b.scope} ${b.why}`] =
        (blindSeconds[`${b.scope} ${b.why}`] ?? 0) + ((b.end ?? now) - b.start) / 1000
    const s = (ms: number) => Math.round(ms) / 1000
    return {
      graceMs,
      checks: checks.size,
      runs: runsByJobUid.size,
      finishedRuns: finished,
      outcomes,
      duplicates,
      lostVerdicts: lost,
      cutByDeletion: cut,
      unverifiable,
      pendingUnrecorded: pending,
      wrongVerdicts: wrong,
      conservativeVerdicts: conservative,
      unbackedSuccesses: unbacked,
      vanishedUnrecorded,
      jobsWithTtl,
      falseGreen: {
        rawS: s(rawMs),
        beyondGraceS: s(beyondMs),
        strictBeyondGraceS: s(strictBeyondMs),
        byClause: Object.fromEntries(
          Object.entries(byClause).map(([k, v]) => [k, { rawS: s(v.rawMs), beyondGraceS: s(v.beyondMs) }]),
        ),
        episodes: episodes.length,
        worst,
        otherSpecFailureGreenS: s(otherSpecFailureGreenMs),
      },
      streamGaps: { ...gapCounts },
      blindSeconds,
    }
  }

  return {
    graceMs,
    /** Declares the hub blind for a member ("*": every member) from now; call the result when it ends. */
    blind: (scope: string, why: string): (() => void) => {
      const b: Blind = { scope, why, start: Date.now(), end: undefined }
      blinds.push(b)
      for (const c of checks.values())
        if (scope === "*" || c.cluster === scope)
          if (!c.gone) note(c.key, b.start, `blind begins: ${scope} ${why}`)
      return () => {
        b.end ??= Date.now()
        for (const c of checks.values())
          if (scope === "*" || c.cluster === scope)
            if (!c.gone) note(c.key, b.end, `blind ends: ${scope} ${why}`)
      }
    },
    /** A line in a check's timeline (the driver's faults), printed with false-green episodes. */
    note: (cluster: string, namespace: string, name: string, text: string) =>
      note(`${cluster}/${namespace}/${name}`, Date.now(), `FAULT ${text}`),
    /** Whether both streams of every member are up. */
    allUp: () => [...up.values()].every((u) => u.checks && u.jobs),
    report,
    stop: async () => {
      stopped = true
      clearInterval(timer)
      tick()
      await Promise.all(streams.map((s) => s.stop()))
    },
  }
}
