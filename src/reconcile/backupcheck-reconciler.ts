// The BackupCheck reconciler: level-triggered and idempotent, keyed by (cluster, namespace, name), with
// the anatomy of the seed article. It reads the whole desired state from the member's caches every
// time; deterministic Job names and optimistic concurrency make stale caches and two hubs harmless.
// The run rules it applies are ADR 0004's; the pure parts live in schedule.ts, runs.ts, run-identity.ts.
//
//   NotFound                          → done, once its sandboxes are deleted (the API confirms it is gone)
//   deletionTimestamp                 → delete this check's Jobs and sandboxes; drop the finalizer once
//                                       the sandboxes are gone (bounded by sandboxCleanupTimeoutMs)
//   no finalizer                      → add it
//   invalid spec                      → Verified=False/InvalidSpec, terminal (a spec edit brings it back)
//   runs not yet recorded             → record them first, oldest first: a finished Job's verdict; a
//                                       Running run whose Job vanished → Failed/RestoreJobMissing
//   suspended                         → Verified=Unknown/Suspended, no new run
//   a new run is due, another active  → Forbid: wait (a scheduled slot that passes is skipped: Event
//                                       RunSkipped); Replace: delete it, Failed/RunSuperseded, go on
//   a new run is due                  → create its Job (AlreadyExists of our own Job is success; of a
//                                       foreign one, Verified=False/NameConflict and backoff); with
//                                       spec.sandbox, first its namespace, NetworkPolicy, quota, limits
//   run in flight                     → requeue after the poll interval (Job events usually come first)
//   otherwise                         → staleness, prune recorded history, delete sandboxes past their
//                                       validation window and orphans, requeue at the next slot, the
//                                       staleness deadline or the next sandbox deletion
// A sandbox's Jobs have no ownerReference (it cannot cross namespaces): they are the check's when they
// carry its uid label and sit in the sandbox their run id names (ADR 0009).
// Status is written once per step that must be durable, as a merge patch of exactly what changed (null
// removes a field), carrying the resourceVersion it was computed from: a converged reconcile sends
// nothing, and a decision made from a stale cache fails with Conflict instead of landing.
import type { V1EnvVar, V1Job, V1Namespace, V1Pod } from "@kubernetes/client-node"
import { Clock, Effect, Schema } from "effect"
import {
  type BackupCheck,
  type BackupCheckStatus,
  type ConditionReason,
  conditionReasons,
  conditionTypes,
  eventReasons,
  type LastRun,
  maxPhaseMessageLength,
  type Phase,
  type SandboxSpec,
  type SandboxStatus,
} from "../api/backupcheck.ts"
import {
  type Condition,
  findCondition,
  removeStatusCondition,
  setStatusCondition,
  toKubeTime,
} from "../api/condition.ts"
import {
  finalizerName,
  labelBackupCheckUid,
  labelRun,
  labelSandbox,
  reportingController,
} from "../api/names.ts"
import { parseDuration } from "../api/syntax.ts"
import { agentFailureReasons } from "../api/termination-message.ts"
import { type ReconcileRequest, type ReconcileResult, TerminalError } from "../engine/controller.ts"
import type { StoreView } from "../engine/informer/store.ts"
import { isAlreadyExists, isConflict, isNotFound, KubeApiError, type KubeClient } from "../kube/client.ts"
import {
  backupChecks,
  events,
  jobs,
  type Kind,
  limitRanges,
  namespaces,
  networkPolicies,
  pathOf,
  pods,
  resourceQuotas,
} from "../kube/resources.ts"
import { linkToTraceparent, recordSpan, spanContextFromTraceparent } from "../observability/tracing.ts"
import { backupNameEnv, type CachedJob } from "./cached-job.ts"
import { boundHistory, withRun } from "./history.ts"
import { boundMessage, jobOutcome } from "./job-outcome.ts"
import { mergePatchOf } from "./merge-patch.ts"
import { evaluateObjectives, lastFinishedRun } from "./objectives.ts"
import { derivedCheck } from "./per-object.ts"
import { annotationSpecHash, renderRestoreJob } from "./restore-job.ts"
import {
  jobNameFor,
  labelValueFor,
  runIDForGeneration,
  traceparentFor,
  validationJobNameFor,
} from "./run-identity.ts"
import { createdAt, jobPhase, jobsToPrune, newerRuns, runIDOf } from "./runs.ts"
import {
  cleanupStep,
  limitRangeBody,
  renderSandbox,
  sandboxAnnotations,
  sandboxCheckUid,
  sandboxLabels,
  sandboxNamespaceFor,
  sandboxPodSecurity,
} from "./sandbox.ts"
import { dueRun } from "./schedule.ts"
import {
  createRestore,
  deleteRestore,
  isVeleroAbsent,
  listBackups,
  liveRestore,
  restoresOfCheck,
  sandboxReadiness,
  veleroAbsent,
} from "./velero-client.ts"
import {
  chooseBackup,
  isOurRestore,
  isRestoreInFlight,
  recoveryPointOf,
  restoreBody,
  restoreNameFor,
  restorePhaseOutcome,
  type VeleroRestoreObject,
} from "./velero-restore.ts"

/** The Job cache must be indexed by the uid of each Job's controller owner under this name. */
export const ownerUidIndex = "owner-uid"
/** The Job and namespace caches must index sandbox objects by their check's uid label under this name. */
export const sandboxUidIndex = "sandbox-check-uid"
/** The namespace cache must index sandboxes by their check's `<namespace>/<name>` under this name. */
export const sandboxKeyIndex = "sandbox-check-key"

export interface BackupCheckReconcilerOptions {
  readonly cluster: string
  readonly client: KubeClient
  readonly checks: StoreView<BackupCheck>
  readonly jobs: StoreView<CachedJob>
  /**
   * Sandbox namespaces (labelled fleetcheck.io/sandbox=true), indexed by sandboxUidIndex and
   * sandboxKeyIndex; undefined for a member scoped to namespaces, which cannot have sandboxes.
   */
  readonly namespaces: StoreView<V1Namespace> | undefined
  /** How long a deleted check's finalizer waits for its sandboxes to go before it is released anyway. */
  readonly sandboxCleanupTimeoutMs: number
  /** Age at which a sandbox of no recorded run and no active Job counts as an orphan. */
  readonly sandboxOrphanGraceMs: number
  /** Backstop poll while a Job runs, in case a Job event is missed (the hub's configuration has the default). */
  readonly runningPollMs: number
  /** The restore agent's image, for checks with spec.restore. */
  readonly agentImage: string
  /** How long a check with spec.restore.velero waits before it looks again for Velero on a member without it. */
  readonly veleroNotInstalledPollMs: number
  /**
   * A scheduled slot was skipped under concurrencyPolicy Forbid (also recorded as an Event on the
   * check). Called once per slot per hub process, and not when another hub recorded it first.
   */
  readonly onRunSkipped: (namespace: string, name: string) => void
  /**
   * A run's verdict was written (its record as lastRun and history hold it): called once per run by the
   * hub process that wrote it, for the restore duration histogram.
   */
  readonly onRunRecorded: (namespace: string, name: string, run: LastRun, traceparent: string) => void
}

/**
 * The restore Job could not be created: the API server refused it (RBAC, quota, admission, invalid
 * template; reason JobCreateFailed) or its name is taken by a Job this check does not control
 * (NameConflict). Shown on the check; the controller retries with per-item exponential backoff.
 */
export class RestoreJobCreateError extends Schema.TaggedError<RestoreJobCreateError>()(
  "RestoreJobCreateError",
  {
    job: Schema.String,
    reason: Schema.Literals([conditionReasons.JobCreateFailed, conditionReasons.NameConflict]),
    message: Schema.String,
  },
) {}

const checkPath = (namespace: string, name: string, subresource?: string) =>
  pathOf(backupChecks, { namespace, name, subresource })
const jobPath = (namespace: string, name: string) => pathOf(jobs, { namespace, name })

/** The API server refused the request itself (invalid, forbidden, quota): retrying alone will not fix it. */
const isRefusal = (e: unknown): e is KubeApiError =>
  e instanceof KubeApiError && [400, 403, 422].includes(e.status)

const ignoreNotFound = <A, R>(e: Effect.Effect<A, unknown, R>) =>
  e.pipe(Effect.catchIf(isNotFound, () => Effect.void))

/** Verified reasons that are a run's verdict (about the spec hash of the run that set them). */
const verdictReasons: ReadonlySet<string> = new Set<ConditionReason>([
  conditionReasons.RestoreSucceeded,
  conditionReasons.RestoreFailed,
  conditionReasons.ChecksumMismatch,
  conditionReasons.RestoreTimedOut,
  conditionReasons.RestoreOOMKilled,
  conditionReasons.RestoreJobMissing,
  conditionReasons.RunSuperseded,
  conditionReasons.VerificationStale,
  conditionReasons.BackupNotRestorable,
  conditionReasons.RestorePartiallyFailed,
  ...agentFailureReasons,
])
const isVerdict = (c: Condition | undefined): c is Condition =>
  c !== undefined && verdictReasons.has(c.reason)

/** Verified states that say nothing about any run: a scheduled check proves itself once after them. */
const noRunStates: ReadonlySet<string> = new Set<ConditionReason>([
  conditionReasons.Suspended,
  conditionReasons.InvalidSpec,
  conditionReasons.AwaitingFirstRun,
  conditionReasons.VeleroNotInstalled,
])

const objectiveTypes = [conditionTypes.RestoreTimeObjectiveMet, conditionTypes.DataAgeObjectiveMet] as const
const isObjectiveCondition = (c: Condition) =>
  c.type === conditionTypes.RestoreTimeObjectiveMet || c.type === conditionTypes.DataAgeObjectiveMet

const hasSandbox = (run: LastRun) => run.sandbox !== undefined

