// The kube client sends a throttled request again, as client-go's REST client does: a 429, or a 5xx with
// a Retry-After header, is retried after Retry-After for every verb, at most throttleRetries times and
// within the request's deadline; other errors and watches are answered at once. Against a scripted
// server on loopback (test/support/scripted-server.ts); the real API server refusing with priority and
// fairness is in test/integration/informer.test.ts. No cluster needed.
import type { IncomingMessage, ServerResponse } from "node:http"
import { Effect, Exit, Fiber, Stream } from "effect"
import { assert, describe, it } from "vitest"
import {
  KubeApiError,
  type KubeRequest,
  throttleRetries,
  throttleRetryMaxWaitMs,
  throttleRetryWaitMs,
} from "../../src/kube/client.ts"
import { failureOf, scripted, withClient } from "../support/scripted-server.ts"
import { waitUntil } from "../support/wait.ts"

const status = (code: number, reason: string) =>
  JSON.stringify({ kind: "Status", status: "Failure", code, reason, message: `refused (${code})` })

/** Answers `code` with these headers; the body of each request is recorded. */
const refuse = (res: ServerResponse, code: number, headers: Record<string, string> = {}) => {
  res.writeHead(code, { "content-type": "application/json", ...headers })
  res.end(status(code, code === 429 ? "TooManyRequests" : "InternalError"))
}

const readBody = (req: IncomingMessage) =>
  new Promise<string>((resolve) => {
    let body = ""
    req.on("data", (c: Buffer) => {
      body += c.toString("utf8")
    })
    req.on("end", () => resolve(body))
  })

const create: KubeRequest = {
  method: "POST",
  path: "/api/v1/namespaces/ns/configmaps",
  body: { metadata: { name: "a" }, data: { k: "v" } },
}

describe("throttleRetryWaitMs", () => {
  it("retries 429, and 5xx with Retry-After, for Retry-After seconds plus up to a fifth", () => {
    assert.strictEqual(throttleRetryWaitMs(429, 1, 0, 30_000, 0), 1_000)
    assert.strictEqual(throttleRetryWaitMs(429, 1, 0, 30_000, 0.999), 1_200)
    assert.strictEqual(throttleRetryWaitMs(503, 2, 0, 30_000, 0), 2_000)
    assert.strictEqual(throttleRetryWaitMs(500, 0, 0, 30_000, 0.5), 0)
  })

  it("answers with the error without a Retry-After, for other statuses, after the last retry, or past the deadline", () => {
    assert.isUndefined(throttleRetryWaitMs(429, undefined, 0, 30_000, 0))
    assert.isUndefined(throttleRetryWaitMs(503, undefined, 0, 30_000, 0))
    assert.isUndefined(throttleRetryWaitMs(409, 1, 0, 30_000, 0))
    assert.isUndefined(throttleRetryWaitMs(404, 1, 0, 30_000, 0))
    assert.strictEqual(throttleRetryWaitMs(429, 1, throttleRetries - 1, 30_000, 0), 1_000)
    assert.isUndefined(throttleRetryWaitMs(429, 1, throttleRetries, 30_000, 0))
    assert.isUndefined(throttleRetryWaitMs(429, 5, 0, 5_000, 0))
  })

  it("caps a long Retry-After", () => {
    assert.strictEqual(
      throttleRetryWaitMs(429, 3_600, 0, Number.POSITIVE_INFINITY, 0),
      throttleRetryMaxWaitMs,
    )
  })
})

