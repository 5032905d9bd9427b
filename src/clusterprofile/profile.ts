// A ClusterProfile (multicluster.x-k8s.io, KEP-4322) as a registration: the connection comes from the
// profile's access provider (server, CA, TLS server name), the credential from the exec plugin the hub
// operator's provider file maps that provider's name to. v1alpha2 carries `status.accessProviders`;
// v1alpha1 the same list, or the older `status.credentialProviders` of the same shape.
//
// The result is what the kubeconfig policy says about a kubeconfig built from exactly those fields, so
// a profile gets every rule a Secret gets (https only, CA parsed, no proxy, no file paths unless
// allowed, insecure-skip-tls-verify only when allowed), plus its own: a CA is required (a profile is
// written by a cluster manager, not by someone pasting a kubeconfig: no system roots), and the provider
// must be one the file names. The plugin runs later, in the member's client (src/kube/client.ts).
import * as z from "zod"
import { namespacesAnnotation } from "../api/names.ts"
import { checkKubeconfig, type KubeconfigAccepted, type KubeconfigPolicy } from "../kubeconfig/policy.ts"
import type { AccessProviders } from "./provider-file.ts"

export const clusterProfileGroup = "multicluster.x-k8s.io"
/** Read first; v1alpha1 when only it is served. */
export const clusterProfileVersions = ["v1alpha2", "v1alpha1"] as const
export type ClusterProfileVersion = (typeof clusterProfileVersions)[number]
export const clusterProfilePlural = "clusterprofiles"
/** The extension whose content an exec plugin gets as ExecCredential spec.cluster.config. */
export const execExtensionName = "client.authentication.k8s.io/exec"

/** Refusal reasons of a ClusterProfile, besides the kubeconfig policy's. */
export const clusterProfileRefusalReasons = {
  /** No access provider of the profile is named in the hub's provider file. */
  AccessProviderUnknown: "AccessProviderUnknown",
  /** The chosen access provider's cluster has no certificate-authority-data. */
  CertificateAuthorityMissing: "CertificateAuthorityMissing",
  /** The profile does not have the shape of a ClusterProfile. */
  ClusterProfileInvalid: "ClusterProfileInvalid",
} as const

const ClusterSchema = z.object({
  server: z.string().min(1).max(2048),
  "tls-server-name": z.string().max(253).nullish(),
  "insecure-skip-tls-verify": z.boolean().nullish(),
  "certificate-authority-data": z
    .string()
    .max(1024 * 1024)
    .nullish(),
  "certificate-authority": z.string().max(4096).nullish(),
  "proxy-url": z.string().max(2048).nullish(),
  "disable-compression": z.boolean().nullish(),
  extensions: z
    .array(z.object({ name: z.string().min(1).max(253), extension: z.unknown() }))
    .max(64)
    .nullish(),
})

const AccessProviderSchema = z.object({ name: z.string().min(1).max(253), cluster: ClusterSchema })

/** The fields of a ClusterProfile (either version) the hub reads; others are ignored. */
export const ClusterProfileSchema = z.object({
  apiVersion: z.string(),
  kind: z.literal("ClusterProfile"),
  metadata: z.object({
    name: z.string(),
    namespace: z.string().optional(),
    annotations: z.record(z.string(), z.string()).nullish(),
  }),
  spec: z.object({ clusterManager: z.object({ name: z.string() }) }).optional(),
  status: z
    .object({
      accessProviders: z.array(AccessProviderSchema).max(64).nullish(),
      credentialProviders: z.array(AccessProviderSchema).max(64).nullish(),
    })
    .nullish(),
})

export type ClusterProfileConnection =
  | (KubeconfigAccepted & { readonly provider: string; readonly execClusterConfig: unknown })
  | { readonly ok: false; readonly reason: string; readonly message: string }

const q = (s: string) => JSON.stringify(s.length > 63 ? `${s.slice(0, 60)}...` : s)

/**
 * The connection a profile asks for, checked. Providers are tried in the provider file's order (the
 * hub operator's preference), as the upstream access library does.
 */
