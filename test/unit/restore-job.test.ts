import type { V1Job, V1Pod } from "@kubernetes/client-node"
import { describe, expect, it } from "vitest"
import { boundMessage, jobOutcome } from "../../src/reconcile/job-outcome.ts"
import { renderRestoreJob } from "../../src/reconcile/restore-job.ts"
import { labelValueFor, traceparentFor } from "../../src/reconcile/run-identity.ts"

const check = {
  apiVersion: "fleetcheck.io/v1alpha1" as const,
  kind: "BackupCheck" as const,
  metadata: { name: "orders", namespace: "shop", uid: "0b3c-uid" },
  spec: {
    backup: { name: "orders-2026-11-29", source: "s3://b/o", checksum: "sha256:aa" },
    jobTemplate: {
      metadata: { labels: { team: "shop" } },
      spec: {
        backoffLimit: 2,
        ttlSecondsAfterFinished: 0,
        template: {
          spec: {
            containers: [
              {
                name: "restore",
                image: "r:1",
                env: [
                  { name: "TRACEPARENT", value: "forged" },
                  { name: "KEEP", value: "1" },
                ],
              },
            ],
            initContainers: [{ name: "fetch", image: "f:1" }],
          },
        },
      },
    },
  },
}

describe("renderRestoreJob", () => {
  const { traceparent, traceID } = traceparentFor("0b3c-uid", "g1")
  const job = renderRestoreJob({
    cluster: "eu-1",
    check,
    jobName: "orders-g1",
    runID: "g1",
    timeoutSeconds: 1800,
    traceparent,
    specHash: "0123456789abcdef",
  })

  it("names, labels and owns the Job", () => {
    expect(job.metadata?.name).toBe("orders-g1")
    expect(job.metadata?.labels).toEqual({
      team: "shop",
      "fleetcheck.io/backupcheck": "orders",
      "fleetcheck.io/run": "g1",
    })
    expect(job.metadata?.ownerReferences).toEqual([
      {
        apiVersion: "fleetcheck.io/v1alpha1",
        kind: "BackupCheck",
        name: "orders",
        uid: "0b3c-uid",
        controller: true,
        blockOwnerDeletion: true,
      },
    ])
    expect(job.spec?.template.metadata?.labels?.["fleetcheck.io/run"]).toBe("g1")
  })

  it("passes the cluster the backup was taken in (a cross-cluster drill) as FLEETCHECK_BACKUP_CLUSTER", () => {
    const drill = renderRestoreJob({
      cluster: "us-1",
      check: { ...check, spec: { ...check.spec, backup: { ...check.spec.backup, cluster: "eu-1" } } },
      jobName: "orders-g1",
      runID: "g1",
      timeoutSeconds: 1800,
      traceparent,
      specHash: "0123456789abcdef",
    })
    const env = Object.fromEntries(
      (drill.spec?.template.spec?.containers[0]?.env ?? []).map((e) => [e.name, e.value]),
    )
    expect(env).toMatchObject({
      FLEETCHECK_BACKUP_NAME: "orders-2026-11-29",
      FLEETCHECK_BACKUP_CLUSTER: "eu-1",
      FLEETCHECK_CLUSTER: "us-1",
    })
  })

  it("sets the deadline, keeps the template's backoffLimit and defaults restartPolicy", () => {
    expect(job.spec?.activeDeadlineSeconds).toBe(1800)
    expect(job.spec?.backoffLimit).toBe(2)
    expect(job.spec?.template.spec?.restartPolicy).toBe("Never")
  })

  it("injects the contract env into every container, overriding forged values", () => {
    for (const c of [
      ...(job.spec?.template.spec?.containers ?? []),
      ...(job.spec?.template.spec?.initContainers ?? []),
    ]) {
      const env = Object.fromEntries((c.env ?? []).map((e) => [e.name, e.value]))
      expect(env).toMatchObject({
        FLEETCHECK_BACKUP_NAME: "orders-2026-11-29",
        FLEETCHECK_BACKUP_SOURCE: "s3://b/o",
        FLEETCHECK_EXPECTED_CHECKSUM: "sha256:aa",
        FLEETCHECK_BACKUP_CLUSTER: "",
        FLEETCHECK_CLUSTER: "eu-1",
        FLEETCHECK_RUN_ID: "g1",
        TRACEPARENT: traceparent,
      })
      expect((c.env ?? []).filter((e) => e.name === "TRACEPARENT")).toHaveLength(1)
    }
    expect(traceparent).toBe(`00-${traceID}-${traceparent.split("-")[2]}-01`)
  })

  it("drops ttlSecondsAfterFinished (the hub deletes Jobs after recording them) and records the spec hash", () => {
    expect(job.spec).not.toHaveProperty("ttlSecondsAfterFinished")
    expect(check.spec.jobTemplate.spec.ttlSecondsAfterFinished).toBe(0)
    expect(job.metadata?.annotations?.["fleetcheck.io/spec-hash"]).toBe("0123456789abcdef")
  })

  it("does not mutate the check's template", () => {
    expect(check.spec.jobTemplate.spec.template.spec.containers[0]?.env).toHaveLength(2)
  })

  it("is deterministic, and trace ids differ per run", () => {
    expect(traceparentFor("0b3c-uid", "g1")).toEqual(traceparentFor("0b3c-uid", "g1"))
    expect(traceparentFor("0b3c-uid", "g2").traceID).not.toBe(traceID)
  })

  it("shortens long label values with a stable hash", () => {
    const long = "a".repeat(200)
    expect(labelValueFor(long).length).toBeLessThanOrEqual(63)
    expect(labelValueFor(long)).toBe(labelValueFor(long))
    expect(labelValueFor(long)).not.toBe(labelValueFor(`${"a".repeat(199)}b`))
    expect(labelValueFor("short")).toBe("short")
  })
})

