//! The syscall edge: the few calls that neither `std` nor `nix` wraps. Every `unsafe` block in
//! the engine lives here, each with the reason it is sound. `proc` names a process by pid and
//! start time (`ProcId`), so a recycled pid is never taken for it.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

mod proc;
pub use proc::ProcId;

fn check(ret: libc::c_long) -> io::Result<libc::c_long> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// What `clone` returned in this process.
pub enum Forked {
    Parent(libc::pid_t),
    Child,
}

/// `clone(2)` with namespace flags and fork semantics (no new stack: the child gets a copy of
/// ours). Only sound in a single-threaded process, which `kern` is when it calls this.
pub fn clone_fork(flags: libc::c_int) -> io::Result<Forked> {
    // SAFETY: with a null stack pointer, `clone` behaves like `fork`: the child continues on a
    // copy-on-write copy of this stack. `kern` is single-threaded here, so no lock held by another
    // thread can be copied into the child. glibc no longer caches the pid, so a raw clone leaves
    // libc consistent.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_int>(),
            std::ptr::null_mut::<libc::c_int>(),
            0 as libc::c_ulong,
        )
    };
    match check(ret)? {
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid as libc::pid_t)),
    }
}

/// `CLONE_INTO_CGROUP` (Linux 5.7). libc 0.2 declares it as a `c_int`, which this 64-bit flag
/// overflows (deprecated there for that reason), so it is spelled out here.
const CLONE_INTO_CGROUP: u64 = 0x2_0000_0000;

/// `clone3(2)` with `CLONE_INTO_CGROUP`: as `clone_fork`, but the child is born in the cgroup v2
/// directory `cgroup` instead of this process's. Neither std nor nix wraps clone3, hence the raw
/// syscall. Only sound in a single-threaded process, which `kern` is when it calls this.
pub fn clone_fork_into(flags: libc::c_int, cgroup: BorrowedFd<'_>) -> io::Result<Forked> {
    let args = clone3_args(flags, cgroup.as_raw_fd());
    // SAFETY: as for `clone_fork` (no stack given, so fork semantics, in a single-threaded
    // process); `args` is a valid `struct clone_args` that outlives the call and its exact size
    // is passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const libc::clone_args,
            std::mem::size_of::<libc::clone_args>(),
        )
    };
    match check(ret)? {
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(pid as libc::pid_t)),
    }
}

fn clone3_args(flags: libc::c_int, cgroup: RawFd) -> libc::clone_args {
    libc::clone_args {
        flags: flags as u32 as u64 | CLONE_INTO_CGROUP,
        pidfd: 0,
        child_tid: 0,
        parent_tid: 0,
        exit_signal: libc::SIGCHLD as u64,
        stack: 0,
        stack_size: 0,
        tls: 0,
        set_tid: 0,
        set_tid_size: 0,
        cgroup: cgroup as u64,
    }
}

/// Whether this kernel (and any seccomp filter kern runs under) lets `clone_fork_into` work,
/// asked without creating or copying a process. Linux 5.7+ refuses a `CLONE_INTO_CGROUP`
/// descriptor above INT_MAX with EINVAL while reading the arguments, before anything else;
/// 5.3-5.6 (no `CLONE_INTO_CGROUP`) refuse the same arguments with E2BIG (a non-zero field past
/// the struct they know), older kernels and containers' filters with ENOSYS or EPERM. (A probe
/// with a valid-looking descriptor would get as far as copying this process before failing.)
pub fn clone_into_cgroup_supported() -> bool {
    let mut args = clone3_args(0, 0);
    args.cgroup = libc::c_int::MAX as u64 + 1;
    // SAFETY: `args` is a valid `struct clone_args` that outlives the call, with its exact size.
    // No kernel makes a child from these arguments (see above); should one ever, the child
    // leaves at once and the parent reaps it.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone3,
            &args as *const libc::clone_args,
            std::mem::size_of::<libc::clone_args>(),
        )
    };
    match ret {
        0 => exit_now(0),
        pid if pid > 0 => {
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as libc::pid_t), None);
            false
        }
        _ => io::Error::last_os_error().raw_os_error() == Some(libc::EINVAL),
    }
}

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

pub const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
pub const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
pub const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
pub const MOUNT_ATTR_NOEXEC: u64 = 0x0000_0008;

