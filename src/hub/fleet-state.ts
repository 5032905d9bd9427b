// The hub's in-memory picture of the fleet: one entry per registration Secret, fed by the member
// fibers (probe results, engine caches) and by the registration controller (refused Secrets). Every
// fleet view (MemberCluster status, /api/v1/fleet, the dashboard, `fleetcheck status`) is computed from
// it by the pure functions below, so they can never disagree. An unreachable member's checks are
// reported Unknown/ClusterUnreachable, never as their last known (possibly stale) verdict.
import { createHash } from "node:crypto"
import type { Effect } from "effect"
import { type BackupCheck, conditionTypes } from "../api/backupcheck.ts"
import {
  type Condition,
  type ConditionStatus,
  findCondition,
  setStatusCondition,
  toKubeTime,
} from "../api/condition.ts"
import {
  type CheckView,
  type ClusterView,
  checkRank,
  type FleetCheckView,
  type FleetSummary,
  type FleetView,
  isClusterHealthy,
  isFleetCheckVerified,
  isVerified,
  missesObjective,
} from "../api/fleet.ts"
import { keyOfPlacementLabel } from "../api/fleetbackupcheck.ts"
import type { CheckCounts, MemberClusterStatus, RegistrationSource } from "../api/membercluster.ts"
import { annotationDrillSource, annotationTemplateHash, labelFleetBackupCheck } from "../api/names.ts"
import { buildReport, type Report, type ReportInput } from "../api/report.ts"
import type { InformerSet } from "../engine/informer/informer-set.ts"
import type { KubeClient } from "../kube/client.ts"
import { kubeconfigRefusalReasons } from "../kubeconfig/policy.ts"
import { lastFinishedRun, measureRun } from "../reconcile/objectives.ts"

export type { CheckView, ClusterView, FleetView }

export interface ProbeState {
  /** Undefined until the first probe finished. */
  connected?: boolean
  credentialsValid?: boolean
  /** Why credentialsValid is false: the member refused them (401), or the exec plugin produced none. */
  credentialsFailure?: "Unauthorized" | "ExecPluginFailed"
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
  /** The object that registers the member, shown on its MemberCluster. */
  source?: RegistrationSource | undefined
  /** The registering ClusterProfile's properties (sorted, bounded); none for a Secret. */
  properties?: ReadonlyArray<{ readonly name: string; readonly value: string }> | undefined
  /** Why the Secret was refused (no engine runs then). */
  refused?: { reason: string; message: string }
  /** What the cluster says it is: its kube-system namespace UID, once read (SPEC §12). */
  clusterID?: string | undefined
  /** The earlier registration of the same cluster ID this one duplicates: its engine does no work. */
  duplicateOf?: { readonly name: string; readonly clusterID: string } | undefined
  engineRunning: boolean
  synced: boolean
  syncError?: string
  credentialExpiry?: Date | undefined
  /** Why the exec plugin could not renew the credential (fixed words), while it cannot. */
  renewalFailure?: string | undefined
  expiringSoon: boolean
  probe: ProbeState
  /** The caches' LIST/WATCH has failed for longer than the probe's own tolerance. */
  watchFailure?: { readonly reason: AccessFailureReason; readonly message: string }
  /** Reachable again after an outage, and the caches have not resumed yet: what they hold may be stale. */
  catchingUp: boolean
  /** Reads the member's BackupCheck cache. */
  checks: () => ReadonlyArray<BackupCheck>
  /**
   * While the member's engine runs: its check views as the status round keeps them (rebuilt only when a
   * check or the member's reachability changed), so a MemberCluster sync from elsewhere (the
   * registration's reconcile of the Secret, at every resync) builds none. Never mutate what it returns.
   */
  views?: (() => ReadonlyArray<CheckView>) | undefined
  /**
   * Sharding (ADR 0011): why no live hub replica works this member now, or undefined when one does.
   * Unset without sharding (the hub that shows the member is the one working it).
   */
  ownerless?: () => { readonly reason: string; readonly message: string } | undefined
  /** While an engine runs: its fenced client and check cache, for hub controllers acting in the member. */
  access?: MemberAccess
  /** The MemberCluster status last written (keeps lastTransitionTimes stable across views). */
  lastStatus?: MemberClusterStatus
  /**
   * The MemberCluster as the hub last read or wrote it, and when: while it is recent, a status that did
   * not change costs no request at all (see member.ts syncMemberCluster).
   */
  lastSeen?: {
    readonly resourceVersion: string | undefined
    readonly labels: Record<string, string>
    readonly status: MemberClusterStatus | undefined
    readonly at: number
  }
}

