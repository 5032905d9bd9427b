// `fleetcheck register` and `fleetcheck unregister`: the hub's identity in a member (CRD, ServiceAccount,
// least-privilege RBAC from deploy/member, a TokenRequest token) and the registration Secret in the hub
// that carries it. Both are idempotent and safe to re-run after a partial failure.
import { existsSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { parseArgs } from "node:util"
import { KubeConfig } from "@kubernetes/client-node"
import { Effect, Exit, Scope } from "effect"
import { parseAllDocuments, stringify } from "yaml"
import { finalizerName, namespacesAnnotation, registrationLabel } from "../api/names.ts"
import {
  isConflict,
  isNotFound,
  type KubeClient,
  type KubeRequest,
  makeKubeClient,
  resourcePath,
} from "../kube/client.ts"
import {
  checkKubeconfig,
  defaultExpiryWindowMs,
  defaultPolicy,
  kubeconfigDataKey,
  parseNamespaces,
} from "../registration/kubeconfig-policy.ts"

export const fieldManager = "fleetcheck"
/** On every member object register applies: which registration owns it (unregister deletes only those). */
export const registrationAnnotation = "fleetcheck.io/registration"
/** On the hub Secret: the kubeconfig context register used for the member, so unregister NAME finds it. */
export const memberContextAnnotation = "fleetcheck.io/member-context"
/** On the member namespace when register created it, so unregister may remove it again. */
export const createdByAnnotation = "fleetcheck.io/created-by"
const createdByValue = "fleetcheck-register"
const defaultHubNamespace = "fleetcheck-system"
const defaultTokenSeconds = 365 * 24 * 60 * 60
const minTokenSeconds = 600 // the apiserver's minimum for TokenRequest
const identityComponent = "app.kubernetes.io/component=member-identity"
const crdName = "backupchecks.fleetcheck.io"
const bcListPath = "/apis/fleetcheck.io/v1alpha1/backupchecks"

export const registerUsage = `  fleetcheck register NAME --context CTX [--label k=v ...] [--namespaces a,b]
      [--kubeconfig FILE] [--hub-context CTX] [--hub-namespace NS] [--token-expiration 8760h]
      [--member-server URL] [--force]
                                 install the hub's identity (CRD, ServiceAccount, RBAC, token) in the
                                 member of context CTX and write the registration Secret NAME in the hub
                                 (the current context, or --hub-context); re-run to update or renew
  fleetcheck unregister NAME [--context CTX] [--timeout 60s] [--delete-crd]
      [--kubeconfig FILE] [--hub-context CTX] [--hub-namespace NS] [--force]
                                 delete the Secret, wait for the hub to let go, then remove the identity
                                 and any fleetcheck finalizer from the member (BackupChecks and CRD stay)
`

class UsageError extends Error {}

const out = (line: string) => process.stdout.write(`${line}\n`)
const warn = (line: string) => process.stderr.write(`warning: ${line}\n`)
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))
const q = (s: string) => JSON.stringify(s)

// ---------------------------------------------------------------------------------------------------
// Manifests, read at runtime from deploy/ (found upwards from this file: src/cli or dist/src/cli).

const deployDir = (): string => {
  let dir = new URL(".", import.meta.url).pathname
  for (let i = 0; i < 5; i++) {
    if (existsSync(join(dir, "deploy/member"))) return join(dir, "deploy")
    dir = join(dir, "..")
  }
  throw new Error(
    "cannot find deploy/member next to the fleetcheck sources; run fleetcheck from its checkout",
  )
}

type Obj = {
  apiVersion: string
  kind: string
  metadata: {
    name: string
    namespace?: string
    labels?: Record<string, string>
    annotations?: Record<string, string>
    [k: string]: unknown
  }
  [k: string]: unknown
}

/** Every document of a YAML file (comments and empty documents skipped). */
export const loadManifests = (file: string): Obj[] => {
  const docs = parseAllDocuments(readFileSync(file, "utf8"))
  const objs: Obj[] = []
  for (const doc of docs) {
    if (doc.errors.length > 0) throw new Error(`${file}: ${doc.errors[0]?.message}`)
    const js = doc.toJS() as Obj | null
    if (js && typeof js === "object" && typeof js.kind === "string") objs.push(js)
  }
  return objs
}

