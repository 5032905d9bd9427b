import { assert, describe, it } from "@effect/vitest"
import {
  checkTimeZone,
  formatDuration,
  parseDuration,
  parseSchedule,
  shortestIntervalMs,
} from "../../src/api/syntax.ts"

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

  it("answers the same when asked again, also after more distinct durations than it remembers", () => {
    const first = ["45s", "1h30m", "0", "30s1m"].map(parseDuration)
    for (let i = 0; i < 3000; i++) assert.strictEqual(parseDuration(`${i}s`), i * 1000)
    assert.deepStrictEqual(["45s", "1h30m", "0", "30s1m"].map(parseDuration), first)
    assert.deepStrictEqual(first, [45_000, 5_400_000, 0, 90_000])
    // a bad duration is never remembered as a good one, before or after a good one
    for (const s of ["1d", "1h", "1d", "1h"])
      assert.strictEqual(typeof parseDuration(s) === "number", s === "1h")
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

describe("shortestIntervalMs", () => {
  const shortest = (schedule: string, timeZone?: string) => {
    const parsed = parseSchedule(schedule, timeZone)
    if (!parsed.success) throw new Error(parsed.error)
    return shortestIntervalMs(parsed.cron)
  }
  const minutes = (n: number) => n * 60_000

  it("is the smallest gap between consecutive slots, wrap-arounds included", () => {
    assert.strictEqual(shortest("* * * * *"), minutes(1))
    assert.strictEqual(shortest("*/15 * * * *"), minutes(15))
    assert.strictEqual(shortest("*/7 * * * *"), minutes(4)) // :56 → :00
    assert.strictEqual(shortest("0,30 3 * * 0"), minutes(30))
    assert.strictEqual(shortest("*/5 9-17 * * 1-5"), minutes(5))
    assert.strictEqual(shortest("0 3 * * *"), minutes(24 * 60))
    assert.strictEqual(shortest("@weekly"), minutes(7 * 24 * 60))
  })

  it("follows the time zone: a daily slot is 23h apart when summer time starts", () => {
    assert.strictEqual(shortest("0 3 * * *", "Europe/Berlin"), minutes(23 * 60))
  })

  it("is the same for the same schedule (cached per compiled schedule)", () => {
    assert.strictEqual(shortest("0 */6 * * *"), shortest("0 */6 * * *"))
  })
})
