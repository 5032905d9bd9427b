import { Effect, Fiber } from "effect"
import { assert, describe, expect, it } from "vitest"
import { memberLeaseName, replicaLeaseName } from "../../src/api/names.ts"
import { assignAll, assigneeOf } from "../../src/hub/sharding/assignment.ts"
import { describeShare, unshardedFence } from "../../src/hub/sharding/shards.ts"

const members = Array.from({ length: 600 }, (_, i) => `member-${String(i).padStart(4, "0")}`)
const replicas = ["hub-a_1f2e3d4c", "hub-b_5a6b7c8d", "hub-c_9e0f1a2b"]
const counts = (assignment: Map<string, string>) => {
  const out = new Map<string, number>()
  for (const r of assignment.values()) out.set(r, (out.get(r) ?? 0) + 1)
  return out
}
const dns1123Subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/

describe("rendezvous assignment", () => {
  it("is the same whatever order the replicas are listed in, and none without replicas", () => {
    for (const m of members.slice(0, 50))
      expect(assigneeOf(m, replicas)).toBe(assigneeOf(m, [...replicas].reverse()))
    expect(assigneeOf("m", [])).toBeUndefined()
  })

  it("spreads members evenly: every replica within 20% of its fair share", () => {
    const per = counts(assignAll(members, replicas))
    expect([...per.keys()].sort()).toEqual([...replicas].sort())
    for (const n of per.values()) {
      expect(n).toBeGreaterThan((members.length / 3) * 0.8)
      expect(n).toBeLessThan((members.length / 3) * 1.2)
    }
  })

  it("a replica joining takes only the members it now wins, about a quarter; no other member moves", () => {
    const before = assignAll(members, replicas)
    const after = assignAll(members, [...replicas, "hub-d_3c4d5e6f"])
    const moved = members.filter((m) => before.get(m) !== after.get(m))
    for (const m of moved) expect(after.get(m)).toBe("hub-d_3c4d5e6f")
    expect(moved.length).toBeGreaterThan(members.length * 0.2)
    expect(moved.length).toBeLessThan(members.length * 0.3)
  })

  it("a replica leaving gives away only its own members, spread over the others", () => {
    const before = assignAll(members, replicas)
    const after = assignAll(members, replicas.slice(1))
    for (const m of members) {
      if (before.get(m) === replicas[0]) expect(after.get(m)).not.toBe(replicas[0])
      else expect(after.get(m)).toBe(before.get(m))
    }
    const gained = counts(
      new Map(members.filter((m) => before.get(m) === replicas[0]).map((m) => [m, after.get(m)!])),
    )
    for (const r of replicas.slice(1)) expect(gained.get(r) ?? 0).toBeGreaterThan(0)
  })
})

describe("sharding Lease names (SPEC §11)", () => {
  it("a replica's Lease is fleetcheck-hub-<identity hash>, a valid name, one per identity", () => {
    const name = replicaLeaseName("hub-7d9f_ab12cd34")
    expect(name).toMatch(/^fleetcheck-hub-[0-9a-f]{16}$/)
    expect(replicaLeaseName("hub-7d9f_ab12cd34")).toBe(name)
    expect(replicaLeaseName("hub-7d9f_ab12cd35")).not.toBe(name)
  })

  it("a member's Lease is fleetcheck-member-<cluster>; a name too long for a Lease ends in a hash", () => {
    expect(memberLeaseName("prod-eu-1")).toBe("fleetcheck-member-prod-eu-1")
    const long = `${"a".repeat(120)}.${"b".repeat(120)}`
    const other = `${"a".repeat(120)}.${"b".repeat(119)}c`
    for (const n of [long, other]) {
      expect(memberLeaseName(n).length).toBeLessThanOrEqual(253)
      expect(memberLeaseName(n)).toMatch(dns1123Subdomain)
    }
    expect(memberLeaseName(long)).not.toBe(memberLeaseName(other))
  })
})

describe("the member fence without sharding", () => {
  it("runs one term whose scope stays open: what the work forks keeps running until interrupted", async () => {
    let ticks = 0
    const fence = unshardedFence({ mayWrite: Effect.succeed(true), lostLease: Effect.never })
    const terms: number[] = []
    const work = (term: number) =>
      Effect.sync(() => terms.push(term)).pipe(
        Effect.andThen(
          Effect.forkScoped(
            Effect.forever(
              Effect.andThen(
                Effect.sleep(1),
                Effect.sync(() => {
                  ticks++
                }),
              ),
            ),
          ),
        ),
        Effect.asVoid,
      )
    const fiber = Effect.runFork(fence.whileOwned(work))
    await new Promise((r) => setTimeout(r, 30))
    const seen = ticks
    await new Promise((r) => setTimeout(r, 30))
    expect(seen).toBeGreaterThan(0)
    expect(ticks).toBeGreaterThan(seen)
    expect(terms).toEqual([1])
    await Effect.runPromise(Fiber.interrupt(fiber))
    const stopped = ticks
    await new Promise((r) => setTimeout(r, 30))
    expect(ticks).toBe(stopped)
  })
})

describe("what a sharded replica's dashboard says it is", () => {
  it("its place among the live replicas, the members it works, and whether it places", () => {
    const live = ["hub-a_1", "hub-b_2", "hub-c_3"]
    const share = { live, working: 11, members: 32 }
    assert.strictEqual(
      describeShare({ ...share, identity: "hub-b_2", placing: true }),
      "replica 2 of 3, working 11 of 32 members, placing FleetBackupChecks",
    )
    assert.strictEqual(
      describeShare({ ...share, identity: "hub-a_1", working: 1, members: 1, placing: false }),
      "replica 1 of 3, working 1 of 1 member",
    )
    assert.strictEqual(
      describeShare({ ...share, identity: "hub-d_4", working: 0, placing: false }),
      "replica not announced yet, working 0 of 32 members",
    )
  })
})
