// The kube client's watch against a scripted server (test/support/scripted-server.ts): events split
// anywhere, a garbage line, silence, a hung server, interruption and a non-200 answer. No cluster needed.
import { Cause, Effect, Exit, Fiber, Scope, Stream } from "effect"
import { describe, expect, it } from "vitest"
import {
  isGone,
  isWatchInactive,
  KubeApiError,
  type KubeClient,
  KubeTransportError,
  makeKubeClient,
  type WatchEvent,
} from "../../src/kube/client.ts"
import { kubeConfigOf } from "../support/informer.ts"
import { cm, line, scripted } from "../support/scripted-server.ts"
import { sleep, waitUntil } from "../support/wait.ts"

/** waitUntil's probe interval, shorter than its default: these waits gate many small steps. */
const pollMs = 50

const withClient = async <A>(
  kubeconfig: string,
  f: (client: KubeClient) => Promise<A>,
  watchInactivityMs?: number,
  requestTimeoutMs?: number,
) => {
  const scope = Effect.runSync(Scope.make())
  try {
    const client = await Effect.runPromise(
      makeKubeClient({
        cluster: "fake",
        kubeConfig: kubeConfigOf(kubeconfig),
        ...(watchInactivityMs ? { watchInactivityTimeoutMs: watchInactivityMs } : {}),
        ...(requestTimeoutMs ? { requestTimeoutMs } : {}),
      }).pipe(Scope.provide(scope)),
    )
    return await f(client)
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

const collect = (s: Stream.Stream<WatchEvent, unknown>) => Effect.runPromiseExit(Stream.runCollect(s))

describe("kube client watch against a scripted server", () => {
  it("reassembles events split anywhere, multi-byte characters included, and ends with the response", async () => {
    const events = [
      line("ADDED", { ...cm("ü-1", "1"), data: { s: "héllo ✓ 😀" } }),
      line("BOOKMARK", cm("", "5")),
    ]
    const bytes = Buffer.from(events.join(""))
    const srv = await scripted((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" })
      // One byte at a time: every boundary, including inside UTF-8 sequences.
      let i = 0
      const tick = () => {
        if (i >= bytes.length) return res.end()
        res.write(bytes.subarray(i, i + 1))
        i++
        setImmediate(tick)
      }
      tick()
    })
    try {
      const exit = await withClient(srv.kubeconfig, (client) =>
        collect(client.watch("/api/v1/configmaps", {})),
      )
      expect(Exit.isSuccess(exit)).toBe(true)
      const got = Exit.isSuccess(exit) ? [...exit.value] : []
      expect(got.map((e) => e.type)).toEqual(["ADDED", "BOOKMARK"])
      expect(got[0]?.object.data.s).toBe("héllo ✓ 😀")
      expect(got[0]?.object.metadata.name).toBe("ü-1")
      expect(srv.requests[0]?.query.get("watch")).toBe("true")
      expect(srv.requests[0]?.authorization).toBe("Bearer s3cret-token")
    } finally {
      await srv.stop()
    }
  })

  it("fails on a line that does not parse instead of skipping it", async () => {
    const srv = await scripted((_req, res) => {
      res.writeHead(200)
      res.write(line("ADDED", cm("a", "1")))
      res.write('{"type":"MODIFIED","object":{"metadata":\n')
      res.write(line("ADDED", cm("c", "3")))
    })
    try {
      const seen: Array<string> = []
      const exit = await withClient(srv.kubeconfig, (client) =>
        Effect.runPromiseExit(
          client
            .watch("/api/v1/configmaps", {})
            .pipe(Stream.runForEach((e) => Effect.sync(() => seen.push(e.object.metadata.name)))),
        ),
      )
      expect(seen).toEqual(["a"])
      expect(Exit.isFailure(exit)).toBe(true)
      const err = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined
      expect(err).toBeInstanceOf(KubeTransportError)
      expect((err as KubeTransportError).message).toContain("unparseable watch line")
      expect((err as KubeTransportError).message).not.toContain("s3cret")
    } finally {
      await srv.stop()
    }
  })

  it("ends a silent watch with a KubeTransportError after the inactivity timeout", async () => {
    const srv = await scripted((_req, res) => {
      res.writeHead(200)
      res.write(line("ADDED", cm("a", "1")))
      // then nothing, with the connection open
    })
    try {
      const t0 = Date.now()
      const exit = await withClient(
        srv.kubeconfig,
        (client) => collect(client.watch("/api/v1/configmaps", {})),
        400,
      )
      expect(Date.now() - t0).toBeGreaterThanOrEqual(380)
      const err = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined
      expect(err).toBeInstanceOf(KubeTransportError)
      expect((err as KubeTransportError).message).toContain("inactive")
      expect(isWatchInactive(err)).toBe(true)
      await waitUntil("the request socket to close", 2_000, () => srv.closed.length === 1, pollMs)
    } finally {
      await srv.stop()
    }
  })

  it("pushes the inactivity timeout back with every chunk, and ends the watch only after a silence", async () => {
    const srv = await scripted((_req, res) => {
      res.writeHead(200)
      let n = 0
      const tick = () => {
        res.write(line("ADDED", cm(`c${n}`, String(n + 1))))
        if (++n < 10) setTimeout(tick, 100)
      }
      tick()
    })
    try {
      const seen: Array<string> = []
      const exit = await withClient(
        srv.kubeconfig,
        (client) =>
          Effect.runPromiseExit(
            client
              .watch("/api/v1/configmaps", {})
              .pipe(Stream.runForEach((e) => Effect.sync(() => seen.push(e.object.metadata.name)))),
          ),
        400,
      )
      // Ten events over about 900 ms, more than twice the timeout: all arrive before it ends the watch.
      expect(seen).toEqual(Array.from({ length: 10 }, (_, i) => `c${i}`))
      const err = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined
      expect(isWatchInactive(err)).toBe(true)
    } finally {
      await srv.stop()
    }
  })

  it("fails a watch whose response headers never come with a Timeout (a hung server)", async () => {
    const srv = await scripted(() => {
      // accept, never answer
    })
    try {
      const exit = await withClient(
        srv.kubeconfig,
        (client) => collect(client.watch("/api/v1/configmaps", {})),
        60_000,
        300,
      )
      const err = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined
      expect(err).toBeInstanceOf(KubeTransportError)
      expect(err).toMatchObject({ code: "Timeout", method: "GET", path: "/api/v1/configmaps" })
      expect(isWatchInactive(err)).toBe(false)
    } finally {
      await srv.stop()
    }
  })

  it("aborts the HTTP request when the consuming fiber is interrupted", async () => {
    const srv = await scripted((_req, res) => {
      res.writeHead(200)
      res.write(line("ADDED", cm("a", "1")))
    })
    try {
      await withClient(srv.kubeconfig, async (client) => {
        const fiber = Effect.runFork(Stream.runDrain(client.watch("/api/v1/configmaps", {})))
        await waitUntil("the watch request", 2_000, () => srv.requests.length === 1, pollMs)
        await sleep(50)
        expect(srv.closed).toEqual([])
        await Effect.runPromise(Fiber.interrupt(fiber))
        await waitUntil("the request socket to close", 2_000, () => srv.closed.length === 1, pollMs)
      })
    } finally {
      await srv.stop()
    }
  })

  it("turns a non-200 watch response into a KubeApiError with the Status reason and Retry-After", async () => {
    const srv = await scripted((_req, res) => {
      res.writeHead(429, { "content-type": "application/json", "retry-after": "3" })
      res.end(
        JSON.stringify({
          kind: "Status",
          status: "Failure",
          reason: "TooManyRequests",
          message: "slow down",
          code: 429,
        }),
      )
    })
    try {
      const exit = await withClient(srv.kubeconfig, (client) =>
        collect(client.watch("/api/v1/configmaps", {})),
      )
      const err = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined
      expect(err).toBeInstanceOf(KubeApiError)
      expect(err).toMatchObject({
        status: 429,
        reason: "TooManyRequests",
        message: "slow down",
        retryAfterSeconds: 3,
      })
      expect(isGone(err)).toBe(false)
    } finally {
      await srv.stop()
    }
  })
})
