import { assert, describe, it } from "@effect/vitest"
import {
  checkTimeZone,
  dueRun,
  formatDuration,
  jobNameFor,
  nextRunTime,
  parseDuration,
  parseSchedule,
  runIDForTime,
} from "../../src/reconcile/schedule.ts"

const t = (iso: string) => Date.parse(iso)
const dns1123Label = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/

describe("parseDuration", () => {
  it("reads Go durations into milliseconds", () => {
    assert.strictEqual(parseDuration("45s"), 45_000)
    assert.strictEqual(parseDuration("30m"), 1_800_000)
    assert.strictEqual(parseDuration("1h30m"), 5_400_000)
    assert.strictEqual(parseDuration("1h30m15s250ms"), 5_415_250)
    assert.strictEqual(parseDuration("48h"), 172_800_000)
    assert.strictEqual(parseDuration("500ms"), 500)
    assert.strictEqual(parseDuration("0"), 0)
    assert.strictEqual(parseDuration("30s1m"), 90_000) // Go accepts any order
  })

  it("returns an error for anything else", () => {
    for (const bad of [
      "",
      "1",
      "1d",
      "1.5h",
      "-1h",
      "1h ",
      " 1h",
      "h",
      "1H",
      "1hour",
      "1e3s",
      "99999999999999h",
    ]) {
      const result = parseDuration(bad)
      assert.notStrictEqual(typeof result, "number", `"${bad}" should not parse`)
      assert.match((result as { error: string }).error, /invalid duration/)
    }
  })

  it("formats durations like Go, to whole seconds", () => {
    assert.strictEqual(formatDuration(41_200), "41s")
    assert.strictEqual(formatDuration(125_000), "2m5s")
    assert.strictEqual(formatDuration(3_600_000), "1h0m0s")
  })
})

describe("parseSchedule", () => {
  it("accepts five-field cron and the standard macros", () => {
    for (const ok of [
      "0 3 * * *",
      "*/15 * * * *",
      "0 3 ? * MON-FRI",
      "0 0 1 jan,jul *",
      "5 4 1-31/2 * 0",
      "@daily",
      "@hourly",
    ]) {
      assert.isTrue(parseSchedule(ok).success, ok)
    }
  })

  it("rejects what CronJob would not run the same way, with a reason", () => {
    const cases: Array<[string, RegExp]> = [
      ["0 3 * * * *", /5 cron fields/], // seconds
      ["61 3 * * *", /minute: 61/],
      ["0 24 * * *", /hour: 24/],
      ["0 3 L * *", /5 cron fields/], // croner's last-day extension
      ["0 3 * * FRI#2", /5 cron fields/],
      ["0 0 30 2 *", /never runs/],
      ["5/5 * * * *", /numeric prefix/],
      ["@every 5m", /5 cron fields/],
      ["TZ=UTC 0 3 * * *", /5 cron fields/],
      ["0 3 * * 5-1", /larger than/],
    ]
    for (const [schedule, reason] of cases) {
      const result = parseSchedule(schedule)
      assert.isFalse(result.success, schedule)
      if (!result.success) assert.match(result.error, reason, schedule)
    }
  })

  it("validates time zones like Go's LoadLocation would", () => {
    assert.isUndefined(checkTimeZone("Europe/Berlin"))
    assert.isUndefined(checkTimeZone("UTC"))
    assert.isUndefined(checkTimeZone("America/Argentina/Buenos_Aires"))
    assert.match(checkTimeZone("Mars/Olympus") ?? "", /unknown time zone/)
    assert.match(checkTimeZone("europe/berlin") ?? "", /case-sensitive.*Europe\/Berlin/)
    assert.match(checkTimeZone("+01:00") ?? "", /IANA/)
    assert.match(checkTimeZone("Local") ?? "", /IANA/)
    assert.isFalse(parseSchedule("0 3 * * *", "Nowhere/Town").success)
  })
})

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
    assert.strictEqual(nextRunTime({ ...gap, now: t("2026-10-25T00:00:00Z") }), t("2026-10-25T00:30:00Z"))
  })

  it("reports an invalid schedule instead of throwing", () => {
    const result = dueRun({ ...daily, schedule: "0 3 * *", now: t("2026-11-29T12:00:00Z") })
    assert.isUndefined(result.run)
    assert.match(result.error ?? "", /invalid schedule/)
    assert.isUndefined(nextRunTime({ schedule: "nope", now: 0 }))
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

  it("formats run IDs as compact UTC timestamps", () => {
    assert.strictEqual(runIDForTime(new Date("2026-01-02T03:04:00Z")), "s20260102t0304z")
    assert.strictEqual(runIDForTime(t("2026-01-02T03:04:05Z")), "s20260102t030405z")
  })
})

describe("jobNameFor", () => {
  it("is <check>-<runID> when that fits", () => {
    assert.strictEqual(
      jobNameFor("orders-db-nightly", "s20261129t0300z"),
      "orders-db-nightly-s20261129t0300z",
    )
    assert.strictEqual(jobNameFor("orders", "g3"), "orders-g3")
  })

  it("is a DNS-1123 label of at most 63 characters for any valid object name", () => {
    const names = [
      "a".repeat(253),
      "a".repeat(63),
      `${"b".repeat(45)}-${"c".repeat(10)}`,
      "my.dotted.check.name",
      `${"x.".repeat(120)}y`,
      "0-starts-with-a-digit",
      "a",
    ]
    for (const name of names) {
      for (const runID of ["g1", "g9223372036854775807", "s20261129t0300z"]) {
        const job = jobNameFor(name, runID)
        assert.isAtMost(job.length, 63, job)
        assert.match(job, dns1123Label, job)
        assert.isTrue(job.endsWith(`-${runID}`), `${job} keeps the run ID readable`)
      }
    }
  })

  it("is deterministic and keeps names apart that truncate or sanitize alike", () => {
    const long = "a".repeat(200)
    assert.strictEqual(jobNameFor(long, "g1"), jobNameFor(long, "g1"))
    // Pinned: a changed algorithm would make an upgraded hub recreate Jobs under new names.
    assert.strictEqual(
      jobNameFor(long, "g1"),
      "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa-a8d8afccf7-g1",
    )
    assert.notStrictEqual(jobNameFor(long, "g1"), jobNameFor(`${long}b`, "g1"))
    assert.notStrictEqual(jobNameFor("a.b", "g1"), jobNameFor("a-b", "g1"))
    assert.notStrictEqual(jobNameFor(long, "g1"), jobNameFor(long, "g2"))
  })
})
