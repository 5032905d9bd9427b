// A small Kubernetes REST client: @kubernetes/client-node's KubeConfig supplies the server, TLS material
// and auth headers; the HTTP is ours (kube/transport.ts: HTTP/2 when the server offers it, one connection
// per member credential, else HTTP/1.1 with a keep-alive Agent), because the library's fetch-based watch
// cannot request bookmarks, swallows parse errors and has no inactivity timeout we control (see
// STYLE.md, "Known traps").
//
// A member endpoint is not trusted (anyone who can write a registration Secret chooses it): every body
// and watch line is read up to a limit (maxResponseBytes, maxWatchFrameBytes, maxErrorBodyBytes), past
// which that request fails with TooLarge; nothing here throws out of a socket callback or out of
// request construction; and credential errors say what failed in fixed words, never what a plugin printed.
import type * as https from "node:https"
import { KubeConfig, type User } from "@kubernetes/client-node"
import { Cause, Clock, Deferred, Effect, Option, Queue, Random, Schema, type Scope, Stream } from "effect"
import { type ExecCredentialResult, type ExecPlugin, runExecPlugin } from "./exec-credential.ts"
import { type IncomingResponse, makeTransport, type Transport } from "./transport.ts"

export class KubeApiError extends Schema.TaggedError<KubeApiError>()("KubeApiError", {
  cluster: Schema.String,
  method: Schema.String,
  /** Path only, never the query (continue tokens, selectors). */
  path: Schema.String,
  status: Schema.Number,
  /** The Status object's reason (NotFound, AlreadyExists, Conflict, Expired, Gone, ...), or "" when absent. */
  reason: Schema.String,
  message: Schema.String,
  /** Retry-After of a 429/503, in seconds. */
  retryAfterSeconds: Schema.optional(Schema.Number),
}) {}

export class KubeTransportError extends Schema.TaggedError<KubeTransportError>()("KubeTransportError", {
  cluster: Schema.String,
  method: Schema.String,
  path: Schema.String,
  message: Schema.String,
  /**
   * What went wrong: a Node error code (ECONNREFUSED, ECONNRESET, ERR_INVALID_CHAR, ...) or one of
   * Timeout (no response in time), WatchInactive (a watch went silent), Closed (connection lost
   * mid-response), BadResponse (unparseable body or watch line), TooLarge (a body or watch line over its
   * limit), Config (unusable kubeconfig), Credentials (resolving credentials failed), PingTimeout (an
   * HTTP/2 connection did not answer a PING: it was closed with every request and watch on it).
   */
  code: Schema.optional(Schema.String),
}) {}

export type KubeError = KubeApiError | KubeTransportError

export const isNotFound = (e: unknown): boolean => e instanceof KubeApiError && e.status === 404
export const isAlreadyExists = (e: unknown): boolean =>
  e instanceof KubeApiError && e.status === 409 && e.reason === "AlreadyExists"
export const isConflict = (e: unknown): boolean =>
  e instanceof KubeApiError && e.status === 409 && e.reason !== "AlreadyExists"
/** A watch that went silent (no bookmark either) for the inactivity timeout, after a 200 response. */
export const isWatchInactive = (e: unknown): boolean =>
  e instanceof KubeTransportError && e.code === "WatchInactive"
/** 410, or a Status whose reason says the resourceVersion or continue token is too old. */
export const isGone = (e: unknown): boolean =>
  e instanceof KubeApiError && (e.status === 410 || e.reason === "Expired" || e.reason === "Gone")

export type HttpMethod = "GET" | "POST" | "PUT" | "PATCH" | "DELETE"

export interface KubeRequest {
  readonly method: HttpMethod
  /** Absolute API path, e.g. /api/v1/namespaces/default/configmaps (see resourcePath). */
  readonly path: string
  /** Undefined values are left out. */
  readonly query?: Record<string, string | undefined>
  /** Serialised as JSON unless it is already a string (e.g. an apply-patch YAML document). */
  readonly body?: unknown
  /** Default application/json; PATCH callers pass application/merge-patch+json, apply-patch+yaml, ... */
  readonly contentType?: string
  /** Whole-request deadline, throttle retries included (see throttleRetryWaitMs); default the client's requestTimeoutMs. */
  readonly timeoutMs?: number
  /**
   * Fails the request (code Timeout) sooner, once this long passed with nothing received on its
   * connection: not its answer, nor, over HTTP/2, anything for the member's other requests and watches
   * sharing that connection. While the connection keeps delivering, the server is alive but busy, and
   * the request waits for its answer up to timeoutMs. For a health probe: a dead or hung API server
   * fails it as fast as a plain deadline would, a busy one answers it late.
   */
  readonly silenceTimeoutMs?: number
  /**
   * Asked again at the last moment: on a connected (and, for TLS, handshaken) socket, in the same
   * synchronous step that hands the request's bytes to it. False fails the request with code NotLeader
   * and nothing is sent. (A check before the request starts is not enough: a process paused between
   * that check and the socket write, by SIGSTOP or a long GC, would send it late. See kube/write-gate.ts.)
   */
  readonly fence?: () => boolean
  /**
   * The answer's body is read to its end and dropped: request() succeeds with undefined. For a caller
   * that needs only the status (the health probe, 33 a second at 1,000 members): no JSON decoded.
   */
  readonly discardBody?: boolean
}

export interface WatchEvent {
  readonly type: "ADDED" | "MODIFIED" | "DELETED" | "BOOKMARK" | "ERROR"
  /** The object (for ERROR, a Status); its kind depends on the watched resource. */
  readonly object: any
}

export interface WatchOptions {
  /** No bytes for this long ends the stream with a KubeTransportError. Default: the client's (90 s). */
  readonly inactivityTimeoutMs?: number
  /** Called when the server accepted the watch (200 and headers received), before any event. */
  readonly onConnected?: () => void
}

export interface KubeClient {
  readonly cluster: string
  request<T = unknown>(req: KubeRequest): Effect.Effect<T, KubeApiError | KubeTransportError>
  /**
   * Streams a `?watch=true` request. Ends when the server closes the response (e.g. timeoutSeconds);
   * ERROR events are passed through for the caller to interpret (a 410 inside the stream is one).
   */
  watch(
    path: string,
    query: Record<string, string>,
    options?: WatchOptions,
  ): Stream.Stream<WatchEvent, KubeApiError | KubeTransportError>
}

