// The dashboard as a person sees it: a real local fleet (hub + 2 members) with the dev samples, the hub
// in this process, and a real headless Chromium with JavaScript disabled reading `/`. Asserts on the
// rendered text (innerText, so only what is visible counts), not on the HTML source, and saves a
// full-page screenshot to test-results/dashboard.png for a human to look at (CI keeps test-results/).
// Chromium comes from the distribution (config/install-chromium.sh); CHROMIUM_PATH overrides where.
import { accessSync, constants, mkdirSync } from "node:fs"
import { join } from "node:path"
import { type Browser, type BrowserContext, chromium, type Locator, type Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { type LocalFleet, prepareFleet, startFleet } from "../../clusters/local-fleet/index.ts"
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
    await prepareFleet(fleet)
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
    for (const [i, name] of ["member-1", "member-2"].entries()) {
      const row = clusters.rows.nth(i)
      expect(clusters.texts[i]).toContain(name)
      // Ready and Connected are green badges that say so, not a check verdict.
      const okBadges = await row.locator(".badge.ok").allInnerTexts()
      expect(okBadges).toEqual(expect.arrayContaining(["Ready", "Connected"]))
    }
    // member-2 shows its one failing check in the counts (verified / total, failing).
    expect(clusters.texts[1]).toMatch(/0 \/ 1\s+1\s+0/)
    expect(clusters.texts[0]).toMatch(/1 \/ 1\s+0\s+0/)

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
