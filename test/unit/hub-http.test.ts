// The hub's HTTP face on loopback with in-memory members (no cluster): security headers on every
// route, typed JSON, strict query parameters (unknown, repeated, oversized → 400), the fleet API's
// filters and paging, the dashboard's pages, relative links only, and 503 with why when this hub
// cannot answer for the fleet.
import type { Server } from "node:http"
import { afterAll, assert, beforeAll, describe, it } from "@effect/vitest"
import { FleetViewSchema } from "../../src/api/fleet.ts"
import { makeAccessReview, type ReviewTarget } from "../../src/hub/access-review.ts"
import { defaultHubConfig, resolveHubConfig } from "../../src/hub/config.ts"
import type { MemberEntry } from "../../src/hub/fleet-state.ts"
import { type Availability, contentSecurityPolicy, startHubHttp } from "../../src/hub/http.ts"
import { makeMetrics } from "../../src/observability/metrics/index.ts"
import {
  fleetChecksMap,
  fleetCheckView,
  healthyMember,
  membersMap,
  unreachableMember,
} from "../support/fleet-members.ts"

const longName = `db-${"x".repeat(250)}`
const members = membersMap([
  healthyMember(
    "m1",
    [
      { namespace: "shop", name: "orders", status: "True" },
      {
        namespace: "shop",
        name: "payments",
        status: "False",
        message: `<script>alert(1)</script> ${"m".repeat(1000)}`,
      },
      { namespace: "ops", name: longName, status: "Unknown", reason: "RestoreRunning" },
    ],
    { env: "prod", "example.com/owner": `<b>${"o".repeat(60)}</b>`.slice(0, 63) },
  ),
  healthyMember("m2", [{ namespace: "shop", name: "orders", status: "True" }], { env: "staging" }),
  unreachableMember("m3", [{ namespace: "shop", name: "orders", status: "True" }], { env: "prod" }),
])

const fleetChecks = fleetChecksMap([
  fleetCheckView("orders", "True", [
    { name: "m1", status: "True" },
    { name: "m2", status: "True" },
  ]),
  fleetCheckView("payments", "False", [
    { name: "m1", status: "False", reason: "RestoreTimedOut" },
    { name: "m2", status: "False", reason: "NameConflict", placement: "Conflict" },
  ]),
])

let availability: Availability = { answers: true }
let server: Server | undefined
let base = ""
let traceServer: Server | undefined
let traceBase = ""

const start = async (
  m: Map<string, MemberEntry>,
  config: { dashboardPageSize: number; traceUrlTemplate?: string } = defaultHubConfig,
  fleet = fleetChecks,
) =>
  startHubHttp({
    host: "127.0.0.1",
    port: 0,
    members: m,
    fleetChecks: fleet,
    metrics: makeMetrics(),
    isLeader: () => true,
    availability: () => availability,
    identity: "hub-test",
    access: undefined,
    serves: "all",
    tls: undefined,
    config,
  })

beforeAll(async () => {
  const a = await start(members)
  server = a.server
  base = `http://127.0.0.1:${a.port}`
  const b = await start(members, {
    dashboardPageSize: 10,
    traceUrlTemplate: "https://tempo.example/trace/{traceID}?x=1",
  })
  traceServer = b.server
  traceBase = `http://127.0.0.1:${b.port}`
})
afterAll(async () => {
  for (const s of [server, traceServer]) await new Promise((r) => s?.close(r))
})

const get = async (path: string, b = base) => {
  const res = await fetch(`${b}${path}`)
  return { res, text: await res.text() }
}
const json = async (path: string) => {
  const { res, text } = await get(path)
  return { status: res.status, type: res.headers.get("content-type"), body: JSON.parse(text) }
}

