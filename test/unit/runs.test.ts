import { assert, describe, it } from "@effect/vitest"
import type { V1Job } from "@kubernetes/client-node"
import type { LastRun } from "../../src/api/backupcheck.ts"
import type { CachedJob } from "../../src/reconcile/cached-job.ts"
import { isRecorded, jobPhase, jobsToPrune, newerRuns } from "../../src/reconcile/runs.ts"

const job = (runID: string, created: string, phase: "Active" | "Complete" | "Failed", rv = "1"): V1Job => ({
  metadata: {
    name: `orders-${runID}`,
    resourceVersion: rv,
    creationTimestamp: new Date(created),
    labels: { "fleetcheck.io/run": runID },
  },
  status: phase === "Active" ? { active: 1 } : { conditions: [{ type: phase, status: "True" }] },
})
const run = (runID: string, startTime: string, result: LastRun["result"]): LastRun => ({
  jobName: `orders-${runID}`,
  runID,
  startTime,
  result,
})

describe("jobPhase", () => {
  it("reads the Job controller's final conditions", () => {
    assert.strictEqual(jobPhase(job("g1", "2026-11-29T10:00:00Z", "Active")), "Active")
    assert.strictEqual(jobPhase(job("g1", "2026-11-29T10:00:00Z", "Complete")), "Succeeded")
    assert.strictEqual(jobPhase(job("g1", "2026-11-29T10:00:00Z", "Failed")), "Failed")
    assert.strictEqual(
      jobPhase({ status: { conditions: [{ type: "FailureTarget", status: "True" }] } }),
      "Failed",
    )
  })
})

describe("isRecorded and newerRuns", () => {
  const t1 = job("s20261129t1000z", "2026-11-29T10:00:01Z", "Failed")
  const t2 = job("s20261129t1100z", "2026-11-29T11:00:01Z", "Complete")
  const t3 = job("s20261129t1200z", "2026-11-29T12:00:01Z", "Active")

  it("lastRun's Job is recorded once lastRun holds its result; older runs are recorded", () => {
    const running = run("s20261129t1000z", "2026-11-29T10:00:01Z", "Running")
    assert.isFalse(isRecorded(running, t1))
    assert.isTrue(isRecorded({ ...running, result: "Failed" }, t1))
    assert.isTrue(isRecorded(run("s20261129t1100z", "2026-11-29T11:00:01Z", "Succeeded"), t1))
    assert.isFalse(isRecorded(undefined, t1))
  })

  it("finds the runs newer than lastRun, oldest first, without lastRun's own Job", () => {
    const lastRun = run("s20261129t1000z", "2026-11-29T10:00:01Z", "Running")
    assert.deepStrictEqual(
      newerRuns(lastRun, [t3, t1, t2]).map((j) => j.metadata?.name),
      ["orders-s20261129t1100z", "orders-s20261129t1200z"],
    )
    assert.deepStrictEqual(
      newerRuns(run("s20261129t1200z", "2026-11-29T12:00:01Z", "Running"), [t1, t2, t3]),
      [],
    )
    assert.strictEqual(newerRuns(undefined, [t2, t1]).length, 2)
  })
})

