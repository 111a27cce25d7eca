//! `NativeKernel`: a kernel opened by `NativeSandbox::kernel` (js/kernel.js wraps it).

use super::aborts::Aborts;
use super::callbacks::{forwarder, ChunkFn, LiveResults, ResultFn};
use super::errors::to_napi;
use super::result::{finish, NativeResult};
use crate::error::Error;
use napi_derive::napi;
use std::sync::Arc;

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CellRequest {
    code: String,
    timeout_s: Option<serde_json::Value>,
    env: Option<serde_json::Value>,
}

/// A kernel (see `session::kernel`: the driver kind and the Jupyter kind).
#[napi]
pub struct NativeKernel {
    pub(super) inner: Arc<crate::session::OpenKernel>,
    /// The aborts of cells with a `signal` (as `NativeSandbox`'s of calls).
    pub(super) aborts: Aborts,
}

#[napi]
impl NativeKernel {
    /// Registers the abort of a cell about to start (`runCode`'s `call_id`), synchronously.
    #[napi]
    pub fn begin_call(&self) -> napi::Result<u32> {
        self.aborts.begin()
    }

    /// Aborts the cell `beginCall` gave `id`: it is interrupted as at its timeout. A cell
    /// already over is left alone.
    #[napi]
    pub fn abort_call(&self, id: u32) -> napi::Result<()> {
        self.aborts.abort(id)
    }

    /// Runs one cell; `request_json` is `{ code, timeoutS?, env? }`; `call_id`: its abort
    /// (`beginCall`).
    #[napi]
    pub async fn run_code(
        &self,
        request_json: String,
        on_stdout: Option<ChunkFn>,
        on_stderr: Option<ChunkFn>,
        call_id: Option<u32>,
        on_result: Option<ResultFn>,
    ) -> napi::Result<NativeResult> {
        let (_registered, abort) = self.aborts.of(call_id)?;
        let req: CellRequest = serde_json::from_str(&request_json)
            .map_err(|e| to_napi(Error::Invalid(format!("bad cell request: {e}"))))?;
        let timeout_ms = match &req.timeout_s {
            None | Some(serde_json::Value::Null) => None,
            Some(v) => Some(crate::session::options::timeout_ms("timeoutS", v).map_err(to_napi)?),
        };
        // Checked before the cell waits for its turn: a bad `env` runs nothing.
        let env = match req.env.as_ref().filter(|v| !v.is_null()) {
            Some(v) => crate::session::options::parse_env(v).map_err(to_napi)?,
            None => Vec::new(),
        };
        let (tx, forwarder) = forwarder(on_stdout, on_stderr);
        let (live, results) = LiveResults::new(on_result);
        let result = self
            .inner
            .run_code(&req.code, &env, timeout_ms, tx, live, abort)
            .await;
        results.done().await;
        finish(result, forwarder).await
    }

    /// Saves the kernel's state (`Kernel.fork`, `checkpoint`: additions), in turn with its
    /// cells; it stays on the host, in the object returned.
    #[napi]
    pub async fn save_state(&self) -> napi::Result<NativeKernelState> {
        let state = self.inner.save_state().await.map_err(to_napi)?;
        Ok(NativeKernelState {
            inner: Arc::new(state),
        })
    }

    /// Loads a saved state into this kernel (what the driver wrote meanwhile opens the next
    /// cell's output).
    #[napi]
    pub async fn load_state(&self, state: &NativeKernelState) -> napi::Result<()> {
        let state = state.inner.clone();
        self.inner.load_state(&state).await.map_err(to_napi)
    }

    /// Freezes the kernel's box until `resume` (`Kernel.pause`, an addition).
    #[napi]
    pub async fn pause(&self) -> napi::Result<()> {
        self.inner.pause().await.map_err(to_napi)
    }

    /// Lets a paused kernel run again (`Kernel.resume`).
    #[napi]
    pub async fn resume(&self) -> napi::Result<()> {
        self.inner.resume().await.map_err(to_napi)
    }

    /// Whether the kernel is paused (`Kernel.paused`).
    #[napi(getter)]
    pub fn paused(&self) -> bool {
        self.inner.is_paused()
    }

    #[napi]
    pub async fn close(&self) -> napi::Result<()> {
        self.inner.close().await.map_err(to_napi)
    }
}

/// A kernel's state, saved (`NativeKernel::save_state`): held on the host, loaded into forks.
#[napi]
pub struct NativeKernelState {
    pub(crate) inner: Arc<crate::lang::state::KernelState>,
}

#[napi]
impl NativeKernelState {
    /// Its size in bytes.
    #[napi(getter)]
    pub fn bytes(&self) -> f64 {
        self.inner.data.len() as f64
    }

    /// The names left out, with why, as JSON `[[name, reason], ...]`.
    #[napi(getter)]
    pub fn left(&self) -> String {
        serde_json::to_string(&self.inner.left()).unwrap_or_else(|_| "[]".into())
    }
}
