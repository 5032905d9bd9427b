// `fleetcheck agent restore <method>`: the restore agent's entry point (SPEC §12, ADR 0014). Reads the
// run's JSON, runs the method, and always ends with a termination message and an exit code: 0 when
// the backup restored and verified, 1 when it did not (with a reason), 2 for a usage error. Nothing it
// is given is trusted: the input is parsed with zod and must name the method the arguments name.
import { chmodSync, existsSync, mkdirSync, readFileSync } from "node:fs"
import { type AgentMethodName, restoreMethodOf } from "../api/restore.ts"
import {
  type AgentContext,
  AgentFailure,
  type AgentReport,
  agentEnv,
  type Outcome,
  RunInputSchema,
  terminationMessage,
  writeTerminationMessage,
} from "./protocol.ts"

export const agentUsage = `Usage: fleetcheck agent restore <restic|postgres|etcd>

Run by the restore Jobs the hub creates for spec.restore. Reads the run from $${agentEnv.runInput},
restores into $${agentEnv.scratch}, writes the verdict to $${agentEnv.terminationLog}
(default /dev/termination-log) and exits 0 (restored and verified) or 1.
`

const methods: Readonly<Record<AgentMethodName, (ctx: AgentContext) => Promise<AgentReport>>> = {
  restic: async (ctx) => (await import("./restic.ts")).restoreRestic(ctx, required(ctx.input.restore.restic)),
  postgres: async (ctx) =>
    (await import("./postgres.ts")).restorePostgres(ctx, required(ctx.input.restore.postgres)),
  etcd: async (ctx) => (await import("./etcd.ts")).restoreEtcd(ctx, required(ctx.input.restore.etcd)),
}

const required = <T>(v: T | undefined): T => {
  if (v === undefined)
    throw new AgentFailure("RestoreToolFailed", "the run input has no spec for this method")
  return v
}

const readInput = (path: string | undefined) => {
  if (!path) throw new AgentFailure("RestoreToolFailed", `${agentEnv.runInput} is not set`)
  let text: string
  try {
    text = readFileSync(path, "utf8")
  } catch (e) {
    throw new AgentFailure("RestoreToolFailed", `reading the run input ${path}: ${(e as Error).message}`)
  }
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    throw new AgentFailure("RestoreToolFailed", `the run input ${path} is not JSON`)
  }
  const parsed = RunInputSchema.safeParse(json)
  if (!parsed.success)
    throw new AgentFailure(
      "RestoreToolFailed",
      `the run input is invalid: ${parsed.error.issues.map((i) => `${i.path.join(".")}: ${i.message}`).join("; ")}`,
    )
  return parsed.data
}

const scratchLimit = (raw: string | undefined): number | undefined => {
  const n = raw === undefined || raw === "" ? Number.NaN : Number(raw)
  return Number.isSafeInteger(n) && n > 0 ? n : undefined
}

/** Runs one restore and returns its outcome; never throws. */
export const runMethod = async (method: AgentMethodName, env: NodeJS.ProcessEnv): Promise<Outcome> => {
  try {
    const input = readInput(env[agentEnv.runInput])
    const declared = restoreMethodOf(input.restore)
    if (declared !== method)
      throw new AgentFailure(
        "RestoreToolFailed",
        `asked to restore ${method}, but the run's spec is ${declared}`,
      )
    const scratch = env[agentEnv.scratch] || "/scratch"
    if (!existsSync(scratch)) mkdirSync(scratch, { recursive: true })
    // HOME and TMPDIR point into scratch (agent-job.ts); they exist before any tool looks.
    // TMPDIR is shared like /tmp: Postgres runs as its own user when the agent is root.
    for (const [dir, mode] of [
      [env.HOME, 0o700],
      [env.TMPDIR, 0o1777],
    ] as const)
      if (dir?.startsWith(`${scratch}/`) && !existsSync(dir)) {
        mkdirSync(dir, { recursive: true })
        chmodSync(dir, mode) // mkdir's mode passes through the umask
      }
    const report = await methods[method]({
      input,
      scratch,
      scratchLimitBytes: scratchLimit(env[agentEnv.scratchLimitBytes]),
      env,
      recoveryPoint: input.recoveryPoint,
    })
    return { ok: true, report }
  } catch (e) {
    if (e instanceof AgentFailure)
      return {
        ok: false,
        reason: e.reason,
        message: e.message,
        ...(e.recoveryPoint ? { recoveryPoint: e.recoveryPoint } : {}),
      }
    return {
      ok: false,
      reason: "RestoreToolFailed",
      message: `agent error: ${(e as Error)?.message ?? String(e)}`,
    }
  }
}

export const runAgent = async (argv: ReadonlyArray<string>): Promise<number> => {
  const [verb, method] = argv
  if (verb === "--help" || verb === "-h") {
    process.stdout.write(agentUsage)
    return 0
  }
  if (verb !== "restore" || (method !== "restic" && method !== "postgres" && method !== "etcd")) {
    process.stderr.write(agentUsage)
    return 2
  }
  const started = Date.now()
  const outcome = await runMethod(method, process.env)
  const logPath = process.env[agentEnv.terminationLog] || "/dev/termination-log"
  try {
    writeTerminationMessage(logPath, outcome)
  } catch (e) {
    process.stderr.write(`fleetcheck agent: writing ${logPath}: ${(e as Error).message}\n`)
  }
  // The same verdict on stdout: `kubectl logs` of an agent pod says what happened.
  process.stdout.write(`${terminationMessage(outcome)}\n`)
  process.stderr.write(
    `fleetcheck agent: ${method} ${outcome.ok ? "restored and verified" : `failed (${outcome.reason})`} in ${((Date.now() - started) / 1000).toFixed(1)}s\n`,
  )
  return outcome.ok ? 0 : 1
}
