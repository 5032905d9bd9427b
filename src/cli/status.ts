// `fleetcheck status`: the fleet at a glance in the terminal, read from the hub's /api/v1/fleet.
// Exit codes for scripts: 0 every check verified and every cluster healthy, 1 something is failing or
// unknown, 3 the hub could not be reached, refused the caller or answered nonsense.
//
// A hub with secure serving wants a bearer token its API server accepts: status sends the one the
// user's kubeconfig gives (a token, or what an exec or auth-provider plugin returns, through
// client-node's KubeConfig), as kubectl would to the API server, and explains a 401 or 403. Over
// https the hub's certificate is verified first (hub-request.ts), so the token goes to the hub only.
import type { RequestOptions } from "node:https"
import { parseArgs } from "node:util"
import { KubeConfig } from "@kubernetes/client-node"
import { type FleetView, FleetViewSchema, isFleetHealthy, missesObjective } from "../api/fleet.ts"
import { fleetReasons } from "../api/fleetbackupcheck.ts"
import {
  type HubConnection,
  hubConnection,
  hubConnectionOptions,
  hubConnectionUsage,
  hubGet,
  withheldReason,
} from "./hub-request.ts"

export const statusUsage = `Usage: fleetcheck status [--hub URL] [--hub-ca-file F] [--kubeconfig FILE] [--context NAME] [--cluster NAME] [--failing] [--ignore-objectives] [--limit N] [-o table|json]

The fleet at a glance, read from the hub's /api/v1/fleet, page after page.
  --hub URL        the hub (default $FLEETCHECK_HUB_URL, else http://127.0.0.1:8080); a hub with
                   --secure-serving is https://
${hubConnectionUsage}
  --kubeconfig F   whose bearer token to send (default $KUBECONFIG, ~/.kube/config, in-cluster);
                   a hub with --secure-serving asks its API server who that is and whether they may
                   get /api/v1/fleet. The token goes to --hub: point it at your own hub only.
  --context NAME   the kubeconfig context to use (default its current context)
  --cluster NAME   one member only
  --failing        only checks that are not verified, and clusters that are not healthy
  --ignore-objectives
                   exit 0 though a check missed an objective (spec.objectives)
  --limit N        clusters and checks per request (default 500); every page is read
  -o, --output     table (default) or json

Exit codes: 0 every check verified, every cluster healthy and no objective missed; 1 something
failing, unknown or a missed objective;
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
  // Cross-cluster drills by source and target: this round's pairs and earlier pairs' last verdicts.
  const drillRows = fleetChecks.flatMap((f) =>
    (f.drills ?? []).map((d) => [
      `${f.namespace}/${f.name}`,
      `${d.source} -> ${d.target}`,
      d.state,
      d.status,
      d.reason,
      d.lastSuccessfulTime ?? "never",
    ]),
  )
  const drills = table([
    ["FLEET CHECK", "DRILL (SOURCE -> TARGET)", "ROUND", "VERIFIED", "REASON", "LAST SUCCESS"],
    ...drillRows,
  ])
  return `${clusters}\n\n${fleetChecks.length ? `${fleet}\n\n` : ""}${drillRows.length ? `${drills}\n\n` : ""}${view.checks.length ? checks : "no BackupChecks"}\n${footer}`
}

/** One answer of the hub, or why it is not one. */
type Answer = { readonly view: FleetView; readonly raw: Record<string, unknown> } | { readonly error: string }

/** The Authorization header to send and whom it speaks for; `who` names the kubeconfig user for messages. */
export interface Credentials {
  readonly authorization: string | undefined
  readonly who: string
  /** Why no token is sent at all (plain http to another host), when that is the reason. */
  readonly withheld?: string
}

/**
 * The bearer token the kubeconfig gives for its (or the named) context. Without an explicit file a
 * missing kubeconfig is no error: a hub without secure serving needs none. Client certificates are not
 * sent (the hub reviews bearer tokens only); such a user is named in the 401 message.
 */
export const kubeconfigCredentials = async (
  file: string | undefined,
  context: string | undefined,
): Promise<Credentials | { readonly error: string }> => {
  const kc = new KubeConfig()
  try {
    if (file) kc.loadFromFile(file)
    else kc.loadFromDefault()
    if (context) {
      if (!kc.getContextObject(context))
        return { error: `kubeconfig has no context ${JSON.stringify(context)}` }
      kc.setCurrentContext(context)
    }
  } catch (e) {
    if (!file && !context) return { authorization: undefined, who: "no kubeconfig" }
    return { error: `cannot read the kubeconfig: ${e instanceof Error ? e.message : String(e)}` }
  }
  const user = kc.getCurrentUser()
  const who = `kubeconfig user ${JSON.stringify(user?.name ?? "")} (context ${JSON.stringify(kc.getCurrentContext())})`
  const opts: RequestOptions = {}
  try {
    // Only the user's credentials matter: paired with a placeholder https cluster, client-node neither
    // refuses an http:// server of the kubeconfig's nor reads its CA.
    const userOnly = new KubeConfig()
    if (user)
      userOnly.loadFromOptions({
        clusters: [{ name: "hub", server: "https://hub.invalid", skipTLSVerify: false }],
        users: [user],
        contexts: [{ name: "hub", cluster: "hub", user: user.name }],
        currentContext: "hub",
      })
    await userOnly.applyToHTTPSOptions(opts)
  } catch (e) {
    return { error: `cannot get a token for ${who}: ${e instanceof Error ? e.message : String(e)}` }
  }
  const headers = (opts.headers ?? {}) as Record<string, unknown>
  const authorization = headers.Authorization ?? headers.authorization
  return {
    authorization:
      typeof authorization === "string" && /^Bearer \S+$/.test(authorization) ? authorization : undefined,
    who,
  }
}

/** The kubeconfig's token when it may travel to `url`; none, and why, when it may not. */
export const credentialsFor = async (
  url: URL,
  connection: HubConnection,
  kubeconfig: string | undefined,
  context: string | undefined,
): Promise<Credentials | { readonly error: string }> =>
  connection.sendsToken
    ? kubeconfigCredentials(kubeconfig, context)
    : { authorization: undefined, who: "no one", withheld: withheldReason(url) }

/** What a 401 or 403 from the hub means for this caller, and what to do about it. */
export const refusalMessage = (
  status: 401 | 403,
  hubMessage: string,
  credentials: Credentials,
  resource: "fleet" | "report" = "fleet",
): string =>
  status === 401
    ? credentials.withheld !== undefined
      ? `the hub wants a bearer token (401: ${hubMessage}); ${credentials.withheld}`
      : credentials.authorization === undefined
        ? `the hub wants a bearer token (401: ${hubMessage}); ${credentials.who} has none: use a context with a token or an exec plugin, or --kubeconfig`
        : `the hub's API server did not accept the token of ${credentials.who} (401: ${hubMessage}); is it expired, or for another cluster than the hub's?`
    : `${credentials.who} may not read the ${resource} (403: ${hubMessage}); bind it the ClusterRole fleetcheck-fleet-reader (get on ${resource} in the fleetcheck.io API group) in the hub's cluster (deploy/hub/access-roles.yaml)`

