// The folders' arrows point one way (ADR 0006, README layout): generic machinery never imports the
// product, the API imports nothing but itself, and tests set up fleets through the harness, never
// through CLI modules. Read from the sources' own import statements.
import { readdirSync, readFileSync, statSync } from "node:fs"
import { dirname, join, relative, resolve } from "node:path"
import { assert, describe, it } from "@effect/vitest"

const root = resolve(dirname(new URL(import.meta.url).pathname), "../..")

const files = (dir: string): string[] =>
  readdirSync(join(root, dir)).flatMap((name) => {
    const path = join(dir, name)
    if (statSync(join(root, path)).isDirectory()) return name === "node_modules" ? [] : files(path)
    return path.endsWith(".ts") ? [path] : []
  })

/** Every project file a source file imports (static, re-exports and dynamic), as root-relative paths. */
const importsOf = (file: string): string[] => {
  const text = readFileSync(join(root, file), "utf8")
  const specs = [
    ...text.matchAll(/^\s*(?:import|export)\b[^"'`;]*?from\s*["']([^"']+)["']/gm),
    ...text.matchAll(/^\s*import\s*["']([^"']+)["']/gm),
    ...text.matchAll(/\bimport\(\s*["']([^"']+)["']\s*\)/g),
  ].map((m) => m[1]!)
  return specs
    .filter((s) => s.startsWith("."))
    .map((s) => relative(root, resolve(dirname(join(root, file)), s)))
}

const violations = (from: string, allowed: (target: string, file: string) => boolean) =>
  files(from).flatMap((file) =>
    importsOf(file)
      .filter((target) => !allowed(target, file))
      .map((target) => `${file} → ${target}`),
  )

const under = (target: string, ...dirs: string[]) => dirs.some((d) => target.startsWith(`${d}/`))

describe("import directions", () => {
  it("src/engine is generic: it imports only itself and the REST client", () => {
    assert.deepStrictEqual(
      violations("src/engine", (t) => under(t, "src/engine", "src/kube")),
      [],
    )
  })

  it("src/api imports nothing but src/api", () => {
    assert.deepStrictEqual(
      violations("src/api", (t) => under(t, "src/api")),
      [],
    )
  })

  it("src/kube imports only itself and the API's names", () => {
    assert.deepStrictEqual(
      violations("src/kube", (t) => under(t, "src/kube") || t === "src/api/names.ts"),
      [],
    )
  })

  it("the reconciler and the kubeconfig policy never reach up into the hub or the CLI", () => {
    for (const dir of ["src/reconcile", "src/kubeconfig", "src/observability"]) {
      assert.deepStrictEqual(
        violations(dir, (t) => !under(t, "src/hub", "src/cli")),
        [],
      )
    }
  })

  it("only the CLI imports the CLI, and only `fleetcheck dev` loads the local-fleet harness (lazily)", () => {
    // `fleetcheck dev` is src/cli/dev.ts and its parts (dev-prometheus.ts, dev-replicas.ts, ...).
    const devModule = /^src\/cli\/dev(-[a-z-]+)?\.ts$/
    assert.deepStrictEqual(
      violations("src", (t, file) => {
        if (under(t, "src/cli")) return under(file, "src/cli")
        if (under(t, "clusters")) return devModule.test(file)
        return true
      }),
      [],
    )
    for (const file of readdirSync(join(root, "src/cli")).filter((f) => devModule.test(`src/cli/${f}`)))
      assert.notMatch(
        readFileSync(join(root, "src/cli", file), "utf8"),
        /^import\s[^"']*from\s*["'][^"']*clusters\/local-fleet/m,
        `${file} imports the harness dynamically (or its types only)`,
      )
  })

  it("tests and benchmarks set up fleets through the harness, not through CLI modules", () => {
    // Tests of a command itself may import it; nothing else may.
    const cliTests = new Set([
      "test/unit/config.test.ts",
      "test/unit/status.test.ts",
      "test/unit/report.test.ts",
      "test/unit/register-args.test.ts",
      "test/unit/dev-replicas.test.ts",
      // `fleetcheck hub` refusing a serving certificate at start; `fleetcheck status` over TLS.
      "test/unit/serving-cert.test.ts",
      "test/integration/deploy.test.ts",
      "test/integration/register.test.ts",
      "test/integration/truth-table.test.ts",
    ])
    assert.deepStrictEqual(
      violations("test", (t, file) => !under(t, "src/cli") || cliTests.has(file)),
      [],
    )
  })

  it("no import circle in src (type-only imports count: a circle is a knot for the reader too)", () => {
    const graph = new Map(files("src").map((f) => [f, importsOf(f).filter((t) => t.startsWith("src/"))]))
    const circles: string[] = []
    const state = new Map<string, "open" | "done">()
    const visit = (file: string, path: string[]) => {
      if (state.get(file) === "done") return
      if (state.get(file) === "open") {
        circles.push([...path.slice(path.indexOf(file)), file].join(" → "))
        return
      }
      state.set(file, "open")
      for (const target of graph.get(file) ?? []) visit(target, [...path, file])
      state.set(file, "done")
    }
    for (const file of graph.keys()) visit(file, [])
    assert.deepStrictEqual(circles, [])
  })
})
