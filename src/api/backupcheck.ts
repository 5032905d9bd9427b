import * as z from "zod"
import { ConditionsSchema, TimestampSchema } from "./condition.ts"
import { apiVersion, backupCheckKind } from "./names.ts"
import { RecoveryPointSpecSchema, RestoreMethodSchema } from "./restore.ts"
import {
  checkTimeZone,
  cronPattern,
  durationPattern,
  formatDuration,
  isCidr,
  maxCidrLength,
  parseDuration,
  parseSchedule,
  shortestIntervalMs,
  timeZonePattern,
} from "./syntax.ts"
import {
  type AgentFailureReason,
  countNamePattern,
  maxCounts,
  RecoveryPointSchema,
} from "./termination-message.ts"

/** The backup a run restored, as the restore tool chose it (spec.recoveryPoint). */
const RecoveryPointRecordSchema = RecoveryPointSchema.describe(
  "The recovery point the run restored (spec.recoveryPoint): the backup's id and when it was taken.",
)

// BackupCheck (fleetcheck.io/v1alpha1, namespaced, in member clusters). These schemas are the one
// source of truth: the hub validates with them and src/api/crd.ts generates the CRD from them.
// Rules zod can state as JSON Schema (types, patterns, bounds, defaults) reach the API server; the
// refinements (croner, Intl, duration bounds) run in the hub only, so the hub rejects what the API
// server lets through, and CEL rules in .meta() cover the cross-field rules for the API server.

export const conditionTypes = {
  Verified: "Verified",
  /** spec.objectives.maxRestoreDuration: the last restore of this spec took at most that long. */
  RestoreTimeObjectiveMet: "RestoreTimeObjectiveMet",
  /** spec.objectives.maxDataAge: the restored data was at most that old when it was verified. */
  DataAgeObjectiveMet: "DataAgeObjectiveMet",
} as const
export type ConditionType = (typeof conditionTypes)[keyof typeof conditionTypes]

/** Reasons of the Verified condition. */
export const conditionReasons = {
  RestoreSucceeded: "RestoreSucceeded",
  RestoreFailed: "RestoreFailed",
  ChecksumMismatch: "ChecksumMismatch",
  RestoreTimedOut: "RestoreTimedOut",
  VerificationStale: "VerificationStale",
  RestoreRunning: "RestoreRunning",
  Suspended: "Suspended",
  JobCreateFailed: "JobCreateFailed",
  ClusterUnreachable: "ClusterUnreachable",
  InvalidSpec: "InvalidSpec",
  /** Scheduled, and no run has been due since creation (Verified=Unknown). */
  AwaitingFirstRun: "AwaitingFirstRun",
  RestoreOOMKilled: "RestoreOOMKilled",
  /** The Job of a run recorded as Running disappeared before its result was read; it is not re-created. */
  RestoreJobMissing: "RestoreJobMissing",
  /** concurrencyPolicy Replace deleted a run's Job for a newer run before it finished. */
  RunSuperseded: "RunSuperseded",
  /** The run's deterministic Job name is taken by a Job this check does not control. */
  NameConflict: "NameConflict",
  /** The restore succeeded and spec.validation's Job proved the restored data. */
  ValidationSucceeded: "ValidationSucceeded",
  /** The restore succeeded, but the validation Job failed: the data is not what it should be. */
  ValidationFailed: "ValidationFailed",
  /** The validation Job did not finish within what was left of spec.timeout. */
  ValidationTimedOut: "ValidationTimedOut",
  // The restore agent's reasons (spec.restore; a custom Job may write them too), from its termination
  // message: agentFailureReasons in termination-message.ts.
  RepositoryUnreachable: "RepositoryUnreachable",
  RepositoryAuthFailed: "RepositoryAuthFailed",
  SnapshotNotFound: "SnapshotNotFound",
  DataCorrupted: "DataCorrupted",
  AssertionFailed: "AssertionFailed",
  RestoreToolFailed: "RestoreToolFailed",
  RecoveryPointNotFound: "RecoveryPointNotFound",
  // spec.restore.velero (SPEC §12), from Velero's own objects (src/reconcile/velero-restore.ts).
  /** The member serves no velero.io/v1 Backups (Velero's CRDs are not installed): no run starts. */
  VeleroNotInstalled: "VeleroNotInstalled",
  /** The chosen Velero Backup is not Completed (its phase is in the message). */
  BackupNotRestorable: "BackupNotRestorable",
  /** Velero's Restore ended PartiallyFailed: some items were not restored. */
  RestorePartiallyFailed: "RestorePartiallyFailed",
} as const satisfies Record<AgentFailureReason, string> & Record<string, string>
export type ConditionReason = (typeof conditionReasons)[keyof typeof conditionReasons]

