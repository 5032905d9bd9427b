// Cross-cluster drills' pure parts: the schema (period bounds, one kind of target), the rotation (never
// the source, deterministic, every target once over n rounds), the drill check (the source's backup
// reference and name, no schedule), and the verdict rules (a failed, missing or unseen drill is never
// green), plus the property selector over ClusterProfile properties.
import { assert, describe, it } from "@effect/vitest"
import type { ClusterDrill } from "../../src/api/fleetbackupcheck.ts"
import { parseFleetBackupCheck } from "../../src/api/fleetbackupcheck.ts"
import { selectorMatches } from "../../src/api/label-selector.ts"
import { propertiesOf } from "../../src/api/membercluster.ts"
import { clusterProfileProperties } from "../../src/clusterprofile/profile.ts"
import {
  drillCheckName,
  drillCheckOf,
  judgeDrills,
  mergeDrills,
  missingDrillTargets,
  planDrills,
  rotatedTarget,
  roundOf,
  sourceAnnotation,
  withDrills,
  withMissingDrillTargets,
} from "../../src/hub/placement/drill.ts"
import { placedCheckOf } from "../../src/hub/placement/plan.ts"

const fbc = (spec: Record<string, unknown> = {}) => ({
  apiVersion: "fleetcheck.io/v1alpha1",
  kind: "FleetBackupCheck",
  metadata: { name: "orders", namespace: "fleetcheck-system", uid: "u1", generation: 1 },
  spec: {
    clusterSelector: {},
    template: {
      metadata: { namespace: "shop" },
      spec: {
        backup: { name: "orders-nightly", source: "s3://b/orders" },
        schedule: "0 3 * * *",
        startWindow: "1h",
        jobTemplate: { spec: { template: { spec: { containers: [{ name: "r", image: "r:1" }] } } } },
      },
    },
    ...spec,
  },
})

const parsed = (spec: Record<string, unknown>) => {
  const r = parseFleetBackupCheck(fbc(spec))
  if (!r.success) throw new Error(r.error)
  return r.data
}

const entry = (over: Partial<ClusterDrill>): ClusterDrill => ({
  source: "a",
  target: "b",
  state: "Current",
  verified: "True",
  reason: "RestoreSucceeded",
  ...over,
})

const clusters = (names: string[], labels: Record<string, Record<string, string>> = {}) =>
  names.map((name) => ({ name, labels: labels[name] ?? {} }))

describe("spec.drill schema", () => {
  it("accepts targets by name or by selector, with a period of 1m to 8784h", () => {
    assert.isTrue(parseFleetBackupCheck(fbc({ drill: { targetClusters: ["b"], period: "24h" } })).success)
    assert.isTrue(
      parseFleetBackupCheck(
        fbc({ drill: { targetSelector: { matchLabels: { region: "us" } }, period: "1m" } }),
      ).success,
    )
  })
  it("refuses a period out of bounds or malformed, naming the field", () => {
    for (const period of ["59s", "8785h", "soon", "-1h"]) {
      const r = parseFleetBackupCheck(fbc({ drill: { targetClusters: ["b"], period } }))
      assert.isFalse(r.success, period)
      if (!r.success) assert.match(r.error, /spec\.drill\.period/)
    }
  })
  it("refuses both or neither kind of target", () => {
    for (const drill of [
      { period: "1h" },
      { targetClusters: ["b"], targetSelector: {}, period: "1h" },
      { targetClusters: [], period: "1h" },
      { targetClusters: ["Not A Name"], period: "1h" },
    ]) {
      assert.isFalse(parseFleetBackupCheck(fbc({ drill })).success, JSON.stringify(drill))
    }
  })
})

