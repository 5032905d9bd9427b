// The per-member workqueue, with the contract of k8s.io/client-go/util/workqueue (queue.go,
// delaying_queue.go, rate_limiting_queue.go). All state changes are plain synchronous code: a JS
// turn is atomic, so what client-go guards with a mutex needs no lock here. Effect supplies time
// (Clock, so TestClock drives it in tests), suspension of idle getters and the delay loop's fiber.

import { Clock, Effect, type Fiber, type Scheduler, type Scope } from "effect"
import { defaultControllerRateLimiter, type RateLimiter } from "./rate-limiter.ts"

/** Optional observers, shaped after client-go's workqueue metrics; they must not throw. */
export interface WorkQueueMetricsHooks {
  /** A key became dirty (workqueue_adds_total). */
  readonly onAdd?: (key: string) => void
  /** The dirty count changed (workqueue_depth): keys waiting to be got, including re-adds in flight. */
  readonly onDepth?: (depth: number) => void
  /** A key was handed to a worker after waiting queuedMs (workqueue_queue_duration_seconds). */
  readonly onGet?: (key: string, queuedMs: number) => void
  /** A worker finished a key after workMs (workqueue_work_duration_seconds). */
  readonly onDone?: (key: string, workMs: number) => void
  /** Every addAfter / addRateLimited while running, as client-go counts it (workqueue_retries_total). */
  readonly onRetry?: (key: string) => void
}

export interface WorkQueueOptions {
  /** Used by addRateLimited / forget / numRequeues. Default: defaultControllerRateLimiter(). */
  readonly rateLimiter?: RateLimiter
  /** A label for logs and metrics, e.g. the member cluster's name. Default "". */
  readonly name?: string
  /** Metric observers. Default: none (and then no timestamps are taken on the hot path). */
  readonly metrics?: WorkQueueMetricsHooks
}

export type GetResult = { readonly key: string } | { readonly shutdown: true }

export interface WorkQueue {
  readonly name: string
  /** Marks the key as needing processing; ignored after shutdown, coalesced while already dirty. */
  add(key: string): Effect.Effect<void>
  /** Same as add, callable from synchronous code (event handlers). */
  addUnsafe(key: string): void
  /** Keys waiting to be got (not those being processed or waiting for a delay). */
  len(): number
  /** The next key (FIFO), now marked as processing; suspends while empty; shutdown once shut down and drained. */
  readonly get: Effect.Effect<GetResult>
  /** The worker is finished with the key; if it was re-added meanwhile, it is queued again. */
  done(key: string): Effect.Effect<void>
  /** Adds the key after delayMs (<= 0: now). While it waits, an earlier deadline replaces a later one. */
  addAfter(key: string, delayMs: number): Effect.Effect<void>
  /** addAfter(key, rateLimiter.when(key)). */
  addRateLimited(key: string): Effect.Effect<void>
  /** Clears the key's backoff history; does not remove it from the queue. */
  forget(key: string): Effect.Effect<void>
  numRequeues(key: string): number
  /** Wakes every waiting getter with shutdown; later adds are ignored; delayed keys are dropped. */
  readonly shutDown: Effect.Effect<void>
  /** As shutDown, then waits until every key being processed is done. */
  readonly shutDownWithDrain: Effect.Effect<void>
  shuttingDown(): boolean
}

/** Growable ring buffer: O(1) push and shift, unlike Array.prototype.shift on a large array. */
class RingQueue<A> {
  private buf: Array<A | undefined>
  private head = 0
  private size = 0

  // capacity stays a power of two, so indices wrap with a mask
  constructor(capacity = 16) {
    this.buf = new Array(capacity)
  }

  get length(): number {
    return this.size
  }

  push(value: A): void {
    if (this.size === this.buf.length) this.grow()
    this.buf[(this.head + this.size) & (this.buf.length - 1)] = value
    this.size++
  }

  shift(): A | undefined {
    if (this.size === 0) return undefined
    const value = this.buf[this.head]
    this.buf[this.head] = undefined
    this.head = (this.head + 1) & (this.buf.length - 1)
    this.size--
    return value
  }

