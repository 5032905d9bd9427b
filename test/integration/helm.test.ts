// deploy/helm with the real Helm (built from the Go module proxy) against real API servers: lint, the
// rendered manifests applied with server-side dry run, bad values refused naming the key, and a
// chart-installed hub verifying a member's check. Local fleets run no containers, so the hub is the
// Deployment the chart created run as a host process: its args and env, its ServiceAccount's token.
import { execFile } from "node:child_process"
import { readFileSync, writeFileSync } from "node:fs"
import { join } from "node:path"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { parseAllDocuments } from "yaml"
import {
  type LocalCluster,
  type LocalFleet,
  renderKubeconfig,
  startFleet,
  upstreamCrdFiles,
} from "../../clusters/local-fleet/index.ts"
import { backupCheck } from "../support/backupcheck.ts"
import { waitUntil } from "../support/wait.ts"

const repo = new URL("../../", import.meta.url).pathname
const hubChart = join(repo, "deploy/helm/fleetcheck")
const memberChart = join(repo, "deploy/helm/fleetcheck-member")
const ns = "fleetcheck-system"

interface Run {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}
const run = (cmd: string, args: ReadonlyArray<string>, env?: NodeJS.ProcessEnv): Promise<Run> =>
  new Promise((resolve) => {
    execFile(cmd, args, { env: env ?? process.env, maxBuffer: 64 << 20 }, (error, stdout, stderr) =>
      resolve({ code: error ? (typeof error.code === "number" ? error.code : 1) : 0, stdout, stderr }),
    )
  })

