// The BackupCheck reconciler: level-triggered and idempotent, keyed by (cluster, namespace, name), with
// the anatomy of the seed article. It reads the whole desired state from the member's caches every
// time; deterministic Job names and optimistic concurrency make stale caches and two hubs harmless.
//
//   NotFound                 → done
//   deletionTimestamp        → delete this check's Jobs, drop the finalizer
//   no finalizer             → add it
//   invalid spec             → Verified=False/InvalidSpec, terminal (a spec edit brings it back)
//   suspended                → Verified=Unknown/Suspended
//   due run has no Job       → create it (AlreadyExists is success), RestoreRunning
//   Job still running        → requeue after the poll interval (Job events usually come first)
//   Job finished             → write the verdict, prune history, requeue at the next run or staleness deadline
import type { V1Job, V1Pod } from "@kubernetes/client-node"
import { Clock, Effect, Schema } from "effect"
import {
  type BackupCheck,
  type BackupCheckStatus,
  conditionReasons,
  conditionTypes,
  parseBackupCheck,
} from "../api/backupcheck.ts"
import { type Condition, findCondition, setStatusCondition } from "../api/condition.ts"
import { finalizerName } from "../api/names.ts"
import { parseDuration } from "../api/syntax.ts"
import { type ReconcileRequest, type ReconcileResult, TerminalError } from "../engine/controller.ts"
import type { StoreView } from "../engine/informer/store.ts"
import { isAlreadyExists, isNotFound, KubeApiError, type KubeClient } from "../kube/client.ts"
import { backupChecks, jobs, pathOf, pods } from "../kube/resources.ts"
import { linkToTraceparent, recordSpan, spanContextFromTraceparent } from "../observability/tracing.ts"
import { boundMessage, jobOutcome } from "./job-outcome.ts"
import { renderRestoreJob } from "./restore-job.ts"
import { jobNameFor, traceparentFor } from "./run-identity.ts"
import { dueRun } from "./schedule.ts"

/** The Job cache must be indexed by the uid of each Job's controller owner under this name. */
export const ownerUidIndex = "owner-uid"

export interface BackupCheckReconcilerOptions {
  readonly cluster: string
  readonly client: KubeClient
  readonly checks: StoreView<BackupCheck>
  readonly jobs: StoreView<V1Job>
  /** Backstop poll while a Job runs, in case a Job event is missed (the hub's configuration has the default). */
  readonly runningPollMs: number
}

/** The API server refused a restore Job (RBAC, quota, admission, invalid template): retried with backoff. */
export class RestoreJobCreateError extends Schema.TaggedError<RestoreJobCreateError>()(
  "RestoreJobCreateError",
  {
    job: Schema.String,
    message: Schema.String,
  },
) {}

const checkPath = (namespace: string, name: string, subresource?: string) =>
  pathOf(backupChecks, { namespace, name, subresource })
const jobPath = (namespace: string, name: string) => pathOf(jobs, { namespace, name })

/** The API server refused the request itself (invalid, forbidden, quota): retrying alone will not fix it. */
const isRefusal = (e: unknown): e is KubeApiError =>
  e instanceof KubeApiError && [400, 403, 422].includes(e.status)

const findVerified = (status: BackupCheckStatus) => findCondition(status.conditions, conditionTypes.Verified)

const iso = (ms: number) => new Date(Math.floor(ms / 1000) * 1000).toISOString().replace(".000Z", "Z")

const ignoreNotFound = <A, R>(e: Effect.Effect<A, unknown, R>) =>
  e.pipe(Effect.catchIf(isNotFound, () => Effect.void))

