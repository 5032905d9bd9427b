// fleetcheck's FleetBackupCheck families, one set per FleetBackupCheck (namespace, name), written by the
// leader's placement controller and removed with the FleetBackupCheck or when leadership ends:
//
//   fleetcheck_fleetbackupcheck_verified{namespace,name}          1 (FleetVerified True), 0 (False), -1 (Unknown)
//   fleetcheck_fleetbackupcheck_clusters{namespace,name,status}   selected clusters by their placed check's
//                                                                 Verified status (True, False, Unknown)
//   fleetcheck_fleetbackupcheck_drill_verified{namespace,name,source,target}
//                                                                 each drill pair's last verdict (spec.drill):
//                                                                 1, 0, -1 as above; pairs that leave the
//                                                                 status leave the metric
import { Gauge, type Registry } from "prom-client"
import type { CheckVerifiedStatus } from "./check-series.ts"

export interface FleetCheckCounts {
  readonly verified: number
  readonly failed: number
  readonly unknown: number
}

export interface DrillPair {
  readonly source: string
  readonly target: string
  readonly status: CheckVerifiedStatus
}

export interface FleetCheckGauges {
  setFleetCheck(
    namespace: string,
    name: string,
    status: CheckVerifiedStatus,
    counts: FleetCheckCounts,
    drills?: ReadonlyArray<DrillPair>,
  ): void
  deleteFleetCheck(namespace: string, name: string): void
  forgetFleetChecks(): void
}

const verifiedValue: Record<CheckVerifiedStatus, number> = { True: 1, False: 0, Unknown: -1 }

export const makeFleetCheckGauges = (registry: Registry): FleetCheckGauges => {
  const registers = [registry]
  const verified = new Gauge({
    name: "fleetcheck_fleetbackupcheck_verified",
    help: "FleetVerified of a FleetBackupCheck: 1 True, 0 False, -1 Unknown",
    labelNames: ["namespace", "name"],
    registers,
  })
  const clusters = new Gauge({
    name: "fleetcheck_fleetbackupcheck_clusters",
    help: "Clusters a FleetBackupCheck selects, by its placed check's Verified status",
    labelNames: ["namespace", "name", "status"],
    registers,
  })
  const drillVerified = new Gauge({
    name: "fleetcheck_fleetbackupcheck_drill_verified",
    help: "Last verdict of a FleetBackupCheck's cross-cluster drill, source's backup restored in target: 1 True, 0 False, -1 Unknown",
    labelNames: ["namespace", "name", "source", "target"],
    registers,
  })
  const known = new Map<string, { readonly namespace: string; readonly name: string }>()
  /** The drill pairs set per FleetBackupCheck, so a pair that left its status is removed. */
  const pairs = new Map<string, ReadonlyArray<{ source: string; target: string }>>()
  const deleteFleetCheck = (namespace: string, name: string) => {
    known.delete(`${namespace}/${name}`)
    verified.remove({ namespace, name })
    for (const status of ["True", "False", "Unknown"]) clusters.remove({ namespace, name, status })
    for (const p of pairs.get(`${namespace}/${name}`) ?? []) drillVerified.remove({ namespace, name, ...p })
    pairs.delete(`${namespace}/${name}`)
  }
  return {
    setFleetCheck: (namespace, name, status, counts, drills = []) => {
      const key = `${namespace}/${name}`
      const now = new Set(drills.map((d) => `${d.source} ${d.target}`))
      for (const p of pairs.get(key) ?? [])
        if (!now.has(`${p.source} ${p.target}`)) drillVerified.remove({ namespace, name, ...p })
      for (const d of drills)
        drillVerified.set({ namespace, name, source: d.source, target: d.target }, verifiedValue[d.status])
      pairs.set(
        key,
        drills.map((d) => ({ source: d.source, target: d.target })),
      )
      known.set(`${namespace}/${name}`, { namespace, name })
      verified.set({ namespace, name }, verifiedValue[status])
      clusters.set({ namespace, name, status: "True" }, counts.verified)
      clusters.set({ namespace, name, status: "False" }, counts.failed)
      clusters.set({ namespace, name, status: "Unknown" }, counts.unknown)
    },
    deleteFleetCheck,
    forgetFleetChecks: () => {
      for (const { namespace, name } of [...known.values()]) deleteFleetCheck(namespace, name)
    },
  }
}
