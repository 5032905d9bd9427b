// The truth table: for each fault, what every view says, side by side. A check is green only when a
// restore of it really succeeded and the hub can still see it; the fleet API, the MemberCluster, the
// metrics and `fleetcheck status` must agree, and none may show green while the member cannot be seen.
// (Reconciler-side faults, such as a Job deleted mid-run, TTL 0 or history limit 0, are in
// backupcheck.test.ts, where the Verified condition itself is asserted.)
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  installFleetcheck,
  type LocalCluster,
  type LocalFleet,
  registerWithSecret,
  renderKubeconfig,
  startFleet,
} from "../../clusters/local-fleet/index.ts"
import { registrationLabel } from "../../src/api/names.ts"
import { runStatus } from "../../src/cli/status.ts"
import { backupChecks, memberClusters, pathOf, secrets } from "../../src/kube/resources.ts"
import { backupCheck } from "../support/backupcheck.ts"
import { hubNamespace, type RunningHub, startHub } from "../support/hub.ts"
import { hasLabels, samplesOf } from "../support/prometheus-text.ts"
import { waitUntil } from "../support/wait.ts"

const ns = "apps"
const deployMember = new URL("../../deploy/member", import.meta.url).pathname

interface Row {
  readonly fleet: { status: string; reason: string } | undefined
  readonly member: Record<string, string>
  readonly counts: { verified: number; failed: number; unknown: number; total: number }
  readonly metric: number | undefined
  readonly statusExit: number
}

