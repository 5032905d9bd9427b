// What the restore agent reads and writes (SPEC §12, ADR 0014). Input: the run's JSON, mounted at the
// path in FLEETCHECK_RUN_INPUT; credentials as environment variables (the referenced Secret's keys);
// scratch space at FLEETCHECK_SCRATCH. Output: the §11 structured termination message, plus a reason
// from a fixed list when the restore failed and the recovery point it chose, then exit 0 (restored and
// verified) or 1. The reconciler reads the message the way it reads any custom Job's: it never learns
// what restic is.
import { writeFileSync } from "node:fs"
import * as z from "zod"
import { type RecoveryPointSpec, RecoveryPointSpecSchema, RestoreMethodSchema } from "../api/restore.ts"
import {
  type AgentFailureReason,
  agentFailureReasons,
  maxTerminationMessageBytes,
} from "../api/termination-message.ts"

export { type AgentFailureReason, agentFailureReasons }

/** Environment variables the hub sets on every agent container. */
export const agentEnv = {
  runInput: "FLEETCHECK_RUN_INPUT",
  scratch: "FLEETCHECK_SCRATCH",
  scratchLimitBytes: "FLEETCHECK_SCRATCH_LIMIT_BYTES",
  terminationLog: "FLEETCHECK_TERMINATION_LOG",
} as const

/** The run's JSON, as the hub renders it into the agent pod (src/reconcile/agent-job.ts). */
export const RunInputSchema = z.strictObject({
  runID: z.string().min(1).max(63),
  cluster: z.string().min(1).max(253),
  check: z.strictObject({ namespace: z.string().min(1).max(63), name: z.string().min(1).max(253) }),
  restore: RestoreMethodSchema,
  recoveryPoint: RecoveryPointSpecSchema,
})
export type RunInput = z.output<typeof RunInputSchema>

/** A restore that did not prove its backup: the reason goes to the Verified condition. */
export class AgentFailure extends Error {
  readonly reason: AgentFailureReason
  /** The backup chosen before the failure, when one was: the message then names what did not restore. */
  recoveryPoint: AgentReport["recoveryPoint"]
  constructor(reason: AgentFailureReason, message: string) {
    super(message)
    this.name = "AgentFailure"
    this.reason = reason
  }
}

/** What a method reports after restoring and verifying. */
export interface AgentReport {
  readonly message: string
  /** The newest record in the restored data (RFC 3339): a snapshot's time, a query's answer. */
  readonly dataTimestamp?: string | undefined
  /** Counts; every method reports `bytes` and `files` (SPEC §12). */
  readonly counts: Readonly<Record<string, number>>
  readonly recoveryPoint?: { readonly id: string; readonly time: string } | undefined
}

/** Everything a method gets besides its own spec. */
export interface AgentContext {
  readonly input: RunInput
  /** An empty directory the method may fill; the pod's scratch volume. */
  readonly scratch: string
  /** The scratch volume's size limit, when the pod has one. */
  readonly scratchLimitBytes: number | undefined
  /** The environment (credentials included): pass it to tools, never print it. */
  readonly env: NodeJS.ProcessEnv
  readonly recoveryPoint: RecoveryPointSpec
}

/** Fits the message into the termination log's 4 KiB with the rest of the JSON. */
const fitBytes = (text: string, max: number): string => {
  const bytes = Buffer.from(text, "utf8")
  if (bytes.length <= max) return text
  let cut = bytes.subarray(0, max - 3).toString("utf8")
  if (cut.endsWith("\uFFFD")) cut = cut.slice(0, -1)
  return `${cut}...`
}

export type Outcome =
  | { readonly ok: true; readonly report: AgentReport }
  | {
      readonly ok: false
      readonly reason: AgentFailureReason
      readonly message: string
      readonly recoveryPoint?: AgentReport["recoveryPoint"]
    }

/** The termination message for an outcome: always valid §11 JSON, at most 4 KiB. */
export const terminationMessage = (outcome: Outcome): string => {
  const base = outcome.ok
    ? {
        ...(outcome.report.dataTimestamp !== undefined
          ? { dataTimestamp: outcome.report.dataTimestamp }
          : {}),
        counts: outcome.report.counts,
        ...(outcome.report.recoveryPoint ? { recoveryPoint: outcome.report.recoveryPoint } : {}),
      }
    : { reason: outcome.reason, ...(outcome.recoveryPoint ? { recoveryPoint: outcome.recoveryPoint } : {}) }
  const message = outcome.ok ? outcome.report.message : outcome.message
  // JSON escapes can make a message longer than its bytes: cut until the whole object fits.
  let room = maxTerminationMessageBytes
  for (;;) {
    const text = JSON.stringify({ message: fitBytes(message, room), ...base })
    if (Buffer.byteLength(text, "utf8") <= maxTerminationMessageBytes || room <= 16) return text
    room = Math.floor(room * 0.8)
  }
}

export const writeTerminationMessage = (path: string, outcome: Outcome): void => {
  writeFileSync(path, terminationMessage(outcome))
}
