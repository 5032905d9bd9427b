// Prints the hub's memory with three idle members and with three members holding N checks each
// (default 500). Checks are suspended so no Jobs run: this measures the hub's caches and engines.
//   node test/bench/hub-memory.ts [checksPerMember=500]
import { type ChildProcess, fork } from "node:child_process"
import { type LocalCluster, startFleet } from "../../clusters/local-fleet/index.ts"
import { sleep } from "../support/wait.ts"
import { ask, servingPort } from "./child-process.ts"

const perMember = Number(process.argv[2] ?? 500)
const crdDir = new URL("../../deploy/crds/", import.meta.url).pathname
const hubNs = "fleetcheck-system"
/** The hub process's V8 heap in use and RSS, after forced garbage collections. */
const measure = (proc: ChildProcess) => ask<{ heap: number; rss: number }>(proc, "measure")
const mib = (b: number) => `${(b / 1024 / 1024).toFixed(1)} MiB`

const fleet = await startFleet({
  clusters: ["hub", "m1", "m2", "m3"].map((name) => ({ name, workloads: false, controllerManager: false })),
  log: () => {},
})
try {
  const hubCluster = fleet.cluster("hub")
  const members = fleet.clusters.filter((c) => c.name !== "hub")
  await hubCluster.kubectl(["apply", "--server-side", "-f", `${crdDir}/fleetcheck.io_memberclusters.yaml`])
  await hubCluster.api("POST", "/api/v1/namespaces", { metadata: { name: hubNs } })
  for (const m of members) {
    await m.kubectl(["apply", "--server-side", "-f", `${crdDir}/fleetcheck.io_backupchecks.yaml`])
    await m.kubectl([
      "wait",
      "--for=condition=Established",
      "crd/backupchecks.fleetcheck.io",
      "--timeout=30s",
    ])
    await m.api("POST", "/api/v1/namespaces", { metadata: { name: "apps" } })
  }
  // The hub runs in a process of its own (heap and RSS are then the hub's alone), with --expose-gc.
  const hubProc = fork(new URL("./hub-process.ts", import.meta.url).pathname, [], {
    execArgv: ["--expose-gc"],
    env: { ...process.env, KUBECONFIG: hubCluster.kubeconfigPath },
    stdio: ["ignore", "ignore", "inherit", "ipc"],
  })
  const port = await servingPort(hubProc)
  const url = `http://127.0.0.1:${port}`
  const fleetView = async () => (await (await fetch(`${url}/api/v1/fleet`)).json()) as any
  while (
    !(await fetch(`${url}/healthz`)
      .then((r) => r.ok)
      .catch(() => false))
  )
    await sleep(200)
  await sleep(3_000)
  const noMembers = await measure(hubProc)
  for (const m of members) {
    await hubCluster.api("POST", `/api/v1/namespaces/${hubNs}/secrets`, {
      apiVersion: "v1",
      kind: "Secret",
      metadata: { name: m.name, namespace: hubNs, labels: { "fleetcheck.io/kubeconfig": "true" } },
      data: { kubeconfig: Buffer.from(m.kubeconfig).toString("base64") },
    })
  }
  while (
    (await fleetView()).clusters.filter((c: any) =>
      c.conditions.some((x: any) => x.type === "Ready" && x.status === "True"),
    ).length < 3
  ) {
    await sleep(500)
  }
  await sleep(10_000)
  const idle = await measure(hubProc)

  const create = async (m: LocalCluster, i: number) => {
    const name = `check-${String(i).padStart(4, "0")}`
    await m.api("POST", "/apis/fleetcheck.io/v1alpha1/namespaces/apps/backupchecks", {
      apiVersion: "fleetcheck.io/v1alpha1",
      kind: "BackupCheck",
      metadata: { name, namespace: "apps", labels: { team: "bench" } },
      spec: {
        suspend: true,
        backup: {
          name: `${name}-2026-11-29`,
          source: `s3://backups/${name}`,
          checksum: `sha256:${"ab".repeat(32)}`,
        },
        jobTemplate: {
          spec: {
            template: {
              spec: { containers: [{ name: "restore", image: "restore:1.4", args: ["--verify"] }] },
            },
          },
        },
      },
    })
  }
  const t0 = Date.now()
  for (const m of members) {
    for (let i = 0; i < perMember; i += 25) {
      await Promise.all(Array.from({ length: Math.min(25, perMember - i) }, (_, j) => create(m, i + j)))
    }
  }
  // Every check reconciled: Suspended written, as seen through the hub's fleet API.
  while (true) {
    const view = await fleetView()
    if (view.checks.length === 3 * perMember && view.checks.every((c: any) => c.reason === "Suspended")) break
    await sleep(1_000)
  }
  const reconciledMs = Date.now() - t0
  await sleep(10_000)
  const loaded = await measure(hubProc)
  const sample = (
    await members[0]!.api("GET", "/apis/fleetcheck.io/v1alpha1/namespaces/apps/backupchecks/check-0000")
  ).body
  const jsonBytes = Buffer.byteLength(JSON.stringify(sample))

  console.log(`hub heap, hub running, no members:        ${mib(noMembers.heap)} (rss ${mib(noMembers.rss)})`)
  console.log(`hub heap, 3 idle members:                 ${mib(idle.heap)} (rss ${mib(idle.rss)})`)
  console.log(`per idle member engine:                   ${mib((idle.heap - noMembers.heap) / 3)} heap`)
  console.log(
    `hub heap, 3 members x ${perMember} checks:        ${mib(loaded.heap)} (rss ${mib(loaded.rss)})`,
  )
  console.log(
    `per cached check:                         ${((loaded.heap - idle.heap) / (3 * perMember)).toFixed(0)} B heap (object JSON ${jsonBytes} B as served)`,
  )
  console.log(`created and reconciled ${3 * perMember} checks in ${(reconciledMs / 1000).toFixed(1)} s`)
  console.log("(the hub in a process of its own; heap used and rss after forced GC)")
  hubProc.kill("SIGTERM")
  await new Promise((r) => hubProc.once("exit", r))
} finally {
  await fleet.stop()
}
