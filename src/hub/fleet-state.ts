// The hub's in-memory picture of the fleet: one entry per registration Secret, fed by the member
// fibers (probe results, engine caches) and by the registration controller (refused Secrets). Every
// fleet view (MemberCluster status, /api/v1/fleet, the dashboard, `fleetcheck status`) is computed from
// it by the pure functions below, so they can never disagree. An unreachable member's checks are
// reported Unknown/ClusterUnreachable, never as their last known (possibly stale) verdict.
import type { BackupCheck } from "../api/backupcheck.ts"
import { type Condition, findCondition, setStatusCondition, toKubeTime } from "../api/condition.ts"
import {
  type CheckView,
  type ClusterView,
  checkRank,
  type FleetView,
  isClusterHealthy,
  isVerified,
} from "../api/fleet.ts"
import type { CheckCounts, MemberClusterStatus } from "../api/membercluster.ts"

export type { CheckView, ClusterView, FleetView }

export interface ProbeState {
  /** Undefined until the first probe finished. */
  connected?: boolean
  credentialsValid?: boolean
  /** The API answered, but the hub may not list BackupChecks (403) or they are not served (404). */
  denied?: { readonly reason: AccessFailureReason; readonly message: string }
  consecutiveFailures: number
  consecutiveSuccesses: number
  lastError?: string
  kubernetesVersion?: string
  lastProbeTime?: number
}

/** Why a reachable member still cannot be seen (SPEC §11): RBAC refuses, or LIST/WATCH keeps failing. */
export type AccessFailureReason = "Forbidden" | "WatchFailing"

export interface MemberEntry {
  readonly name: string
  labels: Record<string, string>
  /** Why the Secret was refused (no engine runs then). */
  refused?: { reason: string; message: string }
  engineRunning: boolean
  synced: boolean
  syncError?: string
  credentialExpiry?: Date
  expiringSoon: boolean
  probe: ProbeState
  /** The caches' LIST/WATCH has failed for longer than the probe's own tolerance. */
  watchFailure?: { readonly reason: AccessFailureReason; readonly message: string }
  /** Reachable again after an outage, and the caches have not resumed yet: what they hold may be stale. */
  catchingUp: boolean
  /** Reads the member's BackupCheck cache. */
  checks: () => ReadonlyArray<BackupCheck>
  /** The MemberCluster status last written (keeps lastTransitionTimes stable across views). */
  lastStatus?: MemberClusterStatus
}

export const newMemberEntry = (name: string, labels: Record<string, string>): MemberEntry => ({
  name,
  labels,
  engineRunning: false,
  synced: false,
  expiringSoon: false,
  probe: { consecutiveFailures: 0, consecutiveSuccesses: 0 },
  catchingUp: false,
  checks: () => [],
})

/** Why the hub cannot vouch for what it caches of a member, or undefined when it can. */
export const unseenBecause = (m: MemberEntry): { reason: string; message: string } | undefined => {
  if (!m.engineRunning) return { reason: "ClusterUnreachable", message: "no engine runs for this member" }
  if (m.probe.connected !== true)
    return {
      reason: "ClusterUnreachable",
      message: `cluster ${m.name} is unreachable${m.probe.lastError ? `: ${m.probe.lastError}` : ""}`,
    }
  const denied = m.probe.denied ?? m.watchFailure
  if (denied) return denied
  if (m.catchingUp)
    return { reason: "CatchingUp", message: `cluster ${m.name} answers again; its caches are catching up` }
  return undefined
}

/**
 * A member counts as reachable only when an engine runs, its last probes succeeded, the hub may list
 * and watch its BackupChecks, and its caches are current.
 */
export const isReachable = (m: MemberEntry): boolean => unseenBecause(m) === undefined

/**
 * Each cached check as every view shows it. Two rules keep stale green out of every view: an
 * unreachable member's checks are Unknown/ClusterUnreachable, and a verdict recorded for an older
 * generation of the spec is not the verdict for the current one (Unknown/GenerationNotVerified).
 */
