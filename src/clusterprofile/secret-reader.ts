// The access provider `fleetcheck register --clusterprofile` sets up (KEP-5339's "secret reader"): an exec
// plugin the hub runs for a ClusterProfile whose access provider is `fleetcheck-secret-reader`. It reads
// the member's token from the Secret named in the provider's extension (`clusterName`, in the hub
// namespace, key `token`) and prints it as an ExecCredential.
//
// The extension is member data: whoever writes ClusterProfiles could name another member's Secret and
// point the server at a host of their own. So a Secret only ever feeds the server it was written for:
// `register` records that server on the Secret (fleetcheck.io/server) and the plugin refuses a profile whose
// server differs, or a Secret without the annotation.
import * as z from "zod"
import { profileServerAnnotation } from "../api/names.ts"

/** The Secret key holding the token (the secret reader convention). */
export const tokenKey = "token"

const dns1123Subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/
/** Printable ASCII without spaces: what an Authorization header carries unchanged. */
const tokenPattern = /^[\x21-\x7e]+$/

/** KUBERNETES_EXEC_INFO with provideClusterInfo: the fields the plugin reads. */
const ExecInfoSchema = z.object({
  apiVersion: z.enum(["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"]),
  kind: z.literal("ExecCredential"),
  spec: z.object({
    cluster: z.object({
      server: z.string().min(1).max(2048),
      config: z.object({
        clusterName: z.string().min(1).max(253).regex(dns1123Subdomain),
      }),
    }),
  }),
})

export type ExecInfo = z.output<typeof ExecInfoSchema>

export type Checked<A> =
  | { readonly ok: true; readonly value: A }
  | { readonly ok: false; readonly message: string }

/** The exec info the hub passed; failures name the rule, never the text. */
export const parseExecInfo = (text: string | undefined): Checked<ExecInfo> => {
  if (!text)
    return {
      ok: false,
      message: "KUBERNETES_EXEC_INFO is not set: the provider needs provideClusterInfo: true",
    }
  if (text.length > 1024 * 1024) return { ok: false, message: "KUBERNETES_EXEC_INFO is larger than 1 MiB" }
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    return { ok: false, message: "KUBERNETES_EXEC_INFO is not JSON" }
  }
  const parsed = ExecInfoSchema.safeParse(json)
  if (!parsed.success) {
    const where = parsed.error.issues
      .slice(0, 3)
      .map((i) => i.path.join(".") || "the document")
      .join(", ")
    return { ok: false, message: `KUBERNETES_EXEC_INFO lacks what the secret reader needs (${where})` }
  }
  return { ok: true, value: parsed.data }
}

const SecretSchema = z.object({
  metadata: z.object({
    name: z.string(),
    annotations: z.record(z.string(), z.string()).nullish(),
  }),
  data: z.record(z.string(), z.string()).nullish(),
})

/** The token of a Secret, only when the Secret was written for `server`. */
export const tokenFor = (secret: unknown, server: string): Checked<string> => {
  const parsed = SecretSchema.safeParse(secret)
  if (!parsed.success) return { ok: false, message: "the token Secret is not a Secret" }
  const s = parsed.data
  const recorded = s.metadata.annotations?.[profileServerAnnotation]
  if (recorded === undefined)
    return {
      ok: false,
      message: `Secret ${JSON.stringify(s.metadata.name)} has no ${profileServerAnnotation} annotation: it names no server its token may be sent to`,
    }
  if (recorded !== server)
    return {
      ok: false,
      message: `Secret ${JSON.stringify(s.metadata.name)} holds a token for another server than the profile's`,
    }
  const encoded = s.data?.[tokenKey]
  if (!encoded)
    return { ok: false, message: `Secret ${JSON.stringify(s.metadata.name)} has no data.${tokenKey}` }
  if (encoded.length > 96 * 1024) return { ok: false, message: `data.${tokenKey} is larger than 64 KiB` }
  const token = Buffer.from(encoded, "base64").toString("utf8").trim()
  if (!tokenPattern.test(token))
    return { ok: false, message: `data.${tokenKey} is not a bearer token (printable, no spaces)` }
  return { ok: true, value: token }
}

/**
 * The `exp` claim of a JWT (what TokenRequest returns), so the hub refreshes before expiry and its
 * CredentialsExpiringSoon condition sees the date; undefined for anything else.
 */
export const jwtExpiry = (token: string): Date | undefined => {
  const parts = token.split(".")
  const payload = parts.length === 3 ? parts[1] : undefined
  if (!payload || payload.length > 16 * 1024) return undefined
  try {
    const claims = JSON.parse(Buffer.from(payload, "base64url").toString("utf8")) as { exp?: unknown }
    const exp = claims?.exp
    return typeof exp === "number" && Number.isFinite(exp) && exp > 0 && exp < 1e11
      ? new Date(exp * 1000)
      : undefined
  } catch {
    return undefined
  }
}

/** What the plugin prints. */
export const execCredential = (apiVersion: string, token: string): string => {
  const expiry = jwtExpiry(token)
  return `${JSON.stringify({
    apiVersion,
    kind: "ExecCredential",
    status: {
      token,
      ...(expiry ? { expirationTimestamp: expiry.toISOString().replace(/\.\d{3}Z$/, "Z") } : {}),
    },
  })}\n`
}
