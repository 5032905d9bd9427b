// The per-check families, fleetcheck_backupcheck_verified (with the Verified reason as `reason`),
// fleetcheck_backupcheck_last_success_timestamp_seconds, fleetcheck_recovery_point_age_seconds (only
// checks whose last run reported a dataTimestamp) and the facts the alerts and the dashboard read
// (objectives, the verification deadline, failed sandbox cleanups; see CheckFacts), kept out of
// prom-client: at 100,000 checks
// they are 200,000 series, and prom-client formats a family in one synchronous run (about 10 µs a
// series, two seconds here) on the thread that also renews the Lease. Here each series' label text is
// built once, when the check first appears, and a scrape writes the families a few thousand lines at a
// time with a turn of the event loop in between.
//
// Which checks get series is the hub's --check-metrics setting: all of them, only those an alert is
// about (not verified, an objective missed, a sandbox cleanup failed or the verification deadline
// passed; a check's series appear when it becomes one and go when it is no longer), or none. The fleet-level counts, fleetcheck_backupchecks{cluster,status}, are always on and
// kept here too, from the same statuses.
import { setImmediate as yieldToEventLoop } from "node:timers/promises"
import { Gauge, type Registry } from "prom-client"

export const checkSeriesModes = ["all", "unverified", "none"] as const
export type CheckSeriesMode = (typeof checkSeriesModes)[number]

export type CheckVerifiedStatus = "True" | "False" | "Unknown"

/** What the fleet views say of a check besides its status: the Verified reason, its objectives. */
export interface CheckViewFacts {
  readonly reason?: string | undefined
  /** The objective conditions of the objectives the spec sets (RestoreTimeObjectiveMet, DataAgeObjectiveMet). */
  readonly objectives?:
    | { readonly restoreTime?: CheckVerifiedStatus; readonly dataAge?: CheckVerifiedStatus }
    | undefined
}

/** Facts of a check's spec and recorded runs (undefined: no series). */
export interface CheckFacts {
  /** Unix seconds by which a new successful verification is expected (see check-facts.ts). */
  readonly verificationDeadline?: number | undefined
  /** spec.objectives in seconds. */
  readonly objectiveSeconds?: { readonly restoreTime?: number; readonly dataAge?: number } | undefined
  /** Recorded runs (lastRun and history) whose sandbox cleanup Failed; undefined: the check has no sandboxes. */
  readonly sandboxCleanupsFailed?: number | undefined
}

const objectiveNames = ["restoreTime", "dataAge"] as const
type ObjectiveName = (typeof objectiveNames)[number]

const verifiedValue: Record<CheckVerifiedStatus, number> = { True: 1, False: 0, Unknown: -1 }
const statuses: ReadonlyArray<CheckVerifiedStatus> = ["True", "False", "Unknown"]

/** Series written between two turns of the event loop during a scrape. */
export const linesPerTurn = 4_000

interface CheckEntry {
  /** `{cluster="…",namespace="…",name="…"}`, escaped once. */
  readonly labels: string
  status: CheckVerifiedStatus
  reason: string | undefined
  /** labels with the reason, escaped once per reason. */
  verifiedLabels: string
  /** labels with each objective, built on the first objective. */
  objectiveLabels: Record<ObjectiveName, string> | undefined
  objectiveMet: Partial<Record<ObjectiveName, number>>
  objectiveSeconds: Partial<Record<ObjectiveName, number>>
  verificationDeadline: number | undefined
  sandboxCleanupsFailed: number | undefined
  /** Unix seconds of the last success; 0: never. */
  lastSuccess: number
  /** Seconds: how old the restored data was when the last run verified it; undefined: not reported. */
  recoveryPointAge: number | undefined
}

interface ClusterChecks {
  // "namespace/name" → the check
  readonly checks: Map<string, CheckEntry>
  readonly counts: Record<CheckVerifiedStatus, number>
}

export interface CheckSeries {
  /** The cluster's counts at zero (idempotent). */
  addCluster(cluster: string): void
  set(
    cluster: string,
    namespace: string,
    name: string,
    status: CheckVerifiedStatus,
    lastSuccess?: Date,
    view?: CheckViewFacts,
  ): void
  /** The check's recovery point age (a check without series yet is skipped; undefined removes it). */
  setRecoveryPointAge(cluster: string, namespace: string, name: string, seconds: number | undefined): void
  /** The check's spec and run facts (a check without series yet is skipped). */
  setFacts(cluster: string, namespace: string, name: string, facts: CheckFacts): void
  delete(cluster: string, namespace: string, name: string): void
  forgetCluster(cluster: string): void
  /** The per-check families in the text format, written in slices of linesPerTurn lines. */
  render(): Promise<string>
}

