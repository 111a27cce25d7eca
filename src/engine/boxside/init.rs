//! The child side of every clone: what runs in the box, never in the monitor. The clone child
//! that waits for "go" and becomes the box's PID 1 (`child`, `pid1`), a call's init that joins a
//! resident box (`call_init`), and the workload's last steps before exec (`exec_workload`).
//! What they receive and send back is `handoff`'s.
//!
//! PID 1 is `kern`'s own code, forked (never re-exec'd) inside the box: it builds the mount tree,
//! forks the workload, reaps every zombie, and reports the workload's end to the monitor outside.
//! It is non-dumpable, and its memory map still belongs to the host's user namespace (it was
//! forked from there), so the workload can open neither `/proc/1/exe` nor `/proc/1/mem`.

use crate::engine::boxside::mounts::{self, Sources, Trees};
use crate::engine::boxside::pid1_signals::Pid1Signals;
use crate::engine::monitor::idmap::Mapping;
use crate::engine::plan::{self, pid1, run::Saved, Posture, Workload};
use crate::engine::shared::handoff::{self, send, BoxFds, Fallback};
use crate::engine::shared::protocol::pid1::Pid1Msg;
use crate::engine::shared::spec::{at_or_under, BoxSpec, CHANNEL_FD};
use crate::engine::shared::sys::{self, Forked};
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;
use std::ffi::CString;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};

/// The clone child, before it becomes PID 1 proper: wait for the maps (and the idmapped trees
/// when the box has a range), take uid/gid 0 of the box, then hand over.
#[allow(clippy::too_many_arguments)]
pub(in crate::engine) fn child(
    spec: &BoxSpec,
    src: &Sources,
    init_w: OwnedFd,
    go_r: OwnedFd,
    passed: BoxFds,
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
    let Some(trees) = handoff::receive_go(&go_r) else {
        sys::exit_now(1);
    };
    if take_setup_ids(mapping).is_err() {
        sys::exit_now(1);
    }
    // No nested user namespaces (but ours): inside one, the workload would hold every
    // capability again (the door to much of the kernel's attack surface). The limit is per user
    // namespace and charged all the way up, so 1 here admits exactly the one PID 1 makes to
    // lock the mounts (`nest`), and every later attempt from inside it, by any account,
    // fails. Written through the host's /proc that is still mounted here.
    // A zygote's box makes one for each call it forks, and each call's PID 1 sets its own
    // namespace's limit to 0 in turn (`plan::workload`).
    let limit = if spec.serves_zygote {
        crate::engine::monitor::zygote::MAX_CALLS
    } else if spec.locks_mounts() {
        1
    } else {
        0
    };
    if let Err(e) = plan::run::run(&[pid1::nested_userns_limit(limit)], &mut Saved::default()) {
        // A container's read-only /proc/sys refuses it (EROFS): say so, the monitor explains.
        send(&init_w, &Pid1Msg::SetupFailed(e.to_string()));
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
    keep.extend(passed.raw());
    sys::close_others(&keep);
    if in_cgroup {
        // The box sees its own cgroup as the root of the hierarchy.
        let _ = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP);
    }
    pid1(spec, src, &trees, init_w, passed, fallback)
}

/// Takes the ids the box is set up as: uid/gid 0 of the box, or with a single mapped id, that
/// one (its capabilities in the box's namespace are the creator's, whatever the uid). With a
/// range the clone still holds the host's ids (unmapped in the box); the supplementary groups
/// of host root go too.
pub(in crate::engine) fn take_setup_ids(mapping: Mapping) -> nix::Result<()> {
    use nix::unistd::{setgroups, setresgid, setresuid, Gid, Uid};
    let (u, g) = mapping.setup_ids();
    let (root_u, root_g) = (Uid::from_raw(u), Gid::from_raw(g));
    setresgid(root_g, root_g, root_g)?;
    if matches!(mapping, Mapping::Range { .. }) {
        setgroups(&[])?;
    }
    setresuid(root_u, root_u, root_u)
}

