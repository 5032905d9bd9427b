import { assert, describe, it } from "@effect/vitest"
import { formatCounts, parseTerminationMessage } from "../../src/api/termination-message.ts"

describe("parseTerminationMessage", () => {
  it("reads the structured shape: message, dataTimestamp (normalised to UTC), counts", () => {
    const report = parseTerminationMessage(
      JSON.stringify({
        message: "orders restored",
        dataTimestamp: "2026-11-29T02:58:11+01:00",
        counts: { orders: 1200, "public.customers": 88 },
      }),
    )
    assert.deepStrictEqual(report, {
      message: "orders restored",
      dataTimestamp: "2026-11-29T01:58:11Z",
      counts: { orders: 1200, "public.customers": 88 },
    })
    assert.deepStrictEqual(parseTerminationMessage('  {"dataTimestamp":"2026-11-29T01:00:00.5Z"}\n'), {
      message: "",
      dataTimestamp: "2026-11-29T01:00:00.500Z",
    })
    assert.strictEqual(formatCounts(report.counts), "orders=1200, public.customers=88")
  })

  it.each([
    ["plain text", "pg_restore: 42 tables"],
    ["text with braces", "{not json"],
    ["another JSON object", '{"status":"ok"}'],
    ["a JSON array", "[1,2]"],
    ["a bad timestamp", '{"message":"m","dataTimestamp":"yesterday"}'],
    ["a negative count", '{"counts":{"rows":-1}}'],
    ["a fractional count", '{"counts":{"rows":1.5}}'],
    ["a bad count name", '{"counts":{"rows; drop":1}}'],
    [
      "too many counts",
      JSON.stringify({ counts: Object.fromEntries(Array.from({ length: 33 }, (_, i) => [`t${i}`, i])) }),
    ],
    ["a message of the wrong type", '{"message":42}'],
    ["more than 4 KiB", JSON.stringify({ message: "x".repeat(5000) })],
  ])("treats %s as plain text", (_label, text) => {
    assert.deepStrictEqual(parseTerminationMessage(text), { message: text })
  })

  it("is plain and empty without a message", () => {
    assert.deepStrictEqual(parseTerminationMessage(undefined), { message: "" })
  })
})
