// What the dashboard shows for a check's state and its trace: a verified check that missed an
// objective is a state of its own (amber, in words, the objective named) on every page that shows a
// check's state, never plain green; and trace ids link through --trace-url-template ({traceId}
// replaced, URL-encoded; only http and https templates start a hub).
import { assert, describe, it } from "@effect/vitest"
import { type BackupCheck, parseBackupCheck } from "../../src/api/backupcheck.ts"
import type { CheckView, ClusterView, FleetView } from "../../src/api/fleet.ts"
import { HubConfigError, resolveHubConfig } from "../../src/hub/config.ts"
import { renderCheckPage, renderClusterPage } from "../../src/hub/dashboard/detail.ts"
import { checksTable, traceLink } from "../../src/hub/dashboard/layout.ts"
import { renderOverview } from "../../src/hub/dashboard/overview.ts"
import { fleetCheckView } from "../support/fleet-members.ts"

const check = (name: string, over: Partial<CheckView> = {}): CheckView => ({
  cluster: "m1",
  namespace: "shop",
  name,
  status: "True",
  reason: "RestoreSucceeded",
  message: "restored and verified",
  traceID: "4bf92f3577b34da6a3ce929d0e0e4736",
  ...over,
})
/** Verified, but the restored data was 151 hours old against maxDataAge 26h. */
const stale = check("orders-stale", {
  objectives: { restoreTime: "True", dataAge: "False", restoreDurationSeconds: 41, dataAgeSeconds: 543_600 },
})
const fine = check("orders-fine", {
  objectives: { restoreTime: "True", dataAge: "True", restoreDurationSeconds: 41, dataAgeSeconds: 3600 },
})
const failingAndSlow = check("orders-failing", {
  status: "False",
  reason: "RestoreFailed",
  message: "exit 1",
  objectives: { restoreTime: "False", restoreDurationSeconds: 900 },
})
const cluster: ClusterView = {
  name: "m1",
  labels: {},
  conditions: ["Ready", "Connected", "CredentialsValid"].map((type) => ({
    type,
    status: "True" as const,
    reason: "Ok",
    message: "",
  })),
  counts: { total: 3, verified: 2, failed: 1, unknown: 0, objectivesMissed: 2 },
}
const tableOpts = { withCluster: true, traceUrlTemplate: undefined, empty: "none" }

/** Each body row of the first table in `markup`, keyed by the check name it links to. */
const rowsByCheck = (markup: string): Map<string, string> =>
  new Map(
    [...markup.matchAll(/<tr class="[^"]*">[\s\S]*?<\/tr>/g)].map((m) => [
      /&amp;name=([^"&]+)"/.exec(m[0])?.[1] ?? "",
      m[0],
    ]),
  )

const amber =
  /<span class="badge warn" title="verified, but missed: data age \(maxDataAge\)">Verified · objective missed<\/span><div class="warn-text" title="[^"]*">missed: data age<\/div>/

