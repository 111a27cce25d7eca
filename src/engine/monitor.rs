//! `kern`'s outer process: it stays in the host's namespaces, prepares the cgroup and the
//! sources, clones the box's PID 1 into new namespaces, writes its id maps, then enforces the
//! deadline and reports how the box ended. It is single-threaded, which is what makes the plain
//! `clone` in `sys::clone_fork` (and `clone3` in `sys::clone_fork_into`) sound.

use super::cgroup::{self, BoxCgroup};
use super::idmap::{self, Mapping};
use super::init::{self, msg, Fallback};
use super::mounts::{self, Sources, Trees};
use super::rootfs::{top_component, RootPlan};
use super::spec::{BindSpec, BoxSpec, Limits, Resident, RootSpec};
use super::status::{BoxReport, Fault, FaultKind};
use super::sys::{self, Forked};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::socket;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

/// The lines `note` wrote, in order: the report carries them, so the caller knows which of the
/// stderr bytes are kern's rather than guessing from their text.
static NOTES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Writes one of kern's own diagnostics to stderr, where it lands in order with the workload's
/// output, and keeps it for the report (`BoxReport::notes`).
pub fn note(kind: &str, text: &str) {
    use std::io::Write;
    let line = format!("{kind}: {text}");
    // Never `eprintln!`: it panics when the reader has gone (a caller that exited while this
    // kern was a spare), and a panic would skip the cgroup cleanup.
    let _ = writeln!(std::io::stderr(), "{line}");
    if let Ok(mut notes) = NOTES.lock() {
        notes.push(line);
    }
}

/// Every line `note` has written so far, in order.
pub fn notes() -> Vec<String> {
    NOTES.lock().map(|n| n.clone()).unwrap_or_default()
}

