// Registration: the hub watches Secrets labelled fleetcheck.io/kubeconfig=true in its own namespace and
// keeps one member fiber per valid Secret (multicluster-runtime's kubeconfig provider, with the sync
// timeout it lacks). The reconcile is level-triggered like any other:
//   Secret gone       → remove the hub's finalizers from the member's BackupChecks (while reachable),
//                       stop the member, delete its MemberCluster
//   Secret refused    → stop the member if running; MemberCluster and an Event say why (never the secret)
//   same kubeconfig   → nothing (labels still follow the Secret)
//   new or changed    → (re)build the member's engine in a fresh scope
import type { KubeConfig, V1Secret } from "@kubernetes/client-node"
import { Clock, Effect, Fiber, FiberMap, type Scope, type Semaphore } from "effect"
import { registrationLabel } from "../api/names.ts"
import { runController } from "../engine/controller.ts"
import { makeInformer } from "../engine/informer/informer.ts"
import { makeWorkQueue } from "../engine/workqueue/workqueue.ts"
import { isNotFound, type KubeClient, makeKubeClient } from "../kube/client.ts"
import { events, memberClusters, pathOf, secrets as secretResource } from "../kube/resources.ts"
import { gateWrites } from "../kube/write-gate.ts"
import { checkKubeconfig, type KubeconfigPolicy } from "../kubeconfig/policy.ts"
import type { FleetMetrics } from "../observability/metrics/index.ts"
import type { HubConfig } from "./config.ts"
import { releaseFinalizers } from "./finalizers.ts"
import { type MemberEntry, newMemberEntry } from "./fleet-state.ts"
import type { LeaderFence } from "./hub.ts"
import { runMember, syncMemberCluster } from "./member.ts"

export interface RegistrationOptions {
  readonly hubClient: KubeClient
  readonly config: HubConfig
  readonly globalLimit: Semaphore.Semaphore
  readonly members: Map<string, MemberEntry>
  readonly metrics: FleetMetrics
  /** How long a stopping member may drain, asked when it stops (none once the lease is lost). */
  readonly drainGraceMs: () => number
  /** The leader fence: members' writes go out only while it allows them. */
  readonly fence: LeaderFence
  /** Who writes Events (the hub's identity). */
  readonly reportingInstance: string
  /** The User-Agent of every request to the members. */
  readonly userAgent: string
  /** Called once every registration Secret has been listed: the hub's view is now complete. */
  readonly onSynced: () => void
}

/** The kubeconfig policy the operator chose with the --allow-* settings. */
const policyOf = (config: HubConfig): KubeconfigPolicy => ({
  allowExec: config.allowExec,
  allowAuthProvider: config.allowAuthProvider,
  allowFilePaths: config.allowFilePaths,
  allowInsecureSkipTlsVerify: config.allowInsecureSkipTlsVerify,
})

interface Engaged {
  readonly hash: string
  /** Kept so the hub can still reach the member to release its finalizers after disengaging. */
  readonly kubeConfig: KubeConfig
  readonly namespaces?: ReadonlyArray<string> | undefined
}

/** Labels copied from the Secret to the MemberCluster: everything but our own registration label. */
const copiedLabels = (secret: V1Secret) =>
  Object.fromEntries(Object.entries(secret.metadata?.labels ?? {}).filter(([k]) => k !== registrationLabel))

