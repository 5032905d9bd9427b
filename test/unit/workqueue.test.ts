import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Fiber, Scope } from "effect"
import { TestClock } from "effect/testing"
import { ItemExponentialFailureRateLimiter } from "../../src/engine/workqueue/rate-limiter.ts"
import { type GetResult, makeWorkQueue, type WorkQueue } from "../../src/engine/workqueue/workqueue.ts"

// lets woken fibers run: wake-ups are dispatched as scheduler tasks, not inline
const settle = Effect.gen(function* () {
  for (let i = 0; i < 10; i++) yield* Effect.yieldNow
})

const keyOf = (result: GetResult): string => {
  if ("shutdown" in result) throw new Error("unexpected shutdown")
  return result.key
}

const getKey = (q: WorkQueue) => Effect.map(q.get, keyOf)

const isShutdown = (result: GetResult): boolean => "shutdown" in result

const isSuspended = (fiber: Fiber.Fiber<unknown, unknown>): boolean => fiber.pollUnsafe() === undefined

// a broken queue tends to hang rather than fail, so tests get a short real-time limit
const limits = { timeout: 10_000 }

/** Keys handed out, in order, until the queue is empty (each one marked done at once). */
const drainKeys = (q: WorkQueue) =>
  Effect.gen(function* () {
    const keys: Array<string> = []
    while (q.len() > 0) {
      const key = yield* getKey(q)
      keys.push(key)
      yield* q.done(key)
    }
    return keys
  })

describe("workqueue: queue.go semantics", limits, () => {
  it.effect("dedups: a key added twice before get is handed out once", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.add("c/ns/a")
      yield* q.add("c/ns/a")
      assert.strictEqual(q.len(), 1)
      assert.strictEqual(yield* getKey(q), "c/ns/a")
      assert.strictEqual(q.len(), 0)
      const next = yield* Effect.forkChild(q.get)
      yield* settle
      assert.isTrue(isSuspended(next))
    }),
  )

  it.effect("hands keys out in FIFO order, a re-added key keeping its first place", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      for (const key of ["c/ns/a", "c/ns/b", "c/ns/a", "c/ns/c", "c/ns/b", "c/ns/d"]) yield* q.add(key)
      assert.deepStrictEqual(yield* drainKeys(q), ["c/ns/a", "c/ns/b", "c/ns/c", "c/ns/d"])
    }),
  )

  it.effect("keeps FIFO order across the ring buffer's growth and wrap-around", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      const out: Array<string> = []
      let next = 0
      // interleave adds and gets so head and tail wrap several times while the buffer grows
      for (let round = 0; round < 50; round++) {
        for (let i = 0; i < round; i++) yield* q.add(`k${next++}`)
        for (let i = 0; i < round / 2; i++) {
          const key = yield* getKey(q)
          out.push(key)
          yield* q.done(key)
        }
      }
      out.push(...(yield* drainKeys(q)))
      assert.deepStrictEqual(
        out,
        Array.from({ length: next }, (_, i) => `k${i}`),
      )
    }),
  )

  it.effect("a key re-added while processing waits for done, then is handed out once", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.add("c/ns/a")
      assert.strictEqual(yield* getKey(q), "c/ns/a")
      yield* q.add("c/ns/a")
      yield* q.add("c/ns/a")
      // dirty but not queued while a worker holds it
      assert.strictEqual(q.len(), 0)
      const waiter = yield* Effect.forkChild(getKey(q))
      yield* settle
      assert.isTrue(isSuspended(waiter))
      yield* q.done("c/ns/a")
      assert.strictEqual(yield* Fiber.join(waiter), "c/ns/a")
      assert.strictEqual(q.len(), 0)
      yield* q.done("c/ns/a")
      assert.strictEqual(q.len(), 0)
    }),
  )

  it.effect("done without a re-add does not queue the key again", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.add("a")
      yield* q.done(yield* getKey(q))
      assert.strictEqual(q.len(), 0)
      // done for a key nobody holds must not duplicate a queued key
      yield* q.add("b")
      yield* q.done("b")
      yield* q.done("b")
      assert.strictEqual(q.len(), 1)
    }),
  )

  it.effect("never hands one key to two concurrent getters", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      const first = yield* Effect.forkChild(getKey(q))
      const second = yield* Effect.forkChild(getKey(q))
      yield* settle
      yield* q.add("c/ns/a")
      yield* settle
      // exactly one of them holds it
      const [holder, other] = isSuspended(first) ? [second, first] : [first, second]
      assert.isFalse(isSuspended(holder))
      assert.strictEqual(yield* Fiber.join(holder), "c/ns/a")
      yield* q.add("c/ns/a")
      yield* settle
      assert.isTrue(isSuspended(other))
      yield* q.done("c/ns/a")
      assert.strictEqual(yield* Fiber.join(other), "c/ns/a")
    }),
  )

  it.effect("under concurrent workers: no key overlaps itself and no change is lost", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      const keys = ["a", "b", "c", "d", "e"]
      const inFlight = new Set<string>()
      let clock = 0
      const lastAdd = new Map<string, number>()
      const lastStart = new Map<string, number>()
      let overlaps = 0
      let processed = 0
      const worker = Effect.gen(function* () {
        while (true) {
          const result = yield* q.get
          if ("shutdown" in result) return
          const key = result.key
          if (inFlight.has(key)) overlaps++
          inFlight.add(key)
          lastStart.set(key, ++clock)
          processed++
          // hold the key across a few scheduler turns so adds land during processing
          for (let i = 0; i < 1 + (processed % 3); i++) yield* Effect.yieldNow
          inFlight.delete(key)
          yield* q.done(key)
        }
      })
      const workers = yield* Effect.forkChild(
        Effect.all([worker, worker, worker, worker], { concurrency: 4 }),
      )
      // a fixed pseudo-random sequence, so a failure reproduces
      let seed = 42
      for (let i = 0; i < 2000; i++) {
        seed = (seed * 1103515245 + 12345) % 2 ** 31
        const key = keys[seed % keys.length]!
        lastAdd.set(key, ++clock)
        yield* q.add(key)
        if (i % 7 === 0) yield* Effect.yieldNow
      }
      yield* q.shutDownWithDrain
      yield* Fiber.join(workers)
      assert.strictEqual(overlaps, 0)
      for (const key of keys)
        assert.isTrue(lastStart.get(key)! > lastAdd.get(key)!, `last change of ${key} lost`)
      // dedup did its job: far fewer runs than adds
      assert.isBelow(processed, 2000)
    }),
  )

  it.effect("a getter interrupted while waiting does not swallow the next key", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      const gone = yield* Effect.forkChild(getKey(q))
      const stays = yield* Effect.forkChild(getKey(q))
      yield* settle
      yield* Fiber.interrupt(gone)
      yield* q.add("a")
      assert.strictEqual(yield* Fiber.join(stays), "a")
    }),
  )

  it.effect("a getter woken for a key but interrupted before it ran passes the key on", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      const first = yield* Effect.forkChild(getKey(q))
      yield* settle
      const second = yield* Effect.forkChild(getKey(q))
      yield* settle
      // wakes the longest waiter (first) via a scheduled task; interrupt it before the task runs
      q.addUnsafe("a")
      yield* Fiber.interrupt(first)
      assert.strictEqual(yield* Fiber.join(second), "a")
    }),
  )
})