/// What the call's init needs to join the box.
pub(in crate::engine) struct Joining<'a> {
    pub(in crate::engine) namespaces: &'a [(nix::sched::CloneFlags, OwnedFd)],
    /// The call gets a cgroup namespace rooted at its own cgroup.
    pub(in crate::engine) cgroup_ns: bool,
    pub(in crate::engine) mapping: Mapping,
    pub(in crate::engine) init_w: OwnedFd,
    pub(in crate::engine) go_r: OwnedFd,
    /// Where the call's own mount namespace goes (`hand_over_mounts`).
    pub(in crate::engine) keep: OwnedFd,
}

/// The call's init (a child of the `kern` running the call, `resident::call`): joins the box's
/// namespaces, takes the box's ids, forks the workload and reports its end like PID 1 does.
/// Never returns.
pub(in crate::engine) fn call_init(
    spec: &BoxSpec,
    j: Joining<'_>,
    passed: BoxFds,
    fallback: &Fallback,
) -> ! {
    std::panic::set_hook(Box::new(|info| {
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            format!("kern: internal error in the call: {info}\n").as_bytes(),
        );
        sys::exit_now(125)
    }));
    let init_w = j.init_w;
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        send(&init_w, &Pid1Msg::SetupFailed(format!("{what}: {e}")));
        sys::exit_now(1)
    };
    // Holds what the host's process has: nothing of it may reach the box.
    let _ = nix::sys::prctl::set_dumpable(false);
    if let Err(e) = sys::stdin_null() {
        fail("stdin", &e);
    }
    let mut go = [0u8; 1];
    if !matches!(nix::unistd::read(&j.go_r, &mut go), Ok(1)) {
        sys::exit_now(1);
    }
    drop(j.go_r);
    let mut keep = vec![init_w.as_raw_fd(), j.keep.as_raw_fd()];
    keep.extend(j.namespaces.iter().map(|(_, f)| f.as_raw_fd()));
    keep.extend(passed.raw());
    sys::close_others(&keep);
    // The host's /proc of this process, to name its mount namespace once it has its own: the
    // box's /proc can't (this process is outside the box's PID namespace).
    let proc_self = std::fs::File::open("/proc/self").ok();
    for (flag, fd) in j.namespaces {
        if let Err(e) = nix::sched::setns(fd, *flag) {
            fail(
                &format!("join the resident box's namespaces ({flag:?})"),
                &e,
            );
        }
    }
    if j.cgroup_ns {
        if let Err(e) = nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWCGROUP) {
            fail("a cgroup namespace for the call", &e);
        }
    }
    // The call's terminals (`kern attach`, a pty it opens) out of reach of earlier calls'
    // processes (see `pid1::private_devpts`).
    if let Err(e) = plan::run::run(&pid1::private_devpts(), &mut Saved::default()) {
        fail("give the call its own /dev/pts", &e);
    }
    hand_over_mounts(proc_self, j.keep);
    if let Err(e) = take_setup_ids(j.mapping) {
        fail("take the box's ids", &e);
    }
    // If the kern running the call dies, so does this init (set after the id change, which
    // clears it). The workload, already in the box, is then the box's to reap.
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL);
    if let Err(e) = std::env::set_current_dir(&spec.workspace_target) {
        fail(&format!("chdir {}", spec.workspace_target), &e);
    }
    let (listener_tx, listener_rx) = match &spec.seccomp {
        Some(_) => match std::os::unix::net::UnixStream::pair() {
            Ok((tx, rx)) => (Some(OwnedFd::from(tx)), Some(rx)),
            Err(e) => fail("socketpair for the seccomp listener", &e),
        },
        None => (None, None),
    };
    let BoxFds {
        channel,
        stdin,
        tty,
        ..
    } = passed;
    let io = WorkloadIo {
        channel,
        stdin,
        tty,
        listener_tx,
    };
    // No handler runs here either: the workload shares this init's namespace and could signal
    // it as it could PID 1 (`pid1_signals`).
    let signals = match Pid1Signals::take() {
        Ok(s) => s,
        Err(e) => fail("the call's init's signalfd", &e),
    };
    let workload = match sys::clone_fork(0) {
        Ok(Forked::Child) => {
            drop(signals);
            exec_workload(spec, init_w, io, fallback, true)
        }
        Ok(Forked::Parent(pid)) => pid,
        Err(e) => fail("fork the workload", &e),
    };
    drop(io);
    send(&init_w, &Pid1Msg::Pid(workload));
    let end = match listener_rx {
        Some(rx) => supervise_until(workload, rx, &init_w, &signals),
        None => reap_until(workload, &signals),
    };
    send_end(&init_w, spec, end);
    sys::exit_now(0)
}

