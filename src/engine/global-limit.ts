// The hub-wide cap on concurrent reconciles, which a reconcile gives back while it waits on the network.
// The cap exists to bound the hub's own CPU and memory; a reconcile waiting for a member that does not
// answer uses neither, and if it held its permit for the request's whole timeout, a handful of
// black-holed members (4 workers × 8 members = 32 permits by default) would stop every other member's
// reconciles. So a reconcile holds a permit while it computes, lets it go for each API call, and takes
// one again (waiting its turn) when the answer is in.
import { Context, Effect, Semaphore } from "effect"

/** Whether the current fiber holds a permit of the hub-wide limit (set by `withPermit`). */
const HoldsPermit = Context.Reference<boolean>("fleetcheck/engine/HoldsGlobalPermit", {
  defaultValue: () => false,
})

export interface GlobalLimit {
  /** Runs a reconcile under one permit. */
  withPermit<A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R>
  /**
   * Runs an API call. Inside `withPermit`, the permit is given back for the call and taken again
   * after it; elsewhere (informers, probes) the call simply runs.
   */
  duringIo<A, E, R>(self: Effect.Effect<A, E, R>): Effect.Effect<A, E, R>
  /** Permits in use now. */
  readonly inUse: () => number
}

export const makeGlobalLimit = Effect.fnUntraced(function* (
  permits: number,
  onInUse: (delta: number) => void,
): Effect.fn.Return<GlobalLimit> {
  const semaphore = yield* Semaphore.make(permits)
  let inUse = 0
  const taken = Effect.sync(() => {
    inUse++
    onInUse(1)
  })
  const given = Effect.sync(() => {
    inUse--
    onInUse(-1)
  })
  const take = Effect.andThen(semaphore.take(1), taken)
  const give = Effect.andThen(semaphore.release(1), given)
  return {
    withPermit: (self) =>
      Effect.acquireUseRelease(
        take,
        () => Effect.provideService(self, HoldsPermit, true),
        () => give,
      ),
    duringIo: (self) =>
      Effect.gen(function* () {
        if (!(yield* HoldsPermit)) return yield* self
        return yield* Effect.acquireUseRelease(
          give,
          () => Effect.provideService(self, HoldsPermit, false),
          () => take,
        )
      }),
    inUse: () => inUse,
  }
})
