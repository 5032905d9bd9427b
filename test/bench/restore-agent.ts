// The restore agent's cost over the raw tool, alternately on the same backup, each into fresh scratch.
// restic (SPEC §12: at most 1.05x on 1 GiB): `restic restore --verify` as a person would run it vs
// `fleetcheck agent restore restic` (snapshots, stats, the same restore, counting what it restored).
// Prints each run, the medians and the ratio.
// Run: node test/bench/restore-agent.ts [MiB=1024] [rounds=3]
//      node test/bench/restore-agent-postgres.ts for pg_dump (1 million rows).
// A short version runs in the suite: test/integration/restore-agent.test.ts (restores through the hub).
import { execFileSync, spawnSync } from "node:child_process"
import { randomBytes } from "node:crypto"
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"

const mib = Number(process.argv[2] ?? 1024)
const rounds = Number(process.argv[3] ?? 3)
const bin = new URL("../../bin/fleetcheck", import.meta.url).pathname
const work = mkdtempSync(join(tmpdir(), "fleetcheck-restore-bench-"))
const env = { ...process.env, RESTIC_REPOSITORY: join(work, "repo"), RESTIC_PASSWORD: "bench" }

const seconds = (f: () => void) => {
  const t0 = performance.now()
  f()
  return (performance.now() - t0) / 1000
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number

try {
  // Incompressible data in 8 MiB files, as restic sees a database's or a volume's files.
  const data = join(work, "data")
  mkdirSync(data)
  for (let i = 0; i < mib / 8; i++) writeFileSync(join(data, `part-${i}.bin`), randomBytes(8 * 1024 * 1024))
  execFileSync("restic", ["init", "-q"], { env })
  const backup = seconds(() => execFileSync("restic", ["backup", "-q", data], { env }))
  console.log(`restore-agent bench: ${mib} MiB in ${mib / 8} files, backed up in ${backup.toFixed(1)}s`)

  const runInput = join(work, "run.json")
  writeFileSync(
    runInput,
    JSON.stringify({
      runID: "bench",
      cluster: "bench",
      check: { namespace: "bench", name: "bench" },
      restore: { restic: { repository: env.RESTIC_REPOSITORY, credentialsSecretRef: { name: "bench" } } },
      recoveryPoint: { policy: "Latest" },
    }),
  )
  const raw: number[] = []
  const agent: number[] = []
  for (let r = 0; r < rounds; r++) {
    const rawTarget = join(work, `raw-${r}`)
    raw.push(
      seconds(() =>
        execFileSync("restic", ["restore", "latest", "--target", rawTarget, "--verify", "-q"], { env }),
      ),
    )
    rmSync(rawTarget, { recursive: true, force: true })
    const scratch = join(work, `scratch-${r}`)
    mkdirSync(scratch)
    let out = ""
    agent.push(
      seconds(() => {
        const res = spawnSync(bin, ["agent", "restore", "restic"], {
          env: {
            ...env,
            FLEETCHECK_RUN_INPUT: runInput,
            FLEETCHECK_SCRATCH: scratch,
            FLEETCHECK_TERMINATION_LOG: join(work, `termination-${r}`),
          },
          encoding: "utf8",
        })
        out = res.stdout
        if (res.status !== 0) throw new Error(`agent failed: ${res.stdout}${res.stderr}`)
      }),
    )
    rmSync(scratch, { recursive: true, force: true })
    console.log(
      `round ${r + 1}: restic ${raw[r]?.toFixed(2)}s, agent ${agent[r]?.toFixed(2)}s (${JSON.parse(out).message})`,
    )
  }
  const ratio = median(agent) / median(raw)
  console.log(
    `restore-agent: median restic ${median(raw).toFixed(2)}s, agent ${median(agent).toFixed(2)}s, ratio ${ratio.toFixed(3)} (bar 1.05)`,
  )
} finally {
  rmSync(work, { recursive: true, force: true })
}
