// The checks the hub applies to every registration Secret before it engages a member (SPEC §5
// "Registration", §7). Pure: no file reads, no processes, no clock (now is passed in), so every rule is
// unit-tested. A refused Secret gets a stable reason for its MemberCluster condition and a message that
// names the Secret and fields, never values: tokens, keys and passwords must not reach status or logs.
//
// The opt-in flags open one door each, not every door near it:
//   allowFilePaths             absolute paths only, and never under /var/run/secrets or /run/secrets (the
//                              hub's own ServiceAccount token and mounted secrets: a Secret could otherwise
//                              send the hub's identity to a server of its choosing), /proc, /dev or /sys.
//                              Paths are checked as written, after resolving "." and "..": the policy reads
//                              no files, so a symlink elsewhere that leads into those trees is not seen;
//                              allow file paths only where the operator controls the hub's file system.
//   allowInsecureSkipTlsVerify insecure-skip-tls-verify only: never together with a certificate authority
//                              (client-go refuses that pair too), and never a plain http:// server, which
//                              is refused whatever the policy says.
//   allowExec, allowAuthProvider  as named; gcp/azure cmd-path and exec auth-providers need allowExec too.
import { createHash, createPrivateKey, type KeyObject, X509Certificate } from "node:crypto"
import { posix } from "node:path"
import { type Cluster, type Context, KubeConfig, type User } from "@kubernetes/client-node"
import { Data } from "effect"
import { type DocumentOptions, type ParseOptions, parseAllDocuments, type SchemaOptions } from "yaml"
import * as z from "zod"
import { contextAnnotation, namespacesAnnotation } from "../api/names.ts"

/** The Secret data key that holds the kubeconfig (SPEC §2). */
export const kubeconfigDataKey = "kubeconfig"
/** The data key of a Cluster API `<cluster>-kubeconfig` Secret. */
export const capiKubeconfigDataKey = "value"
/** A Secret holds at most 1 MiB in total, so a larger kubeconfig is garbage or an attack. */
export const maxKubeconfigBytes = 1024 * 1024
/** Anchors and aliases are legal YAML; a handful is plenty for a kubeconfig, and the bound stops bombs. */
export const maxYamlAliasCount = 50
/** Each namespace costs the member engine its own watches; beyond this a cluster-wide identity fits. */
export const maxNamespaces = 100

export interface KubeconfigPolicy {
  /** Run `exec` credential plugins, and auth-provider commands (`cmd-path`, `exec`). Default false. */
  readonly allowExec: boolean
  /** Use `auth-provider` users (oidc, gcp, azure, tokenFile). Default false. */
  readonly allowAuthProvider: boolean
  /**
   * Read files on the hub named by the kubeconfig (CA, client cert and key, token files), except under
   * /var/run/secrets, /run/secrets, /proc, /dev and /sys. Default false.
   */
  readonly allowFilePaths: boolean
  /** Accept `insecure-skip-tls-verify: true` (without a CA; plain http is never accepted). Default false. */
  readonly allowInsecureSkipTlsVerify: boolean
}

export const defaultPolicy: KubeconfigPolicy = {
  allowExec: false,
  allowAuthProvider: false,
  allowFilePaths: false,
  allowInsecureSkipTlsVerify: false,
}

/**
 * Every reason a Secret is refused; all match metav1.Condition's reason pattern. A kubeconfig refused
 * for several reasons reports the first of them in the order of refusalOrder below, and lists all.
 */
export const kubeconfigRefusalReasons = {
  KubeconfigMissing: "KubeconfigMissing",
  KubeconfigInvalid: "KubeconfigInvalid",
  /** Valid kubeconfig, but a feature the hub's client cannot honour (proxy-url, group impersonation, ...). */
  KubeconfigUnsupported: "KubeconfigUnsupported",
  ExecPluginRefused: "ExecPluginRefused",
  AuthProviderRefused: "AuthProviderRefused",
  FilePathRefused: "FilePathRefused",
  InsecureSkipTLSVerifyRefused: "InsecureSkipTLSVerifyRefused",
  /** A plain http:// server: credentials would travel in clear text, whatever the policy allows. */
  PlaintextServerRefused: "PlaintextServerRefused",
  /** A server URL with a path, query or fragment: one cluster must have one URL (SPEC §12). */
  ServerURLRefused: "ServerURLRefused",
  ContextAmbiguous: "ContextAmbiguous",
  ContextNotFound: "ContextNotFound",
  ClusterNotFound: "ClusterNotFound",
  UserNotFound: "UserNotFound",
  CredentialsMissing: "CredentialsMissing",
  CredentialsExpired: "CredentialsExpired",
  NamespacesInvalid: "NamespacesInvalid",
} as const
export type KubeconfigRefusalReason = (typeof kubeconfigRefusalReasons)[keyof typeof kubeconfigRefusalReasons]

/**
 * Which reason a kubeconfig with several refusals shows: what cannot be read at all first, then what
 * would put the hub or its credentials at risk, then what it cannot honour, then what is missing.
 */
