// Real Velero (issue 33): the server built from the Go module proxy runs as a host process against
// each member's API server (as a user of its own, told apart in the audit logs), its backup storage
// location a bucket on the loopback S3 server. Member A backs up a namespace with a Deployment,
// ConfigMaps and Secrets; member B's server shares A's bucket and prefix (read-only), so A's backups
// appear in B as Velero users migrating clusters see them; member C has no Velero at all. A real hub
// (`bin/fleetcheck hub`) restores them through spec.restore.velero. What happened is read from the
// members (their objects, their API servers' audit logs), never from the hub. One fleet for the file.
import { rmSync, writeFileSync } from "node:fs"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  type AuditEvent,
  applyStorefront,
  backupItemFiles,
  editBackupTarball,
  type HubProcess,
  installFleetcheck,
  type LocalCluster,
  type LocalFleet,
  type S3Server,
  startFleet,
  startHubProcess,
  startS3Server,
  startVelero,
  storefrontNamespace,
  type VeleroBackup,
  type VeleroServer,
} from "../../clusters/local-fleet/index.ts"
import { registrationKubeconfigKey, registrationLabel } from "../../src/api/names.ts"
import { sleep, waitUntil } from "../support/wait.ts"

const app = storefrontNamespace
const bucket = "velero"
const checksNs = "velero-checks"
const hubNs = "fleetcheck-system"
const restoresPath = "/apis/velero.io/v1/namespaces/velero/restores"
const checksPath = `/apis/fleetcheck.io/v1alpha1/namespaces/${checksNs}/backupchecks`
/** A Deployment whose pods stay Pending until the fake node gets this label: a restore kept in flight. */
const gateLabel = "fleetcheck.io/velero-gate"

