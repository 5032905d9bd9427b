// `fleetcheck status`: the fleet at a glance in the terminal, read from the hub's /api/v1/fleet.
// Exit codes for scripts: 0 every check verified and every cluster healthy, 1 something is failing or
// unknown, 3 the hub could not be reached or answered nonsense.
import { parseArgs } from "node:util"
import { type FleetView, FleetViewSchema, isFleetHealthy } from "../api/fleet.ts"

export const statusUsage = `Usage: fleetcheck status [--hub URL] [--cluster NAME] [--failing] [--limit N] [-o table|json]

The fleet at a glance, read from the hub's /api/v1/fleet, page after page.
  --hub URL        the hub (default $FLEETCHECK_HUB_URL, else http://127.0.0.1:8080)
  --cluster NAME   one member only
  --failing        only checks that are not verified, and clusters that are not healthy
  --limit N        clusters and checks per request (default 500); every page is read
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
  // Objectives (spec.objectives) get a column once any check has them: "restore-time=True data-age=False".
  const withObjectives = view.checks.some((c) => c.objectives !== undefined)
  const objectives = (c: (typeof view.checks)[number]) =>
    [
      c.objectives?.restoreTime !== undefined ? `restore-time=${c.objectives.restoreTime}` : "",
      c.objectives?.dataAge !== undefined ? `data-age=${c.objectives.dataAge}` : "",
    ]
      .filter(Boolean)
      .join(" ")
  const checks = table([
    [
      "CLUSTER",
      "NAMESPACE",
      "CHECK",
      "VERIFIED",
      "REASON",
      "LAST SUCCESS",
      ...(withObjectives ? ["OBJECTIVES"] : []),
      "MESSAGE",
    ],
    ...view.checks.map((c) => [
      c.cluster,
      c.namespace,
      c.name,
      c.status,
      c.reason,
      c.lastSuccessfulTime ?? "never",
      ...(withObjectives ? [objectives(c)] : []),
      clip(c.message.replace(/\s+/g, " "), 60),
    ]),
  ])
  const missed = view.summary?.checks.objectivesMissed
  const footer = missed ? `\n${missed} check${missed === 1 ? "" : "s"} missed an objective\n` : ""
  const fleetChecks = view.fleetChecks ?? []
  // Each FleetBackupCheck with its selected clusters' verdicts: the placed checks, grouped.
  const fleet = table([
    ["FLEET CHECK", "FLEET VERIFIED", "REASON", "VERIFIED", "CLUSTERS"],
    ...fleetChecks.map((f) => [
      `${f.namespace}/${f.name}`,
      f.verified.status,
      f.verified.reason,
      `${f.counts.verified}/${f.counts.selected}`,
      clip(
        f.clusters.map((c) => `${c.name}=${c.status}${c.status === "True" ? "" : `(${c.reason})`}`).join(" "),
        120,
      ),
    ]),
  ])
  return `${clusters}\n\n${fleetChecks.length ? `${fleet}\n\n` : ""}${view.checks.length ? checks : "no BackupChecks"}\n${footer}`
}

/** One answer of the hub, or why it is not one. */
type Answer = { readonly view: FleetView; readonly raw: Record<string, unknown> } | { readonly error: string }

const readPage = async (url: URL): Promise<Answer> => {
  const answer = await fetch(url, { signal: AbortSignal.timeout(10_000) }).then(
    async (res) => ({ status: res.status, ok: res.ok, text: await res.text() }),
    (e: unknown) => (e instanceof Error ? e.message : String(e)),
  )
  if (typeof answer === "string") return { error: answer }
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
    return { error: `HTTP ${answer.status}${typeof why === "string" ? `: ${why}` : ""}` }
  }
  if (json === undefined) return { error: "the answer is not JSON" }
  const parsed = FleetViewSchema.safeParse(json.value)
  if (!parsed.success) return { error: `unexpected answer: ${parsed.error.issues[0]?.message}` }
  return { view: parsed.data, raw: json.value as Record<string, unknown> }
}

/** The most pages one status reads (a hub that keeps answering `continue` is broken). */
const maxPages = 100_000

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
      limit: { type: "string", default: "500" },
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
  if (!/^[0-9]{1,5}$/.test(values.limit) || Number(values.limit) < 1 || Number(values.limit) > 10_000) {
    process.stderr.write(
      `fleetcheck status: --limit must be a whole number from 1 to 10000\n\n${statusUsage}`,
    )
    return 2
  }
  url.searchParams.set("limit", values.limit)
  const cannotRead = (why: string) => {
    process.stderr.write(`fleetcheck status: cannot read ${url.href}: ${terminalSafe(why)}\n`)
    return 3
  }
  // Every page, concatenated: the first page's totals and header, every page's clusters and checks.
  const first = await readPage(url)
  if ("error" in first) return cannotRead(first.error)
  const clusters = [...first.view.clusters]
  const checks = [...first.view.checks]
  const tokens = new Set<string>()
  let token = first.view.metadata?.continue
  while (token) {
    if (tokens.has(token) || tokens.size >= maxPages)
      return cannotRead("the hub keeps answering with more pages")
    tokens.add(token)
    const next = new URL(url)
    next.searchParams.set("continue", token)
    const page = await readPage(next)
    if ("error" in page) return cannotRead(`page ${tokens.size + 1}: ${page.error}`)
    clusters.push(...page.view.clusters)
    checks.push(...page.view.checks)
    token = page.view.metadata?.continue
  }
  const { metadata: _metadata, ...view } = { ...first.view, clusters, checks }
  const raw: Record<string, unknown> = { ...first.raw, clusters, checks }
  delete raw.metadata
  process.stdout.write(values.output === "json" ? `${JSON.stringify(raw, null, 2)}\n` : renderStatus(view))
  if (view.leader === false) {
    process.stderr.write(
      `fleetcheck status: ${url.origin} is not the leading hub; its view is not the fleet's\n`,
    )
    return 3
  }
  return isFleetHealthy(view) ? 0 : 1
}
