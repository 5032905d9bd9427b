// spec.restore.postgres: restores a pg_dump archive (custom or plain format) or a barman-cloud base
// backup plus WAL (the object-store layout CloudNativePG writes) into a throwaway Postgres started in
// the pod's scratch (unix socket only, no TCP port), then runs the assertions and the
// dataTimestampQuery on the restored rows: the data-age objective comes from the data itself.
import { type ChildProcess, spawn } from "node:child_process"
import { randomBytes } from "node:crypto"
import { chmod, chown, mkdir, mkdtemp, open, readdir, readFile, rm, writeFile } from "node:fs/promises"
import { tmpdir } from "node:os"
import { join } from "node:path"
import * as z from "zod"
import type { PostgresRestoreSchema } from "../api/restore.ts"
import { fetchObject } from "./object-fetch.ts"
import { type AgentContext, AgentFailure, type AgentReport } from "./protocol.ts"
import { chooseRecoveryPoint } from "./recovery-point.ts"
import { formatBytes, treeSize } from "./scratch.ts"
import { lastWords, runTool, type ToolOptions } from "./tool.ts"

type PostgresSpec = z.output<typeof PostgresRestoreSchema>
type Assertion = PostgresSpec["assertions"][number]

const quoteIdent = (s: string) => `"${s.replace(/"/g, '""')}"`

/** Postgres refuses to run as root; the agent is root only as a local fleet's host process. */
const serverUser = async (): Promise<{ uid: number; gid: number } | undefined> => {
  if (process.getuid?.() !== 0) return undefined
  const passwd = await readFile("/etc/passwd", "utf8").catch(() => "")
  const line = passwd.split("\n").find((l) => l.startsWith("postgres:"))
  const [, , uid, gid] = line?.split(":") ?? []
  return uid && gid ? { uid: Number(uid), gid: Number(gid) } : { uid: 65534, gid: 65534 }
}

/** Debian keeps the server's tools off PATH, in /usr/lib/postgresql/<major>/bin: the newest one joins PATH. */
const serverToolsPath = async (path: string | undefined): Promise<string> => {
  const majors = (await readdir(debianServerTools).catch(() => []))
    .filter((d) => /^\d+$/.test(d))
    .sort((a, b) => Number(b) - Number(a))
  return [...majors.slice(0, 1).map((m) => join(debianServerTools, m, "bin")), path ?? "/usr/bin:/bin"].join(
    ":",
  )
}
const debianServerTools = "/usr/lib/postgresql"

interface Server {
  readonly socketDir: string
  readonly tool: (command: string, args: ReadonlyArray<string>) => ReturnType<typeof runTool>
  readonly stop: () => Promise<void>
}

