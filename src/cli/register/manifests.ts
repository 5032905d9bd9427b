// The manifests register applies, read at runtime from deploy/ (found upwards from this file: src/cli/
// register or dist/src/cli/register), and the paths of the kinds they hold. A kind not listed here is
// refused when the manifests are loaded, so every path below is known.
import { existsSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { Data, Effect } from "effect"
import { parseAllDocuments } from "yaml"
import { apiGroup, backupCheckPlural } from "../../api/names.ts"
import type { ResourceRef } from "../../kube/client.ts"
import {
  clusterRoleBindings,
  clusterRoles,
  customResourceDefinitions,
  namespaces,
  pathOf,
  roleBindings,
  roles,
  secrets,
  serviceAccounts,
} from "../../kube/resources.ts"

/** deploy/ is missing, unreadable or holds something unexpected. */
export class ManifestError extends Data.TaggedError("ManifestError")<{ readonly message: string }> {}

type Ref = Pick<ResourceRef, "group" | "version" | "plural">

const kinds = {
  CustomResourceDefinition: { ref: customResourceDefinitions, namespaced: false },
  Namespace: { ref: namespaces, namespaced: false },
  ServiceAccount: { ref: serviceAccounts, namespaced: true },
  Secret: { ref: secrets, namespaced: true },
  ClusterRole: { ref: clusterRoles, namespaced: false },
  ClusterRoleBinding: { ref: clusterRoleBindings, namespaced: false },
  Role: { ref: roles, namespaced: true },
  RoleBinding: { ref: roleBindings, namespaced: true },
} as const satisfies Record<string, { readonly ref: Ref; readonly namespaced: boolean }>

export type ManifestKind = keyof typeof kinds

const isManifestKind = (kind: string): kind is ManifestKind => Object.hasOwn(kinds, kind)

export interface Manifest {
  readonly apiVersion: string
  readonly kind: ManifestKind
  readonly metadata: {
    readonly name: string
    readonly namespace?: string
    readonly labels?: Readonly<Record<string, string>>
    readonly annotations?: Readonly<Record<string, string>>
    readonly [k: string]: unknown
  }
  readonly [k: string]: unknown
}

/** What register installs in a member, from deploy/member. */
export interface Identity {
  readonly namespace: Manifest
  readonly serviceAccount: Manifest
  readonly clusterRole: ReadonlyArray<Manifest>
  readonly clusterBinding: ReadonlyArray<Manifest>
  /** Role and RoleBinding templates, applied once per namespace. */
  readonly role: ReadonlyArray<Manifest>
}

/** The BackupCheck CRD's name. */
export const crdName = `${backupCheckPlural}.${apiGroup}`
/** The value of createdByAnnotation on a namespace register created: only then may unregister delete it. */
export const createdByValue = "fleetcheck-register"
/** Selects the identity's Roles and RoleBindings (a label in deploy/member/role.yaml). */
export const identityComponent = "app.kubernetes.io/component=member-identity"

/** The path of a kind, or of one object of it; the namespace is dropped for cluster-scoped kinds. */
export const kindPath = (kind: ManifestKind, name?: string, namespace?: string): string => {
  const info = kinds[kind]
  return pathOf(info.ref, { namespace: info.namespaced ? namespace : undefined, name })
}

export const manifestPath = (o: Manifest): string => kindPath(o.kind, o.metadata.name, o.metadata.namespace)

/** "Role apps/fleetcheck-member" */
export const describe = (o: {
  readonly kind: string
  readonly metadata: { readonly name: string; readonly namespace?: string | undefined }
}): string => `${o.kind} ${o.metadata.namespace ? `${o.metadata.namespace}/` : ""}${o.metadata.name}`

export const withAnnotation = (o: Manifest, key: string, value: string): Manifest => ({
  ...o,
  metadata: { ...o.metadata, annotations: { ...o.metadata.annotations, [key]: value } },
})

const deployDir = Effect.suspend(() => {
  let dir = new URL(".", import.meta.url).pathname
  for (let i = 0; i < 6; i++) {
    if (existsSync(join(dir, "deploy/member"))) return Effect.succeed(join(dir, "deploy"))
    dir = join(dir, "..")
  }
  return Effect.fail(
    new ManifestError({
      message: "cannot find deploy/member next to the fleetcheck sources; run fleetcheck from its checkout",
    }),
  )
})

/** Every object of a YAML file (comments and empty documents skipped); only kinds listed above. */
export const loadManifests = Effect.fnUntraced(function* (file: string) {
  const text = yield* Effect.try({
    try: () => readFileSync(file, "utf8"),
    catch: (e) => new ManifestError({ message: `${file}: ${e instanceof Error ? e.message : String(e)}` }),
  })
  const objects: Manifest[] = []
  for (const doc of parseAllDocuments(text)) {
    const error = doc.errors[0]
    if (error) return yield* new ManifestError({ message: `${file}: ${error.message}` })
    const js = doc.toJS() as { kind?: unknown; metadata?: { name?: unknown } } | null
    if (!js || typeof js !== "object" || typeof js.kind !== "string") continue
    if (!isManifestKind(js.kind)) {
      return yield* new ManifestError({ message: `${file}: unexpected kind ${JSON.stringify(js.kind)}` })
    }
    if (typeof js.metadata?.name !== "string") {
      return yield* new ManifestError({ message: `${file}: a ${js.kind} without metadata.name` })
    }
    objects.push(js as Manifest)
  }
  return objects
})

const memberManifests = (file: string) =>
  Effect.flatMap(deployDir, (dir) => loadManifests(join(dir, "member", file)))

const one = (file: string, kind: ManifestKind) =>
  Effect.flatMap(memberManifests(file), (objects) => {
    const found = objects.find((o) => o.kind === kind)
    return found
      ? Effect.succeed(found)
      : Effect.fail(new ManifestError({ message: `deploy/member/${file} has no ${kind}` }))
  })

export const loadIdentity: Effect.Effect<Identity, ManifestError> = Effect.all({
  namespace: one("namespace.yaml", "Namespace"),
  serviceAccount: one("serviceaccount.yaml", "ServiceAccount"),
  clusterRole: memberManifests("clusterrole.yaml"),
  clusterBinding: memberManifests("clusterrolebinding.yaml"),
  role: memberManifests("role.yaml"),
})

/** deploy/crds/fleetcheck.io_backupchecks.yaml: the CRD register installs in the member. */
export const loadBackupCheckCrd: Effect.Effect<Manifest, ManifestError> = Effect.flatMap(deployDir, (dir) =>
  loadManifests(join(dir, `crds/${apiGroup}_${backupCheckPlural}.yaml`)),
).pipe(
  Effect.flatMap(([crd]) =>
    crd?.kind === "CustomResourceDefinition"
      ? Effect.succeed(crd)
      : Effect.fail(
          new ManifestError({ message: "deploy/crds/fleetcheck.io_backupchecks.yaml holds no CRD" }),
        ),
  ),
)
