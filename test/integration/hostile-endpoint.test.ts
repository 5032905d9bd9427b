// A hostile member endpoint over real TLS (an HTTPS server in a child process on loopback, trusted
// through the kubeconfig's certificate-authority-data) answers a LIST with a body that never ends, or a
// watch with a line that never ends. The hub's client must read at most its limit per request and fail
// that request: this process's RSS grows by about twice the limit once, far below the 600 MiB streamed,
// and not at all over the second half of the stream.

import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import { Effect, Stream } from "effect"
import { describe, expect, it } from "vitest"
import { type KubeClient, maxResponseBytes, maxWatchFrameBytes } from "../../src/kube/client.ts"
import { cm, failureOf, hostileServer, line, withClient } from "../support/scripted-server.ts"

const MiB = 1024 * 1024
/** Bytes streamed at the client per scenario, over many requests. */
const streamedTarget = 600 * MiB
/**
 * The bar for RSS growth with a per-request limit: the request's own buffers, the previous request's
 * still waiting for a GC, and a fixed allowance for what any fast stream costs once (V8's young
 * generation grows under the allocation rate, TLS and allocator buffers): about 45 MiB measured.
 */
const growthBarMiB = (limit: number) => (2 * limit) / MiB + 64
/**
 * Growth over the second half of the stream: bounded means the second 300 MiB cost less than one
 * response's limit (RSS keeps allocator and GC slack: 0-28 MiB measured, the most on a busy machine).
 */
const secondHalfBarMiB = 64

setFlagsFromString("--expose-gc")
const gc = runInNewContext("gc") as () => void
const rssMiB = () => {
  gc()
  return process.memoryUsage().rss / MiB
}

/** Samples RSS every 20 ms until stopped; returns the highest value seen (MiB). */
const peakSampler = () => {
  let peak = process.memoryUsage().rss
  const timer = setInterval(() => {
    peak = Math.max(peak, process.memoryUsage().rss)
  }, 20)
  return () => {
    clearInterval(timer)
    return Math.max(peak, process.memoryUsage().rss) / MiB
  }
}

/**
 * Runs `attempt` against a hostile TLS server (in a child process, so that only the hub side is
 * measured) whose every response but /version's starts with `prefix` and then streams filler without
 * end, until `streamedTarget` bytes went out; reports and checks this process's RSS.
 */
const hammer = async (
  label: string,
  prefix: string,
  limit: number,
  attempt: (client: KubeClient) => Promise<unknown>,
) => {
  const srv = await hostileServer(prefix)
  try {
    return await withClient(srv.kubeconfig, { requestTimeoutMs: 60_000 }, async (client) => {
      // A harmless request first, so that TLS and the agent are warm before measuring.
      await Effect.runPromise(client.request({ method: "GET", path: "/version" }))
      const before = rssMiB()
      const peak = peakSampler()
      let streamed = 0
      let requests = 0
      let half: number | undefined
      while (streamed < streamedTarget) {
        await attempt(client)
        streamed += await srv.nextClosed()
        requests++
        if (half === undefined && streamed >= streamedTarget / 2) half = rssMiB()
      }
      const peakMiB = peak()
      const after = rssMiB()
      const mid = half ?? after
      const bar = growthBarMiB(limit)
      console.log(
        `${label}: ${requests} requests, ${(streamed / MiB).toFixed(0)} MiB streamed; RSS before ` +
          `${before.toFixed(0)} MiB, halfway ${mid.toFixed(0)} MiB, after ${after.toFixed(0)} MiB ` +
          `(+${(after - before).toFixed(0)}; second half +${(after - mid).toFixed(0)}), peak ` +
          `${peakMiB.toFixed(0)} MiB (+${(peakMiB - before).toFixed(0)}; bar ${bar.toFixed(0)})`,
      )
      expect(streamed).toBeGreaterThanOrEqual(streamedTarget)
      expect(peakMiB - before).toBeLessThan(bar)
      expect(after - mid).toBeLessThan(secondHalfBarMiB)
      return { requests, streamed }
    })
  } finally {
    await srv.stop()
  }
}

describe("a hostile endpoint over TLS cannot grow the hub", () => {
  it("an endless LIST body fails each request near maxResponseBytes", async () => {
    const { requests, streamed } = await hammer(
      "endless LIST body",
      '{"kind":"ConfigMapList","items":[{"data":"',
      maxResponseBytes,
      async (client) => {
        const exit = await Effect.runPromiseExit(
          client.request({ method: "GET", path: "/api/v1/configmaps" }),
        )
        expect(failureOf(exit)).toMatchObject({ _tag: "KubeTransportError", code: "TooLarge" })
      },
    )
    // Each request stopped near the limit: the stream took several requests, not one.
    expect(streamed / requests).toBeLessThan(maxResponseBytes + 16 * MiB)
  })

  it("a watch line without a newline fails each watch near maxWatchFrameBytes", async () => {
    const { requests, streamed } = await hammer(
      "watch line without newline",
      `${line("ADDED", cm("a", "1"))}{"type":"ADDED","object":{"metadata":{"name":"`,
      maxWatchFrameBytes,
      async (client) => {
        const exit = await Effect.runPromiseExit(Stream.runDrain(client.watch("/api/v1/configmaps", {})))
        expect(failureOf(exit)).toMatchObject({ _tag: "KubeTransportError", code: "TooLarge" })
      },
    )
    expect(streamed / requests).toBeLessThan(maxWatchFrameBytes + 16 * MiB)
  })
})
