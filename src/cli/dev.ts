// `fleetcheck dev`: a real local fleet (one hub cluster and N members on one etcd) that stays up until
// Ctrl-C, then stops every process and removes its temporary directory.
import { parseArgs } from "node:util"
import { startFleet } from "../../clusters/local-fleet/index.ts"

export const runDev = async (args: ReadonlyArray<string>): Promise<number> => {
  const { values } = parseArgs({
    args: [...args],
    options: { members: { type: "string", default: "2" } },
    strict: true,
  })
  const members = Number(values.members)
  if (!Number.isInteger(members) || members < 1 || members > 20) {
    throw new Error(`--members must be an integer from 1 to 20, got ${JSON.stringify(values.members)}`)
  }
  const names = ["hub", ...Array.from({ length: members }, (_, i) => `member-${i + 1}`)]
  const fleet = await startFleet({
    clusters: names.map((name) => (name === "hub" ? { name, workloads: false } : { name })),
  })
  let stopping = false
  const stop = async (signal: string) => {
    if (stopping) return
    stopping = true
    process.stderr.write(`\n[dev] ${signal}: stopping the fleet\n`)
    await fleet.stop()
    process.stderr.write("[dev] stopped; nothing left behind\n")
    process.exit(0)
  }
  process.on("SIGINT", () => void stop("SIGINT"))
  process.on("SIGTERM", () => void stop("SIGTERM"))

  const lines = fleet.clusters.map(
    (c) => `  ${c.name.padEnd(10)} ${c.server}   KUBECONFIG=${c.kubeconfigPath}`,
  )
  process.stdout.write(
    [
      "",
      "fleetcheck dev: local fleet is up",
      ...lines,
      "",
      `Try: ${fleet.binDir}/kubectl --kubeconfig=${fleet.cluster("member-1").kubeconfigPath} get nodes`,
      "Ctrl-C stops everything.",
      "",
    ].join("\n"),
  )
  await new Promise(() => {})
  return 0
}
