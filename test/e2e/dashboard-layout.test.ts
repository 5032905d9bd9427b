// The dashboard's layout against the names Kubernetes allows and the screens people use: a real
// headless Chromium reads the hub's HTTP face (in-memory members, no clusters needed) at 1280×800 and
// 390×844, with JavaScript on and off. A 253-character cluster and check name, 63-character label
// values and a 1 KiB message must wrap or be clamped with the full text one hover or one click away;
// every column of every table must be reachable (the cell fits in the viewport once its table's own
// scroll container is scrolled to it) and the page itself never scrolls sideways. On a phone (390 px)
// every table is stacked, one card per row with "label value" lines: no cell is clipped by a scroll
// container or reaches past the screen, and no word is split across lines (ids and hex may break). A
// verified check that missed an objective is amber and says so in words; trace ids link through
// --trace-url-template ({traceId} replaced). The stylesheet must
// apply under the Content-Security-Policy (no violation), and every link must stay under a path
// prefix (served here the way the API server's service proxy serves it). Screenshots go to
// test-results/dashboard-layout-*.png.
import { accessSync, constants, mkdirSync } from "node:fs"
import { createServer, request, type Server } from "node:http"
import { join } from "node:path"
import { type Browser, chromium, type Page } from "playwright-core"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import { startHubHttp } from "../../src/hub/http.ts"
import { makeMetrics } from "../../src/observability/metrics/index.ts"
import { clampOf, layoutProblems } from "../support/browser-layout.ts"
import { type CheckSpec, healthyMember, membersMap, unreachableMember } from "../support/fleet-members.ts"

const root = new URL("../../", import.meta.url).pathname
const resultsDir = join(root, "test-results")
const chromiumPath = process.env.CHROMIUM_PATH ?? "/usr/bin/chromium"

// The longest names Kubernetes allows: a DNS-1123 subdomain of 253 characters, a 63-character namespace.
const longCluster = ["a".repeat(63), "b".repeat(63), "c".repeat(63), "d".repeat(61)].join(".")
const longCheck = [
  "orders-db-nightly-restore-verification".padEnd(63, "x"),
  "y".repeat(63),
  "z".repeat(63),
  "w".repeat(61),
].join(".")
const longNamespace = `team-${"n".repeat(58)}`
// 1 KiB, with a 400-character token that has no break opportunity of its own.
const longMessage =
  `pg_restore: error: could not execute query: ${"x".repeat(400)} ${"relation public.orders_line_items does not exist; ".repeat(12)}`.slice(
    0,
    1024,
  )
const longLabelKey = `fleetcheck.example.com/${"k".repeat(63)}`
const longLabelValue = "v".repeat(63)
const prefix = "/api/v1/namespaces/fleetcheck-system/services/http:fleetcheck-hub:8080/proxy"

const members = membersMap([
  healthyMember(
    longCluster,
    [
      {
        namespace: longNamespace,
        name: longCheck,
        status: "False",
        reason: "RestoreFailed",
        message: longMessage,
        objectives: true,
      },
      { namespace: "shop", name: "orders-db-nightly", status: "True" },
      {
        namespace: "ops",
        name: "grafana-db",
        status: "Unknown",
        reason: "RestoreRunning",
        message: "restore Job running",
      },
    ],
    { [longLabelKey]: longLabelValue, env: "prod", region: "eu-central-1", team: "payments-platform" },
  ),
  healthyMember(
    "member-1",
    Array.from(
      { length: 150 },
      (_, i): CheckSpec => ({
        namespace: `ns-${i % 7}`,
        name: `db-${String(i).padStart(3, "0")}`,
        status: i % 40 === 3 ? "False" : "True",
        // one verified check that missed its restore time objective (and met its data age one)
        objectives: i === 5,
      }),
    ),
    { env: "staging" },
  ),
  unreachableMember("member-2", [{ namespace: "shop", name: "orders-db-nightly" }], { env: "prod" }),
])

/** The trace id the fixtures give a member's first check (test/support/fleet-members.ts). */
const firstTraceID = "1".padStart(32, "0")

/**
 * What makes a cell unreadable: a scroll container that scrolls (its columns clipped until scrolled
 * to), a table cell or fact that reaches past the screen or whose text overflows it, and a word split
 * across two lines ("miss" / "ed"): each word of 2 to 20 letters must sit on one line (its Range has
 * client rects on one line only). Text in <code> (ids, hashes, hex) may break anywhere.
 */
