// `register --clusterprofile`: the hub side written as the SIG-Multicluster standard has it. A
// ClusterProfile NAME in the hub namespace whose status offers one access provider,
// `fleetcheck-secret-reader` (server, CA, TLS server name, and the extension naming the token Secret),
// and the token Secret NAME (key `token`, annotated with the one server its token may be sent to). The
// hub reaches the member through its provider file, which maps that provider to
// `fleetcheck credential secret-reader`; the profile itself carries no credential.
import { Effect } from "effect"
import {
  memberContextAnnotation,
  namespacesAnnotation,
  profileCredentialLabel,
  profileServerAnnotation,
  registerClusterManager,
  secretReaderProvider,
} from "../../api/names.ts"
import {
  type ClusterProfileVersion,
  checkClusterProfile,
  clusterProfileGroup,
  clusterProfilePlural,
  clusterProfileVersions,
  execExtensionName,
} from "../../clusterprofile/profile.ts"
import { tokenKey } from "../../clusterprofile/secret-reader.ts"
import { pathOf } from "../../kube/resources.ts"
import { defaultPolicy } from "../../kubeconfig/policy.ts"
import { UsageError } from "./args.ts"
import { type Cluster, CommandError, fieldManager, type MemberEndpoint, q } from "./cluster.ts"
import type { Manifest } from "./manifests.ts"

/** The label a cluster manager puts on its ClusterProfiles (KEP-4322). */
const clusterManagerLabel = "x-k8s.io/cluster-manager"

/** The ClusterProfile version the hub serves (v1alpha2 first), if any. */
export const profileVersionIfServed = (hub: Cluster) =>
  hub.get<{ versions?: ReadonlyArray<{ version?: string }> }>(`/apis/${clusterProfileGroup}`).pipe(
    Effect.map((group) => {
      const served = new Set((group?.versions ?? []).map((v) => v.version))
      return clusterProfileVersions.find((v) => served.has(v))
    }),
  )

/** The ClusterProfile version the hub serves; a clear error when none is. */
export const servedProfileVersion = (hub: Cluster) =>
  Effect.gen(function* () {
    const version = yield* profileVersionIfServed(hub)
    if (!version) {
      return yield* new UsageError({
        message:
          `the hub serves no ClusterProfile API (${clusterProfileGroup}): install ` +
          "deploy/crds/multicluster.x-k8s.io_clusterprofiles.yaml there, or register without --clusterprofile",
      })
    }
    return version
  })

export const profilePath = (
  version: ClusterProfileVersion,
  namespace: string,
  name?: string,
  subresource?: string,
) =>
  pathOf(
    { group: clusterProfileGroup, version, plural: clusterProfilePlural },
    { namespace, name, subresource },
  )

export interface ProfileObject {
  readonly metadata: { readonly annotations?: Readonly<Record<string, string>> }
  readonly spec?: { readonly clusterManager?: { readonly name?: string } }
}

/** A profile NAME another cluster manager owns is not ours to rewrite. */
export const isOurs = (profile: ProfileObject | undefined): boolean =>
  profile?.spec?.clusterManager?.name === registerClusterManager

/** Before anything changes: the API is served and ClusterProfile NAME is free or ours. */
export const preflightProfile = Effect.fnUntraced(function* (
  hub: Cluster,
  hubNamespace: string,
  name: string,
) {
  const version = yield* servedProfileVersion(hub)
  const existing = yield* hub.get<ProfileObject>(profilePath(version, hubNamespace, name))
  if (existing && !isOurs(existing)) {
    return yield* new UsageError({
      message:
        `ClusterProfile ${hubNamespace}/${name} belongs to cluster manager ` +
        `${q(existing.spec?.clusterManager?.name ?? "")}, not ${q(registerClusterManager)}; choose another NAME`,
    })
  }
  return { version, existing }
})

const accessProvider = (name: string, endpoint: MemberEndpoint) => ({
  name: secretReaderProvider,
  cluster: {
    server: endpoint.server,
    ...(endpoint.caData ? { "certificate-authority-data": endpoint.caData } : {}),
    ...(endpoint.tlsServerName ? { "tls-server-name": endpoint.tlsServerName } : {}),
    extensions: [{ name: execExtensionName, extension: { clusterName: name } }],
  },
})

