// Every hub setting, once: its flag, description, default and validation. The `fleetcheck hub` flags,
// their FLEETCHECK_<FLAG> environment variables, `--help` and the HubConfig type are all derived from
// the table below, so they cannot disagree; modules below the hub take their values from HubConfig and
// have no defaults of their own (a value that is not passed is a type error, not a silent fallback).
//
// Values are written the way users write them on the command line: durations as Go durations
// (`10s`, `1m30s`, as kube-controller-manager's flags), booleans as true/false.
import { Data } from "effect"
import * as z from "zod"
import { defaultHubNamespace } from "../api/names.ts"
import { parseDuration } from "../api/syntax.ts"
import { checkSeriesModes } from "../observability/metrics/check-series.ts"
import { parseLabelSelector } from "./fleet-state.ts"

const dns1123Label = /^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$/

const duration = (min: string, max: string) => {
  const [lo, hi] = [parseDuration(min) as number, parseDuration(max) as number]
  return z.string().transform((s, ctx) => {
    const ms = parseDuration(s)
    if (typeof ms !== "number") {
      ctx.addIssue({ code: "custom", message: ms.error })
      return z.NEVER
    }
    if (ms < lo || ms > hi) {
      ctx.addIssue({ code: "custom", message: `must be from ${min} to ${max}, got ${s}` })
      return z.NEVER
    }
    return ms
  })
}
const int = (min: number, max: number) =>
  z
    .string()
    .regex(/^[0-9]+$/, "a whole number")
    .transform(Number)
    .pipe(z.number().int().min(min).max(max))
const bool = z.enum(["true", "false"], "true or false").transform((v) => v === "true")

/** A label selector as kubectl takes it (the fleet API's grammar), or empty. */
const labelSelector = z
  .string()
  .max(1024)
  .superRefine((s, ctx) => {
    if (s.trim() === "") return
    const parsed = parseLabelSelector(s)
    if (!parsed.ok) ctx.addIssue({ code: "custom", message: parsed.error })
  })

/**
 * A trace link (SPEC §12): an http or https URL with `{traceId}` where the id goes (`{traceID}`, the
 * spelling first taken, also works), or empty for none. Any other scheme is refused at startup.
 */
const traceUrlTemplate = z.string().transform((s, ctx) => {
  if (s === "") return undefined
  if (!/^https?:\/\/\S+$/i.test(s) || !URL.canParse(s)) {
    ctx.addIssue({
      code: "custom",
      message: `an http:// or https:// URL without spaces, got ${JSON.stringify(s)}`,
    })
    return z.NEVER
  }
  if (!s.includes("{traceId}") && !s.includes("{traceID}")) {
    ctx.addIssue({
      code: "custom",
      message: `must contain {traceId} where the trace id goes, got ${JSON.stringify(s)}`,
    })
    return z.NEVER
  }
  return s
})

/** `host:port`, `:port` or `[ipv6]:port`; the host is what node's listen() takes. */
const hostPort = z.string().transform((s, ctx) => {
  const m = /^(?:\[([0-9a-fA-F:.%a-zA-Z0-9]+)\]|([^:[\]]*)):(\d{1,5})$/.exec(s)
  const port = m ? Number(m[3]) : Number.NaN
  if (!m || port > 65_535) {
    ctx.addIssue({ code: "custom", message: `host:port, :port or [ipv6]:port, got ${JSON.stringify(s)}` })
    return z.NEVER
  }
  return { host: m[1] ?? (m[2] || "0.0.0.0"), port }
})

interface Setting<T, D extends string | undefined = string | undefined> {
  /** Flag name without the dashes; the environment variable is FLEETCHECK_ + its upper snake case. */
  readonly flag: string
  readonly describe: string
  /** As a user would type it; undefined for a setting without a default. */
  readonly default: D
  readonly schema: z.ZodType<T, string>
}
const setting = <T, D extends string | undefined>(
  flag: string,
  schema: z.ZodType<T, string>,
  defaultValue: D,
  describe: string,
): Setting<T, D> => ({ flag, schema, default: defaultValue, describe })

