// A real `fleetcheck hub` process on a local fleet, the way it runs in production: its own Node.js
// process with KUBECONFIG, started under the fleet's watchdog (its own process group, so SIGSTOP,
// SIGTERM and SIGKILL reach exactly it), logging JSON lines to `<runDir>/logs/<name>.log`. It is
// known once it prints `hub serving` with its address and its identity (the Lease holder it writes).
import { readFileSync } from "node:fs"
import type { LocalFleet } from "./fleet.ts"
import type { ManagedProcess } from "./processes.ts"

const bin = new URL("../../bin/fleetcheck", import.meta.url).pathname

export interface HubProcessOptions {
  /** Unique in the fleet: the log file's name. */
  readonly name: string
  /** The hub cluster's kubeconfig (passed as KUBECONFIG). */
  readonly kubeconfigPath: string
  /** More `fleetcheck hub` flags; `--http-address 127.0.0.1:0 --secure-serving false` come first. */
  readonly args?: ReadonlyArray<string>
  /** Extra environment. */
  readonly env?: Readonly<Record<string, string>>
  /** How long to wait for `hub serving` (default 30 s). */
  readonly startTimeoutMs?: number
}

/** One JSON log line of the hub (Effect's consoleJson). */
export interface HubLogLine {
  readonly message: string
  readonly logLevel?: string
  readonly timestamp?: string
  readonly annotations: Record<string, unknown>
}

export interface HubProcess {
  readonly name: string
  readonly process: ManagedProcess
  /** The Lease holder identity this process campaigns with. */
  readonly identity: string
  /** http://127.0.0.1:PORT (https:// with --secure-serving true) */
  readonly url: string
  /** The dashboard's own listener (with --dashboard-address), once it logged `dashboard serving`. */
  readonly dashboardUrl: () => string | undefined
  /** Every JSON line logged so far (other output, such as the SIGTERM notice, is skipped). */
  readonly logLines: () => HubLogLine[]
}

const parseLogLines = (text: string): HubLogLine[] => {
  const lines: HubLogLine[] = []
  for (const line of text.split("\n")) {
    if (!line.startsWith("{")) continue
    try {
      const o = JSON.parse(line) as {
        message?: unknown
        annotations?: unknown
      }
      const message = Array.isArray(o.message) ? o.message.map(String).join(" ") : String(o.message)
      lines.push({
        ...(o as object),
        message,
        annotations: (o.annotations as Record<string, unknown> | undefined) ?? {},
      })
    } catch {
      // A line still being written, or not ours.
    }
  }
  return lines
}

const readLog = (file: string) => {
  try {
    return readFileSync(file, "utf8")
  } catch {
    return ""
  }
}

/** Starts `fleetcheck hub` and resolves once it serves, with its identity and URL. */
export const startHubProcess = async (fleet: LocalFleet, options: HubProcessOptions): Promise<HubProcess> => {
  const proc = fleet.spawn(
    options.name,
    bin,
    ["hub", "--http-address", "127.0.0.1:0", "--secure-serving", "false", ...(options.args ?? [])],
    {
      env: {
        ...process.env,
        ...options.env,
        KUBECONFIG: options.kubeconfigPath,
      },
    },
  )
  const logLines = () => parseLogLines(readLog(proc.logFile))
  const deadline = Date.now() + (options.startTimeoutMs ?? 30_000)
  while (true) {
    const serving = logLines().find((l) => l.message === "hub serving")
    if (serving) {
      const { address, identity, scheme } = serving.annotations
      if (typeof address !== "string" || typeof identity !== "string") {
        throw new Error(
          `${options.name}: "hub serving" without address and identity: ${JSON.stringify(serving)}`,
        )
      }
      const dashboardUrl = () => {
        const at = logLines().find((l) => l.message === "dashboard serving")?.annotations.address
        return typeof at === "string" ? `http://${at}` : undefined
      }
      return {
        name: options.name,
        process: proc,
        identity,
        url: `${scheme === "https" ? "https" : "http"}://${address}`,
        dashboardUrl,
        logLines,
      }
    }
    if (proc.hasExited() || Date.now() > deadline) {
      const why = proc.hasExited() ? `exited (${await proc.exited})` : "did not print `hub serving` in time"
      proc.signal("SIGKILL")
      throw new Error(`${options.name} ${why}; log ${proc.logFile}:\n${readLog(proc.logFile).slice(-3000)}`)
    }
    await new Promise((r) => setTimeout(r, 50))
  }
}
