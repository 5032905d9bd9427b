// Writes deploy/helm/ (the hub chart and the member chart) from deploy/ and the hub's settings
// (render.ts; docs/adr/0016).
//
//   node src/hub/chart/generate.ts           # write the files
//   node src/hub/chart/generate.ts --check   # exit 1 if a checked-in file differs or is left over
import { mkdirSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs"
import { dirname, join, relative } from "node:path"
import { renderCharts, repoSources } from "./render.ts"

const root = new URL("../../../", import.meta.url).pathname
const helmDir = join(root, "deploy/helm")
const check = process.argv.includes("--check")

const filesUnder = (dir: string): string[] => {
  try {
    return readdirSync(dir, { recursive: true, withFileTypes: true })
      .filter((e) => e.isFile())
      .map((e) => relative(helmDir, join(e.parentPath, e.name)))
  } catch {
    return []
  }
}

const wanted = renderCharts(repoSources(root))
const problems: string[] = []
for (const [path, text] of Object.entries(wanted)) {
  const file = join(helmDir, path)
  if (check) {
    let current: string | undefined
    try {
      current = readFileSync(file, "utf8")
    } catch {
      current = undefined
    }
    if (current !== text)
      problems.push(`deploy/helm/${path} is ${current === undefined ? "missing" : "stale"}`)
  } else {
    mkdirSync(dirname(file), { recursive: true })
    writeFileSync(file, text)
  }
}
// A file the generator no longer writes would be installed all the same: none may be left.
for (const path of filesUnder(helmDir)) {
  if (Object.hasOwn(wanted, path)) continue
  if (check) problems.push(`deploy/helm/${path} is not generated any more`)
  else rmSync(join(helmDir, path))
}
if (problems.length > 0) {
  process.stderr.write(
    `${problems.join("\n")}\nrun \`node src/hub/chart/generate.ts\` and commit deploy/helm/\n`,
  )
  process.exit(1)
}
if (!check) process.stdout.write(`wrote ${Object.keys(wanted).length} files under deploy/helm/\n`)
