// Placement (ADR 0012): the hub's FleetBackupCheck controller, leader-only like all leader work. It
// watches FleetBackupChecks in the hub namespace and MemberClusters (their labels are what a selector
// picks), and for each FleetBackupCheck keeps one placed BackupCheck in every selected member, written
// through that member engine's own fenced client and read from its own cache (MemberEntry.access):
//
//   invalid spec             Placed/FleetVerified False (InvalidSpec, InvalidSelector); nothing touched
//   deleting                 delete every placed check (the member's reconciler releases it through the
//                            normal BackupCheck deletion path); the finalizer goes once none is left, or
//                            their members are gone (MemberCluster deleted)
//   selected, reachable      create (fieldValidation=Strict) or replace (PUT, resourceVersion) until the
//                            cached check is ours and current; a check of that name not placed from here
//                            is never touched: Conflict, an Event
//   selected, not reachable  Pending, verdict Unknown: nothing is written, nothing turns green
//   no longer selected       its placed check is deleted (Removing until the member's cache shows it gone)
//
// Each cluster's verdict is its placed check's view by the fleet rules (fleet-state.ts checkView): Unknown
// while unreachable or not verified for the check's current generation, and Unknown while the cached
// check does not yet say what the template says. Reconciles requeue every status interval (member
// reachability has no event); placed checks' changes in a member queue their FleetBackupCheck at once.
import { Clock, Effect, type Scope } from "effect"
import type { BackupCheck } from "../../api/backupcheck.ts"
import { setStatusCondition, toKubeTime } from "../../api/condition.ts"
import type { FleetCheckView } from "../../api/fleet.ts"
import {
  type ClusterDrill,
  type ClusterPlacement,
  type FleetBackupCheck,
  type FleetBackupCheckStatus,
  fleetConditionTypes,
  fleetEventReasons,
  fleetReasons,
  keyOfPlacementLabel,
  parseFleetBackupCheck,
  placementLabelError,
  placementLabelValue,
} from "../../api/fleetbackupcheck.ts"
import { describeSelector, selectorMatches } from "../../api/label-selector.ts"
import { type MemberCluster, propertiesOf } from "../../api/membercluster.ts"
import {
  annotationDrills,
  apiVersion,
  fleetBackupCheckKind,
  labelFleetBackupCheck,
  placementFinalizer,
  reportingController,
} from "../../api/names.ts"
import { runController } from "../../engine/controller.ts"
import { makeInformer } from "../../engine/informer/informer.ts"
import { ItemExponentialFailureRateLimiter } from "../../engine/workqueue/rate-limiter.ts"
import { makeWorkQueue } from "../../engine/workqueue/workqueue.ts"
import { isNotFound, KubeApiError, type KubeClient } from "../../kube/client.ts"
import { backupChecks, events, fleetBackupChecks, memberClusters, pathOf } from "../../kube/resources.ts"
import { checkView, type MemberAccess, type MemberEntry, unseenBecause } from "../fleet-state.ts"
import {
  type DrillVerdicts,
  drillCheckOf,
  drillEntry,
  judgeDrills,
  mergeDrills,
  missingDrillTargets,
  missingDrillTargetsMessage,
  periodMsOf,
  planDrills,
  roundOf,
  sourceAnnotation,
  withDrills,
  withMissingDrillTargets,
} from "./drill.ts"
import {
  countsOf,
  fleetConditions,
  isCurrent,
  isPlacedBy,
  type PlacedCheck,
  placedCheckOf,
  placedEntry,
  placedObject,
  replacedObject,
  type SpecProblem,
  stableJson,
  unverifiedEntry,
} from "./plan.ts"

