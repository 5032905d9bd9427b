import { assert, describe, it } from "@effect/vitest"
import { Effect, Fiber, Semaphore } from "effect"
import { TestClock } from "effect/testing"
import { register } from "prom-client"
import { runController, TerminalError } from "../../src/engine/controller.ts"
import { makeWorkQueue } from "../../src/engine/workqueue/workqueue.ts"
import { type FleetMetrics, makeMetrics } from "../../src/observability/metrics/index.ts"

// --- a tiny parser for the Prometheus text exposition format (0.0.4) ---

interface Sample {
  readonly name: string
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

interface Exposition {
  readonly samples: ReadonlyArray<Sample>
  readonly types: ReadonlyMap<string, string>
  readonly helps: ReadonlyMap<string, string>
}

const parseValue = (text: string): number => {
  if (text === "+Inf") return Number.POSITIVE_INFINITY
  if (text === "-Inf") return Number.NEGATIVE_INFINITY
  // prom-client writes NaN as "Nan"; Prometheus (Go's ParseFloat) reads it case-insensitively
  if (text.toLowerCase() === "nan") return Number.NaN
  const value = Number(text)
  if (Number.isNaN(value)) throw new Error(`bad sample value: ${text}`)
  return value
}

/** Parses `{a="x",b="y\"z"}` starting at text[start] === "{"; returns the labels and the index after "}". */
const parseLabels = (text: string, start: number): [Record<string, string>, number] => {
  const labels: Record<string, string> = {}
  let i = start + 1
  while (text[i] !== "}") {
    const eq = text.indexOf("=", i)
    const name = text.slice(i, eq).trim()
    if (!/^[a-zA-Z_][a-zA-Z0-9_]*$/.test(name)) throw new Error(`bad label name: ${name}`)
    if (text[eq + 1] !== '"') throw new Error(`unquoted label value in: ${text}`)
    let value = ""
    i = eq + 2
    while (text[i] !== '"') {
      if (i >= text.length) throw new Error(`unterminated label value in: ${text}`)
      if (text[i] === "\\") {
        const next = text[i + 1]
        value += next === "n" ? "\n" : next
        i += 2
      } else {
        value += text[i]
        i++
      }
    }
    labels[name] = value
    i++
    if (text[i] === ",") i++
  }
  return [labels, i + 1]
}

const parseExposition = (text: string): Exposition => {
  const samples: Array<Sample> = []
  const types = new Map<string, string>()
  const helps = new Map<string, string>()
  for (const line of text.split("\n")) {
    if (line.trim() === "") continue
    if (line.startsWith("# HELP ")) {
      const [name, ...help] = line.slice(7).split(" ")
      helps.set(name!, help.join(" "))
      continue
    }
    if (line.startsWith("# TYPE ")) {
      const [name, type] = line.slice(7).split(" ")
      types.set(name!, type!)
      continue
    }
    if (line.startsWith("#")) continue
    const nameEnd = line.search(/[{ ]/)
    const name = line.slice(0, nameEnd)
    if (!/^[a-zA-Z_:][a-zA-Z0-9_:]*$/.test(name)) throw new Error(`bad metric name: ${line}`)
    let labels: Record<string, string> = {}
    let rest = nameEnd
    if (line[nameEnd] === "{") [labels, rest] = parseLabels(line, nameEnd)
    // a sample may carry a timestamp after the value; we never emit one, so the value is the first field
    const value = parseValue(line.slice(rest).trim().split(" ")[0]!)
    samples.push({ name, labels, value })
  }
  return { samples, types, helps }
}

const scrape = (metrics: FleetMetrics) => Effect.map(Effect.promise(metrics.render), parseExposition)

const matches = (sample: Sample, labels: Readonly<Record<string, string>>): boolean =>
  Object.entries(labels).every(([k, v]) => sample.labels[k] === v)

const find = (exposition: Exposition, name: string, labels: Readonly<Record<string, string>> = {}) =>
  exposition.samples.filter((s) => s.name === name && matches(s, labels))

/** The value of the one sample with this name and (at least) these labels. */
const sampleValue = (
  exposition: Exposition,
  name: string,
  labels: Readonly<Record<string, string>> = {},
): number => {
  const found = find(exposition, name, labels)
  assert.strictEqual(found.length, 1, `expected one ${name} ${JSON.stringify(labels)}, got ${found.length}`)
  return found[0]!.value
}

const bucket = (exposition: Exposition, name: string, labels: Readonly<Record<string, string>>, le: string) =>
  sampleValue(exposition, `${name}_bucket`, { ...labels, le })

// --- the contract ---

const controllerMetrics = {
  controller_runtime_reconcile_total: "counter",
  controller_runtime_reconcile_errors_total: "counter",
  controller_runtime_terminal_reconcile_errors_total: "counter",
  controller_runtime_reconcile_panics_total: "counter",
  controller_runtime_reconcile_time_seconds: "histogram",
  controller_runtime_active_workers: "gauge",
  controller_runtime_max_concurrent_reconciles: "gauge",
} as const

const queueMetrics = {
  workqueue_depth: "gauge",
  workqueue_adds_total: "counter",
  workqueue_queue_duration_seconds: "histogram",
  workqueue_work_duration_seconds: "histogram",
  workqueue_retries_total: "counter",
} as const

const clusterMetrics = {
  fleetcheck_member_cluster_connected: "gauge",
  fleetcheck_member_cluster_ready: "gauge",
  fleetcheck_informer_objects: "gauge",
  fleetcheck_informer_restarts_total: "counter",
} as const

const checkMetrics = {
  fleetcheck_backupcheck_verified: "gauge",
  fleetcheck_backupcheck_last_success_timestamp_seconds: "gauge",
} as const

const allPerCluster = { ...controllerMetrics, ...queueMetrics, ...clusterMetrics, ...checkMetrics }

/** Histograms expose name_bucket, name_sum and name_count. */
const sampleName = (name: string, type: string) => (type === "histogram" ? `${name}_count` : name)

const ctl = { controller: "backupcheck", cluster: "east" }
const queue = { name: "backupcheck", controller: "backupcheck", cluster: "east" }

describe("metrics: names and labels", () => {
  it.effect("every metric exists, typed, with a cluster label, once the cluster is initialised", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics({ memberHistograms: true })
      metrics.initCluster("east", { maxConcurrentReconciles: 8 })
      metrics.setCheckVerified("east", "db", "nightly", "Unknown")
      const exposition = yield* scrape(metrics)

      for (const [name, type] of Object.entries(allPerCluster)) {
        assert.strictEqual(exposition.types.get(name), type, `TYPE of ${name}`)
        assert.isTrue((exposition.helps.get(name) ?? "").length > 0, `HELP of ${name}`)
        const samples = find(exposition, sampleName(name, type), { cluster: "east" })
        assert.isAbove(samples.length, 0, `${name} has a series with cluster="east"`)
      }
      for (const [name, type] of Object.entries(controllerMetrics)) {
        assert.isAbove(find(exposition, sampleName(name, type), ctl).length, 0, `${name} has controller`)
      }
      for (const [name, type] of Object.entries(queueMetrics)) {
        assert.isAbove(
          find(exposition, sampleName(name, type), queue).length,
          0,
          `${name} has name+controller`,
        )
      }
      assert.strictEqual(exposition.types.get("fleetcheck_reconcile_global_inflight"), "gauge")
      assert.strictEqual(sampleValue(exposition, "fleetcheck_reconcile_global_inflight"), 0)
    }),
  )

  it.effect("pre-initialises at zero, as controller-runtime does", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics({ memberHistograms: true })
      metrics.initCluster("east", { maxConcurrentReconciles: 8 })
      const e = yield* scrape(metrics)

      for (const result of ["success", "error", "requeue", "requeue_after"]) {
        assert.strictEqual(
          sampleValue(e, "controller_runtime_reconcile_total", { ...ctl, result }),
          0,
          result,
        )
      }
      assert.strictEqual(sampleValue(e, "controller_runtime_reconcile_errors_total", ctl), 0)
      assert.strictEqual(sampleValue(e, "controller_runtime_terminal_reconcile_errors_total", ctl), 0)
      assert.strictEqual(sampleValue(e, "controller_runtime_reconcile_panics_total", ctl), 0)
      assert.strictEqual(sampleValue(e, "controller_runtime_reconcile_time_seconds_count", ctl), 0)
      assert.strictEqual(sampleValue(e, "controller_runtime_active_workers", ctl), 0)
      assert.strictEqual(sampleValue(e, "controller_runtime_max_concurrent_reconciles", ctl), 8)
      assert.strictEqual(sampleValue(e, "workqueue_depth", queue), 0)
      assert.strictEqual(sampleValue(e, "workqueue_adds_total", queue), 0)
      assert.strictEqual(sampleValue(e, "workqueue_retries_total", queue), 0)
      assert.strictEqual(sampleValue(e, "workqueue_queue_duration_seconds_count", queue), 0)
      assert.strictEqual(sampleValue(e, "workqueue_work_duration_seconds_count", queue), 0)
      assert.strictEqual(sampleValue(e, "fleetcheck_member_cluster_connected", { cluster: "east" }), 0)
      assert.strictEqual(sampleValue(e, "fleetcheck_member_cluster_ready", { cluster: "east" }), 0)
      for (const resource of ["backupchecks.fleetcheck.io", "jobs.batch"]) {
        assert.strictEqual(sampleValue(e, "fleetcheck_informer_objects", { cluster: "east", resource }), 0)
        assert.strictEqual(
          sampleValue(e, "fleetcheck_informer_restarts_total", { cluster: "east", resource }),
          0,
        )
      }
    }),
  )

  it.effect("uses controller-runtime's bucket layouts", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics({ memberHistograms: true })
      metrics.initCluster("east", { maxConcurrentReconciles: 4 })
      const e = yield* scrape(metrics)
      const les = (name: string, labels: Record<string, string>) =>
        find(e, `${name}_bucket`, labels).map((s) => s.labels.le)
      assert.deepStrictEqual(
        les("controller_runtime_reconcile_time_seconds", ctl),
        [
          ...[
            0.005, 0.01, 0.025, 0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.35, 0.4, 0.45, 0.5, 0.6, 0.7, 0.8, 0.9, 1,
          ],
          ...[1.25, 1.5, 1.75, 2, 2.5, 3, 3.5, 4, 4.5, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 60],
          "+Inf",
        ].map(String),
      )
      const exponential = ["1e-8", "1e-7", "0.000001", "0.00001", "0.0001", "0.001", "0.01", "0.1", "1", "10"]
      for (const name of ["workqueue_queue_duration_seconds", "workqueue_work_duration_seconds"]) {
        const got = les(name, queue)
        assert.deepStrictEqual(got, [...exponential, "100", "1000", "+Inf"], name)
      }
    }),
  )

  it.effect(
    "render() is the registry's exposition then the per-check families, and counts written on the hot path show in both",
    () =>
      Effect.gen(function* () {
        const metrics = makeMetrics({ memberHistograms: true })
        const hooks = metrics.queueHooks("east")
        hooks.onAdd?.("db/a")
        metrics.setCheckVerified("east", "db", "nightly", "True", new Date(0))
        const viaRegistry = yield* Effect.promise(() => metrics.registry.metrics())
        assert.strictEqual(
          yield* Effect.promise(metrics.render),
          `${viaRegistry.slice(0, -1)}\n\n${[
            "# HELP fleetcheck_backupcheck_verified The BackupCheck's Verified condition: 1 True, 0 False, -1 Unknown",
            "# TYPE fleetcheck_backupcheck_verified gauge",
            'fleetcheck_backupcheck_verified{cluster="east",namespace="db",name="nightly"} 1',
            "",
            "# HELP fleetcheck_backupcheck_last_success_timestamp_seconds Unix time of the BackupCheck's last successful verification (0: never)",
            "# TYPE fleetcheck_backupcheck_last_success_timestamp_seconds gauge",
            'fleetcheck_backupcheck_last_success_timestamp_seconds{cluster="east",namespace="db",name="nightly"} 0',
            "",
            "# HELP fleetcheck_recovery_point_age_seconds Age of the newest record in the restored data when the check's last run verified it (the structured termination message's dataTimestamp)",
            "# TYPE fleetcheck_recovery_point_age_seconds gauge",
            "",
            "# HELP fleetcheck_backupcheck_objective_met The BackupCheck's objective conditions by objective (restoreTime: RestoreTimeObjectiveMet, dataAge: DataAgeObjectiveMet): 1 True, 0 False, -1 Unknown",
            "# TYPE fleetcheck_backupcheck_objective_met gauge",
            "",
            "# HELP fleetcheck_backupcheck_objective_seconds The BackupCheck's spec.objectives in seconds by objective (restoreTime: maxRestoreDuration, dataAge: maxDataAge)",
            "# TYPE fleetcheck_backupcheck_objective_seconds gauge",
            "",
            "# HELP fleetcheck_backupcheck_verification_deadline_timestamp_seconds Unix time by which the BackupCheck's next successful verification is due: the last success (or creation) plus spec.maxStaleness, or else two schedule slots after it plus spec.timeout",
            "# TYPE fleetcheck_backupcheck_verification_deadline_timestamp_seconds gauge",
            "",
            "# HELP fleetcheck_backupcheck_sandbox_cleanups_failed Recorded runs of the BackupCheck (lastRun and history) whose sandbox namespace the hub could not delete (sandbox.cleanup Failed)",
            "# TYPE fleetcheck_backupcheck_sandbox_cleanups_failed gauge",
          ].join("\n")}\n`,
        )
        assert.strictEqual(sampleValue(parseExposition(viaRegistry), "workqueue_adds_total", queue), 1)
        hooks.onAdd?.("db/b")
        assert.strictEqual(sampleValue(yield* scrape(metrics), "workqueue_adds_total", queue), 2)
        assert.strictEqual(
          sampleValue(yield* scrape(metrics), "workqueue_adds_total", queue),
          2,
          "flushed once",
        )
      }),
  )

  it.effect("the registry is private: prom-client's global registry holds none of our metrics", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics({ processMetrics: true })
      metrics.initCluster("east", { maxConcurrentReconciles: 4 })
      const ours = (yield* scrape(metrics)).types
      assert.isTrue(ours.has("process_cpu_user_seconds_total"), "process metrics went to our registry")
      const global = parseExposition(yield* Effect.promise(() => register.metrics()))
      for (const name of ours.keys())
        assert.isFalse(global.types.has(name), `${name} leaked to the global registry`)
      assert.deepStrictEqual(register.getMetricsAsArray(), [])
      assert.strictEqual(metrics.contentType, "text/plain; version=0.0.4; charset=utf-8")
      // two instances (two hubs in one test process) do not clash
      makeMetrics({ memberHistograms: true }).initCluster("east", { maxConcurrentReconciles: 4 })
    }),
  )
})

