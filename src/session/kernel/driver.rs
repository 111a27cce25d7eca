//! The driver kernel: one long-lived box running the python driver in its loop. Cells go to it
//! as frames on the box's channel; its results come back on the same channel; its output comes
//! through kern's stdout/stderr, split per cell by a marker the driver writes after each cell.
//!
//! A cell that runs past its timeout, or is aborted, tears the box down (the spec's rule), or,
//! for a python kernel opened with `onTimeout: "interrupt"`, is interrupted (SIGINT to the box's
//! workload, again each second: one that lands before the driver enters the cell is dropped
//! there) and the kernel keeps its state if the cell stops within `INTERRUPT_GRACE`, as a
//! Jupyter kernel's does; one that does not stop tears the box down; so does `close()`.
//! Once the box is gone, for whatever reason, every later call says so (`lifecycle`). A
//! prewarmed `Prewarmed` is this kernel used for one cell.

use super::lifecycle::{
    cell_signal, cell_stop, end_fault, end_reading, Abort, CellClock, CellInput, CellOp, CellSinks,
    Ended, Kind, Lifecycle, Stop, INTERRUPT_GRACE,
};
use crate::engine::addon::capture::Keep;
use crate::engine::addon::launch::{Chunk, ChunkReceiver, ChunkSender, Stream};
use crate::engine::shared::status::{Fault, FaultKind};
use crate::error::{Error, Result};
use crate::lang::driver;
use crate::lang::Language;
use crate::session::longbox::Monitor;
use crate::session::result::{ExecResult, RESULTS_GRACE};
use crate::session::stderr::Stderr;
use serde_json::Value;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The driver kernel's live part.
pub(crate) struct Live {
    tx: tokio::net::unix::OwnedWriteHalf,
    /// The driver's frames, read only while a cell runs: between cells a box that writes
    /// frames fills the socket and waits, and the host holds nothing for it.
    rx: tokio::net::unix::OwnedReadHalf,
    reader: driver::FrameReader,
    chunks: ChunkReceiver,
    /// Resolves when the box has ended.
    ended: Ended,
    next_id: u64,
    /// Output that arrived after the previous cell's marker (a lingering subprocess's).
    carry: [Vec<u8>; 2],
    /// kern's notes from preparing the box, until the first cell takes them.
    prepared: Option<tokio::sync::oneshot::Receiver<Vec<String>>>,
    /// The driver's setup frame (the node driver's), sent before the first cell.
    setup: Option<Vec<u8>>,
    /// The host pid of the box's monitor, to interrupt a cell by.
    monitor: Monitor,
}

/// One stream of one cell: bytes up to the marker.
struct Split {
    pending: Vec<u8>,
    done: bool,
    rest: Vec<u8>,
}

impl Split {
    fn new(carry: Vec<u8>) -> Split {
        Split {
            pending: carry,
            done: false,
            rest: Vec::new(),
        }
    }

    /// Takes bytes; returns what may be shown now (never a piece of the marker).
    fn feed(&mut self, data: &[u8], marker: &[u8]) -> Vec<u8> {
        if self.done {
            self.rest.extend_from_slice(data);
            return Vec::new();
        }
        self.pending.extend_from_slice(data);
        match find(&self.pending, marker) {
            Some(at) => {
                self.done = true;
                self.rest = self.pending.split_off(at + marker.len());
                self.pending.truncate(at);
                std::mem::take(&mut self.pending)
            }
            None => {
                // Only a tail that could be the marker's start waits for more bytes: the rest
                // streams now (holding back a marker's length of everything held a short
                // `print` until the cell ended).
                let keep = partial_marker_len(&self.pending, marker);
                let cut = self.pending.len() - keep;
                let tail = self.pending.split_off(cut);
                std::mem::replace(&mut self.pending, tail)
            }
        }
    }
}

