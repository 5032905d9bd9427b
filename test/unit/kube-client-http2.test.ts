// The kube client over HTTP/2 (kube/transport.ts) against node's own HTTP/2 server on loopback, with the
// throwaway certificate of the scripted servers: one connection for concurrent requests and a watch
// (more than the server's stream limit at once), HTTP/1.1 when turned off, a GOAWAY, a reset stream, a
// header value node refuses, a fence that says no, and (through a proxy that withholds the server's PING
// answers) a connection that is slow but still delivers frames: kept, and closed once it falls silent.
// The same against a real kube-apiserver, and a blackholed connection: test/integration/informer.test.ts.
import { readFileSync } from "node:fs"
import * as http2 from "node:http2"
import type { AddressInfo } from "node:net"
import * as tls from "node:tls"
import { Cause, Effect, Exit, Fiber, Stream } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type KubeClient, KubeTransportError } from "../../src/kube/client.ts"
import { failureOf, line, withClient } from "../support/scripted-server.ts"

const fixture = (name: string) =>
  readFileSync(new URL(`../support/fixtures/scripted-tls/${name}`, import.meta.url))
const ca = fixture("server.crt")

describe("kube client over HTTP/2", () => {
  let server: http2.Http2SecureServer
  let url = ""
  let sessions = 0
  /** PING frames the server received from clients. */
  let pings = 0
  const seen: Array<{ path: string; version: string; ua: string | undefined; auth: string | undefined }> = []

  const kubeconfig = (token: string) =>
    [
      "apiVersion: v1",
      "kind: Config",
      "clusters:",
      "- name: h2",
      "  cluster:",
      `    server: ${url}`,
      `    certificate-authority-data: ${ca.toString("base64")}`,
      "users:",
      "- name: u",
      "  user:",
      `    token: ${JSON.stringify(token)}`,
      "contexts:",
      "- name: h2",
      "  context: { cluster: h2, user: u }",
      "current-context: h2",
      "",
    ].join("\n")

  beforeAll(async () => {
    // A stream limit of 2: the client holds further requests until a stream closes.
    server = http2.createSecureServer({
      cert: ca,
      key: fixture("server.key"),
      allowHTTP1: true,
      settings: { maxConcurrentStreams: 2 },
    })
    server.on("session", (session) => {
      sessions++
      session.on("ping", () => pings++)
    })
    server.on("request", (req, res) => {
      const path = new URL(req.url, "https://x").pathname
      seen.push({
        path,
        version: req.httpVersion,
        ua: req.headers["user-agent"],
        auth: req.headers.authorization,
      })
      if (path === "/trickle") {
        // A watch whose server goes quiet for a while, then sends an event every 100 ms, then ends.
        res.writeHead(200, { "content-type": "application/json" })
        res.write(line("ADDED", { metadata: { name: "t0" } }))
        let n = 1
        setTimeout(() => {
          const every = setInterval(() => {
            res.write(line("ADDED", { metadata: { name: `t${n}` } }))
            if (++n > 10) {
              clearInterval(every)
              res.end()
            }
          }, 100)
        }, 700)
        return
      }
      if (path === "/slow") return void setTimeout(() => res.end(JSON.stringify({ path })), 800)
      if (req.url.includes("watch=true")) {
        res.writeHead(200, { "content-type": "application/json" })
        res.write(line("ADDED", { metadata: { name: "a" } }))
        return
      }
      if (path === "/goaway") {
        // Stream ids the server accepted stay valid: this response still comes.
        req.stream.session?.goaway(http2.constants.NGHTTP2_NO_ERROR, req.stream.id ?? 0)
        setTimeout(() => res.end('{"after":"goaway"}'), 50)
        return
      }
      if (path === "/reset") return void req.stream.close(http2.constants.NGHTTP2_INTERNAL_ERROR)
      // Never answered, though the connection is fine (node answers its PINGs).
      if (path === "/hang") return
      setTimeout(() => res.end(JSON.stringify({ path })), 10)
    })
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r))
    url = `https://127.0.0.1:${(server.address() as AddressInfo).port}`
  })
  afterAll(() => new Promise<void>((r) => server.close(() => r())))

  it("carries concurrent requests and a watch on one connection, with the usual headers", async () => {
    const before = sessions
    seen.length = 0
    await withClient(kubeconfig("tok"), { userAgent: "fleetcheck-test" }, async (client) => {
      const watch = Effect.runFork(Stream.runCollect(Stream.take(client.watch("/api/v1/pods", {}), 1)))
      const answers = await Effect.runPromise(
        Effect.all(
          Array.from({ length: 12 }, (_, i) =>
            client.request<{ path: string }>({ method: "GET", path: `/r${i}` }),
          ),
          { concurrency: "unbounded" },
        ),
      )
      expect(answers.map((a) => a.path)).toEqual(Array.from({ length: 12 }, (_, i) => `/r${i}`))
      const events = await Effect.runPromise(Fiber.join(watch))
      expect([...events].map((e) => e.object.metadata.name)).toEqual(["a"])
    })
    expect(sessions - before).toBe(1)
    expect(seen.length).toBe(13)
    for (const s of seen)
      expect(s).toMatchObject({ version: "2.0", ua: "fleetcheck-test", auth: "Bearer tok" })
  })

  it("speaks HTTP/1.1 when HTTP/2 is turned off", async () => {
    seen.length = 0
    await withClient(kubeconfig("tok"), { http2: false }, (client) =>
      Effect.runPromise(client.request({ method: "GET", path: "/one" })),
    )
    expect(seen.map((s) => s.version)).toEqual(["1.1"])
  })

  it("after a GOAWAY finishes the request in flight and sends the next on a new connection", async () => {
    const before = sessions
    await withClient(kubeconfig("tok"), {}, async (client) => {
      expect(await Effect.runPromise(client.request({ method: "GET", path: "/goaway" }))).toEqual({
        after: "goaway",
      })
      expect(await Effect.runPromise(client.request({ method: "GET", path: "/next" }))).toEqual({
        path: "/next",
      })
    })
    expect(sessions - before).toBe(2)
  })

  it("fails a stream the server resets with a KubeTransportError; the connection serves the next", async () => {
    const before = sessions
    await withClient(kubeconfig("tok"), {}, async (client) => {
      const e = failureOf(await Effect.runPromiseExit(client.request({ method: "GET", path: "/reset" })))
      expect(e).toBeInstanceOf(KubeTransportError)
      expect((e as KubeTransportError).code).toBe("ERR_HTTP2_STREAM_ERROR")
      expect(await Effect.runPromise(client.request({ method: "GET", path: "/fine" }))).toEqual({
        path: "/fine",
      })
    })
    expect(sessions - before).toBe(1)
  })

  it("after a request timed out, sends the next on the same connection; with replaceSuspectConnection on a new one", async () => {
    const timedOutThenNext = (client: KubeClient) =>
      Effect.runPromise(
        Effect.gen(function* () {
          const hung = yield* Effect.flip(client.request({ method: "GET", path: "/hang", timeoutMs: 100 }))
          expect(hung).toMatchObject({ _tag: "KubeTransportError", code: "Timeout" })
          expect(yield* client.request({ method: "GET", path: "/next" })).toEqual({ path: "/next" })
        }),
      )
    let before = sessions
    await withClient(kubeconfig("tok"), {}, timedOutThenNext)
    // The suspect connection answered its PING: it stays in use.
    expect(sessions - before).toBe(1)
    before = sessions
    await withClient(kubeconfig("tok"), { replaceSuspectConnection: true }, timedOutThenNext)
    expect(sessions - before).toBe(2)
  })

  it("refuses a header value node would refuse, and a closed fence, before sending anything", async () => {
    seen.length = 0
    await withClient(kubeconfig("t\u0100k"), {}, async (client) => {
      const e = failureOf(await Effect.runPromiseExit(client.request({ method: "GET", path: "/bad" })))
      expect(e).toMatchObject({ _tag: "KubeTransportError", code: "ERR_INVALID_CHAR" })
      expect((e as KubeTransportError).message).not.toContain("t\u0100k")
    })
    await withClient(kubeconfig("tok"), {}, async (client) => {
      const e = failureOf(
        await Effect.runPromiseExit(
          client.request({ method: "POST", path: "/write", body: {}, fence: () => false }),
        ),
      )
      expect(e).toMatchObject({ _tag: "KubeTransportError", code: "NotLeader" })
    })
    expect(seen).toEqual([])
  })

  it("keeps a connection whose PING goes unanswered while frames still arrive on it, and closes it once it falls silent", async () => {
    // PING answers come 1.2 s late: after the 0.6 s PING timeout.
    const proxy = await startPingWithholdingProxy(Number(new URL(url).port), 1_200)
    const viaProxy = kubeconfig("tok").replace(url, `https://127.0.0.1:${proxy.port}`)
    const before = sessions
    try {
      // A request times out while the watch is quiet: the connection is PINGed, and its answer is late;
      // the watch's events keep coming meanwhile, so the connection is alive and stays open.
      await withClient(viaProxy, { pingIdleMs: 60_000, pingTimeoutMs: 600 }, async (client) => {
        let first!: () => void
        const started = new Promise<void>((r) => (first = r))
        const watch = Effect.runPromiseExit(
          Stream.runCollect(Stream.tap(client.watch("/trickle", {}), () => Effect.sync(() => first()))),
        )
        await started
        await new Promise((r) => setTimeout(r, 50))
        const pingsBefore = pings
        const slow = failureOf(
          await Effect.runPromiseExit(client.request({ method: "GET", path: "/slow", timeoutMs: 300 })),
        )
        expect(slow).toMatchObject({
          _tag: "KubeTransportError",
          code: "Timeout",
        })
        const events = await watch
        expect(Exit.isSuccess(events) ? [...events.value].length : Cause.pretty(events.cause)).toBe(11)
        expect(pings - pingsBefore).toBe(1)
        expect(proxy.withheld()).toBe(1)

        // A request timing out while other frames arrive sends no PING at all.
        const watch2 = Effect.runFork(Stream.runCollect(client.watch("/trickle", {})))
        await new Promise((r) => setTimeout(r, 800))
        const pingsBusy = pings
        failureOf(
          await Effect.runPromiseExit(client.request({ method: "GET", path: "/slow", timeoutMs: 300 })),
        )
        expect(pings - pingsBusy).toBe(0)
        await Effect.runPromise(Fiber.interrupt(watch2))
      })
      expect(sessions - before).toBe(1)

      await withClient(viaProxy, { pingIdleMs: 60_000, pingTimeoutMs: 600 }, async (client) => {
        // Nothing arrives any more: a request times out, its PING goes unanswered, and the connection is
        // closed, failing the watch on it with PingTimeout.
        let third!: () => void
        const watching = new Promise<void>((r) => (third = r))
        const watch3 = Effect.runPromiseExit(
          Stream.runCollect(Stream.tap(client.watch("/trickle", {}), () => Effect.sync(() => third()))),
        )
        await watching
        proxy.silence()
        failureOf(
          await Effect.runPromiseExit(client.request({ method: "GET", path: "/slow", timeoutMs: 300 })),
        )
        expect(failureOf(await watch3)).toMatchObject({
          _tag: "KubeTransportError",
          code: "PingTimeout",
        })
      })
    } finally {
      proxy.close()
    }
  })

  it("with a silence timeout, waits for a late answer while the connection delivers other frames, and fails at it on a silent one", async () => {
    await withClient(kubeconfig("tok"), {}, async (client) => {
      const probe = { method: "GET", path: "/slow", silenceTimeoutMs: 400, timeoutMs: 5_000 } as const
      // Nothing else on the connection: the request fails once it has been silent for 400 ms.
      const silent = failureOf(await Effect.runPromiseExit(client.request(probe)))
      expect(silent).toMatchObject({ _tag: "KubeTransportError", code: "Timeout" })
      expect(silent.message).toContain("nothing else arrived on its connection")
      // A watch's events arrive every 100 ms meanwhile: the server is busy, not gone; the answer comes.
      let flowing!: () => void
      const trickling = new Promise<void>((r) => (flowing = r))
      const watch = Effect.runFork(
        Stream.runCollect(
          Stream.tap(client.watch("/trickle", {}), (e) =>
            Effect.sync(() => e.object.metadata.name === "t1" && flowing()),
          ),
        ),
      )
      await trickling
      expect(await Effect.runPromise(client.request(probe))).toEqual({ path: "/slow" })
      await Effect.runPromise(Fiber.interrupt(watch))
    })
  })
})