describe("a missed objective is its own state, never plain green", () => {
  it("checks table: amber row, its own badge in words with the objective named; failing stays failing", () => {
    const rows = rowsByCheck(String(checksTable("checks", [failingAndSlow, stale, fine], tableOpts)))
    const staleRow = rows.get("orders-stale") ?? ""
    assert.match(staleRow, /^<tr class="row-warn">/)
    assert.match(staleRow, amber)
    assert.notInclude(staleRow, "badge ok")
    // A failing check that also missed an objective: the worse state is the one shown.
    const failingRow = rows.get("orders-failing") ?? ""
    assert.match(failingRow, /^<tr class="row-bad">/)
    assert.include(failingRow, '<span class="badge bad">Failing</span>')
    assert.notInclude(failingRow, "objective missed")
    const fineRow = rows.get("orders-fine") ?? ""
    assert.match(fineRow, /^<tr class="">/)
    assert.include(fineRow, '<span class="badge ok">Verified</span>')
  })

  it("both objectives missed: both named", () => {
    const both = check("both", { objectives: { restoreTime: "False", dataAge: "False" } })
    const text = String(checksTable("checks", [both], tableOpts))
    assert.include(
      text,
      '<div class="warn-text" title="verified, but missed: restore time (maxRestoreDuration), data age (maxDataAge)">missed: restore time, data age</div>',
    )
  })

  it("overview: missed objectives after failing and unknown, before plain verified; title, summary and cluster row say so", () => {
    const view: FleetView = {
      generatedAt: "2026-11-29T03:00:00Z",
      clusters: [cluster],
      // The fleet API's order: failing, unknown, verified (by name).
      checks: [failingAndSlow, fine, stale],
      summary: {
        clusters: 1,
        healthyClusters: 1,
        checks: { total: 3, verified: 2, failed: 1, unknown: 0, objectivesMissed: 2 },
      },
    }
    const opts = { role: "leader", hub: "h", pageSize: 100, page: 1, traceUrlTemplate: undefined, params: {} }
    const text = renderOverview(view, opts)
    const checks = text.slice(text.indexOf('id="checks"'))
    assert.deepStrictEqual([...rowsByCheck(checks).keys()], ["orders-failing", "orders-stale", "orders-fine"])
    assert.match(rowsByCheck(checks).get("orders-stale") ?? "", amber)
    assert.include(text, '<strong class="warn-text">2 missed an objective</strong>')
    assert.include(text, '<div class="warn-text">2 missed an objective</div>') // the cluster's row
    const onlyMissed = renderOverview(
      {
        ...view,
        clusters: [
          { ...cluster, counts: { total: 2, verified: 2, failed: 0, unknown: 0, objectivesMissed: 1 } },
        ],
        checks: [fine, stale],
        summary: {
          clusters: 1,
          healthyClusters: 1,
          checks: { total: 2, verified: 2, failed: 0, unknown: 0, objectivesMissed: 1 },
        },
      },
      opts,
    )
    assert.include(onlyMissed, "<title>fleetcheck: 1 missed an objective</title>")
    assert.notInclude(onlyMissed, "all verified")
  })

  it("fleet checks: ObjectivesMissed is amber, and so is the chip of the cluster whose placed check missed one", () => {
    const f = fleetCheckView("orders-stale", "False", [
      { name: "m1", status: "True" },
      { name: "m2", status: "True" },
    ])
    const fleet = {
      ...f,
      verified: {
        status: "False" as const,
        reason: "ObjectivesMissed",
        message: "verified in all 2 selected clusters; objectives missed in m1 (data age, maxDataAge)",
      },
    }
    const m2 = check("orders-stale", { cluster: "m2", objectives: { dataAge: "True" } })
    const view: FleetView = {
      generatedAt: "2026-11-29T03:00:00Z",
      clusters: [cluster, { ...cluster, name: "m2" }],
      checks: [stale, m2],
      fleetChecks: [fleet],
    }
    const text = renderOverview(view, {
      role: "leader",
      hub: "h",
      pageSize: 100,
      page: 1,
      traceUrlTemplate: undefined,
      params: {},
    })
    const section = text.slice(text.indexOf('id="fleet-checks"'), text.indexOf('id="clusters"'))
    assert.include(section, '<tr class="row-warn">')
    assert.match(
      section,
      /<td data-label="Fleet verified"><span class="badge warn" title="[^"]*ObjectivesMissed[^"]*">Verified · objective missed<\/span><\/td>/,
    )
    assert.notInclude(section, "Failing")
    assert.include(section, '>m1</a> <span class="badge warn"')
    assert.include(section, "missed: data age")
    assert.include(section, '>m2</a> <span class="badge ok">Verified</span>')
    // Behind a filter that hides the placed check (?failing=true), the chip goes by what the
    // FleetBackupCheck recorded: still amber, never plain green.
    const hidden = renderOverview(
      {
        ...view,
        checks: [],
        fleetChecks: [
          {
            ...fleet,
            clusters: [{ ...fleet.clusters[0]!, objectivesMissed: ["dataAge"] }, fleet.clusters[1]!],
          },
        ],
      },
      { role: "leader", hub: "h", pageSize: 100, page: 1, traceUrlTemplate: undefined, params: {} },
    )
    const hiddenSection = hidden.slice(hidden.indexOf('id="fleet-checks"'), hidden.indexOf('id="clusters"'))
    assert.include(hiddenSection, '>m1</a> <span class="badge warn"')
    assert.include(hiddenSection, '>m2</a> <span class="badge ok">Verified</span>')
    // A FleetBackupCheck that fails for a failing cluster stays red.
    const failing = renderOverview(
      { ...view, fleetChecks: [fleetCheckView("x", "False", [{ name: "m1", status: "False" }])] },
      { role: "leader", hub: "h", pageSize: 100, page: 1, traceUrlTemplate: undefined, params: {} },
    )
    assert.include(failing, '<td data-label="Fleet verified"><span class="badge bad">Failing</span></td>')
  })

  it("cluster and check pages: the summary counts it and the check's Status is the amber state", () => {
    const backupCheck = (): BackupCheck => {
      const parsed = parseBackupCheck({
        apiVersion: "fleetcheck.io/v1alpha1",
        kind: "BackupCheck",
        metadata: { name: "orders-stale", namespace: "shop", uid: "u1", generation: 1 },
        spec: {
          backup: { name: "orders" },
          jobTemplate: { spec: { template: { spec: { containers: [{ name: "r", image: "r:1" }] } } } },
          objectives: { maxDataAge: "26h" },
        },
      })
      if (!parsed.success) throw new Error(parsed.error)
      return parsed.data
    }
    const opts = { leader: true, hub: "h", pageSize: 50, traceUrlTemplate: undefined }
    const page = renderCheckPage(stale, backupCheck(), cluster, opts)
    assert.match(page, new RegExp(`<dt>Status</dt><dd>${amber.source}</dd>`))
    const clusterPage = renderClusterPage(cluster, [failingAndSlow, fine, stale], { ...opts, page: 1 })
    assert.include(clusterPage, '<strong class="warn-text">2 missed an objective</strong>')
    const rows = rowsByCheck(clusterPage.slice(clusterPage.indexOf('id="checks"')))
    assert.deepStrictEqual([...rows.keys()], ["orders-failing", "orders-stale", "orders-fine"])
    assert.match(rows.get("orders-stale") ?? "", amber)
  })
})

