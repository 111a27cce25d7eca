//! The egress relay (`egressAllow`): a process in the box, forked by its PID 1 once the mounts
//! and `lo` are up, that listens on `127.0.0.1:<port>` in the box's own network namespace and
//! hands every connection it accepts, the socket itself, to the caller's proxy over `line`
//! (SCM_RIGHTS). No byte of traffic passes through a process in the box, the proxy reads
//! exactly what the workload sent, and the box has no other way out: its namespace has only
//! `lo`, and the proxy is not an address it could dial.

use super::mounts::SetupError;
use super::sys::{self, Forked};
use std::net::TcpListener;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// Binds the relay's port (so a failure is the box's setup failure), then forks the relay.
/// The caller (PID 1) keeps neither the listener nor `line`.
pub fn start(port: u16, line: OwnedFd) -> Result<(), SetupError> {
    let listener = TcpListener::bind(("127.0.0.1", port))
        .map_err(|e| SetupError(format!("egress relay: listen on 127.0.0.1:{port}: {e}")))?;
    match sys::clone_fork(0) {
        Ok(Forked::Child) => relay(listener, line),
        Ok(Forked::Parent(_)) => Ok(()),
        Err(e) => Err(SetupError(format!("egress relay: fork: {e}"))),
    }
}

fn relay(listener: TcpListener, line: OwnedFd) -> ! {
    sys::close_others(&[listener.as_raw_fd(), line.as_raw_fd()]);
    // It needs no privilege to accept and pass sockets on.
    if sys::capset_clear().is_err() || nix::sys::prctl::set_no_new_privs().is_err() {
        sys::exit_now(1);
    }
    loop {
        let Ok((conn, _)) = listener.accept() else {
            continue;
        };
        // The proxy gone (its end closed) ends the relay; the box then has no way out at all.
        if sys::send_with_fds(line.as_fd(), b"c", &[conn.as_raw_fd()]).is_err() {
            sys::exit_now(0);
        }
    }
}
