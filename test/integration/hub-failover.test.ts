// Two real hub processes (`bin/fleetcheck hub`) against one hub cluster and one member: exactly one
// leads, no run gets a duplicate Job, and when the leader is killed (SIGKILL: no lease release) the
// standby takes over within 20 s (lease 15 s / renew 10 s / retry 2 s) and finishes the runs in flight.
// SIGTERM on the last hub drains and releases the lease.
import { type ChildProcess, spawn } from "node:child_process"
import { createWriteStream, mkdtempSync, rmSync } from "node:fs"
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

  it("one leader, zero duplicate Jobs; the leader killed mid-run: the standby takes over within 20 s and finishes", async () => {
    const a = await startHubProcess("hub-a")
    const b = await startHubProcess("hub-b")
    const leader = await waitUntil("a leader", 30_000, async () =>
      (await isLeader(a)) ? a : (await isLeader(b)) ? b : undefined,
    )
    const standby = leader === a ? b : a
    expect(await isLeader(standby)).toBe(false)
    expect((await lease()).spec.holderIdentity).toBe(await identity(leader))

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
      return list.length === 30 && list.every((o) => o.status?.lastRun?.result === "Running")
    })

    leader.child.kill("SIGKILL")
    const killedAt = Date.now()
    await leader.exited
    await waitUntil("the standby to lead", 30_000, () => isLeader(standby))
    const takeoverMs = Date.now() - killedAt
    console.log(`leader SIGKILLed → standby leading after ${takeoverMs} ms`)
    expect(takeoverMs).toBeLessThan(20_000)

    await waitUntil("all 30 in-flight runs Verified=True", 90_000, async () => {
      const list = await checks()
      return list.every((o) => verified(o) === "True")
    })
    const jobs = (await member.api("GET", `/apis/batch/v1/namespaces/${ns}/jobs`)).body.items as any[]
    expect(jobs).toHaveLength(30)
    expect(new Set(jobs.map((j) => j.metadata.ownerReferences[0].uid)).size).toBe(30)

    // SIGTERM: drain and release the lease so nobody has to wait for it to expire.
    standby.child.kill("SIGTERM")
    expect(await standby.exited).toBe(0)
    const released = await lease()
    expect(released.spec.holderIdentity ?? "").toBe("")
  })
})
