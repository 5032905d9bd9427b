// Who may read the hub's protected routes, decided the way controller-runtime's secure metrics serving
// and kube-rbac-proxy decide it: the request's bearer token is authenticated by a TokenReview and the
// user it names is authorized by a SubjectAccessReview, both at the hub's own API server with the hub's
// own credentials. No token or a bad one is 401, a denied review is 403, a review the API server could
// not answer is 503 (never a 401: the token may be fine).
//
// What is reviewed: the request's path as a non-resource URL (verb get), except for the fleet API. Its
// paths lie under /api/, which the API server's built-in `system:discovery` ClusterRole grants to every
// authenticated user (`/api/*`), so a non-resource review there would allow anyone with a token. The
// fleet API's routes are reviewed as a resource of the fleetcheck.io group instead, as the kubelet's
// /metrics is reviewed as `nodes/metrics`: /api/v1/fleet is `get` on `fleet.fleetcheck.io`.
//
// Verdicts are cached briefly and boundedly, and reviews the cache cannot answer are rate-limited, so a
// flood of random tokens neither grows memory nor sends the API server more than `reviewsPerSecond`
// (after a burst): what does not fit waits in a short queue or is refused with 429. Tokens are never
// kept: cache keys are their SHA-256.
import { createHash } from "node:crypto"
import * as z from "zod"

/** How long a verdict (authenticated or not, allowed or denied) is reused, as the API server's webhook caches do. */
export const verdictTtlMs = 10_000
/** Most verdicts kept per cache (authentication and authorization each); the least recently used goes first. */
export const maxCachedVerdicts = 4_096
/** Reviews sent to the API server per second once the burst is spent (each is a TokenReview, then a SAR). */
export const reviewsPerSecond = 20
export const reviewBurst = 40
/** Requests that may wait for a review permit; more are answered 429 at once. */
export const maxWaitingReviews = 64
/** A bearer token longer than this is refused unread (service account tokens are about 1 KiB). */
export const maxTokenLength = 16 * 1024

export interface ReviewedUser {
  readonly username: string
  readonly uid?: string | undefined
  readonly groups?: ReadonlyArray<string> | undefined
  readonly extra?: Readonly<Record<string, ReadonlyArray<string>>> | undefined
}

/** What the hub asks its API server; the adapter over a KubeClient is in hub.ts. */
/** What a request is authorized as: a non-resource URL, or a resource of an API group (cluster-wide). */
export type ReviewTarget = { readonly path: string } | { readonly group: string; readonly resource: string }

export const describeTarget = (t: ReviewTarget): string =>
  "path" in t ? `path ${JSON.stringify(t.path)}` : `${t.resource}.${t.group}`

export interface Reviewer {
  /** The user the token belongs to, or undefined when the API server does not authenticate it. */
  readonly authenticate: (token: string) => Promise<ReviewedUser | undefined>
  readonly authorize: (user: ReviewedUser, target: ReviewTarget, verb: string) => Promise<boolean>
}

export type Verdict =
  | { readonly status: 200; readonly user: string }
  | { readonly status: 401 | 403 | 429 | 503; readonly reason: string; readonly message: string }

const TokenReviewStatus = z.object({
  status: z
    .object({
      authenticated: z.boolean().optional(),
      user: z
        .object({
          username: z.string().max(1024).optional(),
          uid: z.string().max(1024).optional(),
          groups: z.array(z.string().max(1024)).max(1024).optional(),
          extra: z.record(z.string().max(1024), z.array(z.string().max(4096)).max(256)).optional(),
        })
        .optional(),
    })
    .optional(),
})
const SubjectAccessReviewStatus = z.object({
  status: z.object({ allowed: z.boolean(), denied: z.boolean().optional() }).optional(),
})

/** The user a TokenReview answer names, or undefined; throws on an answer that is not a TokenReview. */
export const readTokenReview = (body: unknown): ReviewedUser | undefined => {
  const parsed = TokenReviewStatus.parse(body)
  const s = parsed.status
  if (s?.authenticated !== true || !s.user?.username) return undefined
  return { username: s.user.username, uid: s.user.uid, groups: s.user.groups, extra: s.user.extra }
}

export const readSubjectAccessReview = (body: unknown): boolean =>
  SubjectAccessReviewStatus.parse(body).status?.allowed === true

export const tokenReviewBody = (token: string) => ({
  apiVersion: "authentication.k8s.io/v1",
  kind: "TokenReview",
  spec: { token },
})

export const subjectAccessReviewBody = (user: ReviewedUser, target: ReviewTarget, verb: string) => ({
  apiVersion: "authorization.k8s.io/v1",
  kind: "SubjectAccessReview",
  spec: {
    user: user.username,
    ...(user.uid ? { uid: user.uid } : {}),
    ...(user.groups ? { groups: user.groups } : {}),
    ...(user.extra ? { extra: user.extra } : {}),
    ...("path" in target
      ? { nonResourceAttributes: { path: target.path, verb } }
      : { resourceAttributes: { group: target.group, resource: target.resource, verb } }),
  },
})

/** The verb a request's method stands for, as the API server's request info resolves it. */
export const verbOf = (method: string | undefined): string =>
  method === "GET" || method === "HEAD" ? "get" : (method ?? "").toLowerCase()

