// Child processes of a local fleet: each in its own process group, output to a log file, and all of
// them known to a watchdog that kills them (and removes the run directory) if this process dies
// without tearing the fleet down, so a crashed test run never leaves an etcd or apiserver behind.
import { type ChildProcess, spawn } from "node:child_process"
import { appendFileSync, closeSync, openSync } from "node:fs"
import { join } from "node:path"

export interface ManagedProcess {
  readonly name: string
  readonly pid: number
  readonly logFile: string
  /** Resolves with the exit code (or signal) once the process has exited. */
  readonly exited: Promise<number | string>
  readonly hasExited: () => boolean
  /** SIGTERM to the whole process group, SIGKILL after `graceMs`; resolves when it is gone. */
  readonly stop: (graceMs?: number) => Promise<void>
  /** SIGSTOP / SIGCONT to the group: a hung process that keeps its sockets open. */
  readonly freeze: () => void
  readonly thaw: () => void
  /** Any signal to the whole group (SIGKILL for a crash, SIGTERM for a shutdown without waiting). */
  readonly signal: (signal: NodeJS.Signals) => void
}

export interface StartOptions {
  /** The child's whole environment (default: ours). */
  readonly env?: NodeJS.ProcessEnv
}

export interface ProcessRegistry {
  readonly runDir: string
  readonly start: (
    name: string,
    command: string,
    args: ReadonlyArray<string>,
    options?: StartOptions,
  ) => ManagedProcess
  readonly stopAll: () => Promise<void>
  readonly disarmWatchdog: () => void
}

const watchdogScript = new URL("./watchdog.sh", import.meta.url).pathname

export const makeProcessRegistry = (runDir: string): ProcessRegistry => {
  const pgidFile = join(runDir, "pgids")
  const live = new Map<number, ManagedProcess>()
  // The watchdog outlives us in its own session; it only acts when our pid disappears.
  const watchdog = spawn("bash", [watchdogScript, String(process.pid), runDir], {
    detached: true,
    stdio: "ignore",
  })
  watchdog.unref()

  const start = (
    name: string,
    command: string,
    args: ReadonlyArray<string>,
    options: StartOptions = {},
  ): ManagedProcess => {
    const logFile = join(runDir, "logs", `${name}.log`)
    const fd = openSync(logFile, "a")
    let child: ChildProcess
    try {
      child = spawn(command, args, {
        detached: true,
        stdio: ["ignore", fd, fd],
        ...(options.env ? { env: options.env } : {}),
      })
    } finally {
      closeSync(fd)
    }
    const pid = child.pid
    if (pid === undefined) throw new Error(`could not start ${name} (${command})`)
    appendFileSync(pgidFile, `${pid}\n`)
    let exitedFlag = false
    const exited = new Promise<number | string>((resolve) => {
      child.once("exit", (code, signal) => {
        exitedFlag = true
        live.delete(pid)
        resolve(code ?? signal ?? "unknown")
      })
    })
    child.unref()
    const signalGroup = (signal: NodeJS.Signals) => {
      try {
        process.kill(-pid, signal)
      } catch {
        // The group is already gone: nothing to signal.
      }
    }
    const stop = async (graceMs = 5_000) => {
      if (exitedFlag) return
      // Referenced while it stops (it is unreferenced for its life, so it never keeps its owner alive):
      // once the SIGKILL timer has fired, nothing else may be left to keep the owner's event loop going
      // until the exit arrives, and the owner would end mid-teardown.
      child.ref()
      signalGroup("SIGCONT")
      signalGroup("SIGTERM")
      const timer = setTimeout(() => signalGroup("SIGKILL"), graceMs)
      await exited
      clearTimeout(timer)
      // Anything the process itself forked stays in its group: make sure none survives it.
      signalGroup("SIGKILL")
    }
    const proc: ManagedProcess = {
      name,
      pid,
      logFile,
      exited,
      hasExited: () => exitedFlag,
      stop,
      freeze: () => signalGroup("SIGSTOP"),
      thaw: () => signalGroup("SIGCONT"),
      signal: signalGroup,
    }
    live.set(pid, proc)
    return proc
  }

  const stopAll = async () => {
    // Clients and apiservers together, then etcd last, so no apiserver spins on a vanished store.
    const procs = [...live.values()]
    await Promise.all(procs.filter((p) => p.name !== "etcd").map((p) => p.stop()))
    await Promise.all(procs.filter((p) => p.name === "etcd").map((p) => p.stop()))
  }

  const disarmWatchdog = () => {
    try {
      process.kill(-(watchdog.pid ?? 0), "SIGTERM")
    } catch {
      // Already gone.
    }
  }

  return { runDir, start, stopAll, disarmWatchdog }
}
