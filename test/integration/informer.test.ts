// The Kubernetes client and the informer against a real kube-apiserver (local-fleet harness): paged
// LIST, events, stripping, label selectors, an apiserver restarted under a live informer, a forced
// 410 relist with deletes for what vanished, a throwing handler. A scripted HTTP server covers what a
// real apiserver will not do on demand: split and garbage watch lines, silence, ERROR 410 and 5xx.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"
import { KubeConfig } from "@kubernetes/client-node"
import { Cause, Effect, Exit, Fiber, Logger, References, Scope, Stream, Tracer } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type LocalCluster, type LocalFleet, startFleet } from "../../clusters/local-fleet/index.ts"
import { type Informer, type InformerOptions, makeInformer } from "../../src/engine/informer/informer.ts"
import {
  isAlreadyExists,
  isConflict,
  isGone,
  isNotFound,
  isWatchInactive,
  KubeApiError,
  type KubeClient,
  KubeTransportError,
  makeKubeClient,
  resourcePath,
  type WatchEvent,
} from "../../src/kube/client.ts"

interface ConfigMap {
  apiVersion?: string
  kind?: string
  metadata: {
    name: string
    namespace?: string
    resourceVersion?: string
    labels?: Record<string, string>
    managedFields?: unknown
    annotations?: Record<string, string>
  }
  data?: Record<string, string>
}

interface LogLine {
  readonly level: string
  readonly message: string
  readonly annotations: Record<string, unknown>
}

const cmResource = { group: "", version: "v1", plural: "configmaps" }

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

const waitUntil = async (what: string, timeoutMs: number, check: () => boolean | Promise<boolean>) => {
  const deadline = Date.now() + timeoutMs
  while (Date.now() < deadline) {
    if (await check()) return
    await sleep(50)
  }
  throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
}

const kubeConfigOf = (yaml: string) => {
  const kc = new KubeConfig()
  kc.loadFromString(yaml)
  return kc
}

/** A client and informer living in their own Scope, with their logs captured. */
const startInformer = async <T = ConfigMap>(
  kubeconfig: string,
  options: Omit<InformerOptions<T>, "client" | "resource"> & { resource?: InformerOptions<T>["resource"] },
  clientOptions: { requestTimeoutMs?: number; watchInactivityTimeoutMs?: number } = {},
) => {
  const logs: Array<LogLine> = []
  const capture = Logger.make((o) => {
    logs.push({
      level: o.logLevel,
      message: Array.isArray(o.message) ? o.message.map(String).join(" ") : String(o.message),
      annotations: { ...o.fiber.getRef(References.CurrentLogAnnotations) },
    })
  })
  const scope = Effect.runSync(Scope.make())
  const { client, informer } = await Effect.runPromise(
    Effect.gen(function* () {
      const client = yield* makeKubeClient({
        cluster: "inf",
        kubeConfig: kubeConfigOf(kubeconfig),
        ...clientOptions,
      })
      const informer = yield* makeInformer<T>({ client, resource: cmResource, ...options })
      return { client, informer }
    }).pipe(Scope.provide(scope), Effect.provide(Logger.layer([capture]))),
  )
  return {
    client,
    informer,
    logs,
    run: <A, E>(e: Effect.Effect<A, E>) => Effect.runPromise(e),
    close: () => Effect.runPromise(Scope.close(scope, Exit.void)),
  }
}

/** Records every handler call as "add:name@rv", "update:name@oldRv->newRv", "delete:name". */
const recorder = (informer: Informer<ConfigMap>) => {
  const calls: Array<string> = []
  informer.addHandler({
    onAdd: (o) => calls.push(`add:${o.metadata.name}@${o.metadata.resourceVersion}`),
    onUpdate: (a, b) =>
      calls.push(`update:${b.metadata.name}@${a.metadata.resourceVersion}->${b.metadata.resourceVersion}`),
    onDelete: (o) => calls.push(`delete:${o.metadata.name}`),
  })
  return calls
}

