// The overview's FleetBackupChecks section: one row per FleetBackupCheck (failing first) with its
// FleetVerified verdict, how many selected clusters hold the placed check and verified it, and each
// selected cluster with its own verdict, linked to the placed check's page, and its cross-cluster
// drills (source → target, linked to the drill check in the target). Never green for a cluster or
// drill the hub cannot vouch for: each status is its check's view (fleet.ts rules), and never plain
// green for a missed objective: a FleetBackupCheck whose only fault is ObjectivesMissed, and a cluster
// or drill whose check missed one, show "Verified · objective missed" (amber), as the check rows do.
import type { CheckView, FleetCheckView } from "../../api/fleet.ts"
import { fleetReasons } from "../../api/fleetbackupcheck.ts"
import { type Html, html, nothing } from "../html.ts"
import {
  badge,
  checkBadge,
  checkHref,
  clamped,
  clusterHref,
  isObjectiveMissed,
  objectiveMissedBadge,
  plural,
} from "./layout.ts"

/** A check in the fleet view by cluster, namespace and name (undefined when the view does not hold it). */
export type CheckLookup = (cluster: string, namespace: string, name: string) => CheckView | undefined

/**
 * A cluster's or drill's verdict: the entry's status, amber when the check's own view (when the fleet
 * view holds it) shows it verified with a missed objective.
 */
const entryBadge = (status: string, check: Pick<CheckView, "status" | "objectives"> | undefined): Html =>
  check !== undefined && status === "True" && isObjectiveMissed(check) ? checkBadge(check) : badge(status)

/** How many clusters a row lists before "and N more" (the full list is in the object's status). */
const maxClustersShown = 20

const clusterChip = (f: FleetCheckView, c: FleetCheckView["clusters"][number], lookup: CheckLookup): Html => {
  const title = `${c.name}: ${c.placement}, ${c.reason}${c.message ? `: ${c.message}` : ""}`
  const link =
    c.placement === "Placed" && f.check
      ? checkHref({ cluster: c.name, namespace: f.check.namespace, name: f.check.name })
      : clusterHref(c.name)
  // The check's own view when this page holds it, else what the FleetBackupCheck recorded it missed.
  const placed =
    (c.placement === "Placed" && f.check ? lookup(c.name, f.check.namespace, f.check.name) : undefined) ??
    (c.objectivesMissed && c.objectivesMissed.length > 0
      ? {
          status: c.status,
          objectives: Object.fromEntries(c.objectivesMissed.map((o) => [o, "False" as const])),
        }
      : undefined)
  return html`<li><a href="${link}" title="${title}">${c.name}</a> ${entryBadge(c.status, placed)}${
    c.placement === "Placed" ? nothing : html` <span class="muted">${c.placement}</span>`
  }</li>`
}

/** A drill pair, `source → target`, linked to the drill check in the target; earlier pairs muted. */
const drillChip = (
  f: FleetCheckView,
  d: NonNullable<FleetCheckView["drills"]>[number],
  lookup: CheckLookup,
): Html => {
  const title = `${d.source}'s backup restored in ${d.target} (${d.state}${d.since ? ` since ${d.since}` : ""}): ${d.reason}${d.message ? `: ${d.message}` : ""}`
  const link =
    d.check && f.check
      ? checkHref({ cluster: d.target, namespace: f.check.namespace, name: d.check })
      : clusterHref(d.target)
  const drill = d.check && f.check ? lookup(d.target, f.check.namespace, d.check) : undefined
  return html`<li><a href="${link}" title="${title}">${d.source} → ${d.target}</a> ${entryBadge(d.status, drill)}${
    d.state === "Current" ? nothing : html` <span class="muted">earlier</span>`
  }</li>`
}

/** FleetVerified False only because a placed check missed an objective (every one verified): amber. */
const onlyObjectivesMissed = (f: FleetCheckView) =>
  f.verified.status === "False" && f.verified.reason === fleetReasons.ObjectivesMissed

const row = (f: FleetCheckView, lookup: CheckLookup): Html => {
  const shown = f.clusters.slice(0, maxClustersShown)
  const more = f.clusters.length - shown.length
  const rowClass = onlyObjectivesMissed(f)
    ? "row-warn"
    : f.verified.status === "False"
      ? "row-bad"
      : f.verified.status === "Unknown"
        ? "row-unknown"
        : ""
  return html`<tr class="${rowClass}">
  <td data-label="Fleet verified">${
    onlyObjectivesMissed(f)
      ? objectiveMissedBadge(`FleetVerified False (${fleetReasons.ObjectivesMissed}): ${f.verified.message}`)
      : badge(f.verified.status)
  }</td>
  <td class="name" data-label="Fleet check"><span class="clamp" title="${`${f.namespace}/${f.name}`}">${f.namespace}/<strong>${f.name}</strong></span><div class="muted clamp" title="${f.selector}">${f.selector}</div>${
    f.check ? html`<div class="muted clamp">places ${f.check.namespace}/${f.check.name}</div>` : nothing
  }</td>
  <td class="msg" data-label="Reason"><div class="reason" title="${f.verified.reason}">${f.verified.reason}</div>${clamped(f.verified.message)}</td>
  <td class="num" data-label="Verified">${f.counts.verified} / ${f.counts.selected}</td>
  <td data-label="Clusters"><ul class="chips">${shown.map((c) => clusterChip(f, c, lookup))}${more > 0 ? html`<li class="muted">and ${more} more</li>` : nothing}</ul>${
    f.drills && f.drills.length > 0
      ? html`<div class="muted">drills (source → target)</div><ul class="chips">${f.drills
          .slice(0, maxClustersShown)
          .map((d) => drillChip(f, d, lookup))}${
          f.drills.length > maxClustersShown
            ? html`<li class="muted">and ${f.drills.length - maxClustersShown} more</li>`
            : nothing
        }</ul>`
      : nothing
  }</td>
</tr>`
}

/**
 * The section, or nothing when there is no FleetBackupCheck. `lookup` finds a placed or drill check in
 * the fleet view, for its objectives.
 */
export const fleetChecksSection = (fleetChecks: ReadonlyArray<FleetCheckView>, lookup: CheckLookup): Html =>
  fleetChecks.length === 0
    ? nothing
    : html`<h2 id="fleet-checks">Fleet checks <span class="muted">(FleetBackupChecks, failing first) ${plural(fleetChecks.length, "fleet check")}</span></h2>
<div class="scroll" role="region" aria-labelledby="fleet-checks" tabindex="0"><table class="stack" aria-labelledby="fleet-checks">
<thead><tr><th>Fleet verified</th><th>Fleet check</th><th>Reason</th><th class="num">Verified</th><th>Clusters</th></tr></thead>
<tbody>
${fleetChecks.map((f) => row(f, lookup))}
</tbody>
</table></div>`
