import * as z from "zod"

// metav1.Condition, field for field, with the API server's own limits and patterns, so a condition the
// hub builds is valid wherever Kubernetes checks it.

export const conditionStatuses = ["True", "False", "Unknown"] as const
export type ConditionStatus = (typeof conditionStatuses)[number]

// The patterns are RE2-compatible: the API server evaluates them with Go's regexp.
export const conditionTypePattern =
  /^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*\/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])$/
export const conditionReasonPattern = /^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$/

/** An RFC 3339 timestamp as metav1.Time writes it; offsets are accepted on input. */
export const TimestampSchema = z.iso.datetime({ offset: true })

export const ConditionSchema = z
  .object({
    type: z
      .string()
      .max(316)
      .regex(conditionTypePattern)
      .describe("Type of condition in CamelCase or in foo.example.com/CamelCase."),
    status: z.enum(conditionStatuses).describe("Status of the condition, one of True, False, Unknown."),
    observedGeneration: z
      .int()
      .min(0)
      .optional()
      .meta({ format: "int64" })
      .describe("The .metadata.generation that the condition was set based upon."),
    lastTransitionTime: TimestampSchema.describe(
      "Last time the condition transitioned from one status to another.",
    ),
    reason: z
      .string()
      .min(1)
      .max(1024)
      .regex(conditionReasonPattern)
      .describe("A programmatic identifier indicating the reason for the condition's last transition."),
    message: z
      .string()
      .max(32768)
      .describe("A human readable message indicating details about the transition."),
  })
  .describe("Condition contains details for one aspect of the current state of this API Resource.")

export type Condition = z.output<typeof ConditionSchema>

/** A list of conditions as a map keyed by type, as Kubernetes declares every `conditions` field. */
export const ConditionsSchema = z
  .array(ConditionSchema)
  .meta({ "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"] })
  .describe("The latest available observations of the object's state.")

/** A condition to set; lastTransitionTime is filled in by setStatusCondition when omitted. */
export interface NewCondition {
  readonly type: string
  readonly status: ConditionStatus
  readonly reason: string
  readonly message: string
  readonly observedGeneration?: number | undefined
  readonly lastTransitionTime?: string | undefined
}

/** A time as Date, epoch milliseconds, or an RFC 3339 string. */
export type TimeInput = Date | number | string

/** metav1.Time precision: whole seconds, always UTC, as the API server itself writes timestamps. */
// The seconds formatted lately: every reconcile stamps the current time, and every member's status round
// formats the current time and its last probe's (one of the last probe interval's seconds), so one
// remembered second was formatted again on most calls. At most maxFormattedSeconds are kept.
const formattedSeconds = new Map<number, string>()
const maxFormattedSeconds = 256
export const toKubeTime = (time: TimeInput): string => {
  const ms = time instanceof Date ? time.getTime() : typeof time === "number" ? time : Date.parse(time)
  const second = Math.floor(ms / 1000)
  let text = formattedSeconds.get(second)
  if (text !== undefined) return text
  text = new Date(second * 1000).toISOString().replace(/\.\d{3}Z$/, "Z")
  if (formattedSeconds.size >= maxFormattedSeconds) formattedSeconds.clear()
  formattedSeconds.set(second, text)
  return text
}

export const findCondition = (
  conditions: ReadonlyArray<Condition> | undefined,
  type: string,
): Condition | undefined => conditions?.find((c) => c.type === type)

export const isConditionTrue = (conditions: ReadonlyArray<Condition> | undefined, type: string): boolean =>
  findCondition(conditions, type)?.status === "True"

/**
 * apimachinery's meta.SetStatusCondition, without mutation: lastTransitionTime changes only when the
 * status changes (or the condition is new); reason, message and observedGeneration always follow.
 * Returns a new array, in the original order with new types appended, and whether anything changed.
 * The transition time is newCondition.lastTransitionTime if given, else `now` (to whole seconds).
 */
export const setStatusCondition = (
  conditions: ReadonlyArray<Condition> | undefined,
  newCondition: NewCondition,
  now: TimeInput,
): { readonly conditions: Condition[]; readonly changed: boolean } => {
  const list = conditions ?? []
  const index = list.findIndex((c) => c.type === newCondition.type)
  const transitionTime = newCondition.lastTransitionTime ?? toKubeTime(now)
  if (index < 0) {
    const added: Condition = {
      type: newCondition.type,
      status: newCondition.status,
      observedGeneration: newCondition.observedGeneration,
      lastTransitionTime: transitionTime,
      reason: newCondition.reason,
      message: newCondition.message,
    }
    if (added.observedGeneration === undefined) delete added.observedGeneration
    return { conditions: [...list, added], changed: true }
  }
  const existing = list[index]!
  const statusChanged = existing.status !== newCondition.status
  const changed =
    statusChanged ||
    existing.reason !== newCondition.reason ||
    existing.message !== newCondition.message ||
    existing.observedGeneration !== newCondition.observedGeneration
  if (!changed) return { conditions: [...list], changed: false }
  const updated: Condition = {
    type: existing.type,
    status: newCondition.status,
    observedGeneration: newCondition.observedGeneration,
    lastTransitionTime: statusChanged ? transitionTime : existing.lastTransitionTime,
    reason: newCondition.reason,
    message: newCondition.message,
  }
  if (updated.observedGeneration === undefined) delete updated.observedGeneration
  const next = [...list]
  next[index] = updated
  return { conditions: next, changed: true }
}

/** Removes a condition by type (apimachinery's RemoveStatusCondition). */
export const removeStatusCondition = (
  conditions: ReadonlyArray<Condition> | undefined,
  type: string,
): { readonly conditions: Condition[]; readonly changed: boolean } => {
  const list = conditions ?? []
  const next = list.filter((c) => c.type !== type)
  return { conditions: next, changed: next.length !== list.length }
}

/**
 * True when both lists hold the same conditions by type, comparing everything but lastTransitionTime.
 * Order is ignored: a list-map is keyed by type, so a reordered list is not a change worth a write.
 */
export const conditionsEqualIgnoringTime = (
  a: ReadonlyArray<Condition> | undefined,
  b: ReadonlyArray<Condition> | undefined,
): boolean => {
  const left = a ?? []
  const right = b ?? []
  if (left.length !== right.length) return false
  return left.every((x) => {
    const y = right.find((c) => c.type === x.type)
    return (
      y !== undefined &&
      x.status === y.status &&
      x.reason === y.reason &&
      x.message === y.message &&
      x.observedGeneration === y.observedGeneration
    )
  })
}