export const refusalOrder: ReadonlyArray<KubeconfigRefusalReason> = [
  "KubeconfigMissing",
  "KubeconfigInvalid",
  "PlaintextServerRefused",
  "ExecPluginRefused",
  "AuthProviderRefused",
  "FilePathRefused",
  "InsecureSkipTLSVerifyRefused",
  "ServerURLRefused",
  "KubeconfigUnsupported",
  "ContextAmbiguous",
  "ContextNotFound",
  "ClusterNotFound",
  "UserNotFound",
  "CredentialsMissing",
  "CredentialsExpired",
  "NamespacesInvalid",
]

export interface KubeconfigAccepted {
  readonly ok: true
  /** Holds only the chosen cluster, user and context, with the current context set. */
  readonly kubeConfig: KubeConfig
  /**
   * sha256 hex over a canonical JSON of what the engine is built from: the chosen cluster, user and
   * context (known fields only) and the namespace scope. Comments, formatting, key order, unused
   * contexts, unknown fields, labels and other data keys do not change it; equal hash, no rebuild.
   */
  readonly hash: string
  /**
   * sha256 hex over what identifies the connection: the cluster's fields (server, CA, TLS server name,
   * skip-verify), the context's namespace and the namespace scope. Equal connection hash, different hash:
   * only the credential changed, and the member's client swaps it in place (no rebuild, no relist).
   */
  readonly connectionHash: string
  /** The chosen cluster's server URL, without a trailing slash (as client-node stores it). */
  readonly server: string
  readonly contextName: string
  readonly clusterName: string
  readonly userName: string
  /** Earliest of the bearer token's JWT `exp` and the client certificate's notAfter, when known. */
  readonly credentialExpiry?: Date | undefined
  /** From the namespaces annotation, deduplicated, in the order given; undefined means cluster-wide. */
  readonly namespaces?: string[] | undefined
}

export interface KubeconfigRefused {
  readonly ok: false
  /** The first of `reasons` in refusalOrder. */
  readonly reason: KubeconfigRefusalReason
  /** Every reason found, in refusalOrder, each once. */
  readonly reasons: ReadonlyArray<KubeconfigRefusalReason>
  /** Names the Secret and the offending fields, every refusal found; never contains credential values. */
  readonly message: string
}

export type KubeconfigCheck = KubeconfigAccepted | KubeconfigRefused

export interface KubeconfigCheckInput {
  readonly secretName: string
  /** Secret.data: base64 values. */
  readonly data: Readonly<Record<string, string>> | undefined
  readonly annotations?: Readonly<Record<string, string>> | undefined
  readonly policy: KubeconfigPolicy
  readonly now: Date
  /** Where in `data` the kubeconfig is; default kubeconfigDataKey (a Cluster API Secret: "value"). */
  readonly dataKey?: string
  /** What messages call the registering object; default Secret. */
  readonly kind?: "Secret" | "ClusterProfile"
}

// ---------------------------------------------------------------------------------------------------
// Shape (kubeconfig v1). Unknown fields are stripped (tolerated, never used). Credential plugins are
// `unknown` here so that a refused plugin is reported as refused, not as malformed.

/** Go treats null and "" as unset; so do we. */
const optString = z.string().nullish()
const optBool = z.boolean().nullish()

const ClusterFieldsSchema = z.object({
  server: z.string().min(1),
  "certificate-authority-data": optString,
  "certificate-authority": optString,
  "insecure-skip-tls-verify": optBool,
  "tls-server-name": optString,
  "proxy-url": optString,
})

const UserFieldsSchema = z.object({
  token: optString,
  tokenFile: optString,
  "token-file": optString,
  "client-certificate-data": optString,
  "client-certificate": optString,
  "client-key-data": optString,
  "client-key": optString,
  username: optString,
  password: optString,
  as: optString,
  "as-uid": optString,
  "as-groups": z.array(z.string()).nullish(),
  "as-user-extra": z.record(z.string(), z.array(z.string())).nullish(),
  exec: z.unknown().optional(),
  "auth-provider": z.unknown().optional(),
})

const ContextFieldsSchema = z.object({
  cluster: z.string().min(1),
  user: optString,
  namespace: optString,
})

const KubeconfigSchema = z.object({
  apiVersion: z.literal("v1").nullish(),
  kind: z.literal("Config").nullish(),
  clusters: z.array(z.object({ name: z.string().min(1), cluster: ClusterFieldsSchema })).nullish(),
  users: z.array(z.object({ name: z.string().min(1), user: UserFieldsSchema.nullish() })).nullish(),
  contexts: z.array(z.object({ name: z.string().min(1), context: ContextFieldsSchema })).nullish(),
})

const ExecSchema = z.object({
  command: z.string().min(1),
  args: z.array(z.string()).nullish(),
  env: z.array(z.object({ name: z.string().min(1), value: z.string() })).nullish(),
  apiVersion: optString,
})

const AuthProviderSchema = z.object({
  name: z.string().min(1),
  config: z.record(z.string(), z.unknown()).nullish(),
})

type ClusterFields = z.output<typeof ClusterFieldsSchema>
type UserFields = z.output<typeof UserFieldsSchema>

// ---------------------------------------------------------------------------------------------------
// Small helpers

/**
 * A rule's verdict against the Secret, returned (never thrown) up to checkKubeconfig, so each rule reads as
 * one early exit: `if (bad) return refuse(...)`, and `if (x instanceof Refusal) return x` after a helper.
 */