describe("every route", () => {
  const routes = [
    "/healthz",
    "/readyz",
    "/metrics",
    "/api/v1/fleet",
    "/",
    "/cluster?name=m1",
    "/check?cluster=m1&namespace=shop&name=orders",
    "/nope",
    "/?bogus=1",
  ]
  it("carries the CSP (no script, frame-ancestors 'none'), nosniff and no-referrer", async () => {
    for (const path of routes) {
      const { res } = await get(path)
      const csp = res.headers.get("content-security-policy") ?? ""
      assert.strictEqual(csp, contentSecurityPolicy, path)
      assert.match(csp, /default-src 'none'/)
      assert.match(csp, /frame-ancestors 'none'/)
      assert.notMatch(csp, /script-src|unsafe-inline|unsafe-eval/)
      assert.strictEqual(res.headers.get("x-content-type-options"), "nosniff", path)
      assert.strictEqual(res.headers.get("referrer-policy"), "no-referrer", path)
      assert.strictEqual(res.headers.get("cache-control"), "no-store", path)
      assert.isNotNull(res.headers.get("content-type"), path)
    }
  })

  it("types its answers: JSON with charset, HTML, plain text", async () => {
    assert.strictEqual(
      (await get("/api/v1/fleet")).res.headers.get("content-type"),
      "application/json; charset=utf-8",
    )
    assert.strictEqual(
      (await get("/api/v1/fleet?bogus=1")).res.headers.get("content-type"),
      "application/json; charset=utf-8",
    )
    assert.strictEqual((await get("/")).res.headers.get("content-type"), "text/html; charset=utf-8")
    assert.strictEqual((await get("/healthz")).res.headers.get("content-type"), "text/plain; charset=utf-8")
  })

  it("refuses unknown, repeated and oversized query parameters with 400 and says which", async () => {
    const cases: Array<[string, RegExp]> = [
      ["/api/v1/fleet?clustr=m1", /unknown query parameter "clustr"; this path takes cluster, namespace/],
      ["/api/v1/fleet?cluster=m1&cluster=m2", /"cluster" given twice/],
      [`/api/v1/fleet?cluster=${"a".repeat(257)}`, /"cluster" is longer than 256 characters/],
      [`/api/v1/fleet?continue=${"a".repeat(2049)}&limit=1`, /"continue" is longer than 2048/],
      ["/api/v1/fleet?status=Maybe", /status must be one of True, False, Unknown/],
      ["/api/v1/fleet?failing=yes", /failing must be true or false/],
      ["/api/v1/fleet?limit=0", /limit must be a whole number from 1 to 10000/],
      ["/api/v1/fleet?limit=10001", /limit must be/],
      ["/api/v1/fleet?limit=1e3", /limit must be/],
      ["/api/v1/fleet?label=env%3D%3D%3Dx", /label selector/],
      ["/api/v1/fleet?limit=2&continue=bm9wZQ", /continue token is not valid/],
      ["/api/v1/fleet?continue=bm9wZQ", /continue token is not valid|continue needs limit/],
      ["/healthz?x=1", /unknown query parameter "x": this path takes none/],
      ["/metrics?name[]=a", /unknown query parameter/],
      ["/?page=0", /page must be a whole number/],
      ["/?limit=5", /unknown query parameter "limit"/],
      ["/cluster", /name is required/],
      ["/check?cluster=m1", /cluster, namespace and name are required/],
    ]
    for (const [path, why] of cases) {
      const { res, text } = await get(path)
      assert.strictEqual(res.status, 400, path)
      const shown = path.startsWith("/api/") ? JSON.parse(text).message : text.replaceAll("&quot;", '"')
      assert.match(shown, why, path)
      if (path.startsWith("/api/")) {
        const body = JSON.parse(text)
        assert.deepInclude(body, { kind: "Status", status: "Failure", reason: "BadRequest", code: 400 }, path)
      }
      // A query value is never reflected unescaped.
      assert.notInclude(text, "<script", path)
    }
    const { res } = await get(`/?cluster=${"<".repeat(300)}`)
    assert.strictEqual(res.status, 400)
    assert.strictEqual((await get(`/api/v1/fleet?cluster=${"a".repeat(5000)}`)).res.status, 414)
  })

  it("answers 404 for unknown paths, clusters and checks, and 405 for writes", async () => {
    assert.strictEqual((await get("/nope")).res.status, 404)
    assert.strictEqual((await get("/cluster?name=zz")).res.status, 404)
    assert.strictEqual((await get("/check?cluster=m1&namespace=shop&name=zz")).res.status, 404)
    assert.strictEqual((await fetch(`${base}/api/v1/fleet`, { method: "POST" })).status, 405)
  })
})