describe("metrics: values move", () => {
  it.effect("reconcile outcomes map onto controller-runtime's result labels and error counters", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics({ memberHistograms: true })
      metrics.initCluster("east", { maxConcurrentReconciles: 4 })
      const hooks = metrics.controllerHooks("backupcheck")
      hooks.onReconcile?.("east", "success", 0.003)
      hooks.onReconcile?.("east", "success", 0.2)
      hooks.onReconcile?.("east", "requeue_after", 0.02)
      hooks.onReconcile?.("east", "error", 1.1)
      hooks.onReconcile?.("east", "terminal_error", 0.004)
      hooks.onReconcile?.("east", "panic", 0.004)
      hooks.onReconcile?.("east", "conflict", 0.3)
      const e = yield* scrape(metrics)

      const total = (result: string) =>
        sampleValue(e, "controller_runtime_reconcile_total", { ...ctl, result })
      assert.strictEqual(total("success"), 2)
      assert.strictEqual(total("requeue_after"), 1)
      assert.strictEqual(total("error"), 3, "error, terminal_error and panic all count as result=error")
      assert.strictEqual(total("requeue"), 1, "a conflict is requeued, not an error")
      assert.strictEqual(sampleValue(e, "controller_runtime_reconcile_errors_total", ctl), 3)
      assert.strictEqual(sampleValue(e, "controller_runtime_terminal_reconcile_errors_total", ctl), 1)
      assert.strictEqual(sampleValue(e, "controller_runtime_reconcile_panics_total", ctl), 1)

      const time = "controller_runtime_reconcile_time_seconds"
      assert.strictEqual(sampleValue(e, `${time}_count`, ctl), 7)
      assert.closeTo(sampleValue(e, `${time}_sum`, ctl), 0.003 + 0.2 + 0.02 + 1.1 + 0.004 + 0.004 + 0.3, 1e-9)
      // buckets are cumulative: 0.003 and the two 0.004s fall in le=0.005
      assert.strictEqual(bucket(e, time, ctl, "0.005"), 3)
      assert.strictEqual(bucket(e, time, ctl, "0.025"), 4)
      assert.strictEqual(bucket(e, time, ctl, "0.2"), 5)
      assert.strictEqual(bucket(e, time, ctl, "1"), 6)
      assert.strictEqual(bucket(e, time, ctl, "1.25"), 7)
      assert.strictEqual(bucket(e, time, ctl, "+Inf"), 7)
    }),
  )

  it.effect("active workers follow the deltas; clusters are counted apart", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics({ memberHistograms: true })
      metrics.initCluster("east", { maxConcurrentReconciles: 4 })
      metrics.initCluster("west", { maxConcurrentReconciles: 4 })
      const hooks = metrics.controllerHooks("backupcheck")
      hooks.onActiveWorkers?.("east", 1)
      hooks.onActiveWorkers?.("east", 1)
      hooks.onActiveWorkers?.("west", 1)
      hooks.onActiveWorkers?.("east", -1)
      hooks.onReconcile?.("west", "success", 0.01)
      const e = yield* scrape(metrics)
      assert.strictEqual(sampleValue(e, "controller_runtime_active_workers", ctl), 1)
      assert.strictEqual(sampleValue(e, "controller_runtime_active_workers", { ...ctl, cluster: "west" }), 1)
      assert.strictEqual(
        sampleValue(e, "controller_runtime_reconcile_total", { ...ctl, result: "success" }),
        0,
      )
      assert.strictEqual(
        sampleValue(e, "controller_runtime_reconcile_total", { ...ctl, cluster: "west", result: "success" }),
        1,
      )
    }),
  )

  it.effect("queue hooks: adds, depth, retries, and durations in seconds into the right buckets", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics({ memberHistograms: true })
      const hooks = metrics.queueHooks("east")
      hooks.onAdd?.("db/a")
      hooks.onAdd?.("db/b")
      hooks.onDepth?.(2)
      hooks.onGet?.("db/a", 250) // 0.25 s: above le=0.1, within le=1
      hooks.onDepth?.(1)
      hooks.onDone?.("db/a", 3) // 3 ms: above le=0.001, within le=0.01
      hooks.onRetry?.("db/a")
      hooks.onGet?.("db/b", -5) // a clock stepping back is observed as 0, not thrown
      const e = yield* scrape(metrics)
      assert.strictEqual(sampleValue(e, "workqueue_adds_total", queue), 2)
      assert.strictEqual(sampleValue(e, "workqueue_depth", queue), 1)
      assert.strictEqual(sampleValue(e, "workqueue_retries_total", queue), 1)
      const wait = "workqueue_queue_duration_seconds"
      assert.strictEqual(sampleValue(e, `${wait}_count`, queue), 2)
      assert.closeTo(sampleValue(e, `${wait}_sum`, queue), 0.25, 1e-12)
      assert.strictEqual(bucket(e, wait, queue, "1e-8"), 1)
      assert.strictEqual(bucket(e, wait, queue, "0.1"), 1)
      assert.strictEqual(bucket(e, wait, queue, "1"), 2)
      const work = "workqueue_work_duration_seconds"
      assert.strictEqual(sampleValue(e, `${work}_count`, queue), 1)
      assert.closeTo(sampleValue(e, `${work}_sum`, queue), 0.003, 1e-12)
      assert.strictEqual(bucket(e, work, queue, "0.001"), 0)
      assert.strictEqual(bucket(e, work, queue, "0.01"), 1)
    }),
  )

  it.effect("wired into a real workqueue and controller, the counts match what happened", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics({ memberHistograms: true })
      metrics.initCluster("east", { maxConcurrentReconciles: 2 })
      const q = yield* makeWorkQueue({ name: "east", metrics: metrics.queueHooks("east") })
      let boomed = false
      yield* runController({
        name: "backupcheck",
        cluster: "east",
        queue: q,
        workers: 2,
        hooks: metrics.controllerHooks("backupcheck"),
        reconcile: (req) =>
          Effect.gen(function* () {
            yield* Effect.sleep("40 millis")
            if (req.name === "later") return { requeueAfterMs: 60_000 }
            if (req.name === "invalid") return yield* new TerminalError({ message: "bad spec" })
            if (req.name === "boom" && !boomed) {
              boomed = true
              return yield* Effect.die(new Error("bug"))
            }
            return {}
          }),
      })
      for (const name of ["ok", "later", "invalid", "boom"]) yield* q.add(`db/${name}`)
      yield* q.add("db/ok") // coalesced: already dirty

      let e = yield* scrape(metrics)
      assert.strictEqual(sampleValue(e, "workqueue_adds_total", queue), 4)

      // two keys at a time, 40 ms each; the panicked key comes back after its 5 ms backoff
      for (let i = 0; i < 10; i++) yield* TestClock.adjust("20 millis")
      e = yield* scrape(metrics)
      const total = (result: string) =>
        sampleValue(e, "controller_runtime_reconcile_total", { ...ctl, result })
      assert.strictEqual(total("success"), 2, "ok, then boom on its retry")
      assert.strictEqual(total("requeue_after"), 1)
      assert.strictEqual(total("error"), 2, "invalid (terminal) and boom (panic)")
      assert.strictEqual(sampleValue(e, "controller_runtime_terminal_reconcile_errors_total", ctl), 1)
      assert.strictEqual(sampleValue(e, "controller_runtime_reconcile_panics_total", ctl), 1)
      assert.strictEqual(sampleValue(e, "controller_runtime_active_workers", ctl), 0)
      assert.strictEqual(sampleValue(e, "controller_runtime_max_concurrent_reconciles", ctl), 2)
      // retries: addRateLimited for the panic and addAfter for the requeue, as client-go counts them
      assert.strictEqual(sampleValue(e, "workqueue_retries_total", queue), 2)
      assert.strictEqual(sampleValue(e, "workqueue_depth", queue), 0)
      assert.strictEqual(sampleValue(e, "workqueue_work_duration_seconds_count", queue), 5)
      // every reconcile took 40 ms of (test) clock time: all in le=0.1, none in le=0.01
      assert.strictEqual(bucket(e, "workqueue_work_duration_seconds", queue, "0.01"), 0)
      assert.strictEqual(bucket(e, "workqueue_work_duration_seconds", queue, "0.1"), 5)
      assert.strictEqual(bucket(e, "controller_runtime_reconcile_time_seconds", ctl, "+Inf"), 5)
    }),
  )

  it.effect("checks: verified as 1 / 0 / -1, last success timestamp, delete", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics({ memberHistograms: true })
      const check = { cluster: "east", namespace: "db", name: "nightly" }
      const verified = "fleetcheck_backupcheck_verified"
      const lastSuccess = "fleetcheck_backupcheck_last_success_timestamp_seconds"
      const success = new Date("2026-11-29T10:00:00.500Z")

      metrics.setCheckVerified("east", "db", "nightly", "Unknown")
      let e = yield* scrape(metrics)
      assert.strictEqual(sampleValue(e, verified, check), -1)
      assert.strictEqual(sampleValue(e, lastSuccess, check), 0, "never verified")

      metrics.setCheckVerified("east", "db", "nightly", "True", success)
      e = yield* scrape(metrics)
      assert.strictEqual(sampleValue(e, verified, check), 1)
      assert.strictEqual(sampleValue(e, lastSuccess, check), success.getTime() / 1000)

      // a failure later keeps the last success when none is passed; an invalid Date changes nothing
      metrics.setCheckVerified("east", "db", "nightly", "False")
      metrics.setCheckVerified("east", "db", "nightly", "False", new Date(Number.NaN))
      e = yield* scrape(metrics)
      assert.strictEqual(sampleValue(e, verified, check), 0)
      assert.strictEqual(sampleValue(e, lastSuccess, check), success.getTime() / 1000)

      metrics.setCheckVerified("east", "db", "weekly", "True", new Date(0))
      metrics.deleteCheck("east", "db", "nightly")
      metrics.deleteCheck("east", "db", "never-existed")
      metrics.deleteCheck("nowhere", "db", "nightly")
      e = yield* scrape(metrics)
      assert.strictEqual(find(e, verified, check).length, 0)
      assert.strictEqual(find(e, lastSuccess, check).length, 0)
      assert.strictEqual(sampleValue(e, verified, { ...check, name: "weekly" }), 1)
    }),
  )

  it.effect("member and informer gauges show their latest value at each scrape, and go with the member", () =>
    Effect.gen(function* () {
      // Set every status round, so kept as plain numbers copied into the exposition when scraped.
      const metrics = makeMetrics({ memberHistograms: true })
      const jobs = { cluster: "east", resource: "jobs.batch" }
      metrics.setMemberConnected("east", true)
      metrics.setMemberReady("east", true)
      metrics.setInformerObjects("east", "jobs.batch", 12)
      let e = yield* scrape(metrics)
      assert.strictEqual(sampleValue(e, "fleetcheck_member_cluster_connected", { cluster: "east" }), 1)
      assert.strictEqual(sampleValue(e, "fleetcheck_member_cluster_ready", { cluster: "east" }), 1)
      assert.strictEqual(sampleValue(e, "fleetcheck_informer_objects", jobs), 12)

      metrics.setMemberConnected("east", false)
      metrics.setMemberReady("east", false)
      metrics.setInformerObjects("east", "jobs.batch", 11)
      metrics.setInformerObjects("east", "jobs.batch", 10)
      e = yield* scrape(metrics)
      assert.strictEqual(sampleValue(e, "fleetcheck_member_cluster_connected", { cluster: "east" }), 0)
      assert.strictEqual(sampleValue(e, "fleetcheck_member_cluster_ready", { cluster: "east" }), 0)
      assert.strictEqual(sampleValue(e, "fleetcheck_informer_objects", jobs), 10)
      assert.strictEqual(
        find(e, "fleetcheck_informer_objects", jobs).length,
        1,
        "one series, not one per set",
      )

      // a status round finishing after the member was forgotten brings a series back, as before: its
      // value is the new one, not the forgotten incarnation's
      metrics.forgetMember("east")
      e = yield* scrape(metrics)
      assert.strictEqual(find(e, "fleetcheck_informer_objects", jobs).length, 0)
      assert.strictEqual(find(e, "fleetcheck_member_cluster_ready", { cluster: "east" }).length, 0)
      metrics.setMemberReady("east", true)
      e = yield* scrape(metrics)
      assert.strictEqual(sampleValue(e, "fleetcheck_member_cluster_ready", { cluster: "east" }), 1)
      assert.strictEqual(sampleValue(e, "fleetcheck_member_cluster_connected", { cluster: "east" }), 0)
      assert.strictEqual(sampleValue(e, "fleetcheck_informer_objects", jobs), 0)
    }),
  )

  it.effect("members, informers and the global in-flight gauge", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics({ memberHistograms: true })
      // a member that never engaged still shows as disconnected
      metrics.setMemberConnected("north", false)
      metrics.setMemberConnected("east", true)
      metrics.setMemberReady("east", true)
      metrics.setInformerObjects("east", "jobs.batch", 12)
      metrics.setInformerObjects("east", "configmaps", 3)
      metrics.incInformerRestarts("east", "jobs.batch")
      metrics.incInformerRestarts("east", "jobs.batch")
      metrics.addGlobalInflight(1)
      metrics.addGlobalInflight(1)
      metrics.addGlobalInflight(-1)
      const e = yield* scrape(metrics)
      assert.strictEqual(sampleValue(e, "fleetcheck_member_cluster_connected", { cluster: "north" }), 0)
      assert.strictEqual(sampleValue(e, "fleetcheck_member_cluster_connected", { cluster: "east" }), 1)
      assert.strictEqual(sampleValue(e, "fleetcheck_member_cluster_ready", { cluster: "east" }), 1)
      const jobs = { cluster: "east", resource: "jobs.batch" }
      assert.strictEqual(sampleValue(e, "fleetcheck_informer_objects", jobs), 12)
      assert.strictEqual(
        sampleValue(e, "fleetcheck_informer_objects", { ...jobs, resource: "configmaps" }),
        3,
      )
      assert.strictEqual(sampleValue(e, "fleetcheck_informer_restarts_total", jobs), 2)
      assert.strictEqual(sampleValue(e, "fleetcheck_reconcile_global_inflight"), 1)
    }),
  )
})