/// The length of the longest end of `hay` that is a beginning of `marker` (shorter than it).
fn partial_marker_len(hay: &[u8], marker: &[u8]) -> usize {
    (1..marker.len().min(hay.len() + 1))
        .rev()
        .find(|&n| hay.ends_with(&marker[..n]))
        .unwrap_or(0)
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

/// The driver kernel (python's driver, or node's: they speak the same frames): cells go to the
/// driver as frames, output is split per cell at the marker the driver writes after each cell.
pub(crate) struct Driver {
    /// A prewarmed box's one cell: named like a one-shot cell in tracebacks.
    pub(crate) single: bool,
    /// The cells' language: python, node or typescript.
    pub(crate) lang: Language,
    /// `onTimeout: "interrupt"` (python only): a stopped cell is interrupted, not its box ended.
    pub(crate) interrupt: bool,
}

impl Live {
    /// The live part of a driver box just started: `sock` to its driver, its output on `chunks`.
    pub(crate) fn new(
        sock: tokio::net::UnixStream,
        chunks: ChunkReceiver,
        ended: Ended,
        prepared: tokio::sync::oneshot::Receiver<Vec<String>>,
        setup: Option<Vec<u8>>,
        monitor: Monitor,
    ) -> Live {
        let (rx, tx) = sock.into_split();
        Live {
            tx,
            rx,
            reader: driver::FrameReader::default(),
            chunks,
            ended,
            next_id: 1,
            carry: [Vec::new(), Vec::new()],
            prepared: Some(prepared),
            setup,
            monitor,
        }
    }
}

impl Kind for Driver {
    type Live = Live;
    const STOP_BEFORE_CLOSE: bool = true;

    fn ended(live: &mut Live) -> &mut Ended {
        &mut live.ended
    }

    fn chunks(live: &mut Live) -> &mut ChunkReceiver {
        &mut live.chunks
    }

    fn check_cell(&self, cell: &CellInput<'_>) -> Result<()> {
        self.lang.check_cell(cell.code)
    }

    fn torn_down(&self, why: &str) -> Error {
        Error::Closed(format!(
            "this kernel was torn down ({why}); open a new one with sandbox.kernel()"
        ))
    }

    async fn box_end(&self, _: &Lifecycle<Driver>, live: &mut Live) -> Fault {
        let ended = end_reading(&mut live.ended, &mut live.chunks, drop).await;
        end_fault(ended, self.lang.process_name(), "")
    }

    async fn unwell(&self, _: &Lifecycle<Driver>, _: &mut Live) -> Option<String> {
        None
    }

    async fn goodbye(&self, _: &mut Live) {}

    async fn run_cell(
        &self,
        k: &Lifecycle<Driver>,
        live: &mut Live,
        input: &CellInput<'_>,
        timeout: Duration,
        sinks: CellSinks,
        abort: &mut Abort,
    ) -> (ExecResult, Option<String>) {
        let CellSinks {
            output: sink,
            results: live_results,
            saved,
        } = sinks;
        let start = Instant::now();
        // A state operation is not a cell: id 0 (cells count from 1), and the count goes on.
        let id = match input.op {
            CellOp::Run => {
                live.next_id += 1;
                live.next_id - 1
            }
            CellOp::Save | CellOp::Load(_) => 0,
        };
        let marker = random_marker();
        let mut cell = live.setup.take().unwrap_or_default();
        let mut blob: &[u8] = &[];
        match input.op {
            CellOp::Run => cell.extend(driver::cell_frame(
                id,
                input.code,
                false,
                Some(&marker),
                self.single,
                input.env,
            )),
            CellOp::Save => {
                cell.extend(crate::lang::state::save_frame(id, &marker));
                live.reader.arm_raw(crate::lang::state::MAX_STATE);
            }
            CellOp::Load(state) => {
                cell.extend(state.load_head(id, &marker));
                blob = &state.data;
            }
        }
        let mut state_head: Option<serde_json::Map<String, Value>> = None;
        let marker = marker.as_bytes();
        let [c0, c1] = std::mem::take(&mut live.carry);
        let mut out = Split::new(c0);
        let mut err = Split::new(c1);
        // A state operation's output opens the next cell's: it never spills.
        let (mut out_kept, mut err_kept) = match input.op {
            CellOp::Run => k.keep.captures(),
            CellOp::Save | CellOp::Load(_) => Keep::new(k.keep.cap, None).captures(),
        };
        let mut results = driver::Results::default();
        results.live(live_results);
        let mut done: Option<Value> = None;
        let mut buf = vec![0u8; 256 * 1024];
        live.reader.skipped = 0;
        let mut ended: Option<Fault> = None;
        let mut clock = CellClock::start(timeout, &k.paused);
        // Under the cell's deadline too: a frame larger than the socket's buffer waits for the
        // driver to read it, and a driver kept busy (a node kernel's timer spinning since an
        // earlier cell) never does.
        let tx = &mut live.tx;
        let write = async {
            tx.write_all(&cell).await?;
            for piece in blob.chunks(driver::RAW_PIECE) {
                tx.write_all(&driver::raw_header(piece.len())).await?;
                tx.write_all(piece).await?;
            }
            std::io::Result::Ok(())
        };
        let wrote = tokio::select! {
            r = write => Ok(r.is_ok()),
            stop = cell_stop(&mut clock, abort) => Err(stop),
        };
        match wrote {
            Ok(true) => {}
            // The driver's end is closed: its box has ended, or is ending, and says why (a
            // `cwd` it could not enter; a node driver's setup frame is too large to sit in the
            // socket's buffer of a box that never started).
            Ok(false) => ended = Some(self.box_end(k, live).await),
            Err(stop) => ended = Some(k.end_stopped(live, stop, timeout, false).await),
        }
        // Waits for a slow consumer (`ChunkSender`): the box's output waits with it.
        let show = |s: &Option<ChunkSender>, stream, data: Vec<u8>| {
            let s = s.clone().filter(|_| !data.is_empty());
            async move {
                if let Some(s) = s {
                    let _ = s.send(Chunk { stream, data }).await;
                }
            }
        };
        // Once stopping (why, and from when), the cell is interrupted each second until it ends,
        // and its box ended if it has not INTERRUPT_GRACE after the first.
        let mut stopping: Option<(Stop, tokio::time::Instant)> = None;
        let mut next_interrupt = tokio::time::Instant::now();
        while ended.is_none() && !(done.is_some() && out.done && err.done) {
            tokio::select! {
                r = live.rx.read(&mut buf) => match r {
                    Ok(n) if n > 0 => {
                        for f in live.reader.feed(&buf[..n], || results.room()) {
                            if f.get("type").and_then(Value::as_str) == Some("done")
                                && f.get("id").and_then(Value::as_u64) == Some(id)
                            {
                                done = Some(f);
                            } else if matches!(input.op, CellOp::Save)
                                && f.get("type").and_then(Value::as_str) == Some("state")
                            {
                                state_head = f.as_object().cloned();
                            } else {
                                results.frame(&f);
                            }
                        }
                    }
                    _ => {
                        ended = Some(self.box_end(k, live).await);
                    }
                },
                c = live.chunks.recv() => match c {
                    Some(Chunk { stream: Stream::Stdout, data }) => {
                        let s = out.feed(&data, marker);
                        out_kept.push(&s).await;
                        show(&sink, Stream::Stdout, s).await;
                    }
                    Some(Chunk { stream: Stream::Stderr, data }) => {
                        let s = err.feed(&data, marker);
                        err_kept.push(&s).await;
                        show(&sink, Stream::Stderr, s).await;
                    }
                    None => {
                        ended = Some(self.box_end(k, live).await);
                    }
                },
                // Timed out or aborted: a python cell is interrupted; any other ends with its box.
                stop = cell_stop(&mut clock, abort), if stopping.is_none() => {
                    // Aborted while paused: a frozen cell can't stop, so it runs again first.
                    k.resume_for_stop().await;
                    if self.interruptible(live) {
                        let now = tokio::time::Instant::now();
                        stopping = Some((stop, now));
                        super::signal::interrupt(live.monitor.get()).await;
                        next_interrupt = now + INTERRUPT_REPEAT;
                    } else {
                        ended = Some(k.end_stopped(live, stop, timeout, false).await);
                    }
                }
                () = tokio::time::sleep_until(next_interrupt), if stopping.is_some() => {
                    let Some((stop, from)) = stopping else { continue };
                    if tokio::time::Instant::now() >= from + INTERRUPT_GRACE {
                        ended = Some(k.end_stopped(live, stop, timeout, true).await);
                    } else {
                        super::signal::interrupt(live.monitor.get()).await;
                        next_interrupt = (next_interrupt + INTERRUPT_REPEAT).min(from + INTERRUPT_GRACE);
                    }
                }
            }
        }
        // What is still pending when the box died is output too.
        for (split, kept, stream) in [
            (&mut out, &mut out_kept, Stream::Stdout),
            (&mut err, &mut err_kept, Stream::Stderr),
        ] {
            if !split.done {
                let rest = std::mem::take(&mut split.pending);
                kept.push(&rest).await;
                show(&sink, stream, rest).await;
            }
        }
        let (out_kept, err_kept) = (out_kept.finish(), err_kept.finish());
        live.carry = [std::mem::take(&mut out.rest), std::mem::take(&mut err.rest)];
        if !matches!(input.op, CellOp::Run) && ended.is_none() {
            // What a state operation wrote (kern's notes on a new box, a directory the loaded
            // state names that is not here, an object's own prints) opens the next cell's output.
            for (carry, kept) in live.carry.iter_mut().zip([&out_kept, &err_kept]) {
                let mut before = kept.kept.clone();
                before.append(carry);
                *carry = before;
            }
        }
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
        if let (CellOp::Load(state), None) = (input.op, &ended) {
            // A loaded kernel's cells go on from the count of the kernel it came from, so their
            // names (`<cell-N>`, in tracebacks) are not those of the cells it carries.
            let cells = state.head.get("cells").and_then(Value::as_u64).unwrap_or(0);
            live.next_id = live.next_id.max(cells.saturating_add(1));
        }
        if matches!(input.op, CellOp::Save) {
            let data = live.reader.take_raw();
            let ok = ended.is_none()
                && done
                    .as_ref()
                    .and_then(|f| f.get("status"))
                    .and_then(Value::as_str)
                    == Some("ok");
            if let (true, Some(head), Some(saved)) = (ok, state_head, saved) {
                if let Some(state) = crate::lang::state::KernelState::of(head, data) {
                    let _ = saved.send(state);
                }
            }
        }
        results.lost(live.reader.skipped);
        // An interrupted cell's KeyboardInterrupt is its fault, not an error.
        let error = results
            .take_error()
            .filter(|_| ended.is_none() && stopping.is_none());
        let kept = match (stopping, &ended) {
            (Some((stop, _)), None) => Some(Fault::new(
                stop.fault_kind(),
                format!(
                    "{}; kern interrupted it and the kernel kept its state",
                    stop.what(timeout)
                ),
            )),
            _ => None,
        };
        let (results, notes) = results.finish();
        let mut stderr = Stderr::of_code(crate::lang::output_text(err_kept.kept));
        for n in &notes {
            stderr.push_note(n);
        }
        // The first cell's output opens with what kern wrote while preparing the box; kern sent
        // those lines before the box existed, so they are here by now (the bound is only for a
        // kern that never sends them: it must not hold the cell).
        // (A state operation leaves them to the first cell, whose they are.)
        let prepared = match input.op {
            CellOp::Run => live.prepared.take(),
            CellOp::Save | CellOp::Load(_) => None,
        };
        if let Some(prepared) = prepared {
            if let Ok(Ok(notes)) = tokio::time::timeout(RESULTS_GRACE, prepared).await {
                stderr.open_with(&notes);
            }
        }
        let dead = ended.as_ref().map(|f| f.message.clone());
        let spills = tokio::join!(out_kept.spill.wait(), err_kept.spill.wait());
        let mut result = ExecResult {
            stdout: crate::lang::output_text(out_kept.kept),
            stderr,
            exit_code,
            duration_ms: start.elapsed().as_secs_f64() * 1000.0,
            signal: cell_signal(exit_code, ended.as_ref().or(kept.as_ref())),
            fault: ended.or(kept),
            files: Vec::new(),
            stdout_truncated: out_kept.truncated,
            stderr_truncated: err_kept.truncated,
            stdout_spill: None,
            stderr_spill: None,
            results,
            error,
            // A prewarmed box's one cell is a one-shot call's.
            execution_count: (!self.single).then(|| u32::try_from(id).unwrap_or(u32::MAX)),
        };
        result.take_spills(spills);
        (result, dead)
    }
}

impl Lifecycle<Driver> {
    /// A node or typescript kernel's greeting, before kernel() resolves: the driver gets its
    /// setup frame now and answers with its Node's version, so a Node that cannot run the
    /// kernel's cells (too old to strip types, or none at all) is refused here, with what to do,
    /// rather than at the first cell. On a refusal the box is ended and waited for. A python
    /// kernel has no greeting.
    pub(crate) async fn greet(&self) -> Result<()> {
        let lang = self.kind.lang;
        if !matches!(lang, Language::Node | Language::TypeScript) {
            return Ok(());
        }
        // Node's start, not a cell: a short per-cell timeout must not refuse a slow start.
        let wait = Duration::from_millis(self.timeout_ms).max(GREET_WITHIN);
        let said = match self.live().await {
            Some(mut live) => live.greet(lang, wait).await,
            None => Err(Error::Closed(
                "the kernel's box ended before it started".into(),
            )),
        };
        if said.is_err() {
            let _ = self.close().await;
        }
        said
    }
}

impl Live {
    /// Sends the greeting setup frame and reads the driver's `ready` answer, within `wait`.
    async fn greet(&mut self, lang: Language, wait: Duration) -> Result<()> {
        let typescript = lang == Language::TypeScript;
        // Sent now, so not again before the first cell.
        self.setup = None;
        let hello = crate::lang::sources::node_greeting_frame(typescript);
        let read = async {
            if self.tx.write_all(&hello).await.is_err() {
                return None;
            }
            let mut buf = vec![0u8; 16 * 1024];
            loop {
                match self.rx.read(&mut buf).await {
                    Ok(n) if n > 0 => {
                        let frames = self.reader.feed(&buf[..n], || 1 << 20);
                        if let Some(f) = frames
                            .into_iter()
                            .find(|f| f.get("type").and_then(Value::as_str) == Some("ready"))
                        {
                            return Some(f);
                        }
                    }
                    _ => return None,
                }
            }
        };
        let ready = match tokio::time::timeout(wait, read).await {
            Ok(Some(f)) => f,
            // The driver's end closed: the box ended, and says why (no node on its PATH, a
            // `cwd` it could not enter).
            Ok(None) => {
                let fault = end_fault((&mut self.ended).await, "node process", "");
                return Err(not_started(lang, &fault, &self.stderr_tail()));
            }
            Err(_) => {
                return Err(Error::Runtime(format!(
                    "kernel({{ language: \"{}\" }}): the box's node did not start within {:.0}s; the box was ended",
                    lang_name(lang),
                    wait.as_secs_f64()
                )))
            }
        };
        let version = ready
            .get("node")
            .and_then(Value::as_str)
            .unwrap_or("(unknown)");
        let strips = ready.get("strips").and_then(Value::as_bool) == Some(true);
        if typescript && !strips {
            return Err(Error::Invalid(format!(
                "kernel({{ language: \"typescript\" }}) needs Node.js >= 22.13 (or >= 23.2) in the box, whose `module.stripTypeScriptTypes` strips the cells' types; this box's node is {version}. {}, or use language \"node\"",
                bring_node(lang)
            )));
        }
        Ok(())
    }
}

impl Live {
    /// The last lines the box wrote on stderr so far (a Node that died at its start says why
    /// there), for an error.
    fn stderr_tail(&mut self) -> String {
        let mut err = Vec::new();
        while let Ok(c) = self.chunks.try_recv() {
            if c.stream == Stream::Stderr {
                err.extend_from_slice(&c.data);
            }
        }
        let text = String::from_utf8_lossy(&err);
        let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = lines[lines.len().saturating_sub(3)..].join(" / ");
        tail.chars().take(600).collect()
    }
}

/// How long a node kernel's driver may take to answer its greeting, unless the kernel's
/// per-cell timeout is longer.
const GREET_WITHIN: Duration = Duration::from_secs(60);

/// How to bring a Node fit for `lang` into a box, for the refusals that need one.
fn bring_node(lang: Language) -> String {
    let which = match lang {
        Language::TypeScript => "whose node is >= 22.13",
        _ => "with node",
    };
    format!("Bring a Node.js into the box: an `image` {which}, or a Node build on the host bound in with `mounts` (e.g. mounts: {{ \"/opt/node-v24/bin\": \"/opt/node/bin\" }}) and put first on the box's PATH with `env` (env: {{ PATH: \"/opt/node/bin:/usr/local/bin:/usr/bin:/bin\" }})")
}

fn lang_name(lang: Language) -> &'static str {
    match lang {
        Language::TypeScript => "typescript",
        _ => "node",
    }
}

