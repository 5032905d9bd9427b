// Our reflector (client-go tools/cache/reflector.go) plus a shared informer's handler fan-out:
// paged LIST → replace the store (synthetic deletes for what vanished) → WATCH from the list's
// resourceVersion with bookmarks and a 5-10 min client timeout → re-watch from the last RV when a
// watch ends, relist on 410 Expired, and back off (0.8 s → 30 s, jittered, reset after 2 min of
// healthy watching) on anything else. It never stops on its own: every failure is logged, counted
// and retried until the informer's scope closes. client-node's informer stops for good on most of
// these failures and crashes the process on a throwing handler (STYLE.md, "Known traps").
import { Clock, Deferred, Effect, Latch, Random, Result, type Scope, Stream } from "effect"
import {
  isGone,
  isWatchInactive,
  KubeApiError,
  type KubeClient,
  type KubeError,
  KubeTransportError,
  resourcePath,
  type WatchEvent,
} from "../../kube/client.ts"
import { type Indexers, keyOf, makeStore, resourceVersionOf, type StoreView, stripObject } from "./store.ts"

export interface InformerHandler<T> {
  onAdd?(obj: T): void
  onUpdate?(oldObj: T, newObj: T): void
  onDelete?(obj: T): void
}

export interface InformerOptions<T> {
  readonly client: KubeClient
  /** group "" is the core group. */
  readonly resource: { readonly group: string; readonly version: string; readonly plural: string }
  /** Watch one namespace only; default all namespaces. */
  readonly namespace?: string
  readonly labelSelector?: string
  /** LIST page size (limit); default 500. */
  readonly pageSize?: number
  /** Every resyncMs, every cached object is re-delivered as onUpdate(obj, obj); 0 = off. */
  readonly resyncMs: number
  /** Secondary indexes, e.g. by controller-owner uid. */
  readonly indexers?: Indexers<T>
  /**
   * What the cache keeps of each object (controller-runtime's cache TransformFunc): applied, after
   * managedFields are stripped, to every listed object and every watch event's object before the store
   * and the handlers see it. Pure; it must keep every field that readers of the store and the handlers
   * use. Default: the object as stripped.
   */
  readonly transform?: (obj: T) => T
  /** For logs; default the plural (plus group). */
  readonly name?: string
  /** Backoff after a failure; defaults are client-go's reflector timings. */
  readonly backoff?: {
    readonly initialMs?: number
    readonly maxMs?: number
    /** Healthy watching for this long resets the backoff to initialMs. */
    readonly resetAfterMs?: number
  }
  /** Passed to client.watch (default: the client's, 90 s). */
  readonly watchInactivityTimeoutMs?: number
  /** Told of every LIST/WATCH failure as it happens (e.g. so a prober can check the server at once). */
  readonly onFailure?: (error: KubeError) => void
}

export interface Informer<T> {
  readonly name: string
  readonly store: StoreView<T>
  /** True once the first complete LIST has been stored and delivered. */
  hasSynced(): boolean
  /** Completes once hasSynced(); never fails, so callers bound it with their own timeout. */
  readonly awaitSynced: Effect.Effect<void>
  /**
   * Handlers run synchronously on the informer's fiber with objects already in the store: they must
   * only enqueue keys. A throw is caught, logged and counted. A handler added after sync first gets
   * an onAdd for every cached object. Returns a function that removes the handler.
   */
  addHandler(handler: InformerHandler<T>): () => void
  /** LIST pages received. */
  readonly listCount: number
  /** Watches started after the first one (reconnects, re-watches after a normal end, after a relist). */
  readonly watchRestarts: number
  /** Complete LISTs after the initial one (410 Expired, or a watch failure that lost the RV). */
  readonly relists: number
  /** LIST and WATCH failures (410 included). */
  readonly errors: number
  /** Handler throws caught. */
  readonly handlerErrors: number
  /** Watch events applied (bookmarks excluded). */
  readonly events: number
  /** The resourceVersion the next watch resumes from (undefined while a relist is needed). */
  readonly resourceVersion: string | undefined
  /** The last LIST/WATCH failure, for status reporting; cleared by the next successful LIST or watch event. */
  readonly lastError: string | undefined
  /** HTTP status of the last failure when the API server answered it (401, 403, 404, ...). */
  readonly lastErrorStatus: number | undefined
  /**
   * Clock time of the first LIST/WATCH failure since the informer last worked (undefined while it
   * works): a LIST that succeeds or a watch the server accepts ends it. Callers decide how long a
   * failing informer may still be trusted.
   */
  readonly failingSince: number | undefined
  /**
   * Ends a backoff wait now and restarts the backoff from its first step: the caller knows the server
   * answers again (a probe succeeded), so the cache should catch up at once rather than after up to 30 s.
   */
  resumeNow(): void
  /** Hooks for tests and fault injection. */
  readonly testing: {
    /** Aborts the current watch; the next one starts from `resourceVersion` when given (e.g. "1" forces a 410). */
    restartWatch(resourceVersion?: string): void
    /** Aborts the current watch and holds the loop until resume(). */
    pause(): void
    resume(): void
  }
}

