// The overview at /: the fleet's counts, a filter form (a plain GET form, no JavaScript), the clusters
// (those needing attention first) and the checks, failing and unknown checks first, then verified ones
// that missed an objective, a page at a time (clusters and checks side by side, dashboardPageSize of
// each), with relative previous/next links that keep the filters.
import { type CheckView, type FleetView, isClusterHealthy } from "../../api/fleet.ts"
import { summarize } from "../fleet-state.ts"
import { type Html, html, nothing } from "../html.ts"
import { fleetChecksSection } from "./fleet-checks.ts"
import {
  attentionFirst,
  checksTable,
  clusterHref,
  condition,
  conditionBadge,
  labelChips,
  page,
  pager,
  pageSlice,
  plural,
  reason,
  time,
} from "./layout.ts"

export interface OverviewOptions {
  /** What this hub process is: "leader", "standby", or with sharding its share (HubHttpOptions.role). */
  readonly role: string
  readonly hub: string
  readonly pageSize: number
  readonly page: number
  readonly traceUrlTemplate: string | undefined
  /** The request's validated query parameters, kept in the pager's links. */
  readonly params: Readonly<Record<string, string>>
}

/** What a hub that cannot answer for the fleet shows instead: why, and never a green title. */
export const renderUnavailable = (message: string, hub: string): string =>
  page(
    "fleetcheck: not available",
    html`<h1>fleetcheck</h1>
<p><strong>This hub cannot show the fleet right now.</strong> ${message}</p>
<p>Answered by ${hub}; this page reloads every 5 seconds.</p>`,
    5,
  )

/** A request the dashboard cannot answer (bad query, unknown cluster or check): why, and a way back. */
export const renderError = (status: number, message: string): string =>
  page(
    `fleetcheck: ${status === 404 ? "not found" : "bad request"}`,
    html`<h1>fleetcheck</h1>
<p><strong>${status === 404 ? "Not found." : "This request cannot be answered."}</strong> ${message}</p>
<p><a href="./">Back to the fleet overview</a></p>`,
  )

const title = (view: FleetView, failing: number, unknown: number, missed: number) =>
  failing > 0
    ? `${failing} failing`
    : unknown > 0
      ? `${unknown} unknown`
      : view.checks.length === 0
        ? "no checks"
        : !view.clusters.every(isClusterHealthy)
          ? "clusters need attention"
          : missed > 0
            ? `${missed} missed an objective`
            : "all verified"

const filterForm = (params: Readonly<Record<string, string>>): Html => {
  const status = params.status ?? ""
  const option = (value: string, label: string) =>
    value === status
      ? html`<option value="${value}" selected>${label}</option>`
      : html`<option value="${value}">${label}</option>`
  const failing = params.failing === "true" || params.failing === "1"
  return html`<form class="filters" method="get" action="./">
<label>Cluster <input type="text" name="cluster" value="${params.cluster ?? ""}" maxlength="256"></label>
<label>Namespace <input type="text" name="namespace" value="${params.namespace ?? ""}" maxlength="256"></label>
<label>Status <select name="status">${option("", "any")}${option("False", "Failing")}${option("Unknown", "Unknown")}${option("True", "Verified")}</select></label>
<label>Cluster labels <input type="text" name="label" value="${params.label ?? ""}" maxlength="256" placeholder="env=prod,region in (eu,us)"></label>
<label class="inline">${failing ? html`<input type="checkbox" name="failing" value="true" checked>` : html`<input type="checkbox" name="failing" value="true">`} failing or unknown only</label>
<button type="submit">Filter</button>
</form>`
}

const clusterRow = (c: FleetView["clusters"][number]): Html => {
  const ready = condition(c.conditions, "Ready")
  const connected = condition(c.conditions, "Connected")
  const creds = condition(c.conditions, "CredentialsValid")
  return html`<tr>
  <td class="name" data-label="Cluster"><a class="clamp" href="${clusterHref(c.name)}" title="${c.name}"><strong>${c.name}</strong></a>${labelChips(c.labels)}</td>
  <td data-label="Ready">${conditionBadge(ready?.status, "Ready", "Not ready")}${reason(ready?.reason)}</td>
  <td class="msg" data-label="Connected">${conditionBadge(connected?.status, "Connected", "Disconnected")}${connected?.status === "True" ? nothing : html`<div class="muted clamp" title="${connected?.message ?? ""}">${connected?.message}</div>`}</td>
  <td data-label="Credentials">${conditionBadge(creds?.status, "Valid", "Invalid")}${reason(creds?.reason)}</td>
  <td class="num" data-label="Verified">${c.counts.verified} / ${c.counts.total}${
    c.counts.objectivesMissed
      ? html`<div class="warn-text">${c.counts.objectivesMissed} missed an objective</div>`
      : nothing
  }</td>
  <td class="num${c.counts.failed > 0 ? " bad-text" : ""}" data-label="Failing">${c.counts.failed}</td>
  <td class="num" data-label="Unknown">${c.counts.unknown}</td>
  <td class="nowrap" data-label="Version">${c.kubernetesVersion}</td>
</tr>`
}

