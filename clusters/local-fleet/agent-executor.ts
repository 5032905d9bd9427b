// Runs the restore agent's pods of a local cluster as host processes (SPEC §12). kwok pods never run
// containers and no image can be pulled here, so for pods labelled fleetcheck.io/agent=true this does
// what a kubelet would: resolve the container's env (values, Secret and ConfigMap keys, envFrom,
// field and resource refs), lay out its volumes (downward API, emptyDir, Secret, ConfigMap) as host
// directories, run `fleetcheck <args>` with the container's paths mapped onto them, and write the
// exit code and termination message into the pod's status. Only agent containers whose args start
// with "agent" run; nothing else from a pod spec is executed. kwok-stages.yaml leaves these pods
// Running for it.
import {
  chmodSync,
  closeSync,
  existsSync,
  mkdirSync,
  openSync,
  readdirSync,
  readSync,
  writeFileSync,
} from "node:fs"
import { join } from "node:path"
import type { ManagedProcess, ProcessRegistry } from "./processes.ts"

type Api = (
  method: string,
  path: string,
  body?: unknown,
  contentType?: string,
) => Promise<{ status: number; body: any }>

export interface AgentExecutorOptions {
  readonly cluster: string
  readonly api: Api
  readonly procs: ProcessRegistry
  readonly runDir: string
  /** The fleetcheck CLI (default bin/fleetcheck of this clone). */
  readonly command?: string
  /** Directories put before PATH: where the agent's tools are (etcd, etcdutl, postgres). */
  readonly toolPath: ReadonlyArray<string>
  readonly pollMs?: number
  readonly log: (line: string) => void
}

export interface AgentExecutor {
  readonly stop: () => Promise<void>
}

const fleetcheckCli = new URL("../../bin/fleetcheck", import.meta.url).pathname

/** PATH entries for the agent's tools: the fleet's binaries (etcd, etcdutl) and PostgreSQL's server. */
export const restoreToolPath = (binDir: string): string[] => {
  const pg = "/usr/lib/postgresql"
  const versions = existsSync(pg)
    ? readdirSync(pg)
        .filter((v) => /^\d+$/.test(v) && existsSync(join(pg, v, "bin", "postgres")))
        .sort((a, b) => Number(b) - Number(a))
    : []
  return [binDir, ...versions.slice(0, 1).map((v) => join(pg, v, "bin"))]
}

/** Kubernetes quantities the agent reads (ephemeral-storage, memory): to a whole number of bytes. */
export const quantityBytes = (q: string): number | undefined => {
  const m = /^([0-9.]+)([KMGTPE]i?|[mk]?)$/.exec(q.trim())
  if (!m) return undefined
  const n = Number(m[1])
  const unit = m[2] ?? ""
  const pow: Record<string, number> = {
    "": 1,
    k: 1e3,
    K: 1e3,
    M: 1e6,
    G: 1e9,
    T: 1e12,
    P: 1e15,
    E: 1e18,
    Ki: 2 ** 10,
    Mi: 2 ** 20,
    Gi: 2 ** 30,
    Ti: 2 ** 40,
    Pi: 2 ** 50,
    Ei: 2 ** 60,
    m: 1e-3,
  }
  const f = pow[unit]
  return f === undefined || !Number.isFinite(n) ? undefined : Math.ceil(n * f)
}

class PodRefused extends Error {}

const b64 = (s: string) => Buffer.from(s, "base64").toString("utf8")

