// What a registration covers, as plain data: which cluster (its API server URL and CA, so two kubeconfigs
// for one cluster are recognised whatever their user, context or cluster names), which namespaces
// (undefined: all), and the rules built on that:
//   overlap     two scopes on one cluster share a namespace (cluster-wide overlaps everything)
//   admission   of overlapping registrations only the earliest (creationTimestamp, then name) gets an
//               engine; the others are refused with DuplicateMember until it is gone
//   dropped     what a scope the hub used to work in leaves behind once the scopes still worked in are
//               taken out: nothing, some namespaces, or "all but these" (resolved by a LIST)
//   records     the scopes a Secret is responsible for, as the hub writes them in an annotation on it
import { createHash } from "node:crypto"
import type { KubeConfig } from "@kubernetes/client-node"

/** One member cluster: its server URL (normalised) and a hash of its CA data ("" when none is given). */
export interface ClusterRef {
  readonly server: string
  readonly ca: string
}

/** Namespaces a registration covers; undefined means cluster-wide. */
export type Namespaces = ReadonlyArray<string> | undefined

/** A scope the hub may have put fleetcheck.io/cleanup in under one registration. */
export interface ScopeRecord {
  readonly cluster: ClusterRef
  readonly namespaces: Namespaces
  /** The engine's caches synced under it, so its workers ran and finalizers may exist there. */
  readonly synced: boolean
}

export const clusterKey = (c: ClusterRef): string => `${c.server} ${c.ca}`

const normaliseServer = (server: string): string => {
  try {
    // Lower-cases scheme and host, drops a default port; the path stays.
    return new URL(server).href.replace(/\/$/, "")
  } catch {
    return server
  }
}

/**
 * The CA data as a short hash: base64 decoded and whitespace dropped, so a re-wrapped PEM is the same
 * CA. Undefined CA data (the system roots) is "".
 */
export const caHash = (caData: string | undefined): string => {
  if (!caData) return ""
  const pem = Buffer.from(caData, "base64").toString("utf8").replace(/\s+/g, "")
  return createHash("sha256").update(pem).digest("hex").slice(0, 16)
}

/** The cluster an accepted kubeconfig (one cluster, current context set) talks to. */
export const clusterOf = (kubeConfig: KubeConfig, server: string): ClusterRef => ({
  server: normaliseServer(server),
  ca: caHash(kubeConfig.getCurrentCluster()?.caData),
})

export const sameCluster = (a: ClusterRef, b: ClusterRef): boolean => a.server === b.server && a.ca === b.ca

export const sameScope = (a: { cluster: ClusterRef; namespaces: Namespaces }, b: typeof a): boolean =>
  sameCluster(a.cluster, b.cluster) &&
  (a.namespaces === undefined
    ? b.namespaces === undefined
    : b.namespaces !== undefined &&
      a.namespaces.length === b.namespaces.length &&
      a.namespaces.every((n) => b.namespaces?.includes(n)))

export const overlaps = (a: Namespaces, b: Namespaces): boolean =>
  a === undefined || b === undefined || a.some((n) => b.includes(n))

export const describeNamespaces = (ns: Namespaces): string =>
  ns === undefined ? "all namespaces" : `namespaces ${ns.join(",")}`

/** What other registrations still work in on one cluster: everything, or these namespaces. */
export type Kept = "all" | ReadonlySet<string>

export const keptOf = (scopes: ReadonlyArray<Namespaces>): Kept => {
  const kept = new Set<string>()
  for (const ns of scopes) {
    if (ns === undefined) return "all"
    for (const n of ns) kept.add(n)
  }
  return kept
}

/** What releasing `scope` means once `kept` is taken out of it. */
export type Dropped =
  | { readonly kind: "nothing" }
  | { readonly kind: "namespaces"; readonly namespaces: ReadonlyArray<string> }
  /** Cluster-wide, all of it: nothing else works on this cluster. */
  | { readonly kind: "all" }
  /** Cluster-wide except these: the namespaces are found by listing the checks that carry the finalizer. */
  | { readonly kind: "allExcept"; readonly kept: ReadonlySet<string> }