/** The table. Order is the order of `--help`. */
export const hubSettings = {
  kubeconfig: setting(
    "kubeconfig",
    z.string().min(1),
    undefined,
    "the hub cluster's kubeconfig file (unset: in-cluster config, then $KUBECONFIG)",
  ),
  namespace: setting(
    "namespace",
    z.string().regex(dns1123Label, "a DNS-1123 label"),
    defaultHubNamespace,
    "hub namespace: registration Secrets, Events and the Lease",
  ),
  httpAddress: setting(
    "http-address",
    hostPort,
    "0.0.0.0:8080",
    "host:port for health, metrics, the fleet API and the dashboard ([::]:8080 for IPv6)",
  ),
  secureServing: setting(
    "secure-serving",
    bool,
    "true",
    "--http-address serves HTTPS, and every route but /healthz and /readyz needs a bearer token, authenticated by a TokenReview and authorized by a SubjectAccessReview (verb get; the path as a non-resource URL, /api/v1/fleet as the resource fleet.fleetcheck.io) at the hub's own API server",
  ),
  tlsCertFile: setting(
    "tls-cert-file",
    z.string().min(1).max(4096),
    undefined,
    "with --secure-serving: the serving certificate (PEM, intermediates after it), reloaded when it changes; unset with --tls-private-key-file: a self-signed one made at start (its SHA-256 fingerprint is logged)",
  ),
  tlsPrivateKeyFile: setting(
    "tls-private-key-file",
    z.string().min(1).max(4096),
    undefined,
    "the private key (PEM) of --tls-cert-file, reloaded with it",
  ),
  dashboardAddress: setting(
    "dashboard-address",
    hostPort,
    undefined,
    "serve the dashboard without a token on this separate host:port, for the API server's service proxy (unset: the dashboard is on --http-address with the rest)",
  ),
  leaderElect: setting("leader-elect", bool, "true", "campaign for the Lease; only the leader runs members"),
  sharding: setting(
    "sharding",
    bool,
    "false",
    "run as one of several replicas that split the members (ADR 0011): each replica announces itself with a Lease, each member is worked by the one replica holding its Lease fleetcheck-member-<cluster>, and every replica answers for the whole fleet; --leader-elect is then ignored and the Lease timings below apply to every Lease",
  ),
  leaseDurationMs: setting(
    "leader-elect-lease-duration",
    duration("1s", "10m"),
    "15s",
    "how long a standby waits, since it last saw the Lease change, before taking it over",
  ),
  renewDeadlineMs: setting(
    "leader-elect-renew-deadline",
    duration("1s", "10m"),
    "10s",
    "how long the leader tries to renew before it stops all leader work",
  ),
  retryPeriodMs: setting(
    "leader-elect-retry-period",
    duration("100ms", "1m"),
    "2s",
    "interval between renewals and between acquire attempts",
  ),
  maxConcurrentReconciles: setting(
    "max-concurrent-reconciles",
    int(1, 10_000),
    "32",
    "hub-wide cap on reconciles running at once, across all members",
  ),
  maxConcurrentSyncs: setting(
    "max-concurrent-syncs",
    int(1, 10_000),
    "32",
    "members whose caches may be listing at once while they engage (the rest wait their turn, so a hub start is no burst of every member's LISTs at once)",
  ),
  maxConcurrentStatusWrites: setting(
    "max-concurrent-status-writes",
    int(1, 10_000),
    "32",
    "hub-wide cap on MemberCluster status writes in flight (the rest wait, bad news first, and write their latest status once served); keep it well below the hub API server's HTTP/2 streams per connection (100 on kube-apiserver) so the hub's other requests find streams",
  ),
  workersPerMember: setting("workers-per-member", int(1, 256), "4", "reconcile workers per member"),
  probeIntervalMs: setting(
    "probe-interval",
    duration("100ms", "1h"),
    "1m",
    "how often each member's API server is probed (one LIST) while it answers; its connection is PINGed after 4 s without a frame meanwhile and closed when 4 s more pass unanswered (a broken watch or connection wakes the probe at once, a failed probe is confirmed at 1 s steps, an unreachable member is probed at least every 10 s)",
  ),
  probeFailureThreshold: setting(
    "probe-failure-threshold",
    int(1, 100),
    "3",
    "consecutive failed probes before a member is Connected=False",
  ),
  probeSuccessThreshold: setting(
    "probe-success-threshold",
    int(1, 100),
    "1",
    "consecutive good probes before a member is Connected=True again",
  ),
  cacheSyncTimeoutMs: setting(
    "cache-sync-timeout",
    duration("100ms", "1h"),
    "30s",
    "how long a member's caches may take to sync before Ready=False says so (it keeps trying)",
  ),
  statusIntervalMs: setting(
    "status-interval",
    duration("100ms", "10m"),
    "2s",
    "how often MemberCluster status is recomputed (written only when it changed)",
  ),
  statusRefreshMs: setting(
    "status-refresh-interval",
    duration("10s", "1h"),
    "5m",
    "how often an unchanged MemberCluster status is written again to refresh its lastProbeTime (a change is written at the next status round; an edit behind the hub's back is put right at the latest then)",
  ),
  drainGraceMs: setting(
    "drain-grace",
    duration("0s", "10m"),
    "30s",
    "on SIGTERM or a member stop, how long in-flight reconciles may finish",
  ),
  runningPollMs: setting(
    "running-poll",
    duration("100ms", "1h"),
    "30s",
    "backstop poll of a running restore Job, in case a Job event is missed",
  ),
  agentImage: setting(
    "agent-image",
    z.string().min(1).max(1024),
    "fleetcheck:0.1.0",
    "the image of the restore agent for checks with spec.restore (restic, postgres, etcd): the hub's own image, which has the restore tools",
  ),
  veleroNotInstalledPollMs: setting(
    "velero-not-installed-poll",
    duration("1s", "24h"),
    "5m",
    "how often a check with spec.restore.velero looks again for Velero on a member that does not serve its CRDs (Verified=False VeleroNotInstalled meanwhile)",
  ),
  sandboxCleanupTimeoutMs: setting(
    "sandbox-cleanup-timeout",
    duration("10s", "24h"),
    "10m",
    "how long a deleted BackupCheck's finalizer waits for its sandbox namespaces to go (then it is released; the sweeper goes on deleting them)",
  ),
  sandboxOrphanGraceMs: setting(
    "sandbox-orphan-grace",
    duration("1s", "1h"),
    "1m",
    "age at which a sandbox namespace of no recorded run and no active Job counts as an orphan and is deleted (another hub may be starting its run)",
  ),
  resyncPeriodMs: setting(
    "resync-period",
    duration("0s", "24h"),
    "10m",
    "periodic resync of every member's informers (0s: never)",
  ),
  http2: setting(
    "http2",
    bool,
    "true",
    "speak HTTP/2 to the API servers that offer it (over TLS, by ALPN), as client-go does: one connection per credential carries every request and watch (the hub's own API server gets two: one for the Leases alone), PINGed after 30s without traffic and closed when nothing, not even the PING's answer, arrives for 15s after it (member connections: 4s and 4s, so a frozen member is Connected=False within 15s); false: HTTP/1.1 only, one connection per request in flight (client-go's DISABLE_HTTP2)",
  ),
  expiryWarningMs: setting(
    "credential-expiry-warning",
    duration("1m", "8760h"),
    "168h",
    "CredentialsExpiringSoon this long before a member's token or certificate expires",
  ),
  capiKubeconfigSelector: setting(
    "capi-kubeconfig-selector",
    labelSelector,
    "",
    "also register Cluster API <cluster>-kubeconfig Secrets (data key value) in the hub namespace that match this label selector (empty: off)",
  ),
  clusterprofileProviderFile: setting(
    "clusterprofile-provider-file",
    z.string().min(1).max(4096),
    undefined,
    "KEP-5339 access-provider file (JSON: providers[].name → execConfig); set, ClusterProfiles in the hub namespace register members, with credentials from these plugins only",
  ),
  clusterprofileSelector: setting(
    "clusterprofile-selector",
    labelSelector,
    "",
    "which ClusterProfiles register members (a label selector; empty: every one in the hub namespace)",
  ),
  allowExec: setting("allow-exec", bool, "false", "accept kubeconfigs with exec credential plugins"),
  execPluginTimeoutMs: setting(
    "exec-plugin-timeout",
    duration("1s", "5m"),
    "10s",
    "how long one exec credential plugin run may take before it is killed (its process group)",
  ),
  allowAuthProvider: setting(
    "allow-auth-provider",
    bool,
    "false",
    "accept kubeconfigs with auth-provider plugins",
  ),
  allowFilePaths: setting(
    "allow-file-paths",
    bool,
    "false",
    "accept kubeconfigs that name files (certificate-authority, tokenFile, ...)",
  ),
  allowInsecureSkipTlsVerify: setting(
    "allow-insecure-skip-tls-verify",
    bool,
    "false",
    "accept kubeconfigs with insecure-skip-tls-verify",
  ),
  dashboardPageSize: setting(
    "dashboard-page-size",
    int(10, 1000),
    "100",
    "clusters and checks per dashboard page (the fleet API pages by its own ?limit=)",
  ),
  traceUrlTemplate: setting(
    "trace-url-template",
    traceUrlTemplate,
    undefined,
    "link every trace id on the dashboard to this http(s) URL, {traceId} replaced by the id, URL-encoded (e.g. http://localhost:16686/trace/{traceId} for Jaeger); empty or unset: no links",
  ),
  checkMetrics: setting(
    "check-metrics",
    z.enum(checkSeriesModes, "all, unverified or none"),
    "all",
    "per-check /metrics series (fleetcheck_backupcheck_*): all checks, only those an alert is about (not verified, an objective missed, a sandbox cleanup failed, past their verification deadline), or none; the per-member counts fleetcheck_backupchecks are always on",
  ),
  memberHistograms: setting(
    "member-histograms",
    bool,
    "false",
    "give the reconcile and workqueue histograms a cluster label (about 70 series per member) instead of one hub-wide set",
  ),
  memoryReturnThresholdMib: setting(
    "memory-return-threshold",
    int(0, 1_048_576),
    "0",
    "MiB: once the memory the hub process holds beyond its JavaScript heap grew this much and the burst is over (RSS steady, no reconcile running), one full garbage collection gives it back, at most every 5 minutes; its pause grows with the live heap (4-5 s at 100,000 cached checks on a busy 2-core machine); 0 (the default) turns it off",
  ),
  logLevel: setting(
    "log-level",
    z.enum(["Debug", "Info", "Warn", "Error"], "Debug, Info, Warn or Error"),
    "Info",
    "minimum level of the JSON logs",
  ),
} as const

