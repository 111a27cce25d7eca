//! The `untrusted` profile's seccomp filters, and the names of the syscalls they stop.
//!
//! Two filters, stacked, because one BPF program from `seccompiler` has one action on a match and
//! one on a miss, and the profile needs four outcomes:
//!
//! * **allow**: an allowlist after Docker's default profile (`research/security.md` §4) plus what
//!   Python, Node and bash were measured to call. A syscall on neither list gets `ENOSYS`, so libc
//!   falls back as it does on an older kernel (glibc's `clone3` → `clone`, libuv's `io_uring`
//!   probe → epoll) instead of failing on an `EPERM` it does not expect. The x32 numbers
//!   (`0x4000_0000 | nr`) are on no list, so they get `ENOSYS` too; a foreign architecture
//!   (32-bit `int 0x80`) kills the process (seccompiler's architecture check).
//! * **notify**: the escape syscalls (mount family, namespaces, ptrace, bpf, keyrings, module and
//!   kexec loading, …) and the dangerous arguments of allowed ones (`clone`/`unshare` with a
//!   namespace flag, `ioctl` `TIOCSTI`/`TIOCLINUX`, `AF_ALG`/`AF_VSOCK` sockets). The allowlist
//!   lets them through so that this filter decides: it answers `SECCOMP_RET_USER_NOTIF`, and a
//!   supervisor in the box (forked by PID 1, outside both filters) records the syscall's name for
//!   the `escape_blocked` fault and fails the call with `EPERM`. The code runs on; the result
//!   names what it tried.
//!
//! seccompiler has no user-notification action, so the notify filter is compiled with `Trap` and
//! its `SECCOMP_RET_TRAP` returns are rewritten to `SECCOMP_RET_USER_NOTIF`: one constant in the
//! return instructions, not hand-written BPF. The kernel runs every filter and keeps the most
//! restrictive answer (`ERRNO` beats `USER_NOTIF`), which is why the allowlist must let the
//! notify list through.

#[cfg(target_arch = "x86_64")]
use seccompiler::{
    BpfProgram, SeccompAction, SeccompCmpArgLen, SeccompCmpOp, SeccompCondition, SeccompFilter,
    SeccompRule, TargetArch,
};
use serde::{Deserialize, Serialize};
#[cfg(target_arch = "x86_64")]
use std::collections::BTreeMap;
use std::sync::OnceLock;

/// Both programs of the profile, each instruction packed `code<<48 | jt<<40 | jf<<32 | k` so the
/// spec stays plain data.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Programs {
    pub allow: Vec<u64>,
    pub notify: Vec<u64>,
}

/// `(name, number)` pairs from `libc::SYS_*` constants; a fault shows the name without `SYS_`.
/// x86_64 only for now: on other architectures the profile is refused (see `untrusted`).
#[cfg(target_arch = "x86_64")]
macro_rules! table {
    ($($sys:ident),* $(,)?) => {
        &[$((stringify!($sys), libc::$sys)),*]
    };
}

#[cfg(target_arch = "x86_64")]
/// (name, number). The name is what an `escape_blocked` fault says.
type Table = &'static [(&'static str, libc::c_long)];