/** What a hub controller other than the member's own engine (placement) may use of a running engine. */
export interface MemberAccess {
  /** The engine's client: writes fenced by the leader's lease, I/O under the global limit. */
  readonly client: KubeClient
  /** The engine's connection with writes fenced by another Lease (the placement holder's, sharded). */
  readonly clientFencedBy: (mayWrite: Effect.Effect<boolean>) => KubeClient
  /** The engine's BackupCheck cache; handlers only enqueue keys. */
  readonly checks: Pick<InformerSet<BackupCheck>, "store" | "addHandler">
  /** The member's scope (fleetcheck.io/namespaces); undefined means cluster-wide. */
  readonly namespaces: ReadonlyArray<string> | undefined
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
  // A member nobody works is not vouched for, however fresh this replica's read-only cache of it is.
  const ownerless = m.ownerless?.()
  if (ownerless) return ownerless
  if (!m.engineRunning) return { reason: "ClusterUnreachable", message: "no engine runs for this member" }
  if (m.duplicateOf)
    return {
      reason: "DuplicateMember",
      message: `this cluster is worked through registration ${m.duplicateOf.name}`,
    }
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
  return m.checks().map((c) => checkView(m, c, unseen))
}

/** The FleetBackupCheck that placed a check (its label and the hub's template-hash annotation). */
const placedByOf = (c: BackupCheck): { fleetBackupCheck?: string; drillSource?: string } => {
  if (c.metadata.annotations?.[annotationTemplateHash] === undefined) return {}
  const key = keyOfPlacementLabel(c.metadata.labels?.[labelFleetBackupCheck])
  const source = c.metadata.annotations?.[annotationDrillSource]
  return key ? { fleetBackupCheck: key, ...(source ? { drillSource: source } : {}) } : {}
}

/** One cached check as every view shows it (see checkViews); `unseen` is unseenBecause(m). */
export const checkView = (
  m: MemberEntry,
  c: BackupCheck,
  unseen: { reason: string; message: string } | undefined = unseenBecause(m),
): CheckView => {
  const verified = findCondition(c.status?.conditions, "Verified")
  const base = {
    cluster: m.name,
    namespace: c.metadata.namespace ?? "",
    name: c.metadata.name,
    ...(c.status?.lastSuccessfulTime ? { lastSuccessfulTime: c.status.lastSuccessfulTime } : {}),
    ...(c.status?.nextRunTime ? { nextRunTime: c.status.nextRunTime } : {}),
    ...(c.status?.lastRun?.traceID ? { traceID: c.status.lastRun.traceID } : {}),
    ...(c.status?.lastRun?.runID ? { runID: c.status.lastRun.runID } : {}),
    ...placedByOf(c),
  }
  if (unseen) {
    return {
      ...base,
      ...objectivesView(c, false),
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
      ...objectivesView(c, false),
      status: "Unknown" as const,
      reason: "GenerationNotVerified",
      message: `generation ${generation} of the spec is not verified yet; last verdict (generation ${verdictGeneration}): ${verified.status}/${verified.reason}`,
    }
  }
  return {
    ...base,
    ...objectivesView(c, true),
    status: verified?.status ?? "Unknown",
    reason: verified?.reason ?? "NotYetReconciled",
    message: verified?.message ?? "",
    ...(verified?.lastTransitionTime ? { lastTransitionTime: verified.lastTransitionTime } : {}),
  }
}

