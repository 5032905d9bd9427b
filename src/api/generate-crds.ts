// Writes deploy/crds/*.yaml from the zod schemas (src/api/crd.ts).
//
//   node src/api/generate-crds.ts           # write the files
//   node src/api/generate-crds.ts --check   # exit 1 if a checked-in file differs (CI)
import { readFile, writeFile } from "node:fs/promises"
import { renderCrds } from "./crd.ts"

const crdDir = new URL("../../deploy/crds/", import.meta.url)
const check = process.argv.includes("--check")

// The first differing line, so a stale file says where it went stale.
const firstDifference = (expected: string, actual: string): string => {
  const want = expected.split("\n")
  const got = actual.split("\n")
  for (let i = 0; i < Math.max(want.length, got.length); i++) {
    if (want[i] !== got[i]) {
      return `line ${i + 1}:\n  expected: ${want[i] ?? "<end of file>"}\n  found:    ${got[i] ?? "<end of file>"}`
    }
  }
  return "no line differs"
}

let stale = 0
for (const [name, text] of Object.entries(renderCrds())) {
  const file = new URL(name, crdDir)
  const path = `deploy/crds/${name}`
  if (check) {
    const current = await readFile(file, "utf8").catch(() => undefined)
    if (current === text) continue
    stale++
    const detail = current === undefined ? "missing" : firstDifference(text, current)
    process.stderr.write(`${path} is stale (${detail})\n`)
  } else {
    await writeFile(file, text)
    process.stdout.write(`wrote ${path}\n`)
  }
}
if (stale > 0) {
  process.stderr.write("run `node src/api/generate-crds.ts` and commit deploy/crds/\n")
  process.exit(1)
}
