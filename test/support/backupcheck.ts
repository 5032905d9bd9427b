// A BackupCheck as a test writes one: a restore container that kwok runs (its pod annotations choose
// how it ends, see clusters/local-fleet/kwok-stages.yaml), plus whatever the test sets.
import { apiVersion, backupCheckKind } from "../../src/api/names.ts"

export interface BackupCheckFixture {
  /** Pod annotations, e.g. { "fleetcheck.io/simulate": "fail" }. */
  readonly annotations?: Record<string, string>
  /** The restore containers (default one container `restore` with image `restore:1`). */
  readonly containers?: ReadonlyArray<Record<string, unknown>>
  /** More spec fields (schedule, timeout, history limits, ...). */
  readonly spec?: Record<string, unknown>
}

export const backupCheck = (name: string, namespace: string, options: BackupCheckFixture = {}) => ({
  apiVersion,
  kind: backupCheckKind,
  metadata: { name, namespace },
  spec: {
    backup: { name: `${name}-backup` },
    ...options.spec,
    jobTemplate: {
      spec: {
        template: {
          ...(options.annotations ? { metadata: { annotations: options.annotations } } : {}),
          spec: { containers: options.containers ?? [{ name: "restore", image: "restore:1" }] },
        },
      },
    },
  },
})