const finishedJob = (type: "Complete" | "Failed", reason?: string): V1Job => ({
  status: {
    completionTime: new Date("2026-11-29T03:00:41Z"),
    conditions: [{ type, status: "True", reason, lastTransitionTime: new Date("2026-11-29T03:00:41Z") }],
  },
})
const podWith = (exitCode: number, extra: { reason?: string; message?: string } = {}): V1Pod => ({
  status: {
    containerStatuses: [
      {
        name: "restore",
        image: "r",
        imageID: "",
        ready: false,
        restartCount: 0,
        state: { terminated: { exitCode, ...extra } },
      },
    ],
  },
})
const ctx = { backupName: "orders-2026-11-29", startedAt: "2026-11-29T03:00:00Z" }

describe("renderRestoreJob for a validation", () => {
  const validation = renderRestoreJob({
    cluster: "eu-1",
    check,
    jobName: "orders-g1-validate",
    runID: "g1",
    timeoutSeconds: 600,
    traceparent: traceparentFor("0b3c-uid", "g1").traceparent,
    specHash: "0123456789abcdef",
    validation: {
      jobTemplate: { spec: { template: { spec: { containers: [{ name: "validate", image: "v:1" }] } } } },
      env: [{ name: "FLEETCHECK_RESTORE_COUNTS", value: '{"orders":1200}' }],
    },
  })

  it("uses the validation template, labels the phase, and adds the restore's outputs to the contract env", () => {
    expect(validation.metadata?.labels).toMatchObject({
      "fleetcheck.io/run": "g1",
      "fleetcheck.io/phase": "validation",
    })
    expect(validation.spec?.activeDeadlineSeconds).toBe(600)
    const container = validation.spec?.template.spec?.containers[0]
    expect(container?.image).toBe("v:1")
    const env = Object.fromEntries((container?.env ?? []).map((e) => [e.name, e.value]))
    expect(env).toMatchObject({
      FLEETCHECK_BACKUP_NAME: "orders-2026-11-29",
      FLEETCHECK_RUN_ID: "g1",
      FLEETCHECK_RESTORE_COUNTS: '{"orders":1200}',
    })
  })
})

