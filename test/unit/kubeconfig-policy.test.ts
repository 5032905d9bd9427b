import { readFileSync } from "node:fs"
import type * as https from "node:https"
import { assert, describe, it } from "@effect/vitest"
import { stringify } from "yaml"
import { contextAnnotation, namespacesAnnotation } from "../../src/api/names.ts"
import {
  checkKubeconfig,
  credentialsExpiringSoon,
  defaultPolicy,
  jwtExpiry,
  type KubeconfigAccepted,
  type KubeconfigCheck,
  type KubeconfigPolicy,
  type KubeconfigRefusalReason,
  kubeconfigRefusalReasons,
  maxKubeconfigBytes,
  parseNamespaces,
  refusalOrder,
} from "../../src/kubeconfig/policy.ts"

// Throwaway self-signed material made with openssl for these tests only (see fixtures/README.md).
const fixture = (name: string) =>
  readFileSync(new URL(`./fixtures/kubeconfig-policy/${name}`, import.meta.url), "utf8")
const clientCertPem = fixture("client.crt")
const clientKeyPem = fixture("client.key")
const otherKeyPem = fixture("other.key")
const caPem = fixture("ca.crt")
/** `openssl x509 -noout -enddate -in client.crt` */
const clientCertNotAfter = new Date("2036-11-26T16:06:33Z")

const b64 = (s: string) => Buffer.from(s, "utf8").toString("base64")
const b64url = (v: unknown) => Buffer.from(JSON.stringify(v), "utf8").toString("base64url")
/** An unsigned JWT; the signature part carries the sentinel so any leak of the token is caught. */
const jwt = (claims: Record<string, unknown>) =>
  [b64url({ alg: "none", typ: "JWT" }), b64url(claims), "SENTINELsignature"].join(".")

// Every credential value in this file contains SENTINEL; no refusal message may contain it.
const token = "SENTINEL-token-q7xk2v9"
const password = "SENTINEL-password-p4ss"
const certData = b64(clientCertPem)
const keyData = b64(clientKeyPem)
const otherKeyData = b64(otherKeyPem)
const caData = b64(caPem)
const keyMaterial = [
  keyData,
  otherKeyData,
  ...[clientKeyPem, otherKeyPem].flatMap((pem) =>
    pem.split("\n").filter((l) => l.length > 8 && !l.startsWith("-----")),
  ),
]

const now = new Date("2026-11-29T12:00:00Z")
const server = "https://member-1.example:6443"
const R = kubeconfigRefusalReasons

type Entry = Record<string, unknown>

const cluster = (name = "member", over: Entry = {}): Entry => ({
  name,
  cluster: { server, "certificate-authority-data": caData, ...over },
})
const user = (name = "hub", over: Entry = {}): Entry => ({ name, user: { token, ...over } })
const userOnly = (name: string, fields: Entry): Entry => ({ name, user: fields })
const context = (name = "member", clusterName = "member", userName = "hub"): Entry => ({
  name,
  context: { cluster: clusterName, user: userName },
})
const kubeconfig = (over: Entry = {}): Entry => ({
  apiVersion: "v1",
  kind: "Config",
  clusters: [cluster()],
  users: [user()],
  contexts: [context()],
  "current-context": "member",
  ...over,
})

interface RunOptions {
  readonly annotations?: Record<string, string>
  readonly policy?: Partial<KubeconfigPolicy>
  readonly now?: Date
  readonly data?: Record<string, string>
}

const run = (doc: unknown, options: RunOptions = {}): KubeconfigCheck =>
  checkKubeconfig({
    secretName: "member-1",
    data: options.data ?? { kubeconfig: b64(typeof doc === "string" ? doc : stringify(doc)) },
    annotations: options.annotations,
    policy: { ...defaultPolicy, ...options.policy },
    now: options.now ?? now,
  })

const assertNoSecrets = (text: string) => {
  assert.notInclude(text.toUpperCase(), "SENTINEL")
  assert.notInclude(text, "eyJ")
  for (const m of keyMaterial) assert.notInclude(text, m)
}

const accepted = (result: KubeconfigCheck): KubeconfigAccepted => {
  if (!result.ok) return assert.fail(`refused: ${result.reason}: ${result.message}`)
  return result
}

/** Asserts the reason, that the Secret is named, and that no credential leaked; returns the message. */
const refused = (result: KubeconfigCheck, reason: KubeconfigRefusalReason): string => {
  if (result.ok) return assert.fail(`expected ${reason}, but the kubeconfig was accepted`)
  assert.strictEqual(result.reason, reason, result.message)
  assert.include(result.message, 'Secret "member-1"')
  assertNoSecrets(result.message)
  return result.message
}

const httpsOptions = async (result: KubeconfigAccepted) => {
  const opts: https.RequestOptions = {}
  await result.kubeConfig.applyToHTTPSOptions(opts)
  return opts
}

