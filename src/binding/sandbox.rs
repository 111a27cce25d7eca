//! `NativeSandbox`: the session behind the JS `Sandbox` (js/sandbox.js).

use super::aborts::Aborts;
use super::callbacks::{forwarder, ChunkFn, LiveResults, ResultFn};
use super::errors::to_napi;
use super::kernel::NativeKernel;
use super::process::NativeProcess;
use super::publish::{request, NativePublished};
use super::result::{finish, NativeResult};
use super::streams::{NativeReadStream, NativeWriteStream};
use super::watch::NativeWatch;
use crate::error::Error;
use crate::session::{CallInput, ExecRequest, Sandbox};
use napi::bindgen_prelude::{AsyncTask, Buffer, PromiseRaw};
use napi::{Env, Task};
use napi_derive::napi;
use std::path::PathBuf;
use std::sync::Arc;

#[napi]
pub struct NativeSandbox {
    inner: Arc<Sandbox>,
    aborts: Aborts,
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
        crate::session::options::check_early(&options).map_err(to_napi)?;
        Ok(NativeSandbox {
            inner: Arc::new(Sandbox::new(options, PathBuf::from(kern_path))),
            aborts: Aborts::default(),
        })
    }

    /// Opens the session; `setup`'s output goes to the chunk callbacks.
    #[napi]
    pub async fn open(
        &self,
        on_stdout: Option<ChunkFn>,
        on_stderr: Option<ChunkFn>,
        call_id: Option<u32>,
    ) -> napi::Result<()> {
        let (_registered, abort) = self.aborts.of(call_id)?;
        let (tx, forwarder) = forwarder(on_stdout, on_stderr);
        let result = self.inner.open(tx, abort).await;
        if let Some(task) = forwarder {
            let _ = task.await;
        }
        result.map_err(to_napi)
    }

    #[napi]
    pub async fn read_file(&self, path: String, max_bytes: Option<f64>) -> napi::Result<Buffer> {
        let max = match max_bytes {
            None => None,
            Some(n) if n.is_finite() && n >= 0.0 && n.fract() == 0.0 => Some(n as u64),
            Some(n) => {
                return Err(to_napi(Error::Invalid(format!(
                    "readFile maxBytes must be a non-negative integer, got {n}"
                ))))
            }
        };
        let data = self.inner.read_file(path, max).await.map_err(to_napi)?;
        Ok(Buffer::from(data))
    }

    #[napi]
    pub async fn write_file(&self, path: String, data: Buffer) -> napi::Result<()> {
        self.inner
            .write_file(path, data.to_vec())
            .await
            .map_err(to_napi)
    }

    /// Resolves to the FileInfo list as JSON.
    #[napi]
    pub async fn list_files(&self, subdir: Option<String>) -> napi::Result<String> {
        let files = self.inner.list_files(subdir).await.map_err(to_napi)?;
        serde_json::to_string(&files)
            .map_err(|e| to_napi(Error::Runtime(format!("serialise the listing: {e}"))))
    }

    /// Synchronous, as the spec has it. Returns the paths it left out (symlinks, special files).
    #[napi]
    pub fn snapshot(&self, dest: String) -> napi::Result<Vec<String>> {
        let report = self
            .inner
            .snapshot(std::path::Path::new(&dest))
            .map_err(to_napi)?;
        Ok(report.skipped)
    }

    #[napi]
    pub fn restore(&self, src: String) -> napi::Result<()> {
        self.inner
            .restore(std::path::Path::new(&src))
            .map(drop)
            .map_err(to_napi)
    }

    #[napi]
    pub async fn close(&self) -> napi::Result<()> {
        self.inner.close().await.map_err(to_napi)
    }

    /// `setEgressAllow` (an addition): `list_json`, the new allowlist as JSON.
    #[napi]
    pub async fn set_egress_allow(&self, list_json: String) -> napi::Result<()> {
        let list: serde_json::Value = serde_json::from_str(&list_json)
            .map_err(|e| to_napi(Error::Invalid(format!("setEgressAllow(list): {e}"))))?;
        self.inner.set_egress_allow(&list).await.map_err(to_napi)
    }

    /// `fork()`'s copy (an addition): this Sandbox's workspace into `child`'s, on a worker
    /// thread; resolves to `[files, bytes, reflinked, ...skipped paths]`. `frozen`: a paused
    /// kernel of this Sandbox, whose fork this is (it may stay open meanwhile).
    #[napi(ts_return_type = "Promise<Array<number | string>>")]
    pub fn copy_workspace_to(
        &self,
        child: &NativeSandbox,
        frozen: Option<&crate::binding::kernel::NativeKernel>,
    ) -> AsyncTask<CopyWorkspace> {
        AsyncTask::new(CopyWorkspace {
            from: self.inner.clone(),
            to: child.inner.clone(),
            frozen: frozen.map(|k| k.inner.clone()),
        })
    }

    /// `checkpoint(dir)` (an addition; a kernel's too, with its saved `state` and the kernel,
    /// paused): writes the checkpoint on a worker thread; resolves to its manifest as JSON.
    /// `meta_json`: `{ image, kernel }`.
    #[napi(ts_return_type = "Promise<string>")]
    pub fn write_checkpoint(
        &self,
        dir: String,
        state: Option<&crate::binding::kernel::NativeKernelState>,
        frozen: Option<&crate::binding::kernel::NativeKernel>,
        meta_json: String,
    ) -> napi::Result<AsyncTask<WriteCheckpoint>> {
        let meta = serde_json::from_str(&meta_json)
            .map_err(|e| to_napi(Error::Invalid(format!("checkpoint meta: {e}"))))?;
        Ok(AsyncTask::new(WriteCheckpoint {
            sandbox: self.inner.clone(),
            dir: dir.into(),
            state: state.map(|s| s.inner.clone()),
            frozen: frozen.map(|k| k.inner.clone()),
            meta: Some(meta),
        }))
    }

    /// A checkpoint's workspace (`readCheckpoint`) into this Sandbox's empty one, checked as it
    /// lands (`restoreKernel`, `fromCheckpoint`).
    #[napi(ts_return_type = "Promise<void>")]
    pub fn restore_checkpoint_workspace(
        &self,
        ckpt: &NativeCheckpoint,
    ) -> AsyncTask<RestoreCheckpoint> {
        AsyncTask::new(RestoreCheckpoint {
            sandbox: self.inner.clone(),
            ckpt: ckpt.inner.clone(),
        })
    }

    /// `pause()` (an addition): freezes a `persist` Sandbox's resident box.
    #[napi]
    pub async fn pause(&self) -> napi::Result<()> {
        self.inner.set_paused(true).await.map_err(to_napi)
    }

    /// `resume()` (an addition): thaws a paused resident box.
    #[napi]
    pub async fn resume(&self) -> napi::Result<()> {
        self.inner.set_paused(false).await.map_err(to_napi)
    }

    /// `paused` (an addition): whether the resident box is paused.
    #[napi(getter)]
    pub fn paused(&self) -> bool {
        self.inner.is_paused()
    }

    /// Stops the resident box of a `persist` sandbox; a no-op otherwise.
    #[napi]
    pub async fn destroy(&self) -> napi::Result<()> {
        self.inner.destroy().await.map_err(to_napi)
    }

    /// At process exit, for a Sandbox never closed: removes the temporary workspace it made.
    #[napi]
    pub fn abandon(&self) {
        self.inner.abandon();
    }

    /// Registers the abort of a call about to start (`exec`'s `call_id`), synchronously.
    #[napi]
    pub fn begin_call(&self) -> napi::Result<u32> {
        self.aborts.begin()
    }

    /// Aborts the call `beginCall` gave `id` (its box is ended); a call already over is left
    /// alone.
    #[napi]
    pub fn abort_call(&self, id: u32) -> napi::Result<()> {
        self.aborts.abort(id)
    }

    /// Runs one call; resolves to the result once every chunk was delivered. `stdin`: the
    /// bytes the workload reads on fd 0 (else /dev/null); `call_id`: its abort (`beginCall`).
    /// Not an `async fn`: the call learns, on the JS thread, when its result is handed over
    /// (`CallInput::delivered`), which only a promise made here can say.
    #[napi(ts_return_type = "Promise<NativeResult>")]
    #[allow(clippy::too_many_arguments)]
    pub fn exec<'env>(
        &self,
        env: &'env Env,
        request_json: String,
        on_stdout: Option<ChunkFn>,
        on_stderr: Option<ChunkFn>,
        stdin: Option<Buffer>,
        call_id: Option<u32>,
        on_result: Option<ResultFn>,
    ) -> napi::Result<PromiseRaw<'env, NativeResult>> {
        let (inner, aborts) = (self.inner.clone(), self.aborts.clone());
        let stdin = stdin.map(|b| b.to_vec());
        let (delivered, on_js) = tokio::sync::oneshot::channel();
        let call = async move {
            let (_registered, abort) = aborts.of(call_id)?;
            let req: ExecRequest = serde_json::from_str(&request_json)
                .map_err(|e| to_napi(Error::Invalid(format!("bad call request: {e}"))))?;
            if let Some(b) = &stdin {
                crate::session::check_stdin(b.len()).map_err(to_napi)?;
            }
            let (live, results) = LiveResults::new(on_result);
            let input = CallInput {
                stdin,
                abort,
                results: live,
                delivered: Some(on_js),
            };
            let (tx, forwarder) = forwarder(on_stdout, on_stderr);
            let result = inner.exec(req, input, tx).await;
            results.done().await;
            Ok((finish(result, forwarder).await?, delivered))
        };
        env.spawn_future_with_callback(call, |_, (result, delivered)| {
            // On the JS thread, as the promise resolves: the call's leftover work may start.
            let _ = delivered.send(());
            Ok(result)
        })
    }

    /// Starts a background process (`spawn`), or with `terminal` a program on a terminal of its
    /// box; `request_json` is `session::ProcessRequest`. Resolves once its workload starts.
    #[napi]
    pub async fn start_process(
        &self,
        request_json: String,
        terminal: bool,
        on_stdout: ChunkFn,
        on_stderr: ChunkFn,
    ) -> napi::Result<NativeProcess> {
        let req: crate::session::ProcessRequest = serde_json::from_str(&request_json)
            .map_err(|e| to_napi(Error::Invalid(format!("bad process request: {e}"))))?;
        let (tx, forwarder) = forwarder(Some(on_stdout), Some(on_stderr));
        let tx = tx.ok_or_else(|| to_napi(Error::Runtime("no output forwarder".into())))?;
        let process = self
            .inner
            .start_process(req, terminal, tx)
            .await
            .map_err(to_napi)?;
        Ok(NativeProcess {
            inner: Arc::new(process),
            forwarder: tokio::sync::Mutex::new(forwarder),
        })
    }

    /// Opens a kernel; `options_json` is `{ timeoutS?, jupyter?, language?, cwd?, env? }`.
    #[napi]
    pub async fn kernel(&self, options_json: String) -> napi::Result<NativeKernel> {
        let opts: crate::session::KernelRequest = serde_json::from_str(&options_json)
            .map_err(|e| to_napi(Error::Invalid(format!("kernel() options: {e}"))))?;
        let k = self.inner.kernel(opts).await.map_err(to_napi)?;
        Ok(NativeKernel {
            inner: Arc::new(k),
            aborts: Aborts::default(),
        })
    }
}

