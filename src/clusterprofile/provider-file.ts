// The hub operator's access-provider file (KEP-5339, `--clusterprofile-provider-file`): which provider
// names this hub accepts in a ClusterProfile's access providers, and the exec plugin that produces a
// credential for each. It is the only place a command comes from when a member registers through a
// ClusterProfile: member data names a provider, never a command, arguments or environment.
//
//   {"providers": [{"name": "token-minter", "execConfig": {"apiVersion": "client.authentication.k8s.io/v1",
//     "command": "/opt/plugins/mint", "args": ["--audience", "hub"], "env": [{"name": "X", "value": "y"}],
//     "provideClusterInfo": true}}]}
//
// KEP-5339's profileSourcedCLIArgsPolicy / profileSourcedEnvVarsPolicy (a profile adding arguments or
// environment) are refused unless "Ignore": member data choosing a plugin's arguments is what this file
// exists to prevent.
import { readFileSync, statSync } from "node:fs"
import { Data } from "effect"
import * as z from "zod"
import type { ExecPlugin } from "../kube/exec-credential.ts"

/** A provider file is a handful of entries; more than this is not one. */
export const maxProviderFileBytes = 256 * 1024

const ExecConfigSchema = z.strictObject({
  apiVersion: z
    .enum(["client.authentication.k8s.io/v1", "client.authentication.k8s.io/v1beta1"])
    .default("client.authentication.k8s.io/v1"),
  command: z.string().min(1).max(4096),
  args: z.array(z.string().max(4096)).max(64).nullish(),
  env: z
    .array(z.strictObject({ name: z.string().min(1).max(256), value: z.string().max(4096) }))
    .max(64)
    .nullish(),
  provideClusterInfo: z.boolean().nullish(),
  // Accepted for compatibility with client-go's ExecConfig; the hub never runs a plugin interactively.
  interactiveMode: z.enum(["Never", "IfAvailable", "Always"]).nullish(),
  installHint: z.string().max(4096).nullish(),
})

const ProviderSchema = z.strictObject({
  name: z.string().min(1).max(253),
  execConfig: ExecConfigSchema,
  profileSourcedCLIArgsPolicy: z.enum(["Ignore"]).optional(),
  profileSourcedEnvVarsPolicy: z.enum(["Ignore"]).optional(),
})

const ProviderFileSchema = z.strictObject({
  providers: z.array(ProviderSchema).min(1).max(64),
})

export interface AccessProviderPlugin extends ExecPlugin {
  readonly provideClusterInfo: boolean
}

/** Provider name → plugin, in the file's order (the first one a profile offers wins). */
export type AccessProviders = ReadonlyMap<string, AccessProviderPlugin>

export type ProviderFileResult =
  | { readonly ok: true; readonly providers: AccessProviders }
  | { readonly ok: false; readonly message: string }

/** Parses the file's text; the message names fields and rules, never values. */
export const parseProviderFile = (text: string): ProviderFileResult => {
  if (Buffer.byteLength(text) > maxProviderFileBytes)
    return { ok: false, message: `the provider file is larger than ${maxProviderFileBytes} bytes` }
  let json: unknown
  try {
    json = JSON.parse(text)
  } catch {
    return { ok: false, message: "the provider file is not JSON" }
  }
  const parsed = ProviderFileSchema.safeParse(json)
  if (!parsed.success) {
    const where = parsed.error.issues
      .slice(0, 3)
      .map((i) => `${i.path.join(".") || "the document"}: ${i.code}`)
      .join("; ")
    return { ok: false, message: `the provider file is not valid (${where})` }
  }
  const providers = new Map<string, AccessProviderPlugin>()
  for (const p of parsed.data.providers) {
    if (providers.has(p.name))
      return { ok: false, message: `the provider file names provider ${JSON.stringify(p.name)} twice` }
    const e = p.execConfig
    providers.set(p.name, {
      command: e.command,
      args: e.args ?? [],
      env: e.env ?? [],
      apiVersion: e.apiVersion,
      provideClusterInfo: e.provideClusterInfo === true,
    })
  }
  return { ok: true, providers }
}

export class ProviderFileError extends Data.TaggedError("ProviderFileError")<{ readonly message: string }> {}

/** Reads and parses the file at startup; a hub with a broken provider file does not start. */
export const readProviderFile = (path: string): AccessProviders => {
  let text: string
  try {
    if (statSync(path).size > maxProviderFileBytes)
      throw new ProviderFileError({
        message: `--clusterprofile-provider-file ${path}: larger than ${maxProviderFileBytes} bytes`,
      })
    text = readFileSync(path, "utf8")
  } catch (e) {
    if (e instanceof ProviderFileError) throw e
    const code = (e as NodeJS.ErrnoException).code ?? "unreadable"
    throw new ProviderFileError({
      message: `--clusterprofile-provider-file ${path}: cannot be read (${code})`,
    })
  }
  const parsed = parseProviderFile(text)
  if (!parsed.ok)
    throw new ProviderFileError({ message: `--clusterprofile-provider-file ${path}: ${parsed.message}` })
  return parsed.providers
}
