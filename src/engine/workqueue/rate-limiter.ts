// Rate limiters with the contract of k8s.io/client-go/util/workqueue/default_rate_limiters.go.
// Pure and synchronous: the caller passes "now" in milliseconds, so the queue can feed them
// Effect's Clock (TestClock in tests) and benchmarks can feed them anything.

export interface RateLimiter {
  /** Delay in ms before `key` may be processed again; records one more failure for `key`. */
  when(key: string, nowMs: number): number
  /** Clears the key's failure history (a success); limiters without per-key state ignore it. */
  forget(key: string): void
  /** How many times `key` has been rate-limited since its last forget. */
  numRequeues(key: string): number
}

export interface ExponentialOptions {
  /** Delay after the first failure, in ms. Default 5 (client-go's 5 ms). */
  readonly baseDelayMs?: number
  /** Upper bound of the delay, in ms. Default 1_000_000 (client-go's 1000 s). */
  readonly maxDelayMs?: number
}

/** Per-key exponential backoff: base * 2^failures, capped at max (ItemExponentialFailureRateLimiter). */
export class ItemExponentialFailureRateLimiter implements RateLimiter {
  readonly baseDelayMs: number
  readonly maxDelayMs: number
  private readonly failures = new Map<string, number>()

  constructor(options: ExponentialOptions = {}) {
    this.baseDelayMs = options.baseDelayMs ?? 5
    this.maxDelayMs = options.maxDelayMs ?? 1_000_000
  }

  when(key: string, _nowMs: number): number {
    const exp = this.failures.get(key) ?? 0
    this.failures.set(key, exp + 1)
    // 2 ** exp reaches Infinity for large exp, which the cap absorbs (Go checks MaxInt64 instead)
    return Math.min(this.baseDelayMs * 2 ** exp, this.maxDelayMs)
  }

  forget(key: string): void {
    this.failures.delete(key)
  }

  numRequeues(key: string): number {
    return this.failures.get(key) ?? 0
  }
}

export interface BucketOptions {
  /** Tokens added per second. Default 10. */
  readonly qps?: number
  /** Bucket size, and its content at start. Default 100. */
  readonly burst?: number
}

/**
 * Overall token bucket shared by all keys (BucketRateLimiter over golang.org/x/time/rate).
 * `when` reserves a token and returns how long until it is available, like
 * `Limiter.Reserve().Delay()`: tokens may go negative, so each call past the burst waits 1/qps longer.
 */
export class BucketRateLimiter implements RateLimiter {
  readonly qps: number
  readonly burst: number
  private tokens: number
  private lastMs: number | undefined = undefined

  constructor(options: BucketOptions = {}) {
    this.qps = options.qps ?? 10
    this.burst = options.burst ?? 100
    this.tokens = this.burst
  }

  when(_key: string, nowMs: number): number {
    // advance(): refill for the time elapsed since the last reservation; a clock that moved
    // backwards refills nothing, as in x/time/rate
    let tokens = this.tokens
    if (this.lastMs !== undefined && nowMs > this.lastMs) {
      tokens += ((nowMs - this.lastMs) * this.qps) / 1000
      if (tokens > this.burst) tokens = this.burst
    }
    tokens -= 1
    this.tokens = tokens
    this.lastMs = nowMs
    return tokens < 0 ? (-tokens * 1000) / this.qps : 0
  }

  forget(_key: string): void {}

  numRequeues(_key: string): number {
    return 0
  }
}

/** The worst (longest) delay of several limiters; every limiter sees every call (MaxOfRateLimiter). */
export class MaxOfRateLimiter implements RateLimiter {
  readonly limiters: ReadonlyArray<RateLimiter>

  constructor(...limiters: ReadonlyArray<RateLimiter>) {
    this.limiters = limiters
  }

  when(key: string, nowMs: number): number {
    let max = 0
    // no early exit: each limiter must record the failure (and the bucket its reservation)
    for (const limiter of this.limiters) {
      const delay = limiter.when(key, nowMs)
      if (delay > max) max = delay
    }
    return max
  }

  forget(key: string): void {
    for (const limiter of this.limiters) limiter.forget(key)
  }

  numRequeues(key: string): number {
    let max = 0
    for (const limiter of this.limiters) {
      const n = limiter.numRequeues(key)
      if (n > max) max = n
    }
    return max
  }
}

/** client-go's DefaultControllerRateLimiter: max(per-key exponential 5 ms → 1000 s, bucket 10 qps burst 100). */
export const defaultControllerRateLimiter = (): RateLimiter =>
  new MaxOfRateLimiter(
    new ItemExponentialFailureRateLimiter({ baseDelayMs: 5, maxDelayMs: 1_000_000 }),
    new BucketRateLimiter({ qps: 10, burst: 100 }),
  )
