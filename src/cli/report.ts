// `fleetcheck report`: audit evidence for a period, read from the hub's /api/v1/report: every check's
// runs, pass rate, restore durations and data ages against the objectives, last success, staleness, the
// longest gap and whether the history covers the period, under a header naming the controls it is
// evidence for. Markdown, CSV or JSON.
import { parseArgs } from "node:util"
import { type Report, ReportSchema } from "../api/report.ts"
import { formatDuration } from "../api/syntax.ts"
import { hubConnection, hubConnectionOptions, hubConnectionUsage, hubGet } from "./hub-request.ts"
import { credentialsFor, refusalMessage, terminalSafe } from "./status.ts"

export const reportUsage = `Usage: fleetcheck report --since D [--hub URL] [--hub-ca-file F] [--kubeconfig F] [--context C] [--cluster NAME] [--format md|csv|json]

Audit evidence for a period, from the hub's /api/v1/report: every BackupCheck's runs (from its
status.history), pass rate, restore durations against spec.objectives.maxRestoreDuration, the
restored data's age against spec.objectives.maxDataAge, last success, staleness, the longest gap
without a successful verification (since the check's creation when it was created in the period),
and whether its history covers the whole period.
  --since D        start of the period: days (30d), a Go duration (72h) or an RFC 3339 time
  --hub URL        the hub (default $FLEETCHECK_HUB_URL, else http://127.0.0.1:8080); a hub with
                   --secure-serving is https://
${hubConnectionUsage}
  --kubeconfig F   whose bearer token to send to a hub with --secure-serving (as fleetcheck status)
  --context NAME   the kubeconfig context to use (default its current context)
  --cluster NAME   one member only
  --format F       md (default), csv or json

Exit codes: 0 the report was written; 2 bad arguments; 3 the hub could not answer.
`

const pct = (rate: number | null) => (rate === null ? "n/a" : `${(rate * 100).toFixed(1)}%`)
const dur = (s: number | undefined) => (s === undefined ? "" : formatDuration(s * 1000))
/** Markdown table cells: member-controlled text loses pipes and line breaks. */
const cell = (s: string) => terminalSafe(s).replace(/\|/g, "\\|").replace(/\s+/g, " ")

/** "yes", or "no" with why the runs shown may not be all of the period's. */
export const historyCompleteText = (r: Report, c: Report["checks"][number]): string => {
  if (c.historyComplete) return "yes"
  const created = c.creationTimestamp
  const why = [
    c.historyTruncated ? "history limit" : "",
    created !== undefined && Date.parse(created) > Date.parse(r.since)
      ? `check created ${cell(created)}, after the period start`
      : "",
  ].filter((w) => w !== "")
  return why.length === 0 ? "no" : `no (${why.join("; ")})`
}

export const renderMarkdown = (r: Report): string => {
  const lines = [
    "# Backup restore verification report",
    "",
    `Period: ${r.since} to ${r.until} (generated ${r.generatedAt}).`,
    "",
    "Evidence for:",
    ...r.controls.map((c) => `- ${c.id}: ${c.title}`),
    "",
    `${r.totals.checks} checks, ${r.totals.runs} runs: ${r.totals.passed} passed, ${r.totals.failed} failed (pass rate ${pct(r.totals.passRate)}); ${r.totals.restoreObjectiveMissed} restores over their time objective; ${r.totals.dataAgeObjectiveMissed} verified runs whose data was older than their age objective; ${r.totals.checksWithoutSuccess} checks without a successful run in the period.`,
    "",
    "| Cluster | Namespace | Check | Backup | Verified now | Runs | Passed | Failed | Pass rate | Restore min / median / max | Restore objective | Over restore objective | Data-age objective | Over data-age objective | Last success | Staleness | Longest gap | History complete |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ...r.checks.map(
      (c) =>
        `| ${cell(c.cluster)} | ${cell(c.namespace)} | ${cell(c.name)} | ${cell(c.backup)} | ${c.verified} | ${c.runs.length} | ${c.passed} | ${c.failed} | ${pct(c.passRate)} | ${c.restoreSeconds ? `${dur(c.restoreSeconds.min)} / ${dur(c.restoreSeconds.median)} / ${dur(c.restoreSeconds.max)}` : ""} | ${c.maxRestoreDuration ?? ""} | ${c.restoreObjectiveMissed} | ${c.maxDataAge ?? ""} | ${c.dataAgeObjectiveMissed} | ${c.lastSuccessfulTime ?? "never"} | ${dur(c.stalenessSeconds)} | ${dur(c.longestGapSeconds)} | ${historyCompleteText(r, c)} |`,
    ),
    "",
  ]
  return `${lines.join("\n")}\n`
}

