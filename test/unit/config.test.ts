// The hub's one configuration schema: flags, environment variables, --help and defaults all come from
// it, so they agree by construction; these tests hold that construction to account.
import { assert, describe, it } from "@effect/vitest"
import { hubUsage, parseHubFlags } from "../../src/cli/hub.ts"
import {
  defaultHubConfig,
  envNameOf,
  HubConfigError,
  hubFlagNames,
  hubSettings,
  resolveHubConfig,
} from "../../src/hub/config.ts"

const throwsConfigError = (f: () => unknown, pattern: RegExp) => {
  try {
    f()
  } catch (e) {
    assert.instanceOf(e, HubConfigError)
    assert.match((e as HubConfigError).message, pattern)
    return
  }
  assert.fail("expected a HubConfigError")
}

describe("hub configuration", () => {
  it("defaults: controller-runtime's lease timings, 4 workers, 32 hub-wide, probes every minute", () => {
    const c = defaultHubConfig
    assert.deepStrictEqual([c.leaseDurationMs, c.renewDeadlineMs, c.retryPeriodMs], [15_000, 10_000, 2_000])
    assert.strictEqual(c.workersPerMember, 4)
    assert.strictEqual(c.maxConcurrentReconciles, 32)
    assert.strictEqual(c.probeIntervalMs, 60_000)
    assert.strictEqual(c.drainGraceMs, 30_000)
    assert.strictEqual(c.namespace, "fleetcheck-system")
    assert.deepStrictEqual(c.httpAddress, { host: "0.0.0.0", port: 8080 })
    assert.strictEqual(c.kubeconfig, undefined)
    // Secure by default: a hub started without flags answers only probes without a token.
    assert.strictEqual(c.secureServing, true)
    assert.strictEqual(c.dashboardAddress, undefined)
  })

  it("--help lists every setting with its environment variable and default", () => {
    for (const s of Object.values(hubSettings)) {
      const line = hubUsage.split("\n").findIndex((l) => l.trimStart().startsWith(`--${s.flag} `))
      assert.isAtLeast(line, 0, `--${s.flag} is in --help`)
      const text = hubUsage
        .split("\n")
        .slice(line, line + 2)
        .join("\n")
      assert.include(text, `[env ${envNameOf(s.flag)}]`)
      if (s.default !== undefined) assert.include(text, `(default ${s.default})`)
    }
  })

  it("every flag and its environment variable set the same value, and the flag wins", () => {
    const samples: Record<string, string> = {
      kubeconfig: "/tmp/hub.kubeconfig",
      namespace: "hub-ns",
      "http-address": "[::1]:9090",
      "secure-serving": "true",
      "tls-cert-file": "/etc/fleetcheck/tls/tls.crt",
      "tls-private-key-file": "/etc/fleetcheck/tls/tls.key",
      "dashboard-address": "0.0.0.0:8081",
      "leader-elect": "false",
      sharding: "true",
      "leader-elect-lease-duration": "30s",
      "leader-elect-renew-deadline": "20s",
      "leader-elect-retry-period": "4s",
      "max-concurrent-reconciles": "7",
      "max-concurrent-syncs": "5",
      "max-concurrent-status-writes": "16",
      "workers-per-member": "3",
      "probe-interval": "1m30s",
      "probe-failure-threshold": "5",
      "probe-success-threshold": "2",
      "cache-sync-timeout": "45s",
      "status-interval": "5s",
      "status-refresh-interval": "2m",
      "drain-grace": "10s",
      "running-poll": "15s",
      "agent-image": "registry.example/fleetcheck:1.2.3",
      "velero-not-installed-poll": "10m",
      "sandbox-cleanup-timeout": "5m",
      "sandbox-orphan-grace": "30s",
      "resync-period": "1h",
      http2: "false",
      "credential-expiry-warning": "48h",
      "capi-kubeconfig-selector": "cluster.x-k8s.io/cluster-name",
      "clusterprofile-provider-file": "/etc/fleetcheck/providers.json",
      "clusterprofile-selector": "x-k8s.io/cluster-manager=test",
      "allow-exec": "true",
      "exec-plugin-timeout": "20s",
      "allow-auth-provider": "true",
      "allow-file-paths": "true",
      "allow-insecure-skip-tls-verify": "true",
      "dashboard-page-size": "50",
      "trace-url-template": "https://grafana.example/explore?traceId={traceID}",
      "check-metrics": "unverified",
      "member-histograms": "true",
      "memory-return-threshold": "512",
      "log-level": "Debug",
    }
    assert.sameMembers(Object.keys(samples), hubFlagNames(), "a sample for every flag")
    const byFlag = parseHubFlags(
      Object.entries(samples).flatMap(([k, v]) => [`--${k}`, v]),
      {},
    )
    const byEnv = parseHubFlags(
      [],
      Object.fromEntries(Object.entries(samples).map(([k, v]) => [envNameOf(k), v])),
    )
    assert.deepStrictEqual(byFlag, byEnv)
    assert.notDeepEqual(byFlag, defaultHubConfig)
    assert.strictEqual(byFlag.probeIntervalMs, 90_000)
    assert.deepStrictEqual(byFlag.httpAddress, { host: "::1", port: 9090 })
    assert.strictEqual(byFlag.secureServing, true)
    assert.strictEqual(byFlag.tlsCertFile, "/etc/fleetcheck/tls/tls.crt")
    assert.strictEqual(byFlag.tlsPrivateKeyFile, "/etc/fleetcheck/tls/tls.key")
    assert.deepStrictEqual(byFlag.dashboardAddress, { host: "0.0.0.0", port: 8081 })
    const both = parseHubFlags(["--workers-per-member", "9"], { FLEETCHECK_WORKERS_PER_MEMBER: "2" })
    assert.strictEqual(both.workersPerMember, 9)
  })

  it("serving certificate files: both or neither, and only with secure serving", () => {
    assert.strictEqual(defaultHubConfig.tlsCertFile, undefined)
    assert.strictEqual(defaultHubConfig.tlsPrivateKeyFile, undefined)
    const files = { "tls-cert-file": "/tls/tls.crt", "tls-private-key-file": "/tls/tls.key" }
    assert.strictEqual(resolveHubConfig(files, {}).tlsCertFile, "/tls/tls.crt")
    throwsConfigError(
      () => resolveHubConfig({ "tls-cert-file": "/tls/tls.crt" }, {}),
      /--tls-cert-file and --tls-private-key-file go together/,
    )
    throwsConfigError(
      () => resolveHubConfig({}, { FLEETCHECK_TLS_PRIVATE_KEY_FILE: "/tls/tls.key" }),
      /go together/,
    )
    throwsConfigError(
      () => resolveHubConfig({ ...files, "secure-serving": "false" }, {}),
      /--tls-cert-file is served only with --secure-serving true/,
    )
    throwsConfigError(() => resolveHubConfig({ "tls-cert-file": "" }, {}), /--tls-cert-file/)
  })

  it("label selectors: empty, existence, equality and set requirements; anything else refused", () => {
    const selector = (v: string) =>
      resolveHubConfig({ "capi-kubeconfig-selector": v }, {}).capiKubeconfigSelector
    assert.strictEqual(defaultHubConfig.capiKubeconfigSelector, "")
    for (const ok of ["cluster.x-k8s.io/cluster-name", "env=prod,team in (a,b)", "!legacy", "tier!=db"])
      assert.strictEqual(selector(ok), ok)
    for (const bad of ["env=prod)", "a b", "=x", "team in a,b"])
      throwsConfigError(() => selector(bad), /--capi-kubeconfig-selector/)
  })

  it("http addresses: host:port, :port and bracketed IPv6", () => {
    const at = (a: string) => resolveHubConfig({ "http-address": a }, {}).httpAddress
    assert.deepStrictEqual(at("127.0.0.1:0"), { host: "127.0.0.1", port: 0 })
    assert.deepStrictEqual(at(":8080"), { host: "0.0.0.0", port: 8080 })
    assert.deepStrictEqual(at("[::]:8080"), { host: "::", port: 8080 })
    throwsConfigError(() => at("::8080"), /--http-address/)
    throwsConfigError(() => at("localhost:99999"), /--http-address/)
  })

  it("bad values are refused with the flag's name; durations are Go durations", () => {
    throwsConfigError(
      () => resolveHubConfig({ "probe-interval": "1000" }, {}),
      /--probe-interval: .*Go duration/,
    )
    throwsConfigError(
      () => resolveHubConfig({}, { FLEETCHECK_WORKERS_PER_MEMBER: "0" }),
      /--workers-per-member/,
    )
    throwsConfigError(() => resolveHubConfig({ "leader-elect": "yes" }, {}), /--leader-elect: true or false/)
    throwsConfigError(() => resolveHubConfig({ namespace: "Not_A_Label" }, {}), /--namespace/)
    throwsConfigError(() => resolveHubConfig({ "log-level": "Verbose" }, {}), /--log-level/)
  })

  it("lease timings must satisfy client-go's rules before anything starts", () => {
    throwsConfigError(
      () => resolveHubConfig({ "leader-elect-lease-duration": "10s" }, {}),
      /lease-duration must be longer than --leader-elect-renew-deadline/,
    )
    throwsConfigError(
      () => resolveHubConfig({ "leader-elect-retry-period": "9s" }, {}),
      /renew-deadline must be longer than 1.2 × --leader-elect-retry-period/,
    )
  })

  it("unknown flags are refused", () => {
    assert.throws(() => parseHubFlags(["--no-such-flag", "x"], {}))
  })
})
