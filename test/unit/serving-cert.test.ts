// Secure serving's certificate: the self-signed one the hub makes, the checks a pair from files must
// pass (at start and on every reload), and a real HTTPS listener that takes a rotated pair for new
// connections without closing, while refusing a broken one. Files are real, in a temporary directory.
import { X509Certificate } from "node:crypto"
import { mkdtempSync, rmSync, writeFileSync } from "node:fs"
import { get as httpGet } from "node:http"
import { createServer as createHttpsServer, request } from "node:https"
import { tmpdir } from "node:os"
import { join } from "node:path"
import { connect, type SecureContextOptions } from "node:tls"
import { afterAll, assert, describe, it } from "@effect/vitest"
import { runHubCommand } from "../../src/cli/hub.ts"
import { defaultHubConfig } from "../../src/hub/config.ts"
import { startHubHttp } from "../../src/hub/http.ts"
import { readServingCert } from "../../src/hub/launch.ts"
import { selfSignedServingPair } from "../../src/hub/serving/self-signed.ts"
import {
  checkServingPair,
  loadServingFiles,
  maxServingFileBytes,
  ServingCertError,
  tlsServerOptions,
  watchServingFiles,
} from "../../src/hub/serving/serving-cert.ts"
import { makeMetrics } from "../../src/observability/metrics/index.ts"

const dir = mkdtempSync(join(tmpdir(), "fleetcheck-serving-"))
afterAll(() => rmSync(dir, { recursive: true, force: true }))
const certFile = join(dir, "tls.crt")
const keyFile = join(dir, "tls.key")
const write = (pair: { cert: string; key: string }) => {
  writeFileSync(certFile, pair.cert)
  writeFileSync(keyFile, pair.key)
}
const fingerprint = (pem: string) => new X509Certificate(pem).fingerprint256

const thrown = (f: () => unknown): Error => {
  try {
    f()
  } catch (e) {
    return e as Error
  }
  assert.fail("expected an error")
}

/** One GET on a new connection, trusting `ca` only; the status and the certificate the server showed. */
const getOverTls = (port: number, ca: string, path: string) =>
  new Promise<{ status: number; fingerprint: string; protocol: string | null }>((resolve, reject) => {
    const req = request({ host: "127.0.0.1", port, path, ca, agent: false }, (res) => {
      const socket = res.socket as import("node:tls").TLSSocket
      const seen = { fingerprint: socket.getPeerCertificate().fingerprint256, protocol: socket.getProtocol() }
      res.resume()
      res.on("end", () => resolve({ status: res.statusCode ?? 0, ...seen }))
    })
    req.once("error", reject)
    req.end()
  })