class Refusal extends Data.TaggedError("KubeconfigRefusal")<{
  readonly reason: KubeconfigRefusalReason
  readonly message: string
}> {}

/** Builds a Refusal; checkKubeconfig prefixes the Secret's name. */
type Refuse = (reason: KubeconfigRefusalReason, message: string) => Refusal

/** Names come from the Secret: quote them, escape control characters and keep messages short. */
const q = (name: string): string => JSON.stringify(name.length > 63 ? `${name.slice(0, 60)}...` : name)

const orUndefined = (v: string | null | undefined): string | undefined =>
  v === null || v === "" ? undefined : v

const parseUrl = (s: string): URL | undefined => {
  try {
    return new URL(s)
  } catch {
    return undefined
  }
}

/** Strict base64: only the canonical encoding round-trips (no whitespace, junk or missing padding). */
const decodeBase64 = (value: string): Buffer | undefined => {
  const buf = Buffer.from(value, "base64")
  return buf.toString("base64") === value ? buf : undefined
}

const yamlOptions: ParseOptions & DocumentOptions & SchemaOptions = {
  version: "1.2",
  schema: "core",
  customTags: [],
  // Otherwise !!binary, !!set, !!timestamp ... resolve even in the core schema.
  resolveKnownTags: false,
  merge: false,
  uniqueKeys: true,
  strict: true,
  prettyErrors: true,
  // Never print: the yaml package's warnings may quote the document.
  logLevel: "silent",
}

const stableJson = (value: unknown): string =>
  JSON.stringify(value, (_key, v: unknown) =>
    v !== null && typeof v === "object" && !Array.isArray(v)
      ? Object.fromEntries(
          Object.entries(v as Record<string, unknown>)
            .filter(([, x]) => x !== undefined)
            .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)),
        )
      : v,
  )

const dns1123Label = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/

/** Parses `fleetcheck.io/namespaces: a,b`: DNS-1123 labels, comma-separated, blanks around commas ignored. */
export const parseNamespaces = (
  value: string,
):
  | { readonly ok: true; readonly namespaces: string[] }
  | { readonly ok: false; readonly message: string } => {
  if (value.trim() === "") {
    // Empty must not silently mean "all namespaces": that would widen the scope the annotation narrows.
    return { ok: false, message: "is empty; remove it to watch all namespaces, or list namespaces: a,b" }
  }
  const items = value.split(",").map((s) => s.trim())
  if (items.some((s) => s === "")) return { ok: false, message: "has an empty entry (write a,b)" }
  const bad = items.filter((s) => s.length > 63 || !dns1123Label.test(s))
  if (bad.length > 0) {
    const shown = bad.slice(0, 5).map(q).join(", ")
    return {
      ok: false,
      message: `has names that are not DNS-1123 labels (lowercase, digits, '-', at most 63): ${shown}`,
    }
  }
  const namespaces = [...new Set(items)]
  if (namespaces.length > maxNamespaces) {
    return {
      ok: false,
      message: `lists ${namespaces.length} namespaces; at most ${maxNamespaces} are supported`,
    }
  }
  return { ok: true, namespaces }
}

/** The JWT `exp` claim of a bearer token, if it is a JWT with one (signature not checked: only the date). */
export const jwtExpiry = (token: string): Date | undefined => {
  const parts = token.split(".")
  if (parts.length !== 3 || parts[1] === undefined) return undefined
  try {
    const payload: unknown = JSON.parse(Buffer.from(parts[1], "base64url").toString("utf8"))
    if (payload === null || typeof payload !== "object") return undefined
    const exp = (payload as { exp?: unknown }).exp
    if (typeof exp !== "number" || !Number.isFinite(exp)) return undefined
    const date = new Date(exp * 1000)
    return Number.isNaN(date.getTime()) ? undefined : date
  } catch {
    return undefined
  }
}

/** True when the credential expires within the window (or already has); false when no expiry is known. */
export const credentialsExpiringSoon = (expiry: Date | undefined, now: Date, windowMs: number): boolean =>
  expiry !== undefined && expiry.getTime() - now.getTime() <= windowMs

const earliest = (...dates: Array<Date | undefined>): Date | undefined =>
  dates.reduce<Date | undefined>(
    (a, d) => (d === undefined ? a : a === undefined || d < a ? d : a),
    undefined,
  )

type ZodIssue = z.ZodError["issues"][number]

const issuePath = (path: ReadonlyArray<PropertyKey>): string => {
  const text = path.reduce<string>(
    (acc, p) => (typeof p === "number" ? `${acc}[${p}]` : acc === "" ? String(p) : `${acc}.${String(p)}`),
    "",
  )
  return text === "" ? "the document" : text.length > 120 ? `${text.slice(0, 117)}...` : text
}

// Zod's own messages are fine today, but ours are built from the path and the issue kind only, so no
// future message format can echo an input value.
const issueText = (issue: ZodIssue): string => {
  switch (issue.code) {
    case "invalid_type":
      return issue.path.length === 0 && issue.expected === "object"
        ? "the document must be a kubeconfig mapping (apiVersion: v1, kind: Config)"
        : `${issuePath(issue.path)}: expected ${issue.expected}`
    case "too_small":
      return `${issuePath(issue.path)}: must not be empty`
    case "invalid_value":
      return `${issuePath(issue.path)}: must be ${issue.values.map((v) => JSON.stringify(v)).join(" or ")}`
    default:
      return `${issuePath(issue.path)}: is invalid`
  }
}