/** Velero's namespace of a check with spec.restore.velero, read from the cached object as it is. */
const veleroNamespaceOf = (check: BackupCheck): string | undefined => {
  const velero = (check.spec as { restore?: { velero?: { namespace?: unknown } } } | undefined)?.restore
    ?.velero
  if (velero === undefined) return undefined
  const ns = velero.namespace
  return typeof ns === "string" && /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/.test(ns) && ns.length <= 63
    ? ns
    : "velero"
}

const findVerified = (status: BackupCheckStatus) => findCondition(status.conditions, conditionTypes.Verified)

const controlledBy = (job: CachedJob, uid: string) =>
  (job.metadata?.ownerReferences ?? []).some((r) => r.controller === true && r.uid === uid)

const ownerOf = (job: CachedJob) => {
  const owner = job.metadata?.ownerReferences?.find((r) => r.controller === true)
  return owner
    ? `controlled by ${owner.kind} ${owner.name} (uid ${owner.uid})`
    : "not controlled by any object"
}

/** What a successful restore hands its validation Job, in the Job's env. */
const restoreOutputs = (run: LastRun, restore: Verdict): V1EnvVar[] => [
  { name: "FLEETCHECK_RESTORE_JOB", value: run.jobName },
  { name: "FLEETCHECK_RESTORE_MESSAGE", value: restore.message },
  { name: "FLEETCHECK_RESTORE_COMPLETION_TIME", value: restore.completionTime ?? "" },
  { name: "FLEETCHECK_RESTORE_DATA_TIMESTAMP", value: restore.dataTimestamp ?? "" },
  { name: "FLEETCHECK_RESTORE_COUNTS", value: JSON.stringify(restore.counts ?? {}) },
]

/** The backup a Job restores, from the contract env the hub gave its first container. */
const backupNameOf = (job: CachedJob): string | undefined => {
  const value = job.spec?.template?.spec?.containers?.[0]?.env?.find((e) => e.name === backupNameEnv)?.value
  return value !== undefined && value.length > 0 && value.length <= 253 ? value : undefined
}

/** spec.startWindow in ms (0 without one; the parse already refused a bad one). */
const startWindowMs = (window: string | undefined): number => {
  if (window === undefined) return 0
  const ms = parseDuration(window)
  return typeof ms === "number" ? ms : 0
}

/** events.k8s.io wants MicroTime: exactly six fractional digits. */
const microTime = (ms: number) => new Date(ms).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z")

/** A decided run: what is written to lastRun, and the verdict's reason and message. */
interface Verdict {
  readonly phase: "Succeeded" | "Failed"
  readonly reason: string
  readonly message: string
  readonly completionTime: string | undefined
  /** From the Job's structured termination message. */
  readonly dataTimestamp?: string | undefined
  readonly counts?: Readonly<Record<string, number>> | undefined
  readonly recoveryPoint?: { readonly id: string; readonly time: string } | undefined
  /** The run's phases when it had more than its restore (a validation); else the restore's alone. */
  readonly phases?: ReadonlyArray<Phase> | undefined
}

/** A phase record of a decided (or running) phase; messages are bounded for status. */
const phaseRecord = (
  name: Phase["name"],
  startTime: string,
  verdict: Verdict | undefined,
  completionTime?: string,
): Phase => ({
  name,
  result: verdict?.phase ?? "Running",
  ...(verdict ? { reason: verdict.reason } : {}),
  startTime,
  ...(completionTime !== undefined ? { completionTime } : {}),
  ...(verdict ? { message: boundMessage(verdict.message, maxPhaseMessageLength) } : {}),
  ...(verdict?.dataTimestamp !== undefined ? { dataTimestamp: verdict.dataTimestamp } : {}),
  ...(verdict?.counts !== undefined ? { counts: { ...verdict.counts } } : {}),
  ...(verdict?.recoveryPoint !== undefined ? { recoveryPoint: { ...verdict.recoveryPoint } } : {}),
})

/** A recorded phase read back as the verdict it was (the restore of a run whose validation runs). */
const verdictOfPhase = (phase: Phase): Verdict | undefined =>
  phase.result === "Running"
    ? undefined
    : {
        phase: phase.result,
        reason: phase.reason ?? "",
        message: phase.message ?? "",
        completionTime: phase.completionTime,
        ...(phase.dataTimestamp !== undefined ? { dataTimestamp: phase.dataTimestamp } : {}),
        ...(phase.counts !== undefined ? { counts: phase.counts } : {}),
        ...(phase.recoveryPoint !== undefined ? { recoveryPoint: phase.recoveryPoint } : {}),
      }

/**
 * How many passes of one check may wait for the cache to show the reconciler's own last write (about
 * a second each, or an event each) before one decides from the cache as it is and risks a Conflict.
 */
const maxOwnWriteWaits = 10

