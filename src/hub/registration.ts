// Registration: the hub watches Secrets labelled fleetcheck.io/kubeconfig=true in its own namespace (and,
// when configured, Cluster API <cluster>-kubeconfig Secrets and ClusterProfiles there: the sources differ
// only in where the connection is read from; see docs/adr/0008) and
// keeps one member fiber per Secret in a FiberMap (multicluster-runtime's kubeconfig provider, with the
// sync timeout it lacks). The reconcile is level-triggered, talks only to the hub's API server, and never
// waits for a member: anything that talks to a member (the engine, its drain, finalizer releases) runs in
// the Secret's own fiber, so a hung member never holds up the registration workers.
//
// What the hub may have put fleetcheck.io/cleanup on is recorded per Secret ("held" scopes: cluster,
// namespaces, whether the engine's caches ever synced there), in memory with the credentials that reach
// it, and on the Secret itself (annotation fleetcheck.io/engaged-scopes, no credentials), which also
// carries the hub's finalizer fleetcheck.io/member-cleanup while anything is held (Karmada's Cluster
// finalizer): the kubeconfig stays readable until the release succeeded, whoever leads by then.
//
//   desired            from the Secret, the policy and the other Secrets
//   engine             accepted, labelled, live, and no earlier Secret registers an overlapping scope of
//                      the same cluster (same server URL and CA): record the scope, then (re)build the
//                      engine in a fresh fiber that first waits for the old one and for any engine it
//                      displaces, so one cluster scope never has two engines
//   duplicate          an earlier Secret registers an overlapping scope: Ready=False DuplicateMember, an
//                      Event naming it, no engine; engaged once that one is gone (others are requeued).
//                      The same cluster under another URL is found once its engine read the cluster's
//                      identity (registration/cluster-identity.ts): the later one's workers never run.
//   refused            the policy refuses the kubeconfig: no engine; Ready=False and an Event say why
//   disengaging        deleted (or no longer labelled): stop the engine, release, then delete the
//                      MemberCluster and remove the Secret's finalizer
//   releases           every held scope the desired engine does not cover is released in the Secret's
//                      fiber, after the engine that worked there has stopped, minus what other engines
//                      of this hub still work in; retried with backoff until it succeeds when the caches
//                      had synced there (finalizers may exist), tried once when they never had
//   gone               the Secret vanished without our finalizer (never added, or removed by hand): one
//                      best-effort release with what memory holds, MemberCluster deleted
//
// Credentials of a scope are kept in memory only. A Secret re-pointed to another server while no hub
// runs (or between the edit and its reconcile across a failover) leaves the old server's scope without
// credentials: the hub says so in a FinalizersNotReleased Event and forgets it (docs/deploy/unregistering.md says how
// to release it by hand). Narrowing on the same server is released with the Secret's current
// credentials, so it survives restarts.
import type { V1ObjectMeta, V1Secret } from "@kubernetes/client-node"
import { Clock, Effect, Fiber, FiberMap, type Scope, type Semaphore } from "effect"
import { maxClusterProperties, type RegistrationSource } from "../api/membercluster.ts"
import {
  engagedScopesAnnotation,
  finalizerName,
  memberCleanupFinalizer,
  registrationLabel,
} from "../api/names.ts"
import {
  type ClusterProfileConnection,
  type ClusterProfileVersion,
  checkClusterProfile,
  clusterProfileGroup,
  clusterProfilePlural,
  clusterProfileProperties,
  clusterProfileVersions,
} from "../clusterprofile/profile.ts"
import type { AccessProviders } from "../clusterprofile/provider-file.ts"
import { runController } from "../engine/controller.ts"
import type { GlobalLimit } from "../engine/global-limit.ts"
import { makeInformer } from "../engine/informer/informer.ts"
import type { PriorityLimit } from "../engine/priority-limit.ts"
import { ItemExponentialFailureRateLimiter } from "../engine/workqueue/rate-limiter.ts"
import { makeWorkQueue } from "../engine/workqueue/workqueue.ts"
import { isNotFound, type KubeClient } from "../kube/client.ts"
import { events, memberClusters, pathOf, secrets as secretResource } from "../kube/resources.ts"
import {
  capiKubeconfigDataKey,
  checkKubeconfig,
  type KubeconfigAccepted,
  type KubeconfigCheck,
  type KubeconfigPolicy,
} from "../kubeconfig/policy.ts"
import type { FleetMetrics } from "../observability/metrics/index.ts"
import type { HubConfig } from "./config.ts"
import { type MemberEntry, newMemberEntry } from "./fleet-state.ts"
import { runMember, syncMemberCluster } from "./member.ts"
import { CredentialFeed } from "./member-credential.ts"
import { ClusterIdentities } from "./registration/cluster-identity.ts"
import { type ReleaseCredential, releaseScope } from "./registration/release.ts"
import { sameObjectsMemo } from "./registration/same-objects-memo.ts"
import {
  admission,
  type Candidate,
  type ClusterRef,
  clusterKey,
  clusterOf,
  decodeRecords,
  describeNamespaces,
  encodeRecords,
  keptOf,
  type Namespaces,
  overlaps,
  sameCluster,
  sameScope,
} from "./registration/scope.ts"
import type { MemberFence } from "./sharding/shards.ts"
import type { StatusTicker } from "./status-ticker.ts"

