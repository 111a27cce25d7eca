//! A Jupyter kernel the image provides (`kernel({ jupyter: "python3" })`), in one long-lived box
//! with the posture of any kernel box, driven over ZeroMQ `ipc://` sockets.
//!
//! The sockets live in a private host directory (0700, fresh per kernel) bound into the box at
//! `/.kern-jupyter`, with the connection file: no TCP, no change to the box's network. Every
//! message is signed with a key made for this kernel; one that fails verification is dropped
//! and counted, and the count is reported in a cell's runtime notes. Each socket is read by a
//! task of its own, so the kernel is never throttled by the caller (ipykernel drops IOPub
//! messages for a slow subscriber). What the readers queue is bounded (`QUEUE_MESSAGES`,
//! `QUEUE_BYTES`), and they queue only answers to the request we wait on: output a kernel sends
//! while no cell runs is dropped at once, counted, and named in the next cell's notes.
//!
//! Against the driver kernel (`session::kernel`): a cell timeout first interrupts the kernel
//! (SIGINT to its process group, or `interrupt_request` when its kernelspec asks for messages) and
//! keeps it, state and all, if the cell stops within `INTERRUPT_GRACE`; only a kernel that
//! does not stop is torn down.

use crate::engine::launch::{Chunk, Outcome};
use crate::engine::spec::{BindSpec, DEFAULT_WORKSPACE_TARGET};
use crate::engine::status::{Fault, FaultKind};
use crate::error::{Error, Result};
use crate::lang::jupyter::cell::{Cell, Shown};
use crate::lang::jupyter::kernelspec::{self, Channel, Interrupt, KernelSpec};
use crate::lang::jupyter::wire::{self, Dropped, Message, Session};
use crate::session::{ExecResult, Opened};
use bytes::Bytes;
use serde_json::json;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::{watch, Mutex};
use zeromq::{Socket, SocketRecv, SocketSend};

/// How long a kernel may take to start and answer `kernel_info_request` (R loads in about a
/// second here; a cold page cache on a slow disk is many times that).
const START_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an interrupted cell has to stop before the kernel is torn down.
pub const INTERRUPT_GRACE: Duration = Duration::from_secs(5);
/// How often a cell that asked for input is interrupted again while it has not ended.
const INPUT_REINTERRUPT: Duration = Duration::from_secs(1);
/// How long a kernel has to answer its heartbeat before a cell.
const HEARTBEAT_TIMEOUT: Duration = Duration::from_secs(5);
/// How long `close()` waits for the kernel to exit after `shutdown_request`.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
/// How many message ids a socket's reader remembers to drop replays (then it starts over).
const SEEN_IDS: usize = 100_000;
/// How much of the kernel process's own output (outside cells) is kept, for error messages.
const LOG_TAIL: usize = 8 << 10;
/// How many messages, and how many bytes of them, a socket's reader may have queued for the
/// cell; past either it waits (and the kernel with it: IOPub then drops, as for any slow
/// subscriber). One message larger than `QUEUE_BYTES` waits for the queue to be empty.
const QUEUE_MESSAGES: usize = 1024;
const QUEUE_BYTES: usize = 16 << 20;

/// A count the readers keep, and how much of it a note already reported.
#[derive(Default)]
struct Counted {
    total: AtomicU64,
    reported: AtomicU64,
}

impl Counted {
    fn add(&self, n: u64) {
        self.total.fetch_add(n, Ordering::SeqCst);
    }

    /// (what came since the last call, the total).
    fn fresh(&self) -> (u64, u64) {
        let total = self.total.load(Ordering::SeqCst);
        (total - self.reported.swap(total, Ordering::SeqCst), total)
    }
}

/// What the socket readers share with the kernel.
#[derive(Default)]
struct Readers {
    /// Messages dropped for a bad signature.
    bad_signatures: Counted,
    /// Messages over `wire::MAX_MESSAGE_BYTES`, dropped.
    too_large: Counted,
    /// The request whose answers are wanted now (a cell's execute_request, the start's
    /// kernel_info_request); anything else is dropped by the readers.
    wanted: std::sync::Mutex<Option<String>>,
    /// Output messages (stream, display, error...) that answered no wanted request, and their
    /// bytes: dropped, for the next cell's note.
    unasked: Counted,
    unasked_bytes: Counted,
}

impl Readers {
    fn want(&self, id: Option<&str>) {
        if let Ok(mut w) = self.wanted.lock() {
            *w = id.map(str::to_string);
        }
    }

    fn wants(&self, m: &Message) -> bool {
        match (self.wanted.lock(), m.parent_id()) {
            (Ok(w), Some(p)) => w.as_deref() == Some(p),
            _ => false,
        }
    }

    /// Counts a message dropped unasked, if it carried output.
    fn unasked(&self, m: &Message, bytes: usize) {
        let output = matches!(
            m.msg_type(),
            "stream" | "display_data" | "execute_result" | "update_display_data" | "error"
        );
        if output {
            self.unasked.add(1);
            self.unasked_bytes.add(bytes as u64);
        }
    }
}

