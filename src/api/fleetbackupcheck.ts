import * as z from "zod"
import {
  BackupCheckSpecSchema,
  duration,
  NamespacedObjectMetaSchema,
  type ParseResult,
  parseResource,
  runResults,
  StringMapSchema,
} from "./backupcheck.ts"
import { ConditionsSchema, conditionStatuses, TimestampSchema } from "./condition.ts"
import { LabelSelectorSchema, labelKeyError, labelValueError, selectorOperators } from "./label-selector.ts"
import { apiVersion, fleetBackupCheckKind, labelFleetBackupCheck } from "./names.ts"

// FleetBackupCheck (fleetcheck.io/v1alpha1, namespaced, in the hub; ADR 0012): a BackupCheck template
// and a selector over MemberCluster labels. The hub places the template as a BackupCheck in every
// selected member and aggregates the placed checks' verdicts here. The template's spec IS the
// BackupCheck spec schema (not a copy), so every field BackupCheck gains is placeable at once.

export const fleetConditionTypes = {
  /** Every selected member holds the placed check as the template says. */
  Placed: "Placed",
  /** Every selected, reachable member verified the placed check for its current spec. */
  FleetVerified: "FleetVerified",
} as const

export const fleetReasons = {
  Placed: "Placed",
  AllVerified: "AllVerified",
  /** The spec fails the hub's validation (the message names the field). */
  InvalidSpec: "InvalidSpec",
  /** spec.clusterSelector is not a valid label selector. */
  InvalidSelector: "InvalidSelector",
  /** The selector matches no MemberCluster: nothing is verified, so nothing is green. */
  NoClustersSelected: "NoClustersSelected",
  /** A selected member refused the placed check, or a check not placed from here holds its name. */
  PlacementFailed: "PlacementFailed",
  /** A selected member is unreachable or its caches are not current: placement waits for it. */
  PlacementPending: "PlacementPending",
  /** A placed check failed its verification (the message names the clusters). */
  ChecksFailing: "ChecksFailing",
  /** A selected member is unreachable: its verdict cannot be vouched for. */
  ClusterUnreachable: "ClusterUnreachable",
  /** Placed checks have not verified their current spec yet. */
  VerificationPending: "VerificationPending",
  /**
   * Every placed check verified, but one missed an objective of its spec.objectives (the message names
   * the clusters and which): not plain green (ADR 0015).
   */
  ObjectivesMissed: "ObjectivesMissed",
  /** Being deleted: the placed checks are being removed. */
  Deleting: "Deleting",
  /** A cross-cluster drill failed (the message names the pair, source → target). */
  DrillFailing: "DrillFailing",
  /** A drill has not verified yet in its target, or its target is unreachable. */
  DrillPending: "DrillPending",
  /** A source's only eligible drill target is the source itself: a drill needs another cluster. */
  DrillTargetIsSource: "DrillTargetIsSource",
  /** spec.drill names or selects no MemberCluster at all. */
  NoDrillTargets: "NoDrillTargets",
  /** spec.drill.targetClusters names a cluster that is no MemberCluster (condition Placed; not drilled). */
  DrillTargetNotFound: "DrillTargetNotFound",
} as const

/** Reasons of the Events the hub records on a FleetBackupCheck. */
export const fleetEventReasons = {
  PlacementConflict: "PlacementConflict",
  PlacementRefused: "PlacementRefused",
  DrillTargetNotFound: fleetReasons.DrillTargetNotFound,
} as const

/** Where the placed check of one cluster stands. */
export const placementStates = ["Placed", "Pending", "Conflict", "Refused", "Removing"] as const
export type PlacementState = (typeof placementStates)[number]

const dnsLabel = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/
const dnsSubdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/

