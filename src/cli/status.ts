// `fleetcheck status`: the fleet at a glance in the terminal, read from the hub's /api/v1/fleet.
// Exit codes for scripts: 0 every check verified and every cluster healthy, 1 something is failing or
// unknown, 3 the hub could not be reached or answered nonsense.
import { parseArgs } from "node:util"
import { type FleetView, FleetViewSchema, isFleetHealthy } from "../api/fleet.ts"

export const statusUsage = `Usage: fleetcheck status [--hub URL] [--cluster NAME] [--failing] [-o table|json]

The fleet at a glance, read from the hub's /api/v1/fleet.
  --hub URL        the hub (default $FLEETCHECK_HUB_URL, else http://127.0.0.1:8080)
  --cluster NAME   one member only
  --failing        only checks that are not verified, and clusters that are not healthy
  -o, --output     table (default) or json

Exit codes: 0 every check verified and every cluster healthy; 1 something failing or unknown;
3 the hub could not answer truthfully (unreachable, a standby, still syncing, or nonsense).
`

/**
 * Member-controlled text (names, messages, versions) is shown in an operator's terminal: C0 and C1
 * controls, DEL and bidirectional overrides are replaced, so no escape sequence reaches the terminal.
 */
export const terminalSafe = (s: string): string =>
  s.replace(/[\u0000-\u001f\u007f-\u009f\u200e\u200f\u202a-\u202e\u2066-\u2069]/g, "\ufffd")

const table = (unsafeRows: string[][]): string => {
  const rows = unsafeRows.map((r) => r.map(terminalSafe))
  const widths = rows[0]?.map((_, i) => Math.max(...rows.map((r) => (r[i] ?? "").length))) ?? []
  return rows
    .map((r) =>
      r
        .map((cell, i) => cell.padEnd(widths[i] ?? 0))
        .join("  ")
        .trimEnd(),
    )
    .join("\n")
}

const clip = (s: string, n: number) => (s.length > n ? `${s.slice(0, n - 1)}…` : s)

export const renderStatus = (view: FleetView): string => {
  const cond = (c: (typeof view.clusters)[number], type: string) =>
    c.conditions.find((x) => x.type === type)?.status ?? "Unknown"
  const clusters = table([
    ["CLUSTER", "READY", "CONNECTED", "CREDENTIALS", "VERIFIED", "FAILED", "UNKNOWN", "VERSION"],
    ...view.clusters.map((c) => [
      c.name,
      cond(c, "Ready"),
      cond(c, "Connected"),
      cond(c, "CredentialsValid"),
      `${c.counts.verified}/${c.counts.total}`,
      String(c.counts.failed),
      String(c.counts.unknown),
      c.kubernetesVersion ?? "",
    ]),
  ])
  const checks = table([
    ["CLUSTER", "NAMESPACE", "CHECK", "VERIFIED", "REASON", "LAST SUCCESS", "MESSAGE"],
    ...view.checks.map((c) => [
      c.cluster,
      c.namespace,
      c.name,
      c.status,
      c.reason,
      c.lastSuccessfulTime ?? "never",
      clip(c.message.replace(/\s+/g, " "), 60),
    ]),
  ])
  return `${clusters}\n\n${view.checks.length ? checks : "no BackupChecks"}\n`
}

export const runStatus = async (args: ReadonlyArray<string>): Promise<number> => {
  if (args.includes("--help") || args.includes("-h")) {
    process.stdout.write(statusUsage)
    return 0
  }
  const { values } = parseArgs({
    args: [...args],
    options: {
      hub: { type: "string", default: process.env.FLEETCHECK_HUB_URL ?? "http://127.0.0.1:8080" },
      cluster: { type: "string" },
      failing: { type: "boolean", default: false },
      output: { type: "string", short: "o", default: "table" },
    },
    strict: true,
  })
  const url = new URL("/api/v1/fleet", values.hub)
  if (values.cluster) url.searchParams.set("cluster", values.cluster)
  if (values.failing) url.searchParams.set("failing", "true")
  if (values.output !== "table" && values.output !== "json") {
    process.stderr.write(`fleetcheck status: -o must be table or json\n\n${statusUsage}`)
    return 2
  }
  const cannotRead = (why: string) => {
    process.stderr.write(`fleetcheck status: cannot read ${url.href}: ${terminalSafe(why)}\n`)
    return 3
  }
  const answer = await fetch(url, { signal: AbortSignal.timeout(10_000) }).then(
    async (res) => ({ status: res.status, ok: res.ok, text: await res.text() }),
    (e: unknown) => (e instanceof Error ? e.message : String(e)),
  )
  if (typeof answer === "string") return cannotRead(answer)
  const json = (() => {
    try {
      return { value: JSON.parse(answer.text) as unknown }
    } catch {
      return undefined
    }
  })()
  if (!answer.ok) {
    // A standby or syncing hub answers 503 and says why (and who leads): that is not "all good".
    const why = (json?.value as { message?: unknown } | undefined)?.message
    return cannotRead(`HTTP ${answer.status}${typeof why === "string" ? `: ${why}` : ""}`)
  }
  if (json === undefined) return cannotRead("the answer is not JSON")
  const body = json.value
  const parsed = FleetViewSchema.safeParse(body)
  if (!parsed.success) {
    process.stderr.write(
      `fleetcheck status: unexpected answer from ${url.href}: ${parsed.error.issues[0]?.message}\n`,
    )
    return 3
  }
  process.stdout.write(
    values.output === "json" ? `${JSON.stringify(body, null, 2)}\n` : renderStatus(parsed.data),
  )
  if (parsed.data.leader === false) {
    process.stderr.write(
      `fleetcheck status: ${url.origin} is not the leading hub; its view is not the fleet's\n`,
    )
    return 3
  }
  return isFleetHealthy(parsed.data) ? 0 : 1
}
