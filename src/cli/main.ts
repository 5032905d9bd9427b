// fleetcheck's command line. Each command lives in its own module; this file only dispatches.
import { runDev } from "./dev.ts"
import { runHubCommand } from "./hub.ts"
import { registerUsage } from "./register/args.ts"
import { runRegister } from "./register/register.ts"
import { runUnregister } from "./register/unregister.ts"
import { runReport } from "./report.ts"
import { runStatus } from "./status.ts"

const usage = `fleetcheck: proves that backups restore, across every cluster you run

Usage:
  fleetcheck hub [flags]         run the hub (in-cluster config or KUBECONFIG)
${registerUsage}  fleetcheck status [--hub URL] [--cluster NAME] [--failing] [-o json]
                                 the fleet at a glance; exits 1 when anything is failing or unknown
  fleetcheck report --since 30d [--hub URL] [--cluster NAME] [--format md|csv|json]
                                 audit evidence: every check's runs in the period, pass rate, restore
                                 times against the objective, last success, staleness and gaps
  fleetcheck dev [--members N]   start a real local fleet (hub + members) and keep it running; Ctrl-C stops it
  fleetcheck help                this text

Every command answers --help; \`fleetcheck hub --help\` lists every hub setting with its
environment variable and default.
`

const main = async (argv: ReadonlyArray<string>): Promise<number> => {
  const [command, ...rest] = argv
  switch (command) {
    case "dev":
      return runDev(rest)
    case "hub":
      return runHubCommand(rest)
    case "status":
      return runStatus(rest)
    case "report":
      return runReport(rest)
    case "register":
      return runRegister(rest)
    case "unregister":
      return runUnregister(rest)
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
