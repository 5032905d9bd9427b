// The Helm chart's values from the hub's one configuration schema (src/hub/config.ts): every hub
// setting is a value under `hub:` named as its flag in camelCase (`--leader-elect-lease-duration` is
// `hub.leaderElectLeaseDuration`), with the setting's default and description, and a JSON schema type
// (booleans and whole numbers as YAML writes them, the rest as the strings the flag takes). The hub
// still validates every value at start (ranges, durations, selectors); the schema catches unknown keys
// and wrong types at `helm install`, naming the key.
import * as z from "zod"
import { envNameOf, hubSettings } from "../config.ts"

/** Settings the chart decides itself, so they are no values: why, for the ADR and the test. */
export const chartDecided: Readonly<Record<string, string>> = {
  kubeconfig: "the hub runs in-cluster, with its ServiceAccount's token",
  namespace: "the release namespace (the Deployment sets it from the Pod's own namespace)",
  tlsCertFile: "set by the chart with tls.certManager.enabled (the Certificate's mounted Secret)",
  tlsPrivateKeyFile: "set by the chart with tls.certManager.enabled (the Certificate's mounted Secret)",
}

export type ValueType = "boolean" | "integer" | "string"

export interface HubValue {
  /** The hubSettings key. */
  readonly key: string
  /** The value's name under `hub:`. */
  readonly name: string
  readonly env: string
  readonly type: ValueType
  /** The chart's default, in the value's type; "" for a setting without a default (unset). */
  readonly default: boolean | number | string
  /** The hub's own default as the flag takes it (undefined: none): the env is set only when different. */
  readonly hubDefault: string | undefined
  /** deploy/hub's Deployment sets it: the chart always writes its env too. */
  readonly alwaysSet: boolean
  readonly description: string
  /** JSON schema of the value (type, enum, bounds). */
  readonly schema: Record<string, unknown>
}

export const camelOfFlag = (flag: string) => flag.replace(/-([a-z0-9])/g, (_, c: string) => c.toUpperCase())

const stripDialect = ({ $schema: _, ...rest }: Record<string, unknown>) => rest

const typed = (type: ValueType, raw: string): boolean | number | string =>
  type === "boolean" ? raw === "true" : type === "integer" ? Number(raw) : raw

/**
 * `deploymentEnv`: the literal FLEETCHECK_* env of deploy/hub's Deployment. Where it sets a setting,
 * that is the chart's default too (the chart installs what deploy/hub installs), and the help says so.
 */
export const hubValues = (deploymentEnv: Readonly<Record<string, string>>): HubValue[] =>
  Object.entries(hubSettings)
    .filter(([key]) => !Object.hasOwn(chartDecided, key))
    .map(([key, s]) => {
      const input = stripDialect(z.toJSONSchema(s.schema, { io: "input", unrepresentable: "any" }))
      const output = stripDialect(z.toJSONSchema(s.schema, { io: "output", unrepresentable: "any" }))
      const isBool =
        Array.isArray(input.enum) &&
        input.enum.length === 2 &&
        input.enum.every((v) => v === "true" || v === "false")
      const type: ValueType = isBool ? "boolean" : output.type === "integer" ? "integer" : "string"
      let schema: Record<string, unknown> =
        type === "boolean" ? { type: "boolean" } : type === "integer" ? output : input
      // A setting without a default is unset when empty, so "" must pass.
      if (s.default === undefined) {
        const { minLength: _, ...rest } = schema
        schema = rest
      }
      const env = envNameOf(s.flag)
      const deployed = deploymentEnv[env]
      const chartDefault = deployed ?? s.default
      const description =
        deployed !== undefined && deployed !== s.default
          ? `${s.describe} (the hub's own default: ${s.default ?? "unset"}; the chart sets ${deployed}, as deploy/hub does)`
          : s.default === undefined
            ? `${s.describe} (empty: unset)`
            : s.describe
      return {
        key,
        name: camelOfFlag(s.flag),
        env,
        type,
        default: chartDefault === undefined ? "" : typed(type, chartDefault),
        hubDefault: s.default,
        alwaysSet: deployed !== undefined,
        description,
        schema,
      }
    })
