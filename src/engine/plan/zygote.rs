//! A zygote's fork's own steps, before the workload's posture (`workload`): the three plans of
//! one call, for its three processes (see `zygote`): `call` (the zygote's fork: a user
//! namespace of its own, then the rest), `pid1` (PID 1 of the new PID namespace: a fresh
//! `/proc`, masked as a fresh box's, fresh scratch mounts, hostname, loopback) and `workload`
//! (the process that runs the cell: the same plan a fresh box's workload runs, `workload`).
//! kern builds them from the Sandbox's settings; the zygote's python runs them in order with
//! `ctypes` and stops at the first that fails. The masked `/proc` paths are `mounts`', shared.

use super::{bytes, int, s, saving, sys, write, Arg, Op};
use crate::engine::shared::handoff::Fallback;
use serde::Serialize;

/// What the plans are made from: the Sandbox's settings every call of it shares, known when
/// kern starts, before the call (`launch::Kern::spawn_zygote`).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Inputs {
    pub tmpfs: Vec<crate::engine::shared::spec::TmpfsSpec>,
    pub hostname: String,
}

/// The three plans of one call.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Plans {
    pub call: Vec<Op>,
    pub pid1: Vec<Op>,
    pub workload: Vec<Op>,
    /// The scratch tmpfs targets: P reports how full each was when the workload ended, as a
    /// fresh box's PID 1 does (`Pid1Msg::Exited`, in this order), so an OOM can name the one that held the bytes.
    pub tmpfs: Vec<String>,
}

fn mount(what: String, src: Arg, target: &str, fstype: Arg, flags: u64, data: Arg) -> Op {
    sys(
        what,
        libc::SYS_mount,
        vec![src, s(target), fstype, int(flags as i64), data],
    )
}

/// `MOUNT_ATTR_*` (linux/mount.h), as `mount_setattr` takes them.
const ATTR_RDONLY: u64 = 0x1;
const ATTR_NOSUID: u64 = 0x2;
const ATTR_NODEV: u64 = 0x4;
const ATTR_NOEXEC: u64 = 0x8;

/// `mount_setattr(AT_FDCWD, target, 0, {attr_set: set}, 32)`: adds attributes, keeping every
/// flag a copied (locked) mount must keep, where a remount would have to restate them.
fn setattr(what: String, target: &str, set: u64) -> Op {
    let mut attr = [0u8; 32];
    attr[..8].copy_from_slice(&set.to_ne_bytes());
    sys(
        what,
        libc::SYS_mount_setattr,
        vec![
            int(libc::AT_FDCWD),
            s(target),
            int(0),
            bytes(&attr),
            int(32),
        ],
    )
}

/// A read-only bind of `source` onto `target`, with `extra` attributes.
fn bind_ro(what: &str, source: &str, target: &str, extra: u64) -> [Op; 2] {
    [
        mount(
            format!("{what}: bind {source} on {target}"),
            s(source),
            target,
            Arg::Null,
            libc::MS_BIND,
            Arg::Null,
        ),
        setattr(
            format!("{what}: make {target} read-only"),
            target,
            ATTR_RDONLY | extra,
        ),
    ]
}

/// The plans for `spec`'s call, with the caps kern could not put in a cgroup as rlimits
/// (`fallback`, as a fresh box's). `proc_kind`: whether a `/proc` name is a directory
/// (`Some(true)`), something else, or absent on this kernel (the box's `/proc` is this kernel's).
pub fn plans(
    spec: &Inputs,
    fallback: &Fallback,
    proc_kind: impl Fn(&str) -> Option<bool>,
) -> Plans {
    Plans {
        call: call_plan(),
        pid1: pid1_plan(spec, proc_kind),
        workload: super::Workload::of(&super::Posture::of_call(fallback)).into_ops(),
        tmpfs: spec.tmpfs.iter().map(|t| t.target.clone()).collect(),
    }
}

/// The zygote's fork, already in the call's cgroup: a user namespace of its own (one id, its
/// own: a fork of the zygote may map no more without help), then every other namespace in it.
fn call_plan() -> Vec<Op> {
    let rest = libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    vec![
        sys(
            "a user namespace for the call",
            libc::SYS_unshare,
            vec![int(libc::CLONE_NEWUSER)],
        ),
        write("deny setgroups", "/proc/self/setgroups", "deny"),
        write("map the call's uid", "/proc/self/uid_map", "0 0 1\n"),
        write("map the call's gid", "/proc/self/gid_map", "0 0 1\n"),
        sys(
            "the call's mount, PID, network, IPC, UTS and cgroup namespaces",
            libc::SYS_unshare,
            vec![int(rest)],
        ),
    ]
}

