import { readFileSync } from "node:fs"
import { assert, describe, it } from "@effect/vitest"
import { parse } from "yaml"
import { parseBackupCheck } from "../../src/api/backupcheck.ts"
import { parseFleetBackupCheck } from "../../src/api/fleetbackupcheck.ts"
import { VeleroRestoreSchema } from "../../src/api/restore.ts"
import { boundMessage } from "../../src/reconcile/job-outcome.ts"
import { sandboxNamespaceFor } from "../../src/reconcile/sandbox.ts"
import {
  annotationRecoveryPointTime,
  chooseBackup,
  isOurRestore,
  maxListItems,
  parseList,
  readiness,
  recoveryPointOf,
  restoreBody,
  restorePhaseOutcome,
  type VeleroBackup,
  VeleroBackupSchema,
  type VeleroRestoreObject,
  VeleroRestoreObjectSchema,
  type Workload,
} from "../../src/reconcile/velero-restore.ts"

const backup = (
  name: string,
  phase: string | undefined,
  start: string,
  extra: { schedule?: string; namespaces?: string[] } = {},
): VeleroBackup => ({
  metadata: {
    name,
    ...(extra.schedule ? { labels: { "velero.io/schedule-name": extra.schedule } } : {}),
  },
  spec: { includedNamespaces: extra.namespaces ?? ["orders"] },
  status: { ...(phase ? { phase } : {}), startTimestamp: start },
})

const v = VeleroRestoreSchema.parse({ scheduleName: "orders-nightly" })
const latest = { policy: "Latest" } as const
const now = new Date("2026-12-07T06:00:00Z")

describe("chooseBackup", () => {
  const schedule = [
    backup("n-1", "Completed", "2026-12-05T02:00:00Z", { schedule: "orders-nightly" }),
    backup("n-2", "Completed", "2026-12-06T02:00:00Z", { schedule: "orders-nightly" }),
    backup("n-3", "PartiallyFailed", "2026-12-07T02:00:00Z", { schedule: "orders-nightly" }),
    backup("other", "Completed", "2026-12-07T03:00:00Z", { schedule: "other" }),
  ]

  it("takes the newest Completed Backup of the schedule, never a failed newer one or another schedule's", () => {
    const c = chooseBackup(schedule, v, latest, "g1", now)
    assert.strictEqual(c.kind, "chosen")
    if (c.kind === "chosen") {
      assert.strictEqual(c.backup.metadata.name, "n-2")
      assert.deepStrictEqual(c.namespaces, ["orders"])
    }
  })

  it("Random picks among the schedule's Completed Backups within the window, the same for a run", () => {
    const random = { policy: "Random", window: "72h" } as const
    const picks = new Set<string>()
    for (let i = 0; i < 40; i++) {
      const c = chooseBackup(schedule, v, random, `s${i}`, now)
      assert.strictEqual(c.kind, "chosen")
      if (c.kind === "chosen") picks.add(c.backup.metadata.name)
    }
    assert.deepStrictEqual([...picks].sort(), ["n-1", "n-2"])
    const a = chooseBackup(schedule, v, random, "s7", now)
    const b = chooseBackup(schedule, v, random, "s7", now)
    assert.deepStrictEqual(a, b)
    const none = chooseBackup(schedule, v, { policy: "Random", window: "1h" }, "s1", now)
    assert.strictEqual(none.kind === "refused" && none.reason, "RecoveryPointNotFound")
  })

  it("a schedule without Completed Backups is RecoveryPointNotFound, naming what it has", () => {
    const c = chooseBackup([schedule[2]!], v, latest, "g1", now)
    assert.strictEqual(c.kind, "refused")
    if (c.kind === "refused") {
      assert.strictEqual(c.reason, "RecoveryPointNotFound")
      assert.include(c.message, "orders-nightly")
      assert.include(c.message, "1 PartiallyFailed")
    }
    const empty = chooseBackup([], v, latest, "g1", now)
    assert.strictEqual(empty.kind === "refused" && empty.reason, "RecoveryPointNotFound")
  })

  it("a named Backup must exist and be Completed (BackupNotRestorable names its phase)", () => {
    const named = VeleroRestoreSchema.parse({ backupName: "manual-1" })
    for (const [phase, word] of [
      ["InProgress", "InProgress"],
      ["Failed", "Failed"],
      [undefined, "New"],
    ] as const) {
      const c = chooseBackup([backup("manual-1", phase, "2026-12-06T00:00:00Z")], named, latest, "g1", now)
      assert.strictEqual(c.kind, "refused")
      if (c.kind === "refused") {
        assert.strictEqual(c.reason, "BackupNotRestorable")
        assert.include(c.message, `is ${word}, not Completed`)
      }
    }
    const missing = chooseBackup([], named, latest, "g1", now)
    assert.strictEqual(missing.kind === "refused" && missing.reason, "RecoveryPointNotFound")
    const ok = chooseBackup(
      [backup("manual-1", "Completed", "2026-12-06T00:00:00Z")],
      named,
      latest,
      "g1",
      now,
    )
    assert.strictEqual(ok.kind === "chosen" && ok.backup.metadata.name, "manual-1")
  })

  it("a Backup of every namespace needs includedNamespaces; includedNamespaces narrows the restore", () => {
    const all = [
      backup("n-9", "Completed", "2026-12-06T00:00:00Z", { schedule: "orders-nightly", namespaces: ["*"] }),
    ]
    const refused = chooseBackup(all, v, latest, "g1", now)
    assert.strictEqual(refused.kind === "refused" && refused.reason, "BackupNotRestorable")
    const narrowed = chooseBackup(
      all,
      { ...v, includedNamespaces: ["shop", "orders", "shop"] },
      latest,
      "g1",
      now,
    )
    assert.deepStrictEqual(narrowed.kind === "chosen" && narrowed.namespaces, ["orders", "shop"])
  })
})

