// Sandbox per run (spec.sandbox, ADR 0009): the objects the hub creates in a member for one run of a
// check, and what becomes of them after the verdict, as pure functions of the check, the run and the
// cluster's state, so every hub (and every hub after a restart) derives the same names, the same
// manifests (AlreadyExists dedups two hubs) and the same cleanup decision.
import { createHash } from "node:crypto"
import type { V1LimitRange, V1Namespace, V1NetworkPolicy, V1ResourceQuota } from "@kubernetes/client-node"
import type { LastRun, SandboxSpec, SandboxStatus } from "../api/backupcheck.ts"
import { toKubeTime } from "../api/condition.ts"
import {
  annotationBackupCheck,
  labelBackupCheck,
  labelBackupCheckUid,
  labelRun,
  labelSandbox,
} from "../api/names.ts"
import { labelValueFor } from "./run-identity.ts"

/** The name of the NetworkPolicy, ResourceQuota and LimitRange in every sandbox. */
export const sandboxObjectName = "fleetcheck-sandbox"

const prefix = "fcsb-"
const hashLength = 10

/**
 * The run's sandbox namespace: `fcsb-<check name>-<run id>-<10 hex of sha256(uid, run id)>`, the
 * readable part cut so the whole is at most 63 characters, a DNS-1123 label: deterministic per check
 * and run, distinct for a check re-created under the same name (its uid), readable in `kubectl get ns`.
 */
export const sandboxNamespaceFor = (
  check: { readonly name: string; readonly uid: string },
  runID: string,
) => {
  const hash = createHash("sha256").update(`${check.uid}\u0000${runID}`).digest("hex").slice(0, hashLength)
  const readable = `${check.name}-${runID}`
    .toLowerCase()
    .replace(/[^a-z0-9-]+/g, "-")
    .replace(/-+/g, "-")
    .slice(0, 63 - prefix.length - hashLength - 1)
    .replace(/^-+|-+$/g, "")
  return readable === "" ? `${prefix}${hash}` : `${prefix}${readable}-${hash}`
}

export interface SandboxCheck {
  readonly name: string
  readonly namespace: string
  readonly uid: string
}

/** Labels of a sandbox and of everything the hub creates in it: the sweeper finds them by these. */
export const sandboxLabels = (check: SandboxCheck, runID: string): Record<string, string> => ({
  [labelSandbox]: "true",
  [labelBackupCheck]: labelValueFor(check.name),
  [labelBackupCheckUid]: check.uid,
  [labelRun]: labelValueFor(runID),
})

/** The check's key on a sandbox and its Jobs (`<namespace>/<name>`, which no label value can hold). */
export const sandboxAnnotations = (check: SandboxCheck): Record<string, string> => ({
  [annotationBackupCheck]: `${check.namespace}/${check.name}`,
})

/** The check a sandbox (or a Job in one) says it belongs to, as a queue key; undefined when unlabelled. */
export const sandboxCheckKey = (obj: {
  readonly metadata?: {
    readonly labels?: Record<string, string>
    readonly annotations?: Record<string, string>
  }
}): string | undefined => {
  if (obj.metadata?.labels?.[labelSandbox] !== "true") return undefined
  const key = obj.metadata.annotations?.[annotationBackupCheck]
  return key !== undefined && /^[a-z0-9][-a-z0-9]*\/[^/]+$/.test(key) && key.length <= 317 ? key : undefined
}

/** The check uid a sandbox namespace (or a Job in one) is labelled with. */
export const sandboxCheckUid = (obj: { readonly metadata?: { readonly labels?: Record<string, string> } }) =>
  obj.metadata?.labels?.[labelSandbox] === "true" ? obj.metadata.labels[labelBackupCheckUid] : undefined

/** Pod Security Admission levels, loosest first. */
const podSecurityLevels = ["privileged", "baseline", "restricted"] as const
export type PodSecurityLevel = (typeof podSecurityLevels)[number]
export const podSecurityEnforceLabel = "pod-security.kubernetes.io/enforce"

/**
 * The Pod Security level a sandbox enforces: the check's namespace's, but never looser than baseline,
 * so a sandbox is never a way around the admission rules of the namespace the check lives in.
 */
export const sandboxPodSecurity = (checkNamespaceLabels: Readonly<Record<string, string>> | undefined) => {
  const level = checkNamespaceLabels?.[podSecurityEnforceLabel]
  const rank = podSecurityLevels.indexOf(level as PodSecurityLevel)
  return rank > 1 ? podSecurityLevels[rank] : "baseline"
}

export interface SandboxObjects {
  readonly namespace: V1Namespace
  readonly networkPolicy: V1NetworkPolicy
  readonly resourceQuota: V1ResourceQuota | undefined
  readonly limitRange: V1LimitRange | undefined
}

