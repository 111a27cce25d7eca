#!/usr/bin/env bash
# Builds the OCI image layouts the image tests push to a local registry and pull back (no real
# registry is reachable on CI): the test rootfs as an image (and as rootfs-gzip, without zstd,
# for Docker-format pushes), a multi-arch index, an other-arch-only
# index, a USER image, and hostile layers (../, symlink and hardlink escapes, a device node).
# Layouts are written by scripts/make-oci-image.js; rootfs-docker.tar (docker-archive, as from
# `docker save`) by skopeo. Cached outside the repo; rebuilt when the test rootfs, these scripts
# or the zstd availability (it decides layer 2's media type) change.
#
#   bash scripts/build-test-images.sh      # KERN_TEST_IMAGES=dir to build elsewhere
#
# Result: $dest/<name>/ (OCI layouts, tag `latest`), $dest/rootfs-docker.tar (kern/test:latest),
# $dest/images.json (digests and the facts tests assert on).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
dest="${KERN_TEST_IMAGES:-/var/cache/kern-sandbox-test/images}"
rootfs="${KERN_TEST_ROOTFS:-/var/cache/kern-sandbox-test/rootfs-bookworm}"

[[ -f "$rootfs/.kern-test-rootfs" ]] || {
  echo "test images: no test rootfs at $rootfs (run scripts/build-test-rootfs.sh first)" >&2
  exit 1
}
command -v skopeo >/dev/null || {
  echo "test images: skopeo missing (run scripts/setup-deps.sh)" >&2
  exit 1
}
zstd_state="$(command -v zstd >/dev/null && echo zstd || echo no-zstd)"
stamp_want="$(cat "$here/build-test-images.sh" "$here/make-oci-image.js" "$rootfs/.kern-test-rootfs" |
  sha256sum | cut -d' ' -f1)-$zstd_state"

if [[ -f "$dest/.kern-test-images" && "$(cat "$dest/.kern-test-images")" == "$stamp_want" ]]; then
  echo "test images: cached at $dest"
  exit 0
fi

tmp="$dest.tmp.$$"
trap 'rm -rf "$tmp"' EXIT
rm -rf "$tmp"
mkdir -p "$tmp"
echo "test images: building into $tmp"
node "$here/make-oci-image.js" --rootfs "$rootfs" --out "$tmp"

# From rootfs-gzip: skopeo 1.9 cannot turn a zstd layer into any Docker format. docker-archive
# stores the layers uncompressed, as `docker save` does. --insecure-policy so the host's
# /etc/containers/policy.json cannot veto a local copy.
skopeo --insecure-policy copy -q "oci:$tmp/rootfs-gzip:latest" "docker-archive:$tmp/rootfs-docker.tar:kern/test:latest"

echo "$stamp_want" >"$tmp/.kern-test-images"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "test images: built at $dest"
