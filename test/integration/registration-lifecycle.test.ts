// The registration lifecycle against real API servers: no BackupCheck is ever left carrying the hub's
// finalizer (a Secret deleted while its member is down, while the hub is down, or while a failover
// interrupts the release; a namespaces annotation narrowed, also while the hub is down; a Secret
// re-pointed to another server or refused after it was engaged), a hung member never holds up the
// registration of another, and one cluster scope never gets two engines (DuplicateMember). Every test
// ends with every check deletable without any hub.
import { afterAll, afterEach, beforeAll, describe, expect, it, onTestFinished } from "vitest"
import {
  apiRequest,
  installFleetcheck,
  type LocalCluster,
  type LocalFleet,
  startFleet,
} from "../../clusters/local-fleet/index.ts"
import { hubLeaseName } from "../../src/api/names.ts"
import { hubNamespace, type RunningHub, startHub } from "../support/hub.ts"
import { startProxy } from "../support/tcp-proxy.ts"
import { sleep, waitUntil } from "../support/wait.ts"

const cleanupFinalizer = "fleetcheck.io/cleanup"
const memberCleanupFinalizer = "fleetcheck.io/member-cleanup"
const namespaces = ["apps", "team-a", "team-b"]
const group = "/apis/fleetcheck.io/v1alpha1"
const secretsPath = `/api/v1/namespaces/${hubNamespace}/secrets`
const leasePath = `/apis/coordination.k8s.io/v1/namespaces/${hubNamespace}/leases/${hubLeaseName}`
const merge = "application/merge-patch+json"

const b64 = (s: string) => Buffer.from(s).toString("base64")
const bcPath = (namespace: string, name?: string) =>
  `${group}/namespaces/${namespace}/backupchecks${name ? `/${name}` : ""}`
const cond = (obj: any, type: string) => (obj?.status?.conditions ?? []).find((c: any) => c.type === type)

const check = (name: string, namespace: string) => ({
  apiVersion: "fleetcheck.io/v1alpha1",
  kind: "BackupCheck",
  metadata: { name, namespace },
  spec: {
    backup: { name: `${name}-backup` },
    jobTemplate: {
      spec: { template: { spec: { containers: [{ name: "restore", image: "restore:1" }] } } },
    },
  },
})

/** The member's kubeconfig with another user and context name: same cluster, different registration hash. */
const renamed = (m: LocalCluster, suffix: string) =>
  m.kubeconfig.replaceAll(`${m.name}-admin`, `${m.name}-${suffix}`)

/** The member's kubeconfig with an exec plugin instead of its token: refused by the default policy. */
const withExec = (m: LocalCluster) =>
  m.kubeconfig.replace(
    / {4}token: .*/,
    "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [-c, id]",
  )