impl Readers {
    /// Notes about what the readers dropped since the last cell's notes.
    fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        let (n, _) = self.unasked.fresh();
        let (bytes, _) = self.unasked_bytes.fresh();
        if n > 0 {
            notes.push(format!(
                "note: {n} output message(s) of the kernel ({}) came while no cell ran (from a thread or process an earlier cell left running) and were dropped",
                crate::session::human_bytes(bytes)
            ));
        }
        let (n, _) = self.too_large.fresh();
        if n > 0 {
            notes.push(format!(
                "note: {n} message(s) of the kernel were over {} MiB and were dropped",
                wire::MAX_MESSAGE_BYTES >> 20
            ));
        }
        let (n, total) = self.bad_signatures.fresh();
        if n > 0 {
            notes.push(format!(
                "note: {n} message(s) on the kernel's sockets had no valid signature and were dropped ({total} since the kernel started)"
            ));
        }
        notes
    }
}

/// A socket's queue of messages for the cell; each holds its bytes' share of `QUEUE_BYTES`
/// until it is taken.
struct Queue(tokio::sync::mpsc::Receiver<(Message, usize, tokio::sync::OwnedSemaphorePermit)>);

impl Queue {
    async fn recv(&mut self) -> Option<Message> {
        self.0.recv().await.map(|(m, _, _)| m)
    }

    /// Empties the queue: what is in it answered a request no longer waited on.
    fn discard(&mut self, readers: &Readers) {
        while let Ok((m, bytes, _)) = self.0.try_recv() {
            readers.unasked(&m, bytes);
        }
    }
}

/// What the caller's Sandbox holds a Jupyter kernel to (it is always a caller's kernel, never a
/// pool slot): counted as a box writing to the workspace until closed, the workspace cap checked
/// before each cell, and the output cap.
pub(crate) struct Caller {
    pub active: crate::session::Active,
    pub quota: Option<(std::path::PathBuf, u64)>,
    pub max_output: usize,
}

pub struct JupyterKernel {
    state: Mutex<State>,
    session_closing: watch::Receiver<bool>,
    stop: watch::Sender<bool>,
    timeout_ms: u64,
    max_output: usize,
    spec: KernelSpec,
    /// What the socket readers counted (bad signatures, messages dropped).
    readers: Arc<Readers>,
    active: std::sync::Mutex<Option<crate::session::Active>>,
    quota: Option<(std::path::PathBuf, u64)>,
    /// The socket directory; removed as soon as the kernel is gone (its box ended).
    dir: Arc<std::sync::Mutex<Option<tempfile::TempDir>>>,
}

enum State {
    Live(Box<Live>),
    Dead(String),
}

struct Live {
    session: Session,
    socks: Sockets,
    /// The kernel process's own stdout/stderr (not a cell's `stream` messages).
    chunks: UnboundedReceiver<Chunk>,
    log: Vec<u8>,
    ended: tokio::task::JoinHandle<Result<Option<Outcome>>>,
    monitor: Option<u32>,
}

fn random_key() -> String {
    // Two v4 UUIDs: 244 random bits from the OS generator, as hex.
    format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    )
}

fn runtime(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Runtime(format!("jupyter kernel: {what}: {e}"))
}

