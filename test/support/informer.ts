// A kube client and informer under test, shared by the real-apiserver tests (test/integration) and the
// scripted-server ones (test/unit): each lives in its own Scope with its logs captured, and a recorder
// writes down every handler call.
import { KubeConfig } from "@kubernetes/client-node"
import { Effect, Exit, Logger, References, Scope } from "effect"
import { type Informer, type InformerOptions, makeInformer } from "../../src/engine/informer/informer.ts"
import { type KubeClientOptions, makeKubeClient } from "../../src/kube/client.ts"

export interface ConfigMap {
  apiVersion?: string
  kind?: string
  metadata: {
    name: string
    namespace?: string
    resourceVersion?: string
    labels?: Record<string, string>
    managedFields?: unknown
    annotations?: Record<string, string>
  }
  data?: Record<string, string>
}

export interface LogLine {
  readonly level: string
  readonly message: string
  readonly annotations: Record<string, unknown>
}

export const cmResource = { group: "", version: "v1", plural: "configmaps" }

export const kubeConfigOf = (yaml: string) => {
  const kc = new KubeConfig()
  kc.loadFromString(yaml)
  return kc
}

/** Every 10 minutes, unless a test sets resyncMs: no test here runs that long, so never. */
const resyncMs = 10 * 60_000

/** A client and informer living in their own Scope, with their logs captured. */
export const startInformer = async <T = ConfigMap>(
  kubeconfig: string,
  options: Omit<InformerOptions<T>, "client" | "resource" | "resyncMs"> & {
    resource?: InformerOptions<T>["resource"]
    resyncMs?: number
  },
  clientOptions: Omit<KubeClientOptions, "cluster" | "kubeConfig"> = {},
) => {
  const logs: Array<LogLine> = []
  const capture = Logger.make((o) => {
    logs.push({
      level: o.logLevel,
      message: Array.isArray(o.message) ? o.message.map(String).join(" ") : String(o.message),
      annotations: { ...o.fiber.getRef(References.CurrentLogAnnotations) },
    })
  })
  const scope = Effect.runSync(Scope.make())
  const { client, informer } = await Effect.runPromise(
    Effect.gen(function* () {
      const client = yield* makeKubeClient({
        cluster: "inf",
        kubeConfig: kubeConfigOf(kubeconfig),
        ...clientOptions,
      })
      const informer = yield* makeInformer<T>({ client, resource: cmResource, resyncMs, ...options })
      return { client, informer }
    }).pipe(Scope.provide(scope), Effect.provide(Logger.layer([capture]))),
  )
  return {
    client,
    informer,
    logs,
    run: <A, E>(e: Effect.Effect<A, E>) => Effect.runPromise(e),
    close: () => Effect.runPromise(Scope.close(scope, Exit.void)),
  }
}

/** Records every handler call as "add:name@rv", "update:name@oldRv->newRv", "delete:name". */
export const recorder = (informer: Informer<ConfigMap>) => {
  const calls: Array<string> = []
  informer.addHandler({
    onAdd: (o) => calls.push(`add:${o.metadata.name}@${o.metadata.resourceVersion}`),
    onUpdate: (a, b) =>
      calls.push(`update:${b.metadata.name}@${a.metadata.resourceVersion}->${b.metadata.resourceVersion}`),
    onDelete: (o) => calls.push(`delete:${o.metadata.name}`),
  })
  return calls
}
