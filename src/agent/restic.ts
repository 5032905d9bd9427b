// spec.restore.restic: restores one snapshot into scratch with restic's own verification, reads back
// a subset of the pack data (`restic check --read-data-subset`), then checks what the user listed:
// file hashes, a minimum of files and bytes. Every restic call is read-only (--no-lock): proving a
// backup never writes to the repository it proves.
import { mkdir } from "node:fs/promises"
import { join } from "node:path"
import * as z from "zod"
import type { ResticRestoreSchema } from "../api/restore.ts"
import { type AgentContext, AgentFailure, type AgentFailureReason, type AgentReport } from "./protocol.ts"
import { chooseRecoveryPoint } from "./recovery-point.ts"
import { formatBytes, roomIn, sha256File, treeSize } from "./scratch.ts"
import { lastWords, runTool } from "./tool.ts"

type ResticSpec = z.output<typeof ResticRestoreSchema>

const SnapshotSchema = z.object({
  id: z.string().regex(/^[0-9a-f]{64}$/),
  short_id: z.string().optional(),
  time: z.string(),
  hostname: z.string().optional(),
  paths: z.array(z.string()).optional(),
  tags: z.array(z.string()).nullish(),
})
type Snapshot = z.output<typeof SnapshotSchema>

const StatsSchema = z.object({ total_size: z.number(), total_file_count: z.number() })

/** restic's exit codes from 0.17 on (older releases exit 1 for all of these). */
const exitCodes: Readonly<Record<number, AgentFailureReason>> = {
  10: "RepositoryUnreachable", // repository does not exist
  11: "RepositoryUnreachable", // failed to lock
  12: "RepositoryAuthFailed", // wrong password
}

/** Why restic failed, from its exit code and the words it printed (restic 0.14 to 0.18). */
export const classifyResticFailure = (code: number, stderr: string): AgentFailureReason => {
  const byCode = exitCodes[code]
  if (byCode) return byCode
  if (/wrong password|no key found/i.test(stderr)) return "RepositoryAuthFailed"
  if (/AccessDenied|Access Denied|InvalidAccessKeyId|SignatureDoesNotMatch|403 Forbidden/i.test(stderr))
    return "RepositoryAuthFailed"
  if (/no matching ID found|invalid id|no snapshot found|snapshot .* not found/i.test(stderr))
    return "SnapshotNotFound"
  if (
    /ciphertext verification failed|Pack ID does not match|repository contains errors|hash mismatch|unexpected content|invalid file size|decrypting blob .* failed|There were \d+ errors/i.test(
      stderr,
    )
  )
    return "DataCorrupted"
  if (
    /unable to open (config|repository)|Is there a repository|connection refused|no such host|i\/o timeout|dial tcp|NoSuchBucket|no such file or directory/i.test(
      stderr,
    )
  )
    return "RepositoryUnreachable"
  return "RestoreToolFailed"
}

/** Every restic call: read-only (no lock), its cache in scratch. */
const resticArgs = (ctx: AgentContext, args: ReadonlyArray<string>): string[] => [
  "--no-lock",
  "--cache-dir",
  join(ctx.scratch, ".restic-cache"),
  ...args,
]

const restic = async (
  ctx: AgentContext,
  env: NodeJS.ProcessEnv,
  args: ReadonlyArray<string>,
  max?: number,
) => {
  const r = await runTool("restic", resticArgs(ctx, args), { env, maxStdoutBytes: max })
  if (r.code !== 0) {
    const reason = classifyResticFailure(r.code, r.stderr)
    throw new AgentFailure(reason, `restic ${args[0]}: ${lastWords(r.stderr) || `exit code ${r.code}`}`)
  }
  return r
}

const filterArgs = (spec: ResticSpec): string[] => [
  ...(spec.host !== undefined ? ["--host", spec.host] : []),
  ...(spec.tags !== undefined && spec.tags.length > 0 ? ["--tag", spec.tags.join(",")] : []),
  ...(spec.paths ?? []).flatMap((p) => ["--path", p]),
]

