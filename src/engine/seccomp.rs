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

#[cfg(target_arch = "x86_64")]
/// (name, number). The name is what an `escape_blocked` fault says.
type Table = &'static [(&'static str, libc::c_long)];

#[cfg(target_arch = "x86_64")]
macro_rules! table {
    ($($name:ident),* $(,)?) => {
        &[$((stringify!($name), sys_nr::$name)),*]
    };
}

/// `libc::SYS_<name>` under the bare name, so the tables read as syscall names. x86_64 only for
/// now: on other architectures the profile is refused (see `untrusted`).
#[cfg(target_arch = "x86_64")]
#[allow(non_upper_case_globals)]
mod sys_nr {
    macro_rules! alias {
        ($($name:ident => $sys:ident),* $(,)?) => { $(pub const $name: libc::c_long = libc::$sys;)* };
    }
    alias! {
        accept => SYS_accept, accept4 => SYS_accept4, access => SYS_access, adjtimex => SYS_adjtimex,
        alarm => SYS_alarm, bind => SYS_bind, brk => SYS_brk, capget => SYS_capget,
        capset => SYS_capset, chdir => SYS_chdir, chmod => SYS_chmod, chown => SYS_chown,
        clock_adjtime => SYS_clock_adjtime, clock_getres => SYS_clock_getres,
        clock_gettime => SYS_clock_gettime, clock_nanosleep => SYS_clock_nanosleep,
        close => SYS_close, close_range => SYS_close_range, connect => SYS_connect,
        copy_file_range => SYS_copy_file_range, creat => SYS_creat, dup => SYS_dup,
        dup2 => SYS_dup2, dup3 => SYS_dup3, epoll_create => SYS_epoll_create,
        epoll_create1 => SYS_epoll_create1, epoll_ctl => SYS_epoll_ctl,
        epoll_pwait => SYS_epoll_pwait, epoll_pwait2 => SYS_epoll_pwait2,
        epoll_wait => SYS_epoll_wait, eventfd => SYS_eventfd, eventfd2 => SYS_eventfd2,
        execve => SYS_execve, execveat => SYS_execveat, exit => SYS_exit,
        exit_group => SYS_exit_group, faccessat => SYS_faccessat, faccessat2 => SYS_faccessat2,
        fadvise64 => SYS_fadvise64, fallocate => SYS_fallocate, fanotify_mark => SYS_fanotify_mark,
        fchdir => SYS_fchdir, fchmod => SYS_fchmod, fchmodat => SYS_fchmodat, fchown => SYS_fchown,
        fchownat => SYS_fchownat, fcntl => SYS_fcntl, fdatasync => SYS_fdatasync,
        fgetxattr => SYS_fgetxattr, flistxattr => SYS_flistxattr, flock => SYS_flock,
        fork => SYS_fork, fremovexattr => SYS_fremovexattr, fsetxattr => SYS_fsetxattr,
        fstat => SYS_fstat, fstatfs => SYS_fstatfs, fsync => SYS_fsync, ftruncate => SYS_ftruncate,
        futex => SYS_futex, futex_waitv => SYS_futex_waitv, futimesat => SYS_futimesat,
        getcpu => SYS_getcpu, getcwd => SYS_getcwd, getdents => SYS_getdents,
        getdents64 => SYS_getdents64, getegid => SYS_getegid, geteuid => SYS_geteuid,
        getgid => SYS_getgid, getgroups => SYS_getgroups, getitimer => SYS_getitimer,
        getpeername => SYS_getpeername, getpgid => SYS_getpgid, getpgrp => SYS_getpgrp,
        getpid => SYS_getpid, getppid => SYS_getppid, getpriority => SYS_getpriority,
        getrandom => SYS_getrandom, getresgid => SYS_getresgid, getresuid => SYS_getresuid,
        getrlimit => SYS_getrlimit, get_robust_list => SYS_get_robust_list,
        getrusage => SYS_getrusage, getsid => SYS_getsid, getsockname => SYS_getsockname,
        getsockopt => SYS_getsockopt, get_thread_area => SYS_get_thread_area, gettid => SYS_gettid,
        gettimeofday => SYS_gettimeofday, getuid => SYS_getuid, getxattr => SYS_getxattr,
        inotify_add_watch => SYS_inotify_add_watch, inotify_init => SYS_inotify_init,
        inotify_init1 => SYS_inotify_init1, inotify_rm_watch => SYS_inotify_rm_watch,
        io_cancel => SYS_io_cancel, ioctl => SYS_ioctl, io_destroy => SYS_io_destroy,
        io_getevents => SYS_io_getevents,
        ioprio_get => SYS_ioprio_get, ioprio_set => SYS_ioprio_set, io_setup => SYS_io_setup,
        io_submit => SYS_io_submit, kill => SYS_kill,
        landlock_add_rule => SYS_landlock_add_rule,
        landlock_create_ruleset => SYS_landlock_create_ruleset,
        landlock_restrict_self => SYS_landlock_restrict_self, lchown => SYS_lchown,
        lgetxattr => SYS_lgetxattr, link => SYS_link, linkat => SYS_linkat, listen => SYS_listen,
        listxattr => SYS_listxattr, llistxattr => SYS_llistxattr, lremovexattr => SYS_lremovexattr,
        lseek => SYS_lseek, lsetxattr => SYS_lsetxattr, lstat => SYS_lstat, madvise => SYS_madvise,
        membarrier => SYS_membarrier, memfd_create => SYS_memfd_create,
        memfd_secret => SYS_memfd_secret, mincore => SYS_mincore, mkdir => SYS_mkdir,
        mkdirat => SYS_mkdirat, mknod => SYS_mknod, mknodat => SYS_mknodat, mlock => SYS_mlock,
        mlock2 => SYS_mlock2, mlockall => SYS_mlockall, mmap => SYS_mmap, mprotect => SYS_mprotect,
        mq_getsetattr => SYS_mq_getsetattr, mq_notify => SYS_mq_notify, mq_open => SYS_mq_open,
        mq_timedreceive => SYS_mq_timedreceive, mq_timedsend => SYS_mq_timedsend,
        mq_unlink => SYS_mq_unlink, mremap => SYS_mremap, msgctl => SYS_msgctl,
        msgget => SYS_msgget, msgrcv => SYS_msgrcv, msgsnd => SYS_msgsnd, msync => SYS_msync,
        munlock => SYS_munlock, munlockall => SYS_munlockall, munmap => SYS_munmap,
        nanosleep => SYS_nanosleep, newfstatat => SYS_newfstatat, open => SYS_open,
        openat => SYS_openat, openat2 => SYS_openat2, pause => SYS_pause,
        pidfd_open => SYS_pidfd_open, pidfd_send_signal => SYS_pidfd_send_signal,
        pipe => SYS_pipe, pipe2 => SYS_pipe2, pkey_alloc => SYS_pkey_alloc,
        pkey_free => SYS_pkey_free, pkey_mprotect => SYS_pkey_mprotect, poll => SYS_poll,
        ppoll => SYS_ppoll, prctl => SYS_prctl, pread64 => SYS_pread64, preadv => SYS_preadv,
        preadv2 => SYS_preadv2, prlimit64 => SYS_prlimit64,
        process_mrelease => SYS_process_mrelease, pselect6 => SYS_pselect6,
        pwrite64 => SYS_pwrite64, pwritev => SYS_pwritev, pwritev2 => SYS_pwritev2,
        read => SYS_read, readahead => SYS_readahead, readlink => SYS_readlink,
        readlinkat => SYS_readlinkat, readv => SYS_readv, recvfrom => SYS_recvfrom,
        recvmmsg => SYS_recvmmsg, recvmsg => SYS_recvmsg,
        remap_file_pages => SYS_remap_file_pages, removexattr => SYS_removexattr,
        rename => SYS_rename, renameat => SYS_renameat, renameat2 => SYS_renameat2,
        restart_syscall => SYS_restart_syscall, rmdir => SYS_rmdir, rseq => SYS_rseq,
        rt_sigaction => SYS_rt_sigaction, rt_sigpending => SYS_rt_sigpending,
        rt_sigprocmask => SYS_rt_sigprocmask, rt_sigqueueinfo => SYS_rt_sigqueueinfo,
        rt_sigreturn => SYS_rt_sigreturn, rt_sigsuspend => SYS_rt_sigsuspend,
        rt_sigtimedwait => SYS_rt_sigtimedwait, rt_tgsigqueueinfo => SYS_rt_tgsigqueueinfo,
        sched_getaffinity => SYS_sched_getaffinity, sched_getattr => SYS_sched_getattr,
        sched_getparam => SYS_sched_getparam,
        sched_get_priority_max => SYS_sched_get_priority_max,
        sched_get_priority_min => SYS_sched_get_priority_min,
        sched_getscheduler => SYS_sched_getscheduler,
        sched_rr_get_interval => SYS_sched_rr_get_interval,
        sched_setaffinity => SYS_sched_setaffinity, sched_setattr => SYS_sched_setattr,
        sched_setparam => SYS_sched_setparam, sched_setscheduler => SYS_sched_setscheduler,
        sched_yield => SYS_sched_yield, seccomp => SYS_seccomp, select => SYS_select,
        semctl => SYS_semctl, semget => SYS_semget, semop => SYS_semop,
        semtimedop => SYS_semtimedop, sendfile => SYS_sendfile, sendmmsg => SYS_sendmmsg,
        sendmsg => SYS_sendmsg, sendto => SYS_sendto, setfsgid => SYS_setfsgid,
        setfsuid => SYS_setfsuid, setgid => SYS_setgid, setgroups => SYS_setgroups,
        setitimer => SYS_setitimer, setpgid => SYS_setpgid, setpriority => SYS_setpriority,
        setregid => SYS_setregid, setresgid => SYS_setresgid, setresuid => SYS_setresuid,
        setreuid => SYS_setreuid, setrlimit => SYS_setrlimit,
        set_robust_list => SYS_set_robust_list, setsid => SYS_setsid,
        setsockopt => SYS_setsockopt, set_thread_area => SYS_set_thread_area,
        set_tid_address => SYS_set_tid_address, setuid => SYS_setuid, setxattr => SYS_setxattr,
        shmat => SYS_shmat, shmctl => SYS_shmctl, shmdt => SYS_shmdt, shmget => SYS_shmget,
        shutdown => SYS_shutdown, sigaltstack => SYS_sigaltstack, signalfd => SYS_signalfd,
        signalfd4 => SYS_signalfd4, socket => SYS_socket, socketpair => SYS_socketpair,
        splice => SYS_splice, stat => SYS_stat, statfs => SYS_statfs, statx => SYS_statx,
        symlink => SYS_symlink, symlinkat => SYS_symlinkat, sync => SYS_sync,
        sync_file_range => SYS_sync_file_range, syncfs => SYS_syncfs, sysinfo => SYS_sysinfo,
        tee => SYS_tee, tgkill => SYS_tgkill, time => SYS_time, timer_create => SYS_timer_create,
        timer_delete => SYS_timer_delete, timer_getoverrun => SYS_timer_getoverrun,
        timer_gettime => SYS_timer_gettime, timer_settime => SYS_timer_settime,
        timerfd_create => SYS_timerfd_create, timerfd_gettime => SYS_timerfd_gettime,
        timerfd_settime => SYS_timerfd_settime, times => SYS_times, tkill => SYS_tkill,
        truncate => SYS_truncate, umask => SYS_umask, uname => SYS_uname, unlink => SYS_unlink,
        unlinkat => SYS_unlinkat, utime => SYS_utime, utimensat => SYS_utimensat,
        utimes => SYS_utimes, vfork => SYS_vfork, vmsplice => SYS_vmsplice, wait4 => SYS_wait4,
        waitid => SYS_waitid, write => SYS_write, writev => SYS_writev,
        arch_prctl => SYS_arch_prctl, modify_ldt => SYS_modify_ldt,
        personality => SYS_personality, clone => SYS_clone,
        unshare => SYS_unshare,
        // The notify list.
        mount => SYS_mount, umount2 => SYS_umount2, pivot_root => SYS_pivot_root,
        chroot => SYS_chroot, move_mount => SYS_move_mount, open_tree => SYS_open_tree,
        fsopen => SYS_fsopen, fsconfig => SYS_fsconfig, fsmount => SYS_fsmount,
        fspick => SYS_fspick, mount_setattr => SYS_mount_setattr, setns => SYS_setns,
        ptrace => SYS_ptrace, process_vm_readv => SYS_process_vm_readv,
        process_vm_writev => SYS_process_vm_writev, process_madvise => SYS_process_madvise,
        kcmp => SYS_kcmp, pidfd_getfd => SYS_pidfd_getfd, bpf => SYS_bpf,
        perf_event_open => SYS_perf_event_open, keyctl => SYS_keyctl, add_key => SYS_add_key,
        request_key => SYS_request_key, userfaultfd => SYS_userfaultfd,
        kexec_load => SYS_kexec_load, kexec_file_load => SYS_kexec_file_load,
        init_module => SYS_init_module, finit_module => SYS_finit_module,
        delete_module => SYS_delete_module,
        open_by_handle_at => SYS_open_by_handle_at, name_to_handle_at => SYS_name_to_handle_at,
        reboot => SYS_reboot, swapon => SYS_swapon, swapoff => SYS_swapoff,
        syslog => SYS_syslog, acct => SYS_acct, settimeofday => SYS_settimeofday,
        clock_settime => SYS_clock_settime, iopl => SYS_iopl, ioperm => SYS_ioperm,
        quotactl => SYS_quotactl, quotactl_fd => SYS_quotactl_fd,
        lookup_dcookie => SYS_lookup_dcookie, fanotify_init => SYS_fanotify_init,
        nfsservctl => SYS_nfsservctl, uselib => SYS_uselib, ustat => SYS_ustat, sysfs => SYS_sysfs,
        _sysctl => SYS__sysctl, vhangup => SYS_vhangup, sethostname => SYS_sethostname,
        setdomainname => SYS_setdomainname,
    }
}

