//! `kern`'s outer process, the parent side of the clone: it stays in the host's namespaces,
//! prepares the cgroup and the sources, clones the box's PID 1 into new namespaces (the child side
//! is `init`), writes its id maps, then enforces the deadline and reports how the box ended
//! (`faults`); a resident box's monitor goes on in `resident::keep`. It is single-threaded, which
//! is what makes the plain `clone` in `sys::clone_fork` (and `clone3` in `sys::clone_fork_into`)
//! sound.

use crate::engine::boxside::init;
use crate::engine::boxside::mounts::{self, Sources, Trees};
use crate::engine::boxside::rootfs::{top_component, RootPlan};
use crate::engine::monitor::cgroup::BoxCgroup;
use crate::engine::monitor::faults;
use crate::engine::monitor::freezer;
use crate::engine::monitor::idmap::Mapping;
use crate::engine::monitor::prepare::Prepared;
use crate::engine::monitor::resident::keep::{keep_resident, ResidentStart};
use crate::engine::monitor::trees;
use crate::engine::shared::handoff::{self, BoxFds, Caller, Fallback, Reporter};
use crate::engine::shared::protocol::{pid1::Pid1Msg, Command};
use crate::engine::shared::spec::{BoxSpec, Resident};
use crate::engine::shared::status::{note, BoxReport, Fault, FaultKind};
use crate::engine::shared::sys::{self, Forked};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// A spare for the Sandbox's zygote, once in its cgroup: the call's box forked from the zygote
/// and set up ahead of the call (`zygote::call::arrange`), unless the caps refuse any box.
pub fn arrange_zygote(
    prepared: &Prepared,
    inputs: &crate::engine::plan::Inputs,
    sock: OwnedFd,
) -> Result<crate::engine::monitor::zygote::call::Arranged, String> {
    if let Some(why) = &prepared.refusal {
        return Err(why.clone());
    }
    crate::engine::monitor::zygote::call::arrange(
        prepared.cgroup.as_ref(),
        &prepared.fallback,
        inputs,
        sock,
    )
}

/// Runs one call in the box a zygote spare arranged, as `run_box` runs a fresh one; if that box
/// is gone before the call (the zygote ended), the call runs in a fresh box of the same spec.
pub fn run_zygote_call(
    spec: &BoxSpec,
    prepared: Prepared,
    arranged: Result<crate::engine::monitor::zygote::call::Arranged, String>,
    inputs: &crate::engine::plan::Inputs,
    caller: Caller<'_>,
) {
    let Caller {
        lifeline,
        fds: passed,
        on_report,
        on_started,
    } = caller;
    let fresh = BoxSpec {
        zygote: false,
        ..spec.clone()
    };
    let usable = spec.zygote
        && spec.limits == prepared.limits
        && prepared.refusal.is_none()
        && passed.match_spec(spec);
    // Said, never silent: the call still runs, in a fresh box.
    let fell_back = |why: &str| {
        note(
            "note",
            &format!("zygote: this call's box could not come from the Sandbox's zygote ({why}); it ran in a fresh box"),
        )
    };
    let passed = match arranged {
        Err(why) => {
            if usable {
                fell_back(&why);
            }
            passed
        }
        Ok(arranged) if !usable => {
            arranged.discard();
            passed
        }
        Ok(arranged) => match crate::engine::monitor::zygote::call::run(
            spec,
            arranged,
            inputs,
            prepared.cgroup.as_ref(),
            passed,
            lifeline,
        ) {
            crate::engine::monitor::zygote::call::Ran::Report(mut report) => {
                // The call's processes are all gone: as after a fresh box.
                faults::fail_closed(&mut report, faults::sweep_setid(spec));
                report.applied = Some(prepared.applied.clone());
                on_report(&report);
                prepared.release();
                return;
            }
            crate::engine::monitor::zygote::call::Ran::Unused(passed, why) => {
                fell_back(&why);
                passed
            }
        },
    };
    run_box(
        &fresh,
        prepared,
        Caller {
            lifeline,
            fds: passed,
            on_report,
            on_started,
        },
    );
}

