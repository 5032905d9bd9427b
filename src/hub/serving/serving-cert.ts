// The serving certificate of the guarded listener (secure serving, ADR 0007): a certificate and key
// from files, checked before use and reloaded when the files change, or a self-signed one made at
// start. cert-manager (and a kubelet projecting a Secret) rewrites the files in place or swaps a
// symlink in their directory, so the directory is watched, with a slow poll behind it for file systems
// whose events do not arrive. A changed pair goes into the running server for new connections
// (connections already open keep theirs); a pair that does not load is refused, logged once, and the
// previous one kept, so a half-written rotation never takes the listener down.
import { createHash, createPrivateKey, X509Certificate } from "node:crypto"
import { type FSWatcher, readFileSync, statSync, watch } from "node:fs"
import { hostname } from "node:os"
import { dirname } from "node:path"
import { createSecureContext, type SecureContextOptions } from "node:tls"
import { Data } from "effect"
import { type ServingPair, selfSignedServingPair } from "./self-signed.ts"

export type { ServingPair } from "./self-signed.ts"

/** A certificate chain or a key file is a few KiB; anything past this is not one. */
export const maxServingFileBytes = 1024 * 1024
/** After a change event, files settle this long before they are read (a rotation writes two files). */
export const reloadSettleMs = 200
/** How often the files are read when no change event came: the backstop for missed events. */
export const reloadPollMs = 10_000
/** A TLS handshake not finished by then is dropped (node's default is 120 s). */
export const handshakeTimeoutMs = 10_000

/** What the listener serves with: the pair, and the SHA-256 fingerprint logged and compared. */
export interface ServingCert {
  readonly pair: ServingPair
  /** The leaf certificate's SHA-256 fingerprint, colon-separated hex (as openssl prints it). */
  readonly fingerprint: string
  readonly notAfter: string
  readonly source: "files" | "self-signed"
}

export class ServingCertError extends Data.TaggedError("ServingCertError")<{
  readonly message: string
}> {}

/** TLS settings for node's https server: TLS 1.2 at least, node's default cipher list (no RC4, 3DES, CBC-SHA1 first). */
export const tlsServerOptions = (pair: ServingPair): SecureContextOptions => ({
  cert: pair.cert,
  key: pair.key,
  minVersion: "TLSv1.2",
})

const readBounded = (file: string, what: string): string => {
  const size = statSync(file).size
  if (size > maxServingFileBytes)
    throw new Error(`${what} ${file} is ${size} bytes; at most ${maxServingFileBytes}`)
  return readFileSync(file, "utf8")
}

/**
 * Checks a PEM pair the way the TLS stack will use it: the first certificate parses, the key parses and
 * belongs to it, it is valid now, and OpenSSL builds a context from the pair. Returns why not.
 */
export const checkServingPair = (
  pair: ServingPair,
  now = new Date(),
): ServingCert | { readonly error: string } => {
  try {
    const leaf = new X509Certificate(pair.cert)
    const key = createPrivateKey(pair.key)
    if (!leaf.checkPrivateKey(key)) return { error: "the private key does not belong to the certificate" }
    if (new Date(leaf.validTo) < now) return { error: `the certificate expired at ${leaf.validTo}` }
    if (new Date(leaf.validFrom) > now)
      return { error: `the certificate is not valid before ${leaf.validFrom}` }
    createSecureContext(tlsServerOptions(pair))
    return {
      pair,
      fingerprint: leaf.fingerprint256,
      notAfter: new Date(leaf.validTo).toISOString(),
      source: "files",
    }
  } catch (e) {
    return { error: e instanceof Error ? e.message : String(e) }
  }
}

const readPair = (certFile: string, keyFile: string): ServingPair => ({
  cert: readBounded(certFile, "--tls-cert-file"),
  key: readBounded(keyFile, "--tls-private-key-file"),
})