describe("checkKubeconfig: a good kubeconfig", () => {
  it("accepts a single-context token kubeconfig and loads only what it checked", async () => {
    const ok = accepted(run(kubeconfig()))
    assert.strictEqual(ok.server, server)
    assert.strictEqual(ok.contextName, "member")
    assert.strictEqual(ok.clusterName, "member")
    assert.strictEqual(ok.userName, "hub")
    assert.match(ok.hash, /^[0-9a-f]{64}$/)
    assert.isUndefined(ok.credentialExpiry)
    assert.isUndefined(ok.namespaces)
    const kc = ok.kubeConfig
    assert.strictEqual(kc.getCurrentContext(), "member")
    assert.strictEqual(kc.getCurrentCluster()?.server, server)
    assert.strictEqual(kc.getCurrentCluster()?.caData, caData)
    assert.isFalse(kc.getCurrentCluster()?.skipTLSVerify)
    assert.strictEqual(kc.getCurrentUser()?.token, token)
    const opts = await httpsOptions(ok)
    assert.deepStrictEqual(opts.headers, { Authorization: `Bearer ${token}` })
    assert.strictEqual(String(opts.ca), caPem)
  })

  it("accepts JSON as well as YAML, and the same config hashes the same", () => {
    const fromYaml = accepted(run(kubeconfig()))
    const fromJson = accepted(run(JSON.stringify(kubeconfig(), null, 2)))
    assert.strictEqual(fromJson.hash, fromYaml.hash)
  })

  it("tolerates and ignores unknown fields", () => {
    const plain = accepted(run(kubeconfig()))
    const noisy = accepted(
      run(
        kubeconfig({
          preferences: { colors: true },
          extensions: [{ name: "x", extension: { a: 1 } }],
          clusters: [cluster("member", { "disable-compression": true, extensions: [] })],
          users: [user("hub", { extensions: [] })],
        }),
      ),
    )
    assert.strictEqual(noisy.hash, plain.hash)
  })

  it("allows a few YAML aliases (a shared CA), and strips a trailing slash from the server", () => {
    const text = [
      "apiVersion: v1",
      "kind: Config",
      "clusters:",
      `- name: member\n  cluster: { server: "${server}/", certificate-authority-data: &ca ${caData} }`,
      `- name: other\n  cluster: { server: "https://other.example", certificate-authority-data: *ca }`,
      `users: [{ name: hub, user: { token: ${token} } }]`,
      "contexts: [{ name: member, context: { cluster: member, user: hub } }]",
    ].join("\n")
    const ok = accepted(run(text))
    assert.strictEqual(ok.server, server)
    assert.strictEqual(ok.kubeConfig.getCurrentCluster()?.server, server)
  })

  it("refuses a server URL with a path, query or fragment: one API server must not pass for two members", () => {
    // A path the server ignores (or a proxy's, such as Rancher's) would let one cluster register twice.
    for (const server of [
      "https://rancher.example/k8s/clusters/c-m-1",
      "https://member-1.example:6443/extra",
      "https://member-1.example/?x=1",
      "https://member-1.example/?",
      "https://member-1.example/#frag",
    ]) {
      const message = refused(
        run(kubeconfig({ clusters: [cluster("member", { server })] })),
        R.ServerURLRefused,
      )
      assert.include(message, "https://host[:port] only", server)
      assert.notInclude(message, server, "the URL itself is never echoed")
    }
    // One trailing slash is no path.
    assert.strictEqual(
      accepted(
        run(kubeconfig({ clusters: [cluster("member", { server: "https://member-1.example:6443/" })] })),
      ).server,
      "https://member-1.example:6443",
    )
  })

  it("passes impersonation (as) and basic auth through to client-node", async () => {
    const ok = accepted(
      run(
        kubeconfig({
          users: [userOnly("hub", { username: "admin", password, as: "system:serviceaccount:x:y" })],
        }),
      ),
    )
    assert.strictEqual(ok.kubeConfig.getCurrentUser()?.impersonateUser, "system:serviceaccount:x:y")
    const opts = await httpsOptions(ok)
    assert.strictEqual(opts.auth, `admin:${password}`)
  })
})

