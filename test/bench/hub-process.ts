// A hub in a process of its own for memory benchmarks: started with --expose-gc by hub-memory.ts,
// it answers "measure" messages over IPC with its heap and RSS after forced garbage collections.
import { KubeConfig } from "@kubernetes/client-node"
import { Effect, References, Scope } from "effect"
import { runHub } from "../../src/hub/hub.ts"
import { defaultMemberTimings } from "../../src/hub/member.ts"
import { defaultPolicy } from "../../src/registration/kubeconfig-policy.ts"
import { sleep } from "../support/wait.ts"

const kc = new KubeConfig()
kc.loadFromFile(process.env.KUBECONFIG ?? "")
const scope = Effect.runSync(Scope.make())
const hub = await Effect.runPromise(
  runHub({
    hubKubeConfig: kc,
    namespace: "fleetcheck-system",
    policy: defaultPolicy,
    timings: { ...defaultMemberTimings, probeIntervalMs: 2_000 },
    maxConcurrentReconciles: 32,
    http: { host: "127.0.0.1", port: 0 },
    leaderElection: {
      enabled: false,
      leaseDurationMs: 15_000,
      renewDeadlineMs: 10_000,
      retryPeriodMs: 2_000,
    },
  }).pipe(Scope.provide(scope), Effect.provideService(References.MinimumLogLevel, "Warn")),
)
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
