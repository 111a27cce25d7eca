//! What a box's PID 1 mounts and sets of its own, the same for every kind of box: the fresh
//! box's PID 1 (`boxside::mounts`, `boxside::init`) and a zygote call's P (`zygote::pid1_plan`)
//! run these very steps, so the `/proc` masking, the scratch mounts, the private devpts, the
//! nested-user-namespace limit, the hostname and loopback are written here only.
//!
//! Paths are given whole: a fresh box builds its tree under a stage before it pivots
//! (`/tmp/proc`), a zygote's call after (`/proc`).

use super::{bytes, int, s, saving, sys, write, Arg, Op};

/// Docker's masked paths: hidden behind /dev/null (files) or an empty read-only tmpfs (dirs).
pub const PROC_MASKED: &[&str] = &[
    "acpi",
    "asound",
    "interrupts",
    "kcore",
    "keys",
    "latency_stats",
    "sched_debug",
    "scsi",
    "timer_list",
    "timer_stats",
];
/// Docker's read-only paths under /proc.
pub const PROC_READONLY: &[&str] = &["bus", "fs", "irq", "sys", "sysrq-trigger"];

/// A devpts of its own: `newinstance`, so no other instance's terminals are in it.
const DEVPTS_OPTIONS: &str = "newinstance,ptmxmode=0666,mode=0620";
/// `/dev/shm`'s size (a box's POSIX shared memory and semaphores).
pub const SHM_BYTES: u64 = 64 << 20;

/// `MOUNT_ATTR_*` (linux/mount.h), as `mount_setattr` takes them.
pub const ATTR_RDONLY: u64 = 0x1;
pub const ATTR_NOSUID: u64 = 0x2;
pub const ATTR_NODEV: u64 = 0x4;
pub const ATTR_NOEXEC: u64 = 0x8;

/// `mount(src, target, fstype, flags, data)`.
pub fn mount(what: String, src: Arg, target: &str, fstype: Arg, flags: u64, data: Arg) -> Op {
    sys(
        what,
        libc::SYS_mount,
        vec![src, s(target), fstype, int(flags as i64), data],
    )
}

/// `mount_setattr(AT_FDCWD, target, AT_RECURSIVE, {attr_set: set}, 32)`: adds attributes to
/// the mount and every one below it, keeping every flag a copied (locked) mount must keep, where
/// a remount would have to restate them.
pub fn setattr(what: String, target: &str, set: u64) -> Op {
    let mut attr = [0u8; 32];
    attr[..8].copy_from_slice(&set.to_ne_bytes());
    sys(
        what,
        libc::SYS_mount_setattr,
        vec![
            int(libc::AT_FDCWD),
            s(target),
            int(libc::AT_RECURSIVE),
            bytes(&attr),
            int(32),
        ],
    )
}

/// A recursive bind of `source` onto `target`, then `attrs` on it.
pub fn bind(what: &str, source: &str, target: &str, attrs: u64) -> [Op; 2] {
    [
        mount(
            format!("{what}: bind {source} on {target}"),
            s(source),
            target,
            Arg::Null,
            libc::MS_BIND | libc::MS_REC,
            Arg::Null,
        ),
        setattr(format!("{what}: set flags on {target}"), target, attrs),
    ]
}

/// A fresh tmpfs of `size` bytes and `mode` at `target`.
pub fn tmpfs(what: String, target: &str, size: u64, mode: u32, flags: u64) -> Op {
    mount(
        what,
        s("tmpfs"),
        target,
        s("tmpfs"),
        flags,
        s(&format!("size={size},mode={mode:o}")),
    )
}

/// Mounts the box's own `/proc` (its PID namespace's) at `dir`; `hide_others`: each process
/// sees only those it may trace (a resident box's calls share one PID namespace).
pub fn proc(dir: &str, hide_others: bool) -> Op {
    let flags = libc::MS_NOSUID | libc::MS_NODEV | libc::MS_NOEXEC;
    // `invisible` is 5.8's spelling; `mount_setattr`, which every box needs, is 5.12's.
    let data = if hide_others {
        s("hidepid=invisible")
    } else {
        Arg::Null
    };
    mount(
        // "mount /proc" and "sethostname" below: `container::explain` reads a failure by them.
        format!(
            "mount /proc at {dir} (is the host's /proc partly covered, as in some containers?)"
        ),
        s("proc"),
        dir,
        s("proc"),
        flags,
        data,
    )
}

