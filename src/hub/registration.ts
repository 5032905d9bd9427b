// Registration: the hub watches Secrets labelled fleetcheck.io/kubeconfig=true in its own namespace and
// keeps one member fiber per valid Secret (multicluster-runtime's kubeconfig provider, with the sync
// timeout it lacks). The reconcile is level-triggered like any other:
//   Secret gone       → remove the hub's finalizers from the member's BackupChecks (while reachable),
//                       stop the member, delete its MemberCluster
//   Secret refused    → stop the member if running; MemberCluster and an Event say why (never the secret)
//   same kubeconfig   → nothing (labels still follow the Secret)
//   new or changed    → (re)build the member's engine in a fresh scope
import { createHash } from "node:crypto"
import type { KubeConfig, V1Secret } from "@kubernetes/client-node"
import { Clock, Effect, FiberMap, type Scope, type Semaphore } from "effect"
import type { BackupCheck } from "../api/backupcheck.ts"
import { finalizerName, registrationLabel } from "../api/names.ts"
import { runController } from "../engine/controller.ts"
import { makeInformer } from "../engine/informer/informer.ts"
import { makeWorkQueue } from "../engine/workqueue/workqueue.ts"
import { isNotFound, type KubeClient, type KubeError, makeKubeClient } from "../kube/client.ts"
import { checkKubeconfig, type KubeconfigPolicy } from "../kubeconfig/policy.ts"
import type { FleetMetrics } from "../observability/metrics/index.ts"
import { type MemberEntry, newMemberEntry } from "./fleet-state.ts"
import { type MemberTimings, runMember, syncMemberCluster } from "./member.ts"

