// The access review's contract without an API server: the verdict table, the brief bounded cache, and
// what a flood of random tokens costs (reviews limited, memory bounded). Against a real API server it is
// proven in test/integration/deploy.test.ts. Time is vitest's fake clock, so nothing here waits.
import { afterEach, assert, beforeEach, describe, it, vi } from "vitest"
import {
  bearerToken,
  makeAccessReview,
  maxCachedVerdicts,
  maxWaitingReviews,
  type ReviewedUser,
  type ReviewTarget,
  readSubjectAccessReview,
  readTokenReview,
  reviewBurst,
  reviewsPerSecond,
  subjectAccessReviewBody,
  verdictTtlMs,
} from "../../src/hub/access-review.ts"

const metrics: ReviewTarget = { path: "/metrics" }
const fleet: ReviewTarget = { group: "fleetcheck.io", resource: "fleet" }

/** A reviewer that knows two tokens: "reader" may read /metrics, "nobody" may read nothing. */
const makeReviewer = () => {
  const calls = { authenticate: 0, authorize: 0 }
  let failing = false
  return {
    calls,
    fail: (on: boolean) => {
      failing = on
    },
    reviewer: {
      authenticate: async (token: string): Promise<ReviewedUser | undefined> => {
        calls.authenticate++
        if (failing) throw new Error("apiserver down")
        return token === "reader" || token === "nobody" ? { username: token, groups: ["g"] } : undefined
      },
      authorize: async (user: ReviewedUser, target: ReviewTarget, verb: string) => {
        calls.authorize++
        return user.username === "reader" && "path" in target && target.path === "/metrics" && verb === "get"
      },
    },
  }
}

beforeEach(() => {
  vi.useFakeTimers()
})
afterEach(() => {
  vi.useRealTimers()
})

