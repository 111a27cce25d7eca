#!/usr/bin/env bash
# The cgroup-v2 + systemd runs (a step of scripts/test.sh; runnable alone after a build):
#
#   bash scripts/test-cgv2.sh OUTDIR
#   bash scripts/test-cgv2.sh --list     (the suites it runs by default, one per line)
#
# Most users run cgroup v2 with systemd as PID 1; the CI machine may not. So this boots a
# throw-away guest that does (scripts/cgv2-vm.sh: user-mode Linux, Debian bookworm, systemd 252,
# pure cgroup2) twice and runs the suites below in it:
#   1. as root;
#   2. as the unprivileged guest user `u` in a real logind session with a systemd user manager:
#      the rootless path, where the library starts each kern in a delegated scope of its own
#      (`systemd-run --user --scope -p Delegate=yes`) and kern puts the caps on a leaf of it.
# Both runs set KERN_TEST_REQUIRE_ENFORCED_CAPS=1: the caps must be cgroup-enforced, so the tests
# that would skip or accept the rlimit fallback rootless assert enforcement instead.
# Each guest gets the built repo (./kern, js/*.node, node_modules, __tests__), the test rootfs
# and this host's node (>= 20.17; the guest's own is 18) copied in by scripts/cgv2-guest.sh prep.
#
# Writes OUTDIR/cgv2-root.json and OUTDIR/cgv2-rootless.json (Jest's JSON reports; missing when a
# guest did not get that far), OUTDIR/cgv2-*.log (the guest's stderr: Jest's output, the rig's
# `exit= boot= wall=` line) and OUTDIR/cgv2-*.rc. Exits non-zero if either run failed.
#
# Environment:
#   KERN_CGV2_SUITES="a b"   the suites to run (default: those below); say which in the CI log
#   KERN_TEST_ROOTFS=dir     the test rootfs to copy in (default: scripts/build-test-rootfs.sh's)
#   CGV2_RIG_DIR=dir         the rig's cache (default /var/tmp/kern-cgv2-rig, see scripts/cgv2-vm.sh)
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="${1:?usage: test-cgv2.sh OUTDIR | --list}"

# The suites that run in the guest: what a cgroup, mount or systemd difference would break
# (caps and their enforcement, isolation, a box's and a session's lifetime, the core API, and a
# steered process: its kern may start through systemd-run, and its signals cross kern's socket;
# and the isolation report, which must read every cap back as cgroup-enforced v2 there; and the
# zygote, whose forks a kern moves into their cgroups from another scope's; and pause(), whose
# freezer is the box's own leaf there; and a ready kern killed as a call takes it, which there
# may be systemd-run's process in its scope).
default_suites="__tests__/sandbox/core.test.js __tests__/live/pause.test.js __tests__/live/kernel-fork.test.js __tests__/live/checkpoint.test.js __tests__/sandbox/limits.test.js __tests__/isolation/isolation.test.js __tests__/sandbox/lifecycle.test.js __tests__/processes/process.test.js __tests__/isolation/isolation-report.test.js __tests__/isolation/zygote.test.js __tests__/sandbox/spare-killed.test.js"
if [[ "$out" == --list ]]; then
  tr ' ' '\n' <<<"$default_suites"
  exit 0
fi
mkdir -p "$out" && out="$(cd "$out" && pwd)" || exit 1
read -ra suites <<<"${KERN_CGV2_SUITES:-$default_suites}"
rootfs="${KERN_TEST_ROOTFS:-/var/cache/kern-sandbox-test/rootfs-bookworm}"
# Per guest run: boot (~5-15 s), copy (~20 s), the suites (several times slower than here).
timeout_s=1500

die() {
  echo "test-cgv2: $*" >&2
  exit 1
}
[[ "$(id -u)" == 0 ]] || die "must run as root (the rig boots a user-mode Linux guest)"
[[ -x "$repo/kern" ]] || die "$repo/kern is missing: build first (npm run build:debug)"
[[ -f "$rootfs/.kern-test-rootfs" ]] || die "no test rootfs at $rootfs: run scripts/build-test-rootfs.sh"
node="$(command -v node)" && node="$(readlink -f "$node")" || die "node not found in PATH"
# The guest runs this binary with bookworm's libraries: one that needs a libnode.so beside it
# (a distribution's shared build) would not start there.
if ldd "$node" 2>/dev/null | grep -q libnode; then
  die "$node is linked to a shared libnode; the guest needs a self-contained node binary (NodeSource, nodejs.org, nvm)"
fi

prep="$out/cgv2-prep.sh"
rc_all=0
run() { # run NAME OWNER [--user u]
  local name=$1 owner=$2 t0 rc
  shift 2
  rm -f "$out/cgv2-$name.json" "$out/cgv2-$name.rc"
  printf 'exec bash /share/scripts/cgv2-guest.sh prep %q %q %q\n' "$rootfs" "$node" "$owner" >"$prep"
  echo "test-cgv2: $name: booting the guest, running ${suites[*]}"
  t0=$(date +%s)
  bash "$repo/scripts/cgv2-vm.sh" --timeout "$timeout_s" --share "$repo" --prep "$prep" "$@" -- \
    bash /opt/kern-sandbox/scripts/cgv2-guest.sh run "${suites[@]}" \
    >"$out/cgv2-$name.json.tmp" 2>"$out/cgv2-$name.log"
  rc=$?
  # The rig hands the guest's output over when the guest has ended, so nothing is lost here.
  cat "$out/cgv2-$name.log" >&2
  echo "$rc" >"$out/cgv2-$name.rc"
  # An empty stdout (the guest never got to Jest) leaves no report: the summary counts that.
  [[ -s "$out/cgv2-$name.json.tmp" ]] && mv "$out/cgv2-$name.json.tmp" "$out/cgv2-$name.json"
  rm -f "$out/cgv2-$name.json.tmp"
  echo "test-cgv2: $name: exit $rc after $(($(date +%s) - t0)) s"
  ((rc == 0)) || rc_all=1
}

t_start=$(date +%s)
run root root
run rootless u --user u
echo "test-cgv2: both guest runs took $(($(date +%s) - t_start)) s"
exit "$rc_all"
