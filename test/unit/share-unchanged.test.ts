// A new version of a cached object points its unchanged parts at the cached version's, so the decoded
// copies die young and per-part work (a parsed spec) is found again by identity. The cached version
// is never changed, and only what is JSON-equal is shared.
import { describe, expect, it } from "vitest"
import { shareUnchanged } from "../../src/engine/informer/share-unchanged.ts"
import { makeStore } from "../../src/engine/informer/store.ts"

const version = (rv: string, label: string, reason: string) => ({
  metadata: {
    name: "a",
    namespace: "ns",
    uid: "u",
    resourceVersion: rv,
    labels: { tick: label },
    finalizers: ["f"],
  },
  spec: { backup: { name: "b" }, list: [1, { x: 2 }] },
  status: {
    conditions: [
      { type: "Ready", status: "True", reason: "Verified" },
      { type: "Verified", status: "True", reason },
    ],
  },
})

describe("shareUnchanged", () => {
  it("points equal parts at the cached version's and leaves changed parts the new version's", () => {
    const cached = version("1", "x", "RestoreSucceeded")
    const snapshot = JSON.stringify(cached)
    const next = version("2", "y", "RestoreFailed")
    const nextSpec = next.spec
    shareUnchanged(cached, next)
    expect(next.spec).toBe(cached.spec)
    expect(next.metadata).not.toBe(cached.metadata)
    expect(next.metadata.finalizers).toBe(cached.metadata.finalizers)
    expect(next.metadata.labels).not.toBe(cached.metadata.labels)
    expect(next.status).not.toBe(cached.status)
    expect(next.status.conditions[0]).toBe(cached.status.conditions[0])
    expect(next.status.conditions[1]).not.toBe(cached.status.conditions[1])
    // Same content as decoded, and the cached version untouched.
    expect(next).toEqual(version("2", "y", "RestoreFailed"))
    expect(nextSpec).toEqual(cached.spec)
    expect(JSON.stringify(cached)).toBe(snapshot)
  })

  it("compares keys in any order, undefined-valued keys as absent, and arrays by position and length", () => {
    const cached = { spec: { a: 1, b: 2 }, list: [1, 2], more: [{ k: 1 }], status: { c: 1 } }
    const next = {
      spec: { b: 2, a: 1, z: undefined },
      list: [1, 2, 3],
      more: [{ k: 1 }, { k: 2 }],
      status: { c: 2 },
    }
    shareUnchanged(cached, next)
    expect(next.spec).toBe(cached.spec)
    expect(next.list).not.toBe(cached.list)
    expect(next.more).not.toBe(cached.more)
    expect(next.more[0]).toBe(cached.more[0])
    expect(next.status).not.toBe(cached.status)
  })

  it("does not share across types, and shares nothing it cannot assign safely", () => {
    const cached = JSON.parse('{"a": {"x": 1}, "b": [1], "c": {"__proto__": {"polluted": true}, "k": 1}}')
    const next = JSON.parse('{"a": [1], "b": {"0": 1}, "c": {"__proto__": {"polluted": true}, "k": 1}}')
    shareUnchanged(cached, next)
    expect(next.a).toEqual([1])
    expect(next.b).toEqual({ "0": 1 })
    expect(next.c).not.toBe(cached.c)
    expect(Object.getPrototypeOf(next.c)).toBe(Object.prototype)
    expect(({} as { polluted?: boolean }).polluted).toBeUndefined()
    const date = new Date(0)
    const withDate = { when: new Date(0) }
    shareUnchanged({ when: date }, withDate)
    expect(withDate.when).not.toBe(date)
  })

  it("leaves parts nested deeper than it looks as they are, without overflowing the stack", () => {
    const deep = (n: number) => {
      let value: unknown = 1
      for (let i = 0; i < n; i++) value = [value]
      return value
    }
    const cached = { spec: deep(100_000) }
    const next = { spec: deep(100_000) }
    expect(() => shareUnchanged(cached, next)).not.toThrow()
    // (compared by hand: the test runner's own matchers recurse through such a value)
    expect(next.spec === cached.spec).toBe(false)
    const shallow = { spec: deep(10) }
    const shallowNext = { spec: deep(10) }
    shareUnchanged(shallow, shallowNext)
    expect(shallowNext.spec).toBe(shallow.spec)
  })

  it("is what the store does to an update and to a relisted object with a new resourceVersion", () => {
    const store = makeStore<ReturnType<typeof version>>()
    const first = version("1", "x", "RestoreSucceeded")
    store.upsert(first)
    const second = version("2", "y", "RestoreSucceeded")
    expect(store.upsert(second)).toBe(first)
    expect(store.get("ns/a")).toBe(second)
    expect(second.spec).toBe(first.spec)
    expect(second.status).toBe(first.status)
    const relisted = version("3", "y", "RestoreSucceeded")
    const result = store.replace([relisted])
    expect(result.updated).toEqual([[second, relisted]])
    expect(relisted.metadata.labels).toBe(second.metadata.labels)
    expect(relisted.spec).toBe(first.spec)
  })
})
