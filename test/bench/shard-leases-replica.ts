// One hub replica of shard-leases.ts in a process of its own: the real sharding code (makeSharding: its
// replica Lease, the Lease informer, rendezvous assignment, every member Lease's term) for synthetic
// members, with no member engines, so what it costs is the Leases alone. The hub cluster's kubeconfig
// from KUBECONFIG, its identity and member count from argv, `fleetcheck hub` flags after them (the
// Lease timings; defaults otherwise). Answers IPC:
//   cpu    process.cpuUsage() (user + system µs) and a monotonic timestamp
//   held   how many member Leases it holds
import { KubeConfig } from "@kubernetes/client-node"
import { Effect, Layer, Logger, References } from "effect"
import { hubFlagNames, resolveHubConfig } from "../../src/hub/config.ts"
import { makeSharding } from "../../src/hub/sharding/shards.ts"
import { makeKubeClient } from "../../src/kube/client.ts"

const [identity = "bench", countText = "1000", ...argv] = process.argv.slice(2)
const flags: Record<string, string> = {}
const known = new Set(hubFlagNames())
for (let i = 0; i < argv.length; i += 2) {
  const flag = (argv[i] ?? "").replace(/^--/, "")
  if (!known.has(flag)) throw new Error(`unknown hub flag ${argv[i]}`)
  flags[flag] = argv[i + 1] ?? ""
}
const config = resolveHubConfig({ sharding: "true", "leader-elect": "false", ...flags }, {})
const members = Array.from({ length: Number(countText) }, (_, i) => `m-${String(i).padStart(4, "0")}`)
const kubeConfig = new KubeConfig()
kubeConfig.loadFromFile(process.env.KUBECONFIG ?? "")

let held = () => 0
const program = Effect.gen(function* () {
  const client = yield* makeKubeClient({
    cluster: "hub",
    kubeConfig,
    userAgent: `fleetcheck-hub/${identity}`,
  })
  const sharding = yield* makeSharding({
    client,
    namespace: config.namespace,
    identity,
    leaseDurationMs: config.leaseDurationMs,
    renewDeadlineMs: config.renewDeadlineMs,
    retryPeriodMs: config.retryPeriodMs,
    resyncMs: config.resyncPeriodMs,
  })
  held = () => members.filter((m) => sharding.owns(m)).length
  // Every member is "recorded" at once: its term starts as soon as its Lease is held (no work to run).
  for (const m of members) sharding.fenceFor(m).markRecorded()
  yield* sharding.run({ members: () => members, onChange: () => {}, ready: () => true })
  return yield* Effect.never
}).pipe(
  Effect.scoped,
  Effect.provide(
    Layer.mergeAll(Logger.layer([Logger.consoleJson]), Layer.succeed(References.MinimumLogLevel, "Warn")),
  ),
)
Effect.runFork(program)

process.on("message", (m: any) => {
  if (m?.cmd === "cpu") {
    const u = process.cpuUsage()
    process.send?.({ cpuUs: u.user + u.system, atMs: performance.now() })
  } else if (m?.cmd === "held") process.send?.({ held: held() })
})
// The bench going away (IPC closed) ends this replica too.
process.on("disconnect", () => process.exit(0))
