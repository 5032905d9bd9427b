// Fleet views: server-side filters (cluster, namespace, status, failing, cluster labels), the order
// every view shares, totals, and paging by key with opaque continue tokens.
import { assert, describe, it } from "@effect/vitest"
import {
  checkViews,
  decodeContinue,
  type FleetFilter,
  fleetPage,
  fleetView,
  matchesLabels,
  memberClusterStatus,
  parseLabelSelector,
} from "../../src/hub/fleet-state.ts"
import {
  backupCheck,
  healthyMember,
  syntheticFleet,
  t0,
  unreachableMember,
} from "../support/fleet-members.ts"

const names = (v: { checks: ReadonlyArray<{ cluster: string; namespace: string; name: string }> }) =>
  v.checks.map((c) => `${c.cluster}/${c.namespace}/${c.name}`)

const fleet = () => [
  healthyMember(
    "b-eu",
    [
      { namespace: "shop", name: "orders", status: "True" },
      { namespace: "shop", name: "payments", status: "False" },
      { namespace: "ops", name: "grafana", status: "Unknown", reason: "RestoreRunning" },
    ],
    { env: "prod", region: "eu" },
  ),
  healthyMember("a-us", [{ namespace: "shop", name: "orders", status: "True" }], {
    env: "staging",
    region: "us",
  }),
  unreachableMember("c-down", [{ namespace: "shop", name: "orders", status: "True" }], {
    env: "prod",
    region: "us",
  }),
]

describe("fleetView filters", () => {
  it("lists clusters by name and checks failing, unknown, verified, then by cluster/namespace/name", () => {
    const v = fleetView(fleet(), t0)
    assert.deepStrictEqual(
      v.clusters.map((c) => c.name),
      ["a-us", "b-eu", "c-down"],
    )
    assert.deepStrictEqual(names(v), [
      "b-eu/shop/payments",
      "b-eu/ops/grafana",
      "c-down/shop/orders", // unreachable: Unknown, never its cached True
      "a-us/shop/orders",
      "b-eu/shop/orders",
    ])
    assert.deepStrictEqual(v.summary, {
      clusters: 3,
      healthyClusters: 2,
      checks: { total: 5, verified: 2, failed: 1, unknown: 2 },
    })
  })

  it("filters by cluster, namespace and status; clusters without a selected check drop out", () => {
    assert.deepStrictEqual(names(fleetView(fleet(), t0, { cluster: "a-us" })), ["a-us/shop/orders"])
    const ops = fleetView(fleet(), t0, { namespace: "ops" })
    assert.deepStrictEqual(names(ops), ["b-eu/ops/grafana"])
    assert.deepStrictEqual(
      ops.clusters.map((c) => c.name),
      ["b-eu"],
    )
    // The cluster's own counts stay whole: the filter selects, it does not recount the cluster.
    assert.deepStrictEqual(ops.clusters[0]!.counts, { total: 3, verified: 1, failed: 1, unknown: 1 })
    assert.deepStrictEqual(names(fleetView(fleet(), t0, { status: "Unknown" })), [
      "b-eu/ops/grafana",
      "c-down/shop/orders",
    ])
    assert.deepStrictEqual(names(fleetView(fleet(), t0, { status: "True", namespace: "shop" })), [
      "a-us/shop/orders",
      "b-eu/shop/orders",
    ])
    assert.deepStrictEqual(names(fleetView(fleet(), t0, { cluster: "nope" })), [])
  })

  it("failing keeps checks that are not verified and every unhealthy cluster", () => {
    const v = fleetView(fleet(), t0, { failing: true })
    assert.deepStrictEqual(names(v), ["b-eu/shop/payments", "b-eu/ops/grafana", "c-down/shop/orders"])
    assert.deepStrictEqual(
      v.clusters.map((c) => c.name),
      ["b-eu", "c-down"],
    )
    const noChecks = healthyMember("d-empty", [])
    noChecks.probe = { ...noChecks.probe, connected: false }
    assert.deepStrictEqual(
      fleetView([noChecks], t0, { failing: true }).clusters.map((c) => c.name),
      ["d-empty"],
    )
  })

  it("selects clusters by a label selector over their labels", () => {
    const sel = (s: string): FleetFilter => {
      const p = parseLabelSelector(s)
      assert.isTrue(p.ok, s)
      return { label: p.ok ? p.selector : [] }
    }
    const clusters = (s: string) => fleetView(fleet(), t0, sel(s)).clusters.map((c) => c.name)
    assert.deepStrictEqual(clusters("env=prod"), ["b-eu", "c-down"])
    assert.deepStrictEqual(clusters("env==prod,region=us"), ["c-down"])
    assert.deepStrictEqual(clusters("env!=prod"), ["a-us"])
    assert.deepStrictEqual(clusters("region in (eu, us),env notin (staging)"), ["b-eu", "c-down"])
    assert.deepStrictEqual(clusters("region"), ["a-us", "b-eu", "c-down"])
    assert.deepStrictEqual(clusters("!region"), [])
    assert.deepStrictEqual(clusters("team"), [])
    assert.deepStrictEqual(names(fleetView(fleet(), t0, sel("region=us"))), [
      "c-down/shop/orders",
      "a-us/shop/orders",
    ])
  })
})