const readabilityProblems = (page: Page): Promise<string[]> =>
  page.evaluate(() => {
    const { document } = globalThis as any
    const problems: string[] = []
    const vw = document.documentElement.clientWidth
    for (const c of Array.from<any>(document.querySelectorAll(".scroll")))
      if (c.scrollWidth > c.clientWidth + 1)
        problems.push(
          `table ${c.getAttribute("aria-labelledby")} is clipped in its scroll container: ${c.scrollWidth} px of content in ${c.clientWidth} px`,
        )
    for (const cell of Array.from<any>(document.querySelectorAll("td, dd"))) {
      const table = cell.closest("table")?.getAttribute("aria-labelledby") ?? "facts"
      const column =
        cell.getAttribute("data-label") ?? cell.previousElementSibling?.textContent ?? String(cell.cellIndex)
      const where = `${table} row ${cell.parentElement?.rowIndex ?? "-"} ${column}`
      const b = cell.getBoundingClientRect()
      if (b.left < -1 || b.right > vw + 1)
        problems.push(`${where}: cell ${Math.round(b.left)}–${Math.round(b.right)} px, viewport ${vw} px`)
      if (cell.scrollWidth > cell.clientWidth + 1)
        problems.push(`${where}: text ${cell.scrollWidth} px wide in a ${cell.clientWidth} px cell`)
      const walker = document.createTreeWalker(cell, 4 /* NodeFilter.SHOW_TEXT */)
      for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        if (n.parentElement?.closest("code")) continue
        for (const m of (n.data as string).matchAll(/\p{L}+/gu)) {
          if (m[0].length < 2 || m[0].length > 20) continue
          const range = document.createRange()
          range.setStart(n, m.index)
          range.setEnd(n, (m.index ?? 0) + m[0].length)
          const lines = new Set(
            Array.from<any>(range.getClientRects())
              .filter((r) => r.width > 0)
              .map((r) => Math.round(r.top)),
          )
          if (lines.size > 1) problems.push(`${where}: "${m[0]}" is split across ${lines.size} lines`)
        }
      }
    }
    return [...new Set(problems)]
  })

const requireChromium = () => {
  try {
    accessSync(chromiumPath, constants.X_OK)
  } catch {
    throw new Error(
      `Chromium not found at ${chromiumPath}: bash config/install-chromium.sh, or set CHROMIUM_PATH.`,
    )
  }
}

