// fleetcheck on a local fleet: the CRDs installed, members registered by kubeconfig Secrets, and the
// samples in clusters/samples applied. Used by the tests, the benchmarks and `fleetcheck dev`.
import { mkdtempSync, readdirSync, readFileSync, writeFileSync } from "node:fs"
import { basename, join } from "node:path"
import { parseAllDocuments } from "yaml"
import {
  apiGroup,
  backupCheckPlural,
  defaultHubNamespace,
  fleetBackupCheckPlural,
  memberClusterPlural,
  profileCredentialLabel,
  profileServerAnnotation,
  registerClusterManager,
  registrationKubeconfigKey,
  registrationLabel,
  secretReaderProvider,
} from "../../src/api/names.ts"
import type { LocalCluster, LocalFleet } from "./fleet.ts"
import { makeSampleBackups, renderRestoreSamples, restoreSamplesDir } from "./sample-backups.ts"

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

const profilesPath = `/apis/multicluster.x-k8s.io/v1alpha2/namespaces/${defaultHubNamespace}/clusterprofiles`

/**
 * Registers a member the SIG-Multicluster way, as `fleetcheck register --clusterprofile` writes it: a
 * ClusterProfile offering the fleetcheck-secret-reader access provider (server, CA, no credential) and
 * the token Secret that provider reads. The ClusterProfile CRD must be served in the hub.
 */
export const registerWithClusterProfile = async (
  hub: LocalCluster,
  member: LocalCluster,
  labels: Record<string, string>,
) => {
  const token = await hub.api("POST", `/api/v1/namespaces/${defaultHubNamespace}/secrets`, {
    apiVersion: "v1",
    kind: "Secret",
    metadata: {
      name: member.name,
      namespace: defaultHubNamespace,
      labels: { [profileCredentialLabel]: "true" },
      annotations: { [profileServerAnnotation]: member.server },
    },
    data: { token: Buffer.from(member.adminToken).toString("base64") },
  })
  if (token.status !== 201) throw new Error(`registering ${member.name}: ${JSON.stringify(token.body)}`)
  const created = await hub.api("POST", profilesPath, {
    apiVersion: "multicluster.x-k8s.io/v1alpha2",
    kind: "ClusterProfile",
    metadata: {
      name: member.name,
      namespace: defaultHubNamespace,
      labels: { ...labels, "x-k8s.io/cluster-manager": registerClusterManager },
    },
    spec: { displayName: member.name, clusterManager: { name: registerClusterManager } },
  })
  if (created.status !== 201) throw new Error(`registering ${member.name}: ${JSON.stringify(created.body)}`)
  const status = await hub.api("PUT", `${profilesPath}/${member.name}/status`, {
    ...created.body,
    status: {
      accessProviders: [
        {
          name: secretReaderProvider,
          cluster: {
            server: member.server,
            "certificate-authority-data": Buffer.from(member.caPem).toString("base64"),
            extensions: [
              { name: "client.authentication.k8s.io/exec", extension: { clusterName: member.name } },
            ],
          },
        },
      ],
    },
  })
  if (status.status !== 200) throw new Error(`registering ${member.name}: ${JSON.stringify(status.body)}`)
}

/**
 * The hub operator's provider file for a local fleet: fleetcheck-secret-reader is this checkout's
 * `fleetcheck credential secret-reader`, reading token Secrets with the hub cluster's admin kubeconfig.
 */
const writeProviderFile = (fleet: LocalFleet): string => {
  const file = join(fleet.runDir, "clusterprofile-providers.json")
  const execConfig = {
    apiVersion: "client.authentication.k8s.io/v1",
    command: join(root, "bin/fleetcheck"),
    args: ["credential", "secret-reader", "--namespace", defaultHubNamespace],
    env: [
      { name: "KUBECONFIG", value: fleet.cluster("hub").kubeconfigPath },
      { name: "FLEETCHECK_FROM_SOURCE", value: "1" },
    ],
    provideClusterInfo: true,
  }
  writeFileSync(file, JSON.stringify({ providers: [{ name: secretReaderProvider, execConfig }] }))
  return file
}

/**
 * The exec config of clusters/local-fleet/token-plugin.sh: each run mints a TokenRequest token for
 * `serviceAccount` in `namespace` of `member` (a provider file's or a kubeconfig's exec entry).
 */
export const tokenPluginExecConfig = (
  fleet: LocalFleet,
  member: LocalCluster,
  namespace: string,
  serviceAccount: string,
) => ({
  apiVersion: "client.authentication.k8s.io/v1",
  command: join(root, "clusters/local-fleet/token-plugin.sh"),
  env: [
    { name: "FLEETCHECK_PLUGIN_KUBECTL", value: `${fleet.binDir}/kubectl` },
    { name: "FLEETCHECK_PLUGIN_KUBECONFIG", value: member.kubeconfigPath },
    { name: "FLEETCHECK_PLUGIN_NAMESPACE", value: namespace },
    { name: "FLEETCHECK_PLUGIN_SERVICEACCOUNT", value: serviceAccount },
  ],
})

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
  await establishedWithin(cluster, what, `crd/${plural}.${apiGroup}`)
}