describe("label selectors", () => {
  it("reads kubectl's grammar and matches as Kubernetes does (!= and notin match a missing key)", () => {
    const p = parseLabelSelector(" fleetcheck.io/tier = gold , !legacy, zone notin (a,b) ")
    assert.isTrue(p.ok)
    if (!p.ok) return
    assert.deepStrictEqual(p.selector, [
      { key: "fleetcheck.io/tier", op: "in", values: ["gold"] },
      { key: "legacy", op: "notexists" },
      { key: "zone", op: "notin", values: ["a", "b"] },
    ])
    assert.isTrue(matchesLabels(p.selector, { "fleetcheck.io/tier": "gold" }))
    assert.isFalse(matchesLabels(p.selector, { "fleetcheck.io/tier": "gold", zone: "a" }))
    assert.isFalse(matchesLabels(p.selector, { "fleetcheck.io/tier": "gold", legacy: "" }))
    const neq = parseLabelSelector("env!=prod")
    assert.isTrue(neq.ok && matchesLabels(neq.selector, {}))
    assert.deepStrictEqual(parseLabelSelector(""), { ok: true, selector: [] })
  })

  it("refuses what Kubernetes refuses, saying where", () => {
    for (const bad of [
      "env=",
      "=prod",
      "env=prod,",
      "env in ()",
      "env in (a",
      "env=pr od",
      "-env",
      "env=a=b",
      `k=${"v".repeat(64)}`,
      "a/b/c",
    ]) {
      const p = parseLabelSelector(bad)
      if (bad === "env=") {
        // An empty value is a value ("env" is set to ""), as in Kubernetes.
        assert.isTrue(p.ok, bad)
        continue
      }
      assert.isFalse(p.ok, bad)
      if (!p.ok) assert.match(p.error, /^label selector/)
    }
  })
})

describe("fleetPage", () => {
  const walk = (members: ReturnType<typeof fleet>, limit: number, filter: FleetFilter = {}) => {
    const pages = []
    let token: string | undefined
    for (let i = 0; i < 1000; i++) {
      const cursor = token === undefined ? undefined : decodeContinue(token, filter)
      if (cursor && !cursor.ok) throw new Error(cursor.error)
      const p = fleetPage(fleetView(members, t0, filter), limit, cursor?.cursor, filter)
      pages.push(p)
      token = p.metadata?.continue
      if (token === undefined) return pages
    }
    throw new Error("walk did not end")
  }

  it("pages clusters and checks side by side; the pages concatenate to the whole view", () => {
    const members = syntheticFleet(5, 13)
    const whole = fleetView(members, t0)
    const pages = walk(members, 4)
    assert.strictEqual(pages.length, Math.ceil(65 / 4))
    for (const p of pages) {
      assert.isAtMost(p.clusters.length, 4)
      assert.isAtMost(p.checks.length, 4)
      assert.deepStrictEqual(p.summary, whole.summary)
    }
    assert.deepStrictEqual(
      pages.flatMap((p) => p.clusters),
      whole.clusters,
    )
    assert.deepStrictEqual(
      pages.flatMap((p) => p.checks),
      whole.checks,
    )
    assert.strictEqual(pages[0]!.metadata?.remainingItemCount, 5 - 4 + 65 - 4)
    assert.deepStrictEqual(pages.at(-1)!.metadata, {})
    // The same with a filter: tokens carry it.
    const failing = walk(members, 1, { failing: true })
    assert.deepStrictEqual(
      failing.flatMap((p) => p.checks),
      fleetView(members, t0, { failing: true }).checks,
    )
  })

  it("continues after the last key, so checks added or removed between pages shift nothing else", () => {
    const members = fleet()
    const first = fleetPage(fleetView(members, t0), 2, undefined, {})
    assert.deepStrictEqual(names(first), ["b-eu/shop/payments", "b-eu/ops/grafana"])
    // A new failing check sorts before the cursor; one verified check goes away.
    members[1] = healthyMember("a-us", [{ namespace: "shop", name: "new", status: "False" }], {
      env: "staging",
    })
    const cursor = decodeContinue(first.metadata!.continue!, {})
    assert.isTrue(cursor.ok)
    const second = fleetPage(fleetView(members, t0), 10, cursor.ok ? cursor.cursor : undefined, {})
    assert.deepStrictEqual(names(second), ["c-down/shop/orders", "b-eu/shop/orders"])
  })

  it("refuses tokens that are malformed or were made for other filters", () => {
    const p = fleetPage(fleetView(fleet(), t0, { namespace: "shop" }), 1, undefined, { namespace: "shop" })
    const token = p.metadata!.continue!
    assert.isTrue(decodeContinue(token, { namespace: "shop" }).ok)
    const other = decodeContinue(token, { namespace: "ops" })
    assert.isFalse(other.ok)
    if (!other.ok) assert.match(other.error, /other filters/)
    for (const bad of [
      "",
      "!!!",
      "e30",
      Buffer.from('{"v":1,"f":"x","c":3,"k":null}').toString("base64url"),
      token.slice(0, -3),
    ]) {
      assert.isFalse(decodeContinue(bad, { namespace: "shop" }).ok, bad)
    }
  })

  it("a token stays within the continue parameter's bound with the longest names Kubernetes allows", () => {
    const long = "n".repeat(253)
    const members = [healthyMember(long, [{ namespace: "x".repeat(63), name: long }, { name: "b" }])]
    const p = fleetPage(fleetView(members, t0), 1, undefined, {})
    assert.isAtMost(p.metadata!.continue!.length, 2048)
  })
})

