// FleetBackupCheck placement against a real hub and three real members labelled differently:
//   m1 env=prod region=eu · m2 env=prod region=us · m3 env=dev region=eu
// Every claim about what was placed is read from the members' own API servers (the test's admin
// requests, and a recorder of every placed check uid it ever saw), never from the hub's counters.
import { writeFileSync } from "node:fs"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  type LocalCluster,
  type LocalFleet,
  startFleet,
  tokenPluginExecConfig,
} from "../../clusters/local-fleet/index.ts"
import { hubNamespace, type RunningHub, startHub } from "../support/hub.ts"
import { sleep, waitUntil } from "../support/wait.ts"

const crdDir = new URL("../../deploy/crds/", import.meta.url).pathname
const profilesPath = `/apis/multicluster.x-k8s.io/v1alpha2/namespaces/${hubNamespace}/clusterprofiles`
const ns = "apps"
/** Where the drill tests' checks live (its own namespace, so Pod Security there touches only drills). */
const drillNs = "drills"
const group = "/apis/fleetcheck.io/v1alpha1"
const placedLabel = "fleetcheck.io/fleetbackupcheck"

const b64 = (s: string) => Buffer.from(s).toString("base64")
const labelsOf: Record<string, Record<string, string>> = {
  m1: { env: "prod", region: "eu" },
  m2: { env: "prod", region: "us" },
  m3: { env: "dev", region: "eu" },
}

const fleetCheck = (
  name: string,
  clusterSelector: unknown,
  template: { name?: string; namespace?: string; backup?: string; spec?: Record<string, unknown> } = {},
) => ({
  apiVersion: "fleetcheck.io/v1alpha1",
  kind: "FleetBackupCheck",
  metadata: { name, namespace: hubNamespace },
  spec: {
    clusterSelector,
    template: {
      metadata: {
        namespace: template.namespace ?? ns,
        ...(template.name ? { name: template.name } : {}),
        labels: { team: "orders" },
      },
      spec: {
        backup: { name: template.backup ?? `${name}-backup` },
        timeout: "5s",
        jobTemplate: {
          spec: { template: { spec: { containers: [{ name: "restore", image: "restore:1" }] } } },
        },
        ...template.spec,
      },
    },
  },
})

