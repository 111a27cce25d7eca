//! The caller's side of a box: spawn the `kern` runtime with a `BoxSpec`, read the workload's
//! stdout/stderr (`drain::Reader`: capped, past the cap read and dropped, never blocking the
//! workload; streamed as it comes, a consumer slower than the box holding the box's writes, not
//! our memory: `ChunkSender`), and read kern's report. Runs on tokio in the addon's process; it
//! never forks anything itself except through `Command`, which execs `kern` straight away.

use super::capture::{Keep, SpillEnd};
use super::drain::{Kept, Reader};
use crate::engine::shared::handoff::{BoxFds, CallTarget};
use crate::engine::shared::protocol::{self, Ask, Command, ProtocolError, Transcript};
use crate::engine::shared::spec::{BoxSpec, Limits};
use crate::engine::shared::status::{BoxReport, Fault, FaultKind};
use crate::engine::shared::sys;
use crate::error::{Error, Result};
use std::io::Write as _;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Extra time past the box's own deadline before the caller gives up on `kern` itself.
const BACKSTOP: Duration = Duration::from_secs(10);
/// How long to wait for a `kern` that closed its end to be reaped, where its exit status is
/// only read for what it says (systemd-run's refusal, a crash).
const EXIT_GRACE: Duration = Duration::from_secs(2);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

/// One piece of output, in arrival order per stream.
#[derive(Debug)]
pub struct Chunk {
    pub stream: Stream,
    pub data: Vec<u8>,
}

/// Where a box's output goes as it comes. Bounded: a consumer slower than the box (a slow
/// `onStdout`) makes the stream's reader wait, so the pipe fills and the box's write() blocks;
/// the host holds at most `CHUNKS_QUEUED` chunks (of at most 64 KiB from a pipe) per channel.
pub type ChunkSender = tokio::sync::mpsc::Sender<Chunk>;
pub type ChunkReceiver = tokio::sync::mpsc::Receiver<Chunk>;
pub const CHUNKS_QUEUED: usize = 16;

pub fn chunk_channel() -> (ChunkSender, ChunkReceiver) {
    tokio::sync::mpsc::channel(CHUNKS_QUEUED)
}

#[derive(Debug)]
pub struct Outcome {
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Each stream reached its cap and lost the rest.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// Where each stream went past its cap, with `spillOutput`.
    pub stdout_spill: Option<SpillEnd>,
    pub stderr_spill: Option<SpillEnd>,
    pub report: BoxReport,
    pub duration: Duration,
    /// kern's notes from before the box started, which open `stderr` (`Said::Prepared`);
    /// the rest of `report.notes` came after the box ended, at the end of `stderr`.
    pub prepared_notes: Vec<String>,
    /// A `setid_watched` box's: kern waits, after its report, for the word that the caller's
    /// watch cleared the set-id bits of what the box changed. Dropped unsaid, kern sweeps the
    /// workspace itself.
    pub swept: Option<SweptAck>,
}

/// The caller's word to kern that it swept a `setid_watched` box's workspace (`Outcome::swept`).
#[derive(Debug)]
pub struct SweptAck(tokio::net::unix::OwnedWriteHalf);

impl SweptAck {
    /// Tells kern the workspace is swept; kern then ends without walking it.
    pub fn swept(self) {
        if let Ok(line) = Command::Swept.encode() {
            // A few bytes into a socket kern reads at once: it never fills.
            let _ = self.0.try_write(&line);
        }
    }
}

/// A started `kern` that has its caps (line 1 of the protocol) and waits for a box spec. A
/// session keeps one spare, so the cgroup move (an RCU grace period) happens between calls.
///
/// The control channel is a socketpair on kern's stdin: spec lines go in, the report comes
/// back, and our end closing is kern's signal that the caller is gone. Using stdin (rather
/// than extra fds placed in a `pre_exec` hook) lets std spawn kern with `posix_spawn`, which
/// does not copy the address space of a large Node process the way `fork` does.
pub struct Kern {
    child: tokio::process::Child,
    control: std::os::unix::net::UnixStream,
    /// Started through `systemd-run --user --scope` (see `use_systemd_scope`).
    scoped: bool,
}

