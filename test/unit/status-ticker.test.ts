// The hub-wide timer of the members' status rounds: every registered round once per interval, spread
// over the interval's slots, until its member's scope closes; one member's failing round stops no other.
import { assert, describe, it } from "@effect/vitest"
import { Effect, Exit, Scope } from "effect"
import { TestClock } from "effect/testing"
import { makeStatusTicker } from "../../src/hub/status-ticker.ts"

const intervalMs = 2_000

/** A member's registration in a scope of its own (the member's life), counting its rounds. */
const member = (ticker: Effect.Success<ReturnType<typeof makeStatusTicker>>, name: string, throws = false) =>
  Effect.gen(function* () {
    const scope = yield* Scope.make()
    const rounds: number[] = []
    yield* ticker
      .register(name, (now) => {
        rounds.push(now)
        if (throws) throw new Error(`${name} broke`)
      })
      .pipe(Scope.provide(scope))
    return { rounds, stop: Scope.close(scope, Exit.void) }
  })

describe("status ticker", () => {
  it.effect("calls every member's round once per interval, spread over the interval", () =>
    Effect.gen(function* () {
      const ticker = yield* makeStatusTicker(intervalMs)
      const members = yield* Effect.forEach(["a", "b", "c", "d", "e"], (n) => member(ticker, n))
      assert.strictEqual(ticker.size(), 5)
      // after one slot (a twentieth of the interval) only that slot's member had its round
      yield* TestClock.adjust(intervalMs / 20)
      assert.strictEqual(members.filter((m) => m.rounds.length === 1).length, 1)
      yield* TestClock.adjust(intervalMs - intervalMs / 20)
      for (const m of members) assert.strictEqual(m.rounds.length, 1)
      yield* TestClock.adjust(intervalMs * 3)
      for (const m of members) {
        assert.strictEqual(m.rounds.length, 4)
        // its rounds an interval apart, and no two members in the same slot while slots are free
        assert.deepStrictEqual(
          m.rounds.slice(1).map((t, i) => t - m.rounds[i]!),
          [intervalMs, intervalMs, intervalMs],
        )
      }
      assert.strictEqual(new Set(members.map((m) => m.rounds[0])).size, 5)
    }).pipe(Effect.scoped),
  )

  it.effect("a member that stopped has no more rounds; the others go on, and a new one joins", () =>
    Effect.gen(function* () {
      const ticker = yield* makeStatusTicker(intervalMs)
      const a = yield* member(ticker, "a")
      const b = yield* member(ticker, "b")
      yield* TestClock.adjust(intervalMs)
      yield* a.stop
      assert.strictEqual(ticker.size(), 1)
      const c = yield* member(ticker, "c")
      yield* TestClock.adjust(intervalMs * 2)
      assert.strictEqual(a.rounds.length, 1)
      assert.strictEqual(b.rounds.length, 3)
      assert.strictEqual(c.rounds.length, 2)
      // the stopped member's slot is the emptiest again: the new one took it
      assert.strictEqual(c.rounds[0]! % intervalMs, a.rounds[0]! % intervalMs)
    }).pipe(Effect.scoped),
  )

  it.effect("a round that throws stops no other round, and its member is tried again", () =>
    Effect.gen(function* () {
      // a short interval is one slot: both members share it, the broken one first
      const ticker = yield* makeStatusTicker(100)
      const broken = yield* member(ticker, "broken", true)
      const fine = yield* member(ticker, "fine")
      yield* TestClock.adjust(300)
      assert.strictEqual(broken.rounds.length, 3)
      assert.strictEqual(fine.rounds.length, 3)
    }).pipe(Effect.scoped),
  )

  it.effect("stops with its scope", () =>
    Effect.gen(function* () {
      const scope = yield* Scope.make()
      const ticker = yield* makeStatusTicker(intervalMs).pipe(Scope.provide(scope))
      const a = yield* member(ticker, "a")
      yield* TestClock.adjust(intervalMs)
      yield* Scope.close(scope, Exit.void)
      yield* TestClock.adjust(intervalMs * 3)
      assert.strictEqual(a.rounds.length, 1)
    }),
  )
})
