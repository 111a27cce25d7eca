//! The napi exports: JS values in, engine types out, errors as stable codes. The public JS layer
//! (`js/index.js`) wraps this private `NativeSandbox` and maps the codes to error classes.

use crate::engine::addon::launch::{ChunkSender, Stream};
use crate::error::Error;
use crate::session::{CallInput, ExecRequest, Sandbox};
use napi::bindgen_prelude::Buffer;
use napi::threadsafe_function::ThreadsafeFunction;
use napi_derive::napi;
use std::path::PathBuf;
use std::sync::Arc;

/// A chunk callback: `(chunk: Buffer) => void | Promise<void>`, errors handled by the JS
/// wrapper, which hands back the promise of an async callback so it can be waited for.
type ChunkFn = ThreadsafeFunction<
    Buffer,
    Option<napi::bindgen_prelude::Promise<()>>,
    Buffer,
    napi::Status,
    false,
>;
/// How long the chunk forwarder waits for an async callback's promise; one that has not
/// settled by then is not waited for again in this call (the box waits for the callback, not
/// for ever).
const PROMISE_WAIT: std::time::Duration = std::time::Duration::from_secs(10);
/// `onResult`: each rich result of a python cell, as it is kept.
type ResultFn = ThreadsafeFunction<NativeBundle, (), NativeBundle, napi::Status, false>;

/// napi-rs can't reject with a JS subclass, so the code rides in front of the message
/// (`[ERR_FILE] ...`) and the JS layer turns it into the class and `code`; extra properties (a
/// failed setup's exit code) follow the message after a NUL, as JSON. Not napi's own
/// `Error::new(status, ..)` with a string status (which sets `code`): napi 3.16's async
/// methods must return `napi::Error<Status>` (`execute_tokio_future` takes
/// `impl Into<Error>`), and most of ours are async; one channel serves both kinds.
fn to_napi(e: Error) -> napi::Error {
    let details = e.details().map(|d| format!("\0{d}")).unwrap_or_default();
    napi::Error::from_reason(format!("[{}] {e}{details}", e.code()))
}

#[napi]
pub struct NativeSandbox {
    inner: Arc<Sandbox>,
    aborts: Aborts,
}

/// The aborts of calls with a `signal`, by the id `begin` gave: registered on the JS thread
/// before the call's future exists, so an abort can never come before its call. A Sandbox's
/// calls have one registry, a kernel's cells another.
#[derive(Clone, Default)]
struct Aborts(Arc<std::sync::Mutex<AbortIds>>);

#[derive(Default)]
struct AbortIds {
    next: u32,
    by_id: std::collections::HashMap<u32, tokio::sync::watch::Sender<bool>>,
}

impl Aborts {
    /// Registers the abort of a call about to start, synchronously.
    fn begin(&self) -> napi::Result<u32> {
        let mut a = self.0.lock().map_err(|_| poisoned())?;
        a.next = a.next.wrapping_add(1);
        let id = a.next;
        a.by_id.insert(id, tokio::sync::watch::channel(false).0);
        Ok(id)
    }

    /// Aborts the call `begin` gave `id`; a call already over is left alone.
    fn abort(&self, id: u32) -> napi::Result<()> {
        let a = self.0.lock().map_err(|_| poisoned())?;
        if let Some(tx) = a.by_id.get(&id) {
            tx.send_replace(true);
        }
        Ok(())
    }

    /// Forgets call `id` (it is over).
    fn end(&self, id: u32) {
        if let Ok(mut a) = self.0.lock() {
            a.by_id.remove(&id);
        }
    }

