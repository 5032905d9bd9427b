// Heap cost of the informer cache per object, against the bar "under 2x the JSON size per cached
// object" (SPEC §10). Fills a store with N BackupCheck-like objects parsed from JSON exactly as they
// arrive from a LIST (managedFields and kubectl's last-applied annotation included, so stripping
// counts), then reports V8 heap bytes per cached object against the wire JSON size, plus the
// transient peak of a full relist (old cache + new list alive at once).
//
//   node test/bench/informer-store.ts [N]        (re-spawns itself with --expose-gc when needed)
import { spawnSync } from "node:child_process"
import { fileURLToPath } from "node:url"
import { makeStore, stripObject } from "../../src/engine/informer/store.ts"

const gc = (globalThis as { gc?: () => void }).gc
if (gc === undefined) {
  const r = spawnSync(
    process.execPath,
    ["--expose-gc", ...process.execArgv, fileURLToPath(import.meta.url), ...process.argv.slice(2)],
    { stdio: "inherit" },
  )
  process.exit(r.status ?? 1)
}

const n = Number(process.argv[2] ?? process.env.N ?? 20_000)

const hex = (i: number, len: number) => {
  let s = ""
  let x = (i * 2654435761) >>> 0
  while (s.length < len) {
    x = (x * 1103515245 + 12345) >>> 0
    s += x.toString(16).padStart(8, "0")
  }
  return s.slice(0, len)
}

const uid = (i: number) => {
  const h = hex(i, 32)
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`
}

/** One BackupCheck as a member's apiserver would list it: applied with kubectl, status by the hub. */
const backupCheckJson = (i: number, rv: number): string => {
  const ns = `team-${i % 40}`
  const name = `orders-db-${i}-nightly`
  const day = String((i % 28) + 1).padStart(2, "0")
  const spec = {
    backup: {
      name: `orders-2026-11-${day}-${i}`,
      source: `s3://backups-${i % 7}/orders/2026-11-${day}/${hex(i, 12)}`,
      checksum: `sha256:${hex(i + 1, 64)}`,
    },
    jobTemplate: {
      metadata: { labels: { app: "restore", team: ns } },
      spec: {
        backoffLimit: 0,
        template: {
          spec: {
            restartPolicy: "Never",
            containers: [
              {
                name: "restore",
                image: `registry.example/restore-tool:1.${i % 9}`,
                args: ["--verify", `--target=postgres://restore-${i}.${ns}.svc:5432/orders`],
                env: [
                  { name: "PGPASSWORD", valueFrom: { secretKeyRef: { name: `db-${i}`, key: "password" } } },
                ],
                resources: { requests: { cpu: "500m", memory: "512Mi" }, limits: { memory: "1Gi" } },
              },
            ],
          },
        },
      },
    },
    schedule: `${i % 60} ${i % 24} * * *`,
    timeZone: "Europe/Berlin",
    timeout: "30m",
    maxStaleness: "48h",
    suspend: false,
    successfulRunsHistoryLimit: 3,
    failedRunsHistoryLimit: 1,
  }
  const lastApplied = JSON.stringify({
    apiVersion: "fleetcheck.io/v1alpha1",
    kind: "BackupCheck",
    metadata: { annotations: {}, name, namespace: ns },
    spec,
  })
  const obj = {
    apiVersion: "fleetcheck.io/v1alpha1",
    kind: "BackupCheck",
    metadata: {
      name,
      namespace: ns,
      uid: uid(i),
      resourceVersion: String(rv),
      generation: 1 + (i % 5),
      creationTimestamp: `2026-11-${day}T0${i % 10}:1${i % 10}:2${i % 10}Z`,
      labels: { app: "orders", tier: "db", "fleetcheck.io/team": ns },
      annotations: {
        "kubectl.kubernetes.io/last-applied-configuration": `${lastApplied}\n`,
        "team.example/owner": `owner-${i % 300}@example.com`,
      },
      finalizers: ["fleetcheck.io/cleanup"],
      managedFields: [
        {
          manager: "kubectl-client-side-apply",
          operation: "Update",
          apiVersion: "fleetcheck.io/v1alpha1",
          time: `2026-11-${day}T03:00:0${i % 10}Z`,
          fieldsType: "FieldsV1",
          fieldsV1: {
            "f:metadata": {
              "f:annotations": { ".": {}, "f:kubectl.kubernetes.io/last-applied-configuration": {} },
              "f:labels": { ".": {}, "f:app": {}, "f:tier": {} },
            },
            "f:spec": {
              ".": {},
              "f:backup": { ".": {}, "f:checksum": {}, "f:name": {}, "f:source": {} },
              "f:jobTemplate": { ".": {}, "f:spec": { ".": {}, "f:template": {} } },
              "f:maxStaleness": {},
              "f:schedule": {},
              "f:timeZone": {},
              "f:timeout": {},
            },
          },
        },
        {
          manager: "fleetcheck",
          operation: "Update",
          apiVersion: "fleetcheck.io/v1alpha1",
          time: `2026-11-${day}T03:00:5${i % 10}Z`,
          fieldsType: "FieldsV1",
          fieldsV1: { "f:metadata": { "f:finalizers": { ".": {}, 'v:"fleetcheck.io/cleanup"': {} } } },
        },
        {
          manager: "fleetcheck",
          operation: "Update",
          apiVersion: "fleetcheck.io/v1alpha1",
          time: `2026-11-${day}T03:00:5${i % 10}Z`,
          fieldsType: "FieldsV1",
          fieldsV1: {
            "f:status": {
              ".": {},
              "f:conditions": { ".": {}, 'k:{"type":"Verified"}': { ".": {}, "f:lastTransitionTime": {} } },
              "f:lastRun": { ".": {}, "f:jobName": {}, "f:result": {}, "f:runID": {} },
              "f:lastSuccessfulTime": {},
              "f:nextRunTime": {},
              "f:observedGeneration": {},
            },
          },
          subresource: "status",
        },
      ],
    },
    spec,
    status: {
      observedGeneration: 1 + (i % 5),
      conditions: [
        {
          type: "Verified",
          status: i % 10 === 0 ? "False" : "True",
          reason: i % 10 === 0 ? "ChecksumMismatch" : "RestoreSucceeded",
          message: `orders-2026-11-${day}-${i} restored and checksum verified in ${30 + (i % 60)}s`,
          lastTransitionTime: `2026-11-${day}T03:00:5${i % 10}Z`,
          observedGeneration: 1 + (i % 5),
        },
      ],
      lastRun: {
        jobName: `${name}-${hex(i, 10)}`,
        runID: hex(i + 7, 16),
        startTime: `2026-11-${day}T03:00:0${i % 10}Z`,
        completionTime: `2026-11-${day}T03:00:5${i % 10}Z`,
        result: i % 10 === 0 ? "Failed" : "Succeeded",
        traceID: hex(i + 3, 32),
      },
      lastSuccessfulTime: `2026-11-${day}T03:00:5${i % 10}Z`,
      nextRunTime: `2026-11-${day}T03:00:00Z`,
    },
  }
  return JSON.stringify(obj)
}