/// Sends the call's mount namespace to the `kern` running the call, which keeps it (unread, in
/// the socket) until it has reported: the namespace then ends there, not in the exit of the
/// call's last process, where the teardown of its devpts (an RCU grace period, ~10 ms here)
/// would delay the report. Best effort: without it, only the report comes later.
fn hand_over_mounts(proc_self: Option<std::fs::File>, to: OwnedFd) {
    // The host's own procfs (opened before joining the box), so a plain open: its magic link
    // is the point.
    let ns = proc_self.and_then(|dir| {
        nix::fcntl::openat(
            &dir,
            "ns/mnt",
            nix::fcntl::OFlag::O_RDONLY | nix::fcntl::OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .ok()
    });
    if let Some(ns) = ns {
        let _ = sys::send_with_fds(to.as_fd(), b"m", &[ns.as_raw_fd()]);
    }
}

/// Runs as the box's PID 1 after the monitor wrote the id maps. Never returns.
fn pid1(
    spec: &BoxSpec,
    src: &Sources,
    trees: &Trees,
    init_pipe: OwnedFd,
    passed: BoxFds,
    fallback: &Fallback,
) -> ! {
    if let Err(e) = setup(spec, src, trees) {
        send(&init_pipe, &Pid1Msg::SetupFailed(e.0.to_string()));
        sys::exit_now(1);
    }
    // The caller's session keyring is inherited through fork and would stay readable by the
    // box (keys are readable by whoever possesses their keyring): start an empty one.
    if let Err(e) = sys::new_session_keyring() {
        send(
            &init_pipe,
            &Pid1Msg::SetupFailed(format!("join a new session keyring: {e}")),
        );
        sys::exit_now(1);
    }
    let BoxFds {
        channel,
        egress,
        stdin,
        tty,
        connect,
    } = passed;
    if let (Some(e), Some(line)) = (&spec.egress, egress) {
        if let Err(err) = crate::engine::boxside::relay::start(e.port, &e.direct, line) {
            send(&init_pipe, &Pid1Msg::SetupFailed(err.0.to_string()));
            sys::exit_now(1);
        }
    }
    if let Some(line) = connect {
        if let Err(err) = crate::engine::boxside::connector::start(line) {
            send(&init_pipe, &Pid1Msg::SetupFailed(err.0.to_string()));
            sys::exit_now(1);
        }
    }
    if spec.resident.is_some() {
        // A resident box: no workload of its own. Calls join it later (`resident::call`); their
        // orphans land here.
        drop(channel);
        drop(stdin);
        drop(tty);
        send(&init_pipe, &Pid1Msg::Ready);
        // It lives on past its first kern, which must not wait for these pipes' EOF (its
        // caller did, `drain::DRAIN_GRACE`, on every open). It has nothing to say on them.
        let _ = sys::detach_fds(&[1, 2]);
        idle_reaper();
    }
    // The workload hands PID 1 its seccomp listener over this pair (the `untrusted` profile).
    let (listener_tx, listener_rx) = match &spec.seccomp {
        Some(_) => match std::os::unix::net::UnixStream::pair() {
            Ok((tx, rx)) => (Some(OwnedFd::from(tx)), Some(rx)),
            Err(e) => {
                send(
                    &init_pipe,
                    &Pid1Msg::SetupFailed(format!("socketpair for the seccomp listener: {e}")),
                );
                sys::exit_now(1);
            }
        },
        None => (None, None),
    };
    let io = WorkloadIo {
        channel,
        stdin,
        tty,
        listener_tx,
    };
    let signals = match Pid1Signals::take() {
        Ok(s) => s,
        Err(e) => {
            send(
                &init_pipe,
                &Pid1Msg::SetupFailed(format!("PID 1's signalfd: {e}")),
            );
            sys::exit_now(1);
        }
    };
    let workload = match sys::clone_fork(0) {
        Ok(Forked::Child) => {
            drop(signals);
            exec_workload(spec, init_pipe, io, fallback, false)
        }
        Ok(Forked::Parent(pid)) => {
            // The workload's channel and stdin are the workload's alone: the caller's writer
            // sees EPIPE once the workload is gone.
            drop(io);
            pid
        }
        Err(e) => {
            send(
                &init_pipe,
                &Pid1Msg::SetupFailed(format!("fork the workload: {e}")),
            );
            sys::exit_now(1);
        }
    };
    let end = match listener_rx {
        Some(rx) => supervise_until(workload, rx, &init_pipe, &signals),
        None => reap_until(workload, &signals),
    };
    send_end(&init_pipe, spec, end);
    sys::exit_now(0)
}

fn setup(spec: &BoxSpec, src: &Sources, trees: &Trees) -> Result<(), mounts::SetupError> {
    mounts::build(spec, src, trees)?;
    if spec.locks_mounts() {
        crate::engine::boxside::nest::nest(spec)?;
    }
    // Non-dumpable: /proc/1 stays out of the workload's reach. Only now: `nest`'s helper had to
    // write PID 1's maps, and no code of the box has run yet.
    nix::sys::prctl::set_dumpable(false)
        .map_err(|e| mounts::SetupError(format!("make PID 1 non-dumpable: {e}")))?;
    let mut ops = vec![pid1::hostname(&spec.hostname)];
    // The host's own network namespace: its interfaces are not ours to touch.
    if !spec.host_network {
        ops.extend(pid1::loopback());
    }
    plan::run::run(&ops, &mut Saved::default()).map_err(|e| mounts::SetupError(e.to_string()))
}

/// `reap_until` for the `untrusted` profile: PID 1 also answers the notify filter. It names each
/// refused syscall to the monitor once (`B <name>`, a bounded number of lines, so a loop of
/// attempts cannot fill the init pipe and stall the box), then fails the call with EPERM. PID 1
/// is outside every filter (the workload installs them after the fork), non-dumpable, and immune
/// to signals from inside its own PID namespace, so the workload can't silence it.
fn supervise_until(
    workload: libc::pid_t,
    rx: std::os::unix::net::UnixStream,
    init_pipe: &OwnedFd,
    signals: &Pid1Signals,
) -> End {
    let mut byte = [0u8; 1];
    // The workload sends it just before exec; None: it never got that far (it has exited).
    let mut listener = match sys::recv_with_fds(rx.as_raw_fd(), &mut byte) {
        Ok((_, mut fds)) if !fds.is_empty() => Some(fds.swap_remove(0)),
        _ => None,
    };
    drop(rx);
    let mut named: Vec<String> = Vec::new();
    loop {
        if let Some(end) = reap_ended(workload) {
            return end;
        }
        // SIGCHLD and the caller's signals come on the signalfd, so one poll waits for both
        // children and notifications.
        let mut fds = vec![PollFd::new(signals.fd(), PollFlags::POLLIN)];
        if let Some(l) = &listener {
            fds.push(PollFd::new(l.as_fd(), PollFlags::POLLIN));
        }
        if poll(&mut fds, PollTimeout::NONE).is_err() {
            continue;
        }
        let ready = fds
            .get(1)
            .and_then(|f| f.revents())
            .unwrap_or(PollFlags::empty());
        drop(fds);
        signals.take_queued(workload);
        let Some(l) = &listener else { continue };
        if ready.intersects(PollFlags::POLLHUP | PollFlags::POLLERR | PollFlags::POLLNVAL) {
            // No process is left under the filter.
            listener = None;
            continue;
        }
        if !ready.contains(PollFlags::POLLIN) {
            continue;
        }
        match sys::seccomp_recv(l.as_fd()) {
            Ok(n) => {
                let name = crate::engine::boxside::seccomp::describe(n.nr, &n.args);
                if named.len() < 32 && !named.contains(&name) {
                    // Before the answer: the line is in the pipe before the workload can go on,
                    // and so before its exit is reported.
                    send(init_pipe, &Pid1Msg::Blocked(name.to_string()));
                    named.push(name);
                }
                // ENOENT: the caller died meanwhile; nothing to answer.
                let _ = sys::seccomp_deny(l.as_fd(), n.id, libc::EPERM);
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::EINTR | libc::ENOENT)) => {}
            Err(_) => listener = None,
        }
    }
}