/// Cleared when a `systemd-run --user --scope` start failed: later kerns start directly (their
/// caps then fall back to rlimits, with a warning from kern).
static SYSTEMD_SCOPE_WORKS: AtomicBool = AtomicBool::new(true);

/// Whether a scoped kern that ended before its box means systemd-run could not start the scope
/// (or exec kern in it): systemd-run then exits 1. `kern box` never does: it exits 0 (done, or
/// not needed), 125 (its own error), 101 (a panic), or dies by a signal (a spare killed from
/// outside, the OOM killer). None of those says anything about systemd-run, and they must not
/// turn the delegated scope off for every later box of this process.
fn scope_refused(status: std::process::ExitStatus) -> bool {
    status.code() == Some(SYSTEMD_RUN_FAILED)
}

/// systemd-run's exit code when it fails (`EXIT_FAILURE`); `kern box` keeps clear of it.
const SYSTEMD_RUN_FAILED: i32 = 1;

/// Unprivileged on cgroup v2, the only cgroups a user may write are those systemd delegated,
/// and a process may only move between cgroups below a common delegated ancestor. So kern must
/// *start* in a delegated cgroup: a transient scope with `Delegate=yes`, one per kern. That
/// costs a D-Bus round trip to the user manager, which the session's spares keep off a call's
/// path. `None`: start kern directly (root, cgroup v1, no user manager, `KERN_CGROUP_PARENT`
/// set, or nothing to cap).
fn use_systemd_scope(limits: &Limits) -> Option<&'static Path> {
    let caps = limits.memory_bytes.is_some() || limits.pids.is_some() || limits.cpus.is_some();
    if !limits.enforce
        || !caps
        || nix::unistd::geteuid().is_root()
        || std::env::var_os("KERN_CGROUP_PARENT").is_some()
        || !SYSTEMD_SCOPE_WORKS.load(Ordering::Relaxed)
        || !Path::new("/sys/fs/cgroup/cgroup.controllers").exists()
    {
        return None;
    }
    systemd_user_scope_runner()
}

/// `systemd-run`, when this user has a systemd user manager to start a delegated scope through
/// (its private socket under `XDG_RUNTIME_DIR`). Also what `kern doctor` reports.
pub fn systemd_user_scope_runner() -> Option<&'static Path> {
    static SYSTEMD_RUN: OnceLock<Option<PathBuf>> = OnceLock::new();
    let manager =
        std::env::var_os("XDG_RUNTIME_DIR").map(|d| Path::new(&d).join("systemd/private"));
    if !manager.is_some_and(|m| m.exists()) {
        return None;
    }
    SYSTEMD_RUN
        .get_or_init(|| {
            std::env::var_os("PATH").and_then(|paths| {
                std::env::split_paths(&paths)
                    .map(|d| d.join("systemd-run"))
                    .find(|p| p.is_file())
            })
        })
        .as_deref()
}

/// Refuses a `kern` of another version than this library: the protocol between them is not
/// versioned, and a `KERN_BIN` left from another checkout would otherwise pair silently. Asked
/// once per binary (path and mtime) per process: one `kern --version`, a few ms.
pub async fn check_version(kern: &Path) -> Result<()> {
    static CHECKED: std::sync::Mutex<Vec<(PathBuf, std::time::SystemTime)>> =
        std::sync::Mutex::new(Vec::new());
    let key = (
        kern.to_path_buf(),
        std::fs::metadata(kern)
            .and_then(|m| m.modified())
            .unwrap_or(std::time::UNIX_EPOCH),
    );
    if CHECKED.lock().is_ok_and(|c| c.contains(&key)) {
        return Ok(());
    }
    let mine = env!("CARGO_PKG_VERSION");
    let out = tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tokio::process::Command::new(kern)
            .arg("--version")
            .stdin(Stdio::null())
            .output(),
    )
    .await;
    let said = match out {
        Ok(Ok(o)) if o.status.success() => String::from_utf8_lossy(&o.stdout).trim().to_string(),
        Ok(Ok(o)) => format!("an exit status of {}", o.status),
        Ok(Err(e)) => format!("an error: {e}"),
        Err(_) => "no answer within 10 s".into(),
    };
    if said != format!("kern {mine}") {
        return Err(Error::Runtime(format!(
            "the kern runtime at {} is not this library's: asked `kern --version`, it gave {said:?}, and kern-sandbox {mine} needs `kern {mine}`. Unset KERN_BIN or point it at a kern {mine}, run `npm run build:debug` in a source checkout, or reinstall kern-sandbox",
            kern.display()
        )));
    }
    if let Ok(mut c) = CHECKED.lock() {
        c.push(key);
    }
    Ok(())
}

