// What a MemberCluster status write would tell its readers, as a priority for the hub-wide bound on
// status writes (ADR 0010, decision 9): while writes wait for a permit, bad news goes first,
// so `kubectl get membercluster` never shows a member green for longer than the writes ahead of it
// that carry bad news too.
//
// The rule, from the fields a reader sees (src/api/membercluster.ts), comparing the status the hub
// would write now with the one it last wrote (or last computed, when it has not read the object yet):
//   worse    a condition (Ready, Connected, CredentialsValid, BackupsVerified) was True and is not
//            (False or Unknown: unreachable, not Ready, a check no longer verified, ...); or fewer
//            checks verified; or more failing; or more missing an objective;
//   change   anything else but the probe time (better news, a new message, a first write, counts that
//            moved without anything turning less green);
//   refresh  the probe time alone (the lastProbeTime refresh, every --status-refresh-interval).
// A new check counts as Unknown: more unknown alone is a change, not bad news (nothing was green).
import type { MemberClusterStatus } from "../api/membercluster.ts"
import { jsonEqual } from "../reconcile/merge-patch.ts"

/** Priority classes, served in this order (0 first). */
export const statusNews = { worse: 0, change: 1, refresh: 2 } as const
export type StatusNews = (typeof statusNews)[keyof typeof statusNews]
export const statusNewsClasses = 3

const watchedConditions = ["Ready", "Connected", "CredentialsValid", "BackupsVerified"]

/** Equal but for lastProbeTime (compared as JSON values). */
export const sameExceptProbeTime = (
  a: MemberClusterStatus | undefined,
  b: MemberClusterStatus | undefined,
): boolean => jsonEqual({ ...a, lastProbeTime: undefined }, { ...b, lastProbeTime: undefined })

/** The class of writing `desired` over `written` (see the rule above). */
export const newsOf = (
  written: MemberClusterStatus | undefined,
  desired: MemberClusterStatus,
): StatusNews => {
  if (sameExceptProbeTime(written, desired)) return statusNews.refresh
  if (written === undefined) return statusNews.change
  const statusOf = (s: MemberClusterStatus, type: string) =>
    s.conditions?.find((c) => c.type === type)?.status
  const turnedLessGreen = watchedConditions.some(
    (type) => statusOf(written, type) === "True" && statusOf(desired, type) !== "True",
  )
  const was = written.counts
  const now = desired.counts
  const countsWorse =
    was !== undefined &&
    now !== undefined &&
    (now.verified < was.verified ||
      now.failed > was.failed ||
      (now.objectivesMissed ?? 0) > (was.objectivesMissed ?? 0))
  return turnedLessGreen || countsWorse ? statusNews.worse : statusNews.change
}