describe("MemberCluster CredentialsValid", () => {
  const credentials = (m: ReturnType<typeof healthyMember>) =>
    memberClusterStatus(m, undefined, t0).conditions?.find((c) => c.type === "CredentialsValid")

  it("says whether the member refused the credentials or the exec plugin produced none", () => {
    const refused = healthyMember("m1", [])
    refused.probe = {
      ...refused.probe,
      credentialsValid: false,
      credentialsFailure: "Unauthorized",
      lastError: "Unauthorized",
    }
    assert.strictEqual(credentials(refused)?.reason, "Unauthorized")
    const plugin = healthyMember("m2", [])
    plugin.probe = {
      ...plugin.probe,
      credentialsValid: false,
      credentialsFailure: "ExecPluginFailed",
      lastError: "exec credential plugin failed (exit code 3; its output is not shown)",
    }
    const c = credentials(plugin)
    assert.strictEqual(c?.status, "False")
    assert.strictEqual(c?.reason, "ExecPluginFailed")
    assert.include(c?.message ?? "", "its output is not shown")
  })

  it("warns of an exec credential's expiry only with the plugin's renewal failure in the message", () => {
    const m = healthyMember("m1", [])
    m.expiringSoon = true
    m.credentialExpiry = new Date(t0 + 60_000)
    m.renewalFailure = "exec credential plugin did not finish within 10000 ms"
    const c = credentials(m)
    assert.strictEqual(c?.reason, "CredentialsExpiringSoon")
    assert.include(c?.message ?? "", "cannot renew them: exec credential plugin did not finish")
  })
})

describe("MemberCluster counts from the status round's views", () => {
  it("follow each new array of views: counted once per array, never a stale count", () => {
    // The status round passes the same views every interval until a check changes, then a new array.
    const m = healthyMember("m1", [
      { namespace: "shop", name: "orders", status: "True" },
      { namespace: "shop", name: "payments", status: "True" },
    ])
    const views = checkViews(m)
    const first = memberClusterStatus(m, undefined, t0, views)
    assert.deepStrictEqual(first.counts, { total: 2, verified: 2, failed: 0, unknown: 0 })
    assert.deepStrictEqual(memberClusterStatus(m, first, t0 + 2_000, views).counts, first.counts)
    const failing = healthyMember("m1", [
      { namespace: "shop", name: "orders", status: "True" },
      { namespace: "shop", name: "payments", status: "False" },
    ])
    m.checks = failing.checks
    const next = memberClusterStatus(m, first, t0 + 4_000, checkViews(m))
    assert.deepStrictEqual(next.counts, { total: 2, verified: 1, failed: 1, unknown: 0 })
    assert.strictEqual(next.conditions?.find((c) => c.type === "BackupsVerified")?.status, "False")
    // without views given, the member's checks as they are now
    assert.deepStrictEqual(memberClusterStatus(m, next, t0 + 6_000).counts, next.counts)
  })

  it("without views given, take the running member's kept views and build none", () => {
    // The registration's reconcile of every Secret (each resync) syncs the MemberCluster too.
    const m = healthyMember("m1", [
      { namespace: "shop", name: "orders", status: "True" },
      { namespace: "shop", name: "payments", status: "False" },
    ])
    const kept = checkViews(m)
    let read = 0
    const checks = m.checks
    m.checks = () => {
      read++
      return checks()
    }
    m.views = () => kept
    const status = memberClusterStatus(m, undefined, t0)
    assert.deepStrictEqual(status.counts, { total: 2, verified: 1, failed: 1, unknown: 0 })
    assert.strictEqual(read, 0)
    // a stopped engine leaves none: the checks are read again
    delete m.views
    memberClusterStatus(m, status, t0 + 2_000)
    assert.strictEqual(read, 1)
  })
})

