// What a reconcile derives from a cached BackupCheck alone, computed once per object. A converged
// reconcile reads the same cached object again and again, and parsing it (zod, defaults applied) and
// hashing its spec (sha256 over canonical JSON) were a quarter of its CPU. The informer's store never
// mutates an object (a change replaces it), and nothing downstream mutates the parsed spec (the restore
// Job is rendered from a structuredClone), so the derivation is kept in a WeakMap keyed by the object,
// which lets go of it with the object. Only what the reconciler reads is kept: the parsed spec and its
// hash, whether the status parsed and the creation time (a whole parsed copy of every cached check would cost about
// 1.4 KB each; this costs tens of bytes, as the parsed spec shares the API server-defaulted input's parts).
//
// A new version of a check whose spec did not change carries the cached version's spec object (the
// store shares unchanged parts, share-unchanged.ts), so the parsed spec and its hash are also kept per
// spec object, and per status object whether it is valid: an update to labels, annotations or the
// status re-validates only the metadata (and a new status), not the spec, and hashes nothing.
import {
  type BackupCheck,
  type BackupCheckSpec,
  backupCheckHeadValid,
  backupCheckStatusValid,
  parseBackupCheck,
} from "../api/backupcheck.ts"
import { specHashFor } from "./run-identity.ts"

export type CheckDerivation =
  | {
      readonly success: true
      readonly spec: BackupCheckSpec
      readonly specHash: string
      /** false: the status did not parse and was dropped (the reconciler then rewrites it). */
      readonly statusValid: boolean
      /** Date.parse(metadata.creationTimestamp): NaN without one (Date.parse was 3% of a converged reconcile). */
      readonly createdAt: number
    }
  | { readonly success: false; readonly error: string }

interface SpecDerivation {
  readonly spec: BackupCheckSpec
  readonly specHash: string
}

const derivations = new WeakMap<object, CheckDerivation>()
/** Keyed by the unparsed spec object of a check that parsed. */
const specDerivations = new WeakMap<object, SpecDerivation>()
/** Keyed by the unparsed status object. */
const statusValidity = new WeakMap<object, boolean>()

const isObject = (v: unknown): v is object => typeof v === "object" && v !== null

const statusValid = (status: unknown): boolean => {
  if (!isObject(status)) return backupCheckStatusValid(status)
  let valid = statusValidity.get(status)
  if (valid === undefined) {
    valid = backupCheckStatusValid(status)
    statusValidity.set(status, valid)
  }
  return valid
}

const createdAtOf = (check: BackupCheck) => Date.parse(check.metadata.creationTimestamp ?? "")

/** The derivation of a check whose spec object was parsed before, or undefined to parse it whole. */
const withKnownSpec = (check: BackupCheck): CheckDerivation | undefined => {
  const rawSpec: unknown = check.spec
  if (!isObject(rawSpec)) return undefined
  const known = specDerivations.get(rawSpec)
  // Anything else wrong goes the whole parse's way, for its error message.
  if (known === undefined || !backupCheckHeadValid(check)) return undefined
  return {
    success: true,
    spec: known.spec,
    specHash: known.specHash,
    statusValid: statusValid((check as { status?: unknown }).status),
    createdAt: createdAtOf(check),
  }
}

const parsedWhole = (check: BackupCheck): CheckDerivation => {
  const parsed = parseBackupCheck(check)
  if (!parsed.success) return { success: false, error: parsed.error }
  const spec = parsed.data.spec
  const specHash = specHashFor(spec)
  const rawSpec: unknown = check.spec
  if (isObject(rawSpec)) specDerivations.set(rawSpec, { spec, specHash })
  return {
    success: true,
    spec,
    specHash,
    statusValid: parsed.data.status !== undefined,
    createdAt: createdAtOf(check),
  }
}

/** parseBackupCheck(check) and specHashFor(its spec), once per object (and per spec object). */
export const derivedCheck = (check: BackupCheck): CheckDerivation => {
  let derived = derivations.get(check)
  if (derived === undefined) {
    derived = withKnownSpec(check) ?? parsedWhole(check)
    derivations.set(check, derived)
  }
  return derived
}
