// A Dockerfile, run without Docker (test/integration/deploy.test.ts), and the small process helpers
// it runs its steps with.
// Only the instructions this project's Dockerfile uses are modelled; any other fails loudly, so a
// change to the Dockerfile cannot silently stop being tested. Each stage gets its own root directory;
// absolute container paths map into it; stages run in parallel and COPY --from waits, as in BuildKit.
import { type ChildProcess, execFileSync, spawn } from "node:child_process"
import { cpSync, existsSync, lstatSync, mkdirSync, readFileSync, symlinkSync, unlinkSync } from "node:fs"
import { basename, dirname, join, posix, relative } from "node:path"

export interface Instruction {
  readonly op: string
  readonly args: string
  readonly line: number
}

export interface Stage {
  readonly name: string
  readonly image: string
  readonly steps: ReadonlyArray<Instruction>
}

export interface BuiltStage {
  readonly name: string
  readonly workdir: string
  readonly env: Record<string, string>
  readonly user: string | undefined
  readonly entrypoint: string[]
  readonly cmd: string[]
  readonly timings: Array<{ step: string; seconds: number }>
  readonly hostPath: (containerPath: string) => string
}

export const parseDockerfile = (text: string): Stage[] => {
  const instructions: Instruction[] = []
  let pending = ""
  let start = 0
  text.split("\n").forEach((raw, i) => {
    const line = raw.trimEnd()
    if (line.trimStart().startsWith("#") || (pending === "" && line.trim() === "")) return
    if (pending === "") start = i + 1
    if (line.endsWith("\\")) {
      pending += `${line.slice(0, -1)} `
      return
    }
    const full = pending + line
    pending = ""
    const m = /^\s*(\w+)\s+(.*)$/.exec(full)
    if (!m) throw new Error(`Dockerfile line ${start}: cannot parse ${JSON.stringify(full)}`)
    instructions.push({ op: m[1]!.toUpperCase(), args: m[2]!.trim(), line: start })
  })
  const stages: Array<{ name: string; image: string; steps: Instruction[] }> = []
  for (const ins of instructions) {
    if (ins.op === "FROM") {
      const m = /^(\S+)(?:\s+AS\s+(\S+))?$/i.exec(ins.args)
      if (!m) throw new Error(`Dockerfile line ${ins.line}: FROM ${ins.args}`)
      stages.push({ name: m[2] ?? String(stages.length), image: m[1]!, steps: [] })
    } else {
      const stage = stages.at(-1)
      if (!stage) throw new Error(`Dockerfile line ${ins.line}: ${ins.op} before FROM`)
      stage.steps.push(ins)
    }
  }
  return stages
}

/** .dockerignore semantics: the last pattern matching the path or one of its parents decides. */
export const dockerIgnored = (patterns: ReadonlyArray<string>, path: string): boolean => {
  const toRegExp = (p: string) =>
    new RegExp(
      `^${p
        .replace(/[.+^${}()|[\]\\]/g, "\\$&")
        .replace(/\*\*/g, "\u0000")
        .replace(/\*/g, "[^/]*")
        .replace(/\?/g, "[^/]")
        .replace(/\u0000/g, ".*")}$`,
    )
  const parts = path.split("/")
  const prefixes = parts.map((_, i) => parts.slice(0, i + 1).join("/"))
  let ignored = false
  for (const raw of patterns) {
    const negated = raw.startsWith("!")
    const re = toRegExp(posix.normalize((negated ? raw.slice(1) : raw).replace(/^\/+/, "")))
    if (prefixes.some((p) => re.test(p))) ignored = !negated
  }
  return ignored
}

const readDockerignore = (context: string) =>
  existsSync(join(context, ".dockerignore"))
    ? readFileSync(join(context, ".dockerignore"), "utf8")
        .split("\n")
        .map((l) => l.trim())
        .filter((l) => l !== "" && !l.startsWith("#"))
    : []

export const runToEnd = (
  argv: ReadonlyArray<string>,
  extra: ReadonlyArray<string>,
  cwd: string,
  env: Record<string, string>,
  timeoutMs: number,
): Promise<{ code: number | null; stdout: string; stderr: string }> =>
  new Promise((resolve, reject) => {
    const child = spawn(argv[0]!, [...argv.slice(1), ...extra], {
      cwd,
      env,
      stdio: ["ignore", "pipe", "pipe"],
    })
    const out = collect(child)
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs)
    child.once("error", reject)
    child.once("close", (code) => {
      clearTimeout(timer)
      resolve({ code, stdout: out.stdout(), stderr: out.stderr() })
    })
  })

export const collect = (child: ChildProcess) => {
  let stdout = ""
  let stderr = ""
  child.stdout?.on("data", (d: Buffer) => {
    stdout += d.toString()
  })
  child.stderr?.on("data", (d: Buffer) => {
    stderr += d.toString()
  })
  return { stdout: () => stdout, stderr: () => stderr }
}

