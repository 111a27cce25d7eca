//! The egress relay (`egressAllow`): a process in the box, forked by its PID 1 once the mounts
//! and `lo` are up, that listens on `127.0.0.1:<port>` in the box's own network namespace and
//! hands every connection it accepts, the socket itself, to the caller's proxy over `line`
//! (SCM_RIGHTS). No byte of traffic passes through a process in the box, the proxy reads
//! exactly what the workload sent, and the box has no other way out: its namespace has only
//! `lo`, and the proxy is not an address it could dial.
//!
//! A loopback address `egressAllow` lists (`127.0.0.1:8080`) gets a listener of its own at the
//! same address in the box: clients skip the proxy for loopback (`NO_PROXY`), so they connect
//! there, and the proxy tunnels the connection to the host's address (after the same checks as
//! any other request). Each socket goes over `line` with one tag: `c` (a proxy client) or
//! `d<ip> <port>` (a tunnel to that listed address).

use super::mounts::SetupError;
use crate::engine::shared::sys::{self, Forked};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use std::net::{IpAddr, TcpListener};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};

/// Binds the relay's port and the listed loopback addresses (so a failure is the box's setup
/// failure), then forks the relay. The caller (PID 1) keeps neither the listeners nor `line`.
pub fn start(port: u16, direct: &[(IpAddr, u16)], line: OwnedFd) -> Result<(), SetupError> {
    let mut listeners = vec![(
        TcpListener::bind(("127.0.0.1", port))
            .map_err(|e| SetupError(format!("egress relay: listen on 127.0.0.1:{port}: {e}")))?,
        b"c".to_vec(),
    )];
    for (ip, p) in direct {
        let l = TcpListener::bind((*ip, *p)).map_err(|e| {
            SetupError(format!(
                "egress relay: listen on {ip} port {p} for the listed egressAllow address: {e}"
            ))
        })?;
        let host = match ip {
            IpAddr::V4(v4) => v4.to_string(),
            IpAddr::V6(v6) => format!("[{v6}]"),
        };
        listeners.push((l, format!("d{host} {p}").into_bytes()));
    }
    match sys::clone_fork(0) {
        Ok(Forked::Child) => relay(listeners, line),
        Ok(Forked::Parent(_)) => Ok(()),
        Err(e) => Err(SetupError(format!("egress relay: fork: {e}"))),
    }
}

fn relay(listeners: Vec<(TcpListener, Vec<u8>)>, line: OwnedFd) -> ! {
    let mut keep: Vec<RawFd> = listeners.iter().map(|(l, _)| l.as_raw_fd()).collect();
    keep.push(line.as_raw_fd());
    sys::close_others(&keep);
    // Nothing to say on kern's output pipes, and no reason to hold them open.
    let _ = sys::detach_fds(&[1, 2]);
    // It needs no privilege to accept and pass sockets on.
    if sys::capset_clear().is_err() || nix::sys::prctl::set_no_new_privs().is_err() {
        sys::exit_now(1);
    }
    loop {
        let mut fds: Vec<PollFd<'_>> = listeners
            .iter()
            .map(|(l, _)| PollFd::new(l.as_fd(), PollFlags::POLLIN))
            .collect();
        if poll(&mut fds, PollTimeout::NONE).is_err() {
            continue;
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        for ((listener, tag), ready) in listeners.iter().zip(ready) {
            if !ready {
                continue;
            }
            let Ok((conn, _)) = listener.accept() else {
                continue;
            };
            // The proxy gone (its end closed) ends the relay; the box then has no way out.
            if sys::send_with_fds(line.as_fd(), tag, &[conn.as_raw_fd()]).is_err() {
                sys::exit_now(0);
            }
        }
    }
}
