// Runs the tools the agent drives (restic, pg_restore, etcdutl, ...) as child processes. Output is
// bounded: stdout up to a limit the caller sets (restic's snapshot list), stderr's last 16 KiB, which
// is where every tool says why it failed. A tool that is not installed is RestoreToolFailed, named.
import { spawn } from "node:child_process"
import { AgentFailure } from "./protocol.ts"

const stderrTailBytes = 16 * 1024

export interface ToolResult {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

export interface ToolOptions {
  readonly env: NodeJS.ProcessEnv
  readonly cwd?: string | undefined
  /** Most stdout kept; beyond it the tool fails (RestoreToolFailed), as its answer would be cut. */
  readonly maxStdoutBytes?: number | undefined
  /** Run as this user (the agent runs as root only in a local fleet; postgres refuses root). */
  readonly uid?: number | undefined
  readonly gid?: number | undefined
  /** Kills the tool (SIGKILL) when aborted: a restore that turned out not to fit. */
  readonly signal?: AbortSignal | undefined
}

/** Runs `command args`, never rejecting for a non-zero exit: the caller reads code and stderr. */
export const runTool = (command: string, args: ReadonlyArray<string>, options: ToolOptions) =>
  new Promise<ToolResult>((resolve, reject) => {
    const maxStdout = options.maxStdoutBytes ?? 1024 * 1024
    const child = spawn(command, args, {
      env: options.env,
      cwd: options.cwd,
      stdio: ["ignore", "pipe", "pipe"],
      ...(options.uid !== undefined ? { uid: options.uid } : {}),
      ...(options.gid !== undefined ? { gid: options.gid } : {}),
    })
    if (options.signal) {
      const kill = () => child.kill("SIGKILL")
      if (options.signal.aborted) kill()
      else options.signal.addEventListener("abort", kill, { once: true })
      child.once("close", () => options.signal?.removeEventListener("abort", kill))
    }
    const out: Buffer[] = []
    let outBytes = 0
    let tooLong = false
    let err = Buffer.alloc(0)
    child.stdout.on("data", (chunk: Buffer) => {
      outBytes += chunk.length
      if (outBytes > maxStdout) {
        tooLong = true
        child.kill("SIGKILL")
        return
      }
      out.push(chunk)
    })
    child.stderr.on("data", (chunk: Buffer) => {
      err = Buffer.concat([err, chunk])
      if (err.length > stderrTailBytes) err = err.subarray(err.length - stderrTailBytes)
    })
    child.once("error", (e: NodeJS.ErrnoException) =>
      reject(
        new AgentFailure(
          "RestoreToolFailed",
          e.code === "ENOENT" ? `${command} is not installed (not on PATH)` : `${command}: ${e.message}`,
        ),
      ),
    )
    child.once("close", (code, signal) => {
      if (tooLong) {
        reject(new AgentFailure("RestoreToolFailed", `${command} printed more than ${maxStdout} bytes`))
        return
      }
      resolve({
        code: code ?? (signal ? 128 : 1),
        stdout: Buffer.concat(out).toString("utf8"),
        stderr: err.toString("utf8"),
      })
    })
  })

/** The last lines of a tool's stderr that say something, for a message (progress lines dropped). */
export const lastWords = (stderr: string, lines = 3): string =>
  stderr
    .split("\n")
    .map((l) => l.trim())
    .filter((l) => l.length > 0 && !/^\[\d+:\d+\]/.test(l))
    .slice(-lines)
    .join("; ")
