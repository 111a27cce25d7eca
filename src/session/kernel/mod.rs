//! Kernels: long-lived boxes that run cells one at a time and keep their state between them.
//! Two kinds, one lifecycle (`lifecycle`): the python driver's kernel (`driver`), also the
//! prewarm pool's one-cell slots, and an image's Jupyter kernel (`jupyter`). Here: opening one
//! for a caller (`open`) and the kernel the caller holds (`OpenKernel`).

pub(crate) mod driver;
pub(crate) mod jupyter;
pub(crate) mod lifecycle;

use super::longbox;
use super::opened::Opened;
use super::result::ExecResult;
use super::writers::Active;
use crate::engine::launch::Chunk;
use crate::error::{Error, Result};
use driver::Driver;
use jupyter::Jupyter;
use lifecycle::Lifecycle;
use std::path::Path;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedSender;

/// A kernel a caller opened: our python driver's, or a Jupyter kernel of the image.
pub struct OpenKernel(Open);

enum Open {
    Driver(Lifecycle<Driver>),
    Jupyter(Lifecycle<Jupyter>),
}

impl OpenKernel {
    /// Runs one cell (they run one at a time, in call order).
    pub async fn run_code(
        &self,
        code: &str,
        timeout_ms: Option<u64>,
        sink: Option<UnboundedSender<Chunk>>,
    ) -> Result<ExecResult> {
        match &self.0 {
            Open::Driver(k) => k.run_code(code, timeout_ms, sink).await,
            Open::Jupyter(k) => k.run_code(code, timeout_ms, sink).await,
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

/// `kernel()`: a driver kernel, or with `jupyter` the image's kernelspec of that name, counted
/// as a writer of the workspace until it is closed. `timeout_s` is its per-cell default (the
/// session's `timeoutS` when absent).
pub(super) async fn open(
    opened: Arc<Opened>,
    kern: &Path,
    timeout_s: Option<&serde_json::Value>,
    jupyter: Option<&str>,
) -> Result<OpenKernel> {
    if opened.config.resident.is_some() {
        return crate::invalid!("kernel() is not available with `persist`: a kernel is its own long-lived box; use runCode() (each call runs in the resident box), or open a Sandbox without `persist` for a kernel");
    }
    let timeout_ms = match timeout_s {
        None | Some(serde_json::Value::Null) => opened.config.timeout_ms,
        Some(v) => super::options::timeout_ms("timeoutS", v)?,
    };
    if *opened.closing.borrow() {
        return Err(Error::Invalid(
            "the Sandbox is closed; open a new Sandbox to run more code".into(),
        ));
    }
    let max_output = opened.config.max_output;
    let quota = match opened.config.workspace_max_bytes {
        Some(cap) => Some((opened.workspace_path()?, cap)),
        None => None,
    };
    let active = Active::enter(&opened.writers).await;
    Ok(OpenKernel(match jupyter {
        Some(name) => {
            let mut k = jupyter::start::start(opened, kern, timeout_ms, max_output, name).await?;
            k.attach(active, quota);
            Open::Jupyter(k)
        }
        None => {
            let mut k = start_driver(opened, kern, timeout_ms, max_output, false)?;
            k.attach(active, quota);
            Open::Driver(k)
        }
    }))
}

/// Starts a driver kernel's box; it runs as long as the kernel is open and the session too.
/// `single`: a prewarmed slot's kernel, for one cell.
pub(super) fn start_driver(
    opened: Arc<Opened>,
    kern: &Path,
    timeout_ms: u64,
    max_output: usize,
    single: bool,
) -> Result<Lifecycle<Driver>> {
    let session_closing = opened.closing.subscribe();
    let (sink, chunks) = tokio::sync::mpsc::unbounded_channel();
    let started = longbox::start(opened, kern, sink)?;
    let live = driver::Live::new(started.sock, chunks, started.ended, started.prepared);
    Ok(Lifecycle::new(
        Driver { single },
        live,
        session_closing,
        started.stop,
        timeout_ms,
        max_output,
    ))
}
