// Real local Kubernetes fleets for tests and `fleetcheck dev`: one shared etcd, one kube-apiserver per
// cluster (distinct --etcd-prefix, loopback only, token-authenticated admin kubeconfig) and, per
// cluster, optionally kube-controller-manager, kube-scheduler and kwok so Job pods run and finish the
// way their annotations ask (see kwok-stages.yaml). Start one fleet per test file, not per test.
// Optional per cluster: API server audit logs of every write (audit.ts) and extra token users, each
// with its own kubeconfig, so several clients of one cluster are told apart in those logs.

import { execFile } from "node:child_process"
import { generateKeyPairSync, randomBytes } from "node:crypto"
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { request } from "node:https"
import { createServer } from "node:net"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { type AgentExecutor, restoreToolPath, startAgentExecutor } from "./agent-executor.ts"
import { type AuditEvent, auditFlags, auditPolicy, auditPolicyWithReads, readAuditLog } from "./audit.ts"
import { ensureBinaries } from "./binaries.ts"
import {
  type ManagedProcess,
  makeProcessRegistry,
  type ProcessRegistry,
  type StartOptions,
} from "./processes.ts"

export interface ClusterOptions {
  readonly name: string
  /** Job, Deployment, ReplicaSet, garbage-collector, namespace and service-account controllers (default true). */
  readonly controllerManager?: boolean
  /** kube-scheduler plus kwok with one fake Node, so Job pods run (default true). */
  readonly workloads?: boolean
  /**
   * Audit log of every mutating request (see audit.ts), "reads" for get/list/watch as well; default:
   * the fleet's `audit`.
   */
  readonly audit?: boolean | "reads"
  /** Extra token users (members of system:masters), each with a kubeconfig; default: the fleet's `users`. */
  readonly users?: ReadonlyArray<string>
  /** A CA (PEM file) whose client certificates the API server accepts besides tokens; default none. */
  readonly clientCaFile?: string
}

export interface FleetOptions {
  readonly clusters: ReadonlyArray<ClusterOptions | string>
  /** Where run directories go; default /dev/shm when present (tmpfs), else the OS temp dir. */
  readonly baseDir?: string
  /** Progress lines (default: stderr). */
  readonly log?: (line: string) => void
  /** Every cluster's apiserver writes an audit log of mutating requests (default false). */
  readonly audit?: boolean
  /** Extra token users in every cluster, e.g. one per hub process (default none). */
  readonly users?: ReadonlyArray<string>
}

/** A token user of one cluster, in group system:masters. */
export interface ClusterUser {
  /** The user name the API server authenticates (audit events' user.username). */
  readonly name: string
  readonly token: string
  /** Kubeconfig YAML for this user; the context is named after the cluster. */
  readonly kubeconfig: string
  readonly kubeconfigPath: string
}

export interface KubectlResult {
  readonly code: number
  readonly stdout: string
  readonly stderr: string
}

export interface LocalCluster {
  readonly name: string
  /** https://127.0.0.1:PORT */
  readonly server: string
  readonly caPem: string
  readonly adminToken: string
  readonly kubeconfigPath: string
  /** The admin kubeconfig as YAML text (context named after the cluster). */
  readonly kubeconfig: string
  readonly dir: string
  /** Raw API request as the admin; JSON in and out. */
  readonly api: (method: string, path: string, body?: unknown) => Promise<{ status: number; body: any }>
  readonly kubectl: (args: ReadonlyArray<string>, stdin?: string) => Promise<KubectlResult>
  /** Stops only the apiserver (its etcd data stays): for "API server restarted" and "member down" faults. */
  readonly stopApiServer: () => Promise<void>
  /** Starts the apiserver again on the same port with the same certificates, and waits until ready. */
  readonly startApiServer: () => Promise<void>
  /** SIGSTOP / SIGCONT the apiserver: a hung member that still accepts connections. */
  readonly freezeApiServer: () => void
  readonly thawApiServer: () => void
  readonly processes: () => ReadonlyArray<ManagedProcess>
  /** The extra users asked for, by name (empty without the `users` option). */
  readonly users: Readonly<Record<string, ClusterUser>>
  /** Where the apiserver writes its audit log; undefined without the `audit` option. */
  readonly auditLogPath: string | undefined
  /** Every audit event written so far (throws without the `audit` option). */
  readonly auditEvents: () => AuditEvent[]
}

