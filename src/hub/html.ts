// HTML that cannot forget to escape. `html` is a tagged template: every interpolation is escaped
// unless it is itself an `Html` fragment (made by `html` or by `unsafeRaw`), so member-controlled text
// (check names, labels, messages) can only become markup through a call someone wrote on purpose and a
// reviewer can grep for: `unsafeRaw(`. Arrays of fragments are joined; null, undefined and false
// render nothing, so `${cond && html`...`}` works. Two mistakes the escaping alone would not catch are
// refused when the template runs: an interpolation in an unquoted attribute value (`<a href=${x}>`,
// where a space would start a new attribute), and a URL attribute (href, src, action, formaction)
// whose value names a scheme other than http or https (`javascript:` and friends become
// `about:invalid`, as Go's html/template does with `#ZgotmplZ`).

const brand: unique symbol = Symbol("fleetcheck/hub/html")

/** A fragment of markup that is safe to place as is. Only `html` and `unsafeRaw` make one. */
export interface Html {
  readonly [brand]: true
  readonly value: string
  toString(): string
}

/** What may be interpolated: text (escaped), numbers, fragments, lists of these, or nothing. */
export type Interpolation =
  | Html
  | string
  | number
  | bigint
  | false
  | null
  | undefined
  | ReadonlyArray<Interpolation>

const fragment = (value: string): Html => ({ [brand]: true, value, toString: () => value })

export const isHtml = (v: unknown): v is Html =>
  typeof v === "object" && v !== null && (v as { [brand]?: unknown })[brand] === true

const entities: Record<string, string> = {
  "&": "&amp;",
  "<": "&lt;",
  ">": "&gt;",
  '"': "&quot;",
  "'": "&#39;",
}

/** Escapes text for an element body or a quoted attribute value. */
export const escapeHtml = (s: string): string => s.replace(/[&<>"']/g, (c) => entities[c] ?? c)

/**
 * Markup placed as is, without escaping. Only for text the program wrote itself (never anything a
 * member, a request or a user controls); every use is a line a reviewer should read.
 */
export const unsafeRaw = (markup: string): Html => fragment(markup)

/** The empty fragment. */
export const nothing: Html = fragment("")

const render = (v: Interpolation): string => {
  if (v === null || v === undefined || v === false) return ""
  if (typeof v === "string") return escapeHtml(v)
  if (typeof v === "number" || typeof v === "bigint") return escapeHtml(String(v))
  if (isHtml(v)) return v.value
  if (Array.isArray(v)) return v.map(render).join("")
  // Anything else ("[object Object]", true) is a bug at the call site, not something to print.
  throw new TypeError(`html: cannot interpolate ${typeof v === "object" ? "an object" : String(v)}`)
}

const unquotedAttribute = /=\s*$/
const urlAttribute = /\s(?:href|src|action|formaction)\s*=\s*["']$/i
const safeScheme = /^(?:https?:|[^:]*(?:[/?#]|$))/i

/** The value of a URL attribute: relative or http(s); any other scheme becomes about:invalid. */
const urlValue = (v: Interpolation): string => {
  const text = isHtml(v) ? v.value : render(v)
  // Browsers drop tabs and newlines and trim spaces and controls before reading a scheme.
  const probe = text.replace(/[\u0000-\u0020]/g, "")
  return safeScheme.test(probe) ? text : "about:invalid"
}

/** The tagged template: `html\`<td>${name}</td>\`` escapes `name`. */
export const html = (strings: TemplateStringsArray, ...values: ReadonlyArray<Interpolation>): Html => {
  let out = strings[0] ?? ""
  for (let i = 0; i < values.length; i++) {
    const before = strings[i] ?? ""
    // Inside a tag when the markup so far opened one and has not closed it (values are escaped, so
    // only the template's own text has < and >).
    const inTag = out.lastIndexOf("<") > out.lastIndexOf(">")
    if (inTag && unquotedAttribute.test(before))
      throw new TypeError(
        `html: interpolation in an unquoted attribute value after ${JSON.stringify(before.slice(-40))}`,
      )
    const v = values[i] as Interpolation
    out += inTag && urlAttribute.test(before) ? urlValue(v) : render(v)
    out += strings[i + 1] ?? ""
  }
  return fragment(out)
}

/** Joins fragments with a separator (itself escaped unless it is a fragment). */
export const join = (parts: ReadonlyArray<Interpolation>, separator: Interpolation): Html =>
  fragment(parts.map((p, i) => (i === 0 ? render(p) : render(separator) + render(p))).join(""))