/** The pair from the files, checked; a startup error with the reason when they do not serve. */
export const loadServingFiles = (certFile: string, keyFile: string): ServingCert => {
  let pair: ServingPair
  try {
    pair = readPair(certFile, keyFile)
  } catch (e) {
    throw new ServingCertError({
      message: `cannot read the serving certificate: ${e instanceof Error ? e.message : String(e)}`,
    })
  }
  const checked = checkServingPair(pair)
  if ("error" in checked)
    throw new ServingCertError({
      message: `--tls-cert-file ${certFile} with --tls-private-key-file ${keyFile} cannot serve: ${checked.error}`,
    })
  return checked
}

/**
 * A self-signed certificate for this host: its hostname (the Pod's name), localhost and the loopback
 * addresses (kubectl port-forward), and the listener's own address when it names one.
 */
export const selfSignedServingCert = (listenHost: string): ServingCert => {
  const names = [
    hostname(),
    "localhost",
    "127.0.0.1",
    "::1",
    ...(listenHost !== "0.0.0.0" && listenHost !== "::" && listenHost !== "" ? [listenHost] : []),
  ]
  const pair = selfSignedServingPair([...new Set(names)])
  const checked = checkServingPair(pair)
  if ("error" in checked)
    throw new ServingCertError({
      message: `self-signed certificate: ${checked.error}`,
    })
  return { ...checked, source: "self-signed" }
}

const digest = (pair: ServingPair) =>
  createHash("sha256").update(pair.cert).update("\0").update(pair.key).digest("hex")

export interface ServingCertWatch {
  /** Reads the files now and applies them if they changed (what a change event or the poll does). */
  readonly check: () => void
  readonly close: () => void
}

/**
 * Watches the two files' directories; on a change (or every `reloadPollMs`) reads the pair, and if it
 * differs from the one served and checks out, hands it to `apply`. A pair that does not check out is
 * reported to `refused` once per distinct content and otherwise ignored: the served pair stays.
 */
export const watchServingFiles = (options: {
  readonly certFile: string
  readonly keyFile: string
  readonly initial: ServingCert
  readonly apply: (cert: ServingCert) => void
  readonly refused: (error: string) => void
  /** fs.watch itself failed (no inotify watches left, ...): the poll carries on alone. */
  readonly watchFailed: (error: string) => void
}): ServingCertWatch => {
  let served = digest(options.initial.pair)
  let lastRefused: string | undefined
  let closed = false
  const check = () => {
    if (closed) return
    let pair: ServingPair
    try {
      pair = readPair(options.certFile, options.keyFile)
    } catch (e) {
      const error = `cannot read the serving certificate: ${e instanceof Error ? e.message : String(e)}`
      if (lastRefused !== error) options.refused(error)
      lastRefused = error
      return
    }
    const d = digest(pair)
    if (d === served || d === lastRefused) return
    const checked = checkServingPair(pair)
    if ("error" in checked) {
      lastRefused = d
      options.refused(checked.error)
      return
    }
    served = d
    lastRefused = undefined
    options.apply(checked)
  }
  let settle: ReturnType<typeof setTimeout> | undefined
  const changed = () => {
    if (settle !== undefined) clearTimeout(settle)
    settle = setTimeout(() => {
      settle = undefined
      check()
    }, reloadSettleMs)
  }
  const watchers: FSWatcher[] = []
  for (const dir of new Set([dirname(options.certFile), dirname(options.keyFile)])) {
    try {
      const w = watch(dir, { persistent: false }, changed)
      w.on("error", (e) => options.watchFailed(e.message))
      watchers.push(w)
    } catch (e) {
      options.watchFailed(e instanceof Error ? e.message : String(e))
    }
  }
  const poll = setInterval(check, reloadPollMs)
  poll.unref()
  return {
    check,
    close: () => {
      closed = true
      clearInterval(poll)
      if (settle !== undefined) clearTimeout(settle)
      for (const w of watchers) w.close()
    },
  }
}
