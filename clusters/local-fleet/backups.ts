// Real backups for local fleets (tests and `fleetcheck dev`): an S3-compatible server on loopback
// (moto's, from config/install-restore-tools.sh), restic repositories made by restic itself, an etcd
// snapshot taken from a running etcd, a pg_dump archive of a real Postgres. What the restore agent
// proves in a local fleet is what these tools wrote, byte for byte.
import { execFile } from "node:child_process"
import { createHash } from "node:crypto"
import {
  chmodSync,
  chownSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readFileSync,
  statSync,
  writeFileSync,
  writeSync,
} from "node:fs"
import { homedir } from "node:os"
import { join } from "node:path"
import { restoreToolPath } from "./agent-executor.ts"
import { freePort } from "./fleet.ts"
import type { ManagedProcess, StartOptions } from "./processes.ts"

/** How a harness module starts a process: LocalFleet.spawn. */
export type Spawn = (
  name: string,
  command: string,
  args: ReadonlyArray<string>,
  options?: StartOptions,
) => ManagedProcess

const run = (
  command: string,
  args: ReadonlyArray<string>,
  env: NodeJS.ProcessEnv = process.env,
  uid?: number,
) =>
  new Promise<string>((resolve, reject) => {
    execFile(
      command,
      [...args],
      { env, maxBuffer: 64 * 1024 * 1024, ...(uid !== undefined ? { uid, gid: uid } : {}) },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`${command} ${args.join(" ")}: ${stderr || error.message}`))
        else resolve(stdout)
      },
    )
  })

export interface S3Server {
  /** http://127.0.0.1:PORT */
  readonly endpoint: string
  /** AWS_* variables any client of it uses (the server takes any key). */
  readonly env: Readonly<Record<string, string>>
  readonly createBucket: (bucket: string) => Promise<void>
  readonly putObject: (bucket: string, key: string, body: Buffer) => Promise<void>
  readonly getObject: (bucket: string, key: string) => Promise<Buffer>
  readonly listKeys: (bucket: string, prefix: string) => Promise<string[]>
  readonly process: ManagedProcess
}

export const motoServer = join(
  process.env.FLEETCHECK_CACHE ?? join(homedir(), ".cache/fleetcheck"),
  "s3-venv/bin/moto_server",
)