/**
 * A check's objectives as the fleet views show them (none without spec.objectives). `trusted` is false
 * while the cluster is unreachable or the spec not verified: the conditions then count as Unknown, as
 * Verified does, so no view shows a stale objective met. The measured values stay, as facts of the run.
 */
const objectivesView = (c: BackupCheck, trusted: boolean): Pick<CheckView, "objectives"> => {
  const objectives = c.spec?.objectives
  if (
    objectives === undefined ||
    (objectives.maxRestoreDuration === undefined && objectives.maxDataAge === undefined)
  )
    return {}
  const statusOf = (type: string) => {
    const condition = findCondition(c.status?.conditions, type)
    return trusted ? (condition?.status ?? "Unknown") : "Unknown"
  }
  const run = c.status === undefined ? undefined : lastFinishedRun(c.status)
  const measured = run === undefined ? undefined : measureRun(run)
  return {
    objectives: {
      ...(objectives.maxRestoreDuration !== undefined
        ? { restoreTime: statusOf(conditionTypes.RestoreTimeObjectiveMet) }
        : {}),
      ...(objectives.maxDataAge !== undefined
        ? { dataAge: statusOf(conditionTypes.DataAgeObjectiveMet) }
        : {}),
      ...(measured?.restoreDurationMs !== undefined
        ? { restoreDurationSeconds: Math.round(measured.restoreDurationMs / 1000) }
        : {}),
      ...(measured?.dataAgeMs !== undefined ? { dataAgeSeconds: Math.round(measured.dataAgeMs / 1000) } : {}),
    },
  }
}

/**
 * Counts by Verified status; objectivesMissed appears once any of the checks has objectives. Kept per
 * array: a member's status round counts the same views (rebuilt only when a check changed, never
 * mutated: checkViews builds a fresh array) twice a round, every status interval.
 */
const countedViews = new WeakMap<ReadonlyArray<CheckView>, CheckCounts>()
export const countChecks = (checks: ReadonlyArray<CheckView>): CheckCounts => {
  let counted = countedViews.get(checks)
  if (counted === undefined) {
    counted = countOnce(checks)
    countedViews.set(checks, counted)
  }
  return counted
}
const countOnce = (checks: ReadonlyArray<CheckView>): CheckCounts => {
  const counts = { total: checks.length, verified: 0, failed: 0, unknown: 0 }
  let withObjectives = 0
  let objectivesMissed = 0
  for (const c of checks) {
    if (c.objectives !== undefined) withObjectives++
    if (missesObjective(c)) objectivesMissed++
    if (isVerified(c)) counts.verified++
    else if (c.status === "False") counts.failed++
    else counts.unknown++
  }
  return withObjectives > 0 ? { ...counts, objectivesMissed } : counts
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
      // Only a refused kubeconfig says something about the credentials (not, e.g., DuplicateMember).
      m.refused.reason in kubeconfigRefusalReasons
        ? cond("CredentialsValid", "False", m.refused.reason, m.refused.message)
        : cond("CredentialsValid", "Unknown", "RegistrationRefused", "no engine runs for this member"),
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
          p.credentialsFailure ?? "Unauthorized",
          p.lastError ?? "the API server refused the credentials",
        )
      : m.expiringSoon
        ? cond(
            "CredentialsValid",
            "True",
            "CredentialsExpiringSoon",
            m.renewalFailure !== undefined
              ? `credentials expire at ${m.credentialExpiry ? toKubeTime(m.credentialExpiry) : "soon"} and the exec plugin cannot renew them: ${m.renewalFailure}`
              : `credentials expire at ${m.credentialExpiry ? toKubeTime(m.credentialExpiry) : "soon"}; rotate the registration Secret`,
          )
        : p.credentialsValid === true
          ? cond("CredentialsValid", "True", "Authenticated", "the API server accepts the credentials")
          : cond("CredentialsValid", "Unknown", "Probing", "waiting for the first probe")
  const denied = m.probe.denied ?? m.watchFailure
  const ownerless = m.ownerless?.()
  const ready = ownerless
    ? cond("Ready", "False", ownerless.reason, ownerless.message)
    : m.duplicateOf
      ? cond(
          "Ready",
          "False",
          "DuplicateMember",
          `${m.duplicateOf.name} registered the same cluster (kube-system UID ${m.duplicateOf.clusterID}) earlier; this registration does no work until ${m.duplicateOf.name} is removed`,
        )
      : !m.engineRunning
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
  views?: ReadonlyArray<CheckView>,
): MemberClusterStatus => {
  const checks = views ?? m.views?.() ?? checkViews(m)
  let conditions = [...(current?.conditions ?? [])]
  for (const c of memberConditions(m, checks)) {
    conditions = setStatusCondition(conditions, { ...c, lastTransitionTime: toKubeTime(now) }, now).conditions
  }
  return {
    ...(m.source ? { source: m.source } : {}),
    ...(m.properties && m.properties.length > 0 ? { properties: [...m.properties] } : {}),
    conditions,
    counts: countChecks(checks),
    ...(m.clusterID ? { clusterID: m.clusterID } : {}),
    ...(m.probe.kubernetesVersion ? { kubernetesVersion: m.probe.kubernetesVersion } : {}),
    ...(m.probe.lastProbeTime ? { lastProbeTime: toKubeTime(m.probe.lastProbeTime) } : {}),
  }
}