interface ListResponse<T> {
  readonly metadata?: { readonly resourceVersion?: string; readonly continue?: string }
  readonly items?: Array<T>
}

interface StatusObject {
  readonly code?: number
  readonly reason?: string
  readonly message?: string
}

class WatchKicked {
  readonly _tag = "WatchKicked"
}

const describe = (e: KubeError): string =>
  e._tag === "KubeApiError" ? `${e.status} ${e.reason || "Error"}: ${e.message}` : e.message

/** A handler error is logged at most once per this interval (with a count of those suppressed). */
const handlerLogIntervalMs = 5_000
const maxContinueRestarts = 3

export const makeInformer = Effect.fnUntraced(function* <T>(
  options: InformerOptions<T>,
): Effect.fn.Return<Informer<T>, never, Scope.Scope> {
  const { client, resource } = options
  const pageSize = options.pageSize ?? 500
  const resyncMs = options.resyncMs
  const initialBackoffMs = options.backoff?.initialMs ?? 800
  const maxBackoffMs = options.backoff?.maxMs ?? 30_000
  const resetAfterMs = options.backoff?.resetAfterMs ?? 120_000
  const resourceName = resource.group === "" ? resource.plural : `${resource.plural}.${resource.group}`
  const name = options.name ?? resourceName
  const path = resourcePath({ ...resource, namespace: options.namespace })
  const annotations = {
    cluster: client.cluster,
    resource: resourceName,
    informer: name,
    ...(options.namespace ? { namespace: options.namespace } : {}),
  }

  // Handler errors are logged from synchronous code through the caller's context (its logger).
  const context = yield* Effect.context<never>()
  const runLog = Effect.runForkWith(context)

  let handlerErrors = 0
  let handlerErrorsUnlogged = 0
  let handlerLastLogAt = 0
  const handlerFailed = (what: string, obj: unknown, error: unknown) => {
    handlerErrors++
    const now = Date.now()
    if (now - handlerLastLogAt < handlerLogIntervalMs) {
      handlerErrorsUnlogged++
      return
    }
    const suppressed = handlerErrorsUnlogged
    handlerLastLogAt = now
    handlerErrorsUnlogged = 0
    runLog(
      Effect.logError(`informer handler ${what} threw; the event was still delivered to other handlers`).pipe(
        Effect.annotateLogs({
          ...annotations,
          key: keyOf(obj),
          error: error instanceof Error ? (error.stack ?? error.message) : String(error),
          ...(suppressed > 0 ? { suppressedSinceLastReport: suppressed } : {}),
        }),
      ),
    )
  }

  const transform = options.transform
  const prepare = (obj: T): T => (transform === undefined ? stripObject(obj) : transform(stripObject(obj)))

  const store = makeStore<T>({
    ...(options.indexers ? { indexers: options.indexers } : {}),
    onIndexerError: (index, key, error) =>
      handlerFailed(`indexer ${index}`, { metadata: { name: key } }, error),
  })

  // Copy-on-write, so a handler that adds or removes handlers does not disturb the loop delivering.
  let handlers: ReadonlyArray<InformerHandler<T>> = []

  const deliverAdd = (obj: T, to: ReadonlyArray<InformerHandler<T>> = handlers) => {
    for (const h of to) {
      if (h.onAdd === undefined) continue
      try {
        h.onAdd(obj)
      } catch (e) {
        handlerFailed("onAdd", obj, e)
      }
    }
  }
  const deliverUpdate = (oldObj: T, newObj: T) => {
    for (const h of handlers) {
      if (h.onUpdate === undefined) continue
      try {
        h.onUpdate(oldObj, newObj)
      } catch (e) {
        handlerFailed("onUpdate", newObj, e)
      }
    }
  }
  const deliverDelete = (obj: T) => {
    for (const h of handlers) {
      if (h.onDelete === undefined) continue
      try {
        h.onDelete(obj)
      } catch (e) {
        handlerFailed("onDelete", obj, e)
      }
    }
  }

  const synced = yield* Deferred.make<void>()
  let isSynced = false
  let listCount = 0
  let watchStarts = 0
  let watchRestarts = 0
  let relists = 0
  let errors = 0
  let events = 0
  let lastError: string | undefined
  let lastErrorStatus: number | undefined
  let failingSince: number | undefined
  let wake = Deferred.makeUnsafe<void>()
  const recovered = () => {
    failingSince = undefined
  }
  // The RV the next watch starts from; undefined means a LIST is needed first.
  let rv: string | undefined
  let forcedRv: string | undefined
  let eventsThisWatch = 0
  let kick = Deferred.makeUnsafe<void>()
  const running = Latch.makeUnsafe(true)

  const statusError = (s: StatusObject | undefined): KubeApiError =>
    new KubeApiError({
      cluster: client.cluster,
      method: "WATCH",
      path,
      status: typeof s?.code === "number" ? s.code : 500,
      reason: typeof s?.reason === "string" ? s.reason : "",
      message: String(s?.message ?? "watch ERROR event").slice(0, 512),
    })

  // Synchronous from parse to handlers: one Effect step per chunk of events, not per event.
  const applyEvents = (batch: ReadonlyArray<WatchEvent>): KubeError | undefined => {
    for (const ev of batch) {
      switch (ev.type) {
        case "ADDED":
        case "MODIFIED": {
          const obj = prepare(ev.object as T)
          const old = store.upsert(obj)
          rv = resourceVersionOf(obj) ?? rv
          events++
          eventsThisWatch++
          if (old === undefined) deliverAdd(obj)
          else deliverUpdate(old, obj)
          break
        }
        case "DELETED": {
          const obj = prepare(ev.object as T)
          store.delete(keyOf(obj))
          rv = resourceVersionOf(obj) ?? rv
          events++
          eventsThisWatch++
          // The event carries the final state, fresher than the cached copy.
          deliverDelete(obj)
          break
        }
        case "BOOKMARK":
          rv = resourceVersionOf(ev.object) ?? rv
          eventsThisWatch++
          break
        case "ERROR":
          return statusError(ev.object as StatusObject)
        default:
          return new KubeTransportError({
            cluster: client.cluster,
            method: "WATCH",
            path,
            message: `unknown watch event type ${JSON.stringify(String((ev as { type: unknown }).type)).slice(0, 64)}`,
          })
      }
    }
    if (lastError !== undefined) lastError = undefined
    if (failingSince !== undefined) recovered()
    return undefined
  }

  const listAll = Effect.gen(function* () {
    let restarts = 0
    while (true) {
      const items: Array<T> = []
      let cont: string | undefined
      let listRv = ""
      let expired = false
      do {
        const page = yield* Effect.result(
          client.request<ListResponse<T>>({
            method: "GET",
            path,
            // No resourceVersion: a consistent (quorum) read, which honours limit/continue.
            query: { limit: String(pageSize), continue: cont, labelSelector: options.labelSelector },
            timeoutMs: 60_000,
          }),
        )
        if (Result.isFailure(page)) {
          if (cont !== undefined && isGone(page.failure) && restarts < maxContinueRestarts) {
            expired = true
            break
          }
          return yield* Effect.fail(page.failure)
        }
        listCount++
        // Strip (and transform) page by page, so a big relist never holds every full object at once.
        for (const item of page.success.items ?? []) items.push(prepare(item))
        cont = page.success.metadata?.continue || undefined
        listRv = page.success.metadata?.resourceVersion ?? ""
      } while (cont !== undefined)
      if (!expired) return { items, resourceVersion: listRv }
      restarts++
      yield* Effect.logInfo("continue token expired mid-list; restarting the LIST")
    }
  }).pipe(
    Effect.withSpan(
      "informer.list",
      {
        root: true,
        attributes: { "k8s.cluster.name": client.cluster, "k8s.resource": resourceName, informer: name },
      },
      { captureStackTrace: false },
    ),
  )

  const applyList = (listed: { items: Array<T>; resourceVersion: string }) => {
    const result = store.replace(listed.items)
    for (const obj of result.deleted) deliverDelete(obj)
    for (const obj of result.added) deliverAdd(obj)
    for (const [oldObj, newObj] of result.updated) deliverUpdate(oldObj, newObj)
    rv = listed.resourceVersion
    lastError = undefined
    recovered()
    return result
  }

  const watchOnce = (from: string, timeoutSeconds: number) =>
    client
      .watch(
        path,
        {
          resourceVersion: from,
          allowWatchBookmarks: "true",
          timeoutSeconds: String(timeoutSeconds),
          ...(options.labelSelector ? { labelSelector: options.labelSelector } : {}),
        },
        {
          ...(options.watchInactivityTimeoutMs !== undefined
            ? { inactivityTimeoutMs: options.watchInactivityTimeoutMs }
            : {}),
          onConnected: recovered,
        },
      )
      .pipe(
        Stream.runForEachArray((batch) => {
          const err = applyEvents(batch)
          return err === undefined ? Effect.void : Effect.fail(err)
        }),
      )

  let backoffMs = initialBackoffMs
  let healthySince: number | undefined
  let lastGoneAt: number | undefined
  /** A watch ran (an event, or 1 s without failing) since the last 410: a 410 now is a new one. */
  let watchedSinceGone = false

  const onFailure = Effect.fnUntraced(function* (error: KubeError, phase: "list" | "watch") {
    errors++
    options.onFailure?.(error)
    lastError = `${phase}: ${describe(error)}`
    lastErrorStatus = error._tag === "KubeApiError" ? error.status : undefined
    const now = yield* Clock.currentTimeMillis
    failingSince ??= now
    if (healthySince !== undefined && now - healthySince >= resetAfterMs) backoffMs = initialBackoffMs
    healthySince = undefined
    const gone = isGone(error)
    let waitMs: number
    const retryAfter = error._tag === "KubeApiError" ? error.retryAfterSeconds : undefined
    if (gone && (lastGoneAt === undefined || now - lastGoneAt >= resetAfterMs || watchedSinceGone)) {
      // An expired RV says nothing about the server's health (it is routine after a restart or a long
      // gap), so it relists at once; only a storm of them (410 again before any watch ran) backs off.
      waitMs = 0
    } else if (retryAfter !== undefined) {
      // The server answered and said when to come back (429 while a restarted API server initialises
      // its watch cache, 503 before its paths are installed, overload): as asked, and without growing
      // the backoff, or a few such answers in a row after a restart left the cache seconds behind.
      waitMs = Math.min(maxBackoffMs, Math.max(initialBackoffMs, retryAfter * 1000))
    } else {
      const jitter = yield* Random.next
      waitMs = Math.min(maxBackoffMs, Math.round(backoffMs * (1 + jitter)))
      backoffMs = Math.min(maxBackoffMs, backoffMs * 2)
    }
    if (gone) {
      lastGoneAt = now
      watchedSinceGone = false
    }
    const fields = {
      phase,
      error: describe(error),
      retryInMs: waitMs,
      failures: errors,
      ...(error._tag === "KubeApiError" ? { status: error.status } : {}),
      ...(gone ? { relist: true } : {}),
    }
    if (gone) yield* Effect.logInfo("resourceVersion expired; relisting").pipe(Effect.annotateLogs(fields))
    else
      yield* Effect.logWarning("list/watch failed; retrying with backoff").pipe(Effect.annotateLogs(fields))
    if (waitMs > 0) {
      // Only a resumeNow() during this wait ends it early.
      wake = Deferred.makeUnsafe<void>()
      const woken = yield* Effect.raceFirst(
        Effect.sleep(waitMs).pipe(Effect.as(false)),
        Deferred.await(wake).pipe(Effect.as(true)),
      )
      if (woken) {
        backoffMs = initialBackoffMs
        yield* Effect.logInfo("server answers again; retrying list/watch now")
      }
    }
  })

  const loop = Effect.gen(function* () {
    while (true) {
      yield* running.await
      if (rv === undefined) {
        const started = yield* Clock.currentTimeMillis
        const pagesBefore = listCount
        const listed = yield* Effect.result(listAll)
        if (Result.isFailure(listed)) {
          yield* onFailure(listed.failure, "list")
          continue
        }
        const result = applyList(listed.success)
        if (isSynced) relists++
        const fields = {
          objects: store.size,
          pages: listCount - pagesBefore,
          resourceVersion: rv ?? "",
          tookMs: (yield* Clock.currentTimeMillis) - started,
          added: result.added.length,
          updated: result.updated.length,
          deleted: result.deleted.length,
        }
        if (!isSynced) {
          isSynced = true
          yield* Deferred.succeed(synced, undefined)
          yield* Effect.logInfo("informer synced").pipe(Effect.annotateLogs(fields))
        } else {
          yield* Effect.logInfo("informer relisted").pipe(Effect.annotateLogs(fields))
        }
      }
      yield* running.await
      if (forcedRv !== undefined) {
        rv = forcedRv
        forcedRv = undefined
      }
      const from = rv ?? ""
      const started = yield* Clock.currentTimeMillis
      healthySince ??= started
      watchStarts++
      if (watchStarts > 1) watchRestarts++
      eventsThisWatch = 0
      kick = Deferred.makeUnsafe<void>()
      const timeoutSeconds = yield* Random.nextIntBetween(300, 600)
      const outcome = yield* Effect.result(
        Effect.raceFirst(
          watchOnce(from, timeoutSeconds),
          Deferred.await(kick).pipe(Effect.as(new WatchKicked())),
        ),
      )
      // The watch ran: it delivered something, or lasted 1 s.
      const ran = eventsThisWatch > 0 || (yield* Clock.currentTimeMillis) - started >= 1000
      if (ran) watchedSinceGone = true
      if (Result.isSuccess(outcome)) {
        if (outcome.success instanceof WatchKicked) continue
        // client-go's "very short watch": a watch that closes at once with nothing in it is a failure,
        // or a misbehaving server would have us re-watch in a hot loop.
        if (!ran) {
          yield* onFailure(
            new KubeTransportError({
              cluster: client.cluster,
              method: "WATCH",
              path,
              message: "watch closed within 1 s without any event",
            }),
            "watch",
          )
        }
        continue
      }
      const error = outcome.failure
      if (isWatchInactive(error)) {
        // Healthy but silent: an apiserver sends no bookmarks for a resource it has seen no event for
        // since it started (its etcd progress notifications come every 10 min), so a quiet watch is
        // routine. Re-watch from the same RV at once; a dead server shows up as that watch failing.
        yield* Effect.logDebug("watch silent; re-watching").pipe(
          Effect.annotateLogs({ error: describe(error) }),
        )
        continue
      }
      // 410: the RV expired. 401/403/404: the identity lost its rights or the resource (its CRD) went
      // away; whatever comes back must be listed afresh, never re-watched from the old RV.
      if (isGone(error) || (error._tag === "KubeApiError" && [401, 403, 404].includes(error.status)))
        rv = undefined
      yield* onFailure(error, "watch")
    }
  }).pipe(Effect.annotateLogs(annotations))

  yield* Effect.forkScoped(loop)

  if (resyncMs > 0) {
    const resync = Effect.sync(() => {
      if (!isSynced) return
      for (const obj of store.list()) deliverUpdate(obj, obj)
    })
    yield* Effect.forkScoped(Effect.forever(Effect.andThen(Effect.sleep(resyncMs), resync)))
  }

  const informer: Informer<T> = {
    name,
    store: store.view,
    hasSynced: () => isSynced,
    awaitSynced: Deferred.await(synced),
    addHandler: (handler) => {
      handlers = [...handlers, handler]
      if (isSynced) for (const obj of store.list()) deliverAdd(obj, [handler])
      return () => {
        handlers = handlers.filter((h) => h !== handler)
      }
    },
    get listCount() {
      return listCount
    },
    get watchRestarts() {
      return watchRestarts
    },
    get relists() {
      return relists
    },
    get errors() {
      return errors
    },
    get handlerErrors() {
      return handlerErrors
    },
    get events() {
      return events
    },
    get resourceVersion() {
      return rv
    },
    get lastError() {
      return lastError
    },
    get lastErrorStatus() {
      return lastErrorStatus
    },
    get failingSince() {
      return failingSince
    },
    resumeNow: () => {
      Deferred.doneUnsafe(wake, Effect.void)
    },
    testing: {
      restartWatch: (resourceVersion) => {
        if (resourceVersion !== undefined) forcedRv = resourceVersion
        Deferred.doneUnsafe(kick, Effect.void)
      },
      pause: () => {
        running.closeUnsafe()
        Deferred.doneUnsafe(kick, Effect.void)
      },
      resume: () => {
        running.openUnsafe()
      },
    },
  }
  return informer
})
