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
//! Against the driver kernel (`kernel::driver`): a cell timeout, or an abort, first interrupts
//! the kernel (SIGINT to its process group, or `interrupt_request` when its kernelspec asks for
//! messages) and keeps it, state and all, if the cell stops within `INTERRUPT_GRACE`; only a
//! kernel that does not stop is torn down.

mod sockets;
pub(crate) mod start;

use super::lifecycle::{
    cell_signal, end_fault, end_reading, Abort, CellClock, CellInput, CellOp, CellSinks, Ended,
    Kind, Lifecycle, Stop, INTERRUPT_GRACE,
};
use crate::engine::addon::capture::Capture;
use crate::engine::addon::launch::{Chunk, ChunkReceiver, ChunkSender, Stream};
use crate::engine::shared::status::{Fault, FaultKind};
use crate::error::{Error, Result};
use crate::lang::jupyter::cell::{Cell, Shown};
use crate::lang::jupyter::kernelspec::{Interrupt, KernelSpec};
use crate::lang::jupyter::wire::Session;
use crate::session::longbox::Monitor;
use crate::session::result::ExecResult;
use crate::session::stderr::Stderr;
use serde_json::json;
use sockets::{heartbeat, send, Readers, Sockets};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a cell that asked for input is interrupted again while it has not ended.
const INPUT_REINTERRUPT: Duration = Duration::from_secs(1);
/// How long `close()` waits for the kernel to exit after `shutdown_request`.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(3);
/// How long a kernel that failed its heartbeat has for its box to end by itself (a process that
/// exited), before kern kills the box of one that hangs.
const GONE_GRACE: Duration = Duration::from_secs(5);
/// How much of the kernel process's own output (outside cells) is kept, for error messages.
const LOG_TAIL: usize = 8 << 10;

/// An image's Jupyter kernel, as the lifecycle sees it: its kernelspec, what its socket readers
/// counted, and its socket directory.
pub(crate) struct Jupyter {
    spec: KernelSpec,
    /// What the socket readers counted (bad signatures, messages dropped).
    readers: Arc<Readers>,
    /// The socket directory; removed as soon as the kernel is gone (its box ended).
    dir: Arc<std::sync::Mutex<Option<tempfile::TempDir>>>,
    /// A stopped cell is interrupted and the kernel kept (the default); false
    /// (`onTimeout: "teardown"`): the kernel's box is ended at once.
    interrupt: bool,
}

/// A Jupyter kernel's live part.
pub(crate) struct Live {
    session: Session,
    socks: Sockets,
    /// The kernel process's own stdout/stderr (not a cell's `stream` messages).
    chunks: ChunkReceiver,
    log: Vec<u8>,
    ended: Ended,
    monitor: Monitor,
}

impl Kind for Jupyter {
    type Live = Live;
    const STOP_BEFORE_CLOSE: bool = false;

    fn ended(live: &mut Live) -> &mut Ended {
        &mut live.ended
    }

    fn chunks(live: &mut Live) -> &mut ChunkReceiver {
        &mut live.chunks
    }

    /// A cell's `env` is refused: the wire has no environment for a cell, and setting one
    /// would take code in the kernel's own language (R, Julia...), which kern does not write.
    fn check_cell(&self, cell: &CellInput<'_>) -> Result<()> {
        if !matches!(cell.op, CellOp::Run) {
            return crate::invalid!(
                "fork() and checkpoint() are not available for a Jupyter kernel (\"{}\"): its state lives in the image's own kernel process, which has no way to hand it out that kern could load into a fresh box; open a driver kernel (sandbox.kernel() without `jupyter`, language \"python\") to fork or checkpoint it",
                self.spec.name
            );
        }
        if !cell.env.is_empty() {
            return crate::invalid!(
                "per-cell option `env` is not taken by a Jupyter kernel (\"{}\"): give the variables to the kernel as it starts, sandbox.kernel({{ jupyter: \"{}\", env }}), or set them in the cell's own code",
                self.spec.name,
                self.spec.name
            );
        }
        crate::lang::check_cell_size(cell.code)
    }

    fn torn_down(&self, why: &str) -> Error {
        Error::Closed(format!(
            "this Jupyter kernel (\"{}\") was torn down ({why}); open a new one with sandbox.kernel({{ jupyter: \"{}\" }})",
            self.spec.name, self.spec.name
        ))
    }

    fn on_dead(&self) {
        self.remove_dir();
    }

    async fn box_end(&self, k: &Lifecycle<Jupyter>, live: &mut Live) -> Fault {
        self.box_end_within(k, live, None).await
    }

