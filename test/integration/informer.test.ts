// The Kubernetes client and the informer against a real kube-apiserver (local-fleet harness): paged
// LIST, events, stripping, label selectors, an apiserver restarted under a live informer, a forced
// 410 relist with deletes for what vanished, a throwing handler. What a real apiserver will not do on
// demand (split and garbage watch lines, silence, ERROR 410 and 5xx) is covered against a scripted
// server in test/unit/kube-client-watch.test.ts and test/unit/informer-scripted.test.ts. Requests the
// API server refuses with 429 (a priority level with a seat or few and queuing off) are sent again.
import { readFileSync } from "node:fs"
import { createServer } from "node:https"
import type { AddressInfo } from "node:net"
import { KubeConfig } from "@kubernetes/client-node"
import { Cause, Effect, Exit, Fiber, Scope, Stream, Tracer } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type LocalCluster, type LocalFleet, startFleet } from "../../clusters/local-fleet/index.ts"
import type { Informer } from "../../src/engine/informer/informer.ts"
import {
  isAlreadyExists,
  isConflict,
  isNotFound,
  KubeApiError,
  type KubeClient,
  KubeTransportError,
  makeKubeClient,
  resourcePath,
} from "../../src/kube/client.ts"
import { type ConfigMap, cmResource, kubeConfigOf, recorder, startInformer } from "../support/informer.ts"
import { sumOf } from "../support/prometheus-text.ts"
import { startProxy } from "../support/tcp-proxy.ts"
import { sleep, waitUntil } from "../support/wait.ts"