/// Docker's masks over the `/proc` at `dir`: `null` (the box's `/dev/null`) over masked files,
/// an empty read-only tmpfs over masked directories, the read-only paths bound read-only.
/// `kind(name)`: `Some(true)` for a directory, `Some(false)` for anything else, `None` when
/// this kernel has no such name.
pub fn proc_masks(dir: &str, null: &str, kind: impl Fn(&str) -> Option<bool>) -> Vec<Op> {
    let mut p = Vec::new();
    for name in PROC_MASKED {
        let target = format!("{dir}/{name}");
        match kind(name) {
            Some(true) => p.push(tmpfs(
                format!("mask {target}"),
                &target,
                4096,
                0o555,
                libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV,
            )),
            Some(false) => p.extend(bind(
                &format!("mask {target}"),
                null,
                &target,
                ATTR_RDONLY | ATTR_NOSUID,
            )),
            None => {}
        }
    }
    for name in PROC_READONLY {
        let target = format!("{dir}/{name}");
        if kind(name).is_some() {
            p.extend(bind(
                "a read-only /proc path",
                &target,
                &target,
                ATTR_RDONLY | ATTR_NOSUID | ATTR_NODEV | ATTR_NOEXEC,
            ));
        }
    }
    p
}

/// What `kind` means for `proc_masks`, asked of this kernel's `/proc` at `dir`.
pub fn proc_kind_at(dir: &str, name: &str) -> Option<bool> {
    std::fs::symlink_metadata(format!("{dir}/{name}"))
        .ok()
        .map(|m| m.is_dir())
}

/// A scratch tmpfs (`tmpfs` option) at `target`, fresh for the box.
pub fn scratch(target: &str, size: u64) -> Op {
    tmpfs(
        format!("a fresh tmpfs at {target}"),
        target,
        size,
        0o1777,
        libc::MS_NOSUID | libc::MS_NODEV,
    )
}

/// The box's `/dev/shm` at `target`.
pub fn shm(target: &str) -> Op {
    tmpfs(
        format!("a fresh /dev/shm at {target}"),
        target,
        SHM_BYTES,
        0o1777,
        libc::MS_NOSUID | libc::MS_NODEV,
    )
}

/// A devpts instance of the box's own at `target`.
pub fn devpts(target: &str) -> Op {
    mount(
        format!("a devpts of the box's own at {target}"),
        s("devpts"),
        target,
        s("devpts"),
        libc::MS_NOSUID | libc::MS_NOEXEC,
        s(DEVPTS_OPTIONS),
    )
}

/// A call into a resident box, in its init: a mount namespace of the call's own with a devpts
/// of its own over the box's `/dev/pts`. The box's devpts is shared by every call, so a process
/// an earlier call left running could open a later call's terminal by its path (`kern attach`)
/// and read what is typed into it; this call's terminals are in an instance no other call's
/// process can name (reaching it through `/proc/<pid>/root` takes ptrace rights, which each
/// workload's Landlock domain denies). The rest of the tree is the box's.
pub fn private_devpts() -> Vec<Op> {
    vec![
        sys(
            "a mount namespace for the call",
            libc::SYS_unshare,
            vec![int(libc::CLONE_NEWNS)],
        ),
        devpts("/dev/pts"),
    ]
}

/// How many user namespaces may be made below this one (`0`: none). The limit is per user
/// namespace and charged all the way up. Written through a `/proc` of the box's user namespace
/// that is not read-only yet; a container's read-only `/proc/sys` refuses it (EROFS).
pub fn nested_userns_limit(limit: u32) -> Op {
    write(
        "limit nested user namespaces (write /proc/sys/user/max_user_namespaces)",
        "/proc/sys/user/max_user_namespaces",
        &limit.to_string(),
    )
}

/// The box's hostname.
pub fn hostname(name: &str) -> Op {
    sys(
        "sethostname",
        libc::SYS_sethostname,
        vec![s(name), int(name.len() as i64)],
    )
}

