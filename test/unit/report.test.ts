// Audit evidence: the report's numbers from run histories (pure), the hub route /api/v1/report, and
// `fleetcheck report` in md, csv and json against it.
import type { Server } from "node:http"
import { afterAll, assert, beforeAll, describe, it, vi } from "@effect/vitest"
import type { BackupCheck, LastRun } from "../../src/api/backupcheck.ts"
import { buildReport, parseSince, ReportSchema } from "../../src/api/report.ts"
import { renderCsv, renderMarkdown, runReport } from "../../src/cli/report.ts"
import { defaultHubConfig } from "../../src/hub/config.ts"
import { startHubHttp } from "../../src/hub/http.ts"
import { makeMetrics } from "../../src/observability/metrics/index.ts"
import { backupCheck, healthyMember, membersMap, unreachableMember } from "../support/fleet-members.ts"

const day = 86_400_000
const end = Date.parse("2026-12-01T00:00:00Z")
const iso = (t: number) => new Date(t).toISOString().replace(/\.000Z$/, "Z")

/** A daily run d days before `end`, restoring for `restore` seconds. */
const run = (d: number, result: "Succeeded" | "Failed", restore = 60, reason?: string): LastRun => {
  const start = end - d * day
  return {
    jobName: `orders-d${d}`,
    runID: `s${d}`,
    backupName: `orders-${d}`,
    startTime: iso(start),
    completionTime: iso(start + restore * 1000 + 5000),
    result,
    phases: [
      {
        name: "restore",
        result,
        reason: reason ?? (result === "Succeeded" ? "RestoreSucceeded" : "RestoreFailed"),
        startTime: iso(start),
        completionTime: iso(start + restore * 1000),
      },
    ],
    traceID: "a".repeat(32),
  }
}

const checkWith = (
  name: string,
  history: LastRun[],
  extra: Partial<BackupCheck["spec"]> = {},
): BackupCheck => {
  const c = backupCheck({ namespace: "shop", name })
  const lastSuccess = history.find((r) => r.result === "Succeeded")?.completionTime
  return {
    ...c,
    spec: { ...c.spec, historyLimit: 31, ...extra },
    status: {
      ...c.status,
      history,
      ...(history[0] ? { lastRun: history[0] } : {}),
      ...(lastSuccess ? { lastSuccessfulTime: lastSuccess } : { lastSuccessfulTime: undefined }),
    },
  } as BackupCheck
}

// orders: 10 daily runs (days 1..10), days 4 and 7 failed, day 2 took 20 minutes (objective 10m); one
// run 40 days ago lies outside a 30-day period.
const orders = checkWith(
  "orders",
  [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 40].map((d) =>
    run(d, d === 4 || d === 7 ? "Failed" : "Succeeded", d === 2 ? 1200 : 60 + d),
  ),
  { objectives: { maxRestoreDuration: "10m" } },
)
const idle = checkWith("idle", [])

