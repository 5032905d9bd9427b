// The restore agent's decisions that need no tool: which reason restic's words mean, which recovery
// point a run restores, etcd's prefix range, assertion verdicts, S3 request signing (checked against
// botocore's own SigV4 signer) and the local fleet's reading of resource quantities.
import { execFileSync } from "node:child_process"
import { describe, expect, it } from "vitest"
import { quantityBytes } from "../../clusters/local-fleet/agent-executor.ts"
import { prefixEnd } from "../../src/agent/etcd.ts"
import { s3HttpUrl, signS3Get } from "../../src/agent/object-fetch.ts"
import { assertionVerdict, scalars } from "../../src/agent/postgres.ts"
import { AgentFailure } from "../../src/agent/protocol.ts"
import { chooseRecoveryPoint } from "../../src/agent/recovery-point.ts"
import { classifyResticFailure } from "../../src/agent/restic.ts"

describe("classifyResticFailure", () => {
  it.each([
    // restic 0.14's own words (exit 1 for all of them), as seen against real repositories
    [1, "Fatal: wrong password or no key found\n", "RepositoryAuthFailed"],
    [
      1,
      "Fatal: unable to open config file: Stat: stat /r/config: no such file or directory\nIs there a repository at the following location?\n",
      "RepositoryUnreachable",
    ],
    [1, 'Fatal: invalid id "deadbeef": no matching ID found for prefix "deadbeef"\n', "SnapshotNotFound"],
    [1, "Load(<data/1a2b>, 0, 0) returned error: ciphertext verification failed\n", "DataCorrupted"],
    [1, "Pack ID does not match, want 1a2b, got 3c4d\nFatal: repository contains errors\n", "DataCorrupted"],
    [1, "There were 3 errors\n", "DataCorrupted"],
    [
      1,
      "Fatal: unable to open config file: Stat: The AWS Access Key Id you provided does not exist (InvalidAccessKeyId)",
      "RepositoryAuthFailed",
    ],
    [1, "dial tcp 127.0.0.1:9: connect: connection refused", "RepositoryUnreachable"],
    // restic 0.17+ exit codes decide before the words do
    [12, "anything", "RepositoryAuthFailed"],
    [10, "anything", "RepositoryUnreachable"],
    [1, "something no one has seen", "RestoreToolFailed"],
  ])("exit %i %j is %s", (code, stderr, reason) => {
    expect(classifyResticFailure(code, stderr)).toBe(reason)
  })
})

describe("chooseRecoveryPoint", () => {
  const now = new Date("2026-12-06T12:00:00Z")
  const points = [
    { id: "c", time: "2026-12-06T11:00:00Z" },
    { id: "a", time: "2026-12-04T12:00:00Z" },
    { id: "b", time: "2026-12-06T06:00:00Z" },
    { id: "x", time: "not a time" },
  ]
  it("Latest is the newest dated point, whatever the input order", () => {
    expect(chooseRecoveryPoint(points, { policy: "Latest" }, "run-1", now, "snapshot").id).toBe("c")
  })
  it("Random stays within the window, is the same for the same run id, and reaches every point", () => {
    const spec = { policy: "Random" as const, window: "24h" }
    const picked = new Set<string>()
    for (let i = 0; i < 64; i++) {
      const p = chooseRecoveryPoint(points, spec, `run-${i}`, now, "snapshot")
      expect(p).toBe(chooseRecoveryPoint(points, spec, `run-${i}`, now, "snapshot"))
      picked.add(p.id)
    }
    expect([...picked].sort()).toEqual(["b", "c"])
    const all = new Set<string>()
    for (let i = 0; i < 64; i++)
      all.add(chooseRecoveryPoint(points, { policy: "Random" }, `run-${i}`, now, "snapshot").id)
    expect([...all].sort()).toEqual(["a", "b", "c"])
  })
  it("no point, or none within the window, is RecoveryPointNotFound with the newest named", () => {
    const fail = (f: () => unknown) => {
      try {
        f()
      } catch (e) {
        return e
      }
      throw new Error("did not throw")
    }
    const none = fail(() => chooseRecoveryPoint([], { policy: "Latest" }, "r", now, "snapshot"))
    expect(none).toBeInstanceOf(AgentFailure)
    expect(none).toMatchObject({ reason: "RecoveryPointNotFound", message: "no snapshot found" })
    const old = fail(() =>
      chooseRecoveryPoint(points, { policy: "Random", window: "30m" }, "r", now, "snapshot"),
    )
    expect(old).toMatchObject({ reason: "RecoveryPointNotFound" })
    expect((old as Error).message).toMatch(/within the last 30m \(3 older; newest 2026-12-06T11:00:00Z\)/)
  })
})

describe("prefixEnd", () => {
  it("increments the last byte that can be, dropping trailing 0xff", () => {
    expect(prefixEnd(Buffer.from("/registry/")).toString()).toBe("/registry0")
    expect([...prefixEnd(Buffer.from([0x61, 0xff, 0xff]))]).toEqual([0x62])
    expect([...prefixEnd(Buffer.from([0xff]))]).toEqual([0])
  })
})

