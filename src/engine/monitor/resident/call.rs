//! One call into a live resident box (`persist`), from the `kern` that runs it (its init, the
//! child side, is `init::call_init`). That `kern` stays on the host, as
//! a fresh box's monitor does: it makes a per-call child of the box's cgroup and, on cgroup v2
//! (Linux 5.7+), clones the call's init straight into it (`clone3(CLONE_INTO_CGROUP)`);
//! elsewhere it moves itself in first (done when it is a spare, off the call's path), then
//! forks the call's init. The call's init joins
//! every namespace of the box through the descriptors the box's monitor holds (user first; a
//! pidfd `setns` would need ptrace rights over the non-dumpable PID 1, which only root has),
//! makes a cgroup namespace at its own cgroup, takes the ids a fresh box's setup runs as, and
//! forks the workload, which is then inside the
//! box's PID namespace and gets exactly a fresh workload's posture (`init::exec_workload`). Like
//! a fresh box's PID 1, the call's init answers the untrusted profile's seccomp notifications
//! and reports the exit on the init pipe; it is outside the box's PID namespace, so nothing in
//! the box can see or signal it.
//!
//! A timeout (or the caller going away) kills the call only: every process of its cgroup, or,
//! without cgroups (rootless), its process group — a process that started its own session
//! escapes that and lives on in the box until the box ends (its PID 1 reaps it).

use super::state::{self, State};
use crate::engine::boxside::init::{self, Joining};
use crate::engine::monitor::cgroup::{self, CallCgroup};
use crate::engine::monitor::faults;
use crate::engine::monitor::idmap::Mapping;
use crate::engine::shared::handoff::{self, BoxFds, CallTarget, Caller, Fallback};
use crate::engine::shared::protocol::pid1::Pid1Msg;
use crate::engine::shared::spec::{BoxSpec, Resident};
use crate::engine::shared::status::{self, BoxReport, Fault, FaultKind};
use crate::engine::shared::sys::{self, Forked};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// A `kern` ready to run one call in a resident box: it found the box, holds a pidfd of its
/// PID 1, and has the call's cgroup (inside it, or holding it open for the call's init).
pub struct PreparedCall {
    target: CallTarget,
    found: Result<(State, OwnedFd), String>,
    cgroup: Option<CallCgroup>,
    oom_adj: Option<String>,
}

fn gone(name: &str, why: &str) -> String {
    format!("the resident box {name} was destroyed or reached its TTL ({why}); open a new Sandbox to start a new one")
}

/// Finds the box `target` names and makes a new call cgroup under it (moving into it where the
/// call's init can't be born there).
pub fn prepare(target: &CallTarget) -> PreparedCall {
    let found = state::state_dir()
        .map_err(|e| e.to_string())
        .and_then(|d| state::read(&d, &target.name).map_err(|e| e.to_string()))
        .and_then(|s| s.ok_or_else(|| gone(&target.name, "no state file")))
        .and_then(|s| {
            if s.pid1 != target.pid1 {
                return Err(gone(&target.name, "another box has that name now"));
            }
            let fd = s
                .pid1
                .pidfd()
                .ok_or_else(|| gone(&target.name, "its PID 1 has exited"))?;
            Ok((s, fd))
        });
    let mut found = found;
    let mut cgroup = None;
    let mut oom_adj = None;
    if found.is_ok() {
        // Said here, before the spec comes, so the note stands among those kern sends when
        // prepared (`Said::Prepared`): ahead of anything the call writes.
        if !crate::engine::boxside::landlock::available() {
            status::note(
                "warning",
                "this kernel has no Landlock, so processes left running in the resident box by earlier calls can read this call's memory and environment; enable Landlock (the lsm= boot parameter) to isolate calls",
            );
        }
        let nanos = state::now_unix_ms();
        let id = format!("{}-{nanos}", std::process::id());
        match CallCgroup::enter(target.pid1.pid, &id, cgroup::birth_possible()) {
            Ok(c) => cgroup = c,
            Err(why) => found = Err(why),
        }
        if cgroup.as_ref().is_some_and(|c| c.birth().is_none()) {
            // As a fresh box's monitor: the OOM killer must pick the call, never its reporter.
            let before = std::fs::read_to_string("/proc/self/oom_score_adj").ok();
            if std::fs::write("/proc/self/oom_score_adj", "-1000").is_ok() {
                oom_adj = before.map(|b| b.trim().to_string());
            }
        }
    }
    PreparedCall {
        target: target.clone(),
        found,
        cgroup,
        oom_adj,
    }
}

