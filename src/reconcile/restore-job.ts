// Builds the restore Job for one run of a BackupCheck: a pure function of the check, the run and the
// cluster, so every hub (and every retry) renders the same Job under the same deterministic name.
import { createHash } from "node:crypto"
import type { V1Container, V1EnvVar, V1Job } from "@kubernetes/client-node"
import { annotationTraceparent, labelBackupCheck, labelRun } from "../api/names.ts"

/** Exit code a restore tool uses to say "restored, but the checksum did not match". */
export const checksumMismatchExitCode = 3

export interface RestoreJobInput {
  readonly cluster: string
  readonly check: {
    readonly apiVersion: string
    readonly kind: string
    readonly metadata: { readonly name: string; readonly namespace: string; readonly uid: string }
    readonly spec: {
      readonly backup: {
        readonly name: string
        readonly source?: string | undefined
        readonly checksum?: string | undefined
      }
      readonly jobTemplate: {
        readonly metadata?: { labels?: Record<string, string>; annotations?: Record<string, string> }
        readonly spec: any
      }
    }
  }
  readonly jobName: string
  readonly runID: string
  readonly timeoutSeconds: number
  readonly traceparent: string
}

/**
 * Label values are at most 63 characters; longer check names are shortened with a stable hash. The
 * Job's controller ownerReference (by uid) stays the exact link back to its check.
 */
export const labelValueFor = (value: string): string => {
  if (value.length <= 63) return value
  const hash = createHash("sha256").update(value).digest("hex").slice(0, 10)
  return `${value.slice(0, 52).replace(/[-_.]+$/, "")}-${hash}`
}

/** W3C trace context for a run: derived from the check's uid and the run id, so it is the same on every hub. */
export const traceparentFor = (uid: string, runID: string): { traceparent: string; traceID: string } => {
  const digest = createHash("sha256").update(`${uid}/${runID}`).digest("hex")
  const traceID = digest.slice(0, 32)
  const spanID = digest.slice(32, 48)
  return { traceID, traceparent: `00-${traceID}-${spanID}-01` }
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

export const renderRestoreJob = (input: RestoreJobInput): V1Job => {
  const { check, cluster, jobName, runID } = input
  const template = check.spec.jobTemplate
  const jobSpec = structuredClone(template.spec ?? {})
  const podTemplate = jobSpec.template ?? {}
  const podSpec = podTemplate.spec ?? {}
  const injected: V1EnvVar[] = [
    { name: "FLEETCHECK_BACKUP_NAME", value: check.spec.backup.name },
    { name: "FLEETCHECK_BACKUP_SOURCE", value: check.spec.backup.source ?? "" },
    { name: "FLEETCHECK_EXPECTED_CHECKSUM", value: check.spec.backup.checksum ?? "" },
    { name: "FLEETCHECK_CLUSTER", value: cluster },
    { name: "FLEETCHECK_RUN_ID", value: runID },
    { name: "TRACEPARENT", value: input.traceparent },
  ]
  const labels = { [labelBackupCheck]: labelValueFor(check.metadata.name), [labelRun]: labelValueFor(runID) }
  return {
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: {
      name: jobName,
      namespace: check.metadata.namespace,
      labels: { ...template.metadata?.labels, ...labels },
      annotations: { ...template.metadata?.annotations, [annotationTraceparent]: input.traceparent },
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
          containers: (podSpec.containers ?? []).map((c: V1Container) => withEnv(c, injected)),
          ...(podSpec.initContainers
            ? { initContainers: podSpec.initContainers.map((c: V1Container) => withEnv(c, injected)) }
            : {}),
        },
      },
    },
  }
}
