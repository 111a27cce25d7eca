//! Processes a caller steers while they run, each in a fresh box of the session's posture on
//! its workspace: a background process (`sb.spawn`: stdin written as it goes, signals, a TCP
//! connection into its box) and a terminal (`sb.terminal`: the same, on a terminal of the box's
//! own devpts instead of pipes). Both end with their workload, their `timeoutS`, a kill, or the
//! session's close(); their output streams to the caller as it comes, under `maxOutputBytes`
//! per stream like a call's, and `wait()` gives the call's `ExecResult`.

use super::network::Line;
use super::opened::Opened;
use super::percall::{self, PerCall};
use super::prepared::{self, OurEnds, Prepared, Stdin, Workload};
use super::publish::{self, Dialer, PublishRequest, Published, Target};
use super::result::{self, ExecRequest, ExecResult};
use super::route;
use super::writers::Active;
use crate::engine::addon::capture::{Capture, Keep, SpillEnd};
use crate::engine::addon::launch::{Chunk, ChunkSender, Controls, Kern, Outcome, Stream, Untaken};
use crate::engine::boxside::connector;
use crate::engine::shared::handoff::BoxFds;
use crate::engine::shared::handoff::{signal_number, SIGNALS};
use crate::engine::shared::spec::{BoxSpec, TtySize};
use crate::engine::shared::status::FaultKind;
use crate::error::{Error, Result};
use crate::workspace::track;
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::{oneshot, watch};

/// How long `kill()` without a signal waits after SIGTERM before it ends the box.
pub const KILL_GRACE: Duration = Duration::from_secs(2);
/// Without `timeoutS`, a process lives as long as its session (and at most this).
const LIFETIME_MS: u64 = super::longbox::LIFETIME_MS;
/// The longest `connect(port, { waitS })` waits for a server to listen: an hour (a number past
/// it is more likely a unit mistake, milliseconds for seconds, than a wish).
const MAX_CONNECT_WAIT_S: f64 = 3600.0;

/// What `spawn()` and `terminal()` ask for (`argv` is the image's shell for a terminal).
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProcessRequest {
    pub argv: Option<Vec<String>>,
    pub env: Option<serde_json::Value>,
    pub cwd: Option<serde_json::Value>,
    pub timeout_s: Option<serde_json::Value>,
    /// The account its box runs as, as a call's `user`.
    pub user: Option<serde_json::Value>,
    /// A terminal's size; none: a background process on pipes.
    pub cols: Option<serde_json::Value>,
    pub rows: Option<serde_json::Value>,
}

/// A started process, steered from the caller.
pub struct Process {
    /// Its pid in its box.
    pub pid: i32,
    /// Where `write()` goes: the stdin pipe, or the terminal's master. None once `end()`ed.
    /// (This, the master and the connector's line are let go as soon as it has ended, not when
    /// the caller's object is collected.)
    input: Arc<tokio::sync::Mutex<Option<tokio::net::unix::pipe::Sender>>>,
    /// Set by `end()`: a later `write()` says so, even once the process has ended too.
    input_ended: std::sync::atomic::AtomicBool,
    /// The terminal's master (for `resize`), with a terminal.
    master: Arc<Mutex<Option<Arc<OwnedFd>>>>,
    /// A terminal (not a background process on pipes).
    terminal: bool,
    signals: tokio::sync::mpsc::UnboundedSender<i32>,
    stop: watch::Sender<bool>,
    /// The connector's line into its box (a background process only).
    connect: Option<Dialer>,
    /// Turns true when its session closes (a published port closes with it).
    closing: watch::Receiver<bool>,
    /// Set by `kill()` before it ends the box, so the result says who did.
    killed: Arc<std::sync::atomic::AtomicBool>,
    /// Turns true when it has ended and `result` is set.
    ended: watch::Receiver<bool>,
    result: Arc<Mutex<Option<Result<ExecResult>>>>,
    /// How kern applied its box's caps, once it has ended (`isolation()`).
    applied: Arc<Mutex<Option<crate::engine::shared::status::Applied>>>,
}