type Settings = typeof hubSettings
type ValueOf<S> = S extends Setting<infer T, string | undefined> ? T : never

/** The hub's whole configuration, every value present (kubeconfig alone may be unset). */
export type HubConfig = {
  readonly [K in keyof Settings as Settings[K]["default"] extends string ? K : never]: ValueOf<Settings[K]>
} & {
  readonly [K in keyof Settings as Settings[K]["default"] extends string ? never : K]?: ValueOf<Settings[K]>
}

export const envNameOf = (flag: string) => `FLEETCHECK_${flag.toUpperCase().replaceAll("-", "_")}`

export class HubConfigError extends Data.TaggedError("HubConfigError")<{ readonly message: string }> {}

/**
 * Resolves every setting: flag, else FLEETCHECK_<FLAG>, else its default; each value validated by its
 * schema. `values` holds raw strings by flag name (as node:util parseArgs gives them). Leader-election
 * timings are also checked against each other (client-go's rules), so bad timings fail at startup.
 */
export const resolveHubConfig = (
  values: Readonly<Record<string, string | undefined>>,
  env: Readonly<Record<string, string | undefined>>,
): HubConfig => {
  const out: Record<string, unknown> = {}
  const problems: string[] = []
  for (const [key, s] of Object.entries(hubSettings) as Array<[string, Setting<unknown>]>) {
    const raw = values[s.flag] ?? env[envNameOf(s.flag)] ?? s.default
    if (raw === undefined) continue
    const parsed = s.schema.safeParse(raw)
    if (parsed.success) out[key] = parsed.data
    else problems.push(`--${s.flag}: ${parsed.error.issues.map((i) => i.message).join(", ")}`)
  }
  const config = out as HubConfig
  if (problems.length === 0) problems.push(...leaderElectionProblems(config), ...servingProblems(config))
  if (problems.length > 0)
    throw new HubConfigError({ message: `invalid hub settings: ${problems.join("; ")}` })
  return config
}

