// The dashboard's shell and the pieces every page shares: one inline stylesheet (allowed by its hash in
// the Content-Security-Policy, so no other style and no script can run), badges, times, the checks
// table and the pager. Everything goes through html``: member-controlled text is escaped by default.
//
// Layout rules for real names and small screens: long names, ids, labels and messages wrap anywhere or
// are clamped to a few lines with the full text in a title attribute (and in full on the check or
// cluster page); words wrap between words and are never split (overflow-wrap: anywhere only on names,
// ids and messages, break-word elsewhere). Tables sit in a horizontally scrolling container; on a phone
// (600 px and less) every table is stacked instead: each row is a card of "label value" lines (the
// label from the cell's data-label), so every column is read without scrolling and the page never
// scrolls sideways. Links are relative (./, ./check?...): every page lives at the same level, so they
// work under any path prefix.
import { createHash } from "node:crypto"
import { type CheckView, type ClusterView, missesObjective } from "../../api/fleet.ts"
import { formatDuration } from "../../api/syntax.ts"
import { type Html, html, type Interpolation, nothing, unsafeRaw } from "../html.ts"

export const css = `
  * { box-sizing: border-box; }
  body { font: 14px/1.4 system-ui, sans-serif; margin: 0; padding: 1rem; color: #1b1f24; background: #fafbfc; overflow-wrap: break-word; }
  @media (min-width: 700px) { body { padding: 1.5rem; } }
  h1 { font-size: 1.4rem; margin: 0 0 .2rem; } h2 { font-size: 1.1rem; margin-top: 1.6rem; }
  a { color: #0b57b5; }
  .scroll { overflow-x: auto; max-width: 100%; border: 1px solid #e3e6ea; background: white; }
  table { border-collapse: collapse; width: 100%; }
  th, td { text-align: left; padding: .45rem .6rem; border-bottom: 1px solid #e3e6ea; vertical-align: top; }
  th { background: #f0f2f5; font-weight: 600; white-space: nowrap; }
  .num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
  .badge { display: inline-block; padding: .05rem .45rem; border-radius: .6rem; font-size: .8rem; font-weight: 600; white-space: nowrap; }
  .ok { background: #dcf5e3; color: #145c2c; } .bad { background: #fde0e0; color: #8a1010; } .unknown { background: #eceff3; color: #4a5563; }
  .warn { background: #ffefc2; color: #6b4200; white-space: normal; }
  .row-bad { background: #fff6f6; } .row-unknown { background: #f8f9fb; } .row-warn { background: #fffaeb; }
  .warn-text { color: #7a4b00; font-weight: 600; } div.warn-text { font-size: .8rem; } .num .warn-text { white-space: normal; }
  .muted { color: #6a737d; font-size: .8rem; }
  .name { min-width: 9rem; max-width: 22rem; }
  @media (min-width: 900px) { .check-name { min-width: 14rem; } }
  .trace code, code.id { display: inline-block; width: 16.5ch; overflow-wrap: anywhere; }
  .clamp { display: -webkit-box; -webkit-box-orient: vertical; -webkit-line-clamp: 3; overflow: hidden; overflow-wrap: anywhere; }
  .msg { color: #444; font-size: .85rem; min-width: 14rem; max-width: 36rem; }
  .labels { display: flex; flex-wrap: wrap; gap: .2rem; max-width: 22rem; }
  .label { display: inline-block; max-width: 14rem; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; background: #f0f2f5; border-radius: .3rem; padding: 0 .3rem; font-size: .75rem; color: #4a5563; }
  .full { white-space: pre-wrap; overflow-wrap: anywhere; }
  h1 .full { font-size: 1.1rem; }
  .reason { max-width: 14rem; overflow: hidden; text-overflow: ellipsis; white-space: nowrap; }
  code { font-size: .8rem; } .nowrap { white-space: nowrap; } .bad-text { color: #8a1010; font-weight: 600; }
  .summary { margin: .3rem 0 1rem; }
  ul.chips { list-style: none; margin: 0; padding: 0; display: flex; flex-wrap: wrap; gap: .2rem .7rem; max-width: 36rem; }
  .pager { margin: .6rem 0; display: flex; flex-wrap: wrap; gap: .3rem 1rem; }
  form.filters { display: flex; flex-wrap: wrap; gap: .4rem .8rem; align-items: end; margin: .6rem 0; }
  form.filters label { display: flex; flex-direction: column; font-size: .8rem; color: #4a5563; }
  form.filters input[type=text], form.filters select { font: inherit; padding: .15rem .3rem; width: 11rem; max-width: 100%; }
  form.filters label.inline { flex-direction: row; gap: .3rem; align-items: center; }
  dl.facts { display: grid; grid-template-columns: max-content minmax(0, 1fr); gap: .2rem 1rem; margin: .5rem 0; }
  dl.facts dt { color: #4a5563; } dl.facts dd { margin: 0; }
  @media (max-width: 600px) {
    .name { max-width: 15rem; } .msg { min-width: 11rem; max-width: 16rem; } .labels { max-width: 15rem; } .label { max-width: 13rem; }
    dl.facts { grid-template-columns: minmax(0, 1fr); } dl.facts dd { margin-bottom: .3rem; }
    table.stack, table.stack tbody, table.stack tr, table.stack td { display: block; width: 100%; }
    table.stack { position: relative; }
    table.stack thead { position: absolute; top: 0; left: 0; width: 1px; height: 1px; overflow: hidden; clip-path: inset(50%); white-space: nowrap; }
    table.stack thead tr, table.stack thead th { display: block; padding: 0; }
    table.stack tr { padding: .35rem 0; border-bottom: 1px solid #e3e6ea; }
    table.stack td { border: 0; padding: .15rem .6rem; min-width: 0; max-width: none; text-align: left; }
    table.stack td[data-label] { position: relative; padding-left: 8rem; }
    table.stack td[data-label]::before { content: attr(data-label); position: absolute; left: .6rem; width: 7rem; color: #4a5563; font-size: .8rem; font-weight: 600; }
    table.stack .reason, table.stack .labels, table.stack .label, table.stack ul.chips { max-width: 100%; }
  }
`

