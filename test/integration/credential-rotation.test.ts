// Credentials that rotate in place, against real API servers. The evidence is the member API server's
// audit log (reads recorded too), not the hub: LIST requests for BackupChecks and Jobs by the hub (its
// probe's `limit=1` LIST aside) count relists, 401 answers to the hub count a storm.
//   - a registration Secret's token rotated ROTATIONS times (default 5; the bench runs 20), each old
//     token revoked (its ServiceAccount deleted) as soon as the hub uses the new one, while checks keep
//     being created: 0 relists, 0 401s, every new check reconciled and verified
//   - an exec plugin (clusters/local-fleet/token-plugin.sh, a TokenRequest token per run) whose
//     credentials expire every 3 s, EXPIRIES times (default 5): 0 relists, verification continues
//   - a change of the connection (tls-server-name) still rebuilds: the caches are listed again
//   - access granted to an identity the member refused (403): the caches list within a probe or two, not
//     when their backoff runs out
//   - exec plugins that fail, hang or print garbage are bounded and reported (CredentialsValid=False
//     ExecPluginFailed) without what they printed
//   - a Cluster API <cluster>-kubeconfig Secret (data key value) selected by --capi-kubeconfig-selector
//     registers a member that verifies a check; one with a kubeconfig the policy refuses says why
import { chmodSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  type LocalCluster,
  type LocalFleet,
  startFleet,
  tokenPluginExecConfig,
} from "../../clusters/local-fleet/index.ts"
import { formatRequests, requestsTo } from "../support/audit.ts"
import { hubNamespace, type RunningHub, startHub } from "../support/hub.ts"
import { sleep, waitUntil } from "../support/wait.ts"

const rotations = Number(process.env.FLEETCHECK_ROTATIONS ?? "5")
const expiries = Number(process.env.FLEETCHECK_EXPIRIES ?? "5")
const crdDir = new URL("../../deploy/crds/", import.meta.url).pathname
const plugin = new URL("../../clusters/local-fleet/token-plugin.sh", import.meta.url).pathname
const saNamespace = "hub-identities"
const hubAgent = /^fleetcheck-hub\//
const clientCerts = new URL("../support/fixtures/client-certs", import.meta.url).pathname
const b64 = (s: string) => Buffer.from(s).toString("base64")
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

