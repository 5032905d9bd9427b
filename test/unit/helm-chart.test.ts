// deploy/helm/ is generated (src/hub/chart/; docs/adr/0016): the checked-in charts are what the
// generator makes of deploy/, deploy/prometheus/rules.yaml and the hub's settings, and every hub setting
// is a value with its name, default and help. Rendering with real Helm: test/integration/helm.test.ts.
import { readdirSync, readFileSync } from "node:fs"
import { join, relative } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import { renderCharts, repoSources } from "../../src/hub/chart/render.ts"
import { camelOfFlag, chartDecided } from "../../src/hub/chart/values.ts"
import { hubSettings } from "../../src/hub/config.ts"

const root = new URL("../../", import.meta.url).pathname
const helmDir = join(root, "deploy/helm")
const rendered = renderCharts(repoSources(root))
const schema = JSON.parse(readFileSync(join(helmDir, "fleetcheck/values.schema.json"), "utf8"))

describe("deploy/helm", () => {
  it("is what the generator makes of deploy/ and the hub's settings (run `node src/hub/chart/generate.ts` when this fails)", () => {
    const onDisk = readdirSync(helmDir, { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile())
      .map((e) => relative(helmDir, join(e.parentPath, e.name)))
      .sort()
    assert.deepStrictEqual(onDisk, Object.keys(rendered).sort(), "files under deploy/helm")
    for (const [path, text] of Object.entries(rendered))
      assert.strictEqual(readFileSync(join(helmDir, path), "utf8"), text, `deploy/helm/${path} is stale`)
  })

  it("embeds deploy/prometheus/rules.yaml and the CRDs as they are", () => {
    const same = (chartPath: string, source: string) =>
      assert.strictEqual(rendered[chartPath], readFileSync(join(root, source), "utf8"), chartPath)
    same("fleetcheck/files/prometheus-rules.yaml", "deploy/prometheus/rules.yaml")
    same("fleetcheck/crds/fleetcheck.io_memberclusters.yaml", "deploy/crds/fleetcheck.io_memberclusters.yaml")
    same(
      "fleetcheck/crds/fleetcheck.io_fleetbackupchecks.yaml",
      "deploy/crds/fleetcheck.io_fleetbackupchecks.yaml",
    )
    same(
      "fleetcheck-member/crds/fleetcheck.io_backupchecks.yaml",
      "deploy/crds/fleetcheck.io_backupchecks.yaml",
    )
  })

  it("has every hub setting as a value under hub: with its flag's name, default and help", () => {
    const hub = schema.properties.hub
    assert.strictEqual(hub.additionalProperties, false)
    assert.strictEqual(schema.additionalProperties, false)
    const expected = Object.entries(hubSettings)
      .filter(([key]) => !Object.hasOwn(chartDecided, key))
      .map(([, s]) => camelOfFlag(s.flag))
    assert.deepStrictEqual(Object.keys(hub.properties), expected)
    // deploy/hub's Deployment sets these, so the chart's default is its value (and the help says so).
    const deployed: Record<string, string> = {
      httpAddress: "0.0.0.0:8443",
      dashboardAddress: "0.0.0.0:8081",
    }
    for (const s of Object.values(hubSettings)) {
      const name = camelOfFlag(s.flag)
      const value = hub.properties[name]
      if (!value) continue
      assert.ok(String(value.description).startsWith(s.describe), `${name}: the setting's help`)
      const raw = deployed[name] ?? s.default ?? ""
      const want = value.type === "boolean" ? raw === "true" : value.type === "integer" ? Number(raw) : raw
      assert.deepStrictEqual(value.default, want, `${name}: default`)
    }
    assert.strictEqual(hub.properties.leaderElect.type, "boolean")
    assert.deepStrictEqual(
      [
        hub.properties.workersPerMember.type,
        hub.properties.workersPerMember.minimum,
        hub.properties.workersPerMember.maximum,
      ],
      ["integer", 1, 256],
    )
    assert.deepStrictEqual(hub.properties.logLevel.enum, ["Debug", "Info", "Warn", "Error"])
  })

  it("writes each hub value's env only when it differs from the hub's default, except what deploy/hub sets", () => {
    const deployment = rendered["fleetcheck/templates/deployment.yaml"]!
    assert.include(deployment, '{{- if ne (.Values.hub.workersPerMember | int64 | toString) "4" }}')
    assert.include(deployment, "- name: FLEETCHECK_HTTP_ADDRESS\n")
    assert.notInclude(deployment, "if ne (toString .Values.hub.httpAddress)")
  })
})
