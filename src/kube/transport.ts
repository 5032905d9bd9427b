// The connection of one member credential to its API server (kube/client.ts keeps one per credential).
// Over TLS it offers HTTP/2 by ALPN, as client-go does: when the server selects h2, every request and
// watch of that credential is a stream of ONE TLS connection, instead of HTTP/1.1's one connection per
// request in flight (whose native memory glibc keeps after a burst; ADR 0013). A plain http:// server,
// a server (or proxy) that does not select h2, or HTTP/2 turned off gets HTTP/1.1 through a keep-alive
// Agent, as before.
//
// One connection carries every stream of the member, so a dead one would stall them all: the session is
// PINGed when nothing arrived on it for pingIdleMs, and at once when a request or watch on it went
// unanswered past its deadline (suspect) while nothing else arrived on it either; when pingTimeoutMs pass
// after the PING with nothing at all received, it is destroyed: its streams fail, and the next request
// opens a new connection. A connection that still delivers frames is alive, only slow to answer some
// requests, and is kept (Go's transport, client-go's, PINGs only a silent connection too). After a
// GOAWAY the streams the server accepted finish and new ones go to a new connection; streams still
// waiting for a slot there are sent on the new one.
import * as http from "node:http"
import * as http2 from "node:http2"
import * as https from "node:https"
import { isIP } from "node:net"
import type { Readable } from "node:stream"
import * as tls from "node:tls"

export interface TransportTls {
  readonly ca: https.RequestOptions["ca"]
  readonly cert: https.RequestOptions["cert"]
  readonly key: https.RequestOptions["key"]
  /** tls-server-name of the kubeconfig. */
  readonly servername: string | undefined
  readonly rejectUnauthorized: boolean | undefined
}

export interface TransportOptions {
  readonly url: URL
  readonly tls: TransportTls
  /** Offer HTTP/2 to a TLS server (ALPN h2, then http/1.1). */
  readonly http2: boolean
  /** PING an HTTP/2 connection on which nothing arrived for this long (client-go: ReadIdleTimeout 30 s). */
  readonly pingIdleMs: number
  /** A PING unanswered this long closes the connection (client-go: PingTimeout 15 s). */
  readonly pingTimeoutMs: number
  /** How long opening an HTTP/2 connection (TCP and TLS) may take. */
  readonly connectTimeoutMs: number
  /**
   * On suspect(), also stop sending on the HTTP/2 connection at once: new requests open a new one (the
   * suspect one is PINGed as usual, if silent, and closes once its streams end). For a client whose few requests
   * cannot wait out a PING timeout (the hub's Leases); others would open a connection per slow answer.
   */
  readonly replaceSuspectConnection: boolean
}

export interface OutgoingRequest {
  readonly method: string
  /** Path and query, the server URL's own path prefix included. */
  readonly path: string
  readonly headers: Readonly<Record<string, string>>
  /** user:password of a basic-auth user. */
  readonly basicAuth: string | undefined
  readonly payload: string | undefined
  /** Asked as the request's bytes go to a connected socket; false sends nothing (see KubeRequest.fence). */
  readonly fence: (() => boolean) | undefined
}

export interface IncomingResponse {
  readonly status: number
  readonly headers: http.IncomingHttpHeaders
  /** The body as node streams it: 'data', 'end', 'error', 'close', and 'aborted' when cut off. */
  readonly body: Readable
}

export interface ResponseHandlers {
  readonly onResponse: (res: IncomingResponse) => void
  /** The request failed before its response, or its connection failed under it (a node error). */
  readonly onError: (e: unknown) => void
  /** The fence said no: nothing was sent. */
  readonly onRefused: () => void
}

