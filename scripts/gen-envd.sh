#!/usr/bin/env bash
# The protobuf code of `kern serve`'s envd services (js/serve/gen/), generated from E2B's
# published .proto files (vendor/e2b-envd/) by protoc-gen-es through buf, both pinned in
# package-lock.json. The generated files are committed (the public JS layer has no build step).
#
#   bash scripts/gen-envd.sh           regenerate js/serve/gen/
#   bash scripts/gen-envd.sh --check   fail if js/serve/gen/ is not what the .proto files give
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
bin="$repo/node_modules/.bin"
[[ -x "$bin/buf" && -x "$bin/protoc-gen-es" ]] || { echo "gen-envd: run npm ci first (buf and protoc-gen-es are dev dependencies)" >&2; exit 1; }

out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
cat >"$out/buf.gen.yaml" <<YAML
version: v2
plugins:
  - local: $bin/protoc-gen-es
    out: $out/gen
    opt:
      - target=js
      - js_import_style=legacy_commonjs
YAML
"$bin/buf" generate --template "$out/buf.gen.yaml" vendor/e2b-envd
if [[ "${1:-}" == "--check" ]]; then
  diff -r "$out/gen" js/serve/gen >/dev/null || {
    echo "gen-envd: js/serve/gen/ differs from what vendor/e2b-envd gives: run bash scripts/gen-envd.sh" >&2
    exit 1
  }
else
  rm -rf js/serve/gen
  mkdir -p js/serve
  cp -r "$out/gen" js/serve/gen
  echo "gen-envd: js/serve/gen/ regenerated"
fi