describe("credential rotation without a relist", () => {
  let fleet: LocalFleet
  let hubCluster: LocalCluster
  let m1: LocalCluster
  let hub: RunningHub

  const secretsPath = `/api/v1/namespaces/${hubNamespace}/secrets`
  const putSecret = async (name: string, kubeconfig: string, namespaces: string) => {
    const body = {
      apiVersion: "v1",
      kind: "Secret",
      metadata: {
        name,
        namespace: hubNamespace,
        labels: { "fleetcheck.io/kubeconfig": "true" },
        annotations: { "fleetcheck.io/namespaces": namespaces },
      },
      data: { kubeconfig: b64(kubeconfig) },
    }
    const existing = await hubCluster.api("GET", `${secretsPath}/${name}`)
    const res =
      existing.status === 200
        ? await hubCluster.api("PUT", `${secretsPath}/${name}`, {
            ...body,
            metadata: { ...existing.body.metadata, ...body.metadata },
          })
        : await hubCluster.api("POST", secretsPath, body)
    expect(res.status, JSON.stringify(res.body)).toBeLessThan(300)
  }
  const memberCluster = async (name: string) =>
    (await hubCluster.api("GET", `/apis/fleetcheck.io/v1alpha1/memberclusters/${name}`)).body
  const waitReady = (name: string) =>
    waitUntil(
      `${name} Ready`,
      60_000,
      async () => cond(await memberCluster(name), "Ready")?.reason === "CachesSynced",
    )
  const eventsOf = async (name: string, reason: string) =>
    (
      (await hubCluster.api("GET", `/apis/events.k8s.io/v1/namespaces/${hubNamespace}/events`)).body
        .items as any[]
    ).filter((e) => e.reason === reason && e.regarding.name === name).length
  const bcPath = (namespace: string, name?: string) =>
    `/apis/fleetcheck.io/v1alpha1/namespaces/${namespace}/backupchecks${name ? `/${name}` : ""}`
  const createCheck = async (namespace: string, name: string) => {
    const r = await m1.api("POST", bcPath(namespace), check(name, namespace))
    expect(r.status, JSON.stringify(r.body)).toBe(201)
  }
  const checksIn = async (namespace: string) => (await m1.api("GET", bcPath(namespace))).body.items as any[]
  /** Every check in `namespace` carries the hub's finalizer (its add event reached the hub) and is verified. */
  const allReconciledAndVerified = (namespace: string, timeoutMs: number) =>
    waitUntil(`every check in ${namespace} reconciled and verified`, timeoutMs, async () => {
      const items = await checksIn(namespace)
      return (
        items.length > 0 &&
        items.every(
          (o) =>
            (o.metadata.finalizers ?? []).includes("fleetcheck.io/cleanup") &&
            cond(o, "Verified")?.status === "True",
        )
      )
    })
  /**
   * The hub's informer LISTs of BackupChecks and Jobs in `namespace`: not its probe's `limit=1` LIST, nor
   * the reconciler's read of one Job by name (`fieldSelector=metadata.name=...`).
   */
  const relists = (namespace: string, since: number) =>
    requestsTo(m1, { userAgent: hubAgent, verb: "list", since }).filter(
      (r) =>
        (r.resource === "backupchecks" || r.resource === "jobs") &&
        r.requestURI.includes(`/namespaces/${namespace}/`) &&
        !/[?&]limit=1(&|$)/.test(r.requestURI) &&
        !/[?&]fieldSelector=metadata\.name/.test(r.requestURI),
    )
  const tokenFor = async (sa: string) => {
    const r = await m1.api("POST", `/api/v1/namespaces/${saNamespace}/serviceaccounts/${sa}/token`, {
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenRequest",
      spec: { expirationSeconds: 3600 },
    })
    expect(r.status, JSON.stringify(r.body)).toBe(201)
    return r.body.status.token as string
  }
  const createServiceAccount = async (sa: string) =>
    expect(
      (
        await m1.api("POST", `/api/v1/namespaces/${saNamespace}/serviceaccounts`, {
          metadata: { name: sa, namespace: saNamespace },
        })
      ).status,
    ).toBe(201)
  const withToken = (token: string) => m1.kubeconfig.replace(m1.adminToken, token)

  /** Creates a check every `everyMs` until stopped: the steady stream of changes the hub must not miss. */
  const stream = (namespace: string, prefix: string, everyMs: number) => {
    let stopped = false
    let n = 0
    const done = (async () => {
      while (!stopped) {
        await createCheck(namespace, `${prefix}-${n++}`)
        await sleep(everyMs)
      }
    })()
    return {
      stop: async () => {
        stopped = true
        await done
        return n
      },
    }
  }

  const sentinel = "SENTINEL-plugin-said-this"
  const brokenPlugins = {
    fails: `echo "${sentinel} token=abc" >&2; exit 3`,
    hangs: `echo "${sentinel}" >&2; sleep 600`,
    garbage: `echo "${sentinel} {not an ExecCredential"`,
  }
  let pluginDir = ""
  const profilesPath = `/apis/multicluster.x-k8s.io/v1alpha2/namespaces/${hubNamespace}/clusterprofiles`
  /** A ClusterProfile whose status offers `providers` for m1 (status written through its subresource). */
  const putProfile = async (
    name: string,
    providers: ReadonlyArray<string>,
    namespaces: string,
    ca = true,
  ) => {
    const created = await hubCluster.api("POST", profilesPath, {
      apiVersion: "multicluster.x-k8s.io/v1alpha2",
      kind: "ClusterProfile",
      metadata: { name, namespace: hubNamespace, annotations: { "fleetcheck.io/namespaces": namespaces } },
      spec: { displayName: name, clusterManager: { name: "test-manager" } },
    })
    expect(created.status, JSON.stringify(created.body)).toBe(201)
    const status = await hubCluster.api("PUT", `${profilesPath}/${name}/status`, {
      ...created.body,
      status: {
        accessProviders: providers.map((p) => ({
          name: p,
          cluster: {
            server: m1.server,
            ...(ca ? { "certificate-authority-data": b64(m1.caPem) } : {}),
          },
        })),
      },
    })
    expect(status.status, JSON.stringify(status.body)).toBe(200)
  }

  beforeAll(async () => {
    fleet = await startFleet({
      clusters: [
        { name: "hub", workloads: false, controllerManager: false },
        // Client certificates signed by the fixture CA are accepted besides tokens.
        { name: "m1", audit: "reads", clientCaFile: `${clientCerts}/ca.crt` },
      ],
    })
    hubCluster = fleet.cluster("hub")
    m1 = fleet.cluster("m1")
    pluginDir = `${fleet.runDir}/plugins`
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
    expect(
      (await m1.kubectl(["apply", "--server-side", "-f", `${crdDir}/fleetcheck.io_backupchecks.yaml`])).code,
    ).toBe(0)
    for (const ns of [saNamespace, "rotated", "certs", "exec", "profile"])
      expect((await m1.api("POST", "/api/v1/namespaces", { metadata: { name: ns } })).status).toBe(201)
    // Every ServiceAccount of saNamespace is a hub identity (one per rotation, so the audit log tells
    // which token a request carried).
    expect(
      (
        await m1.api("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
          metadata: { name: "hub-identities" },
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "cluster-admin" },
          subjects: [
            {
              kind: "Group",
              apiGroup: "rbac.authorization.k8s.io",
              name: `system:serviceaccounts:${saNamespace}`,
            },
          ],
        })
      ).status,
    ).toBe(201)
    // ClusterProfiles: the CRD in the hub, and the hub operator's provider file naming the project's
    // TokenRequest plugin and three broken ones.
    expect(
      (
        await hubCluster.kubectl([
          "apply",
          "--server-side",
          "-f",
          `${crdDir}/multicluster.x-k8s.io_clusterprofiles.yaml`,
        ])
      ).code,
    ).toBe(0)
    mkdirSync(pluginDir, { recursive: true })
    for (const [name, body] of Object.entries(brokenPlugins)) {
      writeFileSync(`${pluginDir}/${name}.sh`, `#!/bin/sh\n${body}\n`)
      chmodSync(`${pluginDir}/${name}.sh`, 0o755)
    }
    const providerFile = `${fleet.runDir}/providers.json`
    writeFileSync(
      providerFile,
      JSON.stringify({
        providers: [
          {
            name: "fleet-token",
            execConfig: tokenPluginExecConfig(fleet, m1, saNamespace, "profile-hub"),
          },
          ...Object.keys(brokenPlugins).map((name) => ({
            name,
            execConfig: { command: `${pluginDir}/${name}.sh` },
          })),
        ],
      }),
    )
    hub = await startHub(hubCluster, {
      allowExec: true,
      execPluginTimeoutMs: 2_000,
      capiKubeconfigSelector: "cluster.x-k8s.io/cluster-name",
      clusterprofileProviderFile: providerFile,
    })
  }, 180_000)

  afterAll(async () => {
    await hub?.stop()
    await fleet?.stop()
  })

  it(`${rotations} token rotations, each old token revoked at once: 0 relists, 0 401s, no change missed`, async () => {
    await createServiceAccount("hub-0")
    await putSecret("rotated", withToken(await tokenFor("hub-0")), "rotated")
    await waitReady("rotated")
    await createCheck("rotated", "before")
    await allReconciledAndVerified("rotated", 60_000)
    const t0 = Date.now()
    const changes = stream("rotated", "during", 300)
    for (let i = 1; i <= rotations; i++) {
      await createServiceAccount(`hub-${i}`)
      const since = Date.now()
      await putSecret("rotated", withToken(await tokenFor(`hub-${i}`)), "rotated")
      await waitUntil(
        `the hub uses hub-${i}'s token`,
        20_000,
        () =>
          requestsTo(m1, {
            user: `system:serviceaccount:${saNamespace}:hub-${i}`,
            userAgent: hubAgent,
            since,
          }).length > 0,
      )
      // Revoked right after: the previous token stops working.
      expect(
        (await m1.api("DELETE", `/api/v1/namespaces/${saNamespace}/serviceaccounts/hub-${i - 1}`)).status,
      ).toBe(200)
      await sleep(500)
    }
    const created = await changes.stop()
    await allReconciledAndVerified("rotated", 90_000)
    expect((await checksIn("rotated")).length).toBe(created + 1)
    const listed = relists("rotated", t0)
    expect(listed, formatRequests(listed)).toEqual([])
    const refused = requestsTo(m1, { userAgent: hubAgent, code: 401, since: t0 })
    expect(refused, formatRequests(refused)).toEqual([])
    expect(await eventsOf("rotated", "CredentialRotated")).toBe(rotations)
    expect(await eventsOf("rotated", "MemberRebuilt")).toBe(0)
    process.stdout.write(
      `rotation: ${rotations} rotations, ${created} checks created meanwhile, relists ${listed.length}, 401s ${refused.length}\n`,
    )
  }, 300_000)

  it("client certificate rotations (a → b → a → b): the new certificate is used at once, 0 relists, 0 401s, no change missed", async () => {
    /** m1's kubeconfig with the fixture client certificate `name` instead of the admin token. */
    const withCert = (name: "a" | "b") =>
      m1.kubeconfig.replace(
        / {4}token: .*/,
        [
          `    client-certificate-data: ${b64(readFileSync(`${clientCerts}/cert-${name}.crt`, "utf8"))}`,
          `    client-key-data: ${b64(readFileSync(`${clientCerts}/cert-${name}.key`, "utf8"))}`,
        ].join("\n"),
      )
    expect(withCert("a")).not.toContain(m1.adminToken)
    await putSecret("certs", withCert("a"), "certs")
    await waitReady("certs")
    await createCheck("certs", "before")
    await allReconciledAndVerified("certs", 60_000)
    expect(requestsTo(m1, { user: "rotation-cert-a", userAgent: hubAgent }).length).toBeGreaterThan(0)
    const t0 = Date.now()
    const changes = stream("certs", "during", 300)
    const order = ["b", "a", "b"] as const
    for (const name of order) {
      const since = Date.now()
      await putSecret("certs", withCert(name), "certs")
      await waitUntil(
        `the hub uses client certificate ${name}`,
        20_000,
        () => requestsTo(m1, { user: `rotation-cert-${name}`, userAgent: hubAgent, since }).length > 0,
      )
      await sleep(1_000)
    }
    const created = await changes.stop()
    await allReconciledAndVerified("certs", 90_000)
    expect((await checksIn("certs")).length).toBe(created + 1)
    const listed = relists("certs", t0)
    expect(listed, formatRequests(listed)).toEqual([])
    const refused = requestsTo(m1, { userAgent: hubAgent, code: 401, since: t0 })
    expect(refused, formatRequests(refused)).toEqual([])
    expect(await eventsOf("certs", "CredentialRotated")).toBe(order.length)
    expect(await eventsOf("certs", "MemberRebuilt")).toBe(0)
    process.stdout.write(
      `client certificates: ${order.length} rotations, ${created} checks created meanwhile, relists ${listed.length}, 401s ${refused.length}\n`,
    )
  }, 180_000)

  it("a change of the connection (tls-server-name) still rebuilds, and the caches are listed again", async () => {
    const before = await eventsOf("rotated", "MemberRebuilt")
    const t0 = Date.now()
    const token = await tokenFor(`hub-${rotations}`)
    const renamed = withToken(token).replace(/( {4}server: .*)/, "$1\n    tls-server-name: kubernetes")
    expect(renamed).toContain("tls-server-name: kubernetes")
    await putSecret("rotated", renamed, "rotated")
    await waitUntil(
      "MemberRebuilt",
      30_000,
      async () => (await eventsOf("rotated", "MemberRebuilt")) === before + 1,
    )
    await waitUntil("the rebuilt engine listed its caches", 30_000, () => relists("rotated", t0).length >= 2)
    await createCheck("rotated", "after-rebuild")
    await allReconciledAndVerified("rotated", 60_000)
  }, 120_000)

  it("access granted after the member refused the hub: the caches list at once, not after their backoff", async () => {
    // An identity with no RBAC yet (registered before deploy/member's RBAC was applied, or with its
    // binding lost): the probe's LIST is answered 403, and the informers' LISTs fail too and back off
    // (0.8 s, doubling). After their fourth 403 their next try is at least 6.4 s away; the grant comes
    // right then, and the hub must list within a few probes, not when that backoff runs out.
    const late = "late-identities"
    for (const ns of [late, "granted"])
      expect((await m1.api("POST", "/api/v1/namespaces", { metadata: { name: ns } })).status).toBe(201)
    expect(
      (
        await m1.api("POST", `/api/v1/namespaces/${late}/serviceaccounts`, {
          metadata: { name: "hub", namespace: late },
        })
      ).status,
    ).toBe(201)
    const token = await m1.api("POST", `/api/v1/namespaces/${late}/serviceaccounts/hub/token`, {
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenRequest",
      spec: { expirationSeconds: 3600 },
    })
    expect(token.status, JSON.stringify(token.body)).toBe(201)
    await createCheck("granted", "before-grant")
    const t0 = Date.now()
    await putSecret("granted", withToken(token.body.status.token), "granted")
    const checkLists = (since: number, code: number) =>
      relists("granted", since).filter((r) => r.resource === "backupchecks" && r.code === code)
    await waitUntil(
      "four refused LISTs of the hub's check informer",
      60_000,
      () => checkLists(t0, 403).length >= 4,
      50,
    )
    const grantedAt = Date.now()
    expect(
      (
        await m1.api("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
          metadata: { name: "late-hub" },
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "cluster-admin" },
          subjects: [{ kind: "ServiceAccount", name: "hub", namespace: late }],
        })
      ).status,
    ).toBe(201)
    await waitUntil(
      "the hub's check informer listed with the grant",
      30_000,
      () => checkLists(grantedAt, 200).length > 0,
      50,
    )
    const listedAfterMs = checkLists(grantedAt, 200)[0]!.receivedUs / 1000 - grantedAt
    process.stdout.write(`access granted → the check informer listed after ${Math.round(listedAfterMs)} ms\n`)
    // The probe comes every 500 ms here; the informer's own retry was 6.4 s or more away.
    expect(listedAfterMs).toBeLessThan(3_000)
    await allReconciledAndVerified("granted", 60_000)
  }, 120_000)

  it(`${expiries} exec credential expiries (TokenRequest plugin): 0 relists, verification continues`, async () => {
    await createServiceAccount("exec-hub")
    const kubectl = `${fleet.binDir}/kubectl`
    const user = [
      "    exec:",
      "      apiVersion: client.authentication.k8s.io/v1",
      `      command: ${plugin}`,
      "      env:",
      `      - { name: FLEETCHECK_PLUGIN_KUBECTL, value: ${kubectl} }`,
      `      - { name: FLEETCHECK_PLUGIN_KUBECONFIG, value: ${m1.kubeconfigPath} }`,
      `      - { name: FLEETCHECK_PLUGIN_NAMESPACE, value: ${saNamespace} }`,
      "      - { name: FLEETCHECK_PLUGIN_SERVICEACCOUNT, value: exec-hub }",
      '      - { name: FLEETCHECK_PLUGIN_EXPIRES, value: "3" }',
    ].join("\n")
    const kubeconfig = m1.kubeconfig.replace(/ {4}token: .*/, user)
    expect(kubeconfig).toContain("FLEETCHECK_PLUGIN_EXPIRES")
    await putSecret("exec", kubeconfig, "exec")
    await waitReady("exec")
    await createCheck("exec", "before")
    await allReconciledAndVerified("exec", 60_000)
    const t0 = Date.now()
    const minted = () =>
      requestsTo(m1, { resource: "serviceaccounts", verb: "create", since: t0 }).filter(
        (r) => r.subresource === "token" && r.requestURI.includes("/serviceaccounts/exec-hub/"),
      ).length
    const changes = stream("exec", "during", 300)
    await waitUntil(
      `${expiries} tokens minted by the plugin`,
      30_000 + expiries * 6_000,
      () => minted() >= expiries,
    )
    const created = await changes.stop()
    await allReconciledAndVerified("exec", 90_000)
    expect((await checksIn("exec")).length).toBe(created + 1)
    const listed = relists("exec", t0)
    expect(listed, formatRequests(listed)).toEqual([])
    expect(await eventsOf("exec", "MemberRebuilt")).toBe(0)
    const refused = requestsTo(m1, { userAgent: hubAgent, code: 401, since: t0 })
    expect(refused, formatRequests(refused)).toEqual([])
    process.stdout.write(
      `exec: ${minted()} tokens minted, ${created} checks created meanwhile, relists ${listed.length}, 401s ${refused.length}\n`,
    )
  }, 300_000)

  it("a Cluster API kubeconfig Secret registers a member; the same policy refuses a hostile one", async () => {
    const capiSecret = (cluster: string, kubeconfig: string, namespaces: string) => ({
      apiVersion: "v1",
      kind: "Secret",
      type: "cluster.x-k8s.io/secret",
      metadata: {
        name: `${cluster}-kubeconfig`,
        namespace: hubNamespace,
        labels: { "cluster.x-k8s.io/cluster-name": cluster },
        annotations: { "fleetcheck.io/namespaces": namespaces },
      },
      data: { value: b64(kubeconfig) },
    })
    expect((await m1.api("POST", "/api/v1/namespaces", { metadata: { name: "capi" } })).status).toBe(201)
    const ok = await hubCluster.api("POST", secretsPath, capiSecret("capi-a", m1.kubeconfig, "capi"))
    expect(ok.status, JSON.stringify(ok.body)).toBe(201)
    await waitReady("capi-a-kubeconfig")
    expect((await memberCluster("capi-a-kubeconfig")).status.source).toEqual({
      kind: "ClusterAPISecret",
      name: "capi-a-kubeconfig",
    })
    await createCheck("capi", "nightly")
    await allReconciledAndVerified("capi", 60_000)
    // Plain http is never accepted, whichever source carries the kubeconfig.
    const insecure = m1.kubeconfig.replace(/server: https:/, "server: http:")
    const bad = await hubCluster.api("POST", secretsPath, capiSecret("capi-b", insecure, "capi-b"))
    expect(bad.status, JSON.stringify(bad.body)).toBe(201)
    const refused = await waitUntil("capi-b refused", 30_000, async () => {
      const c = cond(await memberCluster("capi-b-kubeconfig"), "CredentialsValid")
      return c?.status === "False" ? c : undefined
    })
    expect(refused.reason).toBe("PlaintextServerRefused")
    expect(await eventsOf("capi-b-kubeconfig", "PlaintextServerRefused")).toBe(1)
  }, 120_000)

  it("exec plugins that fail, hang or print garbage (kubeconfig or provider file): bounded, reported without their output", async () => {
    const names = Object.keys(brokenPlugins)
    for (const name of names) {
      const user = [
        "    exec:",
        "      apiVersion: client.authentication.k8s.io/v1",
        `      command: ${pluginDir}/${name}.sh`,
      ].join("\n")
      await putSecret(`plugin-${name}`, m1.kubeconfig.replace(/ {4}token: .*/, user), `plugin-${name}`)
      await putProfile(`profile-${name}`, [name], `profile-${name}`)
    }
    for (const member of names.flatMap((n) => [`plugin-${n}`, `profile-${n}`])) {
      const c = await waitUntil(`${member} CredentialsValid=False`, 30_000, async () => {
        const cv = cond(await memberCluster(member), "CredentialsValid")
        return cv?.status === "False" ? cv : undefined
      })
      expect(c.reason, c.message).toBe("ExecPluginFailed")
      expect(c.message).toContain("exec credential plugin")
      expect(JSON.stringify(await memberCluster(member))).not.toContain("SENTINEL")
      await waitUntil(
        `${member} ExecPluginFailed Event`,
        20_000,
        async () => (await eventsOf(member, "ExecPluginFailed")) > 0,
      )
    }
    for (const member of ["plugin-hangs", "profile-hangs"])
      expect(cond(await memberCluster(member), "CredentialsValid").message).toContain(
        "did not finish within 2000 ms",
      )
    const events = (await hubCluster.api("GET", `/apis/events.k8s.io/v1/namespaces/${hubNamespace}/events`))
      .body
    expect(JSON.stringify(events)).not.toContain("SENTINEL")
  }, 120_000)

  it("a member registered only through a ClusterProfile and the provider file's TokenRequest plugin verifies a check", async () => {
    await createServiceAccount("profile-hub")
    await putProfile("profile-a", ["someone-else", "fleet-token"], "profile")
    await waitReady("profile-a")
    const mc = await memberCluster("profile-a")
    expect(mc.status.source).toEqual({ kind: "ClusterProfile", name: "profile-a" })
    await createCheck("profile", "nightly")
    await allReconciledAndVerified("profile", 60_000)
    // The hub's requests carried the plugin's token (its ServiceAccount), not the admin's.
    expect(
      requestsTo(m1, { user: `system:serviceaccount:${saNamespace}:profile-hub`, userAgent: hubAgent })
        .length,
    ).toBeGreaterThan(0)
    // The hub's finalizer is on the profile while the member is engaged.
    const profile = (await hubCluster.api("GET", `${profilesPath}/profile-a`)).body
    expect(profile.metadata.finalizers).toContain("fleetcheck.io/member-cleanup")
  }, 120_000)

  it("a ClusterProfile naming no provider the hub knows, or without a CA, is refused with a clear condition and Event", async () => {
    await putProfile("profile-unknown", ["someone-else"], "profile-unknown")
    await putProfile("profile-noca", ["fleet-token"], "profile-noca", false)
    for (const [name, reason] of [
      ["profile-unknown", "AccessProviderUnknown"],
      ["profile-noca", "CertificateAuthorityMissing"],
    ] as const) {
      const ready = await waitUntil(`${name} refused`, 30_000, async () => {
        const c = cond(await memberCluster(name), "Ready")
        return c?.reason === reason ? c : undefined
      })
      expect(ready.status).toBe("False")
      expect(ready.message).toContain(`ClusterProfile "${name}"`)
      // One Event per distinct refusal: the hub may first see the profile before its status was
      // written (no providers at all), then with it; never one per reconcile.
      await waitUntil(`${name} ${reason} Event`, 20_000, async () => (await eventsOf(name, reason)) >= 1)
      await sleep(2_000)
      expect(await eventsOf(name, reason)).toBeLessThanOrEqual(2)
    }
  }, 60_000)
})