describe("dashboard layout in a real browser", () => {
  let hub: Server | undefined
  let proxy: Server | undefined
  let browser: Browser | undefined
  let base = ""
  let proxied = ""
  const outsidePrefix: string[] = []

  beforeAll(async () => {
    requireChromium()
    const s = await startHubHttp({
      host: "127.0.0.1",
      port: 0,
      members,
      fleetChecks: new Map(),
      metrics: makeMetrics(),
      isLeader: () => true,
      availability: () => ({ answers: true }),
      identity: "hub-layout",
      access: undefined,
      serves: "all",
      tls: undefined,
      config: { dashboardPageSize: 100, traceUrlTemplate: "https://tempo.example/trace/{traceId}" },
    })
    hub = s.server
    base = `http://127.0.0.1:${s.port}`
    // The API server's service proxy: the hub under a long prefix; anything outside it is a 404.
    proxy = createServer((req, res) => {
      const url = req.url ?? "/"
      if (!url.startsWith(`${prefix}/`)) {
        outsidePrefix.push(url)
        res.writeHead(404).end("outside the proxy prefix")
        return
      }
      const upstream = request(
        {
          host: "127.0.0.1",
          port: s.port,
          path: url.slice(prefix.length),
          method: req.method,
          headers: req.headers,
        },
        (up) => {
          res.writeHead(up.statusCode ?? 502, up.headers)
          up.pipe(res)
        },
      )
      req.pipe(upstream)
    })
    await new Promise<void>((r) => proxy!.listen(0, "127.0.0.1", r))
    const addr = proxy.address()
    proxied = `http://127.0.0.1:${typeof addr === "object" && addr ? addr.port : 0}${prefix}`
    browser = await chromium.launch({
      executablePath: chromiumPath,
      headless: true,
      args: ["--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu"],
    })
    mkdirSync(resultsDir, { recursive: true })
  })

  afterAll(async () => {
    await browser?.close().catch(() => undefined)
    for (const s of [proxy, hub]) if (s) await new Promise((r) => s.close(r))
  })

  const viewports = [
    { width: 1280, height: 800 },
    { width: 390, height: 844 },
  ] as const

  for (const viewport of viewports) {
    for (const js of [false, true]) {
      const tag = `${viewport.width}x${viewport.height}-${js ? "js" : "nojs"}`
      it(`${tag}: long names wrap or clamp with the full text at hand, every column is reachable, no CSP violation`, async () => {
        const context = await browser!.newContext({ viewport, javaScriptEnabled: js, locale: "en-US" })
        const page = await context.newPage()
        const violations: string[] = []
        page.on("console", (m) => {
          if (/Content.Security.Policy|Refused to/i.test(m.text())) violations.push(m.text())
        })
        try {
          const res = await page.goto(`${base}/`, { waitUntil: "load" })
          expect(res?.status()).toBe(200)
          // The stylesheet applied: its hash is in the CSP.
          const badColor = await page
            .locator(".badge.bad")
            .first()
            .evaluate((e) => (globalThis as any).getComputedStyle(e).backgroundColor)
          expect(badColor).toBe("rgb(253, 224, 224)")
          expect(await layoutProblems(page)).toEqual([])
          expect(await readabilityProblems(page)).toEqual([])
          if (viewport.width >= 1280) {
            // On a laptop screen even these names fit: no table needs its scroll bar.
            const overflowing = await page
              .locator(".scroll")
              .evaluateAll((els) => els.filter((e) => e.scrollWidth > e.clientWidth + 1).length)
            expect(overflowing).toBe(0)
          }

          // Page 1: the failing checks first, 100 of 154, with a way to page 2.
          const rows = page.getByRole("table", { name: /Backup checks/ }).locator("tbody tr")
          expect(await rows.count()).toBe(100)
          // biome-ignore lint/performance/useDomNodeTextContent: the rendered text is the point
          const firstRow = await rows.first().innerText()
          expect(firstRow).toContain("Failing")
          expect(firstRow).toContain("RestoreFailed")
          // biome-ignore lint/performance/useDomNodeTextContent: the rendered text is the point
          expect(await page.locator(".summary").innerText()).toMatch(
            /^3 clusters \(1 need attention\) · 154 checks · 5 failing · 2 unknown · 147 verified · 2 missed an objective/,
          )
          // The verified check that missed an objective: amber, in words, the objective named, and
          // ahead of the plain verified rows.
          const missed = rows.filter({ hasText: "ns-5/db-005" })
          expect(await missed.count(), "ahead of the plain verified checks, on page 1").toBe(1)
          // biome-ignore lint/performance/useDomNodeTextContent: the rendered text is the point
          const missedText = await missed.innerText()
          expect(missedText).toContain("ns-5/db-005")
          expect(missedText).toContain("Verified · objective missed")
          expect(missedText).toContain("missed: restore time")
          const amber = await missed
            .locator(".badge")
            .first()
            .evaluate((e) => (globalThis as any).getComputedStyle(e).backgroundColor)
          expect(amber).toBe("rgb(255, 239, 194)")
          // Trace ids link through the template, {traceId} replaced.
          expect(
            await page.locator(`a[href="https://tempo.example/trace/${firstTraceID}"]`).count(),
          ).toBeGreaterThan(0)
          if (viewport.width < 600) {
            // Stacked: each cell of a row on a line of its own, named by its column's header.
            const header = await page
              .getByRole("table", { name: /Backup checks/ })
              .locator("thead th")
              .allInnerTexts()
            const labels = await rows
              .first()
              .locator("td")
              .evaluateAll((cells) =>
                cells.map((c) =>
                  (globalThis as any).getComputedStyle(c, "::before").content.replace(/^"|"$/g, ""),
                ),
              )
            expect(labels).toEqual(header.map((h) => h.replace(/\s+/g, " ")))
            const lefts = await rows
              .first()
              .locator("td")
              .evaluateAll((cells) => cells.map((c) => Math.round(c.getBoundingClientRect().left)))
            expect(new Set(lefts).size).toBe(1)
          }

          // The long check name and the 1 KiB message are clamped, and whole in their title.
          const nameLink = page.locator(`a[title="${longNamespace}/${longCheck}"]`).first()
          await nameLink.scrollIntoViewIfNeeded()
          const nameBox = (await nameLink.boundingBox())!
          expect(await clampOf(nameLink), "check name clamped to 3 lines").toEqual({ lines: 3, hides: true })
          expect(nameBox.x + nameBox.width).toBeLessThanOrEqual(viewport.width)
          const message = page
            .getByRole("table", { name: /Backup checks/ })
            .locator(".msg .clamp")
            .first()
          expect(await message.getAttribute("title")).toBe(longMessage)
          expect(await clampOf(message), "message clamped to 3 lines").toEqual({ lines: 3, hides: true })
          // A long label is cut with an ellipsis and whole on hover.
          const chip = page.locator(`.label[title="${longLabelKey}=${longLabelValue}"]`).first()
          expect(await clampOf(chip)).toEqual({ lines: 1, hides: true })
          const clusterLink = page.locator(`a[title="${longCluster}"]`).first()
          expect((await clampOf(clusterLink)).lines).toBeLessThanOrEqual(3)
          await page.screenshot({
            path: join(resultsDir, `dashboard-layout-${tag}-overview.png`),
            fullPage: true,
          })
          await page.evaluate(() => (globalThis as any).scrollTo(0, 0))
          await page.screenshot({ path: join(resultsDir, `dashboard-layout-${tag}-overview-screen.png`) })

          // The check page: the full name and the whole message, readable at this width.
          await nameLink.click()
          await page.waitForLoadState("load")
          expect(new URL(page.url()).pathname).toBe("/check")
          // biome-ignore lint/performance/useDomNodeTextContent: the rendered text is the point
          const checkText = await page.locator("body").innerText()
          expect(checkText.replace(/\s+/g, "")).toContain(`${longNamespace}/${longCheck}`)
          expect(checkText.replace(/\s+/g, "")).toContain(longMessage.replace(/\s+/g, ""))
          expect(
            await page.locator(`a[href="https://tempo.example/trace/${firstTraceID}"]`).count(),
          ).toBeGreaterThan(0)
          expect(await layoutProblems(page)).toEqual([])
          expect(await readabilityProblems(page)).toEqual([])
          await page.screenshot({
            path: join(resultsDir, `dashboard-layout-${tag}-check.png`),
            fullPage: true,
          })

          // The cluster page: the full cluster name and every label whole.
          await page.locator(`a[href^="./cluster?"]`).first().click()
          await page.waitForLoadState("load")
          // biome-ignore lint/performance/useDomNodeTextContent: the rendered text is the point
          const clusterText = (await page.locator("body").innerText()).replace(/\s+/g, "")
          expect(clusterText).toContain(longCluster)
          expect(clusterText).toContain(longLabelKey)
          expect(clusterText).toContain(longLabelValue)
          expect(await layoutProblems(page)).toEqual([])
          expect(await readabilityProblems(page)).toEqual([])
          await page.screenshot({
            path: join(resultsDir, `dashboard-layout-${tag}-cluster.png`),
            fullPage: true,
          })
          expect(violations).toEqual([])
        } finally {
          await context.close()
        }
      })
    }
  }

  it("works under a path prefix: links, pager and the filter form stay under it (JavaScript off)", async () => {
    const context = await browser!.newContext({
      viewport: { width: 1280, height: 800 },
      javaScriptEnabled: false,
    })
    const page = await context.newPage()
    try {
      const visited: string[] = []
      page.on("response", (r) => visited.push(`${r.status()} ${new URL(r.url()).pathname}`))
      expect((await page.goto(`${proxied}/`))?.status()).toBe(200)
      await page.getByRole("link", { name: "Next ›" }).first().click()
      await page.waitForLoadState("load")
      expect(page.url()).toBe(`${proxied}/?page=2`)
      // biome-ignore lint/performance/useDomNodeTextContent: the rendered text is the point
      expect(await page.locator("body").innerText()).toContain("Page 2 of 2")
      expect(
        await page
          .getByRole("table", { name: /Backup checks/ })
          .locator("tbody tr")
          .count(),
      ).toBe(54)
      await page.getByRole("link", { name: "‹ Previous" }).first().click()
      await page.waitForLoadState("load")
      expect(page.url()).toBe(`${proxied}/`)
      // The filter form, submitted without JavaScript.
      await page.getByLabel("Namespace").fill("ns-3")
      await page.getByLabel("Status").selectOption("False")
      await page.getByRole("button", { name: "Filter" }).click()
      await page.waitForLoadState("load")
      const filtered = new URL(page.url())
      expect(filtered.pathname).toBe(`${prefix}/`)
      expect(filtered.searchParams.get("namespace")).toBe("ns-3")
      const rows = page.getByRole("table", { name: /Backup checks/ }).locator("tbody tr")
      const texts = await rows.allInnerTexts()
      expect(texts.length).toBeGreaterThan(0)
      for (const t of texts) expect(t).toMatch(/Failing[\s\S]*ns-3\//)
      // Drill down and back.
      await page.locator('a[href^="./check?"]').first().click()
      await page.waitForLoadState("load")
      expect(new URL(page.url()).pathname).toBe(`${prefix}/check`)
      await page.getByRole("link", { name: "member-1" }).click()
      await page.waitForLoadState("load")
      expect(new URL(page.url()).pathname).toBe(`${prefix}/cluster`)
      await page.getByRole("link", { name: "← Fleet overview" }).click()
      await page.waitForLoadState("load")
      expect(page.url()).toBe(`${proxied}/`)
      expect(visited.filter((v) => !v.startsWith("200 "))).toEqual([])
      expect(outsidePrefix).toEqual([])
      await page.screenshot({ path: join(resultsDir, "dashboard-layout-prefix.png"), fullPage: true })
    } finally {
      await context.close()
    }
  })
})