export interface Transport {
  /**
   * Starts a request; returns the function that abandons it. Throws, before anything is sent, when the
   * request cannot be built (a header value with CR/LF or outside Latin-1: ERR_INVALID_CHAR).
   */
  send(req: OutgoingRequest, handlers: ResponseHandlers): () => void
  /**
   * A request or watch on this transport received nothing for `silentMs` (its deadline): PING, now, each
   * connection that received nothing in that time either. One that did is alive, and is left alone.
   */
  suspect(silentMs: number): void
  /**
   * How long nothing arrived on the connection new requests go to (HTTP/2): 0 while it delivers frames.
   * Over HTTP/1.1, where a request has a connection of its own, Infinity: only a request's own answer
   * tells that its server is alive.
   */
  silentMs(): number
  /** Closes every connection at once (their requests fail). */
  destroy(): void
}

/** A stream may receive this much before the hub reads it; the connection, all its streams' worth. */
const streamWindowBytes = 4 * 1024 * 1024
const connectionWindowBytes = 32 * 1024 * 1024
/** nghttp2's bound on the session's own buffers, in MB (node's default 10); a response is up to 64 MiB. */
const maxSessionMemoryMb = 64
/** Streams opened before the server's SETTINGS say how many it allows (kube-apiserver announces 100 unless --http2-max-streams-per-connection says otherwise). */
const initialMaxStreams = 100

/**
 * Drops every listener of a closed stream (its own and the client's: they hold the request, its
 * handlers and the waiting fiber). Node's stream objects outlive the young generation (their native
 * half keeps them until a major GC), and whatever their listeners reach is promoted with them (with
 * the hub's client at 50 requests a second, what a request left to the old generation fell from about
 * 9 to 6.8 KB). 'close' is a stream's last event; an error listener stays so that nothing emitted
 * afterwards could throw.
 */
const releaseListeners = (stream: http2.ClientHttp2Stream) => {
  stream.removeAllListeners()
  stream.on("error", ignoreError)
}
const ignoreError = () => {}

/** A node-style error: the client reports its code (KubeTransportError.code) and message. */
const codedError = (code: string, message: string) => Object.assign(new Error(message), { code })

/**
 * The TLS context of a transport's connections, or undefined when the material does not load (then each
 * connection tries, and its request fails with the error).
 */
const secureContextOf = (t: TransportTls): tls.SecureContext | undefined => {
  try {
    return tls.createSecureContext({ ca: t.ca, cert: t.cert, key: t.key })
  } catch {
    return undefined
  }
}

interface Pending {
  readonly req: OutgoingRequest
  readonly headers: http2.OutgoingHttpHeaders
  readonly handlers: ResponseHandlers
  abandoned: boolean
  /** Set once the request was handed to a protocol: abandons it there. */
  abort: (() => void) | undefined
  /** Sent again once after the server refused its stream unprocessed (REFUSED_STREAM). */
  retried: boolean
}

interface Session {
  readonly h2: http2.ClientHttp2Session
  /** The server's SETTINGS arrived: until then its stream limit is unknown and streams wait. */
  ready: boolean
  /** Streams open on it; more wait in `queue` up to the server's MAX_CONCURRENT_STREAMS. */
  active: number
  maxStreams: number
  readonly queue: Pending[]
  /** performance.now() of the last response headers, data, SETTINGS or PING answer received. */
  lastReceived: number
  pinging: boolean
  idleTimer: NodeJS.Timeout | undefined
  /** GOAWAY received, PING unanswered or closed: no new streams. */
  retired: boolean
  error: unknown
}