const memberManifests = (file: string): Obj[] => loadManifests(join(deployDir(), "member", file))

interface KindInfo {
  readonly group: string
  readonly version: string
  readonly plural: string
  readonly namespaced: boolean
}

const kinds: Record<string, KindInfo> = {
  CustomResourceDefinition: {
    group: "apiextensions.k8s.io",
    version: "v1",
    plural: "customresourcedefinitions",
    namespaced: false,
  },
  Namespace: { group: "", version: "v1", plural: "namespaces", namespaced: false },
  ServiceAccount: { group: "", version: "v1", plural: "serviceaccounts", namespaced: true },
  Secret: { group: "", version: "v1", plural: "secrets", namespaced: true },
  ClusterRole: {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    plural: "clusterroles",
    namespaced: false,
  },
  ClusterRoleBinding: {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    plural: "clusterrolebindings",
    namespaced: false,
  },
  Role: { group: "rbac.authorization.k8s.io", version: "v1", plural: "roles", namespaced: true },
  RoleBinding: {
    group: "rbac.authorization.k8s.io",
    version: "v1",
    plural: "rolebindings",
    namespaced: true,
  },
}

const kindInfo = (kind: string): KindInfo => {
  const info = kinds[kind]
  if (!info) throw new Error(`unexpected kind ${q(kind)} in deploy/member`)
  return info
}

const pathOf = (kind: string, name?: string, namespace?: string): string => {
  const info = kindInfo(kind)
  return resourcePath({ ...info, namespace: info.namespaced ? namespace : undefined, name })
}

const describe = (o: { kind: string; metadata: { name: string; namespace?: string | undefined } }) =>
  `${o.kind} ${o.metadata.namespace ? `${o.metadata.namespace}/` : ""}${o.metadata.name}`

// ---------------------------------------------------------------------------------------------------
// Clients: the project's REST client, driven from async code.

interface Api {
  readonly name: string
  readonly server: string
  call<T = any>(req: KubeRequest): Promise<T>
  /** undefined on 404. */
  get<T = any>(path: string): Promise<T | undefined>
  apply(obj: Obj): Promise<Obj>
  /** false when it was already gone. */
  del(path: string): Promise<boolean>
  close(): Promise<void>
}

const openApi = async (name: string, kubeConfig: KubeConfig): Promise<Api> => {
  const scope = await Effect.runPromise(Scope.make())
  const client: KubeClient = await Effect.runPromise(
    makeKubeClient({ cluster: name, kubeConfig }).pipe(Scope.provide(scope)),
  )
  const call = <T>(req: KubeRequest) => Effect.runPromise(client.request<T>(req))
  return {
    name,
    server: kubeConfig.getCurrentCluster()?.server ?? "",
    call,
    get: <T>(path: string) =>
      call<T>({ method: "GET", path }).catch((e) => {
        if (isNotFound(e)) return undefined
        throw e
      }),
    apply: (obj: Obj) =>
      call<Obj>({
        method: "PATCH",
        path: pathOf(obj.kind, obj.metadata.name, obj.metadata.namespace),
        body: JSON.stringify(obj),
        contentType: "application/apply-patch+yaml",
        query: { fieldManager, force: "true" },
      }),
    del: (path: string) =>
      call({ method: "DELETE", path, body: { propagationPolicy: "Background" } }).then(
        () => true,
        (e) => {
          if (isNotFound(e)) return false
          throw e
        },
      ),
    close: () => Effect.runPromise(Scope.close(scope, Exit.void)),
  }
}

const loadKubeConfig = (file: string | undefined, context: string, what: string): KubeConfig => {
  const kc = new KubeConfig()
  if (file) kc.loadFromFile(file)
  else kc.loadFromDefault()
  if (kc.getContextObject(context) === null) {
    const known = kc.getContexts().map((c) => c.name)
    throw new UsageError(
      `${what} context ${q(context)} is not in the kubeconfig` +
        (known.length ? ` (it has ${known.slice(0, 10).join(", ")})` : ""),
    )
  }
  kc.setCurrentContext(context)
  return kc
}