const duplicateName = (items: ReadonlyArray<{ readonly name: string }>): string | undefined => {
  const seen = new Set<string>()
  for (const { name } of items) {
    if (seen.has(name)) return name
    seen.add(name)
  }
  return undefined
}

// ---------------------------------------------------------------------------------------------------
// The check

export const checkKubeconfig = (input: KubeconfigCheckInput): KubeconfigCheck => {
  const secret = `${input.kind ?? "Secret"} ${q(input.secretName)}`
  try {
    const found: Refusal[] = []
    const result = check(input, found)
    if (result instanceof Refusal) found.push(result)
    if (result === undefined || result instanceof Refusal) return refusedFor(secret, found)
    return result
  } catch {
    // A defect or a library throwing on odd input: refuse without echoing the error (it may quote data).
    return {
      ok: false,
      reason: kubeconfigRefusalReasons.KubeconfigInvalid,
      reasons: [kubeconfigRefusalReasons.KubeconfigInvalid],
      message: `${secret}: the kubeconfig could not be checked`,
    }
  }
}

/** Every refusal found, in refusalOrder: the first one's reason, all of their messages. */
const refusedFor = (secret: string, found: ReadonlyArray<Refusal>): KubeconfigRefused => {
  const rank = (r: Refusal) => refusalOrder.indexOf(r.reason)
  const sorted = [...found].sort((a, b) => rank(a) - rank(b))
  const first = sorted[0]
  if (first === undefined) throw new Error("refusedFor without a refusal")
  const reasons = [...new Set(sorted.map((r) => r.reason))]
  const message =
    sorted.length === 1
      ? `${secret}: ${first.message}`
      : `${secret}: refused for ${sorted.length} reasons: ${sorted.map((r) => `${r.message} (${r.reason})`).join("; ")}`
  return { ok: false, reason: first.reason, reasons, message }
}

/**
 * The checks in order. What stops reading the kubeconfig (no data, not YAML, no context) is returned;
 * refusals that leave the rest checkable (the namespaces annotation, the cluster's, the user's) go into
 * `found` and checking goes on, so one refusal never hides another. Undefined: see `found`.
 */
