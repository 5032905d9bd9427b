// `fleetcheck status` reads every page of the fleet API: the table and the exit code cover the whole
// fleet, not the first page; a page that fails mid-walk is exit 3, never a partial "all good".
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import type { Server } from "node:http"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { afterAll, afterEach, assert, beforeAll, describe, it, vi } from "@effect/vitest"
import type { FleetCheckView, FleetView } from "../../src/api/fleet.ts"
import { hubConnection } from "../../src/cli/hub-request.ts"
import {
  credentialsFor,
  refusalMessage,
  renderStatus,
  runStatus,
  statusExitCode,
} from "../../src/cli/status.ts"
import { makeAccessReview } from "../../src/hub/access-review.ts"
import { defaultHubConfig } from "../../src/hub/config.ts"
import { type Availability, startHubHttp } from "../../src/hub/http.ts"
import { selfSignedServingPair } from "../../src/hub/serving/self-signed.ts"
import { makeMetrics } from "../../src/observability/metrics/index.ts"
import { fleetCheckView, healthyMember, membersMap } from "../support/fleet-members.ts"

const members = membersMap(
  Array.from({ length: 3 }, (_, c) =>
    healthyMember(
      `cluster-${c}`,
      Array.from({ length: 4 }, (_, k) => ({ name: `check-${c}-${k}`, status: "True" as const })),
    ),
  ),
)
/** Empty but for the FleetBackupCheck test. */
const fleetChecks = new Map<string, FleetCheckView>()
let availability: Availability = { answers: true }
let requests: string[] = []
let server: Server | undefined
let hub = ""

beforeAll(async () => {
  const s = await startHubHttp({
    config: defaultHubConfig,
    host: "127.0.0.1",
    port: 0,
    members,
    fleetChecks,
    metrics: makeMetrics(),
    isLeader: () => true,
    availability: () => availability,
    identity: "hub-test",
    access: undefined,
    serves: "all",
    tls: undefined,
  })
  server = s.server
  server.prependListener("request", (req) => {
    requests.push(req.url ?? "")
    // The third request finds a hub that lost its lead.
    if (requests.length === 3 && process.env.STATUS_TEST_FAIL_THIRD === "1")
      availability = { answers: false, reason: "Standby", message: "standby now" }
  })
  hub = `http://127.0.0.1:${s.port}`
})
afterAll(() => new Promise((r) => server?.close(r)))

const run = async (args: string[]) => {
  const out: string[] = []
  const err: string[] = []
  const o = vi.spyOn(process.stdout, "write").mockImplementation((s) => out.push(String(s)) > 0)
  const e = vi.spyOn(process.stderr, "write").mockImplementation((s) => err.push(String(s)) > 0)
  try {
    requests = []
    const code = await runStatus(args)
    return { code, out: out.join(""), err: err.join("") }
  } finally {
    o.mockRestore()
    e.mockRestore()
  }
}

afterEach(() => {
  fleetChecks.clear()
  availability = { answers: true }
  delete process.env.STATUS_TEST_FAIL_THIRD
})

