// The overview's FleetBackupChecks section: one row per FleetBackupCheck (failing first) with its
// FleetVerified verdict, how many selected clusters hold the placed check and verified it, and each
// selected cluster with its own verdict, linked to the placed check's page, and its cross-cluster
// drills (source → target, linked to the drill check in the target). Never green for a cluster or
// drill the hub cannot vouch for: each status is its check's view (fleet.ts rules).
import type { FleetCheckView } from "../../api/fleet.ts"
import { type Html, html, nothing } from "../html.ts"
import { badge, checkHref, clamped, clusterHref, plural } from "./layout.ts"

/** How many clusters a row lists before "and N more" (the full list is in the object's status). */
const maxClustersShown = 20

const clusterChip = (f: FleetCheckView, c: FleetCheckView["clusters"][number]): Html => {
  const title = `${c.name}: ${c.placement}, ${c.reason}${c.message ? `: ${c.message}` : ""}`
  const link =
    c.placement === "Placed" && f.check
      ? checkHref({ cluster: c.name, namespace: f.check.namespace, name: f.check.name })
      : clusterHref(c.name)
  return html`<li><a href="${link}" title="${title}">${c.name}</a> ${badge(c.status)}${
    c.placement === "Placed" ? nothing : html` <span class="muted">${c.placement}</span>`
  }</li>`
}

/** A drill pair, `source → target`, linked to the drill check in the target; earlier pairs muted. */
const drillChip = (f: FleetCheckView, d: NonNullable<FleetCheckView["drills"]>[number]): Html => {
  const title = `${d.source}'s backup restored in ${d.target} (${d.state}${d.since ? ` since ${d.since}` : ""}): ${d.reason}${d.message ? `: ${d.message}` : ""}`
  const link =
    d.check && f.check
      ? checkHref({ cluster: d.target, namespace: f.check.namespace, name: d.check })
      : clusterHref(d.target)
  return html`<li><a href="${link}" title="${title}">${d.source} → ${d.target}</a> ${badge(d.status)}${
    d.state === "Current" ? nothing : html` <span class="muted">earlier</span>`
  }</li>`
}

const row = (f: FleetCheckView): Html => {
  const shown = f.clusters.slice(0, maxClustersShown)
  const more = f.clusters.length - shown.length
  const rowClass =
    f.verified.status === "False" ? "row-bad" : f.verified.status === "Unknown" ? "row-unknown" : ""
  return html`<tr class="${rowClass}">
  <td>${badge(f.verified.status)}</td>
  <td class="name"><span class="clamp" title="${`${f.namespace}/${f.name}`}">${f.namespace}/<strong>${f.name}</strong></span><div class="muted clamp" title="${f.selector}">${f.selector}</div>${
    f.check ? html`<div class="muted clamp">places ${f.check.namespace}/${f.check.name}</div>` : nothing
  }</td>
  <td class="msg"><div class="reason" title="${f.verified.reason}">${f.verified.reason}</div>${clamped(f.verified.message)}</td>
  <td class="num">${f.counts.verified} / ${f.counts.selected}</td>
  <td><ul class="chips">${shown.map((c) => clusterChip(f, c))}${more > 0 ? html`<li class="muted">and ${more} more</li>` : nothing}</ul>${
    f.drills && f.drills.length > 0
      ? html`<div class="muted">drills (source → target)</div><ul class="chips">${f.drills
          .slice(0, maxClustersShown)
          .map((d) => drillChip(f, d))}${
          f.drills.length > maxClustersShown
            ? html`<li class="muted">and ${f.drills.length - maxClustersShown} more</li>`
            : nothing
        }</ul>`
      : nothing
  }</td>
</tr>`
}

/** The section, or nothing when there is no FleetBackupCheck. */
export const fleetChecksSection = (fleetChecks: ReadonlyArray<FleetCheckView>): Html =>
  fleetChecks.length === 0
    ? nothing
    : html`<h2 id="fleet-checks">Fleet checks <span class="muted">(FleetBackupChecks, failing first) ${plural(fleetChecks.length, "fleet check")}</span></h2>
<div class="scroll" role="region" aria-labelledby="fleet-checks" tabindex="0"><table aria-labelledby="fleet-checks">
<thead><tr><th>Fleet verified</th><th>Fleet check</th><th>Reason</th><th class="num">Verified</th><th>Clusters</th></tr></thead>
<tbody>
${fleetChecks.map(row)}
</tbody>
</table></div>`
