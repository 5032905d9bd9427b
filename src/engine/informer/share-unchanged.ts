// Structural sharing between an object's cached version and the next one. A watch event carries the
// whole object, freshly decoded, though an update usually changes a few fields (resourceVersion, a
// label, one condition). Pointing the new object's unchanged parts at the cached object's parts lets
// the decoded copies die young instead of being promoted with the new object (at 500 events a second
// the decoded objects and what was derived from them were about 40% of what the hub promoted,
// docs/performance.md), and lets work derived from a part, such as a parsed spec, be kept per part and
// found again by identity on the next version.
//
// Only the new object is changed, before anyone else sees it; the cached one is never touched, so
// readers holding it are unaffected. Only plain JSON values are shared (what JSON.parse yields);
// anything else is compared by identity. Equal strings are shared too: JSON.parse gives every value a
// fresh copy, and === cannot tell them apart, so an equal string is simply assigned.

/** Deeper than this, parts are left as they are: decoded JSON can nest as deep as its bytes allow. */
const maxDepth = 32

const isPlainObject = (v: unknown): v is Record<string, unknown> => {
  if (typeof v !== "object" || v === null) return false
  const proto = Object.getPrototypeOf(v)
  return proto === Object.prototype || proto === null
}

/**
 * `before` when `after` is JSON-equal to it; otherwise `after`, whose equal parts have been replaced
 * by `before`'s (in place). Object keys compare in any order; undefined-valued keys count as absent.
 */
const share = (before: unknown, after: unknown, depth: number): unknown => {
  if (before === after) return before
  if (depth >= maxDepth) return after
  if (Array.isArray(after)) {
    if (!Array.isArray(before)) return after
    let same = before.length === after.length
    const n = Math.min(before.length, after.length)
    for (let i = 0; i < n; i++) {
      const value = after[i]
      const next = share(before[i], value, depth + 1)
      if (next !== value || typeof next === "string") after[i] = next
      if (next !== before[i]) same = false
    }
    return same ? before : after
  }
  if (isPlainObject(after)) {
    if (!isPlainObject(before)) return after
    let same = true
    let defined = 0
    // for-in over own keys rather than Object.keys: no array of keys per object compared.
    for (const key in after) {
      if (!Object.hasOwn(after, key)) continue
      const value = after[key]
      if (value === undefined) continue
      defined++
      // An own "__proto__" key (JSON.parse makes one) cannot be assigned without changing the prototype.
      if (key === "__proto__" || !Object.hasOwn(before, key)) {
        same = false
        continue
      }
      const next = share(before[key], value, depth + 1)
      if (next !== value || typeof next === "string") after[key] = next
      if (next !== before[key]) same = false
    }
    if (!same) return after
    for (const key in before) if (Object.hasOwn(before, key) && before[key] !== undefined) defined--
    return defined === 0 ? before : after
  }
  return after
}

/**
 * Points every top-level field of `next` that is JSON-equal to the same field of `cached` (and every
 * equal part of the fields that differ) at `cached`'s value, in place. `next` itself stays the object
 * stored: handlers get it as the new version even when nothing but its identity changed.
 */
export const shareUnchanged = (cached: unknown, next: unknown): void => {
  // share() changes `next` in place; what it returns (cached, when all is equal) is not stored.
  if (isPlainObject(cached) && isPlainObject(next)) share(cached, next, 0)
}
