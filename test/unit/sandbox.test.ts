import { assert, describe, it } from "@effect/vitest"
import type { LastRun } from "../../src/api/backupcheck.ts"
import { parseBackupCheck } from "../../src/api/backupcheck.ts"
import { isCidr } from "../../src/api/syntax.ts"
import { renderRestoreJob } from "../../src/reconcile/restore-job.ts"
import {
  cleanupStep,
  limitRangeBody,
  renderSandbox,
  sandboxAnnotations,
  sandboxCheckKey,
  sandboxCheckUid,
  sandboxLabels,
  sandboxNamespaceFor,
  sandboxPodSecurity,
} from "../../src/reconcile/sandbox.ts"

const check = { name: "orders", namespace: "shop", uid: "0b3c-uid" }
const spec = {
  egress: [
    { cidr: "10.96.0.10/32", ports: [{ port: 53, protocol: "UDP" as const }] },
    { cidr: "192.0.2.0/24" },
  ],
  resourceQuota: { hard: { "limits.memory": "4Gi", pods: "4" } },
  limitRange: { default: { memory: "512Mi" } },
  validationWindow: "0s",
}

describe("sandbox objects", () => {
  it("names the namespace per check and run: deterministic, a DNS label of at most 63, hash suffix", () => {
    const name = sandboxNamespaceFor(check, "s20261201t0200z")
    assert.match(name, /^fcsb-orders-s20261201t0200z-[0-9a-f]{10}$/)
    assert.strictEqual(sandboxNamespaceFor(check, "s20261201t0200z"), name)
    assert.notStrictEqual(sandboxNamespaceFor({ ...check, uid: "other" }, "s20261201t0200z"), name)
    assert.notStrictEqual(sandboxNamespaceFor(check, "g2"), name)
    for (const [n, run] of [
      ["x".repeat(253), "g1"],
      ["a.b_c--d", "s20261201t0200z"],
      ["-", "g1"],
      ["Orders.V2", "g12345678901234567890"],
    ] as const) {
      const ns = sandboxNamespaceFor({ name: n, uid: "u" }, run)
      assert.isAtMost(ns.length, 63, ns)
      assert.match(ns, /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, ns)
    }
  })

  it("labels everything to its check and run, denies all but the egress allowlist, sets quota and limits", () => {
    const o = renderSandbox(check, "g1", spec)
    const name = sandboxNamespaceFor(check, "g1")
    assert.deepStrictEqual(o.namespace.metadata?.labels, {
      "pod-security.kubernetes.io/enforce": "baseline",
      "fleetcheck.io/sandbox": "true",
      "fleetcheck.io/backupcheck": "orders",
      "fleetcheck.io/backupcheck-uid": "0b3c-uid",
      "fleetcheck.io/run": "g1",
    })
    assert.strictEqual(sandboxCheckKey(o.namespace), "shop/orders")
    assert.strictEqual(sandboxCheckUid(o.namespace), "0b3c-uid")
    assert.strictEqual(o.networkPolicy.metadata?.namespace, name)
    assert.deepStrictEqual(o.networkPolicy.spec?.podSelector, {})
    assert.deepStrictEqual(o.networkPolicy.spec?.policyTypes, ["Ingress", "Egress"])
    assert.deepStrictEqual(o.networkPolicy.spec?.ingress, [])
    assert.deepStrictEqual(o.networkPolicy.spec?.egress, [
      { to: [{ ipBlock: { cidr: "10.96.0.10/32" } }], ports: [{ port: 53, protocol: "UDP" }] },
      { to: [{ ipBlock: { cidr: "192.0.2.0/24" } }] },
    ])
    assert.deepStrictEqual(o.resourceQuota?.spec?.hard, { "limits.memory": "4Gi", pods: "4" })
    assert.deepStrictEqual((limitRangeBody(o.limitRange!) as any).spec.limits, [
      { type: "Container", default: { memory: "512Mi" } },
    ])
    const bare = renderSandbox(check, "g1", { egress: [], validationWindow: "0s" })
    assert.isUndefined(bare.resourceQuota)
    assert.isUndefined(bare.limitRange)
    assert.deepStrictEqual(bare.networkPolicy.spec?.egress, [])
  })

  it("enforces the check namespace's Pod Security level, never looser than baseline", () => {
    const level = (labels?: Record<string, string>) => sandboxPodSecurity(labels)
    assert.strictEqual(level(undefined), "baseline")
    assert.strictEqual(level({ "pod-security.kubernetes.io/enforce": "privileged" }), "baseline")
    assert.strictEqual(level({ "pod-security.kubernetes.io/enforce": "restricted" }), "restricted")
    assert.strictEqual(level({ "pod-security.kubernetes.io/enforce": "nonsense" }), "baseline")
    const o = renderSandbox(check, "g1", spec, "restricted")
    assert.strictEqual(o.namespace.metadata?.labels?.["pod-security.kubernetes.io/enforce"], "restricted")
  })

  it("a sandbox Job is labelled to its check and has no ownerReference", () => {
    const parsed = parseBackupCheck({
      apiVersion: "fleetcheck.io/v1alpha1",
      kind: "BackupCheck",
      metadata: { ...check },
      spec: {
        backup: { name: "b" },
        jobTemplate: { spec: { template: { spec: { containers: [{ name: "r", image: "r:1" }] } } } },
      },
    })
    assert.isTrue(parsed.success)
    if (!parsed.success) return
    const ns = sandboxNamespaceFor(check, "g1")
    const job = renderRestoreJob({
      cluster: "c",
      check: parsed.data,
      jobName: "orders-g1",
      runID: "g1",
      timeoutSeconds: 60,
      traceparent: "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01",
      specHash: "0123456789abcdef",
      sandbox: { namespace: ns, labels: sandboxLabels(check, "g1"), annotations: sandboxAnnotations(check) },
    })
    assert.strictEqual(job.metadata?.namespace, ns)
    assert.isUndefined(job.metadata?.ownerReferences)
    assert.strictEqual(sandboxCheckUid(job), "0b3c-uid")
    assert.strictEqual(sandboxCheckKey(job), "shop/orders")
  })
})

