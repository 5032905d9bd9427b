// A small Kubernetes REST client: @kubernetes/client-node's KubeConfig supplies the server, TLS material
// and auth headers; the HTTP is ours (node:https, one keep-alive Agent per member), because the
// library's fetch-based watch cannot request bookmarks, swallows parse errors and has no inactivity
// timeout we control (see STYLE.md, "Known traps").
import * as http from "node:http"
import * as https from "node:https"
import type { KubeConfig } from "@kubernetes/client-node"
import { Cause, Effect, Queue, Schema, type Scope, Stream } from "effect"

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
   * What went wrong: a Node error code (ECONNREFUSED, ECONNRESET, ...) or one of Timeout (no response
   * in time), WatchInactive (a watch went silent), Closed (connection lost mid-response), BadResponse
   * (unparseable body or watch line), Config (unusable kubeconfig), Credentials (auth plugin failed).
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
  /** Whole-request deadline; default the client's requestTimeoutMs. */
  readonly timeoutMs?: number
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

const headersOf = (opts: https.RequestOptions): Auth => {
  const headers: Record<string, string> = {}
  for (const [k, v] of Object.entries(opts.headers ?? {})) if (typeof v === "string") headers[k] = v
  return { headers, basicAuth: typeof opts.auth === "string" ? opts.auth : undefined }
}

