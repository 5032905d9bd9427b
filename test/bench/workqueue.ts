// Workqueue throughput, through the public Effect API (what workers pay), on the live clock.
// Run: node test/bench/workqueue.ts   (prints "workqueue <what>: <n> ops/s" lines; well under 30 s)

import { Effect, Fiber } from "effect"
import { makeWorkQueue, type WorkQueue } from "../../src/engine/workqueue/workqueue.ts"

const keysFor = (n: number): Array<string> =>
  Array.from({ length: n }, (_, i) => `member-1/ns-${i % 97}/check-${i}`)

const rate = (ops: number, ms: number): number => Math.round((ops * 1000) / ms)

const print = (what: string, opsPerSec: number): void => {
  console.log(`workqueue ${what}: ${opsPerSec} ops/s`)
}

/** Best of several rounds: the least disturbed by GC and by other load on the machine. */
const best = (rounds: number, round: () => Effect.Effect<number>) =>
  Effect.gen(function* () {
    let top = 0
    for (let i = 0; i < rounds; i++) top = Math.max(top, yield* round())
    return top
  })

const timed = <A>(effect: Effect.Effect<A>) =>
  Effect.gen(function* () {
    const start = performance.now()
    yield* effect
    return performance.now() - start
  })

const cycles = (q: WorkQueue, keys: ReadonlyArray<string>) =>
  Effect.gen(function* () {
    for (const key of keys) yield* q.add(key)
    for (let i = 0; i < keys.length; i++) {
      const result = yield* q.get
      if ("shutdown" in result) return
      yield* q.done(result.key)
    }
  })

const program = Effect.gen(function* () {
  // the floor: one yield* of an Effect.sync, which every queue operation pays once
  {
    const n = 300_000
    const noop = Effect.sync(() => {})
    const ops = yield* best(3, () =>
      Effect.map(
        timed(
          Effect.gen(function* () {
            for (let i = 0; i < n; i++) yield* noop
          }),
        ),
        (ms) => rate(n, ms),
      ),
    )
    print("baseline yield* Effect.sync", ops)
  }

  const q = yield* makeWorkQueue({ name: "bench" })

  // add + get + done for N distinct keys: the reconcile path minus the reconcile
  for (const n of [10_000, 100_000]) {
    const keys = keysFor(n)
    const ops = yield* best(5, () => Effect.map(timed(cycles(q, keys)), (ms) => rate(n, ms)))
    // one op = one full cycle (add, get, done) of one key
    print(`add+get+done ${n / 1000}k keys`, ops)
  }

  // a resync storm: the same 1,000 keys added over and over before any worker gets them
  {
    const keys = keysFor(1_000)
    const repeats = 200
    const ops = yield* best(3, () =>
      Effect.map(
        timed(
          Effect.gen(function* () {
            for (let r = 0; r < repeats; r++) for (const key of keys) yield* q.add(key)
          }),
        ),
        (ms) => rate(keys.length * repeats, ms),
      ),
    )
    print("dedup add 1k keys x200", ops)
    while (q.len() > 0) {
      const result = yield* q.get
      if (!("shutdown" in result)) yield* q.done(result.key)
    }
  }

  // addAfter: heap inserts for distinct keys, then earliest-wins updates of keys already waiting
  {
    const n = 100_000
    const keys = keysFor(n)
    let seed = 7
    const delays = keys.map(() => {
      seed = (seed * 1103515245 + 12345) % 2 ** 31
      return 3_600_000 + (seed % 3_600_000)
    })
    let insert = 0
    let update = 0
    for (let round = 0; round < 3; round++) {
      const [ins, upd] = yield* Effect.scoped(
        Effect.gen(function* () {
          const dq = yield* makeWorkQueue()
          const msInsert = yield* timed(
            Effect.gen(function* () {
              for (let i = 0; i < n; i++) yield* dq.addAfter(keys[i]!, delays[i]!)
            }),
          )
          // earlier deadlines for every key: decrease-key on a full heap
          const msUpdate = yield* timed(
            Effect.gen(function* () {
              for (let i = 0; i < n; i++) yield* dq.addAfter(keys[i]!, delays[i]! - 1_000_000)
            }),
          )
          return [rate(n, msInsert), rate(n, msUpdate)] as const
        }),
      )
      insert = Math.max(insert, ins)
      update = Math.max(update, upd)
    }
    print(`addAfter insert ${n / 1000}k keys`, insert)
    print(`addAfter earlier-deadline ${n / 1000}k keys`, update)
  }

  // delayed keys coming due: 50,000 keys due within ~20 ms, timed until all are queued
  {
    const n = 50_000
    const keys = keysFor(n)
    const ops = yield* best(3, () =>
      Effect.scoped(
        Effect.gen(function* () {
          const dq = yield* makeWorkQueue()
          const start = performance.now()
          for (let i = 0; i < n; i++) yield* dq.addAfter(keys[i]!, 1 + (i % 20))
          while (dq.len() < n) yield* Effect.sleep(1)
          return rate(n, performance.now() - start)
        }),
      ),
    )
    // includes the ~20 ms timer wait itself
    print(`addAfter 1-20ms until queued ${n / 1000}k keys`, ops)
  }

  // wake-ups: 4 worker fibers blocked in get, a producer adding distinct keys in small bursts
  {
    const n = 100_000
    const keys = keysFor(n)
    const ops = yield* best(3, () =>
      Effect.scoped(
        Effect.gen(function* () {
          const wq = yield* makeWorkQueue()
          let handled = 0
          const worker = Effect.gen(function* () {
            while (true) {
              const result = yield* wq.get
              if ("shutdown" in result) return
              handled++
              yield* wq.done(result.key)
            }
          })
          const workers = yield* Effect.forkChild(
            Effect.all([worker, worker, worker, worker], { concurrency: 4 }),
          )
          const start = performance.now()
          for (let i = 0; i < n; i++) {
            yield* wq.add(keys[i]!)
            if (i % 64 === 63) yield* Effect.yieldNow
          }
          yield* wq.shutDownWithDrain
          yield* Fiber.join(workers)
          const ms = performance.now() - start
          if (handled !== n) throw new Error(`handled ${handled} of ${n}`)
          return rate(n, ms)
        }),
      ),
    )
    // exercises the suspend/wake path of get
    print(`producer+4 workers ${n / 1000}k keys`, ops)
  }
})

const started = performance.now()
await Effect.runPromise(Effect.scoped(program))
console.log(
  `workqueue bench: done in ${((performance.now() - started) / 1000).toFixed(1)} s on node ${process.version}`,
)
