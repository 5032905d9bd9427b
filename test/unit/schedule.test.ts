import { assert, describe, it } from "@effect/vitest"
import { dueRun, startOffsetMs } from "../../src/reconcile/schedule.ts"

const t = (iso: string) => Date.parse(iso)

describe("dueRun without a schedule", () => {
  it("is one run per generation, whatever the time", () => {
    const base = { creationTime: t("2026-11-01T00:00:00Z"), now: t("2026-11-29T12:00:00Z") }
    assert.deepStrictEqual(dueRun({ ...base, generation: 3 }), {
      run: { runID: "g3" },
      nextRunTime: undefined,
    })
    const later = dueRun({ ...base, generation: 3, now: t("2027-01-01T00:00:00Z") })
    assert.strictEqual(later.run?.runID, "g3")
    assert.strictEqual(dueRun({ ...base, generation: 4 }).run?.runID, "g4")
  })
})

describe("dueRun with a schedule", () => {
  const daily = { generation: 1, schedule: "0 3 * * *", creationTime: t("2026-11-01T12:00:00Z") }

  it("names the latest scheduled time at or before now, in UTC by default", () => {
    const result = dueRun({ ...daily, now: t("2026-11-29T03:00:00Z") }) // exactly at the slot
    assert.deepStrictEqual(result.run, { runID: "s20261129t0300z", scheduledTime: t("2026-11-29T03:00:00Z") })
    assert.strictEqual(result.nextRunTime, t("2026-11-30T03:00:00Z"))
    const before = dueRun({ ...daily, now: t("2026-11-29T02:59:59.999Z") })
    assert.strictEqual(before.run?.runID, "s20261128t0300z")
  })

  it("is stable between scheduled times, so every reconcile names the same run", () => {
    const ids = ["03:00:01", "09:00:00", "23:59:59"].map(
      (time) => dueRun({ ...daily, now: t(`2026-11-29T${time}Z`) }).run?.runID,
    )
    assert.deepStrictEqual(ids, ["s20261129t0300z", "s20261129t0300z", "s20261129t0300z"])
  })

  it("has nothing due before the first scheduled time after creation", () => {
    const created = t("2026-11-29T03:00:00Z") // a slot exactly at creation does not count
    const result = dueRun({ ...daily, creationTime: created, now: t("2026-11-29T10:00:00Z") })
    assert.isUndefined(result.run)
    assert.strictEqual(result.nextRunTime, t("2026-11-30T03:00:00Z"))
  })

  it("collapses missed runs into the latest one", () => {
    // The hub was away for ten days of an hourly schedule: one run, for the latest hour.
    const result = dueRun({
      generation: 1,
      schedule: "0 * * * *",
      creationTime: t("2026-11-01T00:00:00Z"),
      lastRun: { runID: "s20261119t1000z", startTime: "2026-11-19T10:00:02Z" },
      now: t("2026-11-29T15:42:00Z"),
    })
    assert.deepStrictEqual(result.run, { runID: "s20261129t1500z", scheduledTime: t("2026-11-29T15:00:00Z") })
    assert.strictEqual(result.nextRunTime, t("2026-11-29T16:00:00Z"))
  })

  it("keeps the current run due while it is the last run", () => {
    const result = dueRun({
      ...daily,
      lastRun: { runID: "s20261129t0300z", startTime: "2026-11-29T03:00:01Z" },
      now: t("2026-11-29T03:20:00Z"),
    })
    assert.strictEqual(result.run?.runID, "s20261129t0300z")
  })

  it("treats a scheduled time as covered by a different run that started after it", () => {
    // 0 3 * * * ran at 03:00; at 03:30 the schedule becomes 0 4 * * *. Yesterday's 04:00 must not fire now.
    const result = dueRun({
      ...daily,
      schedule: "0 4 * * *",
      lastRun: { runID: "s20261129t0300z", startTime: "2026-11-29T03:00:01Z" },
      now: t("2026-11-29T03:30:00Z"),
    })
    assert.isUndefined(result.run)
    assert.strictEqual(result.nextRunTime, t("2026-11-29T04:00:00Z"))
    // A generation run before the schedule was added covers the slots before it, not those after.
    const fromGeneration = {
      ...daily,
      schedule: "0 * * * *",
      lastRun: { runID: "g2", startTime: t("2026-11-29T10:15:00Z") },
    }
    assert.isUndefined(dueRun({ ...fromGeneration, now: t("2026-11-29T10:20:00Z") }).run)
    assert.strictEqual(
      dueRun({ ...fromGeneration, now: t("2026-11-29T11:00:00Z") }).run?.runID,
      "s20261129t1100z",
    )
  })

  it("follows the time zone across the spring DST change (Europe/Berlin)", () => {
    const berlin = { ...daily, timeZone: "Europe/Berlin", creationTime: t("2026-03-01T00:00:00Z") }
    // 03:00 local is 02:00Z in winter (CET) and 01:00Z in summer (CEST); DST starts 2026-03-29 at 02:00 local.
    assert.strictEqual(dueRun({ ...berlin, now: t("2026-03-28T12:00:00Z") }).run?.runID, "s20260328t0200z")
    const onTheDay = dueRun({ ...berlin, now: t("2026-03-29T12:00:00Z") })
    assert.strictEqual(onTheDay.run?.runID, "s20260329t0100z")
    assert.strictEqual(onTheDay.nextRunTime, t("2026-03-30T01:00:00Z"))
    // 02:30 local does not exist that day: a fixed-time job runs once, when the clock has jumped (03:00 CEST).
    const gap = { ...berlin, schedule: "30 2 * * *" }
    assert.strictEqual(dueRun({ ...gap, now: t("2026-03-29T00:59:00Z") }).run?.runID, "s20260328t0130z")
    assert.strictEqual(dueRun({ ...gap, now: t("2026-03-29T01:00:00Z") }).run?.runID, "s20260329t0100z")
    assert.strictEqual(
      dueRun({ ...gap, now: t("2026-03-29T01:00:00Z") }).nextRunTime,
      t("2026-03-30T00:30:00Z"),
    )
  })

  it("runs a repeated local time once across the autumn DST change (Europe/Berlin)", () => {
    const gap = {
      ...daily,
      schedule: "30 2 * * *",
      timeZone: "Europe/Berlin",
      creationTime: t("2026-10-01T00:00:00Z"),
    }
    // 2026-10-25 02:30 local happens at 00:30Z (CEST) and again at 01:30Z (CET): one run, the first.
    const afterBoth = dueRun({ ...gap, now: t("2026-10-25T01:45:00Z") })
    assert.strictEqual(afterBoth.run?.runID, "s20261025t0030z")
    assert.strictEqual(afterBoth.nextRunTime, t("2026-10-26T01:30:00Z"))
    assert.strictEqual(
      dueRun({ ...gap, now: t("2026-10-25T00:00:00Z") }).nextRunTime,
      t("2026-10-25T00:30:00Z"),
    )
  })

  it("reports an invalid schedule instead of throwing", () => {
    const result = dueRun({ ...daily, schedule: "0 3 * *", now: t("2026-11-29T12:00:00Z") })
    assert.isUndefined(result.run)
    assert.match(result.error ?? "", /invalid schedule/)
    assert.isUndefined(dueRun({ ...daily, schedule: "nope", now: 0 }).nextRunTime)
  })

  it("gives the same answer from the cache as from a cold start", () => {
    const input = { ...daily, schedule: "*/7 * * * *", timeZone: "Asia/Kolkata" }
    const times = [
      t("2026-11-29T03:00:00Z"),
      t("2026-11-29T03:06:59Z"),
      t("2026-11-29T03:07:00Z"),
      t("2026-11-29T02:00:00Z"),
    ]
    const warm = times.map((now) => dueRun({ ...input, now }))
    const cold = times.map((now) => dueRun({ ...input, schedule: "*/7  * * * *", now })) // another cache key
    assert.deepStrictEqual(warm, cold)
    // Kolkata is UTC+5:30, so */7 local minutes fall at :58, :05, :12, ... UTC.
    assert.deepStrictEqual(
      warm.map((r) => r.run?.runID),
      ["s20261129t0258z", "s20261129t0305z", "s20261129t0305z", "s20261129t0158z"],
    )
  })
})

