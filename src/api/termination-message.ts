// What a restore or validation container reports in its termination message (SPEC §11, ADR 0009):
// either plain text, or a JSON object with `message`, `dataTimestamp` (the newest record inside the
// restored data, RFC 3339) and `counts` (name → integer). Pure and bounded: the text is cut before it
// is parsed, the object is validated with zod, and anything that is not exactly that shape is plain
// text as before.
import * as z from "zod"
import { TimestampSchema } from "./condition.ts"

/** The kubelet keeps at most 4 KiB of a termination message; a longer one is not a structured report. */
export const maxTerminationMessageBytes = 4096
/** At most this many counts are kept, each name a short identifier. */
export const maxCounts = 32
export const countNamePattern = /^[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?$/

export const CountsSchema = z
  .record(z.string().regex(countNamePattern).max(63), z.int().min(0).max(Number.MAX_SAFE_INTEGER))
  .refine((counts) => Object.keys(counts).length <= maxCounts, { message: `at most ${maxCounts} counts` })

/**
 * Why a restore failed, when the tool knows better than its exit code (SPEC §12). The restore agent
 * writes one on every failure; a custom Job may too. Only failure reasons: a Job that failed cannot
 * claim success, and one that succeeded keeps RestoreSucceeded whatever it wrote.
 */
export const agentFailureReasons = [
  "RepositoryUnreachable",
  "RepositoryAuthFailed",
  "SnapshotNotFound",
  "DataCorrupted",
  "AssertionFailed",
  "RestoreToolFailed",
  "RecoveryPointNotFound",
] as const
export type AgentFailureReason = (typeof agentFailureReasons)[number]

export const RecoveryPointSchema = z.strictObject({
  id: z.string().min(1).max(253),
  time: TimestampSchema,
})

export const StructuredMessageSchema = z.strictObject({
  message: z.string().max(maxTerminationMessageBytes).optional(),
  dataTimestamp: TimestampSchema.optional(),
  counts: CountsSchema.optional(),
  reason: z.enum(agentFailureReasons).optional(),
  recoveryPoint: RecoveryPointSchema.optional(),
})

export interface TerminationReport {
  /** The human part: the JSON's message, or the whole text when it is not structured. */
  readonly message: string
  /** Newest record in the restored data, as the tool reported it (RFC 3339, normalised to UTC). */
  readonly dataTimestamp?: string | undefined
  readonly counts?: Readonly<Record<string, number>> | undefined
  /** A failure reason from agentFailureReasons. */
  readonly reason?: AgentFailureReason | undefined
  /** The backup the tool chose to restore (spec.recoveryPoint). */
  readonly recoveryPoint?: { readonly id: string; readonly time: string } | undefined
}

const utc = (t: string) => new Date(t).toISOString().replace(/\.000Z$/, "Z")

/**
 * Reads a termination message. A JSON object of exactly the structured shape yields its fields;
 * anything else (plain text, other JSON, an invalid timestamp, too many counts) is plain text.
 */
export const parseTerminationMessage = (text: string | undefined): TerminationReport => {
  const raw = text ?? ""
  const trimmed = raw.trim()
  if (!trimmed.startsWith("{") || Buffer.byteLength(trimmed, "utf8") > maxTerminationMessageBytes) {
    return { message: raw }
  }
  let json: unknown
  try {
    json = JSON.parse(trimmed)
  } catch {
    return { message: raw } // not JSON: plain text, as a tool may well print braces
  }
  const parsed = StructuredMessageSchema.safeParse(json)
  if (!parsed.success) return { message: raw }
  const { message, dataTimestamp, counts, reason, recoveryPoint } = parsed.data
  return {
    ...(reason !== undefined ? { reason } : {}),
    ...(recoveryPoint !== undefined
      ? { recoveryPoint: { id: recoveryPoint.id, time: utc(recoveryPoint.time) } }
      : {}),
    message: message ?? "",
    ...(dataTimestamp !== undefined ? { dataTimestamp: utc(dataTimestamp) } : {}),
    ...(counts !== undefined && Object.keys(counts).length > 0 ? { counts } : {}),
  }
}

/** "orders=1200, customers=88": counts for a message, in name order. */
export const formatCounts = (counts: Readonly<Record<string, number>> | undefined): string =>
  Object.entries(counts ?? {})
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .map(([k, v]) => `${k}=${v}`)
    .join(", ")