export const tryJson = (line: string): any => {
  try {
    return JSON.parse(line)
  } catch {
    return undefined
  }
}

/** `apt-get update && apt-get install -y --no-install-recommends P... && rm -rf /var/lib/apt/lists/*`. */
const aptInstall = (command: string): string[] | undefined => {
  const m =
    /^apt-get update && apt-get install -y --no-install-recommends ([a-z0-9][a-z0-9.+\- ]*) && rm -rf \/var\/lib\/apt\/lists\/\*$/.exec(
      command.trim(),
    )
  return m ? m[1]!.trim().split(/\s+/) : undefined
}

const debianPackageInstalled = (pkg: string): boolean => {
  try {
    return /^Status: install ok installed$/m.test(
      execFileSync("dpkg-query", ["-s", pkg], { encoding: "utf8" }),
    )
  } catch {
    return false
  }
}

/** The host Go's caches stand for BuildKit's persistent cache mounts, as the host's npm cache does. */
const goCaches = (): Record<string, string> => {
  const [modCache, buildCache] = execFileSync("go", ["env", "GOMODCACHE", "GOCACHE"], { encoding: "utf8" })
    .trim()
    .split("\n")
  return { "/go/pkg/mod": modCache!, "/root/.cache/go-build": buildCache! }
}

/** What a base image's own ENV gives its RUN steps: golang's GOPATH and its Go on PATH (the host's). */
const baseImageEnv = (image: string, hostPath: (p: string) => string): Record<string, string> => {
  if (!image.startsWith("golang:")) return {}
  const goBin = join(execFileSync("go", ["env", "GOROOT"], { encoding: "utf8" }).trim(), "bin")
  return {
    GOPATH: hostPath("/go"),
    PATH: `${goBin}:/usr/local/bin:/usr/bin:/bin`,
    ...Object.fromEntries(
      Object.entries(process.env).filter(
        ([k, v]) => v !== undefined && /^GO(PROXY|SUMDB|NOSUMDB|PRIVATE|FLAGS)$/.test(k),
      ),
    ),
  } as Record<string, string>
}