describe("buildReport", () => {
  it("compares restore time with the objective in milliseconds, as RestoreTimeObjectiveMet does", () => {
    const base = run(3, "Succeeded", 600)
    const restore = base.phases![0]!
    // 600.4 s against 10m: over, though it rounds to 600 s.
    const over: LastRun = {
      ...base,
      phases: [
        { ...restore, completionTime: new Date(Date.parse(restore.startTime!) + 600_400).toISOString() },
      ],
    }
    const c = checkWith("edge", [over], { objectives: { maxRestoreDuration: "10m" } })
    const r = buildReport([{ cluster: "m1", check: c, verified: "True" }], end - 30 * day, end)
    assert.strictEqual(r.checks[0]!.runs[0]!.restoreSeconds, 600)
    assert.strictEqual(r.checks[0]!.restoreObjectiveMissed, 1)
  })

  it("counts the period's runs, pass rate, durations against the objective, staleness and gaps", () => {
    const r = buildReport(
      [
        { cluster: "m1", check: orders, verified: "True" },
        { cluster: "m1", check: idle, verified: "Unknown" },
      ],
      end - 30 * day,
      end,
    )
    assert.isTrue(ReportSchema.safeParse(r).success)
    const o = r.checks.find((c) => c.name === "orders")!
    assert.strictEqual(o.runs.length, 10)
    assert.deepStrictEqual([o.passed, o.failed, o.passRate], [8, 2, 0.8])
    assert.deepStrictEqual(o.restoreSeconds, { min: 61, median: 67, max: 1200 })
    assert.strictEqual(o.restoreObjectiveMissed, 1)
    assert.strictEqual(o.lastSuccessfulTime, iso(end - day + 66_000))
    assert.strictEqual(o.stalenessSeconds, 86_400 - 66)
    // From the period's start (day 30) to the first success in it (day 10): 20 days.
    assert.strictEqual(o.longestGapSeconds, 20 * 86_400 + 75)
    assert.isFalse(o.historyTruncated)
    assert.deepStrictEqual(o.runs[0], {
      runID: "s1",
      backupName: "orders-1",
      startTime: iso(end - day),
      completionTime: iso(end - day + 66_000),
      result: "Succeeded",
      reason: "RestoreSucceeded",
      restoreSeconds: 61,
      traceID: "a".repeat(32),
    })
    const i = r.checks.find((c) => c.name === "idle")!
    assert.deepStrictEqual([i.runs.length, i.passRate, i.longestGapSeconds], [0, null, 30 * 86_400])
    assert.deepStrictEqual(r.totals, {
      checks: 2,
      runs: 10,
      passed: 8,
      failed: 2,
      passRate: 0.8,
      restoreObjectiveMissed: 1,
      dataAgeObjectiveMissed: 0,
      checksWithoutSuccess: 1,
    })
    assert.deepStrictEqual(
      r.controls.map((c) => c.id),
      ["ISO/IEC 27001:2022 A.8.13", "SOC 2 A1.2", "NIST SP 800-53 CP-9(2)", "DORA Art. 12"],
    )
  })

  it("never throws on a cached object that lacks what it should have", () => {
    const odd = { ...idle, spec: {}, status: { history: "not a list" } } as unknown as BackupCheck
    const r = buildReport([{ cluster: "m1", check: odd, verified: "Unknown" }], end - day, end)
    assert.deepStrictEqual([r.checks[0]!.backup, r.checks[0]!.runs.length], ["", 0])
  })

  it("says when the history limit may have dropped runs of the period", () => {
    const full = checkWith(
      "full",
      [1, 2, 3].map((d) => run(d, "Succeeded")),
      { historyLimit: 3 },
    )
    const r = buildReport([{ cluster: "m1", check: full, verified: "True" }], end - 30 * day, end)
    assert.isTrue(r.checks[0]!.historyTruncated)
    assert.isFalse(r.checks[0]!.historyComplete)
    assert.include(renderMarkdown(r), "| no (history limit) |")
  })

  it("counts runs whose data was older than maxDataAge, as DataAgeObjectiveMet measures it", () => {
    /** A run d days back whose validation saw data `age` hours old when the run completed. */
    const aged = (d: number, result: "Succeeded" | "Failed", age?: number): LastRun => {
      const r = run(d, result)
      const done = Date.parse(r.completionTime!)
      return {
        ...r,
        phases: [
          ...r.phases!,
          {
            name: "validation",
            result,
            reason: result === "Succeeded" ? "ValidationSucceeded" : "ValidationFailed",
            startTime: r.phases![0]!.completionTime,
            completionTime: r.completionTime,
            ...(age !== undefined ? { dataTimestamp: iso(done - age * 3_600_000) } : {}),
          },
        ],
      }
    }
    const fresh = checkWith(
      "fresh",
      // day 1: 2 h old (met); day 2: 30 h old (missed); day 3: 30 h old but failed (proves no age);
      // day 4: no dataTimestamp (not measured); day 5: exactly 26 h (met: at most the objective).
      [
        aged(1, "Succeeded", 2),
        aged(2, "Succeeded", 30),
        aged(3, "Failed", 30),
        aged(4, "Succeeded"),
        aged(5, "Succeeded", 26),
      ],
      { objectives: { maxDataAge: "26h" } },
    )
    const r = buildReport(
      [
        { cluster: "m1", check: fresh, verified: "True" },
        { cluster: "m1", check: orders, verified: "True" },
      ],
      end - 30 * day,
      end,
    )
    assert.isTrue(ReportSchema.safeParse(r).success)
    const f = r.checks.find((c) => c.name === "fresh")!
    assert.strictEqual(f.maxDataAge, "26h")
    assert.strictEqual(f.dataAgeObjectiveMissed, 1)
    assert.deepStrictEqual(
      f.runs.map((x) => x.dataAgeSeconds),
      [2 * 3600, 30 * 3600, 30 * 3600, undefined, 26 * 3600],
    )
    assert.strictEqual(f.runs[1]!.dataTimestamp, iso(Date.parse(f.runs[1]!.completionTime!) - 30 * 3_600_000))
    // orders sets no maxDataAge: nothing missed, no objective shown.
    const o = r.checks.find((c) => c.name === "orders")!
    assert.deepStrictEqual([o.maxDataAge, o.dataAgeObjectiveMissed], [undefined, 0])
    assert.strictEqual(r.totals.dataAgeObjectiveMissed, 1)
    const md = renderMarkdown(r)
    assert.include(md, "1 verified runs whose data was older than their age objective")
    assert.match(md, /\| fresh \| fresh-backup \|[^\n]*\| {2}\| 0 \| 26h \| 1 \|/)
    const csv = renderCsv(r).trim().split("\n")
    const day2 = csv.find((l) => l.includes(",s2,") && l.startsWith("m1,shop,fresh,"))!
    assert.isTrue(day2.endsWith(`,${f.runs[1]!.dataTimestamp},${30 * 3600},26h`), day2)
  })

  it("measures gaps and history from the check's creation when it was created in the period", () => {
    const created = (c: BackupCheck, t: number): BackupCheck => ({
      ...c,
      metadata: { ...c.metadata, creationTimestamp: iso(t) },
    })
    // Created two minutes before the end, no run yet: a 2-minute gap, not 30 days.
    const young = created(checkWith("young", []), end - 120_000)
    // Created 5 days back; successes on days 3 and 1: the longest gap is creation → day 3 (2 days).
    const newer = created(
      checkWith(
        "newer",
        [1, 3].map((d) => run(d, "Succeeded", 60)),
      ),
      end - 5 * day,
    )
    // Created long before the period: the period's start still bounds the gap, the history is complete.
    const old = created(orders, end - 100 * day)
    const r = buildReport(
      [young, newer, old].map((check) => ({ cluster: "m1", check, verified: "True" as const })),
      end - 30 * day,
      end,
    )
    const by = (name: string) => r.checks.find((c) => c.name === name)!
    assert.deepStrictEqual(
      [by("young").longestGapSeconds, by("young").historyTruncated, by("young").historyComplete],
      [120, false, false],
    )
    assert.strictEqual(by("young").creationTimestamp, iso(end - 120_000))
    assert.deepStrictEqual(
      [by("newer").longestGapSeconds, by("newer").historyComplete],
      [2 * 86_400 + 65, false],
    )
    assert.deepStrictEqual(
      [by("orders").longestGapSeconds, by("orders").historyComplete],
      [20 * 86_400 + 75, true],
    )
    const md = renderMarkdown(r)
    assert.include(md, `| 2m0s | no (check created ${iso(end - 120_000)}, after the period start) |`)
    assert.match(md, /\| orders \|[^\n]*\| yes \|\n/)
  })

  it("parses --since as days, Go durations or a time, within a year", () => {
    assert.deepStrictEqual(parseSince("30d", end), { start: end - 30 * day })
    assert.deepStrictEqual(parseSince("72h", end), { start: end - 3 * day })
    assert.deepStrictEqual(parseSince("2026-11-01T00:00:00Z", end), {
      start: Date.parse("2026-11-01T00:00:00Z"),
    })
    for (const bad of ["yesterday", "-3d", "400d", "2027-01-01T00:00:00Z", ""])
      assert.isTrue("error" in parseSince(bad, end), bad)
  })

  it("renders markdown with the controls, and csv with one row per run, defusing formulas", () => {
    const evil = checkWith("evil", [run(1, "Succeeded")])
    const r = buildReport(
      [
        { cluster: "m1", check: orders, verified: "True" },
        {
          cluster: "m1",
          check: { ...evil, spec: { ...evil.spec, backup: { name: '=HYPERLINK("x"),|a' } } },
          verified: "True",
        },
      ],
      end - 30 * day,
      end,
    )
    const md = renderMarkdown(r)
    assert.include(md, "- ISO/IEC 27001:2022 A.8.13:")
    assert.include(md, "11 runs: 9 passed, 2 failed (pass rate 81.8%)")
    assert.match(
      md,
      /\| m1 \| shop \| orders \| orders-backup \| True \| 10 \| 8 \| 2 \| 80\.0% \| 1m1s \/ 1m7s \/ 20m0s \| 10m \| 1 \|/,
    )
    assert.include(md, '=HYPERLINK("x"),\\|a')
    const csv = renderCsv(r).trim().split("\n")
    assert.strictEqual(csv.length, 1 + 11)
    assert.strictEqual(
      csv[0],
      "cluster,namespace,check,backup,verified_now,run_id,run_backup,start_time,completion_time,result,reason,restore_seconds,max_restore_duration,trace_id,data_timestamp,data_age_seconds,max_data_age",
    )
    assert.include(csv[1]!, `"'=HYPERLINK(""x""),|a"`)
  })
})

