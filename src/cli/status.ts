// `fleetcheck status`: the fleet at a glance in the terminal, read from the hub's /api/v1/fleet.
// Exit codes for scripts: 0 every check verified and every cluster healthy, 1 something is failing or
// unknown, 3 the hub could not be reached or answered nonsense.
import { parseArgs } from "node:util"
import * as z from "zod"
import type { FleetView } from "../hub/fleet-state.ts"

const FleetSchema = z.object({
  generatedAt: z.string(),
  clusters: z.array(
    z.object({
      name: z.string(),
      conditions: z.array(
        z.object({ type: z.string(), status: z.string(), reason: z.string(), message: z.string() }),
      ),
      counts: z.object({ total: z.number(), verified: z.number(), failed: z.number(), unknown: z.number() }),
      kubernetesVersion: z.string().optional(),
    }),
  ),
  checks: z.array(
    z.object({
      cluster: z.string(),
      namespace: z.string(),
      name: z.string(),
      status: z.enum(["True", "False", "Unknown"]),
      reason: z.string(),
      message: z.string(),
      lastSuccessfulTime: z.string().optional(),
    }),
  ),
})

const table = (rows: string[][]): string => {
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

export const renderStatus = (view: z.output<typeof FleetSchema> | FleetView): string => {
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

export const healthy = (view: z.output<typeof FleetSchema>): boolean =>
  view.checks.every((c) => c.status === "True") &&
  view.clusters.every((c) => c.conditions.every((x) => x.type !== "Ready" || x.status === "True"))

export const runStatus = async (args: ReadonlyArray<string>): Promise<number> => {
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
  let body: unknown
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(10_000) })
    if (!res.ok) throw new Error(`HTTP ${res.status}`)
    body = await res.json()
  } catch (e) {
    process.stderr.write(
      `fleetcheck status: cannot read ${url.href}: ${e instanceof Error ? e.message : String(e)}\n`,
    )
    return 3
  }
  const parsed = FleetSchema.safeParse(body)
  if (!parsed.success) {
    process.stderr.write(
      `fleetcheck status: unexpected answer from ${url.href}: ${parsed.error.issues[0]?.message}\n`,
    )
    return 3
  }
  process.stdout.write(
    values.output === "json" ? `${JSON.stringify(body, null, 2)}\n` : renderStatus(parsed.data),
  )
  return healthy(parsed.data) ? 0 : 1
}
