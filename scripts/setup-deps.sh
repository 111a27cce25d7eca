#!/usr/bin/env bash
# Installs what building and testing kern-sandbox needs on a Debian machine, and nothing that is
# already there. Idempotent and quiet on success; loud (with the failing tool's output) on failure.
#
#   bash scripts/setup-deps.sh            # Debian packages + toolchain checks + npm ci if needed
#
# Debian packages: debootstrap (test rootfs), bubblewrap (benchmarks), acl (setfacl for workspace
# ACLs), uidmap (newuidmap/newgidmap for rootless id ranges), hyperfine, procps, util-linux, and
# for the image tests a real registry and its tools: docker-registry, skopeo (pushes the test
# images), apache2-utils (htpasswd for the basic-auth registry), zstd (a zstd test layer); for the
# registry-network tests (__tests__/images/registries.test.js) tinyproxy-bin (a real forward proxy, the
# binary without the Debian service) and openssl (a test CA made at test time); for the
# cgroup-v2 guest (scripts/cgv2-vm.sh): patchelf (points the UML kernel at its own libc) and
# e2fsprogs (mkfs.ext4 -d makes the guest's disk image); python3-pip (installs ruff, below); for
# the container tests (__tests__/packaging/container.test.js, scripts/build-test-container.sh) podman with
# the runc runtime, slirp4netns and fuse-overlayfs; haproxy for the fleet test of `kern serve`
# (__tests__/serve/fleet.test.js, deploy/k8s/serve.yaml's router).
# ruff (the Python check of scripts/test.sh, scripts/check-python.py) and kubernetes-validate (the
# offline check of deploy/k8s/deployment.yaml) and E2B's Python SDKs (clients of `kern serve` in
# its tests) come pinned from PyPI into target/tools, not into the system's Python.
# It does not install Rust or Node: those come from rustup and the distribution/NodeSource; it
# only checks they are there and says what to do if not.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export PATH="${HOME:-/root}/.cargo/bin:/root/.cargo/bin:$PATH"

die() {
  echo "setup-deps: ERROR: $*" >&2
  exit 1
}

# --- Debian packages ---------------------------------------------------------------------------
packages=(debootstrap bubblewrap acl uidmap hyperfine procps util-linux docker-registry skopeo apache2-utils zstd tinyproxy-bin openssl patchelf e2fsprogs python3-pip podman runc slirp4netns fuse-overlayfs haproxy)
missing=()
for p in "${packages[@]}"; do
  status="$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)"
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]})); then
  command -v apt-get >/dev/null || die "missing packages (${missing[*]}) and no apt-get to install them"
  if [[ "$(id -u)" != 0 ]]; then
    die "missing Debian packages: ${missing[*]} — run as root, or: sudo apt-get install -y ${missing[*]}"
  fi
  echo "setup-deps: installing ${missing[*]}"
  log="$(mktemp)"
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get update -qq >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    die "apt-get update failed"
  fi
  if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    die "apt-get install ${missing[*]} failed"
  fi
  rm -f "$log"
fi

# --- toolchains --------------------------------------------------------------------------------
command -v cargo >/dev/null ||
  die "cargo not found (looked in PATH and ~/.cargo/bin). Install Rust with rustup (https://rustup.rs), then re-run."
for comp in fmt clippy; do
  cargo "$comp" --version >/dev/null 2>&1 ||
    echo "setup-deps: WARNING: cargo $comp is missing (the lint steps of scripts/test.sh need it): rustup component add ${comp/fmt/rustfmt}" >&2
done
command -v node >/dev/null ||
  die "node not found in PATH. Install Node.js >= 20.17 (Debian 12's own nodejs is 18: use NodeSource's node_20.x or newer, or nvm), then re-run."
command -v npm >/dev/null ||
  die "npm not found in PATH. Install npm (it ships with Node.js), then re-run."
node -e 'const [a, b] = process.versions.node.split(".").map(Number); process.exit(a > 20 || (a === 20 && b >= 17) ? 0 : 1)' ||
  die "node $(node --version) is too old: kern-sandbox needs Node >= 20.17 (NodeSource's node_20.x or newer, or nvm)"

