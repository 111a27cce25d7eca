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

shopt -s nullglob
node_files=(./*.node)
if [[ ! -x ./kern || ${#node_files[@]} -eq 0 || ! -f js/native.js ]]; then
  echo "demo: building the addon and the kern runtime (npm run build; a few minutes the first time)"
  npm run build
fi

exec node scripts/demo.js
