// The per-check families, fleetcheck_backupcheck_verified,
// fleetcheck_backupcheck_last_success_timestamp_seconds and fleetcheck_recovery_point_age_seconds (only
// checks whose last run reported a dataTimestamp), kept out of prom-client: at 100,000 checks
// they are 200,000 series, and prom-client formats a family in one synchronous run (about 10 µs a
// series, two seconds here) on the thread that also renews the Lease. Here each series' label text is
// built once, when the check first appears, and a scrape writes the families a few thousand lines at a
// time with a turn of the event loop in between.
//
// Which checks get series is the hub's --check-metrics setting: all of them, only those not verified
// (the ones an alert is about; a series appears when a check stops being verified and goes when it is
// again), or none. The fleet-level counts, fleetcheck_backupchecks{cluster,status}, are always on and
// kept here too, from the same statuses.
import { setImmediate as yieldToEventLoop } from "node:timers/promises"
import { Gauge, type Registry } from "prom-client"

export const checkSeriesModes = ["all", "unverified", "none"] as const
export type CheckSeriesMode = (typeof checkSeriesModes)[number]

export type CheckVerifiedStatus = "True" | "False" | "Unknown"

const verifiedValue: Record<CheckVerifiedStatus, number> = { True: 1, False: 0, Unknown: -1 }
const statuses: ReadonlyArray<CheckVerifiedStatus> = ["True", "False", "Unknown"]

/** Series written between two turns of the event loop during a scrape. */
export const linesPerTurn = 4_000

interface CheckEntry {
  /** `{cluster="…",namespace="…",name="…"}`, escaped once. */
  readonly labels: string
  status: CheckVerifiedStatus
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
  set(cluster: string, namespace: string, name: string, status: CheckVerifiedStatus, lastSuccess?: Date): void
  /** The check's recovery point age (a check without series yet is skipped; undefined removes it). */
  setRecoveryPointAge(cluster: string, namespace: string, name: string, seconds: number | undefined): void
  delete(cluster: string, namespace: string, name: string): void
  forgetCluster(cluster: string): void
  /** The two per-check families in the text format, written in slices of linesPerTurn lines. */
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

  const shown = (entry: CheckEntry): boolean =>
    mode === "all" || (mode === "unverified" && entry.status !== "True")

  const renderFamily = async (
    name: string,
    help: string,
    value: (e: CheckEntry) => number | undefined,
  ): Promise<string> => {
    const lines = [`# HELP ${name} ${help}`, `# TYPE ${name} gauge`]
    let sinceYield = 0
    // A member forgotten while this runs is skipped from then on (its map is gone from `clusters`).
    for (const cluster of [...clusters.keys()]) {
      const state = clusters.get(cluster)
      if (state === undefined) continue
      for (const entry of state.checks.values()) {
        const v = value(entry)
        if (!shown(entry) || v === undefined) continue
        lines.push(`${name}${entry.labels} ${v}`)
        if (++sinceYield >= linesPerTurn) {
          sinceYield = 0
          await yieldToEventLoop()
        }
      }
    }
    return lines.join("\n")
  }

  return {
    addCluster: (cluster) => {
      clusterOf(cluster)
    },
    set: (cluster, namespace, name, status, lastSuccess) => {
      const state = clusterOf(cluster)
      const key = `${namespace}/${name}`
      let entry = state.checks.get(key)
      if (entry === undefined) {
        entry = {
          labels: `{cluster="${escapeLabel(cluster)}",namespace="${escapeLabel(namespace)}",name="${escapeLabel(name)}"}`,
          status,
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
      const millis = lastSuccess?.getTime()
      // an invalid Date keeps the previous value rather than exporting NaN
      if (millis !== undefined && Number.isFinite(millis)) entry.lastSuccess = millis / 1000
    },
    setRecoveryPointAge: (cluster, namespace, name, seconds) => {
      const entry = clusters.get(cluster)?.checks.get(`${namespace}/${name}`)
      if (entry === undefined) return
      entry.recoveryPointAge = seconds !== undefined && Number.isFinite(seconds) ? seconds : undefined
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
      const verified = await renderFamily(verifiedName, verifiedHelp, (e) => verifiedValue[e.status])
      await yieldToEventLoop()
      const lastSuccess = await renderFamily(lastSuccessName, lastSuccessHelp, (e) => e.lastSuccess)
      await yieldToEventLoop()
      const age = await renderFamily(recoveryPointAgeName, recoveryPointAgeHelp, (e) => e.recoveryPointAge)
      return `${verified}\n\n${lastSuccess}\n\n${age}`
    },
  }
}
