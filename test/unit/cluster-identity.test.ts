import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber } from "effect"
import { ClusterIdentities } from "../../src/hub/registration/cluster-identity.ts"

// lets woken fibers run: wake-ups are dispatched as scheduler tasks, not inline
const settle = Effect.gen(function* () {
  for (let i = 0; i < 10; i++) yield* Effect.yieldNow
})
const isWaiting = (fiber: Fiber.Fiber<unknown, unknown>) => fiber.pollUnsafe() === undefined

describe("cluster identity: one engine per real cluster", { timeout: 10_000 }, () => {
  it.effect("a registration waits until its cluster is identified (or cannot be), then works alone", () =>
    Effect.gen(function* () {
      const ids = new ClusterIdentities()
      const a = ids.join("a", "2026-01-01T00:00:00Z", undefined)
      const sole = yield* Effect.forkChild(a.awaitSole)
      yield* settle
      assert.isTrue(isWaiting(sole), "not identified yet")
      a.identify("uid-1")
      yield* Fiber.join(sole)
      const b = ids.join("b", "2026-01-01T00:00:00Z", undefined)
      b.unidentifiable()
      yield* b.awaitSole
      assert.isUndefined(b.rival(), "an unidentified cluster has no rival")
    }),
  )

  it.effect(
    "of two registrations of one cluster ID the earlier works; the later waits, named a duplicate",
    () =>
      Effect.gen(function* () {
        const ids = new ClusterIdentities()
        const late = ids.join("late", "2026-02-01T00:00:00Z", undefined)
        late.identify("uid-1")
        yield* late.awaitSole
        late.setWorking(true)
        // The earlier one appears after the later one started working: the later one must stop first.
        const early = ids.join("early", "2026-01-01T00:00:00Z", undefined)
        const demoted = yield* Effect.forkChild(late.awaitRival)
        const earlySole = yield* Effect.forkChild(early.awaitSole)
        early.identify("uid-1")
        yield* Fiber.join(demoted)
        assert.deepStrictEqual(late.rival(), { name: "early", clusterID: "uid-1" })
        assert.isUndefined(early.rival())
        yield* settle
        assert.isTrue(isWaiting(earlySole), "the earlier waits while the later still works")
        late.setWorking(false)
        yield* Fiber.join(earlySole)
        // The later one works again only once the earlier one left.
        const lateSole = yield* Effect.forkChild(late.awaitSole)
        yield* settle
        assert.isTrue(isWaiting(lateSole))
        early.leave()
        yield* Fiber.join(lateSole)
        assert.isUndefined(late.rival())
      }),
  )

  it("ties on creationTimestamp go by name; other clusters and disjoint namespaces are no rivals", () => {
    const ids = new ClusterIdentities()
    const t = "2026-01-01T00:00:00Z"
    const b = ids.join("b", t, undefined)
    const a = ids.join("a", t, undefined)
    const other = ids.join("c", "2025-01-01T00:00:00Z", undefined)
    const shop = ids.join("shop", "2025-01-01T00:00:00Z", ["shop"])
    const apps = ids.join("apps", "2025-06-01T00:00:00Z", ["apps"])
    b.identify("uid-1")
    a.identify("uid-1")
    other.identify("uid-2")
    assert.strictEqual(b.rival()?.name, "a")
    assert.isUndefined(a.rival())
    shop.identify("uid-3")
    apps.identify("uid-3")
    assert.isUndefined(apps.rival(), "disjoint namespaces of one cluster may have an engine each")
    const wide = ids.join("wide", "2026-06-01T00:00:00Z", undefined)
    wide.identify("uid-3")
    assert.strictEqual(wide.rival()?.name, "shop", "cluster-wide overlaps every scope; the earliest is named")
  })

  it("a rebuilt registration's old claim leaving does not remove its new one", () => {
    const ids = new ClusterIdentities()
    const old = ids.join("a", "2026-01-01T00:00:00Z", undefined)
    old.identify("uid-1")
    const fresh = ids.join("a", "2026-01-01T00:00:00Z", undefined)
    fresh.identify("uid-1")
    old.leave()
    const later = ids.join("z", "2026-03-01T00:00:00Z", undefined)
    later.identify("uid-1")
    assert.strictEqual(later.rival()?.name, "a")
  })
})
