// The write gate asks its fence before a write starts and again in the step that hands the write's bytes
// to the socket. A hub paused between the two (SIGSTOP, a long GC pause) while its lease ran out must not
// send the write late: the fence below closes right after its first answer, and the server (a scripted
// one on loopback, plain and TLS) must receive nothing, on a new connection and on a reused one.
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import { gateWrites } from "../../src/kube/write-gate.ts"
import { failureOf, scripted, withClient } from "../support/scripted-server.ts"

const post = {
  method: "POST",
  path: "/api/v1/namespaces/ns/configmaps",
  body: { metadata: { name: "x" } },
} as const
const read = { method: "GET", path: "/api/v1/namespaces/ns/configmaps" } as const

describe("write gate", () => {
  for (const tls of [false, true]) {
    it(`${tls ? "https" : "http"}: a fence that closes after its first answer sends nothing, on a new and on a reused connection`, async () => {
      const srv = await scripted(
        (_req, res) => {
          res.writeHead(200, { "content-type": "application/json" })
          res.end("{}")
        },
        { tls },
      )
      try {
        await withClient(srv.kubeconfig, {}, async (client) => {
          let answers = 0
          const closingAfterFirst = gateWrites(
            client,
            Effect.sync(() => ++answers === 1),
          )
          const open = gateWrites(client, Effect.succeed(true))
          const closed = gateWrites(client, Effect.succeed(false))

          // No connection yet: the write waits for one, and the fence has closed by then.
          const first = failureOf(await Effect.runPromiseExit(closingAfterFirst.request(post)))
          expect(first).toMatchObject({ code: "NotLeader", method: "POST" })
          expect(answers).toBe(2)
          expect(srv.requests).toHaveLength(0)

          // An open fence: the write goes out and leaves a keep-alive connection behind.
          await Effect.runPromise(open.request(post))
          expect(srv.requests).toHaveLength(1)

          // That connection is idle and ready: the fence is asked again before the bytes go to it.
          answers = 0
          const second = failureOf(await Effect.runPromiseExit(closingAfterFirst.request(post)))
          expect(second).toMatchObject({ code: "NotLeader" })
          expect(answers).toBe(2)
          expect(srv.requests).toHaveLength(1)

          // A closed fence refuses before anything starts; reads never ask it.
          expect(failureOf(await Effect.runPromiseExit(closed.request(post)))).toMatchObject({
            code: "NotLeader",
          })
          await Effect.runPromise(closed.request(read))
          expect(srv.requests.map((r) => r.path)).toEqual([post.path, read.path])
        })
      } finally {
        await srv.stop()
      }
    })
  }
})
