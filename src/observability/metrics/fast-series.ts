// Counters and gauges for the hot path. prom-client's labelled children hash and validate their labels
// on every call (0.5–3 µs each), so the series the queue and workers touch are plain numbers, copied
// into prom-client when scraped (its `collect` callback). Removing a series detaches the object: later
// writes to it (a dying worker of a forgotten member) are harmless and never exported.
import { Counter, Gauge, type Registry } from "prom-client"

export type Labels = Record<string, string>

/** One series of a hot counter or gauge: the hot path only touches `value`. */
export interface FastSeries {
  readonly labels: Labels
  value: number
  // the part of a counter's value already added to prom-client
  flushed: number
}

export interface FastMetric {
  /** Creates the series at zero. */
  series(labels: Labels): FastSeries
  /** Drops the series; later writes to the object are never exported. */
  remove(series: FastSeries): void
}

export interface MetricConfig {
  readonly name: string
  readonly help: string
  readonly labelNames: ReadonlyArray<string>
}

export const fastCounter = (config: MetricConfig, registry: Registry): FastMetric => {
  const live = new Set<FastSeries>()
  const metric: Counter = new Counter({
    ...config,
    labelNames: [...config.labelNames],
    registers: [registry],
    collect: () => {
      for (const s of live) {
        if (s.value === s.flushed) continue
        metric.inc(s.labels, s.value - s.flushed)
        s.flushed = s.value
      }
    },
  })
  return {
    series: (labels) => {
      const s: FastSeries = { labels, value: 0, flushed: 0 }
      metric.inc(labels, 0)
      live.add(s)
      return s
    },
    remove: (s) => {
      live.delete(s)
      metric.remove(s.labels)
    },
  }
}

export const fastGauge = (config: MetricConfig, registry: Registry): FastMetric => {
  const live = new Set<FastSeries>()
  const metric: Gauge = new Gauge({
    ...config,
    labelNames: [...config.labelNames],
    registers: [registry],
    collect: () => {
      for (const s of live) metric.set(s.labels, s.value)
    },
  })
  return {
    series: (labels) => {
      const s: FastSeries = { labels, value: 0, flushed: 0 }
      metric.set(labels, 0)
      live.add(s)
      return s
    },
    remove: (s) => {
      live.delete(s)
      metric.remove(s.labels)
    },
  }
}