/** The stylesheet's CSP source: the page's only style, and nothing else may run or load. */
export const styleHash = `sha256-${createHash("sha256").update(css).digest("base64")}`

/** A full page. `refresh` reloads it every so many seconds (no script needed). */
export const page = (title: string, body: Html, refresh?: number): string =>
  html`<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
${refresh ? html`<meta http-equiv="refresh" content="${refresh}">` : nothing}
<title>${title}</title>
<style>${unsafeRaw(css)}</style>
</head>
<body>
${body}
</body>
</html>
`.value

/** A relative link to one of the dashboard's pages with these query parameters (empty ones dropped). */
export const href = (
  path: "./" | "./cluster" | "./check",
  params: Readonly<Record<string, string | undefined>>,
) => {
  const q = new URLSearchParams()
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== "") q.set(k, v)
  const s = q.toString()
  return s ? `${path}?${s}` : path
}

export const checkHref = (c: Pick<CheckView, "cluster" | "namespace" | "name">) =>
  href("./check", { cluster: c.cluster, namespace: c.namespace, name: c.name })

export const clusterHref = (name: string) => href("./cluster", { name })

const statusClass = (status: string) => (status === "True" ? "ok" : status === "False" ? "bad" : "unknown")

/** A verdict as a badge (a condition's status: Verified, Failing, Unknown). */
export const badge = (status: string): Html =>
  html`<span class="badge ${statusClass(status)}">${status === "True" ? "Verified" : status === "False" ? "Failing" : "Unknown"}</span>`

/** The badge of a state of its own, never green: verified, but an objective was missed (amber, in words). */
export const objectiveMissedBadge = (title: string): Html =>
  html`<span class="badge warn" title="${title}">Verified · objective missed</span>`

/** The objectives a check missed (condition False): their names and the spec fields they hold to. */
export const missedObjectives = (c: Pick<CheckView, "objectives">) => [
  ...(c.objectives?.restoreTime === "False" ? [{ name: "restore time", field: "maxRestoreDuration" }] : []),
  ...(c.objectives?.dataAge === "False" ? [{ name: "data age", field: "maxDataAge" }] : []),
]

/**
 * Verified, but missed an objective: its own state on every page (ADR 0015). A failing or unknown
 * check stays failing or unknown: the worse state is the one shown.
 */
export const isObjectiveMissed = (c: Pick<CheckView, "status" | "objectives">): boolean =>
  c.status === "True" && missesObjective(c)

/**
 * A check's state as a badge: Failing, Unknown, Verified, or (amber) "Verified · objective missed"
 * with the missed objectives named under it.
 */
export const checkBadge = (c: Pick<CheckView, "status" | "objectives">): Html => {
  if (!isObjectiveMissed(c)) return badge(c.status)
  const missed = missedObjectives(c)
  const title = `verified, but missed: ${missed.map((m) => `${m.name} (${m.field})`).join(", ")}`
  return html`${objectiveMissedBadge(title)}<div class="warn-text" title="${title}">${missed.map((m, i) => (i === 0 ? `missed: ${m.name}` : `, ${m.name}`))}</div>`
}

/**
 * Checks in the order the dashboard lists them: failing, unknown, verified with a missed objective,
 * verified; the view's own order within each (a stable partition, linear in the number of checks).
 */