/**
 * A client whose credential can change while it runs (SPEC §11 "credentials that rotate in place"):
 * what identifies the connection (server, CA, TLS server name) is fixed for its life, what
 * authenticates it is not.
 */
export interface RotatingKubeClient extends KubeClient {
  /**
   * Swaps in the user of `kubeConfig` (bearer token, client certificate, basic auth, exec plugin):
   * requests already sent finish with the old credential, every later one uses the new; open watches
   * keep running. Fails with code Config when `kubeConfig` names another connection (that needs a new
   * client) and with Credentials when the new credential cannot be resolved (the old one stays).
   */
  readonly setCredential: (kubeConfig: KubeConfig) => Effect.Effect<void, KubeTransportError>
  /** What the client knows of its current credential, for the MemberCluster's conditions. */
  readonly credentialState: () => CredentialState
}

export interface CredentialState {
  /** The exec plugin's expirationTimestamp of the credential in use, when it gave one. */
  readonly expiry: Date | undefined
  /** Why the exec plugin's last run failed (fixed words), until a run succeeds. */
  readonly execFailure: string | undefined
  /** Exec plugin runs that produced a credential, and credentials swapped in by setCredential. */
  readonly refreshes: number
}

export interface KubeClientOptions {
  /** Member name, used in errors, logs and span attributes. */
  readonly cluster: string
  readonly kubeConfig: KubeConfig
  /** Default deadline of request(); default 30 s. */
  readonly requestTimeoutMs?: number
  /** Default inactivity timeout of watch(); default 90 s (bookmarks arrive about every 60 s). */
  readonly watchInactivityTimeoutMs?: number
  /** Sent as User-Agent on every request, so API server audit logs tell hub processes apart. */
  readonly userAgent?: string
  /** Deadline of one exec credential plugin run; default the request deadline. */
  readonly execTimeoutMs?: number
  /** A ClusterProfile provider's extension config, passed to an exec plugin with provideClusterInfo. */
  readonly execClusterConfig?: unknown
  /** A throttled request is about to be sent again (see throttleRetryWaitMs), for the metrics. */
  readonly onThrottleRetry?: (method: string, status: number) => void
  /** Offer HTTP/2 to a TLS server (one connection per credential); false: HTTP/1.1 only. Default true. */
  readonly http2?: boolean
  /** PING an HTTP/2 connection on which nothing arrived for this long; default 30 s (client-go's). */
  readonly pingIdleMs?: number
  /** Close an HTTP/2 connection whose PING is unanswered this long; default 15 s (client-go's). */
  readonly pingTimeoutMs?: number
  /**
   * A request that timed out (or a watch gone silent) moves the next requests to a new HTTP/2
   * connection at once instead of after the PING timeout (see TransportOptions); default false.
   */
  readonly replaceSuspectConnection?: boolean
}

export interface ResourceRef {
  /** "" for the core group. */
  readonly group: string
  readonly version: string
  readonly plural: string
  readonly namespace?: string | undefined
  readonly name?: string | undefined
  readonly subresource?: string | undefined
}

/** /api/v1/... for the core group, /apis/group/version/... otherwise. */
export const resourcePath = (r: ResourceRef): string => {
  let p = r.group === "" ? `/api/${r.version}` : `/apis/${r.group}/${r.version}`
  if (r.namespace) p += `/namespaces/${encodeURIComponent(r.namespace)}`
  p += `/${r.plural}`
  if (r.name) {
    p += `/${encodeURIComponent(r.name)}`
    if (r.subresource) p += `/${r.subresource}`
  }
  return p
}

/**
 * A whole response body, read into memory before parsing. A LIST page of 500 objects is a few MiB; the
 * hub's 1 GiB limit must also hold the parsed copy (about 4 times the bytes), so more than this is a
 * broken or hostile endpoint.
 */
export const maxResponseBytes = 64 * 1024 * 1024
/** One watch event line, as apimachinery's streaming decoder allows (ErrObjectTooLarge past 16 MiB). */
export const maxWatchFrameBytes = 16 * 1024 * 1024
/** The body of a non-2xx answer: a Status object, or a proxy's error page. */
export const maxErrorBodyBytes = 64 * 1024

const maxMessageLength = 512

const bounded = (s: string): string => (s.length > maxMessageLength ? `${s.slice(0, maxMessageLength)}…` : s)

const queryString = (query: Record<string, string | undefined> | undefined): string => {
  if (!query) return ""
  const params = new URLSearchParams()
  for (const [k, v] of Object.entries(query)) if (v !== undefined) params.append(k, v)
  const s = params.toString()
  return s === "" ? "" : `?${s}`
}

interface RawResponse {
  readonly status: number
  readonly text: string
  readonly retryAfter: number | undefined
}

interface Auth {
  headers: Record<string, string>
  basicAuth: string | undefined
}

// Values are trimmed as client-go trims a token file (client-node's FileAuth sends its newline too).
const headersOf = (opts: https.RequestOptions): Auth => {
  const headers: Record<string, string> = {}
  for (const [k, v] of Object.entries(opts.headers ?? {})) if (typeof v === "string") headers[k] = v.trim()
  return { headers, basicAuth: typeof opts.auth === "string" ? opts.auth : undefined }
}

const errorCode = (e: unknown): string | undefined => {
  const code = (e as NodeJS.ErrnoException | undefined)?.code
  return typeof code === "string" ? code : undefined
}

/** A Node error code (ENOENT, ERR_INVALID_CHAR) and nothing else: codes never carry values, messages may. */
const plainCode = (e: unknown): string | undefined => {
  const code = errorCode(e)
  return code !== undefined && /^[A-Z][A-Z0-9_]{1,40}$/.test(code) ? code : undefined
}

const errorText = (e: unknown): string => {
  if (e instanceof Error) {
    const code = (e as NodeJS.ErrnoException).code
    return code && !e.message.includes(code) ? `${code}: ${e.message}` : e.message
  }
  return String(e)
}