  private grow(): void {
    const old = this.buf
    const next = new Array<A | undefined>(old.length * 2)
    for (let i = 0; i < this.size; i++) next[i] = old[(this.head + i) & (old.length - 1)]
    this.buf = next
    this.head = 0
  }
}

interface Waiting {
  readonly key: string
  readyAt: number
  // insertion order breaks ties, so keys due at the same instant are added in addAfter order
  readonly seq: number
  index: number
}

const before = (a: Waiting, b: Waiting): boolean =>
  a.readyAt < b.readyAt || (a.readyAt === b.readyAt && a.seq < b.seq)

/** Binary min-heap on readyAt with decrease-key, the waitForPriorityQueue of delaying_queue.go. */
class WaitingHeap {
  private readonly items: Array<Waiting> = []

  get length(): number {
    return this.items.length
  }

  peek(): Waiting | undefined {
    return this.items[0]
  }

  push(entry: Waiting): void {
    entry.index = this.items.length
    this.items.push(entry)
    this.up(entry.index)
  }

  pop(): Waiting | undefined {
    const items = this.items
    const top = items[0]
    if (top === undefined) return undefined
    const last = items.pop()!
    if (items.length > 0) {
      items[0] = last
      last.index = 0
      this.down(0)
    }
    return top
  }

  /** The entry's readyAt was lowered: restore the heap order (heap.Fix). */
  decreased(entry: Waiting): void {
    this.up(entry.index)
  }

  clear(): void {
    this.items.length = 0
  }

  private up(i: number): void {
    const items = this.items
    const entry = items[i]!
    while (i > 0) {
      const parentIndex = (i - 1) >> 1
      const parent = items[parentIndex]!
      if (!before(entry, parent)) break
      items[i] = parent
      parent.index = i
      i = parentIndex
    }
    items[i] = entry
    entry.index = i
  }

  private down(i: number): void {
    const items = this.items
    const n = items.length
    const entry = items[i]!
    while (true) {
      const left = 2 * i + 1
      if (left >= n) break
      const right = left + 1
      let child = left
      if (right < n && before(items[right]!, items[left]!)) child = right
      const childEntry = items[child]!
      if (!before(childEntry, entry)) break
      items[i] = childEntry
      childEntry.index = i
      i = child
    }
    items[i] = entry
    entry.index = i
  }
}

interface Sleeper {
  readonly resume: (effect: Effect.Effect<void>) => void
  readonly dispatcher: Scheduler.SchedulerDispatcher
}

const SHUTDOWN: GetResult = { shutdown: true }

// Wake-ups go through the sleeper's dispatcher rather than resuming inline: resuming inline would
// run the woken fiber inside the caller's add/done. TestClock's dispatcher also tracks these tasks.
const wake = (sleeper: Sleeper): void => sleeper.dispatcher.scheduleTask(() => sleeper.resume(Effect.void), 0)

/**
 * Builds a workqueue whose delay loop runs as a fiber in the current scope; closing the scope
 * shuts the queue down.
 */
