import { defineConfig } from "vitest/config"

/**
 * Files whose tests mostly wait on the wall clock: cron minutes (the scheduler knows whole minutes
 * only), member outages held for tens of seconds, Leases left to expire. `npm test`
 * (test/run-suite.ts) runs them in a second vitest process beside the cluster files (after the unit
 * files), so their waiting overlaps the rest of the suite instead of adding to it. Keep the two
 * processes about even: the suite takes as long as the longer one.
 */
export const wallClockFiles = [
  "test/integration/backupcheck.test.ts",
  "test/integration/hub-lifecycle.test.ts",
  // the staggered start waits for the next cron minute plus its offset (up to ~100 s, most of the file)
  "test/integration/drills.test.ts",
  // hub replicas frozen for 30 s and Leases left to expire
  "test/integration/sharding.test.ts",
  // not a waiting file (about 25 s, mostly starting a fleet and two hubs), but this process has minutes
  // of room beside the cluster files, where it would add its whole time to the suite
  "test/e2e/dev-replicas.test.ts",
  // Leases left to expire (3 s to 15 s at a time, about 50 s in all) with one API server and in-process
  // electors: light on the CPU, and the cluster files' process had no room for its minute (CI: 906 s
  // there, 649 s here)
  "test/integration/leader-election.test.ts",
  // real restores through one member (about 55 s, a third of it making backups): moved here when the
  // cluster files' process reached 947 s beside this one's 809 s
  "test/integration/restore-agent.test.ts",
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
          exclude: wallClockFiles,
          fileParallelism: false,
        },
      },
      { extends: true, test: { name: "wall-clock", include: wallClockFiles, fileParallelism: false } },
    ],
  },
})
