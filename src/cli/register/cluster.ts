// What register and unregister share: the two clusters they talk to (a kubeconfig context each, the
// project's KubeClient in the command's scope, a few request helpers), their output, and the edge that
// runs a command and turns its failure into a message and an exit code.
import { KubeConfig } from "@kubernetes/client-node"
import { Cause, Data, Effect, Exit, type Scope } from "effect"
import { registrationAnnotation } from "../../api/names.ts"
import type { FinalizerReleaseError } from "../../hub/finalizers.ts"
import {
  isNotFound,
  KubeApiError,
  type KubeClient,
  type KubeError,
  type KubeRequest,
  KubeTransportError,
  makeKubeClient,
} from "../../kube/client.ts"
import { type Command, UsageError } from "./args.ts"
import { identityComponent, kindPath, type Manifest, type ManifestError, manifestPath } from "./manifests.ts"

/** The command could not finish (exit 1); re-running it is safe. */
export class CommandError extends Data.TaggedError("CommandError")<{ readonly message: string }> {}

export type CliError = UsageError | CommandError | ManifestError | FinalizerReleaseError | KubeError

/** The field manager of everything register applies. */
export const fieldManager = "fleetcheck"

export const q = (s: string) => JSON.stringify(s)
export const out = (line: string) => Effect.sync(() => void process.stdout.write(`${line}\n`))
export const warn = (line: string) => Effect.sync(() => void process.stderr.write(`warning: ${line}\n`))

/** `file`, else the default loading rules (KUBECONFIG, ~/.kube/config, in-cluster). */
export const loadKubeConfigFile = (file: string | undefined) =>
  Effect.try({
    try: () => {
      const kc = new KubeConfig()
      if (file) kc.loadFromFile(file)
      else kc.loadFromDefault()
      return kc
    },
    catch: (e) =>
      new UsageError({
        message: `cannot load the kubeconfig${file ? ` ${q(file)}` : ""}: ${e instanceof Error ? e.message : String(e)}`,
      }),
  })

/** The kubeconfig with `context` current; `what` ("hub", "member") names it in the error. */
export const loadKubeConfig = Effect.fnUntraced(function* (
  file: string | undefined,
  context: string,
  what: string,
) {
  const kc = yield* loadKubeConfigFile(file)
  if (kc.getContextObject(context) === null) {
    const known = kc.getContexts().map((c) => c.name)
    return yield* new UsageError({
      message:
        `${what} context ${q(context)} is not in the kubeconfig` +
        (known.length ? ` (it has ${known.slice(0, 10).join(", ")})` : ""),
    })
  }
  kc.setCurrentContext(context)
  return kc
})

/** --hub-context, else the kubeconfig's current context. */
export const hubContextOf = (file: string | undefined, hubContext: string | undefined) =>
  hubContext !== undefined
    ? Effect.succeed(hubContext)
    : Effect.flatMap(loadKubeConfigFile(file), (kc) => {
        const ctx = kc.getCurrentContext()
        return ctx
          ? Effect.succeed(ctx)
          : Effect.fail(
              new UsageError({ message: "the kubeconfig has no current-context: pass --hub-context" }),
            )
      })

/** One cluster a command talks to. */
/** Where the hub reaches a member: what its kubeconfig or ClusterProfile says. */
export interface MemberEndpoint {
  readonly server: string
  readonly caData: string | undefined
  readonly tlsServerName: string | undefined
}

export interface Cluster {
  readonly client: KubeClient
  readonly server: string
  request<T = any>(req: KubeRequest): Effect.Effect<T, KubeError>
  /** undefined on 404. */
  get<T = any>(path: string): Effect.Effect<T | undefined, KubeError>
  /** Server-side apply, forced: register owns these fields. */
  apply(o: Manifest): Effect.Effect<Manifest, KubeError>
  /** false when it was already gone. */
  del(path: string): Effect.Effect<boolean, KubeError>
}

/** A client for `kubeConfig`'s current context, closed with the command's scope. */
export const openCluster = Effect.fnUntraced(function* (
  name: string,
  kubeConfig: KubeConfig,
): Effect.fn.Return<Cluster, never, Scope.Scope> {
  const client = yield* makeKubeClient({ cluster: name, kubeConfig })
  const request = <T>(req: KubeRequest) => client.request<T>(req)
  return {
    client,
    server: kubeConfig.getCurrentCluster()?.server ?? "",
    request,
    get: <T>(path: string) =>
      request<T>({ method: "GET", path }).pipe(Effect.catchIf(isNotFound, () => Effect.succeed(undefined))),
    apply: (o: Manifest) =>
      request<Manifest>({
        method: "PATCH",
        path: manifestPath(o),
        body: JSON.stringify(o),
        contentType: "application/apply-patch+yaml",
        query: { fieldManager, force: "true" },
      }),
    del: (path: string) =>
      request({ method: "DELETE", path, body: { propagationPolicy: "Background" } }).pipe(
        Effect.as(true),
        Effect.catchIf(isNotFound, () => Effect.succeed(false)),
      ),
  }
})

/** The identity's Roles or RoleBindings (any namespace) that registration `name` applied. */
export const listOwned = (cluster: Cluster, kind: "Role" | "RoleBinding", name: string) =>
  cluster
    .request<{ items: Manifest[] }>({
      method: "GET",
      path: kindPath(kind),
      query: { labelSelector: identityComponent },
    })
    .pipe(
      Effect.map((list) =>
        list.items
          .filter((o) => o.metadata.annotations?.[registrationAnnotation] === name)
          // A list's items carry no kind of their own.
          .map((o) => ({ ...o, kind })),
      ),
    )

/** Polls `probe` every 250 ms until it says true (true) or `timeoutMs` passes (false). */
export const waitFor = <E>(timeoutMs: number, probe: Effect.Effect<boolean, E>): Effect.Effect<boolean, E> =>
  Effect.gen(function* () {
    const deadline = Date.now() + timeoutMs
    for (;;) {
      if (yield* probe) return true
      if (Date.now() >= deadline) return false
      yield* Effect.sleep(250)
    }
  })

const errorText = (e: unknown): string => {
  if (e instanceof KubeApiError || e instanceof KubeTransportError) {
    return `${e.cluster}: ${e.method} ${e.path}: ${e.message}`
  }
  return e instanceof Error ? e.message : String(e)
}

/**
 * Runs a command in its own scope (clients close when it ends) and returns its exit code: usage
 * errors print their message and give 2, any other failure prints and gives 1.
 */
/** Parses the arguments, prints `usage` for --help, else runs the command: its exit code. */
export const runParsedCommand = <A>(
  parse: Effect.Effect<Command<A>, UsageError>,
  usage: string,
  run: (args: A) => Effect.Effect<number, CliError, Scope.Scope>,
): Promise<number> =>
  runCommand(
    Effect.gen(function* () {
      const command = yield* parse
      if (command.kind === "help") {
        yield* Effect.sync(() => process.stdout.write(`Usage:\n${usage}`))
        return 0
      }
      return yield* run(command.args)
    }),
  )

export const runCommand = async (program: Effect.Effect<number, CliError, Scope.Scope>): Promise<number> => {
  const exit = await Effect.runPromiseExit(Effect.scoped(program))
  if (Exit.isSuccess(exit)) return exit.value
  const error = Cause.squash(exit.cause)
  process.stderr.write(`fleetcheck: ${errorText(error)}\n`)
  return error instanceof UsageError ? 2 : 1
}
