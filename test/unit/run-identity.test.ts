import { assert, describe, it } from "@effect/vitest"
import { jobNameFor, runIDForTime, specHashFor } from "../../src/reconcile/run-identity.ts"

const t = (iso: string) => Date.parse(iso)
const dns1123Label = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/

describe("runIDForTime", () => {
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

describe("specHashFor", () => {
  const spec = {
    backup: { name: "orders", checksum: "sha256:aa" },
    jobTemplate: { spec: { template: { spec: { containers: [{ name: "r", image: "r:1" }] } } } },
    timeout: "30m",
    schedule: "0 3 * * *",
    suspend: false,
  }

  it("is 16 hex digits, stable across key order", () => {
    const hash = specHashFor(spec)
    assert.match(hash, /^[0-9a-f]{16}$/)
    const reordered = {
      timeout: "30m",
      jobTemplate: { spec: { template: { spec: { containers: [{ image: "r:1", name: "r" }] } } } },
      backup: { checksum: "sha256:aa", name: "orders" },
    }
    assert.strictEqual(specHashFor(reordered), hash)
  })

  it("changes with what a run verifies, not with when it runs", () => {
    const hash = specHashFor(spec)
    const rescheduled = { ...spec, schedule: "0 4 * * *", suspend: true }
    assert.strictEqual(specHashFor(rescheduled), hash)
    assert.notStrictEqual(specHashFor({ ...spec, backup: { ...spec.backup, name: "orders-2" } }), hash)
    assert.notStrictEqual(specHashFor({ ...spec, timeout: "31m" }), hash)
    // A validation changes what a verdict says; without one the hash is what it was before validations.
    assert.strictEqual(specHashFor({ ...spec, validation: undefined }), hash)
    assert.notStrictEqual(specHashFor({ ...spec, validation: { jobTemplate: spec.jobTemplate } }), hash)
    assert.notStrictEqual(
      specHashFor({
        ...spec,
        jobTemplate: { spec: { template: { spec: { containers: [{ name: "r", image: "r:2" }] } } } },
      }),
      hash,
    )
  })
})