/** Reasons of the Events the reconciler records on a BackupCheck. */
export const eventReasons = {
  /** concurrencyPolicy Forbid: a scheduled slot passed while an earlier run was still active. */
  RunSkipped: "RunSkipped",
} as const

/** What happens when a run is due while an earlier run's Job is still active (CronJob's field). */
export const concurrencyPolicies = ["Forbid", "Replace"] as const
export type ConcurrencyPolicy = (typeof concurrencyPolicies)[number]

export const runResults = ["Running", "Succeeded", "Failed"] as const
export type RunResult = (typeof runResults)[number]

/** The most runs status.history may keep (spec.historyLimit's maximum). */
export const maxHistoryLimit = 100

export const checksumPattern = /^(sha256:[0-9a-f]{64}|sha512:[0-9a-f]{128}|md5:[0-9a-f]{32})$/

// ---------------------------------------------------------------------------------------------------
// Spec

/** Until a sandboxed agent can have its Secret (ADR 0014 leaves how open), the two are refused together. */
const sandboxWithRestore =
  "sandbox is not available with restore.restic, postgres or etcd yet: the agent reads its credentials Secret in the check's namespace, which a sandbox namespace cannot (docs/adr/0014)"
/** Velero restores into the run's sandbox (namespaceMapping), never over live objects. */
const veleroNeedsSandbox =
  "restore.velero requires sandbox: the Backup's namespaces are restored into the run's sandbox namespace, never over live objects"

/**
 * Why a timeout longer than the schedule's shortest interval is refused (ADR 0004): every run could
 * still be active at its next slot, so with Forbid most slots would be skipped and with Replace every
 * run could be superseded before it ends. The same holds for a start window (ADR 0009): a slot starts
 * anywhere in [slot, slot + window), so the window must be shorter than the interval, and the window
 * plus the timeout must fit in it. Hub-side only: CEL cannot read a cron schedule.
 */
const scheduleOverlap = (spec: {
  readonly schedule?: string | undefined
  readonly timeZone?: string | undefined
  readonly timeout: string
  readonly startWindow?: string | undefined
}): { readonly path: string; readonly message: string } | undefined => {
  if (spec.schedule === undefined) return undefined
  const timeout = parseDuration(spec.timeout)
  const window = spec.startWindow === undefined ? 0 : parseDuration(spec.startWindow)
  const compiled = parseSchedule(spec.schedule, spec.timeZone)
  if (typeof timeout !== "number" || typeof window !== "number" || !compiled.success) return undefined // reported on their own fields
  const interval = shortestIntervalMs(compiled.cron)
  const every = `the shortest interval of schedule "${spec.schedule}" (${formatDuration(interval)})`
  if (window >= interval) {
    return {
      path: "startWindow",
      message: `startWindow ${spec.startWindow} is not shorter than ${every}: a slot's start could pass the next slot; set startWindow below ${formatDuration(interval)}`,
    }
  }
  if (timeout + window <= interval) return undefined
  if (window === 0) {
    return {
      path: "timeout",
      message: `timeout ${spec.timeout} is longer than ${every}: a run could still be active at its next slot; set timeout to at most ${formatDuration(interval)} or schedule less often`,
    }
  }
  return {
    path: "startWindow",
    message: `startWindow ${spec.startWindow} plus timeout ${spec.timeout} is longer than ${every}: a run started late in its window could still be active when the next slot starts; make them add up to at most ${formatDuration(interval)}`,
  }
}