describe("access review", () => {
  it("reads only a well-formed bearer token", () => {
    assert.strictEqual(bearerToken("Bearer abc.def"), "abc.def")
    assert.strictEqual(bearerToken("bearer   abc"), "abc")
    assert.strictEqual(bearerToken(undefined), undefined)
    assert.strictEqual(bearerToken("Basic dXNlcjpwdw=="), undefined)
    assert.strictEqual(bearerToken("Bearer a b"), undefined)
    assert.strictEqual(bearerToken("Bearer "), undefined)
    assert.strictEqual(bearerToken(`Bearer ${"x".repeat(16 * 1024 + 1)}`), undefined)
  })

  it("reads the API server's answers strictly and asks about the non-resource URL", () => {
    assert.deepStrictEqual(
      readTokenReview({ status: { authenticated: true, user: { username: "u", groups: ["a"] } } }),
      { username: "u", uid: undefined, groups: ["a"], extra: undefined },
    )
    assert.strictEqual(readTokenReview({ status: { authenticated: false } }), undefined)
    assert.strictEqual(readTokenReview({ status: { authenticated: true, user: {} } }), undefined)
    assert.throws(() => readTokenReview({ status: { authenticated: "yes" } }))
    assert.strictEqual(readSubjectAccessReview({ status: { allowed: true } }), true)
    assert.strictEqual(readSubjectAccessReview({ status: { allowed: false, denied: true } }), false)
    assert.throws(() => readSubjectAccessReview({ status: { allowed: "true" } }))
    assert.deepStrictEqual(subjectAccessReviewBody({ username: "u", groups: ["g"] }, metrics, "get").spec, {
      user: "u",
      groups: ["g"],
      nonResourceAttributes: { path: "/metrics", verb: "get" },
    })
    assert.deepStrictEqual(subjectAccessReviewBody({ username: "u" }, fleet, "get").spec, {
      user: "u",
      resourceAttributes: { group: "fleetcheck.io", resource: "fleet", verb: "get" },
    })
  })

  it("401 without a token or with one the API server rejects, 403 when denied, 200 when allowed", async () => {
    const r = makeReviewer()
    const access = makeAccessReview(r.reviewer)
    assert.strictEqual((await access.review(undefined, metrics, "get")).status, 401)
    assert.strictEqual((await access.review("Bearer random", metrics, "get")).status, 401)
    assert.strictEqual((await access.review("Bearer nobody", metrics, "get")).status, 403)
    assert.strictEqual((await access.review("Bearer reader", fleet, "get")).status, 403)
    const ok = await access.review("Bearer reader", metrics, "get")
    assert.deepStrictEqual(ok, { status: 200, user: "reader" })
  })

  it("reuses a verdict for its TTL, then asks again; concurrent questions share one review", async () => {
    const r = makeReviewer()
    const access = makeAccessReview(r.reviewer)
    const answers = await Promise.all(
      Array.from({ length: 10 }, () => access.review("Bearer reader", metrics, "get")),
    )
    assert.deepStrictEqual(new Set(answers.map((a) => a.status)), new Set([200]))
    assert.deepStrictEqual(r.calls, { authenticate: 1, authorize: 1 })
    await access.review("Bearer reader", metrics, "get")
    // Another path needs its own authorization, not another authentication.
    await access.review("Bearer reader", fleet, "get")
    assert.deepStrictEqual(r.calls, { authenticate: 1, authorize: 2 })
    vi.advanceTimersByTime(verdictTtlMs)
    await access.review("Bearer reader", metrics, "get")
    assert.deepStrictEqual(r.calls, { authenticate: 2, authorize: 3 })
  })

  it("a review the API server could not answer is 503 and is not cached", async () => {
    const r = makeReviewer()
    const access = makeAccessReview(r.reviewer)
    r.fail(true)
    const down = await access.review("Bearer reader", metrics, "get")
    assert.strictEqual(down.status, 503)
    assert.notInclude(JSON.stringify(down), "apiserver down", "the cause is logged, not told to the caller")
    r.fail(false)
    assert.strictEqual((await access.review("Bearer reader", metrics, "get")).status, 200)
    assert.strictEqual(r.calls.authenticate, 2)
  })

  it("a flood of random tokens: reviews limited to the burst and the rate, the rest waits or gets 429", async () => {
    const r = makeReviewer()
    const access = makeAccessReview(r.reviewer)
    const flood = 1_000
    const pending = Array.from({ length: flood }, (_, i) =>
      access.review(`Bearer random-${i}`, metrics, "get"),
    )
    await vi.advanceTimersByTimeAsync(0)
    assert.strictEqual(r.calls.authenticate, reviewBurst, "the burst at once")
    assert.strictEqual(access.stats().waiting, maxWaitingReviews)
    await vi.advanceTimersByTimeAsync(1_000)
    assert.isAtMost(r.calls.authenticate, reviewBurst + reviewsPerSecond + 1, "then the rate")
    await vi.advanceTimersByTimeAsync(10_000)
    const statuses = await Promise.all(pending)
    const count = (s: number) => statuses.filter((v) => v.status === s).length
    assert.strictEqual(count(401), reviewBurst + maxWaitingReviews)
    assert.strictEqual(count(429), flood - reviewBurst - maxWaitingReviews)
    assert.strictEqual(r.calls.authenticate, reviewBurst + maxWaitingReviews)
    // A known token's cached verdict is answered during a flood without waiting for a permit.
    await access.review("Bearer reader", metrics, "get")
    const again = Array.from({ length: 500 }, (_, i) => access.review(`Bearer more-${i}`, metrics, "get"))
    assert.strictEqual((await access.review("Bearer reader", metrics, "get")).status, 200)
    await vi.advanceTimersByTimeAsync(60_000)
    await Promise.all(again)
  })

  it("memory stays bounded however many distinct tokens come", async () => {
    const r = makeReviewer()
    const access = makeAccessReview(r.reviewer)
    // Slower than the rate limit, so every token is reviewed and its verdict cached.
    for (let i = 0; i < 2 * maxCachedVerdicts + 100; i++) {
      const answer = access.review(`Bearer t-${i}`, metrics, "get")
      await vi.advanceTimersByTimeAsync(1_000 / reviewsPerSecond)
      assert.strictEqual((await answer).status, 401)
    }
    assert.strictEqual(r.calls.authenticate, 2 * maxCachedVerdicts + 100)
    assert.isAtMost(access.stats().cached, maxCachedVerdicts)
  })
})
