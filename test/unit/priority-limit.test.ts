// The hub-wide bound on MemberCluster status writes is a small priority pool: at most N holders,
// waiters served by class then arrival, a permit given back goes to the next waiter, and an
// interrupted waiter gives its place up.
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import { makePriorityLimit } from "../../src/engine/priority-limit.ts"

const counting = () => {
  const counts = { waiting: 0, inUse: 0, served: 0 }
  return {
    counts,
    hooks: {
      onWaiting: (d: number) => {
        counts.waiting += d
      },
      onInUse: (d: number) => {
        counts.inUse += d
      },
      onServed: () => {
        counts.served++
      },
    },
  }
}

/** Lets every forked fiber run until it blocks. */
const settle = Effect.gen(function* () {
  for (let i = 0; i < 10; i++) yield* Effect.yieldNow
})

describe("priority limit", () => {
  it.effect("never more holders than permits; the rest wait and all run in the end", () =>
    Effect.gen(function* () {
      const { counts, hooks } = counting()
      const limit = makePriorityLimit(3, 2, hooks)
      const gates = Array.from({ length: 10 }, () => Deferred.makeUnsafe<void>())
      let running = 0
      let most = 0
      const fibers = yield* Effect.forEach(gates, (gate, i) =>
        Effect.forkChild(
          limit.withPermit(
            i % 2,
            Effect.gen(function* () {
              running++
              most = Math.max(most, running)
              yield* Deferred.await(gate)
              running--
            }),
          ),
        ),
      )
      yield* settle
      assert.strictEqual(running, 3)
      assert.strictEqual(limit.inUse(), 3)
      assert.strictEqual(limit.waiting(), 7)
      assert.deepStrictEqual(counts, { waiting: 7, inUse: 3, served: 3 })
      for (const gate of gates) {
        yield* Deferred.succeed(gate, undefined)
        yield* settle
        assert.isAtMost(running, 3)
      }
      yield* Effect.forEach(fibers, Fiber.join)
      assert.strictEqual(most, 3)
      assert.deepStrictEqual(counts, { waiting: 0, inUse: 0, served: 10 })
    }),
  )

  it.effect("serves waiters by class, first come first served within one", () =>
    Effect.gen(function* () {
      const limit = makePriorityLimit(1, 3, counting().hooks)
      const gate = Deferred.makeUnsafe<void>()
      const order: string[] = []
      const holder = yield* Effect.forkChild(limit.withPermit(1, Deferred.await(gate)))
      yield* settle
      const arrivals: Array<[string, number]> = [
        ["change-1", 1],
        ["refresh-1", 2],
        ["change-2", 1],
        ["worse-1", 0],
        ["refresh-2", 2],
        ["worse-2", 0],
      ]
      const fibers = []
      for (const [name, priority] of arrivals) {
        fibers.push(
          yield* Effect.forkChild(
            limit.withPermit(
              priority,
              Effect.sync(() => void order.push(name)),
            ),
          ),
        )
        yield* settle
      }
      assert.strictEqual(limit.waiting(), 6)
      yield* Deferred.succeed(gate, undefined)
      yield* Fiber.join(holder)
      yield* Effect.forEach(fibers, Fiber.join)
      assert.deepStrictEqual(order, ["worse-1", "worse-2", "change-1", "change-2", "refresh-1", "refresh-2"])
    }),
  )

  it.effect(
    "a waiter whose priority rises moves up at its next look, to the back of its new class; never down",
    () =>
      Effect.gen(function* () {
        const limit = makePriorityLimit(1, 3, counting().hooks)
        const gate = Deferred.makeUnsafe<void>()
        const order: string[] = []
        const holder = yield* Effect.forkChild(limit.withPermit(0, Deferred.await(gate)))
        yield* settle
        let risingTo = 2
        let fallingTo = 0
        const fibers = [
          yield* Effect.forkChild(
            limit.withPermit(
              1,
              Effect.sync(() => void order.push("change")),
            ),
          ),
          yield* Effect.forkChild(
            limit.withPermit(
              0,
              Effect.sync(() => void order.push("worse")),
            ),
          ),
          yield* Effect.forkChild(
            limit.withPermit(
              2,
              Effect.sync(() => void order.push("rising")),
              {
                everyMs: 1_000,
                priority: Effect.sync(() => risingTo),
              },
            ),
          ),
          yield* Effect.forkChild(
            limit.withPermit(
              0,
              Effect.sync(() => void order.push("falling")),
              {
                everyMs: 1_000,
                priority: Effect.sync(() => fallingTo),
              },
            ),
          ),
        ]
        yield* settle
        risingTo = 0
        fallingTo = 2
        yield* TestClock.adjust(1_000)
        yield* settle
        yield* Deferred.succeed(gate, undefined)
        yield* Effect.forEach([holder, ...fibers], Fiber.join)
        assert.deepStrictEqual(order, ["worse", "falling", "rising", "change"])
      }),
  )

  it.effect("a permit given back goes to a waiter, not to a newcomer", () =>
    Effect.gen(function* () {
      const limit = makePriorityLimit(1, 1, counting().hooks)
      const gate = Deferred.makeUnsafe<void>()
      const order: string[] = []
      const holder = yield* Effect.forkChild(limit.withPermit(0, Deferred.await(gate)))
      yield* settle
      const waiter = yield* Effect.forkChild(
        limit.withPermit(
          0,
          Effect.sync(() => void order.push("waiter")),
        ),
      )
      yield* settle
      // Released and a newcomer arrives in the same turn: the waiter was first.
      yield* Deferred.succeed(gate, undefined)
      const newcomer = yield* Effect.forkChild(
        limit.withPermit(
          0,
          Effect.sync(() => void order.push("newcomer")),
        ),
      )
      yield* Effect.forEach([holder, waiter, newcomer], Fiber.join)
      assert.deepStrictEqual(order, ["waiter", "newcomer"])
    }),
  )

  it.effect("an interrupted waiter gives its place up; the counts return to zero", () =>
    Effect.gen(function* () {
      const { counts, hooks } = counting()
      const limit = makePriorityLimit(1, 2, hooks)
      const gate = Deferred.makeUnsafe<void>()
      const order: string[] = []
      const holder = yield* Effect.forkChild(limit.withPermit(1, Deferred.await(gate)))
      yield* settle
      const stopped = yield* Effect.forkChild(
        limit.withPermit(
          0,
          Effect.sync(() => void order.push("stopped")),
        ),
      )
      const next = yield* Effect.forkChild(
        limit.withPermit(
          1,
          Effect.sync(() => void order.push("next")),
        ),
      )
      yield* settle
      assert.strictEqual(limit.waiting(), 2)
      yield* Fiber.interrupt(stopped)
      assert.strictEqual(limit.waiting(), 1)
      yield* Deferred.succeed(gate, undefined)
      yield* Effect.forEach([holder, next], Fiber.join)
      assert.deepStrictEqual(order, ["next"])
      assert.deepStrictEqual({ waiting: counts.waiting, inUse: counts.inUse }, { waiting: 0, inUse: 0 })
      assert.strictEqual(limit.inUse(), 0)
    }),
  )

  it.effect("a holder interrupted mid-use gives its permit to the next waiter", () =>
    Effect.gen(function* () {
      const limit = makePriorityLimit(1, 1, counting().hooks)
      const order: string[] = []
      const holder = yield* Effect.forkChild(limit.withPermit(0, Effect.never))
      yield* settle
      const next = yield* Effect.forkChild(
        limit.withPermit(
          0,
          Effect.sync(() => void order.push("next")),
        ),
      )
      yield* settle
      yield* Fiber.interrupt(holder)
      yield* Fiber.join(next)
      assert.deepStrictEqual(order, ["next"])
      assert.strictEqual(limit.inUse(), 0)
    }),
  )
})
