import { assert, describe, it } from "@effect/vitest"
import { type BackupCheckStatus, BackupCheckStatusSchema, type LastRun } from "../../src/api/backupcheck.ts"
import { boundHistory, withRun } from "../../src/reconcile/history.ts"

const run = (i: number, over: Partial<LastRun> = {}): LastRun => ({
  jobName: `orders-s${i}`,
  runID: `s${i}`,
  startTime: new Date(Date.UTC(2026, 10, 1) + i * 86_400_000).toISOString(),
  completionTime: new Date(Date.UTC(2026, 10, 1) + i * 86_400_000 + 41_000).toISOString(),
  result: "Succeeded",
  ...over,
})

describe("status.history", () => {
  it("puts each finished run in front, newest first, at most the limit", () => {
    let history: LastRun[] | undefined
    for (let i = 1; i <= 40; i++) history = withRun(history, run(i), 31)
    assert.strictEqual(history?.length, 31)
    assert.deepStrictEqual(
      history?.slice(0, 3).map((h) => h.runID),
      ["s40", "s39", "s38"],
    )
    assert.strictEqual(history?.at(-1)?.runID, "s10")
  })

  it("records a run recorded again once, with its latest result", () => {
    const history = withRun([run(2), run(1)], run(2, { result: "Failed" }), 31)
    assert.deepStrictEqual(
      history.map((h) => [h.runID, h.result]),
      [
        ["s2", "Failed"],
        ["s1", "Succeeded"],
      ],
    )
  })

  it("trims to a lowered limit at once, and drops the field at 0", () => {
    const status: BackupCheckStatus = { history: [run(3), run(2), run(1)] }
    assert.strictEqual(boundHistory(status, 3), status, "unchanged: the same object, so no write")
    assert.deepStrictEqual(
      boundHistory(status, 2).history?.map((h) => h.runID),
      ["s3", "s2"],
    )
    assert.isFalse("history" in boundHistory(status, 0))
    assert.isFalse("history" in boundHistory({ history: [] }, 5))
    assert.deepStrictEqual(withRun(undefined, run(1), 0), [])
  })

  it("a full history of 100 runs with 1 KiB messages stays far below the API server's object limit", () => {
    const message = "x".repeat(1024)
    const full = Array.from({ length: 100 }, (_, i) =>
      run(i, {
        backupName: "b".repeat(253),
        traceID: "a".repeat(32),
        specHash: "b".repeat(16),
        phases: [
          {
            name: "restore",
            result: "Succeeded",
            reason: "RestoreSucceeded",
            startTime: run(i).startTime,
            message,
          },
          {
            name: "validation",
            result: "Failed",
            reason: "ValidationFailed",
            startTime: run(i).startTime,
            message,
          },
        ],
      }),
    )
    const parsed = BackupCheckStatusSchema.safeParse({ history: full })
    assert.isTrue(parsed.success)
    const bytes = JSON.stringify(full).length
    console.log(`largest status.history (100 runs, 2 phases, 1 KiB messages): ${bytes} bytes`)
    assert.isBelow(bytes, 512 * 1024)
    // A longer message, or a 101st run, is refused by the schema (and the CRD).
    assert.isFalse(BackupCheckStatusSchema.safeParse({ history: [...full, run(101)] }).success)
    assert.isFalse(
      BackupCheckStatusSchema.safeParse({
        history: [run(1, { phases: [{ name: "restore", result: "Failed", message: `${message}x` }] })],
      }).success,
    )
  })
})