/// ADDITION: `readFile` ranges, `createReadStream`, `createWriteStream` (js/streams.js makes
/// the Node streams) and `isolation()`.
#[napi]
impl NativeSandbox {
    /// `readFile(path, { offset?, length?, maxBytes? })` with a range (the JS layer has checked
    /// the numbers: non-negative safe integers).
    #[napi]
    pub async fn read_range(
        &self,
        path: String,
        offset: f64,
        length: Option<f64>,
        max_bytes: Option<f64>,
    ) -> napi::Result<Buffer> {
        let n = |name: &str, v: f64| -> napi::Result<u64> {
            if v.is_finite() && v >= 0.0 && v.fract() == 0.0 {
                Ok(v as u64)
            } else {
                Err(to_napi(Error::Invalid(format!(
                    "readFile {name} must be a non-negative integer, got {v}"
                ))))
            }
        };
        let offset = n("offset", offset)?;
        let length = length.map(|v| n("length", v)).transpose()?;
        let max = max_bytes.map(|v| n("maxBytes", v)).transpose()?;
        let data = self
            .inner
            .read_range(path, offset, length, max)
            .await
            .map_err(to_napi)?;
        Ok(Buffer::from(data))
    }

    /// The measured posture of this Sandbox's boxes, as JSON (`isolation()`).
    #[napi]
    pub async fn isolation(&self) -> napi::Result<String> {
        let m = self.inner.isolation().await.map_err(to_napi)?;
        serde_json::to_string(&m).map_err(|e| {
            to_napi(Error::Runtime(format!(
                "serialise the isolation report: {e}"
            )))
        })
    }

