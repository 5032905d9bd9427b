// The BackupCheck controller against one real cluster (kube-apiserver, controller-manager, scheduler,
// kwok): the CRD's validation, every verdict, new runs, deletion, scale, two engines at once, an engine
// killed mid-run, an apiserver restart, and hostile input.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  establishedWithin,
  type LocalCluster,
  type LocalFleet,
  startFleet,
} from "../../clusters/local-fleet/index.ts"
import { jobNameFor, runIDForTime, traceparentFor } from "../../src/reconcile/run-identity.ts"
import { type RunningEngine, startEngine } from "../support/engine.ts"
import { sumOf } from "../support/prometheus-text.ts"
import { sleep, waitUntil } from "../support/wait.ts"

const ns = "shop"
const crdFile = new URL("../../deploy/crds/fleetcheck.io_backupchecks.yaml", import.meta.url).pathname

interface CheckOptions {
  annotations?: Record<string, string>
  spec?: Record<string, unknown>
  containers?: unknown[]
}
const checkManifest = (name: string, o: CheckOptions = {}) => ({
  apiVersion: "fleetcheck.io/v1alpha1",
  kind: "BackupCheck",
  metadata: { name, namespace: ns },
  spec: {
    backup: {
      name: `${name}-2026-11-29`,
      source: `s3://backups/${name}`,
      checksum: `sha256:${"ab".repeat(32)}`,
    },
    jobTemplate: {
      spec: {
        template: {
          metadata: { annotations: o.annotations ?? {} },
          spec: {
            restartPolicy: "Never",
            containers: o.containers ?? [
              { name: "restore", image: "registry.example/restore-tool:1.4", args: ["--verify"] },
            ],
          },
        },
      },
    },
    ...o.spec,
  },
})

const checksPath = `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`
const jobsPath = `/apis/batch/v1/namespaces/${ns}/jobs`
const podsPath = `/api/v1/namespaces/${ns}/pods`
const eventsPath = `/apis/events.k8s.io/v1/namespaces/${ns}/events`

/** A restore Job made by hand, shaped as the hub makes them (owned and labelled unless told otherwise). */
const handMadeJob = (
  name: string,
  annotations: Record<string, string>,
  owner?: { readonly check: string; readonly uid: string; readonly runID: string },
) => ({
  apiVersion: "batch/v1",
  kind: "Job",
  metadata: {
    name,
    namespace: ns,
    ...(owner
      ? {
          labels: { "fleetcheck.io/backupcheck": owner.check, "fleetcheck.io/run": owner.runID },
          ownerReferences: [
            {
              apiVersion: "fleetcheck.io/v1alpha1",
              kind: "BackupCheck",
              name: owner.check,
              uid: owner.uid,
              controller: true,
              blockOwnerDeletion: true,
            },
          ],
        }
      : {}),
  },
  spec: {
    backoffLimit: 0,
    template: {
      metadata: { annotations },
      spec: {
        restartPolicy: "Never",
        containers: [{ name: "restore", image: "registry.example/restore-tool:1.4" }],
      },
    },
  },
})

const jobFinished = (job: any) =>
  (job?.status?.conditions ?? []).some(
    (c: any) => ["Complete", "Failed"].includes(c.type) && c.status === "True",
  )

/** Waits until the wall clock's second is within [from, to] (scheduled tests need room before a slot). */
const waitForSecond = async (from: number, to: number) => {
  while (true) {
    const second = new Date().getUTCSeconds()
    if (second >= from && second <= to) return
    await sleep(250)
  }
}

