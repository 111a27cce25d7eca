//! kern's side of one call forked by the zygote (steps 2–3 of the module's sequence): place the
//! fork in the call's cgroup, send it the plans and the call's descriptors, then watch the
//! call's PID 1 until it ends (or kill it at the deadline, or when the caller goes), and conclude
//! as for a fresh box.

use crate::engine::monitor::cgroup::BoxCgroup;
use crate::engine::monitor::faults;
use crate::engine::plan;
use crate::engine::shared::handoff::{self, BoxFds, Fallback};
use crate::engine::shared::protocol::fork::{FromFork, ToFork};
use crate::engine::shared::protocol::pid1::Pid1Msg;
use crate::engine::shared::spec::BoxSpec;
use crate::engine::shared::status::{BoxReport, Fault, FaultKind};
use crate::engine::shared::sys;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket::{recvmsg, setsockopt, sockopt, ControlMessageOwned, MsgFlags};
use nix::sys::wait::WaitStatus;
use nix::unistd::Pid;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// How long C may take to say how P ended once P is gone (it only waits for P).
const STATUS_GRACE: Duration = Duration::from_secs(5);

/// One message from the call's socket: its bytes and the sender's host pid; None once there is
/// none to come (every end in the call closed) or by `deadline`.
fn receive(sock: &OwnedFd, deadline: Instant) -> Option<(Vec<u8>, Option<libc::pid_t>)> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        let mut fds = [PollFd::new(sock.as_fd(), PollFlags::POLLIN)];
        let ms = left.as_millis().min(60_000) as u16;
        match poll(&mut fds, PollTimeout::from(ms.max(1))) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(_) => return None,
        }
        let mut buf = vec![0u8; 4096];
        let mut cmsg = nix::cmsg_space!(nix::sys::socket::UnixCredentials);
        let mut iov = [std::io::IoSliceMut::new(&mut buf)];
        let msg = match recvmsg::<()>(
            sock.as_raw_fd(),
            &mut iov,
            Some(&mut cmsg),
            MsgFlags::MSG_CMSG_CLOEXEC,
        ) {
            Ok(m) => m,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return None,
        };
        let n = msg.bytes;
        let mut pid = None;
        if let Ok(cmsgs) = msg.cmsgs() {
            for c in cmsgs {
                if let ControlMessageOwned::ScmCredentials(cred) = c {
                    pid = Some(cred.pid());
                }
            }
        }
        if n == 0 {
            return None;
        }
        buf.truncate(n);
        return Some((buf, pid));
    }
}

/// Keeps a message of the call: C's `Pid1Msg::Reaped` (how P ended) apart, the rest as init
/// lines for `faults::conclude` (which says what a garbled one was).
fn take(m: &[u8], messages: &mut Vec<u8>, status: &mut Option<i32>) {
    match FromFork::decode(m) {
        Ok(FromFork::Said(Pid1Msg::Reaped(s))) => *status = Some(s),
        _ => messages.extend_from_slice(m),
    }
}

/// Why a box's (or the zygote's) setup failed: what its processes said, or `otherwise` if they
/// said nothing.
pub fn said_or(messages: &[u8], otherwise: &str) -> String {
    let said = String::from_utf8_lossy(messages).trim().to_string();
    if said.is_empty() {
        otherwise.into()
    } else {
        said
    }
}

/// How long a zygote's fork may take to become a call's box, before any call (a cold page
/// cache on a slow disk is many times the milliseconds it takes here).
const ARRANGE_TIMEOUT: Duration = Duration::from_secs(60);

/// A call's box forked from the zygote and set up before the call came: its workload waits,
/// in its posture, for the call's channel.
pub struct Arranged {
    sock: OwnedFd,
    /// C, the zygote's fork (the host's pid).
    call_pid: libc::pid_t,
    /// P, PID 1 of the call, and a pidfd on it.
    pid1: libc::pid_t,
    pidfd: OwnedFd,
    /// What the call's processes said so far (a note, a failure), and C's status.
    messages: Vec<u8>,
    status: Option<i32>,
}

impl Arranged {
    /// Ends the arranged box unused (no call came): P's end ends every process in it.
    pub fn discard(&self) {
        let _ = sys::pidfd_kill(self.pidfd.as_fd(), libc::SIGKILL);
        let mut fds = [PollFd::new(self.pidfd.as_fd(), PollFlags::POLLIN)];
        let _ = poll(&mut fds, PollTimeout::from(1000u16));
        let _ = nix::sys::signal::kill(
            Pid::from_raw(self.call_pid),
            nix::sys::signal::Signal::SIGKILL,
        );
    }
}

