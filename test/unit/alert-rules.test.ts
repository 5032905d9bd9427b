// deploy/prometheus/rules.yaml checked and unit-tested by the real promtool (Debian's prometheus,
// installed by bin/ensure-deps.sh), and held to SPEC §12: the six alert names, a severity, summaries
// naming cluster, namespace and check, runbook anchors that exist, metrics the hub really exports,
// and the generated PrometheusRule current.
import { execFile } from "node:child_process"
import { readFileSync } from "node:fs"
import { join } from "node:path"
import { promisify } from "node:util"
import { assert, describe, it } from "@effect/vitest"
import { parse } from "yaml"
import { renderPrometheusRule } from "../../src/observability/prometheus-rule.ts"
import { hubMetricNames, metricNamesIn } from "../support/promql.ts"

const root = join(import.meta.dirname, "../..")
const dir = join(root, "deploy/prometheus")
const run = promisify(execFile)

interface Rule {
  readonly alert: string
  readonly expr: string
  readonly for?: string
  readonly labels?: Record<string, string>
  readonly annotations?: Record<string, string>
}
interface AlertTest {
  readonly alertname: string
  readonly exp_alerts: ReadonlyArray<unknown>
}

const rulesText = readFileSync(join(dir, "rules.yaml"), "utf8")
const rules: ReadonlyArray<Rule> = (
  parse(rulesText) as { groups: Array<{ rules: Array<Rule> }> }
).groups.flatMap((g) => g.rules)
const specAlerts = [
  "FleetcheckBackupCheckFailing",
  "FleetcheckVerificationStale",
  "FleetcheckObjectiveMissed",
  "FleetcheckMemberUnreachable",
  "FleetcheckHubAbsent",
  "FleetcheckSandboxCleanupFailed",
]
// alerts about one member or fleet-wide: no namespace or check to name
const checkAlerts = specAlerts.filter(
  (a) => a !== "FleetcheckMemberUnreachable" && a !== "FleetcheckHubAbsent",
)

describe("alert rules", () => {
  it("promtool check rules accepts the rule file", async () => {
    const { stdout } = await run("promtool", ["check", "rules", "rules.yaml"], { cwd: dir })
    assert.include(stdout, `SUCCESS: ${specAlerts.length} rules found`)
  })

  it("promtool test rules passes rules.test.yaml, which fires and keeps quiet every alert", async () => {
    const { stdout } = await run("promtool", ["test", "rules", "rules.test.yaml"], { cwd: dir }).catch(
      (e: { stdout?: string; stderr?: string }) => {
        throw new Error(`promtool test rules failed:\n${e.stdout ?? ""}${e.stderr ?? ""}`)
      },
    )
    assert.include(stdout, "SUCCESS")
    const tests = (
      parse(readFileSync(join(dir, "rules.test.yaml"), "utf8")) as {
        tests: Array<{ alert_rule_test: Array<AlertTest> }>
      }
    ).tests.flatMap((t) => t.alert_rule_test)
    for (const alert of specAlerts) {
      const mine = tests.filter((t) => t.alertname === alert)
      assert.isTrue(
        mine.some((t) => t.exp_alerts.length === 0),
        `${alert} has no case where it does not fire`,
      )
      assert.isTrue(
        mine.some((t) => t.exp_alerts.length > 0),
        `${alert} has no case where it fires`,
      )
    }
  })

  it("are exactly SPEC §12's alerts, each with a severity, a for duration and a summary naming what it is about", () => {
    assert.deepStrictEqual(
      rules.map((r) => r.alert),
      specAlerts,
    )
    for (const r of rules) {
      assert.oneOf(r.labels?.severity, ["critical", "warning"], `${r.alert} severity`)
      assert.match(r.for ?? "", /^[0-9]+m$/, `${r.alert} for`)
      assert.isNotEmpty(r.annotations?.description, `${r.alert} description`)
      if (r.alert !== "FleetcheckHubAbsent") assert.include(r.annotations?.summary, "{{ $labels.cluster }}")
    }
    for (const alert of checkAlerts) {
      const summary = rules.find((r) => r.alert === alert)?.annotations?.summary ?? ""
      assert.include(summary, "{{ $labels.namespace }}", alert)
      assert.include(summary, "{{ $labels.name }}", alert)
    }
    const failing = rules.find((r) => r.alert === "FleetcheckBackupCheckFailing")
    assert.include(failing?.annotations?.summary, "{{ $labels.reason }}")
  })

  it("each runbook_url points at its own section of docs/runbooks.md", () => {
    const runbooks = readFileSync(join(root, "docs/runbooks.md"), "utf8")
    const anchors = new Set(
      [...runbooks.matchAll(/^## (.+)$/gm)].map((m) =>
        m[1]!
          .trim()
          .toLowerCase()
          .replace(/[^a-z0-9 -]/g, "")
          .replace(/ /g, "-"),
      ),
    )
    for (const r of rules) {
      const url = r.annotations?.runbook_url ?? ""
      assert.match(url, /^https:\/\/\S+\/docs\/runbooks\.md#[a-z0-9-]+$/, r.alert)
      const anchor = url.split("#")[1]!
      assert.strictEqual(anchor, r.alert.toLowerCase(), `${r.alert} links its own section`)
      assert.isTrue(anchors.has(anchor), `docs/runbooks.md has no section #${anchor}`)
    }
  })

  it("every expression reads only metrics the hub exports (and Prometheus's up)", async () => {
    const exported = await hubMetricNames()
    for (const r of rules) {
      const names = metricNamesIn(r.expr)
      assert.isNotEmpty(names, r.alert)
      for (const name of names) assert.isTrue(name === "up" || exported.has(name), `${r.alert} reads ${name}`)
    }
  })

  it("deploy/prometheus/prometheusrule.yaml is generated from rules.yaml (run `node src/observability/generate-prometheus-rule.ts` when this fails)", () => {
    const generated = readFileSync(join(dir, "prometheusrule.yaml"), "utf8")
    assert.strictEqual(generated, renderPrometheusRule(rulesText))
    const manifest = parse(generated) as { kind: string; metadata: { name: string }; spec: unknown }
    assert.strictEqual(manifest.kind, "PrometheusRule")
    assert.strictEqual(manifest.metadata.name, "fleetcheck")
    assert.deepStrictEqual(manifest.spec, { groups: (parse(rulesText) as { groups: unknown }).groups })
  })
})
