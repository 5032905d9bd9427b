import { assert, describe, it } from "@effect/vitest"
import {
  BucketRateLimiter,
  defaultControllerRateLimiter,
  ItemExponentialFailureRateLimiter,
  MaxOfRateLimiter,
  type RateLimiter,
} from "../../src/engine/workqueue/rate-limiter.ts"

describe("ItemExponentialFailureRateLimiter", () => {
  it("doubles from 5 ms per failure of a key", () => {
    const limiter = new ItemExponentialFailureRateLimiter()
    const delays = Array.from({ length: 6 }, () => limiter.when("c/ns/a", 0))
    assert.deepStrictEqual(delays, [5, 10, 20, 40, 80, 160])
    assert.strictEqual(limiter.numRequeues("c/ns/a"), 6)
  })

  it("caps at 1000 s and stays there, even far past overflow", () => {
    const limiter = new ItemExponentialFailureRateLimiter()
    // 5 ms * 2^17 = 655.36 s, 2^18 would be 1310.72 s
    for (let i = 0; i < 17; i++) limiter.when("k", 0)
    assert.strictEqual(limiter.when("k", 0), 5 * 2 ** 17)
    assert.strictEqual(limiter.when("k", 0), 1_000_000)
    for (let i = 0; i < 2000; i++) limiter.when("k", 0)
    assert.strictEqual(limiter.when("k", 0), 1_000_000)
  })

  it("keeps keys independent and forget resets only that key", () => {
    const limiter = new ItemExponentialFailureRateLimiter()
    limiter.when("a", 0)
    limiter.when("a", 0)
    limiter.when("b", 0)
    limiter.forget("a")
    assert.strictEqual(limiter.numRequeues("a"), 0)
    assert.strictEqual(limiter.when("a", 0), 5)
    assert.strictEqual(limiter.numRequeues("b"), 1)
    assert.strictEqual(limiter.when("b", 0), 10)
  })

  it("honours custom base and max", () => {
    const limiter = new ItemExponentialFailureRateLimiter({ baseDelayMs: 1, maxDelayMs: 3 })
    assert.deepStrictEqual(
      [0, 0, 0, 0].map(() => limiter.when("k", 0)),
      [1, 2, 3, 3],
    )
  })
})

describe("BucketRateLimiter", () => {
  it("allows a burst of 100, then spaces reservations 100 ms apart", () => {
    const limiter = new BucketRateLimiter()
    for (let i = 0; i < 100; i++) assert.strictEqual(limiter.when(`k${i}`, 1000), 0)
    assert.strictEqual(limiter.when("x", 1000), 100)
    assert.strictEqual(limiter.when("y", 1000), 200)
    assert.strictEqual(limiter.when("z", 1000), 300)
  })

  it("refills at 10 tokens per second, up to the burst", () => {
    const limiter = new BucketRateLimiter()
    for (let i = 0; i < 100; i++) limiter.when("k", 0)
    // 1 s later, 10 tokens are back
    for (let i = 0; i < 10; i++) assert.strictEqual(limiter.when("k", 1000), 0)
    assert.strictEqual(limiter.when("k", 1000), 100)
    // a long idle period refills to the burst and no further
    for (let i = 0; i < 100; i++) assert.strictEqual(limiter.when("k", 1_000_000), 0)
    assert.strictEqual(limiter.when("k", 1_000_000), 100)
  })

  it("pays back debt before granting again", () => {
    const limiter = new BucketRateLimiter({ qps: 10, burst: 1 })
    assert.strictEqual(limiter.when("k", 0), 0)
    assert.strictEqual(limiter.when("k", 0), 100)
    assert.strictEqual(limiter.when("k", 0), 200)
    // 150 ms later 1.5 of the 2 owed tokens are back: one more leaves 1.5 owed, a 150 ms wait
    assert.closeTo(limiter.when("k", 150), 150, 1e-9)
  })

  it("has no per-key state", () => {
    const limiter = new BucketRateLimiter()
    limiter.when("k", 0)
    assert.strictEqual(limiter.numRequeues("k"), 0)
    limiter.forget("k")
  })
})

describe("MaxOfRateLimiter", () => {
  const fixed = (delay: number, requeues: number): RateLimiter & { calls: number; forgotten: number } => ({
    calls: 0,
    forgotten: 0,
    when(_key, _now) {
      this.calls++
      return delay
    },
    forget(_key) {
      this.forgotten++
    },
    numRequeues: () => requeues,
  })

  it("returns the longest delay and consults every limiter", () => {
    const a = fixed(30, 2)
    const b = fixed(70, 5)
    const c = fixed(10, 1)
    const limiter = new MaxOfRateLimiter(a, b, c)
    assert.strictEqual(limiter.when("k", 0), 70)
    assert.deepStrictEqual([a.calls, b.calls, c.calls], [1, 1, 1])
    assert.strictEqual(limiter.numRequeues("k"), 5)
    limiter.forget("k")
    assert.deepStrictEqual([a.forgotten, b.forgotten, c.forgotten], [1, 1, 1])
  })
})

describe("defaultControllerRateLimiter", () => {
  it("is per-key exponential while the bucket has tokens", () => {
    const limiter = defaultControllerRateLimiter()
    assert.deepStrictEqual(
      [0, 0, 0, 0].map(() => limiter.when("k", 0)),
      [5, 10, 20, 40],
    )
    assert.strictEqual(limiter.numRequeues("k"), 4)
    limiter.forget("k")
    assert.strictEqual(limiter.numRequeues("k"), 0)
    assert.strictEqual(limiter.when("k", 0), 5)
  })

  it("falls back to the bucket's spacing when many keys fail at once", () => {
    const limiter = defaultControllerRateLimiter()
    for (let i = 0; i < 100; i++) assert.strictEqual(limiter.when(`k${i}`, 0), 5)
    assert.strictEqual(limiter.when("k100", 0), 100)
    assert.strictEqual(limiter.when("k101", 0), 200)
  })
})