export const attentionFirst = <C extends Pick<CheckView, "status" | "objectives">>(
  checks: ReadonlyArray<C>,
): ReadonlyArray<C> => {
  if (!checks.some(isObjectiveMissed)) return checks
  const buckets: [C[], C[], C[], C[]] = [[], [], [], []]
  for (const c of checks)
    buckets[c.status === "False" ? 0 : c.status === "Unknown" ? 1 : isObjectiveMissed(c) ? 2 : 3].push(c)
  return buckets.flat()
}

/** A condition as a badge that names it ("Ready", "Not ready"), with the raw status on hover. */
export const conditionBadge = (status: string | undefined, yes: string, no: string): Html =>
  html`<span class="badge ${statusClass(status ?? "Unknown")}" title="${status ?? "Unknown"}">${
    status === "True" ? yes : status === "False" ? no : "Unknown"
  }</span>`

/**
 * Kubernetes times (RFC 3339, UTC) as "2026-11-29 03:00:12 UTC", machine-readable in <time>; a narrow
 * column wraps between the date and the time, never inside either.
 */
export const time = (iso: string | undefined, none: Html = nothing): Html => {
  if (!iso) return none
  const m = /^(\d{4}-\d\d-\d\d)T(\d\d:\d\d:\d\d)(?:\.\d+)?Z$/.exec(iso)
  return m
    ? html`<time datetime="${iso}"><span class="nowrap">${m[1]}</span> <span class="nowrap">${m[2]} UTC</span></time>`
    : html`<time datetime="${iso}">${iso}</time>`
}

export const plural = (n: number, word: string) => `${n.toLocaleString("en-US")} ${word}${n === 1 ? "" : "s"}`

export const condition = (conditions: ClusterView["conditions"], type: string) =>
  conditions.find((c) => c.type === type)

/** A condition's reason: one line (a hostile 1,024-character reason is cut), whole on hover. */
export const reason = (text: string | undefined): Html =>
  text ? html`<div class="muted reason" title="${text}">${text}</div>` : nothing

/** Text that may be long: clamped to three lines, the whole of it on hover. */
export const clamped = (text: string, cls = ""): Html =>
  text ? html`<div class="clamp ${cls}" title="${text}">${text}</div>` : nothing