describe("checkKubeconfig: hash", () => {
  const baseHash = () => accepted(run(kubeconfig())).hash

  it("ignores formatting, comments, key order, unused entries and other Secret keys", () => {
    const reordered = [
      "# registration for member-1",
      "contexts:",
      "  - context: { user: hub, cluster: member }",
      "    name: member",
      "users:",
      `  - user: { token: "${token}" }   # the hub's ServiceAccount token`,
      "    name: hub",
      "  - { name: unused, user: { token: other } }",
      "clusters:",
      `  - cluster: { certificate-authority-data: ${caData}, server: "${server}" }`,
      "    name: member",
      "kind: Config",
      "apiVersion: v1",
      "current-context: something-else",
    ].join("\n")
    const base = baseHash()
    assert.strictEqual(accepted(run(reordered)).hash, base)
    const withOtherKeys = run(null, {
      data: { kubeconfig: b64(stringify(kubeconfig())), "ca.crt": b64("x") },
    })
    assert.strictEqual(accepted(withOtherKeys).hash, base)
  })

  it("ignores unrelated contexts when the annotation picks the same one", () => {
    const several = kubeconfig({
      clusters: [cluster(), cluster("b", { server: "https://b.example" })],
      users: [user(), user("b")],
      contexts: [context(), context("b", "b", "b")],
    })
    assert.strictEqual(
      accepted(run(several, { annotations: { [contextAnnotation]: "member" } })).hash,
      baseHash(),
    )
  })

  it("changes when anything the engine uses changes", () => {
    const variants = [
      kubeconfig({ users: [user("hub", { token: "SENTINEL-rotated" })] }),
      kubeconfig({ clusters: [cluster("member", { server: "https://member-2.example:6443" })] }),
      kubeconfig({ clusters: [cluster("member", { "tls-server-name": "kubernetes" })] }),
      kubeconfig({
        contexts: [{ name: "member", context: { cluster: "member", user: "hub", namespace: "x" } }],
      }),
    ]
    const hashes = new Set([baseHash(), ...variants.map((v) => accepted(run(v)).hash)])
    hashes.add(accepted(run(kubeconfig(), { annotations: { [namespacesAnnotation]: "shop" } })).hash)
    assert.strictEqual(hashes.size, variants.length + 2)
  })

  it("keeps the connection hash when only the credential changes, and changes it with the connection", () => {
    const base = accepted(run(kubeconfig()))
    const credentials = [
      kubeconfig({ users: [user("hub", { token: "SENTINEL-rotated" })] }),
      kubeconfig({
        users: [userOnly("hub", { "client-certificate-data": certData, "client-key-data": keyData })],
      }),
      kubeconfig({ users: [user("other-user")], contexts: [context("member", "member", "other-user")] }),
      kubeconfig({ users: [user("hub", { as: "someone" })] }),
    ]
    for (const doc of credentials) {
      const c = accepted(run(doc))
      assert.notStrictEqual(c.hash, base.hash)
      assert.strictEqual(c.connectionHash, base.connectionHash)
    }
    const connections = [
      kubeconfig({ clusters: [cluster("member", { server: "https://member-2.example:6443" })] }),
      kubeconfig({ clusters: [cluster("member", { "tls-server-name": "kubernetes" })] }),
      kubeconfig({
        contexts: [{ name: "member", context: { cluster: "member", user: "hub", namespace: "x" } }],
      }),
    ]
    const hashes = new Set([base.connectionHash, ...connections.map((v) => accepted(run(v)).connectionHash)])
    hashes.add(
      accepted(run(kubeconfig(), { annotations: { [namespacesAnnotation]: "shop" } })).connectionHash,
    )
    assert.strictEqual(hashes.size, connections.length + 2)
  })

  it("reads a Cluster API Secret's kubeconfig from the data key it is given", () => {
    const capi = checkKubeconfig({
      secretName: "member-1-kubeconfig",
      data: { value: b64(stringify(kubeconfig())) },
      policy: defaultPolicy,
      now,
      dataKey: "value",
    })
    assert.strictEqual(accepted(capi).connectionHash, accepted(run(kubeconfig())).connectionHash)
    const missing = checkKubeconfig({
      secretName: "member-1-kubeconfig",
      data: { kubeconfig: b64(stringify(kubeconfig())) },
      policy: defaultPolicy,
      now,
      dataKey: "value",
    })
    assert.isFalse(missing.ok)
    if (!missing.ok) assert.include(missing.message, 'data key "value"')
  })
})