export const checkViews = (m: MemberEntry): CheckView[] => {
  const unseen = unseenBecause(m)
  return m.checks().map((c) => {
    const verified = findCondition(c.status?.conditions, "Verified")
    const base = {
      cluster: m.name,
      namespace: c.metadata.namespace ?? "",
      name: c.metadata.name,
      ...(c.status?.lastSuccessfulTime ? { lastSuccessfulTime: c.status.lastSuccessfulTime } : {}),
      ...(c.status?.nextRunTime ? { nextRunTime: c.status.nextRunTime } : {}),
      ...(c.status?.lastRun?.traceID ? { traceID: c.status.lastRun.traceID } : {}),
      ...(c.status?.lastRun?.runID ? { runID: c.status.lastRun.runID } : {}),
    }
    if (unseen) {
      return {
        ...base,
        status: "Unknown" as const,
        reason: unseen.reason,
        message: `${unseen.message}; last known: ${verified?.status ?? "Unknown"}${verified?.reason ? `/${verified.reason}` : ""}`,
      }
    }
    const generation = c.metadata.generation
    const verdictGeneration = verified?.observedGeneration ?? c.status?.observedGeneration
    if (
      verified &&
      generation !== undefined &&
      verdictGeneration !== undefined &&
      verdictGeneration < generation
    ) {
      return {
        ...base,
        status: "Unknown" as const,
        reason: "GenerationNotVerified",
        message: `generation ${generation} of the spec is not verified yet; last verdict (generation ${verdictGeneration}): ${verified.status}/${verified.reason}`,
      }
    }
    return {
      ...base,
      status: verified?.status ?? "Unknown",
      reason: verified?.reason ?? "NotYetReconciled",
      message: verified?.message ?? "",
      ...(verified?.lastTransitionTime ? { lastTransitionTime: verified.lastTransitionTime } : {}),
    }
  })
}

export const countChecks = (checks: ReadonlyArray<CheckView>): CheckCounts => {
  const counts = { total: checks.length, verified: 0, failed: 0, unknown: 0 }
  for (const c of checks) {
    if (isVerified(c)) counts.verified++
    else if (c.status === "False") counts.failed++
    else counts.unknown++
  }
  return counts
}

type NewCondition = Omit<Condition, "lastTransitionTime">

/** The member's conditions, in a fixed order. */
export const memberConditions = (m: MemberEntry, checks: ReadonlyArray<CheckView>): NewCondition[] => {
  const counts = countChecks(checks)
  const cond = (
    type: string,
    status: Condition["status"],
    reason: string,
    message: string,
  ): NewCondition => ({
    type,
    status,
    reason,
    message,
    observedGeneration: 0,
  })
  if (m.refused) {
    return [
      cond("Ready", "False", m.refused.reason, m.refused.message),
      cond(
        "Connected",
        "Unknown",
        "RegistrationRefused",
        "the registration Secret was refused; nothing is probed",
      ),
      cond("CredentialsValid", "False", m.refused.reason, m.refused.message),
      cond("BackupsVerified", "Unknown", "RegistrationRefused", "no engine runs for this member"),
    ]
  }
  const p = m.probe
  const connected =
    p.connected === undefined
      ? cond("Connected", "Unknown", "Probing", "waiting for the first probe")
      : p.connected
        ? cond(
            "Connected",
            "True",
            "ProbeSucceeded",
            `API server reachable (${p.kubernetesVersion ?? "unknown version"})`,
          )
        : cond("Connected", "False", "ProbeFailed", p.lastError ?? "API server unreachable")
  const credentials =
    p.credentialsValid === false
      ? cond(
          "CredentialsValid",
          "False",
          "Unauthorized",
          p.lastError ?? "the API server refused the credentials",
        )
      : m.expiringSoon
        ? cond(
            "CredentialsValid",
            "True",
            "CredentialsExpiringSoon",
            `credentials expire at ${m.credentialExpiry ? toKubeTime(m.credentialExpiry) : "soon"}; rotate the registration Secret`,
          )
        : p.credentialsValid === true
          ? cond("CredentialsValid", "True", "Authenticated", "the API server accepts the credentials")
          : cond("CredentialsValid", "Unknown", "Probing", "waiting for the first probe")
  const denied = m.probe.denied ?? m.watchFailure
  const ready = !m.engineRunning
    ? cond("Ready", "False", "EngineStopped", "no engine runs for this member")
    : denied
      ? cond("Ready", "False", denied.reason, denied.message)
      : !m.synced
        ? cond(
            "Ready",
            "False",
            m.syncError ? "CacheSyncTimeout" : "Syncing",
            m.syncError ?? "waiting for caches to sync",
          )
        : m.catchingUp
          ? cond("Ready", "False", "CatchingUp", "reachable again; waiting for the caches to resume")
          : cond("Ready", "True", "CachesSynced", "engine running with synced caches")
  const unseen = unseenBecause(m)
  const verified = unseen
    ? cond("BackupsVerified", "Unknown", unseen.reason, `${counts.total} checks; ${unseen.message}`)
    : !m.synced
      ? cond("BackupsVerified", "Unknown", "CachesNotSynced", "the member's checks are not all listed yet")
      : counts.failed > 0
        ? cond(
            "BackupsVerified",
            "False",
            "ChecksFailing",
            `${counts.failed} of ${counts.total} checks failing`,
          )
        : counts.unknown > 0
          ? cond(
              "BackupsVerified",
              "Unknown",
              "ChecksPending",
              `${counts.unknown} of ${counts.total} checks not yet verified`,
            )
          : cond(
              "BackupsVerified",
              "True",
              "AllVerified",
              `${counts.verified} of ${counts.total} checks verified`,
            )
  return [ready, connected, credentials, verified]
}

