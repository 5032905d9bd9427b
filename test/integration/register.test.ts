// `fleetcheck register` / `unregister` against a real hub cluster and a real member: the identity it
// creates is enough for a real hub to verify a BackupCheck and no more; re-running is idempotent;
// namespace scoping yields Role-only RBAC; unregister leaves no identity and no finalizer behind.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import type { KubeConfig } from "@kubernetes/client-node"
import { Effect, Exit, Scope } from "effect"
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest"
import { parse, stringify } from "yaml"
import { type LocalCluster, type LocalFleet, startFleet } from "../../clusters/local-fleet/index.ts"
import { runRegister } from "../../src/cli/register/register.ts"
import { runUnregister } from "../../src/cli/register/unregister.ts"
import { KubeApiError, type KubeRequest, makeKubeClient } from "../../src/kube/client.ts"
import { checkKubeconfig, defaultPolicy } from "../../src/kubeconfig/policy.ts"
import { requestsTo } from "../support/audit.ts"
import { hubNamespace, type RunningHub, startHub } from "../support/hub.ts"
import { waitUntil } from "../support/wait.ts"

const crdDir = new URL("../../deploy/crds/", import.meta.url).pathname
const fleetcheckBin = new URL("../../bin/fleetcheck", import.meta.url).pathname
const profilesPath = `/apis/multicluster.x-k8s.io/v1alpha2/namespaces/fleetcheck-system/clusterprofiles`
const bcPath = (ns: string, name = "") =>
  `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks${name ? `/${name}` : ""}`
const cond = (obj: any, type: string) => (obj?.status?.conditions ?? []).find((c: any) => c.type === type)

const check = (name: string, ns: string, finalizers?: string[]) => ({
  apiVersion: "fleetcheck.io/v1alpha1",
  kind: "BackupCheck",
  metadata: { name, namespace: ns, ...(finalizers ? { finalizers } : {}) },
  spec: {
    backup: { name: `${name}-backup` },
    jobTemplate: { spec: { template: { spec: { containers: [{ name: "restore", image: "restore:1" }] } } } },
  },
})

/** Runs a command function, capturing what it prints. */
const cli = async (fn: (args: string[]) => Promise<number>, args: string[]) => {
  let stdout = ""
  let stderr = ""
  const o = vi.spyOn(process.stdout, "write").mockImplementation((s: any) => {
    stdout += String(s)
    return true
  })
  const e = vi.spyOn(process.stderr, "write").mockImplementation((s: any) => {
    stderr += String(s)
    return true
  })
  try {
    const code = await fn(args)
    return { code, stdout, stderr }
  } finally {
    o.mockRestore()
    e.mockRestore()
  }
}

/** Sends requests as the identity in a kubeconfig; resolves to the HTTP status, never rejects on 4xx. */
const asIdentity = async (kubeConfig: KubeConfig) => {
  const scope = await Effect.runPromise(Scope.make())
  const client = await Effect.runPromise(
    makeKubeClient({ cluster: "as-identity", kubeConfig }).pipe(Scope.provide(scope)),
  )
  const status = (req: KubeRequest) =>
    Effect.runPromise(client.request(req)).then(
      () => 200,
      (e) => {
        if (e instanceof KubeApiError) return e.status
        throw e
      },
    )
  const can = async (
    verb: string,
    resource: string,
    opts: { group?: string; ns?: string; sub?: string } = {},
  ) => {
    const res: any = await Effect.runPromise(
      client.request({
        method: "POST",
        path: "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews",
        body: {
          apiVersion: "authorization.k8s.io/v1",
          kind: "SelfSubjectAccessReview",
          spec: {
            resourceAttributes: {
              verb,
              resource,
              group: opts.group ?? "",
              namespace: opts.ns,
              subresource: opts.sub,
            },
          },
        },
      }),
    )
    return res.status.allowed === true
  }
  return { status, can, close: () => Effect.runPromise(Scope.close(scope, Exit.void)) }
}