    /// The abort of call `id` (none without an id), with its registration, which goes when the
    /// guard is dropped whatever happens to the call.
    fn of(
        &self,
        id: Option<u32>,
    ) -> napi::Result<(
        Option<Registered>,
        Option<tokio::sync::watch::Receiver<bool>>,
    )> {
        let Some(id) = id else {
            return Ok((None, None));
        };
        let registered = Registered(self.clone(), id);
        let a = self.0.lock().map_err(|_| poisoned())?;
        let abort = a.by_id.get(&id).map(tokio::sync::watch::Sender::subscribe);
        Ok((Some(registered), abort))
    }
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
    ) -> napi::Result<()> {
        let (tx, forwarder) = forwarder(on_stdout, on_stderr);
        let result = self.inner.open(tx).await;
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
    #[napi]
    pub async fn exec(
        &self,
        request_json: String,
        on_stdout: Option<ChunkFn>,
        on_stderr: Option<ChunkFn>,
        stdin: Option<Buffer>,
        call_id: Option<u32>,
        on_result: Option<ResultFn>,
    ) -> napi::Result<NativeResult> {
        let (_registered, abort) = self.aborts.of(call_id)?;
        let req: ExecRequest = serde_json::from_str(&request_json)
            .map_err(|e| to_napi(Error::Invalid(format!("bad call request: {e}"))))?;
        let input = CallInput {
            stdin: match stdin {
                Some(b) => {
                    crate::session::check_stdin(b.len()).map_err(to_napi)?;
                    Some(b.to_vec())
                }
                None => None,
            },
            abort,
            results: None,
        };
        let (live, results) = LiveResults::new(on_result);
        let input = CallInput {
            results: live,
            ..input
        };
        let (tx, forwarder) = forwarder(on_stdout, on_stderr);
        let result = self.inner.exec(req, input, tx).await;
        results.done().await;
        finish(result, forwarder).await
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

fn poisoned() -> napi::Error {
    to_napi(Error::Runtime(
        "the call registry's lock is poisoned".into(),
    ))
}

/// A call's abort registration, removed when the call is over.
struct Registered(Aborts, u32);

impl Drop for Registered {
    fn drop(&mut self) {
        self.0.end(self.1);
    }
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct CellRequest {
    code: String,
    timeout_s: Option<serde_json::Value>,
}

/// A kernel (see `session::kernel`: the driver kind and the Jupyter kind).
#[napi]
pub struct NativeKernel {
    inner: Arc<crate::session::OpenKernel>,
    /// The aborts of cells with a `signal` (as `NativeSandbox`'s of calls).
    aborts: Aborts,
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

    /// Runs one cell; `request_json` is `{ code, timeoutS? }`; `call_id`: its abort
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
        let (tx, forwarder) = forwarder(on_stdout, on_stderr);
        let (live, results) = LiveResults::new(on_result);
        let result = self
            .inner
            .run_code(&req.code, timeout_ms, tx, live, abort)
            .await;
        results.done().await;
        finish(result, forwarder).await
    }

    #[napi]
    pub async fn close(&self) -> napi::Result<()> {
        self.inner.close().await.map_err(to_napi)
    }
}

/// A process started by `startProcess` (see `session::Process`).
#[napi]
pub struct NativeProcess {
    inner: Arc<crate::session::Process>,
    /// Delivers its output; awaited before `wait` resolves, so every chunk came first.
    forwarder: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

#[napi]
impl NativeProcess {
    /// Its pid in its box.
    #[napi(getter)]
    pub fn pid(&self) -> i32 {
        self.inner.pid
    }

    #[napi]
    pub fn running(&self) -> bool {
        self.inner.running()
    }

    #[napi]
    pub async fn write(&self, data: Buffer) -> napi::Result<()> {
        self.inner.write(&data).await.map_err(to_napi)
    }

    #[napi]
    pub async fn end(&self) -> napi::Result<()> {
        self.inner.end().await.map_err(to_napi)
    }

    #[napi]
    pub async fn kill(&self, signal: Option<String>) -> napi::Result<()> {
        self.inner.kill(signal.as_deref()).await.map_err(to_napi)
    }

    /// `cols` and `rows` as JS gave them (checked in `session::Process::resize`).
    #[napi]
    pub fn resize(&self, size_json: String) -> napi::Result<()> {
        let v: serde_json::Value = serde_json::from_str(&size_json)
            .map_err(|e| to_napi(Error::Invalid(format!("resize(): {e}"))))?;
        self.inner.resize(&v["cols"], &v["rows"]).map_err(to_napi)
    }

    /// A connected socket's descriptor, now the caller's (`net.Socket({ fd })` takes it).
    #[napi]
    pub async fn connect(&self, args_json: String) -> napi::Result<i32> {
        use std::os::fd::IntoRawFd;
        let v: serde_json::Value = serde_json::from_str(&args_json)
            .map_err(|e| to_napi(Error::Invalid(format!("connect(): {e}"))))?;
        let fd = self
            .inner
            .connect(&v["port"], &v["waitS"])
            .await
            .map_err(to_napi)?;
        Ok(fd.into_raw_fd())
    }

    /// Its result once it has ended and every chunk was delivered; the first call takes it.
    #[napi]
    pub async fn wait(&self) -> napi::Result<NativeResult> {
        let result = self.inner.wait().await;
        let task = self.forwarder.lock().await.take();
        finish(result, task).await
    }
}

/// One task delivers every chunk in arrival order and waits for each callback (and the promise
/// of an async one, up to `PROMISE_WAIT`), so all of them have run before the call's promise
/// resolves. The channel is bounded (`ChunkSender`): while a callback is slow, the box's
/// writes wait for it rather than this process buffering what it wrote.
fn forwarder(
    on_stdout: Option<ChunkFn>,
    on_stderr: Option<ChunkFn>,
) -> (Option<ChunkSender>, Option<tokio::task::JoinHandle<()>>) {
    if on_stdout.is_none() && on_stderr.is_none() {
        return (None, None);
    }
    let (tx, mut rx) = crate::engine::addon::launch::chunk_channel();
    let task = tokio::spawn(async move {
        let mut await_promises = true;
        while let Some(chunk) = rx.recv().await {
            let f = match chunk.stream {
                Stream::Stdout => on_stdout.as_ref(),
                Stream::Stderr => on_stderr.as_ref(),
            };
            let Some(f) = f else { continue };
            if let Ok(Some(promise)) = f.call_async(Buffer::from(chunk.data)).await {
                if await_promises {
                    // A rejection is the JS wrapper's to report; it resolves its own promise.
                    await_promises = tokio::time::timeout(PROMISE_WAIT, promise).await.is_ok();
                }
            }
        }
    });
    (Some(tx), Some(task))
}

/// Hands each result to `onResult` as the cell keeps it, in order, from one task that waits for
/// each callback.
struct LiveResults(
    Option<(
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<()>,
    )>,
);

impl LiveResults {
    fn new(on_result: Option<ResultFn>) -> (Option<crate::lang::driver::ResultSink>, LiveResults) {
        let Some(f) = on_result else {
            return (None, LiveResults(None));
        };
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<crate::lang::driver::Item>();
        let (stop, mut stopped) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            loop {
                tokio::select! {
                    item = rx.recv() => match item {
                        Some(item) => {
                            let _ = f.call_async(native_bundle(item)).await;
                        }
                        None => return,
                    },
                    _ = &mut stopped => break,
                }
            }
            // The call is over: what was kept is delivered, and a sender that outlived the
            // call (a reader still draining a dead box's socket) adds nothing more.
            rx.close();
            while let Some(item) = rx.recv().await {
                let _ = f.call_async(native_bundle(item)).await;
            }
        });
        (Some(tx), LiveResults(Some((stop, task))))
    }

    /// Once the call is over: waits until every result kept has been handed over.
    async fn done(self) {
        if let Some((stop, task)) = self.0 {
            let _ = stop.send(());
            let _ = task.await;
        }
    }
}

async fn finish(
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
/// the rest as plain values. `js/index.js` builds the public `ExecutionResult` from it.
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
    /// The name of the signal that ended the workload, if one did.
    pub signal: Option<String>,
    pub results: Vec<NativeBundle>,
    /// The exception a cell raised (`ExecutionResult.error`).
    pub error: Option<NativeCellError>,
    /// A kernel cell's number (an addition); absent for a one-shot call.
    pub execution_count: Option<u32>,
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

fn native_bundle(item: crate::lang::driver::Item) -> NativeBundle {
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

/// ADDITION: `readFile` ranges, `createReadStream`, `createWriteStream` (js/index.js makes
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

    /// A write that lands at `commit()` (`createWriteStream`).
    #[napi]
    pub async fn begin_write(&self, path: String) -> napi::Result<NativeWriteStream> {
        let s = self.inner.begin_write(path).await.map_err(to_napi)?;
        Ok(NativeWriteStream { inner: s })
    }
}

#[napi]
pub struct NativeReadStream {
    inner: crate::session::ReadStream,
}

#[napi]
impl NativeReadStream {
    /// The file's size when it was opened.
    #[napi(getter)]
    pub fn size(&self) -> f64 {
        self.inner.size as f64
    }

    /// Up to `len` bytes (at most 1 MiB) from `position`; empty at the end of the file.
    #[napi]
    pub async fn read(&self, position: f64, len: u32) -> napi::Result<Buffer> {
        let data = self
            .inner
            .read(position as u64, len as usize)
            .await
            .map_err(to_napi)?;
        Ok(Buffer::from(data))
    }

    /// Releases the fd.
    #[napi]
    pub fn close(&self) {
        self.inner.close();
    }
}

#[napi]
pub struct NativeWriteStream {
    inner: crate::session::WriteStream,
}

#[napi]
impl NativeWriteStream {
    #[napi]
    pub async fn write(&self, data: Buffer) -> napi::Result<()> {
        self.inner.write(data.to_vec()).await.map_err(to_napi)
    }

    /// Puts the file in place.
    #[napi]
    pub async fn commit(&self) -> napi::Result<()> {
        self.inner.commit().await.map_err(to_napi)
    }

    /// Removes the temp file; the path is untouched.
    #[napi]
    pub fn abort(&self) {
        self.inner.abort();
    }
}

/// The crate version, for `version`.
#[napi]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
