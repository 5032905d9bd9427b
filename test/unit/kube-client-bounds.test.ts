// The kube client against hostile or broken endpoints (scripted servers on loopback): an endless body,
// a watch line that never ends, an endless error body, a header value Node refuses and a throwing
// callback each end as a failure of that one request, after a bounded number of bytes. Nothing grows
// without bound, nothing escapes as a defect or from an event-emitter callback.
import { Effect, Exit, Stream } from "effect"
import { describe, expect, it } from "vitest"
import {
  KubeTransportError,
  maxErrorBodyBytes,
  maxResponseBytes,
  maxWatchFrameBytes,
} from "../../src/kube/client.ts"
import { cm, failureOf, line, scripted, streamFiller, withClient } from "../support/scripted-server.ts"

const MiB = 1024 * 1024
// The limits, spelled out here too, so that these tests say what they expect of any client.
const responseLimit = 64 * MiB
const frameLimit = 16 * MiB
const errorLimit = 64 * 1024
/**
 * What can pass the client's limit before it stops reading: the server's 1 MiB write in flight and the
 * loopback socket buffers on both sides.
 */
const slack = 16 * MiB
/** Without limits the client would read this much and then wait for its timeout. */
const beyond = (limit: number) => limit + 4 * slack

const list = { method: "GET", path: "/api/v1/configmaps", query: { limit: "500" } } as const

describe("kube client limits", () => {
  it("has the documented limits", () => {
    expect({ maxResponseBytes, maxWatchFrameBytes, maxErrorBodyBytes }).toEqual({
      maxResponseBytes: responseLimit,
      maxWatchFrameBytes: frameLimit,
      maxErrorBodyBytes: errorLimit,
    })
  })

  it("fails an endless 200 LIST body with TooLarge and stops reading near the limit", async () => {
    let written: Promise<number> = Promise.resolve(0)
    const srv = await scripted((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" })
      res.write('{"kind":"ConfigMapList","items":[{"data":"')
      written = streamFiller(res, beyond(responseLimit))
    })
    try {
      const exit = await withClient(srv.kubeconfig, { requestTimeoutMs: 20_000 }, (c) =>
        Effect.runPromiseExit(c.request(list)),
      )
      const err = failureOf(exit)
      expect(err).toBeInstanceOf(KubeTransportError)
      expect(err).toMatchObject({ code: "TooLarge", method: "GET", path: "/api/v1/configmaps" })
      expect(err.message).toContain(`${responseLimit} bytes`)
      // The client hung up: the server could hand over only about the limit.
      expect(await written).toBeLessThan(responseLimit + slack)
      expect(srv.closed).toHaveLength(1)
    } finally {
      await srv.stop()
    }
  })

  it("fails a response whose Content-Length is over the limit without reading it", async () => {
    let written: Promise<number> = Promise.resolve(0)
    const srv = await scripted((_req, res) => {
      res.writeHead(200, { "content-type": "application/json", "content-length": String(1024 * MiB) })
      written = streamFiller(res, beyond(responseLimit))
    })
    try {
      const exit = await withClient(srv.kubeconfig, { requestTimeoutMs: 20_000 }, (c) =>
        Effect.runPromiseExit(c.request(list)),
      )
      expect(failureOf(exit)).toMatchObject({ _tag: "KubeTransportError", code: "TooLarge" })
      expect(await written).toBeLessThan(slack)
    } finally {
      await srv.stop()
    }
  })

  it("still reads a large response under the limit", async () => {
    const items = Array.from({ length: 500 }, (_, i) => ({
      ...cm(`c${i}`, String(i)),
      data: { v: "y".repeat(8000) },
    }))
    const srv = await scripted((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" })
      res.end(JSON.stringify({ kind: "ConfigMapList", items }))
    })
    try {
      const got = await withClient(srv.kubeconfig, {}, (c) =>
        Effect.runPromise(c.request<{ items: unknown[] }>(list)),
      )
      expect(got.items).toHaveLength(500)
    } finally {
      await srv.stop()
    }
  })

  it("fails an endless error body with TooLarge after reading at most its limit", async () => {
    let written: Promise<number> = Promise.resolve(0)
    const srv = await scripted((_req, res) => {
      res.writeHead(500, { "content-type": "text/html" })
      written = streamFiller(res, beyond(errorLimit))
    })
    try {
      const exit = await withClient(srv.kubeconfig, { requestTimeoutMs: 20_000 }, (c) =>
        Effect.runPromiseExit(c.request(list)),
      )
      const err = failureOf(exit)
      expect(err).toMatchObject({ _tag: "KubeTransportError", code: "TooLarge" })
      expect(err.message).toContain("HTTP 500")
      expect(await written).toBeLessThan(errorLimit + slack)
    } finally {
      await srv.stop()
    }
  })

  it("fails an endless error body of a watch the same way", async () => {
    let written: Promise<number> = Promise.resolve(0)
    const srv = await scripted((_req, res) => {
      res.writeHead(503)
      written = streamFiller(res, beyond(errorLimit))
    })
    try {
      const exit = await withClient(srv.kubeconfig, { requestTimeoutMs: 20_000 }, (c) =>
        Effect.runPromiseExit(Stream.runDrain(c.watch("/api/v1/configmaps", {}))),
      )
      const err = failureOf(exit)
      expect(err).toMatchObject({ _tag: "KubeTransportError", code: "TooLarge" })
      expect(err.message).toContain("HTTP 503")
      expect(await written).toBeLessThan(errorLimit + slack)
    } finally {
      await srv.stop()
    }
  })

  it("fails a watch at once when its error body is cut off, instead of waiting for the deadline", async () => {
    const srv = await scripted((_req, res) => {
      res.writeHead(503, { "content-length": "1000" })
      res.write('{"kind":"Status"')
      setTimeout(() => res.socket?.destroy(), 50)
    })
    try {
      const t0 = Date.now()
      const exit = await withClient(srv.kubeconfig, { requestTimeoutMs: 20_000 }, (c) =>
        Effect.runPromiseExit(Stream.runDrain(c.watch("/api/v1/configmaps", {}))),
      )
      const err = failureOf(exit)
      expect(err).toBeInstanceOf(KubeTransportError)
      expect(["Closed", "ECONNRESET"]).toContain(err instanceof KubeTransportError ? err.code : undefined)
      expect(Date.now() - t0).toBeLessThan(5_000)
    } finally {
      await srv.stop()
    }
  })

  it("fails a watch line that grows past the frame limit without a newline", async () => {
    let written: Promise<number> = Promise.resolve(0)
    const srv = await scripted((_req, res) => {
      res.writeHead(200)
      res.write(line("ADDED", cm("a", "1")))
      res.write('{"type":"ADDED","object":{"metadata":{"name":"')
      written = streamFiller(res, beyond(frameLimit))
    })
    try {
      const seen: string[] = []
      const exit = await withClient(srv.kubeconfig, { watchInactivityTimeoutMs: 5_000 }, (c) =>
        Effect.runPromiseExit(
          c
            .watch("/api/v1/configmaps", {})
            .pipe(Stream.runForEach((e) => Effect.sync(() => seen.push(e.object.metadata.name)))),
        ),
      )
      expect(seen).toEqual(["a"])
      const err = failureOf(exit)
      expect(err).toMatchObject({ _tag: "KubeTransportError", code: "TooLarge" })
      expect(err.message).toContain(`${frameLimit} bytes`)
      expect(await written).toBeLessThan(frameLimit + slack)
    } finally {
      await srv.stop()
    }
  })

  it("still passes a watch event of several MiB that arrives in many chunks", async () => {
    const big = line("ADDED", { ...cm("big", "7"), data: { v: "ü".repeat(2 * MiB) } })
    const srv = await scripted((_req, res) => {
      res.writeHead(200)
      const bytes = Buffer.from(big)
      for (let i = 0; i < bytes.length; i += 1000) res.write(bytes.subarray(i, i + 1000))
      res.end()
    })
    try {
      const exit = await withClient(srv.kubeconfig, {}, (c) =>
        Effect.runPromiseExit(Stream.runCollect(c.watch("/api/v1/configmaps", {}))),
      )
      expect(Exit.isSuccess(exit)).toBe(true)
      const got = Exit.isSuccess(exit) ? [...exit.value] : []
      expect(got[0]?.object.data.v).toBe("ü".repeat(2 * MiB))
    } finally {
      await srv.stop()
    }
  })
})