impl Process {
    /// Starts one; resolves once its workload is about to exec (or fails, if its box could not
    /// start). Its output goes to `sink` as it comes.
    pub(super) async fn start(
        opened: Arc<Opened>,
        kern_path: &Path,
        req: ProcessRequest,
        terminal: bool,
        sink: ChunkSender,
    ) -> Result<Process> {
        let what = if terminal { "terminal()" } else { "spawn()" };
        let mut p = checked(&opened, req, terminal, what)?;
        if *opened.closing.borrow() {
            return Err(Error::Closed(
                "the Sandbox is closed; open a new Sandbox to start processes".into(),
            ));
        }
        let before = p
            .before(&opened)
            .await
            .map_err(|fault| Error::Invalid(fault.message))?;
        // The box's ends travel with the spec; ours stay here.
        let (theirs, ours) = p.ends(&opened)?;
        let (fds, line) = theirs.hand_over()?;
        let kern = route::steered().kern(&opened, kern_path)?;

        let (stop, stop_rx) = watch::channel(false);
        let (started_tx, started) = oneshot::channel();
        let (signals, signals_rx) = tokio::sync::mpsc::unbounded_channel();
        let (ended_tx, ended) = watch::channel(false);
        // The terminal's output as the result keeps it (its reader starts with the master).
        let (term_tx, term_rx) = watch::channel::<Option<Kept>>(None);
        let shared = Shared::default();
        let keep = opened.keep()?;
        let active = Active::enter(&opened.writers).await;
        let Prepared {
            spec, workspace, ..
        } = p;
        let closing = opened.closing.subscribe();
        let dialers = opened.clone();
        let run = BoxRun {
            opened,
            kern,
            kern_path: kern_path.to_path_buf(),
            spec,
            workspace,
            before,
            fds,
            line,
            sink: sink.clone(),
            active,
            stop: stop_rx,
            controls: Controls {
                started: started_tx,
                signals: signals_rx,
            },
            term: term_rx,
            shared: shared.clone(),
            ended: ended_tx,
        };
        tokio::spawn(run.run());
        let process = Steering {
            what,
            terminal,
            started,
            stop,
            signals,
            ended,
            closing,
            term: term_tx,
            shared,
        }
        .wait_start(ours, sink, keep)
        .await?;
        // The Sandbox's published ports reach it too.
        if let Some(d) = &process.connect {
            dialers.add_dialer(d.clone());
        }
        Ok(process)
    }

    /// Writes to its stdin (or its terminal); resolves once the bytes are in the pipe.
    pub async fn write(&self, data: &[u8]) -> Result<()> {
        let mut input = self.input.lock().await;
        let gone = || {
            Error::Closed(
                "write(): nothing reads the process's input any more (it closed its stdin, or it has ended)".into(),
            )
        };
        let after_end = self.input_ended.load(std::sync::atomic::Ordering::SeqCst);
        match input.as_mut() {
            None if self.terminal => Err(Error::Closed("write(): the terminal has ended".into())),
            None if after_end => Err(Error::Closed(
                "write() after end(): the process's stdin is closed; start a new process to send more input".into(),
            )),
            None => Err(gone()),
            Some(p) => p.write_all(data).await.map_err(|_| gone()),
        }
    }

    /// Closes its stdin (the process reads EOF). A terminal gets its end-of-file character
    /// instead (`^D`), as typed; the terminal stays open.
    pub async fn end(&self) -> Result<()> {
        if self.terminal {
            return self.write(b"\x04").await;
        }
        // Dropping the write end is the EOF.
        let mut input = self.input.lock().await;
        self.input_ended
            .store(true, std::sync::atomic::Ordering::SeqCst);
        input.take();
        Ok(())
    }

