// A real Velero for local fleets (tests and `fleetcheck dev`): the server built from the Go module proxy
// (clusters/bin/velero: the server and its AWS plugin, one module) runs as a host process against one
// member's API server with that member's kubeconfig, its backup storage location a bucket on the loopback S3
// server (backups.ts). No node agent runs, so backups hold Kubernetes objects only (no volume data). Several
// members' servers may share one bucket and prefix: each syncs the others' backups into its own cluster, the
// way Velero users migrate clusters.
import { execFile, spawn } from "node:child_process"
import { existsSync, linkSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs"
import { tmpdir } from "node:os"
import { dirname, join } from "node:path"
import { motoServer, type S3Server, type Spawn } from "./backups.ts"
import { freePort, type LocalCluster } from "./fleet.ts"
import type { ManagedProcess } from "./processes.ts"

const buildTool = new URL("../build-tool.sh", import.meta.url).pathname
const plugin = "velero-plugin-for-aws"
const buildArgs = [
  "velero",
  "github.com/vmware-tanzu/velero",
  "github.com/vmware-tanzu/velero/cmd/velero",
  `github.com/vmware-tanzu/${plugin}/${plugin}`,
]

/** Velero and its plugin, in one `go build` (clusters/build-tool.sh): the directory holding both. */
const buildBoth = (): Promise<string> =>
  new Promise((resolve, reject) => {
    const child = spawn("bash", [buildTool, ...buildArgs], { stdio: ["ignore", "pipe", "inherit"] })
    let stdout = ""
    child.stdout.on("data", (chunk: Buffer) => {
      stdout += chunk.toString()
    })
    child.once("error", reject)
    child.once("exit", (code) => {
      const dir = stdout.trim().split("\n").at(-1) ?? ""
      if (code === 0 && existsSync(join(dir, "velero")) && existsSync(join(dir, plugin))) resolve(dir)
      else reject(new Error(`clusters/build-tool.sh velero exited with ${code}; see the output above`))
    })
  })

export interface VeleroBinaries {
  readonly velero: string
  /** Holds only velero-plugin-for-aws: the server's --plugin-dir (it runs every executable there). */
  readonly pluginDir: string
}

let built: Promise<VeleroBinaries> | undefined

/** Velero and its AWS plugin, built on first use (a second when cached). */
export const ensureVeleroBinaries = (): Promise<VeleroBinaries> => {
  built ??= buildBoth().then((dir) => {
    const pluginDir = join(dir, "plugins")
    mkdirSync(pluginDir, { recursive: true })
    try {
      // A hard link: Velero looks for plugins among the directory's regular executable files.
      linkSync(join(dir, plugin), join(pluginDir, plugin))
    } catch (e) {
      if ((e as NodeJS.ErrnoException).code !== "EEXIST") throw e
    }
    return { velero: join(dir, "velero"), pluginDir }
  })
  return built
}

const run = (command: string, args: ReadonlyArray<string>, env?: NodeJS.ProcessEnv, input?: string) =>
  new Promise<string>((resolve, reject) => {
    const child = execFile(
      command,
      [...args],
      { env: env ?? process.env, maxBuffer: 64 * 1024 * 1024, timeout: 120_000 },
      (error, stdout, stderr) => {
        if (error) reject(new Error(`${command} ${args.join(" ")}: ${stderr || error.message}`))
        else resolve(stdout)
      },
    )
    if (input !== undefined) child.stdin?.end(input)
  })

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

const waitFor = async <A>(what: string, timeoutMs: number, probe: () => Promise<A | undefined>) => {
  const deadline = Date.now() + timeoutMs
  for (;;) {
    const got = await probe()
    if (got !== undefined) return got
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`)
    await sleep(250)
  }
}

/** The end of a server's log, for an error (the run directory goes with the fleet). */
const logTail = (proc: ManagedProcess) => {
  try {
    return readFileSync(proc.logFile, "utf8").slice(-3_000)
  } catch {
    return "(no log)"
  }
}

export const veleroNamespace = "velero"
const v1 = `/apis/velero.io/v1/namespaces/${veleroNamespace}`
const terminalBackupPhases = new Set(["Completed", "PartiallyFailed", "Failed", "FailedValidation"])

export interface VeleroBackup {
  readonly name: string
  readonly phase: string
  /** status.startTimestamp: the recovery point. */
  readonly startTimestamp: string
  readonly itemsBackedUp: number
  /** The key of its tarball in the store's bucket. */
  readonly tarballKey: string
}

export interface VeleroServer {
  readonly cluster: LocalCluster
  readonly bucket: string
  readonly prefix: string
  readonly process: ManagedProcess
  /** The velero CLI with this member's kubeconfig and namespace. */
  readonly cli: (args: ReadonlyArray<string>) => Promise<string>
  /** Creates a Backup of `includedNamespaces` (labelled as a Schedule's when `scheduleName` is set). */
  readonly backup: (
    name: string,
    o: { readonly includedNamespaces: ReadonlyArray<string>; readonly scheduleName?: string },
  ) => Promise<VeleroBackup>
  /** Waits until the Backup (made here or synced from the store) reaches a terminal phase. */
  readonly waitForBackup: (name: string, timeoutMs?: number) => Promise<VeleroBackup>
  /**
   * A real Schedule (yearly, so its cron never fires during a test). Velero 1.18 makes no Backup when a
   * Schedule is created; unless `backupNow` is false, `velero backup create --from-schedule` makes its
   * first one, as an operator would, and it is awaited.
   */
  readonly schedule: (
    name: string,
    o: { readonly includedNamespaces: ReadonlyArray<string>; readonly backupNow?: boolean },
  ) => Promise<VeleroBackup | undefined>
  /** The Backups of a Schedule (label velero.io/schedule-name), by name. */
  readonly backupsOfSchedule: (scheduleName: string) => Promise<string[]>
  /** Waits for a Backup of the Schedule to exist and finish (its first one, made when it was created). */
  readonly waitForNewBackupOf: (scheduleName: string, timeoutMs?: number) => Promise<VeleroBackup>
  /** Points the BSL at a bucket that does not exist and waits until Velero calls it Unavailable. */
  readonly makeStorageUnavailable: () => Promise<void>
  /** Points the BSL back at its bucket and waits until it is Available again. */
  readonly makeStorageAvailable: () => Promise<void>
  readonly stop: () => Promise<void>
}

export interface StartVeleroOptions {
  readonly spawn: Spawn
  readonly cluster: LocalCluster
  readonly s3: S3Server
  /** Created when missing. */
  readonly bucket: string
  /** Key prefix in the bucket; servers sharing bucket and prefix see each other's backups. */
  readonly prefix?: string
  /**
   * How often backups in the store are synced into the cluster (default 1m, Velero's own). Velero
   * v1.18 looks once a minute (its backupSyncReconcilePeriod) and syncs when this much has passed
   * since the last sync: below a minute, every look syncs; at 1m, a look a moment early waits for
   * the next, so a sync may take two minutes.
   */
  readonly backupSyncPeriod?: string
  /** ReadOnly for a member that only restores another's backups (default ReadWrite). */
  readonly accessMode?: "ReadWrite" | "ReadOnly"
  /** The server's kubeconfig (e.g. a user of its own, told apart in audit logs); default the admin's. */
  readonly kubeconfigPath?: string
  /** Default 60 s: CRDs established, BSL Available. */
  readonly timeoutMs?: number
}

/** Velero's CRDs as its own installer renders them. */
const veleroCRDs = async (velero: string) =>
  run(velero, ["install", "--crds-only", "--dry-run", "-o", "yaml"])

/**
 * Installs Velero into `cluster` (CRDs, namespace, credentials Secret, BackupStorageLocation) and starts
 * its server; resolves once the BSL is Available. The server is one of the fleet's processes.
 */
export const startVelero = async (o: StartVeleroOptions): Promise<VeleroServer> => {
  const { cluster, s3, bucket } = o
  const prefix = o.prefix ?? "velero"
  const timeoutMs = o.timeoutMs ?? 60_000
  const bins = await ensureVeleroBinaries()
  const dir = join(cluster.dir, "velero")
  mkdirSync(join(dir, "tmp"), { recursive: true })

  const crds = await veleroCRDs(bins.velero)
  const applied = await cluster.kubectl(["apply", "--server-side", "-f", "-"], crds)
  if (applied.code !== 0) throw new Error(`${cluster.name}: applying Velero's CRDs: ${applied.stderr}`)
  const waited = await cluster.kubectl([
    "wait",
    "--for=condition=Established",
    `--timeout=${Math.ceil(timeoutMs / 1000)}s`,
    "crd",
    "-l",
    "component=velero",
  ])
  if (waited.code !== 0) throw new Error(`${cluster.name}: Velero's CRDs not established: ${waited.stderr}`)

  const must = async (method: string, path: string, body: unknown, ok = [200, 201, 409]) => {
    const r = await cluster.api(method, path, body)
    if (!ok.includes(r.status))
      throw new Error(`${cluster.name}: ${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`)
    return r
  }
  await must("POST", "/api/v1/namespaces", { metadata: { name: veleroNamespace } })
  const credentials = [
    "[default]",
    `aws_access_key_id=${s3.env.AWS_ACCESS_KEY_ID}`,
    `aws_secret_access_key=${s3.env.AWS_SECRET_ACCESS_KEY}`,
    "",
  ].join("\n")
  await must("POST", `/api/v1/namespaces/${veleroNamespace}/secrets`, {
    metadata: { name: "cloud-credentials" },
    stringData: { cloud: credentials },
  })
  await s3.createBucket(bucket).catch((e: Error) => {
    // Another member's server may share it.
    if (!/BucketAlreadyOwnedByYou|BucketAlreadyExists|409/.test(e.message)) throw e
  })
  const bsl = (bucketName: string) => ({
    apiVersion: "velero.io/v1",
    kind: "BackupStorageLocation",
    metadata: { name: "default", namespace: veleroNamespace },
    spec: {
      provider: "aws",
      default: true,
      accessMode: o.accessMode ?? "ReadWrite",
      objectStorage: { bucket: bucketName, prefix },
      credential: { name: "cloud-credentials", key: "cloud" },
      config: { region: s3.env.AWS_DEFAULT_REGION, s3ForcePathStyle: "true", s3Url: s3.endpoint },
    },
  })
  await must("POST", `${v1}/backupstoragelocations`, bsl(bucket))
  // Velero's restore actions read their own Deployment (`velero` in its namespace); without it every
  // restore of Pods is PartiallyFailed. The server runs on the host, so the Deployment has no replicas.
  await must("POST", `/apis/apps/v1/namespaces/${veleroNamespace}/deployments`, {
    metadata: { name: "velero", namespace: veleroNamespace, labels: { component: "velero" } },
    spec: {
      replicas: 0,
      selector: { matchLabels: { deploy: "velero" } },
      template: {
        metadata: { labels: { deploy: "velero" } },
        spec: { containers: [{ name: "velero", image: "velero/velero:v1.18.3" }] },
      },
    },
  })

  const [metricsPort, profilerPort] = [await freePort(), await freePort()]
  const proc = o.spawn(
    `${cluster.name}-velero`,
    bins.velero,
    [
      "server",
      `--kubeconfig=${o.kubeconfigPath ?? cluster.kubeconfigPath}`,
      `--namespace=${veleroNamespace}`,
      `--plugin-dir=${bins.pluginDir}`,
      `--metrics-address=127.0.0.1:${metricsPort}`,
      `--profiler-address=127.0.0.1:${profilerPort}`,
      `--backup-sync-period=${o.backupSyncPeriod ?? "1m"}`,
      // Unavailable storage is noticed within seconds, not Velero's default minute.
      "--store-validation-frequency=3s",
      "--log-level=info",
    ],
    // The credentials Secret is written under TMPDIR: one directory per member.
    { env: { ...process.env, TMPDIR: join(dir, "tmp"), HOME: dir } },
  )

  const bslPath = `${v1}/backupstoragelocations/default`
  const waitForStorage = (phase: "Available" | "Unavailable") =>
    waitFor(`${cluster.name}: BackupStorageLocation ${phase}`, timeoutMs, async () => {
      if (proc.hasExited()) throw new Error(`${cluster.name}: velero server exited:\n${logTail(proc)}`)
      const r = await cluster.api("GET", bslPath)
      return r.body?.status?.phase === phase ? true : undefined
    })
  await waitForStorage("Available")

  const readBackup = async (name: string): Promise<VeleroBackup | undefined> => {
    const r = await cluster.api("GET", `${v1}/backups/${name}`)
    const phase: string | undefined = r.body?.status?.phase
    if (r.status !== 200 || !phase || !terminalBackupPhases.has(phase)) return undefined
    return {
      name,
      phase,
      startTimestamp: String(r.body.status.startTimestamp ?? ""),
      itemsBackedUp: Number(r.body.status.progress?.itemsBackedUp ?? 0),
      tarballKey: backupTarballKey(prefix, name),
    }
  }
  const waitForBackup = (name: string, ms = timeoutMs) =>
    waitFor(`${cluster.name}: Backup ${name} finished`, ms, async () => {
      if (proc.hasExited()) throw new Error(`${cluster.name}: velero server exited:\n${logTail(proc)}`)
      return readBackup(name)
    })

  const patchBucket = async (bucketName: string) => {
    const patch = JSON.stringify({ spec: { objectStorage: { bucket: bucketName, prefix } } })
    const r = await cluster.kubectl([
      "patch",
      "-n",
      veleroNamespace,
      "backupstoragelocation",
      "default",
      "--type=merge",
      "-p",
      patch,
    ])
    if (r.code !== 0) throw new Error(`${cluster.name}: patching the BSL: ${r.stderr}`)
  }

  const backupsOfSchedule = async (scheduleName: string): Promise<string[]> => {
    const r = await cluster.api(
      "GET",
      `${v1}/backups?labelSelector=${encodeURIComponent(`velero.io/schedule-name=${scheduleName}`)}`,
    )
    return (r.body?.items ?? []).map((b: { metadata: { name: string } }) => b.metadata.name).sort()
  }

  const waitForNewBackupOf = async (scheduleName: string, ms = timeoutMs) => {
    const names = await waitFor(`${cluster.name}: a Backup of ${scheduleName}`, ms, async () => {
      const found = await backupsOfSchedule(scheduleName)
      return found.length > 0 ? found : undefined
    })
    return waitForBackup(names.at(-1) as string, ms)
  }
  const cli = (args: ReadonlyArray<string>) =>
    run(bins.velero, [`--kubeconfig=${cluster.kubeconfigPath}`, `--namespace=${veleroNamespace}`, ...args])

  return {
    cluster,
    bucket,
    prefix,
    process: proc,
    cli,
    backup: async (name, b) => {
      await must(
        "POST",
        `${v1}/backups`,
        {
          apiVersion: "velero.io/v1",
          kind: "Backup",
          metadata: {
            name,
            namespace: veleroNamespace,
            ...(b.scheduleName ? { labels: { "velero.io/schedule-name": b.scheduleName } } : {}),
          },
          spec: { includedNamespaces: [...b.includedNamespaces], storageLocation: "default", ttl: "24h0m0s" },
        },
        [201],
      )
      return waitForBackup(name)
    },
    waitForBackup,
    schedule: async (name, s): Promise<VeleroBackup | undefined> => {
      await must(
        "POST",
        `${v1}/schedules`,
        {
          apiVersion: "velero.io/v1",
          kind: "Schedule",
          metadata: { name, namespace: veleroNamespace },
          spec: {
            schedule: "0 3 1 1 *",
            template: {
              includedNamespaces: [...s.includedNamespaces],
              storageLocation: "default",
              ttl: "24h0m0s",
            },
          },
        },
        [201],
      )
      if (s.backupNow === false) return undefined
      await cli(["backup", "create", "--from-schedule", name])
      return waitForNewBackupOf(name)
    },
    backupsOfSchedule,
    waitForNewBackupOf,
    makeStorageUnavailable: async () => {
      await patchBucket(`${bucket}-missing`)
      await waitForStorage("Unavailable")
    },
    makeStorageAvailable: async () => {
      await patchBucket(bucket)
      await waitForStorage("Available")
    },
    stop: () => proc.stop(),
  }
}

/**
 * Objects Velero wrote are private to its credentials: read and written here with a signed client (boto3,
 * which the S3 server's own environment has), not the S3 server's anonymous helpers.
 */
const signedS3 = (s3: S3Server, op: "download" | "upload", bucket: string, key: string, file: string) => {
  const script = [
    "import sys, boto3",
    "op, endpoint, bucket, key, path = sys.argv[1:6]",
    "c = boto3.client('s3', endpoint_url=endpoint)",
    "(c.download_file if op == 'download' else c.upload_file)(*((bucket, key, path) if op == 'download' else (path, bucket, key)))",
  ].join("\n")
  return run(join(dirname(motoServer), "python"), ["-c", script, op, s3.endpoint, bucket, key, file], {
    ...process.env,
    ...s3.env,
  })
}

/** Where Velero keeps a backup's tarball of Kubernetes objects. */
export const backupTarballKey = (prefix: string, backup: string) =>
  `${prefix ? `${prefix}/` : ""}backups/${backup}/${backup}.tar.gz`

/**
 * Rewrites a backup's tarball in the store: `edit` gets the extracted tree's directory (paths as
 * `resources/<resource>/namespaces/<ns>/<name>.json`) and changes it in place. The backup stays listed
 * and Completed; only what a restore reads differs.
 */
export const editBackupTarball = async (
  s3: S3Server,
  bucket: string,
  prefix: string,
  backup: string,
  edit: (tree: string) => void,
): Promise<void> => {
  const key = backupTarballKey(prefix, backup)
  const work = mkdtempSync(join(tmpdir(), `fleetcheck-tarball-${backup}-`))
  try {
    const tree = join(work, "tree")
    mkdirSync(tree)
    await signedS3(s3, "download", bucket, key, join(work, "in.tar.gz"))
    await run("tar", ["-xzf", join(work, "in.tar.gz"), "-C", tree])
    edit(tree)
    await run("tar", ["-czf", join(work, "out.tar.gz"), "-C", tree, ...readdirSync(tree)])
    await signedS3(s3, "upload", bucket, key, join(work, "out.tar.gz"))
  } finally {
    rmSync(work, { recursive: true, force: true })
  }
}

/** Every file of one object in an extracted backup tree (each API version Velero stored it under). */
export const backupItemFiles = (
  tree: string,
  resource: string,
  namespace: string,
  name: string,
): string[] => {
  const root = join(tree, "resources", resource)
  if (!existsSync(root)) return []
  const files: string[] = []
  for (const version of ["", ...readdirSync(root)]) {
    const file = join(root, version, "namespaces", namespace, `${name}.json`)
    if (existsSync(file)) files.push(file)
  }
  return files
}
