#!/usr/bin/env bash
# Build Kueue's scheduler-performance runner and minimalkueue (test/performance/scheduler in
# the module sigs.k8s.io/kueue) from the Go module proxy, in a scratch module under a
# versioned cache directory outside the repository; a no-op when they exist. Kueue's sources
# stay in that cache's Go module cache: none of them is copied into the repository.
#   tools/kueue/build.sh            build (or skip) and print the bin directory
#   tools/kueue/build.sh --where    print the bin directory only
#   tools/kueue/build.sh --src      print the module's source directory (its Makefile is the
#                                   runner's PROJECT_DIR; the generator configs are under it)
# Environment: FLEETSHARE_KUEUE_CACHE (default ~/.cache/fleetshare/kueue), GO (default go).
set -euo pipefail
KUEUE_VERSION=v0.17.0
MODULE=sigs.k8s.io/kueue
CACHE="${FLEETSHARE_KUEUE_CACHE:-$HOME/.cache/fleetshare/kueue}"
ROOT="$CACHE/$KUEUE_VERSION"
BIN="$ROOT/bin"
SCRATCH="$ROOT/scratch"
export GOMODCACHE="${GOMODCACHE_OVERRIDE:-$CACHE/gomod}"
export GOCACHE="${GOCACHE_OVERRIDE:-$CACHE/gobuild}"
export GOTOOLCHAIN=local GOFLAGS=-buildvcs=false CGO_ENABLED=0
# package path in the module -> binary name
declare -A PACKAGES=(
  [test/performance/scheduler/runner]=runner
  [test/performance/scheduler/minimalkueue]=minimalkueue
)
if [[ "${1:-}" == "--where" ]]; then
  echo "$BIN"
  exit 0
fi
GO="${GO:-go}"
if [[ "${1:-}" == "--src" ]]; then
  echo "$GOMODCACHE/$MODULE@$KUEUE_VERSION"
  exit 0
fi
if [[ -x "$BIN/runner" && -x "$BIN/minimalkueue" ]]; then
  echo "$BIN"
  exit 0
fi
if ! command -v "$GO" >/dev/null 2>&1; then
  echo "kueue-bins: no Go toolchain (install Go >= 1.25: Debian golang-go or the go.dev download)" >&2
  exit 1
fi
mkdir -p "$BIN" "$SCRATCH"
start=$(date +%s)
if [[ ! -f "$SCRATCH/go.mod" ]]; then
  # the scratch module only requires Kueue; `go get` of the two packages resolves their
  # dependencies from Kueue's go.mod (it has no replace directives, so the versions built are
  # the ones Kueue tests with)
  gets=()
  for pkg in "${!PACKAGES[@]}"; do gets+=("$MODULE/$pkg@$KUEUE_VERSION"); done
  (cd "$SCRATCH" && printf 'module fleetshare.local/kueuebench\n\ngo 1.25.0\n' > go.mod.tmp &&
    mv go.mod.tmp go.mod && rm -f go.sum && "$GO" get "${gets[@]}" >&2) ||
    { rm -f "$SCRATCH/go.mod"; exit 1; }
fi
for pkg in "${!PACKAGES[@]}"; do
  name="${PACKAGES[$pkg]}"
  if [[ ! -x "$BIN/$name" ]]; then
    (cd "$SCRATCH" &&
      "$GO" build -trimpath -mod=readonly -ldflags "-s -w" -o "$BIN/$name.tmp" "$MODULE/$pkg")
    mv "$BIN/$name.tmp" "$BIN/$name"
  fi
done
echo "kueue-bins: built in $(( $(date +%s) - start )) s" >&2
echo "$BIN"