describe("workqueue: delaying_queue.go semantics", limits, () => {
  it.effect("addAfter(0) and negative delays add at once", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.addAfter("a", 0)
      yield* q.addAfter("b", -5)
      assert.strictEqual(q.len(), 2)
      assert.deepStrictEqual(yield* drainKeys(q), ["a", "b"])
    }),
  )

  it.effect("a delayed key appears exactly at its virtual deadline", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.addAfter("a", 1000)
      yield* TestClock.adjust(999)
      assert.strictEqual(q.len(), 0)
      yield* TestClock.adjust(1)
      assert.strictEqual(q.len(), 1)
      assert.strictEqual(yield* getKey(q), "a")
    }),
  )

  it.effect("wakes a getter that is already waiting when the deadline passes", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      const waiter = yield* Effect.forkChild(getKey(q))
      yield* q.addAfter("a", 250)
      yield* TestClock.adjust(249)
      assert.isTrue(isSuspended(waiter))
      yield* TestClock.adjust(1)
      assert.strictEqual(yield* Fiber.join(waiter), "a")
    }),
  )

  it.effect("fires delayed keys in deadline order, each at its own time", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.addAfter("c", 300)
      yield* q.addAfter("a", 100)
      yield* q.addAfter("b", 200)
      yield* q.addAfter("d", 200)
      yield* TestClock.adjust(100)
      assert.deepStrictEqual(yield* drainKeys(q), ["a"])
      yield* TestClock.adjust(100)
      // equal deadlines keep addAfter order
      assert.deepStrictEqual(yield* drainKeys(q), ["b", "d"])
      yield* TestClock.adjust(100)
      assert.deepStrictEqual(yield* drainKeys(q), ["c"])
    }),
  )

  it.effect("an earlier addAfter replaces a later one that is still waiting", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.addAfter("a", 1000)
      yield* TestClock.adjust(10)
      yield* q.addAfter("a", 100)
      yield* TestClock.adjust(99)
      assert.strictEqual(q.len(), 0)
      yield* TestClock.adjust(1)
      assert.deepStrictEqual(yield* drainKeys(q), ["a"])
      // the 1000 ms entry was replaced, not kept beside the earlier one
      yield* TestClock.adjust(5000)
      assert.strictEqual(q.len(), 0)
    }),
  )

  it.effect("an earlier addAfter moves a key ahead of other waiting keys", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.addAfter("a", 100)
      yield* q.addAfter("b", 200)
      yield* q.addAfter("c", 300)
      yield* q.addAfter("d", 400)
      yield* q.addAfter("d", 50)
      yield* TestClock.adjust(50)
      assert.deepStrictEqual(yield* drainKeys(q), ["d"])
      yield* TestClock.adjust(250)
      assert.deepStrictEqual(yield* drainKeys(q), ["a", "b", "c"])
    }),
  )

  it.effect("a later addAfter for a waiting key is ignored", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.addAfter("a", 100)
      yield* q.addAfter("a", 1000)
      yield* TestClock.adjust(100)
      assert.deepStrictEqual(yield* drainKeys(q), ["a"])
      yield* TestClock.adjust(5000)
      assert.strictEqual(q.len(), 0)
    }),
  )

  it.effect("an immediate add does not cancel a pending delayed add of the same key", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.addAfter("a", 100)
      yield* q.add("a")
      assert.deepStrictEqual(yield* drainKeys(q), ["a"])
      yield* TestClock.adjust(100)
      assert.deepStrictEqual(yield* drainKeys(q), ["a"])
    }),
  )

  it.effect("a delayed key that fires while the key is processing runs once more after done", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.add("a")
      assert.strictEqual(yield* getKey(q), "a")
      yield* q.addAfter("a", 50)
      yield* TestClock.adjust(50)
      assert.strictEqual(q.len(), 0)
      yield* q.done("a")
      assert.deepStrictEqual(yield* drainKeys(q), ["a"])
    }),
  )
})

