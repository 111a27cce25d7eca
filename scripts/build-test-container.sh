#!/usr/bin/env bash
# Builds the Podman image the container tests run kern-sandbox in (__tests__/packaging/container.test.js,
# issue 22): the test rootfs (Debian bookworm + python3, scripts/build-test-rootfs.sh) with the
# Node 24 of scripts/fetch-test-node.sh as /usr/local/bin/node (kern-sandbox needs Node >= 20.17;
# Debian 12's is 18) and a non-root user `app` (uid 1000), imported with `podman import` (no
# registry is reachable here). The packed npm package is not in the image: the test installs
# dist/*.tgz for each run and mounts it, so the image stays cached across builds. Rebuilt when
# the rootfs, the Node or this script change (the image's label holds their hash).
#
#   bash scripts/build-test-container.sh        # KERN_TEST_CONTAINER_IMAGE=name to build another
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
image="${KERN_TEST_CONTAINER_IMAGE:-localhost/kern-sandbox-test:latest}"
rootfs="${KERN_TEST_ROOTFS:-/var/cache/kern-sandbox-test/rootfs-bookworm}"
node="${KERN_TEST_NODE_TS:-/var/cache/kern-sandbox-test/node-ts}/bin/node"

command -v podman >/dev/null || {
  echo "test container: podman missing (run scripts/setup-deps.sh)" >&2
  exit 1
}
[[ -f "$rootfs/.kern-test-rootfs" ]] || {
  echo "test container: no test rootfs at $rootfs (run scripts/build-test-rootfs.sh first)" >&2
  exit 1
}
[[ -x "$node" ]] || {
  echo "test container: no Node at $node (run scripts/fetch-test-node.sh first)" >&2
  exit 1
}
stamp_want="$(cat "$here/build-test-container.sh" "$rootfs/.kern-test-rootfs" | sha256sum | cut -d' ' -f1)-$("$node" --version)"
stamp_have="$(podman image inspect --format '{{index .Labels "kern.test.stamp"}}' "$image" 2>/dev/null || true)"
if [[ "$stamp_have" == "$stamp_want" ]]; then
  echo "test container: cached as $image"
  exit 0
fi

tmp="$(mktemp -d /tmp/kern-test-container.XXXXXX)"
trap 'rm -rf "$tmp"' EXIT
# A copy to add to: the rootfs itself is shared with the other tests.
cp -a "$rootfs" "$tmp/root"
install -m 755 "$node" "$tmp/root/usr/local/bin/node"
echo 'app:x:1000:1000:app:/home/app:/bin/bash' >>"$tmp/root/etc/passwd"
echo 'app:x:1000:' >>"$tmp/root/etc/group"
echo 'app:!:19000:0:99999:7:::' >>"$tmp/root/etc/shadow"
install -d -o 1000 -g 1000 -m 755 "$tmp/root/home/app"
tar -C "$tmp/root" --numeric-owner -cf "$tmp/root.tar" .
podman import --quiet \
  --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change "LABEL kern.test.stamp=$stamp_want" \
  --change 'CMD ["/bin/bash"]' \
  "$tmp/root.tar" "$image" >/dev/null
echo "test container: built $image ($(podman image inspect --format '{{.Size}}' "$image") bytes)"
