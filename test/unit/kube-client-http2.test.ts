// The kube client over HTTP/2 (kube/transport.ts) against node's own HTTP/2 server on loopback, with the
// throwaway certificate of the scripted servers: one connection for concurrent requests and a watch
// (more than the server's stream limit at once), HTTP/1.1 when turned off, a GOAWAY, a reset stream, a
// header value node refuses, and a fence that says no. The same against a real kube-apiserver, and a
// connection that stops answering PINGs: test/integration/informer.test.ts.
import { readFileSync } from "node:fs"
import * as http2 from "node:http2"
import type { AddressInfo } from "node:net"
import { Effect, Fiber, Stream } from "effect"
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
    server.on("session", () => sessions++)
    server.on("request", (req, res) => {
      const path = new URL(req.url, "https://x").pathname
      seen.push({
        path,
        version: req.httpVersion,
        ua: req.headers["user-agent"],
        auth: req.headers.authorization,
      })
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
})
