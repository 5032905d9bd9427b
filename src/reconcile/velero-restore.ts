// spec.restore.velero (SPEC §12): the hub drives Velero's own velero.io/v1 Restore instead of a Job.
// Pure pieces only, each unit-tested: reading the member's Velero objects (hostile: zod, bounded),
// choosing the Backup, the Restore body, Velero's phase as a verdict, and the readiness of what was
// restored. The reconciler does the requests; the Restore's deterministic name `<check>-<run id>` plays
// the part the Job name plays (create → AlreadyExists → read it back).
import * as z from "zod"
import { AgentFailure } from "../agent/protocol.ts"
import { chooseRecoveryPoint } from "../agent/recovery-point.ts"
import { conditionReasons } from "../api/backupcheck.ts"
import { annotationBackupCheck, labelRun } from "../api/names.ts"
import type { RecoveryPointSpec, VeleroRestore } from "../api/restore.ts"
import { boundMessage } from "./job-outcome.ts"
import { jobNameFor } from "./run-identity.ts"
import { type SandboxCheck, sandboxLabels } from "./sandbox.ts"

/** The label Velero puts on every Backup a Schedule made. */
export const labelScheduleName = "velero.io/schedule-name"
/** On the Restore: the spec hash its verdict is about (as on Jobs) and the recovery point it restores. */
export const annotationRecoveryPointTime = "fleetcheck.io/recovery-point-time"

/** At most this many Backups, Restores or workloads of one list are read; the rest is ignored. */
export const maxListItems = 2000
/** Velero's validation errors quoted in a verdict, each cut to this many characters. */
const maxQuotedErrors = 5
const maxQuotedLength = 200

/** The Restore of a run: the same name the run's Job would have, so `lastRun.jobName` names it. */
export const restoreNameFor = (checkName: string, runID: string): string => jobNameFor(checkName, runID)

// ---------------------------------------------------------------------------------------------------
// The member's objects, as far as the hub reads them. Unknown fields are dropped, every kept string
// is bounded, and an item that does not fit is skipped, never trusted.

const name = z.string().min(1).max(253)
const shortText = z.string().max(64)
const time = z
  .string()
  .max(64)
  .refine((s) => Number.isFinite(Date.parse(s)))
const stringMap = z.record(z.string().max(317), z.string().max(4096))

const MetadataSchema = z.object({
  name,
  namespace: z.string().max(63).optional(),
  uid: z.string().max(64).optional(),
  creationTimestamp: time.optional(),
  deletionTimestamp: time.optional(),
  labels: stringMap.optional(),
  annotations: stringMap.optional(),
  generation: z.int().min(0).optional(),
})

export const VeleroBackupSchema = z.object({
  metadata: MetadataSchema,
  spec: z.object({ includedNamespaces: z.array(z.string().max(253)).max(1000).optional() }).optional(),
  status: z
    .object({
      phase: shortText.optional(),
      startTimestamp: time.optional(),
      completionTimestamp: time.optional(),
    })
    .optional(),
})
export type VeleroBackup = z.output<typeof VeleroBackupSchema>

const count = z.int().min(0).max(Number.MAX_SAFE_INTEGER)

export const VeleroRestoreObjectSchema = z.object({
  metadata: MetadataSchema,
  spec: z.object({ backupName: name.optional() }).optional(),
  status: z
    .object({
      phase: shortText.optional(),
      validationErrors: z.array(z.string().max(64 * 1024)).optional(),
      warnings: count.optional(),
      errors: count.optional(),
      failureReason: z
        .string()
        .max(64 * 1024)
        .optional(),
      startTimestamp: time.optional(),
      completionTimestamp: time.optional(),
      progress: z.object({ totalItems: count.optional(), itemsRestored: count.optional() }).optional(),
    })
    .optional(),
})
export type VeleroRestoreObject = z.output<typeof VeleroRestoreObjectSchema>

/**
 * Whether Velero is working on the Restore (InProgress, waiting for plugin operations, Finalizing).
 * Such a Restore is not deleted: Velero v1.18's controllers retry their status write to a Restore that
 * is gone for --resource-timeout (10 minutes by default), one Restore at a time, so every later Restore
 * in that cluster waits (measured: a check deleted mid-restore held the next Restore in Finalizing).
 */
export const isRestoreInFlight = (restore: VeleroRestoreObject): boolean => {
  const phase = restore.status?.phase ?? ""
  return (
    phase === "InProgress" || phase.startsWith("WaitingForPluginOperations") || phase.startsWith("Finalizing")
  )
}

