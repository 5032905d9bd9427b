// Sharding (ADR 0011) proven with real `fleetcheck hub --sharding` processes and the API servers' own
// audit logs. One hub API server and two member API servers, 32 namespace-scoped members (one namespace
// each, fleetcheck.io/namespaces) registered by Secret; each replica is its own process with its own
// user on the hub API server and, on the members, its own User-Agent `fleetcheck-hub/<identity>`.
//
//   3 replicas    every member's Lease held by one of them, each holding some; every check verified
//   placement     one replica holds the placement Lease and places a FleetBackupCheck into two members
//                 worked by two different replicas (each scoped to namespace `fleet`, one per member API
//                 server); every replica shows its aggregate; each dashboard says which replica it is
//   SIGKILL one   the placement holder: its members' Leases taken by the others once they expire, fresh
//                 checks there verify; another replica takes the placement Lease and places the check
//                 into a member selected after the kill (the hub's API server, scoped to `fleet`)
//   join a 4th    it takes about a quarter of the members; each handover's gap (release → acquire) is
//                 shorter than the lease duration; fresh checks in the moved members verify
//   SIGSTOP one   30 s: its members taken once its Leases expire; after SIGCONT it writes nothing for them
//   views         every live replica answers /api/v1/fleet with the whole fleet, the same
//
// Then, over the whole run, from the audit logs alone (a Lease create or update answered 409, a lost
// race, changes nothing and is counted apart): a member's Lease changes hands only by a write of the
// replica acquiring it, and every write for a member (its namespace on its API server; its
// MemberCluster, Lease, Secret and Events on the hub) comes from the replica whose Lease term it falls in,
// no later than renewDeadline (+ latency) after that replica's last proof of life (a successful write of
// its own replica Lease, which keeps every member Lease it holds, or of a member Lease); a placed check may also be
// written by the placement Lease's holder of the moment. Every FleetBackupCheck write (status,
// finalizer) comes from the placement holder of the moment, one replica at a time. No run gets two Jobs.
//
// Lease timings 4 s / 3 s / 1 s. FLEETCHECK_KEEP_LOGS=1 keeps the hub logs and the audit logs.
import { cpSync, mkdtempSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  type HubProcess,
  installFleetcheck,
  type LocalCluster,
  type LocalFleet,
  startFleet,
  startHubProcess,
} from "../../clusters/local-fleet/index.ts"
import {
  defaultHubNamespace,
  labelBackupCheck,
  labelFleetBackupCheck,
  labelRun,
  memberLeaseName,
  namespacesAnnotation,
  placementLeaseName,
  registrationLabel,
  replicaLeaseName,
  shardLeaseLabel,
} from "../../src/api/names.ts"
import { assigneeOf } from "../../src/hub/sharding/assignment.ts"
import { backupChecks, fleetBackupChecks, leases, pathOf, secrets } from "../../src/kube/resources.ts"
import { type AuditedRequest, formatRequests, toMicros, writesTo } from "../support/audit.ts"
import { backupCheck } from "../support/backupcheck.ts"
import { sleep, waitUntil } from "../support/wait.ts"

const leaseDurationMs = 4_000
const renewDeadlineMs = 3_000
/** Request latency allowed between the fence's check and the API server receiving the request. */
const latencyAllowanceMs = 1_000
const hubArgs = [
  "--sharding",
  "true",
  "--leader-elect-lease-duration",
  "4s",
  "--leader-elect-renew-deadline",
  "3s",
  "--leader-elect-retry-period",
  "1s",
  "--probe-interval",
  "1s",
  "--status-interval",
  "1s",
  "--running-poll",
  "2s",
  "--drain-grace",
  "5s",
]
const memberCount = 32
const names = Array.from({ length: memberCount }, (_, i) => `m-${String(i).padStart(2, "0")}`)
const replicaNames = ["r1", "r2", "r3", "r4"]
const leasePrefix = memberLeaseName("")
/** Where placed checks live: one member per API server is scoped to it (scopes must not overlap). */
const placedNs = "fleet"
const fleetCheckName = "spread"
const backupCheckCrd = new URL("../../deploy/crds/fleetcheck.io_backupchecks.yaml", import.meta.url).pathname

interface Replica {
  readonly name: string
  readonly hub: HubProcess
  /** Its user on the hub API server. */
  readonly user: string
  readonly userAgent: string
}

interface Holding {
  readonly holder: string
  readonly acquireTime: string | undefined
}

