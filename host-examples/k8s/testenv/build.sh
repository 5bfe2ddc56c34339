#!/usr/bin/env bash
# Builds the test control plane (kube-apiserver, kube-scheduler, etcd, kwok)
# from this folder's Go module, once per go.sum: the binaries go to
# ${GANGWAY_K8S_CACHE:-$HOME/.cache/gangway-k8s}/<sha256 of go.sum, 16 hex>/bin,
# and a folder that already has all four is reused as it is.
# Prints that bin folder on its last line (GANGWAY_K8S_BIN for the tests).
#
# Only the Go module proxy is used (no images, no binary downloads). Go 1.26
# is taken from PATH or /usr/local/go/bin. Pure Go (CGO_ENABLED=0),
# -trimpath, stripped, at most 2 packages compiled at once.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export PATH="$PATH:/usr/local/go/bin"
command -v go >/dev/null || { echo "build.sh: no go in PATH or /usr/local/go/bin" >&2; exit 1; }

key="$(sha256sum "$here/go.sum" | cut -c1-16)"
cache="${GANGWAY_K8S_CACHE:-$HOME/.cache/gangway-k8s}/$key"
bin="$cache/bin"
programs=(kube-apiserver kube-scheduler etcd kwok)

complete() {
  local p
  for p in "${programs[@]}"; do [ -x "$bin/$p" ] || return 1; done
}

if complete; then
  echo "build.sh: cached in $bin" >&2
  echo "$bin"
  exit 0
fi

mkdir -p "$cache"
tmp="$(mktemp -d "$cache/build.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
start=$SECONDS
export CGO_ENABLED=0 GOFLAGS="-trimpath -mod=readonly -buildvcs=false"
cd "$here"
go build -p 2 -ldflags="-s -w" -o "$tmp/kube-apiserver" k8s.io/kubernetes/cmd/kube-apiserver
go build -p 2 -ldflags="-s -w" -o "$tmp/kube-scheduler" k8s.io/kubernetes/cmd/kube-scheduler
go build -p 2 -ldflags="-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
go build -p 2 -ldflags="-s -w" -o "$tmp/kwok" sigs.k8s.io/kwok/cmd/kwok
# All four or none: a half-built folder is never taken as built.
rm -rf "$bin"
chmod 755 "$tmp"
mv "$tmp" "$bin"
trap - EXIT
echo "build.sh: built in $bin in $((SECONDS - start)) s" >&2
echo "$bin"