/// Sets up a call's box ahead of the call (kern's spare, once in its cgroup): the zygote's fork
/// C says who it is on `sock`, goes into the call's cgroup (`cgroup`), gets the plans and the
/// box's stdout and stderr, and makes the box; its workload then waits, in its posture, for the
/// call's channel (`run`).
pub fn arrange(
    cgroup: Option<&BoxCgroup>,
    fallback: &Fallback,
    inputs: &plan::Inputs,
    sock: OwnedFd,
) -> Result<Arranged, String> {
    let deadline = Instant::now() + ARRANGE_TIMEOUT;
    setsockopt(&sock, sockopt::PassCred, &true)
        .map_err(|e| format!("the zygote's socket: SO_PASSCRED: {e}"))?;
    let call_pid = match receive(&sock, deadline) {
        Some((m, Some(pid))) if FromFork::decode(&m) == Ok(FromFork::Forked) => pid,
        _ => return Err("the Sandbox's zygote did not fork the call's box (has it ended?)".into()),
    };
    let kill_call = || {
        let _ = nix::sys::signal::kill(Pid::from_raw(call_pid), nix::sys::signal::Signal::SIGKILL);
    };
    if let Some(cg) = cgroup {
        if let Err(e) = cg.add(call_pid) {
            kill_call();
            return Err(format!(
                "cannot move the zygote's fork into the call's cgroup: {e}"
            ));
        }
    }
    let plans = plan::plans(inputs, fallback, |name| {
        plan::pid1::proc_kind_at("/proc", name)
    });
    let json = match ToFork::Plans(&plans).encode() {
        Ok(json) => json,
        Err(e) => {
            kill_call();
            return Err(format!("internal error: {e}"));
        }
    };
    let out = std::io::stdout();
    let err = std::io::stderr();
    let fds = [out.as_fd().as_raw_fd(), err.as_fd().as_raw_fd()];
    if let Err(e) = sys::send_with_fds(sock.as_fd(), &json, &fds) {
        kill_call();
        return Err(format!("cannot send the zygote's fork its plans: {e}"));
    }
    let mut messages = Vec::new();
    let mut status: Option<i32> = None;
    // P, PID 1 of the call, says who it is; or C says why it could not make it.
    let pid1 = loop {
        match receive(&sock, deadline) {
            Some((m, Some(pid))) if FromFork::decode(&m) == Ok(FromFork::Pid1) => break Some(pid),
            Some((m, _)) => take(&m, &mut messages, &mut status),
            None => break None,
        }
    };
    let Some((pid1, pidfd)) = pid1.and_then(|p| sys::pidfd_open(p).ok().map(|fd| (p, fd))) else {
        kill_call();
        return Err(said_or(
            &messages,
            "the zygote's fork ended before the call's PID 1 started",
        ));
    };
    // The workload is ready (in its posture), or says why not; no call goes to a box that did
    // not say it was ready.
    let ready = loop {
        match receive(&sock, deadline) {
            Some((m, _)) if FromFork::decode(&m) == Ok(FromFork::Said(Pid1Msg::Waiting)) => {
                break true
            }
            Some((m, _)) => take(&m, &mut messages, &mut status),
            None => break false,
        }
        if !messages.is_empty() {
            break false;
        }
    };
    if !ready {
        let _ = sys::pidfd_kill(pidfd.as_fd(), libc::SIGKILL);
        kill_call();
        return Err(said_or(
            &messages,
            "the call's box did not say it was ready",
        ));
    }
    Ok(Arranged {
        sock,
        call_pid,
        pid1,
        pidfd,
        messages,
        status,
    })
}

/// How a call went in its arranged box.
pub enum Ran {
    Report(Box<BoxReport>),
    /// The box was gone before the call came (the zygote ended, or the box's setup failed):
    /// nothing of the call ran, and its descriptors are back for a fresh box; why.
    Unused(BoxFds, String),
}