describe("sharding across hub replicas, from the API servers' audit logs", () => {
  let fleet: LocalFleet
  let hubCluster: LocalCluster
  let memberServers: LocalCluster[]
  const replicas = new Map<string, Replica>()
  /** The placement members (scoped to `fleet`) and the API server each lives on. */
  const placementHomes = new Map<string, LocalCluster>()
  const serverOf = (m: string) =>
    placementHomes.get(m) ?? memberServers[names.indexOf(m) % memberServers.length]!
  /** The namespace a member is scoped to. */
  const scopeOf = (m: string) => (placementHomes.has(m) ? placedNs : m)
  const allMembers = () => [...names, ...placementHomes.keys()]
  let oneShots = 0
  /** Set by the SIGKILL test: the replica killed (the placement holder then) and the two left. */
  let killed: Replica
  let survivors: [Replica, Replica]

  const startReplica = async (name: string): Promise<Replica> => {
    const user = hubCluster.users[name]!
    const hub = await startHubProcess(fleet, { name, kubeconfigPath: user.kubeconfigPath, args: hubArgs })
    const r = { name, hub, user: user.name, userAgent: `fleetcheck-hub/${hub.identity}` }
    replicas.set(name, r)
    return r
  }
  const byIdentity = (identity: string) => [...replicas.values()].find((r) => r.hub.identity === identity)

  /** Every member Lease's holder ("" when released), by member. */
  const holdings = async (): Promise<Map<string, Holding>> => {
    const r = await hubCluster.api(
      "GET",
      `${pathOf(leases, { namespace: defaultHubNamespace })}?labelSelector=${encodeURIComponent(`${shardLeaseLabel}=member`)}`,
    )
    if (r.status !== 200) throw new Error(`listing Leases: ${r.status}`)
    return new Map(
      (r.body.items as any[]).map((l) => [
        String(l.metadata.name).slice(leasePrefix.length),
        { holder: l.spec?.holderIdentity ?? "", acquireTime: l.spec?.acquireTime },
      ]),
    )
  }
  const heldBy = (h: Map<string, Holding>, r: Replica) =>
    names.filter((m) => h.get(m)?.holder === r.hub.identity)

  /** Every member held by one of `live`, each of which holds some. */
  const spreadOver = async (live: ReadonlyArray<Replica>) => {
    const h = await holdings()
    const ids = new Set(live.map((r) => r.hub.identity))
    if (!names.every((m) => ids.has(h.get(m)?.holder ?? ""))) return undefined
    return live.every((r) => heldBy(h, r).length > 0) ? h : undefined
  }
  /** Every member held by its rendezvous assignee among `live` (the assignment has settled). */
  const assignedOver = async (live: ReadonlyArray<Replica>) => {
    const h = await spreadOver(live)
    const ids = live.map((r) => r.hub.identity)
    return h && names.every((m) => h.get(m)?.holder === assigneeOf(m, ids)) ? h : undefined
  }

  const register = async (
    m: string,
    server: LocalCluster,
    scope: string,
    labels: Record<string, string> = {},
  ) => {
    const res = await hubCluster.api("POST", pathOf(secrets, { namespace: defaultHubNamespace }), {
      apiVersion: "v1",
      kind: "Secret",
      metadata: {
        name: m,
        namespace: defaultHubNamespace,
        labels: { [registrationLabel]: "true", ...labels },
        annotations: { [namespacesAnnotation]: scope },
      },
      data: { kubeconfig: Buffer.from(server.kubeconfig).toString("base64") },
    })
    expect(res.status, JSON.stringify(res.body)).toBe(201)
  }
  /** The placement Lease's holder ("" when released or missing). */
  const placementHolder = async () => {
    const r = await hubCluster.api(
      "GET",
      pathOf(leases, { namespace: defaultHubNamespace, name: placementLeaseName }),
    )
    return r.status === 200 ? String(r.body.spec?.holderIdentity ?? "") : ""
  }
  const fbcPath = (name?: string) => pathOf(fleetBackupChecks, { namespace: defaultHubNamespace, name })
  const fleetCondition = (o: any, type: string) =>
    (o?.status?.conditions ?? []).find((c: any) => c.type === type)?.status as string | undefined
  /** The placed check of the FleetBackupCheck in a placement member, from that member's API server. */
  const placedCheck = async (m: string) => {
    const r = await serverOf(m).api(
      "GET",
      pathOf(backupChecks, { namespace: placedNs, name: fleetCheckName }),
    )
    return r.status === 200 &&
      r.body.metadata?.labels?.[labelFleetBackupCheck] === `${defaultHubNamespace}.${fleetCheckName}`
      ? r.body
      : undefined
  }
  const checkPath = (m: string, name?: string) => pathOf(backupChecks, { namespace: m, name })
  const verified = (o: any) =>
    (o?.status?.conditions ?? []).find((c: any) => c.type === "Verified")?.status as string | undefined

  /** A one-shot check in each of `members`, created now; resolves once all are Verified=True. */
  const freshChecksVerify = async (members: ReadonlyArray<string>, what: string) => {
    const name = `once-${++oneShots}`
    for (const m of members)
      expect((await serverOf(m).api("POST", checkPath(m), backupCheck(name, m))).status).toBe(201)
    const started = Date.now()
    await waitUntil(`${what}: ${name} Verified in ${members.length} members`, 60_000, async () => {
      for (const m of members) {
        const r = await serverOf(m).api("GET", checkPath(m, name))
        if (verified(r.body) !== "True") return false
      }
      return true
    })
    return Date.now() - started
  }

  /** The fleet as a replica's API shows it, reduced to what every replica must agree on. */
  const fleetOf = async (r: Replica) => {
    const res = await fetch(`${r.hub.url}/api/v1/fleet`)
    if (res.status !== 200) return { status: res.status, text: await res.text() }
    const v = (await res.json()) as any
    return {
      // true: `fleetcheck status` takes this replica's view as the fleet's (it exits 3 otherwise)
      leader: v.leader,
      summary: v.summary,
      clusters: (v.clusters as any[]).map((c) => ({
        name: c.name,
        conditions: (c.conditions as any[]).map((x) => `${x.type}=${x.status}/${x.reason}`),
        counts: c.counts,
      })),
      checks: (v.checks as any[]).map((c) => `${c.cluster}/${c.namespace}/${c.name}=${c.status}/${c.reason}`),
      fleetChecks: ((v.fleetChecks ?? []) as any[]).map(
        (f) =>
          `${f.name}=${f.verified.status}/${f.verified.reason} ${JSON.stringify(f.counts)} ${(f.clusters as any[]).map((c) => `${c.name}:${c.placement}:${c.status}`).join(",")}`,
      ),
    }
  }

  // ---- audit evidence ----------------------------------------------------------------------------
  /**
   * The audit logs read once: every write received up to 2 s before now, so each one's completion (its
   * response code) is in the log too, and the Lease terms and the writes judged by them agree.
   */
  const auditSnapshot = () => {
    const until = Date.now() - 2_000
    return {
      hub: writesTo(hubCluster, { until }),
      members: new Map(memberServers.map((c) => [c, writesTo(c, { until })])),
    }
  }
  type Snapshot = ReturnType<typeof auditSnapshot>
  /** The member a hub write is for, if any: its MemberCluster, Lease, Secret or Events. */
  const memberOfHubWrite = (w: AuditedRequest): string | undefined => {
    const n = w.name ?? ""
    if (w.resource === "memberclusters" || w.resource === "secrets")
      return allMembers().includes(n) ? n : undefined
    if (w.resource === "leases" && n.startsWith(leasePrefix)) return n.slice(leasePrefix.length)
    if (w.resource === "events") return allMembers().find((m) => n.startsWith(`${m}.`))
    return undefined
  }
  const replicaOfWrite = (w: AuditedRequest) =>
    [...replicas.values()].find((r) => w.user === r.user || w.userAgent === r.userAgent)

  /** One replica's run of consecutive successful writes of a Lease, by the time the hub received them. */
  type LeaseTerm = { replica: Replica; firstUs: number; lastUs: number }
  /** Each member's Lease terms from the hub's audit log: consecutive successful Lease writes by one replica. */
  const leaseTerms = (
    audit: Snapshot,
    leaseOf: (w: AuditedRequest) => string | undefined = memberOfHubWrite,
  ) => {
    const terms = new Map<string, Array<LeaseTerm>>()
    for (const w of audit.hub) {
      if (w.resource !== "leases" || !(w.code === 200 || w.code === 201)) continue
      const m = leaseOf(w)
      const r = replicaOfWrite(w)
      if (!m || !r) continue
      const list = terms.get(m) ?? []
      const last = list.at(-1)
      if (last && last.replica === r) last.lastUs = w.receivedUs
      else list.push({ replica: r, firstUs: w.receivedUs, lastUs: w.receivedUs })
      terms.set(m, list)
    }
    return terms
  }

  /** A Lease write that lost its race (create of an existing Lease, update of a stale copy): no effect. */
  const lostRace = (w: AuditedRequest) => w.resource === "leases" && w.code === 409
  /** The placement Lease's terms, by the same rule (a release write ends a term with its writer). */
  const placementTerms = (audit: Snapshot) =>
    leaseTerms(audit, (w) => (w.name === placementLeaseName ? placementLeaseName : undefined)).get(
      placementLeaseName,
    ) ?? []
  /** Every write for a member, on the hub and in its namespace on its API server, by replica. */
  const writesFor = (audit: Snapshot, m: string) => [
    ...audit.hub.filter((w) => memberOfHubWrite(w) === m && replicaOfWrite(w) && !lostRace(w)),
    ...((serverOf(m) === hubCluster ? audit.hub : audit.members.get(serverOf(m))) ?? []).filter(
      (w) => w.namespace === scopeOf(m) && replicaOfWrite(w),
    ),
  ]
  /**
   * A replica's proofs of life: its successful writes of its own replica Lease (renewals, which keep
   * every member Lease it holds) and of member Leases (acquisitions), by the time the hub received them.
   */
  const proofsOf = (audit: Snapshot, r: Replica) => {
    const own = replicaLeaseName(r.hub.identity)
    return audit.hub
      .filter(
        (w) =>
          w.resource === "leases" &&
          (w.code === 200 || w.code === 201) &&
          replicaOfWrite(w) === r &&
          (w.name === own || (w.name ?? "").startsWith(leasePrefix)),
      )
      .map((w) => w.receivedUs)
  }
  /** The last proof of life `r` sent that the hub received at or before `us`. */
  const lastProofBefore = (proofs: ReadonlyArray<number>, us: number) =>
    proofs.filter((p) => p <= us).at(-1) ?? Number.NEGATIVE_INFINITY
  /** Whether a write for a member falls in `r`'s term of its Lease, within the fence after r's last proof. */
  const inMemberTerm = (
    terms: ReadonlyArray<LeaseTerm>,
    proofs: ReadonlyArray<number>,
    r: Replica,
    w: AuditedRequest,
  ) => {
    const term = terms.filter((x) => x.firstUs <= w.receivedUs).at(-1)
    return (
      term?.replica === r &&
      w.receivedUs <= lastProofBefore(proofs, w.receivedUs) + (renewDeadlineMs + latencyAllowanceMs) * 1000
    )
  }
  /** How long before `w` the last of `r`'s terms of a member's Lease ended, for a fencing problem's message. */
  const describeLastOwn = (terms: ReadonlyArray<LeaseTerm>, r: Replica, w: AuditedRequest) => {
    const mine = terms.filter((x) => x.replica === r && x.firstUs <= w.receivedUs).at(-1)
    return mine ? `${Math.round((w.receivedUs - mine.lastUs) / 1000)} ms before` : "none before"
  }
  /** Whether a write falls in `r`'s term among `terms`, no later than the fence allows after its last renewal. */
  const inTerm = (terms: ReadonlyArray<LeaseTerm>, r: Replica, w: AuditedRequest) => {
    const term = terms.filter((x) => x.firstUs <= w.receivedUs).at(-1)
    return term?.replica === r && w.receivedUs <= term.lastUs + (renewDeadlineMs + latencyAllowanceMs) * 1000
  }

  /** Jobs by (namespace, check, run): more than one is a duplicate; so is a Job name created twice. */
  const duplicateJobs = async () => {
    const problems: string[] = []
    for (const s of memberServers) {
      const r = await s.api("GET", `/apis/batch/v1/jobs?labelSelector=${encodeURIComponent(labelRun)}`)
      const runs = new Map<string, string[]>()
      for (const j of r.body.items as any[]) {
        const key = `${j.metadata.namespace}/${j.metadata.labels[labelBackupCheck]}/${j.metadata.labels[labelRun]}`
        runs.set(key, [...(runs.get(key) ?? []), j.metadata.name])
      }
      for (const [run, jobs] of runs)
        if (jobs.length > 1) problems.push(`${s.name} ${run}: ${jobs.join(", ")}`)
      const created = new Map<string, number>()
      for (const w of writesTo(s, { resource: "jobs", verb: "create" }))
        if (w.code === 201 && !w.subresource)
          created.set(`${w.namespace}/${w.name}`, (created.get(`${w.namespace}/${w.name}`) ?? 0) + 1)
      for (const [job, n] of created) if (n > 1) problems.push(`${s.name} ${job} created ${n} times`)
    }
    return problems
  }

  beforeAll(async () => {
    fleet = await startFleet({
      clusters: [
        { name: "hub", workloads: false, controllerManager: false, users: replicaNames },
        "member-a",
        "member-b",
      ],
      audit: true,
    })
    hubCluster = fleet.cluster("hub")
    memberServers = [fleet.cluster("member-a"), fleet.cluster("member-b")]
    await installFleetcheck(hubCluster, memberServers)
    for (const m of names) {
      const server = serverOf(m)
      expect((await server.api("POST", "/api/v1/namespaces", { metadata: { name: m } })).status).toBe(201)
      expect((await server.api("POST", checkPath(m), backupCheck("once-0", m))).status).toBe(201)
      await register(m, server, m)
    }
  })

  afterAll(async () => {
    for (const r of replicas.values()) if (!r.hub.process.hasExited()) r.hub.process.signal("SIGKILL")
    if (fleet && process.env.FLEETCHECK_KEEP_LOGS === "1") {
      const keep = mkdtempSync(join(tmpdir(), "fleetcheck-sharding-"))
      cpSync(join(fleet.runDir, "logs"), join(keep, "logs"), { recursive: true })
      for (const c of fleet.clusters)
        if (c.auditLogPath) cpSync(c.auditLogPath, join(keep, `${c.name}-audit.log`))
      writeFileSync(
        join(keep, "replicas.json"),
        JSON.stringify([...replicas.values()].map((r) => [r.name, r.hub.identity])),
      )
      console.log(`logs kept in ${keep}`)
    }
    await fleet?.stop()
  })

  it("three replicas split the members, one Lease holder each, and every check verifies", async () => {
    const started = Date.now()
    const three = await Promise.all(["r1", "r2", "r3"].map(startReplica))
    const h = await waitUntil("every member held by its assignee among 3 replicas", 60_000, () =>
      assignedOver(three),
    )
    console.log(
      `3 replicas: every member held ${Date.now() - started} ms after start: ${three.map((r) => `${r.name} ${heldBy(h, r).length}`).join(", ")}`,
    )
    await waitUntil("every first check Verified", 90_000, async () => {
      for (const m of names)
        if (verified((await serverOf(m).api("GET", checkPath(m, "once-0"))).body) !== "True") return false
      return true
    })
  }, 200_000)

  it("one replica places a FleetBackupCheck into members other replicas work; every replica shows it", async () => {
    const three = ["r1", "r2", "r3"].map((n) => replicas.get(n)!)
    const ids = three.map((r) => r.hub.identity)
    // Two members on two API servers that two different replicas work (rendezvous over the live three),
    // and one on the hub's API server selected only after the placement holder is killed.
    let k = 0
    while (assigneeOf(`pl-a${k}`, ids) === assigneeOf(`pl-b${k}`, ids)) k++
    const [a, b, later] = [`pl-a${k}`, `pl-b${k}`, "pl-hub"]
    placementHomes.set(a, memberServers[0]!)
    placementHomes.set(b, memberServers[1]!)
    placementHomes.set(later, hubCluster)
    const crd = await hubCluster.kubectl(["apply", "--server-side", "-f", backupCheckCrd])
    expect(crd.code, crd.stderr).toBe(0)
    await waitUntil("BackupChecks served by the hub's API server", 30_000, async () => {
      return (await hubCluster.api("GET", pathOf(backupChecks, { namespace: placedNs }))).status === 200
    })
    for (const server of [...memberServers, hubCluster])
      expect((await server.api("POST", "/api/v1/namespaces", { metadata: { name: placedNs } })).status).toBe(
        201,
      )
    await register(a, serverOf(a), placedNs, { placement: "on" })
    await register(b, serverOf(b), placedNs, { placement: "on" })
    await register(later, hubCluster, placedNs, { placement: "later" })
    const created = Date.now()
    const fbc = {
      apiVersion: "fleetcheck.io/v1alpha1",
      kind: "FleetBackupCheck",
      metadata: { name: fleetCheckName, namespace: defaultHubNamespace },
      spec: {
        clusterSelector: { matchLabels: { placement: "on" } },
        template: { metadata: { namespace: placedNs }, spec: backupCheck(fleetCheckName, placedNs).spec },
      },
    }
    expect((await hubCluster.api("POST", fbcPath(), fbc)).status).toBe(201)
    const status = await waitUntil("the FleetBackupCheck verified in both members", 60_000, async () => {
      const o = (await hubCluster.api("GET", fbcPath(fleetCheckName))).body
      return fleetCondition(o, "FleetVerified") === "True" ? o.status : undefined
    })
    expect(status.counts).toMatchObject({ selected: 2, placed: 2, verified: 2 })
    for (const m of [a, b]) expect(await placedCheck(m), `${m}: placed check`).toBeDefined()
    const h = await holdings()
    const holder = await placementHolder()
    console.log(
      `placement: ${fleetCheckName} verified in ${a} (worked by ${byIdentity(h.get(a)!.holder)?.name}) and ${b} (worked by ${byIdentity(h.get(b)!.holder)?.name}) ${Date.now() - created} ms after creation, placed by ${byIdentity(holder)?.name}`,
    )
    expect(h.get(a)?.holder).not.toBe(h.get(b)?.holder)
    expect(ids).toContain(holder)
    // Every replica shows the aggregate the holder wrote, and its dashboard says which replica it is.
    await waitUntil("every replica shows the FleetBackupCheck verified", 20_000, async () => {
      for (const r of three) {
        const v = (await (await fetch(`${r.hub.url}/api/v1/fleet`)).json()) as any
        const f = (v.fleetChecks ?? []).find((x: any) => x.name === fleetCheckName)
        if (f?.verified.status !== "True" || f.counts.verified !== 2) return false
      }
      return true
    })
    const sorted = [...ids].sort()
    for (const r of three) {
      const page = await (await fetch(`${r.hub.url}/`)).text()
      const working = [...(await holdings()).values()].filter((x) => x.holder === r.hub.identity).length
      const said = `replica ${sorted.indexOf(r.hub.identity) + 1} of 3, working ${working} of ${allMembers().length} members${r.hub.identity === holder ? ", placing FleetBackupChecks" : ""})`
      expect(page, r.name).toContain(said)
      expect(page, r.name).not.toContain("(leader)")
    }
  }, 120_000)

  it("SIGKILL the placement holder: its members move once their Leases expire and verify there; another replica places", async () => {
    const holderId = await placementHolder()
    killed = byIdentity(holderId)!
    expect(killed).toBeDefined()
    survivors = ["r1", "r2", "r3"].map((n) => replicas.get(n)!).filter((r) => r !== killed) as [
      Replica,
      Replica,
    ]
    const [r2, r3] = survivors
    const r1 = killed
    const before = await holdings()
    const lost = heldBy(before, r1)
    expect(lost.length).toBeGreaterThan(0)
    r1.hub.process.signal("SIGKILL")
    const killedAt = Date.now()
    await r1.hub.process.exited
    // A member selected from now on gets its check from the new placement holder.
    const later = "pl-hub"
    const secret = await hubCluster.api(
      "GET",
      pathOf(secrets, { namespace: defaultHubNamespace, name: later }),
    )
    secret.body.metadata.labels.placement = "on"
    expect(
      (
        await hubCluster.api(
          "PUT",
          pathOf(secrets, { namespace: defaultHubNamespace, name: later }),
          secret.body,
        )
      ).status,
    ).toBe(200)
    const after = await waitUntil(
      `${r1.name}'s members held by ${r2.name} or ${r3.name}`,
      30_000,
      () => spreadOver([r2, r3]),
      100,
    )
    const movedMs = Date.now() - killedAt
    const acquired = lost
      .map((m) => toMicros(after.get(m)!.acquireTime!) / 1000 - killedAt)
      .sort((a, b) => a - b)
    console.log(
      `SIGKILL: ${lost.length} members moved; acquired ${Math.round(acquired[0]!)}–${Math.round(acquired.at(-1)!)} ms after the kill (all seen held ${movedMs} ms after), lease ${leaseDurationMs} ms`,
    )
    // Not before the Lease could expire, and within a lease duration plus a round or two.
    expect(acquired[0]!).toBeGreaterThan(0)
    expect(acquired.at(-1)!).toBeLessThan(leaseDurationMs + 4_000)
    // Only the killed replica's members moved: everyone else's holder stayed, and the result is the assignment over two.
    const settled = await waitUntil(
      `every member held by its assignee among ${r2.name}, ${r3.name}`,
      30_000,
      () => assignedOver([r2, r3]),
    )
    for (const m of names.filter((x) => !lost.includes(x)))
      expect(settled.get(m)?.holder, `${m} moved though ${r1.name} did not hold it`).toBe(
        before.get(m)?.holder,
      )
    const tookMs = await freshChecksVerify(lost, "after SIGKILL")
    console.log(`SIGKILL: fresh checks in the moved members verified ${tookMs} ms after creation`)
    const newHolder = await waitUntil("the placement Lease held by a survivor", 30_000, async () => {
      const h = await placementHolder()
      return survivors.some((r) => r.hub.identity === h) ? h : undefined
    })
    await waitUntil(`${later}: its placed check, and the status lists it placed`, 30_000, async () => {
      if (!(await placedCheck(later))) return false
      const o = (await hubCluster.api("GET", fbcPath(fleetCheckName))).body
      return (o.status?.clusters ?? []).some((c: any) => c.name === later && c.placement === "Placed")
    })
    console.log(
      `SIGKILL: placement taken over by ${byIdentity(newHolder)?.name}; ${later}'s placed check written and listed Placed ${Date.now() - killedAt} ms after the kill`,
    )
  }, 120_000)

  it("a replica joins: it takes a share, each handover within the lease duration, and they verify there", async () => {
    const [r2, r3] = survivors
    const before = await holdings()
    const joinedAt = Date.now()
    const r4 = await startReplica("r4")
    const settled = await waitUntil(
      "every member held by its assignee among the survivors and r4",
      60_000,
      () => assignedOver([r2, r3, r4]),
    )
    const moved = names.filter((m) => before.get(m)?.holder !== settled.get(m)?.holder)
    console.log(
      `join: r4 holds ${heldBy(settled, r4).length} of ${memberCount} ${Date.now() - joinedAt} ms after it started; ${moved.length} members moved`,
    )
    for (const m of moved) expect(settled.get(m)?.holder).toBe(r4.hub.identity)
    // The gap of each handover: the old holder's release write → r4's acquiring write, on the hub.
    await sleep(2_000)
    const terms = leaseTerms(auditSnapshot())
    const gaps = moved.map((m) => {
      const t = terms.get(m) ?? []
      const i = t.findIndex((x) => x.replica === r4)
      expect(i, `${m}: r4's term in the audit log`).toBeGreaterThan(0)
      return { m, from: t[i - 1]!.replica.name, ms: (t[i]!.firstUs - t[i - 1]!.lastUs) / 1000 }
    })
    gaps.sort((a, b) => a.ms - b.ms)
    const shown = gaps.map((g) => `${g.m} from ${g.from} ${Math.round(g.ms)} ms`).join(", ")
    console.log(`join: handover gaps (old holder's last Lease write → r4's acquiring write): ${shown}`)
    for (const g of gaps) expect(g.ms, shown).toBeLessThan(leaseDurationMs)
    const tookMs = await freshChecksVerify(moved, "after the join")
    console.log(`join: fresh checks in the moved members verified ${tookMs} ms after creation`)
  }, 120_000)

  it("SIGSTOP a replica 30 s: its members move once its Leases expire; after SIGCONT it writes nothing for them", async () => {
    const [r2, r3] = survivors
    const r4 = replicas.get("r4")!
    const before = await holdings()
    const frozen = heldBy(before, r2)
    expect(frozen.length).toBeGreaterThan(0)
    r2.hub.process.freeze()
    const frozenAt = Date.now()
    let taken: Map<string, Holding>
    try {
      taken = await waitUntil(`${r2.name}'s members held by ${r3.name} or ${r4.name}`, 30_000, async () => {
        const h = await holdings()
        return frozen.every((m) => [r3, r4].some((r) => h.get(m)?.holder === r.hub.identity)) ? h : undefined
      })
      console.log(
        `SIGSTOP: ${frozen.length} members of ${r2.name} held by others ${Date.now() - frozenAt} ms after the freeze`,
      )
      await sleep(Math.max(0, frozenAt + 30_000 - Date.now()))
    } finally {
      r2.hub.process.thaw()
    }
    // The thawed replica runs again, sees its Leases gone, and joins again (it may win members back).
    await waitUntil(`${r2.name} to log its lost member Leases`, 20_000, () =>
      r2.hub.logLines().some((l) => l.message.startsWith("member Lease not kept")),
    )
    await sleep(5_000)
    const audit = auditSnapshot()
    const proofs = proofsOf(audit, r2)
    for (const m of frozen) {
      const terms = leaseTerms(audit).get(m) ?? []
      const i = terms.findIndex((t) => t.replica !== r2 && t.firstUs >= frozenAt * 1000)
      expect(i, `${m}: a new holder's term after the freeze`).toBeGreaterThan(0)
      const old = terms[i - 1]!
      expect(old.replica).toBe(r2)
      // Taken by expiry: a whole lease duration after r2's last proof of life reached the API server.
      const lastProof = lastProofBefore(proofs, terms[i]!.firstUs)
      expect(terms[i]!.firstUs - lastProof).toBeGreaterThanOrEqual(leaseDurationMs * 1000)
      const back = terms.slice(i).find((t) => t.replica === r2)?.firstUs ?? Number.POSITIVE_INFINITY
      const late = writesFor(audit, m).filter(
        (w) =>
          replicaOfWrite(w) === r2 &&
          w.receivedUs > lastProof + (renewDeadlineMs + latencyAllowanceMs) * 1000 &&
          w.receivedUs < back,
      )
      expect(formatRequests(late, 20), `${m}: ${r2.name} wrote after its Lease term ended`).toBe("")
    }
    expect(taken!.size).toBe(allMembers().length)
    const tookMs = await freshChecksVerify(frozen, "after SIGSTOP")
    console.log(`SIGSTOP: fresh checks in ${r2.name}'s former members verified ${tookMs} ms after creation`)
  }, 150_000)

  it("every live replica answers for the whole fleet, the same", async () => {
    const live = [...survivors, replicas.get("r4")!]
    const views = await waitUntil("every replica's fleet view equal", 30_000, async () => {
      const vs = await Promise.all(live.map(fleetOf))
      const first = JSON.stringify(vs[0])
      return vs.every((v) => JSON.stringify(v) === first) ? vs : undefined
    }).catch(async (e) => {
      // Only what differs from the first replica's view, item by item.
      const vs = (await Promise.all(live.map(fleetOf))) as Array<Record<string, unknown>>
      const differing = vs.map((v) =>
        Object.keys(v).flatMap((k) => {
          const mine = v[k]
          const first = vs[0]![k]
          if (JSON.stringify(mine) === JSON.stringify(first)) return []
          if (!Array.isArray(mine) || !Array.isArray(first)) return [`${k}: ${JSON.stringify(mine)}`]
          const other = new Set(first.map((x) => JSON.stringify(x)))
          return [
            `${k}: ${mine
              .map((x) => JSON.stringify(x))
              .filter((x) => !other.has(x))
              .join(" ")}`,
          ]
        }),
      )
      throw new Error(
        `${String(e)}\n${differing.map((d, i) => `${live[i]!.name}: ${d.join("\n  ").slice(0, 3000)}`).join("\n")}\n${live[0]!.name}'s fleetChecks: ${JSON.stringify(vs[0]!.fleetChecks)}`,
      )
    })
    const v = views[0] as Awaited<ReturnType<typeof fleetOf>> & { clusters: unknown[] }
    expect(v.clusters).toHaveLength(allMembers().length)
    expect((v as any).fleetChecks).toHaveLength(1)
    expect((v as any).leader).toBe(true)
    for (const r of live) expect((await fetch(`${r.hub.url}/readyz`)).status).toBe(200)
    console.log(`views: ${live.length} replicas agree: ${JSON.stringify((v as any).summary)}`)
  }, 60_000)

  it("over the whole run: each member's writes came from its Lease holder of the moment; no duplicate Job", async () => {
    const audit = auditSnapshot()
    const terms = leaseTerms(audit)
    const placing = placementTerms(audit)
    const problems: string[] = []
    let counted = 0
    let placedWrites = 0
    let closest: { us: number; what: string } | undefined
    const proofs = new Map([...replicas.values()].map((r) => [r, proofsOf(audit, r)]))
    for (const m of allMembers()) {
      const t = terms.get(m) ?? []
      expect(t.length, `${m}: Lease terms`).toBeGreaterThan(0)
      for (const w of writesFor(audit, m)) {
        counted++
        const r = replicaOfWrite(w)!
        // The placed check itself (not its status) is written by the placement holder of the moment.
        if (
          w.resource === "backupchecks" &&
          w.name === fleetCheckName &&
          w.subresource === undefined &&
          inTerm(placing, r, w) &&
          !inMemberTerm(t, proofs.get(r)!, r, w)
        ) {
          placedWrites++
          continue
        }
        // The term this write falls in: the last one started at or before it.
        const term = t.filter((x) => x.firstUs <= w.receivedUs).at(-1)
        // How close a write of the work came to the next holder's term (a release is a Lease write, and
        // the next holder's acquiring write follows it at once): the margin the fence left.
        const next = t.find((x) => x.firstUs > w.receivedUs && x.replica !== r)
        if (
          next &&
          term?.replica === r &&
          w.resource !== "leases" &&
          (closest === undefined || next.firstUs - w.receivedUs < closest.us)
        )
          closest = {
            us: next.firstUs - w.receivedUs,
            what: `${m}: ${r.name} → ${next.replica.name}, ${w.verb} ${w.resource}${w.subresource ? `/${w.subresource}` : ""}`,
          }
        if (!term || term.replica !== r)
          problems.push(
            `${m}: ${r.name} wrote outside its term (holder then: ${term?.replica.name ?? "none"}, its term from ${term ? Math.round((w.receivedUs - term.firstUs) / 1000) : "-"} ms before; ${r.name}'s last Lease write for it ${describeLastOwn(t, r, w)}): ${formatRequests([w])}`,
          )
        else if (!inMemberTerm(t, proofs.get(r)!, r, w))
          problems.push(
            `${m}: ${r.name} wrote ${Math.round((w.receivedUs - lastProofBefore(proofs.get(r)!, w.receivedUs)) / 1000)} ms after its last proof of life: ${formatRequests([w])}`,
          )
      }
    }
    // FleetBackupCheck writes (status, finalizer): the placement holder's of the moment, one at a time.
    const fleetWrites = audit.hub.filter((w) => w.resource === "fleetbackupchecks" && replicaOfWrite(w))
    for (const w of fleetWrites)
      if (!inTerm(placing, replicaOfWrite(w)!, w))
        problems.push(
          `${replicaOfWrite(w)!.name} wrote a FleetBackupCheck outside its placement term: ${formatRequests([w])}`,
        )
    const fleetWriters = [...new Set(fleetWrites.map((w) => replicaOfWrite(w)!.name))]
    expect(fleetWrites.length).toBeGreaterThan(0)
    console.log(
      `audit: ${fleetWrites.length} FleetBackupCheck writes by ${fleetWriters.join(", ")} within ${placing.length} placement Lease terms (${placing.map((x) => x.replica.name).join(" → ")}); ${placedWrites} placed-check writes by the placement holder in members it did not work`,
    )
    const races = audit.hub.filter((w) => lostRace(w) && memberOfHubWrite(w) !== undefined).length
    const holders = new Set([...terms.values()].flatMap((t) => t.map((x) => x.replica.name)))
    console.log(
      `audit: ${counted} writes for ${allMembers().length} members (besides ${races} Lease writes that lost a race: 409) checked against ${[...terms.values()].reduce((n, t) => n + t.length, 0)} Lease terms of ${[...holders].sort().join(", ")}`,
    )
    console.log(
      `audit: the closest a write came to the next holder's acquiring write: ${closest ? `${Math.round(closest.us / 1000)} ms (${closest.what})` : "no handover"}`,
    )
    // In full on stderr: the assertion's diff shortens a long string to its first line.
    if (problems.length > 0)
      console.error(`fencing problems (${problems.length}):\n${problems.slice(0, 30).join("\n")}`)
    // The first problem leads the message, so a log cut to its tail (the suite prints each failure's
    // first line) still names the write, its time and the holder then.
    expect(problems.length, `fencing problems: ${problems.slice(0, 3).join(" | ")}`).toBe(0)
    expect((await duplicateJobs()).join("\n"), "duplicate restore Jobs").toBe("")
    // The replicas are told apart in every log: each one's writes are there.
    for (const r of replicas.values())
      expect(writesTo(hubCluster, { user: r.user }).length).toBeGreaterThan(0)
    for (const [, r] of replicas) expect(byIdentity(r.hub.identity)).toBe(r)
  })
})
