//! The warm kernel: one long-lived box running the python driver in its loop. Cells go to it
//! as frames on the box's channel; its results come back on the same channel; its output comes
//! through kern's stdout/stderr, split per cell by a marker the driver writes after each cell.
//!
//! A cell that runs past its timeout tears the box down; so does `close()`. Once the box is
//! gone, for whatever reason, every later call says so.

use crate::engine::launch::{Chunk, Outcome, Stream};
use crate::engine::status::{Fault, FaultKind};
use crate::error::{Error, Result};
use crate::lang::driver;
use crate::session::{ExecResult, Opened};
use serde_json::Value;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};
use tokio::sync::{watch, Mutex};

pub struct Kernel {
    state: Mutex<State>,
    /// The session's closing signal: a closed session's kernel is gone with it.
    session_closing: watch::Receiver<bool>,
    /// Turning true ends the box (kern's lifeline closes).
    stop: watch::Sender<bool>,
    timeout_ms: u64,
    max_output: usize,
    /// A prewarmed box's one cell: named like a one-shot cell in tracebacks.
    single: bool,
    /// A caller's kernel (not a pool slot) counts as a box writing to the workspace until it
    /// is closed, so snapshot() refuses meanwhile.
    active: std::sync::Mutex<Option<crate::session::Active>>,
    /// `workspaceMaxBytes`: the workspace and the cap, checked before each cell.
    quota: Option<(std::path::PathBuf, u64)>,
}

enum State {
    Live(Box<Live>),
    /// Why the kernel is gone.
    Dead(String),
}

struct Live {
    tx: tokio::net::unix::OwnedWriteHalf,
    /// The driver's frames, read only while a cell runs: between cells a box that writes
    /// frames fills the socket and waits, and the host holds nothing for it.
    rx: tokio::net::unix::OwnedReadHalf,
    reader: driver::FrameReader,
    chunks: UnboundedReceiver<Chunk>,
    /// Resolves when the box has ended.
    ended: tokio::task::JoinHandle<Result<Option<Outcome>>>,
    next_id: u64,
    /// Output that arrived after the previous cell's marker (a lingering subprocess's).
    carry: [Vec<u8>; 2],
    /// kern's notes from preparing the box, until the first cell takes them.
    prepared: Option<tokio::sync::oneshot::Receiver<Vec<String>>>,
}

/// One stream of one cell: bytes up to the marker.
struct Split {
    pending: Vec<u8>,
    kept: Vec<u8>,
    truncated: bool,
    done: bool,
    rest: Vec<u8>,
}

impl Split {
    fn new(carry: Vec<u8>) -> Split {
        Split {
            pending: carry,
            kept: Vec::new(),
            truncated: false,
            done: false,
            rest: Vec::new(),
        }
    }