describe("trace links (--trace-url-template)", () => {
  it("replaces {traceId} (SPEC §12) with the id, URL-encoded; {traceID} still works; no template, no link", () => {
    const id = "4bf92f3577b34da6a3ce929d0e0e4736"
    assert.strictEqual(
      String(traceLink(id, "http://localhost:16686/trace/{traceId}")),
      `<a href="http://localhost:16686/trace/${id}" rel="noreferrer"><code>${id}</code></a>`,
    )
    assert.include(String(traceLink(id, "https://t.example/{traceID}")), `href="https://t.example/${id}"`)
    // A member writes the id: whatever it holds stays inside its place in the URL.
    assert.include(
      String(traceLink('a/b?c&d"e', "https://grafana.example/explore?traceId={traceId}&x=1")),
      'href="https://grafana.example/explore?traceId=a%2Fb%3Fc%26d%22e&amp;x=1"',
    )
    assert.strictEqual(String(traceLink(id, undefined)), `<code>${id}</code>`)
    const table = String(
      checksTable("checks", [check("a")], {
        ...tableOpts,
        traceUrlTemplate: "https://tempo.example/trace/{traceId}",
      }),
    )
    assert.include(table, `<a href="https://tempo.example/trace/${id}" rel="noreferrer">`)
  })

  it("the setting takes http(s) templates with {traceId}, empty is off, anything else is refused at startup", () => {
    const config = (v: string) => resolveHubConfig({ "trace-url-template": v }, {})
    assert.strictEqual(
      config("http://localhost:16686/trace/{traceId}").traceUrlTemplate,
      "http://localhost:16686/trace/{traceId}",
    )
    const grafana = 'https://grafana.example/explore?left={"queries":[{"query":"{traceId}"}]}'
    assert.strictEqual(config(grafana).traceUrlTemplate, grafana)
    assert.strictEqual(config("").traceUrlTemplate, undefined)
    assert.strictEqual(
      resolveHubConfig({}, { FLEETCHECK_TRACE_URL_TEMPLATE: "" }).traceUrlTemplate,
      undefined,
    )
    const refused = (v: string, why: RegExp) => {
      try {
        config(v)
      } catch (e) {
        assert.instanceOf(e, HubConfigError)
        assert.match((e as HubConfigError).message, /^invalid hub settings: --trace-url-template: /)
        assert.match((e as HubConfigError).message, why)
        return
      }
      assert.fail(`${v} was accepted`)
    }
    for (const scheme of [
      "javascript:alert('{traceId}')",
      "ftp://traces.example/{traceId}",
      "file:///var/traces/{traceId}",
      "data:text/html,{traceId}",
      "//traces.example/{traceId}",
      "traces.example/{traceId}",
      "https:// traces.example/{traceId}",
      "https://traces.example/{traceId} x",
    ])
      refused(scheme, /an http:\/\/ or https:\/\/ URL/)
    refused("https://traces.example/trace/", /must contain \{traceId\}/)
  })
})