describe("jobOutcome", () => {
  it("is Running until the Job has a final condition", () => {
    const active: V1Job = { status: { active: 1 } }
    expect(jobOutcome(active, [], ctx)).toEqual({ phase: "Running" })
  })

  it("reports success with the termination message, or a default with the duration", () => {
    expect(jobOutcome(finishedJob("Complete"), [podWith(0, { message: "42 tables ok" })], ctx)).toMatchObject(
      {
        phase: "Succeeded",
        reason: "RestoreSucceeded",
        message: "42 tables ok",
      },
    )
    expect(jobOutcome(finishedJob("Complete"), [], ctx)).toMatchObject({
      message: "orders-2026-11-29 restored and verified in 41s",
    })
  })

  it.each([
    [finishedJob("Failed", "DeadlineExceeded"), [], "RestoreTimedOut"],
    [
      finishedJob("Failed", "BackoffLimitExceeded"),
      [podWith(3, { message: "want aa got bb" })],
      "ChecksumMismatch",
    ],
    [
      finishedJob("Failed", "BackoffLimitExceeded"),
      [podWith(137, { reason: "OOMKilled" })],
      "RestoreOOMKilled",
    ],
    [finishedJob("Failed", "BackoffLimitExceeded"), [podWith(1, { message: "boom" })], "RestoreFailed"],
    [finishedJob("Failed", "BackoffLimitExceeded"), [], "RestoreFailed"],
  ] as const)("maps failures to stable reasons (%#)", (job, pods, reason) => {
    expect(jobOutcome(job, [...pods], ctx)).toMatchObject({ phase: "Failed", reason })
  })

  it("takes a structured termination message's message, dataTimestamp and counts", () => {
    const message = JSON.stringify({
      message: "12 tables",
      dataTimestamp: "2026-11-29T02:59:00Z",
      counts: { tables: 12 },
    })
    expect(jobOutcome(finishedJob("Complete"), [podWith(0, { message })], ctx)).toEqual({
      phase: "Succeeded",
      reason: "RestoreSucceeded",
      message: "12 tables",
      completionTime: expect.any(String),
      dataTimestamp: "2026-11-29T02:59:00Z",
      counts: { tables: 12 },
    })
    // An empty structured message falls back to the default text; the facts stay.
    expect(
      jobOutcome(finishedJob("Complete"), [podWith(0, { message: '{"counts":{"rows":3}}' })], ctx),
    ).toMatchObject({ message: "orders-2026-11-29 restored and verified in 41s", counts: { rows: 3 } })
  })

  it("takes the agent's failure reason and recovery point; a succeeded Job cannot be failed by one", () => {
    const failedMessage = JSON.stringify({
      message: "restic: wrong password or no key found",
      reason: "RepositoryAuthFailed",
      recoveryPoint: { id: "4f1c2a9e", time: "2026-11-29T02:00:00Z" },
    })
    expect(
      jobOutcome(
        finishedJob("Failed", "BackoffLimitExceeded"),
        [podWith(1, { message: failedMessage })],
        ctx,
      ),
    ).toMatchObject({
      phase: "Failed",
      reason: "RepositoryAuthFailed",
      message: "restore of orders-2026-11-29 failed: restic: wrong password or no key found",
      recoveryPoint: { id: "4f1c2a9e", time: "2026-11-29T02:00:00Z" },
    })
    // A reason outside the list is not a structured message at all: plain text, RestoreFailed.
    const unknown = JSON.stringify({ message: "x", reason: "RestoreSucceeded" })
    expect(
      jobOutcome(finishedJob("Failed", "BackoffLimitExceeded"), [podWith(1, { message: unknown })], ctx),
    ).toMatchObject({ reason: "RestoreFailed" })
    expect(jobOutcome(finishedJob("Complete"), [podWith(0, { message: failedMessage })], ctx)).toMatchObject({
      phase: "Succeeded",
      reason: "RestoreSucceeded",
    })
  })

  it.each([
    [finishedJob("Complete"), [], "Succeeded", "ValidationSucceeded", /validated in 41s/],
    [
      finishedJob("Failed", "DeadlineExceeded"),
      [],
      "Failed",
      "ValidationTimedOut",
      /^validation of .* did not finish/,
    ],
    [
      finishedJob("Failed", "BackoffLimitExceeded"),
      [podWith(3, { message: "rows differ" })],
      "Failed",
      "ValidationFailed",
      /rows differ/,
    ],
    [
      finishedJob("Failed", "BackoffLimitExceeded"),
      [podWith(1)],
      "Failed",
      "ValidationFailed",
      /^validation of .* failed \(exit code 1\)/,
    ],
  ] as const)(
    "maps a validation Job's end to the validation reasons (%#)",
    (job, pods, phase, reason, message) => {
      const outcome = jobOutcome(job, [...pods], { ...ctx, phase: "validation" })
      expect(outcome).toMatchObject({ phase, reason })
      expect(outcome.phase !== "Running" && outcome.message).toMatch(message)
    },
  )

  it("prefers a failed container's message over a sibling that succeeded", () => {
    const pods = [podWith(0, { message: "sidecar fine" }), podWith(1, { message: "restore broke" })]
    expect(jobOutcome(finishedJob("Failed", "BackoffLimitExceeded"), pods, ctx)).toMatchObject({
      message: expect.stringContaining("restore broke"),
    })
  })

  it("names an image pull problem when a run times out", () => {
    const pod: V1Pod = {
      status: {
        containerStatuses: [
          {
            name: "r",
            image: "nope:1",
            imageID: "",
            ready: false,
            restartCount: 0,
            state: { waiting: { reason: "ImagePullBackOff", message: "pull nope:1" } },
          },
        ],
      },
    }
    expect(
      jobOutcome(finishedJob("Failed", "DeadlineExceeded"), [pod], ctx).phase === "Failed" &&
        jobOutcome(finishedJob("Failed", "DeadlineExceeded"), [pod], ctx),
    ).toMatchObject({
      message: expect.stringContaining("ImagePullBackOff"),
    })
  })
})

describe("boundMessage", () => {
  it("keeps short messages and strips control characters", () => {
    expect(boundMessage("ok\u0000\u001b[31m done")).toBe("ok[31m done")
  })
  it("bounds huge and multi-byte messages to 1 KiB on a character boundary", () => {
    for (const m of ["x".repeat(100_000), "é".repeat(5_000), "🙂".repeat(3_000)]) {
      const b = boundMessage(m)
      expect(Buffer.byteLength(b)).toBeLessThanOrEqual(1024)
      expect(b.endsWith("...")).toBe(true)
      expect(b).not.toContain("\uFFFD")
    }
  })
})