const currentContextOf = (file: string | undefined): string => {
  const kc = new KubeConfig()
  if (file) kc.loadFromFile(file)
  else kc.loadFromDefault()
  const ctx = kc.getCurrentContext()
  if (!ctx) throw new UsageError("the kubeconfig has no current-context: pass --hub-context")
  return ctx
}

// ---------------------------------------------------------------------------------------------------
// Argument helpers

const dns1123Subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/
const labelValue = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/
const labelName = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/

const checkName = (name: string | undefined, command: string): string => {
  if (!name) throw new UsageError(`${command} needs the member's NAME`)
  if (name.length > 253 || !dns1123Subdomain.test(name)) {
    throw new UsageError(`NAME ${q(name)} must be a DNS-1123 subdomain (lowercase, digits, '-', '.')`)
  }
  return name
}

export const parseLabels = (items: ReadonlyArray<string>): Record<string, string> => {
  const labels: Record<string, string> = {}
  for (const item of items) {
    const eq = item.indexOf("=")
    if (eq <= 0) throw new UsageError(`--label ${q(item)}: expected key=value`)
    const key = item.slice(0, eq)
    const value = item.slice(eq + 1)
    const slash = key.lastIndexOf("/")
    const prefix = slash >= 0 ? key.slice(0, slash) : undefined
    const name = slash >= 0 ? key.slice(slash + 1) : key
    if (
      name.length > 63 ||
      !labelName.test(name) ||
      (prefix !== undefined && (prefix.length > 253 || !dns1123Subdomain.test(prefix)))
    ) {
      throw new UsageError(`--label ${q(item)}: ${q(key)} is not a valid label key`)
    }
    if (value.length > 63 || !labelValue.test(value)) {
      throw new UsageError(`--label ${q(item)}: ${q(value)} is not a valid label value`)
    }
    if (key === registrationLabel) throw new UsageError(`--label may not set ${registrationLabel}`)
    labels[key] = value
  }
  return labels
}

/** Seconds from "3600", "90s", "30m", "8760h" or "365d". */
export const parseDurationSeconds = (s: string, flag: string): number => {
  const m = /^(\d+)(s|m|h|d)?$/.exec(s.trim())
  if (!m) throw new UsageError(`${flag} ${q(s)}: expected a duration like 3600, 90s, 30m, 8760h or 365d`)
  const unit = { s: 1, m: 60, h: 3600, d: 86400 }[(m[2] ?? "s") as "s" | "m" | "h" | "d"]
  return Number(m[1]) * unit
}

const errorText = (e: unknown): string => {
  if (e && typeof e === "object" && "_tag" in e && "message" in e) {
    const k = e as { _tag: string; message: string; cluster?: string; method?: string; path?: string }
    return `${k.cluster ?? "?"}: ${k.method ?? ""} ${k.path ?? ""}: ${k.message}`
  }
  return e instanceof Error ? e.message : String(e)
}

const run = async (body: () => Promise<number>): Promise<number> => {
  try {
    return await body()
  } catch (e) {
    process.stderr.write(`fleetcheck: ${errorText(e)}\n`)
    const parseError = String((e as { code?: unknown } | null)?.code ?? "").startsWith("ERR_PARSE_ARGS")
    return e instanceof UsageError || parseError ? 2 : 1
  }
}

const waitFor = async (timeoutMs: number, probe: () => Promise<boolean>): Promise<boolean> => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (await probe()) return true
    if (Date.now() >= deadline) return false
    await sleep(250)
  }
}

const withAnnotation = (obj: Obj, key: string, value: string): Obj => ({
  ...obj,
  metadata: { ...obj.metadata, annotations: { ...obj.metadata.annotations, [key]: value } },
})

// ---------------------------------------------------------------------------------------------------
// The kubeconfig the hub gets: server, CA data and token inline, one context; never a file path.

interface MemberEndpoint {
  readonly server: string
  readonly caData: string | undefined
  readonly tlsServerName: string | undefined
}