const errorCode = (e: unknown): string | undefined => {
  const code = (e as NodeJS.ErrnoException | undefined)?.code
  return typeof code === "string" ? code : undefined
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

export const makeKubeClient = Effect.fnUntraced(function* (
  options: KubeClientOptions,
): Effect.fn.Return<KubeClient, never, Scope.Scope> {
  const { cluster, kubeConfig } = options
  const requestTimeoutMs = options.requestTimeoutMs ?? 30_000
  const watchInactivityTimeoutMs = options.watchInactivityTimeoutMs ?? 90_000
  const userAgent = options.userAgent ?? "fleetcheck"
  const server = kubeConfig.getCurrentCluster()?.server
  // Our Agent talks to the server directly; a proxy-url would silently be bypassed, so refuse it.
  const proxyUrl = kubeConfig.getCurrentCluster()?.proxyUrl
  const user = kubeConfig.getCurrentUser()
  // exec and auth-provider tokens expire: ask the KubeConfig for headers on every request (its
  // authenticators cache the token until expiry). Static credentials are resolved once.
  const dynamicAuth = Boolean(user?.exec || user?.authProvider)

  const base: https.RequestOptions = {}
  const initialAuth = yield* Effect.promise(() =>
    kubeConfig.applyToHTTPSOptions(base).then(
      () => ({ ok: true as const, auth: headersOf(base) }),
      (e: unknown) => ({ ok: false as const, error: errorText(e) }),
    ),
  )
  const url = server ? parseUrl(server) : undefined
  const configError = !server
    ? "kubeconfig has no current cluster server"
    : !url
      ? "kubeconfig server is not a valid URL"
      : proxyUrl
        ? "kubeconfig proxy-url is not supported"
        : undefined
  const isHttps = url?.protocol !== "http:"
  // applyToHTTPSOptions also sets opts.agent (client-node's own); we replace it with a keep-alive one.
  const agentOptions: https.AgentOptions = {
    keepAlive: true,
    keepAliveMsecs: 30_000,
    ca: base.ca,
    cert: base.cert,
    key: base.key,
    servername: base.servername,
    ...(base.rejectUnauthorized !== undefined ? { rejectUnauthorized: base.rejectUnauthorized } : {}),
  }
  const agent = yield* Effect.acquireRelease(
    Effect.sync(() => (isHttps ? new https.Agent(agentOptions) : new http.Agent({ keepAlive: true }))),
    (a) => Effect.sync(() => a.destroy()),
  )
  const doRequest = isHttps ? https.request : http.request
  const basePath = url ? url.pathname.replace(/\/+$/, "") : ""

  const transportError = (method: string, path: string, message: string, code: string | undefined) =>
    new KubeTransportError({ cluster, method, path, message: bounded(message), ...(code ? { code } : {}) })
  const nodeError = (method: string, path: string, e: unknown) =>
    transportError(method, path, errorText(e), errorCode(e))

  const resolveAuth = (method: string, path: string): Effect.Effect<Auth, KubeTransportError> => {
    if (configError !== undefined) return Effect.fail(transportError(method, path, configError, "Config"))
    if (!dynamicAuth && initialAuth.ok) return Effect.succeed(initialAuth.auth)
    return Effect.tryPromise({
      try: async () => {
        const opts: https.RequestOptions = {}
        await kubeConfig.applyToHTTPSOptions(opts)
        return headersOf(opts)
      },
      catch: (e) => transportError(method, path, `resolving credentials: ${errorText(e)}`, "Credentials"),
    })
  }

  const requestOptions = (method: string, fullPath: string, auth: Auth, extra: Record<string, string>) => ({
    protocol: url!.protocol,
    hostname: url!.hostname.replace(/^\[|\]$/g, ""),
    port: url!.port || (isHttps ? 443 : 80),
    path: basePath + fullPath,
    method,
    agent,
    ...(auth.basicAuth ? { auth: auth.basicAuth } : {}),
    headers: { ...auth.headers, accept: "application/json", "user-agent": userAgent, ...extra },
  })

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

  const send = (req: KubeRequest, auth: Auth) =>
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
      const finish = (e: Effect.Effect<RawResponse, KubeTransportError>) => {
        if (done) return
        done = true
        clearTimeout(timer)
        resume(e)
      }
      const timeoutMs = req.timeoutMs ?? requestTimeoutMs
      const r = doRequest(requestOptions(method, path + queryString(req.query), auth, extra), (res) => {
        const chunks: Buffer[] = []
        res.on("data", (c: Buffer) => chunks.push(c))
        res.on("end", () =>
          finish(
            Effect.succeed({
              status: res.statusCode ?? 0,
              text: Buffer.concat(chunks).toString("utf8"),
              retryAfter: parseRetryAfter(res.headers["retry-after"]),
            }),
          ),
        )
        res.on("error", (e) => finish(Effect.fail(nodeError(method, path, e))))
        res.on("aborted", () =>
          finish(Effect.fail(transportError(method, path, "response aborted", "Closed"))),
        )
        res.on("close", () =>
          finish(Effect.fail(transportError(method, path, "connection closed mid-response", "Closed"))),
        )
      })
      timer = setTimeout(() => {
        finish(Effect.fail(transportError(method, path, `no response within ${timeoutMs} ms`, "Timeout")))
        r.destroy()
      }, timeoutMs)
      r.on("error", (e) => finish(Effect.fail(nodeError(method, path, e))))
      signal.addEventListener(
        "abort",
        () => {
          done = true
          clearTimeout(timer)
          r.destroy()
        },
        { once: true },
      )
      r.end(payload)
    })

  const request = <T = unknown>(req: KubeRequest): Effect.Effect<T, KubeApiError | KubeTransportError> =>
    Effect.gen(function* () {
      const auth = yield* resolveAuth(req.method, req.path)
      const res = yield* send(req, auth)
      yield* Effect.annotateCurrentSpan("http.response.status_code", res.status)
      if (res.status < 200 || res.status >= 300) {
        return yield* apiError(req.method, req.path, res.status, res.text, res.retryAfter)
      }
      if (res.text === "") return undefined as T
      return yield* Effect.try({
        try: () => JSON.parse(res.text) as T,
        catch: (e) =>
          transportError(req.method, req.path, `invalid JSON in response: ${errorText(e)}`, "BadResponse"),
      })
    }).pipe(
      Effect.withSpan("kube.request", {
        kind: "client",
        attributes: { "http.request.method": req.method, "url.path": req.path, "k8s.cluster.name": cluster },
      }),
    )

  const watch = (
    path: string,
    query: Record<string, string>,
    watchOptions?: WatchOptions,
  ): Stream.Stream<WatchEvent, KubeApiError | KubeTransportError> =>
    Stream.callback<WatchEvent, KubeApiError | KubeTransportError>((queue) =>
      Effect.gen(function* () {
        const auth = yield* resolveAuth("GET", path)
        const inactivityMs = watchOptions?.inactivityTimeoutMs ?? watchInactivityTimeoutMs
        let ended = false
        let timer: NodeJS.Timeout | undefined
        let r: http.ClientRequest | undefined
        const stop = () => {
          ended = true
          clearTimeout(timer)
          r?.destroy()
        }
        const fail = (e: KubeApiError | KubeTransportError) => {
          if (ended) return
          stop()
          Queue.failCauseUnsafe(queue, Cause.fail(e))
        }
        // Until the response headers arrive the request deadline applies (a hung server that still
        // accepts connections); after them, the inactivity timeout (a silent or half-open stream).
        const arm = () => {
          clearTimeout(timer)
          timer = setTimeout(
            () => fail(transportError("GET", path, `watch inactive for ${inactivityMs} ms`, "WatchInactive")),
            inactivityMs,
          )
        }
        r = doRequest(
          requestOptions("GET", path + queryString({ ...query, watch: "true" }), auth, {}),
          (res) => {
            const status = res.statusCode ?? 0
            if (status !== 200) {
              const chunks: Buffer[] = []
              res.on("data", (c: Buffer) => chunks.push(c))
              res.on("end", () =>
                fail(
                  apiError(
                    "GET",
                    path,
                    status,
                    Buffer.concat(chunks).toString("utf8"),
                    parseRetryAfter(res.headers["retry-after"]),
                  ),
                ),
              )
              return
            }
            arm()
            watchOptions?.onConnected?.()
            res.setEncoding("utf8") // a StringDecoder: multi-byte characters split across chunks stay whole
            let buffer = ""
            const parseLine = (line: string): boolean => {
              if (line.trim() === "") return true
              let ev: WatchEvent
              try {
                ev = JSON.parse(line) as WatchEvent
              } catch (e) {
                fail(
                  transportError(
                    "GET",
                    path,
                    `unparseable watch line (${line.length} bytes): ${errorText(e)}`,
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
                    `watch line without an event type (${line.length} bytes)`,
                    "BadResponse",
                  ),
                )
                return false
              }
              Queue.offerUnsafe(queue, ev)
              return true
            }
            res.on("data", (chunk: string) => {
              if (ended) return
              arm()
              // Only the new chunk can hold the next newline: no rescans of a long partial line.
              const firstNl = chunk.indexOf("\n")
              if (firstNl === -1) {
                buffer += chunk
                return
              }
              let nl = buffer.length + firstNl
              buffer += chunk
              let start = 0
              while (nl !== -1) {
                if (!parseLine(buffer.slice(start, nl))) return
                start = nl + 1
                nl = buffer.indexOf("\n", start)
              }
              buffer = buffer.slice(start)
            })
            res.on("end", () => {
              if (ended) return
              if (buffer !== "" && !parseLine(buffer)) return
              ended = true
              clearTimeout(timer)
              Queue.endUnsafe(queue)
            })
            res.on("aborted", () => fail(transportError("GET", path, "watch response aborted", "Closed")))
            res.on("error", (e) => fail(nodeError("GET", path, e)))
            res.on("close", () =>
              fail(transportError("GET", path, "watch connection closed mid-stream", "Closed")),
            )
          },
        )
        r.on("error", (e) => fail(nodeError("GET", path, e)))
        r.end()
        timer = setTimeout(
          () => fail(transportError("GET", path, `no response within ${requestTimeoutMs} ms`, "Timeout")),
          requestTimeoutMs,
        )
        // Interruption (or the consumer stopping) aborts the request.
        yield* Effect.addFinalizer(() => Effect.sync(stop))
      }),
    )

  return { cluster, request, watch }
})