/// `mount_setattr(2)`: set flags on a mount (recursively with `recursive`). Unlike a
/// `MS_REMOUNT|MS_BIND`, it only adds the flags asked for, so flags the kernel locked on a bind
/// made in a user namespace are kept instead of making the call fail with EPERM.
pub fn mount_setattr(path: &str, set: u64, recursive: bool) -> io::Result<()> {
    let cpath = cstr(path)?;
    let attr = MountAttr {
        attr_set: set,
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { libc::AT_RECURSIVE } else { 0 } as libc::c_uint;
    // SAFETY: `cpath` is a valid NUL-terminated string and `attr` a properly laid out
    // `struct mount_attr` that outlives the call; the size passed is its exact size.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            cpath.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(ret).map(|_| ())
}

/// Marks every fd from `first` up close-on-exec (`close_range(2)`, Linux 5.11), falling back to
/// walking `/proc/self/fd` on older kernels.
pub fn cloexec_from(first: u32) -> io::Result<()> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range only changes fd flags; no memory is passed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    };
    if check(ret).is_ok() {
        return Ok(());
    }
    for entry in std::fs::read_dir("/proc/self/fd")? {
        let fd: RawFd = match entry?.file_name().to_str().and_then(|s| s.parse().ok()) {
            Some(fd) => fd,
            None => continue,
        };
        if fd >= first as RawFd {
            // An fd that closed since the listing just fails; nothing to do about it.
            let _ = set_cloexec(fd);
        }
    }
    Ok(())
}

/// Closes every fd above 2 except those in `keep` (sorted or not), with `close_range` over the
/// gaps.
pub fn close_others(keep: &[RawFd]) {
    let mut keep: Vec<RawFd> = keep.iter().copied().filter(|fd| *fd > 2).collect();
    keep.sort_unstable();
    let mut from: libc::c_uint = 3;
    for fd in keep.into_iter().chain([libc::c_int::MAX]) {
        let fd = fd as libc::c_uint;
        if fd > from {
            // SAFETY: close_range takes integers only; the fds in the range are not owned by any
            // Rust object this process still uses (callers keep what they need in `keep`).
            unsafe { libc::syscall(libc::SYS_close_range, from, fd - 1, 0 as libc::c_uint) };
        }
        from = fd.saturating_add(1);
    }
}

/// Points stdin at /dev/null (the box must never read kern's control socket).
pub fn stdin_null() -> io::Result<()> {
    let null = std::fs::File::open("/dev/null")?;
    // SAFETY: dup2 on integer fds touches no memory.
    if unsafe { libc::dup2(null.as_raw_fd(), 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Points stdin, stdout and stderr at /dev/null, so whoever holds the other ends sees EOF.
pub fn detach_stdio() -> io::Result<()> {
    detach_fds(&[0, 1, 2])
}

/// Points each of `fds` (of 0, 1, 2) at /dev/null, so whoever holds the other ends sees EOF.
pub fn detach_fds(fds: &[RawFd]) -> io::Result<()> {
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")?;
    for &target in fds {
        // SAFETY: dup2 on integer fds touches no memory.
        if unsafe { libc::dup2(null.as_raw_fd(), target) } < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

pub fn set_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an integer fd touches no memory; a stale fd yields EBADF.
    let ret = unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    check(ret as libc::c_long).map(|_| ())
}

pub fn clear_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: as in `set_cloexec`.
    let ret = unsafe { libc::fcntl(fd, libc::F_SETFD, 0) };
    check(ret as libc::c_long).map(|_| ())
}

/// `pidfd_open(2)`: a handle on a process that a recycled pid can never alias.
pub fn pidfd_open(pid: libc::pid_t) -> io::Result<OwnedFd> {
    // SAFETY: no memory is passed; on success the kernel returns a new fd that we own.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0 as libc::c_uint) };
    let fd = check(ret)? as RawFd;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub fn pidfd_kill(pidfd: BorrowedFd<'_>, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: a null siginfo is allowed (the kernel fills it as for kill(2)).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            sig,
            std::ptr::null::<libc::siginfo_t>(),
            0 as libc::c_uint,
        )
    };
    check(ret).map(|_| ())
}

#[repr(C)]
struct CapHeader {
    version: u32,
    pid: libc::c_int,
}

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CapData {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}

/// Empties the effective, permitted and inheritable capability sets of this thread.
pub fn capset_clear() -> io::Result<()> {
    capset_to(&[])
}

/// Sets the effective, permitted and inheritable sets of this thread to exactly `keep`
/// (capability numbers).
pub fn capset_to(keep: &[u32]) -> io::Result<()> {
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let mut data = [CapData::default(); 2];
    for &c in keep.iter().filter(|c| **c < 64) {
        let (word, bit) = ((c / 32) as usize, 1u32 << (c % 32));
        data[word].effective |= bit;
        data[word].permitted |= bit;
        data[word].inheritable |= bit;
    }
    // SAFETY: header and a two-element data array (the v3 layout) are valid for the call.
    let ret =
        unsafe { libc::syscall(libc::SYS_capset, &header as *const CapHeader, data.as_ptr()) };
    check(ret).map(|_| ())
}

/// `execve` with an explicit environment. Returns only on failure.
pub fn execve(path: &CString, argv: &[CString], env: &[CString]) -> io::Error {
    let mut argv_ptrs: Vec<*const libc::c_char> = argv.iter().map(|a| a.as_ptr()).collect();
    argv_ptrs.push(std::ptr::null());
    let mut env_ptrs: Vec<*const libc::c_char> = env.iter().map(|e| e.as_ptr()).collect();
    env_ptrs.push(std::ptr::null());
    // SAFETY: every pointer comes from a CString alive for the call, and both arrays are
    // NULL-terminated as execve requires.
    unsafe { libc::execve(path.as_ptr(), argv_ptrs.as_ptr(), env_ptrs.as_ptr()) };
    io::Error::last_os_error()
}

/// `_exit(2)`: leave a forked child without running atexit handlers or flushing stdio buffers
/// that belong to the parent.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit never returns and touches no Rust-managed state.
    unsafe { libc::_exit(code) }
}

pub fn cstr(s: &str) -> io::Result<CString> {
    CString::new(s).map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "NUL byte in string"))
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x0000_0004;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x0000_0040;

