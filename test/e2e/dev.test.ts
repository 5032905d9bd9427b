// The README's first command, end to end: `bin/fleetcheck dev` brings up a hub and two members, the
// samples end one Verified and one failed with a clear reason, the real-restore samples restore what
// restic, etcd and pg_dump wrote (the damaged repository red), the FleetBackupCheck sample is placed in
// both members and verified, `fleetcheck status` says so with exit 1, with --prometheus the failing
// sample's FleetcheckBackupCheckFailing fires in Prometheus and reaches Alertmanager,
// and Ctrl-C leaves no process or temporary directory behind.
import { type ChildProcess, execFile } from "node:child_process"
import { existsSync, mkdirSync, readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { chromium } from "playwright-core"
import { afterAll, describe, expect, it } from "vitest"
import { startDev } from "../support/dev.ts"
import { sleep } from "../support/wait.ts"

const bin = new URL("../../bin/fleetcheck", import.meta.url).pathname
const resultsDir = new URL("../../test-results/", import.meta.url).pathname
const chromiumPath = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium"

const run = (args: string[]) =>
  new Promise<{ code: number; stdout: string; stderr: string }>((resolve) => {
    execFile(bin, args, { timeout: 30_000 }, (error, stdout, stderr) => {
      resolve({ code: error ? (typeof error.code === "number" ? error.code : 1) : 0, stdout, stderr })
    })
  })

const alive = (pid: number) => {
  try {
    process.kill(pid, 0)
    return true
  } catch {
    return false
  }
}

describe("fleetcheck dev", () => {
  let dev: ChildProcess | undefined
  afterAll(() => {
    if (dev && dev.exitCode === null) dev.kill("SIGKILL")
  })

  it("runs a local fleet with one verified and one failed sample, and cleans up on Ctrl-C", async () => {
    const t0 = Date.now()
    const running = await startDev(bin, ["--port", "0", "--prometheus"])
    dev = running.process
    const stdout = running.stdout()
    console.log(`fleetcheck dev ready in ${Date.now() - t0} ms`)
    const url = /dashboard\s+(http:\/\/127\.0\.0\.1:\d+)\//.exec(stdout)?.[1]
    expect(url).toBeTruthy()
    const runDir = /KUBECONFIG=(\/\S+)\/hub\/admin\.kubeconfig/.exec(stdout)?.[1]
    expect(runDir && existsSync(runDir)).toBe(true)
    const pids = readFileSync(`${runDir}/pgids`, "utf8").split("\n").filter(Boolean).map(Number)
    expect(pids.length).toBeGreaterThanOrEqual(8)

    const status = await run(["status", "--hub", url!])
    expect(status.code).toBe(1) // one check is failing: scripts can tell
    expect(status.stdout).toMatch(/orders-db-nightly\s+True\s+RestoreSucceeded/)
    expect(status.stdout).toMatch(/payments-db-weekly\s+False\s+ChecksumMismatch/)
    // The real restores: restic from the local S3 server, a damaged repository, etcd, a pg_dump.
    expect(status.stdout).toMatch(/orders-files-restic\s+True\s+RestoreSucceeded/)
    expect(status.stdout).toMatch(/orders-files-damaged\s+False\s+DataCorrupted/)
    expect(status.stdout).toMatch(/member-etcd-snapshot\s+True\s+RestoreSucceeded/)
    expect(status.stdout).toMatch(/orders-db-pgdump\s+True\s+RestoreSucceeded/)
    // The FleetBackupCheck sample, placed by the hub in both members and verified there.
    expect(status.stdout).toMatch(
      /fleetcheck-system\/etcd-snapshots\s+True\s+AllVerified\s+2\/2\s+member-1=True member-2=True/,
    )
    // The drill sample: member-1's backup restored in member-2 (another region), verified there.
    expect(status.stdout).toMatch(
      /fleetcheck-system\/orders-db-cross-region\s+member-1 -> member-2\s+Current\s+True\s+RestoreSucceeded/,
    )
    const page = await (await fetch(`${url}/`)).text()
    // No credential of the restore samples in any view or log: the fleet API, the dashboard, the
    // status output, dev's own output and every process log of the fleet (hub, agents, tools).
    const views = [
      JSON.stringify(await (await fetch(`${url}/api/v1/fleet`)).json()),
      page,
      await (await fetch(`${url}/cluster?name=member-1`)).text(),
      status.stdout,
      stdout,
      ...readdirSync(`${runDir}/logs`).map((f) => readFileSync(`${runDir}/logs/${f}`, "utf8")),
    ]
    expect(views.join("\n")).toContain("orders-files-restic") // the logs are there to be searched
    for (const secret of ["pw-orders-c0ffee", "pw-archive-c0ffee", "fleetcheck-secret"])
      expect(views.filter((v) => v.includes(secret)).length, `${secret} shows`).toBe(0)
    expect(page).toContain("member-1 → member-2")
    // member-2 is registered the SIG-Multicluster way: a ClusterProfile and the secret-reader plugin.
    const member2 = await (await fetch(`${url}/cluster?name=member-2`)).text()
    expect(member2).toMatch(/Registered by<\/dt><dd>ClusterProfile <span class="full">member-2<\/span>/)
    expect(page).toContain("payments-db-weekly")
    expect(page).toContain("checksum mismatch")
    expect(page).toContain("Fleet checks")
    expect(page).toContain("etcd-snapshots")
    // The README's picture (docs/images/dashboard.png is a copy of this file): the dev fleet's
    // dashboard as a browser draws it, once the samples have their verdicts.
    const browser = await chromium.launch({
      executablePath: chromiumPath,
      headless: true,
      args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
    })
    try {
      const tab = await browser.newPage({ viewport: { width: 1280, height: 800 }, locale: "en-US" })
      await tab.goto(`${url}/`)
      mkdirSync(resultsDir, { recursive: true })
      await tab.screenshot({ path: join(resultsDir, "dev-dashboard.png") })
      expect(await tab.locator("text=orders-files-damaged").count()).toBeGreaterThan(0)
    } finally {
      await browser.close()
    }

    // --prometheus: the failing sample's alert fires (dev shortens `for:`) and reaches Alertmanager.
    const promUrl = /prometheus\s+(http:\/\/127\.0\.0\.1:\d+)\//.exec(stdout)?.[1]
    const amUrl = /alertmgr\s+(http:\/\/127\.0\.0\.1:\d+)\//.exec(stdout)?.[1]
    expect(promUrl && amUrl, stdout).toBeTruthy()
    const isPayments = (labels: Record<string, string> | undefined) =>
      labels?.alertname === "FleetcheckBackupCheckFailing" && labels.name === "payments-db-weekly"
    const alertDeadline = Date.now() + 90_000
    let inAlertmanager: Array<{ labels?: Record<string, string> }> = []
    while (Date.now() < alertDeadline) {
      inAlertmanager = (
        (await (await fetch(`${amUrl}/api/v2/alerts`)).json()) as typeof inAlertmanager
      ).filter((a) => isPayments(a.labels))
      if (inAlertmanager.length > 0) break
      await sleep(1_000)
    }
    expect(inAlertmanager[0]?.labels).toMatchObject({
      cluster: "member-1",
      namespace: "payments",
      reason: "ChecksumMismatch",
    })
    const promAlerts = (await (await fetch(`${promUrl}/api/v1/alerts`)).json()) as {
      data: { alerts: Array<{ labels: Record<string, string>; state: string }> }
    }
    expect(promAlerts.data.alerts.find((a) => isPayments(a.labels))?.state).toBe("firing")

    dev.kill("SIGINT")
    const code = await new Promise<number | null>((r) => dev?.once("exit", r))
    expect(code).toBe(0)
    const deadline = Date.now() + 15_000
    while (Date.now() < deadline && pids.some(alive)) await sleep(200)
    expect(pids.filter(alive)).toEqual([])
    expect(existsSync(runDir!)).toBe(false)
  })
})
