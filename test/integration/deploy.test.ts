// deploy/ and the Dockerfile against a real API server. The manifests apply server-side; the hub's and
// the member identity's RBAC is enough for what the hub does and nothing more (raw requests as each
// ServiceAccount, then the real hub running under those tokens); and the Dockerfile's own steps, run
// outside Docker, build an entrypoint that starts, leads and shuts down cleanly. One cluster plays hub
// and member: the two identities are distinct ServiceAccounts, so neither's rights mask the other's.
// Secure serving is proven here too, with deploy/'s RBAC: tokens minted by TokenRequest for
// ServiceAccounts with and without the example roles, against the hub directly and through the API
// server's service proxy (which refuses loopback endpoints, so that hub listens on this machine's
// non-loopback address). The guarded listener serves TLS: a certificate from files, rotated while it
// runs, and `fleetcheck status` verifying it.
import { execFileSync, spawn } from "node:child_process"
import { X509Certificate } from "node:crypto"
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { get as httpGet } from "node:http"
import { request as httpsRequest } from "node:https"
import { homedir, networkInterfaces, tmpdir } from "node:os"
import { dirname, join } from "node:path"
import type { TLSSocket } from "node:tls"
import { KubeConfig } from "@kubernetes/client-node"
import { Logger, References } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { parseAllDocuments } from "yaml"
import {
  apiRequest,
  type LocalCluster,
  type LocalFleet,
  renderKubeconfig,
  startFleet,
} from "../../clusters/local-fleet/index.ts"
import { runStatus } from "../../src/cli/status.ts"
import { maxWaitingReviews, reviewBurst, reviewsPerSecond } from "../../src/hub/access-review.ts"
import { contentSecurityPolicy } from "../../src/hub/http.ts"
import { launchHub } from "../../src/hub/launch.ts"
import { selfSignedServingPair } from "../../src/hub/serving/self-signed.ts"
import { buildStages, collect, parseDockerfile, runToEnd, tryJson } from "../support/dockerfile.ts"
import { fastConfig } from "../support/hub.ts"
import { samplesOf, sumOf } from "../support/prometheus-text.ts"
import { waitUntil } from "../support/wait.ts"

const repo = new URL("../../", import.meta.url).pathname
const ns = "fleetcheck-system"
const group = "/apis/fleetcheck.io/v1alpha1"
const leasePath = `/apis/coordination.k8s.io/v1/namespaces/${ns}/leases`

interface Reply {
  readonly status: number
  readonly body: any
}
type Caller = (method: string, path: string, body?: unknown, contentType?: string) => Promise<Reply>

/** Raw requests as a ServiceAccount: its bearer token and the cluster CA, nothing of the admin's. */
const actAs =
  (cluster: LocalCluster, token: string): Caller =>
  (method, path, body, contentType) =>
    apiRequest(cluster.server, cluster.caPem, token, method, path, body, contentType)

const tokenFor = async (cluster: LocalCluster, serviceAccount: string) => {
  const r = await cluster.api("POST", `/api/v1/namespaces/${ns}/serviceaccounts/${serviceAccount}/token`, {
    apiVersion: "authentication.k8s.io/v1",
    kind: "TokenRequest",
    spec: { expirationSeconds: 3600 },
  })
  if (r.status !== 201)
    throw new Error(`TokenRequest for ${serviceAccount}: ${r.status} ${JSON.stringify(r.body)}`)
  return r.body.status.token as string
}

/** Each call must get `status`; on a mismatch the message names the request and the API's answer. */
const expectAll = async (
  caller: Caller,
  status: number,
  calls: ReadonlyArray<readonly [string, string, unknown?, string?]>,
) => {
  const wrong: string[] = []
  for (const [method, path, body, contentType] of calls) {
    let r = await caller(method, path, body, contentType)
    // 429 is no answer about RBAC: the API server asks to come back (e.g. "storage is (re)initializing"
    // for a moment after a CRD changed). Ask again, a few times.
    for (let tries = 0; r.status === 429 && tries < 20; tries++) {
      await new Promise((resolve) => setTimeout(resolve, 500))
      r = await caller(method, path, body, contentType)
    }
    if (r.status !== status) wrong.push(`${method} ${path} → ${r.status} ${r.body?.message ?? ""}`)
  }
  expect(wrong, `expected ${status} for every call`).toEqual([])
}

const watch = (path: string) => `${path}${path.includes("?") ? "&" : "?"}watch=true&timeoutSeconds=1`

const backupCheck = (name: string, namespace: string) => ({
  apiVersion: "fleetcheck.io/v1alpha1",
  kind: "BackupCheck",
  metadata: { name, namespace },
  spec: {
    backup: { name: `${name}-backup` },
    jobTemplate: { spec: { template: { spec: { containers: [{ name: "restore", image: "restore:1" }] } } } },
  },
})

const job = (name: string, owner?: { name: string; uid: string }) => ({
  apiVersion: "batch/v1",
  kind: "Job",
  metadata: {
    name,
    labels: { "fleetcheck.io/backupcheck": owner?.name ?? name },
    ...(owner
      ? {
          ownerReferences: [
            {
              apiVersion: "fleetcheck.io/v1alpha1",
              kind: "BackupCheck",
              ...owner,
              controller: true,
              blockOwnerDeletion: true,
            },
          ],
        }
      : {}),
  },
  spec: {
    template: { spec: { restartPolicy: "Never", containers: [{ name: "restore", image: "restore:1" }] } },
  },
})

/** This machine's first non-loopback IPv4 address: the API server will not proxy to loopback. */
const nonLoopbackAddress = (): string => {
  for (const addresses of Object.values(networkInterfaces()))
    for (const a of addresses ?? []) if (a.family === "IPv4" && !a.internal) return a.address
  throw new Error(
    "this machine has no non-loopback IPv4 address: the service-proxy test needs one (kube-apiserver refuses to proxy to loopback endpoints)",
  )
}

interface Fetched {
  readonly status: number
  readonly headers: Record<string, string | string[] | undefined>
  readonly text: string
}

/** GET over the API server's TLS with a bearer token; the answer's headers too (the hub's, proxied). */
const getAs = (cluster: LocalCluster, token: string | undefined, path: string): Promise<Fetched> =>
  new Promise((resolve, reject) => {
    const req = httpsRequest(
      new URL(path, cluster.server),
      { ca: cluster.caPem, headers: token ? { authorization: `Bearer ${token}` } : {}, timeout: 10_000 },
      (res) => {
        let text = ""
        res.setEncoding("utf8")
        res.on("data", (c: string) => {
          text += c
        })
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text }))
      },
    )
    req.once("timeout", () => req.destroy(new Error(`GET ${path}: timeout`)))
    req.once("error", reject)
    req.end()
  })

/**
 * GET from a hub serving TLS, on a new connection, trusting `ca` only (or nothing, as the kubelet's
 * probes: `ca` undefined); the answer and the certificate the hub showed.
 */
const getTls = (
  url: string,
  ca: string | undefined,
  token?: string,
): Promise<Fetched & { readonly fingerprint: string }> =>
  new Promise((resolve, reject) => {
    const req = httpsRequest(
      url,
      {
        agent: false,
        ...(ca ? { ca } : { rejectUnauthorized: false }),
        headers: token ? { authorization: `Bearer ${token}` } : {},
        timeout: 10_000,
      },
      (res) => {
        const fingerprint = (res.socket as TLSSocket).getPeerCertificate().fingerprint256
        let text = ""
        res.setEncoding("utf8")
        res.on("data", (c: string) => {
          text += c
        })
        res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text, fingerprint }))
      },
    )
    req.once("timeout", () => req.destroy(new Error(`GET ${url}: timeout`)))
    req.once("error", reject)
    req.end()
  })

/** `fleetcheck status` in this process: its exit code and what it wrote. */
const statusRun = async (args: string[]) => {
  const out: string[] = []
  const err: string[] = []
  const [o, e] = [process.stdout.write, process.stderr.write]
  process.stdout.write = ((s: string) => out.push(String(s)) > 0) as typeof process.stdout.write
  process.stderr.write = ((s: string) => err.push(String(s)) > 0) as typeof process.stderr.write
  try {
    const code = await runStatus(args)
    return { code, out: out.join(""), err: err.join("") }
  } finally {
    process.stdout.write = o
    process.stderr.write = e
  }
}

