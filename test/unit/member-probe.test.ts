// How long a member's failing LIST/WATCH is tolerated before its caches are distrusted (Ready=False,
// checks Unknown): the unreachable member's probe tolerance, so a longer healthy probe interval (fewer
// requests) never leaves a cache that stopped following its API server trusted for longer.
import { assert, describe, it } from "vitest"
import { defaultHubConfig } from "../../src/hub/config.ts"
import { watchFailureToleranceMs } from "../../src/hub/member.ts"

describe("watch failure tolerance", () => {
  it("is 30 s with the defaults, whatever the healthy probe interval", () => {
    assert.strictEqual(watchFailureToleranceMs(defaultHubConfig), 30_000)
    assert.strictEqual(
      watchFailureToleranceMs({ probeIntervalMs: 5 * 60_000, probeFailureThreshold: 3 }),
      30_000,
    )
  })
  it("follows a short probe interval", () => {
    assert.strictEqual(watchFailureToleranceMs({ probeIntervalMs: 500, probeFailureThreshold: 3 }), 1_500)
    assert.strictEqual(watchFailureToleranceMs({ probeIntervalMs: 2_000, probeFailureThreshold: 5 }), 10_000)
  })
})
