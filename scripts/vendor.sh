#!/usr/bin/env bash
# Vendored third-party code (vendor/README.md).
#
#   bash scripts/vendor.sh --check         every vendor/*/SHA256SUMS holds (offline; the lint step)
#   bash scripts/vendor.sh acorn VERSION   re-vendor npm `acorn` at VERSION: dist/acorn.js and
#                                          LICENSE as published, VERSION and SHA256SUMS rewritten
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

check() {
  local sums ok=0
  for sums in "$repo"/vendor/*/SHA256SUMS; do
    (cd "$(dirname "$sums")" && sha256sum --quiet --check SHA256SUMS) || {
      echo "vendor: $(dirname "${sums#"$repo"/}") differs from its SHA256SUMS: vendored files are kept as published; re-vendor with scripts/vendor.sh" >&2
      ok=1
    }
  done
  return $ok
}

acorn() {
  local version="$1" tmp dest="$repo/vendor/acorn"
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' RETURN
  (cd "$tmp" && npm pack --silent "acorn@$version" >/dev/null)
  tar -xzf "$tmp/acorn-$version.tgz" -C "$tmp" package/dist/acorn.js package/LICENSE
  cp "$tmp/package/dist/acorn.js" "$tmp/package/LICENSE" "$dest/"
  echo "$version" >"$dest/VERSION"
  (cd "$dest" && sha256sum acorn.js LICENSE >SHA256SUMS)
  echo "vendor: acorn $version -> vendor/acorn (update the version in src/lang/driver.rs's comment)"
}

case "${1:-}" in
--check) check ;;
acorn) [[ -n "${2:-}" ]] || { echo "usage: scripts/vendor.sh acorn VERSION" >&2; exit 2; }; acorn "$2" ;;
*) echo "usage: scripts/vendor.sh --check | acorn VERSION" >&2; exit 2 ;;
esac