/** initdb (unless the data directory was restored) and start postgres on a socket in scratch. */
const startServer = async (
  ctx: AgentContext,
  dataDir: string,
  init: boolean,
  extraConf: string,
  waitOutOfRecovery: boolean,
): Promise<Server> => {
  const user = await serverUser()
  // A unix socket path has at most 107 bytes: when scratch is deep (a local fleet's host directory),
  // the socket goes to a fresh directory under TMPDIR, or /tmp when that is deep too.
  const fits = (dir: string) => Buffer.byteLength(join(dir, "fleetcheck-pg-XXXXXX", ".s.PGSQL.5432")) <= 107
  const inScratch = join(ctx.scratch, "pg-socket")
  const socketDir = fits(ctx.scratch)
    ? inScratch
    : await mkdtemp(join(fits(tmpdir()) ? tmpdir() : "/tmp", "fleetcheck-pg-"))
  await mkdir(socketDir, { recursive: true })
  await mkdir(dataDir, { recursive: true, mode: 0o700 })
  if (user) {
    await chmod(ctx.scratch, 0o755)
    for (const d of [socketDir, dataDir]) await chown(d, user.uid, user.gid)
  }
  const env = { ...ctx.env, PATH: await serverToolsPath(ctx.env.PATH), PGHOST: socketDir, PGUSER: "postgres" }
  const opts: ToolOptions = { env, ...(user ?? {}) }
  const tool = (command: string, args: ReadonlyArray<string>) => runTool(command, args, opts)
  if (init) {
    const r = await tool("initdb", [
      "-D",
      dataDir,
      "-U",
      "postgres",
      "--auth=trust",
      "-E",
      "UTF8",
      "--no-sync",
    ])
    if (r.code !== 0) throw new AgentFailure("RestoreToolFailed", `initdb: ${lastWords(r.stderr)}`)
  }
  if (extraConf) await writeFile(join(dataDir, "postgresql.auto.conf"), extraConf, { flag: "a" })
  const server: ChildProcess = spawn(
    "postgres",
    [
      "-D",
      dataDir,
      "-k",
      socketDir,
      "-c",
      "listen_addresses=",
      "-c",
      "fsync=off",
      "-c",
      "full_page_writes=off",
      // English log lines whatever the pod's locale: the readiness line below is matched on them.
      "-c",
      "lc_messages=C",
    ],
    { env: opts.env, stdio: ["ignore", "ignore", "pipe"], ...(user ?? {}) },
  )
  let log = ""
  // The postmaster logs this line the moment it accepts connections (after recovery, when there is
  // one: "read-only connections" does not match). Seeing it ends the wait at once; pg_isready, polled
  // every 50 ms, stays the fallback for a server whose log says otherwise.
  let accepting = false
  let wake: (() => void) | undefined
  server.stderr?.on("data", (c: Buffer) => {
    log = (log + c.toString()).slice(-16384)
    if (!accepting && log.includes("ready to accept connections")) {
      accepting = true
      wake?.()
    }
  })
  let exit: string | undefined
  server.once("exit", (code, signal) => {
    exit = `postgres exited (${code ?? signal}): ${lastWords(log, 4)}`
  })
  server.once("error", (e: NodeJS.ErrnoException) => {
    exit = e.code === "ENOENT" ? "postgres is not installed (not on PATH)" : e.message
  })
  const stop = async () => {
    if (server.exitCode === null && server.signalCode === null) {
      const gone = new Promise((r) => server.once("exit", r))
      server.kill("SIGQUIT") // immediate shutdown: the data is thrown away, no checkpoint is owed
      // The grace timer is unref'd: a server that stopped in time must not keep the agent alive 10 s.
      await Promise.race([gone, new Promise((r) => setTimeout(r, 10_000).unref())])
      if (server.exitCode === null) server.kill("SIGKILL")
    }
    if (socketDir !== inScratch) await rm(socketDir, { recursive: true, force: true }).catch(() => undefined)
  }
  const deadline = Date.now() + 30 * 60_000 // WAL replay may take long; the Job's deadline bounds it
  for (;;) {
    if (exit !== undefined) {
      await stop()
      throw new AgentFailure(waitOutOfRecovery ? "DataCorrupted" : "RestoreToolFailed", exit)
    }
    if (accepting || (await tool("pg_isready", ["-q"])).code === 0) {
      if (!waitOutOfRecovery) break
      const r = await tool("psql", [
        "-X",
        "-A",
        "-t",
        "-q",
        "-d",
        "postgres",
        "-c",
        "SELECT pg_is_in_recovery()",
      ])
      if (r.code === 0 && r.stdout.trim() === "f") break
    }
    if (Date.now() > deadline) {
      await stop()
      throw new AgentFailure("RestoreToolFailed", "postgres did not become ready")
    }
    await new Promise<void>((r) => {
      wake = r
      setTimeout(r, 50)
    })
  }
  return { socketDir, tool, stop }
}

/** How long each phase took, for the agent's log: Postgres start-up apart from the restore itself. */
const phaseClock = () => {
  let last = performance.now()
  const phases: string[] = []
  return {
    mark: (phase: string) => {
      const now = performance.now()
      phases.push(`${phase} in ${((now - last) / 1000).toFixed(3)}s`)
      last = now
    },
    log: () => process.stderr.write(`fleetcheck agent: postgres phases: ${phases.join(", ")}\n`),
  }
}

/**
 * Each query's first output line, from one psql session: a psql start and connection cost about as
 * much as a small query, and a check may list many assertions. A marker line (fresh per call, so no
 * query's output can forge it) is echoed before each query; when one fails, psql stops there
 * (ON_ERROR_STOP) and the last marker printed names it.
 */
