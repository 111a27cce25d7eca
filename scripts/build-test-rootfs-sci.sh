#!/usr/bin/env bash
# Builds the "sci" test rootfs the rich-results tests run on: the base test rootfs
# (scripts/build-test-rootfs.sh, which must have run first) plus Debian's python3-matplotlib,
# python3-pandas, python3-numpy and python3-pip (for the `setup` tests), and two Jupyter kernels for the
# jupyter-kernel tests (python3-ipykernel, and r-cran-irkernel with R), with their dependencies only
# (--no-install-recommends). Made by
# copying the base and running apt-get in a chroot of the copy: about 3x faster than a second
# debootstrap, whose resolver also takes scipy and with it a compiler toolchain. Cached outside
# the repo; rebuilt only when missing, when this script changes or when the base was rebuilt (the
# stamp holds a hash of this file and the base's own stamp).
#
#   bash scripts/build-test-rootfs-sci.sh   # KERN_TEST_ROOTFS_SCI=dir to build elsewhere;
#                                           # KERN_TEST_ROOTFS=dir for another base
#
# The chroot's mounts (/proc and a private /dev/pts; /dev's nodes are the ones debootstrap made)
# live in a mount namespace of their own: they are unmounted by a trap, and are gone with the
# namespace even if this script is killed outright.
set -euo pipefail

base="${KERN_TEST_ROOTFS:-/var/cache/kern-sandbox-test/rootfs-bookworm}"
dest="${KERN_TEST_ROOTFS_SCI:-/var/cache/kern-sandbox-test/rootfs-bookworm-sci}"
mirror="${KERN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
packages=(python3-matplotlib python3-pandas python3-numpy python3-pip python3-ipykernel r-cran-irkernel)
# Kept out, so apt takes the other alternative of a dependency: python3-fonttools depends on
# "python3-scipy | python3-munkres", and scipy depends on pythran, which depends on g++, boost,
# OpenBLAS and the Python headers: about 1 GiB more that no test uses. munkres is one small module.
forbidden=(python3-scipy)

[[ -f "$base/.kern-test-rootfs" ]] || {
  echo "test rootfs (sci): no base test rootfs at $base (no $base/.kern-test-rootfs):" \
    "run scripts/build-test-rootfs.sh first (KERN_TEST_ROOTFS picks another base)" >&2
  exit 1
}
stamp_want="$(sha256sum "$0" | cut -d' ' -f1) base:$(cat "$base/.kern-test-rootfs")"

if [[ -f "$dest/.kern-test-rootfs" && "$(cat "$dest/.kern-test-rootfs")" == "$stamp_want" ]]; then
  echo "test rootfs (sci): cached at $dest"
  exit 0
fi

# Runs in a new mount namespace: mounts what apt and dpkg need in the chroot, installs, unmounts.
install_into() {
  kern_root="$1" # global: the EXIT trap runs after this function has returned
  shift
  local root="$kern_root"
  # shellcheck disable=SC2317  # called by the trap
  unmount_all() {
    local m
    for m in "$kern_root/dev/pts" "$kern_root/proc"; do
      mountpoint -q "$m" && { umount "$m" || umount -l "$m"; }
    done
    return 0
  }
  trap unmount_all EXIT
  [[ -c "$root/dev/null" ]] || {
    echo "no device nodes in $root/dev (was the base built as root?)" >&2
    exit 1
  }
  mount -t proc proc "$root/proc"
  mount -t devpts -o newinstance,ptmxmode=0666,mode=0620 devpts "$root/dev/pts"
  local -a env=(env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8
    DEBIAN_FRONTEND=noninteractive DEBCONF_NONINTERACTIVE_SEEN=true)
  local -a apt=(apt-get -q -o Acquire::Retries=3 -o APT::Install-Recommends=false
    -o APT::Install-Suggests=false)
  chroot "$root" "${env[@]}" "${apt[@]}" update
  # "NAME-" on apt's command line: NAME must not be installed.
  chroot "$root" "${env[@]}" "${apt[@]}" install -y --no-install-recommends "$@"
  chroot "$root" "${env[@]}" apt-get clean
  # The packages import (bytecode and matplotlib's config dir kept out of the result).
  chroot "$root" "${env[@]}" MPLCONFIGDIR=/tmp/kern-mplcheck \
    python3 -B -c 'import matplotlib, pandas, numpy, ipykernel'
  chroot "$root" "${env[@]}" Rscript -e 'library(IRkernel)'
  for k in python3 ir; do
    [[ -f "$root/usr/share/jupyter/kernels/$k/kernel.json" ]] || {
      echo "no kernelspec $k in /usr/share/jupyter/kernels" >&2
      exit 1
    }
  done
  rm -rf "$root/tmp/kern-mplcheck"
}