/** `Bearer <token>` → the token; undefined for no header, another scheme or a malformed token. */
export const bearerToken = (header: string | undefined): string | undefined => {
  if (header === undefined) return undefined
  const m = /^bearer[ ]+([^\s]+)[ ]*$/i.exec(header)
  return m && m[1]!.length <= maxTokenLength ? m[1] : undefined
}

/** A Map used as an LRU with a TTL per entry. */
const makeCache = <V>(ttlMs: number, max: number) => {
  const entries = new Map<string, { value: V; expires: number }>()
  return {
    get: (key: string, now: number): V | undefined => {
      const e = entries.get(key)
      if (!e) return undefined
      entries.delete(key)
      if (e.expires <= now) return undefined
      entries.set(key, e)
      return e.value
    },
    set: (key: string, value: V, now: number) => {
      entries.delete(key)
      while (entries.size >= max) entries.delete(entries.keys().next().value!)
      entries.set(key, { value, expires: now + ttlMs })
    },
    size: () => entries.size,
  }
}

/** A token bucket whose waiters queue in order; `take` resolves false at once when the queue is full. */
const makePermits = (perSecond: number, burst: number, maxWaiting: number, now: () => number) => {
  let tokens = burst
  let refilled = now()
  const waiting: Array<() => void> = []
  let drainScheduled = false
  const refill = () => {
    const t = now()
    tokens = Math.min(burst, tokens + ((t - refilled) / 1000) * perSecond)
    refilled = t
  }
  const drain = () => {
    drainScheduled = false
    refill()
    while (waiting.length > 0 && tokens >= 1) {
      tokens -= 1
      waiting.shift()!()
    }
    if (waiting.length > 0) schedule()
  }
  const schedule = () => {
    if (drainScheduled) return
    drainScheduled = true
    setTimeout(drain, Math.ceil(((1 - tokens) / perSecond) * 1000))
  }
  return {
    take: (): Promise<boolean> => {
      refill()
      if (waiting.length === 0 && tokens >= 1) {
        tokens -= 1
        return Promise.resolve(true)
      }
      if (waiting.length >= maxWaiting) return Promise.resolve(false)
      return new Promise<boolean>((resolve) => {
        waiting.push(() => resolve(true))
        schedule()
      })
    },
    waiting: () => waiting.length,
  }
}

export interface AccessReview {
  /** The verdict for a request's Authorization header on `target` with `verb`. */
  readonly review: (authorization: string | undefined, target: ReviewTarget, verb: string) => Promise<Verdict>
  /** Verdicts held (authentication + authorization) and requests waiting: for tests and benchmarks. */
  readonly stats: () => { readonly cached: number; readonly waiting: number }
}

export const makeAccessReview = (reviewer: Reviewer, now: () => number = Date.now): AccessReview => {
  const users = makeCache<ReviewedUser | null>(verdictTtlMs, maxCachedVerdicts)
  const decisions = makeCache<boolean>(verdictTtlMs, maxCachedVerdicts)
  const permits = makePermits(reviewsPerSecond, reviewBurst, maxWaitingReviews, now)
  // Concurrent requests with the same question share one review.
  const inflight = new Map<string, Promise<Verdict>>()
  const busy: Verdict = {
    status: 429,
    reason: "TooManyRequests",
    message: "too many credential reviews at once; retry shortly",
  }

  const decide = async (
    token: string,
    hash: string,
    target: ReviewTarget,
    verb: string,
    key: string,
  ): Promise<Verdict> => {
    let user = users.get(hash, now())
    if (user === undefined) {
      if (!(await permits.take())) return busy
      user = (await reviewer.authenticate(token)) ?? null
      users.set(hash, user, now())
    }
    if (user === null)
      return { status: 401, reason: "Unauthorized", message: "the bearer token was not authenticated" }
    let allowed = decisions.get(key, now())
    if (allowed === undefined) {
      if (!(await permits.take())) return busy
      allowed = await reviewer.authorize(user, target, verb)
      decisions.set(key, allowed, now())
    }
    return allowed
      ? { status: 200, user: user.username }
      : {
          status: 403,
          reason: "Forbidden",
          message: `user ${JSON.stringify(user.username)} may not ${verb} ${describeTarget(target)}`,
        }
  }

  return {
    review: (authorization, target, verb) => {
      const token = bearerToken(authorization)
      if (token === undefined)
        return Promise.resolve({
          status: 401,
          reason: "Unauthorized",
          message: "a bearer token is required (Authorization: Bearer <token>)",
        })
      const hash = createHash("sha256").update(token).digest("hex")
      const key = `${hash} ${verb} ${"path" in target ? `url ${target.path}` : `res ${target.group} ${target.resource}`}`
      const running = inflight.get(key)
      if (running) return running
      // The reviewer logs why (the API server's answer names the hub's own identity): the caller only
      // learns that it was not a verdict.
      const verdict = decide(token, hash, target, verb, key)
        .catch(
          (): Verdict => ({
            status: 503,
            reason: "ServiceUnavailable",
            message: "the hub could not review the credentials with its API server; retry shortly",
          }),
        )
        .finally(() => inflight.delete(key))
      inflight.set(key, verdict)
      return verdict
    },
    stats: () => ({ cached: users.size() + decisions.size(), waiting: permits.waiting() }),
  }
}