# --- npm dependencies --------------------------------------------------------------------------
# npm writes node_modules/.package-lock.json on every install; if package-lock.json is newer than
# it (or node_modules is missing), the installed tree may be stale.
cd "$repo"
[[ -f package-lock.json ]] || die "package-lock.json is missing in $repo (npm ci needs it)"
if [[ -L node_modules ]]; then
  # A worktree sharing another checkout's tree: npm ci would empty that checkout's node_modules
  # through the link (it did once) and leave a real directory here.
  echo "setup-deps: node_modules is a link to $(readlink node_modules): npm ci skipped (run it in that checkout)" >&2
elif [[ ! -d node_modules || ! -f node_modules/.package-lock.json || package-lock.json -nt node_modules/.package-lock.json ]]; then
  echo "setup-deps: npm ci"
  log="$(mktemp)"
  if ! npm ci --no-audit --no-fund >"$log" 2>&1; then
    cat "$log" >&2
    rm -f "$log"
    die "npm ci failed"
  fi
  rm -f "$log"
fi

# --- ruff (PyPI, pinned) -------------------------------------------------------------------------
# One static binary in a wheel: pip puts it in target/tools/ruff-<version> (--target leaves the
# system's Python alone), and target/tools/ruff points at the pinned one. Without it only the
# Python check fails (a recorded failure of scripts/test.sh), so a failed install warns here.
ruff_version=0.17.5
ruff_dir="target/tools/ruff-$ruff_version"
if [[ ! -x "$ruff_dir/bin/ruff" ]]; then
  echo "setup-deps: ruff $ruff_version (PyPI) -> $ruff_dir"
  rm -rf "$ruff_dir" target/tools/ruff
  log="$(mktemp)"
  if ! python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore --no-deps \
    --only-binary=:all: --target "$ruff_dir" "ruff==$ruff_version" >"$log" 2>&1; then
    cat "$log" >&2
    echo "setup-deps: WARNING: pip install ruff==$ruff_version failed (no pip? apt-get install python3-pip): the Python check will fail" >&2
  fi
  rm -f "$log"
fi
[[ -x "$ruff_dir/bin/ruff" ]] && ln -sfn "ruff-$ruff_version/bin/ruff" target/tools/ruff

# --- Python tools with their dependencies (PyPI, pinned) ---------------------------------------
# Each goes into target/tools/<dir> (and target/tools/<link> points at it), not into the system's
# Python; a failed install warns, since only the tests that use it fail without it.
#   pip_tool LINK DIR MARKER USED_BY REQUIREMENT...   (MARKER: a file that proves DIR complete)
pip_tool() {
  local link="$1" dir="target/tools/$2" marker="$3" used_by="$4"
  shift 4
  if [[ ! -f "$dir/$marker" ]]; then
    echo "setup-deps: $* (PyPI) -> $dir"
    rm -rf "$dir" "target/tools/$link"
    log="$(mktemp)"
    if ! python3 -m pip install --quiet --disable-pip-version-check --root-user-action=ignore \
      --target "$dir" "$@" >"$log" 2>&1; then
      cat "$log" >&2
      echo "setup-deps: WARNING: pip install $* failed: $used_by will fail" >&2
    fi
    rm -f "$log"
  fi
  [[ -f "$dir/$marker" ]] && ln -sfn "$(basename "$dir")" "target/tools/$link"
  return 0
}

# kubernetes-validate checks the deploy/k8s manifests offline against the Kubernetes schemas it
# bundles (no cluster here); PyYAML comes with it.
kv_version=1.37.0
pip_tool kubernetes-validate "kubernetes-validate-$kv_version" kubernetes_validate/__main__.py \
  __tests__/packaging/deploy.test.js "kubernetes-validate==$kv_version"

# E2B's Python SDKs: `kern serve` is tested with the unmodified Python clients too (the test puts
# target/tools/e2b-python on PYTHONPATH).
e2b_py_version=2.63.0
e2b_ci_py_version=2.11.5
pip_tool e2b-python "e2b-python-$e2b_py_version-$e2b_ci_py_version" e2b_code_interpreter/__init__.py \
  __tests__/serve/python.test.js "e2b==$e2b_py_version" "e2b-code-interpreter==$e2b_ci_py_version"
exit 0
