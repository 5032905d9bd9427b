// deploy/grafana/fleetcheck-fleet.json: importable (schema version, datasource variable, unique ids),
// the panels SPEC §12 and issue 34 ask for, `cluster` and `namespace` variables from label_values, and
// every PromQL expression valid (the real promtool parses it) and reading only metrics the hub exports.
import { execFile } from "node:child_process"
import { readFileSync } from "node:fs"
import { mkdtemp, rm, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { promisify } from "node:util"
import { assert, describe, it } from "@effect/vitest"
import { stringify } from "yaml"
import { hubMetricNames, metricNamesIn } from "../support/promql.ts"

const root = join(import.meta.dirname, "../..")
const run = promisify(execFile)

interface Target {
  readonly refId: string
  readonly expr: string
}
interface Panel {
  readonly id: number
  readonly type: string
  readonly title: string
  readonly targets?: ReadonlyArray<Target>
  readonly datasource?: { readonly uid?: string }
}
interface Variable {
  readonly name: string
  readonly type: string
  readonly query?: string | { readonly query: string }
}
interface Dashboard {
  readonly uid: string
  readonly title: string
  readonly schemaVersion: number
  readonly panels: ReadonlyArray<Panel>
  readonly templating: { readonly list: ReadonlyArray<Variable> }
}

const dashboard = JSON.parse(
  readFileSync(join(root, "deploy/grafana/fleetcheck-fleet.json"), "utf8"),
) as Dashboard
const targets = dashboard.panels.flatMap((p) => (p.targets ?? []).map((t) => ({ panel: p.title, ...t })))
const variableQuery = (v: Variable) => (typeof v.query === "string" ? v.query : (v.query?.query ?? ""))

/** The expression as Prometheus receives it from Grafana: variables replaced by what "All" sends. */
const asSent = (expr: string): string =>
  expr.replace(/\$__rate_interval|\$__interval|\$__range/g, "5m").replace(/\$(cluster|namespace)\b/g, ".*")

describe("Grafana dashboard", () => {
  it("is importable: schema version 36 or newer, a uid, a Prometheus datasource variable, unique panel ids", () => {
    assert.isAtLeast(dashboard.schemaVersion, 36)
    assert.strictEqual(dashboard.uid, "fleetcheck-fleet")
    const datasource = dashboard.templating.list.find((v) => v.name === "datasource")
    assert.strictEqual(datasource?.type, "datasource")
    assert.strictEqual(datasource?.query, "prometheus")
    const ids = dashboard.panels.map((p) => p.id)
    assert.strictEqual(new Set(ids).size, ids.length)
    // biome-ignore lint/suspicious/noTemplateCurlyInString: Grafana's variable syntax, not a JS template
    const datasourceRef = "${datasource}"
    for (const p of dashboard.panels) assert.strictEqual(p.datasource?.uid, datasourceRef, p.title)
  })

  it("has the fleet's panels", () => {
    const titles = dashboard.panels.map((p) => p.title)
    for (const title of [
      "Fleet verified ratio",
      "Failing checks",
      "Failing checks and why",
      "Recovery-point age against its objective",
      "Restore duration",
      "Member health",
      "Hub reconcile latency",
      "Workqueue depth",
    ])
      assert.include(titles, title)
    const age = targets
      .filter((t) => t.panel === "Recovery-point age against its objective")
      .map((t) => t.expr)
    assert.isTrue(age.some((e) => e.includes("fleetcheck_recovery_point_age_seconds")))
    assert.isTrue(age.some((e) => e.includes('objective="dataAge"')))
  })

  it("has cluster and namespace variables from label_values of exported metrics, and the check panels use them", async () => {
    const exported = await hubMetricNames()
    for (const name of ["cluster", "namespace"]) {
      const v = dashboard.templating.list.find((x) => x.name === name)
      assert.strictEqual(v?.type, "query", name)
      const m = /^label_values\(([a-z_:]+)(\{[^}]*\})?, *([a-z_]+)\)$/.exec(variableQuery(v!))
      assert.isNotNull(m, `${name}: ${variableQuery(v!)}`)
      assert.isTrue(exported.has(m![1]!), `${name} reads ${m![1]}`)
      assert.strictEqual(m![3], name)
    }
    for (const t of targets) {
      if (/fleetcheck_backupcheck_|fleetcheck_recovery_point_age_seconds/.test(t.expr))
        assert.include(t.expr, 'namespace=~"$namespace"', t.panel)
      if (/fleetcheck_(backupcheck|member_cluster|recovery|restore)|workqueue_/.test(t.expr))
        assert.include(t.expr, 'cluster=~"$cluster"', t.panel)
    }
  })

  it("every panel expression reads only metrics the hub exports", async () => {
    const exported = await hubMetricNames()
    assert.isAtLeast(targets.length, 10)
    for (const t of targets) {
      const names = metricNamesIn(t.expr)
      assert.isNotEmpty(names, `${t.panel} ${t.refId}`)
      for (const name of names) assert.isTrue(exported.has(name), `${t.panel} ${t.refId} reads ${name}`)
    }
  })

  it("every expression parses (promtool check rules on them as recording rules)", async () => {
    const dir = await mkdtemp(join(tmpdir(), "dashboard-promql-"))
    try {
      const rules = {
        groups: [
          {
            name: "dashboard",
            rules: [
              ...targets.map((t, i) => ({ record: `dashboard:panel_${i}`, expr: asSent(t.expr) })),
              ...dashboard.templating.list
                .filter((v) => v.type === "query")
                .map((v) => ({
                  record: `dashboard:variable_${v.name}`,
                  expr: asSent(/^label_values\((.+), *[a-z_]+\)$/.exec(variableQuery(v))![1]!),
                })),
            ],
          },
        ],
      }
      await writeFile(join(dir, "rules.yaml"), stringify(rules))
      const { stdout } = await run("promtool", ["check", "rules", "rules.yaml"], { cwd: dir }).catch(
        (e: { stdout?: string; stderr?: string }) => {
          throw new Error(`promtool refused a dashboard expression:\n${e.stdout ?? ""}${e.stderr ?? ""}`)
        },
      )
      assert.include(stdout, "SUCCESS")
    } finally {
      await rm(dir, { recursive: true, force: true })
    }
  })
})
