// `fleetcheck dev --hub-replicas N`: what dev needs to run N sharding hub replicas on its local fleet
// and show a newcomer who works what. Dev's own replica (in its process) picks an identity that splits
// the members evenly with the others' (their identities are random, as any hub's); the banner lists
// every replica as its dashboard numbers it; a replica that exits while the fleet runs is reported.
// The processes themselves are started by dev.ts through the local-fleet harness.
import { memberLeaseName, shardLeaseLabel } from "../api/names.ts"
import { assignAll } from "../hub/sharding/assignment.ts"

/** Most hub replicas dev runs: each is a whole hub caching the whole fleet, on a developer's machine. */
export const maxHubReplicas = 10

/** How many members each replica would work: by identity, every replica listed (0 for none). */
export const sharesOf = (
  members: ReadonlyArray<string>,
  replicas: ReadonlyArray<string>,
): Map<string, number> => {
  const shares = new Map(replicas.map((r) => [r, 0]))
  for (const r of assignAll(members, replicas).values()) shares.set(r, (shares.get(r) ?? 0) + 1)
  return shares
}

/**
 * Of `candidates` (tried in order), the identity that, joining `others`, gives the least loaded replica
 * the most members, then the busiest the fewest. Rendezvous hashing spreads members evenly only on
 * average: with dev's few members one replica could get all of them, and a newcomer would see no split.
 * Stops at the first even split (shares differ by at most one). Undefined only for no candidates.
 */
export const balancedIdentity = (
  members: ReadonlyArray<string>,
  others: ReadonlyArray<string>,
  candidates: Iterable<string>,
): string | undefined => {
  let best: { identity: string; min: number; max: number } | undefined
  for (const identity of candidates) {
    const counts = [...sharesOf(members, [...others, identity]).values()]
    const min = Math.min(...counts)
    const max = Math.max(...counts)
    if (best === undefined || min > best.min || (min === best.min && max < best.max))
      best = { identity, min, max }
    if (max - min <= 1) break
  }
  return best?.identity
}

/** `count` identities from `make`, for {@link balancedIdentity} (a bounded search: hashing is cheap). */
export function* identityCandidates(make: () => string, count = 1_000): Generator<string> {
  for (let i = 0; i < count; i++) yield make()
}

/** One hub replica as the banner shows it. */
export interface ReplicaSummary {
  /** Unique in the fleet: the in-process hub is `hub-1`, the processes `hub-2`…; their log files' names. */
  readonly name: string
  readonly identity: string
  /** Where its dashboard is (the API's listener unless it has a dashboard listener of its own). */
  readonly dashboardUrl: string
  /** The other replicas' process id and log file; undefined for dev's own. */
  readonly process?: { readonly pid: number; readonly logFile: string }
}

/**
 * "replica k of N" as each replica's dashboard says it: the position among the live identities, sorted
 * (shards.ts describeShare). Dev's list is the live set once every replica announced itself.
 */
export const positionsOf = (replicas: ReadonlyArray<ReplicaSummary>): Map<string, number> =>
  new Map(
    replicas
      .map((r) => r.identity)
      .sort()
      .map((identity, i) => [identity, i + 1]),
  )

/**
 * The banner's lines about the replicas: each with its dashboard, its process and log, and who works
 * which member (`holders`: member → identity, as the member Leases say; "" for none).
 */
export const replicaBannerLines = (options: {
  readonly replicas: ReadonlyArray<ReplicaSummary>
  readonly holders: ReadonlyMap<string, string>
  readonly namespace: string
  readonly kubectl: string
  readonly hubKubeconfig: string
}): string[] => {
  const { replicas, holders } = options
  const position = positionsOf(replicas)
  const label = (identity: string) => {
    const k = position.get(identity)
    return k === undefined ? `nobody live (${identity || "no holder"})` : `replica ${k}`
  }
  const sorted = [...replicas].sort((a, b) => position.get(a.identity)! - position.get(b.identity)!)
  const width = Math.max(...[...holders.keys()].map((m) => m.length), 0)
  return [
    `  replicas    ${replicas.length} hub replicas sharding the members (docs/adr/0011): each member is worked by one, every one answers for the whole fleet`,
    ...sorted.map(
      (r) =>
        `    replica ${position.get(r.identity)} of ${replicas.length}  ${r.dashboardUrl}/  ${r.name}, ${
          r.process ? `pid ${r.process.pid}, log ${r.process.logFile}` : "this process"
        }, identity ${r.identity}`,
    ),
    "  who works what (each member Lease's holder, read from the hub cluster now):",
    ...[...holders.entries()]
      .sort(([a], [b]) => a.localeCompare(b))
      .map(([m, holder]) => `    ${m.padEnd(width)}  ${label(holder)}`),
    `    watch it: KUBECONFIG=${options.hubKubeconfig} ${options.kubectl} get leases -n ${options.namespace} -l ${shardLeaseLabel} -o custom-columns=LEASE:.metadata.name,HOLDER:.spec.holderIdentity`,
    `    each dashboard's header says its share, e.g. "replica 1 of ${replicas.length}, working 1 of ${holders.size} members"`,
  ]
}

/** Every member's Lease holder by member ("" when released or missing), from a list of Leases. */
export const holdersFromLeases = (
  members: ReadonlyArray<string>,
  leases: ReadonlyArray<{
    metadata?: { name?: string }
    spec?: { holderIdentity?: string }
  }>,
): Map<string, string> => {
  const byName = new Map(leases.map((l) => [l.metadata?.name ?? "", l.spec?.holderIdentity ?? ""]))
  return new Map(members.map((m) => [m, byName.get(memberLeaseName(m)) ?? ""]))
}

/** Whether every member's Lease is held by the replica rendezvous hashing assigns it among `replicas`. */
export const settled = (holders: ReadonlyMap<string, string>, replicas: ReadonlyArray<string>): boolean => {
  const assigned = assignAll(holders.keys(), replicas)
  return [...holders].every(([m, holder]) => holder !== "" && assigned.get(m) === holder)
}

/**
 * What dev says when another replica's process exits while the fleet runs: which one, how, what happens
 * to its members, and the end of its log (the run directory, and the log with it, goes at Ctrl-C).
 */
export const replicaExitReport = (options: {
  readonly name: string
  readonly pid: number
  readonly exit: number | string
  readonly logFile: string
  readonly logTail: string
  readonly leaseDurationMs: number
}): string =>
  [
    `hub replica ${options.name} (pid ${options.pid}) exited (${typeof options.exit === "number" ? `code ${options.exit}` : options.exit}) while the fleet runs: the other replicas take its members once their Leases expire (lease duration ${options.leaseDurationMs / 1000}s); the fleet keeps running. Its log: ${options.logFile}`,
    ...options.logTail
      .trimEnd()
      .split("\n")
      .filter((l) => l !== "")
      .slice(-5)
      .map((l) => `  | ${l.slice(0, 400)}`),
  ].join("\n")