describe("workqueue: rate_limiting_queue.go semantics", limits, () => {
  it.effect("addRateLimited backs off 5, 10, 20 ms; forget resets; numRequeues counts", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      const failOnce = (expectedDelay: number) =>
        Effect.gen(function* () {
          yield* q.addRateLimited("a")
          yield* TestClock.adjust(expectedDelay - 1)
          assert.strictEqual(q.len(), 0, `not before ${expectedDelay} ms`)
          yield* TestClock.adjust(1)
          assert.deepStrictEqual(yield* drainKeys(q), ["a"], `at ${expectedDelay} ms`)
        })
      yield* failOnce(5)
      yield* failOnce(10)
      yield* failOnce(20)
      assert.strictEqual(q.numRequeues("a"), 3)
      yield* q.forget("a")
      assert.strictEqual(q.numRequeues("a"), 0)
      yield* failOnce(5)
      assert.strictEqual(q.numRequeues("a"), 1)
    }),
  )

  it.effect("forget clears backoff history only, not a queued key", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.add("a")
      yield* q.forget("a")
      assert.strictEqual(q.len(), 1)
    }),
  )

  it.effect("the default limiter's bucket spaces a failure storm 100 ms apart after 100 keys", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      for (let i = 0; i < 102; i++) yield* q.addRateLimited(`k${i}`)
      yield* TestClock.adjust(5)
      assert.strictEqual(q.len(), 100)
      yield* TestClock.adjust(94)
      assert.strictEqual(q.len(), 100)
      yield* TestClock.adjust(1)
      assert.strictEqual(q.len(), 101)
      yield* TestClock.adjust(100)
      assert.strictEqual(q.len(), 102)
    }),
  )

  it.effect("uses the given limiter, capped at its max", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue({
        rateLimiter: new ItemExponentialFailureRateLimiter({ baseDelayMs: 5, maxDelayMs: 1_000_000 }),
      })
      for (let i = 0; i < 30; i++) yield* q.addRateLimited("a")
      assert.strictEqual(q.numRequeues("a"), 30)
      // the first call's 5 ms deadline won, then the queue holds it once
      yield* TestClock.adjust(5)
      assert.deepStrictEqual(yield* drainKeys(q), ["a"])
      // the 31st failure waits the cap, 1000 s
      yield* q.addRateLimited("a")
      yield* TestClock.adjust(999_999)
      assert.strictEqual(q.len(), 0)
      yield* TestClock.adjust(1)
      assert.strictEqual(q.len(), 1)
    }),
  )
})