/** waitUntil's probe interval, shorter than its default: these waits gate many small steps. */
const pollMs = 50

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

  it("sends requests the API server refused with 429 (priority and fairness) again until they succeed", async () => {
    // A priority level of its own for one user, with a nominal share of 1, nothing borrowed and
    // queuing off (Reject): requests past its few seats get 429 with Retry-After at once. An admission
    // webhook holds each create (and so its seat) until the client has been refused once, so the
    // refusals do not depend on timing.
    const user = "inf-throttled"
    const level = "fleetcheck-test-throttled"
    const namespace = await ns("inf-throttle")
    let release: () => void = () => {}
    const released = new Promise<void>((r) => {
      release = r
    })
    const safety = setTimeout(release, 10_000)
    const fixture = (f: string) =>
      readFileSync(new URL(`../support/fixtures/scripted-tls/${f}`, import.meta.url))
    const webhook = createServer({ cert: fixture("server.crt"), key: fixture("server.key") }, (req, res) => {
      let body = ""
      req.on("data", (chunk: Buffer) => {
        body += chunk.toString("utf8")
      })
      req.on("end", () => {
        const uid = (JSON.parse(body) as { request: { uid: string } }).request.uid
        void released.then(() => {
          res.writeHead(200, { "content-type": "application/json" })
          res.end(
            JSON.stringify({
              apiVersion: "admission.k8s.io/v1",
              kind: "AdmissionReview",
              response: { uid, allowed: true },
            }),
          )
        })
      })
    })
    await new Promise<void>((r) => webhook.listen(0, "127.0.0.1", r))
    const webhookName = "hold.inf-throttle.fleetcheck.io"
    const scope = Effect.runSync(Scope.make())
    try {
      const port = (webhook.address() as AddressInfo).port
      await mustApi("POST", "/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations", {
        metadata: { name: webhookName },
        webhooks: [
          {
            name: webhookName,
            clientConfig: {
              url: `https://127.0.0.1:${port}/hold`,
              caBundle: fixture("server.crt").toString("base64"),
            },
            rules: [
              { operations: ["CREATE"], apiGroups: [""], apiVersions: ["v1"], resources: ["configmaps"] },
            ],
            namespaceSelector: { matchLabels: { "kubernetes.io/metadata.name": namespace } },
            failurePolicy: "Fail",
            sideEffects: "None",
            admissionReviewVersions: ["v1"],
            timeoutSeconds: 15,
          },
        ],
      })
      await mustApi("POST", "/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations", {
        metadata: { name: level },
        spec: {
          type: "Limited",
          limited: {
            nominalConcurrencyShares: 1,
            lendablePercent: 0,
            borrowingLimitPercent: 0,
            limitResponse: { type: "Reject" },
          },
        },
      })
      await mustApi("POST", "/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas", {
        metadata: { name: level },
        spec: {
          priorityLevelConfiguration: { name: level },
          matchingPrecedence: 500,
          rules: [
            {
              subjects: [{ kind: "User", user: { name: user } }],
              resourceRules: [
                { verbs: ["*"], apiGroups: ["*"], resources: ["*"], namespaces: ["*"], clusterScope: true },
              ],
            },
          ],
        },
      })
      await mustApi("POST", `/apis/rbac.authorization.k8s.io/v1/namespaces/${namespace}/roles`, {
        metadata: { name: "configmaps" },
        rules: [{ apiGroups: [""], resources: ["configmaps"], verbs: ["create"] }],
      })
      await mustApi("POST", `/apis/rbac.authorization.k8s.io/v1/namespaces/${namespace}/rolebindings`, {
        metadata: { name: "configmaps" },
        roleRef: { apiGroup: "rbac.authorization.k8s.io", kind: "Role", name: "configmaps" },
        subjects: [{ apiGroup: "rbac.authorization.k8s.io", kind: "User", name: user }],
      })
      const apiserverMetric = async (name: string) => {
        const text = String((await c.api("GET", "/metrics")).body)
        return sumOf(text, name, { priority_level: level })
      }
      let seats = 0
      await waitUntil("the priority level in force", 10_000, async () => {
        seats = await apiserverMetric("apiserver_flowcontrol_nominal_limit_seats")
        return seats > 0
      })

      // The admin's token, acting as the throttled user (its priority level is the impersonated user's).
      const admin = kubeConfigOf(c.kubeconfig)
      const asUser = new KubeConfig()
      asUser.loadFromOptions({
        clusters: admin.clusters,
        contexts: admin.contexts,
        currentContext: admin.getCurrentContext(),
        users: admin.users.map((u) => ({ ...u, impersonateUser: user })),
      })
      let retries = 0
      const client = await Effect.runPromise(
        makeKubeClient({
          cluster: "inf",
          kubeConfig: asUser,
          onThrottleRetry: (method, status) => {
            expect([method, status]).toEqual(["POST", 429])
            retries++
            release()
          },
        }).pipe(Scope.provide(scope)),
      )
      // Two more creates at once than the level has seats: the first `seats` wait in the webhook, the
      // rest are refused until they are let through.
      const names = Array.from({ length: seats + 2 }, (_, i) => `burst-${i}`)
      const created = await Effect.runPromise(
        Effect.forEach(
          names,
          (name) =>
            client.request<ConfigMap>({
              method: "POST",
              path: cmPath(namespace),
              body: { apiVersion: "v1", kind: "ConfigMap", metadata: { name }, data: { v: "1" } },
            }),
          { concurrency: "unbounded" },
        ),
      )
      expect(created.map((o) => o.metadata.name)).toEqual(names)
      const rejected = await apiserverMetric("apiserver_flowcontrol_rejected_requests_total")
      process.stderr.write(
        `[informer] ${names.length} creates on a level of ${seats} seats: the API server rejected ${rejected}, the client retried ${retries}\n`,
      )
      expect(rejected).toBeGreaterThanOrEqual(2)
      expect(retries).toBe(rejected)
    } finally {
      clearTimeout(safety)
      release()
      await Effect.runPromise(Scope.close(scope, Exit.void))
      await c.api(
        "DELETE",
        `/apis/admissionregistration.k8s.io/v1/validatingwebhookconfigurations/${webhookName}`,
      )
      await c.api("DELETE", `/apis/flowcontrol.apiserver.k8s.io/v1/flowschemas/${level}`)
      await c.api("DELETE", `/apis/flowcontrol.apiserver.k8s.io/v1/prioritylevelconfigurations/${level}`)
      webhook.closeAllConnections()
      await new Promise<void>((r) => webhook.close(() => r()))
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
        await waitUntil("latency event", 10_000, () => latencies.length === i + 1, pollMs)
      }
      off()
      latencies.sort((a, b) => a - b)
      console.log(
        `create → onAdd (incl. apiserver): p50 ${latencies[10]?.toFixed(1)} ms, max ${latencies[19]?.toFixed(1)} ms`,
      )
      calls.length = 0

      const a = await createCm(namespace, "a", { app: "x" }, { v: "1" })
      await waitUntil("add a", 10_000, () => calls.includes(`add:a@${a.metadata.resourceVersion}`), pollMs)
      expect(h.informer.store.byIndex("byData", "1").map((o) => o.metadata.name)).toEqual(["a"])

      const current = await mustApi("GET", cmPath(namespace, "a"))
      const updated = await mustApi("PUT", cmPath(namespace, "a"), { ...current, data: { v: "3" } })
      await waitUntil(
        "update a",
        10_000,
        () =>
          calls.includes(`update:a@${current.metadata.resourceVersion}->${updated.metadata.resourceVersion}`),
        pollMs,
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
      await waitUntil(
        "hidden enters the selector",
        10_000,
        () => calls.includes(`add:hidden@${inSel.metadata.resourceVersion}`),
        pollMs,
      )
      await mustApi("PUT", cmPath(namespace, "hidden"), {
        ...inSel,
        metadata: { ...inSel.metadata, labels: {} },
      })
      await waitUntil("hidden leaves the selector", 10_000, () => calls.includes("delete:hidden"), pollMs)
      expect(h.informer.store.has(`${namespace}/hidden`)).toBe(false)

      await mustApi("DELETE", cmPath(namespace, "a"))
      await waitUntil("delete a", 10_000, () => calls.includes("delete:a"), pollMs)
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
      await waitUntil(
        "three adds",
        10_000,
        () => calls.filter((x) => x.startsWith("add:")).length === 3,
        pollMs,
      )
      expect(h.informer.handlerErrors).toBe(3)
      await waitUntil("the error log", 5_000, () => h.logs.some((l) => l.level === "Error"), pollMs)
      const logged = h.logs.find((l) => l.level === "Error")
      expect(logged?.message).toContain("onAdd threw")
      expect(logged?.annotations).toMatchObject({ cluster: "inf", resource: "configmaps" })
      expect(String(logged?.annotations.error)).toContain("handler bug")
      // Still alive afterwards.
      await mustApi("DELETE", cmPath(namespace, "t1"))
      await waitUntil("delete t1", 10_000, () => calls.includes("delete:t1"), pollMs)
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
      await waitUntil(
        "two resyncs",
        5_000,
        () => calls.filter((x) => x.startsWith("update:")).length >= 4,
        pollMs,
      )
      await waitUntil("quiet re-watches", 5_000, () => h.informer.watchRestarts >= 2, pollMs)
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
      await waitUntil("relist", 30_000, () => h.informer.relists >= 1 && calls.length >= 3, pollMs)
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
      await waitUntil("add e", 10_000, () => calls.some((x) => x.startsWith("add:e@")), pollMs)
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
      await waitUntil("failures while down", 20_000, () => h.informer.errors >= 3, pollMs)
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
      await waitUntil("the changes after the restart", 60_000, () => calls.length >= 3, pollMs)
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
      await waitUntil("add e", 10_000, () => calls.includes(`add:e@${e.metadata.resourceVersion}`), pollMs)
    } finally {
      await h.close()
    }
  })

  it("carries a credential's requests and watches on one HTTP/2 connection, and replaces one that stopped answering", async () => {
    const namespace = await ns("inf-h2")
    // The proxy counts the client's connections from outside it.
    const proxy = await startProxy(Number(new URL(c.server).port))
    const viaProxy = c.kubeconfig.replace(c.server, `https://127.0.0.1:${proxy.port}`)
    const h = await startInformer(
      viaProxy,
      { namespace },
      { requestTimeoutMs: 5_000, pingIdleMs: 1_000, pingTimeoutMs: 1_000 },
    )
    try {
      await h.run(h.informer.awaitSynced.pipe(Effect.timeout("30 seconds")))
      // A second watch on the same client, and 40 writes and 40 reads at once.
      let watched = 0
      const second = Effect.runFork(
        Stream.runForEach(h.client.watch(cmPath(namespace), {}), (ev) =>
          Effect.sync(() => void (ev.type === "ADDED" && watched++)),
        ),
      )
      await sleep(300)
      const names = Array.from({ length: 40 }, (_, i) => `h2-${i}`)
      await h.run(
        Effect.all(
          names.flatMap((name) => [
            h.client.request({
              method: "POST",
              path: cmPath(namespace),
              body: { apiVersion: "v1", kind: "ConfigMap", metadata: { name }, data: { v: "1" } },
            }),
            h.client.request({ method: "GET", path: cmPath(namespace), query: { limit: "1" } }),
          ]),
          { concurrency: "unbounded" },
        ),
      )
      await waitUntil(
        "both watches saw every ConfigMap",
        10_000,
        () => {
          return h.informer.store.size === names.length && watched === names.length
        },
        pollMs,
      )
      // HTTP/1.1 would have opened a connection per request in flight.
      expect(proxy.accepted()).toBe(1)
      expect(proxy.open()).toBe(1)

      // The connection stops carrying bytes: PINGs go unanswered, the connection is closed (its watches
      // and requests fail at once, not at their deadlines), and the next one replaces it.
      proxy.cut("blackhole")
      const t0 = Date.now()
      const hung = await Effect.runPromiseExit(
        h.client.request({ method: "GET", path: cmPath(namespace), query: { limit: "1" } }),
      )
      const failedAfterMs = Date.now() - t0
      const error = Exit.isFailure(hung) ? Cause.squash(hung.cause) : undefined
      expect(error).toBeInstanceOf(KubeTransportError)
      expect((error as KubeTransportError).code).toBe("PingTimeout")
      expect(failedAfterMs).toBeLessThan(5_000)
      const watchExit = await Effect.runPromise(Fiber.await(second))
      expect(Exit.isFailure(watchExit)).toBe(true)
      proxy.restore()
      await createCm(namespace, "after")
      await waitUntil(
        "the informer's watch is back",
        20_000,
        () => h.informer.store.size === names.length + 1,
        pollMs,
      )
      await h.run(h.client.request({ method: "GET", path: cmPath(namespace), query: { limit: "1" } }))
      expect(proxy.open()).toBe(1)
    } finally {
      await h.close()
      await proxy.close()
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
    await waitUntil("sockets to close", 5_000, () => tls() === before, pollMs)
    await createCm(namespace, "after-close")
    await sleep(500)
    expect(calls.filter((x) => x.includes("after-close"))).toEqual([])
  })
})
