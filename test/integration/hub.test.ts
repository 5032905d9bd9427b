// The hub against a real hub cluster and three real member clusters: registration by Secret, bad
// Secrets, a member killed and restarted, a member frozen, credential rotation, unregistration.
import { KubeConfig } from "@kubernetes/client-node"
import { Clock, Effect } from "effect"
import { TestClock } from "effect/testing"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type LocalCluster, type LocalFleet, startFleet } from "../../clusters/local-fleet/index.ts"
import type { MemberEntry } from "../../src/hub/fleet-state.ts"
import { syncMemberCluster } from "../../src/hub/member.ts"
import { makeKubeClient } from "../../src/kube/client.ts"
import { hubNamespace, type RunningHub, startHub } from "../support/hub.ts"
import { sumOf } from "../support/prometheus-text.ts"
import { sleep, waitUntil } from "../support/wait.ts"

const crdDir = new URL("../../deploy/crds/", import.meta.url).pathname
const ns = "apps"

const b64 = (s: string) => Buffer.from(s).toString("base64")
const secretFor = (
  name: string,
  kubeconfig: string | undefined,
  extra: {
    labels?: Record<string, string>
    annotations?: Record<string, string>
    data?: Record<string, string>
  } = {},
) => ({
  apiVersion: "v1",
  kind: "Secret",
  metadata: {
    name,
    namespace: hubNamespace,
    labels: { "fleetcheck.io/kubeconfig": "true", ...extra.labels },
    annotations: extra.annotations ?? {},
  },
  data: extra.data ?? (kubeconfig === undefined ? {} : { kubeconfig: b64(kubeconfig) }),
})

const check = (name: string, annotations: Record<string, string> = {}) => ({
  apiVersion: "fleetcheck.io/v1alpha1",
  kind: "BackupCheck",
  metadata: { name, namespace: ns },
  spec: {
    backup: { name: `${name}-backup` },
    jobTemplate: {
      spec: {
        template: {
          metadata: { annotations },
          spec: { containers: [{ name: "restore", image: "restore:1" }] },
        },
      },
    },
  },
})