/// Brings up `lo` in the box's network namespace (a fresh one has it down), with the classic
/// `SIOCSIFFLAGS` ioctl rather than a netlink round trip.
pub fn loopback() -> Vec<Op> {
    let mut ifreq = [0u8; 40];
    ifreq[..2].copy_from_slice(b"lo");
    let up = (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as u16;
    ifreq[16..18].copy_from_slice(&up.to_ne_bytes());
    vec![
        saving(
            sys(
                "a socket to bring loopback up",
                libc::SYS_socket,
                vec![
                    int(libc::AF_INET),
                    int(libc::SOCK_DGRAM | libc::SOCK_CLOEXEC),
                    int(0),
                ],
            ),
            "lo",
        ),
        sys(
            "bring loopback up",
            libc::SYS_ioctl,
            vec![
                Arg::Var("lo".into()),
                int(libc::SIOCSIFFLAGS as i64),
                bytes(&ifreq),
            ],
        ),
        sys(
            "close the socket",
            libc::SYS_close,
            vec![Arg::Var("lo".into())],
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The targets of a plan's mounts, in order.
    fn targets(ops: &[Op]) -> Vec<String> {
        ops.iter()
            .filter_map(|op| match op {
                Op::Sys { nr, args, .. } if *nr == libc::SYS_mount => match &args[1] {
                    Arg::Str(t) => Some(t.clone()),
                    _ => None,
                },
                _ => None,
            })
            .collect()
    }

    #[test]
    fn every_masked_and_read_only_proc_path_this_kernel_has_is_covered() {
        let ops = proc_masks("/stage/proc", "/stage/dev/null", |n| {
            proc_kind_at("/proc", n)
        });
        let covered = targets(&ops);
        for name in PROC_MASKED.iter().chain(PROC_READONLY) {
            let want = format!("/stage/proc/{name}");
            assert_eq!(
                covered.contains(&want),
                proc_kind_at("/proc", name).is_some(),
                "{want}"
            );
        }
        // Every bind is made read-only, the whole of it (AT_RECURSIVE), right after.
        for pair in ops.windows(2) {
            if let [Op::Sys { nr, args, .. }, next] = pair {
                if *nr == libc::SYS_mount && args[3] == int((libc::MS_BIND | libc::MS_REC) as i64) {
                    let bound = &args[1];
                    let Op::Sys { nr, args, .. } = next else {
                        panic!("a bind without its flags: {next:?}")
                    };
                    assert_eq!(*nr, libc::SYS_mount_setattr);
                    assert_eq!(&args[1], bound);
                    assert_eq!(args[2], int(libc::AT_RECURSIVE));
                    let Arg::Bytes(attr) = &args[3] else {
                        panic!("no mount_attr")
                    };
                    assert_eq!(
                        u64::from_ne_bytes(attr[..8].try_into().expect("8")) & ATTR_RDONLY,
                        ATTR_RDONLY
                    );
                }
            }
        }
    }

    #[test]
    fn a_masked_directory_gets_an_empty_read_only_tmpfs_and_a_file_the_null_device() {
        let kind = |n: &str| match n {
            "acpi" => Some(true),
            "kcore" => Some(false),
            _ => None,
        };
        let ops = proc_masks("/p", "/n", kind);
        assert_eq!(targets(&ops), ["/p/acpi", "/p/kcore"]);
        let Op::Sys { args, .. } = &ops[0] else {
            panic!()
        };
        assert_eq!(args[0], s("tmpfs"));
        assert_eq!(
            args[3],
            int((libc::MS_RDONLY | libc::MS_NOSUID | libc::MS_NODEV) as i64)
        );
        let Op::Sys { args, .. } = &ops[1] else {
            panic!()
        };
        assert_eq!(args[0], s("/n"));
    }

    #[test]
    fn a_resident_boxs_proc_hides_other_processes() {
        let Op::Sys { args, .. } = proc("/p", true) else {
            panic!()
        };
        assert_eq!(args[4], s("hidepid=invisible"));
        let Op::Sys { args, .. } = proc("/p", false) else {
            panic!()
        };
        assert_eq!(args[4], Arg::Null);
    }

    #[test]
    fn failures_name_the_steps_the_container_explainer_reads() {
        // `container::explain` tells a container's restriction by these words in the failure.
        assert!(proc("/tmp/proc", false).what().starts_with("mount /proc"));
        assert!(nested_userns_limit(0).what().contains("/proc/sys"));
        assert_eq!(hostname("h").what(), "sethostname");
    }
}