#[cfg(target_arch = "x86_64")]
/// Allowed as they are: Docker's unconditional list, trimmed to x86_64 and to what exists in
/// `libc` here. Anything missing gets `ENOSYS` (a newer syscall libc can fall back from).
#[rustfmt::skip]
const ALLOW: Table = table![
    SYS_accept, SYS_accept4, SYS_access, SYS_adjtimex, SYS_alarm, SYS_bind, SYS_brk, SYS_capget,
    SYS_capset, SYS_chdir, SYS_chmod, SYS_chown, SYS_clock_adjtime, SYS_clock_getres,
    SYS_clock_gettime, SYS_clock_nanosleep, SYS_close, SYS_close_range, SYS_connect,
    SYS_copy_file_range, SYS_creat, SYS_dup, SYS_dup2, SYS_dup3, SYS_epoll_create,
    SYS_epoll_create1, SYS_epoll_ctl, SYS_epoll_pwait, SYS_epoll_pwait2, SYS_epoll_wait,
    SYS_eventfd, SYS_eventfd2, SYS_execve, SYS_execveat, SYS_exit, SYS_exit_group, SYS_faccessat,
    SYS_faccessat2, SYS_fadvise64, SYS_fallocate, SYS_fanotify_mark, SYS_fchdir, SYS_fchmod,
    SYS_fchmodat, SYS_fchown, SYS_fchownat, SYS_fcntl, SYS_fdatasync, SYS_fgetxattr, SYS_flistxattr,
    SYS_flock, SYS_fork, SYS_fremovexattr, SYS_fsetxattr, SYS_fstat, SYS_fstatfs, SYS_fsync,
    SYS_ftruncate, SYS_futex, SYS_futex_waitv, SYS_futimesat, SYS_getcpu, SYS_getcwd, SYS_getdents,
    SYS_getdents64, SYS_getegid, SYS_geteuid, SYS_getgid, SYS_getgroups, SYS_getitimer,
    SYS_getpeername, SYS_getpgid, SYS_getpgrp, SYS_getpid, SYS_getppid, SYS_getpriority,
    SYS_getrandom, SYS_getresgid, SYS_getresuid, SYS_getrlimit, SYS_get_robust_list, SYS_getrusage,
    SYS_getsid, SYS_getsockname, SYS_getsockopt, SYS_get_thread_area, SYS_gettid, SYS_gettimeofday,
    SYS_getuid, SYS_getxattr, SYS_inotify_add_watch, SYS_inotify_init, SYS_inotify_init1,
    SYS_inotify_rm_watch, SYS_io_cancel, SYS_ioctl, SYS_io_destroy, SYS_io_getevents,
    SYS_ioprio_get, SYS_ioprio_set, SYS_io_setup, SYS_io_submit, SYS_kill, SYS_landlock_add_rule,
    SYS_landlock_create_ruleset, SYS_landlock_restrict_self, SYS_lchown, SYS_lgetxattr, SYS_link,
    SYS_linkat, SYS_listen, SYS_listxattr, SYS_llistxattr, SYS_lremovexattr, SYS_lseek,
    SYS_lsetxattr, SYS_lstat, SYS_madvise, SYS_membarrier, SYS_memfd_create, SYS_memfd_secret,
    SYS_mincore, SYS_mkdir, SYS_mkdirat, SYS_mknod, SYS_mknodat, SYS_mlock, SYS_mlock2,
    SYS_mlockall, SYS_mmap, SYS_mprotect, SYS_mq_getsetattr, SYS_mq_notify, SYS_mq_open,
    SYS_mq_timedreceive, SYS_mq_timedsend, SYS_mq_unlink, SYS_mremap, SYS_msgctl, SYS_msgget,
    SYS_msgrcv, SYS_msgsnd, SYS_msync, SYS_munlock, SYS_munlockall, SYS_munmap, SYS_nanosleep,
    SYS_newfstatat, SYS_open, SYS_openat, SYS_openat2, SYS_pause, SYS_pidfd_open,
    SYS_pidfd_send_signal, SYS_pipe, SYS_pipe2, SYS_pkey_alloc, SYS_pkey_free, SYS_pkey_mprotect,
    SYS_poll, SYS_ppoll, SYS_prctl, SYS_pread64, SYS_preadv, SYS_preadv2, SYS_prlimit64,
    SYS_process_mrelease, SYS_pselect6, SYS_pwrite64, SYS_pwritev, SYS_pwritev2, SYS_read,
    SYS_readahead, SYS_readlink, SYS_readlinkat, SYS_readv, SYS_recvfrom, SYS_recvmmsg, SYS_recvmsg,
    SYS_remap_file_pages, SYS_removexattr, SYS_rename, SYS_renameat, SYS_renameat2,
    SYS_restart_syscall, SYS_rmdir, SYS_rseq, SYS_rt_sigaction, SYS_rt_sigpending,
    SYS_rt_sigprocmask, SYS_rt_sigqueueinfo, SYS_rt_sigreturn, SYS_rt_sigsuspend,
    SYS_rt_sigtimedwait, SYS_rt_tgsigqueueinfo, SYS_sched_getaffinity, SYS_sched_getattr,
    SYS_sched_getparam, SYS_sched_get_priority_max, SYS_sched_get_priority_min,
    SYS_sched_getscheduler, SYS_sched_rr_get_interval, SYS_sched_setaffinity, SYS_sched_setattr,
    SYS_sched_setparam, SYS_sched_setscheduler, SYS_sched_yield, SYS_seccomp, SYS_select,
    SYS_semctl, SYS_semget, SYS_semop, SYS_semtimedop, SYS_sendfile, SYS_sendmmsg, SYS_sendmsg,
    SYS_sendto, SYS_setfsgid, SYS_setfsuid, SYS_setgid, SYS_setgroups, SYS_setitimer, SYS_setpgid,
    SYS_setpriority, SYS_setregid, SYS_setresgid, SYS_setresuid, SYS_setreuid, SYS_setrlimit,
    SYS_set_robust_list, SYS_setsid, SYS_setsockopt, SYS_set_thread_area, SYS_set_tid_address,
    SYS_setuid, SYS_setxattr, SYS_shmat, SYS_shmctl, SYS_shmdt, SYS_shmget, SYS_shutdown,
    SYS_sigaltstack, SYS_signalfd, SYS_signalfd4, SYS_socketpair, SYS_splice, SYS_stat, SYS_statfs,
    SYS_statx, SYS_symlink, SYS_symlinkat, SYS_sync, SYS_sync_file_range, SYS_syncfs, SYS_sysinfo,
    SYS_tee, SYS_tgkill, SYS_time, SYS_timer_create, SYS_timer_delete, SYS_timer_getoverrun,
    SYS_timer_gettime, SYS_timer_settime, SYS_timerfd_create, SYS_timerfd_gettime,
    SYS_timerfd_settime, SYS_times, SYS_tkill, SYS_truncate, SYS_umask, SYS_uname, SYS_unlink,
    SYS_unlinkat, SYS_utime, SYS_utimensat, SYS_utimes, SYS_vfork, SYS_vmsplice, SYS_wait4,
    SYS_waitid, SYS_write, SYS_writev, SYS_arch_prctl, SYS_modify_ldt,
    // Allowed here, checked by the notify filter (namespace flags, terminal ioctls, families).
    SYS_clone, SYS_unshare, SYS_socket,
];

