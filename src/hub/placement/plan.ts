// The pure half of placement: what a FleetBackupCheck wants in one member (the placed BackupCheck),
// whether a member's cached check is ours and current, and how the per-cluster outcomes add up to the
// status (counts, Placed, FleetVerified). The controller (controller.ts) does the I/O around these.
import { createHash } from "node:crypto"
import { type BackupCheck, type BackupCheckSpec, parseBackupCheck } from "../../api/backupcheck.ts"
import type { Condition, NewCondition } from "../../api/condition.ts"
import type { CheckView } from "../../api/fleet.ts"
import { isVerified } from "../../api/fleet.ts"
import {
  type ClusterPlacement,
  type FleetBackupCheck,
  type FleetCounts,
  fleetConditionTypes,
  fleetReasons,
  placementLabelValue,
} from "../../api/fleetbackupcheck.ts"
import {
  annotationTemplateHash,
  apiVersion,
  backupCheckKind,
  labelFleetBackupCheck,
} from "../../api/names.ts"

/** JSON with object keys sorted, so equal values hash and compare equal whatever their key order. */
export const stableJson = (value: unknown): string =>
  JSON.stringify(value, (_key, v: unknown) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(Object.entries(v as Record<string, unknown>).sort(([a], [b]) => (a < b ? -1 : 1)))
      : v,
  )

/** The BackupCheck a FleetBackupCheck places in every selected member. */
export interface PlacedCheck {
  readonly namespace: string
  readonly name: string
  readonly labels: Record<string, string>
  readonly annotations: Record<string, string>
  readonly spec: BackupCheckSpec
  /** Hash of labels, annotations and spec: written as fleetcheck.io/template-hash. */
  readonly hash: string
}

export const placedCheckOf = (fbc: FleetBackupCheck): PlacedCheck => {
  const { metadata, spec } = fbc.spec.template
  const labels = {
    ...metadata.labels,
    [labelFleetBackupCheck]: placementLabelValue(fbc.metadata.namespace, fbc.metadata.name),
  }
  const annotations = { ...metadata.annotations }
  const hash = createHash("sha256")
    .update(stableJson({ labels, annotations, spec }))
    .digest("hex")
    .slice(0, 16)
  return {
    namespace: metadata.namespace,
    name: metadata.name ?? fbc.metadata.name,
    labels,
    annotations: { ...annotations, [annotationTemplateHash]: hash },
    spec,
    hash,
  }
}

/** The placed check as a new object. */
export const placedObject = (want: PlacedCheck) => ({
  apiVersion,
  kind: backupCheckKind,
  metadata: {
    name: want.name,
    namespace: want.namespace,
    labels: want.labels,
    annotations: want.annotations,
  },
  spec: want.spec,
})

/** The existing placed check replaced by what the template says (its other metadata kept; PUT). */
export const replacedObject = (existing: BackupCheck, want: PlacedCheck) => ({
  ...existing,
  metadata: {
    ...existing.metadata,
    labels: { ...existing.metadata.labels, ...want.labels },
    annotations: { ...existing.metadata.annotations, ...want.annotations },
  },
  spec: want.spec,
})

/** Whether a member's check was placed by this FleetBackupCheck: its label and the hub's annotation. */
export const isPlacedBy = (check: BackupCheck, labelValue: string): boolean =>
  check.metadata.labels?.[labelFleetBackupCheck] === labelValue &&
  check.metadata.annotations?.[annotationTemplateHash] !== undefined

/**
 * Whether an owned check already says what the template says: the hash it was written from, our labels
 * and annotations, and (against a hand edit in the member) the same spec once defaults are applied.
 */
export const isCurrent = (check: BackupCheck, want: PlacedCheck): boolean => {
  if (check.metadata.annotations?.[annotationTemplateHash] !== want.hash) return false
  for (const [k, v] of Object.entries(want.labels)) if (check.metadata.labels?.[k] !== v) return false
  for (const [k, v] of Object.entries(want.annotations))
    if (check.metadata.annotations?.[k] !== v) return false
  const parsed = parseBackupCheck(check)
  return parsed.success && stableJson(parsed.data.spec) === stableJson(want.spec)
}