/** The items of a list response that parse; `skipped` counts the rest (and those past maxListItems). */
export const parseList = <T>(
  schema: z.ZodType<T>,
  body: unknown,
): { readonly items: T[]; readonly skipped: number } => {
  const raw = (body as { items?: unknown } | null | undefined)?.items
  if (!Array.isArray(raw)) return { items: [], skipped: 0 }
  const items: T[] = []
  let skipped = Math.max(0, raw.length - maxListItems)
  for (const item of raw.slice(0, maxListItems)) {
    const parsed = schema.safeParse(item)
    if (parsed.success) items.push(parsed.data)
    else skipped++
  }
  return { items, skipped }
}

/** One object, or undefined when it does not parse. */
export const parseObject = <T>(schema: z.ZodType<T>, body: unknown): T | undefined => {
  const parsed = schema.safeParse(body)
  return parsed.success ? parsed.data : undefined
}

// ---------------------------------------------------------------------------------------------------
// Which Backup a run restores

export type BackupChoice =
  | { readonly kind: "chosen"; readonly backup: VeleroBackup; readonly namespaces: ReadonlyArray<string> }
  | { readonly kind: "refused"; readonly reason: string; readonly message: string }

const phaseOf = (b: VeleroBackup) => b.status?.phase || "New"

/** How many Backups are in each phase, for a message: `2 Failed, 1 InProgress`. */
const phaseCounts = (backups: ReadonlyArray<VeleroBackup>) => {
  const counts = new Map<string, number>()
  for (const b of backups) counts.set(phaseOf(b), (counts.get(phaseOf(b)) ?? 0) + 1)
  return [...counts].map(([p, n]) => `${n} ${p}`).join(", ")
}

/**
 * The Backup of this run: `backupName`, or among the Completed Backups of `scheduleName` the one
 * spec.recoveryPoint picks (the newest by default; Random is seeded by the run id, so every pass of a
 * run picks the same). `backups` are the ones the hub listed (by name or by schedule label). A Backup
 * that is not Completed is BackupNotRestorable; none to choose from is RecoveryPointNotFound. The
 * namespaces restored are includedNamespaces, else the Backup's own; a Backup of every namespace needs
 * includedNamespaces, since each one must be mapped into the sandbox.
 */
export const chooseBackup = (
  backups: ReadonlyArray<VeleroBackup>,
  velero: Pick<VeleroRestore, "backupName" | "scheduleName" | "includedNamespaces" | "namespace">,
  recoveryPoint: RecoveryPointSpec,
  runID: string,
  now: Date,
): BackupChoice => {
  let backup: VeleroBackup
  if (velero.backupName !== undefined) {
    const named = backups.find((b) => b.metadata.name === velero.backupName)
    if (named === undefined)
      return {
        kind: "refused",
        reason: conditionReasons.RecoveryPointNotFound,
        message: `Velero Backup ${velero.backupName} not found in namespace ${velero.namespace}`,
      }
    if (phaseOf(named) !== "Completed")
      return {
        kind: "refused",
        reason: conditionReasons.BackupNotRestorable,
        message: `Velero Backup ${named.metadata.name} is ${phaseOf(named)}, not Completed: it is not restored`,
      }
    backup = named
  } else {
    const schedule = velero.scheduleName ?? ""
    const ofSchedule = backups.filter((b) => b.metadata.labels?.[labelScheduleName] === schedule)
    const completed = ofSchedule.filter(
      (b) => phaseOf(b) === "Completed" && b.status?.startTimestamp !== undefined,
    )
    const what = `Completed Velero Backup of schedule ${schedule} in namespace ${velero.namespace}`
    if (completed.length === 0)
      return {
        kind: "refused",
        reason: conditionReasons.RecoveryPointNotFound,
        message: `no ${what}${ofSchedule.length > 0 ? ` (its Backups: ${phaseCounts(ofSchedule)})` : ""}`,
      }
    try {
      const candidates = completed.map((b) => ({
        id: b.metadata.name,
        time: b.status?.startTimestamp ?? "",
        b,
      }))
      backup = chooseRecoveryPoint(candidates, recoveryPoint, runID, now, what).b
    } catch (e) {
      if (!(e instanceof AgentFailure)) throw e
      return { kind: "refused", reason: conditionReasons.RecoveryPointNotFound, message: e.message }
    }
  }
  const namespaces = velero.includedNamespaces ?? backup.spec?.includedNamespaces ?? []
  if (namespaces.length === 0 || namespaces.some((n) => n === "*" || n.includes("*")))
    return {
      kind: "refused",
      reason: conditionReasons.BackupNotRestorable,
      message: `Velero Backup ${backup.metadata.name} covers every namespace: set restore.velero.includedNamespaces to the namespaces to restore into the sandbox`,
    }
  return { kind: "chosen", backup, namespaces: [...new Set(namespaces)].sort() }
}

