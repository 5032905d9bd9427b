// The check page of the dashboard renders the run history (status.history) and the start window.
import { assert, describe, it } from "@effect/vitest"
import { type BackupCheck, parseBackupCheck } from "../../src/api/backupcheck.ts"
import type { CheckView, ClusterView } from "../../src/api/fleet.ts"
import { renderCheckPage } from "../../src/hub/dashboard/detail.ts"

const check = (status: unknown): BackupCheck => {
  const parsed = parseBackupCheck({
    apiVersion: "fleetcheck.io/v1alpha1",
    kind: "BackupCheck",
    metadata: { name: "orders", namespace: "shop", uid: "u1", generation: 1 },
    spec: {
      backup: { name: "orders-2026-11-29" },
      jobTemplate: { spec: { template: { spec: { containers: [{ name: "restore", image: "r:1" }] } } } },
      schedule: "0 3 * * *",
      startWindow: "2h",
      timeout: "30m",
      objectives: { maxRestoreDuration: "10m", maxDataAge: "26h" },
    },
    status,
  })
  if (!parsed.success) throw new Error(parsed.error)
  assert.deepStrictEqual(parsed.warnings, [])
  return parsed.data
}
const view: CheckView = {
  cluster: "m1",
  namespace: "shop",
  name: "orders",
  status: "False",
  reason: "RestoreFailed",
  message: "",
}
const cluster: ClusterView = {
  name: "m1",
  labels: {},
  conditions: [],
  counts: { total: 1, verified: 0, failed: 1, unknown: 0 },
}
const opts = { leader: true, hub: "h", pageSize: 50, traceUrlTemplate: undefined }
const run = (i: number, result: "Succeeded" | "Failed", reason: string) => ({
  jobName: `orders-s${i}`,
  runID: `s2026112${i}t0300z`,
  backupName: `orders-2026-11-2${i}`,
  startTime: `2026-11-2${i}T03:10:00Z`,
  completionTime: `2026-11-2${i}T03:12:05Z`,
  result,
  phases: [{ name: "restore", result, reason, startTime: `2026-11-2${i}T03:10:00Z`, message: "m" }],
  traceID: `${i}`.repeat(32),
})

describe("check page", () => {
  it("lists the run history newest first, with phases and durations", () => {
    const history = [run(8, "Failed", "RunSuperseded"), run(7, "Succeeded", "RestoreSucceeded")]
    const text = renderCheckPage(view, check({ lastRun: history[0], history }), cluster, opts)
    const section = text.slice(text.indexOf('id="history"'), text.indexOf('id="conditions"'))
    const runs = [...section.matchAll(/<td class="nowrap" data-label="Run">(s\d+t\d+z)<\/td>/g)].map(
      (m) => m[1],
    )
    assert.deepStrictEqual(runs, ["s20261128t0300z", "s20261127t0300z"])
    assert.include(section, "RunSuperseded")
    assert.include(section, "orders-2026-11-27")
    assert.include(section, "2m5s")
    assert.include(text, "<dt>Start window</dt><dd>2h</dd>")
    assert.include(text, "<dt>Run history kept</dt><dd>31 runs</dd>")
    assert.include(text, "<dt>Objectives</dt><dd>restore within 10m, data at most 26h old</dd>")
  })

  it("shows the objectives as the fleet view judged them, with the measured values", () => {
    const judged: CheckView = {
      ...view,
      objectives: {
        restoreTime: "False",
        dataAge: "True",
        restoreDurationSeconds: 725,
        dataAgeSeconds: 3600,
      },
    }
    const text = renderCheckPage(judged, check(undefined), cluster, opts)
    assert.include(text, "restore time missed (12m5s)")
    assert.include(text, "data age met (1h0m0s)")
  })

  it("names the FleetBackupCheck that placed the check and, for a drill check, the cluster whose backup it restores", () => {
    const drill: CheckView = {
      ...view,
      cluster: "m2",
      name: "orders-drill-m1-r7",
      fleetBackupCheck: "fleetcheck-system/orders",
      drillSource: "m1",
    }
    const text = renderCheckPage(drill, check(undefined), { ...cluster, name: "m2" }, opts)
    assert.include(
      text,
      '<dt>Placed by</dt><dd>FleetBackupCheck <a class="full" href="./#fleet-checks">fleetcheck-system/orders</a></dd>',
    )
    assert.include(
      text,
      '<dt>Drill</dt><dd>restores the backup of cluster <a class="full" href="./cluster?name=m1">m1</a> here, in m2</dd>',
    )
    const placed = renderCheckPage(
      { ...view, fleetBackupCheck: "fleetcheck-system/orders" },
      check(undefined),
      cluster,
      opts,
    )
    assert.include(placed, "<dt>Placed by</dt>")
    assert.notInclude(placed, "<dt>Drill</dt>")
    const own = renderCheckPage(view, check(undefined), cluster, opts)
    assert.notInclude(own, "Placed by")
  })

  it("says when no run has finished", () => {
    assert.include(renderCheckPage(view, check(undefined), cluster, opts), "No finished run yet.")
  })
})

