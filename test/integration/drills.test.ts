// Restore drills (issue 12, ADR 0009) against one real cluster (kube-apiserver, controller-manager,
// kwok): the CRD refuses bad drill specs, scheduled slots start at their check's offset in the start
// window, and status.history records every finished run (superseded and vanished ones included),
// bounded by historyLimit. One fleet for the whole file; kwok's stages choose each Job's outcome.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type LocalCluster, type LocalFleet, startFleet } from "../../clusters/local-fleet/index.ts"
import { buildReport } from "../../src/api/report.ts"
import { parseDuration } from "../../src/api/syntax.ts"
import { runIDForTime } from "../../src/reconcile/run-identity.ts"
import { startOffsetMs } from "../../src/reconcile/schedule.ts"
import { backupCheck } from "../support/backupcheck.ts"
import { type RunningEngine, startEngine } from "../support/engine.ts"
import { waitUntil } from "../support/wait.ts"

const ns = "drills"
const crdFile = new URL("../../deploy/crds/fleetcheck.io_backupchecks.yaml", import.meta.url).pathname
const checksPath = `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`
const jobsPath = `/apis/batch/v1/namespaces/${ns}/jobs`
const hang = { "fleetcheck.io/simulate": "hang" }

describe("restore drills on a real cluster", () => {
  let fleet: LocalFleet
  let c: LocalCluster
  let engine: RunningEngine | undefined
  /** When the staggered check was created, and its uid (the offset derives from it). */
  let staggered: { readonly created: number; readonly uid: string }

  const create = async (manifest: unknown) => {
    const res = await c.api("POST", checksPath, manifest)
    if (res.status !== 201) throw new Error(`create failed: ${res.status} ${JSON.stringify(res.body)}`)
    return res.body
  }
  const get = async (name: string) => (await c.api("GET", `${checksPath}/${name}`)).body
  const verified = (obj: any) => (obj?.status?.conditions ?? []).find((x: any) => x.type === "Verified")
  const patchSpec = async (name: string, spec: Record<string, unknown>) => {
    const res = await c.kubectl([
      "patch",
      "-n",
      ns,
      `backupcheck/${name}`,
      "--type=merge",
      "-p",
      JSON.stringify({ spec }),
    ])
    expect(res.code, res.stderr).toBe(0)
  }
  const lastRunOf = (name: string, runID: string, timeoutMs = 30_000) =>
    waitUntil(`${name} run ${runID} finished`, timeoutMs, async () => {
      const obj = await get(name)
      const last = obj.status?.lastRun
      return last?.runID === runID && last.result !== "Running" ? obj : undefined
    }).catch(async (e) => {
      const obj = await get(name)
      throw new Error(`${String(e)}; status: ${JSON.stringify(obj.status)}`)
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
    // Created first, checked last: its first scheduled slot needs up to a minute plus its offset.
    const obj = await create(
      backupCheck("staggered", ns, { spec: { schedule: "* * * * *", startWindow: "40s", timeout: "10s" } }),
    )
    staggered = { created: Date.parse(obj.metadata.creationTimestamp), uid: obj.metadata.uid }
    engine = await startEngine(c, { runningPollMs: 1_000 })
  })

  afterAll(async () => {
    await engine?.stop()
    await fleet?.stop()
  })

  describe("the CRD refuses bad drill specs with a clear message", () => {
    const cases: Array<[string, Record<string, unknown>, RegExp]> = [
      ["negative startWindow", { schedule: "0 3 * * *", startWindow: "-1h" }, /spec.startWindow/],
      ["startWindow garbage", { schedule: "0 3 * * *", startWindow: "two hours" }, /spec.startWindow/],
      ["startWindow without schedule", { startWindow: "1h" }, /startWindow requires schedule/],
      ["historyLimit over 100", { historyLimit: 101 }, /spec.historyLimit/],
      ["negative historyLimit", { historyLimit: -1 }, /spec.historyLimit/],
      ["validation without a Job", { validation: {} }, /spec.validation.jobTemplate: Required/],
      ["negative maxDataAge", { objectives: { maxDataAge: "-5m" } }, /spec.objectives.maxDataAge/],
      ["zero maxRestoreDuration", { objectives: { maxRestoreDuration: "0s" } }, /must be greater than 0/],
    ]
    it.each(cases)("%s", async (_label, spec, message) => {
      const m = backupCheck(`invalid-${Math.random().toString(36).slice(2, 8)}`, ns, { spec })
      const res = await c.kubectl(["apply", "-f", "-"], JSON.stringify(m))
      expect(res.code).not.toBe(0)
      expect(res.stderr).toMatch(message)
    })

    it("a window not shorter than the schedule's interval passes the CRD and is refused by the hub", async () => {
      await create(
        backupCheck("wide-window", ns, {
          spec: { schedule: "*/15 * * * *", startWindow: "15m", timeout: "1m" },
        }),
      )
      const obj = await waitUntil("wide-window InvalidSpec", 20_000, async () => {
        const o = await get("wide-window")
        return verified(o)?.reason === "InvalidSpec" ? o : undefined
      })
      expect(verified(obj).status).toBe("False")
      expect(verified(obj).message).toMatch(
        /startWindow 15m is not shorter than the shortest interval .*\(15m0s\)/,
      )
      expect(obj.status.lastRun).toBeUndefined()
    })
  })

  it("records every finished run in status.history, newest first, bounded by historyLimit", async () => {
    await create(
      backupCheck("history", ns, {
        spec: { historyLimit: 3, concurrencyPolicy: "Replace" },
        annotations: { "fleetcheck.io/simulate-message": "restored 12 tables" },
      }),
    )
    await lastRunOf("history", "g1")
    // g2 fails; g3 hangs and is superseded by g4 (Replace); g4's Job is deleted while it runs
    // (RestoreJobMissing); g5 succeeds. Five runs, three kept.
    const template = (annotations: Record<string, string>) => ({
      jobTemplate: {
        spec: {
          template: {
            metadata: { annotations },
            spec: { containers: [{ name: "restore", image: "restore:1" }] },
          },
        },
      },
    })
    await patchSpec(
      "history",
      template({
        "fleetcheck.io/simulate": "fail",
        "fleetcheck.io/simulate-message": "pg_restore: relation missing",
      }),
    )
    await lastRunOf("history", "g2")
    await patchSpec("history", template(hang))
    await waitUntil("g3 running", 20_000, async () => (await get("history")).status?.lastRun?.runID === "g3")
    await patchSpec("history", { ...template(hang), backup: { name: "history-backup-2" } })
    const g4 = await waitUntil("g4 running", 20_000, async () => {
      const o = await get("history")
      return o.status?.lastRun?.runID === "g4" && o.status.lastRun.result === "Running" ? o : undefined
    })
    expect(
      (await c.api("DELETE", `${jobsPath}/${g4.status.lastRun.jobName}`, { propagationPolicy: "Background" }))
        .status,
    ).toBe(200)
    await lastRunOf("history", "g4")
    await patchSpec("history", template({ "fleetcheck.io/simulate": "succeed" }))
    const obj = await lastRunOf("history", "g5")

    const history = obj.status.history as any[]
    expect(history.map((h) => h.runID)).toEqual(["g5", "g4", "g3"])
    const phase = (h: any) => h.phases?.[0]
    expect(history.map((h) => [h.result, phase(h).name, phase(h).result, phase(h).reason])).toEqual([
      ["Succeeded", "restore", "Succeeded", "RestoreSucceeded"],
      ["Failed", "restore", "Failed", "RestoreJobMissing"],
      ["Failed", "restore", "Failed", "RunSuperseded"],
    ])
    expect(history[0]).toMatchObject({ backupName: "history-backup-2", completionTime: expect.any(String) })
    expect(history[2].backupName).toBe("history-backup")
    expect(history[0].traceID).toMatch(/^[0-9a-f]{32}$/)
    expect(history[0]).toEqual(obj.status.lastRun)
    // The audit report over this check counts exactly these runs (the history keeps 3 of 5, and says so).
    const report = buildReport(
      [{ cluster: "member", check: obj, verified: "True" }],
      Date.now() - 3_600_000,
      Date.now(),
    )
    expect(report.totals).toMatchObject({ checks: 1, runs: 3, passed: 1, failed: 2 })
    expect(report.checks[0]!.runs.map((r) => [r.runID, r.result, r.reason])).toEqual([
      ["g5", "Succeeded", "RestoreSucceeded"],
      ["g4", "Failed", "RestoreJobMissing"],
      ["g3", "Failed", "RunSuperseded"],
    ])
    expect(report.checks[0]!.lastSuccessfulTime).toBe(obj.status.lastSuccessfulTime)
    expect(report.checks[0]!.historyTruncated).toBe(true)
    // A lowered limit trims at once, without a new run; 0 removes the field.
    await patchSpec("history", { historyLimit: 1 })
    await waitUntil(
      "history trimmed to 1",
      20_000,
      async () => (await get("history")).status?.history?.length === 1,
    )
    await patchSpec("history", { historyLimit: 0 })
    await waitUntil(
      "history removed",
      20_000,
      async () => (await get("history")).status?.history === undefined,
    )
  })

  describe("validation as its own phase", () => {
    const podTemplate = (name: string, annotations: Record<string, string>) => ({
      spec: { template: { metadata: { annotations }, spec: { containers: [{ name, image: `${name}:1` }] } } },
    })
    const restoreReport = JSON.stringify({
      message: "restored 3 tables",
      dataTimestamp: "2026-11-29T02:58:00Z",
      counts: { orders: 1200, customers: 88 },
    })
    const validatorReport = JSON.stringify({
      message: "orders and customers match the source",
      dataTimestamp: "2026-11-29T02:59:30Z",
      counts: { orders: 1200 },
    })
    const drill = (
      name: string,
      restore: Record<string, string>,
      validate: Record<string, string>,
      timeout = "30s",
    ) =>
      backupCheck(name, ns, {
        spec: { timeout, validation: { jobTemplate: podTemplate("validate", validate) } },
        annotations: restore,
      })
    const phases = (obj: any) => (obj.status.lastRun.phases as any[]).map((p) => [p.name, p.result, p.reason])

    it("a successful restore is validated in a second Job with the restore's outputs; both phases are recorded", async () => {
      await create(
        drill(
          "validated",
          { "fleetcheck.io/simulate-message": restoreReport },
          { "fleetcheck.io/simulate-message": validatorReport },
        ),
      )
      const obj = await lastRunOf("validated", "g1")
      expect(verified(obj)).toMatchObject({
        status: "True",
        reason: "ValidationSucceeded",
        message: "orders and customers match the source",
      })
      expect(phases(obj)).toEqual([
        ["restore", "Succeeded", "RestoreSucceeded"],
        ["validation", "Succeeded", "ValidationSucceeded"],
      ])
      const [restore, validation] = obj.status.lastRun.phases
      expect(restore).toMatchObject({
        message: "restored 3 tables",
        dataTimestamp: "2026-11-29T02:58:00Z",
        counts: { orders: 1200, customers: 88 },
      })
      expect(validation).toMatchObject({ dataTimestamp: "2026-11-29T02:59:30Z", counts: { orders: 1200 } })
      expect(Date.parse(validation.startTime)).toBeGreaterThanOrEqual(Date.parse(restore.startTime))
      const jobs = (
        await c.api(
          "GET",
          `${jobsPath}?labelSelector=${encodeURIComponent("fleetcheck.io/backupcheck=validated")}`,
        )
      ).body.items as any[]
      const vJob = jobs.find((j) => j.metadata.labels["fleetcheck.io/phase"] === "validation")
      expect(jobs).toHaveLength(2)
      expect(vJob.metadata.name).toBe("validated-g1-validate")
      expect(vJob.metadata.labels["fleetcheck.io/run"]).toBe("g1")
      expect(vJob.spec.activeDeadlineSeconds).toBeLessThanOrEqual(30)
      const env = Object.fromEntries(
        vJob.spec.template.spec.containers[0].env.map((e: any) => [e.name, e.value]),
      )
      expect(env).toMatchObject({
        FLEETCHECK_BACKUP_NAME: "validated-backup",
        FLEETCHECK_RESTORE_JOB: "validated-g1",
        FLEETCHECK_RESTORE_MESSAGE: "restored 3 tables",
        FLEETCHECK_RESTORE_DATA_TIMESTAMP: "2026-11-29T02:58:00Z",
      })
      expect(JSON.parse(env.FLEETCHECK_RESTORE_COUNTS)).toEqual({ orders: 1200, customers: 88 })
      expect(vJob.spec.template.spec.containers[0].image).toBe("validate:1")
    })

    it("tells a failed validation, a failed restore and a timed-out validation apart", async () => {
      await create(
        drill(
          "bad-data",
          {},
          {
            "fleetcheck.io/simulate": "fail",
            "fleetcheck.io/simulate-message": "orders: 1199 rows, expected 1200",
          },
        ),
      )
      await create(
        drill(
          "bad-restore",
          {
            "fleetcheck.io/simulate": "fail",
            "fleetcheck.io/simulate-message": "pg_restore: relation missing",
          },
          {},
        ),
      )
      await create(drill("slow-validation", {}, hang, "4s"))
      const badData = await lastRunOf("bad-data", "g1")
      expect(verified(badData)).toMatchObject({ status: "False", reason: "ValidationFailed" })
      expect(verified(badData).message).toMatch(/1199 rows, expected 1200/)
      expect(phases(badData)).toEqual([
        ["restore", "Succeeded", "RestoreSucceeded"],
        ["validation", "Failed", "ValidationFailed"],
      ])
      const badRestore = await lastRunOf("bad-restore", "g1")
      expect(verified(badRestore)).toMatchObject({ status: "False", reason: "RestoreFailed" })
      expect(phases(badRestore)).toEqual([["restore", "Failed", "RestoreFailed"]])
      const restoreJobs = (
        await c.api(
          "GET",
          `${jobsPath}?labelSelector=${encodeURIComponent("fleetcheck.io/backupcheck=bad-restore")}`,
        )
      ).body.items
      expect(restoreJobs).toHaveLength(1) // no validation after a failed restore
      const slow = await lastRunOf("slow-validation", "g1", 40_000)
      expect(verified(slow)).toMatchObject({ status: "False", reason: "ValidationTimedOut" })
      expect(phases(slow)).toEqual([
        ["restore", "Succeeded", "RestoreSucceeded"],
        ["validation", "Failed", "ValidationTimedOut"],
      ])
    }, 60_000)
  })

  it("measures each run against its objectives: met, missed, with the measured values", async () => {
    const report = (dataTimestamp: string) =>
      JSON.stringify({ message: "counts match", dataTimestamp, counts: { rows: 42 } })
    const validation = (dataTimestamp: string) => ({
      jobTemplate: {
        spec: {
          template: {
            metadata: { annotations: { "fleetcheck.io/simulate-message": report(dataTimestamp) } },
            spec: { containers: [{ name: "validate", image: "validate:1" }] },
          },
        },
      },
    })
    const fresh = new Date(Date.now() - 60_000).toISOString().replace(/\.\d{3}Z$/, "Z")
    await create(
      backupCheck("on-target", ns, {
        spec: { objectives: { maxRestoreDuration: "30s", maxDataAge: "1h" }, validation: validation(fresh) },
      }),
    )
    await create(
      backupCheck("off-target", ns, {
        spec: {
          objectives: { maxRestoreDuration: "1s", maxDataAge: "1h" },
          validation: validation("2026-11-01T00:00:00Z"),
        },
        annotations: { "fleetcheck.io/simulate-delay": "3s" },
      }),
    )
    const objective = (obj: any, type: string) => obj.status.conditions.find((c: any) => c.type === type)
    const onTarget = await waitUntil("on-target objectives", 30_000, async () => {
      const o = await get("on-target")
      return objective(o, "DataAgeObjectiveMet") && o.status.lastRun?.result === "Succeeded" ? o : undefined
    })
    expect(objective(onTarget, "RestoreTimeObjectiveMet")).toMatchObject({
      status: "True",
      reason: "ObjectiveMet",
    })
    expect(objective(onTarget, "RestoreTimeObjectiveMet").message).toMatch(
      /restore took \d+s, within the objective 30s \(run g1\)/,
    )
    expect(objective(onTarget, "DataAgeObjectiveMet")).toMatchObject({
      status: "True",
      reason: "ObjectiveMet",
    })
    expect(objective(onTarget, "DataAgeObjectiveMet").message).toContain(`newest record ${fresh}`)
    const offTarget = await waitUntil("off-target objectives", 30_000, async () => {
      const o = await get("off-target")
      return objective(o, "DataAgeObjectiveMet") && o.status.lastRun?.result === "Succeeded" ? o : undefined
    })
    expect(verified(offTarget).status).toBe("True") // objectives do not make a restore fail
    expect(objective(offTarget, "RestoreTimeObjectiveMet")).toMatchObject({
      status: "False",
      reason: "ObjectiveMissed",
    })
    expect(objective(offTarget, "RestoreTimeObjectiveMet").message).toMatch(
      /restore took [3-9]s, over the objective 1s/,
    )
    expect(objective(offTarget, "DataAgeObjectiveMet")).toMatchObject({
      status: "False",
      reason: "ObjectiveMissed",
    })
    expect(objective(offTarget, "DataAgeObjectiveMet").message).toMatch(
      /restored data was \d+h\d+m\d+s old \(newest record 2026-11-01T00:00:00Z\), over the objective 1h/,
    )
    // Converged: the objective conditions are written once, not on every reconcile.
    const rv = (await get("off-target")).metadata.resourceVersion
    await new Promise((r) => setTimeout(r, 2_500))
    expect((await get("off-target")).metadata.resourceVersion).toBe(rv)
  })

  it("starts a scheduled slot at its offset in the start window; nextRunTime is that start", async () => {
    const windowMs = parseDuration("40s") as number
    const minute = 60_000
    // The first slot after creation, and its start.
    const slot = Math.floor(staggered.created / minute) * minute + minute
    const start = slot + startOffsetMs(staggered.uid, slot, windowMs)
    console.log(`staggered: slot ${new Date(slot).toISOString()}, offset ${(start - slot) / 1000}s`)
    const runID = runIDForTime(slot)
    const before = await get("staggered")
    if (Date.now() < start - 2_000) expect(Date.parse(before.status.nextRunTime)).toBe(start)
    const obj = await lastRunOf("staggered", runID, start - Date.now() + 30_000)
    const job = (await c.api("GET", `${jobsPath}/${obj.status.lastRun.jobName}`)).body
    const jobCreated = Date.parse(job.metadata.creationTimestamp)
    console.log(`staggered: Job created ${(jobCreated - start) / 1000}s after its start`)
    expect(jobCreated).toBeGreaterThanOrEqual(start)
    expect(jobCreated).toBeLessThan(start + 10_000)
    // The next start is the next slot's, at that slot's own offset.
    const nextSlot = slot + minute
    expect(Date.parse(obj.status.nextRunTime)).toBeGreaterThanOrEqual(nextSlot)
    expect(Date.parse(obj.status.nextRunTime) - nextSlot).toBeLessThan(windowMs)
  }, 150_000)
})