const objectiveName = (o: "restoreTime" | "dataAge") =>
  o === "restoreTime" ? "restore time, maxRestoreDuration" : "data age, maxDataAge"

const bounded = (s: string, max = 1024) => (s.length > max ? `${s.slice(0, max - 1)}…` : s)

/** A cluster entry whose verdict comes from its placed check's view (the fleet rules, fleet.ts). */
export const placedEntry = (cluster: string, view: CheckView, check: BackupCheck): ClusterPlacement => {
  const run = check.status?.lastRun
  const missed = (["restoreTime", "dataAge"] as const).filter((o) => view.objectives?.[o] === "False")
  return {
    name: cluster,
    placement: "Placed",
    verified: view.status,
    reason: bounded(view.reason, 256),
    ...(view.message ? { message: bounded(view.message) } : {}),
    ...(missed.length > 0 ? { objectivesMissed: missed } : {}),
    ...(view.lastSuccessfulTime ? { lastSuccessfulTime: view.lastSuccessfulTime } : {}),
    ...(run
      ? {
          lastRun: {
            runID: run.runID,
            result: run.result,
            ...(run.startTime ? { startTime: run.startTime } : {}),
            ...(run.completionTime ? { completionTime: run.completionTime } : {}),
          },
        }
      : {}),
  }
}

/** A cluster entry that has no verdict of ours (pending, conflict, refused, removing): never green. */
export const unverifiedEntry = (
  cluster: string,
  placement: ClusterPlacement["placement"],
  reason: string,
  message: string,
  verified: "False" | "Unknown" = "Unknown",
): ClusterPlacement => ({
  name: cluster,
  placement,
  placementMessage: bounded(message),
  verified,
  reason,
  message: bounded(message),
})

export const countsOf = (entries: ReadonlyArray<ClusterPlacement>): FleetCounts => {
  const selected = entries.filter((e) => e.placement !== "Removing")
  return {
    selected: selected.length,
    placed: selected.filter((e) => e.placement === "Placed").length,
    verified: selected.filter((e) => isVerified({ status: e.verified })).length,
    failed: selected.filter((e) => e.verified === "False").length,
    unknown: selected.filter((e) => e.verified === "Unknown").length,
  }
}

/** "m1, m2 and 3 more" */
const names = (entries: ReadonlyArray<ClusterPlacement>, max = 5): string => {
  const shown = entries.slice(0, max).map((e) => e.name)
  const more = entries.length - shown.length
  return more > 0 ? `${shown.join(", ")} and ${more} more` : shown.join(", ")
}

const detail = (entries: ReadonlyArray<ClusterPlacement>, max = 5): string =>
  entries
    .slice(0, max)
    .map((e) => `${e.name} (${e.reason}${e.message ? `: ${bounded(e.message, 240)}` : ""})`)
    .join("; ") + (entries.length > max ? `; and ${entries.length - max} more` : "")

/** What is wrong with the FleetBackupCheck before any member is looked at. */
export interface SpecProblem {
  readonly reason: string
  readonly message: string
}

/**
 * The Placed and FleetVerified conditions (Cluster API's aggregation: a problem beats unknown beats
 * ok). FleetVerified is True only when every selected member verified its placed check for the current
 * spec; an unreachable member makes it Unknown, a failing or unplaceable one False, naming the cluster.
 */
