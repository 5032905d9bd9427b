// `fleetcheck dev --prometheus`: Debian's Prometheus scraping the dev hub (every replica) with the
// shipped alert rules, and Alertmanager receiving their alerts, beside the local fleet and stopped
// with it. With --secure-serving Prometheus scrapes as deploy/ says to: a ServiceAccount bound to
// fleetcheck-metrics-reader, its TokenRequest token in a file, the hub's certificate as the CA file.
// Each alert that starts firing is said on stderr, so a newcomer sees the failing samples page.
import { readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"

type Harness = typeof import("../../clusters/local-fleet/index.ts")
type LocalFleet = Awaited<ReturnType<Harness["startFleet"]>>
type LocalPrometheus = Awaited<ReturnType<Harness["startPrometheus"]>>

const root = new URL("../../", import.meta.url).pathname
export const devRulesFile = join(root, "deploy/prometheus/rules.yaml")
/** Every alert's `for:` in dev: the shipped minutes would keep a newcomer waiting. */
export const devAlertForSeconds = 10

export interface DevPrometheusOptions {
  readonly harness: Harness
  readonly fleet: LocalFleet
  /** Every hub replica's base URL. */
  readonly hubUrls: ReadonlyArray<string>
  /** Secure serving: scrape with a reviewed token, over HTTPS. */
  readonly secure: boolean
  /** What the hub's serving certificate is checked against (PEM file); default the system's CAs. */
  readonly caFile: string | undefined
  readonly say: (line: string) => void
}

export interface DevPrometheus {
  readonly prometheus: LocalPrometheus
  readonly startupMs: number
  readonly bannerLines: ReadonlyArray<string>
  /** Stops saying alerts (the processes stop with the fleet). */
  readonly stopWatching: () => void
}

export const startDevPrometheus = async (o: DevPrometheusOptions): Promise<DevPrometheus> => {
  const t0 = Date.now()
  o.say("starting Prometheus and Alertmanager (Debian's; bash config/install-prometheus.sh installs them)")
  const rules = join(o.fleet.runDir, "fleetcheck-rules.yaml")
  writeFileSync(rules, o.harness.ruleFileFrom(readFileSync(devRulesFile, "utf8"), devAlertForSeconds))
  let bearerTokenFile: string | undefined
  if (o.secure) {
    bearerTokenFile = join(o.fleet.runDir, "prometheus-token")
    writeFileSync(bearerTokenFile, await o.harness.scraperToken(o.fleet.cluster("hub")), { mode: 0o600 })
  }
  const prometheus = await o.harness.startPrometheus(o.fleet, {
    targets: o.hubUrls,
    ...(bearerTokenFile !== undefined ? { bearerTokenFile } : {}),
    ...(o.caFile !== undefined ? { caFile: o.caFile } : {}),
    ruleFiles: [rules],
    interval: "5s",
  })
  const startupMs = Date.now() - t0
  o.say(`Prometheus and Alertmanager ready in ${(startupMs / 1000).toFixed(1)} s`)

  // Say each alert once when it starts firing.
  const said = new Set<string>()
  const timer = setInterval(() => {
    prometheus
      .alerts()
      .then((alerts) => {
        for (const a of alerts) {
          const key = JSON.stringify(a.labels)
          if (a.state !== "firing" || said.has(key)) continue
          said.add(key)
          const { alertname, cluster, namespace, name, reason, objective } = a.labels
          const what = [cluster, namespace && name ? `${namespace}/${name}` : undefined, reason, objective]
            .filter((x) => x !== undefined)
            .join(" ")
          o.say(`alert firing: ${alertname} ${what} (${prometheus.alertmanagerUrl}/#/alerts)`)
        }
      })
      .catch(() => undefined)
  }, 5_000)
  timer.unref()
  const bannerLines = [
    `  prometheus  ${prometheus.url}/alerts   (rules: deploy/prometheus/rules.yaml, for: ${devAlertForSeconds}s here)`,
    `  alertmgr    ${prometheus.alertmanagerUrl}/#/alerts`,
  ]
  return { prometheus, startupMs, bannerLines, stopWatching: () => clearInterval(timer) }
}