describe("/api/v1/report and fleetcheck report", () => {
  let server: Server | undefined
  let hub = ""
  beforeAll(async () => {
    const m1 = healthyMember("m1", [])
    const down = unreachableMember("down", [])
    const members = membersMap([
      { ...m1, checks: () => [orders, idle] },
      { ...down, checks: () => [checkWith("far", [run(1, "Succeeded")])] },
    ])
    const s = await startHubHttp({
      config: defaultHubConfig,
      host: "127.0.0.1",
      port: 0,
      members,
      fleetChecks: new Map(),
      metrics: makeMetrics(),
      availability: () => ({ answers: true }),
      isLeader: () => true,
      identity: "hub-test",
      access: undefined,
      serves: "all",
      tls: undefined,
    })
    server = s.server
    hub = `http://127.0.0.1:${s.port}`
  })
  afterAll(() => new Promise<void>((r) => (server ? server.close(() => r()) : r())))

  const capture = async (args: string[]) => {
    let out = ""
    let err = ""
    const o = vi.spyOn(process.stdout, "write").mockImplementation((s) => {
      out += String(s)
      return true
    })
    const e = vi.spyOn(process.stderr, "write").mockImplementation((s) => {
      err += String(s)
      return true
    })
    try {
      return { code: await runReport(args), out, err }
    } finally {
      o.mockRestore()
      e.mockRestore()
    }
  }

  it("serves the report; an unreachable cluster's checks are Unknown now, their history still counts", async () => {
    const res = await fetch(`${hub}/api/v1/report?since=30d`)
    assert.strictEqual(res.status, 200)
    const r = ReportSchema.parse(await res.json())
    assert.deepStrictEqual(
      r.checks.map((c) => `${c.cluster}/${c.name}/${c.verified}/${c.runs.length}`),
      ["down/far/Unknown/1", "m1/idle/True/0", "m1/orders/True/10"],
    )
    const one = ReportSchema.parse(await (await fetch(`${hub}/api/v1/report?since=30d&cluster=down`)).json())
    assert.strictEqual(one.checks.length, 1)
    for (const [query, message] of [
      ["", /since is required/],
      ["?since=soon", /since must be days/],
      ["?since=30d&limit=1", /unknown query parameter "limit"/],
    ] as const) {
      const bad = await fetch(`${hub}/api/v1/report${query}`)
      assert.strictEqual(bad.status, 400)
      assert.match(((await bad.json()) as { message: string }).message, message)
    }
  })

  it("writes md, csv and json, and exits 2 on bad arguments and 3 when the hub cannot answer", async () => {
    const md = await capture(["--hub", hub, "--since", "30d"])
    assert.strictEqual(md.code, 0)
    assert.include(md.out, "# Backup restore verification report")
    const csv = await capture(["--hub", hub, "--since", "30d", "--cluster", "m1", "--format", "csv"])
    assert.strictEqual(csv.out.trim().split("\n").length, 1 + 10 + 1) // orders' runs, idle's empty row
    const json = await capture(["--hub", hub, "--since", "30d", "--format", "json"])
    assert.strictEqual(ReportSchema.parse(JSON.parse(json.out)).totals.runs, 11)
    assert.strictEqual((await capture(["--hub", hub])).code, 2)
    assert.strictEqual((await capture(["--hub", hub, "--since", "30d", "--format", "xml"])).code, 2)
    const bad = await capture(["--hub", hub, "--since", "soon"])
    assert.strictEqual(bad.code, 3)
    assert.match(bad.err, /since must be days/)
    assert.strictEqual((await capture(["--hub", "http://127.0.0.1:9", "--since", "30d"])).code, 3)
  })
})
