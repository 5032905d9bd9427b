// The scale bench's "etcd" event source (test/bench/event-driver.ts) against a real kube-apiserver:
// its writes into the API server's storage come out of the API server's watch as ordinary MODIFIED
// events with new resourceVersions, the API server counts them (what the bench reports as delivered),
// and a change written through the API meanwhile is kept, not overwritten from the driver's copy.
import * as https from "node:https"
import { afterAll, beforeAll, describe, expect, it } from "vitest"
import {
  apiRequest,
  installFleetcheck,
  type LocalCluster,
  type LocalFleet,
  startFleet,
} from "../../clusters/local-fleet/index.ts"
import { driveEvents, etcdSender, serverSample } from "../bench/event-driver.ts"

const group = "/apis/fleetcheck.io/v1alpha1"
const namespace = "default"
const names = ["check-0", "check-1", "check-2"]
const pathOf = (name: string) => `${group}/namespaces/${namespace}/backupchecks/${name}`

/** Collects the BackupCheck watch's events from `resourceVersion` on, until stop(). */
const watchChecks = (c: LocalCluster, resourceVersion: string) => {
  const events: Array<{ type: string; object: any }> = []
  let buffer = ""
  const req = https.get(
    new URL(
      `${group}/namespaces/${namespace}/backupchecks?watch=1&resourceVersion=${resourceVersion}`,
      c.server,
    ),
    { ca: c.caPem, headers: { authorization: `Bearer ${c.adminToken}` } },
    (res) => {
      res.setEncoding("utf8")
      res.on("data", (chunk: string) => {
        buffer += chunk
        let nl = buffer.indexOf("\n")
        while (nl !== -1) {
          events.push(JSON.parse(buffer.slice(0, nl)))
          buffer = buffer.slice(nl + 1)
          nl = buffer.indexOf("\n")
        }
      })
    },
  )
  req.on("error", () => {})
  return { events, stop: () => req.destroy() }
}

describe("the scale bench's etcd event source", () => {
  let fleet: LocalFleet
  let c: LocalCluster

  const must = async (method: string, path: string, body?: unknown) => {
    const r = await c.api(method, path, body)
    if (r.status < 200 || r.status >= 300)
      throw new Error(`${method} ${path}: ${r.status} ${JSON.stringify(r.body)}`)
    return r.body
  }
  const metrics = async () => {
    const r = await c.api("GET", "/metrics")
    return serverSample(typeof r.body === "string" ? r.body : String(r.body))
  }

  beforeAll(async () => {
    fleet = await startFleet({ clusters: [{ name: "events", workloads: false, controllerManager: false }] })
    c = fleet.cluster("events")
    await installFleetcheck(c, [c])
    for (const name of names)
      await must("POST", `${group}/namespaces/${namespace}/backupchecks`, {
        apiVersion: "fleetcheck.io/v1alpha1",
        kind: "BackupCheck",
        metadata: { name, namespace },
        spec: {
          backup: { name: `${name}-backup`, source: `s3://backups/${name}` },
          jobTemplate: {
            spec: { template: { spec: { containers: [{ name: "restore", image: "restore:1.4" }] } } },
          },
        },
      })
  })

  afterAll(async () => {
    await fleet?.stop()
  })

  it("writes reach the API server's watchers as MODIFIED events, counted by the API server", async () => {
    const listed = await must("GET", `${group}/namespaces/${namespace}/backupchecks`)
    const watch = watchChecks(c, listed.metadata.resourceVersion)
    const before = await metrics()
    const drive = await driveEvents({
      transport: "etcd",
      etcdUrl: fleet.etcdUrl,
      rate: 30,
      seconds: 1,
      maxInflight: 8,
      socketsPerServer: 1,
      sessionsPerServer: 1,
      target: (i) => ({
        server: c,
        path: pathOf(names[i % names.length]!),
        body: JSON.stringify({ metadata: { annotations: { "bench/tick": String(i) } } }),
        key: `${namespace}/${names[i % names.length]}`,
      }),
    })
    expect(drive.sent).toBeGreaterThan(20)
    expect(drive.dropped).toBe(0)
    expect([...drive.codes]).toEqual([["200", drive.sent]])
    await expect
      .poll(() => watch.events.filter((e) => e.type === "MODIFIED").length, { timeout: 10_000 })
      .toBe(drive.sent)
    watch.stop()
    const after = await metrics()
    expect(after.cacheEvents - before.cacheEvents).toBe(drive.sent)
    // Each event is the object as the API server serves it: a new resourceVersion each time, the
    // annotation of the write, the rest (spec, uid) unchanged.
    const rvs = watch.events.map((e) => e.object.metadata.resourceVersion)
    expect(new Set(rvs).size).toBe(rvs.length)
    const last = watch.events.at(-1)!.object
    expect(last.metadata.annotations["bench/tick"]).toBe(String(drive.sent - 1))
    const served = await must("GET", pathOf(last.metadata.name))
    expect(served.metadata.resourceVersion).toBe(last.metadata.resourceVersion)
    expect(served.spec.backup.name).toBe(`${last.metadata.name}-backup`)
  })

  it("keeps a change written through the API after the driver read the object", async () => {
    const sender = etcdSender(fleet.etcdUrl)
    const tick = (n: number) => JSON.stringify({ metadata: { annotations: { "bench/tick": `c${n}` } } })
    try {
      // The first write reads check-0 and keeps it; a label written through the API changes the key
      // under the kept copy; the second write's transaction fails, reads again, and keeps the label.
      expect(await sender.send(c, pathOf("check-0"), tick(1))).toBe(200)
      const patched = await apiRequest(
        c.server,
        c.caPem,
        c.adminToken,
        "PATCH",
        pathOf("check-0"),
        { metadata: { labels: { team: "kept" } } },
        "application/merge-patch+json",
      )
      expect(patched.status).toBe(200)
      expect(await sender.send(c, pathOf("check-0"), tick(2))).toBe(200)
      const served = await must("GET", pathOf("check-0"))
      expect(served.metadata.labels?.team).toBe("kept")
      expect(served.metadata.annotations["bench/tick"]).toBe("c2")
    } finally {
      sender.close()
    }
  })
})
