// Debian's Prometheus and Alertmanager beside a local fleet, as host processes under the fleet's
// watchdog (stopped with it): generated configs in a directory of the fleet's run directory, each on a
// free loopback port. Prometheus scrapes the given hub endpoints (bearer token file and CA file for a
// hub with secure serving), evaluates the given rule files and sends its alerts to the Alertmanager,
// which delivers them to a webhook when one is given. Used by the tests and `fleetcheck dev --prometheus`.
import { execFileSync } from "node:child_process"
import { copyFileSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { basename, join } from "node:path"
import { parseAllDocuments, stringify } from "yaml"
import { z } from "zod"
import { defaultHubNamespace } from "../../src/api/names.ts"
import { freePort, type LocalCluster, type LocalFleet } from "./fleet.ts"
import type { ManagedProcess } from "./processes.ts"

const repo = new URL("../../", import.meta.url).pathname

/**
 * A token for Prometheus that the hub cluster reviews, as deploy/ binds a scraper: the ServiceAccount
 * prometheus in the hub namespace, bound to deploy/hub/access-roles.yaml's fleetcheck-metrics-reader.
 */
export const scraperToken = async (hub: LocalCluster, expirationSeconds = 7 * 24 * 3600): Promise<string> => {
  const roles = await hub.kubectl([
    "apply",
    "--server-side",
    "-f",
    join(repo, "deploy/hub/access-roles.yaml"),
  ])
  if (roles.code !== 0) throw new Error(`applying deploy/hub/access-roles.yaml: ${roles.stderr.trim()}`)
  const sa = await hub.api("POST", `/api/v1/namespaces/${defaultHubNamespace}/serviceaccounts`, {
    metadata: { name: "prometheus" },
  })
  if (sa.status !== 201) throw new Error(`ServiceAccount prometheus: ${sa.status} ${JSON.stringify(sa.body)}`)
  const binding = await hub.api("POST", "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings", {
    metadata: { name: "prometheus-fleetcheck-metrics-reader" },
    roleRef: {
      apiGroup: "rbac.authorization.k8s.io",
      kind: "ClusterRole",
      name: "fleetcheck-metrics-reader",
    },
    subjects: [{ kind: "ServiceAccount", name: "prometheus", namespace: defaultHubNamespace }],
  })
  if (binding.status !== 201)
    throw new Error(`binding prometheus: ${binding.status} ${JSON.stringify(binding.body)}`)
  const r = await hub.api(
    "POST",
    `/api/v1/namespaces/${defaultHubNamespace}/serviceaccounts/prometheus/token`,
    {
      apiVersion: "authentication.k8s.io/v1",
      kind: "TokenRequest",
      spec: { expirationSeconds },
    },
  )
  const token = r.body?.status?.token
  if (r.status !== 201 || typeof token !== "string")
    throw new Error(`TokenRequest for prometheus: ${r.status}`)
  return token
}

export interface PrometheusOptions {
  /** The hubs' base URLs, http(s)://HOST:PORT, scraped at /metrics as one job (one scheme). */
  readonly targets: ReadonlyArray<string>
  /** A file holding the bearer token Prometheus sends (secure serving). */
  readonly bearerTokenFile?: string
  /** The CA (PEM file) the hubs' serving certificates are checked against. */
  readonly caFile?: string
  /** The scrape job's name (default "fleetcheck-hub", the job the shipped rules name). */
  readonly jobName?: string
  /** Rule files (Prometheus rule-file YAML), copied into the config directory. */
  readonly ruleFiles?: ReadonlyArray<string>
  /** Scrape and evaluation interval (default "2s": a local fleet's quick feedback). */
  readonly interval?: string
  /** Where Alertmanager delivers every alert (a webhook receiver's URL); without it, nowhere. */
  readonly webhookUrl?: string
  /** Names in clusters' logs (default "prometheus" and "alertmanager"). */
  readonly namePrefix?: string
}

export interface LocalPrometheus {
  /** http://127.0.0.1:PORT */
  readonly url: string
  readonly alertmanagerUrl: string
  /** The generated configs and rule copies. */
  readonly configDir: string
  readonly prometheus: ManagedProcess
  readonly alertmanager: ManagedProcess
  /** An instant query's result vector (or matrix / scalar, as Prometheus answers it). */
  readonly query: (expr: string) => Promise<PromResult>
  /** Prometheus' own view of every alert (/api/v1/alerts). */
  readonly alerts: () => Promise<ReadonlyArray<PromAlert>>
  /** Scrape targets as Prometheus sees them (health, last error). */
  readonly targets: () => Promise<ReadonlyArray<PromTarget>>
  readonly stop: () => Promise<void>
}

const resultSchema = z.object({
  resultType: z.enum(["vector", "matrix", "scalar", "string"]),
  result: z.unknown(),
})
export type PromResult = z.infer<typeof resultSchema>

const alertSchema = z.object({
  labels: z.record(z.string(), z.string()),
  annotations: z.record(z.string(), z.string()).optional(),
  state: z.string(),
  activeAt: z.string().optional(),
  value: z.string().optional(),
})
export type PromAlert = z.infer<typeof alertSchema>

const targetSchema = z.object({
  scrapeUrl: z.string(),
  health: z.string(),
  lastError: z.string(),
  labels: z.record(z.string(), z.string()),
})
export type PromTarget = z.infer<typeof targetSchema>

const envelope = <T extends z.ZodType>(data: T) =>
  z.object({ status: z.literal("success"), data, warnings: z.array(z.string()).optional() })

/** The first of `names` on PATH: Debian calls Alertmanager's binary prometheus-alertmanager. */
const onPath = (names: ReadonlyArray<string>, installHint: string): string => {
  for (const name of names) {
    try {
      return execFileSync("bash", ["-c", `command -v ${name}`], { encoding: "utf8" }).trim()
    } catch {
      // Not this one.
    }
  }
  throw new Error(`none of ${names.join(", ")} is on PATH: ${installHint}`)
}

const maxAnswerBytes = 16 * 1024 * 1024

/** JSON GET against a loopback Prometheus or Alertmanager, read up to maxAnswerBytes. */
const getJson = async (url: string): Promise<unknown> => {
  const r = await fetch(url, { signal: AbortSignal.timeout(10_000) })
  const chunks: Uint8Array[] = []
  let size = 0
  for await (const chunk of r.body ?? []) {
    size += chunk.length
    if (size > maxAnswerBytes) throw new Error(`${url}: answer over ${maxAnswerBytes} bytes`)
    chunks.push(chunk)
  }
  const text = Buffer.concat(chunks).toString("utf8")
  if (!r.ok) throw new Error(`${url}: ${r.status} ${text.slice(0, 500)}`)
  return JSON.parse(text)
}

const waitReady = async (what: string, url: string, proc: ManagedProcess, timeoutMs = 30_000) => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    if (proc.hasExited())
      throw new Error(`${what} exited (${await proc.exited}); log ${proc.logFile}:\n${tail(proc.logFile)}`)
    try {
      const r = await fetch(`${url}/-/ready`, { signal: AbortSignal.timeout(2_000) })
      if (r.ok) return
    } catch {
      // Not listening yet.
    }
    if (Date.now() > deadline)
      throw new Error(`${what} not ready in ${timeoutMs} ms; log ${proc.logFile}:\n${tail(proc.logFile)}`)
    await new Promise((resolve) => setTimeout(resolve, 200))
  }
}

