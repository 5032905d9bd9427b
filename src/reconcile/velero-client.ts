// The requests spec.restore.velero sends to a member, through the reconciler's REST client. Every read
// is a LIST (by name, by label): a LIST that answers 404 means the member serves no velero.io/v1 kind
// of that name, which is how "Velero is not installed" is told apart from "that object does not exist".
// Answers are parsed by velero-restore.ts's schemas, never used as they came.
import { Effect } from "effect"
import { labelBackupCheckUid } from "../api/names.ts"
import type { VeleroRestore } from "../api/restore.ts"
import { isAlreadyExists, isNotFound, type KubeApiError, type KubeClient } from "../kube/client.ts"
import { deployments, pathOf, statefulSets, veleroBackups, veleroRestores } from "../kube/resources.ts"
import {
  labelScheduleName,
  parseList,
  type Readiness,
  readiness,
  type VeleroBackup,
  VeleroBackupSchema,
  type VeleroRestoreObject,
  VeleroRestoreObjectSchema,
  WorkloadSchema,
} from "./velero-restore.ts"

/** The member serves no velero.io/v1 Backups or Restores. */
export const veleroAbsent = { kind: "absent" } as const
type Absent = typeof veleroAbsent

const absentOn404 = <A>(e: Effect.Effect<A, unknown>): Effect.Effect<A | Absent, unknown> =>
  e.pipe(Effect.catchIf(isNotFound, () => Effect.succeed(veleroAbsent)))

/** Whether an answer is veleroAbsent (a type guard: identity alone narrows nothing). */
export const isVeleroAbsent = (v: unknown): v is Absent => v === veleroAbsent

/** The Backups a run may restore: the named one, or those of the schedule (by Velero's label). */
export const listBackups = (
  client: KubeClient,
  velero: Pick<VeleroRestore, "namespace" | "backupName" | "scheduleName">,
): Effect.Effect<{ readonly kind: "listed"; readonly backups: VeleroBackup[] } | Absent, unknown> =>
  absentOn404(
    client.request<unknown>({
      method: "GET",
      path: pathOf(veleroBackups, { namespace: velero.namespace }),
      query:
        velero.backupName !== undefined
          ? { fieldSelector: `metadata.name=${velero.backupName}` }
          : { labelSelector: `${labelScheduleName}=${velero.scheduleName ?? ""}` },
    }),
  ).pipe(
    Effect.map((body) =>
      isVeleroAbsent(body)
        ? veleroAbsent
        : { kind: "listed" as const, backups: parseList(VeleroBackupSchema, body).items },
    ),
  )

/** The Restore of that name as the API server has it now; undefined when there is none. */
export const liveRestore = (
  client: KubeClient,
  namespace: string,
  name: string,
): Effect.Effect<VeleroRestoreObject | undefined | Absent, unknown> =>
  absentOn404(
    client.request<unknown>({
      method: "GET",
      path: pathOf(veleroRestores, { namespace }),
      query: { fieldSelector: `metadata.name=${name}` },
    }),
  ).pipe(
    Effect.map((body) =>
      isVeleroAbsent(body) ? veleroAbsent : parseList(VeleroRestoreObjectSchema, body).items[0],
    ),
  )

/** A check's Restores (by its uid label), for cleanup after restarts and deletion. */
export const restoresOfCheck = (
  client: KubeClient,
  namespace: string,
  uid: string,
): Effect.Effect<VeleroRestoreObject[], unknown> =>
  absentOn404(
    client.request<unknown>({
      method: "GET",
      path: pathOf(veleroRestores, { namespace }),
      query: { labelSelector: `${labelBackupCheckUid}=${uid}` },
    }),
  ).pipe(Effect.map((body) => (isVeleroAbsent(body) ? [] : parseList(VeleroRestoreObjectSchema, body).items)))

export type CreateRestoreResult =
  | { readonly kind: "created"; readonly restore: VeleroRestoreObject | undefined }
  | { readonly kind: "exists" }
  | Absent

/** POSTs the run's Restore. AlreadyExists is "exists" (the caller reads it back); a refusal fails. */
export const createRestore = (
  client: KubeClient,
  namespace: string,
  body: unknown,
): Effect.Effect<CreateRestoreResult, KubeApiError | unknown> =>
  client.request<unknown>({ method: "POST", path: pathOf(veleroRestores, { namespace }), body }).pipe(
    Effect.map((created): CreateRestoreResult => {
      const parsed = VeleroRestoreObjectSchema.safeParse(created)
      return { kind: "created", restore: parsed.success ? parsed.data : undefined }
    }),
    Effect.catchIf(isAlreadyExists, () => Effect.succeed({ kind: "exists" } as const)),
    Effect.catchIf(isNotFound, () => Effect.succeed(veleroAbsent)),
  )

/** Deletes a Restore (its uid as precondition when known); gone, or Velero gone, is done. */
export const deleteRestore = (client: KubeClient, namespace: string, name: string, uid?: string) =>
  client
    .request({
      method: "DELETE",
      path: pathOf(veleroRestores, { namespace, name }),
      body: {
        apiVersion: "v1",
        kind: "DeleteOptions",
        propagationPolicy: "Background",
        ...(uid !== undefined ? { preconditions: { uid } } : {}),
      },
    })
    .pipe(
      Effect.asVoid,
      Effect.catchIf(isNotFound, () => Effect.void),
    )

/** Whether every Deployment and StatefulSet in the sandbox is available. */
export const sandboxReadiness = (client: KubeClient, namespace: string): Effect.Effect<Readiness, unknown> =>
  Effect.all(
    [deployments, statefulSets].map((kind) =>
      client
        .request<unknown>({ method: "GET", path: pathOf(kind, { namespace }) })
        .pipe(Effect.map((body) => parseList(WorkloadSchema, body).items)),
    ),
  ).pipe(Effect.map(([d, s]) => readiness(d ?? [], s ?? [])))
