// `fleetcheck unregister NAME`: the reverse of register, leaving no finalizer behind. Idempotent.
//
//   hub      delete the registration Secret (or the ClusterProfile register --clusterprofile wrote);
//            wait (--timeout) for the hub to let go of the member (it releases its finalizers there
//            and deletes the MemberCluster); a ClusterProfile's token Secret goes last, since the
//            hub reads it to reach the member while it lets go
//   member   bindings first (from then on no hub can act there, so no finalizer comes back), then
//            the finalizers any hub left (src/hub/finalizers.ts, retried with backoff), the
//            ServiceAccount (its tokens die with it), the roles, and the namespace when register
//            created it and nothing else lives there; the CRD and the BackupChecks stay unless
//            --delete-crd
import { Effect, Schedule } from "effect"
import {
  createdByAnnotation,
  finalizerName,
  memberCleanupFinalizer,
  memberContextAnnotation,
  profileCredentialLabel,
  registrationAnnotation,
  registrationLabel,
} from "../../api/names.ts"
import { releaseFinalizers } from "../../hub/finalizers.ts"
import {
  configMaps,
  leases,
  memberClusters,
  pathOf,
  pods,
  secrets,
  serviceAccounts,
} from "../../kube/resources.ts"
import { unregisterCommandUsage } from "../usage.ts"
import { parseUnregisterArgs, type UnregisterArgs, UsageError } from "./args.ts"
import {
  type Cluster,
  CommandError,
  hubContextOf,
  listOwned,
  loadKubeConfig,
  openCluster,
  out,
  q,
  runParsedCommand,
  waitFor,
  warn,
} from "./cluster.ts"
import { crdName, createdByValue, describe, kindPath, loadIdentity, type Manifest } from "./manifests.ts"
import { isOurs, type ProfileObject, profilePath, profileVersionIfServed } from "./profile.ts"

/** Deletes the identity's namespace only when register created it and nothing else lives there. */
const removeNamespaceIfOurs = Effect.fnUntraced(function* (
  member: Cluster,
  hub: Cluster,
  ns: string,
  hubNamespace: string,
) {
  const obj = yield* member.get<Manifest>(kindPath("Namespace", ns))
  if (!obj || obj.metadata.annotations?.[createdByAnnotation] !== createdByValue) return
  // The member is the hub cluster itself: never delete the hub's namespace.
  if (member.server === hub.server && ns === hubNamespace) return
  const names = (path: string) =>
    member
      .get<{ items: Manifest[] }>(path)
      .pipe(Effect.map((list) => (list?.items ?? []).map((o) => o.metadata.name)))
  const others = [
    ...(yield* names(pathOf(serviceAccounts, { namespace: ns }))).filter((n) => n !== "default"),
    ...(yield* names(pathOf(configMaps, { namespace: ns }))).filter((n) => n !== "kube-root-ca.crt"),
    ...(yield* names(pathOf(secrets, { namespace: ns }))),
    ...(yield* names(pathOf(pods, { namespace: ns }))),
    ...(yield* names(pathOf(leases, { namespace: ns }))),
  ]
  if (others.length > 0) {
    yield* out(`  left Namespace ${ns}: it holds other objects (${others.slice(0, 5).join(", ")})`)
    return
  }
  if (yield* member.del(kindPath("Namespace", ns)))
    yield* out(`  deleted Namespace ${ns} (register had created it)`)
})