/** Starts the S3-compatible server on a loopback port (a process of the fleet). */
export const startS3Server = async (spawn: Spawn, name = "s3"): Promise<S3Server> => {
  if (!existsSync(motoServer))
    throw new Error(`${motoServer} is missing: run bash config/install-restore-tools.sh`)
  const port = await freePort()
  const proc = spawn(name, motoServer, ["-H", "127.0.0.1", "-p", String(port)])
  const endpoint = `http://127.0.0.1:${port}`
  const deadline = Date.now() + 30_000
  for (;;) {
    const up = await fetch(`${endpoint}/`, { signal: AbortSignal.timeout(1_000) }).then(
      (r) => r.status < 500,
      () => false,
    )
    if (up) break
    if (proc.hasExited() || Date.now() > deadline)
      throw new Error(`S3 server did not start; see ${proc.logFile}`)
    await new Promise((r) => setTimeout(r, 200))
  }
  const req = async (method: string, path: string, body?: Buffer) => {
    const res = await fetch(`${endpoint}${path}`, { method, ...(body ? { body } : {}) })
    if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`)
    return res
  }
  return {
    endpoint,
    env: {
      AWS_ACCESS_KEY_ID: "fleetcheck",
      AWS_SECRET_ACCESS_KEY: "fleetcheck-secret",
      AWS_DEFAULT_REGION: "us-east-1",
    },
    createBucket: async (bucket) => {
      await req("PUT", `/${bucket}`)
    },
    putObject: async (bucket, key, body) => {
      await req("PUT", `/${bucket}/${key}`, body)
    },
    getObject: async (bucket, key) =>
      Buffer.from(await (await req("GET", `/${bucket}/${key}`)).arrayBuffer()),
    listKeys: async (bucket, prefix) => {
      const xml = await (
        await req("GET", `/${bucket}?list-type=2&prefix=${encodeURIComponent(prefix)}`)
      ).text()
      return [...xml.matchAll(/<Key>([^<]+)<\/Key>/g)].map((m) => m[1] as string)
    },
    process: proc,
  }
}

/** Files with known content: `count` files of `size` bytes (deterministic from the seed). */
export const writeSampleFiles = (
  dir: string,
  count: number,
  size: number,
  seed: string,
): Map<string, string> => {
  mkdirSync(dir, { recursive: true })
  const hashes = new Map<string, string>()
  for (let i = 0; i < count; i++) {
    const chunks: Buffer[] = []
    let block = createHash("sha256").update(`${seed}/${i}`).digest()
    for (let n = 0; n < size; n += block.length) {
      chunks.push(block)
      block = createHash("sha256").update(block).digest()
    }
    const body = Buffer.concat(chunks).subarray(0, size)
    const name = `file-${String(i).padStart(4, "0")}.bin`
    writeFileSync(join(dir, name), body)
    hashes.set(name, createHash("sha256").update(body).digest("hex"))
  }
  return hashes
}

export interface ResticSnapshot {
  readonly id: string
  readonly time: string
}

/** restic init (when new) and backup of `dir`; returns the snapshot restic made. */
export const resticBackup = async (o: {
  readonly repository: string
  readonly password: string
  readonly env?: Readonly<Record<string, string>>
  readonly dir: string
  readonly host: string
  readonly tags?: ReadonlyArray<string>
  readonly init: boolean
}): Promise<ResticSnapshot> => {
  const env = { ...process.env, ...o.env, RESTIC_REPOSITORY: o.repository, RESTIC_PASSWORD: o.password }
  if (o.init) await run("restic", ["init", "-q"], env)
  const out = await run(
    "restic",
    ["backup", "--json", "-q", "--host", o.host, ...(o.tags ?? []).flatMap((t) => ["--tag", t]), o.dir],
    env,
  )
  const summary = out
    .split("\n")
    .filter(Boolean)
    .map((l) => JSON.parse(l))
    .find((m) => m.message_type === "summary")
  const id: string = summary?.snapshot_id
  const listed = JSON.parse(await run("restic", ["snapshots", "--json", "--no-lock", id], env)) as Array<{
    id: string
    time: string
  }>
  const snap = listed.find((s) => s.id.startsWith(id))
  if (!snap) throw new Error(`restic backup made no snapshot ${id}`)
  return { id: snap.id, time: new Date(snap.time).toISOString() }
}

/**
 * Overwrites 32 bytes in the middle of every data pack of a filesystem restic repository: the backup is
 * still listed, its snapshots still look fine, and restoring it fails restic's verification.
 */
export const damageResticPacks = (repository: string): number => {
  let damaged = 0
  const packs = join(repository, "data")
  for (const sub of readdirSync(packs))
    for (const pack of readdirSync(join(packs, sub))) {
      const file = join(packs, sub, pack)
      chmodSync(file, 0o644) // restic writes packs read-only
      const fd = openSync(file, "r+")
      try {
        writeSync(fd, Buffer.alloc(32, 0x58), 0, 32, Math.floor(statSync(file).size / 2))
      } finally {
        closeSync(fd)
      }
      damaged++
    }
  return damaged
}

/** A snapshot of a running etcd (its gRPC gateway streams it, as etcdctl snapshot save does) into `file`. */
export const snapshotOfEtcd = async (client: string, file: string): Promise<string> => {
  const res = await fetch(`${client}/v3/maintenance/snapshot`, { method: "POST" })
  if (!res.ok) throw new Error(`etcd snapshot from ${client}: HTTP ${res.status}`)
  const text = await res.text()
  const blob = Buffer.concat(
    text
      .split("\n")
      .filter(Boolean)
      .map((line) => Buffer.from(JSON.parse(line).result?.blob ?? "", "base64")),
  )
  writeFileSync(file, blob)
  return file
}

/** A snapshot of a fresh etcd holding `keys` (taken through etcd's gRPC gateway, as etcdctl does). */
export const etcdSnapshot = async (
  spawn: Spawn,
  etcdBin: string,
  dir: string,
  keys: ReadonlyArray<string>,
): Promise<string> => {
  const [clientPort, peerPort] = [await freePort(), await freePort()]
  const client = `http://127.0.0.1:${clientPort}`
  const proc = spawn(`etcd-snapshot-source-${clientPort}`, etcdBin, [
    `--data-dir=${join(dir, "etcd-source")}`,
    `--listen-client-urls=${client}`,
    `--advertise-client-urls=${client}`,
    `--listen-peer-urls=http://127.0.0.1:${peerPort}`,
    `--initial-advertise-peer-urls=http://127.0.0.1:${peerPort}`,
    `--initial-cluster=default=http://127.0.0.1:${peerPort}`,
    "--log-level=error",
  ])
  try {
    const deadline = Date.now() + 30_000
    while (
      !(await fetch(`${client}/health`).then(
        (r) => r.ok,
        () => false,
      ))
    ) {
      if (Date.now() > deadline) throw new Error("etcd for the snapshot did not start")
      await new Promise((r) => setTimeout(r, 200))
    }
    for (const key of keys) {
      const res = await fetch(`${client}/v3/kv/put`, {
        method: "POST",
        body: JSON.stringify({
          key: Buffer.from(key).toString("base64"),
          value: Buffer.from(`value of ${key}`).toString("base64"),
        }),
      })
      if (!res.ok) throw new Error(`etcd put ${key}: ${res.status}`)
    }
    return await snapshotOfEtcd(client, join(dir, "etcd-snapshot.db"))
  } finally {
    await proc.stop()
  }
}

/** A real Postgres to back up: initdb'd in `dir`/`name`, started on a socket there, stopped after `use`. */
const withSourcePostgres = async <A>(
  dir: string,
  name: string,
  conf: ReadonlyArray<string>,
  env: Readonly<Record<string, string>>,
  use: (pg: {
    readonly psql: (sql: string) => Promise<string>
    readonly as: (command: string, args: ReadonlyArray<string>) => Promise<string>
    readonly socketDir: string
  }) => Promise<A>,
): Promise<A> => {
  const bin = restoreToolPath("").find((p) => p.includes("postgresql"))
  if (!bin) throw new Error("PostgreSQL is not installed: run bash config/install-restore-tools.sh")
  const passwd = readFileSync("/etc/passwd", "utf8")
    .split("\n")
    .find((l) => l.startsWith("postgres:"))
  const uid = process.getuid?.() === 0 ? Number(passwd?.split(":")[2] ?? 65534) : undefined
  const work = join(dir, name)
  mkdirSync(work, { recursive: true })
  chmodSync(dir, 0o755) // the postgres user reaches its directory (the run dir is 0711)
  if (uid !== undefined) chownSync(work, uid, uid)
  const data = join(work, "data")
  const pgEnv = {
    ...process.env,
    ...env,
    PGHOST: work,
    PGUSER: "postgres",
    PATH: `${bin}:${process.env.PATH}`,
  }
  const as = (command: string, args: ReadonlyArray<string>) => run(command, args, pgEnv, uid)
  await as(join(bin, "initdb"), ["-D", data, "-U", "postgres", "--auth=trust", "--no-sync"])
  writeFileSync(join(data, "postgresql.auto.conf"), `${["listen_addresses = ''", ...conf].join("\n")}\n`)
  await as(join(bin, "pg_ctl"), ["-D", data, "-o", `-k ${work}`, "-w", "-l", join(work, "log"), "start"])
  try {
    return await use({
      psql: (sql) => as(join(bin, "psql"), ["-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c", sql]),
      as,
      socketDir: work,
    })
  } finally {
    await as(join(bin, "pg_ctl"), ["-D", data, "-m", "immediate", "stop"]).catch(() => undefined)
  }
}

/** `rows` orders, one a minute, the newest `newestAgoMs` old, ids from `first`. */
const ordersSQL = (first: number, rows: number, newestAgoMs: number) => {
  const newest = new Date(Date.now() - newestAgoMs).toISOString()
  return `CREATE TABLE IF NOT EXISTS orders (id int PRIMARY KEY, customer text, created timestamptz NOT NULL);
    INSERT INTO orders SELECT g, 'customer-' || (g % 37), '${newest}'::timestamptz - (${first + rows - 1} - g) * interval '1 minute'
      FROM generate_series(${first}, ${first + rows - 1}) g;`
}

/** A pg_dump (custom format) of a real Postgres holding `rows` orders, the newest `newestAgoMs` old. */
export const pgDump = (dir: string, rows: number, newestAgoMs: number): Promise<string> =>
  withSourcePostgres(dir, "pg-source", [], {}, async (pg) => {
    await pg.psql(ordersSQL(1, rows, newestAgoMs))
    const file = join(dir, "pg-source", "orders.dump")
    await pg.as("pg_dump", ["-Fc", "-f", file, "postgres"])
    return file
  })

/**
 * A CloudNativePG-style object store, written by barman-cloud itself: a base backup of a real Postgres
 * taken with `rows` orders, then `rowsAfter` more that reach the store only as archived WAL
 * (barman-cloud-wal-archive as archive_command). A restore that replays the WAL has both.
 */
export const barmanBackup = (
  dir: string,
  s3: S3Server,
  destinationPath: string,
  serverName: string,
  rows: number,
  rowsAfter: number,
): Promise<{ readonly backupID: string }> => {
  const endpoint = ["--endpoint-url", s3.endpoint]
  const archive = ["barman-cloud-wal-archive", ...endpoint, destinationPath, serverName, "%p"].join(" ")
  const conf = ["wal_level = replica", "archive_mode = on", `archive_command = '${archive}'`]
  return withSourcePostgres(dir, "pg-barman-source", conf, { ...s3.env, HOME: dir }, async (pg) => {
    await pg.psql(ordersSQL(1, rows, 60 * 60_000))
    await pg.as("barman-cloud-backup", [
      ...endpoint,
      "-h",
      pg.socketDir,
      "-U",
      "postgres",
      destinationPath,
      serverName,
    ])
    await pg.psql(ordersSQL(rows + 1, rowsAfter, 2 * 60_000))
    // The segment holding the later rows goes to the store now, not at archive_timeout.
    const segment = (await pg.psql("SELECT pg_walfile_name(pg_switch_wal())")).trim()
    const deadline = Date.now() + 60_000
    while ((await pg.psql("SELECT last_archived_wal FROM pg_stat_archiver")).trim() < segment) {
      if (Date.now() > deadline) throw new Error(`WAL segment ${segment} was not archived in 60 s`)
      await new Promise((r) => setTimeout(r, 200))
    }
    const listed = JSON.parse(
      await pg.as("barman-cloud-backup-list", [...endpoint, "--format", "json", destinationPath, serverName]),
    ) as { backups_list: Array<{ backup_id: string }> }
    const backupID = listed.backups_list.at(-1)?.backup_id
    if (!backupID) throw new Error("barman-cloud-backup made no backup")
    return { backupID }
  })
}
