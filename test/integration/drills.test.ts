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
    engine = await startEngine(c, { runningPollMs: 1_000, sandboxOrphanGraceMs: 2_000 })
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
      [
        "egress CIDR garbage",
        { sandbox: { egress: [{ cidr: "10.0.0.0/33" }] } },
        /spec.sandbox.egress\[0\].cidr: Invalid value.*must be an IPv4 or IPv6 CIDR/,
      ],
      [
        "egress without a CIDR",
        { sandbox: { egress: [{ ports: [{ port: 53 }] }] } },
        /spec.sandbox.egress\[0\].cidr: Required/,
      ],
      [
        "negative validationWindow",
        { sandbox: { validationWindow: "-1m" } },
        /spec.sandbox.validationWindow/,
      ],
      ["validationWindow over 168h", { sandbox: { validationWindow: "200h" } }, /between 0s and 168h/],
      [
        "quota garbage",
        { sandbox: { resourceQuota: { hard: { pods: "lots" } } } },
        /spec.sandbox.resourceQuota.hard.pods/,
      ],
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
    expect(report.checks[0]!.historyComplete).toBe(false)
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
    // The audit report counts the data-age miss the condition reports, from the checks' histories; both
    // were created in this 30-day period, so their history cannot cover it and the gaps start there.
    const audit = buildReport(
      [onTarget, offTarget].map((check) => ({ cluster: "member", check, verified: "True" as const })),
      Date.now() - 30 * 86_400_000,
      Date.now(),
    )
    expect(audit.checks.map((x) => [x.name, x.maxDataAge, x.dataAgeObjectiveMissed])).toEqual([
      ["off-target", "1h", 1],
      ["on-target", "1h", 0],
    ])
    expect(audit.totals.dataAgeObjectiveMissed).toBe(1)
    for (const x of audit.checks) {
      expect(x.creationTimestamp).toBeDefined()
      expect(x.historyComplete).toBe(false)
      expect(x.longestGapSeconds).toBeLessThan(600)
    }
    expect(audit.checks[0]!.runs[0]!.dataTimestamp).toBe("2026-11-01T00:00:00Z")
    // Converged: the objective conditions are written once, not on every reconcile.
    const rv = (await get("off-target")).metadata.resourceVersion
    await new Promise((r) => setTimeout(r, 2_500))
    expect((await get("off-target")).metadata.resourceVersion).toBe(rv)
  })

  describe("sandbox per run", () => {
    const nsPath = (name: string) => `/api/v1/namespaces/${name}`
    const sandboxOf = (name: string) =>
      waitUntil(`${name} runs in a sandbox`, 30_000, async () => {
        const obj = await get(name)
        return obj.status?.lastRun?.sandbox?.namespace ? obj : undefined
      })
    const items = async (path: string) => ((await c.api("GET", path)).body.items ?? []) as any[]
    /** Polls the namespace until the API no longer has it; returns when it was first seen terminating or gone. */
    const goneAt = (name: string, timeoutMs = 60_000) => {
      let leaving: number | undefined
      return waitUntil(
        `namespace ${name} deleted`,
        timeoutMs,
        async () => {
          const res = await c.api("GET", nsPath(name))
          if (res.status === 200 && res.body.metadata.deletionTimestamp) leaving ??= Date.now()
          if (res.status !== 404) return undefined
          return leaving ?? Date.now()
        },
        100,
      )
    }
    const sandboxSpec = {
      egress: [
        { cidr: "10.96.0.10/32", ports: [{ port: 53, protocol: "UDP" }, { port: 53 }] },
        { cidr: "192.0.2.0/24", ports: [{ port: 443 }] },
      ],
      resourceQuota: { hard: { pods: "4", "limits.memory": "2Gi" } },
      limitRange: { default: { memory: "256Mi" } },
    }
    const validation = {
      jobTemplate: {
        spec: { template: { spec: { containers: [{ name: "validate", image: "validate:1" }] } } },
      },
    }

    it("runs restore and validation in an isolated sandbox, records the verdict once, deletes the sandbox after the window", async () => {
      const created = await create(
        backupCheck("sandboxed", ns, {
          spec: { timeout: "30s", validation, sandbox: { ...sandboxSpec, validationWindow: "8s" } },
          annotations: { "fleetcheck.io/simulate-delay": "1s" },
        }),
      )
      const running = await sandboxOf("sandboxed")
      const sandbox = running.status.lastRun.sandbox.namespace as string
      expect(sandbox).toMatch(/^fcsb-sandboxed-g1-[0-9a-f]{10}$/)
      const obj = await lastRunOf("sandboxed", "g1")
      const observedAt = Date.now()
      expect(verified(obj)).toMatchObject({ status: "True", reason: "ValidationSucceeded" })

      // What the API server holds (read by the test, not the hub): the namespace, labelled to its check
      // and run; the deny-all policy with exactly the allowlist; the quota and limits; both Jobs inside.
      const namespace = (await c.api("GET", nsPath(sandbox))).body
      expect(namespace.metadata.labels).toMatchObject({
        "fleetcheck.io/sandbox": "true",
        "fleetcheck.io/backupcheck": "sandboxed",
        "fleetcheck.io/backupcheck-uid": created.metadata.uid,
        "fleetcheck.io/run": "g1",
        "pod-security.kubernetes.io/enforce": "baseline", // never looser than the check's namespace
      })
      const policies = await items(`/apis/networking.k8s.io/v1/namespaces/${sandbox}/networkpolicies`)
      expect(policies).toHaveLength(1)
      expect(policies[0].spec.podSelector).toEqual({})
      expect(policies[0].spec.policyTypes).toEqual(["Ingress", "Egress"])
      expect(policies[0].spec.ingress ?? []).toEqual([])
      expect(policies[0].spec.egress).toEqual([
        {
          to: [{ ipBlock: { cidr: "10.96.0.10/32" } }],
          ports: [
            { port: 53, protocol: "UDP" },
            { port: 53, protocol: "TCP" },
          ],
        },
        { to: [{ ipBlock: { cidr: "192.0.2.0/24" } }], ports: [{ port: 443, protocol: "TCP" }] },
      ])
      const quotas = await items(`/api/v1/namespaces/${sandbox}/resourcequotas`)
      expect(quotas.map((q) => q.spec.hard)).toEqual([{ pods: "4", "limits.memory": "2Gi" }])
      const limits = await items(`/api/v1/namespaces/${sandbox}/limitranges`)
      expect(limits.map((l) => l.spec.limits)).toEqual([
        [expect.objectContaining({ type: "Container", default: { memory: "256Mi" } })],
      ])
      const jobs = await items(`/apis/batch/v1/namespaces/${sandbox}/jobs`)
      expect(jobs.map((j) => j.metadata.name).sort()).toEqual(["sandboxed-g1", "sandboxed-g1-validate"])
      for (const j of jobs) expect(j.metadata.ownerReferences).toBeUndefined()
      const pods = await items(`/api/v1/namespaces/${sandbox}/pods`)
      expect(pods.length).toBeGreaterThanOrEqual(2)
      for (const p of pods) expect(p.spec.containers[0].resources.limits.memory).toBe("256Mi") // the LimitRange applied
      const outside = await items(
        `${jobsPath}?labelSelector=${encodeURIComponent("fleetcheck.io/backupcheck=sandboxed")}`,
      )
      expect(outside).toEqual([])

      // Open for inspection until the window has passed, then deleted; the status follows.
      const deleteAfter = Date.parse(obj.status.lastRun.sandbox.deleteAfter)
      expect(deleteAfter).toBe(Date.parse(obj.status.lastRun.completionTime) + 8_000)
      if (observedAt < deleteAfter - 500) expect(obj.status.lastRun.sandbox.cleanup).toBe("Pending")
      const leaving = await goneAt(sandbox)
      expect(leaving).toBeGreaterThanOrEqual(deleteAfter - 1000) // the API server's second resolution
      const done = await waitUntil("cleanup Deleted", 20_000, async () => {
        const o = await get("sandboxed")
        return o.status.lastRun.sandbox.cleanup === "Deleted" ? o : undefined
      })
      expect(done.status.history).toHaveLength(1) // the verdict, recorded once
      expect(done.status.history[0].sandbox).toMatchObject({ namespace: sandbox, cleanup: "Deleted" })
      expect(verified(done)).toMatchObject({ status: "True", reason: "ValidationSucceeded" })
    }, 90_000)

    it("a check deleted mid-run takes its sandbox with it before its finalizer goes", async () => {
      await create(
        backupCheck("doomed", ns, { spec: { timeout: "60s", sandbox: sandboxSpec }, annotations: hang }),
      )
      const running = await sandboxOf("doomed")
      const sandbox = running.status.lastRun.sandbox.namespace as string
      await waitUntil(
        "doomed's Job runs in its sandbox",
        20_000,
        async () => (await items(`/apis/batch/v1/namespaces/${sandbox}/jobs`)).length === 1,
      )
      expect((await c.api("DELETE", `${checksPath}/doomed`)).status).toBe(200)
      await waitUntil(
        "doomed deleted",
        60_000,
        async () => (await c.api("GET", `${checksPath}/doomed`)).status === 404,
      )
      // The finalizer went only once the sandbox was gone.
      expect((await c.api("GET", nsPath(sandbox))).status).toBe(404)
    }, 90_000)

    it("leaves no sandbox behind when the hub dies mid-run: a new hub records the verdict once and the sweeper deletes orphans", async () => {
      const survivor = await create(
        backupCheck("survivor", ns, {
          spec: { timeout: "60s", sandbox: sandboxSpec },
          annotations: { "fleetcheck.io/simulate-delay": "4s" },
        }),
      )
      await create(
        backupCheck("forsaken", ns, { spec: { timeout: "60s", sandbox: sandboxSpec }, annotations: hang }),
      )
      const survivorSandbox = (await sandboxOf("survivor")).status.lastRun.sandbox.namespace as string
      const forsakenSandbox = (await sandboxOf("forsaken")).status.lastRun.sandbox.namespace as string
      // The hub dies with both runs in flight (its scope closed without a drain: no cleanup runs).
      await engine?.stop()
      engine = undefined
      // Meanwhile: forsaken is deleted and its finalizer stripped by hand (nobody cleans its sandbox),
      // and a sandbox of survivor appears that no run records (a hub died between creating it and the
      // run's Job).
      expect((await c.api("DELETE", `${checksPath}/forsaken`)).status).toBe(200)
      const stripped = await c.kubectl([
        "patch",
        "-n",
        ns,
        "backupcheck/forsaken",
        "--type=merge",
        "-p",
        '{"metadata":{"finalizers":null}}',
      ])
      expect(stripped.code, stripped.stderr).toBe(0)
      const stray = "fcsb-survivor-g99-0000000000"
      expect(
        (
          await c.api("POST", "/api/v1/namespaces", {
            metadata: {
              name: stray,
              labels: {
                "fleetcheck.io/sandbox": "true",
                "fleetcheck.io/backupcheck": "survivor",
                "fleetcheck.io/backupcheck-uid": survivor.metadata.uid,
                "fleetcheck.io/run": "g99",
              },
              annotations: { "fleetcheck.io/backupcheck": `${ns}/survivor` },
            },
          })
        ).status,
      ).toBe(201)
      await waitUntil("survivor's restore finished while no hub ran", 30_000, async () => {
        const [job] = await items(`/apis/batch/v1/namespaces/${survivorSandbox}/jobs`)
        return job?.status?.succeeded === 1
      })
      engine = await startEngine(c, { runningPollMs: 1_000, sandboxOrphanGraceMs: 2_000 })
      const obj = await lastRunOf("survivor", "g1")
      expect(verified(obj)).toMatchObject({ status: "True", reason: "RestoreSucceeded" })
      await Promise.all([goneAt(survivorSandbox), goneAt(forsakenSandbox), goneAt(stray)])
      const left = await items(
        `/api/v1/namespaces?labelSelector=${encodeURIComponent("fleetcheck.io/sandbox=true")}`,
      )
      expect(left.map((n) => n.metadata.name)).toEqual([])
      const done = await waitUntil("survivor cleanup Deleted", 20_000, async () => {
        const o = await get("survivor")
        return o.status.lastRun.sandbox.cleanup === "Deleted" ? o : undefined
      })
      expect(done.status.history.map((r: any) => r.runID)).toEqual(["g1"])
    }, 120_000)

    it("two hubs acting at once (a failover's overlap) make one sandbox and one Job, record one verdict, and clean up", async () => {
      const recorded: string[] = []
      const onRunRecorded = (_ns: string, name: string, run: { runID: string }) =>
        void recorded.push(`${name}/${run.runID}`)
      const twin = await startEngine(c, { runningPollMs: 1_000, sandboxOrphanGraceMs: 2_000, onRunRecorded })
      const first = engine
      engine = await startEngine(c, { runningPollMs: 1_000, sandboxOrphanGraceMs: 2_000, onRunRecorded })
      await first?.stop()
      try {
        const created = await create(
          backupCheck("twin", ns, {
            spec: { timeout: "60s", sandbox: { ...sandboxSpec, validationWindow: "2s" } },
            annotations: { "fleetcheck.io/simulate-delay": "2s" },
          }),
        )
        const selector = encodeURIComponent(`fleetcheck.io/backupcheck-uid=${created.metadata.uid}`)
        const sandbox = (await sandboxOf("twin")).status.lastRun.sandbox.namespace as string
        const obj = await lastRunOf("twin", "g1")
        expect(verified(obj)).toMatchObject({ status: "True", reason: "RestoreSucceeded" })
        const sandboxes = await items(`/api/v1/namespaces?labelSelector=${selector}`)
        expect(sandboxes.map((n) => n.metadata.name)).toEqual([sandbox])
        expect(
          (await items(`/apis/batch/v1/namespaces/${sandbox}/jobs`)).map((j) => j.metadata.name),
        ).toEqual(["twin-g1"])
        await goneAt(sandbox)
        const done = await waitUntil("twin cleanup Deleted", 20_000, async () => {
          const o = await get("twin")
          return o.status.lastRun.sandbox.cleanup === "Deleted" ? o : undefined
        })
        expect(done.status.history.map((r: any) => r.runID)).toEqual(["g1"])
        expect(recorded.filter((r) => r.startsWith("twin/"))).toEqual(["twin/g1"]) // one hub wrote it
        expect(await items(`/api/v1/namespaces?labelSelector=${selector}`)).toEqual([])
      } finally {
        await twin.stop()
      }
    }, 90_000)
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
    // Found in the history, not as lastRun: on a loaded machine this test may come after later slots ran.
    const obj = await waitUntil(
      `staggered run ${runID} finished`,
      Math.max(0, start - Date.now()) + 30_000,
      async () => {
        const o = await get("staggered")
        const run = (o.status?.history ?? []).find((r: any) => r.runID === runID)
        return run && run.result !== "Running" ? { o, run } : undefined
      },
    )
    const job = (await c.api("GET", `${jobsPath}/${obj.run.jobName}`)).body
    const jobCreated = Date.parse(job.metadata.creationTimestamp)
    console.log(`staggered: Job created ${(jobCreated - start) / 1000}s after its start`)
    expect(jobCreated).toBeGreaterThanOrEqual(start)
    expect(jobCreated).toBeLessThan(start + 10_000)
    // The next start is a later slot's, at that slot's own offset.
    const next = Date.parse(obj.o.status.nextRunTime)
    const nextSlot = Math.floor(next / minute) * minute
    expect(nextSlot).toBeGreaterThan(slot)
    expect(next - nextSlot).toBe(startOffsetMs(staggered.uid, nextSlot, windowMs))
  }, 150_000)
})