impl JupyterKernel {
    /// Starts kernelspec `name` of the session's image and waits until it answers.
    pub(crate) async fn start(
        opened: Arc<Opened>,
        kern_path: &std::path::Path,
        timeout_ms: u64,
        name: &str,
        caller: Caller,
    ) -> Result<JupyterKernel> {
        let workspace = opened.workspace_path()?;
        let mut spec = opened.spec(
            Vec::new(),
            &[],
            crate::session::longbox::LIFETIME_MS,
            false,
            &workspace,
        );
        let root = match &opened.image.root {
            crate::engine::spec::RootSpec::Dir { path } => path.clone(),
            crate::engine::spec::RootSpec::Host => "/".into(),
        };
        let var = |k: &str| {
            spec.env
                .iter()
                .find(|(ek, _)| ek == k)
                .map(|(_, v)| v.clone())
        };
        let home = var("HOME").unwrap_or_else(|| "/root".into());
        // Box root's own home too, where `pip install --user` in the image put kernelspecs.
        let mut homes = vec![home.as_str()];
        if spec.user.is_none() {
            homes.push("/root");
        }
        let dirs = kernelspec::search_dirs(var("JUPYTER_PATH").as_deref(), &homes);
        let path = var("PATH").unwrap_or_default();
        let ks = {
            let name = name.to_string();
            let ws = workspace.clone();
            tokio::task::spawn_blocking(move || {
                // A kernelspec in the workspace (JUPYTER_PATH there, or one `setup` installed
                // under .deps) is read from the host's workspace; any other from the image.
                let locate = move |d: &str| match d.strip_prefix(DEFAULT_WORKSPACE_TARGET) {
                    Some(rest) if rest.is_empty() || rest.starts_with('/') => {
                        (ws.clone(), rest.trim_start_matches('/').to_string())
                    }
                    _ => (root.clone(), d.trim_start_matches('/').to_string()),
                };
                let mut ks = kernelspec::find(&dirs, &locate, &name)?;
                // A kernelspec that pip installed names its interpreter "python", meaning the
                // python that installed it; jupyter_client runs its own interpreter there. Ours
                // is the box's: an image with only `python3` (Debian's) gets that one.
                if ks.argv[0] == "python"
                    && !on_path(&locate, &path, "python")
                    && on_path(&locate, &path, "python3")
                {
                    ks.argv[0] = "python3".into();
                }
                Ok::<_, Error>(ks)
            })
            .await
            .map_err(|e| runtime("kernelspec lookup", e))??
        };

        // The socket directory: ours alone (0700). Its host path may be long: the kernel binds
        // at /.kern-jupyter, and we connect through descriptors (see `connect`).
        let dir = tempfile::Builder::new()
            .prefix("kern-jk-")
            .tempdir()
            .map_err(|e| runtime("create the socket directory", e))?;
        let key = random_key();
        let conn = kernelspec::connection_file(&key, name).to_string();
        {
            use std::io::Write;
            use std::os::unix::fs::OpenOptionsExt;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(dir.path().join("connection.json"))
                .map_err(|e| runtime("write the connection file", e))?;
            f.write_all(conn.as_bytes())
                .map_err(|e| runtime("write the connection file", e))?;
        }
        let meta = std::fs::metadata(dir.path()).map_err(|e| runtime("socket directory", e))?;
        spec.binds.push(BindSpec {
            source: dir.path().to_path_buf(),
            target: kernelspec::SOCKET_DIR.into(),
            writable: true,
            dir: true,
            dev: meta.dev(),
            ino: meta.ino(),
        });
        spec.argv = ks.argv.clone();
        // The kernelspec's env, then the caller's `env` on top (as for any call).
        for (k, v) in ks.env.iter().chain(&opened.config.env) {
            spec.env.retain(|(ek, _)| ek != k);
            spec.env.push((k.clone(), v.clone()));
        }

        let session_closing = opened.closing.subscribe();
        let (sink, mut chunks) = tokio::sync::mpsc::unbounded_channel();
        let started = crate::session::longbox::spawn(opened, kern_path, spec, None, sink)?;
        let readers = Arc::new(Readers::default());
        let session = Session::new(key.as_bytes());
        let stop = started.stop;
        let mut ended = started.ended;
        let mut log = Vec::new();
        let connect = connect(dir.path().to_path_buf(), session.clone(), readers.clone());
        tokio::pin!(connect);
        let deadline = tokio::time::sleep(START_TIMEOUT);
        tokio::pin!(deadline);
        // Connected and answering, or why not (the box's end, or the deadline).
        let outcome: std::result::Result<Sockets, String> = loop {
            tokio::select! {
                r = &mut connect => break r.map_err(|e| format!("it did not answer on its sockets ({e})")),
                c = chunks.recv() => if let Some(c) = c { keep_tail(&mut log, &c.data) },
                r = &mut ended => {
                    while let Ok(c) = chunks.try_recv() {
                        keep_tail(&mut log, &c.data);
                    }
                    let why = match r {
                        Ok(Ok(Some(o))) => match o.report.fault {
                            Some(f) => f.message,
                            None => format!("its process exited with code {}", o.report.exit_code),
                        },
                        Ok(Ok(None)) => "its box was not started (the Sandbox is closing)".into(),
                        Ok(Err(e)) => e.to_string(),
                        Err(e) => e.to_string(),
                    };
                    break Err(why);
                }
                _ = &mut deadline => break Err(format!("it did not answer within {}s", START_TIMEOUT.as_secs())),
            }
        };
        let socks = match outcome {
            Ok(s) => s,
            Err(why) => {
                stop.send_replace(true);
                if !ended.is_finished() {
                    let _ = ended.await;
                }
                let log = String::from_utf8_lossy(&log);
                let log = log.trim();
                return Err(Error::Invalid(format!(
                    "the Jupyter kernel \"{name}\" ({}) did not start: {why}{}",
                    ks.argv.join(" "),
                    if log.is_empty() {
                        String::new()
                    } else {
                        format!("; its output:\n{log}")
                    }
                )));
            }
        };
        // Its box ending on a stop (close(), the Sandbox closing, a timeout) removes it too,
        // even if this kernel object lives on in the caller's hands.
        let dir = Arc::new(std::sync::Mutex::new(Some(dir)));
        let on_stop = dir.clone();
        let mut stopped = stop.subscribe();
        tokio::spawn(async move {
            let _ = stopped.wait_for(|s| *s).await;
            if let Ok(mut d) = on_stop.lock() {
                drop(d.take());
            }
        });
        Ok(JupyterKernel {
            state: Mutex::new(State::Live(Box::new(Live {
                session,
                socks,
                chunks,
                log,
                ended,
                monitor: started.monitor,
            }))),
            session_closing,
            stop,
            timeout_ms,
            max_output: caller.max_output,
            spec: ks,
            readers,
            active: std::sync::Mutex::new(Some(caller.active)),
            quota: caller.quota,
            dir,
        })
    }

    fn torn_down(&self, why: &str) -> Error {
        Error::Invalid(format!(
            "this Jupyter kernel (\"{}\") was torn down ({why}); open a new one with sandbox.kernel({{ jupyter: \"{}\" }})",
            self.spec.name, self.spec.name
        ))
    }