// ---------------------------------------------------------------------------------------------------
// Fleet views: filters, order, summary, pages

/** One requirement of a Kubernetes label selector (labels.Parse's grammar, without gt/lt). */
export type LabelRequirement =
  | { readonly key: string; readonly op: "exists" | "notexists" }
  | { readonly key: string; readonly op: "in" | "notin"; readonly values: ReadonlyArray<string> }

/** Requirements that must all hold (comma means AND, as in kubectl -l). */
export type LabelSelector = ReadonlyArray<LabelRequirement>

const labelName = "([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"
const labelKeyPattern = new RegExp(
  `^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?${labelName}$`,
)
const labelValuePattern = new RegExp(`^(${labelName})?$`)

/**
 * Parses a label selector as kubectl writes it: `env=prod,tier!=db,region in (eu,us),!legacy,team`.
 * `!=` and `notin` also match clusters without the key, as in Kubernetes.
 */
export const parseLabelSelector = (
  text: string,
):
  | { readonly ok: true; readonly selector: LabelSelector }
  | { readonly ok: false; readonly error: string } => {
  const requirements: LabelRequirement[] = []
  let rest = text.trim()
  const bad = (why: string) => ({
    ok: false as const,
    error: `label selector ${JSON.stringify(text)}: ${why}`,
  })
  const checkKey = (key: string) =>
    labelKeyPattern.test(key) && (key.split("/")[0]?.length ?? 0) <= 253
      ? undefined
      : `invalid key ${JSON.stringify(key)}`
  const checkValue = (v: string) =>
    labelValuePattern.test(v) ? undefined : `invalid value ${JSON.stringify(v)}`
  // Each requirement form, tried in order; a handler returns an error or undefined.
  const forms: ReadonlyArray<readonly [RegExp, (m: RegExpExecArray) => string | undefined]> = [
    [
      /^!\s*([^\s,=!()]+)\s*(?:,|$)/,
      (m) => checkKey(m[1]!) ?? void requirements.push({ key: m[1]!, op: "notexists" }),
    ],
    [
      /^([^\s,=!()]+)\s+(in|notin)\s*\(([^()]*)\)\s*(?:,|$)/,
      (m) => {
        const values = m[3]!.split(",").map((v) => v.trim())
        if (values.length === 1 && values[0] === "") return `${m[2]} needs at least one value`
        return (
          checkKey(m[1]!) ??
          values.map(checkValue).find((x) => x !== undefined) ??
          void requirements.push({ key: m[1]!, op: m[2] as "in" | "notin", values })
        )
      },
    ],
    [
      /^([^\s,=!()]+)\s*(==|=|!=)\s*([^\s,=!()]*)\s*(?:,|$)/,
      (m) =>
        checkKey(m[1]!) ??
        checkValue(m[3]!) ??
        void requirements.push({ key: m[1]!, op: m[2] === "!=" ? "notin" : "in", values: [m[3]!] }),
    ],
    [
      /^([^\s,=!()]+)\s*(?:,|$)/,
      (m) => checkKey(m[1]!) ?? void requirements.push({ key: m[1]!, op: "exists" }),
    ],
  ]
  while (rest !== "") {
    const form = forms.map(([re, f]) => [re.exec(rest), f] as const).find(([m]) => m !== null)
    if (!form) return bad(`cannot read ${JSON.stringify(rest.slice(0, 40))}`)
    const m = form[0]!
    const error = form[1](m)
    if (error) return bad(error)
    rest = rest.slice(m[0].length).trim()
    if (m[0].trimEnd().endsWith(",") && rest === "") return bad("ends with a comma")
  }
  return { ok: true, selector: requirements }
}