describe("deploy/helm: the charts with real Helm", () => {
  let fleet: LocalFleet
  let hub: LocalCluster
  let member: LocalCluster
  let helm: string

  const helmIn = (c: LocalCluster, args: ReadonlyArray<string>) =>
    run(helm, [...args, "--kubeconfig", c.kubeconfigPath])

  beforeAll(async () => {
    const built = await run("bash", [
      join(repo, "clusters/build-tool.sh"),
      "helm",
      "helm.sh/helm/v4",
      "helm.sh/helm/v4/cmd/helm",
    ])
    if (built.code !== 0) throw new Error(`building Helm: ${built.stderr}`)
    helm = join(built.stdout.trim().split("\n").at(-1)!, "helm")
    fleet = await startFleet({
      clusters: [
        { name: "hub", workloads: false, controllerManager: true },
        { name: "member", workloads: true, controllerManager: true },
      ],
    })
    hub = fleet.cluster("hub")
    member = fleet.cluster("member")
  })

  afterAll(async () => {
    await fleet?.stop()
  })

  it("helm lint passes for both charts", async () => {
    for (const chart of [hubChart, memberChart]) {
      const r = await run(helm, ["lint", "--strict", chart])
      expect(r.code, `${r.stdout}${r.stderr}`).toBe(0)
    }
    const scoped = await run(helm, ["lint", "--strict", memberChart, "--set", "namespaces={shop,team-a}"])
    expect(scoped.code, scoped.stdout).toBe(0)
  })

  it("helm template's output applies with server-side dry run, with every option on", async () => {
    // cert-manager's and prometheus-operator's own CRDs, so the dry run checks our objects' fields.
    for (const file of await upstreamCrdFiles()) {
      const r = await hub.kubectl(["apply", "--server-side", "-f", file])
      expect(r.code, r.stderr).toBe(0)
    }
    const established = await hub.kubectl([
      "wait",
      "--for=condition=Established",
      "--timeout=60s",
      "crd/certificates.cert-manager.io",
      "crd/issuers.cert-manager.io",
      "crd/servicemonitors.monitoring.coreos.com",
      "crd/prometheusrules.monitoring.coreos.com",
    ])
    expect(established.code, established.stderr).toBe(0)
    await hub.api("POST", "/api/v1/namespaces", { metadata: { name: "dry" } })
    const variants: ReadonlyArray<ReadonlyArray<string>> = [
      [],
      ["--set", "hub.sharding=true", "--set", "replicas=3"],
      [
        "--set",
        "tls.certManager.enabled=true",
        "--set",
        "serviceMonitor.enabled=true",
        "--set",
        "prometheusRule.enabled=true",
        "--set",
        "nodeSelector.kubernetes\\.io/os=linux",
        "--set-json",
        'tolerations=[{"key":"dedicated","operator":"Equal","value":"fleetcheck","effect":"NoSchedule"}]',
      ],
    ]
    for (const extra of variants) {
      const t = await run(helm, ["template", "fc", hubChart, "-n", "dry", "--include-crds", ...extra])
      expect(t.code, t.stderr).toBe(0)
      const kinds = parseAllDocuments(t.stdout).map((d) => (d.toJS() as any)?.kind)
      if (extra.includes("prometheusRule.enabled=true"))
        expect(kinds).toEqual(
          expect.arrayContaining(["PrometheusRule", "ServiceMonitor", "Certificate", "Issuer"]),
        )
      if (extra.includes("hub.sharding=true")) expect(kinds).toContain("PodDisruptionBudget")
      const pod = parseAllDocuments(t.stdout)
        .map((d) => d.toJS() as any)
        .find((o) => o?.kind === "Deployment")?.spec.template.spec
      if (extra.includes("--set-json")) {
        expect(pod.nodeSelector).toEqual({ "kubernetes.io/os": "linux" })
        expect(pod.tolerations).toEqual([
          { key: "dedicated", operator: "Equal", value: "fleetcheck", effect: "NoSchedule" },
        ])
      } else {
        expect(pod.nodeSelector).toBeUndefined()
        expect(pod.tolerations).toBeUndefined()
      }
      const applied = await hub.kubectl(["apply", "--server-side", "--dry-run=server", "-f", "-"], t.stdout)
      expect(applied.code, `${extra.join(" ")}: ${applied.stderr}`).toBe(0)
    }
    const m = await run(helm, [
      "template",
      "m",
      memberChart,
      "-n",
      ns,
      "--include-crds",
      "--set",
      "namespaces={dry}",
    ])
    expect(m.code, m.stderr).toBe(0)
    // The release namespace and the scoped one exist, as `helm install --create-namespace` and the
    // member's teams make them.
    for (const name of [ns, "dry"]) await member.api("POST", "/api/v1/namespaces", { metadata: { name } })
    const mApplied = await member.kubectl(["apply", "--server-side", "--dry-run=server", "-f", "-"], m.stdout)
    expect(mApplied.code, mApplied.stderr).toBe(0)
  })

  it("bad values fail helm install naming the key; replicas > 1 without leader election or sharding is refused", async () => {
    const dir = fleet.runDir
    const cases = [
      ["unknown.yaml", "hub:\n  leaderElekt: true\n", /leaderElekt/],
      [
        "type.yaml",
        'hub:\n  workersPerMember: "four"\n',
        /workersPerMember.*want integer|\/hub\/workersPerMember/,
      ],
      ["top.yaml", "replica: 2\n", /replica/],
      ["replicas.yaml", "replicas: 2\nhub:\n  leaderElect: false\n", /replicas: 2 needs hub.leaderElect/],
    ] as const
    for (const [file, text, message] of cases) {
      writeFileSync(join(dir, file), text)
      const r = await helmIn(hub, [
        "install",
        "bad",
        hubChart,
        "-n",
        ns,
        "--create-namespace",
        "-f",
        join(dir, file),
      ])
      expect(r.code, file).not.toBe(0)
      expect(r.stderr, file).toMatch(message)
    }
    expect((await helmIn(hub, ["list", "-n", ns, "-q"])).stdout.trim()).toBe("")
  })

  it("the chart-installed hub verifies a member's BackupCheck", { timeout: 240_000 }, async () => {
    const installed = await helmIn(hub, [
      "install",
      "fleetcheck",
      hubChart,
      "-n",
      ns,
      "--create-namespace",
      "--wait=false",
    ])
    expect(installed.code, installed.stderr).toBe(0)
    expect(installed.stdout).toContain("fleetcheck status --hub https://127.0.0.1:8443")
    const joined = await helmIn(member, [
      "install",
      "fleetcheck-member",
      memberChart,
      "-n",
      ns,
      "--create-namespace",
    ])
    expect(joined.code, joined.stderr).toBe(0)

    const tokenOf = async (c: LocalCluster, sa: string) => {
      const r = await c.api("POST", `/api/v1/namespaces/${ns}/serviceaccounts/${sa}/token`, {
        apiVersion: "authentication.k8s.io/v1",
        kind: "TokenRequest",
        spec: { expirationSeconds: 3600 },
      })
      if (r.status !== 201) throw new Error(`TokenRequest ${sa}: ${r.status} ${JSON.stringify(r.body)}`)
      return r.body.status.token as string
    }
    // The registration, as `fleetcheck register` writes it, with the identity the member chart made.
    const memberToken = await tokenOf(member, "fleetcheck-hub-identity")
    const secret = await hub.api("POST", `/api/v1/namespaces/${ns}/secrets`, {
      metadata: { name: "member", namespace: ns, labels: { "fleetcheck.io/kubeconfig": "true" } },
      data: {
        kubeconfig: Buffer.from(
          renderKubeconfig("member", member.server, member.caPem, memberToken),
        ).toString("base64"),
      },
    })
    expect(secret.status).toBe(201)

    // The Pod the Deployment would run: its ServiceAccount's token, its args and env.
    const deployment = (await hub.api("GET", `/apis/apps/v1/namespaces/${ns}/deployments/fleetcheck-hub`))
      .body
    const pod = deployment.spec.template.spec
    const container = pod.containers[0]
    const hubToken = await tokenOf(hub, pod.serviceAccountName)
    const kubeconfig = join(fleet.runDir, "chart-hub.kubeconfig")
    writeFileSync(kubeconfig, renderKubeconfig("hub", hub.server, hub.caPem, hubToken), { mode: 0o600 })
    const env: Record<string, string> = {}
    for (const e of container.env as any[]) {
      if (typeof e.value === "string") env[e.name] = e.value
      else if (e.valueFrom?.fieldRef?.fieldPath === "metadata.namespace") env[e.name] = ns
      else throw new Error(`env ${e.name}: a source this test does not resolve`)
    }
    expect(env.FLEETCHECK_SECURE_SERVING).toBe("true")
    expect(container.args).toEqual(["hub"])
    // Ports of this machine are shared: the same listeners on free loopback ports.
    const proc = fleet.spawn(
      "chart-hub",
      join(repo, "bin/fleetcheck"),
      [...container.args, "--http-address", "127.0.0.1:0", "--dashboard-address", "127.0.0.1:0"],
      {
        env: { ...process.env, ...env, KUBECONFIG: kubeconfig },
      },
    )
    const log = () => {
      try {
        return readFileSync(proc.logFile, "utf8")
      } catch {
        return ""
      }
    }
    await waitUntil("the chart's hub serving HTTPS", 60_000, async () => {
      if (proc.hasExited()) throw new Error(`hub exited: ${log().slice(-3000)}`)
      return /"hub serving"[^\n]*"scheme":"https"|"scheme":"https"[^\n]*hub serving/.test(log()) || undefined
    })

    const group = "/apis/fleetcheck.io/v1alpha1"
    await member.api("POST", "/api/v1/namespaces", { metadata: { name: "shop" } })
    expect(
      (await member.api("POST", `${group}/namespaces/shop/backupchecks`, backupCheck("nightly", "shop")))
        .status,
    ).toBe(201)
    const verified = await waitUntil("Verified=True on the member's check", 120_000, async () => {
      const bc = (await member.api("GET", `${group}/namespaces/shop/backupchecks/nightly`)).body
      const c = (bc?.status?.conditions ?? []).find((x: any) => x.type === "Verified")
      return c?.status === "True" ? c : undefined
    }).catch((e) => {
      throw new Error(`${e.message}; hub log: ${log().slice(-3000)}`)
    })
    expect(verified.reason).toBe("RestoreSucceeded")
    const mc = (await hub.api("GET", `${group}/memberclusters/member`)).body
    expect((mc.status.conditions as any[]).find((x) => x.type === "Ready")?.status).toBe("True")
    expect(log()).not.toMatch(/forbidden|\b403\b/i)
    proc.signal("SIGTERM")
    await proc.exited
  })
})
