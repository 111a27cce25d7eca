//! A Sandbox session: options, the workspace, and one fresh box per call. The binding is a thin
//! layer over this; nothing here knows napi. This file is the front: `Sandbox` and its public
//! methods, which hand the work to the files named for it.
//!
//! - `open`: bringing a session up (and its resident box, with `persist`); `opened`: the opened
//!   state, its boxes' spec and `shut_down`; `writers`: who may be writing to the workspace.
//! - Every call goes one way: `prepared` (the workload, timeout, the call's own env and cwd
//!   from `percall`, the box's spec and size check, the workspace before), then `route` (which
//!   box serves it: a prewarmed box, a zygote fork, the resident box, a fresh box), then the
//!   box. `call` runs `run`/`runCode` so; `process` a process steered while it runs (`spawn`,
//!   `terminal`); `result`: what a call returns and how it is assembled; `host_files`:
//!   readFile, writeFile, listFiles, snapshot, restore.
//! - `spares`: the one type for everything made ahead of a call (spare kerns, the zygote's
//!   forks, prewarmed boxes); `prewarm`: the prewarmed boxes; `zygote`: what the session holds
//!   of its zygote, `zygote_start` starting it.
//! - `kernel`: the kernels (one lifecycle; the python driver's kind, the Jupyter kind);
//!   `longbox`: the long-lived boxes they run in, and `kernel()`.
//! - `resident`: a session's side of the resident box (`persist`); `setup` and `deps`: the
//!   `setup` box and `.deps`; `pyc`: the compiled stdlib; `network`: the boxes' ways out;
//!   `stderr`: a call's stderr and kern's notes in it; `isolation`: what `isolation()` reports,
//!   `probes` the probe boxes that measure it.
//! - `options` (the options object, read by group), `host_binds` (the `mounts` policy) and
//!   `profiles` (`kern.toml`) make the `crate::config::Config` a session opens with.

mod call;
pub mod checkpoint;
mod deps;
pub mod host_binds;
mod host_files;
pub mod isolation;
pub mod kernel;
mod longbox;
pub mod network;
mod open;
mod opened;
pub mod options;
mod pause;
mod percall;
mod prepared;
mod prewarm;
mod probes;
mod process;
pub mod profiles;
pub mod publish;
mod pyc;
mod resident;
mod result;
mod route;
pub mod setup;
mod spares;
pub mod stderr;
mod watching;
pub(crate) mod writers;
pub(crate) mod zygote;
mod zygote_start;

pub use host_files::{ReadStream, WriteStream, MAX_CHUNK};
pub use kernel::OpenKernel;
pub use longbox::KernelRequest;
pub use percall::{check_stdin, CallInput};
pub use process::{Process, ProcessRequest};
pub use result::{ExecRequest, ExecResult};
pub use stderr::Stderr;
pub use watching::{Watch, WatchRequest};

use crate::engine::addon::launch::ChunkSender;
use crate::error::{Error, Result};
use crate::workspace::archive;
use crate::workspace::track::FileInfo;
use opened::Opened;
use std::path::PathBuf;
use std::sync::Arc;
use tokio::sync::Mutex;

enum State {
    New,
    Open(Arc<Opened>),
    Closed,
}

/// A session: its options until open(), then the opened state until close().
pub struct Sandbox {
    options: serde_json::Value,
    kern: PathBuf,
    state: Mutex<State>,
}

impl Sandbox {
    pub fn new(options: serde_json::Value, kern: PathBuf) -> Sandbox {
        Sandbox {
            options,
            kern,
            state: Mutex::new(State::New),
        }
    }

    /// Validates the options, prepares the workspace and runs `setup` (its output to `sink`).
    /// A second call is a no-op.
    /// `abort`: open()'s `signal` (an addition), which ends it at its next step.
    pub async fn open(
        &self,
        sink: Option<ChunkSender>,
        abort: Option<tokio::sync::watch::Receiver<bool>>,
    ) -> Result<()> {
        let mut state = self.state.lock().await;
        match &*state {
            State::Open(_) => return Ok(()),
            State::Closed => {
                return Err(Error::Closed(
                    "this Sandbox was closed; create a new Sandbox".into(),
                ))
            }
            State::New => {}
        }
        let config = options::parse(&self.options)?;
        let required = isolation::required(&self.options)?;
        *state = State::Open(open::open(config, &self.kern, sink, &required, abort).await?);
        Ok(())
    }

    /// Deletes the workspace if the session created it. Idempotent.
    pub async fn close(&self) -> Result<()> {
        // The state lock is held to the end, so a second close() waits for this one to finish
        // (boxes ended, workspace deleted) before it returns.
        let mut state = self.state.lock().await;
        let previous = std::mem::replace(&mut *state, State::Closed);
        if let State::Open(opened) = previous {
            opened.shut_down().await?;
        }
        Ok(())
    }

    /// Stops the resident box of a `persist` sandbox (opened here or not, from any process).
    /// Idempotent; nothing to do without `persist`.
    pub async fn destroy(&self) -> Result<()> {
        let config = options::parse(&self.options)?;
        match config.resident {
            Some(r) => resident::destroy(r.name).await,
            None => Ok(()),
        }
    }

