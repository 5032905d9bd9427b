// A hub in a process of its own for memory benchmarks: started with --expose-gc by hub-memory.ts,
// it answers "measure" messages over IPC with its heap and RSS after forced garbage collections.
import { defaultHubConfig } from "../../src/hub/config.ts"
import { launchHub } from "../../src/hub/launch.ts"
import { sleep } from "../support/wait.ts"

const hub = await launchHub({
  config: {
    ...defaultHubConfig,
    kubeconfig: process.env.KUBECONFIG ?? "",
    httpAddress: { host: "127.0.0.1", port: 0 },
    secureServing: false,
    leaderElect: false,
    probeIntervalMs: 2_000,
    logLevel: "Warn",
  },
})
process.on("message", async (msg) => {
  if (msg !== "measure") return
  for (let i = 0; i < 4; i++) {
    globalThis.gc?.()
    await sleep(100)
  }
  const m = process.memoryUsage()
  process.send?.({ heap: m.heapUsed, rss: m.rss })
})
process.send?.({ port: hub.port })
