// MemberCluster status writes under the hub-wide bound (ADR 0010, decision 9): a round with
// nothing to write takes no permit; waiting writes go bad news first; a member that waited writes its
// latest status once. The hub API is a small in-memory stand-in whose status PATCHes can be held.
import { assert, describe, it } from "@effect/vitest"
import { Deferred, Effect, Fiber } from "effect"
import { TestClock } from "effect/testing"
import type { MemberCluster, MemberClusterStatus } from "../../src/api/membercluster.ts"
import { makePriorityLimit } from "../../src/engine/priority-limit.ts"
import { checkViews, type MemberEntry, newMemberEntry } from "../../src/hub/fleet-state.ts"
import { syncMemberClusterBounded } from "../../src/hub/member.ts"
import { newsOf, statusNews, statusNewsClasses } from "../../src/hub/status-news.ts"
import { KubeApiError, type KubeClient, type KubeRequest } from "../../src/kube/client.ts"

/** MemberClusters in memory; status PATCHes wait on `gate` while it is set, in arrival order. */
const fakeHub = () => {
  const objects = new Map<string, MemberCluster>()
  const statusWrites: Array<{ name: string; status: MemberClusterStatus }> = []
  let version = 0
  let gate: Deferred.Deferred<void> | undefined
  const notFound = (req: KubeRequest) =>
    new KubeApiError({
      cluster: "hub",
      method: req.method,
      path: req.path,
      status: 404,
      reason: "NotFound",
      message: "not found",
    })
  const client: KubeClient = {
    cluster: "hub",
    request: <T>(req: KubeRequest) =>
      Effect.gen(function* () {
        const [, name, subresource] = /memberclusters(?:\/([^/]+))?(?:\/(status))?$/.exec(req.path) ?? []
        const body = req.body as { metadata?: Record<string, unknown>; status?: MemberClusterStatus }
        if (req.method === "POST") {
          const created = {
            ...(req.body as MemberCluster),
            metadata: { ...(req.body as MemberCluster).metadata, resourceVersion: String(++version) },
          }
          objects.set(created.metadata.name, created)
          return created as T
        }
        const current = objects.get(name ?? "")
        if (current === undefined) return yield* notFound(req)
        if (req.method === "GET") return current as T
        if (subresource === "status") {
          statusWrites.push({ name: name!, status: body.status! })
          if (gate !== undefined) yield* Deferred.await(gate)
        }
        const next = {
          ...current,
          ...(subresource === "status" ? { status: body.status } : {}),
          metadata: { ...current.metadata, resourceVersion: String(++version) },
        } as MemberCluster
        objects.set(name!, next)
        return next as T
      }),
    watch: () => {
      throw new Error("not used")
    },
  }
  return {
    client,
    statusWrites,
    hold: () => {
      gate = Deferred.makeUnsafe<void>()
    },
    release: () => {
      if (gate) Deferred.doneUnsafe(gate, Effect.void)
      gate = undefined
    },
  }
}

const healthyMember = (name: string): MemberEntry => {
  const m = newMemberEntry(name, {})
  m.engineRunning = true
  m.synced = true
  m.probe = {
    consecutiveFailures: 0,
    consecutiveSuccesses: 1,
    connected: true,
    credentialsValid: true,
    kubernetesVersion: "v1.37.0",
    lastProbeTime: 0,
  }
  return m
}

const settle = Effect.gen(function* () {
  for (let i = 0; i < 20; i++) yield* Effect.yieldNow
})

const connectedMessage = (s: MemberClusterStatus) =>
  s.conditions?.find((c) => c.type === "Connected")?.message ?? ""

