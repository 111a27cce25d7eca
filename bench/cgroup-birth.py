#!/usr/bin/env python3
"""What a process born in its cgroup saves: fork + move into a cgroup v2 directory (what kern does
without clone3, and what its spare kerns do off the call's path) against clone3 with
CLONE_INTO_CGROUP into the same directory. Interleaved, 40 rounds, 50 ms apart, so no move finds
an RCU grace period already under way. As root:

    python3 bench/cgroup-birth.py /sys/fs/cgroup            # cgroup v2 host
    python3 bench/cgroup-birth.py /sys/fs/cgroup/unified    # cgroup v1 hybrid (its v2 mount)

A measurement only (Python, so both sides include a fork of the interpreter); the figures are in
BENCHMARKS.md. clone3 is called through ctypes: nothing in Python wraps it.
"""
import ctypes
import os
import statistics
import sys
import time

CLONE_INTO_CGROUP = 0x200000000
SYS_CLONE3 = 435  # x86_64 and aarch64


class CloneArgs(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in (
        "flags", "pidfd", "child_tid", "parent_tid", "exit_signal", "stack", "stack_size",
        "tls", "set_tid", "set_tid_size", "cgroup")]


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: cgroup-birth.py CGROUP2_DIR (e.g. /sys/fs/cgroup or /sys/fs/cgroup/unified)")
    libc = ctypes.CDLL(None, use_errno=True)
    target = os.path.join(sys.argv[1], f"kern-birth-{os.getpid()}")
    os.mkdir(target)
    fd = os.open(target, os.O_RDONLY | os.O_DIRECTORY)

    def moved():
        r, w = os.pipe()
        t0 = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            os.read(r, 1)
            os._exit(0)
        with open(os.path.join(target, "cgroup.procs"), "w") as f:
            f.write(str(pid))
        t = time.perf_counter() - t0
        os.write(w, b"g")
        os.waitpid(pid, 0)
        os.close(r)
        os.close(w)
        return t

    def born():
        args = CloneArgs(flags=CLONE_INTO_CGROUP, exit_signal=17, cgroup=fd)  # SIGCHLD
        t0 = time.perf_counter()
        pid = libc.syscall(SYS_CLONE3, ctypes.byref(args), ctypes.sizeof(args))
        if pid == 0:
            os._exit(0)
        t = time.perf_counter() - t0
        if pid < 0:
            raise OSError(ctypes.get_errno(), "clone3(CLONE_INTO_CGROUP)")
        os.waitpid(pid, 0)
        return t

    times = {"fork + move into the cgroup": [], "clone3 into the cgroup": []}
    try:
        for _ in range(40):
            for name, fn in zip(times, (moved, born)):
                time.sleep(0.05)
                times[name].append(fn() * 1000)
    finally:
        os.close(fd)
        os.rmdir(target)
    for name, t in times.items():
        t.sort()
        print(f"{name}: median {statistics.median(t):.2f} ms (min {t[0]:.2f}, max {t[-1]:.2f})")


main()
