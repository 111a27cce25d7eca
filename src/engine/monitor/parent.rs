//! `kern`'s outer process, the parent side of the clone: it stays in the host's namespaces,
//! prepares the cgroup and the sources, clones the box's PID 1 into new namespaces (the child side
//! is `init`), writes its id maps, then enforces the deadline and reports how the box ended
//! (`faults`); a resident box's monitor goes on in `resident::keep`. It is single-threaded, which
//! is what makes the plain `clone` in `sys::clone_fork` (and `clone3` in `sys::clone_fork_into`)
//! sound.

use crate::engine::boxside::init;
use crate::engine::boxside::mounts::{self, Sources, Trees};
use crate::engine::boxside::rootfs::{top_component, RootPlan};
use crate::engine::monitor::cgroup::{self, BoxCgroup};
use crate::engine::monitor::faults;
use crate::engine::monitor::idmap::Mapping;
use crate::engine::monitor::resident::keep::{keep_resident, ResidentStart};
use crate::engine::monitor::trees;
use crate::engine::shared::handoff::{self, BoxFds, Caller, Fallback, Reporter};
use crate::engine::shared::protocol::{pid1::Pid1Msg, Command};
use crate::engine::shared::spec::{BoxSpec, Limits, Resident};
use crate::engine::shared::status::{note, Applied, BoxReport, Fault, FaultKind};
use crate::engine::shared::sys::{self, Forked};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// The caps of a box, applied before its spec is known: the cgroup exists, and the box will be
/// born inside it. Moving a process between cgroups waits for an RCU grace period (often 5-40 ms
/// on this kind of machine), so no process moves on a call's path: on cgroup v2 (Linux 5.7+)
/// PID 1 is cloned straight into the leaf with `clone3(CLONE_INTO_CGROUP)` and this process (the
/// monitor) stays where it is; otherwise the monitor has already moved itself in, which the
/// addon's spare `kern`s do ahead of each call.
pub struct Prepared {
    limits: Limits,
    cgroup: Option<BoxCgroup>,
    /// The v2 leaf, open, when PID 1 is to be born in it (the monitor never entered it).
    birth: Option<OwnedFd>,
    pub(in crate::engine) fallback: Fallback,
    /// Our oom_score_adj before we protected ourselves: the box gets it back (see `supervise`).
    oom_adj: Option<String>,
    /// `requireLimits` and a cap not verifiably in force: why no box may start.
    refusal: Option<String>,
    /// How each cap was applied, read back: the report carries it.
    applied: Applied,
}

/// Creates the cgroup, moves this process into it (unless the box can be born in it), and
/// decides which caps fall back to rlimits, saying so for each on stderr (where the next box's
/// output follows).
pub fn prepare(limits: &Limits) -> Prepared {
    let l = limits;
    let any = l.memory_bytes.is_some() || l.pids.is_some() || l.cpus.is_some();
    let mut fallback = Fallback::default();
    let mut cg = None;
    let mut birth = None;
    let mut reason = String::from("enforceLimits is false");
    let mut oom_adj = None;
    let born = l.enforce && any && cgroup::leaf_outside_self() && cgroup::birth_possible();
    // Written as: a monitor inside the box's cgroup is one more task in its pids cap.
    let written = Limits {
        pids: l.pids.map(|p| p + u64::from(!born)),
        ..l.clone()
    };
    if l.enforce && any {
        match BoxCgroup::create(&written, &box_id()) {
            Ok(c) if born => match c.open_leaf() {
                Some(Ok(fd)) => {
                    // The monitor stays out of the box's memory cgroup, so the box's OOM killer
                    // cannot pick it: no need to protect it.
                    birth = Some(fd);
                    cg = Some(c);
                }
                Some(Err(e)) => {
                    c.remove();
                    reason = format!("cannot start the box inside its cgroup ({e})");
                }
                None => {
                    c.remove();
                    reason = String::from(
                        "internal error: kern is inside the cgroup it made for the box",
                    );
                }
            },
            Ok(c) => match c.add(std::process::id() as libc::pid_t) {
                Ok(()) => {
                    // The box's OOM killer must pick the workload, never its monitor: the
                    // monitor is what reports the OOM. Only root may lower this; elsewhere
                    // an OOM that outlives the workload may end in a `killed` fault.
                    let before = std::fs::read_to_string("/proc/self/oom_score_adj").ok();
                    if std::fs::write("/proc/self/oom_score_adj", "-1000").is_ok() {
                        oom_adj = before.map(|b| b.trim().to_string());
                    }
                    cg = Some(c);
                }
                Err(e) => {
                    c.remove();
                    reason = format!("cannot move into the box's cgroup ({e})");
                }
            },
            Err(e) => reason = format!("no writable cgroup ({e})"),
        }
    }
    let enforced = cg.as_ref().map(|c| c.enforced).unwrap_or_default();
    if cg.is_some() {
        // The cgroup exists, so a cap it lacks was not taken by its controller.
        reason = String::from(
            "the box's cgroup did not take it (its controller is not enabled there, or the \
             kernel refused the value)",
        );
    }
    let refusal = if l.require && (l.memory_bytes.is_some() || l.pids.is_some()) {
        // A box born in the leaf is checked to be there once it exists (`build_and_supervise`).
        let me = (!born).then_some(std::process::id() as libc::pid_t);
        let verified = match &cg {
            Some(c) => c.verify(&written, me),
            None => Err(reason.clone()),
        };
        verified.err().map(|why| {
            format!(
                "requireLimits: the memory and pids caps are not verifiably enforced here ({why}); \
                 run where kern can write a cgroup (as root, or under a delegated cgroup v2 \
                 subtree: systemd's user manager, or KERN_CGROUP_PARENT), or drop requireLimits \
                 to run with best-effort rlimits"
            )
        })
    } else {
        None
    };
    if refusal.is_some() {
        // Nothing will run: no rlimit fallback, and no warnings about one.
        return Prepared {
            limits: limits.clone(),
            cgroup: cg,
            birth,
            fallback,
            oom_adj,
            refusal,
            applied: Applied::default(),
        };
    }
    if let (Some(bytes), false) = (l.memory_bytes, enforced.memory) {
        fallback.data_bytes = Some(bytes);
        note(
            "warning",
            &format!(
                "memory cap of {} MiB is best-effort: {reason}; applied as RLIMIT_DATA, which does not count /tmp or shared memory",
                bytes >> 20
            ),
        );
    }
    if let (Some(max), false) = (l.pids, enforced.pids) {
        fallback.nproc = Some(nproc_cap(max));
        note(
            "warning",
            &format!("pids cap of {max} is best-effort: {reason}; applied as RLIMIT_NPROC"),
        );
    }
    if let (Some(cores), false) = (l.cpus, enforced.cpu) {
        note("warning", &format!("cpu cap of {cores} cores is not enforced: {reason}; there is no rlimit for a CPU rate"));
    }
    let applied = applied(&written, cg.as_ref(), enforced, &fallback);
    Prepared {
        limits: limits.clone(),
        cgroup: cg,
        birth,
        fallback,
        oom_adj,
        refusal: None,
        applied,
    }
}

