import { assert, describe, it } from "@effect/vitest"
import type { BackupCheck } from "../../src/api/backupcheck.ts"
import { checkFacts, verificationDeadlineMs } from "../../src/observability/metrics/check-facts.ts"

const check = (spec: Record<string, unknown>, status?: Record<string, unknown>): BackupCheck =>
  ({
    apiVersion: "fleetcheck.io/v1alpha1",
    kind: "BackupCheck",
    metadata: { name: "nightly", namespace: "db", creationTimestamp: "2026-12-01T00:00:00Z" },
    spec: { timeout: "1h", ...spec },
    ...(status ? { status } : {}),
  }) as unknown as BackupCheck

const at = (iso: string) => Date.parse(iso)

describe("check facts", () => {
  it("the deadline is the last success plus maxStaleness, from creation before any success", () => {
    assert.strictEqual(verificationDeadlineMs(check({ maxStaleness: "36h" })), at("2026-12-02T12:00:00Z"))
    assert.strictEqual(
      verificationDeadlineMs(
        check({ maxStaleness: "36h", schedule: "@daily" }, { lastSuccessfulTime: "2026-12-05T03:00:00Z" }),
      ),
      at("2026-12-06T15:00:00Z"),
    )
  })

  it("without maxStaleness: two schedule slots after the last success, plus start window and timeout", () => {
    // weekdays at 02:00: a success on Friday is due by Tuesday 02:00 + 10m + 1h, not over the weekend
    const weekdays = check(
      { schedule: "0 2 * * 1-5", startWindow: "10m" },
      { lastSuccessfulTime: "2026-12-04T02:30:00Z" },
    )
    assert.strictEqual(verificationDeadlineMs(weekdays), at("2026-12-08T03:10:00Z"))
  })

  it("no deadline for a suspended check, one run per generation, or a schedule that does not parse", () => {
    assert.isUndefined(verificationDeadlineMs(check({ schedule: "@daily", suspend: true })))
    assert.isUndefined(verificationDeadlineMs(check({})))
    assert.isUndefined(verificationDeadlineMs(check({ schedule: "not a cron" })))
  })

  it("objectives in seconds, and failed sandbox cleanups counted once per run", () => {
    const sandbox = (cleanup: string) => ({ namespace: "fcsb-x", cleanup })
    const facts = checkFacts(
      check(
        { objectives: { maxRestoreDuration: "10m", maxDataAge: "26h" } },
        {
          lastRun: { runID: "r3", result: "Succeeded", sandbox: sandbox("Failed") },
          history: [
            { runID: "r3", result: "Succeeded", sandbox: sandbox("Pending") },
            { runID: "r2", result: "Failed", sandbox: sandbox("Failed") },
            { runID: "r1", result: "Succeeded", sandbox: sandbox("Deleted") },
          ],
        },
      ),
    )
    assert.deepStrictEqual(facts.objectiveSeconds, { restoreTime: 600, dataAge: 93_600 })
    assert.strictEqual(facts.sandboxCleanupsFailed, 2)
    assert.isUndefined(
      checkFacts(check({}, { lastRun: { runID: "r1", result: "Succeeded" } })).sandboxCleanupsFailed,
    )
  })
})
