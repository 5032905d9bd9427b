import { describe, expect, it } from "vitest"
import { sameObjectsMemo } from "../../src/hub/registration/same-objects-memo.ts"

describe("sameObjectsMemo", () => {
  const counting = (validUntil: number) => {
    let computed = 0
    const memo = sameObjectsMemo((objects: ReadonlyArray<{ n: number }>) => {
      computed++
      return { result: objects.map((o) => o.n), validUntil }
    })
    return { memo, computed: () => computed }
  }

  it("computes once while the same objects come in the same order, in a fresh array each time", () => {
    const { memo, computed } = counting(Number.POSITIVE_INFINITY)
    const a = { n: 1 }
    const b = { n: 2 }
    expect(memo([a, b], 0)).toEqual([1, 2])
    expect(memo([a, b], 1)).toEqual([1, 2])
    expect(memo([a, b], 1e12)).toEqual([1, 2])
    expect(computed()).toBe(1)
  })

  it("computes again when an object was replaced, added, removed or moved", () => {
    const { memo, computed } = counting(Number.POSITIVE_INFINITY)
    const a = { n: 1 }
    const b = { n: 2 }
    memo([a, b], 0)
    expect(memo([a, { n: 2 }], 0)).toEqual([1, 2])
    expect(computed()).toBe(2)
    expect(memo([a, b, { n: 3 }], 0)).toEqual([1, 2, 3])
    expect(memo([a], 0)).toEqual([1])
    expect(memo([b, a], 0)).toEqual([2, 1])
    expect(computed()).toBe(5)
  })

  it("computes again from the time the result said it holds until (a credential's expiry)", () => {
    const { memo, computed } = counting(100)
    const a = { n: 1 }
    memo([a], 0)
    memo([a], 99)
    expect(computed()).toBe(1)
    memo([a], 100)
    expect(computed()).toBe(2)
  })
})
