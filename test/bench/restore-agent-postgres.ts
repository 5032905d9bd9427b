// The restore agent's cost over pg_restore alone (issue bar: at most 1.10x on 1 million rows), with
// Postgres start-up reported apart: the raw side is initdb + postgres started with the agent's settings
// (fsync off, unix socket) + `pg_restore` with the agent's flags; the agent side is
// `fleetcheck agent restore postgres` with one count assertion. Alternately, each into fresh scratch.
// Run: node test/bench/restore-agent-postgres.ts [rows=1000000] [rounds=3]
import { type SpawnSyncOptions, spawn, spawnSync } from "node:child_process"
import { chownSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { pgDump, restoreToolPath } from "../../clusters/local-fleet/index.ts"

const rows = Number(process.argv[2] ?? 1_000_000)
const rounds = Number(process.argv[3] ?? 3)
const bin = new URL("../../bin/fleetcheck", import.meta.url).pathname
const pgBin = restoreToolPath("").find((p) => p.includes("postgresql"))
if (!pgBin) throw new Error("PostgreSQL is not installed: bash config/install-restore-tools.sh")
const passwd = readFileSync("/etc/passwd", "utf8")
  .split("\n")
  .find((l) => l.startsWith("postgres:"))
const uid = process.getuid?.() === 0 ? Number(passwd?.split(":")[2]) : undefined
const work = mkdtempSync(join(tmpdir(), "fleetcheck-pg-bench-"))

const seconds = async (f: () => void | Promise<void>) => {
  const t0 = performance.now()
  await f()
  return (performance.now() - t0) / 1000
}
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)] as number
const must = (command: string, args: string[], options: SpawnSyncOptions = {}) => {
  const r = spawnSync(command, args, { encoding: "utf8", ...options })
  if (r.status !== 0) throw new Error(`${command} ${args.join(" ")}: ${r.stderr}`)
  return r
}

/** The raw side: start-up and pg_restore timed apart. */
const raw = async (dump: string, dir: string) => {
  mkdirSync(dir, { recursive: true })
  if (uid !== undefined) chownSync(dir, uid, uid)
  const data = join(dir, "data")
  const as = {
    ...(uid !== undefined ? { uid, gid: uid } : {}),
    env: { ...process.env, PGHOST: dir, PGUSER: "postgres" },
  }
  let server: ReturnType<typeof spawn> | undefined
  const startup = await seconds(async () => {
    must(join(pgBin, "initdb"), ["-D", data, "-U", "postgres", "--auth=trust", "--no-sync"], as)
    const args = [
      "-D",
      data,
      "-k",
      dir,
      "-c",
      "listen_addresses=",
      "-c",
      "fsync=off",
      "-c",
      "full_page_writes=off",
    ]
    server = spawn(join(pgBin, "postgres"), args, { ...as, stdio: "ignore" })
    while (spawnSync(join(pgBin, "pg_isready"), ["-q"], as).status !== 0)
      await new Promise((r) => setTimeout(r, 100))
  })
  const restore = await seconds(() => {
    must(
      join(pgBin, "pg_restore"),
      ["--no-owner", "--no-privileges", "--exit-on-error", "-d", "postgres", dump],
      as,
    )
  })
  server?.kill("SIGINT")
  await new Promise((r) => server?.once("exit", r))
  return { startup, restore }
}

try {
  console.log(`restore-agent postgres bench: making a pg_dump of ${rows} rows`)
  const dump = await pgDump(work, rows, 60_000)
  console.log(`dump ${(statSync(dump).size / 2 ** 20).toFixed(1)} MiB`)
  const input = join(work, "run.json")
  writeFileSync(
    input,
    JSON.stringify({
      runID: "bench",
      cluster: "bench",
      check: { namespace: "bench", name: "bench" },
      restore: {
        postgres: {
          dump: { url: dump },
          assertions: [{ name: "orders", sql: "SELECT count(*) FROM orders", min: rows }],
        },
      },
      recoveryPoint: { policy: "Latest" },
    }),
  )
  const raws: Array<{ startup: number; restore: number }> = []
  const agents: number[] = []
  const agentStartups: number[] = []
  const phases: string[] = []
  for (let r = 0; r < rounds; r++) {
    const rawDir = join(work, `raw-${r}`)
    raws.push(await raw(dump, rawDir))
    rmSync(rawDir, { recursive: true, force: true })
    const scratch = join(work, `scratch-${r}`)
    mkdirSync(scratch)
    let out = ""
    agents.push(
      await seconds(() => {
        const res = spawnSync(bin, ["agent", "restore", "postgres"], {
          env: {
            ...process.env,
            FLEETCHECK_RUN_INPUT: input,
            FLEETCHECK_SCRATCH: scratch,
            FLEETCHECK_TERMINATION_LOG: join(work, `termination-${r}`),
          },
          encoding: "utf8",
        })
        out = res.stdout
        if (res.status !== 0) throw new Error(`agent failed: ${res.stdout}${res.stderr}`)
        // The agent logs its phases: "postgres ready in 0.512s, pg_restore in 0.713s, ...".
        const ready = /postgres ready in ([\d.]+)s/.exec(res.stderr)
        if (!ready) throw new Error(`the agent logged no phases: ${res.stderr}`)
        agentStartups.push(Number(ready[1]))
        phases.push(/postgres phases: (.*)/.exec(res.stderr)?.[1] ?? "")
      }),
    )
    rmSync(scratch, { recursive: true, force: true })
    const x = raws[r]!
    console.log(
      `round ${r + 1}: start-up ${x.startup.toFixed(2)}s + pg_restore ${x.restore.toFixed(2)}s, agent ${agents[r]?.toFixed(2)}s of which its Postgres start-up ${agentStartups[r]?.toFixed(2)}s (${JSON.parse(out).message}; agent phases: ${phases[r]})`,
    )
  }
  const startup = median(raws.map((x) => x.startup))
  const restore = median(raws.map((x) => x.restore))
  const agent = median(agents)
  const agentStartup = median(agentStartups)
  console.log(
    `restore-agent postgres: median start-up ${startup.toFixed(2)}s, pg_restore ${restore.toFixed(2)}s, agent ${agent.toFixed(2)}s (its Postgres start-up ${agentStartup.toFixed(2)}s); agent / (start-up + pg_restore) ${(agent / (startup + restore)).toFixed(3)}; start-up apart, (agent - its start-up) / pg_restore ${((agent - agentStartup) / restore).toFixed(3)} (bar 1.10)`,
  )
} finally {
  rmSync(work, { recursive: true, force: true })
}
