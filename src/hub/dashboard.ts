// The dashboard: one server-rendered page, readable without JavaScript. Clusters at the top, then every
// check with failing ones first, each with its reason, last success and trace id. Everything shown is
// escaped: check names, messages and labels come from the members and are untrusted.
import { type FleetView, isClusterHealthy } from "../api/fleet.ts"

const esc = (s: string | undefined): string =>
  (s ?? "").replace(
    /[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" })[c] ?? c,
  )

const badge = (status: string) => {
  const cls = status === "True" ? "ok" : status === "False" ? "bad" : "unknown"
  const text = status === "True" ? "Verified" : status === "False" ? "Failing" : "Unknown"
  return `<span class="badge ${cls}">${text}</span>`
}

/** A cluster condition as a badge that names it ("Ready", "Not ready"), with the raw status on hover. */
const conditionBadge = (status: string | undefined, yes: string, no: string) => {
  const cls = status === "True" ? "ok" : status === "False" ? "bad" : "unknown"
  const text = status === "True" ? yes : status === "False" ? no : "Unknown"
  return `<span class="badge ${cls}" title="${esc(status ?? "Unknown")}">${text}</span>`
}

/**
 * Kubernetes times (RFC 3339, UTC) as "2026-11-29 03:00:12 UTC", machine-readable in <time>; a narrow
 * column wraps between the date and the time, never inside either.
 */
const time = (iso: string | undefined, none = "") => {
  if (!iso) return none
  const m = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?Z$/.exec(iso)
  return m
    ? `<time datetime="${esc(iso)}"><span class="nowrap">${m[1]}</span> <span class="nowrap">${m[2]} UTC</span></time>`
    : `<time datetime="${esc(iso)}">${esc(iso)}</time>`
}

const plural = (n: number, word: string) => `${n} ${word}${n === 1 ? "" : "s"}`

const condition = (conditions: FleetView["clusters"][number]["conditions"], type: string) =>
  conditions.find((c) => c.type === type)

/** What a hub that cannot answer for the fleet shows instead: why, and never a green title. */
export const renderUnavailable = (message: string, hub: string): string => `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="5">
<title>fleetcheck: not available</title>
<style>body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1b1f24; }</style>
</head>
<body>
<h1>fleetcheck</h1>
<p><strong>This hub cannot show the fleet right now.</strong> ${esc(message)}</p>
<p>Answered by ${esc(hub)}; this page reloads every 5 seconds.</p>
</body>
</html>
`

const title = (view: FleetView, failing: number, unknown: number) =>
  failing > 0
    ? `${failing} failing`
    : unknown > 0
      ? `${unknown} unknown`
      : view.checks.length === 0
        ? "no checks"
        : view.clusters.every(isClusterHealthy)
          ? "all verified"
          : "clusters need attention"

export const renderDashboard = (view: FleetView, info: { leader: boolean; hub: string }): string => {
  const failing = view.checks.filter((c) => c.status === "False").length
  const unknown = view.checks.filter((c) => c.status === "Unknown").length
  const clusters = view.clusters
    .map((c) => {
      const ready = condition(c.conditions, "Ready")
      const connected = condition(c.conditions, "Connected")
      const creds = condition(c.conditions, "CredentialsValid")
      return `<tr>
  <td><strong>${esc(c.name)}</strong><div class="muted">${esc(
    Object.entries(c.labels)
      .map(([k, v]) => `${k}=${v}`)
      .join(", "),
  )}</div></td>
  <td>${conditionBadge(ready?.status, "Ready", "Not ready")}<div class="muted">${esc(ready?.reason)}</div></td>
  <td>${conditionBadge(connected?.status, "Connected", "Disconnected")}<div class="muted">${esc(connected?.message)}</div></td>
  <td>${conditionBadge(creds?.status, "Valid", "Invalid")}<div class="muted">${esc(creds?.reason)}</div></td>
  <td class="num">${c.counts.verified} / ${c.counts.total}</td>
  <td class="num${c.counts.failed > 0 ? " bad-text" : ""}">${c.counts.failed}</td>
  <td class="num">${c.counts.unknown}</td>
  <td>${esc(c.kubernetesVersion)}</td>
</tr>`
    })
    .join("\n")
  const checks = view.checks
    .map(
      (c) => `<tr class="${c.status === "False" ? "row-bad" : c.status === "Unknown" ? "row-unknown" : ""}">
  <td>${badge(c.status)}</td>
  <td class="nowrap">${esc(c.cluster)}</td>
  <td class="nowrap">${esc(c.namespace)}/<strong>${esc(c.name)}</strong></td>
  <td>${esc(c.reason)}<div class="msg">${esc(c.message)}</div></td>
  <td>${time(c.lastSuccessfulTime, '<span class="muted">never</span>')}</td>
  <td>${time(c.nextRunTime, '<span class="muted">—</span>')}</td>
  <td class="nowrap"><code>${esc(c.traceID) || '<span class="muted">—</span>'}</code></td>
</tr>`,
    )
    .join("\n")
  return `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="refresh" content="10">
<title>fleetcheck: ${title(view, failing, unknown)}</title>
<style>
  body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5rem; color: #1b1f24; background: #fafbfc; }
  h1 { font-size: 1.4rem; margin: 0 0 .2rem; } h2 { font-size: 1.1rem; margin-top: 1.6rem; }
  table { border-collapse: collapse; width: 100%; background: white; }
  th, td { text-align: left; padding: .45rem .6rem; border-bottom: 1px solid #e3e6ea; vertical-align: top; }
  th { background: #f0f2f5; font-weight: 600; }
  .num { text-align: right; font-variant-numeric: tabular-nums; }
  .badge { display: inline-block; padding: .05rem .45rem; border-radius: .6rem; font-size: .8rem; font-weight: 600; }
  .ok { background: #dcf5e3; color: #145c2c; } .bad { background: #fde0e0; color: #8a1010; } .unknown { background: #eceff3; color: #4a5563; }
  .row-bad { background: #fff6f6; } .row-unknown { background: #f8f9fb; }
  .muted { color: #6a737d; font-size: .8rem; } .msg { color: #444; font-size: .85rem; min-width: 16rem; max-width: 40rem; overflow-wrap: anywhere; }
  .scroll { overflow-x: auto; }
  code { font-size: .8rem; } .nowrap { white-space: nowrap; } .bad-text { color: #8a1010; font-weight: 600; }
  .summary { margin: .3rem 0 1rem; }
</style>
</head>
<body>
<h1>fleetcheck</h1>
<p class="summary">${plural(view.clusters.length, "cluster")} · ${plural(view.checks.length, "check")} · <strong${failing > 0 ? ' class="bad-text"' : ""}>${failing} failing</strong> · ${unknown} unknown · generated ${time(view.generatedAt)} by ${esc(info.hub)}${info.leader ? " (leader)" : " (standby)"}</p>
<nav class="filters"><a href="./">All checks</a> · <a href="./?failing=true">Failing or unknown only</a></nav>
<h2 id="clusters">Clusters</h2>
<div class="scroll"><table aria-labelledby="clusters">
<thead><tr><th>Cluster</th><th>Ready</th><th>Connected</th><th>Credentials</th><th class="num">Verified</th><th class="num">Failing</th><th class="num">Unknown</th><th>Version</th></tr></thead>
<tbody>
${clusters || '<tr><td colspan="8" class="muted">No member clusters registered.</td></tr>'}
</tbody>
</table></div>
<h2 id="checks">Backup checks <span class="muted">(failing first)</span></h2>
<div class="scroll"><table aria-labelledby="checks">
<thead><tr><th>Verified</th><th>Cluster</th><th>Check</th><th>Reason</th><th>Last success</th><th>Next run</th><th>Trace id</th></tr></thead>
<tbody>
${checks || '<tr><td colspan="7" class="muted">No BackupChecks yet.</td></tr>'}
</tbody>
</table></div>
</body>
</html>
`
}
