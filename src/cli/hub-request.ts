// How `fleetcheck status` and `fleetcheck report` reach the hub. A hub with --secure-serving speaks
// HTTPS, and they send it the user's bearer token, so the hub's certificate is verified: against
// --hub-ca-file, or the machine's trusted CAs, under the URL's host or --tls-server-name. Skipping that
// takes --insecure-skip-tls-verify, said out loud. A token never crosses the network in clear: over
// plain http:// it is sent to this machine only (kubectl port-forward); to any other host it is kept
// back, and a hub that then asks for one gets a message saying why.
import { X509Certificate } from "node:crypto"
import { readFileSync, statSync } from "node:fs"
import { request as httpRequest, type IncomingMessage } from "node:http"
import { Agent as HttpsAgent, request as httpsRequest } from "node:https"
import { isIP } from "node:net"

export const hubConnectionUsage = `  --hub-ca-file F  the CA (PEM) that signed the hub's serving certificate (default
                   $FLEETCHECK_HUB_CA_FILE; unset: the CAs this machine trusts)
  --tls-server-name NAME  the name to verify the hub's certificate for, when --hub's host is not
                   one of its names (e.g. fleetcheck-hub.fleetcheck-system.svc through a port-forward)
  --insecure-skip-tls-verify  do not verify the hub's certificate: the token goes to whoever answers
                   The token is sent over https://, or over plain http:// to this machine only.`

/** parseArgs options for the connection flags, shared by status and report. */
export const hubConnectionOptions = {
  "hub-ca-file": { type: "string" },
  "tls-server-name": { type: "string" },
  "insecure-skip-tls-verify": { type: "boolean", default: false },
} as const

/** A CA bundle is a few certificates; more than this is not one. */
export const maxCaFileBytes = 1024 * 1024
/** The most a hub answer may be: a whole unpaged fleet of 100,000 checks is about 45 MiB. */
export const maxAnswerBytes = 256 * 1024 * 1024

export interface HubConnection {
  readonly ca: string | undefined
  readonly servername: string | undefined
  readonly insecure: boolean
  /** Whether a bearer token may go to this URL: https, or plain http to this machine. */
  readonly sendsToken: boolean
  /**
   * This command's own connections: the pages of one run share them, and nothing is shared with
   * another run in the same process (a pooled connection or TLS session verified under other flags).
   */
  readonly agent: HttpsAgent | undefined
  /** Closes the kept-alive connections; call once the command is done. */
  readonly close: () => void
}

const loopbackHost = (hostname: string) => {
  const host = hostname.replace(/^\[|\]$/g, "")
  return (
    host === "localhost" ||
    (isIP(host) === 4 && host.startsWith("127.")) ||
    (isIP(host) === 6 && (host === "::1" || host === "0:0:0:0:0:0:0:1"))
  )
}

/** The connection the flags describe, or why they do not describe one. */
export const hubConnection = (
  url: URL,
  flags: {
    readonly "hub-ca-file"?: string | undefined
    readonly "tls-server-name"?: string | undefined
    readonly "insecure-skip-tls-verify"?: boolean | undefined
  },
): HubConnection | { readonly error: string } => {
  const https = url.protocol === "https:"
  if (!https && url.protocol !== "http:") return { error: `--hub must be an http:// or https:// URL` }
  const caFile = flags["hub-ca-file"] || undefined
  const insecure = flags["insecure-skip-tls-verify"] === true
  const servername = flags["tls-server-name"] || undefined
  if (caFile && insecure)
    return { error: "--hub-ca-file and --insecure-skip-tls-verify exclude each other: verify, or do not" }
  if (!https && (caFile || insecure || servername))
    return {
      error: `--hub ${url.origin} is plain http://: --hub-ca-file, --tls-server-name and --insecure-skip-tls-verify are for https://`,
    }
  let ca: string | undefined
  if (caFile) {
    try {
      const size = statSync(caFile).size
      if (size > maxCaFileBytes)
        return { error: `--hub-ca-file ${caFile} is ${size} bytes; at most ${maxCaFileBytes}` }
      ca = readFileSync(caFile, "utf8")
      new X509Certificate(ca)
    } catch (e) {
      return { error: `--hub-ca-file ${caFile}: ${e instanceof Error ? e.message : String(e)}` }
    }
  }
  const agent = https
    ? new HttpsAgent({
        keepAlive: true,
        minVersion: "TLSv1.2",
        ...(ca ? { ca } : {}),
        ...(servername ? { servername } : {}),
        rejectUnauthorized: !insecure,
      })
    : undefined
  return {
    ca,
    servername,
    insecure,
    sendsToken: https || loopbackHost(url.hostname),
    agent,
    close: () => agent?.destroy(),
  }
}