export interface LocalFleet {
  readonly clusters: ReadonlyArray<LocalCluster>
  readonly cluster: (name: string) => LocalCluster
  readonly binDir: string
  readonly runDir: string
  /** The shared etcd's client URL (plain HTTP on loopback), for benches that write storage directly. */
  readonly etcdUrl: string
  /**
   * Starts a process of the test's own (a hub, say) under the fleet's watchdog: own process group,
   * output to `<runDir>/logs/<name>.log`, stopped with the fleet. Names must be unique per fleet.
   */
  readonly spawn: (
    name: string,
    command: string,
    args: ReadonlyArray<string>,
    options?: StartOptions,
  ) => ManagedProcess
  /** Stops every process (reverse order) and removes the run directory. Safe to call twice. */
  readonly stop: () => Promise<void>
}

const stagesFile = new URL("./kwok-stages.yaml", import.meta.url).pathname

/** A loopback TCP port free at the moment of asking. */
export const freePort = (): Promise<number> =>
  new Promise((resolve, reject) => {
    const srv = createServer()
    srv.once("error", reject)
    srv.listen(0, "127.0.0.1", () => {
      const addr = srv.address()
      const port = typeof addr === "object" && addr ? addr.port : 0
      srv.close(() => resolve(port))
    })
  })

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms))

const waitFor = async (
  what: string,
  timeoutMs: number,
  check: () => Promise<boolean>,
  proc?: ManagedProcess,
) => {
  const deadline = Date.now() + timeoutMs
  let lastError: unknown
  while (Date.now() < deadline) {
    if (proc?.hasExited()) {
      throw new Error(`${what}: ${proc.name} exited early; see ${proc.logFile}:\n${tail(proc.logFile)}`)
    }
    try {
      if (await check()) return
    } catch (e) {
      lastError = e
    }
    await sleep(100)
  }
  const logHint = proc ? `; see ${proc.logFile}:\n${tail(proc.logFile)}` : ""
  throw new Error(
    `timed out after ${timeoutMs} ms waiting for ${what} (${String(lastError ?? "not ready")})${logHint}`,
  )
}

const tail = (file: string, lines = 15) => {
  try {
    return readFileSync(file, "utf8").trimEnd().split("\n").slice(-lines).join("\n")
  } catch {
    return "(no log)"
  }
}

/** A raw JSON request to an apiserver as the bearer of `token` (admin or a ServiceAccount's). */
export const apiRequest = (
  server: string,
  caPem: string,
  token: string,
  method: string,
  path: string,
  body?: unknown,
  contentType = "application/json",
): Promise<{ status: number; body: any }> =>
  new Promise((resolve, reject) => {
    const payload = body === undefined ? undefined : JSON.stringify(body)
    const req = request(
      new URL(path, server),
      {
        method,
        ca: caPem,
        headers: {
          authorization: `Bearer ${token}`,
          accept: "application/json",
          ...(payload ? { "content-type": contentType, "content-length": Buffer.byteLength(payload) } : {}),
        },
        timeout: 10_000,
      },
      (res) => {
        let text = ""
        res.setEncoding("utf8")
        res.on("data", (c: string) => {
          text += c
        })
        res.on("end", () => {
          let parsed: unknown = text
          try {
            parsed = text ? JSON.parse(text) : undefined
          } catch {
            // Not JSON (e.g. /readyz's "ok"): keep the text.
          }
          resolve({ status: res.statusCode ?? 0, body: parsed })
        })
      },
    )
    req.once("timeout", () => req.destroy(new Error(`${method} ${path}: timeout`)))
    req.once("error", reject)
    if (payload) req.write(payload)
    req.end()
  })

