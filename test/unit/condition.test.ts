import { assert, describe, it } from "@effect/vitest"
import {
  type Condition,
  ConditionSchema,
  conditionsEqualIgnoringTime,
  findCondition,
  isConditionTrue,
  removeStatusCondition,
  setStatusCondition,
  toKubeTime,
} from "../../src/api/condition.ts"

const t0 = new Date("2026-11-29T03:00:52.123Z")
const t1 = new Date("2026-11-29T04:00:00Z")

const verified = (over: Partial<Condition> = {}): Condition => ({
  type: "Verified",
  status: "True",
  observedGeneration: 3,
  lastTransitionTime: "2026-11-29T03:00:52Z",
  reason: "RestoreSucceeded",
  message: "restored in 41s",
  ...over,
})

describe("setStatusCondition", () => {
  it("adds a new condition with now as its transition time, to whole seconds", () => {
    const { conditions, changed } = setStatusCondition(
      undefined,
      {
        type: "Verified",
        status: "True",
        reason: "RestoreSucceeded",
        message: "restored in 41s",
        observedGeneration: 3,
      },
      t0,
    )
    assert.isTrue(changed)
    assert.deepStrictEqual(conditions, [verified()])
  })

  it("keeps lastTransitionTime when only reason, message or observedGeneration change", () => {
    const before = [verified()]
    const { conditions, changed } = setStatusCondition(
      before,
      {
        type: "Verified",
        status: "True",
        reason: "RestoreSucceeded",
        message: "restored in 12s",
        observedGeneration: 4,
      },
      t1,
    )
    assert.isTrue(changed)
    assert.deepStrictEqual(conditions, [verified({ message: "restored in 12s", observedGeneration: 4 })])
  })

  it("moves lastTransitionTime when the status changes", () => {
    const { conditions, changed } = setStatusCondition(
      [verified()],
      {
        type: "Verified",
        status: "False",
        reason: "ChecksumMismatch",
        message: "sha256 differs",
        observedGeneration: 3,
      },
      t1,
    )
    assert.isTrue(changed)
    assert.deepStrictEqual(conditions, [
      verified({
        status: "False",
        reason: "ChecksumMismatch",
        message: "sha256 differs",
        lastTransitionTime: "2026-11-29T04:00:00Z",
      }),
    ])
  })

  it("uses an explicit lastTransitionTime on a status change, and accepts now as ms or string", () => {
    const explicit = setStatusCondition(
      [verified()],
      {
        type: "Verified",
        status: "Unknown",
        reason: "RestoreRunning",
        message: "",
        lastTransitionTime: "2026-11-29T03:59:00Z",
      },
      t1,
    )
    assert.strictEqual(explicit.conditions[0]?.lastTransitionTime, "2026-11-29T03:59:00Z")
    const fromMs = setStatusCondition(
      [],
      { type: "Ready", status: "True", reason: "Synced", message: "" },
      t1.getTime(),
    )
    const fromString = setStatusCondition(
      [],
      { type: "Ready", status: "True", reason: "Synced", message: "" },
      t1.toISOString(),
    )
    assert.deepStrictEqual(fromMs, fromString)
    assert.strictEqual(fromMs.conditions[0]?.lastTransitionTime, "2026-11-29T04:00:00Z")
    assert.isFalse("observedGeneration" in fromMs.conditions[0]!)
  })

  it("reports no change, and keeps everything, for an identical condition", () => {
    const before = [verified(), verified({ type: "Ready", reason: "Synced" })]
    const { conditions, changed } = setStatusCondition(
      before,
      {
        type: "Verified",
        status: "True",
        reason: "RestoreSucceeded",
        message: "restored in 41s",
        observedGeneration: 3,
      },
      t1,
    )
    assert.isFalse(changed)
    assert.deepStrictEqual(conditions, before)
  })

  it("never mutates its input and keeps the order of other conditions", () => {
    const before = [verified({ type: "Ready", reason: "Synced" }), verified()]
    const snapshot = structuredClone(before)
    const { conditions } = setStatusCondition(
      before,
      { type: "Verified", status: "False", reason: "RestoreFailed", message: "exit 1" },
      t1,
    )
    assert.deepStrictEqual(before, snapshot)
    assert.notStrictEqual(conditions, before)
    assert.deepStrictEqual(
      conditions.map((c) => c.type),
      ["Ready", "Verified"],
    )
    assert.isFalse("observedGeneration" in conditions[1]!)
  })
})