describe("FleetBackupCheck placement: hub + three labelled members", () => {
  let fleet: LocalFleet
  let hubCluster: LocalCluster
  let members: LocalCluster[]
  let hub: RunningHub
  /** Every placed check uid the members' API servers ever listed, per member and FleetBackupCheck. */
  const everPlaced = new Map<string, Set<string>>()
  let recording = true
  let recorder: Promise<void> | undefined

  const member = (name: string) => members.find((m) => m.name === name) as LocalCluster
  const cond = (obj: any, type: string) => (obj?.status?.conditions ?? []).find((c: any) => c.type === type)
  const fbcPath = (name = "") =>
    `${group}/namespaces/${hubNamespace}/fleetbackupchecks${name ? `/${name}` : ""}`
  const getFbc = async (name: string) => (await hubCluster.api("GET", fbcPath(name))).body
  /** The placed checks a member's API server holds for one FleetBackupCheck. */
  const placedIn = async (m: LocalCluster, fbc: string): Promise<any[]> => {
    const selector = encodeURIComponent(`${placedLabel}=${hubNamespace}.${fbc}`)
    const res = await m.api("GET", `${group}/backupchecks?labelSelector=${selector}`)
    expect(res.status, JSON.stringify(res.body)).toBe(200)
    return res.body.items
  }
  const placedMap = async (fbc: string) =>
    Object.fromEntries(
      await Promise.all(
        members.map(async (m) => [m.name, (await placedIn(m, fbc)).map((c) => c.metadata.name)] as const),
      ),
    )
  const fbcWhere = (name: string, what: string, ok: (o: any) => boolean, timeoutMs = 60_000) =>
    waitUntil(`${name}: ${what}`, timeoutMs, async () => {
      const o = await getFbc(name)
      return ok(o) ? o : undefined
    })
  const putSecret = async (name: string, labels: Record<string, string>) => {
    const path = `/api/v1/namespaces/${hubNamespace}/secrets`
    const secret = {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name, namespace: hubNamespace, labels: { "fleetcheck.io/kubeconfig": "true", ...labels } },
      data: { kubeconfig: b64(member(name).kubeconfig) },
    }
    const existing = await hubCluster.api("GET", `${path}/${name}`)
    const res =
      existing.status === 200
        ? await hubCluster.api("PUT", `${path}/${name}`, {
            ...secret,
            metadata: { ...secret.metadata, resourceVersion: existing.body.metadata.resourceVersion },
          })
        : await hubCluster.api("POST", path, secret)
    expect(res.status, JSON.stringify(res.body)).toBeLessThan(300)
  }
  const apply = async (obj: any) => {
    const res = await hubCluster.api("POST", fbcPath(), obj)
    expect(res.status, JSON.stringify(res.body)).toBe(201)
  }
  const deleteFbc = async (name: string) => {
    expect((await hubCluster.api("DELETE", fbcPath(name))).status).toBe(200)
    await waitUntil(`${name} deleted (finalizer released)`, 60_000, async () => {
      return (await hubCluster.api("GET", fbcPath(name))).status === 404
    })
  }

  beforeAll(async () => {
    fleet = await startFleet({
      clusters: [{ name: "hub", workloads: false, controllerManager: false }, "m1", "m2", "m3"],
    })
    hubCluster = fleet.cluster("hub")
    members = ["m1", "m2", "m3"].map((n) => fleet.cluster(n))
    for (const crd of ["memberclusters", "fleetbackupchecks"]) {
      const r = await hubCluster.kubectl([
        "apply",
        "--server-side",
        "-f",
        `${crdDir}/fleetcheck.io_${crd}.yaml`,
      ])
      expect(r.code, r.stderr).toBe(0)
    }
    expect(
      (await hubCluster.api("POST", "/api/v1/namespaces", { metadata: { name: hubNamespace } })).status,
    ).toBe(201)
    for (const m of members) {
      const r = await m.kubectl(["apply", "--server-side", "-f", `${crdDir}/fleetcheck.io_backupchecks.yaml`])
      expect(r.code, r.stderr).toBe(0)
      for (const name of [ns, drillNs])
        expect((await m.api("POST", "/api/v1/namespaces", { metadata: { name } })).status).toBe(201)
    }
    for (const [c, crd] of [
      ...members.map((m) => [m, "backupchecks"] as const),
      [hubCluster, "memberclusters"] as const,
      [hubCluster, "fleetbackupchecks"] as const,
    ])
      await c.kubectl(["wait", "--for=condition=Established", `crd/${crd}.fleetcheck.io`, "--timeout=30s"])
    // ClusterProfiles (one test registers m3 through one): the CRD in the hub, an identity in m3 whose
    // token the provider file's TokenRequest plugin mints.
    const profiles = await hubCluster.kubectl([
      "apply",
      "--server-side",
      "-f",
      `${crdDir}/multicluster.x-k8s.io_clusterprofiles.yaml`,
    ])
    expect(profiles.code, profiles.stderr).toBe(0)
    await hubCluster.kubectl([
      "wait",
      "--for=condition=Established",
      "crd/clusterprofiles.multicluster.x-k8s.io",
      "--timeout=30s",
    ])
    const m3 = member("m3")
    expect(
      (await m3.api("POST", "/api/v1/namespaces", { metadata: { name: "hub-identities" } })).status,
    ).toBe(201)
    expect(
      (
        await m3.api("POST", "/api/v1/namespaces/hub-identities/serviceaccounts", {
          metadata: { name: "profile-hub", namespace: "hub-identities" },
        })
      ).status,
    ).toBe(201)
    expect(
      (
        await m3.api("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
          metadata: { name: "profile-hub" },
          roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "ClusterRole", name: "cluster-admin" },
          subjects: [{ kind: "ServiceAccount", name: "profile-hub", namespace: "hub-identities" }],
        })
      ).status,
    ).toBe(201)
    const providerFile = `${fleet.runDir}/providers.json`
    writeFileSync(
      providerFile,
      JSON.stringify({
        providers: [
          {
            name: "fleet-token",
            execConfig: tokenPluginExecConfig(fleet, m3, "hub-identities", "profile-hub"),
          },
        ],
      }),
    )
    hub = await startHub(hubCluster, { allowExec: true, clusterprofileProviderFile: providerFile })
    for (const m of members) await putSecret(m.name, labelsOf[m.name]!)
    for (const m of members)
      await waitUntil(`MemberCluster ${m.name} Ready`, 60_000, async () => {
        const o = (await hubCluster.api("GET", `${group}/memberclusters/${m.name}`)).body
        return cond(o, "Ready")?.status === "True"
      })
    // The recorder: the members' own view of placed checks, every 250 ms, for the whole file.
    recorder = (async () => {
      while (recording) {
        for (const m of members) {
          const res = await m
            .api("GET", `${group}/backupchecks?labelSelector=${encodeURIComponent(placedLabel)}`)
            .catch(() => undefined)
          for (const c of res?.status === 200 ? res.body.items : []) {
            const key = `${m.name} ${c.metadata.labels[placedLabel]}`
            const uids = everPlaced.get(key) ?? new Set<string>()
            uids.add(c.metadata.uid)
            everPlaced.set(key, uids)
          }
        }
        await sleep(250)
      }
    })()
  })

  afterAll(async () => {
    recording = false
    await recorder
    await hub?.stop()
    await fleet?.stop()
  })

  it("a selector matching two members places exactly two checks; FleetVerified=True; kubectl wait works", async () => {
    await apply(fleetCheck("orders", { matchLabels: { env: "prod" } }))
    const wait = await hubCluster.kubectl([
      "wait",
      "--for=condition=FleetVerified",
      "-n",
      hubNamespace,
      "fleetbackupcheck/orders",
      "--timeout=90s",
    ])
    expect(wait.code, wait.stderr).toBe(0)
    expect(await placedMap("orders")).toEqual({ m1: ["orders"], m2: ["orders"], m3: [] })
    for (const name of ["m1", "m2"]) {
      const [placed] = await placedIn(member(name), "orders")
      expect(placed.metadata.namespace).toBe(ns)
      expect(placed.metadata.labels).toMatchObject({
        team: "orders",
        [placedLabel]: `${hubNamespace}.orders`,
      })
      expect(placed.metadata.annotations["fleetcheck.io/template-hash"]).toMatch(/^[0-9a-f]{16}$/)
      expect(placed.spec.backup.name).toBe("orders-backup")
      // The member's own reconciler verified it and holds its finalizer, as for any BackupCheck.
      expect(cond(placed, "Verified")).toMatchObject({ status: "True", reason: "RestoreSucceeded" })
      expect(placed.metadata.finalizers).toContain("fleetcheck.io/cleanup")
    }
    const fbc = await getFbc("orders")
    expect(fbc.metadata.finalizers).toContain("fleetcheck.io/placement")
    expect(cond(fbc, "Placed")).toMatchObject({ status: "True", observedGeneration: 1 })
    expect(cond(fbc, "FleetVerified")).toMatchObject({ status: "True", reason: "AllVerified" })
    expect(fbc.status.counts).toEqual({ selected: 2, placed: 2, verified: 2, failed: 0, unknown: 0 })
    expect(fbc.status.clusters.map((c: any) => [c.name, c.placement, c.verified])).toEqual([
      ["m1", "Placed", "True"],
      ["m2", "Placed", "True"],
    ])
    expect(fbc.status.clusters[0].lastRun).toMatchObject({ result: "Succeeded", runID: "g1" })
    const table = await hubCluster.kubectl(["get", "fbc", "-n", hubNamespace, "orders"])
    expect(table.stdout).toMatch(/NAME\s+FLEET VERIFIED\s+REASON\s+SELECTED\s+PLACED\s+VERIFIED\s+AGE/)
    expect(table.stdout).toMatch(/orders\s+True\s+AllVerified\s+2\s+2\s+2\s/)
    // The fleet API, the dashboard and the metrics group the placed checks under their FleetBackupCheck.
    const view = (await (await fetch(`${hub.url}/api/v1/fleet`)).json()) as any
    expect(view.fleetChecks).toEqual([
      expect.objectContaining({
        namespace: hubNamespace,
        name: "orders",
        selector: "env=prod",
        check: { namespace: ns, name: "orders" },
        verified: expect.objectContaining({ status: "True", reason: "AllVerified" }),
        counts: { selected: 2, placed: 2, verified: 2, failed: 0, unknown: 0 },
        clusters: [
          expect.objectContaining({ name: "m1", placement: "Placed", status: "True" }),
          expect.objectContaining({ name: "m2", placement: "Placed", status: "True" }),
        ],
      }),
    ])
    expect(
      view.checks
        .filter((c: any) => c.fleetBackupCheck === `${hubNamespace}/orders`)
        .map((c: any) => c.cluster),
    ).toEqual(["m1", "m2"])
    const dashboard = await (await fetch(`${hub.url}/`)).text()
    expect(dashboard).toMatch(/id="fleet-checks"/)
    expect(dashboard).toContain('href="./check?cluster=m2&amp;namespace=apps&amp;name=orders"')
    const metrics = await (await fetch(`${hub.url}/metrics`)).text()
    expect(metrics).toMatch(
      /^fleetcheck_fleetbackupcheck_verified\{namespace="fleetcheck-system",name="orders"\} 1$/m,
    )
    expect(metrics).toMatch(
      /^fleetcheck_fleetbackupcheck_clusters\{namespace="fleetcheck-system",name="orders",status="True"\} 2$/m,
    )
    // Exactly one check per member was ever created for it.
    expect(everPlaced.get(`m1 ${hubNamespace}.orders`)?.size).toBe(1)
    expect(everPlaced.get(`m2 ${hubNamespace}.orders`)?.size).toBe(1)
    expect(everPlaced.has(`m3 ${hubNamespace}.orders`)).toBe(false)
  })

  it("a restore failing in one member: FleetVerified=False naming it; fixed: True again for the new generation", async () => {
    // m2 enforces the restricted Pod Security level in the namespace: its restore pods are refused, the
    // restore Job runs into its deadline (a restore that works in one cluster and not in another).
    const pss = (value: string | null) =>
      member("m2").kubectl([
        "label",
        "--overwrite",
        "namespace",
        ns,
        value === null
          ? "pod-security.kubernetes.io/enforce-"
          : `pod-security.kubernetes.io/enforce=${value}`,
      ])
    expect((await pss("restricted")).code).toBe(0)
    try {
      const patch = await hubCluster.kubectl([
        "patch",
        "-n",
        hubNamespace,
        "fbc/orders",
        "--type=merge",
        "-p",
        JSON.stringify({ spec: { template: { spec: { backup: { name: "orders-backup-2" } } } } }),
      ])
      expect(patch.code, patch.stderr).toBe(0)
      const failing = await fbcWhere(
        "orders",
        "FleetVerified=False",
        (o) => cond(o, "FleetVerified")?.status === "False",
      )
      expect(cond(failing, "FleetVerified")).toMatchObject({ reason: "ChecksFailing", observedGeneration: 2 })
      expect(cond(failing, "FleetVerified").message).toMatch(
        /failing in 1 of 2 selected clusters: m2 \(RestoreTimedOut: /,
      )
      expect(cond(failing, "FleetVerified").message).not.toMatch(/m1/)
      expect(failing.status.clusters.find((c: any) => c.name === "m2")).toMatchObject({
        verified: "False",
        reason: "RestoreTimedOut",
      })
      // Read from m1 and m2 themselves: the template's change reached both placed checks.
      for (const name of ["m1", "m2"]) {
        const [placed] = await placedIn(member(name), "orders")
        expect(placed.spec.backup.name).toBe("orders-backup-2")
      }
    } finally {
      expect((await pss(null)).code).toBe(0)
    }
    await hubCluster.kubectl([
      "patch",
      "-n",
      hubNamespace,
      "fbc/orders",
      "--type=merge",
      "-p",
      JSON.stringify({ spec: { template: { spec: { backup: { name: "orders-backup-3" } } } } }),
    ])
    const wait = await hubCluster.kubectl([
      "wait",
      "--for=condition=FleetVerified",
      "-n",
      hubNamespace,
      "fbc/orders",
      "--timeout=90s",
    ])
    expect(wait.code, wait.stderr).toBe(0)
    expect(cond(await getFbc("orders"), "FleetVerified")).toMatchObject({
      status: "True",
      observedGeneration: 3,
    })
  })

  it("relabelling members adds and removes their placed checks (finalizer released, Jobs cleaned)", async () => {
    await putSecret("m3", { env: "prod", region: "eu" })
    await waitUntil(
      "m3 gains the placed check",
      60_000,
      async () => (await placedIn(member("m3"), "orders")).length === 1,
    )
    await fbcWhere("orders", "3 verified", (o) => o.status?.counts?.verified === 3)
    const [m1Check] = await placedIn(member("m1"), "orders")
    await putSecret("m1", { env: "dev", region: "eu" })
    await waitUntil(
      "m1 loses the placed check",
      60_000,
      async () => (await placedIn(member("m1"), "orders")).length === 0,
    )
    // Gone for good: the member's reconciler removed its restore Jobs and released fleetcheck.io/cleanup.
    expect((await member("m1").api("GET", `${group}/namespaces/${ns}/backupchecks/orders`)).status).toBe(404)
    const jobs = await member("m1").api(
      "GET",
      `/apis/batch/v1/namespaces/${ns}/jobs?labelSelector=${encodeURIComponent("fleetcheck.io/backupcheck=orders")}`,
    )
    expect(
      jobs.body.items.filter((j: any) =>
        j.metadata.ownerReferences?.some((r: any) => r.uid === m1Check.metadata.uid),
      ),
    ).toEqual([])
    const after = await fbcWhere(
      "orders",
      "m1 no longer listed",
      (o) => o.status?.clusters?.every((c: any) => c.name !== "m1") && o.status.counts.selected === 2,
    )
    expect(after.status.clusters.map((c: any) => c.name)).toEqual(["m2", "m3"])
    expect(await placedMap("orders")).toEqual({ m1: [], m2: ["orders"], m3: ["orders"] })
    await putSecret("m1", labelsOf.m1!)
    await putSecret("m3", labelsOf.m3!)
    await waitUntil("placement back on m1, m2", 60_000, async () => {
      const p = await placedMap("orders")
      return p.m1?.length === 1 && p.m2?.length === 1 && p.m3?.length === 0
    })
    await fbcWhere("orders", "verified again", (o) => cond(o, "FleetVerified")?.status === "True")
  })

  it("a hand-written check with the placed name is left alone, the conflict shown in status and an Event", async () => {
    const handmade = await member("m1").api("POST", `${group}/namespaces/${ns}/backupchecks`, {
      apiVersion: "fleetcheck.io/v1alpha1",
      kind: "BackupCheck",
      metadata: { name: "shared-name", namespace: ns },
      spec: {
        backup: { name: "by-hand" },
        jobTemplate: {
          spec: { template: { spec: { containers: [{ name: "restore", image: "restore:1" }] } } },
        },
      },
    })
    expect(handmade.status).toBe(201)
    await apply(fleetCheck("eu", { matchLabels: { region: "eu" } }, { name: "shared-name" }))
    const fbc = await fbcWhere("eu", "Placed=False", (o) => cond(o, "Placed")?.status === "False")
    expect(cond(fbc, "Placed")).toMatchObject({ reason: "PlacementFailed" })
    expect(cond(fbc, "Placed").message).toMatch(
      /not placed in 1 of 2 selected clusters: m1 \(NameConflict: .*written by hand/,
    )
    await fbcWhere("eu", "FleetVerified=False, m3 verified", (o) => o.status?.counts?.verified === 1)
    expect(cond(await getFbc("eu"), "FleetVerified")).toMatchObject({
      status: "False",
      reason: "PlacementFailed",
    })
    const kept = (await member("m1").api("GET", `${group}/namespaces/${ns}/backupchecks/shared-name`)).body
    expect(kept.metadata.uid).toBe(handmade.body.metadata.uid)
    expect(kept.spec.backup.name).toBe("by-hand")
    expect(kept.metadata.labels?.[placedLabel]).toBeUndefined()
    expect((await placedIn(member("m3"), "eu")).map((c) => c.metadata.name)).toEqual(["shared-name"])
    const events = await waitUntil("a PlacementConflict Event", 20_000, async () => {
      const list = (await hubCluster.api("GET", `/apis/events.k8s.io/v1/namespaces/${hubNamespace}/events`))
        .body
      const found = list.items.filter(
        (e: any) =>
          e.reason === "PlacementConflict" &&
          e.regarding?.name === "eu" &&
          e.regarding?.kind === "FleetBackupCheck",
      )
      return found.length > 0 ? found : undefined
    })
    expect(events[0].note).toMatch(/^m1: BackupCheck apps\/shared-name exists/)
    // Deleting the FleetBackupCheck removes what it placed (m3) and nothing else (m1's own check).
    await deleteFbc("eu")
    expect(await placedIn(member("m3"), "eu")).toEqual([])
    const still = (await member("m1").api("GET", `${group}/namespaces/${ns}/backupchecks/shared-name`)).body
    expect(still.metadata.uid).toBe(handmade.body.metadata.uid)
    expect(still.metadata.deletionTimestamp).toBeUndefined()
  })

  it("bad input gets a clear condition: a selector matching nothing, bad selector syntax, a template a member refuses", async () => {
    await apply(fleetCheck("nowhere", { matchLabels: { env: "staging" } }))
    const nowhere = await fbcWhere(
      "nowhere",
      "NoClustersSelected",
      (o) => cond(o, "Placed")?.reason === "NoClustersSelected",
    )
    expect(cond(nowhere, "FleetVerified")).toMatchObject({ status: "False", reason: "NoClustersSelected" })
    expect(cond(nowhere, "FleetVerified").message).toMatch(/env=staging/)

    await apply(fleetCheck("bad-selector", { matchLabels: { "not a key!": "x" } }))
    const bad = await fbcWhere(
      "bad-selector",
      "InvalidSelector",
      (o) => cond(o, "Placed")?.reason === "InvalidSelector",
    )
    expect(cond(bad, "Placed").message).toMatch(/clusterSelector\.matchLabels.*not a key!/)
    expect(cond(bad, "FleetVerified")).toMatchObject({ status: "False", reason: "InvalidSelector" })

    // m3 runs an older BackupCheck CRD without concurrencyPolicy: it refuses the field (strict), it is not pruned.
    const old = await member("m3").kubectl([
      "patch",
      "crd/backupchecks.fleetcheck.io",
      "--type=json",
      "-p",
      JSON.stringify([
        {
          op: "remove",
          path: "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/concurrencyPolicy",
        },
      ]),
    ])
    expect(old.code, old.stderr).toBe(0)
    await sleep(1_000)
    await apply(
      fleetCheck("skew", { matchLabels: { region: "eu" } }, { spec: { concurrencyPolicy: "Replace" } }),
    )
    const skew = await fbcWhere("skew", "refused in m3", (o) =>
      o.status?.clusters?.some((c: any) => c.name === "m3" && c.placement === "Refused"),
    )
    expect(cond(skew, "Placed")).toMatchObject({ status: "False", reason: "PlacementFailed" })
    expect(cond(skew, "Placed").message).toMatch(
      /not placed in 1 of 2 selected clusters: m3 \(PlacementRefused: /,
    )
    expect(skew.status.clusters.find((c: any) => c.name === "m3").message).toMatch(
      /refused BackupCheck apps\/skew: 400 BadRequest: .*unknown field "spec.concurrencyPolicy"/,
    )
    expect(await placedIn(member("m3"), "skew")).toEqual([])
    await fbcWhere("skew", "m1 placed", (o) =>
      o.status?.clusters?.some((c: any) => c.name === "m1" && c.placement === "Placed"),
    )
    for (const name of ["nowhere", "bad-selector", "skew"]) await deleteFbc(name)
    expect(await placedMap("skew")).toEqual({ m1: [], m2: [], m3: [] })
    const r = await member("m3").kubectl([
      "apply",
      "--server-side",
      "--force-conflicts",
      "-f",
      `${crdDir}/fleetcheck.io_backupchecks.yaml`,
    ])
    expect(r.code, r.stderr).toBe(0)
  })

  // Cross-cluster drills (spec.drill): m1's backup restored in m2. Every claim is read from m1's and m2's
  // own API servers (the drill check, its Job's env, the annotation on m1's check) and from the hub's
  // FleetBackupCheck object; the fleet API, dashboard and metrics are checked to agree.
  const drillCheck = (name: string, drill: unknown, backup = `${name}-backup`) => {
    const fbc = fleetCheck(
      name,
      { matchLabels: { env: "prod", region: "eu" } },
      { namespace: drillNs, backup },
    )
    return {
      ...fbc,
      spec: {
        ...fbc.spec,
        template: {
          ...fbc.spec.template,
          spec: { ...fbc.spec.template.spec, backup: { name: backup, source: `s3://backups/m1/${backup}` } },
        },
        drill,
      },
    }
  }
  const drillChecksIn = async (m: LocalCluster, fbc: string) =>
    (await placedIn(m, fbc)).filter((c) => c.metadata.labels["fleetcheck.io/drill-source"] !== undefined)
  const drillsOnSource = async (fbc: string) => {
    const check = (await member("m1").api("GET", `${group}/namespaces/${drillNs}/backupchecks/${fbc}`)).body
    const raw = check.metadata?.annotations?.["fleetcheck.io/drills"]
    return raw === undefined ? undefined : (JSON.parse(raw) as any[])
  }
  const patchBackup = async (fbc: string, backup: string) => {
    const r = await hubCluster.kubectl([
      "patch",
      "-n",
      hubNamespace,
      `fbc/${fbc}`,
      "--type=merge",
      "-p",
      JSON.stringify({ spec: { template: { spec: { backup: { name: backup } } } } }),
    ])
    expect(r.code, r.stderr).toBe(0)
  }

  it("a drill restores m1's backup reference in m2: the verdict on both sides, in the FleetBackupCheck and every view", async () => {
    const started = Date.now()
    await apply(drillCheck("xdr", { targetClusters: ["m2"], period: "1h" }))
    const wait = await hubCluster.kubectl([
      "wait",
      "--for=condition=FleetVerified",
      "-n",
      hubNamespace,
      "fbc/xdr",
      "--timeout=90s",
    ])
    expect(wait.code, wait.stderr).toBe(0)
    // Target side, from m2's API server: one drill check, m1's backup reference, its own verdict.
    const [drill, ...more] = await drillChecksIn(member("m2"), "xdr")
    expect(more).toEqual([])
    expect(drill.metadata.name).toMatch(/^xdr-drill-m1-r\d+$/)
    expect(drill.metadata.namespace).toBe(drillNs)
    expect(drill.metadata.labels["fleetcheck.io/drill-source"]).toBe("m1")
    expect(drill.spec.backup).toEqual({
      name: "xdr-backup",
      source: "s3://backups/m1/xdr-backup",
      cluster: "m1",
    })
    expect(cond(drill, "Verified")).toMatchObject({ status: "True", reason: "RestoreSucceeded" })
    // m2's restore Job received m1's backup and the source cluster's name, as any restore Job receives its backup.
    const jobs = await member("m2").api(
      "GET",
      `/apis/batch/v1/namespaces/${drillNs}/jobs?labelSelector=${encodeURIComponent(`fleetcheck.io/backupcheck=${drill.metadata.name}`)}`,
    )
    expect(jobs.body.items.length).toBeGreaterThan(0)
    const env = Object.fromEntries(
      jobs.body.items[0].spec.template.spec.containers[0].env.map((e: any) => [e.name, e.value]),
    )
    expect(env).toMatchObject({
      FLEETCHECK_BACKUP_NAME: "xdr-backup",
      FLEETCHECK_BACKUP_SOURCE: "s3://backups/m1/xdr-backup",
      FLEETCHECK_BACKUP_CLUSTER: "m1",
      FLEETCHECK_CLUSTER: "m2",
    })
    // Only m1 is a source (the selector), only m2 a target: nothing else anywhere.
    expect(await placedMap("xdr")).toEqual({ m1: ["xdr"], m2: [drill.metadata.name], m3: [] })
    // Source side, from m1's API server: the latest drill verdict per target on m1's placed check.
    const onSource = await waitUntil("m1's check records the drill", 30_000, async () => {
      const d = await drillsOnSource("xdr")
      return d?.[0]?.verified === "True" ? d : undefined
    })
    expect(onSource).toEqual([
      expect.objectContaining({
        target: "m2",
        state: "Current",
        verified: "True",
        reason: "RestoreSucceeded",
      }),
    ])
    // The FleetBackupCheck: the pair, the direction, when, the result.
    const fbc = await getFbc("xdr")
    expect(cond(fbc, "FleetVerified")).toMatchObject({ status: "True", reason: "AllVerified" })
    expect(cond(fbc, "FleetVerified").message).toMatch(/drills verified: m1 → m2/)
    expect(fbc.status.drills).toEqual([
      expect.objectContaining({
        source: "m1",
        target: "m2",
        state: "Current",
        check: drill.metadata.name,
        verified: "True",
        reason: "RestoreSucceeded",
      }),
    ])
    expect(Date.parse(fbc.status.drills[0].lastSuccessfulTime)).toBeGreaterThanOrEqual(
      Math.floor(started / 1000) * 1000,
    )
    // The fleet API, the dashboard and the metrics show the drill by source and target.
    const view = (await (await fetch(`${hub.url}/api/v1/fleet`)).json()) as any
    expect(view.fleetChecks.find((f: any) => f.name === "xdr").drills).toEqual([
      expect.objectContaining({ source: "m1", target: "m2", state: "Current", status: "True" }),
    ])
    expect(view.checks.find((c: any) => c.cluster === "m2" && c.name === drill.metadata.name)).toMatchObject({
      drillSource: "m1",
      fleetBackupCheck: `${hubNamespace}/xdr`,
      status: "True",
    })
    const dashboard = await (await fetch(`${hub.url}/`)).text()
    expect(dashboard).toMatch(/m1 → m2/)
    const metrics = await (await fetch(`${hub.url}/metrics`)).text()
    expect(metrics).toMatch(
      /^fleetcheck_fleetbackupcheck_drill_verified\{namespace="fleetcheck-system",name="xdr",source="m1",target="m2"\} 1$/m,
    )
  })

  it("a drill failing in its target: FleetVerified=False naming the pair, on both sides; fixed: True again", async () => {
    const pss = (value: string | null) =>
      member("m2").kubectl([
        "label",
        "--overwrite",
        "namespace",
        drillNs,
        value === null
          ? "pod-security.kubernetes.io/enforce-"
          : `pod-security.kubernetes.io/enforce=${value}`,
      ])
    expect((await pss("restricted")).code).toBe(0)
    let sawTrue = false
    try {
      await patchBackup("xdr", "xdr-backup-2")
      const failing = await fbcWhere("xdr", "FleetVerified=False", (o) => {
        if (cond(o, "FleetVerified")?.status === "True" && o.status?.observedGeneration === 2) sawTrue = true
        return cond(o, "FleetVerified")?.status === "False" ? o : undefined
      })
      expect(cond(failing, "FleetVerified")).toMatchObject({ reason: "DrillFailing", observedGeneration: 2 })
      expect(cond(failing, "FleetVerified").message).toMatch(/drills failing: m1 → m2 \(RestoreTimedOut/)
      expect(failing.status.drills[0]).toMatchObject({ source: "m1", target: "m2", verified: "False" })
      // m1's own restore passed: it is the drill, not the source, that failed.
      expect(failing.status.clusters).toEqual([expect.objectContaining({ name: "m1", verified: "True" })])
      const [drill] = await drillChecksIn(member("m2"), "xdr")
      expect(drill.spec.backup).toMatchObject({ name: "xdr-backup-2", cluster: "m1" })
      expect(cond(drill, "Verified")).toMatchObject({ status: "False", reason: "RestoreTimedOut" })
      const onSource = await waitUntil("m1's check records the failed drill", 30_000, async () => {
        const d = await drillsOnSource("xdr")
        return d?.[0]?.verified === "False" ? d : undefined
      })
      expect(onSource[0]).toMatchObject({ target: "m2", reason: "RestoreTimedOut" })
      const view = (await (await fetch(`${hub.url}/api/v1/fleet`)).json()) as any
      const xdr = view.fleetChecks.find((f: any) => f.name === "xdr")
      expect(xdr.verified.status).toBe("False")
      expect(xdr.drills[0]).toMatchObject({ source: "m1", target: "m2", status: "False" })
      const metrics = await (await fetch(`${hub.url}/metrics`)).text()
      expect(metrics).toMatch(
        /^fleetcheck_fleetbackupcheck_drill_verified\{[^}]*name="xdr",source="m1",target="m2"\} 0$/m,
      )
      for (let i = 0; i < 4; i++) {
        if (cond(await getFbc("xdr"), "FleetVerified")?.status === "True") sawTrue = true
        await sleep(250)
      }
    } finally {
      expect((await pss(null)).code).toBe(0)
    }
    expect(sawTrue).toBe(false)
    await patchBackup("xdr", "xdr-backup-3")
    await fbcWhere(
      "xdr",
      "True for generation 3",
      (o) => cond(o, "FleetVerified")?.status === "True" && cond(o, "FleetVerified").observedGeneration === 3,
      90_000,
    )
    expect((await getFbc("xdr")).status.drills[0]).toMatchObject({ verified: "True" })
    await deleteFbc("xdr")
    expect(await placedMap("xdr")).toEqual({ m1: [], m2: [], m3: [] })
  })

  it("bad drill input gets a clear condition or error: the only target is the source, no target, a target that is no member, a bad period", async () => {
    await apply(drillCheck("xdr-self", { targetClusters: ["m1"], period: "1h" }))
    const self = await fbcWhere(
      "xdr-self",
      "DrillTargetIsSource",
      (o) => cond(o, "FleetVerified")?.status === "False",
    )
    expect(cond(self, "FleetVerified")).toMatchObject({ reason: "DrillTargetIsSource" })
    expect(cond(self, "FleetVerified").message).toMatch(/leaves only m1 itself as the drill target of m1/)
    await apply(drillCheck("xdr-none", { targetSelector: { matchLabels: { region: "mars" } }, period: "1h" }))
    const none = await fbcWhere(
      "xdr-none",
      "NoDrillTargets",
      (o) => cond(o, "FleetVerified")?.status === "False",
    )
    expect(cond(none, "FleetVerified")).toMatchObject({ reason: "NoDrillTargets" })
    expect(cond(none, "FleetVerified").message).toMatch(
      /targetSelector \(region=mars\) matches no MemberCluster/,
    )
    // Nothing was placed as a drill anywhere for either.
    for (const m of members)
      for (const name of ["xdr-self", "xdr-none"]) expect(await drillChecksIn(m, name)).toEqual([])
    // A named target that is no member: said on Placed and in an Event; the named member is drilled.
    await apply(drillCheck("xdr-ghost", { targetClusters: ["m2", "ghost"], period: "1h" }))
    const ghost = await fbcWhere(
      "xdr-ghost",
      "DrillTargetNotFound",
      (o) => cond(o, "Placed")?.reason === "DrillTargetNotFound",
    )
    expect(cond(ghost, "Placed")).toMatchObject({ status: "False" })
    expect(cond(ghost, "Placed").message).toMatch(
      /targetClusters names a cluster with no MemberCluster \(ghost\)/,
    )
    await waitUntil("a DrillTargetNotFound Event", 20_000, async () => {
      const list = (await hubCluster.api("GET", `/apis/events.k8s.io/v1/namespaces/${hubNamespace}/events`))
        .body
      return list.items.some(
        (e: any) =>
          e.reason === "DrillTargetNotFound" && e.regarding?.name === "xdr-ghost" && /ghost/.test(e.note),
      )
    })
    await waitUntil(
      "m1's drill placed in m2",
      20_000,
      async () => (await drillChecksIn(member("m2"), "xdr-ghost")).length === 1,
    )
    // The API server refuses a bad period and an ambiguous target, naming the field.
    for (const [drill, message] of [
      [{ targetClusters: ["m2"], period: "1s" }, /spec\.drill\.period.*between 1m and 8784h/],
      [{ targetClusters: ["m2"], period: "soon" }, /spec\.drill\.period/],
      [
        { targetClusters: ["m2"], targetSelector: {}, period: "1h" },
        /set exactly one of targetClusters and targetSelector/,
      ],
    ] as const) {
      const res = await hubCluster.api("POST", fbcPath(), drillCheck("xdr-bad", drill))
      expect(res.status, JSON.stringify(res.body)).toBe(422)
      expect(res.body.message).toMatch(message)
    }
    for (const name of ["xdr-self", "xdr-none", "xdr-ghost"]) await deleteFbc(name)
  })

  it("a member registered through a ClusterProfile shows its properties; a propertySelector places the check there only", async () => {
    const m3 = member("m3")
    const mcPath = `${group}/memberclusters`
    // m3 leaves its Secret registration (nothing is placed there now) and comes back through a profile.
    expect((await hubCluster.api("DELETE", `/api/v1/namespaces/${hubNamespace}/secrets/m3`)).status).toBe(200)
    await waitUntil(
      "m3 disengaged",
      60_000,
      async () => (await hubCluster.api("GET", `${mcPath}/m3`)).status === 404,
    )
    const profileStatus = (storageClass: string) => ({
      accessProviders: [
        { name: "fleet-token", cluster: { server: m3.server, "certificate-authority-data": b64(m3.caPem) } },
      ],
      properties: [
        { name: "storage.example.com/class", value: storageClass },
        { name: "kubernetes.io/version", value: "1.35" },
      ],
    })
    const created = await hubCluster.api("POST", profilesPath, {
      apiVersion: "multicluster.x-k8s.io/v1alpha2",
      kind: "ClusterProfile",
      metadata: { name: "m3p", namespace: hubNamespace, labels: labelsOf.m3 },
      spec: { displayName: "m3p", clusterManager: { name: "test-manager" } },
    })
    expect(created.status, JSON.stringify(created.body)).toBe(201)
    const putStatus = async (storageClass: string) => {
      const current = (await hubCluster.api("GET", `${profilesPath}/m3p`)).body
      const res = await hubCluster.api("PUT", `${profilesPath}/m3p/status`, {
        ...current,
        status: profileStatus(storageClass),
      })
      expect(res.status, JSON.stringify(res.body)).toBe(200)
    }
    try {
      await putStatus("fast")
      // Read from the hub's API server: the MemberCluster carries the profile's labels and properties.
      const mc = await waitUntil("MemberCluster m3p Ready with properties", 90_000, async () => {
        const o = (await hubCluster.api("GET", `${mcPath}/m3p`)).body
        return cond(o, "Ready")?.status === "True" && o.status?.properties ? o : undefined
      })
      expect(mc.status.source).toEqual({ kind: "ClusterProfile", name: "m3p" })
      expect(mc.metadata.labels).toMatchObject(labelsOf.m3!)
      expect(mc.status.properties).toEqual([
        { name: "kubernetes.io/version", value: "1.35" },
        { name: "storage.example.com/class", value: "fast" },
      ])
      await apply({
        ...fleetCheck("fast-storage", {}),
        spec: {
          ...fleetCheck("fast-storage", {}).spec,
          propertySelector: {
            matchExpressions: [{ key: "storage.example.com/class", operator: "In", values: ["fast"] }],
          },
        },
      })
      await fbcWhere("fast-storage", "FleetVerified=True", (o) => cond(o, "FleetVerified")?.status === "True")
      // Read from the members: only m3 (registered as m3p, the one member with the property) holds it.
      expect(await placedMap("fast-storage")).toEqual({ m1: [], m2: [], m3: ["fast-storage"] })
      expect((await getFbc("fast-storage")).status.clusters.map((c: any) => c.name)).toEqual(["m3p"])
      // The property changes on the profile: m3 stops matching and loses the check.
      await putStatus("slow")
      await waitUntil(
        "m3 loses the check",
        60_000,
        async () => (await placedIn(m3, "fast-storage")).length === 0,
      )
      const none = await fbcWhere(
        "fast-storage",
        "NoClustersSelected",
        (o) => cond(o, "Placed")?.reason === "NoClustersSelected",
      )
      expect(cond(none, "FleetVerified").status).toBe("False")
      await deleteFbc("fast-storage")
    } finally {
      // m3 back to its Secret registration for the tests that follow.
      await hubCluster.api("DELETE", `${profilesPath}/m3p`)
      await waitUntil(
        "m3p gone",
        60_000,
        async () => (await hubCluster.api("GET", `${mcPath}/m3p`)).status === 404,
      )
      await putSecret("m3", labelsOf.m3!)
      await waitUntil("m3 Ready again", 60_000, async () => {
        const o = (await hubCluster.api("GET", `${mcPath}/m3`)).body
        return cond(o, "Ready")?.status === "True"
      })
    }
  })

  it("a member unreachable: FleetVerified=Unknown naming it, never True; back: True", async () => {
    const victim = member("m2")
    let sawTrueWhileDown = false
    // A drill into m2, deleted while m2 is down: its finalizer waits until m2's drill check is removed.
    await apply(drillCheck("xdr-down", { targetClusters: ["m2"], period: "1h" }))
    await fbcWhere("xdr-down", "drill verified", (o) => cond(o, "FleetVerified")?.status === "True")
    expect(await drillChecksIn(victim, "xdr-down")).toHaveLength(1)
    await victim.stopApiServer()
    try {
      const down = await fbcWhere(
        "orders",
        "FleetVerified=Unknown",
        (o) => cond(o, "FleetVerified")?.status === "Unknown",
      )
      expect(cond(down, "FleetVerified")).toMatchObject({ reason: "ClusterUnreachable" })
      expect(cond(down, "FleetVerified").message).toMatch(/m2/)
      // Every view agrees: the fleet API and the metrics say Unknown, never green.
      const view = (await (await fetch(`${hub.url}/api/v1/fleet`)).json()) as any
      const orders = view.fleetChecks.find((f: any) => f.name === "orders")
      expect(orders.verified.status).toBe("Unknown")
      expect(orders.clusters.find((c: any) => c.name === "m2")).toMatchObject({ status: "Unknown" })
      const metrics = await (await fetch(`${hub.url}/metrics`)).text()
      expect(metrics).toMatch(
        /^fleetcheck_fleetbackupcheck_verified\{namespace="fleetcheck-system",name="orders"\} -1$/m,
      )
      expect(down.status.clusters.find((c: any) => c.name === "m2")).toMatchObject({
        verified: "Unknown",
        reason: "ClusterUnreachable",
      })
      for (let i = 0; i < 6; i++) {
        if (cond(await getFbc("orders"), "FleetVerified")?.status === "True") sawTrueWhileDown = true
        await sleep(250)
      }
      expect((await hubCluster.api("DELETE", fbcPath("xdr-down"))).status).toBe(200)
      const deleting = await fbcWhere("xdr-down", "Deleting, waiting for m2", (o) =>
        o.status?.clusters?.some((c: any) => c.name === "m2" && c.placement === "Removing"),
      )
      expect(cond(deleting, "Placed")).toMatchObject({ status: "False", reason: "Deleting" })
      expect(cond(deleting, "Placed").message).toMatch(/m2/)
      await sleep(1_000)
      expect((await hubCluster.api("GET", fbcPath("xdr-down"))).status).toBe(200)
    } finally {
      await victim.startApiServer()
    }
    await waitUntil("xdr-down gone once m2 is back", 60_000, async () => {
      return (await hubCluster.api("GET", fbcPath("xdr-down"))).status === 404
    })
    expect(await drillChecksIn(victim, "xdr-down")).toEqual([])
    expect(sawTrueWhileDown).toBe(false)
    await fbcWhere("orders", "FleetVerified=True again", (o) => cond(o, "FleetVerified")?.status === "True")
    expect(everPlaced.get(`m2 ${hubNamespace}.orders`)?.size).toBe(1)
  })

  it("deleting the FleetBackupCheck removes every placed check, then its finalizer", async () => {
    await deleteFbc("orders")
    expect(await placedMap("orders")).toEqual({ m1: [], m2: [], m3: [] })
    await waitUntil("the fleet API and metrics forget it", 10_000, async () => {
      const view = (await (await fetch(`${hub.url}/api/v1/fleet`)).json()) as any
      const metrics = await (await fetch(`${hub.url}/metrics`)).text()
      return (
        view.fleetChecks.length === 0 &&
        !metrics.includes('fleetbackupcheck_verified{namespace="fleetcheck-system",name="orders"}')
      )
    })
    for (const name of ["m1", "m2"])
      expect((await member(name).api("GET", `${group}/namespaces/${ns}/backupchecks/orders`)).status).toBe(
        404,
      )
  })
})