describe("checkKubeconfig: missing or malformed data", () => {
  it("refuses a Secret without the kubeconfig key", () => {
    refused(run(null, { data: {} }), R.KubeconfigMissing)
    refused(run(null, { data: { kubeconfig: "" } }), R.KubeconfigMissing)
    refused(run(null, { data: { config: b64(stringify(kubeconfig())) } }), R.KubeconfigMissing)
    refused(run("   \n\n"), R.KubeconfigMissing)
    const msg = refused(
      checkKubeconfig({ secretName: "member-1", data: undefined, policy: defaultPolicy, now }),
      R.KubeconfigMissing,
    )
    assert.include(msg, '"kubeconfig"')
  })

  it("refuses garbage base64, non-canonical base64 and non-UTF-8 bytes", () => {
    assert.include(
      refused(run(null, { data: { kubeconfig: "not base64!!" } }), R.KubeconfigInvalid),
      "base64",
    )
    const wrapped = b64(stringify(kubeconfig())).replace(/(.{76})/g, "$1\n")
    assert.include(refused(run(null, { data: { kubeconfig: wrapped } }), R.KubeconfigInvalid), "base64")
    const notUtf8 = Buffer.from([0x61, 0x3a, 0x20, 0xff, 0xfe]).toString("base64")
    assert.include(refused(run(null, { data: { kubeconfig: notUtf8 } }), R.KubeconfigInvalid), "UTF-8")
  })

  it("refuses a kubeconfig over the size bound, before and after decoding", () => {
    const huge = "A".repeat(Math.ceil(maxKubeconfigBytes / 3) * 4 + 4)
    assert.include(refused(run(null, { data: { kubeconfig: huge } }), R.KubeconfigInvalid), "larger than")
    const justOver = Buffer.alloc(maxKubeconfigBytes + 1, 0x20).toString("base64")
    assert.include(refused(run(null, { data: { kubeconfig: justOver } }), R.KubeconfigInvalid), "larger than")
  })

  it("refuses garbage YAML with a position, never the offending line", () => {
    const msg = refused(run("clusters: [\n  {"), R.KubeconfigInvalid)
    assert.match(msg, /not valid YAML or JSON \([A-Z_]+ at line \d+, column \d+\)/)
    const leaky = ["users:", "- name: hub", "  user:", `    token: ${token}`, "   broken: : [", ""].join("\n")
    refused(run(leaky), R.KubeconfigInvalid)
    refused(run(`{"users": [{"name": "hub", "user": {"token": "${token}"}}`), R.KubeconfigInvalid)
  })

  it("refuses duplicate keys, several documents and YAML tags beyond the core schema", () => {
    refused(run(`apiVersion: v1\napiVersion: v1\ntoken: ${token}`), R.KubeconfigInvalid)
    const two = `${stringify(kubeconfig())}---\n${stringify(kubeconfig())}`
    assert.include(refused(run(two), R.KubeconfigInvalid), "2 YAML documents")
    refused(run(`apiVersion: v1\nkind: Config\nclusters: !!binary ${b64(token)}`), R.KubeconfigInvalid)
    refused(run(`apiVersion: v1\nkind: !custom Config`), R.KubeconfigInvalid)
  })

  it("refuses a YAML alias bomb quickly", () => {
    const levels = "abcdefghij".split("")
    const lines = [
      `a: &a ["${token}", "${token}", "${token}", "${token}", "${token}", "${token}", "${token}"]`,
    ]
    for (let i = 1; i < levels.length; i++) {
      const prev = levels[i - 1]
      lines.push(`${levels[i]}: &${levels[i]} [${Array(9).fill(`*${prev}`).join(", ")}]`)
    }
    const started = Date.now()
    assert.include(refused(run(lines.join("\n")), R.KubeconfigInvalid), "alias")
    assert.isBelow(Date.now() - started, 2000)
  })

  it("refuses deeply nested input without crashing", () => {
    refused(run(`${"[".repeat(5_000)}${"]".repeat(5_000)}`), R.KubeconfigInvalid)
  })

  it("refuses wrong shapes, naming the field and never the value", () => {
    assert.include(refused(run("just some text"), R.KubeconfigInvalid), "kubeconfig mapping")
    assert.include(
      refused(run(kubeconfig({ clusters: {} })), R.KubeconfigInvalid),
      "clusters: expected array",
    )
    const noServer = kubeconfig({
      clusters: [{ name: "member", cluster: { "certificate-authority-data": caData } }],
    })
    assert.include(refused(run(noServer), R.KubeconfigInvalid), "clusters[0].cluster.server")
    const numericToken = kubeconfig({ users: [userOnly("hub", { token: 987654321987654 })] })
    const msg = refused(run(numericToken), R.KubeconfigInvalid)
    assert.include(msg, "users[0].user.token: expected string")
    assert.notInclude(msg, "987654321987654")
    assert.include(
      refused(run(kubeconfig({ apiVersion: "v2" })), R.KubeconfigInvalid),
      'apiVersion: must be "v1"',
    )
    refused(run(kubeconfig({ kind: "Secret" })), R.KubeconfigInvalid)
    refused(
      run(kubeconfig({ contexts: [{ name: "", context: { cluster: "member", user: "hub" } }] })),
      R.KubeconfigInvalid,
    )
  })

  it("refuses duplicate names and a kubeconfig without contexts", () => {
    assert.include(refused(run(kubeconfig({ users: [user(), user()] })), R.KubeconfigInvalid), 'named "hub"')
    assert.include(refused(run(kubeconfig({ contexts: [] })), R.KubeconfigInvalid), "no contexts")
    refused(run(kubeconfig({ contexts: undefined })), R.KubeconfigInvalid)
  })
})

