// Reading API server audit logs (the local-fleet harness's `audit` option) in tests: the mutating
// requests that reached an API server, filtered by who sent them (user, User-Agent) and when the server
// received them, and printed one line each so a failing assertion shows the offending requests.
import type { AuditEvent, LocalCluster } from "../../clusters/local-fleet/index.ts"
import { mutatingVerbs, readAuditLog } from "../../clusters/local-fleet/index.ts"

export type { AuditEvent }

/** One request: its events (RequestReceived, ResponseComplete, ...) merged by auditID. */
export interface AuditedRequest {
  readonly cluster: string
  readonly auditID: string
  readonly verb: string
  readonly user: string
  readonly userAgent: string
  readonly requestURI: string
  readonly resource: string
  readonly subresource: string | undefined
  readonly namespace: string | undefined
  /** From the completed event when there is one (a create's name is known only then). */
  readonly name: string | undefined
  /** When the API server received it, in microseconds since the epoch. */
  readonly receivedUs: number
  readonly received: string
  /** The response code; undefined when the request has not completed (or never did). */
  readonly code: number | undefined
  readonly stage: AuditEvent["stage"]
}

const rfc3339 = /^(\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$/

/** An RFC 3339 time (audit timestamps and Lease MicroTimes carry microseconds) in epoch microseconds. */
export const toMicros = (t: string | Date | number): number => {
  if (typeof t === "number") return t * 1000
  if (t instanceof Date) return t.getTime() * 1000
  const m = rfc3339.exec(t)
  if (!m) throw new Error(`not an RFC 3339 time: ${JSON.stringify(t)}`)
  const seconds = Date.parse(`${m[1]}${m[3]}`)
  if (Number.isNaN(seconds)) throw new Error(`not an RFC 3339 time: ${JSON.stringify(t)}`)
  const fraction = (m[2] ?? "").padEnd(6, "0").slice(0, 6)
  return seconds * 1000 + Number(fraction)
}

/** Epoch microseconds as RFC 3339 with six fractional digits. */
export const fromMicros = (us: number): string =>
  new Date(Math.floor(us / 1000))
    .toISOString()
    .replace(/\.\d{3}Z$/, `.${String(us % 1_000_000).padStart(6, "0")}Z`)

const isMutating = (verb: string) => (mutatingVerbs as ReadonlyArray<string>).includes(verb)

const stageRank: Record<AuditEvent["stage"], number> = {
  RequestReceived: 0,
  ResponseStarted: 1,
  ResponseComplete: 2,
  Panic: 2,
}

/** Merges a cluster's audit events into requests (one per auditID), oldest received first. */
export const requestsOf = (cluster: string, events: ReadonlyArray<AuditEvent>): AuditedRequest[] => {
  const byID = new Map<string, AuditEvent>()
  const firstSeen = new Map<string, AuditEvent>()
  for (const e of events) {
    if (!firstSeen.has(e.auditID)) firstSeen.set(e.auditID, e)
    const seen = byID.get(e.auditID)
    if (seen === undefined || stageRank[e.stage] >= stageRank[seen.stage]) byID.set(e.auditID, e)
  }
  return [...byID.values()]
    .map((e): AuditedRequest => {
      const first = firstSeen.get(e.auditID)!
      return {
        cluster,
        auditID: e.auditID,
        verb: e.verb,
        user: e.user.username,
        userAgent: e.userAgent ?? first.userAgent ?? "",
        requestURI: e.requestURI,
        resource: e.objectRef?.resource ?? "",
        subresource: e.objectRef?.subresource,
        namespace: e.objectRef?.namespace,
        name: e.objectRef?.name ?? first.objectRef?.name,
        receivedUs: toMicros(e.requestReceivedTimestamp),
        received: e.requestReceivedTimestamp,
        code: e.stage === "RequestReceived" ? undefined : e.responseStatus?.code,
        stage: e.stage,
      }
    })
    .sort((a, b) => a.receivedUs - b.receivedUs)
}

export interface WriteFilter {
  /** Exact user name, or a pattern. */
  readonly user?: string | RegExp
  /** Exact User-Agent, or a pattern. */
  readonly userAgent?: string | RegExp
  /** Received at or after (RFC 3339, a Date, or epoch ms). */
  readonly since?: string | Date | number
  /** Received strictly before. */
  readonly until?: string | Date | number
  /** e.g. "jobs", "leases", "backupchecks". */
  readonly resource?: string
  readonly verb?: string
}

const matches = (value: string, want: string | RegExp | undefined) =>
  want === undefined || (typeof want === "string" ? value === want : want.test(value))

/** The mutating requests in `requests` that pass every filter given. */
export const filterWrites = (
  requests: ReadonlyArray<AuditedRequest>,
  filter: WriteFilter = {},
): AuditedRequest[] => {
  const since = filter.since === undefined ? -Infinity : toMicros(filter.since)
  const until = filter.until === undefined ? Infinity : toMicros(filter.until)
  return requests.filter(
    (r) =>
      isMutating(r.verb) &&
      matches(r.user, filter.user) &&
      matches(r.userAgent, filter.userAgent) &&
      matches(r.resource, filter.resource) &&
      matches(r.verb, filter.verb) &&
      r.receivedUs >= since &&
      r.receivedUs < until,
  )
}

/** The mutating requests that reached `cluster`'s API server so far, filtered. */
export const writesTo = (cluster: LocalCluster, filter: WriteFilter = {}): AuditedRequest[] => {
  if (cluster.auditLogPath === undefined) throw new Error(`${cluster.name} was started without audit`)
  return filterWrites(requestsOf(cluster.name, readAuditLog(cluster.auditLogPath)), filter)
}

export interface RequestFilter extends Omit<WriteFilter, "verb"> {
  /** get, list, watch, create, ... */
  readonly verb?: string | RegExp
  /** The response code (401: refused credentials). */
  readonly code?: number
  /** The request URI (path and query), e.g. to tell a probe's `limit=1` LIST from an informer's. */
  readonly requestURI?: string | RegExp
}

/**
 * Every request (reads too, when the cluster was started with `audit: "reads"`) that reached `cluster`'s
 * API server so far, filtered.
 */
export const requestsTo = (cluster: LocalCluster, filter: RequestFilter = {}): AuditedRequest[] => {
  if (cluster.auditLogPath === undefined) throw new Error(`${cluster.name} was started without audit`)
  const since = filter.since === undefined ? -Infinity : toMicros(filter.since)
  const until = filter.until === undefined ? Infinity : toMicros(filter.until)
  return requestsOf(cluster.name, readAuditLog(cluster.auditLogPath)).filter(
    (r) =>
      matches(r.user, filter.user) &&
      matches(r.userAgent, filter.userAgent) &&
      matches(r.resource, filter.resource) &&
      matches(r.verb, filter.verb) &&
      matches(r.requestURI, filter.requestURI) &&
      (filter.code === undefined || r.code === filter.code) &&
      r.receivedUs >= since &&
      r.receivedUs < until,
  )
}

/** One line: when received, where, who (user and User-Agent), what, and the answer. */
export const formatRequest = (r: AuditedRequest): string => {
  const target = [
    r.resource + (r.subresource ? `/${r.subresource}` : ""),
    r.namespace ? `${r.namespace}/${r.name ?? ""}` : (r.name ?? ""),
  ]
    .filter((s) => s !== "")
    .join(" ")
  const answer = r.code === undefined ? `(no response recorded; stage ${r.stage})` : `→ ${r.code}`
  return `${r.received} ${r.cluster} user=${r.user} ua=${JSON.stringify(r.userAgent)} ${r.verb} ${target} ${r.requestURI} ${answer} auditID=${r.auditID}`
}

/** Up to `limit` lines, then how many more there were. */
export const formatRequests = (requests: ReadonlyArray<AuditedRequest>, limit = 20): string => {
  const lines = requests.slice(0, limit).map(formatRequest)
  if (requests.length > limit) lines.push(`... and ${requests.length - limit} more`)
  return lines.join("\n")
}

/** Counts by "user ua verb resource", largest first: what wrote to a cluster, at a glance. */
export const summarizeWrites = (requests: ReadonlyArray<AuditedRequest>): string => {
  const counts = new Map<string, number>()
  for (const r of requests) {
    const key = `${r.cluster} ${r.user} ${JSON.stringify(r.userAgent)} ${r.verb} ${r.resource}${r.subresource ? `/${r.subresource}` : ""}`
    counts.set(key, (counts.get(key) ?? 0) + 1)
  }
  return [...counts.entries()]
    .sort((a, b) => b[1] - a[1])
    .map(([k, n]) => `${String(n).padStart(6)} ${k}`)
    .join("\n")
}
