//! The napi exports: JS values in, engine types out, errors as stable codes. The public JS layer
//! (`js/index.js`) wraps this private `NativeSandbox` and maps the codes to error classes.

use crate::engine::launch::{Chunk, Stream};
use crate::error::Error;
use crate::session::{ExecRequest, Sandbox};
use napi::bindgen_prelude::Buffer;
use napi::threadsafe_function::ThreadsafeFunction;
use napi_derive::napi;
use std::path::PathBuf;
use std::sync::Arc;

/// A chunk callback: `(chunk: Buffer) => void`, errors handled by the JS wrapper.
type ChunkFn = ThreadsafeFunction<Buffer, (), Buffer, napi::Status, false>;

/// napi-rs can't reject with a JS subclass, so the code rides in front of the message
/// (`[ERR_SANDBOX] ...`) and the JS layer turns it into the class.
fn to_napi(e: Error) -> napi::Error {
    napi::Error::from_reason(format!("[{}] {e}", e.code()))
}

#[napi]
pub struct NativeSandbox {
    inner: Arc<Sandbox>,
}

#[napi]
impl NativeSandbox {
    /// `options_json`: the Sandbox options without callbacks; `kern_path`: the runtime binary.
    #[napi(constructor)]
    pub fn new(options_json: String, kern_path: String) -> napi::Result<Self> {
        let options: serde_json::Value = serde_json::from_str(&options_json).map_err(|e| {
            to_napi(Error::Invalid(format!(
                "the options are not plain JSON data: {e}"
            )))
        })?;
        Ok(NativeSandbox {
            inner: Arc::new(Sandbox::new(options, PathBuf::from(kern_path))),
        })
    }

    #[napi]
    pub async fn open(&self) -> napi::Result<()> {
        self.inner.open().await.map_err(to_napi)
    }

    #[napi]
    pub async fn close(&self) -> napi::Result<()> {
        self.inner.close().await.map_err(to_napi)
    }

    /// Runs one call; resolves to the result as JSON once every chunk was delivered.
    #[napi]
    pub async fn exec(
        &self,
        request_json: String,
        on_stdout: Option<ChunkFn>,
        on_stderr: Option<ChunkFn>,
    ) -> napi::Result<String> {
        let req: ExecRequest = serde_json::from_str(&request_json)
            .map_err(|e| to_napi(Error::Invalid(format!("bad call request: {e}"))))?;
        let (tx, forwarder) = if on_stdout.is_some() || on_stderr.is_some() {
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Chunk>();
            // One task delivers every chunk in arrival order and waits for each callback, so all
            // of them have run before the promise resolves.
            let task = tokio::spawn(async move {
                while let Some(chunk) = rx.recv().await {
                    let f = match chunk.stream {
                        Stream::Stdout => on_stdout.as_ref(),
                        Stream::Stderr => on_stderr.as_ref(),
                    };
                    if let Some(f) = f {
                        let _ = f.call_async(Buffer::from(chunk.data)).await;
                    }
                }
            });
            (Some(tx), Some(task))
        } else {
            (None, None)
        };
        let result = self.inner.exec(req, tx).await;
        if let Some(task) = forwarder {
            let _ = task.await;
        }
        let result = result.map_err(to_napi)?;
        serde_json::to_string(&result)
            .map_err(|e| to_napi(Error::Runtime(format!("serialise the result: {e}"))))
    }
}

/// The crate version, for `version`.
#[napi]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