export const scalars = async (
  server: Pick<Server, "tool">,
  database: string,
  queries: ReadonlyArray<{ readonly sql: string; readonly what: string }>,
): Promise<string[]> => {
  const marker = `fleetcheck-query-${randomBytes(8).toString("hex")}-`
  const args = [
    ...["-X", "-A", "-t", "-q", "-v", "ON_ERROR_STOP=1", "-d", database],
    ...queries.flatMap((q, i) => ["-c", `\\echo ${marker}${i}`, "-c", q.sql]),
  ]
  const r = await server.tool("psql", args)
  const firstLines: string[] = []
  let current = -1
  for (const line of r.stdout.split("\n")) {
    if (line.startsWith(marker)) {
      current = Number(line.slice(marker.length))
      firstLines[current] = ""
    } else if (current >= 0 && firstLines[current] === "" && line.trim() !== "")
      firstLines[current] = line.trim()
  }
  if (r.code !== 0) {
    const failed = queries[Math.max(current, 0)]?.what ?? "query"
    throw new AgentFailure("AssertionFailed", `${failed}: ${lastWords(r.stderr)}`)
  }
  return queries.map((_, i) => firstLines[i] ?? "")
}

export const assertionVerdict = (a: Assertion, value: number): string | undefined => {
  if (a.equals !== undefined && value !== a.equals) return `${a.name} = ${value}, expected ${a.equals}`
  if (a.min !== undefined && value < a.min) return `${a.name} = ${value}, below the minimum ${a.min}`
  if (a.max !== undefined && value > a.max) return `${a.name} = ${value}, above the maximum ${a.max}`
  return undefined
}

const verify = async (server: Server, spec: PostgresSpec) => {
  const timeQuery = spec.dataTimestampQuery?.trim().replace(/;+\s*$/, "")
  const answers = await scalars(server, spec.database, [
    ...spec.assertions.map((a) => ({ sql: a.sql, what: `assertion ${a.name}` })),
    { sql: "SELECT count(*) FROM pg_stat_user_tables", what: "tables" },
    ...(timeQuery === undefined
      ? []
      : [
          {
            sql: `SELECT extract(epoch FROM q.t) FROM (${timeQuery}) AS q(t) LIMIT 1`,
            what: "dataTimestampQuery",
          },
        ]),
  ])
  const counts: Record<string, number> = {}
  const said: string[] = []
  spec.assertions.forEach((a, i) => {
    const text = answers[i] ?? ""
    const value = Number(text)
    if (text === "" || !Number.isFinite(value))
      throw new AgentFailure(
        "AssertionFailed",
        `assertion ${a.name} returned ${JSON.stringify(text.slice(0, 64))}, not a number`,
      )
    const failed = assertionVerdict(a, value)
    if (failed) throw new AgentFailure("AssertionFailed", failed)
    if (Number.isSafeInteger(value) && value >= 0) counts[a.name] = value
    said.push(`${a.name}=${value}`)
  })
  const tables = Number(answers[spec.assertions.length])
  counts.tables = Number.isSafeInteger(tables) ? tables : 0
  let dataTimestamp: string | undefined
  if (timeQuery !== undefined) {
    const epoch = answers[spec.assertions.length + 1] ?? ""
    const ms = Number(epoch) * 1000
    if (epoch === "" || !Number.isFinite(ms))
      throw new AgentFailure("AssertionFailed", "dataTimestampQuery returned no time (no rows, or NULL)")
    dataTimestamp = new Date(ms).toISOString()
  }
  return { counts, said, dataTimestamp }
}

