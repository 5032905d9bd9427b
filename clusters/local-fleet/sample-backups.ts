// The backups behind the restore samples (clusters/samples/restores): made for real when `fleetcheck
// dev` starts, so the dashboard's first real restores prove bytes that restic, etcd and pg_dump wrote.
// An S3-compatible server on loopback holds a restic repository and an etcd snapshot; the run dir holds
// a damaged restic repository and a pg_dump archive. The samples' {{name}} placeholders are filled in
// from `values`; the Secrets they reference are returned for the caller to create.
import { spawn } from "node:child_process"
import { readdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import {
  damageResticPacks,
  etcdSnapshot,
  pgDump,
  resticBackup,
  startS3Server,
  writeSampleFiles,
} from "./backups.ts"
import type { LocalFleet } from "./fleet.ts"

export const restoreSamplesDir = new URL("../samples/restores/", import.meta.url).pathname

export interface SampleBackups {
  /** Placeholder values: s3Endpoint, backups, ordersDump, orderFileHashes. */
  readonly values: Readonly<Record<string, string>>
  /** Secrets the samples reference, in their namespace. */
  readonly secrets: ReadonlyArray<{ readonly name: string; readonly stringData: Record<string, string> }>
}

const installScript = new URL("../../config/install-restore-tools.sh", import.meta.url).pathname

/** The tools the backups are made with, installed when missing (a first `fleetcheck dev` on a fresh clone). */
const ensureRestoreTools = () =>
  new Promise<void>((resolve, reject) => {
    const child = spawn("bash", [installScript], { stdio: ["ignore", "inherit", "inherit"] })
    child.once("error", reject)
    child.once("exit", (code) =>
      code === 0 ? resolve() : reject(new Error(`config/install-restore-tools.sh exited with ${code}`)),
    )
  })

export const makeSampleBackups = async (
  fleet: LocalFleet,
  log: (line: string) => void,
): Promise<SampleBackups> => {
  await ensureRestoreTools()
  const dir = join(fleet.runDir, "sample-backups")
  const s3 = await startS3Server(fleet.spawn, "sample-s3")
  await s3.createBucket("restic")
  await s3.createBucket("etcd")

  const files = join(dir, "orders")
  const hashes = writeSampleFiles(files, 24, 256 * 1024, "orders-files")
  const repository = `s3:${s3.endpoint}/restic/orders-files`
  for (const [i, init] of [true, false, false].entries()) {
    if (i > 0) writeFileSync(join(files, `orders-${i}.csv`), `order,${i}\n`)
    await resticBackup({
      repository,
      password: "pw-orders-c0ffee",
      env: s3.env,
      dir: files,
      host: "db-1",
      init,
    })
  }
  const damaged = join(dir, "restic-damaged")
  await resticBackup({
    repository: damaged,
    password: "pw-archive-c0ffee",
    dir: files,
    host: "db-1",
    init: true,
  })
  damageResticPacks(damaged)
  log("sample backups: restic repositories made (one on S3, one damaged on disk)")

  // A fresh etcd's snapshot. (One of the dev fleet's own etcd failed its restore in 2 of 3 suite runs,
  // the agent exiting 1 without a verdict; back to this until that is understood.)
  const snapshot = await etcdSnapshot(fleet.spawn, join(fleet.binDir, "etcd"), dir, [
    "/registry/configmaps/shop/prices",
    "/registry/configmaps/shop/flags",
    "/registry/secrets/shop/api-key",
  ])
  await s3.putObject("etcd", "snapshots/member.db", readFileSync(snapshot))
  const dump = await pgDump(dir, 1_000, 10 * 60_000)
  log("sample backups: etcd snapshot on S3, pg_dump of orders")

  const listed = [...hashes.entries()].slice(0, 2).map(([f, sha256]) => ({ path: join(files, f), sha256 }))
  return {
    values: {
      s3Endpoint: s3.endpoint,
      backups: dir,
      ordersDump: dump,
      // As restic ls lists them: by the absolute path they were backed up from.
      orderFileHashes: JSON.stringify(listed),
    },
    secrets: [
      { name: "restic-orders", stringData: { RESTIC_PASSWORD: "pw-orders-c0ffee", ...s3.env } },
      { name: "restic-archive", stringData: { RESTIC_PASSWORD: "pw-archive-c0ffee" } },
      { name: "s3-credentials", stringData: { ...s3.env } },
    ],
  }
}

/** The restore samples with their placeholders filled in, as files in `outDir`. */
export const renderRestoreSamples = (values: Readonly<Record<string, string>>, outDir: string): string[] =>
  readdirSync(restoreSamplesDir)
    .filter((f) => f.endsWith(".yaml"))
    .sort()
    .map((f) => {
      const text = readFileSync(join(restoreSamplesDir, f), "utf8").replace(/\{\{(\w+)\}\}/g, (_, name) => {
        const value = values[name]
        if (value === undefined) throw new Error(`${f}: no value for {{${name}}}`)
        return value
      })
      const out = join(outDir, f)
      writeFileSync(out, text)
      return out
    })