    /// Runs one cell. Cells wait for each other, in order.
    pub async fn run_code(
        &self,
        code: &str,
        timeout_ms: Option<u64>,
        sink: Option<UnboundedSender<Chunk>>,
    ) -> Result<ExecResult> {
        crate::lang::check_cell_size(code)?;
        let mut state = self.state.lock().await;
        let live = match &mut *state {
            State::Dead(why) => return Err(self.torn_down(why)),
            State::Live(l) => l,
        };
        // Gone between cells (the session closed, the process died, it stopped answering):
        // nothing runs, and the caller hears why.
        let gone = if *self.session_closing.borrow() {
            Some("its Sandbox was closed".to_string())
        } else if live.ended.is_finished() {
            Some(self.box_end(live).await.message)
        } else if let Err(why) = heartbeat(&mut live.socks.heartbeat).await {
            self.stop.send_replace(true);
            let _ = self.box_end(live).await;
            Some(format!(
                "it stopped answering its heartbeat ({why}), so kern killed its box"
            ))
        } else {
            None
        };
        if let Some(why) = gone {
            let e = self.torn_down(&why);
            *state = State::Dead(why);
            self.remove_dir();
            return Err(e);
        }
        if let Some(refused) = super::driver::over_quota(&self.quota).await {
            return Ok(refused);
        }
        // What earlier cells left behind (late output after their idle) is not this cell's.
        for q in [
            &mut live.socks.iopub,
            &mut live.socks.replies,
            &mut live.socks.stdin,
        ] {
            q.discard(&self.readers);
        }
        while let Ok(c) = live.chunks.try_recv() {
            keep_tail(&mut live.log, &c.data);
        }

        let start = Instant::now();
        let timeout = Duration::from_millis(timeout_ms.unwrap_or(self.timeout_ms));
        let (id, frames) = live
            .session
            .request("execute_request", &Cell::request(code));
        let cell_id = id.clone();
        self.readers.want(Some(&id));
        let mut asked_input: Option<String> = None;
        let mut cell = Cell::new(id, self.max_output);
        let show = |shown: Shown| {
            if let Some(s) = &sink {
                for (stream, data) in shown {
                    let _ = s.send(Chunk { stream, data });
                }
            }
        };
        let mut fault: Option<Fault> = None;
        let mut dead = false;
        if send(&mut live.socks.shell, frames).await.is_err() {
            fault = Some(Fault::new(
                FaultKind::Killed,
                "the kernel's shell socket is gone; the kernel was torn down",
            ));
            dead = true;
        }
        // Past the deadline the cell is interrupted, but only once the kernel runs it (an
        // interrupt that lands before would be ignored and the cell would then run on), or a
        // second later in any case; torn down if it has not stopped INTERRUPT_GRACE after.
        let deadline = tokio::time::Instant::now() + timeout;
        let fallback = deadline + Duration::from_secs(1);
        let grace_end = deadline + INTERRUPT_GRACE;
        let (mut timed_out, mut interrupted) = (false, false);
        // A cell that asked for input is interrupted again each INPUT_REINTERRUPT until it ends:
        // a signal that lands while the kernel is between its request and its wait (seen with
        // IRkernel on a loaded machine) is lost, and the cell would otherwise sit to its timeout.
        let mut input_reinterrupt: Option<tokio::time::Instant> = None;
        while !dead && !cell.done() {
            if timed_out && !interrupted && cell.executing() {
                interrupted = true;
                self.interrupt(live).await;
            }
            let wake = match (timed_out, interrupted) {
                (false, _) => deadline,
                (true, false) => fallback,
                (true, true) => grace_end,
            };
            let wake = input_reinterrupt.map_or(wake, |at| at.min(wake));
            tokio::select! {
                m = live.socks.iopub.recv() => match m {
                    Some(m) => show(cell.on_iopub(&m)),
                    None => dead = true,
                },
                m = live.socks.replies.recv() => match m {
                    Some(m) => show(cell.on_reply(&m)),
                    None => dead = true,
                },
                m = live.socks.stdin.recv() => match m {
                    Some(m) if m.msg_type() == "input_request" && m.parent_id() == Some(cell_id.as_str()) => {
                        // A cell can't be given input: it is interrupted at once, and told why.
                        let prompt = m.content.get("prompt").and_then(|p| p.as_str()).unwrap_or("");
                        asked_input = Some(prompt.to_string());
                        if !interrupted {
                            interrupted = true;
                            self.interrupt(live).await;
                            input_reinterrupt = Some(tokio::time::Instant::now() + INPUT_REINTERRUPT);
                        }
                    }
                    Some(_) => {}
                    None => dead = true,
                },
                c = live.chunks.recv() => match c {
                    // Output the kernel process writes itself (an R `system()` call, a C
                    // library) during a cell is the cell's too.
                    Some(c) => show(cell.on_output(c.stream, &c.data)),
                    None => dead = true,
                },
                _ = tokio::time::sleep_until(wake) => {
                    if input_reinterrupt.is_some_and(|at| at <= tokio::time::Instant::now()) {
                        self.interrupt(live).await;
                        input_reinterrupt = Some(tokio::time::Instant::now() + INPUT_REINTERRUPT);
                    } else if !timed_out {
                        timed_out = true;
                    } else if !interrupted {
                        interrupted = true;
                        self.interrupt(live).await;
                    } else {
                        self.stop.send_replace(true);
                        let _ = self.box_end(live).await;
                        fault = Some(Fault::new(
                            FaultKind::Timeout,
                            format!(
                                "the cell ran past its timeout of {:.3}s and did not stop within {}s of an interrupt; kern killed the kernel's box and every process in it",
                                timeout.as_secs_f64(),
                                INTERRUPT_GRACE.as_secs()
                            ),
                        ));
                        dead = true;
                    }
                }
            }
        }
        if dead && fault.is_none() {
            // The kernel's output or a socket closed: its box is ending, or a socket failed
            // while it runs, which leaves a kernel we can't talk to; that one is ended.
            fault = Some(self.box_end_within(live, Some(SHUTDOWN_GRACE)).await);
        }
        if timed_out && fault.is_none() {
            let what = if interrupted {
                "kern interrupted it and the kernel kept its state"
            } else {
                "it ended before kern's interrupt was sent, and the kernel kept its state"
            };
            fault = Some(Fault::new(
                FaultKind::Timeout,
                format!(
                    "the cell ran past its timeout of {:.3}s; {what}",
                    timeout.as_secs_f64()
                ),
            ));
        }
        let parts = cell.into_parts();
        let mut stderr = crate::session::Stderr::of_code(parts.stderr);
        for n in &parts.notes {
            stderr.push_note(n);
        }
        if let Some(prompt) = asked_input {
            stderr.push_note(
                &format!(
                    "note: the cell asked for input (prompt {prompt:?}), which a kernel cell cannot be given; kern interrupted it"
                ),
            );
        }
        self.readers.want(None);
        for n in self.readers.notes() {
            stderr.push_note(&n);
        }
        let exit_code = match (&fault, dead) {
            (Some(_), true) => 137,
            _ => parts.exit_code,
        };
        if dead {
            let why = fault
                .as_ref()
                .map(|f| f.message.clone())
                .unwrap_or_else(|| "its box ended".into());
            *state = State::Dead(why);
            self.remove_dir();
        }
        Ok(ExecResult {
            stdout: parts.stdout,
            stderr,
            exit_code,
            duration_ms: start.elapsed().as_secs_f64() * 1000.0,
            fault,
            files: Vec::new(),
            truncated: parts.truncated,
            results: parts.results,
        })
    }

