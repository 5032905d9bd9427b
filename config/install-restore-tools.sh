#!/usr/bin/env bash
# Installs the tools the restore agent drives and the S3-compatible server the tests and the dev
# fleet keep backups in: restic, PostgreSQL (server and client), barman-cli-cloud from Debian, and
# moto's S3 server from PyPI into a venv in the cache (Apache-2.0; no MinIO). etcd and etcdutl come
# from clusters/build.sh. Idempotent: installs only what is missing. Needs root (or sudo) for apt-get.
set -euo pipefail
cache=${FLEETCHECK_CACHE:-$HOME/.cache/fleetcheck}
moto_version=5.2.5
say() { printf '[restore-tools] %s\n' "$*" >&2; }
t0=$SECONDS

missing=()
command -v restic >/dev/null 2>&1 || missing+=(restic)
command -v barman-cloud-restore >/dev/null 2>&1 || missing+=(barman-cli-cloud python3-boto3)
compgen -G "/usr/lib/postgresql/*/bin/postgres" >/dev/null || missing+=(postgresql)
command -v pg_restore >/dev/null 2>&1 || missing+=(postgresql-client)
python3 -c 'import venv, ensurepip' >/dev/null 2>&1 || missing+=(python3-venv)
if [[ ${#missing[@]} -gt 0 ]]; then
  sudo=; [[ "$(id -u)" == "0" ]] || sudo=sudo
  say "apt-get install ${missing[*]}"
  $sudo apt-get update >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y --no-install-recommends "${missing[@]}" >&2
fi

venv=$cache/s3-venv
if [[ ! -x "$venv/bin/moto_server" ]] || ! "$venv/bin/python" -c "import moto, sys; sys.exit(moto.__version__ != '$moto_version')" 2>/dev/null; then
  say "moto[server]==$moto_version into $venv (the S3-compatible server)"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "moto[server]==$moto_version" >&2
fi
say "ready in $((SECONDS - t0))s: $(restic version | cut -d' ' -f1-2), $(ls -d /usr/lib/postgresql/*/bin | tail -1), moto $moto_version"
