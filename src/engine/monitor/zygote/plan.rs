//! The steps a zygote's child takes to become a call's box, as data: each one syscall (or one
//! file write), with its arguments, what it does, and which errors it may meet. kern builds them
//! from the Sandbox's settings; the zygote's python runs them in order with `ctypes` and stops at
//! the first that fails. So the steps are written in Rust, here, beside `mounts` and `init` (the
//! same posture as a fresh box takes it: the masked paths and the set-id filter are theirs,
//! shared), and python only carries them out; `__tests__/zygote.test.js` compares the postures
//! the two kinds of box end up with.
//!
//! Three plans, for the three processes of a call (see the module above): `call` (the zygote's
//! fork: a user namespace of its own, then the rest), `pid1` (PID 1 of the new PID namespace: a
//! fresh `/proc`, masked as a fresh box's, fresh scratch mounts, hostname, loopback) and
//! `workload` (the process that runs the cell: the fresh box's `init::exec_workload` posture).

use crate::engine::shared::handoff::Fallback;
use base64::Engine as _;
use serde::Serialize;

/// One step.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Op {
    /// `syscall(nr, args...)`; failure is a return below 0 whose errno is not in `tolerate`.
    /// `save`: the return value (an fd) is kept under this name for later `Arg::Var`s.
    Sys {
        what: String,
        nr: i64,
        args: Vec<Arg>,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tolerate: Vec<i32>,
        #[serde(skip_serializing_if = "Option::is_none")]
        save: Option<String>,
    },
    /// Writes `data` to `path` (open O_WRONLY, one write, close).
    Write {
        what: String,
        path: String,
        data: String,
    },
}

/// A syscall argument.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "lowercase")]
pub enum Arg {
    Int(i64),
    /// A NUL-terminated string.
    Str(String),
    /// A buffer (a struct passed by pointer), base64.
    Bytes(String),
    /// A seccomp program (packed `sock_filter`s, base64): passed as a `struct sock_fprog`.
    Fprog(String),
    /// NULL.
    Null,
    /// An fd an earlier step saved; a step whose fd was not made (its step failed with an
    /// error it tolerates) is skipped.
    Var(String),
}

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

fn sys(what: impl Into<String>, nr: libc::c_long, args: Vec<Arg>) -> Op {
    Op::Sys {
        what: what.into(),
        nr,
        args,
        tolerate: Vec::new(),
        save: None,
    }
}

fn tolerating(op: Op, errnos: &[i32]) -> Op {
    match op {
        Op::Sys {
            what,
            nr,
            args,
            save,
            ..
        } => Op::Sys {
            what,
            nr,
            args,
            tolerate: errnos.to_vec(),
            save,
        },
        w => w,
    }
}

fn saving(op: Op, name: &str) -> Op {
    match op {
        Op::Sys {
            what,
            nr,
            args,
            tolerate,
            ..
        } => Op::Sys {
            what,
            nr,
            args,
            tolerate,
            save: Some(name.into()),
        },
        w => w,
    }
}

fn int(v: impl Into<i64>) -> Arg {
    Arg::Int(v.into())
}

fn s(v: &str) -> Arg {
    Arg::Str(v.into())
}

fn bytes(b: &[u8]) -> Arg {
    Arg::Bytes(base64::engine::general_purpose::STANDARD.encode(b))
}

