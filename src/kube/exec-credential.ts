// Runs an exec credential plugin (client.authentication.k8s.io ExecCredential) the hub's policy allowed,
// bounded: a deadline after which the plugin and everything it started are killed, a cap on its output,
// and a zod-checked ExecCredential. Its stderr is never read into memory, and no failure quotes what it
// printed: the result is a token or a client certificate, or a failure in fixed words.
//
// Who may name the command is decided before this module (the kubeconfig policy's allowExec, or the
// hub operator's ClusterProfile provider file): nothing here widens it.
import { spawn } from "node:child_process"
import { Data, Effect } from "effect"
import * as z from "zod"

/** An ExecCredential with a certificate is a few KiB; a megabyte is garbage or an attack. */
export const maxExecOutputBytes = 1024 * 1024

export interface ExecPlugin {
  readonly command: string
  readonly args?: ReadonlyArray<string> | null | undefined
  readonly env?: ReadonlyArray<{ readonly name: string; readonly value: string }> | null | undefined
  /** client.authentication.k8s.io/v1 (default) or v1beta1: what KUBERNETES_EXEC_INFO announces. */
  readonly apiVersion?: string | null | undefined
}

/** What client-go passes a plugin with provideClusterInfo (KEP-5339 providers rely on it). */
export interface ExecClusterInfo {
  readonly server: string
  readonly "certificate-authority-data"?: string | undefined
  readonly "tls-server-name"?: string | undefined
  /** The provider's extension config (a ClusterProfile's), passed through as JSON. */
  readonly config?: unknown
}

export interface ExecCredentialResult {
  readonly token?: string | undefined
  /** PEM. */
  readonly clientCertificateData?: string | undefined
  readonly clientKeyData?: string | undefined
  readonly expirationTimestamp?: Date | undefined
}

export class ExecPluginError extends Data.TaggedError("ExecPluginError")<{
  /** Fixed words: never the plugin's output or stderr. */
  readonly message: string
}> {}

/** Printable ASCII without spaces: what an Authorization header can carry unchanged. */
const tokenPattern = /^[\x21-\x7e]+$/

const ExecCredentialSchema = z.object({
  apiVersion: z.enum(["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"]),
  kind: z.literal("ExecCredential"),
  status: z
    .object({
      token: z
        .string()
        .max(64 * 1024)
        .regex(tokenPattern)
        .optional(),
      clientCertificateData: z
        .string()
        .max(256 * 1024)
        .optional(),
      clientKeyData: z
        .string()
        .max(256 * 1024)
        .optional(),
      expirationTimestamp: z.iso.datetime({ offset: true }).optional(),
    })
    .refine(
      (s) =>
        s.token !== undefined || (s.clientCertificateData !== undefined && s.clientKeyData !== undefined),
      "a token or a client certificate and key",
    ),
})

/** Decodes what a plugin printed; failures name the rule broken, never the text. */
export const parseExecCredential = (stdout: string): ExecCredentialResult | ExecPluginError => {
  let json: unknown
  try {
    json = JSON.parse(stdout)
  } catch {
    return new ExecPluginError({ message: "exec credential plugin failed: its output is not JSON" })
  }
  const parsed = ExecCredentialSchema.safeParse(json)
  if (!parsed.success) {
    const where = parsed.error.issues
      .slice(0, 3)
      .map((i) => i.path.join(".") || "the document")
      .join(", ")
    return new ExecPluginError({
      message: `exec credential plugin failed: its output is not a valid ExecCredential (${where})`,
    })
  }
  const s = parsed.data.status
  return {
    token: s.token,
    clientCertificateData: s.clientCertificateData,
    clientKeyData: s.clientKeyData,
    expirationTimestamp: s.expirationTimestamp ? new Date(s.expirationTimestamp) : undefined,
  }
}

export interface RunExecOptions {
  readonly plugin: ExecPlugin
  readonly timeoutMs: number
  readonly cluster?: ExecClusterInfo | undefined
}

/**
 * Runs the plugin once. Its own process group is killed at the deadline (a shell script's children too),
 * when its stdout passes maxExecOutputBytes, or when the caller is interrupted.
 */
export const runExecPlugin = (
  options: RunExecOptions,
): Effect.Effect<ExecCredentialResult, ExecPluginError> =>
  Effect.callback<string, ExecPluginError>((resume, signal) => {
    const { plugin, timeoutMs } = options
    const apiVersion = plugin.apiVersion ?? "client.authentication.k8s.io/v1"
    const info = {
      apiVersion,
      kind: "ExecCredential",
      spec: { interactive: false, ...(options.cluster ? { cluster: options.cluster } : {}) },
    }
    const env: Record<string, string | undefined> = {
      ...process.env,
      KUBERNETES_EXEC_INFO: JSON.stringify(info),
    }
    for (const e of plugin.env ?? []) env[e.name] = e.value
    let done = false
    const chunks: Buffer[] = []
    let size = 0
    let timer: NodeJS.Timeout | undefined
    const fail = (message: string) => finish(new ExecPluginError({ message }))
    const kill = () => {
      if (child.pid === undefined) return
      try {
        process.kill(-child.pid, "SIGKILL")
      } catch {
        // Already gone.
      }
    }
    const finish = (result: string | ExecPluginError) => {
      if (done) return
      done = true
      clearTimeout(timer)
      kill()
      resume(typeof result === "string" ? Effect.succeed(result) : Effect.fail(result))
    }
    const child = spawn(plugin.command, [...(plugin.args ?? [])], {
      env,
      stdio: ["ignore", "pipe", "pipe"],
      detached: true,
      shell: false,
    })
    child.on("error", (e: NodeJS.ErrnoException) => {
      const code =
        typeof e.code === "string" && /^[A-Z][A-Z0-9_]{1,40}$/.test(e.code) ? e.code : "spawn failed"
      fail(`exec credential plugin could not be started (${code})`)
    })
    // Drained and dropped: a plugin's stderr may quote secrets, and a full pipe would block it.
    child.stderr?.resume()
    child.stdout?.on("data", (c: Buffer) => {
      size += c.length
      if (size > maxExecOutputBytes)
        return fail(`exec credential plugin failed: its output is larger than ${maxExecOutputBytes} bytes`)
      chunks.push(c)
    })
    child.on("close", (code, sig) => {
      if (code === 0) return finish(Buffer.concat(chunks, size).toString("utf8"))
      fail(
        code !== null
          ? `exec credential plugin failed (exit code ${code}; its output is not shown)`
          : `exec credential plugin failed (killed by ${sig ?? "a signal"})`,
      )
    })
    timer = setTimeout(() => fail(`exec credential plugin did not finish within ${timeoutMs} ms`), timeoutMs)
    signal.addEventListener(
      "abort",
      () => {
        done = true
        clearTimeout(timer)
        kill()
      },
      { once: true },
    )
  }).pipe(
    Effect.flatMap((stdout) => {
      const r = parseExecCredential(stdout)
      return r instanceof ExecPluginError ? Effect.fail(r) : Effect.succeed(r)
    }),
  )