    /// The process is exiting without close(): remove the temporary workspace (a kept one is
    /// the caller's). Its boxes are dying with the process (their kern's lifeline closed), so
    /// this is best effort, and synchronous: there is no later.
    pub fn abandon(&self) {
        if let Ok(State::Open(o)) = self.state.try_lock().as_deref() {
            if let Ok(mut ws) = o.workspace.lock() {
                let _ = ws.dispose();
            }
        }
    }

    async fn opened(&self) -> Result<Arc<Opened>> {
        match &*self.state.lock().await {
            State::Open(o) => Ok(o.clone()),
            State::New => Err(Error::NotOpen(
                "the Sandbox is not open; call `await sandbox.open()` first (or use withSandbox)"
                    .into(),
            )),
            State::Closed => Err(Error::Closed(
                "the Sandbox is closed; open a new Sandbox to run more code".into(),
            )),
        }
    }

    /// The open session, without waiting: for the synchronous snapshot()/restore().
    fn opened_now(&self) -> Result<Arc<Opened>> {
        match self.state.try_lock().as_deref() {
            Ok(State::Open(o)) => Ok(o.clone()),
            Ok(State::New) => Err(Error::NotOpen(
                "the Sandbox is not open; call `await sandbox.open()` first (or use withSandbox)"
                    .into(),
            )),
            Ok(State::Closed) => Err(Error::Closed(
                "the Sandbox is closed; open a new Sandbox".into(),
            )),
            Err(_) => crate::invalid!(
                "the Sandbox is opening or closing; await open()/close() before snapshot() or restore()"
            ),
        }
    }

    /// ADDITION: `pause()` (`frozen`) / `resume()` of a `persist` Sandbox: its resident box,
    /// with the processes its calls left running, frozen (memory kept, no CPU) or thawed.
    pub async fn set_paused(&self, frozen: bool) -> Result<()> {
        let opened = self.opened().await?;
        match opened.resident.get() {
            Some(a) => a.set_paused(frozen).await,
            None => crate::invalid!(
                "pause() and resume() are for a `persist` Sandbox (its resident box) and for kernels: without persist, each call's box ends with the call and nothing runs between calls; pause a kernel instead (`await (await sb.kernel()).pause()`)"
            ),
        }
    }

    /// ADDITION: whether a `persist` Sandbox's resident box is paused.
    pub fn is_paused(&self) -> bool {
        self.opened_now()
            .ok()
            .and_then(|o| o.resident.get().map(|a| a.is_paused()))
            .unwrap_or(false)
    }

    /// `readFile`: host-direct, no symlink followed anywhere in the path (see `workspace::files`).
    pub async fn read_file(&self, path: String, max_bytes: Option<u64>) -> Result<Vec<u8>> {
        host_files::read_file(self.opened().await?, path, max_bytes).await
    }

    /// ADDITION: `isolation()`: the posture a box of this session gets, measured once by a
    /// probe box (at open() with `requireIsolation`, else at the first call here).
    /// With `routes`: each route a call can take, measured in its own box (once too).
    pub async fn isolation(&self) -> Result<isolation::Isolation> {
        let opened = self.opened().await?;
        let mut m = probes::measure(&opened, &self.kern).await?;
        let routes = opened
            .isolation_routes
            .get_or_try_init(|| probes::measure_routes(&opened, &self.kern))
            .await?;
        m.routes = Some(routes.clone());
        Ok(m)
    }

    /// ADDITION: `readFile` of a range, under the same path rules.
    pub async fn read_range(
        &self,
        path: String,
        offset: u64,
        length: Option<u64>,
        max_bytes: Option<u64>,
    ) -> Result<Vec<u8>> {
        host_files::read_range(self.opened().await?, path, offset, length, max_bytes).await
    }

    /// ADDITION: `createReadStream`'s file, open for chunked reads.
    pub async fn open_read(&self, path: String) -> Result<ReadStream> {
        host_files::open_read(self.opened().await?, path).await
    }

    /// ADDITION (issue 35): `watch(path, opts)`: the workspace's changes below `path` as events.
    pub async fn watch(&self, path: String, req: WatchRequest) -> Result<Watch> {
        watching::start(self.opened().await?, path, req).await
    }

    /// ADDITION: `createWriteStream`'s temp file, put in place at commit.
    pub async fn begin_write(&self, path: String) -> Result<WriteStream> {
        host_files::begin_write(self.opened().await?, path).await
    }

    /// `writeFile`: host-direct and atomic; what it creates is owned like the workspace.
    pub async fn write_file(&self, path: String, data: Vec<u8>) -> Result<()> {
        host_files::write_file(self.opened().await?, path, data).await
    }

    /// `listFiles`: the regular files, `.deps` left out, bounded.
    pub async fn list_files(&self, subdir: Option<String>) -> Result<Vec<FileInfo>> {
        host_files::list_files(self.opened().await?, subdir).await
    }