const restoreDump = async (
  ctx: AgentContext,
  spec: PostgresSpec,
  dump: NonNullable<PostgresSpec["dump"]>,
) => {
  const file = await fetchObject(dump.url, {
    endpointURL: dump.endpointURL,
    env: ctx.env,
    scratch: ctx.scratch,
    scratchLimitBytes: ctx.scratchLimitBytes,
  })
  const recoveryPoint = { id: file.source, time: file.modified }
  try {
    await chmod(file.path, 0o644)
    const head = Buffer.alloc(5)
    const fh = await open(file.path, "r")
    await fh.read(head, 0, 5, 0)
    await fh.close()
    const custom = head.toString("latin1") === "PGDMP"
    const clock = phaseClock()
    const server = await startServer(ctx, join(ctx.scratch, "pgdata"), true, "", false)
    clock.mark("postgres ready")
    try {
      if (spec.database !== "postgres") {
        const r = await server.tool("psql", [
          "-X",
          "-q",
          "-d",
          "postgres",
          "-c",
          `CREATE DATABASE ${quoteIdent(spec.database)}`,
        ])
        if (r.code !== 0)
          throw new AgentFailure("RestoreToolFailed", `creating ${spec.database}: ${lastWords(r.stderr)}`)
      }
      const r = custom
        ? await server.tool("pg_restore", [
            "--no-owner",
            "--no-privileges",
            "--exit-on-error",
            "-d",
            spec.database,
            file.path,
          ])
        : await server.tool("psql", [
            "-X",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-d",
            spec.database,
            "-f",
            file.path,
          ])
      if (r.code !== 0) {
        const corrupt =
          /did not find magic string|could not read (from )?input file|unexpected end of file|corrupt|invalid|could not uncompress/i.test(
            r.stderr,
          )
        throw new AgentFailure(
          corrupt ? "DataCorrupted" : "RestoreToolFailed",
          `${custom ? "pg_restore" : "psql"}: ${lastWords(r.stderr)}`,
        )
      }
      clock.mark(custom ? "pg_restore" : "psql restore")
      const v = await verify(server, spec)
      clock.mark("verified")
      clock.log()
      return {
        message: `restored ${custom ? "pg_dump archive" : "SQL dump"} ${file.source} (${formatBytes(file.bytes)}) into database ${spec.database}: ${v.counts.tables} tables${v.said.length ? `; ${v.said.join(", ")}` : ""}`,
        dataTimestamp: v.dataTimestamp,
        counts: { ...v.counts, files: 1, bytes: file.bytes },
        recoveryPoint,
      } satisfies AgentReport
    } finally {
      await server.stop()
    }
  } catch (e) {
    if (e instanceof AgentFailure) e.recoveryPoint = recoveryPoint
    throw e
  }
}

const BarmanBackupSchema = z.object({
  backup_id: z.string().regex(/^[A-Za-z0-9T_.:-]{1,64}$/),
  status: z.string().optional(),
  end_time: z.string().nullish(),
  begin_time: z.string().nullish(),
})

/** barman-cloud's times are local-zone strings like "Sun Dec  6 19:50:01 2026"; ISO ones pass through. */
const barmanTime = (t: string | null | undefined): string | undefined => {
  if (!t) return undefined
  const ms = Date.parse(/[zZ]|[+-]\d\d:?\d\d$/.test(t) ? t : `${t} UTC`)
  return Number.isFinite(ms) ? new Date(ms).toISOString() : undefined
}

