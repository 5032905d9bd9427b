// `fleetcheck hub`: runs the hub. Every flag, its FLEETCHECK_* variable and its default come from the
// one configuration schema (src/hub/config.ts); everything is validated before anything starts, and a
// bad value exits with a message.

import { parseArgs } from "node:util"
import { ProviderFileError } from "../clusterprofile/provider-file.ts"
import { hubFlagNames, hubHelp, resolveHubConfig } from "../hub/config.ts"
import { launchHub } from "../hub/launch.ts"
import { ServingCertError } from "../hub/serving/serving-cert.ts"

export const hubUsage = `Usage: fleetcheck hub [flags]

Runs the hub: registration, one engine per member, MemberCluster status, the fleet API, the dashboard
and metrics. Each flag can also be set by its environment variable; flags win.

Flags:
${hubHelp()}
`

/** Parses `fleetcheck hub` flags (strings by flag name), falling back to the environment and defaults. */
export const parseHubFlags = (
  args: ReadonlyArray<string>,
  env: Readonly<Record<string, string | undefined>>,
) => {
  const { values } = parseArgs({
    args: [...args],
    options: Object.fromEntries(hubFlagNames().map((flag) => [flag, { type: "string" as const }])),
    strict: true,
    allowPositionals: false,
  })
  return resolveHubConfig(values as Record<string, string | undefined>, env)
}

export const runHubCommand = async (args: ReadonlyArray<string>): Promise<number> => {
  if (args.includes("--help") || args.includes("-h")) {
    process.stdout.write(hubUsage)
    return 0
  }
  const config = (() => {
    try {
      return parseHubFlags(args, process.env)
    } catch (e) {
      // node:util parseArgs (unknown flag) and the schema (bad value) both end here: a usage error.
      return e instanceof Error ? e : new Error(String(e))
    }
  })()
  if (config instanceof Error) {
    process.stderr.write(`fleetcheck hub: ${config.message}\n(fleetcheck hub --help lists every setting)\n`)
    return 2
  }
  let hub: Awaited<ReturnType<typeof launchHub>>
  try {
    hub = await launchHub({ config, processMetrics: true, returnMemory: true })
  } catch (e) {
    // A file the hub reads at startup (--clusterprofile-provider-file, the serving certificate) that
    // does not do is a usage error too.
    if (e instanceof ProviderFileError || e instanceof ServingCertError) {
      process.stderr.write(`fleetcheck hub: ${e.message}\n`)
      return 2
    }
    throw e
  }
  await new Promise<void>((resolve) => {
    const stop = (signal: string) => {
      process.stderr.write(
        `fleetcheck hub: ${signal}; draining in-flight reconciles and releasing the lease\n`,
      )
      hub.stop().then(resolve)
    }
    process.once("SIGTERM", () => stop("SIGTERM"))
    process.once("SIGINT", () => stop("SIGINT"))
  })
  return 0
}
