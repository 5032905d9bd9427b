// Two real hub processes (`bin/fleetcheck hub`) against one hub cluster and one member: exactly one
// leads, no run gets a duplicate Job, and when the leader is killed (SIGKILL: no lease release) the
// standby takes over within 20 s (lease 15 s / renew 10 s / retry 2 s) and finishes the runs in flight.
// SIGTERM on the last hub drains and releases the lease.
// Sandboxes (spec.sandbox, ADR 0009) ride the same failover: a sandboxed run in flight at the SIGKILL
// is finished by the standby with one Job and one verdict, a sandboxed check deleted while no hub
// leads goes with its sandbox, and no sandbox namespace is left once the validation window has passed;
// what happened is read from the member API server by the test's own watches, not from the hubs.
import { type ChildProcess, spawn } from "node:child_process"
import { createWriteStream, mkdtempSync, rmSync } from "node:fs"
import { request } from "node:https"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  installFleetcheck,
  type LocalCluster,
  type LocalFleet,
  registerWithSecret,
  startFleet,
} from "../../clusters/local-fleet/index.ts"
import { backupCheck } from "../support/backupcheck.ts"
import { waitUntil } from "../support/wait.ts"

const bin = new URL("../../bin/fleetcheck", import.meta.url).pathname
const hubNs = "fleetcheck-system"
const ns = "apps"
const freePort = () =>
  new Promise<number>((resolve) => {
    const s = createServer().listen(0, "127.0.0.1", () => {
      const a = s.address()
      s.close(() => resolve(typeof a === "object" && a ? a.port : 0))
    })
  })

/**
 * The test's own witness of one collection of the member: LIST, then one WATCH from the list's
 * resourceVersion, recording every object version it sees (the list's items as ADDED). `closed` is
 * set if the watch ends early: then events may have been missed and the test says so.
 */
const witness = async (cluster: LocalCluster, path: string) => {
  const list = await cluster.api("GET", path)
  if (list.status !== 200) throw new Error(`LIST ${path}: ${list.status}`)
  const events: Array<{ type: string; object: any }> = (list.body.items ?? []).map((object: any) => ({
    type: "ADDED",
    object,
  }))
  const state = { events, closed: false, stop: () => {} }
  let stopped = false
  const close = () => {
    if (!stopped) state.closed = true
  }
  const sep = path.includes("?") ? "&" : "?"
  const url = new URL(
    `${path}${sep}watch=1&timeoutSeconds=600&resourceVersion=${list.body.metadata.resourceVersion}`,
    cluster.server,
  )
  const req = request(
    url,
    { ca: cluster.caPem, headers: { authorization: `Bearer ${cluster.adminToken}` } },
    (res) => {
      if (res.statusCode !== 200) close()
      let buf = ""
      res.setEncoding("utf8")
      res.on("data", (chunk: string) => {
        buf += chunk
        for (let nl = buf.indexOf("\n"); nl >= 0; nl = buf.indexOf("\n")) {
          const line = buf.slice(0, nl)
          buf = buf.slice(nl + 1)
          if (line.trim() === "") continue
          const ev = JSON.parse(line)
          if (ev.type === "ERROR") close()
          else events.push({ type: ev.type, object: ev.object })
        }
      })
      res.on("end", close)
    },
  )
  req.on("error", close)
  req.end()
  state.stop = () => {
    stopped = true
    req.destroy()
  }
  return state
}

interface HubProcess {
  readonly child: ChildProcess
  readonly url: string
  readonly exited: Promise<number | null>
}

