// Leader election against a real kube-apiserver. Each elector has its own client, identity and TCP
// proxy to the apiserver, so one elector can be cut off (connections refused, or blackholed so that
// requests hang) while the other keeps talking; freezing the apiserver stalls both. Leader work is a
// scoped fiber that ticks every 50 ms and records when its finalizer ran, so overlaps would show.
import { KubeConfig } from "@kubernetes/client-node"
import { Effect, Exit, Fiber, Logger, References, Scope } from "effect"
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest"
import {
  type LocalCluster,
  type LocalFleet,
  renderKubeconfig,
  startFleet,
} from "../../clusters/local-fleet/index.ts"
import { hubLeaseName } from "../../src/api/names.ts"
import { type LeaderElector, type Lease, makeLeaderElector } from "../../src/hub/leader-election.ts"
import { type KubeClient, makeKubeClient } from "../../src/kube/client.ts"
import { startProxy, type TcpProxy } from "../support/tcp-proxy.ts"
import { sleep, waitUntil } from "../support/wait.ts"

const namespace = "fleetcheck-system"
const fast = { leaseDurationMs: 3_000, renewDeadlineMs: 2_000, retryPeriodMs: 500 }

const now = () => performance.now()
/** waitUntil's probe interval: short, since tests time how soon leadership changes hands. */
const pollMs = 20

interface Mark {
  readonly id: string
  readonly kind: "start" | "tick" | "stop"
  readonly at: number
}

interface LogLine {
  readonly message: string
  readonly annotations: Record<string, unknown>
}

interface TestElector {
  readonly id: string
  readonly elector: LeaderElector
  readonly proxy: TcpProxy
  /** Start times of this elector's successful Lease writes (create, renew, take over, release). */
  readonly writes: number[]
  readonly logs: LogLine[]
  /** Interrupts `run` as SIGTERM would; resolves once leader work stopped and the lease was released. */
  readonly stop: () => Promise<void>
}

/** Timestamps successful writes at their start, the instant the elector's own deadline counts from. */
const recordingWrites = (inner: KubeClient, writes: number[]): KubeClient => ({
  ...inner,
  request: <T>(req: Parameters<KubeClient["request"]>[0]) => {
    const started = now()
    return inner
      .request<T>(req)
      .pipe(Effect.tap(() => Effect.sync(() => void (req.method !== "GET" && writes.push(started)))))
  },
})

/** Leader work: a scoped fiber ticking every 50 ms; the scope's finalizer records the stop. */
const leaderWork = (id: string, marks: Mark[]) =>
  Effect.gen(function* () {
    marks.push({ id, kind: "start", at: now() })
    yield* Effect.addFinalizer(() => Effect.sync(() => marks.push({ id, kind: "stop", at: now() })))
    yield* Effect.forkScoped(
      Effect.forever(
        Effect.andThen(
          Effect.sync(() => marks.push({ id, kind: "tick", at: now() })),
          Effect.sleep(50),
        ),
      ),
    )
  })