const check = (input: KubeconfigCheckInput, found: Refusal[]): KubeconfigAccepted | Refusal | undefined => {
  const { policy, now } = input
  const R = kubeconfigRefusalReasons
  const refuse: Refuse = (reason, message) => new Refusal({ reason, message })

  // 1. Namespaces annotation: independent of the kubeconfig, and cheap.
  let namespaces: string[] | undefined
  const nsValue = input.annotations?.[namespacesAnnotation]
  if (nsValue !== undefined) {
    const parsed = parseNamespaces(nsValue)
    if (!parsed.ok)
      found.push(refuse(R.NamespacesInvalid, `annotation ${namespacesAnnotation} ${parsed.message}`))
    else namespaces = parsed.namespaces
  }

  // 2. The data key: strict base64, bounded, UTF-8.
  const dataKey = input.dataKey ?? kubeconfigDataKey
  const encoded = input.data?.[dataKey]
  if (encoded === undefined || encoded === "") {
    return refuse(R.KubeconfigMissing, `data key ${q(dataKey)} is missing or empty`)
  }
  if (encoded.length > Math.ceil(maxKubeconfigBytes / 3) * 4) {
    return refuse(R.KubeconfigInvalid, `data key ${q(dataKey)} is larger than ${maxKubeconfigBytes} bytes`)
  }
  const raw = decodeBase64(encoded)
  if (raw === undefined) return refuse(R.KubeconfigInvalid, `data key ${q(dataKey)} is not valid base64`)
  if (raw.length > maxKubeconfigBytes) {
    return refuse(R.KubeconfigInvalid, `data key ${q(dataKey)} is larger than ${maxKubeconfigBytes} bytes`)
  }
  let text = ""
  try {
    text = new TextDecoder("utf-8", { fatal: true }).decode(raw)
  } catch {
    return refuse(R.KubeconfigInvalid, `data key ${q(dataKey)} is not UTF-8 text`)
  }
  if (text.trim() === "") return refuse(R.KubeconfigMissing, `data key ${q(dataKey)} is empty`)

  // 3. YAML (JSON is YAML): one document, no custom tags, bounded aliases. yaml's own error messages
  // quote the source line, which may hold a token: report the error code and position only.
  const notYaml = `data key ${q(dataKey)} is not valid YAML or JSON`
  const docList = parseAllDocuments(text, yamlOptions)
  if (docList.length > 1)
    return refuse(
      R.KubeconfigInvalid,
      `data key ${q(dataKey)} holds ${docList.length} YAML documents; exactly one is allowed`,
    )
  const doc = docList[0]
  if (doc === undefined) return refuse(R.KubeconfigInvalid, `${notYaml} (no document)`)
  const problem = doc.errors[0] ?? doc.warnings[0]
  if (problem !== undefined) {
    const at = problem.linePos?.[0]
    return refuse(
      R.KubeconfigInvalid,
      `${notYaml} (${problem.code}${at ? ` at line ${at.line}, column ${at.col}` : ""})`,
    )
  }
  let js: unknown
  try {
    js = doc.toJS({ maxAliasCount: maxYamlAliasCount })
  } catch {
    return refuse(
      R.KubeconfigInvalid,
      `${notYaml} (more than ${maxYamlAliasCount} alias expansions, or an unresolved alias)`,
    )
  }

  // 4. Shape.
  const shaped = KubeconfigSchema.safeParse(js)
  if (!shaped.success) {
    const issues = shaped.error.issues
    const more = issues.length > 3 ? ` (and ${issues.length - 3} more)` : ""
    return refuse(
      R.KubeconfigInvalid,
      `not a valid kubeconfig: ${issues.slice(0, 3).map(issueText).join("; ")}${more}`,
    )
  }
  const kc = shaped.data
  const clusters = kc.clusters ?? []
  const users = kc.users ?? []
  const contexts = kc.contexts ?? []
  for (const [list, items] of [
    ["clusters", clusters],
    ["users", users],
    ["contexts", contexts],
  ] as const) {
    const dup = duplicateName(items)
    if (dup !== undefined)
      return refuse(R.KubeconfigInvalid, `${list} has more than one entry named ${q(dup)}`)
  }

  // 5. The context: the annotation's, or the only one. current-context is ignored on purpose: it is
  // easy to change by accident (kubectl config use-context on the copy), and must not retarget a member.
  const wanted = input.annotations?.[contextAnnotation]
  const names = (n: number) =>
    contexts
      .slice(0, n)
      .map((c) => q(c.name))
      .join(", ") + (contexts.length > n ? ", ..." : "")
  let ctx: (typeof contexts)[number] | undefined
  if (wanted !== undefined) {
    ctx = contexts.find((c) => c.name === wanted)
    if (ctx === undefined) {
      return refuse(
        R.ContextNotFound,
        `annotation ${contextAnnotation} names context ${q(wanted)}, which the kubeconfig does not define` +
          (contexts.length > 0 ? ` (it has ${names(10)})` : ""),
      )
    }
  } else if (contexts.length > 1) {
    return refuse(
      R.ContextAmbiguous,
      `the kubeconfig has ${contexts.length} contexts (${names(10)}); set annotation ${contextAnnotation} ` +
        "on the Secret to the one the hub should use (current-context is not used)",
    )
  } else {
    ctx = contexts[0]
  }
  if (ctx === undefined) return refuse(R.KubeconfigInvalid, "the kubeconfig defines no contexts")
  const context = ctx
  const contextName = context.name
  const clusterName = context.context.cluster
  const clusterEntry = clusters.find((c) => c.name === clusterName)
  if (clusterEntry === undefined) {
    return refuse(
      R.ClusterNotFound,
      `context ${q(contextName)} references cluster ${q(clusterName)}, which is not defined`,
    )
  }
  const userName = orUndefined(context.context.user)
  if (userName === undefined) {
    return refuse(
      R.UserNotFound,
      `context ${q(contextName)} names no user; the hub needs credentials for the member`,
    )
  }
  const userEntry = users.find((u) => u.name === userName)
  if (userEntry === undefined) {
    return refuse(
      R.UserNotFound,
      `context ${q(contextName)} references user ${q(userName)}, which is not defined`,
    )
  }
  // Only the chosen entries are checked further: nothing else from the Secret is ever loaded.
  const cluster = checkCluster(clusterEntry.cluster, `clusters[${q(clusterName)}].cluster`, policy, refuse)
  if (Array.isArray(cluster)) found.push(...cluster)
  const user = checkUser(userEntry.user ?? {}, `users[${q(userName)}].user`, policy, refuse)
  if (user instanceof Refusal) found.push(user)
  if (Array.isArray(cluster) || user instanceof Refusal || found.length > 0) return undefined

  // 6. Expiry, from what the kubeconfig itself carries (exec and auth-provider tokens are unknown here).
  const tokenExpiry = user.token !== undefined ? jwtExpiry(user.token) : undefined
  const credentialExpiry = earliest(tokenExpiry, user.certNotAfter)
  if (credentialExpiry !== undefined && credentialExpiry.getTime() <= now.getTime()) {
    const which =
      credentialExpiry === tokenExpiry ? "the bearer token (JWT exp)" : "the client certificate (notAfter)"
    return refuse(
      R.CredentialsExpired,
      `${which} of user ${q(userName)} expired at ${credentialExpiry.toISOString()}`,
    )
  }

  // 7. The KubeConfig holds the chosen entries only, built from validated fields (never loadFromString,
  // which would read token-file paths while parsing).
  const kubeContext: Context = {
    name: contextName,
    cluster: clusterName,
    user: userName,
    ...(orUndefined(context.context.namespace) !== undefined
      ? { namespace: context.context.namespace! }
      : {}),
  }
  const kubeConfig = new KubeConfig()
  kubeConfig.loadFromOptions({
    clusters: [{ name: clusterName, ...cluster.kube }],
    users: [{ name: userName, ...user.kube }],
    contexts: [kubeContext],
    currentContext: contextName,
  })

  const canonical = {
    apiVersion: "v1",
    kind: "Config",
    "current-context": contextName,
    clusters: [{ name: clusterName, cluster: cluster.canonical }],
    users: [{ name: userName, user: user.canonical }],
    contexts: [
      {
        name: contextName,
        context: { cluster: clusterName, user: userName, namespace: kubeContext.namespace },
      },
    ],
  }
  const hash = createHash("sha256")
    .update(stableJson({ kubeconfig: canonical, namespaces: namespaces ?? null }))
    .digest("hex")
  const connectionHash = createHash("sha256")
    .update(
      stableJson({
        cluster: cluster.canonical,
        namespace: kubeContext.namespace,
        namespaces: namespaces ?? null,
      }),
    )
    .digest("hex")

  return {
    ok: true,
    kubeConfig,
    hash,
    connectionHash,
    server: cluster.kube.server,
    contextName,
    clusterName,
    userName: userName,
    credentialExpiry,
    namespaces,
  }
}