// A Go duration whose value (when the pattern matched) satisfies `ok`; the CEL rule says the same to
// the API server, which compares durations natively.
export const duration = (ok: (ms: number) => boolean, bound: string, rule: string) =>
  z
    .string()
    .max(64)
    .regex(durationPattern, {
      error: (issue) =>
        typeof issue.input === "string" && issue.input.startsWith("-")
          ? "must not be negative"
          : "must be a Go duration like 30m, 1h30m or 45s",
    })
    .superRefine((s, ctx) => {
      if (!durationPattern.test(s)) return
      const ms = parseDuration(s)
      if (typeof ms !== "number") ctx.addIssue({ code: "custom", message: ms.error })
      else if (!ok(ms)) ctx.addIssue({ code: "custom", message: `must be ${bound}` })
    })
    .meta({ "x-kubernetes-validations": [{ rule, message: `must be ${bound}` }] })

export const StringMapSchema = z.record(z.string(), z.string())

export const BackupRefSchema = z
  .strictObject({
    name: z
      .string()
      .min(1)
      .max(253)
      .describe("Name of the backup to verify; passed to the restore Job as FLEETCHECK_BACKUP_NAME."),
    source: z
      .string()
      .min(1)
      .max(4096)
      .optional()
      .describe("Where the backup lives (a URL or path); passed as FLEETCHECK_BACKUP_SOURCE."),
    checksum: z
      .string()
      .regex(checksumPattern, {
        error: "checksum must be sha256:<64 hex>, sha512:<128 hex> or md5:<32 hex>, lower case",
      })
      .optional()
      .describe(
        "Expected checksum, algorithm:lowercase-hex (sha256, sha512, md5); passed as FLEETCHECK_EXPECTED_CHECKSUM.",
      ),
    cluster: z
      .string()
      .min(1)
      .max(253)
      .optional()
      .describe(
        "The cluster the backup was taken in, when it is another one (a cross-cluster drill sets it to the source member); passed as FLEETCHECK_BACKUP_CLUSTER.",
      ),
  })
  .describe("The backup this check verifies.")

// The Job shape stays open (preserve-unknown-fields) so any batch/v1 JobSpec field passes through; only
// what the hub relies on is declared: at least one container, and a Job-compatible restartPolicy.
const ContainerSchema = z
  .looseObject({
    name: z.string().min(1).max(63).describe("Container name."),
    image: z.string().min(1).describe("Container image."),
  })
  .describe("A container (core/v1 Container); the hub adds the FLEETCHECK_* and TRACEPARENT env.")

const PodSpecSchema = z
  .looseObject({
    containers: z.array(ContainerSchema).min(1).describe("The restore containers; at least one."),
    restartPolicy: z
      .enum(["Never", "OnFailure"])
      .default("Never")
      .describe("Never (default) or OnFailure; a Job's pods cannot use Always."),
  })
  .describe("core/v1 PodSpec.")

const PodTemplateSchema = z
  .looseObject({ spec: PodSpecSchema })
  .describe("core/v1 PodTemplateSpec of the restore Job.")

export const JobTemplateSchema = z
  .strictObject({
    metadata: z
      .strictObject({
        labels: StringMapSchema.optional().describe("Labels for the restore Job."),
        annotations: StringMapSchema.optional().describe("Annotations for the restore Job."),
      })
      .optional()
      .describe("Labels and annotations copied to each restore Job."),
    spec: z
      .looseObject({ template: PodTemplateSchema })
      .describe(
        "batch/v1 JobSpec of the restore Job. activeDeadlineSeconds is set from spec.timeout by the hub.",
      ),
  })
  .describe(
    "The restore Job, shaped like a CronJob's jobTemplate. spec.ttlSecondsAfterFinished is dropped: the hub deletes finished Jobs by the history limits, after their result is recorded.",
  )

export const ValidationSchema = z
  .strictObject({
    jobTemplate: JobTemplateSchema.describe(
      "The validation Job, shaped like jobTemplate. It runs after a successful restore, in the same namespace, with the contract env plus the restore's outputs: FLEETCHECK_RESTORE_JOB, FLEETCHECK_RESTORE_MESSAGE, FLEETCHECK_RESTORE_DATA_TIMESTAMP, FLEETCHECK_RESTORE_COUNTS (JSON). Exit 0 means the data is valid.",
    ),
  })
  .describe(
    "Validation as its own phase: proves the restored data, not just a clean exit. Its verdict is ValidationSucceeded, ValidationFailed or ValidationTimedOut; spec.timeout bounds restore and validation together.",
  )

