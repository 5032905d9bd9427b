// What TLS adds to a Prometheus scrape of the hub's /metrics: the hub's real HTTP server on loopback,
// once plain and once with the self-signed ECDSA P-256 certificate secure serving makes, /metrics
// holding the series of `members` × `checks` BackupChecks (the fleet-view bench's synthetic fleet).
// Access review is off here (it costs the same with or without TLS and is cached per token); what is
// measured is the transport. Per request, median of `n`:
//   - plain HTTP, a new connection each time
//   - HTTPS, a new connection each time (a full TLS 1.3 handshake per scrape, as a scraper whose
//     connection was closed pays it)
//   - HTTPS over one kept-alive connection (Prometheus keeps its connection between scrapes)
// and the handshake alone (tls.connect to secureConnect), on the client's clock.
//
//   node test/bench/tls-scrape.ts [members] [checks per member] [n]     (defaults 100 100 200)
import { type Agent as HttpAgent, request as httpRequest } from "node:http"
import { Agent as HttpsAgent, request as httpsRequest } from "node:https"
import { performance } from "node:perf_hooks"
import { connect } from "node:tls"
import { defaultHubConfig } from "../../src/hub/config.ts"
import { startHubHttp } from "../../src/hub/http.ts"
import { selfSignedServingPair } from "../../src/hub/serving/self-signed.ts"
import { makeMetrics } from "../../src/observability/metrics/index.ts"
import { membersMap, syntheticFleet } from "../support/fleet-members.ts"

const clusters = Number(process.argv[2] ?? 100)
const checksPer = Number(process.argv[3] ?? 100)
const n = Number(process.argv[4] ?? 200)

const members = membersMap(syntheticFleet(clusters, checksPer))
const metrics = makeMetrics()
for (const m of members.values())
  for (const check of m.checks())
    metrics.setCheckVerified(m.name, check.metadata.namespace!, check.metadata.name!, "True", new Date())
const pair = selfSignedServingPair(["127.0.0.1"])
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!
const p90 = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length * 0.9)]!

const start = (tls: boolean) =>
  startHubHttp({
    config: defaultHubConfig,
    host: "127.0.0.1",
    port: 0,
    members,
    fleetChecks: new Map(),
    metrics,
    isLeader: () => true,
    availability: () => ({ answers: true }),
    identity: "bench",
    access: undefined,
    serves: "all",
    tls: tls ? pair : undefined,
  })

const get = (tls: boolean, port: number, agent: HttpAgent | HttpsAgent | false) =>
  new Promise<number>((resolve, reject) => {
    const options = { host: "127.0.0.1", port, path: "/metrics", agent, ...(tls ? { ca: pair.cert } : {}) }
    const onRes = (res: import("node:http").IncomingMessage) => {
      let bytes = 0
      res.on("data", (c: Buffer) => {
        bytes += c.length
      })
      res.on("end", () => resolve(bytes))
    }
    const req = tls ? httpsRequest(options, onRes) : httpRequest(options, onRes)
    req.once("error", reject)
    req.end()
  })

const measure = async (label: string, tls: boolean, port: number, agent: HttpAgent | HttpsAgent | false) => {
  await get(tls, port, agent)
  const times: number[] = []
  let bytes = 0
  for (let i = 0; i < n; i++) {
    const s = performance.now()
    bytes = await get(tls, port, agent)
    times.push(performance.now() - s)
  }
  console.log(
    `${label.padEnd(40)} median ${median(times).toFixed(2)} ms, p90 ${p90(times).toFixed(2)} ms (${(bytes / 1024).toFixed(0)} KiB)`,
  )
  return median(times)
}

const plain = await start(false)
const secure = await start(true)
console.log(`/metrics of ${clusters} members × ${checksPer} checks, ${n} requests each, loopback`)
const a = await measure("plain HTTP, new connection", false, plain.port, false)
const b = await measure("HTTPS, new connection (full handshake)", true, secure.port, false)
const keepAlive = new HttpsAgent({ keepAlive: true, maxSockets: 1, ca: pair.cert })
const c = await measure("HTTPS, one kept-alive connection", true, secure.port, keepAlive)
const handshakes: number[] = []
for (let i = 0; i < n; i++) {
  const s = performance.now()
  await new Promise<void>((resolve, reject) => {
    const socket = connect({ host: "127.0.0.1", port: secure.port, ca: pair.cert }, () => {
      handshakes.push(performance.now() - s)
      socket.destroy()
      resolve()
    })
    socket.once("error", reject)
  })
}
console.log(
  `TLS handshake alone (connect to secureConnect): median ${median(handshakes).toFixed(2)} ms, p90 ${p90(handshakes).toFixed(2)} ms`,
)
console.log(
  `TLS adds ${(b - a).toFixed(2)} ms per scrape on a new connection, ${(c - a).toFixed(2)} ms on a kept-alive one`,
)
keepAlive.destroy()
plain.server.close()
secure.server.close()