    /// Removes the socket directory (the box has ended: nothing binds in it any more).
    fn remove_dir(&self) {
        if let Ok(mut d) = self.dir.lock() {
            drop(d.take());
        }
    }

    /// Interrupts the running cell the way the kernelspec asks.
    async fn interrupt(&self, live: &mut Live) {
        match self.spec.interrupt {
            Interrupt::Message => {
                let (_, frames) = live.session.request("interrupt_request", &json!({}));
                let _ = send(&mut live.socks.control, frames).await;
            }
            Interrupt::Signal => {
                if let Some(monitor) = live.monitor {
                    let _ = tokio::task::spawn_blocking(move || {
                        signal_workload(monitor, nix::sys::signal::Signal::SIGINT)
                    })
                    .await;
                }
            }
        }
    }

    /// Waits for the box to end and says why it did.
    async fn box_end(&self, live: &mut Live) -> Fault {
        self.box_end_within(live, None).await
    }

    /// As `box_end`, but ends the box itself if it has not ended within `wait`.
    async fn box_end_within(&self, live: &mut Live, wait: Option<Duration>) -> Fault {
        let outcome = match wait {
            None => (&mut live.ended).await,
            Some(wait) => match tokio::time::timeout(wait, &mut live.ended).await {
                Ok(o) => o,
                Err(_) => {
                    self.stop.send_replace(true);
                    (&mut live.ended).await
                }
            },
        };
        let log = String::from_utf8_lossy(&live.log).trim().to_string();
        let tail = if log.is_empty() {
            String::new()
        } else {
            let lines: Vec<&str> = log.lines().rev().take(10).collect();
            let lines: Vec<&str> = lines.into_iter().rev().collect();
            format!("; its last output:\n{}", lines.join("\n"))
        };
        super::driver::end_fault(outcome, "process", &tail)
    }

    /// Asks the kernel to shut down, then ends its box if it has not exited. Idempotent.
    pub async fn close(&self) -> Result<()> {
        let mut state = self.state.lock().await;
        if let State::Live(live) = &mut *state {
            if !live.ended.is_finished() {
                let (_, frames) = live
                    .session
                    .request("shutdown_request", &json!({"restart": false}));
                if send(&mut live.socks.control, frames).await.is_ok() {
                    let _ = tokio::time::timeout(SHUTDOWN_GRACE, &mut live.ended).await;
                }
            }
            self.stop.send_replace(true);
            if !live.ended.is_finished() {
                let _ = (&mut live.ended).await;
            }
        }
        self.stop.send_replace(true);
        *state = State::Dead("it was closed".into());
        self.remove_dir();
        if let Ok(mut a) = self.active.lock() {
            a.take();
        }
        Ok(())
    }
}