export const checkClusterProfile = (input: {
  readonly profile: unknown
  readonly providers: AccessProviders
  readonly policy: KubeconfigPolicy
  readonly now: Date
}): ClusterProfileConnection => {
  const R = clusterProfileRefusalReasons
  const name = (input.profile as { metadata?: { name?: unknown } } | null)?.metadata?.name
  const subject = `ClusterProfile ${q(typeof name === "string" ? name : "")}`
  const parsed = ClusterProfileSchema.safeParse(input.profile)
  if (!parsed.success) {
    const where = parsed.error.issues
      .slice(0, 3)
      .map((i) => i.path.join(".") || "the document")
      .join(", ")
    return {
      ok: false,
      reason: R.ClusterProfileInvalid,
      message: `${subject}: not a valid ClusterProfile (${where})`,
    }
  }
  const profile = parsed.data
  const offered = [...(profile.status?.accessProviders ?? []), ...(profile.status?.credentialProviders ?? [])]
  let chosen: z.output<typeof AccessProviderSchema> | undefined
  for (const providerName of input.providers.keys()) {
    chosen = offered.find((p) => p.name === providerName)
    if (chosen) break
  }
  if (!chosen) {
    const names = offered
      .slice(0, 5)
      .map((p) => q(p.name))
      .join(", ")
    return {
      ok: false,
      reason: R.AccessProviderUnknown,
      message:
        offered.length === 0
          ? `${subject}: status.accessProviders is empty; the cluster manager has not published how to reach the cluster`
          : `${subject}: none of its access providers (${names}${offered.length > 5 ? ", ..." : ""}) is named in the hub's provider file`,
    }
  }
  const cluster = chosen.cluster
  if (!cluster["certificate-authority-data"]) {
    return {
      ok: false,
      reason: R.CertificateAuthorityMissing,
      message: `${subject}: access provider ${q(chosen.name)} gives no certificate-authority-data; the hub does not trust the system roots for a ClusterProfile`,
    }
  }
  const plugin = input.providers.get(chosen.name)!
  const kubeconfig = {
    apiVersion: "v1",
    kind: "Config",
    clusters: [
      {
        name: "profile",
        cluster: {
          server: cluster.server,
          "certificate-authority-data": cluster["certificate-authority-data"],
          "certificate-authority": cluster["certificate-authority"],
          "tls-server-name": cluster["tls-server-name"],
          "insecure-skip-tls-verify": cluster["insecure-skip-tls-verify"],
          "proxy-url": cluster["proxy-url"],
        },
      },
    ],
    users: [
      {
        name: chosen.name,
        user: {
          exec: {
            apiVersion: plugin.apiVersion,
            command: plugin.command,
            args: [...(plugin.args ?? [])],
            env: [...(plugin.env ?? [])],
          },
        },
      },
    ],
    contexts: [{ name: "profile", context: { cluster: "profile", user: chosen.name } }],
  }
  const annotations = profile.metadata.annotations ?? {}
  const checked = checkKubeconfig({
    secretName: profile.metadata.name,
    kind: "ClusterProfile",
    data: { kubeconfig: Buffer.from(JSON.stringify(kubeconfig)).toString("base64") },
    annotations:
      annotations[namespacesAnnotation] !== undefined
        ? { [namespacesAnnotation]: annotations[namespacesAnnotation] }
        : {},
    // The provider file, not the profile, names the command: that door is the hub operator's.
    policy: { ...input.policy, allowExec: true },
    now: input.now,
  })
  if (!checked.ok) return checked
  // provideClusterInfo travels with the exec config (src/kube/client.ts reads it there).
  const user = checked.kubeConfig.getCurrentUser()
  if (user?.exec && plugin.provideClusterInfo)
    (user.exec as { provideClusterInfo?: boolean }).provideClusterInfo = true
  const extension = (cluster.extensions ?? []).find((e) => e.name === execExtensionName)?.extension
  return { ...checked, provider: chosen.name, execClusterConfig: extension }
}

const PropertiesSchema = z
  .array(z.object({ name: z.string().min(1).max(253), value: z.string().max(1024) }))
  .max(4_096)

/**
 * A profile's `status.properties` (name/value, KEP-4322), the first maxProperties of them, sorted by
 * name; entries that are not a name and a bounded string value are left out (a profile is input).
 */
export const clusterProfileProperties = (
  profile: unknown,
  maxProperties: number,
): ReadonlyArray<{ readonly name: string; readonly value: string }> => {
  const raw = (profile as { status?: { properties?: unknown } } | null)?.status?.properties
  if (!Array.isArray(raw)) return []
  const kept = raw.filter((p) => PropertiesSchema.element.safeParse(p).success) as Array<{
    name: string
    value: string
  }>
  const byName = new Map(kept.map((p) => [p.name, p.value]))
  return [...byName]
    .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))
    .slice(0, maxProperties)
    .map(([name, value]) => ({ name, value }))
}
