// `bin/fleetcheck dev --hub-replicas 2`: the dev fleet with two sharding hub replicas (dev's own and a
// `fleetcheck hub` process), judged from outside the hubs. The hub cluster's Leases, read with kubectl
// as the banner says: each replica announced itself, with the Lease timings given in the environment
// (the same settings reach both), and each member Lease is held by one of them, both holding some. Both
// replicas answer the fleet API with the whole fleet, the same; each dashboard says its share. Ctrl-C:
// a watch on the hub cluster's Leases sees every member Lease released and both replica Leases deleted
// (it ends then: an open watch holds the hub's API server up for seconds when it stops); dev exits 0
// and leaves no process or directory behind.
import { type ChildProcess, execFile, spawn } from "node:child_process"
import { existsSync, readdirSync, readFileSync } from "node:fs"
import { afterAll, describe, expect, it } from "vitest"
import {
  defaultHubNamespace,
  memberLeaseName,
  replicaLeaseName,
  shardLeaseLabel,
} from "../../src/api/names.ts"
import { startDev } from "../support/dev.ts"
import { sleep, waitUntil } from "../support/wait.ts"

const bin = new URL("../../bin/fleetcheck", import.meta.url).pathname
const members = ["member-1", "member-2"]
/** Shorter than the defaults: they must reach the other replica too (its Lease says so). */
const leaseEnv = {
  FLEETCHECK_LEADER_ELECT_LEASE_DURATION: "6s",
  FLEETCHECK_LEADER_ELECT_RENEW_DEADLINE: "4s",
  FLEETCHECK_LEADER_ELECT_RETRY_PERIOD: "1s",
}

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

interface Lease {
  metadata: { name: string; labels?: Record<string, string> }
  spec?: { holderIdentity?: string; leaseDurationSeconds?: number }
}

/** The complete JSON objects in a stream of them, one after another (as `kubectl -w -o json` prints). */
const jsonObjects = (text: string): any[] => {
  const out: any[] = []
  let depth = 0
  let start = 0
  let inString = false
  let escaped = false
  for (let i = 0; i < text.length; i++) {
    const c = text[i]
    if (inString) {
      if (escaped) escaped = false
      else if (c === "\\") escaped = true
      else if (c === '"') inString = false
    } else if (c === '"') inString = true
    else if (c === "{") {
      if (depth === 0) start = i
      depth++
    } else if (c === "}" && --depth === 0) out.push(JSON.parse(text.slice(start, i + 1)))
  }
  return out
}