describe("leader election against a real apiserver", () => {
  let fleet: LocalFleet
  let hub: LocalCluster
  let hubPort: number
  const running: TestElector[] = []

  const startElector = async (
    id: string,
    lease: string,
    marks: Mark[],
    timings: Partial<typeof fast> = fast,
    clientOptions: { readonly replaceSuspectConnection?: boolean } = {},
  ): Promise<TestElector> => {
    const proxy = await startProxy(hubPort)
    const kubeConfig = new KubeConfig()
    kubeConfig.loadFromString(
      renderKubeconfig("hub", `https://127.0.0.1:${proxy.port}`, hub.caPem, hub.adminToken),
    )
    const writes: number[] = []
    const logs: LogLine[] = []
    const capture = Logger.layer([
      Logger.make((o) => {
        logs.push({
          message: Array.isArray(o.message) ? o.message.map(String).join(" ") : String(o.message),
          annotations: { ...o.fiber.getRef(References.CurrentLogAnnotations) },
        })
      }),
    ])
    const scope = Effect.runSync(Scope.make())
    const client = await Effect.runPromise(
      makeKubeClient({ cluster: "hub", kubeConfig, requestTimeoutMs: 5_000, ...clientOptions }).pipe(
        Scope.provide(scope),
      ),
    )
    const elector = await Effect.runPromise(
      makeLeaderElector({
        client: recordingWrites(client, writes),
        namespace,
        name: lease,
        identity: id,
        ...fast,
        ...timings,
      }),
    )
    const fiber = Effect.runFork(elector.run(leaderWork(id, marks)).pipe(Effect.provide(capture)))
    let stopped: Promise<void> | undefined
    const e: TestElector = {
      id,
      elector,
      proxy,
      writes,
      logs,
      stop: () => {
        stopped ??= (async () => {
          await Effect.runPromise(Fiber.interrupt(fiber))
          await Effect.runPromise(Scope.close(scope, Exit.void))
          await proxy.close()
        })()
        return stopped
      },
    }
    running.push(e)
    return e
  }

  const getLease = async (name: string): Promise<Lease> => {
    const r = await hub.api("GET", `/apis/coordination.k8s.io/v1/namespaces/${namespace}/leases/${name}`)
    if (r.status !== 200) throw new Error(`GET lease ${name}: ${r.status}`)
    return r.body as Lease
  }

  const leaders = (es: ReadonlyArray<TestElector>) => es.filter((e) => e.elector.isLeader())
  const first = (marks: ReadonlyArray<Mark>, id: string, kind: Mark["kind"], after = 0) =>
    marks.find((m) => m.id === id && m.kind === kind && m.at >= after)?.at
  const last = (marks: ReadonlyArray<Mark>, id: string, kind: Mark["kind"]) =>
    marks.filter((m) => m.id === id && m.kind === kind).at(-1)?.at
  const logged = (e: TestElector, message: string) =>
    e.logs.some((l) => l.message.startsWith(message) && l.annotations.identity === e.id)

  /** Samples for `ms`: never two leaders, and once settled exactly one, named by the Lease. */
  const assertSingleLeader = async (es: ReadonlyArray<TestElector>, lease: string, ms: number) => {
    const until = now() + ms
    let samples = 0
    while (now() < until) {
      const current = leaders(es)
      expect(current.length).toBe(1)
      if (samples % 10 === 0) {
        const l = await getLease(lease)
        // isLeader() flips before the lease changes hands, so re-check after the read.
        if (leaders(es)[0] === current[0]) expect(l.spec?.holderIdentity).toBe(current[0]!.id)
      }
      samples++
      await sleep(25)
    }
    return leaders(es)[0]!
  }

  beforeAll(async () => {
    fleet = await startFleet({ clusters: [{ name: "hub", workloads: false, controllerManager: false }] })
    hub = fleet.cluster("hub")
    hubPort = Number(new URL(hub.server).port)
    const r = await hub.api("POST", "/api/v1/namespaces", {
      apiVersion: "v1",
      kind: "Namespace",
      metadata: { name: namespace },
    })
    if (r.status !== 201) throw new Error(`creating namespace: ${r.status}`)
  })

  afterEach(async () => {
    await Promise.all(running.splice(0).map((e) => e.stop()))
  })

  afterAll(async () => {
    await fleet?.stop()
  })

  it("two electors: one leader at every sampled moment, named by the Lease; a release hands over at once", async () => {
    const marks: Mark[] = []
    const a = await startElector("hub-a", hubLeaseName, marks)
    const b = await startElector("hub-b", hubLeaseName, marks)
    await waitUntil("a leader", 5_000, () => leaders([a, b]).length === 1, pollMs)
    const leader = await assertSingleLeader([a, b], hubLeaseName, 3_000)
    const standby = leader === a ? b : a
    const lease = await getLease(hubLeaseName)
    expect(lease.spec?.leaseDurationSeconds).toBe(3)
    expect(lease.spec?.renewTime).toMatch(/\.\d{6}Z$/)
    const transitions = lease.spec?.leaseTransitions ?? 0

    const stopAt = now()
    await leader.stop()
    await waitUntil("the standby to lead", 5_000, () => standby.elector.isLeader(), pollMs)
    const takeoverMs = first(marks, standby.id, "start", stopAt)! - stopAt
    console.log(`takeover after a released lease (3 s / 2 s / 0.5 s): ${takeoverMs.toFixed(0)} ms`)
    // A standby that had to wait for expiry would need ≥ leaseDuration since its last observation.
    expect(takeoverMs).toBeLessThan(fast.leaseDurationMs)
    expect(logged(leader, "released lease")).toBe(true)
    expect(logged(standby, "became leader")).toBe(true)
    // The old leader's work (ticks, finalizer) ended before the new leader's began.
    expect(last(marks, leader.id, "tick")!).toBeLessThan(first(marks, standby.id, "start", stopAt)!)
    expect(last(marks, leader.id, "stop")!).toBeLessThan(first(marks, standby.id, "start", stopAt)!)
    const after = await getLease(hubLeaseName)
    expect(after.spec?.holderIdentity).toBe(standby.id)
    expect(after.spec?.leaseTransitions).toBe(transitions + 1)
  })

  for (const how of ["refuse", "blackhole"] as const) {
    it(`a leader cut off (${how}) stops before its lease can expire; the standby leads only after; they converge`, async () => {
      const lease = `le-cut-${how}`
      const marks: Mark[] = []
      const a = await startElector("cut-a", lease, marks)
      await waitUntil("a to lead", 5_000, () => a.elector.isLeader(), pollMs)
      const b = await startElector("cut-b", lease, marks)
      await sleep(1_500)
      expect(leaders([a, b])).toEqual([a])

      const cutAt = now()
      a.proxy.cut(how)
      await waitUntil("b to lead", 10_000, () => b.elector.isLeader(), pollMs)
      const lastRenew = a.writes.filter((t) => t < cutAt).at(-1)!
      const aStop = first(marks, a.id, "stop")!
      const bStart = first(marks, b.id, "start")!
      console.log(
        `${how}: a stopped ${(aStop - lastRenew).toFixed(0)} ms after its last renewal (deadline 2000, lease 3000); ` +
          `b led ${(bStart - lastRenew).toFixed(0)} ms after it`,
      )
      expect(a.writes.every((t) => t < cutAt)).toBe(true)
      expect(aStop - lastRenew).toBeLessThan(fast.leaseDurationMs)
      expect(aStop - lastRenew).toBeGreaterThanOrEqual(fast.renewDeadlineMs - 50)
      expect(a.elector.isLeader()).toBe(false)
      expect(logged(a, "lost lease")).toBe(true)
      expect(last(marks, a.id, "tick")!).toBeLessThan(bStart)
      expect(aStop).toBeLessThan(bStart)
      expect((await getLease(lease)).spec?.leaseTransitions).toBe(1)

      a.proxy.restore()
      // a comes back as a standby: it sees b renewing and stays out.
      expect(await assertSingleLeader([a, b], lease, 2_500)).toBe(b)
      expect(first(marks, a.id, "start", bStart)).toBeUndefined()
    })
  }

  it("a connection that goes silently dead: the Lease client's leader renews on a new one within the renew deadline, a default client's loses the lease", async () => {
    // The hub's Lease client (replaceSuspectConnection) against a default one, each leading its own
    // Lease through its own proxy; then every connection open through the proxies goes silent. A
    // default client waits for the PING timeout (15 s) before it opens a new connection, longer than
    // the renew deadline.
    const marks: Mark[] = []
    // Room for one timed-out attempt (1.5 s) and a retry on a new connection within the renew deadline.
    const timings = { leaseDurationMs: 4_000, renewDeadlineMs: 3_000, retryPeriodMs: 500 }
    const lease = await startElector("dead-lease", "le-dead-lease", marks, timings, {
      replaceSuspectConnection: true,
    })
    const plain = await startElector("dead-plain", "le-dead-plain", marks, timings)
    await waitUntil("both to lead", 5_000, () => lease.elector.isLeader() && plain.elector.isLeader(), pollMs)
    await sleep(1_000)
    const accepted = lease.proxy.accepted()
    const stalledAt = now()
    lease.proxy.stallOpen()
    plain.proxy.stallOpen()
    await sleep(2 * timings.renewDeadlineMs)
    const renewedAfter = lease.writes.filter((t) => t > stalledAt)
    console.log(
      `silently dead connection: the Lease client renewed ${renewedAfter.length} times in ${2 * timings.renewDeadlineMs} ms over ${lease.proxy.accepted() - accepted} new connection(s), the first ${(renewedAfter[0]! - stalledAt).toFixed(0)} ms after`,
    )
    // From outside the elector: a new connection was opened, and the API server has the Lease renewed
    // by it within the last renew deadline.
    expect(lease.proxy.accepted()).toBeGreaterThan(accepted)
    const l = await getLease("le-dead-lease")
    expect(l.spec?.holderIdentity).toBe(lease.id)
    expect(Date.now() - Date.parse(l.spec!.renewTime!)).toBeLessThan(timings.renewDeadlineMs)
    expect(first(marks, lease.id, "stop")).toBeUndefined()
    // The default client never got a renewal through and stopped leading.
    expect(plain.writes.filter((t) => t > stalledAt)).toEqual([])
    expect(plain.elector.isLeader()).toBe(false)
    expect(first(marks, plain.id, "stop")).toBeDefined()
  })

  it("a frozen apiserver: the leader stops before its lease can expire; after the thaw one leader remains", async () => {
    const lease = "le-freeze"
    const marks: Mark[] = []
    const a = await startElector("frz-a", lease, marks)
    await waitUntil("a to lead", 5_000, () => a.elector.isLeader(), pollMs)
    const b = await startElector("frz-b", lease, marks)
    await sleep(1_500)
    const frozenAt = now()
    hub.freezeApiServer()
    try {
      await waitUntil(
        "a to stop leading",
        5_000,
        () => !a.elector.isLeader() && first(marks, a.id, "stop") !== undefined,
        pollMs,
      )
      await sleep(1_500)
      expect(leaders([a, b])).toEqual([])
    } finally {
      hub.thawApiServer()
    }
    const lastRenew = a.writes.filter((t) => t < frozenAt).at(-1)!
    const aStop = first(marks, a.id, "stop")!
    console.log(`frozen apiserver: a stopped ${(aStop - lastRenew).toFixed(0)} ms after its last renewal`)
    expect(aStop - lastRenew).toBeLessThan(fast.leaseDurationMs)
    await waitUntil("one leader after the thaw", 10_000, () => leaders([a, b]).length === 1, pollMs)
    const leader = await assertSingleLeader([a, b], lease, 2_500)
    // Whoever leads now started after a's old term had fully ended.
    expect(first(marks, leader.id, "start", aStop)).toBeGreaterThan(aStop)
  })

  it("client-go defaults (15 s / 10 s / 2 s): a cut-off leader stops within 10 s; a release hands over in seconds", async () => {
    const lease = "le-defaults"
    const defaults = { leaseDurationMs: 15_000, renewDeadlineMs: 10_000, retryPeriodMs: 2_000 }
    const marks: Mark[] = []
    const a = await startElector("def-a", lease, marks, defaults)
    await waitUntil("a to lead", 5_000, () => a.elector.isLeader(), pollMs)
    const b = await startElector("def-b", lease, marks, defaults)
    await sleep(2_500)
    const cutAt = now()
    a.proxy.cut("refuse")
    await waitUntil("b to lead", 30_000, () => b.elector.isLeader(), pollMs)
    const lastRenew = a.writes.filter((t) => t < cutAt).at(-1)!
    const aStop = first(marks, a.id, "stop")!
    const bStart = first(marks, b.id, "start")!
    console.log(
      `defaults: a stopped ${(aStop - lastRenew).toFixed(0)} ms after its last renewal; ` +
        `b led ${(bStart - lastRenew).toFixed(0)} ms after it`,
    )
    expect(aStop - lastRenew).toBeLessThan(defaults.leaseDurationMs)
    expect(aStop - lastRenew).toBeLessThan(defaults.renewDeadlineMs + 500)
    expect(bStart - lastRenew).toBeGreaterThanOrEqual(defaults.leaseDurationMs)
    expect(aStop).toBeLessThan(bStart)

    a.proxy.restore()
    await sleep(500)
    const stopAt = now()
    await b.stop()
    await waitUntil("a to lead again", 10_000, () => a.elector.isLeader(), pollMs)
    const takeoverMs = first(marks, a.id, "start", stopAt)! - stopAt
    console.log(`takeover after a released lease (15 s / 10 s / 2 s): ${takeoverMs.toFixed(0)} ms`)
    expect(takeoverMs).toBeLessThan(2_000 * 2.2 + 1_000)
    expect(last(marks, b.id, "stop")!).toBeLessThan(first(marks, a.id, "start", stopAt)!)
  }, 60_000)
})
