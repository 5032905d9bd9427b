// A connection closed for an unanswered PING counts for all but the last failed probe; and how long a
// member's failing LIST/WATCH is tolerated before its caches are distrusted (Ready=False,
// checks Unknown): the unreachable member's probe tolerance, so a longer healthy probe interval (fewer
// requests) never leaves a cache that stopped following its API server trusted for longer.
import { assert, describe, it } from "vitest"
import { defaultHubConfig } from "../../src/hub/config.ts"
import type { ProbeState } from "../../src/hub/fleet-state.ts"
import { countPingTimeout, countProbeFailure, watchFailureToleranceMs } from "../../src/hub/member.ts"
import { KubeApiError, KubeTransportError } from "../../src/kube/client.ts"

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

describe("a connection closed for an unanswered PING", () => {
  const lost = (code: string) =>
    new KubeTransportError({ cluster: "m1", method: "GET", path: "/apis", message: code, code })
  const connected = (): ProbeState => ({ connected: true, consecutiveFailures: 0, consecutiveSuccesses: 4 })

  it("leaves one failed probe, the one it wakes, to make the member unreachable", () => {
    const p = connected()
    countPingTimeout(p, lost("PingTimeout"), defaultHubConfig)
    assert.strictEqual(defaultHubConfig.probeFailureThreshold, 3)
    assert.deepStrictEqual(p, { connected: true, consecutiveFailures: 2, consecutiveSuccesses: 0 })
    // Each stream of the closed connection reports it: counted once.
    countPingTimeout(p, lost("PingTimeout"), defaultHubConfig)
    assert.strictEqual(p.consecutiveFailures, 2)
  })

  it("never lowers a run of failures already counted, nor decides alone", () => {
    const p: ProbeState = { connected: true, consecutiveFailures: 3, consecutiveSuccesses: 0 }
    countPingTimeout(p, lost("PingTimeout"), { probeFailureThreshold: 5 })
    assert.strictEqual(p.consecutiveFailures, 4)
    countPingTimeout(p, lost("PingTimeout"), { probeFailureThreshold: 5 })
    assert.strictEqual(p.consecutiveFailures, 4)
    const q = connected()
    countPingTimeout(q, lost("PingTimeout"), { probeFailureThreshold: 1 })
    assert.strictEqual(q.consecutiveFailures, 0)
    assert.strictEqual(q.connected, true)
  })

  it("counts nothing for a refused or reset connection, an API error, or a member already unreachable", () => {
    for (const code of ["ECONNREFUSED", "ECONNRESET", "Closed", "Timeout", "WatchInactive"]) {
      const p = connected()
      countPingTimeout(p, lost(code), defaultHubConfig)
      assert.deepStrictEqual(p, connected(), code)
    }
    const p = connected()
    countPingTimeout(
      p,
      new KubeApiError({
        cluster: "m1",
        method: "GET",
        path: "/apis",
        status: 500,
        reason: "",
        message: "boom",
      }),
      defaultHubConfig,
    )
    assert.deepStrictEqual(p, connected())
    const gone: ProbeState = { connected: false, consecutiveFailures: 7, consecutiveSuccesses: 0 }
    countPingTimeout(gone, lost("PingTimeout"), defaultHubConfig)
    assert.deepStrictEqual(gone, { connected: false, consecutiveFailures: 7, consecutiveSuccesses: 0 })
  })

  it("a probe lost with the same connection adds nothing: the probe on a new connection confirms", () => {
    const p = connected()
    countPingTimeout(p, lost("PingTimeout"), defaultHubConfig)
    countProbeFailure(p, lost("PingTimeout"), defaultHubConfig)
    assert.strictEqual(p.consecutiveFailures, 2)
    countProbeFailure(p, lost("Timeout"), defaultHubConfig)
    assert.strictEqual(p.consecutiveFailures, defaultHubConfig.probeFailureThreshold)
    // Other failures count one each, as before.
    const q = connected()
    countProbeFailure(q, lost("ECONNREFUSED"), defaultHubConfig)
    assert.deepStrictEqual(q, { connected: true, consecutiveFailures: 1, consecutiveSuccesses: 0 })
  })
})