describe("two hubs at once", () => {
  let fleet: LocalFleet
  let hubCluster: LocalCluster
  let member: LocalCluster
  let logDir: string
  const hubs: HubProcess[] = []

  const startHubProcess = async (label: string): Promise<HubProcess> => {
    const port = await freePort()
    const child = spawn(
      bin,
      [
        "hub",
        "--http-address",
        `127.0.0.1:${port}`,
        "--secure-serving",
        "false",
        "--probe-interval",
        "1s",
        "--running-poll",
        "2s",
      ],
      {
        env: { ...process.env, KUBECONFIG: hubCluster.kubeconfigPath, FLEETCHECK_LOG_LEVEL: "Info" },
        stdio: ["ignore", "pipe", "pipe"],
      },
    )
    const log = createWriteStream(join(logDir, `${label}.log`))
    child.stdout?.pipe(log)
    child.stderr?.pipe(log)
    const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)))
    const url = `http://127.0.0.1:${port}`
    await waitUntil(`${label} serving`, 30_000, async () => (await fetch(`${url}/healthz`)).ok)
    const h = { child, url, exited }
    hubs.push(h)
    return h
  }
  const isLeader = async (h: HubProcess) =>
    ((await (await fetch(`${h.url}/api/v1/fleet`)).json()) as any).leader === true
  const identity = async (h: HubProcess) =>
    ((await (await fetch(`${h.url}/api/v1/fleet`)).json()) as any).hub as string
  const lease = async () =>
    (await hubCluster.api("GET", `/apis/coordination.k8s.io/v1/namespaces/${hubNs}/leases/fleetcheck-hub`))
      .body
  const checks = async () =>
    (await member.api("GET", `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`)).body
      .items as any[]
  const verified = (o: any) => (o.status?.conditions ?? []).find((c: any) => c.type === "Verified")?.status

  beforeAll(async () => {
    logDir = mkdtempSync(join(tmpdir(), "fleetcheck-hub-logs-"))
    fleet = await startFleet({
      clusters: [{ name: "hub", workloads: false, controllerManager: false }, "member"],
    })
    hubCluster = fleet.cluster("hub")
    member = fleet.cluster("member")
    await installFleetcheck(hubCluster, [member])
    await member.api("POST", "/api/v1/namespaces", { metadata: { name: ns } })
    await registerWithSecret(hubCluster, member, {})
  })

  afterAll(async () => {
    for (const h of hubs) if (h.child.exitCode === null) h.child.kill("SIGKILL")
    await fleet?.stop()
    if (process.env.FLEETCHECK_KEEP_LOGS !== "1") rmSync(logDir, { recursive: true, force: true })
  })

  it("one leader, zero duplicate Jobs; the leader killed mid-run: the standby takes over within 20 s and finishes, sandboxes included: one Job and one verdict per run, none left after the window", async () => {
    const a = await startHubProcess("hub-a")
    const b = await startHubProcess("hub-b")
    const leader = await waitUntil("a leader", 30_000, async () =>
      (await isLeader(a)) ? a : (await isLeader(b)) ? b : undefined,
    )
    const standby = leader === a ? b : a
    expect(await isLeader(standby)).toBe(false)
    expect((await lease()).spec.holderIdentity).toBe(await identity(leader))

    // Witnesses of every Job and every sandbox namespace of the member, and of the sandboxed check.
    const jobWitness = await witness(member, "/apis/batch/v1/jobs")
    const sandboxWitness = await witness(
      member,
      `/api/v1/namespaces?labelSelector=${encodeURIComponent("fleetcheck.io/sandbox=true")}`,
    )
    const checkWitness = await witness(
      member,
      `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks?fieldSelector=metadata.name%3Dsandboxed`,
    )
    // A sandboxed run that outlives the takeover (25 s: the standby leads 13-17 s after the SIGKILL) and
    // one that hangs, whose check is deleted while no hub leads.
    const egress = [{ cidr: "10.96.0.10/32", ports: [{ port: 53, protocol: "UDP" }] }]
    const sandboxed = (
      await member.api(
        "POST",
        `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`,
        backupCheck("sandboxed", ns, {
          spec: { timeout: "90s", sandbox: { egress, validationWindow: "5s" } },
          annotations: { "fleetcheck.io/simulate-delay": "25s" },
        }),
      )
    ).body
    const doomed = (
      await member.api(
        "POST",
        `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`,
        backupCheck("doomed", ns, {
          spec: { timeout: "90s", sandbox: { egress } },
          annotations: { "fleetcheck.io/simulate": "hang" },
        }),
      )
    ).body
    expect(sandboxed.metadata?.uid).toBeDefined()
    expect(doomed.metadata?.uid).toBeDefined()

    // Runs that are still in flight when the leader dies.
    const names = Array.from({ length: 30 }, (_, i) => `inflight-${i}`)
    for (const n of names) {
      const res = await member.api("POST", `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`, {
        apiVersion: "fleetcheck.io/v1alpha1",
        kind: "BackupCheck",
        metadata: { name: n, namespace: ns },
        spec: {
          backup: { name: `${n}-backup` },
          jobTemplate: {
            spec: {
              template: {
                metadata: { annotations: { "fleetcheck.io/simulate-delay": "10s" } },
                spec: { containers: [{ name: "restore", image: "restore:1" }] },
              },
            },
          },
        },
      })
      expect(res.status).toBe(201)
    }
    await waitUntil("every run started", 60_000, async () => {
      const list = await checks()
      return list.length === 32 && list.every((o) => o.status?.lastRun?.result === "Running")
    })
    const byName = async (name: string) =>
      (await member.api("GET", `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks/${name}`)).body
    const sandboxOf = async (name: string) => (await byName(name)).status?.lastRun?.sandbox?.namespace
    const sandbox = await sandboxOf("sandboxed")
    const doomedSandbox = await sandboxOf("doomed")
    expect(sandbox).toMatch(/^fcsb-sandboxed-g1-[0-9a-f]{10}$/)
    expect(doomedSandbox).toMatch(/^fcsb-doomed-g1-[0-9a-f]{10}$/)

    leader.child.kill("SIGKILL")
    const killedAt = Date.now()
    await leader.exited
    // Deleted while nobody leads: only its finalizer keeps it, until the new leader deletes its sandbox.
    expect(
      (await member.api("DELETE", `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks/doomed`))
        .status,
    ).toBe(200)
    expect((await byName("doomed")).metadata?.deletionTimestamp).toBeDefined() // held by the finalizer
    await waitUntil("the standby to lead", 30_000, () => isLeader(standby))
    const takeoverMs = Date.now() - killedAt
    const atTakeover = (await byName("sandboxed")).status?.lastRun?.result
    console.log(`leader SIGKILLed → standby leading after ${takeoverMs} ms (sandboxed run ${atTakeover})`)
    expect(takeoverMs).toBeLessThan(20_000)

    await waitUntil("all 30 in-flight runs Verified=True", 90_000, async () => {
      const list = (await checks()).filter((o) => o.metadata.name.startsWith("inflight-"))
      return list.length === 30 && list.every((o) => verified(o) === "True")
    })
    const jobs = (await member.api("GET", `/apis/batch/v1/namespaces/${ns}/jobs`)).body.items as any[]
    expect(jobs).toHaveLength(30)
    expect(new Set(jobs.map((j) => j.metadata.ownerReferences[0].uid)).size).toBe(30)

    // No sandbox left: the deleted check's went before its finalizer, the finished run's after its
    // window; the verdict recorded once, from one Job in one sandbox.
    const sandboxesOf = async (uid: string) =>
      (
        await member.api(
          "GET",
          `/api/v1/namespaces?labelSelector=${encodeURIComponent(`fleetcheck.io/sandbox=true,fleetcheck.io/backupcheck-uid=${uid}`)}`,
        )
      ).body.items as any[]
    const done = await waitUntil("sandboxed's sandbox deleted", 60_000, async () => {
      const o = await byName("sandboxed")
      return o.status?.lastRun?.sandbox?.cleanup === "Deleted" ? o : undefined
    })
    const cleanedAt = Date.now()
    expect(await sandboxesOf(sandboxed.metadata.uid)).toEqual([])
    expect((await member.api("GET", `/api/v1/namespaces/${sandbox}`)).status).toBe(404)
    await waitUntil("doomed gone", 60_000, async () => (await byName("doomed")).code === 404)
    expect(await sandboxesOf(doomed.metadata.uid)).toEqual([])
    expect(verified(done)).toBe("True")
    expect(done.status.lastRun).toMatchObject({ runID: "g1", result: "Succeeded" })
    expect(Date.parse(done.status.lastRun.sandbox.deleteAfter)).toBe(
      Date.parse(done.status.lastRun.completionTime) + 5_000,
    )
    expect(done.status.history.map((r: any) => [r.runID, r.result, r.sandbox?.cleanup])).toEqual([
      ["g1", "Succeeded", "Deleted"],
    ])
    const leftover = (
      await member.api(
        "GET",
        `/api/v1/namespaces?labelSelector=${encodeURIComponent("fleetcheck.io/sandbox=true")}`,
      )
    ).body.items as any[]
    expect(leftover.map((n) => n.metadata.name)).toEqual([])

    for (const w of [jobWitness, sandboxWitness, checkWitness]) w.stop()
    expect([jobWitness.closed, sandboxWitness.closed, checkWitness.closed]).toEqual([false, false, false])
    // Every Job ever in a sandbox: one per run (uid), each in its own run's sandbox.
    const sandboxJobs = new Map<string, string>()
    for (const { object } of jobWitness.events)
      if (object.metadata.namespace.startsWith("fcsb-"))
        sandboxJobs.set(object.metadata.uid, `${object.metadata.namespace}/${object.metadata.name}`)
    expect([...sandboxJobs.values()].sort()).toEqual([
      `${doomedSandbox}/doomed-g1`,
      `${sandbox}/sandboxed-g1`,
    ])
    // Every sandbox namespace ever: one per run, never re-created.
    const sandboxUids = new Map<string, string>()
    for (const { object } of sandboxWitness.events) sandboxUids.set(object.metadata.uid, object.metadata.name)
    expect([...sandboxUids.values()].sort()).toEqual([doomedSandbox, sandbox])
    // The verdict: every status version the witness saw names one finished run g1, with one result and
    // one completion time; the history never held more than that one entry.
    const verdicts = new Set<string>()
    let historyMax = 0
    for (const { object } of checkWitness.events) {
      const run = object.status?.lastRun
      if (run && run.result !== "Running") verdicts.add(`${run.runID} ${run.result} ${run.completionTime}`)
      historyMax = Math.max(historyMax, object.status?.history?.length ?? 0)
    }
    expect([...verdicts]).toEqual([`g1 Succeeded ${done.status.lastRun.completionTime}`])
    expect(historyMax).toBe(1)
    console.log(
      `sandboxed: completed ${done.status.lastRun.completionTime}, deleteAfter ${done.status.lastRun.sandbox.deleteAfter}, cleanup Deleted seen ${new Date(cleanedAt).toISOString()}`,
    )

    // SIGTERM: drain and release the lease so nobody has to wait for it to expire.
    standby.child.kill("SIGTERM")
    expect(await standby.exited).toBe(0)
    const released = await lease()
    expect(released.spec.holderIdentity ?? "").toBe("")
  }, 180_000)
})