const memberEndpoint = (kc: KubeConfig, serverOverride: string | undefined): MemberEndpoint => {
  const cluster = kc.getCurrentCluster()
  if (!cluster) throw new UsageError("the member context has no cluster")
  if (cluster.skipTLSVerify && !cluster.caData && !cluster.caFile) {
    // The hub refuses insecure-skip-tls-verify by default; a registration it refuses helps nobody.
    throw new UsageError(
      `the member's cluster ${q(cluster.name)} uses insecure-skip-tls-verify; give it a certificate-authority`,
    )
  }
  let caData = cluster.caData
  if (!caData && cluster.caFile) caData = readFileSync(cluster.caFile).toString("base64")
  return {
    server: serverOverride ?? cluster.server,
    caData,
    tlsServerName: cluster.tlsServerName,
  }
}

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

interface Identity {
  readonly namespace: Obj
  readonly serviceAccount: Obj
  readonly clusterRole: Obj[]
  readonly clusterBinding: Obj[]
  /** Role and RoleBinding templates, applied once per namespace. */
  readonly role: Obj[]
}

const loadIdentity = (): Identity => {
  const one = (file: string, kind: string): Obj => {
    const o = memberManifests(file).find((x) => x.kind === kind)
    if (!o) throw new Error(`deploy/member/${file} has no ${kind}`)
    return o
  }
  return {
    namespace: one("namespace.yaml", "Namespace"),
    serviceAccount: one("serviceaccount.yaml", "ServiceAccount"),
    clusterRole: memberManifests("clusterrole.yaml"),
    clusterBinding: memberManifests("clusterrolebinding.yaml"),
    role: memberManifests("role.yaml"),
  }
}

const listOwned = async (api: Api, kind: "Role" | "RoleBinding", name: string): Promise<Obj[]> => {
  const list = await api.call<{ items: Obj[] }>({
    method: "GET",
    path: pathOf(kind),
    query: { labelSelector: identityComponent },
  })
  return list.items.filter((o) => o.metadata.annotations?.[registrationAnnotation] === name)
}