export const buildStages = async (
  stages: ReadonlyArray<Stage>,
  options: { readonly context: string; readonly work: string; readonly npmCache: string },
): Promise<BuiltStage[]> => {
  const ignore = readDockerignore(options.context)
  let caches: Record<string, string> | undefined
  const cacheDirs = () => {
    caches ??= { "/root/.npm": options.npmCache, ...goCaches() }
    return caches
  }
  const results = new Map<string, Promise<BuiltStage>>()
  // The builder's network settings, as Docker passes proxies (build args) and a builder its npm config:
  // nothing else of this environment leaks into the steps.
  const networkEnv = Object.fromEntries(
    Object.entries(process.env).filter(
      ([k, v]) =>
        v !== undefined &&
        (/^(https?|no)_proxy$/i.test(k) ||
          k === "NODE_EXTRA_CA_CERTS" ||
          /^npm_config_(registry|cafile|ca|proxy|https_proxy|noproxy|strict_ssl)$/i.test(k)),
    ),
  ) as Record<string, string>

  const buildStage = async (stage: Stage): Promise<BuiltStage> => {
    await Promise.resolve()
    const root = join(options.work, stage.name)
    mkdirSync(join(root, "root"), { recursive: true })
    const hostPath = (p: string) => join(root, p)
    let workdir = "/"
    const env: Record<string, string> = {}
    let user: string | undefined
    let entrypoint: string[] = []
    let cmd: string[] = []
    const timings: Array<{ step: string; seconds: number }> = []
    const at = (ins: Instruction) => `Dockerfile line ${ins.line} (${ins.op} ${ins.args})`

    for (const ins of stage.steps) {
      const t0 = Date.now()
      switch (ins.op) {
        case "WORKDIR":
          workdir = posix.resolve(workdir, ins.args)
          mkdirSync(hostPath(workdir), { recursive: true })
          break
        case "ENV":
          for (const pair of ins.args.split(/\s+/)) {
            const m = /^([A-Za-z_][A-Za-z0-9_]*)=([^"'$]*)$/.exec(pair)
            if (!m) throw new Error(`${at(ins)}: only unquoted KEY=value pairs are modelled`)
            env[m[1]!] = m[2]!
          }
          break
        case "COPY": {
          const words = ins.args.split(/\s+/)
          const flags = words.filter((w) => w.startsWith("--"))
          const [dest, ...sourcesReversed] = words.filter((w) => !w.startsWith("--")).reverse()
          const sources = sourcesReversed.reverse()
          const from = flags.find((f) => f.startsWith("--from="))?.slice("--from=".length)
          if (flags.some((f) => !f.startsWith("--from=")) || !dest || sources.length === 0) {
            throw new Error(`${at(ins)}: only COPY [--from=stage] src... dest is modelled`)
          }
          const target = posix.resolve(workdir, dest)
          const intoDir = dest.endsWith("/") || sources.length > 1
          for (const src of sources) {
            let hostSrc: string
            let filter: (p: string) => boolean = () => true
            if (from !== undefined) {
              const other = results.get(from)
              if (!other) throw new Error(`${at(ins)}: no stage ${from}`)
              hostSrc = (await other).hostPath(posix.resolve("/", src))
            } else {
              if (dockerIgnored(ignore, posix.normalize(src))) {
                throw new Error(`${at(ins)}: ${src} is excluded by .dockerignore, so docker build would fail`)
              }
              hostSrc = join(options.context, src)
              filter = (p) => {
                const rel = relative(options.context, p)
                return rel === "" || !dockerIgnored(ignore, rel)
              }
            }
            if (!existsSync(hostSrc)) throw new Error(`${at(ins)}: ${src} does not exist`)
            const isDir = lstatSync(hostSrc).isDirectory()
            const hostDest = hostPath(intoDir && !isDir ? posix.join(target, basename(src)) : target)
            mkdirSync(isDir ? hostDest : dirname(hostDest), { recursive: true })
            cpSync(hostSrc, hostDest, { recursive: true, filter })
          }
          break
        }
        case "RUN": {
          const words = ins.args.split(/\s+/)
          const mounts = words.filter((w) => w.startsWith("--mount="))
          const command = ins.args.replace(/--mount=\S+\s*/g, "")
          if (command.startsWith("[")) throw new Error(`${at(ins)}: exec-form RUN is not modelled`)
          const apt = aptInstall(command)
          if (apt) {
            // Installing into the host is no image build: the Debian packages must be installed here
            // already (bin/ensure-deps.sh does), which is what the steps after this one rely on.
            const missing = apt.filter((p) => !debianPackageInstalled(p))
            if (missing.length > 0)
              throw new Error(`${at(ins)}: ${missing.join(", ")} not installed on this Debian host`)
            break
          }
          // A cache mount is a directory outside the image that persists across builds: the host's npm cache.
          const links: string[] = []
          for (const mount of mounts) {
            const opts = Object.fromEntries(
              mount
                .slice("--mount=".length)
                .split(",")
                .map((kv) => kv.split("=")),
            )
            const cache = opts.type === "cache" ? cacheDirs()[opts.target] : undefined
            if (!cache) {
              throw new Error(
                `${at(ins)}: only cache mounts at ${Object.keys(cacheDirs()).join(", ")} are modelled`,
              )
            }
            const link = hostPath(opts.target)
            mkdirSync(dirname(link), { recursive: true })
            mkdirSync(cache, { recursive: true })
            symlinkSync(cache, link)
            links.push(link)
          }
          try {
            const r = await runToEnd(
              ["sh", "-c", command],
              [],
              hostPath(workdir),
              // The image's Node and npm are first on PATH in the image; here, this Node.
              {
                ...networkEnv,
                PATH: `${dirname(process.execPath)}:/usr/local/bin:/usr/bin:/bin`,
                HOME: hostPath("/root"),
                ...baseImageEnv(stage.image, hostPath),
                ...env,
              },
              240_000,
            )
            if (r.code !== 0)
              throw new Error(
                `${at(ins)} exited ${r.code}:\n${r.stdout.slice(-4000)}\n${r.stderr.slice(-4000)}`,
              )
          } finally {
            for (const link of links) unlinkSync(link)
          }
          break
        }
        case "USER":
          user = ins.args
          break
        case "ENTRYPOINT":
        case "CMD": {
          // Exec form only: node is PID 1 and receives SIGTERM itself.
          const argv = tryJson(ins.args)
          if (!Array.isArray(argv)) throw new Error(`${at(ins)}: must be exec form (a JSON array)`)
          if (ins.op === "ENTRYPOINT") entrypoint = argv
          else cmd = argv
          break
        }
        case "EXPOSE":
        case "LABEL":
          break
        default:
          throw new Error(`${at(ins)}: ${ins.op} is not modelled by this test; teach buildStages about it`)
      }
      timings.push({
        step: `${ins.op} ${ins.args.replace(/--mount=\S+\s*/g, "")}`.slice(0, 60),
        seconds: (Date.now() - t0) / 1000,
      })
    }
    return { name: stage.name, workdir, env, user, entrypoint, cmd, timings, hostPath }
  }

  for (const stage of stages) results.set(stage.name, buildStage(stage))
  return Promise.all(stages.map((s) => results.get(s.name)!))
}
