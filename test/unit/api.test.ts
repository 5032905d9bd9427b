import { assert, describe, it } from "@effect/vitest"
import {
  type BackupCheckInput,
  BackupCheckSpecSchema,
  conditionReasons,
  conditionTypes,
  parseBackupCheck,
} from "../../src/api/backupcheck.ts"
import { conditionReasonPattern } from "../../src/api/condition.ts"
import {
  memberClusterConditionTypes,
  memberClusterReasons,
  parseMemberCluster,
} from "../../src/api/membercluster.ts"

const sha256 = `sha256:${"9f86d081884c7d65".repeat(4)}`

// The example from SPEC §3, as kubectl would send it back (namespace and uid set by the API server).
const sample = (): BackupCheckInput & Record<string, unknown> => ({
  apiVersion: "fleetcheck.io/v1alpha1",
  kind: "BackupCheck",
  metadata: { name: "orders-db-nightly", namespace: "shop", uid: "0b7c2f1e-1", generation: 3 },
  spec: {
    backup: { name: "orders-2026-11-29", source: "s3://backups/orders/2026-11-29", checksum: sha256 },
    jobTemplate: {
      spec: {
        template: {
          spec: {
            restartPolicy: "Never",
            containers: [{ name: "restore", image: "registry.example/restore-tool:1.4", args: ["--verify"] }],
          },
        },
      },
    },
    schedule: "0 3 * * *",
    timeZone: "Europe/Berlin",
    timeout: "30m",
    maxStaleness: "48h",
    suspend: false,
    successfulRunsHistoryLimit: 3,
    failedRunsHistoryLimit: 1,
  },
})

type Mutable = Record<string, any>
/** The sample with `edit` applied to a deep copy of its spec. */
const withSpec = (edit: (spec: Mutable) => void) => {
  const obj = structuredClone(sample()) as Mutable
  edit(obj.spec)
  return obj
}

const expectInvalid = (obj: unknown, message: RegExp) => {
  const result = parseBackupCheck(obj)
  assert.isFalse(result.success, `expected invalid: ${message}`)
  if (!result.success) assert.match(result.error, message)
}