export const TemplateMetadataSchema = z
  .strictObject({
    name: z
      .string()
      .min(1)
      .max(253)
      .regex(dnsSubdomain, { error: "must be a DNS subdomain (lower case alphanumerics, '-', '.')" })
      .optional()
      .describe("Name of the placed BackupCheck; default the FleetBackupCheck's name."),
    namespace: z
      .string()
      .min(1)
      .max(63)
      .regex(dnsLabel, { error: "must be a DNS label (lower case alphanumerics and '-')" })
      .describe("Namespace of the placed BackupCheck in every member; it must exist there."),
    labels: StringMapSchema.optional().describe(
      `Labels of the placed BackupCheck (the hub adds ${labelFleetBackupCheck}).`,
    ),
    annotations: StringMapSchema.optional().describe("Annotations of the placed BackupCheck."),
  })
  .superRefine((meta, ctx) => {
    for (const [key, value] of Object.entries(meta.labels ?? {})) {
      const error =
        key === labelFleetBackupCheck
          ? `${labelFleetBackupCheck} is set by the hub`
          : (labelKeyError(key) ?? labelValueError(value))
      if (error) ctx.addIssue({ code: "custom", path: ["labels", key], message: error })
    }
  })
  .describe("Metadata of the placed BackupCheck.")

const clusterNamePattern = dnsSubdomain

/**
 * A requirement over a member's ClusterProfile properties (status.properties of the profile that
 * registers it, shown on its MemberCluster): OCM's claimSelector shape, matchExpressions only.
 */
const PropertyRequirementSchema = z
  .strictObject({
    key: z.string().min(1).max(253).describe("The property name, e.g. kubernetes.io/version or region."),
    operator: z.enum(selectorOperators).describe("In, NotIn, Exists or DoesNotExist."),
    values: z
      .array(z.string().max(1024))
      .max(64)
      .optional()
      .describe("For In and NotIn, at least one value; for Exists and DoesNotExist, none."),
  })
  .superRefine((r, ctx) => {
    const wantsValues = r.operator === "In" || r.operator === "NotIn"
    if (wantsValues !== (r.values !== undefined && r.values.length > 0))
      ctx.addIssue({
        code: "custom",
        path: ["values"],
        message: `${r.operator} ${wantsValues ? "needs at least one value" : "takes no values"}`,
      })
  })
  .meta({
    "x-kubernetes-validations": [
      {
        rule: "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 : !has(self.values) || size(self.values) == 0",
        message: "In and NotIn need at least one value; Exists and DoesNotExist take none",
      },
    ],
  })
  .describe("A property requirement: a property name, an operator and values.")

export const PropertySelectorSchema = z
  .strictObject({
    matchExpressions: z
      .array(PropertyRequirementSchema)
      .min(1)
      .max(32)
      .describe("Requirements over the member's ClusterProfile properties; all must hold."),
  })
  .describe(
    "Selects members by the properties of the ClusterProfile that registers them (MemberCluster status.properties); a member registered otherwise has none, so only DoesNotExist and NotIn can match it.",
  )

export type PropertySelector = z.output<typeof PropertySelectorSchema>

/** Drill periods: at least a minute (no hot rotation), at most a year. */
export const drillPeriodBounds = { minMs: 60_000, maxMs: 8_784 * 3_600_000 } as const

export const DrillSchema = z
  .strictObject({
    targetClusters: z
      .array(
        z
          .string()
          .min(1)
          .max(253)
          .regex(clusterNamePattern, { error: "must be a MemberCluster name (a DNS subdomain)" }),
      )
      .min(1)
      .max(1_000)
      .optional()
      .describe("Drill targets by MemberCluster name. Set this or targetSelector."),
    targetSelector: LabelSelectorSchema.optional().describe(
      "Drill targets by MemberCluster labels (metav1.LabelSelector), e.g. another region. Set this or targetClusters.",
    ),
    period: duration(
      (ms) => ms >= drillPeriodBounds.minMs && ms <= drillPeriodBounds.maxMs,
      "between 1m and 8784h",
      "duration(self) >= duration('1m') && duration(self) <= duration('8784h')",
    ).describe(
      "Within every period each source's backup is restored in one target other than itself; the target rotates deterministically over the eligible ones from period to period (Go duration, 1m to 8784h).",
    ),
  })
  .superRefine((d, ctx) => {
    if ((d.targetClusters === undefined) === (d.targetSelector === undefined))
      ctx.addIssue({ code: "custom", message: "set exactly one of targetClusters and targetSelector" })
  })
  .meta({
    "x-kubernetes-validations": [
      {
        rule: "has(self.targetClusters) != has(self.targetSelector)",
        message: "set exactly one of targetClusters and targetSelector",
      },
    ],
  })
  .describe(
    "Cross-cluster restore drills: the backup each selected (source) member's placed check names is restored in another member (the target), by a drill BackupCheck placed there with the source's backup reference and spec.backup.cluster set to the source.",
  )

