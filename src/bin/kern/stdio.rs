//! kern's own stdio while a box runs from the CLI (`kern run`, `kern exec`, `kern attach`): none
//! of the host's descriptors reaches the box, in any mode. Before the box (or a call's init) is
//! cloned, kern's fds 0, 1 and 2 become /dev/null and pipes, which is what the box's init
//! inherits; kern keeps close-on-exec duplicates of the host's, which the init closes before
//! any code of the box runs. As docker and podman do for a container without a terminal: a
//! terminal (or a file) at the box's stdout would let it read what the operator types, change
//! the terminal's modes and size, or seek and truncate the file.
//!
//! With `-t` the box's stdio is its own terminal (`interactive`), and fds 1 and 2 are one pipe
//! of notes (what kern and the init say meanwhile), said on stderr once the box has ended and
//! the host's terminal is restored. Without, they are two pipes, relayed to the host's stdout
//! and stderr as they come by a thread (`relay_streams`).

use kern_sandbox::engine::shared::sys;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicI32, Ordering};

/// The most relayed after the box (or the call) has ended: a process a call left running in a
/// resident box may still be writing.
pub const DRAIN_MAX: usize = 4 << 20;

/// What kern's fds 0, 1 and 2 were (close-on-exec duplicates) while they are swapped away.
pub struct HostStdio {
    pub input: OwnedFd,
    pub output: OwnedFd,
    pub errors: OwnedFd,
    /// With -t: the read end of the pipe at 1 and 2.
    notes: Option<OwnedFd>,
}

/// The read ends of the pipes at kern's fds 1 and 2 (without -t).
pub struct Streams {
    out: OwnedFd,
    err: OwnedFd,
}

/// kern's stderr while it is swapped away, for the panic hook.
pub static HOST_STDERR: AtomicI32 = AtomicI32::new(-1);

impl HostStdio {
    /// With -t: /dev/null at 0 and one pipe at 1 and 2, read once the box has ended.
    pub fn take_for_terminal() -> io::Result<HostStdio> {
        let (notes, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        // The read end only: it is read once, for what is there. Writers (kern, the box's
        // init) keep a blocking end.
        nix::fcntl::fcntl(
            &notes,
            nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
        )?;
        let mut host = HostStdio::set_aside(&w, &w)?;
        host.notes = Some(notes);
        Ok(host)
    }

    /// Without -t: /dev/null at 0 and a pipe each at 1 and 2, for `relay_streams`.
    pub fn take_piped() -> io::Result<(HostStdio, Streams)> {
        let (out, out_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let (err, err_w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)?;
        let host = HostStdio::set_aside(&out_w, &err_w)?;
        Ok((host, Streams { out, err }))
    }

    fn set_aside(out: &OwnedFd, err: &OwnedFd) -> io::Result<HostStdio> {
        let input = dup_std(0)?;
        let output = dup_std(1)?;
        let errors = dup_std(2)?;
        sys::detach_fds(&[0])?;
        let placed = sys::place_at(out.as_fd(), 1).and_then(|()| sys::place_at(err.as_fd(), 2));
        let host = HostStdio {
            input,
            output,
            errors,
            notes: None,
        };
        if let Err(e) = placed {
            host.give_back();
            return Err(e);
        }
        HOST_STDERR.store(host.errors.as_raw_fd(), Ordering::SeqCst);
        Ok(host)
    }

    /// Puts kern's stdio back, then writes what the notes pipe holds to stderr. Every writer of
    /// it is gone by now (the box, or the call's init, has ended; kern's ends were just
    /// replaced), so what is in it is all there will be.
    pub fn give_back(self) {
        let _ = sys::place_at(self.input.as_fd(), 0);
        let _ = sys::place_at(self.output.as_fd(), 1);
        let _ = sys::place_at(self.errors.as_fd(), 2);
        HOST_STDERR.store(-1, Ordering::SeqCst);
        if let Some(notes) = &self.notes {
            let mut said = Vec::new();
            sys::read_available(notes, &mut said);
            let _ = write_all(io::stderr().as_fd(), &said);
        }
    }
}

/// Without -t: the box's stdout and stderr to the host's, as they come, until `stop` is
/// readable (the box or the call has ended); then what the pipes hold, bounded. A host side
/// that fails (a closed pipe) is dropped, but its stream is still read, so the box never
/// blocks on it. Runs in a thread once the workload is about to exec, or in `finish` when the
/// box ended before.
pub fn relay_streams(streams: Streams, out: OwnedFd, err: OwnedFd, stop: OwnedFd) {
    let mut buf = vec![0u8; 64 * 1024];
    // (the box's end, the host's, still open, host side still fine)
    let mut pairs = [
        (streams.out, out, true, true),
        (streams.err, err, true, true),
    ];
    let pass = |pair: &mut (OwnedFd, OwnedFd, bool, bool), buf: &mut [u8]| -> usize {
        match nix::unistd::read(&pair.0, buf) {
            Ok(n @ 1..) => {
                pair.3 = pair.3 && write_all(pair.1.as_fd(), &buf[..n]).is_ok();
                n
            }
            Err(nix::errno::Errno::EINTR | nix::errno::Errno::EAGAIN) => 0,
            Ok(0) | Err(_) => {
                pair.2 = false;
                0
            }
        }
    };
    loop {
        let mut fds = vec![PollFd::new(stop.as_fd(), PollFlags::POLLIN)];
        fds.extend(pairs.iter().map(|p| {
            PollFd::new(
                p.0.as_fd(),
                if p.2 {
                    PollFlags::POLLIN
                } else {
                    PollFlags::empty()
                },
            )
        }));
        match poll(&mut fds, PollTimeout::NONE) {
            Ok(_) | Err(nix::errno::Errno::EINTR) => {}
            Err(_) => break,
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        if ready[0] {
            break;
        }
        for (i, pair) in pairs.iter_mut().enumerate() {
            if pair.2 && ready[i + 1] {
                pass(pair, &mut buf);
            }
        }
    }
    let mut left = DRAIN_MAX;
    for pair in pairs.iter_mut() {
        while pair.2 && left > 0 && readable(pair.0.as_fd()) {
            left = left.saturating_sub(pass(pair, &mut buf).max(1));
        }
    }
}

/// A close-on-exec duplicate of the standard descriptor `fd`, above 2.
pub fn dup_std(fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: fcntl(F_DUPFD_CLOEXEC) on an integer fd touches no memory; on success the new
    // descriptor is owned by nobody else.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: see above.
    Ok(unsafe { OwnedFd::from_raw_fd(new) })
}

/// Whether `fd` has something to read (or has hung up) right now.
pub fn readable(fd: BorrowedFd<'_>) -> bool {
    let mut fds = [PollFd::new(fd, PollFlags::POLLIN)];
    matches!(poll(&mut fds, PollTimeout::ZERO), Ok(n) if n > 0)
}

/// All of `data` to `fd`, waiting where it is non-blocking (a descriptor shared with the
/// caller, who may have set O_NONBLOCK on it).
pub fn write_all(fd: BorrowedFd<'_>, mut data: &[u8]) -> io::Result<()> {
    while !data.is_empty() {
        match nix::unistd::write(fd, data) {
            Ok(n) => data = &data[n..],
            Err(nix::errno::Errno::EINTR) => {}
            Err(nix::errno::Errno::EAGAIN) => {
                let mut fds = [PollFd::new(fd, PollFlags::POLLOUT)];
                let _ = poll(&mut fds, PollTimeout::NONE);
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}