fn pid1_plan(spec: &Inputs, proc_kind: impl Fn(&str) -> Option<bool>) -> Vec<Op> {
    let (nosuid, nodev, noexec) = (libc::MS_NOSUID, libc::MS_NODEV, libc::MS_NOEXEC);
    let mut p = vec![mount(
        "make every mount private".into(),
        Arg::Null,
        "/",
        Arg::Null,
        libc::MS_REC | libc::MS_PRIVATE,
        Arg::Null,
    )];
    p.push(mount(
        "mount the call's /proc".into(),
        s("proc"),
        "/proc",
        s("proc"),
        nosuid | nodev | noexec,
        Arg::Null,
    ));
    // No nested user namespace from the call (as `init::child` for a fresh box); before
    // /proc/sys turns read-only.
    p.push(write(
        "refuse nested user namespaces",
        "/proc/sys/user/max_user_namespaces",
        "0",
    ));
    for name in crate::engine::boxside::mounts::PROC_MASKED {
        let target = format!("/proc/{name}");
        match proc_kind(name) {
            Some(true) => p.push(mount(
                format!("mask {target}"),
                s("tmpfs"),
                &target,
                s("tmpfs"),
                libc::MS_RDONLY | nosuid | nodev,
                s("size=4096,mode=555"),
            )),
            Some(false) => p.extend(bind_ro(
                &format!("mask {target}"),
                "/dev/null",
                &target,
                ATTR_NOSUID,
            )),
            None => {}
        }
    }
    for name in crate::engine::boxside::mounts::PROC_READONLY {
        let target = format!("/proc/{name}");
        if proc_kind(name).is_some() {
            p.extend(bind_ro(
                "a read-only /proc path",
                &target,
                &target,
                ATTR_NOSUID | ATTR_NODEV | ATTR_NOEXEC,
            ));
        }
    }
    // Every scratch mount fresh: a copied tmpfs would be the zygote's, shared by every call.
    for t in &spec.tmpfs {
        p.push(mount(
            format!("a fresh tmpfs at {}", t.target),
            s("tmpfs"),
            &t.target,
            s("tmpfs"),
            nosuid | nodev,
            s(&format!("size={},mode=1777", t.size_bytes)),
        ));
    }
    p.push(mount(
        "a fresh /dev/shm".into(),
        s("tmpfs"),
        "/dev/shm",
        s("tmpfs"),
        nosuid | nodev,
        s(&format!("size={},mode=1777", 64u64 << 20)),
    ));
    p.push(mount(
        "a fresh /dev/pts".into(),
        s("devpts"),
        "/dev/pts",
        s("devpts"),
        nosuid | noexec,
        s("newinstance,ptmxmode=0666,mode=0620"),
    ));
    p.push(sys(
        "set the hostname",
        libc::SYS_sethostname,
        vec![s(&spec.hostname), int(spec.hostname.len() as i64)],
    ));
    p.push(saving(
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
    ));
    let mut ifreq = [0u8; 40];
    ifreq[..2].copy_from_slice(b"lo");
    let up = (libc::IFF_UP | libc::IFF_LOOPBACK | libc::IFF_RUNNING) as u16;
    ifreq[16..18].copy_from_slice(&up.to_ne_bytes());
    p.push(sys(
        "bring loopback up",
        libc::SYS_ioctl,
        vec![
            Arg::Var("lo".into()),
            int(libc::SIOCSIFFLAGS as i64),
            bytes(&ifreq),
        ],
    ));
    p.push(sys(
        "close the socket",
        libc::SYS_close,
        vec![Arg::Var("lo".into())],
    ));
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Inputs {
        Inputs {
            tmpfs: vec![crate::engine::shared::spec::TmpfsSpec {
                target: "/tmp".into(),
                size_bytes: 64 << 20,
            }],
            hostname: "sandbox".into(),
        }
    }

    #[test]
    fn plans_are_plain_json_and_end_in_the_filter() {
        let p = plans(&spec(), &Fallback::default(), |n| {
            std::fs::symlink_metadata(format!("/proc/{n}"))
                .ok()
                .map(|m| m.is_dir())
        });
        let json = serde_json::to_string(&p).expect("json");
        if let Ok(out) = std::env::var("KERN_ZYGOTE_PLAN_OUT") {
            std::fs::write(out, &json).expect("write");
        }
        assert!(matches!(p.workload.last(), Some(Op::Sys { nr, .. }) if *nr == libc::SYS_seccomp));
        assert!(json.contains("\"fprog\""));
    }
}