fn startup_failed(message: impl Into<String>) -> BoxReport {
    BoxReport {
        exit_code: 125,
        fault: Some(Fault::new(FaultKind::StartupFailed, message)),
        ..Default::default()
    }
}

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
    pub(super) fallback: Fallback,
    /// Our oom_score_adj before we protected ourselves: the box gets it back (see `supervise`).
    oom_adj: Option<String>,
    /// `requireLimits` and a cap not verifiably in force: why no box may start.
    refusal: Option<String>,
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
    Prepared {
        limits: limits.clone(),
        cgroup: cg,
        birth,
        fallback,
        oom_adj,
        refusal: None,
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

/// The caller's descriptors for one box, as its spec announces them.
#[derive(Debug, Default)]
pub struct Passed {
    /// Becomes the workload's fd 3 (`spec.channel`).
    pub channel: Option<OwnedFd>,
    /// The egress relay's line to the caller's proxy (`spec.egress`).
    pub egress: Option<OwnedFd>,
}

/// Builds, runs and tears down one box. `lifeline`, when given, is a pipe whose other end the
/// caller holds: if it closes early (the caller died), the box is killed. `on_report` gets the
/// outcome as soon as the box has ended, before the slower cgroup teardown.
/// `passed` holds the caller's descriptors for the box, as its spec announces them.
pub fn run_box(
    spec: &BoxSpec,
    prepared: Prepared,
    lifeline: Option<BorrowedFd<'_>>,
    passed: Passed,
    on_report: &mut dyn FnMut(&BoxReport),
) {
    // A resident box reports once it has started, long before it ends: whoever reports takes it.
    let mut reporter = Some(on_report);
    let report = if spec.channel != passed.channel.is_some()
        || spec.egress.is_some() != passed.egress.is_some()
    {
        startup_failed(
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
        )
    };
    if let Some(r) = reporter.take() {
        r(&report);
    }
    prepared.release();
}

fn build_and_supervise(
    spec: &BoxSpec,
    prepared: &Prepared,
    lifeline: Option<BorrowedFd<'_>>,
    passed: Passed,
    mapping: Mapping,
    reporter: &mut Reporter<'_>,
) -> BoxReport {
    let start = Instant::now();
    if spec.limits != prepared.limits {
        return startup_failed("internal error: the box's caps differ from the caps kern prepared");
    }
    if spec.argv.is_empty() && spec.resident.is_none() {
        return startup_failed("nothing to run: the argv is empty");
    }
    if let Some(why) = &prepared.refusal {
        let mut report = startup_failed(why.clone());
        report.limits_refused = Some(why.clone());
        return report;
    }
    if let Some(profile) = &spec.apparmor {
        if let Err(why) = super::apparmor::check_loaded(profile) {
            return startup_failed(why);
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
        Err(e) => return startup_failed(format!("cannot read the image {:?}: {e}", spec.root)),
    };
    if let Err(e) = mounts::open_dir(&spec.workspace) {
        return startup_failed(format!(
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
        Err(e) => return startup_failed(format!("pipe: {e}")),
    };
    // "go" travels on a socket so it can carry the idmapped trees (SCM_RIGHTS).
    let (go_w, go_r) = match socket::socketpair(
        socket::AddressFamily::Unix,
        socket::SockType::Stream,
        None,
        socket::SockFlag::SOCK_CLOEXEC,
    ) {
        Ok(p) => p,
        Err(e) => return startup_failed(format!("socketpair: {e}")),
    };
    // With locked mounts, the UTS, IPC and network namespaces come later, with the nested user
    // namespace that owns them (`init::nest`), so the capabilities the workload keeps
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
            child(
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
            return startup_failed(format!(
                "cannot create the box's namespaces inside its cgroup (clone3 with \
                 CLONE_INTO_CGROUP): {e}. If `kern doctor` says user namespaces work here, the \
                 cgroup placement failed: KERN_NO_CLONE_INTO_CGROUP=1 makes kern move into the \
                 box's cgroup first instead"
            ));
        }
        Err(e) if super::apparmor::userns_restriction_hint().is_some() => {
            return startup_failed(format!(
                "cannot create the box's namespaces: {e}: {}",
                super::apparmor::userns_restriction_hint().unwrap_or_default()
            ));
        }
        Err(e) => {
            return startup_failed(format!(
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
            let mut report = startup_failed(why.clone());
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
            return startup_failed(format!("cannot reset the box's oom_score_adj: {e}"));
        }
    }
    let s = Supervised {
        pid,
        init_r,
        go_w,
        start,
        mapping,
    };
    supervise(spec, s, cgroup, lifeline, fallback, reporter)
}

/// How a box's report reaches its caller (taken by whoever sends it).
pub(super) type Reporter<'a> = Option<&'a mut dyn FnMut(&BoxReport)>;

/// The box just cloned, as `supervise` takes it over.
struct Supervised {
    pid: libc::pid_t,
    init_r: OwnedFd,
    go_w: OwnedFd,
    start: Instant,
    mapping: Mapping,
}

/// The clone child, before it becomes PID 1 proper: wait for the maps (and the idmapped trees
/// when the box has a range), take uid/gid 0 of the box, then hand over.
#[allow(clippy::too_many_arguments)]
fn child(
    spec: &BoxSpec,
    src: &Sources,
    init_w: OwnedFd,
    go_r: OwnedFd,
    passed: Passed,
    fallback: &Fallback,
    in_cgroup: bool,
    mapping: Mapping,
) -> ! {
    // A panic here would unwind through the monitor's frames copied into this process.
    std::panic::set_hook(Box::new(|info| {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("kern: internal error in the box: {info}\n").as_bytes(),
        );
        sys::exit_now(125)
    }));
    // kern's stdin is its control socket: the box reads /dev/null instead.
    if sys::stdin_null().is_err() {
        sys::exit_now(1);
    }
    let Some(trees) = receive_go(&go_r) else {
        sys::exit_now(1);
    };
    if take_setup_ids(mapping).is_err() {
        sys::exit_now(1);
    }
    // No nested user namespaces (but ours): inside one, the workload would hold every
    // capability again (the door to much of the kernel's attack surface). The limit is per user
    // namespace and charged all the way up, so 1 here admits exactly the one PID 1 makes to
    // lock the mounts (`init::nest`), and every later attempt from inside it, by any account,
    // fails. Written through the host's /proc that is still mounted here.
    let limit = if spec.locks_mounts() { "1" } else { "0" };
    if std::fs::write("/proc/sys/user/max_user_namespaces", limit).is_err() {
        sys::exit_now(1);
    }
    // If kern dies, the box dies with it (and with PID 1 the whole PID namespace). Set only now:
    // a change of credentials clears it. kern holds its end of `go` until we acknowledge, so a
    // hang-up here means it died before the signal was armed.
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    let mut hup = [PollFd::new(go_r.as_fd(), PollFlags::empty())];
    let gone = poll(&mut hup, PollTimeout::ZERO).is_ok_and(|n| n > 0);
    if gone || nix::unistd::write(&go_r, b"a").is_err() {
        sys::exit_now(1);
    }
    drop(go_r);
    // PID 1 lives as long as the box: it keeps only its report pipe and its trees.
    let mut keep = vec![init_w.as_raw_fd()];
    keep.extend(trees.workspace.as_ref().map(|f| f.as_raw_fd()));
    keep.extend(trees.image.as_ref().map(|f| f.as_raw_fd()));
    keep.extend(trees.binds.iter().map(|f| f.as_raw_fd()));
    keep.extend(passed.channel.as_ref().map(|f| f.as_raw_fd()));
    keep.extend(passed.egress.as_ref().map(|f| f.as_raw_fd()));
    sys::close_others(&keep);
    if in_cgroup {
        // The box sees its own cgroup as the root of the hierarchy.
        let _ = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP);
    }
    init::pid1(spec, src, &trees, init_w, passed, fallback)
}

/// Which of `Trees` follow the "go" byte.
const GO_WORKSPACE: u8 = 1;
const GO_IMAGE: u8 = 2;

fn receive_go(go: &OwnedFd) -> Option<Trees> {
    let mut buf = [0u8; 3];
    let (n, fds) = sys::recv_with_fds(go.as_raw_fd(), &mut buf).ok()?;
    if n != 3 {
        return None;
    }
    let flags = buf[1];
    let binds = buf[2] as usize;
    let mut fds = fds.into_iter();
    let workspace = if flags & GO_WORKSPACE != 0 {
        Some(fds.next()?)
    } else {
        None
    };
    let image = if flags & GO_IMAGE != 0 {
        Some(fds.next()?)
    } else {
        None
    };
    let trees: Vec<OwnedFd> = fds.collect();
    if trees.len() != binds {
        return None;
    }
    Some(Trees {
        workspace,
        image,
        binds: trees,
    })
}

/// Takes the ids the box is set up as: uid/gid 0 of the box, or with a single mapped id, that
/// one (its capabilities in the box's namespace are the creator's, whatever the uid). With a
/// range the clone still holds the host's ids (unmapped in the box); the supplementary groups
/// of host root go too.
pub(super) fn take_setup_ids(mapping: Mapping) -> nix::Result<()> {
    use nix::unistd::{setgroups, setresgid, setresuid, Gid, Uid};
    let (u, g) = mapping.setup_ids();
    let (root_u, root_g) = (Uid::from_raw(u), Gid::from_raw(g));
    setresgid(root_g, root_g, root_g)?;
    if matches!(mapping, Mapping::Range { .. }) {
        setgroups(&[])?;
    }
    setresuid(root_u, root_u, root_u)
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
    lifeline: Option<BorrowedFd<'_>>,
    fallback: &Fallback,
    reporter: &mut Reporter<'_>,
) -> BoxReport {
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
            return startup_failed(format!("pidfd_open: {e}"));
        }
    };
    if let Err(e) = mapping.write(pid) {
        kill_and_reap(pid);
        return startup_failed(format!("cannot write the box's uid/gid maps: {e}"));
    }
    let trees = match mapping {
        Mapping::Range { uid_base, gid_base } => {
            match idmapped_trees(spec, pid, uid_base, gid_base) {
                Ok(t) => t,
                Err(why) => {
                    kill_and_reap(pid);
                    return startup_failed(why);
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
        return startup_failed(
            "a resident box can't keep CAP_SYS_ADMIN: its locked mounts live in namespaces its calls would not join",
        );
    }
    if spec.resident.is_some() {
        let mut kinds = vec!["user", "mnt", "ipc", "uts", "pid"];
        if !spec.host_network {
            kinds.push("net");
        }
        // No cgroup namespace: PID 1 makes its own only after "go"; a call makes one of its own
        // at its cgroup (see `exec::call_init`), as a fresh box does at the box's.
        for kind in kinds {
            match std::fs::File::open(format!("/proc/{pid}/ns/{kind}")) {
                Ok(f) => ns_files.push((kind, f)),
                Err(e) => {
                    kill_and_reap(pid);
                    return startup_failed(format!("open the box's {kind} namespace: {e}"));
                }
            }
        }
    }
    if send_go(&go_w, &trees).is_err() {
        kill_and_reap(pid);
        return startup_failed("the box's init exited before it could start");
    }
    drop(trees);
    // Wait for the box to arm its parent-death signal before anything can kill us.
    let mut ack = [0u8; 1];
    if !matches!(nix::unistd::read(&go_w, &mut ack), Ok(1)) {
        kill_and_reap(pid);
        return startup_failed("the box's init exited before it could start");
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
        if let Some(l) = lifeline {
            fds.push(PollFd::new(l, PollFlags::POLLIN));
        }
        match poll(&mut fds, PollTimeout::from(ms.max(1))) {
            Ok(_) => {
                if fds[0].revents().is_some_and(|r| !r.is_empty()) {
                    break;
                }
                if fds
                    .get(1)
                    .and_then(|f| f.revents())
                    .is_some_and(|r| !r.is_empty())
                {
                    let _ = sys::pidfd_kill(pidfd.as_fd(), libc::SIGKILL);
                    ended_by = Some(Fault::new(
                        FaultKind::Killed,
                        "the caller ended the call (Sandbox.close() while it ran, or the caller's process exited); kern killed the box",
                    ));
                    break;
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
    let unswept = sweep_setid(spec);

    let mut messages = String::new();
    let _ = std::fs::File::from(init_r).read_to_string(&mut messages);
    let oom = cgroup
        .as_ref()
        .filter(|cg| cg.oom_kills() > 0)
        .map(|cg| cg.shmem_bytes());
    let mut report = conclude(spec, &messages, ended_by, oom, init_status, "box's init");
    fail_closed(&mut report, unswept);
    report
}

/// Clears set-id bits in everything the box could write (the workspace, `"rw"` binds): the
/// second wall behind the seccomp filter. A sweep that cannot finish is a fault, never a pass.
pub(super) fn sweep_setid(spec: &BoxSpec) -> Option<Fault> {
    let writable = spec.binds.iter().filter(|b| b.writable).map(|b| &b.source);
    for root in std::iter::once(&spec.workspace).chain(writable) {
        if let Err(why) = crate::workspace::walk::strip_setid(root) {
            let message = format!(
                "kern could not check every file the box left in {} for set-id bits ({why}), so the call is failed closed; remove what the box left there",
                root.display()
            );
            note("warning", &message);
            return Some(Fault::new(FaultKind::Killed, message));
        }
    }
    None
}

/// Puts a failed sweep's fault on the report, unless the sandbox already acted.
pub(super) fn fail_closed(report: &mut BoxReport, unswept: Option<Fault>) {
    if let Some(f) = unswept {
        if report.fault.is_none() {
            report.fault = Some(f);
        }
    }
}

/// How a box (or one call into a resident box) ended, from its init's messages on the init
/// pipe: `ended_by` is kern's own reason (timeout, caller gone), `oom` the cgroup's shmem bytes
/// when the OOM killer acted, `init_status` how the init (`who`) ended.
pub(super) fn conclude(
    spec: &BoxSpec,
    messages: &str,
    ended_by: Option<Fault>,
    oom: Option<u64>,
    init_status: nix::Result<WaitStatus>,
    who: &str,
) -> BoxReport {
    let mut report = BoxReport {
        exit_code: 0,
        fault: None,
        ..Default::default()
    };
    let mut exited = false;
    let mut tmpfs_used: Vec<(u64, String)> = Vec::new();
    let mut blocked: Vec<&str> = Vec::new();
    for line in messages.lines() {
        let (kind, rest) = line.split_at(
            line.char_indices()
                .nth(1)
                .map(|(i, _)| i)
                .unwrap_or(line.len()),
        );
        let rest = rest.trim_start();
        match kind.chars().next() {
            Some(msg::SETUP_FAILED) if report.fault.is_none() => {
                report.exit_code = 125;
                report.fault = Some(Fault::new(
                    FaultKind::StartupFailed,
                    format!("the box could not be built: {rest}"),
                ));
            }
            Some(msg::EXEC_FAILED) if report.fault.is_none() => {
                let (errno, program) = rest.split_once(' ').unwrap_or((rest, ""));
                let errno: i32 = errno.parse().unwrap_or(libc::ENOENT);
                let why = std::io::Error::from_raw_os_error(errno);
                let hint = if errno == libc::ENOENT {
                    if program.contains('/') {
                        " (no such file in the box)".to_string()
                    } else {
                        format!(" (not found in the box's PATH {})", spec.path_var())
                    }
                } else {
                    String::new()
                };
                report.exit_code = 127;
                report.fault = Some(Fault::new(
                    FaultKind::ExecFailed,
                    format!("cannot run \"{program}\": {why}{hint}"),
                ));
            }
            Some(msg::BLOCKED) => blocked.push(rest),
            Some(msg::EXITED) => {
                let mut parts = rest.split(' ');
                let code = parts.next().and_then(|c| c.parse().ok()).unwrap_or(255);
                if report.fault.is_none() {
                    report.exit_code = code;
                }
                exited = true;
                while let (Some(used), Some(target)) = (parts.next(), parts.next()) {
                    tmpfs_used.push((used.parse().unwrap_or(0), target.to_string()));
                }
            }
            _ => {}
        }
    }
    if let Some(fault) = ended_by {
        report.exit_code = 137;
        report.fault = Some(fault);
        return report;
    }
    if let Some(shmem) = oom {
        report.fault = Some(oom_fault(spec, &tmpfs_used, shmem));
        if !exited {
            report.exit_code = 137;
        }
        return report;
    }
    if !exited && report.fault.is_none() {
        report.exit_code = 125;
        report.fault = Some(Fault::new(
            FaultKind::Killed,
            format!("the {who} ended before the workload reported an exit ({init_status:?})"),
        ));
    }
    if let Ok(WaitStatus::Signaled(_, sig, _)) = init_status {
        if report.fault.is_none() {
            report.fault = Some(Fault::new(
                FaultKind::Killed,
                format!("the {who} was killed by {sig}"),
            ));
        }
    }
    if report.fault.is_none() && spec.seccomp.is_some() {
        report.fault = escape_fault(&blocked, report.exit_code);
    }
    report
}

/// What the `untrusted` profile stopped, when it stopped something: the syscalls its supervisor
/// refused, or a process killed for a foreign architecture's syscall (SIGSYS from the filter's
/// architecture check; the supervisor never kills).
fn escape_fault(blocked: &[&str], exit_code: i32) -> Option<Fault> {
    if !blocked.is_empty() {
        return Some(Fault::new(
            FaultKind::EscapeBlocked,
            format!(
                "securityProfile \"untrusted\" refused {}: each attempt failed with EPERM and the code ran on",
                blocked.join(", ")
            ),
        ));
    }
    (exit_code == 128 + libc::SIGSYS).then(|| {
        Fault::new(
            FaultKind::EscapeBlocked,
            "securityProfile \"untrusted\" killed the workload (SIGSYS) for a system call of a foreign architecture, such as a 32-bit int 0x80 call on x86_64",
        )
    })
}

/// Detached, idmapped copies of the workspace and the image directory, made here because only
/// the host's root may idmap them, and because box root (an unprivileged host id) may not even
/// be able to traverse their paths.
fn idmapped_trees(
    spec: &BoxSpec,
    pid: libc::pid_t,
    uid_base: u32,
    gid_base: u32,
) -> Result<Trees, String> {
    let ws = spec.workspace.to_string_lossy();
    let box_ns = idmap::userns_of(pid).map_err(|e| format!("the box's user namespace: {e}"))?;
    let account = spec.user.as_ref().map_or((0, 0), |u| (u.uid, u.gid));
    let host_account = (uid_base + account.0, gid_base + account.1);
    // The directory's owner on disk appears as the box's account. For a root-owned directory
    // and box root, the box's own namespace does it and keeps every other owner in the tree
    // as the same id in the box; otherwise a namespace made for this owner and account.
    let owned_ns = |path: &std::path::Path| -> Result<OwnedFd, String> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).map_err(|e| format!("stat {}: {e}", path.display()))?;
        if (m.uid(), m.gid()) == (0, 0) && account == (0, 0) {
            return box_ns.try_clone().map_err(|e| e.to_string());
        }
        idmap::userns_owning_as((m.uid(), m.gid()), host_account).map_err(|e| {
            format!(
                "a user namespace showing {} (owned by {}:{}) as the box's account: {e}",
                path.display(),
                m.uid(),
                m.gid()
            )
        })
    };
    let ws_ns = owned_ns(&spec.workspace)?;
    // Never a fallback to mapping host root: without an idmapped workspace the box can't run.
    let workspace = idmap::idmapped_tree(&ws, ws_ns.as_fd(), sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV).map_err(|e| {
        format!(
            "running as root, kern maps the box to an unprivileged id range and attaches the workspace \
             {ws} as an idmapped mount, which failed ({e}); use a workspace on a filesystem that \
             supports idmapped mounts (ext4, xfs, btrfs; tmpfs from Linux 6.3), or run unprivileged"
        )
    })?;
    let image = match &spec.root {
        RootSpec::Dir { path } => {
            let p = path.to_string_lossy();
            let ro = sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;
            // An image on a filesystem that can't idmap is still usable read-only: its files
            // then show as owned by nobody inside the box.
            let tree = idmap::idmapped_tree(&p, box_ns.as_fd(), ro).or_else(|_| {
                let t = sys::open_tree_clone(&p, true)?;
                sys::mount_setattr_fd(t.as_fd(), ro, None)?;
                Ok::<_, std::io::Error>(t)
            });
            Some(tree.map_err(|e| format!("cannot attach the image {p}: {e}"))?)
        }
        RootSpec::Host => None,
    };
    let binds = spec
        .binds
        .iter()
        .map(|b| bind_tree(b, owned_ns(&b.source)?.as_fd()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Trees {
        workspace: Some(workspace),
        image,
        binds,
    })
}

/// An extra mount as a detached tree, idmapped like the workspace (its owner appears as the
/// box's account), checked to be the very inode the caller checked.
fn bind_tree(b: &BindSpec, userns: BorrowedFd<'_>) -> Result<OwnedFd, String> {
    let src = b.source.to_string_lossy();
    let base = sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;
    let attrs = if b.writable {
        base
    } else {
        base | sys::MOUNT_ATTR_RDONLY
    };
    let tree = match idmap::idmapped_tree(&src, userns, attrs) {
        Ok(t) => t,
        // Read-only, an unmapped tree still works: its files show as owned by nobody.
        Err(_) if !b.writable => sys::open_tree_clone(&src, true)
            .and_then(|t| sys::mount_setattr_fd(t.as_fd(), attrs, None).map(|_| t))
            .map_err(|e| format!("cannot attach the mount {src}: {e}"))?,
        Err(e) => {
            return Err(format!(
                "running as root, kern attaches a writable mount as an idmapped mount, and {src} \
                 can't be idmapped ({e}); mount it read-only, or use a directory on ext4, xfs or \
                 btrfs"
            ))
        }
    };
    let st = nix::sys::stat::fstat(&tree).map_err(|e| format!("stat the mount {src}: {e}"))?;
    if st.st_dev != b.dev || st.st_ino != b.ino {
        return Err(format!(
            "the mount source {src} changed after it was checked; refusing to mount it"
        ));
    }
    Ok(tree)
}

fn send_go(go: &OwnedFd, trees: &Trees) -> std::io::Result<()> {
    let mut flags = 0u8;
    let mut fds = Vec::new();
    if let Some(w) = &trees.workspace {
        flags |= GO_WORKSPACE;
        fds.push(w.as_raw_fd());
    }
    if let Some(i) = &trees.image {
        flags |= GO_IMAGE;
        fds.push(i.as_raw_fd());
    }
    fds.extend(trees.binds.iter().map(|b| b.as_raw_fd()));
    sys::send_with_fds(go.as_fd(), &[b'g', flags, trees.binds.len() as u8], &fds).map(drop)
}

fn oom_fault(spec: &BoxSpec, tmpfs_used: &[(u64, String)], shmem: u64) -> Fault {
    let cap = spec.limits.memory_bytes.unwrap_or(0);
    let mut message = format!(
        "the box reached its memory cap of {} MiB and the kernel's OOM killer ended a process",
        cap >> 20
    );
    // Scratch tmpfs pages are charged to the box: name the scratch when it held a real share.
    // PID 1's own reading names each mount, but PID 1 may itself have been OOM-killed; the
    // cgroup's shmem figure survives that.
    let significant = |bytes: u64| cap > 0 && bytes * 4 >= cap;
    let named: Vec<String> = tmpfs_used
        .iter()
        .filter(|(used, _)| significant(*used))
        .map(|(used, target)| format!("{target} held {} MiB", used >> 20))
        .collect();
    let scratch = if !named.is_empty() {
        Some(named.join(", "))
    } else if significant(shmem) {
        let targets: Vec<&str> = spec
            .tmpfs
            .iter()
            .map(|t| t.target.as_str())
            .chain(["/dev/shm"])
            .collect();
        Some(format!(
            "scratch filesystems ({}) held {} MiB",
            targets.join(", "),
            shmem >> 20
        ))
    } else {
        None
    };
    if let Some(s) = scratch {
        message.push_str(&format!(
            "; files in scratch tmpfs count against memoryMb, and {s}: delete scratch files, write big files to the workspace, or raise memoryMb"
        ));
    }
    Fault::new(FaultKind::Oom, message)
}

fn human_secs(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{} s", ms / 1000)
    } else {
        format!("{:.3} s", ms as f64 / 1000.0)
    }
}

/// What a resident box is started with.
struct ResidentStart<'a> {
    /// The box's namespaces, held open for the calls (see `resident::State::ns_fds`).
    ns_files: Vec<(&'static str, std::fs::File)>,
    /// PID 1 unshared its cgroup namespace (see `child`).
    cgroup_ns: bool,
    name: &'a str,
    ttl_ms: u64,
    posture: &'a std::collections::BTreeMap<String, String>,
    pid: libc::pid_t,
    start: Instant,
}

/// A resident box's life after its clone: wait for PID 1's "ready", write the state file (the
/// opener holds the name's lock), report "started", then detach from the caller entirely (new
/// session, stdio and control socket closed, the lifeline ignored) so the box outlives the
/// process that opened it. Ends at the TTL, on SIGTERM, or when PID 1 dies (a stop: SIGKILL
/// through its pidfd); then removes the state (the cgroup goes in `run_box`).
fn keep_resident(
    spec: &BoxSpec,
    r: ResidentStart<'_>,
    pidfd: OwnedFd,
    init_r: OwnedFd,
    fallback: &Fallback,
    reporter: &mut Reporter<'_>,
) -> BoxReport {
    use super::resident::{self as res, ProcId, State};
    let kill = |why: String| {
        let _ = sys::pidfd_kill(pidfd.as_fd(), libc::SIGKILL);
        let _ = waitpid(Pid::from_raw(r.pid), None);
        startup_failed(why)
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
    if !line.starts_with(msg::READY) {
        let why = line
            .strip_prefix(msg::SETUP_FAILED)
            .map(|w| format!("the box could not be built: {}", w.trim()))
            .unwrap_or_else(|| "the resident box's init ended during its setup".into());
        return kill(why);
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
        rlimits: res::Rlimits {
            data_bytes: fallback.data_bytes,
            nproc: fallback.nproc,
        },
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
    let _ = waitpid(Pid::from_raw(r.pid), None);
    // Nobody reads this report: a sweep that fails has said so on kern's stderr.
    let _ = sweep_setid(spec);
    res::remove_if_monitor(&dir, r.name, &monitor);
    BoxReport::default()
}
