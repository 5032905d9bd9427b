// Drill-down pages, server-rendered like the overview and linked from it: a cluster (its conditions,
// counts, labels and checks) and a check (its verdict as every view shows it, the FleetBackupCheck that
// placed it and the source of a drill check, spec summary, conditions, last run with its trace). Texts the overview clamps are shown here in full.
import type { BackupCheck, LastRun } from "../../api/backupcheck.ts"
import type { CheckView, ClusterView } from "../../api/fleet.ts"
import { formatDuration } from "../../api/syntax.ts"
import { type Html, html, nothing } from "../html.ts"
import {
  attentionFirst,
  checkBadge,
  checksTable,
  clusterHref,
  conditionBadge,
  href,
  objectivesLine,
  page,
  pager,
  pageSlice,
  plural,
  reason,
  time,
  traceLink,
} from "./layout.ts"

export interface DetailOptions {
  readonly leader: boolean
  readonly hub: string
  readonly pageSize: number
  readonly traceUrlTemplate: string | undefined
}

type Conditions = ReadonlyArray<{
  readonly type: string
  readonly status: string
  readonly reason: string
  readonly message: string
  readonly lastTransitionTime?: string | undefined
}>

const conditionsTable = (id: string, conditions: Conditions): Html =>
  html`<div class="scroll" role="region" aria-labelledby="${id}" tabindex="0"><table class="stack" aria-labelledby="${id}">
<thead><tr><th>Type</th><th>Status</th><th>Reason</th><th>Message</th><th>Last transition</th></tr></thead>
<tbody>
${
  conditions.length
    ? conditions.map(
        (c) => html`<tr>
  <td class="nowrap" data-label="Type">${c.type}</td>
  <td data-label="Status">${conditionBadge(c.status, "True", "False")}</td>
  <td data-label="Reason">${reason(c.reason)}</td>
  <td class="msg full" data-label="Message">${c.message}</td>
  <td data-label="Last transition">${time(c.lastTransitionTime)}</td>
</tr>`,
      )
    : html`<tr><td colspan="5" class="muted">No conditions yet.</td></tr>`
}
</tbody>
</table></div>`

/** A definition list of facts; undefined values are left out. */
const facts = (rows: ReadonlyArray<readonly [string, Html | string | number | undefined]>): Html =>
  html`<dl class="facts">${rows
    .filter(([, v]) => v !== undefined && v !== "")
    .map(([k, v]) => html`<dt>${k}</dt><dd>${v}</dd>`)}</dl>`

/** How long a run took, Go style (41s, 2m5s); empty while it runs. */
const runDuration = (run: LastRun): string => {
  if (run.completionTime === undefined) return ""
  const ms = Date.parse(run.completionTime) - Date.parse(run.startTime)
  return Number.isFinite(ms) ? formatDuration(ms) : ""
}

/** Each phase as "restore Succeeded (RestoreSucceeded)", one per line. */
const phaseSummary = (run: LastRun): Html =>
  html`${(run.phases ?? []).map(
    (p) =>
      html`<div class="nowrap">${p.name}: ${p.result}${p.reason ? html` (${reason(p.reason)})` : nothing}</div>`,
  )}`

/** A run's sandbox and what became of it: `fcsb-… Pending until 03:10` or `Deleted`. */
const sandboxSummary = (r: LastRun): Html | string => {
  const sb = r.sandbox
  if (sb === undefined) return ""
  return html`<div class="full"><code>${sb.namespace}</code></div><div class="nowrap">${sb.cleanup}${
    sb.cleanup === "Pending" && sb.deleteAfter ? html` until ${time(sb.deleteAfter)}` : nothing
  }${sb.cleanup === "Failed" ? html` (${sb.reason ?? "?"}: <span class="full">${sb.message ?? ""}</span>)` : nothing}</div>`
}

const historyTable = (
  id: string,
  history: ReadonlyArray<LastRun>,
  traceUrlTemplate: string | undefined,
): Html =>
  html`<div class="scroll" role="region" aria-labelledby="${id}" tabindex="0"><table class="stack" aria-labelledby="${id}">
<thead><tr><th>Run</th><th>Backup</th><th>Result</th><th>Phases</th><th>Started</th><th>Took</th>${
    history.some((r) => r.sandbox) ? html`<th>Sandbox</th>` : nothing
  }<th>Trace</th></tr></thead>
<tbody>
${history.map(
  (r) => html`<tr>
  <td class="nowrap" data-label="Run">${r.runID}</td>
  <td class="full" data-label="Backup">${r.backupName ?? ""}</td>
  <td data-label="Result">${conditionBadge(r.result === "Succeeded" ? "True" : r.result === "Failed" ? "False" : "Unknown", "True", "False")}</td>
  <td data-label="Phases">${phaseSummary(r)}</td>
  <td data-label="Started">${time(r.startTime)}</td>
  <td class="nowrap" data-label="Took">${runDuration(r)}</td>
  ${history.some((h) => h.sandbox) ? html`<td data-label="Sandbox">${sandboxSummary(r)}</td>` : nothing}
  <td class="trace" data-label="Trace">${traceLink(r.traceID, traceUrlTemplate)}</td>
