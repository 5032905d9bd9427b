// The controller's result table, with a real workqueue under TestClock and a scripted reconciler.
import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import {
  newReconcileId,
  type ReconcileOutcome,
  type ReconcileResult,
  runController,
  TerminalError,
} from "../../src/engine/controller.ts"
import { makeWorkQueue } from "../../src/engine/workqueue/workqueue.ts"
import { KubeApiError } from "../../src/kube/client.ts"

const conflict = new KubeApiError({
  cluster: "c",
  method: "PATCH",
  path: "/x",
  status: 409,
  reason: "Conflict",
  message: "modified",
})

const harness = (script: (key: string, attempt: number) => Effect.Effect<ReconcileResult, unknown>) =>
  Effect.gen(function* () {
    const queue = yield* makeWorkQueue()
    const attempts = new Map<string, number>()
    const outcomes: ReconcileOutcome[] = []
    const stats = yield* runController({
      name: "test",
      cluster: "c",
      queue,
      workers: 2,
      hooks: { onReconcile: (_c, o) => void outcomes.push(o) },
      reconcile: (req) => {
        const key = `${req.namespace}/${req.name}`
        const n = (attempts.get(key) ?? 0) + 1
        attempts.set(key, n)
        return script(key, n)
      },
    })
    return { queue, attempts, outcomes, stats }
  })

const settle = Effect.gen(function* () {
  for (let i = 0; i < 20; i++) yield* Effect.yieldNow
})

describe("reconcile ids", () => {
  it("are unique, and read as <ms since epoch>-<counter>-<4 random chars> in base 36", () => {
    const before = Date.now()
    const ids = Array.from({ length: 20_000 }, newReconcileId)
    const after = Date.now()
    assert.strictEqual(new Set(ids).size, ids.length)
    for (const id of ids) {
      const match = /^([0-9a-z]+)-([0-9a-z]+)-([0-9a-z]{4})$/.exec(id)
      assert.isNotNull(match, id)
      const ms = Number.parseInt(match![1]!, 36)
      assert.isTrue(ms >= before && ms <= after, id)
    }
    // consecutive ids differ in their counter
    const counters = ids.map((id) => Number.parseInt(id.split("-")[1]!, 36))
    for (let i = 1; i < counters.length; i++)
      assert.strictEqual(counters[i], (counters[i - 1]! + 1) & 0xffffff)
  })
})