describe("parseBackupCheck: valid objects", () => {
  it("accepts the spec's example and keeps unknown Job and container fields", () => {
    const result = parseBackupCheck(sample())
    assert.isTrue(result.success)
    if (!result.success) return
    assert.strictEqual(result.data.spec.backup.name, "orders-2026-11-29")
    const container = result.data.spec.jobTemplate?.spec.template.spec.containers[0] as Mutable
    assert.deepStrictEqual(container.args, ["--verify"])
  })

  it("applies the defaults the CRD declares", () => {
    const minimal = withSpec((spec) => {
      for (const key of ["schedule", "timeZone", "timeout", "maxStaleness", "suspend"]) delete spec[key]
      delete spec.successfulRunsHistoryLimit
      delete spec.failedRunsHistoryLimit
      delete spec.jobTemplate.spec.template.spec.restartPolicy
      delete spec.backup.source
      delete spec.backup.checksum
    })
    const result = parseBackupCheck(minimal)
    assert.isTrue(result.success, result.success ? "" : result.error)
    if (!result.success) return
    const spec = result.data.spec
    assert.strictEqual(spec.timeout, "1h")
    assert.strictEqual(spec.suspend, false)
    assert.strictEqual(spec.successfulRunsHistoryLimit, 3)
    assert.strictEqual(spec.failedRunsHistoryLimit, 1)
    assert.strictEqual(spec.jobTemplate?.spec.template.spec.restartPolicy, "Never")
    assert.isUndefined(spec.schedule)
  })

  it("accepts sha512 and md5 checksums, macros and jobTemplate metadata", () => {
    for (const checksum of [`sha512:${"ab".repeat(64)}`, `md5:${"0f".repeat(16)}`]) {
      assert.isTrue(parseBackupCheck(withSpec((s) => (s.backup.checksum = checksum))).success, checksum)
    }
    assert.isTrue(parseBackupCheck(withSpec((s) => (s.schedule = "@daily"))).success)
    const labelled = withSpec(
      (s) => (s.jobTemplate.metadata = { labels: { team: "db" }, annotations: { a: "b" } }),
    )
    assert.isTrue(parseBackupCheck(labelled).success)
  })

  it("keeps metadata fields it does not declare", () => {
    const obj = sample() as Mutable
    obj.metadata.managedFields = [{ manager: "kubectl" }]
    const result = parseBackupCheck(obj)
    assert.isTrue(result.success)
    if (result.success)
      assert.deepStrictEqual((result.data.metadata as Mutable).managedFields, [{ manager: "kubectl" }])
  })

  it("drops an invalid status with a warning instead of rejecting the check", () => {
    const obj = sample() as Mutable
    obj.status = { observedGeneration: 2, conditions: [{ type: "Verified", status: "Maybe" }] }
    const result = parseBackupCheck(obj)
    assert.isTrue(result.success)
    if (!result.success) return
    assert.isUndefined(result.data.status)
    assert.match(result.warnings.join("\n"), /status\.conditions\[0\]\.status/)
  })

  it("keeps a valid status", () => {
    const obj = sample() as Mutable
    obj.status = {
      observedGeneration: 3,
      conditions: [
        {
          type: "Verified",
          status: "True",
          reason: "RestoreSucceeded",
          message: "orders-2026-11-29 restored and checksum verified in 41s",
          lastTransitionTime: "2026-11-29T03:00:52Z",
          observedGeneration: 3,
        },
      ],
      lastRun: {
        jobName: "orders-db-nightly-s20261129t0200z",
        runID: "s20261129t0200z",
        startTime: "2026-11-29T02:00:01Z",
        completionTime: "2026-11-29T02:00:52Z",
        result: "Succeeded",
        traceID: "4bf92f3577b34da6a3ce929d0e0e4736",
      },
      lastSuccessfulTime: "2026-11-29T02:00:52Z",
      nextRunTime: "2026-11-30T02:00:00Z",
    }
    const result = parseBackupCheck(obj)
    assert.isTrue(result.success)
    if (result.success) assert.strictEqual(result.data.status?.lastRun?.result, "Succeeded")
  })
})

