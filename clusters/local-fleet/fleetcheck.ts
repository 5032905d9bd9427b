// fleetcheck on a local fleet: the CRDs installed, members registered by kubeconfig Secrets, and the
// samples in clusters/samples applied. Used by the tests, the benchmarks and `fleetcheck dev`.
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { parseAllDocuments } from "yaml"
import {
  apiGroup,
  backupCheckPlural,
  defaultHubNamespace,
  fleetBackupCheckPlural,
  memberClusterPlural,
  registrationKubeconfigKey,
  registrationLabel,
} from "../../src/api/names.ts"
import type { LocalCluster, LocalFleet } from "./fleet.ts"

const root = new URL("../../", import.meta.url).pathname
const crdDir = join(root, "deploy/crds")
const samplesDir = join(root, "clusters/samples")
/** FleetBackupChecks the hub gets (the hub places them in members itself). */
const hubSamplesDir = join(samplesDir, "hub")

const must = async (what: string, p: Promise<{ code: number; stderr: string }>) => {
  const r = await p
  if (r.code !== 0) throw new Error(`${what}: ${r.stderr.trim()}`)
}

/** Registers a member the way an operator would: a labelled Secret holding its kubeconfig. */
export const registerWithSecret = async (
  hub: LocalCluster,
  member: LocalCluster,
  labels: Record<string, string>,
) => {
  const secret = {
    apiVersion: "v1",
    kind: "Secret",
    metadata: {
      name: member.name,
      namespace: defaultHubNamespace,
      labels: { [registrationLabel]: "true", ...labels },
    },
    data: { [registrationKubeconfigKey]: Buffer.from(member.kubeconfig).toString("base64") },
  }
  const res = await hub.api("POST", `/api/v1/namespaces/${defaultHubNamespace}/secrets`, secret)
  if (res.status !== 201) throw new Error(`registering ${member.name}: ${JSON.stringify(res.body)}`)
}

/** The sample BackupChecks (or, in hub/, FleetBackupChecks), in file name order. */
const samples = (dir = samplesDir) =>
  readdirSync(dir)
    .filter((f) => f.endsWith(".yaml"))
    .sort()
    .map((f) => join(dir, f))

/** The namespace a FleetBackupCheck sample places its check in (it must exist in the members). */
const templateNamespaceOf = (file: string): string | undefined => {
  for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
    const obj = doc.toJS() as { spec?: { template?: { metadata?: { namespace?: unknown } } } } | null
    const namespace = obj?.spec?.template?.metadata?.namespace
    if (typeof namespace === "string" && namespace !== "") return namespace
  }
  return undefined
}

/** The namespace of the first object in the file that names one; "default" when none does. */
const namespaceOf = (file: string): string => {
  for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
    const namespace = (doc.toJS() as { metadata?: { namespace?: unknown } } | null)?.metadata?.namespace
    if (typeof namespace === "string" && namespace !== "") return namespace
  }
  return "default"
}

/** Applies a generated CRD and waits until the API server serves it. */
const installCrd = async (cluster: LocalCluster, what: string, plural: string) => {
  await must(
    what,
    cluster.kubectl(["apply", "--server-side", "-f", join(crdDir, `${apiGroup}_${plural}.yaml`)]),
  )
  await must(
    what,
    cluster.kubectl(["wait", "--for=condition=Established", `crd/${plural}.${apiGroup}`, "--timeout=30s"]),
  )
}

/**
 * The MemberCluster and FleetBackupCheck CRDs and the hub namespace in the hub; the BackupCheck CRD
 * (served) in each member.
 */
export const installFleetcheck = async (hub: LocalCluster, members: ReadonlyArray<LocalCluster>) => {
  await installCrd(hub, "hub CRD", memberClusterPlural)
  await installCrd(hub, "hub CRD", fleetBackupCheckPlural)
  await hub.api("POST", "/api/v1/namespaces", { metadata: { name: defaultHubNamespace } })
  for (const m of members) await installCrd(m, `${m.name} CRD`, backupCheckPlural)
}

export interface PreparedSamples {
  /** BackupCheck samples, applied to the members round-robin. */
  readonly checks: ReadonlyArray<string>
  /** FleetBackupCheck samples, applied to the hub. */
  readonly fleetChecks: ReadonlyArray<string>
}

export interface PrepareFleetOptions {
  /** Progress lines; default: stderr, prefixed `[fleet]`. */
  readonly log?: (line: string) => void
  /** Only these sample files (names in clusters/samples), in this order; default every sample. */
  readonly samples?: ReadonlyArray<string>
  /**
   * Also apply the FleetBackupCheck samples (clusters/samples/hub) to the hub; default true. A test that
   * counts the member samples' checks exactly turns them off.
   */
  readonly fleetSamples?: boolean
}

/**
 * The fleet `fleetcheck dev` runs: the cluster named "hub" is the hub, every other cluster a member
 * registered with `env` and `region` labels, the samples applied round-robin to the members (the
 * first member gets the first sample), and the FleetBackupCheck samples to the hub. Returns the sample
 * files applied.
 */
export const prepareFleet = async (
  fleet: LocalFleet,
  options: PrepareFleetOptions = {},
): Promise<PreparedSamples> => {
  const log = options.log ?? ((line: string) => process.stderr.write(`[fleet] ${line}\n`))
  const hub = fleet.cluster("hub")
  const members = fleet.clusters.filter((c) => c.name !== "hub")
  log("installing CRDs")
  await installFleetcheck(hub, members)
  log("registering members")
  for (const [i, m] of members.entries())
    await registerWithSecret(hub, m, { env: "dev", region: `local-${i + 1}` })
  // One sample per member, round-robin: member-1 gets the passing check, member-2 the failing one.
  const files = options.samples?.map((name) => join(samplesDir, name)) ?? samples()
  for (const [i, file] of files.entries()) {
    const m = members[i % members.length]!
    await m.api("POST", "/api/v1/namespaces", { metadata: { name: namespaceOf(file) } })
    await must(`applying ${file} to ${m.name}`, m.kubectl(["apply", "-f", file]))
    log(`applied ${file.slice(root.length)} to ${m.name}`)
  }
  if (options.fleetSamples === false) return { checks: files, fleetChecks: [] }
  const fleetFiles = samples(hubSamplesDir)
  for (const file of fleetFiles) {
    const namespace = templateNamespaceOf(file)
    if (namespace)
      for (const m of members) await m.api("POST", "/api/v1/namespaces", { metadata: { name: namespace } })
    await must(`applying ${file} to the hub`, hub.kubectl(["apply", "-f", file]))
    log(`applied ${file.slice(root.length)} to the hub (placed in every member it selects)`)
  }
  return { checks: files, fleetChecks: fleetFiles }
}
