// Builds the restore Job (or, with spec.validation, the validation Job) for one run of a BackupCheck: a pure function of the check, the run and the
// cluster, so every hub (and every retry) renders the same Job under the same deterministic name.
// The hub alone decides when a Job goes (history limits, after its result is recorded; ADR 0004), so
// the template's ttlSecondsAfterFinished is dropped: a Job the TTL controller deleted before the hub
// read it would be a lost verdict.
import type { V1Container, V1EnvVar, V1Job, V1JobSpec } from "@kubernetes/client-node"
import type { BackupCheck, BackupCheckSpecInput } from "../api/backupcheck.ts"
import { annotationTraceparent, labelBackupCheck, labelPhase, labelRun } from "../api/names.ts"
import { agentJobTemplate } from "./agent-job.ts"
import { labelValueFor } from "./run-identity.ts"

/** On every restore Job: specHashFor(spec) of the spec it was rendered from, the spec its verdict is about. */
export const annotationSpecHash = "fleetcheck.io/spec-hash"

export interface RestoreJobInput {
  readonly cluster: string
  /** The check (only what the Job needs); a parsed check fits, and so does one as written. */
  readonly check: Pick<BackupCheck, "apiVersion" | "kind"> & {
    readonly metadata: Pick<BackupCheck["metadata"], "name" | "namespace" | "uid">
    readonly spec: Pick<BackupCheckSpecInput, "backup" | "jobTemplate" | "restore" | "recoveryPoint">
  }
  /** The image of the restore agent, for a check with spec.restore (hub setting agent-image). */
  readonly agentImage?: string | undefined
  readonly jobName: string
  readonly runID: string
  readonly timeoutSeconds: number
  readonly traceparent: string
  /** specHashFor(check.spec) */
  readonly specHash: string
  /**
   * Renders the run's validation Job instead: spec.validation's template, labelled
   * fleetcheck.io/phase=validation, with the restore's outputs added to the contract env.
   */
  readonly validation?:
    | {
        readonly jobTemplate: NonNullable<BackupCheckSpecInput["jobTemplate"]>
        readonly env: ReadonlyArray<V1EnvVar>
      }
    | undefined
  /**
   * The run's sandbox (spec.sandbox): the Job goes there, labelled and annotated to its check instead
   * of owned by it (an ownerReference cannot cross namespaces).
   */
  readonly sandbox?:
    | {
        readonly namespace: string
        readonly labels: Readonly<Record<string, string>>
        readonly annotations: Readonly<Record<string, string>>
      }
    | undefined
}

const withEnv = (container: V1Container, injected: ReadonlyArray<V1EnvVar>): V1Container => {
  const names = new Set(injected.map((e) => e.name))
  return {
    ...container,
    // Ours win over same-named entries in the template: the contract values must be trustworthy.
    env: [...(container.env ?? []).filter((e) => !names.has(e.name)), ...injected],
    terminationMessagePolicy: container.terminationMessagePolicy ?? "FallbackToLogsOnError",
  }
}

/** spec.jobTemplate, or the restore agent's Job for spec.restore (one of them is set: the schema says so). */
const restoreTemplate = (input: RestoreJobInput): NonNullable<BackupCheckSpecInput["jobTemplate"]> => {
  const { check } = input
  if (check.spec.jobTemplate !== undefined) return check.spec.jobTemplate
  if (check.spec.restore === undefined || input.agentImage === undefined)
    throw new Error("a BackupCheck with spec.restore needs the hub's agent image")
  return agentJobTemplate({
    image: input.agentImage,
    restore: check.spec.restore as Parameters<typeof agentJobTemplate>[0]["restore"],
    recoveryPoint: check.spec.recoveryPoint as Parameters<typeof agentJobTemplate>[0]["recoveryPoint"],
    runID: input.runID,
    cluster: input.cluster,
    check: { namespace: check.metadata.namespace, name: check.metadata.name },
  })
}

export const renderRestoreJob = (input: RestoreJobInput): V1Job => {
  const { check, cluster, jobName, runID } = input
  const template = input.validation?.jobTemplate ?? restoreTemplate(input)
  const { ttlSecondsAfterFinished: _lifetimeIsTheHubs, ...jobSpec }: V1JobSpec = structuredClone(
    template.spec,
  )
  const podTemplate = jobSpec.template
  const podSpec = podTemplate.spec ?? { containers: [] }
  const injected: V1EnvVar[] = [
    { name: "FLEETCHECK_BACKUP_NAME", value: check.spec.backup.name },
    { name: "FLEETCHECK_BACKUP_SOURCE", value: check.spec.backup.source ?? "" },
    { name: "FLEETCHECK_EXPECTED_CHECKSUM", value: check.spec.backup.checksum ?? "" },
    { name: "FLEETCHECK_BACKUP_CLUSTER", value: check.spec.backup.cluster ?? "" },
    { name: "FLEETCHECK_CLUSTER", value: cluster },
    { name: "FLEETCHECK_RUN_ID", value: runID },
    { name: "TRACEPARENT", value: input.traceparent },
    ...(input.validation?.env ?? []),
  ]
  const labels = {
    ...input.sandbox?.labels,
    [labelBackupCheck]: labelValueFor(check.metadata.name),
    [labelRun]: labelValueFor(runID),
    ...(input.validation ? { [labelPhase]: "validation" } : {}),
  }
  return {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: {
      name: jobName,
      namespace: input.sandbox?.namespace ?? check.metadata.namespace,
      labels: { ...template.metadata?.labels, ...labels },
      annotations: {
        ...template.metadata?.annotations,
        ...input.sandbox?.annotations,
        [annotationTraceparent]: input.traceparent,
        [annotationSpecHash]: input.specHash,
      },
      ...(input.sandbox
        ? {}
        : {
            ownerReferences: [
              {
                apiVersion: check.apiVersion,
                kind: check.kind,
                name: check.metadata.name,
                uid: check.metadata.uid,
                controller: true,
                blockOwnerDeletion: true,
              },
            ],
          }),
    },
    spec: {
      // A verification that fails should say so, not retry six times with growing back-off.
      backoffLimit: 0,
      ...jobSpec,
      activeDeadlineSeconds: input.timeoutSeconds,
      template: {
        ...podTemplate,
        metadata: { ...podTemplate.metadata, labels: { ...podTemplate.metadata?.labels, ...labels } },
        spec: {
          restartPolicy: "Never",
          ...podSpec,
          containers: podSpec.containers.map((c) => withEnv(c, injected)),
          ...(podSpec.initContainers
            ? { initContainers: podSpec.initContainers.map((c) => withEnv(c, injected)) }
            : {}),
        },
      },
    },
  }
}