describe("fleetcheck status pages", () => {
  it("follows continue tokens until the last page and shows every cluster and check", async () => {
    const r = await run(["--hub", hub, "--limit", "2"])
    assert.strictEqual(r.code, 0, r.err)
    assert.strictEqual(requests.length, 6) // 12 checks, 2 per page
    assert.match(requests[0]!, /limit=2/)
    assert.match(requests[1]!, /limit=2&continue=/)
    for (let c = 0; c < 3; c++) {
      assert.include(r.out, `cluster-${c}`)
      for (let k = 0; k < 4; k++) assert.include(r.out, `check-${c}-${k}`)
    }
    const json = await run(["--hub", hub, "--limit", "5", "-o", "json"])
    const body = JSON.parse(json.out)
    assert.strictEqual(body.checks.length, 12)
    assert.strictEqual(body.clusters.length, 3)
    assert.notProperty(body, "metadata")
    assert.deepStrictEqual(body.summary.checks, { total: 12, verified: 12, failed: 0, unknown: 0 })
  })

  it("shows FleetBackupChecks with each selected cluster's verdict; one not verified makes it exit 1", async () => {
    const view = fleetCheckView("orders", "Unknown", [
      { name: "cluster-0", status: "True" },
      { name: "cluster-1", status: "Unknown", reason: "ClusterUnreachable" },
    ])
    fleetChecks.set("fleetcheck-system/orders", view)
    const r = await run(["--hub", hub, "--limit", "2"])
    assert.strictEqual(r.code, 1, "every check verified, but the fleet check is not")
    assert.match(r.out, /FLEET CHECK\s+FLEET VERIFIED\s+REASON\s+VERIFIED\s+CLUSTERS/)
    assert.match(
      r.out,
      /fleetcheck-system\/orders\s+Unknown\s+ClusterUnreachable\s+1\/2\s+cluster-0=True cluster-1=Unknown\(ClusterUnreachable\)/,
    )
    const json = JSON.parse((await run(["--hub", hub, "--limit", "2", "-o", "json"])).out)
    assert.strictEqual(json.fleetChecks.length, 1)
  })

  it("shows drills by source and target; a failed drill makes it exit 1", async () => {
    const view = {
      ...fleetCheckView("xdr", "False", [{ name: "cluster-0", status: "True" }]),
      drills: [
        {
          source: "cluster-0",
          target: "cluster-1",
          state: "Current",
          status: "False" as const,
          reason: "RestoreTimedOut",
        },
        {
          source: "cluster-0",
          target: "cluster-2",
          state: "Previous",
          status: "True" as const,
          reason: "RestoreSucceeded",
          lastSuccessfulTime: "2026-12-01T03:00:00Z",
        },
      ],
    }
    fleetChecks.set("fleetcheck-system/xdr", view)
    const r = await run(["--hub", hub, "--limit", "2"])
    assert.strictEqual(r.code, 1)
    assert.match(r.out, /FLEET CHECK\s+DRILL \(SOURCE -> TARGET\)\s+ROUND\s+VERIFIED\s+REASON\s+LAST SUCCESS/)
    assert.match(
      r.out,
      /fleetcheck-system\/xdr\s+cluster-0 -> cluster-1\s+Current\s+False\s+RestoreTimedOut\s+never/,
    )
    assert.match(
      r.out,
      /fleetcheck-system\/xdr\s+cluster-0 -> cluster-2\s+Previous\s+True\s+RestoreSucceeded\s+2026-12-01T03:00:00Z/,
    )
  })

  it("exits 3 when a later page cannot be read", async () => {
    process.env.STATUS_TEST_FAIL_THIRD = "1"
    const r = await run(["--hub", hub, "--limit", "2"])
    assert.strictEqual(r.code, 3)
    assert.match(r.err, /page 3: HTTP 503: standby now/)
    assert.strictEqual(r.out, "")
  })

  it("refuses a bad --limit", async () => {
    assert.strictEqual((await run(["--hub", hub, "--limit", "0"])).code, 2)
    assert.strictEqual((await run(["--hub", hub, "--limit", "x"])).code, 2)
  })
})

// Objectives (spec.objectives): an OBJECTIVES column once any check has them, and how many missed one.
const objectivesView = (withObjectives: boolean): FleetView => ({
  generatedAt: "2026-12-01T03:00:00Z",
  summary: {
    clusters: 1,
    healthyClusters: 1,
    checks: {
      total: 2,
      verified: 2,
      failed: 0,
      unknown: 0,
      ...(withObjectives ? { objectivesMissed: 1 } : {}),
    },
  },
  clusters: [],
  checks: [
    {
      cluster: "m1",
      namespace: "shop",
      name: "orders",
      status: "True",
      reason: "ValidationSucceeded",
      message: "ok",
      ...(withObjectives ? { objectives: { restoreTime: "False" as const, dataAge: "True" as const } } : {}),
    },
    {
      cluster: "m1",
      namespace: "shop",
      name: "plain",
      status: "True",
      reason: "RestoreSucceeded",
      message: "ok",
    },
  ],
})

describe("status with objectives", () => {
  it("adds an OBJECTIVES column and a count of misses", () => {
    const text = renderStatus(objectivesView(true))
    assert.match(text, /LAST SUCCESS\s+OBJECTIVES\s+MESSAGE/)
    assert.match(text, /orders\s+True\s+ValidationSucceeded\s+never\s+restore-time=False data-age=True\s+ok/)
    assert.match(text, /1 check missed an objective/)
  })

  it("a missed objective is exit 1, unless --ignore-objectives", async () => {
    assert.strictEqual(statusExitCode(objectivesView(true), false), 1)
    assert.strictEqual(statusExitCode(objectivesView(true), true), 0)
    assert.strictEqual(statusExitCode(objectivesView(false), false), 0)
    // a FleetBackupCheck whose only fault is a missed objective: 1, and 0 with the flag
    const fleetMissed = {
      ...objectivesView(false),
      fleetChecks: [
        (() => {
          const f = fleetCheckView("orders", "False", [{ name: "m1", status: "True" }])
          return { ...f, verified: { ...f.verified, reason: "ObjectivesMissed" } }
        })(),
      ],
    }
    assert.strictEqual(statusExitCode(fleetMissed, false), 1)
    assert.strictEqual(statusExitCode(fleetMissed, true), 0)
    // the flag is taken (this hub's fleet has no objectives: 0 with it and without)
    assert.strictEqual((await run(["--hub", hub, "--ignore-objectives"])).code, 0)
  })

  it("is unchanged without objectives", () => {
    const text = renderStatus(objectivesView(false))
    assert.notMatch(text, /OBJECTIVES|missed an objective/)
  })
})

