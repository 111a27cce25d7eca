//! Kernels: long-lived boxes that run cells one at a time and keep their state between them.
//! Two kinds, one lifecycle (`lifecycle`): the python driver's kernel (`driver`), also the
//! prewarmed one-cell boxes, and an image's Jupyter kernel (`jupyter`); here, the kernel a
//! caller holds (`OpenKernel`). Their boxes are started by `session::longbox`: nothing here
//! knows the session.

pub(crate) mod driver;
pub(crate) mod jupyter;
pub(crate) mod lifecycle;
pub(crate) mod signal;

use super::result::ExecResult;
use crate::engine::addon::launch::ChunkSender;
use crate::error::{Error, Result};
use crate::lang::state::KernelState;
use driver::Driver;
use jupyter::Jupyter;
use lifecycle::{CellInput, CellOp, CellSinks, Lifecycle};

/// A state operation's result as an error, if it failed: the box's end, the driver's error.
fn state_outcome(r: &ExecResult, what: &str) -> Result<()> {
    if let Some(f) = &r.fault {
        return Err(Error::Runtime(format!(
            "the kernel's state could not be {what}: {}",
            f.message
        )));
    }
    if let Some(e) = &r.error {
        return Err(Error::Runtime(format!(
            "the kernel's state could not be {what}: {}: {}",
            e.name, e.value
        )));
    }
    if r.exit_code != 0 {
        return Err(Error::Runtime(format!(
            "the kernel's state could not be {what} (exit {}): {}",
            r.exit_code,
            r.stderr.code().trim()
        )));
    }
    Ok(())
}

/// A kernel a caller opened: our python driver's, or a Jupyter kernel of the image.
pub struct OpenKernel(Open);

enum Open {
    Driver(Lifecycle<Driver>),
    Jupyter(Lifecycle<Jupyter>),
}

impl OpenKernel {
    pub(crate) fn driver(k: Lifecycle<Driver>) -> OpenKernel {
        OpenKernel(Open::Driver(k))
    }

    pub(crate) fn jupyter(k: Lifecycle<Jupyter>) -> OpenKernel {
        OpenKernel(Open::Jupyter(k))
    }

    /// Runs one cell (they run one at a time, in call order), with `env` (checked: `parse_env`)
    /// set for it alone. `abort` turning true stops it as its timeout would, and the call then
    /// fails.
    pub async fn run_code(
        &self,
        code: &str,
        env: &[(String, String)],
        timeout_ms: Option<u64>,
        sink: Option<ChunkSender>,
        results: Option<crate::lang::driver::ResultSink>,
        abort: Option<tokio::sync::watch::Receiver<bool>>,
    ) -> Result<ExecResult> {
        let cell = CellInput {
            code,
            env,
            op: lifecycle::CellOp::Run,
        };
        match &self.0 {
            Open::Driver(k) => k.run_code(cell, timeout_ms, sink, results, abort).await,
            Open::Jupyter(k) => k.run_code(cell, timeout_ms, sink, results, abort).await,
        }
    }

    /// Saves the kernel's state (a driver kernel's, python or node: `kernel.fork()`,
    /// `checkpoint()`): in turn with its cells, and bounded by the kernel's cell timeout as a
    /// cell is.
    pub async fn save_state(&self) -> Result<KernelState> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let sinks = CellSinks {
            saved: Some(tx),
            ..CellSinks::default()
        };
        let r = self.run_op(CellInput::op(CellOp::Save), sinks).await?;
        state_outcome(&r, "saved")?;
        rx.await.map_err(|_| {
            Error::Runtime(
                "the kernel's driver said its state was saved but sent none that adds up (a cell may have replaced the driver's channel); the kernel goes on, unforked".into(),
            )
        })
    }

    /// Loads a saved state into this kernel (a fork's, a restored checkpoint's); what the
    /// driver wrote meanwhile (a directory that is not here) opens the next cell's output.
    pub async fn load_state(&self, state: &KernelState) -> Result<()> {
        let r = self
            .run_op(CellInput::op(CellOp::Load(state)), CellSinks::default())
            .await?;
        state_outcome(&r, "loaded")
    }

    async fn run_op(&self, cell: CellInput<'_>, sinks: CellSinks) -> Result<ExecResult> {
        match &self.0 {
            Open::Driver(k) => k.run_cell_with(cell, None, sinks, None).await,
            Open::Jupyter(k) => k.run_cell_with(cell, None, sinks, None).await,
        }
    }

    /// Whether this kernel is one of the session whose writers are `writers`, and held still:
    /// paused (its box writes nothing until resumed), or, where kern can't pause a box
    /// (unprivileged on cgroup v1), between cells, its caller holding its turn (a thread an
    /// earlier cell left running may still write: docs/reference.md, "Live state").
    pub(crate) fn still_in(
        &self,
        writers: &std::sync::Arc<crate::session::writers::Writers>,
    ) -> bool {
        let (ours, idle) = match &self.0 {
            Open::Driver(k) => (k.counts_in(writers), k.is_idle()),
            Open::Jupyter(k) => (k.counts_in(writers), k.is_idle()),
        };
        ours && (self.is_paused() || idle)
    }

    /// Freezes the kernel's box (a running cell too: its timeout stands still) until
    /// `resume`; its memory is kept. Idempotent.
    pub async fn pause(&self) -> Result<()> {
        match &self.0 {
            Open::Driver(k) => k.pause().await,
            Open::Jupyter(k) => k.pause().await,
        }
    }

    /// Lets a paused kernel run again. Idempotent.
    pub async fn resume(&self) -> Result<()> {
        match &self.0 {
            Open::Driver(k) => k.resume().await,
            Open::Jupyter(k) => k.resume().await,
        }
    }

    /// Whether the kernel is paused.
    pub fn is_paused(&self) -> bool {
        match &self.0 {
            Open::Driver(k) => k.is_paused(),
            Open::Jupyter(k) => k.is_paused(),
        }
    }

    /// Ends the kernel's box and waits for it. Idempotent.
    pub async fn close(&self) -> Result<()> {
        match &self.0 {
            Open::Driver(k) => k.close().await,
            Open::Jupyter(k) => k.close().await,
        }
    }
}