describe("/api/v1/fleet", () => {
  it("filters server-side and parses with the CLI's schema", async () => {
    const all = await json("/api/v1/fleet")
    assert.strictEqual(all.status, 200)
    assert.isTrue(FleetViewSchema.safeParse(all.body).success)
    assert.deepStrictEqual(all.body.summary, {
      clusters: 3,
      healthyClusters: 2,
      checks: { total: 5, verified: 2, failed: 1, unknown: 2 },
    })
    const q = async (query: string) =>
      (await json(`/api/v1/fleet?${query}`)).body.checks.map((c: any) => `${c.cluster}/${c.name}`)
    assert.deepStrictEqual(await q("status=False"), ["m1/payments"])
    assert.deepStrictEqual(await q("namespace=ops"), [`m1/${longName}`])
    assert.deepStrictEqual(await q("failing=true&cluster=m3"), ["m3/orders"])
    assert.deepStrictEqual(await q("label=env%3Dstaging"), ["m2/orders"])
    assert.deepStrictEqual(await q("label=env%20in%20(prod)&status=True"), ["m1/orders"])
    // The dashboard's filter form sends every field; empty ones filter nothing.
    assert.deepStrictEqual(await q("cluster=&namespace=&status=&label="), await q(""))
    const form = await get("/?cluster=&namespace=&status=&label=")
    assert.strictEqual(form.res.status, 200)
  })

  it("carries the FleetBackupChecks, failing first, on the first page only; failing and cluster filter them", async () => {
    const all = await json("/api/v1/fleet")
    assert.isTrue(FleetViewSchema.safeParse(all.body).success)
    const names = (body: any) => (body.fleetChecks ?? []).map((f: any) => `${f.name}=${f.verified.status}`)
    assert.deepStrictEqual(names(all.body), ["payments=False", "orders=True"])
    assert.deepStrictEqual(names((await json("/api/v1/fleet?failing=true")).body), ["payments=False"])
    assert.deepStrictEqual(names((await json("/api/v1/fleet?cluster=m3")).body), [])
    const first = (await json("/api/v1/fleet?limit=1")).body
    assert.deepStrictEqual(names(first), ["payments=False"].concat("orders=True"))
    const next = (await json(`/api/v1/fleet?limit=1&continue=${encodeURIComponent(first.metadata.continue)}`))
      .body
    assert.notProperty(next, "fleetChecks")
  })

  it("pages with limit and continue; metadata.continue is absent on the last page", async () => {
    const seen: string[] = []
    const clusters: string[] = []
    let path = "/api/v1/fleet?failing=false&limit=2"
    for (let i = 0; i < 10; i++) {
      const { body } = await json(path)
      assert.isAtMost(body.checks.length, 2)
      seen.push(...body.checks.map((c: any) => `${c.cluster}/${c.namespace}/${c.name}`))
      clusters.push(...body.clusters.map((c: any) => c.name))
      const token = body.metadata?.continue
      if (!token) break
      assert.isNumber(body.metadata.remainingItemCount)
      path = `/api/v1/fleet?failing=false&limit=2&continue=${encodeURIComponent(token)}`
    }
    const whole = (await json("/api/v1/fleet")).body
    assert.deepStrictEqual(
      seen,
      whole.checks.map((c: any) => `${c.cluster}/${c.namespace}/${c.name}`),
    )
    assert.deepStrictEqual(clusters, ["m1", "m2", "m3"])
    // The token belongs to its filters.
    const first = (await json("/api/v1/fleet?limit=1")).body.metadata.continue
    const other = await json(`/api/v1/fleet?limit=1&status=True&continue=${first}`)
    assert.strictEqual(other.status, 400)
    assert.match(other.body.message, /other filters/)
  })

  it("a walk's continue pages come from its first page's snapshot; without it, from a fresh view by key", async () => {
    const m2 = members.get("m2")!
    const before = m2.checks
    const first = (await json("/api/v1/fleet?limit=2")).body
    try {
      // A new failing check appears after the first page: the walk does not see it (one consistent fleet).
      const extra = healthyMember("m2", [
        { namespace: "shop", name: "orders", status: "True" },
        { namespace: "aaa", name: "new-failure", status: "False" },
      ])
      m2.checks = extra.checks
      const walk = [...first.checks]
      let token = first.metadata.continue
      while (token) {
        const page = (await json(`/api/v1/fleet?limit=2&continue=${encodeURIComponent(token)}`)).body
        assert.strictEqual(page.generatedAt, first.generatedAt)
        walk.push(...page.checks)
        token = page.metadata?.continue
      }
      assert.strictEqual(walk.length, 5)
      assert.isFalse(walk.some((c: any) => c.name === "new-failure"))
      // A token whose snapshot is gone (another replica, expired): a fresh view after the same keys.
      const raw = JSON.parse(Buffer.from(first.metadata.continue, "base64url").toString())
      raw.s = "gone"
      const orphan = Buffer.from(JSON.stringify(raw)).toString("base64url")
      const fresh = (await json(`/api/v1/fleet?limit=10&continue=${orphan}`)).body
      // After m1's unknown check: m3's (unknown, unreachable), then the verified ones; the new failure
      // sorts before the cursor, so this walk does not show it.
      assert.deepStrictEqual(
        fresh.checks.map((c: any) => `${c.cluster}/${c.name}`),
        ["m3/orders", "m1/orders", "m2/orders"],
      )
      assert.notStrictEqual(fresh.generatedAt, undefined)
    } finally {
      m2.checks = before
    }
  })

  it("a standby or syncing hub answers 503 with why, on the API and the dashboard", async () => {
    availability = {
      answers: false,
      reason: "Standby",
      message: "standby: this hub does not lead; the leader is hub-0",
    }
    try {
      const api = await json("/api/v1/fleet?limit=5")
      assert.strictEqual(api.status, 503)
      assert.deepInclude(api.body, { reason: "Standby", hub: "hub-test" })
      const page = await get("/")
      assert.strictEqual(page.res.status, 503)
      assert.include(page.text, "the leader is hub-0")
      assert.notInclude(page.text, "all verified")
      assert.strictEqual((await get("/cluster?name=m1")).res.status, 503)
      assert.strictEqual((await get("/readyz")).res.status, 503)
    } finally {
      availability = { answers: true }
    }
  })
})