#[cfg(target_arch = "x86_64")]
/// Stopped whatever the arguments, and named in the fault: every way out of the box's
/// namespaces and mounts, into another process, or into the kernel (Docker's blocked and
/// capability-gated lists). NUMA and scheduling calls Docker also gates (`mbind`,
/// `set_mempolicy`, `move_pages`) are left to the allowlist's `ENOSYS`, because benign
/// libraries probe them.
#[rustfmt::skip]
const NOTIFY: Table = table![
    SYS_mount, SYS_umount2, SYS_pivot_root, SYS_chroot, SYS_move_mount, SYS_open_tree, SYS_fsopen,
    SYS_fsconfig, SYS_fsmount, SYS_fspick, SYS_mount_setattr, SYS_setns, SYS_ptrace,
    SYS_process_vm_readv, SYS_process_vm_writev, SYS_process_madvise, SYS_kcmp, SYS_pidfd_getfd,
    SYS_bpf, SYS_perf_event_open, SYS_keyctl, SYS_add_key, SYS_request_key, SYS_userfaultfd,
    SYS_kexec_load, SYS_kexec_file_load, SYS_init_module, SYS_finit_module, SYS_delete_module,
    SYS_open_by_handle_at, SYS_name_to_handle_at, SYS_reboot, SYS_swapon, SYS_swapoff, SYS_syslog,
    SYS_acct, SYS_settimeofday, SYS_clock_settime, SYS_iopl, SYS_ioperm, SYS_quotactl,
    SYS_quotactl_fd, SYS_lookup_dcookie, SYS_fanotify_init, SYS_nfsservctl, SYS_uselib, SYS_ustat,
    SYS_sysfs, SYS__sysctl, SYS_vhangup, SYS_sethostname, SYS_setdomainname,
];

#[cfg(target_arch = "x86_64")]
/// `personality` values Docker allows: Linux, with `UNAME26`/`ADDR_NO_RANDOMIZE`… as it lists,
/// and the query `0xffffffff`.
const PERSONALITY_ALLOWED: &[u64] = &[0, 0x8, 0x2_0000, 0x2_0008, 0xffff_ffff];

#[cfg(target_arch = "x86_64")]
/// The namespace flags of `clone` and `unshare`.
const NAMESPACE_FLAGS: &[u64] = &[
    libc::CLONE_NEWNS as u64,
    libc::CLONE_NEWCGROUP as u64,
    libc::CLONE_NEWUTS as u64,
    libc::CLONE_NEWIPC as u64,
    libc::CLONE_NEWUSER as u64,
    libc::CLONE_NEWPID as u64,
    libc::CLONE_NEWNET as u64,
    0x80, // CLONE_NEWTIME
];