/// Builds, runs and tears down one box. The caller's lifeline, when given, kills the box if it
/// closes early (the caller died); its `on_report` gets the outcome as soon as the box has
/// ended, before the slower cgroup teardown; its descriptors are the box's (see `Caller`).
pub fn run_box(spec: &BoxSpec, prepared: Prepared, caller: Caller<'_>) {
    let Caller {
        lifeline,
        fds: passed,
        on_report,
        on_started,
    } = caller;
    // A resident box reports once it has started, long before it ends: whoever reports takes it.
    let mut reporter = Some(on_report);
    let mut report = if !passed.match_spec(spec) {
        BoxReport::startup_failed(
            "internal error: a descriptor of the box was announced but not sent, or the reverse",
        )
    } else {
        build_and_supervise(
            spec,
            &prepared,
            lifeline,
            passed,
            Mapping::for_this_process(spec.user.as_ref()),
            &mut reporter,
            on_started,
        )
    };
    if prepared.refusal.is_none() {
        report.applied = Some(prepared.applied.clone());
    }
    explain_in_container(&mut report);
    if let Some(r) = reporter.take() {
        r(&report);
    }
    prepared.release();
    freezer::remove_own();
}

/// A startup failure a container's runtime explains (its seccomp profile, masked `/proc`...)
/// says so, with the flag that lifts it: the session turns that into the error of `open()`.
fn explain_in_container(report: &mut BoxReport) {
    if let Some(f) = report
        .fault
        .as_mut()
        .filter(|f| f.kind == FaultKind::StartupFailed)
    {
        if let Some(r) = crate::engine::shared::container::explain(&f.message) {
            f.message = format!("{}: {}", f.message, r.line());
            report.container_refusal = Some(r.kind.to_string());
        }
    }
}

