// Every name users and tests depend on (SPEC §2 and §11), defined once: the API group, kinds and
// plurals, labels, annotations, the finalizer, the hub namespace and the Lease. Paths are built from
// these by src/kube/resources.ts; nothing else spells them out.
import { createHash } from "node:crypto"

export const apiGroup = "fleetcheck.io"
export const apiVersionName = "v1alpha1"
/** The apiVersion field of every fleetcheck kind. */
export const apiVersion = `${apiGroup}/${apiVersionName}` as const

export const backupCheckKind = "BackupCheck"
export const backupCheckPlural = "backupchecks"
export const memberClusterKind = "MemberCluster"
export const memberClusterPlural = "memberclusters"
/** FleetBackupCheck (hub, namespaced): a BackupCheck template placed in every member a selector picks. */
export const fleetBackupCheckKind = "FleetBackupCheck"
export const fleetBackupCheckPlural = "fleetbackupchecks"

/** The hub's finalizer on every BackupCheck it manages. */
export const finalizerName = "fleetcheck.io/cleanup"

/**
 * The hub's finalizer on each registration Secret it engages: the Secret, and so the kubeconfig, stays
 * until the hub has taken fleetcheck.io/cleanup off that member's BackupChecks (Karmada's
 * cluster-controller finalizer on its Cluster objects).
 */
export const memberCleanupFinalizer = "fleetcheck.io/member-cleanup"
/**
 * Written by the hub on a registration Secret: the scopes (server, CA hash, namespaces) where it may have
 * put fleetcheck.io/cleanup under this registration, kept until they are released, so a narrowed scope is
 * still released after a restart or failover.
 */
export const engagedScopesAnnotation = "fleetcheck.io/engaged-scopes"

/** Registration Secrets carry this label with the value "true". */
export const registrationLabel = "fleetcheck.io/kubeconfig"
/** The data key of a registration Secret that holds the kubeconfig. */
export const registrationKubeconfigKey = "kubeconfig"
/** Chooses a context when a registration kubeconfig has several. */
export const contextAnnotation = "fleetcheck.io/context"
/** Scopes a member to these namespaces: `a,b`. */
export const namespacesAnnotation = "fleetcheck.io/namespaces"

/** Labels on restore Jobs: the check they verify and the run they belong to. */
export const labelBackupCheck = "fleetcheck.io/backupcheck"
export const labelRun = "fleetcheck.io/run"
/** On validation Jobs only: `validation` (a Job without it is its run's restore Job). */
export const labelPhase = "fleetcheck.io/phase"
/** On the pods of built-in restore methods (spec.restore): the restore agent runs in them (SPEC §12). */
export const labelAgent = "fleetcheck.io/agent"
/**
 * Sandbox per run (spec.sandbox, ADR 0009): on the run's namespace and on every object the hub puts in
 * it, `fleetcheck.io/sandbox: "true"`, with fleetcheck.io/backupcheck and fleetcheck.io/run as on Jobs.
 */
export const labelSandbox = "fleetcheck.io/sandbox"
/** On a sandbox and its Jobs: the uid of the check it belongs to (a Job there has no ownerReference). */
export const labelBackupCheckUid = "fleetcheck.io/backupcheck-uid"
/** On a sandbox and its Jobs: `<namespace>/<name>` of its check (label values cannot hold "/"). */
export const annotationBackupCheck = "fleetcheck.io/backupcheck"
/** On every BackupCheck a FleetBackupCheck placed: `<namespace>.<name>` of that FleetBackupCheck. */
export const labelFleetBackupCheck = "fleetcheck.io/fleetbackupcheck"
/** On a drill check (a FleetBackupCheck's spec.drill): the member whose backup it restores. */
export const labelDrillSource = "fleetcheck.io/drill-source"
/** The same, exactly (a label value is bounded to 63 characters, a cluster name is not). */
export const annotationDrillSource = "fleetcheck.io/drill-source"
/**
 * On a source member's placed BackupCheck: the latest drill verdict per target (JSON, written by the
 * hub; ADR 0012 amendment).
 */
export const annotationDrills = "fleetcheck.io/drills"
/** On a placed BackupCheck: the hash of the template it was written from (skips no-op updates). */
export const annotationTemplateHash = "fleetcheck.io/template-hash"
/**
 * The hub's finalizer on each FleetBackupCheck: it stays until every BackupCheck placed from it is gone
 * (or its member is).
 */
export const placementFinalizer = "fleetcheck.io/placement"

/** The run's W3C traceparent, recorded on its Job. */
export const annotationTraceparent = "fleetcheck.io/traceparent"

/** Where registration Secrets, MemberClusters' Events and the Lease live unless configured. */
export const defaultHubNamespace = "fleetcheck-system"
/** The leader-election Lease in the hub namespace. */
export const hubLeaseName = "fleetcheck-hub"

/** Lease names are DNS subdomains: at most 253 characters. */
const leaseNameMax = 253
const shortHash = (text: string, length: number) =>
  createHash("sha256").update(text).digest("hex").slice(0, length)

/**
 * Sharding (--sharding, ADR 0011): the Lease a hub replica announces itself with, named after a hash of
 * its identity (identities hold characters a Lease name may not).
 */
export const replicaLeaseName = (identity: string): string => `fleetcheck-hub-${shortHash(identity, 16)}`

/**
 * Sharding: the Lease that fences one member's work. A cluster name is a Secret name (a DNS subdomain),
 * so it fits unless it is very long; then its end is replaced by a hash of the whole name.
 */
export const memberLeaseName = (cluster: string): string => {
  const name = `fleetcheck-member-${cluster}`
  if (name.length <= leaseNameMax) return name
  return `${name.slice(0, leaseNameMax - 17).replace(/[.-]+$/, "")}-${shortHash(cluster, 16)}`
}

/**
 * Sharding: the Lease whose holder places FleetBackupChecks (one replica at a time, ADR 0011 decision 8).
 * SPEC §11 names no such Lease; this one follows the hub's own `fleetcheck-hub`.
 */
export const placementLeaseName = "fleetcheck-placement"

/** On every sharding Lease: `replica` (a hub replica's) or `member` (a member's fence). */
export const shardLeaseLabel = "fleetcheck.io/shard-lease"
/** The controller name on Events the hub writes. */
export const reportingController = "fleetcheck.io/hub"

/**
 * The access provider `fleetcheck register --clusterprofile` writes into a ClusterProfile, and the name the
 * hub's provider file gives `fleetcheck credential secret-reader` (KEP-5339's secret reader).
 */
export const secretReaderProvider = "fleetcheck-secret-reader"
/** On a ClusterProfile's token Secret: the API server URL its token may be sent to. */
export const profileServerAnnotation = "fleetcheck.io/server"
/** On a ClusterProfile's token Secret (value "true"): written by register, not a registration. */
export const profileCredentialLabel = "fleetcheck.io/clusterprofile-credential"
/** spec.clusterManager.name of the ClusterProfiles `fleetcheck register` writes. */
export const registerClusterManager = "fleetcheck"

/** On every member object `fleetcheck register` applies: the registration that owns it. */
export const registrationAnnotation = "fleetcheck.io/registration"
/** On a registration Secret: the kubeconfig context `register` used for the member. */
export const memberContextAnnotation = "fleetcheck.io/member-context"
/** On the member namespace when `register` created it (value "fleetcheck-register"). */
export const createdByAnnotation = "fleetcheck.io/created-by"
