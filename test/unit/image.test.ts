// The container image starts the hub with node flags ADR 0010 measured: a bounded young generation.
import { readFileSync } from "node:fs"
import { describe, expect, it } from "vitest"

const dockerfile = readFileSync(new URL("../../Dockerfile", import.meta.url), "utf8")

describe("the image's entrypoint", () => {
  it("runs node with a 16 MiB semi-space (ADR 0010: what the memory after a wave is)", () => {
    const line = dockerfile.split("\n").find((l) => l.startsWith("ENTRYPOINT "))
    expect(line).toBeDefined()
    const argv = JSON.parse((line ?? "").slice("ENTRYPOINT ".length)) as string[]
    expect(argv[0]).toBe("node")
    expect(argv).toContain("--max-semi-space-size=16")
    expect(argv.at(-1)).toBe("dist/src/cli/main.js")
  })

  it("bin/fleetcheck runs node with the same flag (a hub started outside the image)", () => {
    const launcher = readFileSync(new URL("../../bin/fleetcheck", import.meta.url), "utf8")
    const flags = /^node_flags=\((.*)\)$/m.exec(launcher)?.[1]?.split(" ")
    expect(flags).toContain("--max-semi-space-size=16")
    const execs = launcher.split("\n").filter((l) => l.trim().startsWith("exec "))
    expect(execs.length).toBeGreaterThan(0)
    for (const l of execs) expect(l).toContain(`"\${node_flags[@]}"`)
  })
})