// ---------------------------------------------------------------------------------------------------
// The Restore

export interface RestoreBodyInput {
  readonly check: SandboxCheck
  readonly runID: string
  readonly velero: Pick<VeleroRestore, "namespace" | "restorePVs">
  readonly backup: VeleroBackup
  readonly namespaces: ReadonlyArray<string>
  readonly sandboxNamespace: string
  readonly specHash: string
  readonly specHashAnnotation: string
}

/**
 * The run's velero.io/v1 Restore, in Velero's namespace: every restored namespace mapped into the
 * sandbox, no cluster-scoped objects (nothing lands outside the sandbox), existing objects left alone.
 * Labelled like the sandbox (check, uid, run), so the hub finds its Restores after a restart.
 */
export const restoreBody = (input: RestoreBodyInput) => ({
  apiVersion: "velero.io/v1",
  kind: "Restore",
  metadata: {
    name: restoreNameFor(input.check.name, input.runID),
    namespace: input.velero.namespace,
    labels: sandboxLabels(input.check, input.runID),
    annotations: {
      [annotationBackupCheck]: `${input.check.namespace}/${input.check.name}`,
      [input.specHashAnnotation]: input.specHash,
      ...(input.backup.status?.startTimestamp !== undefined
        ? { [annotationRecoveryPointTime]: input.backup.status.startTimestamp }
        : {}),
    },
  },
  spec: {
    backupName: input.backup.metadata.name,
    includedNamespaces: [...input.namespaces],
    namespaceMapping: Object.fromEntries(input.namespaces.map((n) => [n, input.sandboxNamespace])),
    restorePVs: input.velero.restorePVs,
    includeClusterResources: false,
    existingResourcePolicy: "none",
  },
})

/** Whether a Restore of that name is this check's run's (its uid and run labels), not someone else's. */
export const isOurRestore = (restore: VeleroRestoreObject, uid: string, runLabel: string): boolean =>
  restore.metadata.labels?.["fleetcheck.io/backupcheck-uid"] === uid &&
  restore.metadata.labels?.[labelRun] === runLabel

// ---------------------------------------------------------------------------------------------------
// Velero's phase as a verdict

export type RestorePhaseOutcome =
  | { readonly phase: "Running"; readonly veleroPhase: string }
  | {
      readonly phase: "Succeeded" | "Failed"
      readonly reason: string
      readonly message: string
      readonly completionTime: string | undefined
      readonly counts: Readonly<Record<string, number>>
    }

const quote = (s: string) => boundMessage(s.replace(/\s+/g, " "), maxQuotedLength)

/** Velero's own words on a Restore: errors, warnings, items, failure reason, validation errors. */
const veleroDetails = (restore: VeleroRestoreObject): string => {
  const s = restore.status
  const parts: string[] = []
  if (s?.progress?.totalItems !== undefined || s?.progress?.itemsRestored !== undefined)
    parts.push(`${s?.progress?.itemsRestored ?? 0} of ${s?.progress?.totalItems ?? 0} items restored`)
  parts.push(`${s?.errors ?? 0} errors`, `${s?.warnings ?? 0} warnings`)
  if (s?.failureReason) parts.push(`failure reason: ${quote(s.failureReason)}`)
  const errors = s?.validationErrors ?? []
  if (errors.length > 0) {
    const shown = errors.slice(0, maxQuotedErrors).map(quote).join("; ")
    const more = errors.length > maxQuotedErrors ? ` (and ${errors.length - maxQuotedErrors} more)` : ""
    parts.push(`validation errors: ${shown}${more}`)
  }
  return parts.join(", ")
}

const countsOf = (restore: VeleroRestoreObject): Record<string, number> => {
  const s = restore.status
  return {
    itemsRestored: s?.progress?.itemsRestored ?? 0,
    totalItems: s?.progress?.totalItems ?? 0,
    warnings: s?.warnings ?? 0,
    errors: s?.errors ?? 0,
  }
}

