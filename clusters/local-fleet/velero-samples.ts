// `fleetcheck dev --velero`: a real Velero server in every member (one shared bucket on a local
// S3-compatible server; the first member writes, the others only read and sync its backups), a small
// `storefront` namespace in the first member backed up for real by a Velero Schedule, and the
// Velero-backed check samples (clusters/samples/velero) applied there.
import { readdirSync } from "node:fs"
import { join } from "node:path"
import { startS3Server } from "./backups.ts"
import type { LocalCluster, LocalFleet } from "./fleet.ts"
import { startVelero, type VeleroServer } from "./velero.ts"

export const veleroSamplesDir = new URL("../samples/velero/", import.meta.url).pathname
/** FleetBackupCheck samples (a cross-cluster drill), applied to the hub. */
export const veleroHubSamplesDir = new URL("../samples/velero-hub/", import.meta.url).pathname
/** The namespace the first member's Schedule backs up, and the Schedule's name (the samples use both). */
export const storefrontNamespace = "storefront"
export const storefrontSchedule = "storefront-nightly"

const must = async (what: string, r: Promise<{ code: number; stderr: string }>) => {
  const done = await r
  if (done.code !== 0) throw new Error(`${what}: ${done.stderr}`)
}

/** A Deployment of two replicas, two ConfigMaps and a Secret: what a Velero restore must bring back. */
export const storefrontManifest = (namespace = storefrontNamespace) =>
  [
    { apiVersion: "v1", kind: "Namespace", metadata: { name: namespace } },
    ...["settings", "prices"].map((name, i) => ({
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name, namespace },
      data: { [`${name}.txt`]: `generation ${i}` },
    })),
    ...["db-password", "api-key"].map((name) => ({
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name, namespace },
      stringData: { value: `${name}-value` },
    })),
    {
      apiVersion: "apps/v1",
      kind: "Deployment",
      metadata: { name: "orders", namespace },
      spec: {
        replicas: 2,
        selector: { matchLabels: { app: "orders" } },
        template: {
          metadata: { labels: { app: "orders" } },
          spec: { containers: [{ name: "orders", image: "registry.invalid/orders:1" }] },
        },
      },
    },
  ]
    .map((m) => JSON.stringify(m))
    .join("\n")

/** Applies the storefront namespace and waits until its Deployment is available (kwok runs its pods). */
export const applyStorefront = async (c: LocalCluster, namespace = storefrontNamespace) => {
  await must(`storefront in ${c.name}`, c.kubectl(["apply", "-f", "-"], storefrontManifest(namespace)))
  const r = await c.kubectl([
    "wait",
    "-n",
    namespace,
    "--for=condition=Available",
    "--timeout=60s",
    "deployment/orders",
  ])
  if (r.code !== 0) throw new Error(`storefront Deployment in ${c.name} not available: ${r.stderr}`)
}

export interface VeleroSamples {
  readonly servers: ReadonlyArray<VeleroServer>
  /** The sample files applied (clusters/samples/velero), to the first member. */
  readonly checks: ReadonlyArray<string>
  /** The FleetBackupCheck samples applied (clusters/samples/velero-hub), to the hub. */
  readonly fleetChecks: ReadonlyArray<string>
  /** The first Backup the Schedule made. */
  readonly backup: string
}

export const prepareVeleroSamples = async (
  fleet: LocalFleet,
  log: (line: string) => void,
): Promise<VeleroSamples> => {
  const members = fleet.clusters.filter((c) => c.name !== "hub")
  const first = members[0]
  if (!first) throw new Error("--velero needs a member")
  const s3 = await startS3Server(fleet.spawn, "velero-s3")
  const servers = await Promise.all(
    members.map((cluster, i) =>
      startVelero({
        spawn: fleet.spawn,
        cluster,
        s3,
        bucket: "velero",
        // The others restore the first member's backups (a migration): read-only, synced at each of
        // Velero's once-a-minute looks.
        ...(i === 0 ? {} : { accessMode: "ReadOnly" as const, backupSyncPeriod: "10s" }),
      }),
    ),
  )
  log(`velero: servers running in ${members.map((m) => m.name).join(", ")}`)
  const writer = servers[0] as VeleroServer
  await applyStorefront(first)
  const backup = await writer.schedule(storefrontSchedule, { includedNamespaces: [storefrontNamespace] })
  if (backup?.phase !== "Completed")
    throw new Error(`velero: the first backup of ${storefrontSchedule} is ${backup?.phase}`)
  log(
    `velero: ${storefrontSchedule} backed up ${storefrontNamespace} (${backup.name}, ${backup.itemsBackedUp} items)`,
  )
  const yamlIn = (dir: string) =>
    readdirSync(dir)
      .filter((f) => f.endsWith(".yaml"))
      .sort()
      .map((f) => join(dir, f))
  const checks = yamlIn(veleroSamplesDir)
  // Drill targets get their checks in the same namespace.
  for (const m of members) await m.api("POST", "/api/v1/namespaces", { metadata: { name: "velero-checks" } })
  for (const file of checks)
    await must(`applying ${file} to ${first.name}`, first.kubectl(["apply", "-f", file]))
  log(`velero: applied ${checks.length} Velero-backed samples (clusters/samples/velero) to ${first.name}`)
  // A drill run restores in the other members what their servers have synced from the store: before
  // that (Velero syncs once a minute) it would find no Backup of the schedule and stay red until its
  // next round.
  await Promise.all(servers.slice(1).map((s) => s.waitForBackup(backup.name, 150_000)))
  log(
    `velero: ${backup.name} synced into ${members
      .slice(1)
      .map((m) => m.name)
      .join(", ")}`,
  )
  const fleetChecks = yamlIn(veleroHubSamplesDir)
  const hub = fleet.cluster("hub")
  for (const file of fleetChecks)
    await must(`applying ${file} to the hub`, hub.kubectl(["apply", "-f", file]))
  log(`velero: applied ${fleetChecks.length} Velero drill samples (clusters/samples/velero-hub) to the hub`)
  return { servers, checks, fleetChecks, backup: backup.name }
}