export const makeWorkQueue = Effect.fnUntraced(function* (
  options: WorkQueueOptions = {},
): Effect.fn.Return<WorkQueue, never, Scope.Scope> {
  const limiter = options.rateLimiter ?? defaultControllerRateLimiter()
  const hooks = options.metrics
  const onAdd = hooks?.onAdd
  const onDepth = hooks?.onDepth
  const onGet = hooks?.onGet
  const onDone = hooks?.onDone
  const onRetry = hooks?.onRetry
  const clock = yield* Clock.clockWith(Effect.succeed)

  // queue.go state: queue holds dirty keys that are not processing, in FIFO order. Each map also
  // holds its key's metric timestamp (when it became dirty, when it was got; 0 when no hook observes
  // it, and then no clock is read): one map per set instead of a set plus a map of times saves five
  // hash operations per key handled, which is every reconcile.
  const queue = new RingQueue<string>()
  const dirty = new Map<string, number>()
  const processing = new Map<string, number>()
  let isShuttingDown = false
  let drain = false

  const getters: Array<Sleeper> = []
  const drainers: Array<Sleeper> = []

  // delaying_queue.go state: keys waiting for their deadline, one entry per key
  const heap = new WaitingHeap()
  const waitingByKey = new Map<string, Waiting>()
  let seq = 0
  // the deadline the loop sleeps until (Infinity: it sleeps until woken)
  let armedAt = Number.POSITIVE_INFINITY
  let loopSleeper: Sleeper | undefined
  // a wake-up that came while the loop was not parked, served by its next park
  let loopWakePending = false

  // getters are few (one per worker), so a plain array is fine for them
  const signalGetter = (): void => {
    const sleeper = getters.shift()
    if (sleeper !== undefined) wake(sleeper)
  }

  const wakeAll = (sleepers: Array<Sleeper>): void => {
    for (const sleeper of sleepers.splice(0)) wake(sleeper)
  }

  const wakeLoop = (): void => {
    const sleeper = loopSleeper
    if (sleeper === undefined) {
      loopWakePending = true
      return
    }
    loopSleeper = undefined
    wake(sleeper)
  }

  const remove = (sleepers: Array<Sleeper>, sleeper: Sleeper): void => {
    const i = sleepers.indexOf(sleeper)
    if (i !== -1) sleepers.splice(i, 1)
  }

  const addUnsafe = (key: string): void => {
    if (isShuttingDown || dirty.has(key)) return
    dirty.set(key, onGet === undefined ? 0 : clock.currentTimeMillisUnsafe())
    if (onAdd !== undefined) onAdd(key)
    if (onDepth !== undefined) onDepth(dirty.size)
    // a key being processed is re-queued by done, so no worker sees it twice at once
    if (processing.has(key)) return
    queue.push(key)
    signalGetter()
  }

  const tryGet = (): GetResult | undefined => {
    const key = queue.shift()
    if (key === undefined) return isShuttingDown ? SHUTDOWN : undefined
    const now = onGet === undefined && onDone === undefined ? 0 : clock.currentTimeMillisUnsafe()
    processing.set(key, onDone === undefined ? 0 : now)
    const addedAt = dirty.get(key)
    dirty.delete(key)
    if (onDepth !== undefined) onDepth(dirty.size)
    if (onGet !== undefined) onGet(key, addedAt === undefined ? 0 : now - addedAt)
    return { key }
  }

  const doneUnsafe = (key: string): void => {
    // client-go would also push a key that was never got; checking processing keeps the queue
    // free of duplicates even when done is misused
    const startedAt = processing.get(key)
    if (startedAt === undefined) return
    processing.delete(key)
    if (onDone !== undefined) onDone(key, clock.currentTimeMillisUnsafe() - startedAt)
    if (dirty.has(key)) {
      queue.push(key)
      signalGetter()
    } else if (processing.size === 0 && drainers.length > 0) {
      wakeAll(drainers)
    }
  }

  const addAfterUnsafe = (key: string, delayMs: number): void => {
    if (isShuttingDown) return
    if (onRetry !== undefined) onRetry(key)
    // written so that NaN also means now, as a non-positive Go duration does
    if (!(delayMs > 0)) {
      addUnsafe(key)
      return
    }
    const readyAt = clock.currentTimeMillisUnsafe() + delayMs
    const existing = waitingByKey.get(key)
    if (existing !== undefined) {
      // earliest deadline wins; a later one is ignored
      if (readyAt >= existing.readyAt) return
      existing.readyAt = readyAt
      heap.decreased(existing)
    } else {
      const entry: Waiting = { key, readyAt, seq: seq++, index: -1 }
      waitingByKey.set(key, entry)
      heap.push(entry)
    }
    if (readyAt < armedAt) wakeLoop()
  }

  const shutDownUnsafe = (): void => {
    drain = false
    isShuttingDown = true
    wakeAll(getters)
    wakeAll(drainers)
    // the delaying loop stops and its waiting keys are dropped, as in client-go
    heap.clear()
    waitingByKey.clear()
    wakeLoop()
  }

  const sleepUntilWoken = (list: Array<Sleeper>) =>
    Effect.withFiber<void>((fiber: Fiber.Fiber<unknown, unknown>) =>
      Effect.callback<void>((resume) => {
        const sleeper: Sleeper = { resume, dispatcher: fiber.currentDispatcher }
        list.push(sleeper)
        return Effect.sync(() => remove(list, sleeper))
      }),
    )

  const parkGetter = sleepUntilWoken(getters)
  const parkDrainer = sleepUntilWoken(drainers)

  const get: Effect.Effect<GetResult> = Effect.suspend(() => {
    const result = tryGet()
    return result !== undefined ? Effect.succeed(result) : waitAndGet
  })

  // A loop rather than recursion, so a getter that keeps losing races for keys does not grow its
  // stack. A getter woken for a key but interrupted before taking it passes the wake-up on, or
  // the key could sit in the queue while other getters sleep.
  const waitAndGet: Effect.Effect<GetResult> = Effect.gen(function* () {
    while (true) {
      yield* parkGetter
      const result = tryGet()
      if (result !== undefined) return result
    }
  }).pipe(
    Effect.onInterrupt(() =>
      Effect.sync(() => {
        if (queue.length > 0) signalGetter()
      }),
    ),
  )

  const awaitDrained: Effect.Effect<void> = Effect.gen(function* () {
    while (drain && processing.size > 0) yield* parkDrainer
  })

  // delaying_queue.go waitingLoop: add what is due, then sleep until the next deadline or a wake-up
  const parkLoop = Effect.withFiber<void>((fiber: Fiber.Fiber<unknown, unknown>) =>
    Effect.callback<void>((resume) => {
      if (loopWakePending) {
        loopWakePending = false
        return resume(Effect.void)
      }
      const sleeper: Sleeper = { resume, dispatcher: fiber.currentDispatcher }
      loopSleeper = sleeper
      return Effect.sync(() => {
        // the race's loser is interrupted later, possibly after the next park registered
        if (loopSleeper === sleeper) loopSleeper = undefined
      })
    }),
  )

  const loopStep: Effect.Effect<void> = Effect.suspend(() => {
    // this step reads the heap afresh: earlier wake-ups are served, and a sleeper left from the
    // last race is stale, so wake-ups from here on are remembered until the next park
    loopSleeper = undefined
    loopWakePending = false
    const now = clock.currentTimeMillisUnsafe()
    let next = heap.peek()
    while (next !== undefined && next.readyAt <= now) {
      heap.pop()
      waitingByKey.delete(next.key)
      addUnsafe(next.key)
      next = heap.peek()
    }
    if (next === undefined) {
      armedAt = Number.POSITIVE_INFINITY
      return parkLoop
    }
    armedAt = next.readyAt
    return Effect.raceFirst(Effect.sleep(next.readyAt - now), parkLoop)
  })

  yield* Effect.whileLoop({
    while: () => !isShuttingDown,
    body: () => loopStep,
    step: () => {},
  }).pipe(Effect.forkScoped)
  yield* Effect.addFinalizer(() => Effect.sync(shutDownUnsafe))

  return {
    name: options.name ?? "",
    add: (key) => Effect.sync(() => addUnsafe(key)),
    addUnsafe,
    len: () => queue.length,
    get,
    done: (key) => Effect.sync(() => doneUnsafe(key)),
    addAfter: (key, delayMs) => Effect.sync(() => addAfterUnsafe(key, delayMs)),
    addRateLimited: (key) =>
      Effect.sync(() => addAfterUnsafe(key, limiter.when(key, clock.currentTimeMillisUnsafe()))),
    forget: (key) => Effect.sync(() => limiter.forget(key)),
    numRequeues: (key) => limiter.numRequeues(key),
    shutDown: Effect.sync(shutDownUnsafe),
    shutDownWithDrain: Effect.suspend(() => {
      shutDownUnsafe()
      drain = true
      return awaitDrained
    }),
    shuttingDown: () => isShuttingDown,
  }
})
