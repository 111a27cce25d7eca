//! A box's terminal (`spec.tty`: `sb.terminal`, `kern run -it`, `kern attach`). The workload
//! opens it in the box's own devpts instance (mounted `newinstance` by `mounts`), so nothing of
//! the host's terminals is reachable from it, makes it its controlling terminal and its stdio,
//! and sends the master to the caller (SCM_RIGHTS on `BoxFds::tty`), then closes its own copy:
//! the caller holds the only master. Both sides are here.

use crate::engine::shared::spec::{RootSpec, TtySize};
use crate::engine::shared::sys;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// The byte the master travels with.
const TAG: &[u8] = b"t";

/// In the workload, still box root: opens a terminal of the box's devpts at `size`, sends its
/// master on `to_caller`, and returns the slave.
pub(in crate::engine) fn open_in_box(size: TtySize, to_caller: &OwnedFd) -> io::Result<OwnedFd> {
    use nix::fcntl::OFlag;
    let master = nix::pty::posix_openpt(OFlag::O_RDWR | OFlag::O_NOCTTY | OFlag::O_CLOEXEC)?;
    nix::pty::unlockpt(&master)?;
    // The peer through the master itself, not by a name under /dev/pts that a process of the
    // box could have swapped.
    // SAFETY: TIOCGPTPEER takes open flags by value and returns a new descriptor or -1.
    let slave = unsafe {
        libc::ioctl(
            master.as_raw_fd(),
            libc::TIOCGPTPEER,
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        )
    };
    if slave < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the ioctl just returned this descriptor, owned by nobody else.
    let slave = unsafe { OwnedFd::from_raw_fd(slave) };
    set_size(master.as_fd(), size)?;
    sys::send_with_fds(to_caller.as_fd(), TAG, &[master.as_raw_fd()])?;
    Ok(slave)
}

/// In the workload, after `setsid`: the terminal becomes its controlling terminal and its fds
/// 0, 1 and 2.
pub(in crate::engine) fn take_as_stdio(slave: &OwnedFd) -> io::Result<()> {
    // SAFETY: TIOCSCTTY takes an int by value (0: don't steal a terminal from another session).
    if unsafe { libc::ioctl(slave.as_raw_fd(), libc::TIOCSCTTY, 0) } < 0 {
        return Err(io::Error::last_os_error());
    }
    for fd in 0..3 {
        sys::place_at(slave.as_fd(), fd)?;
    }
    Ok(())
}

/// Sets a terminal's size (the foreground process group gets `SIGWINCH`).
pub fn set_size(master: BorrowedFd<'_>, size: TtySize) -> io::Result<()> {
    let ws = libc::winsize {
        ws_row: size.rows,
        ws_col: size.cols,
        ws_xpixel: 0,
        ws_ypixel: 0,
    };
    // SAFETY: TIOCSWINSZ reads one `winsize` from the pointer, which outlives the call.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSWINSZ, &ws) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The caller's side: waits (blocking) for the master the workload sends on `sock`, and checks
/// it is one: a terminal, and the multiplexor's device (5:2), not whatever else a box could
/// send. None: the box ended before its workload got that far (its report says why).
pub fn receive_master(sock: &OwnedFd) -> io::Result<Option<OwnedFd>> {
    let mut tag = [0u8; 1];
    let (n, fds) = loop {
        match sys::recv_with_fds(sock.as_raw_fd(), &mut tag) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            r => break r?,
        }
    };
    let Some(master) = fds.into_iter().next() else {
        return Ok(None);
    };
    if n != 1 || tag != *TAG {
        return Err(io::Error::other(
            "the box sent something else than a terminal",
        ));
    }
    let st = nix::sys::stat::fstat(master.as_fd())?;
    let is_ptmx = st.st_mode & libc::S_IFMT == libc::S_IFCHR
        && libc::major(st.st_rdev) == 5
        && libc::minor(st.st_rdev) == 2;
    if !is_ptmx || !nix::unistd::isatty(master.as_fd()).unwrap_or(false) {
        return Err(io::Error::other(
            "the box sent a descriptor that is not a terminal's master",
        ));
    }
    Ok(Some(master))
}

/// The shell a terminal gets when the caller names no program (`sb.terminal()`, `kern attach`):
/// bash if the image has one, else sh.
pub fn shell_of(root: &RootSpec) -> &'static str {
    let root = match root {
        RootSpec::Dir { path } => path.clone(),
        RootSpec::Host => "/".into(),
    };
    // InRoot: /bin is a symlink to usr/bin in most images, resolved inside the image.
    let dir = crate::fsx::open_no_symlinks(&root).ok();
    let has = |p: &str| {
        dir.as_ref().is_some_and(|d| {
            crate::fsx::open_beneath(d, p, nix::fcntl::OFlag::O_PATH, crate::fsx::Resolve::InRoot)
                .is_ok()
        })
    };
    if has("bin/bash") || has("usr/bin/bash") {
        "bash"
    } else {
        "sh"
    }
}