const range = (first: number, last: number, total: number, word: string) =>
  total === 0
    ? ""
    : last >= first && (first > 1 || last < total)
      ? `${first}–${last} of ${plural(total, word)}`
      : plural(total, word)

/** Clusters that need a look first (unhealthy or failing, then unknown), then by name. */
const clusterRank = (c: FleetView["clusters"][number]) =>
  !isClusterHealthy(c) || c.counts.failed > 0 ? 0 : c.counts.unknown > 0 ? 1 : 2

/**
 * The view's checks by cluster, namespace and name, for the FleetBackupChecks' cluster and drill chips
 * (whose entries carry the placed check's Verified status, not its objectives); built only when there
 * is a FleetBackupCheck to show.
 */
const placedChecks = (view: FleetView) => {
  let byKey: Map<string, CheckView> | undefined
  return (cluster: string, namespace: string, name: string): CheckView | undefined => {
    byKey ??= new Map(view.checks.map((c) => [`${c.cluster}/${c.namespace}/${c.name}`, c]))
    return byKey.get(`${cluster}/${namespace}/${name}`)
  }
}

export const renderOverview = (view: FleetView, opts: OverviewOptions): string => {
  const summary = view.summary ?? summarize(view.clusters, view.checks)
  const { failed, unknown } = summary.checks
  const size = opts.pageSize
  const ordered = view.clusters
    .map((c) => [clusterRank(c), c] as const)
    .sort(([a, x], [b, y]) => a - b || (x.name < y.name ? -1 : x.name > y.name ? 1 : 0))
    .map(([, c]) => c)
  const clusters = pageSlice(ordered, opts.page, size)
  const checks = pageSlice(attentionFirst(view.checks), opts.page, size)
  const pages = Math.max(clusters.pages, checks.pages)
  const { page: _page, ...keep } = opts.params
  const filtered = Object.keys(keep).length > 0
  const clusterNote =
    clusters.items.length === 0 && view.clusters.length > 0
      ? `All ${plural(view.clusters.length, "cluster")} are on earlier pages.`
      : "No member clusters registered."
  const checkNote =
    checks.items.length === 0 && view.checks.length > 0
      ? `All ${plural(view.checks.length, "check")} are on earlier pages.`
      : filtered
        ? "No BackupChecks match these filters."
        : "No BackupChecks yet."
  const body = html`<h1>fleetcheck</h1>
<p class="summary">${plural(summary.clusters, "cluster")}${summary.healthyClusters < summary.clusters ? html` (<strong class="bad-text">${summary.clusters - summary.healthyClusters} need attention</strong>)` : nothing} · ${plural(summary.checks.total, "check")} · <strong${failed > 0 ? html` class="bad-text"` : nothing}>${failed} failing</strong> · ${unknown} unknown · ${summary.checks.verified} verified${summary.checks.objectivesMissed ? html` · <strong class="warn-text">${summary.checks.objectivesMissed} missed an objective</strong>` : nothing} · generated ${time(view.generatedAt)} by ${opts.hub} (${opts.role})</p>
<nav class="quick"><a href="./">All checks</a> · <a href="./?failing=true">Failing or unknown only</a></nav>
${filterForm(opts.params)}
${pager("./", keep, opts.page, pages)}
${opts.page === 1 ? fleetChecksSection(view.fleetChecks ?? [], placedChecks(view)) : nothing}
<h2 id="clusters">Clusters <span class="muted">(needing attention first) ${range(clusters.first, clusters.last, view.clusters.length, "cluster")}</span></h2>
<div class="scroll" role="region" aria-labelledby="clusters" tabindex="0"><table class="stack" aria-labelledby="clusters">
<thead><tr><th>Cluster</th><th>Ready</th><th>Connected</th><th>Credentials</th><th class="num">Verified</th><th class="num">Failing</th><th class="num">Unknown</th><th>Version</th></tr></thead>
<tbody>
${clusters.items.length ? clusters.items.map(clusterRow) : html`<tr><td colspan="8" class="muted">${clusterNote}</td></tr>`}
</tbody>
</table></div>
<h2 id="checks">Backup checks <span class="muted">(failing first) ${range(checks.first, checks.last, view.checks.length, "check")}</span></h2>
${checksTable("checks", checks.items, { withCluster: true, traceUrlTemplate: opts.traceUrlTemplate, empty: checkNote })}
${pager("./", keep, opts.page, pages)}`
  return page(`fleetcheck: ${title(view, failed, unknown, summary.checks.objectivesMissed ?? 0)}`, body, 10)
}