/// Whether `name` is a file in a directory of the box's `path`, found through `locate`.
fn on_path(locate: &dyn Fn(&str) -> (std::path::PathBuf, String), path: &str, name: &str) -> bool {
    use crate::fsx::{open_beneath, Resolve};
    path.split(':').filter(|d| d.starts_with('/')).any(|d| {
        let (root, rel) = locate(d);
        std::fs::File::open(&root).is_ok_and(|r| {
            let file = format!("{rel}/{name}");
            open_beneath(
                &r,
                file.as_str(),
                nix::fcntl::OFlag::O_PATH,
                Resolve::InRoot,
            )
            .is_ok()
        })
    })
}

fn keep_tail(log: &mut Vec<u8>, data: &[u8]) {
    log.extend_from_slice(data);
    if log.len() > LOG_TAIL {
        log.drain(..log.len() - LOG_TAIL);
    }
}

async fn send(sock: &mut zeromq::DealerSendHalf, frames: Vec<Bytes>) -> Result<()> {
    let msg = zeromq::ZmqMessage::try_from(frames).map_err(|e| runtime("message", e))?;
    sock.send(msg).await.map_err(|e| runtime("send", e))
}

/// One heartbeat round trip.
async fn heartbeat(hb: &mut zeromq::ReqSocket) -> std::result::Result<(), String> {
    let ping = Bytes::from_static(b"kern-ping");
    let round = async {
        hb.send(zeromq::ZmqMessage::from(ping.clone()))
            .await
            .map_err(|e| e.to_string())?;
        let pong = hb.recv().await.map_err(|e| e.to_string())?;
        if pong.get(0) == Some(&ping) {
            Ok(())
        } else {
            Err("it answered with something else".to_string())
        }
    };
    match tokio::time::timeout(HEARTBEAT_TIMEOUT, round).await {
        Ok(r) => r,
        Err(_) => Err(format!("no answer in {}s", HEARTBEAT_TIMEOUT.as_secs())),
    }
}

/// The connected sockets, each read by a task of its own.
struct Sockets {
    /// The relays to the kernel's socket files, for as long as the sockets may reconnect.
    _relays: Relays,
    shell: zeromq::DealerSendHalf,
    control: zeromq::DealerSendHalf,
    heartbeat: zeromq::ReqSocket,
    replies: Queue,
    iopub: Queue,
    /// Requests for input: we offer none (`allow_stdin: false`), but a kernel that asks anyway
    /// (IRkernel's `readline()`) would wait for ever.
    stdin: Queue,
    /// The control socket's replies (to interrupt and shutdown requests) are read and dropped.
    _control: tokio::task::JoinHandle<()>,
}

