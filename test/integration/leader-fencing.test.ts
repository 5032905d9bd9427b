// Leader fencing proven with the API servers' own audit logs (SPEC §11: "no write from a hub after it
// lost a Lease"). A hub cluster and two members, every kube-apiserver writing an audit log of every
// mutating request; two real `fleetcheck hub` processes, each with its own user on the hub API server
// (and its own TCP proxy to it, so one can be cut off) and, on members, told apart by their User-Agent
// `fleetcheck-hub/<identity>` (both use the members' one registration kubeconfig). Writes never stop:
// scheduled checks (every minute) and a stream of one-shot checks created and deleted by the test.
//
// Each scenario takes the leader out in one way, and then the audit logs must show no mutating request
// from it received by any API server at or after the new leader's acquireTime (the Lease's, written by
// the new leader just before its takeover PUT): (a) SIGSTOP for 30 s, then SIGCONT; (b) cut off from the
// hub API server only (blackholed: connections accepted, nothing forwarded) while members stay
// reachable; (c) SIGTERM during a hub API outage. And: no run gets two restore Jobs, and checks keep
// verifying under the new leader.
//
// Lease timings 6 s / 4 s / 1 s (client-go's 15 s / 10 s / 2 s scaled down): a leader's writes are
// refused 4 s after its last renewal started, a standby takes over 6 s after it saw that renewal.
// FLEETCHECK_KEEP_LOGS=1 keeps the hub logs and the audit logs.
import { cpSync, mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  type HubProcess,
  installFleetcheck,
  type LocalCluster,
  type LocalFleet,
  registerWithSecret,
  renderKubeconfig,
  startFleet,
  startHubProcess,
} from "../../clusters/local-fleet/index.ts"
import { defaultHubNamespace, hubLeaseName, labelBackupCheck, labelRun } from "../../src/api/names.ts"
import {
  type AuditedRequest,
  filterWrites,
  formatRequest,
  formatRequests,
  fromMicros,
  requestsOf,
  summarizeWrites,
  toMicros,
  writesTo,
} from "../support/audit.ts"
import { startProxy, type TcpProxy } from "../support/tcp-proxy.ts"
import { sleep, waitUntil } from "../support/wait.ts"

const leaseDurationMs = 6_000
const renewDeadlineMs = 4_000
/** Request latency allowed between the fence's check and the API server receiving the request. */
const latencyAllowanceMs = 1_000
const drainGraceMs = 30_000
const hubArgs = [
  "--leader-elect-lease-duration",
  "6s",
  "--leader-elect-renew-deadline",
  "4s",
  "--leader-elect-retry-period",
  "1s",
  "--drain-grace",
  "30s",
  "--probe-interval",
  "1s",
  "--status-interval",
  "1s",
  "--running-poll",
  "2s",
]
const scenarios = ["sigstop", "cutoff", "sigterm"] as const
const users = scenarios.flatMap((s) => [`${s}-a`, `${s}-b`])
const scheduledNs = "scheduled"
const churnNs = "churn"
const scheduledPerMember = 6
const userAgentOf = (identity: string) => `fleetcheck-hub/${identity}`

interface Contender {
  readonly hub: HubProcess
  /** Its user on the hub API server. */
  readonly user: string
  readonly userAgent: string
  readonly proxy: TcpProxy
}

interface LeaseSpec {
  holderIdentity?: string
  acquireTime?: string
  renewTime?: string
  leaseTransitions?: number
}

/** One Job per (check, run): a second Job for a run, or a Job name created twice, is a duplicate. */
interface DuplicateReport {
  readonly byLabel: string[]
  readonly createdTwice: string[]
}

