// Closing the hub's HTTP(S) server so that it really closes. node's server.close() stops accepting
// and closes the connections idle at that moment, then waits for every other connection to end. A
// keep-alive connection that was busy at that moment (a Prometheus scrape in flight) stays open after
// its response and serves the next request on it, so a client that comes back within the keep-alive
// timeout (5 s; Prometheus scrapes every 2 s in the local fleet) holds the server open forever and
// the hub's shutdown with it. As Go's http.Server.Shutdown does, the connections are closed as soon
// as each is idle, and those still busy after the grace are cut.
import type { Server } from "node:http"
import type { Server as HttpsServer } from "node:https"

/** How often connections that became idle since close began are closed. */
const idleSweepMs = 100

/** Stops accepting, closes each connection once idle, cuts those still busy after `graceMs`. */
export const closeServer = (server: Server | HttpsServer, graceMs: number): Promise<void> =>
  new Promise((resolve) => {
    if (!server.listening) return resolve()
    const sweep = setInterval(() => server.closeIdleConnections(), idleSweepMs)
    const cut = setTimeout(() => server.closeAllConnections(), graceMs)
    server.close(() => {
      clearInterval(sweep)
      clearTimeout(cut)
      resolve()
    })
    server.closeIdleConnections()
  })