/// Connects to the kernel's sockets as they appear and waits until it answers: a
/// `kernel_info_reply` on shell and a status for that request on IOPub, which proves the IOPub
/// subscription has reached the kernel (messages published before it would be lost).
async fn connect(
    dir: std::path::PathBuf,
    session: Session,
    readers: Arc<Readers>,
) -> std::result::Result<Sockets, String> {
    // Connect only once the kernel has bound every socket: the ZeroMQ client retries a socket
    // that is not there yet with exponential back-off (0.05, 0.15, 0.35, 0.75, 1.55 s...), so
    // a kernel bound just after one attempt would be reached only at the next (BENCHMARKS.md).
    let all = [
        Channel::Shell,
        Channel::IoPub,
        Channel::Stdin,
        Channel::Control,
        Channel::Heartbeat,
    ];
    while !all
        .iter()
        .all(|c| kernelspec::socket_path(&dir, *c).exists())
    {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    // Shell and stdin share the session's identity, as jupyter_client does: a kernel sends its
    // input_request to the stdin peer named like the shell peer that asked.
    let identity = || -> std::result::Result<zeromq::SocketOptions, String> {
        let mut options = zeromq::SocketOptions::default();
        options.peer_identity(
            zeromq::util::PeerIdentity::try_from(session.id.as_bytes().to_vec())
                .map_err(|e| e.to_string())?,
        );
        options.connect_timeout(START_TIMEOUT);
        Ok(options)
    };
    let mut shell = zeromq::DealerSocket::with_options(identity()?);
    let mut stdin = zeromq::DealerSocket::with_options(identity()?);
    let mut control = zeromq::DealerSocket::new();
    let mut iopub = zeromq::SubSocket::new();
    let mut heartbeat = zeromq::ReqSocket::new();
    // Each socket is reached through a descriptor of the very file the kernel bound (opened
    // without following a symlink, checked to be a socket), never by its name again: the box
    // can write in the directory, and ZeroMQ reconnects by itself, so a name the box swapped
    // for a symlink must not lead a reconnect to a socket of the host's. And each is reached
    // through a relay of ours that bounds the size of what the kernel sends (`Relays`).
    let mut relays = Relays::new().map_err(|e| format!("the relay directory: {e}"))?;
    let mut ep = |c| -> std::result::Result<String, String> {
        use nix::fcntl::OFlag;
        use nix::sys::stat::{fstat, Mode, SFlag};
        let p = kernelspec::socket_path(&dir, c);
        let fd = nix::fcntl::open(
            &p,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| format!("open {}: {e}", p.display()))?;
        let st = fstat(&fd).map_err(|e| format!("stat {}: {e}", p.display()))?;
        if SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT != SFlag::S_IFSOCK {
            return Err(format!("{} is not a socket", p.display()));
        }
        relays.add(c, fd, &readers)
    };
    let (shell_ep, stdin_ep, control_ep, iopub_ep, hb_ep) = (
        ep(Channel::Shell)?,
        ep(Channel::Stdin)?,
        ep(Channel::Control)?,
        ep(Channel::IoPub)?,
        ep(Channel::Heartbeat)?,
    );
    let e = |what: &str, e: zeromq::ZmqError| format!("{what}: {e}");
    iopub.subscribe("").await.map_err(|x| e("subscribe", x))?;
    let (a, b, c, d, f) = tokio::join!(
        shell.connect(&shell_ep),
        control.connect(&control_ep),
        iopub.connect(&iopub_ep),
        heartbeat.connect(&hb_ep),
        stdin.connect(&stdin_ep),
    );
    a.map_err(|x| e("shell", x))?;
    b.map_err(|x| e("control", x))?;
    c.map_err(|x| e("iopub", x))?;
    d.map_err(|x| e("heartbeat", x))?;
    f.map_err(|x| e("stdin", x))?;
    let (shell_tx, shell_rx) = shell.split();
    let (control_tx, control_rx) = control.split();
    let mut socks = Sockets {
        _relays: relays,
        shell: shell_tx,
        control: control_tx,
        heartbeat,
        replies: read_into(shell_rx, &session, &readers),
        iopub: read_into(iopub, &session, &readers),
        stdin: read_into(stdin, &session, &readers),
        _control: tokio::spawn(async move {
            let mut control = control_rx;
            while control.recv().await.is_ok() {}
        }),
    };
    // Asked again every half second until both answers for one request are in.
    loop {
        let (id, frames) = session.request("kernel_info_request", &json!({}));
        readers.want(Some(&id));
        send(&mut socks.shell, frames)
            .await
            .map_err(|e| e.to_string())?;
        let (mut reply, mut status) = (false, false);
        let wait = tokio::time::sleep(Duration::from_millis(500));
        tokio::pin!(wait);
        while !(reply && status) {
            tokio::select! {
                m = socks.replies.recv() => match m {
                    Some(m) => reply |= m.parent_id() == Some(id.as_str()) && m.msg_type() == "kernel_info_reply",
                    None => return Err("the shell socket closed".into()),
                },
                m = socks.iopub.recv() => match m {
                    Some(m) => status |= m.parent_id() == Some(id.as_str()) && m.msg_type() == "status",
                    None => return Err("the iopub socket closed".into()),
                },
                _ = &mut wait => break,
            }
        }
        if reply && status {
            return Ok(socks);
        }
    }
}

/// Our ZeroMQ sockets connect to a listener of ours per channel, in a private directory of the
/// host, which relays each connection to the kernel's socket (reached through a descriptor of
/// the file it bound) with what the kernel sends bounded by `zmtp::Bound`: the `zeromq` crate
/// would reserve any length a frame announces. Dropped with the kernel's sockets.
struct Relays {
    dir: tempfile::TempDir,
    accepting: Vec<tokio::task::AbortHandle>,
}

impl Relays {
    fn new() -> std::io::Result<Relays> {
        Ok(Relays {
            dir: tempfile::Builder::new().prefix("kern-jr-").tempdir()?,
            accepting: Vec::new(),
        })
    }

    /// Relays connections to the kernel's socket `target` of channel `c`; returns the endpoint.
    fn add(
        &mut self,
        c: Channel,
        target: std::os::fd::OwnedFd,
        readers: &Arc<Readers>,
    ) -> std::result::Result<String, String> {
        let path = kernelspec::socket_path(self.dir.path(), c);
        let listener = tokio::net::UnixListener::bind(&path)
            .map_err(|e| format!("relay {}: {e}", path.display()))?;
        let readers = readers.clone();
        let task = tokio::spawn(async move {
            let kernel = format!("/proc/self/fd/{}", target.as_raw_fd());
            while let Ok((ours, _)) = listener.accept().await {
                // A kernel socket that refuses now is tried again by ZeroMQ's reconnect.
                if let Ok(theirs) = tokio::net::UnixStream::connect(&kernel).await {
                    tokio::spawn(relay(ours, theirs, readers.clone()));
                }
            }
        });
        self.accepting.push(task.abort_handle());
        Ok(format!("ipc://{}", path.display()))
    }
}

impl Drop for Relays {
    fn drop(&mut self) {
        self.accepting
            .iter()
            .for_each(tokio::task::AbortHandle::abort);
    }
}

/// One relayed connection, until either side closes it.
async fn relay(
    ours: tokio::net::UnixStream,
    theirs: tokio::net::UnixStream,
    readers: Arc<Readers>,
) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut ours_rx, mut ours_tx) = ours.into_split();
    let (mut theirs_rx, mut theirs_tx) = theirs.into_split();
    let up = tokio::io::copy(&mut ours_rx, &mut theirs_tx);
    let down = async {
        let mut bound = crate::lang::jupyter::zmtp::Bound::new(wire::MAX_MESSAGE_BYTES);
        let mut buf = vec![0u8; 64 << 10];
        let mut out = Vec::new();
        loop {
            let n = match theirs_rx.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            let before = bound.dropped;
            // A command frame over the bound: not a kernel we can talk to; the connection goes.
            if bound.feed(&buf[..n], &mut out).is_err() {
                return;
            }
            readers.too_large.add(bound.dropped - before);
            if ours_tx.write_all(&out).await.is_err() {
                return;
            }
            out.clear();
            out.shrink_to(1 << 20);
        }
    };
    tokio::select! {
        _ = up => {}
        _ = down => {}
    }
}

