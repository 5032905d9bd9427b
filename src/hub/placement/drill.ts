// The pure half of cross-cluster drills (spec.drill, ADR 0012 amendment): which member each source's
// backup is restored in this period, the drill BackupCheck placed there, and how the drills' verdicts
// add up. The controller (controller.ts) places drill checks with the same code that places checks.
//
// Rotation: time is cut into rounds of spec.drill.period (round = floor(now / period)). In every round
// each source drills exactly one eligible target (the drill's targets minus the source, sorted by name):
// eligible[(round + offset(source)) mod n], the offset a hash of the source's name so sources spread
// over the targets. Any hub computes the same pair at the same time; over n rounds a source visits
// every target once.
import { createHash } from "node:crypto"
import { toKubeTime } from "../../api/condition.ts"
import { isVerified } from "../../api/fleet.ts"
import {
  type ClusterDrill,
  type ClusterPlacement,
  type Drill,
  fleetReasons,
} from "../../api/fleetbackupcheck.ts"
import { describeSelector, selectorMatches } from "../../api/label-selector.ts"
import { annotationDrillSource, annotationTemplateHash, labelDrillSource } from "../../api/names.ts"
import { parseDuration } from "../../api/syntax.ts"
import { labelValueFor } from "../../reconcile/run-identity.ts"
import { type PlacedCheck, stableJson } from "./plan.ts"

/** Earlier pairs' last verdicts kept per source (status.drills and the source's annotation). */
export const maxPreviousDrillsPerSource = 8

const shortHash = (s: string, n = 10) => createHash("sha256").update(s).digest("hex").slice(0, n)

export const periodMsOf = (drill: Drill): number => {
  const ms = parseDuration(drill.period)
  return typeof ms === "number" ? ms : Number.NaN
}

export const roundOf = (nowMs: number, periodMs: number): number => Math.floor(nowMs / periodMs)

/** The target a source drills in `round`, among `eligible` (sorted, never containing the source). */
export const rotatedTarget = (
  source: string,
  eligible: ReadonlyArray<string>,
  round: number,
): string | undefined => {
  if (eligible.length === 0) return undefined
  const offset = Number.parseInt(shortHash(source, 8), 16)
  return eligible[(round + offset) % eligible.length]
}

/** A source's drill this round: its target, or why it has none (a clear condition, never green). */
export type SourceDrill =
  | { readonly source: string; readonly target: string }
  | { readonly source: string; readonly problem: { readonly reason: string; readonly message: string } }

/**
 * Each source's drill this round. `clusters` are every MemberCluster (name, labels): targets are the
 * named ones that exist, or the ones the selector matches.
 */
export const planDrills = (
  drill: Drill,
  sources: ReadonlyArray<string>,
  clusters: ReadonlyArray<{ readonly name: string; readonly labels: Readonly<Record<string, string>> }>,
  round: number,
): SourceDrill[] => {
  const existing = new Set(clusters.map((c) => c.name))
  const targets = drill.targetClusters
    ? [...new Set(drill.targetClusters.filter((n) => existing.has(n)))].sort()
    : clusters
        .filter((c) => selectorMatches(drill.targetSelector ?? {}, c.labels))
        .map((c) => c.name)
        .sort()
  const what = drill.targetClusters
    ? `spec.drill.targetClusters (${drill.targetClusters.join(", ").slice(0, 512)})`
    : `spec.drill.targetSelector (${describeSelector(drill.targetSelector ?? {})})`
  return sources.map((source): SourceDrill => {
    const eligible = targets.filter((t) => t !== source)
    const target = rotatedTarget(source, eligible, round)
    if (target !== undefined) return { source, target }
    return targets.includes(source)
      ? {
          source,
          problem: {
            reason: fleetReasons.DrillTargetIsSource,
            message: `${what} leaves only ${source} itself as the drill target of ${source}: a drill restores a backup in another cluster`,
          },
        }
      : {
          source,
          problem: {
            reason: fleetReasons.NoDrillTargets,
            message: `${what} matches no MemberCluster: ${source}'s backup is not restored anywhere else`,
          },
        }
  })
}

/**
 * The names in spec.drill.targetClusters that are no MemberCluster (sorted, each once). They are left
 * out of the rotation, and said so (withMissingDrillTargets): a misspelt or unregistered target must
 * not look drilled.
 */
export const missingDrillTargets = (
  drill: Drill,
  clusters: ReadonlyArray<{ readonly name: string }>,
): string[] => {
  if (!drill.targetClusters) return []
  const existing = new Set(clusters.map((c) => c.name))
  return [...new Set(drill.targetClusters.filter((n) => !existing.has(n)))].sort()
}