/// Runs the call in its arranged box: the channel goes to the waiting workload, then P is
/// watched until it ends, and the call concluded as a fresh box's. `cgroup`: the call's, where
/// kern made one.
pub fn run(
    spec: &BoxSpec,
    mut a: Arranged,
    inputs: &plan::Inputs,
    cgroup: Option<&BoxCgroup>,
    passed: BoxFds,
    lifeline: Option<BorrowedFd<'_>>,
) -> Ran {
    let deadline = Instant::now() + Duration::from_millis(spec.timeout_ms);
    // The box was made from the Sandbox's settings when kern started; the call's must be those.
    if spec.tmpfs != inputs.tmpfs || spec.hostname != inputs.hostname {
        a.discard();
        return Ran::Unused(
            passed,
            "the call's scratch mounts or hostname are not those its box was made with".into(),
        );
    }
    let ended = {
        let mut fds = [PollFd::new(a.pidfd.as_fd(), PollFlags::POLLIN)];
        poll(&mut fds, PollTimeout::ZERO).is_ok_and(|n| n > 0)
    };
    let said = String::from_utf8_lossy(&a.messages).trim().to_string();
    let unsent = match (&passed.channel, ended, said.is_empty()) {
        (None, _, _) => Some("the call has no channel".to_string()),
        (_, _, false) => Some(format!("its box said: {said}")),
        (_, true, _) => Some("its box had ended before the call came".to_string()),
        (Some(channel), false, true) => {
            let go = ToFork::Go.encode().unwrap_or_default();
            sys::send_with_fds(a.sock.as_fd(), &go, &[channel.as_raw_fd()])
                .err()
                .map(|e| format!("its box had ended before the call came ({e})"))
        }
    };
    if let Some(why) = unsent {
        a.discard();
        return Ran::Unused(passed, why);
    }
    // Only the call holds the channel now: its far end sees EOF when the call is gone.
    drop(passed);
    let ended_by = watch(
        &a.pidfd,
        &a.sock,
        deadline,
        lifeline,
        spec,
        &mut a.messages,
        &mut a.status,
    );
    // What is left to say (C's status) comes once P is gone.
    let grace = Instant::now() + STATUS_GRACE;
    while a.status.is_none() {
        match receive(&a.sock, grace) {
            Some((m, _)) => take(&m, &mut a.messages, &mut a.status),
            None => break,
        }
    }
    let init_status = match a.status {
        Some(s) => WaitStatus::from_raw(Pid::from_raw(a.pid1), s),
        None => Err(nix::errno::Errno::ECHILD),
    };
    let oom = cgroup
        .filter(|cg| cg.oom_kills() > 0)
        .map(|cg| cg.shmem_bytes());
    let messages = String::from_utf8_lossy(&a.messages).into_owned();
    Ran::Report(Box::new(faults::conclude(
        spec,
        &messages,
        ended_by,
        oom,
        init_status,
        "call's PID 1",
    )))
}

/// Until P ends: its lines, the deadline, the caller. Returns kern's own reason, if it ended
/// the call.
#[allow(clippy::too_many_arguments)]
fn watch(
    pidfd: &OwnedFd,
    sock: &OwnedFd,
    deadline: Instant,
    lifeline: Option<BorrowedFd<'_>>,
    spec: &BoxSpec,
    messages: &mut Vec<u8>,
    status: &mut Option<i32>,
) -> Option<Fault> {
    let mut said = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            let _ = sys::pidfd_kill(pidfd.as_fd(), libc::SIGKILL);
            return Some(Fault::new(
                FaultKind::Timeout,
                format!(
                    "the call ran past its timeout of {}s; kern killed the box and every process in it",
                    spec.timeout_ms as f64 / 1000.0
                ),
            ));
        }
        let mut fds = vec![
            PollFd::new(pidfd.as_fd(), PollFlags::POLLIN),
            PollFd::new(sock.as_fd(), PollFlags::POLLIN),
        ];
        if let Some(l) = lifeline {
            fds.push(PollFd::new(l, PollFlags::POLLIN));
        }
        let ms = left.as_millis().min(60_000) as u16;
        match poll(&mut fds, PollTimeout::from(ms.max(1))) {
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                let _ = sys::pidfd_kill(pidfd.as_fd(), libc::SIGKILL);
                return Some(Fault::new(
                    FaultKind::Killed,
                    format!("kern lost track of the box (poll: {e}) and killed it"),
                ));
            }
        }
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        if ready[1] {
            if let Some((m, _)) = receive(sock, deadline) {
                take(&m, messages, status);
            }
        }
        if ready[0] {
            return None;
        }
        if ready.get(2) == Some(&true) {
            if let Some(l) = lifeline {
                if handoff::read_commands(l, &mut said).is_none() {
                    let _ = sys::pidfd_kill(pidfd.as_fd(), libc::SIGKILL);
                    return Some(Fault::new(
                        FaultKind::Killed,
                        "the caller ended the call (Sandbox.close() while it ran, or the caller's process exited); kern killed the box",
                    ));
                }
            }
        }
    }
}
