// The reconciler's decisions that need no cluster, against caches held in memory and a scripted API:
// what it sends (and that it sends nothing when converged) is the assertion. Behaviour against a real
// API server is test/integration/backupcheck.test.ts.

import { assert, describe, it } from "@effect/vitest"
import type { V1Job } from "@kubernetes/client-node"
import { Cause, Effect, Exit, Stream } from "effect"
import { TestClock } from "effect/testing"
import { type BackupCheck, type BackupCheckInput, parseBackupCheck } from "../../src/api/backupcheck.ts"
import type { StoreView } from "../../src/engine/informer/store.ts"
import { KubeApiError, type KubeClient, type KubeRequest } from "../../src/kube/client.ts"
import {
  makeBackupCheckReconciler,
  RestoreJobCreateError,
} from "../../src/reconcile/backupcheck-reconciler.ts"
import { type CachedJob, cachedJob } from "../../src/reconcile/cached-job.ts"
import { jobNameFor, specHashFor, traceparentFor } from "../../src/reconcile/run-identity.ts"

const uid = "0b3c-uid"
const t = (iso: string) => Date.parse(iso)

const checkWith = (spec: Partial<BackupCheckInput["spec"]>, status?: unknown): BackupCheck => {
  const obj = {
    apiVersion: "fleetcheck.io/v1alpha1",
    kind: "BackupCheck",
    metadata: {
      name: "orders",
      namespace: "shop",
      uid,
      generation: 1,
      resourceVersion: "100",
      creationTimestamp: "2026-11-29T09:00:00Z",
      finalizers: ["fleetcheck.io/cleanup"],
    },
    spec: {
      backup: { name: "orders-2026-11-29" },
      jobTemplate: { spec: { template: { spec: { containers: [{ name: "restore", image: "r:1" }] } } } },
      ...spec,
    },
    ...(status === undefined ? {} : { status }),
  }
  const parsed = parseBackupCheck(obj)
  if (!parsed.success) throw new Error(parsed.error)
  // The cache holds what the API server returns: defaults applied.
  return { ...parsed.data, ...(status === undefined ? {} : { status }) } as BackupCheck
}

const jobFor = (
  runID: string,
  phase: "Active" | "Complete" | "Failed",
  created: string,
  extra: Partial<V1Job> = {},
): V1Job => ({
  metadata: {
    name: jobNameFor("orders", runID),
    namespace: "shop",
    uid: `job-${runID}`,
    resourceVersion: "7",
    creationTimestamp: new Date(created),
    labels: { "fleetcheck.io/backupcheck": "orders", "fleetcheck.io/run": runID },
    ownerReferences: [
      { apiVersion: "fleetcheck.io/v1alpha1", kind: "BackupCheck", name: "orders", uid, controller: true },
    ],
  },
  status: phase === "Active" ? { active: 1 } : { conditions: [{ type: phase, status: "True" }] },
  ...extra,
})

const storeOf = <T extends { metadata?: { namespace?: string; name?: string } | undefined }>(
  items: ReadonlyArray<T>,
  index?: (item: T) => ReadonlyArray<string>,
): StoreView<T> => {
  const key = (o: T) => `${o.metadata?.namespace ?? ""}/${o.metadata?.name ?? ""}`
  return {
    get: (k) => items.find((o) => key(o) === k),
    has: (k) => items.some((o) => key(o) === k),
    list: () => [...items],
    keys: () => items.map(key),
    byIndex: (_name, value) => items.filter((o) => index?.(o).includes(value)),
    size: items.length,
  }
}
const ownerIndex = (job: CachedJob) =>
  (job.metadata?.ownerReferences ?? []).filter((r) => r.controller).map((r) => r.uid)

/** A scripted API: answers every request with `answer(req)` and keeps what was sent. */
const scriptedClient = (answer: (req: KubeRequest) => unknown) => {
  const sent: KubeRequest[] = []
  const client: KubeClient = {
    cluster: "member",
    request: <T>(req: KubeRequest) => {
      sent.push(req)
      const result = answer(req)
      return result instanceof KubeApiError ? Effect.fail(result) : Effect.succeed(result as T)
    },
    watch: () => Stream.empty,
  }
  return { client, sent }
}

const apiError = (status: number, reason: string) =>
  new KubeApiError({ cluster: "member", method: "POST", path: "/x", status, reason, message: reason })

