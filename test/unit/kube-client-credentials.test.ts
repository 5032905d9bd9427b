// Credential resolution in the kube client, with kubeconfigs that passed the policy: an exec plugin's
// stderr and stdout never reach an error message (client-node rejects with the raw stderr), and a token
// file is read as client-go reads it (trimmed). Real plugin scripts, a scripted server on loopback.
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { Effect } from "effect"
import { afterAll, describe, expect, it } from "vitest"
import { stringify } from "yaml"
import { KubeTransportError } from "../../src/kube/client.ts"
import { checkKubeconfig, defaultPolicy, type KubeconfigPolicy } from "../../src/kubeconfig/policy.ts"
import { failureOf, scripted, withClient } from "../support/scripted-server.ts"

const sentinel = "SENTINEL-plugin-output-7f3k"
const dir = mkdtempSync(join(tmpdir(), "fleetcheck-exec-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))

/** An executable shell script in the test's temporary directory. */
const script = (name: string, body: string) => {
  const path = join(dir, name)
  writeFileSync(path, `#!/bin/sh\n${body}\n`)
  chmodSync(path, 0o755)
  return path
}

/** The policy's KubeConfig for the scripted server with this user, as the hub would build it. */
const checked = (
  server: string,
  ca: Buffer | undefined,
  user: Record<string, unknown>,
  policy: Partial<KubeconfigPolicy>,
) => {
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
    policy: { ...defaultPolicy, ...policy },
    now: new Date(),
  })
  if (!result.ok) throw new Error(`refused: ${result.message}`)
  return result.kubeConfig
}

const exec = (command: string) => ({
  exec: { apiVersion: "client.authentication.k8s.io/v1", command, interactiveMode: "Never" },
})

const list = { method: "GET", path: "/api/v1/configmaps" } as const

describe("kube client credentials", () => {
  it("fails with a fixed message when the exec plugin exits non-zero, never showing its stderr", async () => {
    const plugin = script("fails.sh", `echo "${sentinel} token=abc" >&2\nexit 3`)
    const srv = await scripted((_req, res) => res.end("{}"), { tls: true })
    try {
      const kc = checked(srv.url, srv.ca, exec(plugin), { allowExec: true })
      const exit = await withClient(kc, {}, (c) => Effect.runPromiseExit(c.request(list)))
      const err = failureOf(exit)
      expect(err).toBeInstanceOf(KubeTransportError)
      expect(err).toMatchObject({ code: "Credentials", path: "/api/v1/configmaps" })
      expect(err.message).toContain("exec credential plugin failed")
      expect(err.message).not.toContain(sentinel)
      expect(err.message).not.toContain("token=")
      expect(srv.requests).toHaveLength(0)
    } finally {
      await srv.stop()
    }
  })

  it("never quotes what the plugin printed when it is not an ExecCredential", async () => {
    const plugin = script("garbage.sh", `echo "${sentinel} is not JSON"`)
    const srv = await scripted((_req, res) => res.end("{}"), { tls: true })
    try {
      const kc = checked(srv.url, srv.ca, exec(plugin), { allowExec: true })
      const err = failureOf(await withClient(kc, {}, (c) => Effect.runPromiseExit(c.request(list))))
      expect(err).toMatchObject({ _tag: "KubeTransportError", code: "Credentials" })
      expect(err.message).toContain("exec credential plugin")
      expect(err.message).not.toContain(sentinel)
    } finally {
      await srv.stop()
    }
  })

  it("names the error code when the plugin cannot be started", async () => {
    const srv = await scripted((_req, res) => res.end("{}"), { tls: true })
    try {
      const kc = checked(srv.url, srv.ca, exec(join(dir, "missing-plugin")), { allowExec: true })
      const err = failureOf(await withClient(kc, {}, (c) => Effect.runPromiseExit(c.request(list))))
      expect(err).toMatchObject({ _tag: "KubeTransportError", code: "Credentials" })
      expect(err.message).toContain("could not be started (ENOENT)")
    } finally {
      await srv.stop()
    }
  })

  it("sends the token a working plugin prints", async () => {
    const credential = JSON.stringify({
      apiVersion: "client.authentication.k8s.io/v1",
      kind: "ExecCredential",
      status: { token: "plugin-token" },
    })
    const plugin = script("works.sh", `echo '${credential}'`)
    const srv = await scripted((_req, res) => res.end("{}"), { tls: true })
    try {
      const kc = checked(srv.url, srv.ca, exec(plugin), { allowExec: true })
      await withClient(kc, {}, (c) => Effect.runPromise(c.request(list)))
      expect(srv.requests[0]?.authorization).toBe("Bearer plugin-token")
    } finally {
      await srv.stop()
    }
  })

  it("gives up on a hung plugin at the request deadline instead of waiting for it", async () => {
    const plugin = script("hangs.sh", "sleep 3")
    const srv = await scripted((_req, res) => res.end("{}"), { tls: true })
    try {
      const kc = checked(srv.url, srv.ca, exec(plugin), { allowExec: true })
      const t0 = Date.now()
      const err = failureOf(
        await withClient(kc, { requestTimeoutMs: 300 }, (c) => Effect.runPromiseExit(c.request(list))),
      )
      // The plugin's own deadline defaults to the request deadline; its process group is killed then.
      expect(err).toMatchObject({ _tag: "KubeTransportError", code: "Credentials" })
      expect(err.message).toContain("exec credential plugin did not finish within 300 ms")
      expect(Date.now() - t0).toBeLessThan(2_000)
    } finally {
      await srv.stop()
    }
  })

  it("trims a token file's trailing newline, as client-go does", async () => {
    const tokenFile = join(dir, "token")
    writeFileSync(tokenFile, "file-token\n")
    const srv = await scripted((_req, res) => res.end("{}"), { tls: true })
    try {
      const kc = checked(srv.url, srv.ca, { tokenFile }, { allowFilePaths: true })
      await withClient(kc, {}, (c) => Effect.runPromise(c.request(list)))
      expect(srv.requests[0]?.authorization).toBe("Bearer file-token")
    } finally {
      await srv.stop()
    }
  })
})