tmp="$dest.tmp.$$"
# Deletes a build directory, but never through a mount (cannot happen with the mount namespace,
# but this is rm -rf next to bind-mountable paths) nor under a process still chrooted in it (apt
# or dpkg finishing after a signal): waits up to a minute for those, else leaves it and says so.
remove_tree() {
  local dir="$1" i p busy
  for ((i = 0; i < 60; i++)); do
    busy=0
    for p in /proc/[0-9]*; do
      [[ "$(readlink "$p/root" 2>/dev/null)" == "$dir" ]] && { busy=1; break; }
    done
    ((busy)) || break
    sleep 1
  done
  if ((busy)) || grep -qF " $dir" /proc/self/mountinfo; then
    echo "test rootfs (sci): $dir is still in use or mounted on; not deleting it" >&2
    return 0
  fi
  rm -rf --one-file-system "$dir"
}
trap 'remove_tree "$tmp"' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# Leftovers of builds that were killed outright (their process is gone).
for old in "$dest".tmp.*; do
  [[ -d "$old" && "${old##*.}" =~ ^[0-9]+$ ]] || continue
  kill -0 "${old##*.}" 2>/dev/null || remove_tree "$old"
done
rm -rf --one-file-system "$tmp"
mkdir -p "$(dirname "$dest")"
echo "test rootfs (sci): copying $base to $tmp and installing ${packages[*]}" \
  "(about a minute on a fresh machine)"
cp -a --reflink=auto "$base" "$tmp"
rm -f "$tmp/.kern-test-rootfs"
# For the build only: the host's DNS, the mirror, and no service starts. Restored below.
rm -f "$tmp/etc/resolv.conf"
cp -L /etc/resolv.conf "$tmp/etc/resolv.conf"
echo "deb $mirror bookworm main" >"$tmp/etc/apt/sources.list"
printf '#!/bin/sh\nexit 101\n' >"$tmp/usr/sbin/policy-rc.d"
chmod 755 "$tmp/usr/sbin/policy-rc.d"

unshare --mount --propagation private -- \
  bash -euo pipefail -c "$(declare -f install_into); install_into \"\$@\"" install_into \
  "$tmp" "${packages[@]}" "${forbidden[@]/%/-}" >"$tmp/.build.log" 2>&1 || {
  tail -30 "$tmp/.build.log" >&2
  echo "test rootfs (sci): apt-get in the chroot failed (the log's last lines are above)" >&2
  exit 1
}

rm -f "$tmp/usr/sbin/policy-rc.d" "$tmp/etc/resolv.conf" "$tmp/etc/apt/sources.list"
cp -a "$base/etc/resolv.conf" "$tmp/etc/resolv.conf"
cp -a "$base/etc/apt/sources.list" "$tmp/etc/apt/sources.list"
# Trim as the base does: the apt caches and lists, docs and man pages.
rm -rf "$tmp/var/cache/apt/archives/"*.deb "$tmp/var/cache/apt/"*.bin "$tmp/var/lib/apt/lists/"* \
  "$tmp/usr/share/man" "$tmp/usr/share/doc" "$tmp/.build.log"

echo "$stamp_want" >"$tmp/.kern-test-rootfs"
rm -rf --one-file-system "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "test rootfs (sci): built at $dest"