#[cfg(target_arch = "x86_64")]
/// Socket families stopped as Docker stops them: `AF_ALG` (kernel crypto, "Copy Fail") and
/// `AF_VSOCK`.
const SOCKET_FAMILIES: &[u64] = &[libc::AF_ALG as u64, libc::AF_VSOCK as u64];

#[cfg(target_arch = "x86_64")]
/// Terminal ioctls that push input or drive the console; compared on the low 32 bits, as the
/// kernel reads the request.
const TTY_IOCTLS: &[(u64, &str)] = &[
    (libc::TIOCSTI, "ioctl(TIOCSTI)"),
    (libc::TIOCLINUX, "ioctl(TIOCLINUX)"),
];

#[derive(Debug, thiserror::Error)]
#[error("the untrusted seccomp profile did not compile: {0}")]
pub struct CompileError(String);

#[cfg(target_arch = "x86_64")]
fn target() -> Result<TargetArch, CompileError> {
    TargetArch::try_from(std::env::consts::ARCH).map_err(|e| CompileError(format!("{e:?}")))
}

#[cfg(target_arch = "x86_64")]
fn cond(arg: u8, op: SeccompCmpOp, value: u64) -> Result<SeccompCondition, CompileError> {
    SeccompCondition::new(arg, SeccompCmpArgLen::Dword, op, value)
        .map_err(|e| CompileError(format!("{e:?}")))
}

#[cfg(target_arch = "x86_64")]
fn rule(c: SeccompCondition) -> Result<SeccompRule, CompileError> {
    SeccompRule::new(vec![c]).map_err(|e| CompileError(format!("{e:?}")))
}

#[cfg(target_arch = "x86_64")]
fn pack(p: BpfProgram, rewrite_trap: bool) -> Vec<u64> {
    const RET_K: u16 = 0x06; // BPF_RET | BPF_K
    p.into_iter()
        .map(|i| {
            let k = if rewrite_trap && i.code == RET_K && i.k == libc::SECCOMP_RET_TRAP {
                libc::SECCOMP_RET_USER_NOTIF
            } else {
                i.k
            };
            (u64::from(i.code) << 48)
                | (u64::from(i.jt) << 40)
                | (u64::from(i.jf) << 32)
                | u64::from(k)
        })
        .collect()
}

#[cfg(not(target_arch = "x86_64"))]
fn compile() -> Result<Programs, CompileError> {
    Err(CompileError(format!(
        "it is built for x86_64 only so far, and this machine is {}",
        std::env::consts::ARCH
    )))
}

#[cfg(target_arch = "x86_64")]
fn compile() -> Result<Programs, CompileError> {
    let arch = target()?;
    let mut allow: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in ALLOW.iter().chain(NOTIFY) {
        allow.insert(*nr, vec![]);
    }
    let personality = PERSONALITY_ALLOWED
        .iter()
        .map(|v| rule(cond(0, SeccompCmpOp::Eq, *v)?))
        .collect::<Result<Vec<_>, _>>()?;
    allow.insert(libc::SYS_personality, personality);
    let allow = SeccompFilter::new(
        allow,
        SeccompAction::Errno(libc::ENOSYS as u32),
        SeccompAction::Allow,
        arch,
    )
    .and_then(BpfProgram::try_from)
    .map_err(|e| CompileError(e.to_string()))?;

    let mut notify: BTreeMap<i64, Vec<SeccompRule>> = BTreeMap::new();
    for (_, nr) in NOTIFY {
        notify.insert(*nr, vec![]);
    }
    let ns_flag_rules = || -> Result<Vec<SeccompRule>, CompileError> {
        NAMESPACE_FLAGS
            .iter()
            .map(|f| rule(cond(0, SeccompCmpOp::MaskedEq(*f), *f)?))
            .collect()
    };
    notify.insert(libc::SYS_clone, ns_flag_rules()?);
    notify.insert(libc::SYS_unshare, ns_flag_rules()?);
    notify.insert(
        libc::SYS_ioctl,
        TTY_IOCTLS
            .iter()
            .map(|(req, _)| rule(cond(1, SeccompCmpOp::Eq, *req)?))
            .collect::<Result<_, _>>()?,
    );
    notify.insert(
        libc::SYS_socket,
        SOCKET_FAMILIES
            .iter()
            .map(|f| rule(cond(0, SeccompCmpOp::Eq, *f)?))
            .collect::<Result<_, _>>()?,
    );
    let notify = SeccompFilter::new(notify, SeccompAction::Allow, SeccompAction::Trap, arch)
        .and_then(BpfProgram::try_from)
        .map_err(|e| CompileError(e.to_string()))?;
    Ok(Programs {
        allow: pack(allow, false),
        notify: pack(notify, true),
    })
}