/// A receiving socket read continuously by its own task into a bounded queue: messages that
/// verify and answer the wanted request go on, the others are counted (bad signatures, output
/// nobody asked for) or dropped (malformed).
fn read_into<S: SocketRecv + Send + 'static>(
    mut sock: S,
    session: &Session,
    readers: &Arc<Readers>,
) -> Queue {
    let (tx, rx) = tokio::sync::mpsc::channel(QUEUE_MESSAGES);
    let room = Arc::new(tokio::sync::Semaphore::new(QUEUE_BYTES));
    let signer = session.signer.clone();
    let readers = readers.clone();
    tokio::spawn(async move {
        let mut seen = std::collections::HashSet::new();
        loop {
            // Ends with the kernel (its receiver dropped), which drops the socket and stops
            // its reconnecting to a box that is gone.
            let m = tokio::select! {
                m = sock.recv() => m,
                _ = tx.closed() => return,
            };
            let Ok(m) = m else { return };
            let frames = m.into_vec();
            let bytes: usize = frames.iter().map(Bytes::len).sum();
            let msg = match wire::decode(&signer, &frames) {
                Ok(msg) => msg,
                Err(Dropped::BadSignature) => {
                    readers.bad_signatures.add(1);
                    continue;
                }
                Err(Dropped::TooLarge) => {
                    readers.too_large.add(1);
                    continue;
                }
                Err(Dropped::Malformed) => continue,
            };
            drop(frames);
            // A message seen before (same msg_id) is a replay, or ZeroMQ delivering it twice:
            // taken once.
            let id = msg
                .header
                .get("msg_id")
                .and_then(|v| v.as_str())
                .unwrap_or("");
            if !id.is_empty() && !seen.insert(id.to_string()) {
                continue;
            }
            if seen.len() > SEEN_IDS {
                seen.clear();
            }
            if !readers.wants(&msg) {
                readers.unasked(&msg, bytes);
                continue;
            }
            let share = bytes.clamp(1, QUEUE_BYTES) as u32;
            let Ok(permit) = room.clone().acquire_many_owned(share).await else {
                return;
            };
            if tx.send((msg, bytes, permit)).await.is_err() {
                return;
            }
        }
    });
    Queue(rx)
}

/// Sends `sig` to the box's workload (the kernel's process group): the children of the box's init,
/// which is a descendant of the box's monitor. Found by the parent pids in `/proc`.
fn signal_workload(monitor: u32, sig: nix::sys::signal::Signal) {
    let parents = parent_map();
    let children = |of: i32| -> Vec<i32> {
        parents
            .iter()
            .filter(|(_, pp)| *pp == of)
            .map(|(p, _)| *p)
            .collect()
    };
    // monitor -> (helpers) -> the box's init (pid 1 in its namespace) -> the kernel.
    let mut frontier = vec![monitor as i32];
    for _ in 0..4 {
        let mut next = Vec::new();
        for p in frontier {
            for c in children(p) {
                if ns_pid(c) == Some(1) {
                    for w in children(c) {
                        // The workload leads its own process group (init made it a session
                        // leader): signal the group, as jupyter_client does, so a wrapper
                        // script's kernel gets it too. A pid gone meanwhile gets ESRCH.
                        let pid = nix::unistd::Pid::from_raw(w);
                        if nix::sys::signal::killpg(pid, sig).is_err() {
                            let _ = nix::sys::signal::kill(pid, sig);
                        }
                    }
                    return;
                }
                next.push(c);
            }
        }
        frontier = next;
    }
}

/// pid -> parent pid of every process in /proc.
fn parent_map() -> Vec<(i32, i32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
            // The fields after the command name, which may itself hold spaces and parentheses.
            let rest = &stat[stat.rfind(')')? + 2..];
            let ppid = rest.split(' ').nth(1)?.parse().ok()?;
            Some((pid, ppid))
        })
        .collect()
}

/// A process's pid in its own (innermost) pid namespace.
fn ns_pid(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("NSpid:"))?;
    let ids: Vec<&str> = line.split_whitespace().skip(1).collect();
    // Only a process in a nested namespace can be a box's init.
    if ids.len() < 2 {
        return None;
    }
    ids.last()?.parse().ok()
}
