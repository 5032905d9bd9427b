// Proves the local-fleet harness everything else stands on: three real clusters on one etcd, Jobs that
// succeed and fail as asked (through the API and kubectl), garbage collection, and a teardown that
// leaves no process behind, even when the process that owns the fleet is killed.
import { spawn } from "node:child_process"
import { existsSync } from "node:fs"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type LocalCluster, type LocalFleet, startFleet } from "../../clusters/local-fleet/index.ts"
import { waitUntil } from "../support/wait.ts"

const jobManifest = (name: string, annotations: Record<string, string>) => ({
  apiVersion: "batch/v1",
  kind: "Job",
  metadata: { name, namespace: "default" },
  spec: {
    backoffLimit: 0,
    template: {
      metadata: { annotations },
      spec: { restartPolicy: "Never", containers: [{ name: "restore", image: "example.invalid/restore:1" }] },
    },
  },
})

const isAlive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe("local fleet", () => {
  let fleet: LocalFleet
  let pids: number[] = []

  beforeAll(async () => {
    const t0 = Date.now()
    fleet = await startFleet({ clusters: ["one", "two", "three"] })
    console.log(`3-cluster fleet ready in ${((Date.now() - t0) / 1000).toFixed(1)}s`)
    pids = fleet.clusters.flatMap((c) => c.processes().map((p) => p.pid))
  })

  afterAll(async () => {
    await fleet?.stop()
  })

  it("serves three distinct clusters reporting v1.37.2", async () => {
    expect(fleet.clusters).toHaveLength(3)
    for (const c of fleet.clusters) {
      const v = await c.api("GET", "/version")
      expect(v.body.gitVersion).toBe("v1.37.2")
      // Objects are isolated by etcd prefix: a ConfigMap in one cluster is absent in the others.
      const cm = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: `only-in-${c.name}` } }
      expect((await c.api("POST", "/api/v1/namespaces/default/configmaps", cm)).status).toBe(201)
    }
    for (const c of fleet.clusters) {
      const list = await c.api("GET", "/api/v1/namespaces/default/configmaps")
      const names = list.body.items.map((i: { metadata: { name: string } }) => i.metadata.name)
      expect(names).toContain(`only-in-${c.name}`)
      expect(names.filter((n: string) => n.startsWith("only-in-"))).toHaveLength(1)
    }
  })

  it.each(["one", "two", "three"])("runs Jobs to Complete and Failed in cluster %s", async (name) => {
    const c: LocalCluster = fleet.cluster(name)
    const ok = jobManifest("restore-ok", { "fleetcheck.io/simulate-message": "restored 42 tables" })
    const bad = jobManifest("restore-bad", {
      "fleetcheck.io/simulate": "fail",
      "fleetcheck.io/simulate-exit-code": "3",
      "fleetcheck.io/simulate-message": "checksum mismatch: want sha256:aa got sha256:bb",
    })
    expect((await c.api("POST", "/apis/batch/v1/namespaces/default/jobs", ok)).status).toBe(201)
    expect((await c.api("POST", "/apis/batch/v1/namespaces/default/jobs", bad)).status).toBe(201)

    const complete = await c.kubectl(["wait", "--for=condition=complete", "job/restore-ok", "--timeout=90s"])
    expect(complete.stderr).toBe("")
    expect(complete.code).toBe(0)
    const failed = await c.kubectl(["wait", "--for=condition=failed", "job/restore-bad", "--timeout=90s"])
    expect(failed.code).toBe(0)

    const okJob = await c.api("GET", "/apis/batch/v1/namespaces/default/jobs/restore-ok")
    expect(okJob.body.status.succeeded).toBe(1)
    const badJob = await c.api("GET", "/apis/batch/v1/namespaces/default/jobs/restore-bad")
    expect(badJob.body.status.failed).toBe(1)
    expect(badJob.body.status.succeeded ?? 0).toBe(0)

    // The termination message and exit code the test chose reach the pod status, as a real kubelet's would.
    const pods = await c.api("GET", "/api/v1/namespaces/default/pods?labelSelector=job-name%3Drestore-bad")
    const terminated = pods.body.items[0].status.containerStatuses[0].state.terminated
    expect(terminated.exitCode).toBe(3)
    expect(terminated.message).toBe("checksum mismatch: want sha256:aa got sha256:bb")
    const okPods = await c.api("GET", "/api/v1/namespaces/default/pods?labelSelector=job-name%3Drestore-ok")
    expect(okPods.body.items[0].status.containerStatuses[0].state.terminated.message).toBe(
      "restored 42 tables",
    )
  })

  it("garbage-collects a Job when its owner is deleted", async () => {
    const c = fleet.cluster("two")
    const owner = await c.api("POST", "/api/v1/namespaces/default/configmaps", {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name: "job-owner" },
    })
    expect(owner.status).toBe(201)
    const job = jobManifest("owned-job", { "fleetcheck.io/simulate": "hang" }) as any
    job.metadata.ownerReferences = [
      { apiVersion: "v1", kind: "ConfigMap", name: "job-owner", uid: owner.body.metadata.uid },
    ]
    expect((await c.api("POST", "/apis/batch/v1/namespaces/default/jobs", job)).status).toBe(201)
    expect((await c.api("DELETE", "/api/v1/namespaces/default/configmaps/job-owner")).status).toBe(200)
    await waitUntil("the owned Job to be garbage-collected", 60_000, async () => {
      return (await c.api("GET", "/apis/batch/v1/namespaces/default/jobs/owned-job")).status === 404
    })
  })

  it("restarts an apiserver in place with the same address and CA", async () => {
    const c = fleet.cluster("three")
    await c.stopApiServer()
    await expect(c.api("GET", "/readyz")).rejects.toThrow()
    await c.startApiServer()
    expect((await c.api("GET", "/api/v1/namespaces/default/configmaps/only-in-three")).status).toBe(200)
  })

  it("leaves no process or run directory after teardown", async () => {
    const runDir = fleet.runDir
    const all = [...pids, ...fleet.clusters.flatMap((c) => c.processes().map((p) => p.pid))]
    expect(all.filter(isAlive).length).toBeGreaterThan(0)
    await fleet.stop()
    await waitUntil("every fleet process to exit", 10_000, () => all.every((p) => !isAlive(p)))
    expect(existsSync(runDir)).toBe(false)
  })

  it("cleans up after an owner process that is killed without teardown", async () => {
    const script = `
      import { startFleet } from ${JSON.stringify(new URL("../../clusters/local-fleet/index.ts", import.meta.url).pathname)}
      const f = await startFleet({ clusters: [{ name: "orphan", workloads: false, controllerManager: false }], log: () => {} })
      console.log(JSON.stringify({ runDir: f.runDir, pids: f.clusters[0].processes().map((p) => p.pid) }))
      setInterval(() => {}, 1000)
    `
    const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
      stdio: ["ignore", "pipe", "inherit"],
    })
    const info = await new Promise<{ runDir: string; pids: number[] }>((resolve, reject) => {
      let out = ""
      child.stdout.on("data", (d: Buffer) => {
        out += d.toString()
        const line = out.split("\n").find((l) => l.startsWith("{"))
        if (line) resolve(JSON.parse(line))
      })
      child.once("exit", (code) => reject(new Error(`owner exited early with ${code}`)))
    })
    expect(info.pids.every(isAlive)).toBe(true)
    child.kill("SIGKILL")
    await waitUntil("the watchdog to stop the orphaned fleet", 20_000, () =>
      info.pids.every((p) => !isAlive(p)),
    )
    await waitUntil("the orphaned run directory to be removed", 10_000, () => !existsSync(info.runDir))
  })
})