const listSnapshots = async (ctx: AgentContext, spec: ResticSpec, env: NodeJS.ProcessEnv) => {
  const listed = await restic(ctx, env, ["snapshots", "--json", ...filterArgs(spec)], 64 * 1024 * 1024)
  try {
    return z.array(SnapshotSchema).parse(JSON.parse(listed.stdout || "[]"))
  } catch (e) {
    throw new AgentFailure(
      "RestoreToolFailed",
      `restic snapshots printed what is not a snapshot list: ${String(e)}`,
    )
  }
}

const pickSnapshot = (ctx: AgentContext, spec: ResticSpec, snapshots: ReadonlyArray<Snapshot>): Snapshot => {
  if (spec.snapshot !== "latest") {
    const found = snapshots.find((s) => s.id.startsWith(spec.snapshot))
    if (!found) throw new AgentFailure("SnapshotNotFound", `no snapshot ${spec.snapshot} in the repository`)
    return found
  }
  if (snapshots.length === 0)
    throw new AgentFailure(
      "SnapshotNotFound",
      `the repository has no snapshot${filterArgs(spec).length > 0 ? " matching host, tags and paths" : ""}`,
    )
  return chooseRecoveryPoint(snapshots, ctx.recoveryPoint, ctx.input.runID, new Date(), "snapshot")
}

/** The snapshot restic says it restores: "restoring <Snapshot 4f1c2a9e of [...] ...> to ...". */
const restoredShortID = (stdout: string): string | undefined =>
  /restoring <Snapshot ([0-9a-f]{8,64}) /.exec(stdout)?.[1]