describe("real Velero in a local fleet", () => {
  let fleet: LocalFleet
  let a: LocalCluster
  let b: LocalCluster
  let c: LocalCluster
  let s3: S3Server
  let veleroA: VeleroServer
  let veleroB: VeleroServer
  let shopBackup: VeleroBackup
  let hub: HubProcess | undefined
  let hubs = 0

  const startHub = async () => {
    hubs++
    hub = await startHubProcess(fleet, {
      name: `hub-${hubs}`,
      kubeconfigPath: fleet.cluster("hub").kubeconfigPath,
      args: ["--probe-interval", "1s", "--running-poll", "2s"],
      env: { FLEETCHECK_LOG_LEVEL: "Info" },
    })
    return hub
  }
  const check = async (m: LocalCluster, name: string, velero: Record<string, unknown>, spec = {}) => {
    const r = await m.api("POST", checksPath, {
      apiVersion: "fleetcheck.io/v1alpha1",
      kind: "BackupCheck",
      metadata: { name, namespace: checksNs },
      spec: {
        backup: { name },
        timeout: "2m",
        restore: { velero },
        sandbox: { validationWindow: "0s" },
        ...spec,
      },
    })
    expect(r.status, JSON.stringify(r.body)).toBe(201)
  }
  const getCheck = async (m: LocalCluster, name: string) => (await m.api("GET", `${checksPath}/${name}`)).body
  const verdict = (m: LocalCluster, name: string, timeoutMs = 150_000) =>
    waitUntil(`${m.name}/${name} decided`, timeoutMs, async () => {
      const obj = await getCheck(m, name)
      const v = (obj?.status?.conditions ?? []).find((x: any) => x.type === "Verified")
      const run = obj?.status?.lastRun
      if (!(run?.result !== undefined && run.result !== "Running" && v && v.status !== "Unknown"))
        return undefined
      console.log(`[velero] ${m.name}/${name} ${run.runID}: ${v.status} ${v.reason}: ${v.message}`)
      return { v, run, obj }
    })
  /** Restore objects in the member's Velero namespace that belong to the check (named `<check>-<run>`). */
  const restoresOf = async (m: LocalCluster, name: string) =>
    ((await m.api("GET", restoresPath)).body?.items ?? []).filter((r: any) =>
      String(r.metadata.name).startsWith(`${name}-`),
    )
  const sandboxes = async (m: LocalCluster) =>
    ((await m.api("GET", "/api/v1/namespaces?labelSelector=fleetcheck.io%2Fsandbox%3Dtrue")).body?.items ??
      []) as any[]
  /** Audit events of one user writing one resource (the API server's record, not the hub's). */
  const writes = (m: LocalCluster, user: string, resource?: string): AuditEvent[] =>
    m
      .auditEvents()
      .filter(
        (e) =>
          e.stage === "ResponseComplete" &&
          e.user.username === user &&
          ["create", "update", "patch", "delete"].includes(e.verb) &&
          (resource === undefined || e.objectRef?.resource === resource),
      )
  /** Every sandbox and Restore of the check gone (the hub cleans up after the verdict). */
  const cleanedUp = (m: LocalCluster, name: string) =>
    waitUntil(`${m.name}/${name}: its Restore and sandbox gone`, 60_000, async () => {
      const left = (await restoresOf(m, name)).length
      const boxes = (await sandboxes(m)).filter(
        (n) => n.metadata.labels?.["fleetcheck.io/backupcheck"] === name,
      )
      return left === 0 && boxes.length === 0
    })

  beforeAll(async () => {
    fleet = await startFleet({
      clusters: [
        { name: "hub", controllerManager: false, workloads: false },
        "member-a",
        "member-b",
        { name: "member-c", controllerManager: false, workloads: false },
      ],
      audit: true,
      users: ["hub", "velero"],
    })
    a = fleet.cluster("member-a")
    b = fleet.cluster("member-b")
    c = fleet.cluster("member-c")
    s3 = await startS3Server(fleet.spawn)
    ;[veleroA, veleroB] = await Promise.all([
      startVelero({
        spawn: fleet.spawn,
        cluster: a,
        s3,
        bucket,
        kubeconfigPath: a.users.velero?.kubeconfigPath,
      }),
      startVelero({
        spawn: fleet.spawn,
        cluster: b,
        s3,
        bucket,
        kubeconfigPath: b.users.velero?.kubeconfigPath,
        accessMode: "ReadOnly",
        backupSyncPeriod: "3s",
      }),
    ])
    await applyStorefront(a)
    shopBackup = await veleroA.backup("shop-1", { includedNamespaces: [app] })
  }, 400_000)

  afterAll(async () => {
    await fleet?.stop()
  })

  it("harness: `velero backup create` Completes, its tarball holds the Deployment, ConfigMaps and Secrets", async () => {
    expect(shopBackup.phase).toBe("Completed")
    await veleroA.cli(["backup", "create", "shop-cli", `--include-namespaces=${app}`, "--wait"])
    const cli = await veleroA.waitForBackup("shop-cli")
    expect(cli.phase).toBe("Completed")
    expect(cli.itemsBackedUp).toBeGreaterThanOrEqual(6)
    expect(await s3.listKeys(bucket, "velero/backups/shop-cli/")).toContain(cli.tarballKey)
    const seen: string[] = []
    await editBackupTarball(s3, bucket, veleroA.prefix, "shop-cli", (tree) => {
      for (const [resource, name] of [
        ["deployments.apps", "orders"],
        ["configmaps", "settings"],
        ["configmaps", "prices"],
        ["secrets", "db-password"],
        ["secrets", "api-key"],
      ] as const)
        if (backupItemFiles(tree, resource, app, name).length > 0) seen.push(`${resource}/${name}`)
    })
    expect(seen).toHaveLength(5)
  })

  it("harness: `velero backup create --from-schedule` makes a Schedule's Backup; a new Schedule has none", async () => {
    const first = await veleroA.schedule("shop-nightly", { includedNamespaces: [app] })
    expect(first?.phase).toBe("Completed")
    expect(await veleroA.backupsOfSchedule("shop-nightly")).toEqual([first?.name])
    await veleroA.schedule("shop-empty", { includedNamespaces: [app], backupNow: false })
    expect(await veleroA.backupsOfSchedule("shop-empty")).toEqual([])
  })

  it("harness: Velero itself fails restores of a damaged tarball and of unavailable storage", async () => {
    await veleroA.backup("shop-damaged", { includedNamespaces: [app] })
    await editBackupTarball(s3, bucket, veleroA.prefix, "shop-damaged", (tree) => {
      for (const f of backupItemFiles(tree, "configmaps", app, "settings")) writeFileSync(f, "{ not json")
      for (const f of backupItemFiles(tree, "secrets", app, "api-key")) rmSync(f)
    })
    const restore = async (name: string, backup: string) => {
      const r = await a.api("POST", restoresPath, {
        apiVersion: "velero.io/v1",
        kind: "Restore",
        metadata: { name, namespace: "velero" },
        spec: {
          backupName: backup,
          namespaceMapping: { [app]: `${name}-sandbox` },
          existingResourcePolicy: "none",
        },
      })
      expect(r.status, JSON.stringify(r.body)).toBe(201)
      return waitUntil(`Restore ${name} finished`, 60_000, async () => {
        const s = (await a.api("GET", `${restoresPath}/${name}`)).body?.status
        return ["Completed", "PartiallyFailed", "Failed", "FailedValidation"].includes(s?.phase)
          ? s
          : undefined
      })
    }
    const partial = await restore("harness-damaged", "shop-damaged")
    console.log(`[velero] damaged tarball: ${JSON.stringify(partial)}`)
    expect(partial.phase).toBe("PartiallyFailed")
    expect(partial.errors).toBeGreaterThan(0)

    await veleroA.makeStorageUnavailable()
    try {
      const refused = await restore("harness-unavailable", shopBackup.name)
      console.log(`[velero] unavailable storage: ${JSON.stringify(refused)}`)
      expect(refused.phase).toBe("FailedValidation")
      expect(JSON.stringify(refused.validationErrors)).toMatch(/unavailable/)
    } finally {
      await veleroA.makeStorageAvailable()
    }
    for (const name of ["harness-damaged", "harness-unavailable"]) {
      await a.api("DELETE", `${restoresPath}/${name}`)
      await a.api("DELETE", `/api/v1/namespaces/${name}-sandbox`)
    }
  })

  describe("through the hub", () => {
    beforeAll(async () => {
      const hubCluster = fleet.cluster("hub")
      await installFleetcheck(hubCluster, [a, b, c])
      for (const [m, role] of [
        [a, "source"],
        [b, "target"],
        [c, "none"],
      ] as const) {
        await m.api("POST", "/api/v1/namespaces", { metadata: { name: checksNs } })
        // The hub works each member as a user of its own: its writes are told apart in the audit log.
        const r = await hubCluster.api("POST", `/api/v1/namespaces/${hubNs}/secrets`, {
          metadata: { name: m.name, namespace: hubNs, labels: { [registrationLabel]: "true", velero: role } },
          stringData: { [registrationKubeconfigKey]: m.users.hub?.kubeconfig ?? "" },
        })
        expect(r.status, JSON.stringify(r.body)).toBe(201)
      }
      // A namespace whose Deployment cannot become available until the fake node carries gateLabel.
      const gated = await a.kubectl(
        ["apply", "-f", "-"],
        [
          { apiVersion: "v1", kind: "Namespace", metadata: { name: "gated" } },
          {
            apiVersion: "apps/v1",
            kind: "Deployment",
            metadata: { name: "gated", namespace: "gated" },
            spec: {
              replicas: 1,
              selector: { matchLabels: { app: "gated" } },
              template: {
                metadata: { labels: { app: "gated" } },
                spec: {
                  nodeSelector: { [gateLabel]: "open" },
                  containers: [{ name: "gated", image: "registry.invalid/gated:1" }],
                },
              },
            },
          },
        ]
          .map((o) => JSON.stringify(o))
          .join("\n"),
      )
      expect(gated.code, gated.stderr).toBe(0)
      await veleroA.backup("gated-1", { includedNamespaces: ["gated"] })
      await startHub()
    }, 120_000)

    it("Completed: the restored Deployment, ConfigMaps and Secrets are in the sandbox, pods running; green; nothing outside it", async () => {
      const since = Date.now()
      await check(
        a,
        "shop-restore",
        { backupName: shopBackup.name },
        { sandbox: { validationWindow: "10m" } },
      )
      const { v, run } = await verdict(a, "shop-restore")
      expect(v.status).toBe("True")
      expect(run.result).toBe("Succeeded")
      // The recovery point is the Backup's start, as Velero recorded it.
      expect(Date.parse(run.recoveryPoint?.time ?? "")).toBe(Date.parse(shopBackup.startTimestamp))
      const sandbox: string = run.sandbox.namespace
      const inSandbox = async (path: string) =>
        (await a.api("GET", `/api/v1/namespaces/${sandbox}/${path}`)).body
      expect((await inSandbox("configmaps/settings")).data).toEqual({ "settings.txt": "generation 0" })
      expect((await inSandbox("configmaps/prices")).data).toEqual({ "prices.txt": "generation 1" })
      expect(Buffer.from((await inSandbox("secrets/db-password")).data.value, "base64").toString()).toBe(
        "db-password-value",
      )
      const deployment = (await a.api("GET", `/apis/apps/v1/namespaces/${sandbox}/deployments/orders`)).body
      expect(deployment.status?.availableReplicas).toBe(2)
      const pods = (await inSandbox("pods?labelSelector=app%3Dorders")).items as any[]
      expect(pods.filter((p) => p.status?.phase === "Running").length).toBeGreaterThanOrEqual(2)
      // Velero wrote only into the sandbox (and its own namespace): the audit log says so.
      const outside = writes(a, "velero").filter(
        (e) =>
          Date.parse(e.stageTimestamp) >= since &&
          e.objectRef?.namespace &&
          ![sandbox, "velero"].includes(e.objectRef.namespace),
      )
      expect(outside.map((e) => `${e.verb} ${e.objectRef?.resource} ${e.objectRef?.namespace}`)).toEqual([])
      expect(writes(a, "velero").some((e) => e.objectRef?.namespace === sandbox)).toBe(true)
      // One Restore, created by the hub; gone with the check, as is the sandbox.
      expect(writes(a, "hub", "restores").filter((e) => e.verb === "create")).toHaveLength(1)
      expect(await a.api("DELETE", `${checksPath}/shop-restore`)).toMatchObject({ status: 200 })
      await cleanedUp(a, "shop-restore")
    })

    it("PartiallyFailed: one damaged item in the tarball is RestorePartiallyFailed with Velero's errors", async () => {
      await check(a, "shop-damaged", { backupName: "shop-damaged" })
      const { v, run } = await verdict(a, "shop-damaged")
      expect(v.status).toBe("False")
      expect(v.reason).toBe("RestorePartiallyFailed")
      expect(run.result).toBe("Failed")
      await cleanedUp(a, "shop-damaged")
    })

    it("Failed: storage made unavailable is RestoreFailed with Velero's validation error", async () => {
      await veleroA.makeStorageUnavailable()
      try {
        await check(a, "shop-unavailable", { backupName: shopBackup.name })
        const { v } = await verdict(a, "shop-unavailable")
        expect(v.status).toBe("False")
        expect(v.reason).toBe("RestoreFailed")
        expect(v.message).toMatch(/unavailable/)
      } finally {
        await veleroA.makeStorageAvailable()
      }
      await cleanedUp(a, "shop-unavailable")
    })

    it("a Backup that is not Completed is BackupNotRestorable, naming its phase; no Restore is made", async () => {
      const r = await a.api("POST", "/apis/velero.io/v1/namespaces/velero/backups", {
        apiVersion: "velero.io/v1",
        kind: "Backup",
        metadata: { name: "shop-nowhere", namespace: "velero" },
        spec: { includedNamespaces: [app], storageLocation: "no-such-location" },
      })
      expect(r.status, JSON.stringify(r.body)).toBe(201)
      expect((await veleroA.waitForBackup("shop-nowhere")).phase).toBe("FailedValidation")
      await check(a, "shop-nowhere", { backupName: "shop-nowhere" })
      const { v } = await verdict(a, "shop-nowhere")
      expect(v.reason).toBe("BackupNotRestorable")
      expect(v.message).toMatch(/FailedValidation/)
      expect(await restoresOf(a, "shop-nowhere")).toEqual([])
    })

    it("a schedule without Completed Backups is red and makes no Restore", async () => {
      await check(a, "shop-empty", { scheduleName: "shop-empty" })
      const { v } = await verdict(a, "shop-empty")
      expect(v.status).toBe("False")
      expect(v.message).toMatch(/shop-empty/)
      expect(await restoresOf(a, "shop-empty")).toEqual([])
    })

    it("the newest Completed Backup of a schedule is restored", async () => {
      await veleroA.backup("shop-nightly-manual", { includedNamespaces: [app], scheduleName: "shop-nightly" })
      await check(a, "shop-nightly", { scheduleName: "shop-nightly" })
      const { v, run } = await verdict(a, "shop-nightly")
      expect(v.status).toBe("True")
      expect(run.backupName ?? run.recoveryPoint?.id).toBe("shop-nightly-manual")
      await cleanedUp(a, "shop-nightly")
    })

    it("Velero absent: VeleroNotInstalled, requeued slowly (the member's audit log shows no hot loop)", async () => {
      await check(c, "no-velero", { backupName: "anything" })
      // No run starts, so there is no lastRun: the condition says why.
      const v = await waitUntil("no-velero: VeleroNotInstalled", 60_000, async () =>
        ((await getCheck(c, "no-velero"))?.status?.conditions ?? []).find(
          (x: any) => x.type === "Verified" && x.reason === "VeleroNotInstalled",
        ),
      )
      expect(v.status).toBe("False")
      const since = Date.now()
      await sleep(10_000)
      // Every request the hub made to the member in those 10 s: a hot loop would make hundreds.
      const recent = c
        .auditEvents()
        .filter((e) => e.user.username === "hub" && Date.parse(e.stageTimestamp) > since)
      const statusWrites = recent.filter((e) => e.objectRef?.resource === "backupchecks" && e.verb !== "get")
      expect(statusWrites.length).toBeLessThanOrEqual(2)
    })

    it("check deleted mid-restore: its Restore and sandbox go", async () => {
      await check(a, "gated-deleted", { backupName: "gated-1" })
      await waitUntil(
        "the Restore of gated-deleted",
        60_000,
        async () => (await restoresOf(a, "gated-deleted")).length > 0,
      )
      await waitUntil("gated-deleted's sandbox", 30_000, async () =>
        (await sandboxes(a)).some(
          (n) => n.metadata.labels?.["fleetcheck.io/backupcheck"] === "gated-deleted",
        ),
      )
      expect((await a.api("DELETE", `${checksPath}/gated-deleted`)).status).toBe(200)
      await waitUntil(
        "gated-deleted gone",
        60_000,
        async () => (await a.api("GET", `${checksPath}/gated-deleted`)).status === 404,
      )
      await cleanedUp(a, "gated-deleted")
    })

    it("hub SIGKILLed mid-restore: the next hub finishes the run: one Restore object, one verdict, nothing left", async () => {
      await check(a, "gated-killed", { backupName: "gated-1" }, { timeout: "3m" })
      await waitUntil(
        "the Restore of gated-killed",
        60_000,
        async () => (await restoresOf(a, "gated-killed")).length > 0,
      )
      const runID = (await getCheck(a, "gated-killed")).status?.lastRun?.runID
      expect(runID).toBeDefined()
      hub?.process.signal("SIGKILL")
      await hub?.process.exited
      // The restored Deployment can now become available; a new hub takes the run over.
      const labelled = await a.kubectl(["label", "node", "kwok-node-0", `${gateLabel}=open`])
      expect(labelled.code, labelled.stderr).toBe(0)
      await startHub()
      const { v, run } = await verdict(a, "gated-killed", 180_000)
      expect(run.runID).toBe(runID)
      expect(v.status).toBe("True")
      await cleanedUp(a, "gated-killed")
      const created = writes(a, "hub", "restores").filter(
        (e) => e.verb === "create" && String(e.objectRef?.name).startsWith("gated-killed-"),
      )
      expect(created.map((e) => e.objectRef?.name)).toHaveLength(1)
    }, 300_000)

    // Velero looks at a store once a minute, however short --backup-sync-period is (backupSyncReconcilePeriod),
    // so this waits here, after the other tests, not first.
    it("harness: member B's server syncs member A's backups from the shared bucket", async () => {
      const synced = await veleroB.waitForBackup(shopBackup.name)
      expect(synced.phase).toBe("Completed")
      expect(synced.startTimestamp).toBe(shopBackup.startTimestamp)
    })

    it("cross-cluster drill: member A's Velero backup restored in member B from the shared bucket", async () => {
      const hubCluster = fleet.cluster("hub")
      const r = await hubCluster.api(
        "POST",
        `/apis/fleetcheck.io/v1alpha1/namespaces/${hubNs}/fleetbackupchecks`,
        {
          apiVersion: "fleetcheck.io/v1alpha1",
          kind: "FleetBackupCheck",
          metadata: { name: "shop-migration", namespace: hubNs },
          spec: {
            clusterSelector: { matchLabels: { velero: "source" } },
            drill: { targetClusters: ["member-b"], period: "24h" },
            template: {
              metadata: { namespace: checksNs },
              spec: {
                backup: { name: shopBackup.name },
                timeout: "2m",
                restore: { velero: { backupName: shopBackup.name } },
                sandbox: { validationWindow: "0s" },
              },
            },
          },
        },
      )
      expect(r.status, JSON.stringify(r.body)).toBe(201)
      const drill = await waitUntil("the drill member-a → member-b verified", 180_000, async () => {
        const fc = (
          await hubCluster.api(
            "GET",
            `/apis/fleetcheck.io/v1alpha1/namespaces/${hubNs}/fleetbackupchecks/shop-migration`,
          )
        ).body
        const d = (fc?.status?.drills ?? []).find(
          (x: any) => x.source === "member-a" && x.target === "member-b",
        )
        return d && d.verified !== "Unknown" ? d : undefined
      })
      expect(drill.verified).toBe("True")
      // Member B's own Velero restored A's objects there (B's audit log), into B's sandbox only.
      const created = writes(b, "velero").filter(
        (e) => e.verb === "create" && e.objectRef?.resource === "configmaps",
      )
      expect(created.some((e) => e.objectRef?.name === "settings")).toBe(true)
      expect(created.every((e) => String(e.objectRef?.namespace).startsWith("fcsb-"))).toBe(true)
    })
  })
})
