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
})