describe("parseBackupCheck: invalid objects", () => {
  it("rejects a spec with neither jobTemplate nor restore", () => {
    expectInvalid(
      withSpec((s) => delete s.jobTemplate),
      /spec\.restore: exactly one of jobTemplate \(a custom restore Job\) and restore/,
    )
  })

  it("rejects a jobTemplate without containers", () => {
    expectInvalid(
      withSpec((s) => (s.jobTemplate.spec.template.spec.containers = [])),
      /containers: must have at least 1 item/,
    )
    expectInvalid(
      withSpec((s) => delete s.jobTemplate.spec.template),
      /spec\.jobTemplate\.spec\.template: required/,
    )
    expectInvalid(
      withSpec((s) => (s.jobTemplate.spec.template.spec.restartPolicy = "Always")),
      /restartPolicy/,
    )
  })

  it("rejects a missing or empty backup name", () => {
    expectInvalid(
      withSpec((s) => delete s.backup.name),
      /spec\.backup\.name: required/,
    )
    expectInvalid(
      withSpec((s) => (s.backup.name = "")),
      /spec\.backup\.name/,
    )
  })

  it("rejects bad cron expressions, with croner's reason where the pattern passes", () => {
    expectInvalid(
      withSpec((s) => (s.schedule = "every night")),
      /spec\.schedule: must be 5 cron fields/,
    )
    expectInvalid(
      withSpec((s) => (s.schedule = "0 3 * * * *")),
      /spec\.schedule/,
    )
    expectInvalid(
      withSpec((s) => (s.schedule = "61 3 * * *")),
      /spec\.schedule: invalid schedule "61 3 \* \* \*": Invalid value for minute: 61/,
    )
    expectInvalid(
      withSpec((s) => (s.schedule = "0 0 31 2 *")),
      /never runs/,
    )
  })

  it("rejects bad time zones, and a time zone without a schedule", () => {
    expectInvalid(
      withSpec((s) => (s.timeZone = "Europe/Atlantis")),
      /spec\.timeZone: unknown time zone/,
    )
    expectInvalid(
      withSpec((s) => (s.timeZone = "europe/berlin")),
      /case-sensitive/,
    )
    expectInvalid(
      withSpec((s) => delete s.schedule),
      /spec\.timeZone: timeZone requires schedule/,
    )
  })

  it("rejects bad durations", () => {
    expectInvalid(
      withSpec((s) => (s.timeout = "30 minutes")),
      /spec\.timeout: must be a Go duration/,
    )
    expectInvalid(
      withSpec((s) => (s.timeout = "1d")),
      /spec\.timeout/,
    )
    expectInvalid(
      withSpec((s) => (s.timeout = "500ms")),
      /spec\.timeout: must be at least 1s/,
    )
    expectInvalid(
      withSpec((s) => (s.maxStaleness = "0")),
      /spec\.maxStaleness: must be greater than 0/,
    )
    expectInvalid(
      withSpec((s) => (s.maxStaleness = 3600)),
      /spec\.maxStaleness/,
    )
  })

  it("refuses a timeout longer than the schedule's shortest interval, naming both and the fix", () => {
    expectInvalid(
      withSpec((s) => {
        s.schedule = "*/15 * * * *"
        s.timeout = "1h"
      }),
      /spec\.timeout: timeout 1h is longer than the shortest interval of schedule "\*\/15 \* \* \* \*" \(15m0s\).*at most 15m0s/,
    )
    // The default (1h) counts too: a schedule more frequent than hourly needs its own timeout.
    expectInvalid(
      withSpec((s) => {
        s.schedule = "* * * * *"
        delete s.timeout
      }),
      /spec\.timeout: timeout 1h is longer than the shortest interval .* \(1m0s\)/,
    )
    // Irregular schedules are judged by their shortest gap: */7 fires at :56 and again at :00.
    expectInvalid(
      withSpec((s) => {
        s.schedule = "*/7 * * * *"
        s.timeout = "5m"
      }),
      /\(4m0s\)/,
    )
    for (const [schedule, timeout] of [
      ["*/15 * * * *", "15m"],
      ["* * * * *", "50s"],
      ["0 * * * *", "1h"],
      ["0 3 * * *", "23h"],
    ]) {
      const ok = parseBackupCheck(
        withSpec((s) => {
          s.schedule = schedule
          s.timeout = timeout
        }),
      )
      assert.isTrue(ok.success, `${schedule} with timeout ${timeout}`)
    }
    // Daily in Europe/Berlin is 23h apart on the day summer time starts.
    assert.isFalse(parseBackupCheck(withSpec((s) => (s.timeout = "24h"))).success)
    assert.isTrue(
      parseBackupCheck(
        withSpec((s) => {
          delete s.schedule
          delete s.timeZone
          s.timeout = "48h"
        }),
      ).success,
      "without a schedule any timeout is fine",
    )
  })

  it("refuses a start window that is not shorter than the interval, negative, or without a schedule", () => {
    const window = (startWindow: unknown, schedule = "0 3 * * *", timeout = "30m") =>
      withSpec((s) => {
        s.schedule = schedule
        s.timeout = timeout
        ;(s as Record<string, unknown>).startWindow = startWindow
      })
    assert.isTrue(parseBackupCheck(window("2h")).success)
    assert.isTrue(parseBackupCheck(window("0s")).success)
    // Daily in Europe/Berlin: the shortest interval is 23h (summer time starts).
    expectInvalid(
      window("23h"),
      /spec\.startWindow: startWindow 23h is not shorter than the shortest interval of schedule "0 3 \* \* \*" \(23h0m0s\)/,
    )
    expectInvalid(window("-1h"), /spec\.startWindow: must not be negative/)
    expectInvalid(window("soon"), /spec\.startWindow: must be a Go duration/)
    expectInvalid(
      window("30m", "*/15 * * * *", "10m"),
      /spec\.startWindow: startWindow 30m is not shorter than the shortest interval .*\(15m0s\)/,
    )
    expectInvalid(
      window("10m", "*/15 * * * *", "10m"),
      /spec\.startWindow: startWindow 10m plus timeout 10m is longer than the shortest interval .*at most 15m0s/,
    )
    expectInvalid(
      withSpec((s) => {
        delete s.schedule
        delete s.timeZone
        ;(s as Record<string, unknown>).startWindow = "1h"
      }),
      /spec\.startWindow: startWindow requires schedule/,
    )
  })

  it("defaults concurrencyPolicy to Forbid and accepts Replace only besides it", () => {
    const parsed = parseBackupCheck(withSpec((s) => delete s.concurrencyPolicy))
    assert.isTrue(parsed.success)
    if (parsed.success) assert.strictEqual(parsed.data.spec.concurrencyPolicy, "Forbid")
    assert.isTrue(parseBackupCheck(withSpec((s) => (s.concurrencyPolicy = "Replace"))).success)
    expectInvalid(
      withSpec((s) => (s.concurrencyPolicy = "Allow")),
      /spec\.concurrencyPolicy/,
    )
  })

  it("rejects bad checksums", () => {
    for (const checksum of [
      "sha256:abc",
      `sha256:${"A".repeat(64)}`,
      `sha1:${"a".repeat(40)}`,
      `md5:${"a".repeat(64)}`,
      `sha256:${"a".repeat(63)}`,
      "9f86d081884c7d65",
    ]) {
      expectInvalid(
        withSpec((s) => (s.backup.checksum = checksum)),
        /spec\.backup\.checksum: checksum must be/,
      )
    }
  })

  it("rejects unknown fields in the spec, including typos and jobTemplate.metadata extras", () => {
    expectInvalid(
      withSpec((s) => (s.schedul = "0 3 * * *")),
      /spec: unknown field "schedul"/,
    )
    expectInvalid(
      withSpec((s) => (s.backup.sha = "x")),
      /spec\.backup: unknown field "sha"/,
    )
    expectInvalid(
      withSpec((s) => (s.jobTemplate.metadata = { name: "fixed" })),
      /spec\.jobTemplate\.metadata: unknown field "name"/,
    )
  })

  it("rejects negative or fractional history limits and wrong types", () => {
    expectInvalid(
      withSpec((s) => (s.successfulRunsHistoryLimit = -1)),
      /successfulRunsHistoryLimit/,
    )
    expectInvalid(
      withSpec((s) => (s.failedRunsHistoryLimit = 1.5)),
      /failedRunsHistoryLimit/,
    )
    expectInvalid(
      withSpec((s) => (s.suspend = "yes")),
      /spec\.suspend/,
    )
  })

  it("rejects the wrong kind or apiVersion, and never throws on garbage", () => {
    expectInvalid({ ...sample(), kind: "CronJob" }, /kind/)
    expectInvalid({ ...sample(), apiVersion: "fleetcheck.io/v1" }, /apiVersion/)
    const hostile = {
      ...sample(),
      get spec(): unknown {
        throw new Error("boom")
      },
    }
    for (const garbage of [undefined, null, 42, "x", [], {}, { spec: null }, hostile]) {
      const result = parseBackupCheck(garbage)
      assert.isFalse(result.success)
    }
  })

  it("reports several problems in one bounded message", () => {
    const result = parseBackupCheck(
      withSpec((s) => {
        s.timeout = "soon"
        s.schedule = "whenever"
        s.backup.checksum = "nope"
      }),
    )
    assert.isFalse(result.success)
    if (result.success) return
    assert.match(result.error, /spec\.timeout.*; .*spec\.schedule|spec\.schedule.*; .*spec\.timeout/)
    assert.isAtLeast(result.issues.length, 3)
    const many = withSpec((s) => {
      for (let i = 0; i < 200; i++) s[`unknownField${i}`] = i
      s.backup = { name: "", checksum: "x".repeat(5000) }
    })
    const bounded = parseBackupCheck(many)
    assert.isFalse(bounded.success)
    if (!bounded.success) assert.isAtMost(bounded.error.length, 1100)
  })
})

