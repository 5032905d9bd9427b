// `fleetcheck register NAME --context CTX`: the hub's identity in a member (CRD, ServiceAccount,
// least-privilege RBAC from deploy/member, a TokenRequest token) and the registration Secret in the hub
// that carries it. Idempotent and safe to re-run after a partial failure; re-running renews the token.
//
//   preflight  both clusters reachable; hub namespace, scoped namespaces present; Secret NAME is ours
//              or absent; the member's identity is ours or free (or --force)
//   member     CRD (until served), Namespace (remembered when we created it), ServiceAccount, then
//              ClusterRole+Binding, or with --namespaces a Role+Binding per namespace; access from a
//              previous, wider registration is removed
//   token      TokenRequest → a kubeconfig with server, CA data and token inline, checked against the
//              hub's own policy before it is written
//   hub        the registration Secret, labelled and annotated (context, namespaces); with
//              --clusterprofile a ClusterProfile and its token Secret instead (./profile.ts)
import { readFileSync } from "node:fs"
import type { KubeConfig } from "@kubernetes/client-node"
import { Effect } from "effect"
import { stringify } from "yaml"
import {
  createdByAnnotation,
  memberContextAnnotation,
  namespacesAnnotation,
  profileCredentialLabel,
  registrationAnnotation,
  registrationKubeconfigKey,
  registrationLabel,
  secretReaderProvider,
} from "../../api/names.ts"
import { defaultHubConfig } from "../../hub/config.ts"
import { backupChecks, pathOf, serviceAccounts } from "../../kube/resources.ts"
import { checkKubeconfig, defaultPolicy } from "../../kubeconfig/policy.ts"
import { registerCommandUsage } from "../usage.ts"
import { parseRegisterArgs, type RegisterArgs, UsageError } from "./args.ts"
import {
  CommandError,
  hubContextOf,
  listOwned,
  loadKubeConfig,
  type MemberEndpoint,
  openCluster,
  out,
  q,
  runParsedCommand,
  waitFor,
} from "./cluster.ts"
import {
  crdName,
  createdByValue,
  describe,
  kindPath,
  loadBackupCheckCrd,
  loadIdentity,
  type Manifest,
  withAnnotation,
} from "./manifests.ts"
import { preflightProfile, providerFileEntry, writeProfile } from "./profile.ts"

// ---------------------------------------------------------------------------------------------------
// The kubeconfig the hub gets: server, CA data and token inline, one context; never a file path.

const memberEndpoint = (kc: KubeConfig, serverOverride: string | undefined) =>
  Effect.gen(function* () {
    const cluster = kc.getCurrentCluster()
    if (!cluster) return yield* new UsageError({ message: "the member context has no cluster" })
    if (cluster.skipTLSVerify && !cluster.caData && !cluster.caFile) {
      // The hub refuses insecure-skip-tls-verify by default; a registration it refuses helps nobody.
      return yield* new UsageError({
        message: `the member's cluster ${q(cluster.name)} uses insecure-skip-tls-verify; give it a certificate-authority`,
      })
    }
    const caFile = cluster.caFile
    const caData =
      cluster.caData ??
      (caFile
        ? yield* Effect.try({
            try: () => readFileSync(caFile).toString("base64"),
            catch: (e) =>
              new CommandError({
                message: `reading the member's certificate-authority ${q(caFile)}: ${e instanceof Error ? e.message : String(e)}`,
              }),
          })
        : undefined)
    return {
      server: serverOverride ?? cluster.server,
      caData,
      tlsServerName: cluster.tlsServerName,
    } satisfies MemberEndpoint
  })

export const buildKubeconfig = (name: string, endpoint: MemberEndpoint, token: string): string =>
  stringify({
    apiVersion: "v1",
    kind: "Config",
    clusters: [
      {
        name,
        cluster: {
          server: endpoint.server,
          ...(endpoint.caData ? { "certificate-authority-data": endpoint.caData } : {}),
          ...(endpoint.tlsServerName ? { "tls-server-name": endpoint.tlsServerName } : {}),
        },
      },
    ],
    users: [{ name: "fleetcheck-hub-identity", user: { token } }],
    contexts: [{ name, context: { cluster: name, user: "fleetcheck-hub-identity" } }],
    "current-context": name,
  })

