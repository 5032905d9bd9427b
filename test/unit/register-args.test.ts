// The arguments of `fleetcheck register` / `unregister`: everything is checked before any cluster is
// contacted, every mistake is a UsageError (exit 2), and durations use the API's one Go grammar.
import { assert, describe, it } from "@effect/vitest"
import { Effect } from "effect"
import {
  type Command,
  defaultTokenSeconds,
  parseLabels,
  parseRegisterArgs,
  parseUnregisterArgs,
  type RegisterArgs,
  type UnregisterArgs,
  UsageError,
} from "../../src/cli/register/args.ts"

const run = <A>(command: Command<A>): A => {
  if (command.kind !== "run") throw new Error("expected a run, got help")
  return command.args
}

const register = (...argv: string[]) => parseRegisterArgs(argv).pipe(Effect.map(run<RegisterArgs>))
const unregister = (...argv: string[]) => parseUnregisterArgs(argv).pipe(Effect.map(run<UnregisterArgs>))

/** The UsageError an effect fails with. */
const usageError = <A, E>(effect: Effect.Effect<A, E>) =>
  Effect.flip(effect).pipe(
    Effect.map((e) => {
      assert.instanceOf(e, UsageError)
      return (e as UsageError).message
    }),
  )

describe("register arguments", () => {
  it.effect("reads every flag", () =>
    Effect.gen(function* () {
      const a = yield* register(
        "prod-eu.1",
        "--context",
        "kind-prod",
        "--label",
        "env=prod",
        "--label",
        "example.com/team=db",
        "--namespaces",
        "apps, other",
        "--kubeconfig",
        "/tmp/kc",
        "--hub-context",
        "hub",
        "--hub-namespace",
        "fc",
        "--token-expiration",
        "720h",
        "--member-server",
        "https://10.0.0.1:6443",
        "--force",
        "--clusterprofile",
      )
      assert.deepStrictEqual(a, {
        name: "prod-eu.1",
        memberContext: "kind-prod",
        labels: { env: "prod", "example.com/team": "db" },
        namespaces: ["apps", "other"],
        tokenSeconds: 720 * 3600,
        memberServer: "https://10.0.0.1:6443",
        force: true,
        clusterprofile: true,
        kubeconfig: "/tmp/kc",
        hubContext: "hub",
        hubNamespace: "fc",
      })
    }),
  )

  it.effect("defaults: all namespaces, a year's token, fleetcheck-system, current hub context", () =>
    Effect.gen(function* () {
      const a = yield* register("member", "--context", "member")
      assert.strictEqual(a.namespaces, undefined)
      assert.strictEqual(a.tokenSeconds, defaultTokenSeconds)
      assert.strictEqual(a.tokenSeconds, 8760 * 3600)
      assert.strictEqual(a.hubNamespace, "fleetcheck-system")
      assert.strictEqual(a.hubContext, undefined)
      assert.strictEqual(a.kubeconfig, undefined)
      assert.strictEqual(a.force, false)
      assert.strictEqual(a.clusterprofile, false)
      assert.deepStrictEqual(a.labels, {})
    }),
  )

  it.effect("--help and -h ask for the usage, whatever else is there", () =>
    Effect.gen(function* () {
      assert.deepStrictEqual(yield* parseRegisterArgs(["--help"]), { kind: "help" })
      assert.deepStrictEqual(yield* parseRegisterArgs(["x", "--bogus", "-h"]), { kind: "help" })
      assert.deepStrictEqual(yield* parseUnregisterArgs(["-h"]), { kind: "help" })
    }),
  )

  it.effect("NAME: required, alone, a DNS-1123 subdomain", () =>
    Effect.gen(function* () {
      assert.include(yield* usageError(register("--context", "c")), "needs the member's NAME")
      assert.include(yield* usageError(register("a", "b", "--context", "c")), "unexpected arguments: b")
      for (const bad of ["Bad_Name", "UPPER", "trail-", "a..b", "x".repeat(254)]) {
        assert.include(yield* usageError(register(bad, "--context", "c")), "DNS-1123 subdomain", bad)
      }
      assert.strictEqual((yield* register("x".repeat(253), "--context", "c")).name.length, 253)
    }),
  )

  it.effect("--context is required", () =>
    Effect.gen(function* () {
      assert.include(yield* usageError(register("member")), "register needs --context")
    }),
  )

  it.effect("unknown flags and missing values are usage errors", () =>
    Effect.gen(function* () {
      assert.include(yield* usageError(register("m", "--context", "c", "--bogus")), "--bogus")
      assert.include(yield* usageError(register("m", "--context")), "--context")
      assert.include(yield* usageError(register("m", "--context", "c", "--force=yes")), "--force")
    }),
  )

  it.effect("--namespaces: DNS-1123 labels, never empty", () =>
    Effect.gen(function* () {
      assert.deepStrictEqual((yield* register("m", "--context", "c", "--namespaces", "a,b,a")).namespaces, [
        "a",
        "b",
      ])
      assert.include(
        yield* usageError(register("m", "--context", "c", "--namespaces", "")),
        "--namespaces is empty",
      )
      assert.include(
        yield* usageError(register("m", "--context", "c", "--namespaces", "a,,b")),
        "empty entry",
      )
      assert.include(yield* usageError(register("m", "--context", "c", "--namespaces", "Apps")), "DNS-1123")
    }),
  )

  it.effect("--token-expiration: a Go duration of at least 10m; days are spelled in hours", () =>
    Effect.gen(function* () {
      const seconds = (d: string) =>
        register("m", "--context", "c", `--token-expiration=${d}`).pipe(Effect.map((a) => a.tokenSeconds))
      assert.strictEqual(yield* seconds("10m"), 600)
      assert.strictEqual(yield* seconds("1h30m"), 5400)
      assert.strictEqual(yield* seconds("8760h"), 31_536_000)
      assert.strictEqual(yield* seconds("600500ms"), 600) // whole seconds
      assert.include(yield* usageError(seconds("9m59s")), "--token-expiration must be at least 10m")
      for (const bad of ["365d", "3600", "1.5h", "-1h", "1 h", ""]) {
        const message = yield* usageError(seconds(bad))
        assert.include(message, `--token-expiration ${JSON.stringify(bad)}`, bad)
        assert.include(message, "a day is 24h", bad)
      }
    }),
  )
})