describe("hub with three members", () => {
  let fleet: LocalFleet
  let hubCluster: LocalCluster
  let members: LocalCluster[]
  let hub: RunningHub

  const fleetApi = async (query = "") =>
    (await fetch(`${hub.url}/api/v1/fleet${query}`)).json() as Promise<any>
  const memberCluster = async (name: string) =>
    (await hubCluster.api("GET", `/apis/fleetcheck.io/v1alpha1/memberclusters/${name}`)).body
  const cond = (obj: any, type: string) => (obj?.status?.conditions ?? []).find((c: any) => c.type === type)
  const putSecret = async (secret: any) => {
    const path = `/api/v1/namespaces/${hubNamespace}/secrets`
    const existing = await hubCluster.api("GET", `${path}/${secret.metadata.name}`)
    const res =
      existing.status === 200
        ? await hubCluster.api("PUT", `${path}/${secret.metadata.name}`, {
            ...secret,
            metadata: { ...secret.metadata, resourceVersion: existing.body.metadata.resourceVersion },
          })
        : await hubCluster.api("POST", path, secret)
    expect(res.status, JSON.stringify(res.body)).toBeLessThan(300)
  }
  const createCheck = async (m: LocalCluster, name: string, annotations: Record<string, string> = {}) => {
    const res = await m.api(
      "POST",
      `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`,
      check(name, annotations),
    )
    expect(res.status, JSON.stringify(res.body)).toBe(201)
  }
  const verifiedIn = (m: LocalCluster, name: string, timeoutMs = 60_000) =>
    waitUntil(`${m.name}/${name} Verified=True`, timeoutMs, async () => {
      const o = (await m.api("GET", `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks/${name}`))
        .body
      return cond(o, "Verified")?.status === "True" ? o : undefined
    })
  const jobCount = async (m: LocalCluster, checkName: string) =>
    (
      (
        await m.api(
          "GET",
          `/apis/batch/v1/namespaces/${ns}/jobs?labelSelector=fleetcheck.io%2Fbackupcheck%3D${checkName}`,
        )
      ).body.items as any[]
    ).length

  beforeAll(async () => {
    fleet = await startFleet({
      clusters: [{ name: "hub", workloads: false, controllerManager: false }, "m1", "m2", "m3"],
    })
    hubCluster = fleet.cluster("hub")
    members = ["m1", "m2", "m3"].map((n) => fleet.cluster(n))
    expect(
      (
        await hubCluster.kubectl([
          "apply",
          "--server-side",
          "-f",
          `${crdDir}/fleetcheck.io_memberclusters.yaml`,
        ])
      ).code,
    ).toBe(0)
    expect(
      (await hubCluster.api("POST", "/api/v1/namespaces", { metadata: { name: hubNamespace } })).status,
    ).toBe(201)
    for (const m of members) {
      expect(
        (await m.kubectl(["apply", "--server-side", "-f", `${crdDir}/fleetcheck.io_backupchecks.yaml`])).code,
      ).toBe(0)
      expect((await m.api("POST", "/api/v1/namespaces", { metadata: { name: ns } })).status).toBe(201)
    }
    for (const m of members) {
      await m.kubectl([
        "wait",
        "--for=condition=Established",
        "crd/backupchecks.fleetcheck.io",
        "--timeout=30s",
      ])
    }
    await hubCluster.kubectl([
      "wait",
      "--for=condition=Established",
      "crd/memberclusters.fleetcheck.io",
      "--timeout=30s",
    ])
    hub = await startHub(hubCluster)
  })

  afterAll(async () => {
    await hub?.stop()
    await fleet?.stop()
  })

  it("registers members from Secrets while running; checks verify; MemberClusters and the fleet API agree", async () => {
    const t0 = Date.now()
    for (const m of members)
      await putSecret(secretFor(m.name, m.kubeconfig, { labels: { env: "test", region: m.name } }))
    for (const m of members) {
      await createCheck(m, "db-nightly")
      await createCheck(m, "db-broken", {
        "fleetcheck.io/simulate": "fail",
        "fleetcheck.io/simulate-message": "restore failed: disk full",
      })
    }
    for (const m of members) await verifiedIn(m, "db-nightly")
    console.log(`3 members registered → first checks verified: ${Date.now() - t0} ms`)
    for (const m of members) {
      const mc = await waitUntil(`MemberCluster ${m.name} counts`, 30_000, async () => {
        const o = await memberCluster(m.name)
        return o?.status?.counts?.verified === 1 && o.status.counts.failed === 1 ? o : undefined
      })
      expect(mc.metadata.labels).toEqual({ env: "test", region: m.name })
      expect(cond(mc, "Ready")).toMatchObject({ status: "True" })
      expect(cond(mc, "Connected")).toMatchObject({ status: "True" })
      expect(cond(mc, "CredentialsValid")).toMatchObject({ status: "True" })
      expect(cond(mc, "BackupsVerified")).toMatchObject({ status: "False", reason: "ChecksFailing" })
      expect(mc.status.kubernetesVersion).toBe("v1.37.2")
      expect(mc.status.counts).toEqual({ total: 2, verified: 1, failed: 1, unknown: 0 })
    }
    const view = await fleetApi()
    expect(view.clusters.map((c: any) => c.name)).toEqual(["m1", "m2", "m3"])
    for (const c of view.clusters) expect(c.counts).toEqual((await memberCluster(c.name)).status.counts)
    expect(view.checks).toHaveLength(6)
    expect(
      view.checks.slice(0, 3).every((c: any) => c.status === "False" && c.reason === "RestoreFailed"),
    ).toBe(true)
    const failing = await fleetApi("?failing=true&cluster=m2")
    expect(failing.checks).toEqual([
      expect.objectContaining({
        cluster: "m2",
        name: "db-broken",
        message: expect.stringContaining("restore failed: disk full"),
      }),
    ])
    // Prometheus exposition, parsed: the series for these members exist and have moved.
    const text = await (await fetch(`${hub.url}/metrics`)).text()
    const sample = (name: string, labels: Record<string, string>) => {
      for (const line of text.split("\n")) {
        const m = /^([a-z_:]+)\{(.*)\} (\S+)$/.exec(line)
        if (!m || m[1] !== name) continue
        const got = Object.fromEntries([...m[2]!.matchAll(/(\w+)="([^"]*)"/g)].map((x) => [x[1], x[2]]))
        if (Object.entries(labels).every(([k, v]) => got[k] === v)) return Number(m[3])
      }
      return undefined
    }
    expect(
      sample("controller_runtime_reconcile_total", {
        cluster: "m1",
        controller: "backupcheck",
        result: "requeue_after",
      }),
    ).toBeGreaterThan(0)
    expect(sample("workqueue_adds_total", { cluster: "m1" })).toBeGreaterThan(0)
    expect(sample("fleetcheck_member_cluster_connected", { cluster: "m2" })).toBe(1)
    expect(
      sample("fleetcheck_backupcheck_verified", { cluster: "m3", namespace: ns, name: "db-nightly" }),
    ).toBe(1)
    expect(
      sample("fleetcheck_backupcheck_verified", {
        cluster: "m3",
        namespace: ns,
        name: "db-broken",
        reason: "RestoreFailed",
      }),
    ).toBe(0)
    // the leader says so: FleetcheckHubAbsent stays quiet
    expect(/^fleetcheck_hub_leader 1$/m.test(text)).toBe(true)
    expect(
      sample("fleetcheck_backupcheck_last_success_timestamp_seconds", { cluster: "m1", name: "db-nightly" }),
    ).toBeGreaterThan(1.7e9)
    expect(
      sample("fleetcheck_informer_objects", { cluster: "m1", resource: "backupchecks.fleetcheck.io" }),
    ).toBe(2)
    const ready = await fetch(`${hub.url}/readyz`)
    expect(ready.status).toBe(200)
  })

  it("converged members cost the hub cluster no MemberCluster request between probe-time refreshes", async () => {
    // From the hub apiserver's own request counters: 16 status rounds per member in 8 s (500 ms
    // interval) used to send a GET and a PATCH each; only the once-a-minute probe-time refresh may
    // show up now, at most once per member.
    const counts = async () => {
      const text = (await hubCluster.api("GET", "/metrics")).body as string
      const requests = (match: Record<string, string>) =>
        sumOf(text, "apiserver_request_total", { resource: "memberclusters", ...match })
      return { get: requests({ verb: "GET" }), patch: requests({ verb: "PATCH", subresource: "status" }) }
    }
    const before = await counts()
    await sleep(8_000)
    const after = await counts()
    expect(after.get - before.get).toBeLessThanOrEqual(members.length)
    expect(after.patch - before.patch).toBeLessThanOrEqual(members.length)
  })

  it("a new MemberCluster is created once though two rounds sync it at once; the minute's probe-time refresh is one PATCH, and an edit behind the hub's back is still found", async () => {
    // syncMemberCluster alone on a clock of its own, against the hub apiserver; its request counters
    // (all MemberClusters, so the hub's three members add at most one refresh each) are the evidence.
    const counts = async () => {
      const text = (await hubCluster.api("GET", "/metrics")).body as string
      const requests = (match: Record<string, string>) =>
        sumOf(text, "apiserver_request_total", { resource: "memberclusters", ...match })
      return {
        get: requests({ verb: "GET" }),
        patch: requests({ verb: "PATCH", subresource: "status" }),
        post: requests({ verb: "POST" }),
      }
    }
    const kubeConfig = new KubeConfig()
    kubeConfig.loadFromString(hubCluster.kubeconfig)
    const entry: MemberEntry = {
      name: "refresh-probe",
      labels: { team: "a" },
      engineRunning: true,
      synced: true,
      expiringSoon: false,
      catchingUp: false,
      probe: {
        connected: true,
        credentialsValid: true,
        consecutiveFailures: 0,
        consecutiveSuccesses: 1,
      },
      checks: () => [],
    }
    const path = "/apis/fleetcheck.io/v1alpha1/memberclusters/refresh-probe"
    // --status-refresh-interval given as one minute here: the rounds below step the clock by it.
    const refreshMs = 60_000
    const refreshes = 5
    const { initial, before, after, labels } = await Effect.runPromise(
      Effect.gen(function* () {
        const client = yield* makeKubeClient({
          cluster: "hub",
          kubeConfig,
          requestTimeoutMs: 10_000,
        })
        const round = Effect.gen(function* () {
          entry.probe.lastProbeTime = yield* Clock.currentTimeMillis
          yield* syncMemberCluster(client, entry, refreshMs)
        })
        yield* TestClock.setTime(Date.parse("2026-01-01T00:00:00Z"))
        // The registration controller and the member's status loop both sync a new member.
        const initial = yield* Effect.promise(counts)
        yield* Effect.all([round, round], { concurrency: 2, discard: true })
        const before = yield* Effect.promise(counts)
        for (let i = 0; i < refreshes; i++) {
          // Status rounds in between send nothing; the refresh a minute later sends one PATCH.
          for (let t = 0; t < 3; t++) {
            yield* TestClock.adjust(19_000)
            yield* syncMemberCluster(client, entry, refreshMs)
          }
          yield* TestClock.adjust(4_000)
          yield* round
        }
        const after = yield* Effect.promise(counts)
        // Labels edited behind the hub's back: the next refresh's PATCH conflicts, and the hub reads the
        // object and puts its labels back in the same round.
        const edited = yield* Effect.promise(async () => {
          const o = (await hubCluster.api("GET", path)).body
          return hubCluster.api("PUT", path, {
            ...o,
            metadata: { ...o.metadata, labels: { team: "b", x: "y" } },
          })
        })
        expect(edited.status).toBe(200)
        yield* TestClock.adjust(61_000)
        yield* round
        const labels = (yield* Effect.promise(() => hubCluster.api("GET", path))).body.metadata.labels
        return { initial, before, after, labels }
      }).pipe(Effect.scoped, Effect.provide(TestClock.layer())),
    )
    // Created once: the other round waited and found it (two POSTs, one refused, before).
    expect(before.post - initial.post).toBe(1)
    expect(after.patch - before.patch).toBeGreaterThanOrEqual(refreshes)
    expect(after.patch - before.patch).toBeLessThanOrEqual(refreshes + members.length)
    // One GET per refresh before the fix; only the hub's own members' rounds may show up now.
    expect(after.get - before.get).toBeLessThan(refreshes)
    expect(labels).toEqual({ team: "a" })
    expect(entry.lastStatus?.lastProbeTime).toBe("2026-01-01T00:06:06Z")
    expect((await hubCluster.api("DELETE", path)).status).toBe(200)
  })

  it("bad Secrets each give a MemberCluster that says what is wrong; the hub stays ready, others keep verifying", async () => {
    const good = members[0]!.kubeconfig
    // A cluster no other registration names (the hub's own API server), so the wrong token is what is
    // wrong, not a second registration of m1 (that one is refused as DuplicateMember).
    const withToken = hubCluster.kubeconfig.replace(/token: .*/, "token: wrong-token-0000")
    const withCa = good.replace(
      /certificate-authority-data: .*/,
      `certificate-authority-data: ${b64(fleet.cluster("m2").caPem)}`,
    )
    const unreachable = good.replace(/server: .*/, "server: https://127.0.0.1:1")
    const exec = good.replace(
      / {4}token: .*/,
      "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n      args: [-c, id]",
    )
    const file = good.replace(/certificate-authority-data: .*/, "certificate-authority: /etc/passwd")
    // The same API server under a path it ignores would pass for a second member: refused.
    const withPath = good.replace(/server: (.*)/, "server: $1/extra")
    // Several refusals at once: none hides another (plain http first, then the exec plugin, the path).
    const several = exec.replace(/server: https:(.*)/, "server: http:$1/extra")
    const cases: Array<[string, any, string, string]> = [
      [
        "bad-garbage",
        secretFor("bad-garbage", undefined, { data: { kubeconfig: b64("{{{ not yaml :::") } }),
        "CredentialsValid",
        "KubeconfigInvalid",
      ],
      [
        "bad-missing",
        secretFor("bad-missing", undefined, { data: { other: b64("x") } }),
        "CredentialsValid",
        "KubeconfigMissing",
      ],
      ["bad-exec", secretFor("bad-exec", exec), "CredentialsValid", "ExecPluginRefused"],
      ["bad-file", secretFor("bad-file", file), "CredentialsValid", "FilePathRefused"],
      ["bad-path", secretFor("bad-path", withPath), "CredentialsValid", "ServerURLRefused"],
      ["bad-several", secretFor("bad-several", several), "CredentialsValid", "PlaintextServerRefused"],
      ["bad-token", secretFor("bad-token", withToken), "CredentialsValid", "Unauthorized"],
      ["bad-ca", secretFor("bad-ca", withCa), "Connected", "ProbeFailed"],
      ["bad-address", secretFor("bad-address", unreachable), "Connected", "ProbeFailed"],
    ]
    for (const [, secret] of cases) await putSecret(secret)
    for (const [name, , type, reason] of cases) {
      const mc = await waitUntil(`${name}: ${type} reason ${reason}`, 30_000, async () => {
        const o = await memberCluster(name)
        return cond(o, type)?.reason === reason ? o : undefined
      })
      expect(cond(mc, type).status).toBe("False")
      expect(cond(mc, type).message.length).toBeGreaterThan(5)
      // Nothing secret in what the hub writes.
      expect(JSON.stringify(mc)).not.toContain(fleet.cluster("m1").adminToken)
      expect(JSON.stringify(mc)).not.toContain("wrong-token-0000")
    }
    const severalMessage = cond(await memberCluster("bad-several"), "CredentialsValid").message
    expect(severalMessage).toContain("refused for 3 reasons")
    for (const words of ["plain http", ".exec runs a command", "has a path"])
      expect(severalMessage).toContain(words)
    const events = (await hubCluster.api("GET", `/apis/events.k8s.io/v1/namespaces/${hubNamespace}/events`))
      .body.items as any[]
    expect(events.some((e) => e.reason === "ExecPluginRefused" && e.regarding.name === "bad-exec")).toBe(true)
    expect(JSON.stringify(events)).not.toContain(fleet.cluster("m1").adminToken)
    // Sync timed out for the unreachable ones: they say so, and readiness does not wait on them forever.
    await waitUntil(
      "hub ready despite bad members",
      20_000,
      async () => (await fetch(`${hub.url}/readyz`)).status === 200,
    )
    await createCheck(members[2]!, "during-bad-secrets")
    await verifiedIn(members[2]!, "during-bad-secrets", 30_000)
    for (const [name] of cases) {
      expect(
        (await hubCluster.api("DELETE", `/api/v1/namespaces/${hubNamespace}/secrets/${name}`)).status,
      ).toBe(200)
    }
    for (const [name] of cases) {
      await waitUntil(
        `${name} MemberCluster removed`,
        20_000,
        async () =>
          (await hubCluster.api("GET", `/apis/fleetcheck.io/v1alpha1/memberclusters/${name}`)).status === 404,
      )
    }
  })

  it("a member API server killed: Connected=False within the probe threshold, its checks Unknown, others unaffected; restarted: recovery without duplicates", async () => {
    const victim = members[1]!
    const t0 = Date.now()
    await victim.stopApiServer()
    const gone = Date.now()
    const mc = await waitUntil("Connected=False", 30_000, async () => {
      const o = await memberCluster(victim.name)
      return cond(o, "Connected")?.status === "False" ? o : undefined
    })
    const detected = Date.now()
    console.log(
      `dead member: Connected=False ${detected - t0} ms after SIGTERM to its apiserver, ${detected - gone} ms after the process exited (probe 500 ms × threshold 3)`,
    )
    expect(cond(mc, "BackupsVerified")).toMatchObject({ status: "Unknown", reason: "ClusterUnreachable" })
    const view = await fleetApi(`?cluster=${victim.name}`)
    expect(view.checks.length).toBeGreaterThan(0)
    expect(view.checks.every((c: any) => c.status === "Unknown" && c.reason === "ClusterUnreachable")).toBe(
      true,
    )
    expect(mc.status.counts.unknown).toBe(mc.status.counts.total)
    // Others carry on meanwhile.
    await createCheck(members[0]!, "while-m2-down")
    await verifiedIn(members[0]!, "while-m2-down", 30_000)
    await victim.startApiServer()
    const back = await waitUntil("Connected=True again", 60_000, async () => {
      const o = await memberCluster(victim.name)
      return cond(o, "Connected")?.status === "True" && o.status.counts.verified === 1 ? o : undefined
    })
    expect(back.status.counts.total).toBe(2)
    await createCheck(victim, "after-restart")
    await verifiedIn(victim, "after-restart", 60_000)
    expect(await jobCount(victim, "db-nightly")).toBe(1)
  })

  it("a frozen member (SIGSTOP) does not starve the others", async () => {
    const frozen = members[2]!
    frozen.freezeApiServer()
    try {
      const t0 = Date.now()
      const names = Array.from({ length: 20 }, (_, i) => `under-freeze-${i}`)
      for (const n of names) await createCheck(members[0]!, n)
      for (const n of names) await verifiedIn(members[0]!, n, 60_000)
      console.log(`20 checks verified on m1 while m3 frozen: ${Date.now() - t0} ms`)
      await waitUntil(
        "frozen member Connected=False",
        30_000,
        async () => cond(await memberCluster(frozen.name), "Connected")?.status === "False",
      )
    } finally {
      frozen.thawApiServer()
    }
    await waitUntil(
      "thawed member Connected=True",
      60_000,
      async () => cond(await memberCluster(frozen.name), "Connected")?.status === "True",
    )
    await createCheck(frozen, "after-thaw")
    await verifiedIn(frozen, "after-thaw", 60_000)
  })

  it("credential rotation is swapped into the running engine once, without a rebuild; unrelated edits change nothing", async () => {
    const m = members[0]!
    const eventsOf = async (reason: string) =>
      (
        (await hubCluster.api("GET", `/apis/events.k8s.io/v1/namespaces/${hubNamespace}/events`)).body
          .items as any[]
      ).filter((e) => e.reason === reason && e.regarding.name === m.name).length
    const before = await eventsOf("MemberRebuilt")
    const rotatedBefore = await eventsOf("CredentialRotated")
    // Unrelated: a label and another data key. Labels follow to the MemberCluster; no rebuild.
    await putSecret(secretFor(m.name, m.kubeconfig, { labels: { env: "prod", region: m.name } }))
    await waitUntil(
      "label copied",
      20_000,
      async () => (await memberCluster(m.name)).metadata.labels.env === "prod",
    )
    // Rotation: same server, different user entry (as a new token would be): a credential, not a connection.
    const rotated = m.kubeconfig.replaceAll(`${m.name}-admin`, `${m.name}-rotated`)
    await putSecret(secretFor(m.name, rotated, { labels: { env: "prod", region: m.name } }))
    await waitUntil(
      "one CredentialRotated event",
      20_000,
      async () => (await eventsOf("CredentialRotated")) === rotatedBefore + 1,
    )
    await sleep(2_000)
    expect(await eventsOf("CredentialRotated")).toBe(rotatedBefore + 1)
    expect(await eventsOf("MemberRebuilt")).toBe(before)
    await createCheck(m, "after-rotation")
    await verifiedIn(m, "after-rotation", 60_000)
  })

  it("unregistering removes the hub's finalizers, so checks stay deletable, and the MemberCluster", async () => {
    const m = members[2]!
    const list = async () =>
      (await m.api("GET", `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`)).body.items as any[]
    expect((await list()).some((o) => (o.metadata.finalizers ?? []).includes("fleetcheck.io/cleanup"))).toBe(
      true,
    )
    expect(
      (await hubCluster.api("DELETE", `/api/v1/namespaces/${hubNamespace}/secrets/${m.name}`)).status,
    ).toBe(200)
    await waitUntil("finalizers removed", 30_000, async () =>
      (await list()).every((o) => !(o.metadata.finalizers ?? []).includes("fleetcheck.io/cleanup")),
    )
    await waitUntil(
      "MemberCluster removed",
      20_000,
      async () =>
        (await hubCluster.api("GET", `/apis/fleetcheck.io/v1alpha1/memberclusters/${m.name}`)).status === 404,
    )
    // Deleting a check now completes without any hub.
    expect(
      (await m.api("DELETE", `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks/db-nightly`)).status,
    ).toBe(200)
    await waitUntil(
      "check deleted",
      20_000,
      async () =>
        (await m.api("GET", `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks/db-nightly`))
          .status === 404,
    )
    const view = await fleetApi()
    expect(view.clusters.map((c: any) => c.name)).toEqual(["m1", "m2"])
  })
})