describe("BackupCheck controller on a real cluster", () => {
  let fleet: LocalFleet
  let c: LocalCluster
  let engine: RunningEngine | undefined

  const create = async (manifest: unknown) => {
    const res = await c.api("POST", checksPath, manifest)
    if (res.status !== 201) throw new Error(`create failed: ${res.status} ${JSON.stringify(res.body)}`)
    return res.body
  }
  const get = async (name: string) => (await c.api("GET", `${checksPath}/${name}`)).body
  const verified = (obj: any) => (obj?.status?.conditions ?? []).find((x: any) => x.type === "Verified")
  const jobsOf = async (name: string) => {
    const res = await c.api(
      "GET",
      `${jobsPath}?labelSelector=${encodeURIComponent(`fleetcheck.io/backupcheck=${name}`)}`,
    )
    return res.body.items as any[]
  }
  const waitVerdict = (name: string, status: string, timeoutMs = 60_000) =>
    waitUntil(`${name} Verified=${status}`, timeoutMs, async () => {
      const obj = await get(name)
      const v = verified(obj)
      return v?.status === status && obj.status?.lastRun?.result !== "Running" ? obj : undefined
    })

  beforeAll(async () => {
    fleet = await startFleet({ clusters: ["member"] })
    c = fleet.cluster("member")
    const applied = await c.kubectl(["apply", "--server-side", "-f", crdFile])
    expect(applied.code, applied.stderr).toBe(0)
    // kubectl wait fails at once when it reads the CRD before it has any condition: again within 30 s.
    await establishedWithin(c, "BackupCheck CRD", "crd/backupchecks.fleetcheck.io")
    expect((await c.api("POST", "/api/v1/namespaces", { metadata: { name: ns } })).status).toBe(201)
    // Created now, checked at the end: a schedule needs wall-clock minutes to show new runs.
    await create(
      // A timeout longer than the schedule's shortest interval is refused (ADR 0004).
      checkManifest("every-minute", {
        spec: { schedule: "* * * * *", timeZone: "Europe/Berlin", timeout: "50s" },
      }),
    )
    engine = await startEngine(c, { runningPollMs: 2_000 })
  })

  afterAll(async () => {
    await engine?.stop()
    await fleet?.stop()
  })

  describe("the CRD rejects invalid objects with a clear message", () => {
    const cases: Array<[string, (m: any) => void, RegExp]> = [
      [
        "neither jobTemplate nor restore",
        (m) => delete m.spec.jobTemplate,
        /exactly one of jobTemplate .* and restore/i,
      ],
      [
        "both jobTemplate and restore",
        (m) => (m.spec.restore = { restic: { repository: "/r", credentialsSecretRef: { name: "s" } } }),
        /exactly one of jobTemplate .* and restore/i,
      ],
      [
        "two restore methods",
        (m) => {
          delete m.spec.jobTemplate
          m.spec.restore = {
            restic: { repository: "/r", credentialsSecretRef: { name: "s" } },
            etcd: { snapshot: { url: "/s.db" } },
          }
        },
        /exactly one restore method/i,
      ],
      [
        "postgres with dump and barmanObjectStore",
        (m) => {
          delete m.spec.jobTemplate
          m.spec.restore = {
            postgres: {
              dump: { url: "/d.dump" },
              barmanObjectStore: {
                destinationPath: "s3://b/p",
                serverName: "x",
                credentialsSecretRef: { name: "s" },
              },
            },
          }
        },
        /exactly one of dump and barmanObjectStore/i,
      ],
      [
        "bad readDataSubset",
        (m) => {
          delete m.spec.jobTemplate
          m.spec.restore = {
            restic: {
              repository: "/r",
              credentialsSecretRef: { name: "s" },
              verify: { readDataSubset: "lots" },
            },
          }
        },
        /readDataSubset/,
      ],
      [
        "restore with a sandbox (the agent could not read its Secret there)",
        (m) => {
          delete m.spec.jobTemplate
          m.spec.restore = { restic: { repository: "/r", credentialsSecretRef: { name: "s" } } }
          m.spec.sandbox = {}
        },
        /sandbox is not available with restore.restic, postgres or etcd yet/,
      ],
      ["bad cron", (m) => (m.spec.schedule = "every day at 3"), /schedule/i],
      ["bad duration", (m) => (m.spec.timeout = "30 minutes"), /timeout/i],
      ["bad checksum", (m) => (m.spec.backup.checksum = "sha256:xyz"), /checksum/i],
      ["unknown field", (m) => (m.spec.surprise = true), /unknown field "spec.surprise"/i],
      ["bad concurrencyPolicy", (m) => (m.spec.concurrencyPolicy = "Allow"), /concurrencyPolicy/],
    ]
    it.each(cases)("%s", async (_label, mutate, message) => {
      const m = checkManifest(`invalid-${Math.random().toString(36).slice(2, 8)}`)
      mutate(m)
      const res = await c.kubectl(["apply", "-f", "-"], JSON.stringify(m))
      expect(res.code).not.toBe(0)
      expect(res.stderr).toMatch(message)
    })
  })

  it("verifies a backup: kubectl wait returns, status and Job are right", async () => {
    const t0 = Date.now()
    await create(
      checkManifest("orders", {
        annotations: { "fleetcheck.io/simulate-message": "orders restored, 42 tables, checksum ok" },
      }),
    )
    const waited = await c.kubectl([
      "wait",
      "-n",
      ns,
      "--for=condition=Verified",
      "backupcheck/orders",
      "--timeout=60s",
    ])
    expect(waited.code, waited.stderr).toBe(0)
    console.log(`create → Verified=True: ${Date.now() - t0} ms`)
    const obj = await get("orders")
    const v = verified(obj)
    expect(v).toMatchObject({
      status: "True",
      reason: "RestoreSucceeded",
      message: "orders restored, 42 tables, checksum ok",
    })
    expect(v.observedGeneration).toBe(obj.metadata.generation)
    expect(obj.status.observedGeneration).toBe(obj.metadata.generation)
    expect(obj.metadata.finalizers).toContain("fleetcheck.io/cleanup")
    expect(obj.status.lastRun).toMatchObject({ runID: "g1", result: "Succeeded" })
    expect(obj.status.lastRun.traceID).toMatch(/^[0-9a-f]{32}$/)
    expect(obj.status.lastSuccessfulTime).toBeTruthy()

    const jobs = await jobsOf("orders")
    expect(jobs).toHaveLength(1)
    const job = jobs[0]
    expect(job.metadata.name).toBe(obj.status.lastRun.jobName)
    expect(job.metadata.labels["fleetcheck.io/run"]).toBe("g1")
    expect(job.metadata.ownerReferences[0]).toMatchObject({
      kind: "BackupCheck",
      name: "orders",
      uid: obj.metadata.uid,
      controller: true,
    })
    expect(job.spec.activeDeadlineSeconds).toBe(3600)
    const env = Object.fromEntries(
      job.spec.template.spec.containers[0].env.map((e: any) => [e.name, e.value]),
    )
    expect(env).toMatchObject({
      FLEETCHECK_BACKUP_NAME: "orders-2026-11-29",
      FLEETCHECK_BACKUP_SOURCE: "s3://backups/orders",
      FLEETCHECK_EXPECTED_CHECKSUM: `sha256:${"ab".repeat(32)}`,
      FLEETCHECK_CLUSTER: "member",
    })
    expect(env.TRACEPARENT).toBe(`00-${obj.status.lastRun.traceID}-${env.TRACEPARENT.split("-")[2]}-01`)

    // Converged: nothing more is written (no-op status writes are skipped).
    const rv = obj.metadata.resourceVersion
    await sleep(3_000)
    expect((await get("orders")).metadata.resourceVersion).toBe(rv)
  })

  it("the engine causes no Conflict of its own: a pass never writes from a cache behind its own last write", async () => {
    // Counted by the apiserver: every request on backupchecks it answered 409.
    const conflicts = async () => {
      const text = (await c.api("GET", "/metrics")).body as string
      return sumOf(text, "apiserver_request_total", { resource: "backupchecks", code: "409" })
    }
    const before = await conflicts()
    // Each check is written three times in a row (finalizer, Running, verdict) while its Job's events
    // bring the key back: passes that would start from the check as it was before a write.
    const names = Array.from({ length: 12 }, (_, i) => `own-writes-${i}`)
    await Promise.all(names.map((n) => create(checkManifest(n))))
    for (const n of names) expect(verified(await waitVerdict(n, "True")).reason).toBe("RestoreSucceeded")
    await sleep(2_000)
    expect(await conflicts()).toBe(before)
  })

  it.each([
    [
      "restore failure",
      { "fleetcheck.io/simulate": "fail", "fleetcheck.io/simulate-message": "pg_restore: relation missing" },
      {},
      "RestoreFailed",
      /relation missing/,
    ],
    [
      "checksum mismatch",
      {
        "fleetcheck.io/simulate": "fail",
        "fleetcheck.io/simulate-exit-code": "3",
        "fleetcheck.io/simulate-message": "want sha256:ab got sha256:cd",
      },
      {},
      "ChecksumMismatch",
      /want sha256:ab got sha256:cd/,
    ],
    [
      "OOM",
      {
        "fleetcheck.io/simulate": "fail",
        "fleetcheck.io/simulate-exit-code": "137",
        "fleetcheck.io/simulate-reason": "OOMKilled",
      },
      {},
      "RestoreOOMKilled",
      /OOMKilled/,
    ],
    [
      "timeout",
      { "fleetcheck.io/simulate": "hang" },
      { timeout: "3s" },
      "RestoreTimedOut",
      /did not finish within the timeout/,
    ],
  ] as const)(
    "%s gives Verified=False with its reason and message",
    async (label, annotations, spec, reason, message) => {
      const name = `fail-${label.toLowerCase().replace(/\W+/g, "-")}`
      await create(checkManifest(name, { annotations: { ...annotations }, spec: { ...spec } }))
      const obj = await waitVerdict(name, "False", 90_000)
      expect(verified(obj).reason).toBe(reason)
      expect(verified(obj).message).toMatch(message)
      expect(obj.status.lastRun.result).toBe("Failed")
    },
  )

  it("starts a new run for a new spec generation", async () => {
    await create(checkManifest("gen"))
    await waitVerdict("gen", "True")
    const patched = await c.kubectl([
      "patch",
      "-n",
      ns,
      "backupcheck/gen",
      "--type=merge",
      "-p",
      JSON.stringify({ spec: { backup: { name: "gen-2026-11-30" } } }),
    ])
    expect(patched.code, patched.stderr).toBe(0)
    const obj = await waitUntil("run g2 to succeed", 60_000, async () => {
      const o = await get("gen")
      return o.status?.lastRun?.runID === "g2" && o.status.lastRun.result === "Succeeded" ? o : undefined
    })
    expect(verified(obj)).toMatchObject({ status: "True", observedGeneration: 2 })
    const jobs = await jobsOf("gen")
    expect(jobs.map((j) => j.metadata.labels["fleetcheck.io/run"]).sort()).toEqual(["g1", "g2"])
  })

  it("keeps only the history limit of finished Jobs; the status stays the record", async () => {
    await create(checkManifest("history", { spec: { successfulRunsHistoryLimit: 1 } }))
    await waitVerdict("history", "True")
    for (const backup of ["history-b", "history-c"]) {
      const patched = await c.kubectl([
        "patch",
        "-n",
        ns,
        "backupcheck/history",
        "--type=merge",
        "-p",
        JSON.stringify({ spec: { backup: { name: backup } } }),
      ])
      expect(patched.code, patched.stderr).toBe(0)
      await waitUntil(`run for ${backup}`, 60_000, async () => {
        const o = await get("history")
        return (
          o.status?.lastRun?.runID === `g${o.metadata.generation}` && o.status.lastRun.result === "Succeeded"
        )
      })
    }
    await waitUntil("older Jobs pruned", 30_000, async () => {
      const jobs = (await jobsOf("history")).filter((j) => !j.metadata.deletionTimestamp)
      return jobs.length === 1 && jobs[0].metadata.labels["fleetcheck.io/run"] === "g3"
    })
    const obj = await get("history")
    expect(verified(obj)).toMatchObject({ status: "True", reason: "RestoreSucceeded" })
  })

  it("a suspended check creates no Job and says Suspended", async () => {
    await create(checkManifest("paused", { spec: { suspend: true } }))
    const obj = await waitUntil("Suspended", 30_000, async () => {
      const o = await get("paused")
      return verified(o)?.reason === "Suspended" ? o : undefined
    })
    expect(verified(obj).status).toBe("Unknown")
    await sleep(2_000)
    expect(await jobsOf("paused")).toHaveLength(0)
  })

  it("turns Verified=False (VerificationStale) when the last success is older than maxStaleness", async () => {
    // The schedule's next slot is hours away: after the first run, only staleness can change the verdict.
    await create(checkManifest("stale", { spec: { schedule: "0 3 * * *", maxStaleness: "8s" } }))
    await waitVerdict("stale", "True")
    const obj = await waitUntil("VerificationStale", 30_000, async () => {
      const o = await get("stale")
      return verified(o)?.reason === "VerificationStale" ? o : undefined
    })
    expect(verified(obj).status).toBe("False")
    expect(verified(obj).message).toMatch(/older than maxStaleness 8s/)
  })

  it("deleting a check with a running Job removes the Job and the finalizer", async () => {
    await create(checkManifest("doomed", { annotations: { "fleetcheck.io/simulate": "hang" } }))
    await waitUntil("the doomed Job to exist", 30_000, async () => (await jobsOf("doomed")).length === 1)
    const del = await c.api("DELETE", `${checksPath}/doomed`)
    expect(del.status).toBeLessThan(300)
    await waitUntil(
      "the check to be gone",
      30_000,
      async () => (await c.api("GET", `${checksPath}/doomed`)).status === 404,
    )
    await waitUntil(
      "its Job to be gone",
      30_000,
      async () => (await jobsOf("doomed")).filter((j) => !j.metadata.deletionTimestamp).length === 0,
    )
  })

  it("200 checks at once, two engines on the same cluster: exactly one Job per check", async () => {
    const second = await startEngine(c, { runningPollMs: 2_000 })
    try {
      const names = Array.from({ length: 200 }, (_, i) => `bulk-${String(i).padStart(3, "0")}`)
      const t0 = Date.now()
      await Promise.all(names.map((n) => create(checkManifest(n))))
      await waitUntil("all 200 checks Verified=True", 180_000, async () => {
        const list = (await c.api("GET", `${checksPath}?labelSelector=`)).body.items as any[]
        const bulk = list.filter((o) => o.metadata.name.startsWith("bulk-"))
        return bulk.length === 200 && bulk.every((o) => verified(o)?.status === "True")
      })
      console.log(`200 checks created → all Verified=True with two engines: ${Date.now() - t0} ms`)
      const jobs = (await c.api("GET", jobsPath)).body.items as any[]
      const bulkJobs = jobs.filter((j) => j.metadata.labels["fleetcheck.io/backupcheck"].startsWith("bulk-"))
      expect(bulkJobs).toHaveLength(200)
      expect(new Set(bulkJobs.map((j) => j.metadata.labels["fleetcheck.io/backupcheck"])).size).toBe(200)
    } finally {
      await second.stop()
    }
  })

  it("an engine killed mid-run and started again converges with no duplicate Job and no lost status", async () => {
    await create(checkManifest("interrupted", { annotations: { "fleetcheck.io/simulate-delay": "6s" } }))
    await waitUntil(
      "the run to start",
      30_000,
      async () => (await get("interrupted")).status?.lastRun?.result === "Running",
    )
    await engine?.stop()
    engine = undefined
    await sleep(7_000) // the Job finishes while no engine runs
    engine = await startEngine(c, { runningPollMs: 2_000 })
    const obj = await waitVerdict("interrupted", "True")
    expect(obj.status.lastRun.runID).toBe("g1")
    expect(await jobsOf("interrupted")).toHaveLength(1)
  })

  it("resumes after the apiserver restarts under the engine; nothing is missed", async () => {
    await create(checkManifest("before-restart", { annotations: { "fleetcheck.io/simulate-delay": "4s" } }))
    await waitUntil(
      "the run to start",
      30_000,
      async () => (await get("before-restart")).status?.lastRun?.result === "Running",
    )
    await c.stopApiServer()
    await sleep(2_000)
    await c.startApiServer()
    await create(checkManifest("after-restart"))
    await waitVerdict("before-restart", "True", 90_000)
    await waitVerdict("after-restart", "True", 90_000)
    expect(await jobsOf("before-restart")).toHaveLength(1)
  })

  it("hostile input never crashes the engine", async () => {
    const longName = `x${"a".repeat(61)}z` // 63 characters: the Job name must still be valid and unique
    const longer = `y${"b".repeat(120)}z`
    const huge = "E".repeat(200_000)
    await create(checkManifest(longName))
    await create(checkManifest(longer))
    await create(
      checkManifest("noisy", {
        annotations: {
          "fleetcheck.io/simulate": "fail",
          "fleetcheck.io/simulate-message": `${huge}\u0000\u001b[31m`,
        },
      }),
    )
    // A template the API server refuses as a Job: reported on the check, the engine carries on.
    await create(checkManifest("unrunnable", { containers: [{ name: "Bad_Name", image: "x" }] }))
    await waitVerdict(longName, "True")
    await waitVerdict(longer, "True")
    const noisy = await waitVerdict("noisy", "False", 60_000)
    expect(Buffer.byteLength(verified(noisy).message)).toBeLessThanOrEqual(1024)
    expect(verified(noisy).message).not.toMatch(/[\u0000\u001b]/)
    const unrunnable = await waitUntil("JobCreateFailed", 30_000, async () => {
      const o = await get("unrunnable")
      return verified(o)?.reason === "JobCreateFailed" ? o : undefined
    })
    expect(verified(unrunnable).message).toMatch(/Bad_Name/)
    const all = (await c.api("GET", jobsPath)).body.items as any[]
    const owned = all.filter((j) => [longName, longer].includes(j.metadata.ownerReferences?.[0]?.name))
    expect(owned).toHaveLength(2)
    for (const j of owned) {
      expect(j.metadata.name.length).toBeLessThanOrEqual(63)
      expect(j.metadata.labels["fleetcheck.io/backupcheck"].length).toBeLessThanOrEqual(63)
    }
    expect(engine?.engine.stats.panics).toBe(0)
  })

  const patch = async (name: string, body: unknown) => {
    const res = await c.kubectl([
      "patch",
      "-n",
      ns,
      `backupcheck/${name}`,
      "--type=merge",
      "-p",
      JSON.stringify(body),
    ])
    expect(res.code, res.stderr).toBe(0)
  }
  const jobsByRun = async (name: string) =>
    new Map((await jobsOf(name)).map((j) => [j.metadata.labels["fleetcheck.io/run"] as string, j]))
  const activeJobs = (jobs: any[]) => jobs.filter((j) => !jobFinished(j) && !j.metadata.deletionTimestamp)

  /** Polls checks and their Jobs in the background and keeps every distinct state it saw. */
  const recordStates = (names: ReadonlyArray<string>) => {
    const states = new Map<string, Array<{ status: any; generation: number; jobs: any[] }>>(
      names.map((n) => [n, []]),
    )
    let running = true
    const loop = (async () => {
      while (running) {
        for (const name of names) {
          try {
            const [obj, jobs] = await Promise.all([get(name), jobsOf(name)])
            const state = { status: obj?.status ?? {}, generation: obj?.metadata?.generation, jobs }
            const seen = states.get(name)!
            const key = (x: typeof state) =>
              JSON.stringify([
                x.status,
                x.jobs.map((j) => [j.metadata.name, jobFinished(j), Boolean(j.metadata.deletionTimestamp)]),
              ])
            if (seen.length === 0 || key(seen[seen.length - 1]!) !== key(state)) seen.push(state)
          } catch {
            // a missed poll is only a missed sample
          }
        }
        await sleep(250)
      }
    })()
    return {
      states: (name: string) => states.get(name) ?? [],
      stop: async () => {
        running = false
        await loop
      },
    }
  }

  describe("scheduled runs never give a false green (wall-clock minutes)", () => {
    // Created together between second 15 and 40 of a minute: a first run (g1) that hangs until its 50 s
    // timeout is then still active when the next minute's slot comes.
    const hang = { "fleetcheck.io/simulate": "hang" }
    const every = { schedule: "* * * * *", timeout: "50s" }
    let recorder: ReturnType<typeof recordStates>
    let firstSlot = 0

    beforeAll(async () => {
      await waitForSecond(15, 40)
      await Promise.all([
        create(checkManifest("forbid", { annotations: hang, spec: every })),
        create(
          checkManifest("replace", { annotations: hang, spec: { ...every, concurrencyPolicy: "Replace" } }),
        ),
        create(checkManifest("respec", { spec: every })),
        create(checkManifest("resched", { spec: { schedule: "0 0 1 1 *", timeout: "50s" } })),
      ])
      firstSlot = Math.ceil(Date.now() / 60_000) * 60_000
      recorder = recordStates(["forbid", "replace", "respec", "resched"])
    }, 90_000)

    afterAll(async () => {
      await recorder?.stop()
      for (const name of ["forbid", "replace", "respec", "resched"])
        await c.api("DELETE", `${checksPath}/${name}`)
    })

    it("Forbid: a slot that passes while a run is active is skipped (Event RunSkipped), and that run's failure is recorded", async () => {
      const skipped = runIDForTime(firstSlot)
      const following = runIDForTime(firstSlot + 60_000)
      // The slot after the skipped one starts a new run once g1 has timed out.
      await waitUntil(`run ${following} of forbid`, 150_000, async () =>
        (await jobsByRun("forbid")).has(following),
      )
      const states = recorder.states("forbid")
      for (const state of states) expect(activeJobs(state.jobs).length).toBeLessThanOrEqual(1)
      expect((await jobsByRun("forbid")).has(skipped)).toBe(false)
      // g1's verdict was recorded before the next run started.
      const g1Failed = states.find(
        (x) =>
          x.status.lastRun?.runID === "g1" && x.status.lastRun.result === "Failed" && verified(x)?.reason,
      )
      expect(g1Failed, JSON.stringify(states.map((x) => x.status))).toBeTruthy()
      expect(verified(g1Failed)).toMatchObject({ status: "False", reason: "RestoreTimedOut" })
      const events = (await c.api("GET", eventsPath)).body.items as any[]
      const skip = events.filter((e) => e.reason === "RunSkipped" && e.regarding?.name === "forbid")
      expect(skip).toHaveLength(1)
      expect(skip[0].type).toBe("Warning")
      expect(skip[0].note).toMatch(/run g1 .*was still running \(concurrencyPolicy Forbid\)/)
    })

    it("Replace: the active run's Job is deleted and recorded as RunSuperseded, then the new run starts", async () => {
      const slot = runIDForTime(firstSlot)
      const states = await waitUntil("replace to supersede g1", 60_000, async () => {
        const s = recorder.states("replace")
        return s.some((x) => verified(x)?.reason === "RunSuperseded") &&
          s.some((x) => x.status.lastRun?.runID === slot)
          ? s
          : undefined
      })
      const superseded = states.find((x) => verified(x)?.reason === "RunSuperseded")!
      expect(verified(superseded).status).toBe("False")
      expect(verified(superseded).message).toMatch(new RegExp(`run g1 was superseded by run ${slot}`))
      const jobs = await jobsByRun("replace")
      expect(jobs.has("g1")).toBe(false)
      expect(jobs.has(slot)).toBe(true)
      for (const state of states) expect(activeJobs(state.jobs).length).toBeLessThanOrEqual(1)
    })

    it("a new spec of a scheduled check is verified at once; Verified never stays True for a spec it did not verify", async () => {
      await waitUntil("a scheduled run of respec to succeed", 150_000, async () => {
        const o = await get("respec")
        return o.status?.lastRun?.runID?.startsWith("s") && o.status.lastRun.result === "Succeeded"
      })
      await waitForSecond(5, 40)
      await patch("respec", { spec: { backup: { name: "respec-2026-11-30" } } })
      const obj = await waitUntil("run g2 of respec to succeed", 15_000, async () => {
        const o = await get("respec")
        return o.status?.lastRun?.runID === "g2" && o.status.lastRun.result === "Succeeded" ? o : undefined
      })
      expect(verified(obj)).toMatchObject({ status: "True", observedGeneration: 2 })
      expect(obj.status.observedGeneration).toBe(2)
      // Every state written for generation 2 before g2 ended said Unknown, never the old True. (The
      // recorder reads a watch, which may be a moment behind the GET above.)
      const isGreen2 = (x: any) => x.status.observedGeneration === 2 && verified(x)?.status === "True"
      await waitUntil("the recorder to see generation 2 green", 10_000, () =>
        recorder.states("respec").some(isGreen2),
      )
      const states = recorder.states("respec")
      const firstGreen = states.find(isGreen2)
      expect(firstGreen?.status.lastRun).toMatchObject({ runID: "g2", result: "Succeeded" })
      for (const state of states) {
        if (state.status.observedGeneration === 2 && state.status.lastRun?.result === "Running") {
          expect(verified(state).status).toBe("Unknown")
        }
        if (verified(state) !== undefined) {
          expect(verified(state).observedGeneration).toBe(state.status.observedGeneration)
        }
      }
    })

    it("a schedule edit does not fire a catch-up run", async () => {
      // A run that started after the current minute's slot covers it, whatever the schedule says.
      await waitForSecond(2, 30)
      await patch("resched", { spec: { backup: { name: "resched-2026-11-30" } } })
      await waitUntil("run g2 of resched to succeed", 15_000, async () => {
        const o = await get("resched")
        return o.status?.lastRun?.runID === "g2" && o.status.lastRun.result === "Succeeded"
      })
      await patch("resched", { spec: { schedule: "* * * * *" } })
      const nextMinute = Math.ceil(Date.now() / 60_000) * 60_000
      await sleep(5_000)
      expect(Date.now()).toBeLessThan(nextMinute) // the check below is before the next slot
      const obj = await get("resched")
      expect(obj.metadata.generation).toBe(3)
      expect(obj.status.lastRun).toMatchObject({ runID: "g2", result: "Succeeded" })
      expect(obj.status.observedGeneration).toBe(3)
      expect(verified(obj)).toMatchObject({ status: "True", observedGeneration: 3 })
      expect(new Date(obj.status.nextRunTime).getTime()).toBe(nextMinute)
      expect([...(await jobsByRun("resched")).keys()].sort()).toEqual(["g1", "g2"])
    })
  })

  it("a run that ended after the next slot is recorded first: its failure turns Verified False although a later run is due", async () => {
    await engine?.stop()
    engine = undefined
    // A check whose runs succeed after 15 s, and, by hand, the state an engine leaves when it stops
    // mid-run: Verified=True from an earlier run, lastRun g1 Running, and g1's Job failing. Created
    // well before a slot, so g1 ends before it.
    await waitForSecond(5, 40)
    const obj = await create(
      checkManifest("late", {
        annotations: { "fleetcheck.io/simulate-delay": "15s" },
        spec: { schedule: "* * * * *", timeout: "50s" },
      }),
    )
    const jobName = jobNameFor("late", "g1")
    const made = await c.api(
      "POST",
      jobsPath,
      handMadeJob(
        jobName,
        { "fleetcheck.io/simulate": "fail", "fleetcheck.io/simulate-message": "late failure" },
        { check: "late", uid: obj.metadata.uid, runID: "g1" },
      ),
    )
    expect(made.status, JSON.stringify(made.body)).toBe(201)
    const at = new Date().toISOString().replace(/\.\d+Z$/, "Z")
    const withStatus = {
      ...obj,
      status: {
        observedGeneration: obj.metadata.generation,
        conditions: [
          {
            type: "Verified",
            status: "True",
            reason: "RestoreSucceeded",
            message: "an earlier run",
            lastTransitionTime: at,
            observedGeneration: obj.metadata.generation,
          },
        ],
        lastRun: {
          jobName,
          runID: "g1",
          startTime: made.body.metadata.creationTimestamp,
          result: "Running",
          traceID: traceparentFor(obj.metadata.uid, "g1").traceID,
        },
      },
    }
    const put = await c.api("PUT", `${checksPath}/late/status`, withStatus)
    expect(put.status, JSON.stringify(put.body)).toBe(200)
    // g1 fails, and a slot passes, while no engine runs.
    const slot = Math.ceil(Date.now() / 60_000) * 60_000
    await waitUntil("g1 to fail", 30_000, async () =>
      jobFinished((await c.api("GET", `${jobsPath}/${jobName}`)).body),
    )
    await sleep(Math.max(0, slot - Date.now()) + 1_000)

    engine = await startEngine(c, { runningPollMs: 2_000 })
    const failed = await waitUntil("the late failure to show", 20_000, async () => {
      const o = await get("late")
      return verified(o)?.reason === "RestoreFailed" ? o : undefined
    })
    expect(verified(failed)).toMatchObject({
      status: "False",
      message: expect.stringMatching(/late failure/),
    })
    expect(failed.status.lastSuccessfulTime).toBeUndefined()
    // The slot's run then starts, and its own success is what turns Verified True again.
    const done = await waitVerdict("late", "True", 60_000)
    expect(done.status.lastRun).toMatchObject({ runID: runIDForTime(slot), result: "Succeeded" })
    await c.api("DELETE", `${checksPath}/late`)
  })

  it("a Running run whose Job vanished is Failed/RestoreJobMissing and is not re-created", async () => {
    await create(checkManifest("vanish", { annotations: { "fleetcheck.io/simulate": "hang" } }))
    const running = await waitUntil("vanish to run", 30_000, async () => {
      const o = await get("vanish")
      return o.status?.lastRun?.result === "Running" && (await jobsOf("vanish")).length === 1 ? o : undefined
    })
    const del = await c.api("DELETE", `${jobsPath}/${running.status.lastRun.jobName}`, {
      propagationPolicy: "Background",
    })
    expect(del.status).toBeLessThan(300)
    const obj = await waitVerdict("vanish", "False", 30_000)
    expect(verified(obj).reason).toBe("RestoreJobMissing")
    expect(verified(obj).message).toMatch(/disappeared before its result was read.*not re-created/)
    expect(obj.status.lastRun).toMatchObject({ runID: "g1", result: "Failed" })
    await sleep(4_000)
    expect((await jobsOf("vanish")).filter((j) => !j.metadata.deletionTimestamp)).toHaveLength(0)
    expect(verified(await get("vanish")).reason).toBe("RestoreJobMissing")
  })

  it("drops the template's ttlSecondsAfterFinished: the hub decides when a Job goes", async () => {
    const m: any = checkManifest("ttl")
    m.spec.jobTemplate.spec.ttlSecondsAfterFinished = 0
    await create(m)
    await waitVerdict("ttl", "True")
    await sleep(3_000)
    const jobs = await jobsOf("ttl")
    expect(jobs).toHaveLength(1)
    expect(jobs[0].spec.ttlSecondsAfterFinished).toBeUndefined()
  })

  it("a history limit of 0 deletes the Job after its verdict is recorded, and never re-creates it", async () => {
    await create(checkManifest("nohistory", { spec: { successfulRunsHistoryLimit: 0 } }))
    const seen = new Set<string>()
    await waitUntil("the Job to be recorded, then deleted", 60_000, async () => {
      for (const j of await jobsOf("nohistory")) seen.add(j.metadata.uid)
      const o = await get("nohistory")
      return verified(o)?.status === "True" && seen.size > 0 && (await jobsOf("nohistory")).length === 0
    })
    await sleep(3_000)
    for (const j of await jobsOf("nohistory")) seen.add(j.metadata.uid)
    expect(seen.size).toBe(1)
    expect(await jobsOf("nohistory")).toHaveLength(0)
    expect((await get("nohistory")).status.lastRun).toMatchObject({ runID: "g1", result: "Succeeded" })
  })

  it("a Job name taken by a Job the check does not control is NameConflict, retried with backoff", async () => {
    const jobName = jobNameFor("taken", "g1")
    const foreign = await c.api("POST", jobsPath, handMadeJob(jobName, { "fleetcheck.io/simulate": "hang" }))
    expect(foreign.status).toBe(201)
    await create(checkManifest("taken"))
    const obj = await waitUntil("NameConflict", 30_000, async () => {
      const o = await get("taken")
      return verified(o)?.reason === "NameConflict" ? o : undefined
    })
    expect(verified(obj).status).toBe("False")
    expect(verified(obj).message).toMatch(
      new RegExp(`restore Job ${jobName} already exists and is not controlled by this BackupCheck`),
    )
    // Rate-limited retries (per-item exponential backoff), not a POST per second.
    await sleep(4_000)
    const before = engine?.engine.queue.numRequeues(`${ns}/taken`) ?? 0
    await sleep(5_000)
    const after = engine?.engine.queue.numRequeues(`${ns}/taken`) ?? 0
    expect(before).toBeGreaterThan(0)
    expect(after - before).toBeLessThanOrEqual(2)
    expect((await c.api("GET", `${jobsPath}/${jobName}`)).body.metadata.uid).toBe(foreign.body.metadata.uid)
    await c.api("DELETE", `${checksPath}/taken`)
    await c.api("DELETE", `${jobsPath}/${jobName}`, { propagationPolicy: "Background" })
  })

  it("reads a Job's own Pods (by controller uid), not those of an earlier Job with the same name", async () => {
    // An earlier Job named like podsel's first run left a failed Pod behind (orphaned on delete).
    const jobName = jobNameFor("podsel", "g1")
    const earlier = {
      "fleetcheck.io/simulate": "fail",
      "fleetcheck.io/simulate-exit-code": "3",
      "fleetcheck.io/simulate-message": "stale pod of an earlier Job",
    }
    expect((await c.api("POST", jobsPath, handMadeJob(jobName, earlier))).status).toBe(201)
    await waitUntil("the earlier Job to fail", 30_000, async () =>
      jobFinished((await c.api("GET", `${jobsPath}/${jobName}`)).body),
    )
    await c.api("DELETE", `${jobsPath}/${jobName}`, { propagationPolicy: "Orphan" })
    await waitUntil("the earlier Job to be gone", 30_000, async () => {
      return (await c.api("GET", `${jobsPath}/${jobName}`)).status === 404
    })
    const orphans = (
      await c.api(
        "GET",
        `${podsPath}?labelSelector=${encodeURIComponent(`batch.kubernetes.io/job-name=${jobName}`)}`,
      )
    ).body.items
    expect(orphans.length).toBeGreaterThan(0)

    await create(
      checkManifest("podsel", { annotations: { "fleetcheck.io/simulate-message": "fresh pod ok" } }),
    )
    const obj = await waitVerdict("podsel", "True")
    expect(verified(obj)).toMatchObject({ reason: "RestoreSucceeded", message: "fresh pod ok" })
  })

  it("status writes remove fields: nextRunTime on suspend and without a schedule, completionTime of a new run", async () => {
    await create(
      checkManifest("fields", {
        annotations: { "fleetcheck.io/simulate-delay": "3s" },
        spec: { schedule: "0 0 1 1 *" },
      }),
    )
    const first = await waitVerdict("fields", "True")
    expect(first.status.nextRunTime).toBeTruthy()
    expect(first.status.lastRun.completionTime).toBeTruthy()
    await patch("fields", { spec: { suspend: true } })
    const suspended = await waitUntil("Suspended", 15_000, async () => {
      const o = await get("fields")
      return verified(o)?.reason === "Suspended" ? o : undefined
    })
    expect(suspended.status).not.toHaveProperty("nextRunTime")
    await patch("fields", { spec: { suspend: false, schedule: null } })
    const running = await waitUntil("run g3 to be running", 15_000, async () => {
      const o = await get("fields")
      return o.status?.lastRun?.runID === "g3" && o.status.lastRun.result === "Running" ? o : undefined
    })
    expect(running.status.lastRun).not.toHaveProperty("completionTime")
    expect(running.status).not.toHaveProperty("nextRunTime")
    const done = await waitVerdict("fields", "True")
    expect(done.status.lastRun).toMatchObject({ runID: "g3", result: "Succeeded" })
    expect(done.status).not.toHaveProperty("nextRunTime")
  })

  it("refuses a timeout longer than the schedule's shortest interval (InvalidSpec) and starts nothing", async () => {
    await create(checkManifest("toolong", { spec: { schedule: "*/5 * * * *", timeout: "1h" } }))
    const obj = await waitVerdict("toolong", "False", 15_000)
    expect(verified(obj).reason).toBe("InvalidSpec")
    expect(verified(obj).message).toMatch(/timeout 1h is longer than the shortest interval .*\(5m0s\)/)
    expect(await jobsOf("toolong")).toHaveLength(0)
  })

  it("a schedule starts new runs over time", async () => {
    const obj = await waitUntil("two scheduled runs of every-minute", 200_000, async () => {
      const jobs = await jobsOf("every-minute")
      const o = await get("every-minute")
      return jobs.length >= 2 && o.status?.lastRun?.result === "Succeeded" ? o : undefined
    })
    expect(obj.status.lastRun.runID).toMatch(/^s/)
    expect(obj.status.nextRunTime).toBeTruthy()
    expect(new Date(obj.status.nextRunTime).getTime()).toBeGreaterThan(Date.now() - 1000)
  })
})