export interface RegistrationOptions {
  readonly hubClient: KubeClient
  readonly config: HubConfig
  readonly globalLimit: GlobalLimit
  /** Members whose caches may be listing at once (see member.ts): engagement is staggered by it. */
  readonly syncLimit: Semaphore.Semaphore
  /** The hub-wide timer of the members' status rounds (status-ticker.ts). */
  readonly statusTicker: StatusTicker
  /** The hub-wide bound on the members' MemberCluster status writes (see member.ts). */
  readonly statusWrites: PriorityLimit
  readonly members: Map<string, MemberEntry>
  readonly metrics: FleetMetrics
  /** How long a stopping member may drain, asked when it stops (none once its lease is lost). */
  readonly drainGraceMs: (member: string) => number
  /**
   * Each member's fence: the leader's for every member, or with sharding its member Lease (ADR 0011).
   * A member this hub does not own (fence.owned() false) gets an engine for its caches and probe only,
   * and nothing is written for it: no Secret finalizer, no MemberCluster, no Event, no release.
   */
  readonly fenceFor: (member: string) => MemberFence
  /** The hub client whose writes for this member go out only while the member's fence allows them. */
  readonly hubClientFor: (member: string) => KubeClient
  /** With sharding: why no live replica works the member (shown by every view), see fleet-state.ts. */
  readonly ownerlessFor?: (member: string) => MemberEntry["ownerless"]
  /** Who writes Events (the hub's identity). */
  readonly reportingInstance: string
  /** The User-Agent of every request to the members. */
  readonly userAgent: string
  /** Called once every registration Secret has been listed: the hub's view is now complete. */
  readonly onSynced: () => void
  /** The hub operator's ClusterProfile access providers (--clusterprofile-provider-file); none: off. */
  readonly accessProviders: AccessProviders | undefined
}

/**
 * What registers a member: a Secret (labelled, or a Cluster API one) or a ClusterProfile. Their
 * metadata is handled alike; a Secret's kubeconfig is in its data, a profile's connection in its status.
 */
interface Registering {
  readonly apiVersion?: string | undefined
  readonly kind?: string | undefined
  readonly metadata?: V1ObjectMeta | undefined
  readonly data?: { [key: string]: string } | undefined
  readonly status?: unknown
}

/** The policy's verdict: on a Secret's kubeconfig, or on a ClusterProfile's access provider. */
type RegistrationCheck = KubeconfigCheck | ClusterProfileConnection

/** MemberCluster Ready=False reasons the registration sets (besides the policy's refusal reasons). */
export const registrationReasons = {
  /** An earlier Secret registers an overlapping scope of the same cluster. */
  DuplicateMember: "DuplicateMember",
  /** The Secret is deleted (or unlabelled): the engine stops and the hub's finalizers are released. */
  Disengaging: "Disengaging",
} as const

/** Registration workers: they only talk to the hub's API server, so two are plenty. */
const workers = 2
/** Backoff of a failing release, per scope: 1 s doubling to 5 min (a deletion waits on it). */
const releaseBackoff = { baseDelayMs: 1_000, maxDelayMs: 300_000 }
/** Credentials kept per held scope (newest first): the current one and a few it rotated from. */
const maxCredentials = 3

/** The kubeconfig policy the operator chose with the --allow-* settings. */
const policyOf = (config: HubConfig): KubeconfigPolicy => ({
  allowExec: config.allowExec,
  allowAuthProvider: config.allowAuthProvider,
  allowFilePaths: config.allowFilePaths,
  allowInsecureSkipTlsVerify: config.allowInsecureSkipTlsVerify,
})

/** A scope the hub may have put its finalizer in under one Secret, with what reaches it. */
interface Held {
  readonly cluster: ClusterRef
  readonly namespaces: Namespaces
  synced: boolean
  /** Kubeconfig hash → kubeconfig (with a profile's exec extension), oldest first. */
  readonly credentials: Map<string, ReleaseCredential>
  failures: number
}

type Desired =
  | {
      readonly kind: "engine"
      readonly checked: KubeconfigAccepted & { readonly execClusterConfig?: unknown }
      readonly cluster: ClusterRef
    }
  | { readonly kind: "duplicate"; readonly of: Candidate }
  | { readonly kind: "refused"; readonly reason: string; readonly message: string }
  | { readonly kind: "disengaging"; readonly why: "deleted" | "unlabelled" }

interface SecretState {
  held: Held[]
  /** What the current fiber was started for: for an engine, its connection (not its credential). */
  signature?: string
  /** The running engine's credential: a new one of the same connection is published here. */
  feed?: CredentialFeed
  /** The kubeconfig hash last given to the engine (connection and credential). */
  credentialHash?: string
  /** What kind of object registered it when last seen (a ClusterProfile is looked up as one). */
  source?: RegistrationSource["kind"]
  /** The cluster of the last accepted kubeconfig, to requeue the Secrets that share it. */
  cluster?: ClusterRef
  /** The last failed release, shown on the MemberCluster while disengaging. */
  releaseError?: string
  /** The last refusal or duplicate message an Event was recorded for. */
  announced?: string
  /** What our last PATCH wrote, until the informer has caught up with it. */
  patched?: { readonly from: string; readonly finalizers: string[]; readonly annotation: string | undefined }
}

/** Labels copied from the Secret to the MemberCluster: everything but our own registration label. */
const copiedLabels = (secret: Registering) =>
  Object.fromEntries(Object.entries(secret.metadata?.labels ?? {}).filter(([k]) => k !== registrationLabel))