/**
 * The restore phase from the Restore's status.phase: Completed succeeded; PartiallyFailed is
 * RestorePartiallyFailed; Failed and FailedValidation are RestoreFailed; any other phase (New,
 * InProgress, WaitingForPluginOperations…, Finalizing…, or one this hub does not know) is still running.
 */
export const restorePhaseOutcome = (restore: VeleroRestoreObject): RestorePhaseOutcome => {
  const phase = restore.status?.phase || "New"
  const name = restore.metadata.name
  const backup = restore.spec?.backupName ?? "?"
  const completionTime = restore.status?.completionTimestamp
  const head = `Velero Restore ${name} of Backup ${backup}`
  switch (phase) {
    case "Completed":
      return {
        phase: "Succeeded",
        reason: conditionReasons.RestoreSucceeded,
        message: boundMessage(`${head} Completed: ${veleroDetails(restore)}`),
        completionTime,
        counts: countsOf(restore),
      }
    case "PartiallyFailed":
      return {
        phase: "Failed",
        reason: conditionReasons.RestorePartiallyFailed,
        message: boundMessage(
          `${head} PartiallyFailed: ${veleroDetails(restore)} (velero restore logs ${name})`,
        ),
        completionTime,
        counts: countsOf(restore),
      }
    case "Failed":
    case "FailedValidation":
      return {
        phase: "Failed",
        reason: conditionReasons.RestoreFailed,
        message: boundMessage(`${head} ${phase}: ${veleroDetails(restore)}`),
        completionTime,
        counts: countsOf(restore),
      }
    default:
      return { phase: "Running", veleroPhase: quote(phase) }
  }
}

/** The recovery point the Restore restores: its Backup and that Backup's start time (data age). */
export const recoveryPointOf = (
  restore: VeleroRestoreObject,
): { readonly id: string; readonly time: string } | undefined => {
  const t = restore.metadata.annotations?.[annotationRecoveryPointTime]
  const id = restore.spec?.backupName
  if (id === undefined || t === undefined || !Number.isFinite(Date.parse(t))) return undefined
  return { id, time: new Date(Date.parse(t)).toISOString().replace(/\.000Z$/, "Z") }
}

// ---------------------------------------------------------------------------------------------------
// Readiness of what was restored (waitForReady)

export const WorkloadSchema = z.object({
  metadata: MetadataSchema,
  spec: z.object({ replicas: count.optional() }).optional(),
  status: z
    .object({
      observedGeneration: count.optional(),
      replicas: count.optional(),
      updatedReplicas: count.optional(),
      availableReplicas: count.optional(),
      readyReplicas: count.optional(),
    })
    .optional(),
})
export type Workload = z.output<typeof WorkloadSchema>

/** A Deployment or StatefulSet is available: its controller saw this generation and every replica is up. */
const available = (w: Workload, kind: "Deployment" | "StatefulSet"): boolean => {
  const want = w.spec?.replicas ?? 1
  const s = w.status
  if ((s?.observedGeneration ?? 0) < (w.metadata.generation ?? 1)) return false
  const up =
    kind === "Deployment" ? (s?.availableReplicas ?? 0) : (s?.availableReplicas ?? s?.readyReplicas ?? 0)
  return up >= want && (kind === "StatefulSet" || (s?.updatedReplicas ?? 0) >= want)
}

export interface Readiness {
  readonly ready: boolean
  /** `deployment/orders (0/2 available)`, at most a few, for a message. */
  readonly waitingFor: ReadonlyArray<string>
  readonly counts: Readonly<Record<string, number>>
}

export const readiness = (
  deployments: ReadonlyArray<Workload>,
  statefulSets: ReadonlyArray<Workload>,
): Readiness => {
  const waiting: string[] = []
  const describe = (w: Workload, kind: "Deployment" | "StatefulSet") =>
    `${kind.toLowerCase()}/${w.metadata.name} (${w.status?.availableReplicas ?? w.status?.readyReplicas ?? 0}/${w.spec?.replicas ?? 1} available)`
  for (const d of deployments) if (!available(d, "Deployment")) waiting.push(describe(d, "Deployment"))
  for (const s of statefulSets) if (!available(s, "StatefulSet")) waiting.push(describe(s, "StatefulSet"))
  return {
    ready: waiting.length === 0,
    waitingFor: waiting.slice(0, 5).map(quote),
    counts: { deployments: deployments.length, statefulSets: statefulSets.length },
  }
}
