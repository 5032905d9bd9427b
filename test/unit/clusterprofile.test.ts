// ClusterProfile registration, the pure part: the hub operator's provider file (KEP-5339) and what a
// profile's access providers become. Member data never chooses a command; a profile without a known
// provider or without a CA is refused with a reason, and the kubeconfig policy's rules still apply.
import { readFileSync } from "node:fs"
import { assert, describe, it } from "@effect/vitest"
import { checkClusterProfile } from "../../src/clusterprofile/profile.ts"
import { type AccessProviders, parseProviderFile } from "../../src/clusterprofile/provider-file.ts"
import { defaultPolicy } from "../../src/kubeconfig/policy.ts"

const caData = Buffer.from(
  readFileSync(new URL("./fixtures/kubeconfig-policy/ca.crt", import.meta.url), "utf8"),
).toString("base64")
const now = new Date("2026-12-01T00:00:00Z")

const providers = (): AccessProviders => {
  const r = parseProviderFile(
    JSON.stringify({
      providers: [
        {
          name: "token-minter",
          execConfig: {
            apiVersion: "client.authentication.k8s.io/v1",
            command: "/opt/plugins/mint",
            args: ["--audience", "hub"],
            env: [{ name: "MODE", value: "hub" }],
            provideClusterInfo: true,
          },
        },
        { name: "second", execConfig: { command: "/opt/plugins/second" } },
      ],
    }),
  )
  if (!r.ok) throw new Error(r.message)
  return r.providers
}

const profile = (accessProviders: unknown[], extra: Record<string, unknown> = {}) => ({
  apiVersion: "multicluster.x-k8s.io/v1alpha2",
  kind: "ClusterProfile",
  metadata: { name: "member-a", namespace: "fleetcheck-system" },
  spec: { clusterManager: { name: "test" } },
  status: { accessProviders },
  ...extra,
})
const access = (name: string, cluster: Record<string, unknown> = {}) => ({
  name,
  cluster: { server: "https://member-a.example:6443", "certificate-authority-data": caData, ...cluster },
})

describe("provider file", () => {
  it("maps provider names to exec plugins, in the file's order", () => {
    const p = providers()
    assert.deepStrictEqual([...p.keys()], ["token-minter", "second"])
    assert.deepStrictEqual(p.get("token-minter"), {
      command: "/opt/plugins/mint",
      args: ["--audience", "hub"],
      env: [{ name: "MODE", value: "hub" }],
      apiVersion: "client.authentication.k8s.io/v1",
      provideClusterInfo: true,
    })
  })

  it("refuses what is not a provider file, and profile-sourced arguments or environment", () => {
    const bad = [
      "not json",
      "{}",
      JSON.stringify({ providers: [] }),
      JSON.stringify({ providers: [{ name: "a" }] }),
      JSON.stringify({ providers: [{ name: "a", execConfig: { command: "x" }, extra: 1 }] }),
      JSON.stringify({
        providers: [{ name: "a", execConfig: { command: "x" }, profileSourcedCLIArgsPolicy: "Append" }],
      }),
      JSON.stringify({
        providers: [{ name: "a", execConfig: { command: "x" }, profileSourcedEnvVarsPolicy: "Replace" }],
      }),
      JSON.stringify({
        providers: [
          { name: "a", execConfig: { command: "x" } },
          { name: "a", execConfig: { command: "y" } },
        ],
      }),
      " ".repeat(300 * 1024),
    ]
    for (const text of bad) assert.isFalse(parseProviderFile(text).ok, text.slice(0, 80))
  })
})

describe("checkClusterProfile", () => {
  const check = (p: unknown, policy = defaultPolicy) =>
    checkClusterProfile({ profile: p, providers: providers(), policy, now })

  it("builds the connection from the access provider and the credential from the provider file", () => {
    const extension = { audience: "hub" }
    const r = check(
      profile([
        access("unknown-provider"),
        access("second", {
          extensions: [{ name: "client.authentication.k8s.io/exec", extension }],
          "tls-server-name": "kubernetes",
        }),
      ]),
    )
    if (!r.ok) return assert.fail(r.message)
    assert.strictEqual(r.provider, "second")
    assert.strictEqual(r.server, "https://member-a.example:6443")
    assert.deepStrictEqual(r.execClusterConfig, extension)
    const user = r.kubeConfig.getCurrentUser()
    assert.strictEqual(user?.exec?.command, "/opt/plugins/second")
    assert.strictEqual(r.kubeConfig.getCurrentCluster()?.tlsServerName, "kubernetes")
  })

  it("prefers the provider file's order over the profile's, and understands v1alpha1 credentialProviders", () => {
    const both = check(profile([access("second"), access("token-minter")]))
    assert.isTrue(both.ok && both.provider === "token-minter")
    const v1alpha1 = check({
      ...profile([]),
      apiVersion: "multicluster.x-k8s.io/v1alpha1",
      status: { credentialProviders: [access("second")] },
    })
    assert.isTrue(v1alpha1.ok && v1alpha1.provider === "second")
  })

  it("the same cluster under another credential keeps its connection hash", () => {
    const a = check(profile([access("token-minter")]))
    const b = check(profile([access("second")]))
    if (!a.ok || !b.ok) return assert.fail("refused")
    assert.notStrictEqual(a.hash, b.hash)
    assert.strictEqual(a.connectionHash, b.connectionHash)
  })

  it("refuses an unknown provider, a missing CA, and what the kubeconfig policy refuses", () => {
    const refusals: Array<[unknown, string]> = [
      [profile([access("someone-else")]), "AccessProviderUnknown"],
      [profile([]), "AccessProviderUnknown"],
      [
        profile([access("second", { "certificate-authority-data": undefined })]),
        "CertificateAuthorityMissing",
      ],
      [profile([access("second", { server: "http://member-a.example" })]), "PlaintextServerRefused"],
      [profile([access("second", { "proxy-url": "http://proxy:3128" })]), "KubeconfigUnsupported"],
      [profile([access("second", { "certificate-authority": "/etc/ca.crt" })]), "FilePathRefused"],
      [{ kind: "ClusterProfile", metadata: {} }, "ClusterProfileInvalid"],
    ]
    for (const [p, reason] of refusals) {
      const r = check(p)
      if (r.ok) return assert.fail(`accepted, expected ${reason}`)
      assert.strictEqual(r.reason, reason, r.message)
    }
    const unknown = check(profile([access("someone-else")]))
    assert.isFalse(unknown.ok)
    if (!unknown.ok) assert.include(unknown.message, 'ClusterProfile "member-a"')
  })

  it("takes the namespace scope from the profile's fleetcheck.io/namespaces annotation", () => {
    const p = profile([access("second")])
    const r = check({ ...p, metadata: { ...p.metadata, annotations: { "fleetcheck.io/namespaces": "a,b" } } })
    assert.isTrue(r.ok && r.namespaces?.join(",") === "a,b")
  })
})
