// A scripted HTTP(S) server standing in for a kube-apiserver, for the failures a real one will not produce
// on demand: split and garbage watch lines, silence, ERROR 410, 5xx, and hostile answers (endless bodies,
// a watch line that never ends). The test scripts each response; the server records every request and
// when its socket closed, and hands out a kubeconfig for itself. Loopback only.
import { spawn } from "node:child_process"
import { readFileSync } from "node:fs"
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import { createServer as createTlsServer } from "node:https"
import type { AddressInfo } from "node:net"
import { KubeConfig } from "@kubernetes/client-node"
import { Cause, Effect, Exit, Scope } from "effect"
import { type KubeClientOptions, makeKubeClient, type RotatingKubeClient } from "../../src/kube/client.ts"

export type Handler = (req: IncomingMessage, res: ServerResponse, url: URL) => void

export interface ScriptedOptions {
  /**
   * Serve HTTPS with the throwaway certificate in fixtures/scripted-tls (valid for 127.0.0.1); the
   * kubeconfig then trusts it as its certificate-authority-data. Default: plain http.
   */
  readonly tls?: boolean
}

const fixture = (name: string) => readFileSync(new URL(`./fixtures/scripted-tls/${name}`, import.meta.url))

/** A kubeconfig for the server at `url` with a token user; with `ca`, it trusts that certificate. */
const kubeconfigFor = (url: string, ca: Buffer | undefined) =>
  [
    "apiVersion: v1",
    "kind: Config",
    "clusters:",
    "- name: fake",
    "  cluster:",
    `    server: ${url}`,
    ca ? `    certificate-authority-data: ${ca.toString("base64")}` : "    insecure-skip-tls-verify: true",
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

/** Listens on 127.0.0.1 at a free port; `handler` answers every request. */
export const scripted = async (handler: Handler, options: ScriptedOptions = {}) => {
  const requests: Array<{ path: string; query: URLSearchParams; authorization: string | undefined }> = []
  const closed: Array<string> = []
  const listener = (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? "/", "http://x")
    requests.push({ path: url.pathname, query: url.searchParams, authorization: req.headers.authorization })
    req.socket.once("close", () => closed.push(url.search))
    handler(req, res, url)
  }
  const ca = options.tls ? fixture("server.crt") : undefined
  const server: Server = options.tls
    ? createTlsServer({ cert: ca, key: fixture("server.key") }, listener)
    : createServer(listener)
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r))
  const port = (server.address() as AddressInfo).port
  const url = `${options.tls ? "https" : "http"}://127.0.0.1:${port}`
  const kubeconfig = kubeconfigFor(url, ca)
  return {
    url,
    /** The server's certificate (PEM) when tls is set. */
    ca,
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

/** A ConfigMap in namespace "ns" at a resourceVersion. */
export const cm = (name: string, rv: string) => ({ metadata: { name, namespace: "ns", resourceVersion: rv } })
/** One watch event as the apiserver streams it: a JSON line. */
export const line = (type: string, object: unknown) => `${JSON.stringify({ type, object })}\n`

const MiB = 1024 * 1024
const filler = Buffer.alloc(MiB, "x")

/**
 * Writes `total` bytes of "x" (no newline) into an already started response, 1 MiB at a time and only as
 * fast as the client reads (backpressure: the server itself holds at most about a MiB), then leaves the
 * response open, as a hung or hostile endpoint would. Resolves with the bytes handed to the socket when
 * `total` is reached or the client went away, whichever comes first.
 */
export const streamFiller = (res: ServerResponse, total: number): Promise<number> =>
  new Promise((resolve) => {
    let sent = 0
    const gone = () => res.destroyed || res.socket === null || res.socket.destroyed
    const pump = () => {
      while (sent < total && !gone()) {
        const n = Math.min(MiB, total - sent)
        sent += n
        if (!res.write(n === MiB ? filler : filler.subarray(0, n))) {
          res.once("drain", pump)
          return
        }
      }
      resolve(sent)
    }
    res.once("close", () => resolve(sent))
    pump()
  })

// The hostile server's child process: plain JavaScript for `node -e`, node: modules only.
const hostileChild = `
import { createServer } from "node:https"
const filler = Buffer.alloc(1024 * 1024, "x")
const server = createServer({ cert: process.env.CERT, key: process.env.KEY }, (req, res) => {
  if (req.url === "/version") return void res.end('{"major":"1","minor":"37"}')
  res.writeHead(200, { "content-type": "application/json" })
  res.write(process.env.PREFIX)
  let sent = 0
  const pump = () => {
    while (!res.destroyed) {
      sent += filler.length
      if (!res.write(filler)) return void res.once("drain", pump)
    }
  }
  res.once("close", () => process.send({ written: sent }))
  pump()
})
server.listen(0, "127.0.0.1", () => process.send({ port: server.address().port }))
process.on("disconnect", () => process.exit(0))
`

/**
 * A hostile member endpoint over TLS in a child process, so that its own buffers do not count in this
 * process's memory: /version answers normally, every other request gets 200, `prefix`, then filler
 * bytes without end, as fast as the client reads. `nextClosed()` resolves, response by response, with
 * the bytes the server handed to its socket before the client hung up.
 */
export const hostileServer = async (prefix: string) => {
  const ca = fixture("server.crt")
  const child = spawn(process.execPath, ["--input-type=module", "-e", hostileChild], {
    stdio: ["ignore", "inherit", "inherit", "ipc"],
    env: { ...process.env, CERT: ca.toString(), KEY: fixture("server.key").toString(), PREFIX: prefix },
  })
  const exited = new Promise<void>((r) => child.once("exit", () => r()))
  const closed: number[] = []
  const waiting: Array<(n: number) => void> = []
  const port = await new Promise<number>((resolve, reject) => {
    child.on("message", (m: { port?: number; written?: number }) => {
      if (m.port !== undefined) resolve(m.port)
      if (m.written !== undefined) {
        const w = waiting.shift()
        if (w) w(m.written)
        else closed.push(m.written)
      }
    })
    void exited.then(() => reject(new Error("the hostile server exited before listening")))
  })
  const url = `https://127.0.0.1:${port}`
  return {
    url,
    kubeconfig: kubeconfigFor(url, ca),
    nextClosed: (): Promise<number> => {
      const n = closed.shift()
      return n !== undefined ? Promise.resolve(n) : new Promise((r) => waiting.push(r))
    },
    stop: async () => {
      child.kill()
      await exited
    },
  }
}

export const kubeConfigFrom = (yaml: string): KubeConfig => {
  const kc = new KubeConfig()
  kc.loadFromString(yaml)
  return kc
}

/** Runs `f` with a kube client for cluster "fake" living in its own Scope, closed afterwards. */
export const withClient = async <A>(
  kubeConfig: string | KubeConfig,
  options: Omit<KubeClientOptions, "cluster" | "kubeConfig">,
  f: (client: RotatingKubeClient) => Promise<A>,
): Promise<A> => {
  const scope = Effect.runSync(Scope.make())
  try {
    const client = await Effect.runPromise(
      makeKubeClient({
        cluster: "fake",
        kubeConfig: typeof kubeConfig === "string" ? kubeConfigFrom(kubeConfig) : kubeConfig,
        ...options,
      }).pipe(Scope.provide(scope)),
    )
    return await f(client)
  } finally {
    await Effect.runPromise(Scope.close(scope, Exit.void))
  }
}

/** The typed failure of an Exit; a defect (or success) fails the test with what it was. */
export const failureOf = <A, E>(exit: Exit.Exit<A, E>): E => {
  if (Exit.isSuccess(exit)) throw new Error("expected a failure, got a success")
  const failure = exit.cause.reasons.find(Cause.isFailReason)
  if (failure === undefined) throw new Error(`expected a typed failure, got: ${Cause.pretty(exit.cause)}`)
  return failure.error
}
