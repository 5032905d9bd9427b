#!/usr/bin/env bash
# Installs the Chromium the browser test (test/e2e/dashboard.test.ts) drives through playwright-core,
# from the distribution's packages (no browser download from npm). Idempotent: does nothing when a
# `chromium` is already on PATH. Needs root (CI runs as root); prints apt's progress.
set -euo pipefail
if command -v chromium >/dev/null 2>&1; then
  echo "[chromium] already installed: $(command -v chromium) ($(chromium --version 2>/dev/null || echo 'version unknown'))" >&2
  exit 0
fi
if [[ "$(id -u)" != "0" ]]; then
  sudo=sudo
  command -v sudo >/dev/null 2>&1 || { echo "[chromium] needs root (or sudo) to apt-get install chromium" >&2; exit 1; }
else
  sudo=
fi
t0=$SECONDS
echo "[chromium] apt-get update" >&2
$sudo apt-get update >&2
echo "[chromium] apt-get install chromium fonts-dejavu-core" >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends chromium fonts-dejavu-core >&2
echo "[chromium] installed $(chromium --version 2>/dev/null || command -v chromium) in $((SECONDS - t0))s" >&2