describe("leader fencing, from the API servers' audit logs", () => {
  let fleet: LocalFleet
  let hubCluster: LocalCluster
  let members: LocalCluster[]
  let hubPort: number
  const contenders: Contender[] = []
  let churnStop = false
  let churnLoop: Promise<void> | undefined
  const churnErrors: string[] = []

  const getLease = async (): Promise<LeaseSpec | undefined> => {
    const r = await hubCluster.api(
      "GET",
      `/apis/coordination.k8s.io/v1/namespaces/${defaultHubNamespace}/leases/${hubLeaseName}`,
    )
    return r.status === 200 ? (r.body.spec as LeaseSpec) : undefined
  }

  const startContender = async (name: string): Promise<Contender> => {
    const proxy = await startProxy(hubPort)
    const user = hubCluster.users[name]!
    const kubeconfigPath = join(fleet.runDir, `${name}.kubeconfig`)
    writeFileSync(
      kubeconfigPath,
      renderKubeconfig("hub", `https://127.0.0.1:${proxy.port}`, hubCluster.caPem, user.token, user.name),
      { mode: 0o600 },
    )
    const hub = await startHubProcess(fleet, { name, kubeconfigPath, args: hubArgs })
    const c = { hub, user: user.name, userAgent: userAgentOf(hub.identity), proxy }
    contenders.push(c)
    return c
  }

  const leads = async (c: Contender) => {
    const spec = await getLease()
    return spec?.holderIdentity === c.hub.identity ? spec : undefined
  }

  const check = (name: string, spec: Record<string, unknown>, delay: string) => ({
    apiVersion: "fleetcheck.io/v1alpha1",
    kind: "BackupCheck",
    metadata: { name },
    spec: {
      backup: { name: `${name}-backup` },
      jobTemplate: {
        spec: {
          template: {
            metadata: { annotations: { "fleetcheck.io/simulate-delay": delay } },
            spec: { containers: [{ name: "restore", image: "restore:1" }] },
          },
        },
      },
      ...spec,
    },
  })

  const listChecks = async (m: LocalCluster, ns: string) => {
    const r = await m.api("GET", `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`)
    if (r.status !== 200) throw new Error(`${m.name}: listing checks: ${r.status}`)
    return r.body.items as any[]
  }
  const verified = (o: any) =>
    (o.status?.conditions ?? []).find((c: any) => c.type === "Verified")?.status as string | undefined

  /** One-shot checks, one a second, alternating members; each deleted 40 s after it was created. */
  const churn = async () => {
    const live: { member: LocalCluster; name: string; at: number }[] = []
    for (let n = 0; !churnStop; n++) {
      const member = members[n % members.length]!
      const name = `churn-${n}`
      try {
        const r = await member.api(
          "POST",
          `/apis/fleetcheck.io/v1alpha1/namespaces/${churnNs}/backupchecks`,
          check(name, {}, "2s"),
        )
        if (r.status !== 201) churnErrors.push(`${member.name} create ${name}: ${r.status}`)
        else live.push({ member, name, at: Date.now() })
        while (live.length > 0 && Date.now() - live[0]!.at > 40_000) {
          const old = live.shift()!
          await old.member.api(
            "DELETE",
            `/apis/fleetcheck.io/v1alpha1/namespaces/${churnNs}/backupchecks/${old.name}`,
          )
        }
      } catch (e) {
        churnErrors.push(String(e))
      }
      await sleep(1_000)
    }
  }

  const duplicates = async (): Promise<DuplicateReport> => {
    const byLabel: string[] = []
    const createdTwice: string[] = []
    for (const m of members) {
      const r = await m.api("GET", `/apis/batch/v1/jobs?labelSelector=${encodeURIComponent(labelRun)}`)
      const runs = new Map<string, string[]>()
      for (const j of r.body.items as any[]) {
        const key = `${j.metadata.namespace}/${j.metadata.labels[labelBackupCheck]}/${j.metadata.labels[labelRun]}`
        runs.set(key, [...(runs.get(key) ?? []), j.metadata.name])
      }
      for (const [run, jobs] of runs)
        if (jobs.length > 1) byLabel.push(`${m.name} ${run}: ${jobs.join(", ")}`)
      // Created (201) more than once under one name: deleted and made again, a second Job for its run.
      const created = new Map<string, AuditedRequest[]>()
      for (const w of writesTo(m, { resource: "jobs", verb: "create" })) {
        if (w.code !== 201 || w.subresource) continue
        const key = `${w.namespace}/${w.name}`
        created.set(key, [...(created.get(key) ?? []), w])
      }
      for (const [job, ws] of created)
        if (ws.length > 1) createdTwice.push(`${m.name} ${job}:\n  ${ws.map(formatRequest).join("\n  ")}`)
    }
    return { byLabel, createdTwice }
  }

  /** Every mutating request `c` sent that reached an API server at or after `sinceUs`, by cluster. */
  const writesFrom = (c: Contender, sinceUs: number) => ({
    hub: writesTo(hubCluster, { user: c.user, since: sinceUs / 1000 }),
    members: members.flatMap((m) => writesTo(m, { userAgent: c.userAgent, since: sinceUs / 1000 })),
  })

  const lastBefore = (ws: AuditedRequest[], us: number) => ws.filter((w) => w.receivedUs < us).at(-1)
  const firstAtOrAfter = (ws: AuditedRequest[], us: number) => ws.find((w) => w.receivedUs >= us)

  /** The takeover: the new leader's acquireTime, and what the logs say around it; returns the old
   * leader's last Lease write before it. */
  const describeTakeover = (old: Contender, next: Contender, acquireTime: string) => {
    const t = toMicros(acquireTime)
    const all = [hubCluster, ...members].flatMap((c) => requestsOf(c.name, c.auditEvents()))
    const oldAll = filterWrites(all, {}).filter((w) => w.user === old.user || w.userAgent === old.userAgent)
    const nextAll = filterWrites(all, {}).filter(
      (w) => w.user === next.user || w.userAgent === next.userAgent,
    )
    oldAll.sort((a, b) => a.receivedUs - b.receivedUs)
    nextAll.sort((a, b) => a.receivedUs - b.receivedUs)
    const oldLast = lastBefore(oldAll, t)
    const oldLastLease = lastBefore(
      oldAll.filter((w) => w.resource === "leases"),
      t,
    )
    const nextFirst = firstAtOrAfter(nextAll, t)
    const nextFirstMember = firstAtOrAfter(
      nextAll.filter((w) => w.cluster !== hubCluster.name),
      t,
    )
    const ms = (us: number | undefined) => (us === undefined ? "n/a" : `${((t - us) / 1000).toFixed(0)} ms`)
    console.log(
      [
        `new leader ${next.hub.name} acquireTime ${acquireTime}`,
        `  old leader's last renewal:     ${oldLastLease ? formatRequest(oldLastLease) : "none"} (${ms(oldLastLease?.receivedUs)} before)`,
        `  old leader's last write:       ${oldLast ? formatRequest(oldLast) : "none"} (${ms(oldLast?.receivedUs)} before)`,
        `  new leader's first write:      ${nextFirst ? formatRequest(nextFirst) : "none"}`,
        `  new leader's first member write: ${nextFirstMember ? formatRequest(nextFirstMember) : "none"}`,
      ].join("\n"),
    )
    return oldLastLease
  }

  /** Both hubs start; `a` leads, `b` stands by, and `a`'s writes are attributed in every audit log. */
  const startPair = async (scenario: (typeof scenarios)[number]) => {
    const a = await startContender(`${scenario}-a`)
    await waitUntil(`${a.hub.name} to lead`, 30_000, () => leads(a))
    const b = await startContender(`${scenario}-b`)
    // a works: its writes reach both members (by User-Agent) and the hub (by user).
    await waitUntil(`${a.hub.name}'s writes in every member's audit log`, 60_000, () =>
      members.every((m) => writesTo(m, { userAgent: a.userAgent }).length > 0),
    ).catch((e) => {
      const seen = members.map(
        (m) => `${m.name}:\n${summarizeWrites(writesTo(m, { since: Date.now() - 20_000 }))}`,
      )
      throw new Error(`${String(e)}\nwrites to members in the last 20 s:\n${seen.join("\n")}`)
    })
    expect(writesTo(hubCluster, { user: a.user, resource: "leases" }).length).toBeGreaterThan(0)
    // The standby has read the Lease a few times.
    await sleep(3_000)
    expect(await leads(a)).toBeTruthy()
    return { a, b }
  }

  /** After the takeover: fresh runs succeed in both members under the new leader. */
  const keepsVerifying = async (acquireTime: string) => {
    const tMs = Math.floor(toMicros(acquireTime) / 1_000_000) * 1000
    await waitUntil(
      "a one-shot check created after the takeover Verified in every member",
      60_000,
      async () => {
        for (const m of members) {
          const fresh = (await listChecks(m, churnNs)).filter(
            (o) => Date.parse(o.metadata.creationTimestamp) >= tMs && verified(o) === "True",
          )
          if (fresh.length === 0) return false
        }
        return true
      },
    )
    await waitUntil(
      "every scheduled check to succeed in a run started after the takeover",
      150_000,
      async () => {
        for (const m of members) {
          for (const o of await listChecks(m, scheduledNs)) {
            const run = o.status?.lastRun
            if (!(run?.result === "Succeeded" && Date.parse(run.startTime) >= tMs)) return false
          }
        }
        return true
      },
    )
  }

  /** The assertions every scenario ends with; `old` must be dead by now. */
  const assertFenced = async (old: Contender, next: Contender, acquireTime: string) => {
    expect(old.hub.process.hasExited()).toBe(true)
    const t = toMicros(acquireTime)
    const lastRenewal = describeTakeover(old, next, acquireTime)
    // The standby waited a whole leaseDuration after the old leader's last renewal reached the server
    // (it could only see that renewal after it was received): no release, no early takeover.
    expect(lastRenewal).toBeDefined()
    expect(t - lastRenewal!.receivedUs).toBeGreaterThanOrEqual(leaseDurationMs * 1000)
    // The fence itself: no write of the old leader reached a server later than renewDeadline after its
    // last renewal did (plus latency), whether or not a successor had taken over yet.
    const fenceUs = lastRenewal!.receivedUs + (renewDeadlineMs + latencyAllowanceMs) * 1000
    const late = writesFrom(old, fenceUs)
    expect(
      formatRequests([...late.hub, ...late.members], 50),
      `${old.hub.name} wrote more than ${renewDeadlineMs} ms (+${latencyAllowanceMs} ms) after its last renewal`,
    ).toBe("")
    const after = writesFrom(old, t)
    expect(
      formatRequests(after.hub, 50),
      `${old.hub.name} (user ${old.user}) wrote to the hub API server after ${next.hub.name} acquired the lease at ${acquireTime}`,
    ).toBe("")
    expect(
      formatRequests(after.members, 50),
      `${old.hub.name} (${old.userAgent}) wrote to a member after ${next.hub.name} acquired the lease at ${acquireTime}`,
    ).toBe("")
    // The new leader does write to both members (so the User-Agent filter would have seen the old one).
    for (const m of members)
      expect(writesTo(m, { userAgent: next.userAgent, since: t / 1000 }).length).toBeGreaterThan(0)
    const dup = await duplicates()
    expect(dup.byLabel.join("\n"), "runs with more than one restore Job").toBe("")
    expect(dup.createdTwice.join("\n"), "restore Jobs created twice under one name").toBe("")
    expect(churnErrors.join("\n")).toBe("")
  }

  /** Ends a scenario: the old leader is killed (if alive), the new one stops and releases the Lease. */
  const endScenario = async (old: Contender, next: Contender) => {
    if (!old.hub.process.hasExited()) {
      old.hub.process.signal("SIGKILL")
      await old.hub.process.exited
    }
    next.hub.process.signal("SIGTERM")
    expect(await next.hub.process.exited).toBe(0)
    for (const c of [old, next]) await c.proxy.close()
    expect((await getLease())?.holderIdentity ?? "").toBe("")
  }

  beforeAll(async () => {
    fleet = await startFleet({
      clusters: [{ name: "hub", workloads: false, controllerManager: false, users }, "member-1", "member-2"],
      audit: true,
    })
    hubCluster = fleet.cluster("hub")
    hubPort = Number(new URL(hubCluster.server).port)
    members = [fleet.cluster("member-1"), fleet.cluster("member-2")]
    await installFleetcheck(hubCluster, members)
    for (const m of members) {
      for (const ns of [scheduledNs, churnNs])
        expect((await m.api("POST", "/api/v1/namespaces", { metadata: { name: ns } })).status).toBe(201)
      await registerWithSecret(hubCluster, m, {})
      // Every minute, restores of 2 s to 22 s: status writes, Job creates and prunes all through the minute.
      for (let i = 0; i < scheduledPerMember; i++) {
        const r = await m.api(
          "POST",
          `/apis/fleetcheck.io/v1alpha1/namespaces/${scheduledNs}/backupchecks`,
          check(
            `every-minute-${i}`,
            { schedule: "* * * * *", timeout: "50s", successfulRunsHistoryLimit: 1 },
            `${2 + i * 4}s`,
          ),
        )
        expect(r.status).toBe(201)
      }
    }
    churnLoop = churn()
  })

  afterAll(async () => {
    churnStop = true
    await churnLoop
    for (const c of contenders) if (!c.hub.process.hasExited()) c.hub.process.signal("SIGKILL")
    for (const c of contenders) await c.proxy.close()
    if (fleet && process.env.FLEETCHECK_KEEP_LOGS === "1") {
      const keep = mkdtempSync(join(tmpdir(), "fleetcheck-leader-fencing-"))
      cpSync(join(fleet.runDir, "logs"), join(keep, "logs"), { recursive: true })
      for (const c of fleet.clusters)
        if (c.auditLogPath) cpSync(c.auditLogPath, join(keep, `${c.name}-audit.log`))
      console.log(`logs kept in ${keep}`)
    }
    await fleet?.stop()
  })

  it("(a) the leader frozen 30 s (SIGSTOP) while the standby takes over: after SIGCONT it writes nothing", async () => {
    const { a, b } = await startPair("sigstop")
    // Freeze in the burst at a minute boundary, when every scheduled check starts a run: the likeliest
    // moment for requests in flight and reconciles waiting on them (H1's resume scenario).
    await sleep(60_000 - (Date.now() % 60_000) + 150)
    a.hub.process.freeze()
    const frozenAt = Date.now()
    let acquired: LeaseSpec
    try {
      acquired = await waitUntil("the standby to acquire the lease", 30_000, () => leads(b), 50)
      console.log(`sigstop: standby acquired ${Date.now() - frozenAt} ms after the freeze`)
      await sleep(Math.max(0, frozenAt + 30_000 - Date.now()))
    } finally {
      a.hub.process.thaw()
    }
    // The former leader runs again, sees it lost the lease and stays a standby while b works.
    await waitUntil(`${a.hub.name} to log the lost lease`, 20_000, () =>
      a.hub.logLines().some((l) => l.message.startsWith("lost lease")),
    )
    const burst = writesFrom(a, (frozenAt - 1_000) * 1000)
    console.log(
      `sigstop: ${burst.hub.length + burst.members.length} writes of ${a.hub.name} received in the second before the freeze`,
    )
    await keepsVerifying(acquired.acquireTime!)
    expect((await leads(b))?.acquireTime).toBe(acquired.acquireTime)
    console.log(
      a.hub
        .logLines()
        .filter((l) => /lease|leader/.test(l.message))
        .map((l) => JSON.stringify(l))
        .slice(-6)
        .join("\n"),
    )
    a.hub.process.signal("SIGKILL")
    await a.hub.process.exited
    await assertFenced(a, b, acquired.acquireTime!)
    await endScenario(a, b)
  }, 360_000)

  it("(b) the leader cut off from the hub API server only: it stops writing to members before the standby leads", async () => {
    const { a, b } = await startPair("cutoff")
    a.proxy.cut("blackhole")
    const cutAt = Date.now()
    const acquired = await waitUntil("the standby to acquire the lease", 30_000, () => leads(b), 50)
    console.log(`cutoff: standby acquired ${Date.now() - cutAt} ms after the cut`)
    expect(a.hub.logLines().some((l) => l.message.startsWith("lost lease"))).toBe(true)
    // Members stay reachable for a: give a zombie every chance to write, then let it back to the hub API.
    await sleep(10_000)
    a.proxy.restore()
    await keepsVerifying(acquired.acquireTime!)
    expect((await leads(b))?.acquireTime).toBe(acquired.acquireTime)
    a.hub.process.signal("SIGKILL")
    await a.hub.process.exited
    await assertFenced(a, b, acquired.acquireTime!)
    await endScenario(a, b)
  }, 360_000)

  it("(c) SIGTERM during a hub API outage: the leader stops within its grace and writes nothing after the takeover", async () => {
    const { a, b } = await startPair("sigterm")
    a.proxy.cut("blackhole")
    await sleep(1_000)
    const termAt = Date.now()
    a.hub.process.signal("SIGTERM")
    const exitCode = await Promise.race([
      a.hub.process.exited,
      sleep(drainGraceMs + 5_000).then(() => "still running"),
    ])
    const stoppedMs = Date.now() - termAt
    console.log(
      `sigterm: ${a.hub.name} exited (${exitCode}) ${stoppedMs} ms after SIGTERM (grace ${drainGraceMs} ms)`,
    )
    expect(exitCode).not.toBe("still running")
    expect(stoppedMs).toBeLessThan(drainGraceMs)
    const acquired = await waitUntil("the standby to acquire the lease", 30_000, () => leads(b), 50)
    console.log(`sigterm: standby acquired ${Date.now() - termAt} ms after SIGTERM`)
    const lines = a.hub.logLines()
    expect(
      lines.some((l) => l.message.startsWith("lost lease") || l.message.startsWith("shutting down")),
    ).toBe(true)
    await keepsVerifying(acquired.acquireTime!)
    await assertFenced(a, b, acquired.acquireTime!)
    await endScenario(a, b)
  }, 360_000)

  it("the audit logs hold writes only, each hub process under its own user on the hub API server", () => {
    const hubReqs = requestsOf(hubCluster.name, hubCluster.auditEvents())
    expect(hubReqs.length).toBeGreaterThan(0)
    expect(filterWrites(hubReqs)).toHaveLength(hubReqs.length)
    const hubUsers = new Set(hubReqs.map((r) => r.user))
    for (const c of contenders) expect(hubUsers.has(c.user)).toBe(true)
    console.log(
      `hub API server writes since ${fromMicros(hubReqs[0]!.receivedUs)}:\n${summarizeWrites(hubReqs)}`,
    )
  })
})
