import * as z from "zod"

// metav1.LabelSelector: its schema (the API server's rules as zod and CEL) and its meaning, the same
// as apimachinery's LabelSelectorAsSelector: every matchLabels pair and every expression must hold; an
// empty selector matches everything.

/** A label value: empty, or at most 63 alphanumerics, '-', '_', '.', starting and ending alphanumeric. */
export const labelValuePattern = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/
const labelNamePattern = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/
const dnsSubdomainPattern = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/

/** Why `key` is not a label key (an optional DNS-subdomain prefix and '/', then a name), or undefined. */
export const labelKeyError = (key: string): string | undefined => {
  const slash = key.indexOf("/")
  const prefix = slash < 0 ? undefined : key.slice(0, slash)
  const name = slash < 0 ? key : key.slice(slash + 1)
  if (prefix !== undefined && (prefix.length > 253 || !dnsSubdomainPattern.test(prefix)))
    return `label key "${key}": the prefix must be a DNS subdomain of at most 253 characters`
  if (name.length > 63 || !labelNamePattern.test(name))
    return `label key "${key}": the name must be at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric`
  return undefined
}

export const labelValueError = (value: string): string | undefined =>
  value.length <= 63 && labelValuePattern.test(value)
    ? undefined
    : `label value "${value}" must be at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric`

export const selectorOperators = ["In", "NotIn", "Exists", "DoesNotExist"] as const

const RequirementSchema = z
  .strictObject({
    key: z.string().min(1).max(317).describe("The label key the expression applies to."),
    operator: z.enum(selectorOperators).describe("In, NotIn, Exists or DoesNotExist."),
    values: z
      .array(z.string().max(63))
      .max(256)
      .optional()
      .describe("For In and NotIn, at least one value; for Exists and DoesNotExist, none."),
  })
  .meta({
    "x-kubernetes-validations": [
      {
        rule: "self.operator in ['In', 'NotIn'] ? has(self.values) && size(self.values) > 0 : !has(self.values) || size(self.values) == 0",
        message: "In and NotIn need at least one value; Exists and DoesNotExist take none",
      },
    ],
  })
  .describe("A label selector requirement: a key, an operator and values.")

export const LabelSelectorSchema = z
  .strictObject({
    matchLabels: z
      .record(z.string(), z.string().max(63))
      .optional()
      .describe("Labels that must all be present with these values."),
    matchExpressions: z
      .array(RequirementSchema)
      .max(64)
      .optional()
      .describe("Requirements that must all hold."),
  })
  .superRefine((selector, ctx) => {
    // What the CRD cannot state (map keys, the label grammar), checked by the hub.
    for (const [key, value] of Object.entries(selector.matchLabels ?? {})) {
      const error = labelKeyError(key) ?? labelValueError(value)
      if (error) ctx.addIssue({ code: "custom", path: ["matchLabels", key], message: error })
    }
    for (const [i, r] of (selector.matchExpressions ?? []).entries()) {
      const error = labelKeyError(r.key) ?? (r.values ?? []).map(labelValueError).find((e) => e !== undefined)
      if (error) ctx.addIssue({ code: "custom", path: ["matchExpressions", i], message: error })
      const wantsValues = r.operator === "In" || r.operator === "NotIn"
      if (wantsValues !== (r.values !== undefined && r.values.length > 0))
        ctx.addIssue({
          code: "custom",
          path: ["matchExpressions", i, "values"],
          message: `${r.operator} ${wantsValues ? "needs at least one value" : "takes no values"}`,
        })
    }
  })
  .describe(
    "metav1.LabelSelector: matchLabels and matchExpressions must all hold; an empty selector matches every cluster.",
  )

export type LabelSelector = z.output<typeof LabelSelectorSchema>

/** Whether `labels` satisfy a (valid) selector. */
export const selectorMatches = (
  selector: LabelSelector,
  labels: Readonly<Record<string, string>>,
): boolean => {
  for (const [key, value] of Object.entries(selector.matchLabels ?? {})) {
    if (labels[key] !== value) return false
  }
  for (const r of selector.matchExpressions ?? []) {
    const has = Object.hasOwn(labels, r.key)
    const value = labels[r.key]
    const inValues = has && value !== undefined && (r.values ?? []).includes(value)
    const ok =
      r.operator === "In"
        ? inValues
        : r.operator === "NotIn"
          ? !inValues
          : r.operator === "Exists"
            ? has
            : !has
    if (!ok) return false
  }
  return true
}

/** The selector in kubectl's text form, for messages: `env=prod,region in (eu,us)`. */
export const describeSelector = (selector: LabelSelector): string => {
  const parts = [
    ...Object.entries(selector.matchLabels ?? {}).map(([k, v]) => `${k}=${v}`),
    ...(selector.matchExpressions ?? []).map((r) =>
      r.operator === "Exists"
        ? r.key
        : r.operator === "DoesNotExist"
          ? `!${r.key}`
          : `${r.key} ${r.operator === "In" ? "in" : "notin"} (${(r.values ?? []).join(",")})`,
    ),
  ]
  return parts.length === 0 ? "<everything>" : parts.join(",")
}