describe("restoreBody", () => {
  it("maps every restored namespace into the sandbox, restores no cluster-scoped object, labels the run", () => {
    const check = { name: "orders", namespace: "apps", uid: "u-1" }
    const sandbox = sandboxNamespaceFor(check, "g3")
    const body = restoreBody({
      check,
      runID: "g3",
      velero: { namespace: "velero", restorePVs: true },
      backup: backup("n-2", "Completed", "2026-12-06T02:00:00Z"),
      namespaces: ["orders", "shop"],
      sandboxNamespace: sandbox,
      specHash: "0123456789abcdef",
      specHashAnnotation: "fleetcheck.io/spec-hash",
    })
    assert.strictEqual(body.metadata.name, "orders-g3")
    assert.strictEqual(body.metadata.namespace, "velero")
    assert.strictEqual(body.metadata.labels["fleetcheck.io/run"], "g3")
    assert.strictEqual(body.metadata.labels["fleetcheck.io/backupcheck-uid"], "u-1")
    assert.strictEqual(body.metadata.annotations["fleetcheck.io/backupcheck"], "apps/orders")
    assert.strictEqual(body.metadata.annotations[annotationRecoveryPointTime], "2026-12-06T02:00:00Z")
    assert.deepStrictEqual(body.spec, {
      backupName: "n-2",
      includedNamespaces: ["orders", "shop"],
      namespaceMapping: { orders: sandbox, shop: sandbox },
      restorePVs: true,
      includeClusterResources: false,
      existingResourcePolicy: "none",
    })
    const parsed = VeleroRestoreObjectSchema.parse(body)
    assert.isTrue(isOurRestore(parsed, "u-1", "g3"))
    assert.isFalse(isOurRestore(parsed, "u-2", "g3"))
    assert.isFalse(isOurRestore(parsed, "u-1", "g4"))
    assert.deepStrictEqual(recoveryPointOf(parsed), { id: "n-2", time: "2026-12-06T02:00:00Z" })
  })
})

const restore = (status: NonNullable<VeleroRestoreObject["status"]>): VeleroRestoreObject => ({
  metadata: { name: "orders-g3" },
  spec: { backupName: "n-2" },
  status,
})

