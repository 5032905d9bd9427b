// What the hub's Job cache keeps (src/reconcile/cached-job.ts): a Job as the API server returns it,
// projected to the fields the reconciler reads, gives every reader the same answer; and the member
// engine's Job informer stores the projection, for listed Jobs and for watched ones.
import type { V1Job, V1Pod } from "@kubernetes/client-node"
import { Effect, Exit, References, Scope } from "effect"
import { describe, expect, it } from "vitest"
import { startMemberEngine } from "../../src/hub/member-engine.ts"
import { type CachedJob, cachedJob } from "../../src/reconcile/cached-job.ts"
import { jobOutcome } from "../../src/reconcile/job-outcome.ts"
import { type RestoreJobInput, renderRestoreJob } from "../../src/reconcile/restore-job.ts"
import { createdAt, isValidationJob, jobPhase, runIDOf } from "../../src/reconcile/runs.ts"
import { sandboxCheckKey, sandboxCheckUid } from "../../src/reconcile/sandbox.ts"
import { engineOptions } from "../support/engine.ts"
import { kubeConfigOf } from "../support/informer.ts"
import { line, scripted } from "../support/scripted-server.ts"
import { waitUntil } from "../support/wait.ts"

const check: RestoreJobInput["check"] = {
  apiVersion: "fleetcheck.io/v1alpha1",
  kind: "BackupCheck",
  metadata: { name: "orders", namespace: "shop", uid: "0b3c-uid" },
  spec: {
    backup: { name: "orders-2026-11-29", source: "s3://b/o" },
    jobTemplate: {
      metadata: { labels: { team: "shop" }, annotations: { "example.com/owner": "db-team" } },
      spec: {
        template: {
          spec: {
            containers: [
              {
                name: "restore",
                image: "registry.example/restore:1.4",
                args: ["--verify"],
                env: [{ name: "PGHOST", value: "db" }],
              },
            ],
          },
        },
      },
    },
  },
}

/**
 * The restore Job of run `runID` as the API server returns it once finished (`conditions`; none while
 * active): the hub's rendering with the API server's defaults, the Job controller's labels and
 * selector, managedFields, and the status the Job controller writes.
 */
/** Conditions as they come over the wire (times as strings). */
type WireConditions = ReadonlyArray<Readonly<Record<string, string>>>

const fromApiServer = (runID: string, conditions: WireConditions | undefined): V1Job => {
  const rendered = renderRestoreJob({
    cluster: "eu-1",
    check,
    jobName: `orders-${runID}`,
    runID,
    timeoutSeconds: 1800,
    traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
    specHash: "0123456789abcdef",
  })
  const controllerUid = `c0ffee-${runID}`
  const serverLabels = {
    "batch.kubernetes.io/controller-uid": controllerUid,
    "batch.kubernetes.io/job-name": `orders-${runID}`,
    "controller-uid": controllerUid,
    "job-name": `orders-${runID}`,
  }
  const spec = rendered.spec!
  const podSpec = spec.template.spec!
  return JSON.parse(
    JSON.stringify({
      ...rendered,
      metadata: {
        ...rendered.metadata,
        uid: controllerUid,
        resourceVersion: "4711",
        generation: 1,
        creationTimestamp: "2026-11-29T09:00:00Z",
        managedFields: [{ manager: "fleetcheck", operation: "Update", fieldsV1: { "f:spec": {} } }],
      },
      spec: {
        ...spec,
        parallelism: 1,
        completions: 1,
        manualSelector: false,
        completionMode: "NonIndexed",
        suspend: false,
        podReplacementPolicy: "TerminatingOrFailed",
        selector: { matchLabels: { "batch.kubernetes.io/controller-uid": controllerUid } },
        template: {
          metadata: { labels: { ...spec.template.metadata?.labels, ...serverLabels } },
          spec: {
            ...podSpec,
            containers: podSpec.containers.map((c) => ({
              ...c,
              resources: {},
              terminationMessagePath: "/dev/termination-log",
              imagePullPolicy: "IfNotPresent",
            })),
            terminationGracePeriodSeconds: 30,
            dnsPolicy: "ClusterFirst",
            securityContext: {},
            schedulerName: "default-scheduler",
          },
        },
      },
      status: {
        startTime: "2026-11-29T09:00:01Z",
        ...(conditions
          ? {
              conditions,
              completionTime: "2026-11-29T09:00:41Z",
              succeeded: conditions.some((c) => c.type === "Complete") ? 1 : 0,
              failed: conditions.some((c) => c.type === "Failed") ? 1 : 0,
            }
          : { active: 1 }),
        terminating: 0,
        ready: 0,
        uncountedTerminatedPods: {},
      },
    }),
  )
}

const at = "2026-11-29T09:00:41Z"
const complete = [
  { type: "SuccessCriteriaMet", status: "True", lastProbeTime: at, lastTransitionTime: at },
  { type: "Complete", status: "True", lastProbeTime: at, lastTransitionTime: at },
]
const deadline = [
  {
    type: "Failed",
    status: "True",
    reason: "DeadlineExceeded",
    message: "Job was active longer than specified deadline",
    lastProbeTime: at,
    lastTransitionTime: at,
  },
]
const pod = (exitCode: number, message: string): V1Pod => ({
  status: {
    containerStatuses: [
      {
        name: "restore",
        image: "registry.example/restore:1.4",
        imageID: "",
        ready: false,
        restartCount: 0,
        state: { terminated: { exitCode, message, finishedAt: new Date(at) } },
      },
    ],
  },
})

