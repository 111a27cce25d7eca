//! A call's result (and each rich result) converted for JS.

use super::errors::to_napi;
use napi::bindgen_prelude::Buffer;
use napi_derive::napi;

/// Waits for the output forwarder (every chunk delivered), then converts the result.
pub(super) async fn finish(
    result: crate::error::Result<crate::session::ExecResult>,
    forwarder: Option<tokio::task::JoinHandle<()>>,
) -> napi::Result<NativeResult> {
    if let Some(task) = forwarder {
        let _ = task.await;
    }
    Ok(NativeResult::from(result.map_err(to_napi)?))
}

/// A call's result as it crosses into JS: the output as Buffers the JS layer decodes (moved,
/// not copied, and never escaped into a JSON text that can be six times the output's size),
/// the rest as plain values. `js/results.js` builds the public `ExecutionResult` from it.
#[napi(object)]
pub struct NativeResult {
    pub stdout: Buffer,
    pub stderr: Buffer,
    /// kern's own lines in `stderr`, in order: `runtimeNotes`.
    pub runtime_notes: Vec<String>,
    /// The byte range of `stderr` the workload wrote (the rest is kern's lines): `codeStderr`.
    pub code_start: f64,
    pub code_end: f64,
    pub exit_code: i32,
    pub duration_ms: f64,
    pub fault: Option<NativeFault>,
    pub files: Vec<NativeFile>,
    pub truncated: bool,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// Where each stream went past `maxOutputBytes`, with `spillOutput` (an addition).
    pub stdout_spill: Option<NativeSpill>,
    pub stderr_spill: Option<NativeSpill>,
    /// The name of the signal that ended the workload, if one did.
    pub signal: Option<String>,
    pub results: Vec<NativeBundle>,
    /// The exception a cell raised (`ExecutionResult.error`).
    pub error: Option<NativeCellError>,
    /// A kernel cell's number (an addition); absent for a one-shot call.
    pub execution_count: Option<u32>,
}

#[napi(object)]
pub struct NativeSpill {
    pub path: String,
    pub bytes: f64,
    pub complete: bool,
}

impl From<crate::engine::addon::capture::Spilled> for NativeSpill {
    fn from(s: crate::engine::addon::capture::Spilled) -> NativeSpill {
        NativeSpill {
            path: s.path,
            bytes: s.bytes as f64,
            complete: s.complete,
        }
    }
}

#[napi(object)]
pub struct NativeCellError {
    pub name: String,
    pub value: String,
    pub traceback: String,
}

#[napi(object)]
pub struct NativeFault {
    #[napi(js_name = "type")]
    pub kind: String,
    pub message: String,
}

#[napi(object)]
pub struct NativeFile {
    pub path: String,
    pub size: f64,
    pub change: String,
}

/// One rich result: its MIME types and their payloads, in order (the JS layer makes `data`).
#[napi(object)]
pub struct NativeBundle {
    pub mimes: Vec<String>,
    pub payloads: Vec<String>,
    /// The value of the cell's last expression, not a display() or a figure.
    pub is_main: bool,
    /// A matplotlib figure's chart data, as JSON (the JS layer parses it).
    pub chart: Option<String>,
}

pub(super) fn native_bundle(item: crate::lang::driver::Item) -> NativeBundle {
    let (mimes, payloads) = item
        .data
        .into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => (k, s),
            other => (k, other.to_string()),
        })
        .unzip();
    NativeBundle {
        mimes,
        payloads,
        is_main: item.main,
        chart: item.chart.map(|c| c.to_string()),
    }
}

impl From<crate::session::ExecResult> for NativeResult {
    fn from(r: crate::session::ExecResult) -> NativeResult {
        NativeResult {
            stdout: Buffer::from(r.stdout.into_bytes()),
            code_start: r.stderr.code.start as f64,
            code_end: r.stderr.code.end as f64,
            runtime_notes: r.stderr.notes,
            stderr: Buffer::from(r.stderr.text.into_bytes()),
            exit_code: r.exit_code,
            duration_ms: r.duration_ms,
            fault: r.fault.map(|f| NativeFault {
                kind: f.kind.as_str().to_string(),
                message: f.message,
            }),
            files: r
                .files
                .into_iter()
                .map(|f| NativeFile {
                    path: f.path,
                    size: f.size as f64,
                    change: f.change.to_string(),
                })
                .collect(),
            truncated: r.stdout_truncated || r.stderr_truncated,
            stdout_truncated: r.stdout_truncated,
            stderr_truncated: r.stderr_truncated,
            stdout_spill: r.stdout_spill.map(NativeSpill::from),
            stderr_spill: r.stderr_spill.map(NativeSpill::from),
            signal: r.signal,
            results: r.results.into_iter().map(native_bundle).collect(),
            error: r.error.map(|e| NativeCellError {
                name: e.name,
                value: e.value,
                traceback: e.traceback,
            }),
            execution_count: r.execution_count,
        }
    }
}