describe("checkKubeconfig: contexts", () => {
  const several = kubeconfig({
    clusters: [cluster(), cluster("b", { server: "https://b.example:6443" })],
    users: [user(), userOnly("b-exec", { exec: { command: "aws", args: ["eks", "get-token"] } })],
    contexts: [context(), context("b", "b", "b-exec")],
    "current-context": "member",
  })

  it("refuses several contexts without the annotation, whatever current-context says", () => {
    const msg = refused(run(several), R.ContextAmbiguous)
    assert.include(msg, contextAnnotation)
    assert.include(msg, '"member", "b"')
    assert.include(msg, "current-context is not used")
  })

  it("uses the annotated context only, and loads nothing else", () => {
    const ok = accepted(run(several, { annotations: { [contextAnnotation]: "member" } }))
    assert.strictEqual(ok.contextName, "member")
    assert.strictEqual(ok.server, server)
    assert.deepStrictEqual(
      ok.kubeConfig.getClusters().map((c) => c.name),
      ["member"],
    )
    assert.deepStrictEqual(
      ok.kubeConfig.getUsers().map((u) => u.name),
      ["hub"],
    )
    assert.deepStrictEqual(
      ok.kubeConfig.getContexts().map((c) => c.name),
      ["member"],
    )
    // The other context's exec user is never checked or loaded; choosing it applies the policy.
    refused(run(several, { annotations: { [contextAnnotation]: "b" } }), R.ExecPluginRefused)
  })

  it("refuses an annotation naming a context that does not exist", () => {
    const msg = refused(run(several, { annotations: { [contextAnnotation]: "nope" } }), R.ContextNotFound)
    assert.include(msg, '"nope"')
    refused(run(kubeconfig(), { annotations: { [contextAnnotation]: "other" } }), R.ContextNotFound)
    refused(run(kubeconfig(), { annotations: { [contextAnnotation]: "" } }), R.ContextNotFound)
  })

  it("refuses dangling cluster and user references", () => {
    const danglingCluster = kubeconfig({ contexts: [context("member", "gone", "hub")] })
    assert.include(refused(run(danglingCluster), R.ClusterNotFound), 'cluster "gone"')
    const danglingUser = kubeconfig({ contexts: [context("member", "member", "ghost")] })
    assert.include(refused(run(danglingUser), R.UserNotFound), 'user "ghost"')
    const noUser = kubeconfig({ contexts: [{ name: "member", context: { cluster: "member" } }] })
    assert.include(refused(run(noUser), R.UserNotFound), "names no user")
    refused(run(kubeconfig({ users: [] })), R.UserNotFound)
  })
})