export const matchesLabels = (selector: LabelSelector, labels: Readonly<Record<string, string>>): boolean =>
  selector.every((r) => {
    const has = Object.hasOwn(labels, r.key)
    if (!("values" in r)) return r.op === "exists" ? has : !has
    const listed = has && r.values.includes(labels[r.key]!)
    return r.op === "in" ? listed : !listed
  })

export interface FleetFilter {
  /** One member by name. */
  readonly cluster?: string
  /** Checks in this namespace (of every selected cluster). */
  readonly namespace?: string
  /** Checks whose Verified status (as every view shows it) is this. */
  readonly status?: ConditionStatus
  /** Only checks that are not Verified=True (failing or unknown), and clusters that have such checks. */
  readonly failing?: boolean
  /** Clusters whose labels (copied from the registration Secret) match, and their checks. */
  readonly label?: LabelSelector
}

/**
 * The FleetBackupChecks a view shows: failing first, then unknown, then verified, each by
 * namespace/name; with `failing`, only those not FleetVerified=True; with `cluster`, only those that
 * select it.
 */
export const fleetCheckList = (
  fleetChecks: Iterable<FleetCheckView>,
  filter: Pick<FleetFilter, "failing" | "cluster"> = {},
): FleetCheckView[] =>
  [...fleetChecks]
    .filter((f) => !filter.failing || !isFleetCheckVerified(f))
    .filter((f) => filter.cluster === undefined || f.clusters.some((c) => c.name === filter.cluster))
    .sort(
      (a, b) =>
        checkRank(a.verified) - checkRank(b.verified) ||
        compareText(a.namespace, b.namespace) ||
        compareText(a.name, b.name),
    )

/** Whether the filter selects checks (then clusters without a selected check drop out). */
const filtersChecks = (f: FleetFilter) =>
  f.namespace !== undefined || f.status !== undefined || f.failing === true

/** Code-unit order: the same everywhere (sort, seek, tokens), and fast on 100,000 names. */
const compareText = (a: string, b: string): number => (a < b ? -1 : a > b ? 1 : 0)

/** The order every view lists checks in: failing, unknown, verified; then cluster, namespace, name. */
export type CheckKey = readonly [rank: number, cluster: string, namespace: string, name: string]

export const checkKey = (c: CheckView): CheckKey => [checkRank(c), c.cluster, c.namespace, c.name]

export const compareCheckKeys = (a: CheckKey, b: CheckKey): number =>
  a[0] - b[0] || compareText(a[1], b[1]) || compareText(a[2], b[2]) || compareText(a[3], b[3])

const compareInCluster = (a: CheckView, b: CheckView): number =>
  compareText(a.namespace, b.namespace) || compareText(a.name, b.name)

/**
 * The whole fleet as every view shows it, with the filter applied: clusters by name, checks failing
 * first, and the totals of what was selected.
 */