/** Every answer the hub derives from a cached Job (runs.ts, job-outcome.ts, sandbox.ts, its env). */
const readings = (job: CachedJob, pods: ReadonlyArray<V1Pod>) => ({
  phase: jobPhase(job),
  runID: runIDOf(job),
  validation: isValidationJob(job),
  createdAt: createdAt(job),
  sandboxKey: sandboxCheckKey(job),
  sandboxUid: sandboxCheckUid(job),
  backupName: job.spec?.template.spec?.containers[0]?.env?.find((e) => e.name === "FLEETCHECK_BACKUP_NAME")
    ?.value,
  outcome: jobOutcome(job, pods, { backupName: "orders-2026-11-29", startedAt: "2026-11-29T09:00:00Z" }),
  validationOutcome: jobOutcome(job, pods, {
    backupName: "orders-2026-11-29",
    startedAt: "2026-11-29T09:00:00Z",
    phase: "validation",
  }),
})

describe("cachedJob", () => {
  it("keeps exactly what the hub reads of a Job: metadata, the backup name, conditions and completion", () => {
    const full = fromApiServer("g1", complete)
    expect(cachedJob(full)).toStrictEqual({
      metadata: {
        name: "orders-g1",
        namespace: "shop",
        uid: "c0ffee-g1",
        resourceVersion: "4711",
        creationTimestamp: "2026-11-29T09:00:00Z",
        labels: full.metadata?.labels,
        annotations: {
          "example.com/owner": "db-team",
          "fleetcheck.io/traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
          "fleetcheck.io/spec-hash": "0123456789abcdef",
        },
        ownerReferences: full.metadata?.ownerReferences,
      },
      spec: {
        template: {
          spec: {
            containers: [
              { name: "restore", env: [{ name: "FLEETCHECK_BACKUP_NAME", value: "orders-2026-11-29" }] },
            ],
          },
        },
      },
      status: { conditions: complete, completionTime: "2026-11-29T09:00:41Z" },
    })
  })

  it("gives every reader the answer the whole Job gives: active, succeeded, failed, sandboxed, deleting", () => {
    const sandboxed = fromApiServer("g4", complete)
    sandboxed.metadata = {
      ...sandboxed.metadata,
      namespace: "fleetcheck-sandbox-orders-g4",
      ownerReferences: undefined,
      labels: {
        ...sandboxed.metadata?.labels,
        "fleetcheck.io/sandbox": "true",
        "fleetcheck.io/backupcheck-uid": "0b3c-uid",
      },
      annotations: { ...sandboxed.metadata?.annotations, "fleetcheck.io/backupcheck": "shop/orders" },
    }
    const validation = fromApiServer("g5", deadline)
    validation.metadata = {
      ...validation.metadata,
      labels: { ...validation.metadata?.labels, "fleetcheck.io/phase": "validation" },
      deletionTimestamp: new Date("2026-11-29T09:01:00Z"),
    }
    const cases: ReadonlyArray<[V1Job, ReadonlyArray<V1Pod>]> = [
      [fromApiServer("g1", complete), [pod(0, "42 tables ok")]],
      [fromApiServer("g2", undefined), []],
      [fromApiServer("g3", deadline), [pod(3, "checksum mismatch")]],
      [sandboxed, [pod(0, '{"message":"ok","dataTimestamp":"2026-11-29T08:00:00Z"}')]],
      [validation, [pod(1, "validation query failed")]],
    ]
    for (const [full, pods] of cases) {
      const projected = cachedJob(full)
      expect(readings(projected, pods)).toStrictEqual(readings(full, pods))
      expect(projected.metadata?.deletionTimestamp).toBe(full.metadata?.deletionTimestamp)
    }
  })
})

describe("the member engine's Job cache", () => {
  it("holds the projection of every listed and watched Job", async () => {
    const listed = fromApiServer("g1", complete)
    const watched = fromApiServer("g2", complete)
    const srv = await scripted((_req, res, url) => {
      const isJobs = url.pathname.endsWith("/jobs")
      if (url.searchParams.get("watch") === "true") {
        res.writeHead(200, { "content-type": "application/json" })
        // One Job arrives by watch; then the watch stays open and silent.
        if (isJobs)
          res.write(line("ADDED", { ...watched, metadata: { ...watched.metadata, resourceVersion: "4712" } }))
        return
      }
      res.writeHead(200, { "content-type": "application/json" })
      res.end(JSON.stringify({ metadata: { resourceVersion: "4711" }, items: isJobs ? [listed] : [] }))
    })
    const scope = await Effect.runPromise(Scope.make())
    try {
      const engine = await Effect.runPromise(
        startMemberEngine(
          engineOptions("member", kubeConfigOf(srv.kubeconfig), { namespaces: ["shop"], workers: 1 }),
        ).pipe(Scope.provide(scope), Effect.provideService(References.MinimumLogLevel, "Error")),
      )
      await Effect.runPromise(engine.awaitSynced.pipe(Effect.timeout("10 seconds")))
      await waitUntil("both Jobs cached", 10_000, () => engine.jobs.store.size === 2, 20)
      expect(engine.jobs.store.get("shop/orders-g1")).toStrictEqual(cachedJob(listed))
      expect(engine.jobs.store.get("shop/orders-g2")).toStrictEqual(
        cachedJob({ ...watched, metadata: { ...watched.metadata, resourceVersion: "4712" } }),
      )
      // Nothing of the pod template but the backup name is kept.
      for (const job of engine.jobs.store.list())
        expect(Object.keys(job.spec?.template.spec?.containers[0] ?? {})).toEqual(["name", "env"])
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await srv.stop()
    }
  })
})