/** A resource quantity as Kubernetes writes it (500m, 4Gi, 10). */
const quantityPattern = /^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$/
/** Resource names: pods, requests.cpu, limits.memory, count/jobs.batch, example.com/gpu. */
const resourceNamePattern = /^[a-z0-9]([-a-z0-9./]*[a-z0-9])?$/
const maxResources = 32

const ResourceListSchema = z
  .record(
    z.string().max(253).regex(resourceNamePattern, { error: "must be a resource name like limits.memory" }),
    z.string().max(32).regex(quantityPattern, { error: "must be a quantity like 500m, 4Gi or 10" }),
  )
  .refine((list) => Object.keys(list).length <= maxResources, { error: `at most ${maxResources} resources` })
  .meta({ maxProperties: maxResources })

export const EgressRuleSchema = z
  .strictObject({
    cidr: z
      .string()
      .max(maxCidrLength)
      .refine(isCidr, { error: "must be an IPv4 or IPv6 CIDR like 10.96.0.10/32 or fd00::/8" })
      .meta({
        "x-kubernetes-validations": [
          { rule: "isCIDR(self)", message: "must be an IPv4 or IPv6 CIDR like 10.96.0.10/32 or fd00::/8" },
        ],
      })
      .describe("Destination addresses (CIDR), e.g. the cluster DNS service or the backup store."),
    ports: z
      .array(
        z.strictObject({
          port: z.int().min(1).max(65535).meta({ format: "int32" }).describe("Destination port."),
          protocol: z.enum(["TCP", "UDP", "SCTP"]).default("TCP").describe("TCP (default), UDP or SCTP."),
        }),
      )
      .max(16)
      .optional()
      .describe("Destination ports; every port when unset."),
  })
  .describe("One allowed egress destination of the sandbox.")

export const SandboxSchema = z
  .strictObject({
    egress: z
      .array(EgressRuleSchema)
      .max(32)
      .default([])
      .describe(
        "The egress allowlist of the sandbox's deny-all NetworkPolicy: one rule per entry. Empty denies every connection, DNS included: list the cluster DNS (port 53 UDP and TCP) and the backup store.",
      ),
    resourceQuota: z
      .strictObject({ hard: ResourceListSchema.describe("core/v1 ResourceQuota spec.hard.") })
      .optional()
      .describe("A ResourceQuota for the sandbox (e.g. limits.memory, pods)."),
    limitRange: z
      .strictObject({
        default: ResourceListSchema.optional().describe("Default container limits."),
        defaultRequest: ResourceListSchema.optional().describe("Default container requests."),
        max: ResourceListSchema.optional().describe("Largest limits a container may set."),
      })
      .optional()
      .describe(
        "A LimitRange for the sandbox's containers (type Container); with a quota on limits or requests, give defaults so Pods without their own are admitted.",
      ),
    validationWindow: duration(
      (ms) => ms >= 0 && ms <= 168 * 3_600_000,
      "between 0s and 168h",
      "duration(self) >= duration('0s') && duration(self) <= duration('168h')",
    )
      .default("0s")
      .describe(
        "How long the sandbox stays after the run's verdict, for people to inspect it (Go duration); then the hub deletes it (status.lastRun.sandbox.cleanup).",
      ),
  })
  .describe(
    "Run each restore (and validation) in its own namespace the hub creates for the run, with a deny-all NetworkPolicy but the egress allowlist and an optional ResourceQuota and LimitRange, and deletes after the verdict plus validationWindow. Needs a member registered cluster-wide.",
  )
export type SandboxSpec = z.output<typeof SandboxSchema>

