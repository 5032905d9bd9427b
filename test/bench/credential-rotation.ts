// The long version of test/integration/credential-rotation.test.ts: ROTATIONS Secret token rotations
// (each old token revoked as soon as the hub uses the new one) and EXPIRIES exec credential expiries,
// under a steady stream of new checks, against real API servers. Prints the test's figure lines (relists
// and 401s counted in the member's audit log, checks created meanwhile). Takes the shared lock itself.
//   npx node test/bench/credential-rotation.ts [rotations=20] [expiries=20]
import { spawnSync } from "node:child_process"

const rotations = Number(process.argv[2] ?? 20)
const expiries = Number(process.argv[3] ?? 20)
for (const [name, n] of [
  ["rotations", rotations],
  ["expiries", expiries],
] as const)
  if (!Number.isInteger(n) || n < 1) throw new Error(`${name} must be a positive integer`)

const root = new URL("../../", import.meta.url).pathname
const result = spawnSync(
  "flock",
  [
    "/tmp/fleetcheck-heavy.lock",
    "npx",
    "vitest",
    "run",
    "--config",
    "config/vitest.config.ts",
    "test/integration/credential-rotation.test.ts",
    "-t",
    "rotations|expiries",
  ],
  {
    cwd: root,
    env: { ...process.env, FLEETCHECK_ROTATIONS: String(rotations), FLEETCHECK_EXPIRIES: String(expiries) },
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  },
)
// Without vitest's colours.
const lines = `${result.stdout}\n${result.stderr}`.replace(/\x1b\[[0-9;]*m/g, "").split("\n")
for (const l of lines) if (/^(rotation|exec): /.test(l.trim())) process.stdout.write(`${l.trim()}\n`)
const summary = lines.filter((l) => /^\s*Tests +\d/.test(l)).join("\n")
process.stdout.write(`${summary}\n`)
process.exit(result.status ?? 1)
