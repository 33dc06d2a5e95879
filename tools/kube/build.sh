#!/usr/bin/env bash
# Build etcd, kube-apiserver and kube-scheduler from the Go module proxy into a
# versioned cache directory outside the repository; a no-op when they exist.
#   tools/kube/build.sh            build (or skip) and print the bin directory
#   tools/kube/build.sh --where    print the bin directory only
# Environment: FLEETSHARE_KUBE_CACHE (default ~/.cache/fleetshare/kube), GO (default go).
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
K8S_VERSION=v1.37.2
ETCD_VERSION=v3.6.16
CACHE="${FLEETSHARE_KUBE_CACHE:-$HOME/.cache/fleetshare/kube}"
BIN="$CACHE/k8s-$K8S_VERSION-etcd-$ETCD_VERSION/bin"
COMMANDS=(kube-apiserver kube-scheduler kube-controller-manager)
if [[ "${1:-}" == "--where" ]]; then
  echo "$BIN"
  exit 0
fi
if [[ -x "$BIN/etcd" && -x "$BIN/kube-apiserver" && -x "$BIN/kube-scheduler" &&
      -x "$BIN/kube-controller-manager" ]]; then
  echo "$BIN"
  exit 0
fi
GO="${GO:-go}"
if ! command -v "$GO" >/dev/null 2>&1; then
  echo "kube-bins: no Go toolchain (install Go >= 1.25: Debian golang-go or the go.dev download)" >&2
  exit 1
fi
mkdir -p "$BIN"
export GOMODCACHE="${GOMODCACHE_OVERRIDE:-$CACHE/gomod}"
export GOCACHE="${GOCACHE_OVERRIDE:-$CACHE/gobuild}"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
MINOR="${K8S_VERSION#v1.}"; MINOR="${MINOR%%.*}"
LDVER=""
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
  LDVER+=" -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$MINOR"
  LDVER+=" -X $pkg.gitTreeState=clean"
done
start=$(date +%s)
if [[ ! -x "$BIN/etcd" ]]; then
  (cd "$HERE/etcd" && "$GO" build -trimpath -mod=readonly -ldflags "-s -w" -o "$BIN/etcd.tmp" .)
  mv "$BIN/etcd.tmp" "$BIN/etcd"
fi
for cmd in "${COMMANDS[@]}"; do
  if [[ ! -x "$BIN/$cmd" ]]; then
    (cd "$HERE/kubernetes" && "$GO" build -trimpath -mod=readonly -ldflags "-s -w$LDVER" \
      -o "$BIN/$cmd.tmp" "./cmd/$cmd")
    mv "$BIN/$cmd.tmp" "$BIN/$cmd"
  fi
done
echo "kube-bins: built in $(( $(date +%s) - start )) s" >&2
echo "$BIN"
