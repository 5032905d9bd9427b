// One hub-wide timer for every member's MemberCluster status round (ADR 0010, decision 10).
// Each member's round ran in its own fiber sleeping --status-interval between rounds: at 1,000 members
// 500 timers and fiber resumptions a second, each paying Effect's suspension and the timer's machinery,
// for rounds that nearly always find nothing to write. Here one fiber ticks: a member's round is a plain
// function, called every interval in the member's slot (the interval is cut into slots so the rounds are
// spread, not one burst), which hands the member's fiber only what has effects (a log line, a write).
import { Cause, Clock, Effect, type Scope } from "effect"

export interface StatusTicker {
  /**
   * Calls `round(now)` every interval until the current scope closes (the member stops). The round must
   * not block: it does the plain part and wakes the member's own fiber for anything effectful.
   */
  readonly register: (name: string, round: (now: number) => void) => Effect.Effect<void, never, Scope.Scope>
  /** Rounds registered now. */
  readonly size: () => number
}

/** Slots are at least this long: a short interval (tests) is cut into fewer of them. */
const minSlotMs = 100
const maxSlots = 20

interface Registered {
  readonly name: string
  readonly round: (now: number) => void
}

export const makeStatusTicker = Effect.fnUntraced(function* (intervalMs: number) {
  const slotCount = Math.max(1, Math.min(maxSlots, Math.floor(intervalMs / minSlotMs)))
  const slotMs = intervalMs / slotCount
  const slots: Array<Set<Registered>> = Array.from({ length: slotCount }, () => new Set())
  let next = 0

  const tick = Effect.gen(function* () {
    const now = yield* Clock.currentTimeMillis
    const slot = slots[next]!
    next = (next + 1) % slotCount
    const failed: Array<{ readonly name: string; readonly error: unknown }> = []
    for (const r of slot) {
      try {
        r.round(now)
      } catch (error) {
        // One member's broken round must not stop the others'; it is logged, and tried again next time.
        failed.push({ name: r.name, error })
      }
    }
    for (const f of failed)
      yield* Effect.logError("member status round failed").pipe(
        Effect.annotateLogs({
          cluster: f.name,
          error: Cause.pretty(Cause.die(f.error)),
        }),
      )
  })
  yield* Effect.forkScoped(Effect.forever(Effect.andThen(Effect.sleep(slotMs), tick)))

  const ticker: StatusTicker = {
    register: (name, round) =>
      Effect.acquireRelease(
        Effect.sync(() => {
          const r: Registered = { name, round }
          // The emptiest slot: members spread evenly over the interval whatever order they come and go in.
          let slot = slots[0]!
          for (const s of slots) if (s.size < slot.size) slot = s
          slot.add(r)
          return { r, slot }
        }),
        ({ r, slot }) => Effect.sync(() => void slot.delete(r)),
      ).pipe(Effect.asVoid),
    size: () => slots.reduce((n, s) => n + s.size, 0),
  }
  return ticker
})