</tr>`,
)}
</tbody>
</table></div>`

const back = html`<nav><a href="./">← Fleet overview</a></nav>`

/**
 * Where a check comes from when the hub placed it (the fleet view's fleetBackupCheck and drillSource):
 * its FleetBackupCheck, and for a drill check the member whose backup it restores here.
 */
const placedByFacts = (check: CheckView): ReadonlyArray<readonly [string, Html | undefined]> => [
  [
    "Placed by",
    check.fleetBackupCheck
      ? html`FleetBackupCheck <a class="full" href="./#fleet-checks">${check.fleetBackupCheck}</a>`
      : undefined,
  ],
  [
    "Drill",
    check.drillSource
      ? html`restores the backup of cluster <a class="full" href="${clusterHref(check.drillSource)}">${check.drillSource}</a> here, in ${check.cluster}`
      : undefined,
  ],
]

export const renderClusterPage = (
  cluster: ClusterView,
  checks: ReadonlyArray<CheckView>,
  opts: DetailOptions & { readonly page: number },
): string => {
  const slice = pageSlice(attentionFirst(checks), opts.page, opts.pageSize)
  const labels = Object.entries(cluster.labels).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
  const body = html`${back}
<h1>Cluster <span class="full">${cluster.name}</span></h1>
<p class="summary">${cluster.counts.verified} of ${plural(cluster.counts.total, "check")} verified · <strong${cluster.counts.failed > 0 ? html` class="bad-text"` : nothing}>${cluster.counts.failed} failing</strong> · ${cluster.counts.unknown} unknown${
    cluster.counts.objectivesMissed
      ? html` · <strong class="warn-text">${cluster.counts.objectivesMissed} missed an objective</strong>`
      : nothing
  }</p>
${facts([
  [
    "Registered by",
    cluster.source
      ? html`${cluster.source.kind} <span class="full">${cluster.source.name}</span>`
      : undefined,
  ],
  ["Kubernetes version", cluster.kubernetesVersion],
  ["Last probe", cluster.lastProbeTime ? time(cluster.lastProbeTime) : undefined],
  [
    "Failing or unknown checks",
    html`<a href="${href("./", { cluster: cluster.name, failing: "true" })}">on the overview</a>`,
  ],
])}
<h2 id="labels">Labels</h2>
${labels.length ? html`<dl class="facts" aria-labelledby="labels">${labels.map(([k, v]) => html`<dt class="full">${k}</dt><dd class="full">${v}</dd>`)}</dl>` : html`<p class="muted">No labels.</p>`}
<h2 id="conditions">Conditions</h2>
${conditionsTable("conditions", cluster.conditions)}
<h2 id="checks">Backup checks <span class="muted">(failing first)</span></h2>
${pager("./cluster", { name: cluster.name }, opts.page, slice.pages)}
${checksTable("checks", slice.items, { withCluster: false, traceUrlTemplate: opts.traceUrlTemplate, empty: "No BackupChecks in this cluster." })}`
  return page(`fleetcheck: cluster ${cluster.name}`, body, 10)
}

