// Counters and gauges for the hot path. prom-client's labelled children hash and validate their labels
// on every call (0.5–3 µs each), so the series the queue and workers touch are plain numbers, copied
// into prom-client when scraped (its `collect` callback). Removing a series detaches the object: later
// writes to it (a dying worker of a forgotten member) are harmless and never exported.
import {
  Counter,
  Gauge,
  Histogram,
  type MetricObjectWithValues,
  type MetricValueWithName,
  type Registry,
} from "prom-client"

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

/** One series of a hot histogram; `observe` finds the bucket and adds, nothing else. */
export interface FastHistogramSeries {
  observe(value: number): void
}

interface HistogramState {
  readonly labels: Labels
  // per bucket (not cumulative), the last one +Inf
  readonly counts: Float64Array
  sum: number
  count: number
}

/**
 * A histogram for the hot path: prom-client's `labels(...).observe` converts, validates and hashes
 * the labels on every call (three histograms a reconcile: 8% of the engine's own CPU per converged
 * reconcile), this one keeps each series' state behind a key computed once. Its exposition is
 * prom-client's Histogram's, value for value and line for line (test/unit/fast-histogram.test.ts);
 * observe only through `series`.
 */
export class FastHistogram extends Histogram<string> {
  private readonly bounds: ReadonlyArray<number>
  private readonly config: MetricConfig
  private readonly labelOrder: ReadonlyArray<string>
  private readonly states = new Map<string, HistogramState>()

  constructor(
    config: MetricConfig & { readonly buckets: ReadonlyArray<number>; readonly registry: Registry },
  ) {
    super({
      name: config.name,
      help: config.help,
      labelNames: [...config.labelNames],
      buckets: [...config.buckets],
      registers: [config.registry],
    })
    this.config = config
    this.bounds = [...config.buckets]
    this.labelOrder = [...config.labelNames].sort()
  }

  private keyOf(labels: Labels): string {
    let key = ""
    for (const name of this.labelOrder) key += `${name}\u0000${labels[name] ?? ""}\u0001`
    return key
  }

  private fresh(labels: Labels): HistogramState {
    return { labels: { ...labels }, counts: new Float64Array(this.bounds.length + 1), sum: 0, count: 0 }
  }

  /** The series' observer; the series exists (at zero) from its first observation, as prom-client's. */
  series(labels: Labels): FastHistogramSeries {
    const key = this.keyOf(labels)
    const copy = { ...labels }
    const bounds = this.bounds
    const states = this.states
    return {
      observe: (value) => {
        let state = states.get(key)
        if (state === undefined) {
          state = this.fresh(copy)
          states.set(key, state)
        }
        let i = 0
        while (i < bounds.length && value > bounds[i]!) i++
        state.counts[i]! += 1
        state.sum += value
        state.count += 1
      },
    }
  }

  /** Sets the series back to zero, as prom-client's `zero` does. */
  override zero(labels: Labels): void {
    this.states.set(this.keyOf(labels), this.fresh(labels))
  }

  /** Creates the series at zero unless it exists: an existing one keeps its counts (idempotent). */
  ensure(labels: Labels): void {
    const key = this.keyOf(labels)
    if (!this.states.has(key)) this.states.set(key, this.fresh(labels))
  }

  override remove(...args: Array<string> | [Partial<Record<string, string | number>>]): void {
    const labels = args[0]
    if (typeof labels === "object") this.states.delete(this.keyOf(labels as Labels))
  }

  override reset(): void {
    // prom-client's constructor calls reset() before this class's fields exist
    ;(this.states as Map<string, HistogramState> | undefined)?.clear()
  }

  // What prom-client's Histogram gives the registry's text exposition: bucket labels apart from the
  // series' own (sharedLabels), buckets cumulative, then +Inf, _sum and _count.
  async getForPromString() {
    const name = this.config.name
    const values: Array<{
      labels: Labels | { le: number | string }
      sharedLabels: Labels
      value: number
      metricName: string
      exemplar: null | undefined
    }> = []
    for (const state of this.states.values()) {
      let acc = 0
      for (let i = 0; i < this.bounds.length; i++) {
        acc += state.counts[i]!
        values.push({
          labels: { le: this.bounds[i]! },
          sharedLabels: state.labels,
          value: acc,
          metricName: `${name}_bucket`,
          exemplar: null,
        })
      }
      values.push(
        {
          labels: { le: "+Inf" },
          sharedLabels: state.labels,
          value: state.count,
          metricName: `${name}_bucket`,
          exemplar: null,
        },
        {
          labels: {},
          sharedLabels: state.labels,
          value: state.sum,
          metricName: `${name}_sum`,
          exemplar: undefined,
        },
        {
          labels: {},
          sharedLabels: state.labels,
          value: state.count,
          metricName: `${name}_count`,
          exemplar: undefined,
        },
      )
    }
    return { name, help: this.config.help, type: "histogram" as const, values, aggregator: "sum" as const }
  }

  override async get(): Promise<MetricObjectWithValues<MetricValueWithName<string>>> {
    const data = await this.getForPromString()
    return {
      ...data,
      values: data.values.map(({ sharedLabels, labels, ...rest }) => ({
        ...rest,
        labels: { ...labels, ...sharedLabels },
      })),
    } as unknown as MetricObjectWithValues<MetricValueWithName<string>>
  }
}