describe("rotation", () => {
  it("never picks the source; over n rounds a source drills every eligible target exactly once", () => {
    const eligible = ["b", "c", "d"]
    const seen = new Map<string, number>()
    for (let round = 1000; round < 1003; round++) {
      const t = rotatedTarget("a", eligible, round)!
      seen.set(t, (seen.get(t) ?? 0) + 1)
    }
    assert.deepStrictEqual([...seen.keys()].sort(), eligible)
    assert.isTrue([...seen.values()].every((n) => n === 1))
    // Deterministic: the same inputs give the same pair.
    assert.strictEqual(rotatedTarget("a", eligible, 7), rotatedTarget("a", [...eligible], 7))
  })
  it("plans one target per source, never itself, and says why a source has none", () => {
    const all = clusters(["a", "b", "c"], { b: { region: "us" }, c: { region: "us" } })
    const plan = planDrills(
      parsed({ drill: { targetClusters: ["a", "b"], period: "1h" } }).spec.drill!,
      ["a", "b"],
      all,
      5,
    )
    assert.deepStrictEqual(plan[0], { source: "a", target: "b" })
    assert.deepStrictEqual(plan[1], { source: "b", target: "a" })
    const self = planDrills(
      parsed({ drill: { targetClusters: ["a"], period: "1h" } }).spec.drill!,
      ["a"],
      all,
      5,
    )
    assert.strictEqual("problem" in self[0]! && self[0].problem.reason, "DrillTargetIsSource")
    const none = planDrills(
      parsed({ drill: { targetSelector: { matchLabels: { region: "mars" } }, period: "1h" } }).spec.drill!,
      ["a"],
      all,
      5,
    )
    assert.strictEqual("problem" in none[0]! && none[0].problem.reason, "NoDrillTargets")
    const missing = planDrills(
      parsed({ drill: { targetClusters: ["zz"], period: "1h" } }).spec.drill!,
      ["a"],
      all,
      5,
    )
    assert.strictEqual("problem" in missing[0]! && missing[0].problem.reason, "NoDrillTargets")
    const bySelector = planDrills(
      parsed({ drill: { targetSelector: { matchLabels: { region: "us" } }, period: "1h" } }).spec.drill!,
      ["a", "b"],
      all,
      5,
    )
    for (const d of bySelector) assert.isTrue("target" in d && d.target !== d.source && d.target !== "a")
  })
  it("names targetClusters that are no MemberCluster, and Placed says so: False DrillTargetNotFound", () => {
    const all = clusters(["a", "b"])
    const drill = parsed({ drill: { targetClusters: ["b", "ghost", "a", "ghost", "gone"], period: "1h" } })
      .spec.drill!
    assert.deepStrictEqual(missingDrillTargets(drill, all), ["ghost", "gone"].sort())
    // The ones that exist are still drilled.
    assert.deepStrictEqual(planDrills(drill, ["a"], all, 5), [{ source: "a", target: "b" }])
    const bySelector = parsed({ drill: { targetSelector: {}, period: "1h" } }).spec.drill!
    assert.deepStrictEqual(missingDrillTargets(bySelector, all), [])

    const placed = { status: "True" as const, reason: "Placed", message: "placed in all 2 selected clusters" }
    assert.strictEqual(withMissingDrillTargets(placed, []), placed)
    const missing = withMissingDrillTargets(placed, ["ghost", "gone"])
    assert.strictEqual(missing.status, "False")
    assert.strictEqual(missing.reason, "DrillTargetNotFound")
    assert.match(missing.message, /targetClusters names 2 clusters with no MemberCluster \(ghost; gone\)/)
    const pending = { status: "Unknown" as const, reason: "PlacementPending", message: "waiting for b" }
    assert.strictEqual(withMissingDrillTargets(pending, ["ghost"]).reason, "DrillTargetNotFound")
    // A problem already there keeps its reason; the missing targets are added to its message.
    const failed = { status: "False" as const, reason: "PlacementFailed", message: "not placed in b" }
    const both = withMissingDrillTargets(failed, ["ghost"])
    assert.strictEqual(both.reason, "PlacementFailed")
    assert.match(both.message, /^not placed in b; spec\.drill\.targetClusters names a cluster .*\(ghost\)/)
  })
  it("rounds are floor(now / period)", () => {
    assert.strictEqual(roundOf(3_599_999, 3_600_000), 0)
    assert.strictEqual(roundOf(3_600_000, 3_600_000), 1)
  })
})

describe("the drill check", () => {
  it("carries the source's backup reference and name, runs once (no schedule), a name per round", () => {
    const want = placedCheckOf(parsed({ drill: { targetClusters: ["b"], period: "1h" } }))
    const drill = drillCheckOf(want, "a", 42)
    assert.deepStrictEqual(drill.spec.backup, {
      name: "orders-nightly",
      source: "s3://b/orders",
      cluster: "a",
    })
    assert.isUndefined(drill.spec.schedule)
    assert.isUndefined(drill.spec.startWindow)
    assert.strictEqual(drill.name, "orders-drill-a-r42")
    assert.strictEqual(drill.labels["fleetcheck.io/drill-source"], "a")
    assert.strictEqual(drill.labels["fleetcheck.io/fleetbackupcheck"], "fleetcheck-system.orders")
    assert.strictEqual(drill.annotations["fleetcheck.io/template-hash"], drill.hash)
    assert.notStrictEqual(drill.hash, want.hash)
    assert.notStrictEqual(drillCheckOf(want, "c", 42).hash, drill.hash)
    assert.isAtMost(drillCheckName("x".repeat(250), "y".repeat(200), 1).length, 253)
  })
})