export interface PlacementOptions {
  /** The hub's fenced client. */
  readonly hubClient: KubeClient
  /** The hub namespace: FleetBackupChecks are watched here only. */
  readonly namespace: string
  /** The hub's members (the registration's map): each running engine's access. */
  readonly members: ReadonlyMap<string, MemberEntry>
  /** How often every FleetBackupCheck is recomputed (the MemberCluster status cadence). */
  readonly statusIntervalMs: number
  readonly resyncMs: number
  /** Who writes Events (the hub's identity). */
  readonly reportingInstance: string
  /** The views the fleet API, dashboard and metrics show: set after each reconcile, removed with it. */
  readonly views: Map<string, FleetCheckView>
  /** Told of each view as it is set, and of each FleetBackupCheck gone (the metrics). */
  readonly onView: (view: FleetCheckView) => void
  readonly onGone: (namespace: string, name: string) => void
  /**
   * The client placed checks are written with in a member: its engine's own (fenced like all leader
   * work) unless given. With sharding, the placement Lease's holder writes through the member's
   * connection fenced by that Lease, in members other replicas work (ADR 0011 decision 8).
   */
  readonly memberWriter?: (access: MemberAccess) => KubeClient
}

/** Placement only talks to the hub and, briefly, to members (fenced, under the global limit). */
const workers = 2
/** A member refusing a placed check is asked again after 5 s, doubling to 5 min (per cluster and template). */
const refusalBackoff = { baseDelayMs: 5_000, maxDelayMs: 300_000 }

const namespaceOf = (c: BackupCheck) => c.metadata.namespace ?? ""
const checkKeyOf = (c: { metadata?: { namespace?: string; name?: string } }) =>
  `${c.metadata?.namespace ?? ""}/${c.metadata?.name ?? ""}`

/** Why the member refused a write, when no retry without a change can help (else undefined: retry). */
const refusalOf = (e: unknown): string | undefined =>
  e instanceof KubeApiError && [400, 403, 404, 422].includes(e.status)
    ? `${e.status} ${e.reason || "Error"}: ${e.message}`
    : undefined

export const problemOf = (fbc: unknown, namespace: string, name: string): SpecProblem | undefined => {
  const nameError = placementLabelError(namespace, name)
  if (nameError) return { reason: fleetReasons.InvalidSpec, message: `metadata.name: ${nameError}` }
  const parsed = parseFleetBackupCheck(fbc)
  if (parsed.success) return undefined
  const selectorOnly = parsed.issues.every((i) => i.path[0] === "spec" && i.path[1] === "clusterSelector")
  return {
    reason: selectorOnly ? fleetReasons.InvalidSelector : fleetReasons.InvalidSpec,
    message: parsed.error,
  }
}

/** The FleetBackupCheck as the fleet API shows it (see FleetCheckViewSchema). */
export const viewOf = (
  fbc: FleetBackupCheck,
  status: FleetBackupCheckStatus,
  shown: { readonly selector: string; readonly check?: { namespace: string; name: string } },
): FleetCheckView => {
  const conditionOf = (type: string) => {
    const c = status.conditions?.find((x) => x.type === type)
    return c
      ? { status: c.status, reason: c.reason, message: c.message }
      : { status: "Unknown" as const, reason: "NotYetReconciled", message: "" }
  }
  return {
    namespace: fbc.metadata.namespace,
    name: fbc.metadata.name,
    selector: shown.selector,
    ...(shown.check ? { check: shown.check } : {}),
    generation: fbc.metadata.generation ?? 0,
    placed: conditionOf(fleetConditionTypes.Placed),
    verified: conditionOf(fleetConditionTypes.FleetVerified),
    // In one order whatever the source (a status read back from the API server has its keys sorted).
    counts: {
      selected: status.counts?.selected ?? 0,
      placed: status.counts?.placed ?? 0,
      verified: status.counts?.verified ?? 0,
      failed: status.counts?.failed ?? 0,
      unknown: status.counts?.unknown ?? 0,
    },
    clusters: (status.clusters ?? []).map((c) => ({
      name: c.name,
      placement: c.placement,
      status: c.verified,
      reason: c.reason,
      ...(c.message ? { message: c.message } : {}),
      ...(c.objectivesMissed && c.objectivesMissed.length > 0
        ? { objectivesMissed: [...c.objectivesMissed] }
        : {}),
      ...(c.lastSuccessfulTime ? { lastSuccessfulTime: c.lastSuccessfulTime } : {}),
      ...(c.lastRun ? { runID: c.lastRun.runID } : {}),
    })),
    ...(status.drills && status.drills.length > 0
      ? {
          drills: status.drills.map((d) => ({
            source: d.source,
            target: d.target,
            state: d.state,
            status: d.verified,
            reason: d.reason,
            ...(d.check ? { check: d.check } : {}),
            ...(d.since ? { since: d.since } : {}),
            ...(d.message ? { message: d.message } : {}),
            ...(d.lastSuccessfulTime ? { lastSuccessfulTime: d.lastSuccessfulTime } : {}),
            ...(d.lastRun ? { runID: d.lastRun.runID } : {}),
          })),
        }
      : {}),
  }
}