#[cfg(target_arch = "x86_64")]
/// Allowed as they are: Docker's unconditional list, trimmed to x86_64 and to what exists in
/// `libc` here. Anything missing gets `ENOSYS` (a newer syscall libc can fall back from).
const ALLOW: Table = table![
    accept,
    accept4,
    access,
    adjtimex,
    alarm,
    bind,
    brk,
    capget,
    capset,
    chdir,
    chmod,
    chown,
    clock_adjtime,
    clock_getres,
    clock_gettime,
    clock_nanosleep,
    close,
    close_range,
    connect,
    copy_file_range,
    creat,
    dup,
    dup2,
    dup3,
    epoll_create,
    epoll_create1,
    epoll_ctl,
    epoll_pwait,
    epoll_pwait2,
    epoll_wait,
    eventfd,
    eventfd2,
    execve,
    execveat,
    exit,
    exit_group,
    faccessat,
    faccessat2,
    fadvise64,
    fallocate,
    fanotify_mark,
    fchdir,
    fchmod,
    fchmodat,
    fchown,
    fchownat,
    fcntl,
    fdatasync,
    fgetxattr,
    flistxattr,
    flock,
    fork,
    fremovexattr,
    fsetxattr,
    fstat,
    fstatfs,
    fsync,
    ftruncate,
    futex,
    futex_waitv,
    futimesat,
    getcpu,
    getcwd,
    getdents,
    getdents64,
    getegid,
    geteuid,
    getgid,
    getgroups,
    getitimer,
    getpeername,
    getpgid,
    getpgrp,
    getpid,
    getppid,
    getpriority,
    getrandom,
    getresgid,
    getresuid,
    getrlimit,
    get_robust_list,
    getrusage,
    getsid,
    getsockname,
    getsockopt,
    get_thread_area,
    gettid,
    gettimeofday,
    getuid,
    getxattr,
    inotify_add_watch,
    inotify_init,
    inotify_init1,
    inotify_rm_watch,
    io_cancel,
    ioctl,
    io_destroy,
    io_getevents,
    ioprio_get,
    ioprio_set,
    io_setup,
    io_submit,
    kill,
    landlock_add_rule,
    landlock_create_ruleset,
    landlock_restrict_self,
    lchown,
    lgetxattr,
    link,
    linkat,
    listen,
    listxattr,
    llistxattr,
    lremovexattr,
    lseek,
    lsetxattr,
    lstat,
    madvise,
    membarrier,
    memfd_create,
    memfd_secret,
    mincore,
    mkdir,
    mkdirat,
    mknod,
    mknodat,
    mlock,
    mlock2,
    mlockall,
    mmap,
    mprotect,
    mq_getsetattr,
    mq_notify,
    mq_open,
    mq_timedreceive,
    mq_timedsend,
    mq_unlink,
    mremap,
    msgctl,
    msgget,
    msgrcv,
    msgsnd,
    msync,
    munlock,
    munlockall,
    munmap,
    nanosleep,
    newfstatat,
    open,
    openat,
    openat2,
    pause,
    pidfd_open,
    pidfd_send_signal,
    pipe,
    pipe2,
    pkey_alloc,
    pkey_free,
    pkey_mprotect,
    poll,
    ppoll,
    prctl,
    pread64,
    preadv,
    preadv2,
    prlimit64,
    process_mrelease,
    pselect6,
    pwrite64,
    pwritev,
    pwritev2,
    read,
    readahead,
    readlink,
    readlinkat,
    readv,
    recvfrom,
    recvmmsg,
    recvmsg,
    remap_file_pages,
    removexattr,
    rename,
    renameat,
    renameat2,
    restart_syscall,
    rmdir,
    rseq,
    rt_sigaction,
    rt_sigpending,
    rt_sigprocmask,
    rt_sigqueueinfo,
    rt_sigreturn,
    rt_sigsuspend,
    rt_sigtimedwait,
    rt_tgsigqueueinfo,
    sched_getaffinity,
    sched_getattr,
    sched_getparam,
    sched_get_priority_max,
    sched_get_priority_min,
    sched_getscheduler,
    sched_rr_get_interval,
    sched_setaffinity,
    sched_setattr,
    sched_setparam,
    sched_setscheduler,
    sched_yield,
    seccomp,
    select,
    semctl,
    semget,
    semop,
    semtimedop,
    sendfile,
    sendmmsg,
    sendmsg,
    sendto,
    setfsgid,
    setfsuid,
    setgid,
    setgroups,
    setitimer,
    setpgid,
    setpriority,
    setregid,
    setresgid,
    setresuid,
    setreuid,
    setrlimit,
    set_robust_list,
    setsid,
    setsockopt,
    set_thread_area,
    set_tid_address,
    setuid,
    setxattr,
    shmat,
    shmctl,
    shmdt,
    shmget,
    shutdown,
    sigaltstack,
    signalfd,
    signalfd4,
    socketpair,
    splice,
    stat,
    statfs,
    statx,
    symlink,
    symlinkat,
    sync,
    sync_file_range,
    syncfs,
    sysinfo,
    tee,
    tgkill,
    time,
    timer_create,
    timer_delete,
    timer_getoverrun,
    timer_gettime,
    timer_settime,
    timerfd_create,
    timerfd_gettime,
    timerfd_settime,
    times,
    tkill,
    truncate,
    umask,
    uname,
    unlink,
    unlinkat,
    utime,
    utimensat,
    utimes,
    vfork,
    vmsplice,
    wait4,
    waitid,
    write,
    writev,
    arch_prctl,
    modify_ldt,
    // Allowed here, checked by the notify filter (namespace flags, terminal ioctls, families).
    clone,
    unshare,
    socket,
];