describe("controller result table", () => {
  it.effect("done: forgets the key and does not run it again", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const h = yield* harness(() => Effect.succeed({}))
        yield* h.queue.add("ns/a")
        yield* settle
        yield* TestClock.adjust(10_000)
        assert.strictEqual(h.attempts.get("ns/a"), 1)
        assert.deepStrictEqual(h.outcomes, ["success"])
        assert.strictEqual(h.queue.numRequeues("ns/a"), 0)
      }),
    ),
  )

  it.effect("error: requeues with per-item backoff (5 ms, 10 ms, ...) until it succeeds, then forgets", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const h = yield* harness((_k, n) =>
          n < 4 ? Effect.fail(new Error("transient")) : Effect.succeed({}),
        )
        yield* h.queue.add("ns/a")
        yield* settle
        assert.strictEqual(h.attempts.get("ns/a"), 1)
        yield* TestClock.adjust(5)
        yield* settle
        assert.strictEqual(h.attempts.get("ns/a"), 2)
        yield* TestClock.adjust(9)
        yield* settle
        assert.strictEqual(h.attempts.get("ns/a"), 2, "second retry waits 10 ms")
        yield* TestClock.adjust(1)
        yield* settle
        assert.strictEqual(h.attempts.get("ns/a"), 3)
        yield* TestClock.adjust(20)
        yield* settle
        assert.strictEqual(h.attempts.get("ns/a"), 4)
        assert.deepStrictEqual(h.outcomes, ["error", "error", "error", "success"])
        assert.strictEqual(h.queue.numRequeues("ns/a"), 0)
        assert.strictEqual(h.stats.errors, 3)
      }),
    ),
  )

  it.effect("terminal error: counted, never retried", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const h = yield* harness(() => Effect.fail(new TerminalError({ message: "invalid spec" })))
        yield* h.queue.add("ns/a")
        yield* settle
        yield* TestClock.adjust(3_600_000)
        yield* settle
        assert.strictEqual(h.attempts.get("ns/a"), 1)
        assert.deepStrictEqual(h.outcomes, ["terminal_error"])
        assert.strictEqual(h.stats.terminalErrors, 1)
      }),
    ),
  )

  it.effect("defect: recovered, counted as a panic, retried; the worker survives", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const h = yield* harness((key, n) =>
          key === "ns/bad" && n === 1 ? Effect.die(new Error("bug")) : Effect.succeed({}),
        )
        yield* h.queue.add("ns/bad")
        yield* settle
        yield* TestClock.adjust(5)
        yield* settle
        yield* h.queue.add("ns/other")
        yield* settle
        assert.strictEqual(h.attempts.get("ns/bad"), 2)
        assert.strictEqual(h.attempts.get("ns/other"), 1)
        assert.strictEqual(h.stats.panics, 1)
      }),
    ),
  )

  it.effect("requeueAfter: forgets backoff and runs again after the delay", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const h = yield* harness((_k, n) =>
          n === 1
            ? Effect.fail(new Error("x"))
            : n === 2
              ? Effect.succeed({ requeueAfterMs: 30_000 })
              : Effect.succeed({}),
        )
        yield* h.queue.add("ns/a")
        yield* settle
        yield* TestClock.adjust(5)
        yield* settle
        assert.strictEqual(h.attempts.get("ns/a"), 2)
        assert.strictEqual(h.queue.numRequeues("ns/a"), 0)
        yield* TestClock.adjust(29_999)
        yield* settle
        assert.strictEqual(h.attempts.get("ns/a"), 2)
        yield* TestClock.adjust(1)
        yield* settle
        assert.strictEqual(h.attempts.get("ns/a"), 3)
        assert.deepStrictEqual(h.outcomes, ["error", "requeue_after", "success"])
      }),
    ),
  )

  it.effect("conflict: requeued with backoff like an error, counted as a conflict, not an error", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const h = yield* harness((_k, n) => (n === 1 ? Effect.fail(conflict) : Effect.succeed({})))
        yield* h.queue.add("ns/a")
        yield* settle
        yield* TestClock.adjust(5)
        yield* settle
        assert.strictEqual(h.attempts.get("ns/a"), 2)
        assert.deepStrictEqual(h.outcomes, ["conflict", "success"])
        assert.strictEqual(h.stats.conflicts, 1)
        assert.strictEqual(h.stats.errors, 0)
      }),
    ),
  )

  it.effect("never runs one key on two workers at once; a change during processing runs again after", () =>
    Effect.scoped(
      Effect.gen(function* () {
        let inFlight = 0
        let maxInFlight = 0
        const h = yield* harness(() =>
          Effect.gen(function* () {
            inFlight++
            maxInFlight = Math.max(maxInFlight, inFlight)
            yield* Effect.sleep(100)
            inFlight--
            return {}
          }),
        )
        yield* h.queue.add("ns/a")
        yield* settle
        yield* h.queue.add("ns/a")
        yield* h.queue.add("ns/a")
        yield* settle
        yield* TestClock.adjust(100)
        yield* settle
        yield* TestClock.adjust(100)
        yield* settle
        assert.strictEqual(maxInFlight, 1)
        assert.strictEqual(h.attempts.get("ns/a"), 2)
      }),
    ),
  )

  it.effect("stops its workers when the queue shuts down", () =>
    Effect.scoped(
      Effect.gen(function* () {
        const h = yield* harness(() => Effect.succeed({}))
        const fiber = yield* Effect.forkChild(h.queue.shutDownWithDrain)
        yield* settle
        yield* Fiber.join(fiber)
        yield* h.queue.add("ns/late")
        yield* settle
        assert.strictEqual(h.attempts.get("ns/late"), undefined)
      }),
    ),
  )
})