describe("assertionVerdict", () => {
  it("min, max and equals each name the value and the bound", () => {
    expect(assertionVerdict({ name: "n", sql: "", min: 5 }, 5)).toBeUndefined()
    expect(assertionVerdict({ name: "n", sql: "", min: 5 }, 4)).toBe("n = 4, below the minimum 5")
    expect(assertionVerdict({ name: "n", sql: "", max: 5 }, 6)).toBe("n = 6, above the maximum 5")
    expect(assertionVerdict({ name: "n", sql: "", equals: 0 }, 1)).toBe("n = 1, expected 0")
  })
})

describe("scalars", () => {
  // psql as it answers -A -t -q with \\echo and queries interleaved: each -c in turn, stopping at the
  // first failing query (ON_ERROR_STOP).
  const psql = (answers: ReadonlyArray<string | Error>) => ({
    tool: async (_command: string, args: ReadonlyArray<string>) => {
      let stdout = ""
      let query = 0
      for (let i = 0; i < args.length; i++) {
        if (args[i] !== "-c") continue
        const c = args[++i] ?? ""
        if (c.startsWith("\\echo ")) {
          stdout += `${c.slice(6)}\n`
          continue
        }
        const a = answers[query++]
        if (a instanceof Error) return { code: 3, stdout, stderr: `ERROR:  ${a.message}\n` }
        stdout += a
      }
      return { code: 0, stdout, stderr: "" }
    },
  })
  const queries = [
    { sql: "SELECT 1", what: "assertion a" },
    { sql: "SELECT 2", what: "assertion b" },
    { sql: "SELECT 3", what: "tables" },
  ]
  it("gives each query its own first line, from one psql run", async () => {
    expect(await scalars(psql(["7\n8\n", "\n", "9\n"]), "db", queries)).toEqual(["7", "", "9"])
  })
  it("a line that looks like a marker cannot shift the answers", async () => {
    const forged = "fleetcheck-query-0000000000000000-2\n"
    expect(await scalars(psql([forged, "5\n", "6\n"]), "db", queries)).toEqual([forged.trim(), "5", "6"])
  })
  it("a failing query is named, with psql's words", async () => {
    await expect(
      scalars(psql(["1\n", new Error('relation "x" does not exist')]), "db", queries),
    ).rejects.toThrow('assertion b: ERROR:  relation "x" does not exist')
  })
})

describe("signS3Get", () => {
  const env = {
    AWS_ACCESS_KEY_ID: "AKIDEXAMPLE",
    AWS_SECRET_ACCESS_KEY: "wJalr/K7MDENG+bPxRfiCY",
    AWS_REGION: "eu-west-3",
  }
  it("signs as botocore's SigV4 signer does, query and odd key characters included", () => {
    const url = s3HttpUrl("s3://backups/etcd/member 1(a).db", "http://127.0.0.1:9000", env)
    url.searchParams.set("versionId", "v1+2")
    const now = new Date("2026-12-06T12:34:56.789Z")
    const ours = signS3Get(url, env, now)
    const theirs = execFileSync(
      "python3",
      [
        "-c",
        `import sys, datetime
from unittest import mock
from botocore.auth import S3SigV4Auth
from botocore.awsrequest import AWSRequest
from botocore.credentials import Credentials
req = AWSRequest(method="GET", url=sys.argv[1], headers={"host": sys.argv[2]})
req.context["payload_signing_enabled"] = True
with mock.patch("botocore.auth.get_current_datetime", return_value=datetime.datetime(2026, 12, 6, 12, 34, 56)):
    S3SigV4Auth(Credentials(sys.argv[3], sys.argv[4]), "s3", sys.argv[5]).add_auth(req)
print(req.headers["Authorization"])`,
        url.toString(),
        url.host,
        env.AWS_ACCESS_KEY_ID,
        env.AWS_SECRET_ACCESS_KEY,
        env.AWS_REGION,
      ],
      { encoding: "utf8" },
    ).trim()
    expect(ours.authorization).toBe(theirs)
    expect(url.pathname).toBe("/backups/etcd/member%201%28a%29.db")
  })
  it("missing keys are RepositoryAuthFailed before any request", () => {
    expect(() => signS3Get(new URL("http://h/b/k"), {}, new Date())).toThrow(/AWS_ACCESS_KEY_ID/)
  })
})

describe("quantityBytes", () => {
  it.each([
    ["10Gi", 10 * 2 ** 30],
    ["1G", 1e9],
    ["512Mi", 512 * 2 ** 20],
    ["1500k", 1.5e6],
    ["100m", 1],
    ["12", 12],
  ])("%s is %i bytes", (q, bytes) => {
    expect(quantityBytes(q)).toBe(bytes)
  })
  it("refuses what is not a quantity", () => {
    expect(quantityBytes("ten gigs")).toBeUndefined()
    expect(quantityBytes("1Xi")).toBeUndefined()
  })
})
