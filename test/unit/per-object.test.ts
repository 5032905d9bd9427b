// A converged reconcile reads the same cached object again and again: its parse and spec hash are
// computed once per object (src/reconcile/per-object.ts), and a new object (any change) gets its own.
import { describe, expect, it } from "vitest"
import { type BackupCheck, parseBackupCheck } from "../../src/api/backupcheck.ts"
import { derivedCheck } from "../../src/reconcile/per-object.ts"
import { specHashFor } from "../../src/reconcile/run-identity.ts"

const check = (image: string, status?: unknown) =>
  ({
    apiVersion: "fleetcheck.io/v1alpha1",
    kind: "BackupCheck",
    metadata: {
      name: "nightly",
      namespace: "db",
      uid: "u1",
      generation: 1,
      creationTimestamp: "2026-11-29T09:00:00Z",
    },
    spec: {
      backup: { name: "db-backup" },
      jobTemplate: { spec: { template: { spec: { containers: [{ name: "restore", image }] } } } },
    },
    ...(status === undefined ? {} : { status }),
  }) as unknown as BackupCheck

describe("per-object derivations", () => {
  it("once per object: the same object gives the very same derivation, equal to a fresh parse and hash", () => {
    const a = check("restore:1", { observedGeneration: 1 })
    const first = derivedCheck(a)
    expect(derivedCheck(a)).toBe(first)
    const parsed = parseBackupCheck(a)
    if (!first.success || !parsed.success) throw new Error("fixture parses")
    expect(first.spec).toEqual(parsed.data.spec)
    expect(first.specHash).toBe(specHashFor(parsed.data.spec))
    expect(first.statusValid).toBe(true)
    expect(first.createdAt).toBe(Date.parse("2026-11-29T09:00:00Z"))
    const { creationTimestamp: _, ...noTime } = a.metadata
    const without = derivedCheck({ ...a, metadata: noTime } as BackupCheck)
    expect(without.success && Number.isNaN(without.createdAt)).toBe(true)
  })

  it("a changed object (the store replaces it) is derived afresh", () => {
    const a = derivedCheck(check("restore:1"))
    const b = derivedCheck(check("restore:2"))
    expect(b).not.toBe(a)
    if (!a.success || !b.success) throw new Error("fixtures parse")
    expect(b.specHash).not.toBe(a.specHash)
  })

  it("a status that does not parse is reported as dropped; an invalid spec's refusal is kept too", () => {
    const badStatus = derivedCheck(check("restore:1", { observedGeneration: "x" }))
    expect(badStatus).toMatchObject({ success: true, statusValid: false })
    const bad = { ...check("restore:1"), spec: { backup: {} } } as unknown as BackupCheck
    const first = derivedCheck(bad)
    expect(first.success).toBe(false)
    expect(derivedCheck(bad)).toBe(first)
  })

  it("a new version carrying the same spec object reuses its parse and hash, and still checks the rest", () => {
    const a = check("restore:1", { observedGeneration: 1 })
    const first = derivedCheck(a)
    if (!first.success) throw new Error("fixture parses")
    const relabeled = {
      ...a,
      metadata: { ...a.metadata, resourceVersion: "2", labels: { tick: "1" } },
    } as BackupCheck
    const second = derivedCheck(relabeled)
    if (!second.success) throw new Error("a new label parses")
    expect(second.spec).toBe(first.spec)
    expect(second.specHash).toBe(first.specHash)
    expect(second.statusValid).toBe(true)
    // What the whole parse would refuse is refused with its message, known spec or not.
    const badMeta = { ...a, metadata: { ...a.metadata, namespace: "" } } as BackupCheck
    const refused = derivedCheck(badMeta)
    const whole = parseBackupCheck(badMeta)
    expect(refused).toEqual({ success: false, error: whole.success ? "" : whole.error })
    expect(derivedCheck({ ...a, kind: "Other" } as unknown as BackupCheck).success).toBe(false)
    // The status is judged afresh: dropped when invalid, false when absent, as the whole parse says.
    expect(
      derivedCheck({ ...a, status: { observedGeneration: "x" } } as unknown as BackupCheck),
    ).toMatchObject({
      success: true,
      statusValid: false,
    })
    const { status: _s, ...noStatus } = a
    expect(derivedCheck(noStatus as BackupCheck)).toMatchObject({ success: true, statusValid: false })
    expect(derivedCheck({ ...a, status: null } as unknown as BackupCheck)).toMatchObject({
      success: true,
      statusValid: false,
    })
  })

  it("an equal spec in a different object is parsed afresh, and gives the same hash", () => {
    const a = derivedCheck(check("restore:1"))
    const b = derivedCheck(check("restore:1"))
    if (!a.success || !b.success) throw new Error("fixtures parse")
    expect(b.spec).not.toBe(a.spec)
    expect(b.specHash).toBe(a.specHash)
  })
})
