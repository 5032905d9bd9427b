import * as z from "zod"
import { ObjectMetaSchema, type ParseResult, parseResource } from "./backupcheck.ts"
import { ConditionsSchema, TimestampSchema } from "./condition.ts"
import { apiVersion, memberClusterKind } from "./names.ts"

// MemberCluster (fleetcheck.io/v1alpha1, cluster-scoped, in the hub): one per registration Secret,
// written by the hub. The spec is nearly empty on purpose: the Secret is the registration.

export const memberClusterConditionTypes = {
  /** An engine is running for the member with synced caches. */
  Ready: "Ready",
  /** The member's API server is reachable (probed). */
  Connected: "Connected",
  /** The hub's credentials authenticate; False or CredentialsExpiringSoon ahead of expiry. */
  CredentialsValid: "CredentialsValid",
  /** Every BackupCheck in the member is Verified=True. */
  BackupsVerified: "BackupsVerified",
} as const
export type MemberClusterConditionType =
  (typeof memberClusterConditionTypes)[keyof typeof memberClusterConditionTypes]

export const memberClusterReasons = {
  /** CredentialsValid=True, but the token or client certificate expires soon. */
  CredentialsExpiringSoon: "CredentialsExpiringSoon",
} as const
export type MemberClusterReason = (typeof memberClusterReasons)[keyof typeof memberClusterReasons]

const count = (what: string) => z.int().min(0).meta({ format: "int32" }).describe(what)

export const MemberClusterSpecSchema = z
  .strictObject({
    description: z.string().max(1024).optional().describe("Free text about the member, for people."),
  })
  .describe("Nothing to configure: the registration Secret carries the connection.")

export type MemberClusterSpec = z.output<typeof MemberClusterSpecSchema>

export const CheckCountsSchema = z
  .object({
    total: count("BackupChecks in the member."),
    verified: count("BackupChecks with Verified=True."),
    failed: count("BackupChecks with Verified=False."),
    unknown: count("BackupChecks with Verified=Unknown or no condition, or all of them while unreachable."),
    objectivesMissed: count(
      "BackupChecks that missed an objective (RestoreTimeObjectiveMet or DataAgeObjectiveMet False).",
    ).optional(),
  })
  .describe("BackupCheck counts by Verified status.")

export type CheckCounts = z.output<typeof CheckCountsSchema>

/** Where a member's registration comes from. */
export const registrationSourceKinds = ["Secret", "ClusterAPISecret", "ClusterProfile"] as const
export type RegistrationSourceKind = (typeof registrationSourceKinds)[number]

export const RegistrationSourceSchema = z
  .object({
    kind: z
      .enum(registrationSourceKinds)
      .describe(
        "Secret (labelled fleetcheck.io/kubeconfig=true), ClusterAPISecret (a Cluster API <cluster>-kubeconfig Secret) or ClusterProfile (multicluster.x-k8s.io).",
      ),
    name: z.string().max(253).describe("The registering object's name, in the hub namespace."),
  })
  .describe("The object in the hub that registers this member.")

export type RegistrationSource = z.output<typeof RegistrationSourceSchema>

/** At most this many ClusterProfile properties are shown on a MemberCluster (and selectable). */
export const maxClusterProperties = 128

export const ClusterPropertySchema = z
  .object({
    name: z.string().min(1).max(253).describe("The property's name, as the ClusterProfile gives it."),
    value: z.string().max(1024).describe("Its value."),
  })
  .describe("A property of the ClusterProfile that registers the member.")

export const MemberClusterStatusSchema = z
  .object({
    source: RegistrationSourceSchema.optional(),
    properties: z
      .array(ClusterPropertySchema)
      .max(maxClusterProperties)
      .meta({ "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"] })
      .optional()
      .describe(
        "The registering ClusterProfile's status.properties (first 128, names and values bounded); what a FleetBackupCheck's propertySelector matches.",
      ),
    conditions: ConditionsSchema.optional(),
    clusterID: z
      .string()
      .max(64)
      .optional()
      .describe(
        "What the cluster says it is: its kube-system namespace UID (as the About API's cluster.clusterset.k8s.io ClusterProperty). Two registrations of one cluster ID with overlapping scopes: the earlier works, the later is Ready=False DuplicateMember.",
      ),
    kubernetesVersion: z
      .string()
      .max(64)
      .optional()
      .describe("The member API server's version, e.g. v1.37.2."),
    lastProbeTime: TimestampSchema.optional().describe("When the hub last probed the member's API server."),
    counts: CheckCountsSchema.optional(),
  })
  .describe("Observed state, written by the fleetcheck hub.")

export type MemberClusterStatus = z.output<typeof MemberClusterStatusSchema>

/** A MemberCluster's properties as a map (what a property selector matches). */
export const propertiesOf = (mc: {
  status?: { properties?: ReadonlyArray<{ name: string; value: string }> }
}) => Object.fromEntries((mc.status?.properties ?? []).map((p) => [p.name, p.value]))

export const MemberClusterSchema = z.object({
  apiVersion: z.literal(apiVersion),
  kind: z.literal(memberClusterKind),
  metadata: ObjectMetaSchema,
  spec: MemberClusterSpecSchema.optional(),
  status: MemberClusterStatusSchema.optional(),
})

export type MemberCluster = z.output<typeof MemberClusterSchema>

/** Validates a MemberCluster as read from the hub. Never throws. */
export const parseMemberCluster = (obj: unknown): ParseResult<MemberCluster> =>
  parseResource(MemberClusterSchema, obj)