describe("workqueue: shutdown", limits, () => {
  it.effect("shutDown wakes every waiting getter with shutdown and ignores later adds", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      const getters = yield* Effect.forkChild(Effect.all([q.get, q.get, q.get], { concurrency: 3 }))
      yield* settle
      yield* q.shutDown
      const results = yield* Fiber.join(getters)
      assert.deepStrictEqual(results.map(isShutdown), [true, true, true])
      assert.isTrue(q.shuttingDown())
      yield* q.add("a")
      yield* q.addAfter("b", 0)
      yield* q.addRateLimited("c")
      assert.strictEqual(q.len(), 0)
      assert.isTrue(isShutdown(yield* q.get))
    }),
  )

  it.effect("keys queued before shutDown are still handed out, then shutdown", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.add("a")
      yield* q.add("b")
      yield* q.shutDown
      assert.strictEqual(yield* getKey(q), "a")
      assert.strictEqual(yield* getKey(q), "b")
      assert.isTrue(isShutdown(yield* q.get))
    }),
  )

  it.effect("shutDown drops keys still waiting for their delay", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.addAfter("a", 100)
      yield* q.shutDown
      yield* TestClock.adjust(1000)
      assert.strictEqual(q.len(), 0)
      assert.isTrue(isShutdown(yield* q.get))
    }),
  )

  it.effect("shutDownWithDrain waits until the key in flight is done", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.add("a")
      yield* q.add("b")
      const a = yield* getKey(q)
      const b = yield* getKey(q)
      const draining = yield* Effect.forkChild(q.shutDownWithDrain)
      yield* settle
      assert.isTrue(isSuspended(draining))
      assert.isTrue(isShutdown(yield* q.get))
      yield* q.done(a)
      yield* settle
      assert.isTrue(isSuspended(draining))
      yield* q.done(b)
      yield* Fiber.join(draining)
    }),
  )

  it.effect("shutDownWithDrain also waits for a re-added key's second run", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.add("a")
      yield* getKey(q)
      yield* q.add("a")
      const draining = yield* Effect.forkChild(q.shutDownWithDrain)
      yield* settle
      yield* q.done("a")
      // the change made during processing is not lost by shutting down
      assert.strictEqual(yield* getKey(q), "a")
      yield* settle
      assert.isTrue(isSuspended(draining))
      yield* q.done("a")
      yield* Fiber.join(draining)
    }),
  )

  it.effect("shutDownWithDrain returns at once when nothing is in flight", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.shutDownWithDrain
      assert.isTrue(q.shuttingDown())
    }),
  )

  it.effect("a plain shutDown releases a pending drain", () =>
    Effect.gen(function* () {
      const q = yield* makeWorkQueue()
      yield* q.add("a")
      yield* getKey(q)
      const draining = yield* Effect.forkChild(q.shutDownWithDrain)
      yield* settle
      assert.isTrue(isSuspended(draining))
      yield* q.shutDown
      yield* Fiber.join(draining)
    }),
  )

  it.effect("closing the queue's scope shuts it down and wakes its getters", () =>
    Effect.gen(function* () {
      const scope = yield* Scope.make()
      const q = yield* makeWorkQueue().pipe(Scope.provide(scope))
      const getter = yield* Effect.forkChild(q.get)
      yield* settle
      assert.isTrue(isSuspended(getter))
      yield* Scope.close(scope, Exit.void)
      assert.isTrue(isShutdown(yield* Fiber.join(getter)))
      assert.isTrue(q.shuttingDown())
    }),
  )
})

describe("workqueue: metrics hooks", limits, () => {
  it.effect("reports adds, depth, queue time, work time and retries", () =>
    Effect.gen(function* () {
      const events: Array<string> = []
      const q = yield* makeWorkQueue({
        name: "member-1",
        metrics: {
          onAdd: (key) => events.push(`add ${key}`),
          onDepth: (depth) => events.push(`depth ${depth}`),
          onGet: (key, queuedMs) => events.push(`get ${key} ${queuedMs}`),
          onDone: (key, workMs) => events.push(`done ${key} ${workMs}`),
          onRetry: (key) => events.push(`retry ${key}`),
        },
      })
      assert.strictEqual(q.name, "member-1")
      yield* q.add("a")
      yield* q.add("a")
      yield* TestClock.adjust(30)
      yield* getKey(q)
      // a re-add during processing counts as an add and as depth
      yield* q.add("a")
      yield* TestClock.adjust(20)
      yield* q.done("a")
      yield* getKey(q)
      yield* TestClock.adjust(7)
      yield* q.done("a")
      yield* q.addRateLimited("b")
      yield* TestClock.adjust(5)
      assert.deepStrictEqual(events, [
        "add a",
        "depth 1",
        "depth 0",
        "get a 30",
        "add a",
        "depth 1",
        "done a 20",
        "depth 0",
        "get a 20",
        "done a 7",
        "retry b",
        "add b",
        "depth 1",
      ])
    }),
  )
})
