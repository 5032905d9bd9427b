// One member cannot starve the others: eight members whose API servers stop answering mid-request
// (blackholed behind TCP proxies, each with reconciles that are all making API calls) must not take the
// hub-wide reconcile permits from a healthy member, whose new check verifies in its normal time.
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  installFleetcheck,
  type LocalCluster,
  type LocalFleet,
  renderKubeconfig,
  startFleet,
} from "../../clusters/local-fleet/index.ts"
import { namespacesAnnotation, registrationLabel } from "../../src/api/names.ts"
import { backupChecks, pathOf, secrets } from "../../src/kube/resources.ts"
import { backupCheck } from "../support/backupcheck.ts"
import { hubNamespace, type RunningHub, startHub } from "../support/hub.ts"
import { startProxy, type TcpProxy } from "../support/tcp-proxy.ts"
import { sleep, waitUntil } from "../support/wait.ts"

const hung = Array.from({ length: 8 }, (_, i) => `hung-${i + 1}`)

describe("fairness across members", () => {
  let fleet: LocalFleet
  let hubCluster: LocalCluster
  let member: LocalCluster
  let hub: RunningHub
  const proxies: TcpProxy[] = []

  const register = async (name: string, server: string, namespace: string) => {
    const kubeconfig = renderKubeconfig(name, server, member.caPem, member.adminToken)
    const res = await hubCluster.api("POST", pathOf(secrets, { namespace: hubNamespace }), {
      apiVersion: "v1",
      kind: "Secret",
      metadata: {
        name,
        namespace: hubNamespace,
        labels: { [registrationLabel]: "true" },
        annotations: { [namespacesAnnotation]: namespace },
      },
      data: { kubeconfig: Buffer.from(kubeconfig).toString("base64") },
    })
    expect(res.status).toBe(201)
  }

  beforeAll(async () => {
    fleet = await startFleet({ clusters: [{ name: "hub", workloads: false }, "m1"] })
    hubCluster = fleet.cluster("hub")
    member = fleet.cluster("m1")
    await installFleetcheck(hubCluster, [member])
    const port = Number(new URL(member.server).port)
    // Every member here is a namespace of one real API server: eight behind proxies, one direct.
    for (const name of [...hung, "healthy"])
      expect((await member.api("POST", "/api/v1/namespaces", { metadata: { name } })).status).toBe(201)
    for (const name of hung) {
      const proxy = await startProxy(port)
      proxies.push(proxy)
      await register(name, `https://127.0.0.1:${proxy.port}`, name)
    }
    await register("healthy", member.server, "healthy")
    // The defaults that matter here: 4 workers per member and 32 permits hub-wide.
    hub = await startHub(hubCluster, { workersPerMember: 4, maxConcurrentReconciles: 32 })
    await waitUntil("every member Ready", 60_000, async () => {
      const view = (await (await fetch(`${hub.url}/api/v1/fleet`)).json()) as any
      return (
        view.clusters?.length === 9 &&
        view.clusters.every((c: any) => c.conditions.find((x: any) => x.type === "Ready")?.status === "True")
      )
    })
  }, 180_000)

  afterAll(async () => {
    await hub?.stop()
    for (const p of proxies) await p.close()
    await fleet?.stop()
  })

  it("eight hung members with reconciles stuck in API calls leave a healthy member its normal verify time", async () => {
    // In each hung member, checks whose Job the API refuses: every retry is a POST, then a status PATCH.
    for (const ns of hung)
      for (let i = 0; i < 6; i++)
        expect(
          (
            await member.api(
              "POST",
              pathOf(backupChecks, { namespace: ns }),
              backupCheck(`refused-${i}`, ns, {
                containers: [{ name: "Not_A_DNS_Label", image: "restore:1" }],
              }),
            )
          ).status,
        ).toBe(201)
    await sleep(1_500)
    // Now their API servers stop answering: every retry's request hangs for the request timeout (30 s).
    for (const p of proxies) p.cut("blackhole")
    await sleep(2_000)
    const t0 = Date.now()
    expect(
      (
        await member.api(
          "POST",
          pathOf(backupChecks, { namespace: "healthy" }),
          backupCheck("orders", "healthy"),
        )
      ).status,
    ).toBe(201)
    await waitUntil("the healthy member's check verified", 60_000, async () => {
      const c = (await member.api("GET", pathOf(backupChecks, { namespace: "healthy", name: "orders" }))).body
      return (c?.status?.conditions ?? []).find((x: any) => x.type === "Verified")?.status === "True"
    })
    const verifyMs = Date.now() - t0
    const inflight = (await (await fetch(`${hub.url}/metrics`)).text())
      .split("\n")
      .find((l) => l.startsWith("fleetcheck_reconcile_global_inflight"))
    process.stderr.write(
      `8 blackholed members (48 checks retrying): healthy check verified in ${verifyMs} ms; ${inflight}\n`,
    )
    expect(verifyMs).toBeLessThan(10_000)
  }, 120_000)
})
