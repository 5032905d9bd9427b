// releaseFinalizers against a scripted apiserver: paged LISTs, a compare-and-swap per check, bounded
// Conflict retries with a fresh GET, and a typed failure whenever anything is left behind.
import { assert, describe, it } from "@effect/vitest"
import { Effect, Stream } from "effect"
import type { BackupCheck } from "../../src/api/backupcheck.ts"
import { FinalizerReleaseError, releaseFinalizers } from "../../src/hub/finalizers.ts"
import { KubeApiError, type KubeClient, type KubeError, type KubeRequest } from "../../src/kube/client.ts"

const ours = "fleetcheck.io/cleanup"
const theirs = "example.com/keep"
const base = "/apis/fleetcheck.io/v1alpha1"

interface Stored {
  namespace: string
  name: string
  finalizers: string[]
  resourceVersion: number
}

/** A member apiserver holding BackupChecks (metadata only), with hooks to misbehave. */
const fakeMember = (
  checks: ReadonlyArray<Omit<Stored, "resourceVersion">>,
  hooks: {
    /** Before each PATCH of this check: a concurrent writer changes it (resourceVersion moves). */
    readonly interfere?: (key: string, attempt: number) => "bump" | "delete" | undefined
    /** An error status for PATCHes of this check. */
    readonly patchStatus?: (key: string) => number | undefined
    /** An error status for LISTs of this path (with or without a continue token). */
    readonly listStatus?: (path: string, continueToken: string | undefined) => number | undefined
  } = {},
) => {
  const store = new Map<string, Stored>()
  for (const c of checks) store.set(`${c.namespace}/${c.name}`, { ...c, resourceVersion: 1 })
  const requests: KubeRequest[] = []
  const patches = new Map<string, number>()
  let rv = 1
  const fail = (req: KubeRequest, status: number, reason: string): Effect.Effect<never, KubeError> =>
    Effect.fail(
      new KubeApiError({
        cluster: "fake",
        method: req.method,
        path: req.path,
        status,
        reason,
        message: reason,
      }),
    )
  const toObject = (s: Stored): BackupCheck =>
    ({
      apiVersion: "fleetcheck.io/v1alpha1",
      kind: "BackupCheck",
      metadata: {
        namespace: s.namespace,
        name: s.name,
        resourceVersion: String(s.resourceVersion),
        ...(s.finalizers.length > 0 ? { finalizers: [...s.finalizers] } : {}),
      },
    }) as unknown as BackupCheck

  const handle = (req: KubeRequest): Effect.Effect<unknown, KubeError> => {
    requests.push(req)
    const list = /^\/apis\/fleetcheck\.io\/v1alpha1(?:\/namespaces\/([^/]+))?\/backupchecks$/.exec(req.path)
    if (req.method === "GET" && list) {
      const cont = req.query?.continue
      const status = hooks.listStatus?.(req.path, cont)
      if (status === 404) return fail(req, 404, "NotFound")
      if (status === 410) return fail(req, 410, "Expired")
      if (status !== undefined) return fail(req, status, "Forbidden")
      const all = [...store.values()]
        .filter((s) => list[1] === undefined || s.namespace === list[1])
        .sort((a, b) => `${a.namespace}/${a.name}`.localeCompare(`${b.namespace}/${b.name}`))
      const start = cont ? Number(cont) : 0
      const limit = Number(req.query?.limit ?? "0") || all.length
      const page = all.slice(start, start + limit)
      const next = start + limit < all.length ? String(start + limit) : undefined
      return Effect.succeed({ items: page.map(toObject), metadata: next ? { continue: next } : {} })
    }
    const one = /^\/apis\/fleetcheck\.io\/v1alpha1\/namespaces\/([^/]+)\/backupchecks\/([^/]+)$/.exec(
      req.path,
    )
    if (!one) return fail(req, 400, "BadRequest")
    const key = `${one[1]}/${one[2]}`
    if (req.method === "GET") {
      const s = store.get(key)
      return s ? Effect.succeed(toObject(s)) : fail(req, 404, "NotFound")
    }
    if (req.method === "PATCH") {
      const attempt = (patches.get(key) ?? 0) + 1
      patches.set(key, attempt)
      const change = hooks.interfere?.(key, attempt)
      if (change === "delete") store.delete(key)
      const s = store.get(key)
      if (change === "bump" && s) {
        s.resourceVersion = ++rv
        if (!s.finalizers.includes(theirs)) s.finalizers.push(theirs)
      }
      const status = hooks.patchStatus?.(key)
      if (status !== undefined) return fail(req, status, "Forbidden")
      if (!s) return fail(req, 404, "NotFound")
      assert.strictEqual(req.contentType, "application/merge-patch+json")
      const body = req.body as { metadata: { resourceVersion: string; finalizers: string[] } }
      if (body.metadata.resourceVersion !== String(s.resourceVersion)) return fail(req, 409, "Conflict")
      s.finalizers = [...body.metadata.finalizers]
      s.resourceVersion = ++rv
      return Effect.succeed(toObject(s))
    }
    return fail(req, 405, "MethodNotAllowed")
  }
  const client: KubeClient = {
    cluster: "fake",
    request: <T>(req: KubeRequest) => handle(req) as Effect.Effect<T, KubeError>,
    watch: () => Stream.empty,
  }
  return { client, store, requests, patches }
}