describe("fleetcheck status against a hub with secure serving", () => {
  // The hub's review is in memory here ("reader" may read, "nobody" may not; the API-server-backed
  // review is proven in test/integration/deploy.test.ts). What is under test: which token status sends,
  // and that it sends it only to a hub whose certificate it verified. The hub serves HTTPS with a
  // self-signed certificate for localhost and 127.0.0.1; --hub-ca-file trusts it.
  const seen: Array<string | undefined> = []
  let secure: Server | undefined
  let secureHub = ""
  let securePort = 0
  const dir = mkdtempSync(join(tmpdir(), "status-kubeconfig-"))
  const pair = selfSignedServingPair(["localhost", "127.0.0.1"])
  const caFile = join(dir, "hub-ca.crt")
  writeFileSync(caFile, pair.cert)
  const otherCaFile = join(dir, "other-ca.crt")
  writeFileSync(otherCaFile, selfSignedServingPair(["localhost", "127.0.0.1"]).cert)
  /** status against the TLS hub, trusting its certificate. */
  const runTls = (args: string[]) => run(["--hub", secureHub, "--hub-ca-file", caFile, ...args])
  const kubeconfig = (name: string, user: Record<string, unknown>) => {
    const file = join(dir, `${name}.kubeconfig`)
    writeFileSync(
      file,
      JSON.stringify({
        apiVersion: "v1",
        kind: "Config",
        clusters: [{ name: "hub", cluster: { server: "https://hub.invalid:6443" } }],
        users: [{ name, user }],
        contexts: [{ name: "hub", context: { cluster: "hub", user: name } }],
        "current-context": "hub",
      }),
    )
    return file
  }
  beforeAll(async () => {
    const s = await startHubHttp({
      config: defaultHubConfig,
      host: "127.0.0.1",
      port: 0,
      members,
      fleetChecks,
      metrics: makeMetrics(),
      isLeader: () => true,
      availability: () => ({ answers: true }),
      identity: "hub-secure",
      access: makeAccessReview({
        authenticate: async (t) => (["reader", "nobody"].includes(t) ? { username: `user-${t}` } : undefined),
        authorize: async (u) => u.username === "user-reader",
      }),
      serves: "all",
      tls: pair,
    })
    secure = s.server as Server
    secure.prependListener("request", (req) => seen.push(req.headers.authorization))
    securePort = s.port
    secureHub = `https://127.0.0.1:${s.port}`
  })
  afterAll(async () => {
    await new Promise((r) => secure?.close(r))
    rmSync(dir, { recursive: true, force: true })
  })

  it("sends the kubeconfig's bearer token on every page", async () => {
    seen.length = 0
    const r = await runTls(["--limit", "5", "--kubeconfig", kubeconfig("t", { token: "reader" })])
    assert.strictEqual(r.code, 0, r.err)
    assert.strictEqual(seen.length, 3)
    assert.deepStrictEqual(new Set(seen), new Set(["Bearer reader"]))
  })

  it("sends the token an exec credential plugin returns", async () => {
    const credential = JSON.stringify({
      apiVersion: "client.authentication.k8s.io/v1",
      kind: "ExecCredential",
      status: { token: "reader" },
    })
    const file = kubeconfig("exec", {
      exec: {
        apiVersion: "client.authentication.k8s.io/v1",
        command: process.execPath,
        args: ["-e", `process.stdout.write(${JSON.stringify(credential)})`],
        interactiveMode: "Never",
      },
    })
    const r = await runTls(["--kubeconfig", file])
    assert.strictEqual(r.code, 0, r.err)
  })

  it("explains 401 without a token or with a rejected one, and 403, with exit 3", async () => {
    const none = await runTls(["--kubeconfig", kubeconfig("none", {})])
    assert.strictEqual(none.code, 3)
    assert.match(none.err, /wants a bearer token .*kubeconfig user "none" \(context "hub"\) has none/)
    const bad = await runTls(["--kubeconfig", kubeconfig("bad", { token: "stolen" })])
    assert.strictEqual(bad.code, 3)
    assert.match(bad.err, /did not accept the token of kubeconfig user "bad".*401/)
    const denied = await runTls(["--kubeconfig", kubeconfig("nobody", { token: "nobody" })])
    assert.strictEqual(denied.code, 3)
    assert.match(
      denied.err,
      /kubeconfig user "nobody" .*may not read the fleet \(403: .*user-nobody.*fleetcheck-fleet-reader/,
    )
    assert.strictEqual(denied.out, "")
    const missing = await runTls(["--kubeconfig", join(dir, "absent")])
    assert.strictEqual(missing.code, 3)
    assert.match(missing.err, /cannot read the kubeconfig/)
  })

  it("verifies the hub's certificate: the right CA reads, a wrong CA, a wrong name or none is refused before any token goes", async () => {
    const token = kubeconfig("v", { token: "reader" })
    seen.length = 0
    const wrongCa = await run(["--hub", secureHub, "--hub-ca-file", otherCaFile, "--kubeconfig", token])
    assert.strictEqual(wrongCa.code, 3)
    assert.match(
      wrongCa.err,
      /the hub's certificate is not signed by the CA in --hub-ca-file \(DEPTH_ZERO_SELF_SIGNED_CERT: .*\); give the CA that issued it with --hub-ca-file/,
    )
    const noCa = await run(["--hub", secureHub, "--kubeconfig", token])
    assert.strictEqual(noCa.code, 3)
    assert.match(noCa.err, /not signed by a CA this machine trusts/)
    const wrongName = await runTls([
      "--tls-server-name",
      "fleetcheck-hub.fleetcheck-system.svc",
      "--kubeconfig",
      token,
    ])
    assert.strictEqual(wrongName.code, 3)
    assert.match(wrongName.err, /not for fleetcheck-hub\.fleetcheck-system\.svc .*--tls-server-name/)
    assert.deepStrictEqual(seen, [], "no request reached the hub, so no token left")
    // The certificate's own name through another address (a port-forward) is accepted with --tls-server-name.
    assert.strictEqual((await runTls(["--tls-server-name", "localhost", "--kubeconfig", token])).code, 0)
    // Skipping verification is a flag of its own, and excludes a CA.
    assert.strictEqual(
      (await run(["--hub", secureHub, "--insecure-skip-tls-verify", "--kubeconfig", token])).code,
      0,
    )
    const both = await run(["--hub", secureHub, "--insecure-skip-tls-verify", "--hub-ca-file", caFile])
    assert.strictEqual(both.code, 2)
    assert.match(both.err, /exclude each other/)
    const badCa = await run(["--hub", secureHub, "--hub-ca-file", token])
    assert.strictEqual(badCa.code, 2)
    assert.match(badCa.err, /--hub-ca-file .*status-kubeconfig-.*v\.kubeconfig: /)
    // Plain http:// to the TLS port: no answer, and the message says the hub speaks https.
    const plain = await run(["--hub", `http://127.0.0.1:${securePort}`, "--kubeconfig", token])
    assert.strictEqual(plain.code, 3)
    assert.match(plain.err, /a hub with --secure-serving speaks https:\/\//)
    const caOverHttp = await run(["--hub", `http://127.0.0.1:${securePort}`, "--hub-ca-file", caFile])
    assert.strictEqual(caOverHttp.code, 2)
  })

  it("a token goes over https, or plain http to this machine only; elsewhere it is kept back and the 401 says why", async () => {
    const sends = (u: string) => {
      const c = hubConnection(new URL(u), {})
      return "error" in c ? c.error : c.sendsToken
    }
    for (const u of [
      "https://hub.example:8080",
      "http://127.0.0.1:8080",
      "http://127.9.9.9",
      "http://[::1]:8080",
      "http://localhost:8080",
    ])
      assert.strictEqual(sends(u), true, u)
    for (const u of [
      "http://10.0.0.7:8080",
      "http://fleetcheck-hub.fleetcheck-system.svc:8080",
      "http://[fd00::1]:8080",
    ])
      assert.strictEqual(sends(u), false, u)
    assert.match(String(sends("ftp://hub:21")), /http:\/\/ or https:\/\//)
    const url = new URL("http://10.0.0.7:8080/api/v1/fleet")
    const connection = hubConnection(url, {})
    if ("error" in connection) throw new Error(connection.error)
    const credentials = await credentialsFor(url, connection, kubeconfig("w", { token: "reader" }), undefined)
    if ("error" in credentials) throw new Error(credentials.error)
    assert.strictEqual(credentials.authorization, undefined)
    assert.match(
      refusalMessage(401, "a bearer token is required", credentials),
      /wants a bearer token \(401: a bearer token is required\); it is not sent over plain http:\/\/ to 10\.0\.0\.7:8080, a host other than this machine: use https:\/\//,
    )
  })
})