/** Why the missing targets are not drilled, for the Placed condition and an Event. */
export const missingDrillTargetsMessage = (missing: ReadonlyArray<string>): string =>
  `spec.drill.targetClusters names ${missing.length === 1 ? "a cluster" : `${missing.length} clusters`} with no MemberCluster (${listed(missing, (n) => n.slice(0, 253))}): ${missing.length === 1 ? "it is" : "they are"} not drilled until registered`

/**
 * Folds missing drill targets into Placed: False DrillTargetNotFound, as a problem beats unknown beats
 * ok; a Placed already False keeps its reason and gets the message appended. FleetVerified is left
 * alone: the drills that run are judged as before, and a spec naming no member at all is NoDrillTargets.
 */
export const withMissingDrillTargets = <
  C extends { status: "True" | "False" | "Unknown"; reason: string; message: string },
>(
  placedCondition: C,
  missing: ReadonlyArray<string>,
): C => {
  if (missing.length === 0) return placedCondition
  const message = missingDrillTargetsMessage(missing)
  return placedCondition.status === "False"
    ? { ...placedCondition, message: `${placedCondition.message}; ${message}` }
    : { ...placedCondition, status: "False", reason: fleetReasons.DrillTargetNotFound, message }
}

/** The drill check's name in the target: `<placed name>-drill-<source>-r<round>` (a fresh run each round). */
export const drillCheckName = (placedName: string, source: string, round: number): string => {
  const plain = `${placedName}-drill-${source}-r${round}`
  return plain.length <= 253 ? plain : `${placedName.slice(0, 200)}-drill-${shortHash(plain)}-r${round}`
}

/**
 * The drill BackupCheck a source's drill places in its target: the placed check's spec with the
 * source's backup reference and spec.backup.cluster = source. It runs once (its round's own check): no
 * schedule, time zone or start window.
 */
export const drillCheckOf = (want: PlacedCheck, source: string, round: number): PlacedCheck => {
  const { schedule: _s, timeZone: _tz, startWindow: _w, ...rest } = want.spec
  const spec = { ...rest, backup: { ...want.spec.backup, cluster: source } }
  const labels = { ...want.labels, [labelDrillSource]: labelValueFor(source) }
  const { [annotationTemplateHash]: _h, ...annotations } = want.annotations
  const withSource = { ...annotations, [annotationDrillSource]: source }
  const hash = createHash("sha256")
    .update(stableJson({ labels, annotations: withSource, spec }))
    .digest("hex")
    .slice(0, 16)
  return {
    namespace: want.namespace,
    name: drillCheckName(want.name, source, round),
    labels,
    annotations: { ...withSource, [annotationTemplateHash]: hash },
    spec: spec as PlacedCheck["spec"],
    hash,
  }
}

/** A drill's status entry from its placement entry in the target (the placed-check view rules). */
export const drillEntry = (
  source: string,
  target: string,
  check: string,
  sinceMs: number,
  placed: ClusterPlacement,
): ClusterDrill => ({
  source,
  target,
  state: "Current",
  check,
  since: toKubeTime(sinceMs),
  verified: placed.verified,
  reason: placed.reason,
  ...(placed.message ? { message: placed.message } : {}),
  ...(placed.lastSuccessfulTime ? { lastSuccessfulTime: placed.lastSuccessfulTime } : {}),
  ...(placed.lastRun ? { lastRun: placed.lastRun } : {}),
})

/**
 * status.drills: this round's drills, then each source's earlier pairs (from the last status) as
 * Previous with the verdict they last had, newest first, at most maxPreviousDrillsPerSource per source;
 * sources no longer selected are dropped.
 */
export const mergeDrills = (
  current: ReadonlyArray<ClusterDrill>,
  previous: ReadonlyArray<ClusterDrill>,
  sources: ReadonlySet<string>,
): ClusterDrill[] => {
  const currentPair = new Set(current.map((d) => `${d.source} ${d.target}`))
  const earlier = previous
    .filter((d) => sources.has(d.source) && !currentPair.has(`${d.source} ${d.target}`))
    .map((d): ClusterDrill => ({ ...d, state: "Previous" }))
    .sort((a, b) => (Date.parse(b.since ?? "") || 0) - (Date.parse(a.since ?? "") || 0))
  const kept = new Map<string, number>()
  const out = [...current]
  for (const d of earlier) {
    const n = kept.get(d.source) ?? 0
    if (n >= maxPreviousDrillsPerSource) continue
    kept.set(d.source, n + 1)
    out.push(d)
  }
  return out.sort((a, b) =>
    a.source !== b.source
      ? a.source < b.source
        ? -1
        : 1
      : a.state !== b.state
        ? a.state === "Current"
          ? -1
          : 1
        : a.target < b.target
          ? -1
          : a.target > b.target
            ? 1
            : 0,
  )
}