export type Drill = z.output<typeof DrillSchema>

export const FleetBackupCheckSpecSchema = z
  .strictObject({
    clusterSelector: LabelSelectorSchema.describe(
      "Which members get the check, by MemberCluster labels (metav1.LabelSelector); {} selects every member.",
    ),
    propertySelector: PropertySelectorSchema.optional().describe(
      "Narrows the selection to members whose ClusterProfile properties satisfy these requirements (ANDed with clusterSelector).",
    ),
    drill: DrillSchema.optional(),
    template: z
      .strictObject({
        metadata: TemplateMetadataSchema,
        spec: BackupCheckSpecSchema,
      })
      .describe("The BackupCheck placed in every selected member: metadata and a BackupCheck spec."),
  })
  .describe("A BackupCheck template and the members it is placed in.")

export type FleetBackupCheckSpec = z.output<typeof FleetBackupCheckSpecSchema>
export type FleetBackupCheckSpecInput = z.input<typeof FleetBackupCheckSpecSchema>

const count = (what: string) => z.int().min(0).meta({ format: "int32" }).describe(what)

export const ClusterPlacementSchema = z
  .object({
    name: z.string().min(1).max(253).describe("The member cluster (MemberCluster name)."),
    placement: z
      .enum(placementStates)
      .describe(
        "Placed; Pending (unreachable or not written yet); Conflict (a check not placed from here has the name); Refused (the member refused it); Removing (no longer selected, or deleting).",
      ),
    placementMessage: z.string().max(1024).optional().describe("Why the placement is not Placed."),
    verified: z
      .enum(conditionStatuses)
      .describe(
        "The placed check's Verified status as every fleet view shows it: Unknown while unreachable or not verified for its current spec.",
      ),
    reason: z.string().max(256).describe("The reason of that status."),
    message: z.string().max(1024).optional().describe("The message of that status."),
    objectivesMissed: z
      .array(z.enum(["restoreTime", "dataAge"]))
      .max(2)
      .optional()
      .describe("The placed check's objectives (spec.objectives) that its last run missed."),
    lastSuccessfulTime: TimestampSchema.optional().describe(
      "The placed check's last successful verification.",
    ),
    lastRun: z
      .object({
        runID: z.string().max(63).describe("The run's ID."),
        result: z.enum(runResults).describe("Running, Succeeded or Failed."),
        startTime: TimestampSchema.optional(),
        completionTime: TimestampSchema.optional(),
      })
      .optional()
      .describe("The placed check's most recent run."),
  })
  .describe("The placed check in one member.")

export type ClusterPlacement = z.output<typeof ClusterPlacementSchema>

export const FleetCountsSchema = z
  .object({
    selected: count("Members the selector matches."),
    placed: count("Selected members holding the placed check as the template says."),
    verified: count("Selected members whose placed check is verified."),
    failed: count("Selected members whose check failed or could not be placed."),
    unknown: count("Selected members whose verdict is unknown (unreachable, pending, running)."),
  })
  .describe("Member counts.")

export type FleetCounts = z.output<typeof FleetCountsSchema>