describe("checkKubeconfig: policy", () => {
  const withUser = (fields: Entry) => kubeconfig({ users: [userOnly("hub", fields)] })
  const withCluster = (fields: Entry) => kubeconfig({ clusters: [cluster("member", fields)] })

  it("refuses exec plugins unless allowed", () => {
    const exec = withUser({
      exec: {
        apiVersion: "client.authentication.k8s.io/v1",
        command: "aws",
        args: ["eks", "get-token", "--cluster-name", "m1"],
        env: [{ name: "AWS_SECRET", value: "SENTINEL-env" }],
      },
    })
    const msg = refused(run(exec), R.ExecPluginRefused)
    assert.include(msg, "exec")
    assert.include(msg, "allowExec")
    const ok = accepted(run(exec, { policy: { allowExec: true } }))
    assert.strictEqual(ok.kubeConfig.getCurrentUser()?.exec?.command, "aws")
    refused(run(withUser({ exec: { args: ["x"] } }), { policy: { allowExec: true } }), R.KubeconfigInvalid)
  })

  it("refuses auth-provider users unless allowed, and their commands and files per policy", () => {
    const oidc = withUser({
      "auth-provider": {
        name: "oidc",
        config: {
          "idp-issuer-url": "https://issuer.example",
          "client-id": "hub",
          "id-token": jwt({ exp: 1 }),
        },
      },
    })
    assert.include(refused(run(oidc), R.AuthProviderRefused), "allowAuthProvider")
    accepted(run(oidc, { policy: { allowAuthProvider: true } }))

    const gcp = withUser({ "auth-provider": { name: "gcp", config: { "cmd-path": "/usr/bin/gcloud" } } })
    refused(run(gcp, { policy: { allowAuthProvider: true } }), R.ExecPluginRefused)
    accepted(run(gcp, { policy: { allowAuthProvider: true, allowExec: true } }))

    const file = withUser({
      "auth-provider": { name: "tokenFile", config: { tokenFile: "/run/SENTINEL/token" } },
    })
    refused(run(file, { policy: { allowAuthProvider: true } }), R.FilePathRefused)
    accepted(run(file, { policy: { allowAuthProvider: true, allowFilePaths: true } }))

    const unknown = withUser({ "auth-provider": { name: "openstack", config: {} } })
    refused(run(unknown, { policy: { allowAuthProvider: true } }), R.KubeconfigUnsupported)
  })

  const fileFields: Array<[string, Entry, Entry]> = [
    ["certificate-authority", { "certificate-authority": "/etc/SENTINEL/ca.crt" }, { token }],
    ["client-certificate", {}, { "client-certificate": "/etc/SENTINEL/tls.crt", "client-key-data": keyData }],
    ["client-key", {}, { "client-certificate-data": certData, "client-key": "/etc/SENTINEL/tls.key" }],
    ["tokenFile", {}, { tokenFile: "/var/run/SENTINEL/token" }],
    ["token-file", {}, { "token-file": "/var/run/SENTINEL/token" }],
  ]
  for (const [field, clusterFields, userFields] of fileFields) {
    it(`refuses the file path ${field} unless allowed, and never reads it`, () => {
      const doc = kubeconfig({
        clusters: [cluster("member", clusterFields)],
        users: [userOnly("hub", userFields)],
      })
      const msg = refused(run(doc), R.FilePathRefused)
      assert.include(msg, `.${field} is a file path`)
      assert.include(msg, "allowFilePaths")
      // Allowed: the paths do not exist, and the check still passes because it reads nothing.
      accepted(run(doc, { policy: { allowFilePaths: true } }))
    })
  }

  it("refuses paths into the hub's own secrets and kernel file systems, even with file paths allowed", () => {
    const allowed = { policy: { allowFilePaths: true, allowAuthProvider: true } }
    const paths = [
      "/var/run/secrets/kubernetes.io/serviceaccount/token",
      "/run/secrets/kubernetes.io/serviceaccount/token",
      "/var/run/secrets",
      "/var/run/../run/secrets/kubernetes.io/serviceaccount/ca.crt",
      "//var/run/secrets/x",
      "/var/run/./secrets/x",
      "/proc/self/root/var/run/secrets/kubernetes.io/serviceaccount/token",
      "/dev/zero",
      "/sys/kernel/x",
    ]
    for (const path of paths) {
      for (const fields of [
        { user: { tokenFile: path } },
        { user: { "token-file": path } },
        { user: { "auth-provider": { name: "tokenFile", config: { tokenFile: path } } } },
        { user: { "client-certificate": path, "client-key": "/etc/tls.key" } },
        { cluster: { "certificate-authority-data": null, "certificate-authority": path } },
      ]) {
        const doc = kubeconfig({
          users: [userOnly("hub", fields.user ?? { token })],
          clusters: [cluster("member", fields.cluster ?? {})],
        })
        const msg = refused(run(doc, allowed), R.FilePathRefused)
        assert.include(msg, "the hub's own secrets or a kernel file system")
        // The message names the field and the refused roots, never the path as written.
        if (path !== "/var/run/secrets") assert.notInclude(msg, path)
      }
    }
    // Neighbours are fine: only those trees are refused.
    accepted(run(withUser({ tokenFile: "/var/run/secrets-mine/token" }), allowed))
    accepted(run(withUser({ tokenFile: "/etc/fleetcheck/members/token" }), allowed))
  })

  it("loads allowed file paths into client-node, and refuses relative ones", () => {
    const ok = accepted(
      run(
        kubeconfig({
          clusters: [
            cluster("member", { "certificate-authority-data": null, "certificate-authority": "/etc/ca.crt" }),
          ],
          users: [userOnly("hub", { "client-certificate": "/etc/tls.crt", "client-key": "/etc/tls.key" })],
        }),
        { policy: { allowFilePaths: true } },
      ),
    )
    assert.strictEqual(ok.kubeConfig.getCurrentCluster()?.caFile, "/etc/ca.crt")
    assert.strictEqual(ok.kubeConfig.getCurrentUser()?.certFile, "/etc/tls.crt")
    assert.strictEqual(ok.kubeConfig.getCurrentUser()?.keyFile, "/etc/tls.key")
    const viaTokenFile = accepted(
      run(withUser({ tokenFile: "/var/run/token" }), { policy: { allowFilePaths: true } }),
    )
    assert.deepStrictEqual(viaTokenFile.kubeConfig.getCurrentUser()?.authProvider, {
      name: "tokenFile",
      config: { tokenFile: "/var/run/token" },
    })
    const relative = withCluster({ "certificate-authority": "ca.crt" })
    assert.include(
      refused(run(relative, { policy: { allowFilePaths: true } }), R.KubeconfigInvalid),
      "absolute",
    )
  })

  it("refuses insecure-skip-tls-verify together with a CA, even when allowed (as client-go does)", () => {
    const allowed = { policy: { allowInsecureSkipTlsVerify: true } }
    const withCa = withCluster({ "insecure-skip-tls-verify": true })
    assert.include(refused(run(withCa, allowed), R.KubeconfigInvalid), "certificate-authority")
    const withCaFile = withCluster({
      "insecure-skip-tls-verify": true,
      "certificate-authority-data": null,
      "certificate-authority": "/etc/ca.crt",
    })
    refused(
      run(withCaFile, { policy: { allowInsecureSkipTlsVerify: true, allowFilePaths: true } }),
      R.KubeconfigInvalid,
    )
  })

  it("refuses insecure-skip-tls-verify unless allowed", () => {
    const insecure = withCluster({ "insecure-skip-tls-verify": true, "certificate-authority-data": null })
    assert.include(refused(run(insecure), R.InsecureSkipTLSVerifyRefused), "insecure-skip-tls-verify")
    const ok = accepted(run(insecure, { policy: { allowInsecureSkipTlsVerify: true } }))
    assert.isTrue(ok.kubeConfig.getCurrentCluster()?.skipTLSVerify)
    accepted(run(withCluster({ "insecure-skip-tls-verify": false })))
  })

  it("requires an https server with a host; plain http never, not even when insecure is allowed", () => {
    const http = withCluster({ server: "http://member-1.example:8080" })
    assert.include(refused(run(http), R.PlaintextServerRefused), "plain http")
    const stillRefused = refused(
      run(http, { policy: { allowInsecureSkipTlsVerify: true } }),
      R.PlaintextServerRefused,
    )
    assert.include(stillRefused, "plain http")
    assert.notInclude(stillRefused, "allowInsecureSkipTlsVerify")
    refused(run(withCluster({ server: "ftp://member-1.example" })), R.KubeconfigInvalid)
    refused(run(withCluster({ server: "member-1.example:6443" })), R.KubeconfigInvalid)
    refused(run(withCluster({ server: "not a url" })), R.KubeconfigInvalid)
    const userinfo = refused(
      run(withCluster({ server: "https://admin:SENTINEL-pw@member-1.example" })),
      R.KubeconfigInvalid,
    )
    assert.include(userinfo, "credentials in the URL")
  })

  it("refuses what the hub's client cannot honour: proxy-url, group or uid impersonation", () => {
    assert.include(
      refused(run(withCluster({ "proxy-url": "http://proxy:3128" })), R.KubeconfigUnsupported),
      "proxy-url",
    )
    refused(run(withUser({ token, "as-groups": ["system:masters"] })), R.KubeconfigUnsupported)
    refused(run(withUser({ token, "as-uid": "1" })), R.KubeconfigUnsupported)
    refused(run(withUser({ token, "as-user-extra": { scopes: ["a"] } })), R.KubeconfigUnsupported)
    accepted(run(withUser({ token, "as-groups": [] })))
  })
})