/** Why a token was not sent, for the message when the hub then asks for one. */
export const withheldReason = (url: URL) =>
  `it is not sent over plain http:// to ${url.host}, a host other than this machine: use https:// (a hub with --secure-serving serves it)`

/** The reason a TLS connection failed, in words that say what to do. */
const explain = (url: URL, connection: HubConnection, e: Error & { code?: string }): string => {
  const code = e.code ?? ""
  const untrusted = [
    "UNABLE_TO_VERIFY_LEAF_SIGNATURE",
    "DEPTH_ZERO_SELF_SIGNED_CERT",
    "SELF_SIGNED_CERT_IN_CHAIN",
    "UNABLE_TO_GET_ISSUER_CERT_LOCALLY",
    "UNABLE_TO_GET_ISSUER_CERT",
    "CERT_SIGNATURE_FAILURE",
  ]
  if (untrusted.includes(code))
    return `the hub's certificate is not signed by ${connection.ca ? "the CA in --hub-ca-file" : "a CA this machine trusts"} (${code}: ${e.message}); give the CA that issued it with --hub-ca-file`
  if (code === "ERR_TLS_CERT_ALTNAME_INVALID")
    return `the hub's certificate is not for ${connection.servername ?? url.hostname} (${e.message}); give one of its names with --tls-server-name`
  if (code === "CERT_HAS_EXPIRED" || code === "CERT_NOT_YET_VALID")
    return `the hub's certificate is not valid now (${code}: ${e.message})`
  if (url.protocol === "http:" && /ECONNRESET|socket hang up|Parse Error|HPE_/i.test(`${code} ${e.message}`))
    return `${e.message} (a hub with --secure-serving speaks https://)`
  if (url.protocol === "https:" && /wrong version number|EPROTO/i.test(`${code} ${e.message}`))
    return `${e.message} (the hub speaks plain http://: it runs without --secure-serving)`
  return e.message
}

export interface HubAnswer {
  readonly status: number
  readonly text: string
}

/** One GET to the hub, verified as the connection says; the answer, or why there is none. */
export const hubGet = (
  url: URL,
  connection: HubConnection,
  authorization: string | undefined,
  timeoutMs: number,
): Promise<HubAnswer | { readonly error: string }> =>
  new Promise((resolve) => {
    const headers = authorization && connection.sendsToken ? { authorization } : {}
    const onAnswer = (res: IncomingMessage) => {
      const chunks: Buffer[] = []
      let size = 0
      res.on("data", (c: Buffer) => {
        size += c.length
        if (size > maxAnswerBytes) {
          res.destroy()
          resolve({ error: `the answer is larger than ${maxAnswerBytes} bytes` })
          return
        }
        chunks.push(c)
      })
      res.on("end", () =>
        resolve({ status: res.statusCode ?? 0, text: Buffer.concat(chunks).toString("utf8") }),
      )
      res.on("error", (e) => resolve({ error: e.message }))
    }
    const req =
      url.protocol === "https:"
        ? httpsRequest(
            url,
            {
              headers,
              agent: connection.agent,
              minVersion: "TLSv1.2",
              ...(connection.ca ? { ca: connection.ca } : {}),
              ...(connection.servername ? { servername: connection.servername } : {}),
              rejectUnauthorized: !connection.insecure,
            },
            onAnswer,
          )
        : httpRequest(url, { headers, agent: false }, onAnswer)
    req.setTimeout(timeoutMs, () => req.destroy(new Error(`no answer within ${timeoutMs / 1000} s`)))
    req.once("error", (e) => resolve({ error: explain(url, connection, e) }))
    req.end()
  })