export interface RegistrationOptions {
  readonly hubClient: KubeClient
  readonly namespace: string
  readonly policy: KubeconfigPolicy
  readonly timings: MemberTimings
  readonly globalLimit: Semaphore.Semaphore
  readonly members: Map<string, MemberEntry>
  readonly metrics?: FleetMetrics
  readonly drainGraceMs?: () => number
  /** Who writes Events (the hub's identity). */
  readonly reportingInstance: string
}

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
  const { hubClient, namespace, members } = options
  const fibers = yield* FiberMap.make<string>()
  const engaged = new Map<string, Engaged>()

  const secrets = yield* makeInformer<V1Secret>({
    client: hubClient,
    name: "registration-secrets",
    resource: { group: "", version: "v1", plural: "secrets" },
    namespace,
    labelSelector: `${registrationLabel}=true`,
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
          path: `/apis/events.k8s.io/v1/namespaces/${encodeURIComponent(namespace)}/events`,
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
        .pipe(Effect.catch((e) => Effect.logWarning("recording an Event failed", e.message)))
    })

  /**
   * Lets every BackupCheck of a disengaged member be deleted without the hub: our finalizer comes off.
   * Runs after the member's engine has stopped (else its reconciles would put the finalizer back), with
   * a short-lived client of its own and a fresh LIST, so resourceVersions are current.
   */
  const releaseFinalizers = Effect.fnUntraced(function* (
    name: string,
    kubeConfig: KubeConfig,
    namespaces: ReadonlyArray<string> | undefined,
  ) {
    const client = yield* makeKubeClient({ cluster: name, kubeConfig, requestTimeoutMs: 5_000 })
    const base = "/apis/fleetcheck.io/v1alpha1"
    // A namespace-scoped member's identity may list only its namespaces.
    const paths = namespaces?.length
      ? namespaces.map((n) => `${base}/namespaces/${encodeURIComponent(n)}/backupchecks`)
      : [`${base}/backupchecks`]
    const items: BackupCheck[] = []
    for (const path of paths) {
      const list = yield* client.request<{ items: BackupCheck[] }>({ method: "GET", path })
      items.push(...(list.items ?? []))
    }
    let released = 0
    for (const check of items) {
      const finalizers = check.metadata.finalizers ?? []
      if (!finalizers.includes(finalizerName)) continue
      yield* client
        .request({
          method: "PATCH",
          path: `${base}/namespaces/${encodeURIComponent(check.metadata.namespace)}/backupchecks/${encodeURIComponent(check.metadata.name)}`,
          contentType: "application/json-patch+json",
          // test-then-replace: only if the list is still what we read, so nothing else is lost.
          body: [
            { op: "test", path: "/metadata/finalizers", value: finalizers },
            {
              op: "replace",
              path: "/metadata/finalizers",
              value: finalizers.filter((f) => f !== finalizerName),
            },
          ],
        })
        .pipe(
          Effect.tap(() =>
            Effect.sync(() => {
              released++
            }),
          ),
          Effect.catch((err: KubeError) =>
            Effect.logWarning(
              "could not remove finalizer while disengaging",
              name,
              check.metadata.name,
              err.message,
            ),
          ),
        )
    }
    yield* Effect.logInfo("released BackupCheck finalizers of a disengaged member", name, released)
  }, Effect.scoped)

  const disengage = Effect.fnUntraced(function* (name: string) {
    const e = engaged.get(name)
    engaged.delete(name)
    yield* FiberMap.remove(fibers, name)
    if (e) yield* Effect.logInfo("member disengaged", name)
  })

  const reconcile = (req: { namespace: string; name: string }) =>
    Effect.gen(function* () {
      const name = req.name
      const secret = secrets.store.get(`${namespace}/${name}`)
      if (!secret) {
        const e = engaged.get(name)
        yield* disengage(name)
        if (e) {
          yield* releaseFinalizers(name, e.kubeConfig, e.namespaces).pipe(
            Effect.catch((err) =>
              Effect.logWarning("member unreachable while disengaging; finalizers stay", name, String(err)),
            ),
          )
        }
        members.delete(name)
        options.metrics?.forgetMember(name)
        yield* hubClient
          .request({
            method: "DELETE",
            path: `/apis/fleetcheck.io/v1alpha1/memberclusters/${encodeURIComponent(name)}`,
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
        policy: options.policy,
        now: new Date(now),
      })
      if (!checked.ok) {
        const already = entry.refused?.message === checked.message
        yield* disengage(name)
        entry.refused = { reason: checked.reason, message: checked.message }
        yield* syncMemberCluster(hubClient, entry)
        if (!already) {
          yield* Effect.logWarning("registration Secret refused", name, checked.reason, checked.message)
          yield* recordEvent(secret, "Warning", checked.reason, checked.message)
        }
        return {}
      }
      const hash = createHash("sha256")
        .update(checked.hash)
        .update(JSON.stringify(checked.namespaces ?? null))
        .digest("hex")
      if (engaged.get(name)?.hash === hash) {
        yield* syncMemberCluster(hubClient, entry)
        return {}
      }
      const rebuild = engaged.has(name)
      yield* Effect.logInfo(
        rebuild ? "kubeconfig changed; rebuilding member engine" : "engaging member",
        name,
        checked.server,
      )
      entry.refused = undefined
      const target = entry
      const started = yield* FiberMap.run(
        fibers,
        name,
      )(
        Effect.scoped(
          Effect.gen(function* () {
            const engine = yield* runMember(
              {
                entry: target,
                kubeConfig: checked.kubeConfig,
                ...(checked.credentialExpiry ? { credentialExpiry: checked.credentialExpiry } : {}),
                namespaces: checked.namespaces,
              },
              {
                hubClient,
                globalLimit: options.globalLimit,
                timings: options.timings,
                ...(options.metrics ? { metrics: options.metrics } : {}),
              },
            )
            void engine
            return yield* Effect.never
          }).pipe(Effect.annotateLogs({ cluster: name })),
        ),
      )
      void started
      engaged.set(name, { hash, kubeConfig: checked.kubeConfig, namespaces: checked.namespaces })
      yield* recordEvent(
        secret,
        "Normal",
        rebuild ? "MemberRebuilt" : "MemberEngaged",
        `member ${name} engaged at ${checked.server}`,
      )
      return {}
    })

  yield* secrets.awaitSynced.pipe(Effect.timeout(60_000), Effect.ignore)
  yield* runController({ name: "registration", cluster: "hub", queue, reconcile, workers: 2 })
  return { fibers, engaged, secrets }
}) as (options: RegistrationOptions) => Effect.Effect<unknown, never, Scope.Scope>
