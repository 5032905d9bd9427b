// The fleet API (`GET /api/v1/fleet`) as one zod schema, and the fleet's rules: what counts as a
// verified check, a healthy cluster, a healthy fleet. The hub builds its views with these types, and
// `fleetcheck status` parses the hub's answer with the same schema and judges it with the same rules,
// so the dashboard, the API, the CLI and the MemberCluster counts cannot disagree.
import * as z from "zod"
import { conditionStatuses } from "./condition.ts"
import { RegistrationSourceSchema } from "./membercluster.ts"

export const CheckViewSchema = z.object({
  cluster: z.string(),
  namespace: z.string(),
  name: z.string(),
  status: z.enum(conditionStatuses),
  reason: z.string(),
  message: z.string(),
  lastTransitionTime: z.string().optional(),
  lastSuccessfulTime: z.string().optional(),
  nextRunTime: z.string().optional(),
  traceID: z.string().optional(),
  runID: z.string().optional(),
  /**
   * The check's objectives (spec.objectives), when it has any: each condition's status (Unknown while
   * the cluster is unreachable or the spec not verified yet, like Verified) and the measured values of
   * the last finished run.
   */
  objectives: z
    .object({
      restoreTime: z.enum(conditionStatuses).optional(),
      dataAge: z.enum(conditionStatuses).optional(),
      restoreDurationSeconds: z.number().optional(),
      dataAgeSeconds: z.number().optional(),
    })
    .optional(),
  /** `namespace/name` of the FleetBackupCheck that placed this check, when one did. */
  fleetBackupCheck: z.string().optional(),
  /** On a drill check: the member whose backup it restores here. */
  drillSource: z.string().optional(),
})
export type CheckView = z.output<typeof CheckViewSchema>

/** A check missed an objective: one of its objective conditions is False. */
export const missesObjective = (check: Pick<CheckView, "objectives">): boolean =>
  check.objectives?.restoreTime === "False" || check.objectives?.dataAge === "False"

const ConditionViewSchema = z.object({
  status: z.enum(conditionStatuses),
  reason: z.string(),
  message: z.string(),
})

/**
 * A FleetBackupCheck as the leader last computed it: its conditions, counts and per-cluster results
 * (each cluster's verdict is its placed check's view by the rules below).
 */
export const FleetCheckViewSchema = z.object({
  namespace: z.string(),
  name: z.string(),
  /** The cluster selector in kubectl's text form. */
  selector: z.string(),
  /** Where the placed check lives in every selected member. */
  check: z.object({ namespace: z.string(), name: z.string() }).optional(),
  generation: z.number(),
  placed: ConditionViewSchema,
  verified: ConditionViewSchema,
  counts: z.object({
    selected: z.number(),
    placed: z.number(),
    verified: z.number(),
    failed: z.number(),
    unknown: z.number(),
  }),
  clusters: z.array(
    z.object({
      name: z.string(),
      placement: z.string(),
      status: z.enum(conditionStatuses),
      reason: z.string(),
      message: z.string().optional(),
      /** The placed check's objectives its last run missed (the FleetBackupCheck's status says so). */
      objectivesMissed: z.array(z.enum(["restoreTime", "dataAge"])).optional(),
      lastSuccessfulTime: z.string().optional(),
      runID: z.string().optional(),
    }),
  ),
  /**
   * Cross-cluster drills (spec.drill): source → target pairs, this round's (Current) and earlier pairs'
   * last verdicts (Previous); the drill check lives in the target, in the placed check's namespace.
   */
  drills: z
    .array(
      z.object({
        source: z.string(),
        target: z.string(),
        state: z.string(),
        check: z.string().optional(),
        since: z.string().optional(),
        status: z.enum(conditionStatuses),
        reason: z.string(),
        message: z.string().optional(),
        lastSuccessfulTime: z.string().optional(),
        runID: z.string().optional(),
      }),
    )
    .optional(),
})
export type FleetCheckView = z.output<typeof FleetCheckViewSchema>