describe("kube client: throttled requests", () => {
  it("sends a refused create again with the same body until the server takes it, and reports each retry", async () => {
    const bodies: string[] = []
    const srv = await scripted((req, res) => {
      void readBody(req).then((body) => {
        bodies.push(body)
        if (bodies.length === 1) return refuse(res, 429, { "retry-after": "0" })
        if (bodies.length === 2) return refuse(res, 503, { "retry-after": "0" })
        res.writeHead(201, { "content-type": "application/json" })
        res.end(body)
      })
    })
    const retries: Array<[string, number]> = []
    try {
      const created = await withClient(
        srv.kubeconfig,
        { onThrottleRetry: (method, code) => void retries.push([method, code]) },
        (c) => Effect.runPromise(c.request<{ data: { k: string } }>(create)),
      )
      assert.deepStrictEqual(created.data, { k: "v" })
      assert.strictEqual(bodies.length, 3)
      assert.deepStrictEqual(new Set(bodies), new Set([JSON.stringify(create.body)]))
      assert.deepStrictEqual(retries, [
        ["POST", 429],
        ["POST", 503],
      ])
    } finally {
      await srv.stop()
    }
  })

  it("answers a 5xx without Retry-After, and a 429 without one, with the error at once", async () => {
    for (const [code, headers] of [
      [500, {}],
      [429, {}],
    ] as const) {
      const srv = await scripted((_req, res) => refuse(res, code, headers))
      try {
        const exit = await withClient(srv.kubeconfig, {}, (c) => Effect.runPromiseExit(c.request(create)))
        const err = failureOf(exit)
        assert.instanceOf(err, KubeApiError)
        assert.strictEqual((err as KubeApiError).status, code)
        assert.strictEqual(srv.requests.length, 1, `HTTP ${code}`)
      } finally {
        await srv.stop()
      }
    }
  })

  it("gives up after throttleRetries retries with the last refusal, Retry-After included", async () => {
    const srv = await scripted((_req, res) => refuse(res, 429, { "retry-after": "0" }))
    try {
      const exit = await withClient(srv.kubeconfig, {}, (c) =>
        Effect.runPromiseExit(c.request({ method: "GET", path: "/api/v1/configmaps" })),
      )
      const err = failureOf(exit)
      assert.instanceOf(err, KubeApiError)
      assert.include(err, { status: 429, reason: "TooManyRequests", retryAfterSeconds: 0 })
      assert.strictEqual(srv.requests.length, 1 + throttleRetries)
    } finally {
      await srv.stop()
    }
  })

  it("does not wait past the request's deadline: a Retry-After longer than it is the answer", async () => {
    const srv = await scripted((_req, res) => refuse(res, 429, { "retry-after": "5" }))
    try {
      const exit = await withClient(srv.kubeconfig, {}, (c) =>
        Effect.runPromiseExit(c.request({ ...create, timeoutMs: 2_000 })),
      )
      assert.include(failureOf(exit), { status: 429, retryAfterSeconds: 5 })
      assert.strictEqual(srv.requests.length, 1)
    } finally {
      await srv.stop()
    }
  })

  it("stops waiting when interrupted, and sends nothing more", async () => {
    const srv = await scripted((_req, res) => refuse(res, 429, { "retry-after": "20" }))
    try {
      await withClient(srv.kubeconfig, {}, async (c) => {
        const fiber = Effect.runFork(c.request({ ...create, timeoutMs: 60_000 }))
        await waitUntil("the first attempt", 5_000, () => srv.requests.length === 1, 20)
        // Without interruption this would wait 20 s and send again; the test's own timeout catches that.
        const exit = await Effect.runPromise(Fiber.interrupt(fiber).pipe(Effect.andThen(Fiber.await(fiber))))
        assert.isTrue(Exit.hasInterrupts(exit))
        assert.strictEqual(srv.requests.length, 1)
      })
    } finally {
      await srv.stop()
    }
  })

  it("asks the write fence again before each retry: a write is not sent once the fence closed", async () => {
    const srv = await scripted((_req, res) => refuse(res, 429, { "retry-after": "0" }))
    let allowed = 1
    try {
      const exit = await withClient(srv.kubeconfig, {}, (c) =>
        Effect.runPromiseExit(c.request({ ...create, fence: () => allowed-- > 0 })),
      )
      assert.include(failureOf(exit), { _tag: "KubeTransportError", code: "NotLeader" })
      assert.strictEqual(srv.requests.length, 1)
    } finally {
      await srv.stop()
    }
  })

  it("never retries a watch: its refusal ends the stream for the informer to back off", async () => {
    const srv = await scripted((_req, res) => refuse(res, 429, { "retry-after": "0" }))
    try {
      const exit = await withClient(srv.kubeconfig, {}, (c) =>
        Effect.runPromiseExit(Stream.runDrain(c.watch("/api/v1/configmaps", {}))),
      )
      assert.include(failureOf(exit), { status: 429, retryAfterSeconds: 0 })
      assert.strictEqual(srv.requests.length, 1)
    } finally {
      await srv.stop()
    }
  })
})