describe("checkKubeconfig: several refusals", () => {
  it("reports every refusal: the reason is the first in refusalOrder, the message lists them all", () => {
    const result = run(
      kubeconfig({
        clusters: [
          cluster("member", { server: "http://member-1.example/sub", "proxy-url": "http://proxy:3128" }),
        ],
        users: [userOnly("hub", { exec: { apiVersion: "client.authentication.k8s.io/v1", command: "aws" } })],
      }),
      { annotations: { [namespacesAnnotation]: "" } },
    )
    if (result.ok) return assert.fail("accepted")
    assert.strictEqual(result.reason, R.PlaintextServerRefused)
    assert.deepStrictEqual(result.reasons, [
      R.PlaintextServerRefused,
      R.ExecPluginRefused,
      R.ServerURLRefused,
      R.KubeconfigUnsupported,
      R.NamespacesInvalid,
    ])
    assert.include(result.message, 'Secret "member-1": refused for 5 reasons: ')
    for (const words of [
      "plain http",
      ".exec runs a command",
      "has a path",
      "proxy-url",
      namespacesAnnotation,
    ])
      assert.include(result.message, words)
    assert.strictEqual(
      result.message.indexOf('Secret "member-1"'),
      result.message.lastIndexOf('Secret "member-1"'),
    )
    assertNoSecrets(result.message)
  })

  it("keeps one refusal's message as it was, and orders reasons whatever order the checks ran in", () => {
    const one = run(kubeconfig({ clusters: [cluster("member", { server: "http://member-1.example" })] }))
    if (one.ok) return assert.fail("accepted")
    assert.deepStrictEqual(one.reasons, [R.PlaintextServerRefused])
    assert.notInclude(one.message, "reasons")
    assert.sameMembers([...refusalOrder], Object.values(R), "every reason has its place in the order")
  })
})