export const restoreRestic = async (ctx: AgentContext, spec: ResticSpec): Promise<AgentReport> => {
  const env: NodeJS.ProcessEnv = { ...ctx.env, RESTIC_REPOSITORY: spec.repository }
  delete env.RESTIC_REPOSITORY_FILE // the spec names the repository; a stray file must not override it
  if (!env.RESTIC_PASSWORD && !env.RESTIC_PASSWORD_FILE && !env.RESTIC_PASSWORD_COMMAND)
    // Without one restic asks a terminal there is none of; say which Secret lacks the key instead.
    throw new AgentFailure(
      "RepositoryAuthFailed",
      `no RESTIC_PASSWORD: Secret ${spec.credentialsSecretRef.name} has no such key`,
    )
  const room = await roomIn(ctx.scratch, ctx.scratchLimitBytes)
  const target = join(ctx.scratch, "restore")
  await mkdir(target, { recursive: true })

  // Every restic call pays its key derivation (about 0.4 s of CPU), so the calls overlap: with the
  // newest snapshot wanted, restic resolves "latest" itself while the list (for its id and time) and
  // the size check run beside the restore; otherwise the list picks first. A snapshot that will not fit
  // stops the restore.
  const direct = spec.snapshot === "latest" && ctx.recoveryPoint.policy === "Latest"
  const listing = listSnapshots(ctx, spec, env)
  const chosen = direct ? undefined : pickSnapshot(ctx, spec, await listing)
  const which = chosen ? [chosen.id] : ["latest", ...filterArgs(spec)]
  const stop = new AbortController()
  const sizing = restic(ctx, env, ["stats", "--json", "--mode", "restore-size", ...which]).then(async (r) => {
    const stats = StatsSchema.parse(JSON.parse(r.stdout))
    if (stats.total_size > room) {
      stop.abort()
      const newest = chosen ?? (await listing.then((l) => pickSnapshot(ctx, spec, l)).catch(() => undefined))
      throw new AgentFailure(
        "RestoreToolFailed",
        `snapshot ${newest?.id.slice(0, 8) ?? "latest"} needs ${formatBytes(stats.total_size)} but the scratch volume has ${formatBytes(room)} left; raise the agent's ephemeral-storage`,
      )
    }
    return stats
  })
  const restoring = runTool(
    "restic",
    resticArgs(ctx, ["restore", ...which, "--target", target, "--verify"]),
    {
      env,
      signal: stop.signal,
    },
  )
  const [listed, sized, restored] = await Promise.allSettled([listing, sizing, restoring])
  // Which failure speaks: too big first (the restore was stopped for it), then the list's (the same
  // repository, said once), then the restore's own.
  if (sized.status === "rejected" && stop.signal.aborted) throw sized.reason
  if (listed.status === "rejected") throw listed.reason
  if (restored.status === "rejected") throw restored.reason

  let snapshot = chosen
  if (!snapshot) {
    const short = restoredShortID(restored.value.stdout)
    snapshot = short ? listed.value.find((s) => s.id.startsWith(short)) : undefined
    // A snapshot made between the list and the restore: list again.
    if (!snapshot && short)
      snapshot = (await listSnapshots(ctx, spec, env)).find((s) => s.id.startsWith(short))
  }
  const recoveryPoint = snapshot
    ? { id: snapshot.id, time: new Date(snapshot.time).toISOString() }
    : undefined
  try {
    if (restored.value.code !== 0) {
      const stderr = restored.value.stderr
      if (!snapshot && /no snapshot found|no matching ID/i.test(stderr))
        throw new AgentFailure(
          "SnapshotNotFound",
          `the repository has no snapshot${filterArgs(spec).length > 0 ? " matching host, tags and paths" : ""}`,
        )
      throw new AgentFailure(
        classifyResticFailure(restored.value.code, stderr),
        `restic restore: ${lastWords(stderr) || `exit code ${restored.value.code}`}`,
      )
    }
    if (sized.status === "rejected") throw sized.reason
    if (!snapshot || !recoveryPoint)
      throw new AgentFailure("RestoreToolFailed", "restic restored a snapshot it does not list")
    const short = snapshot.short_id ?? snapshot.id.slice(0, 8)

    let checked = ""
    if (spec.verify.readDataSubset !== undefined) {
      await restic(ctx, env, ["check", "--read-data-subset", spec.verify.readDataSubset])
      checked = `; restic check read ${spec.verify.readDataSubset} of the pack data`
    }

    const { files, bytes } = await treeSize(target)
    for (const f of spec.verify.files ?? []) {
      const path = join(target, f.path)
      if (!path.startsWith(`${target}/`))
        throw new AgentFailure("AssertionFailed", `verify.files path ${f.path} leaves the snapshot`)
      const actual = await sha256File(path).catch(() => undefined)
      if (actual === undefined)
        throw new AgentFailure("AssertionFailed", `${f.path} is not in snapshot ${short}`)
      if (actual !== f.sha256)
        throw new AgentFailure(
          "DataCorrupted",
          `${f.path} restored with sha256 ${actual}, expected ${f.sha256}`,
        )
    }
    if (spec.verify.minFiles !== undefined && files < spec.verify.minFiles)
      throw new AgentFailure(
        "AssertionFailed",
        `snapshot ${short} restored ${files} files, fewer than ${spec.verify.minFiles}`,
      )
    if (spec.verify.minBytes !== undefined && bytes < spec.verify.minBytes)
      throw new AgentFailure(
        "AssertionFailed",
        `snapshot ${short} restored ${formatBytes(bytes)}, less than ${formatBytes(spec.verify.minBytes)}`,
      )
    const hashes = spec.verify.files?.length ? `; ${spec.verify.files.length} file hashes match` : ""
    return {
      message: `restored restic snapshot ${short} of ${snapshot.hostname ?? "?"} (${recoveryPoint.time}): ${files} files, ${formatBytes(bytes)}, verified${checked}${hashes}`,
      dataTimestamp: recoveryPoint.time,
      counts: { files, bytes },
      recoveryPoint,
    }
  } catch (e) {
    // The chosen point goes with a failure too: "snapshot 4f1c2a9e does not restore" names the backup.
    if (e instanceof AgentFailure && recoveryPoint) e.recoveryPoint = recoveryPoint
    throw e
  }
}
