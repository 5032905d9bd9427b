// A result computed from every cached registering object, kept while those objects are the same ones.
// The informer stores keep an unchanged object's identity across relists and resyncs, so "the same
// objects in the same order" is a comparison of references; a result may also say until when it holds
// (a credential's expiry changes what the policy accepts, with no event to say so).
//
// Why: every registration reconcile asks the admission rule about all Secrets, and a resync reconciles
// every Secret: at 1,000 members that was 1,000 sorts of 1,000 candidates per resync.

export interface Computed<R> {
  readonly result: R
  /** The clock time (ms) from which the result must be computed again; Infinity: while the objects stay. */
  readonly validUntil: number
}

export const sameObjectsMemo = <O, R>(compute: (objects: ReadonlyArray<O>, now: number) => Computed<R>) => {
  let last: { readonly objects: ReadonlyArray<O>; readonly computed: Computed<R> } | undefined
  return (objects: ReadonlyArray<O>, now: number): R => {
    if (last !== undefined && now < last.computed.validUntil && sameItems(last.objects, objects))
      return last.computed.result
    const computed = compute(objects, now)
    last = { objects, computed }
    return computed.result
  }
}

const sameItems = <O>(a: ReadonlyArray<O>, b: ReadonlyArray<O>): boolean => {
  if (a.length !== b.length) return false
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false
  return true
}
