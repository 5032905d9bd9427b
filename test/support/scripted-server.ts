// A scripted HTTP server standing in for a kube-apiserver, for the failures a real one will not produce
// on demand: split and garbage watch lines, silence, ERROR 410 and 5xx. The test scripts each response;
// the server records every request and when its socket closed, and hands out a kubeconfig for itself.
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http"
import type { AddressInfo } from "node:net"

export type Handler = (req: IncomingMessage, res: ServerResponse, url: URL) => void

/** Listens on 127.0.0.1 at a free port; `handler` answers every request. */
export const scripted = async (handler: Handler) => {
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

/** A ConfigMap in namespace "ns" at a resourceVersion. */
export const cm = (name: string, rv: string) => ({ metadata: { name, namespace: "ns", resourceVersion: rv } })
/** One watch event as the apiserver streams it: a JSON line. */
export const line = (type: string, object: unknown) => `${JSON.stringify({ type, object })}\n`