describe("constants", () => {
  it("exports the condition types and reasons, all valid metav1 reasons", () => {
    assert.strictEqual(conditionTypes.Verified, "Verified")
    const reasons = Object.values(conditionReasons)
    for (const required of [
      "RestoreSucceeded",
      "RestoreFailed",
      "ChecksumMismatch",
      "RestoreTimedOut",
      "VerificationStale",
      "RestoreRunning",
      "Suspended",
      "JobCreateFailed",
      "ClusterUnreachable",
      "InvalidSpec",
      "RestoreJobMissing",
      "NameConflict",
      "RunSuperseded",
    ]) {
      assert.include(reasons, required)
    }
    for (const reason of [...reasons, ...Object.values(memberClusterReasons)]) {
      assert.match(reason, conditionReasonPattern)
    }
    assert.deepStrictEqual(Object.values(memberClusterConditionTypes), [
      "Ready",
      "Connected",
      "CredentialsValid",
      "BackupsVerified",
    ])
    assert.strictEqual(memberClusterReasons.CredentialsExpiringSoon, "CredentialsExpiringSoon")
  })

  it("has no input-only fields that the output lacks", () => {
    // Every default the CRD declares is also applied by the hub's parse.
    const parsed = BackupCheckSpecSchema.parse({
      backup: { name: "b" },
      jobTemplate: { spec: { template: { spec: { containers: [{ name: "c", image: "i" }] } } } },
    })
    assert.deepStrictEqual(Object.keys(parsed).sort(), [
      "backup",
      "concurrencyPolicy",
      "failedRunsHistoryLimit",
      "historyLimit",
      "jobTemplate",
      "successfulRunsHistoryLimit",
      "suspend",
      "timeout",
    ])
  })
})

