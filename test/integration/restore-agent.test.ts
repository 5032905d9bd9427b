// Real restores through the hub's engine on a real cluster: BackupChecks with spec.restore become agent
// Jobs, the local fleet runs each agent pod as a host process (agent-executor.ts), and the agent
// restores what restic, etcd and pg_dump really wrote, from a filesystem and from an S3-compatible
// server on loopback. A damaged pack, a wrong password, a failing assertion each turn the check red
// with the agent's reason; the recovery point restic chose is the one recorded in status.
import { readdirSync, readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Layer, Logger, References } from "effect"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  barmanBackup,
  damageResticPacks,
  establishedWithin,
  etcdSnapshot,
  type LocalCluster,
  type LocalFleet,
  pgDump,
  type ResticSnapshot,
  resticBackup,
  type S3Server,
  startFleet,
  startS3Server,
  writeSampleFiles,
} from "../../clusters/local-fleet/index.ts"
import { runMethod } from "../../src/agent/main.ts"
import { TracingLive } from "../../src/observability/tracing.ts"
import { type RunningEngine, startEngine } from "../support/engine.ts"
import { waitUntil } from "../support/wait.ts"

const ns = "backups"
const crdFile = new URL("../../deploy/crds/fleetcheck.io_backupchecks.yaml", import.meta.url).pathname
const checksPath = `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`

