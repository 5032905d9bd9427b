// The metric names PromQL expressions read, and the names the hub exports (from its own registry and
// per-check families, never a hand list), so the rules and the dashboard can be checked against them.
import { makeMetrics } from "../../src/observability/metrics/index.ts"

/** Every series name the hub's /metrics can carry (a histogram's _bucket, _sum and _count included). */
export const hubMetricNames = async (): Promise<ReadonlySet<string>> => {
  const text = await makeMetrics({ processMetrics: true, memberHistograms: true }).render()
  const names = new Set<string>()
  for (const [, name, type] of text.matchAll(/^# TYPE (\S+) (\S+)$/gm)) {
    if (type === "histogram" || type === "summary") {
      for (const suffix of ["_bucket", "_sum", "_count"]) names.add(`${name}${suffix}`)
    } else names.add(name!)
  }
  return names
}

// PromQL words that are not metric names: functions are followed by "(" and are dropped by that.
const keywords = new Set([
  "by",
  "without",
  "on",
  "ignoring",
  "group_left",
  "group_right",
  "bool",
  "and",
  "or",
  "unless",
  "offset",
  "inf",
  "nan",
])

/**
 * The metric names an expression selects: label matchers, strings, ranges, grouping clauses and
 * function names removed, what is left and looks like a name is one.
 */
export const metricNamesIn = (expr: string): Array<string> => {
  const stripped = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, " ")
    .replace(/\[[^\]]*\]/g, " ")
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " ")
  const names = new Set<string>()
  for (const m of stripped.matchAll(/(?<![\w:$.])([A-Za-z_:][\w:]*)(?![\w:])(?!\s*\()/g)) {
    const word = m[1]!
    if (!keywords.has(word.toLowerCase())) names.add(word)
  }
  return [...names]
}