    /// Sends `signal` (a name in `SIGNALS`) to its process group; SIGKILL ends its box. None:
    /// SIGTERM, then the box is ended if it still runs after `KILL_GRACE`. Resolves when the
    /// signal was sent, or, without one or with SIGKILL, when the process has ended.
    pub async fn kill(&self, signal: Option<&str>) -> Result<()> {
        let number = match signal {
            None => None,
            Some(name) => Some(signal_number(name).ok_or_else(|| {
                Error::Invalid(format!(
                    "kill(): unknown signal {name:?}; use one of {}",
                    SIGNALS
                        .iter()
                        .map(|(n, _)| *n)
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?),
        };
        if *self.ended.borrow() {
            return Ok(());
        }
        let mut ended = self.ended.clone();
        match number {
            Some(libc::SIGKILL) => {
                self.killed.store(true, std::sync::atomic::Ordering::SeqCst);
                self.stop.send_replace(true);
                let _ = ended.wait_for(|e| *e).await;
            }
            Some(n) => {
                let _ = self.signals.send(n);
            }
            None => {
                let _ = self.signals.send(libc::SIGTERM);
                let gone = tokio::time::timeout(KILL_GRACE, ended.wait_for(|e| *e))
                    .await
                    .is_ok();
                if !gone {
                    self.killed.store(true, std::sync::atomic::Ordering::SeqCst);
                    self.stop.send_replace(true);
                }
                let _ = ended.wait_for(|e| *e).await;
            }
        }
        Ok(())
    }

    /// Resizes its terminal; the program gets SIGWINCH.
    pub fn resize(&self, cols: &serde_json::Value, rows: &serde_json::Value) -> Result<()> {
        if !self.terminal {
            return crate::invalid!("resize(): only a terminal has a size");
        }
        if cols.is_null() || rows.is_null() {
            return crate::invalid!("resize(cols, rows) needs both, e.g. resize(120, 40)");
        }
        let size = TtySize {
            cols: cells("cols", Some(cols), 80)?,
            rows: cells("rows", Some(rows), 24)?,
        };
        let master = self.master.lock().ok().and_then(|m| m.clone());
        let Some(master) = master.filter(|_| !*self.ended.borrow()) else {
            return Ok(());
        };
        crate::engine::boxside::pty::set_size(master.as_fd(), size)
            .map_err(|e| Error::Runtime(format!("resize the terminal: {e}")))
    }

    /// A TCP connection to `127.0.0.1:port` inside its box (`engine::boxside::connector`); the socket.
    /// `wait_s` (null: 0): how long a refused connection is tried again, for a server that is
    /// still starting; the process's end stops the wait at once.
    pub async fn connect(
        &self,
        port: &serde_json::Value,
        wait_s: &serde_json::Value,
    ) -> Result<OwnedFd> {
        let port = match port.as_u64() {
            Some(p) if (1..=65535).contains(&p) => p as u16,
            _ => {
                return crate::invalid!(
                    "connect(): the port must be a whole number from 1 to 65535, got {}",
                    crate::config::describe(port)
                )
            }
        };
        let wait = match wait_s {
            serde_json::Value::Null => Duration::ZERO,
            v => match v.as_f64() {
                Some(s) if (0.0..=MAX_CONNECT_WAIT_S).contains(&s) => Duration::from_secs_f64(s),
                _ => {
                    return crate::invalid!(
                        "connect(): waitS must be a number of seconds from 0 to {MAX_CONNECT_WAIT_S}, got {}",
                        crate::config::describe(v)
                    )
                }
            },
        };
        if self.connect.is_none() {
            return crate::invalid!(
                "connect(): a terminal has no connect(); spawn() the server and connect to it"
            );
        }
        let deadline = tokio::time::Instant::now() + wait;
        let mut pause = Duration::from_millis(10);
        let mut ended = self.ended.clone();
        loop {
            match self.dial(port).await {
                Err(Error::ConnectionRefused(why)) if tokio::time::Instant::now() < deadline => {
                    let nap = pause.min(deadline - tokio::time::Instant::now());
                    pause = (pause * 2).min(Duration::from_millis(250));
                    tokio::select! {
                        _ = tokio::time::sleep(nap) => {}
                        _ = ended.wait_for(|e| *e) => {
                            return Err(Error::Invalid(format!(
                                "connect(): the process ended while connect() waited for 127.0.0.1:{port} ({why})"
                            )));
                        }
                    }
                }
                Err(Error::ConnectionRefused(why)) => {
                    let hint = if wait.is_zero() {
                        "; if the server is still starting, pass { waitS } to wait until it listens"
                            .to_string()
                    } else {
                        format!(" (tried for {} s)", wait.as_secs_f64())
                    };
                    return Err(Error::ConnectionRefused(format!("connect(): {why}{hint}")));
                }
                other => return other,
            }
        }
    }

    /// One request to the box's connector.
    async fn dial(&self, port: u16) -> Result<OwnedFd> {
        match &self.connect {
            Some(d) => d.dial(port).await,
            None => crate::invalid!("connect(): a terminal has no connect()"),
        }
    }

    /// ADDITION: a URL on the host into the box's `port` (`publish()`), until its `close()` or
    /// the process's end.
    pub async fn publish(&self, req: &PublishRequest) -> Result<Published> {
        let Some(d) = &self.connect else {
            return crate::invalid!(
                "publish(): a terminal has no published ports; spawn() the server and publish its port"
            );
        };
        publish::publish(
            Target::Process(d.clone()),
            self.closing.clone(),
            req,
            "publish()",
        )
        .await
    }

    /// Its result, once it has ended; taken by the first caller (the JS layer keeps it).
    pub async fn wait(&self) -> Result<ExecResult> {
        let mut ended = self.ended.clone();
        let _ = ended.wait_for(|e| *e).await;
        self.result
            .lock()
            .ok()
            .and_then(|mut r| r.take())
            .unwrap_or_else(|| crate::invalid!("wait(): the result was already taken"))
    }

    /// How kern applied its box's caps, once it has ended.
    pub(super) fn applied(&self) -> Option<crate::engine::shared::status::Applied> {
        self.applied.lock().ok().and_then(|a| a.clone())
    }

    /// Whether it still runs.
    pub fn running(&self) -> bool {
        !*self.ended.borrow()
    }
}

/// Takes the terminal's master from the box (it comes before the workload's start), checks it,
/// and starts reading it; returns it and the writer for `write()`.
async fn open_terminal(
    sock: OwnedFd,
    sink: ChunkSender,
    capture: Capture,
    done: watch::Sender<Option<Kept>>,
) -> Result<Option<(Arc<OwnedFd>, tokio::net::unix::pipe::Sender)>> {
    let io = |e: std::io::Error| Error::Runtime(format!("the terminal: {e}"));
    let master =
        tokio::task::spawn_blocking(move || crate::engine::boxside::pty::receive_master(&sock))
            .await
            .map_err(|e| Error::Runtime(format!("the terminal: {e}")))?
            .map_err(io)?
            .ok_or_else(|| Error::Runtime("the box ended before its terminal opened".into()))?;
    set_nonblocking(&master)?;
    // Read and written through two descriptors of the one master, each registered with the
    // runtime on its own (the pipe types take any pollable descriptor).
    let reader =
        tokio::net::unix::pipe::Receiver::from_owned_fd_unchecked(master.try_clone().map_err(io)?)
            .map_err(io)?;
    let writer =
        tokio::net::unix::pipe::Sender::from_owned_fd_unchecked(master.try_clone().map_err(io)?)
            .map_err(io)?;
    tokio::spawn(read_terminal(reader, sink, capture, done));
    Ok(Some((Arc::new(master), writer)))
}

/// A terminal's `cols` or `rows`: a whole number from 1 to 1000 (`default` when absent).
fn cells(name: &str, v: Option<&serde_json::Value>, default: u16) -> Result<u16> {
    match v {
        None | Some(serde_json::Value::Null) => Ok(default),
        Some(v) => match v.as_u64() {
            Some(n) if (1..=1000).contains(&n) => Ok(n as u16),
            _ => crate::invalid!(
                "option `{name}` must be a whole number of character cells from 1 to 1000, got {}",
                crate::config::describe(v)
            ),
        },
    }
}

fn set_nonblocking(fd: &OwnedFd) -> Result<()> {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    let flags = fcntl(fd, FcntlArg::F_GETFL).map_err(|e| Error::Runtime(format!("fcntl: {e}")))?;
    fcntl(
        fd,
        FcntlArg::F_SETFL(OFlag::from_bits_truncate(flags) | OFlag::O_NONBLOCK),
    )
    .map_err(|e| Error::Runtime(format!("fcntl: {e}")))?;
    Ok(())
}

/// Reads the terminal until its last slave closes (EIO), forwarding what it reads as the
/// process's stdout, kept (and spilled) like a call's stdout.
async fn read_terminal(
    mut fd: tokio::net::unix::pipe::Receiver,
    sink: ChunkSender,
    mut capture: Capture,
    done: watch::Sender<Option<Kept>>,
) {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 64 * 1024];
    // EIO once no process holds the terminal any more: its end.
    while let Ok(n @ 1..) = fd.read(&mut buf).await {
        let take = capture.push(&buf[..n]).await;
        if take > 0 {
            // Bounded: a slow consumer holds the terminal's reader, and the box's writes.
            let _ = sink
                .send(Chunk {
                    stream: Stream::Stdout,
                    data: buf[..take].to_vec(),
                })
                .await;
        }
    }
    let c = capture.finish();
    let kept = Kept {
        bytes: c.kept,
        truncated: c.truncated,
        spill: c.spill.wait().await,
    };
    done.send_replace(Some(kept));
}

/// What a terminal's reader kept of its output, as a call keeps its stdout.
#[derive(Debug, Clone, Default)]
struct Kept {
    bytes: Vec<u8>,
    truncated: bool,
    spill: Option<SpillEnd>,
}

/// The process's `ExecResult` from its box's outcome.
async fn finish(
    opened: &Opened,
    mut outcome: Outcome,
    before: Option<track::Before>,
    workspace: &Path,
) -> Result<ExecResult> {
    result::refusal(&mut outcome)?;
    Ok(result::of_box(
        outcome,
        &opened.session_notes(),
        Vec::new(),
        before,
        workspace,
    )
    .await)
}

/// A `spawn()` or `terminal()` request checked into a prepared call: its argv (the image's
/// shell for a terminal by default), timeout, terminal size, `env` (with a TERM for a terminal)
/// and `cwd`; its box gets a stdin pipe and the connector, or a terminal.
fn checked(
    opened: &Opened,
    req: ProcessRequest,
    terminal: bool,
    what: &'static str,
) -> Result<Prepared> {
    let argv = match (req.argv, terminal) {
        (Some(a), _) => a,
        (None, true) => vec![crate::engine::boxside::pty::shell_of(&opened.image.root).to_string()],
        (None, false) => {
            return crate::invalid!(
                "spawn() needs a non-empty argv array, e.g. spawn([\"python3\", \"-m\", \"http.server\"])"
            )
        }
    };
    let timeout_ms = prepared::timeout_ms(req.timeout_s.as_ref(), LIFETIME_MS)?;
    let size = if terminal {
        Some(TtySize {
            cols: cells("cols", req.cols.as_ref(), 80)?,
            rows: cells("rows", req.rows.as_ref(), 24)?,
        })
    } else {
        if req.cols.is_some() || req.rows.is_some() {
            return crate::invalid!(
                "spawn() takes no `cols`/`rows`: a background process has pipes, not a terminal; use terminal({{ cols, rows }})"
            );
        }
        None
    };
    let mut place = PerCall::of(
        &ExecRequest {
            env: req.env,
            cwd: req.cwd,
            user: req.user,
            ..Default::default()
        },
        &opened.config.workspace_target,
    )?;
    // The Sandbox's `env` or the terminal's own may name another.
    let named = |e: &[(String, String)]| e.iter().any(|(k, _)| k == "TERM");
    if terminal && !named(&place.env) && !named(&opened.config.env) {
        place.env.push(("TERM".into(), "xterm-256color".into()));
    }
    let mut p = prepared::prepare(opened, Workload::Argv { what, argv }, timeout_ms, place)?;
    p.set_stdin((!terminal).then_some(Stdin::Pipe));
    p.spec.tty = size;
    p.spec.connector = !terminal;
    Ok(p)
}

/// What a process's box task shares with its `Process`.
#[derive(Clone, Default)]
struct Shared {
    /// Set by `kill()` before it ends the box, so the result says who did.
    killed: Arc<std::sync::atomic::AtomicBool>,
    /// The result, set once the box has ended.
    result: Arc<Mutex<Option<Result<ExecResult>>>>,
    /// How kern applied its box's caps, once it has ended.
    applied: Arc<Mutex<Option<crate::engine::shared::status::Applied>>>,
}

/// The task that runs a process's box and finishes its result: what it takes.
struct BoxRun {
    opened: Arc<Opened>,
    kern: Kern,
    /// For a fresh kern, should the first one have died before it took the spec.
    kern_path: PathBuf,
    spec: BoxSpec,
    workspace: PathBuf,
    before: Option<track::Before>,
    /// The box's ends, handed over: `run_steered` closes them once sent.
    fds: BoxFds,
    /// The egress line, kept until the box has ended.
    line: Option<Line>,
    sink: ChunkSender,
    /// The process as a writer of the workspace, until its result is set.
    active: Active,
    /// Turns true to end the box (a kill, or a terminal that could not open).
    stop: watch::Receiver<bool>,
    controls: Controls,
    /// What the terminal's reader kept, once it has ended.
    term: watch::Receiver<Option<Kept>>,
    shared: Shared,
    /// Turned true once `shared.result` is set.
    ended: watch::Sender<bool>,
}

impl BoxRun {
    /// Runs the box to its end, then sets the result and says it has ended.
    async fn run(self) {
        let BoxRun {
            opened,
            kern,
            kern_path,
            spec,
            workspace,
            before,
            fds,
            line,
            sink,
            active,
            stop,
            controls,
            term,
            shared,
            ended,
        } = self;
        // Held for the process's life: close() waits for it, and ends it first.
        let _running = opened.running.read().await;
        let (cancel, _joined) = percall::cancel_either(opened.closing.subscribe(), Some(stop));
        let r = match opened.keep() {
            Ok(keep) => {
                let first = kern
                    .run_steered(&spec, &keep, sink.clone(), cancel.clone(), fds, controls)
                    .await;
                match first {
                    // The spare died before it took the spec: nothing ran; once more in a
                    // fresh kern (and a fresh box, if it was the zygote's).
                    Ok(Err(Untaken {
                        fds,
                        controls: Some(controls),
                    })) => match opened.spawn_kern(&kern_path) {
                        Ok(fresh) => {
                            let spec = BoxSpec {
                                zygote: false,
                                ..spec.clone()
                            };
                            fresh
                                .run_steered(&spec, &keep, sink, cancel, fds, controls)
                                .await
                        }
                        Err(e) => Err(e),
                    },
                    other => other,
                }
            }
            Err(e) => Err(e),
        };
        drop(line);
        let result = match r {
            Ok(Ok(o)) => finished(&opened, o, term, &shared, before, &workspace).await,
            Ok(Err(_)) => Err(Error::Runtime(
                "the kern runtime died before it took the box spec".into(),
            )),
            Err(e) => Err(e),
        };
        if let Ok(mut slot) = shared.result.lock() {
            *slot = Some(result);
        }
        // No longer a writer of the workspace once wait() can resolve: a snapshot() right
        // after it must not find this process still counted.
        drop(active);
        ended.send_replace(true);
    }
}

/// The process's result from its box's outcome: with the terminal's output as its reader kept
/// it, and a kill() said as such.
async fn finished(
    opened: &Opened,
    mut o: Outcome,
    mut term: watch::Receiver<Option<Kept>>,
    shared: &Shared,
    before: Option<track::Before>,
    workspace: &Path,
) -> Result<ExecResult> {
    if let Ok(mut a) = shared.applied.lock() {
        a.clone_from(&o.report.applied);
    }
    // The box is gone, so is the terminal's last holder: its reader ends now.
    let read = tokio::time::timeout(Duration::from_secs(2), async {
        term.wait_for(Option::is_some)
            .await
            .ok()
            .and_then(|k| k.clone())
    })
    .await;
    if let Ok(Some(k)) = read {
        o.stdout = k.bytes;
        o.stdout_truncated = k.truncated;
        o.stdout_spill = k.spill;
    }
    if shared.killed.load(std::sync::atomic::Ordering::SeqCst) {
        if let Some(f) = o
            .report
            .fault
            .as_mut()
            .filter(|f| f.kind == FaultKind::Killed)
        {
            f.message =
                "kill() ended the process: kern killed its box and every process in it".into();
        }
    }
    finish(opened, o, before, workspace).await
}

/// Our side of a process's box while it starts.
struct Steering {
    what: &'static str,
    terminal: bool,
    /// Gets the workload's pid when it is about to exec.
    started: oneshot::Receiver<i32>,
    stop: watch::Sender<bool>,
    signals: tokio::sync::mpsc::UnboundedSender<i32>,
    ended: watch::Receiver<bool>,
    closing: watch::Receiver<bool>,
    /// Where the terminal's reader leaves what it kept.
    term: watch::Sender<Option<Kept>>,
    shared: Shared,
}

impl Steering {
    /// Waits for the workload's start (its pid), or for the box's end before it (an error that
    /// says why); then opens the terminal, and builds the `Process`, whose input, master and
    /// connector's line are let go as soon as it has ended.
    async fn wait_start(self, ours: OurEnds, sink: ChunkSender, keep: Keep) -> Result<Process> {
        let what = self.what;
        let mut ended_rx = self.ended.clone();
        let pid = tokio::select! {
            pid = self.started => pid.ok(),
            _ = ended_rx.wait_for(|e| *e) => None,
        };
        let Some(pid) = pid else {
            // The box ended before its workload started: say why, once its result is set (the
            // start's sender may be dropped before it is).
            let _ = tokio::time::timeout(Duration::from_secs(10), ended_rx.wait_for(|e| *e)).await;
            let taken = self.shared.result.lock().ok().and_then(|mut s| s.take());
            return Err(match taken {
                Some(Err(e)) => e,
                Some(Ok(r)) => Error::Runtime(format!(
                    "{what}: the box ended before its process started{}",
                    r.fault
                        .as_ref()
                        .map(|f| format!(": {}", f.message))
                        .unwrap_or_default()
                )),
                None => Error::Runtime(format!("{what}: the box ended before its process started")),
            });
        };
        let terminal = self.terminal;
        let opened_terminal = match ours.tty {
            Some(sock) => open_terminal(sock, sink, keep.captures().0, self.term).await,
            None => Ok(None),
        };
        let (master, input) = match opened_terminal {
            Ok(Some((master, writer))) => (Some(master), Some(writer)),
            Ok(None) => (None, ours.stdin),
            Err(e) => {
                // Its box is not left running for nobody.
                self.stop.send_replace(true);
                return Err(e);
            }
        };
        let input = Arc::new(tokio::sync::Mutex::new(input));
        let master = Arc::new(Mutex::new(master));
        let connect = ours.connect.map(|c| Dialer {
            line: Arc::new(Mutex::new(Some(connector::Line::new(c)))),
            ended: self.ended.clone(),
        });
        let (i, m, c, mut e) = (
            input.clone(),
            master.clone(),
            connect.as_ref().map(|d| d.line.clone()),
            self.ended.clone(),
        );
        tokio::spawn(async move {
            let _ = e.wait_for(|e| *e).await;
            i.lock().await.take();
            if let Ok(mut m) = m.lock() {
                m.take();
            }
            if let Some(Ok(mut c)) = c.as_ref().map(|c| c.lock()) {
                c.take();
            }
        });
        Ok(Process {
            pid,
            input,
            input_ended: std::sync::atomic::AtomicBool::new(false),
            master,
            terminal,
            signals: self.signals,
            stop: self.stop,
            connect,
            closing: self.closing,
            killed: self.shared.killed,
            ended: self.ended,
            result: self.shared.result,
            applied: self.shared.applied,
        })
    }
}
