// The hub's wiring against real clusters: the configured settings reach every member (worker count on
// /metrics), and a lost lease stops member work within what is left of the lease instead of the full
// drain grace (a reconcile blocked on a frozen member must not keep the old leader working).
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  installFleetcheck,
  type LocalCluster,
  type LocalFleet,
  registerWithSecret,
  startFleet,
} from "../../clusters/local-fleet/index.ts"
import { hubLeaseName } from "../../src/api/names.ts"
import { leases, pathOf } from "../../src/kube/resources.ts"
import { hubNamespace, type RunningHub, startHub } from "../support/hub.ts"
import { sleep, waitUntil } from "../support/wait.ts"

const ns = "apps"

const scheduledCheck = (name: string) => ({
  apiVersion: "fleetcheck.io/v1alpha1",
  kind: "BackupCheck",
  metadata: { name, namespace: ns },
  spec: {
    backup: { name: `${name}-backup` },
    schedule: "* * * * *",
    timeout: "30s",
    jobTemplate: {
      spec: { template: { spec: { containers: [{ name: "restore", image: "restore:1" }] } } },
    },
  },
})

describe("hub wiring", () => {
  let fleet: LocalFleet
  let hubCluster: LocalCluster
  let member: LocalCluster
  const hubs: RunningHub[] = []

  beforeAll(async () => {
    fleet = await startFleet({ clusters: [{ name: "hub", workloads: false }, "m1"] })
    hubCluster = fleet.cluster("hub")
    member = fleet.cluster("m1")
    await installFleetcheck(hubCluster, [member])
    expect((await member.api("POST", "/api/v1/namespaces", { metadata: { name: ns } })).status).toBe(201)
    await registerWithSecret(hubCluster, member, {})
  })

  afterAll(async () => {
    member?.thawApiServer()
    for (const h of hubs) await h.stop()
    await fleet?.stop()
  })

  const fleetChecks = async (hub: RunningHub) => {
    const res = await fetch(`${hub.url}/api/v1/fleet`)
    return res.status === 200 ? ((await res.json()) as any).checks : []
  }

  it("controller_runtime_max_concurrent_reconciles equals --workers-per-member", async () => {
    const hub = await startHub(hubCluster, { workersPerMember: 3 })
    hubs.push(hub)
    const line = await waitUntil("the m1 series", 30_000, async () =>
      (await (await fetch(`${hub.url}/metrics`)).text())
        .split("\n")
        .find((l) => l.startsWith("controller_runtime_max_concurrent_reconciles{") && l.includes('"m1"')),
    )
    expect(line).toMatch(/ 3$/)
    await hub.stop()
    hubs.pop()
  })

  it("a lost lease stops member work within the lease's remainder, not the 30 s drain grace", async () => {
    // lease 4 s / renew 3 s: a successor may lead 1 s after the old leader stops renewing, so the old
    // leader's members get max(0.5 s, 4 - 3 - 1 s) to drain, whatever --drain-grace says.
    const hub = await startHub(hubCluster, {
      leaderElect: true,
      leaseDurationMs: 4_000,
      renewDeadlineMs: 3_000,
      retryPeriodMs: 500,
      drainGraceMs: 30_000,
    })
    hubs.push(hub)
    expect(
      (
        await member.api(
          "POST",
          `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`,
          scheduledCheck("every-minute"),
        )
      ).status,
    ).toBe(201)
    await waitUntil("the first run verified", 60_000, async () =>
      (await fleetChecks(hub)).some((c: any) => c.name === "every-minute" && c.status === "True"),
    )
    // Freeze the member just before the next minute's slot: that slot's reconcile then sends its Job
    // POST to an API server that accepts the connection and never answers (30 s request timeout).
    const nextSlot = Math.ceil((Date.now() + 4_000) / 60_000) * 60_000
    await sleep(nextSlot - Date.now() - 2_000)
    member.freezeApiServer()
    await sleep(nextSlot + 3_000 - Date.now())

    // Another contender takes the Lease: the leader's next renewal conflicts and it has lost.
    const path = pathOf(leases, { namespace: hubNamespace, name: hubLeaseName })
    const lease = (await hubCluster.api("GET", path)).body
    const stolenAt = Date.now()
    const put = await hubCluster.api("PUT", path, {
      ...lease,
      spec: {
        ...lease.spec,
        holderIdentity: "another-hub",
        renewTime: new Date().toISOString().replace(/Z$/, "000Z"),
        leaseDurationSeconds: 600,
      },
    })
    expect(put.status).toBe(200)
    await waitUntil("leader work to stop", 40_000, () => hub.members.size === 0, 20)
    const stoppedAfterMs = Date.now() - stolenAt
    process.stderr.write(`lost lease → member work stopped: ${stoppedAfterMs} ms\n`)
    expect(stoppedAfterMs).toBeLessThan(4_000)
    member.thawApiServer()
  }, 150_000)
})