fn build_and_supervise(
    spec: &BoxSpec,
    prepared: &Prepared,
    lifeline: Option<BorrowedFd<'_>>,
    passed: BoxFds,
    mapping: Mapping,
    reporter: &mut Reporter<'_>,
    on_started: Option<&mut dyn FnMut(i32)>,
) -> BoxReport {
    let start = Instant::now();
    if spec.limits != prepared.limits {
        return BoxReport::startup_failed(
            "internal error: the box's caps differ from the caps kern prepared",
        );
    }
    if spec.argv.is_empty() && spec.resident.is_none() {
        return BoxReport::startup_failed("nothing to run: the argv is empty");
    }
    if let Some(why) = &prepared.refusal {
        let mut report = BoxReport::startup_failed(why.clone());
        report.limits_refused = Some(why.clone());
        return report;
    }
    if let Some(profile) = &spec.apparmor {
        if let Err(why) = crate::engine::boxside::apparmor::check_loaded(profile) {
            return BoxReport::startup_failed(why);
        }
    }
    let extra_reserved: Vec<String> = spec
        .tmpfs
        .iter()
        .map(|t| t.target.as_str())
        .chain(spec.binds.iter().map(|b| b.target.as_str()))
        .filter(|t| t.trim_matches('/').split('/').count() == 1)
        .filter_map(top_component)
        .collect();
    let plan = match RootPlan::build(
        &spec.root,
        &spec.workspace_target,
        &extra_reserved,
        &spec.etc,
        &spec.hostname,
    ) {
        Ok(p) => p,
        Err(e) => {
            return BoxReport::startup_failed(format!("cannot read the image {:?}: {e}", spec.root))
        }
    };
    if let Err(e) = mounts::open_dir(&spec.workspace) {
        return BoxReport::startup_failed(format!(
            "cannot open the workspace {}: {e}",
            spec.workspace.display()
        ));
    }
    let sources = Sources {
        plan,
        workspace: spec.workspace.clone(),
    };
    let cgroup = &prepared.cgroup;
    let fallback = &prepared.fallback;

    let (init_r, init_w) = match nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC) {
        Ok(p) => p,
        Err(e) => return BoxReport::startup_failed(format!("pipe: {e}")),
    };
    // "go" travels on a socket so it can carry the idmapped trees (SCM_RIGHTS).
    let (go_w, go_r) = match socket::socketpair(
        socket::AddressFamily::Unix,
        socket::SockType::Stream,
        None,
        socket::SockFlag::SOCK_CLOEXEC,
    ) {
        Ok(p) => p,
        Err(e) => return BoxReport::startup_failed(format!("socketpair: {e}")),
    };
    // With locked mounts, the UTS, IPC and network namespaces come later, with the nested user
    // namespace that owns them (`nest`), so the capabilities the workload keeps
    // (`capDrop`) apply to them.
    let mut flags = libc::CLONE_NEWUSER | libc::CLONE_NEWPID | libc::CLONE_NEWNS;
    if !spec.locks_mounts() {
        flags |= libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
        if !spec.host_network {
            flags |= libc::CLONE_NEWNET;
        }
    }
    let forked = match &prepared.birth {
        Some(leaf) => sys::clone_fork_into(flags, leaf.as_fd()),
        None => sys::clone_fork(flags),
    };
    let pid = match forked {
        Ok(Forked::Child) => {
            drop(init_r);
            drop(go_w);
            init::child(
                spec,
                &sources,
                init_w,
                go_r,
                passed,
                fallback,
                cgroup.is_some(),
                mapping,
            )
        }
        // Only the box keeps the caller's descriptors: their far ends see EOF when the box
        // is gone.
        Ok(Forked::Parent(pid)) => {
            drop(passed);
            pid
        }
        Err(e) if prepared.birth.is_some() => {
            // Support was probed (`cgroup::birth_possible`), so this is rare; say both causes.
            return BoxReport::startup_failed(format!(
                "cannot create the box's namespaces inside its cgroup (clone3 with \
                 CLONE_INTO_CGROUP): {e}. If `kern doctor` says user namespaces work here, the \
                 cgroup placement failed: KERN_NO_CLONE_INTO_CGROUP=1 makes kern move into the \
                 box's cgroup first instead"
            ));
        }
        Err(e) if crate::engine::boxside::apparmor::userns_restriction_hint().is_some() => {
            return BoxReport::startup_failed(format!(
                "cannot create the box's namespaces: {e}: {}",
                crate::engine::boxside::apparmor::userns_restriction_hint().unwrap_or_default()
            ));
        }
        Err(e) => {
            return BoxReport::startup_failed(format!(
                "cannot create the box's namespaces: {e}. kern needs unprivileged user namespaces \
                 (sysctl kernel.unprivileged_userns_clone=1; on Ubuntu 24.04+ an AppArmor profile \
                 allowing userns for the kern binary)"
            ));
        }
    };
    drop(init_w);
    drop(go_r);
    if let (Some(c), Some(_), true) = (cgroup, &prepared.birth, prepared.limits.require) {
        // `requireLimits` trusts what it reads back: PID 1 is in the leaf before it may go on.
        if let Err(why) = c.verify(&prepared.limits, Some(pid)) {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            let _ = waitpid(Pid::from_raw(pid), None);
            let why = format!("requireLimits: the box was not born in its cgroup ({why})");
            let mut report = BoxReport::startup_failed(why.clone());
            report.limits_refused = Some(why);
            return report;
        }
    }
    // The clone inherited the monitor's oom_score_adj and its floor: put back the caller's, as
    // the privileged writer, which resets the floor too, so nothing in the box is OOM-immune.
    if let Some(adj) = &prepared.oom_adj {
        if let Err(e) = std::fs::write(format!("/proc/{pid}/oom_score_adj"), adj) {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
            let _ = waitpid(Pid::from_raw(pid), None);
            return BoxReport::startup_failed(format!("cannot reset the box's oom_score_adj: {e}"));
        }
    }
    let s = Supervised {
        pid,
        init_r,
        go_w,
        start,
        mapping,
    };
    let caller = Watched {
        lifeline,
        on_started,
    };
    supervise(spec, s, cgroup, caller, fallback, reporter)
}

/// The caller as `supervise` watches it while the box runs: its lifeline (EOF kills the box,
/// a line is a `protocol::Command`) and who to tell when the workload starts.
struct Watched<'l, 's> {
    lifeline: Option<BorrowedFd<'l>>,
    on_started: Option<&'s mut dyn FnMut(i32)>,
}

/// The box just cloned, as `supervise` takes it over.
struct Supervised {
    pid: libc::pid_t,
    init_r: OwnedFd,
    go_w: OwnedFd,
    start: Instant,
    mapping: Mapping,
}

