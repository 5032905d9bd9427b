// A self-signed serving certificate made in memory, for secure serving without certificate files (as
// controller-runtime does when its metrics server has no CertDir): an ECDSA P-256 key from node:crypto
// and an X.509 v3 certificate written here in DER. Node can sign and parse certificates but not build
// one, and the encoding a server certificate needs is small: a few SEQUENCEs, OIDs, strings and times.
// It is for encryption on the wire; clients that must know whom they talk to trust a certificate from
// files (cert-manager), or pin this one by the SHA-256 fingerprint the hub logs.
import { generateKeyPairSync, randomBytes, sign, X509Certificate } from "node:crypto"
import { isIP } from "node:net"

/** DER tag-length-value. */
const tlv = (tag: number, body: Buffer): Buffer => {
  const n = body.length
  const length =
    n < 0x80
      ? Buffer.from([n])
      : n < 0x100
        ? Buffer.from([0x81, n])
        : n < 0x10000
          ? Buffer.from([0x82, n >> 8, n & 0xff])
          : Buffer.from([0x83, n >> 16, (n >> 8) & 0xff, n & 0xff])
  return Buffer.concat([Buffer.from([tag]), length, body])
}
const sequence = (...items: Buffer[]) => tlv(0x30, Buffer.concat(items))
const set = (...items: Buffer[]) => tlv(0x31, Buffer.concat(items))
const explicit = (n: number, inner: Buffer) => tlv(0xa0 + n, inner)
const octets = (b: Buffer) => tlv(0x04, b)
const bits = (b: Buffer) => tlv(0x03, Buffer.concat([Buffer.from([0]), b]))
const utf8 = (s: string) => tlv(0x0c, Buffer.from(s, "utf8"))
const boolTrue = tlv(0x01, Buffer.from([0xff]))

const oid = (dotted: string): Buffer => {
  const [a, b, ...rest] = dotted.split(".").map(Number) as [number, number, ...number[]]
  const bytes = [40 * a + b]
  for (const arc of rest) {
    const base128 = [arc & 0x7f]
    for (let v = Math.floor(arc / 128); v > 0; v = Math.floor(v / 128)) base128.unshift((v & 0x7f) | 0x80)
    bytes.push(...base128)
  }
  return tlv(0x06, Buffer.from(bytes))
}

/**
 * A positive INTEGER of 16 random bytes: the top bit cleared (the sign must be +) and the next one set,
 * so the first byte is never 0 (DER wants the shortest form: a leading 0 byte would make it invalid).
 */
const serialNumber = () => {
  const b = randomBytes(16)
  b[0] = ((b[0] ?? 0) & 0x7f) | 0x40
  return tlv(0x02, b)
}

/** UTCTime until 2049, GeneralizedTime after, as RFC 5280 §4.1.2.5 says. */
const time = (d: Date) => {
  const iso = d.toISOString().replace(/[-:T]/g, "").slice(0, 14)
  return d.getUTCFullYear() < 2050
    ? tlv(0x17, Buffer.from(`${iso.slice(2)}Z`, "ascii"))
    : tlv(0x18, Buffer.from(`${iso}Z`, "ascii"))
}

const ipBytes = (ip: string): Buffer => {
  if (isIP(ip) === 4) return Buffer.from(ip.split(".").map(Number))
  // IPv6: expand "::" and write the eight groups.
  const [head = "", tail = ""] = ip.split("::")
  const h = head ? head.split(":") : []
  const t = ip.includes("::") ? (tail ? tail.split(":") : []) : []
  const groups = [...h, ...Array(8 - h.length - t.length).fill("0"), ...t]
  return Buffer.concat(groups.map((g) => Buffer.from(g.padStart(4, "0"), "hex")))
}

const extension = (id: string, critical: boolean, value: Buffer) =>
  sequence(oid(id), ...(critical ? [boolTrue] : []), octets(value))

const ecdsaWithSha256 = sequence(oid("1.2.840.10045.4.3.2"))

export interface ServingPair {
  /** PEM: the certificate, then any intermediates. */
  readonly cert: string
  /** PEM, PKCS #8. */
  readonly key: string
}

/** How long a generated certificate is valid, and how far back it starts (clients' clocks drift). */
export const selfSignedValidityMs = 365 * 24 * 3600 * 1000
export const selfSignedBackdateMs = 3600 * 1000

/**
 * A certificate for `names` (DNS names and IP addresses, the first one also its common name), valid
 * for a year from an hour ago: key usage digital signature, extended key usage server authentication,
 * not a CA.
 */
export const selfSignedServingPair = (names: ReadonlyArray<string>, now = new Date()): ServingPair => {
  const { privateKey, publicKey } = generateKeyPairSync("ec", {
    namedCurve: "P-256",
  })
  const subject = sequence(set(sequence(oid("2.5.4.3"), utf8(names[0] ?? "fleetcheck-hub"))))
  const altNames = sequence(
    ...names.map((n) => (isIP(n) ? tlv(0x87, ipBytes(n)) : tlv(0x82, Buffer.from(n, "ascii")))),
  )
  const tbs = sequence(
    explicit(0, tlv(0x02, Buffer.from([2]))),
    serialNumber(),
    ecdsaWithSha256,
    subject,
    sequence(
      time(new Date(now.getTime() - selfSignedBackdateMs)),
      time(new Date(now.getTime() + selfSignedValidityMs)),
    ),
    subject,
    publicKey.export({ type: "spki", format: "der" }),
    explicit(
      3,
      sequence(
        extension("2.5.29.19", true, sequence()),
        // keyUsage: digitalSignature (bit 0).
        extension("2.5.29.15", true, tlv(0x03, Buffer.from([7, 0x80]))),
        extension("2.5.29.37", false, sequence(oid("1.3.6.1.5.5.7.3.1"))),
        extension("2.5.29.17", false, altNames),
      ),
    ),
  )
  const der = sequence(tbs, ecdsaWithSha256, bits(sign("sha256", tbs, privateKey)))
  const cert = new X509Certificate(der)
  // Node parsed it; the signature must verify with its own key, or the encoding is wrong.
  if (!cert.verify(publicKey)) throw new Error("the generated certificate does not verify")
  return {
    cert: cert.toString(),
    key: privateKey.export({ type: "pkcs8", format: "pem" }).toString(),
  }
}