describe("dueRun and concurrencyPolicy", () => {
  const hourly = {
    generation: 1,
    schedule: "0 * * * *",
    creationTime: t("2026-11-29T00:00:00Z"),
    now: t("2026-11-29T11:00:05Z"),
  }
  const t1 = { runID: "s20261129t1000z", startTime: "2026-11-29T10:00:01Z" }

  it("Forbid skips a slot that came while the last run was still running, and says which", () => {
    const running = dueRun({ ...hourly, lastRun: { ...t1, result: "Running" } })
    assert.isUndefined(running.run)
    assert.deepStrictEqual(running.skipped, {
      runID: "s20261129t1100z",
      scheduledTime: t("2026-11-29T11:00:00Z"),
    })
    assert.strictEqual(running.nextRunTime, t("2026-11-29T12:00:00Z"))
    // It ended after the slot: the slot stays skipped, it does not run late.
    const endedAfter = dueRun({
      ...hourly,
      now: t("2026-11-29T11:20:00Z"),
      lastRun: { ...t1, result: "Failed", completionTime: "2026-11-29T11:00:02Z" },
    })
    assert.isUndefined(endedAfter.run)
    assert.strictEqual(endedAfter.skipped?.runID, "s20261129t1100z")
    // The default policy is Forbid.
    assert.deepStrictEqual(
      dueRun({ ...hourly, lastRun: { ...t1, result: "Running" }, concurrencyPolicy: "Forbid" }),
      running,
    )
  })

  it("Forbid runs a slot the last run ended before", () => {
    const result = dueRun({
      ...hourly,
      lastRun: { ...t1, result: "Succeeded", completionTime: "2026-11-29T10:59:59Z" },
    })
    assert.strictEqual(result.run?.runID, "s20261129t1100z")
    assert.isUndefined(result.skipped)
    // A record without result or completion time (written before either existed) does not block.
    assert.strictEqual(dueRun({ ...hourly, lastRun: t1 }).run?.runID, "s20261129t1100z")
  })

  it("Replace makes the slot due even while the last run is running (the caller supersedes it)", () => {
    const result = dueRun({ ...hourly, concurrencyPolicy: "Replace", lastRun: { ...t1, result: "Running" } })
    assert.strictEqual(result.run?.runID, "s20261129t1100z")
    assert.isUndefined(result.skipped)
  })

  it("a run that started after the slot covers it under either policy", () => {
    const g2 = { runID: "g2", startTime: "2026-11-29T11:00:30Z", result: "Running" }
    for (const concurrencyPolicy of ["Forbid", "Replace"] as const) {
      const result = dueRun({ ...hourly, now: t("2026-11-29T11:10:00Z"), concurrencyPolicy, lastRun: g2 })
      assert.isUndefined(result.run)
      assert.isUndefined(result.skipped)
    }
  })
})