impl Kern {
    /// Starts `kern box` and hands it the caps. `Err` only when `kern` can't be started.
    pub fn spawn(kern: &Path, limits: &Limits) -> Result<Kern> {
        let ask = Ask::Box {
            limits: limits.clone(),
        };
        Kern::start(kern, &ask, use_systemd_scope(limits), None)
    }

    /// Starts `kern box` and sends it `ask` (line 1 of the protocol).
    fn start(kern: &Path, ask: &Ask, scoped: Option<&Path>, with: Option<OwnedFd>) -> Result<Kern> {
        let io = |what: &str, e: std::io::Error| Error::Runtime(format!("{what}: {e}"));
        let line = ask.encode().map_err(protocol_error)?;
        let (ours, theirs) =
            std::os::unix::net::UnixStream::pair().map_err(|e| io("socketpair", e))?;
        // The box's PID 1 is a fork of this process, and `/proc/1/cmdline` shows its argv: the
        // box learns no host path from it. Scoped, systemd-run execs argv[0] as given, so kern
        // is named relative to its own directory.
        let mut cmd = match scoped {
            Some(systemd_run) => {
                let mut c = tokio::process::Command::new(systemd_run);
                c.args([
                    "--user",
                    "--scope",
                    "--quiet",
                    "--collect",
                    "-p",
                    "Delegate=yes",
                    "--",
                ]);
                match (kern.parent(), kern.file_name()) {
                    (Some(dir), Some(name)) if !dir.as_os_str().is_empty() => {
                        c.arg(Path::new(".").join(name)).current_dir(dir);
                    }
                    _ => {
                        c.arg(kern);
                    }
                }
                c
            }
            None => {
                let mut c = tokio::process::Command::new(kern);
                c.arg0("kern");
                c
            }
        };
        // A process group of its own: a terminal's SIGHUP or Ctrl-C for the caller's group
        // must not kill kern mid-teardown (a spare then left its cgroup leaf behind); the
        // caller's end going away is kern's signal, and kern cleans up after it.
        let child = cmd
            .arg("box")
            .process_group(0)
            .stdin(Stdio::from(OwnedFd::from(theirs)))
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| {
                Error::Runtime(format!(
                    "cannot start the kern runtime at {}: {e}. Reinstall kern-sandbox, or point KERN_BIN at a kern binary",
                    kern.display()
                ))
            })?;
        // A few hundred bytes into an empty socket buffer: never blocks.
        match &with {
            Some(fd) => {
                let sent = crate::engine::shared::sys::send_with_fds(
                    ours.as_fd(),
                    &line,
                    &[fd.as_raw_fd()],
                )
                .map_err(|e| io("write to kern", e))?;
                if sent != line.len() {
                    return Err(Error::Runtime("write to kern: a short write".into()));
                }
            }
            None => (&ours)
                .write_all(&line)
                .map_err(|e| io("write to kern", e))?,
        }
        Ok(Kern {
            child,
            control: ours,
            scoped: scoped.is_some(),
        })
    }

    /// ADDITION (issue 21): starts `kern box` as a spare for the Sandbox's zygote: with the caps,
    /// it gets `zygote`, a socket to a fork of the zygote, and `inputs`, what that fork makes
    /// the call's box from; it sets the box up before the call (`monitor::arrange_zygote`).
    pub fn spawn_zygote(
        kern: &Path,
        limits: &Limits,
        inputs: &crate::engine::plan::Inputs,
        zygote: OwnedFd,
    ) -> Result<Kern> {
        let ask = Ask::Zygote {
            limits: limits.clone(),
            inputs: inputs.clone(),
        };
        Kern::start(kern, &ask, use_systemd_scope(limits), Some(zygote))
    }

    /// Starts `kern box` for one call into the resident box `target`: it finds the box and
    /// moves into the call's cgroup under it before the spec comes (see `resident::call`).
    /// `limits` are the box's: where the box's kern started in a delegated scope, so does the
    /// call's, since only from there may it move into the box's cgroup.
    pub fn spawn_call(kern: &Path, target: &CallTarget, limits: &Limits) -> Result<Kern> {
        let ask = Ask::Call {
            target: target.clone(),
        };
        Kern::start(kern, &ask, use_systemd_scope(limits), None)
    }

    /// The host pid of this `kern` (the box's monitor), while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.id()
    }

    /// Lets a spare go: closing the control socket tells kern to leave its cgroup and exit, and
    /// a task reaps it so no zombie stays behind; the task ends once it has (close() waits).
    pub fn retire(self) -> tokio::task::JoinHandle<()> {
        let mut child = self.child;
        drop(self.control);
        tokio::spawn(async move {
            let _ = child.wait().await;
        })
    }

    /// False once the process has exited (a spare killed from outside).
    pub fn is_alive(&mut self) -> bool {
        match self.child.try_wait() {
            Ok(None) => true,
            Ok(Some(status)) => {
                if self.scoped && scope_refused(status) {
                    SYSTEMD_SCOPE_WORKS.store(false, Ordering::Relaxed);
                }
                false
            }
            Err(_) => false,
        }
    }

    /// Runs one box to the end. Everything that happens is in the `Outcome`; `Ok(None)` means
    /// this kern died before it took the spec (a spare killed from outside), so nothing ran and
    /// the caller may use another.
    ///
    /// `cancel` turning true (the session is closing) ends the box early: closing our end of
    /// the control socket is kern's signal to kill it.
    /// `fds` go to kern with the spec (SCM_RIGHTS); the spec says which are there.
    pub async fn run(
        self,
        spec: &BoxSpec,
        keep: &Keep,
        sink: Option<ChunkSender>,
        cancel: tokio::sync::watch::Receiver<bool>,
        fds: BoxFds<&OwnedFd>,
    ) -> Result<Option<Outcome>> {
        let ran = self
            .run_inner(spec, Some(keep), sink, cancel, fds, None, None)
            .await?;
        Ok(ran.ok())
    }

    /// As `run`, for a process the caller steers while it runs (`sb.spawn`, `sb.terminal`):
    /// `controls` gets the workload's pid in the box when it starts, and carries signals for
    /// it to kern (`protocol::Command`). `fds` are closed here once kern took them, so the box
    /// holds the only copies: a stdin the workload closed is EPIPE to its writer, a connector
    /// that is gone is EOF to its caller, at once rather than at the box's end. A kern that
    /// died before it took the spec gives them back, with the controls, for another.
    pub async fn run_steered(
        self,
        spec: &BoxSpec,
        keep: &Keep,
        sink: ChunkSender,
        cancel: tokio::sync::watch::Receiver<bool>,
        fds: BoxFds,
        controls: Controls,
    ) -> Result<std::result::Result<Outcome, Untaken>> {
        self.run_inner(
            spec,
            Some(keep),
            Some(sink),
            cancel,
            fds,
            None,
            Some(controls),
        )
        .await
    }

    /// As `run`, for a long-lived box (a kernel): output goes only to `sink`, nothing is kept
    /// (the kernel splits it per cell), so a box that prints for hours holds no memory for it.
    /// `prepared` gets kern's notes from before the box started (the first bytes of its
    /// stderr) as soon as they come, not at the box's end; dropped if kern never sent them.
    pub async fn run_forwarding(
        self,
        spec: &BoxSpec,
        sink: ChunkSender,
        cancel: tokio::sync::watch::Receiver<bool>,
        fds: BoxFds<&OwnedFd>,
        prepared: tokio::sync::oneshot::Sender<Vec<String>>,
    ) -> Result<Option<Outcome>> {
        let ran = self
            .run_inner(spec, None, Some(sink), cancel, fds, Some(prepared), None)
            .await?;
        Ok(ran.ok())
    }

    #[allow(clippy::too_many_arguments)]
    async fn run_inner<F: AsFd>(
        mut self,
        spec: &BoxSpec,
        keep: Option<&Keep>,
        sink: Option<ChunkSender>,
        mut cancel: tokio::sync::watch::Receiver<bool>,
        fds: BoxFds<F>,
        mut prepared: Option<tokio::sync::oneshot::Sender<Vec<String>>>,
        controls: Option<Controls>,
    ) -> Result<std::result::Result<Outcome, Untaken<F>>> {
        let start = Instant::now();
        let mut json = protocol::encode_spec(spec).map_err(protocol_error)?;
        let control = self.control;
        let raw = fds.raw();
        if !raw.is_empty() {
            // The descriptors ride on the spec's first byte; the socket is still blocking
            // here, and one byte always fits.
            match sys::send_with_fds(control.as_fd(), &json[..1], &raw) {
                Ok(1) => {
                    json.remove(0);
                }
                Ok(_) => {
                    return Err(Error::Runtime(
                        "send the box's descriptors to kern: short write".into(),
                    ))
                }
                Err(e)
                    if matches!(e.raw_os_error(), Some(libc::EPIPE) | Some(libc::ECONNRESET)) =>
                {
                    return Ok(Err(Untaken { fds, controls }))
                }
                Err(e) => {
                    return Err(Error::Runtime(format!(
                        "send the box's descriptors to kern: {e}"
                    )))
                }
            }
        }
        control
            .set_nonblocking(true)
            .map_err(|e| Error::Runtime(format!("control socket: {e}")))?;
        let control = tokio::net::UnixStream::from_std(control)
            .map_err(|e| Error::Runtime(format!("control socket: {e}")))?;
        let (mut report_rx, mut lifeline) = control.into_split();
        match lifeline.write_all(&json).await {
            Ok(()) => {}
            // kern died before it got the spec (a spare killed from outside, or systemd-run
            // that could not start its scope): nothing ran.
            Err(e) if matches!(e.raw_os_error(), Some(libc::EPIPE) | Some(libc::ECONNRESET)) => {
                if self.scoped {
                    // It has closed its end, so it has exited or is exiting.
                    let status = tokio::time::timeout(EXIT_GRACE, self.child.wait()).await;
                    if let Ok(Ok(status)) = status {
                        if scope_refused(status) {
                            SYSTEMD_SCOPE_WORKS.store(false, Ordering::Relaxed);
                        }
                    }
                }
                return Ok(Err(Untaken { fds, controls }));
            }
            Err(e) => return Err(Error::Runtime(format!("write the spec to kern: {e}"))),
        }
        // Kept until kern says it took them (`Said::Took`): given back if it never does.
        let mut held = Some(fds);
        let (took_tx, took_rx) = tokio::sync::oneshot::channel::<()>();
        let (mut took_tx, mut took_rx) = (Some(took_tx), Some(took_rx));
        let (mut started, mut commands) = match controls {
            Some(c) => (Some(c.started), Some(c.signals)),
            None => (None, None),
        };
        let (out_capture, err_capture) = match keep.map(Keep::captures) {
            Some((o, e)) => (Some(o), Some(e)),
            None => (None, None),
        };
        let out = self
            .child
            .stdout
            .take()
            .map(|s| Reader::spawn(s, Stream::Stdout, out_capture, sink.clone()));
        let err = self
            .child
            .stderr
            .take()
            .map(|s| Reader::spawn(s, Stream::Stderr, err_capture, sink.clone()));
        // The report arrives on the control socket, which then closes; until then our end is
        // kern's lifeline.
        // A `setid_watched` box's kern waits after its report for our `Command::Swept`: the
        // report is the end here, not the socket's EOF.
        let watched = spec.setid_watched;
        let mut status = tokio::spawn(async move {
            let mut heard = Transcript::default();
            let mut chunk = [0u8; 4096];
            loop {
                match report_rx.read(&mut chunk).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => heard.hear(&chunk[..n]),
                }
                // kern's first line is its prepared notes.
                if heard.heard_a_line() {
                    if let Some(tx) = prepared.take() {
                        let _ = tx.send(heard.prepared.clone().unwrap_or_default());
                    }
                }
                if heard.took {
                    if let Some(tx) = took_tx.take() {
                        let _ = tx.send(());
                    }
                }
                if let Some(pid) = heard.started {
                    if let Some(tx) = started.take() {
                        let _ = tx.send(pid);
                    }
                }
                if watched && heard.report.is_some() {
                    break;
                }
            }
            heard.finish();
            (heard, started)
        });

        // kern closes the control socket and its stdio as soon as the box has ended; its cgroup
        // teardown after that is not the caller's wait.
        let backstop = Duration::from_millis(spec.timeout_ms) + BACKSTOP;
        let mut backstop_fault = None;
        let mut lifeline = Some(lifeline);
        let waited = tokio::time::timeout(backstop, async {
            loop {
                tokio::select! {
                    r = &mut status => return r.unwrap_or_default(),
                    // kern has the descriptors: ours are closed now (owned ones; borrowed ones
                    // stay the caller's).
                    took = async {
                        match took_rx.as_mut() {
                            Some(rx) => rx.await.is_ok(),
                            None => std::future::pending().await,
                        }
                    }, if took_rx.is_some() && held.is_some() => {
                        took_rx = None;
                        if took {
                            held = None;
                        }
                    }
                    // Dropping the write half shuts it down: kern sees EOF and kills the box.
                    // `wait_for` looks at the current value first, so a close() that came
                    // before this point is not missed.
                    _ = async { cancel.wait_for(|closing| *closing).await.is_ok() }, if lifeline.is_some() => {
                        lifeline = None;
                    }
                    signal = recv_command(&mut commands), if lifeline.is_some() => {
                        match (signal, lifeline.as_mut()) {
                            (Some(signal), Some(l)) => {
                                // A few bytes; kern reads them at once while the box runs.
                                if let Ok(line) = (Command::Signal { signal }).encode() {
                                    let _ = l.write_all(&line).await;
                                }
                            }
                            // The steering side is gone: nothing more will come.
                            _ => commands = None,
                        }
                    }
                }
            }
        })
        .await;
        let (status, started) = match waited {
            Ok(r) => r,
            Err(_) => {
                let _ = self.child.start_kill();
                backstop_fault = Some(Fault::new(
                    FaultKind::Killed,
                    "the kern runtime did not end the box at its deadline; the caller killed it",
                ));
                status.await.unwrap_or_default()
            }
        };
        let mut child = self.child;
        // kern's exit, when it ended without a report: what it says goes in the fault.
        let crashed = match status.report {
            Some(_) => None,
            None => tokio::time::timeout(EXIT_GRACE, child.wait())
                .await
                .ok()
                .and_then(|r| r.ok()),
        };
        // Killed before it took the spec (a spare killed from outside while it waited): it did
        // nothing with the call, which may run in another kern. A kern that exited on its own
        // before that is a bug of ours, reported as one.
        if status.report.is_none()
            && !status.took
            && backstop_fault.is_none()
            && crashed.is_some_and(|s| std::os::unix::process::ExitStatusExt::signal(&s).is_some())
        {
            for r in [out, err].into_iter().flatten() {
                r.abort();
            }
            let controls = match (started, commands) {
                (Some(started), Some(signals)) => Some(Controls { started, signals }),
                _ => None,
            };
            return Ok(Err(Untaken {
                fds: held.unwrap_or_default(),
                controls,
            }));
        }

        // A resident box's call: a process the call left may keep its pipes; a fresh box's
        // every process is dead by the report, so EOF is certain and only waited for.
        let resident = spec.resident.is_some();
        let collect = |r: Option<Reader>| async move {
            match r {
                Some(r) => r.finish(resident).await,
                None => Kept::default(),
            }
        };
        let (o, e) = tokio::join!(collect(out), collect(err));

        let prepared_notes = status.prepared.unwrap_or_default();
        let swept = match (&status.report, watched) {
            (Some(_), true) => lifeline.take().map(SweptAck),
            _ => None,
        };
        let mut report = match status.report {
            Some(r) => {
                // Reap kern once it finished its teardown, off the caller's path.
                tokio::spawn(async move {
                    let _ = child.wait().await;
                });
                r
            }
            None => crash_report(crashed, status.garbled.first()),
        };
        if let Some(f) = backstop_fault {
            report.fault = Some(f);
        }
        Ok(Ok(Outcome {
            stdout: o.bytes,
            stderr: e.bytes,
            stdout_truncated: o.truncated,
            stderr_truncated: e.truncated,
            stdout_spill: o.spill,
            stderr_spill: e.spill,
            report,
            duration: start.elapsed(),
            prepared_notes,
            swept,
        }))
    }
}

