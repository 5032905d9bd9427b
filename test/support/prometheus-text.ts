// Reading a /metrics page (Prometheus text format) in tests: an API server's request counters are the
// evidence many tests rest on, and the hub's own series are what a scraper sees.

export interface Sample {
  readonly labels: Readonly<Record<string, string>>
  readonly value: number
}

const labelPair = /([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"/g

/** The samples of one metric (every line `name{labels} value` or `name value`), in page order. */
export const samplesOf = (text: string, name: string): Array<Sample> => {
  const out: Array<Sample> = []
  for (const line of text.split("\n")) {
    if (!line.startsWith(name)) continue
    const rest = line.slice(name.length)
    if (rest.startsWith(" ")) {
      out.push({ labels: {}, value: Number(rest.trim().split(" ")[0]) })
      continue
    }
    if (!rest.startsWith("{")) continue
    const close = rest.lastIndexOf("}")
    const labels: Record<string, string> = {}
    for (const [, key, value] of rest.slice(1, close).matchAll(labelPair)) labels[key!] = value!
    out.push({
      labels,
      value: Number(
        rest
          .slice(close + 1)
          .trim()
          .split(" ")[0],
      ),
    })
  }
  return out
}

/** Whether every label in `match` has that value on the sample. */
export const hasLabels = (sample: Sample, match: Readonly<Record<string, string>>): boolean =>
  Object.entries(match).every(([k, v]) => sample.labels[k] === v)

/** The sum of one metric's samples whose labels include `match`. */
export const sumOf = (text: string, name: string, match: Readonly<Record<string, string>> = {}): number =>
  samplesOf(text, name)
    .filter((s) => hasLabels(s, match))
    .reduce((sum, s) => sum + s.value, 0)
