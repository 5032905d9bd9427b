import { describe, expect, it } from "vitest"
import {
  admission,
  type Candidate,
  earlier,
  overlaps,
  sameCluster,
} from "../../src/hub/registration/scope.ts"

/** The rule as written: in creation order, the first admitted candidate a new one overlaps refuses it. */
const byTheRule = (candidates: ReadonlyArray<Candidate>): Map<string, Candidate> => {
  const admitted: Candidate[] = []
  const refused = new Map<string, Candidate>()
  for (const c of [...candidates].sort(earlier)) {
    const first = admitted.find(
      (a) => sameCluster(a.cluster, c.cluster) && overlaps(a.namespaces, c.namespaces),
    )
    if (first) refused.set(c.name, first)
    else admitted.push(c)
  }
  return refused
}

/** A small deterministic generator (mulberry32), so a failure names its seed. */
const random = (seed: number) => () => {
  seed = (seed + 0x6d2b79f5) | 0
  let t = Math.imul(seed ^ (seed >>> 15), 1 | seed)
  t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t
  return ((t ^ (t >>> 14)) >>> 0) / 4294967296
}

const candidate = (
  name: string,
  created: string,
  server: string,
  namespaces?: ReadonlyArray<string>,
): Candidate => ({ name, created, cluster: { server, ca: "ab12" }, namespaces })

describe("registration admission", () => {
  it("admits the earliest of overlapping scopes and names it for the others", () => {
    const refused = admission([
      candidate("b", "2026-01-02T00:00:00Z", "https://one", ["x", "y"]),
      candidate("a", "2026-01-01T00:00:00Z", "https://one", ["y"]),
      candidate("c", "2026-01-03T00:00:00Z", "https://one", ["z"]),
      candidate("wide", "2026-01-04T00:00:00Z", "https://one"),
      candidate("other", "2026-01-01T00:00:00Z", "https://two"),
      candidate("later", "2026-01-05T00:00:00Z", "https://two", ["x"]),
    ])
    expect([...refused].map(([n, by]) => `${n}→${by.name}`).sort()).toEqual(["b→a", "later→other", "wide→a"])
  })

  it("agrees with the rule on random fleets (same cluster by server and CA, cluster-wide and namespaced)", () => {
    for (let seed = 1; seed <= 300; seed++) {
      const r = random(seed)
      const n = 1 + Math.floor(r() * 40)
      const candidates = Array.from({ length: n }, (_, i): Candidate => {
        const wide = r() < 0.15
        const namespaces = Array.from(
          new Set(Array.from({ length: Math.floor(r() * 3) }, () => `ns${Math.floor(r() * 8)}`)),
        )
        return {
          name: `s${i}`,
          // Equal timestamps are common (Secrets applied together): the name decides then.
          created: `2026-01-0${1 + Math.floor(r() * 3)}T00:00:00Z`,
          cluster: { server: `https://api${Math.floor(r() * 3)}`, ca: r() < 0.9 ? "ca1" : "ca2" },
          namespaces: wide ? undefined : namespaces,
        }
      })
      const got = [...admission(candidates)].map(([k, v]) => [k, v.name]).sort()
      const want = [...byTheRule(candidates)].map(([k, v]) => [k, v.name]).sort()
      expect(got, `seed ${seed}`).toEqual(want)
    }
  })
})
