#!/usr/bin/env bash
# The cgroup-v2 benchmark (bench/cgv2.js) inside the cgroup-v2 guest, as root and as the guest's
# unprivileged user `u`, then its section of BENCHMARKS.md. Run as root on the host, after
# `npm run build:debug` (or `npm run build`) and with the test rootfs built.
#
#   bash bench/cgv2.sh                 # BENCH_N=50 rounds; BENCH_WARMUP=5
#   CGV2_VM=/path/to/cgv2-vm.sh bash bench/cgv2.sh
#
# The guest gets a copy of: this host's node (the guest's own is 18), its bwrap (not in the guest
# image), the built package, and the test rootfs (the rootfs must be on the guest's ext4: hostfs
# has no idmapped mounts).
set -euo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
VM=${CGV2_VM:-$REPO/scripts/cgv2-vm.sh}
ROOTFS=${KERN_TEST_ROOTFS:-/var/cache/kern-sandbox-test/rootfs-bookworm}
die() { echo "bench-cgv2: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || die "run as root (the guest rig needs it)"
[ -x "$VM" ] || [ -f "$VM" ] || die "the cgroup-v2 rig is not at $VM; set CGV2_VM"
[ -x "$REPO/kern" ] && ls "$REPO"/js/*.node >/dev/null 2>&1 || die "build first: npm run build:debug"
[ -x "$ROOTFS/usr/bin/python3" ] || die "no test rootfs at $ROOTFS: bash scripts/build-test-rootfs.sh"
NODE=$(command -v node) || die "node not found"
BWRAP=$(command -v bwrap) || die "bwrap not found: apt-get install bubblewrap"

STAGE=$(mktemp -d /var/tmp/kern-cgv2-bench.XXXXXX)
trap 'rm -rf "$STAGE"' EXIT
mkdir -p "$STAGE/bin" "$STAGE/repo/js"
cp "$NODE" "$BWRAP" "$STAGE/bin/"
cp -a "$REPO/kern" "$REPO/package.json" "$REPO/bench" "$STAGE/repo/"
cp -a "$REPO"/js/*.js "$REPO"/js/*.node "$STAGE/repo/js/"
cp -al "$ROOTFS" "$STAGE/rootfs" 2>/dev/null || cp -a "$ROOTFS" "$STAGE/rootfs"
cat >"$STAGE/run.sh" <<'EOF'
set -a; . /share/env; set +a
export PATH=/share/bin:$PATH KERN_TEST_ROOTFS=/share/rootfs
cd /share/repo
exec node bench/cgv2.js measure
EOF
{ echo "BENCH_N=${BENCH_N:-50}"; echo "BENCH_WARMUP=${BENCH_WARMUP:-5}"; } >"$STAGE/env"

bash "$VM" --copy "$STAGE" --timeout 1800 -- bash /share/run.sh >"$STAGE/root.json"
bash "$VM" --copy "$STAGE" --user u --timeout 1800 -- bash /share/run.sh >"$STAGE/user.json"
node "$REPO/bench/cgv2.js" report "$STAGE/root.json" "$STAGE/user.json"