describe("checkKubeconfig: credentials", () => {
  const withUser = (fields: Entry) => kubeconfig({ users: [userOnly("hub", fields)] })

  it("refuses a user without credentials", () => {
    refused(run(withUser({})), R.CredentialsMissing)
    refused(run(kubeconfig({ users: [{ name: "hub" }] })), R.CredentialsMissing)
    refused(run(withUser({ username: "admin" })), R.CredentialsMissing)
    refused(run(withUser({ token: "" })), R.CredentialsMissing)
  })

  it("refuses an impersonation value (as) with CR/LF, control or non-ASCII characters", () => {
    for (const as of [
      "evil\r\nX-Injected: 1",
      "a\nb",
      "tab\there",
      "jos\u00e9",
      "\u30e6\u30fc\u30b6",
      " lead",
      "trail ",
    ]) {
      const msg = refused(run(withUser({ token, as })), R.KubeconfigInvalid)
      assert.include(msg, ".as ")
      assert.notInclude(msg, "evil")
    }
    const ok = accepted(run(withUser({ token, as: "system:serviceaccount:ops:Jane Doe" })))
    assert.strictEqual(ok.kubeConfig.getCurrentUser()?.impersonateUser, "system:serviceaccount:ops:Jane Doe")
  })

  it("refuses a token with whitespace or control characters", () => {
    assert.include(refused(run(withUser({ token: `${token}\n` })), R.KubeconfigInvalid), "whitespace")
    refused(run(withUser({ token: `Bearer ${token}` })), R.KubeconfigInvalid)
  })

  it("accepts a client certificate with its key and hands both to client-node", async () => {
    const ok = accepted(run(withUser({ "client-certificate-data": certData, "client-key-data": keyData })))
    assert.strictEqual(ok.credentialExpiry?.toISOString(), clientCertNotAfter.toISOString())
    const opts = await httpsOptions(ok)
    assert.strictEqual(String(opts.cert), clientCertPem)
    assert.strictEqual(String(opts.key), clientKeyPem)
  })

  it("refuses mismatched, unpaired or garbage certificate and key data", () => {
    const mismatch = withUser({ "client-certificate-data": certData, "client-key-data": otherKeyData })
    assert.include(refused(run(mismatch), R.KubeconfigInvalid), "does not match")
    assert.include(
      refused(run(withUser({ "client-certificate-data": certData })), R.KubeconfigInvalid),
      "no client key",
    )
    assert.include(
      refused(run(withUser({ "client-key-data": keyData })), R.KubeconfigInvalid),
      "no client certificate",
    )
    const garbageCert = withUser({
      "client-certificate-data": b64("SENTINEL not a cert"),
      "client-key-data": keyData,
    })
    assert.include(refused(run(garbageCert), R.KubeconfigInvalid), "client-certificate-data is not a PEM")
    const garbageKey = withUser({
      "client-certificate-data": certData,
      "client-key-data": b64(`${token} not a key`),
    })
    assert.include(refused(run(garbageKey), R.KubeconfigInvalid), "client-key-data is not a PEM")
    const notBase64 = withUser({ "client-certificate-data": certData, "client-key-data": `${keyData}!` })
    assert.include(refused(run(notBase64), R.KubeconfigInvalid), "client-key-data is not valid base64")
    const badCa = kubeconfig({
      clusters: [cluster("member", { "certificate-authority-data": b64("not a ca") })],
    })
    assert.include(refused(run(badCa), R.KubeconfigInvalid), "certificate-authority-data is not a PEM")
  })

  it("reads the JWT exp claim of the bearer token", () => {
    const exp = new Date("2027-01-15T00:00:00Z")
    const ok = accepted(
      run(
        withUser({ token: jwt({ sub: "system:serviceaccount:fleetcheck:hub", exp: exp.getTime() / 1000 }) }),
      ),
    )
    assert.strictEqual(ok.credentialExpiry?.toISOString(), exp.toISOString())
    assert.isUndefined(accepted(run(withUser({ token: jwt({ sub: "no-exp" }) }))).credentialExpiry)
    assert.isUndefined(jwtExpiry("a.b.c"))
    assert.isUndefined(jwtExpiry(`x.${b64url({ exp: "soon" })}.y`))
    assert.isUndefined(jwtExpiry(token))
  })

  it("reports the earliest of token exp and certificate notAfter", () => {
    const early = new Date("2030-01-01T00:00:00Z")
    const late = new Date("2040-01-01T00:00:00Z")
    const both = (exp: Date) =>
      withUser({
        token: jwt({ exp: exp.getTime() / 1000 }),
        "client-certificate-data": certData,
        "client-key-data": keyData,
      })
    assert.strictEqual(accepted(run(both(early))).credentialExpiry?.toISOString(), early.toISOString())
    assert.strictEqual(
      accepted(run(both(late))).credentialExpiry?.toISOString(),
      clientCertNotAfter.toISOString(),
    )
  })

  it("refuses credentials that have already expired", () => {
    const expiredToken = withUser({ token: jwt({ exp: new Date("2026-11-01T00:00:00Z").getTime() / 1000 }) })
    assert.include(refused(run(expiredToken), R.CredentialsExpired), "JWT exp")
    const cert = withUser({ "client-certificate-data": certData, "client-key-data": keyData })
    const msg = refused(run(cert, { now: new Date("2037-01-01T00:00:00Z") }), R.CredentialsExpired)
    assert.include(msg, "client certificate")
    assert.include(msg, clientCertNotAfter.toISOString())
  })
})

describe("checkKubeconfig: namespaces annotation", () => {
  const withNs = (value: string) => run(kubeconfig(), { annotations: { [namespacesAnnotation]: value } })

  it("parses a comma-separated list, trimming blanks and dropping duplicates", () => {
    assert.deepStrictEqual(accepted(withNs(" shop , payments,shop")).namespaces, ["shop", "payments"])
    assert.deepStrictEqual(accepted(withNs("a")).namespaces, ["a"])
    assert.deepStrictEqual(accepted(withNs("x".repeat(63))).namespaces, ["x".repeat(63)])
  })

  it("refuses names that are not DNS-1123 labels, empty entries and an empty annotation", () => {
    for (const bad of ["Shop", "a_b", "-a", "a-", "a.b", "x".repeat(64), "a,,b", "a,", "", "  "]) {
      const msg = refused(withNs(bad), R.NamespacesInvalid)
      assert.include(msg, namespacesAnnotation)
    }
    const many = Array.from({ length: 101 }, (_, i) => `ns-${i}`).join(",")
    assert.include(refused(withNs(many), R.NamespacesInvalid), "at most 100")
    assert.isFalse(parseNamespaces("Shop").ok)
  })
})

describe("credentialsExpiringSoon", () => {
  const day = 24 * 60 * 60 * 1000
  it("is true within the window (default 7 days) or after expiry, false otherwise", () => {
    assert.isFalse(credentialsExpiringSoon(undefined, now, 7 * day))
    assert.isFalse(credentialsExpiringSoon(new Date(now.getTime() + 8 * day), now, 7 * day))
    assert.isTrue(credentialsExpiringSoon(new Date(now.getTime() + 6 * day), now, 7 * day))
    assert.isTrue(credentialsExpiringSoon(new Date(now.getTime() - day), now, 7 * day))
    assert.isFalse(credentialsExpiringSoon(new Date(now.getTime() + 2 * day), now, day))
  })
})