    /// A workspace file open for chunked reads (`createReadStream`).
    #[napi]
    pub async fn open_read(&self, path: String) -> napi::Result<NativeReadStream> {
        let s = self.inner.open_read(path).await.map_err(to_napi)?;
        Ok(NativeReadStream { inner: s })
    }

    /// A watch of the workspace's changes below `path` (`watch()`); `options_json` is
    /// `{ recursive?, include?, exclude? }`.
    #[napi]
    pub async fn watch(&self, path: String, options_json: String) -> napi::Result<NativeWatch> {
        let req: crate::session::WatchRequest = serde_json::from_str(&options_json)
            .map_err(|e| to_napi(Error::Invalid(format!("watch() options: {e}"))))?;
        let w = self.inner.watch(path, req).await.map_err(to_napi)?;
        Ok(NativeWatch { inner: w })
    }

    /// A URL on the host into a port of the Sandbox's running processes (`publish()`);
    /// `request_json` is `session::PublishRequest`.
    #[napi]
    pub async fn publish(&self, request_json: String) -> napi::Result<NativePublished> {
        let req = request(&request_json)?;
        let inner = self.inner.publish(&req).await.map_err(to_napi)?;
        Ok(NativePublished { inner })
    }

    /// A write that lands at `commit()` (`createWriteStream`).
    #[napi]
    pub async fn begin_write(&self, path: String) -> napi::Result<NativeWriteStream> {
        let s = self.inner.begin_write(path).await.map_err(to_napi)?;
        Ok(NativeWriteStream { inner: s })
    }
}

