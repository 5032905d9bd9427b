import { readFileSync } from "node:fs"
import type { V1Job } from "@kubernetes/client-node"
import { describe, expect, it } from "vitest"
import { parse } from "yaml"
import { RunInputSchema, terminationMessage } from "../../src/agent/protocol.ts"
import { parseBackupCheck } from "../../src/api/backupcheck.ts"
import { parseTerminationMessage } from "../../src/api/termination-message.ts"
import { annotationRunInput } from "../../src/reconcile/agent-job.ts"
import { renderRestoreJob } from "../../src/reconcile/restore-job.ts"

const restic = {
  repository: "s3:http://127.0.0.1:9000/backups/orders",
  credentialsSecretRef: { name: "orders-restic" },
  verify: { readDataSubset: "5%", minFiles: 10 },
}

const checkWith = (spec: Record<string, unknown>) => ({
  apiVersion: "fleetcheck.io/v1alpha1",
  kind: "BackupCheck",
  metadata: { name: "orders", namespace: "shop", uid: "u-1" },
  spec: { backup: { name: "orders-restic" }, ...spec },
})

describe("spec.restore", () => {
  // Each method's getting-started page (docs/restore-<method>.md, linked from the README): every YAML
  // snippet in it is a valid check, a `restore:` fragment or a whole BackupCheck, for that method only.
  it.each(["restic", "postgres", "etcd"])(
    "every snippet on docs/restore-%s.md is a valid check",
    (method) => {
      const page = readFileSync(new URL(`../../docs/restore-${method}.md`, import.meta.url), "utf8")
      const blocks = [...page.matchAll(/```yaml\n([\s\S]*?)```/g)].map((m) => parse(m[1]!))
      expect(blocks.length).toBeGreaterThanOrEqual(2)
      const kinds = blocks.map((doc) => {
        const whole = doc.kind === "BackupCheck"
        // A whole check as the API server stores it (with a uid); a fragment inside checkWith's check.
        const stored = whole ? { ...doc, metadata: { ...doc.metadata, uid: "u-1" } } : undefined
        const parsed = parseBackupCheck(stored ?? checkWith({ restore: doc.restore }))
        expect(parsed.success, parsed.success ? "" : parsed.error).toBe(true)
        if (parsed.success) expect(Object.keys(parsed.data.spec.restore ?? {})).toEqual([method])
        return whole ? "check" : "restore"
      })
      expect(kinds).toContain("restore")
      expect(kinds).toContain("check")
    },
  )

  it("takes exactly one of jobTemplate and restore", () => {
    const neither = parseBackupCheck(checkWith({}))
    expect(neither.success).toBe(false)
    if (!neither.success) expect(neither.error).toMatch(/exactly one of jobTemplate .* and restore/)
    const both = parseBackupCheck(
      checkWith({
        restore: { restic },
        jobTemplate: { spec: { template: { spec: { containers: [{ name: "r", image: "r:1" }] } } } },
      }),
    )
    expect(both.success).toBe(false)
    const one = parseBackupCheck(checkWith({ restore: { restic } }))
    expect(one.success, one.success ? "" : one.error).toBe(true)
    if (one.success) expect(one.data.spec.restore?.restic?.snapshot).toBe("latest")
  })

  it("takes exactly one method", () => {
    const two = parseBackupCheck(
      checkWith({ restore: { restic, etcd: { snapshot: { url: "/backups/etcd.db" } } } }),
    )
    expect(two.success).toBe(false)
    if (!two.success) expect(two.error).toMatch(/exactly one restore method/)
  })

  it("refuses a sandbox with a built-in method, saying why", () => {
    const sandboxed = parseBackupCheck(checkWith({ restore: { restic }, sandbox: {} }))
    expect(sandboxed.success).toBe(false)
    if (!sandboxed.success)
      expect(sandboxed.error).toMatch(/sandbox is not available with restore.restic, postgres or etcd yet/)
  })

  it("refuses a postgres method with both or neither source", () => {
    const neither = parseBackupCheck(checkWith({ restore: { postgres: {} } }))
    expect(neither.success).toBe(false)
    if (!neither.success) expect(neither.error).toMatch(/exactly one of dump and barmanObjectStore/)
  })
})