fn write(what: &str, path: &str, data: &str) -> Op {
    Op::Write {
        what: what.into(),
        path: path.into(),
        data: data.into(),
    }
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
        workload: workload_plan(fallback),
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

fn workload_plan(fallback: &Fallback) -> Vec<Op> {
    let mut p = vec![
        sys("setsid", libc::SYS_setsid, vec![]),
        tolerating(
            sys(
                "join a new session keyring",
                libc::SYS_keyctl,
                vec![int(1), Arg::Null],
            ),
            &[libc::ENOSYS],
        ),
    ];
    let mut rlimit = |what: &str, res: u32, v: u64| {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&v.to_ne_bytes());
        b[8..].copy_from_slice(&v.to_ne_bytes());
        p.push(sys(
            what,
            libc::SYS_prlimit64,
            vec![int(0), int(res), bytes(&b), Arg::Null],
        ));
    };
    rlimit("no core dumps", libc::RLIMIT_CORE, 0);
    rlimit(
        "the box's POSIX message queue budget",
        libc::RLIMIT_MSGQUEUE,
        crate::engine::shared::mq::box_budget(),
    );
    if let Some(b) = fallback.data_bytes {
        rlimit("the memory cap as RLIMIT_DATA", libc::RLIMIT_DATA, b);
    }
    if let Some(n) = fallback.nproc {
        rlimit("the process cap as RLIMIT_NPROC", libc::RLIMIT_NPROC, n);
    }
    for cap in 0..64 {
        p.push(tolerating(
            sys(
                format!("drop capability {cap} from the bounding set"),
                libc::SYS_prctl,
                vec![int(libc::PR_CAPBSET_DROP), int(cap)],
            ),
            &[libc::EINVAL],
        ));
    }
    p.push(sys(
        "clear the ambient capabilities",
        libc::SYS_prctl,
        vec![
            int(libc::PR_CAP_AMBIENT),
            int(libc::PR_CAP_AMBIENT_CLEAR_ALL),
            int(0),
            int(0),
            int(0),
        ],
    ));
    p.push(sys(
        "no_new_privs",
        libc::SYS_prctl,
        vec![
            int(libc::PR_SET_NO_NEW_PRIVS),
            int(1),
            int(0),
            int(0),
            int(0),
        ],
    ));
    let mut cap_header = [0u8; 8];
    cap_header[..4].copy_from_slice(&0x2008_0522u32.to_ne_bytes());
    let mut both = cap_header.to_vec();
    both.extend([0u8; 24]);
    p.push(sys(
        "empty every capability set",
        libc::SYS_capset,
        vec![bytes(&cap_header), bytes(&both[8..])],
    ));
    // A Landlock domain of its own, as every fresh box's workload (`landlock::enter_own_domain`:
    // handled MakeBlock, no rule), where the kernel has Landlock.
    const LANDLOCK_ACCESS_FS_MAKE_BLOCK: u64 = 1 << 11;
    p.push(tolerating(
        saving(
            sys(
                "a Landlock ruleset",
                libc::SYS_landlock_create_ruleset,
                vec![
                    bytes(&LANDLOCK_ACCESS_FS_MAKE_BLOCK.to_ne_bytes()),
                    int(8),
                    int(0),
                ],
            ),
            "landlock",
        ),
        &[libc::ENOSYS, libc::EOPNOTSUPP],
    ));
    // Skipped where the kernel made no ruleset (`Arg::Var`), as the fresh box's best effort.
    p.push(sys(
        "enter the Landlock domain",
        libc::SYS_landlock_restrict_self,
        vec![Arg::Var("landlock".into()), int(0)],
    ));
    p.push(sys(
        "close the ruleset",
        libc::SYS_close,
        vec![Arg::Var("landlock".into())],
    ));
    let setid = crate::engine::boxside::setid::program().0;
    let packed: Vec<u8> = crate::engine::boxside::seccomp::unpack(&setid)
        .iter()
        .flat_map(|f| {
            let mut b = Vec::with_capacity(8);
            b.extend(f.code.to_ne_bytes());
            b.push(f.jt);
            b.push(f.jf);
            b.extend(f.k.to_ne_bytes());
            b
        })
        .collect();
    p.push(sys(
        "enter the set-id seccomp filter",
        libc::SYS_seccomp,
        vec![
            int(libc::SECCOMP_SET_MODE_FILTER),
            int(0),
            Arg::Fprog(base64::engine::general_purpose::STANDARD.encode(packed)),
        ],
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
