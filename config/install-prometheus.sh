#!/usr/bin/env bash
# Installs Debian's Prometheus (with promtool: the alert rules' unit tests, deploy/prometheus/) and
# Alertmanager (the alerts' delivery test), from the distribution's packages. Idempotent: does nothing
# when prometheus, promtool and alertmanager are already on PATH. Needs root or sudo; prints apt's progress.
# The packages' own services are not wanted: tests and `fleetcheck dev` start their own processes.
set -euo pipefail
have() { command -v prometheus >/dev/null 2>&1 && command -v promtool >/dev/null 2>&1 &&
  { command -v prometheus-alertmanager >/dev/null 2>&1 || command -v alertmanager >/dev/null 2>&1; }; }
if have; then
  echo "[prometheus] already installed: $(prometheus --version 2>&1 | head -1)" >&2
  exit 0
fi
if [[ "$(id -u)" != "0" ]]; then
  sudo=sudo
  command -v sudo >/dev/null 2>&1 || { echo "[prometheus] needs root (or sudo) to apt-get install prometheus" >&2; exit 1; }
else
  sudo=
fi
t0=$SECONDS
echo "[prometheus] apt-get update" >&2
$sudo apt-get update >&2
echo "[prometheus] apt-get install prometheus prometheus-alertmanager" >&2
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends prometheus prometheus-alertmanager >&2
have || { echo "[prometheus] prometheus, promtool or alertmanager missing after install" >&2; exit 1; }
echo "[prometheus] installed $(prometheus --version 2>&1 | head -1) in $((SECONDS - t0))s" >&2