export const runRegister = (args: ReadonlyArray<string>): Promise<number> =>
  run(async () => {
    const { values, positionals } = parseArgs({
      args: [...args],
      allowPositionals: true,
      options: {
        context: { type: "string" },
        label: { type: "string", multiple: true, default: [] },
        namespaces: { type: "string" },
        kubeconfig: { type: "string" },
        "hub-context": { type: "string" },
        "hub-namespace": { type: "string", default: defaultHubNamespace },
        "token-expiration": { type: "string" },
        "member-server": { type: "string" },
        force: { type: "boolean", default: false },
      },
    })
    if (positionals.length > 1)
      throw new UsageError(`unexpected arguments: ${positionals.slice(1).join(" ")}`)
    const name = checkName(positionals[0], "register")
    const memberContext = values.context
    if (!memberContext) throw new UsageError("register needs --context: the member's kubeconfig context")
    const labels = parseLabels(values.label)
    let namespaces: string[] | undefined
    if (values.namespaces !== undefined) {
      const parsed = parseNamespaces(values.namespaces)
      if (!parsed.ok) throw new UsageError(`--namespaces ${parsed.message}`)
      namespaces = parsed.namespaces
    }
    const tokenSeconds =
      values["token-expiration"] === undefined
        ? defaultTokenSeconds
        : parseDurationSeconds(values["token-expiration"], "--token-expiration")
    if (tokenSeconds < minTokenSeconds) throw new UsageError("--token-expiration must be at least 10m")
    const hubNamespace = values["hub-namespace"]
    const hubContext = values["hub-context"] ?? currentContextOf(values.kubeconfig)
    const memberKc = loadKubeConfig(values.kubeconfig, memberContext, "member")
    const hubKc = loadKubeConfig(values.kubeconfig, hubContext, "hub")
    const endpoint = memberEndpoint(memberKc, values["member-server"])
    const identity = loadIdentity()
    const crd = loadManifests(join(deployDir(), "crds/fleetcheck.io_backupchecks.yaml"))[0]
    if (!crd) throw new Error("deploy/crds/fleetcheck.io_backupchecks.yaml is empty")
    const sa = identity.serviceAccount
    const saNamespace = sa.metadata.namespace ?? identity.namespace.metadata.name

    const member = await openApi(`member ${memberContext}`, memberKc)
    const hub = await openApi(`hub ${hubContext}`, hubKc)
    try {
      // Preflight, before anything changes: both clusters reachable, hub namespace and scoped namespaces present.
      await member.call({ method: "GET", path: "/version" })
      if (!(await hub.get(pathOf("Namespace", hubNamespace)))) {
        throw new UsageError(
          `namespace ${q(hubNamespace)} does not exist in the hub (context ${hubContext}): install the hub ` +
            "first (deploy/hub) or pass --hub-namespace",
        )
      }
      const secretPath = pathOf("Secret", name, hubNamespace)
      const existingSecret = await hub.get<Obj>(secretPath)
      if (existingSecret && existingSecret.metadata.labels?.[registrationLabel] !== "true") {
        throw new UsageError(
          `Secret ${hubNamespace}/${name} exists in the hub but is not a registration ` +
            `(no label ${registrationLabel}=true); choose another NAME`,
        )
      }
      for (const ns of namespaces ?? []) {
        if (!(await member.get(pathOf("Namespace", ns)))) {
          throw new UsageError(`namespace ${q(ns)} does not exist in the member (context ${memberContext})`)
        }
      }
      const existingSa = await member.get<Obj>(pathOf("ServiceAccount", sa.metadata.name, saNamespace))
      const owner = existingSa?.metadata.annotations?.[registrationAnnotation]
      if (owner !== undefined && owner !== name && !values.force) {
        throw new UsageError(
          `the member already holds the hub identity of registration ${q(owner)}; unregister it first, ` +
            "or pass --force to take it over (both registrations then share one identity)",
        )
      }

      out(`member (context ${memberContext}, ${member.server}):`)
      await member.apply(crd)
      const established = await waitFor(30_000, async () => {
        const o = await member.get<any>(pathOf("CustomResourceDefinition", crdName))
        if (!(o?.status?.conditions ?? []).some((c: any) => c.type === "Established" && c.status === "True"))
          return false
        // Established is not yet served: a new CRD answers 429 "storage is (re)initializing" for a while.
        return member.call({ method: "GET", path: bcListPath, query: { limit: "1" } }).then(
          () => true,
          () => false,
        )
      })
      out(
        `  applied CustomResourceDefinition ${crdName}${established ? " (established and served)" : " (not yet served)"}`,
      )

      // Remember whether we created the namespace, so unregister removes it only then.
      const nsPath = pathOf("Namespace", identity.namespace.metadata.name)
      let existingNs = await member.get<Obj>(nsPath)
      if (existingNs?.metadata.deletionTimestamp) {
        // A recent unregister is still removing it: nothing can be created there until it is gone.
        out(`  waiting for Namespace ${identity.namespace.metadata.name} to finish terminating`)
        if (!(await waitFor(60_000, async () => (await member.get(nsPath)) === undefined))) {
          throw new Error(`Namespace ${identity.namespace.metadata.name} is still terminating in the member`)
        }
        existingNs = undefined
      }
      const created = !existingNs || existingNs.metadata.annotations?.[createdByAnnotation] === createdByValue
      await member.apply(
        created
          ? withAnnotation(identity.namespace, createdByAnnotation, createdByValue)
          : identity.namespace,
      )
      out(`  ${existingNs ? "applied" : "created"} Namespace ${identity.namespace.metadata.name}`)
      await member.apply(withAnnotation(sa, registrationAnnotation, name))
      out(`  applied ${describe({ ...sa, metadata: { ...sa.metadata, namespace: saNamespace } })}`)

      const mine = (o: Obj) => withAnnotation(o, registrationAnnotation, name)
      if (namespaces === undefined) {
        for (const o of [...identity.clusterRole, ...identity.clusterBinding]) {
          await member.apply(mine(o))
          out(`  applied ${describe(o)}`)
        }
        // A previous scoped registration: its Roles would only add confusion, remove them.
        for (const kind of ["RoleBinding", "Role"] as const) {
          for (const o of await listOwned(member, kind, name)) {
            if (await member.del(pathOf(kind, o.metadata.name, o.metadata.namespace)))
              out(`  deleted ${describe(o)} (now cluster-wide)`)
          }
        }
      } else {
        for (const ns of namespaces) {
          for (const o of identity.role) {
            const scoped = mine({ ...o, metadata: { ...o.metadata, namespace: ns } })
            await member.apply(scoped)
            out(`  applied ${describe(scoped)}`)
          }
        }
        // Least privilege: a previous cluster-wide binding or a dropped namespace must not keep access.
        for (const kind of ["RoleBinding", "Role"] as const) {
          for (const o of await listOwned(member, kind, name)) {
            if (namespaces.includes(o.metadata.namespace ?? "")) continue
            if (await member.del(pathOf(kind, o.metadata.name, o.metadata.namespace)))
              out(`  deleted ${describe(o)} (namespace no longer listed)`)
          }
        }
        for (const o of [...identity.clusterBinding, ...identity.clusterRole]) {
          const current = await member.get<Obj>(pathOf(o.kind, o.metadata.name))
          if (current?.metadata.annotations?.[registrationAnnotation] !== name) continue
          if (await member.del(pathOf(o.kind, o.metadata.name)))
            out(`  deleted ${describe(o)} (now namespaced)`)
        }
      }

      const tr = await member.call<any>({
        method: "POST",
        path: `${pathOf("ServiceAccount", sa.metadata.name, saNamespace)}/token`,
        body: {
          apiVersion: "authentication.k8s.io/v1",
          kind: "TokenRequest",
          spec: { expirationSeconds: tokenSeconds },
        },
      })
      const token: string | undefined = tr?.status?.token
      if (!token) throw new Error("the member's TokenRequest returned no token")
      const expiry = new Date(tr.status.expirationTimestamp)
      const days = Math.round((expiry.getTime() - Date.now()) / 86_400_000)
      out(
        `  requested a token for ServiceAccount ${saNamespace}/${sa.metadata.name}, valid until ` +
          `${expiry.toISOString()} (${days} days)`,
      )

      const kubeconfig = buildKubeconfig(name, endpoint, token)
      const data = { [kubeconfigDataKey]: Buffer.from(kubeconfig).toString("base64") }
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
      if (!verdict.ok) throw new Error(`the hub would refuse this kubeconfig: ${verdict.message}`)

      out(`hub (context ${hubContext}, ${hub.server}):`)
      const secret: Obj = {
        apiVersion: "v1",
        kind: "Secret",
        metadata: {
          name,
          namespace: hubNamespace,
          labels: { [registrationLabel]: "true", ...labels },
          annotations,
        },
        type: "Opaque",
        data,
      }
      await hub.apply(secret)
      // Apply only drops annotations we set before; a scope set by someone else must not outlive --namespaces.
      if (!namespaces && existingSecret?.metadata.annotations?.[namespacesAnnotation] !== undefined) {
        await hub.call({
          method: "PATCH",
          path: secretPath,
          body: { metadata: { annotations: { [namespacesAnnotation]: null } } },
          contentType: "application/merge-patch+json",
        })
      }
      const labelText = Object.entries(secret.metadata.labels ?? {})
        .map(([k, v]) => `${k}=${v}`)
        .join(",")
      out(
        `  ${existingSecret ? "updated" : "created"} Secret ${hubNamespace}/${name} (labels ${labelText}` +
          `${namespaces ? `; ${namespacesAnnotation}: ${namespaces.join(",")}` : "; all namespaces"})`,
      )
      out(
        `The hub engages ${q(name)} within seconds (kubectl get memberclusters ${name}). Its token expires ` +
          `${expiry.toISOString()}; the hub's CredentialsValid condition turns to CredentialsExpiringSoon ` +
          `${Math.round(defaultExpiryWindowMs / 86_400_000)} days before. Re-run this command to renew it ` +
          "(earlier tokens stay valid until they expire or until unregister deletes the ServiceAccount).",
      )
      return 0
    } finally {
      await member.close()
      await hub.close()
    }
  })