/** A cluster's labels as chips; a long one is cut with an ellipsis and shown whole on hover. */
export const labelChips = (labels: Readonly<Record<string, string>>): Html => {
  const entries = Object.entries(labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  return entries.length
    ? html`<div class="labels">${entries.map(([k, v]) => html`<span class="label" title="${`${k}=${v}`}">${k}=${v}</span>`)}</div>`
    : nothing
}

/**
 * The trace id, linked when --trace-url-template is set: `{traceId}` (SPEC §12; `{traceID}`, the
 * spelling the hub took first, too) replaced by the id, URL-encoded (the id is what a member wrote).
 */
export const traceLink = (traceID: string | undefined, template: string | undefined): Html => {
  if (!traceID) return html`<span class="muted">—</span>`
  if (!template) return html`<code>${traceID}</code>`
  const id = encodeURIComponent(traceID)
  const url = template.replaceAll("{traceId}", id).replaceAll("{traceID}", id)
  return html`<a href="${url}" rel="noreferrer"><code>${traceID}</code></a>`
}

/** A row's background by its state: failing, unknown, verified with a missed objective, verified. */
export const rowClass = (c: Pick<CheckView, "status" | "objectives">) =>
  c.status === "False"
    ? "row-bad"
    : c.status === "Unknown"
      ? "row-unknown"
      : isObjectiveMissed(c)
        ? "row-warn"
        : ""

/** "Restore time ✓ 41s · Data age ✗ 30h0m0s": a check's objectives under its reason, when it has any. */
export const objectivesLine = (c: CheckView): Html => {
  const o = c.objectives
  if (o === undefined) return nothing
  const mark = (status: string | undefined) =>
    status === "True" ? "met" : status === "False" ? "missed" : "unknown"
  const value = (seconds: number | undefined) =>
    seconds === undefined ? "" : ` (${formatDuration(seconds * 1000)})`
  const parts: Html[] = []
  if (o.restoreTime !== undefined)
    parts.push(
      html`<span class="${o.restoreTime === "False" ? "bad-text" : ""}">restore time ${mark(o.restoreTime)}${value(o.restoreDurationSeconds)}</span>`,
    )
  if (o.dataAge !== undefined)
    parts.push(
      html`<span class="${o.dataAge === "False" ? "bad-text" : ""}">data age ${mark(o.dataAge)}${value(o.dataAgeSeconds)}</span>`,
    )
  return html`<div class="objectives">${parts.map((p, i) => (i === 0 ? p : html` · ${p}`))}</div>`
}

/** One objective in its own column: "met (41s)", "missed (30h0m0s)", "unknown", or a dash without one. */
const objectiveCell = (label: string, status: string | undefined, seconds: number | undefined): Html => {
  if (status === undefined) return html`<td data-label="${label}"><span class="muted">—</span></td>`
  const word = status === "True" ? "met" : status === "False" ? "missed" : "unknown"
  // The measured value on a line of its own keeps the column narrow enough for a laptop screen.
  return html`<td data-label="${label}"><span class="${status === "False" ? "bad-text" : status === "True" ? "" : "muted"}">${word}</span>${
    seconds === undefined ? nothing : html`<div class="muted">${formatDuration(seconds * 1000)}</div>`
  }</td>`
}

/**
 * The checks table (overview and cluster page); `withCluster` adds the cluster column. When a check in
 * it has objectives, each objective (restore time, data age) gets a column of its own.
 */
export const checksTable = (
  id: string,
  checks: ReadonlyArray<CheckView>,
  opts: {
    readonly withCluster: boolean
    readonly traceUrlTemplate: string | undefined
    readonly empty: string
  },
): Html => {
  const objectives = checks.some((c) => c.objectives !== undefined)
  const columns = (opts.withCluster ? 7 : 6) + (objectives ? 2 : 0)
  const rows = checks.map(
    (c) => html`<tr class="${rowClass(c)}">
  <td data-label="Verified">${checkBadge(c)}</td>
  ${opts.withCluster ? html`<td class="name" data-label="Cluster"><a class="clamp" href="${clusterHref(c.cluster)}" title="${c.cluster}">${c.cluster}</a></td>` : nothing}
  <td class="name check-name" data-label="Check"><a class="clamp" href="${checkHref(c)}" title="${`${c.namespace}/${c.name}`}">${c.namespace}/<strong>${c.name}</strong></a></td>
  <td class="msg" data-label="Reason"><div class="reason" title="${c.reason}">${c.reason}</div>${clamped(c.message)}</td>
  ${objectives ? html`${objectiveCell("Restore time", c.objectives?.restoreTime, c.objectives?.restoreDurationSeconds)}${objectiveCell("Data age", c.objectives?.dataAge, c.objectives?.dataAgeSeconds)}` : nothing}
  <td data-label="Last success">${time(c.lastSuccessfulTime, html`<span class="muted">never</span>`)}</td>
  <td data-label="Next run">${time(c.nextRunTime, html`<span class="muted">—</span>`)}</td>
  <td class="trace" data-label="Trace id">${traceLink(c.traceID, opts.traceUrlTemplate)}</td>
</tr>`,
  )
  return html`<div class="scroll" role="region" aria-labelledby="${id}" tabindex="0"><table class="stack" aria-labelledby="${id}">
<thead><tr><th>Verified</th>${opts.withCluster ? html`<th>Cluster</th>` : nothing}<th>Check</th><th>Reason</th>${objectives ? html`<th>Restore<br>time</th><th>Data<br>age</th>` : nothing}<th>Last success</th><th>Next run</th><th>Trace id</th></tr></thead>
<tbody>
${rows.length ? rows : html`<tr><td colspan="${columns}" class="muted">${opts.empty}</td></tr>`}
</tbody>
</table></div>`
}

/** Which slice of a list a 1-based page shows. */
export const pageSlice = <T>(list: ReadonlyArray<T>, pageNo: number, size: number) => {
  const pages = Math.max(1, Math.ceil(list.length / size))
  const start = (pageNo - 1) * size
  return {
    items: list.slice(start, start + size),
    pages,
    first: start + 1,
    last: Math.min(list.length, start + size),
  }
}

/** "Page 2 of 7 · ‹ Previous · Next ›", with relative links that keep the other parameters. */
export const pager = (
  path: "./" | "./cluster",
  params: Readonly<Record<string, string | undefined>>,
  pageNo: number,
  pages: number,
): Html => {
  if (pages <= 1 && pageNo <= 1) return nothing
  const to = (n: number) => href(path, { ...params, page: n === 1 ? undefined : String(n) })
  return html`<nav class="pager" aria-label="pages">
<span>Page ${pageNo} of ${pages}</span>
${pageNo > 1 ? html`<a href="${to(Math.min(pageNo - 1, pages))}" rel="prev">‹ Previous</a>` : html`<span class="muted">‹ Previous</span>`}
${pageNo < pages ? html`<a href="${to(pageNo + 1)}" rel="next">Next ›</a>` : html`<span class="muted">Next ›</span>`}
</nav>`
}

export type { Interpolation }
