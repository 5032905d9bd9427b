// `fleetcheck dev`: the embedded default. A real local fleet (a hub cluster and N members on one
// etcd), the CRDs installed, the members registered by kubeconfig Secrets (the last of two or more by
// a ClusterProfile, the SIG-Multicluster way), the samples in clusters/samples applied, and the hub
// running in this process with its dashboard. Ctrl-C stops the hub (drain, release the lease), then
// every process, and removes the temporary directory.
import { writeFileSync } from "node:fs"
import { join } from "node:path"
import { parseArgs } from "node:util"
import { KubeConfig } from "@kubernetes/client-node"
import { resolveHubConfig } from "../hub/config.ts"
import { fleetCheckList, fleetView } from "../hub/fleet-state.ts"
import { type LaunchedHub, launchHub } from "../hub/launch.ts"
import { renderStatus } from "./status.ts"

export const devUsage = `Usage: fleetcheck dev [--members N] [--port PORT] [--secure-serving]

Starts a real local fleet on this machine: a hub cluster and N member clusters (default 2) sharing one
etcd, the CRDs, the members registered by kubeconfig Secrets (the last of two or more by a
ClusterProfile), the samples in clusters/samples, and the hub with its dashboard on 127.0.0.1:PORT
(default 8080). Ctrl-C stops everything and removes it.
FLEETCHECK_* hub settings apply (see fleetcheck hub --help); logs default to Warn.
  --secure-serving  serve as deploy/ does: HTTPS on PORT (a self-signed certificate, or
                    FLEETCHECK_TLS_CERT_FILE/FLEETCHECK_TLS_PRIVATE_KEY_FILE) with bearer tokens
                    reviewed by the hub cluster; the dashboard then on a loopback port of its own.
                    Off by default: plain HTTP, no tokens.
`

const say = (line: string) => process.stderr.write(`[dev] ${line}\n`)

export const runDev = async (args: ReadonlyArray<string>): Promise<number> => {
  if (args.includes("--help") || args.includes("-h")) {
    process.stdout.write(devUsage)
    return 0
  }
  const { values } = parseArgs({
    args: [...args],
    options: {
      members: { type: "string", default: "2" },
      port: { type: "string", default: "8080" },
      "secure-serving": { type: "boolean", default: false },
    },
    strict: true,
  })
  const members = Number(values.members)
  const port = Number(values.port)
  const bad = (message: string) => {
    process.stderr.write(`fleetcheck dev: ${message}\n\n${devUsage}`)
    return 2
  }
  if (!Number.isInteger(members) || members < 1 || members > 20)
    return bad(`--members must be an integer from 1 to 20, got ${JSON.stringify(values.members)}`)
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    return bad(`--port must be a TCP port, got ${JSON.stringify(values.port)}`)
  // The harness is loaded here, not at the top: `fleetcheck hub` never loads it.
  const { prepareFleet, startFleet } = await import("../../clusters/local-fleet/index.ts")
  const names = ["hub", ...Array.from({ length: members }, (_, i) => `member-${i + 1}`)]
  say("starting a local fleet (the first run builds the Kubernetes binaries; progress follows)")
  const fleet = await startFleet({
    clusters: names.map((name) => (name === "hub" ? { name, workloads: false } : { name })),
    log: (l) => say(l),
  })
  let hub: LaunchedHub | undefined
  let stopping = false
  const stop = async (signal: string) => {
    if (stopping) return
    stopping = true
    say(`${signal}: stopping the hub and the fleet`)
    await hub?.stop().catch(() => {})
    await fleet.stop()
    say("stopped; no process or temporary directory left behind")
    process.exit(0)
  }
  process.on("SIGINT", () => void stop("SIGINT"))
  process.on("SIGTERM", () => void stop("SIGTERM"))
  try {
    const samples = await prepareFleet(fleet, { log: say, clusterProfileMember: true })
    const kubeConfig = new KubeConfig()
    kubeConfig.loadFromString(fleet.cluster("hub").kubeconfig)
    // The hub's settings from the environment, with a local fleet's quicker probes and polls.
    const secure = values["secure-serving"]
    const { tlsCertFile, tlsPrivateKeyFile, ...config } = resolveHubConfig(
      {},
      // Secure serving only when asked for by --secure-serving, whatever the environment says.
      { FLEETCHECK_LOG_LEVEL: "Warn", ...process.env, FLEETCHECK_SECURE_SERVING: String(secure) },
    )
    const running = await launchHub({
      config: {
        ...config,
        httpAddress: { host: "127.0.0.1", port },
        // A local fleet on loopback: unless asked, the dashboard, the API and status need no token here.
        secureServing: secure,
        ...(secure
          ? {
              ...(tlsCertFile && tlsPrivateKeyFile ? { tlsCertFile, tlsPrivateKeyFile } : {}),
              dashboardAddress: config.dashboardAddress ?? { host: "127.0.0.1", port: 0 },
            }
          : {}),
        // The last member is registered by a ClusterProfile: the provider file names its plugin.
        ...(samples.providerFile ? { clusterprofileProviderFile: samples.providerFile } : {}),
        probeIntervalMs: 2_000,
        runningPollMs: 5_000,
      },
      kubeConfig,
    })
    hub = running
    const url = running.url
    // The certificate to trust, for status and curl: next to the fleet's kubeconfigs.
    const caFile = running.servingCert ? join(fleet.runDir, "hub-serving.crt") : undefined
    if (caFile && running.servingCert) writeFileSync(caFile, running.servingCert.pair.cert)
    const hubKubeconfig = fleet.cluster("hub").kubeconfigPath
    say("waiting for the sample checks to finish their first runs")
    const deadline = Date.now() + 120_000
    const current = () => ({
      ...fleetView(running.members.values(), Date.now()),
      fleetChecks: fleetCheckList(running.fleetChecks.values()),
    })
    while (Date.now() < deadline) {
      const view = current()
      if (
        view.checks.length >= samples.checks.length &&
        view.checks.every((c) => c.status !== "Unknown") &&
        view.fleetChecks.length >= samples.fleetChecks.length &&
        view.fleetChecks.every((f) => f.verified.status !== "Unknown")
      )
        break
      await new Promise((r) => setTimeout(r, 500))
    }
    const view = current()
    process.stdout.write(
      [
        "",
        "fleetcheck dev is running",
        `  dashboard   ${running.dashboardUrl ?? url}/`,
        `  fleet API   ${url}/api/v1/fleet`,
        `  metrics     ${url}/metrics`,
        ...(caFile
          ? [
              `  status      bin/fleetcheck status --hub ${url} --hub-ca-file ${caFile} --kubeconfig ${hubKubeconfig}`,
              `  access      HTTPS (certificate sha256 ${running.servingCert?.fingerprint}) and a bearer token the hub cluster reviews, as deploy/ (docs/deploy.md §2a, §2b)`,
            ]
          : [
              `  status      bin/fleetcheck status --hub ${url}`,
              "  access      open, plain HTTP here (loopback); --secure-serving serves as deploy/ does: HTTPS and tokens (docs/deploy.md §2a, §2b)",
            ]),
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
