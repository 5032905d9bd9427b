import { assert, describe, it } from "@effect/vitest"
import type { LastRun } from "../../src/api/backupcheck.ts"
import { evaluateObjectives, lastFinishedRun, measureRun } from "../../src/reconcile/objectives.ts"

const run = (
  over: Partial<LastRun> = {},
  restore: Partial<NonNullable<LastRun["phases"]>[number]> = {},
): LastRun => ({
  jobName: "orders-g1",
  runID: "g1",
  startTime: "2026-11-29T03:00:00Z",
  completionTime: "2026-11-29T03:20:00Z",
  result: "Succeeded",
  phases: [
    {
      name: "restore",
      result: "Succeeded",
      reason: "RestoreSucceeded",
      startTime: "2026-11-29T03:00:00Z",
      completionTime: "2026-11-29T03:12:00Z",
      ...restore,
    },
  ],
  ...over,
})
const byType = (conditions: ReturnType<typeof evaluateObjectives>) =>
  Object.fromEntries(conditions.map((c) => [c.type, [c.status, c.reason]]))

describe("measureRun", () => {
  it("measures the restore phase, and the data age at the run's end from the validation's report first", () => {
    const validated = run({
      phases: [
        { ...run().phases![0]!, dataTimestamp: "2026-11-29T01:00:00Z" },
        {
          name: "validation",
          result: "Succeeded",
          startTime: "2026-11-29T03:12:00Z",
          dataTimestamp: "2026-11-29T02:50:00Z",
        },
      ],
    })
    assert.deepStrictEqual(measureRun(validated), {
      restoreDurationMs: 12 * 60_000,
      dataAgeMs: 30 * 60_000,
      dataTimestamp: "2026-11-29T02:50:00Z",
    })
    // A run recorded before phases existed: the run's own times; no data age.
    assert.strictEqual(measureRun(run({ phases: undefined })).restoreDurationMs, 20 * 60_000)
    assert.isUndefined(measureRun(run()).dataAgeMs)
  })
})

describe("evaluateObjectives", () => {
  it("sets a condition only for the objectives the spec has", () => {
    assert.deepStrictEqual(evaluateObjectives(undefined, run()), [])
    assert.deepStrictEqual(evaluateObjectives({}, run()), [])
    assert.deepStrictEqual(Object.keys(byType(evaluateObjectives({ maxDataAge: "26h" }, run()))), [
      "DataAgeObjectiveMet",
    ])
  })

  it("met, missed and not measured, with the measured value in the message", () => {
    const met = evaluateObjectives({ maxRestoreDuration: "15m" }, run())[0]!
    assert.deepStrictEqual([met.status, met.reason], ["True", "ObjectiveMet"])
    assert.match(met.message, /restore took 12m0s, within the objective 15m \(run g1\)/)
    const missed = evaluateObjectives({ maxRestoreDuration: "10m" }, run())[0]!
    assert.deepStrictEqual([missed.status, missed.reason], ["False", "ObjectiveMissed"])
    assert.match(missed.message, /took 12m0s, over the objective 10m/)
    assert.deepStrictEqual(byType(evaluateObjectives({ maxRestoreDuration: "10m" }, undefined)), {
      RestoreTimeObjectiveMet: ["Unknown", "NotMeasured"],
    })
  })

  it("a failed restore misses the time objective only when it already ran longer", () => {
    const failed = (minutes: number) =>
      run(
        { result: "Failed" },
        {
          result: "Failed",
          reason: "RestoreTimedOut",
          completionTime: `2026-11-29T03:${String(minutes).padStart(2, "0")}:00Z`,
        },
      )
    assert.deepStrictEqual(byType(evaluateObjectives({ maxRestoreDuration: "10m" }, failed(30))), {
      RestoreTimeObjectiveMet: ["False", "ObjectiveMissed"],
    })
    assert.deepStrictEqual(byType(evaluateObjectives({ maxRestoreDuration: "10m" }, failed(2))), {
      RestoreTimeObjectiveMet: ["Unknown", "NotMeasured"],
    })
  })

  it("data age: met or missed from the reported dataTimestamp; unknown without one or after a failure", () => {
    const reported = run({}, { dataTimestamp: "2026-11-28T03:00:00Z" }) // 24h20m before the run ended
    assert.deepStrictEqual(byType(evaluateObjectives({ maxDataAge: "26h" }, reported)), {
      DataAgeObjectiveMet: ["True", "ObjectiveMet"],
    })
    const missed = evaluateObjectives({ maxDataAge: "24h" }, reported)[0]!
    assert.deepStrictEqual([missed.status, missed.reason], ["False", "ObjectiveMissed"])
    assert.match(
      missed.message,
      /restored data was 24h20m0s old \(newest record 2026-11-28T03:00:00Z\), over the objective 24h/,
    )
    assert.deepStrictEqual(byType(evaluateObjectives({ maxDataAge: "24h" }, run())), {
      DataAgeObjectiveMet: ["Unknown", "NotMeasured"],
    })
    assert.deepStrictEqual(
      byType(evaluateObjectives({ maxDataAge: "48h" }, { ...reported, result: "Failed" })),
      {
        DataAgeObjectiveMet: ["Unknown", "NotMeasured"],
      },
    )
  })

  it("judges the last finished run: history's newest while a run is in flight", () => {
    const running = run({ runID: "g2", result: "Running", completionTime: undefined })
    assert.strictEqual(lastFinishedRun({ lastRun: running, history: [run()] })?.runID, "g1")
    assert.isUndefined(lastFinishedRun({ lastRun: running }))
    assert.strictEqual(lastFinishedRun({ lastRun: run() })?.runID, "g1")
  })
})
