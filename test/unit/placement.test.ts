// FleetBackupCheck's pure parts: the label selector (metav1 semantics and the hub's syntax checks), the
// API schema (the template is the BackupCheck spec itself), the placed check and its ownership, and how
// per-cluster outcomes add up to Placed and FleetVerified (never True with an unknown or failing member).
import { assert, describe, it } from "@effect/vitest"
import { parseFleetBackupCheck, placementLabelError } from "../../src/api/fleetbackupcheck.ts"
import { describeSelector, LabelSelectorSchema, selectorMatches } from "../../src/api/label-selector.ts"
import { mirroredView, noPlacementHolder } from "../../src/hub/placement/mirror.ts"
import {
  countsOf,
  fleetConditions,
  isCurrent,
  isPlacedBy,
  placedCheckOf,
  placedEntry,
  placedObject,
  unverifiedEntry,
} from "../../src/hub/placement/plan.ts"

const selector = (s: unknown) => {
  const parsed = LabelSelectorSchema.safeParse(s)
  if (!parsed.success) throw new Error(parsed.error.message)
  return parsed.data
}

const fbc = (spec: Record<string, unknown> = {}, template: Record<string, unknown> = {}) => ({
  apiVersion: "fleetcheck.io/v1alpha1",
  kind: "FleetBackupCheck",
  metadata: { name: "orders", namespace: "fleetcheck-system", uid: "u1", generation: 1 },
  spec: {
    clusterSelector: { matchLabels: { env: "prod" } },
    template: {
      metadata: { namespace: "shop", labels: { team: "orders" } },
      spec: {
        backup: { name: "orders-db" },
        jobTemplate: { spec: { template: { spec: { containers: [{ name: "r", image: "r:1" }] } } } },
        ...template,
      },
    },
    ...spec,
  },
})

const parsed = (obj: unknown) => {
  const r = parseFleetBackupCheck(obj)
  if (!r.success) throw new Error(r.error)
  return r.data
}