const unregister = Effect.fnUntraced(function* (a: UnregisterArgs) {
  const { name, hubNamespace } = a
  const hubContext = yield* hubContextOf(a.kubeconfig, a.hubContext)
  const hubKc = yield* loadKubeConfig(a.kubeconfig, hubContext, "hub")
  const identity = yield* loadIdentity
  const sa = identity.serviceAccount
  const saNamespace = sa.metadata.namespace ?? identity.namespace.metadata.name

  const hub = yield* openCluster(`hub ${hubContext}`, hubKc)
  const secretPath = kindPath("Secret", name, hubNamespace)
  const secret = yield* hub.get<Manifest>(secretPath)
  const profileToken = secret?.metadata.labels?.[profileCredentialLabel] === "true"
  if (secret && !profileToken && secret.metadata.labels?.[registrationLabel] !== "true") {
    return yield* new UsageError({
      message: `Secret ${hubNamespace}/${name} in the hub is not a registration; not touching it`,
    })
  }
  // A ClusterProfile register wrote (its token Secret is the sign; the API may not even be served).
  const profileVersion = profileToken || !secret ? yield* profileVersionIfServed(hub) : undefined
  const profile =
    profileVersion !== undefined
      ? yield* hub.get<ProfileObject & Manifest>(profilePath(profileVersion, hubNamespace, name))
      : undefined
  const registering: Manifest | undefined = profile && isOurs(profile) ? profile : secret
  const memberContext = a.memberContext ?? registering?.metadata.annotations?.[memberContextAnnotation]
  if (!memberContext) {
    return yield* new UsageError({
      message: registering
        ? `${registering.kind} ${hubNamespace}/${name} does not say which context registered it: pass --context (the member's context)`
        : `no registration ${q(name)} in the hub; pass --context to clean up the member anyway`,
    })
  }
  const registeringPath =
    registering === profile && profileVersion !== undefined
      ? profilePath(profileVersion, hubNamespace, name)
      : secretPath
  const memberKc = yield* loadKubeConfig(a.kubeconfig, memberContext, "member")
  const member = yield* openCluster(`member ${memberContext}`, memberKc)
  yield* member.request({ method: "GET", path: "/version" })

  yield* out(`hub (context ${hubContext}, ${hub.server}):`)
  const registeringKind = registering === profile && profile ? "ClusterProfile" : "Secret"
  if (yield* hub.del(registeringPath)) yield* out(`  deleted ${registeringKind} ${hubNamespace}/${name}`)
  else yield* out(`  ${registeringKind} ${hubNamespace}/${name} already gone`)
  // The hub disengages the member, releases its finalizers there, then deletes the MemberCluster.
  const mcPath = pathOf(memberClusters, { name })
  const gone = yield* waitFor(a.timeoutMs, hub.get(mcPath).pipe(Effect.map((o) => o === undefined)))
  if (gone) yield* out(`  MemberCluster ${name} is gone: the hub has let go of the member`)
  else
    yield* warn(
      `MemberCluster ${name} still exists after ${a.timeoutText}: is the hub running? Cleaning up ` +
        "the member directly (it may keep a stale MemberCluster until it next runs)",
    )

  yield* out(`member (context ${memberContext}, ${member.server}):`)
  const saPath = kindPath("ServiceAccount", sa.metadata.name, saNamespace)
  const existingSa = yield* member.get<Manifest>(saPath)
  const owner = existingSa?.metadata.annotations?.[registrationAnnotation]
  if (existingSa && owner !== name && !a.force) {
    yield* warn(
      `the member's hub identity belongs to registration ${q(owner ?? "(none)")}, not ${q(name)}: left ` +
        "in place (pass --force to remove it anyway)",
    )
    return 0
  }
  if (!existingSa && !a.force) {
    yield* out("  no hub identity here (already unregistered); pass --force to release finalizers anyway")
    return 0
  }
  const mine = (o: Manifest | undefined) =>
    o !== undefined && (a.force || o.metadata.annotations?.[registrationAnnotation] === name)

  // Bindings first: from here on no hub can act in the member, so no finalizer comes back.
  for (const o of identity.clusterBinding) {
    if (!mine(yield* member.get<Manifest>(kindPath(o.kind, o.metadata.name)))) continue
    if (yield* member.del(kindPath(o.kind, o.metadata.name))) yield* out(`  deleted ${describe(o)}`)
  }
  for (const o of yield* listOwned(member, "RoleBinding", name)) {
    if (yield* member.del(kindPath("RoleBinding", o.metadata.name, o.metadata.namespace)))
      yield* out(`  deleted ${describe(o)}`)
  }
  // Cluster-wide: these credentials may list every namespace, and a scope may have changed over time.
  // The identity stays until this succeeds, so a re-run (with --context) finishes the job.
  const { released } = yield* releaseFinalizers(member.client, undefined).pipe(
    Effect.retry({ times: 3, schedule: Schedule.exponential("500 millis") }),
    Effect.mapError(
      (e) =>
        new CommandError({
          message:
            `${e.message}; the hub identity was left in place: re-run ` +
            `fleetcheck unregister ${name} --context ${memberContext} to finish`,
        }),
    ),
  )
  yield* out(
    released > 0
      ? `  removed finalizer ${finalizerName} from ${released} BackupCheck(s) the hub had not released`
      : `  no BackupCheck carries ${finalizerName}`,
  )
  if (!gone) {
    // No hub let go: the member is released now, so the hub's hold on the Secret (or profile) and its
    // stale MemberCluster can go too (a hub that starts later finds nothing left to release).
    const stale = yield* hub.get<Manifest>(registeringPath)
    const finalizers: ReadonlyArray<string> = (stale?.metadata.finalizers as string[] | undefined) ?? []
    if (stale && finalizers.includes(memberCleanupFinalizer)) {
      yield* hub.request({
        method: "PATCH",
        path: registeringPath,
        contentType: "application/merge-patch+json",
        body: {
          metadata: {
            resourceVersion: stale.metadata.resourceVersion,
            finalizers: finalizers.filter((f) => f !== memberCleanupFinalizer),
          },
        },
      })
      yield* out(
        `  removed the hub's finalizer ${memberCleanupFinalizer} from ${registeringKind} ${hubNamespace}/${name}`,
      )
    }
    if (yield* hub.del(mcPath)) yield* out(`  deleted the stale MemberCluster ${name}`)
  }
  if (profileToken && registeringKind === "ClusterProfile" && (yield* hub.del(secretPath)))
    yield* out(`  deleted Secret ${hubNamespace}/${name} (the ClusterProfile's token)`)
  if (yield* member.del(saPath))
    yield* out(
      `  deleted ServiceAccount ${saNamespace}/${sa.metadata.name} (every token issued for it is now invalid)`,
    )
  for (const o of identity.clusterRole) {
    if (!mine(yield* member.get<Manifest>(kindPath(o.kind, o.metadata.name)))) continue
    if (yield* member.del(kindPath(o.kind, o.metadata.name))) yield* out(`  deleted ${describe(o)}`)
  }
  for (const o of yield* listOwned(member, "Role", name)) {
    if (yield* member.del(kindPath("Role", o.metadata.name, o.metadata.namespace)))
      yield* out(`  deleted ${describe(o)}`)
  }
  yield* removeNamespaceIfOurs(member, hub, identity.namespace.metadata.name, hubNamespace)

  if (a.deleteCrd) {
    if (yield* member.del(kindPath("CustomResourceDefinition", crdName)))
      yield* out(
        `  deleted CustomResourceDefinition ${crdName} (and with it every BackupCheck in the member)`,
      )
  } else {
    yield* out(
      `  left CustomResourceDefinition ${crdName} and the BackupChecks in place (--delete-crd removes ` +
        "the CRD and every BackupCheck with it)",
    )
  }
  return 0
})

/** `fleetcheck unregister ARGS`: the exit code (0 done or --help, 1 failed, 2 usage). */
export const runUnregister = (argv: ReadonlyArray<string>): Promise<number> =>
  runParsedCommand(parseUnregisterArgs(argv), unregisterCommandUsage, unregister)
