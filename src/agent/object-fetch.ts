// Brings a backup file (a pg_dump archive, an etcd snapshot) into scratch: a local path, a file://
// URL, or an s3:// object fetched with a SigV4-signed GET (path-style, so any S3-compatible server on
// an endpointURL works). Credentials come from the standard AWS variables in the agent's environment.
// The download is bounded by the scratch volume's room, and its time is the object's Last-Modified.
import { createHash, createHmac } from "node:crypto"
import { createWriteStream } from "node:fs"
import { copyFile, stat } from "node:fs/promises"
import { basename, join } from "node:path"
import { Readable } from "node:stream"
import { pipeline } from "node:stream/promises"
import { AgentFailure } from "./protocol.ts"
import { ensureRoom, roomIn } from "./scratch.ts"

export interface FetchedObject {
  readonly path: string
  readonly bytes: number
  /** When the object was written (RFC 3339): the recovery point's time. */
  readonly modified: string
  /** The URL it came from: the recovery point's id. */
  readonly source: string
}

const sha256 = (s: string) => createHash("sha256").update(s).digest("hex")
const hmac = (key: Buffer | string, s: string) => createHmac("sha256", key).update(s).digest()
const encodeSegment = (s: string) =>
  encodeURIComponent(s).replace(/[!'()*]/g, (c) => `%${c.charCodeAt(0).toString(16).toUpperCase()}`)

/** Headers of a SigV4-signed request without a body (AWS Signature Version 4, service s3). */
export const signS3Get = (url: URL, env: NodeJS.ProcessEnv, now: Date): Record<string, string> => {
  const accessKey = env.AWS_ACCESS_KEY_ID
  const secret = env.AWS_SECRET_ACCESS_KEY
  if (!accessKey || !secret)
    throw new AgentFailure("RepositoryAuthFailed", "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY are not set")
  const region = env.AWS_REGION || env.AWS_DEFAULT_REGION || "us-east-1"
  const amzDate = now
    .toISOString()
    .replace(/[-:]/g, "")
    .replace(/\.\d{3}/, "")
  const day = amzDate.slice(0, 8)
  const payloadHash = sha256("")
  const headers: Record<string, string> = {
    host: url.host,
    "x-amz-content-sha256": payloadHash,
    "x-amz-date": amzDate,
    ...(env.AWS_SESSION_TOKEN ? { "x-amz-security-token": env.AWS_SESSION_TOKEN } : {}),
  }
  const names = Object.keys(headers).sort()
  const query = [...url.searchParams.entries()]
    .map(([k, v]) => `${encodeSegment(k)}=${encodeSegment(v)}`)
    .sort()
    .join("&")
  const canonical = [
    "GET",
    url.pathname,
    query,
    names.map((n) => `${n}:${headers[n]}\n`).join(""),
    names.join(";"),
    payloadHash,
  ].join("\n")
  const scope = `${day}/${region}/s3/aws4_request`
  const toSign = ["AWS4-HMAC-SHA256", amzDate, scope, sha256(canonical)].join("\n")
  const key = hmac(hmac(hmac(hmac(`AWS4${secret}`, day), region), "s3"), "aws4_request")
  const signature = createHmac("sha256", key).update(toSign).digest("hex")
  return {
    ...headers,
    authorization: `AWS4-HMAC-SHA256 Credential=${accessKey}/${scope}, SignedHeaders=${names.join(";")}, Signature=${signature}`,
  }
}

/** The HTTP URL of s3://bucket/key: path-style on the endpoint, or AWS's regional endpoint. */
export const s3HttpUrl = (s3: string, endpointURL: string | undefined, env: NodeJS.ProcessEnv): URL => {
  const m = /^s3:\/\/([^/]+)\/(.+)$/.exec(s3)
  if (!m) throw new AgentFailure("RestoreToolFailed", `${s3} is not an s3://bucket/key URL`)
  const [, bucket, key] = m as unknown as [string, string, string]
  const region = env.AWS_REGION || env.AWS_DEFAULT_REGION || "us-east-1"
  const base = (endpointURL || `https://s3.${region}.amazonaws.com`).replace(/\/+$/, "")
  return new URL(`${base}/${encodeSegment(bucket)}/${key.split("/").map(encodeSegment).join("/")}`)
}

export const fetchObject = async (
  source: string,
  opts: {
    readonly endpointURL?: string | undefined
    readonly env: NodeJS.ProcessEnv
    readonly scratch: string
    readonly scratchLimitBytes: number | undefined
  },
): Promise<FetchedObject> => {
  if (source.startsWith("s3://")) return fetchS3(source, opts)
  const path = source.startsWith("file://") ? new URL(source).pathname : source
  if (!path.startsWith("/"))
    throw new AgentFailure("RestoreToolFailed", `${source}: not an absolute path or URL`)
  const st = await stat(path).catch(() => undefined)
  if (!st?.isFile()) throw new AgentFailure("SnapshotNotFound", `${path}: no such file`)
  await ensureRoom(opts.scratch, opts.scratchLimitBytes, st.size, basename(path))
  const dest = join(opts.scratch, `backup-${basename(path)}`)
  await copyFile(path, dest)
  return { path: dest, bytes: st.size, modified: st.mtime.toISOString(), source }
}

const fetchS3 = async (
  source: string,
  opts: {
    endpointURL?: string | undefined
    env: NodeJS.ProcessEnv
    scratch: string
    scratchLimitBytes: number | undefined
  },
): Promise<FetchedObject> => {
  const url = s3HttpUrl(source, opts.endpointURL, opts.env)
  let res: Response
  try {
    res = await fetch(url, {
      headers: signS3Get(url, opts.env, new Date()),
      signal: AbortSignal.timeout(60_000),
    })
  } catch (e) {
    throw new AgentFailure(
      "RepositoryUnreachable",
      `GET ${url.origin}: ${(e as Error).cause ?? (e as Error).message}`,
    )
  }
  if (res.status === 403 || res.status === 401)
    throw new AgentFailure("RepositoryAuthFailed", `GET ${source}: ${res.status} (credentials refused)`)
  if (res.status === 404) throw new AgentFailure("SnapshotNotFound", `GET ${source}: no such object`)
  if (!res.ok || !res.body)
    throw new AgentFailure("RepositoryUnreachable", `GET ${source}: HTTP ${res.status}`)
  const length = Number(res.headers.get("content-length") ?? "0")
  if (length > 0) await ensureRoom(opts.scratch, opts.scratchLimitBytes, length, source)
  const room = await roomIn(opts.scratch, opts.scratchLimitBytes)
  const dest = join(opts.scratch, `backup-${basename(url.pathname)}`)
  let bytes = 0
  const counted = Readable.fromWeb(res.body as never).map((chunk: Buffer) => {
    bytes += chunk.length
    if (bytes > room)
      throw new AgentFailure("RestoreToolFailed", `${source} is larger than the scratch volume's room`)
    return chunk
  })
  await pipeline(counted, createWriteStream(dest))
  if (length > 0 && bytes !== length)
    throw new AgentFailure("DataCorrupted", `${source}: read ${bytes} of ${length} bytes`)
  const lastModified = Date.parse(res.headers.get("last-modified") ?? "")
  return {
    path: dest,
    bytes,
    modified: new Date(Number.isFinite(lastModified) ? lastModified : Date.now()).toISOString(),
    source,
  }
}