describe("MemberCluster status writes under the hub-wide bound", () => {
  it.effect(
    "bad news first (also news that turned bad while waiting), the rest in arrival order, each member's latest status written once",
    () =>
      Effect.gen(function* () {
        const hub = fakeHub()
        const limit = makePriorityLimit(1, statusNewsClasses, {
          onWaiting: () => {},
          onInUse: () => {},
          onServed: () => {},
        })
        const names = ["a", "b", "c", "quiet", "x"]
        const members = new Map(names.map((n) => [n, healthyMember(n)]))
        const round = (name: string) => {
          const m = members.get(name)!
          return syncMemberClusterBounded(hub.client, m, limit, () => checkViews(m), {
            statusIntervalMs: 1_000,
            statusRefreshMs: 60_000,
          })
        }
        // Every member written once, as at engagement.
        for (const name of names) yield* round(name)
        hub.statusWrites.length = 0

        hub.hold()
        // a, b and c have news that is not bad (a new version in Connected's message): a writes (held),
        // b and c wait.
        for (const name of ["a", "b", "c"]) members.get(name)!.probe.kubernetesVersion = "v1.37.1"
        const waiting = []
        for (const name of ["a", "b", "c"]) {
          waiting.push(yield* Effect.forkChild(round(name)))
          yield* settle
        }
        assert.deepStrictEqual(
          hub.statusWrites.map((w) => w.name),
          ["a"],
        )
        assert.strictEqual(limit.waiting(), 2)
        // A round with nothing to write takes no permit: it ends while every permit is held.
        const quiet = yield* Effect.forkChild(round("quiet"))
        yield* settle
        assert.isDefined(quiet.pollUnsafe(), "the unchanged member's round did not wait")
        // x becomes unreachable while the others wait: its write goes before b's and c's.
        members.get("x")!.probe.connected = false
        waiting.push(yield* Effect.forkChild(round("x")))
        yield* settle
        // b's news moves on while it waits: it writes the newest once.
        members.get("b")!.probe.kubernetesVersion = "v1.37.2"
        // c turns unreachable while it waits: at its next look (a status interval on) it moves up, behind x.
        members.get("c")!.probe.connected = false
        yield* TestClock.adjust(1_000)
        yield* settle
        for (let i = 0; i < 4; i++) {
          hub.release()
          hub.hold()
          yield* settle
        }
        hub.release()
        yield* Effect.forEach(waiting, Fiber.join)
        assert.deepStrictEqual(
          hub.statusWrites.map((w) => w.name),
          ["a", "x", "c", "b"],
        )
        const written = Object.fromEntries(hub.statusWrites.map((w) => [w.name, connectedMessage(w.status)]))
        assert.include(written.b!, "v1.37.2", "b wrote the status it had when served")
        for (const name of ["x", "c"])
          assert.strictEqual(
            hub.statusWrites
              .find((w) => w.name === name)
              ?.status.conditions?.find((c) => c.type === "Connected")?.status,
            "False",
          )
        assert.strictEqual(limit.inUse(), 0)
      }),
  )
})

describe("status news", () => {
  const status = (
    conditions: Record<string, "True" | "False" | "Unknown">,
    counts: { total: number; verified: number; failed: number; unknown: number; objectivesMissed?: number },
    lastProbeTime = "2026-12-01T17:00:00Z",
  ): MemberClusterStatus => ({
    conditions: Object.entries(conditions).map(([type, s]) => ({
      type,
      status: s,
      reason: "R",
      message: "",
      lastTransitionTime: "2026-12-01T16:00:00Z",
      observedGeneration: 0,
    })),
    counts,
    lastProbeTime,
  })
  const green = {
    Ready: "True",
    Connected: "True",
    CredentialsValid: "True",
    BackupsVerified: "True",
  } as const
  const ten = { total: 10, verified: 10, failed: 0, unknown: 0 }

  it("a condition that turns from True, fewer verified, more failing or missing an objective is bad news", () => {
    const was = status(green, ten)
    assert.strictEqual(newsOf(was, status({ ...green, Connected: "False" }, ten)), statusNews.worse)
    assert.strictEqual(newsOf(was, status({ ...green, Ready: "Unknown" }, ten)), statusNews.worse)
    assert.strictEqual(
      newsOf(was, status({ ...green, BackupsVerified: "Unknown" }, { ...ten, verified: 9, unknown: 1 })),
      statusNews.worse,
    )
    const failing = status({ ...green, BackupsVerified: "False" }, { ...ten, verified: 8, failed: 2 })
    assert.strictEqual(
      newsOf(failing, status({ ...green, BackupsVerified: "False" }, { ...ten, verified: 7, failed: 3 })),
      statusNews.worse,
    )
    assert.strictEqual(
      newsOf(was, status(green, { ...ten, objectivesMissed: 1 })),
      statusNews.worse,
      "an objective missed",
    )
  })

  it("better or other news is a change; the probe time alone is a refresh", () => {
    const pending = status({ ...green, BackupsVerified: "Unknown" }, { ...ten, verified: 9, unknown: 1 })
    assert.strictEqual(newsOf(pending, status(green, ten)), statusNews.change, "better")
    assert.strictEqual(
      newsOf(
        status(green, ten),
        status({ ...green, BackupsVerified: "Unknown" }, { ...ten, total: 11, unknown: 1 }),
      ),
      statusNews.worse,
      "a new check makes BackupsVerified Unknown: no longer green",
    )
    assert.strictEqual(
      newsOf(
        pending,
        status({ ...green, BackupsVerified: "Unknown" }, { ...ten, total: 11, verified: 9, unknown: 2 }),
      ),
      statusNews.change,
      "one more unknown check where nothing was green",
    )
    assert.strictEqual(newsOf(undefined, status(green, ten)), statusNews.change, "a first write")
    assert.strictEqual(
      newsOf(status(green, ten), status(green, ten, "2026-12-01T17:01:00Z")),
      statusNews.refresh,
    )
  })
})