// ---------------------------------------------------------------------------------------------------
// register

interface TokenRequestStatus {
  readonly status?: { readonly token?: string; readonly expirationTimestamp?: string }
}

const register = Effect.fnUntraced(function* (a: RegisterArgs) {
  const { name, memberContext, namespaces, hubNamespace } = a
  const hubContext = yield* hubContextOf(a.kubeconfig, a.hubContext)
  const memberKc = yield* loadKubeConfig(a.kubeconfig, memberContext, "member")
  const hubKc = yield* loadKubeConfig(a.kubeconfig, hubContext, "hub")
  const endpoint = yield* memberEndpoint(memberKc, a.memberServer)
  const identity = yield* loadIdentity
  const crd = yield* loadBackupCheckCrd
  const sa = identity.serviceAccount
  const saNamespace = sa.metadata.namespace ?? identity.namespace.metadata.name

  const member = yield* openCluster(`member ${memberContext}`, memberKc)
  const hub = yield* openCluster(`hub ${hubContext}`, hubKc)

  // Preflight, before anything changes: both clusters reachable, hub namespace and scoped namespaces present.
  yield* member.request({ method: "GET", path: "/version" })
  if ((yield* hub.get(kindPath("Namespace", hubNamespace))) === undefined) {
    return yield* new UsageError({
      message:
        `namespace ${q(hubNamespace)} does not exist in the hub (context ${hubContext}): install the hub ` +
        "first (deploy/hub) or pass --hub-namespace",
    })
  }
  const secretPath = kindPath("Secret", name, hubNamespace)
  const existingSecret = yield* hub.get<Manifest>(secretPath)
  const profile = a.clusterprofile ? yield* preflightProfile(hub, hubNamespace, name) : undefined
  if (profile) {
    if (existingSecret && existingSecret.metadata.labels?.[profileCredentialLabel] !== "true") {
      return yield* new UsageError({
        message:
          existingSecret.metadata.labels?.[registrationLabel] === "true"
            ? `${q(name)} is registered by Secret ${hubNamespace}/${name}: unregister it first, or ` +
              "register without --clusterprofile"
            : `Secret ${hubNamespace}/${name} exists in the hub and is not a ClusterProfile token; choose another NAME`,
      })
    }
  } else if (existingSecret && existingSecret.metadata.labels?.[registrationLabel] !== "true") {
    return yield* new UsageError({
      message:
        existingSecret.metadata.labels?.[profileCredentialLabel] === "true"
          ? `${q(name)} is registered through ClusterProfile ${hubNamespace}/${name}: pass --clusterprofile, ` +
            "or unregister it first"
          : `Secret ${hubNamespace}/${name} exists in the hub but is not a registration ` +
            `(no label ${registrationLabel}=true); choose another NAME`,
    })
  }
  for (const ns of namespaces ?? []) {
    if ((yield* member.get(kindPath("Namespace", ns))) === undefined) {
      return yield* new UsageError({
        message: `namespace ${q(ns)} does not exist in the member (context ${memberContext})`,
      })
    }
  }
  const saPath = kindPath("ServiceAccount", sa.metadata.name, saNamespace)
  const existingSa = yield* member.get<Manifest>(saPath)
  const owner = existingSa?.metadata.annotations?.[registrationAnnotation]
  if (owner !== undefined && owner !== name && !a.force) {
    return yield* new UsageError({
      message:
        `the member already holds the hub identity of registration ${q(owner)}; unregister it first, ` +
        "or pass --force to take it over (both registrations then share one identity)",
    })
  }

  yield* out(`member (context ${memberContext}, ${member.server}):`)
  yield* member.apply(crd)
  const established = yield* waitFor(
    30_000,
    Effect.gen(function* () {
      const o = yield* member.get<any>(kindPath("CustomResourceDefinition", crdName))
      if (!(o?.status?.conditions ?? []).some((c: any) => c.type === "Established" && c.status === "True"))
        return false
      // Established is not yet served: a new CRD answers 429 "storage is (re)initializing" for a while.
      return yield* member.request({ method: "GET", path: pathOf(backupChecks), query: { limit: "1" } }).pipe(
        Effect.as(true),
        Effect.orElseSucceed(() => false),
      )
    }),
  )
  yield* out(
    `  applied CustomResourceDefinition ${crdName}${established ? " (established and served)" : " (not yet served)"}`,
  )

  // Remember whether we created the namespace, so unregister removes it only then.
  const nsName = identity.namespace.metadata.name
  const nsPath = kindPath("Namespace", nsName)
  let existingNs = yield* member.get<Manifest>(nsPath)
  if (existingNs?.metadata.deletionTimestamp) {
    // A recent unregister is still removing it: nothing can be created there until it is gone.
    yield* out(`  waiting for Namespace ${nsName} to finish terminating`)
    const gone = yield* waitFor(60_000, member.get(nsPath).pipe(Effect.map((o) => o === undefined)))
    if (!gone)
      return yield* new CommandError({ message: `Namespace ${nsName} is still terminating in the member` })
    existingNs = undefined
  }
  const created = !existingNs || existingNs.metadata.annotations?.[createdByAnnotation] === createdByValue
  yield* member.apply(
    created ? withAnnotation(identity.namespace, createdByAnnotation, createdByValue) : identity.namespace,
  )
  yield* out(`  ${existingNs ? "applied" : "created"} Namespace ${nsName}`)
  yield* member.apply(withAnnotation(sa, registrationAnnotation, name))
  yield* out(`  applied ${describe({ ...sa, metadata: { ...sa.metadata, namespace: saNamespace } })}`)

  const mine = (o: Manifest) => withAnnotation(o, registrationAnnotation, name)
  if (namespaces === undefined) {
    for (const o of [...identity.clusterRole, ...identity.clusterBinding]) {
      yield* member.apply(mine(o))
      yield* out(`  applied ${describe(o)}`)
    }
    // A previous scoped registration: its Roles would only add confusion, remove them.
    for (const kind of ["RoleBinding", "Role"] as const) {
      for (const o of yield* listOwned(member, kind, name)) {
        if (yield* member.del(kindPath(kind, o.metadata.name, o.metadata.namespace)))
          yield* out(`  deleted ${describe(o)} (now cluster-wide)`)
      }
    }
  } else {
    for (const ns of namespaces) {
      for (const o of identity.role) {
        const scoped = mine({ ...o, metadata: { ...o.metadata, namespace: ns } })
        yield* member.apply(scoped)
        yield* out(`  applied ${describe(scoped)}`)
      }
    }
    // Least privilege: a previous cluster-wide binding or a dropped namespace must not keep access.
    for (const kind of ["RoleBinding", "Role"] as const) {
      for (const o of yield* listOwned(member, kind, name)) {
        if (namespaces.includes(o.metadata.namespace ?? "")) continue
        if (yield* member.del(kindPath(kind, o.metadata.name, o.metadata.namespace)))
          yield* out(`  deleted ${describe(o)} (namespace no longer listed)`)
      }
    }
    for (const o of [...identity.clusterBinding, ...identity.clusterRole]) {
      const current = yield* member.get<Manifest>(kindPath(o.kind, o.metadata.name))
      if (current?.metadata.annotations?.[registrationAnnotation] !== name) continue
      if (yield* member.del(kindPath(o.kind, o.metadata.name)))
        yield* out(`  deleted ${describe(o)} (now namespaced)`)
    }
  }

  const tr = yield* member.request<TokenRequestStatus | undefined>({
    method: "POST",
    path: pathOf(serviceAccounts, { namespace: saNamespace, name: sa.metadata.name, subresource: "token" }),
    body: {
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenRequest",
      spec: { expirationSeconds: a.tokenSeconds },
    },
  })
  const token = tr?.status?.token
  if (!token) return yield* new CommandError({ message: "the member's TokenRequest returned no token" })
  const expiry = new Date(tr?.status?.expirationTimestamp ?? Date.now() + a.tokenSeconds * 1000)
  const days = Math.round((expiry.getTime() - Date.now()) / 86_400_000)
  yield* out(
    `  requested a token for ServiceAccount ${saNamespace}/${sa.metadata.name}, valid until ` +
      `${expiry.toISOString()} (${days} days)`,
  )

  const renewal =
    `The hub engages ${q(name)} within seconds (kubectl get memberclusters ${name}). Its token expires ` +
    `${expiry.toISOString()}; the hub's CredentialsValid condition turns to CredentialsExpiringSoon ` +
    `${Math.round(defaultHubConfig.expiryWarningMs / 86_400_000)} days before (--credential-expiry-warning). Re-run this command to renew it ` +
    "(earlier tokens stay valid until they expire or until unregister deletes the ServiceAccount)."

  if (profile) {
    yield* out(`hub (context ${hubContext}, ${hub.server}):`)
    const lines = yield* writeProfile({
      hub,
      ...profile,
      name,
      hubNamespace,
      memberContext,
      labels: a.labels,
      namespaces,
      endpoint,
      token,
      secretExisted: existingSecret !== undefined,
    })
    for (const line of lines) yield* out(line)
    yield* out(
      `The hub reads ClusterProfiles only with --clusterprofile-provider-file naming ${secretReaderProvider}, e.g.\n` +
        `  ${providerFileEntry(hubNamespace)}\n` +
        "(command: the path of this fleetcheck; in the image, node with /app/dist/src/cli/main.js first in args).",
    )
    yield* out(renewal)
    return 0
  }

  const kubeconfig = buildKubeconfig(name, endpoint, token)
  const data = { [registrationKubeconfigKey]: Buffer.from(kubeconfig).toString("base64") }
  const annotations: Record<string, string> = { [memberContextAnnotation]: memberContext }
  if (namespaces) annotations[namespacesAnnotation] = namespaces.join(",")
  // Refuse to write what the hub would refuse (and catch a CA-less or malformed endpoint early).
  const verdict = checkKubeconfig({
    secretName: name,
    data,
    annotations,
    policy: defaultPolicy,
    now: new Date(),
  })
  if (!verdict.ok) {
    return yield* new CommandError({ message: `the hub would refuse this kubeconfig: ${verdict.message}` })
  }

  yield* out(`hub (context ${hubContext}, ${hub.server}):`)
  const labels = { [registrationLabel]: "true", ...a.labels }
  const secret: Manifest = {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name, namespace: hubNamespace, labels, annotations },
    type: "Opaque",
    data,
  }
  yield* hub.apply(secret)
  // Apply only drops annotations we set before; a scope set by someone else must not outlive --namespaces.
  if (!namespaces && existingSecret?.metadata.annotations?.[namespacesAnnotation] !== undefined) {
    yield* hub.request({
      method: "PATCH",
      path: secretPath,
      body: { metadata: { annotations: { [namespacesAnnotation]: null } } },
      contentType: "application/merge-patch+json",
    })
  }
  const labelText = Object.entries(labels)
    .map(([k, v]) => `${k}=${v}`)
    .join(",")
  yield* out(
    `  ${existingSecret ? "updated" : "created"} Secret ${hubNamespace}/${name} (labels ${labelText}` +
      `${namespaces ? `; ${namespacesAnnotation}: ${namespaces.join(",")}` : "; all namespaces"})`,
  )
  yield* out(renewal)
  return 0
})

/** `fleetcheck register ARGS`: the exit code (0 done or --help, 1 failed, 2 usage). */
export const runRegister = (argv: ReadonlyArray<string>): Promise<number> =>
  runParsedCommand(parseRegisterArgs(argv), registerCommandUsage, register)