/** The MemberCluster status to write, keeping lastTransitionTime of conditions whose status is unchanged. */
export const memberClusterStatus = (
  m: MemberEntry,
  current: MemberClusterStatus | undefined,
  now: number,
): MemberClusterStatus => {
  const checks = checkViews(m)
  let conditions = [...(current?.conditions ?? [])]
  for (const c of memberConditions(m, checks)) {
    conditions = setStatusCondition(conditions, { ...c, lastTransitionTime: toKubeTime(now) }, now).conditions
  }
  return {
    conditions,
    counts: countChecks(checks),
    ...(m.probe.kubernetesVersion ? { kubernetesVersion: m.probe.kubernetesVersion } : {}),
    ...(m.probe.lastProbeTime ? { lastProbeTime: toKubeTime(m.probe.lastProbeTime) } : {}),
  }
}

export interface FleetFilter {
  readonly cluster?: string
  /** Only checks that are not Verified=True (failing or unknown), and clusters that have such checks. */
  readonly failing?: boolean
}

export const fleetView = (
  members: Iterable<MemberEntry>,
  now: number,
  filter: FleetFilter = {},
): FleetView => {
  const clusters: ClusterView[] = []
  const checks: CheckView[] = []
  for (const m of [...members].sort((a, b) => a.name.localeCompare(b.name))) {
    if (filter.cluster && m.name !== filter.cluster) continue
    const views = checkViews(m)
    const conditions = memberClusterStatus(m, m.lastStatus, now).conditions ?? []
    const selected = filter.failing ? views.filter((c) => !isVerified(c)) : views
    if (filter.failing && selected.length === 0 && isClusterHealthy({ conditions })) continue
    clusters.push({
      name: m.name,
      labels: m.labels,
      conditions,
      counts: countChecks(views),
      ...(m.probe.kubernetesVersion ? { kubernetesVersion: m.probe.kubernetesVersion } : {}),
      ...(m.probe.lastProbeTime ? { lastProbeTime: toKubeTime(m.probe.lastProbeTime) } : {}),
    })
    checks.push(...selected)
  }
  // Failing first, then unknown, then verified; stable by cluster/namespace/name within each group.
  checks.sort(
    (a, b) =>
      checkRank(a) - checkRank(b) ||
      a.cluster.localeCompare(b.cluster) ||
      a.namespace.localeCompare(b.namespace) ||
      a.name.localeCompare(b.name),
  )
  return { generatedAt: toKubeTime(now), clusters, checks }
}
