// The html tagged template: escaping is the default for every interpolation, markup only through
// unsafeRaw, and the two mistakes escaping cannot catch (unquoted attributes, script URLs) are refused.
import { readdirSync, readFileSync } from "node:fs"
import { join } from "node:path"
import { assert, describe, it } from "@effect/vitest"
import {
  escapeHtml,
  html,
  type Interpolation,
  isHtml,
  join as joinHtml,
  nothing,
  unsafeRaw,
} from "../../src/hub/html.ts"

const root = new URL("../../", import.meta.url).pathname

describe("html``", () => {
  it("escapes every string interpolation, in text and in quoted attributes", () => {
    const name = `<img src=x onerror="alert(1)">&'`
    assert.strictEqual(
      html`<td title="${name}">${name}</td>`.value,
      '<td title="&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;&#39;">&lt;img src=x onerror=&quot;alert(1)&quot;&gt;&amp;&#39;</td>',
    )
  })

  it("places fragments as they are, so templates nest without double escaping", () => {
    const inner = html`<b>${"a<b"}</b>`
    assert.strictEqual(html`<td>${inner}</td>`.value, "<td><b>a&lt;b</b></td>")
    assert.isTrue(isHtml(inner))
    assert.strictEqual(String(inner), "<b>a&lt;b</b>")
  })

  it("renders numbers, and nothing for null, undefined and false", () => {
    const n: number | undefined = undefined
    assert.strictEqual(html`${42}|${0}|${null}|${n}|${false}|${12n}`.value, "42|0||||12")
    assert.strictEqual(html`${nothing}`.value, "")
  })

  it("joins arrays, escaping each string element and keeping fragments", () => {
    const rows: Interpolation[] = ["<x>", html`<i>y</i>`, ["&", 1]]
    assert.strictEqual(html`<p>${rows}</p>`.value, "<p>&lt;x&gt;<i>y</i>&amp;1</p>")
    assert.strictEqual(joinHtml(["a<", html`<b>b</b>`, "c"], ", ").value, "a&lt;, <b>b</b>, c")
    assert.strictEqual(joinHtml(["a", "b"], html`<br>`).value, "a<br>b")
  })

  it("passes markup only through unsafeRaw", () => {
    assert.strictEqual(html`${unsafeRaw("<hr>")}`.value, "<hr>")
    assert.strictEqual(html`${"<hr>"}`.value, "&lt;hr&gt;")
  })

  it("refuses an interpolation in an unquoted attribute value", () => {
    const v = "x onmouseover=alert(1)"
    assert.throws(() => html`<a href=${v}>x</a>`, /unquoted attribute/)
    assert.throws(() => html`<td class= ${v}>x</td>`, /unquoted attribute/)
    // Text that merely contains "=" is text.
    assert.strictEqual(html`<span>${"k"}=${"v"}</span>`.value, "<span>k=v</span>")
    assert.strictEqual(html`<a href="${"./"}">${"a"}=${"<b>"}</a>`.value, '<a href="./">a=&lt;b&gt;</a>')
  })

  it("refuses objects and true, which would print [object Object] or true", () => {
    assert.throws(() => html`${{ a: 1 } as unknown as string}`, /cannot interpolate/)
    assert.throws(() => html`${true as unknown as string}`, /cannot interpolate/)
  })

  it("turns script URLs in href/src/action into about:invalid, keeps relative and http(s) ones", () => {
    for (const bad of [
      "javascript:alert(1)",
      " JaVaScRiPt:alert(1)",
      "java\tscript:x",
      "data:text/html,x",
      "vbscript:x",
    ])
      assert.strictEqual(html`<a href="${bad}">x</a>`.value, '<a href="about:invalid">x</a>', bad)
    assert.strictEqual(html`<img src='${"javascript:x"}'>`.value, "<img src='about:invalid'>")
    assert.strictEqual(html`<form action="${"javascript:x"}">`.value, '<form action="about:invalid">')
    for (const [good, out] of [
      ["./?failing=true&cluster=a", "./?failing=true&amp;cluster=a"],
      ["check?name=a:b", "check?name=a:b"],
      ["?page=2", "?page=2"],
      ["https://tempo.example/trace/abc", "https://tempo.example/trace/abc"],
      ["http://x/y", "http://x/y"],
      ["#top", "#top"],
    ] as const)
      assert.strictEqual(html`<a href="${good}">x</a>`.value, `<a href="${out}">x</a>`, good)
    // Only URL attributes are checked: a title may say anything, escaped.
    assert.strictEqual(html`<a title="${"javascript:x"}">x</a>`.value, '<a title="javascript:x">x</a>')
  })

  it("escapeHtml covers the five characters that matter", () => {
    assert.strictEqual(escapeHtml(`&<>"'`), "&amp;&lt;&gt;&quot;&#39;")
  })

  it("the dashboard has no hand escaping and no raw markup but through unsafeRaw", () => {
    const dir = join(root, "src/hub/dashboard")
    const files = readdirSync(dir).map((f) => join(dir, f))
    for (const file of files) {
      const text = readFileSync(file, "utf8")
      assert.notMatch(text, /\besc\(/, `${file} escapes by hand`)
      assert.notMatch(text, /\bescapeHtml\(/, `${file} escapes by hand`)
      // Every string that becomes markup is an html`` template: no render function returns a plain
      // string built with a template literal full of tags.
      assert.notMatch(
        text,
        /(?<!html)`\s*<(?:tr|td|div|table|a|span|p|h\d)\b/,
        `${file} builds markup outside html\`\``,
      )
    }
  })
})
