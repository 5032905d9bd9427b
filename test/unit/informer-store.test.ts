// The informer's cache: keys, stripping, indexes kept consistent through upserts, deletes and relists,
// and the relist diff the informer turns into synthetic events.
import { describe, expect, it } from "vitest"
import { keyOf, lastAppliedAnnotation, makeStore, stripObject } from "../../src/engine/informer/store.ts"

interface Obj {
  metadata: {
    name: string
    namespace?: string
    uid?: string
    resourceVersion?: string
    annotations?: Record<string, string>
    labels?: Record<string, string>
    managedFields?: unknown
    ownerReferences?: Array<{ uid: string; controller?: boolean }>
  }
  data?: Record<string, string>
}

const obj = (name: string, rv: string, extra: Partial<Obj["metadata"]> = {}, ns = "default"): Obj => ({
  metadata: {
    name,
    namespace: ns,
    uid: `uid-${name}`,
    resourceVersion: rv,
    managedFields: [{ manager: "kubectl", operation: "Apply", fieldsV1: { "f:data": {} } }],
    ...extra,
  },
  data: { k: "v" },
})

const ownerIndex = {
  owner: (o: Obj) => (o.metadata.ownerReferences ?? []).filter((r) => r.controller).map((r) => r.uid),
}

describe("keyOf", () => {
  it("is namespace/name for namespaced objects and name for cluster-scoped ones", () => {
    expect(keyOf(obj("a", "1"))).toBe("default/a")
    expect(keyOf({ metadata: { name: "node-1" } })).toBe("node-1")
    expect(keyOf({ metadata: { name: "x", namespace: "" } })).toBe("x")
  })
})

describe("stripObject", () => {
  it("drops managedFields and the last-applied annotation and keeps everything else", () => {
    const o = obj("a", "1", {
      labels: { app: "x" },
      annotations: { [lastAppliedAnnotation]: '{"big":"blob"}', keep: "me" },
    })
    stripObject(o)
    expect(o.metadata).toEqual({
      name: "a",
      namespace: "default",
      uid: "uid-a",
      resourceVersion: "1",
      labels: { app: "x" },
      annotations: { keep: "me" },
    })
    expect("managedFields" in o.metadata).toBe(false)
    expect(o.data).toEqual({ k: "v" })
  })

  it("removes an annotations map that held only last-applied, and leaves objects without metadata alone", () => {
    const o = obj("a", "1", { annotations: { [lastAppliedAnnotation]: "{}" } })
    stripObject(o)
    expect("annotations" in o.metadata).toBe(false)
    const bare = { data: 1 }
    expect(stripObject(bare)).toBe(bare)
  })
})

