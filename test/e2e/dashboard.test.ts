// The dashboard as a person sees it: a real local fleet (hub + 2 members) with the dev samples, the hub
// in this process (through the one launcher), and a real headless Chromium with JavaScript disabled
// reading `/`, then drilling down to a check and its cluster. Asserts on the rendered text (innerText,
// so only what is visible counts), not on the HTML source, and saves full-page screenshots to
// test-results/dashboard*.png for a human to look at (CI keeps test-results/). The layout against
// hostile names and small screens is test/e2e/dashboard-layout.test.ts (no cluster needed).
// Chromium comes from the distribution (config/install-chromium.sh); CHROMIUM_PATH overrides where.
import { accessSync, constants, mkdirSync } from "node:fs"
import { join } from "node:path"
import { type Browser, type BrowserContext, chromium, type Locator, type Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type LocalFleet, prepareFleet, startFleet } from "../../clusters/local-fleet/index.ts"
import { layoutProblems } from "../support/browser-layout.ts"
import { type RunningHub, startHub } from "../support/hub.ts"
import { sleep } from "../support/wait.ts"

const root = new URL("../../", import.meta.url).pathname
const resultsDir = join(root, "test-results")
const chromiumPath = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium"

interface FleetJson {
  checks: Array<{
    cluster: string
    name: string
    status: string
    reason: string
    message: string
    lastSuccessfulTime?: string
    traceID?: string
  }>
  clusters: Array<{ name: string }>
}

/** Fails loudly (never skips) when the browser is missing: the test is worthless without it. */
const requireChromium = () => {
  try {
    accessSync(chromiumPath, constants.X_OK)
  } catch {
    throw new Error(
      `Chromium not found or not executable at ${chromiumPath}. Install it with ` +
        "`bash config/install-chromium.sh` (Debian/Ubuntu, as root) or point CHROMIUM_PATH at a Chromium binary.",
    )
  }
}

/** The rendered text of an element: what a person sees (CSS-hidden text does not count). */
// biome-ignore lint/performance/useDomNodeTextContent: the rendered text is the point, not the DOM's text
const seen = (l: Locator): Promise<string> => l.innerText()

/** The visible text of each body row of the table labelled `name` (its heading), cells tab-separated. */
const rowsOf = async (page: Page, name: string): Promise<{ rows: Locator; texts: string[] }> => {
  const rows = page.getByRole("table", { name }).locator("tbody tr")
  return { rows, texts: await rows.allInnerTexts() }
}