describe("start windows (spec.startWindow)", () => {
  const hour = 3_600_000
  const window = 2 * hour
  const slot = t("2026-11-29T03:00:00Z")
  const uid = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, "0")}`

  it("puts each slot at a whole second in [0, window), the same every time it is asked", () => {
    for (let i = 0; i < 200; i++) {
      const offset = startOffsetMs(uid(i), slot, window)
      assert.isTrue(offset >= 0 && offset < window && offset % 1000 === 0, `offset ${offset}`)
      assert.strictEqual(startOffsetMs(uid(i), slot, window), offset)
    }
    assert.strictEqual(startOffsetMs(uid(1), slot, 0), 0)
    assert.strictEqual(startOffsetMs(uid(1), slot, 999), 0)
  })

  it("spreads 1,000 checks evenly over a 2h window (printed), and moves a check from slot to slot", () => {
    const buckets = Array.from({ length: 12 }, () => 0)
    for (let i = 0; i < 1000; i++)
      buckets[Math.floor(startOffsetMs(uid(i), slot, window) / (10 * 60_000))]! += 1
    const rows = buckets.map(
      (n, b) =>
        `  +${String(b * 10).padStart(3)}m  ${String(n).padStart(3)} ${"#".repeat(Math.round(n / 4))}`,
    )
    let chi = 0
    for (const n of buckets) chi += (n - 1000 / 12) ** 2 / (1000 / 12)
    console.log(
      `start offsets of 1,000 checks, window 2h, 10-minute buckets (chi-square ${chi.toFixed(1)}, 11 df):\n${rows.join("\n")}`,
    )
    // Expected 83.3 per bucket, standard deviation about 8.8: a bucket outside 45..125 is not uniform.
    for (const n of buckets) assert.isTrue(n >= 45 && n <= 125, `bucket of ${n}: ${buckets.join(",")}`)
    assert.isBelow(chi, 31.3, `chi-square ${chi.toFixed(1)} over 11 degrees of freedom (p = 0.001 at 31.3)`)
    // The same check does not always start last: its offsets over 30 daily slots cover the window.
    const days = Array.from({ length: 30 }, (_, d) => startOffsetMs(uid(7), slot + d * 24 * hour, window))
    assert.isAbove(Math.max(...days) - Math.min(...days), hour)
  })

  const daily = {
    generation: 1,
    schedule: "0 3 * * *",
    creationTime: t("2026-11-01T12:00:00Z"),
    startWindowMs: window,
    checkKey: uid(42),
  }
  const offsetOf = (at: number) => startOffsetMs(uid(42), at, window)

  it("makes a slot due at its start, not at its scheduled time; nextRunTime is the actual start", () => {
    const start = slot + offsetOf(slot)
    assert.isAbove(offsetOf(slot), 0) // this uid's offset; the test is meaningless at 0
    const before = dueRun({ ...daily, now: start - 1 })
    assert.strictEqual(before.run?.runID, "s20261128t0300z")
    assert.strictEqual(before.nextRunTime, start)
    const at = dueRun({ ...daily, now: start })
    assert.deepStrictEqual(at.run, { runID: "s20261129t0300z", scheduledTime: slot })
    const next = slot + 24 * hour
    assert.strictEqual(at.nextRunTime, next + offsetOf(next))
  })

  it("never runs a slot at or before creation, and asks Forbid's question at the start", () => {
    const start = slot + offsetOf(slot)
    const fresh = dueRun({ ...daily, creationTime: t("2026-11-28T12:00:00Z"), now: start - 1 })
    assert.isUndefined(fresh.run)
    assert.strictEqual(fresh.nextRunTime, start)
    // Yesterday's run ended after the slot but before its start: not active, the slot runs.
    const ended = dueRun({
      ...daily,
      lastRun: {
        runID: "s20261128t0300z",
        startTime: "2026-11-28T03:30:00Z",
        completionTime: start - 1000,
        result: "Succeeded",
      },
      now: start,
    })
    assert.strictEqual(ended.run?.runID, "s20261129t0300z")
    const still = dueRun({
      ...daily,
      lastRun: {
        runID: "s20261128t0300z",
        startTime: "2026-11-28T03:30:00Z",
        completionTime: start + 1000,
        result: "Succeeded",
      },
      now: start + 2000,
    })
    assert.isUndefined(still.run)
    assert.strictEqual(still.skipped?.runID, "s20261129t0300z")
  })

  it("a slot at or before creation is not the next start, even while its own start is still ahead", () => {
    const start = slot + offsetOf(slot)
    assert.isAbove(offsetOf(slot), 1_000) // created between the slot and its start
    const created = dueRun({ ...daily, creationTime: slot + 1, now: start - 1 })
    assert.isUndefined(created.run)
    const next = slot + 24 * hour
    assert.strictEqual(created.nextRunTime, next + offsetOf(next))
  })
})
