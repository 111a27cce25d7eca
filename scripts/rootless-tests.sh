#!/usr/bin/env bash
# Prints the Jest files that scripts/test.sh runs a second time as the unprivileged user (the
# rootless run), one per line, derived from the files themselves: every __tests__/**/*.test.js
# says within its first 5 lines either
#
#   // rootless: yes
#   // rootless: no — <why not>
#
# A file that says neither is named on stderr and the exit status is 1 (scripts/test.sh records a
# failed step), so a new file is never left out of the rootless run unnoticed; the files that do
# say are still printed. (Files that run rootless guard their root-only checks themselves, e.g.
# with process.getuid() === 0.)
#
#   bash scripts/rootless-tests.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bad=0
while IFS= read -r t; do
  mark="$(awk 'NR > 5 { exit } sub(/^\/\/ rootless: /, "") { print; exit }' "$t")"
  case "$mark" in
  yes) printf '%s\n' "$t" ;;
  'no — '?*) ;;
  *)
    echo "rootless-tests: $t: no '// rootless: yes' or '// rootless: no — <why not>' line in its first 5 lines" >&2
    bad=1
    ;;
  esac
done < <(find __tests__ -name '*.test.js' | LC_ALL=C sort)
exit "$bad"