/**
 * `kubectl wait --for=condition=Established`, again while it fails within 30 s: on a loaded machine it
 * can read the CRD before the API server gave it any condition, and then fails at once.
 */
export const establishedWithin = async (cluster: LocalCluster, what: string, crd: string) => {
  const deadline = Date.now() + 30_000
  for (;;) {
    const r = await cluster.kubectl(["wait", "--for=condition=Established", crd, "--timeout=30s"])
    if (r.code === 0) return
    if (Date.now() >= deadline) throw new Error(`${what}: ${r.stderr.trim()}`)
    await new Promise((resolve) => setTimeout(resolve, 250))
  }
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
  /** The hub's --clusterprofile-provider-file, when a member is registered by ClusterProfile. */
  readonly providerFile?: string
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
  /**
   * Register the last member (of two or more) by a ClusterProfile instead of a Secret; the result names
   * the provider file the hub then needs. Default false.
   */
  readonly clusterProfileMember?: boolean
  /**
   * Also make real backups (restic, etcd, pg_dump) and apply the restore samples that prove them
   * (clusters/samples/restores) to the first member; default true, off when `samples` is given.
   */
  readonly restoreSamples?: boolean
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
  const byProfile = options.clusterProfileMember && members.length > 1 ? members.at(-1) : undefined
  let providerFile: string | undefined
  if (byProfile) {
    await must(
      "ClusterProfile CRD",
      hub.kubectl([
        "apply",
        "--server-side",
        "-f",
        join(crdDir, "multicluster.x-k8s.io_clusterprofiles.yaml"),
      ]),
    )
    await establishedWithin(hub, "ClusterProfile CRD", "crd/clusterprofiles.multicluster.x-k8s.io")
    providerFile = writeProviderFile(fleet)
  }
  for (const [i, m] of members.entries()) {
    const labels = { env: "dev", region: `local-${i + 1}` }
    if (m === byProfile) {
      await registerWithClusterProfile(hub, m, labels)
      log(`registered ${m.name} by a ClusterProfile (access provider ${secretReaderProvider})`)
    } else await registerWithSecret(hub, m, labels)
  }
  const registered = providerFile ? { providerFile } : {}
  // One sample per member, round-robin: member-1 gets the passing check, member-2 the failing one.
  const files = options.samples?.map((name) => join(samplesDir, name)) ?? samples()
  for (const [i, file] of files.entries()) {
    const m = members[i % members.length]!
    await m.api("POST", "/api/v1/namespaces", { metadata: { name: namespaceOf(file) } })
    await must(`applying ${file} to ${m.name}`, m.kubectl(["apply", "-f", file]))
    log(`applied ${file.slice(root.length)} to ${m.name}`)
  }
  if (options.samples === undefined && options.restoreSamples !== false && members[0]) {
    // The real restores: backups made now, the samples that prove them applied to the first member.
    const member = members[0]
    const backups = await makeSampleBackups(fleet, log)
    const rendered = renderRestoreSamples(backups.values, mkdtempSync(join(fleet.runDir, "restore-samples-")))
    const namespace = namespaceOf(rendered[0] ?? "")
    await member.api("POST", "/api/v1/namespaces", { metadata: { name: namespace } })
    for (const secret of backups.secrets) {
      const r = await member.api("POST", `/api/v1/namespaces/${namespace}/secrets`, {
        metadata: { name: secret.name },
        stringData: secret.stringData,
      })
      if (r.status !== 201) throw new Error(`Secret ${secret.name} in ${member.name}: ${r.status}`)
    }
    for (const file of rendered) {
      await must(`applying ${file} to ${member.name}`, member.kubectl(["apply", "-f", file]))
      files.push(join(restoreSamplesDir, basename(file)))
    }
    log(`applied ${rendered.length} real-restore samples (clusters/samples/restores) to ${member.name}`)
  }
  if (options.fleetSamples === false) return { checks: files, fleetChecks: [], ...registered }
  const fleetFiles = samples(hubSamplesDir)
  for (const file of fleetFiles) {
    const namespace = templateNamespaceOf(file)
    if (namespace)
      for (const m of members) await m.api("POST", "/api/v1/namespaces", { metadata: { name: namespace } })
    await must(`applying ${file} to the hub`, hub.kubectl(["apply", "-f", file]))
    log(`applied ${file.slice(root.length)} to the hub (placed in every member it selects)`)
  }
  return { checks: files, fleetChecks: fleetFiles, ...registered }
}