describe("secure serving's certificate", () => {
  it("the self-signed certificate: names, a year from an hour ago, server auth, not a CA, its key", () => {
    const now = new Date("2026-12-01T05:00:00Z")
    const pair = selfSignedServingPair(["hub-7f9c", "localhost", "127.0.0.1", "::1"], now)
    const cert = new X509Certificate(pair.cert)
    assert.strictEqual(cert.subject, "CN=hub-7f9c")
    assert.strictEqual(cert.issuer, cert.subject)
    assert.strictEqual(
      cert.subjectAltName,
      "DNS:hub-7f9c, DNS:localhost, IP Address:127.0.0.1, IP Address:0:0:0:0:0:0:0:1",
    )
    assert.strictEqual(new Date(cert.validFrom).toISOString(), "2026-12-01T04:00:00.000Z")
    assert.strictEqual(new Date(cert.validTo).toISOString(), "2027-12-01T05:00:00.000Z")
    assert.isFalse(cert.ca)
    assert.deepStrictEqual(cert.keyUsage, ["1.3.6.1.5.5.7.3.1"])
    assert.isTrue(cert.checkHost("localhost") !== undefined && cert.checkIP("127.0.0.1") !== undefined)
    assert.isTrue(cert.verify(cert.publicKey))
    // Every one is valid DER: 1,000 of them parse and verify (a serial starting with a 0 byte, which
    // random bytes give once in 256, would not).
    for (let i = 0; i < 1000; i++) {
      const c = new X509Certificate(selfSignedServingPair(["x"], now).cert)
      assert.isTrue(c.verify(c.publicKey))
    }
    // Two certificates never share a key or a serial.
    const other = new X509Certificate(selfSignedServingPair(["hub-7f9c"], now).cert)
    assert.notStrictEqual(other.serialNumber, cert.serialNumber)
    assert.notStrictEqual(other.fingerprint256, cert.fingerprint256)
    // Secure serving without files makes one for the listener's address as well.
    const made = readServingCert({ ...defaultHubConfig, httpAddress: { host: "10.1.2.3", port: 8443 } })
    assert.strictEqual(made?.source, "self-signed")
    assert.include(new X509Certificate(made!.pair.cert).subjectAltName, "IP Address:10.1.2.3")
    assert.strictEqual(made?.fingerprint, fingerprint(made!.pair.cert))
    assert.strictEqual(readServingCert({ ...defaultHubConfig, secureServing: false }), undefined)
  })

  it("a pair is refused when the key is another's, the certificate expired or either is not PEM", () => {
    const a = selfSignedServingPair(["a"])
    const b = selfSignedServingPair(["b"])
    assert.strictEqual((checkServingPair(a) as { fingerprint: string }).fingerprint, fingerprint(a.cert))
    assert.deepStrictEqual(checkServingPair({ cert: a.cert, key: b.key }), {
      error: "the private key does not belong to the certificate",
    })
    const old = selfSignedServingPair(["old"], new Date(Date.now() - 2 * 365 * 24 * 3600 * 1000))
    assert.match((checkServingPair(old) as { error: string }).error, /^the certificate expired at /)
    assert.property(checkServingPair({ cert: "not a certificate", key: a.key }), "error")
    assert.property(checkServingPair({ cert: a.cert, key: "not a key" }), "error")
  })

  it("at start: a missing, oversized or mismatched file stops the hub with a message naming it", async () => {
    const missing = thrown(() => loadServingFiles(join(dir, "nope.crt"), keyFile))
    assert.instanceOf(missing, ServingCertError)
    assert.match(missing.message, /cannot read the serving certificate: .*ENOENT.*nope\.crt/)
    writeFileSync(join(dir, "big.crt"), Buffer.alloc(maxServingFileBytes + 1, 65))
    assert.match(
      thrown(() => loadServingFiles(join(dir, "big.crt"), keyFile)).message,
      /--tls-cert-file .*big\.crt is \d+ bytes; at most 1048576/,
    )
    const a = selfSignedServingPair(["a"])
    writeFileSync(certFile, a.cert)
    writeFileSync(keyFile, selfSignedServingPair(["b"]).key)
    assert.match(
      thrown(() => loadServingFiles(certFile, keyFile)).message,
      /--tls-cert-file .*tls\.crt with --tls-private-key-file .*tls\.key cannot serve: the private key does not belong/,
    )
    // `fleetcheck hub` exits 2 with the message before it reads a kubeconfig or binds a port.
    const stderr: string[] = []
    const write = process.stderr.write.bind(process.stderr)
    process.stderr.write = ((chunk: string) => {
      stderr.push(String(chunk))
      return true
    }) as typeof process.stderr.write
    try {
      const code = await runHubCommand([
        "--kubeconfig",
        join(dir, "no-such.kubeconfig"),
        "--tls-cert-file",
        join(dir, "nope.crt"),
        "--tls-private-key-file",
        keyFile,
      ])
      assert.strictEqual(code, 2)
      const half = await runHubCommand(["--tls-cert-file", certFile])
      assert.strictEqual(half, 2)
    } finally {
      process.stderr.write = write
    }
    assert.match(stderr[0] ?? "", /^fleetcheck hub: cannot read the serving certificate: .*nope\.crt/)
    assert.match(stderr[1] ?? "", /--tls-cert-file and --tls-private-key-file go together/)
  })

  it("HTTPS on the listener: a rotated pair reaches new connections on the same port, a broken one is refused and the old kept", async () => {
    const first = selfSignedServingPair(["localhost", "127.0.0.1"])
    write(first)
    const initial = loadServingFiles(certFile, keyFile)
    const { server, port } = await startHubHttp({
      host: "127.0.0.1",
      port: 0,
      members: new Map(),
      fleetChecks: new Map(),
      metrics: makeMetrics(),
      isLeader: () => true,
      availability: () => ({ answers: true }),
      identity: "hub-tls",
      config: defaultHubConfig,
      access: undefined,
      serves: "all",
      tls: initial.pair,
    })
    const applied: string[] = []
    const refused: string[] = []
    let onApplied = () => {}
    const watch = watchServingFiles({
      certFile,
      keyFile,
      initial,
      apply: (next) => {
        if (!("setSecureContext" in server)) throw new Error("not an https server")
        server.setSecureContext(tlsServerOptions(next.pair))
        applied.push(next.fingerprint)
        onApplied()
      },
      refused: (e) => refused.push(e),
      watchFailed: (e) => refused.push(`watch: ${e}`),
    })
    try {
      const before = await getOverTls(port, first.cert, "/healthz")
      assert.deepStrictEqual(before, {
        status: 200,
        fingerprint: fingerprint(first.cert),
        protocol: "TLSv1.3",
      })
      // Plain HTTP to the TLS port gets no answer from the hub.
      const plain = await new Promise<string>((resolve) => {
        const req = httpGet({ host: "127.0.0.1", port, path: "/healthz", agent: false }, (res) =>
          resolve(`answered ${res.statusCode}`),
        )
        req.once("error", (e) => resolve(`refused: ${e.message}`))
      })
      assert.match(plain, /^refused: /)

      // cert-manager rewrites both files: the directory watch picks it up, no call needed.
      const second = selfSignedServingPair(["localhost", "127.0.0.1"])
      const seen = new Promise<void>((resolve) => {
        onApplied = resolve
      })
      write(second)
      await seen
      assert.deepStrictEqual(applied, [fingerprint(second.cert)])
      const after = await getOverTls(port, second.cert, "/healthz")
      assert.strictEqual(after.fingerprint, fingerprint(second.cert))
      assert.strictEqual(after.status, 200)
      // A client that still trusts only the old certificate no longer connects.
      const stale = await getOverTls(port, first.cert, "/healthz").then(
        () => "connected",
        (e: Error) => e.message,
      )
      assert.match(stale, /self-signed certificate|unable to verify/)

      // A certificate with another's key: refused once, logged, and the served pair stays.
      writeFileSync(certFile, selfSignedServingPair(["localhost"]).cert)
      watch.check()
      watch.check()
      assert.deepStrictEqual(refused, ["the private key does not belong to the certificate"])
      assert.strictEqual(
        (await getOverTls(port, second.cert, "/healthz")).fingerprint,
        fingerprint(second.cert),
      )
      // A file that vanished mid-rotation: refused too, the listener keeps serving.
      rmSync(keyFile)
      watch.check()
      assert.match(refused[1] ?? "", /cannot read the serving certificate: .*ENOENT/)
      assert.strictEqual((await getOverTls(port, second.cert, "/readyz")).status, 200)
      assert.strictEqual(applied.length, 1)
    } finally {
      watch.close()
      await new Promise<void>((resolve) => server.close(() => resolve()))
    }
  })

  it("TLS 1.1 is refused by the hub's settings; the same client gets through where 1.0 is allowed", async () => {
    const pair = selfSignedServingPair(["127.0.0.1"])
    const handshake = async (options: SecureContextOptions) => {
      const server = createHttpsServer(options, (_req, res) => res.end())
      await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve))
      const { port } = server.address() as { port: number }
      try {
        return await new Promise<string>((resolve) => {
          const client = connect(
            {
              host: "127.0.0.1",
              port,
              ca: pair.cert,
              minVersion: "TLSv1",
              maxVersion: "TLSv1.1",
              ciphers: "DEFAULT@SECLEVEL=0",
            },
            () => {
              resolve(`connected ${client.getProtocol()}`)
              client.destroy()
            },
          )
          client.once("error", (e: Error & { code?: string }) => resolve(`refused ${e.code}`))
        })
      } finally {
        server.close()
      }
    }
    assert.strictEqual(
      await handshake(tlsServerOptions(pair)),
      "refused ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION",
    )
    assert.strictEqual(
      await handshake({ ...pair, minVersion: "TLSv1", ciphers: "DEFAULT@SECLEVEL=0" }),
      "connected TLSv1.1",
    )
  })
})