export const fleetConditions = (
  entries: ReadonlyArray<ClusterPlacement>,
  generation: number,
  options: { readonly problem?: SpecProblem; readonly deleting?: boolean; readonly selector?: string },
): NewCondition[] => {
  const cond = (
    type: string,
    status: Condition["status"],
    reason: string,
    message: string,
  ): NewCondition => ({
    type,
    status,
    reason,
    message: bounded(message, 4096),
    observedGeneration: generation,
  })
  const { Placed, FleetVerified } = fleetConditionTypes
  const removing = entries.filter((e) => e.placement === "Removing")
  if (options.deleting) {
    const message =
      removing.length === 0
        ? "every placed check is removed"
        : `removing the placed checks in ${names(removing)}`
    return [
      cond(Placed, "False", fleetReasons.Deleting, message),
      cond(FleetVerified, "Unknown", fleetReasons.Deleting, message),
    ]
  }
  if (options.problem) {
    return [
      cond(Placed, "False", options.problem.reason, options.problem.message),
      cond(FleetVerified, "False", options.problem.reason, options.problem.message),
    ]
  }
  const selected = entries.filter((e) => e.placement !== "Removing")
  if (selected.length === 0) {
    const message = `the cluster selector (${options.selector ?? "?"}) matches no MemberCluster: nothing is placed, nothing is verified`
    return [
      cond(Placed, "False", fleetReasons.NoClustersSelected, message),
      cond(FleetVerified, "False", fleetReasons.NoClustersSelected, message),
    ]
  }
  const failedPlacement = selected.filter((e) => e.placement === "Conflict" || e.placement === "Refused")
  const pending = selected.filter((e) => e.placement === "Pending")
  const placed = selected.filter((e) => e.placement === "Placed")
  const placedCondition =
    failedPlacement.length > 0
      ? cond(
          Placed,
          "False",
          fleetReasons.PlacementFailed,
          `not placed in ${failedPlacement.length} of ${selected.length} selected clusters: ${detail(failedPlacement)}`,
        )
      : pending.length > 0
        ? cond(
            Placed,
            "Unknown",
            fleetReasons.PlacementPending,
            `placed in ${placed.length} of ${selected.length} selected clusters; waiting for ${detail(pending)}`,
          )
        : cond(Placed, "True", fleetReasons.Placed, `placed in all ${selected.length} selected clusters`)

  const failing = placed.filter((e) => e.verified === "False")
  const unknown = selected.filter((e) => e.verified === "Unknown")
  const unreachable = unknown.filter((e) => e.reason === "ClusterUnreachable")
  const missedObjectives = placed.filter((e) => (e.objectivesMissed?.length ?? 0) > 0)
  const verifiedCondition =
    failing.length > 0 || failedPlacement.length > 0
      ? cond(
          FleetVerified,
          "False",
          failing.length > 0 ? fleetReasons.ChecksFailing : fleetReasons.PlacementFailed,
          [
            failing.length > 0
              ? `failing in ${failing.length} of ${selected.length} selected clusters: ${detail(failing)}`
              : "",
            failedPlacement.length > 0 ? `not placed in ${names(failedPlacement)}` : "",
          ]
            .filter((s) => s !== "")
            .join("; "),
        )
      : unknown.length > 0
        ? cond(
            FleetVerified,
            "Unknown",
            unreachable.length > 0 ? fleetReasons.ClusterUnreachable : fleetReasons.VerificationPending,
            `${selected.length - unknown.length} of ${selected.length} selected clusters verified; unknown: ${detail(unknown)}`,
          )
        : missedObjectives.length > 0
          ? cond(
              FleetVerified,
              "False",
              fleetReasons.ObjectivesMissed,
              `verified in all ${selected.length} selected clusters; objectives missed in ${missedObjectives
                .slice(0, 5)
                .map((e) => `${e.name} (${(e.objectivesMissed ?? []).map(objectiveName).join(", ")})`)
                .join(
                  "; ",
                )}${missedObjectives.length > 5 ? `; and ${missedObjectives.length - 5} more` : ""}`,
            )
          : cond(
              FleetVerified,
              "True",
              fleetReasons.AllVerified,
              `verified in all ${selected.length} selected clusters`,
            )
  return [placedCondition, verifiedCondition]
}
