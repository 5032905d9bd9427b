// `fleetcheck credential secret-reader [--namespace NS] [--kubeconfig FILE]`: the exec plugin behind the
// `fleetcheck-secret-reader` access provider (src/clusterprofile/secret-reader.ts). The hub runs it with
// KUBERNETES_EXEC_INFO; it reads the token Secret from the hub cluster with the hub's own credentials
// (in-cluster, or KUBECONFIG / --kubeconfig) and prints an ExecCredential. Errors go to stderr, which the
// hub never shows; the exit code says it failed.
import { parseArgs } from "node:util"
import { Effect } from "effect"
import { defaultHubNamespace } from "../api/names.ts"
import { execCredential, parseExecInfo, tokenFor } from "../clusterprofile/secret-reader.ts"
import { makeKubeClient } from "../kube/client.ts"
import { pathOf, secrets } from "../kube/resources.ts"
import { CommandError, loadKubeConfigFile, runCommand } from "./register/cluster.ts"
import { credentialUsage } from "./usage.ts"

const fail = (message: string) => Effect.fail(new CommandError({ message }))

const secretReader = (namespace: string, kubeconfig: string | undefined) =>
  Effect.gen(function* () {
    const info = parseExecInfo(process.env.KUBERNETES_EXEC_INFO)
    if (!info.ok) return yield* fail(info.message)
    const { server, config } = info.value.spec.cluster
    const kubeConfig = yield* loadKubeConfigFile(kubeconfig)
    const hub = yield* makeKubeClient({ cluster: "hub", kubeConfig })
    // LIST by name: the hub's Role has list, watch and patch on Secrets in its namespace, not get.
    const list = yield* hub.request<{ items?: ReadonlyArray<unknown> }>({
      method: "GET",
      path: pathOf(secrets, { namespace }),
      query: { fieldSelector: `metadata.name=${config.clusterName}` },
    })
    const secret = list.items?.[0]
    if (secret === undefined)
      return yield* fail(`no Secret ${namespace}/${config.clusterName} holds this profile's token`)
    const token = tokenFor(secret, server)
    if (!token.ok) return yield* fail(token.message)
    yield* Effect.sync(() => process.stdout.write(execCredential(info.value.apiVersion, token.value)))
    return 0
  })

const parse = (argv: ReadonlyArray<string>) =>
  parseArgs({
    args: [...argv],
    allowPositionals: true,
    options: {
      namespace: { type: "string" },
      kubeconfig: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  })

export const runCredential = async (argv: ReadonlyArray<string>): Promise<number> => {
  let parsed: ReturnType<typeof parse>
  try {
    parsed = parse(argv)
  } catch (e) {
    process.stderr.write(`fleetcheck credential: ${e instanceof Error ? e.message : String(e)}\n`)
    return 2
  }
  const [plugin, ...rest] = parsed.positionals
  if (parsed.values.help || plugin !== "secret-reader" || rest.length > 0) {
    ;(parsed.values.help ? process.stdout : process.stderr).write(`Usage:\n${credentialUsage}`)
    return parsed.values.help ? 0 : 2
  }
  return runCommand(secretReader(parsed.values.namespace ?? defaultHubNamespace, parsed.values.kubeconfig))
}