// the text format's escaping of label values (prom-client's escapeLabelValue)
const escapeLabel = (s: string): string => s.replace(/\\/g, "\\\\").replace(/\n/g, "\\n").replace(/"/g, '\\"')

const verifiedName = "fleetcheck_backupcheck_verified"
const verifiedHelp = "The BackupCheck's Verified condition: 1 True, 0 False, -1 Unknown"
const lastSuccessName = "fleetcheck_backupcheck_last_success_timestamp_seconds"
const lastSuccessHelp = "Unix time of the BackupCheck's last successful verification (0: never)"
const recoveryPointAgeName = "fleetcheck_recovery_point_age_seconds"
const recoveryPointAgeHelp =
  "Age of the newest record in the restored data when the check's last run verified it (the structured termination message's dataTimestamp)"
const objectiveMetName = "fleetcheck_backupcheck_objective_met"
const objectiveMetHelp =
  "The BackupCheck's objective conditions by objective (restoreTime: RestoreTimeObjectiveMet, dataAge: DataAgeObjectiveMet): 1 True, 0 False, -1 Unknown"
const objectiveSecondsName = "fleetcheck_backupcheck_objective_seconds"
const objectiveSecondsHelp =
  "The BackupCheck's spec.objectives in seconds by objective (restoreTime: maxRestoreDuration, dataAge: maxDataAge)"
const deadlineName = "fleetcheck_backupcheck_verification_deadline_timestamp_seconds"
const deadlineHelp =
  "Unix time by which the BackupCheck's next successful verification is due: the last success (or creation) plus spec.maxStaleness, or else two schedule slots after it plus spec.timeout"
const cleanupsFailedName = "fleetcheck_backupcheck_sandbox_cleanups_failed"
const cleanupsFailedHelp =
  "Recorded runs of the BackupCheck (lastRun and history) whose sandbox namespace the hub could not delete (sandbox.cleanup Failed)"

const finite = (n: number | undefined): number | undefined =>
  n !== undefined && Number.isFinite(n) ? n : undefined
const withLabel = (labels: string, label: string, value: string): string =>
  `${labels.slice(0, -1)},${label}="${escapeLabel(value)}"}`

export const makeCheckSeries = (registry: Registry, mode: CheckSeriesMode): CheckSeries => {
  const clusters = new Map<string, ClusterChecks>()

  const counts: Gauge = new Gauge({
    name: "fleetcheck_backupchecks",
    help: "BackupChecks of the member by their Verified status as the fleet views show it (True, False, Unknown)",
    labelNames: ["cluster", "status"],
    registers: [registry],
    collect: () => {
      for (const [cluster, state] of clusters) {
        for (const status of statuses) counts.set({ cluster, status }, state.counts[status])
      }
    },
  })

  const clusterOf = (cluster: string): ClusterChecks => {
    let state = clusters.get(cluster)
    if (state === undefined) {
      state = { checks: new Map(), counts: { True: 0, False: 0, Unknown: 0 } }
      clusters.set(cluster, state)
    }
    return state
  }

  // `now` (Unix seconds) is the scrape's, for the deadline
  const alerting = (e: CheckEntry, now: number): boolean =>
    e.status !== "True" ||
    e.objectiveMet.restoreTime === 0 ||
    e.objectiveMet.dataAge === 0 ||
    (e.sandboxCleanupsFailed ?? 0) > 0 ||
    (e.verificationDeadline !== undefined && e.verificationDeadline < now)
  const shown = (entry: CheckEntry, now: number): boolean =>
    mode === "all" || (mode === "unverified" && alerting(entry, now))

  const objectiveLabelsOf = (e: CheckEntry): Record<ObjectiveName, string> => {
    e.objectiveLabels ??= {
      restoreTime: withLabel(e.labels, "objective", "restoreTime"),
      dataAge: withLabel(e.labels, "objective", "dataAge"),
    }
    return e.objectiveLabels
  }

  /** One family; `write` pushes the entry's lines and returns how many. */
  const renderFamily = async (
    name: string,
    help: string,
    now: number,
    write: (e: CheckEntry, lines: Array<string>) => number,
  ): Promise<string> => {
    const lines = [`# HELP ${name} ${help}`, `# TYPE ${name} gauge`]
    let sinceYield = 0
    // A member forgotten while this runs is skipped from then on (its map is gone from `clusters`).
    for (const cluster of [...clusters.keys()]) {
      const state = clusters.get(cluster)
      if (state === undefined) continue
      for (const entry of state.checks.values()) {
        if (!shown(entry, now)) continue
        sinceYield += write(entry, lines)
        if (sinceYield >= linesPerTurn) {
          sinceYield = 0
          await yieldToEventLoop()
        }
      }
    }
    return lines.join("\n")
  }
  /** A family of one value per check (undefined: no line). */
  const single =
    (name: string, value: (e: CheckEntry) => number | undefined, labels = (e: CheckEntry) => e.labels) =>
    (e: CheckEntry, lines: Array<string>): number => {
      const v = value(e)
      if (v === undefined) return 0
      lines.push(`${name}${labels(e)} ${v}`)
      return 1
    }
  /** A family of one value per objective the check has. */
  const perObjective =
    (name: string, values: (e: CheckEntry) => Partial<Record<ObjectiveName, number>>) =>
    (e: CheckEntry, lines: Array<string>): number => {
      const v = values(e)
      let n = 0
      for (const objective of objectiveNames) {
        const value = v[objective]
        if (value === undefined) continue
        lines.push(`${name}${objectiveLabelsOf(e)[objective]} ${value}`)
        n++
      }
      return n
    }

  return {
    addCluster: (cluster) => {
      clusterOf(cluster)
    },
    set: (cluster, namespace, name, status, lastSuccess, view) => {
      const state = clusterOf(cluster)
      const key = `${namespace}/${name}`
      let entry = state.checks.get(key)
      if (entry === undefined) {
        const labels = `{cluster="${escapeLabel(cluster)}",namespace="${escapeLabel(namespace)}",name="${escapeLabel(name)}"}`
        entry = {
          labels,
          status,
          reason: undefined,
          verifiedLabels: labels,
          objectiveLabels: undefined,
          objectiveMet: {},
          objectiveSeconds: {},
          verificationDeadline: undefined,
          sandboxCleanupsFailed: undefined,
          lastSuccess: 0,
          recoveryPointAge: undefined,
        }
        state.checks.set(key, entry)
        state.counts[status]++
      } else if (entry.status !== status) {
        state.counts[entry.status]--
        state.counts[status]++
        entry.status = status
      }
      const reason = view?.reason === "" ? undefined : view?.reason
      if (reason !== entry.reason) {
        entry.reason = reason
        entry.verifiedLabels = reason === undefined ? entry.labels : withLabel(entry.labels, "reason", reason)
      }
      const restoreTime = view?.objectives?.restoreTime
      const dataAge = view?.objectives?.dataAge
      entry.objectiveMet = {
        ...(restoreTime !== undefined ? { restoreTime: verifiedValue[restoreTime] } : {}),
        ...(dataAge !== undefined ? { dataAge: verifiedValue[dataAge] } : {}),
      }
      const millis = lastSuccess?.getTime()
      // an invalid Date keeps the previous value rather than exporting NaN
      if (millis !== undefined && Number.isFinite(millis)) entry.lastSuccess = millis / 1000
    },
    setRecoveryPointAge: (cluster, namespace, name, seconds) => {
      const entry = clusters.get(cluster)?.checks.get(`${namespace}/${name}`)
      if (entry === undefined) return
      entry.recoveryPointAge = seconds !== undefined && Number.isFinite(seconds) ? seconds : undefined
    },
    setFacts: (cluster, namespace, name, facts) => {
      const entry = clusters.get(cluster)?.checks.get(`${namespace}/${name}`)
      if (entry === undefined) return
      entry.verificationDeadline = finite(facts.verificationDeadline)
      const restoreTime = finite(facts.objectiveSeconds?.restoreTime)
      const dataAge = finite(facts.objectiveSeconds?.dataAge)
      entry.objectiveSeconds = {
        ...(restoreTime !== undefined ? { restoreTime } : {}),
        ...(dataAge !== undefined ? { dataAge } : {}),
      }
      entry.sandboxCleanupsFailed = finite(facts.sandboxCleanupsFailed)
    },
    delete: (cluster, namespace, name) => {
      const state = clusters.get(cluster)
      const key = `${namespace}/${name}`
      const entry = state?.checks.get(key)
      if (state === undefined || entry === undefined) return
      state.counts[entry.status]--
      state.checks.delete(key)
    },
    forgetCluster: (cluster) => {
      if (!clusters.delete(cluster)) return
      for (const status of statuses) counts.remove({ cluster, status })
    },
    render: async () => {
      if (mode === "none") return ""
      const now = Date.now() / 1000
      const families: ReadonlyArray<[string, string, (e: CheckEntry, lines: Array<string>) => number]> = [
        [
          verifiedName,
          verifiedHelp,
          single(
            verifiedName,
            (e) => verifiedValue[e.status],
            (e) => e.verifiedLabels,
          ),
        ],
        [lastSuccessName, lastSuccessHelp, single(lastSuccessName, (e) => e.lastSuccess)],
        [recoveryPointAgeName, recoveryPointAgeHelp, single(recoveryPointAgeName, (e) => e.recoveryPointAge)],
        [objectiveMetName, objectiveMetHelp, perObjective(objectiveMetName, (e) => e.objectiveMet)],
        [
          objectiveSecondsName,
          objectiveSecondsHelp,
          perObjective(objectiveSecondsName, (e) => e.objectiveSeconds),
        ],
        [deadlineName, deadlineHelp, single(deadlineName, (e) => e.verificationDeadline)],
        [cleanupsFailedName, cleanupsFailedHelp, single(cleanupsFailedName, (e) => e.sandboxCleanupsFailed)],
      ]
      const parts: Array<string> = []
      for (const [name, help, write] of families) {
        if (parts.length > 0) await yieldToEventLoop()
        parts.push(await renderFamily(name, help, now, write))
      }
      return parts.join("\n\n")
    },
  }
}