// ---------------------------------------------------------------------------------------------------
// unregister

/** Removes the hub's finalizer from every BackupCheck in the member; returns how many it released. */
const releaseFinalizers = async (member: Api): Promise<number> => {
  const list = await member.get<{ items: Obj[] }>(bcListPath)
  if (!list) return 0 // no CRD: no BackupChecks
  let released = 0
  for (const item of list.items) {
    let obj: Obj | undefined = item
    const path = `/apis/fleetcheck.io/v1alpha1/namespaces/${obj.metadata.namespace}/backupchecks/${obj.metadata.name}`
    for (let attempt = 0; obj && attempt < 5; attempt++) {
      const finalizers = (obj.metadata.finalizers as string[] | undefined) ?? []
      if (!finalizers.includes(finalizerName)) break
      try {
        // resourceVersion makes it a compare-and-swap: another writer's finalizer is never dropped.
        await member.call({
          method: "PATCH",
          path,
          contentType: "application/merge-patch+json",
          body: {
            metadata: {
              resourceVersion: obj.metadata.resourceVersion,
              finalizers: finalizers.filter((f) => f !== finalizerName),
            },
          },
        })
        released++
        break
      } catch (e) {
        if (isNotFound(e)) break
        if (!isConflict(e)) throw e
        obj = await member.get<Obj>(path)
      }
    }
  }
  return released
}