export const runPlacement = Effect.fnUntraced(function* (options: PlacementOptions) {
  const { hubClient, namespace, members } = options
  const writerOf = options.memberWriter ?? ((access: MemberAccess) => access.client)
  const fbcs = yield* makeInformer<FleetBackupCheck>({
    client: hubClient,
    name: "fleetbackupchecks",
    resource: fleetBackupChecks,
    namespace,
    resyncMs: options.resyncMs,
  })
  const clusters = yield* makeInformer<MemberCluster>({
    client: hubClient,
    name: "memberclusters",
    resource: memberClusters,
    resyncMs: options.resyncMs,
  })
  const queue = yield* makeWorkQueue({ name: "placement" })
  const enqueueAll = () => {
    for (const key of fbcs.store.keys()) queue.addUnsafe(key)
  }
  fbcs.addHandler({
    onAdd: (o) => queue.addUnsafe(checkKeyOf(o)),
    onUpdate: (_, o) => queue.addUnsafe(checkKeyOf(o)),
    onDelete: (o) => queue.addUnsafe(checkKeyOf(o)),
  })
  // Membership: a MemberCluster added, relabelled or removed may change any selection.
  clusters.addHandler({
    onAdd: enqueueAll,
    onUpdate: (a, b) => {
      if (
        stableJson(a.metadata.labels ?? {}) !== stableJson(b.metadata.labels ?? {}) ||
        stableJson(a.status?.properties ?? []) !== stableJson(b.status?.properties ?? [])
      )
        enqueueAll()
    },
    onDelete: enqueueAll,
  })

  // Per member cache: the placed checks (labelled) by check key, kept by a handler on the engine's
  // cache, so finding what a FleetBackupCheck placed never scans a member's every check.
  const placedIn = new WeakMap<MemberAccess["checks"], Map<string, string>>()
  const watchMember = (access: MemberAccess) => {
    if (placedIn.has(access.checks)) return
    const placed = new Map<string, string>()
    placedIn.set(access.checks, placed)
    const seen = (c: BackupCheck) => {
      const value = c.metadata.labels?.[labelFleetBackupCheck]
      const key = checkKeyOf(c)
      const before = placed.get(key)
      if (value) placed.set(key, value)
      else placed.delete(key)
      for (const v of [before, value]) {
        const fbc = keyOfPlacementLabel(v)
        if (fbc) queue.addUnsafe(fbc)
      }
    }
    access.checks.addHandler({
      onAdd: seen,
      onUpdate: (_, c) => seen(c),
      onDelete: (c) => {
        const key = checkKeyOf(c)
        const fbc = keyOfPlacementLabel(placed.get(key))
        placed.delete(key)
        if (fbc) queue.addUnsafe(fbc)
      },
    })
  }
  /** The member's access when the hub can vouch for its cache now; else why not. */
  const visible = (m: MemberEntry | undefined) => {
    if (!m?.access || !m.synced)
      return {
        unseen: (m && unseenBecause(m)) ?? {
          reason: m ? "CachesNotSynced" : "ClusterUnreachable",
          message: m ? `cluster ${m.name}: caches not synced yet` : "no engine runs for this member",
        },
      }
    watchMember(m.access)
    const unseen = unseenBecause(m)
    return unseen ? { unseen } : { access: m.access, entry: m }
  }
  /** Checks placed by `labelValue` in a member, from its cache. */
  const placedBy = (access: MemberAccess, labelValue: string): BackupCheck[] =>
    [...(placedIn.get(access.checks) ?? new Map<string, string>())]
      .filter(([, v]) => v === labelValue)
      .flatMap(([key]) => {
        const c = access.checks.store.get(key)
        return c && isPlacedBy(c, labelValue) ? [c] : []
      })

  const refusals = new ItemExponentialFailureRateLimiter(refusalBackoff)
  const refused = new Map<
    string,
    { readonly hash: string; readonly message: string; readonly retryAt: number }
  >()
  const announced = new Map<string, string>()

  const recordEvent = (fbc: FleetBackupCheck, reason: string, message: string) =>
    Effect.gen(function* () {
      const now = new Date(yield* Clock.currentTimeMillis).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z")
      yield* hubClient
        .request({
          method: "POST",
          path: pathOf(events, { namespace }),
          body: {
            apiVersion: "events.k8s.io/v1",
            kind: "Event",
            metadata: {
              name: `${fbc.metadata.name}.${Date.now().toString(16)}${Math.random().toString(16).slice(2, 8)}`,
              namespace,
            },
            eventTime: now,
            reportingController,
            reportingInstance: options.reportingInstance,
            action: "Place",
            reason,
            type: "Warning",
            note: message.slice(0, 1024),
            regarding: {
              apiVersion,
              kind: fleetBackupCheckKind,
              namespace,
              name: fbc.metadata.name,
              uid: fbc.metadata.uid,
            },
          },
        })
        .pipe(
          Effect.catch((e) =>
            Effect.logWarning("recording an Event failed").pipe(Effect.annotateLogs({ error: e.message })),
          ),
        )
    })
  /** One Event per cluster and message while it lasts. */
  const announce = (fbc: FleetBackupCheck, cluster: string, reason: string, message: string) => {
    const key = `${checkKeyOf(fbc)} ${cluster}`
    if (announced.get(key) === message) return Effect.void
    announced.set(key, message)
    return Effect.andThen(
      Effect.logWarning("placement problem; recorded as an Event").pipe(
        Effect.annotateLogs({ member: cluster, reason, error: message }),
      ),
      recordEvent(fbc, reason, `${cluster}: ${message}`),
    )
  }

  /**
   * Brings the placed check (or a drill check: `slot` keeps its Events and backoff apart) in one
   * cluster to what `want` says; returns its status entry.
   */
  const placeIn = (fbc: FleetBackupCheck, want: PlacedCheck, cluster: string, slot = "") =>
    Effect.gen(function* () {
      const seen = visible(members.get(cluster))
      if (!seen.access) return unverifiedEntry(cluster, "Pending", seen.unseen.reason, seen.unseen.message)
      const { access, entry } = seen
      const labelValue = placementLabelValue(fbc.metadata.namespace, fbc.metadata.name)
      const where = `${want.namespace}/${want.name}`
      if (access.namespaces !== undefined && !access.namespaces.includes(want.namespace)) {
        const message = `namespace ${want.namespace} is outside the member's scope (fleetcheck.io/namespaces: ${access.namespaces.join(",")})`
        yield* announce(fbc, cluster + slot, fleetEventReasons.PlacementRefused, message)
        return unverifiedEntry(cluster, "Refused", "OutOfScope", message, "False")
      }
      const existing = access.checks.store.get(where)
      if (existing && !isPlacedBy(existing, labelValue)) {
        const owner = existing.metadata.labels?.[labelFleetBackupCheck]
        const message = `BackupCheck ${where} exists and was not placed by this FleetBackupCheck (${owner ? `placed by ${owner}` : "written by hand"}); it is left alone`
        yield* announce(fbc, cluster + slot, fleetEventReasons.PlacementConflict, message)
        return unverifiedEntry(cluster, "Conflict", "NameConflict", message, "False")
      }
      if (existing?.metadata.deletionTimestamp)
        return unverifiedEntry(
          cluster,
          "Pending",
          "PlacementPending",
          `the earlier placed check ${where} is being deleted; it is placed again once it is gone`,
        )
      if (existing && isCurrent(existing, want)) {
        announced.delete(`${checkKeyOf(fbc)} ${cluster}${slot}`)
        return placedEntry(cluster, checkView(entry, existing), existing)
      }
      const refusalKey = `${checkKeyOf(fbc)} ${cluster}${slot}`
      const now = yield* Clock.currentTimeMillis
      const last = refused.get(refusalKey)
      if (last && last.hash === want.hash && now < last.retryAt)
        return unverifiedEntry(cluster, "Refused", "PlacementRefused", last.message, "False")
      const write = existing
        ? writerOf(access).request({
            method: "PUT",
            path: pathOf(backupChecks, { namespace: want.namespace, name: want.name }),
            query: { fieldValidation: "Strict" },
            body: replacedObject(existing, want),
          })
        : writerOf(access).request({
            method: "POST",
            path: pathOf(backupChecks, { namespace: want.namespace }),
            query: { fieldValidation: "Strict" },
            body: placedObject(want),
          })
      const result = yield* Effect.result(write)
      if (result._tag === "Success") {
        refused.delete(refusalKey)
        refusals.forget(refusalKey)
        yield* Effect.logInfo(existing ? "placed check updated" : "placed check created").pipe(
          Effect.annotateLogs({ member: cluster, check: where }),
        )
        return unverifiedEntry(
          cluster,
          "Pending",
          "PlacementPending",
          `${existing ? "updated" : "created"} ${where}; waiting for the member's cache`,
        )
      }
      const refusal = refusalOf(result.failure)
      if (refusal) {
        const message = `the member refused BackupCheck ${where}: ${refusal}`
        refused.set(refusalKey, { hash: want.hash, message, retryAt: now + refusals.when(refusalKey, now) })
        yield* announce(fbc, cluster + slot, fleetEventReasons.PlacementRefused, message)
        return unverifiedEntry(cluster, "Refused", "PlacementRefused", message, "False")
      }
      yield* Effect.logWarning("writing a placed check failed; retrying").pipe(
        Effect.annotateLogs({ member: cluster, check: where, error: result.failure.message }),
      )
      return unverifiedEntry(
        cluster,
        "Pending",
        "PlacementPending",
        `writing ${where} failed: ${result.failure.message}`,
      )
    })

  /** Deletes a placed check (the member's reconciler cleans its Jobs and releases its finalizer). */
  const unplace = (access: MemberAccess, cluster: string, check: BackupCheck) =>
    check.metadata.deletionTimestamp
      ? Effect.void
      : writerOf(access)
          .request({
            method: "DELETE",
            path: pathOf(backupChecks, { namespace: namespaceOf(check), name: check.metadata.name }),
            body: {
              apiVersion: "v1",
              kind: "DeleteOptions",
              preconditions: { uid: check.metadata.uid },
            },
          })
          .pipe(
            Effect.catchIf(isNotFound, () => Effect.void),
            Effect.tap(() =>
              Effect.logInfo("placed check deleted").pipe(
                Effect.annotateLogs({ member: cluster, check: checkKeyOf(check) }),
              ),
            ),
            Effect.catch((e) =>
              Effect.logWarning("deleting a placed check failed; retrying").pipe(
                Effect.annotateLogs({ member: cluster, check: checkKeyOf(check), error: e.message }),
              ),
            ),
          )

  /**
   * Deletes this FleetBackupCheck's placed checks that `keep` does not want, in every member the hub
   * can see; members it cannot see that may hold one (recorded in the last status, MemberCluster still
   * there) stay Removing until they answer.
   */
  const removeUnwanted = (
    fbc: FleetBackupCheck,
    keep: (cluster: string, check: BackupCheck) => boolean,
    listed: ReadonlySet<string>,
  ) =>
    Effect.gen(function* () {
      const labelValue = placementLabelValue(fbc.metadata.namespace, fbc.metadata.name)
      const removing: ClusterPlacement[] = []
      const seenClusters = new Set<string>()
      for (const m of members.values()) {
        const seen = visible(m)
        if (!seen.access) continue
        seenClusters.add(m.name)
        const unwanted = placedBy(seen.access, labelValue).filter((c) => !keep(m.name, c))
        for (const c of unwanted) yield* unplace(seen.access, m.name, c)
        if (unwanted.length > 0 && !listed.has(m.name))
          removing.push(
            unverifiedEntry(
              m.name,
              "Removing",
              "Removing",
              `deleting ${unwanted.map(checkKeyOf).join(", ")}`.slice(0, 1024),
            ),
          )
      }
      // Drill targets (status.drills) may hold a drill check too; while the FleetBackupCheck lives, a
      // stale one is removed when its target is seen again, so they count only once it is deleted.
      const drillTargets = fbc.metadata.deletionTimestamp
        ? [...new Set((fbc.status?.drills ?? []).map((d) => d.target))]
            .filter((name) => !(fbc.status?.clusters ?? []).some((c) => c.name === name))
            .map((name) => ({ name, placement: "Placed" as const }))
        : []
      for (const prev of [...(fbc.status?.clusters ?? []), ...drillTargets]) {
        if (listed.has(prev.name) || seenClusters.has(prev.name)) continue
        if (!clusters.store.has(prev.name)) continue // the member is gone: nothing left to remove
        if (prev.placement === "Conflict" || prev.placement === "Refused") continue // never placed there
        const why = visible(members.get(prev.name)).unseen
        removing.push(
          unverifiedEntry(
            prev.name,
            "Removing",
            why?.reason ?? "ClusterUnreachable",
            `may still hold a placed check; removed once the hub can see the member again (${why?.message ?? "unreachable"})`,
          ),
        )
      }
      return removing
    })

  /** Publishes the view (fleet API, dashboard, metrics), then writes the status when it changed. */
  const writeStatus = (
    fbc: FleetBackupCheck,
    resourceVersion: string | undefined,
    entries: ReadonlyArray<ClusterPlacement>,
    conditions: ReturnType<typeof fleetConditions>,
    shown: {
      readonly selector: string
      readonly check?: { namespace: string; name: string }
      readonly drills?: ReadonlyArray<ClusterDrill>
    },
  ) =>
    Effect.gen(function* () {
      const now = yield* Clock.currentTimeMillis
      let next = fbc.status?.conditions
      for (const c of conditions) next = setStatusCondition(next, c, toKubeTime(now)).conditions
      const sorted = [...entries].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0))
      const status: FleetBackupCheckStatus = {
        observedGeneration: fbc.metadata.generation ?? 0,
        conditions: next ?? [],
        counts: countsOf(sorted),
        clusters: sorted,
        ...(shown.drills && shown.drills.length > 0 ? { drills: [...shown.drills] } : {}),
      }
      const view = viewOf(fbc, status, shown)
      options.views.set(checkKeyOf(fbc), view)
      options.onView(view)
      if (stableJson(status) === stableJson(fbc.status ?? {})) return
      yield* hubClient.request({
        method: "PATCH",
        path: pathOf(fleetBackupChecks, { namespace, name: fbc.metadata.name, subresource: "status" }),
        contentType: "application/merge-patch+json",
        // A merge patch keeps what it does not mention: drills gone from the spec are removed by null.
        body: {
          metadata: { resourceVersion },
          status: fbc.status?.drills && !status.drills ? { ...status, drills: null } : status,
        },
      })
    })

  const patchFinalizers = (fbc: FleetBackupCheck, finalizers: ReadonlyArray<string>) =>
    hubClient.request<FleetBackupCheck>({
      method: "PATCH",
      path: pathOf(fleetBackupChecks, { namespace, name: fbc.metadata.name }),
      contentType: "application/merge-patch+json",
      body: { metadata: { resourceVersion: fbc.metadata.resourceVersion, finalizers } },
    })

  /**
   * Places this round's drill checks (one per source, in its rotated target) and judges them: the
   * status entries (this round's and the earlier pairs' last verdicts), the drill checks to keep
   * (`cluster namespace/name`), and when the next round starts.
   */
  const drillsOf = (fbc: FleetBackupCheck, want: PlacedCheck, sources: ReadonlyArray<string>, now: number) =>
    Effect.gen(function* () {
      const drill = fbc.spec.drill!
      const periodMs = periodMsOf(drill)
      const round = roundOf(now, periodMs)
      const plan = planDrills(
        drill,
        sources,
        clusters.store.list().map((mc) => ({ name: mc.metadata.name, labels: mc.metadata.labels ?? {} })),
        round,
      )
      const current: ClusterDrill[] = []
      const placed: string[] = []
      const problems: Array<DrillVerdicts["problems"][number]> = []
      for (const d of plan) {
        if (!("target" in d)) {
          problems.push({ source: d.source, ...d.problem })
          continue
        }
        const check = drillCheckOf(want, d.source, round)
        placed.push(`${d.target} ${check.namespace}/${check.name}`)
        const entry = yield* placeIn(fbc, check, d.target, ` (drill of ${d.source})`)
        current.push(drillEntry(d.source, d.target, check.name, round * periodMs, entry))
      }
      const entries = mergeDrills(current, fbc.status?.drills ?? [], new Set(sources))
      const missing = missingDrillTargets(
        drill,
        clusters.store.list().map((mc) => mc.metadata),
      )
      // One Event per distinct list (announce), so a reconcile every status interval repeats nothing.
      if (missing.length > 0)
        yield* announce(
          fbc,
          "drill targets",
          fleetEventReasons.DrillTargetNotFound,
          missingDrillTargetsMessage(missing),
        )
      else announced.delete(`${checkKeyOf(fbc)} drill targets`)
      return {
        entries,
        missing,
        placed,
        verdicts: judgeDrills(entries, problems, now, periodMs),
        nextRoundAt: (round + 1) * periodMs,
      }
    })

  /**
   * The source side: each source's placed check carries its drills' latest verdict per target
   * (annotation fleetcheck.io/drills), written by PUT with its resourceVersion when it changed; the
   * member's reconciler ignores it (no spec change). A source the hub cannot see now waits.
   */
  const recordAtSources = (fbc: FleetBackupCheck, want: PlacedCheck, drills: ReadonlyArray<ClusterDrill>) =>
    Effect.gen(function* () {
      const labelValue = placementLabelValue(fbc.metadata.namespace, fbc.metadata.name)
      for (const source of new Set(drills.map((d) => d.source))) {
        const seen = visible(members.get(source))
        if (!seen.access) continue
        const check = seen.access.checks.store.get(`${want.namespace}/${want.name}`)
        if (!check || !isPlacedBy(check, labelValue) || check.metadata.deletionTimestamp) continue
        const value = sourceAnnotation(drills, source)
        if (check.metadata.annotations?.[annotationDrills] === value) continue
        yield* writerOf(seen.access)
          .request({
            method: "PUT",
            path: pathOf(backupChecks, { namespace: want.namespace, name: want.name }),
            body: {
              ...check,
              metadata: {
                ...check.metadata,
                annotations: { ...check.metadata.annotations, [annotationDrills]: value },
              },
            },
          })
          .pipe(
            // A conflict (the member's reconciler wrote the check meanwhile) is retried next round.
            Effect.catchIf(
              (e) => e instanceof KubeApiError && e.status === 409,
              () => Effect.logDebug("source check changed meanwhile; drill verdicts recorded next round"),
            ),
            Effect.catch((e) =>
              Effect.logWarning("recording drill verdicts on the source's check failed; retrying").pipe(
                Effect.annotateLogs({
                  member: source,
                  check: `${want.namespace}/${want.name}`,
                  error: e.message,
                }),
              ),
            ),
          )
      }
    })

  const reconcile = (req: { namespace: string; name: string }) =>
    Effect.gen(function* () {
      const fbc = fbcs.store.get(`${req.namespace}/${req.name}`)
      if (!fbc) {
        const key = `${req.namespace}/${req.name}`
        if (options.views.delete(key)) options.onGone(req.namespace, req.name)
        // What this process remembered of it (Events announced, refusals backing off) goes with it.
        for (const map of [announced, refused])
          for (const k of [...map.keys()])
            if (k.startsWith(`${key} `)) {
              map.delete(k)
              refusals.forget(k)
            }
        return {}
      }
      const again = { requeueAfterMs: options.statusIntervalMs }
      const finalizers = fbc.metadata.finalizers ?? []
      const generation = fbc.metadata.generation ?? 0

      if (fbc.metadata.deletionTimestamp) {
        if (!finalizers.includes(placementFinalizer)) return {}
        const removing = yield* removeUnwanted(fbc, () => false, new Set())
        if (removing.length === 0) {
          yield* Effect.logInfo("every placed check is gone; releasing the FleetBackupCheck")
          yield* patchFinalizers(
            fbc,
            finalizers.filter((f) => f !== placementFinalizer),
          ).pipe(Effect.catchIf(isNotFound, () => Effect.void))
          return {}
        }
        yield* writeStatus(
          fbc,
          fbc.metadata.resourceVersion,
          removing,
          fleetConditions(removing, generation, { deleting: true }),
          { selector: "" },
        )
        return again
      }

      let resourceVersion = fbc.metadata.resourceVersion
      if (!finalizers.includes(placementFinalizer)) {
        const patched = yield* patchFinalizers(fbc, [...finalizers, placementFinalizer])
        resourceVersion = patched.metadata.resourceVersion
      }

      const problem = problemOf(fbc, fbc.metadata.namespace, fbc.metadata.name)
      const parsed = parseFleetBackupCheck(fbc)
      if (problem || !parsed.success) {
        // Nothing is placed or removed from a spec the hub cannot read; the last placements stay listed.
        const kept = (fbc.status?.clusters ?? []).map((c) =>
          unverifiedEntry(c.name, c.placement, fleetReasons.InvalidSpec, "the spec is invalid", "Unknown"),
        )
        const why = problem ?? { reason: fleetReasons.InvalidSpec, message: "invalid spec" }
        yield* writeStatus(fbc, resourceVersion, kept, fleetConditions(kept, generation, { problem: why }), {
          selector: "",
        })
        return {}
      }
      const spec = parsed.data.spec
      const want = placedCheckOf(parsed.data)
      const selected = clusters.store
        .list()
        .filter(
          (mc) =>
            selectorMatches(spec.clusterSelector, mc.metadata.labels ?? {}) &&
            (spec.propertySelector === undefined || selectorMatches(spec.propertySelector, propertiesOf(mc))),
        )
        .map((mc) => mc.metadata.name)
        .sort()
      const selectedSet = new Set(selected)
      const entries: ClusterPlacement[] = []
      for (const cluster of selected) entries.push(yield* placeIn(parsed.data, want, cluster))

      // Drills: each source's drill check of this round in its target, placed like any check.
      const now = yield* Clock.currentTimeMillis
      const drill = spec.drill ? yield* drillsOf(parsed.data, want, selected, now) : undefined
      const wantedDrill = new Set(drill?.placed ?? [])
      const removing = yield* removeUnwanted(
        fbc,
        (cluster, c) =>
          (selectedSet.has(cluster) && namespaceOf(c) === want.namespace && c.metadata.name === want.name) ||
          wantedDrill.has(`${cluster} ${checkKeyOf(c)}`),
        selectedSet,
      )
      const all = [...entries, ...removing]
      const selector = describeSelector(spec.clusterSelector)
      const placement = fleetConditions(all, generation, { selector })
      const [placedCondition, verifiedCondition] = placement
      const conditions =
        drill && placedCondition && verifiedCondition
          ? [
              withMissingDrillTargets(placedCondition, drill.missing),
              selected.length > 0 ? withDrills(verifiedCondition, drill.verdicts) : verifiedCondition,
            ]
          : placement
      if (drill) yield* recordAtSources(parsed.data, want, drill.entries)
      yield* writeStatus(fbc, resourceVersion, all, conditions, {
        selector,
        check: { namespace: want.namespace, name: want.name },
        ...(drill ? { drills: drill.entries } : {}),
      })
      return drill
        ? { requeueAfterMs: Math.max(1_000, Math.min(options.statusIntervalMs, drill.nextRoundAt - now)) }
        : again
    })

  // Workers start once both hub caches listed: a half-filled MemberCluster cache would unplace checks.
  yield* Effect.gen(function* () {
    yield* Effect.all([fbcs.awaitSynced, clusters.awaitSynced], { discard: true })
    yield* Effect.logInfo("placement caches synced")
    yield* runController({ name: "placement", cluster: "hub", queue, reconcile, workers })
  }).pipe(Effect.forkScoped)
  return { fbcs, clusters, queue }
}) as (options: PlacementOptions) => Effect.Effect<unknown, never, Scope.Scope>
