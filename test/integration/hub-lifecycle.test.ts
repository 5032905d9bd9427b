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
import { fastConfig, hubNamespace, type RunningHub, startHub } from "../support/hub.ts"
import { samplesOf, sumOf } from "../support/prometheus-text.ts"
import { scripted } from "../support/scripted-server.ts"
import { startProxy } from "../support/tcp-proxy.ts"
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
          samplesOf(
            await (await fetch(`${hub.url}/metrics`)).text(),
            "controller_runtime_active_workers",
          ).some((s) => s.labels.cluster === "m1" && s.value > 0),
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
    const sample = await waitUntil("the m1 series", 30_000, async () =>
      samplesOf(
        await (await fetch(`${hub.url}/metrics`)).text(),
        "controller_runtime_max_concurrent_reconciles",
      ).find((s) => s.labels.cluster === "m1"),
    )
    expect(sample.value).toBe(3)
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
    // Frozen: the connection's PING goes unanswered (member-engine.ts), and the probe confirms it.
    expect(frozenMs).toBeLessThan(15_000)
    expect(recoverMs).toBeLessThan(20_000)
    await waitUntil("m1 connected after the thaw", 60_000, async () => (await connected()) === "True")
    await hub.stop()
    hubs.pop()
  }, 300_000)

  it("a slow but healthy member (1.5 s each way) never shows Connected=False with the default probe settings, and its checks verify", async () => {
    // m1's registration re-pointed through a proxy that delays every chunk either way: PINGs and
    // probes take 3 s there and back, under the 4 s PING timeout and the probe's 5 s of silence.
    const proxy = await startProxy(Number(new URL(member.server).port))
    proxy.setLatency(1_500)
    const secretPath = `/api/v1/namespaces/${hubNamespace}/secrets/${member.name}`
    const kubeconfigVia = (server: string) =>
      Buffer.from(member.kubeconfig.replace(`server: ${member.server}`, `server: ${server}`)).toString(
        "base64",
      )
    const repoint = async (server: string) => {
      const r = await apiRequest(
        hubCluster.server,
        hubCluster.caPem,
        hubCluster.adminToken,
        "PATCH",
        secretPath,
        { data: { kubeconfig: kubeconfigVia(server) } },
        "application/merge-patch+json",
      )
      expect(r.status, JSON.stringify(r.body)).toBe(200)
    }
    const hub = await startHub(hubCluster, {
      probeIntervalMs: defaultHubConfig.probeIntervalMs,
      probeFailureThreshold: defaultHubConfig.probeFailureThreshold,
      probeSuccessThreshold: defaultHubConfig.probeSuccessThreshold,
    })
    hubs.push(hub)
    const conditions = async () =>
      ((await hubCluster.api("GET", "/apis/fleetcheck.io/v1alpha1/memberclusters/m1")).body?.status
        ?.conditions ?? []) as any[]
    try {
      await repoint(`https://127.0.0.1:${proxy.port}`)
      await waitUntil(
        "m1 Ready through the slow proxy",
        90_000,
        async () =>
          (await conditions()).some((c) => c.type === "Ready" && c.reason === "CachesSynced") &&
          proxy.accepted() > 0,
      )
      // Sampled from the hub's own member state and from the MemberCluster alike.
      let flipped = 0
      const sampler = setInterval(() => {
        if (hub.members.get("m1")?.probe.connected === false) flipped++
      }, 100)
      try {
        expect(
          (
            await member.api(
              "POST",
              `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`,
              backupCheck("slow-link", ns),
            )
          ).status,
        ).toBe(201)
        await waitUntil("slow-link Verified through the slow proxy", 90_000, async () => {
          const o = (
            await member.api("GET", `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks/slow-link`)
          ).body
          return (o?.status?.conditions ?? []).some((c: any) => c.type === "Verified" && c.status === "True")
        })
        // Idle long enough for several PINGs and a probe on the slow link.
        await sleep(20_000)
      } finally {
        clearInterval(sampler)
      }
      expect(flipped).toBe(0)
      expect((await conditions()).find((c) => c.type === "Connected")?.status).toBe("True")
    } finally {
      await repoint(member.server)
      await proxy.close()
      await hub.stop()
      hubs.pop()
    }
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
      const text = (await member.api("GET", "/metrics")).body as string
      return sumOf(text, "apiserver_request_total", { resource: "backupchecks", verb: "LIST" })
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

  /**
   * More members than the hub API server's HTTP/2 connection has streams, in a hub namespace of their
   * own, all at one stand-in API server answering 403 with a message that changes on cue (then every
   * member's MemberCluster status changes at once), and a validating webhook that holds the status
   * writes of their MemberClusters while `hold` is on. One set of members for the cases below.
   */
  describe("MemberCluster status writes held by the hub API server", () => {
    const namespace = "lease-conn"
    const heldLabel = "lease-conn.fleetcheck.test/held"
    const webhookName = "hold-member-status.lease-conn.fleetcheck.test"
    const webhooks = "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations"
    const secrets = `/api/v1/namespaces/${namespace}/secrets`
    const fixture = (f: string) =>
      readFileSync(new URL(`../support/fixtures/scripted-tls/${f}`, import.meta.url))
    let streamLimit = 0
    let count = 0
    let names: string[] = []
    let phase = 1
    let members: Awaited<ReturnType<typeof scripted>>
    // The webhook: reviews it is holding (allow one to answer it), those the API server waits for now
    // (it gives up on one after the webhook's timeout), the most waited for at once, and the objects
    // in the order their reviews arrived.
    let holding = false
    const held: Array<() => void> = []
    const pending = new Set<object>()
    let mostHeld = 0
    const arrivals: string[] = []
    const webhook = createHttpsServer(
      { cert: fixture("server.crt"), key: fixture("server.key") },
      (req, res) => {
        pending.add(req)
        mostHeld = Math.max(mostHeld, pending.size)
        res.once("close", () => pending.delete(req))
        let body = ""
        req.on("data", (chunk: Buffer) => {
          body += chunk.toString("utf8")
        })
        req.on("end", () => {
          const review = JSON.parse(body) as { request: { uid: string; name: string } }
          arrivals.push(review.request.name)
          const allow = () =>
            res.end(
              JSON.stringify({
                apiVersion: "admission.k8s.io/v1",
                kind: "AdmissionReview",
                response: { uid: review.request.uid, allowed: true },
              }),
            )
          if (holding) held.push(allow)
          else allow()
        })
      },
    )
    const releaseAll = () => {
      holding = false
      for (const allow of held.splice(0)) allow()
    }
    const statuses = async () =>
      (await hubCluster.api("GET", `/apis/fleetcheck.io/v1alpha1/memberclusters?labelSelector=${heldLabel}`))
        .body.items as Array<{
        metadata: { name: string }
        status?: { conditions?: Array<{ type: string; status: string }> }
      }>
    const registerSecret = async (name: string, kubeconfig: string, scope: string) =>
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
              annotations: { "fleetcheck.io/namespaces": scope },
            },
            data: { kubeconfig: Buffer.from(kubeconfig).toString("base64") },
          })
        ).status,
      ).toBe(201)
    const unregister = async (name: string) => {
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
    /** Holds every status write of the members' MemberClusters until `release` (removes the webhook too). */
    const holdStatusWrites = async () => {
      holding = true
      mostHeld = 0
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
      return async () => {
        releaseAll()
        await hubCluster.api("DELETE", `${webhooks}/${webhookName}`)
      }
    }
    /**
     * Moves every stand-in member's status on until `enough` writes are held: once the API server has
     * picked the webhook up (within a moment; the phase moves on until it has), each member's next
     * write is held.
     */
    const changeUntilHeld = async (enough: number) => {
      let nextPhaseAt = 0
      await waitUntil(
        `${enough}+ status writes held`,
        40_000,
        () => {
          if (Date.now() >= nextPhaseAt) {
            phase++
            nextPhaseAt = Date.now() + 3_000
          }
          return pending.size >= enough
        },
        50,
      )
    }
    const writtenWithPhase = async () =>
      waitUntil(`every member's status written with phase ${phase}`, 60_000, async () => {
        const items = (await statuses()).filter((m) => names.includes(m.metadata.name))
        return (
          items.length === count &&
          items.every((m) => JSON.stringify(m.status ?? {}).includes(`phase ${phase}`))
        )
      })

    beforeAll(async () => {
      // The hub API server's stream limit per HTTP/2 connection, as it announces it to any client.
      streamLimit = await new Promise<number>((resolve, reject) => {
        const session = http2.connect(hubCluster.server, { ca: hubCluster.caPem })
        session.once("remoteSettings", (settings) => {
          resolve(settings.maxConcurrentStreams ?? 100)
          session.close()
        })
        session.once("error", reject)
      })
      count = streamLimit + 10
      names = Array.from({ length: count }, (_, i) => `lease-conn-${String(i).padStart(3, "0")}`)
      members = await scripted(
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
      await new Promise<void>((r) => webhook.listen(0, "127.0.0.1", r))
      expect(
        (await hubCluster.api("POST", "/api/v1/namespaces", { metadata: { name: namespace } })).status,
      ).toBe(201)
      for (const name of names) await registerSecret(name, members.kubeconfig, name)
    })

    afterAll(async () => {
      releaseAll()
      await hubCluster.api("DELETE", `${webhooks}/${webhookName}`)
      for (const name of names) await unregister(name)
      await hubCluster.api("DELETE", `/apis/fleetcheck.io/v1alpha1/memberclusters?labelSelector=${heldLabel}`)
      webhook.closeAllConnections()
      await new Promise<void>((r) => webhook.close(() => r()))
      await members?.stop()
    })

    it("renews its Lease while more MemberCluster writes hang on the hub API server than one connection has streams", async () => {
      const leaseTimings = { leaseDurationMs: 4_000, renewDeadlineMs: 3_000, retryPeriodMs: 500 }
      // The bound on status writes lifted above the stream limit (as a user could): the hub's own
      // requests then fill the connection, and the Lease must not care.
      const hub = await startHub(hubCluster, {
        namespace,
        leaderElect: true,
        ...leaseTimings,
        maxConcurrentSyncs: count,
        maxConcurrentStatusWrites: count,
      })
      hubs.push(hub)
      let release: (() => Promise<void>) | undefined
      try {
        await writtenWithPhase()
        release = await holdStatusWrites()
        await changeUntilHeld(streamLimit - 10)
        // The observer: the Lease as the hub API server has it, read every 100 ms for three renew deadlines.
        const leasePath = pathOf(leases, { namespace, name: hubLeaseName })
        const renewals: number[] = []
        const holders = new Set<string>()
        const until = Date.now() + 3 * leaseTimings.renewDeadlineMs
        while (Date.now() < until) {
          const spec = (await hubCluster.api("GET", leasePath)).body.spec
          holders.add(spec.holderIdentity)
          const renewed = Date.parse(spec.renewTime)
          if (renewed !== renewals.at(-1)) renewals.push(renewed)
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
        await release?.()
        await hub.stop()
        hubs.pop()
      }
    }, 180_000)

    it("keeps at most --max-concurrent-status-writes in flight while the API server holds them, and writes bad news first", async () => {
      const bound = defaultHubConfig.maxConcurrentStatusWrites
      expect(bound).toBeLessThan(streamLimit)
      // One more member, real, behind a proxy that can cut it off; its status does not move with the
      // stand-in's phase, so it has nothing to write until it turns unreachable.
      const proxy = await startProxy(Number(new URL(member.server).port))
      const real = "lease-conn-real"
      await registerSecret(
        real,
        renderKubeconfig(real, `https://127.0.0.1:${proxy.port}`, member.caPem, member.adminToken),
        "status-writes-quiet",
      )
      const hub = await startHub(hubCluster, { namespace, maxConcurrentSyncs: count + 1 })
      hubs.push(hub)
      let release: (() => Promise<void>) | undefined
      try {
        phase++
        await writtenWithPhase()
        await waitUntil("the real member's MemberCluster Connected=True", 30_000, async () =>
          (await statuses()).some(
            (m) =>
              m.metadata.name === real &&
              m.status?.conditions?.some((c) => c.type === "Connected" && c.status === "True"),
          ),
        )
        release = await holdStatusWrites()
        await changeUntilHeld(bound)
        // Cut the real member off while every permit is held by a held write and the others wait with
        // news that is not bad (a new message). Its Connected turns False (the hub's own state is only
        // the cue to go on; the order below is the evidence), and its next round waits, ahead of them.
        proxy.cut("refuse")
        await waitUntil(
          "the hub to see the real member unreachable",
          20_000,
          () => hub.members.get(real)?.probe.connected === false,
        )
        await sleep(3 * fastConfig.statusIntervalMs)
        expect(pending.size, "every permit still held by a held write").toBe(bound)
        // One held write answered frees one permit: the next write to reach the API server is the
        // real member's, before the backlog of members that waited longer.
        const before = arrivals.length
        held.shift()?.()
        await waitUntil("the next status write to arrive", 20_000, () => arrivals.length > before)
        const next = arrivals[before]
        await release()
        release = undefined
        await waitUntil("the real member's MemberCluster Connected=False", 30_000, async () =>
          (await statuses()).some(
            (m) =>
              m.metadata.name === real &&
              m.status?.conditions?.some((c) => c.type === "Connected" && c.status === "False"),
          ),
        )
        process.stderr.write(
          `[status-writes] ${count + 1} members, bound ${bound}, stream limit ${streamLimit}: at most ${mostHeld} status writes held at once; first write after one was answered: ${next}\n`,
        )
        expect(mostHeld, "status writes in flight at the API server").toBeLessThanOrEqual(bound)
        expect(next).toBe(real)
      } finally {
        await release?.()
        await hub.stop()
        hubs.pop()
        await unregister(real)
        await proxy.close()
      }
    }, 180_000)
  })
})