impl PreparedCall {
    pub fn release(self) {
        if let Some(cg) = &self.cgroup {
            cg.leave_and_remove();
        }
    }
}

/// Runs one call and reports it, like `monitor::run_box` for a fresh box.
pub fn run_call(spec: &BoxSpec, prepared: PreparedCall, caller: Caller<'_>) {
    // The call's init sends its mount namespace into this socket (`init::hand_over_mounts`),
    // where it stays, unread, until the report is out.
    let kept = std::os::unix::net::UnixStream::pair();
    let (kept, for_init) = match kept {
        Ok((a, b)) => (Some(a), Some(OwnedFd::from(b))),
        Err(_) => (None, None),
    };
    let report = call(
        spec,
        &prepared,
        caller.lifeline,
        caller.fds,
        caller.on_started,
        for_init,
    );
    (caller.on_report)(&report);
    drop(kept);
    prepared.release();
}

/// The box's namespaces, opened through its monitor's descriptors (user first: joining it
/// gives the capabilities the others need). The monitor is checked to be the same process after
/// the opens, so a recycled pid can't hand over another process's namespaces.
fn open_namespaces(state: &State) -> Result<Vec<(nix::sched::CloneFlags, OwnedFd)>, String> {
    use nix::sched::CloneFlags as F;
    let kind = |k: &str| match k {
        "user" => Some(F::CLONE_NEWUSER),
        "mnt" => Some(F::CLONE_NEWNS),
        "ipc" => Some(F::CLONE_NEWIPC),
        "uts" => Some(F::CLONE_NEWUTS),
        "pid" => Some(F::CLONE_NEWPID),
        "net" => Some(F::CLONE_NEWNET),
        _ => None,
    };
    let mut out = Vec::new();
    for (k, fd) in &state.ns_fds {
        let flag = kind(k).ok_or_else(|| format!("unknown namespace kind {k:?} in the state"))?;
        let file = std::fs::File::open(format!("/proc/{}/fd/{fd}", state.monitor.pid))
            .map_err(|e| format!("open the box's {k} namespace through its monitor: {e}"))?;
        out.push((flag, OwnedFd::from(file)));
    }
    if !out.iter().any(|(f, _)| *f == F::CLONE_NEWUSER) || !state.monitor.alive() {
        return Err(gone(&state.name, "its monitor has exited"));
    }
    out.sort_by_key(|(f, _)| *f != F::CLONE_NEWUSER);
    Ok(out)
}