describe("fleetcheck dev --hub-replicas 2", () => {
  let dev: ChildProcess | undefined
  let watch: ChildProcess | undefined
  afterAll(() => {
    if (dev && dev.exitCode === null) dev.kill("SIGKILL")
    if (watch && watch.exitCode === null) watch.kill("SIGKILL")
  })

  it("splits the members between two replicas that both answer for the whole fleet, and releases every Lease on Ctrl-C", async () => {
    const t0 = Date.now()
    const running = await startDev(bin, ["--port", "0", "--hub-replicas", "2"], {
      ...process.env,
      ...leaseEnv,
    })
    dev = running.process
    const stdout = running.stdout()
    console.log(`fleetcheck dev --hub-replicas 2 ready in ${Date.now() - t0} ms`)
    const runDir = /KUBECONFIG=(\/\S+)\/hub\/admin\.kubeconfig/.exec(stdout)?.[1]
    expect(runDir && existsSync(runDir)).toBe(true)
    const kubectl = /kubectl +(\/\S+)/.exec(stdout)?.[1]
    expect(kubectl).toBeTruthy()
    const pids = readFileSync(`${runDir}/pgids`, "utf8").split("\n").filter(Boolean).map(Number)
    // The replicas as the banner lists them: dashboard, process, identity.
    const listed = [
      ...stdout.matchAll(/replica (\d) of 2 {2}(http:\/\/127\.0\.0\.1:\d+)\/ {2}(hub-\d), .*identity (\S+)/g),
    ].map((m) => ({ position: Number(m[1]), url: m[2]!, name: m[3]!, identity: m[4]! }))
    expect(listed.map((r) => r.name).sort()).toEqual(["hub-1", "hub-2"])
    expect(listed.map((r) => r.position).sort()).toEqual([1, 2])
    const identities = listed.map((r) => r.identity)
    expect(new Set(identities).size).toBe(2)

    const hubEnv = { ...process.env, KUBECONFIG: `${runDir}/hub/admin.kubeconfig` }
    const kubectlJson = (args: string[]) =>
      new Promise<any>((resolve, reject) =>
        execFile(kubectl!, [...args, "-o", "json"], { env: hubEnv, timeout: 20_000 }, (error, out, err) =>
          error ? reject(new Error(`kubectl ${args.join(" ")}: ${err}`)) : resolve(JSON.parse(out)),
        ),
      )
    // From the hub cluster: each replica's Lease, written with the timings the environment gave dev;
    // each member's Lease held by one of them, and each holding some.
    const shardLeases = (
      await kubectlJson(["get", "leases", "-n", defaultHubNamespace, "-l", shardLeaseLabel])
    ).items as Lease[]
    const replicaLeases = shardLeases.filter((l) => l.metadata.labels?.[shardLeaseLabel] === "replica")
    expect(replicaLeases.map((l) => l.metadata.name).sort()).toEqual(identities.map(replicaLeaseName).sort())
    for (const l of replicaLeases) expect(l.spec?.leaseDurationSeconds).toBe(6)
    const holderOf = new Map(shardLeases.map((l) => [l.metadata.name, l.spec?.holderIdentity ?? ""]))
    const holders = members.map((m) => holderOf.get(memberLeaseName(m)))
    for (const h of holders) expect(identities).toContain(h)
    for (const id of identities) expect(holders).toContain(id)
    // The banner said the same.
    for (const [i, m] of members.entries()) {
      const position = listed.find((r) => r.identity === holders[i])!.position
      expect(stdout).toMatch(new RegExp(`${m} +replica ${position}\\n`))
    }

    // Both replicas answer for the whole fleet, the same (who answered and when aside).
    const fleetOf = async (url: string) => {
      const v = (await (await fetch(`${url}/api/v1/fleet`)).json()) as any
      return {
        hub: v.hub,
        view: JSON.stringify({
          leader: v.leader,
          summary: v.summary,
          clusters: v.clusters.map((c: any) => ({
            name: c.name,
            conditions: c.conditions.map((x: any) => `${x.type}=${x.status}/${x.reason}`),
          })),
          checks: v.checks.map((c: any) => `${c.cluster}/${c.namespace}/${c.name}=${c.status}/${c.reason}`),
          fleetChecks: (v.fleetChecks ?? []).map((f: any) => `${f.namespace}/${f.name}=${f.verified.status}`),
        }),
      }
    }
    const views = await waitUntil("both replicas' fleet views equal", 30_000, async () => {
      const vs = await Promise.all(listed.map((r) => fleetOf(r.url)))
      return vs[0]!.view === vs[1]!.view ? vs : undefined
    })
    for (const [i, r] of listed.entries()) expect(views[i]!.hub).toBe(r.identity)
    const view = JSON.parse(views[0]!.view)
    expect(view.leader).toBe(true)
    expect(view.clusters.map((c: any) => c.name)).toEqual(members)
    expect(view.checks.join("\n")).toMatch(/orders-db-nightly=True\/RestoreSucceeded/)
    expect(view.checks.join("\n")).toMatch(/payments-db-weekly=False\/ChecksumMismatch/)
    expect(view.fleetChecks).toContain("fleetcheck-system/etcd-snapshots=True")
    // Each dashboard names its replica and its share.
    for (const r of listed) {
      const page = await (await fetch(`${r.url}/`)).text()
      expect(page).toContain(`replica ${r.position} of 2, working 1 of 2 members`)
    }

    // Ctrl-C, watched from the hub cluster until its API server goes.
    let events = ""
    watch = spawn(
      kubectl!,
      [
        "get",
        "leases",
        "-n",
        defaultHubNamespace,
        "-l",
        shardLeaseLabel,
        "-w",
        "--output-watch-events",
        "-o",
        "json",
      ],
      { env: hubEnv, stdio: ["ignore", "pipe", "pipe"] },
    )
    watch.stdout?.on("data", (d: Buffer) => {
      events += d.toString()
    })
    // The watch has listed what is there before the replicas are told to stop.
    await waitUntil("the Lease watch listed", 10_000, async () =>
      jsonObjects(events).length >= shardLeases.length ? true : undefined,
    )
    const stopAt = Date.now()
    const exited = new Promise<number | null>((r) => dev?.once("exit", r))
    const watchEnded = new Promise<void>((r) => watch?.once("exit", () => r()))
    dev.kill("SIGINT")
    const lastEvents = () => {
      const last = new Map<string, { type: string; object: Lease }>()
      for (const e of jsonObjects(events)) last.set(e.object.metadata.name, e)
      return last
    }
    const released = (last: ReturnType<typeof lastEvents>) =>
      members.every((m) => (last.get(memberLeaseName(m))?.object.spec?.holderIdentity ?? "") === "") &&
      identities.every((id) => last.get(replicaLeaseName(id))?.type === "DELETED")
    // Watched until every Lease is released or the hub's API server goes with the fleet (judged below);
    // then the watch ends, so that it holds no API server up.
    await Promise.race([
      waitUntil("every Lease released", 60_000, () => released(lastEvents())).catch(() => undefined),
      watchEnded,
    ])
    console.log(`every Lease released ${Date.now() - stopAt} ms after Ctrl-C`)
    watch.kill()
    const code = await exited
    console.log(`dev stopped in ${Date.now() - stopAt} ms`)
    expect(code, running.stderr()).toBe(0)
    const last = lastEvents()
    for (const m of members) {
      const e = last.get(memberLeaseName(m))
      expect(e?.object.spec?.holderIdentity ?? "", `${m}'s Lease at the end: ${JSON.stringify(e)}`).toBe("")
    }
    for (const id of identities) expect(last.get(replicaLeaseName(id))?.type).toBe("DELETED")
    expect(running.stderr()).toContain("stopping the 2 hub replicas")
    expect(running.stderr()).not.toMatch(/exited .* while the fleet runs/)

    const deadline = Date.now() + 15_000
    while (Date.now() < deadline && pids.some(alive)) await sleep(200)
    expect(pids.filter(alive)).toEqual([])
    const left = existsSync(runDir!) ? readdirSync(runDir!, { recursive: true }).join(" ") : ""
    expect(left, `left in ${runDir}; dev said:\n${running.stderr()}`).toBe("")
  })
})