describe("kube client: nothing escapes as a defect", () => {
  // Loaded directly, past the kubeconfig policy (which refuses this value since L2).
  const withImpersonation = (kubeconfig: string) =>
    kubeconfig.replace(
      "    token: s3cret-token",
      '    token: s3cret-token\n    as: "evil\\r\\nX-Injected: 1"',
    )

  it("turns a header value Node refuses (ERR_INVALID_CHAR) into a KubeTransportError", async () => {
    const srv = await scripted((_req, res) => res.end("{}"))
    try {
      const kubeconfig = withImpersonation(srv.kubeconfig)
      const [req, watch] = await withClient(kubeconfig, {}, (c) =>
        Promise.all([
          Effect.runPromiseExit(c.request(list)),
          Effect.runPromiseExit(Stream.runDrain(c.watch("/api/v1/configmaps", {}))),
        ]),
      )
      for (const exit of [req, watch]) {
        const err = failureOf(exit)
        expect(err).toBeInstanceOf(KubeTransportError)
        expect(err).toMatchObject({ code: "ERR_INVALID_CHAR", path: "/api/v1/configmaps" })
        expect(err.message).not.toContain("evil")
        expect(err.message).not.toContain("s3cret")
      }
      expect(srv.requests).toHaveLength(0)
    } finally {
      await srv.stop()
    }
  })

  it("fails the stream with a defect when onConnected throws, not from a socket callback", async () => {
    const srv = await scripted((_req, res) => {
      res.writeHead(200)
      res.write(line("ADDED", cm("a", "1")))
    })
    try {
      const exit = await withClient(srv.kubeconfig, { watchInactivityTimeoutMs: 2_000 }, (c) =>
        Effect.runPromiseExit(
          Stream.runDrain(
            c.watch(
              "/api/v1/configmaps",
              {},
              {
                onConnected: () => {
                  throw new Error("caller bug")
                },
              },
            ),
          ),
        ),
      )
      expect(Exit.isFailure(exit)).toBe(true)
      const text = Exit.isFailure(exit) ? String(exit.cause) : ""
      expect(text).toContain("caller bug")
      await new Promise((r) => setTimeout(r, 200))
      expect(srv.closed).toHaveLength(1)
    } finally {
      await srv.stop()
    }
  })
})