describe("registration lifecycle", () => {
  let fleet: LocalFleet
  let hubCluster: LocalCluster
  let m1: LocalCluster
  let m2: LocalCluster
  const hubs = new Set<RunningHub>()

  const start = async (config: Parameters<typeof startHub>[1] = {}) => {
    const hub = await startHub(hubCluster, config)
    hubs.add(hub)
    return hub
  }
  const stop = async (hub: RunningHub) => {
    await hub.stop()
    hubs.delete(hub)
  }

  const secret = async (name: string) => {
    const r = await hubCluster.api("GET", `${secretsPath}/${name}`)
    return r.status === 200 ? r.body : undefined
  }
  const register = async (name: string, kubeconfig: string, annotations: Record<string, string> = {}) => {
    const r = await hubCluster.api("POST", secretsPath, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: {
        name,
        namespace: hubNamespace,
        labels: { "fleetcheck.io/kubeconfig": "true" },
        annotations,
      },
      data: { kubeconfig: b64(kubeconfig) },
    })
    expect(r.status, JSON.stringify(r.body)).toBe(201)
  }
  /** A merge patch, as `kubectl annotate` or `kubectl patch` would send: the hub's finalizer stays. */
  const patchSecret = async (name: string, patch: unknown) => {
    const r = await apiRequest(
      hubCluster.server,
      hubCluster.caPem,
      hubCluster.adminToken,
      "PATCH",
      `${secretsPath}/${name}`,
      patch,
      merge,
    )
    expect(r.status, JSON.stringify(r.body)).toBe(200)
  }
  const deleteSecret = async (name: string) =>
    expect((await hubCluster.api("DELETE", `${secretsPath}/${name}`)).status).toBe(200)
  const memberCluster = async (name: string) => {
    const r = await hubCluster.api("GET", `${group}/memberclusters/${name}`)
    return r.status === 200 ? r.body : undefined
  }
  const readyReason = async (name: string) =>
    cond(await memberCluster(name), "Ready")?.reason as string | undefined

  const createCheck = async (m: LocalCluster, namespace: string, name: string) => {
    const r = await m.api("POST", bcPath(namespace), check(name, namespace))
    expect(r.status, JSON.stringify(r.body)).toBe(201)
  }
  const carries = async (m: LocalCluster, namespace: string, name: string) =>
    ((await m.api("GET", bcPath(namespace, name))).body?.metadata?.finalizers ?? []).includes(
      cleanupFinalizer,
    )
  const waitCarries = (m: LocalCluster, namespace: string, name: string, want: boolean, timeoutMs = 30_000) =>
    waitUntil(
      `${m.name} ${namespace}/${name} ${want ? "carrying" : "released from"} ${cleanupFinalizer}`,
      timeoutMs,
      async () => (await carries(m, namespace, name)) === want,
    )
  /** The member's engine runs with synced caches (so its workers may have put finalizers anywhere in scope). */
  const waitReady = (name: string) =>
    waitUntil(`MemberCluster ${name} Ready`, 30_000, async () => (await readyReason(name)) === "CachesSynced")
  /** The Secret, its MemberCluster and the hub's hold on them are gone. */
  const waitLetGo = (name: string, timeoutMs = 60_000) =>
    waitUntil(`${name}: Secret and MemberCluster gone`, timeoutMs, async () => {
      return (await secret(name)) === undefined && (await memberCluster(name)) === undefined
    })

  /**
   * The end of every test: no hub runs, and a DELETE of every BackupCheck in every member completes, so
   * nothing carries a finalizer nobody will remove.
   */
  const everyCheckDeletable = async () => {
    for (const hub of [...hubs]) await stop(hub)
    for (const m of [m1, m2]) {
      const list = () =>
        waitUntil(`the BackupCheck list of ${m.name}`, 30_000, async () => {
          const r = await m.api("GET", `${group}/backupchecks`)
          return r.status === 200 ? (r.body.items as any[]) : undefined
        })
      for (const c of await list()) await m.api("DELETE", bcPath(c.metadata.namespace, c.metadata.name))
      await waitUntil(
        `every BackupCheck in ${m.name} deleted`,
        15_000,
        async () => (await list()).length === 0,
      )
    }
  }

  beforeAll(async () => {
    fleet = await startFleet({
      clusters: [{ name: "hub", workloads: false, controllerManager: false }, "m1", "m2"],
    })
    hubCluster = fleet.cluster("hub")
    m1 = fleet.cluster("m1")
    m2 = fleet.cluster("m2")
    await installFleetcheck(hubCluster, [m1, m2])
    for (const m of [m1, m2])
      for (const name of namespaces)
        expect((await m.api("POST", "/api/v1/namespaces", { metadata: { name } })).status).toBe(201)
  })

  // Whatever a failed test left behind: a hub lets go of every registration, then no hub runs.
  afterEach(async () => {
    for (const m of [m1, m2]) m.thawApiServer()
    const leftovers = ((await hubCluster.api("GET", secretsPath)).body.items as any[]).filter(
      (s) =>
        s.metadata.labels?.["fleetcheck.io/kubeconfig"] === "true" ||
        (s.metadata.finalizers ?? []).includes(memberCleanupFinalizer),
    )
    for (const hub of [...hubs]) await stop(hub)
    await hubCluster.api("DELETE", leasePath)
    if (leftovers.length > 0) {
      await start()
      for (const s of leftovers) await hubCluster.api("DELETE", `${secretsPath}/${s.metadata.name}`)
      await waitUntil("leftover registrations let go", 60_000, async () => {
        const names = ((await hubCluster.api("GET", secretsPath)).body.items as any[]).map(
          (s) => s.metadata.name,
        )
        return leftovers.every((s) => !names.includes(s.metadata.name))
      }).catch(() => undefined)
    }
    for (const hub of [...hubs]) await stop(hub)
    await hubCluster.api("DELETE", leasePath)
  }, 120_000)

  afterAll(async () => {
    for (const hub of [...hubs]) await hub.stop()
    await fleet?.stop()
  })

  it("a Secret deleted while its member is unreachable: the Secret waits, and the release finishes once the member is back", async () => {
    const hub = await start()
    await register("down", m1.kubeconfig)
    await createCheck(m1, "apps", "down-check")
    await waitCarries(m1, "apps", "down-check", true)
    await waitReady("down")

    await m1.stopApiServer()
    await deleteSecret("down")
    await sleep(4_000)
    // Seen while the member is down (asserted below, after the release itself): the hub holds the
    // Secret, so the kubeconfig stays readable, and the MemberCluster says why.
    const held = await secret("down")
    const reason = await readyReason("down")

    await m1.startApiServer()
    await waitCarries(m1, "apps", "down-check", false, 60_000)
    await waitLetGo("down")
    expect(held?.metadata?.deletionTimestamp).toBeDefined()
    expect(held?.metadata?.finalizers).toContain(memberCleanupFinalizer)
    expect(reason).toBe("Disengaging")
    expect(hub.members.has("down")).toBe(false)
    await everyCheckDeletable()
  }, 180_000)

  it("a Secret deleted while the hub is stopped: the release finishes when a hub starts", async () => {
    let hub = await start()
    await register("offline", m1.kubeconfig)
    await createCheck(m1, "apps", "offline-check")
    await waitCarries(m1, "apps", "offline-check", true)
    await waitReady("offline")
    await stop(hub)

    await deleteSecret("offline")
    await sleep(1_000)
    const held = await secret("offline")
    expect(await carries(m1, "apps", "offline-check")).toBe(true)

    hub = await start()
    await waitCarries(m1, "apps", "offline-check", false)
    await waitLetGo("offline")
    // No hub ran when it was deleted: the hub's finalizer kept it (and its kubeconfig) for the next one.
    expect(held?.metadata?.deletionTimestamp).toBeDefined()
    await everyCheckDeletable()
  }, 180_000)

  it("a release interrupted by a failover (the member hung, the leader stopped): the new leader finishes it", async () => {
    const leaderElection = {
      leaderElect: true,
      leaseDurationMs: 4_000,
      renewDeadlineMs: 3_000,
      retryPeriodMs: 500,
    }
    const first = await start(leaderElection)
    await waitUntil("the first hub to lead", 30_000, async () => (await fetch(`${first.url}/readyz`)).ok)
    const second = await start(leaderElection)
    await register("failover", m1.kubeconfig)
    await createCheck(m1, "apps", "failover-check")
    await waitCarries(m1, "apps", "failover-check", true)
    await waitReady("failover")

    m1.freezeApiServer()
    try {
      await deleteSecret("failover")
      // The leader has seen the deletion and is releasing against the hung member when it stops.
      await sleep(2_000)
      await stop(first)
    } finally {
      m1.thawApiServer()
    }
    await waitUntil("the second hub to lead", 30_000, async () => (await fetch(`${second.url}/readyz`)).ok)
    await waitCarries(m1, "apps", "failover-check", false, 60_000)
    await waitLetGo("failover")
    await everyCheckDeletable()
  }, 180_000)

  it("a narrowed namespaces annotation releases the dropped namespaces (a,b → a; all → a); the kept ones stay managed", async () => {
    await start()
    await register("narrow", m1.kubeconfig, { "fleetcheck.io/namespaces": "team-a,team-b" })
    await createCheck(m1, "team-a", "narrow-a")
    await createCheck(m1, "team-b", "narrow-b")
    await createCheck(m1, "apps", "narrow-apps")
    await waitCarries(m1, "team-a", "narrow-a", true)
    await waitCarries(m1, "team-b", "narrow-b", true)
    expect(await carries(m1, "apps", "narrow-apps")).toBe(false)

    await patchSecret("narrow", { metadata: { annotations: { "fleetcheck.io/namespaces": "team-a" } } })
    await waitCarries(m1, "team-b", "narrow-b", false)
    expect(await carries(m1, "team-a", "narrow-a")).toBe(true)
    // Still managed in team-a: a new check there gets the finalizer.
    await createCheck(m1, "team-a", "narrow-a2")
    await waitCarries(m1, "team-a", "narrow-a2", true)

    // Cluster-wide, then narrowed to team-a: everything outside team-a is released.
    await patchSecret("narrow", { metadata: { annotations: { "fleetcheck.io/namespaces": null } } })
    await waitCarries(m1, "apps", "narrow-apps", true)
    await waitCarries(m1, "team-b", "narrow-b", true)
    await waitReady("narrow")
    await patchSecret("narrow", { metadata: { annotations: { "fleetcheck.io/namespaces": "team-a" } } })
    await waitCarries(m1, "apps", "narrow-apps", false)
    await waitCarries(m1, "team-b", "narrow-b", false)
    expect(await carries(m1, "team-a", "narrow-a")).toBe(true)
    expect(await carries(m1, "team-a", "narrow-a2")).toBe(true)

    await deleteSecret("narrow")
    await waitLetGo("narrow")
    await everyCheckDeletable()
  }, 180_000)

  it("namespaces narrowed while the hub is stopped: the dropped namespace is released when a hub starts", async () => {
    let hub = await start()
    await register("narrow-offline", m1.kubeconfig, { "fleetcheck.io/namespaces": "team-a,team-b" })
    await createCheck(m1, "team-a", "offline-a")
    await createCheck(m1, "team-b", "offline-b")
    await waitCarries(m1, "team-a", "offline-a", true)
    await waitCarries(m1, "team-b", "offline-b", true)
    await waitReady("narrow-offline")
    await stop(hub)

    await patchSecret("narrow-offline", {
      metadata: { annotations: { "fleetcheck.io/namespaces": "team-a" } },
    })
    hub = await start()
    await waitCarries(m1, "team-b", "offline-b", false)
    expect(await carries(m1, "team-a", "offline-a")).toBe(true)
    await waitUntil(
      "MemberCluster narrow-offline Ready",
      30_000,
      async () => (await readyReason("narrow-offline")) === "CachesSynced",
    )

    await deleteSecret("narrow-offline")
    await waitLetGo("narrow-offline")
    await everyCheckDeletable()
  }, 180_000)

  it("a Secret re-pointed to another server releases the old server's checks", async () => {
    await start()
    await register("moved", m1.kubeconfig)
    await createCheck(m1, "apps", "moved-old")
    await createCheck(m2, "apps", "moved-new")
    await waitCarries(m1, "apps", "moved-old", true)
    await waitReady("moved")
    expect(await carries(m2, "apps", "moved-new")).toBe(false)

    await patchSecret("moved", { data: { kubeconfig: b64(m2.kubeconfig) } })
    await waitCarries(m1, "apps", "moved-old", false)
    await waitCarries(m2, "apps", "moved-new", true)

    await deleteSecret("moved")
    await waitLetGo("moved")
    await everyCheckDeletable()
  }, 180_000)

  it("a Secret refused after it was engaged keeps no engine and strands nothing", async () => {
    const hub = await start()
    await register("turned", m1.kubeconfig)
    await createCheck(m1, "apps", "turned-check")
    await waitCarries(m1, "apps", "turned-check", true)
    await waitReady("turned")

    await patchSecret("turned", { data: { kubeconfig: b64(withExec(m1)) } })
    await waitUntil(
      "MemberCluster turned: Ready=False ExecPluginRefused",
      20_000,
      async () => (await readyReason("turned")) === "ExecPluginRefused",
    )
    await waitCarries(m1, "apps", "turned-check", false)
    expect(hub.members.get("turned")?.engineRunning).toBe(false)
    // Nothing is held any more: the hub's finalizer is off, and a delete goes through at once.
    await waitUntil(
      "the hub's finalizer off the refused Secret",
      20_000,
      async () => !((await secret("turned"))?.metadata?.finalizers ?? []).includes(memberCleanupFinalizer),
    )
    await deleteSecret("turned")
    await waitLetGo("turned", 20_000)
    await everyCheckDeletable()
  }, 180_000)

  it("a duplicate registration of one cluster is refused (DuplicateMember) until the first is deleted, then engaged; never two engines", async () => {
    const hub = await start()
    await register("dup-a", m1.kubeconfig)
    await waitUntil(
      "MemberCluster dup-a Ready",
      30_000,
      async () => (await readyReason("dup-a")) === "CachesSynced",
    )
    // Same server and CA, another user and context name, and a scope inside dup-a's (cluster-wide).
    await register("dup-b", renamed(m1, "second"), { "fleetcheck.io/namespaces": "apps" })
    const mc = await waitUntil("MemberCluster dup-b: Ready=False DuplicateMember", 20_000, async () => {
      const o = await memberCluster("dup-b")
      return cond(o, "Ready")?.reason === "DuplicateMember" ? o : undefined
    })
    expect(cond(mc, "Ready").status).toBe("False")
    expect(cond(mc, "Ready").message).toContain("dup-a")
    const events = (await hubCluster.api("GET", `/apis/events.k8s.io/v1/namespaces/${hubNamespace}/events`))
      .body.items as any[]
    const warning = events.find((e) => e.reason === "DuplicateMember" && e.regarding?.name === "dup-b")
    expect(warning?.type).toBe("Warning")
    expect(warning?.note).toContain("dup-a")

    // Sampled throughout: dup-b's engine never runs before dup-a is deleted, nor at the same time as dup-a's.
    let deleting = false
    let early = 0
    let together = 0
    const sampler = setInterval(() => {
      const a = hub.members.get("dup-a")?.engineRunning === true
      const b = hub.members.get("dup-b")?.engineRunning === true
      if (b && !deleting) early++
      if (a && b) together++
    }, 10)
    try {
      await createCheck(m1, "apps", "dup-check")
      await waitUntil("dup-check Verified", 60_000, async () => {
        const o = (await m1.api("GET", bcPath("apps", "dup-check"))).body
        return cond(o, "Verified")?.status === "True"
      })
      const jobs = async (name: string) =>
        (
          await m1.api(
            "GET",
            `/apis/batch/v1/namespaces/apps/jobs?labelSelector=fleetcheck.io%2Fbackupcheck%3D${name}`,
          )
        ).body.items as any[]
      const clusterOf = (job: any) =>
        job.spec.template.spec.containers[0].env.find((e: any) => e.name === "FLEETCHECK_CLUSTER")?.value
      const first = await jobs("dup-check")
      expect(first.map(clusterOf)).toEqual(["dup-a"])
      const runs = first.map((j) => j.metadata.labels["fleetcheck.io/run"])
      expect(new Set(runs).size).toBe(runs.length)

      deleting = true
      await deleteSecret("dup-a")
      await waitUntil("dup-a let go", 30_000, async () => (await secret("dup-a")) === undefined)
      await waitUntil(
        "MemberCluster dup-b Ready once dup-a is gone",
        30_000,
        async () => (await readyReason("dup-b")) === "CachesSynced",
      )
      expect({ early, together }).toEqual({ early: 0, together: 0 })
      // dup-b works the member now: the old check is its own, and a new one is verified by it.
      await waitCarries(m1, "apps", "dup-check", true)
      await createCheck(m1, "apps", "dup-check-2")
      await waitUntil("dup-check-2 Verified", 60_000, async () => {
        const o = (await m1.api("GET", bcPath("apps", "dup-check-2"))).body
        return cond(o, "Verified")?.status === "True"
      })
      expect((await jobs("dup-check-2")).map(clusterOf)).toEqual(["dup-b"])
      expect((await jobs("dup-check")).length).toBe(1)
    } finally {
      clearInterval(sampler)
    }

    await deleteSecret("dup-b")
    await waitLetGo("dup-b")
    await everyCheckDeletable()
  }, 240_000)

  it("one cluster under two URLs (direct, and through a TCP load balancer) is one cluster: the later registration is a DuplicateMember by kube-system UID and does no work until the first is gone", async () => {
    await start()
    const uid = (await m1.api("GET", "/api/v1/namespaces/kube-system")).body.metadata.uid as string
    expect(uid).toMatch(/^[0-9a-f-]{36}$/)
    await register("ip-a", m1.kubeconfig)
    await waitReady("ip-a")
    await waitUntil(
      "ip-a status.clusterID",
      30_000,
      async () => (await memberCluster("ip-a"))?.status?.clusterID === uid,
    )
    await sleep(1_100) // creationTimestamp has one-second resolution
    // The same API server through a TCP load balancer: same CA, same credential, another URL, so URL
    // and CA cannot tell them apart.
    const balancer = await startProxy(Number(new URL(m1.server).port))
    onTestFinished(() => balancer.close())
    const balanced = balancer.port
    const byName = m1.kubeconfig.replace(`server: ${m1.server}`, `server: https://127.0.0.1:${balanced}`)
    expect(byName).not.toBe(m1.kubeconfig)
    await register("name-b", byName)
    let last: unknown
    const mc = await waitUntil("MemberCluster name-b: Ready=False DuplicateMember", 30_000, async () => {
      const o = await memberCluster("name-b")
      last = o?.status
      return cond(o, "Ready")?.reason === "DuplicateMember" ? o : undefined
    }).catch((e) => {
      throw new Error(`${e.message}; last status ${JSON.stringify(last)}`)
    })
    expect(mc.status.clusterID).toBe(uid)
    expect(cond(mc, "Ready").message).toContain("ip-a")
    expect(cond(mc, "Ready").message).toContain(uid)
    expect(cond(mc, "BackupsVerified").reason).toBe("DuplicateMember")
    // Its connection itself is fine: this is not a reachability problem.
    expect(cond(mc, "Connected").status).toBe("True")
    const events = (await hubCluster.api("GET", `/apis/events.k8s.io/v1/namespaces/${hubNamespace}/events`))
      .body.items as any[]
    expect(
      events.some(
        (e) => e.reason === "DuplicateMember" && e.regarding?.name === "name-b" && e.note.includes(uid),
      ),
    ).toBe(true)

    // Which registration made each Job (what the member holds, not what the hub says): only ip-a.
    const jobsOf = async (name: string) =>
      (
        (
          await m1.api(
            "GET",
            `/apis/batch/v1/namespaces/apps/jobs?labelSelector=fleetcheck.io%2Fbackupcheck%3D${name}`,
          )
        ).body.items as any[]
      ).map(
        (job) =>
          job.spec.template.spec.containers[0].env.find((e: any) => e.name === "FLEETCHECK_CLUSTER")?.value,
      )
    const verified = (name: string) =>
      waitUntil(`${name} Verified`, 60_000, async () => {
        const o = (await m1.api("GET", bcPath("apps", name))).body
        return cond(o, "Verified")?.status === "True"
      })
    await createCheck(m1, "apps", "uid-check")
    await verified("uid-check")
    await sleep(2_000) // a second engine at work would have created its own Job by now
    expect(await jobsOf("uid-check")).toEqual(["ip-a"])

    await deleteSecret("ip-a")
    await waitLetGo("ip-a")
    await waitUntil(
      "name-b Ready once ip-a is gone",
      30_000,
      async () => (await readyReason("name-b")) === "CachesSynced",
    )
    await createCheck(m1, "apps", "uid-check-2")
    await verified("uid-check-2")
    expect(await jobsOf("uid-check-2")).toEqual(["name-b"])
    expect(await jobsOf("uid-check")).toEqual(["ip-a"])

    await deleteSecret("name-b")
    await waitLetGo("name-b")
    await everyCheckDeletable()
  }, 240_000)

  it("an earlier registration re-pointed onto a cluster a later one engages takes it over: the later is refused, never two engines", async () => {
    const hub = await start()
    await register("early", m1.kubeconfig)
    await sleep(1_100) // creationTimestamp has one-second resolution
    await register("late", m2.kubeconfig)
    await createCheck(m1, "apps", "early-check")
    await createCheck(m2, "apps", "late-check")
    await waitCarries(m1, "apps", "early-check", true)
    await waitCarries(m2, "apps", "late-check", true)
    await waitReady("early")
    await waitReady("late")

    let together = 0
    const sampler = setInterval(() => {
      if (hub.members.get("early")?.engineRunning && hub.members.get("late")?.engineRunning) {
        // Both run, but on m2 only if both point there: early's engine on m1 may still be draining.
        const earlyOnM2 = hub.members
          .get("early")
          ?.checks()
          .some((c) => c.metadata.name === "late-check")
        const lateOnM2 = hub.members
          .get("late")
          ?.checks()
          .some((c) => c.metadata.name === "late-check")
        if (earlyOnM2 && lateOnM2) together++
      }
    }, 10)
    try {
      await patchSecret("early", { data: { kubeconfig: b64(m2.kubeconfig) } })
      await waitUntil(
        "MemberCluster late: Ready=False DuplicateMember",
        20_000,
        async () => (await readyReason("late")) === "DuplicateMember",
      )
      await waitUntil(
        "early engaged on m2",
        30_000,
        async () =>
          (await readyReason("early")) === "CachesSynced" &&
          hub.members
            .get("early")
            ?.checks()
            .some((c) => c.metadata.name === "late-check"),
      )
      // m1 is no longer anyone's: released. m2's check is early's now, and keeps the finalizer.
      await waitCarries(m1, "apps", "early-check", false)
      await sleep(1_000)
      expect(await carries(m2, "apps", "late-check")).toBe(true)
      expect(hub.members.get("late")?.engineRunning).toBe(false)
      expect(together).toBe(0)
    } finally {
      clearInterval(sampler)
    }

    await deleteSecret("early")
    await waitLetGo("early")
    await waitUntil(
      "late engaged once early is gone",
      30_000,
      async () => (await readyReason("late")) === "CachesSynced",
    )
    await deleteSecret("late")
    await waitLetGo("late")
    await everyCheckDeletable()
  }, 180_000)

  it("disengaging hung members does not delay engaging another Secret", async () => {
    const hub = await start()
    // Two registrations of one member, in disjoint namespaces, so both have engines.
    await register("hung-a", m1.kubeconfig, { "fleetcheck.io/namespaces": "team-a" })
    await register("hung-b", renamed(m1, "other"), { "fleetcheck.io/namespaces": "team-b" })
    await createCheck(m1, "team-a", "hung-a-check")
    await createCheck(m1, "team-b", "hung-b-check")
    await waitCarries(m1, "team-a", "hung-a-check", true)
    await waitCarries(m1, "team-b", "hung-b-check", true)
    await waitReady("hung-a")
    await waitReady("hung-b")

    m1.freezeApiServer()
    try {
      await deleteSecret("hung-a")
      await deleteSecret("hung-b")
      await sleep(300)
      const t0 = Date.now()
      await register("fresh", m2.kubeconfig)
      await waitUntil("fresh engaged", 20_000, () => hub.members.get("fresh")?.engineRunning === true, 20)
      const engagedMs = Date.now() - t0
      process.stderr.write(`engaging a Secret while two hung members disengage: ${engagedMs} ms\n`)
      expect(engagedMs).toBeLessThan(2_000)
      await waitUntil(
        "MemberCluster fresh Ready",
        30_000,
        async () => (await readyReason("fresh")) === "CachesSynced",
      )
    } finally {
      m1.thawApiServer()
    }
    await waitCarries(m1, "team-a", "hung-a-check", false, 60_000)
    await waitCarries(m1, "team-b", "hung-b-check", false, 60_000)
    await waitLetGo("hung-a")
    await waitLetGo("hung-b")
    await deleteSecret("fresh")
    await waitLetGo("fresh")
    await everyCheckDeletable()
  }, 180_000)

  it("a Secret whose registration label is removed is let go like a deleted one", async () => {
    await start()
    await register("unlabelled", m1.kubeconfig)
    await createCheck(m1, "apps", "unlabelled-check")
    await waitCarries(m1, "apps", "unlabelled-check", true)
    await waitReady("unlabelled")

    await patchSecret("unlabelled", { metadata: { labels: { "fleetcheck.io/kubeconfig": null } } })
    await waitCarries(m1, "apps", "unlabelled-check", false)
    await waitUntil(
      "MemberCluster unlabelled gone",
      20_000,
      async () => (await memberCluster("unlabelled")) === undefined,
    )
    await waitUntil("the hub's finalizer and annotation off the Secret", 20_000, async () => {
      const s = await secret("unlabelled")
      return (
        !(s?.metadata?.finalizers ?? []).includes(memberCleanupFinalizer) &&
        s?.metadata?.annotations?.["fleetcheck.io/engaged-scopes"] === undefined
      )
    })
    await deleteSecret("unlabelled")
    await everyCheckDeletable()
  }, 180_000)
})
