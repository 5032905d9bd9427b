#!/usr/bin/env bash
# Makes a clone ready to run: npm dependencies as locked (only when the lockfile changed since the last
# install), the Kubernetes binaries the local fleets run (built once into ~/.cache/fleetcheck),
# Chromium for the dashboard test, the restore agent's tools (config/install-restore-tools.sh) and
# Prometheus with Alertmanager (config/install-prometheus.sh), and Velero with its AWS plugin (the real
# Velero of test/integration/velero.test.ts and `fleetcheck dev --velero`).
# Used by `npm test` (pretest), `bin/fleetcheck` and .ci/run, so a fresh clone needs no other step.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
if ! cmp -s package-lock.json node_modules/.fleetcheck-lock 2>/dev/null; then
  echo "[deps] installing npm dependencies (npm ci)" >&2
  # npm itself may run on an older Node than the project's own (the `node` package, Node 24): its
  # EBADENGINE warnings about that are noise, every other line is kept.
  npm ci --no-audit --no-fund 2>&1 | { grep -v 'npm warn EBADENGINE' || true; } >&2
  cp package-lock.json node_modules/.fleetcheck-lock
fi
if [[ "${FLEETCHECK_SKIP_BINARIES:-}" != "1" ]]; then
  # Velero and its AWS plugin (one module, one go build) in the background, beside everything below;
  # nothing waits on them until the end (warm, a cache lookup of a second).
  bash clusters/build-tool.sh velero github.com/vmware-tanzu/velero github.com/vmware-tanzu/velero/cmd/velero \
    github.com/vmware-tanzu/velero-plugin-for-aws/velero-plugin-for-aws >/dev/null &
  velero_build=$!
  bash clusters/build.sh >/dev/null
  # Helm (test/integration/helm.test.ts: lint, template, install of deploy/helm), from the Go module proxy.
  bash clusters/build-tool.sh helm helm.sh/helm/v4 helm.sh/helm/v4/cmd/helm >/dev/null
  # The dashboard test drives Debian's Chromium (apt-get; root or sudo). Skipped when already present.
  bash config/install-chromium.sh >&2
  # restic, PostgreSQL, barman-cloud and the S3 server: the restore agent's real tools.
  bash config/install-restore-tools.sh
  # Prometheus (promtool: the alert rules' tests) and Alertmanager, Debian's.
  bash config/install-prometheus.sh
  wait "$velero_build"
fi
