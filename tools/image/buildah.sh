#!/usr/bin/env bash
# buildah on the project's own image storage under the cache (as root): build.sh and
# tests/test_image.py run every buildah command through this. The storage driver is overlay
# where the kernel has it and the cache is not itself on overlayfs (nested), else vfs (a full
# copy per layer: slower); FLEETSHARE_IMAGE_DRIVER chooses. Each driver has its own storage.
# Environment: FLEETSHARE_IMAGE_CACHE (default ~/.cache/fleetshare/image).
set -euo pipefail
CACHE="${FLEETSHARE_IMAGE_CACHE:-$HOME/.cache/fleetshare/image}"
DRIVER="${FLEETSHARE_IMAGE_DRIVER:-}"
if [[ -z "$DRIVER" ]]; then
  mkdir -p "$CACHE"
  DRIVER=vfs
  if grep -qw overlay /proc/filesystems && [[ "$(stat -f -c %T "$CACHE")" != overlayfs ]]; then
    DRIVER=overlay
  fi
fi
exec buildah --root "$CACHE/storage-$DRIVER" --runroot "$CACHE/run-$DRIVER" \
  --storage-driver "$DRIVER" "$@"