const policyHint = (flag: keyof KubeconfigPolicy) => `refused unless the hub policy sets ${flag}`

/**
 * Never read, even with allowFilePaths: the hub's own ServiceAccount token and mounted secrets (a Secret
 * pointing tokenFile there with its own server would receive the hub's identity), and the kernel's file
 * systems (/proc/self/root/... reaches the same files; /dev/zero never ends).
 */
const forbiddenFileRoots = ["/var/run/secrets", "/run/secrets", "/proc", "/dev", "/sys"]

const checkFilePath = (
  path: string | undefined,
  field: string,
  policy: KubeconfigPolicy,
  refuse: Refuse,
): string | undefined | Refusal => {
  if (path === undefined) return undefined
  const R = kubeconfigRefusalReasons
  if (!policy.allowFilePaths) {
    return refuse(
      R.FilePathRefused,
      `${field} is a file path on the hub, ${policyHint("allowFilePaths")} (embed the data instead)`,
    )
  }
  // There is no kubeconfig directory to resolve against: relative would mean the hub's working directory.
  if (!posix.isAbsolute(path)) return refuse(R.KubeconfigInvalid, `${field} must be an absolute path`)
  // As the kernel will resolve it: no "..", "." or doubled slashes slip past the roots.
  const resolved = posix.resolve(path)
  if (forbiddenFileRoots.some((root) => resolved === root || resolved.startsWith(`${root}/`))) {
    return refuse(
      R.FilePathRefused,
      `${field} points into the hub's own secrets or a kernel file system ` +
        `(${forbiddenFileRoots.join(", ")}), which no kubeconfig may name`,
    )
  }
  return path
}

const parseCert = (data: string, field: string, refuse: Refuse): X509Certificate | Refusal => {
  const bytes = decodeBase64(data)
  if (bytes === undefined)
    return refuse(kubeconfigRefusalReasons.KubeconfigInvalid, `${field} is not valid base64`)
  try {
    return new X509Certificate(bytes)
  } catch {
    return refuse(kubeconfigRefusalReasons.KubeconfigInvalid, `${field} is not a PEM or DER certificate`)
  }
}

/**
 * What is wrong with a server URL (the URL itself is never echoed: it might carry userinfo). One cluster
 * has one URL: a path (a proxy's, or a suffix the server ignores), a query or a fragment would let one
 * API server pass for two registrations, so they are refused (ServerURLRefused).
 */
const serverProblems = (server: string, at: string, refuse: Refuse): Refusal[] => {
  const R = kubeconfigRefusalReasons
  const u = parseUrl(server)
  if (u === undefined) return [refuse(R.KubeconfigInvalid, `${at}.server is not a URL`)]
  const problems: Refusal[] = []
  // Plain http sends the credentials in clear text: never, whatever the policy allows.
  if (u.protocol === "http:") {
    problems.push(
      refuse(
        R.PlaintextServerRefused,
        `${at}.server uses plain http, which is never accepted (credentials would travel in clear ` +
          "text); use https",
      ),
    )
  } else if (u.protocol !== "https:")
    problems.push(refuse(R.KubeconfigInvalid, `${at}.server must be an https URL`))
  if (u.hostname === "") problems.push(refuse(R.KubeconfigInvalid, `${at}.server has no host`))
  if (u.username !== "" || u.password !== "") {
    problems.push(refuse(R.KubeconfigInvalid, `${at}.server must not carry credentials in the URL`))
  }
  const parts = [
    u.pathname !== "/" && u.pathname !== "" ? "a path" : undefined,
    u.search !== "" || server.includes("?") ? "a query" : undefined,
    u.hash !== "" || server.includes("#") ? "a fragment" : undefined,
  ].filter((p) => p !== undefined)
  if (parts.length > 0) {
    problems.push(
      refuse(
        R.ServerURLRefused,
        `${at}.server has ${parts.join(" and ")}; give the API server as https://host[:port] only`,
      ),
    )
  }
  return problems
}

