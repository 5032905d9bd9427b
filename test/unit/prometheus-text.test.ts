// The /metrics reader the cluster tests rest their request counts on: label values are matched exactly,
// never as substrings of other labels or values.
import { assert, describe, it } from "vitest"
import { samplesOf, sumOf } from "../support/prometheus-text.ts"

const page = [
  "# HELP apiserver_request_total Counter of apiserver requests",
  "# TYPE apiserver_request_total counter",
  'apiserver_request_total{code="200",resource="jobs",subresource="",verb="POST"} 7',
  'apiserver_request_total{code="409",resource="jobs",subresource="",verb="POST"} 2',
  'apiserver_request_total{code="409",resource="cronjobs",subresource="",verb="POST"} 5',
  'apiserver_request_total{code="200",resource="jobs",subresource="status",verb="PATCH"} 3',
  'apiserver_request_total_other{resource="jobs"} 100',
  'fleetcheck_note{message="a \\"quoted\\" value, with {braces}"} 1.5',
  "process_open_fds 12",
].join("\n")

describe("prometheus text", () => {
  it("sums the samples whose labels match exactly", () => {
    assert.strictEqual(sumOf(page, "apiserver_request_total"), 17)
    assert.strictEqual(sumOf(page, "apiserver_request_total", { resource: "jobs" }), 12)
    assert.strictEqual(sumOf(page, "apiserver_request_total", { resource: "jobs", code: "409" }), 2)
    assert.strictEqual(sumOf(page, "apiserver_request_total", { verb: "PATCH", subresource: "status" }), 3)
    assert.strictEqual(sumOf(page, "apiserver_request_total", { resource: "job" }), 0)
  })

  it("reads quoted values and unlabelled samples", () => {
    assert.deepStrictEqual(samplesOf(page, "fleetcheck_note"), [
      { labels: { message: 'a \\"quoted\\" value, with {braces}' }, value: 1.5 },
    ])
    assert.deepStrictEqual(samplesOf(page, "process_open_fds"), [{ labels: {}, value: 12 }])
    assert.deepStrictEqual(samplesOf(page, "process_open"), [])
  })
})