/** creationTimestamp as RFC 3339 text (the informer keeps the JSON string; typed as Date by client-node). */
const createdOf = (secret: Registering): string => {
  const t = secret.metadata?.creationTimestamp as unknown
  return typeof t === "string" ? t : t instanceof Date ? t.toISOString().replace(/\.\d{3}Z$/, "Z") : ""
}

const addCredential = (
  held: Held,
  checked: KubeconfigAccepted & { readonly execClusterConfig?: unknown },
) => {
  held.credentials.delete(checked.hash)
  held.credentials.set(checked.hash, {
    kubeConfig: checked.kubeConfig,
    ...(checked.execClusterConfig !== undefined ? { execClusterConfig: checked.execClusterConfig } : {}),
  })
  for (const k of held.credentials.keys()) {
    if (held.credentials.size <= maxCredentials) break
    held.credentials.delete(k)
  }
}

export const runRegistration = Effect.fnUntraced(function* (options: RegistrationOptions) {
  const { hubClient, config, members, metrics } = options
  const owns = (name: string) => options.fenceFor(name).owned()
  const { namespace } = config
  const policy = policyOf(config)
  const fibers = yield* FiberMap.make<string>()
  const states = new Map<string, SecretState>()
  /**
   * Every engine fiber that may still run (current ones, and replaced ones still draining), with its
   * Secret and scope: a new engine first waits for those of other Secrets it overlaps to stop.
   */
  const engines = new Set<{
    readonly name: string
    readonly cluster: ClusterRef
    readonly namespaces: Namespaces
    readonly fiber: Fiber.Fiber<unknown, unknown>
  }>()
  const checkCache = new Map<string, { readonly rv: string; readonly result: RegistrationCheck }>()
  // What each engine's cluster says it is: registrations of one cluster under different URLs.
  const identities = new ClusterIdentities()
  const backoff = new ItemExponentialFailureRateLimiter(releaseBackoff)

  /** Asks the API server which ClusterProfile version it serves: v1alpha2 first, then v1alpha1. */
  const servedProfileVersion = hubClient
    .request<{ versions?: Array<{ version?: string }> }>({
      method: "GET",
      path: `/apis/${clusterProfileGroup}`,
    })
    .pipe(
      Effect.map((g) => {
        const served = new Set((g.versions ?? []).map((v) => v.version))
        return clusterProfileVersions.find((v) => served.has(v)) ?? clusterProfileVersions[0]
      }),
      Effect.tapError((e) =>
        Effect.logWarning("ClusterProfiles are not served by the hub cluster; watching v1alpha2 anyway").pipe(
          Effect.annotateLogs({ error: e.message }),
        ),
      ),
      Effect.orElseSucceed((): ClusterProfileVersion => clusterProfileVersions[0]),
    )

  const secrets = yield* makeInformer<V1Secret>({
    client: hubClient,
    name: "registration-secrets",
    resource: secretResource,
    namespace,
    labelSelector: `${registrationLabel}=true`,
    resyncMs: config.resyncPeriodMs,
  })
  // Cluster API's <cluster>-kubeconfig Secrets, when the operator selects them: the same lifecycle,
  // the kubeconfig under data key "value". A Secret in both selections counts as a labelled one.
  const capiSecrets =
    config.capiKubeconfigSelector === ""
      ? undefined
      : yield* makeInformer<V1Secret>({
          client: hubClient,
          name: "registration-capi-secrets",
          resource: secretResource,
          namespace,
          labelSelector: config.capiKubeconfigSelector,
          resyncMs: config.resyncPeriodMs,
        })
  const queue = yield* makeWorkQueue({ name: "registration" })
  const keyOf = (name: string) => `${namespace}/${name}`
  const enqueue = (name: string) => queue.addUnsafe(keyOf(name))
  for (const informer of [secrets, capiSecrets])
    informer?.addHandler({
      onAdd: (s) => enqueue(s.metadata?.name ?? ""),
      onUpdate: (_, s) => enqueue(s.metadata?.name ?? ""),
      onDelete: (s) => enqueue(s.metadata?.name ?? ""),
    })
  // ClusterProfiles in the hub namespace, when the hub operator gave a provider file: v1alpha2 when the
  // API server serves it, else v1alpha1 (read through the same fields).
  const profileVersion: ClusterProfileVersion | undefined = options.accessProviders
    ? yield* servedProfileVersion
    : undefined
  const profileResource = profileVersion
    ? { group: clusterProfileGroup, version: profileVersion, plural: clusterProfilePlural }
    : undefined
  const profiles = profileResource
    ? yield* makeInformer<Registering>({
        client: hubClient,
        name: "registration-clusterprofiles",
        resource: profileResource,
        namespace,
        ...(config.clusterprofileSelector !== "" ? { labelSelector: config.clusterprofileSelector } : {}),
        resyncMs: config.resyncPeriodMs,
      })
    : undefined
  profiles?.addHandler({
    onAdd: (s) => enqueue(s.metadata?.name ?? ""),
    onUpdate: (_, s) => enqueue(s.metadata?.name ?? ""),
    onDelete: (s) => enqueue(s.metadata?.name ?? ""),
  })
  /** A registering object: a Secret of either selection (the labelled one first), else a ClusterProfile. */
  const cachedSecret = (name: string): Registering | undefined =>
    secrets.store.get(keyOf(name)) ?? capiSecrets?.store.get(keyOf(name)) ?? profiles?.store.get(keyOf(name))
  /** Every registering object, once per name (a Secret hides a ClusterProfile of the same name). */
  const allSecrets = (): Registering[] => {
    const all: Registering[] = [...secrets.store.list()]
    const names = new Set(all.map((s) => s.metadata?.name))
    for (const more of [capiSecrets?.store.list() ?? [], profiles?.store.list() ?? []])
      for (const s of more)
        if (!names.has(s.metadata?.name)) {
          names.add(s.metadata?.name)
          all.push(s)
        }
    return all
  }
  const isProfile = (obj: Registering) => obj.kind === "ClusterProfile"
  const sourceOf = (obj: Registering): RegistrationSource => ({
    kind: isProfile(obj)
      ? "ClusterProfile"
      : obj.metadata?.labels?.[registrationLabel] === "true"
        ? "Secret"
        : "ClusterAPISecret",
    name: obj.metadata?.name ?? "",
  })
  /** Where a registering object lives, for its PATCH. */
  const resourceOf = (obj: Registering) =>
    isProfile(obj) && profileResource ? profileResource : secretResource

  const recordEvent = (secret: Registering, type: "Normal" | "Warning", reason: string, message: string) =>
    Effect.gen(function* () {
      const name = secret.metadata?.name ?? "unknown"
      // Only the hub that works the member speaks for it.
      if (!owns(name)) return
      // events.k8s.io wants MicroTime: exactly six fractional digits.
      const now = new Date(yield* Clock.currentTimeMillis).toISOString().replace(/\.(\d{3})Z$/, ".$1000Z")
      yield* options
        .hubClientFor(name)
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
            regarding: isProfile(secret)
              ? {
                  apiVersion: `${clusterProfileGroup}/${profileVersion}`,
                  kind: "ClusterProfile",
                  namespace,
                  name,
                  uid: secret.metadata?.uid,
                }
              : { apiVersion: "v1", kind: "Secret", namespace, name, uid: secret.metadata?.uid },
          },
        })
        .pipe(
          Effect.catch((e) =>
            Effect.logWarning("recording an Event failed").pipe(Effect.annotateLogs({ error: e.message })),
          ),
        )
    })

  /** The policy's verdict on a Secret, cached per resourceVersion (re-checked once a credential expired). */
  const checkOf = (secret: Registering, now: number): RegistrationCheck => {
    const name = secret.metadata?.name ?? ""
    const rv = secret.metadata?.resourceVersion ?? ""
    const cached = checkCache.get(name)
    const expired =
      cached?.result.ok === true &&
      cached.result.credentialExpiry !== undefined &&
      cached.result.credentialExpiry.getTime() <= now
    if (cached && cached.rv === rv && !expired) return cached.result
    const result: RegistrationCheck = isProfile(secret)
      ? checkClusterProfile({
          profile: secret,
          providers: options.accessProviders ?? new Map(),
          policy,
          now: new Date(now),
        })
      : checkKubeconfig({
          secretName: name,
          data: secret.data,
          annotations: secret.metadata?.annotations,
          policy,
          now: new Date(now),
          ...(sourceOf(secret).kind === "ClusterAPISecret" ? { dataKey: capiKubeconfigDataKey } : {}),
        })
    checkCache.set(name, { rv, result })
    return result
  }

  /**
   * The cluster an accepted check talks to, once per check (URL parse and CA hash): every registration
   * reconcile looks at every Secret's cluster (candidates, neighbours), and a check is cached per
   * resourceVersion.
   */
  const clusters = new WeakMap<KubeconfigAccepted, ClusterRef>()
  const clusterOfCheck = (checked: KubeconfigAccepted): ClusterRef => {
    let c = clusters.get(checked)
    if (!c) {
      c = clusterOf(checked.kubeConfig, checked.server)
      clusters.set(checked, c)
    }
    return c
  }

  /**
   * Every labelled Secret the policy accepts, as a candidate for an engine (deleted ones still occupy),
   * and those the admission rule refuses; kept while the cached objects stay the same and no accepted
   * credential among them expired.
   */
  const admitted = sameObjectsMemo((objects: ReadonlyArray<Registering>, now: number) => {
    let validUntil = Number.POSITIVE_INFINITY
    const all = objects.flatMap((s): Array<Candidate & { readonly terminating: boolean }> => {
      const checked = checkOf(s, now)
      if (!checked.ok) return []
      const expiry = checked.credentialExpiry?.getTime()
      if (expiry !== undefined && expiry < validUntil) validUntil = expiry
      return [
        {
          name: s.metadata?.name ?? "",
          created: createdOf(s),
          cluster: clusterOfCheck(checked),
          namespaces: checked.namespaces,
          terminating: s.metadata?.deletionTimestamp !== undefined,
        },
      ]
    })
    return { result: { all, refused: admission(all) }, validUntil }
  })

  /** Where engines of this hub work (or are about to) on a cluster: released scopes leave these alone. */
  const keptOn = (cluster: ClusterRef) => {
    const { all, refused } = admitted(allSecrets(), Date.now())
    return keptOf(
      all
        .filter((c) => !c.terminating && !refused.has(c.name) && sameCluster(c.cluster, cluster))
        .map((c) => c.namespaces),
    )
  }

  /** Requeues the Secrets registering any of these clusters (or all, when none is given). */
  const requeueNeighbours = (self: string, clusters: ReadonlyArray<ClusterRef | undefined>) => {
    const now = Date.now()
    for (const s of allSecrets()) {
      const name = s.metadata?.name ?? ""
      if (name === self) continue
      const checked = checkOf(s, now)
      if (!checked.ok) continue
      const c = clusterOfCheck(checked)
      if (clusters.length === 0 || clusters.some((x) => x !== undefined && sameCluster(x, c))) enqueue(name)
    }
  }

  /**
   * A Secret (or ClusterProfile) that left its selector may still exist (the label was removed): look
   * it up by name, where it was last seen.
   */
  const lookupUnlisted = (name: string) => {
    const wasProfile = states.get(name)?.source === "ClusterProfile" && profileResource !== undefined
    return hubClient
      .request<{ items?: Registering[] | null; apiVersion?: string }>({
        method: "GET",
        path: pathOf(wasProfile && profileResource ? profileResource : secretResource, { namespace }),
        query: { fieldSelector: `metadata.name=${name}` },
      })
      .pipe(
        Effect.map((list): Registering | undefined => {
          const found = list.items?.[0]
          return found && wasProfile ? { ...found, kind: "ClusterProfile" } : found
        }),
      )
  }

  const stateFor = (name: string, secret: Registering): SecretState => {
    let st = states.get(name)
    if (!st) {
      // First sight in this process: what an earlier hub recorded as held is held still.
      st = {
        held: decodeRecords(secret.metadata?.annotations?.[engagedScopesAnnotation]).map((r) => ({
          ...r,
          credentials: new Map(),
          failures: 0,
        })),
      }
      states.set(name, st)
    }
    return st
  }

  const backoffKey = (name: string, h: Held) =>
    `${name} ${clusterKey(h.cluster)} ${describeNamespaces(h.namespaces)}`

  /**
   * Releases one held scope until it succeeds (or once, when the caches never synced there, so nothing
   * can carry the finalizer, or when the Secret is gone), then forgets it and requeues the Secret.
   */
  const releaseHeld = (name: string, st: SecretState, h: Held, once: boolean, secret: Registering) =>
    Effect.gen(function* () {
      const key = backoffKey(name, h)
      const done = () => {
        backoff.forget(key)
        st.held = st.held.filter((x) => x !== h)
        if (!st.held.some((x) => x.failures > 0)) delete st.releaseError
        enqueue(name)
      }
      for (;;) {
        // Ownership may move while this retries: the new owner releases it.
        if (!owns(name)) return
        const result = yield* releaseScope({
          name,
          credentials: [...h.credentials.values()].reverse(),
          execTimeoutMs: config.execPluginTimeoutMs,
          namespaces: h.namespaces,
          kept: () => keptOn(h.cluster),
          userAgent: options.userAgent,
          http2: config.http2,
          mayWrite: options.fenceFor(name).mayWrite,
        }).pipe(Effect.result)
        if (result._tag === "Success") {
          const { released, what } = result.success
          yield* Effect.logInfo("released the hub's finalizers in a scope it no longer works in").pipe(
            Effect.annotateLogs({ released, scope: what, server: h.cluster.server }),
          )
          if (released > 0)
            yield* recordEvent(
              secret,
              "Normal",
              "FinalizersReleased",
              `removed ${finalizerName} from ${released} BackupCheck(s) in ${what} at ${h.cluster.server}`,
            )
          h.failures = 0
          return done()
        }
        const error = result.failure.message
        if (!h.synced || once) {
          yield* Effect.logInfo(
            h.synced
              ? "could not release finalizers of a Secret that is gone; not retrying"
              : "could not reach a member whose caches never synced here; nothing to release",
          ).pipe(Effect.annotateLogs({ server: h.cluster.server, error }))
          return done()
        }
        h.failures++
        st.releaseError = error
        yield* Effect.logWarning("releasing the hub's finalizers failed; retrying with backoff").pipe(
          Effect.annotateLogs({ server: h.cluster.server, error, failures: h.failures }),
        )
        if (h.failures === 1) yield* recordEvent(secret, "Warning", "FinalizerReleaseFailed", error)
        enqueue(name)
        yield* Effect.sleep(backoff.when(key, yield* Clock.currentTimeMillis))
      }
    })

  /**
   * Starts the Secret's fiber: waits for its previous fiber (its engine drains there, never in a
   * worker) and for engines it displaces, releases every held scope the new engine does not cover,
   * then runs the engine, if one is desired.
   */
  const startFiber = (
    name: string,
    st: SecretState,
    desired: Desired | { kind: "gone" },
    secret: Registering,
  ) =>
    Effect.gen(function* () {
      const previous = FiberMap.getUnsafe(fibers, name)
      const engineScope =
        desired.kind === "engine"
          ? { cluster: desired.cluster, namespaces: desired.checked.namespaces }
          : undefined
      const displaced: Array<Fiber.Fiber<unknown, unknown>> = []
      if (engineScope) {
        for (const e of engines) {
          if (e.name === name || !sameCluster(e.cluster, engineScope.cluster)) continue
          if (!overlaps(e.namespaces, engineScope.namespaces)) continue
          displaced.push(e.fiber)
          enqueue(e.name)
        }
      }
      const entry = members.get(name)
      const releases = st.held.filter((h) => !(engineScope && sameScope(h, engineScope)))
      const once = desired.kind === "gone"
      const feed =
        desired.kind === "engine"
          ? new CredentialFeed({
              kubeConfig: desired.checked.kubeConfig,
              expiry: desired.checked.credentialExpiry,
            })
          : undefined
      if (feed) st.feed = feed
      else delete st.feed
      st.credentialHash = desired.kind === "engine" ? desired.checked.hash : undefined
      const fiber = yield* FiberMap.run(
        fibers,
        name,
      )(
        Effect.gen(function* () {
          if (previous._tag === "Some") yield* Fiber.await(previous.value)
          for (const f of displaced) yield* Fiber.await(f)
          const releasing = yield* Effect.forkScoped(
            Effect.forEach(releases, (h) => releaseHeld(name, st, h, once, secret), {
              concurrency: "unbounded",
              discard: true,
            }),
          )
          if (desired.kind !== "engine" || !entry || !feed) return yield* Fiber.await(releasing)
          const engine = yield* runMember(
            {
              entry,
              credential: feed,
              namespaces: desired.checked.namespaces,
              execClusterConfig: desired.checked.execClusterConfig,
              onExecPluginFailed: (message) => recordEvent(secret, "Warning", "ExecPluginFailed", message),
              created: createdOf(secret),
              onDuplicate: (message) =>
                recordEvent(secret, "Warning", registrationReasons.DuplicateMember, message),
            },
            {
              hubClient: options.hubClientFor(name),
              globalLimit: options.globalLimit,
              syncLimit: options.syncLimit,
              statusTicker: options.statusTicker,
              statusWrites: options.statusWrites,
              settings: config,
              metrics,
              drainGraceMs: () => options.drainGraceMs(name),
              fence: options.fenceFor(name),
              userAgent: options.userAgent,
              identities,
            },
          )
          // Workers start once the caches synced: from then on finalizers may exist in this scope.
          yield* engine.awaitSynced
          const held = st.held.find((h) => engineScope && sameScope(h, engineScope))
          if (held && !held.synced) {
            held.synced = true
            enqueue(name)
          }
          return yield* Effect.never
        }).pipe(Effect.scoped, Effect.annotateLogs({ cluster: name })),
      )
      if (engineScope) {
        const running = { name, ...engineScope, fiber }
        engines.add(running)
        fiber.addObserver(() => engines.delete(running))
      }
    })

  /**
   * Makes the Secret carry our finalizer exactly while something is held, and the annotation list what
   * is held. A compare-and-swap on the cached resourceVersion: a Conflict requeues (the cache was behind).
   */
  const persist = (secret: Registering, st: SecretState) =>
    Effect.gen(function* () {
      const meta = secret.metadata ?? {}
      const stale = st.patched !== undefined && st.patched.from === meta.resourceVersion
      const finalizers = stale ? (st.patched?.finalizers ?? []) : (meta.finalizers ?? [])
      const annotation = stale ? st.patched?.annotation : meta.annotations?.[engagedScopesAnnotation]
      const wantAnnotation = encodeRecords(st.held)
      const has = finalizers.includes(memberCleanupFinalizer)
      const terminating = meta.deletionTimestamp !== undefined
      const nextFinalizers =
        st.held.length > 0
          ? has || terminating // a finalizer cannot be added to an object being deleted
            ? finalizers
            : [...finalizers, memberCleanupFinalizer]
          : finalizers.filter((f) => f !== memberCleanupFinalizer)
      if (nextFinalizers.length === finalizers.length && annotation === wantAnnotation) return
      const patched = yield* options.hubClientFor(meta.name ?? "").request<Registering>({
        method: "PATCH",
        path: pathOf(resourceOf(secret), { namespace, name: meta.name }),
        contentType: "application/merge-patch+json",
        body: {
          metadata: {
            resourceVersion: meta.resourceVersion,
            finalizers: nextFinalizers,
            annotations: { [engagedScopesAnnotation]: wantAnnotation ?? null },
          },
        },
      })
      st.patched = {
        from: meta.resourceVersion ?? "",
        finalizers: patched.metadata?.finalizers ?? [],
        annotation: patched.metadata?.annotations?.[engagedScopesAnnotation],
      }
    })

  const deleteMemberCluster = (name: string) =>
    Effect.gen(function* () {
      members.delete(name)
      metrics.forgetMember(name)
      if (!owns(name)) return
      yield* options
        .hubClientFor(name)
        .request({ method: "DELETE", path: pathOf(memberClusters, { name }) })
        .pipe(Effect.catchIf(isNotFound, () => Effect.void))
    })

  /** The Secret is gone without waiting for us: one best-effort release of what memory holds. */
  const gone = (name: string) =>
    Effect.gen(function* () {
      const st = states.get(name)
      if (st && !owns(name)) yield* FiberMap.remove(fibers, name)
      else if (st && (st.held.length > 0 || FiberMap.hasUnsafe(fibers, name))) {
        yield* Effect.logInfo("registration Secret gone; member disengaged")
        const placeholder: Registering = { metadata: { name, namespace } }
        yield* startFiber(name, st, { kind: "gone" }, placeholder)
      }
      states.delete(name)
      checkCache.delete(name)
      yield* deleteMemberCluster(name)
      requeueNeighbours(name, [])
    })

  const reconcile = (req: { namespace: string; name: string }) =>
    Effect.gen(function* () {
      const name = req.name
      const fence = options.fenceFor(name)
      const owned = fence.owned()
      const cached = cachedSecret(name)
      const secret = cached ?? (yield* lookupUnlisted(name))
      if (!secret) {
        yield* gone(name)
        return {}
      }
      // Labelled but not cached yet (deleted and created again): its add event brings it back here.
      if (!cached && secret.metadata?.labels?.[registrationLabel] === "true") return {}
      const labelled = cached !== undefined
      const now = yield* Clock.currentTimeMillis
      const st = stateFor(name, secret)
      const terminating = secret.metadata?.deletionTimestamp !== undefined
      const checked = checkOf(secret, now)
      const cluster = checked.ok ? clusterOfCheck(checked) : undefined

      let desired: Desired
      if (terminating || !labelled)
        desired = { kind: "disengaging", why: terminating ? "deleted" : "unlabelled" }
      else if (!checked.ok) desired = { kind: "refused", reason: checked.reason, message: checked.message }
      else {
        const by = admitted(allSecrets(), now).refused.get(name)
        desired = by
          ? { kind: "duplicate", of: by }
          : { kind: "engine", checked, cluster: cluster as ClusterRef }
      }

      // What reaches the held scopes: the Secret's own credentials, when the policy accepts them.
      if (checked.ok && cluster) {
        for (const h of st.held) if (sameCluster(h.cluster, cluster)) addCredential(h, checked)
      }
      if (desired.kind === "engine") {
        const scope = { cluster: desired.cluster, namespaces: desired.checked.namespaces }
        if (!st.held.some((h) => sameScope(h, scope))) {
          // Finalizers an earlier engine put in this scope are this engine's to release later.
          const synced = st.held.some(
            (h) =>
              h.synced && sameCluster(h.cluster, scope.cluster) && overlaps(h.namespaces, scope.namespaces),
          )
          const held: Held = { ...scope, synced, credentials: new Map(), failures: 0 }
          addCredential(held, desired.checked)
          st.held.push(held)
        }
      }
      // Held scopes nothing can reach any more (the old server of a re-pointed Secret, after a restart).
      const unreachable = st.held.filter((h) => h.credentials.size === 0)
      if (unreachable.length > 0) {
        st.held = st.held.filter((h) => h.credentials.size > 0)
        for (const h of unreachable.filter((x) => x.synced)) {
          const message = `cannot release ${finalizerName} in ${describeNamespaces(h.namespaces)} at ${h.cluster.server}: the hub no longer has credentials for that server (the Secret was re-pointed or refused while no hub ran). Remove the finalizer there by hand (see docs/deploy/unregistering.md).`
          yield* Effect.logWarning("held scope without credentials; forgetting it").pipe(
            Effect.annotateLogs({ server: h.cluster.server }),
          )
          yield* recordEvent(secret, "Warning", "FinalizersNotReleased", message)
        }
      }

      const previousCluster = st.cluster
      if (cluster) st.cluster = cluster
      const signature =
        desired.kind === "engine"
          ? `engine ${desired.checked.connectionHash}`
          : desired.kind === "duplicate"
            ? `duplicate ${desired.of.name}`
            : desired.kind === "refused"
              ? `refused ${desired.reason} ${desired.message}`
              : `disengaging ${checked.ok ? checked.hash : "-"}`

      // Disengaged and nothing held: the MemberCluster goes, then our finalizer (the Secret with it).
      if (desired.kind === "disengaging" && st.held.length === 0) {
        if (st.signature !== signature) yield* Effect.logInfo("member disengaged")
        st.signature = signature
        yield* deleteMemberCluster(name)
        if (owned) yield* persist(secret, st)
        requeueNeighbours(name, [previousCluster, cluster])
        return {}
      }

      const labels = copiedLabels(secret)
      let entry = members.get(name)
      if (!entry) {
        entry = newMemberEntry(name, labels)
        const ownerless = options.ownerlessFor?.(name)
        if (ownerless) entry.ownerless = ownerless
        members.set(name, entry)
      }
      entry.labels = labels
      entry.properties = isProfile(secret)
        ? clusterProfileProperties(secret, maxClusterProperties)
        : undefined
      if (labelled) {
        entry.source = sourceOf(secret)
        st.source = entry.source.kind
      }

      // Recorded before any engine can put a finalizer there (the member's work waits for this).
      if (owned) {
        yield* persist(secret, st)
        if (desired.kind === "engine") fence.markRecorded()
      }

      const changed = st.signature !== signature
      const running = FiberMap.hasUnsafe(fibers, name)
      const engineScope =
        desired.kind === "engine"
          ? { cluster: desired.cluster, namespaces: desired.checked.namespaces }
          : undefined
      const releasable = owned && st.held.some((h) => !(engineScope && sameScope(h, engineScope)))
      if (changed || (!running && (desired.kind === "engine" || releasable))) {
        const rebuild = st.signature?.startsWith("engine ") === true
        if (desired.kind === "engine") {
          yield* Effect.logInfo(
            rebuild ? "kubeconfig changed; rebuilding member engine" : "engaging member",
          ).pipe(Effect.annotateLogs({ server: desired.checked.server }))
          entry.refused = undefined
        }
        yield* startFiber(name, st, desired, secret)
        st.signature = signature
        if (desired.kind === "engine")
          yield* recordEvent(
            secret,
            "Normal",
            rebuild ? "MemberRebuilt" : "MemberEngaged",
            `member ${name} engaged at ${desired.checked.server}`,
          )
        if (changed) requeueNeighbours(name, [previousCluster, cluster])
      } else if (desired.kind === "engine" && st.feed && st.credentialHash !== desired.checked.hash) {
        // Same connection, new credential: swapped into the running engine, which keeps its caches.
        st.credentialHash = desired.checked.hash
        st.feed.publish({
          kubeConfig: desired.checked.kubeConfig,
          expiry: desired.checked.credentialExpiry,
        })
        yield* Effect.logInfo("credential changed; swapping it into the running member")
        yield* recordEvent(
          secret,
          "Normal",
          "CredentialRotated",
          `member ${name}: new credential swapped in without a rebuild`,
        )
      }

      if (desired.kind === "engine") {
        delete st.announced
        if (owned) yield* syncMemberCluster(options.hubClientFor(name), entry, config.statusRefreshMs)
        return {}
      }
      const refusal =
        desired.kind === "refused"
          ? { reason: desired.reason, message: desired.message }
          : desired.kind === "duplicate"
            ? {
                reason: registrationReasons.DuplicateMember,
                message: `Secret ${desired.of.name} registered the same cluster (${desired.of.cluster.server}, ${describeNamespaces(desired.of.namespaces)}) earlier; this registration gets no engine until ${desired.of.name} is removed`,
              }
            : {
                reason: registrationReasons.Disengaging,
                message:
                  `registration Secret ${desired.why}: releasing ${finalizerName} from the member's BackupChecks before letting go${st.releaseError ? `; last attempt failed: ${st.releaseError}` : ""}`.slice(
                    0,
                    1024,
                  ),
              }
      entry.refused = refusal
      if (owned) yield* syncMemberCluster(options.hubClientFor(name), entry, config.statusRefreshMs)
      if (desired.kind !== "disengaging" && st.announced !== refusal.message) {
        st.announced = refusal.message
        if (desired.kind === "refused")
          yield* Effect.logWarning("registration Secret refused").pipe(
            Effect.annotateLogs({ reason: refusal.reason, refusal: refusal.message }),
          )
        else
          yield* Effect.logWarning("registration Secret duplicates an earlier one").pipe(
            Effect.annotateLogs({ earlier: desired.of.name }),
          )
        yield* recordEvent(secret, "Warning", refusal.reason, refusal.message)
      }
      return {}
    })

  /**
   * A Secret whose label was removed while no hub ran still carries our finalizer, out of the informer's
   * sight: list the others once and reconcile those.
   */
  const sweepUnlabelled = Effect.gen(function* () {
    let continueToken: string | undefined
    do {
      const page = yield* hubClient.request<{ items?: V1Secret[] | null; metadata?: { continue?: string } }>({
        method: "GET",
        path: pathOf(secretResource, { namespace }),
        query: { labelSelector: `${registrationLabel}!=true`, limit: "100", continue: continueToken },
      })
      for (const s of page.items ?? [])
        if ((s.metadata?.finalizers ?? []).includes(memberCleanupFinalizer)) enqueue(s.metadata?.name ?? "")
      continueToken = page.metadata?.continue || undefined
    } while (continueToken !== undefined)
    // ClusterProfiles that left the selector while no hub ran, still carrying our finalizer.
    if (profileResource && config.clusterprofileSelector !== "") {
      let cont: string | undefined
      do {
        const page = yield* hubClient.request<{
          items?: Registering[] | null
          metadata?: { continue?: string }
        }>({
          method: "GET",
          path: pathOf(profileResource, { namespace }),
          query: { limit: "100", continue: cont },
        })
        for (const p of page.items ?? []) {
          const name = p.metadata?.name ?? ""
          if (
            (p.metadata?.finalizers ?? []).includes(memberCleanupFinalizer) &&
            !profiles?.store.get(keyOf(name))
          ) {
            stateFor(name, p).source = "ClusterProfile"
            enqueue(name)
          }
        }
        cont = page.metadata?.continue || undefined
      } while (cont !== undefined)
    }
  }).pipe(
    Effect.catch((e) =>
      Effect.logWarning("listing unlabelled Secrets that carry the hub's finalizer failed").pipe(
        Effect.annotateLogs({ error: e.message }),
      ),
    ),
  )

  const allSynced = Effect.all(
    [secrets.awaitSynced, capiSecrets?.awaitSynced ?? Effect.void, profiles?.awaitSynced ?? Effect.void],
    {
      discard: true,
    },
  )
  yield* allSynced.pipe(
    Effect.andThen(Effect.sync(options.onSynced)),
    Effect.andThen(Effect.logInfo("registration Secrets listed")),
    Effect.andThen(sweepUnlabelled),
    Effect.forkScoped,
  )
  yield* allSynced.pipe(Effect.timeout(60_000), Effect.ignore)
  yield* runController({ name: "registration", cluster: "hub", queue, reconcile, workers })
  /** Every member the registration knows: registered now, or still being let go. */
  const names = (): Set<string> => {
    const all = new Set(states.keys())
    for (const s of allSecrets()) all.add(s.metadata?.name ?? "")
    all.delete("")
    return all
  }
  return { fibers, secrets, names, enqueue }
}) as (options: RegistrationOptions) => Effect.Effect<Registration, never, Scope.Scope>

export interface Registration {
  /** Every member the registration knows (registered, or being let go): what sharding assigns. */
  readonly names: () => Set<string>
  /** Runs a member's registration again (its ownership changed). */
  readonly enqueue: (name: string) => void
}