export const runUnregister = (args: ReadonlyArray<string>): Promise<number> =>
  run(async () => {
    const { values, positionals } = parseArgs({
      args: [...args],
      allowPositionals: true,
      options: {
        context: { type: "string" },
        kubeconfig: { type: "string" },
        "hub-context": { type: "string" },
        "hub-namespace": { type: "string", default: defaultHubNamespace },
        timeout: { type: "string", default: "60s" },
        "delete-crd": { type: "boolean", default: false },
        force: { type: "boolean", default: false },
      },
    })
    if (positionals.length > 1)
      throw new UsageError(`unexpected arguments: ${positionals.slice(1).join(" ")}`)
    const name = checkName(positionals[0], "unregister")
    const timeoutMs = parseDurationSeconds(values.timeout, "--timeout") * 1000
    const hubNamespace = values["hub-namespace"]
    const hubContext = values["hub-context"] ?? currentContextOf(values.kubeconfig)
    const hubKc = loadKubeConfig(values.kubeconfig, hubContext, "hub")
    const identity = loadIdentity()
    const sa = identity.serviceAccount
    const saNamespace = sa.metadata.namespace ?? identity.namespace.metadata.name

    const hub = await openApi(`hub ${hubContext}`, hubKc)
    let member: Api | undefined
    try {
      const secretPath = pathOf("Secret", name, hubNamespace)
      const secret = await hub.get<Obj>(secretPath)
      if (secret && secret.metadata.labels?.[registrationLabel] !== "true") {
        throw new UsageError(
          `Secret ${hubNamespace}/${name} in the hub is not a registration; not touching it`,
        )
      }
      const memberContext = values.context ?? secret?.metadata.annotations?.[memberContextAnnotation]
      if (!memberContext) {
        throw new UsageError(
          secret
            ? "the Secret does not say which context registered it: pass --context (the member's context)"
            : `no registration ${q(name)} in the hub; pass --context to clean up the member anyway`,
        )
      }
      const memberKc = loadKubeConfig(values.kubeconfig, memberContext, "member")
      member = await openApi(`member ${memberContext}`, memberKc)
      await member.call({ method: "GET", path: "/version" })

      out(`hub (context ${hubContext}, ${hub.server}):`)
      if (await hub.del(secretPath)) out(`  deleted Secret ${hubNamespace}/${name}`)
      else out(`  Secret ${hubNamespace}/${name} already gone`)
      // The hub disengages the member, releases its finalizers there, then deletes the MemberCluster.
      const mcPath = `/apis/fleetcheck.io/v1alpha1/memberclusters/${encodeURIComponent(name)}`
      const gone = await waitFor(timeoutMs, async () => (await hub.get(mcPath)) === undefined)
      if (gone) out(`  MemberCluster ${name} is gone: the hub has let go of the member`)
      else
        warn(
          `MemberCluster ${name} still exists after ${values.timeout}: is the hub running? Cleaning up ` +
            "the member directly (it may keep a stale MemberCluster until it next runs)",
        )

      out(`member (context ${memberContext}, ${member.server}):`)
      const existingSa = await member.get<Obj>(pathOf("ServiceAccount", sa.metadata.name, saNamespace))
      const owner = existingSa?.metadata.annotations?.[registrationAnnotation]
      if (existingSa && owner !== name && !values.force) {
        warn(
          `the member's hub identity belongs to registration ${q(owner ?? "(none)")}, not ${q(name)}: left ` +
            "in place (pass --force to remove it anyway)",
        )
        return 0
      }
      if (!existingSa && !values.force) {
        out("  no hub identity here (already unregistered); pass --force to release finalizers anyway")
        return 0
      }
      const mine = (o: Obj | undefined) =>
        o !== undefined && (values.force || o.metadata.annotations?.[registrationAnnotation] === name)

      // Bindings first: from here on no hub can act in the member, so no finalizer comes back.
      for (const o of identity.clusterBinding) {
        if (!mine(await member.get<Obj>(pathOf(o.kind, o.metadata.name)))) continue
        if (await member.del(pathOf(o.kind, o.metadata.name))) out(`  deleted ${describe(o)}`)
      }
      for (const o of await listOwned(member, "RoleBinding", name)) {
        if (await member.del(pathOf("RoleBinding", o.metadata.name, o.metadata.namespace)))
          out(`  deleted ${describe(o)}`)
      }
      const released = await releaseFinalizers(member)
      out(
        released > 0
          ? `  removed finalizer ${finalizerName} from ${released} BackupCheck(s) the hub had not released`
          : `  no BackupCheck carries ${finalizerName}`,
      )
      if (await member.del(pathOf("ServiceAccount", sa.metadata.name, saNamespace)))
        out(
          `  deleted ServiceAccount ${saNamespace}/${sa.metadata.name} (every token issued for it is now invalid)`,
        )
      for (const o of identity.clusterRole) {
        if (!mine(await member.get<Obj>(pathOf(o.kind, o.metadata.name)))) continue
        if (await member.del(pathOf(o.kind, o.metadata.name))) out(`  deleted ${describe(o)}`)
      }
      for (const o of await listOwned(member, "Role", name)) {
        if (await member.del(pathOf("Role", o.metadata.name, o.metadata.namespace)))
          out(`  deleted ${describe(o)}`)
      }
      await removeNamespaceIfOurs(member, hub, identity.namespace.metadata.name, hubNamespace)

      if (values["delete-crd"]) {
        if (await member.del(pathOf("CustomResourceDefinition", crdName)))
          out(`  deleted CustomResourceDefinition ${crdName} (and with it every BackupCheck in the member)`)
      } else {
        out(
          `  left CustomResourceDefinition ${crdName} and the BackupChecks in place (--delete-crd removes ` +
            "the CRD and every BackupCheck with it)",
        )
      }
      return 0
    } finally {
      await member?.close()
      await hub.close()
    }
  })