/// `open_tree(OPEN_TREE_CLONE)`: a detached copy of the mount tree at `path`, as an fd. Only
/// the monitor (in the host's namespaces) can reach some sources, and only it may idmap them.
pub fn open_tree_clone(path: &str, recursive: bool) -> io::Result<OwnedFd> {
    open_tree(libc::AT_FDCWD, &cstr(path)?, 0, recursive)
}

/// `open_tree(OPEN_TREE_CLONE)` of the inode `fd` refers to (an O_PATH fd opened without
/// following symlinks), so what is cloned is what was checked, not whatever a path names now.
pub fn open_tree_clone_fd(fd: BorrowedFd<'_>, recursive: bool) -> io::Result<OwnedFd> {
    open_tree(
        fd.as_raw_fd(),
        c"",
        libc::AT_EMPTY_PATH as libc::c_uint,
        recursive,
    )
}

fn open_tree(
    dirfd: RawFd,
    path: &std::ffi::CStr,
    extra: libc::c_uint,
    recursive: bool,
) -> io::Result<OwnedFd> {
    let mut flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | extra;
    if recursive {
        flags |= libc::AT_RECURSIVE as libc::c_uint;
    }
    // SAFETY: `path` is NUL-terminated and outlives the call, `dirfd` is AT_FDCWD or a valid
    // descriptor; on success the kernel returns a new fd that we own.
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, dirfd, path.as_ptr(), flags) };
    let fd = check(ret)? as RawFd;
    // SAFETY: `fd` was just returned by the kernel and is owned by nobody else.
    let tree = unsafe { OwnedFd::from_raw_fd(fd) };
    // A clone of a shared mount is a peer of it: under systemd (which makes `/` shared) a mount
    // the box later makes on the attached tree (`.deps` read-only, a mask) would propagate back
    // to the host's namespace, and stay there. The box's own `/` is made private, but a tree
    // attached afterwards keeps the propagation it was cloned with.
    set_propagation_private(tree.as_fd())?;
    Ok(tree)
}

/// Makes a detached tree (and every mount below it) private: nothing mounted on it propagates
/// to or from the mounts it was cloned from.
fn set_propagation_private(tree: BorrowedFd<'_>) -> io::Result<()> {
    setattr_tree(
        tree,
        &MountAttr {
            attr_set: 0,
            attr_clr: 0,
            propagation: libc::MS_PRIVATE,
            userns_fd: 0,
        },
    )
}

/// Sets flags on a detached tree, and with `userns` makes it an idmapped mount: files appear
/// owned through that user namespace's map, and what the box writes lands with the ids it maps
/// to on the host (box root writes as the owner the host sees for uid 0).
pub fn mount_setattr_fd(
    tree: BorrowedFd<'_>,
    set: u64,
    userns: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let attr = MountAttr {
        attr_set: set
            | if userns.is_some() {
                MOUNT_ATTR_IDMAP
            } else {
                0
            },
        attr_clr: 0,
        // Already private: `open_tree_clone` made it so.
        propagation: 0,
        userns_fd: userns.map(|u| u.as_raw_fd() as u64).unwrap_or(0),
    };
    setattr_tree(tree, &attr)
}

