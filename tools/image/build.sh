#!/usr/bin/env bash
# Build fleetshare's image from deploy/Containerfile with tools from Debian's packages, as root:
# buildah (vfs storage under the cache, chroot isolation) on a Debian bookworm base that
# debootstrap makes (minbase + python3, python3-venv, ca-certificates; kept as a tarball).
# Three images are kept: the base, the dependencies (tagged by a hash of requirements.txt,
# rebuilt only when they change) and the image, tagged localhost/fleetshare:VERSION (the Helm
# chart's default) and localhost/fleetshare:src-HASH (a hash of what goes into it): a no-op
# when that tag exists.
#   tools/image/build.sh           build (or skip) and print the image name
#   tools/image/build.sh --where   print the image name only
# Environment: FLEETSHARE_IMAGE_CACHE (default ~/.cache/fleetshare/image),
#   DEBIAN_MIRROR (default http://deb.debian.org/debian), PYTHON (makes the wheel; default
#   python3), HOST_CA (the CA bundle pip trusts in the build; default this host's).
set -euo pipefail
ROOT="$(cd "$(dirname "$0")/../.." && pwd)"
CACHE="${FLEETSHARE_IMAGE_CACHE:-$HOME/.cache/fleetshare/image}"
export FLEETSHARE_IMAGE_CACHE="$CACHE"
BUILDAH=(bash "$ROOT/tools/image/buildah.sh")
PYTHON="${PYTHON:-python3}"
SUITE=bookworm
BASE_TAR="$CACHE/base-$SUITE.tar"
BASE=localhost/fleetshare-base:$SUITE
VERSION=$(sed -n 's/^version = "\(.*\)"/\1/p' "$ROOT/pyproject.toml")
IMAGE=localhost/fleetshare:$VERSION
SOURCE=$(cd "$ROOT" && find src pyproject.toml README.md LICENSE deploy/Containerfile -type f \
           ! -name '*.pyc' ! -path '*.egg-info/*' -print0 | LC_ALL=C sort -z |
         xargs -0 sha256sum | sha256sum | cut -c1-16)
if [[ "${1:-}" == "--where" ]]; then
  echo "$IMAGE"
  exit 0
fi
has() { "${BUILDAH[@]}" inspect --type image "$1" >/dev/null 2>&1; }
if has "localhost/fleetshare:src-$SOURCE"; then
  echo "$IMAGE"
  exit 0
fi
for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null || { echo "image: no $tool (apt-get install $tool)" >&2; exit 1; }
done
[[ "$(id -u)" == 0 ]] || { echo "image: run as root (debootstrap, buildah's storage)" >&2; exit 1; }
mkdir -p "$CACHE"
start=$(date +%s)

# the base: debootstrap's tree as a one-layer image
if [[ ! -f "$BASE_TAR" ]]; then
  rootfs="$CACHE/rootfs.tmp"
  rm -rf "$rootfs"
  debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates "$SUITE" \
    "$rootfs" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$CACHE/debootstrap.log"
  rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  tar -C "$rootfs" --numeric-owner -cf "$BASE_TAR.tmp" .
  mv "$BASE_TAR.tmp" "$BASE_TAR"
  rm -rf "$rootfs"
  "${BUILDAH[@]}" rmi --force "$BASE" >/dev/null 2>&1 || true
fi
if ! has "$BASE"; then
  ctr=$("${BUILDAH[@]}" from scratch)
  "${BUILDAH[@]}" add "$ctr" "$BASE_TAR" / >/dev/null
  "${BUILDAH[@]}" config --cmd /bin/bash \
    --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "$ctr"
  "${BUILDAH[@]}" commit --rm "$ctr" "$BASE" >/dev/null
fi

# the build context: the wheel and its dependencies
context=$(mktemp -d)
trap 'rm -rf "$context"' EXIT
"$PYTHON" -c 'import sys, tomllib
print("\n".join(tomllib.load(open(sys.argv[1], "rb"))["project"]["dependencies"]))' \
  "$ROOT/pyproject.toml" >"$context/requirements.txt"
(cd "$ROOT" && "$PYTHON" -m pip wheel --quiet --no-deps --wheel-dir "$context/dist" .)
rm -rf "$ROOT/build"  # setuptools' scratch directory
build=("${BUILDAH[@]}" build --isolation chroot --build-arg "BASE=$BASE"
       --secret "id=host-ca,src=${HOST_CA:-/etc/ssl/certs/ca-certificates.crt}"
       -f "$ROOT/deploy/Containerfile")
base_id=$("${BUILDAH[@]}" inspect --type image --format '{{.FromImageID}}' "$BASE")
DEPS=localhost/fleetshare-deps:$(cat "$context/requirements.txt" "$ROOT/deploy/Containerfile" \
                                 <(echo "$base_id") | sha256sum | cut -c1-16)
if ! has "$DEPS"; then
  "${build[@]}" --target deps -t "$DEPS" "$context" >&2
fi
old=$("${BUILDAH[@]}" images --noheading --format '{{.Name}}:{{.Tag}}' |
      grep -E '^localhost/fleetshare(-deps)?:' | grep -vxF -e "$DEPS" -e "$IMAGE" || true)
"${build[@]}" --build-arg "DEPS=$DEPS" -t "$IMAGE" -t "localhost/fleetshare:src-$SOURCE" \
  "$context" >&2
for tag in $old; do "${BUILDAH[@]}" rmi "$tag" >/dev/null 2>&1 || true; done
"${BUILDAH[@]}" rmi --prune >/dev/null 2>&1 || true
echo "image: built $IMAGE in $(( $(date +%s) - start )) s" >&2
echo "$IMAGE"