/** The certificate files come as a pair, and only where they are served: with secure serving. */
const servingProblems = (c: HubConfig): string[] => {
  if ((c.tlsCertFile === undefined) !== (c.tlsPrivateKeyFile === undefined))
    return [
      "--tls-cert-file and --tls-private-key-file go together: give both, or neither for a self-signed certificate",
    ]
  if (c.tlsCertFile !== undefined && !c.secureServing)
    return [
      "--tls-cert-file is served only with --secure-serving true (without it the hub serves plain HTTP)",
    ]
  return []
}

/** client-go's constraints: leaseDuration > renewDeadline > 1.2 × retryPeriod. */
const leaderElectionProblems = (c: HubConfig): string[] => {
  const problems: string[] = []
  if (c.leaseDurationMs <= c.renewDeadlineMs)
    problems.push("--leader-elect-lease-duration must be longer than --leader-elect-renew-deadline")
  if (c.renewDeadlineMs <= 1.2 * c.retryPeriodMs)
    problems.push("--leader-elect-renew-deadline must be longer than 1.2 × --leader-elect-retry-period")
  return problems
}

/** Every setting at its default: what `fleetcheck hub` runs with no flags and no environment. */
export const defaultHubConfig: HubConfig = resolveHubConfig({}, {})

/** `--help` text: one line per setting with its environment variable and default. */
export const hubHelp = (): string =>
  Object.values(hubSettings)
    .map((s: Setting<unknown>) => {
      const name = `--${s.flag}`.padEnd(34)
      const dflt = s.default === undefined ? "" : ` (default ${s.default})`
      return `  ${name} ${s.describe}${dflt}\n  ${"".padEnd(34)} [env ${envNameOf(s.flag)}]`
    })
    .join("\n")

/** The flag names, for node:util parseArgs. */
export const hubFlagNames = (): string[] => Object.values(hubSettings).map((s) => s.flag)
