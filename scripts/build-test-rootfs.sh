#!/usr/bin/env bash
# Builds the test rootfs the Jest suite and the benchmarks run on: Debian bookworm minbase with
# python3 and nodejs, made by debootstrap from Debian's own packages (no container registry is
# reachable on our CI machines). Cached outside the repo; rebuilt only when missing or when this
# script's package list changes (the stamp holds a hash of this file).
set -euo pipefail

dest="${KERN_TEST_ROOTFS:-/var/cache/kern-sandbox-test/rootfs-bookworm}"
mirror="${KERN_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
packages="python3,nodejs,ca-certificates,procps"
stamp_want="$(sha256sum "$0" | cut -d' ' -f1)"

if [[ -f "$dest/.kern-test-rootfs" && "$(cat "$dest/.kern-test-rootfs")" == "$stamp_want" ]]; then
  echo "test rootfs: cached at $dest"
  exit 0
fi

command -v debootstrap >/dev/null || {
  echo "test rootfs: installing debootstrap" >&2
  apt-get install -y -qq debootstrap >/dev/null
}

tmp="$dest.tmp.$$"
rm -rf "$tmp"
mkdir -p "$(dirname "$dest")"
echo "test rootfs: debootstrap bookworm into $tmp (a few minutes on a fresh machine)"
debootstrap --variant=minbase --include="$packages" bookworm "$tmp" "$mirror" >"$tmp.log" 2>&1 || {
  tail -30 "$tmp.log" >&2
  exit 1
}
# Trim what a box never needs: the apt caches and man pages.
rm -rf "$tmp/var/cache/apt/archives/"*.deb "$tmp/var/lib/apt/lists/"* "$tmp/usr/share/man" "$tmp/usr/share/doc"
# debootstrap writes no /etc/hosts; images from the store get one at unpack, and a box of a
# rootfs without one gets one at run time (tested on a copy without it, __tests__/images/rootfs.test.js).
# Written here so the suite and the benchmarks measure the common case.
printf '127.0.0.1\tlocalhost kern\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$tmp/etc/hosts"
echo "$stamp_want" >"$tmp/.kern-test-rootfs"
rm -rf "$dest" "$tmp.log" "$dest-nohosts"
mv "$tmp" "$dest"
# The same tree without /etc/hosts, hard-linked (no extra space), for the test of an image
# without one (__tests__/images/rootfs.test.js); made here, as root, so the rootless run has it too.
cp -al "$dest" "$dest-nohosts.tmp.$$"
rm "$dest-nohosts.tmp.$$/etc/hosts"
mv "$dest-nohosts.tmp.$$" "$dest-nohosts"
echo "test rootfs: built at $dest (and $dest-nohosts)"