describe("kube client and informer against a real apiserver", () => {
  let fleet: LocalFleet
  let c: LocalCluster

  const mustApi = async (method: string, path: string, body?: unknown) => {
    const r = await c.api(method, path, body)
    if (r.status < 200 || r.status >= 300)
      throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`)
    return r.body
  }
  const ns = async (name: string) => {
    await mustApi("POST", "/api/v1/namespaces", { apiVersion: "v1", kind: "Namespace", metadata: { name } })
    return name
  }
  const cmPath = (namespace: string, name?: string) =>
    resourcePath({ ...cmResource, namespace, ...(name ? { name } : {}) })
  const createCm = (
    namespace: string,
    name: string,
    labels: Record<string, string> = {},
    data = { v: "1" },
  ) =>
    mustApi("POST", cmPath(namespace), {
      apiVersion: "v1",
      kind: "ConfigMap",
      metadata: { name, labels },
      data,
    })
  const serverState = async (namespace: string, selector?: string) => {
    const q = selector ? `?labelSelector=${encodeURIComponent(selector)}` : ""
    const list = await mustApi("GET", `${cmPath(namespace)}${q}`)
    return new Map<string, string>(
      list.items.map((i: ConfigMap) => [`${namespace}/${i.metadata.name}`, i.metadata.resourceVersion]),
    )
  }
  const cacheState = (informer: Informer<ConfigMap>) =>
    new Map(
      informer.store
        .list()
        .map((o) => [`${o.metadata.namespace}/${o.metadata.name}`, o.metadata.resourceVersion]),
    )

  beforeAll(async () => {
    fleet = await startFleet({ clusters: [{ name: "inf", workloads: false, controllerManager: false }] })
    c = fleet.cluster("inf")
  })

  afterAll(async () => {
    await fleet?.stop()
  })

  it("maps API errors to tagged errors with reason, and traces each call as a child span", async () => {
    const spans: Array<Tracer.Span> = []
    const tracer = Tracer.make({
      span(options) {
        const span = Tracer.nativeTracer.span(options)
        spans.push(span)
        return span
      },
    })
    const namespace = await ns("inf-client")
    const scope = Effect.runSync(Scope.make())
    try {
      const client: KubeClient = await Effect.runPromise(
        makeKubeClient({ cluster: "inf", kubeConfig: kubeConfigOf(c.kubeconfig) }).pipe(Scope.provide(scope)),
      )
      const run = <A, E>(e: Effect.Effect<A, E>) =>
        Effect.runPromiseExit(e.pipe(Effect.withSpan("reconcile"), Effect.withTracer(tracer)))
      const failure = (exit: Exit.Exit<unknown, unknown>) => {
        if (Exit.isSuccess(exit)) throw new Error("expected a failure")
        return Cause.squash(exit.cause)
      }

      const missing = failure(await run(client.request({ method: "GET", path: cmPath(namespace, "nope") })))
      expect(missing).toBeInstanceOf(KubeApiError)
      expect(isNotFound(missing)).toBe(true)
      expect(missing).toMatchObject({
        status: 404,
        reason: "NotFound",
        method: "GET",
        path: cmPath(namespace, "nope"),
      })
      expect((missing as KubeApiError).message).toContain("nope")

      const body = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "one" }, data: { a: "1" } }
      const created = await run(client.request<ConfigMap>({ method: "POST", path: cmPath(namespace), body }))
      expect(Exit.isSuccess(created)).toBe(true)
      const dup = failure(await run(client.request({ method: "POST", path: cmPath(namespace), body })))
      expect(isAlreadyExists(dup)).toBe(true)
      expect(isConflict(dup)).toBe(false)

      const stale = { ...body, metadata: { name: "one", resourceVersion: "1" } }
      const conflict = failure(
        await run(client.request({ method: "PUT", path: cmPath(namespace, "one"), body: stale })),
      )
      expect(isConflict(conflict)).toBe(true)
      expect((conflict as KubeApiError).reason).toBe("Conflict")

      const patched = await run(
        client.request<ConfigMap>({
          method: "PATCH",
          path: cmPath(namespace, "one"),
          body: { data: { b: "2" } },
          contentType: "application/merge-patch+json",
        }),
      )
      expect(Exit.isSuccess(patched) && patched.value.data).toEqual({ a: "1", b: "2" })
      const applied = await run(
        client.request<ConfigMap>({
          method: "PATCH",
          path: cmPath(namespace, "applied"),
          query: { fieldManager: "fleetcheck-test", force: "true" },
          body: "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: applied\ndata:\n  c: '3'\n",
          contentType: "application/apply-patch+yaml",
        }),
      )
      expect(Exit.isSuccess(applied) && applied.value.data).toEqual({ c: "3" })

      const list = await run(
        client.request<{ items: Array<unknown> }>({
          method: "GET",
          path: cmPath(namespace),
          query: { limit: "1", labelSelector: undefined },
        }),
      )
      expect(Exit.isSuccess(list) && list.value.items).toHaveLength(1)

      const requests = spans.filter((s) => s.name === "kube.request")
      expect(requests.length).toBe(7)
      for (const s of requests) {
        expect(s.attributes.get("k8s.cluster.name")).toBe("inf")
        expect(s.attributes.get("url.path")).toMatch(/^\/api\/v1\/namespaces\/inf-client\/configmaps/)
        expect(typeof s.attributes.get("http.response.status_code")).toBe("number")
        const parent = s.parent._tag === "Some" ? (s.parent.value as Tracer.Span) : undefined
        expect(parent?.name).toBe("reconcile")
      }
      expect(requests.map((s) => s.attributes.get("http.response.status_code"))).toEqual([
        404, 201, 409, 409, 200, 201, 200,
      ])
      expect(requests[2]?.attributes.get("http.request.method")).toBe("POST")
    } finally {
      await Effect.runPromise(Scope.close(scope, Exit.void))
    }
  })

  it("lists 1200 objects in pages of 500, honours the label selector and strips managedFields", async () => {
    const namespace = await ns("inf-paging")
    const names = Array.from({ length: 1200 }, (_, i) => `cm-${String(i).padStart(4, "0")}`)
    const t0 = Date.now()
    for (let i = 0; i < names.length; i += 24) {
      await Promise.all(names.slice(i, i + 24).map((n) => createCm(namespace, n, { "inf-test": "paging" })))
    }
    for (const n of ["other-1", "other-2", "other-3"]) await createCm(namespace, n, { "inf-test": "other" })
    console.log(`created 1203 ConfigMaps in ${Date.now() - t0} ms`)
    const raw = await mustApi("GET", cmPath(namespace, "cm-0000"))
    expect(raw.metadata.managedFields?.length).toBeGreaterThan(0)

    const h = await startInformer(c.kubeconfig, {
      namespace,
      labelSelector: "inf-test=paging",
      pageSize: 500,
    })
    try {
      const adds: Array<string> = []
      h.informer.addHandler({ onAdd: (o) => adds.push(o.metadata.name) })
      const t1 = Date.now()
      await h.run(h.informer.awaitSynced.pipe(Effect.timeout("60 seconds")))
      console.log(`informer synced 1200 objects in ${Date.now() - t1} ms, ${h.informer.listCount} pages`)
      expect(h.informer.hasSynced()).toBe(true)
      expect(h.informer.store.size).toBe(1200)
      expect(h.informer.listCount).toBe(3)
      expect(h.informer.store.keys().sort()).toEqual(names.map((n) => `${namespace}/${n}`))
      expect(adds).toHaveLength(1200)
      for (const o of h.informer.store.list()) {
        expect(o.metadata.managedFields).toBeUndefined()
        expect(o.metadata.labels?.["inf-test"]).toBe("paging")
      }
      expect(h.informer.store.get(`${namespace}/other-1`)).toBeUndefined()
      const synced = h.logs.find((l) => l.message === "informer synced")
      expect(synced?.annotations).toMatchObject({
        cluster: "inf",
        resource: "configmaps",
        objects: 1200,
        pages: 3,
      })
      expect(h.informer.errors).toBe(0)
    } finally {
      await h.close()
    }
  })

  it("delivers add, update and delete events, following the label selector in and out", async () => {
    const namespace = await ns("inf-events")
    await createCm(namespace, "before", { app: "x" }, { v: "before" })
    const h = await startInformer(c.kubeconfig, {
      namespace,
      labelSelector: "app=x",
      indexers: { byData: (o: ConfigMap) => (o.data?.v ? [o.data.v] : []) },
    })
    try {
      await h.run(h.informer.awaitSynced.pipe(Effect.timeout("30 seconds")))
      const calls = recorder(h.informer)
      expect(calls).toEqual([expect.stringMatching(/^add:before@\d+$/)])

      // Event → handler latency, as seen from here (includes the apiserver's own latency).
      const latencies: Array<number> = []
      let sentAt = 0
      const off = h.informer.addHandler({ onAdd: () => latencies.push(performance.now() - sentAt) })
      latencies.length = 0 // the synthetic add of "before"
      for (let i = 0; i < 20; i++) {
        sentAt = performance.now()
        await createCm(namespace, `lat-${i}`, { app: "x" }, { v: "lat" })
        await waitUntil("latency event", 10_000, () => latencies.length === i + 1)
      }
      off()
      latencies.sort((a, b) => a - b)
      console.log(
        `create → onAdd (incl. apiserver): p50 ${latencies[10]?.toFixed(1)} ms, max ${latencies[19]?.toFixed(1)} ms`,
      )
      calls.length = 0

      const a = await createCm(namespace, "a", { app: "x" }, { v: "1" })
      await waitUntil("add a", 10_000, () => calls.includes(`add:a@${a.metadata.resourceVersion}`))
      expect(h.informer.store.byIndex("byData", "1").map((o) => o.metadata.name)).toEqual(["a"])

      const current = await mustApi("GET", cmPath(namespace, "a"))
      const updated = await mustApi("PUT", cmPath(namespace, "a"), { ...current, data: { v: "3" } })
      await waitUntil("update a", 10_000, () =>
        calls.includes(`update:a@${current.metadata.resourceVersion}->${updated.metadata.resourceVersion}`),
      )
      expect(h.informer.store.get(`${namespace}/a`)?.data).toEqual({ v: "3" })
      expect(h.informer.store.byIndex("byData", "1")).toEqual([])
      expect(h.informer.store.byIndex("byData", "3").map((o) => o.metadata.name)).toEqual(["a"])
      expect(h.informer.store.get(`${namespace}/a`)?.metadata.managedFields).toBeUndefined()

      // Out of the selector: not delivered; relabelled into it: ADDED; out again: DELETED.
      const hidden = await createCm(namespace, "hidden", { app: "y" })
      const inSel = await mustApi("PUT", cmPath(namespace, "hidden"), {
        ...hidden,
        metadata: { ...hidden.metadata, labels: { app: "x" } },
      })
      await waitUntil("hidden enters the selector", 10_000, () =>
        calls.includes(`add:hidden@${inSel.metadata.resourceVersion}`),
      )
      await mustApi("PUT", cmPath(namespace, "hidden"), {
        ...inSel,
        metadata: { ...inSel.metadata, labels: {} },
      })
      await waitUntil("hidden leaves the selector", 10_000, () => calls.includes("delete:hidden"))
      expect(h.informer.store.has(`${namespace}/hidden`)).toBe(false)

      await mustApi("DELETE", cmPath(namespace, "a"))
      await waitUntil("delete a", 10_000, () => calls.includes("delete:a"))
      expect(h.informer.store.has(`${namespace}/a`)).toBe(false)
      expect(h.informer.store.byIndex("byData", "3")).toEqual([])
      expect(calls.filter((x) => x.startsWith("add:hidden"))).toHaveLength(1)
      expect(cacheState(h.informer)).toEqual(await serverState(namespace, "app=x"))
      expect(h.informer.errors).toBe(0)
    } finally {
      await h.close()
    }
  })

  it("a throwing handler is caught, logged and counted; other handlers still get every event", async () => {
    const namespace = await ns("inf-throw")
    const h = await startInformer(c.kubeconfig, { namespace })
    try {
      h.informer.addHandler({
        onAdd: () => {
          throw new Error("handler bug")
        },
      })
      const calls = recorder(h.informer)
      await h.run(h.informer.awaitSynced.pipe(Effect.timeout("30 seconds")))
      for (const n of ["t1", "t2", "t3"]) await createCm(namespace, n)
      await waitUntil("three adds", 10_000, () => calls.filter((x) => x.startsWith("add:")).length === 3)
      expect(h.informer.handlerErrors).toBe(3)
      await waitUntil("the error log", 5_000, () => h.logs.some((l) => l.level === "Error"))
      const logged = h.logs.find((l) => l.level === "Error")
      expect(logged?.message).toContain("onAdd threw")
      expect(logged?.annotations).toMatchObject({ cluster: "inf", resource: "configmaps" })
      expect(String(logged?.annotations.error)).toContain("handler bug")
      // Still alive afterwards.
      await mustApi("DELETE", cmPath(namespace, "t1"))
      await waitUntil("delete t1", 10_000, () => calls.includes("delete:t1"))
    } finally {
      await h.close()
    }
  })

  it("resyncs every cached object as an update, and late handlers get the cache as adds", async () => {
    const namespace = await ns("inf-resync")
    await createCm(namespace, "r1")
    await createCm(namespace, "r2")
    // A short inactivity timeout too: this quiet watch then gets re-watched, which is no failure.
    const h = await startInformer(c.kubeconfig, { namespace, resyncMs: 300, watchInactivityTimeoutMs: 400 })
    try {
      await h.run(h.informer.awaitSynced.pipe(Effect.timeout("30 seconds")))
      const calls = recorder(h.informer)
      expect(calls.sort()).toEqual([expect.stringMatching(/^add:r1@/), expect.stringMatching(/^add:r2@/)])
      await waitUntil("two resyncs", 5_000, () => calls.filter((x) => x.startsWith("update:")).length >= 4)
      await waitUntil("quiet re-watches", 5_000, () => h.informer.watchRestarts >= 2)
      expect(h.informer.errors).toBe(0)
      expect(h.informer.store.size).toBe(2)
      for (const u of calls.filter((x) => x.startsWith("update:"))) {
        const [, versions] = u.split("@")
        const [from, to] = versions!.split("->")
        expect(from).toBe(to)
      }
    } finally {
      await h.close()
    }
  })

  it("relists on a real 410 and emits deletes for objects that vanished while it was away", async () => {
    const namespace = await ns("inf-relist")
    for (const n of ["a", "b", "c"]) await createCm(namespace, n)
    const h = await startInformer(c.kubeconfig, { namespace })
    try {
      await h.run(h.informer.awaitSynced.pipe(Effect.timeout("30 seconds")))
      const calls = recorder(h.informer)
      calls.length = 0
      // Hold the informer (its watch is aborted) while the cluster changes.
      h.informer.testing.pause()
      await sleep(200)
      const a = await mustApi("GET", cmPath(namespace, "a"))
      const a2 = await mustApi("PUT", cmPath(namespace, "a"), { ...a, data: { v: "2" } })
      await mustApi("DELETE", cmPath(namespace, "b"))
      const d = await createCm(namespace, "d")
      // A restarted apiserver's watch cache starts at the current revision, so the informer's RV is
      // now too old for it: the resumed watch gets a genuine 410 (on a young apiserver, whose cache
      // still holds every event since it started, an old RV like "1" is simply replayed instead).
      await c.stopApiServer()
      await c.startApiServer()
      expect(calls).toEqual([])
      expect(h.informer.errors).toBe(0)
      h.informer.testing.resume()
      await waitUntil("relist", 30_000, () => h.informer.relists >= 1 && calls.length >= 3)
      expect(calls.sort()).toEqual(
        [
          `add:d@${d.metadata.resourceVersion}`,
          "delete:b",
          `update:a@${a.metadata.resourceVersion}->${a2.metadata.resourceVersion}`,
        ].sort(),
      )
      expect(cacheState(h.informer)).toEqual(await serverState(namespace))
      expect(h.informer.relists).toBe(1)
      expect(h.informer.errors).toBe(1)
      const goneLog = h.logs.find((l) => l.message.includes("relisting"))
      expect(goneLog?.annotations).toMatchObject({
        cluster: "inf",
        resource: "configmaps",
        relist: true,
        status: 410,
      })
      expect(goneLog?.annotations.retryInMs).toBe(0)
      console.log(`410 from the apiserver: ${goneLog?.annotations.error}`)
      // And it keeps watching afterwards.
      await createCm(namespace, "e")
      await waitUntil("add e", 10_000, () => calls.some((x) => x.startsWith("add:e@")))
    } finally {
      await h.close()
    }
  })

  it("survives an apiserver restart under a live watch: logs and counts failures, reconnects, misses nothing", async () => {
    const namespace = await ns("inf-restart")
    for (const n of ["a", "b", "c"]) await createCm(namespace, n)
    const h = await startInformer(c.kubeconfig, { namespace }, { requestTimeoutMs: 5_000 })
    try {
      await h.run(h.informer.awaitSynced.pipe(Effect.timeout("30 seconds")))
      const calls = recorder(h.informer)
      calls.length = 0
      const restarts0 = h.informer.watchRestarts

      await c.stopApiServer()
      await waitUntil("failures while down", 20_000, () => h.informer.errors >= 3)
      const warns = h.logs.filter((l) => l.level === "Warn")
      expect(warns.length).toBe(h.informer.errors)
      for (const w of warns) {
        expect(w.annotations).toMatchObject({ cluster: "inf", resource: "configmaps", namespace })
        expect(typeof w.annotations.error).toBe("string")
        expect(w.annotations.retryInMs).toBeGreaterThan(0)
      }
      console.log(
        `while down: ${warns.map((w) => `${w.annotations.phase}: ${w.annotations.error}`).join(" | ")}`,
      )
      expect(h.informer.lastError).toBeDefined()
      expect(h.informer.store.size).toBe(3) // the cache is kept while the member is unreachable

      await c.startApiServer()
      const t0 = Date.now()
      // Changes right after the restart, most likely while the informer still sits in its backoff.
      const a = await mustApi("GET", cmPath(namespace, "a"))
      const a2 = await mustApi("PUT", cmPath(namespace, "a"), { ...a, data: { v: "2" } })
      await mustApi("DELETE", cmPath(namespace, "b"))
      const d = await createCm(namespace, "d")
      await waitUntil("the changes after the restart", 60_000, () => calls.length >= 3)
      console.log(
        `events arrived ${Date.now() - t0} ms after the apiserver was ready; errors ${h.informer.errors}, ` +
          `relists ${h.informer.relists}, watchRestarts ${h.informer.watchRestarts - restarts0}`,
      )
      expect(calls.sort()).toEqual(
        [
          `add:d@${d.metadata.resourceVersion}`,
          "delete:b",
          `update:a@${a.metadata.resourceVersion}->${a2.metadata.resourceVersion}`,
        ].sort(),
      )
      expect(h.informer.watchRestarts).toBeGreaterThan(restarts0)
      expect(cacheState(h.informer)).toEqual(await serverState(namespace))
      expect(h.informer.lastError).toBeUndefined()
      const e = await createCm(namespace, "e")
      await waitUntil("add e", 10_000, () => calls.includes(`add:e@${e.metadata.resourceVersion}`))
    } finally {
      await h.close()
    }
  })

  it("closing the scope stops the informer and frees its sockets", async () => {
    const namespace = await ns("inf-close")
    // Sockets in use (idle keep-alive sockets are unref'd and not listed).
    const tls = () => process.getActiveResourcesInfo().filter((r) => r === "TCPSocketWrap").length
    await sleep(200)
    const before = tls()
    const h = await startInformer(c.kubeconfig, { namespace })
    await h.run(h.informer.awaitSynced.pipe(Effect.timeout("30 seconds")))
    await sleep(300)
    expect(tls()).toBe(before + 1) // the watch

    const calls = recorder(h.informer)
    await h.close()
    await waitUntil("sockets to close", 5_000, () => tls() === before)
    await createCm(namespace, "after-close")
    await sleep(500)
    expect(calls.filter((x) => x.includes("after-close"))).toEqual([])
  })
})

// ---------------------------------------------------------------------------------------------------
// A scripted server, for the failures a real apiserver will not produce on demand.

type Handler = (req: IncomingMessage, res: ServerResponse, url: URL) => void

const scripted = async (handler: Handler) => {
  const requests: Array<{ path: string; query: URLSearchParams; authorization: string | undefined }> = []
  const closed: Array<string> = []
  const server: Server = createServer((req, res) => {
    const url = new URL(req.url ?? "/", "http://x")
    requests.push({ path: url.pathname, query: url.searchParams, authorization: req.headers.authorization })
    req.socket.once("close", () => closed.push(url.search))
    handler(req, res, url)
  })
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r))
  const port = (server.address() as AddressInfo).port
  const kubeconfig = [
    "apiVersion: v1",
    "kind: Config",
    "clusters:",
    "- name: fake",
    "  cluster:",
    `    server: http://127.0.0.1:${port}`,
    "    insecure-skip-tls-verify: true",
    "users:",
    "- name: u",
    "  user:",
    "    token: s3cret-token",
    "contexts:",
    "- name: fake",
    "  context: { cluster: fake, user: u }",
    "current-context: fake",
    "",
  ].join("\n")
  return {
    kubeconfig,
    requests,
    closed,
    stop: () =>
      new Promise<void>((r) => {
        server.closeAllConnections()
        server.close(() => r())
      }),
  }
}

const cm = (name: string, rv: string) => ({ metadata: { name, namespace: "ns", resourceVersion: rv } })
const line = (type: string, object: unknown) => `${JSON.stringify({ type, object })}\n`

const withClient = async <A>(
  kubeconfig: string,
  f: (client: KubeClient) => Promise<A>,
  watchInactivityMs?: number,
  requestTimeoutMs?: number,
) => {
  const scope = Effect.runSync(Scope.make())
  try {
    const client = await Effect.runPromise(
      makeKubeClient({
        cluster: "fake",
        kubeConfig: kubeConfigOf(kubeconfig),
        ...(watchInactivityMs ? { watchInactivityTimeoutMs: watchInactivityMs } : {}),
        ...(requestTimeoutMs ? { requestTimeoutMs } : {}),
      }).pipe(Scope.provide(scope)),
    )
    return await f(client)
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

const collect = (s: Stream.Stream<WatchEvent, unknown>) => Effect.runPromiseExit(Stream.runCollect(s))

describe("kube client watch against a scripted server", () => {
  it("reassembles events split anywhere, multi-byte characters included, and ends with the response", async () => {
    const events = [
      line("ADDED", { ...cm("ü-1", "1"), data: { s: "héllo ✓ 😀" } }),
      line("BOOKMARK", cm("", "5")),
    ]
    const bytes = Buffer.from(events.join(""))
    const srv = await scripted((_req, res) => {
      res.writeHead(200, { "content-type": "application/json" })
      // One byte at a time: every boundary, including inside UTF-8 sequences.
      let i = 0
      const tick = () => {
        if (i >= bytes.length) return res.end()
        res.write(bytes.subarray(i, i + 1))
        i++
        setImmediate(tick)
      }
      tick()
    })
    try {
      const exit = await withClient(srv.kubeconfig, (client) =>
        collect(client.watch("/api/v1/configmaps", {})),
      )
      expect(Exit.isSuccess(exit)).toBe(true)
      const got = Exit.isSuccess(exit) ? [...exit.value] : []
      expect(got.map((e) => e.type)).toEqual(["ADDED", "BOOKMARK"])
      expect(got[0]?.object.data.s).toBe("héllo ✓ 😀")
      expect(got[0]?.object.metadata.name).toBe("ü-1")
      expect(srv.requests[0]?.query.get("watch")).toBe("true")
      expect(srv.requests[0]?.authorization).toBe("Bearer s3cret-token")
    } finally {
      await srv.stop()
    }
  })

  it("fails on a line that does not parse instead of skipping it", async () => {
    const srv = await scripted((_req, res) => {
      res.writeHead(200)
      res.write(line("ADDED", cm("a", "1")))
      res.write('{"type":"MODIFIED","object":{"metadata":\n')
      res.write(line("ADDED", cm("c", "3")))
    })
    try {
      const seen: Array<string> = []
      const exit = await withClient(srv.kubeconfig, (client) =>
        Effect.runPromiseExit(
          client
            .watch("/api/v1/configmaps", {})
            .pipe(Stream.runForEach((e) => Effect.sync(() => seen.push(e.object.metadata.name)))),
        ),
      )
      expect(seen).toEqual(["a"])
      expect(Exit.isFailure(exit)).toBe(true)
      const err = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined
      expect(err).toBeInstanceOf(KubeTransportError)
      expect((err as KubeTransportError).message).toContain("unparseable watch line")
      expect((err as KubeTransportError).message).not.toContain("s3cret")
    } finally {
      await srv.stop()
    }
  })

  it("ends a silent watch with a KubeTransportError after the inactivity timeout", async () => {
    const srv = await scripted((_req, res) => {
      res.writeHead(200)
      res.write(line("ADDED", cm("a", "1")))
      // then nothing, with the connection open
    })
    try {
      const t0 = Date.now()
      const exit = await withClient(
        srv.kubeconfig,
        (client) => collect(client.watch("/api/v1/configmaps", {})),
        400,
      )
      expect(Date.now() - t0).toBeGreaterThanOrEqual(380)
      const err = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined
      expect(err).toBeInstanceOf(KubeTransportError)
      expect((err as KubeTransportError).message).toContain("inactive")
      expect(isWatchInactive(err)).toBe(true)
      await waitUntil("the request socket to close", 2_000, () => srv.closed.length === 1)
    } finally {
      await srv.stop()
    }
  })

  it("fails a watch whose response headers never come with a Timeout (a hung server)", async () => {
    const srv = await scripted(() => {
      // accept, never answer
    })
    try {
      const exit = await withClient(
        srv.kubeconfig,
        (client) => collect(client.watch("/api/v1/configmaps", {})),
        60_000,
        300,
      )
      const err = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined
      expect(err).toBeInstanceOf(KubeTransportError)
      expect(err).toMatchObject({ code: "Timeout", method: "GET", path: "/api/v1/configmaps" })
      expect(isWatchInactive(err)).toBe(false)
    } finally {
      await srv.stop()
    }
  })

  it("aborts the HTTP request when the consuming fiber is interrupted", async () => {
    const srv = await scripted((_req, res) => {
      res.writeHead(200)
      res.write(line("ADDED", cm("a", "1")))
    })
    try {
      await withClient(srv.kubeconfig, async (client) => {
        const fiber = Effect.runFork(Stream.runDrain(client.watch("/api/v1/configmaps", {})))
        await waitUntil("the watch request", 2_000, () => srv.requests.length === 1)
        await sleep(50)
        expect(srv.closed).toEqual([])
        await Effect.runPromise(Fiber.interrupt(fiber))
        await waitUntil("the request socket to close", 2_000, () => srv.closed.length === 1)
      })
    } finally {
      await srv.stop()
    }
  })

  it("turns a non-200 watch response into a KubeApiError with the Status reason and Retry-After", async () => {
    const srv = await scripted((_req, res) => {
      res.writeHead(429, { "content-type": "application/json", "retry-after": "3" })
      res.end(
        JSON.stringify({
          kind: "Status",
          status: "Failure",
          reason: "TooManyRequests",
          message: "slow down",
          code: 429,
        }),
      )
    })
    try {
      const exit = await withClient(srv.kubeconfig, (client) =>
        collect(client.watch("/api/v1/configmaps", {})),
      )
      const err = Exit.isFailure(exit) ? Cause.squash(exit.cause) : undefined
      expect(err).toBeInstanceOf(KubeApiError)
      expect(err).toMatchObject({
        status: 429,
        reason: "TooManyRequests",
        message: "slow down",
        retryAfterSeconds: 3,
      })
      expect(isGone(err)).toBe(false)
    } finally {
      await srv.stop()
    }
  })
})

describe("informer against a scripted server", () => {
  it("pages with continue, relists on an in-stream 410, backs off on 500 and on a parse error, then streams", async () => {
    let lists = 0
    let watches = 0
    const srv = await scripted((_req, res, url) => {
      if (url.searchParams.get("watch") !== "true") {
        const cont = url.searchParams.get("continue")
        if (!cont) lists++
        expect(url.searchParams.get("limit")).toBe("2")
        if (lists === 2 && cont === "page-2") {
          // The continue token expired mid-list: the informer starts the LIST over.
          res.writeHead(410, { "content-type": "application/json" })
          return res.end(
            JSON.stringify({ kind: "Status", reason: "Expired", code: 410, message: "continue too old" }),
          )
        }
        res.writeHead(200, { "content-type": "application/json" })
        const rv = lists <= 1 ? "10" : "20"
        if (!cont) {
          return res.end(
            JSON.stringify({
              metadata: { resourceVersion: rv, continue: "page-2" },
              items: [cm("a", "1"), cm("b", "2")],
            }),
          )
        }
        expect(cont).toBe("page-2")
        const items = lists <= 1 ? [cm("c", "3")] : [cm("c", "15")]
        return res.end(JSON.stringify({ metadata: { resourceVersion: rv }, items }))
      }
      watches++
      if (watches === 1) {
        expect(url.searchParams.get("resourceVersion")).toBe("10")
        expect(url.searchParams.get("allowWatchBookmarks")).toBe("true")
        const t = Number(url.searchParams.get("timeoutSeconds"))
        expect(t >= 300 && t <= 600).toBe(true)
        res.writeHead(200)
        res.write(line("MODIFIED", cm("a", "11")))
        res.write(line("BOOKMARK", { metadata: { resourceVersion: "12" } }))
        return res.end(
          line("ERROR", {
            kind: "Status",
            code: 410,
            reason: "Expired",
            message: "too old resource version",
          }),
        )
      }
      if (watches === 2) {
        expect(url.searchParams.get("resourceVersion")).toBe("20")
        res.writeHead(500)
        return res.end(
          JSON.stringify({ kind: "Status", code: 500, reason: "InternalError", message: "etcd hiccup" }),
        )
      }
      if (watches === 3) {
        // Resumes from the same RV (no relist for a 500).
        expect(url.searchParams.get("resourceVersion")).toBe("20")
        res.writeHead(200)
        return res.end("not json\n")
      }
      expect(url.searchParams.get("resourceVersion")).toBe("20")
      res.writeHead(200)
      res.write(line("ADDED", cm("d", "21")))
      res.write(line("DELETED", cm("a", "22")))
      // stays open
    })
    const h = await startInformer(srv.kubeconfig, { pageSize: 2, backoff: { initialMs: 20, maxMs: 100 } })
    try {
      const calls = recorder(h.informer as unknown as Informer<ConfigMap>)
      await h.run(h.informer.awaitSynced.pipe(Effect.timeout("10 seconds")))
      await waitUntil("the final watch's events", 10_000, () => calls.includes("delete:a"))
      expect(calls).toEqual([
        "add:a@1",
        "add:b@2",
        "add:c@3",
        "update:a@1->11",
        // relist after the 410: a went back to 1 (the scripted list is static), c changed
        "update:a@11->1",
        "update:c@3->15",
        "add:d@21",
        "delete:a",
      ])
      expect(h.informer.listCount).toBe(2 + 1 + 2)
      expect(h.informer.relists).toBe(1)
      expect(h.informer.errors).toBe(3)
      expect(h.informer.watchRestarts).toBe(3)
      expect(h.informer.resourceVersion).toBe("22")
      expect(h.informer.store.keys().sort()).toEqual(["ns/b", "ns/c", "ns/d"])
      const warnings = h.logs.filter((l) => l.level === "Warn").map((l) => String(l.annotations.error))
      expect(warnings).toEqual([
        expect.stringContaining("500 InternalError: etcd hiccup"),
        expect.stringContaining("unparseable watch line"),
      ])
      expect(h.logs.some((l) => l.message.includes("continue token expired"))).toBe(true)
      for (const r of srv.requests) expect(r.authorization).toBe("Bearer s3cret-token")
    } finally {
      await h.close()
      await srv.stop()
    }
  })

  it("delivers 500 events/s from socket to handler without added delay", async () => {
    // Same process, so the server's write time and the handler's clock compare directly.
    let timer: NodeJS.Timeout | undefined
    let sent = 0
    const total = 1500
    const srv = await scripted((_req, res, url) => {
      if (url.searchParams.get("watch") !== "true") {
        res.writeHead(200)
        return res.end(JSON.stringify({ metadata: { resourceVersion: "1" }, items: [] }))
      }
      res.writeHead(200)
      timer = setInterval(() => {
        for (let i = 0; i < 5 && sent < total; i++, sent++) {
          const o = { ...cm(`o-${sent % 200}`, String(2 + sent)), data: { t: String(performance.now()) } }
          res.write(line("MODIFIED", o))
        }
      }, 10)
    })
    const h = await startInformer(srv.kubeconfig, {})
    try {
      const latencies: Array<number> = []
      const record = (o: ConfigMap) => latencies.push(performance.now() - Number(o.data?.t))
      h.informer.addHandler({ onAdd: record, onUpdate: (_, o) => record(o) })
      await waitUntil("all events", 20_000, () => latencies.length === total)
      latencies.sort((a, b) => a - b)
      const p = (q: number) => latencies[Math.min(total - 1, Math.floor(q * total))]!.toFixed(2)
      console.log(`watch event → handler at 500/s: p50 ${p(0.5)} ms, p99 ${p(0.99)} ms, max ${p(1)} ms`)
      // The SPEC bar (p99 < 10 ms) is for the bench on a quiet core; this only catches a systematic
      // delay (polling, timers) in the path, on a possibly busy CI machine.
      expect(Number(p(0.5))).toBeLessThan(5)
      expect(Number(p(0.99))).toBeLessThan(50)
      expect(h.informer.store.size).toBe(200)
    } finally {
      clearInterval(timer)
      await h.close()
      await srv.stop()
    }
  })

  it("relists at once on a first 410, backs off on a repeated one, and honours Retry-After", async () => {
    const log: Array<{ kind: "list" | "watch"; at: number }> = []
    let watches = 0
    const srv = await scripted((_req, res, url) => {
      const isWatch = url.searchParams.get("watch") === "true"
      log.push({ kind: isWatch ? "watch" : "list", at: performance.now() })
      if (!isWatch) {
        res.writeHead(200)
        return res.end(JSON.stringify({ metadata: { resourceVersion: "5" }, items: [] }))
      }
      watches++
      if (watches <= 2) {
        res.writeHead(200)
        return res.end(line("ERROR", { kind: "Status", code: 410, reason: "Expired", message: "too old" }))
      }
      if (watches === 3) {
        res.writeHead(429, { "retry-after": "1" })
        return res.end(
          JSON.stringify({ kind: "Status", code: 429, reason: "TooManyRequests", message: "later" }),
        )
      }
      res.writeHead(200)
      res.write(line("ADDED", cm("x", "6")))
    })
    const h = await startInformer(srv.kubeconfig, { backoff: { initialMs: 200, maxMs: 5_000 } })
    try {
      await waitUntil("x", 10_000, () => h.informer.store.has("ns/x"))
      expect(log.map((l) => l.kind)).toEqual(["list", "watch", "list", "watch", "list", "watch", "watch"])
      const gap = (i: number) => log[i + 1]!.at - log[i]!.at
      expect(gap(1)).toBeLessThan(150) // first 410: relist at once
      expect(gap(3)).toBeGreaterThanOrEqual(190) // second 410 within 2 min: backoff 200-400 ms
      expect(gap(5)).toBeGreaterThanOrEqual(990) // 429 Retry-After: 1 s beats the 400-800 ms backoff
      expect(h.informer.relists).toBe(2)
      expect(h.informer.errors).toBe(3)
    } finally {
      await h.close()
      await srv.stop()
    }
  })

  it("resets the backoff after a healthy watch", async () => {
    const at: Array<number> = []
    let watches = 0
    let brokeAt = 0
    const srv = await scripted((_req, res, url) => {
      if (url.searchParams.get("watch") !== "true") {
        res.writeHead(200)
        return res.end(JSON.stringify({ metadata: { resourceVersion: "5" }, items: [] }))
      }
      at.push(performance.now())
      watches++
      if (watches <= 3) {
        res.writeHead(500)
        return res.end(JSON.stringify({ kind: "Status", code: 500, reason: "InternalError", message: "no" }))
      }
      res.writeHead(200)
      res.write(line("ADDED", cm(`x${watches}`, String(5 + watches))))
      if (watches === 4) {
        // Healthy for longer than resetAfterMs, then the connection drops.
        setTimeout(() => {
          brokeAt = performance.now()
          res.destroy()
        }, 700)
      }
    })
    const h = await startInformer(srv.kubeconfig, {
      backoff: { initialMs: 100, maxMs: 5_000, resetAfterMs: 500 },
    })
    try {
      await waitUntil("x5", 10_000, () => h.informer.store.has("ns/x5"))
      // Three failures grew the backoff to 800 ms; after the healthy watch it starts again at 100-200 ms.
      expect(at[3]! - at[2]!).toBeGreaterThanOrEqual(390)
      expect(at[4]! - brokeAt).toBeLessThan(380)
      expect(h.informer.errors).toBe(4)
    } finally {
      await h.close()
      await srv.stop()
    }
  })

  it("re-watches a silent watch at once, without counting it as a failure", async () => {
    const from: Array<string | null> = []
    const srv = await scripted((_req, res, url) => {
      if (url.searchParams.get("watch") !== "true") {
        res.writeHead(200)
        return res.end(JSON.stringify({ metadata: { resourceVersion: "5" }, items: [] }))
      }
      from.push(url.searchParams.get("resourceVersion"))
      res.writeHead(200)
      res.flushHeaders()
      if (from.length === 3) res.write(line("ADDED", cm("x", "6")))
      // otherwise: silence, as from an apiserver that has no bookmark to send
    })
    const h = await startInformer(srv.kubeconfig, { watchInactivityTimeoutMs: 250 })
    try {
      await waitUntil("x", 10_000, () => h.informer.store.has("ns/x"))
      expect(from).toEqual(["5", "5", "5"])
      expect(h.informer.errors).toBe(0)
      expect(h.informer.relists).toBe(0)
      expect(h.informer.watchRestarts).toBe(2)
      expect(h.logs.filter((l) => l.level === "Warn")).toEqual([])
    } finally {
      await h.close()
      await srv.stop()
    }
  })

  it("treats a watch that closes at once and empty as a failure (no hot loop) and recovers", async () => {
    let watches = 0
    const srv = await scripted((_req, res, url) => {
      if (url.searchParams.get("watch") !== "true") {
        res.writeHead(200)
        return res.end(JSON.stringify({ metadata: { resourceVersion: "5" }, items: [] }))
      }
      watches++
      res.writeHead(200)
      if (watches <= 3) return res.end()
      res.write(line("ADDED", cm("x", "6")))
    })
    const h = await startInformer(srv.kubeconfig, { backoff: { initialMs: 100, maxMs: 1_000 } })
    try {
      const t0 = Date.now()
      await waitUntil("x", 10_000, () => h.informer.store.has("ns/x"))
      // Three empty closes back off about 0.1-0.2 + 0.2-0.4 + 0.4-0.8 s.
      expect(Date.now() - t0).toBeGreaterThanOrEqual(650)
      expect(h.informer.errors).toBe(3)
      expect(watches).toBe(4)
    } finally {
      await h.close()
      await srv.stop()
    }
  })
})