/// A resident box's PID 1: reaps whatever ends, for as long as the box lives (the monitor
/// ends it with SIGKILL). SIGCHLD is read from a signalfd (`pid1_signals`: no handler runs
/// here), so no exit between a wait and the sleep is missed.
fn idle_reaper() -> ! {
    use nix::sys::wait::WaitPidFlag;
    let signals = Pid1Signals::take();
    loop {
        while let Ok(s) = waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            if s == WaitStatus::StillAlive {
                break;
            }
        }
        match &signals {
            Ok(signals) => {
                let mut fds = [PollFd::new(signals.fd(), PollFlags::POLLIN)];
                let _ = poll(&mut fds, PollTimeout::NONE);
                // No workload of its own: nothing is passed on.
                signals.take_queued(0);
            }
            // No signalfd: poll for orphans now and then instead.
            Err(_) => std::thread::sleep(std::time::Duration::from_millis(200)),
        }
    }
}

/// How the workload ended: its exit code (128+signal when a signal ended it), and that signal.
type End = (i32, Option<i32>);

/// The workload's `End` when `status` is its own exit.
fn workload_end(status: &WaitStatus, workload: libc::pid_t) -> Option<End> {
    match *status {
        WaitStatus::Exited(pid, code) if pid.as_raw() == workload => Some((code, None)),
        WaitStatus::Signaled(pid, sig, _) if pid.as_raw() == workload => {
            Some((128 + sig as i32, Some(sig as i32)))
        }
        _ => None,
    }
}

