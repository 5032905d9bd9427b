// closeServer against node's own HTTP server and agent on loopback: a keep-alive client that keeps
// coming back (as Prometheus does every scrape interval) does not hold a closing server open, and a
// request that never ends is cut after the grace.
import { Agent, createServer, get, type Server } from "node:http"
import { afterEach, describe, expect, it } from "vitest"
import { closeServer } from "../../src/hub/serving/close-server.ts"

const listen = (server: Server) =>
  new Promise<number>((resolve) =>
    server.listen(0, "127.0.0.1", () => {
      const a = server.address()
      resolve(typeof a === "object" && a ? a.port : 0)
    }),
  )
const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

/** One GET on the agent's kept-alive connection; resolves with the status, or the error's code. */
const request = (port: number, agent: Agent) =>
  new Promise<number | string>((resolve) => {
    const req = get({ host: "127.0.0.1", port, path: "/metrics", agent }, (res) => {
      res.resume()
      res.on("end", () => resolve(res.statusCode ?? 0))
    })
    req.on("error", (e: NodeJS.ErrnoException) => resolve(e.code ?? e.message))
  })

const agents: Agent[] = []
const servers: Server[] = []
afterEach(() => {
  for (const a of agents.splice(0)) a.destroy()
  for (const s of servers.splice(0)) s.closeAllConnections()
})

describe("closeServer", () => {
  it("closes while a keep-alive client that was mid-request keeps coming back", async () => {
    // Each answer takes 150 ms and the client asks again 50 ms after it, well within node's 5 s
    // keep-alive timeout: with server.close() alone, the connection busy when close began is never
    // idle at a moment close looks, and the server stays open for as long as the client asks.
    const server = createServer((_req, res) => setTimeout(() => res.end("ok\n"), 150))
    servers.push(server)
    const port = await listen(server)
    const agent = new Agent({ keepAlive: true, maxSockets: 1 })
    agents.push(agent)
    expect(await request(port, agent)).toBe(200)

    let closed = false
    let answered = 0
    const client = (async () => {
      const until = Date.now() + 5_000
      while (!closed && Date.now() < until) {
        if ((await request(port, agent)) === 200) answered++
        await sleep(50)
      }
    })()
    await sleep(75) // mid-request
    const closing = closeServer(server, 60_000).then(() => {
      closed = true
    })
    await client
    // Closed while the client still asked (it gives up after 5 s), not by the 60 s grace.
    expect(closed, "the server closed while the client kept asking").toBe(true)
    await closing
    expect(answered, "the request in flight when close began was answered").toBeGreaterThanOrEqual(1)
    expect(server.listening).toBe(false)
  }, 10_000)

  it("cuts a request still unanswered after the grace", async () => {
    const server = createServer(() => {
      // Never answers.
    })
    servers.push(server)
    const port = await listen(server)
    const agent = new Agent({ keepAlive: true })
    agents.push(agent)
    const pending = request(port, agent)
    await sleep(50)
    await closeServer(server, 300)
    expect(server.listening).toBe(false)
    expect(await pending).toBe("ECONNRESET")
  }, 10_000)

  it("resolves at once for a server that is not listening", async () => {
    await closeServer(createServer(), 60_000)
  })
})