describe("condition helpers", () => {
  it("finds conditions by type", () => {
    const list = [verified(), verified({ type: "Ready", status: "False", reason: "Unreachable" })]
    assert.strictEqual(findCondition(list, "Ready")?.reason, "Unreachable")
    assert.isUndefined(findCondition(list, "Connected"))
    assert.isUndefined(findCondition(undefined, "Ready"))
    assert.isTrue(isConditionTrue(list, "Verified"))
    assert.isFalse(isConditionTrue(list, "Ready"))
  })

  it("compares condition lists ignoring lastTransitionTime and order", () => {
    const a = [verified(), verified({ type: "Ready", reason: "Synced" })]
    const b = [
      verified({ type: "Ready", reason: "Synced", lastTransitionTime: "2020-01-01T00:00:00Z" }),
      verified(),
    ]
    assert.isTrue(conditionsEqualIgnoringTime(a, b))
    assert.isTrue(conditionsEqualIgnoringTime(undefined, []))
    assert.isFalse(conditionsEqualIgnoringTime(a, [verified()]))
    assert.isFalse(conditionsEqualIgnoringTime([verified()], [verified({ message: "other" })]))
    assert.isFalse(conditionsEqualIgnoringTime([verified()], [verified({ observedGeneration: 4 })]))
    assert.isFalse(conditionsEqualIgnoringTime([verified()], [verified({ status: "Unknown" })]))
  })

  it("removes a condition by type", () => {
    const removed = removeStatusCondition([verified(), verified({ type: "Ready" })], "Verified")
    assert.isTrue(removed.changed)
    assert.deepStrictEqual(
      removed.conditions.map((c) => c.type),
      ["Ready"],
    )
    assert.isFalse(removeStatusCondition(removed.conditions, "Verified").changed)
  })

  it("writes times as metav1.Time does", () => {
    assert.strictEqual(toKubeTime(t0), "2026-11-29T03:00:52Z")
    assert.strictEqual(toKubeTime(t0.getTime()), "2026-11-29T03:00:52Z")
  })

  it("formats each second right whatever order seconds are asked in (formatted seconds are kept)", () => {
    // Status rounds interleave the current second with each member's last probe time; more seconds
    // than are kept, in a scrambled order, twice over, each compared with Date's own formatting.
    const base = Date.parse("2026-12-01T17:00:00Z")
    const seconds = Array.from({ length: 600 }, (_, i) => (i * 7919) % 600)
    for (const round of [0, 1])
      for (const s of seconds) {
        const ms = base + s * 1000 + ((s * 37 + round) % 1000)
        assert.strictEqual(toKubeTime(ms), new Date(base + s * 1000).toISOString().replace(".000Z", "Z"))
        assert.strictEqual(toKubeTime(base), "2026-12-01T17:00:00Z")
      }
  })
})

describe("ConditionSchema", () => {
  it("accepts metav1.Condition and rejects what the API server would", () => {
    assert.isTrue(ConditionSchema.safeParse(verified()).success)
    assert.isTrue(
      ConditionSchema.safeParse(verified({ type: "fleetcheck.io/Verified", reason: "A_b:c,d" })).success,
    )
    assert.isTrue(
      ConditionSchema.safeParse(verified({ lastTransitionTime: "2026-11-29T04:00:52+01:00" })).success,
    )
    const bad: Array<Partial<Condition> | Record<string, unknown>> = [
      { status: "Maybe" },
      { reason: "" },
      { reason: "has space" },
      { reason: "trailing-" },
      { reason: "1starts" },
      { reason: "x".repeat(1025) },
      { message: "m".repeat(32769) },
      { lastTransitionTime: "yesterday" },
      { observedGeneration: -1 },
      { type: "" },
    ]
    for (const over of bad) {
      assert.isFalse(
        ConditionSchema.safeParse({ ...verified(), ...over }).success,
        JSON.stringify(over).slice(0, 60),
      )
    }
    const { lastTransitionTime: _, ...missing } = verified()
    assert.isFalse(ConditionSchema.safeParse(missing).success)
  })
})
