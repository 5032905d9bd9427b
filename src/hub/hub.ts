// The hub, started by capability as controller-runtime's Manager is: HTTP (health, metrics, fleet API)
// first, then leader election, and only while leading the registration controller and every member
// engine. Losing the lease or SIGTERM closes the leading scope: member engines drain their in-flight
// reconciles (bounded grace), then the lease is released so a standby takes over at once.
import { hostname } from "node:os"
import type { KubeConfig } from "@kubernetes/client-node"
import { Effect, type Scope, Semaphore } from "effect"
import { hubLeaseName } from "../api/names.ts"
import { makeKubeClient } from "../kube/client.ts"
import type { FleetMetrics } from "../observability/metrics/index.ts"
import type { KubeconfigPolicy } from "../registration/kubeconfig-policy.ts"
import type { MemberEntry } from "./fleet-state.ts"
import { startHubHttp } from "./http.ts"
import { makeLeaderElector } from "./leader-election.ts"
import type { MemberTimings } from "./member.ts"
import { runRegistration } from "./registration.ts"

export interface HubOptions {
  readonly hubKubeConfig: KubeConfig
  /** Where registration Secrets and the Lease live (default fleetcheck-system). */
  readonly namespace: string
  readonly policy: KubeconfigPolicy
  readonly timings: MemberTimings
  /** Hub-wide cap on concurrent reconciles across all members. */
  readonly maxConcurrentReconciles: number
  readonly http: { readonly host: string; readonly port: number }
  readonly leaderElection: {
    readonly enabled: boolean
    readonly leaseDurationMs: number
    readonly renewDeadlineMs: number
    readonly retryPeriodMs: number
  }
  readonly identity?: string
  readonly metrics?: FleetMetrics
  /** Called once the HTTP server listens (tests and `fleetcheck dev` read the port). */
  readonly onListening?: (port: number) => void
}

export interface HubHandle {
  readonly identity: string
  readonly members: Map<string, MemberEntry>
  readonly isLeader: () => boolean
  readonly port: number
}

export const runHub = Effect.fnUntraced(function* (options: HubOptions) {
  const identity =
    options.identity ?? `${hostname()}-${process.pid}-${Math.random().toString(36).slice(2, 7)}`
  const members = new Map<string, MemberEntry>()
  let leading = false
  const hubClient = yield* makeKubeClient({ cluster: "hub", kubeConfig: options.hubKubeConfig })

  const { server, port } = yield* Effect.promise(() =>
    startHubHttp({
      host: options.http.host,
      port: options.http.port,
      members,
      ...(options.metrics ? { metrics: options.metrics } : {}),
      isLeader: () => leading,
      identity,
    }),
  )
  yield* Effect.addFinalizer(() => Effect.promise(() => new Promise<void>((r) => server.close(() => r()))))
  yield* Effect.logInfo("hub serving", `http://${options.http.host}:${port}`, "identity", identity)
  options.onListening?.(port)

  const globalLimit = yield* Semaphore.make(options.maxConcurrentReconciles)
  let drainGrace = () => options.timings.drainGraceMs
  const leaderWork = Effect.gen(function* () {
    leading = true
    yield* Effect.addFinalizer(() =>
      Effect.sync(() => {
        leading = false
        members.clear()
      }),
    )
    yield* Effect.logInfo("leading: starting registration and member engines")
    yield* runRegistration({
      hubClient,
      namespace: options.namespace,
      policy: options.policy,
      timings: options.timings,
      globalLimit,
      members,
      ...(options.metrics ? { metrics: options.metrics } : {}),
      reportingInstance: identity,
      drainGraceMs: () => drainGrace(),
    })
    return yield* Effect.never
  })

  if (!options.leaderElection.enabled) {
    yield* Effect.forkScoped(Effect.scoped(leaderWork))
  } else {
    // Validated before anything starts: bad timings are a startup error, not a hub that never leads.
    const elector = yield* makeLeaderElector({
      client: hubClient,
      namespace: options.namespace,
      name: hubLeaseName,
      identity,
      leaseDurationMs: options.leaderElection.leaseDurationMs,
      renewDeadlineMs: options.leaderElection.renewDeadlineMs,
      retryPeriodMs: options.leaderElection.retryPeriodMs,
    }).pipe(Effect.orDie)
    // On SIGTERM the lease is still renewed while members drain (full grace). After a lost lease a new
    // leader may start once the lease expires: leader work gets what is left of it, minus a margin.
    const lostLeaseGraceMs = Math.max(
      500,
      options.leaderElection.leaseDurationMs - options.leaderElection.renewDeadlineMs - 1_000,
    )
    drainGrace = () =>
      elector.isLeader()
        ? options.timings.drainGraceMs
        : Math.min(options.timings.drainGraceMs, lostLeaseGraceMs)
    yield* Effect.forkScoped(elector.run(leaderWork))
  }
  const handle: HubHandle = { identity, members, isLeader: () => leading, port }
  return handle
}) as (options: HubOptions) => Effect.Effect<HubHandle, never, Scope.Scope>