export const makeTransport = (options: TransportOptions): Transport => {
  const { url } = options
  const isHttps = url.protocol !== "http:"
  const hostname = url.hostname.replace(/^\[|\]$/g, "")
  const port = Number(url.port || (isHttps ? 443 : 80))
  const t = options.tls
  // One TLS context shared by every connection: given only ca, cert and key, node builds one (its own
  // copy of the CA store) per connection.
  const secureContext = isHttps ? secureContextOf(t) : undefined
  const servername = t.servername ?? (isIP(hostname) === 0 ? hostname : undefined)
  const tlsOptions = {
    ca: t.ca,
    cert: t.cert,
    key: t.key,
    ...(secureContext !== undefined ? { secureContext } : {}),
    ...(t.rejectUnauthorized !== undefined ? { rejectUnauthorized: t.rejectUnauthorized } : {}),
  }
  let protocol: "detect" | "h2" | "http/1.1" = isHttps && options.http2 ? "detect" : "http/1.1"
  let destroyed = false

  // HTTP/1.1: node's keep-alive Agent, made on first use.
  let agent: http.Agent | undefined
  const agentOf = (): http.Agent =>
    (agent ??= isHttps
      ? new https.Agent({
          keepAlive: true,
          keepAliveMsecs: 30_000,
          ...tlsOptions,
          servername: t.servername,
        })
      : new http.Agent({ keepAlive: true }))

  const sendHttp1 = (req: OutgoingRequest, handlers: ResponseHandlers): (() => void) => {
    const r = (isHttps ? https.request : http.request)(
      {
        protocol: url.protocol,
        hostname,
        port,
        path: req.path,
        method: req.method,
        agent: agentOf(),
        ...(req.basicAuth !== undefined ? { auth: req.basicAuth } : {}),
        headers: req.headers,
      },
      (res) => handlers.onResponse({ status: res.statusCode ?? 0, headers: res.headers, body: res }),
    )
    r.on("error", handlers.onError)
    const fence = req.fence
    if (fence === undefined) r.end(req.payload)
    else {
      // Nothing is written until the socket can take the bytes at once: headers and body go out together
      // at r.end, right after the fence said yes.
      const sendIfAllowed = () => {
        if (r.destroyed) return
        if (fence()) return void r.end(req.payload)
        handlers.onRefused()
        r.destroy()
      }
      r.once("socket", (socket) => {
        if (r.reusedSocket) return sendIfAllowed()
        socket.once(isHttps ? "secureConnect" : "connect", sendIfAllowed)
      })
    }
    return () => r.destroy()
  }

  // HTTP/2: the session new streams go to, and those still finishing after a GOAWAY.
  let current: Session | undefined
  const sessions = new Set<Session>()
  let connecting: { readonly socket: tls.TLSSocket; readonly waiting: Pending[] } | undefined

  const retire = (s: Session) => {
    s.retired = true
    if (current === s) current = undefined
    // Requests that never got a stream here are sent on another connection.
    for (const p of s.queue.splice(0)) if (!p.abandoned) dispatch(p)
    if (s.active === 0 && !s.h2.closed) s.h2.close()
  }

  const schedulePing = (s: Session, delayMs: number) => {
    clearTimeout(s.idleTimer)
    s.idleTimer = setTimeout(() => {
      const idleMs = performance.now() - s.lastReceived
      if (idleMs < options.pingIdleMs) schedulePing(s, options.pingIdleMs - idleMs)
      else ping(s)
    }, delayMs)
    s.idleTimer.unref()
  }

  const ping = (s: Session) => {
    if (s.pinging || s.h2.destroyed) return
    s.pinging = true
    const sentAt = performance.now()
    // Destroys the session once pingTimeoutMs passed after the PING with nothing received: an answer, or
    // any frame, read while the event loop was busy (the timer firing late) counts, so the decision waits
    // for the turn's I/O. Frames still arriving mean a live connection whose server is slow to answer
    // the PING (a busy server): the wait goes on from the last of them.
    const decide = () => {
      if (!s.pinging || s.h2.destroyed) return
      const silentMs = performance.now() - Math.max(sentAt, s.lastReceived)
      if (silentMs < options.pingTimeoutMs) return void arm(options.pingTimeoutMs - silentMs)
      s.retired = true
      if (current === s) current = undefined
      s.h2.destroy(
        codedError(
          "PingTimeout",
          `the API server did not answer a PING, nor send anything else, within ${options.pingTimeoutMs} ms; connection closed`,
        ),
      )
    }
    let timer: NodeJS.Timeout | undefined
    const arm = (delayMs: number) => {
      timer = setTimeout(() => setImmediate(decide), delayMs)
      timer.unref()
    }
    arm(options.pingTimeoutMs)
    const sent = s.h2.ping((err) => {
      clearTimeout(timer)
      s.pinging = false
      if (err) return
      s.lastReceived = performance.now()
      schedulePing(s, options.pingIdleMs)
    })
    if (!sent) {
      clearTimeout(timer)
      s.pinging = false
    }
  }

  const open = (socket: tls.TLSSocket): Session => {
    const h2 = http2.connect(`https://${url.host}`, {
      createConnection: () => socket,
      settings: { enablePush: false, initialWindowSize: streamWindowBytes },
      maxSessionMemory: maxSessionMemoryMb,
    })
    const s: Session = {
      h2,
      ready: false,
      active: 0,
      maxStreams: initialMaxStreams,
      queue: [],
      lastReceived: performance.now(),
      pinging: false,
      idleTimer: undefined,
      retired: false,
      error: undefined,
    }
    sessions.add(s)
    current = s
    // Like the Agent's sockets: a connection keeps the process running only while it carries a stream.
    h2.unref()
    h2.setLocalWindowSize(connectionWindowBytes)
    h2.on("remoteSettings", (settings) => {
      s.lastReceived = performance.now()
      if (settings.maxConcurrentStreams !== undefined)
        s.maxStreams = Math.max(1, settings.maxConcurrentStreams)
      s.ready = true
      startQueued(s)
    })
    // Every stream gets the error too; the session keeps it for the streams still queued.
    h2.on("error", (e) => {
      s.error = e
    })
    h2.on("goaway", () => retire(s))
    h2.on("close", () => {
      clearTimeout(s.idleTimer)
      sessions.delete(s)
      retire(s)
    })
    schedulePing(s, options.pingIdleMs)
    return s
  }

  const startQueued = (s: Session) => {
    while (s.active < s.maxStreams && !s.retired) {
      const p = s.queue.shift()
      if (p === undefined) return
      if (!p.abandoned) startStream(s, p)
    }
  }

  const startStream = (s: Session, p: Pending): void => {
    if (s.retired) return void dispatch(p)
    // Past the server's limit nghttp2 would hold the stream and send it later, after the fence's answer;
    // before its SETTINGS the limit is not known (a server may refuse streams past it).
    if (!s.ready || s.active >= s.maxStreams) return void s.queue.push(p)
    const { req, handlers } = p
    if (req.fence !== undefined && !req.fence()) return void handlers.onRefused()
    let stream: http2.ClientHttp2Stream
    try {
      stream = s.h2.request(p.headers, { endStream: req.payload === undefined })
    } catch (e) {
      return void handlers.onError(e)
    }
    if (s.active++ === 0) s.h2.ref()
    let responded = false
    p.abort = () => {
      if (!stream.closed) stream.close(http2.constants.NGHTTP2_CANCEL)
    }
    const touch = () => {
      s.lastReceived = performance.now()
    }
    stream.on("response", (headers) => {
      responded = true
      touch()
      stream.on("data", touch)
      handlers.onResponse({ status: Number(headers[":status"] ?? 0), headers, body: stream })
    })
    // A stream the server refused unprocessed (past its limit, or after its GOAWAY) is safe to send again.
    const refused = () =>
      !responded && !p.retried && stream.rstCode === http2.constants.NGHTTP2_REFUSED_STREAM
    stream.on("error", (e) => {
      if (!refused()) handlers.onError(e)
    })
    stream.on("close", () => {
      if (--s.active === 0) s.h2.unref()
      if (refused() && !p.abandoned) {
        p.retried = true
        dispatch(p)
      } else if (!responded && !p.abandoned)
        handlers.onError(
          s.error ??
            codedError(
              "Closed",
              `HTTP/2 stream closed before a response (code ${stream.rstCode ?? "unknown"})`,
            ),
        )
      if (s.retired) {
        if (s.active === 0 && !s.h2.closed) s.h2.close()
      } else startQueued(s)
      releaseListeners(stream)
    })
    if (req.payload !== undefined) stream.end(req.payload)
  }

  const connect = () => {
    const socket = tls.connect({
      host: hostname,
      port,
      ...(servername !== undefined ? { servername } : {}),
      ...tlsOptions,
      ALPNProtocols: ["h2", "http/1.1"],
    })
    const attempt = { socket, waiting: [] as Pending[] }
    connecting = attempt
    const failed = (e: unknown) => {
      clearTimeout(timer)
      if (connecting === attempt) connecting = undefined
      socket.destroy()
      for (const p of attempt.waiting.splice(0)) if (!p.abandoned) p.handlers.onError(e)
    }
    const timer = setTimeout(
      () => failed(codedError("Timeout", `no connection within ${options.connectTimeoutMs} ms`)),
      options.connectTimeoutMs,
    )
    const onClose = () => failed(codedError("Closed", "connection closed during the TLS handshake"))
    socket.once("error", failed)
    socket.once("close", onClose)
    socket.once("secureConnect", () => {
      clearTimeout(timer)
      socket.off("error", failed)
      socket.off("close", onClose)
      if (connecting === attempt) connecting = undefined
      const waiting = attempt.waiting.splice(0).filter((p) => !p.abandoned)
      if (destroyed) {
        socket.destroy()
        for (const p of waiting) p.handlers.onError(codedError("Closed", "the client was closed"))
        return
      }
      if (socket.alpnProtocol === "h2") {
        protocol = "h2"
        const s = open(socket)
        for (const p of waiting) startStream(s, p)
        return
      }
      // The server did not select h2: HTTP/1.1 from now on, through the Agent.
      protocol = "http/1.1"
      socket.destroy()
      for (const p of waiting) dispatch(p)
    })
    return attempt
  }

  const dispatch = (p: Pending): void => {
    if (protocol === "http/1.1") {
      try {
        p.abort = sendHttp1(p.req, p.handlers)
      } catch (e) {
        p.handlers.onError(e)
      }
      return
    }
    if (current !== undefined && !current.retired && !current.h2.destroyed)
      return void startStream(current, p)
    if (destroyed) return void p.handlers.onError(codedError("Closed", "the client was closed"))
    ;(connecting ?? connect()).waiting.push(p)
  }

  /** HTTP/2 headers; invalid names or values throw here, as node's HTTP/1.1 request does. */
  const headersOf = (req: OutgoingRequest): http2.OutgoingHttpHeaders => {
    const headers: http2.OutgoingHttpHeaders = {
      [http2.constants.HTTP2_HEADER_METHOD]: req.method,
      [http2.constants.HTTP2_HEADER_PATH]: req.path,
    }
    for (const [k, v] of Object.entries(req.headers)) {
      const name = k.toLowerCase()
      http.validateHeaderName(name)
      http.validateHeaderValue(name, v)
      headers[name] = v
    }
    if (req.basicAuth !== undefined && headers.authorization === undefined)
      headers.authorization = `Basic ${Buffer.from(req.basicAuth).toString("base64")}`
    return headers
  }

  return {
    send: (req, handlers) => {
      if (protocol === "http/1.1") return sendHttp1(req, handlers)
      const p: Pending = {
        req,
        headers: headersOf(req),
        handlers,
        abandoned: false,
        abort: undefined,
        retried: false,
      }
      dispatch(p)
      return () => {
        p.abandoned = true
        p.abort?.()
      }
    },
    silentMs: () => {
      if (protocol === "http/1.1") return Number.POSITIVE_INFINITY
      const s = current
      // Still connecting: nothing arrived yet, since the request was sent.
      return s === undefined ? Number.POSITIVE_INFINITY : performance.now() - s.lastReceived
    },
    suspect: (silentMs) => {
      const now = performance.now()
      for (const s of sessions) if (now - s.lastReceived >= silentMs) ping(s)
      if (options.replaceSuspectConnection && current !== undefined) retire(current)
    },
    destroy: () => {
      destroyed = true
      connecting?.socket.destroy()
      for (const s of sessions) s.h2.destroy()
      agent?.destroy()
    },
  }
}