describe("makeStore", () => {
  it("upserts, gets, lists and deletes, stripping on the way in", () => {
    const s = makeStore<Obj>()
    expect(s.upsert(obj("a", "1"))).toBeUndefined()
    expect(s.upsert(obj("b", "1", {}, "other"))).toBeUndefined()
    expect(s.size).toBe(2)
    expect(s.get("default/a")?.metadata.managedFields).toBeUndefined()
    expect(s.has("other/b")).toBe(true)
    const old = s.get("default/a")
    expect(s.upsert(obj("a", "2"))).toBe(old)
    expect(s.get("default/a")?.metadata.resourceVersion).toBe("2")
    expect(s.keys().sort()).toEqual(["default/a", "other/b"])
    expect(
      s
        .list()
        .map((o) => o.metadata.name)
        .sort(),
    ).toEqual(["a", "b"])
    expect(s.delete("default/a")?.metadata.resourceVersion).toBe("2")
    expect(s.delete("default/a")).toBeUndefined()
    expect(s.size).toBe(1)
  })

  it("keeps indexes consistent through update, delete and relist", () => {
    const s = makeStore<Obj>({ indexers: ownerIndex })
    const owned = (name: string, rv: string, owner: string, controller = true) =>
      obj(name, rv, { ownerReferences: [{ uid: owner, controller }] })
    s.upsert(owned("j1", "1", "check-1"))
    s.upsert(owned("j2", "1", "check-1"))
    s.upsert(owned("j3", "1", "check-2"))
    s.upsert(owned("j4", "1", "check-3", false))
    const names = (uid: string) =>
      s
        .byIndex("owner", uid)
        .map((o) => o.metadata.name)
        .sort()
    expect(names("check-1")).toEqual(["j1", "j2"])
    expect(names("check-3")).toEqual([])
    // Re-owning moves the key between index values.
    s.upsert(owned("j2", "2", "check-2"))
    expect(names("check-1")).toEqual(["j1"])
    expect(names("check-2")).toEqual(["j2", "j3"])
    s.delete("default/j3")
    expect(names("check-2")).toEqual(["j2"])
    s.replace([owned("j1", "2", "check-9"), owned("j5", "1", "check-2")])
    expect(names("check-1")).toEqual([])
    expect(names("check-9")).toEqual(["j1"])
    expect(names("check-2")).toEqual(["j5"])
    expect(s.byIndex("no-such-index", "x")).toEqual([])
  })

  it("replace reports added, updated (resourceVersion changed), unchanged and vanished keys", () => {
    const s = makeStore<Obj>()
    s.upsert(obj("same", "5"))
    s.upsert(obj("changed", "5"))
    s.upsert(obj("gone", "5"))
    s.upsert(obj("gone-too", "5", {}, "other"))
    const keptSame = s.get("default/same")
    const oldChanged = s.get("default/changed")
    const r = s.replace([obj("same", "5"), obj("changed", "7"), obj("new", "8")])
    expect(r.added.map((o) => o.metadata.name)).toEqual(["new"])
    expect(r.updated).toHaveLength(1)
    expect(r.updated[0]?.[0]).toBe(oldChanged)
    expect(r.updated[0]?.[1].metadata.resourceVersion).toBe("7")
    expect(r.unchanged).toBe(1)
    expect([...r.deletedKeys].sort()).toEqual(["default/gone", "other/gone-too"])
    expect(r.deleted.map((o) => o.metadata.name).sort()).toEqual(["gone", "gone-too"])
    // An unchanged object keeps its identity; the relisted items are stripped too.
    expect(s.get("default/same")).toBe(keptSame)
    expect(s.get("default/new")?.metadata.managedFields).toBeUndefined()
    expect(s.keys().sort()).toEqual(["default/changed", "default/new", "default/same"])
  })

  it("the read-only view follows the store", () => {
    const s = makeStore<Obj>()
    const v = s.view
    expect(v.size).toBe(0)
    s.upsert(obj("a", "1"))
    expect(v.size).toBe(1)
    expect(v.get("default/a")?.metadata.name).toBe("a")
    s.replace([])
    expect(v.size).toBe(0)
    expect("upsert" in v).toBe(false)
  })

  it("an indexer that throws leaves the object out of that index and reports it", () => {
    const reported: Array<string> = []
    const s = makeStore<Obj>({
      indexers: {
        boom: (o) => {
          if (o.metadata.name === "bad") throw new Error("indexer bug")
          return [o.metadata.name]
        },
      },
      onIndexerError: (index, key) => reported.push(`${index}:${key}`),
    })
    s.upsert(obj("good", "1"))
    s.upsert(obj("bad", "1"))
    expect(s.size).toBe(2)
    expect(s.byIndex("boom", "good")).toHaveLength(1)
    expect(reported).toEqual(["boom:default/bad"])
  })

  it("relists 20k objects quickly (map-based, no quadratic scans)", () => {
    const s = makeStore<Obj>({ indexers: ownerIndex })
    const n = 20_000
    const make = (rv: string) =>
      Array.from({ length: n }, (_, i) =>
        obj(`o-${i}`, rv, { ownerReferences: [{ uid: `owner-${i % 100}`, controller: true }] }),
      )
    s.replace(make("1"))
    const t0 = performance.now()
    const r = s.replace(make("2").slice(0, n - 10))
    const ms = performance.now() - t0
    expect(r.updated).toHaveLength(n - 10)
    expect(r.deleted).toHaveLength(10)
    expect(s.byIndex("owner", "owner-7")).toHaveLength(200)
    expect(ms).toBeLessThan(2_000)
  })
})