describe("dashboard pages", () => {
  const hrefs = (text: string) =>
    [...text.matchAll(/\b(?:href|action|src)="([^"]*)"/g)].map((m) => m[1]!.replaceAll("&amp;", "&"))

  it("links relatively only, so it works under a path prefix", async () => {
    for (const path of [
      "/",
      "/?failing=true&page=1",
      "/cluster?name=m1",
      "/check?cluster=m1&namespace=shop&name=payments",
    ]) {
      const { text } = await get(path)
      const links = hrefs(text)
      assert.isAbove(links.length, 0, path)
      for (const h of links) assert.match(h, /^(\.\/|\?)/, `${path}: ${h}`)
      assert.notMatch(text, /<script/i)
      assert.notMatch(text, /\sstyle="/, "inline style attributes would need 'unsafe-inline'")
    }
  })

  it("escapes member-controlled text everywhere and keeps the full text on the check page", async () => {
    const overview = (await get("/")).text
    assert.notInclude(overview, "<script>alert(1)")
    assert.include(overview, "&lt;script&gt;alert(1)&lt;/script&gt;")
    assert.notInclude(overview, "<b>ooo")
    const { res, text } = await get("/check?cluster=m1&namespace=shop&name=payments")
    assert.strictEqual(res.status, 200)
    assert.include(text, `&lt;script&gt;alert(1)&lt;/script&gt; ${"m".repeat(1000)}`)
    assert.include(text, "s3://backups/db.dump")
    assert.include(text, "0 3 * * *")
  })

  it("links trace ids when --trace-url-template is set, and not otherwise", async () => {
    const trace = "00000000000000000000000000000002"
    const path = "/check?cluster=m1&namespace=shop&name=payments"
    assert.notInclude((await get(path)).text, "tempo.example")
    const withTemplate = (await get(path, traceBase)).text
    assert.include(withTemplate, `href="https://tempo.example/trace/${trace}?x=1"`)
    assert.include((await get("/", traceBase)).text, `href="https://tempo.example/trace/${trace}?x=1"`)
  })

  it("shows the FleetBackupChecks on the overview, each selected cluster with its own verdict", async () => {
    const { text } = await get("/")
    const section = text.slice(text.indexOf('id="fleet-checks"'), text.indexOf('id="clusters"'))
    assert.match(section, /Fleet checks/)
    assert.isBelow(section.indexOf("payments"), section.lastIndexOf("orders"), "failing first")
    assert.match(section, /ChecksFailing/)
    // A placed check links to its page; a cluster where it is not placed links to the cluster.
    assert.include(section, 'href="./check?cluster=m1&amp;namespace=shop&amp;name=orders"')
    assert.include(section, 'href="./cluster?name=m2"')
    assert.match(section, /Conflict/)
    assert.notMatch((await get("/?page=2")).text, /id="fleet-checks"/)
  })

  it("lists clusters needing attention first on the overview (the API keeps name order)", async () => {
    const text = (await get("/")).text
    const clusters = text.slice(text.indexOf('id="clusters"'), text.indexOf('id="checks"'))
    const order = [...clusters.matchAll(/href="\.\/cluster\?name=([^"]+)"/g)].map((m) => m[1])
    assert.deepStrictEqual(order, ["m1", "m3", "m2"]) // failing, unreachable, healthy
    const api = (await json("/api/v1/fleet")).body
    assert.deepStrictEqual(
      api.clusters.map((c: any) => c.name),
      ["m1", "m2", "m3"],
    )
  })

  it("pages the overview: counts for the whole view, failing first, previous/next links", async () => {
    const big = membersMap(
      Array.from({ length: 3 }, (_, c) =>
        healthyMember(
          `c${c}`,
          Array.from({ length: 10 }, (_, k) => ({
            name: `k${k}`,
            status: k === 9 ? ("False" as const) : ("True" as const),
          })),
        ),
      ),
    )
    const s = await start(big, { dashboardPageSize: 10 }, new Map())
    try {
      const b = `http://127.0.0.1:${s.port}`
      const p1 = (await get("/", b)).text
      assert.include(p1, '3 clusters · 30 checks · <strong class="bad-text">3 failing</strong>')
      assert.include(p1, "Page 1 of 3")
      assert.include(p1, 'href="./?page=2" rel="next"')
      assert.include(p1, "1–10 of 30 checks")
      // The three failing checks lead page 1.
      const firstRows = [...p1.matchAll(/<tr class="(row-bad|)">/g)].map((m) => m[1]).slice(0, 4)
      assert.deepStrictEqual(firstRows, ["row-bad", "row-bad", "row-bad", ""])
      const p3 = (await get("/?page=3&status=True", b)).text
      assert.include(p3, "Page 3 of 3")
      assert.include(p3, 'href="./?status=True&amp;page=2" rel="prev"')
      assert.include(p3, "All 3 clusters are on earlier pages.")
      const beyond = (await get("/?page=9", b)).text
      assert.include(beyond, "are on earlier pages")
    } finally {
      await new Promise((r) => s.server.close(r))
    }
  })
})

describe("dashboard settings", () => {
  it("default to 100 per page and no trace link; the template must be http(s) with {traceID}", () => {
    assert.strictEqual(defaultHubConfig.dashboardPageSize, 100)
    assert.strictEqual(defaultHubConfig.traceUrlTemplate, undefined)
    const ok = resolveHubConfig({ "trace-url-template": "https://t.example/{traceID}" }, {})
    assert.strictEqual(ok.traceUrlTemplate, "https://t.example/{traceID}")
    for (const bad of ["https://t.example/", "javascript:alert('{traceID}')", "https://t.example/ {traceID}"])
      assert.throws(() => resolveHubConfig({ "trace-url-template": bad }, {}), /--trace-url-template/)
    assert.throws(() => resolveHubConfig({ "dashboard-page-size": "5" }, {}), /--dashboard-page-size/)
  })
})

describe("secure serving", () => {
  // An in-memory reviewer: "reader" may get every path, "nobody" none, any other token is unknown.
  const asked: ReviewTarget[] = []
  const access = makeAccessReview({
    authenticate: async (token) => (["reader", "nobody"].includes(token) ? { username: token } : undefined),
    authorize: async (user, target) => {
      asked.push(target)
      return user.username === "reader"
    },
  })
  let secure: Server | undefined
  let dashboardOnly: Server | undefined
  let secureBase = ""
  let dashboardBase = ""
  beforeAll(async () => {
    const common = {
      host: "127.0.0.1",
      port: 0,
      members,
      fleetChecks,
      metrics: makeMetrics(),
      isLeader: () => true,
      availability: () => availability,
      identity: "hub-secure",
      config: defaultHubConfig,
      tls: undefined,
    }
    const a = await startHubHttp({ ...common, access, serves: "all" })
    const b = await startHubHttp({ ...common, access: undefined, serves: "dashboard" })
    secure = a.server
    dashboardOnly = b.server
    secureBase = `http://127.0.0.1:${a.port}`
    dashboardBase = `http://127.0.0.1:${b.port}`
  })
  afterAll(async () => {
    for (const s of [secure, dashboardOnly]) await new Promise((r) => s?.close(r))
  })
  const as = async (path: string, token?: string, b = secureBase) => {
    const res = await fetch(`${b}${path}`, token ? { headers: { authorization: `Bearer ${token}` } } : {})
    return { res, text: await res.text() }
  }
  const protectedPaths = ["/metrics", "/api/v1/fleet", "/", "/cluster?name=m1", "/nope", "/api/v1/nope"]

  it("probes stay open; every other path is 401 without a token or with an unknown one, before routing", async () => {
    for (const path of ["/healthz", "/readyz"]) assert.strictEqual((await as(path)).res.status, 200, path)
    for (const path of protectedPaths)
      for (const token of [undefined, "random"]) {
        const { res, text } = await as(path, token)
        assert.strictEqual(res.status, 401, `${path} ${token}`)
        assert.strictEqual(res.headers.get("www-authenticate"), 'Bearer realm="fleetcheck"')
        assert.strictEqual(res.headers.get("content-security-policy"), contentSecurityPolicy, path)
        assert.strictEqual(res.headers.get("x-content-type-options"), "nosniff", path)
        assert.strictEqual(res.headers.get("referrer-policy"), "no-referrer", path)
        assert.notInclude(text, "m1", "nothing of the fleet before the verdict")
      }
    const api = await as("/api/v1/fleet")
    assert.strictEqual(api.res.headers.get("content-type"), "application/json; charset=utf-8")
    assert.strictEqual(JSON.parse(api.text).reason, "Unauthorized")
  })

  it("403 when the review denies, the route's own answer when it allows", async () => {
    for (const path of protectedPaths) assert.strictEqual((await as(path, "nobody")).res.status, 403, path)
    assert.strictEqual((await as("/metrics", "reader")).res.status, 200)
    const fleet = await as("/api/v1/fleet?limit=1", "reader")
    assert.strictEqual(fleet.res.status, 200)
    assert.isTrue(FleetViewSchema.safeParse(JSON.parse(fleet.text)).success)
    assert.strictEqual((await as("/nope", "reader")).res.status, 404)
    assert.strictEqual((await as("/api/v1/fleet?bogus=1", "reader")).res.status, 400)
    // The fleet API as a resource (its non-resource URL is every authenticated user's by default RBAC),
    // everything else as the path.
    assert.deepInclude(asked, { group: "fleetcheck.io", resource: "fleet" })
    assert.deepInclude(asked, { path: "/metrics" })
    assert.deepInclude(asked, { path: "/cluster" })
    assert.notDeepInclude(asked, { path: "/api/v1/fleet" })
    await as("/api/v1/report?since=1d", "reader")
    assert.deepInclude(asked, { group: "fleetcheck.io", resource: "report" })
    assert.notDeepInclude(asked, { path: "/api/v1/report" })
  })

  it("the dashboard's own listener serves the dashboard only, without a token, with the same headers", async () => {
    for (const path of ["/", "/cluster?name=m1", "/check?cluster=m1&namespace=shop&name=orders"]) {
      const { res } = await as(path, undefined, dashboardBase)
      assert.strictEqual(res.status, 200, path)
      assert.strictEqual(res.headers.get("content-security-policy"), contentSecurityPolicy, path)
    }
    for (const path of ["/metrics", "/api/v1/fleet", "/healthz", "/readyz"]) {
      const { res } = await as(path, "reader", dashboardBase)
      assert.strictEqual(res.status, 404, path)
      assert.strictEqual(res.headers.get("x-content-type-options"), "nosniff", path)
    }
  })
})