/// Reports the workload's end: the signal that ended it (`Signaled`), then `Exited`.
fn send_end(pipe: &OwnedFd, spec: &BoxSpec, (code, signal): End) {
    if let Some(sig) = signal {
        send(pipe, &Pid1Msg::Signaled(sig));
    }
    send(pipe, &exited(spec, code));
}

/// The workload's exit, and how full each scratch tmpfs was, so an OOM can name the scratch
/// that held the bytes.
fn exited(spec: &BoxSpec, code: i32) -> Pid1Msg {
    let tmpfs_used = spec
        .tmpfs
        .iter()
        .map(|t| {
            nix::sys::statvfs::statvfs(t.target.as_str())
                .map(|s| (s.blocks() - s.blocks_free()) * s.fragment_size())
                .unwrap_or(0)
        })
        .collect();
    Pid1Msg::Exited { code, tmpfs_used }
}

/// Reaps every child until the workload itself has ended, passing on the caller's signals
/// meanwhile; returns how it ended.
fn reap_until(workload: libc::pid_t, signals: &Pid1Signals) -> End {
    loop {
        if let Some(end) = reap_ended(workload) {
            return end;
        }
        let mut fds = [PollFd::new(signals.fd(), PollFlags::POLLIN)];
        let _ = poll(&mut fds, PollTimeout::NONE);
        signals.take_queued(workload);
    }
}

/// Reaps every child that has ended; the workload's end if it was among them (or if no child
/// is left to wait for, which can't be before the workload is reaped: `(255, None)`).
fn reap_ended(workload: libc::pid_t) -> Option<End> {
    use nix::sys::wait::WaitPidFlag;
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::StillAlive) => return None,
            Ok(s) => {
                if let Some(end) = workload_end(&s, workload) {
                    return Some(end);
                }
            }
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return Some((255, None)),
        }
    }
}

/// The caller's descriptors the workload takes over, and the seccomp listener's way to PID 1.
struct WorkloadIo {
    channel: Option<OwnedFd>,
    stdin: Option<OwnedFd>,
    tty: Option<OwnedFd>,
    listener_tx: Option<OwnedFd>,
}