describe("metrics: forgetMember", () => {
  it.effect("removes every series of that cluster and only of that cluster", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics({ memberHistograms: true })
      const controller = metrics.controllerHooks("backupcheck")
      const eastQueue = metrics.queueHooks("east")
      metrics.queueHooks("west")
      for (const cluster of ["east", "west"]) {
        // as the member fiber does; without it there is no max_concurrent_reconciles series to keep
        metrics.initCluster(cluster, { maxConcurrentReconciles: 2 })
        controller.onReconcile?.(cluster, "success", 0.1)
        metrics.setMemberConnected(cluster, true)
        metrics.setCheckVerified(cluster, "db", "nightly", "True", new Date())
        metrics.setInformerObjects(cluster, "configmaps", 1)
        metrics.incInformerRestarts(cluster, "configmaps")
      }
      eastQueue.onAdd?.("db/nightly")

      metrics.forgetMember("east")
      const e = yield* scrape(metrics)
      const east = e.samples.filter((s) => s.labels.cluster === "east")
      assert.deepStrictEqual(
        east.map((s) => s.name),
        [],
      )
      // west keeps every per-cluster metric
      for (const [name, type] of Object.entries(allPerCluster)) {
        assert.isAbove(find(e, sampleName(name, type), { cluster: "west" }).length, 0, `${name} for west`)
      }
    }),
  )

  it.effect("late hooks of a forgotten member do not bring its series back; a re-engage starts at zero", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics({ memberHistograms: true })
      const controller = metrics.controllerHooks("backupcheck")
      const oldQueue = metrics.queueHooks("east")
      oldQueue.onAdd?.("db/a")
      controller.onReconcile?.("east", "error", 0.1)
      metrics.forgetMember("east")

      // a dying worker and queue of the old incarnation
      controller.onActiveWorkers?.("east", -1)
      controller.onReconcile?.("east", "success", 0.1)
      oldQueue.onAdd?.("db/b")
      oldQueue.onDepth?.(7)
      let e = yield* scrape(metrics)
      assert.strictEqual(e.samples.filter((s) => s.labels.cluster === "east").length, 0)

      // engaged again: fresh series, and the old queue's hooks stay inert
      const newQueue = metrics.queueHooks("east")
      newQueue.onAdd?.("db/c")
      oldQueue.onAdd?.("db/d")
      e = yield* scrape(metrics)
      assert.strictEqual(sampleValue(e, "workqueue_adds_total", queue), 1)
      assert.strictEqual(sampleValue(e, "workqueue_depth", queue), 0)
      assert.strictEqual(sampleValue(e, "controller_runtime_reconcile_total", { ...ctl, result: "error" }), 0)
      assert.strictEqual(sampleValue(e, "controller_runtime_active_workers", ctl), 0)
    }),
  )
})