const parseUrl = (s: string): URL | undefined => {
  try {
    return new URL(s)
  } catch {
    return undefined
  }
}

const parseRetryAfter = (v: string | string[] | undefined): number | undefined => {
  const s = Array.isArray(v) ? v[0] : v
  if (s === undefined) return undefined
  const n = Number(s)
  return Number.isFinite(n) && n >= 0 ? n : undefined
}

/**
 * Throttled requests are sent again, as client-go's REST client does (rest/with_retry.go: checkWait, ten
 * retries): a 429, or a 5xx with a Retry-After header, is the API server refusing the request (priority
 * and fairness, in-flight limits, storage not ready) and saying when to come back. Every verb is sent
 * again, as in client-go: the hub's writes are safe to repeat (deterministic names, so AlreadyExists is
 * success; updates carry a resourceVersion; a repeated delete finds NotFound). Watches are not retried
 * here: the informer backs off on their failures, honouring Retry-After.
 */
export const throttleRetries = 10
/** The longest wait for one retry: priority and fairness asks for at most 32 s. */
export const throttleRetryMaxWaitMs = 32_000
/**
 * Up to this share of the wait is added at random. client-go sleeps exactly Retry-After and spreads its
 * retries with its client-side rate limiter; this client has none, so without it every request refused
 * in one burst would come back in the same instant.
 */
export const throttleRetryJitter = 0.2

/**
 * How long to wait before sending a refused request again, or undefined when its error is the answer:
 * not a throttling status, no Retry-After, the retries used up, or a wait that would not end before the
 * request's deadline. `random` is in [0, 1).
 */
export const throttleRetryWaitMs = (
  status: number,
  retryAfterSeconds: number | undefined,
  retriesSoFar: number,
  remainingMs: number,
  random: number,
): number | undefined => {
  if (status !== 429 && status < 500) return undefined
  if (retryAfterSeconds === undefined || retriesSoFar >= throttleRetries) return undefined
  const waitMs = Math.round(
    Math.min(retryAfterSeconds * 1000, throttleRetryMaxWaitMs) * (1 + throttleRetryJitter * random),
  )
  return waitMs < remainingMs ? waitMs : undefined
}

// The auth-provider names the kubeconfig policy lets through; anything else is not named in messages.
const knownAuthProviders = new Set(["oidc", "gcp", "azure", "exec", "tokenFile"])

/**
 * Why resolving credentials failed, in fixed words. client-node rejects a failed exec plugin with the
 * plugin's raw stderr, V8's JSON errors quote the output they could not parse (a token, perhaps) and
 * gcp/azure's execSync errors carry the command's output: none of that may reach conditions, Events,
 * logs or the dashboard. (client-node does not pass the plugin's exit code on, so neither can we.)
 */
const credentialFailure = (user: User | null, e: unknown): string => {
  const code = plainCode(e)
  const syscall = (e as NodeJS.ErrnoException | undefined)?.syscall
  const provider: unknown = user?.authProvider?.name
  const runsPlugin = Boolean(user?.exec) || provider === "exec" || user?.authProvider?.config?.exec != null
  if (typeof syscall === "string" && syscall.startsWith("spawn")) {
    return `exec credential plugin could not be started (${code ?? "spawn failed"})`
  }
  if (code !== undefined && (syscall === "open" || syscall === "read")) {
    return `reading a file the kubeconfig names failed (${code})`
  }
  if (runsPlugin) {
    if (e instanceof SyntaxError) return "exec credential plugin failed: its output is not an ExecCredential"
    if (e instanceof TypeError) return "exec credential plugin failed: its ExecCredential has no status"
    return "exec credential plugin failed (non-zero exit; its output is not shown)"
  }
  const which =
    typeof provider === "string" && knownAuthProviders.has(provider) ? ` (auth-provider ${provider})` : ""
  return `resolving credentials failed${which}${code !== undefined ? ` (${code})` : ""}`
}

/**
 * Reads a response body of at most `limit` bytes (a larger Content-Length fails at once); calls `onEnd`
 * with it, or `onTooLarge` as soon as it is over the limit, after which nothing is kept (the caller
 * destroys the request).
 */
const readBody = (
  res: IncomingResponse,
  limit: number,
  onEnd: (body: string) => void,
  onTooLarge: () => void,
): void => {
  if (Number(res.headers["content-length"]) > limit) {
    onTooLarge()
    return
  }
  let chunks: Buffer[] = []
  let size = 0
  res.body.on("data", (c: Buffer) => {
    if (size > limit) return
    size += c.length
    if (size > limit) {
      chunks = []
      onTooLarge()
    } else chunks.push(c)
  })
  res.body.on("end", () => {
    if (size <= limit) onEnd(Buffer.concat(chunks, size).toString("utf8"))
  })
}

/** Backoff between failed exec plugin runs (and between refreshes a 401 asks for): 1 s doubling to 5 min. */
const execBackoff = { baseMs: 1_000, maxMs: 300_000 }
const backoffMs = (failures: number) =>
  failures <= 0 ? 0 : Math.min(execBackoff.maxMs, execBackoff.baseMs * 2 ** Math.min(failures - 1, 20))
/** An exec credential is refreshed this share of its lifetime before it expires (at most 5 min before). */
const refreshShare = 0.2

/**
 * One credential in use: its auth headers and the transport whose connections carry its client
 * certificate. Requests hold the generation they started with; a retired transport is closed once none
 * holds it.
 */
interface Generation {
  readonly id: number
  readonly auth: Auth | undefined
  readonly transport: Transport
  /** cert and key as client-node or the plugin gave them: an unchanged pair keeps the transport. */
  readonly certKey: string
  readonly expiry: Date | undefined
  /** When an exec credential is due for a refresh (ms since the epoch). */
  readonly refreshAt: number | undefined
}

interface Resolved {
  readonly auth: Auth
  readonly generation: Generation
}

/** How the current user authenticates: resolved once, per request by client-node, or by our exec runner. */
type Source =
  | { readonly kind: "static"; readonly kubeConfig: KubeConfig; readonly user: User | null }
  | { readonly kind: "dynamic"; readonly kubeConfig: KubeConfig; readonly user: User | null }
  | { readonly kind: "exec"; readonly plugin: ExecPlugin; readonly provideClusterInfo: boolean }