/// The profile's programs, compiled once per process.
pub fn untrusted() -> Result<&'static Programs, &'static CompileError> {
    static PROGRAMS: OnceLock<Result<Programs, CompileError>> = OnceLock::new();
    PROGRAMS.get_or_init(compile).as_ref()
}

/// Unpacks a program for `seccomp(2)`.
pub fn unpack(p: &[u64]) -> Vec<libc::sock_filter> {
    p.iter()
        .map(|&i| libc::sock_filter {
            code: (i >> 48) as u16,
            jt: (i >> 40) as u8,
            jf: (i >> 32) as u8,
            k: i as u32,
        })
        .collect()
}

#[cfg(not(target_arch = "x86_64"))]
pub fn describe(nr: i32, _args: &[u64; 6]) -> String {
    format!("syscall {nr}")
}

/// What an `escape_blocked` fault calls a notified syscall: its name, with the argument that
/// made it an escape where the syscall itself is allowed.
#[cfg(target_arch = "x86_64")]
pub fn describe(nr: i32, args: &[u64; 6]) -> String {
    let nr = libc::c_long::from(nr);
    if nr == libc::SYS_ioctl {
        if let Some((_, name)) = TTY_IOCTLS.iter().find(|(r, _)| *r == args[1] & 0xffff_ffff) {
            return (*name).to_string();
        }
    }
    if nr == libc::SYS_socket {
        return match args[0] as i32 {
            libc::AF_ALG => "socket(AF_ALG)".into(),
            libc::AF_VSOCK => "socket(AF_VSOCK)".into(),
            f => format!("socket({f})"),
        };
    }
    if nr == libc::SYS_clone || nr == libc::SYS_unshare {
        let name = if nr == libc::SYS_clone {
            "clone"
        } else {
            "unshare"
        };
        return format!(
            "{name} with namespace flags {:#x}",
            args[0] & NAMESPACE_FLAGS.iter().fold(0, |a, f| a | f)
        );
    }
    ALLOW
        .iter()
        .chain(NOTIFY)
        .find(|(_, n)| *n == nr)
        .map_or_else(
            || format!("syscall {nr}"),
            |(sys, _)| sys.trim_start_matches("SYS_").to_string(),
        )
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::*;

    #[test]
    fn compiles_and_marks_notifications() {
        let p = untrusted().expect("compiles");
        let ret = |prog: &[u64], k: u32| unpack(prog).iter().any(|i| i.code == 0x06 && i.k == k);
        assert!(ret(&p.notify, libc::SECCOMP_RET_USER_NOTIF));
        assert!(!ret(&p.notify, libc::SECCOMP_RET_TRAP));
        assert!(ret(&p.allow, libc::SECCOMP_RET_ERRNO | libc::ENOSYS as u32));
        assert!(p.allow.len() < 4096 && p.notify.len() < 4096);
    }

    #[test]
    fn escape_lists_stay_off_the_plain_allowlist() {
        for (name, nr) in NOTIFY {
            assert!(
                ALLOW.iter().all(|(_, n)| n != nr),
                "{name} is on both lists"
            );
        }
        for nr in [
            libc::SYS_clone3,
            libc::SYS_io_uring_setup,
            libc::SYS_io_uring_enter,
        ] {
            assert!(ALLOW.iter().chain(NOTIFY).all(|(_, n)| *n != nr));
        }
    }

    #[test]
    fn names_what_it_stopped() {
        let mut args = [0u64; 6];
        assert_eq!(describe(libc::SYS_ptrace as i32, &args), "ptrace");
        args[1] = 0xdead_0000_0000_0000 | libc::TIOCSTI;
        assert_eq!(describe(libc::SYS_ioctl as i32, &args), "ioctl(TIOCSTI)");
        args[0] = (libc::CLONE_NEWUSER | libc::SIGCHLD) as u64;
        assert_eq!(
            describe(libc::SYS_unshare as i32, &args),
            "unshare with namespace flags 0x10000000"
        );
        assert_eq!(describe(100_000, &args), "syscall 100000");
    }
}
