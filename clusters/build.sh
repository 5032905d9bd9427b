#!/usr/bin/env bash
# Builds the real Kubernetes binaries fleetcheck's tests and dev fleet run, from the Go module proxy,
# at the versions pinned in clusters/bin/*/go.mod, into a per-version cache outside the clone.
#
#   bash clusters/build.sh            # build what is missing, print the bin directory last
#   KUBEBUILDER_ASSETS=/dir bash ...  # use existing binaries in /dir instead (envtest convention)
#
# Cache: ${FLEETCHECK_CACHE:-$HOME/.cache/fleetcheck}/bin/<component>-<version>-<go.sum hash>/.
# A component whose cache directory holds every binary is skipped, so warm runs take a second.
# All outputs are linked into one directory (.../bin/current-<key>) whose path is printed on the
# last line of stdout; progress goes to stderr.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=clusters/build-lib.sh
source "$here/build-lib.sh"

if [[ -n "${KUBEBUILDER_ASSETS:-}" ]]; then
  for b in kube-apiserver kube-controller-manager kube-scheduler kubectl etcd kwok; do
    [[ -x "$KUBEBUILDER_ASSETS/$b" ]] || { say "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS lacks $b"; exit 1; }
  done
  say "using existing binaries in KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"
  echo "$KUBEBUILDER_ASSETS"
  exit 0
fi

command -v go >/dev/null || { say "Go is required to build the Kubernetes binaries (go 1.26)"; exit 1; }

k8s_dir=$here/bin/k8s
etcd_dir=$here/bin/etcd
etcdutl_dir=$here/bin/etcdutl
kv=$(version_of "$k8s_dir" k8s.io/kubernetes)
ev=$(version_of "$etcd_dir" go.etcd.io/etcd/server/v3)
wv=$(version_of "$k8s_dir" sigs.k8s.io/kwok)
uv=$(version_of "$etcdutl_dir" go.etcd.io/etcd/etcdutl/v3)

k8s_out=$cache/bin/k8s-$kv-$(key_of "$k8s_dir")
etcd_out=$cache/bin/etcd-$ev-$(key_of "$etcd_dir")
etcdutl_out=$cache/bin/etcdutl-$uv-$(key_of "$etcdutl_dir")

mkdir -p "$cache/bin"
# Version stamping as upstream's hack/lib/version.sh does, so /version reports the real version.
major=${kv#v}; major=${major%%.*}
minor=${kv#v*.}; minor=${minor%%.*}
ld="-s -w"
for p in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  ld="$ld -X $p.gitVersion=$kv -X $p.gitMajor=$major -X $p.gitMinor=$minor"
  ld="$ld -X $p.gitTreeState=clean -X $p.buildDate=2026-01-01T00:00:00Z"
done

# kwok (the nodes and pods of a local fleet) is in the same module and the same go build: built
# against the Kubernetes libraries of this version, it shares their compiled packages (41 s on top of
# the Kubernetes binaries, cold, against 88 s as a build of its own).
build "kubernetes $kv, kwok $wv" "$k8s_out" "$k8s_dir" "kube-apiserver kube-controller-manager kube-scheduler kubectl kwok" \
  -trimpath -tags selinux,notest,grpcnotrace -ldflags "$ld" \
  k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager \
  k8s.io/kubernetes/cmd/kube-scheduler k8s.io/kubernetes/cmd/kubectl sigs.k8s.io/kwok/cmd/kwok
# etcd's main package is the module root of server/v3; its default binary name would be "server".
if [[ ! -x "$etcd_out/etcd" ]]; then
  build "etcd $ev" "$etcd_out" "$etcd_dir" "server" -trimpath -ldflags "-s -w" go.etcd.io/etcd/server/v3
  mv "$etcd_out/server" "$etcd_out/etcd"
else
  say "etcd $ev: cached in $etcd_out"
fi
# etcdutl: the restore agent's etcd method restores snapshots with it (not a cluster binary).
build "etcdutl $uv" "$etcdutl_out" "$etcdutl_dir" "etcdutl" -trimpath -ldflags "-s -w" go.etcd.io/etcd/etcdutl/v3

# One directory holding them all, in the KUBEBUILDER_ASSETS shape (plus etcdutl).
current=$cache/bin/current-$(printf '%s' "$k8s_out $etcd_out $etcdutl_out" | sha256sum | cut -c1-10)
mkdir -p "$current"
for b in kube-apiserver kube-controller-manager kube-scheduler kubectl kwok; do ln -sfn "$k8s_out/$b" "$current/$b"; done
ln -sfn "$etcd_out/etcd" "$current/etcd"
ln -sfn "$etcdutl_out/etcdutl" "$current/etcdutl"
"$current/kube-apiserver" --version >&2
echo "$current"