describe("restorePhaseOutcome", () => {
  it("Completed succeeds with Velero's item counts and warnings", () => {
    const o = restorePhaseOutcome(
      restore({ phase: "Completed", warnings: 2, progress: { totalItems: 12, itemsRestored: 12 } }),
    )
    assert.strictEqual(o.phase, "Succeeded")
    if (o.phase !== "Running") {
      assert.strictEqual(o.reason, "RestoreSucceeded")
      assert.deepStrictEqual(o.counts, { itemsRestored: 12, totalItems: 12, warnings: 2, errors: 0 })
      assert.include(o.message, "12 of 12 items restored")
      assert.include(o.message, "2 warnings")
    }
  })

  it("PartiallyFailed, Failed and FailedValidation fail with Velero's own words", () => {
    const partial = restorePhaseOutcome(
      restore({ phase: "PartiallyFailed", errors: 1, progress: { totalItems: 5, itemsRestored: 4 } }),
    )
    assert.strictEqual(partial.phase !== "Running" && partial.reason, "RestorePartiallyFailed")
    assert.include(partial.phase !== "Running" ? partial.message : "", "1 errors")
    const failed = restorePhaseOutcome(
      restore({ phase: "Failed", failureReason: "error downloading backup" }),
    )
    assert.strictEqual(failed.phase !== "Running" && failed.reason, "RestoreFailed")
    assert.include(failed.phase !== "Running" ? failed.message : "", "error downloading backup")
    const invalid = restorePhaseOutcome(
      restore({ phase: "FailedValidation", validationErrors: ["backup not found", "BSL unavailable"] }),
    )
    assert.strictEqual(invalid.phase !== "Running" && invalid.reason, "RestoreFailed")
    assert.include(invalid.phase !== "Running" ? invalid.message : "", "backup not found; BSL unavailable")
  })

  it("every other phase is still running, an unknown one included", () => {
    for (const phase of ["", "New", "InProgress", "WaitingForPluginOperations", "Finalizing", "Someday"])
      assert.strictEqual(restorePhaseOutcome(restore({ phase })).phase, "Running")
    assert.strictEqual(restorePhaseOutcome(restore({})).phase, "Running")
  })

  it("messages stay bounded however much Velero says", () => {
    const huge = "x".repeat(60_000)
    const o = restorePhaseOutcome(
      restore({ phase: "FailedValidation", failureReason: huge, validationErrors: Array(500).fill(huge) }),
    )
    assert.isTrue(o.phase !== "Running" && Buffer.byteLength(o.message) <= 1024)
    assert.include(o.phase !== "Running" ? o.message : "", "...")
    assert.strictEqual(boundMessage("a\u0000b"), "ab")
  })
})

describe("member answers are hostile", () => {
  it("a list keeps only the items that fit the schema, at most maxListItems", () => {
    const good = {
      metadata: { name: "b" },
      status: { phase: "Completed", startTimestamp: "2026-12-06T00:00:00Z" },
    }
    const { items, skipped } = parseList(VeleroBackupSchema, {
      items: [
        good,
        { metadata: { name: 7 } },
        { metadata: { name: "x".repeat(300) } },
        { metadata: { name: "t" }, status: { startTimestamp: "yesterday" } },
        null,
        "nope",
      ],
    })
    assert.strictEqual(items.length, 1)
    assert.strictEqual(skipped, 5)
    assert.deepStrictEqual(parseList(VeleroBackupSchema, { items: "all" }), { items: [], skipped: 0 })
    assert.deepStrictEqual(parseList(VeleroBackupSchema, null), { items: [], skipped: 0 })
    const many = parseList(VeleroBackupSchema, { items: Array(maxListItems + 10).fill(good) })
    assert.strictEqual(many.items.length, maxListItems)
    assert.strictEqual(many.skipped, 10)
  })

  it("a Restore with negative or fractional counts is not read", () => {
    for (const status of [{ errors: -1 }, { warnings: 1.5 }, { progress: { itemsRestored: "5" } }])
      assert.isFalse(VeleroRestoreObjectSchema.safeParse({ metadata: { name: "r" }, status }).success)
  })

  it("a recovery-point annotation that is not a time is no recovery point", () => {
    const r = (t: string): VeleroRestoreObject => ({
      metadata: { name: "r", annotations: { [annotationRecoveryPointTime]: t } },
      spec: { backupName: "b" },
    })
    assert.isUndefined(recoveryPointOf(r("soon")))
    assert.deepStrictEqual(recoveryPointOf(r("2026-12-06T02:00:00.000Z")), {
      id: "b",
      time: "2026-12-06T02:00:00Z",
    })
  })
})