export const startAgentExecutor = (o: AgentExecutorOptions): AgentExecutor => {
  const running = new Map<string, { proc?: ManagedProcess; ns: string; name: string }>()
  const done = new Set<string>()
  let stopped = false
  const agentsDir = join(o.runDir, "agents")
  mkdirSync(agentsDir, { recursive: true, mode: 0o755 })
  // The agent drops to an unprivileged user for postgres: it must reach its directories.
  chmodSync(o.runDir, 0o711)
  chmodSync(agentsDir, 0o711)

  const readKeyed = async (kind: "secrets" | "configmaps", ns: string, name: string) => {
    const r = await o.api("GET", `/api/v1/namespaces/${ns}/${kind}/${name}`)
    if (r.status === 404) return undefined
    if (r.status !== 200) throw new Error(`GET ${kind} ${ns}/${name}: ${r.status}`)
    const data: Record<string, string> = {}
    for (const [k, v] of Object.entries<string>(r.body?.data ?? {})) data[k] = kind === "secrets" ? b64(v) : v
    return data
  }

  const fieldValue = (pod: any, path: string): string => {
    const ann = /^metadata\.annotations\['(.+)'\]$/.exec(path)
    if (ann) return pod.metadata?.annotations?.[ann[1] as string] ?? ""
    const lab = /^metadata\.labels\['(.+)'\]$/.exec(path)
    if (lab) return pod.metadata?.labels?.[lab[1] as string] ?? ""
    const simple: Record<string, string | undefined> = {
      "metadata.name": pod.metadata?.name,
      "metadata.namespace": pod.metadata?.namespace,
      "metadata.uid": pod.metadata?.uid,
      "spec.nodeName": pod.spec?.nodeName,
      "spec.serviceAccountName": pod.spec?.serviceAccountName,
      "status.podIP": pod.status?.podIP,
      "status.hostIP": pod.status?.hostIP,
    }
    if (!(path in simple)) throw new PodRefused(`fieldRef ${path} is not supported by the local executor`)
    return simple[path] ?? ""
  }

  const resourceValue = (container: any, ref: any): string => {
    const [kind, resource] = String(ref.resource ?? "").split(".", 2) as [string, string]
    const q = container.resources?.[kind]?.[resource]
    if (q === undefined) return ""
    const bytes = quantityBytes(String(q))
    const divisor = quantityBytes(String(ref.divisor ?? "1")) ?? 1
    return bytes === undefined ? "" : String(Math.ceil(bytes / divisor))
  }

  const prepare = async (pod: any, dir: string) => {
    const ns: string = pod.metadata.namespace
    const container = pod.spec?.containers?.[0]
    if (pod.spec?.containers?.length !== 1 || pod.spec?.initContainers?.length)
      throw new PodRefused("agent pods have exactly one container and no init containers")
    const args: string[] = container.args ?? []
    if (container.command !== undefined || args[0] !== "agent")
      throw new PodRefused("the local executor runs only `fleetcheck agent ...` containers")

    // Volumes as host directories.
    const volumes = new Map<string, string>()
    for (const v of pod.spec.volumes ?? []) {
      const host = join(dir, "volumes", v.name)
      mkdirSync(host, { recursive: true, mode: 0o755 })
      if (v.emptyDir) {
        chmodSync(host, 0o777) // an emptyDir is writable by the pod's user
      } else if (v.downwardAPI) {
        for (const item of v.downwardAPI.items ?? [])
          writeFileSync(join(host, item.path), fieldValue(pod, item.fieldRef?.fieldPath ?? ""), {
            mode: 0o644,
          })
      } else if (v.secret || v.configMap) {
        const kind = v.secret ? "secrets" : "configmaps"
        const name = v.secret ? v.secret.secretName : v.configMap.name
        const data = await readKeyed(kind, ns, name)
        if (!data && !(v.secret ?? v.configMap).optional) throw new PodRefused(`${kind} ${name} not found`)
        for (const [k, val] of Object.entries(data ?? {})) writeFileSync(join(host, k), val, { mode: 0o644 })
      } else {
        throw new PodRefused(
          `volume ${v.name}: only emptyDir, downwardAPI, secret and configMap are supported`,
        )
      }
      volumes.set(v.name, host)
    }
    const mounts: Array<[string, string]> = (container.volumeMounts ?? []).map((m: any) => {
      const host = volumes.get(m.name)
      if (!host || m.subPath) throw new PodRefused(`volumeMount ${m.name} cannot be mapped`)
      return [m.mountPath.replace(/\/+$/, ""), host] as [string, string]
    })
    const terminationPath: string = container.terminationMessagePath ?? "/dev/termination-log"
    const terminationHost = join(dir, "termination-log")
    writeFileSync(terminationHost, "", { mode: 0o666 })
    mounts.sort((a, b) => b[0].length - a[0].length)
    const remap = (value: string) => {
      if (value === terminationPath) return terminationHost
      for (const [path, host] of mounts) {
        if (value === path) return host
        if (value.startsWith(`${path}/`)) return host + value.slice(path.length)
      }
      return value
    }

    // Environment: envFrom, then env (later wins, as in a kubelet).
    const env: Record<string, string> = {}
    for (const from of container.envFrom ?? []) {
      const ref = from.secretRef ?? from.configMapRef
      const data = await readKeyed(from.secretRef ? "secrets" : "configmaps", ns, ref.name)
      if (!data && !ref.optional) throw new PodRefused(`envFrom ${ref.name} not found`)
      for (const [k, v] of Object.entries(data ?? {})) env[`${from.prefix ?? ""}${k}`] = v
    }
    for (const e of container.env ?? []) {
      const from = e.valueFrom
      if (!from) env[e.name] = remap(e.value ?? "")
      else if (from.secretKeyRef || from.configMapKeyRef) {
        const ref = from.secretKeyRef ?? from.configMapKeyRef
        const data = await readKeyed(from.secretKeyRef ? "secrets" : "configmaps", ns, ref.name)
        const v = data?.[ref.key]
        if (v === undefined && !ref.optional)
          throw new PodRefused(`${e.name}: ${ref.name}/${ref.key} not found`)
        if (v !== undefined) env[e.name] = v
      } else if (from.fieldRef) env[e.name] = fieldValue(pod, from.fieldRef.fieldPath)
      else if (from.resourceFieldRef) env[e.name] = resourceValue(container, from.resourceFieldRef)
    }
    const home = join(dir, "home")
    mkdirSync(home, { recursive: true, mode: 0o777 })
    env.PATH = [...o.toolPath, process.env.PATH ?? "/usr/bin:/bin"].join(":")
    // The image's defaults, unless the pod sets its own (the agent's are under scratch).
    env.HOME ??= home
    env.TMPDIR ??= home
    return { args, env, terminationHost, policy: container.terminationMessagePolicy as string | undefined }
  }

  const finish = async (pod: any, exitCode: number, message: string, startedAt: string) => {
    const now = new Date().toISOString().replace(/\.\d{3}Z$/, "Z")
    const container = pod.spec.containers[0]
    const status = {
      status: {
        phase: exitCode === 0 ? "Succeeded" : "Failed",
        containerStatuses: [
          {
            name: container.name,
            image: container.image,
            imageID: "",
            ready: false,
            started: false,
            restartCount: 0,
            state: {
              terminated: {
                exitCode,
                reason: exitCode === 0 ? "Completed" : "Error",
                message,
                startedAt,
                finishedAt: now,
              },
            },
          },
        ],
      },
    }
    const r = await o.api(
      "PATCH",
      `/api/v1/namespaces/${pod.metadata.namespace}/pods/${pod.metadata.name}/status`,
      status,
      "application/merge-patch+json",
    )
    if (r.status !== 200 && r.status !== 404)
      o.log(
        `${o.cluster}: agent pod ${pod.metadata.name}: status patch ${r.status} ${JSON.stringify(r.body).slice(0, 200)}`,
      )
  }

  const readBounded = (path: string, max = 4096): string => {
    if (!existsSync(path)) return ""
    const fd = openSync(path, "r")
    try {
      const buf = Buffer.alloc(max)
      const n = readSync(fd, buf, 0, max, 0)
      return buf.subarray(0, n).toString("utf8")
    } finally {
      closeSync(fd)
    }
  }

  const execute = async (pod: any) => {
    const key = pod.metadata.uid as string
    const startedAt = new Date().toISOString().replace(/\.\d{3}Z$/, "Z")
    const dir = join(agentsDir, `${o.cluster}.${pod.metadata.namespace}.${pod.metadata.name}`)
    mkdirSync(dir, { recursive: true, mode: 0o755 })
    try {
      const run = await prepare(pod, dir)
      if (stopped || !running.has(key)) return
      const proc = o.procs.start(
        `agent-${o.cluster}-${pod.metadata.namespace}-${pod.metadata.name}`,
        o.command ?? fleetcheckCli,
        run.args,
        {
          env: run.env,
        },
      )
      const entry = running.get(key)
      if (entry) entry.proc = proc
      const code = await proc.exited
      if (!running.has(key) || stopped) return // the pod was deleted (deadline, cleanup): nothing to write
      const exitCode = typeof code === "number" ? code : 137
      let message = readBounded(run.terminationHost)
      if (message === "" && exitCode !== 0 && run.policy === "FallbackToLogsOnError")
        message = readBounded(proc.logFile, 64 * 1024)
          .split("\n")
          .slice(-80)
          .join("\n")
          .slice(-2048)
      await finish(pod, exitCode, message, startedAt)
    } catch (e) {
      const message = e instanceof PodRefused ? e.message : `local executor: ${(e as Error).message}`
      o.log(`${o.cluster}: agent pod ${pod.metadata.namespace}/${pod.metadata.name}: ${message}`)
      await finish(pod, 128, message, startedAt).catch(() => undefined)
    } finally {
      running.delete(key)
      done.add(key)
    }
  }

  const poll = async () => {
    const r = await o.api("GET", "/api/v1/pods?labelSelector=fleetcheck.io%2Fagent%3Dtrue")
    if (r.status !== 200)
      throw new Error(`listing agent pods: ${r.status} ${JSON.stringify(r.body).slice(0, 300)}`)
    const seen = new Set<string>()
    for (const pod of r.body?.items ?? []) {
      const key = pod.metadata?.uid as string
      seen.add(key)
      const gone = pod.metadata?.deletionTimestamp !== undefined
      const entry = running.get(key)
      if (gone && entry) {
        running.delete(key)
        void entry.proc?.stop(2_000)
        continue
      }
      if (gone || entry || done.has(key) || pod.status?.phase !== "Running") continue
      running.set(key, { ns: pod.metadata.namespace, name: pod.metadata.name })
      void execute(pod)
    }
    for (const [key, entry] of running)
      if (!seen.has(key)) {
        running.delete(key)
        void entry.proc?.stop(2_000)
      }
    for (const key of done) if (!seen.has(key)) done.delete(key)
  }

  // A cluster a test stopped on purpose fails every poll: said once, polled more slowly, said again
  // when it answers.
  let failing: string | undefined
  const loop = (async () => {
    while (!stopped) {
      try {
        await poll()
        if (failing !== undefined) o.log(`${o.cluster}: agent executor: the API server answers again`)
        failing = undefined
      } catch (e) {
        const message = (e as Error).message
        if (message !== failing) o.log(`${o.cluster}: agent executor: ${message} (retrying every 2s)`)
        failing = message
      }
      await new Promise((r) => setTimeout(r, failing === undefined ? (o.pollMs ?? 300) : 2_000))
    }
  })()

  return {
    stop: async () => {
      stopped = true
      await loop
      await Promise.all([...running.values()].map((e) => e.proc?.stop(2_000)))
    },
  }
}
