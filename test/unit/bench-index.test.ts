// `npm run bench` lists every benchmark: a file added to test/bench/ is either listed in run.ts or
// named a support module there, so none is forgotten by the index.
import { readdirSync } from "node:fs"
import { describe, expect, it } from "vitest"
import { benchmarks, supportModules } from "../bench/run.ts"

const dir = new URL("../bench/", import.meta.url).pathname
const files = readdirSync(dir)
  .filter((f) => f.endsWith(".ts"))
  .map((f) => f.slice(0, -3))

describe("test/bench/run.ts", () => {
  it("lists every file in test/bench as a benchmark or a support module", () => {
    const known = new Set([...Object.keys(benchmarks), ...supportModules])
    expect(files.filter((f) => !known.has(f))).toEqual([])
  })
  it("lists only files that exist", () => {
    const present = new Set(files)
    expect([...Object.keys(benchmarks), ...supportModules].filter((f) => !present.has(f))).toEqual([])
  })
})