#[cfg(target_arch = "x86_64")]
/// Stopped whatever the arguments, and named in the fault: every way out of the box's
/// namespaces and mounts, into another process, or into the kernel (Docker's blocked and
/// capability-gated lists). NUMA and scheduling calls Docker also gates (`mbind`,
/// `set_mempolicy`, `move_pages`) are left to the allowlist's `ENOSYS`, because benign
/// libraries probe them.
const NOTIFY: Table = table![
    mount,
    umount2,
    pivot_root,
    chroot,
    move_mount,
    open_tree,
    fsopen,
    fsconfig,
    fsmount,
    fspick,
    mount_setattr,
    setns,
    ptrace,
    process_vm_readv,
    process_vm_writev,
    process_madvise,
    kcmp,
    pidfd_getfd,
    bpf,
    perf_event_open,
    keyctl,
    add_key,
    request_key,
    userfaultfd,
    kexec_load,
    kexec_file_load,
    init_module,
    finit_module,
    delete_module,
    open_by_handle_at,
    name_to_handle_at,
    reboot,
    swapon,
    swapoff,
    syslog,
    acct,
    settimeofday,
    clock_settime,
    iopl,
    ioperm,
    quotactl,
    quotactl_fd,
    lookup_dcookie,
    fanotify_init,
    nfsservctl,
    uselib,
    ustat,
    sysfs,
    _sysctl,
    vhangup,
    sethostname,
    setdomainname,
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
    allow.insert(sys_nr::personality, personality);
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
    notify.insert(sys_nr::clone, ns_flag_rules()?);
    notify.insert(sys_nr::unshare, ns_flag_rules()?);
    notify.insert(
        sys_nr::ioctl,
        TTY_IOCTLS
            .iter()
            .map(|(req, _)| rule(cond(1, SeccompCmpOp::Eq, *req)?))
            .collect::<Result<_, _>>()?,
    );
    notify.insert(
        sys_nr::socket,
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
    if nr == sys_nr::ioctl {
        if let Some((_, name)) = TTY_IOCTLS.iter().find(|(r, _)| *r == args[1] & 0xffff_ffff) {
            return (*name).to_string();
        }
    }
    if nr == sys_nr::socket {
        return match args[0] as i32 {
            libc::AF_ALG => "socket(AF_ALG)".into(),
            libc::AF_VSOCK => "socket(AF_VSOCK)".into(),
            f => format!("socket({f})"),
        };
    }
    if nr == sys_nr::clone || nr == sys_nr::unshare {
        let name = if nr == sys_nr::clone {
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
        .map_or_else(|| format!("syscall {nr}"), |(name, _)| (*name).to_string())
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
