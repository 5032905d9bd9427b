// spec.restore.etcd: restores an etcd snapshot with etcdutl (which checks the snapshot's integrity
// hash), starts etcd on loopback in the pod on the restored data, and counts the keys under each
// expected prefix through etcd's own API. The snapshot's time (the object's) is the recovery point.
import { spawn } from "node:child_process"
import { createServer } from "node:net"
import { join } from "node:path"
import type * as z from "zod"
import type { EtcdRestoreSchema } from "../api/restore.ts"
import { fetchObject } from "./object-fetch.ts"
import { type AgentContext, AgentFailure, type AgentReport } from "./protocol.ts"
import { formatBytes } from "./scratch.ts"
import { lastWords, runTool } from "./tool.ts"

type EtcdSpec = z.output<typeof EtcdRestoreSchema>

const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const srv = createServer()
    srv.once("error", reject)
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address()
      const port = typeof addr === "object" && addr ? addr.port : 0
      srv.close(() => resolve(port))
    })
  })

/** The key after every key with this prefix (etcd's range_end for a prefix). */
export const prefixEnd = (prefix: Buffer): Buffer => {
  const end = Buffer.from(prefix)
  for (let i = end.length - 1; i >= 0; i--) {
    if ((end[i] as number) < 0xff) {
      end[i] = (end[i] as number) + 1
      return end.subarray(0, i + 1)
    }
  }
  return Buffer.from([0]) // all 0xff: every key from the prefix on
}

/** Keys under a prefix; every key when the prefix is undefined (key and range_end "\0"). */
const countKeys = async (client: string, prefix: string | undefined): Promise<number> => {
  const key = prefix === undefined ? Buffer.from([0]) : Buffer.from(prefix, "utf8")
  const end = prefix === undefined ? Buffer.from([0]) : prefixEnd(key)
  const res = await fetch(`${client}/v3/kv/range`, {
    method: "POST",
    body: JSON.stringify({
      key: key.toString("base64"),
      range_end: end.toString("base64"),
      count_only: true,
    }),
    signal: AbortSignal.timeout(30_000),
  })
  if (!res.ok)
    throw new AgentFailure("RestoreToolFailed", `etcd range ${prefix ?? "(all)"}: HTTP ${res.status}`)
  const body = (await res.json()) as { count?: string | number }
  return Number(body.count ?? 0)
}

export const restoreEtcd = async (ctx: AgentContext, spec: EtcdSpec): Promise<AgentReport> => {
  const snapshot = await fetchObject(spec.snapshot.url, {
    endpointURL: spec.snapshot.endpointURL,
    env: ctx.env,
    scratch: ctx.scratch,
    scratchLimitBytes: ctx.scratchLimitBytes,
  })
  const recoveryPoint = { id: snapshot.source, time: snapshot.modified }
  try {
    const [peerPort, clientPort] = [await freePort(), await freePort()]
    const peer = `http://127.0.0.1:${peerPort}`
    const client = `http://127.0.0.1:${clientPort}`
    const dataDir = join(ctx.scratch, "etcd-data")
    const restored = await runTool(
      "etcdutl",
      [
        "snapshot",
        "restore",
        snapshot.path,
        `--data-dir=${dataDir}`,
        "--name=restore",
        `--initial-cluster=restore=${peer}`,
        `--initial-advertise-peer-urls=${peer}`,
      ],
      { env: ctx.env },
    )
    if (restored.code !== 0) {
      const words = lastWords(restored.stderr)
      throw new AgentFailure(
        /hash|integrity|corrupt|invalid database|not a valid|unexpected EOF|file size too small|checksum/i.test(
          restored.stderr,
        )
          ? "DataCorrupted"
          : "RestoreToolFailed",
        `etcdutl snapshot restore: ${words || `exit code ${restored.code}`}`,
      )
    }
    const etcd = spawn(
      "etcd",
      [
        "--name=restore",
        `--data-dir=${dataDir}`,
        `--listen-client-urls=${client}`,
        `--advertise-client-urls=${client}`,
        `--listen-peer-urls=${peer}`,
        `--initial-advertise-peer-urls=${peer}`,
        `--initial-cluster=restore=${peer}`,
        "--log-level=error",
      ],
      { env: ctx.env, stdio: ["ignore", "ignore", "pipe"] },
    )
    let etcdErr = ""
    etcd.stderr.on("data", (c: Buffer) => {
      etcdErr = (etcdErr + c.toString()).slice(-8192)
    })
    const exited = new Promise<never>((_, reject) => {
      etcd.once("error", (e: NodeJS.ErrnoException) =>
        reject(
          new AgentFailure("RestoreToolFailed", e.code === "ENOENT" ? "etcd is not installed" : e.message),
        ),
      )
      etcd.once("exit", (code) =>
        reject(
          new AgentFailure(
            "RestoreToolFailed",
            `etcd exited (${code}) on the restored data: ${lastWords(etcdErr)}`,
          ),
        ),
      )
    })
    exited.catch(() => undefined)
    try {
      await Promise.race([waitHealthy(client), exited])
      const total = await countKeys(client, undefined)
      const expected: string[] = []
      for (const e of spec.expectKeys) {
        const n = await Promise.race([countKeys(client, e.prefix), exited])
        expected.push(`${e.prefix}: ${n}`)
        if (n < e.min)
          throw new AgentFailure(
            "AssertionFailed",
            `${n} keys under ${e.prefix}, fewer than ${e.min} (${total} keys in all)`,
          )
      }
      return {
        message: `restored etcd snapshot ${snapshot.source} (${formatBytes(snapshot.bytes)}, ${recoveryPoint.time}): ${total} keys${expected.length ? `; ${expected.join(", ")}` : ""}`,
        dataTimestamp: recoveryPoint.time,
        counts: { keys: total, files: 1, bytes: snapshot.bytes },
        recoveryPoint,
      }
    } finally {
      etcd.removeAllListeners("exit")
      etcd.kill("SIGKILL")
    }
  } catch (e) {
    if (e instanceof AgentFailure) e.recoveryPoint = recoveryPoint
    throw e
  }
}

const waitHealthy = async (client: string): Promise<void> => {
  const deadline = Date.now() + 60_000
  for (;;) {
    try {
      const res = await fetch(`${client}/health`, { signal: AbortSignal.timeout(2_000) })
      if (res.ok) return
    } catch {
      // not listening yet
    }
    if (Date.now() > deadline)
      throw new AgentFailure("RestoreToolFailed", "etcd did not become healthy in 60 s")
    await new Promise((r) => setTimeout(r, 200))
  }
}