const finalizersOf = (m: ReturnType<typeof fakeMember>, key: string) => m.store.get(key)?.finalizers

describe("releaseFinalizers", () => {
  it.effect("pages through every check and removes only our finalizer", () =>
    Effect.gen(function* () {
      const checks = Array.from({ length: 600 }, (_, i) => ({
        namespace: i % 2 === 0 ? "apps" : "db",
        name: `c${String(i).padStart(3, "0")}`,
        finalizers: i % 3 === 0 ? [ours, theirs] : i % 3 === 1 ? [ours] : [],
      }))
      const m = fakeMember(checks)
      const counts = yield* releaseFinalizers(m.client, undefined)
      assert.deepStrictEqual(counts, { released: 400, failed: 0 })
      for (const s of m.store.values()) assert.notInclude(s.finalizers, ours)
      assert.deepStrictEqual(finalizersOf(m, "apps/c000"), [theirs])
      // Paged, cluster-wide: three LIST pages of 250, and no PATCH for a check without ours.
      const lists = m.requests.filter((r) => r.method === "GET")
      assert.deepStrictEqual(
        lists.map((r) => [r.path, r.query?.limit, r.query?.continue]),
        [
          [`${base}/backupchecks`, "250", undefined],
          [`${base}/backupchecks`, "250", "250"],
          [`${base}/backupchecks`, "250", "500"],
        ],
      )
      assert.strictEqual(m.requests.filter((r) => r.method === "PATCH").length, 400)
    }),
  )

  it.effect("with namespaces, lists and releases only those", () =>
    Effect.gen(function* () {
      const m = fakeMember([
        { namespace: "apps", name: "a", finalizers: [ours] },
        { namespace: "db", name: "b", finalizers: [ours] },
        { namespace: "other", name: "c", finalizers: [ours] },
      ])
      assert.deepStrictEqual(yield* releaseFinalizers(m.client, ["apps", "db"]), { released: 2, failed: 0 })
      assert.deepStrictEqual(finalizersOf(m, "other/c"), [ours])
      assert.deepStrictEqual(
        m.requests.filter((r) => r.method === "GET").map((r) => r.path),
        [`${base}/namespaces/apps/backupchecks`, `${base}/namespaces/db/backupchecks`],
      )
      // An empty list means cluster-wide, never "nothing".
      assert.deepStrictEqual(yield* releaseFinalizers(m.client, []), { released: 1, failed: 0 })
    }),
  )

  it.effect("on Conflict re-reads the check and keeps the other writer's finalizer", () =>
    Effect.gen(function* () {
      const m = fakeMember([{ namespace: "apps", name: "busy", finalizers: [ours] }], {
        interfere: (_key, attempt) => (attempt <= 2 ? "bump" : undefined),
      })
      assert.deepStrictEqual(yield* releaseFinalizers(m.client, undefined), { released: 1, failed: 0 })
      assert.deepStrictEqual(finalizersOf(m, "apps/busy"), [theirs])
      assert.strictEqual(m.patches.get("apps/busy"), 3)
      assert.strictEqual(m.requests.filter((r) => r.method === "GET" && r.path.endsWith("/busy")).length, 2)
    }),
  )

  it.effect("a check deleted meanwhile is neither released nor failed", () =>
    Effect.gen(function* () {
      const m = fakeMember(
        [
          { namespace: "apps", name: "gone", finalizers: [ours] },
          { namespace: "apps", name: "raced", finalizers: [ours] },
        ],
        {
          interfere: (key, attempt) =>
            key === "apps/gone" ? "delete" : key === "apps/raced" && attempt === 1 ? "bump" : undefined,
        },
      )
      assert.deepStrictEqual(yield* releaseFinalizers(m.client, undefined), { released: 1, failed: 0 })
    }),
  )

  it.effect("fails, with counts, when Conflicts never end or a PATCH is refused", () =>
    Effect.gen(function* () {
      const m = fakeMember(
        [
          { namespace: "apps", name: "ok", finalizers: [ours] },
          { namespace: "apps", name: "hot", finalizers: [ours] },
          { namespace: "apps", name: "locked", finalizers: [ours] },
        ],
        {
          interfere: (key) => (key === "apps/hot" ? "bump" : undefined),
          patchStatus: (key) => (key === "apps/locked" ? 403 : undefined),
        },
      )
      const e = yield* Effect.flip(releaseFinalizers(m.client, undefined))
      assert.instanceOf(e, FinalizerReleaseError)
      assert.strictEqual(e.released, 1)
      assert.strictEqual(e.failed, 2)
      assert.deepStrictEqual(e.unlisted, [])
      assert.strictEqual(e.cluster, "fake")
      assert.include(e.message, "2 BackupCheck(s) still carry fleetcheck.io/cleanup")
      assert.include(e.message, "apps/hot: Conflict")
      assert.include(e.message, "apps/locked: Forbidden")
      assert.strictEqual(m.patches.get("apps/hot"), 5) // bounded
      assert.deepStrictEqual(finalizersOf(m, "apps/ok"), [])
    }),
  )

  it.effect("no CRD means no BackupChecks", () =>
    Effect.gen(function* () {
      const m = fakeMember([], { listStatus: () => 404 })
      assert.deepStrictEqual(yield* releaseFinalizers(m.client, undefined), { released: 0, failed: 0 })
    }),
  )

  it.effect("a scope it cannot list fails the call, after releasing the others", () =>
    Effect.gen(function* () {
      const m = fakeMember(
        [
          { namespace: "apps", name: "a", finalizers: [ours] },
          { namespace: "db", name: "b", finalizers: [ours] },
        ],
        { listStatus: (path) => (path.includes("/namespaces/db/") ? 403 : undefined) },
      )
      const e = yield* Effect.flip(releaseFinalizers(m.client, ["db", "apps"]))
      assert.instanceOf(e, FinalizerReleaseError)
      assert.deepStrictEqual([e.released, e.failed, e.unlisted], [1, 0, ["namespace db"]])
      assert.include(e.message, "could not list BackupChecks in namespace db")
    }),
  )

  it.effect("an expired continue token restarts that scope's LIST", () =>
    Effect.gen(function* () {
      const checks = Array.from({ length: 300 }, (_, i) => ({
        namespace: "apps",
        name: `c${String(i).padStart(3, "0")}`,
        finalizers: [ours],
      }))
      let expired = 0
      const m = fakeMember(checks, {
        listStatus: (_path, cont) => (cont !== undefined && expired++ === 0 ? 410 : undefined),
      })
      assert.deepStrictEqual(yield* releaseFinalizers(m.client, undefined), { released: 300, failed: 0 })
      assert.strictEqual(m.requests.filter((r) => r.method === "PATCH").length, 300)
    }),
  )
})
