// The BackupCheck controller against one real cluster (kube-apiserver, controller-manager, scheduler,
// kwok): the CRD's validation, every verdict, new runs, deletion, scale, two engines at once, an engine
// killed mid-run, an apiserver restart, and hostile input.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type LocalCluster, type LocalFleet, startFleet } from "../../clusters/local-fleet/index.ts"
import { type RunningEngine, startEngine } from "../support/engine.ts"
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
    const est = await c.kubectl([
      "wait",
      "--for=condition=Established",
      "crd/backupchecks.fleetcheck.io",
      "--timeout=30s",
    ])
    expect(est.code, est.stderr).toBe(0)
    expect((await c.api("POST", "/api/v1/namespaces", { metadata: { name: ns } })).status).toBe(201)
    // Created now, checked at the end: a schedule needs wall-clock minutes to show new runs.
    await create(
      checkManifest("every-minute", { spec: { schedule: "* * * * *", timeZone: "Europe/Berlin" } }),
    )
    engine = await startEngine(c, { runningPollMs: 2_000 })
  })

  afterAll(async () => {
    await engine?.stop()
    await fleet?.stop()
  })

  describe("the CRD rejects invalid objects with a clear message", () => {
    const cases: Array<[string, (m: any) => void, RegExp]> = [
      ["missing jobTemplate", (m) => delete m.spec.jobTemplate, /jobTemplate.*Required/i],
      ["bad cron", (m) => (m.spec.schedule = "every day at 3"), /schedule/i],
      ["bad duration", (m) => (m.spec.timeout = "30 minutes"), /timeout/i],
      ["bad checksum", (m) => (m.spec.backup.checksum = "sha256:xyz"), /checksum/i],
      ["unknown field", (m) => (m.spec.surprise = true), /unknown field "spec.surprise"/i],
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
