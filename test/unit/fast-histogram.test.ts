// FastHistogram exports exactly what prom-client's Histogram exports for the same observations: the
// text exposition line for line, and the JSON view, through zero, remove and reset.
import { assert, describe, it } from "@effect/vitest"
import { Histogram, Registry } from "prom-client"
import { FastHistogram } from "../../src/observability/metrics/fast-series.ts"

const buckets = [1e-8, 1e-6, 1e-3, 0.01, 0.1, 1, 10]
const config = { name: "work_seconds", help: "How long work takes.", labelNames: ["name", "controller"] }

const pair = () => {
  const reference = new Registry()
  const fast = new Registry()
  return {
    reference,
    fast,
    slow: new Histogram({ ...config, buckets, registers: [reference] }),
    quick: new FastHistogram({ ...config, buckets, registry: fast }),
  }
}

const sameExposition = async (p: ReturnType<typeof pair>) => {
  assert.strictEqual(await p.fast.metrics(), await p.reference.metrics())
  assert.deepStrictEqual(await p.fast.getMetricsAsJSON(), await p.reference.getMetricsAsJSON())
}

describe("FastHistogram", () => {
  it("exposes what prom-client's Histogram exposes for the same observations", async () => {
    const p = pair()
    const a = { name: "backupcheck", controller: "backupcheck" }
    const b = { name: "registration", controller: "registration" }
    p.slow.zero(a)
    p.quick.zero(a)
    await sameExposition(p)
    const slowA = p.slow.labels(a)
    const quickA = p.quick.series(a)
    const quickB = p.quick.series(b)
    // on a bound, between bounds, under the first, over the last, zero
    for (const v of [1e-8, 5e-7, 0, 0.01, 0.5, 10, 11, 3e-5, 1e-9]) {
      slowA.observe(v)
      quickA.observe(v)
      p.slow.observe(b, v * 2)
      quickB.observe(v * 2)
    }
    await sameExposition(p)
    // zero resets a series; remove drops it until its next observation; reset drops all
    p.slow.zero(a)
    p.quick.zero(a)
    p.slow.remove(b)
    p.quick.remove(b)
    await sameExposition(p)
    p.slow.observe(b, 0.2)
    quickB.observe(0.2)
    await sameExposition(p)
    p.reference.resetMetrics()
    p.fast.resetMetrics()
    await sameExposition(p)
    slowA.observe(2)
    quickA.observe(2)
    await sameExposition(p)
    assert.match(
      await p.fast.metrics(),
      /work_seconds_bucket\{le="\+Inf",name="backupcheck",controller="backupcheck"\} 1/,
    )
  })
})