export const makeBackupCheckReconciler = (options: BackupCheckReconcilerOptions) => {
  const { client, cluster } = options
  const { runningPollMs } = options

  const patchMerge = (path: string, body: unknown) =>
    client.request<BackupCheck>({ method: "PATCH", path, body, contentType: "application/merge-patch+json" })

  /** Writes status through the subresource, only when it changed; resourceVersion makes it a compare-and-swap. */
  const writeStatus = Effect.fnUntraced(function* (check: BackupCheck, status: BackupCheckStatus) {
    if (JSON.stringify(status) === JSON.stringify(check.status ?? {})) return false
    yield* patchMerge(checkPath(check.metadata.namespace, check.metadata.name, "/status"), {
      metadata: { resourceVersion: check.metadata.resourceVersion },
      status: { ...status, conditions: status.conditions ?? [] },
    })
    return true
  })

  const withVerified = (
    check: BackupCheck,
    status: BackupCheckStatus,
    now: number,
    // The reconciler owns exactly one condition type: Verified.
    condition: Omit<Condition, "type" | "lastTransitionTime" | "observedGeneration">,
  ): BackupCheckStatus => {
    const { conditions } = setStatusCondition(
      status.conditions ?? [],
      {
        type: conditionTypes.Verified,
        ...condition,
        observedGeneration: check.metadata.generation ?? 0,
        lastTransitionTime: iso(now),
      },
      iso(now),
    )
    return { ...status, observedGeneration: check.metadata.generation ?? 0, conditions }
  }

  const cleanup = Effect.fnUntraced(function* (check: BackupCheck) {
    if (!(check.metadata.finalizers ?? []).includes(finalizerName)) return {}
    const ns = check.metadata.namespace
    for (const job of options.jobs.byIndex(ownerUidIndex, check.metadata.uid)) {
      yield* ignoreNotFound(
        client.request({
          method: "DELETE",
          path: jobPath(ns, job.metadata?.name ?? ""),
          body: { apiVersion: "v1", kind: "DeleteOptions", propagationPolicy: "Background" },
        }),
      )
    }
    yield* Effect.logInfo("deleted restore Jobs; removing finalizer")
    yield* ignoreNotFound(
      patchMerge(checkPath(ns, check.metadata.name), {
        metadata: {
          resourceVersion: check.metadata.resourceVersion,
          finalizers: (check.metadata.finalizers ?? []).filter((f) => f !== finalizerName),
        },
      }),
    )
    return {}
  })

  const listPods = (ns: string, jobName: string) =>
    client
      .request<{ items: V1Pod[] }>({
        method: "GET",
        path: pathOf(pods, { namespace: ns }),
        query: { labelSelector: `batch.kubernetes.io/job-name=${jobName}` },
      })
      .pipe(Effect.map((l) => l.items ?? []))

  /** Keeps the newest N succeeded and M failed Jobs of this check; never touches the one running now. */
  const pruneHistory = Effect.fnUntraced(function* (check: BackupCheck, currentJob: string) {
    // Newest first. creationTimestamp has one-second resolution and runs can start within one second,
    // so ties go by resourceVersion (etcd's revision, increasing in practice); the run that was just
    // decided always counts as the newest.
    const rank = (j: V1Job) => (j.metadata?.name === currentJob ? 1 : 0)
    const created = (j: V1Job) => new Date(j.metadata?.creationTimestamp ?? 0).getTime()
    const revision = (j: V1Job) => Number(j.metadata?.resourceVersion ?? 0) || 0
    const jobs = [...options.jobs.byIndex(ownerUidIndex, check.metadata.uid)].sort(
      (a, b) => rank(b) - rank(a) || created(b) - created(a) || revision(b) - revision(a),
    )
    const keep = {
      Succeeded: check.spec.successfulRunsHistoryLimit ?? 3,
      Failed: check.spec.failedRunsHistoryLimit ?? 1,
    }
    const seen = { Succeeded: 0, Failed: 0 }
    for (const job of jobs) {
      const name = job.metadata?.name ?? ""
      if (job.metadata?.deletionTimestamp) continue
      const phase = job.status?.conditions?.some((c) => c.type === "Complete" && c.status === "True")
        ? "Succeeded"
        : job.status?.conditions?.some((c) => c.type === "Failed" && c.status === "True")
          ? "Failed"
          : undefined
      if (!phase) continue
      seen[phase]++
      if (seen[phase] > keep[phase]) {
        yield* ignoreNotFound(
          client.request({
            method: "DELETE",
            path: jobPath(check.metadata.namespace, name),
            body: { apiVersion: "v1", kind: "DeleteOptions", propagationPolicy: "Background" },
          }),
        )
      }
    }
  })

  /** Verified=False once the last success is older than maxStaleness; returns when that will happen. */
  const applyStaleness = (check: BackupCheck, status: BackupCheckStatus, now: number) => {
    const maxStale = check.spec.maxStaleness ? parseDuration(check.spec.maxStaleness) : undefined
    if (typeof maxStale !== "number") return { status, deadline: undefined }
    const last = status.lastSuccessfulTime ? new Date(status.lastSuccessfulTime).getTime() : undefined
    const verified = findVerified(status)
    const since = last ?? new Date(check.metadata.creationTimestamp ?? now).getTime()
    const deadline = since + maxStale
    if (now < deadline) return { status, deadline }
    if (verified?.status === "False" && verified.reason !== conditionReasons.VerificationStale) {
      return { status, deadline: undefined } // already failing for a more specific reason
    }
    const message = last
      ? `last successful restore ${iso(last)} is older than maxStaleness ${check.spec.maxStaleness}`
      : `no successful restore within maxStaleness ${check.spec.maxStaleness} of creation`
    return {
      status: withVerified(check, status, now, {
        status: "False",
        reason: conditionReasons.VerificationStale,
        message,
      }),
      deadline: undefined,
    }
  }

  const requeueAt = (now: number, ...times: Array<number | undefined>): ReconcileResult => {
    const next = times
      .filter((t): t is number => t !== undefined && Number.isFinite(t))
      .sort((a, b) => a - b)[0]
    return next === undefined ? {} : { requeueAfterMs: Math.max(1000, next - now + 500) }
  }

  return (req: ReconcileRequest): Effect.Effect<ReconcileResult, unknown> =>
    Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      let check = options.checks.get(`${req.namespace}/${req.name}`)
      if (!check) return {}
      if (check.metadata.deletionTimestamp) return yield* cleanup(check)

      if (!(check.metadata.finalizers ?? []).includes(finalizerName)) {
        check = yield* patchMerge(checkPath(req.namespace, req.name), {
          metadata: {
            resourceVersion: check.metadata.resourceVersion,
            finalizers: [...(check.metadata.finalizers ?? []), finalizerName],
          },
        })
      }
      const status: BackupCheckStatus = check.status ?? {}

      const parsed = parseBackupCheck(check)
      if (!parsed.success) {
        const message = boundMessage(`invalid spec: ${parsed.error}`)
        yield* writeStatus(
          check,
          withVerified(check, status, now, {
            status: "False",
            reason: conditionReasons.InvalidSpec,
            message,
          }),
        )
        return yield* new TerminalError({ message })
      }
      const spec = parsed.data.spec
      const ns = check.metadata.namespace
      const timeoutMs = parseDuration(spec.timeout)
      if (typeof timeoutMs !== "number") {
        // Unreachable after parseBackupCheck; the type says a duration may fail to parse, so say so.
        return yield* new TerminalError({ message: `invalid spec: spec.timeout: ${timeoutMs.error}` })
      }

      if (spec.suspend) {
        const { nextRunTime: _dropped, ...rest } = status
        yield* writeStatus(
          check,
          withVerified(check, rest, now, {
            status: "Unknown",
            reason: conditionReasons.Suspended,
            message: "verification is suspended",
          }),
        )
        return {}
      }

      const due = dueRun({
        generation: check.metadata.generation ?? 1,
        schedule: spec.schedule,
        timeZone: spec.timeZone,
        creationTime: new Date(check.metadata.creationTimestamp ?? now).getTime(),
        now,
      })
      let next: BackupCheckStatus = { ...status }
      if (due.nextRunTime !== undefined) next.nextRunTime = iso(due.nextRunTime)
      else delete next.nextRunTime

      // A scheduled check proves itself once right away instead of staying Unknown until its first slot;
      // until a slot has run, a spec change is verified right away too.
      const initialRun =
        !due.run && (status.lastRun === undefined || status.lastRun.runID.startsWith("g"))
          ? { runID: `g${check.metadata.generation ?? 1}` }
          : undefined
      if (!due.run && !initialRun) {
        // Scheduled, and nothing is due yet since creation.
        const waiting = findVerified(status)
          ? next
          : withVerified(check, next, now, {
              status: "Unknown",
              reason: conditionReasons.AwaitingFirstRun,
              message: `first scheduled run at ${next.nextRunTime ?? "an unknown time"}`,
            })
        const stale = applyStaleness(check, waiting, now)
        yield* writeStatus(check, stale.status)
        return requeueAt(now, due.nextRunTime, stale.deadline)
      }

      const run = (due.run ?? initialRun)!
      const jobName = jobNameFor(check.metadata.name, run.runID)
      const { traceID, traceparent } = traceparentFor(check.metadata.uid, run.runID)
      // Every reconcile that works on a run links to the run's own trace.
      yield* linkToTraceparent(traceparent, { "fleetcheck.run.id": run.runID })
      const recorded = status.lastRun?.runID === run.runID ? status.lastRun : undefined
      // A run whose verdict is recorded is finished, whether or not its Job still exists (history
      // limits prune Jobs): the status is the record. Converged reconciles end here without API calls.
      if (recorded && recorded.result !== "Running") {
        const stale = applyStaleness(check, next, now)
        yield* writeStatus(check, stale.status)
        // Level-triggered history: only deletes when the cache holds more finished Jobs than allowed.
        yield* pruneHistory(check, jobName)
        return requeueAt(now, due.nextRunTime, stale.deadline)
      }

      let job = options.jobs
        .byIndex(ownerUidIndex, check.metadata.uid)
        .find((j) => j.metadata?.name === jobName)
      if (!job) {
        const rendered = renderRestoreJob({
          cluster,
          check: parsed.data,
          jobName,
          runID: run.runID,
          timeoutSeconds: Math.max(1, Math.ceil(timeoutMs / 1000)),
          traceparent,
        })
        const created = yield* client
          .request<V1Job>({ method: "POST", path: pathOf(jobs, { namespace: ns }), body: rendered })
          .pipe(
            Effect.map((j) => ({ job: j as V1Job | undefined, error: undefined as string | undefined })),
            Effect.catchIf(isAlreadyExists, () => Effect.succeed({ job: undefined, error: undefined })),
            Effect.catchIf(isRefusal, (e) => Effect.succeed({ job: undefined, error: e.message })),
          )
        if (created.error !== undefined) {
          // The API refused the Job (RBAC, quota, admission, invalid template): say so on the check and retry with backoff.
          yield* writeStatus(
            check,
            withVerified(check, next, now, {
              status: "False",
              reason: conditionReasons.JobCreateFailed,
              message: boundMessage(`creating restore Job ${jobName}: ${created.error}`),
            }),
          )
          return yield* new RestoreJobCreateError({ job: jobName, message: created.error })
        }
        if (created.job) {
          yield* Effect.logInfo("created restore Job").pipe(
            Effect.annotateLogs({ job: jobName, run: run.runID }),
          )
        }
        job = created.job
      }

      if (!recorded) {
        const startTime = job?.metadata?.creationTimestamp
          ? iso(new Date(job.metadata.creationTimestamp).getTime())
          : iso(now)
        next.lastRun = { jobName, runID: run.runID, startTime, result: "Running", traceID }
        const verified = findVerified(status)
        // A new spec generation is not verified by an older run; a scheduled re-run keeps the last verdict meanwhile.
        const stillMeaningful = verified && verified.status !== "Unknown" && spec.schedule !== undefined
        if (!stillMeaningful) {
          next = withVerified(check, next, now, {
            status: "Unknown",
            reason: conditionReasons.RestoreRunning,
            message: `restore of ${spec.backup.name} is running (Job ${jobName})`,
          })
        }
        next = { ...next, observedGeneration: check.metadata.generation ?? 0 }
        yield* writeStatus(check, next)
        return { requeueAfterMs: runningPollMs }
      }

      if (!job) return { requeueAfterMs: 1000 } // created by someone else moments ago; the cache will catch up
      const pods =
        (job.status?.succeeded ?? 0) + (job.status?.failed ?? 0) > 0 || job.status?.conditions?.length
          ? yield* listPods(ns, jobName)
          : []
      const outcome = jobOutcome(job, pods, { backupName: spec.backup.name, startedAt: recorded.startTime })
      if (outcome.phase === "Running") {
        yield* writeStatus(check, applyStaleness(check, next, now).status)
        return { requeueAfterMs: runningPollMs }
      }
      next.lastRun = {
        ...recorded,
        result: outcome.phase,
        ...(outcome.completionTime ? { completionTime: outcome.completionTime } : {}),
      }
      if (outcome.phase === "Succeeded") next.lastSuccessfulTime = outcome.completionTime ?? iso(now)
      next = withVerified(check, next, now, {
        status: outcome.phase === "Succeeded" ? "True" : "False",
        reason: outcome.reason,
        message: outcome.message,
      })
      const stale = applyStaleness(check, next, now)
      const wrote = yield* writeStatus(check, stale.status)
      if (wrote) {
        yield* Effect.logInfo("restore finished").pipe(
          Effect.annotateLogs({
            job: jobName,
            run: run.runID,
            result: outcome.phase,
            reason: outcome.reason,
          }),
        )
        // The verification span covers the Job's lifetime inside the run's trace, next to the spans the
        // restore tool emits under the same TRACEPARENT. Recorded once: by whoever wrote the verdict.
        const parent = spanContextFromTraceparent(traceparent)
        const start = new Date(recorded.startTime)
        const end = new Date(outcome.completionTime ?? iso(now))
        if (parent && !Number.isNaN(start.getTime()) && !Number.isNaN(end.getTime())) {
          yield* recordSpan({
            name: "verification",
            parent,
            startTime: start,
            endTime: end < start ? start : end,
            attributes: {
              "k8s.cluster.name": cluster,
              "k8s.namespace.name": ns,
              "k8s.job.name": jobName,
              "fleetcheck.check.name": check.metadata.name,
              "fleetcheck.run.id": run.runID,
              "fleetcheck.backup.name": spec.backup.name,
              "fleetcheck.result": outcome.phase,
              "fleetcheck.reason": outcome.reason,
            },
            ...(outcome.phase === "Failed" ? { error: `${outcome.reason}: ${outcome.message}` } : {}),
          })
        }
      }
      yield* pruneHistory(check, jobName)
      return requeueAt(now, due.nextRunTime, stale.deadline)
    })
}
