// Converged reconciles per second: N real BackupChecks on a real cluster are verified once, then every
// key is re-queued R times; a converged reconcile reads only the caches, so this measures the engine's
// own cost on the one JavaScript thread (i.e. per core). The engine runs as the hub runs it: the hub's
// tracing layer (OpenTelemetry, default environment: every reconcile a span, none exported), its
// metrics hooks, the hub-wide reconcile limit and its default log level. Also checks that nothing was written, and prints
// the process's CPU-seconds per 10,000 converged reconciles (the figure compared with controller-runtime
// in issue 11); the wait for each round's end is a hook, not a polling loop, so it adds no CPU of its own.
// Then, with fleetcheck's engine stopped, the controller-runtime reference (test/bench/crreference, Go,
// GOMAXPROCS=1, built once into the cache) reconciles the same converged checks on the same API server
// the same number of rounds, and its CPU-seconds per 10,000 are printed next to fleetcheck's
// (GO_REFERENCE=0 skips it; GO_WORKERS sets its MaxConcurrentReconciles, default 1; GO_DEEP_EQUAL=1
// runs its first version, which compared the whole desired status by reflection every reconcile).
// PROFILE_DIR=dir writes CPU profiles of the converged rounds only: fleetcheck.cpuprofile (V8, open in
// Chrome DevTools) and crreference-<variant>.pprof (`go tool pprof`).
//   node test/bench/reconcile.ts [checks=300] [rounds=20]

import { writeFileSync } from "node:fs"
import { Session } from "node:inspector/promises"
import { join } from "node:path"
import { setFlagsFromString } from "node:v8"
import { runInNewContext } from "node:vm"
import { KubeConfig } from "@kubernetes/client-node"
import { Effect, Exit, Layer, Logger, References, Scope } from "effect"
import { installFleetcheck, startFleet } from "../../clusters/local-fleet/index.ts"
import { makeGlobalLimit } from "../../src/engine/global-limit.ts"
import { defaultHubConfig } from "../../src/hub/config.ts"
import { startMemberEngine } from "../../src/hub/member-engine.ts"
import { makeMetrics } from "../../src/observability/metrics/index.ts"
import { TracingLive } from "../../src/observability/tracing.ts"
import { engineOptions } from "../support/engine.ts"
import { sleep } from "../support/wait.ts"
import { goReference, runGoReference } from "./go-reference.ts"

const n = Number(process.argv[2] ?? 300)
const rounds = Number(process.argv[3] ?? 20)
const ns = "bench"
const checksLabel = (checks: number) => `${checks} checks cached`
// A full collection before reading the heap (the bench runs without --expose-gc).
setFlagsFromString("--expose-gc")
const gc = runInNewContext("gc") as () => void
const heapAfterGC = () => {
  gc()
  return process.memoryUsage().heapUsed
}
const mib = (bytes: number) => (bytes / 2 ** 20).toFixed(1)

