// The image and bin/fleetcheck start the hub through bin/run-node, with the V8 flags ADR 0010 measured:
// a bounded young generation always, and the collector on the main thread where the process has one CPU.
import { execFileSync } from "node:child_process"
import { readFileSync } from "node:fs"
import { availableParallelism } from "node:os"
import { fileURLToPath } from "node:url"
import { describe, expect, it } from "vitest"

const runNode = fileURLToPath(new URL("../../bin/run-node", import.meta.url))
const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8"))

/** The node flags and version bin/run-node starts node with, run under `prefix` (e.g. taskset). */
const started = (prefix: ReadonlyArray<string> = [], env: NodeJS.ProcessEnv = process.env) => {
  const [cmd, ...args] = [...prefix, runNode, "-p", "JSON.stringify([process.execArgv, process.version])"]
  const [execArgv, version] = JSON.parse(execFileSync(cmd!, args, { encoding: "utf8", env })) as [
    string[],
    string,
  ]
  return { flags: execArgv.filter((a) => a.startsWith("--")), version }
}

describe("bin/run-node", () => {
  it("runs the project's Node with a 16 MiB semi-space", () => {
    const { flags, version } = started()
    expect(version).toBe(`v${pkg.devDependencies.node}`)
    expect(flags).toContain("--max-semi-space-size=16")
  })

  it("keeps V8's parallel collector where the process may use more than one CPU", () => {
    if (availableParallelism() < 2) return
    expect(started().flags).not.toContain("--single-threaded-gc")
    expect(started(["taskset", "-c", "0,1"]).flags).not.toContain("--single-threaded-gc")
  })

  it("runs the collector on the main thread where the process may use one CPU only (a cpuset of one)", () => {
    expect(started(["taskset", "-c", "0"]).flags).toEqual([
      "--max-semi-space-size=16",
      "--single-threaded-gc",
    ])
  })

  it("counts the CPUs it may run on, not what OMP_NUM_THREADS says", () => {
    if (availableParallelism() < 2) return
    expect(started([], { ...process.env, OMP_NUM_THREADS: "1" }).flags).not.toContain("--single-threaded-gc")
  })
})

describe("the hub's launchers", () => {
  it("the image's entrypoint is bin/run-node, and the image has it", () => {
    const dockerfile = readFileSync(new URL("../../Dockerfile", import.meta.url), "utf8")
    const line = dockerfile.split("\n").find((l) => l.startsWith("ENTRYPOINT "))
    const argv = JSON.parse((line ?? "").slice("ENTRYPOINT ".length)) as string[]
    expect(argv).toEqual(["bin/run-node", "--enable-source-maps", "dist/src/cli/main.js"])
    expect(dockerfile).toContain("\nCOPY bin/run-node ./bin/run-node\n")
  })

  it("bin/fleetcheck starts node only through bin/run-node", () => {
    const launcher = readFileSync(new URL("../../bin/fleetcheck", import.meta.url), "utf8")
    const execs = launcher.split("\n").filter((l) => l.trim().startsWith("exec "))
    expect(execs.length).toBeGreaterThan(0)
    for (const l of execs) expect(l).toMatch(/^\s*exec "\$root\/bin\/run-node" /)
  })
})