export const makeKubeClient = Effect.fnUntraced(function* (
  options: KubeClientOptions,
): Effect.fn.Return<RotatingKubeClient, never, Scope.Scope> {
  const { cluster, kubeConfig } = options
  const requestTimeoutMs = options.requestTimeoutMs ?? 30_000
  const watchInactivityTimeoutMs = options.watchInactivityTimeoutMs ?? 90_000
  const execTimeoutMs = options.execTimeoutMs ?? requestTimeoutMs
  const userAgent = options.userAgent ?? "fleetcheck"
  const clientScope = yield* Effect.scope
  // Plugin runs start from request callbacks: they run with the caller's context (its logger).
  const runFork = Effect.runForkWith(yield* Effect.context<never>())
  const connection = kubeConfig.getCurrentCluster()
  const server = connection?.server
  // Our transport talks to the server directly; a proxy-url would silently be bypassed, so refuse it.
  const proxyUrl = connection?.proxyUrl

  /**
   * client-node's TLS options and auth headers into `opts`: None when that took longer than the request
   * deadline (a hung plugin must not hang the request, or the client's construction, with it). Fails with
   * the raw error, for credentialFailure to describe.
   */
  const applyAuth = (
    kc: KubeConfig,
    opts: https.RequestOptions,
  ): Effect.Effect<Option.Option<void>, unknown> =>
    Effect.tryPromise({ try: () => kc.applyToHTTPSOptions(opts), catch: (e) => e }).pipe(
      Effect.timeoutOption(requestTimeoutMs),
    )

  /** The user's credential source; an exec user is run by runExecPlugin, never by client-node. */
  const sourceOf = (kc: KubeConfig): Source => {
    const user = kc.getCurrentUser()
    const exec = user?.exec as (ExecPlugin & { provideClusterInfo?: boolean }) | undefined
    if (exec && typeof exec.command === "string")
      return { kind: "exec", plugin: exec, provideClusterInfo: exec.provideClusterInfo === true }
    return user?.authProvider
      ? { kind: "dynamic", kubeConfig: kc, user }
      : { kind: "static", kubeConfig: kc, user }
  }
  /** The kubeconfig without its exec user: what client-node may resolve (TLS options only then). */
  const withoutExec = (kc: KubeConfig): KubeConfig => {
    const user = kc.getCurrentUser()
    if (!user?.exec) return kc
    // The same cluster and context, the user's other fields (impersonation, TLS), no exec.
    const stripped = new KubeConfig()
    stripped.loadFromOptions({
      clusters: kc.clusters,
      users: kc.users.map((u) => (u.name === user.name ? { ...u, exec: undefined } : u)),
      contexts: kc.contexts,
      currentContext: kc.getCurrentContext(),
    })
    return stripped
  }

  const base: https.RequestOptions = {}
  let source = sourceOf(kubeConfig)
  const initialAuth = yield* applyAuth(withoutExec(kubeConfig), base).pipe(
    Effect.map(Option.map(() => headersOf(base))),
    Effect.map(Option.getOrUndefined),
    Effect.orElseSucceed(() => undefined),
  )
  const url = server ? parseUrl(server) : undefined
  const configError = !server
    ? "kubeconfig has no current cluster server"
    : !url
      ? "kubeconfig server is not a valid URL"
      : proxyUrl
        ? "kubeconfig proxy-url is not supported"
        : undefined
  // What identifies the connection, from the first kubeconfig; setCredential must not change it.
  const tls = {
    ca: base.ca,
    servername: base.servername,
    rejectUnauthorized: base.rejectUnauthorized,
  }
  const transports = new Set<Transport>()
  yield* Effect.addFinalizer(() =>
    Effect.sync(() => {
      for (const t of transports) t.destroy()
      transports.clear()
    }),
  )
  // applyToHTTPSOptions also sets opts.agent (client-node's own); our transports make their own.
  const newTransport = (cert: https.RequestOptions["cert"], key: https.RequestOptions["key"]) => {
    const t = makeTransport({
      // Unused when the kubeconfig is unusable: every request fails with configError first.
      url: url ?? new URL("https://invalid"),
      tls: { ...tls, cert, key },
      http2: options.http2 ?? true,
      pingIdleMs: options.pingIdleMs ?? 30_000,
      pingTimeoutMs: options.pingTimeoutMs ?? 15_000,
      connectTimeoutMs: requestTimeoutMs,
      replaceSuspectConnection: options.replaceSuspectConnection ?? false,
    })
    transports.add(t)
    return t
  }
  const certKeyOf = (cert: unknown, key: unknown) => `${String(cert ?? "")}\n${String(key ?? "")}`
  let generations = 0
  let current: Generation = {
    id: ++generations,
    // An exec user has no credential until its plugin ran (on the first request).
    auth: source.kind === "exec" ? undefined : initialAuth,
    transport: newTransport(base.cert, base.key),
    certKey: certKeyOf(base.cert, base.key),
    expiry: undefined,
    refreshAt: undefined,
  }
  /** The user's own TLS material and headers (impersonation), under an exec plugin's credential. */
  let userBase = { cert: base.cert, key: base.key, headers: initialAuth?.headers ?? {} }
  let refreshes = 0
  let execFailure: string | undefined
  let execFailures = 0
  let nextExecAt = 0
  /** 401s answered by a refresh in a row, without a request succeeding in between: spaces them out. */
  let rejectedStreak = 0
  let nextRejectedRefreshAt = 0
  let refreshing: Deferred.Deferred<Generation, KubeTransportError> | undefined
  /** Bumped by setCredential: a plugin run started for an older source installs nothing. */
  let sourceEpoch = 0

  /** Requests and watches in flight per transport (generations with one certificate share theirs). */
  const inflight = new Map<Transport, number>()
  const closeIfIdle = (transport: Transport) => {
    if (
      transport !== current.transport &&
      (inflight.get(transport) ?? 0) === 0 &&
      transports.has(transport)
    ) {
      transport.destroy()
      transports.delete(transport)
      inflight.delete(transport)
    }
  }
  const hold = (g: Generation) => {
    inflight.set(g.transport, (inflight.get(g.transport) ?? 0) + 1)
    let released = false
    return () => {
      if (released) return
      released = true
      inflight.set(g.transport, (inflight.get(g.transport) ?? 1) - 1)
      closeIfIdle(g.transport)
    }
  }
  const install = (next: Omit<Generation, "id" | "transport" | "certKey">, cert: unknown, key: unknown) => {
    const previous = current
    const certKey = certKeyOf(cert, key)
    const transport =
      certKey === previous.certKey
        ? previous.transport
        : newTransport(cert as https.RequestOptions["cert"], key as https.RequestOptions["key"])
    current = { ...next, id: ++generations, transport, certKey }
    closeIfIdle(previous.transport)
    refreshes++
    return current
  }

  const basePath = url ? url.pathname.replace(/\/+$/, "") : ""

  const transportError = (method: string, path: string, message: string, code: string | undefined) =>
    new KubeTransportError({ cluster, method, path, message: bounded(message), ...(code ? { code } : {}) })
  const nodeError = (method: string, path: string, e: unknown) =>
    transportError(method, path, errorText(e), errorCode(e))
  const tooLarge = (method: string, path: string, what: string, limit: number) =>
    transportError(method, path, `${what} is larger than ${limit} bytes`, "TooLarge")

  /** Installs what the plugin printed as the current credential. */
  const installExec = (r: ExecCredentialResult, now: number) => {
    const headers: Record<string, string> = { ...userBase.headers }
    delete headers.Authorization
    delete headers.authorization
    if (r.token !== undefined) headers.Authorization = `Bearer ${r.token}`
    const expiry = r.expirationTimestamp
    const lifetime = expiry ? expiry.getTime() - now : undefined
    const refreshAt =
      expiry && lifetime !== undefined
        ? expiry.getTime() - Math.min(300_000, Math.max(0, lifetime) * refreshShare)
        : undefined
    return install(
      { auth: { headers, basicAuth: undefined }, expiry, refreshAt },
      r.clientCertificateData ?? userBase.cert,
      r.clientKeyData ?? userBase.key,
    )
  }

  /**
   * Runs the exec plugin once, in the client's scope (one run at a time; a caller that stops waiting
   * does not stop the run). A failure keeps the current credential and spaces the next run out.
   */
  const refreshExec = (plugin: ExecPlugin, provideClusterInfo: boolean) => {
    if (refreshing) return refreshing
    const d = Deferred.makeUnsafe<Generation, KubeTransportError>()
    refreshing = d
    const epoch = sourceEpoch
    const clusterInfo = provideClusterInfo
      ? {
          server: server ?? "",
          ...(connection?.caData ? { "certificate-authority-data": connection.caData } : {}),
          ...(connection?.tlsServerName ? { "tls-server-name": connection.tlsServerName } : {}),
          ...(options.execClusterConfig !== undefined ? { config: options.execClusterConfig } : {}),
        }
      : undefined
    const run = runExecPlugin({ plugin, timeoutMs: execTimeoutMs, cluster: clusterInfo }).pipe(
      Effect.matchEffect({
        onSuccess: (r) =>
          Effect.suspend(() => {
            if (epoch !== sourceEpoch)
              return Effect.fail(transportError("GET", "", "the credential changed meanwhile", "Credentials"))
            execFailure = undefined
            execFailures = 0
            nextExecAt = 0
            return Effect.succeed(installExec(r, Date.now()))
          }),
        onFailure: (e) =>
          Effect.gen(function* () {
            if (epoch !== sourceEpoch)
              return yield* transportError("GET", "", "the credential changed meanwhile", "Credentials")
            execFailure = e.message
            execFailures++
            nextExecAt = Date.now() + backoffMs(execFailures)
            yield* Effect.logWarning("exec credential plugin failed").pipe(
              Effect.annotateLogs({ cluster, error: e.message, failures: execFailures }),
            )
            return yield* Effect.fail(transportError("GET", "", e.message, "Credentials"))
          }),
      }),
      Effect.onExit((exit) =>
        Effect.sync(() => {
          if (refreshing === d) refreshing = undefined
          Deferred.doneUnsafe(d, exit)
        }),
      ),
    )
    runFork(Effect.forkIn(run, clientScope))
    return d
  }

  const resolveAuth = (method: string, path: string): Effect.Effect<Resolved, KubeTransportError> => {
    if (configError !== undefined) return Effect.fail(transportError(method, path, configError, "Config"))
    const g = current
    const src = source
    if (src.kind === "exec") {
      const now = Date.now()
      const usable = g.auth !== undefined && (g.expiry === undefined || now < g.expiry.getTime())
      const due = g.auth === undefined || (g.refreshAt !== undefined && now >= g.refreshAt)
      if (usable && !due) return Effect.succeed({ auth: g.auth as Auth, generation: g })
      if (usable) {
        // Due before it expires: refresh in the background, keep using it meanwhile.
        if (now >= nextExecAt) refreshExec(src.plugin, src.provideClusterInfo)
        return Effect.succeed({ auth: g.auth as Auth, generation: g })
      }
      if (now < nextExecAt && !refreshing)
        return Effect.fail(
          transportError(
            method,
            path,
            `${execFailure ?? "exec credential plugin failed"}; next run in ${Math.ceil((nextExecAt - now) / 1000)} s`,
            "Credentials",
          ),
        )
      return Deferred.await(refreshExec(src.plugin, src.provideClusterInfo)).pipe(
        Effect.timeoutOption(execTimeoutMs + 1_000),
        Effect.mapError((e) => transportError(method, path, e.message, "Credentials")),
        Effect.flatMap(
          Option.match({
            onNone: () =>
              Effect.fail(
                transportError(
                  method,
                  path,
                  `exec credential plugin did not finish within ${execTimeoutMs} ms`,
                  "Timeout",
                ),
              ),
            onSome: (next) => Effect.succeed({ auth: next.auth as Auth, generation: next }),
          }),
        ),
      )
    }
    if (src.kind === "static" && g.auth !== undefined) return Effect.succeed({ auth: g.auth, generation: g })
    const opts: https.RequestOptions = {}
    return applyAuth(src.kubeConfig, opts).pipe(
      Effect.mapError((e) => transportError(method, path, credentialFailure(src.user, e), "Credentials")),
      Effect.flatMap(
        Option.match({
          onNone: () =>
            Effect.fail(
              transportError(
                method,
                path,
                `credentials not resolved within ${requestTimeoutMs} ms`,
                "Timeout",
              ),
            ),
          onSome: () => Effect.succeed({ auth: headersOf(opts), generation: g }),
        }),
      ),
    )
  }

  /**
   * The member refused a credential (401). An exec credential is run again, once per generation and
   * spaced out while 401s keep coming (never a storm of plugin runs); a request that used an older
   * generation says nothing about the current one.
   */
  const onUnauthorized = (g: Generation) => {
    const src = source
    if (src.kind !== "exec" || g !== current || refreshing) return
    const now = Date.now()
    if (now < nextExecAt || now < nextRejectedRefreshAt) return
    rejectedStreak++
    nextRejectedRefreshAt = now + backoffMs(rejectedStreak)
    refreshExec(src.plugin, src.provideClusterInfo)
  }
  const onAccepted = (g: Generation) => {
    if (g === current) rejectedStreak = 0
  }

  const setCredential = (kc: KubeConfig): Effect.Effect<void, KubeTransportError> =>
    Effect.gen(function* () {
      const c = kc.getCurrentCluster()
      if (
        c?.server !== server ||
        c?.caData !== connection?.caData ||
        c?.tlsServerName !== connection?.tlsServerName ||
        c?.skipTLSVerify !== connection?.skipTLSVerify
      )
        return yield* transportError("GET", "", "the new kubeconfig names another connection", "Config")
      const next = sourceOf(kc)
      const opts: https.RequestOptions = {}
      const applied = yield* applyAuth(withoutExec(kc), opts).pipe(
        Effect.mapError((e) =>
          transportError("GET", "", credentialFailure(kc.getCurrentUser(), e), "Credentials"),
        ),
      )
      if (Option.isNone(applied))
        return yield* transportError(
          "GET",
          "",
          `credentials not resolved within ${requestTimeoutMs} ms`,
          "Timeout",
        )
      source = next
      sourceEpoch++
      refreshing = undefined
      execFailure = undefined
      execFailures = 0
      nextExecAt = 0
      rejectedStreak = 0
      nextRejectedRefreshAt = 0
      const auth = headersOf(opts)
      userBase = { cert: opts.cert, key: opts.key, headers: auth.headers }
      // An exec user starts without a credential: the first request runs the plugin.
      install(
        { auth: next.kind === "exec" ? undefined : auth, expiry: undefined, refreshAt: undefined },
        opts.cert,
        opts.key,
      )
      if (next.kind === "exec") yield* Effect.logDebug("exec credential source swapped in")
    })

  const credentialState = (): CredentialState => ({ expiry: current.expiry, execFailure, refreshes })

  /**
   * Starts the request on the generation's transport; returns the function that abandons it. Node
   * validates header values while building it and throws synchronously (ERR_INVALID_CHAR for a CR/LF or
   * non-Latin-1 value from the kubeconfig or a credential plugin; TLS material can throw too): that
   * becomes a KubeTransportError naming the code only, as the message may quote the value.
   */
  const startRequest = (
    method: string,
    path: string,
    fullPath: string,
    resolved: Resolved,
    extra: Record<string, string>,
    payload: string | undefined,
    fence: (() => boolean) | undefined,
    handlers: {
      readonly onResponse: (res: IncomingResponse) => void
      readonly onError: (e: unknown) => void
      readonly onRefused: () => void
    },
  ): (() => void) | KubeTransportError => {
    const { auth, generation } = resolved
    try {
      return generation.transport.send(
        {
          method,
          path: basePath + fullPath,
          headers: { ...auth.headers, accept: "application/json", "user-agent": userAgent, ...extra },
          basicAuth: auth.basicAuth,
          payload,
          fence,
        },
        handlers,
      )
    } catch (e) {
      const code = plainCode(e) ?? "BadRequest"
      return transportError(method, path, `the request could not be built (${code})`, code)
    }
  }

  const apiError = (method: string, path: string, status: number, text: string, retryAfter?: number) => {
    let reason = ""
    let message = text
    try {
      const s = JSON.parse(text) as { kind?: string; reason?: string; message?: string }
      if (s && typeof s === "object") {
        reason = typeof s.reason === "string" ? s.reason : ""
        if (typeof s.message === "string") message = s.message
      }
    } catch {
      // Not a Status object (a proxy's HTML page, say): keep the text.
    }
    return new KubeApiError({
      cluster,
      method,
      path,
      status,
      reason,
      message: bounded(message || `HTTP ${status}`),
      ...(retryAfter !== undefined ? { retryAfterSeconds: retryAfter } : {}),
    })
  }

  const isSuccess = (status: number) => status >= 200 && status < 300

  const send = (req: KubeRequest, resolved: Resolved) =>
    Effect.callback<RawResponse, KubeTransportError>((resume, signal) => {
      const { method, path } = req
      let payload: string | undefined
      if (req.body !== undefined) payload = typeof req.body === "string" ? req.body : JSON.stringify(req.body)
      const extra: Record<string, string> = {}
      if (payload !== undefined) {
        extra["content-type"] = req.contentType ?? "application/json"
        extra["content-length"] = String(Buffer.byteLength(payload))
      }
      let done = false
      let timer: NodeJS.Timeout | undefined
      let abandon: (() => void) | undefined
      const finish = (e: Effect.Effect<RawResponse, KubeTransportError>) => {
        if (done) return
        done = true
        clearTimeout(timer)
        resume(e)
      }
      const fail = (e: KubeTransportError) => {
        finish(Effect.fail(e))
        abandon?.()
      }
      const timeoutMs = req.timeoutMs ?? requestTimeoutMs
      let received = false
      const onResponse = (res: IncomingResponse) => {
        received = true
        const status = res.status
        const limit = isSuccess(status) ? maxResponseBytes : maxErrorBodyBytes
        readBody(
          res,
          limit,
          (text) =>
            finish(Effect.succeed({ status, text, retryAfter: parseRetryAfter(res.headers["retry-after"]) })),
          () =>
            fail(
              tooLarge(method, path, isSuccess(status) ? "the response" : `the HTTP ${status} body`, limit),
            ),
        )
        res.body.on("error", (e) => finish(Effect.fail(nodeError(method, path, e))))
        // Every response closes, most of them after their body was read: the error (a stack trace each)
        // is made only when nothing finished the request first.
        res.body.on("aborted", () => {
          if (!done) finish(Effect.fail(transportError(method, path, "response aborted", "Closed")))
        })
        res.body.on("close", () => {
          if (!done)
            finish(Effect.fail(transportError(method, path, "connection closed mid-response", "Closed")))
        })
      }
      const started = startRequest(
        method,
        path,
        path + queryString(req.query),
        resolved,
        extra,
        payload,
        req.fence,
        {
          onResponse,
          onError: (e) => finish(Effect.fail(nodeError(method, path, e))),
          onRefused: () =>
            finish(
              Effect.fail(
                transportError(method, path, "refused before sending: the fence closed", "NotLeader"),
              ),
            ),
        },
      )
      if (started instanceof KubeTransportError) return finish(Effect.fail(started))
      abandon = started
      // Refused or failed while starting: nothing is left to wait for.
      if (done) return void started()
      const sentAt = performance.now()
      const timeOut = (silentMs: number) => {
        const waited = Math.round(performance.now() - sentAt)
        const message =
          waited < timeoutMs && Number.isFinite(silentMs)
            ? `no response within ${waited} ms, and nothing else arrived on its connection for ${Math.round(silentMs)} ms`
            : `no response within ${Math.min(waited, timeoutMs)} ms`
        // One connection may carry every request of the member: is it still alive? Asked before the
        // failure, which may resume a caller that sends its next request at once.
        resolved.generation.transport.suspect(Math.min(waited, silentMs))
        fail(transportError(method, path, message, "Timeout"))
      }
      const silenceMs = req.silenceTimeoutMs
      if (silenceMs === undefined || silenceMs >= timeoutMs)
        timer = setTimeout(() => timeOut(timeoutMs), timeoutMs)
      else {
        // Checked every silenceMs: the request fails once its connection has been silent that long (its
        // own answer started arriving counts), or at its deadline.
        const check = () => {
          const left = timeoutMs - (performance.now() - sentAt)
          const silent = received ? 0 : resolved.generation.transport.silentMs()
          if (left <= 0 || silent >= silenceMs) return timeOut(silent)
          timer = setTimeout(check, Math.min(left, silenceMs - silent))
        }
        timer = setTimeout(check, silenceMs)
      }
      signal.addEventListener(
        "abort",
        () => {
          done = true
          clearTimeout(timer)
          abandon?.()
        },
        { once: true },
      )
    })

  /** One attempt: its credential, the exchange, and what the answer says about that credential. */
  const exchange = (req: KubeRequest, timeoutMs: number) =>
    Effect.gen(function* () {
      const resolved = yield* resolveAuth(req.method, req.path)
      const release = hold(resolved.generation)
      const res = yield* send({ ...req, timeoutMs }, resolved).pipe(Effect.ensuring(Effect.sync(release)))
      if (res.status === 401) onUnauthorized(resolved.generation)
      else onAccepted(resolved.generation)
      return res
    })

  /**
   * The request, sent again while the server refuses it with a Retry-After (throttleRetryWaitMs), all
   * within its one deadline; the wait is an interruptible sleep.
   */
  const exchangeRetryingThrottled = (req: KubeRequest) =>
    Effect.gen(function* () {
      const deadline = (yield* Clock.currentTimeMillis) + (req.timeoutMs ?? requestTimeoutMs)
      const remainingMs = () => Effect.map(Clock.currentTimeMillis, (now) => deadline - now)
      for (let retries = 0; ; retries++) {
        const res = yield* exchange(req, Math.max(1, yield* remainingMs()))
        if (isSuccess(res.status)) return { res, retries }
        const waitMs = throttleRetryWaitMs(
          res.status,
          res.retryAfter,
          retries,
          yield* remainingMs(),
          yield* Random.next,
        )
        if (waitMs === undefined) return { res, retries }
        options.onThrottleRetry?.(req.method, res.status)
        yield* Effect.logDebug("request throttled; sending it again after Retry-After").pipe(
          Effect.annotateLogs({
            cluster,
            method: req.method,
            path: req.path,
            status: res.status,
            retryAfterSeconds: res.retryAfter,
            waitMs,
            retry: retries + 1,
          }),
        )
        yield* Effect.sleep(waitMs)
      }
    })

  const request = <T = unknown>(req: KubeRequest): Effect.Effect<T, KubeApiError | KubeTransportError> =>
    Effect.gen(function* () {
      const { res, retries } = yield* exchangeRetryingThrottled(req)
      yield* Effect.annotateCurrentSpan("http.response.status_code", res.status)
      if (retries > 0) yield* Effect.annotateCurrentSpan("http.request.resend_count", retries)
      if (!isSuccess(res.status)) {
        return yield* apiError(req.method, req.path, res.status, res.text, res.retryAfter)
      }
      if (res.text === "" || req.discardBody === true) return undefined as T
      return yield* Effect.try({
        try: () => JSON.parse(res.text) as T,
        catch: (e) =>
          transportError(req.method, req.path, `invalid JSON in response: ${errorText(e)}`, "BadResponse"),
      })
    }).pipe(
      Effect.withSpan(
        "kube.request",
        {
          kind: "client",
          attributes: {
            "http.request.method": req.method,
            "url.path": req.path,
            "k8s.cluster.name": cluster,
          },
        },
        // Effect records where a span was made by building an Error (a stack capture per request, 2% of
        // a converged hub's main thread at 1,000 members); for this span the place is always this line.
        { captureStackTrace: false },
      ),
    )

  /**
   * Opens a watch whose events and end go into `queue`; returns the function that aborts it. Lines are
   * split on the newline byte (never inside a UTF-8 sequence) and decoded whole; a partial line is kept
   * as the chunks it came in, up to maxWatchFrameBytes.
   */
  const openWatch = (
    queue: Queue.Queue<WatchEvent, KubeApiError | KubeTransportError | Cause.Done>,
    path: string,
    query: Record<string, string>,
    resolved: Resolved,
    watchOptions: WatchOptions | undefined,
  ): (() => void) => {
    const release = hold(resolved.generation)
    const inactivityMs = watchOptions?.inactivityTimeoutMs ?? watchInactivityTimeoutMs
    let ended = false
    let timer: NodeJS.Timeout | undefined
    let abandon: (() => void) | undefined
    const stop = () => {
      ended = true
      clearTimeout(timer)
      abandon?.()
      release()
    }
    const failCause = (cause: Cause.Cause<KubeApiError | KubeTransportError>) => {
      if (ended) return
      stop()
      Queue.failCauseUnsafe(queue, cause)
    }
    const fail = (e: KubeApiError | KubeTransportError) => failCause(Cause.fail(e))
    // Until the response headers arrive the request deadline applies (a hung server that still
    // accepts connections); after them, the inactivity timeout (a silent or half-open stream), pushed
    // back by every chunk. Refreshed, not replaced: a new timer per chunk lived for the seconds between
    // a member's events, long enough to be promoted to the old generation each time.
    let inactivity: NodeJS.Timeout | undefined
    const arm = () => {
      if (inactivity !== undefined) {
        inactivity.refresh()
        return
      }
      clearTimeout(timer)
      inactivity = timer = setTimeout(() => {
        resolved.generation.transport.suspect(inactivityMs)
        fail(transportError("GET", path, `watch inactive for ${inactivityMs} ms`, "WatchInactive"))
      }, inactivityMs)
    }
    const parseLine = (bytes: Buffer): boolean => {
      const text = bytes.toString("utf8")
      if (text.trim() === "") return true
      let ev: WatchEvent
      try {
        ev = JSON.parse(text) as WatchEvent
      } catch (e) {
        fail(
          transportError(
            "GET",
            path,
            `unparseable watch line (${bytes.length} bytes): ${errorText(e)}`,
            "BadResponse",
          ),
        )
        return false
      }
      if (!ev || typeof ev.type !== "string") {
        fail(
          transportError(
            "GET",
            path,
            `watch line without an event type (${bytes.length} bytes)`,
            "BadResponse",
          ),
        )
        return false
      }
      Queue.offerUnsafe(queue, ev)
      return true
    }
    const onResponse = (res: IncomingResponse) => {
      const status = res.status
      if (status === 401) onUnauthorized(resolved.generation)
      if (status !== 200) {
        readBody(
          res,
          maxErrorBodyBytes,
          (text) => fail(apiError("GET", path, status, text, parseRetryAfter(res.headers["retry-after"]))),
          () => fail(tooLarge("GET", path, `the HTTP ${status} body`, maxErrorBodyBytes)),
        )
        res.body.on("error", (e) => fail(nodeError("GET", path, e)))
        res.body.on("close", () => fail(transportError("GET", path, `HTTP ${status} body cut off`, "Closed")))
        return
      }
      onAccepted(resolved.generation)
      arm()
      try {
        watchOptions?.onConnected?.()
      } catch (e) {
        // The caller's bug: a defect of this stream, not an exception out of a socket callback.
        return failCause(Cause.die(e))
      }
      let partial: Buffer[] = []
      let partialBytes = 0
      const frameTooLarge = () => fail(tooLarge("GET", path, "a watch line", maxWatchFrameBytes))
      res.body.on("data", (chunk: Buffer) => {
        if (ended) return
        arm()
        let start = 0
        let nl = chunk.indexOf(0x0a)
        while (nl !== -1) {
          const size = partialBytes + nl - start
          if (size > maxWatchFrameBytes) return frameTooLarge()
          const piece = chunk.subarray(start, nl)
          const line = partialBytes === 0 ? piece : Buffer.concat([...partial, piece], size)
          partial = []
          partialBytes = 0
          if (!parseLine(line)) return
          start = nl + 1
          nl = chunk.indexOf(0x0a, start)
        }
        if (start === chunk.length) return
        partialBytes += chunk.length - start
        if (partialBytes > maxWatchFrameBytes) return frameTooLarge()
        partial.push(start === 0 ? chunk : chunk.subarray(start))
      })
      res.body.on("end", () => {
        if (ended) return
        if (partialBytes > 0 && !parseLine(Buffer.concat(partial, partialBytes))) return
        stop()
        Queue.endUnsafe(queue)
      })
      res.body.on("aborted", () => fail(transportError("GET", path, "watch response aborted", "Closed")))
      res.body.on("error", (e) => fail(nodeError("GET", path, e)))
      res.body.on("close", () =>
        fail(transportError("GET", path, "watch connection closed mid-stream", "Closed")),
      )
    }
    const started = startRequest(
      "GET",
      path,
      path + queryString({ ...query, watch: "true" }),
      resolved,
      {},
      undefined,
      undefined,
      {
        onResponse,
        onError: (e) => fail(nodeError("GET", path, e)),
        onRefused: () => fail(transportError("GET", path, "refused before sending", "NotLeader")),
      },
    )
    if (started instanceof KubeTransportError) {
      fail(started)
      return stop
    }
    abandon = started
    if (ended) {
      started()
      return stop
    }
    timer = setTimeout(() => {
      resolved.generation.transport.suspect(requestTimeoutMs)
      fail(transportError("GET", path, `no response within ${requestTimeoutMs} ms`, "Timeout"))
    }, requestTimeoutMs)
    return stop
  }

  const watch = (
    path: string,
    query: Record<string, string>,
    watchOptions?: WatchOptions,
  ): Stream.Stream<WatchEvent, KubeApiError | KubeTransportError> =>
    Stream.callback<WatchEvent, KubeApiError | KubeTransportError>((queue) =>
      Effect.gen(function* () {
        const resolved = yield* resolveAuth("GET", path)
        const stop = openWatch(queue, path, query, resolved, watchOptions)
        // Interruption (or the consumer stopping) aborts the request.
        yield* Effect.addFinalizer(() => Effect.sync(stop))
      }),
    )

  return { cluster, request, watch, setCredential, credentialState }
})
