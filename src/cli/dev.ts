// `fleetcheck dev`: the embedded default. A real local fleet (a hub cluster and N members on one
// etcd), the CRDs installed, every member registered by a kubeconfig Secret, the samples in
// clusters/samples applied, and the hub running in this process with its dashboard. Ctrl-C stops the
// hub (drain, release the lease), then every process, and removes the temporary directory.
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { parseArgs } from "node:util"
import { KubeConfig } from "@kubernetes/client-node"
import { Effect, Exit, Layer, Logger, References, Scope } from "effect"
import { type LocalCluster, type LocalFleet, startFleet } from "../../clusters/local-fleet/index.ts"
import { fleetView } from "../hub/fleet-state.ts"
import { runHub } from "../hub/hub.ts"
import { defaultMemberTimings } from "../hub/member.ts"
import { makeMetrics } from "../observability/metrics/index.ts"
import { TracingLive } from "../observability/tracing.ts"
import { defaultPolicy } from "../registration/kubeconfig-policy.ts"
import { renderStatus } from "./status.ts"

const root = new URL("../../", import.meta.url).pathname
const crdDir = join(root, "deploy/crds")
const samplesDir = join(root, "clusters/samples")
const hubNamespace = "fleetcheck-system"

const say = (line: string) => process.stderr.write(`[dev] ${line}\n`)

const must = async (what: string, p: Promise<{ code: number; stderr: string }>) => {
  const r = await p
  if (r.code !== 0) throw new Error(`${what}: ${r.stderr.trim()}`)
}

/** Registers a member the way an operator would: a labelled Secret holding its kubeconfig. */
export const registerWithSecret = async (
  hub: LocalCluster,
  member: LocalCluster,
  labels: Record<string, string>,
) => {
  const secret = {
    apiVersion: "v1",
    kind: "Secret",
    metadata: {
      name: member.name,
      namespace: hubNamespace,
      labels: { "fleetcheck.io/kubeconfig": "true", ...labels },
    },
    data: { kubeconfig: Buffer.from(member.kubeconfig).toString("base64") },
  }
  const res = await hub.api("POST", `/api/v1/namespaces/${hubNamespace}/secrets`, secret)
  if (res.status !== 201) throw new Error(`registering ${member.name}: ${JSON.stringify(res.body)}`)
}

const samples = () =>
  readdirSync(samplesDir)
    .filter((f) => f.endsWith(".yaml"))
    .sort()
    .map((f) => join(samplesDir, f))

const namespaceOf = (file: string) =>
  /namespace:\s*([a-z0-9-]+)/.exec(readFileSync(file, "utf8"))?.[1] ?? "default"

/** The MemberCluster CRD and the hub namespace in the hub; the BackupCheck CRD (served) in each member. */
export const installFleetcheck = async (hub: LocalCluster, members: ReadonlyArray<LocalCluster>) => {
  await must(
    "hub CRD",
    hub.kubectl(["apply", "--server-side", "-f", join(crdDir, "fleetcheck.io_memberclusters.yaml")]),
  )
  await must(
    "hub CRD",
    hub.kubectl(["wait", "--for=condition=Established", "crd/memberclusters.fleetcheck.io", "--timeout=30s"]),
  )
  await hub.api("POST", "/api/v1/namespaces", { metadata: { name: hubNamespace } })
  for (const m of members) {
    await must(
      `${m.name} CRD`,
      m.kubectl(["apply", "--server-side", "-f", join(crdDir, "fleetcheck.io_backupchecks.yaml")]),
    )
    await must(
      `${m.name} CRD`,
      m.kubectl(["wait", "--for=condition=Established", "crd/backupchecks.fleetcheck.io", "--timeout=30s"]),
    )
  }
}

export const prepareFleet = async (fleet: LocalFleet) => {
  const hub = fleet.cluster("hub")
  const members = fleet.clusters.filter((c) => c.name !== "hub")
  say("installing CRDs")
  await installFleetcheck(hub, members)
  say("registering members")
  for (const [i, m] of members.entries())
    await registerWithSecret(hub, m, { env: "dev", region: `local-${i + 1}` })
  // One sample per member, round-robin: member-1 gets the passing check, member-2 the failing one.
  const files = samples()
  for (const [i, file] of files.entries()) {
    const m = members[i % members.length]!
    await m.api("POST", "/api/v1/namespaces", { metadata: { name: namespaceOf(file) } })
    await must(`applying ${file} to ${m.name}`, m.kubectl(["apply", "-f", file]))
    say(`applied ${file.slice(root.length)} to ${m.name}`)
  }
}

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
    await prepareFleet(fleet)
    const kc = new KubeConfig()
    kc.loadFromString(fleet.cluster("hub").kubeconfig)
    const services = await Effect.runPromise(
      Layer.buildWithScope(Layer.merge(logger, TracingLive({ serviceName: "fleetcheck-hub" })), scope),
    )
    const hub = await Effect.runPromise(
      runHub({
        hubKubeConfig: kc,
        namespace: hubNamespace,
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
      if (view.checks.length >= samples().length && view.checks.every((c) => c.status !== "Unknown")) break
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