const reconcilerFor = (
  check: BackupCheck,
  jobs: ReadonlyArray<V1Job>,
  answer: (req: KubeRequest) => unknown,
) => {
  const api = scriptedClient(answer)
  const skipped: string[] = []
  const reconcile = makeBackupCheckReconciler({
    cluster: "member",
    agentImage: "fleetcheck:test",
    veleroNotInstalledPollMs: 300_000,
    client: api.client,
    checks: storeOf([check]),
    // The cache holds what the member engine's Job informer keeps of each Job.
    jobs: storeOf(jobs.map(cachedJob), ownerIndex),
    namespaces: storeOf([]),
    sandboxCleanupTimeoutMs: 600_000,
    sandboxOrphanGraceMs: 60_000,
    runningPollMs: 2_000,
    onRunSkipped: (namespace, name) => void skipped.push(`${namespace}/${name}`),
    onRunRecorded: () => {},
  })
  const run = reconcile({ cluster: "member", namespace: "shop", name: "orders", reconcileId: "r1" })
  return { run, sent: api.sent, skipped }
}

/** The status the hub writes once run `runID` succeeded, exactly (so nothing is left to change). */
const succeededStatus = (check: BackupCheck, runID: string, extra: Record<string, unknown> = {}) => ({
  observedGeneration: 1,
  conditions: [
    {
      type: "Verified",
      status: "True",
      observedGeneration: 1,
      lastTransitionTime: "2026-11-29T09:00:41Z",
      reason: "RestoreSucceeded",
      message: "orders-2026-11-29 restored and verified in 41s",
    },
  ],
  lastRun: {
    jobName: jobNameFor("orders", runID),
    runID,
    startTime: "2026-11-29T09:00:00Z",
    result: "Succeeded",
    traceID: traceparentFor(uid, runID).traceID,
    specHash: specHashFor(check.spec),
    completionTime: "2026-11-29T09:00:41Z",
  },
  lastSuccessfulTime: "2026-11-29T09:00:41Z",
  ...extra,
})