/// The error of a node kernel whose box ended before its driver answered.
fn not_started(lang: Language, fault: &Fault, stderr: &str) -> Error {
    let said = if stderr.is_empty() {
        String::new()
    } else {
        format!(" (its stderr: {stderr})")
    };
    let head = format!(
        "kernel({{ language: \"{}\" }}) could not start: {}{said}",
        lang_name(lang),
        fault.message
    );
    match fault.kind {
        FaultKind::ExecFailed => Error::Invalid(format!(
            "{head}. The box has no `node` to run the kernel's cells. {}",
            bring_node(lang)
        )),
        // A `cwd` that does not exist, and the like: the caller's options.
        FaultKind::StartupFailed => Error::Invalid(head),
        _ => Error::Runtime(head),
    }
}

/// How often an interrupted cell that has not ended is interrupted again.
const INTERRUPT_REPEAT: Duration = Duration::from_secs(1);

impl Driver {
    /// Whether a stopped cell is interrupted rather than ended with its box: asked for, and
    /// python's (its driver turns SIGINT into KeyboardInterrupt in the cell; `KernelPlan`
    /// refuses it for Node, which can't stop a running script without ending).
    fn interruptible(&self, live: &Live) -> bool {
        self.interrupt && self.lang == Language::Python && live.monitor.get().is_some()
    }
}

