// `fleetcheck dev`: the embedded default. A real local fleet (a hub cluster and N members on one
// etcd), the CRDs installed, every member registered by a kubeconfig Secret, the samples in
// clusters/samples applied, and the hub running in this process with its dashboard. Ctrl-C stops the
// hub (drain, release the lease), then every process, and removes the temporary directory.
import { parseArgs } from "node:util"
import { KubeConfig } from "@kubernetes/client-node"
import { Effect, Exit, Layer, Logger, References, Scope } from "effect"
import { defaultHubNamespace } from "../api/names.ts"
import { fleetView } from "../hub/fleet-state.ts"
import { runHub } from "../hub/hub.ts"
import { defaultMemberTimings } from "../hub/member.ts"
import { makeMetrics } from "../observability/metrics/index.ts"
import { TracingLive } from "../observability/tracing.ts"
import { defaultPolicy } from "../registration/kubeconfig-policy.ts"
import { renderStatus } from "./status.ts"

const say = (line: string) => process.stderr.write(`[dev] ${line}\n`)

export const runDev = async (args: ReadonlyArray<string>): Promise<number> => {
  const { values } = parseArgs({
    args: [...args],
    options: { members: { type: "string", default: "2" }, port: { type: "string", default: "8080" } },
    strict: true,
  })
  const members = Number(values.members)
  const port = Number(values.port)
  if (!Number.isInteger(members) || members < 1 || members > 20) {
    throw new Error(`--members must be an integer from 1 to 20, got ${JSON.stringify(values.members)}`)
  }
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    throw new Error(`--port must be a TCP port, got ${values.port}`)
  // The harness is loaded here, not at the top: `fleetcheck hub` never loads it.
  const { prepareFleet, startFleet } = await import("../../clusters/local-fleet/index.ts")
  const names = ["hub", ...Array.from({ length: members }, (_, i) => `member-${i + 1}`)]
  say("starting a local fleet (the first run builds the Kubernetes binaries; progress follows)")
  const fleet = await startFleet({
    clusters: names.map((name) => (name === "hub" ? { name, workloads: false } : { name })),
    log: (l) => say(l),
  })
  const scope = Effect.runSync(Scope.make())
  const logLevel = (process.env.FLEETCHECK_LOG_LEVEL as "Info" | "Warn" | undefined) ?? "Warn"
  const logger = Layer.merge(
    Logger.layer([Logger.consoleJson]),
    Layer.succeed(References.MinimumLogLevel, logLevel),
  )
  let stopping = false
  const stop = async (signal: string) => {
    if (stopping) return
    stopping = true
    say(`${signal}: stopping the hub and the fleet`)
    await Effect.runPromise(Scope.close(scope, Exit.void).pipe(Effect.provide(logger))).catch(() => {})
    await fleet.stop()
    say("stopped; no process or temporary directory left behind")
    process.exit(0)
  }
  process.on("SIGINT", () => void stop("SIGINT"))
  process.on("SIGTERM", () => void stop("SIGTERM"))
  try {
    const samples = await prepareFleet(fleet, { log: say })
    const kc = new KubeConfig()
    kc.loadFromString(fleet.cluster("hub").kubeconfig)
    const services = await Effect.runPromise(
      Layer.buildWithScope(Layer.merge(logger, TracingLive({ serviceName: "fleetcheck-hub" })), scope),
    )
    const hub = await Effect.runPromise(
      runHub({
        hubKubeConfig: kc,
        namespace: defaultHubNamespace,
        policy: defaultPolicy,
        timings: { ...defaultMemberTimings, probeIntervalMs: 2_000, runningPollMs: 5_000 },
        maxConcurrentReconciles: 32,
        http: { host: "127.0.0.1", port },
        leaderElection: {
          enabled: true,
          leaseDurationMs: 15_000,
          renewDeadlineMs: 10_000,
          retryPeriodMs: 2_000,
        },
        metrics: makeMetrics(),
      }).pipe(Scope.provide(scope), Effect.provide(services)),
    )
    const url = `http://127.0.0.1:${hub.port}`
    say("waiting for the sample checks to finish their first runs")
    const deadline = Date.now() + 120_000
    while (Date.now() < deadline) {
      const view = fleetView(hub.members.values(), Date.now())
      if (view.checks.length >= samples.length && view.checks.every((c) => c.status !== "Unknown")) break
      await new Promise((r) => setTimeout(r, 500))
    }
    const view = fleetView(hub.members.values(), Date.now())
    process.stdout.write(
      [
        "",
        "fleetcheck dev is running",
        `  dashboard   ${url}/`,
        `  fleet API   ${url}/api/v1/fleet`,
        `  metrics     ${url}/metrics`,
        `  status      bin/fleetcheck status --hub ${url}`,
        ...fleet.clusters.map((c) => `  ${c.name.padEnd(10)}  KUBECONFIG=${c.kubeconfigPath}`),
        `  kubectl     ${fleet.binDir}/kubectl`,
        "",
        renderStatus(view),
        "Ctrl-C stops everything.",
        "",
      ].join("\n"),
    )
  } catch (e) {
    await stop(`failed: ${e instanceof Error ? e.message : String(e)}`)
    return 1
  }
  await new Promise(() => {})
  return 0
}