    /// A kernel that does not answer its heartbeat is ended: a cell sent to it would wait to its
    /// timeout. One whose process ended by itself (its sockets close a moment before its box's
    /// end is known) is told as that end, within `GONE_GRACE`.
    async fn unwell(&self, k: &Lifecycle<Jupyter>, live: &mut Live) -> Option<String> {
        let why = heartbeat(&mut live.socks.heartbeat).await.err()?;
        let end = self.box_end_within(k, live, Some(GONE_GRACE)).await;
        if !*k.stop.borrow() {
            return Some(end.message);
        }
        Some(format!(
            "it stopped answering its heartbeat ({why}), so kern killed its box"
        ))
    }

    /// Asks the kernel to shut down, and gives it `SHUTDOWN_GRACE` to exit.
    async fn goodbye(&self, live: &mut Live) {
        let (_, frames) = live
            .session
            .request("shutdown_request", &json!({"restart": false}));
        if send(&mut live.socks.control, frames).await.is_ok() {
            let _ = tokio::time::timeout(SHUTDOWN_GRACE, &mut live.ended).await;
        }
    }

    async fn run_cell(
        &self,
        k: &Lifecycle<Jupyter>,
        live: &mut Live,
        input: &CellInput<'_>,
        timeout: Duration,
        sinks: CellSinks,
        abort: &mut Abort,
    ) -> (ExecResult, Option<String>) {
        let CellSinks {
            output: sink,
            results: live_results,
            ..
        } = sinks;
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
        let (id, frames) = live
            .session
            .request("execute_request", &Cell::request(input.code));
        let cell_id = id.clone();
        self.readers.want(Some(&id));
        let mut asked_input: Option<String> = None;
        let mut cell = Cell::new(id);
        cell.live(live_results);
        let (o, e) = k.keep.captures();
        let mut kept = [o, e];
        let mut fault: Option<Fault> = None;
        let mut dead = false;
        if send(&mut live.socks.shell, frames).await.is_err() {
            fault = Some(Fault::new(
                FaultKind::Killed,
                "the kernel's shell socket is gone; the kernel was torn down",
            ));
            dead = true;
        }
        // Past the deadline, or once aborted, the cell is interrupted, but only once the kernel
        // runs it (an interrupt that lands before would be ignored and the cell would then run
        // on), or a second later in any case; torn down if it has not stopped INTERRUPT_GRACE
        // after. `stopping`: why, and from when.
        let mut clock = CellClock::start(timeout, &k.paused);
        let mut stopping: Option<(Stop, tokio::time::Instant)> = None;
        let mut interrupted = false;
        // A cell that asked for input is interrupted again each INPUT_REINTERRUPT until it ends:
        // a signal that lands while the kernel is between its request and its wait (seen with
        // IRkernel on a loaded machine) is lost, and the cell would otherwise sit to its timeout.
        let mut input_reinterrupt: Option<tokio::time::Instant> = None;
        while !dead && !cell.done() {
            if let (Some((stop, _)), false) = (stopping, self.interrupt) {
                let mut f = k.end_stopped(live, stop, timeout, false).await;
                f.message.push_str(" (onTimeout: \"teardown\")");
                fault = Some(f);
                dead = true;
                break;
            }
            if stopping.is_some() && !interrupted && cell.executing() {
                interrupted = true;
                self.interrupt(live).await;
            }
            let wake = match (stopping, interrupted) {
                // Paused: no deadline until it resumes (`clock.changed()` below).
                (None, _) => clock
                    .deadline()
                    .unwrap_or_else(|| tokio::time::Instant::now() + Duration::from_secs(86_400)),
                (Some((_, from)), false) => from + Duration::from_secs(1),
                (Some((_, from)), true) => from + INTERRUPT_GRACE,
            };
            let wake = input_reinterrupt.map_or(wake, |at| at.min(wake));
            tokio::select! {
                m = live.socks.iopub.recv() => match m {
                    Some(m) => keep_and_show(&mut kept, &sink, cell.on_iopub(&m)).await,
                    None => dead = true,
                },
                m = live.socks.replies.recv() => match m {
                    Some(m) => keep_and_show(&mut kept, &sink, cell.on_reply(&m)).await,
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
                    Some(c) => keep_and_show(&mut kept, &sink, cell.on_output(c.stream, &c.data)).await,
                    None => dead = true,
                },
                // Paused or resumed: the deadline moved.
                () = clock.changed(), if stopping.is_none() => {}
                // An abort starts the stop a deadline would, from now.
                () = crate::session::percall::abort_requested(abort), if stopping.is_none() => {
                    // Aborted while paused: a frozen cell can't stop, so it runs again first.
                    k.resume_for_stop().await;
                    stopping = Some((Stop::Aborted, tokio::time::Instant::now()));
                }
                _ = tokio::time::sleep_until(wake) => {
                    if input_reinterrupt.is_some_and(|at| at <= tokio::time::Instant::now()) {
                        self.interrupt(live).await;
                        input_reinterrupt = Some(tokio::time::Instant::now() + INPUT_REINTERRUPT);
                    } else if stopping.is_none() {
                        stopping = Some((Stop::Timeout, tokio::time::Instant::now()));
                    } else if !interrupted {
                        interrupted = true;
                        self.interrupt(live).await;
                    } else if let Some((stop, _)) = stopping {
                        fault = Some(k.end_stopped(live, stop, timeout, true).await);
                        dead = true;
                    }
                }
            }
        }
        if dead && fault.is_none() {
            // The kernel's output or a socket closed: its box is ending, or a socket failed
            // while it runs, which leaves a kernel we can't talk to; that one is ended.
            fault = Some(self.box_end_within(k, live, Some(SHUTDOWN_GRACE)).await);
        }
        if let (Some((stop, _)), None) = (stopping, &fault) {
            let what = if interrupted {
                "kern interrupted it and the kernel kept its state"
            } else {
                "it ended before kern's interrupt was sent, and the kernel kept its state"
            };
            fault = Some(Fault::new(
                stop.fault_kind(),
                format!("{}; {what}", stop.what(timeout)),
            ));
        }
        let parts = cell.into_parts();
        let [out_kept, err_kept] = kept.map(|mut c| c.finish());
        let spills = tokio::join!(out_kept.spill.wait(), err_kept.spill.wait());
        let mut stderr = Stderr::of_code(crate::lang::output_text(err_kept.kept));
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
        let dead = dead.then(|| {
            fault
                .as_ref()
                .map(|f| f.message.clone())
                .unwrap_or_else(|| "its box ended".into())
        });
        // A timeout interrupts the cell: its KeyboardInterrupt is the fault, not an error.
        let error = parts.error.filter(|_| fault.is_none());
        let mut result = ExecResult {
            stdout: crate::lang::output_text(out_kept.kept),
            stderr,
            exit_code,
            duration_ms: start.elapsed().as_secs_f64() * 1000.0,
            signal: cell_signal(exit_code, fault.as_ref()),
            fault,
            files: Vec::new(),
            stdout_truncated: out_kept.truncated,
            stderr_truncated: err_kept.truncated,
            stdout_spill: None,
            stderr_spill: None,
            results: parts.results,
            error,
            execution_count: parts.execution_count,
        };
        result.take_spills(spills);
        (result, dead)
    }
}

