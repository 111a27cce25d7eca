//! A resident box's monitor once the box is up (`Resident::Start`): it writes the state file,
//! reports "started", detaches from its caller and keeps the box until its TTL, a stop or the
//! end of its PID 1, then removes the state. The build before it is `monitor`'s, as for any box.

use super::state::{self as res, State};
use crate::engine::monitor::faults;
use crate::engine::shared::handoff::{Fallback, Reporter};
use crate::engine::shared::protocol::pid1::Pid1Msg;
use crate::engine::shared::spec::BoxSpec;
use crate::engine::shared::status::BoxReport;
use crate::engine::shared::sys::{self, ProcId};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// What a resident box is started with.
pub(in crate::engine) struct ResidentStart<'a> {
    /// The box's namespaces, held open for the calls (see `State::ns_fds`).
    pub(in crate::engine) ns_files: Vec<(&'static str, std::fs::File)>,
    /// PID 1 unshared its cgroup namespace (see `init::child`).
    pub(in crate::engine) cgroup_ns: bool,
    pub(in crate::engine) name: &'a str,
    pub(in crate::engine) ttl_ms: u64,
    pub(in crate::engine) posture: &'a std::collections::BTreeMap<String, String>,
    pub(in crate::engine) pid: libc::pid_t,
    pub(in crate::engine) start: Instant,
    /// The box's v2 leaf, thawed before the box is killed (`freezer::thaw_own`).
    pub(in crate::engine) cgroup_leaf: Option<std::path::PathBuf>,
}

/// A resident box's life after its clone: wait for PID 1's "ready", write the state file (the
/// opener holds the name's lock), report "started", then detach from the caller entirely (new
/// session, stdio and control socket closed, the lifeline ignored) so the box outlives the
/// process that opened it. Ends at the TTL, on SIGTERM, or when PID 1 dies (a stop: SIGKILL
/// through its pidfd); then removes the state (the cgroup goes in `run_box`).
pub(in crate::engine) fn keep_resident(
    spec: &BoxSpec,
    r: ResidentStart<'_>,
    pidfd: OwnedFd,
    init_r: OwnedFd,
    fallback: &Fallback,
    reporter: &mut Reporter<'_>,
) -> BoxReport {
    let kill = |why: String| {
        let _ = sys::pidfd_kill(pidfd.as_fd(), libc::SIGKILL);
        let _ = waitpid(Pid::from_raw(r.pid), None);
        BoxReport::startup_failed(why)
    };
    let start_deadline = r.start + Duration::from_millis(spec.timeout_ms);
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    loop {
        let left = start_deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return kill("the resident box did not finish its setup in time".into());
        }
        let mut fds = [PollFd::new(init_r.as_fd(), PollFlags::POLLIN)];
        match poll(
            &mut fds,
            PollTimeout::from(left.as_millis().min(60_000) as u16),
        ) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => return kill(format!("poll: {e}")),
        }
        match nix::unistd::read(&init_r, &mut byte) {
            Ok(1) if byte[0] == b'\n' => break,
            Ok(1) => line.push(byte[0]),
            _ => break,
        }
    }
    let line = String::from_utf8_lossy(&line).into_owned();
    match Pid1Msg::decode(&line) {
        Ok(Pid1Msg::Ready) => {}
        Ok(Pid1Msg::SetupFailed(w)) => {
            return kill(format!("the box could not be built: {}", w.trim()))
        }
        _ => return kill("the resident box's init ended during its setup".into()),
    }
    let me = std::process::id() as i32;
    let ids = ProcId::of(r.pid).and_then(|p| ProcId::of(me).map(|m| (p, m)));
    let (pid1, monitor) = match ids {
        Ok(ids) => ids,
        Err(e) => return kill(format!("read the box's start time: {e}")),
    };
    let dir = match res::state_dir() {
        Ok(d) => d,
        Err(e) => return kill(e.to_string()),
    };
    let now = res::now_unix_ms();
    let state = State {
        name: r.name.to_string(),
        pid1,
        monitor,
        posture_hash: res::posture_hash(r.posture),
        posture: r.posture.clone(),
        workspace: spec.workspace.clone(),
        created_unix_ms: now,
        deadline_unix_ms: now + r.ttl_ms,
        spec: spec.clone(),
        rlimits: fallback.clone(),
        cgroup_ns: r.cgroup_ns,
        ns_fds: r
            .ns_files
            .iter()
            .map(|(k, f)| (k.to_string(), f.as_raw_fd()))
            .collect(),
    };
    if let Err(e) = res::write(&dir, &state) {
        return kill(e.to_string());
    }
    if let Some(report) = reporter.take() {
        report(&BoxReport {
            started: Some(pid1),
            ..Default::default()
        });
    }
    // From here on nothing of the caller's may end the box: not its process group's signals
    // (a terminal's ^C or hang-up), not its exit. SIGTERM is a polite stop.
    let _ = nix::unistd::setsid();
    let _ = sys::detach_stdio();
    use nix::sys::signal::{SigSet, Signal};
    let mut mask = SigSet::empty();
    for sig in [
        Signal::SIGTERM,
        Signal::SIGINT,
        Signal::SIGHUP,
        Signal::SIGPIPE,
    ] {
        mask.add(sig);
    }
    let sigfd = mask.thread_block().and_then(|_| {
        nix::sys::signalfd::SignalFd::with_flags(&mask, nix::sys::signalfd::SfdFlags::SFD_CLOEXEC)
    });
    let deadline = r.start + Duration::from_millis(r.ttl_ms);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        let mut fds = vec![PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        if let Ok(s) = &sigfd {
            fds.push(PollFd::new(s.as_fd(), PollFlags::POLLIN));
        }
        match poll(
            &mut fds,
            PollTimeout::from(left.as_millis().min(60_000) as u16),
        ) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(_) => break,
        }
        if fds[0].revents().is_some_and(|r| !r.is_empty()) {
            break;
        }
        drop(fds);
        if let Ok(s) = &sigfd {
            if let Ok(Some(info)) = s.read_signal() {
                if info.ssi_signo == Signal::SIGTERM as u32 {
                    break;
                }
            }
        }
    }
    let _ = sys::pidfd_kill(pidfd.as_fd(), libc::SIGKILL);
    // Paused (`kern pause`): thawed, or on cgroup v1 its frozen tasks would not die.
    crate::engine::monitor::freezer::thaw_own(r.cgroup_leaf.as_deref());
    let _ = waitpid(Pid::from_raw(r.pid), None);
    // Nobody reads this report: a sweep that fails has said so on kern's stderr.
    let _ = faults::sweep_setid(spec);
    res::remove_if_monitor(&dir, r.name, &monitor);
    BoxReport::default()
}