/** The chosen cluster's fields, or every refusal they earn (independent ones are all reported). */
const checkCluster = (fields: ClusterFields, at: string, policy: KubeconfigPolicy, refuse: Refuse) => {
  const R = kubeconfigRefusalReasons
  const problems: Refusal[] = []
  // The hub's client talks to the server directly (src/kube/client.ts); a proxy would be bypassed.
  if (orUndefined(fields["proxy-url"]) !== undefined) {
    problems.push(
      refuse(
        R.KubeconfigUnsupported,
        `${at}.proxy-url is not supported: the hub connects to member API servers directly`,
      ),
    )
  }
  const caFile = checkFilePath(
    orUndefined(fields["certificate-authority"]),
    `${at}.certificate-authority`,
    policy,
    refuse,
  )
  if (caFile instanceof Refusal) problems.push(caFile)
  const caData = orUndefined(fields["certificate-authority-data"])
  const skipTLSVerify = fields["insecure-skip-tls-verify"] === true
  if (skipTLSVerify && !policy.allowInsecureSkipTlsVerify) {
    problems.push(
      refuse(
        R.InsecureSkipTLSVerifyRefused,
        `${at}.insecure-skip-tls-verify is true, ${policyHint("allowInsecureSkipTlsVerify")}`,
      ),
    )
  }
  // client-go refuses this pair too: which of the two was meant is anybody's guess.
  if (skipTLSVerify && (caData !== undefined || caFile !== undefined)) {
    problems.push(
      refuse(
        R.KubeconfigInvalid,
        `${at} sets insecure-skip-tls-verify together with a certificate-authority; keep one of them`,
      ),
    )
  }
  problems.push(...serverProblems(fields.server, at, refuse))
  if (caData !== undefined) {
    const ca = parseCert(caData, `${at}.certificate-authority-data`, refuse)
    if (ca instanceof Refusal) problems.push(ca)
  }
  if (problems.length > 0 || caFile instanceof Refusal) return problems
  const tlsServerName = orUndefined(fields["tls-server-name"])
  // client-node strips one trailing slash too; keep the server exactly as it will be used.
  const server = fields.server.replace(/\/$/, "")
  const kube: Omit<Cluster, "name"> = {
    server,
    skipTLSVerify,
    ...(caData !== undefined ? { caData } : {}),
    ...(caFile !== undefined ? { caFile } : {}),
    ...(tlsServerName !== undefined ? { tlsServerName } : {}),
  }
  const canonical = {
    server,
    "certificate-authority-data": caData,
    "certificate-authority": caFile,
    "insecure-skip-tls-verify": skipTLSVerify || undefined,
    "tls-server-name": tlsServerName,
  }
  return { kube, canonical }
}

// client-node's authenticators: these names work; anything else would silently send no credentials.
const knownAuthProviders = new Set(["oidc", "gcp", "azure", "exec"])

/** Printable ASCII without spaces: what an Authorization header can carry unchanged. */
const tokenPattern = /^[\x21-\x7e]+$/
/**
 * Printable ASCII, inner spaces allowed (user names such as "Jane Doe"): a CR/LF would make Node refuse
 * the Impersonate-User header on every request, and Node would send other characters as Latin-1 bytes
 * the API server reads differently.
 */
const impersonationPattern = /^[\x21-\x7e](?:[\x20-\x7e]*[\x21-\x7e])?$/