/** A kubeconfig with one cluster, one token user (default `<name>-admin`) and one context, all named `name`. */
export const renderKubeconfig = (
  name: string,
  server: string,
  caPem: string,
  token: string,
  userName = `${name}-admin`,
) =>
  [
    "apiVersion: v1",
    "kind: Config",
    "clusters:",
    `- name: ${name}`,
    "  cluster:",
    `    server: ${server}`,
    `    certificate-authority-data: ${Buffer.from(caPem).toString("base64")}`,
    "users:",
    `- name: ${userName}`,
    "  user:",
    `    token: ${token}`,
    "contexts:",
    `- name: ${name}`,
    "  context:",
    `    cluster: ${name}`,
    `    user: ${userName}`,
    `current-context: ${name}`,
    "",
  ].join("\n")

const adminUser = "fleet-admin"

type ClusterSpec = Required<Omit<ClusterOptions, "clientCaFile">> & Pick<ClusterOptions, "clientCaFile">

const normalize = (c: ClusterOptions | string, fleet: FleetOptions): ClusterSpec => {
  const defaults = {
    controllerManager: true,
    workloads: true,
    audit: fleet.audit ?? false,
    users: fleet.users ?? [],
  }
  return typeof c === "string" ? { name: c, ...defaults } : { ...defaults, ...c }
}

/** Starts etcd and every cluster; resolves once each apiserver is ready and each fake Node is Ready. */
export const startFleet = async (options: FleetOptions): Promise<LocalFleet> => {
  const log = options.log ?? ((line: string) => process.stderr.write(`[fleet] ${line}\n`))
  const specs = options.clusters.map((c) => normalize(c, options))
  const names = new Set<string>()
  const label = /^[a-z0-9]([-a-z0-9]{0,40}[a-z0-9])?$/
  for (const s of specs) {
    if (!label.test(s.name) || names.has(s.name)) {
      throw new Error(`cluster names must be distinct DNS labels: ${JSON.stringify(s.name)}`)
    }
    names.add(s.name)
    if (s.users.some((u) => !label.test(u) || u === adminUser) || new Set(s.users).size !== s.users.length) {
      throw new Error(
        `${s.name}: users must be distinct DNS labels other than ${adminUser}: ${JSON.stringify(s.users)}`,
      )
    }
  }
  const binDir = await ensureBinaries()
  const bin = (b: string) => join(binDir, b)
  const base = options.baseDir ?? (existsSync("/dev/shm") ? "/dev/shm" : tmpdir())
  const runDir = mkdtempSync(join(base, "fleetcheck-"))
  mkdirSync(join(runDir, "logs"))
  const procs = makeProcessRegistry(runDir)
  const t0 = Date.now()
  let stopped = false
  // Processes the caller spawned are clients of the clusters: they stop first.
  const spawned: ManagedProcess[] = []
  const executors: AgentExecutor[] = []
  const stop = async () => {
    if (stopped) return
    stopped = true
    await Promise.all(spawned.map((p) => p.stop()))
    await Promise.all(executors.map((e) => e.stop()))
    await procs.stopAll()
    procs.disarmWatchdog()
    rmSync(runDir, { recursive: true, force: true })
  }
  try {
    // One service-account signing key for the fleet (tokens stay per-cluster through the issuer).
    const { privateKey, publicKey } = generateKeyPairSync("ec", { namedCurve: "prime256v1" })
    writeFileSync(join(runDir, "sa.key"), privateKey.export({ type: "sec1", format: "pem" }))
    writeFileSync(join(runDir, "sa.pub"), publicKey.export({ type: "spki", format: "pem" }))

    const etcd = await startEtcd(procs, bin("etcd"), runDir, log)
    const clusters: LocalCluster[] = []
    // Staggered starts: several apiservers bootstrapping at once on 2 cores starve each other.
    const started = specs.map((spec, i) =>
      sleep(i * 400).then(() => startCluster(procs, bin, runDir, etcd, spec, log)),
    )
    for (const c of await Promise.all(started)) clusters.push(c)
    // Where pods run, restore agent pods run too: as host processes (agent-executor.ts).
    const toolPath = restoreToolPath(binDir)
    for (const [i, c] of clusters.entries()) {
      if (!specs[i]?.workloads) continue
      executors.push(
        startAgentExecutor({
          cluster: c.name,
          api: (method, path, body, contentType) =>
            apiRequest(c.server, c.caPem, c.adminToken, method, path, body, contentType),
          procs,
          runDir,
          toolPath,
          log,
        }),
      )
    }
    log(`fleet of ${clusters.length} ready in ${((Date.now() - t0) / 1000).toFixed(1)}s (run dir ${runDir})`)
    const byName = new Map(clusters.map((c) => [c.name, c]))
    return {
      clusters,
      cluster: (name) => {
        const c = byName.get(name)
        if (!c) throw new Error(`no cluster ${name} in this fleet`)
        return c
      },
      binDir,
      runDir,
      etcdUrl: etcd,
      spawn: (name, command, args, spawnOptions) => {
        if (stopped) throw new Error(`spawn ${name}: the fleet is stopped`)
        if (existsSync(join(runDir, "logs", `${name}.log`))) throw new Error(`spawn ${name}: name taken`)
        const p = procs.start(name, command, args, spawnOptions)
        spawned.push(p)
        return p
      },
      stop,
    }
  } catch (e) {
    await stop()
    throw e
  }
}