const csvCell = (v: string | number | boolean | null | undefined) => {
  const s = v === undefined || v === null ? "" : String(v)
  // Quote everything that could split a row, and defuse formulas for spreadsheet readers.
  const safe = /^[=+\-@]/.test(s) ? `'${s}` : s
  return /[",\n\r]/.test(safe) ? `"${safe.replace(/"/g, '""')}"` : safe
}

/**
 * One row per run (the evidence), with its check's columns; a check without runs has one empty row. The
 * data-age columns come last, so the earlier columns keep their positions.
 */
export const renderCsv = (r: Report): string => {
  const header = [
    "cluster",
    "namespace",
    "check",
    "backup",
    "verified_now",
    "run_id",
    "run_backup",
    "start_time",
    "completion_time",
    "result",
    "reason",
    "restore_seconds",
    "max_restore_duration",
    "trace_id",
    "data_timestamp",
    "data_age_seconds",
    "max_data_age",
  ]
  const rows = r.checks.flatMap((c) => {
    const base = [c.cluster, c.namespace, c.name, c.backup, c.verified]
    const tail = (run?: Report["checks"][number]["runs"][number]) => [
      run?.runID,
      run?.backupName,
      run?.startTime,
      run?.completionTime,
      run?.result,
      run?.reason,
      run?.restoreSeconds,
      c.maxRestoreDuration,
      run?.traceID,
      run?.dataTimestamp,
      run?.dataAgeSeconds,
      c.maxDataAge,
    ]
    return c.runs.length === 0 ? [[...base, ...tail()]] : c.runs.map((run) => [...base, ...tail(run)])
  })
  return `${[header, ...rows].map((row) => row.map(csvCell).join(",")).join("\n")}\n`
}

export const runReport = async (args: ReadonlyArray<string>): Promise<number> => {
  if (args.includes("--help") || args.includes("-h")) {
    process.stdout.write(reportUsage)
    return 0
  }
  const parsed = (() => {
    try {
      return parseArgs({
        args: [...args],
        options: {
          hub: { type: "string", default: process.env.FLEETCHECK_HUB_URL ?? "http://127.0.0.1:8080" },
          ...hubConnectionOptions,
          since: { type: "string" },
          kubeconfig: { type: "string" },
          context: { type: "string" },
          cluster: { type: "string" },
          format: { type: "string", default: "md" },
        },
        strict: true,
      })
    } catch (e) {
      return { error: e instanceof Error ? e.message : String(e) }
    }
  })()
  const usageError = (why: string) => {
    process.stderr.write(`fleetcheck report: ${why}\n\n${reportUsage}`)
    return 2
  }
  if ("error" in parsed) return usageError(parsed.error)
  const { values } = parsed
  if (!values.since) return usageError("--since is required")
  if (!["md", "csv", "json"].includes(values.format)) return usageError("--format must be md, csv or json")
  const url = new URL("/api/v1/report", values.hub)
  url.searchParams.set("since", values.since)
  if (values.cluster) url.searchParams.set("cluster", values.cluster)
  const cannotRead = (why: string) => {
    process.stderr.write(`fleetcheck report: cannot read ${url.href}: ${terminalSafe(why)}\n`)
    return 3
  }
  const connection = hubConnection(url, {
    ...values,
    "hub-ca-file": values["hub-ca-file"] ?? process.env.FLEETCHECK_HUB_CA_FILE,
  })
  if ("error" in connection) return usageError(connection.error)
  const credentials = await credentialsFor(url, connection, values.kubeconfig, values.context)
  if ("error" in credentials) return cannotRead(credentials.error)
  const got = await hubGet(url, connection, credentials.authorization, 30_000).finally(connection.close)
  if ("error" in got) return cannotRead(got.error)
  const answer = { ...got, ok: got.status >= 200 && got.status < 300 }
  let json: unknown
  try {
    json = JSON.parse(answer.text)
  } catch {
    return cannotRead(`HTTP ${answer.status}, not JSON`)
  }
  if (!answer.ok) {
    const why = (json as { message?: unknown } | null)?.message
    if (answer.status === 401 || answer.status === 403)
      return cannotRead(
        refusalMessage(answer.status, typeof why === "string" ? why : "refused", credentials, "report"),
      )
    return cannotRead(`HTTP ${answer.status}${typeof why === "string" ? `: ${why}` : ""}`)
  }
  const report = ReportSchema.safeParse(json)
  if (!report.success) return cannotRead(`unexpected answer: ${report.error.issues[0]?.message}`)
  const out =
    values.format === "json"
      ? `${JSON.stringify(report.data, null, 2)}\n`
      : values.format === "csv"
        ? renderCsv(report.data)
        : renderMarkdown(report.data)
  process.stdout.write(out)
  return 0
}