describe("sandbox cleanup", () => {
  const run = (extra: Partial<LastRun>): LastRun => ({
    jobName: "orders-g1",
    runID: "g1",
    startTime: "2026-12-01T02:00:00Z",
    result: "Succeeded",
    completionTime: "2026-12-01T02:10:00Z",
    ...extra,
  })
  const sandbox = { namespace: "fcsb-x", cleanup: "Pending" as const }
  const live = { metadata: { name: "fcsb-x" } }
  const end = Date.parse("2026-12-01T02:10:00Z")

  it("keeps a running run's sandbox", () => {
    const step = cleanupStep(run({ result: "Running", completionTime: undefined }), sandbox, live, 0, end)
    assert.deepStrictEqual(step, { action: "none", status: { namespace: "fcsb-x", cleanup: "Pending" } })
  })

  it("keeps it for the validation window after the verdict, then deletes it", () => {
    const before = cleanupStep(run({}), sandbox, live, 3_600_000, end + 1000)
    assert.strictEqual(before.action, "none")
    assert.strictEqual(before.status.cleanup, "Pending")
    assert.strictEqual(before.status.deleteAfter, "2026-12-01T03:10:00Z")
    assert.strictEqual(before.action === "none" ? before.wakeAt : 0, end + 3_600_000)
    const after = cleanupStep(run({}), sandbox, live, 3_600_000, end + 3_600_000)
    assert.strictEqual(after.action, "delete")
    assert.strictEqual(after.status.cleanup, "Deleting")
  })

  it("says Deleting while the API removes it and Deleted once it is gone", () => {
    const terminating = { metadata: { name: "fcsb-x", deletionTimestamp: new Date(end) } }
    assert.strictEqual(cleanupStep(run({}), sandbox, terminating, 0, end).status.cleanup, "Deleting")
    assert.strictEqual(cleanupStep(run({}), sandbox, undefined, 0, end).status.cleanup, "Deleted")
  })
})

describe("egress CIDRs", () => {
  it("accepts IPv4 and IPv6 CIDRs and refuses garbage", () => {
    for (const ok of ["10.0.0.0/8", "192.0.2.10/32", "0.0.0.0/0", "fd00::/8", "2001:db8::1/128", "::/0"])
      assert.isTrue(isCidr(ok), ok)
    for (const bad of [
      "10.0.0.0",
      "10.0.0.256/8",
      "10.0.0.0/33",
      "010.0.0.0/8",
      "garbage",
      "fd00::/129",
      "::/x",
      "fe80::1%eth0/64",
      "10.0.0.0/8; rm",
      "",
    ])
      assert.isFalse(isCidr(bad), bad)
  })

  it("the spec refuses CIDR garbage and a window longer than 168h", () => {
    const base = {
      apiVersion: "fleetcheck.io/v1alpha1",
      kind: "BackupCheck",
      metadata: { ...check },
      spec: {
        backup: { name: "b" },
        jobTemplate: { spec: { template: { spec: { containers: [{ name: "r", image: "r:1" }] } } } },
      },
    }
    const withSandbox = (sandbox: unknown) => parseBackupCheck({ ...base, spec: { ...base.spec, sandbox } })
    const bad = withSandbox({ egress: [{ cidr: "10.0.0.0/33" }] })
    assert.isFalse(bad.success)
    if (!bad.success)
      assert.match(bad.error, /spec\.sandbox\.egress\[0\]\.cidr: must be an IPv4 or IPv6 CIDR/)
    const window = withSandbox({ validationWindow: "169h" })
    assert.isFalse(window.success)
    if (!window.success)
      assert.match(window.error, /spec\.sandbox\.validationWindow: must be between 0s and 168h/)
    const quota = withSandbox({ resourceQuota: { hard: { pods: "lots" } } })
    assert.isFalse(quota.success)
    const ok = withSandbox({})
    assert.isTrue(ok.success)
    if (ok.success) assert.deepStrictEqual(ok.data.spec.sandbox, { egress: [], validationWindow: "0s" })
  })
})