describe("check page: sandbox", () => {
  it("shows each run's sandbox and its cleanup state, with the reason of a failed cleanup", () => {
    const sandboxed = (i: number, sandbox: Record<string, string>) => ({
      ...run(i, "Succeeded", "RestoreSucceeded"),
      sandbox,
    })
    const history = [
      sandboxed(8, {
        namespace: "fcsb-orders-s8-0123456789",
        cleanup: "Pending",
        deleteAfter: "2026-11-28T03:42:05Z",
      }),
      sandboxed(7, {
        namespace: "fcsb-orders-s7-0123456789",
        cleanup: "Failed",
        reason: "Forbidden",
        message: "namespaces is forbidden",
      }),
      sandboxed(6, { namespace: "fcsb-orders-s6-0123456789", cleanup: "Deleted" }),
    ]
    const text = renderCheckPage(view, check({ lastRun: history[0], history }), cluster, opts)
    const section = text.slice(text.indexOf('id="history"'), text.indexOf('id="conditions"'))
    assert.include(section, "<th>Sandbox</th>")
    assert.include(section, "fcsb-orders-s8-0123456789")
    assert.match(section, /Pending until <time[^>]*datetime="2026-11-28T03:42:05Z"/)
    assert.include(section, 'Failed (Forbidden: <span class="full">namespaces is forbidden</span>)')
    assert.match(section, /fcsb-orders-s6-0123456789<\/code><\/div><div class="nowrap">Deleted<\/div>/)
    const lastRun = text.slice(text.indexOf('id="last-run"'), text.indexOf('id="history"'))
    assert.include(lastRun, "<dt>Sandbox</dt>")
    const plain = renderCheckPage(
      view,
      check({
        lastRun: run(8, "Succeeded", "RestoreSucceeded"),
        history: [run(8, "Succeeded", "RestoreSucceeded")],
      }),
      cluster,
      opts,
    )
    assert.notInclude(plain, "Sandbox")
  })
})

describe("checks table: objectives", () => {
  it("gives each objective a column of its own when a check has objectives, and none otherwise", async () => {
    const { checksTable } = await import("../../src/hub/dashboard/layout.ts")
    const tableOpts = { withCluster: true, traceUrlTemplate: undefined, empty: "none" }
    const judged: CheckView = {
      ...view,
      objectives: {
        restoreTime: "False",
        dataAge: "True",
        restoreDurationSeconds: 725,
        dataAgeSeconds: 3600,
      },
    }
    const plainCheck: CheckView = { ...view, name: "plain" }
    const text = String(checksTable("checks", [judged, plainCheck], tableOpts))
    assert.include(text, "<th>Reason</th><th>Restore<br>time</th><th>Data<br>age</th><th>Last success</th>")
    const [, , judgedRow, plainRow] = text.split("<tr") // before the table, the header, the rows
    assert.match(judgedRow ?? "", /<span class="bad-text">missed<\/span><div class="muted">12m5s<\/div>/)
    assert.match(judgedRow ?? "", /<span class="">met<\/span><div class="muted">1h0m0s<\/div>/)
    assert.notInclude(judgedRow ?? "", "restore time missed") // no longer under the reason
    assert.strictEqual((plainRow?.match(/<span class="muted">—<\/span>/g) ?? []).length, 4) // 2 objectives, next run, trace
    const none = String(checksTable("checks", [plainCheck], tableOpts))
    assert.notInclude(none, "Restore<br>time")
  })
})