export const runRegistration = Effect.fnUntraced(function* (options: RegistrationOptions) {
  const { hubClient, config, members, metrics } = options
  const { namespace } = config
  const policy = policyOf(config)
  const fibers = yield* FiberMap.make<string>()
  const engaged = new Map<string, Engaged>()

  const secrets = yield* makeInformer<V1Secret>({
    client: hubClient,
    name: "registration-secrets",
    resource: secretResource,
    namespace,
    labelSelector: `${registrationLabel}=true`,
    resyncMs: config.resyncPeriodMs,
  })
  const queue = yield* makeWorkQueue({ name: "registration" })
  secrets.addHandler({
    onAdd: (s) => queue.addUnsafe(`${namespace}/${s.metadata?.name ?? ""}`),
    onUpdate: (_, s) => queue.addUnsafe(`${namespace}/${s.metadata?.name ?? ""}`),
    onDelete: (s) => queue.addUnsafe(`${namespace}/${s.metadata?.name ?? ""}`),
  })

  const recordEvent = (secret: V1Secret, type: "Normal" | "Warning", reason: string, message: string) =>
    Effect.gen(function* () {
      // events.k8s.io wants MicroTime: exactly six fractional digits.
      const now = new Date(yield* Clock.currentTimeMillis).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z")
      const name = secret.metadata?.name ?? "unknown"
      yield* hubClient
        .request({
          method: "POST",
          path: pathOf(events, { namespace }),
          body: {
            apiVersion: "events.k8s.io/v1",
            kind: "Event",
            metadata: {
              name: `${name}.${Date.now().toString(16)}${Math.random().toString(16).slice(2, 8)}`,
              namespace,
            },
            eventTime: now,
            reportingController: "fleetcheck.io/hub",
            reportingInstance: options.reportingInstance,
            action: "Register",
            reason,
            type,
            note: message.slice(0, 1024),
            regarding: { apiVersion: "v1", kind: "Secret", namespace, name, uid: secret.metadata?.uid },
          },
        })
        .pipe(
          Effect.catch((e) =>
            Effect.logWarning("recording an Event failed").pipe(Effect.annotateLogs({ error: e.message })),
          ),
        )
    })

  /**
   * Lets every BackupCheck of a disengaged member be deleted without the hub: our finalizer comes off.
   * Runs after the member's engine has stopped (else its reconciles would put the finalizer back), with
   * a short-lived client of its own and a fresh LIST, so resourceVersions are current.
   */
  const releaseMemberFinalizers = (name: string, engaged: Engaged) =>
    Effect.gen(function* () {
      const client = gateWrites(
        yield* makeKubeClient({
          cluster: name,
          kubeConfig: engaged.kubeConfig,
          requestTimeoutMs: 5_000,
          userAgent: options.userAgent,
        }),
        options.fence.mayWrite,
      )
      const counts = yield* releaseFinalizers(client, engaged.namespaces)
      yield* Effect.logInfo("released BackupCheck finalizers of a disengaged member").pipe(
        Effect.annotateLogs({ released: counts.released }),
      )
    }).pipe(Effect.scoped)

  const disengage = Effect.fnUntraced(function* (name: string) {
    const e = engaged.get(name)
    engaged.delete(name)
    yield* FiberMap.remove(fibers, name)
    if (e) yield* Effect.logInfo("member disengaged")
  })

  const reconcile = (req: { namespace: string; name: string }) =>
    Effect.gen(function* () {
      const name = req.name
      const secret = secrets.store.get(`${namespace}/${name}`)
      if (!secret) {
        const e = engaged.get(name)
        yield* disengage(name)
        if (e) {
          yield* releaseMemberFinalizers(name, e).pipe(
            Effect.catch((err) =>
              Effect.logWarning("could not release every finalizer while disengaging").pipe(
                Effect.annotateLogs({ error: err.message }),
              ),
            ),
          )
        }
        members.delete(name)
        metrics.forgetMember(name)
        yield* hubClient
          .request({
            method: "DELETE",
            path: pathOf(memberClusters, { name }),
          })
          .pipe(Effect.catchIf(isNotFound, () => Effect.void))
        return {}
      }
      const labels = copiedLabels(secret)
      let entry = members.get(name)
      if (!entry) {
        entry = newMemberEntry(name, labels)
        members.set(name, entry)
      }
      entry.labels = labels
      const now = yield* Clock.currentTimeMillis
      const checked = checkKubeconfig({
        secretName: name,
        data: secret.data,
        annotations: secret.metadata?.annotations,
        policy,
        now: new Date(now),
      })
      if (!checked.ok) {
        const already = entry.refused?.message === checked.message
        yield* disengage(name)
        entry.refused = { reason: checked.reason, message: checked.message }
        yield* syncMemberCluster(hubClient, entry)
        if (!already) {
          yield* Effect.logWarning("registration Secret refused").pipe(
            Effect.annotateLogs({ reason: checked.reason, refusal: checked.message }),
          )
          yield* recordEvent(secret, "Warning", checked.reason, checked.message)
        }
        return {}
      }
      // The canonical hash covers the chosen cluster, user and context and the namespaces annotation.
      const hash = checked.hash
      if (engaged.get(name)?.hash === hash) {
        yield* syncMemberCluster(hubClient, entry)
        return {}
      }
      const rebuild = engaged.has(name)
      yield* Effect.logInfo(
        rebuild ? "kubeconfig changed; rebuilding member engine" : "engaging member",
      ).pipe(Effect.annotateLogs({ server: checked.server }))
      entry.refused = undefined
      const target = entry
      // A rebuild never runs two engines on one member: the new fiber first waits until the old one
      // (interrupted by FiberMap.run) has drained and closed, without holding up this worker.
      const previous = FiberMap.getUnsafe(fibers, name)
      yield* FiberMap.run(
        fibers,
        name,
      )(
        Effect.scoped(
          Effect.gen(function* () {
            if (previous._tag === "Some") yield* Fiber.await(previous.value)
            yield* runMember(
              {
                entry: target,
                kubeConfig: checked.kubeConfig,
                ...(checked.credentialExpiry ? { credentialExpiry: checked.credentialExpiry } : {}),
                namespaces: checked.namespaces,
              },
              {
                hubClient,
                globalLimit: options.globalLimit,
                settings: config,
                metrics,
                drainGraceMs: options.drainGraceMs,
                fence: options.fence,
                userAgent: options.userAgent,
              },
            )
            return yield* Effect.never
          }).pipe(Effect.annotateLogs({ cluster: name })),
        ),
      )
      engaged.set(name, { hash, kubeConfig: checked.kubeConfig, namespaces: checked.namespaces })
      yield* recordEvent(
        secret,
        "Normal",
        rebuild ? "MemberRebuilt" : "MemberEngaged",
        `member ${name} engaged at ${checked.server}`,
      )
      return {}
    })

  yield* secrets.awaitSynced.pipe(
    Effect.andThen(Effect.sync(options.onSynced)),
    Effect.andThen(Effect.logInfo("registration Secrets listed")),
    Effect.forkScoped,
  )
  yield* secrets.awaitSynced.pipe(Effect.timeout(60_000), Effect.ignore)
  yield* runController({ name: "registration", cluster: "hub", queue, reconcile, workers: 2 })
  return { fibers, engaged, secrets }
}) as (options: RegistrationOptions) => Effect.Effect<unknown, never, Scope.Scope>
