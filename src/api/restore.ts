import * as z from "zod"
import { durationPattern, parseDuration } from "./syntax.ts"

// spec.restore (SPEC §12): a typed restore method beside the custom spec.jobTemplate. Each method is a
// key of one object, exactly one set (CEL), so a method that runs in a Job (restic, postgres, etcd:
// the restore agent) and one that drives another operator's resource (velero) share one union and
// the CRD can say which is set without a discriminator field users must repeat.

const SecretRefSchema = z
  .strictObject({
    name: z
      .string()
      .min(1)
      .max(253)
      .regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, { error: "must be a Secret name (DNS-1123 subdomain)" })
      .describe("A Secret in the check's namespace; each key becomes an environment variable of the agent."),
  })
  .describe(
    "The Secret holding the credentials, its keys named as the tool's environment (never copied into status).",
  )

export const ResticRestoreSchema = z
  .strictObject({
    repository: z
      .string()
      .min(1)
      .max(4096)
      .describe(
        "The restic repository (RESTIC_REPOSITORY): a path, s3:http(s)://host/bucket/prefix, rest:, sftp: …",
      ),
    credentialsSecretRef: SecretRefSchema,
    snapshot: z
      .string()
      .max(64)
      .regex(/^(latest|[0-9a-f]{8,64})$/, { error: 'must be "latest" or a snapshot id (8 to 64 hex digits)' })
      .default("latest")
      .describe("latest (default: chosen by spec.recoveryPoint) or a snapshot id."),
    host: z.string().min(1).max(253).optional().describe("Only snapshots of this host."),
    tags: z
      .array(z.string().min(1).max(253))
      .max(16)
      .optional()
      .describe("Only snapshots with all of these tags."),
    paths: z.array(z.string().min(1).max(4096)).max(16).optional().describe("Only snapshots of these paths."),
    verify: z
      .strictObject({
        readDataSubset: z
          .string()
          .max(16)
          .regex(/^([0-9]{1,3}(\.[0-9]+)?%|[0-9]+\/[0-9]+)$/, {
            error: "must be a percentage like 5% or n/t like 1/10",
          })
          .optional()
          .describe(
            "restic check --read-data-subset: how much of the pack data to read back and verify (e.g. 5%).",
          ),
        files: z
          .array(
            z.strictObject({
              path: z
                .string()
                .min(1)
                .max(4096)
                .describe("A file's path as restic ls lists it, e.g. /data/orders.csv."),
              sha256: z.string().regex(/^[0-9a-f]{64}$/, { error: "must be 64 lower-case hex digits" }),
            }),
          )
          .max(64)
          .optional()
          .describe("Files whose restored content must have these SHA-256 hashes."),
        minFiles: z
          .int()
          .min(0)
          .meta({ format: "int64" })
          .optional()
          .describe("At least this many files restored."),
        minBytes: z
          .int()
          .min(0)
          .meta({ format: "int64" })
          .optional()
          .describe("At least this many bytes restored."),
      })
      .default({})
      .describe("What the restored snapshot must show besides restic's own verification."),
  })
  .describe("Restore a restic snapshot into the agent's scratch space and verify it.")

const AssertionSchema = z
  .strictObject({
    name: z
      .string()
      .min(1)
      .max(63)
      .regex(/^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$/, {
        error: "must be a short identifier (letters, digits, _ . -)",
      }),
    sql: z.string().min(1).max(4096).describe("A query returning one row with one number."),
    min: z.number().optional(),
    max: z.number().optional(),
    equals: z.number().optional(),
  })
  .describe(
    "A query on the restored database and the bounds its single value must meet; its value is reported as a count.",
  )

export const PostgresRestoreSchema = z
  .strictObject({
    dump: z
      .strictObject({
        url: z
          .string()
          .min(1)
          .max(4096)
          .describe("The pg_dump archive (custom or directory format): a path, file:// or s3:// URL."),
        credentialsSecretRef: SecretRefSchema.optional(),
        endpointURL: z.string().max(4096).optional().describe("The S3 endpoint, for an s3:// url."),
      })
      .optional(),
    barmanObjectStore: z
      .strictObject({
        destinationPath: z
          .string()
          .min(1)
          .max(4096)
          .describe("s3://bucket/path, as CloudNativePG's barmanObjectStore."),
        serverName: z.string().min(1).max(253),
        endpointURL: z.string().max(4096).optional(),
        credentialsSecretRef: SecretRefSchema,
        recoveryTargetTime: z
          .string()
          .max(64)
          .optional()
          .describe("Point in time to recover to (RFC 3339); the end of the WAL when unset."),
      })
      .optional(),
    database: z.string().min(1).max(63).default("postgres").describe("The database the assertions run in."),
    assertions: z.array(AssertionSchema).max(32).default([]),
    dataTimestampQuery: z
      .string()
      .max(4096)
      .optional()
      .describe(
        "A query returning the newest record's time in the restored data: the run's dataTimestamp (maxDataAge).",
      ),
  })
  .superRefine((p, ctx) => {
    if ((p.dump === undefined) === (p.barmanObjectStore === undefined))
      ctx.addIssue({ code: "custom", message: "exactly one of dump and barmanObjectStore" })
  })
  .meta({
    "x-kubernetes-validations": [
      {
        rule: "has(self.dump) != has(self.barmanObjectStore)",
        message: "exactly one of dump and barmanObjectStore",
      },
    ],
  })
  .describe(
    "Restore a pg_dump archive or a barman-cloud (CloudNativePG) backup into a throwaway Postgres in the pod, then run the assertions.",
  )