describe("the agent's restore Job", () => {
  const parsed = parseBackupCheck(
    checkWith({ restore: { restic }, recoveryPoint: { policy: "Random", window: "720h" } }),
  )
  if (!parsed.success) throw new Error(parsed.error)
  const job: V1Job = renderRestoreJob({
    cluster: "eu-1",
    check: parsed.data,
    agentImage: "fleetcheck:0.1.0",
    jobName: "orders-g1",
    runID: "g1",
    timeoutSeconds: 600,
    traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    specHash: "0123456789abcdef",
  })
  const pod = job.spec?.template
  const container = pod?.spec?.containers[0]

  it("runs the agent from the hub's image with the method as its argument", () => {
    expect(container?.image).toBe("fleetcheck:0.1.0")
    expect(container?.args).toEqual(["agent", "restore", "restic"])
    expect(pod?.metadata?.labels?.["fleetcheck.io/agent"]).toBe("true")
    expect(pod?.spec?.restartPolicy).toBe("Never")
    expect(pod?.spec?.automountServiceAccountToken).toBe(false)
  })

  it("gives it the Secret's keys as env, optional so a missing Secret is the agent's message", () => {
    expect(container?.envFrom).toEqual([{ secretRef: { name: "orders-restic", optional: true } }])
    // the contract env is there as for any restore Job
    const names = container?.env?.map((e) => e.name) ?? []
    expect(names).toEqual(
      expect.arrayContaining([
        "FLEETCHECK_RUN_INPUT",
        "FLEETCHECK_SCRATCH",
        "FLEETCHECK_RUN_ID",
        "TRACEPARENT",
      ]),
    )
    // the root filesystem is read-only: the tools' home and temporary files are in scratch
    const mounts = container?.volumeMounts ?? []
    expect(container?.securityContext?.readOnlyRootFilesystem).toBe(true)
    for (const name of ["HOME", "TMPDIR"]) {
      const value = container?.env?.find((e) => e.name === name)?.value ?? ""
      expect(
        mounts.some((m) => m.name === "scratch" && value.startsWith(`${m.mountPath}/`)),
        name,
      ).toBe(true)
    }
  })

  it("mounts the run's JSON, which the agent's own schema accepts", () => {
    const raw = pod?.metadata?.annotations?.[annotationRunInput]
    expect(raw).toBeDefined()
    const input = RunInputSchema.parse(JSON.parse(raw ?? "{}"))
    expect(input.restore.restic?.repository).toBe(restic.repository)
    expect(input.recoveryPoint).toEqual({ policy: "Random", window: "720h" })
    expect(input.check).toEqual({ namespace: "shop", name: "orders" })
    const volume = pod?.spec?.volumes?.find((v) => v.name === "run")
    expect(volume?.downwardAPI?.items?.[0]?.fieldRef?.fieldPath).toBe(
      `metadata.annotations['${annotationRunInput}']`,
    )
    // no credential is in the run's JSON: only the Secret's name
    expect(raw).not.toMatch(/PASSWORD|SECRET_ACCESS/)
  })
})

describe("the agent's termination message", () => {
  it("is §11 JSON the hub reads back, with its reason and recovery point", () => {
    const text = terminationMessage({
      ok: false,
      reason: "SnapshotNotFound",
      message: "no snapshot 0123abcd in s3:http://127.0.0.1:9000/backups/orders",
      recoveryPoint: { id: "0123abcd", time: "2026-12-01T03:00:00Z" },
    })
    const report = parseTerminationMessage(text)
    expect(report.reason).toBe("SnapshotNotFound")
    expect(report.recoveryPoint).toEqual({ id: "0123abcd", time: "2026-12-01T03:00:00Z" })
    expect(report.message).toMatch(/no snapshot 0123abcd/)
  })

  it("stays within 4 KiB whatever the tool said", () => {
    const text = terminationMessage({
      ok: true,
      report: { message: 'é"'.repeat(5000), counts: { bytes: 1, files: 2 } },
    })
    expect(Buffer.byteLength(text, "utf8")).toBeLessThanOrEqual(4096)
    expect(parseTerminationMessage(text).counts).toEqual({ bytes: 1, files: 2 })
  })
})
