// API server audit logging for local fleets (opt-in: `startFleet({ audit: true, ... })`). Each
// kube-apiserver writes JSON lines (audit.k8s.io/v1 Event) to `<cluster dir>/audit.log` in blocking
// mode, so an event is on disk before the request it records is served. The policy records every
// mutating request at Metadata level, at two stages: RequestReceived (written before any handler runs,
// so a write that reached the server is recorded even if it never completes) and ResponseComplete
// (with the response code). Reads are not recorded, nor the apiserver's own loopback client, unless
// the cluster asks for `audit: "reads"`: then get, list and watch are recorded too (a relist or a 401
// is then visible in the log; the log grows with every probe, so only tests that count reads ask).

import { readFileSync } from "node:fs"

/** The verbs a write can have; everything else (get, list, watch) is a read. */
export const mutatingVerbs = ["create", "update", "patch", "delete", "deletecollection"] as const

export const auditPolicy = [
  "apiVersion: audit.k8s.io/v1",
  "kind: Policy",
  "rules:",
  "- level: None",
  '  users: ["system:apiserver"]',
  "- level: Metadata",
  `  verbs: [${mutatingVerbs.map((v) => `"${v}"`).join(", ")}]`,
  "- level: None",
  "",
].join("\n")

/** The policy with reads (get, list, watch) recorded as well, at the same level and stages. */
export const auditPolicyWithReads = [
  "apiVersion: audit.k8s.io/v1",
  "kind: Policy",
  "rules:",
  "- level: None",
  '  users: ["system:apiserver"]',
  "- level: Metadata",
  `  verbs: [${[...mutatingVerbs, "get", "list", "watch"].map((v) => `"${v}"`).join(", ")}]`,
  "- level: None",
  "",
].join("\n")

/** The kube-apiserver flags that turn the policy on, logging to `logPath`. */
export const auditFlags = (policyPath: string, logPath: string): ReadonlyArray<string> => [
  `--audit-policy-file=${policyPath}`,
  `--audit-log-path=${logPath}`,
  "--audit-log-format=json",
  "--audit-log-mode=blocking",
  // One file for the fleet's life: no rotation (0 = unlimited size).
  "--audit-log-maxsize=0",
  "--audit-log-maxbackup=0",
]

/** The audit.k8s.io/v1 Event fields a Metadata-level policy produces. */
export interface AuditEvent {
  readonly kind: "Event"
  readonly apiVersion: "audit.k8s.io/v1"
  readonly level: string
  readonly auditID: string
  readonly stage: "RequestReceived" | "ResponseStarted" | "ResponseComplete" | "Panic"
  readonly requestURI: string
  readonly verb: string
  readonly user: { readonly username: string; readonly uid?: string; readonly groups?: string[] }
  readonly impersonatedUser?: { readonly username: string }
  readonly sourceIPs?: string[]
  readonly userAgent?: string
  readonly objectRef?: {
    readonly resource?: string
    readonly namespace?: string
    readonly name?: string
    readonly apiGroup?: string
    readonly apiVersion?: string
    readonly subresource?: string
  }
  readonly responseStatus?: {
    readonly code?: number
    readonly status?: string
    readonly reason?: string
    readonly message?: string
  }
  /** RFC 3339 with microseconds, UTC. */
  readonly requestReceivedTimestamp: string
  readonly stageTimestamp: string
  readonly annotations?: Record<string, string>
}

/**
 * Parses an audit log's JSON lines. A last line without its newline is being written right now and is
 * left out; any other line that is not an audit Event is an error (the log is ours, it has no noise).
 */
export const parseAuditLog = (text: string): AuditEvent[] => {
  const lines = text.split("\n")
  // After the last "\n" is either "" or a partial line.
  lines.pop()
  const events: AuditEvent[] = []
  for (const [i, line] of lines.entries()) {
    if (line.trim() === "") continue
    let event: unknown
    try {
      event = JSON.parse(line)
    } catch (e) {
      throw new Error(`audit log line ${i + 1} is not JSON (${String(e)}): ${line.slice(0, 200)}`)
    }
    if ((event as { kind?: unknown } | null)?.kind !== "Event") {
      throw new Error(`audit log line ${i + 1} is not an audit Event: ${line.slice(0, 200)}`)
    }
    events.push(event as AuditEvent)
  }
  return events
}

/** Every event in the file so far; none when the file does not exist yet. */
export const readAuditLog = (path: string): AuditEvent[] => {
  let text: string
  try {
    text = readFileSync(path, "utf8")
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === "ENOENT") return []
    throw e
  }
  return parseAuditLog(text)
}
