#!/usr/bin/env bash
# Builds one optional tool (not a cluster binary) from its wrapper module under clusters/bin/<name>,
# at the version that go.mod pins, into the same per-version cache as clusters/build.sh:
#
#   bash clusters/build-tool.sh NAME MODULE_PATH PACKAGE...
#     e.g. bash clusters/build-tool.sh helm helm.sh/helm/v4 helm.sh/helm/v4/cmd/helm
#
# Cache: ${FLEETCHECK_CACHE:-$HOME/.cache/fleetcheck}/bin/<name>-<version>-<go.mod+go.sum hash>/, one
# binary per package (named as `go build` names it). Warm runs take a second. The directory is printed
# on the last line of stdout; progress goes to stderr. An optional clusters/bin/<name>/ldflags file adds
# linker flags (e.g. -X to change a dependency's default) and is part of the cache key.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=clusters/build-lib.sh
source "$here/build-lib.sh"

[[ $# -ge 3 ]] || { say "usage: build-tool.sh NAME MODULE_PATH PACKAGE..."; exit 2; }
name=$1 module=$2; shift 2
dir=$here/bin/$name
[[ -f "$dir/go.mod" ]] || { say "no wrapper module at $dir/go.mod"; exit 2; }
command -v go >/dev/null || { say "Go is required to build $name (go 1.26)"; exit 1; }
version=$(version_of "$dir" "$module")
[[ -n "$version" ]] || { say "$dir/go.mod requires no $module"; exit 2; }
ldflags="-s -w"
key=$(key_of "$dir")
if [[ -f "$dir/ldflags" ]]; then
  ldflags="$ldflags $(tr '\n' ' ' <"$dir/ldflags")"
  key=$(cat "$dir/go.mod" "$dir/go.sum" "$dir/ldflags" | sha256sum | cut -c1-10)
fi
out=$cache/bin/$name-$version-$key
bins=""
for p in "$@"; do bins="$bins ${p##*/}"; done
mkdir -p "$cache/bin"
build "$name $version" "$out" "$dir" "$bins" -trimpath -ldflags "$ldflags" "$@"
echo "$out"