describe("dashboard in a real browser (JavaScript disabled)", () => {
  let fleet: LocalFleet | undefined
  let hub: RunningHub | undefined
  let browser: Browser | undefined
  let context: BrowserContext | undefined
  let api: FleetJson

  beforeAll(async () => {
    requireChromium()
    const t0 = Date.now()
    fleet = await startFleet({ clusters: [{ name: "hub", workloads: false }, "member-1", "member-2"] })
    // The two classic samples only: what this file asserts is laid out for one check per member (the
    // FleetBackupCheck sample on the dashboard: test/unit/hub-http.test.ts, test/integration/placement.test.ts).
    await prepareFleet(fleet, {
      samples: ["orders-db-nightly.yaml", "payments-db-weekly.yaml"],
      fleetSamples: false,
    })
    hub = await startHub(fleet.cluster("hub"))
    const url = hub.url
    // Both samples reach a final verdict: member-1's passes, member-2's fails with ChecksumMismatch.
    const deadline = Date.now() + 120_000
    let last = ""
    for (;;) {
      const res = await fetch(`${url}/api/v1/fleet`).catch(() => undefined)
      if (res?.ok) {
        const body = (await res.json()) as FleetJson
        last = JSON.stringify(body.checks.map((c) => [c.cluster, c.name, c.status, c.reason]))
        const statuses = body.checks.map((c) => c.status).sort()
        if (body.checks.length === 2 && statuses.join() === "False,True") {
          api = body
          break
        }
      }
      if (Date.now() > deadline) throw new Error(`checks did not reach final verdicts in time: ${last}`)
      await sleep(250)
    }
    console.log(`fleet + hub + verdicts ready in ${Date.now() - t0} ms`)
    const t1 = Date.now()
    browser = await chromium.launch({
      executablePath: chromiumPath,
      headless: true,
      // Root in CI containers: Chromium's sandbox needs user namespaces it often does not get.
      args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
    })
    context = await browser.newContext({
      javaScriptEnabled: false,
      viewport: { width: 1280, height: 800 },
      locale: "en-US",
    })
    console.log(`chromium ${browser.version()} launched in ${Date.now() - t1} ms`)
  })

  afterAll(async () => {
    await context?.close().catch(() => undefined)
    await browser?.close().catch(() => undefined)
    await hub?.stop()
    await fleet?.stop()
  })

  it("shows the failing check first with its reason, the verified one with its last success, and both clusters", async () => {
    const page = await context!.newPage()
    const res = await page.goto(`${hub!.url}/`, { waitUntil: "load" })
    expect(res?.status()).toBe(200)
    expect(res?.headers()["content-type"]).toMatch(/^text\/html/)
    // Server-rendered: nothing on the page needs (or ships) JavaScript.
    expect(await page.content()).not.toMatch(/<script/i)

    expect(await page.title()).toMatch(/\b1 failing\b/)

    const failingApi = api.checks.find((c) => c.status === "False")!
    const verifiedApi = api.checks.find((c) => c.status === "True")!
    expect(failingApi).toMatchObject({
      cluster: "member-2",
      name: "payments-db-weekly",
      reason: "ChecksumMismatch",
    })
    expect(verifiedApi).toMatchObject({ cluster: "member-1", name: "orders-db-nightly" })

    const checks = await rowsOf(page, "Backup checks")
    expect(checks.texts).toHaveLength(2)
    const [first, second] = checks.texts as [string, string]
    // Failing first, with everything a person needs to act on it.
    expect(first).toContain("Failing")
    expect(first).toContain("member-2")
    expect(first).toContain("payments-db-weekly")
    expect(first).toContain("ChecksumMismatch")
    expect(first).toContain("checksum mismatch: expected sha256:2c26b46b68ff")
    expect(first).toContain(failingApi.message)
    expect(first).toMatch(/\b[0-9a-f]{32}\b/)
    expect(first).toContain(failingApi.traceID!)
    expect(first).not.toContain("Verified")
    // Then the verified one, with when it last succeeded (an ISO time, and no "never").
    expect(second).toContain("Verified")
    expect(second).toContain("member-1")
    expect(second).toContain("orders-db-nightly")
    expect(verifiedApi.lastSuccessfulTime).toMatch(/^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/)
    expect(second).toContain(verifiedApi.lastSuccessfulTime!.replace("T", " ").replace("Z", " UTC"))
    expect(second).not.toContain("never")
    expect(second).toMatch(/\b[0-9a-f]{32}\b/)
    // The failing row is marked as such visually (a red badge), the verified one green.
    await expect(seen(checks.rows.nth(0).locator(".badge.bad"))).resolves.toBe("Failing")
    await expect(seen(checks.rows.nth(1).locator(".badge.ok"))).resolves.toBe("Verified")

    const clusters = await rowsOf(page, "Clusters")
    expect(clusters.texts).toHaveLength(2)
    // member-2 has the failing check: it comes first.
    for (const [i, name] of ["member-2", "member-1"].entries()) {
      const row = clusters.rows.nth(i)
      expect(clusters.texts[i]).toContain(name)
      // Ready and Connected are green badges that say so, not a check verdict.
      const okBadges = await row.locator(".badge.ok").allInnerTexts()
      expect(okBadges).toEqual(expect.arrayContaining(["Ready", "Connected"]))
    }
    // member-2 shows its one failing check in the counts (verified / total, failing).
    expect(clusters.texts[0]).toMatch(/0 \/ 1\s+1\s+0/)
    expect(clusters.texts[1]).toMatch(/1 \/ 1\s+0\s+0/)

    // Nothing is cut off or needs sideways scrolling on an ordinary laptop screen (1280 px wide).
    for (const name of ["Clusters", "Backup checks"]) {
      const box = await page.getByRole("table", { name }).boundingBox()
      expect(box, `${name} table is rendered`).not.toBeNull()
      expect(box!.x + box!.width, `${name} table fits in 1280 px`).toBeLessThanOrEqual(1280)
    }

    const summary = await seen(page.locator(".summary"))
    expect(summary).toMatch(/2 clusters · 2 checks · 1 failing · 0 unknown/)

    mkdirSync(resultsDir, { recursive: true })
    const shot = join(resultsDir, "dashboard.png")
    await page.screenshot({ path: shot, fullPage: true })
    console.log(`dashboard screenshot: ${shot}`)
    await page.close()
  })

  it("serves every route with the security headers, typed, and refuses unknown query parameters", async () => {
    for (const path of [
      "/",
      "/api/v1/fleet",
      "/healthz",
      "/readyz",
      "/metrics",
      "/check?cluster=x&namespace=y&name=z",
    ]) {
      const res = await fetch(`${hub!.url}${path}`)
      await res.arrayBuffer()
      const csp = res.headers.get("content-security-policy") ?? ""
      expect(csp, path).toMatch(/^default-src 'none';/)
      expect(csp, path).toContain("frame-ancestors 'none'")
      expect(csp, path).not.toContain("script-src")
      expect(res.headers.get("x-content-type-options"), path).toBe("nosniff")
      expect(res.headers.get("referrer-policy"), path).toBe("no-referrer")
    }
    const api = await fetch(`${hub!.url}/api/v1/fleet`)
    expect(api.headers.get("content-type")).toBe("application/json; charset=utf-8")
    const bad = await fetch(`${hub!.url}/api/v1/fleet?clusters=member-1`)
    expect(bad.status).toBe(400)
    expect(((await bad.json()) as { message: string }).message).toContain(
      'unknown query parameter "clusters"',
    )
  })

  it("pages the fleet API: limit=1 answers one check and a continue token for the other", async () => {
    const first = (await (await fetch(`${hub!.url}/api/v1/fleet?limit=1`)).json()) as FleetJson & {
      metadata: { continue?: string; remainingItemCount?: number }
    }
    expect(first.checks.map((c) => c.name)).toEqual(["payments-db-weekly"])
    expect(first.metadata.remainingItemCount).toBe(2) // one cluster, one check
    const second = (await (
      await fetch(`${hub!.url}/api/v1/fleet?limit=1&continue=${encodeURIComponent(first.metadata.continue!)}`)
    ).json()) as FleetJson & { metadata: { continue?: string } }
    expect(second.checks.map((c) => c.name)).toEqual(["orders-db-nightly"])
    expect(second.metadata.continue).toBeUndefined()
  })

  it("drills down from the overview to the failing check and its cluster", async () => {
    const page = await context!.newPage()
    await page.goto(`${hub!.url}/`, { waitUntil: "load" })
    await page.getByRole("link", { name: "payments/payments-db-weekly" }).click()
    await page.waitForLoadState("load")
    expect(new URL(page.url()).pathname).toBe("/check")
    const failingApi = api.checks.find((c) => c.status === "False")!
    const text = await seen(page.locator("body"))
    expect(text).toContain("payments/payments-db-weekly")
    expect(text).toContain("ChecksumMismatch")
    expect(text).toContain(failingApi.message)
    expect(text).toContain("payments-2026-11-28") // spec.backup.name
    expect(text).toContain("s3://backups/payments/2026-11-28")
    expect(text).toContain("registry.example/restore-tool:1.4")
    expect(text).toMatch(/Result\s+Failed/)
    expect(text).toContain(failingApi.traceID!)
    await expect(seen(page.locator(".badge.bad").first())).resolves.toBe("Failing")
    mkdirSync(resultsDir, { recursive: true })
    await page.screenshot({ path: join(resultsDir, "dashboard-check.png"), fullPage: true })
    await page.getByRole("link", { name: "member-2" }).click()
    await page.waitForLoadState("load")
    expect(new URL(page.url()).pathname).toBe("/cluster")
    const cluster = await seen(page.locator("body"))
    expect(cluster).toContain("member-2")
    expect(cluster).toMatch(/Ready\s+True\s+CachesSynced/)
    expect(cluster).toMatch(/BackupsVerified\s+False\s+ChecksFailing/)
    expect(cluster).toContain("v1.37.2")
    const checks = await rowsOf(page, "Backup checks")
    expect(checks.texts).toHaveLength(1)
    expect(checks.texts[0]).toContain("payments-db-weekly")
    await page.screenshot({ path: join(resultsDir, "dashboard-cluster.png"), fullPage: true })
    await page.close()
  })

  it("at 390 px every column of the real fleet's tables is reachable and the page does not scroll sideways", async () => {
    const narrow = await browser!.newContext({
      javaScriptEnabled: false,
      viewport: { width: 390, height: 844 },
    })
    try {
      const page = await narrow.newPage()
      await page.goto(`${hub!.url}/`, { waitUntil: "load" })
      expect(await layoutProblems(page)).toEqual([])
      mkdirSync(resultsDir, { recursive: true })
      await page.screenshot({ path: join(resultsDir, "dashboard-390.png"), fullPage: true })
    } finally {
      await narrow.close()
    }
  })

  it("?failing=true shows only the failing check", async () => {
    const page = await context!.newPage()
    const res = await page.goto(`${hub!.url}/?failing=true`, { waitUntil: "load" })
    expect(res?.status()).toBe(200)
    const checks = await rowsOf(page, "Backup checks")
    expect(checks.texts).toHaveLength(1)
    expect(checks.texts[0]).toContain("payments-db-weekly")
    expect(checks.texts[0]).toContain("ChecksumMismatch")
    expect(await seen(page.locator("body"))).not.toContain("orders-db-nightly")
    expect(await seen(page.locator(".summary"))).toMatch(/^1 cluster · 1 check · 1 failing · 0 unknown/)
    mkdirSync(resultsDir, { recursive: true })
    const shot = join(resultsDir, "dashboard-failing.png")
    await page.screenshot({ path: shot, fullPage: true })
    console.log(`dashboard (failing only) screenshot: ${shot}`)
    await page.close()
  })
})