    /// Takes bytes; returns what may be shown now (never a piece of the marker).
    fn feed(&mut self, data: &[u8], marker: &[u8], cap: usize) -> Vec<u8> {
        if self.done {
            self.rest.extend_from_slice(data);
            return Vec::new();
        }
        self.pending.extend_from_slice(data);
        let show = match find(&self.pending, marker) {
            Some(at) => {
                self.done = true;
                self.rest = self.pending.split_off(at + marker.len());
                self.pending.truncate(at);
                std::mem::take(&mut self.pending)
            }
            None => {
                let keep = self.pending.len().min(marker.len() - 1);
                let cut = self.pending.len() - keep;
                let tail = self.pending.split_off(cut);
                std::mem::replace(&mut self.pending, tail)
            }
        };
        let room = cap.saturating_sub(self.kept.len());
        if show.len() > room {
            self.truncated = true;
        }
        self.kept.extend_from_slice(&show[..show.len().min(room)]);
        show
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn random_marker() -> String {
    let mut bytes = [0u8; 16];
    let _ = std::fs::File::open("/dev/urandom").and_then(|mut f| {
        use std::io::Read;
        f.read_exact(&mut bytes)
    });
    format!("\u{1e}kern-cell-end-{}\u{1e}", hex::encode(bytes))
}

impl Kernel {
    /// Starts the kernel's box. It runs as long as the kernel is open and the session too.
    pub(crate) fn start(
        opened: Arc<Opened>,
        kern_path: &std::path::Path,
        timeout_ms: u64,
    ) -> Result<Kernel> {
        let session_closing = opened.closing.subscribe();
        let (sink, chunks) = tokio::sync::mpsc::unbounded_channel();
        let started = crate::session::longbox::start(opened, kern_path, sink)?;
        let (rx, tx) = started.sock.into_split();
        let (stop, ended, prepared) = (started.stop, started.ended, started.prepared);
        Ok(Kernel {
            session_closing,
            state: Mutex::new(State::Live(Box::new(Live {
                tx,
                rx,
                reader: driver::FrameReader::default(),
                chunks,
                ended,
                next_id: 1,
                carry: [Vec::new(), Vec::new()],
                prepared: Some(prepared),
            }))),
            stop,
            timeout_ms,
            max_output: 64 << 20,
            single: false,
            active: std::sync::Mutex::new(None),
            quota: None,
        })
    }

    /// Makes this a caller's kernel: counted as active, and held to the workspace cap.
    pub(crate) fn attach(
        &mut self,
        active: crate::session::Active,
        quota: Option<(std::path::PathBuf, u64)>,
    ) {
        self.active = std::sync::Mutex::new(Some(active));
        self.quota = quota;
    }

    pub(crate) fn set_max_output(&mut self, n: usize) {
        self.max_output = n;
    }

    pub(crate) fn set_single(&mut self) {
        self.single = true;
    }

    /// Whether the box still runs (for a pool deciding whether a slot is usable).
    pub(crate) fn is_alive(&self) -> bool {
        match self.state.try_lock() {
            Ok(s) => matches!(&*s, State::Live(l) if !l.ended.is_finished()),
            // A cell is running in it: alive, but not idle.
            Err(_) => false,
        }
    }

    /// Runs one cell. Cells wait for each other, in order.
    pub async fn run_code(
        &self,
        code: &str,
        timeout_ms: Option<u64>,
        sink: Option<UnboundedSender<Chunk>>,
    ) -> Result<ExecResult> {
        crate::lang::check_cell(code)?;
        let mut state = self.state.lock().await;
        let live = match &mut *state {
            State::Dead(why) => {
                return Err(Error::Invalid(format!(
                    "this kernel was torn down ({why}); open a new one with sandbox.kernel()"
                )))
            }
            State::Live(l) => l,
        };
        // A box that ended between cells (the session closed, an outside kill): nothing runs,
        // and the caller hears why.
        if *self.session_closing.borrow() || live.ended.is_finished() {
            let why = if *self.session_closing.borrow() {
                "its Sandbox was closed".to_string()
            } else {
                self.box_end(live).await.message
            };
            *state = State::Dead(why.clone());
            return Err(Error::Invalid(format!(
                "this kernel was torn down ({why}); open a new one with sandbox.kernel()"
            )));
        }
        if let Some(refused) = over_quota(&self.quota).await {
            return Ok(refused);
        }
        let start = Instant::now();
        let timeout = Duration::from_millis(timeout_ms.unwrap_or(self.timeout_ms));
        let id = live.next_id;
        live.next_id += 1;
        let marker = random_marker();
        let cell = driver::cell_frame(id, code, false, Some(&marker), self.single);
        let marker = marker.as_bytes();
        let [c0, c1] = std::mem::take(&mut live.carry);
        let mut out = Split::new(c0);
        let mut err = Split::new(c1);
        let mut results = driver::Results::default();
        let mut done: Option<Value> = None;
        let mut buf = vec![0u8; 256 * 1024];
        live.reader.skipped = 0;
        let mut ended: Option<Fault> = None;
        let deadline = tokio::time::Instant::now() + timeout;
        if live.tx.write_all(&cell).await.is_err() {
            ended = Some(Fault::new(
                FaultKind::Killed,
                "the kernel's python process is gone; the kernel was torn down",
            ));
        }
        let show = |s: &Option<UnboundedSender<Chunk>>, stream, data: Vec<u8>| {
            if let (Some(s), false) = (s, data.is_empty()) {
                let _ = s.send(Chunk { stream, data });
            }
        };
        while ended.is_none() && !(done.is_some() && out.done && err.done) {
            tokio::select! {
                r = live.rx.read(&mut buf) => match r {
                    Ok(n) if n > 0 => {
                        for f in live.reader.feed(&buf[..n], || results.room()) {
                            if f.get("type").and_then(Value::as_str) == Some("done")
                                && f.get("id").and_then(Value::as_u64) == Some(id)
                            {
                                done = Some(f);
                            } else {
                                results.frame(&f);
                            }
                        }
                    }
                    _ => {
                        ended = Some(self.box_end(live).await);
                    }
                },
                c = live.chunks.recv() => match c {
                    Some(Chunk { stream: Stream::Stdout, data }) => {
                        let s = out.feed(&data, marker, self.max_output);
                        show(&sink, Stream::Stdout, s);
                    }
                    Some(Chunk { stream: Stream::Stderr, data }) => {
                        let s = err.feed(&data, marker, self.max_output);
                        show(&sink, Stream::Stderr, s);
                    }
                    None => {
                        ended = Some(self.box_end(live).await);
                    }
                },
                _ = tokio::time::sleep_until(deadline) => {
                    self.stop.send_replace(true);
                    let _ = self.box_end(live).await;
                    ended = Some(Fault::new(
                        FaultKind::Timeout,
                        format!(
                            "the cell ran past its timeout of {:.3}s; kern killed the kernel's box and every process in it",
                            timeout.as_secs_f64()
                        ),
                    ));
                }
            }
        }
        // What is still pending when the box died is output too.
        for (split, stream) in [(&mut out, Stream::Stdout), (&mut err, Stream::Stderr)] {
            if !split.done {
                let rest = std::mem::take(&mut split.pending);
                split.kept.extend_from_slice(&rest);
                show(&sink, stream, rest);
            }
        }
        live.carry = [std::mem::take(&mut out.rest), std::mem::take(&mut err.rest)];
        let exit_code = match &ended {
            // The box was killed, by the cell's deadline or otherwise.
            Some(_) => 137,
            None => done
                .as_ref()
                .map(|f| {
                    match (
                        f.get("status").and_then(Value::as_str),
                        f.get("exit").and_then(Value::as_i64),
                    ) {
                        (_, Some(code)) => code as i32,
                        (Some("ok"), None) => 0,
                        _ => 1,
                    }
                })
                .unwrap_or(1),
        };
        results.lost(live.reader.skipped);
        let (results, notes) = results.finish();
        let mut stderr = crate::session::Stderr::of_code(crate::lang::output_text(std::mem::take(
            &mut err.kept,
        )));
        for n in &notes {
            stderr.push_note(n);
        }
        // The first cell's output opens with what kern wrote while preparing the box; kern sent
        // those lines before the box existed, so they are here by now (the bound is only for a
        // kern that never sends them: it must not hold the cell).
        if let Some(prepared) = live.prepared.take() {
            if let Ok(Ok(notes)) =
                tokio::time::timeout(crate::session::RESULTS_GRACE, prepared).await
            {
                stderr.open_with(&notes);
            }
        }
        let fault = ended.clone();
        if let Some(f) = ended {
            *state = State::Dead(f.message.clone());
        }
        Ok(ExecResult {
            stdout: crate::lang::output_text(out.kept),
            stderr,
            exit_code,
            duration_ms: start.elapsed().as_secs_f64() * 1000.0,
            fault,
            files: Vec::new(),
            truncated: out.truncated || err.truncated,
            results,
        })
    }

    /// Waits for the box to end and says why it did.
    async fn box_end(&self, live: &mut Live) -> Fault {
        end_fault((&mut live.ended).await, "python process", "")
    }

    /// Ends the box and waits for it. Idempotent.
    pub async fn close(&self) -> Result<()> {
        self.stop.send_replace(true);
        let mut state = self.state.lock().await;
        if let State::Live(live) = &mut *state {
            let _ = (&mut live.ended).await;
        }
        *state = State::Dead("it was closed".into());
        if let Ok(mut a) = self.active.lock() {
            a.take();
        }
        Ok(())
    }
}

/// A cell's refusal when the workspace is over `workspaceMaxBytes` (checked before each cell).
pub(crate) async fn over_quota(quota: &Option<(std::path::PathBuf, u64)>) -> Option<ExecResult> {
    let (ws, cap) = quota.clone()?;
    let snap =
        tokio::task::spawn_blocking(move || crate::workspace::track::snapshot(&ws, Some(cap)))
            .await
            .unwrap_or_else(|e| crate::workspace::track::Snapshot::unmeasured(e.to_string()));
    crate::session::over_quota(&snap, cap).map(ExecResult::refused)
}

/// Why a kernel's box ended, from its outcome: the box's own fault, or the kernel's `process`
/// exiting (`tail`: what it last wrote, if worth saying).
pub(crate) fn end_fault(
    outcome: std::result::Result<Result<Option<Outcome>>, tokio::task::JoinError>,
    process: &str,
    tail: &str,
) -> Fault {
    match outcome {
        Ok(Ok(Some(o))) => o.report.fault.unwrap_or_else(|| {
            Fault::new(
                FaultKind::Killed,
                format!(
                    "the kernel's {process} exited (code {}); the kernel was torn down{tail}",
                    o.report.exit_code
                ),
            )
        }),
        _ => Fault::new(
            FaultKind::Killed,
            "the kernel's box ended unexpectedly; the kernel was torn down",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_splits_at_the_marker_across_chunks() {
        let marker = b"\x1eEND\x1e".to_vec();
        let mut s = Split::new(b"left ".to_vec());
        let mut shown = Vec::new();
        for piece in [&b"hello \x1eE"[..], b"N", b"D\x1e after"] {
            shown.extend(s.feed(piece, &marker, 1 << 20));
        }
        assert!(s.done);
        assert_eq!(shown, b"left hello ");
        assert_eq!(s.kept, b"left hello ");
        assert_eq!(s.rest, b" after");
        let mut capped = Split::new(Vec::new());
        capped.feed(b"0123456789\x1eEND\x1e", &marker, 4);
        assert_eq!(
            (capped.kept.as_slice(), capped.truncated),
            (&b"0123"[..], true)
        );
    }
}
