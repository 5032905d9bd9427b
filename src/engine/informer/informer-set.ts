// One logical informer over several namespaces: a member scoped by the fleetcheck.io/namespaces
// annotation gets one LIST/WATCH per namespace (its RBAC allows nothing cluster-wide), presented to the
// engine as a single cache. Without namespaces it is just the cluster-wide informer.
import { Effect, type Scope } from "effect"
import { type Informer, type InformerHandler, type InformerOptions, makeInformer } from "./informer.ts"
import type { StoreView } from "./store.ts"

export interface InformerSet<T> {
  readonly store: StoreView<T>
  hasSynced(): boolean
  readonly awaitSynced: Effect.Effect<void>
  addHandler(handler: InformerHandler<T>): () => void
  /** Watches restarted, summed over the namespaces. */
  readonly watchRestarts: number
  /** The earliest failingSince of any namespace's informer (see Informer.failingSince). */
  readonly failingSince: number | undefined
  /** The last error of a failing informer, with its HTTP status when the server answered. */
  readonly lastFailure: { readonly message: string; readonly status: number | undefined } | undefined
  /** Ends every informer's backoff wait now (see Informer.resumeNow). */
  resumeNow(): void
}

// Read on every member's status round: plain loops, nothing allocated.
const failingSinceOf = (all: ReadonlyArray<Informer<unknown>>) => {
  let min: number | undefined
  for (const i of all) {
    const since = i.failingSince
    if (since !== undefined && (min === undefined || since < min)) min = since
  }
  return min
}

const lastFailureOf = (all: ReadonlyArray<Informer<unknown>>) => {
  const failing = all.find((i) => i.failingSince !== undefined && i.lastError !== undefined)
  return failing ? { message: failing.lastError ?? "", status: failing.lastErrorStatus } : undefined
}

const namespaceOfKey = (key: string) => {
  const i = key.indexOf("/")
  return i < 0 ? "" : key.slice(0, i)
}

const mergedStore = <T>(byNamespace: ReadonlyMap<string, Informer<T>>): StoreView<T> => {
  const all = [...byNamespace.values()]
  return {
    get: (key) => byNamespace.get(namespaceOfKey(key))?.store.get(key),
    has: (key) => byNamespace.get(namespaceOfKey(key))?.store.has(key) ?? false,
    list: () => all.flatMap((i) => i.store.list()),
    keys: () => all.flatMap((i) => i.store.keys()),
    byIndex: (name, value) => all.flatMap((i) => i.store.byIndex(name, value)),
    get size() {
      let n = 0
      for (const i of all) n += i.store.size
      return n
    },
  }
}

export const makeInformerSet = Effect.fnUntraced(function* <T>(
  options: Omit<InformerOptions<T>, "namespace"> & {
    readonly namespaces?: ReadonlyArray<string> | undefined
  },
) {
  const { namespaces, ...rest } = options
  if (!namespaces || namespaces.length === 0) {
    const informer = yield* makeInformer<T>(rest)
    const set: InformerSet<T> = {
      store: informer.store,
      hasSynced: informer.hasSynced,
      awaitSynced: informer.awaitSynced,
      addHandler: informer.addHandler,
      get watchRestarts() {
        return informer.watchRestarts
      },
      get failingSince() {
        return informer.failingSince
      },
      get lastFailure() {
        return lastFailureOf([informer as Informer<unknown>])
      },
      resumeNow: informer.resumeNow,
    }
    return set
  }
  const byNamespace = new Map<string, Informer<T>>()
  for (const namespace of namespaces) {
    byNamespace.set(
      namespace,
      yield* makeInformer<T>({ ...rest, namespace, name: `${rest.name ?? "informer"}@${namespace}` }),
    )
  }
  const all = [...byNamespace.values()]
  const set: InformerSet<T> = {
    store: mergedStore(byNamespace),
    hasSynced: () => all.every((i) => i.hasSynced()),
    awaitSynced: Effect.all(
      all.map((i) => i.awaitSynced),
      { discard: true },
    ),
    addHandler: (handler) => {
      const removers = all.map((i) => i.addHandler(handler))
      return () => {
        for (const remove of removers) remove()
      }
    },
    get watchRestarts() {
      return all.reduce((n, i) => n + i.watchRestarts, 0)
    },
    get failingSince() {
      return failingSinceOf(all as ReadonlyArray<Informer<unknown>>)
    },
    get lastFailure() {
      return lastFailureOf(all as ReadonlyArray<Informer<unknown>>)
    },
    resumeNow: () => {
      for (const i of all) i.resumeNow()
    },
  }
  return set
}) as <T>(
  options: Omit<InformerOptions<T>, "namespace"> & {
    readonly namespaces?: ReadonlyArray<string> | undefined
  },
) => Effect.Effect<InformerSet<T>, never, Scope.Scope>