describe("label selectors", () => {
  it("matches as apimachinery does: matchLabels and every expression; {} matches everything", () => {
    const labels = { env: "prod", region: "eu" }
    assert.isTrue(selectorMatches(selector({}), labels))
    assert.isTrue(selectorMatches(selector({ matchLabels: { env: "prod" } }), labels))
    assert.isFalse(selectorMatches(selector({ matchLabels: { env: "prod", tier: "1" } }), labels))
    const expr = (operator: string, values?: string[]) =>
      selector({ matchExpressions: [{ key: "region", operator, ...(values ? { values } : {}) }] })
    assert.isTrue(selectorMatches(expr("In", ["eu", "us"]), labels))
    assert.isFalse(selectorMatches(expr("In", ["us"]), labels))
    assert.isTrue(selectorMatches(expr("NotIn", ["us"]), labels))
    assert.isTrue(selectorMatches(expr("NotIn", ["us"]), { env: "prod" }), "NotIn matches a missing key")
    assert.isTrue(selectorMatches(expr("Exists"), labels))
    assert.isFalse(selectorMatches(expr("DoesNotExist"), labels))
    assert.strictEqual(
      describeSelector(
        selector({ matchLabels: { env: "prod" }, matchExpressions: [{ key: "x", operator: "Exists" }] }),
      ),
      "env=prod,x",
    )
    assert.strictEqual(describeSelector(selector({})), "<everything>")
  })

  it("refuses what the API server lets through (map keys, label grammar) and operator/value mismatches", () => {
    const bad = LabelSelectorSchema.safeParse({
      matchLabels: { "not a key!": "x" },
      matchExpressions: [{ key: "env", operator: "Exists", values: ["prod"] }],
    })
    assert.isFalse(bad.success)
    const messages = bad.success ? [] : bad.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`)
    assert.match(messages.join("\n"), /matchLabels\.not a key!: label key "not a key!"/)
    assert.match(messages.join("\n"), /matchExpressions\.0\.values: Exists takes no values/)
  })
})

describe("FleetBackupCheck schema", () => {
  it("the template's spec is the BackupCheck spec: its defaults and its hub-side rules apply", () => {
    const ok = parsed(fbc())
    assert.strictEqual(ok.spec.template.spec.timeout, "1h")
    assert.strictEqual(ok.spec.template.spec.concurrencyPolicy, "Forbid")
    const bad = parseFleetBackupCheck(fbc({}, { timeZone: "Europe/Berlin" }))
    assert.isFalse(bad.success)
    assert.match(bad.success ? "" : bad.error, /spec\.template\.spec\.timeZone: timeZone requires schedule/)
    const label = parseFleetBackupCheck(
      fbc({
        template: {
          metadata: { namespace: "shop", labels: { "fleetcheck.io/fleetbackupcheck": "x" } },
          spec: ok.spec.template.spec,
        },
      }),
    )
    assert.isFalse(label.success)
    assert.match(label.success ? "" : label.error, /is set by the hub/)
  })

  it("namespace.name must fit a label value", () => {
    assert.isUndefined(placementLabelError("fleetcheck-system", "orders"))
    assert.match(placementLabelError("fleetcheck-system", "x".repeat(60)) ?? "", /at most 63 characters/)
  })
})

describe("the placed check", () => {
  it("carries the template, the hub's label and the template hash; ownership needs both", () => {
    const want = placedCheckOf(parsed(fbc()))
    assert.strictEqual(want.name, "orders")
    assert.strictEqual(want.namespace, "shop")
    assert.deepStrictEqual(want.labels, {
      team: "orders",
      "fleetcheck.io/fleetbackupcheck": "fleetcheck-system.orders",
    })
    const obj = { ...placedObject(want), metadata: { ...placedObject(want).metadata, uid: "c1" } }
    assert.isTrue(isPlacedBy(obj as never, "fleetcheck-system.orders"))
    assert.isTrue(isCurrent(obj as never, want))
    assert.isFalse(isPlacedBy(obj as never, "fleetcheck-system.other"))
    const handWritten = { ...obj, metadata: { ...obj.metadata, annotations: {} } }
    assert.isFalse(
      isPlacedBy(handWritten as never, "fleetcheck-system.orders"),
      "a copied label alone is not ours",
    )
    // A hand edit of the spec in the member is drift: not current, so the hub writes the template again.
    const edited = { ...obj, spec: { ...obj.spec, backup: { name: "edited" } } }
    assert.isFalse(isCurrent(edited as never, want))
    // A template change changes the hash.
    const changed = placedCheckOf(parsed(fbc({}, { backup: { name: "orders-db-2" } })))
    assert.notStrictEqual(changed.hash, want.hash)
    assert.isFalse(isCurrent(obj as never, changed))
  })
})

describe("Placed and FleetVerified", () => {
  const placed = (name: string, verified: "True" | "False" | "Unknown", reason = "RestoreSucceeded") => ({
    name,
    placement: "Placed" as const,
    verified,
    reason,
  })
  const conds = (
    entries: Parameters<typeof fleetConditions>[0],
    options: Parameters<typeof fleetConditions>[2] = {},
  ) => Object.fromEntries(fleetConditions(entries, 4, options).map((c) => [c.type, c]))

  it("True only when every selected cluster verified; the generation is observed", () => {
    const c = conds([placed("m1", "True"), placed("m2", "True")])
    assert.include(c.Placed, { status: "True", reason: "Placed", observedGeneration: 4 })
    assert.include(c.FleetVerified, { status: "True", reason: "AllVerified", observedGeneration: 4 })
  })

  it("an unreachable member makes it Unknown, never True; a failing one False naming it (issue beats unknown)", () => {
    const down = unverifiedEntry("m2", "Pending", "ClusterUnreachable", "cluster m2 is unreachable")
    const c = conds([placed("m1", "True"), down])
    assert.include(c.FleetVerified, { status: "Unknown", reason: "ClusterUnreachable" })
    assert.include(c.Placed, { status: "Unknown", reason: "PlacementPending" })
    assert.match(c.FleetVerified!.message, /m2 \(ClusterUnreachable/)
    const both = conds([placed("m1", "False", "RestoreFailed"), down])
    assert.include(both.FleetVerified, { status: "False", reason: "ChecksFailing" })
    assert.match(both.FleetVerified!.message, /m1 \(RestoreFailed/)
    // A placed check not verified for its current generation is Unknown in its view, so here too.
    assert.include(conds([placed("m1", "Unknown", "GenerationNotVerified")]).FleetVerified, {
      status: "Unknown",
      reason: "VerificationPending",
    })
  })

  it("every cluster verified but one missed an objective: False ObjectivesMissed naming it; failing and unknown beat it", () => {
    const missed = { ...placed("m2", "True"), objectivesMissed: ["dataAge" as const] }
    const c = conds([placed("m1", "True"), missed])
    assert.include(c.FleetVerified, { status: "False", reason: "ObjectivesMissed" })
    assert.match(c.FleetVerified!.message, /objectives missed in m2 \(data age, maxDataAge\)/)
    assert.include(conds([placed("m1", "False", "RestoreFailed"), missed]).FleetVerified, {
      reason: "ChecksFailing",
    })
    assert.include(conds([placed("m1", "Unknown", "GenerationNotVerified"), missed]).FleetVerified, {
      status: "Unknown",
    })
    // From the placed check's view: the objectives it missed.
    const view = {
      cluster: "m2",
      namespace: "shop",
      name: "orders",
      status: "True" as const,
      reason: "RestoreSucceeded",
      message: "ok",
      objectives: { restoreTime: "True" as const, dataAge: "False" as const },
    }
    const check = { metadata: { name: "orders", namespace: "shop" }, spec: {} } as never
    assert.deepStrictEqual(placedEntry("m2", view, check).objectivesMissed, ["dataAge"])
    assert.notProperty(placedEntry("m2", { ...view, objectives: undefined }, check), "objectivesMissed")
  })

  it("a conflict or refusal is False; nothing selected is False; a removing cluster does not count", () => {
    const conflict = unverifiedEntry("m1", "Conflict", "NameConflict", "written by hand", "False")
    const c = conds([conflict, placed("m3", "True")])
    assert.include(c.Placed, { status: "False", reason: "PlacementFailed" })
    assert.include(c.FleetVerified, { status: "False", reason: "PlacementFailed" })
    const removing = unverifiedEntry("m9", "Removing", "Removing", "deleting")
    assert.include(conds([removing], { selector: "env=x" }).FleetVerified, {
      status: "False",
      reason: "NoClustersSelected",
    })
    assert.deepStrictEqual(countsOf([placed("m1", "True"), conflict, removing]), {
      selected: 2,
      placed: 1,
      verified: 1,
      failed: 1,
      unknown: 0,
    })
    assert.include(conds([removing], { deleting: true }).FleetVerified, {
      status: "Unknown",
      reason: "Deleting",
    })
  })
})

describe("a sharded replica that does not place shows the holder's status (ADR 0011 decision 8)", () => {
  const written = {
    ...fbc(),
    status: {
      observedGeneration: 1,
      conditions: [
        { type: "Placed", status: "True", reason: "Placed", message: "2 of 2", lastTransitionTime: "t" },
        {
          type: "FleetVerified",
          status: "True",
          reason: "AllVerified",
          message: "",
          lastTransitionTime: "t",
        },
      ],
      // As read back from the API server: keys sorted.
      counts: { failed: 0, placed: 2, selected: 2, unknown: 0, verified: 2 },
      clusters: [
        { name: "m1", placement: "Placed", verified: "True", reason: "Verified" },
        { name: "m2", placement: "Placed", verified: "True", reason: "Verified" },
      ],
    },
  }

  it("with a live holder: the status as written, counts in the view's own order", () => {
    const view = mirroredView(written as never, "hub-a")
    assert.deepStrictEqual(view.verified, { status: "True", reason: "AllVerified", message: "" })
    assert.strictEqual(
      JSON.stringify(view.counts),
      JSON.stringify({ selected: 2, placed: 2, verified: 2, failed: 0, unknown: 0 }),
    )
    assert.strictEqual(view.selector, "env=prod")
    assert.deepStrictEqual(view.check, { namespace: "shop", name: "orders" })
    assert.deepStrictEqual(
      view.clusters.map((c) => c.status),
      ["True", "True"],
    )
  })

  it("with no live holder: nothing green, every verdict Unknown/NoPlacementHolder", () => {
    const view = mirroredView(written as never, undefined)
    assert.strictEqual(view.verified.status, "Unknown")
    assert.strictEqual(view.verified.reason, noPlacementHolder.reason)
    assert.deepStrictEqual(view.counts, { selected: 2, placed: 2, verified: 0, failed: 0, unknown: 2 })
    for (const c of view.clusters) {
      assert.strictEqual(c.status, "Unknown")
      assert.strictEqual(c.reason, noPlacementHolder.reason)
    }
  })

  it("an invalid spec shows no selector or check, as the placement controller shows it", () => {
    const bad = { ...written, metadata: { ...written.metadata, name: "x".repeat(70) } }
    const view = mirroredView(bad as never, "hub-a")
    assert.strictEqual(view.selector, "")
    assert.isUndefined(view.check)
  })
})