describe("drill verdicts", () => {
  const now = Date.parse("2026-12-01T05:00:00Z")
  const hour = 3_600_000
  it("a failed drill is False naming the pair, even when the placed checks verified", () => {
    const v = judgeDrills([entry({ verified: "False", reason: "RestoreTimedOut" })], [], now, hour)
    const c = withDrills({ status: "True" as const, reason: "AllVerified", message: "verified in all 1" }, v)
    assert.strictEqual(c.status, "False")
    assert.strictEqual(c.reason, "DrillFailing")
    assert.match(c.message, /a → b \(RestoreTimedOut/)
  })
  it("a source without a drill is False with the reason", () => {
    const v = judgeDrills([], [{ source: "a", reason: "DrillTargetIsSource", message: "only a" }], now, hour)
    const c = withDrills({ status: "True" as const, reason: "AllVerified", message: "ok" }, v)
    assert.deepStrictEqual([c.status, c.reason], ["False", "DrillTargetIsSource"])
  })
  it("a drill in an unseen target is Unknown, even with an earlier success in the period", () => {
    const drills = [
      entry({ verified: "Unknown", reason: "ClusterUnreachable" }),
      entry({ target: "c", state: "Previous", lastSuccessfulTime: new Date(now - 60_000).toISOString() }),
    ]
    const c = withDrills(
      { status: "True" as const, reason: "AllVerified", message: "ok" },
      judgeDrills(drills, [], now, hour),
    )
    assert.deepStrictEqual([c.status, c.reason], ["Unknown", "DrillPending"])
  })
  it("a drill still running counts only when an earlier drill of the source succeeded within the period", () => {
    const running = entry({ verified: "Unknown", reason: "RestoreRunning" })
    const recent = entry({
      target: "c",
      state: "Previous",
      lastSuccessfulTime: new Date(now - 60_000).toISOString(),
    })
    const old = { ...recent, lastSuccessfulTime: new Date(now - 2 * hour).toISOString() }
    const ok = withDrills(
      { status: "True" as const, reason: "AllVerified", message: "ok" },
      judgeDrills([running, recent], [], now, hour),
    )
    assert.strictEqual(ok.status, "True")
    const stale = withDrills(
      { status: "True" as const, reason: "AllVerified", message: "ok" },
      judgeDrills([running, old], [], now, hour),
    )
    assert.strictEqual(stale.status, "Unknown")
  })
  it("never turns a False or Unknown placement verdict green", () => {
    const v = judgeDrills([entry({})], [], now, hour)
    for (const status of ["False", "Unknown"] as const)
      assert.strictEqual(withDrills({ status, reason: "X", message: "m" }, v).status, status)
  })
  it("keeps earlier pairs as Previous, newest first, bounded per source, and records them at the source", () => {
    const previous = Array.from({ length: 12 }, (_, i) =>
      entry({ target: `t${i}`, since: new Date(now - (i + 1) * hour).toISOString() }),
    )
    const merged = mergeDrills(
      [entry({ target: "t0", since: new Date(now).toISOString() })],
      previous,
      new Set(["a"]),
    )
    assert.strictEqual(merged[0]!.state, "Current")
    assert.strictEqual(merged.length, 1 + 8)
    assert.isTrue(merged.slice(1).every((d) => d.state === "Previous" && d.target !== "t0"))
    assert.deepStrictEqual(mergeDrills([], previous, new Set(["other"])), [])
    const recorded = JSON.parse(sourceAnnotation(merged, "a"))
    assert.strictEqual(recorded[0].target, "t0")
    assert.strictEqual(recorded[0].state, "Current")
  })
})

describe("ClusterProfile properties", () => {
  it("are taken from the profile's status bounded and sorted, and a property selector matches them", () => {
    const props = clusterProfileProperties(
      {
        status: {
          properties: [
            { name: "storage.example/class", value: "fast" },
            { name: "region", value: "eu" },
            { name: "", value: "no name" },
            { name: "bad", value: 7 },
          ],
        },
      },
      128,
    )
    assert.deepStrictEqual(props, [
      { name: "region", value: "eu" },
      { name: "storage.example/class", value: "fast" },
    ])
    const map = propertiesOf({ status: { properties: [...props] } })
    const sel = parsed({
      propertySelector: {
        matchExpressions: [{ key: "storage.example/class", operator: "In", values: ["fast"] }],
      },
    }).spec.propertySelector!
    assert.isTrue(selectorMatches(sel, map))
    assert.isFalse(selectorMatches(sel, {}))
    assert.deepStrictEqual(clusterProfileProperties({ status: { properties: "x" } }, 128), [])
  })
  it("a property selector is checked: In needs values, Exists takes none", () => {
    for (const r of [
      { key: "k", operator: "In" },
      { key: "k", operator: "Exists", values: ["x"] },
    ])
      assert.isFalse(parseFleetBackupCheck(fbc({ propertySelector: { matchExpressions: [r] } })).success)
  })
})
