//! Boxes whose python driver is started before it has a cell: the kernel (many cells) and the
//! prewarm pool (exactly one cell each). Both are a box spawned with the driver and a socket to
//! it; the box lives until its cell is done, it is stopped, or its session closes.

use super::{driver_io_on, Opened, SlotOutcome};
use crate::engine::launch::{Chunk, Outcome};
use crate::error::{Error, Result};
use std::os::fd::OwnedFd;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::watch;

/// How long a started driver box may wait and run: the kernel's lifetime, or an idle slot's.
/// Per-cell deadlines are enforced by the caller, which stops the box.
pub const LIFETIME_MS: u64 = 7 * 86_400_000;

/// Where a driver box's output goes.
pub enum Output {
    /// Kept (up to the cap) and returned in the outcome: a one-cell box.
    Keep(usize),
    /// Forwarded as it comes and not kept: a kernel, which splits it per cell.
    Forward(UnboundedSender<Chunk>),
}

/// A started driver box.
pub struct DriverBox {
    /// Our end of the driver's channel.
    pub sock: tokio::net::UnixStream,
    /// Resolves when the box has ended.
    pub ended: tokio::task::JoinHandle<Result<Option<Outcome>>>,
    /// Turning true ends the box.
    pub stop: watch::Sender<bool>,
}

/// Starts a box running the python driver, waiting for its first cell on the channel.
pub fn start(
    opened: Arc<Opened>,
    kern_path: &std::path::Path,
    output: Output,
) -> Result<DriverBox> {
    let launch = crate::lang::Language::Python.launch("")?;
    let workspace = opened.workspace_path()?;
    let spec = opened.spec(launch.argv, &launch.env, LIFETIME_MS, true, &workspace);
    let (ours, theirs) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| Error::Runtime(format!("socketpair for the driver: {e}")))?;
    ours.set_nonblocking(true)
        .map_err(|e| Error::Runtime(format!("driver socket: {e}")))?;
    let sock = tokio::net::UnixStream::from_std(ours)
        .map_err(|e| Error::Runtime(format!("driver socket: {e}")))?;
    let (stop, stop_rx) = watch::channel(false);
    // The session closing ends the box too.
    let mut closing = opened.closing.subscribe();
    let stop_on_close = stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            r = closing.wait_for(|c| *c) => if r.is_ok() { stop_on_close.send_replace(true); },
            _ = stop_on_close.closed() => {}
        }
    });
    let kern = opened.kern(kern_path)?;
    let channel = OwnedFd::from(theirs);
    let ended = tokio::spawn(async move {
        // Held for the box's life: the session's close() waits for it to end.
        let _running = opened.running.read().await;
        // Stopped before it started (its session closed meanwhile): start nothing.
        if *stop_rx.borrow() {
            kern.retire();
            return Ok(None);
        }
        let r = match output {
            Output::Keep(cap) => kern.run(&spec, cap, None, stop_rx, Some(&channel)).await,
            Output::Forward(sink) => {
                kern.run_forwarding(&spec, sink, stop_rx, Some(&channel))
                    .await
            }
        };
        drop(channel);
        r
    });
    Ok(DriverBox { sock, ended, stop })
}

/// A prewarmed slot: a one-cell driver box that has run nothing.
pub struct Slot(Option<DriverBox>);

impl Slot {
    pub fn start(opened: Arc<Opened>, kern_path: &std::path::Path) -> Result<Slot> {
        let cap = opened.config.max_output;
        Ok(Slot(Some(start(opened, kern_path, Output::Keep(cap))?)))
    }

    pub fn is_alive(&self) -> bool {
        self.0.as_ref().is_some_and(|b| !b.ended.is_finished())
    }

    /// Runs `code` as this slot's one cell, within `timeout`.
    pub async fn run(mut self, code: &str, timeout: std::time::Duration) -> Result<SlotOutcome> {
        let DriverBox { sock, ended, stop } = self
            .0
            .take()
            .ok_or_else(|| Error::Runtime("a prewarmed box was used twice".into()))?;
        let results = driver_io_on(sock, code)?;
        let mut ended = ended;
        let mut timed_out = false;
        let outcome = match tokio::time::timeout(timeout, &mut ended).await {
            Ok(r) => r,
            Err(_) => {
                timed_out = true;
                stop.send_replace(true);
                ended.await
            }
        };
        let outcome = outcome
            .map_err(|e| Error::Runtime(format!("the prewarmed box's task failed: {e}")))??
            .ok_or_else(|| Error::Runtime("the prewarmed kern exited before its box ran".into()))?;
        Ok(SlotOutcome {
            outcome,
            results,
            timed_out,
        })
    }
}

// An unused slot ends its box when it is dropped (the pool emptied, the session closed).
impl Drop for Slot {
    fn drop(&mut self) {
        if let Some(b) = &self.0 {
            b.stop.send_replace(true);
        }
    }
}
