//! Processes a caller steers while they run, each in a fresh box of the session's posture on
//! its workspace: a background process (`sb.spawn`: stdin written as it goes, signals, a TCP
//! connection into its box) and a terminal (`sb.terminal`: the same, on a terminal of the box's
//! own devpts instead of pipes). Both end with their workload, their `timeoutS`, a kill, or the
//! session's close(); their output streams to the caller as it comes, under `maxOutputBytes`
//! per stream like a call's, and `wait()` gives the call's `ExecResult`.

use super::opened::Opened;
use super::percall::{self, PerCall};
use super::prepared::{self, Prepared, Workload};
use super::result::{self, ExecRequest, ExecResult};
use super::route;
use super::writers::Active;
use crate::engine::addon::launch::{Chunk, ChunkSender, Controls, Outcome, Stream};
use crate::engine::boxside::connector;
use crate::engine::shared::handoff::BoxFds;
use crate::engine::shared::handoff::{signal_number, SIGNALS};
use crate::engine::shared::spec::{TtySize, DEFAULT_WORKSPACE_TARGET};
use crate::engine::shared::status::FaultKind;
use crate::error::{Error, Result};
use crate::workspace::track;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
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
    /// The terminal's master (for `resize`), with a terminal.
    master: Arc<Mutex<Option<Arc<OwnedFd>>>>,
    /// A terminal (not a background process on pipes).
    terminal: bool,
    signals: tokio::sync::mpsc::UnboundedSender<i32>,
    stop: watch::Sender<bool>,
    /// The connector's line into its box (a background process only).
    connect: Option<Arc<Mutex<Option<connector::Line>>>>,
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
                ..Default::default()
            },
            DEFAULT_WORKSPACE_TARGET,
        )?;
        // The Sandbox's `env` or the terminal's own may name another.
        let named = |e: &[(String, String)]| e.iter().any(|(k, _)| k == "TERM");
        if terminal && !named(&place.env) && !named(&opened.config.env) {
            place.env.push(("TERM".into(), "xterm-256color".into()));
        }
        let mut p = prepared::prepare(&opened, Workload::Argv { what, argv }, timeout_ms, place)?;
        p.spec.stdin = !terminal;
        p.spec.tty = size;
        p.spec.connector = !terminal;
        if *opened.closing.borrow() {
            return Err(Error::Closed(
                "the Sandbox is closed; open a new Sandbox to start processes".into(),
            ));
        }

        let cfg = &opened.config;
        let before = p
            .before(&opened)
            .await
            .map_err(|fault| Error::Invalid(fault.message))?;
        let route = route::steered();
        let Prepared {
            spec, workspace, ..
        } = p;

        let io = |what: &str, e: std::io::Error| Error::Runtime(format!("{what}: {e}"));
        // The box's ends travel with the spec; ours stay here.
        let (stdin_read, input) = if terminal {
            (None, None)
        } else {
            let (r, w) = nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC)
                .map_err(|e| io("a pipe for the process's stdin", e.into()))?;
            let w = tokio::net::unix::pipe::Sender::from_owned_fd(w)
                .map_err(|e| io("the process's stdin", e))?;
            (Some(r), Some(w))
        };
        let (tty_ours, tty_theirs) = if terminal {
            let (a, b) = std::os::unix::net::UnixStream::pair()
                .map_err(|e| io("a socket for the terminal", e))?;
            (Some(OwnedFd::from(a)), Some(OwnedFd::from(b)))
        } else {
            (None, None)
        };
        let (connect_ours, connect_theirs) = if terminal {
            (None, None)
        } else {
            let (a, b) = connector::pair().map_err(|e| io("a socket for connect()", e))?;
            (Some(a), Some(b))
        };
        let line = opened.egress_line(&spec)?;
        let kern = route.kern(&opened, kern_path)?;

        let (stop, stop_rx) = watch::channel(false);
        let (started_tx, started_rx) = oneshot::channel();
        let (signals, signals_rx) = tokio::sync::mpsc::unbounded_channel();
        let (ended_tx, ended) = watch::channel(false);
        let result_slot: Arc<Mutex<Option<Result<ExecResult>>>> = Arc::default();
        let killed = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let task_killed = killed.clone();
        let task_slot = result_slot.clone();
        let applied: Arc<Mutex<Option<crate::engine::shared::status::Applied>>> = Arc::default();
        let task_applied = applied.clone();
        let max_output = cfg.max_output;
        let active = Active::enter(&opened.writers).await;
        let terminal_sink = sink.clone();
        // The terminal's output as the result keeps it (its reader starts with the master).
        let (term_tx, mut term_rx) = watch::channel::<Option<Kept>>(None);
        let task_opened = opened.clone();
        tokio::spawn(async move {
            let opened = task_opened;
            // Held for the process's life: close() waits for it, and ends it first.
            let _running = opened.running.read().await;
            let writing = active;
            let (cancel, _joined) =
                percall::cancel_either(opened.closing.subscribe(), Some(stop_rx));
            // Owned: closed once sent, so the box holds the only copies (`run_steered`).
            let egress = line.as_ref().map(|l| l.fd().try_clone()).transpose();
            let fds = egress.map(|egress| BoxFds {
                channel: None,
                egress,
                stdin: stdin_read,
                tty: tty_theirs,
                connect: connect_theirs,
            });
            let controls = Controls {
                started: started_tx,
                signals: signals_rx,
            };
            let r = match fds {
                Ok(fds) => {
                    kern.run_steered(&spec, max_output, sink, cancel, fds, controls)
                        .await
                }
                Err(e) => {
                    kern.retire();
                    Err(Error::Runtime(format!("the box's egress line: {e}")))
                }
            };
            drop(line);
            let r = match r {
                Ok(Some(o)) => Ok(o),
                Ok(None) => Err(Error::Runtime(
                    "the kern runtime exited before it read the box spec".into(),
                )),
                Err(e) => Err(e),
            };
            let result = match r {
                Ok(mut o) => {
                    if let Ok(mut a) = task_applied.lock() {
                        a.clone_from(&o.report.applied);
                    }
                    // The box is gone, so is the terminal's last holder: its reader ends now.
                    let read = tokio::time::timeout(Duration::from_secs(2), async {
                        term_rx
                            .wait_for(Option::is_some)
                            .await
                            .ok()
                            .and_then(|k| k.clone())
                    })
                    .await;
                    if let Ok(Some(k)) = read {
                        o.stdout = k.bytes;
                        o.stdout_truncated = k.truncated;
                    }
                    if task_killed.load(std::sync::atomic::Ordering::SeqCst) {
                        if let Some(f) = o
                            .report
                            .fault
                            .as_mut()
                            .filter(|f| f.kind == FaultKind::Killed)
                        {
                            f.message = "kill() ended the process: kern killed its box and every process in it".into();
                        }
                    }
                    finish(&opened, o, before, &workspace).await
                }
                Err(e) => Err(e),
            };
            if let Ok(mut slot) = task_slot.lock() {
                *slot = Some(result);
            }
            // No longer a writer of the workspace once wait() can resolve: a snapshot() right
            // after it must not find this process still counted.
            drop(writing);
            ended_tx.send_replace(true);
        });

        let mut ended_rx = ended.clone();
        let pid = tokio::select! {
            pid = started_rx => pid.ok(),
            _ = ended_rx.wait_for(|e| *e) => None,
        };
        let Some(pid) = pid else {
            // The box ended before its workload started: say why.
            let taken = result_slot.lock().ok().and_then(|mut s| s.take());
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
        let opened_terminal = match tty_ours {
            Some(sock) => open_terminal(sock, terminal_sink, max_output, term_tx).await,
            None => Ok(None),
        };
        let (master, input) = match opened_terminal {
            Ok(Some((master, writer))) => (Some(master), Some(writer)),
            Ok(None) => (None, input),
            Err(e) => {
                // Its box is not left running for nobody.
                stop.send_replace(true);
                return Err(e);
            }
        };
        let input = Arc::new(tokio::sync::Mutex::new(input));
        let master = Arc::new(Mutex::new(master));
        let connect = connect_ours.map(|c| Arc::new(Mutex::new(Some(connector::Line::new(c)))));
        let (i, m, c, mut e) = (
            input.clone(),
            master.clone(),
            connect.clone(),
            ended.clone(),
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
            master,
            terminal,
            signals,
            stop,
            connect,
            killed,
            ended,
            result: result_slot,
            applied,
        })
    }

    /// Writes to its stdin (or its terminal); resolves once the bytes are in the pipe.
    pub async fn write(&self, data: &[u8]) -> Result<()> {
        let mut input = self.input.lock().await;
        let gone = || {
            Error::Closed(
                "write(): nothing reads the process's input any more (it closed its stdin, or it has ended)".into(),
            )
        };
        match input.as_mut() {
            None if self.terminal => Err(Error::Closed("write(): the terminal has ended".into())),
            None if *self.ended.borrow() => Err(gone()),
            None => Err(Error::Closed(
                "write() after end(): the process's stdin is closed; start a new process to send more input".into(),
            )),
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
        self.input.lock().await.take();
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
        let Some(line) = &self.connect else {
            return crate::invalid!("connect(): a terminal has no connect()");
        };
        if *self.ended.borrow() {
            return Err(Error::Invalid(connector::DialError::Gone.to_string()));
        }
        let line = line.clone();
        tokio::task::spawn_blocking(move || {
            let mut line = line
                .lock()
                .map_err(|_| Error::Runtime("connect lock poisoned".into()))?;
            // Let go of once the process ended.
            let Some(line) = line.as_mut() else {
                return Err(Error::Invalid(format!(
                    "connect(): {}",
                    connector::DialError::Gone
                )));
            };
            line.dial(port).map_err(|e| match e {
                connector::DialError::Io(e) => Error::Runtime(format!("connect(): {e}")),
                // Said whole by connect(), which may try it again.
                e @ connector::DialError::Refused { .. } => Error::ConnectionRefused(e.to_string()),
                e => Error::Invalid(format!("connect(): {e}")),
            })
        })
        .await
        .map_err(|e| Error::Runtime(format!("connect(): {e}")))?
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
    max_output: usize,
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
    tokio::spawn(read_terminal(reader, sink, max_output, done));
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
/// process's stdout, up to `cap` bytes like a call's stdout.
async fn read_terminal(
    mut fd: tokio::net::unix::pipe::Receiver,
    sink: ChunkSender,
    cap: usize,
    done: watch::Sender<Option<Kept>>,
) {
    use tokio::io::AsyncReadExt;
    let mut buf = vec![0u8; 64 * 1024];
    let mut kept = Kept::default();
    // EIO once no process holds the terminal any more: its end.
    while let Ok(n @ 1..) = fd.read(&mut buf).await {
        let take = n.min(cap.saturating_sub(kept.bytes.len()));
        if take < n {
            kept.truncated = true;
        }
        if take > 0 {
            kept.bytes.extend_from_slice(&buf[..take]);
            // Bounded: a slow consumer holds the terminal's reader, and the box's writes.
            let _ = sink
                .send(Chunk {
                    stream: Stream::Stdout,
                    data: buf[..take].to_vec(),
                })
                .await;
        }
    }
    done.send_replace(Some(kept));
}

/// What a terminal's reader kept of its output, as a call keeps its stdout.
#[derive(Debug, Clone, Default)]
struct Kept {
    bytes: Vec<u8>,
    truncated: bool,
}

/// The process's `ExecResult` from its box's outcome.
async fn finish(
    opened: &Opened,
    mut outcome: Outcome,
    before: Option<track::Snapshot>,
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