const startEtcd = async (
  procs: ProcessRegistry,
  etcdBin: string,
  runDir: string,
  log: (l: string) => void,
) => {
  const clientPort = await freePort()
  const peerPort = await freePort()
  const url = `http://127.0.0.1:${clientPort}`
  const peer = `http://127.0.0.1:${peerPort}`
  const p = procs.start("etcd", etcdBin, [
    "--name=fleet",
    `--data-dir=${join(runDir, "etcd")}`,
    `--listen-client-urls=${url}`,
    `--advertise-client-urls=${url}`,
    `--listen-peer-urls=${peer}`,
    `--initial-advertise-peer-urls=${peer}`,
    `--initial-cluster=fleet=${peer}`,
    "--unsafe-no-fsync=true",
    "--log-level=warn",
    "--quota-backend-bytes=4294967296",
  ])
  await waitFor(
    "etcd health",
    20_000,
    async () => {
      const res = await fetch(`${url}/health`)
      return res.ok && ((await res.json()) as { health?: string }).health === "true"
    },
    p,
  )
  log(`etcd ready on ${url}`)
  return url
}

const startCluster = async (
  procs: ProcessRegistry,
  bin: (b: string) => string,
  runDir: string,
  etcdUrl: string,
  spec: ClusterSpec,
  log: (l: string) => void,
): Promise<LocalCluster> => {
  const dir = join(runDir, spec.name)
  mkdirSync(join(dir, "pki"), { recursive: true })
  const adminToken = randomBytes(24).toString("hex")
  const userTokens = spec.users.map((name) => ({ name, token: randomBytes(24).toString("hex") }))
  writeFileSync(
    join(dir, "tokens.csv"),
    [{ name: adminUser, token: adminToken }, ...userTokens]
      .map((u) => `${u.token},${u.name},${u.name},"system:masters"\n`)
      .join(""),
  )
  const port = await freePort()
  const server = `https://127.0.0.1:${port}`
  const auditLogPath = spec.audit ? join(dir, "audit.log") : undefined
  if (auditLogPath)
    writeFileSync(join(dir, "audit-policy.yaml"), spec.audit === "reads" ? auditPolicyWithReads : auditPolicy)
  const apiserverArgs = [
    `--etcd-servers=${etcdUrl}`,
    `--etcd-prefix=/${spec.name}/registry`,
    "--bind-address=127.0.0.1",
    "--advertise-address=127.0.0.1",
    `--secure-port=${port}`,
    `--cert-dir=${join(dir, "pki")}`,
    "--service-account-issuer=https://kubernetes.default.svc",
    `--service-account-key-file=${join(runDir, "sa.pub")}`,
    `--service-account-signing-key-file=${join(runDir, "sa.key")}`,
    "--service-cluster-ip-range=10.96.0.0/24",
    "--authorization-mode=RBAC",
    `--token-auth-file=${join(dir, "tokens.csv")}`,
    ...(spec.clientCaFile ? [`--client-ca-file=${spec.clientCaFile}`] : []),
    "--allow-privileged=true",
    // ServiceAccount: pods would wait for the default SA; TaintNodesByCondition: the fake node would
    // stay tainted not-ready without the node-lifecycle controller.
    "--disable-admission-plugins=ServiceAccount,TaintNodesByCondition",
    "--endpoint-reconciler-type=none",
    "--profiling=false",
    "--v=0",
    ...(auditLogPath ? auditFlags(join(dir, "audit-policy.yaml"), auditLogPath) : []),
  ]
  let apiserver = procs.start(`${spec.name}-kube-apiserver`, bin("kube-apiserver"), apiserverArgs)
  const caFile = join(dir, "pki", "apiserver.crt")
  let caPem = ""
  const api = (method: string, path: string, body?: unknown) =>
    apiRequest(server, caPem, adminToken, method, path, body)
  const waitReady = async (proc: ManagedProcess) => {
    await waitFor(
      `${spec.name} apiserver certificate`,
      30_000,
      async () => {
        if (!existsSync(caFile)) return false
        caPem = readFileSync(caFile, "utf8")
        return caPem.includes("END CERTIFICATE")
      },
      proc,
    )
    await waitFor(
      `${spec.name} /readyz`,
      90_000,
      async () => (await api("GET", "/readyz")).status === 200,
      proc,
    )
    await waitFor(
      `${spec.name} namespaces default and kube-system`,
      30_000,
      async () =>
        (await api("GET", "/api/v1/namespaces/default")).status === 200 &&
        (await api("GET", "/api/v1/namespaces/kube-system")).status === 200,
      proc,
    )
  }
  await waitReady(apiserver)
  log(`${spec.name}: kube-apiserver ready on ${server}`)
  const kubeconfig = renderKubeconfig(spec.name, server, caPem, adminToken)
  const kubeconfigPath = join(dir, "admin.kubeconfig")
  writeFileSync(kubeconfigPath, kubeconfig, { mode: 0o600 })
  const users: Record<string, ClusterUser> = {}
  for (const u of userTokens) {
    const userKubeconfig = renderKubeconfig(spec.name, server, caPem, u.token, u.name)
    const userKubeconfigPath = join(dir, `${u.name}.kubeconfig`)
    writeFileSync(userKubeconfigPath, userKubeconfig, { mode: 0o600 })
    users[u.name] = { ...u, kubeconfig: userKubeconfig, kubeconfigPath: userKubeconfigPath }
  }
  const companions: ManagedProcess[] = []

  if (spec.controllerManager) {
    companions.push(
      procs.start(`${spec.name}-kube-controller-manager`, bin("kube-controller-manager"), [
        `--kubeconfig=${kubeconfigPath}`,
        "--leader-elect=false",
        "--secure-port=0",
        "--controllers=job-controller,deployment-controller,replicaset-controller,garbage-collector-controller,namespace-controller,serviceaccount-controller,serviceaccount-token-controller",
        `--root-ca-file=${caFile}`,
        `--service-account-private-key-file=${join(runDir, "sa.key")}`,
        "--use-service-account-credentials=false",
        "--kube-api-qps=100",
        "--kube-api-burst=200",
        "--concurrent-job-syncs=10",
        "--v=0",
      ]),
    )
  }
  if (spec.workloads) {
    companions.push(
      procs.start(`${spec.name}-kube-scheduler`, bin("kube-scheduler"), [
        `--kubeconfig=${kubeconfigPath}`,
        "--leader-elect=false",
        "--secure-port=0",
        "--kube-api-qps=100",
        "--kube-api-burst=200",
        "--v=0",
      ]),
      procs.start(`${spec.name}-kwok`, bin("kwok"), [
        `--kubeconfig=${kubeconfigPath}`,
        `--config=${stagesFile}`,
        "--manage-all-nodes=true",
        "--cidr=10.244.0.0/16",
        "--node-ip=10.96.100.1",
        "--server-address=",
      ]),
    )
    const node = {
      apiVersion: "v1",
      kind: "Node",
      metadata: {
        name: "kwok-node-0",
        annotations: { "node.alpha.kubernetes.io/ttl": "0", "kwok.x-k8s.io/node": "fake" },
        labels: { "kubernetes.io/hostname": "kwok-node-0", "kubernetes.io/os": "linux", type: "kwok" },
      },
      status: {
        allocatable: { cpu: "64", memory: "256Gi", pods: "1000", "ephemeral-storage": "1Ti" },
        capacity: { cpu: "64", memory: "256Gi", pods: "1000", "ephemeral-storage": "1Ti" },
      },
    }
    const created = await api("POST", "/api/v1/nodes", node)
    if (created.status !== 201)
      throw new Error(`${spec.name}: creating the fake node: ${JSON.stringify(created.body)}`)
    await waitFor(`${spec.name} kwok node Ready`, 60_000, async () => {
      const n = await api("GET", "/api/v1/nodes/kwok-node-0")
      const ready = (n.body?.status?.conditions ?? []).find((c: { type: string }) => c.type === "Ready")
      const dead = companions.find((p) => p.hasExited())
      if (dead) throw new Error(`${dead.name} exited; see ${dead.logFile}:\n${tail(dead.logFile)}`)
      return ready?.status === "True"
    })
  }
  if (spec.controllerManager) {
    // The service-account controller creating "default" shows the controller-manager is working.
    await waitFor(`${spec.name} kube-controller-manager`, 60_000, async () => {
      const dead = companions.find((p) => p.hasExited())
      if (dead) throw new Error(`${dead.name} exited; see ${dead.logFile}:\n${tail(dead.logFile)}`)
      return (await api("GET", "/api/v1/namespaces/default/serviceaccounts/default")).status === 200
    })
  }
  log(`${spec.name}: ready${spec.workloads ? " (controller-manager, scheduler, kwok)" : ""}`)

  const kubectl = (args: ReadonlyArray<string>, stdin?: string) =>
    new Promise<KubectlResult>((resolve) => {
      const child = execFile(
        bin("kubectl"),
        [`--kubeconfig=${kubeconfigPath}`, ...args],
        { timeout: 120_000, maxBuffer: 32 * 1024 * 1024 },
        (error, stdout, stderr) => {
          const code = error ? (typeof error.code === "number" ? error.code : 1) : 0
          resolve({ code, stdout, stderr })
        },
      )
      if (stdin !== undefined) child.stdin?.end(stdin)
    })

  return {
    name: spec.name,
    server,
    get caPem() {
      return caPem
    },
    adminToken,
    kubeconfigPath,
    kubeconfig,
    dir,
    api,
    kubectl,
    stopApiServer: () => apiserver.stop(),
    startApiServer: async () => {
      if (!apiserver.hasExited()) return
      apiserver = procs.start(`${spec.name}-kube-apiserver`, bin("kube-apiserver"), apiserverArgs)
      await waitReady(apiserver)
    },
    freezeApiServer: () => apiserver.freeze(),
    thawApiServer: () => apiserver.thaw(),
    processes: () => [apiserver, ...companions],
    users,
    auditLogPath,
    auditEvents: () => {
      if (!auditLogPath) throw new Error(`${spec.name}: started without the audit option`)
      return readAuditLog(auditLogPath)
    },
  }
}