/** What the drills add to FleetVerified: pairs that failed, sources without a drill, pairs not verified. */
export interface DrillVerdicts {
  readonly failing: ReadonlyArray<ClusterDrill>
  readonly problems: ReadonlyArray<{
    readonly source: string
    readonly reason: string
    readonly message: string
  }>
  readonly unknown: ReadonlyArray<ClusterDrill>
  readonly verified: ReadonlyArray<ClusterDrill>
}

/** Reasons a drill's target could not be seen (fleet-state.ts unseenBecause): never covered by history. */
const unseenReasons = new Set([
  "ClusterUnreachable",
  "CatchingUp",
  "CachesNotSynced",
  "Forbidden",
  "WatchFailing",
])

/**
 * Judges each source's drill. A current drill False is failing; True is verified. A current drill not
 * verified yet (its round just began, its run is running) counts as verified only when an earlier drill
 * of the same source succeeded within the last period, in a target the hub can see now ("every
 * source's backup restored elsewhere within the period"); an unseen target is unknown, never green.
 */
export const judgeDrills = (
  drills: ReadonlyArray<ClusterDrill>,
  problems: DrillVerdicts["problems"],
  nowMs: number,
  periodMs: number,
): DrillVerdicts => {
  const failing: ClusterDrill[] = []
  const unknown: ClusterDrill[] = []
  const verified: ClusterDrill[] = []
  for (const d of drills.filter((x) => x.state === "Current")) {
    if (d.verified === "False") failing.push(d)
    else if (isVerified({ status: d.verified })) verified.push(d)
    else {
      const pending = !unseenReasons.has(d.reason)
      const recent = drills.some(
        (p) =>
          p.source === d.source &&
          p.state === "Previous" &&
          p.lastSuccessfulTime !== undefined &&
          nowMs - Date.parse(p.lastSuccessfulTime) <= periodMs,
      )
      if (pending && recent) verified.push(d)
      else unknown.push(d)
    }
  }
  return { failing, problems, unknown, verified }
}

const pair = (d: ClusterDrill) => `${d.source} → ${d.target}`
const listed = <T>(items: ReadonlyArray<T>, show: (t: T) => string, max = 5) =>
  items.slice(0, max).map(show).join("; ") + (items.length > max ? `; and ${items.length - max} more` : "")

/** Folds the drill verdicts into FleetVerified: a problem beats unknown beats ok, as for placement. */
export const withDrills = <
  C extends { status: "True" | "False" | "Unknown"; reason: string; message: string },
>(
  verifiedCondition: C,
  v: DrillVerdicts,
): C => {
  const failed =
    v.failing.length > 0
      ? `drills failing: ${listed(v.failing, (d) => `${pair(d)} (${d.reason}${d.message ? `: ${d.message.slice(0, 200)}` : ""})`)}`
      : ""
  const broken =
    v.problems.length > 0
      ? `no drill: ${listed(v.problems, (p) => `${p.source} (${p.reason}: ${p.message})`)}`
      : ""
  const bad = [failed, broken].filter((s) => s !== "").join("; ")
  if (verifiedCondition.status === "False")
    return bad === ""
      ? verifiedCondition
      : { ...verifiedCondition, message: `${verifiedCondition.message}; ${bad}` }
  if (bad !== "")
    return {
      ...verifiedCondition,
      status: "False",
      reason:
        v.failing.length > 0
          ? fleetReasons.DrillFailing
          : (v.problems[0]?.reason ?? fleetReasons.DrillFailing),
      message: bad,
    }
  if (verifiedCondition.status === "Unknown") return verifiedCondition
  if (v.unknown.length > 0)
    return {
      ...verifiedCondition,
      status: "Unknown",
      reason: fleetReasons.DrillPending,
      message: `${verifiedCondition.message}; drills not verified yet: ${listed(v.unknown, (d) => `${pair(d)} (${d.reason})`)}`,
    }
  return v.verified.length === 0
    ? verifiedCondition
    : {
        ...verifiedCondition,
        message: `${verifiedCondition.message}; drills verified: ${listed(v.verified, pair)}`,
      }
}

/** The source side's record (annotation fleetcheck.io/drills): the latest verdict per target, newest first. */
export const sourceAnnotation = (drills: ReadonlyArray<ClusterDrill>, source: string): string =>
  JSON.stringify(
    drills
      .filter((d) => d.source === source)
      .slice(0, 1 + maxPreviousDrillsPerSource)
      .map((d) => ({
        target: d.target,
        state: d.state,
        verified: d.verified,
        reason: d.reason,
        ...(d.since ? { since: d.since } : {}),
        ...(d.lastSuccessfulTime ? { lastSuccessfulTime: d.lastSuccessfulTime } : {}),
        ...(d.lastRun ? { runID: d.lastRun.runID, result: d.lastRun.result } : {}),
      })),
  )