/// `mount_setattr(2)` on a detached tree and every mount below it.
fn setattr_tree(tree: BorrowedFd<'_>, attr: &MountAttr) -> io::Result<()> {
    let empty = c"";
    // SAFETY: the empty path is NUL-terminated, `attr` is a properly laid out
    // `struct mount_attr` alive for the call, and the size passed is its exact size.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            (libc::AT_EMPTY_PATH | libc::AT_RECURSIVE) as libc::c_uint,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    check(ret).map(|_| ())
}

/// Attaches a detached tree (from `open_tree_clone`) at `target` in this mount namespace.
pub fn move_mount_to(tree: BorrowedFd<'_>, target: &str) -> io::Result<()> {
    move_mount(tree, libc::AT_FDCWD, &cstr(target)?, 0)
}

/// Attaches a detached tree over the inode `target` refers to (an O_PATH fd), never over
/// whatever a path would resolve to by then.
pub fn move_mount_to_fd(tree: BorrowedFd<'_>, target: BorrowedFd<'_>) -> io::Result<()> {
    move_mount(tree, target.as_raw_fd(), c"", MOVE_MOUNT_T_EMPTY_PATH)
}

fn move_mount(
    tree: BorrowedFd<'_>,
    to_dirfd: RawFd,
    to_path: &std::ffi::CStr,
    extra: libc::c_uint,
) -> io::Result<()> {
    let empty = c"";
    // SAFETY: both paths are NUL-terminated and outlive the call; `tree` is valid and
    // `to_dirfd` is AT_FDCWD or a valid descriptor.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            to_dirfd,
            to_path.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | extra,
        )
    };
    check(ret).map(|_| ())
}

/// Every signal back to its default disposition, nothing blocked: what a workload expects to
/// start with (kern's own runtime ignores SIGPIPE, a caller may have ignored others, and ignored
/// signals survive exec). The raw syscall, because glibc refuses to touch the real-time
/// signals it reserves for itself.
pub fn default_signals() -> io::Result<()> {
    // An all-zero `struct sigaction` is SIG_DFL with no flags and an empty mask, whatever the
    // architecture's field order.
    let default = [0u64; 4];
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: `default` is a valid, zeroed kernel sigaction that outlives the call; no old
        // action is requested; the sigset size is the kernel's (8 bytes).
        let ret = unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                default.as_ptr(),
                std::ptr::null_mut::<libc::c_void>(),
                8usize,
            )
        };
        check(ret)?;
    }
    let empty = 0u64;
    // SAFETY: a valid 8-byte empty mask, no old mask requested.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK,
            &empty as *const u64,
            std::ptr::null_mut::<u64>(),
            8usize,
        )
    };
    check(ret).map(|_| ())
}

/// `fsetxattr(2)`: sets one extended attribute on an open file or directory (nix has no xattr
/// calls). Used by the layer unpacker for `user.*` attributes.
pub fn fsetxattr(fd: BorrowedFd<'_>, name: &std::ffi::CStr, value: &[u8]) -> io::Result<()> {
    // SAFETY: `name` is NUL-terminated and `value` is a valid slice whose exact length is
    // passed; both outlive the call, which only reads them.
    let ret = unsafe {
        libc::fsetxattr(
            fd.as_raw_fd(),
            name.as_ptr(),
            value.as_ptr().cast::<libc::c_void>(),
            value.len(),
            0,
        )
    };
    check(ret as libc::c_long).map(|_| ())
}

/// Puts `fd` at descriptor number `target`, inheritable across exec (what dup2 gives; dup2 of
/// an fd onto itself would keep its close-on-exec flag, so that case clears it instead).
pub fn place_at(fd: BorrowedFd<'_>, target: RawFd) -> io::Result<()> {
    if fd.as_raw_fd() == target {
        return clear_cloexec(target);
    }
    // SAFETY: dup2 on integer fds touches no memory; `target` is a number the caller reserved.
    if unsafe { libc::dup2(fd.as_raw_fd(), target) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A close-on-exec duplicate of `fd` numbered `min` or above.
pub fn dup_above(fd: BorrowedFd<'_>, min: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) touches no memory; on success it returns a new descriptor
    // that nothing else owns, so wrapping it in an OwnedFd is sound.
    let new = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, min) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: see above: `new` is a fresh descriptor owned by no one else.
    Ok(unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(new) })
}

/// The most descriptors one message carries (the box's "go": workspace, image, and one tree per
/// extra mount, of which the session allows 16).
pub const MAX_FDS_PER_MESSAGE: usize = 24;

