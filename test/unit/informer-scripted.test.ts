// The informer against a scripted server (test/support/scripted-server.ts): paging with continue, 410
// relists in the stream and on the continue token (at once unless it is a storm), backoff on 5xx, parse
// errors and empty watches, its reset after a healthy watch, Retry-After (waited as asked, not doubled),
// silent watches, and event latency. No cluster needed.
import { Effect } from "effect"
import { describe, expect, it } from "vitest"
import type { Informer } from "../../src/engine/informer/informer.ts"
import { type ConfigMap, recorder, startInformer } from "../support/informer.ts"
import { cm, line, scripted } from "../support/scripted-server.ts"
import { waitUntil } from "../support/wait.ts"

/** waitUntil's probe interval, shorter than its default: these waits gate many small steps. */
const pollMs = 50

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
      await waitUntil("the final watch's events", 10_000, () => calls.includes("delete:a"), pollMs)
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
      await waitUntil("all events", 20_000, () => latencies.length === total, pollMs)
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
      await waitUntil("x", 10_000, () => h.informer.store.has("ns/x"), pollMs)
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

  it("relists at once on a 410 after a watch that ran, however soon after the last 410", async () => {
    // A restarted API server expires every watch's RV: two restarts a minute apart are two routine
    // 410s, not a storm, and the second must not wait out a backoff while the cache is behind.
    const log: Array<{ kind: "list" | "watch"; at: number }> = []
    let watches = 0
    let goneAt = 0
    const gone = line("ERROR", { kind: "Status", code: 410, reason: "Expired", message: "too old" })
    const srv = await scripted((_req, res, url) => {
      const isWatch = url.searchParams.get("watch") === "true"
      log.push({ kind: isWatch ? "watch" : "list", at: performance.now() })
      if (!isWatch) {
        res.writeHead(200)
        return res.end(JSON.stringify({ metadata: { resourceVersion: "5" }, items: [] }))
      }
      watches++
      res.writeHead(200)
      if (watches === 1) return res.end(gone)
      if (watches === 2) {
        res.write(line("ADDED", cm("x", "6")))
        setTimeout(() => {
          goneAt = performance.now()
          res.end(gone)
        }, 300)
        return
      }
      res.write(line("ADDED", cm("y", "7")))
    })
    const h = await startInformer(srv.kubeconfig, { backoff: { initialMs: 1_000, maxMs: 5_000 } })
    try {
      await waitUntil("y", 10_000, () => h.informer.store.has("ns/y"), pollMs)
      expect(log.map((l) => l.kind)).toEqual(["list", "watch", "list", "watch", "list", "watch"])
      // The second 410 came 0.3 s after the first, on a watch that delivered: relisted at once, not
      // after the 1-2 s backoff.
      expect(log[4]!.at - goneAt).toBeLessThan(500)
      expect(h.informer.relists).toBe(2)
    } finally {
      await h.close()
      await srv.stop()
    }
  })

  it("waits as Retry-After asks, without growing the backoff on each such answer", async () => {
    // A restarted API server answers 429 "storage is (re)initializing" with Retry-After: 1 until its
    // watch cache is ready: three in a row are three 1 s waits, not 1, 2 and 4 s.
    const at: number[] = []
    let watches = 0
    const srv = await scripted((_req, res, url) => {
      if (url.searchParams.get("watch") !== "true") {
        res.writeHead(200)
        return res.end(JSON.stringify({ metadata: { resourceVersion: "5" }, items: [] }))
      }
      at.push(performance.now())
      watches++
      if (watches <= 3) {
        res.writeHead(429, { "retry-after": "1" })
        return res.end(
          JSON.stringify({
            kind: "Status",
            code: 429,
            reason: "TooManyRequests",
            message: "storage is (re)initializing",
          }),
        )
      }
      res.writeHead(200)
      res.write(line("ADDED", cm("x", "6")))
    })
    const h = await startInformer(srv.kubeconfig, { backoff: { initialMs: 600, maxMs: 10_000 } })
    try {
      await waitUntil("x", 15_000, () => h.informer.store.has("ns/x"), pollMs)
      expect(at).toHaveLength(4)
      for (let i = 1; i < 4; i++) {
        const gap = at[i]! - at[i - 1]!
        expect(gap).toBeGreaterThanOrEqual(990)
        // A doubled backoff would have made the third wait 2.4-4.8 s.
        expect(gap).toBeLessThan(1_800)
      }
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
      await waitUntil("x5", 10_000, () => h.informer.store.has("ns/x5"), pollMs)
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
      await waitUntil("x", 10_000, () => h.informer.store.has("ns/x"), pollMs)
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
      await waitUntil("x", 10_000, () => h.informer.store.has("ns/x"), pollMs)
      // Three empty closes back off about 0.1-0.2 + 0.2-0.4 + 0.4-0.8 s.
      expect(Date.now() - t0).toBeGreaterThanOrEqual(650)
      expect(h.informer.errors).toBe(3)
      expect(watches).toBe(4)
    } finally {
      await h.close()
      await srv.stop()
    }
  })

  it("stores and hands out what the transform keeps: listed objects, watched ones and deleted ones", async () => {
    const withData = (name: string, rv: string) => ({ ...cm(name, rv), data: { big: "x".repeat(1000) } })
    const srv = await scripted((_req, res, url) => {
      res.writeHead(200)
      if (url.searchParams.get("watch") !== "true")
        return res.end(JSON.stringify({ metadata: { resourceVersion: "5" }, items: [withData("a", "4")] }))
      res.write(line("ADDED", withData("b", "6")))
      res.write(line("MODIFIED", withData("a", "7")))
      res.write(line("DELETED", withData("b", "8")))
    })
    // Keeps the metadata only (a metadata-only cache).
    const transform = (o: ConfigMap): ConfigMap => ({ metadata: o.metadata })
    const h = await startInformer<ConfigMap>(srv.kubeconfig, { transform })
    try {
      const handed: Array<ConfigMap> = []
      h.informer.addHandler({
        onAdd: (o) => handed.push(o),
        onUpdate: (_, o) => handed.push(o),
        onDelete: (o) => handed.push(o),
      })
      await waitUntil("b deleted", 10_000, () => handed.length === 4, pollMs)
      expect(handed.map((o) => `${o.metadata.name}@${o.metadata.resourceVersion}`)).toEqual([
        "a@4",
        "b@6",
        "a@7",
        "b@8",
      ])
      for (const o of [...handed, ...h.informer.store.list()]) expect(o).not.toHaveProperty("data")
      expect(h.informer.store.keys()).toEqual(["ns/a"])
    } finally {
      await h.close()
      await srv.stop()
    }
  })
})
