// The hub's wiring against real clusters: the configured settings reach every member (worker count on
// /metrics), a lost lease stops member work at once instead of after the drain grace (a reconcile
// whose API call the member holds must not keep the old leader working), and the Lease is renewed on a
// connection of its own while more of the hub's requests hang on its API server than one connection
// has streams.
import { readFileSync } from "node:fs"
import * as http2 from "node:http2"
import { createServer as createHttpsServer } from "node:https"
import { type AddressInfo, createServer, type Socket } from "node:net"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  apiRequest,
  installFleetcheck,
  type LocalCluster,
  type LocalFleet,
  registerWithSecret,
  renderKubeconfig,
  startFleet,
} from "../../clusters/local-fleet/index.ts"
import { hubLeaseName } from "../../src/api/names.ts"
import { defaultHubConfig } from "../../src/hub/config.ts"
import { leases, pathOf } from "../../src/kube/resources.ts"
import { backupCheck } from "../support/backupcheck.ts"
import { hubNamespace, type RunningHub, startHub } from "../support/hub.ts"
import { scripted } from "../support/scripted-server.ts"
import { sleep, waitUntil } from "../support/wait.ts"

const ns = "apps"

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

  /**
   * Makes the member's API server hold every restore Job POST in `apps` for `seconds`: a validating
   * webhook whose endpoint accepts the connection and never answers (failurePolicy Ignore, so the Job
   * is created once it times out). A reconcile creating a Job is then in flight that long.
   */
  const holdJobCreation = async (seconds: number) => {
    const connections = new Set<Socket>()
    const silent = createServer((socket) => {
      connections.add(socket)
      socket.on("error", () => {})
    })
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r))
    const webhooks = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    const created = await member.api("POST", webhooks, {
      apiVersion: "admissionregistration.k8s.io/v1",
      kind: "ValidatingWebhookConfiguration",
      metadata: { name: "hold-jobs" },
      webhooks: [
        {
          name: "hold-jobs.fleetcheck.test",
          clientConfig: {
            url: `https://127.0.0.1:${(silent.address() as AddressInfo).port}/validate`,
            caBundle: Buffer.from(member.caPem).toString("base64"),
          },
          rules: [{ apiGroups: ["batch"], apiVersions: ["v1"], operations: ["CREATE"], resources: ["jobs"] }],
          namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": ns } },
          failurePolicy: "Ignore",
          sideEffects: "None",
          admissionReviewVersions: ["v1"],
          timeoutSeconds: seconds,
        },
      ],
    })
    expect(created.status).toBe(201)
    return {
      /** Resolves once the API server is waiting on the webhook and a worker of m1 is busy. */
      held: async (hub: RunningHub) => {
        await waitUntil("the webhook to hold a restore Job POST", 20_000, () => connections.size > 0)
        await waitUntil("a busy m1 worker", 10_000, async () =>
          (await (await fetch(`${hub.url}/metrics`)).text())
            .split("\n")
            .some(
              (l) =>
                l.startsWith("controller_runtime_active_workers{") && l.includes('"m1"') && !l.endsWith(" 0"),
            ),
        )
      },
      release: async () => {
        await member.api("DELETE", `${webhooks}/hold-jobs`)
        for (const socket of connections) socket.destroy()
        silent.close()
      },
    }
  }

  const createCheck = async (name: string) =>
    expect(
      (
        await member.api(
          "POST",
          `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`,
          backupCheck(name, ns),
        )
      ).status,
    ).toBe(201)

  afterAll(async () => {
    for (const h of hubs) await h.stop()
    await fleet?.stop()
  })

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

  it("a lost lease stops member work at once, not after the 30 s drain grace", async () => {
    const hub = await startHub(hubCluster, {
      leaderElect: true,
      leaseDurationMs: 4_000,
      renewDeadlineMs: 3_000,
      retryPeriodMs: 500,
      drainGraceMs: 30_000,
    })
    hubs.push(hub)
    await waitUntil("the hub to lead and see m1", 30_000, async () => (await fetch(`${hub.url}/readyz`)).ok)
    const hold = await holdJobCreation(30)
    try {
      await createCheck("held")
      await hold.held(hub)
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
      // A former leader exports nothing about members or checks: no frozen green next to the new leader's.
      const series = (await (await fetch(`${hub.url}/metrics`)).text())
        .split("\n")
        .filter((l) => /^(fleetcheck_backupcheck_verified|fleetcheck_member_cluster_connected)\{/.test(l))
      expect(series).toEqual([])
      await hub.stop()
      hubs.pop()
    } finally {
      await hold.release()
    }
    // Give the Lease back for the next test.
    const path = pathOf(leases, { namespace: hubNamespace, name: hubLeaseName })
    expect((await hubCluster.api("DELETE", path)).status).toBe(200)
  }, 120_000)

  it("SIGTERM lets an in-flight reconcile finish within the drain grace, then releases the lease", async () => {
    const hub = await startHub(hubCluster, {
      leaderElect: true,
      leaseDurationMs: 4_000,
      renewDeadlineMs: 3_000,
      retryPeriodMs: 500,
      drainGraceMs: 20_000,
    })
    hubs.push(hub)
    await waitUntil("the hub to lead", 30_000, async () => (await fetch(`${hub.url}/readyz`)).ok)
    const hold = await holdJobCreation(4)
    try {
      await createCheck("drained")
      await hold.held(hub)
      const t0 = Date.now()
      await hub.stop()
      hubs.pop()
      const stopMs = Date.now() - t0
      process.stderr.write(`SIGTERM with a held Job POST → stopped after ${stopMs} ms\n`)
      // The reconcile was waited for (the webhook holds the POST for up to 4 s), not cut off.
      expect(stopMs).toBeGreaterThan(1_500)
      expect(stopMs).toBeLessThan(20_000)
      const jobs = await member.api(
        "GET",
        `/apis/batch/v1/namespaces/${ns}/jobs?labelSelector=fleetcheck.io/backupcheck=drained`,
      )
      expect(jobs.body.items).toHaveLength(1)
      const lease = await hubCluster.api(
        "GET",
        pathOf(leases, { namespace: hubNamespace, name: hubLeaseName }),
      )
      expect(lease.body.spec.holderIdentity ?? "").toBe("")
    } finally {
      await hold.release()
    }
  }, 120_000)

  it("a dead or hung member shows Connected=False quickly with the default probe settings", async () => {
    const hub = await startHub(hubCluster, {
      probeIntervalMs: defaultHubConfig.probeIntervalMs,
      probeFailureThreshold: defaultHubConfig.probeFailureThreshold,
      probeSuccessThreshold: defaultHubConfig.probeSuccessThreshold,
    })
    hubs.push(hub)
    const connected = async () => {
      const mc = (await hubCluster.api("GET", "/apis/fleetcheck.io/v1alpha1/memberclusters/m1")).body
      return (mc?.status?.conditions ?? []).find((c: any) => c.type === "Connected")?.status
    }
    await waitUntil("m1 connected", 60_000, async () => (await connected()) === "True")
    // Gone: the API server process exits (connections refused).
    await sleep(3_000)
    await member.stopApiServer()
    const gone = Date.now()
    await waitUntil(
      "Connected=False after the API server exited",
      60_000,
      async () => (await connected()) === "False",
      100,
    )
    const goneMs = Date.now() - gone
    // Down long enough for the informers' backoff to grow (0.8 s doubling to 30 s), then back: a check
    // created at once must verify in about a probe interval, not after the watch's backoff ran out.
    await sleep(Math.max(0, 30_000 - (Date.now() - gone)))
    await member.startApiServer()
    const back = Date.now()
    expect(
      (
        await member.api(
          "POST",
          `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`,
          backupCheck("after-outage", ns),
        )
      ).status,
    ).toBe(201)
    // The hub's part: it sees the new check and creates its restore Job (the member's own controllers
    // and kwok have their own reconnect backoff before the pod runs; that is not the hub's to shorten).
    await waitUntil("the hub to create the new check's restore Job", 90_000, async () => {
      const jobs = await member.api(
        "GET",
        `/apis/batch/v1/namespaces/${ns}/jobs?labelSelector=fleetcheck.io/backupcheck=after-outage`,
      )
      return jobs.body?.items?.length === 1
    })
    const recoverMs = Date.now() - back
    await waitUntil("m1 connected again", 60_000, async () => (await connected()) === "True")
    // Hung: the API server still accepts connections and never answers.
    await sleep(3_000)
    member.freezeApiServer()
    const frozen = Date.now()
    try {
      await waitUntil(
        "Connected=False after the API server froze",
        90_000,
        async () => (await connected()) === "False",
        100,
      )
    } finally {
      member.thawApiServer()
    }
    const frozenMs = Date.now() - frozen
    process.stderr.write(
      `dead member with default probes (${defaultHubConfig.probeIntervalMs / 1000} s × ${defaultHubConfig.probeFailureThreshold}): exited → Connected=False ${goneMs} ms; frozen → ${frozenMs} ms; back after 30 s down → new check's restore Job created ${recoverMs} ms\n`,
    )
    expect(goneMs).toBeLessThan(15_000)
    expect(recoverMs).toBeLessThan(20_000)
    await waitUntil("m1 connected after the thaw", 60_000, async () => (await connected()) === "True")
    await hub.stop()
    hubs.pop()
  }, 300_000)

  it("members engage a few at a time: one that cannot sync holds its permit until its sync timeout, and the next waits", async () => {
    // --max-concurrent-syncs 1 and a member whose API server accepts connections and never answers.
    // Evidence from m1's own API server: the hub sends m1 no LIST (informers, probe) while the hung
    // member holds the one permit, and lists m1 once the hung member's cache-sync timeout gave it back.
    const silent = createServer((socket) => socket.on("error", () => {}))
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r))
    const secrets = `/api/v1/namespaces/${hubNamespace}/secrets`
    const labels = (on: boolean) => ({
      metadata: { labels: { "fleetcheck.io/kubeconfig": on ? "true" : null } },
    })
    const mergePatch = (path: string, body: unknown) =>
      apiRequest(
        hubCluster.server,
        hubCluster.caPem,
        hubCluster.adminToken,
        "PATCH",
        path,
        body,
        "application/merge-patch+json",
      )
    const hungServer = `https://127.0.0.1:${(silent.address() as AddressInfo).port}`
    const listsOfM1 = async () => {
      let n = 0
      for (const line of ((await member.api("GET", "/metrics")).body as string).split("\n")) {
        if (
          line.startsWith("apiserver_request_total{") &&
          line.includes('resource="backupchecks"') &&
          line.includes('verb="LIST"')
        )
          n += Number(line.slice(line.lastIndexOf(" ") + 1))
      }
      return n
    }
    try {
      // m1 leaves the registration first, so the hung member is engaged alone.
      expect((await mergePatch(`${secrets}/m1`, labels(false))).status).toBe(200)
      expect(
        (
          await hubCluster.api("POST", secrets, {
            apiVersion: "v1",
            kind: "Secret",
            metadata: {
              name: "hung",
              namespace: hubNamespace,
              labels: { "fleetcheck.io/kubeconfig": "true" },
            },
            data: {
              kubeconfig: Buffer.from(renderKubeconfig("hung", hungServer, member.caPem, "t0ken")).toString(
                "base64",
              ),
            },
          })
        ).status,
      ).toBe(201)
      const syncTimeoutMs = 15_000
      const hub = await startHub(hubCluster, { maxConcurrentSyncs: 1, cacheSyncTimeoutMs: syncTimeoutMs })
      hubs.push(hub)
      await waitUntil(
        "the hung member engaged",
        20_000,
        () => hub.members.get("hung")?.engineRunning === true,
      )
      const engagedAt = Date.now()
      // m1's release (its label went) lists m1's checks; wait until it is done.
      await waitUntil("m1 released", 30_000, async () => {
        const secret = (await hubCluster.api("GET", `${secrets}/m1`)).body
        return !(secret?.metadata?.finalizers ?? []).includes("fleetcheck.io/member-cleanup")
      })
      await sleep(1_000)
      const before = await listsOfM1()
      expect((await mergePatch(`${secrets}/m1`, labels(true))).status).toBe(200)
      const relabelledAt = Date.now()
      await sleep(Math.max(0, engagedAt + syncTimeoutMs - 3_000 - Date.now()))
      expect(await listsOfM1(), "no LIST of m1 while the hung member holds the permit").toBe(before)
      await waitUntil("m1 listed once the permit is back", 30_000, async () => (await listsOfM1()) > before)
      const listedAfterMs = Date.now() - relabelledAt
      process.stderr.write(
        `max-concurrent-syncs 1: m1 listed ${listedAfterMs} ms after its Secret came back (hung member engaged ${relabelledAt - engagedAt} ms before it, sync timeout ${syncTimeoutMs} ms)\n`,
      )
      await hub.stop()
      hubs.pop()
    } finally {
      await mergePatch(`${secrets}/m1`, labels(true))
      await mergePatch(`${secrets}/hung`, { metadata: { finalizers: null } })
      await hubCluster.api("DELETE", `${secrets}/hung`)
      silent.close()
    }
  }, 120_000)

  it("renews its Lease while more MemberCluster writes hang on the hub API server than one connection has streams", async () => {
    // The hub API server's stream limit per HTTP/2 connection, as it announces it to any client.
    const streamLimit = await new Promise<number>((resolve, reject) => {
      const session = http2.connect(hubCluster.server, { ca: hubCluster.caPem })
      session.once("remoteSettings", (settings) => {
        resolve(settings.maxConcurrentStreams ?? 100)
        session.close()
      })
      session.once("error", reject)
    })
    // More members than that, in a hub namespace of their own, all at one stand-in API server answering
    // 403 with a message that changes on cue: then every member's MemberCluster status changes at once.
    const count = streamLimit + 10
    const namespace = "lease-conn"
    const heldLabel = "lease-conn.fleetcheck.test/held"
    let phase = 1
    const members = await scripted(
      (_req, res) => {
        res.writeHead(403, { "content-type": "application/json" })
        res.end(
          JSON.stringify({
            kind: "Status",
            apiVersion: "v1",
            status: "Failure",
            reason: "Forbidden",
            code: 403,
            message: `stand-in API server, phase ${phase}`,
          }),
        )
      },
      { tls: true },
    )
    // A validating webhook that holds every status write of those MemberClusters until released.
    const fixture = (f: string) =>
      readFileSync(new URL(`../support/fixtures/scripted-tls/${f}`, import.meta.url))
    const held: Array<() => void> = []
    let released = false
    const webhook = createHttpsServer(
      { cert: fixture("server.crt"), key: fixture("server.key") },
      (req, res) => {
        let body = ""
        req.on("data", (chunk: Buffer) => {
          body += chunk.toString("utf8")
        })
        req.on("end", () => {
          const uid = (JSON.parse(body) as { request: { uid: string } }).request.uid
          const allow = () =>
            res.end(
              JSON.stringify({
                apiVersion: "admission.k8s.io/v1",
                kind: "AdmissionReview",
                response: { uid, allowed: true },
              }),
            )
          if (released) allow()
          else held.push(allow)
        })
      },
    )
    // The reviews the API server is waiting for now (it gives up on one after the webhook's timeout).
    const pending = new Set<object>()
    webhook.on("request", (req, res) => {
      pending.add(req)
      res.once("close", () => pending.delete(req))
    })
    await new Promise<void>((r) => webhook.listen(0, "127.0.0.1", r))
    const webhookName = "hold-member-status.lease-conn.fleetcheck.test"
    const webhooks = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    const secrets = `/api/v1/namespaces/${namespace}/secrets`
    const names = Array.from({ length: count }, (_, i) => `lease-conn-${String(i).padStart(3, "0")}`)
    let hub: RunningHub | undefined
    try {
      expect(
        (await hubCluster.api("POST", "/api/v1/namespaces", { metadata: { name: namespace } })).status,
      ).toBe(201)
      for (const name of names)
        expect(
          (
            await hubCluster.api("POST", secrets, {
              apiVersion: "v1",
              kind: "Secret",
              metadata: {
                name,
                namespace,
                labels: { "fleetcheck.io/kubeconfig": "true", [heldLabel]: "true" },
                // One namespace each: the same server twice would be a duplicate registration.
                annotations: { "fleetcheck.io/namespaces": name },
              },
              data: { kubeconfig: Buffer.from(members.kubeconfig).toString("base64") },
            })
          ).status,
        ).toBe(201)
      const leaseTimings = { leaseDurationMs: 4_000, renewDeadlineMs: 3_000, retryPeriodMs: 500 }
      hub = await startHub(hubCluster, {
        namespace,
        leaderElect: true,
        ...leaseTimings,
        maxConcurrentSyncs: count,
      })
      hubs.push(hub)
      const statuses = async () =>
        (
          await hubCluster.api(
            "GET",
            `/apis/fleetcheck.io/v1alpha1/memberclusters?labelSelector=${heldLabel}`,
          )
        ).body.items as Array<{ status?: unknown }>
      await waitUntil("every member's status written with phase 1", 60_000, async () => {
        const items = await statuses()
        return (
          items.length === count && items.every((m) => JSON.stringify(m.status ?? {}).includes("phase 1"))
        )
      })
      expect(
        (
          await hubCluster.api("POST", webhooks, {
            apiVersion: "admissionregistration.k8s.io/v1",
            kind: "ValidatingWebhookConfiguration",
            metadata: { name: webhookName },
            webhooks: [
              {
                name: webhookName,
                clientConfig: {
                  url: `https://127.0.0.1:${(webhook.address() as AddressInfo).port}/hold`,
                  caBundle: fixture("server.crt").toString("base64"),
                },
                rules: [
                  {
                    apiGroups: ["fleetcheck.io"],
                    apiVersions: ["v1alpha1"],
                    operations: ["UPDATE"],
                    resources: ["memberclusters/status"],
                  },
                ],
                objectSelector: { matchLabels: { [heldLabel]: "true" } },
                failurePolicy: "Ignore",
                sideEffects: "None",
                admissionReviewVersions: ["v1"],
                timeoutSeconds: 30,
              },
            ],
          })
        ).status,
      ).toBe(201)
      // Every member's status changes: once the API server has picked the webhook up (within a moment;
      // the phase moves on until it has), each member's next write is held.
      let nextPhaseAt = 0
      await waitUntil(
        `${streamLimit - 10}+ status writes held`,
        40_000,
        () => {
          if (Date.now() >= nextPhaseAt) {
            phase++
            nextPhaseAt = Date.now() + 3_000
          }
          return pending.size >= streamLimit - 10
        },
        50,
      )
      // The observer: the Lease as the hub API server has it, read every 100 ms for three renew deadlines.
      const leasePath = pathOf(leases, { namespace, name: hubLeaseName })
      const renewals: number[] = []
      const holders = new Set<string>()
      let mostHeld = 0
      const until = Date.now() + 3 * leaseTimings.renewDeadlineMs
      while (Date.now() < until) {
        const spec = (await hubCluster.api("GET", leasePath)).body.spec
        holders.add(spec.holderIdentity)
        const renewed = Date.parse(spec.renewTime)
        if (renewed !== renewals.at(-1)) renewals.push(renewed)
        mostHeld = Math.max(mostHeld, pending.size)
        await sleep(100)
      }
      const gaps = renewals.slice(1).map((t, i) => t - renewals[i]!)
      gaps.push(Date.now() - renewals.at(-1)!)
      process.stderr.write(
        `[lease-conn] ${count} members, stream limit ${streamLimit}, up to ${mostHeld} status writes held at once: ${renewals.length} renewals in ${3 * leaseTimings.renewDeadlineMs} ms, longest gap ${Math.max(...gaps)} ms\n`,
      )
      expect(pending.size, "the writes still held at the end").toBeGreaterThanOrEqual(streamLimit - 10)
      expect([...holders]).toEqual([hub.identity])
      expect(Math.max(...gaps)).toBeLessThan(leaseTimings.renewDeadlineMs)
    } finally {
      released = true
      for (const allow of held.splice(0)) allow()
      await hubCluster.api("DELETE", `${webhooks}/${webhookName}`)
      if (hub) {
        await hub.stop()
        hubs.pop()
      }
      for (const name of names) {
        await hubCluster.api("DELETE", `${secrets}/${name}`)
        await apiRequest(
          hubCluster.server,
          hubCluster.caPem,
          hubCluster.adminToken,
          "PATCH",
          `${secrets}/${name}`,
          { metadata: { finalizers: null } },
          "application/merge-patch+json",
        )
      }
      await hubCluster.api("DELETE", `/apis/fleetcheck.io/v1alpha1/memberclusters?labelSelector=${heldLabel}`)
      webhook.closeAllConnections()
      await new Promise<void>((r) => webhook.close(() => r()))
      await members.stop()
    }
  }, 180_000)
})