const checkUser = (fields: Partial<UserFields>, at: string, policy: KubeconfigPolicy, refuse: Refuse) => {
  const R = kubeconfigRefusalReasons
  const invalid = (message: string) => refuse(R.KubeconfigInvalid, message)

  // Plugins first: they run code on the hub.
  let exec: z.output<typeof ExecSchema> | undefined
  if (fields.exec !== undefined && fields.exec !== null) {
    if (!policy.allowExec) {
      return refuse(R.ExecPluginRefused, `${at}.exec runs a command on the hub, ${policyHint("allowExec")}`)
    }
    const parsed = ExecSchema.safeParse(fields.exec)
    if (!parsed.success) {
      return invalid(`${at}.exec: ${parsed.error.issues.slice(0, 3).map(issueText).join("; ")}`)
    }
    exec = parsed.data
  }
  let authProvider: z.output<typeof AuthProviderSchema> | undefined
  if (fields["auth-provider"] !== undefined && fields["auth-provider"] !== null) {
    if (!policy.allowAuthProvider) {
      return refuse(R.AuthProviderRefused, `${at}.auth-provider is set, ${policyHint("allowAuthProvider")}`)
    }
    const parsed = AuthProviderSchema.safeParse(fields["auth-provider"])
    if (!parsed.success) {
      return invalid(`${at}.auth-provider: ${parsed.error.issues.slice(0, 3).map(issueText).join("; ")}`)
    }
    const ap = parsed.data
    authProvider = ap
    const config = ap.config ?? {}
    // gcp and azure run cmd-path; name exec or config.exec run a plugin: all of that is exec.
    if ((ap.name === "exec" || config.exec != null || config["cmd-path"] != null) && !policy.allowExec) {
      return refuse(
        R.ExecPluginRefused,
        `${at}.auth-provider runs a command on the hub, ${policyHint("allowExec")}`,
      )
    }
    const tokenFilePath = config.tokenFile
    if (tokenFilePath !== undefined && tokenFilePath !== null) {
      if (typeof tokenFilePath !== "string")
        return invalid(`${at}.auth-provider.config.tokenFile: expected string`)
      const checked = checkFilePath(tokenFilePath, `${at}.auth-provider.config.tokenFile`, policy, refuse)
      if (checked instanceof Refusal) return checked
    } else if (!knownAuthProviders.has(ap.name)) {
      return refuse(
        R.KubeconfigUnsupported,
        `${at}.auth-provider ${q(ap.name)} is not supported (oidc, gcp, azure, exec)`,
      )
    }
  }

  const certFile = checkFilePath(
    orUndefined(fields["client-certificate"]),
    `${at}.client-certificate`,
    policy,
    refuse,
  )
  if (certFile instanceof Refusal) return certFile
  const keyFile = checkFilePath(orUndefined(fields["client-key"]), `${at}.client-key`, policy, refuse)
  if (keyFile instanceof Refusal) return keyFile
  const tokenFileField = checkFilePath(orUndefined(fields.tokenFile), `${at}.tokenFile`, policy, refuse)
  if (tokenFileField instanceof Refusal) return tokenFileField
  const tokenFileDashed = checkFilePath(orUndefined(fields["token-file"]), `${at}.token-file`, policy, refuse)
  if (tokenFileDashed instanceof Refusal) return tokenFileDashed
  const tokenFile = tokenFileField ?? tokenFileDashed

  // Ignoring these would make the hub act with more rights than the kubeconfig grants.
  for (const key of ["as-uid", "as-groups", "as-user-extra"] as const) {
    const v = fields[key]
    if (v !== undefined && v !== null && v !== "" && !(Array.isArray(v) && v.length === 0)) {
      return refuse(R.KubeconfigUnsupported, `${at}.${key} is not supported (only "as" impersonation is)`)
    }
  }

  const token = orUndefined(fields.token)
  // A newline or space would break the Authorization header (and is usually a copy-paste accident).
  if (token !== undefined && !tokenPattern.test(token)) {
    return invalid(`${at}.token contains whitespace or non-printable characters`)
  }
  const impersonateUser = orUndefined(fields.as)
  if (impersonateUser !== undefined && !impersonationPattern.test(impersonateUser)) {
    return invalid(
      `${at}.as must be printable ASCII without control characters or leading and trailing spaces`,
    )
  }

  const certData = orUndefined(fields["client-certificate-data"])
  const keyData = orUndefined(fields["client-key-data"])
  let certNotAfter: Date | undefined
  let cert: X509Certificate | undefined
  if (certData !== undefined) {
    const parsed = parseCert(certData, `${at}.client-certificate-data`, refuse)
    if (parsed instanceof Refusal) return parsed
    cert = parsed
    certNotAfter = cert.validToDate
  }
  let key: KeyObject | undefined
  if (keyData !== undefined) {
    const bytes = decodeBase64(keyData)
    if (bytes === undefined) return invalid(`${at}.client-key-data is not valid base64`)
    try {
      key = createPrivateKey(bytes)
    } catch {
      return invalid(`${at}.client-key-data is not a PEM or DER private key`)
    }
  }
  const hasCert = certData !== undefined || certFile !== undefined
  const hasKey = keyData !== undefined || keyFile !== undefined
  if (hasCert && !hasKey) return invalid(`${at} has a client certificate but no client key`)
  if (hasKey && !hasCert) return invalid(`${at} has a client key but no client certificate`)
  if (cert !== undefined && key !== undefined && !cert.checkPrivateKey(key)) {
    return invalid(`${at}.client-key-data does not match ${at}.client-certificate-data`)
  }

  const username = orUndefined(fields.username)
  const password = orUndefined(fields.password)

  // client-node has no tokenFile field on User: its FileAuth reads auth-provider config.tokenFile
  // (re-read every 60 s, like client-go). A literal token wins, as in client-go.
  let effectiveAuthProvider: unknown = authProvider
  if (tokenFile !== undefined && token === undefined) {
    if (authProvider !== undefined) {
      return refuse(R.KubeconfigUnsupported, `${at} has both a token file and an auth-provider`)
    }
    effectiveAuthProvider = { name: "tokenFile", config: { tokenFile } }
  }

  const hasCredentials =
    token !== undefined ||
    (hasCert && hasKey) ||
    (username !== undefined && password !== undefined) ||
    exec !== undefined ||
    effectiveAuthProvider !== undefined
  if (!hasCredentials) {
    return refuse(
      R.CredentialsMissing,
      `${at} has no credentials (token, client certificate and key, basic auth, exec or auth-provider)`,
    )
  }

  const kube: Omit<User, "name"> = {
    ...(token !== undefined ? { token } : {}),
    ...(certData !== undefined ? { certData } : {}),
    ...(certFile !== undefined ? { certFile } : {}),
    ...(keyData !== undefined ? { keyData } : {}),
    ...(keyFile !== undefined ? { keyFile } : {}),
    ...(username !== undefined ? { username } : {}),
    ...(password !== undefined ? { password } : {}),
    ...(impersonateUser !== undefined ? { impersonateUser } : {}),
    // Copies: client-node's oidc authenticator writes refreshed tokens back into the config object.
    ...(exec !== undefined ? { exec: structuredClone(exec) } : {}),
    ...(effectiveAuthProvider !== undefined ? { authProvider: structuredClone(effectiveAuthProvider) } : {}),
  }
  const canonical = {
    token,
    tokenFile: token === undefined ? tokenFile : undefined,
    "client-certificate-data": certData,
    "client-certificate": certFile,
    "client-key-data": keyData,
    "client-key": keyFile,
    username,
    password,
    as: impersonateUser,
    exec,
    "auth-provider": authProvider,
  }
  return { kube, canonical, token, certNotAfter }
}