describe("jobsToPrune", () => {
  const limits = (successfulRunsHistoryLimit: number, failedRunsHistoryLimit: number) => ({
    successfulRunsHistoryLimit,
    failedRunsHistoryLimit,
  })
  const g1 = job("g1", "2026-11-29T10:00:00Z", "Complete", "10")
  const g2 = job("g2", "2026-11-29T10:05:00Z", "Complete", "20")
  const g3 = job("g3", "2026-11-29T10:10:00Z", "Failed", "30")
  const names = (jobs: ReadonlyArray<CachedJob>) => jobs.map((j) => j.metadata?.name)

  it("keeps the newest N succeeded and M failed Jobs", () => {
    const recorded = run("g3", "2026-11-29T10:10:00Z", "Failed")
    assert.deepStrictEqual(names(jobsToPrune(recorded, [g1, g2, g3], limits(1, 1))), ["orders-g1"])
    assert.deepStrictEqual(names(jobsToPrune(recorded, [g1, g2, g3], limits(0, 0))), [
      "orders-g3",
      "orders-g2",
      "orders-g1",
    ])
  })

  it("with a limit of 0, deletes a Job only once the cached status holds its verdict", () => {
    // The verdict of g2 is being written now; the cache still says Running: g2 stays for now.
    const stillRunning = run("g2", "2026-11-29T10:05:00Z", "Running")
    assert.deepStrictEqual(names(jobsToPrune(stillRunning, [g1, g2], limits(0, 0))), ["orders-g1"])
    // The next reconcile reads the verdict from the cache: now g2 may go.
    const written = run("g2", "2026-11-29T10:05:00Z", "Succeeded")
    assert.deepStrictEqual(names(jobsToPrune(written, [g1, g2], limits(0, 0))), ["orders-g2", "orders-g1"])
    // Nothing recorded yet (a stale or empty status): nothing is deleted.
    assert.deepStrictEqual(jobsToPrune(undefined, [g1, g2], limits(0, 0)), [])
  })

  it("never deletes an active Job, a Job already being deleted, or a newer unrecorded run", () => {
    const active = job("g4", "2026-11-29T10:15:00Z", "Active", "40")
    const deleting: V1Job = { ...g1, metadata: { ...g1.metadata, deletionTimestamp: new Date() } }
    const newer = job("g5", "2026-11-29T10:20:00Z", "Complete", "50")
    const recorded = run("g2", "2026-11-29T10:05:00Z", "Succeeded")
    assert.deepStrictEqual(names(jobsToPrune(recorded, [deleting, g2, active, newer], limits(0, 0))), [
      "orders-g2",
    ])
  })

  it("counts lastRun's Job as the newest of its kind, and breaks creation-time ties by resourceVersion", () => {
    const a = job("g7", "2026-11-29T10:00:00Z", "Complete", "70")
    const b = job("g8", "2026-11-29T10:00:00Z", "Complete", "80")
    assert.deepStrictEqual(
      names(jobsToPrune(run("g8", "2026-11-29T10:00:00Z", "Succeeded"), [a, b], limits(1, 1))),
      ["orders-g7"],
    )
    // Within the same second as lastRun's start, an older run counts as recorded too.
    assert.deepStrictEqual(
      names(jobsToPrune(run("g7", "2026-11-29T10:00:00Z", "Succeeded"), [a, b], limits(1, 1))),
      ["orders-g8"],
    )
  })
})

describe("runs with a validation phase", () => {
  const validation = (runID: string, created: string, phase: "Active" | "Complete" | "Failed"): V1Job => {
    const j = job(runID, created, phase)
    return {
      ...j,
      metadata: {
        ...j.metadata,
        name: `orders-${runID}-validate`,
        labels: { "fleetcheck.io/run": runID, "fleetcheck.io/phase": "validation" },
      },
    }
  }
  const limits = { successfulRunsHistoryLimit: 1, failedRunsHistoryLimit: 1 }
  const g1 = job("g1", "2026-11-29T10:00:00Z", "Complete")
  const g1v = validation("g1", "2026-11-29T10:01:00Z", "Complete")
  const g2 = job("g2", "2026-11-29T10:05:00Z", "Complete")
  const g2v = validation("g2", "2026-11-29T10:06:00Z", "Failed")

  it("a validation Job is never a run of its own", () => {
    assert.deepStrictEqual(
      newerRuns(run("g1", "2026-11-29T10:00:00Z", "Running"), [g1, g1v, g2, g2v]).map(
        (j) => j.metadata?.name,
      ),
      ["orders-g2"],
    )
  })

  it("the limits count runs by their restore Jobs, and a validation Job goes with its run", () => {
    const recorded = run("g2", "2026-11-29T10:05:00Z", "Failed")
    const names = jobsToPrune(recorded, [g1, g1v, g2, g2v], limits).map((j) => j.metadata?.name)
    assert.deepStrictEqual(names.sort(), ["orders-g1", "orders-g1-validate"])
    // A validation Job whose restore Job is gone goes once it is recorded; an active one never.
    assert.deepStrictEqual(
      jobsToPrune(recorded, [g2, g1v], limits).map((j) => j.metadata?.name),
      ["orders-g1-validate"],
    )
    assert.deepStrictEqual(jobsToPrune(run("g2", "2026-11-29T10:05:00Z", "Running"), [g2, g2v], limits), [])
    const active = validation("g2", "2026-11-29T10:06:00Z", "Active")
    assert.deepStrictEqual(jobsToPrune(recorded, [active], limits), [])
  })
})
