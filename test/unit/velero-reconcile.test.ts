// The reconciler's Velero path against a scripted member API: what it sends and what it records for
// each answer Velero's objects give. The real thing (a Velero server) is test/integration/velero.test.ts.
import { assert, describe, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import { TestClock } from "effect/testing"
import { type BackupCheck, parseBackupCheck } from "../../src/api/backupcheck.ts"
import type { StoreView } from "../../src/engine/informer/store.ts"
import { KubeApiError, type KubeClient, type KubeRequest } from "../../src/kube/client.ts"
import { makeBackupCheckReconciler } from "../../src/reconcile/backupcheck-reconciler.ts"
import { specHashFor, traceparentFor } from "../../src/reconcile/run-identity.ts"
import { sandboxLabels, sandboxNamespaceFor } from "../../src/reconcile/sandbox.ts"

const uid = "velero-uid"
const ref = { name: "orders", namespace: "shop", uid }
const sandbox = sandboxNamespaceFor(ref, "g1")
const restores = "/apis/velero.io/v1/namespaces/velero/restores"
const backups = "/apis/velero.io/v1/namespaces/velero/backups"

const checkWith = (status?: unknown): BackupCheck => {
  const parsed = parseBackupCheck({
    apiVersion: "fleetcheck.io/v1alpha1",
    kind: "BackupCheck",
    metadata: {
      name: "orders",
      namespace: "shop",
      uid,
      generation: 1,
      resourceVersion: "100",
      creationTimestamp: "2026-12-07T05:00:00Z",
      finalizers: ["fleetcheck.io/cleanup"],
    },
    spec: {
      backup: { name: "orders-nightly" },
      restore: { velero: { scheduleName: "orders-nightly" } },
      sandbox: {},
    },
  })
  if (!parsed.success) throw new Error(parsed.error)
  return { ...parsed.data, ...(status === undefined ? {} : { status }) } as BackupCheck
}

const running = () => {
  const bare = checkWith()
  return checkWith({
    observedGeneration: 1,
    lastRun: {
      jobName: "orders-g1",
      runID: "g1",
      startTime: "2026-12-07T05:00:10Z",
      result: "Running",
      phases: [{ name: "restore", result: "Running", startTime: "2026-12-07T05:00:10Z" }],
      traceID: traceparentFor(uid, "g1").traceID,
      specHash: specHashFor(bare.spec),
      sandbox: { namespace: sandbox, cleanup: "Pending" },
    },
  })
}

const store = <T extends { metadata?: { namespace?: string; name?: string } }>(items: T[]): StoreView<T> => ({
  get: (k) => items.find((o) => `${o.metadata?.namespace ?? ""}/${o.metadata?.name ?? ""}` === k),
  has: () => false,
  list: () => [...items],
  keys: () => [],
  byIndex: () => [],
  size: items.length,
})

const notFound = () =>
  new KubeApiError({
    cluster: "m",
    method: "GET",
    path: "/x",
    status: 404,
    reason: "NotFound",
    message: "404",
  })

const pass = (check: BackupCheck, answer: (req: KubeRequest) => unknown) => {
  const sent: KubeRequest[] = []
  const client: KubeClient = {
    cluster: "member",
    request: <T>(req: KubeRequest) => {
      sent.push(req)
      const r =
        req.method === "PATCH"
          ? { ...check, metadata: { ...check.metadata, resourceVersion: "101" } }
          : answer(req)
      return r instanceof KubeApiError ? Effect.fail(r) : Effect.succeed(r as T)
    },
    watch: () => Stream.empty,
  }
  const reconcile = makeBackupCheckReconciler({
    cluster: "member",
    agentImage: "fleetcheck:test",
    veleroNotInstalledPollMs: 300_000,
    client,
    checks: store([check]),
    jobs: store([]),
    namespaces: store([]),
    sandboxCleanupTimeoutMs: 600_000,
    sandboxOrphanGraceMs: 60_000,
    runningPollMs: 2_000,
    onRunSkipped: () => {},
    onRunRecorded: () => {},
  })
  return Effect.map(
    reconcile({ cluster: "member", namespace: "shop", name: "orders", reconcileId: "r" }),
    (result) => ({
      result,
      sent,
    }),
  )
}

const statusOf = (sent: KubeRequest[]) =>
  (sent.filter((r) => r.method === "PATCH").at(-1)?.body as { status: any } | undefined)?.status

const ourRestore = (status: Record<string, unknown>) => ({
  metadata: {
    name: "orders-g1",
    namespace: "velero",
    creationTimestamp: "2026-12-07T05:00:10Z",
    labels: sandboxLabels(ref, "g1"),
    annotations: { "fleetcheck.io/recovery-point-time": "2026-12-07T02:00:00Z" },
  },
  spec: { backupName: "nightly-2" },
  status,
})

describe("the reconciler with spec.restore.velero", () => {
  it.effect("Velero absent (a LIST answers 404): VeleroNotInstalled, no Restore, requeued slowly", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(Date.parse("2026-12-07T05:00:10Z"))
      const { result, sent } = yield* pass(checkWith(), () => notFound())
      assert.deepStrictEqual(result, { requeueAfterMs: 300_000 })
      assert.isFalse(sent.some((r) => r.method === "POST"))
      const verified = statusOf(sent).conditions.find((c: any) => c.type === "Verified")
      assert.strictEqual(verified.status, "False")
      assert.strictEqual(verified.reason, "VeleroNotInstalled")
    }),
  )

  it.effect("a due run: the newest Completed Backup, the sandbox first, then the Restore into it", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(Date.parse("2026-12-07T05:00:10Z"))
      const { sent } = yield* pass(checkWith(), (req) => {
        if (req.path === restores && req.method === "GET") return { items: [] }
        if (req.path === backups)
          return {
            items: [
              {
                metadata: { name: "nightly-1", labels: { "velero.io/schedule-name": "orders-nightly" } },
                spec: { includedNamespaces: ["orders"] },
                status: { phase: "Completed", startTimestamp: "2026-12-06T02:00:00Z" },
              },
              {
                metadata: { name: "nightly-2", labels: { "velero.io/schedule-name": "orders-nightly" } },
                spec: { includedNamespaces: ["orders"] },
                status: { phase: "Completed", startTimestamp: "2026-12-07T02:00:00Z" },
              },
              {
                metadata: { name: "nightly-3", labels: { "velero.io/schedule-name": "orders-nightly" } },
                status: { phase: "InProgress", startTimestamp: "2026-12-07T05:00:00Z" },
              },
            ],
          }
        if (req.method === "GET") return { items: [] }
        return req.body
      })
      const posts = sent.filter((r) => r.method === "POST").map((r) => r.path)
      assert.deepStrictEqual(posts, [
        "/api/v1/namespaces",
        `/apis/networking.k8s.io/v1/namespaces/${sandbox}/networkpolicies`,
        restores,
      ])
      const body = sent.find((r) => r.method === "POST" && r.path === restores)?.body as any
      assert.strictEqual(body.metadata.name, "orders-g1")
      assert.deepStrictEqual(body.spec.namespaceMapping, { orders: sandbox })
      assert.strictEqual(body.spec.backupName, "nightly-2")
      const lastRun = statusOf(sent).lastRun
      assert.strictEqual(lastRun.result, "Running")
      assert.strictEqual(lastRun.sandbox.namespace, sandbox)
    }),
  )

  it.effect("a Backup that is not Completed: the run fails BackupNotRestorable and nothing is created", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(Date.parse("2026-12-07T05:00:10Z"))
      const check = checkWith()
      const named = {
        ...check,
        spec: {
          ...check.spec,
          restore: {
            velero: { ...check.spec.restore!.velero!, scheduleName: undefined, backupName: "manual" },
          },
        },
      } as BackupCheck
      const { sent } = yield* pass(named, (req) =>
        req.path === backups
          ? { items: [{ metadata: { name: "manual" }, status: { phase: "Failed" } }] }
          : { items: [] },
      )
      assert.isFalse(sent.some((r) => r.method === "POST"))
      const status = statusOf(sent)
      assert.strictEqual(status.lastRun.result, "Failed")
      const verified = status.conditions.find((c: any) => c.type === "Verified")
      assert.strictEqual(verified.reason, "BackupNotRestorable")
      assert.include(verified.message, "is Failed, not Completed")
    }),
  )

  it.effect(
    "Completed and the restored workloads available: green, with the Backup's start as the data time",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(Date.parse("2026-12-07T05:01:00Z"))
        const { sent } = yield* pass(running(), (req) => {
          if (req.path === restores)
            return {
              items: [ourRestore({ phase: "Completed", progress: { totalItems: 7, itemsRestored: 7 } })],
            }
          if (req.path.endsWith("/deployments"))
            return {
              items: [
                {
                  metadata: { name: "web", generation: 1 },
                  spec: { replicas: 1 },
                  status: { observedGeneration: 1, availableReplicas: 1, updatedReplicas: 1 },
                },
              ],
            }
          return { items: [] }
        })
        const status = statusOf(sent)
        assert.strictEqual(status.lastRun.result, "Succeeded")
        assert.deepStrictEqual(status.lastRun.recoveryPoint, {
          id: "nightly-2",
          time: "2026-12-07T02:00:00Z",
        })
        assert.strictEqual(status.lastRun.phases[0].dataTimestamp, "2026-12-07T02:00:00Z")
        assert.strictEqual(status.lastRun.phases[0].counts.itemsRestored, 7)
        const verified = status.conditions.find((c: any) => c.type === "Verified")
        assert.strictEqual(verified.status, "True")
        assert.strictEqual(verified.reason, "RestoreSucceeded")
      }),
  )

  it.effect("Completed but a Deployment not yet available: still running, nothing recorded", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(Date.parse("2026-12-07T05:01:00Z"))
      const { sent } = yield* pass(running(), (req) => {
        if (req.path === restores) return { items: [ourRestore({ phase: "Completed" })] }
        if (req.path.endsWith("/deployments"))
          return {
            items: [
              {
                metadata: { name: "web", generation: 1 },
                spec: { replicas: 1 },
                status: { observedGeneration: 1 },
              },
            ],
          }
        return { items: [] }
      })
      assert.isUndefined(statusOf(sent)?.lastRun?.result)
    }),
  )

  it.effect("PartiallyFailed is RestorePartiallyFailed; a vanished Restore is RestoreJobMissing", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(Date.parse("2026-12-07T05:01:00Z"))
      const partial = yield* pass(running(), (req) =>
        req.path === restores
          ? { items: [ourRestore({ phase: "PartiallyFailed", errors: 2 })] }
          : { items: [] },
      )
      assert.strictEqual(
        statusOf(partial.sent).conditions.find((c: any) => c.type === "Verified").reason,
        "RestorePartiallyFailed",
      )
      const gone = yield* pass(running(), () => ({ items: [] }))
      assert.strictEqual(
        statusOf(gone.sent).conditions.find((c: any) => c.type === "Verified").reason,
        "RestoreJobMissing",
      )
      // A Restore of that name with another check's uid is not this run's.
      const foreign = yield* pass(running(), (req) =>
        req.path === restores
          ? {
              items: [
                {
                  ...ourRestore({ phase: "Completed" }),
                  metadata: { name: "orders-g1", labels: { "fleetcheck.io/backupcheck-uid": "x" } },
                },
              ],
            }
          : { items: [] },
      )
      assert.strictEqual(
        statusOf(foreign.sent).conditions.find((c: any) => c.type === "Verified").reason,
        "RestoreJobMissing",
      )
    }),
  )

  it.effect("still InProgress after spec.timeout: RestoreTimedOut", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(Date.parse("2026-12-07T07:00:00Z"))
      const { sent } = yield* pass(running(), (req) =>
        req.path === restores ? { items: [ourRestore({ phase: "InProgress" })] } : { items: [] },
      )
      const verified = statusOf(sent).conditions.find((c: any) => c.type === "Verified")
      assert.strictEqual(verified.reason, "RestoreTimedOut")
      assert.include(verified.message, "InProgress")
    }),
  )

  describe("a deleted check's Restores", () => {
    const deleted = (deletedAt: string) => {
      const c = running()
      return { ...c, metadata: { ...c.metadata, deletionTimestamp: deletedAt } } as BackupCheck
    }
    const withRestore = (phase: string) => (req: KubeRequest) =>
      req.method === "GET" && req.path === restores
        ? { items: [{ ...ourRestore({ phase }), metadata: { ...ourRestore({}).metadata, uid: "r-uid" } }] }
        : { items: [] }
    const deletes = (sent: KubeRequest[]) => sent.filter((r) => r.method === "DELETE").map((r) => r.path)
    const finalizerRemoved = (sent: KubeRequest[]) =>
      sent.some((r) => r.method === "PATCH" && (r.body as any)?.metadata?.finalizers !== undefined)

    it.effect(
      "a Restore Velero is still working on is left until it settles: no DELETE, the finalizer stays, requeued",
      () =>
        Effect.gen(function* () {
          yield* TestClock.setTime(Date.parse("2026-12-07T05:01:00Z"))
          for (const phase of [
            "InProgress",
            "WaitingForPluginOperations",
            "Finalizing",
            "FinalizingPartiallyFailed",
          ]) {
            const { result, sent } = yield* pass(deleted("2026-12-07T05:00:50Z"), withRestore(phase))
            assert.deepStrictEqual(deletes(sent), [], phase)
            assert.isFalse(finalizerRemoved(sent), phase)
            assert.deepStrictEqual(result, { requeueAfterMs: 2000 }, phase)
          }
        }),
    )

    it.effect("a settled one is deleted (uid precondition) and the finalizer removed", () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(Date.parse("2026-12-07T05:01:00Z"))
        for (const phase of ["Completed", "PartiallyFailed", "Failed", "FailedValidation", "New", ""]) {
          const { sent } = yield* pass(deleted("2026-12-07T05:00:50Z"), withRestore(phase))
          assert.deepStrictEqual(deletes(sent), [`${restores}/orders-g1`], phase)
          const del = sent.find((r) => r.method === "DELETE")
          assert.strictEqual((del?.body as any)?.preconditions?.uid, "r-uid")
          assert.isTrue(finalizerRemoved(sent), phase)
        }
      }),
    )

    it.effect(
      "past the sandbox cleanup timeout an in-flight one is deleted anyway (Velero may be down)",
      () =>
        Effect.gen(function* () {
          yield* TestClock.setTime(Date.parse("2026-12-07T05:20:00Z"))
          const { sent } = yield* pass(deleted("2026-12-07T05:00:50Z"), withRestore("InProgress"))
          assert.deepStrictEqual(deletes(sent), [`${restores}/orders-g1`])
          assert.isTrue(finalizerRemoved(sent))
        }),
    )
  })
})
