// What the hub keeps of a restore Job in its cache: the fields the reconciler and the engine's handlers
// read, nothing else (controller-runtime users do the same with a cache transform). A Job as the API
// server returns it carries its whole pod template with the API server's defaults, the selector and
// the Job controller's bookkeeping; the hub reads none of that, and a wave leaves one Job per check in
// the cache (ADR 0010). The type is the projection's, so code reading a field the cache drops does not
// compile; a Job read from the API (GET, POST) is a CachedJob too, with more in it.
import type { V1EnvVar, V1JobStatus, V1ObjectMeta } from "@kubernetes/client-node"

/** The contract env entry naming the backup a Job restores (restore-job.ts sets it on every container). */
export const backupNameEnv = "FLEETCHECK_BACKUP_NAME"

export interface CachedJob {
  readonly apiVersion?: string | undefined
  readonly kind?: string | undefined
  readonly metadata?:
    | Pick<
        V1ObjectMeta,
        | "name"
        | "namespace"
        | "uid"
        | "resourceVersion"
        | "creationTimestamp"
        | "deletionTimestamp"
        | "labels"
        | "annotations"
        | "ownerReferences"
      >
    | undefined
  /** Only the first container's backup name (the contract env), for the run's record. */
  readonly spec?:
    | {
        readonly template: {
          readonly spec?:
            | {
                readonly containers: ReadonlyArray<{
                  readonly name: string
                  readonly env?: ReadonlyArray<V1EnvVar> | undefined
                }>
              }
            | undefined
        }
      }
    | undefined
  /** The verdict's inputs: the Job controller's conditions and completion time (job-outcome.ts, runs.ts). */
  readonly status?: Pick<V1JobStatus, "conditions" | "completionTime"> | undefined
}

/**
 * The cached form of a Job: a new object holding the wire object's labels, annotations, owner
 * references and conditions (not copied: the store never mutates them), so the rest is garbage.
 */
export const cachedJob = (job: CachedJob): CachedJob => {
  const md = job.metadata
  const first = job.spec?.template?.spec?.containers?.[0]
  const backup = first?.env?.find((e) => e.name === backupNameEnv)
  const status = job.status
  return {
    ...(md === undefined
      ? {}
      : {
          metadata: {
            name: md.name,
            namespace: md.namespace,
            uid: md.uid,
            resourceVersion: md.resourceVersion,
            creationTimestamp: md.creationTimestamp,
            ...(md.deletionTimestamp !== undefined ? { deletionTimestamp: md.deletionTimestamp } : {}),
            ...(md.labels !== undefined ? { labels: md.labels } : {}),
            ...(md.annotations !== undefined ? { annotations: md.annotations } : {}),
            ...(md.ownerReferences !== undefined ? { ownerReferences: md.ownerReferences } : {}),
          },
        }),
    ...(first === undefined
      ? {}
      : {
          spec: {
            template: {
              spec: {
                containers: [
                  {
                    name: first.name,
                    ...(backup === undefined ? {} : { env: [{ name: backup.name, value: backup.value }] }),
                  },
                ],
              },
            },
          },
        }),
    ...(status === undefined
      ? {}
      : {
          status: {
            ...(status.conditions !== undefined ? { conditions: status.conditions } : {}),
            ...(status.completionTime !== undefined ? { completionTime: status.completionTime } : {}),
          },
        }),
  }
}
