// FleetBackupChecks as a sharded replica that does not place them shows them (ADR 0011 decision 8): the
// status the placement Lease's holder wrote, read from the hub's FleetBackupCheck cache. While no live
// replica holds that Lease nothing aggregates the checks, so nothing here may stay green: every verdict
// is Unknown/NoPlacementHolder until a holder writes again. The holder itself shows what its placement
// controller computes (the same status, before it is written).
import { Effect, Queue, type Scope } from "effect"
import type { FleetCheckView } from "../../api/fleet.ts"
import { type FleetBackupCheck, parseFleetBackupCheck } from "../../api/fleetbackupcheck.ts"
import { describeSelector } from "../../api/label-selector.ts"
import { placementLeaseName } from "../../api/names.ts"
import { makeInformer } from "../../engine/informer/informer.ts"
import type { KubeClient } from "../../kube/client.ts"
import { fleetBackupChecks } from "../../kube/resources.ts"
import { problemOf, viewOf } from "./controller.ts"
import { placedCheckOf } from "./plan.ts"

export const noPlacementHolder = {
  reason: "NoPlacementHolder",
  message: `no live hub replica holds the placement Lease ${placementLeaseName}: nothing places or aggregates this FleetBackupCheck now`,
} as const

/**
 * The view of a FleetBackupCheck from its status, as the placement controller shows it (same selector
 * and check), with every verdict Unknown when `holder` is undefined (no live placement holder).
 */
export const mirroredView = (fbc: FleetBackupCheck, holder: string | undefined): FleetCheckView => {
  const { namespace, name } = fbc.metadata
  const parsed = parseFleetBackupCheck(fbc)
  const want =
    !fbc.metadata.deletionTimestamp && problemOf(fbc, namespace, name) === undefined && parsed.success
      ? placedCheckOf(parsed.data)
      : undefined
  const view = viewOf(
    fbc,
    fbc.status ?? {},
    want && parsed.success
      ? {
          selector: describeSelector(parsed.data.spec.clusterSelector),
          check: { namespace: want.namespace, name: want.name },
        }
      : { selector: "" },
  )
  if (holder !== undefined) return view
  const unknown = { status: "Unknown" as const, ...noPlacementHolder }
  const { counts } = view
  return {
    ...view,
    verified: unknown,
    counts: {
      ...counts,
      verified: 0,
      failed: 0,
      unknown: counts.verified + counts.failed + counts.unknown,
    },
    clusters: view.clusters.map((c) => ({ ...c, ...unknown })),
    ...(view.drills ? { drills: view.drills.map((d) => ({ ...d, ...unknown })) } : {}),
  }
}

export interface PlacementMirrorOptions {
  /** The hub client; the mirror only reads. */
  readonly client: KubeClient
  readonly namespace: string
  readonly resyncMs: number
  /** How often the views are recomputed even without a change (the holder's liveness has no event). */
  readonly refreshMs: number
  /** The views the fleet API, dashboard and `fleetcheck status` show. */
  readonly views: Map<string, FleetCheckView>
  /** Whether this replica holds the placement Lease now: its placement controller sets the views. */
  readonly holding: () => boolean
  /** The live placement holder, if any, as this replica last saw its Lease. */
  readonly holder: Effect.Effect<string | undefined>
}

const keyOf = (fbc: FleetBackupCheck) => `${fbc.metadata.namespace}/${fbc.metadata.name}`

export const runPlacementMirror = (
  options: PlacementMirrorOptions,
): Effect.Effect<void, never, Scope.Scope> =>
  Effect.gen(function* () {
    const fbcs = yield* makeInformer<FleetBackupCheck>({
      client: options.client,
      name: "fleetbackupchecks-mirror",
      resource: fleetBackupChecks,
      namespace: options.namespace,
      resyncMs: options.resyncMs,
    })
    const changed = yield* Queue.sliding<void>(1)
    const poke = () => Queue.offerUnsafe(changed, undefined)
    fbcs.addHandler({ onAdd: poke, onUpdate: poke, onDelete: poke })
    const refresh = Effect.gen(function* () {
      if (options.holding()) return
      const holder = yield* options.holder
      const present = new Set<string>()
      for (const fbc of fbcs.store.list()) {
        present.add(keyOf(fbc))
        options.views.set(keyOf(fbc), mirroredView(fbc, holder))
      }
      for (const key of [...options.views.keys()]) if (!present.has(key)) options.views.delete(key)
    })
    yield* Effect.gen(function* () {
      yield* fbcs.awaitSynced
      while (true) {
        yield* refresh
        yield* Effect.raceFirst(Queue.take(changed), Effect.sleep(options.refreshMs))
      }
    }).pipe(Effect.forkScoped)
  })
