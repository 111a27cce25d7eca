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
use crate::error::Result;
use driver::Driver;
use jupyter::Jupyter;
use lifecycle::{CellInput, Lifecycle};

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
        let cell = CellInput { code, env };
        match &self.0 {
            Open::Driver(k) => k.run_code(cell, timeout_ms, sink, results, abort).await,
            Open::Jupyter(k) => k.run_code(cell, timeout_ms, sink, results, abort).await,
        }
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
