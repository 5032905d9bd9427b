// A TCP proxy in front of an API server for fault tests: it passes bytes (optionally each after a delay,
// as a slow link or a busy server would), refuses new connections, or blackholes (connections stay open
// and carry nothing, as behind a dead load balancer), all of them or only those open now. It counts the connections it accepted and those open, as seen from outside the
// client.
import { type AddressInfo, connect, createServer, type Socket } from "node:net"

export type ProxyMode = "pass" | "refuse" | "blackhole"

/** A TCP proxy to the apiserver that can refuse new connections or silently stop forwarding bytes. */
export const startProxy = async (targetPort: number) => {
  let mode: ProxyMode = "pass"
  const pairs = new Set<readonly [Socket, Socket]>()
  /** Connections that carry nothing any more, whatever the mode (see stallOpen). */
  const stalled = new WeakSet<readonly [Socket, Socket]>()
  let accepted = 0
  /** Every chunk, either way, is passed on this long after it arrived (order kept: equal delays). */
  let latencyMs = 0
  const dropAll = () => {
    for (const [a, b] of pairs) {
      a.destroy()
      b.destroy()
    }
    pairs.clear()
  }
  const server = createServer((down) => {
    accepted++
    if (mode === "refuse") {
      down.destroy()
      return
    }
    const up = connect(targetPort, "127.0.0.1")
    const pair = [down, up] as const
    pairs.add(pair)
    const end = () => {
      down.destroy()
      up.destroy()
      pairs.delete(pair)
    }
    // A blackholed connection stays open but carries nothing: requests hang, as behind a dead LB.
    const passes = () => mode === "pass" && !stalled.has(pair)
    const forward = (to: Socket) => (d: Buffer) => {
      if (!passes()) return
      if (latencyMs === 0) return void to.write(d)
      setTimeout(() => void (passes() && !to.destroyed && to.write(d)), latencyMs)
    }
    down.on("data", forward(up))
    up.on("data", forward(down))
    for (const s of pair) {
      s.on("error", end)
      s.on("close", end)
    }
  })
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
  return {
    port: (server.address() as AddressInfo).port,
    /** Client connections accepted so far (refused ones included). */
    accepted: () => accepted,
    /** Client connections open now. */
    open: () => pairs.size,
    cut: (how: Exclude<ProxyMode, "pass">) => {
      mode = how
      if (how === "refuse") dropAll()
    },
    /** Delays every chunk either way by this long from now on (0: none). */
    setLatency: (ms: number) => {
      latencyMs = ms
    },
    /** The connections open now go silent, as behind a dead load balancer; new ones pass. */
    stallOpen: () => {
      for (const pair of pairs) stalled.add(pair)
    },
    restore: () => {
      // Bytes were dropped on blackholed connections: their TLS streams are unusable now.
      if (mode === "blackhole") dropAll()
      mode = "pass"
    },
    close: () =>
      new Promise<void>((resolve) => {
        dropAll()
        server.close(() => resolve())
      }),
  }
}
export type TcpProxy = Awaited<ReturnType<typeof startProxy>>