/// `copyWorkspaceTo`'s work: a blocking tree copy, on libuv's worker pool.
pub struct CopyWorkspace {
    from: Arc<Sandbox>,
    to: Arc<Sandbox>,
    frozen: Option<Arc<crate::session::OpenKernel>>,
}

impl Task for CopyWorkspace {
    type Output = crate::workspace::copy::CopyReport;
    type JsValue = Vec<serde_json::Value>;

    fn compute(&mut self) -> napi::Result<Self::Output> {
        self.from
            .copy_workspace_to(&self.to, self.frozen.as_deref())
            .map_err(to_napi)
    }

    fn resolve(&mut self, _env: Env, r: Self::Output) -> napi::Result<Self::JsValue> {
        let mut out = vec![r.files.into(), r.bytes.into(), r.reflinked.into()];
        out.extend(r.skipped.into_iter().map(serde_json::Value::from));
        Ok(out)
    }
}

/// `writeCheckpoint`'s work, on libuv's worker pool.
pub struct WriteCheckpoint {
    sandbox: Arc<Sandbox>,
    dir: std::path::PathBuf,
    state: Option<Arc<crate::lang::state::KernelState>>,
    frozen: Option<Arc<crate::session::OpenKernel>>,
    meta: Option<crate::session::checkpoint::Meta>,
}

impl Task for WriteCheckpoint {
    type Output = String;
    type JsValue = String;

    fn compute(&mut self) -> napi::Result<Self::Output> {
        let manifest = self
            .sandbox
            .write_checkpoint(
                &self.dir,
                self.state.as_deref(),
                self.frozen.as_deref(),
                self.meta.take().unwrap_or_default(),
            )
            .map_err(to_napi)?;
        serde_json::to_string(&manifest).map_err(|e| to_napi(Error::Runtime(e.to_string())))
    }

    fn resolve(&mut self, _env: Env, out: String) -> napi::Result<String> {
        Ok(out)
    }
}

/// A checkpoint read and checked (`readCheckpoint`): its manifest and, for a kernel's, its
/// state, held on the host.
#[napi]
pub struct NativeCheckpoint {
    inner: Arc<crate::session::checkpoint::Checkpoint>,
}

#[napi]
impl NativeCheckpoint {
    /// The manifest, as JSON.
    #[napi(getter)]
    pub fn manifest(&self) -> String {
        serde_json::to_string(&self.inner.manifest).unwrap_or_else(|_| "{}".into())
    }

    /// A kernel's checkpoint's state; null for a Sandbox's.
    #[napi(getter)]
    pub fn state(&self) -> Option<crate::binding::kernel::NativeKernelState> {
        self.inner
            .state
            .clone()
            .map(|inner| crate::binding::kernel::NativeKernelState { inner })
    }
}

/// Reads the checkpoint in `dir` and checks it (its MAC under this host's key, its state's
/// hash), on a worker thread.
#[napi(ts_return_type = "Promise<NativeCheckpoint>")]
pub fn read_checkpoint(dir: String) -> AsyncTask<ReadCheckpoint> {
    AsyncTask::new(ReadCheckpoint { dir: dir.into() })
}

pub struct ReadCheckpoint {
    dir: std::path::PathBuf,
}

impl Task for ReadCheckpoint {
    type Output = crate::session::checkpoint::Checkpoint;
    type JsValue = NativeCheckpoint;

    fn compute(&mut self) -> napi::Result<Self::Output> {
        crate::session::checkpoint::read(&self.dir).map_err(to_napi)
    }

    fn resolve(&mut self, _env: Env, c: Self::Output) -> napi::Result<NativeCheckpoint> {
        Ok(NativeCheckpoint { inner: Arc::new(c) })
    }
}

pub struct RestoreCheckpoint {
    sandbox: Arc<Sandbox>,
    ckpt: Arc<crate::session::checkpoint::Checkpoint>,
}

impl Task for RestoreCheckpoint {
    type Output = ();
    type JsValue = ();

    fn compute(&mut self) -> napi::Result<()> {
        self.sandbox
            .restore_checkpoint_workspace(&self.ckpt)
            .map(|_| ())
            .map_err(to_napi)
    }

    fn resolve(&mut self, _env: Env, (): ()) -> napi::Result<()> {
        Ok(())
    }
}