/// A prewarmed box: a driver box that has run nothing, used as a kernel for exactly one cell
/// and then ended. The call returns as soon as the cell is done (its output split at the
/// cell's marker), so neither the interpreter's shutdown nor the box's teardown is the caller's
/// wait.
pub(crate) struct Prewarmed(Lifecycle<Driver>);

impl Prewarmed {
    pub(crate) fn new(k: Lifecycle<Driver>) -> Prewarmed {
        Prewarmed(k)
    }

    pub(crate) fn is_alive(&self) -> bool {
        self.0.is_alive()
    }

    /// Runs `code` as its one cell, then ends the box and waits for it: the cell's result
    /// and kern's outcome of the box (`isolation()`).
    pub(crate) async fn run_measured(
        self,
        code: &str,
        timeout_ms: u64,
    ) -> (
        Result<ExecResult>,
        Option<crate::engine::addon::launch::Outcome>,
    ) {
        let r = self
            .0
            .run_code(CellInput::code(code), Some(timeout_ms), None, None, None)
            .await;
        (r, self.0.close_outcome().await)
    }

    /// Runs `code` as this box's one cell, within `timeout_ms`, then ends the box.
    pub(crate) async fn run(
        self,
        code: &str,
        timeout_ms: u64,
        live: Option<driver::ResultSink>,
    ) -> Result<ExecResult> {
        let r = self
            .0
            .run_code(CellInput::code(code), Some(timeout_ms), None, live, None)
            .await;
        let k = self.0;
        tokio::spawn(async move {
            let _ = k.close().await;
        });
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_streams_at_once_unless_it_may_be_the_markers_start() {
        let marker = b"\x1eEND\x1e".to_vec();
        let mut s = Split::new(Vec::new());
        assert_eq!(s.feed(b"up\n", &marker), b"up\n");
        assert_eq!(s.feed(b"x\x1eE", &marker), b"x");
        assert_eq!(s.feed(b"Q", &marker), b"\x1eEQ");
        assert_eq!(partial_marker_len(b"ab\x1eEN", &marker), 3);
        assert_eq!(partial_marker_len(b"", &marker), 0);
    }

    #[test]
    fn output_splits_at_the_marker_across_chunks() {
        let marker = b"\x1eEND\x1e".to_vec();
        let mut s = Split::new(b"left ".to_vec());
        let mut shown = Vec::new();
        for piece in [&b"hello \x1eE"[..], b"N", b"D\x1e after"] {
            shown.extend(s.feed(piece, &marker));
        }
        assert!(s.done);
        assert_eq!(shown, b"left hello ");
        assert_eq!(s.rest, b" after");
    }
}