fn supervise(
    spec: &BoxSpec,
    s: Supervised,
    cgroup: &Option<BoxCgroup>,
    caller: Watched<'_, '_>,
    fallback: &Fallback,
    reporter: &mut Reporter<'_>,
) -> BoxReport {
    let Watched {
        lifeline,
        mut on_started,
    } = caller;
    let Supervised {
        pid,
        init_r,
        go_w,
        start,
        mapping,
    } = s;
    let kill_and_reap = |pid: libc::pid_t| {
        let _ = nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        let _ = waitpid(Pid::from_raw(pid), None);
    };
    // Holding the box's mount namespace keeps its tmpfs pages (and their memory charge) alive
    // after PID 1 ends, so an OOM can be traced to scratch files. Dropped when we return.
    let _mnt_ns = std::fs::File::open(format!("/proc/{pid}/ns/mnt")).ok();
    let pidfd = match sys::pidfd_open(pid) {
        Ok(fd) => fd,
        Err(e) => {
            kill_and_reap(pid);
            return BoxReport::startup_failed(format!("pidfd_open: {e}"));
        }
    };
    if let Err(e) = mapping.write(pid) {
        kill_and_reap(pid);
        return BoxReport::startup_failed(format!("cannot write the box's uid/gid maps: {e}"));
    }
    let trees = match mapping {
        Mapping::Range { uid_base, gid_base } => {
            match trees::idmapped_trees(spec, pid, uid_base, gid_base) {
                Ok(t) => t,
                Err(why) => {
                    kill_and_reap(pid);
                    return BoxReport::startup_failed(why);
                }
            }
        }
        Mapping::Caller { .. } => Trees::default(),
    };
    // A resident box's namespaces, opened while its init is still dumpable (it waits for "go").
    let mut ns_files = Vec::new();
    if spec.resident.is_some() && spec.locks_mounts() {
        // Its PID 1 would move into nested namespaces after this point, and calls would join
        // the outer, unlocked ones (the session refuses this combination first).
        kill_and_reap(pid);
        return BoxReport::startup_failed(
            "a resident box can't keep CAP_SYS_ADMIN: its locked mounts live in namespaces its calls would not join",
        );
    }
    if spec.resident.is_some() {
        let mut kinds = vec!["user", "mnt", "ipc", "uts", "pid"];
        if !spec.host_network {
            kinds.push("net");
        }
        // No cgroup namespace: PID 1 makes its own only after "go"; a call makes one of its own
        // at its cgroup (see `init::call_init`), as a fresh box does at the box's.
        for kind in kinds {
            match std::fs::File::open(format!("/proc/{pid}/ns/{kind}")) {
                Ok(f) => ns_files.push((kind, f)),
                Err(e) => {
                    kill_and_reap(pid);
                    return BoxReport::startup_failed(format!(
                        "open the box's {kind} namespace: {e}"
                    ));
                }
            }
        }
    }
    if handoff::send_go(&go_w, &trees).is_err() {
        kill_and_reap(pid);
        return init_gone(spec, &init_r);
    }
    drop(trees);
    // Wait for the box to arm its parent-death signal before anything can kill us.
    let mut ack = [0u8; 1];
    if !matches!(nix::unistd::read(&go_w, &mut ack), Ok(1)) {
        kill_and_reap(pid);
        return init_gone(spec, &init_r);
    }
    drop(go_w);
    if let Some(Resident::Start {
        name,
        ttl_ms,
        posture,
    }) = &spec.resident
    {
        let r = ResidentStart {
            ns_files,
            cgroup_ns: cgroup.is_some(),
            name,
            ttl_ms: *ttl_ms,
            posture,
            pid,
            start,
            cgroup_leaf: cgroup
                .as_ref()
                .and_then(BoxCgroup::v2_leaf)
                .map(std::path::Path::to_path_buf),
        };
        return keep_resident(spec, r, pidfd, init_r, fallback, reporter);
    }

    let deadline = start + Duration::from_millis(spec.timeout_ms);
    let mut ended_by: Option<Fault> = None;
    // init's messages are read as they come, for the workload's start (`Pid1Msg::Workload`).
    let _ = nix::fcntl::fcntl(
        &init_r,
        nix::fcntl::FcntlArg::F_SETFL(nix::fcntl::OFlag::O_NONBLOCK),
    );
    let mut messages = Vec::new();
    let mut said = Vec::new();
    loop {
        let remaining = deadline.saturating_duration_since(Instant::now());
        if remaining.is_zero() {
            let _ = sys::pidfd_kill(pidfd.as_fd(), libc::SIGKILL);
            ended_by = Some(Fault::new(
                FaultKind::Timeout,
                format!(
                    "the call ran past its timeout of {}; kern killed the box and every process in it",
                    human_secs(spec.timeout_ms)
                ),
            ));
            break;
        }
        let ms = remaining.as_millis().min(60_000) as u16;
        let mut fds = vec![PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
        // Only until the workload has started: nothing after that is needed before the end.
        if on_started.is_some() {
            fds.push(PollFd::new(init_r.as_fd(), PollFlags::POLLIN));
        }
        if let Some(l) = lifeline {
            fds.push(PollFd::new(l, PollFlags::POLLIN));
        }
        let polled = poll(&mut fds, PollTimeout::from(ms.max(1)));
        let ready: Vec<bool> = fds
            .iter()
            .map(|f| f.revents().is_some_and(|r| !r.is_empty()))
            .collect();
        drop(fds);
        match polled {
            Ok(_) => {
                let mut next = 1;
                if on_started.is_some() {
                    // Also when the box has already ended: a workload that exits at once was
                    // still started, and its caller may be waiting for that (a terminal's
                    // output is relayed from then on).
                    if ready[next] || ready[0] {
                        sys::read_available(&init_r, &mut messages);
                        if let Some(pid) = handoff::started_pid(&messages) {
                            if let Some(tell) = on_started.take() {
                                tell(pid);
                            }
                        }
                    }
                    next += 1;
                }
                if ready[0] {
                    break;
                }
                if let (Some(l), true) = (lifeline, ready.get(next) == Some(&true)) {
                    match handoff::read_commands(l, &mut said) {
                        Some(commands) => {
                            // PID 1 forwards them to the workload's process group.
                            for command in commands {
                                let Command::Signal { signal } = command else {
                                    continue;
                                };
                                if handoff::SIGNALS.iter().any(|(_, n)| *n == signal)
                                    && signal != libc::SIGKILL
                                {
                                    let _ = sys::pidfd_kill(pidfd.as_fd(), signal);
                                }
                            }
                        }
                        None => {
                            let _ = sys::pidfd_kill(pidfd.as_fd(), libc::SIGKILL);
                            ended_by = Some(Fault::new(
                                FaultKind::Killed,
                                "the caller ended the call (Sandbox.close() while it ran, or the caller's process exited); kern killed the box",
                            ));
                            break;
                        }
                    }
                }
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(e) => {
                // Without poll there is no deadline: end the box rather than let it run on.
                let _ = sys::pidfd_kill(pidfd.as_fd(), libc::SIGKILL);
                ended_by = Some(Fault::new(
                    FaultKind::Killed,
                    format!("kern lost track of the box (poll: {e}) and killed it"),
                ));
                break;
            }
        }
    }
    // A paused box is thawed first: on cgroup v1 its frozen tasks would not die until then.
    freezer::thaw_own(cgroup.as_ref().and_then(BoxCgroup::v2_leaf));
    let init_status = waitpid(Pid::from_raw(pid), None);
    // Every box process is gone now: no set-id file it made outlives it.
    let unswept = faults::sweep_setid(spec);

    // Every process of the box is gone, and with them every writer of the pipe: this ends.
    sys::read_available(&init_r, &mut messages);
    let messages = String::from_utf8_lossy(&messages).into_owned();
    let oom = cgroup
        .as_ref()
        .filter(|cg| cg.oom_kills() > 0)
        .map(|cg| cg.shmem_bytes());
    let mut report = faults::conclude(spec, &messages, ended_by, oom, init_status, "box's init");
    faults::fail_closed(&mut report, unswept);
    report
}

/// The box's init ended before "go" was acknowledged: what it said on its pipe (a setup step's
/// failure, such as a refused `/proc` mount), or that it said nothing.
fn init_gone(spec: &BoxSpec, init_r: &OwnedFd) -> BoxReport {
    let mut messages = Vec::new();
    // Every writer is gone (init was reaped): this ends.
    sys::read_available(init_r, &mut messages);
    let messages = String::from_utf8_lossy(&messages);
    let said = Pid1Msg::decode_all(messages.as_bytes())
        .iter()
        .any(|m| matches!(m, Ok(Pid1Msg::SetupFailed(_))));
    if said {
        return faults::conclude(
            spec,
            &messages,
            None,
            None,
            Ok(WaitStatus::StillAlive),
            "box's init",
        );
    }
    BoxReport::startup_failed("the box's init exited before it could start")
}

fn human_secs(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.3} s", ms as f64 / 1000.0)
    }
}
