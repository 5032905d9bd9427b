// `fleetcheck dev` as the e2e tests run it: the process, started and waited for until its banner says
// it is ready, with everything it has printed so far.
import { type ChildProcess, spawn } from "node:child_process"

export interface RunningDev {
  readonly process: ChildProcess
  /** Standard output so far (the banner once started). */
  readonly stdout: () => string
  /** Standard error so far (dev's own progress and warnings). */
  readonly stderr: () => string
}

/** Starts `bin dev ...args` and resolves once its banner is out; rejects if it exits or hangs first. */
export const startDev = async (
  bin: string,
  args: ReadonlyArray<string>,
  env: NodeJS.ProcessEnv = process.env,
): Promise<RunningDev> => {
  const proc = spawn(bin, ["dev", ...args], { stdio: ["ignore", "pipe", "pipe"], env })
  let stdout = ""
  let stderr = ""
  proc.stderr?.on("data", (d: Buffer) => {
    stderr += d.toString()
  })
  const running: RunningDev = { process: proc, stdout: () => stdout, stderr: () => stderr }
  try {
    await new Promise<void>((resolve, reject) => {
      proc.stdout?.on("data", (d: Buffer) => {
        stdout += d.toString()
        if (stdout.includes("Ctrl-C stops everything")) resolve()
      })
      proc.once("exit", (code) => reject(new Error(`dev exited early (${code}):\n${stderr}`)))
      setTimeout(() => reject(new Error(`dev did not come up in time:\n${stderr}`)), 180_000)
    })
  } catch (e) {
    if (proc.exitCode === null) proc.kill("SIGKILL")
    throw e
  }
  return running
}