/// How each cap of `written` is in force: a cgroup cap only once read back from the cgroup
/// (`BoxCgroup::verify`), not because its write returned Ok.
fn applied(
    written: &Limits,
    cg: Option<&BoxCgroup>,
    enforced: cgroup::Enforced,
    fallback: &Fallback,
) -> Applied {
    let read_back = |only: Limits| cg.is_some_and(|c| c.verify(&only, None).is_ok());
    let how = |asked: bool, in_cgroup: bool, rlimit: bool| {
        match (asked, in_cgroup, rlimit) {
            (false, _, _) => "none",
            (true, true, _) => "cgroup",
            (true, false, true) => "rlimit",
            (true, false, false) => "none",
        }
        .to_string()
    };
    let memory_only = Limits {
        pids: None,
        ..written.clone()
    };
    let pids_only = Limits {
        memory_bytes: None,
        ..written.clone()
    };
    Applied {
        memory: how(
            written.memory_bytes.is_some(),
            enforced.memory && read_back(memory_only),
            fallback.data_bytes.is_some(),
        ),
        pids: how(
            written.pids.is_some(),
            enforced.pids && read_back(pids_only),
            fallback.nproc.is_some(),
        ),
        cpu: how(written.cpus.is_some(), enforced.cpu, false),
        cgroup: cg.map(|c| c.version_name().to_string()),
    }
}

impl Prepared {
    /// Leaves and removes the cgroup (when nothing ran in it, or after the box ended).
    pub fn release(self) {
        if let Some(cg) = &self.cgroup {
            // A monitor that never entered must not "move back": even a write of a process into
            // the cgroup it is already in waits for an RCU grace period.
            if self.birth.is_none() {
                cg.leave();
            }
            cg.remove();
        }
    }
}

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

/// The RLIMIT_NPROC that caps the box at `max` tasks. Since Linux 5.14 the count is kept per
/// user namespace, so the box's own namespace counts only the box's processes; before, it counted
/// every process of the real uid host-wide, so the cap goes on top of what that user already
/// runs.
fn nproc_cap(max: u64) -> u64 {
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if version >= (5, 14) {
        return max;
    }
    let uid = match Mapping::for_this_process(None) {
        Mapping::Caller { uid, .. } => uid,
        Mapping::Range { uid_base, .. } => uid_base,
    };
    max + processes_of_uid(uid)
}

fn processes_of_uid(uid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                })
                .filter(|e| e.metadata().map(|m| m.uid() == uid).unwrap_or(false))
                .count() as u64
        })
        .unwrap_or(0)
}

fn box_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("box-{}-{nanos:09}", std::process::id())
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
                            for Command::Signal { signal } in commands {
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
