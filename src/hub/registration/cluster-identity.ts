// One engine per real cluster (SPEC §12 "cluster identity"). Two registrations can reach one API server
// under different URLs (a hostname and its IP, two DNS names, a load balancer and a node), which the
// registration's URL-and-CA comparison cannot see. So every engine asks the cluster who it is (the
// kube-system namespace UID, what the cluster-inventory About API's ClusterProperty
// `cluster.clusterset.k8s.io` holds) before its workers start, and this registry decides, the same way
// on every hub replica (each runs an engine per member, see ADR 0011):
//   rival     another registration of the same cluster ID with an overlapping namespace scope that is
//             earlier (creationTimestamp, then name): this one is a duplicate, and its workers stop
//   sole      no earlier rival, and no rival's workers still running: this one may work
// A registration whose identity cannot be read (its identity may not get kube-system) has no rival
// here; the URL-and-CA comparison still applies to it.
import { Deferred, Effect } from "effect"
import { type Namespaces, overlaps } from "./scope.ts"

interface Claimant {
  readonly name: string
  /** The registering object's creationTimestamp (RFC 3339): earlier wins. */
  readonly created: string
  readonly namespaces: Namespaces
  clusterID?: string
  /** Identified, or known to be unidentifiable: until then its workers wait. */
  settled: boolean
  working: boolean
}

export interface IdentityClaim {
  /** Records what the cluster said about itself (its kube-system UID). */
  readonly identify: (clusterID: string) => void
  /** The cluster will not say (its identity may not get kube-system): no rival can be found. */
  readonly unidentifiable: () => void
  /** The earlier registration of the same cluster this one duplicates, if any. */
  readonly rival: () => { readonly name: string; readonly clusterID: string } | undefined
  /**
   * Waits until this registration may work: identified (or unidentifiable), no earlier rival, and no
   * rival still working.
   */
  readonly awaitSole: Effect.Effect<void>
  /** Waits until an earlier rival appears (this registration must stop working). */
  readonly awaitRival: Effect.Effect<void>
  /** Marks whether this registration's workers run (a later one waits for them to stop). */
  readonly setWorking: (working: boolean) => void
  /** Completes at the next change in the registry (taken before looking, so no change is missed). */
  readonly nextChange: () => Effect.Effect<void>
  /** Leaves the registry (the member's engine stopped). */
  readonly leave: () => void
}

const earlier = (a: Claimant, b: Claimant) =>
  a.created !== b.created ? a.created < b.created : a.name < b.name

export class ClusterIdentities {
  private readonly claimants = new Map<string, Claimant>()
  private changed = Deferred.makeUnsafe<void>()

  /** Joins the registry for one engine's life; `created` orders rivals, `namespaces` is its scope. */
  join(name: string, created: string, namespaces: Namespaces): IdentityClaim {
    const self: Claimant = { name, created, namespaces, settled: false, working: false }
    this.claimants.set(name, self)
    const others = () =>
      [...this.claimants.values()].filter(
        (c) =>
          c !== self &&
          self.clusterID !== undefined &&
          c.clusterID === self.clusterID &&
          overlaps(c.namespaces, self.namespaces),
      )
    const rival = () => {
      const first = others()
        .filter((c) => earlier(c, self))
        .sort((a, b) => (earlier(a, b) ? -1 : 1))[0]
      return first && first.clusterID !== undefined
        ? { name: first.name, clusterID: first.clusterID }
        : undefined
    }
    const until = (done: () => boolean): Effect.Effect<void> =>
      Effect.suspend(() => {
        if (done()) return Effect.void
        return Deferred.await(this.changed).pipe(Effect.andThen(until(done)))
      })
    return {
      identify: (clusterID) => {
        self.clusterID = clusterID
        self.settled = true
        this.notify()
      },
      unidentifiable: () => {
        self.settled = true
        this.notify()
      },
      rival,
      awaitSole: until(() => self.settled && rival() === undefined && !others().some((c) => c.working)),
      awaitRival: until(() => rival() !== undefined),
      setWorking: (working) => {
        if (self.working === working) return
        self.working = working
        this.notify()
      },
      nextChange: () => {
        const next = this.changed
        return Deferred.await(next)
      },
      leave: () => {
        if (this.claimants.get(name) !== self) return
        this.claimants.delete(name)
        this.notify()
      },
    }
  }

  private notify() {
    const done = this.changed
    this.changed = Deferred.makeUnsafe<void>()
    Deferred.doneUnsafe(done, Effect.void)
  }
}