fn call(
    spec: &BoxSpec,
    prepared: &PreparedCall,
    lifeline: Option<BorrowedFd<'_>>,
    passed: BoxFds,
    mut on_started: Option<&mut dyn FnMut(i32)>,
    for_init: Option<OwnedFd>,
) -> BoxReport {
    let start = Instant::now();
    let state = match &prepared.found {
        Ok((s, _pid1)) => s,
        Err(why) => {
            return BoxReport {
                exit_code: 125,
                resident_gone: Some(why.clone()),
                ..Default::default()
            }
        }
    };
    // Paused (`pause()`, `kern pause`): a call would sit frozen; it is refused, saying so.
    // Checked here, when the call comes, not when this kern was prepared ahead of it.
    let frozen =
        crate::engine::monitor::freezer::Freezer::for_box(state.monitor.pid, state.pid1.pid)
            .is_ok_and(|f| f.is_frozen());
    if frozen {
        let name = &prepared.target.name;
        return BoxReport::startup_failed(format!(
            "the resident box {name} is paused (pause(), or `kern pause {name}`): resume it first (resume(), or `kern resume {name}`)"
        ));
    }
    match &spec.resident {
        Some(Resident::Exec { name, pid1 })
            if *name == prepared.target.name && *pid1 == prepared.target.pid1 => {}
        _ => {
            return BoxReport::startup_failed(
                "internal error: the call names another resident box than kern prepared for",
            )
        }
    }
    // A call has no egress line of its own (the box's relay has it).
    if spec.channel != passed.channel.is_some()
        || passed.egress.is_some()
        || spec.stdin != passed.stdin.is_some()
    {
        return BoxReport::startup_failed(
            "internal error: a descriptor of the call was announced but not sent, or the reverse",
        );
    }
    if spec.argv.is_empty() {
        return BoxReport::startup_failed("nothing to run: the argv is empty");
    }
    // The box's user namespace maps what it was built with: unprivileged that is one account.
    let mapping = Mapping::for_this_process(state.spec.user.as_ref());
    if matches!(mapping, Mapping::Caller { .. }) && spec.user != state.spec.user {
        return BoxReport::startup_failed(
            "this resident box was started unprivileged, so its one account is the one it was built with; run as that user, or start the box as root",
        );
    }
    let namespaces = match open_namespaces(state) {
        Ok(n) => n,
        Err(why) => {
            return BoxReport {
                exit_code: 125,
                resident_gone: Some(why),
                ..Default::default()
            }
        }
    };
    let fallback: &Fallback = &state.rlimits;
    let oom_before = prepared.cgroup.as_ref().map(CallCgroup::box_oom_kills);
    let (init_r, init_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return BoxReport::startup_failed(format!("pipe: {e}")),
    };
    let (go_r, go_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return BoxReport::startup_failed(format!("pipe: {e}")),
    };
    let Some(keep) = for_init else {
        return BoxReport::startup_failed("socketpair for the call's mounts failed");
    };
    let forked = match prepared.cgroup.as_ref().and_then(CallCgroup::birth) {
        Some(call_cgroup) => sys::clone_fork_into(0, call_cgroup),
        None => sys::clone_fork(0),
    };
    let a = match forked {
        Ok(Forked::Child) => {
            drop(init_r);
            drop(go_w);
            let j = Joining {
                namespaces: &namespaces,
                cgroup_ns: state.cgroup_ns && prepared.cgroup.is_some(),
                mapping,
                init_w,
                go_r,
                keep,
            };
            init::call_init(spec, j, passed, fallback)
        }
        Ok(Forked::Parent(pid)) => pid,
        Err(e)
            if prepared
                .cgroup
                .as_ref()
                .and_then(CallCgroup::birth)
                .is_some() =>
        {
            return BoxReport::startup_failed(format!(
                "cannot start the call inside its cgroup (clone3 with CLONE_INTO_CGROUP): {e}; \
                 KERN_NO_CLONE_INTO_CGROUP=1 makes kern move into the call's cgroup first instead"
            ))
        }
        Err(e) => return BoxReport::startup_failed(format!("fork: {e}")),
    };
    drop(passed);
    drop(init_w);
    drop(go_r);
    drop(keep);
    if let Some(adj) = &prepared.oom_adj {
        // The call's processes get the caller's score back (see `monitor::prepare`).
        let _ = std::fs::write(format!("/proc/{a}/oom_score_adj"), adj);
    }
    let _ = nix::unistd::write(&go_w, b"g");
    drop(go_w);
    let a_fd = match sys::pidfd_open(a) {
        Ok(fd) => fd,
        Err(e) => {
            let _ = nix::sys::signal::kill(Pid::from_raw(a), nix::sys::signal::Signal::SIGKILL);
            let _ = waitpid(Pid::from_raw(a), None);
            return BoxReport::startup_failed(format!("pidfd_open: {e}"));
        }
    };
    let _ = nix::fcntl::fcntl(
        &init_r,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    );
    let mut messages = Vec::new();
    let deadline = start + Duration::from_millis(spec.timeout_ms);
    let mut ended_by = None;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            ended_by = Some(Fault::new(
                FaultKind::Timeout,
                format!(
                    "the call ran past its timeout of {} s; kern killed the call's processes (the resident box {} goes on)",
                    spec.timeout_ms as f64 / 1000.0,
                    prepared.target.name
                ),
            ));
            break;
        }
        let mut fds = vec![
            PollFd::new(a_fd.as_fd(), PollFlags::POLLIN),
            PollFd::new(init_r.as_fd(), PollFlags::POLLIN),
        ];
        if let Some(l) = lifeline {
            fds.push(PollFd::new(l, PollFlags::POLLIN));
        }
        match poll(
            &mut fds,
            PollTimeout::from(left.as_millis().min(60_000) as u16),
        ) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => {}
            Err(e) => {
                ended_by = Some(Fault::new(
                    FaultKind::Killed,
                    format!("kern lost track of the call (poll: {e}) and killed it"),
                ));
                break;
            }
        }
        let ready = |i: usize| {
            fds.get(i)
                .and_then(|f| f.revents())
                .is_some_and(|r| !r.is_empty())
        };
        let (a_done, readable, caller_gone) = (ready(0), ready(1), ready(2));
        drop(fds);
        if readable {
            sys::read_available(&init_r, &mut messages);
            if let Some(pid) = handoff::started_pid(&messages) {
                if let Some(tell) = on_started.take() {
                    tell(pid);
                }
            }
        }
        if a_done {
            break;
        }
        if caller_gone {
            ended_by = Some(Fault::new(
                FaultKind::Killed,
                "the caller ended the call (Sandbox.close() while it ran, or the caller's process exited); kern killed the call's processes",
            ));
            break;
        }
    }
    if ended_by.is_some() {
        sys::read_available(&init_r, &mut messages);
        match &prepared.cgroup {
            Some(cg) => cg.kill_others(),
            None => {
                let workload = Pid1Msg::decode_all(&messages)
                    .into_iter()
                    .find_map(|m| match m {
                        Ok(Pid1Msg::Pid(pid)) => Some(pid),
                        _ => None,
                    });
                if let Some(w) = workload {
                    // Its process group (it is a session leader), then itself.
                    let _ = nix::sys::signal::kill(
                        Pid::from_raw(-w),
                        nix::sys::signal::Signal::SIGKILL,
                    );
                    let _ =
                        nix::sys::signal::kill(Pid::from_raw(w), nix::sys::signal::Signal::SIGKILL);
                }
            }
        }
        let _ = sys::pidfd_kill(a_fd.as_fd(), libc::SIGKILL);
    }
    let status = waitpid(Pid::from_raw(a), None);
    // Nothing else holds the write end once the call's init is gone (the workload's copy closed
    // at its exec), so this ends; bounded anyway.
    let until = Instant::now() + Duration::from_secs(2);
    loop {
        sys::read_available(&init_r, &mut messages);
        let left = until.saturating_duration_since(Instant::now());
        let mut fds = [PollFd::new(init_r.as_fd(), PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(left.as_millis() as u16)) {
            // A signal is not the end of the messages.
            Err(nix::errno::Errno::EINTR) if !left.is_zero() => continue,
            Ok(n) if n > 0 && !left.is_zero() => {
                let mut probe = [0u8; 4096];
                match nix::unistd::read(&init_r, &mut probe) {
                    Ok(0) => break,
                    Ok(n) => messages.extend_from_slice(&probe[..n]),
                    Err(nix::errno::Errno::EAGAIN) => continue,
                    Err(_) => break,
                }
            }
            _ => break,
        }
    }
    let unswept = faults::sweep_setid(spec);
    let oom = match (&prepared.cgroup, oom_before) {
        (Some(cg), Some(before)) if cg.box_oom_kills() > before || cg.call_oom_kills() > 0 => {
            Some(0)
        }
        _ => None,
    };
    let text = String::from_utf8_lossy(&messages).into_owned();
    let mut report = faults::conclude(spec, &text, ended_by, oom, status, "call's init");
    faults::fail_closed(&mut report, unswept);
    report
}
