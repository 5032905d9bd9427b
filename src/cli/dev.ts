// `fleetcheck dev`: the embedded default. A real local fleet (a hub cluster and N members on one
// etcd), the CRDs installed, the members registered by kubeconfig Secrets (the last of two or more by
// a ClusterProfile, the SIG-Multicluster way), the samples in clusters/samples applied, and the hub
// running in this process with its dashboard; with --hub-replicas N, N sharding replicas (this
// process's hub and N-1 `fleetcheck hub` processes) split the members. Ctrl-C stops the hub replicas
// (drain, release the Leases), then every process, and removes the temporary directory.
import { readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { parseArgs } from "node:util"
import { KubeConfig } from "@kubernetes/client-node"
import { shardLeaseLabel } from "../api/names.ts"
import { envNameOf, resolveHubConfig } from "../hub/config.ts"
import { fleetCheckList, fleetView } from "../hub/fleet-state.ts"
import { type LaunchedHub, launchHub } from "../hub/launch.ts"
import { makeLeaderIdentity } from "../hub/leader-election.ts"
import { selfSignedServingCert } from "../hub/serving/serving-cert.ts"
import { leases, pathOf } from "../kube/resources.ts"
import { type DevPrometheus, devAlertForSeconds, startDevPrometheus } from "./dev-prometheus.ts"
import {
  balancedIdentity,
  holdersFromLeases,
  identityCandidates,
  maxHubReplicas,
  replicaBannerLines,
  replicaExitReport,
  settled,
} from "./dev-replicas.ts"
import { renderStatus } from "./status.ts"

export const devUsage = `Usage: fleetcheck dev [--members N] [--hub-replicas N] [--port PORT] [--secure-serving] [--prometheus] [--velero]

Starts a real local fleet on this machine: a hub cluster and N member clusters (default 2) sharing one
etcd, the CRDs, the members registered by kubeconfig Secrets (the last of two or more by a
ClusterProfile), the samples in clusters/samples, and the hub with its dashboard on 127.0.0.1:PORT
(default 8080). Ctrl-C stops everything and removes it.
FLEETCHECK_* hub settings apply (see fleetcheck hub --help); logs default to Warn.
  --hub-replicas N  run N hub replicas that split the members (sharding, docs/adr/0011; default 1: one
                    hub, no sharding): the one in this process on PORT and N-1 \`fleetcheck hub\`
                    processes with the same settings, each on a loopback port of its own and logging
                    (Info) to the fleet's run directory. Each member is worked by one replica and every
                    replica answers for the whole fleet; the banner lists each replica's dashboard and
                    who works which member. This process's replica picks its identity so that the
                    members split as evenly as the others' (random) identities allow: \`--hub-replicas 2\`
                    gives the two default members one each, \`--members 6 --hub-replicas 3\` shows a
                    bigger split. A replica that exits is reported and the others take its members once
                    their Leases expire; Ctrl-C stops every replica first (each drains and releases its
                    Leases). At most ${maxHubReplicas}.
  --secure-serving  serve as deploy/ does: HTTPS on PORT (a self-signed certificate, or
                    FLEETCHECK_TLS_CERT_FILE/FLEETCHECK_TLS_PRIVATE_KEY_FILE) with bearer tokens
                    reviewed by the hub cluster; the dashboard then on a loopback port of its own.
                    Off by default: plain HTTP, no tokens.
  --prometheus      also run Debian's Prometheus and Alertmanager (bash config/install-prometheus.sh)
                    on loopback ports: Prometheus scrapes every hub replica (with --secure-serving by a
                    ServiceAccount token and the hub's certificate, as docs/deploy.md says) and
                    evaluates deploy/prometheus/rules.yaml with every \`for:\` shortened to ${devAlertForSeconds}s, so
                    the failing samples' FleetcheckBackupCheckFailing fires within a minute; Alertmanager
                    receives the alerts. The banner prints both URLs; each alert that fires is said here.
  --velero          also run a real Velero server in every member (built from the Go module proxy on
                    first use: minutes, then cached), back up a small \`storefront\` namespace of the
                    first member with a Velero Schedule, and add the Velero-backed samples
                    (clusters/samples/velero): the hub restores that Backup into a sandbox.
`

const say = (line: string) => process.stderr.write(`[dev] ${line}\n`)

/** The local-fleet harness, loaded only when dev runs (`fleetcheck hub` never loads it). */
type Harness = typeof import("../../clusters/local-fleet/index.ts")
/** Another hub replica, its own `fleetcheck hub` process on the fleet. */
type ReplicaProcess = Awaited<ReturnType<Harness["startHubProcess"]>>

/** The end of a replica's log, for a report (the run directory goes with the fleet). */
const logTail = (file: string) => {
  try {
    return readFileSync(file, "utf8").slice(-4_000)
  } catch (e) {
    return `(its log could not be read: ${e instanceof Error ? e.message : String(e)})`
  }
}

export const runDev = async (args: ReadonlyArray<string>): Promise<number> => {
  if (args.includes("--help") || args.includes("-h")) {
    process.stdout.write(devUsage)
    return 0
  }
  const { values } = parseArgs({
    args: [...args],
    options: {
      members: { type: "string", default: "2" },
      "hub-replicas": { type: "string", default: "1" },
      port: { type: "string", default: "8080" },
      "secure-serving": { type: "boolean", default: false },
      prometheus: { type: "boolean", default: false },
      velero: { type: "boolean", default: false },
    },
    strict: true,
  })
  const members = Number(values.members)
  const replicas = Number(values["hub-replicas"])
  const port = Number(values.port)
  const bad = (message: string) => {
    process.stderr.write(`fleetcheck dev: ${message}\n\n${devUsage}`)
    return 2
  }
  if (!Number.isInteger(members) || members < 1 || members > 20)
    return bad(`--members must be an integer from 1 to 20, got ${JSON.stringify(values.members)}`)
  if (!Number.isInteger(replicas) || replicas < 1 || replicas > maxHubReplicas)
    return bad(
      `--hub-replicas must be an integer from 1 to ${maxHubReplicas}, got ${JSON.stringify(values["hub-replicas"])}`,
    )
  if (!Number.isInteger(port) || port < 0 || port > 65535)
    return bad(`--port must be a TCP port, got ${JSON.stringify(values.port)}`)
  // The harness is loaded here, not at the top: `fleetcheck hub` never loads it.
  const harness = await import("../../clusters/local-fleet/index.ts")
  const { prepareFleet, prepareVeleroSamples, startFleet, startHubProcess } = harness
  // Velero's build (cold: minutes) runs beside the fleet's start, not after it.
  const veleroBuilt = values.velero ? harness.ensureVeleroBinaries() : undefined
  veleroBuilt?.catch(() => undefined)
  const names = ["hub", ...Array.from({ length: members }, (_, i) => `member-${i + 1}`)]
  const memberNames = names.slice(1)
  say("starting a local fleet (the first run builds the Kubernetes binaries; progress follows)")
  const fleet = await startFleet({
    clusters: names.map((name) => (name === "hub" ? { name, workloads: false } : { name })),
    log: (l) => say(l),
  })
  let hub: LaunchedHub | undefined
  let prometheus: DevPrometheus | undefined
  /** The other replicas (with --hub-replicas), each its own process. */
  const others: ReplicaProcess[] = []
  /** How long another replica may take to stop: its drain, then its Lease releases (set from the settings). */
  let replicaStopGraceMs = 45_000
  let stopping = false
  /** Stops everything and exits: 0 on a signal, `code` after a failure (1 as well when a replica failed). */
  const stop = async (signal: string, code = 0) => {
    if (stopping) return
    stopping = true
    prometheus?.stopWatching()
    say(
      others.length > 0
        ? `${signal}: stopping the ${others.length + 1} hub replicas (each drains its members and releases their Leases), then the fleet`
        : `${signal}: stopping the hub and the fleet`,
    )
    const stopped = await Promise.allSettled([
      hub?.stop(),
      ...others.map(async (o) => {
        // One that exited while the fleet ran was reported then.
        if (o.process.hasExited()) return
        await o.process.stop(replicaStopGraceMs)
        const exit = await o.process.exited
        if (exit !== 0)
          throw new Error(
            `hub replica ${o.name} (pid ${o.process.pid}) ended with ${exit}; its log ended:\n${logTail(o.process.logFile).slice(-1_500)}`,
          )
      }),
    ])
    const failures = stopped.flatMap((r) => (r.status === "rejected" ? [r.reason] : []))
    for (const e of failures) say(`stopping a hub replica: ${e instanceof Error ? e.message : String(e)}`)
    await fleet.stop()
    say("stopped; no process or temporary directory left behind")
    process.exit(failures.length > 0 ? 1 : code)
  }
  process.on("SIGINT", () => void stop("SIGINT"))
  process.on("SIGTERM", () => void stop("SIGTERM"))
  try {
    const prepared = await prepareFleet(fleet, {
      log: say,
      clusterProfileMember: true,
    })
    let samples = prepared
    if (veleroBuilt) {
      const started = Date.now()
      await veleroBuilt
      const velero = await prepareVeleroSamples(fleet, say)
      say(`velero: ready in ${((Date.now() - started) / 1000).toFixed(1)}s (after the rest of the fleet)`)
      samples = {
        ...prepared,
        checks: [...prepared.checks, ...velero.checks],
        fleetChecks: [...prepared.fleetChecks, ...velero.fleetChecks],
      }
    }
    const hubCluster = fleet.cluster("hub")
    const kubeConfig = new KubeConfig()
    kubeConfig.loadFromString(hubCluster.kubeconfig)
    const secure = values["secure-serving"]
    const env: Readonly<Record<string, string | undefined>> = {
      [envNameOf("log-level")]: "Warn",
      ...process.env,
    }
    const inEnv = (flag: string) => env[envNameOf(flag)] !== undefined
    // Several replicas serve one certificate, made here unless the environment names files, so one
    // CA file serves `fleetcheck status` and curl for every replica.
    const sharedCert =
      secure && replicas > 1 && !inEnv("tls-cert-file") ? writeServingFiles(fleet.runDir) : undefined
    // The hub settings dev chooses, as `fleetcheck hub` flags: this process's hub resolves them with the
    // environment (flags win, as on the command line) and every other replica gets them as its flags,
    // so all run with the same settings from the one schema.
    const devFlags: Record<string, string> = {
      // A local fleet's quicker probes and polls.
      "probe-interval": "2s",
      "running-poll": "5s",
      // Secure serving only when asked for by --secure-serving, whatever the environment says. A local
      // fleet on loopback: unless asked, the dashboard, the API and status need no token here.
      "secure-serving": String(secure),
      // With secure serving the dashboard gets a loopback port of its own (the API's listener wants tokens).
      ...(secure && !inEnv("dashboard-address") ? { "dashboard-address": "127.0.0.1:0" } : {}),
      // The last member is registered by a ClusterProfile: the provider file names its plugin.
      ...(samples.providerFile ? { "clusterprofile-provider-file": samples.providerFile } : {}),
      ...(replicas > 1 ? { sharding: "true" } : {}),
      ...sharedCert,
    }
    const config = resolveHubConfig({ ...devFlags, "http-address": `127.0.0.1:${port}` }, env)
    replicaStopGraceMs = config.drainGraceMs + config.renewDeadlineMs + 5_000
    if (replicas > 1) {
      const replicaFlags: Record<string, string> = {
        ...devFlags,
        kubeconfig: hubCluster.kubeconfigPath,
        // Each on loopback ports of its own.
        "http-address": "127.0.0.1:0",
        ...(config.dashboardAddress ? { "dashboard-address": "127.0.0.1:0" } : {}),
        // Their logs go to files; `hub serving` (Info) names each one's address and identity.
        "log-level": config.logLevel === "Debug" ? "Debug" : "Info",
      }
      say(`starting ${replicas - 1} more hub replica${replicas > 2 ? "s" : ""} (sharding)`)
      const started = await Promise.allSettled(
        Array.from({ length: replicas - 1 }, (_, i) =>
          startHubProcess(fleet, {
            name: `hub-${i + 2}`,
            kubeconfigPath: hubCluster.kubeconfigPath,
            args: Object.entries(replicaFlags).flatMap(([flag, value]) => [`--${flag}`, value]),
          }),
        ),
      )
      for (const s of started) if (s.status === "fulfilled") others.push(s.value)
      const failed = started.find((s) => s.status === "rejected")
      if (failed) throw failed.reason
      // A replica that exits while the fleet runs is reported; the others take its members.
      for (const o of others)
        void o.process.exited.then((exit) => {
          if (stopping) return
          say(
            replicaExitReport({
              name: o.name,
              pid: o.process.pid,
              exit,
              logFile: o.process.logFile,
              logTail: logTail(o.process.logFile),
              leaseDurationMs: config.leaseDurationMs,
            }),
          )
        })
    }
    // With other replicas, this one's identity is picked so that the members split evenly.
    const identity =
      others.length > 0
        ? balancedIdentity(
            memberNames,
            others.map((o) => o.identity),
            identityCandidates(makeLeaderIdentity),
          )
        : undefined
    const running = await launchHub({
      config,
      kubeConfig,
      returnMemory: true,
      ...(identity ? { identity } : {}),
    })
    hub = running
    const url = running.url
    // The certificate to trust, for status and curl: next to the fleet's kubeconfigs.
    const caFile = running.servingCert ? join(fleet.runDir, "hub-serving.crt") : undefined
    if (caFile && running.servingCert) writeFileSync(caFile, running.servingCert.pair.cert)
    const hubKubeconfig = hubCluster.kubeconfigPath
    // Started before the wait: the failing samples' alerts are on their way while the runs finish.
    if (values.prometheus)
      prometheus = await startDevPrometheus({
        harness,
        fleet,
        hubUrls: [url, ...others.map((o) => o.url)],
        secure,
        caFile: caFile ?? config.tlsCertFile,
        say,
      })
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
    const replicaLines: string[] = []
    if (others.length > 0) {
      // Who works what, from the member Leases in the hub cluster, once each is held by the replica
      // rendezvous hashing assigns it (members taken before every replica announced itself move).
      const identities = [running.identity, ...others.map((o) => o.identity)]
      const holders = async () => {
        const r = await hubCluster.api(
          "GET",
          `${pathOf(leases, { namespace: config.namespace })}?labelSelector=${encodeURIComponent(`${shardLeaseLabel}=member`)}`,
        )
        if (r.status !== 200)
          throw new Error(`listing the member Leases: ${r.status} ${JSON.stringify(r.body)}`)
        return holdersFromLeases(memberNames, r.body.items ?? [])
      }
      let held = await holders()
      const settleBy = Date.now() + 60_000
      while (!settled(held, identities) && Date.now() < settleBy) {
        await new Promise((r) => setTimeout(r, 500))
        held = await holders()
      }
      if (!settled(held, identities))
        say(
          "the member Leases have not all reached their assigned replicas yet; the list below is as they are now",
        )
      replicaLines.push(
        ...replicaBannerLines({
          replicas: [
            {
              name: "hub-1",
              identity: running.identity,
              dashboardUrl: running.dashboardUrl ?? url,
            },
            ...others.map((o) => ({
              name: o.name,
              identity: o.identity,
              dashboardUrl: o.dashboardUrl() ?? o.url,
              process: { pid: o.process.pid, logFile: o.process.logFile },
            })),
          ],
          holders: held,
          namespace: config.namespace,
          kubectl: `${fleet.binDir}/kubectl`,
          hubKubeconfig,
        }),
      )
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
              `  access      HTTPS (certificate sha256 ${running.servingCert?.fingerprint}) and a bearer token the hub cluster reviews, as deploy/ (docs/deploy/secure-serving.md)`,
            ]
          : [
              `  status      bin/fleetcheck status --hub ${url}`,
              "  access      open, plain HTTP here (loopback); --secure-serving serves as deploy/ does: HTTPS and tokens (docs/deploy/secure-serving.md)",
            ]),
        ...replicaLines,
        ...(prometheus?.bannerLines ?? []),
        ...fleet.clusters.map((c) => `  ${c.name.padEnd(10)}  KUBECONFIG=${c.kubeconfigPath}`),
        `  kubectl     ${fleet.binDir}/kubectl`,
        "",
        renderStatus(view),
        "Ctrl-C stops everything.",
        "",
      ].join("\n"),
    )
  } catch (e) {
    await stop(`failed: ${e instanceof Error ? e.message : String(e)}`, 1)
    return 1
  }
  await new Promise(() => {})
  return 0
}

/** One self-signed serving certificate for every replica, as files in the run directory (the key 0600). */
const writeServingFiles = (runDir: string) => {
  const { pair } = selfSignedServingCert("127.0.0.1")
  const certFile = join(runDir, "hub-serving.crt")
  const keyFile = join(runDir, "hub-serving.key")
  writeFileSync(certFile, pair.cert)
  writeFileSync(keyFile, pair.key, { mode: 0o600 })
  return { "tls-cert-file": certFile, "tls-private-key-file": keyFile }
}