export const BackupCheckSpecSchema = z
  .strictObject({
    backup: BackupRefSchema,
    jobTemplate: JobTemplateSchema.optional(),
    restore: RestoreMethodSchema.optional(),
    recoveryPoint: RecoveryPointSpecSchema.optional(),
    validation: ValidationSchema.optional(),
    sandbox: SandboxSchema.optional(),
    schedule: z
      .string()
      .max(128)
      .regex(cronPattern, { error: 'must be 5 cron fields like "0 3 * * *" or a macro like @daily' })
      .superRefine((s, ctx) => {
        if (!cronPattern.test(s)) return
        const parsed = parseSchedule(s)
        if (!parsed.success) ctx.addIssue({ code: "custom", message: parsed.error })
      })
      .optional()
      .describe(
        "Cron schedule (5 fields or @daily etc.); without it one verification runs per spec generation.",
      ),
    timeZone: z
      .string()
      .max(64)
      .regex(timeZonePattern, { error: "must be an IANA time zone name like Europe/Berlin" })
      .superRefine((tz, ctx) => {
        if (!timeZonePattern.test(tz)) return
        const error = checkTimeZone(tz)
        if (error !== undefined) ctx.addIssue({ code: "custom", message: error })
      })
      .optional()
      .describe("IANA time zone of schedule, e.g. Europe/Berlin; UTC when unset. Requires schedule."),
    timeout: duration((ms) => ms >= 1000, "at least 1s", "duration(self) >= duration('1s')")
      .default("1h")
      .describe(
        "How long one run may take (Go duration): the restore Job's activeDeadlineSeconds, and with spec.validation the restore and the validation together.",
      ),
    maxStaleness: duration((ms) => ms > 0, "greater than 0", "duration(self) > duration('0s')")
      .optional()
      .describe("Verified turns False (VerificationStale) when the last success is older than this."),
    objectives: z
      .strictObject({
        maxRestoreDuration: duration((ms) => ms > 0, "greater than 0", "duration(self) > duration('0s')")
          .optional()
          .describe(
            "Recovery time objective: the restore phase of the last run may take at most this long (condition RestoreTimeObjectiveMet).",
          ),
        maxDataAge: duration((ms) => ms > 0, "greater than 0", "duration(self) > duration('0s')")
          .optional()
          .describe(
            "Data-level recovery point objective: the newest record in the restored data (dataTimestamp of the structured termination message, the validation's first) may be at most this old when the run ends (condition DataAgeObjectiveMet).",
          ),
      })
      .optional()
      .describe(
        "Objectives each run is measured against; each becomes a condition (True met, False missed, Unknown not measured).",
      ),
    startWindow: duration((ms) => ms >= 0, "at least 0s", "duration(self) >= duration('0s')")
      .optional()
      .describe(
        "Staggered starts (Go duration, e.g. 2h): each scheduled slot starts at a deterministic offset in [0, startWindow) derived from the check's uid and the slot, so checks sharing a schedule do not all restore at once; status.nextRunTime is the actual start. Requires schedule; must be shorter than the schedule's interval, and with timeout fit in it.",
      ),
    suspend: z.boolean().default(false).describe("Suspends new runs; a running restore is not stopped."),
    concurrencyPolicy: z
      .enum(concurrencyPolicies)
      .default("Forbid")
      .describe(
        "A run is due while an earlier run's Job is still active: Forbid (default) lets the earlier run finish and skips a scheduled slot that passes meanwhile (Event RunSkipped); Replace deletes the earlier Job (Verified=False, RunSuperseded) and starts the new run.",
      ),
    successfulRunsHistoryLimit: z
      .int()
      .min(0)
      .max(100)
      .meta({ format: "int32" })
      .default(3)
      .describe("How many finished successful restore Jobs to keep."),
    historyLimit: z
      .int()
      .min(0)
      .max(maxHistoryLimit)
      .meta({ format: "int32" })
      .default(31)
      .describe(
        "How many finished runs status.history keeps, newest first (default 31: a month of daily runs). Every string in a run is bounded, so 100 runs stay far below the API server's object size limit.",
      ),
    failedRunsHistoryLimit: z
      .int()
      .min(0)
      .max(100)
      .meta({ format: "int32" })
      .default(1)
      .describe("How many finished failed restore Jobs to keep."),
  })
  .superRefine((spec, ctx) => {
    if ((spec.jobTemplate === undefined) === (spec.restore === undefined)) {
      ctx.addIssue({
        code: "custom",
        path: spec.jobTemplate === undefined ? ["restore"] : ["jobTemplate"],
        message: "exactly one of jobTemplate (a custom restore Job) and restore (a built-in method)",
      })
    }
    if (spec.restore !== undefined && spec.restore.velero === undefined && spec.sandbox !== undefined) {
      ctx.addIssue({ code: "custom", path: ["sandbox"], message: sandboxWithRestore })
    }
    if (spec.restore?.velero !== undefined && spec.sandbox === undefined) {
      ctx.addIssue({ code: "custom", path: ["sandbox"], message: veleroNeedsSandbox })
    }
    if (spec.timeZone !== undefined && spec.schedule === undefined) {
      ctx.addIssue({ code: "custom", path: ["timeZone"], message: "timeZone requires schedule" })
    }
    if (spec.startWindow !== undefined && spec.schedule === undefined) {
      ctx.addIssue({ code: "custom", path: ["startWindow"], message: "startWindow requires schedule" })
    }
    const overlap = scheduleOverlap(spec)
    if (overlap !== undefined)
      ctx.addIssue({ code: "custom", path: [overlap.path], message: overlap.message })
  })
  .meta({
    "x-kubernetes-validations": [
      {
        rule: "has(self.jobTemplate) != has(self.restore)",
        message: "exactly one of jobTemplate (a custom restore Job) and restore (a built-in method)",
      },
      {
        rule: "!has(self.restore) || has(self.restore.velero) || !has(self.sandbox)",
        message: sandboxWithRestore,
        fieldPath: ".sandbox",
        reason: "FieldValueForbidden",
      },
      {
        rule: "!has(self.restore) || !has(self.restore.velero) || has(self.sandbox)",
        message: veleroNeedsSandbox,
        fieldPath: ".sandbox",
        reason: "FieldValueRequired",
      },
      {
        rule: "!has(self.timeZone) || has(self.schedule)",
        message: "timeZone requires schedule",
        fieldPath: ".timeZone",
        reason: "FieldValueForbidden",
      },
      {
        rule: "!has(self.startWindow) || has(self.schedule)",
        message: "startWindow requires schedule",
        fieldPath: ".startWindow",
        reason: "FieldValueForbidden",
      },
    ],
  })
  .describe("What to verify, how to restore it, and when.")