/// In the workload's process: drop everything, then exec. Never returns. The posture is the
/// same for a fresh box's workload and a call into a resident box (`call_init`), and the same
/// plan a zygote's fork runs (`plan::workload`); what is not a plan step here is this process's
/// own: its cwd, terminal, descriptors, AppArmor profile, signals, and the exec.
/// `own_keyring`: join a new session keyring (a resident box's call, forked from outside the
/// box); a fresh box's workload inherits the empty one its PID 1 joined, and a second one per
/// box would halve how many boxes one user can run at once (kernel.keys.maxkeys is 200 for a
/// non-root user: 100 concurrent rootless boxes ran out of it with two each).
fn exec_workload(
    spec: &BoxSpec,
    init_pipe: OwnedFd,
    io: WorkloadIo,
    fallback: &Fallback,
    own_keyring: bool,
) -> ! {
    let WorkloadIo {
        channel,
        stdin,
        tty,
        listener_tx,
    } = io;
    // The channel goes to fd 3; nothing else we keep may be sitting there when it does.
    let above_channel = |fd: OwnedFd| -> OwnedFd {
        if channel.is_none() || fd.as_raw_fd() > CHANNEL_FD {
            return fd;
        }
        match sys::dup_above(fd.as_fd(), 10) {
            Ok(fd) => fd,
            Err(_) => sys::exit_now(127),
        }
    };
    let init_pipe = above_channel(init_pipe);
    let listener_tx = listener_tx.map(above_channel);
    let init_pipe = &init_pipe;
    let fail = |what: &str, e: std::io::Error| -> ! {
        send(init_pipe, &Pid1Msg::SetupFailed(format!("{what}: {e}")));
        sys::exit_now(127)
    };
    let uid_now = nix::unistd::getuid().as_raw();
    let posture = Workload::of(&Posture::of_box(spec, fallback, uid_now));
    let mut saved = Saved::default();
    let mut run = |phase: &str, ops: &[plan::Op]| {
        if let Err(e) = plan::run::run(ops, &mut saved) {
            let step = e.what;
            fail(&format!("{phase}{step}"), e.error);
        }
    };
    // The terminal is opened in the box's own devpts while this is still box root; its master
    // goes to the caller, and only the caller holds it.
    let terminal = match (&spec.tty, &tty) {
        (Some(size), Some(to_caller)) => {
            match crate::engine::boxside::pty::open_in_box(*size, to_caller) {
                Ok(slave) => Some(slave),
                Err(e) => fail("open a terminal in the box's /dev/pts", e),
            }
        }
        _ => None,
    };
    drop(tty);
    run("", &posture.session);
    // Its own terminal, from the box, becomes its controlling one (it leads the new session
    // now), and its stdio.
    if let Some(slave) = &terminal {
        if let Err(e) = crate::engine::boxside::pty::take_as_stdio(slave) {
            fail("make the terminal the workload's", e);
        }
    }
    // Again here, not only in PID 1: a resident box's calls are forked from outside the box and
    // would otherwise carry their caller's session keyring in. Not a plan step: it retries on
    // EDQUOT (`sys::new_session_keyring`).
    if own_keyring {
        if let Err(e) = sys::new_session_keyring() {
            fail("join a new session keyring", e);
        }
    }
    run("setrlimit: ", &posture.limits);
    if let Err(e) = sys::cloexec_from(3) {
        fail("close fds", e);
    }
    // Before the channel goes to fd 3, which this pipe's end may occupy (its own number closes
    // at exec).
    if let Some(input) = &stdin {
        if let Err(e) = sys::place_at(input.as_fd(), 0) {
            fail("place stdin at fd 0", e);
        }
    }
    if let Some(ch) = &channel {
        if let Err(e) = sys::place_at(ch.as_fd(), CHANNEL_FD) {
            fail("place the channel at fd 3", e);
        }
    }
    run("drop privileges: ", &posture.privileges);
    // With the rights it runs with, never box root's: a directory it could not enter itself
    // (another process's `/proc/<pid>/root` or `fd/`) stays out of its reach as its cwd too.
    if let Some(cwd) = &spec.cwd {
        if at_or_under(cwd, &spec.workspace_target) {
            if let Err(why) = enter_call_cwd(cwd, &spec.workspace_target) {
                send(init_pipe, &Pid1Msg::CwdRefused(why.to_string()));
                sys::exit_now(127)
            }
        } else if let Err(e) = std::env::set_current_dir(cwd) {
            // An absolute cwd of the call's (or the setup box's own, which exists).
            send(
                init_pipe,
                &Pid1Msg::CwdRefused(not_entered(cwd, cwd, &e, "box")),
            );
            sys::exit_now(127)
        }
    }
    if let Some(profile) = &spec.apparmor {
        if let Err(e) = crate::engine::boxside::apparmor::exec_into(profile) {
            fail(
                &format!("enter the AppArmor profile {profile:?} at exec"),
                e,
            );
        }
    }
    // Ignored signals stay ignored across exec (kern's runtime ignores SIGPIPE): the workload
    // starts with every disposition at its default and nothing blocked, as from a shell.
    if let Err(e) = sys::default_signals() {
        fail("reset signals", e);
    }
    let argv: Vec<CString> = match spec.argv.iter().map(|a| sys::cstr(a)).collect() {
        Ok(v) => v,
        Err(e) => fail("argv", e),
    };
    let env: Vec<CString> = match spec
        .env
        .iter()
        .map(|(k, v)| sys::cstr(&format!("{k}={v}")))
        .collect()
    {
        Ok(v) => v,
        Err(e) => fail("env", e),
    };
    // Fail closed: no way to hand over the untrusted profile's listener is no filter, and no
    // workload.
    let listener_tx = match (&spec.seccomp, listener_tx) {
        (Some(_), None) => fail(
            "enter the untrusted seccomp profile",
            std::io::Error::other("no socket for the listener"),
        ),
        (_, tx) => tx,
    };
    // Last, with everything the exec needs in hand: from here on this process is filtered.
    run("", &posture.filters);
    // Not a plan step: the listener goes to PID 1 (`supervise_until`) over this process's own
    // socket, which the zygote's forks have no use for.
    if let Some(tx) = listener_tx.filter(|_| spec.seccomp.is_some()) {
        let handed = saved
            .take_fd(plan::workload::LISTENER)
            .ok_or_else(|| std::io::Error::other("the kernel returned no listener"))
            .and_then(|l| sys::send_with_fds(tx.as_fd(), b"L", &[l.as_raw_fd()]));
        if let Err(e) = handed {
            fail("enter the untrusted seccomp profile", e);
        }
    }
    let program = &spec.argv[0];
    let candidates: Vec<String> = if program.contains('/') {
        vec![program.clone()]
    } else {
        spec.path_var()
            .split(':')
            .filter(|d| !d.is_empty())
            .map(|d| format!("{d}/{program}"))
            .collect()
    };
    // The caller may signal the workload from here on (`SandboxProcess.pid`).
    send(init_pipe, &Pid1Msg::Workload(std::process::id() as i32));
    let mut last = libc::ENOENT;
    for c in candidates {
        let Ok(path) = sys::cstr(&c) else { continue };
        let err = sys::execve(&path, &argv, &env);
        let errno = err.raw_os_error().unwrap_or(libc::ENOENT);
        // As execvp does: keep looking past a missing or unusable entry, remember EACCES.
        if errno != libc::ENOENT && errno != libc::ENOTDIR {
            last = errno;
            if errno != libc::EACCES {
                break;
            }
        }
    }
    send(
        init_pipe,
        &Pid1Msg::ExecFailed {
            errno: last,
            program: program.to_string(),
        },
    );
    sys::exit_now(127)
}

