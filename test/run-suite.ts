// `npm test`: the whole suite in three vitest processes at once. One runs the cluster files one at a
// time; the other two run the files that mostly wait on the wall clock (config/vitest.config.ts,
// wallClockFiles and leaseFiles), one at a time each, so that waiting overlaps the cluster files
// instead of adding minutes to the suite. The unit files go first in the second process (vitest orders
// projects by name, and on a 2-core machine runs one file at a time): they delay its waiting files by
// about a minute, which that process has room for. Only the first process streams to the terminal; the
// others' output is printed after it, never interleaved.
// Arguments go to every process (e.g. a file filter: a process whose projects match nothing passes).
// Results: test-results/vitest.json (the runs merged) and a closing line with the totals.
import { spawn } from "node:child_process"
import { createWriteStream, existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs"
import { join, relative } from "node:path"

const root = new URL("..", import.meta.url).pathname
const results = join(root, "test-results")
mkdirSync(results, { recursive: true })
const args = process.argv.slice(2)

interface Part {
  readonly name: string
  readonly projects: ReadonlyArray<string>
  /** Streams to the terminal; otherwise kept in a log and printed at the end. */
  readonly live: boolean
}
const parts: ReadonlyArray<Part> = [
  { name: "clusters", projects: ["clusters"], live: true },
  { name: "wall-clock", projects: ["unit", "wall-clock"], live: false },
  { name: "leases", projects: ["leases"], live: false },
]

const run = (part: Part) =>
  new Promise<{ part: Part; code: number; log?: string }>((resolve) => {
    const json = join(results, `vitest-${part.name}.json`)
    const log = join(results, `vitest-${part.name}.log`)
    const child = spawn(
      process.execPath,
      [
        join(root, "node_modules/vitest/vitest.mjs"),
        "run",
        "--config",
        join(root, "config/vitest.config.ts"),
        ...part.projects.flatMap((p) => ["--project", p]),
        "--passWithNoTests",
        "--reporter=default",
        "--reporter=json",
        `--outputFile.json=${json}`,
        ...args,
      ],
      { cwd: root, stdio: part.live ? "inherit" : ["ignore", "pipe", "pipe"] },
    )
    if (!part.live) {
      const out = createWriteStream(log)
      child.stdout?.pipe(out)
      child.stderr?.pipe(out)
    }
    child.on("exit", (code, signal) =>
      resolve({ part, code: code ?? (signal ? 1 : 0), ...(part.live ? {} : { log }) }),
    )
  })

const finished = await Promise.all(parts.map(run))

interface Report {
  numPassedTests: number
  numFailedTests: number
  numPendingTests: number
  numTodoTests: number
  testResults: Array<{
    name?: string
    startTime?: number
    endTime?: number
    status?: string
    message?: string
    assertionResults?: Array<{ fullName?: string; status?: string; failureMessages?: string[] }>
  }>
  success: boolean
}
const merged: Report = {
  numPassedTests: 0,
  numFailedTests: 0,
  numPendingTests: 0,
  numTodoTests: 0,
  testResults: [],
  success: true,
}
for (const { part, code, log } of finished) {
  const json = join(results, `vitest-${part.name}.json`)
  const r = existsSync(json) ? (JSON.parse(readFileSync(json, "utf8")) as Report) : undefined
  if (log && (code !== 0 || (r?.testResults.length ?? 0) > 0)) {
    process.stdout.write(`\n── ${part.name} (${part.projects.join(", ")}), run beside the others ──\n`)
    process.stdout.write(readFileSync(log, "utf8"))
  }
  if (r) {
    merged.numPassedTests += r.numPassedTests
    merged.numFailedTests += r.numFailedTests
    merged.numPendingTests += r.numPendingTests
    merged.numTodoTests += r.numTodoTests
    merged.testResults.push(...r.testResults)
  }
  if (code !== 0) {
    merged.success = false
    process.stdout.write(`\n${part.name}: vitest exited with ${code}\n`)
  }
}
writeFileSync(join(results, "vitest.json"), `${JSON.stringify(merged)}\n`)
// Where the suite's time goes: the 20 slowest files (their own wall time; the parts run side by side).
const slowest = merged.testResults
  .map((t) => ({
    file: relative(process.cwd(), t.name ?? "?"),
    seconds: ((t.endTime ?? 0) - (t.startTime ?? 0)) / 1000,
  }))
  .sort((a, b) => b.seconds - a.seconds)
  .slice(0, 20)
process.stdout.write(
  `\nslowest files:\n${slowest.map((t) => `${t.seconds.toFixed(1).padStart(7)}s  ${t.file}`).join("\n")}\n`,
)
// The failures last, named, with the first line of each message: a log cut to its tail still says
// which test failed and why.
const firstLine = (text: string | undefined) => (text ?? "").trim().split("\n")[0]?.slice(0, 800) ?? ""
const failures = merged.testResults.flatMap((t) => {
  const file = relative(process.cwd(), t.name ?? "?")
  const failed = (t.assertionResults ?? []).filter((a) => a.status === "failed")
  if (failed.length > 0)
    return failed.map((a) => `  ${file} > ${a.fullName ?? "?"}\n      ${firstLine(a.failureMessages?.[0])}`)
  // A file that failed outside its tests (an error in a hook, or at import).
  return t.status === "failed" ? [`  ${file}\n      ${firstLine(t.message)}`] : []
})
if (failures.length > 0) process.stdout.write(`\nfailed:\n${failures.join("\n")}\n`)
process.stdout.write(
  `\n${merged.numPassedTests} passed, ${merged.numFailedTests} failed, ${merged.numPendingTests + merged.numTodoTests} skipped\n`,
)
process.exit(merged.success ? 0 : 1)