export type BackupCheckSpec = z.output<typeof BackupCheckSpecSchema>
/** The spec as users write it: defaulted fields are optional. */
export type BackupCheckSpecInput = z.input<typeof BackupCheckSpecSchema>

// ---------------------------------------------------------------------------------------------------
// Status

/** The phases of a run, in order: the restore, then (with spec.validation) the validation of its data. */
export const phaseNames = ["restore", "validation"] as const
export type PhaseName = (typeof phaseNames)[number]

/** Longest phase message kept in status (the termination message's bound, ADR 0004). */
export const maxPhaseMessageLength = 1024

export const PhaseSchema = z
  .object({
    name: z.enum(phaseNames).describe("restore or validation."),
    result: z.enum(runResults).describe("Running, Succeeded or Failed."),
    reason: z
      .string()
      .max(64)
      .regex(/^[A-Za-z][A-Za-z0-9]*$/)
      .optional()
      .describe("Why the phase ended as it did, e.g. RestoreSucceeded, ValidationFailed."),
    startTime: TimestampSchema.optional().describe("When the phase's Job was created."),
    completionTime: TimestampSchema.optional().describe("When the phase finished."),
    message: z
      .string()
      .max(maxPhaseMessageLength)
      .optional()
      .describe("The phase's message (its termination message, bounded to 1 KiB)."),
    dataTimestamp: TimestampSchema.optional().describe(
      "The newest record in the restored data, as the phase's structured termination message reported it.",
    ),
    counts: z
      .record(z.string().max(63).regex(countNamePattern), z.int().min(0).meta({ format: "int64" }))
      .refine((counts) => Object.keys(counts).length <= maxCounts, { error: `at most ${maxCounts} counts` })
      .meta({ maxProperties: maxCounts })
      .optional()
      .describe("Counts the phase reported (name → integer), e.g. rows per table."),
    recoveryPoint: RecoveryPointRecordSchema.optional(),
  })
  .describe("One phase of a run and its verdict.")
export type Phase = z.output<typeof PhaseSchema>

/** What became of a run's sandbox (ADR 0009): Pending until its delete time, then Deleting, Deleted. */
export const sandboxCleanupStates = ["Pending", "Deleting", "Deleted", "Failed"] as const
export type SandboxCleanup = (typeof sandboxCleanupStates)[number]

