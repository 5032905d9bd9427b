// The JSON merge patch (RFC 7386) that turns one JSON value into another: what changed, with null for
// every key that went away. A merge patch of the new status alone would keep fields the hub dropped
// (nextRunTime on suspend, a finished run's completionTime under a new Running lastRun); the diff
// removes them, leaves fields it never saw untouched (another writer's), and is empty when nothing
// changed, so a converged reconcile sends no request at all.

type Json = null | boolean | number | string | Json[] | { [key: string]: Json }

const isObject = (v: unknown): v is Record<string, unknown> =>
  typeof v === "object" && v !== null && !Array.isArray(v)

/** Deep equality of JSON values, whatever order object keys came in (undefined-valued keys count as absent). */
// Written as loops without intermediate arrays: a converged reconcile compares its whole status.
export const jsonEqual = (a: unknown, b: unknown): boolean => {
  if (a === b) return true
  if (Array.isArray(a) && Array.isArray(b)) {
    if (a.length !== b.length) return false
    for (let i = 0; i < a.length; i++) if (!jsonEqual(a[i], b[i])) return false
    return true
  }
  if (isObject(a) && isObject(b)) {
    let defined = 0
    for (const key of Object.keys(a)) {
      const value = a[key]
      if (value === undefined) continue
      defined++
      if (!jsonEqual(value, b[key])) return false
    }
    for (const key of Object.keys(b)) if (b[key] !== undefined) defined--
    return defined === 0
  }
  return false
}

/**
 * The merge patch from `before` to `after`, or undefined when they are equal. Objects are diffed key
 * by key (recursively); arrays and scalars are replaced whole, as RFC 7386 does. Keys whose value is
 * undefined count as absent, as JSON.stringify treats them.
 */
export const mergePatchOf = (before: unknown, after: unknown): Json | undefined => {
  // the same object is no change: a converged reconcile's status shares most of its parts with the record
  if (before === after) return undefined
  if (!isObject(before) || !isObject(after)) {
    return jsonEqual(before, after) ? undefined : (JSON.parse(JSON.stringify(after ?? null)) as Json)
  }
  const patch: { [key: string]: Json } = {}
  for (const key of Object.keys(before)) {
    if (before[key] !== undefined && after[key] === undefined) patch[key] = null
  }
  for (const key of Object.keys(after)) {
    if (after[key] === undefined) continue
    const sub = mergePatchOf(before[key], after[key])
    if (sub !== undefined) patch[key] = sub
  }
  return Object.keys(patch).length === 0 ? undefined : patch
}