/** Every sample of one cluster as sorted `name{labels} value` lines, to compare whole states. */
const seriesOf = (exposition: Exposition, cluster: string): Array<string> =>
  exposition.samples
    .filter((s) => s.labels.cluster === cluster)
    .map((s) => {
      const labels = Object.entries(s.labels)
        .sort(([a], [b]) => a.localeCompare(b))
        .map(([k, v]) => `${k}="${v}"`)
      return `${s.name}{${labels.join(",")}} ${s.value}`
    })
    .sort()

/** Touches every family of the cluster: both controllers, both queues, checks, member and informers. */
const exercise = (metrics: FleetMetrics, cluster: string): void => {
  metrics.initCluster(cluster, { maxConcurrentReconciles: 3 })
  for (const controller of ["backupcheck", "other"]) {
    const hooks = metrics.controllerHooks(controller)
    hooks.onReconcile?.(cluster, "success", 0.2)
    hooks.onReconcile?.(cluster, "panic", 0.01)
    hooks.onReconcile?.(cluster, "terminal_error", 0.01)
    hooks.onActiveWorkers?.(cluster, 1)
    const q = metrics.queueHooks(cluster, controller)
    q.onAdd?.("db/a")
    q.onDepth?.(3)
    q.onGet?.("db/a", 20)
    q.onDone?.("db/a", 30)
    q.onRetry?.("db/a")
  }
  metrics.setCheckVerified(cluster, "db", "nightly", "True", new Date("2026-11-29T10:00:00Z"))
  metrics.setCheckVerified(cluster, "db", "weekly", "False")
  metrics.setMemberConnected(cluster, true)
  metrics.setMemberReady(cluster, true)
  metrics.setInformerObjects(cluster, "jobs.batch", 5)
  metrics.setInformerObjects(cluster, "configmaps", 2)
  metrics.incInformerRestarts(cluster, "jobs.batch")
  metrics.incRequestRetry(cluster, "POST", 429)
}