export const SandboxStatusSchema = z
  .object({
    namespace: z.string().min(1).max(63).describe("The run's sandbox namespace."),
    cleanup: z
      .enum(sandboxCleanupStates)
      .describe(
        "Pending (the run is in flight or its validationWindow is open), Deleting, Deleted, or Failed (the delete was refused; retried).",
      ),
    deleteAfter: TimestampSchema.optional().describe(
      "When the sandbox goes: the run's end plus spec.sandbox.validationWindow.",
    ),
    reason: z
      .string()
      .max(64)
      .regex(/^[A-Za-z][A-Za-z0-9]*$/)
      .optional()
      .describe("Why the cleanup failed, e.g. Forbidden."),
    message: z.string().max(maxPhaseMessageLength).optional().describe("The cleanup failure's message."),
  })
  .describe("The run's sandbox (spec.sandbox) and its cleanup.")
export type SandboxStatus = z.output<typeof SandboxStatusSchema>

export const LastRunSchema = z
  .object({
    jobName: z.string().min(1).max(63).describe("Name of the restore Job."),
    runID: z.string().min(1).max(63).describe("The run's ID: g<generation> or s<scheduled UTC time>."),
    backupName: z.string().min(1).max(253).optional().describe("The backup the run restored."),
    startTime: TimestampSchema.describe("When the hub started the run."),
    completionTime: TimestampSchema.optional().describe("When the run finished."),
    result: z.enum(runResults).describe("Running, Succeeded or Failed."),
    phases: z
      .array(PhaseSchema)
      .max(phaseNames.length)
      .optional()
      .describe("Each phase's verdict: restore, then validation when the spec has one."),
    recoveryPoint: RecoveryPointRecordSchema.optional(),
    sandbox: SandboxStatusSchema.optional(),
    traceID: z
      .string()
      .regex(/^[0-9a-f]{32}$/)
      .optional()
      .describe("OpenTelemetry trace ID of the verification."),
    specHash: z
      .string()
      .regex(/^[0-9a-f]{16}$/)
      .optional()
      .describe(
        "Hash of what the run verified (spec.backup, spec.jobTemplate, spec.timeout): a verdict stands only for that spec.",
      ),
  })
  .describe("The most recent verification run.")

export type LastRun = z.output<typeof LastRunSchema>

export const BackupCheckStatusSchema = z
  .object({
    observedGeneration: z
      .int()
      .min(0)
      .meta({ format: "int64" })
      .optional()
      .describe("The generation the hub last reconciled."),
    conditions: ConditionsSchema.optional(),
    lastRun: LastRunSchema.optional(),
    history: z
      .array(LastRunSchema.describe("A finished run, as lastRun recorded it."))
      .max(maxHistoryLimit)
      .optional()
      .describe(
        "Finished runs, newest first, at most spec.historyLimit: every verdict, including superseded runs and runs whose Job vanished.",
      ),
    lastSuccessfulTime: TimestampSchema.optional().describe(
      "When the last successful verification finished.",
    ),
    nextRunTime: TimestampSchema.optional().describe("When the next scheduled run is due."),
  })
  .describe("Observed state, written by the fleetcheck hub.")

export type BackupCheckStatus = z.output<typeof BackupCheckStatusSchema>

// ---------------------------------------------------------------------------------------------------
// The resource

/** The ObjectMeta fields the hub reads; everything else passes through untouched. */
export const ObjectMetaSchema = z.looseObject({
  name: z.string().min(1).max(253),
  namespace: z.string().min(1).max(63).optional(),
  uid: z.string().min(1).optional(),
  resourceVersion: z.string().optional(),
  generation: z.int().min(0).optional(),
  creationTimestamp: z.string().optional(),
  deletionTimestamp: z.string().optional(),
  labels: StringMapSchema.optional(),
  annotations: StringMapSchema.optional(),
  finalizers: z.array(z.string()).optional(),
})
export type ObjectMeta = z.output<typeof ObjectMetaSchema>

/** A namespaced object as stored: the API server always sets namespace and uid. */
export const NamespacedObjectMetaSchema = ObjectMetaSchema.extend({
  namespace: z.string().min(1).max(63),
  uid: z.string().min(1),
})

export const BackupCheckSchema = z.object({
  apiVersion: z.literal(apiVersion),
  kind: z.literal(backupCheckKind),
  metadata: NamespacedObjectMetaSchema,
  spec: BackupCheckSpecSchema,
  status: BackupCheckStatusSchema.optional(),
})

