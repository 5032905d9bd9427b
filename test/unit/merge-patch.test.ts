import { assert, describe, it } from "@effect/vitest"
import { jsonEqual, mergePatchOf } from "../../src/reconcile/merge-patch.ts"

describe("mergePatchOf", () => {
  it("is undefined when nothing changed, whatever the key order (a converged reconcile sends nothing)", () => {
    const status = {
      observedGeneration: 2,
      conditions: [{ type: "Verified", status: "True", reason: "RestoreSucceeded", message: "ok" }],
      lastRun: { runID: "g2", result: "Succeeded", completionTime: "2026-11-29T03:00:41Z" },
    }
    assert.isUndefined(mergePatchOf(status, structuredClone(status)))
    assert.isUndefined(mergePatchOf({ a: 1, b: { c: 2, d: 3 } }, { b: { d: 3, c: 2 }, a: 1 }))
    assert.isUndefined(mergePatchOf({ a: 1 }, { a: 1, b: undefined }))
  })

  it("removes what went away with null, nested too", () => {
    // Suspend: nextRunTime goes. A new Running run: the old completionTime goes.
    assert.deepStrictEqual(
      mergePatchOf(
        {
          nextRunTime: "2026-11-30T03:00:00Z",
          lastRun: { runID: "g1", result: "Succeeded", completionTime: "2026-11-29T03:00:41Z" },
        },
        { lastRun: { runID: "g2", result: "Running" } },
      ),
      { nextRunTime: null, lastRun: { runID: "g2", result: "Running", completionTime: null } },
    )
  })

  it("sends only what changed, replaces arrays whole, and leaves keys it does not know about alone", () => {
    const before = {
      history: ["another writer's"],
      conditions: [{ type: "Verified", status: "True" }],
      lastRun: { runID: "g1", result: "Running", startTime: "2026-11-29T03:00:00Z" },
    }
    const after = {
      history: ["another writer's"],
      conditions: [{ type: "Verified", status: "False" }],
      lastRun: { runID: "g1", result: "Failed", startTime: "2026-11-29T03:00:00Z" },
    }
    assert.deepStrictEqual(mergePatchOf(before, after), {
      conditions: [{ type: "Verified", status: "False" }],
      lastRun: { result: "Failed" },
    })
  })

  it("adds whole objects where there were none", () => {
    assert.deepStrictEqual(mergePatchOf({}, { lastRun: { runID: "g1" } }), { lastRun: { runID: "g1" } })
    assert.deepStrictEqual(mergePatchOf({ lastRun: "odd" }, { lastRun: { runID: "g1" } }), {
      lastRun: { runID: "g1" },
    })
  })
})

describe("jsonEqual", () => {
  it("compares JSON values whatever the key order, undefined-valued keys counting as absent", () => {
    const equal: Array<[unknown, unknown]> = [
      [
        { a: 1, b: [1, { c: "x" }] },
        { b: [1, { c: "x" }], a: 1 },
      ],
      [{ a: 1, u: undefined }, { a: 1 }],
      [{ a: 1 }, { u: undefined, a: 1 }],
      [[], []],
      [null, null],
      ["s", "s"],
    ]
    for (const [a, b] of equal) assert.isTrue(jsonEqual(a, b), `${JSON.stringify(a)} = ${JSON.stringify(b)}`)
    const different: Array<[unknown, unknown]> = [
      [{ a: 1 }, { a: 1, b: 2 }],
      [{ a: 1, b: 2 }, { a: 1 }],
      [
        { a: 1, b: undefined },
        { a: 1, c: 2 },
      ],
      [{ a: [1, 2] }, { a: [2, 1] }],
      [[1], [1, 2]],
      [{ a: {} }, { a: [] }],
      [{ a: null }, { a: undefined }],
      [{ a: 0 }, { a: "0" }],
      [{}, null],
    ]
    for (const [a, b] of different) {
      assert.isFalse(jsonEqual(a, b), `${JSON.stringify(a)} ≠ ${JSON.stringify(b)}`)
      assert.isFalse(jsonEqual(b, a), `${JSON.stringify(b)} ≠ ${JSON.stringify(a)}`)
    }
  })
})