export const renderCheckPage = (
  check: CheckView,
  object: BackupCheck,
  cluster: ClusterView,
  opts: DetailOptions,
): string => {
  const spec = object.spec
  const run = object.status?.lastRun
  const containers = spec.jobTemplate?.spec.template.spec.containers ?? []
  const body = html`${back}
<h1><span class="full">${check.namespace}/${check.name}</span></h1>
<p class="summary">in cluster <a href="${clusterHref(cluster.name)}">${cluster.name}</a></p>
${check.fleetBackupCheck ? facts(placedByFacts(check)) : nothing}
<h2 id="verdict">Verified</h2>
${facts([
  ["Status", checkBadge(check)],
  ["Reason", check.reason],
  ["Message", check.message ? html`<span class="full">${check.message}</span>` : undefined],
  ["Since", check.lastTransitionTime ? time(check.lastTransitionTime) : undefined],
  ["Last success", time(check.lastSuccessfulTime, html`<span class="muted">never</span>`)],
  ["Next run", check.nextRunTime ? time(check.nextRunTime) : undefined],
  ["Objectives", check.objectives ? objectivesLine(check) : undefined],
  [
    "Generation",
    `${object.metadata.generation ?? "?"} (observed ${object.status?.observedGeneration ?? "none yet"})`,
  ],
])}
<h2 id="spec">Spec</h2>
${facts([
  ["Backup", html`<span class="full">${spec.backup.name}</span>`],
  [
    "Backup of cluster",
    spec.backup.cluster ? html`<span class="full">${spec.backup.cluster}</span>` : undefined,
  ],
  ["Source", spec.backup.source ? html`<span class="full">${spec.backup.source}</span>` : undefined],
  ["Checksum", spec.backup.checksum ? html`<code class="full">${spec.backup.checksum}</code>` : undefined],
  [
    "Schedule",
    spec.schedule
      ? `${spec.schedule}${spec.timeZone ? ` (${spec.timeZone})` : " (UTC)"}`
      : "once per spec generation",
  ],
  ["Start window", spec.startWindow],
  [
    "Sandbox",
    spec.sandbox
      ? `a namespace per run; egress to ${
          (spec.sandbox.egress ?? []).length
            ? (spec.sandbox.egress ?? []).map((e) => e.cidr).join(", ")
            : "nothing"
        }${
          spec.sandbox.resourceQuota
            ? `; quota ${Object.entries(spec.sandbox.resourceQuota.hard)
                .map(([k, v]) => `${k}=${v}`)
                .join(", ")}`
            : ""
        }; kept ${spec.sandbox.validationWindow ?? "0s"} after the verdict`
      : undefined,
  ],
  [
    "Objectives",
    spec.objectives?.maxRestoreDuration || spec.objectives?.maxDataAge
      ? [
          spec.objectives.maxRestoreDuration ? `restore within ${spec.objectives.maxRestoreDuration}` : "",
          spec.objectives.maxDataAge ? `data at most ${spec.objectives.maxDataAge} old` : "",
        ]
          .filter(Boolean)
          .join(", ")
      : undefined,
  ],
  [
    "Validation",
    spec.validation
      ? spec.validation.jobTemplate.spec.template.spec.containers.map((c) => c.image).join(", ")
      : undefined,
  ],
  ["Timeout", spec.timeout],
  ["Max staleness", spec.maxStaleness],
  ["Suspended", spec.suspend ? "yes" : "no"],
  ["Concurrency policy", spec.concurrencyPolicy],
  ["Jobs kept", `${spec.successfulRunsHistoryLimit} successful, ${spec.failedRunsHistoryLimit} failed`],
  // The cache holds objects as the API server returned them: a default may be missing on old objects.
  ["Run history kept", typeof spec.historyLimit === "number" ? plural(spec.historyLimit, "run") : undefined],
  [
    "Restore images",
    html`${containers.map((c) => html`<div class="full"><code>${c.name}</code>: ${c.image}</div>`)}`,
  ],
])}
<h2 id="last-run">Last run</h2>
${
  run
    ? facts([
        ["Run", run.runID],
        ["Result", run.result],
        ["Job", html`<code>${run.jobName}</code>`],
        ["Started", time(run.startTime)],
        [
          "Finished",
          run.completionTime ? time(run.completionTime) : html`<span class="muted">not yet</span>`,
        ],
        ["Phases", run.phases?.length ? phaseSummary(run) : undefined],
        ["Sandbox", run.sandbox ? sandboxSummary(run) : undefined],
        ["Took", runDuration(run) || undefined],
        ["Trace id", traceLink(run.traceID, opts.traceUrlTemplate)],
        ["Spec hash", run.specHash ? html`<code>${run.specHash}</code>` : undefined],
      ])
    : html`<p class="muted">No run yet.</p>`
}
<h2 id="history">Run history <span class="muted">(newest first)</span></h2>
${
  object.status?.history?.length
    ? historyTable("history", object.status.history, opts.traceUrlTemplate)
    : html`<p class="muted">No finished run yet.</p>`
}
<h2 id="conditions">Conditions <span class="muted">(as written on the BackupCheck)</span></h2>
${conditionsTable("conditions", object.status?.conditions ?? [])}`
  return page(`fleetcheck: ${check.namespace}/${check.name}`, body, 10)
}
