// The pod's scratch volume: how much room is left in it, and what a restore put there (files, bytes,
// a file's SHA-256). A restore that cannot fit is refused before it starts, with both sizes named,
// rather than failing half-way on a full disk.
import { createHash } from "node:crypto"
import { createReadStream } from "node:fs"
import { lstat, readdir, statfs } from "node:fs/promises"
import { join } from "node:path"
import { AgentFailure } from "./protocol.ts"

/** Bytes the scratch volume can still take: its size limit when it has one, and the disk's free space. */
export const roomIn = async (scratch: string, limitBytes: number | undefined): Promise<number> => {
  const fs = await statfs(scratch)
  const free = Number(fs.bavail) * Number(fs.bsize)
  if (limitBytes === undefined) return free
  const used = (await treeSize(scratch)).bytes
  return Math.max(0, Math.min(free, limitBytes - used))
}

export const ensureRoom = async (
  scratch: string,
  limitBytes: number | undefined,
  needBytes: number,
  what: string,
): Promise<void> => {
  const room = await roomIn(scratch, limitBytes)
  if (needBytes > room)
    throw new AgentFailure(
      "RestoreToolFailed",
      `${what} needs ${formatBytes(needBytes)} but the scratch volume has ${formatBytes(room)} left; raise the agent's ephemeral-storage`,
    )
}

/** Regular files and their bytes under a directory (symlinks are counted as files, not followed). */
export const treeSize = async (dir: string): Promise<{ files: number; bytes: number }> => {
  let files = 0
  let bytes = 0
  const walk = async (d: string): Promise<void> => {
    for (const entry of await readdir(d, { withFileTypes: true })) {
      const path = join(d, entry.name)
      if (entry.isDirectory()) await walk(path)
      else {
        files += 1
        if (entry.isFile()) bytes += (await lstat(path)).size
      }
    }
  }
  await walk(dir)
  return { files, bytes }
}

export const sha256File = (path: string): Promise<string> =>
  new Promise((resolve, reject) => {
    const hash = createHash("sha256")
    createReadStream(path)
      .on("error", reject)
      .on("data", (c) => hash.update(c))
      .on("end", () => resolve(hash.digest("hex")))
  })

export const formatBytes = (n: number): string => {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"]
  let v = n
  let u = 0
  while (v >= 1024 && u < units.length - 1) {
    v /= 1024
    u += 1
  }
  return u === 0 ? `${n} B` : `${v.toFixed(v < 10 ? 1 : 0)} ${units[u]}`
}
