// Talking to a hub the benchmarks run in a child process of their own (hub-process.ts,
// scale-hub-process.ts, shard-leases-replica.ts): one message out, its answer back.
import type { ChildProcess } from "node:child_process"

/** Sends `msg` and resolves with the child's next message (its answer). */
export const ask = <T>(proc: ChildProcess, msg: object | string) =>
  new Promise<T>((resolve) => {
    proc.once("message", (m: any) => resolve(m))
    proc.send(msg)
  })

/**
 * The port a hub process serves on (its first message). A hub that exits first (a flag it or node
 * refused, e.g. a mistyped KNOBS entry) fails the bench with its exit code instead of leaving it
 * waiting, with the machine-wide lock held, for a message that never comes.
 */
export const servingPort = (proc: ChildProcess) =>
  new Promise<number>((resolve, reject) => {
    const exited = (code: number | null, signal: NodeJS.Signals | null) =>
      reject(new Error(`the hub process exited before serving (code ${code}, signal ${signal})`))
    proc.once("exit", exited)
    proc.once("message", (m: any) => {
      proc.off("exit", exited)
      resolve(m.port)
    })
  })