/// A call a kern died before it took (`Said::Took`): nothing of it ran. What it was given, back,
/// for another kern.
pub struct Untaken<F = OwnedFd> {
    pub fds: BoxFds<F>,
    /// A steered process's, unless its steering side went away meanwhile.
    pub controls: Option<Controls>,
}

/// A steered process's side channels (`Kern::run_steered`).
pub struct Controls {
    /// Gets the workload's pid in the box when it is about to exec.
    pub started: tokio::sync::oneshot::Sender<i32>,
    /// Signal numbers for the workload's process group (`handoff::SIGNALS`, not SIGKILL: that
    /// is `cancel`'s).
    pub signals: tokio::sync::mpsc::UnboundedReceiver<i32>,
}

/// The next signal to send, if there is a receiver; pending forever without one.
async fn recv_command(rx: &mut Option<tokio::sync::mpsc::UnboundedReceiver<i32>>) -> Option<i32> {
    match rx {
        Some(rx) => rx.recv().await,
        None => std::future::pending().await,
    }
}

/// A message for kern that could not be written.
fn protocol_error(e: ProtocolError) -> Error {
    Error::Runtime(e.to_string())
}

/// What to report when kern ended without saying how the box ended (`garbled`: the first line
/// of kern's the addon could not read, if any).
fn crash_report(
    exit: Option<std::process::ExitStatus>,
    garbled: Option<&ProtocolError>,
) -> BoxReport {
    use std::os::unix::process::ExitStatusExt;
    let (kind, how) = match exit {
        Some(s) => match s.signal() {
            Some(sig) => (FaultKind::Killed, format!("was killed by signal {sig}")),
            None => (
                FaultKind::StartupFailed,
                format!("exited with code {}", s.code().unwrap_or(-1)),
            ),
        },
        None => (FaultKind::Killed, "did not exit".to_string()),
    };
    BoxReport {
        exit_code: 125,
        fault: Some(Fault::new(
            kind,
            match garbled {
                Some(e) => format!(
                    "the kern runtime {how} without reporting how the box ended; it said {e}"
                ),
                None => format!("the kern runtime {how} without reporting how the box ended"),
            },
        )),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::process::ExitStatusExt;

    #[test]
    fn only_systemd_runs_failure_turns_the_scope_off() {
        // wait(2) statuses: an exit code sits in the second byte, a signal in the low bits.
        let exited = |code: i32| std::process::ExitStatus::from_raw(code << 8);
        assert!(scope_refused(exited(SYSTEMD_RUN_FAILED)));
        for kern_own in [0, 101, 125] {
            assert!(!scope_refused(exited(kern_own)), "exit {kern_own}");
        }
        assert!(!scope_refused(std::process::ExitStatus::from_raw(
            libc::SIGKILL
        )));
    }
}