/// Why `cwd` (`shown` as the caller gave it) could not be entered, in `place` ("box").
fn not_entered(shown: &str, cwd: &str, e: &std::io::Error, place: &str) -> String {
    let what = match e.raw_os_error() {
        Some(libc::ENOENT) => format!("does not exist in the {place}"),
        Some(libc::ENOTDIR) => format!("is not a directory in the {place}"),
        _ => "cannot be entered in the box".to_string(),
    };
    format!("option `cwd`: {shown:?} {what} ({cwd}: {e})")
}

/// Enters a call's `cwd`, which the caller resolved by name under the workspace: it must
/// exist here, and its symlinks (which the box may have planted) must not lead out of the
/// workspace. The error is the caller's SandboxError.
fn enter_call_cwd(cwd: &str, target: &str) -> std::result::Result<(), String> {
    let shown = cwd
        .strip_prefix(target)
        .map(|r| r.trim_start_matches('/'))
        .filter(|r| !r.is_empty())
        .unwrap_or(".");
    if let Err(e) = std::env::set_current_dir(cwd) {
        return Err(not_entered(shown, cwd, &e, "box's workspace"));
    }
    match std::env::current_dir() {
        Ok(real) if at_or_under(&real.to_string_lossy(), target) => Ok(()),
        Ok(real) => Err(format!(
            "option `cwd`: {shown:?} leads to {}, outside the workspace ({target}), through a symlink",
            real.display()
        )),
        Err(e) => Err(format!("option `cwd`: {shown:?}: getcwd in the box: {e}")),
    }
}