export type BackupCheck = z.output<typeof BackupCheckSchema>
export type BackupCheckInput = z.input<typeof BackupCheckSchema>

/** zod's safeParse shape, with the error as one readable line and status problems as warnings. */
export type ParseResult<T> =
  | { readonly success: true; readonly data: T; readonly warnings: ReadonlyArray<string> }
  | { readonly success: false; readonly error: string; readonly issues: ReadonlyArray<z.core.$ZodIssue> }

const maxErrorLength = 1024

const formatPath = (path: ReadonlyArray<PropertyKey>): string =>
  path.reduce<string>((out, key) => {
    if (typeof key === "number") return `${out}[${key}]`
    return out === "" ? String(key) : `${out}.${String(key)}`
  }, "")

const formatIssue = (issue: z.core.$ZodIssue): string => {
  const where = formatPath(issue.path)
  let what = issue.message.replace(/^Invalid input: /, "")
  if (issue.code === "unrecognized_keys") {
    what = `unknown field${issue.keys.length > 1 ? "s" : ""} ${issue.keys.map((k) => `"${k}"`).join(", ")}`
  } else if (issue.code === "invalid_type" && /received undefined$/.test(issue.message)) {
    what = "required"
  } else if (issue.code === "too_small" && issue.origin === "array") {
    what = `must have at least ${String(issue.minimum)} item${issue.minimum === 1 ? "" : "s"}`
  }
  return where === "" ? what : `${where}: ${what}`
}

/** A readable one-line summary of zod issues, bounded for a condition message. */
export const formatIssues = (issues: ReadonlyArray<z.core.$ZodIssue>): string => {
  const parts = issues.map(formatIssue)
  let out = ""
  for (const [i, part] of parts.entries()) {
    const next = out === "" ? part : `${out}; ${part}`
    if (next.length > maxErrorLength) {
      return `${out} (and ${parts.length - i} more)`
    }
    out = next
  }
  return out
}

const safeParse = <S extends z.ZodType>(schema: S, obj: unknown) => {
  try {
    return schema.safeParse(obj)
  } catch (e) {
    // Only hostile input gets here (a throwing getter or proxy); still an answer, not a crash.
    return {
      success: false as const,
      error: new z.ZodError([{ code: "custom", path: [], message: String(e), input: obj }]),
    }
  }
}

/** Parses any resource schema the way parseBackupCheck does (shared with MemberCluster). */
export const parseResource = <S extends z.ZodType>(schema: S, obj: unknown): ParseResult<z.output<S>> => {
  const first = safeParse(schema, obj)
  if (first.success) return { success: true, data: first.data, warnings: [] }
  const issues = first.error.issues
  // The status is the hub's own output: a bad one must not block reconciling a good spec, which
  // rewrites it anyway. Drop it and report it as a warning.
  if (typeof obj === "object" && obj !== null && issues.every((i) => i.path[0] === "status")) {
    const { status: _dropped, ...rest } = obj as Record<string, unknown>
    const retry = safeParse(schema, rest)
    if (retry.success) return { success: true, data: retry.data, warnings: issues.map(formatIssue) }
  }
  return { success: false, error: formatIssues(issues), issues }
}

/**
 * Validates a BackupCheck as read from a member cluster, applying defaults. Never throws: an invalid
 * object yields a readable error for the Verified condition (reason InvalidSpec).
 */
export const parseBackupCheck = (obj: unknown): ParseResult<BackupCheck> =>
  parseResource(BackupCheckSchema, obj)

const BackupCheckHeadSchema = BackupCheckSchema.pick({ apiVersion: true, kind: true, metadata: true })

/**
 * Whether parseBackupCheck would accept `obj`'s apiVersion, kind and metadata: with a spec known to
 * parse, the object parses exactly when these do (a bad status is dropped, never a refusal).
 */
export const backupCheckHeadValid = (obj: unknown): boolean => safeParse(BackupCheckHeadSchema, obj).success

/** Whether parseBackupCheck would keep this status: present and valid (false: absent or dropped). */
export const backupCheckStatusValid = (status: unknown): boolean =>
  status !== undefined && safeParse(BackupCheckStatusSchema, status).success