describe("--label", () => {
  it.effect("k=v pairs, prefixed keys, empty values; the last of a repeated key wins", () =>
    Effect.gen(function* () {
      assert.deepStrictEqual(
        yield* parseLabels(["env=prod", "example.com/team=db", "empty=", "env=test", "a.b_c-d=E.f_g-1"]),
        { env: "test", "example.com/team": "db", empty: "", "a.b_c-d": "E.f_g-1" },
      )
    }),
  )

  it.effect("refuses what Kubernetes would refuse, and the registration label", () =>
    Effect.gen(function* () {
      assert.include(yield* usageError(parseLabels(["novalue"])), "expected key=value")
      assert.include(yield* usageError(parseLabels(["=v"])), "expected key=value")
      assert.include(yield* usageError(parseLabels(["-x=v"])), "not a valid label key")
      assert.include(yield* usageError(parseLabels([`${"k".repeat(64)}=v`])), "not a valid label key")
      assert.include(yield* usageError(parseLabels(["Bad_Prefix/k=v"])), "not a valid label key")
      assert.include(yield* usageError(parseLabels(["/k=v"])), "not a valid label key")
      assert.include(yield* usageError(parseLabels(["k=has space"])), "not a valid label value")
      assert.include(yield* usageError(parseLabels([`k=${"v".repeat(64)}`])), "not a valid label value")
      assert.include(yield* usageError(parseLabels(["k=-v"])), "not a valid label value")
      assert.include(
        yield* usageError(parseLabels(["fleetcheck.io/kubeconfig=true"])),
        "may not set fleetcheck.io/kubeconfig",
      )
      // Through the command line too.
      assert.include(yield* usageError(register("m", "--context", "c", "--label", "x")), '--label "x"')
    }),
  )
})

describe("unregister arguments", () => {
  it.effect("reads every flag", () =>
    Effect.gen(function* () {
      const a = yield* unregister(
        "member",
        "--context",
        "kind-member",
        "--timeout",
        "2m30s",
        "--delete-crd",
        "--force",
        "--kubeconfig",
        "/tmp/kc",
        "--hub-context",
        "hub",
        "--hub-namespace",
        "fc",
      )
      assert.deepStrictEqual(a, {
        name: "member",
        memberContext: "kind-member",
        timeoutMs: 150_000,
        timeoutText: "2m30s",
        deleteCrd: true,
        force: true,
        kubeconfig: "/tmp/kc",
        hubContext: "hub",
        hubNamespace: "fc",
      })
    }),
  )

  it.effect("defaults: the recorded context, 60s, CRD kept", () =>
    Effect.gen(function* () {
      const a = yield* unregister("member")
      assert.strictEqual(a.memberContext, undefined)
      assert.strictEqual(a.timeoutMs, 60_000)
      assert.strictEqual(a.timeoutText, "60s")
      assert.strictEqual(a.deleteCrd, false)
      assert.strictEqual(a.force, false)
      assert.strictEqual(a.hubNamespace, "fleetcheck-system")
    }),
  )

  it.effect("refuses a missing or bad NAME, a bad --timeout and unknown flags", () =>
    Effect.gen(function* () {
      assert.include(yield* usageError(unregister()), "unregister needs the member's NAME")
      assert.include(yield* usageError(unregister("Bad_Name")), "DNS-1123 subdomain")
      assert.include(yield* usageError(unregister("m", "--timeout", "1d")), '--timeout "1d"')
      assert.include(yield* usageError(unregister("m", "--timeout", "60")), "Go duration")
      assert.include(yield* usageError(unregister("m", "--label", "a=b")), "--label")
      assert.strictEqual((yield* unregister("m", "--timeout", "0")).timeoutMs, 0)
    }),
  )
})