export const fleetView = (
  members: Iterable<MemberEntry>,
  now: number,
  filter: FleetFilter = {},
): FleetView => {
  const clusters: ClusterView[] = []
  // One list per rank (failing, unknown, verified), each filled cluster by cluster in name order with
  // the cluster's checks sorted by namespace/name: the concatenation is the view's order, without a
  // sort of the whole fleet (100,000 checks) per request.
  const byRank: [CheckView[], CheckView[], CheckView[]] = [[], [], []]
  const byCheck = filtersChecks(filter)
  for (const m of [...members].sort((a, b) => compareText(a.name, b.name))) {
    if (filter.cluster !== undefined && m.name !== filter.cluster) continue
    if (filter.label && !matchesLabels(filter.label, m.labels)) continue
    const views = checkViews(m)
    // memberClusterStatus's conditions, from the views already built (it would build them again).
    let conditions = [...(m.lastStatus?.conditions ?? [])]
    for (const c of memberConditions(m, views))
      conditions = setStatusCondition(
        conditions,
        { ...c, lastTransitionTime: toKubeTime(now) },
        now,
      ).conditions
    const selected = byCheck
      ? views.filter(
          (c) =>
            (filter.namespace === undefined || c.namespace === filter.namespace) &&
            (filter.status === undefined || c.status === filter.status) &&
            (!filter.failing || !isVerified(c)),
        )
      : views
    if (byCheck && selected.length === 0 && !(filter.failing && !isClusterHealthy({ conditions }))) continue
    clusters.push({
      name: m.name,
      labels: m.labels,
      conditions,
      counts: countChecks(views),
      ...(m.clusterID ? { clusterID: m.clusterID } : {}),
      ...(m.probe.kubernetesVersion ? { kubernetesVersion: m.probe.kubernetesVersion } : {}),
      ...(m.probe.lastProbeTime ? { lastProbeTime: toKubeTime(m.probe.lastProbeTime) } : {}),
      ...(m.source ? { source: m.source } : {}),
    })
    // checkViews built `views` for this call alone, so sorting it (or its filtered copy) in place is safe.
    selected.sort(compareInCluster)
    for (const c of selected) byRank[checkRank(c) as 0 | 1 | 2].push(c)
  }
  const checks = byRank[0].concat(byRank[1], byRank[2])
  return { generatedAt: toKubeTime(now), summary: summarize(clusters, checks), clusters, checks }
}

export const summarize = (
  clusters: ReadonlyArray<Pick<ClusterView, "conditions">>,
  checks: ReadonlyArray<CheckView>,
): FleetSummary => ({
  clusters: clusters.length,
  healthyClusters: clusters.filter(isClusterHealthy).length,
  checks: countChecks(checks),
})

/**
 * Where the next page starts: after these keys (null when that list is exhausted), and the snapshot
 * the first page was cut from, when the server keeps one.
 */
export interface FleetCursor {
  readonly cluster: string | null
  readonly check: CheckKey | null
  readonly snapshot?: string
}

/** A short fingerprint of the filters, so a token is only used with the query that made it. */
export const filterFingerprint = (filter: FleetFilter): string =>
  createHash("sha256")
    .update(
      JSON.stringify([
        filter.cluster ?? null,
        filter.namespace ?? null,
        filter.status ?? null,
        filter.failing === true,
        filter.label ?? null,
      ]),
    )
    .digest("base64url")
    .slice(0, 8)

export const encodeContinue = (cursor: FleetCursor, filter: FleetFilter): string =>
  Buffer.from(
    JSON.stringify({
      v: 1,
      f: filterFingerprint(filter),
      c: cursor.cluster,
      k: cursor.check,
      ...(cursor.snapshot ? { s: cursor.snapshot } : {}),
    }),
  ).toString("base64url")