describe("parseMemberCluster", () => {
  const member = () => ({
    apiVersion: "fleetcheck.io/v1alpha1",
    kind: "MemberCluster",
    metadata: { name: "eu-west-1", labels: { region: "eu" } },
    spec: {},
    status: {
      conditions: [
        {
          type: "CredentialsValid",
          status: "True",
          reason: "CredentialsExpiringSoon",
          message: "token expires in 3d",
          lastTransitionTime: "2026-11-29T03:00:00Z",
        },
      ],
      kubernetesVersion: "v1.37.2",
      lastProbeTime: "2026-11-29T03:01:00Z",
      counts: { total: 5, verified: 3, failed: 1, unknown: 1 },
    },
  })

  it("accepts an empty spec, a description and a full status", () => {
    assert.isTrue(parseMemberCluster(member()).success)
    assert.isTrue(parseMemberCluster({ ...member(), spec: { description: "prod EU" } }).success)
    assert.isTrue(parseMemberCluster({ ...member(), spec: undefined, status: undefined }).success)
  })

  it("rejects unknown spec fields and negative counts", () => {
    const unknown = parseMemberCluster({ ...member(), spec: { kubeconfig: "x" } })
    assert.isFalse(unknown.success)
    if (!unknown.success) assert.match(unknown.error, /spec: unknown field "kubeconfig"/)
    const negative = member()
    negative.status.counts.failed = -1
    const result = parseMemberCluster(negative)
    assert.isTrue(result.success) // a bad status is dropped, not fatal
    if (result.success) assert.match(result.warnings.join(), /status\.counts\.failed/)
  })
})