/** Whether a drill entry is this period's drill of its source, or an earlier pair's last verdict. */
export const drillStates = ["Current", "Previous"] as const

export const ClusterDrillSchema = z
  .object({
    source: z.string().min(1).max(253).describe("The member whose backup is restored."),
    target: z.string().min(1).max(253).describe("The member it is restored in (never the source)."),
    state: z
      .enum(drillStates)
      .describe("Current: this period's drill of the source; Previous: an earlier pair's last verdict."),
    check: z.string().max(253).optional().describe("The drill BackupCheck's name in the target."),
    since: TimestampSchema.optional().describe("When this pair's period started."),
    verified: z
      .enum(conditionStatuses)
      .describe("The drill check's Verified status as every fleet view shows it (Unknown while unseen)."),
    reason: z.string().max(256).describe("The reason of that status."),
    message: z.string().max(1024).optional().describe("The message of that status."),
    lastSuccessfulTime: TimestampSchema.optional().describe("The drill check's last successful restore."),
    lastRun: z
      .object({
        runID: z.string().max(63),
        result: z.enum(runResults),
        startTime: TimestampSchema.optional(),
        completionTime: TimestampSchema.optional(),
      })
      .optional()
      .describe("The drill check's most recent run."),
  })
  .describe("One drill pair: source → target, and its verdict.")

export type ClusterDrill = z.output<typeof ClusterDrillSchema>

export const FleetBackupCheckStatusSchema = z
  .object({
    observedGeneration: z
      .int()
      .min(0)
      .meta({ format: "int64" })
      .optional()
      .describe("The generation the hub last reconciled."),
    conditions: ConditionsSchema.optional(),
    counts: FleetCountsSchema.optional(),
    clusters: z
      .array(ClusterPlacementSchema)
      .max(10_000)
      .meta({ "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"] })
      .optional()
      .describe(
        "Per member: the selected ones, and those still holding a check placed from here (Removing).",
      ),
    drills: z
      .array(ClusterDrillSchema)
      .max(20_000)
      .meta({ "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["source", "target"] })
      .optional()
      .describe(
        "Cross-cluster drills (spec.drill): each source's current drill and the last verdict of its earlier targets (at most 8 per source).",
      ),
  })
  .describe("Observed state, written by the fleetcheck hub.")

export type FleetBackupCheckStatus = z.output<typeof FleetBackupCheckStatusSchema>

export const FleetBackupCheckSchema = z.object({
  apiVersion: z.literal(apiVersion),
  kind: z.literal(fleetBackupCheckKind),
  metadata: NamespacedObjectMetaSchema,
  spec: FleetBackupCheckSpecSchema,
  status: FleetBackupCheckStatusSchema.optional(),
})

export type FleetBackupCheck = z.output<typeof FleetBackupCheckSchema>

/** Validates a FleetBackupCheck as read from the hub, applying defaults. Never throws. */
export const parseFleetBackupCheck = (obj: unknown): ParseResult<FleetBackupCheck> =>
  parseResource(FleetBackupCheckSchema, obj)

/** The label value on checks placed from a FleetBackupCheck: `<namespace>.<name>`. */
export const placementLabelValue = (namespace: string, name: string): string => `${namespace}.${name}`

/** Why a FleetBackupCheck's name cannot be a label value (namespace.name over 63 characters), or undefined. */
export const placementLabelError = (namespace: string, name: string): string | undefined => {
  const value = placementLabelValue(namespace, name)
  return labelValueError(value) === undefined
    ? undefined
    : `"${value}" (namespace.name) must be a label value of at most 63 characters: shorten the name`
}

/** The FleetBackupCheck a placed check's label names, as a `namespace/name` key; a namespace has no dots. */
export const keyOfPlacementLabel = (value: string | undefined): string | undefined => {
  if (!value) return undefined
  const dot = value.indexOf(".")
  return dot <= 0 || dot === value.length - 1 ? undefined : `${value.slice(0, dot)}/${value.slice(dot + 1)}`
}
