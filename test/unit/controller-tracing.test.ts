// Every reconcile is a root span named after the controller, carrying cluster, namespace, name,
// reconcile id and outcome; API calls made inside it are its children.
import { InMemorySpanExporter, SimpleSpanProcessor } from "@opentelemetry/sdk-trace-base"
import { Effect, Layer } from "effect"
import { describe, expect, it } from "vitest"
import { runController, TerminalError } from "../../src/engine/controller.ts"
import { makeWorkQueue } from "../../src/engine/workqueue/workqueue.ts"
import { TracingLive } from "../../src/observability/tracing.ts"

describe("reconcile spans", () => {
  it("records a root span per reconcile with the SPEC attributes and the outcome", async () => {
    const exporter = new InMemorySpanExporter()
    const spans = await Effect.runPromise(
      Effect.gen(function* () {
        const queue = yield* makeWorkQueue()
        yield* runController({
          name: "backupcheck",
          cluster: "eu-1",
          queue,
          workers: 1,
          reconcile: (req) =>
            req.name === "bad"
              ? Effect.fail(new TerminalError({ message: "invalid spec" }))
              : Effect.succeed({ requeueAfterMs: 60_000 }).pipe(Effect.withSpan("kube.request")),
        })
        yield* queue.add("shop/orders")
        yield* queue.add("shop/bad")
        while (exporter.getFinishedSpans().filter((s) => s.name === "reconcile backupcheck").length < 2) {
          yield* Effect.sleep(10)
        }
        // Read before the tracing layer closes: shutting down empties the exporter.
        return [...exporter.getFinishedSpans()]
      }).pipe(
        Effect.scoped,
        Effect.provide(Layer.orDie(TracingLive({ spanProcessor: new SimpleSpanProcessor(exporter) }))),
      ),
    )
    const roots = spans.filter((s) => s.name === "reconcile backupcheck")
    const orders = roots.find((s) => s.attributes["fleetcheck.check.name"] === "orders")!
    expect(orders.attributes).toMatchObject({
      "k8s.cluster.name": "eu-1",
      "k8s.namespace.name": "shop",
      "fleetcheck.check.name": "orders",
      "fleetcheck.reconcile.outcome": "requeue_after",
    })
    expect(String(orders.attributes["fleetcheck.reconcile.id"])).toMatch(/\S+/)
    expect(orders.parentSpanContext).toBeUndefined()
    const child = spans.find((s) => s.name === "kube.request")!
    expect(child.spanContext().traceId).toBe(orders.spanContext().traceId)
    expect(child.parentSpanContext?.spanId).toBe(orders.spanContext().spanId)
    const bad = roots.find((s) => s.attributes["fleetcheck.check.name"] === "bad")!
    expect(bad.attributes["fleetcheck.reconcile.outcome"]).toBe("terminal_error")
    expect(bad.spanContext().traceId).not.toBe(orders.spanContext().traceId)
  })
})
