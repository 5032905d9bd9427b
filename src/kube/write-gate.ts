// A fence for leader-only clients: every mutating request asks `mayWrite` before it starts and again in
// the step that hands its bytes to the socket, and is refused with a KubeTransportError (code NotLeader)
// without sending anything when the answer is no. Reads pass.
// The hub wraps every client its leader work uses (members and the hub's own API) with the elector's
// mayWrite, so a hub that has gone renewDeadline without renewing its lease sends no more writes, even
// from a reconcile that was already running when the lease went.
import { Effect } from "effect"
import { type KubeClient, KubeTransportError } from "./client.ts"

export const gateWrites = (client: KubeClient, mayWrite: Effect.Effect<boolean>): KubeClient => ({
  ...client,
  request: (req) =>
    req.method === "GET"
      ? client.request(req)
      : Effect.flatMap(Effect.context<never>(), (context) => {
          // Asked before the request starts and again as its bytes go to the socket (KubeRequest.fence).
          const allowed = () => Effect.runSyncWith(context)(mayWrite)
          return allowed()
            ? client.request({ ...req, fence: allowed })
            : Effect.fail(
                new KubeTransportError({
                  cluster: client.cluster,
                  method: req.method,
                  path: req.path,
                  code: "NotLeader",
                  message: "refused before sending: this hub no longer holds the lease",
                }),
              )
        }),
})
