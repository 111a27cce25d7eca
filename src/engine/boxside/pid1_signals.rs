//! PID 1's signals, without a single signal handler. The signals a caller may send the workload
//! (`handoff::SIGNALS`, through the monitor) and SIGCHLD are blocked and read from a signalfd in
//! PID 1's loop: a blocked signal is queued whatever its disposition, so one from outside the
//! PID namespace still reaches PID 1 (an unblocked one with the default action would be dropped,
//! as for any namespace's init).
//!
//! Handlers were what a burst of signals from inside the box could turn against PID 1: each
//! nested on the one it interrupted, and on the small alternate stack of Rust's own SIGSEGV
//! handler (itself reachable with `kill(1, SIGSEGV)`) a few nested frames ran off its end and
//! PID 1 died of SIGSEGV. Now nothing runs asynchronously in PID 1, and SIGSEGV and SIGBUS are
//! back to their default, which the kernel drops when the box sends them to its init.

use crate::engine::shared::handoff;
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

/// SIGCHLD and the signals a caller may send the workload, read from `fd`.
pub(in crate::engine) struct Pid1Signals {
    fd: SignalFd,
}

impl Pid1Signals {
    /// Blocks the signals PID 1 reads and opens the signalfd; before the workload's fork, so a
    /// signal sent meanwhile waits in the queue (the workload unblocks everything before its
    /// exec, `sys::default_signals`). Also drops Rust's SIGSEGV and SIGBUS handlers.
    pub(in crate::engine) fn take() -> nix::Result<Pid1Signals> {
        let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
        for sig in [Signal::SIGSEGV, Signal::SIGBUS] {
            // SAFETY: as above; the default action is not a function of ours.
            unsafe { sigaction(sig, &default) }?;
        }
        let mut mask = SigSet::empty();
        mask.add(Signal::SIGCHLD);
        for (_, sig) in handoff::SIGNALS {
            if let Ok(s) = Signal::try_from(*sig) {
                if s != Signal::SIGKILL {
                    mask.add(s);
                }
            }
        }
        mask.thread_block()?;
        let fd = SignalFd::with_flags(&mask, SfdFlags::SFD_CLOEXEC | SfdFlags::SFD_NONBLOCK)?;
        Ok(Pid1Signals { fd })
    }

    pub(in crate::engine) fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        use std::os::fd::AsFd;
        self.fd.as_fd()
    }

    /// Takes every signal queued: one a caller sent the workload goes on to its process group;
    /// the rest (SIGCHLD, and any the box sent its init) only wake PID 1 to reap.
    pub(in crate::engine) fn take_queued(&self, workload: libc::pid_t) {
        while let Ok(Some(info)) = self.fd.read_signal() {
            // Only a signal from outside the box's PID namespace (the monitor's: its sender
            // shows as pid 0 here) is the caller's. One from inside the box, or one the kernel
            // made (a terminal's), leaves the workload alone.
            let caller = info.ssi_code == libc::SI_USER
                && info.ssi_pid == 0
                && info.ssi_signo != libc::SIGCHLD as u32;
            if caller && workload > 0 {
                // The workload's own group (it is a session leader), inside this namespace.
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(workload),
                    Signal::try_from(info.ssi_signo as i32).ok(),
                );
            }
        }
    }
}