export const makeBackupCheckReconciler = (options: BackupCheckReconcilerOptions) => {
  const { client, cluster, runningPollMs } = options
  // Skipped slots already reported by this process, by check uid: one Event and one callback per slot.
  const reportedSkips = new Map<string, string>()

  // The resourceVersions this process's own writes replaced, by check key, until the cache shows
  // another: a pass that starts from one of them would decide from a check older than the hub's own
  // last write, and its write could only fail with Conflict. Such a pass waits instead; the watch event
  // of that write brings the key back. Each entry lives from a write until the next pass of its key
  // that proceeds, and a key waits at most `maxOwnWriteWaits` passes: waiting is only an optimisation
  // (the old way, a write that fails with Conflict and a retry, stays correct), so it must never hold
  // a check for good, whatever the cache does.
  const replaced = new Map<string, { readonly versions: string[]; waits: number }>()

  /** A merge patch of `check` (or its status), every body carrying the resourceVersion it was computed from. */
  const patchCheck = (check: BackupCheck, subresource: "status" | undefined, body: unknown) => {
    const { namespace, name, resourceVersion } = check.metadata
    return client
      .request<BackupCheck>({
        method: "PATCH",
        path: checkPath(namespace, name, subresource),
        body,
        contentType: "application/merge-patch+json",
      })
      .pipe(
        Effect.map((written) => {
          // A patch that changed nothing the API server keeps (a field the schema prunes, a value
          // equal once defaulted) leaves the resourceVersion as it was: no event will follow, and
          // the cache already holds what was written. Only a version the write replaced is awaited.
          if (resourceVersion !== undefined && written.metadata?.resourceVersion !== resourceVersion) {
            const key = `${namespace}/${name}`
            const entry = replaced.get(key)
            if (entry === undefined) replaced.set(key, { versions: [resourceVersion], waits: 0 })
            else entry.versions.push(resourceVersion)
          }
          return written
        }),
      )
  }

  /**
   * Writes the status through the subresource: the merge patch from what the check holds to `status`
   * (nulls remove fields), with the check's resourceVersion, so a decision made from a stale cache
   * fails with Conflict. Nothing is sent when nothing changed. Returns the check as written.
   */
  const writeStatus = (check: BackupCheck, status: BackupCheckStatus) => {
    const patch = mergePatchOf(check.status ?? {}, status)
    return patch === undefined ? Effect.succeed(check) : sendStatusPatch(check, patch)
  }
  const sendStatusPatch = (check: BackupCheck, patch: Exclude<ReturnType<typeof mergePatchOf>, undefined>) =>
    patchCheck(check, "status", {
      metadata: { resourceVersion: check.metadata.resourceVersion },
      status: patch,
    })

  const cleanup = Effect.fnUntraced(function* (check: BackupCheck, now: number) {
    if (!(check.metadata.finalizers ?? []).includes(finalizerName)) return {}
    for (const job of options.jobs.byIndex(ownerUidIndex, check.metadata.uid)) {
      yield* deleteJob(job, { uid: job.metadata?.uid }).pipe(Effect.catchIf(isConflict, () => Effect.void))
    }
    // Velero's Restores live in Velero's namespace: found by the check's uid label, not by the cache.
    // One Velero is still working on is left until it settles (isRestoreInFlight), for at most
    // sandboxCleanupTimeoutMs: then it is deleted anyway (Velero may be down, and never settle it).
    const veleroNs = veleroNamespaceOf(check)
    const since = Date.parse(check.metadata.deletionTimestamp ?? "")
    const withinCleanupTimeout = !(now - since >= options.sandboxCleanupTimeoutMs)
    let restoresInFlight: string[] = []
    if (veleroNs !== undefined) {
      const restores = yield* restoresOfCheck(client, veleroNs, check.metadata.uid).pipe(
        Effect.catch((e) =>
          Effect.logWarning("listing the check's Velero Restores failed").pipe(
            Effect.annotateLogs({ error: String(e) }),
            Effect.as([] as VeleroRestoreObject[]),
          ),
        ),
      )
      const left = restores.filter((r) => !r.metadata.deletionTimestamp)
      restoresInFlight = withinCleanupTimeout
        ? left.filter(isRestoreInFlight).map((r) => r.metadata.name)
        : []
      for (const r of left)
        if (!restoresInFlight.includes(r.metadata.name))
          yield* dropRestore(veleroNs, r.metadata.name, r.metadata.uid)
    }
    if (options.namespaces !== undefined) {
      // The sandboxes go with the check (their Jobs with them). Asked of the API, not the cache: one
      // created a moment ago may not be cached yet. The finalizer waits for them, for at most
      // sandboxCleanupTimeoutMs; after that the sweeper keeps deleting what is left (ADR 0009).
      const left = yield* liveSandboxes(check.metadata.uid)
      for (const n of left) if (!n.metadata?.deletionTimestamp) yield* deleteNamespace(n)
      if (left.length > 0) {
        if (withinCleanupTimeout) {
          yield* Effect.logInfo("waiting for sandboxes to be deleted").pipe(
            Effect.annotateLogs({ sandboxes: left.map((n) => n.metadata?.name).join(",") }),
          )
          return { requeueAfterMs: 2000 }
        }
        yield* Effect.logWarning(
          "sandboxes still present after the sandbox cleanup timeout; removing the finalizer (the sweeper deletes them)",
        ).pipe(Effect.annotateLogs({ sandboxes: left.map((n) => n.metadata?.name).join(",") }))
      }
    }
    if (restoresInFlight.length > 0) {
      yield* Effect.logInfo("waiting for Velero to settle its Restores before deleting them").pipe(
        Effect.annotateLogs({ restores: restoresInFlight.join(",") }),
      )
      return { requeueAfterMs: 2000 }
    }
    yield* Effect.logInfo("deleted restore Jobs and sandboxes; removing finalizer")
    yield* ignoreNotFound(
      patchCheck(check, undefined, {
        metadata: {
          resourceVersion: check.metadata.resourceVersion,
          finalizers: (check.metadata.finalizers ?? []).filter((f) => f !== finalizerName),
        },
      }),
    )
    return {}
  })

  /** Deletes a Job only if it is still the object the cache showed (preconditions); NotFound is done. */
  const deleteJob = (job: CachedJob, preconditions: { uid?: string | undefined; resourceVersion?: string }) =>
    ignoreNotFound(
      client.request({
        method: "DELETE",
        path: jobPath(job.metadata?.namespace ?? "", job.metadata?.name ?? ""),
        body: { apiVersion: "v1", kind: "DeleteOptions", propagationPolicy: "Background", preconditions },
      }),
    )

  /** Deletes a Velero Restore; a failure is logged and retried by a later pass, never fails this one. */
  const dropRestore = (namespace: string, name: string, uid?: string) =>
    deleteRestore(client, namespace, name, uid).pipe(
      Effect.tap(() => Effect.logInfo("deleted Velero Restore").pipe(Effect.annotateLogs({ restore: name }))),
      Effect.catch((e) =>
        Effect.logWarning("deleting a Velero Restore failed").pipe(
          Effect.annotateLogs({ restore: name, error: String(e) }),
        ),
      ),
    )

  /** Deletes a sandbox namespace if it is still the one seen (uid precondition); gone or changed is done. */
  const deleteNamespace = (n: V1Namespace) =>
    ignoreNotFound(
      client.request({
        method: "DELETE",
        path: pathOf(namespaces, { name: n.metadata?.name ?? "" }),
        body: {
          apiVersion: "v1",
          kind: "DeleteOptions",
          propagationPolicy: "Background",
          preconditions: { uid: n.metadata?.uid },
        },
      }),
    ).pipe(Effect.catchIf(isConflict, () => Effect.void))

  /** A check's sandboxes as the API server has them now (LIST by the check's uid label). */
  const liveSandboxes = (uid: string) =>
    client
      .request<{ items: V1Namespace[] }>({
        method: "GET",
        path: pathOf(namespaces),
        query: { labelSelector: `${labelSandbox}=true,${labelBackupCheckUid}=${uid}` },
      })
      .pipe(Effect.map((l) => l.items ?? []))

  /**
   * The sweeper for a check the cache does not hold: its sandboxes (found by its key) are deleted once
   * the API confirms the check is gone or was re-created (another uid). A check the cache is merely
   * behind on is waited for.
   */
  const sweepGone = Effect.fnUntraced(function* (namespace: string, name: string) {
    const candidates = (options.namespaces?.byIndex(sandboxKeyIndex, `${namespace}/${name}`) ?? []).filter(
      (n) => !n.metadata?.deletionTimestamp,
    )
    if (candidates.length === 0) return {}
    const live = yield* liveNamed<BackupCheck>(backupChecks, name, namespace)
    for (const n of candidates) {
      if (live !== undefined && sandboxCheckUid(n) === live.metadata.uid) continue
      yield* Effect.logInfo("deleting an orphan sandbox (its check is gone)").pipe(
        Effect.annotateLogs({ sandbox: n.metadata?.name }),
      )
      yield* deleteNamespace(n)
    }
    return live !== undefined ? { requeueAfterMs: 1000 } : {}
  })

  /** A Job's own Pods, by the uid label the Job controller sets: an older Job of the same name has other Pods. */
  const listPods = (job: CachedJob) =>
    client
      .request<{ items: V1Pod[] }>({
        method: "GET",
        path: pathOf(pods, { namespace: job.metadata?.namespace ?? "" }),
        query: { labelSelector: `batch.kubernetes.io/controller-uid=${job.metadata?.uid ?? ""}` },
      })
      .pipe(Effect.map((l) => l.items ?? []))

  /** One object as the API server has it now, by name: a LIST, which the hub's RBAC allows (GET it does not). */
  const liveNamed = <T>(kind: Kind, name: string, namespace?: string) =>
    client
      .request<{ items: T[] }>({
        method: "GET",
        path: pathOf(kind, { namespace }),
        query: { fieldSelector: `metadata.name=${name}` },
      })
      .pipe(Effect.map((l) => l.items?.[0]))

  /** The Job of that name as the API server has it now. */
  const liveJob = (ns: string, name: string) => liveNamed<V1Job>(jobs, name, ns)

  /** The verdict of a finished Job, from its conditions and its Pods' termination state. */
  const readVerdict = (job: CachedJob, run: LastRun, backupName: string, phase: Phase["name"] = "restore") =>
    Effect.map(listPods(job), (jobPods): Verdict => {
      const startedAt = phase === "validation" ? toKubeTime(createdAt(job)) : run.startTime
      const outcome = jobOutcome(job, jobPods, { backupName, startedAt, phase })
      return outcome.phase === "Running"
        ? {
            phase: "Failed",
            reason:
              phase === "validation" ? conditionReasons.ValidationFailed : conditionReasons.RestoreFailed,
            message: "no result",
            completionTime: undefined,
          }
        : outcome
    })

  /** Records the RunSkipped Event for a slot once; its deterministic name dedups hubs and restarts. */
  const reportSkip = Effect.fnUntraced(function* (
    check: BackupCheck,
    slot: { readonly runID: string; readonly scheduledTime?: number | undefined },
    blocking: LastRun,
    now: number,
  ) {
    const uid = check.metadata.uid
    if (reportedSkips.get(uid) === slot.runID) return
    const ns = check.metadata.namespace
    const slotTime = slot.scheduledTime === undefined ? slot.runID : toKubeTime(slot.scheduledTime)
    const note = `scheduled run at ${slotTime} skipped: run ${blocking.runID} (Job ${blocking.jobName}) was still running (concurrencyPolicy Forbid)`
    const created = yield* client
      .request({
        method: "POST",
        path: pathOf(events, { namespace: ns }),
        body: {
          apiVersion: "events.k8s.io/v1",
          kind: "Event",
          metadata: { name: `${jobNameFor(check.metadata.name, slot.runID)}.skipped`, namespace: ns },
          eventTime: microTime(now),
          reportingController,
          reportingInstance: `${reportingController}/${cluster}`.slice(0, 128),
          action: "Schedule",
          reason: eventReasons.RunSkipped,
          type: "Warning",
          note,
          regarding: {
            apiVersion: check.apiVersion,
            kind: check.kind,
            namespace: ns,
            name: check.metadata.name,
            uid,
          },
          related: {
            apiVersion: "batch/v1",
            kind: "Job",
            namespace: blocking.sandbox?.namespace ?? ns,
            name: blocking.jobName,
          },
        },
      })
      .pipe(
        Effect.as(true),
        Effect.catchIf(isAlreadyExists, () => Effect.succeed(false)),
        Effect.catch((e) =>
          Effect.logWarning("recording the RunSkipped Event failed").pipe(
            Effect.annotateLogs({ run: slot.runID, error: String(e) }),
            Effect.as(true),
          ),
        ),
      )
    if (reportedSkips.size >= 10_000) reportedSkips.clear()
    reportedSkips.set(uid, slot.runID)
    yield* Effect.logInfo("scheduled run skipped").pipe(
      Effect.annotateLogs({ run: slot.runID, blockedBy: blocking.runID }),
    )
    if (created) options.onRunSkipped(ns, check.metadata.name)
  })

  const requeueAt = (now: number, ...times: Array<number | undefined>): ReconcileResult => {
    // the earliest finite time (a loop: every reconcile ends here)
    let next: number | undefined
    for (const t of times) {
      if (t !== undefined && Number.isFinite(t) && (next === undefined || t < next)) next = t
    }
    return next === undefined ? {} : { requeueAfterMs: Math.max(1000, next - now + 500) }
  }

  // The clock is read before the pass starts: a `yield*` for it would suspend and resume the pass's
  // large generator once more on every reconcile.
  return (req: ReconcileRequest): Effect.Effect<ReconcileResult, unknown> =>
    Clock.clockWith((clock) => reconcilePass(req, clock.currentTimeMillisUnsafe()))

  function reconcilePass(req: ReconcileRequest, now: number): Effect.Effect<ReconcileResult, unknown> {
    return Effect.gen(function* () {
      const key = `${req.namespace}/${req.name}`
      const cached = options.checks.get(key)
      if (replaced.size > 0) {
        const ownWrites = replaced.get(key)
        // The cache has not yet seen the hub's own last write of this check: nothing decided from it
        // could be written. The write's event requeues the key; the poll is for a watch that broke.
        if (
          ownWrites !== undefined &&
          cached !== undefined &&
          ownWrites.waits < maxOwnWriteWaits &&
          ownWrites.versions.includes(cached.metadata.resourceVersion ?? "")
        ) {
          ownWrites.waits++
          return { requeueAfterMs: 1000 }
        }
        if (ownWrites !== undefined && ownWrites.waits >= maxOwnWriteWaits)
          yield* Effect.logInfo(
            "the check cache never showed this reconciler's last write; deciding from it anyway",
          ).pipe(
            Effect.annotateLogs({
              resourceVersion: cached?.metadata.resourceVersion ?? "",
              waits: ownWrites.waits,
            }),
          )
        replaced.delete(key)
      }
      if (!cached) return yield* sweepGone(req.namespace, req.name)
      if (cached.metadata.deletionTimestamp) return yield* cleanup(cached, now)
      /** The check as last read or written: every write carries its resourceVersion. */
      let check: BackupCheck = cached

      if (!(check.metadata.finalizers ?? []).includes(finalizerName)) {
        check = yield* patchCheck(check, undefined, {
          metadata: {
            resourceVersion: check.metadata.resourceVersion,
            finalizers: [...(check.metadata.finalizers ?? []), finalizerName],
          },
        })
      }
      const generation = check.metadata.generation ?? 1
      const ns = check.metadata.namespace
      const uid = check.metadata.uid

      /** Sets Verified (observedGeneration: this generation; lastTransitionTime only on a status change). */
      const withVerified = (
        status: BackupCheckStatus,
        condition: Omit<Condition, "type" | "lastTransitionTime" | "observedGeneration">,
      ): BackupCheckStatus => {
        const result = setStatusCondition(
          status.conditions ?? [],
          { type: conditionTypes.Verified, ...condition, observedGeneration: generation },
          toKubeTime(now),
        )
        // a converged pass sets the same Verified again: the status as it is, not a copy to diff
        if (!result.changed && status.observedGeneration === generation) return status
        return { ...status, observedGeneration: generation, conditions: result.conditions }
      }

      /** Verified=False/InvalidSpec with `message`, then a terminal error: no retry until the spec changes. */
      const refuseSpec = (message: string) =>
        Effect.gen(function* () {
          yield* writeStatus(
            check,
            withVerified(check.status ?? {}, {
              status: "False",
              reason: conditionReasons.InvalidSpec,
              message,
            }),
          )
          return yield* new TerminalError({ message })
        })
      const parsed = derivedCheck(check)
      if (!parsed.success) return yield* refuseSpec(boundMessage(`invalid spec: ${parsed.error}`))
      const spec = parsed.spec
      /** spec.restore.velero: the run's restore is a Velero Restore, not a Job. */
      const velero = spec.restore?.velero
      const timeoutMs = parseDuration(spec.timeout)
      if (typeof timeoutMs !== "number") {
        // Unreachable after parseBackupCheck; the type says a duration may fail to parse, so say so.
        return yield* new TerminalError({ message: `invalid spec: spec.timeout: ${timeoutMs.error}` })
      }
      if (spec.sandbox !== undefined && options.namespaces === undefined)
        return yield* refuseSpec(
          "invalid spec: spec.sandbox needs a member registered cluster-wide: a member scoped to namespaces (fleetcheck.io/namespaces) cannot create a namespace per run",
        )
      const timeoutSeconds = Math.max(1, Math.ceil(timeoutMs / 1000))
      const runTimeoutMs: number = timeoutMs
      // The cached status is the record and the base of every write; an invalid one (dropped by the
      // parse with a warning) is replaced.
      const recorded: BackupCheckStatus = parsed.statusValid ? (check.status ?? {}) : {}
      const specHash = parsed.specHash
      /** What a run verified; a run recorded before hashes existed is taken as this generation's if it was recorded for it. */
      const hashOf = (run: LastRun | undefined) =>
        run === undefined
          ? undefined
          : (run.specHash ?? (recorded.observedGeneration === generation ? specHash : undefined))

      const checkRef = { name: check.metadata.name, namespace: ns, uid }
      /** A Job in its run's sandbox, labelled with this check's uid: ours without an ownerReference. */
      const inItsSandbox = (job: CachedJob) =>
        sandboxCheckUid(job) === uid &&
        job.metadata?.namespace === sandboxNamespaceFor(checkRef, runIDOf(job) ?? "")
      const ours = (job: CachedJob) => controlledBy(job, uid) || inItsSandbox(job)
      const inSandboxes = options.jobs.byIndex(sandboxUidIndex, uid)
      // byIndex returns a fresh array: without sandbox Jobs (most checks) it is the list as it is
      const owned =
        inSandboxes.length === 0
          ? options.jobs.byIndex(ownerUidIndex, uid)
          : [...options.jobs.byIndex(ownerUidIndex, uid), ...inSandboxes.filter(inItsSandbox)]
      /** Where a run's Jobs live: its sandbox, or the check's namespace. */
      const runNs = (run: LastRun) => run.sandbox?.namespace ?? ns
      const windowMs = (() => {
        const ms = parseDuration(spec.sandbox?.validationWindow ?? "0s")
        return typeof ms === "number" ? ms : 0
      })()
      /** Sandboxes deleted in this pass, and deletes the API refused (name → message). */
      const deletedNow = new Set<string>()
      const cleanupRefused = new Map<string, { readonly reason: string; readonly message: string }>()
      /** The earliest time a sandbox is due for deletion or becomes an orphan. */
      let sandboxWake: number | undefined
      // replaced, never changed in place: it starts as the record itself
      let next: BackupCheckStatus = recorded
      /** Verdicts decided in this pass: logged, and given their verification span once written. */
      const decided: Array<{ readonly run: LastRun; readonly verdict: Verdict; readonly finished: LastRun }> =
        []

      /**
       * lastRun becomes `run`. Verified keeps a verdict only while lastRun verified the same spec: a run
       * of another spec takes it back to Unknown (RestoreRunning while the run is in flight).
       */
      const setLastRun = (run: LastRun) => {
        const previous = next.lastRun
        next = { ...next, lastRun: run }
        if (previous !== undefined && hashOf(previous) !== hashOf(run) && isVerdict(findVerified(next))) {
          next = withVerified(next, {
            status: "Unknown",
            reason: conditionReasons.RestoreRunning,
            message: `restore of ${spec.backup.name} for a changed spec is pending (run ${run.runID})`,
          })
        }
      }
      /**
       * The run's result goes to lastRun, with its restore phase, and to the front of history; Verified
       * follows it when the run verified the current spec.
       */
      const recordVerdict = (run: LastRun, verdict: Verdict) => {
        const completionTime = verdict.completionTime ?? toKubeTime(now)
        const phases = verdict.phases
          ? [...verdict.phases]
          : [phaseRecord("restore", run.startTime, verdict, completionTime)]
        // The restore phase's recovery point is the run's: what a reader of lastRun wants to see first.
        const recoveryPoint = phases.find((p) => p.name === "restore")?.recoveryPoint
        const finished: LastRun = {
          ...run,
          result: verdict.phase,
          completionTime,
          phases,
          ...(recoveryPoint !== undefined ? { recoveryPoint } : {}),
        }
        setLastRun(finished)
        next = { ...next, history: withRun(next.history, finished, spec.historyLimit) }
        if (verdict.phase === "Succeeded") next = { ...next, lastSuccessfulTime: completionTime }
        if (hashOf(run) === specHash) {
          next = withVerified(next, {
            status: verdict.phase === "Succeeded" ? "True" : "False",
            reason: verdict.reason,
            message: verdict.message,
          })
        }
        decided.push({ run, verdict, finished })
      }
      const runningRecord = (job: CachedJob, runID: string): LastRun => {
        const startTime = job.metadata?.creationTimestamp ? toKubeTime(createdAt(job)) : toKubeTime(now)
        const backupName = backupNameOf(job)
        return {
          jobName: job.metadata?.name ?? jobNameFor(check.metadata.name, runID),
          runID,
          ...(backupName !== undefined ? { backupName } : {}),
          startTime,
          result: "Running",
          phases: [{ name: "restore", result: "Running", startTime }],
          traceID: traceparentFor(uid, runID).traceID,
          ...(job.metadata?.annotations?.[annotationSpecHash]
            ? { specHash: job.metadata.annotations[annotationSpecHash] }
            : {}),
          ...(job.metadata?.namespace !== undefined && job.metadata.namespace !== ns
            ? { sandbox: { namespace: job.metadata.namespace, cleanup: "Pending" as const } }
            : {}),
        }
      }
      /**
       * Each recorded run's sandbox cleanup as the cluster shows it (ADR 0009): derived from the run and
       * the namespace cache on every write, so it survives restarts and failovers. A delete due but not
       * sent in this pass keeps the state it had.
       */
      const withSandbox = (run: LastRun): LastRun => {
        const sandbox = run.sandbox
        if (sandbox === undefined || options.namespaces === undefined) return run
        const live = options.namespaces.get(sandbox.namespace)
        if (sandbox.cleanup === "Deleted" && live === undefined) return run
        const step = cleanupStep(run, sandbox, live, windowMs, now)
        const refused = cleanupRefused.get(sandbox.namespace)
        const status: SandboxStatus =
          step.action === "none" || deletedNow.has(sandbox.namespace)
            ? step.status
            : refused !== undefined
              ? { ...step.status, cleanup: "Failed", reason: refused.reason, message: refused.message }
              : sandbox.cleanup === "Failed"
                ? { ...sandbox, deleteAfter: step.status.deleteAfter }
                : { ...step.status, cleanup: "Pending" }
        return { ...run, sandbox: status }
      }
      const withSandboxes = (status: BackupCheckStatus): BackupCheckStatus => {
        if (options.namespaces === undefined) return status
        // runs without a sandbox (every run of most checks) are kept as they are: no copies to diff
        if (status.lastRun?.sandbox === undefined && !status.history?.some(hasSandbox)) return status
        const lastRun = status.lastRun && withSandbox(status.lastRun)
        const history = status.history?.map(withSandbox)
        return {
          ...status,
          ...(lastRun !== undefined ? { lastRun } : {}),
          ...(history !== undefined ? { history } : {}),
        }
      }
      /** observedGeneration on the status and on Verified: the generation this status describes. */
      const finalize = (withHistory: BackupCheckStatus): BackupCheckStatus => {
        const status = withSandboxes(withObjectives(boundHistory(withHistory, spec.historyLimit)))
        const verified = findVerified(status)
        return verified
          ? withVerified(status, {
              status: verified.status,
              reason: verified.reason,
              message: verified.message,
            })
          : { ...status, observedGeneration: generation }
      }
      /**
       * The objective conditions (ADR 0009) for the last finished run of this spec; conditions of
       * objectives the spec no longer sets are removed. observedGeneration as Verified's.
       */
      const withObjectives = (status: BackupCheckStatus): BackupCheckStatus => {
        // most checks set no objectives and hold none of their conditions: nothing to evaluate or remove
        if (spec.objectives === undefined && !status.conditions?.some(isObjectiveCondition)) return status
        const finished = lastFinishedRun(status)
        const run = finished !== undefined && hashOf(finished) === specHash ? finished : undefined
        const evaluated = evaluateObjectives(spec.objectives, run)
        let conditions = status.conditions ?? []
        let changed = false
        for (const type of objectiveTypes) {
          const condition = evaluated.find((c) => c.type === type)
          const result =
            condition === undefined
              ? removeStatusCondition(conditions, type)
              : setStatusCondition(
                  conditions,
                  { ...condition, observedGeneration: generation },
                  toKubeTime(now),
                )
          conditions = result.conditions
          changed ||= result.changed
        }
        return changed ? { ...status, conditions } : status
      }
      /** Writes the status; verdicts decided so far get their verification span once they are written. */
      // Plain functions returning effects: built per reconcile, and Effect.fnUntraced's wrapper costs
      // more to build than these cost to run when converged. write is only ever called as
      // `yield* write(...)`, so its patch is computed when the write runs.
      const write = (status: BackupCheckStatus) => {
        const patch = mergePatchOf(check.status ?? {}, finalize(status))
        // converged: nothing to send and no verdict to report
        if (patch === undefined && decided.length === 0) return Effect.void
        return Effect.gen(function* () {
          if (patch !== undefined) check = yield* sendStatusPatch(check, patch)
          for (const { run, verdict, finished } of decided.splice(0)) {
            options.onRunRecorded(
              ns,
              check.metadata.name,
              finished,
              traceparentFor(uid, run.runID).traceparent,
            )
            yield* verificationSpan(run, verdict)
          }
        })
      }
      const verificationSpan = (run: LastRun, verdict: Verdict) =>
        Effect.gen(function* () {
          yield* Effect.logInfo("restore finished").pipe(
            Effect.annotateLogs({
              job: run.jobName,
              run: run.runID,
              result: verdict.phase,
              reason: verdict.reason,
            }),
          )
          // The verification span covers the Job's lifetime inside the run's trace, next to the spans the
          // restore tool emits under the same TRACEPARENT. Recorded once: by whoever wrote the verdict.
          const parent = spanContextFromTraceparent(traceparentFor(uid, run.runID).traceparent)
          const start = new Date(run.startTime)
          const end = new Date(verdict.completionTime ?? toKubeTime(now))
          if (!parent || Number.isNaN(start.getTime()) || Number.isNaN(end.getTime())) return
          yield* recordSpan({
            name: "verification",
            parent,
            startTime: start,
            endTime: end < start ? start : end,
            attributes: {
              "k8s.cluster.name": cluster,
              "k8s.namespace.name": ns,
              "k8s.job.name": run.jobName,
              "fleetcheck.check.name": check.metadata.name,
              "fleetcheck.run.id": run.runID,
              "fleetcheck.backup.name": spec.backup.name,
              "fleetcheck.result": verdict.phase,
              "fleetcheck.reason": verdict.reason,
            },
            ...(verdict.phase === "Failed" ? { error: `${verdict.reason}: ${verdict.message}` } : {}),
          })
        })
      // Every reconcile that works on a run links to the run's own trace.
      let linked: Set<string> | undefined // made by the first link: most passes link nothing
      const linkRun = (runID: string) => {
        if (linked?.has(runID)) return Effect.void
        linked ??= new Set()
        linked.add(runID)
        return linkToTraceparent(traceparentFor(uid, runID).traceparent, { "fleetcheck.run.id": runID })
      }

      // 1. Record what happened to runs the status does not hold yet, oldest first, before deciding
      //    the next run: a run that ends after the next slot is never lost.
      const current = next.lastRun
      if (current?.result === "Running" && velero !== undefined) {
        yield* linkRun(current.runID)
        if ((yield* settleVelero(current)) === "waitForCache") return { requeueAfterMs: 1000 }
      } else if (current?.result === "Running") {
        yield* linkRun(current.runID)
        const job = owned.find((j) => j.metadata?.name === current.jobName)
        if (job !== undefined) {
          if (
            jobPhase(job) !== "Active" &&
            (yield* settle(current, () =>
              readVerdict(job, current, current.backupName ?? spec.backup.name),
            )) === "waitForCache"
          )
            return { requeueAfterMs: 1000 }
        } else {
          // Not in the cache: the Job informer may be behind the BackupCheck informer. Ask the API.
          const live = yield* liveJob(runNs(current), current.jobName)
          if (live !== undefined && ours(live)) return { requeueAfterMs: 1000 }
          recordVerdict(current, {
            phase: "Failed",
            reason: conditionReasons.RestoreJobMissing,
            message: boundMessage(
              live === undefined
                ? `restore Job ${current.jobName} of run ${current.runID} disappeared before its result was read (deleted by hand or by another controller); it is not re-created`
                : `restore Job ${current.jobName} of run ${current.runID} was replaced by a Job this check does not control (${ownerOf(live)})`,
            ),
            completionTime: undefined,
          })
        }
      }
      for (const job of newerRuns(next.lastRun, owned)) {
        const runID = runIDOf(job)
        if (runID === undefined) continue // newerRuns only returns labelled Jobs
        yield* linkRun(runID)
        const run = runningRecord(job, runID)
        if (jobPhase(job) === "Active") setLastRun(run)
        else if (
          (yield* settle(run, () => readVerdict(job, run, run.backupName ?? spec.backup.name))) ===
          "waitForCache"
        )
          return { requeueAfterMs: 1000 }
      }

      // 2. Decide the next run.
      const active = owned.filter((j) => jobPhase(j) === "Active" && !j.metadata?.deletionTimestamp)
      // A sandbox's Jobs stay while people may inspect it, and go with it.
      const jobsToDelete = () =>
        jobsToPrune(
          recorded.lastRun,
          owned.filter((j) => j.metadata?.namespace === ns),
          spec,
        )
      const prune = (doomed: ReadonlyArray<CachedJob>) =>
        Effect.forEach(
          doomed,
          (job) =>
            deleteJob(job, { uid: job.metadata?.uid }).pipe(Effect.catchIf(isConflict, () => Effect.void)),
          { discard: true },
        )
      /** Deletes the Restore of a run of this (Velero) check, with its sandbox. */
      const dropRunRestore = (runID: string | undefined) =>
        velero === undefined || runID === undefined
          ? Effect.void
          : dropRestore(velero.namespace, restoreNameFor(check.metadata.name, runID))
      /**
       * Restores whose sandbox is already gone while the record still says it was going (a hub that
       * stopped between the namespace's delete and the Restore's): deleted in the pass that records the
       * sandbox Deleted, so no Restore outlives its sandbox.
       */
      const veleroSweep = () => {
        if (velero === undefined || options.namespaces === undefined) return undefined
        const store = options.namespaces
        const runs = [...(next.lastRun ? [next.lastRun] : []), ...(next.history ?? [])].filter(
          (r) =>
            r.result !== "Running" &&
            r.sandbox !== undefined &&
            r.sandbox.cleanup !== "Deleted" &&
            store.get(r.sandbox.namespace) === undefined &&
            Date.parse(r.sandbox.deleteAfter ?? r.completionTime ?? "") <= now,
        )
        return runs.length === 0
          ? undefined
          : Effect.forEach(runs, (r) => dropRunRestore(r.runID), { discard: true })
      }
      /**
       * The sweeper's pass for this check: deletes the sandboxes of finished runs whose validation
       * window has passed, and orphans: a sandbox of another uid under this check's name (a re-created
       * check), or of no recorded run and no active Job of ours (a superseded run whose record the
       * history limit dropped, a hub that died between creating a sandbox and its run's Job) once it is
       * older than sandboxOrphanGraceMs, so another hub's run being started is left alone.
       */
      const sweepSandboxes = () => {
        const store = options.namespaces
        if (store === undefined) return undefined
        const byUid = store.byIndex(sandboxUidIndex, uid)
        const byKey = store.byIndex(sandboxKeyIndex, `${ns}/${check.metadata.name}`)
        // most checks (every converged one without spec.sandbox) have none: nothing to look at
        if (byUid.length === 0 && byKey.length === 0) return undefined
        const sandboxes = [...byUid, ...byKey]
        return Effect.gen(function* () {
          const runs = [...(next.lastRun ? [next.lastRun] : []), ...(next.history ?? [])]
          const recordedRuns = new Map(
            runs.flatMap((r) => (r.sandbox ? [[r.sandbox.namespace, r] as const] : [])),
          )
          const seen = new Map<string, V1Namespace>()
          for (const n of sandboxes) seen.set(n.metadata?.name ?? "", n)
          const wake = (t: number) => {
            if (sandboxWake === undefined || t < sandboxWake) sandboxWake = t
          }
          for (const [name, n] of seen) {
            const run = recordedRuns.get(name)
            if (n.metadata?.deletionTimestamp) {
              // A Velero run's Restore goes with its sandbox (a hub may have stopped in between).
              if (sandboxCheckUid(n) === uid)
                yield* dropRunRestore(run?.runID ?? n.metadata.labels?.[labelRun])
              continue
            }
            let due = false
            if (sandboxCheckUid(n) !== uid) due = true
            else if (run !== undefined && run.sandbox !== undefined) {
              const step = cleanupStep(run, run.sandbox, n, windowMs, now)
              if (step.action === "delete") due = true
              else if (step.wakeAt !== undefined) wake(step.wakeAt)
            } else if (!owned.some((j) => j.metadata?.namespace === name && jobPhase(j) === "Active")) {
              const orphanAt =
                (Date.parse(String(n.metadata?.creationTimestamp ?? "")) || now) +
                options.sandboxOrphanGraceMs
              if (now >= orphanAt) due = true
              else wake(orphanAt)
            }
            if (!due) continue
            const result = yield* deleteNamespace(n).pipe(Effect.result)
            if (result._tag === "Success") {
              deletedNow.add(name)
              if (sandboxCheckUid(n) === uid)
                yield* dropRunRestore(run?.runID ?? n.metadata?.labels?.[labelRun])
              yield* Effect.logInfo(
                run ? "deleting a finished run's sandbox" : "deleting an orphan sandbox",
              ).pipe(Effect.annotateLogs({ sandbox: name, ...(run ? { run: run.runID } : {}) }))
            } else {
              const e = result.failure
              const reason = e instanceof KubeApiError && e.status === 403 ? "Forbidden" : "DeleteFailed"
              cleanupRefused.set(name, {
                reason,
                message: boundMessage(`deleting sandbox ${name}: ${String(e)}`),
              })
              wake(now + 30_000)
              yield* Effect.logWarning("deleting a sandbox failed").pipe(
                Effect.annotateLogs({ sandbox: name, error: String(e) }),
              )
            }
          }
        })
      }
      /**
       * The end of a pass: the sweeper's pass, the status write, then (with `pruning`) the Jobs past the
       * history limits, as one effect: a converged pass, with none of the three to do, is one
       * Effect.void, not three suspensions of this generator.
       */
      const finish = (status: BackupCheckStatus, pruning: boolean) => {
        const sandboxSweep = sweepSandboxes()
        const restoreSweep = veleroSweep()
        const sweep =
          restoreSweep === undefined
            ? sandboxSweep
            : sandboxSweep === undefined
              ? restoreSweep
              : Effect.andThen(sandboxSweep, restoreSweep)
        const doomed = pruning ? jobsToDelete() : []
        // the write is computed after the sweep: it reports the sweep's deletes and refusals
        const writeAndPrune = () => {
          const written = write(status)
          return doomed.length === 0 ? written : Effect.andThen(written, prune(doomed))
        }
        return sweep === undefined ? writeAndPrune() : Effect.andThen(sweep, Effect.suspend(writeAndPrune))
      }
      const inFlight = () => next.lastRun?.result === "Running"

      if (spec.suspend) {
        const { nextRunTime: _none, ...rest } = next
        yield* finish(
          withVerified(rest, {
            status: "Unknown",
            reason: conditionReasons.Suspended,
            message: "verification is suspended",
          }),
          true,
        )
        return inFlight() ? { requeueAfterMs: runningPollMs } : requeueAt(now, sandboxWake)
      }

      const last = next.lastRun
      const due = dueRun({
        generation,
        schedule: spec.schedule,
        timeZone: spec.timeZone,
        creationTime: parsed.createdAt || now,
        lastRun: last,
        concurrencyPolicy: spec.concurrencyPolicy,
        startWindowMs: startWindowMs(spec.startWindow),
        checkKey: uid,
        now,
      })
      if (due.nextRunTime !== undefined) next = { ...next, nextRunTime: toKubeTime(due.nextRunTime) }
      else if (next.nextRunTime !== undefined) {
        const { nextRunTime: _none, ...rest } = next
        next = rest
      }
      // A scheduled check proves the current spec once right away when nothing speaks for it: no run
      // of this spec, or a Verified that is about no run (suspended, invalid). Otherwise it follows the
      // schedule, and a schedule edit alone starts nothing.
      const verified = findVerified(next)
      const covered =
        last !== undefined &&
        hashOf(last) === specHash &&
        (last.result === "Running" || (verified !== undefined && !noRunStates.has(verified.reason)))
      const generationRun = runIDForGeneration(generation)
      const target =
        spec.schedule !== undefined && !covered && last?.runID !== generationRun
          ? { runID: generationRun }
          : due.run

      if (target !== undefined && target.runID !== last?.runID) {
        const jobName = jobNameFor(check.metadata.name, target.runID)
        const { traceparent } = traceparentFor(uid, target.runID)
        yield* linkRun(target.runID)
        const blocking = active.filter((j) => j.metadata?.name !== jobName)
        // A Velero run in its restore phase has no Job: its Running record is what blocks.
        const veleroBlocking =
          velero !== undefined &&
          blocking.length === 0 &&
          next.lastRun?.result === "Running" &&
          next.lastRun.runID !== target.runID
        if ((blocking.length > 0 || veleroBlocking) && spec.concurrencyPolicy === "Forbid") {
          // The new run waits for the active one (its verdict is recorded when it ends).
          yield* finish(applyStaleness(awaitingRun(next, target.runID)).status, true)
          return { requeueAfterMs: runningPollMs }
        }
        if (blocking.length > 0 || veleroBlocking) {
          // Replace: only the Jobs the cache showed, as it showed them; one that changed meanwhile
          // (finished, say) fails the precondition and is reconsidered on the retry.
          for (const job of blocking) {
            yield* deleteJob(job, {
              uid: job.metadata?.uid,
              ...(job.metadata?.resourceVersion ? { resourceVersion: job.metadata.resourceVersion } : {}),
            })
          }
          const superseded = next.lastRun
          if (
            superseded?.result === "Running" &&
            (veleroBlocking || blocking.some((j) => runIDOf(j) === superseded.runID))
          ) {
            recordVerdict(superseded, {
              phase: "Failed",
              reason: conditionReasons.RunSuperseded,
              message: `run ${superseded.runID} was superseded by run ${target.runID} before it finished (concurrencyPolicy Replace)`,
              completionTime: undefined,
            })
          }
          yield* Effect.logInfo("superseded active restore Jobs").pipe(
            Effect.annotateLogs({
              run: target.runID,
              superseded: blocking.map((j) => j.metadata?.name).join(","),
            }),
          )
        }
        // What was decided is written before the new run starts.
        if (decided.length > 0 || blocking.length > 0 || veleroBlocking) yield* write(next)

        const keepVerdict = isVerdict(findVerified(next)) && hashOf(next.lastRun) === specHash
        const targetNs = spec.sandbox ? sandboxNamespaceFor(checkRef, target.runID) : ns
        if (velero !== undefined) {
          const started = yield* startVelero(target.runID, velero)
          if (started.kind === "wait") return { requeueAfterMs: 1000 }
          if (started.kind === "absent") {
            yield* write(
              withVerified(next, {
                status: "False",
                reason: conditionReasons.VeleroNotInstalled,
                message: `Velero is not installed in this cluster: it serves no velero.io/v1 Backups and Restores (install Velero and its CRDs); looked for again every ${Math.round(options.veleroNotInstalledPollMs / 1000)}s`,
              }),
            )
            return { requeueAfterMs: options.veleroNotInstalledPollMs }
          }
          if (started.kind === "refused") recordVerdict(started.run, started.verdict)
          else setLastRun(started.run)
        } else {
          let job = owned.find((j) => j.metadata?.name === jobName && j.metadata?.namespace === targetNs)
          if (job === undefined) {
            const conflict = options.jobs.get(`${targetNs}/${jobName}`)
            if (conflict !== undefined && !ours(conflict)) job = yield* nameConflict(conflict)
            else {
              // The sandbox, and its NetworkPolicy before anything runs in it, come first.
              if (spec.sandbox && !(yield* ensureSandbox(target.runID, spec.sandbox)))
                return { requeueAfterMs: 1000 }
              job = yield* createJob(jobName, target.runID, traceparent, targetNs)
            }
          }
          const run = runningRecord(job, target.runID)
          const restoreJob = job
          if (jobPhase(job) === "Active") setLastRun(run)
          else if (
            (yield* settle(run, () => readVerdict(restoreJob, run, run.backupName ?? spec.backup.name))) ===
            "waitForCache"
          )
            return { requeueAfterMs: 1000 }
        }
        if (next.lastRun?.result === "Running" && !keepVerdict) {
          // A new spec is not verified by an older run; a scheduled re-run of the same spec keeps the
          // last verdict meanwhile (ADR 0004).
          next = withVerified(next, {
            status: "Unknown",
            reason: conditionReasons.RestoreRunning,
            message: `restore of ${spec.backup.name} is running (${velero ? "Velero Restore" : "Job"} ${jobName})`,
          })
        }
        yield* finish(applyStaleness(next).status, false)
        return requeueAt(now, now + runningPollMs - 500, due.nextRunTime)
      }

      // 3. Nothing to start: a run is in flight, or the next one is not due yet.
      if (due.skipped !== undefined && last !== undefined) {
        // Reported while the blocking run is active, or in the pass that recorded its end; a converged
        // check sends nothing.
        if (last.result === "Running" || decided.some((d) => d.run.runID === last.runID)) {
          yield* reportSkip(check, due.skipped, last, now)
        }
      }
      next = awaitingRun(next, undefined)
      if (last === undefined && findVerified(next) === undefined) {
        next = withVerified(next, {
          status: "Unknown",
          reason: conditionReasons.AwaitingFirstRun,
          message: `first scheduled run at ${next.nextRunTime ?? "an unknown time"}`,
        })
      }
      const stale = applyStaleness(next)
      yield* finish(stale.status, true)
      return inFlight()
        ? requeueAt(now, now + runningPollMs - 500, due.nextRunTime, sandboxWake)
        : requeueAt(now, due.nextRunTime, stale.deadline, sandboxWake)

      /** Verified=False once the last success is older than maxStaleness; returns when that will happen. */
      function applyStaleness(status: BackupCheckStatus) {
        const maxStale = spec.maxStaleness ? parseDuration(spec.maxStaleness) : undefined
        if (typeof maxStale !== "number") return { status, deadline: undefined }
        const lastSuccess = status.lastSuccessfulTime ? Date.parse(status.lastSuccessfulTime) : undefined
        const since = lastSuccess ?? (Date.parse(check.metadata.creationTimestamp ?? "") || now)
        const deadline = since + maxStale
        if (now < deadline) return { status, deadline }
        const current = findVerified(status)
        if (current?.status === "False" && current.reason !== conditionReasons.VerificationStale) {
          return { status, deadline: undefined } // already failing for a more specific reason
        }
        const message = lastSuccess
          ? `last successful restore ${toKubeTime(lastSuccess)} is older than maxStaleness ${spec.maxStaleness}`
          : `no successful restore within maxStaleness ${spec.maxStaleness} of creation`
        return {
          status: withVerified(status, {
            status: "False",
            reason: conditionReasons.VerificationStale,
            message,
          }),
          deadline: undefined,
        }
      }

      /**
       * Verified while no new run starts. A verdict about another spec than the current one goes back
       * to Unknown; a run in flight without a verdict for this spec says RestoreRunning.
       */
      function awaitingRun(status: BackupCheckStatus, waitingRunID: string | undefined): BackupCheckStatus {
        const last = status.lastRun
        if (last === undefined) return status
        const verified = findVerified(status)
        const aboutThisSpec = hashOf(last) === specHash
        const running = last.result === "Running"
        if (aboutThisSpec && (isVerdict(verified) || !running)) return status
        if (!aboutThisSpec && !running && !isVerdict(verified)) return status
        return withVerified(status, {
          status: "Unknown",
          reason: conditionReasons.RestoreRunning,
          message: !running
            ? `restore of ${spec.backup.name} for this spec has not run yet`
            : aboutThisSpec
              ? `restore of ${spec.backup.name} is running (${velero ? "Velero Restore" : "Job"} ${last.jobName})`
              : `run ${last.runID} of the previous spec is still running; ${spec.backup.name} is verified ${waitingRunID ? `by run ${waitingRunID} ` : ""}when it ends`,
        })
      }

      /**
       * A run whose restore Job finished: records its verdict, or (a successful restore, and the run's
       * spec has a validation or its validation Job exists) moves on to the validation phase: creates
       * the validation Job, keeps the run Running while it runs, and records both phases when it ends.
       * "waitForCache" when the validation Job exists in the API but not yet in the cache.
       */
      function settle(run: LastRun, readRestore: () => Effect.Effect<Verdict, unknown>) {
        return Effect.gen(function* () {
          const backupName = run.backupName ?? spec.backup.name
          const recordedRestore = run.phases?.find((p) => p.name === "restore")
          const recordedValidation = run.phases?.find((p) => p.name === "validation")
          // While the validation runs, the restore's verdict is the one recorded: no Pod LIST per poll.
          const restore =
            (recordedValidation !== undefined && recordedRestore !== undefined
              ? verdictOfPhase(recordedRestore)
              : undefined) ?? (yield* readRestore())
          const restoreEnd = restore.completionTime ?? toKubeTime(now)
          const restorePhase = phaseRecord("restore", run.startTime, restore, restoreEnd)
          const vName = validationJobNameFor(check.metadata.name, run.runID)
          const jobNs = runNs(run)
          let vJob = owned.find((j) => j.metadata?.name === vName && j.metadata?.namespace === jobNs)
          if (restore.phase === "Failed") {
            recordVerdict(run, restore)
            return "settled" as const
          }
          if (vJob === undefined && recordedValidation !== undefined) {
            const live = yield* liveJob(jobNs, vName)
            if (live !== undefined && ours(live)) return "waitForCache" as const
            recordVerdict(run, {
              phase: "Failed",
              reason: conditionReasons.RestoreJobMissing,
              message: boundMessage(
                `validation Job ${vName} of run ${run.runID} disappeared before its result was read; it is not re-created`,
              ),
              completionTime: undefined,
              phases: [
                restorePhase,
                { ...recordedValidation, result: "Failed", reason: conditionReasons.RestoreJobMissing },
              ],
            })
            return "settled" as const
          }
          if (vJob === undefined) {
            if (spec.validation === undefined || hashOf(run) !== specHash) {
              recordVerdict(run, restore)
              return "settled" as const
            }
            // The validation has what is left of spec.timeout: the run as a whole keeps its bound.
            const left = runTimeoutMs - (Date.parse(restoreEnd) - Date.parse(run.startTime))
            const conflict = options.jobs.get(`${jobNs}/${vName}`)
            vJob =
              conflict !== undefined && !ours(conflict)
                ? yield* nameConflict(conflict)
                : yield* createJob(vName, run.runID, traceparentFor(uid, run.runID).traceparent, jobNs, {
                    timeoutSeconds: Math.max(
                      1,
                      Math.ceil((Number.isFinite(left) ? left : runTimeoutMs) / 1000),
                    ),
                    env: restoreOutputs(run, restore),
                  })
          }
          const vStart = vJob.metadata?.creationTimestamp ? toKubeTime(createdAt(vJob)) : toKubeTime(now)
          if (jobPhase(vJob) === "Active") {
            setLastRun({
              ...run,
              result: "Running",
              phases: [restorePhase, phaseRecord("validation", vStart, undefined)],
            })
            return "settled" as const
          }
          const validation = yield* readVerdict(vJob, run, backupName, "validation")
          const vEnd = validation.completionTime ?? toKubeTime(now)
          recordVerdict(run, {
            ...validation,
            completionTime: vEnd,
            phases: [restorePhase, phaseRecord("validation", vStart, validation, vEnd)],
          })
          return "settled" as const
        })
      }

      /**
       * A Velero run in flight: its restore phase is the Restore's status.phase (then, with
       * waitForReady, the restored workloads' availability); once decided, settle goes on as for a Job
       * (the validation phase). While the validation runs, the restore's verdict is the recorded one.
       */
      function settleVelero(run: LastRun) {
        if (run.phases?.some((p) => p.name === "validation"))
          return settle(run, () => Effect.die("the restore phase is recorded"))
        return Effect.gen(function* () {
          const verdict = yield* veleroRestoreVerdict(run)
          if (verdict === undefined) {
            setLastRun(run)
            return "settled" as const
          }
          return yield* settle(run, () => Effect.succeed(verdict))
        })
      }

      /** The restore phase's verdict of a Velero run, or undefined while it is still running. */
      function veleroRestoreVerdict(run: LastRun) {
        return Effect.gen(function* () {
          const veleroNs = velero?.namespace ?? "velero"
          const live = yield* liveRestore(client, veleroNs, run.jobName)
          const timedOut = now - Date.parse(run.startTime) > runTimeoutMs
          if (
            isVeleroAbsent(live) ||
            live === undefined ||
            !isOurRestore(live, uid, labelValueFor(run.runID))
          ) {
            const why = isVeleroAbsent(live)
              ? "the cluster no longer serves Velero's Restores (Velero uninstalled?)"
              : live === undefined
                ? "it was deleted before its result was read (by hand or by another controller)"
                : "it was replaced by a Restore of another check or run"
            return {
              phase: "Failed",
              reason: conditionReasons.RestoreJobMissing,
              message: boundMessage(
                `Velero Restore ${run.jobName} of run ${run.runID} is gone: ${why}; it is not re-created`,
              ),
              completionTime: undefined,
            } satisfies Verdict
          }
          const outcome = restorePhaseOutcome(live)
          if (outcome.phase === "Running") {
            if (!timedOut) return undefined
            return {
              phase: "Failed",
              reason: conditionReasons.RestoreTimedOut,
              message: boundMessage(
                `Velero Restore ${run.jobName} was still ${outcome.veleroPhase} when spec.timeout ${spec.timeout} ran out`,
              ),
              completionTime: undefined,
            } satisfies Verdict
          }
          const recoveryPoint = recoveryPointOf(live)
          const verdict: Verdict = {
            phase: outcome.phase,
            reason: outcome.reason,
            message: outcome.message,
            completionTime: outcome.completionTime,
            counts: outcome.counts,
            ...(recoveryPoint !== undefined ? { recoveryPoint, dataTimestamp: recoveryPoint.time } : {}),
          }
          if (outcome.phase === "Failed" || velero?.waitForReady === false) return verdict
          const sandboxNs = run.sandbox?.namespace ?? sandboxNamespaceFor(checkRef, run.runID)
          const ready = yield* sandboxReadiness(client, sandboxNs)
          if (!ready.ready) {
            if (!timedOut) return undefined
            return {
              ...verdict,
              phase: "Failed",
              reason: conditionReasons.RestoreTimedOut,
              message: boundMessage(
                `Velero Restore ${run.jobName} Completed, but the restored workloads in ${sandboxNs} were not available when spec.timeout ${spec.timeout} ran out: ${ready.waitingFor.join(", ")}`,
              ),
              completionTime: undefined,
            } satisfies Verdict
          }
          return {
            ...verdict,
            message: boundMessage(
              `${outcome.message}; ${ready.counts.deployments ?? 0} Deployments and ${ready.counts.statefulSets ?? 0} StatefulSets available in ${sandboxNs}`,
            ),
            // the restore is done when its workloads are up, not before Velero finished
            completionTime: toKubeTime(now),
            counts: { ...outcome.counts, ...ready.counts },
          } satisfies Verdict
        })
      }

      /** The Running record of a Velero run from its Restore (restart-safe: nothing but the Restore is read). */
      function veleroRunningRecord(restore: VeleroRestoreObject | undefined, runID: string): LastRun {
        const created = Date.parse(restore?.metadata.creationTimestamp ?? "")
        const startTime = toKubeTime(Number.isFinite(created) ? created : now)
        const hash = restore?.metadata.annotations?.[annotationSpecHash]
        return {
          jobName: restoreNameFor(check.metadata.name, runID),
          runID,
          startTime,
          result: "Running",
          phases: [{ name: "restore", result: "Running", startTime }],
          traceID: traceparentFor(uid, runID).traceID,
          ...(restore === undefined
            ? { specHash }
            : hash !== undefined && /^[0-9a-f]{16}$/.test(hash)
              ? { specHash: hash }
              : {}),
          sandbox: { namespace: sandboxNamespaceFor(checkRef, runID), cleanup: "Pending" },
        }
      }

      /**
       * Starts a Velero run: its Restore if it exists already (another hub, a status write lost after
       * the create), else the Backup is chosen, the sandbox made, and the Restore created (AlreadyExists:
       * read back). "refused" is a run that failed before any Restore (no restorable Backup).
       */
      function startVelero(runID: string, v: NonNullable<typeof velero>) {
        return Effect.gen(function* () {
          const name = restoreNameFor(check.metadata.name, runID)
          const runLabel = labelValueFor(runID)
          const refused = (what: string) => (e: KubeApiError) =>
            startRefused(name, conditionReasons.JobCreateFailed, boundMessage(`${what}: ${e.message}`))
          const conflict = (r: VeleroRestoreObject) =>
            startRefused(
              name,
              conditionReasons.NameConflict,
              boundMessage(
                `Velero Restore ${name} in ${v.namespace} already exists and is not this check's run ${runID} (labelled ${labelBackupCheckUid}=${r.metadata.labels?.[labelBackupCheckUid] ?? "<none>"}, ${labelRun}=${r.metadata.labels?.[labelRun] ?? "<none>"}); delete that Restore`,
              ),
            )
          const existing = yield* liveRestore(client, v.namespace, name).pipe(
            Effect.catchIf(isRefusal, refused(`reading Velero Restore ${name}`)),
          )
          if (isVeleroAbsent(existing)) return veleroAbsent
          if (existing !== undefined) {
            if (!isOurRestore(existing, uid, runLabel)) return yield* conflict(existing)
            return { kind: "started" as const, run: veleroRunningRecord(existing, runID) }
          }
          const listed = yield* listBackups(client, v).pipe(
            Effect.catchIf(isRefusal, refused(`listing Velero Backups in ${v.namespace}`)),
          )
          if (isVeleroAbsent(listed)) return veleroAbsent
          const choice = chooseBackup(
            listed.backups,
            v,
            spec.recoveryPoint ?? { policy: "Latest" },
            runID,
            new Date(now),
          )
          if (choice.kind === "refused") {
            const { sandbox: _none, ...run } = veleroRunningRecord(undefined, runID)
            return {
              kind: "refused" as const,
              run,
              verdict: {
                phase: "Failed",
                reason: choice.reason,
                message: boundMessage(choice.message),
                completionTime: undefined,
              } satisfies Verdict,
            }
          }
          // The sandbox, and its NetworkPolicy, before anything is restored into it.
          if (spec.sandbox === undefined || !(yield* ensureSandbox(runID, spec.sandbox)))
            return { kind: "wait" as const }
          const body = restoreBody({
            check: checkRef,
            runID,
            velero: v,
            backup: choice.backup,
            namespaces: choice.namespaces,
            sandboxNamespace: sandboxNamespaceFor(checkRef, runID),
            specHash,
            specHashAnnotation: annotationSpecHash,
          })
          const created = yield* createRestore(client, v.namespace, body).pipe(
            Effect.catchIf(isRefusal, refused(`creating Velero Restore ${name}`)),
          )
          if (isVeleroAbsent(created)) return veleroAbsent
          if (created.kind === "created") {
            yield* Effect.logInfo("created Velero Restore").pipe(
              Effect.annotateLogs({ restore: name, run: runID, backup: choice.backup.metadata.name }),
            )
            return { kind: "started" as const, run: veleroRunningRecord(created.restore, runID) }
          }
          // AlreadyExists: another hub's, or someone else's.
          const live = yield* liveRestore(client, v.namespace, name)
          if (isVeleroAbsent(live)) return veleroAbsent
          if (live === undefined)
            return yield* new RestoreJobCreateError({
              job: name,
              reason: conditionReasons.JobCreateFailed,
              message: `Velero Restore ${name} was reported to exist, then was not found; retrying`,
            })
          if (!isOurRestore(live, uid, runLabel)) return yield* conflict(live)
          return { kind: "started" as const, run: veleroRunningRecord(live, runID) }
        })
      }

      /** POSTs the run's Job. AlreadyExists of our own Job is success; of a foreign one, NameConflict. */
      function createJob(
        jobName: string,
        runID: string,
        traceparent: string,
        jobNs: string,
        validation?: { readonly timeoutSeconds: number; readonly env: ReadonlyArray<V1EnvVar> },
      ) {
        return Effect.gen(function* () {
          const rendered = renderRestoreJob({
            cluster,
            check: { ...check, spec },
            agentImage: options.agentImage,
            jobName,
            runID,
            timeoutSeconds: validation?.timeoutSeconds ?? timeoutSeconds,
            traceparent,
            specHash,
            ...(validation && spec.validation
              ? { validation: { jobTemplate: spec.validation.jobTemplate, env: validation.env } }
              : {}),
            ...(jobNs !== ns
              ? {
                  sandbox: {
                    namespace: jobNs,
                    labels: sandboxLabels(checkRef, runID),
                    annotations: sandboxAnnotations(checkRef),
                  },
                }
              : {}),
          })
          const created = yield* client
            .request<V1Job>({ method: "POST", path: pathOf(jobs, { namespace: jobNs }), body: rendered })
            .pipe(
              Effect.map((job) => ({ job, refused: undefined })),
              Effect.catchIf(isAlreadyExists, () => Effect.succeed({ job: undefined, refused: undefined })),
              Effect.catchIf(isRefusal, (e) => Effect.succeed({ job: undefined, refused: e.message })),
            )
          if (created.refused !== undefined) {
            // The API refused the Job (RBAC, quota, admission, invalid template): say so, retry with backoff.
            const message = boundMessage(`creating restore Job ${jobName}: ${created.refused}`)
            return yield* startRefused(jobName, conditionReasons.JobCreateFailed, message)
          }
          if (created.job !== undefined) {
            yield* Effect.logInfo(validation ? "created validation Job" : "created restore Job").pipe(
              Effect.annotateLogs({ job: jobName, run: runID }),
            )
            return created.job
          }
          // AlreadyExists: ours (another hub, or our cache is behind), or someone else's.
          const live = yield* liveJob(jobNs, jobName)
          if (live === undefined) {
            return yield* new RestoreJobCreateError({
              job: jobName,
              reason: conditionReasons.JobCreateFailed,
              message: `restore Job ${jobName} was reported to exist, then was not found; retrying`,
            })
          }
          return ours(live) ? live : yield* nameConflict(live)
        })
      }

      /**
       * Creates the run's sandbox: the namespace, then its NetworkPolicy (before any Job runs there),
       * quota and limit range. AlreadyExists of our own is success (another hub, a retry); a namespace
       * of that name that is not this check's is a NameConflict. False while a namespace of that name
       * is still being deleted.
       */
      function ensureSandbox(runID: string, sandboxSpec: SandboxSpec) {
        return Effect.gen(function* () {
          // The sandbox enforces the check namespace's Pod Security level, at least baseline.
          const home = yield* liveNamed<V1Namespace>(namespaces, ns)
          const objects = renderSandbox(
            checkRef,
            runID,
            sandboxSpec,
            sandboxPodSecurity(home?.metadata?.labels),
          )
          const name = objects.namespace.metadata?.name ?? ""
          const refused = (what: string) => (e: KubeApiError) =>
            startRefused(
              name,
              conditionReasons.JobCreateFailed,
              boundMessage(`creating ${what} of sandbox ${name}: ${e.message}`),
            )
          const createdNs = yield* client
            .request<V1Namespace>({ method: "POST", path: pathOf(namespaces), body: objects.namespace })
            .pipe(
              Effect.catchIf(isAlreadyExists, () => Effect.succeed(undefined)),
              Effect.catchIf(isRefusal, refused("the namespace")),
            )
          if (createdNs === undefined) {
            const live = yield* liveNamed<V1Namespace>(namespaces, name)
            if (live === undefined) return false
            if (sandboxCheckUid(live) !== uid) {
              const message = boundMessage(
                `sandbox namespace ${name} already exists and is not this BackupCheck's (labelled ${labelBackupCheckUid}=${live.metadata?.labels?.[labelBackupCheckUid] ?? "<none>"}); delete that namespace`,
              )
              return yield* startRefused(name, conditionReasons.NameConflict, message)
            }
            if (live.metadata?.deletionTimestamp) return false
          } else {
            yield* Effect.logInfo("created sandbox").pipe(Effect.annotateLogs({ sandbox: name, run: runID }))
          }
          const inSandbox: ReadonlyArray<readonly [string, typeof networkPolicies, unknown]> = [
            ["the NetworkPolicy", networkPolicies, objects.networkPolicy],
            ...(objects.resourceQuota
              ? [["the ResourceQuota", resourceQuotas, objects.resourceQuota] as const]
              : []),
            ...(objects.limitRange
              ? [["the LimitRange", limitRanges, limitRangeBody(objects.limitRange)] as const]
              : []),
          ]
          for (const [what, kind, body] of inSandbox) {
            yield* client.request({ method: "POST", path: pathOf(kind, { namespace: name }), body }).pipe(
              Effect.catchIf(isAlreadyExists, () => Effect.void),
              Effect.catchIf(isRefusal, refused(what)),
            )
          }
          return true
        })
      }

      /** A run that cannot start: Verified says why, and the error backs the check off. */
      function startRefused(job: string, reason: RestoreJobCreateError["reason"], message: string) {
        return Effect.gen(function* () {
          yield* write(withVerified(next, { status: "False", reason, message }))
          return yield* new RestoreJobCreateError({ job, reason, message })
        })
      }

      /** The run's Job name is taken by a Job this check does not control: say so, and back off. */
      function nameConflict(job: CachedJob) {
        return Effect.gen(function* () {
          const name = job.metadata?.name ?? ""
          const message = boundMessage(
            `restore Job ${name} already exists and is not controlled by this BackupCheck (it is ${ownerOf(job)}); delete or rename that Job`,
          )
          return yield* startRefused(name, conditionReasons.NameConflict, message)
        })
      }
    })
  }
}