describe("readiness", () => {
  const workload = (name: string, replicas: number, available: number, observed = 1): Workload => ({
    metadata: { name, generation: 1 },
    spec: { replicas },
    status: {
      observedGeneration: observed,
      availableReplicas: available,
      updatedReplicas: available,
      readyReplicas: available,
    },
  })

  it("is ready when every Deployment and StatefulSet has all its replicas available", () => {
    const r = readiness([workload("web", 2, 2)], [workload("db", 1, 1)])
    assert.isTrue(r.ready)
    assert.deepStrictEqual(r.counts, { deployments: 1, statefulSets: 1 })
    assert.isTrue(readiness([], []).ready)
  })

  it("waits for a replica that is not up, or a generation its controller has not seen", () => {
    const r = readiness([workload("web", 2, 1), workload("api", 1, 1, 0)], [workload("db", 1, 0)])
    assert.isFalse(r.ready)
    assert.deepStrictEqual(r.waitingFor, [
      "deployment/web (1/2 available)",
      "deployment/api (1/1 available)",
      "statefulset/db (0/1 available)",
    ])
  })
})

describe("spec.restore.velero", () => {
  const base = {
    apiVersion: "fleetcheck.io/v1alpha1",
    kind: "BackupCheck",
    metadata: { name: "orders", namespace: "apps", uid: "u" },
  }
  const spec = (extra: Record<string, unknown>) => ({
    ...base,
    spec: {
      backup: { name: "orders-nightly" },
      restore: { velero: { scheduleName: "orders-nightly" } },
      ...extra,
    },
  })

  it("defaults namespace velero, restorePVs false, waitForReady true; exactly one of backupName and scheduleName", () => {
    assert.deepStrictEqual(VeleroRestoreSchema.parse({ backupName: "b" }), {
      namespace: "velero",
      backupName: "b",
      restorePVs: false,
      waitForReady: true,
    })
    assert.isFalse(VeleroRestoreSchema.safeParse({}).success)
    assert.isFalse(VeleroRestoreSchema.safeParse({ backupName: "b", scheduleName: "s" }).success)
    assert.isFalse(VeleroRestoreSchema.safeParse({ backupName: "B_ad" }).success)
  })

  it("requires spec.sandbox, which the other methods still refuse", () => {
    assert.isFalse(parseBackupCheck(spec({})).success)
    assert.isTrue(parseBackupCheck(spec({ sandbox: {} })).success)
    const restic = {
      ...base,
      spec: {
        backup: { name: "b" },
        restore: { restic: { repository: "/r", credentialsSecretRef: { name: "s" } } },
        sandbox: {},
      },
    }
    assert.isFalse(parseBackupCheck(restic).success)
  })
})

describe("docs/restore-velero.md", () => {
  // The getting-started page (linked from the README): every YAML snippet is a valid velero check, a
  // `restore:` + `sandbox:` fragment or a whole BackupCheck.
  it("every snippet is a valid check with spec.restore.velero", () => {
    const page = readFileSync(new URL("../../docs/restore-velero.md", import.meta.url), "utf8")
    const blocks = [...page.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => parse(m[1]!))
    assert.isAtLeast(blocks.length, 2)
    for (const doc of blocks) {
      const whole = doc.kind === "BackupCheck"
      const check = whole
        ? { ...doc, metadata: { ...doc.metadata, uid: "u-1" } }
        : {
            apiVersion: "fleetcheck.io/v1alpha1",
            kind: "BackupCheck",
            metadata: { name: "orders", namespace: "shop", uid: "u-1" },
            spec: { backup: { name: "orders" }, restore: doc.restore, sandbox: doc.sandbox },
          }
      const parsed = parseBackupCheck(check)
      assert.isTrue(parsed.success, parsed.success ? "" : parsed.error)
      if (parsed.success) assert.deepStrictEqual(Object.keys(parsed.data.spec.restore ?? {}), ["velero"])
    }
  })
})

describe("clusters/samples/velero-hub", () => {
  it("the cross-cluster drill sample is a valid FleetBackupCheck whose template restores with Velero", () => {
    const text = readFileSync(
      new URL("../../clusters/samples/velero-hub/storefront-velero-drill.yaml", import.meta.url),
      "utf8",
    )
    const doc = parse(text)
    const parsed = parseFleetBackupCheck({ ...doc, metadata: { ...doc.metadata, uid: "u-1" } })
    assert.isTrue(parsed.success, parsed.success ? "" : parsed.error)
    if (parsed.success) {
      assert.isDefined(parsed.data.spec.drill)
      assert.strictEqual(parsed.data.spec.template.spec.restore?.velero?.scheduleName, "storefront-nightly")
    }
  })
})