/**
 * A TLS-terminating proxy in front of the HTTP/2 server that holds back the PING answers (frame type 6,
 * ACK) the server sends for answerDelayMs, and after silence() drops everything the server sends.
 */
const startPingWithholdingProxy = async (target: number, answerDelayMs: number) => {
  let withheld = 0
  let silent = false
  const sockets = new Set<tls.TLSSocket>()
  const proxy = tls.createServer(
    { cert: ca, key: fixture("server.key"), ALPNProtocols: ["h2"] },
    (client) => {
      const upstream = tls.connect({
        host: "127.0.0.1",
        port: target,
        ca,
        ALPNProtocols: ["h2"],
      })
      sockets.add(client)
      sockets.add(upstream)
      client.pipe(upstream)
      let pending = Buffer.alloc(0)
      upstream.on("data", (chunk: Buffer) => {
        pending = Buffer.concat([pending, chunk])
        while (pending.length >= 9) {
          const size = 9 + pending.readUIntBE(0, 3)
          if (pending.length < size) break
          const frame = pending.subarray(0, size)
          pending = pending.subarray(size)
          const pingAnswer = frame[3] === 0x6 && ((frame[4] ?? 0) & 0x1) === 1
          if (pingAnswer) {
            withheld++
            setTimeout(() => silent || client.write(frame), answerDelayMs)
          } else if (!silent) client.write(frame)
        }
      })
      for (const s of [client, upstream])
        s.on("error", () => {}).on("close", () => {
          client.destroy()
          upstream.destroy()
        })
    },
  )
  await new Promise<void>((r) => proxy.listen(0, "127.0.0.1", r))
  return {
    port: (proxy.address() as AddressInfo).port,
    withheld: () => withheld,
    silence: () => {
      silent = true
    },
    close: () => {
      for (const s of sockets) s.destroy()
      proxy.close()
    },
  }
}
