// Layout checks run inside a real browser page (Playwright evaluates them in the page, with or without
// the page's own JavaScript): whether every table column is reachable and whether text is clamped.
import type { Locator, Page } from "playwright-core"

/** Lines an element shows, and whether it hides some of its text (clamped or cut with an ellipsis). */
export const clampOf = (l: Locator) =>
  l.evaluate((e) => {
    // Runs in the page; the project compiles without the DOM library.
    const { getComputedStyle } = globalThis as any
    const style = getComputedStyle(e)
    const lineHeight = Number.parseFloat(style.lineHeight)
    return {
      lines: Math.round(e.getBoundingClientRect().height / lineHeight),
      hides: e.scrollHeight > e.clientHeight + 1 || e.scrollWidth > e.clientWidth + 1,
    }
  })

/** Every way a table column is out of reach, or the page scrolls sideways; empty when the layout holds. */
export const layoutProblems = (page: Page): Promise<string[]> =>
  page.evaluate(() => {
    const { document, window } = globalThis as any
    const problems: string[] = []
    const vw = document.documentElement.clientWidth
    if (document.documentElement.scrollWidth > vw + 1)
      problems.push(`the page scrolls sideways: ${document.documentElement.scrollWidth} px > ${vw} px`)
    for (const table of Array.from<any>(document.querySelectorAll("table"))) {
      const container = table.closest(".scroll")
      const name = table.getAttribute("aria-labelledby")
      if (!container) {
        problems.push(`table ${name} is not in a scroll container`)
        continue
      }
      for (const row of Array.from<any>(table.rows).slice(0, 40)) {
        for (const cell of Array.from<any>(row.cells)) {
          if (cell.colSpan > 1) continue
          cell.scrollIntoView({ block: "nearest", inline: "nearest" })
          const c = container.getBoundingClientRect()
          const b = cell.getBoundingClientRect()
          if (
            b.width === 0 ||
            b.left < c.left - 1 ||
            b.right > c.right + 1 ||
            b.left < -1 ||
            b.right > vw + 1
          )
            problems.push(
              `${name} row ${row.rowIndex} column ${cell.cellIndex}: cell ${Math.round(b.left)}–${Math.round(b.right)} px, container ${Math.round(c.left)}–${Math.round(c.right)} px, viewport ${vw} px`,
            )
        }
      }
      container.scrollLeft = 0
    }
    window.scrollTo(0, 0)
    return problems
  })
