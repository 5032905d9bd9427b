// Credentials that change while the kube client runs: a swapped token is used by every later request
// while an open watch stays on its connection; a kubeconfig for another connection is refused; an exec
// plugin is run again before its credential's expirationTimestamp, and a member answering 401 to
// everything gets a few plugin runs, spaced out, not one per request. Real plugin scripts, a scripted
// server on loopback.
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect, Fiber, Stream } from "effect"
import { afterAll, describe, expect, it } from "vitest"
import { stringify } from "yaml"
import { checkKubeconfig, defaultPolicy } from "../../src/kubeconfig/policy.ts"
import { failureOf, line, scripted, withClient } from "../support/scripted-server.ts"

const dir = mkdtempSync(join(tmpdir(), "fleetcheck-rotation-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

const kubeconfigWith = (server: string, ca: Buffer | undefined, user: Record<string, unknown>) => {
  const doc = {
    apiVersion: "v1",
    kind: "Config",
    clusters: [{ name: "m", cluster: { server, "certificate-authority-data": ca?.toString("base64") } }],
    users: [{ name: "u", user }],
    contexts: [{ name: "m", context: { cluster: "m", user: "u" } }],
  }
  const result = checkKubeconfig({
    secretName: "m",
    data: { kubeconfig: Buffer.from(stringify(doc)).toString("base64") },
    policy: { ...defaultPolicy, allowExec: true },
    now: new Date(),
  })
  if (!result.ok) throw new Error(`refused: ${result.message}`)
  return result.kubeConfig
}

/**
 * A plugin that counts its runs in a file and prints token-<run>, expiring `lifetimeS` seconds from now
 * (none when 0).
 */
const countingPlugin = (name: string, lifetimeS: number) => {
  const counter = join(dir, `${name}.count`)
  const path = join(dir, `${name}.sh`)
  const expiry =
    lifetimeS > 0
      ? `,"expirationTimestamp":"'"$(date -u -d "+${lifetimeS} seconds" +%Y-%m-%dT%H:%M:%SZ)"'"`
      : ""
  writeFileSync(
    path,
    [
      "#!/bin/sh",
      `n=$(cat ${counter} 2>/dev/null || echo 0); n=$((n+1)); echo $n > ${counter}`,
      `echo '{"apiVersion":"client.authentication.k8s.io/v1","kind":"ExecCredential","status":{"token":"token-'$n'"${expiry}}}'`,
      "",
    ].join("\n"),
  )
  chmodSync(path, 0o755)
  return { path, runs: () => Number(readFileSync(counter, "utf8").trim() || "0") }
}

const exec = (command: string) => ({ exec: { apiVersion: "client.authentication.k8s.io/v1", command } })
const list = { method: "GET", path: "/api/v1/configmaps" } as const
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

describe("kube client credential rotation", () => {
  it("swaps a token in place: later requests carry it, an open watch keeps its connection", async () => {
    const srv = await scripted(
      (_req, res, url) => {
        if (url.searchParams.get("watch") === "true") {
          res.writeHead(200, { "content-type": "application/json" })
          res.write(line("BOOKMARK", { metadata: { resourceVersion: "1" } }))
          return // left open, as a watch is
        }
        res.end("{}")
      },
      { tls: true },
    )
    try {
      const first = kubeconfigWith(srv.url, srv.ca, { token: "old-token" })
      const second = kubeconfigWith(srv.url, srv.ca, { token: "new-token" })
      await withClient(first, {}, async (c) => {
        const watching = Effect.runFork(Stream.runDrain(c.watch("/api/v1/configmaps", {})))
        while (!srv.requests.some((r) => r.query.get("watch") === "true")) await sleep(10)
        await Effect.runPromise(c.request(list))
        await Effect.runPromise(c.setCredential(second))
        await Effect.runPromise(c.request(list))
        const sent = srv.requests.map(
          (r) => `${r.query.get("watch") === "true" ? "watch" : "get"} ${r.authorization}`,
        )
        expect(sent).toEqual(["watch Bearer old-token", "get Bearer old-token", "get Bearer new-token"])
        // The watch's connection is still open: nothing was torn down or re-established.
        expect(srv.closed.filter((q) => q.includes("watch=true"))).toEqual([])
        expect(c.credentialState().refreshes).toBe(1)
        await Effect.runPromise(Fiber.interrupt(watching))
      })
    } finally {
      await srv.stop()
    }
  })

  it("refuses a kubeconfig that names another connection, keeping the old credential", async () => {
    const srv = await scripted((_req, res) => res.end("{}"), { tls: true })
    try {
      const first = kubeconfigWith(srv.url, srv.ca, { token: "old-token" })
      const elsewhere = kubeconfigWith("https://127.0.0.1:1", srv.ca, { token: "new-token" })
      await withClient(first, {}, async (c) => {
        const err = failureOf(await Effect.runPromiseExit(c.setCredential(elsewhere)))
        expect(err).toMatchObject({ _tag: "KubeTransportError", code: "Config" })
        await Effect.runPromise(c.request(list))
        expect(srv.requests.map((r) => r.authorization)).toEqual(["Bearer old-token"])
      })
    } finally {
      await srv.stop()
    }
  })

  it("runs an exec plugin again before its credential expires, and sends the new token", async () => {
    const plugin = countingPlugin("expiring", 2)
    const srv = await scripted((_req, res) => res.end("{}"), { tls: true })
    try {
      await withClient(kubeconfigWith(srv.url, srv.ca, exec(plugin.path)), {}, async (c) => {
        for (let i = 0; i < 40; i++) {
          await Effect.runPromise(c.request(list))
          await sleep(100)
        }
        expect(c.credentialState().expiry).toBeInstanceOf(Date)
      })
      const tokens = [...new Set(srv.requests.map((r) => r.authorization))]
      expect(tokens.length).toBeGreaterThanOrEqual(2)
      expect(tokens[0]).toBe("Bearer token-1")
      // Each run's token was used (the last one perhaps not yet, if it ran as the test ended).
      expect(plugin.runs()).toBeGreaterThanOrEqual(tokens.length)
      expect(plugin.runs()).toBeLessThanOrEqual(tokens.length + 1)
    } finally {
      await srv.stop()
    }
  })

  it("a member that answers 401 to every token gets a few spaced-out plugin runs, not one per request", async () => {
    const plugin = countingPlugin("refused", 0)
    const srv = await scripted(
      (_req, res) => {
        res.writeHead(401, { "content-type": "application/json" })
        res.end('{"kind":"Status","reason":"Unauthorized","message":"Unauthorized"}')
      },
      { tls: true },
    )
    try {
      await withClient(kubeconfigWith(srv.url, srv.ca, exec(plugin.path)), {}, async (c) => {
        for (let i = 0; i < 30; i++) {
          const err = failureOf(await Effect.runPromiseExit(c.request(list)))
          expect(err).toMatchObject({ _tag: "KubeApiError", status: 401 })
          await sleep(50)
        }
      })
      // 30 refused requests over about 1.5 s: the first run, one on the first 401, one after 1 s of
      // backoff (then 2 s, 4 s, ...).
      expect(srv.requests.length).toBe(30)
      expect(plugin.runs()).toBeGreaterThanOrEqual(2)
      expect(plugin.runs()).toBeLessThanOrEqual(4)
    } finally {
      await srv.stop()
    }
  })

  it("refuses a plugin's output over the size cap without quoting it", async () => {
    const path = join(dir, "flood.sh")
    writeFileSync(path, "#!/bin/sh\nhead -c 3000000 /dev/zero | tr '\\0' x\n")
    chmodSync(path, 0o755)
    const srv = await scripted((_req, res) => res.end("{}"), { tls: true })
    try {
      await withClient(kubeconfigWith(srv.url, srv.ca, exec(path)), {}, async (c) => {
        const err = failureOf(await Effect.runPromiseExit(c.request(list)))
        expect(err).toMatchObject({ _tag: "KubeTransportError", code: "Credentials" })
        expect(err.message).toContain("larger than 1048576 bytes")
        expect(err.message).not.toContain("xxx")
        // Within the backoff, the next request fails at once instead of running the plugin again.
        const again = failureOf(await Effect.runPromiseExit(c.request(list)))
        expect(again.message).toContain("next run in")
      })
      expect(srv.requests).toHaveLength(0)
    } finally {
      await srv.stop()
    }
  })
})
