// `fleetcheck dev --hub-replicas N`: the identity dev's own replica picks, and what the banner and an
// exit report say. The replicas themselves run in test/e2e/dev-replicas.test.ts.
import { describe, expect, it } from "vitest"
import { memberLeaseName } from "../../src/api/names.ts"
import {
  balancedIdentity,
  holdersFromLeases,
  identityCandidates,
  replicaBannerLines,
  replicaExitReport,
  settled,
  sharesOf,
} from "../../src/cli/dev-replicas.ts"
import { makeLeaderIdentity } from "../../src/hub/leader-election.ts"
import { describeShare } from "../../src/hub/sharding/shards.ts"

const spread = (members: string[], replicas: string[]) => {
  const counts = [...sharesOf(members, replicas).values()]
  return { min: Math.min(...counts), max: Math.max(...counts) }
}

describe("dev's own replica identity", () => {
  it("splits dev's two default members one each with another replica, whatever its random identity", () => {
    const members = ["member-1", "member-2"]
    for (let i = 0; i < 50; i++) {
      const other = makeLeaderIdentity("dev-host")
      const mine = balancedIdentity(
        members,
        [other],
        identityCandidates(() => makeLeaderIdentity("dev-host")),
      )
      expect(mine).toMatch(/^dev-host_[0-9a-f]{8}$/)
      expect(spread(members, [other, mine!])).toEqual({ min: 1, max: 1 })
    }
  })

  it("is the best of the candidates: the least loaded replica's share highest, then the busiest's lowest", () => {
    const members = Array.from({ length: 6 }, (_, i) => `member-${i + 1}`)
    const others = ["host_aaaaaaaa", "host_bbbbbbbb"]
    const candidates = Array.from({ length: 40 }, (_, i) => `host_${String(i).padStart(8, "0")}`)
    const mine = balancedIdentity(members, others, candidates)!
    const chosen = spread(members, [...others, mine])
    for (const c of candidates.slice(0, candidates.indexOf(mine))) {
      const s = spread(members, [...others, c])
      // Every candidate tried before the pick was worse (the search stops at the first even split).
      expect(s.min < chosen.min || (s.min === chosen.min && s.max > chosen.max)).toBe(true)
    }
    if (chosen.max - chosen.min > 1)
      for (const c of candidates) {
        const s = spread(members, [...others, c])
        expect(s.min < chosen.min || (s.min === chosen.min && s.max >= chosen.max)).toBe(true)
      }
    expect(balancedIdentity(members, others, [])).toBeUndefined()
  })
})

describe("the banner's replica lines", () => {
  const replicas = [
    { name: "hub-1", identity: "host_zz000000", dashboardUrl: "http://127.0.0.1:8080" },
    {
      name: "hub-2",
      identity: "host_aa000000",
      dashboardUrl: "http://127.0.0.1:40001",
      process: { pid: 4242, logFile: "/run/logs/hub-2.log" },
    },
  ]
  const holders = holdersFromLeases(
    ["member-1", "member-2", "member-3"],
    [
      { metadata: { name: memberLeaseName("member-1") }, spec: { holderIdentity: "host_zz000000" } },
      { metadata: { name: memberLeaseName("member-2") }, spec: { holderIdentity: "host_aa000000" } },
      { metadata: { name: memberLeaseName("member-3") }, spec: { holderIdentity: "" } },
      { metadata: { name: "fleetcheck-placement" }, spec: { holderIdentity: "host_aa000000" } },
    ],
  )

  it("reads each member's holder from its Lease, none for a released or missing one", () => {
    expect([...holders]).toEqual([
      ["member-1", "host_zz000000"],
      ["member-2", "host_aa000000"],
      ["member-3", ""],
    ])
    expect(settled(holders, ["host_zz000000", "host_aa000000"])).toBe(false)
  })

  it("numbers replicas as their dashboards do (sorted identities) and names who works each member", () => {
    const text = replicaBannerLines({
      replicas,
      holders,
      namespace: "fleetcheck-system",
      kubectl: "/bin/kubectl",
      hubKubeconfig: "/run/hub/admin.kubeconfig",
    }).join("\n")
    // hub-2's identity sorts first: its dashboard says "replica 1 of 2".
    expect(
      describeShare({
        identity: "host_aa000000",
        live: ["host_aa000000", "host_zz000000"],
        working: 1,
        members: 3,
        placing: false,
      }),
    ).toMatch(/^replica 1 of 2/)
    expect(text).toContain(
      "replica 1 of 2  http://127.0.0.1:40001/  hub-2, pid 4242, log /run/logs/hub-2.log, identity host_aa000000",
    )
    expect(text).toContain(
      "replica 2 of 2  http://127.0.0.1:8080/  hub-1, this process, identity host_zz000000",
    )
    expect(text).toMatch(/member-1 +replica 2\n/)
    expect(text).toMatch(/member-2 +replica 1\n/)
    expect(text).toMatch(/member-3 +nobody live \(no holder\)\n/)
    expect(text).toContain("get leases -n fleetcheck-system -l fleetcheck.io/shard-lease")
  })
})

describe("a replica's exit while the fleet runs", () => {
  it("names the replica, how it ended, what happens to its members, and the end of its log", () => {
    const report = replicaExitReport({
      name: "hub-2",
      pid: 4242,
      exit: "SIGKILL",
      logFile: "/run/logs/hub-2.log",
      logTail: Array.from({ length: 8 }, (_, i) => `line ${i}`).join("\n"),
      leaseDurationMs: 15_000,
    })
    expect(report).toContain("hub replica hub-2 (pid 4242) exited (SIGKILL)")
    expect(report).toContain("lease duration 15s")
    expect(report).toContain("/run/logs/hub-2.log")
    expect(report.split("\n").slice(1)).toEqual([
      "  | line 3",
      "  | line 4",
      "  | line 5",
      "  | line 6",
      "  | line 7",
    ])
  })
})