describe("objectives in the fleet views", () => {
  const withObjectives = (
    name: string,
    restore: "True" | "False" | undefined,
    dataAge: "True" | "False" | undefined,
  ) => {
    const c = backupCheck({ namespace: "shop", name })
    const condition = (type: string, status: string) => ({
      type,
      status,
      observedGeneration: 1,
      lastTransitionTime: "2026-11-29T03:01:00Z",
      reason: status === "True" ? "ObjectiveMet" : "ObjectiveMissed",
      message: "m",
    })
    return {
      ...c,
      spec: { ...c.spec, objectives: { maxRestoreDuration: "30s", maxDataAge: "26h" } },
      status: {
        ...c.status,
        conditions: [
          ...(c.status?.conditions ?? []),
          ...(restore ? [condition("RestoreTimeObjectiveMet", restore)] : []),
          ...(dataAge ? [condition("DataAgeObjectiveMet", dataAge)] : []),
        ],
        lastRun: {
          ...c.status!.lastRun!,
          phases: [
            {
              name: "restore" as const,
              result: "Succeeded" as const,
              startTime: "2026-11-29T03:00:00Z",
              completionTime: "2026-11-29T03:00:41Z",
              dataTimestamp: "2026-11-28T03:01:00Z",
            },
          ],
        },
      },
    } as typeof c
  }

  it("shows each check's objective statuses and measures, and counts the misses per cluster and fleet", () => {
    const member = healthyMember("m1", [{ namespace: "shop", name: "plain" }])
    const checks = [
      backupCheck({ namespace: "shop", name: "plain" }),
      withObjectives("met", "True", "True"),
      withObjectives("slow", "False", "True"),
      withObjectives("new", undefined, undefined),
    ]
    const v = fleetView([{ ...member, checks: () => checks }], t0)
    const byName = Object.fromEntries(v.checks.map((c) => [c.name, c.objectives]))
    assert.isUndefined(byName.plain)
    assert.deepStrictEqual(byName.met, {
      restoreTime: "True",
      dataAge: "True",
      restoreDurationSeconds: 41,
      dataAgeSeconds: 86_400,
    })
    assert.deepStrictEqual(byName.slow?.restoreTime, "False")
    assert.deepStrictEqual(byName.new?.restoreTime, "Unknown")
    assert.strictEqual(v.clusters[0]?.counts.objectivesMissed, 1)
    assert.strictEqual(v.summary?.checks.objectivesMissed, 1)
  })

  it("an unreachable cluster's objectives count as Unknown, never as met or missed", () => {
    const member = unreachableMember("down", [{ namespace: "shop", name: "met" }])
    const v = fleetView([{ ...member, checks: () => [withObjectives("met", "True", "False")] }], t0)
    assert.deepStrictEqual(v.checks[0]?.objectives?.restoreTime, "Unknown")
    assert.deepStrictEqual(v.checks[0]?.objectives?.dataAge, "Unknown")
    assert.strictEqual(v.clusters[0]?.counts.objectivesMissed, 0)
  })
})

describe("sharding: a member nobody works (ADR 0011)", () => {
  it("shows Unknown/NoOwner and Ready=False, however green its cache; green again once an owner holds it", () => {
    let owner: { reason: string; message: string } | undefined = {
      reason: "NoOwner",
      message: "no live hub replica holds this member's Lease fleetcheck-member-b-eu",
    }
    const m = healthyMember("b-eu", [{ namespace: "shop", name: "orders", status: "True" }])
    m.ownerless = () => owner
    const gone = fleetView([m], t0)
    assert.deepStrictEqual(
      gone.checks.map((c) => [c.status, c.reason]),
      [["Unknown", "NoOwner"]],
    )
    const ready = gone.clusters[0]?.conditions.find((c) => c.type === "Ready")
    assert.deepStrictEqual([ready?.status, ready?.reason], ["False", "NoOwner"])
    assert.strictEqual(gone.summary?.healthyClusters, 0)
    assert.strictEqual(gone.summary?.checks.verified, 0)
    owner = undefined
    const owned = fleetView([m], t0)
    assert.deepStrictEqual(
      owned.checks.map((c) => [c.status, c.reason]),
      [["True", "RestoreSucceeded"]],
    )
    assert.strictEqual(owned.summary?.healthyClusters, 1)
  })
})