/**
 * Everything a run's sandbox holds before its Jobs: the namespace (enforcing `podSecurity`), a NetworkPolicy that denies all
 * ingress and all egress but the allowlist (one rule per entry: its CIDR, its ports or every port; an
 * empty allowlist denies DNS too), and the quota and limit range when the spec sets them.
 */
export const renderSandbox = (
  check: SandboxCheck,
  runID: string,
  spec: SandboxSpec,
  podSecurity: PodSecurityLevel = "baseline",
): SandboxObjects => {
  const name = sandboxNamespaceFor(check, runID)
  const labels = sandboxLabels(check, runID)
  const annotations = sandboxAnnotations(check)
  const meta = { name: sandboxObjectName, namespace: name, labels }
  return {
    namespace: {
      apiVersion: "v1",
      kind: "Namespace",
      metadata: { name, labels: { ...labels, [podSecurityEnforceLabel]: podSecurity }, annotations },
    },
    networkPolicy: {
      apiVersion: "networking.k8s.io/v1",
      kind: "NetworkPolicy",
      metadata: meta,
      spec: {
        podSelector: {},
        policyTypes: ["Ingress", "Egress"],
        ingress: [],
        egress: spec.egress.map((rule) => ({
          to: [{ ipBlock: { cidr: rule.cidr } }],
          ...(rule.ports && rule.ports.length > 0
            ? { ports: rule.ports.map((p) => ({ port: p.port, protocol: p.protocol })) }
            : {}),
        })),
      },
    },
    resourceQuota:
      spec.resourceQuota === undefined
        ? undefined
        : {
            apiVersion: "v1",
            kind: "ResourceQuota",
            metadata: meta,
            spec: { hard: { ...spec.resourceQuota.hard } },
          },
    limitRange:
      spec.limitRange === undefined
        ? undefined
        : {
            apiVersion: "v1",
            kind: "LimitRange",
            metadata: meta,
            spec: {
              limits: [
                {
                  type: "Container",
                  ...(spec.limitRange.default ? { _default: { ...spec.limitRange.default } } : {}),
                  ...(spec.limitRange.defaultRequest
                    ? { defaultRequest: { ...spec.limitRange.defaultRequest } }
                    : {}),
                  ...(spec.limitRange.max ? { max: { ...spec.limitRange.max } } : {}),
                },
              ],
            },
          },
  }
}

/** client-node names LimitRangeItem.default `_default`; the API server wants `default`. */
export const limitRangeBody = (lr: V1LimitRange): unknown => ({
  ...lr,
  spec: {
    limits: (lr.spec?.limits ?? []).map(({ _default, ...rest }) => ({
      ...rest,
      ...(_default !== undefined ? { default: _default } : {}),
    })),
  },
})

/** The cleanup states nothing more happens in (Failed is retried: the namespace still exists). */
export const cleanupDone = (s: SandboxStatus | undefined): boolean =>
  s === undefined || s.cleanup === "Deleted"

export type CleanupStep =
  | { readonly action: "none"; readonly status: SandboxStatus; readonly wakeAt?: number | undefined }
  | { readonly action: "delete"; readonly status: SandboxStatus }

/**
 * What to do about one recorded run's sandbox, from the run and the namespace as the cache shows it
 * (undefined: gone). A run in flight keeps it (Pending). A finished run keeps it until its end plus the
 * validation window (Pending, deleteAfter; wake then), and then deletes it (Deleting); a namespace the
 * API is removing is Deleting, one that is gone is Deleted. A refused delete stays Failed, with its
 * reason, until a retry succeeds.
 */
export const cleanupStep = (
  run: LastRun,
  sandbox: SandboxStatus,
  namespace: V1Namespace | undefined,
  windowMs: number,
  now: number,
): CleanupStep => {
  const base = { namespace: sandbox.namespace }
  if (run.result === "Running") {
    return namespace === undefined && sandbox.cleanup !== "Pending"
      ? { action: "none", status: { ...base, cleanup: "Deleted" } }
      : { action: "none", status: { ...base, cleanup: "Pending" } }
  }
  const end = Date.parse(run.completionTime ?? "")
  const deleteAt = (Number.isFinite(end) ? end : now) + Math.max(0, windowMs)
  const deleteAfter = toKubeTime(deleteAt)
  if (namespace === undefined) return { action: "none", status: { ...base, cleanup: "Deleted", deleteAfter } }
  if (namespace.metadata?.deletionTimestamp) {
    return { action: "none", status: { ...base, cleanup: "Deleting", deleteAfter } }
  }
  if (now < deleteAt) {
    return { action: "none", status: { ...base, cleanup: "Pending", deleteAfter }, wakeAt: deleteAt }
  }
  return { action: "delete", status: { ...base, cleanup: "Deleting", deleteAfter } }
}
