#!/usr/bin/env bash
# The first thing to try:
#
#   bash scripts/demo.sh
#
# Installs missing dependencies, builds the addon and the `kern` runtime if they are not built
# yet, then runs scripts/demo.js: a few snippets in fresh isolated boxes on image "host" (the
# host's own /usr, read-only), so it needs no network and no test rootfs.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
export PATH="${HOME:-/root}/.cargo/bin:/root/.cargo/bin:$PATH"

bash scripts/setup-deps.sh

# Built = the kern runtime is there and the addon (js/native.js + its .node file) loads.
if [[ ! -x ./kern ]] || ! node -e 'require("./js/native.js")' >/dev/null 2>&1; then
  # The dev profile (dependencies optimised, our crate incremental): minutes, not the release
  # profile's LTO (`npm run build`, for packaging).
  echo "demo: building the addon and the kern runtime (npm run build:debug; a few minutes the first time)"
  npm run build:debug
fi

exec node scripts/demo.js