/// One `recvmsg` on a stream socket: the bytes, and any descriptors sent with them (received
/// close-on-exec). A plain `read` would drop such descriptors.
pub fn recv_with_fds(sock: RawFd, buf: &mut [u8]) -> io::Result<(usize, Vec<OwnedFd>)> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut cmsg = nix::cmsg_space!([RawFd; MAX_FDS_PER_MESSAGE]);
    let mut iov = [io::IoSliceMut::new(buf)];
    let msg = recvmsg::<()>(sock, &mut iov, Some(&mut cmsg), MsgFlags::MSG_CMSG_CLOEXEC)?;
    let mut fds = Vec::new();
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(raw) = c {
            // SAFETY: SCM_RIGHTS just installed these descriptors in this process; nothing
            // else owns them.
            fds.extend(
                raw.into_iter()
                    .map(|fd| unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) }),
            );
        }
    }
    Ok((msg.bytes, fds))
}

/// Sends `bytes` with `fds` attached (SCM_RIGHTS) on a stream socket; returns how many bytes
/// went (the descriptors travel with the first of them).
pub fn send_with_fds(sock: BorrowedFd<'_>, bytes: &[u8], fds: &[RawFd]) -> io::Result<usize> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let iov = [io::IoSlice::new(bytes)];
    let cmsg = [ControlMessage::ScmRights(fds)];
    // No descriptors, no control message: an empty SCM_RIGHTS is not something to send.
    let cmsgs: &[ControlMessage<'_>] = if fds.is_empty() { &[] } else { &cmsg };
    Ok(sendmsg::<()>(
        sock.as_raw_fd(),
        &iov,
        cmsgs,
        MsgFlags::MSG_NOSIGNAL,
        None,
    )?)
}

/// One syscall a filter handed to its listener: the id to answer, its number and arguments.
pub struct Notification {
    pub id: u64,
    pub nr: i32,
    pub args: [u64; 6],
}

/// Waits for the next notification on a seccomp listener.
pub fn seccomp_recv(listener: BorrowedFd<'_>) -> io::Result<Notification> {
    // SAFETY: seccomp_notif is plain data; the kernel requires it zeroed before RECV.
    let mut req: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: RECV fills `req`, which is the size the ioctl number encodes.
    check(unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV as _,
            &mut req as *mut libc::seccomp_notif,
        )
    } as libc::c_long)?;
    Ok(Notification {
        id: req.id,
        nr: req.data.nr,
        args: req.data.args,
    })
}

/// Fails the notified syscall `id` with `errno`.
pub fn seccomp_deny(listener: BorrowedFd<'_>, id: u64, errno: i32) -> io::Result<()> {
    let mut resp = libc::seccomp_notif_resp {
        id,
        val: 0,
        error: -errno,
        flags: 0,
    };
    // SAFETY: SEND reads `resp`, which is the size the ioctl number encodes.
    check(unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND as _,
            &mut resp as *mut libc::seccomp_notif_resp,
        )
    } as libc::c_long)?;
    Ok(())
}

/// Gives the calling process (and what it forks) a new, empty, anonymous session keyring, so
/// nothing of the caller's session keyring is reachable. `KEYCTL_JOIN_SESSION_KEYRING` (1) with
/// a NULL name. A kernel without keyrings (ENOSYS) has nothing to hand down.
///
/// Each keyring counts against the user's key quota (`kernel.keys.maxkeys`, 200 for a user),
/// and the kernel frees an ended box's keyring asynchronously: with many boxes at once,
/// rootless, a join can meet EDQUOT for a moment. It is retried for up to a second (the
/// retries sleep and allocate nothing, as fits the child side of a clone) before failing.
pub fn new_session_keyring() -> io::Result<()> {
    const KEYCTL_JOIN_SESSION_KEYRING: libc::c_long = 1;
    let mut tries = 0;
    loop {
        // SAFETY: a NULL name pointer asks for an anonymous keyring; no memory is passed.
        match check(unsafe {
            libc::syscall(
                libc::SYS_keyctl,
                KEYCTL_JOIN_SESSION_KEYRING,
                std::ptr::null::<libc::c_char>(),
            )
        }) {
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EDQUOT) && tries < 50 => {
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
            r => return r.map(drop),
        }
    }
}

/// Reads what a non-blocking `fd` holds now into `into`, to EOF or `EAGAIN`.
pub fn read_available(fd: &OwnedFd, into: &mut Vec<u8>) {
    let mut buf = [0u8; 4096];
    while let Ok(n) = nix::unistd::read(fd, &mut buf) {
        if n == 0 {
            break;
        }
        into.extend_from_slice(&buf[..n]);
    }
}