const restoreBarman = async (
  ctx: AgentContext,
  spec: PostgresSpec,
  store: NonNullable<PostgresSpec["barmanObjectStore"]>,
) => {
  const endpoint = store.endpointURL ? ["--endpoint-url", store.endpointURL] : []
  const env = { ...ctx.env, TZ: "UTC" }
  const listed = await runTool(
    "barman-cloud-backup-list",
    [...endpoint, "--format", "json", store.destinationPath, store.serverName],
    { env, maxStdoutBytes: 16 * 1024 * 1024 },
  )
  if (listed.code !== 0) {
    const words = lastWords(listed.stderr)
    throw new AgentFailure(
      /AccessDenied|InvalidAccessKeyId|SignatureDoesNotMatch|403|credentials/i.test(listed.stderr)
        ? "RepositoryAuthFailed"
        : "RepositoryUnreachable",
      `barman-cloud-backup-list: ${words || `exit code ${listed.code}`}`,
    )
  }
  let backups: z.output<typeof BarmanBackupSchema>[]
  try {
    backups = z
      .object({ backups_list: z.array(BarmanBackupSchema) })
      .parse(JSON.parse(listed.stdout)).backups_list
  } catch (e) {
    throw new AgentFailure(
      "RestoreToolFailed",
      `barman-cloud-backup-list printed an unexpected list: ${String(e).slice(0, 200)}`,
    )
  }
  const candidates = backups
    .filter((b) => (b.status ?? "DONE") === "DONE")
    .map((b) => ({ id: b.backup_id, time: barmanTime(b.end_time) ?? barmanTime(b.begin_time) ?? "" }))
  if (candidates.length === 0)
    throw new AgentFailure(
      "SnapshotNotFound",
      `no completed base backup of ${store.serverName} in ${store.destinationPath}`,
    )
  const chosen = chooseRecoveryPoint(
    candidates,
    ctx.recoveryPoint,
    ctx.input.runID,
    new Date(),
    "base backup",
  )
  const recoveryPoint = { id: chosen.id, time: chosen.time }
  try {
    const dataDir = join(ctx.scratch, "pgdata")
    await mkdir(dataDir, { recursive: true, mode: 0o700 })
    const restored = await runTool(
      "barman-cloud-restore",
      [...endpoint, store.destinationPath, store.serverName, chosen.id, dataDir],
      { env },
    )
    if (restored.code !== 0)
      throw new AgentFailure(
        /checksum|corrupt|tar|unexpected end|invalid/i.test(restored.stderr)
          ? "DataCorrupted"
          : "RestoreToolFailed",
        `barman-cloud-restore: ${lastWords(restored.stderr) || `exit code ${restored.code}`}`,
      )
    // Recovery as CloudNativePG's does it: WAL from the same store, to the target time or the end.
    const walRestore = [
      "barman-cloud-wal-restore",
      ...endpoint,
      store.destinationPath,
      store.serverName,
      "%f",
      "%p",
    ]
      .map((a) => a.replace(/'/g, "''"))
      .join(" ")
    const conf = [
      `restore_command = '${walRestore}'`,
      ...(store.recoveryTargetTime
        ? [`recovery_target_time = '${store.recoveryTargetTime.replace(/'/g, "''")}'`]
        : []),
      "recovery_target_action = 'promote'",
      // CloudNativePG archives from the primary; the throwaway server must not archive back into it.
      "archive_mode = off",
      "",
    ].join("\n")
    await writeFile(join(dataDir, "recovery.signal"), "")
    const user = await serverUser()
    if (user) await chownTree(dataDir, user.uid, user.gid)
    const clock = phaseClock()
    const server = await startServer(ctx, dataDir, false, `\n${conf}`, true)
    clock.mark("postgres recovered and ready")
    try {
      const v = await verify(server, spec)
      clock.mark("verified")
      clock.log()
      const { files, bytes } = await treeSize(dataDir)
      return {
        message: `restored base backup ${chosen.id} of ${store.serverName} (${chosen.time}) with its WAL${store.recoveryTargetTime ? ` to ${store.recoveryTargetTime}` : ""}: ${v.counts.tables} tables in ${spec.database}${v.said.length ? `; ${v.said.join(", ")}` : ""}`,
        dataTimestamp: v.dataTimestamp ?? chosen.time,
        counts: { ...v.counts, files, bytes },
        recoveryPoint,
      } satisfies AgentReport
    } finally {
      await server.stop()
    }
  } catch (e) {
    if (e instanceof AgentFailure) e.recoveryPoint = recoveryPoint
    throw e
  }
}

const chownTree = async (dir: string, uid: number, gid: number): Promise<void> => {
  const r = await runTool("chown", ["-R", `${uid}:${gid}`, dir], { env: process.env })
  if (r.code !== 0) throw new AgentFailure("RestoreToolFailed", `chown ${dir}: ${lastWords(r.stderr)}`)
}

export const restorePostgres = (ctx: AgentContext, spec: PostgresSpec): Promise<AgentReport> => {
  if (spec.dump) return restoreDump(ctx, spec, spec.dump)
  if (spec.barmanObjectStore) return restoreBarman(ctx, spec, spec.barmanObjectStore)
  throw new AgentFailure("RestoreToolFailed", "postgres: neither dump nor barmanObjectStore is set")
}
