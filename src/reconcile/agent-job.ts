// The restore Job of a built-in method (spec.restore): the project's own image running
// `fleetcheck agent restore <method>`. Rendered as a jobTemplate, so everything after it (names,
// labels, the contract env, the sandbox, the verdict) is the same code as for a custom Job: the
// reconciler never learns what restic is. Pure, like renderRestoreJob.
import type { V1EnvVar } from "@kubernetes/client-node"
import type * as z from "zod"
import type { JobTemplateSchema } from "../api/backupcheck.ts"
import { labelAgent } from "../api/names.ts"
import { type RecoveryPointSpec, type RestoreMethod, restoreMethodOf } from "../api/restore.ts"

type JobTemplate = z.input<typeof JobTemplateSchema>

/** The pod annotation holding the run's JSON; the downward API mounts it as a file. */
export const annotationRunInput = "fleetcheck.io/run-input"

export const agentContainerName = "agent"
const runInputDir = "/etc/fleetcheck/run"
const runInputFile = "run.json"
export const scratchMountPath = "/scratch"

/**
 * What an agent pod asks for when nothing else is said: a restore is I/O and one tool at a time, and
 * the scratch space bounds how large a backup it can prove (larger: DataCorrupted is not the answer,
 * RestoreToolFailed naming the size is).
 */
export const agentResources = {
  requests: { cpu: "100m", memory: "256Mi", "ephemeral-storage": "1Gi" },
  limits: { memory: "2Gi", "ephemeral-storage": "10Gi" },
} as const

export interface AgentJobInput {
  readonly image: string
  readonly restore: RestoreMethod
  readonly recoveryPoint: RecoveryPointSpec | undefined
  readonly runID: string
  readonly cluster: string
  readonly check: { readonly namespace: string; readonly name: string }
}

/** The Secret the method names, if any (its keys become the agent's environment). */
const secretOf = (restore: RestoreMethod): string | undefined =>
  restore.restic?.credentialsSecretRef.name ??
  restore.postgres?.dump?.credentialsSecretRef?.name ??
  restore.postgres?.barmanObjectStore?.credentialsSecretRef.name ??
  restore.etcd?.snapshot.credentialsSecretRef?.name

export const agentJobTemplate = (input: AgentJobInput): JobTemplate => {
  const method = restoreMethodOf(input.restore)
  const secret = secretOf(input.restore)
  const runInput = {
    runID: input.runID,
    cluster: input.cluster,
    check: input.check,
    restore: input.restore,
    recoveryPoint: input.recoveryPoint ?? { policy: "Latest" },
  }
  const env: V1EnvVar[] = [
    { name: "FLEETCHECK_RUN_INPUT", value: `${runInputDir}/${runInputFile}` },
    { name: "FLEETCHECK_SCRATCH", value: scratchMountPath },
    {
      name: "FLEETCHECK_SCRATCH_LIMIT_BYTES",
      valueFrom: {
        resourceFieldRef: {
          containerName: agentContainerName,
          resource: "limits.ephemeral-storage",
          divisor: "1",
        },
      },
    },
    { name: "FLEETCHECK_TERMINATION_LOG", value: "/dev/termination-log" },
    // The root filesystem is read-only: the tools' home and temporary files go to scratch too.
    { name: "HOME", value: `${scratchMountPath}/home` },
    { name: "TMPDIR", value: `${scratchMountPath}/tmp` },
  ]
  return {
    spec: {
      template: {
        metadata: {
          labels: { [labelAgent]: "true" },
          annotations: { [annotationRunInput]: JSON.stringify(runInput) },
        },
        spec: {
          restartPolicy: "Never",
          automountServiceAccountToken: false,
          securityContext: { runAsNonRoot: true, runAsUser: 65532, runAsGroup: 65532, fsGroup: 65532 },
          containers: [
            {
              name: agentContainerName,
              image: input.image,
              args: ["agent", "restore", method],
              env,
              // optional: a missing Secret or key is the agent's clear message, not a pod stuck in
              // CreateContainerConfigError until the deadline.
              ...(secret ? { envFrom: [{ secretRef: { name: secret, optional: true } }] } : {}),
              resources: structuredClone(agentResources) as unknown as Record<string, unknown>,
              terminationMessagePath: "/dev/termination-log",
              terminationMessagePolicy: "FallbackToLogsOnError",
              securityContext: {
                allowPrivilegeEscalation: false,
                readOnlyRootFilesystem: true,
                capabilities: { drop: ["ALL"] },
              },
              volumeMounts: [
                { name: "run", mountPath: runInputDir, readOnly: true },
                { name: "scratch", mountPath: scratchMountPath },
              ],
            },
          ],
          volumes: [
            {
              name: "run",
              downwardAPI: {
                items: [
                  {
                    path: runInputFile,
                    fieldRef: { fieldPath: `metadata.annotations['${annotationRunInput}']` },
                  },
                ],
              },
            },
            { name: "scratch", emptyDir: { sizeLimit: agentResources.limits["ephemeral-storage"] } },
          ],
        },
      },
    },
  }
}