/** Reads a continue token; a malformed one, or one made for other filters, is an error to show. */
export const decodeContinue = (
  token: string,
  filter: FleetFilter,
): { readonly ok: true; readonly cursor: FleetCursor } | { readonly ok: false; readonly error: string } => {
  const invalid = { ok: false as const, error: "the continue token is not valid; start again without it" }
  if (!/^[A-Za-z0-9_-]+$/.test(token)) return invalid
  let raw: unknown
  try {
    raw = JSON.parse(Buffer.from(token, "base64url").toString("utf8"))
  } catch {
    return invalid
  }
  if (typeof raw !== "object" || raw === null) return invalid
  const { v, f, c, k, s } = raw as Record<string, unknown>
  if (v !== 1) return invalid
  const isKey = (x: unknown): x is CheckKey =>
    Array.isArray(x) &&
    x.length === 4 &&
    typeof x[0] === "number" &&
    Number.isInteger(x[0]) &&
    x.slice(1).every((p) => typeof p === "string")
  if (!(c === null || typeof c === "string") || !(k === null || isKey(k))) return invalid
  if (!(s === undefined || (typeof s === "string" && /^[A-Za-z0-9_-]{1,32}$/.test(s)))) return invalid
  if (f !== filterFingerprint(filter))
    return {
      ok: false,
      error: "the continue token was made for other filters; use the same query for every page",
    }
  return { ok: true, cursor: { cluster: c, check: k, ...(s ? { snapshot: s } : {}) } }
}

/** Index of the first element after `key` in a list sorted by `compare`. */
const firstAfter = <T, K>(list: ReadonlyArray<T>, key: K, compare: (item: T, key: K) => number): number => {
  let lo = 0
  let hi = list.length
  while (lo < hi) {
    const mid = (lo + hi) >>> 1
    if (compare(list[mid]!, key) <= 0) lo = mid + 1
    else hi = mid
  }
  return lo
}

/**
 * One page of a view: up to `limit` clusters and up to `limit` checks after the cursor, and the token
 * for the next page. Keys, not offsets: a check that appears or goes between two pages does not shift
 * the others. A check whose status changes between two pages moves in the order, so a walk may show it
 * twice or miss it, like a Kubernetes list whose continue token outlived its snapshot: generatedAt
 * tells when each page was taken.
 */
export const fleetPage = (
  view: FleetView,
  limit: number,
  cursor: FleetCursor | undefined,
  filter: FleetFilter,
  /** Names the snapshot `view` is, for the next page's token. */
  snapshot?: string,
): FleetView => {
  const clusterStart =
    cursor === undefined
      ? 0
      : cursor.cluster === null
        ? view.clusters.length
        : firstAfter(view.clusters, cursor.cluster, (c, name) => compareText(c.name, name))
  const checkStart =
    cursor === undefined
      ? 0
      : cursor.check === null
        ? view.checks.length
        : firstAfter(view.checks, cursor.check, (c, key) => compareCheckKeys(checkKey(c), key))
  const clusters = view.clusters.slice(clusterStart, clusterStart + limit)
  const checks = view.checks.slice(checkStart, checkStart + limit)
  const clusterEnd = clusterStart + clusters.length
  const checkEnd = checkStart + checks.length
  const remaining = view.clusters.length - clusterEnd + (view.checks.length - checkEnd)
  const next: FleetCursor = {
    cluster: clusterEnd < view.clusters.length ? clusters[clusters.length - 1]!.name : null,
    check: checkEnd < view.checks.length ? checkKey(checks[checks.length - 1]!) : null,
    ...(snapshot ? { snapshot } : {}),
  }
  return {
    ...view,
    metadata: remaining > 0 ? { continue: encodeContinue(next, filter), remainingItemCount: remaining } : {},
    clusters,
    checks,
  }
}

/**
 * Audit evidence for [start, end] from every cached check (or one cluster's): each check's run history
 * with its Verified as the views show it now (Unknown while its cluster is unreachable).
 */
export const fleetReport = (
  members: Iterable<MemberEntry>,
  start: number,
  end: number,
  cluster?: string,
): Report => {
  const inputs: ReportInput[] = []
  for (const m of members) {
    if (cluster !== undefined && m.name !== cluster) continue
    const views = new Map(checkViews(m).map((v) => [`${v.namespace}/${v.name}`, v.status]))
    for (const check of m.checks()) {
      const key = `${check.metadata.namespace}/${check.metadata.name}`
      inputs.push({ cluster: m.name, check, verified: views.get(key) ?? "Unknown" })
    }
  }
  return buildReport(inputs, start, end)
}