/** What a cluster looks like right after initCluster in a hub that knows both controllers. */
const initialSeries = (cluster: string, maxConcurrentReconciles: number) =>
  Effect.gen(function* () {
    const fresh = makeMetrics({ memberHistograms: true })
    fresh.controllerHooks("other")
    fresh.initCluster(cluster, { maxConcurrentReconciles })
    return seriesOf(yield* scrape(fresh), cluster)
  })

describe("metrics: controller_runtime_max_concurrent_reconciles", () => {
  it.effect("is exactly the worker count initCluster is given, and absent until it is given", () =>
    Effect.gen(function* () {
      const maxConcurrent = "controller_runtime_max_concurrent_reconciles"
      const metrics = makeMetrics({ memberHistograms: true })
      // the member fiber's order: hooks for the engine first, initCluster once the engine runs
      metrics.controllerHooks("backupcheck")
      metrics.queueHooks("east")
      metrics.setMemberConnected("west", false)
      let e = yield* scrape(metrics)
      assert.deepStrictEqual(find(e, maxConcurrent), [], "no made-up worker count before initCluster")

      metrics.initCluster("east", { maxConcurrentReconciles: 7 })
      metrics.initCluster("west", { maxConcurrentReconciles: 1 })
      e = yield* scrape(metrics)
      assert.strictEqual(sampleValue(e, maxConcurrent, ctl), 7)
      assert.strictEqual(sampleValue(e, maxConcurrent, { ...ctl, cluster: "west" }), 1)

      // a controller registered later gets the cluster's count; a new count reaches every controller
      metrics.controllerHooks("other")
      e = yield* scrape(metrics)
      assert.strictEqual(sampleValue(e, maxConcurrent, { controller: "other", cluster: "east" }), 7)
      metrics.initCluster("east", { maxConcurrentReconciles: 12 })
      e = yield* scrape(metrics)
      assert.strictEqual(sampleValue(e, maxConcurrent, ctl), 12)
      assert.strictEqual(sampleValue(e, maxConcurrent, { controller: "other", cluster: "east" }), 12)
      assert.strictEqual(sampleValue(e, maxConcurrent, { ...ctl, cluster: "west" }), 1)

      // the worker count is required: there is no default to fall back on (checked by the typecheck)
      // @ts-expect-error initCluster without maxConcurrentReconciles
      const withoutWorkers: Parameters<FleetMetrics["initCluster"]> = ["east"]
      assert.strictEqual(withoutWorkers.length, 1)
    }),
  )
})

