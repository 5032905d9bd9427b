import { defineConfig } from "vitest/config"

/**
 * Files whose tests mostly wait on the wall clock: cron minutes (the scheduler knows whole minutes
 * only), member outages held for tens of seconds, Leases left to expire. `npm test`
 * (test/run-suite.ts) runs each list in a vitest process of its own beside the cluster files, so their
 * waiting overlaps the rest of the suite instead of adding to it. Three processes on two cores: the
 * waiting files are light on the CPU. Keep the three about even: the suite takes as long as the longest
 * (local figures of one warm run in the comments).
 */
export const wallClockFiles = [
  // cron minutes: two scheduled runs, Forbid and Replace slots (305 s)
  "test/integration/backupcheck.test.ts",
  // hub replicas frozen for 30 s and Leases left to expire (61 s)
  "test/integration/sharding.test.ts",
  // Leases left to expire, 3 s to 15 s at a time, one API server and in-process electors (51 s)
  "test/integration/leader-election.test.ts",
  // not a waiting file (mostly starting a fleet and two hubs, 43 s): this process has room for it
  "test/e2e/dev-replicas.test.ts",
  // 24 faults over 45 s, then 10 s to settle (117 s)
  "test/integration/fault-soak.test.ts",
]
export const leaseFiles = [
  // a lost lease held, members made to hang for the sync timeout (177 s)
  "test/integration/hub-lifecycle.test.ts",
  // a leader frozen 30 s at a minute boundary, cut off, SIGTERMed in an outage (171 s)
  "test/integration/leader-fencing.test.ts",
  // the staggered start waits for the next cron minute plus its offset (73 s)
  "test/integration/drills.test.ts",
  // real restores through one member, a third of it making backups (27–58 s)
  "test/integration/restore-agent.test.ts",
  // real Velero servers; a minute of it is Velero's store sync, which runs once a minute (112 s)
  "test/integration/velero.test.ts",
]

// Files that start real clusters run one at a time: two at once on a 2-core machine make both slow and
// flaky, so tests inside a file share one fleet. Unit files run in parallel.
export default defineConfig({
  root: new URL("..", import.meta.url).pathname,
  test: {
    testTimeout: 120_000,
    // Four workers on two cores: the unit files mostly wait on short real timers (58 s → 32 s). The
    // cluster projects run one file at a time (fileParallelism: false) whatever this says.
    maxWorkers: 4,
    hookTimeout: 240_000,
    reporters: ["default"],
    projects: [
      // Unit files share their workers' module graph (isolate: false): each file re-importing effect,
      // zod and client-node cost more than the tests themselves (118 s → 58 s on 2 cores). A unit test
      // must therefore leave no global state behind.
      { extends: true, test: { name: "unit", include: ["test/unit/**/*.test.ts"], isolate: false } },
      {
        extends: true,
        test: {
          name: "clusters",
          include: ["test/integration/**/*.test.ts", "test/e2e/**/*.test.ts"],
          exclude: [...wallClockFiles, ...leaseFiles],
          fileParallelism: false,
        },
      },
      { extends: true, test: { name: "wall-clock", include: wallClockFiles, fileParallelism: false } },
      { extends: true, test: { name: "leases", include: leaseFiles, fileParallelism: false } },
    ],
  },
})
