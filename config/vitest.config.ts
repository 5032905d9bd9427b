import { defineConfig } from "vitest/config"

// Integration files each start their own real clusters; running two at once on a 2-core machine
// makes both slow and flaky, so files run one at a time and tests inside a file share one fleet.
export default defineConfig({
  root: new URL("..", import.meta.url).pathname,
  test: {
    include: ["test/**/*.test.ts"],
    fileParallelism: false,
    testTimeout: 120_000,
    hookTimeout: 240_000,
    reporters: ["default"],
  },
})