export const ClusterViewSchema = z.object({
  name: z.string(),
  labels: z.record(z.string(), z.string()),
  conditions: z.array(
    z.object({
      type: z.string(),
      status: z.enum(conditionStatuses),
      reason: z.string(),
      message: z.string(),
      lastTransitionTime: z.string().optional(),
      observedGeneration: z.number().optional(),
    }),
  ),
  counts: z.object({
    total: z.number(),
    verified: z.number(),
    failed: z.number(),
    unknown: z.number(),
    /** Checks with an objective condition False (RestoreTimeObjectiveMet, DataAgeObjectiveMet). */
    objectivesMissed: z.number().optional(),
  }),
  kubernetesVersion: z.string().optional(),
  lastProbeTime: z.string().optional(),
  /** What registers the member: a Secret, a Cluster API Secret or a ClusterProfile. */
  source: RegistrationSourceSchema.optional(),
})
export type ClusterView = z.output<typeof ClusterViewSchema>

/**
 * Paging, as the Kubernetes list API does it: `continue` is opaque, set when more items follow; pass it
 * back with the same filters to get the next page. `remainingItemCount` counts the clusters and checks
 * after this page.
 */
export const ListMetaSchema = z.object({
  continue: z.string().optional(),
  remainingItemCount: z.number().optional(),
})
export type ListMeta = z.output<typeof ListMetaSchema>

/** Totals over everything the filters select (every page), not just this page. */
export const FleetSummarySchema = z.object({
  clusters: z.number(),
  /** Clusters whose Ready, Connected and CredentialsValid are all True. */
  healthyClusters: z.number(),
  checks: z.object({
    total: z.number(),
    verified: z.number(),
    failed: z.number(),
    unknown: z.number(),
    objectivesMissed: z.number().optional(),
  }),
})
export type FleetSummary = z.output<typeof FleetSummarySchema>

/**
 * The fleet API's answer. With `limit`, clusters (by name) and checks (failing first) are paged side
 * by side: a page holds at most `limit` of each, and concatenating the pages' clusters and checks gives
 * the whole view. Continue pages are cut from the first page's view while the hub keeps it (30 s
 * between pages; `generatedAt` says when it was taken), else from a fresh view after the last keys
 * returned. Without `limit`, one answer holds everything.
 */
export const FleetViewSchema = z.object({
  generatedAt: z.string(),
  metadata: ListMetaSchema.optional(),
  summary: FleetSummarySchema.optional(),
  /** Whether the hub that answered leads (only a leader's view is the fleet's). */
  leader: z.boolean().optional(),
  /** The identity of the hub that answered. */
  hub: z.string().optional(),
  clusters: z.array(ClusterViewSchema),
  checks: z.array(CheckViewSchema),
  /** FleetBackupChecks by namespace/name; on the first page only (not repeated on continue pages). */
  fleetChecks: z.array(FleetCheckViewSchema).optional(),
})
export type FleetView = z.output<typeof FleetViewSchema>

/** The member conditions a cluster must have True to count as healthy. */
export const healthyClusterConditions = ["Ready", "Connected", "CredentialsValid"] as const

/** Green means Verified=True: anything else (False, Unknown) needs a look. */
export const isVerified = (check: Pick<CheckView, "status">): boolean => check.status === "True"

/** A cluster is healthy when its engine is ready, its API answers and its credentials work. */
export const isClusterHealthy = (cluster: Pick<ClusterView, "conditions">): boolean =>
  healthyClusterConditions.every((type) => cluster.conditions.find((c) => c.type === type)?.status === "True")

/** A FleetBackupCheck is green only when FleetVerified is True. */
export const isFleetCheckVerified = (f: Pick<FleetCheckView, "verified">): boolean => isVerified(f.verified)

/**
 * Every check verified, every cluster healthy and every FleetBackupCheck verified: what
 * `fleetcheck status` exits 0 for.
 */
export const isFleetHealthy = (view: Pick<FleetView, "clusters" | "checks" | "fleetChecks">): boolean =>
  view.checks.every(isVerified) &&
  view.clusters.every(isClusterHealthy) &&
  (view.fleetChecks ?? []).every(isFleetCheckVerified)

/** Failing first, then unknown, then verified: the order every view lists checks in. */
export const checkRank = (check: Pick<CheckView, "status">): number =>
  check.status === "False" ? 0 : check.status === "Unknown" ? 1 : 2
