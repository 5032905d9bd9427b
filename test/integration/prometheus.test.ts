// The shipped alert rules (deploy/prometheus/rules.yaml) and Grafana dashboard
// (deploy/grafana/fleetcheck-fleet.json) against Debian's Prometheus and Alertmanager scraping a real
// hub with secure serving: HTTPS with a CA file, and a bearer token file holding a TokenRequest token
// of a ServiceAccount bound to deploy/'s fleetcheck-metrics-reader role, reviewed by the hub's API
// server. A member runs real restic restores: one repository is damaged, so its check is red with
// DataCorrupted, FleetcheckBackupCheckFailing fires, and Alertmanager delivers it to a webhook receiver
// here. Every PromQL expression shipped returns data; the conditions an expression is about (an
// unreachable member, a missed objective, an absent hub) are made real here rather than assumed.
import { mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { createServer, type Server } from "node:http"
import { join } from "node:path"
import { KubeConfig } from "@kubernetes/client-node"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { parse } from "yaml"
import {
  damageResticPacks,
  installFleetcheck,
  type LocalCluster,
  type LocalFleet,
  type LocalPrometheus,
  type PromResult,
  registerWithSecret,
  resticBackup,
  ruleFileFrom,
  scraperToken,
  startFleet,
  startPrometheus,
  writeSampleFiles,
} from "../../clusters/local-fleet/index.ts"
import { type LaunchedHub, launchHub } from "../../src/hub/launch.ts"
import { selfSignedServingPair } from "../../src/hub/serving/self-signed.ts"
import { fastConfig } from "../support/hub.ts"
import { waitUntil } from "../support/wait.ts"

const repo = new URL("../../", import.meta.url).pathname
const rulesFile = join(repo, "deploy/prometheus/rules.yaml")
const dashboardFile = join(repo, "deploy/grafana/fleetcheck-fleet.json")
const ns = "backups"
const checksPath = `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`
const failing = "orders-files-damaged"

interface Rule {
  readonly alert?: string
  readonly record?: string
  readonly expr: string
}
/** The shipped rules, from a PrometheusRule or a plain rule file alike. */
const shippedRules = (): Rule[] =>
  (
    parse(ruleFileFrom(readFileSync(rulesFile, "utf8"))) as { groups: Array<{ rules: Rule[] }> }
  ).groups.flatMap((g) => g.rules)

/** Every PromQL expression in a Grafana dashboard: panel targets (rows' nested panels too). */
const dashboardExpressions = (dashboard: unknown): Array<{ where: string; expr: string }> => {
  const found: Array<{ where: string; expr: string }> = []
  const panels = (list: unknown, path: string) => {
    if (!Array.isArray(list)) return
    for (const p of list as Array<Record<string, unknown>>) {
      const title = `${path}${String(p.title ?? p.id ?? "?")}`
      for (const t of (p.targets as Array<Record<string, unknown>> | undefined) ?? [])
        if (typeof t.expr === "string" && t.expr.trim() !== "")
          found.push({ where: `panel "${title}" ${String(t.refId ?? "")}`, expr: t.expr })
      panels(p.panels, `${title} / `)
    }
  }
  panels((dashboard as { panels?: unknown }).panels, "")
  return found
}

/**
 * The dashboard's variables as Prometheus can take them: $cluster and $namespace as match-all
 * regexes; the interval macros as 5m, a range that covers this file's restores (the rate of a
 * histogram over a window without a restore is NaN: no data, rightly).
 */
const substituteVariables = (expr: string) =>
  expr
    .replace(/\$\{?__rate_interval\}?|\[\[__rate_interval\]\]/g, "5m")
    .replace(/\$\{?__interval\}?|\[\[__interval\]\]/g, "5m")
    .replace(/\$\{?__range\}?/g, "5m")
    .replace(/\$\{(cluster|namespace)(:[a-z]+)?\}|\$(cluster|namespace)\b|\[\[(cluster|namespace)\]\]/g, ".*")

/** At least one sample that is a number (NaN, from a ratio or quantile of nothing, is no data). */
const hasData = (r: PromResult): boolean => {
  const finite = (v: unknown) => Array.isArray(v) && Number.isFinite(Number(v[1]))
  if (r.resultType === "scalar") return finite(r.result)
  if (r.resultType === "string") return true
  const series = Array.isArray(r.result) ? (r.result as Array<{ value?: unknown; values?: unknown[] }>) : []
  return series.some((s) => finite(s.value) || (s.values ?? []).some(finite))
}

/** A variable's `label_values(metric, label)` as the PromQL Grafana asks for it. */
const variableExpression = (query: unknown): string | undefined => {
  const text = typeof query === "string" ? query : (query as { query?: unknown } | null)?.query
  if (typeof text !== "string") return undefined
  const m = /^label_values\((.+),\s*(\w+)\)$/.exec(text.trim())
  return m ? `count by (${m[2]}) (${m[1]})` : text
}

/** Refuses every delete of a sandbox namespace, whoever asks (the hub's identity is an admin here). */
const keepSandboxesPolicy = `
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: { name: keep-sandboxes }
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
      - { apiGroups: [""], apiVersions: ["v1"], operations: ["DELETE"], resources: ["namespaces"] }
  validations:
    - expression: "!has(oldObject.metadata.labels) || !('fleetcheck.io/sandbox' in oldObject.metadata.labels)"
      message: sandbox namespaces are kept here (a refused cleanup)
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: { name: keep-sandboxes }
spec:
  policyName: keep-sandboxes
  validationActions: [Deny]
`

interface Delivery {
  readonly status?: string
  readonly alerts?: Array<{ status?: string; labels?: Record<string, string> }>
}

describe("Prometheus and Alertmanager: the shipped rules and dashboard against a real hub", () => {
  let fleet: LocalFleet
  let hubCluster: LocalCluster
  let member: LocalCluster
  let hub: LaunchedHub | undefined
  let prom: LocalPrometheus
  let webhook: Server
  /** Creates a restic BackupCheck of a repository made in beforeAll. */
  let check: (name: string, repository: string, extra?: Record<string, unknown>) => Promise<void>
  const deliveries: Delivery[] = []

  beforeAll(async () => {
    const t0 = Date.now()
    fleet = await startFleet({
      clusters: [{ name: "hub", workloads: false }, "member", { name: "gone", workloads: false }],
    })
    hubCluster = fleet.cluster("hub")
    member = fleet.cluster("member")
    const gone = fleet.cluster("gone")
    await installFleetcheck(hubCluster, [member, gone])

    // Prometheus' identity in the hub cluster: a ServiceAccount bound to deploy/'s metrics role.
    const secrets = join(fleet.runDir, "prometheus-secrets")
    mkdirSync(secrets, { mode: 0o700 })
    const tokenFile = join(secrets, "token")
    writeFileSync(tokenFile, await scraperToken(hubCluster, 3600), { mode: 0o600 })

    // Real backups: one good restic repository, one whose data packs are damaged after the backup.
    const data = join(fleet.runDir, "backups")
    writeSampleFiles(join(data, "app"), 20, 32 * 1024, "orders")
    for (const [name, damaged] of [
      ["repo-good", false],
      ["repo-damaged", true],
    ] as const) {
      await resticBackup({
        repository: join(data, name),
        password: "pw",
        dir: join(data, "app"),
        host: "db-1",
        init: true,
      })
      if (damaged) expect(damageResticPacks(join(data, name))).toBeGreaterThan(0)
    }
    expect((await member.api("POST", "/api/v1/namespaces", { metadata: { name: ns } })).status).toBe(201)
    expect(
      (
        await member.api("POST", `/api/v1/namespaces/${ns}/secrets`, {
          metadata: { name: "restic" },
          stringData: { RESTIC_PASSWORD: "pw" },
        })
      ).status,
    ).toBe(201)
    check = async (name: string, repository: string, extra: Record<string, unknown> = {}) => {
      const r = await member.api("POST", checksPath, {
        apiVersion: "fleetcheck.io/v1alpha1",
        kind: "BackupCheck",
        metadata: { name, namespace: ns },
        spec: {
          backup: { name },
          timeout: "2m",
          restore: {
            restic: {
              repository: join(data, repository),
              credentialsSecretRef: { name: "restic" },
              verify: { readDataSubset: "100%" },
            },
          },
          ...extra,
        },
      })
      expect(r.status, JSON.stringify(r.body)).toBe(201)
    }
    // Verified; the fleet's verified ratio and restore durations have a green check to count.
    await check("orders-files", "repo-good")
    // Red: restic's verification reads the damaged packs (DataCorrupted).
    await check(failing, "repo-damaged")
    // Verified but the data is older than its objective allows: FleetcheckObjectiveMissed's condition.
    await check("orders-files-old", "repo-good", { objectives: { maxDataAge: "1s" } })
    // Verified once, then nothing for longer than maxStaleness (no schedule): FleetcheckVerificationStale's.
    await check("orders-files-once", "repo-good", { maxStaleness: "5s" })
    // A sandboxed run whose namespace the API server refuses to delete (an admission policy here):
    // FleetcheckSandboxCleanupFailed's condition. Sandboxes take a Job template (kwok runs it).
    const policy = await member.kubectl(["apply", "-f", "-"], keepSandboxesPolicy)
    expect(policy.code, policy.stderr).toBe(0)
    expect(
      (
        await member.api("POST", checksPath, {
          apiVersion: "fleetcheck.io/v1alpha1",
          kind: "BackupCheck",
          metadata: { name: "orders-sandboxed", namespace: ns },
          spec: {
            backup: { name: "orders-sandboxed" },
            timeout: "2m",
            sandbox: { validationWindow: "0s" },
            jobTemplate: {
              spec: {
                template: {
                  metadata: { annotations: { "fleetcheck.io/simulate-delay": "1s" } },
                  spec: { restartPolicy: "Never", containers: [{ name: "restore", image: "restore:1" }] },
                },
              },
            },
          },
        })
      ).status,
    ).toBe(201)

    await registerWithSecret(hubCluster, member, { env: "test" })
    await registerWithSecret(hubCluster, gone, { env: "test" })

    // The hub with secure serving: its serving certificate (self-signed, so it is its own CA) from files.
    const tls = join(fleet.runDir, "hub-tls")
    mkdirSync(tls)
    const pair = selfSignedServingPair(["127.0.0.1"])
    writeFileSync(join(tls, "tls.crt"), pair.cert)
    writeFileSync(join(tls, "tls.key"), pair.key, { mode: 0o600 })
    const kubeConfig = new KubeConfig()
    kubeConfig.loadFromString(hubCluster.kubeconfig)
    hub = await launchHub({
      config: {
        ...fastConfig,
        secureServing: true,
        tlsCertFile: join(tls, "tls.crt"),
        tlsPrivateKeyFile: join(tls, "tls.key"),
      },
      kubeConfig,
    })
    expect(hub.url).toMatch(/^https:\/\/127\.0\.0\.1:/)

    webhook = createServer((req, res) => {
      const chunks: Buffer[] = []
      let size = 0
      req.on("data", (c: Buffer) => {
        size += c.length
        if (size <= 1024 * 1024) chunks.push(c)
      })
      req.on("end", () => {
        try {
          deliveries.push(JSON.parse(Buffer.concat(chunks).toString("utf8")) as Delivery)
        } catch {
          // Not JSON: nothing Alertmanager sent.
        }
        res.end()
      })
    })
    await new Promise<void>((resolve) => webhook.listen(0, "127.0.0.1", resolve))
    const address = webhook.address()
    const webhookPort = typeof address === "object" && address ? address.port : 0

    // The test's copy of the rules: every `for:` rewritten to 2 s so the test does not wait minutes.
    // Expressions, labels and annotations are the shipped ones.
    const rulesCopy = join(fleet.runDir, "rules.yaml")
    writeFileSync(rulesCopy, ruleFileFrom(readFileSync(rulesFile, "utf8"), 2))
    prom = await startPrometheus(fleet, {
      targets: [hub.url],
      bearerTokenFile: tokenFile,
      caFile: join(tls, "tls.crt"),
      ruleFiles: [rulesCopy],
      webhookUrl: `http://127.0.0.1:${webhookPort}/alerts`,
    })

    // The member "gone" was connected, then its API server stops: an unreachable member.
    await waitUntil(
      "the hub connected to both members",
      60_000,
      async () => {
        const r = await prom.query("fleetcheck_member_cluster_connected == 1")
        return Array.isArray(r.result) && r.result.length === 2
      },
      500,
    )
    await gone.stopApiServer()
    console.log(
      `[prometheus] fleet, hub, Prometheus and Alertmanager ready in ${((Date.now() - t0) / 1000).toFixed(1)} s`,
    )
  }, 240_000)

  afterAll(async () => {
    await hub?.stop()
    await new Promise((resolve) => webhook?.close(resolve))
    await fleet?.stop()
  })

  it("scrapes the hub over HTTPS with the bearer token file and the CA file", async () => {
    const targets = await prom.targets()
    expect(targets.map((t) => t.scrapeUrl)).toEqual([`${hub!.url}/metrics`])
    await waitUntil("the hub target healthy", 30_000, async () => (await prom.targets())[0]?.health === "up")
    const up = await prom.query('up{job="fleetcheck-hub"}')
    expect(up.result).toMatchObject([{ value: [expect.any(Number), "1"] }])
  })

  it(`the failing check's FleetcheckBackupCheckFailing fires and Alertmanager delivers it with cluster, namespace, check and reason`, async () => {
    const firing = await waitUntil(
      "FleetcheckBackupCheckFailing firing for the damaged repository's check",
      180_000,
      async () =>
        (await prom.alerts()).find(
          (a) =>
            a.labels.alertname === "FleetcheckBackupCheckFailing" &&
            a.labels.name === failing &&
            a.state === "firing",
        ),
      1_000,
    )
    // The rules name a check by the hub's series labels: cluster, namespace and name (the check's).
    expect(firing.labels).toMatchObject({
      cluster: "member",
      namespace: ns,
      name: failing,
      reason: "DataCorrupted",
    })
    expect(firing.labels.severity).toBeTruthy()
    expect(firing.annotations?.summary).toContain(failing)
    expect(firing.annotations?.runbook_url).toMatch(/docs\/runbooks\.md#/)
    // The passing check has no such alert.
    expect(
      (await prom.alerts()).filter(
        (a) => a.labels.alertname === "FleetcheckBackupCheckFailing" && a.labels.name === "orders-files",
      ),
    ).toEqual([])

    const delivered = await waitUntil(
      "Alertmanager's webhook delivery of FleetcheckBackupCheckFailing",
      60_000,
      () =>
        deliveries
          .flatMap((d) => d.alerts ?? [])
          .find((a) => a.labels?.alertname === "FleetcheckBackupCheckFailing" && a.labels?.name === failing),
      500,
    )
    expect(delivered.status).toBe("firing")
    expect(delivered.labels).toMatchObject({
      cluster: "member",
      namespace: ns,
      name: failing,
      reason: "DataCorrupted",
    })
  })

  it("every expression in the rules returns data (the conditions made real: a red check, a missed objective, a stale check, an unreachable member, a refused sandbox cleanup)", async () => {
    const rules = shippedRules()
    expect(rules.length).toBeGreaterThan(0)
    // Every alert expression is empty in a healthy fleet, as it should be: each selects its condition
    // (a check not verified, a deadline passed, an objective missed, a member disconnected, a refused
    // sandbox delete, no hub leading). beforeAll made each condition real; FleetcheckHubAbsent's is a
    // hub that is gone, so the last test stops the hub for it.
    const now = rules.filter((r) => r.alert !== "FleetcheckHubAbsent")
    const empty = await waitUntil(
      "every rule expression to return data",
      120_000,
      async () => {
        const missing: string[] = []
        for (const r of now)
          if (!hasData(await prom.query(r.expr))) missing.push(`${r.alert ?? r.record}: ${r.expr}`)
        if (missing.length === 0) return []
        lastMissing = missing
        return undefined
      },
      2_000,
    ).catch(() => lastMissing)
    expect(empty, "rule expressions that returned no data").toEqual([])
    console.log(`[prometheus] ${now.length} rule expressions each returned data`)
  })

  it("every expression in the dashboard returns data ($cluster, $namespace as .*)", async () => {
    const dashboard = JSON.parse(readFileSync(dashboardFile, "utf8"))
    const exprs = dashboardExpressions(dashboard)
    expect(exprs.length).toBeGreaterThan(0)
    // The variables' queries too: an empty one would leave the dashboard with nothing to pick.
    for (const v of (dashboard.templating?.list ?? []) as Array<{
      name?: string
      type?: string
      query?: unknown
    }>) {
      const expr = v.type === "query" ? variableExpression(v.query) : undefined
      if (expr !== undefined) exprs.push({ where: `variable $${v.name}`, expr })
    }
    // rate() over the restore histogram needs an increase Prometheus saw: a restore that ends after its
    // first scrape of the histogram (the other checks' restores may all have ended before it).
    await waitUntil(
      "Prometheus to have scraped the restore histogram",
      60_000,
      async () => hasData(await prom.query("fleetcheck_restore_duration_seconds_count")) || undefined,
      1_000,
    )
    await check("orders-files-late", "repo-good")
    const empty = await waitUntil(
      "every dashboard expression to return data",
      60_000,
      async () => {
        const missing: string[] = []
        for (const e of exprs) {
          const expr = substituteVariables(e.expr)
          if (!hasData(await prom.query(expr))) missing.push(`${e.where}: ${expr}`)
        }
        if (missing.length === 0) return []
        lastMissing = missing
        return undefined
      },
      2_000,
    ).catch(() => lastMissing)
    expect(empty, "dashboard expressions that returned no data").toEqual([])
    console.log(`[prometheus] ${exprs.length} dashboard expressions (variables included) each returned data`)
  })

  it("with the hub gone, FleetcheckHubAbsent's expression returns data", async () => {
    const absent = shippedRules().find((r) => r.alert === "FleetcheckHubAbsent")
    expect(absent, "FleetcheckHubAbsent in rules.yaml").toBeDefined()
    expect(hasData(await prom.query(absent!.expr)), "while the hub serves").toBe(false)
    // Stopping is bounded by the hub's drain grace (5 s here), however often Prometheus scrapes it.
    let stopped = false
    const stopping = hub!.stop().finally(() => {
      stopped = true
    })
    hub = undefined
    await waitUntil("the hub to stop while Prometheus scrapes it", 20_000, () => stopped)
    await stopping
    await waitUntil(
      "FleetcheckHubAbsent's expression to return data",
      60_000,
      async () => hasData(await prom.query(absent!.expr)),
      1_000,
    )
  })
})

/** The last probe's list of expressions without data, for the assertion's message. */
let lastMissing: string[] = []