const readPage = async (url: URL, connection: HubConnection, credentials: Credentials): Promise<Answer> => {
  const got = await hubGet(url, connection, credentials.authorization, 10_000)
  if ("error" in got) return got
  const answer = { ...got, ok: got.status >= 200 && got.status < 300 }
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
    if (answer.status === 401 || answer.status === 403)
      return { error: refusalMessage(answer.status, typeof why === "string" ? why : "refused", credentials) }
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
      ...hubConnectionOptions,
      kubeconfig: { type: "string" },
      context: { type: "string" },
      cluster: { type: "string" },
      failing: { type: "boolean", default: false },
      "ignore-objectives": { type: "boolean", default: false },
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
  const connection = hubConnection(url, {
    ...values,
    "hub-ca-file": values["hub-ca-file"] ?? process.env.FLEETCHECK_HUB_CA_FILE,
  })
  if ("error" in connection) {
    process.stderr.write(`fleetcheck status: ${connection.error}\n\n${statusUsage}`)
    return 2
  }
  try {
    return await readFleet(
      url,
      connection,
      values,
      values.output === "json",
      values["ignore-objectives"],
      cannotRead,
    )
  } finally {
    connection.close()
  }
}

/** Reads every page and prints the fleet; the exit code. */
const readFleet = async (
  url: URL,
  connection: HubConnection,
  values: { readonly kubeconfig?: string | undefined; readonly context?: string | undefined },
  json: boolean,
  ignoreObjectives: boolean,
  cannotRead: (why: string) => number,
): Promise<number> => {
  const credentials = await credentialsFor(url, connection, values.kubeconfig, values.context)
  if ("error" in credentials) return cannotRead(credentials.error)
  // Every page, concatenated: the first page's totals and header, every page's clusters and checks.
  const first = await readPage(url, connection, credentials)
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
    const page = await readPage(next, connection, credentials)
    if ("error" in page) return cannotRead(`page ${tokens.size + 1}: ${page.error}`)
    clusters.push(...page.view.clusters)
    checks.push(...page.view.checks)
    token = page.view.metadata?.continue
  }
  const { metadata: _metadata, ...view } = { ...first.view, clusters, checks }
  const raw: Record<string, unknown> = { ...first.raw, clusters, checks }
  delete raw.metadata
  process.stdout.write(json ? `${JSON.stringify(raw, null, 2)}\n` : renderStatus(view))
  if (view.leader === false) {
    process.stderr.write(
      `fleetcheck status: ${url.origin} is not the leading hub; its view is not the fleet's\n`,
    )
    return 3
  }
  return statusExitCode(view, ignoreObjectives)
}

/**
 * 0 only when every check is verified, every cluster healthy and, unless the caller said
 * --ignore-objectives, no check missed an objective: a user who set maxDataAge asked to be told.
 */
export const statusExitCode = (
  view: Pick<FleetView, "clusters" | "checks" | "fleetChecks">,
  ignoreObjectives: boolean,
): 0 | 1 => {
  // --ignore-objectives covers FleetBackupChecks whose only fault is a missed objective too.
  const fleetChecks = ignoreObjectives
    ? view.fleetChecks?.filter((f) => f.verified.reason !== fleetReasons.ObjectivesMissed)
    : view.fleetChecks
  if (!isFleetHealthy({ ...view, fleetChecks })) return 1
  return !ignoreObjectives && view.checks.some(missesObjective) ? 1 : 0
}