describe("metrics: fleetcheck_reconcile_global_inflight", () => {
  it.effect(
    "counts the permits held of a real hub-wide semaphore, across failures, interrupts and forgetAll",
    () =>
      Effect.gen(function* () {
        const inflight = "fleetcheck_reconcile_global_inflight"
        const metrics = makeMetrics({ memberHistograms: true })
        metrics.initCluster("east", { maxConcurrentReconciles: 2 })
        const globalLimit = yield* Semaphore.make(2)
        // how the hub wraps a reconcile: counted from permit acquired to permit released, whatever happens
        const reconcile = <A, E>(work: Effect.Effect<A, E>) =>
          globalLimit.withPermits(1)(
            Effect.acquireUseRelease(
              Effect.sync(() => metrics.addGlobalInflight(1)),
              () => work,
              () => Effect.sync(() => metrics.addGlobalInflight(-1)),
            ),
          )
        const value = Effect.map(scrape(metrics), (e) => sampleValue(e, inflight))

        const a = yield* Effect.forkChild(reconcile(Effect.sleep("100 millis")))
        const b = yield* Effect.forkChild(
          reconcile(Effect.sleep("50 millis").pipe(Effect.andThen(Effect.fail("boom")))),
        )
        const c = yield* Effect.forkChild(reconcile(Effect.sleep("100 millis")))
        yield* TestClock.adjust("10 millis")
        assert.strictEqual(yield* value, 2, "a and b hold the two permits; c waits")

        // losing leadership drops per-cluster series, not the permits still held
        metrics.forgetAll()
        metrics.forgetMember("east")
        assert.strictEqual(yield* value, 2)

        yield* TestClock.adjust("50 millis")
        assert.strictEqual(yield* value, 2, "b failed and released; c took its permit")
        yield* Fiber.interrupt(c)
        assert.strictEqual(yield* value, 1, "an interrupted reconcile releases")
        yield* TestClock.adjust("50 millis")
        yield* Fiber.join(a)
        yield* Fiber.await(b)
        assert.strictEqual(yield* value, 0)
        // a non-finite delta is ignored rather than poisoning the gauge
        metrics.addGlobalInflight(Number.NaN)
        const e = yield* scrape(metrics)
        assert.deepStrictEqual(find(e, inflight), [{ name: inflight, labels: {}, value: 0 }])
      }),
  )
})

describe("metrics: stale series", () => {
  it.effect("deleteCheck removes every series carrying the check's labels, and nothing else", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics({ memberHistograms: true })
      exercise(metrics, "east")
      exercise(metrics, "west")
      const before = yield* scrape(metrics)
      const nightly = { cluster: "east", namespace: "db", name: "nightly" }
      const perCheck = new Set(before.samples.filter((s) => matches(s, nightly)).map((s) => s.name))
      assert.deepStrictEqual([...perCheck].sort(), [
        "fleetcheck_backupcheck_last_success_timestamp_seconds",
        "fleetcheck_backupcheck_verified",
      ])

      metrics.deleteCheck("east", "db", "nightly")
      const e = yield* scrape(metrics)
      assert.deepStrictEqual(
        e.samples.filter((s) => matches(s, nightly)),
        [],
      )
      // the other checks and the rest of the cluster are untouched, but for the member's counts
      const kept = (s: Sample) => !matches(s, nightly)
      const counted = (s: Sample) => s.name === "fleetcheck_backupchecks"
      assert.deepStrictEqual(
        e.samples.filter((s) => s.labels.cluster !== undefined && !counted(s)),
        before.samples.filter((s) => s.labels.cluster !== undefined && kept(s) && !counted(s)),
      )
      const total = (x: Exposition, cluster: string) =>
        find(x, "fleetcheck_backupchecks", { cluster }).reduce((n, s) => n + s.value, 0)
      assert.strictEqual(total(e, "east"), total(before, "east") - 1)
      assert.strictEqual(total(e, "west"), total(before, "west"))
      for (const name of perCheck) {
        assert.strictEqual(find(e, name, { ...nightly, name: "weekly" }).length, 1, name)
        assert.strictEqual(find(e, name, { ...nightly, cluster: "west" }).length, 1, name)
      }

      // a check set again after its delete starts over: never verified
      metrics.setCheckVerified("east", "db", "nightly", "Unknown")
      const again = yield* scrape(metrics)
      assert.strictEqual(
        sampleValue(again, "fleetcheck_backupcheck_last_success_timestamp_seconds", nightly),
        0,
      )
    }),
  )

  it.effect(
    "forgetMember removes the cluster from every family; initCluster brings back initial values",
    () =>
      Effect.gen(function* () {
        const metrics = makeMetrics({ memberHistograms: true })
        exercise(metrics, "east")
        exercise(metrics, "west")
        const before = yield* scrape(metrics)
        const families = new Set(before.samples.filter((s) => s.labels.cluster === "east").map((s) => s.name))
        // every per-cluster family, controller-runtime's included, had an east series to remove
        for (const [name, type] of Object.entries(allPerCluster)) {
          assert.isTrue(families.has(sampleName(name, type)), name)
        }

        metrics.forgetMember("east")
        let e = yield* scrape(metrics)
        assert.deepStrictEqual(seriesOf(e, "east"), [])
        assert.deepStrictEqual(seriesOf(e, "west"), seriesOf(before, "west"), "west untouched")

        metrics.initCluster("east", { maxConcurrentReconciles: 5 })
        e = yield* scrape(metrics)
        assert.deepStrictEqual(seriesOf(e, "east"), yield* initialSeries("east", 5))
        assert.strictEqual(
          sampleValue(e, "controller_runtime_max_concurrent_reconciles", ctl),
          5,
          "the new count, not the old incarnation's",
        )
      }),
  )

  it.effect("forgetAll drops every per-cluster and per-check series; old hooks stay inert", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics({ memberHistograms: true })
      exercise(metrics, "east")
      exercise(metrics, "west")
      const eastQueue = metrics.queueHooks("east")
      const controller = metrics.controllerHooks("backupcheck")
      metrics.addGlobalInflight(1)

      metrics.forgetAll()
      let e = yield* scrape(metrics)
      assert.deepStrictEqual(
        e.samples.filter((s) => s.labels.cluster !== undefined).map((s) => s.name),
        [],
      )
      assert.deepStrictEqual(
        e.samples.filter((s) => s.name.startsWith("fleetcheck_backupcheck_")),
        [],
      )
      // the families themselves stay (HELP and TYPE), and so does the hub-wide gauge
      for (const [name, type] of Object.entries(allPerCluster)) assert.strictEqual(e.types.get(name), type)
      assert.strictEqual(sampleValue(e, "fleetcheck_reconcile_global_inflight"), 1)

      // the old leadership's dying workers and queues write into nothing
      eastQueue.onAdd?.("db/a")
      eastQueue.onDepth?.(4)
      eastQueue.onGet?.("db/a", 10)
      eastQueue.onDone?.("db/a", 10)
      controller.onReconcile?.("east", "success", 0.1)
      controller.onActiveWorkers?.("west", -1)
      metrics.deleteCheck("east", "db", "nightly")
      e = yield* scrape(metrics)
      assert.deepStrictEqual(
        e.samples.filter((s) => s.labels.cluster !== undefined).map((s) => s.name),
        [],
      )

      // leading again: members come back at their initial values
      metrics.initCluster("east", { maxConcurrentReconciles: 3 })
      const newQueue = metrics.queueHooks("east")
      eastQueue.onAdd?.("db/b")
      e = yield* scrape(metrics)
      assert.deepStrictEqual(seriesOf(e, "east"), yield* initialSeries("east", 3))
      assert.deepStrictEqual(seriesOf(e, "west"), [])
      newQueue.onAdd?.("db/c")
      assert.strictEqual(sampleValue(yield* scrape(metrics), "workqueue_adds_total", queue), 1)
    }),
  )
})