const fingerprintOf = (pem: string) => new X509Certificate(pem).fingerprint256

const yamlDocs = (file: string) =>
  parseAllDocuments(readFileSync(join(repo, file), "utf8")).map((d) => d.toJS() as any)

describe("deploy/: manifests, RBAC and image", () => {
  let fleet: LocalFleet
  let c: LocalCluster
  let hubToken: string
  let memberToken: string
  const applies: Record<string, { code: number; stdout: string; stderr: string }> = {}
  const cleanups: Array<() => Promise<void>> = []

  beforeAll(async () => {
    fleet = await startFleet({ clusters: [{ name: "hub", workloads: false, controllerManager: true }] })
    c = fleet.cluster("hub")
    for (const dir of ["deploy/hub", "deploy/member"]) {
      applies[dir] = await c.kubectl(["apply", "--server-side", "-k", join(repo, dir)])
      if (applies[dir].code !== 0) throw new Error(`kubectl apply -k ${dir}: ${applies[dir].stderr}`)
    }
    const established = await c.kubectl([
      "wait",
      "--for=condition=Established",
      "--timeout=30s",
      "crd/memberclusters.fleetcheck.io",
      "crd/backupchecks.fleetcheck.io",
      "crd/fleetbackupchecks.fleetcheck.io",
    ])
    if (established.code !== 0) throw new Error(`CRDs not established: ${established.stderr}`)
    for (const name of ["shop", "team-a", "team-b"])
      await c.api("POST", "/api/v1/namespaces", { metadata: { name } })
    hubToken = await tokenFor(c, "fleetcheck-hub")
    memberToken = await tokenFor(c, "fleetcheck-hub-identity")
  })

  afterAll(async () => {
    for (const f of cleanups.reverse()) await f().catch(() => undefined)
    await fleet?.stop()
  })

  it("applies server-side and again without conflict; the hub Pod passes Pod Security 'restricted'", async () => {
    for (const [dir, r] of Object.entries(applies)) {
      expect(r.stderr, `${dir} warnings`).not.toMatch(/warning|PodSecurity/i)
    }
    const again = await c.kubectl(["apply", "--server-side", "-k", join(repo, "deploy/hub")])
    expect(again.code, again.stderr).toBe(0)

    // The namespace enforces "restricted": a Pod from the Deployment's template is admitted (dry run),
    // while a root one is refused, so the admission really looked.
    const deployment = (await c.api("GET", `/apis/apps/v1/namespaces/${ns}/deployments/fleetcheck-hub`)).body
    const pod = (spec: unknown) => ({
      apiVersion: "v1",
      kind: "Pod",
      metadata: { name: "template-check", namespace: ns },
      spec,
    })
    const admitted = await c.api(
      "POST",
      `/api/v1/namespaces/${ns}/pods?dryRun=All`,
      pod(deployment.spec.template.spec),
    )
    expect(admitted.status, JSON.stringify(admitted.body)).toBe(201)
    const rootSpec = { containers: [{ name: "root", image: "x", securityContext: { runAsUser: 0 } }] }
    expect((await c.api("POST", `/api/v1/namespaces/${ns}/pods?dryRun=All`, pod(rootSpec))).status).toBe(403)

    // Each side gets its own CRD only, and the hub reads Secrets through a Role, never a ClusterRole.
    const built = async (dir: string) => {
      const r = await c.kubectl(["kustomize", join(repo, dir)])
      expect(r.code, r.stderr).toBe(0)
      return parseAllDocuments(r.stdout).map((d) => d.toJS() as any)
    }
    const hubObjects = await built("deploy/hub")
    const memberObjects = await built("deploy/member")
    const crds = (objs: any[]) =>
      objs.filter((o) => o.kind === "CustomResourceDefinition").map((o) => o.metadata.name)
    expect(crds(hubObjects)).toEqual(["fleetbackupchecks.fleetcheck.io", "memberclusters.fleetcheck.io"])
    expect(crds(memberObjects)).toEqual(["backupchecks.fleetcheck.io"])
    const grantsSecrets = (o: any) => (o.rules ?? []).some((r: any) => r.resources?.includes("secrets"))
    expect(hubObjects.filter((o) => o.kind === "ClusterRole" && grantsSecrets(o))).toEqual([])
    expect(
      [...hubObjects, ...memberObjects].filter((o) => o.kind === "Role" && grantsSecrets(o)).length,
    ).toBe(1)

    // The namespaced variant grants exactly what the cluster-wide one does, but sandboxes (namespaces
    // and their isolation objects, and Velero's restores into them): a member scoped to namespaces
    // cannot have them (ADR 0009).
    const [clusterRole] = yamlDocs("deploy/member/clusterrole.yaml")
    const [role, binding] = yamlDocs("deploy/member/role.yaml")
    const sandboxOnly = (r: any) =>
      r.resources.every((x: string) =>
        [
          "namespaces",
          "networkpolicies",
          "resourcequotas",
          "limitranges",
          "backups",
          "restores",
          "deployments",
          "statefulsets",
        ].includes(x),
      )
    expect(role.rules).toEqual(clusterRole.rules.filter((r: any) => !sandboxOnly(r)))
    expect(role.metadata.namespace, "role.yaml is applied with -n").toBeUndefined()
    expect(binding.subjects).toEqual([
      { kind: "ServiceAccount", name: "fleetcheck-hub-identity", namespace: ns },
    ])
  })

  it("the hub identity can do everything the hub does in its cluster", async () => {
    const hub = actAs(c, hubToken)
    const secrets = `/api/v1/namespaces/${ns}/secrets?labelSelector=fleetcheck.io%2Fkubeconfig%3Dtrue`
    await expectAll(hub, 200, [
      ["GET", secrets],
      ["GET", watch(secrets)],
      ["GET", "/version"],
    ])

    // A registration Secret (written by an operator): the hub finds it by name when it leaves the label
    // selector, and puts its finalizer and engaged-scopes annotation on it, then takes them off.
    const registration = `/api/v1/namespaces/${ns}/secrets/rbac-registration`
    const written = await c.api("POST", `/api/v1/namespaces/${ns}/secrets`, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "rbac-registration", labels: { "fleetcheck.io/kubeconfig": "true" } },
      data: {},
    })
    expect(written.status, JSON.stringify(written.body)).toBe(201)
    const merge = "application/merge-patch+json"
    await expectAll(hub, 200, [
      ["GET", `/api/v1/namespaces/${ns}/secrets?fieldSelector=metadata.name%3Drbac-registration`],
      [
        "GET",
        `/api/v1/namespaces/${ns}/secrets?labelSelector=fleetcheck.io%2Fkubeconfig%21%3Dtrue&limit=100`,
      ],
      [
        "PATCH",
        registration,
        {
          metadata: {
            resourceVersion: written.body.metadata.resourceVersion,
            finalizers: ["fleetcheck.io/member-cleanup"],
            annotations: { "fleetcheck.io/engaged-scopes": "[]" },
          },
        },
        merge,
      ],
      [
        "PATCH",
        registration,
        { metadata: { finalizers: [], annotations: { "fleetcheck.io/engaged-scopes": null } } },
        merge,
      ],
    ])
    expect((await c.api("DELETE", registration)).status).toBe(200)

    const created = await hub("POST", leasePath, {
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { name: "fleetcheck-hub" },
      spec: { holderIdentity: "rbac-check", leaseDurationSeconds: 1 },
    })
    expect(created.status, JSON.stringify(created.body)).toBe(201)
    const got = await hub("GET", `${leasePath}/fleetcheck-hub`)
    expect(got.status).toBe(200)
    const updated = await hub("PUT", `${leasePath}/fleetcheck-hub`, {
      ...got.body,
      spec: { ...got.body.spec, holderIdentity: "" },
    })
    expect(updated.status, JSON.stringify(updated.body)).toBe(200)
    // The real hub (below) must create its Lease itself.
    await c.api("DELETE", `${leasePath}/fleetcheck-hub`)

    const mc = `${group}/memberclusters/rbac-check`
    const mcCreated = await hub("POST", `${group}/memberclusters`, {
      apiVersion: "fleetcheck.io/v1alpha1",
      kind: "MemberCluster",
      metadata: { name: "rbac-check" },
      spec: {},
    })
    expect(mcCreated.status, JSON.stringify(mcCreated.body)).toBe(201)
    await expectAll(hub, 200, [
      ["GET", mc],
      // The placement informer selects members by their MemberCluster labels.
      ["GET", `${group}/memberclusters`],
      ["GET", watch(`${group}/memberclusters`)],
      ["PATCH", mc, { metadata: { labels: { env: "test" } } }, merge],
      ["PATCH", `${mc}/status`, { status: { kubernetesVersion: "v1.37.2" } }, merge],
      ["DELETE", mc],
    ])

    // Placement: FleetBackupChecks in the hub namespace, their finalizer and status.
    const fbcs = `${group}/namespaces/${ns}/fleetbackupchecks`
    const fbcCreated = await c.api("POST", fbcs, {
      apiVersion: "fleetcheck.io/v1alpha1",
      kind: "FleetBackupCheck",
      metadata: { name: "rbac-check" },
      spec: {
        clusterSelector: {},
        template: { metadata: { namespace: "shop" }, spec: backupCheck("x", "shop").spec },
      },
    })
    expect(fbcCreated.status, JSON.stringify(fbcCreated.body)).toBe(201)
    await expectAll(hub, 200, [
      ["GET", fbcs],
      ["GET", watch(fbcs)],
      ["PATCH", `${fbcs}/rbac-check`, { metadata: { finalizers: ["fleetcheck.io/placement"] } }, merge],
      ["PATCH", `${fbcs}/rbac-check/status`, { status: { observedGeneration: 1 } }, merge],
      ["PATCH", `${fbcs}/rbac-check`, { metadata: { finalizers: null } }, merge],
    ])
    expect((await c.api("DELETE", `${fbcs}/rbac-check`)).status).toBe(200)

    const event = await hub("POST", `/apis/events.k8s.io/v1/namespaces/${ns}/events`, {
      apiVersion: "events.k8s.io/v1",
      kind: "Event",
      metadata: { name: "rbac-check.1", namespace: ns },
      eventTime: new Date().toISOString().replace("Z", "000Z"),
      reportingController: "fleetcheck.io/hub",
      reportingInstance: "rbac-check",
      action: "Register",
      reason: "MemberEngaged",
      type: "Normal",
      note: "rbac check",
      regarding: { apiVersion: "v1", kind: "Secret", namespace: ns, name: "rbac-check" },
    })
    expect(event.status, JSON.stringify(event.body)).toBe(201)
  })

  it("the hub identity can do nothing more: no Secret outside its namespace, no Job, no other Lease", async () => {
    const hub = actAs(c, hubToken)
    const anyObject = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "x" } }
    await expectAll(hub, 403, [
      ["GET", "/api/v1/secrets"],
      ["GET", "/api/v1/namespaces/kube-system/secrets"],
      ["GET", "/api/v1/namespaces/default/secrets"],
      ["GET", watch("/api/v1/namespaces/default/secrets")],
      ["GET", "/api/v1/namespaces/kube-system/secrets/anything"],
      // In its own namespace: read by listing only; written only by a metadata patch (its finalizer).
      ["GET", `/api/v1/namespaces/${ns}/secrets/anything`],
      ["POST", `/api/v1/namespaces/${ns}/secrets`, { ...anyObject, kind: "Secret" }],
      ["PUT", `/api/v1/namespaces/${ns}/secrets/anything`, { ...anyObject, kind: "Secret" }],
      ["DELETE", `/api/v1/namespaces/${ns}/secrets/anything`],
      ["DELETE", `/api/v1/namespaces/${ns}/secrets`],
      ["POST", `/apis/batch/v1/namespaces/${ns}/jobs`, job("x")],
      ["POST", "/apis/batch/v1/namespaces/shop/jobs", job("x")],
      ["POST", `/api/v1/namespaces/${ns}/pods`, { ...anyObject, kind: "Pod" }],
      ["GET", `${leasePath}/some-other-lease`],
      ["PUT", `${leasePath}/some-other-lease`, { ...anyObject, kind: "Lease" }],
      ["DELETE", `${leasePath}/fleetcheck-hub`],
      ["POST", "/apis/coordination.k8s.io/v1/namespaces/default/leases", { ...anyObject, kind: "Lease" }],
      ["POST", "/apis/events.k8s.io/v1/namespaces/default/events", { ...anyObject, kind: "Event" }],
      ["PUT", `${group}/memberclusters/x`, { ...anyObject, kind: "MemberCluster" }],
      ["GET", `${group}/backupchecks`],
      // FleetBackupChecks: in its own namespace only, never created or deleted by the hub.
      ["GET", `${group}/fleetbackupchecks`],
      ["GET", `${group}/namespaces/default/fleetbackupchecks`],
      ["POST", `${group}/namespaces/${ns}/fleetbackupchecks`, { ...anyObject, kind: "FleetBackupCheck" }],
      ["DELETE", `${group}/namespaces/${ns}/fleetbackupchecks/x`],
      ["GET", "/api/v1/namespaces/shop/configmaps"],
      ["POST", "/apis/rbac.authorization.k8s.io/v1/clusterroles", { ...anyObject, kind: "ClusterRole" }],
    ])
  })

  it("the member identity can do everything the hub does in a member, and nothing more", async () => {
    const member = actAs(c, memberToken)
    const created = await c.api("POST", `${group}/namespaces/shop/backupchecks`, backupCheck("rbac", "shop"))
    expect(created.status, JSON.stringify(created.body)).toBe(201)
    const check = `${group}/namespaces/shop/backupchecks/rbac`
    const merge = "application/merge-patch+json"
    const jobs = "/apis/batch/v1/jobs?labelSelector=fleetcheck.io%2Fbackupcheck"
    await expectAll(member, 200, [
      ["GET", `${group}/backupchecks`],
      ["GET", watch(`${group}/backupchecks`)],
      ["PATCH", check, { metadata: { finalizers: ["fleetcheck.io/cleanup"] } }, merge],
      ["PATCH", `${check}/status`, { status: { observedGeneration: 1 } }, merge],
      [
        "PATCH",
        check,
        [
          { op: "test", path: "/metadata/finalizers", value: ["fleetcheck.io/cleanup"] },
          { op: "replace", path: "/metadata/finalizers", value: [] },
        ],
        "application/json-patch+json",
      ],
      ["GET", jobs],
      ["GET", watch(jobs)],
      ["GET", "/api/v1/namespaces/shop/pods?labelSelector=batch.kubernetes.io%2Fjob-name%3Drbac-1"],
      ["GET", "/version"],
      // The cluster's identity (status.clusterID), and no other namespace by name.
      ["GET", "/api/v1/namespaces/kube-system"],
    ])
    // Placement (docs/adr/0012): the hub creates, replaces and deletes the checks a FleetBackupCheck places.
    const placed = `${group}/namespaces/shop/backupchecks/placed`
    const placedCreated = await member(
      "POST",
      `${group}/namespaces/shop/backupchecks`,
      backupCheck("placed", "shop"),
    )
    expect(placedCreated.status, JSON.stringify(placedCreated.body)).toBe(201)
    await expectAll(member, 200, [
      ["PUT", placed, placedCreated.body],
      ["DELETE", placed],
    ])
    const restore = await member(
      "POST",
      "/apis/batch/v1/namespaces/shop/jobs",
      job("rbac-1", { name: "rbac", uid: created.body.metadata.uid }),
    )
    expect(restore.status, JSON.stringify(restore.body)).toBe(201)
    // Reading one Job by name (a name already taken, a run's Job gone) and an Event on the check.
    const one = await member("GET", "/apis/batch/v1/namespaces/shop/jobs/rbac-1")
    expect(one.status, JSON.stringify(one.body)).toBe(200)
    const skipped = await member("POST", "/apis/events.k8s.io/v1/namespaces/shop/events", {
      apiVersion: "events.k8s.io/v1",
      kind: "Event",
      metadata: { name: "rbac.skipped" },
      eventTime: new Date().toISOString().replace(/Z$/, "000Z"),
      reportingController: "fleetcheck.io/hub",
      reportingInstance: "deploy-test",
      action: "Schedule",
      reason: "RunSkipped",
      type: "Warning",
      regarding: {
        apiVersion: "fleetcheck.io/v1alpha1",
        kind: "BackupCheck",
        namespace: "shop",
        name: "rbac",
      },
    })
    expect(skipped.status, JSON.stringify(skipped.body)).toBe(201)
    const deleted = await member("DELETE", "/apis/batch/v1/namespaces/shop/jobs/rbac-1", {
      apiVersion: "v1",
      kind: "DeleteOptions",
      propagationPolicy: "Background",
    })
    expect(deleted.status, JSON.stringify(deleted.body)).toBe(200)
    // No request exercises this one: admission checks it for blockOwnerDeletion where enabled.
    const review = await member("POST", "/apis/authorization.k8s.io/v1/selfsubjectaccessreviews", {
      apiVersion: "authorization.k8s.io/v1",
      kind: "SelfSubjectAccessReview",
      spec: {
        resourceAttributes: {
          group: "fleetcheck.io",
          resource: "backupchecks",
          subresource: "finalizers",
          verb: "update",
          namespace: "shop",
        },
      },
    })
    expect(review.body?.status?.allowed, `${review.status} ${JSON.stringify(review.body)}`).toBe(true)

    const anyObject = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "x" } }
    await expectAll(member, 403, [
      ["GET", "/api/v1/secrets"],
      ["GET", "/api/v1/namespaces/shop/secrets"],
      ["GET", `/api/v1/namespaces/${ns}/secrets`],
      ["GET", "/api/v1/namespaces/shop/secrets/anything"],
      ["PATCH", "/apis/batch/v1/namespaces/shop/jobs/rbac-1", {}, merge],
      ["POST", "/api/v1/namespaces/shop/pods", { ...anyObject, kind: "Pod" }],
      ["GET", "/api/v1/namespaces/shop/pods/anything/log"],
      ["POST", "/apis/batch/v1/namespaces/shop/cronjobs", { ...anyObject, kind: "CronJob" }],
      ["GET", "/api/v1/namespaces/shop/configmaps"],
      ["GET", "/api/v1/namespaces/default"],
      ["GET", `${group}/memberclusters`],
      ["POST", `/apis/coordination.k8s.io/v1/namespaces/${ns}/leases`, { ...anyObject, kind: "Lease" }],
    ])
    await c.api("DELETE", check)
  })

  it("role.yaml scopes a member identity to the namespaces it is applied in", async () => {
    // A second ServiceAccount bound by role.yaml alone: the cluster-wide binding would mask the test.
    await c.api("POST", `/api/v1/namespaces/${ns}/serviceaccounts`, { metadata: { name: "scoped-identity" } })
    const roleYaml = readFileSync(join(repo, "deploy/member/role.yaml"), "utf8").replaceAll(
      "name: fleetcheck-hub-identity",
      "name: scoped-identity",
    )
    const applied = await c.kubectl(["apply", "--server-side", "-n", "team-a", "-f", "-"], roleYaml)
    expect(applied.code, applied.stderr).toBe(0)
    const scoped = actAs(c, await tokenFor(c, "scoped-identity"))
    const created = await c.api(
      "POST",
      `${group}/namespaces/team-a/backupchecks`,
      backupCheck("scoped", "team-a"),
    )
    expect(created.status).toBe(201)
    const check = `${group}/namespaces/team-a/backupchecks/scoped`
    const merge = "application/merge-patch+json"
    await expectAll(scoped, 200, [
      ["GET", `${group}/namespaces/team-a/backupchecks`],
      ["GET", watch(`${group}/namespaces/team-a/backupchecks`)],
      ["PATCH", check, { metadata: { labels: { touched: "yes" } } }, merge],
      ["PATCH", `${check}/status`, { status: { observedGeneration: 1 } }, merge],
      ["GET", "/apis/batch/v1/namespaces/team-a/jobs"],
      ["GET", watch("/apis/batch/v1/namespaces/team-a/jobs")],
      ["GET", "/api/v1/namespaces/team-a/pods"],
    ])
    expect((await scoped("POST", "/apis/batch/v1/namespaces/team-a/jobs", job("scoped-1"))).status).toBe(201)
    expect((await scoped("DELETE", "/apis/batch/v1/namespaces/team-a/jobs/scoped-1")).status).toBe(200)
    await expectAll(scoped, 403, [
      ["GET", `${group}/backupchecks`],
      ["GET", "/apis/batch/v1/jobs"],
      ["GET", `${group}/namespaces/team-b/backupchecks`],
      ["POST", "/apis/batch/v1/namespaces/team-b/jobs", job("scoped-2")],
      ["GET", "/api/v1/namespaces/team-b/pods"],
      ["GET", "/api/v1/namespaces/team-a/secrets"],
    ])
  })

  it("the real hub runs under the hub identity and reconciles a member under the member identity", async () => {
    const logs: string[] = []
    // Message and structured fields alike: errors are logged as annotations.
    const capture = Logger.make((o) => {
      logs.push(
        `${o.logLevel} ${Array.isArray(o.message) ? o.message.map(String).join(" ") : String(o.message)} ${JSON.stringify(o.fiber.getRef(References.CurrentLogAnnotations))}`,
      )
    })
    const kubeConfig = new KubeConfig()
    kubeConfig.loadFromString(renderKubeconfig("hub", c.server, c.caPem, hubToken))
    const secret = {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: "self", namespace: ns, labels: { "fleetcheck.io/kubeconfig": "true", env: "test" } },
      data: {
        kubeconfig: Buffer.from(renderKubeconfig("self", c.server, c.caPem, memberToken)).toString("base64"),
      },
    }
    expect((await c.api("POST", `/api/v1/namespaces/${ns}/secrets`, secret)).status).toBe(201)

    const identity = "deploy-test-hub"
    const hub = await launchHub({
      config: {
        ...fastConfig,
        // The test reads the hub's log lines (every refusal and "became leader"): all of them.
        logLevel: "Info",
        namespace: ns,
        maxConcurrentReconciles: 8,
        leaderElect: true,
        leaseDurationMs: 15_000,
        renewDeadlineMs: 10_000,
        retryPeriodMs: 2_000,
      },
      kubeConfig,
      identity,
      logger: capture,
    })
    cleanups.push(hub.stop)
    const url = hub.url
    const cond = (obj: any, type: string) => (obj?.status?.conditions ?? []).find((x: any) => x.type === type)
    try {
      await waitUntil("the hub to hold the Lease", 20_000, async () => {
        const lease = await c.api("GET", `${leasePath}/fleetcheck-hub`)
        return lease.body?.spec?.holderIdentity === identity
      })
      await waitUntil("MemberCluster self Ready and Connected", 30_000, async () => {
        const mc = (await c.api("GET", `${group}/memberclusters/self`)).body
        return (
          cond(mc, "Ready")?.status === "True" &&
          cond(mc, "Connected")?.status === "True" &&
          mc.metadata.labels.env === "test"
        )
      })
      expect((await fetch(`${url}/readyz`)).status).toBe(200)
      expect(((await (await fetch(`${url}/api/v1/fleet`)).json()) as any).leader).toBe(true)
      // deploy/hub/flowschema.yaml: the API server's priority and fairness put the hub identity's Lease
      // requests in the leader-election level (the API server's own metrics).
      const dispatched = async () => {
        const byLevel = new Map<string, number>()
        const text = String((await c.api("GET", "/metrics")).body)
        for (const { labels, value } of samplesOf(text, "apiserver_flowcontrol_dispatched_requests_total")) {
          const key = `${labels.flow_schema}/${labels.priority_level}`
          byLevel.set(key, (byLevel.get(key) ?? 0) + value)
        }
        return byLevel
      }
      await waitUntil("the hub's Lease requests dispatched by fleetcheck-hub-leases", 20_000, async () =>
        [...(await dispatched())].some(([k, n]) => k === "fleetcheck-hub-leases/leader-election" && n > 0),
      )
      expect(
        [...(await dispatched()).keys()].filter((k) => k.startsWith("fleetcheck-hub-leases/")),
        "the FlowSchema names one level",
      ).toEqual(["fleetcheck-hub-leases/leader-election"])
      const events = (await c.api("GET", `/apis/events.k8s.io/v1/namespaces/${ns}/events`)).body
        .items as any[]
      expect(events.some((e) => e.reason === "MemberEngaged" && e.regarding?.name === "self")).toBe(true)

      // A check's whole life through the member identity: finalizer, restore Job, status, cleanup.
      expect(
        (await c.api("POST", `${group}/namespaces/shop/backupchecks`, backupCheck("nightly", "shop"))).status,
      ).toBe(201)
      const nightly = `${group}/namespaces/shop/backupchecks/nightly`
      await waitUntil("the restore Job and the Verified condition", 30_000, async () => {
        const bc = (await c.api("GET", nightly)).body
        const jobs = await c.api(
          "GET",
          "/apis/batch/v1/namespaces/shop/jobs?labelSelector=fleetcheck.io%2Fbackupcheck%3Dnightly",
        )
        return (
          bc.metadata.finalizers?.includes("fleetcheck.io/cleanup") &&
          jobs.body.items.length === 1 &&
          cond(bc, "Verified")
        )
      })
      await c.api("DELETE", nightly)
      await waitUntil("the check's cleanup", 30_000, async () => (await c.api("GET", nightly)).status === 404)

      // Unregistration: the hub takes its finalizers off the member's checks and deletes the MemberCluster.
      expect(
        (await c.api("POST", `${group}/namespaces/shop/backupchecks`, backupCheck("kept", "shop"))).status,
      ).toBe(201)
      const kept = `${group}/namespaces/shop/backupchecks/kept`
      await waitUntil("the finalizer on kept", 30_000, async () =>
        (await c.api("GET", kept)).body.metadata.finalizers?.includes("fleetcheck.io/cleanup"),
      )
      // The hub holds the registration Secret with its own finalizer until it has let go of the member.
      const selfPath = `/api/v1/namespaces/${ns}/secrets/self`
      expect((await c.api("GET", selfPath)).body.metadata.finalizers).toContain(
        "fleetcheck.io/member-cleanup",
      )
      await c.api("DELETE", selfPath)
      await waitUntil("disengagement", 30_000, async () => {
        const mc = await c.api("GET", `${group}/memberclusters/self`)
        const bc = (await c.api("GET", kept)).body
        const registration = await c.api("GET", selfPath)
        return (
          mc.status === 404 &&
          registration.status === 404 &&
          !(bc.metadata.finalizers ?? []).includes("fleetcheck.io/cleanup")
        )
      })
    } finally {
      await hub.stop()
    }
    const released = await c.api("GET", `${leasePath}/fleetcheck-hub`)
    expect(released.body.spec.holderIdentity, "the lease is released on shutdown").toBe("")
    expect(
      logs.filter((l) => /forbidden|\b403\b/i.test(l)),
      "no request of the hub was refused",
    ).toEqual([])
    expect(logs.some((l) => l.includes("became leader"))).toBe(true)
  })

  it("secure serving: TLS with a rotated certificate, tokens reviewed by the API server; the dashboard through the service proxy by services/proxy RBAC", async () => {
    const address = nonLoopbackAddress()
    // Readers: one per example role in deploy/hub/access-roles.yaml, bound the way docs/deploy/secure-serving.md says,
    // and a stranger with no role. Tokens from TokenRequest, as Prometheus' or a person's would be.
    const readers = ["metrics-scraper", "fleet-reader", "dashboard-viewer", "stranger"]
    for (const name of readers)
      expect(
        (await c.api("POST", `/api/v1/namespaces/${ns}/serviceaccounts`, { metadata: { name } })).status,
      ).toBe(201)
    const bind = async (kind: "ClusterRoleBinding" | "RoleBinding", name: string, role: string) => {
      const path =
        kind === "ClusterRoleBinding"
          ? "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
          : `/apis/rbac.authorization.k8s.io/v1/namespaces/${ns}/rolebindings`
      const r = await c.api("POST", path, {
        metadata: { name: `${name}-${role}` },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: role },
        subjects: [{ kind: "ServiceAccount", name, namespace: ns }],
      })
      expect(r.status, JSON.stringify(r.body)).toBe(201)
    }
    await bind("ClusterRoleBinding", "metrics-scraper", "fleetcheck-metrics-reader")
    await bind("ClusterRoleBinding", "fleet-reader", "fleetcheck-fleet-reader")
    await bind("RoleBinding", "dashboard-viewer", "fleetcheck-dashboard-viewer")
    const token = Object.fromEntries(await Promise.all(readers.map(async (n) => [n, await tokenFor(c, n)])))

    // The hub under its own identity (deploy/'s RBAC), secure serving on, both listeners on `address`,
    // TLS with a certificate from files, as cert-manager would mount them.
    const tlsDir = mkdtempSync(join(tmpdir(), "fleetcheck-serving-"))
    cleanups.push(async () => rmSync(tlsDir, { recursive: true, force: true }))
    const tlsFiles = { cert: join(tlsDir, "tls.crt"), key: join(tlsDir, "tls.key") }
    const writePair = (pair: { cert: string; key: string }) => {
      writeFileSync(tlsFiles.cert, pair.cert)
      writeFileSync(tlsFiles.key, pair.key, { mode: 0o600 })
    }
    const firstPair = selfSignedServingPair([address])
    writePair(firstPair)
    const logs: string[] = []
    const capture = Logger.make((o) => {
      logs.push(
        `${o.logLevel} ${Array.isArray(o.message) ? o.message.map(String).join(" ") : String(o.message)} ${JSON.stringify(o.fiber.getRef(References.CurrentLogAnnotations))}`,
      )
    })
    const kubeConfig = new KubeConfig()
    kubeConfig.loadFromString(renderKubeconfig("hub", c.server, c.caPem, hubToken))
    const hub = await launchHub({
      config: {
        ...fastConfig,
        logLevel: "Info",
        namespace: ns,
        secureServing: true,
        tlsCertFile: tlsFiles.cert,
        tlsPrivateKeyFile: tlsFiles.key,
        httpAddress: { host: address, port: 0 },
        dashboardAddress: { host: address, port: 0 },
      },
      kubeConfig,
      identity: "secure-serving-test",
      logger: capture,
    })
    cleanups.push(hub.stop)
    const dashboardPort = Number(new URL(hub.dashboardUrl!).port)
    const httpsPort = hub.port
    expect(hub.url).toBe(`https://${address}:${httpsPort}`)
    expect(hub.dashboardUrl).toBe(`http://${address}:${dashboardPort}`)
    // The CA clients trust: the serving certificate itself (self-signed), replaced at rotation.
    let trusted = firstPair.cert
    try {
      const get = (path: string, bearer?: string) => getTls(`${hub.url}${path}`, trusted, bearer)
      expect(logs.find((l) => l.includes("hub serving") && l.includes('"scheme":"https"'))).toContain(
        `"certificateSha256":"${fingerprintOf(firstPair.cert)}"`,
      )
      const headersOk = (r: Fetched, what: string) => {
        expect(r.headers["content-security-policy"], what).toBe(contentSecurityPolicy)
        expect(r.headers["x-content-type-options"], what).toBe("nosniff")
        expect(r.headers["referrer-policy"], what).toBe("no-referrer")
      }
      await waitUntil("the secure hub to be ready", 20_000, async () => (await get("/readyz")).status === 200)
      const table: Array<[string, string | undefined, number]> = [
        ["/healthz", undefined, 200],
        ["/readyz", undefined, 200],
        ["/metrics", undefined, 401],
        ["/api/v1/fleet", undefined, 401],
        ["/metrics", "not-a-token", 401],
        ["/api/v1/fleet", "not-a-token", 401],
        ["/metrics", token.stranger, 403],
        ["/api/v1/fleet", token.stranger, 403],
        ["/metrics", token["fleet-reader"], 403],
        ["/api/v1/fleet", token["metrics-scraper"], 403],
        ["/metrics", token["metrics-scraper"], 200],
        ["/api/v1/fleet", token["fleet-reader"], 200],
        // The dashboard on the main listener is behind the token too; no example role grants "/".
        ["/", token["fleet-reader"], 403],
        ["/", undefined, 401],
      ]
      const wrong: string[] = []
      for (const [path, bearer, status] of table) {
        const r = await get(path, bearer)
        headersOk(r, path)
        expect(r.fingerprint, "the certificate from the files").toBe(fingerprintOf(firstPair.cert))
        if (r.status !== status)
          wrong.push(`${path} as ${bearer?.slice(0, 8)} → ${r.status} ${r.text.slice(0, 200)}`)
      }
      expect(wrong).toEqual([])
      expect((await get("/metrics")).headers["www-authenticate"]).toBe('Bearer realm="fleetcheck"')
      // Plain HTTP to the guarded port gets no answer at all: a token sent that way would be in clear.
      const plain = await new Promise<string>((resolve) => {
        const req = httpGet(
          { host: address, port: httpsPort, path: "/metrics", agent: false, timeout: 5_000 },
          (res) => resolve(`answered ${res.statusCode}`),
        )
        req.once("timeout", () => req.destroy(new Error("timeout")))
        req.once("error", (e) => resolve(`refused: ${e.message}`))
      })
      expect(plain).toMatch(/^refused: /)
      // A client that does not trust the certificate does not get to send its token.
      await expect(getTls(`${hub.url}/metrics`, selfSignedServingPair([address]).cert)).rejects.toThrow(
        /self-signed certificate/,
      )
      // Why the fleet API is not reviewed by its URL: the built-in system:discovery role gives every
      // authenticated user `/api/*`, so that review would have let the stranger in.
      const byUrl = await c.api("POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", {
        apiVersion: "authorization.k8s.io/v1",
        kind: "SubjectAccessReview",
        spec: {
          user: `system:serviceaccount:${ns}:stranger`,
          groups: ["system:serviceaccounts", `system:serviceaccounts:${ns}`, "system:authenticated"],
          nonResourceAttributes: { path: "/api/v1/fleet", verb: "get" },
        },
      })
      expect(byUrl.body.status.allowed, JSON.stringify(byUrl.body.status)).toBe(true)
      const denied = JSON.parse((await get("/api/v1/fleet", token.stranger)).text)
      expect(denied).toMatchObject({ kind: "Status", code: 403, reason: "Forbidden" })
      expect(denied.message).toContain(`system:serviceaccount:${ns}:stranger`)
      expect(JSON.parse((await get("/api/v1/fleet", token["fleet-reader"])).text).leader).toBe(true)

      // The Service of deploy/ with this hub's listeners as its endpoints. The API server proxies only to
      // an endpoint whose targetRef is a Pod with that IP, so a Pod from the Deployment's template
      // stands in for the hub (nothing runs it: this cluster has no kubelet) with its IP set in status.
      const deployment = (await c.api("GET", `/apis/apps/v1/namespaces/${ns}/deployments/fleetcheck-hub`))
        .body
      const podName = "fleetcheck-hub-standin"
      const pod = await c.api("POST", `/api/v1/namespaces/${ns}/pods`, {
        apiVersion: "v1",
        kind: "Pod",
        metadata: { name: podName, labels: deployment.spec.template.metadata.labels },
        spec: deployment.spec.template.spec,
      })
      expect(pod.status, JSON.stringify(pod.body)).toBe(201)
      const podStatus = await actAs(c, c.adminToken)(
        "PATCH",
        `/api/v1/namespaces/${ns}/pods/${podName}/status`,
        { status: { phase: "Running", podIP: address, podIPs: [{ ip: address }] } },
        "application/merge-patch+json",
      )
      expect(podStatus.status, JSON.stringify(podStatus.body)).toBe(200)
      const targetRef = { kind: "Pod", name: podName, namespace: ns, uid: pod.body.metadata.uid }
      const endpointPorts = [
        { name: "https", port: httpsPort, protocol: "TCP" },
        { name: "dashboard", port: dashboardPort, protocol: "TCP" },
      ]
      expect(
        (
          await c.api("POST", `/api/v1/namespaces/${ns}/endpoints`, {
            metadata: { name: "fleetcheck-hub" },
            subsets: [{ addresses: [{ ip: address, targetRef }], ports: endpointPorts }],
          })
        ).status,
      ).toBe(201)
      expect(
        (
          await c.api("POST", `/apis/discovery.k8s.io/v1/namespaces/${ns}/endpointslices`, {
            metadata: {
              name: "fleetcheck-hub-test",
              labels: { "kubernetes.io/service-name": "fleetcheck-hub" },
            },
            addressType: "IPv4",
            endpoints: [{ addresses: [address], conditions: { ready: true }, targetRef }],
            ports: endpointPorts,
          })
        ).status,
      ).toBe(201)
      const proxy = `/api/v1/namespaces/${ns}/services/fleetcheck-hub:dashboard/proxy/`
      const viewer = token["dashboard-viewer"]
      const page = await waitUntil("the dashboard through the service proxy", 10_000, async () => {
        const last = await getAs(c, viewer, proxy)
        if (last.status === 200) return last
        throw new Error(`${last.status} ${last.text.slice(0, 300)}`)
      })
      headersOk(page, "proxied overview")
      expect(page.headers["content-type"]).toBe("text/html; charset=utf-8")
      expect(page.text).toContain("<title>")
      // Every link, the filter form and the paging resolve under the proxy's path prefix.
      const links = [...page.text.matchAll(/\b(?:href|action)="([^"]*)"/g)].map((m) =>
        m[1]!.replaceAll("&amp;", "&"),
      )
      expect(links.length).toBeGreaterThan(0)
      for (const link of new Set(links)) {
        const target = new URL(link, new URL(proxy, c.server))
        expect(target.pathname.startsWith(proxy), `${link} stays under the proxy`).toBe(true)
        const followed = await getAs(c, viewer, `${target.pathname}${target.search}`)
        expect(followed.status, `${link} → ${followed.text.slice(0, 200)}`).toBe(200)
      }
      const filtered = await getAs(c, viewer, `${proxy}?cluster=&namespace=&status=False&label=&failing=true`)
      expect(filtered.status, filtered.text.slice(0, 200)).toBe(200)

      // Without services/proxy on that port the API server refuses, before the hub sees anything.
      for (const [who, path] of [
        [token.stranger, proxy],
        [token["fleet-reader"], proxy],
        [undefined, proxy],
        [viewer, `/api/v1/namespaces/${ns}/services/https:fleetcheck-hub:https/proxy/metrics`],
      ] as const) {
        const r = await getAs(c, who, path)
        expect([401, 403], `${path} → ${r.status}`).toContain(r.status)
      }
      // The proxy does not forward the caller's token: even the admin gets the hub's 401 on the https
      // port (the "https:" scheme in the path makes the API server speak TLS to the hub).
      const adminViaProxy = await getAs(
        c,
        c.adminToken,
        `/api/v1/namespaces/${ns}/services/https:fleetcheck-hub:https/proxy/metrics`,
      )
      expect(adminViaProxy.status).toBe(401)
      headersOk(adminViaProxy, "proxied 401")

      // A flood of random tokens: the API server sees at most the burst plus the rate of TokenReviews,
      // the rest waits or is told 429, and a known token's cached verdict still answers meanwhile.
      const tokenReviews = async () => {
        const text = String((await c.api("GET", "/metrics")).body)
        return sumOf(text, "apiserver_request_total", { resource: "tokenreviews" })
      }
      expect((await get("/metrics", token["metrics-scraper"])).status).toBe(200)
      const before = await tokenReviews()
      const t0 = Date.now()
      const flood = 500
      const floodAnswers = Promise.all(
        Array.from({ length: flood }, (_, i) => get("/metrics", `random-${i}-${Math.random()}`)),
      )
      const scrapeDuringFlood = await get("/metrics", token["metrics-scraper"])
      const answers = await floodAnswers
      const elapsed = (Date.now() - t0) / 1000
      const reviews = (await tokenReviews()) - before
      const count = (status: number) => answers.filter((a) => a.status === status).length
      process.stderr.write(
        `[secure-serving] flood of ${flood} random tokens in ${elapsed.toFixed(1)} s: ${count(401)}×401, ${count(429)}×429; TokenReviews at the API server ${reviews}\n`,
      )
      expect(scrapeDuringFlood.status).toBe(200)
      expect(count(401) + count(429)).toBe(flood)
      // Every 401 took a review at the API server; the limiter refused the rest.
      expect(count(401)).toBeLessThanOrEqual(reviews)
      expect(count(429)).toBeGreaterThanOrEqual(
        flood - reviewBurst - maxWaitingReviews - Math.ceil(elapsed * reviewsPerSecond),
      )
      expect(reviews).toBeLessThanOrEqual(reviewBurst + Math.ceil(elapsed * reviewsPerSecond) + 1)
      expect(reviews).toBeGreaterThanOrEqual(reviewBurst)

      // `fleetcheck status` as fleet-reader: with the hub's CA it reads the fleet; with another CA it
      // stops before sending the token, and says why.
      const readerKubeconfig = join(tlsDir, "fleet-reader.kubeconfig")
      writeFileSync(readerKubeconfig, renderKubeconfig("hub", c.server, c.caPem, token["fleet-reader"]))
      const caFile = join(tlsDir, "hub-ca.crt")
      writeFileSync(caFile, firstPair.cert)
      const otherCa = join(tlsDir, "other-ca.crt")
      writeFileSync(otherCa, selfSignedServingPair([address]).cert)
      const status = await statusRun([
        "--hub",
        hub.url,
        "--hub-ca-file",
        caFile,
        "--kubeconfig",
        readerKubeconfig,
      ])
      expect(status.code, status.err).not.toBe(3)
      expect(status.out).toMatch(/^CLUSTER\s+READY/)
      const wrongCa = await statusRun([
        "--hub",
        hub.url,
        "--hub-ca-file",
        otherCa,
        "--kubeconfig",
        readerKubeconfig,
      ])
      expect(wrongCa.code).toBe(3)
      expect(wrongCa.err).toMatch(
        /cannot read https:.*: the hub's certificate is not signed by the CA in --hub-ca-file \(DEPTH_ZERO_SELF_SIGNED_CERT/,
      )

      // Rotation: new files, as cert-manager writes them. The listener stays (same port, a connection
      // opened before keeps working), new connections see the new certificate, and the scraper goes on.
      const secondPair = selfSignedServingPair([address])
      const rotatedAt = Date.now()
      writePair(secondPair)
      trusted = secondPair.cert
      const rotated = await waitUntil("a new connection to see the new certificate", 20_000, async () => {
        const r = await get("/metrics", token["metrics-scraper"]).catch(() => undefined)
        return r?.fingerprint === fingerprintOf(secondPair.cert) ? r : undefined
      })
      process.stderr.write(`[secure-serving] rotated certificate served after ${Date.now() - rotatedAt} ms\n`)
      expect(rotated.status).toBe(200)
      headersOk(rotated, "/metrics after rotation")
      expect(hub.port).toBe(httpsPort)
      expect(
        logs.some(
          (l) => l.includes("serving certificate reloaded") && l.includes(fingerprintOf(secondPair.cert)),
        ),
      ).toBe(true)
      const statusAfter = await statusRun([
        "--hub",
        hub.url,
        "--hub-ca-file",
        caFile,
        "--kubeconfig",
        readerKubeconfig,
      ])
      expect(statusAfter.code, "the old CA no longer verifies the hub").toBe(3)
      // A broken rotation (a certificate with another's key) is refused, logged, and the pair stays.
      // (Only log lines after this write count: a rotation's two writes may be seen half done.)
      const logsBefore = logs.length
      writeFileSync(tlsFiles.cert, selfSignedServingPair([address]).cert)
      await waitUntil("the refusal in the log", 20_000, async () =>
        logs
          .slice(logsBefore)
          .some((l) => l.startsWith("Error serving certificate refused") && l.includes("does not belong")),
      )
      const kept = await get("/api/v1/fleet", token["fleet-reader"])
      expect([kept.status, kept.fingerprint]).toEqual([200, fingerprintOf(secondPair.cert)])
    } finally {
      await hub.stop()
    }
  })

  it("deploy/hub-cert-manager: the hub serves the Certificate's Secret for the Service's names", async () => {
    const built = await c.kubectl(["kustomize", join(repo, "deploy/hub-cert-manager")])
    expect(built.code, built.stderr).toBe(0)
    const docs = parseAllDocuments(built.stdout).map((d) => d.toJS() as any)
    const service = docs.find((d) => d.kind === "Service")
    const serving = docs.find((d) => d.kind === "Certificate" && d.metadata.name === "fleetcheck-hub-serving")
    const pod = docs.find((d) => d.kind === "Deployment").spec.template.spec
    const env = Object.fromEntries(pod.containers[0].env.map((e: any) => [e.name, e.value]))
    const mount = pod.containers[0].volumeMounts.find((m: any) => m.name === "serving-cert")
    const volume = pod.volumes.find((v: any) => v.name === "serving-cert")
    expect(service.spec.ports.map((p: any) => p.name)).toEqual(["https", "dashboard"])
    expect(serving.spec.dnsNames).toContain(`${service.metadata.name}.${service.metadata.namespace}.svc`)
    expect(serving.spec.usages).toContain("server auth")
    expect(volume.secret.secretName).toBe(serving.spec.secretName)
    expect(env.FLEETCHECK_SECURE_SERVING).toBe("true")
    expect(env.FLEETCHECK_TLS_CERT_FILE).toBe(`${mount.mountPath}/tls.crt`)
    expect(env.FLEETCHECK_TLS_PRIVATE_KEY_FILE).toBe(`${mount.mountPath}/tls.key`)
    // The key is readable by the hub's group only, and the hub runs in that group.
    expect(volume.secret.defaultMode).toBe(0o440)
    expect(pod.securityContext.fsGroup).toBe(pod.securityContext.runAsGroup)
  })

  it("deploy/hub-sharded: 3 replicas, a PodDisruptionBudget, and every Lease write sharding and placement make", async () => {
    const built = await c.kubectl(["kustomize", join(repo, "deploy/hub-sharded")])
    expect(built.code, built.stderr).toBe(0)
    const docs = parseAllDocuments(built.stdout).map((d) => d.toJS() as any)
    const deployment = docs.find((d) => d.kind === "Deployment")
    const env = Object.fromEntries(
      deployment.spec.template.spec.containers[0].env.map((e: any) => [e.name, e.value]),
    )
    expect(deployment.spec.replicas).toBe(3)
    expect(deployment.spec.strategy.rollingUpdate).toEqual({ maxSurge: 1, maxUnavailable: 0 })
    expect(env.FLEETCHECK_SHARDING).toBe("true")
    expect(env.FLEETCHECK_LEADER_ELECT).toBe("false")
    const pdb = docs.find((d) => d.kind === "PodDisruptionBudget")
    expect(pdb.spec.maxUnavailable).toBe(1)
    for (const [k, v] of Object.entries(pdb.spec.selector.matchLabels))
      expect(deployment.spec.template.metadata.labels[k], `PDB selects the hub Pods by ${k}`).toBe(v)

    // Applied for real over deploy/hub, and again: no conflict, no warning.
    const applied = await c.kubectl(["apply", "--server-side", "-k", join(repo, "deploy/hub-sharded")])
    expect(applied.code, applied.stderr).toBe(0)
    expect(applied.stderr).not.toMatch(/warning|PodSecurity/i)
    cleanups.push(async () => {
      for (const kind of ["rolebinding", "role"])
        await c.kubectl(["-n", ns, "delete", kind, "fleetcheck-hub-sharding", "--ignore-not-found"])
      await c.kubectl(["-n", ns, "delete", "poddisruptionbudget", "fleetcheck-hub", "--ignore-not-found"])
    })
    const again = await c.kubectl(["apply", "--server-side", "-k", join(repo, "deploy/hub-sharded")])
    expect(again.code, again.stderr).toBe(0)
    const live = (await c.api("GET", `/apis/apps/v1/namespaces/${ns}/deployments/fleetcheck-hub`)).body
    expect(live.spec.replicas).toBe(3)
    expect(
      (await c.api("GET", `/apis/policy/v1/namespaces/${ns}/poddisruptionbudgets/fleetcheck-hub`)).status,
    ).toBe(200)

    // The hub identity: a replica's own Lease, a member's, and the placement Lease, each created,
    // listed and watched by label, read, updated (acquire, renew, release) and deleted.
    const hub = actAs(c, hubToken)
    const lease = (name: string, role?: string) => ({
      apiVersion: "coordination.k8s.io/v1",
      kind: "Lease",
      metadata: { name, ...(role ? { labels: { "fleetcheck.io/shard-lease": role } } : {}) },
      spec: { holderIdentity: "hub-a", leaseDurationSeconds: 15 },
    })
    const names = [
      ["fleetcheck-hub-0123456789abcdef", "replica"],
      ["fleetcheck-member-prod-eu-1", "member"],
      ["fleetcheck-placement", undefined],
    ] as const
    await expectAll(
      hub,
      201,
      names.map(([name, role]) => ["POST", leasePath, lease(name, role)] as const),
    )
    const byLabel = `${leasePath}?labelSelector=${encodeURIComponent("fleetcheck.io/shard-lease")}`
    await expectAll(hub, 200, [
      ["GET", byLabel],
      ["GET", watch(byLabel)],
      ...names.map(([name]) => ["GET", `${leasePath}/${name}`] as const),
    ])
    for (const [name] of names) {
      const current = (await hub("GET", `${leasePath}/${name}`)).body
      const released = { ...current, spec: { ...current.spec, holderIdentity: "" } }
      expect((await hub("PUT", `${leasePath}/${name}`, released)).status, name).toBe(200)
      expect((await hub("DELETE", `${leasePath}/${name}`)).status, name).toBe(200)
    }
  })

  it("the Dockerfile's steps, run outside Docker, build an entrypoint that runs the hub", {
    timeout: 300_000,
  }, async () => {
    const dockerfile = parseDockerfile(readFileSync(join(repo, "Dockerfile"), "utf8"))
    const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8"))
    // Pinned bases, and the Node the image ships is the one every test here runs on.
    for (const stage of dockerfile) {
      if (stage.image.startsWith("golang:")) {
        // The Go stage builds etcdutl; the host's Go runs its steps here, so it must be the same Go.
        const go = /^golang:(\d+\.\d+\.\d+)-bookworm(@sha256:[0-9a-f]{64})?$/.exec(stage.image)
        expect(go, `FROM ${stage.image} is pinned to an exact Go version`).not.toBeNull()
        const hostGo = execFileSync("go", ["env", "GOVERSION"], { encoding: "utf8" }).trim()
        expect(`go${go?.[1]}`).toBe(hostGo)
        continue
      }
      const m = /^node:(\d+\.\d+\.\d+)-[a-z]+-slim(@sha256:[0-9a-f]{64})?$/.exec(stage.image)
      expect(m, `FROM ${stage.image} is pinned to an exact node version`).not.toBeNull()
      expect(m?.[1]).toBe(process.versions.node)
      expect(m?.[1]).toBe(pkg.devDependencies.node)
    }
    const work = mkdtempSync(join(tmpdir(), "fleetcheck-image-"))
    cleanups.push(async () => rmSync(work, { recursive: true, force: true }))
    const t0 = Date.now()
    const built = await buildStages(dockerfile, { context: repo, work, npmCache: join(homedir(), ".npm") })
    const buildSeconds = (Date.now() - t0) / 1000
    const final = built.at(-1)!
    for (const b of built) {
      process.stderr.write(
        `[image] stage ${b.name}: ${b.timings
          .filter((t) => t.seconds >= 0.1)
          .map((t) => `${t.step} ${t.seconds.toFixed(1)}s`)
          .join(", ")}\n`,
      )
    }
    process.stderr.write(`[image] build ${buildSeconds.toFixed(1)}s (stages in parallel)\n`)

    // What the Deployment assumes of the image.
    const deployment = yamlDocs("deploy/hub/deployment.yaml")[0]
    const container = deployment.spec.template.spec.containers[0]
    expect(final.user?.split(":")[0]).toBe(String(container.securityContext.runAsUser))
    expect(final.entrypoint).toEqual(["bin/run-node", "--enable-source-maps", "dist/src/cli/main.js"])
    expect(final.cmd).toEqual(container.args)
    const app = final.hostPath(final.workdir)
    expect(existsSync(join(app, "deploy/member/clusterrole.yaml")), "register reads deploy/ at runtime").toBe(
      true,
    )
    for (const dev of ["typescript", "vitest", "node", "@biomejs"]) {
      expect(existsSync(join(app, "node_modules", dev)), `${dev} is not in the runtime stage`).toBe(false)
    }

    // The entrypoint as the image runs it: bin/run-node finds no node in the runtime's node_modules and
    // runs the `node` on the PATH, the image's (this Node, checked above).
    const entry = [join(app, final.entrypoint[0]!), ...final.entrypoint.slice(1)]
    const env = {
      ...final.env,
      PATH: `${dirname(process.execPath)}:/usr/bin:/bin`,
      HOME: final.hostPath("/root"),
    }
    const help = await runToEnd(entry, ["help"], app, env, 30_000)
    expect(help.code, help.stderr).toBe(0)
    expect(help.stdout).toContain("fleetcheck hub [flags]")
    // The restore agent is the same entrypoint, and the etcdutl it drives is the one the Go stage built
    // (the Debian tools are checked installed by the apt step; the restores: restore-agent.test.ts).
    const agent = await runToEnd(entry, ["agent", "--help"], app, env, 30_000)
    expect(agent.code, agent.stderr).toBe(0)
    expect(agent.stdout).toContain("fleetcheck agent restore <restic|postgres|etcd>")
    const etcdutl = await runToEnd(
      [final.hostPath("/usr/local/bin/etcdutl"), "version"],
      [],
      app,
      env,
      30_000,
    )
    expect(etcdutl.code, etcdutl.stderr).toBe(0)
    expect(etcdutl.stdout).toMatch(/etcdutl version: 3\.6\.16/)

    // `hub` under the hub identity: leads, is ready, and on SIGTERM releases the Lease and exits 0
    // within the Pod's terminationGracePeriodSeconds.
    const kubeconfigFile = join(work, "hub.kubeconfig")
    writeFileSync(kubeconfigFile, renderKubeconfig("hub", c.server, c.caPem, hubToken), { mode: 0o600 })
    const child = spawn(entry[0]!, [...entry.slice(1), ...final.cmd], {
      cwd: app,
      env: { ...env, KUBECONFIG: kubeconfigFile, FLEETCHECK_HTTP_ADDRESS: "127.0.0.1:0" },
      stdio: ["ignore", "pipe", "pipe"],
    })
    const output = collect(child)
    cleanups.push(async () => {
      if (child.exitCode === null) child.kill("SIGKILL")
    })
    const serving = await waitUntil("the hub's serving log line", 30_000, async () => {
      for (const line of output.stdout().split("\n")) {
        const entry = tryJson(line)
        const msg = Array.isArray(entry?.message) ? entry.message[0] : entry?.message
        if (msg === "hub serving")
          return {
            url: `${entry.annotations.scheme}://${entry.annotations.address}`,
            identity: String(entry.annotations.identity),
            certificate: entry.annotations.certificate,
            fingerprint: entry.annotations.certificateSha256,
          }
      }
      if (child.exitCode !== null) throw new Error(`hub exited ${child.exitCode}: ${output.stderr()}`)
      return undefined
    })
    await waitUntil("the built hub to hold the Lease", 20_000, async () => {
      const lease = await c.api("GET", `${leasePath}/fleetcheck-hub`)
      return lease.body?.spec?.holderIdentity === serving.identity
    })
    // The probes and port the Deployment uses are the ones the hub serves.
    const address = container.env.find((e: any) => e.name === "FLEETCHECK_HTTP_ADDRESS").value
    expect(address.split(":").at(-1)).toBe(String(container.ports[0].containerPort))
    expect(container.readinessProbe.httpGet.port).toBe(container.ports[0].name)
    // Secure serving is on by default: the hub made a self-signed certificate and serves HTTPS, and
    // the probes ask over HTTPS without verifying it, as the kubelet does.
    expect(serving.url.startsWith("https://")).toBe(true)
    expect(serving.certificate).toBe("self-signed")
    for (const probe of [container.readinessProbe, container.livenessProbe]) {
      expect(probe.httpGet.scheme).toBe("HTTPS")
      // Ready once the registrations are listed, which may be just after the Lease (503 until then).
      let last = { status: 0, text: "" }
      const r = await waitUntil(`${probe.httpGet.path} to answer 200`, 20_000, async () => {
        const got = await getTls(`${serving.url}${probe.httpGet.path}`, undefined)
        last = got
        return got.status === 200 ? got : undefined
      }).catch((e) => {
        throw new Error(`${e.message}; last answer ${last.status}: ${last.text}`)
      })
      expect(r.fingerprint, "the certificate the log line names").toBe(serving.fingerprint)
    }
    const t1 = Date.now()
    child.kill("SIGTERM")
    const code = await new Promise<number | null>((resolve) => {
      if (child.exitCode !== null) resolve(child.exitCode)
      child.once("exit", (c) => resolve(c))
    })
    const stopSeconds = (Date.now() - t1) / 1000
    process.stderr.write(`[image] SIGTERM to exit ${stopSeconds.toFixed(1)}s\n`)
    expect(code, output.stderr()).toBe(0)
    expect(stopSeconds).toBeLessThan(deployment.spec.template.spec.terminationGracePeriodSeconds)
    expect((await c.api("GET", `${leasePath}/fleetcheck-hub`)).body.spec.holderIdentity).toBe("")
    expect(`${output.stdout()}\n${output.stderr()}`).not.toMatch(/forbidden|\b403\b/i)
  })
})
