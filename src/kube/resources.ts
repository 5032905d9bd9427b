// The resources fleetcheck reads and writes, as ResourceRefs: paths are always built by resourcePath
// from these, never by hand. `at(ref, where)` fills in namespace, name and subresource.
import {
  apiGroup,
  apiVersionName,
  backupCheckPlural,
  fleetBackupCheckPlural,
  memberClusterPlural,
} from "../api/names.ts"
import { type ResourceRef, resourcePath } from "./client.ts"

export type Kind = Pick<ResourceRef, "group" | "version" | "plural">

export const backupChecks: Kind = { group: apiGroup, version: apiVersionName, plural: backupCheckPlural }
export const memberClusters: Kind = { group: apiGroup, version: apiVersionName, plural: memberClusterPlural }
export const fleetBackupChecks: Kind = {
  group: apiGroup,
  version: apiVersionName,
  plural: fleetBackupCheckPlural,
}
export const jobs: Kind = { group: "batch", version: "v1", plural: "jobs" }
export const pods: Kind = { group: "", version: "v1", plural: "pods" }
export const secrets: Kind = { group: "", version: "v1", plural: "secrets" }
export const namespaces: Kind = { group: "", version: "v1", plural: "namespaces" }
export const networkPolicies: Kind = { group: "networking.k8s.io", version: "v1", plural: "networkpolicies" }
export const resourceQuotas: Kind = { group: "", version: "v1", plural: "resourcequotas" }
export const limitRanges: Kind = { group: "", version: "v1", plural: "limitranges" }
export const serviceAccounts: Kind = { group: "", version: "v1", plural: "serviceaccounts" }
export const configMaps: Kind = { group: "", version: "v1", plural: "configmaps" }
export const deployments: Kind = { group: "apps", version: "v1", plural: "deployments" }
export const statefulSets: Kind = { group: "apps", version: "v1", plural: "statefulsets" }
/** Velero's own kinds (spec.restore.velero): the hub reads Backups and creates, reads and deletes Restores. */
export const veleroBackups: Kind = { group: "velero.io", version: "v1", plural: "backups" }
export const veleroRestores: Kind = { group: "velero.io", version: "v1", plural: "restores" }
export const leases: Kind = { group: "coordination.k8s.io", version: "v1", plural: "leases" }
export const events: Kind = { group: "events.k8s.io", version: "v1", plural: "events" }
export const customResourceDefinitions: Kind = {
  group: "apiextensions.k8s.io",
  version: "v1",
  plural: "customresourcedefinitions",
}
export const clusterRoles: Kind = {
  group: "rbac.authorization.k8s.io",
  version: "v1",
  plural: "clusterroles",
}
export const clusterRoleBindings: Kind = {
  group: "rbac.authorization.k8s.io",
  version: "v1",
  plural: "clusterrolebindings",
}
export const roles: Kind = { group: "rbac.authorization.k8s.io", version: "v1", plural: "roles" }
export const roleBindings: Kind = {
  group: "rbac.authorization.k8s.io",
  version: "v1",
  plural: "rolebindings",
}

/** The path of `kind`, optionally in a namespace, optionally one object and its subresource. */
export const pathOf = (
  kind: Kind,
  where: { namespace?: string | undefined; name?: string | undefined; subresource?: string | undefined } = {},
): string => resourcePath({ ...kind, ...where })
