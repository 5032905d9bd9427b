// A fixed number of permits, handed out by priority: whoever waits in a lower class is served before
// anyone in a higher one, and within a class first come first served. A permit given back goes
// straight to the next waiter (no newcomer can take it over a waiter's head). A waiter that is
// interrupted gives its place up; one interrupted just after being served passes the permit on. A
// waiter whose news got more urgent while it waits moves up (to the back of its new class); it never
// moves down, so its place only improves.
//
// Nothing starves as long as each waiter waits for one use at a time and the waiters are bounded:
// the hub's status writers are (one per member), so a member in the last class waits at most until
// every member ahead of it has written once.
import { Clock, Deferred, Effect, Exit } from "effect"

export interface PriorityLimitHooks {
  /** Waiters added (+1) or gone (served or interrupted, −1). */
  readonly onWaiting: (delta: number) => void
  /** Permits taken (+1) or given back (−1). */
  readonly onInUse: (delta: number) => void
  /** How long a served waiter waited, in seconds (0 when a permit was free). */
  readonly onServed: (waitedSeconds: number) => void
}

/** While it waits, a waiter asks this every `everyMs` and moves up when the answer is a lower class. */
export interface Reprioritize {
  readonly everyMs: number
  readonly priority: Effect.Effect<number>
}

export interface PriorityLimit {
  /**
   * Runs `self` under one permit, waiting in `priority`'s class (0 first; out-of-range values are
   * clamped to the classes there are) while none is free.
   */
  withPermit<A, E, R>(
    priority: number,
    self: Effect.Effect<A, E, R>,
    reprioritize?: Reprioritize,
  ): Effect.Effect<A, E, R>
  /** Permits in use now. */
  readonly inUse: () => number
  /** Waiters now, every class. */
  readonly waiting: () => number
}

export const makePriorityLimit = (
  permits: number,
  classes: number,
  hooks: PriorityLimitHooks,
): PriorityLimit => {
  if (!Number.isInteger(permits) || permits < 1) throw new RangeError(`permits must be ≥ 1, got ${permits}`)
  if (!Number.isInteger(classes) || classes < 1) throw new RangeError(`classes must be ≥ 1, got ${classes}`)
  const queues: Array<Array<Deferred.Deferred<void>>> = Array.from({ length: classes }, () => [])
  let inUse = 0
  let waiting = 0

  const dequeued = () => {
    waiting--
    hooks.onWaiting(-1)
  }
  /** A permit given back: straight to the first waiter of the first class that has one. */
  const release = () => {
    for (const queue of queues) {
      const next = queue.shift()
      if (next === undefined) continue
      dequeued()
      Deferred.doneUnsafe(next, Exit.void)
      return
    }
    inUse--
    hooks.onInUse(-1)
  }

  const classOf = (priority: number) => Math.min(classes - 1, Math.max(0, Math.trunc(priority) || 0))

  /** Takes a permit; the wait itself is interruptible (restore), the bookkeeping around it is not. */
  const take = (
    priority: number,
    reprioritize: Reprioritize | undefined,
    restore: <A, E, R>(self: Effect.Effect<A, E, R>) => Effect.Effect<A, E, R>,
  ) =>
    Effect.gen(function* () {
      if (inUse < permits && waiting === 0) {
        inUse++
        hooks.onInUse(1)
        hooks.onServed(0)
        return
      }
      let cls = classOf(priority)
      const turn = Deferred.makeUnsafe<void>()
      queues[cls]!.push(turn)
      waiting++
      hooks.onWaiting(1)
      const since = yield* Clock.currentTimeMillis
      const moveUp = (to: number) =>
        Effect.sync(() => {
          const queue = queues[cls]!
          const at = queue.indexOf(turn)
          if (to >= cls || at < 0) return
          queue.splice(at, 1)
          queues[to]!.push(turn)
          cls = to
        })
      const movingUp =
        reprioritize === undefined
          ? Effect.never
          : Effect.forever(
              Effect.sleep(reprioritize.everyMs).pipe(
                Effect.andThen(reprioritize.priority),
                Effect.flatMap((p) => moveUp(classOf(p))),
              ),
            )
      yield* restore(Effect.raceFirst(Deferred.await(turn), movingUp)).pipe(
        Effect.onInterrupt(() =>
          Effect.sync(() => {
            if (Deferred.isDoneUnsafe(turn)) return release()
            const queue = queues[cls]!
            const at = queue.indexOf(turn)
            if (at >= 0) {
              queue.splice(at, 1)
              dequeued()
            }
          }),
        ),
      )
      hooks.onServed(((yield* Clock.currentTimeMillis) - since) / 1000)
    })

  return {
    withPermit: (priority, self, reprioritize) =>
      Effect.uninterruptibleMask((restore) =>
        Effect.andThen(
          take(priority, reprioritize, restore),
          restore(self).pipe(Effect.ensuring(Effect.sync(release))),
        ),
      ),
    inUse: () => inUse,
    waiting: () => waiting,
  }
}
