// The worker loop of one member's controller, implemented once: N worker fibers take keys from the
// member's workqueue and run the reconciler under a global concurrency cap, then apply one small
// result table (controller-runtime's):
//   failure                → rate-limited requeue (per-item backoff), counted, logged
//   TerminalError          → forget, counted, logged, never retried (a new event will bring it back)
//   defect (a thrown bug)  → like a failure, and counted as a panic: it never kills the worker
//   Conflict (409)         → rate-limited requeue, counted as a conflict, not an error (debug log): the
//                            cache was behind, not broken; controller-runtime's Result{Requeue: true}
//   { requeueAfterMs }     → forget, then addAfter
//   done                   → forget
import { Cause, Context, Data, Effect, Exit, References, type Scope, Tracer } from "effect"
import { isConflict } from "../kube/client.ts"
import type { GlobalLimit } from "./global-limit.ts"
import type { WorkQueue } from "./workqueue/workqueue.ts"

export interface ReconcileRequest {
  readonly cluster: string
  readonly namespace: string
  readonly name: string
  /** Unique per reconcile: ties logs, spans and Events of one pass together. */
  readonly reconcileId: string
}

export interface ReconcileResult {
  readonly requeueAfterMs?: number
}

/** An error no retry can fix (e.g. an invalid spec): logged and counted, never requeued. */
export class TerminalError extends Data.TaggedError("TerminalError")<{
  readonly message: string
  readonly cause?: unknown
}> {}

export type Reconciler = (req: ReconcileRequest) => Effect.Effect<ReconcileResult, unknown>

export type ReconcileOutcome = "success" | "requeue_after" | "conflict" | "error" | "terminal_error" | "panic"

export interface ControllerHooks {
  readonly onReconcile?: (cluster: string, outcome: ReconcileOutcome, seconds: number) => void
  readonly onActiveWorkers?: (cluster: string, delta: number) => void
}

export interface ControllerOptions {
  /** Controller name, used in spans and logs (e.g. "backupcheck"). */
  readonly name: string
  readonly cluster: string
  readonly queue: WorkQueue
  readonly reconcile: Reconciler
  /** Worker fibers for this queue. */
  readonly workers: number
  /** Shared across members: caps concurrent reconciles hub-wide (not held during API calls). */
  readonly globalLimit?: GlobalLimit
  readonly hooks?: ControllerHooks
  /** Counters to update (so a caller can hold them before the workers start). */
  readonly stats?: ControllerStats
}

export interface ControllerStats {
  reconciles: number
  /** Failed with a Conflict (409): requeued, not counted in errors. */
  conflicts: number
  errors: number
  terminalErrors: number
  panics: number
}

export const makeControllerStats = (): ControllerStats => ({
  reconciles: 0,
  conflicts: 0,
  errors: 0,
  terminalErrors: 0,
  panics: 0,
})

// <ms since epoch>-<counter>-<4 random chars>, all base 36. The time part is formatted once per
// millisecond and the random part from an integer: formatting a float in base 36 was 3% of the
// engine's own cost per converged reconcile.
let reconcileCounter = 0
let idMillis = -1
let idTime = ""
export const newReconcileId = (): string => {
  const now = Date.now()
  if (now !== idMillis) {
    idMillis = now
    idTime = now.toString(36)
  }
  const random = Math.floor(Math.random() * 1_679_616) // 36^4
  return `${idTime}-${(reconcileCounter++ & 0xffffff).toString(36)}-${random.toString(36).padStart(4, "0")}`
}

/** The result-table row an exit falls in (interruptions are not outcomes: the worker is stopping). */
export const outcomeOf = (exit: Exit.Exit<ReconcileResult, unknown>): ReconcileOutcome => {
  if (Exit.isSuccess(exit)) {
    const after = exit.value.requeueAfterMs
    return after !== undefined && after > 0 ? "requeue_after" : "success"
  }
  const failure = Cause.findErrorOption(exit.cause)
  if (failure._tag === "Some" && failure.value instanceof TerminalError) return "terminal_error"
  if (failure._tag === "Some" && isConflict(failure.value)) return "conflict"
  return Cause.hasDies(exit.cause) ? "panic" : "error"
}

/** Keys are "namespace/name" (or "name" for cluster-scoped objects). */
export const splitKey = (key: string): { namespace: string; name: string } => {
  const i = key.indexOf("/")
  return i < 0 ? { namespace: "", name: key } : { namespace: key.slice(0, i), name: key.slice(i + 1) }
}

// A span without a captured stack trace: the span's attributes say where it comes from, and a stack
// trace captured per reconcile was about 7% of a converged reconcile's CPU.
const noStackTrace = (): string | undefined => undefined

/**
 * The context inside a reconcile's span, as Effect.withSpan and Effect.annotateLogs would make it: the
 * span is the parent of the spans inside (with its stack frame), and the logs carry `annotations`.
 */
const inReconcileSpan = (
  context: Context.Context<never>,
  span: Tracer.Span,
  annotations: Readonly<Record<string, unknown>>,
): Context.Context<never> => {
  const frame: References.StackFrame = {
    name: span.name,
    stack: noStackTrace,
    parent: Context.get(context, References.CurrentStackFrame),
  }
  const logAnnotations = { ...Context.get(context, References.CurrentLogAnnotations), ...annotations }
  return Context.add(
    Context.add(Context.add(context, Tracer.ParentSpan, span), References.CurrentStackFrame, frame),
    References.CurrentLogAnnotations,
    logAnnotations,
  )
}