describe("metrics at fleet scale", () => {
  const seriesPerCluster = (e: Exposition, cluster: string) =>
    e.samples.filter((s) => s.labels.cluster === cluster).length

  it.effect("by default the histograms are hub-wide (controller-runtime's label sets), not per member", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics()
      for (const cluster of ["east", "west"]) metrics.initCluster(cluster, { maxConcurrentReconciles: 4 })
      metrics.controllerHooks("backupcheck").onReconcile?.("east", "success", 0.02)
      metrics.controllerHooks("backupcheck").onReconcile?.("west", "success", 0.2)
      metrics.queueHooks("west").onGet?.("db/a", 3)
      const e = yield* scrape(metrics)
      const hubWide = { controller: "backupcheck" }
      for (const name of [
        "controller_runtime_reconcile_time_seconds",
        "workqueue_queue_duration_seconds",
        "workqueue_work_duration_seconds",
      ]) {
        const counts = find(e, `${name}_count`)
        assert.strictEqual(counts.length, 1, name)
        assert.isUndefined(counts[0]!.labels.cluster, name)
      }
      assert.strictEqual(sampleValue(e, "controller_runtime_reconcile_time_seconds_count", hubWide), 2)
      assert.strictEqual(
        sampleValue(e, "workqueue_queue_duration_seconds_count", { ...hubWide, name: "backupcheck" }),
        1,
      )
      // the counters stay per member
      assert.strictEqual(
        sampleValue(e, "controller_runtime_reconcile_total", { ...ctl, result: "success" }),
        1,
      )
      // what a member adds, without checks: 22 series (95 with per-member histograms)
      assert.strictEqual(seriesPerCluster(e, "east"), 22)
      const withHistograms = makeMetrics({ memberHistograms: true })
      withHistograms.initCluster("east", { maxConcurrentReconciles: 4 })
      assert.strictEqual(seriesPerCluster(yield* scrape(withHistograms), "east"), 95)

      // forgetting a member leaves the hub-wide histograms alone
      metrics.forgetMember("east")
      const after = yield* scrape(metrics)
      assert.strictEqual(seriesPerCluster(after, "east"), 0)
      assert.strictEqual(sampleValue(after, "controller_runtime_reconcile_time_seconds_count", hubWide), 2)

      // nor does a member joining (or coming back): a hub-wide histogram is never set back to zero,
      // which Prometheus would read as a counter reset of every bucket
      metrics.initCluster("north", { maxConcurrentReconciles: 4 })
      metrics.initCluster("east", { maxConcurrentReconciles: 4 })
      const joined = yield* scrape(metrics)
      assert.strictEqual(sampleValue(joined, "controller_runtime_reconcile_time_seconds_count", hubWide), 2)
      assert.strictEqual(
        sampleValue(joined, "workqueue_queue_duration_seconds_count", { ...hubWide, name: "backupcheck" }),
        1,
      )
    }),
  )

  it.effect("check series: all, only the unverified, or none; the per-member counts always", () =>
    Effect.gen(function* () {
      const statuses = ["True", "True", "False", "Unknown"] as const
      const fill = (metrics: FleetMetrics) =>
        statuses.forEach((status, i) => {
          metrics.setCheckVerified("east", "db", `c${i}`, status, new Date(1_000_000))
        })
      const verified = (e: Exposition) =>
        find(e, "fleetcheck_backupcheck_verified")
          .map((s) => `${s.labels.name}=${s.value}`)
          .sort()
      const counts = (e: Exposition) =>
        Object.fromEntries(
          find(e, "fleetcheck_backupchecks", { cluster: "east" }).map((s) => [s.labels.status, s.value]),
        )
      const all = makeMetrics({ checkSeries: "all" })
      fill(all)
      const unverified = makeMetrics({ checkSeries: "unverified" })
      fill(unverified)
      const none = makeMetrics({ checkSeries: "none" })
      fill(none)
      const [ea, eu, en] = [yield* scrape(all), yield* scrape(unverified), yield* scrape(none)]
      assert.deepStrictEqual(verified(ea), ["c0=1", "c1=1", "c2=0", "c3=-1"])
      assert.deepStrictEqual(verified(eu), ["c2=0", "c3=-1"])
      assert.strictEqual(find(eu, "fleetcheck_backupcheck_last_success_timestamp_seconds").length, 2)
      assert.deepStrictEqual(verified(en), [])
      assert.isUndefined(en.types.get("fleetcheck_backupcheck_verified"))
      for (const e of [ea, eu, en]) assert.deepStrictEqual(counts(e), { True: 2, False: 1, Unknown: 1 })

      // a check that verifies leaves the unverified series; one that fails joins them
      unverified.setCheckVerified("east", "db", "c2", "True")
      unverified.setCheckVerified("east", "db", "c0", "False")
      const later = yield* scrape(unverified)
      assert.deepStrictEqual(verified(later), ["c0=0", "c3=-1"])
      assert.deepStrictEqual(counts(later), { True: 2, False: 1, Unknown: 1 })
    }),
  )

  it.effect(
    "the alert series: reason, objectives, deadline and failed cleanups, escaped and removed with the check",
    () =>
      Effect.gen(function* () {
        const metrics = makeMetrics()
        metrics.setCheckVerified("east", "db", 'we"ird', "False", undefined, { reason: "DataCorrupted" })
        metrics.setCheckFacts("east", "db", 'we"ird', {
          verificationDeadline: 1_700_000_000,
          sandboxCleanupsFailed: 2,
        })
        metrics.setCheckVerified("east", "db", "slow", "True", new Date(0), {
          reason: "RestoreSucceeded",
          objectives: { restoreTime: "False", dataAge: "True" },
        })
        metrics.setCheckFacts("east", "db", "slow", {
          objectiveSeconds: { restoreTime: 600, dataAge: 86_400 },
        })
        // facts of a check the views have not shown yet are dropped, not a series without a verdict
        metrics.setCheckFacts("east", "db", "unseen", { sandboxCleanupsFailed: 1 })
        const text = yield* Effect.promise(metrics.render)
        assert.include(
          text,
          'fleetcheck_backupcheck_verified{cluster="east",namespace="db",name="we\\"ird",reason="DataCorrupted"} 0',
        )
        const e = parseExposition(text)
        assert.strictEqual(
          sampleValue(e, "fleetcheck_backupcheck_verified", { name: "slow", reason: "RestoreSucceeded" }),
          1,
        )
        assert.strictEqual(
          sampleValue(e, "fleetcheck_backupcheck_objective_met", { name: "slow", objective: "restoreTime" }),
          0,
        )
        assert.strictEqual(
          sampleValue(e, "fleetcheck_backupcheck_objective_met", { name: "slow", objective: "dataAge" }),
          1,
        )
        assert.strictEqual(
          sampleValue(e, "fleetcheck_backupcheck_objective_seconds", { name: "slow", objective: "dataAge" }),
          86_400,
        )
        assert.strictEqual(find(e, "fleetcheck_backupcheck_objective_met", { name: 'we"ird' }).length, 0)
        assert.strictEqual(
          sampleValue(e, "fleetcheck_backupcheck_verification_deadline_timestamp_seconds", {
            name: 'we"ird',
          }),
          1_700_000_000,
        )
        assert.strictEqual(
          sampleValue(e, "fleetcheck_backupcheck_sandbox_cleanups_failed", { name: 'we"ird' }),
          2,
        )
        assert.strictEqual(
          find(e, "fleetcheck_backupcheck_sandbox_cleanups_failed", { name: "unseen" }).length,
          0,
        )

        // a new reason replaces the old series; cleared objectives and facts leave
        metrics.setCheckVerified("east", "db", "slow", "False", undefined, { reason: "RestoreFailed" })
        metrics.setCheckFacts("east", "db", 'we"ird', {})
        const later = yield* scrape(metrics)
        assert.deepStrictEqual(
          find(later, "fleetcheck_backupcheck_verified", { name: "slow" }).map((s) => s.labels.reason),
          ["RestoreFailed"],
        )
        assert.strictEqual(find(later, "fleetcheck_backupcheck_objective_met").length, 0)
        assert.strictEqual(
          find(later, "fleetcheck_backupcheck_verification_deadline_timestamp_seconds").length,
          0,
        )
        assert.strictEqual(find(later, "fleetcheck_backupcheck_sandbox_cleanups_failed").length, 0)
        metrics.deleteCheck("east", "db", "slow")
        assert.strictEqual(find(yield* scrape(metrics), "fleetcheck_backupcheck_objective_seconds").length, 0)
      }),
  )

  it.effect("--check-metrics unverified also shows verified checks an alert is about", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics({ checkSeries: "unverified" })
      const now = Date.now() / 1000
      for (const name of ["fine", "missed", "uncleaned", "overdue", "due-later"])
        metrics.setCheckVerified("east", "db", name, "True", new Date(0), {
          objectives: { restoreTime: name === "missed" ? "False" : "True" },
        })
      metrics.setCheckFacts("east", "db", "uncleaned", { sandboxCleanupsFailed: 1 })
      metrics.setCheckFacts("east", "db", "overdue", { verificationDeadline: now - 60 })
      metrics.setCheckFacts("east", "db", "due-later", { verificationDeadline: now + 3600 })
      const shown = find(yield* scrape(metrics), "fleetcheck_backupcheck_verified").map((s) => s.labels.name)
      assert.deepStrictEqual(shown.sort(), ["missed", "overdue", "uncleaned"])
    }),
  )

  it.effect("fleetcheck_hub_leader follows setLeader and survives forgetAll", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics()
      assert.strictEqual(sampleValue(yield* scrape(metrics), "fleetcheck_hub_leader"), 0)
      metrics.setLeader(true)
      metrics.forgetAll()
      assert.strictEqual(sampleValue(yield* scrape(metrics), "fleetcheck_hub_leader"), 1)
      metrics.setLeader(false)
      assert.strictEqual(sampleValue(yield* scrape(metrics), "fleetcheck_hub_leader"), 0)
    }),
  )

  it.effect("a scrape of many check series gives the event loop turns while it writes", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics()
      for (let i = 0; i < 20_000; i++) metrics.setCheckVerified(`m${i % 50}`, "db", `c${i}`, "True")
      // Ticks of a setImmediate loop that runs alongside the render: a render in one synchronous run
      // would let none of them through before it ended.
      let ticks = 0
      let rendering = true
      const tick = () => {
        ticks++
        if (rendering) setImmediate(tick)
      }
      setImmediate(tick)
      const text = yield* Effect.promise(metrics.render)
      rendering = false
      assert.strictEqual(find(parseExposition(text), "fleetcheck_backupcheck_verified").length, 20_000)
      // 40,000 per-check lines at 4,000 per turn: at least 10 turns within the per-check families alone
      assert.isAtLeast(ticks, 10)
    }),
  )
})