describe("truth table: every view under every fault", () => {
  let fleet: LocalFleet
  let hubCluster: LocalCluster
  let m1: LocalCluster
  let m2: LocalCluster
  let hub: RunningHub

  /** Every view of one check and its member, read at one moment. */
  const row = async (cluster: string, name: string): Promise<Row> => {
    const fleetRes = await fetch(`${hub.url}/api/v1/fleet`)
    const view = (await fleetRes.json()) as any
    const mc = (await hubCluster.api("GET", pathOf(memberClusters, { name: cluster }))).body
    const metrics = await (await fetch(`${hub.url}/metrics`)).text()
    const sample = samplesOf(metrics, "fleetcheck_backupcheck_verified").find((s) =>
      hasLabels(s, { cluster, name }),
    )
    const out = process.stdout.write
    process.stdout.write = () => true
    let statusExit: number
    try {
      statusExit = await runStatus(["--hub", hub.url, "-o", "json"])
    } finally {
      process.stdout.write = out
    }
    const c = view.checks?.find((x: any) => x.cluster === cluster && x.name === name)
    return {
      fleet: c ? { status: c.status, reason: c.reason } : undefined,
      member: Object.fromEntries(
        (mc?.status?.conditions ?? []).map((x: any) => [x.type, `${x.status}/${x.reason}`]),
      ),
      counts: mc?.status?.counts,
      metric: sample?.value,
      statusExit,
    }
  }

  /** Waits until the row for the check matches, and returns it (printed as the table's line). */
  const expectRow = async (fault: string, cluster: string, name: string, want: (r: Row) => boolean) => {
    let last: Row | undefined
    try {
      await waitUntil(fault, 60_000, async () => {
        last = await row(cluster, name)
        return want(last)
      })
    } finally {
      process.stderr.write(`[truth] ${fault.padEnd(42)} ${JSON.stringify(last)}\n`)
    }
    return last as Row
  }

  beforeAll(async () => {
    fleet = await startFleet({ clusters: [{ name: "hub", workloads: false }, "m1", "m2"] })
    hubCluster = fleet.cluster("hub")
    m1 = fleet.cluster("m1")
    m2 = fleet.cluster("m2")
    await installFleetcheck(hubCluster, [m1, m2])
    for (const m of [m1, m2])
      expect((await m.api("POST", "/api/v1/namespaces", { metadata: { name: ns } })).status).toBe(201)
    await registerWithSecret(hubCluster, m1, {})
    // m2 is registered the way `fleetcheck register` does it: its own ServiceAccount and ClusterRole.
    const applied = await m2.kubectl(["apply", "--server-side", "-k", deployMember])
    expect(applied.code, applied.stderr).toBe(0)
    const token = await m2.api(
      "POST",
      "/api/v1/namespaces/fleetcheck-system/serviceaccounts/fleetcheck-hub-identity/token",
      { apiVersion: "authentication.k8s.io/v1", kind: "TokenRequest", spec: { expirationSeconds: 86_400 } },
    )
    expect(token.status).toBe(201)
    const kubeconfig = renderKubeconfig("m2", m2.server, m2.caPem, token.body.status.token)
    expect(
      (
        await hubCluster.api("POST", pathOf(secrets, { namespace: hubNamespace }), {
          apiVersion: "v1",
          kind: "Secret",
          metadata: { name: "m2", namespace: hubNamespace, labels: { [registrationLabel]: "true" } },
          data: { kubeconfig: Buffer.from(kubeconfig).toString("base64") },
        })
      ).status,
    ).toBe(201)
    hub = await startHub(hubCluster, { leaderElect: true })
    for (const [m, name] of [
      [m1, "a"],
      [m2, "b"],
    ] as const)
      expect(
        (await m.api("POST", pathOf(backupChecks, { namespace: ns }), backupCheck(name, ns))).status,
      ).toBe(201)
  }, 180_000)

  afterAll(async () => {
    m1?.thawApiServer()
    await hub?.stop()
    await fleet?.stop()
  })

  it("healthy: green everywhere, status exits 0", async () => {
    for (const [cluster, name] of [
      ["m1", "a"],
      ["m2", "b"],
    ] as const) {
      const r = await expectRow(
        `healthy ${cluster}/${name}`,
        cluster,
        name,
        (r) =>
          r.fleet?.status === "True" && r.metric === 1 && r.member.BackupsVerified === "True/AllVerified",
      )
      expect(r.member.Ready).toBe("True/CachesSynced")
    }
    expect((await row("m1", "a")).statusExit).toBe(0)
  })

  it("credentials revoked, then a failing spec applied: never green, Forbidden everywhere", async () => {
    const crb = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/fleetcheck-member"
    const binding = (await m2.api("GET", crb)).body
    expect((await m2.api("DELETE", crb)).status).toBe(200)
    // A new generation the hub cannot see: its old verdict (generation 1) must not stand for it.
    const path = pathOf(backupChecks, { namespace: ns, name: "b" })
    const current = (await m2.api("GET", path)).body
    current.spec.jobTemplate.spec.template.metadata = { annotations: { "fleetcheck.io/simulate": "fail" } }
    expect((await m2.api("PUT", path, current)).status).toBe(200)
    const r = await expectRow(
      "RBAC revoked + generation 2",
      "m2",
      "b",
      (r) =>
        r.fleet?.status === "Unknown" && r.metric === -1 && r.member.Ready?.startsWith("False/") === true,
    )
    expect(r.fleet?.reason).toMatch(/Forbidden|WatchFailing/)
    expect(r.member.Ready).toMatch(/^False\/(Forbidden|WatchFailing)$/)
    expect(r.member.BackupsVerified).toMatch(/^Unknown\//)
    expect(r.counts.verified).toBe(0)
    expect(r.statusExit).toBe(1)
    // Rights back: the hub sees generation 2, runs it, and it fails: red, not the old green.
    const { metadata, ...rest } = binding
    expect(
      (
        await m2.api("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
          ...rest,
          metadata: { name: metadata.name, labels: metadata.labels },
        })
      ).status,
    ).toBe(201)
    const restored = Date.now()
    await expectRow("RBAC restored", "m2", "b", (r) => r.fleet?.status === "False" && r.metric === 0)
    // The reconciles refused meanwhile are queued again when the member answers, not after their
    // backoff (which grows to tens of seconds while access is revoked).
    const redAfterMs = Date.now() - restored
    process.stderr.write(`[truth] RBAC restored → generation 2's failure shown after ${redAfterMs} ms\n`)
    expect(redAfterMs).toBeLessThan(8_000)
  })

  it("status writes refused while reads still work: once allowed again, the verdict lands at once", async () => {
    // Only the status subresource is taken away: the hub still lists and watches, so nothing relists;
    // its refused reconciles back off (to tens of seconds) and must be queued again when access is back.
    const rolePath = "/apis/rbac.authorization.k8s.io/v1/clusterroles/fleetcheck-member"
    const role = (await m2.api("GET", rolePath)).body
    const withoutStatus = {
      ...role,
      rules: role.rules.filter((r: any) => !(r.resources ?? []).includes("backupchecks/status")),
    }
    expect((await m2.api("PUT", rolePath, withoutStatus)).status).toBe(200)
    const path = pathOf(backupChecks, { namespace: ns, name: "b" })
    const current = (await m2.api("GET", path)).body
    current.spec.jobTemplate.spec.template.metadata = { annotations: {} }
    expect((await m2.api("PUT", path, current)).status).toBe(200)
    const generation = current.metadata.generation + 1
    // Long enough for the refused status writes' backoff to grow past 10 s.
    await new Promise((r) => setTimeout(r, 15_000))
    const r = await row("m2", "b")
    expect(r.fleet?.status, "never green for a generation it could not record").not.toBe("True")
    const latest = (await m2.api("GET", rolePath)).body
    expect((await m2.api("PUT", rolePath, { ...role, metadata: latest.metadata })).status).toBe(200)
    const allowed = Date.now()
    await waitUntil("generation verified", 60_000, async () => {
      const c = (await m2.api("GET", path)).body
      return (
        c.status?.observedGeneration === generation &&
        (c.status?.conditions ?? []).find((x: any) => x.type === "Verified")?.status === "True"
      )
    })
    const landedMs = Date.now() - allowed
    process.stderr.write(`[truth] status writes allowed again → verdict recorded after ${landedMs} ms\n`)
    expect(landedMs).toBeLessThan(5_000)
  })

  it("member API server killed: Unknown/ClusterUnreachable everywhere; restarted: green again", async () => {
    await m1.stopApiServer()
    const r = await expectRow(
      "m1 apiserver killed",
      "m1",
      "a",
      (r) => r.fleet?.status === "Unknown" && r.member.Connected?.startsWith("False/") === true,
    )
    expect(r.fleet?.reason).toBe("ClusterUnreachable")
    expect(r.metric).toBe(-1)
    expect(r.counts.unknown).toBe(1)
    expect(r.statusExit).toBe(1)
    await m1.startApiServer()
    await expectRow("m1 apiserver back", "m1", "a", (r) => r.fleet?.status === "True" && r.metric === 1)
  })

  it("member frozen: Unknown while it hangs", async () => {
    m1.freezeApiServer()
    try {
      const r = await expectRow(
        "m1 frozen",
        "m1",
        "a",
        (r) => r.fleet?.status === "Unknown" && r.member.Connected?.startsWith("False/") === true,
      )
      expect(r.metric).toBe(-1)
      expect(r.statusExit).toBe(1)
    } finally {
      m1.thawApiServer()
    }
    await expectRow("m1 thawed", "m1", "a", (r) => r.fleet?.status === "True")
  })

  it("a standby is asked: 503 with the leader's name, status exits 3, never an empty 'all verified'", async () => {
    const standby = await startHub(hubCluster, { leaderElect: true })
    try {
      await new Promise((r) => setTimeout(r, 2_000))
      const res = await fetch(`${standby.url}/api/v1/fleet`)
      expect(res.status).toBe(503)
      const body = (await res.json()) as any
      expect(body.reason).toBe("Standby")
      expect(body.message).toContain(hub.identity)
      expect((await fetch(`${standby.url}/readyz`)).status).toBe(503)
      const page = await fetch(`${standby.url}/`)
      expect(page.status).toBe(503)
      expect(await page.text()).not.toContain("all verified")
      const err = process.stderr.write
      process.stderr.write = () => true
      try {
        expect(await runStatus(["--hub", standby.url])).toBe(3)
      } finally {
        process.stderr.write = err
      }
      process.stderr.write(`[truth] standby asked: 503 ${JSON.stringify(body)}\n`)
    } finally {
      await standby.stop()
    }
  })

  it("a check deleted: gone from the fleet API and from /metrics", async () => {
    expect((await m1.api("DELETE", pathOf(backupChecks, { namespace: ns, name: "a" }))).status).toBe(200)
    const r = await expectRow(
      "check a deleted",
      "m1",
      "a",
      // The MemberCluster's counts follow at the next status write (--status-interval), not at once.
      (r) => r.fleet === undefined && r.metric === undefined && r.counts?.total === 0,
    )
    expect(r.counts).toMatchObject({ total: 0, verified: 0, failed: 0, unknown: 0 })
  })
})
