// Releasing the hub's finalizer from a member's BackupChecks: what the hub does when it lets go of a
// member, and what `fleetcheck unregister` does when no hub did. One implementation for both.
//
//   LIST      paged (limit + continue), cluster-wide or per namespace (a namespace-scoped identity may
//             list only its namespaces); 404 means no CRD, so no BackupChecks; an expired continue
//             token restarts that scope's LIST (already released checks no longer match)
//   PATCH     merge patch of metadata.finalizers without fleetcheck.io/cleanup, carrying the
//             resourceVersion: a compare-and-swap, so another controller's finalizer is never dropped
//   Conflict  fresh GET, then again, at most `maxAttempts` PATCHes per check; NotFound means done
//   result    { released, failed: 0 }, or FinalizerReleaseError when any check (or any scope's LIST)
//             could not be released: the caller retries with backoff; a re-run is always safe
//
// Checks are released a few at a time (a disengage must not take one request timeout per check).
import { Data, Effect } from "effect"
import type { BackupCheck } from "../api/backupcheck.ts"
import { finalizerName } from "../api/names.ts"
import { isConflict, isGone, isNotFound, type KubeClient, type KubeError } from "../kube/client.ts"
import { backupChecks, pathOf } from "../kube/resources.ts"

/** BackupChecks per LIST page. */
const pageSize = 250
/** PATCH attempts per check when the check keeps changing under us (409 Conflict). */
const maxAttempts = 5
/** Restarts of one scope's LIST after its continue token expired (410). */
const maxListRestarts = 3
/** Checks patched at once. */
const concurrency = 4
/** Reasons kept in the error; the counts are always complete. */
const maxReasons = 5

export interface ReleaseCounts {
  /** Checks whose finalizer this call removed. */
  readonly released: number
  /** Checks that still carry it (always 0 on success; see FinalizerReleaseError). */
  readonly failed: number
}

export class FinalizerReleaseError extends Data.TaggedError("FinalizerReleaseError")<{
  /** The member, as the client names it. */
  readonly cluster: string
  readonly released: number
  /** Checks whose finalizer could not be removed. */
  readonly failed: number
  /** Scopes ("all namespaces" or a namespace) whose LIST failed: their checks were not even seen. */
  readonly unlisted: ReadonlyArray<string>
  /** A few of the reasons, e.g. "apps/db: forbidden". */
  readonly reasons: ReadonlyArray<string>
  readonly message: string
}> {}

type Outcome = "released" | "absent"

interface Page {
  readonly items?: ReadonlyArray<BackupCheck> | null
  readonly metadata?: { readonly continue?: string }
}

const carriesFinalizer = (check: BackupCheck): boolean =>
  (check.metadata.finalizers ?? []).includes(finalizerName)

/** Takes the finalizer off one check; "absent" when it was gone already (or the check was). */
const releaseOne = Effect.fnUntraced(function* (client: KubeClient, listed: BackupCheck) {
  const path = pathOf(backupChecks, { namespace: listed.metadata.namespace, name: listed.metadata.name })
  let check = listed
  for (let attempt = 1; ; attempt++) {
    const finalizers = check.metadata.finalizers ?? []
    if (!finalizers.includes(finalizerName)) return "absent" as Outcome
    const outcome = yield* client
      .request({
        method: "PATCH",
        path,
        contentType: "application/merge-patch+json",
        body: {
          metadata: {
            resourceVersion: check.metadata.resourceVersion,
            finalizers: finalizers.filter((f) => f !== finalizerName),
          },
        },
      })
      .pipe(
        Effect.as("released" as const),
        Effect.catchIf(isNotFound, () => Effect.succeed("absent" as const)),
        // The last attempt's Conflict is the error.
        Effect.catchIf(
          (e) => isConflict(e) && attempt < maxAttempts,
          () => Effect.succeed("conflict" as const),
        ),
      )
    if (outcome !== "conflict") return outcome as Outcome
    const fresh = yield* client
      .request<BackupCheck>({ method: "GET", path })
      .pipe(Effect.catchIf(isNotFound, () => Effect.succeed(undefined)))
    if (fresh === undefined) return "absent" as Outcome
    check = fresh
  }
})

/**
 * Removes `fleetcheck.io/cleanup` from every BackupCheck the client can see: cluster-wide, or in each
 * of `namespaces` when given (and non-empty). Succeeds with the counts when nothing is left carrying
 * it; fails with FinalizerReleaseError (with the same counts) otherwise.
 */
export const releaseFinalizers = Effect.fn("hub.releaseFinalizers")(function* (
  client: KubeClient,
  namespaces: ReadonlyArray<string> | undefined,
): Effect.fn.Return<ReleaseCounts, FinalizerReleaseError> {
  const scopes =
    namespaces && namespaces.length > 0
      ? namespaces.map((ns) => ({ label: `namespace ${ns}`, path: pathOf(backupChecks, { namespace: ns }) }))
      : [{ label: "all namespaces", path: pathOf(backupChecks) }]
  let released = 0
  let failed = 0
  const unlisted: string[] = []
  const reasons: string[] = []
  const reason = (text: string) => {
    if (reasons.length < maxReasons) reasons.push(text)
  }

  for (const scope of scopes) {
    let continueToken: string | undefined
    let restarts = 0
    for (;;) {
      const page = yield* client
        .request<Page>({
          method: "GET",
          path: scope.path,
          query: { limit: String(pageSize), continue: continueToken },
        })
        .pipe(Effect.result)
      if (page._tag === "Failure") {
        const e = page.failure
        if (isNotFound(e)) break // no CRD: no BackupChecks
        if (isGone(e) && continueToken !== undefined && restarts < maxListRestarts) {
          restarts++
          continueToken = undefined
          continue
        }
        unlisted.push(scope.label)
        reason(`${scope.label}: ${e.message}`)
        break
      }
      const pending = (page.success.items ?? []).filter(carriesFinalizer)
      const outcomes = yield* Effect.forEach(
        pending,
        (check) =>
          releaseOne(client, check).pipe(
            Effect.mapError(
              (e: KubeError) => `${check.metadata.namespace}/${check.metadata.name}: ${e.message}`,
            ),
            Effect.result,
          ),
        { concurrency },
      )
      for (const o of outcomes) {
        if (o._tag === "Failure") {
          failed++
          reason(o.failure)
        } else if (o.success === "released") {
          released++
        }
      }
      continueToken = page.success.metadata?.continue || undefined
      if (continueToken === undefined) break
    }
  }

  yield* Effect.annotateCurrentSpan({
    "fleetcheck.finalizers.released": released,
    "fleetcheck.finalizers.failed": failed,
  })
  if (failed > 0 || unlisted.length > 0) {
    const what = [
      ...(failed > 0 ? [`${failed} BackupCheck(s) still carry ${finalizerName}`] : []),
      ...(unlisted.length > 0 ? [`could not list BackupChecks in ${unlisted.join(", ")}`] : []),
    ].join("; ")
    return yield* new FinalizerReleaseError({
      cluster: client.cluster,
      released,
      failed,
      unlisted,
      reasons,
      message: `${client.cluster}: ${what} (released ${released}): ${reasons.join("; ")}`,
    })
  }
  return { released, failed }
})
