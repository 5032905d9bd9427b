// The arguments of `fleetcheck register` and `fleetcheck unregister`, parsed and validated before any
// cluster is contacted. Every mistake is a UsageError (the command exits 2); --help and -h ask for the
// command's usage (exit 0).
import { parseArgs } from "node:util"
import { Data, Effect } from "effect"
import { defaultHubNamespace, registrationLabel } from "../../api/names.ts"
import { parseDuration } from "../../api/syntax.ts"
import { parseNamespaces } from "../../kubeconfig/policy.ts"

/** The command line is wrong: the command prints the message and exits 2. */
export class UsageError extends Data.TaggedError("UsageError")<{ readonly message: string }> {}

/** A year: the token lifetime when --token-expiration is not given. */
export const defaultTokenSeconds = 365 * 24 * 60 * 60
/** The apiserver's minimum for TokenRequest. */
export const minTokenSeconds = 600
const defaultUnregisterTimeout = "60s"

/** Where both clusters come from: one kubeconfig, the hub's context and namespace. */
export interface HubArgs {
  /** --kubeconfig, else the default loading rules (KUBECONFIG, ~/.kube/config). */
  readonly kubeconfig: string | undefined
  /** --hub-context, else the kubeconfig's current context. */
  readonly hubContext: string | undefined
  readonly hubNamespace: string
}

export interface RegisterArgs extends HubArgs {
  /** The registration (and MemberCluster) name: a DNS-1123 subdomain. */
  readonly name: string
  readonly memberContext: string
  /** Copied to the Secret (and so to the MemberCluster); never the registration label itself. */
  readonly labels: Readonly<Record<string, string>>
  /** --namespaces: Roles in these namespaces only; undefined is cluster-wide. */
  readonly namespaces: ReadonlyArray<string> | undefined
  readonly tokenSeconds: number
  /** --member-server: the URL the hub reaches the member at, when not the kubeconfig's. */
  readonly memberServer: string | undefined
  /** Take over an identity another registration holds. */
  readonly force: boolean
  /** Write a ClusterProfile and its token Secret instead of a registration Secret. */
  readonly clusterprofile: boolean
}

export interface UnregisterArgs extends HubArgs {
  readonly name: string
  /** --context, else the one register recorded on the Secret. */
  readonly memberContext: string | undefined
  /** How long to wait for the hub to let go of the member. */
  readonly timeoutMs: number
  /** As given, for messages. */
  readonly timeoutText: string
  readonly deleteCrd: boolean
  /** Remove an identity another registration holds, or release finalizers with no identity left. */
  readonly force: boolean
}

/** What a command line asks for: its usage, or a run with these arguments. */
export type Command<A> = { readonly kind: "help" } | { readonly kind: "run"; readonly args: A }

const q = (s: string) => JSON.stringify(s)
const usage = (message: string) => new UsageError({ message })

const dns1123Subdomain = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/
const labelNamePattern = /^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$/
const labelValuePattern = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/

const isSubdomain = (s: string) => s.length <= 253 && dns1123Subdomain.test(s)

const wantsHelp = (argv: ReadonlyArray<string>) => argv.includes("--help") || argv.includes("-h")

type Options = NonNullable<Parameters<typeof parseArgs>[0]>["options"]

/** node:util parseArgs, its errors (unknown option, missing value) as UsageErrors. */
const parse = <O extends Options>(argv: ReadonlyArray<string>, options: O) =>
  Effect.try({
    try: () => parseArgs({ args: [...argv], allowPositionals: true, strict: true, options }),
    catch: (e) => usage(e instanceof Error ? e.message : String(e)),
  })

/** The one positional argument: the registration's NAME. */
export const checkName = (
  positionals: ReadonlyArray<string>,
  command: string,
): Effect.Effect<string, UsageError> => {
  const [name, ...rest] = positionals
  if (rest.length > 0) return Effect.fail(usage(`unexpected arguments: ${rest.join(" ")}`))
  if (!name) return Effect.fail(usage(`${command} needs the member's NAME`))
  if (!isSubdomain(name)) {
    return Effect.fail(usage(`NAME ${q(name)} must be a DNS-1123 subdomain (lowercase, digits, '-', '.')`))
  }
  return Effect.succeed(name)
}

