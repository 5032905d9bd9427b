// The controller-runtime reference (test/bench/crreference, Go): built once per source version into
// ${FLEETCHECK_CACHE:-~/.cache/fleetcheck}/bin/crreference-<hash of its go.mod, go.sum and .go files>/,
// outside the clone, as clusters/build.sh does for the Kubernetes binaries; a warm run only hashes.
// Bench only: nothing in the test suite imports this.
import { spawn } from "node:child_process"
import { createHash } from "node:crypto"
import { existsSync, mkdirSync, readdirSync, readFileSync, renameSync, rmSync } from "node:fs"
import { homedir } from "node:os"
import { join } from "node:path"

const source = new URL("./crreference/", import.meta.url).pathname

const run = (cmd: string, args: string[], env: NodeJS.ProcessEnv, cwd?: string) =>
  new Promise<string>((resolve, reject) => {
    const child = spawn(cmd, args, { cwd, env, stdio: ["ignore", "pipe", "inherit"] })
    let out = ""
    child.stdout.on("data", (d: Buffer) => {
      out += d.toString()
    })
    child.once("error", reject)
    child.once("exit", (code) =>
      code === 0 ? resolve(out) : reject(new Error(`${cmd} ${args.join(" ")} exited with ${code}`)),
    )
  })

/** The reference binary's path, built first when this source version has none yet. */
export const goReference = async (log: (line: string) => void): Promise<string> => {
  const files = readdirSync(source)
    .filter((f) => f === "go.mod" || f === "go.sum" || f.endsWith(".go"))
    .sort()
  const hash = createHash("sha256")
  for (const f of files)
    hash
      .update(f)
      .update("\0")
      .update(readFileSync(join(source, f)))
  const cache = process.env.FLEETCHECK_CACHE ?? join(homedir(), ".cache", "fleetcheck")
  const dir = join(cache, "bin", `crreference-${hash.digest("hex").slice(0, 10)}`)
  const binary = join(dir, "crreference")
  if (existsSync(binary)) return binary
  log(`building the controller-runtime reference into ${dir} (a cold build takes minutes)`)
  const tmp = `${dir}.tmp`
  mkdirSync(tmp, { recursive: true })
  await run(
    "go",
    ["build", "-trimpath", "-o", join(tmp, "crreference"), "."],
    { ...process.env, GOTOOLCHAIN: "local", CGO_ENABLED: "0", GOFLAGS: "-mod=readonly" },
    source,
  )
  rmSync(dir, { recursive: true, force: true })
  renameSync(tmp, dir)
  return binary
}

export interface GoReferenceResult {
  readonly checks: number
  readonly reconciles: number
  readonly wallSeconds: number
  readonly cpuSeconds: number
  readonly writes: number
  readonly undecided: number
  readonly errors: number
  readonly gomaxprocs: number
  readonly workers: number
  readonly hashOnce: boolean
  readonly deepEqual: boolean
  /** Go heap (HeapAlloc) after a collection, with every check and Job cached. */
  readonly heapBytes: number
}

/** Runs the reference against the cluster of `kubeconfigPath`: every check of `namespace`, `rounds` times. */
export const runGoReference = async (
  binary: string,
  options: {
    kubeconfigPath: string
    namespace: string
    rounds: number
    workers: number
    hashOnce: boolean
    /** The first version's status comparison (equality.Semantic.DeepEqual of the whole status). */
    deepEqual: boolean
    /** A pprof CPU profile of the rounds is written here. */
    cpuProfile?: string
  },
): Promise<GoReferenceResult> => {
  const out = await run(
    binary,
    [
      "-namespace",
      options.namespace,
      "-rounds",
      String(options.rounds),
      "-workers",
      String(options.workers),
      ...(options.hashOnce ? ["-hash-once"] : []),
      ...(options.deepEqual ? ["-deep-equal"] : []),
      ...(options.cpuProfile ? ["-cpuprofile", options.cpuProfile] : []),
    ],
    // One core, as the figures were taken (the JavaScript engine is one thread).
    { ...process.env, KUBECONFIG: options.kubeconfigPath, GOMAXPROCS: "1" },
  )
  return JSON.parse(out.trim().split("\n").at(-1) ?? "{}") as GoReferenceResult
}
