// The hub-wide reconcile cap gives its permit back while a reconcile waits on an API call, so members
// that never answer cannot take every permit (issue: one member cannot starve the others).
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import { makeGlobalLimit } from "../../src/engine/global-limit.ts"

describe("global reconcile limit", () => {
  it.effect("reconciles blocked in API calls leave their permits to others", () =>
    Effect.gen(function* () {
      const deltas: number[] = []
      const limit = yield* makeGlobalLimit(2, (d) => deltas.push(d))
      const never = yield* Deferred.make<void>()
      // Two reconciles of black-holed members: each waits forever inside an API call.
      const hung = yield* Effect.forkChild(
        Effect.all(
          [
            limit.withPermit(limit.duringIo(Deferred.await(never))),
            limit.withPermit(limit.duringIo(Deferred.await(never))),
          ],
          {
            concurrency: "unbounded",
          },
        ),
      )
      yield* Effect.yieldNow
      assert.strictEqual(limit.inUse(), 0, "no permit held while waiting on the network")
      // A healthy member's reconciles still run, two at a time.
      let ran = 0
      yield* Effect.all(
        Array.from({ length: 5 }, () =>
          limit.withPermit(
            Effect.sync(() => {
              ran++
              assert.isAtMost(limit.inUse(), 2)
            }),
          ),
        ),
        { concurrency: "unbounded" },
      )
      assert.strictEqual(ran, 5)
      yield* Fiber.interrupt(hung)
      assert.strictEqual(limit.inUse(), 0)
      assert.strictEqual(
        deltas.reduce((a, b) => a + b, 0),
        0,
        "the in-use gauge returns to zero",
      )
    }),
  )

  it.effect("the cap still holds for computing reconciles, and calls outside a reconcile pass through", () =>
    Effect.gen(function* () {
      const limit = yield* makeGlobalLimit(1, () => {})
      const gate = yield* Deferred.make<void>()
      const first = yield* Effect.forkChild(limit.withPermit(Deferred.await(gate)))
      yield* Effect.yieldNow
      assert.strictEqual(limit.inUse(), 1)
      const second = yield* Effect.forkChild(limit.withPermit(Effect.void))
      yield* Effect.yieldNow
      assert.isUndefined(second.pollUnsafe(), "the second waits for the permit")
      // An informer's LIST is not a reconcile: it neither takes nor gives a permit.
      yield* limit.duringIo(Effect.void)
      assert.strictEqual(limit.inUse(), 1)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(first)
      yield* Fiber.join(second)
      assert.strictEqual(limit.inUse(), 0)
    }),
  )

  it.effect("after an API call the reconcile takes a permit again before it goes on", () =>
    Effect.gen(function* () {
      const limit = yield* makeGlobalLimit(1, () => {})
      const reply = yield* Deferred.make<void>()
      const busy = yield* Deferred.make<void>()
      const a = yield* Effect.forkChild(
        limit.withPermit(
          Effect.gen(function* () {
            yield* limit.duringIo(Deferred.await(reply))
            // computing again: must hold the one permit
            assert.strictEqual(limit.inUse(), 1)
          }),
        ),
      )
      yield* Effect.yieldNow
      const b = yield* Effect.forkChild(limit.withPermit(Deferred.await(busy)))
      yield* Effect.yieldNow
      assert.strictEqual(limit.inUse(), 1, "b computes while a waits on the network")
      yield* Deferred.succeed(reply, undefined)
      yield* Effect.yieldNow
      assert.isUndefined(a.pollUnsafe(), "a waits for b's permit before it goes on")
      yield* Deferred.succeed(busy, undefined)
      yield* Fiber.join(b)
      yield* Fiber.join(a)
    }),
  )
})