/** Deletes the identity's namespace only when register created it and nothing else lives there. */
const removeNamespaceIfOurs = async (member: Api, hub: Api, ns: string, hubNamespace: string) => {
  const obj = await member.get<Obj>(pathOf("Namespace", ns))
  if (!obj || obj.metadata.annotations?.[createdByAnnotation] !== createdByValue) return
  if (member.server === hub.server && ns === hubNamespace) return
  const names = async (path: string) =>
    ((await member.get<{ items: Obj[] }>(path))?.items ?? []).map((o) => o.metadata.name)
  const others = [
    ...(await names(`/api/v1/namespaces/${ns}/serviceaccounts`)).filter((n) => n !== "default"),
    ...(await names(`/api/v1/namespaces/${ns}/configmaps`)).filter((n) => n !== "kube-root-ca.crt"),
    ...(await names(`/api/v1/namespaces/${ns}/secrets`)),
    ...(await names(`/api/v1/namespaces/${ns}/pods`)),
    ...(await names(`/apis/coordination.k8s.io/v1/namespaces/${ns}/leases`)),
  ]
  if (others.length > 0) {
    out(`  left Namespace ${ns}: it holds other objects (${others.slice(0, 5).join(", ")})`)
    return
  }
  if (await member.del(pathOf("Namespace", ns))) out(`  deleted Namespace ${ns} (register had created it)`)
}