describe("BackupCheck reconciler", () => {
  it.effect("a converged reconcile sends no request at all", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(t("2026-11-29T12:00:00Z"))
      const bare = checkWith({})
      const check = checkWith({}, succeededStatus(bare, "g1"))
      const { run, sent } = reconcilerFor(check, [jobFor("g1", "Complete", "2026-11-29T09:00:00Z")], () => {
        throw new Error("no request expected")
      })
      assert.deepStrictEqual(yield* run, {})
      assert.deepStrictEqual(sent, [])
    }),
  )

  /**
   * A check whose g1 Job completed, its verdict not yet recorded, behind a check cache the test moves by
   * hand, and a client whose PATCH answers with the check at `writtenVersion()`.
   */
  const ownWriteFixture = (writtenVersion: () => string) => {
    const bare = checkWith({})
    const running = checkWith(
      {},
      {
        ...succeededStatus(bare, "g1"),
        lastRun: {
          jobName: jobNameFor("orders", "g1"),
          runID: "g1",
          startTime: "2026-11-29T09:00:00Z",
          result: "Running",
          traceID: traceparentFor(uid, "g1").traceID,
          specHash: specHashFor(bare.spec),
        },
      },
    )
    const at = (resourceVersion: string): BackupCheck => ({
      ...running,
      metadata: { ...running.metadata, resourceVersion },
    })
    const cache = { check: at("100") }
    const checks: StoreView<BackupCheck> = {
      ...storeOf([running]),
      get: (k) => (k === "shop/orders" ? cache.check : undefined),
    }
    const api = scriptedClient((req) => (req.method === "PATCH" ? at(writtenVersion()) : {}))
    const reconcile = makeBackupCheckReconciler({
      cluster: "member",
      agentImage: "fleetcheck:test",
      veleroNotInstalledPollMs: 300_000,
      client: api.client,
      checks,
      jobs: storeOf([jobFor("g1", "Complete", "2026-11-29T09:00:00Z")], ownerIndex),
      namespaces: storeOf([]),
      sandboxCleanupTimeoutMs: 600_000,
      sandboxOrphanGraceMs: 60_000,
      runningPollMs: 2_000,
      onRunSkipped: () => {},
      onRunRecorded: () => {},
    })
    const pass = reconcile({ cluster: "member", namespace: "shop", name: "orders", reconcileId: "r" })
    const statusWrites = () =>
      api.sent
        .filter((r) => r.method === "PATCH")
        .map((r) => (r.body as { metadata: { resourceVersion: string } }).metadata.resourceVersion)
    return { at, cache, pass, statusWrites }
  }

  it.effect(
    "a pass from a cached check the reconciler's own write replaced sends nothing and waits for the cache",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(t("2026-11-29T12:00:00Z"))
        const { at, cache, pass, statusWrites } = ownWriteFixture(() => "101")

        yield* pass // records g1's verdict, written from resourceVersion 100
        assert.deepStrictEqual(statusWrites(), ["100"])
        // The Job's next event came before the check's: the cache still shows 100, which the write replaced.
        assert.deepStrictEqual(yield* pass, { requeueAfterMs: 1000 })
        assert.deepStrictEqual(statusWrites(), ["100"])
        // The cache moved past it (here to a version another writer made, the verdict not in it): decided
        // from again.
        cache.check = at("102")
        yield* pass
        assert.deepStrictEqual(statusWrites(), ["100", "102"])
      }),
  )

  it.effect("a write the API server kept as it was (same resourceVersion) is not waited for", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(t("2026-11-29T12:00:00Z"))
      // The server answers every patch with resourceVersion 100, the one it was sent from: nothing
      // changed there (e.g. the field was pruned), so no event will ever bring a newer check.
      const { pass, statusWrites } = ownWriteFixture(() => "100")

      yield* pass
      assert.deepStrictEqual(statusWrites(), ["100"])
      const second = yield* pass
      assert.notStrictEqual(second.requeueAfterMs, 1000)
      assert.deepStrictEqual(statusWrites(), ["100", "100"])
    }),
  )

  it.effect("a check whose cache never shows the reconciler's write waits a bounded number of passes", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(t("2026-11-29T12:00:00Z"))
      const { pass, statusWrites } = ownWriteFixture(() => "101")

      yield* pass
      let waited = 0
      while ((yield* pass).requeueAfterMs === 1000 && statusWrites().length === 1 && waited < 100) waited++
      // The cache never moved (a lost event, a watch that stays broken): after the bounded wait the
      // reconciler decides from what it has and writes again, as it did before waiting existed.
      assert.deepStrictEqual(statusWrites(), ["100", "100"])
      assert.isBelow(waited, 100)
    }),
  )

  it.effect(
    "Forbid: a slot passing while a run is active is reported once (Event and callback), nothing starts",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(t("2026-11-29T10:01:00.500Z"))
        const spec = { schedule: "* * * * *", timeout: "50s" }
        const bare = checkWith(spec)
        const status = {
          ...succeededStatus(bare, "g1"),
          lastRun: {
            jobName: jobNameFor("orders", "g1"),
            runID: "g1",
            startTime: "2026-11-29T10:00:30Z",
            result: "Running",
            traceID: traceparentFor(uid, "g1").traceID,
            specHash: specHashFor(bare.spec),
          },
        }
        const check = checkWith(spec, status)
        const answer = (req: KubeRequest) => (req.method === "PATCH" ? check : {})
        const first = reconcilerFor(check, [jobFor("g1", "Active", "2026-11-29T10:00:30Z")], answer)
        const result = yield* first.run
        assert.isDefined(result.requeueAfterMs)
        const events = first.sent.filter((r) => r.path.includes("/events"))
        assert.strictEqual(events.length, 1)
        const event = events[0]!.body as { reason: string; note: string; metadata: { name: string } }
        assert.strictEqual(event.reason, "RunSkipped")
        assert.strictEqual(event.metadata.name, `${jobNameFor("orders", "s20261129t1001z")}.skipped`)
        assert.match(event.note, /2026-11-29T10:01:00Z skipped: run g1 .* still running/)
        assert.deepStrictEqual(first.skipped, ["shop/orders"])
        assert.isFalse(first.sent.some((r) => r.method === "POST" && r.path.endsWith("/jobs")))
        // Verified keeps the last verdict while the run is in flight.
        const patch = first.sent.find((r) => r.method === "PATCH")?.body as {
          status: Record<string, unknown>
        }
        assert.deepStrictEqual(Object.keys(patch.status), ["nextRunTime"])
      }),
  )

  it.effect("a skip another hub already recorded (Event AlreadyExists) is not counted again", () =>
    Effect.gen(function* () {
      yield* TestClock.setTime(t("2026-11-29T10:01:00.500Z"))
      const spec = { schedule: "* * * * *", timeout: "50s" }
      const bare = checkWith(spec)
      const check = checkWith(spec, {
        ...succeededStatus(bare, "g1"),
        lastRun: {
          jobName: jobNameFor("orders", "g1"),
          runID: "g1",
          startTime: "2026-11-29T10:00:30Z",
          result: "Running",
          specHash: specHashFor(bare.spec),
        },
      })
      const { run, skipped } = reconcilerFor(
        check,
        [jobFor("g1", "Active", "2026-11-29T10:00:30Z")],
        (req) => (req.path.includes("/events") ? apiError(409, "AlreadyExists") : check),
      )
      yield* run
      assert.deepStrictEqual(skipped, [])
    }),
  )

  it.effect(
    "a Running run whose Job the cache lacks but the API has waits for the cache, writing nothing",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(t("2026-11-29T09:00:05Z"))
        const bare = checkWith({})
        const running = {
          jobName: jobNameFor("orders", "g1"),
          runID: "g1",
          startTime: "2026-11-29T09:00:00Z",
          result: "Running",
          specHash: specHashFor(bare.spec),
        }
        const check = checkWith({}, { ...succeededStatus(bare, "g1"), lastRun: running })
        const live = jobFor("g1", "Active", "2026-11-29T09:00:00Z")
        const { run, sent } = reconcilerFor(check, [], () => ({ items: [live] }))
        assert.deepStrictEqual(yield* run, { requeueAfterMs: 1000 })
        assert.deepStrictEqual(
          sent.map((r) => [r.method, r.query?.fieldSelector]),
          [["GET", `metadata.name=${running.jobName}`]],
        )
      }),
  )

  it.effect(
    "a Running run whose Job is gone is recorded Failed/RestoreJobMissing, and no Job is created",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(t("2026-11-29T09:00:05Z"))
        const bare = checkWith({})
        const check = checkWith(
          {},
          {
            observedGeneration: 1,
            lastRun: {
              jobName: jobNameFor("orders", "g1"),
              runID: "g1",
              startTime: "2026-11-29T09:00:00Z",
              result: "Running",
              specHash: specHashFor(bare.spec),
            },
          },
        )
        const { run, sent } = reconcilerFor(check, [], (req) =>
          req.method === "GET" ? { items: [] } : check,
        )
        yield* run
        assert.isFalse(sent.some((r) => r.method === "POST"))
        const patch = sent.find((r) => r.method === "PATCH")?.body as {
          status: { lastRun: { result: string }; conditions: Array<{ reason: string; status: string }> }
        }
        assert.strictEqual(patch.status.lastRun.result, "Failed")
        assert.deepInclude(patch.status.conditions[0]!, { status: "False", reason: "RestoreJobMissing" })
      }),
  )

  it.effect(
    "a Job name held by a Job this check does not control is NameConflict: no POST, a typed error",
    () =>
      Effect.gen(function* () {
        yield* TestClock.setTime(t("2026-11-29T09:00:05Z"))
        const check = checkWith({})
        const foreign = jobFor("g1", "Active", "2026-11-29T08:00:00Z", {})
        foreign.metadata = { ...foreign.metadata, ownerReferences: [] }
        const { run, sent } = reconcilerFor(check, [foreign], () => check)
        const exit = yield* Effect.exit(run)
        assert.isTrue(Exit.isFailure(exit))
        if (Exit.isFailure(exit)) {
          const error = Cause.findErrorOption(exit.cause)
          assert.isTrue(error._tag === "Some" && error.value instanceof RestoreJobCreateError)
          if (error._tag === "Some" && error.value instanceof RestoreJobCreateError) {
            assert.strictEqual(error.value.reason, "NameConflict")
          }
        }
        assert.isFalse(sent.some((r) => r.method === "POST"))
        const patch = sent.find((r) => r.method === "PATCH")?.body as {
          status: { conditions: Array<{ reason: string; message: string }> }
        }
        assert.strictEqual(patch.status.conditions[0]?.reason, "NameConflict")
        assert.match(
          patch.status.conditions[0]!.message,
          /already exists and is not controlled by this BackupCheck/,
        )
      }),
  )
})