describe("restore agent: real restic, etcd and Postgres backups restored through the hub", () => {
  let fleet: LocalFleet
  let c: LocalCluster
  let engine: RunningEngine | undefined
  let s3: S3Server
  let data: string
  let hashes: Map<string, string>
  let s3Snaps: ResticSnapshot[]
  let fsSnap: ResticSnapshot
  let flipRepo: string
  let s3Repo: string
  let barman: { backupID: string }
  // Everything the engine traced and logged (every level), for the credential search below.
  const spans = new InMemorySpanExporter()
  const logLines: string[] = []
  const observed = Layer.mergeAll(
    TracingLive({ serviceName: "fleetcheck-test", spanProcessor: new SimpleSpanProcessor(spans) }),
    Logger.layer([Logger.map(Logger.formatJson, (line) => void logLines.push(line))]),
    Layer.succeed(References.MinimumLogLevel, "Debug"),
  )

  const secret = async (name: string, values: Record<string, string>) => {
    const r = await c.api("POST", `/api/v1/namespaces/${ns}/secrets`, {
      metadata: { name },
      stringData: values,
    })
    expect(r.status, JSON.stringify(r.body)).toBe(201)
  }
  const check = async (name: string, spec: Record<string, unknown>) => {
    const r = await c.api("POST", checksPath, {
      apiVersion: "fleetcheck.io/v1alpha1",
      kind: "BackupCheck",
      metadata: { name, namespace: ns },
      spec: { backup: { name }, timeout: "2m", ...spec },
    })
    expect(r.status, JSON.stringify(r.body)).toBe(201)
  }
  const verdict = (name: string, runID?: string) =>
    waitUntil(`${name} decided`, 120_000, async () => {
      const obj = (await c.api("GET", `${checksPath}/${name}`)).body
      const v = (obj?.status?.conditions ?? []).find((x: any) => x.type === "Verified")
      const run = obj?.status?.lastRun
      if (!(run?.result !== undefined && run.result !== "Running" && v && (!runID || run.runID === runID)))
        return undefined
      // A figure, not an assertion: the run's start (Job created) to its verdict, agent included.
      const took = (Date.parse(run.completionTime) - Date.parse(run.startTime)) / 1000
      console.log(`[restore-agent] ${name} ${run.runID}: ${v.reason} ${took}s from run start to verdict`)
      return { v, run }
    })

  beforeAll(async () => {
    fleet = await startFleet({ clusters: ["member"] })
    c = fleet.cluster("member")
    const applied = await c.kubectl(["apply", "--server-side", "-f", crdFile])
    expect(applied.code, applied.stderr).toBe(0)
    await establishedWithin(c, "BackupCheck CRD", "crd/backupchecks.fleetcheck.io")
    expect((await c.api("POST", "/api/v1/namespaces", { metadata: { name: ns } })).status).toBe(201)

    // The backups, made by the tools themselves.
    data = join(fleet.runDir, "backups")
    hashes = writeSampleFiles(join(data, "app"), 40, 64 * 1024, "orders")
    s3 = await startS3Server(fleet.spawn)
    await s3.createBucket("restic")
    s3Repo = `s3:${s3.endpoint}/restic/orders`
    s3Snaps = []
    for (const [i, init] of [true, false, false].entries()) {
      if (i > 0) writeFileSync(join(data, "app", `extra-${i}.txt`), `generation ${i}\n`)
      s3Snaps.push(
        await resticBackup({
          repository: s3Repo,
          password: "s3-secret",
          env: s3.env,
          dir: join(data, "app"),
          host: "db-1",
          init,
        }),
      )
    }
    fsSnap = await resticBackup({
      repository: join(data, "repo-damaged"),
      password: "fs-secret",
      dir: join(data, "app"),
      host: "db-1",
      init: true,
    })
    // Damage every data pack of the filesystem repository: restic's verification must see it.
    expect(damageResticPacks(join(data, "repo-damaged"))).toBeGreaterThan(0)
    const etcdFile = await etcdSnapshot(fleet.spawn, join(fleet.binDir, "etcd"), data, [
      "/registry/configmaps/shop/a",
      "/registry/configmaps/shop/b",
      "/registry/secrets/shop/c",
    ])
    await s3.createBucket("etcd")
    await s3.putObject("etcd", "snapshots/member.db", readFileSync(etcdFile))
    const dump = await pgDump(data, 500, 5 * 60_000)

    await secret("restic-s3", { RESTIC_PASSWORD: "s3-secret", ...s3.env })
    await secret("restic-fs", { RESTIC_PASSWORD: "fs-secret" })
    await secret("restic-wrong", { RESTIC_PASSWORD: "not-the-password", ...s3.env })
    await secret("s3", { ...s3.env })

    const files = [...hashes.entries()]
      .slice(0, 2)
      .map(([f, sha256]) => ({ path: join(data, "app", f), sha256 })) // as restic ls lists them
    await check("restic-latest", {
      restore: {
        restic: {
          repository: s3Repo,
          credentialsSecretRef: { name: "restic-s3" },
          host: "db-1",
          verify: { readDataSubset: "100%", files, minFiles: 40, minBytes: 40 * 64 * 1024 },
        },
      },
    })
    await check("restic-random", {
      restore: { restic: { repository: s3Repo, credentialsSecretRef: { name: "restic-s3" } } },
      recoveryPoint: { policy: "Random", window: "1h" },
    })
    await check("restic-damaged", {
      restore: {
        restic: { repository: join(data, "repo-damaged"), credentialsSecretRef: { name: "restic-fs" } },
      },
    })
    await check("restic-wrong-password", {
      restore: { restic: { repository: s3Repo, credentialsSecretRef: { name: "restic-wrong" } } },
    })
    await check("restic-hash-mismatch", {
      restore: {
        restic: {
          repository: s3Repo,
          credentialsSecretRef: { name: "restic-s3" },
          verify: { files: [{ path: join(data, "app", "file-0000.bin"), sha256: "0".repeat(64) }] },
        },
      },
    })
    await check("etcd", {
      restore: {
        etcd: {
          snapshot: {
            url: "s3://etcd/snapshots/member.db",
            endpointURL: s3.endpoint,
            credentialsSecretRef: { name: "s3" },
          },
          expectKeys: [{ prefix: "/registry/configmaps/", min: 2 }],
        },
      },
    })
    await check("postgres", {
      restore: {
        postgres: {
          dump: { url: dump },
          assertions: [{ name: "orders", sql: "SELECT count(*) FROM orders", min: 500 }],
          dataTimestampQuery: "SELECT max(created) FROM orders",
        },
      },
    })
    await check("postgres-assertion", {
      restore: {
        postgres: {
          dump: { url: dump },
          assertions: [{ name: "orders", sql: "SELECT count(*) FROM orders", min: 501 }],
        },
      },
    })
    // CloudNativePG's object-store layout, written by barman-cloud from a real Postgres: 300 orders in
    // the base backup, 20 more only in the archived WAL.
    await s3.createBucket("cnpg")
    barman = await barmanBackup(data, s3, "s3://cnpg/orders", "orders-db", 300, 20)
    await check("postgres-barman", {
      restore: {
        postgres: {
          barmanObjectStore: {
            destinationPath: "s3://cnpg/orders",
            serverName: "orders-db",
            endpointURL: s3.endpoint,
            credentialsSecretRef: { name: "s3" },
          },
          assertions: [{ name: "orders", sql: "SELECT count(*) FROM orders", equals: 320 }],
          dataTimestampQuery: "SELECT max(created) FROM orders",
        },
      },
    })
    // Bad input: each ends with its own reason and a message naming what failed.
    const closed = `s3:http://127.0.0.1:9/restic/orders` // port 9 (discard): nothing listens on loopback
    await check("restic-unreachable", {
      restore: { restic: { repository: closed, credentialsSecretRef: { name: "restic-s3" } } },
    })
    await check("restic-no-such-snapshot", {
      restore: {
        restic: { repository: s3Repo, credentialsSecretRef: { name: "restic-s3" }, snapshot: "deadbeef" },
      },
    })
    await check("restic-no-secret", {
      restore: { restic: { repository: s3Repo, credentialsSecretRef: { name: "not-there" } } },
    })
    await s3.putObject(
      "etcd",
      "snapshots/garbage.db",
      Buffer.from("this is not an etcd snapshot\n".repeat(100)),
    )
    await check("etcd-garbage", {
      restore: {
        etcd: {
          snapshot: {
            url: "s3://etcd/snapshots/garbage.db",
            endpointURL: s3.endpoint,
            credentialsSecretRef: { name: "s3" },
          },
        },
      },
    })
    await check("etcd-missing-object", {
      restore: {
        etcd: {
          snapshot: {
            url: "s3://etcd/snapshots/absent.db",
            endpointURL: s3.endpoint,
            credentialsSecretRef: { name: "s3" },
          },
        },
      },
    })
    // Green first; then one damaged pack, and the next run is red.
    flipRepo = join(data, "repo-flip")
    await resticBackup({
      repository: flipRepo,
      password: "fs-secret",
      dir: join(data, "app"),
      host: "db-1",
      init: true,
    })
    await check("restic-flip", {
      restore: { restic: { repository: flipRepo, credentialsSecretRef: { name: "restic-fs" } } },
    })
    engine = await startEngine(c, { runningPollMs: 1_000 }, observed)
  }, 240_000)

  afterAll(async () => {
    await engine?.stop()
    await fleet?.stop()
  })

  it("restic from S3: the newest snapshot restored and verified, its id and time recorded, file hashes checked", async () => {
    const { v, run } = await verdict("restic-latest")
    expect(v, v.message).toMatchObject({ status: "True", reason: "RestoreSucceeded" })
    const newest = s3Snaps[s3Snaps.length - 1] as ResticSnapshot
    expect(run.recoveryPoint).toEqual({
      id: newest.id,
      time: newest.time.replace(/\.\d+Z$/, (m) => (m === ".000Z" ? "Z" : m)),
    })
    const restore = run.phases.find((p: any) => p.name === "restore")
    expect(restore.counts.files).toBe(42) // 40 files and the two later generations' extra files
    expect(restore.counts.bytes).toBeGreaterThanOrEqual(40 * 64 * 1024)
    expect(Date.parse(restore.dataTimestamp)).toBe(Date.parse(newest.time))
    expect(restore.message).toMatch(/restic check read 100%.*2 file hashes match/)
  })

  it("recoveryPoint Random picks one of the snapshots within the window and records which", async () => {
    const { v, run } = await verdict("restic-random")
    expect(v.status, v.message).toBe("True")
    expect(s3Snaps.map((s) => s.id)).toContain(run.recoveryPoint.id)
  })

  it("a damaged pack is DataCorrupted, a wrong password RepositoryAuthFailed, a wrong hash DataCorrupted", async () => {
    const damaged = await verdict("restic-damaged")
    expect(damaged.v, damaged.v.message).toMatchObject({ status: "False", reason: "DataCorrupted" })
    expect(damaged.run.recoveryPoint.id).toBe(fsSnap.id)
    const wrong = await verdict("restic-wrong-password")
    expect(wrong.v, wrong.v.message).toMatchObject({ status: "False", reason: "RepositoryAuthFailed" })
    expect(wrong.v.message).toMatch(/wrong password/)
    const mismatch = await verdict("restic-hash-mismatch")
    expect(mismatch.v, mismatch.v.message).toMatchObject({ status: "False", reason: "DataCorrupted" })
    expect(mismatch.v.message).toMatch(/file-0000\.bin restored with sha256 [0-9a-f]{64}, expected 0{64}/)
  })

  it("etcd: a snapshot from S3 restored with etcdutl, served by etcd, keys counted per prefix", async () => {
    const { v, run } = await verdict("etcd")
    expect(v, v.message).toMatchObject({ status: "True", reason: "RestoreSucceeded" })
    expect(run.phases[0].counts).toMatchObject({ keys: 3, files: 1 })
    expect(v.message).toMatch(/\/registry\/configmaps\/: 2/)
  })

  it("postgres: a pg_dump restored into a throwaway server, assertions and the data's own timestamp", async () => {
    const { v, run } = await verdict("postgres")
    expect(v, v.message).toMatchObject({ status: "True", reason: "RestoreSucceeded" })
    const restore = run.phases[0]
    expect(restore.counts).toMatchObject({ orders: 500, tables: 1 })
    // The newest order was written five minutes before the dump: the data age comes from the rows.
    const age = Date.now() - Date.parse(restore.dataTimestamp)
    expect(age).toBeGreaterThan(5 * 60_000)
    expect(age).toBeLessThan(60 * 60_000)
    const failing = await verdict("postgres-assertion")
    expect(failing.v, failing.v.message).toMatchObject({ status: "False", reason: "AssertionFailed" })
    expect(failing.v.message).toMatch(/orders = 500, below the minimum 501/)
  })

  it("postgres from a CloudNativePG-style object store: barman-cloud base backup plus WAL replayed to the end", async () => {
    const { v, run } = await verdict("postgres-barman")
    expect(v, v.message).toMatchObject({ status: "True", reason: "RestoreSucceeded" })
    expect(run.recoveryPoint.id).toBe(barman.backupID)
    // 320 = the base backup's 300 and the 20 written after it, which only the WAL holds.
    expect(run.phases[0].counts).toMatchObject({ orders: 320 })
    const age = Date.now() - Date.parse(run.phases[0].dataTimestamp)
    expect(age).toBeGreaterThan(2 * 60_000)
    expect(age).toBeLessThan(30 * 60_000)
  })

  it("unreachable repository, missing snapshot, missing Secret, garbage and missing etcd snapshots: each its reason", async () => {
    const unreachable = await verdict("restic-unreachable")
    expect(unreachable.v, unreachable.v.message).toMatchObject({
      status: "False",
      reason: "RepositoryUnreachable",
    })
    const missing = await verdict("restic-no-such-snapshot")
    expect(missing.v, missing.v.message).toMatchObject({ status: "False", reason: "SnapshotNotFound" })
    expect(missing.v.message).toMatch(/deadbeef/)
    const noSecret = await verdict("restic-no-secret")
    expect(noSecret.v, noSecret.v.message).toMatchObject({ status: "False", reason: "RepositoryAuthFailed" })
    expect(noSecret.v.message).toMatch(/Secret not-there has no such key/)
    const garbage = await verdict("etcd-garbage")
    expect(garbage.v, garbage.v.message).toMatchObject({ status: "False", reason: "DataCorrupted" })
    const absent = await verdict("etcd-missing-object")
    expect(absent.v, absent.v.message).toMatchObject({ status: "False", reason: "SnapshotNotFound" })
    expect(absent.v.message).toMatch(/absent\.db/)
  })

  it("one damaged pack turns a green check red on its next run", async () => {
    const first = await verdict("restic-flip", "g1")
    expect(first.v, first.v.message).toMatchObject({ status: "True", reason: "RestoreSucceeded" })
    expect(damageResticPacks(flipRepo)).toBeGreaterThan(0)
    // A new spec generation is a new run (ADR 0004).
    const current = (await c.api("GET", `${checksPath}/restic-flip`)).body
    const patched = await c.api("PUT", `${checksPath}/restic-flip`, {
      ...current,
      spec: { ...current.spec, timeout: "3m" },
    })
    expect(patched.status, JSON.stringify(patched.body)).toBe(200)
    const second = await verdict("restic-flip", "g2")
    expect(second.v, second.v.message).toMatchObject({ status: "False", reason: "DataCorrupted" })
  })

  it("no credential appears in any check's status, the namespace's Events, the agents' Pods or logs, or the engine's spans or logs", async () => {
    const secrets = ["s3-secret", "fs-secret", "not-the-password", s3.env.AWS_SECRET_ACCESS_KEY as string]
    const checks = JSON.stringify((await c.api("GET", checksPath)).body)
    const events = JSON.stringify((await c.api("GET", `/api/v1/namespaces/${ns}/events`)).body)
    // Pods carry the agents' termination messages; their env names Secret keys, never values.
    const pods = JSON.stringify((await c.api("GET", `/api/v1/namespaces/${ns}/pods`)).body)
    // What every agent process wrote (stdout and stderr), one log file each.
    const logDir = join(fleet.runDir, "logs")
    const agentLogs = readdirSync(logDir)
      .filter((f) => f.startsWith("agent-"))
      .map((f) => ({ f, text: readFileSync(join(logDir, f), "utf8") }))
    expect(checks).toContain("RestoreSucceeded") // the objects are there to be searched
    expect(pods).toContain("terminated")
    expect(agentLogs.length).toBeGreaterThan(0)
    // Spans with their attributes, events and status; log lines with their annotations.
    const traced = JSON.stringify(
      spans
        .getFinishedSpans()
        .map((s) => ({ n: s.name, a: s.attributes, e: s.events, s: s.status, l: s.links })),
    )
    expect(traced).toContain("restic-latest")
    expect(logLines.length).toBeGreaterThan(0)
    const logged = logLines.join("\n")
    expect(logged).toContain('"level":"INFO"') // levels below the tests' usual Warn are kept
    for (const secret of secrets) {
      expect(traced.includes(secret), `a span holds ${secret}`).toBe(false)
      expect(logged.includes(secret), `the engine's log holds ${secret}`).toBe(false)
      expect(checks.includes(secret), `a check's status holds ${secret}`).toBe(false)
      expect(events.includes(secret), `an Event holds ${secret}`).toBe(false)
      expect(pods.includes(secret), `a Pod holds ${secret}`).toBe(false)
      for (const { f, text } of agentLogs) expect(text.includes(secret), `${f} holds ${secret}`).toBe(false)
    }
  })

  it("a snapshot larger than the scratch volume is refused, naming both sizes", async () => {
    // restic's size check runs beside the restore and stops it (a large restore is far from done by then).
    // The agent alone (its pods all get the same 10 GiB limit): a 1 MiB scratch limit, a 2.5 MiB snapshot.
    const scratch = join(fleet.runDir, "small-scratch")
    const input = join(fleet.runDir, "small-run.json")
    writeFileSync(
      input,
      JSON.stringify({
        runID: "g1",
        cluster: "member",
        check: { namespace: ns, name: "small" },
        restore: { restic: { repository: s3Repo, credentialsSecretRef: { name: "restic-s3" } } },
        recoveryPoint: { policy: "Latest" },
      }),
    )
    const outcome = await runMethod("restic", {
      ...process.env,
      ...s3.env,
      RESTIC_PASSWORD: "s3-secret",
      FLEETCHECK_RUN_INPUT: input,
      FLEETCHECK_SCRATCH: scratch,
      FLEETCHECK_SCRATCH_LIMIT_BYTES: String(1024 * 1024),
    })
    expect(outcome).toMatchObject({ ok: false, reason: "RestoreToolFailed" })
    expect(outcome.ok ? "" : outcome.message).toMatch(
      /snapshot [0-9a-f]{8} needs 2\.\d MiB but the scratch volume has .* left/,
    )
  })
})