    /// `snapshot`: a gzip tar of the workspace, taken while no box of this session runs (it
    /// refuses otherwise, and calls made meanwhile wait for it).
    pub fn snapshot(&self, dest: &std::path::Path) -> Result<archive::SnapshotReport> {
        host_files::snapshot(&*self.opened_now()?, dest)
    }

    /// ADDITION: `fork()`'s copy: this Sandbox's workspace into `child`'s (a Sandbox just opened
    /// with the same options), while no box of either runs but `frozen` (a kernel of this
    /// Sandbox held still: a kernel's fork).
    pub fn copy_workspace_to(
        &self,
        child: &Sandbox,
        frozen: Option<&OpenKernel>,
    ) -> Result<crate::workspace::copy::CopyReport> {
        host_files::copy_workspace(&*self.opened_now()?, &*child.opened_now()?, frozen)
    }

    /// ADDITION: a checkpoint of this Sandbox's workspace, and of a kernel's saved `state`
    /// (`frozen`: that kernel, paused), into the host directory `dir` (see `checkpoint`).
    pub fn write_checkpoint(
        &self,
        dir: &std::path::Path,
        state: Option<&crate::lang::state::KernelState>,
        frozen: Option<&OpenKernel>,
        meta: checkpoint::Meta,
    ) -> Result<checkpoint::Manifest> {
        let opened = self.opened_now()?;
        if opened.resident.get().is_some() {
            return crate::invalid!("checkpoint() of a `persist` Sandbox is not available: its resident box's running processes can't be written to disk safely yet (see docs/reference.md, \"Live state\"); checkpoint a Sandbox without persist, or a kernel");
        }
        let meta = checkpoint::Meta {
            image: self.image_option(),
            ..meta
        };
        checkpoint::write(&opened, dir, state, frozen, meta)
    }

    /// ADDITION: a checkpoint's workspace copied into this Sandbox's, which must be empty.
    pub fn restore_checkpoint_workspace(
        &self,
        ckpt: &checkpoint::Checkpoint,
    ) -> Result<crate::workspace::copy::CopyReport> {
        checkpoint::restore_workspace(&*self.opened_now()?, self.image_option().as_deref(), ckpt)
    }

    /// The `image` option as given (None: the default image).
    fn image_option(&self) -> Option<String> {
        self.options
            .get("image")
            .and_then(serde_json::Value::as_str)
            .map(str::to_string)
    }

    /// `restore`: an archive from snapshot() unpacked into the workspace, every member checked
    /// before anything is written.
    pub fn restore(&self, src: &std::path::Path) -> Result<archive::RestoreReport> {
        host_files::restore(&*self.opened_now()?, src)
    }

    /// Opens a kernel: by default one long-lived box running our python driver (or, with
    /// `language`, the node driver); with `jupyter`, the image's Jupyter kernelspec of that name.
    /// Its options are checked before the session is waited for.
    pub async fn kernel(&self, req: KernelRequest) -> Result<OpenKernel> {
        let checked = longbox::KernelPlan::of(&req, &options::workspace_target(&self.options)?)?;
        let opened = self.opened().await?;
        longbox::open_kernel(opened, &self.kern, checked).await
    }

    /// Starts a background process (`spawn`) or, with `terminal`, a program on a terminal of
    /// its box, in a fresh box of the session; its output goes to `sink` as it comes.
    pub async fn start_process(
        &self,
        req: ProcessRequest,
        terminal: bool,
        sink: ChunkSender,
    ) -> Result<Process> {
        let opened = self.opened().await?;
        Process::start(opened, &self.kern, req, terminal, sink).await
    }

    /// ADDITION: a URL on the host into port `req.port` of the newest of the Sandbox's running
    /// processes that accepts on it, chosen for each connection (`publish()`); until its
    /// `close()` or the Sandbox's.
    pub async fn publish(&self, req: &publish::PublishRequest) -> Result<publish::Published> {
        let opened = self.opened().await?;
        let closing = opened.closing.subscribe();
        publish::publish(publish::Target::Sandbox(opened), closing, req, "publish()").await
    }

    /// `setEgressAllow`: the allowlist (JSON, checked as the option is) for every connection
    /// from now on, of every box of the session, running or not. Connections already through
    /// the proxy go on. Only for a session opened with `egressAllow` (`[]` included).
    pub async fn set_egress_allow(&self, list: &serde_json::Value) -> Result<()> {
        let opened = self.opened().await?;
        let Some(proxy) = &opened.proxy else {
            return crate::invalid!("setEgressAllow() needs a Sandbox opened with `egressAllow`: without it the boxes have no proxy to steer (no network, or the host's); open it with `egressAllow: []` to start with nothing allowed, or `[\"*\"]` for every public host, and change the list later");
        };
        proxy.set_policy(options::egress_list(list)?);
        Ok(())
    }

    /// Runs one call in a fresh box; `input` is what it brings beside its request's data.
    pub async fn exec(
        &self,
        req: ExecRequest,
        input: CallInput,
        sink: Option<ChunkSender>,
    ) -> Result<ExecResult> {
        let opened = self.opened().await?;
        call::exec(opened, &self.kern, req, input, sink).await
    }
}