describe("restore drill metrics", () => {
  it.effect(
    "restore durations per cluster, recovery point age per check, removed with their check and cluster",
    () =>
      Effect.gen(function* () {
        const metrics = makeMetrics()
        metrics.initCluster("m1", { maxConcurrentReconciles: 1 })
        let e = yield* scrape(metrics)
        // No series before a member's first recorded run (an idle member adds nothing to a scrape).
        assert.strictEqual(find(e, "fleetcheck_restore_duration_seconds_count").length, 0)
        metrics.observeRestoreDuration("m1", 41)
        metrics.observeRestoreDuration("m1", 4000)
        metrics.observeRestoreDuration("m1", Number.NaN) // ignored
        metrics.setCheckVerified("m1", "shop", "orders", "True")
        metrics.setCheckRecoveryPointAge("m1", "shop", "orders", 3600)
        metrics.setCheckRecoveryPointAge("m1", "shop", "unknown-check", 1) // no series before setCheckVerified
        e = yield* scrape(metrics)
        assert.strictEqual(sampleValue(e, "fleetcheck_restore_duration_seconds_count", { cluster: "m1" }), 2)
        assert.strictEqual(bucket(e, "fleetcheck_restore_duration_seconds", { cluster: "m1" }, "60"), 1)
        assert.strictEqual(bucket(e, "fleetcheck_restore_duration_seconds", { cluster: "m1" }, "7200"), 2)
        assert.strictEqual(
          sampleValue(e, "fleetcheck_recovery_point_age_seconds", {
            cluster: "m1",
            namespace: "shop",
            name: "orders",
          }),
          3600,
        )
        assert.strictEqual(
          find(e, "fleetcheck_recovery_point_age_seconds", { name: "unknown-check" }).length,
          0,
        )
        metrics.setCheckRecoveryPointAge("m1", "shop", "orders", undefined)
        e = yield* scrape(metrics)
        assert.strictEqual(find(e, "fleetcheck_recovery_point_age_seconds").length, 0)
        metrics.setCheckRecoveryPointAge("m1", "shop", "orders", 60)
        metrics.forgetMember("m1")
        e = yield* scrape(metrics)
        assert.strictEqual(find(e, "fleetcheck_recovery_point_age_seconds").length, 0)
        assert.strictEqual(find(e, "fleetcheck_restore_duration_seconds_count").length, 0)
      }),
  )
})

describe("metrics: rest_client_request_retries_total", () => {
  it.effect("counts throttled requests sent again by cluster, code and verb, from the first retry", () =>
    Effect.gen(function* () {
      const metrics = makeMetrics()
      metrics.initCluster("east", { maxConcurrentReconciles: 2 })
      let e = yield* scrape(metrics)
      assert.strictEqual(e.types.get("rest_client_request_retries_total"), "counter")
      assert.deepStrictEqual(find(e, "rest_client_request_retries_total", { cluster: "east" }), [])

      metrics.incRequestRetry("east", "POST", 429)
      metrics.incRequestRetry("east", "POST", 429)
      metrics.incRequestRetry("east", "GET", 503)
      e = yield* scrape(metrics)
      const retries = (verb: string, code: string) =>
        sampleValue(e, "rest_client_request_retries_total", { cluster: "east", verb, code })
      assert.strictEqual(retries("POST", "429"), 2)
      assert.strictEqual(retries("GET", "503"), 1)

      metrics.forgetMember("east")
      e = yield* scrape(metrics)
      assert.deepStrictEqual(find(e, "rest_client_request_retries_total", { cluster: "east" }), [])
    }),
  )
})
