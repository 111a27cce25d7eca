#!/usr/bin/env bash
# The guest's side of scripts/test-cgv2.sh, inside the cgroup-v2 + systemd guest of
# scripts/cgv2-vm.sh (the repo is shared at /share):
#
#   cgv2-guest.sh prep ROOTFS NODE [OWNER]   as root (the rig's --prep): copies the host's test
#       rootfs (host path ROOTFS) to where the suites look for it, the host's node binary (host
#       path NODE: the guest's own is bookworm's 18, kern-sandbox needs >= 20.17) to
#       /usr/local/bin, and the repo (less target/ and .git) to /opt/kern-sandbox, owned by OWNER.
#   cgv2-guest.sh run SUITE...               as root or the rootless user: checks this really is
#       cgroup v2 with systemd as PID 1 (and, rootless, a systemd user manager to delegate a
#       scope), then runs the Jest SUITEs with KERN_TEST_REQUIRE_ENFORCED_CAPS=1. Jest's own
#       output goes to stderr; the JSON report is the only thing on stdout.
set -euo pipefail

dest=/opt/kern-sandbox
die() {
  echo "cgv2-guest: $*" >&2
  exit 1
}

case "${1:-}" in
prep)
  [[ $# -ge 3 ]] || die "usage: cgv2-guest.sh prep ROOTFS NODE [OWNER]"
  rootfs=$2 node=$3 owner=${4:-root}
  SECONDS=0
  host=/mnt/kern-host
  mkdir -p "$host" /var/cache/kern-sandbox-test/rootfs-bookworm
  mount -t hostfs -o / none "$host" || die "cannot mount the host's / (hostfs)"
  # The same path and root ownership as on the host, so the suites' defaults hold.
  cp -a "$host$rootfs/." /var/cache/kern-sandbox-test/rootfs-bookworm/ || die "copying the test rootfs $rootfs failed"
  cp "$host$node" /usr/local/bin/node || die "copying node ($node) failed"
  umount "$host"
  /usr/local/bin/node --version >/dev/null || die "the host's node does not run in the guest"
  mkdir -p "$dest"
  # Not what the host's other runs write meanwhile (the fuzz run's corpora, the Jest reports):
  # a file removed under tar fails the copy.
  tar -C /share --exclude=./target --exclude=./.git --exclude=./fuzz/corpus-run --exclude=./fuzz/artifacts \
    --exclude=./.cgv2-results --exclude='./.jest-results*' -cf - . | tar -C "$dest" -xf -
  chown -R "$owner:" "$dest"
  echo "cgv2-guest: prep (test rootfs, node, repo copied in) took ${SECONDS} s" >&2
  ;;
run)
  shift
  [[ $# -gt 0 ]] || die "usage: cgv2-guest.sh run SUITE..."
  fs=$(stat -f -c %T /sys/fs/cgroup)
  [[ "$fs" == cgroup2fs ]] || die "/sys/fs/cgroup is $fs, not cgroup2: not the guest this run is for"
  pid1=$(cat /proc/1/comm)
  [[ "$pid1" == systemd ]] || die "PID 1 is $pid1, not systemd"
  manager=none
  if [[ "$(id -u)" != 0 ]]; then
    # What the library looks for to start kern in a delegated scope (engine::addon::launch).
    [[ -S "${XDG_RUNTIME_DIR:-/nonexistent}/systemd/private" ]] ||
      die "no systemd user manager for $(id -un) (XDG_RUNTIME_DIR=${XDG_RUNTIME_DIR:-unset})"
    manager="user@$(id -u).service, delegates: $(cat "/sys/fs/cgroup/user.slice/user-$(id -u).slice/user@$(id -u).service/cgroup.subtree_control")"
  fi
  echo "cgv2-guest: Linux $(uname -r), cgroup2 (root offers: $(cat /sys/fs/cgroup/cgroup.subtree_control)), PID 1 systemd $(systemctl --version | sed -n '1s/^systemd \([0-9]*\).*/\1/p'), node $(node --version), as $(id -un) (uid $(id -u)), user manager: $manager" >&2
  cd "$dest"
  SECONDS=0
  report=$(mktemp /tmp/kern-cgv2-jest.XXXXXX.json)
  rc=0
  CI=true KERN_TEST_REQUIRE_ENFORCED_CAPS=1 node node_modules/jest/bin/jest.js --ci --json \
    "--outputFile=$report" "$@" >&2 || rc=$?
  echo "cgv2-guest: jest took ${SECONDS} s" >&2
  cat "$report"
  exit "$rc"
  ;;
*)
  die "usage: cgv2-guest.sh prep ROOTFS NODE [OWNER] | run SUITE..."
  ;;
esac