export const EtcdRestoreSchema = z
  .strictObject({
    snapshot: z.strictObject({
      url: z
        .string()
        .min(1)
        .max(4096)
        .describe("The snapshot file (etcdctl snapshot save): a path, file:// or s3:// URL."),
      credentialsSecretRef: SecretRefSchema.optional(),
      endpointURL: z.string().max(4096).optional(),
    }),
    expectKeys: z
      .array(
        z.strictObject({
          prefix: z.string().min(1).max(1024),
          min: z.int().min(0).meta({ format: "int64" }).default(1),
        }),
      )
      .max(32)
      .default([]),
  })
  .describe(
    "Restore an etcd snapshot with etcdutl, start etcd on loopback in the pod, count keys per prefix.",
  )

const k8sName = (what: string) =>
  z
    .string()
    .min(1)
    .max(253)
    .regex(/^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$/, { error: `must be a ${what} name (DNS-1123 subdomain)` })
const namespaceName = z
  .string()
  .min(1)
  .max(63)
  .regex(/^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/, { error: "must be a namespace name (DNS-1123 label)" })

export const VeleroRestoreSchema = z
  .strictObject({
    namespace: namespaceName
      .default("velero")
      .describe("Velero's namespace: where its Backups are and the hub creates the Restore."),
    backupName: k8sName("Backup").optional().describe("Restore this Velero Backup (it must be Completed)."),
    scheduleName: k8sName("Schedule")
      .optional()
      .describe(
        "Restore a Completed Backup of this Velero Schedule (label velero.io/schedule-name): the newest, or as spec.recoveryPoint chooses.",
      ),
    includedNamespaces: z
      .array(namespaceName)
      .min(1)
      .max(32)
      .optional()
      .describe(
        "The backed-up namespaces to restore (default: the Backup's own includedNamespaces); each is mapped into the run's sandbox.",
      ),
    restorePVs: z
      .boolean()
      .default(false)
      .describe("Restore volume data (Velero's restorePVs); cluster-scoped objects are never restored."),
    waitForReady: z
      .boolean()
      .default(true)
      .describe(
        "Before the validation phase, wait until every restored Deployment and StatefulSet in the sandbox is available.",
      ),
  })
  .superRefine((v, ctx) => {
    if ((v.backupName === undefined) === (v.scheduleName === undefined))
      ctx.addIssue({ code: "custom", message: "exactly one of backupName and scheduleName" })
  })
  .meta({
    "x-kubernetes-validations": [
      {
        rule: "has(self.backupName) != has(self.scheduleName)",
        message: "exactly one of backupName and scheduleName",
      },
    ],
  })
  .describe(
    "Restore a Velero Backup into the run's sandbox with a velero.io/v1 Restore the hub creates (spec.sandbox is required), then judge it by the Restore's status.",
  )
export type VeleroRestore = z.output<typeof VeleroRestoreSchema>

const restoreMethods = ["restic", "postgres", "etcd", "velero"] as const
export type RestoreMethodName = (typeof restoreMethods)[number]
/** The methods the restore agent runs in a Job; velero is driven by the hub through Velero's Restore. */
export type AgentMethodName = Exclude<RestoreMethodName, "velero">

export const RestoreMethodSchema = z
  .strictObject({
    restic: ResticRestoreSchema.optional(),
    postgres: PostgresRestoreSchema.optional(),
    etcd: EtcdRestoreSchema.optional(),
    velero: VeleroRestoreSchema.optional(),
  })
  .superRefine((r, ctx) => {
    const set = restoreMethods.filter((m) => r[m] !== undefined)
    if (set.length !== 1)
      ctx.addIssue({
        code: "custom",
        message: `exactly one restore method (${restoreMethods.join(", ")}), got ${set.length}`,
      })
  })
  .meta({
    "x-kubernetes-validations": [
      {
        rule: "[has(self.restic), has(self.postgres), has(self.etcd), has(self.velero)].filter(x, x).size() == 1",
        message: "exactly one restore method",
      },
    ],
  })
  .describe(
    "A built-in restore method (restic, postgres, etcd: run by the restore agent; velero: a Velero Restore the hub drives); instead of jobTemplate.",
  )
export type RestoreMethod = z.output<typeof RestoreMethodSchema>

/** Which method a parsed spec.restore holds. */
export const restoreMethodOf = (r: RestoreMethod): RestoreMethodName =>
  restoreMethods.find((m) => r[m] !== undefined) ?? "restic"

export const RecoveryPointSpecSchema = z
  .strictObject({
    policy: z
      .enum(["Latest", "Random"])
      .default("Latest")
      .describe("Latest (default) or Random within window."),
    window: z
      .string()
      .max(64)
      .regex(durationPattern, { error: "must be a Go duration like 720h" })
      .refine((s) => typeof parseDuration(s) === "number", { error: "must be a Go duration like 720h" })
      .optional()
      .describe("With Random: how far back a recovery point may be (Go duration); every point when unset."),
  })
  .describe(
    "Which recovery point a run restores (AWS Backup's restore testing): the newest, or one at random so old points get tested too.",
  )
export type RecoveryPointSpec = z.output<typeof RecoveryPointSpecSchema>
