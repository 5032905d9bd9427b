// The secret reader's decisions: what the hub passed in KUBERNETES_EXEC_INFO, which Secret's token may go
// to which server (a profile naming another member's Secret gets nothing), and the expiry read from the
// token so the hub refreshes before it.
import { describe, expect, it } from "vitest"
import { execCredential, jwtExpiry, parseExecInfo, tokenFor } from "../../src/clusterprofile/secret-reader.ts"

const info = (cluster: unknown) =>
  JSON.stringify({
    apiVersion: "client.authentication.k8s.io/v1",
    kind: "ExecCredential",
    spec: { interactive: false, cluster },
  })

const secret = (annotations: Record<string, string> | undefined, token: string | undefined) => ({
  apiVersion: "v1",
  kind: "Secret",
  metadata: { name: "m1", ...(annotations ? { annotations } : {}) },
  ...(token !== undefined ? { data: { token: Buffer.from(token).toString("base64") } } : {}),
})

const jwt = (claims: unknown) =>
  ["e30", Buffer.from(JSON.stringify(claims)).toString("base64url"), "c2ln"].join(".")

describe("secret reader", () => {
  it("reads the cluster name and server the hub passed; anything else is refused by rule", () => {
    const ok = parseExecInfo(info({ server: "https://10.0.0.1:6443", config: { clusterName: "m1" } }))
    expect(ok).toEqual({
      ok: true,
      value: expect.objectContaining({
        spec: { cluster: { server: "https://10.0.0.1:6443", config: { clusterName: "m1" } } },
      }),
    })
    expect(parseExecInfo(undefined)).toMatchObject({
      ok: false,
      message: expect.stringContaining("provideClusterInfo"),
    })
    expect(parseExecInfo("{")).toMatchObject({ ok: false, message: "KUBERNETES_EXEC_INFO is not JSON" })
    // A name that is not a DNS-1123 subdomain could be a path: refused before any request.
    for (const clusterName of ["../kube-system/x", "M1", "", "a".repeat(254)]) {
      expect(parseExecInfo(info({ server: "https://h", config: { clusterName } }))).toMatchObject({
        ok: false,
        message: expect.stringContaining("spec.cluster.config.clusterName"),
      })
    }
    expect(parseExecInfo(info({ server: "https://h" }))).toMatchObject({ ok: false })
  })

  it("gives a Secret's token only to the server recorded on it", () => {
    const s = secret({ "fleetcheck.io/server": "https://10.0.0.1:6443" }, "tok-1")
    expect(tokenFor(s, "https://10.0.0.1:6443")).toEqual({ ok: true, value: "tok-1" })
    // A profile pointing another member's Secret at a server of its own gets nothing.
    const other = tokenFor(s, "https://attacker.example:443")
    expect(other).toMatchObject({ ok: false, message: expect.stringContaining("another server") })
    expect(JSON.stringify(other)).not.toContain("tok-1")
    // No recorded server: no server may have it.
    expect(tokenFor(secret(undefined, "tok-1"), "https://10.0.0.1:6443")).toMatchObject({
      ok: false,
      message: expect.stringContaining("fleetcheck.io/server"),
    })
    expect(tokenFor(secret({ "fleetcheck.io/server": "https://h" }, undefined), "https://h")).toMatchObject({
      ok: false,
      message: expect.stringContaining("data.token"),
    })
    expect(tokenFor(secret({ "fleetcheck.io/server": "https://h" }, "two words"), "https://h")).toMatchObject(
      {
        ok: false,
        message: expect.stringContaining("not a bearer token"),
      },
    )
    expect(tokenFor({ metadata: 3 }, "https://h")).toMatchObject({ ok: false })
  })

  it("announces the token's exp claim as the ExecCredential's expiry, and nothing for other tokens", () => {
    expect(jwtExpiry(jwt({ exp: 1_900_000_000 }))?.toISOString()).toBe("2030-03-17T17:46:40.000Z")
    for (const t of ["opaque-token", jwt({}), jwt({ exp: "soon" }), jwt({ exp: -1 }), "a.!!!.c"])
      expect(jwtExpiry(t)).toBeUndefined()
    expect(
      JSON.parse(execCredential("client.authentication.k8s.io/v1", jwt({ exp: 1_900_000_000 }))),
    ).toEqual({
      apiVersion: "client.authentication.k8s.io/v1",
      kind: "ExecCredential",
      status: { token: jwt({ exp: 1_900_000_000 }), expirationTimestamp: "2030-03-17T17:46:40Z" },
    })
    expect(JSON.parse(execCredential("client.authentication.k8s.io/v1beta1", "opaque")).status).toEqual({
      token: "opaque",
    })
  })
})