export const dropped = (scope: Namespaces, kept: Kept): Dropped => {
  if (kept === "all") return { kind: "nothing" }
  if (scope === undefined) return kept.size === 0 ? { kind: "all" } : { kind: "allExcept", kept }
  const left = scope.filter((n) => !kept.has(n))
  return left.length === 0 ? { kind: "nothing" } : { kind: "namespaces", namespaces: left }
}

/** A registration that could run an engine: accepted by the policy. */
export interface Candidate {
  readonly name: string
  /** metadata.creationTimestamp (RFC 3339, so it sorts as text). */
  readonly created: string
  readonly cluster: ClusterRef
  readonly namespaces: Namespaces
}

/** Earlier first: creationTimestamp, then name. */
export const earlier = (a: Candidate, b: Candidate): number =>
  a.created < b.created ? -1 : a.created > b.created ? 1 : a.name < b.name ? -1 : a.name > b.name ? 1 : 0

/**
 * One engine per cluster scope: in creation order, a candidate is admitted unless it overlaps one admitted
 * before it. Returns, for each refused candidate, the earliest admitted one it overlaps. Deterministic, so
 * every hub (and every restart) agrees.
 *
 * Indexed per cluster (a registration reconcile asks this of every Secret, and 1,000 namespace-scoped
 * members on a few API servers made a scan of all admitted candidates per candidate the hub's main
 * cost): admitted scopes on one cluster are either one cluster-wide candidate alone or namespaced ones
 * with disjoint namespaces, so a namespace names at most one admitted owner.
 */
export const admission = (candidates: ReadonlyArray<Candidate>): Map<string, Candidate> => {
  const refused = new Map<string, Candidate>()
  /** Per cluster: the admitted cluster-wide candidate, or the admitted owner of each namespace. */
  const clusters = new Map<
    string,
    { wide?: Candidate; first?: Candidate; owners: Map<string, { c: Candidate; order: number }> }
  >()
  let order = 0
  for (const c of [...candidates].sort(earlier)) {
    const key = clusterKey(c.cluster)
    let on = clusters.get(key)
    if (!on) {
      on = { owners: new Map() }
      clusters.set(key, on)
    }
    let first: { c: Candidate; order: number } | undefined
    if (on.wide) first = { c: on.wide, order: -1 }
    else if (c.namespaces === undefined) {
      if (on.first) first = { c: on.first, order: -1 }
    } else
      for (const n of c.namespaces) {
        const owner = on.owners.get(n)
        if (owner && (first === undefined || owner.order < first.order)) first = owner
      }
    if (first) {
      refused.set(c.name, first.c)
      continue
    }
    order++
    on.first ??= c
    if (c.namespaces === undefined) on.wide = c
    else for (const n of c.namespaces) on.owners.set(n, { c, order })
  }
  return refused
}

// The annotation: a JSON array, small and readable, without any credential.
interface RecordJson {
  server: string
  ca: string
  namespaces: string[] | null
  synced: boolean
}

export const encodeRecords = (records: ReadonlyArray<ScopeRecord>): string | undefined =>
  records.length === 0
    ? undefined
    : JSON.stringify(
        records.map(
          (r): RecordJson => ({
            server: r.cluster.server,
            ca: r.cluster.ca,
            namespaces: r.namespaces === undefined ? null : [...r.namespaces],
            synced: r.synced,
          }),
        ),
      )

const isStringArray = (v: unknown): v is string[] =>
  Array.isArray(v) && v.every((x) => typeof x === "string" && x.length > 0 && x.length <= 253)

/** Parses the annotation; entries that are not well-formed are left out (the annotation is only a hint). */
export const decodeRecords = (text: string | undefined): ScopeRecord[] => {
  if (!text || text.length > 64 * 1024) return []
  let parsed: unknown
  try {
    parsed = JSON.parse(text)
  } catch {
    return []
  }
  if (!Array.isArray(parsed)) return []
  const out: ScopeRecord[] = []
  for (const item of parsed.slice(0, 20)) {
    if (typeof item !== "object" || item === null) continue
    const { server, ca, namespaces, synced } = item as Partial<RecordJson>
    if (typeof server !== "string" || typeof ca !== "string" || server.length === 0) continue
    if (namespaces !== null && !isStringArray(namespaces)) continue
    out.push({
      cluster: { server: normaliseServer(server), ca },
      namespaces: namespaces === null ? undefined : namespaces,
      synced: synced === true,
    })
  }
  return out
}