impl Jupyter {
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
            Interrupt::Signal => super::signal::interrupt(live.monitor.get()).await,
        }
    }

    /// As `box_end`, but ends the box itself if it has not ended within `wait`.
    async fn box_end_within(
        &self,
        k: &Lifecycle<Jupyter>,
        live: &mut Live,
        wait: Option<Duration>,
    ) -> Fault {
        // Its output is read meanwhile, into the log its fault quotes.
        let Live {
            ended, chunks, log, ..
        } = live;
        let mut keep = |c: Chunk| keep_tail(log, &c.data);
        let outcome = match wait {
            None => end_reading(ended, chunks, &mut keep).await,
            Some(wait) => {
                match tokio::time::timeout(wait, end_reading(ended, chunks, &mut keep)).await {
                    Ok(o) => o,
                    Err(_) => {
                        k.stop.send_replace(true);
                        end_reading(ended, chunks, &mut keep).await
                    }
                }
            }
        };
        let log = String::from_utf8_lossy(&live.log).trim().to_string();
        let tail = if log.is_empty() {
            String::new()
        } else {
            let lines: Vec<&str> = log.lines().rev().take(10).collect();
            let lines: Vec<&str> = lines.into_iter().rev().collect();
            format!("; its last output:\n{}", lines.join("\n"))
        };
        end_fault(outcome, "process", &tail)
    }
}

fn keep_tail(log: &mut Vec<u8>, data: &[u8]) {
    log.extend_from_slice(data);
    if log.len() > LOG_TAIL {
        log.drain(..log.len() - LOG_TAIL);
    }
}

/// Keeps a cell's output (its cap, its spill) and shows it to the caller as it comes; a slow
/// consumer (`ChunkSender`) makes the kernel's output wait with it.
async fn keep_and_show(kept: &mut [Capture; 2], sink: &Option<ChunkSender>, shown: Shown) {
    for (stream, data) in shown {
        let c = match stream {
            Stream::Stdout => &mut kept[0],
            Stream::Stderr => &mut kept[1],
        };
        c.push(&data).await;
        if let Some(s) = sink {
            let _ = s.send(Chunk { stream, data }).await;
        }
    }
}