/**
 * Starts the workers in the current scope; they stop when the queue shuts down or the scope closes.
 * Returns live counters (cheap to read; the metrics layer mirrors them into Prometheus).
 */
export const runController = Effect.fnUntraced(function* (options: ControllerOptions) {
  const { queue, cluster, name } = options
  const workers = Math.max(1, options.workers)
  const stats = options.stats ?? makeControllerStats()
  const spanName = `reconcile ${name}`

  // What happens after a reconcile, by its exit: the result table above.
  const settle = (
    key: string,
    req: ReconcileRequest,
    started: number,
    exit: Exit.Exit<ReconcileResult, unknown>,
  ): Effect.Effect<void> => {
    stats.reconciles++
    const seconds = (performance.now() - started) / 1000
    const report = (outcome: ReconcileOutcome) => options.hooks?.onReconcile?.(cluster, outcome, seconds)
    if (Exit.isSuccess(exit)) {
      const after = exit.value.requeueAfterMs
      if (after !== undefined && after > 0) {
        report("requeue_after")
        return Effect.andThen(queue.forget(key), queue.addAfter(key, after))
      }
      report("success")
      return queue.forget(key)
    }
    const cause = exit.cause
    if (Cause.hasInterruptsOnly(cause)) return Effect.void
    const failure = Cause.findErrorOption(cause)
    const fields = {
      cluster,
      namespace: req.namespace,
      name: req.name,
      reconcileId: req.reconcileId,
      controller: name,
    }
    if (failure._tag === "Some" && failure.value instanceof TerminalError) {
      stats.terminalErrors++
      report("terminal_error")
      return Effect.andThen(
        queue.forget(key),
        Effect.logError("reconcile failed with a terminal error; not retrying").pipe(
          Effect.annotateLogs({ ...fields, error: failure.value.message }),
        ),
      )
    }
    if (failure._tag === "Some" && isConflict(failure.value)) {
      // Optimistic concurrency doing its job (a stale cache or another writer): retry, quietly. Not an
      // error: what a controller-runtime reconciler that catches it returns, Result{Requeue: true}.
      stats.conflicts++
      report("conflict")
      const e = failure.value as { method?: string; path?: string; message?: string }
      return Effect.logDebug("conflict writing; requeued").pipe(
        Effect.annotateLogs({ ...fields, error: `${e.method} ${e.path}: ${e.message}` }),
        Effect.andThen(queue.addRateLimited(key)),
      )
    }
    const panic = Cause.hasDies(cause)
    if (panic) stats.panics++
    stats.errors++
    report(panic ? "panic" : "error")
    return Effect.logError(
      panic ? "reconciler panicked; requeued with backoff" : "reconcile failed; requeued with backoff",
    ).pipe(
      Effect.annotateLogs({ ...fields, error: Cause.pretty(cause) }),
      Effect.andThen(queue.addRateLimited(key)),
    )
  }

  // Runs on every reconcile, so it is written for its cost: the span is made by Effect.useSpan and
  // installed with the log annotations in ONE context update (what Effect.withSpan and
  // Effect.annotateLogs install, as three updates each rebuilding the fiber's context cache), and the
  // outcome is set on the span object directly.
  const reconcileOne = (key: string) => {
    const { namespace, name: objName } = splitKey(key)
    const req: ReconcileRequest = { cluster, namespace, name: objName, reconcileId: newReconcileId() }
    const started = performance.now()
    const annotations = {
      cluster,
      namespace,
      name: objName,
      reconcileId: req.reconcileId,
      controller: name,
    }
    return Effect.useSpan(
      spanName,
      {
        root: true,
        attributes: {
          "k8s.cluster.name": cluster,
          "k8s.namespace.name": namespace,
          "fleetcheck.check.name": objName,
          "fleetcheck.reconcile.id": req.reconcileId,
          "fleetcheck.controller": name,
        },
      },
      (span) =>
        Effect.updateContext(options.reconcile(req), (context) =>
          inReconcileSpan(context, span, annotations),
        ).pipe(
          // The outcome is known only at the end: recorded on the span before it closes.
          Effect.onExit((exit) => {
            span.attribute("fleetcheck.reconcile.outcome", outcomeOf(exit))
            return Effect.void
          }),
        ),
    ).pipe(
      Effect.exit,
      Effect.flatMap((exit) => settle(key, req, started, exit)),
    )
  }

  const processOne = (key: string) =>
    options.globalLimit ? options.globalLimit.withPermit(reconcileOne(key)) : reconcileOne(key)

  const worker = Effect.gen(function* () {
    while (true) {
      const item = yield* queue.get
      if ("shutdown" in item) return
      options.hooks?.onActiveWorkers?.(cluster, 1)
      yield* Effect.onExit(processOne(item.key), () => {
        options.hooks?.onActiveWorkers?.(cluster, -1)
        return queue.done(item.key)
      })
    }
  })

  for (let i = 0; i < workers; i++) yield* Effect.forkScoped(worker)
  return stats
}) as (options: ControllerOptions) => Effect.Effect<ControllerStats, never, Scope.Scope>
