// In-memory members for fleet-view, HTTP and dashboard tests and the fleet-view benchmark: MemberEntry
// values exactly as the hub keeps them, with BackupChecks in their caches, and no cluster anywhere.
import type { BackupCheck } from "../../src/api/backupcheck.ts"
import type { ConditionStatus } from "../../src/api/condition.ts"
import type { FleetCheckView } from "../../src/api/fleet.ts"
import { type MemberEntry, newMemberEntry } from "../../src/hub/fleet-state.ts"

export const t0 = Date.parse("2026-11-29T03:00:00Z")
const iso = (ms: number) => new Date(ms).toISOString().replace(/\.\d{3}Z$/, "Z")

export interface CheckSpec {
  readonly namespace?: string
  readonly name: string
  readonly status?: ConditionStatus
  readonly reason?: string
  readonly message?: string
  readonly traceID?: string
  /** Objectives (restore within 10m: missed; data at most 26h old: met), as the hub judges them. */
  readonly objectives?: boolean
}

export const backupCheck = (c: CheckSpec, i = 0): BackupCheck => {
  const status = c.status ?? "True"
  const traceID = c.traceID ?? (i + 1).toString(16).padStart(32, "0")
  return {
    apiVersion: "fleetcheck.io/v1alpha1",
    kind: "BackupCheck",
    metadata: { namespace: c.namespace ?? "default", name: c.name, uid: `uid-${c.name}-${i}`, generation: 1 },
    spec: {
      backup: { name: `${c.name}-backup`, source: "s3://backups/db.dump" },
      jobTemplate: {
        spec: {
          template: {
            spec: { containers: [{ name: "restore", image: "restore:1" }], restartPolicy: "Never" },
          },
        },
      },
      schedule: "0 3 * * *",
      timeout: "1h",
      suspend: false,
      concurrencyPolicy: "Forbid",
      successfulRunsHistoryLimit: 3,
      failedRunsHistoryLimit: 1,
      ...(c.objectives ? { objectives: { maxRestoreDuration: "10m", maxDataAge: "26h" } } : {}),
    },
    status: {
      observedGeneration: 1,
      conditions:
        status === "Unknown" && c.reason === undefined
          ? []
          : [
              {
                type: "Verified",
                status,
                observedGeneration: 1,
                lastTransitionTime: iso(t0),
                reason:
                  c.reason ??
                  (status === "True"
                    ? "RestoreSucceeded"
                    : status === "False"
                      ? "RestoreFailed"
                      : "RestoreRunning"),
                message:
                  c.message ?? (status === "True" ? "restored and verified" : "restore failed: exit code 1"),
              },
              ...(c.objectives
                ? [
                    {
                      type: "RestoreTimeObjectiveMet",
                      status: "False" as const,
                      observedGeneration: 1,
                      lastTransitionTime: iso(t0),
                      reason: "ObjectiveMissed",
                      message: "restore took 12m5s, over the objective 10m",
                    },
                    {
                      type: "DataAgeObjectiveMet",
                      status: "True" as const,
                      observedGeneration: 1,
                      lastTransitionTime: iso(t0),
                      reason: "ObjectiveMet",
                      message: "data was 1h0m0s old, within the objective 26h",
                    },
                  ]
                : []),
            ],
      lastRun: {
        jobName: `${c.name.slice(0, 40)}-s20261129`,
        runID: "s202611290300",
        startTime: iso(t0),
        completionTime: iso(t0 + 60_000),
        result: status === "True" ? "Succeeded" : "Failed",
        traceID,
      },
      ...(status === "True" ? { lastSuccessfulTime: iso(t0 + 60_000) } : {}),
      nextRunTime: iso(t0 + 86_400_000),
    },
  } as BackupCheck
}

/** A member whose engine runs with synced caches and whose probes succeed: its checks count as they are. */
export const healthyMember = (
  name: string,
  checks: ReadonlyArray<CheckSpec>,
  labels: Record<string, string> = {},
): MemberEntry => {
  const objects = checks.map(backupCheck)
  const m = newMemberEntry(name, labels)
  m.engineRunning = true
  m.synced = true
  m.probe = {
    connected: true,
    credentialsValid: true,
    consecutiveFailures: 0,
    consecutiveSuccesses: 1,
    kubernetesVersion: "v1.37.2",
    lastProbeTime: t0,
  }
  m.checks = () => objects
  return m
}

/** A member the hub cannot reach: every check it caches shows Unknown/ClusterUnreachable. */
export const unreachableMember = (
  name: string,
  checks: ReadonlyArray<CheckSpec>,
  labels: Record<string, string> = {},
) => {
  const m = healthyMember(name, checks, labels)
  m.probe = {
    ...m.probe,
    connected: false,
    consecutiveFailures: 3,
    consecutiveSuccesses: 0,
    lastError: "dial tcp 10.0.0.1:443: connect: connection refused",
  }
  return m
}

export const membersMap = (members: ReadonlyArray<MemberEntry>) => new Map(members.map((m) => [m.name, m]))

/**
 * A fleet of `clusters` members × `checksPer` checks: about 2% failing and 1% unknown, spread over
 * five namespaces, with labels env (prod/staging) and region (eu/us).
 */
export const syntheticFleet = (clusters: number, checksPer: number): MemberEntry[] =>
  Array.from({ length: clusters }, (_, ci) => {
    const name = `cluster-${String(ci).padStart(4, "0")}`
    const checks = Array.from({ length: checksPer }, (_, k): CheckSpec => {
      const n = ci * checksPer + k
      return {
        namespace: `team-${k % 5}`,
        name: `db-${String(k).padStart(3, "0")}-nightly`,
        status: n % 50 === 7 ? "False" : n % 100 === 13 ? "Unknown" : "True",
        ...(n % 100 === 13 ? { reason: "RestoreRunning", message: "restore Job running" } : {}),
      }
    })
    return healthyMember(name, checks, {
      env: ci % 4 === 0 ? "staging" : "prod",
      region: ci % 2 ? "eu" : "us",
    })
  })

/** A FleetBackupCheck as the placement controller publishes it, for the views' tests. */
export const fleetCheckView = (
  name: string,
  verified: ConditionStatus,
  clusters: ReadonlyArray<{
    readonly name: string
    readonly status: ConditionStatus
    readonly reason?: string
    readonly placement?: string
  }>,
): FleetCheckView => ({
  namespace: "fleetcheck-system",
  name,
  selector: "env=prod",
  check: { namespace: "shop", name },
  generation: 1,
  placed: { status: "True", reason: "Placed", message: `placed in all ${clusters.length} selected clusters` },
  verified: {
    status: verified,
    reason:
      verified === "True" ? "AllVerified" : verified === "False" ? "ChecksFailing" : "ClusterUnreachable",
    message: `${name} message`,
  },
  counts: {
    selected: clusters.length,
    placed: clusters.filter((c) => (c.placement ?? "Placed") === "Placed").length,
    verified: clusters.filter((c) => c.status === "True").length,
    failed: clusters.filter((c) => c.status === "False").length,
    unknown: clusters.filter((c) => c.status === "Unknown").length,
  },
  clusters: clusters.map((c) => ({
    name: c.name,
    placement: c.placement ?? "Placed",
    status: c.status,
    reason: c.reason ?? (c.status === "True" ? "RestoreSucceeded" : "RestoreFailed"),
  })),
})

export const fleetChecksMap = (views: ReadonlyArray<FleetCheckView>): Map<string, FleetCheckView> =>
  new Map(views.map((v) => [`${v.namespace}/${v.name}`, v]))