/** The provider file entry the hub needs for these profiles (printed for the operator). */
export const providerFileEntry = (hubNamespace: string) =>
  JSON.stringify({
    providers: [
      {
        name: secretReaderProvider,
        execConfig: {
          apiVersion: "client.authentication.k8s.io/v1",
          command: "fleetcheck",
          args: ["credential", "secret-reader", "--namespace", hubNamespace],
          provideClusterInfo: true,
        },
      },
    ],
  })

export interface WriteProfile {
  readonly hub: Cluster
  readonly version: ClusterProfileVersion
  readonly existing: ProfileObject | undefined
  readonly name: string
  readonly hubNamespace: string
  readonly memberContext: string
  readonly labels: Readonly<Record<string, string>>
  readonly namespaces: ReadonlyArray<string> | undefined
  readonly endpoint: MemberEndpoint
  readonly token: string
  /** Whether the token Secret was there before (checked by the caller's preflight). */
  readonly secretExisted: boolean
}

/** The token Secret, then the ClusterProfile and its status; returns lines to print. */
export const writeProfile = Effect.fnUntraced(function* (w: WriteProfile) {
  const { hub, version, name, hubNamespace, endpoint } = w
  const annotations: Record<string, string> = { [memberContextAnnotation]: w.memberContext }
  if (w.namespaces) annotations[namespacesAnnotation] = w.namespaces.join(",")
  const provider = accessProvider(name, endpoint)
  const profile = {
    apiVersion: `${clusterProfileGroup}/${version}`,
    kind: "ClusterProfile",
    metadata: {
      name,
      namespace: hubNamespace,
      labels: { ...w.labels, [clusterManagerLabel]: registerClusterManager },
      annotations,
    },
    spec: { displayName: name, clusterManager: { name: registerClusterManager } },
    status: { accessProviders: [provider] },
  }
  // Refuse to write what the hub would refuse (a CA-less endpoint, a server the policy rejects).
  const verdict = checkClusterProfile({
    profile,
    providers: new Map([[secretReaderProvider, { command: "fleetcheck", provideClusterInfo: true }]]),
    policy: defaultPolicy,
    now: new Date(),
  })
  if (!verdict.ok) {
    return yield* new CommandError({
      message: `the hub would refuse this ClusterProfile: ${verdict.message}`,
    })
  }

  const secret: Manifest = {
    apiVersion: "v1",
    kind: "Secret",
    metadata: {
      name,
      namespace: hubNamespace,
      labels: { [profileCredentialLabel]: "true" },
      annotations: { [profileServerAnnotation]: endpoint.server },
    },
    type: "Opaque",
    data: { [tokenKey]: Buffer.from(w.token).toString("base64") },
  }
  yield* hub.apply(secret)
  const lines = [
    `  ${w.secretExisted ? "updated" : "created"} Secret ${hubNamespace}/${name} (the token, for ${endpoint.server} only)`,
  ]

  const { status: _, ...withoutStatus } = profile
  yield* hub.request({
    method: "PATCH",
    path: profilePath(version, hubNamespace, name),
    body: JSON.stringify(withoutStatus),
    contentType: "application/apply-patch+yaml",
    query: { fieldManager, force: "true" },
  })
  // Apply drops only what it set before; a scope set by someone else must not outlive --namespaces.
  if (!w.namespaces && w.existing?.metadata.annotations?.[namespacesAnnotation] !== undefined) {
    yield* hub.request({
      method: "PATCH",
      path: profilePath(version, hubNamespace, name),
      body: { metadata: { annotations: { [namespacesAnnotation]: null } } },
      contentType: "application/merge-patch+json",
    })
  }
  yield* hub.request({
    method: "PATCH",
    path: profilePath(version, hubNamespace, name, "status"),
    body: { status: { accessProviders: [provider] } },
    contentType: "application/merge-patch+json",
  })
  lines.push(
    `  ${w.existing ? "updated" : "created"} ClusterProfile ${hubNamespace}/${name} (${version}; access ` +
      `provider ${secretReaderProvider}${w.namespaces ? `; ${namespacesAnnotation}: ${w.namespaces.join(",")}` : "; all namespaces"})`,
  )
  return lines
})