describe("fleetcheck register / unregister", () => {
  let fleet: LocalFleet
  let hubCluster: LocalCluster
  let member: LocalCluster
  let hub: RunningHub | undefined
  let dir: string
  let kubeconfigPath: string

  const secret = async (name: string) =>
    (await hubCluster.api("GET", `/api/v1/namespaces/${hubNamespace}/secrets/${name}`)).body
  const secretKubeconfig = (s: any) => Buffer.from(s.data.kubeconfig, "base64").toString("utf8")
  const accepted = (s: any) => {
    const v = checkKubeconfig({
      secretName: s.metadata.name,
      data: s.data,
      annotations: s.metadata.annotations,
      policy: defaultPolicy,
      now: new Date(),
    })
    if (!v.ok) throw new Error(v.message)
    return v
  }
  const statusOf = async (c: LocalCluster, path: string) => (await c.api("GET", path)).status
  const rbac = (kind: string, name = "", ns?: string) =>
    `/apis/rbac.authorization.k8s.io/v1/${ns ? `namespaces/${ns}/` : ""}${kind}${name ? `/${name}` : ""}`
  const saPath = "/api/v1/namespaces/fleetcheck-system/serviceaccounts/fleetcheck-hub-identity"
  const register = (...args: string[]) => cli(runRegister, [...args, "--kubeconfig", kubeconfigPath])
  const unregister = (...args: string[]) => cli(runUnregister, [...args, "--kubeconfig", kubeconfigPath])

  beforeAll(async () => {
    fleet = await startFleet({
      clusters: [
        { name: "hub", workloads: false, controllerManager: false },
        { name: "member", audit: "reads" },
      ],
    })
    hubCluster = fleet.cluster("hub")
    member = fleet.cluster("member")
    const res = await hubCluster.kubectl([
      "apply",
      "--server-side",
      "-f",
      `${crdDir}/fleetcheck.io_memberclusters.yaml`,
    ])
    expect(res.code, res.stderr).toBe(0)
    expect(
      (await hubCluster.api("POST", "/api/v1/namespaces", { metadata: { name: hubNamespace } })).status,
    ).toBe(201)
    for (const ns of ["apps", "other"])
      expect((await member.api("POST", "/api/v1/namespaces", { metadata: { name: ns } })).status).toBe(201)
    await hubCluster.kubectl(["wait", "--for=condition=Established", "crd/memberclusters.fleetcheck.io"])
    // The user's kubeconfig: both clusters, current context the hub.
    const merged: any = { apiVersion: "v1", kind: "Config", clusters: [], users: [], contexts: [] }
    for (const c of [hubCluster, member]) {
      const k = parse(c.kubeconfig)
      merged.clusters.push(...k.clusters)
      merged.users.push(...k.users)
      merged.contexts.push(...k.contexts)
    }
    merged["current-context"] = "hub"
    dir = mkdtempSync(join(tmpdir(), "fleetcheck-register-"))
    kubeconfigPath = join(dir, "kubeconfig")
    writeFileSync(kubeconfigPath, stringify(merged), { mode: 0o600 })
  })

  afterAll(async () => {
    await hub?.stop()
    await fleet?.stop()
    if (dir) rmSync(dir, { recursive: true, force: true })
  })

  it("refuses bad usage before touching anything", async () => {
    expect((await register("member")).code).toBe(2)
    expect((await register("Bad_Name", "--context", "member")).code).toBe(2)
    expect((await register("member", "--context", "nope")).stderr).toContain("not in the kubeconfig")
    expect((await register("member", "--context", "member", "--label", "x")).code).toBe(2)
    expect((await register("member", "--context", "member", "--namespaces", "missing")).stderr).toContain(
      "does not exist in the member",
    )
    expect((await unregister("ghost")).code).toBe(2)
    expect((await register("member", "--context", "member", "--bogus")).code).toBe(2)
    expect(await statusOf(member, saPath)).toBe(404)
  })

  it("registers a member: Secret with labels, a policy-clean kubeconfig, an identity with exactly the rights the hub needs", async () => {
    const r = await register("member", "--context", "member", "--label", "env=test", "--label", "region=eu")
    expect(r.code, r.stderr).toBe(0)
    const s = await secret("member")
    expect(s.metadata.labels).toEqual({ "fleetcheck.io/kubeconfig": "true", env: "test", region: "eu" })
    expect(s.metadata.annotations["fleetcheck.io/namespaces"]).toBeUndefined()
    expect(Object.keys(s.data)).toEqual(["kubeconfig"])
    const text = secretKubeconfig(s)
    const k = parse(text)
    expect(k.contexts.map((c: any) => c.name)).toEqual(["member"])
    expect(Object.keys(k.clusters[0].cluster).sort()).toEqual(["certificate-authority-data", "server"])
    expect(Object.keys(k.users[0].user)).toEqual(["token"])
    expect(k.clusters[0].cluster.server).toBe(parse(member.kubeconfig).clusters[0].cluster.server)
    const v = accepted(s)
    const token: string = k.users[0].user.token
    expect(r.stdout).not.toContain(token)
    expect(r.stdout).toContain("CredentialsExpiringSoon")
    // Default: about a year.
    const days = (v.credentialExpiry!.getTime() - Date.now()) / 86_400_000
    expect(days).toBeGreaterThan(360)
    expect(days).toBeLessThan(370)

    const crb = (await member.api("GET", rbac("clusterrolebindings", "fleetcheck-member"))).body
    expect(crb.subjects).toEqual([
      { kind: "ServiceAccount", name: "fleetcheck-hub-identity", namespace: "fleetcheck-system" },
    ])
    expect(
      await statusOf(
        member,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/backupchecks.fleetcheck.io",
      ),
    ).toBe(200)

    const as = await asIdentity(v.kubeConfig)
    try {
      expect(await as.status({ method: "GET", path: "/apis/fleetcheck.io/v1alpha1/backupchecks" })).toBe(200)
      expect(await as.status({ method: "GET", path: "/api/v1/pods" })).toBe(200)
      expect(await as.status({ method: "GET", path: "/apis/batch/v1/namespaces/apps/jobs" })).toBe(200)
      const job = {
        apiVersion: "batch/v1",
        kind: "Job",
        metadata: { name: "probe" },
        spec: { template: { spec: { restartPolicy: "Never", containers: [{ name: "c", image: "x" }] } } },
      }
      expect(
        await as.status({
          method: "POST",
          path: "/apis/batch/v1/namespaces/apps/jobs",
          query: { dryRun: "All" },
          body: job,
        }),
      ).toBe(200)
      expect(await as.status({ method: "DELETE", path: "/apis/batch/v1/namespaces/apps/jobs/none" })).toBe(
        404,
      )
      expect(await as.can("watch", "backupchecks", { group: "fleetcheck.io" })).toBe(true)
      expect(
        await as.can("patch", "backupchecks", { group: "fleetcheck.io", ns: "apps", sub: "status" }),
      ).toBe(true)
      expect(await as.can("delete", "jobs", { group: "batch", ns: "apps" })).toBe(true)
      // Placement (ADR 0012): the hub creates, replaces and deletes the checks a FleetBackupCheck places.
      for (const verb of ["create", "update", "delete"])
        expect(await as.can(verb, "backupchecks", { group: "fleetcheck.io", ns: "apps" })).toBe(true)
      // And not more.
      expect(await as.status({ method: "GET", path: "/api/v1/namespaces/apps/secrets" })).toBe(403)
      expect(await as.status({ method: "GET", path: "/api/v1/secrets" })).toBe(403)
      // Sandboxes (ADR 0009): list and watch namespaces, create and delete them; create the isolation.
      expect(await as.status({ method: "GET", path: "/api/v1/namespaces" })).toBe(200)
      for (const verb of ["create", "delete", "watch"]) expect(await as.can(verb, "namespaces")).toBe(true)
      expect(await as.can("create", "networkpolicies", { group: "networking.k8s.io", ns: "apps" })).toBe(true)
      expect(await as.can("create", "resourcequotas", { ns: "apps" })).toBe(true)
      expect(await as.can("create", "limitranges", { ns: "apps" })).toBe(true)
      // Velero (spec.restore.velero): list Backups; create, list, delete Restores; list the restored
      // workloads in a sandbox. Nothing more of Velero or of apps.
      expect(await as.can("list", "backups", { group: "velero.io", ns: "velero" })).toBe(true)
      for (const verb of ["create", "list", "delete"])
        expect(await as.can(verb, "restores", { group: "velero.io", ns: "velero" })).toBe(true)
      for (const resource of ["deployments", "statefulsets"])
        expect(await as.can("list", resource, { group: "apps", ns: "apps" })).toBe(true)
      expect(await as.can("create", "backups", { group: "velero.io", ns: "velero" })).toBe(false)
      expect(await as.can("update", "restores", { group: "velero.io", ns: "velero" })).toBe(false)
      expect(await as.can("get", "schedules", { group: "velero.io", ns: "velero" })).toBe(false)
      expect(await as.can("create", "deployments", { group: "apps", ns: "apps" })).toBe(false)
      expect(await as.can("update", "namespaces")).toBe(false)
      expect(await as.can("delete", "networkpolicies", { group: "networking.k8s.io", ns: "apps" })).toBe(
        false,
      )
      expect(await as.can("update", "resourcequotas", { ns: "apps" })).toBe(false)
      expect(await as.status({ method: "GET", path: "/api/v1/namespaces/apps/configmaps" })).toBe(403)
      expect(await as.can("create", "pods", { ns: "apps" })).toBe(false)
      expect(await as.can("create", "serviceaccounts", { ns: "apps", sub: "token" })).toBe(false)
      expect(await as.can("update", "customresourcedefinitions", { group: "apiextensions.k8s.io" })).toBe(
        false,
      )
    } finally {
      await as.close()
    }
  })

  it("a real hub verifies a BackupCheck through the registered identity", async () => {
    hub = await startHub(hubCluster)
    expect((await member.api("POST", bcPath("apps"), check("db-nightly", "apps"))).status).toBe(201)
    await waitUntil("db-nightly Verified=True", 60_000, async () => {
      const o = (await member.api("GET", bcPath("apps", "db-nightly"))).body
      return cond(o, "Verified")?.status === "True"
    })
    const mc = await waitUntil("MemberCluster member Ready", 30_000, async () => {
      const o = (await hubCluster.api("GET", "/apis/fleetcheck.io/v1alpha1/memberclusters/member")).body
      return cond(o, "Ready")?.status === "True" ? o : undefined
    })
    expect(mc.metadata.labels).toEqual({ env: "test", region: "eu" })
    expect(cond(mc, "CredentialsValid")).toMatchObject({ status: "True" })
    const bc = (await member.api("GET", bcPath("apps", "db-nightly"))).body
    expect(bc.metadata.finalizers).toContain("fleetcheck.io/cleanup")
  })

  it("re-running register updates in place", async () => {
    const before = (await member.api("GET", saPath)).body.metadata.uid
    const r = await register("member", "--context", "member", "--label", "env=prod")
    expect(r.code, r.stderr).toBe(0)
    expect(r.stdout).toContain("updated Secret fleetcheck-system/member")
    const s = await secret("member")
    expect(s.metadata.labels).toEqual({ "fleetcheck.io/kubeconfig": "true", env: "prod" })
    accepted(s)
    expect((await member.api("GET", saPath)).body.metadata.uid).toBe(before)
    const bindings = (await member.api("GET", rbac("clusterrolebindings"))).body.items.filter((b: any) =>
      (b.subjects ?? []).some((x: any) => x.name === "fleetcheck-hub-identity"),
    )
    expect(bindings.map((b: any) => b.metadata.name)).toEqual(["fleetcheck-member"])
    // The hub swaps the new token into its running engine and stays green.
    await waitUntil("MemberCluster labels updated and Ready", 30_000, async () => {
      const o = (await hubCluster.api("GET", "/apis/fleetcheck.io/v1alpha1/memberclusters/member")).body
      return o?.metadata?.labels?.env === "prod" && cond(o, "Ready")?.status === "True"
    })
  })

  it("unregister removes the Secret, the MemberCluster, the identity and every finalizer; checks stay and can be deleted", async () => {
    const r = await unregister("member", "--timeout", "30s")
    expect(r.code, r.stderr).toBe(0)
    expect(r.stdout).toContain("MemberCluster member is gone")
    // The hub released its finalizer itself before its MemberCluster went away.
    expect(r.stdout).toContain("no BackupCheck carries fleetcheck.io/cleanup")
    expect(await statusOf(hubCluster, `/api/v1/namespaces/${hubNamespace}/secrets/member`)).toBe(404)
    expect(await statusOf(hubCluster, "/apis/fleetcheck.io/v1alpha1/memberclusters/member")).toBe(404)
    expect(await statusOf(member, saPath)).toBe(404)
    expect(await statusOf(member, rbac("clusterrolebindings", "fleetcheck-member"))).toBe(404)
    expect(await statusOf(member, rbac("clusterroles", "fleetcheck-member"))).toBe(404)
    expect(
      await statusOf(
        member,
        "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/backupchecks.fleetcheck.io",
      ),
    ).toBe(200)
    const bc = (await member.api("GET", bcPath("apps", "db-nightly"))).body
    expect(bc.metadata.finalizers ?? []).not.toContain("fleetcheck.io/cleanup")
    expect((await member.api("DELETE", bcPath("apps", "db-nightly"))).status).toBe(200)
    await waitUntil(
      "db-nightly deleted",
      10_000,
      async () => (await statusOf(member, bcPath("apps", "db-nightly"))) === 404,
    )
    // register created fleetcheck-system, so unregister removes it.
    const ns = await member.api("GET", "/api/v1/namespaces/fleetcheck-system")
    expect(ns.status === 404 || ns.body.metadata.deletionTimestamp !== undefined).toBe(true)
    await hub?.stop()
    hub = undefined
  })

  it("--namespaces scopes the identity with Roles only; unregister without a hub releases finalizers itself", async () => {
    let r = await register("scoped", "--context", "member", "--namespaces", "apps,other")
    expect(r.code, r.stderr).toBe(0)
    r = await register("scoped", "--context", "member", "--namespaces", "apps")
    expect(r.code, r.stderr).toBe(0)
    const s = await secret("scoped")
    expect(s.metadata.annotations["fleetcheck.io/namespaces"]).toBe("apps")
    expect(accepted(s).namespaces).toEqual(["apps"])
    expect(await statusOf(member, rbac("clusterrolebindings", "fleetcheck-member"))).toBe(404)
    expect(await statusOf(member, rbac("clusterroles", "fleetcheck-member"))).toBe(404)
    expect(await statusOf(member, rbac("roles", "fleetcheck-member", "apps"))).toBe(200)
    expect(
      (await member.api("GET", rbac("rolebindings", "fleetcheck-member", "apps"))).body.roleRef,
    ).toMatchObject({
      kind: "Role",
      name: "fleetcheck-member",
    })
    // Dropping "other" from the list took its access away.
    expect(await statusOf(member, rbac("roles", "fleetcheck-member", "other"))).toBe(404)
    expect(await statusOf(member, rbac("rolebindings", "fleetcheck-member", "other"))).toBe(404)
    const as = await asIdentity(accepted(s).kubeConfig)
    try {
      expect(await as.status({ method: "GET", path: bcPath("apps") })).toBe(200)
      expect(await as.status({ method: "GET", path: bcPath("other") })).toBe(403)
      expect(await as.status({ method: "GET", path: "/apis/fleetcheck.io/v1alpha1/backupchecks" })).toBe(403)
      expect(await as.status({ method: "GET", path: "/api/v1/namespaces/apps/secrets" })).toBe(403)
    } finally {
      await as.close()
    }

    // A real hub honours the scope: it verifies checks in "apps" with this Role-only identity and
    // never touches "other" (its RBAC would refuse, and it does not even watch there).
    const scopedHub = await startHub(hubCluster)
    try {
      await waitUntil("MemberCluster scoped Ready", 30_000, async () => {
        const o = (await hubCluster.api("GET", "/apis/fleetcheck.io/v1alpha1/memberclusters/scoped")).body
        return cond(o, "Ready")?.status === "True"
      })
      expect((await member.api("POST", bcPath("apps"), check("in-scope", "apps"))).status).toBe(201)
      expect((await member.api("POST", bcPath("other"), check("out-of-scope", "other"))).status).toBe(201)
      await waitUntil("in-scope Verified=True", 60_000, async () => {
        const o = (await member.api("GET", bcPath("apps", "in-scope"))).body
        return cond(o, "Verified")?.status === "True"
      })
      const outside = (await member.api("GET", bcPath("other", "out-of-scope"))).body
      expect(outside.metadata.finalizers ?? []).not.toContain("fleetcheck.io/cleanup")
      expect(outside.status).toBeUndefined()
      const view = (await (await fetch(`${scopedHub.url}/api/v1/fleet?cluster=scoped`)).json()) as any
      expect(view.checks.map((c: any) => `${c.namespace}/${c.name}`)).toEqual(["apps/in-scope"])
      // Deleted while the hub runs, so only the "stuck" check below is left for unregister.
      expect((await member.api("DELETE", bcPath("apps", "in-scope"))).status).toBe(200)
      await waitUntil(
        "in-scope deleted",
        30_000,
        async () => (await statusOf(member, bcPath("apps", "in-scope"))) === 404,
      )
      expect((await member.api("DELETE", bcPath("other", "out-of-scope"))).status).toBe(200)
    } finally {
      await scopedHub.stop()
    }

    // The identity belongs to "scoped": a second registration of the same member is refused.
    const other = await register("again", "--context", "member")
    expect(other.code).toBe(2)
    expect(other.stderr).toContain("already holds")
    expect(await statusOf(hubCluster, `/api/v1/namespaces/${hubNamespace}/secrets/again`)).toBe(404)

    // A finalizer no hub will ever release (none runs now): unregister must take it off itself.
    expect(
      (await member.api("POST", bcPath("apps"), check("stuck", "apps", ["fleetcheck.io/cleanup"]))).status,
    ).toBe(201)
    r = await unregister("scoped", "--timeout", "2s")
    expect(r.code, r.stderr).toBe(0)
    expect(r.stdout).toContain("removed finalizer fleetcheck.io/cleanup from 1 BackupCheck")
    expect(await statusOf(hubCluster, `/api/v1/namespaces/${hubNamespace}/secrets/scoped`)).toBe(404)
    expect(await statusOf(member, rbac("roles", "fleetcheck-member", "apps"))).toBe(404)
    expect(await statusOf(member, rbac("rolebindings", "fleetcheck-member", "apps"))).toBe(404)
    expect(await statusOf(member, saPath)).toBe(404)
    expect((await member.api("DELETE", bcPath("apps", "stuck"))).status).toBe(200)
    await waitUntil(
      "stuck deleted",
      10_000,
      async () => (await statusOf(member, bcPath("apps", "stuck"))) === 404,
    )
    // Running it again is harmless.
    r = await unregister("scoped", "--context", "member", "--timeout", "1s")
    expect(r.code, r.stderr).toBe(0)
  })

  it("--clusterprofile: a ClusterProfile and its token Secret, read by a real hub through the secret-reader plugin; a profile aiming that token elsewhere gets nothing; unregister removes both", async () => {
    // No ClusterProfile API in the hub yet: refused before the member is touched.
    let r = await register("cp", "--context", "member", "--clusterprofile")
    expect(r.code).toBe(2)
    expect(r.stderr).toContain("serves no ClusterProfile API")
    expect(await statusOf(member, saPath)).toBe(404)

    const crd = await hubCluster.kubectl([
      "apply",
      "--server-side",
      "-f",
      `${crdDir}/multicluster.x-k8s.io_clusterprofiles.yaml`,
    ])
    expect(crd.code, crd.stderr).toBe(0)
    await hubCluster.kubectl([
      "wait",
      "--for=condition=Established",
      "crd/clusterprofiles.multicluster.x-k8s.io",
    ])
    await waitUntil(
      "ClusterProfiles served",
      30_000,
      async () => (await statusOf(hubCluster, profilesPath)) === 200,
    )

    r = await register(
      "cp",
      "--context",
      "member",
      "--clusterprofile",
      "--label",
      "env=cp",
      "--namespaces",
      "apps",
    )
    expect(r.code, r.stderr).toBe(0)
    expect(r.stdout).toContain('"name":"fleetcheck-secret-reader"')
    const memberServer = parse(member.kubeconfig).clusters[0].cluster.server
    const profile = (await hubCluster.api("GET", `${profilesPath}/cp`)).body
    expect(profile.spec.clusterManager).toEqual({ name: "fleetcheck" })
    expect(profile.metadata.labels).toEqual({ env: "cp", "x-k8s.io/cluster-manager": "fleetcheck" })
    expect(profile.metadata.annotations["fleetcheck.io/namespaces"]).toBe("apps")
    expect(profile.status.accessProviders).toHaveLength(1)
    const provider = profile.status.accessProviders[0]
    expect(provider.name).toBe("fleetcheck-secret-reader")
    expect(provider.cluster.server).toBe(memberServer)
    expect(provider.cluster["certificate-authority-data"]).toBeTruthy()
    expect(provider.cluster.extensions).toEqual([
      { name: "client.authentication.k8s.io/exec", extension: { clusterName: "cp" } },
    ])
    // The credential lives in the token Secret only: not a registration, not in the profile.
    const tokenSecret = await secret("cp")
    expect(tokenSecret.metadata.labels).toEqual({ "fleetcheck.io/clusterprofile-credential": "true" })
    expect(tokenSecret.metadata.annotations["fleetcheck.io/server"]).toBe(memberServer)
    expect(Object.keys(tokenSecret.data)).toEqual(["token"])
    const token = Buffer.from(tokenSecret.data.token, "base64").toString("utf8")
    expect(JSON.stringify(profile)).not.toContain(token)
    expect(r.stdout).not.toContain(token)
    // Without --clusterprofile the same NAME is refused: it is registered the other way.
    const mixed = await register("cp", "--context", "member")
    expect(mixed.code).toBe(2)
    expect(mixed.stderr).toContain("registered through ClusterProfile")

    // A profile of someone else's offering the same provider and naming cp's Secret, but pointing at
    // another server (here the hub's own API server): the plugin refuses, so that server never sees
    // cp's token.
    const hubKc = parse(hubCluster.kubeconfig)
    const evil = await hubCluster.api("POST", profilesPath, {
      apiVersion: "multicluster.x-k8s.io/v1alpha2",
      kind: "ClusterProfile",
      metadata: { name: "evil", namespace: hubNamespace },
      spec: { displayName: "evil", clusterManager: { name: "someone" } },
    })
    expect(evil.status, JSON.stringify(evil.body)).toBe(201)
    const evilStatus = await hubCluster.api("PUT", `${profilesPath}/evil/status`, {
      ...evil.body,
      status: {
        accessProviders: [
          {
            ...provider,
            cluster: {
              ...provider.cluster,
              server: hubKc.clusters[0].cluster.server,
              "certificate-authority-data": hubKc.clusters[0].cluster["certificate-authority-data"],
            },
          },
        ],
      },
    })
    expect(evilStatus.status, JSON.stringify(evilStatus.body)).toBe(200)

    const providerFile = join(dir, "providers.json")
    writeFileSync(
      providerFile,
      JSON.stringify({
        providers: [
          {
            name: "fleetcheck-secret-reader",
            execConfig: {
              command: fleetcheckBin,
              args: ["credential", "secret-reader", "--namespace", hubNamespace],
              // The hub's own kubeconfig (current context: the hub), and this checkout's sources.
              env: [
                { name: "KUBECONFIG", value: kubeconfigPath },
                { name: "FLEETCHECK_FROM_SOURCE", value: "1" },
              ],
              provideClusterInfo: true,
            },
          },
        ],
      }),
    )
    const since = new Date()
    const profileHub = await startHub(hubCluster, { clusterprofileProviderFile: providerFile })
    try {
      const mc = await waitUntil("MemberCluster cp Ready", 60_000, async () => {
        const o = (await hubCluster.api("GET", "/apis/fleetcheck.io/v1alpha1/memberclusters/cp")).body
        return cond(o, "Ready")?.status === "True" ? o : undefined
      })
      expect(mc.status.source).toEqual({ kind: "ClusterProfile", name: "cp" })
      expect(mc.metadata.labels).toEqual({ env: "cp", "x-k8s.io/cluster-manager": "fleetcheck" })
      expect(cond(mc, "CredentialsValid")).toMatchObject({ status: "True" })
      // The cluster page says what registered it.
      const page = await (await fetch(`${profileHub.url}/cluster?name=cp`)).text()
      expect(page).toMatch(/Registered by<\/dt><dd>ClusterProfile <span class="full">cp<\/span>/)
      expect((await member.api("POST", bcPath("apps"), check("via-profile", "apps"))).status).toBe(201)
      await waitUntil("via-profile Verified=True", 60_000, async () => {
        const o = (await member.api("GET", bcPath("apps", "via-profile"))).body
        return cond(o, "Verified")?.status === "True"
      })
      // The member's audit log: the hub's requests carried register's identity.
      expect(
        requestsTo(member, {
          user: "system:serviceaccount:fleetcheck-system:fleetcheck-hub-identity",
          userAgent: /^fleetcheck-hub\//,
          since,
        }).length,
      ).toBeGreaterThan(0)
      const refused = await waitUntil("evil refused", 30_000, async () => {
        const o = (await hubCluster.api("GET", "/apis/fleetcheck.io/v1alpha1/memberclusters/evil")).body
        const c = cond(o, "CredentialsValid")
        return c?.status === "False" ? c : undefined
      })
      expect(refused.reason).toBe("ExecPluginFailed")
      expect(refused.message).toContain("exec credential plugin failed")
      expect(refused.message).not.toContain(token)
      expect(
        cond((await hubCluster.api("GET", "/apis/fleetcheck.io/v1alpha1/memberclusters/evil")).body, "Ready")
          ?.status,
      ).not.toBe("True")
      expect((await hubCluster.api("DELETE", `${profilesPath}/evil`)).status).toBe(200)

      r = await unregister("cp", "--timeout", "30s")
      expect(r.code, r.stderr).toBe(0)
      expect(r.stdout).toContain("deleted ClusterProfile fleetcheck-system/cp")
      expect(r.stdout).toContain("MemberCluster cp is gone")
      expect(r.stdout).toContain("deleted Secret fleetcheck-system/cp (the ClusterProfile's token)")
    } finally {
      await profileHub.stop()
    }
    expect(await statusOf(hubCluster, `${profilesPath}/cp`)).toBe(404)
    expect(await statusOf(hubCluster, `/api/v1/namespaces/${hubNamespace}/secrets/cp`)).toBe(404)
    expect(await statusOf(member, saPath)).toBe(404)
    const bc = (await member.api("GET", bcPath("apps", "via-profile"))).body
    expect(bc.metadata.finalizers ?? []).not.toContain("fleetcheck.io/cleanup")
  }, 240_000)
})
