// fleetcheck's command line. Each command lives in its own module, loaded only when it runs: the hub
// runs `fleetcheck credential` as an exec plugin, and it should not load the hub to print a token.
import { credentialUsage, registerUsage } from "./usage.ts"

const usage = `fleetcheck: proves that backups restore, across every cluster you run

Usage:
  fleetcheck hub [flags]         run the hub (in-cluster config or KUBECONFIG)
${registerUsage}  fleetcheck status [--hub URL] [--cluster NAME] [--failing] [-o json]
                                 the fleet at a glance; exits 1 when anything is failing or unknown
  fleetcheck report --since 30d [--hub URL] [--cluster NAME] [--format md|csv|json]
                                 audit evidence: every check's runs in the period, pass rate, restore
                                 times against the objective, last success, staleness and gaps
${credentialUsage}  fleetcheck dev [--members N] [--hub-replicas N]
                                 start a real local fleet (hub + members) and keep it running; Ctrl-C
                                 stops it (--hub-replicas: that many hub replicas sharding the members)
  fleetcheck agent restore <restic|postgres|etcd>
                                 the restore agent the hub's Jobs run for spec.restore
  fleetcheck help                this text

Every command answers --help; \`fleetcheck hub --help\` lists every hub setting with its
environment variable and default.
`

const main = async (argv: ReadonlyArray<string>): Promise<number> => {
  const [command, ...rest] = argv
  switch (command) {
    case "dev":
      return (await import("./dev.ts")).runDev(rest)
    case "hub":
      return (await import("./hub.ts")).runHubCommand(rest)
    case "status":
      return (await import("./status.ts")).runStatus(rest)
    case "report":
      return (await import("./report.ts")).runReport(rest)
    case "register":
      return (await import("./register/register.ts")).runRegister(rest)
    case "unregister":
      return (await import("./register/unregister.ts")).runUnregister(rest)
    case "credential":
      return (await import("./credential.ts")).runCredential(rest)
    case "agent":
      return (await import("../agent/main.ts")).runAgent(rest)
    case undefined:
    case "help":
    case "--help":
    case "-h":
      process.stdout.write(usage)
      return 0
    default:
      process.stderr.write(`fleetcheck: unknown command ${JSON.stringify(command)}\n\n${usage}`)
      return 2
  }
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code
    // The hub has shut down cleanly by now; a stray keep-alive handle must not keep the pod alive.
    if (process.argv[2] === "hub") process.exit(code)
  },
  (error: unknown) => {
    process.stderr.write(`fleetcheck: ${error instanceof Error ? error.message : String(error)}\n`)
    process.exitCode = 1
  },
)