const heap = () => {
  gc!()
  gc!()
  return process.memoryUsage().heapUsed
}

const mb = (b: number) => `${(b / 1024 / 1024).toFixed(1)} MB`

const ownerIndex = { team: (o: { metadata: { namespace: string } }) => [o.metadata.namespace] }
const store = makeStore<{ metadata: { namespace: string } }>({ indexers: ownerIndex })

let jsonBytes = 0
let strippedJsonBytes = 0
let parseMs = 0
let upsertMs = 0
const base = heap()
for (let i = 0; i < n; i++) {
  const json = backupCheckJson(i, 1000 + i)
  jsonBytes += Buffer.byteLength(json)
  const t0 = performance.now()
  const obj = JSON.parse(json)
  const t1 = performance.now()
  store.upsert(obj)
  upsertMs += performance.now() - t1
  parseMs += t1 - t0
}
const filled = heap()
for (const o of store.list()) strippedJsonBytes += Buffer.byteLength(JSON.stringify(o))
const perObject = (filled - base) / n
const jsonPerObject = jsonBytes / n
const strippedPerObject = strippedJsonBytes / n

// A relist: the new list is parsed and stripped page by page (as the informer does) while the old
// cache is still alive; then replace() swaps them.
let relistItems: Array<{ metadata: { namespace: string } }> = []
let relistMs = 0
for (let i = 0; i < n; i++) {
  const json = backupCheckJson(i, 900_000 + i)
  const t = performance.now()
  relistItems.push(stripObject(JSON.parse(json)))
  relistMs += performance.now() - t
}
const duringRelist = heap()
const t1 = performance.now()
const updated = store.replace(relistItems).updated.length
const replaceMs = performance.now() - t1
relistItems = []
const afterRelist = heap()

console.log(
  `informer store: ${n} objects, json ${Math.round(jsonPerObject)} B/object ` +
    `(${Math.round(strippedPerObject)} B without managedFields/last-applied), ` +
    `heap ${Math.round(perObject)} B/object, ratio ${(perObject / jsonPerObject).toFixed(2)}x ` +
    `(${(perObject / strippedPerObject).toFixed(2)}x of the stripped JSON)`,
)
console.log(
  `  JSON.parse ${((parseMs * 1000) / n).toFixed(1)} µs/object, strip+upsert ${((upsertMs * 1000) / n).toFixed(1)} µs/object; ` +
    `relist: parse+strip ${relistMs.toFixed(0)} ms, ` +
    `replace() of ${updated} updated ${replaceMs.toFixed(0)} ms`,
)
console.log(
  `  heap: empty ${mb(base)}, filled ${mb(filled)}, mid-relist peak ${mb(duringRelist)} ` +
    `(${((duringRelist - base) / (filled - base)).toFixed(2)}x the cache), after relist ${mb(afterRelist)}`,
)
