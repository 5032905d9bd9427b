// One attempt at letting go of a scope the hub worked in: fleetcheck.io/cleanup comes off the member's
// BackupChecks there, except where another engine of this hub still works (those checks are its now).
// The release itself is the shared one (src/hub/finalizers.ts: paged, CAS, fails typed when anything is
// left); this module picks the namespaces and the credentials, and tries each credential in turn
// (after a rotation the old token may be gone, and after narrowing the new one may not reach the
// dropped namespaces).
import type { KubeConfig } from "@kubernetes/client-node"
import { Data, Effect } from "effect"
import type { BackupCheck } from "../../api/backupcheck.ts"
import { finalizerName } from "../../api/names.ts"
import { isGone, isNotFound, type KubeClient, makeKubeClient } from "../../kube/client.ts"
import { backupChecks, pathOf } from "../../kube/resources.ts"
import { gateWrites } from "../../kube/write-gate.ts"
import { releaseFinalizers } from "../finalizers.ts"
import { type Dropped, describeNamespaces, dropped, type Kept, type Namespaces } from "./scope.ts"

/** Deadline of each request of a release: a hung member fails the attempt, which is retried later. */
const requestTimeoutMs = 10_000
const pageSize = 500
const maxListRestarts = 3

export class ReleaseError extends Data.TaggedError("ReleaseError")<{ readonly message: string }> {}

/** A kubeconfig that reaches a held scope, and what its exec plugin needs besides (a profile's extension). */
export interface ReleaseCredential {
  readonly kubeConfig: KubeConfig
  readonly execClusterConfig?: unknown
}

export interface ReleaseAttempt {
  /** The registration's name (client name in errors and logs). */
  readonly name: string
  /** Credentials known to reach the scope's cluster, best first. */
  readonly credentials: ReadonlyArray<ReleaseCredential>
  /** Deadline of one exec credential plugin run (--exec-plugin-timeout). */
  readonly execTimeoutMs: number
  readonly namespaces: Namespaces
  /** Where other engines of this hub work on that cluster now, asked when the attempt starts. */
  readonly kept: () => Kept
  readonly userAgent: string
  /** Offer HTTP/2 (--http2). */
  readonly http2: boolean
  readonly mayWrite: Effect.Effect<boolean>
}

export interface Released {
  readonly released: number
  /** What was released, for logs and Events. */
  readonly what: string
}

/** The namespaces in which some BackupCheck still carries the hub's finalizer (a paged cluster-wide LIST). */
const namespacesCarrying = Effect.fnUntraced(function* (client: KubeClient) {
  const found = new Set<string>()
  let continueToken: string | undefined
  let restarts = 0
  for (;;) {
    const page = yield* client
      .request<{ items?: BackupCheck[] | null; metadata?: { continue?: string } }>({
        method: "GET",
        path: pathOf(backupChecks),
        query: { limit: String(pageSize), continue: continueToken },
      })
      .pipe(Effect.result)
    if (page._tag === "Failure") {
      if (isNotFound(page.failure)) return found // no CRD, no checks
      if (isGone(page.failure) && continueToken !== undefined && restarts < maxListRestarts) {
        restarts++
        continueToken = undefined
        continue
      }
      return yield* page.failure
    }
    for (const c of page.success.items ?? [])
      if ((c.metadata.finalizers ?? []).includes(finalizerName)) found.add(c.metadata.namespace ?? "")
    continueToken = page.success.metadata?.continue || undefined
    if (continueToken === undefined) return found
  }
})

const describeDropped = (d: Dropped): string => {
  switch (d.kind) {
    case "nothing":
      return "nothing"
    case "all":
      return "all namespaces"
    case "namespaces":
      return describeNamespaces(d.namespaces)
    case "allExcept":
      return `all namespaces but ${[...d.kept].join(",")}`
  }
}

/** With one credential: what to release, then the shared release. */
const releaseWith = (attempt: ReleaseAttempt, credential: ReleaseCredential, what: Dropped) =>
  Effect.gen(function* () {
    const client = gateWrites(
      yield* makeKubeClient({
        cluster: attempt.name,
        kubeConfig: credential.kubeConfig,
        requestTimeoutMs,
        userAgent: attempt.userAgent,
        http2: attempt.http2,
        execTimeoutMs: attempt.execTimeoutMs,
        ...(credential.execClusterConfig !== undefined
          ? { execClusterConfig: credential.execClusterConfig }
          : {}),
      }),
      attempt.mayWrite,
    )
    let namespaces: ReadonlyArray<string> | undefined
    if (what.kind === "namespaces") namespaces = what.namespaces
    else if (what.kind === "allExcept") {
      const kept = what.kept
      namespaces = [...(yield* namespacesCarrying(client))].filter((n) => !kept.has(n))
      if (namespaces.length === 0) return 0
    }
    return (yield* releaseFinalizers(client, namespaces)).released
  }).pipe(Effect.scoped)

/**
 * Releases what `namespaces` leaves behind once the kept scopes are taken out; succeeds at once when
 * nothing is left. Fails with the last credential's error when none of them could release it all.
 */
export const releaseScope = Effect.fn("hub.registration.releaseScope")(function* (
  attempt: ReleaseAttempt,
): Effect.fn.Return<Released, ReleaseError> {
  const what = dropped(attempt.namespaces, attempt.kept())
  if (what.kind === "nothing") return { released: 0, what: "nothing (other engines work there)" }
  if (attempt.credentials.length === 0)
    return yield* new ReleaseError({ message: "no credentials for this cluster are known" })
  const errors: string[] = []
  for (const credential of attempt.credentials) {
    const result = yield* releaseWith(attempt, credential, what).pipe(Effect.result)
    if (result._tag === "Success") return { released: result.success, what: describeDropped(what) }
    errors.push(result.failure.message)
  }
  return yield* new ReleaseError({
    message: `releasing ${describeDropped(what)}: ${[...new Set(errors)].join("; ")}`.slice(0, 1024),
  })
})