const fleet = await startFleet({ clusters: ["member"], log: () => {} })
try {
  const c = fleet.cluster("member")
  await installFleetcheck(c, [c])
  await c.api("POST", "/api/v1/namespaces", { metadata: { name: ns } })
  const kc = new KubeConfig()
  kc.loadFromString(c.kubeconfig)
  const scope = await Effect.runPromise(Scope.make())
  // The hub's observability, as launchHub builds it (src/hub/launch.ts) and member.ts wires it.
  const services = await Effect.runPromise(
    Layer.buildWithScope(
      Layer.mergeAll(
        Logger.layer([Logger.consoleJson]),
        Layer.succeed(References.MinimumLogLevel, defaultHubConfig.logLevel),
        TracingLive({ serviceName: "fleetcheck-hub" }),
      ),
      scope,
    ),
  )
  const metrics = makeMetrics({
    checkSeries: defaultHubConfig.checkMetrics,
    memberHistograms: defaultHubConfig.memberHistograms,
  })
  const hubHooks = metrics.controllerHooks("backupcheck")
  const queueHooks = metrics.queueHooks("member")
  metrics.initCluster("member", { maxConcurrentReconciles: defaultHubConfig.workersPerMember })
  const globalLimit = await Effect.runPromise(
    makeGlobalLimit(defaultHubConfig.maxConcurrentReconciles, metrics.addGlobalInflight),
  )
  // Reconciles counted by the controller's hook; `until` resolves when the count reaches its target.
  let reconciled = 0
  let until: { readonly count: number; readonly resolve: () => void } | undefined
  const engine = await Effect.runPromise(
    startMemberEngine(
      engineOptions("member", kc, {
        runningPollMs: 2_000,
        globalLimit,
        queueHooks,
        controllerHooks: {
          onReconcile: (cluster, outcome, seconds) => {
            hubHooks.onReconcile?.(cluster, outcome, seconds)
            reconciled++
            if (until !== undefined && reconciled >= until.count) until.resolve()
          },
          ...(hubHooks.onActiveWorkers ? { onActiveWorkers: hubHooks.onActiveWorkers } : {}),
        },
      }),
    ).pipe(Scope.provide(scope), Effect.provide(services)),
  )
  const heapEmpty = heapAfterGC()
  for (let i = 0; i < n; i += 25) {
    await Promise.all(
      Array.from({ length: Math.min(25, n - i) }, (_, j) =>
        c.api("POST", `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`, {
          apiVersion: "fleetcheck.io/v1alpha1",
          kind: "BackupCheck",
          metadata: { name: `check-${i + j}`, namespace: ns },
          spec: {
            backup: { name: `backup-${i + j}` },
            jobTemplate: {
              spec: { template: { spec: { containers: [{ name: "restore", image: "restore:1" }] } } },
            },
          },
        }),
      ),
    )
  }
  const verified = () =>
    engine.checks.store
      .list()
      .filter((o) => (o.status?.conditions ?? []).some((x) => x.type === "Verified" && x.status === "True"))
      .length
  const t0 = Date.now()
  while (verified() < n) await sleep(250)
  console.log(`${n} checks created → all Verified=True in ${((Date.now() - t0) / 1000).toFixed(1)} s`)
  await sleep(3_000) // let trailing events settle
  // The difference across check counts (two runs) is what a cached check costs; the difference from
  // the engine's empty heap also counts what the verification pass left behind.
  const heapCached = heapAfterGC()
  console.log(
    `heap after GC: ${mib(heapCached)} MiB with ${n} checks and their Jobs cached (${mib(heapEmpty)} MiB before the checks existed: ${((heapCached - heapEmpty) / n / 1024).toFixed(2)} KiB per check)`,
  )

  // Per-object resourceVersions: the list's own RV is etcd's global revision and moves with any write.
  const versions = async () =>
    JSON.stringify(
      ((await c.api("GET", `/apis/fleetcheck.io/v1alpha1/namespaces/${ns}/backupchecks`)).body.items as any[])
        .map((o) => `${o.metadata.name}@${o.metadata.resourceVersion}`)
        .sort(),
    )
  const rvBefore = await versions()
  const profileDir = process.env.PROFILE_DIR
  const profiler = profileDir === undefined ? undefined : new Session()
  if (profiler !== undefined) {
    profiler.connect()
    await profiler.post("Profiler.enable")
    await profiler.post("Profiler.setSamplingInterval", { interval: 100 }) // µs
    await profiler.post("Profiler.start")
  }
  const keys = engine.checks.store.keys()
  const start = engine.stats.reconciles
  // errors before the rounds (e.g. conflicts while the checks were first verified) are not the rounds'
  const errorsBefore = engine.stats.errors
  const startHook = reconciled
  const began = performance.now()
  const cpu0 = process.cpuUsage()
  for (let r = 0; r < rounds; r++) {
    const target = startHook + (r + 1) * keys.length
    const roundDone = new Promise<void>((resolve) => {
      until = { count: target, resolve }
    })
    for (const k of keys) engine.queue.addUnsafe(k)
    await roundDone
  }
  const cpu = process.cpuUsage(cpu0)
  const seconds = (performance.now() - began) / 1000
  if (profiler !== undefined && profileDir !== undefined) {
    const { profile } = await profiler.post("Profiler.stop")
    writeFileSync(join(profileDir, "fleetcheck.cpuprofile"), JSON.stringify(profile))
    profiler.disconnect()
  }
  const done = engine.stats.reconciles - start
  const cpuSeconds = (cpu.user + cpu.system) / 1e6
  const rvAfter = await versions()
  console.log(
    `converged reconciles: ${done} in ${seconds.toFixed(2)} s = ${Math.round(done / seconds)} per second (one JS thread)`,
  )
  console.log(
    `CPU: ${((cpuSeconds / done) * 10_000).toFixed(3)} CPU-seconds per 10,000 converged reconciles (${checksLabel(n)}; process user+system ${cpuSeconds.toFixed(2)} s for ${done})`,
  )
  console.log(
    `errors during the rounds: ${engine.stats.errors - errorsBefore} (${errorsBefore} before them, while the checks were first verified), writes: ${rvBefore === rvAfter ? "none (every BackupCheck's resourceVersion unchanged)" : "some BackupChecks were written"}`,
  )
  await Effect.runPromise(Scope.close(scope, Exit.void))

  if (process.env.GO_REFERENCE !== "0") {
    const binary = await goReference((line) => console.error(line))
    const workers = Number(process.env.GO_WORKERS ?? 1)
    const ours = (cpuSeconds / done) * 10_000
    // As a controller-runtime reconciler is usually written (the spec hashed every time), then with the
    // hash kept per object as fleetcheck keeps its derivations.
    for (const hashOnce of [false, true]) {
      const go = await runGoReference(binary, {
        kubeconfigPath: c.kubeconfigPath,
        namespace: ns,
        rounds,
        workers,
        hashOnce,
        deepEqual: process.env.GO_DEEP_EQUAL === "1",
        ...(profileDir === undefined
          ? {}
          : { cpuProfile: join(profileDir, `crreference-${hashOnce ? "hash-once" : "hash-every"}.pprof`) }),
      })
      const goPer10k = (go.cpuSeconds / go.reconciles) * 10_000
      const rvGo = await versions()
      console.log(
        `controller-runtime reference (Go, GOMAXPROCS=${go.gomaxprocs}, ${go.workers} worker(s), spec hash ${go.hashOnce ? "kept per object" : "every reconcile"}, status ${go.deepEqual ? "compared whole by reflection" : "changed in place, written when a setter changed it"}): ${go.reconciles} converged reconciles of ${go.checks} checks in ${go.wallSeconds.toFixed(2)} s = ${Math.round(go.reconciles / go.wallSeconds)} per second; ${goPer10k.toFixed(3)} CPU-seconds per 10,000 (process user+system ${go.cpuSeconds.toFixed(2)} s); writes ${go.writes}, undecided ${go.undecided}, errors ${go.errors}; resourceVersions ${rvGo === rvAfter ? "unchanged" : "CHANGED"}; heap after GC with every check and Job cached ${mib(go.heapBytes)} MiB`,
      )
      console.log(
        `  fleetcheck / controller-runtime CPU per converged reconcile: ${(ours / goPer10k).toFixed(2)} (${ours.toFixed(3)} vs ${goPer10k.toFixed(3)} CPU-seconds per 10,000, ${checksLabel(n)})`,
      )
    }
  }
} finally {
  await fleet.stop()
}