const tail = (file: string) => {
  try {
    return readFileSync(file, "utf8").slice(-3_000)
  } catch {
    return "(no log)"
  }
}

type RuleGroups = { groups?: Array<{ rules?: Array<Record<string, unknown>> }> }

/**
 * A Prometheus rule file (`groups:`) from either that or a PrometheusRule (its `spec`). With
 * `forSeconds`, every alert's `for:` becomes that many seconds and nothing else changes (expressions
 * untouched): production durations are minutes, a local fleet and a test should see an alert fire in seconds.
 */
export const ruleFileFrom = (text: string, forSeconds?: number): string => {
  const groups: NonNullable<RuleGroups["groups"]> = []
  for (const doc of parseAllDocuments(text)) {
    const obj = doc.toJS() as (RuleGroups & { kind?: string; spec?: RuleGroups }) | null
    const file = obj?.kind === "PrometheusRule" ? obj.spec : obj
    groups.push(...(file?.groups ?? []))
  }
  if (forSeconds !== undefined)
    for (const group of groups)
      for (const rule of group.rules ?? [])
        if (rule.alert !== undefined && rule.for !== undefined) rule.for = `${forSeconds}s`
  return stringify({ groups })
}

/** Starts Alertmanager, then Prometheus pointed at it, and resolves once both are ready. */
export const startPrometheus = async (
  fleet: LocalFleet,
  options: PrometheusOptions,
): Promise<LocalPrometheus> => {
  const prometheusBin = onPath(["prometheus"], "bash config/install-prometheus.sh")
  const alertmanagerBin = onPath(
    ["prometheus-alertmanager", "alertmanager"],
    "bash config/install-prometheus.sh",
  )
  const prefix = options.namePrefix ?? ""
  const configDir = join(fleet.runDir, `${prefix}prometheus`)
  mkdirSync(join(configDir, "rules"), { recursive: true })
  const interval = options.interval ?? "2s"

  const receiver = options.webhookUrl
    ? { name: "webhook", webhook_configs: [{ url: options.webhookUrl, send_resolved: true }] }
    : { name: "nowhere" }
  writeFileSync(
    join(configDir, "alertmanager.yml"),
    stringify({
      route: {
        receiver: receiver.name,
        // One notification per alert and check (the rules label a check by cluster, namespace, name).
        group_by: ["alertname", "cluster", "namespace", "name"],
        // A local fleet: deliver at once, again within seconds when a group changes.
        group_wait: "1s",
        group_interval: "2s",
        repeat_interval: "1h",
      },
      receivers: [receiver],
    }),
  )
  const amPort = await freePort()
  const alertmanager = fleet.spawn(`${prefix}alertmanager`, alertmanagerBin, [
    `--config.file=${join(configDir, "alertmanager.yml")}`,
    `--storage.path=${join(configDir, "alertmanager-data")}`,
    `--web.listen-address=127.0.0.1:${amPort}`,
    // One Alertmanager, no gossip: otherwise it binds :9094 on every interface.
    "--cluster.listen-address=",
  ])
  const alertmanagerUrl = `http://127.0.0.1:${amPort}`
  await waitReady("alertmanager", alertmanagerUrl, alertmanager)

  const ruleFiles = (options.ruleFiles ?? []).map((file, i) => {
    const copy = join(configDir, "rules", `${i}-${basename(file)}`)
    copyFileSync(file, copy)
    return copy
  })
  const urls = options.targets.map((t) => new URL(t))
  const schemes = new Set(urls.map((u) => u.protocol))
  if (schemes.size !== 1) throw new Error(`targets must share one scheme: ${options.targets.join(", ")}`)
  const scrape = {
    job_name: options.jobName ?? "fleetcheck-hub",
    scheme: [...schemes][0]!.replace(":", ""),
    metrics_path: "/metrics",
    static_configs: [{ targets: urls.map((u) => u.host) }],
    ...(options.bearerTokenFile
      ? { authorization: { type: "Bearer", credentials_file: options.bearerTokenFile } }
      : {}),
    ...(options.caFile ? { tls_config: { ca_file: options.caFile } } : {}),
  }
  writeFileSync(
    join(configDir, "prometheus.yml"),
    stringify({
      global: { scrape_interval: interval, evaluation_interval: interval },
      rule_files: ruleFiles,
      alerting: { alertmanagers: [{ static_configs: [{ targets: [`127.0.0.1:${amPort}`] }] }] },
      scrape_configs: [scrape],
    }),
  )
  // promtool checks the config and every rule file it names, with a readable message, before we start.
  try {
    execFileSync(
      onPath(["promtool"], "bash config/install-prometheus.sh"),
      ["check", "config", join(configDir, "prometheus.yml")],
      { encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] },
    )
  } catch (e) {
    const out = e as { stdout?: string; stderr?: string }
    throw new Error(
      `promtool check config ${configDir}/prometheus.yml:\n${out.stdout ?? ""}${out.stderr ?? ""}`,
    )
  }
  const promPort = await freePort()
  const prometheus = fleet.spawn(`${prefix}prometheus`, prometheusBin, [
    `--config.file=${join(configDir, "prometheus.yml")}`,
    `--storage.tsdb.path=${join(configDir, "prometheus-data")}`,
    `--web.listen-address=127.0.0.1:${promPort}`,
    "--storage.tsdb.retention.time=1d",
  ])
  const url = `http://127.0.0.1:${promPort}`
  await waitReady("prometheus", url, prometheus)

  const query = async (expr: string) => {
    const body = await getJson(`${url}/api/v1/query?query=${encodeURIComponent(expr)}`)
    return envelope(resultSchema).parse(body).data
  }
  const alerts = async () => {
    const body = await getJson(`${url}/api/v1/alerts`)
    return envelope(z.object({ alerts: z.array(alertSchema) })).parse(body).data.alerts
  }
  const targets = async () => {
    const body = await getJson(`${url}/api/v1/targets?state=active`)
    return envelope(z.object({ activeTargets: z.array(targetSchema) })).parse(body).data.activeTargets
  }
  const stop = async () => {
    await prometheus.stop()
    await alertmanager.stop()
  }
  return { url, alertmanagerUrl, configDir, prometheus, alertmanager, query, alerts, targets, stop }
}