/** `--label k=v` items as a label map; keys and values as Kubernetes validates them. */
export const parseLabels = (
  items: ReadonlyArray<string>,
): Effect.Effect<Record<string, string>, UsageError> => {
  const labels: Record<string, string> = {}
  for (const item of items) {
    const eq = item.indexOf("=")
    if (eq <= 0) return Effect.fail(usage(`--label ${q(item)}: expected key=value`))
    const key = item.slice(0, eq)
    const value = item.slice(eq + 1)
    const slash = key.lastIndexOf("/")
    const prefix = slash >= 0 ? key.slice(0, slash) : undefined
    const name = slash >= 0 ? key.slice(slash + 1) : key
    if (name.length > 63 || !labelNamePattern.test(name) || (prefix !== undefined && !isSubdomain(prefix))) {
      return Effect.fail(usage(`--label ${q(item)}: ${q(key)} is not a valid label key`))
    }
    if (value.length > 63 || !labelValuePattern.test(value)) {
      return Effect.fail(usage(`--label ${q(item)}: ${q(value)} is not a valid label value`))
    }
    if (key === registrationLabel) return Effect.fail(usage(`--label may not set ${registrationLabel}`))
    labels[key] = value
  }
  return Effect.succeed(labels)
}

/** A Go duration (the API's one grammar: h, m, s, ms) in milliseconds. */
export const parseFlagDuration = (flag: string, text: string): Effect.Effect<number, UsageError> => {
  const ms = parseDuration(text)
  return typeof ms === "number"
    ? Effect.succeed(ms)
    : Effect.fail(
        usage(`${flag} ${q(text)}: expected a Go duration such as 8760h, 30m or 90s (a day is 24h)`),
      )
}

export const parseRegisterArgs = Effect.fnUntraced(function* (
  argv: ReadonlyArray<string>,
): Effect.fn.Return<Command<RegisterArgs>, UsageError> {
  if (wantsHelp(argv)) return { kind: "help" }
  const { values, positionals } = yield* parse(argv, {
    context: { type: "string" },
    label: { type: "string", multiple: true, default: [] },
    namespaces: { type: "string" },
    kubeconfig: { type: "string" },
    "hub-context": { type: "string" },
    "hub-namespace": { type: "string", default: defaultHubNamespace },
    "token-expiration": { type: "string" },
    "member-server": { type: "string" },
    force: { type: "boolean", default: false },
    clusterprofile: { type: "boolean", default: false },
  })
  const name = yield* checkName(positionals, "register")
  const memberContext = values.context
  if (!memberContext) return yield* usage("register needs --context: the member's kubeconfig context")
  const labels = yield* parseLabels(values.label)
  let namespaces: ReadonlyArray<string> | undefined
  if (values.namespaces !== undefined) {
    const parsed = parseNamespaces(values.namespaces)
    if (!parsed.ok) return yield* usage(`--namespaces ${parsed.message}`)
    namespaces = parsed.namespaces
  }
  const expiration = values["token-expiration"]
  const tokenSeconds =
    expiration === undefined
      ? defaultTokenSeconds
      : Math.floor((yield* parseFlagDuration("--token-expiration", expiration)) / 1000)
  if (tokenSeconds < minTokenSeconds) return yield* usage("--token-expiration must be at least 10m")
  return {
    kind: "run",
    args: {
      name,
      memberContext,
      labels,
      namespaces,
      tokenSeconds,
      memberServer: values["member-server"],
      force: values.force,
      clusterprofile: values.clusterprofile,
      kubeconfig: values.kubeconfig,
      hubContext: values["hub-context"],
      hubNamespace: values["hub-namespace"],
    },
  }
})

export const parseUnregisterArgs = Effect.fnUntraced(function* (
  argv: ReadonlyArray<string>,
): Effect.fn.Return<Command<UnregisterArgs>, UsageError> {
  if (wantsHelp(argv)) return { kind: "help" }
  const { values, positionals } = yield* parse(argv, {
    context: { type: "string" },
    kubeconfig: { type: "string" },
    "hub-context": { type: "string" },
    "hub-namespace": { type: "string", default: defaultHubNamespace },
    timeout: { type: "string", default: defaultUnregisterTimeout },
    "delete-crd": { type: "boolean", default: false },
    force: { type: "boolean", default: false },
  })
  const name = yield* checkName(positionals, "unregister")
  const timeoutMs = yield* parseFlagDuration("--timeout", values.timeout)
  return {
    kind: "run",
    args: {
      name,
      memberContext: values.context,
      timeoutMs,
      timeoutText: values.timeout,
      deleteCrd: values["delete-crd"],
      force: values.force,
      kubeconfig: values.kubeconfig,
      hubContext: values["hub-context"],
      hubNamespace: values["hub-namespace"],
    },
  }
})
