//! A Sandbox session: options, the workspace, and one fresh box per call. The binding is a thin
//! layer over this; nothing here knows napi.

pub mod host_binds;
pub mod kernel;
mod longbox;
pub mod network;
pub mod options;
mod persist;
pub mod profiles;
mod pyc;
pub mod setup;
pub mod stderr;

use crate::config::Config;
use crate::engine::launch::{Chunk, Kern};
use crate::engine::spec::{BoxSpec, RootSpec, DEFAULT_HOSTNAME, DEFAULT_WORKSPACE_TARGET};
use crate::engine::status::{Fault, FaultKind};
use crate::error::{Error, Result};
use crate::lang::driver;
use crate::lang::Language;
use crate::workspace::track::{self, FileInfo};
use crate::workspace::Workspace;
use crate::workspace::{archive, files};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
pub use stderr::Stderr;
use tokio::sync::mpsc::UnboundedSender;
use tokio::sync::Mutex;

/// What one call asks for.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecRequest {
    /// `run(argv)`.
    pub argv: Option<Vec<String>>,
    /// `runCode(code)`.
    pub code: Option<String>,
    pub language: Option<String>,
    /// Per-call override of `timeoutS`.
    pub timeout_s: Option<serde_json::Value>,
}

/// What one call produced (`binding::NativeResult` carries it to the JS layer).
#[derive(Debug)]
pub struct ExecResult {
    pub stdout: String,
    /// The output and which of it is kern's notes (`runtimeNotes`, `codeStderr`).
    pub stderr: Stderr,
    pub exit_code: i32,
    pub duration_ms: f64,
    pub fault: Option<Fault>,
    pub files: Vec<FileInfo>,
    pub truncated: bool,
    /// Rich results of a python cell, in order.
    pub results: Vec<driver::Bundle>,
}

/// A kernel a caller opened: our python driver's, or a Jupyter kernel of the image.
pub enum OpenKernel {
    Driver(kernel::driver::Kernel),
    Jupyter(kernel::jupyter::JupyterKernel),
}

impl OpenKernel {
    /// Runs one cell (they run one at a time, in call order).
    pub async fn run_code(
        &self,
        code: &str,
        timeout_ms: Option<u64>,
        sink: Option<UnboundedSender<Chunk>>,
    ) -> Result<ExecResult> {
        match self {
            OpenKernel::Driver(k) => k.run_code(code, timeout_ms, sink).await,
            OpenKernel::Jupyter(k) => k.run_code(code, timeout_ms, sink).await,
        }
    }

    pub async fn close(&self) -> Result<()> {
        match self {
            OpenKernel::Driver(k) => k.close().await,
            OpenKernel::Jupyter(k) => k.close().await,
        }
    }
}

/// How long to wait, after the box ended, for the last result bytes.
const RESULTS_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// What a call changed in the workspace, from the walk before it (none when `trackFiles` is off).
async fn workspace_changes(
    before: Option<track::Snapshot>,
    workspace: &std::path::Path,
    stderr: &mut Stderr,
) -> Vec<FileInfo> {
    let Some(before) = before else {
        return Vec::new();
    };
    let ws = workspace.to_path_buf();
    let after = tokio::task::spawn_blocking(move || track::snapshot(&ws, None))
        .await
        .unwrap_or_default();
    if before.capped || after.capped {
        stderr.push_note(&format!(
                "note: the workspace has more than {} entries; result.files covers only the first ones walked (trackFiles: false skips the walk)",
                track::MAX_ENTRIES
            ),
        );
    }
    track::diff(&before, &after)
}

/// A socket to something in a box (`what`: the driver, the egress relay): our end for tokio,
/// the box's end to send to kern.
fn box_socketpair(what: &str) -> Result<(tokio::net::UnixStream, OwnedFd)> {
    let fail = |e: std::io::Error| Error::Runtime(format!("socketpair for the {what}: {e}"));
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(fail)?;
    ours.set_nonblocking(true).map_err(fail)?;
    let ours = tokio::net::UnixStream::from_std(ours).map_err(fail)?;
    Ok((ours, OwnedFd::from(theirs)))
}

/// Writes the cell to the driver and reads its frames as they come, until EOF: the results are
/// taken (within their bounds) as they arrive, so nothing beyond what they keep is held; says
/// whether the stream stopped inside a frame.
fn driver_io_on(
    sock: tokio::net::UnixStream,
    code: &str,
) -> Result<tokio::task::JoinHandle<(driver::Results, bool)>> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let (mut rx, mut tx) = sock.into_split();
    let cell = driver::cell_frame(1, code, true, None, false);
    tokio::spawn(async move {
        // A box that dies before reading the cell closes the socket: nothing to report here,
        // the call's fault says what happened.
        let _ = tx.write_all(&cell).await;
        drop(tx);
    });
    Ok(tokio::spawn(async move {
        let mut reader = driver::FrameReader::default();
        let mut results = driver::Results::default();
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            match rx.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    for f in reader.feed(&buf[..n], || results.room()) {
                        results.frame(&f);
                    }
                }
            }
        }
        results.lost(reader.skipped);
        (results, reader.cut())
    }))
}

/// How many prepared kerns a session keeps. Each has moved into its cgroup (an RCU grace
/// period, 5-40 ms here) before a call takes it; with two, a call that follows another at once
/// still finds one that finished its move during the call before.
const SPARES: usize = 2;

struct Opened {
    config: Config,
    /// `config.notes`, until the first call takes them.
    option_notes: std::sync::Mutex<Vec<String>>,
    /// The resolved image; holding it marks the image in use in the store.
    image: crate::image::Image,
    /// The workload's environment before per-call additions.
    base_env: Vec<(String, String)>,
    /// Boxes get the `.deps` environment: `setup` installs there, or an earlier session did.
    /// (`.deps` itself exists, read-only with `depsReadonly`, in every workspace.)
    deps: bool,
    workspace: std::sync::Mutex<Workspace>,
    /// Kerns that already sit in their cgroups, oldest first.
    spares: std::sync::Mutex<std::collections::VecDeque<Kern>>,
    /// Every call holds a read guard; `close()` takes the write guard, after `closing` has told
    /// the calls still running to end their boxes.
    running: tokio::sync::RwLock<()>,
    closing: tokio::sync::watch::Sender<bool>,
    /// Prewarmed one-cell python boxes (`prewarm`), oldest first.
    pool: std::sync::Mutex<std::collections::VecDeque<longbox::Slot>>,
    /// The compiled stdlib of this image (`pycCache`), once built.
    pyc: Option<pyc::Cache>,
    /// Calls in flight plus open kernels: the boxes that may be writing to the workspace.
    /// snapshot()/restore() need it at zero, and set `exclusive` while they work.
    active: AtomicUsize,
    exclusive: AtomicBool,
    /// The host CA bundle networked boxes trust (`KERN_HOST_CA=0`: none).
    ca: Option<PathBuf>,
    /// The allowlist proxy of this session's boxes (`egressAllow`).
    proxy: Option<Arc<crate::engine::proxy::Proxy>>,
    /// `persist`: the resident box every call runs in (set once open() met or started it).
    resident: std::sync::OnceLock<persist::Attached>,
}

/// Counts one box that may write to the workspace, for as long as it lives.
pub(super) struct Active(Arc<Opened>);

impl Active {
    /// Waits while a snapshot()/restore() works on the workspace, then counts this box. The
    /// order (count, then look) pairs with `Exclusive::take` (flag, then look at the count).
    async fn enter(opened: &Arc<Opened>) -> Active {
        loop {
            opened.active.fetch_add(1, Ordering::SeqCst);
            if !opened.exclusive.load(Ordering::SeqCst) {
                return Active(opened.clone());
            }
            opened.active.fetch_sub(1, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

impl Drop for Active {
    fn drop(&mut self) {
        self.0.active.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The workspace held still for snapshot()/restore(): no call running, no kernel open, and new
/// calls wait until it is dropped.
struct Exclusive<'a>(&'a Opened);

impl<'a> Exclusive<'a> {
    fn take(opened: &'a Opened, what: &str) -> Result<Exclusive<'a>> {
        if opened.exclusive.swap(true, Ordering::SeqCst) {
            return crate::invalid!("{what} can't run while another snapshot() or restore() does");
        }
        let n = opened.active.load(Ordering::SeqCst);
        if n > 0 {
            opened.exclusive.store(false, Ordering::SeqCst);
            return crate::invalid!(
                "{what} needs the workspace to hold still, and {n} call(s) or kernel(s) of this Sandbox may be writing to it; await the running calls and close() open kernels first"
            );
        }
        Ok(Exclusive(opened))
    }
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        self.0.exclusive.store(false, Ordering::SeqCst);
    }
}

impl Opened {
    /// Ends every box of the session and waits for them (the workspace must not be deleted, or
    /// walked, while a box can still write to it), then deletes the workspace if it is ours.
    async fn shut_down(&self) -> Result<()> {
        self.closing.send_replace(true);
        let _quiet = self.running.write().await;
        // Unused prewarmed boxes go (their tasks already saw `closing`).
        if let Ok(mut pool) = self.pool.lock() {
            pool.clear();
        }
        // Dropping a spare closes its lifeline: it leaves its cgroup and exits.
        if let Ok(mut spares) = self.spares.lock() {
            spares.drain(..).for_each(Kern::retire);
        }
        let mut ws = self
            .workspace
            .lock()
            .map_err(|_| Error::Runtime("workspace lock poisoned".into()))?;
        ws.dispose()
    }

    /// Builds the image's compiled stdlib in the background, if it isn't built yet; calls
    /// started meanwhile run without it. The session's close() ends the build.
    fn start_pyc_build(&self, me: &Arc<Opened>, kern: &std::path::Path) {
        let Some(cache) = self.pyc.clone() else {
            return;
        };
        if cache.bind().is_some() || cache.failure().is_some() {
            return;
        }
        // The builder replaces the workspace and everything else a box could have written
        // (pyc::builder_spec); the template brings the image and the session's limits.
        let template = self.bare_spec(Vec::new(), 0, std::path::Path::new("/nonexistent"));
        let (me, kern) = (me.clone(), kern.to_path_buf());
        tokio::spawn(async move {
            let _running = me.running.read().await;
            let cancel = me.closing.subscribe();
            if *cancel.borrow() {
                return;
            }
            // A failure is recorded in the cache and named in python calls' notes.
            let _ = cache.build(&kern, template, cancel).await;
        });
    }

    fn workspace_path(&self) -> Result<PathBuf> {
        Ok(self
            .workspace
            .lock()
            .map_err(|_| Error::Runtime("workspace lock poisoned".into()))?
            .path
            .clone())
    }

    /// The box for one call (or one kernel): the session's posture, this argv and environment.
    fn spec(
        &self,
        argv: Vec<String>,
        lang_env: &[(String, String)],
        timeout_ms: u64,
        channel: bool,
        workspace: &std::path::Path,
    ) -> BoxSpec {
        let cfg = &self.config;
        let mut env = self.base_env.clone();
        if self.deps {
            setup::deps_env(&mut env);
        }
        let mut binds = cfg.mounts.clone();
        for (k, v) in lang_env.iter().chain(&cfg.env) {
            env.retain(|(ek, _)| ek != k);
            env.push((k.clone(), v.clone()));
        }
        if let Some(b) = self.pyc.as_ref().and_then(pyc::Cache::bind) {
            binds.push(b);
            // In front of the caller's own PYTHONPATH too: the hook takes itself off sys.path.
            setup::prepend(&mut env, "PYTHONPATH", pyc::HOOK_DIR);
        }
        let mut spec = BoxSpec {
            root: self.image.root.clone(),
            workspace: workspace.to_path_buf(),
            workspace_target: DEFAULT_WORKSPACE_TARGET.into(),
            tmpfs: cfg.tmpfs.clone(),
            limits: cfg.limits.clone(),
            timeout_ms,
            argv,
            env,
            hostname: DEFAULT_HOSTNAME.into(),
            user: self.image.user.clone(),
            channel,
            binds,
            host_network: false,
            etc: Vec::new(),
            readonly_in_workspace: if cfg.deps_readonly {
                vec![setup::DEPS_DIR.into()]
            } else {
                Vec::new()
            },
            egress: None,
            apparmor: cfg.apparmor.clone(),
            keep_caps: cfg.keep_caps.clone(),
            seccomp: cfg.seccomp.clone(),
            devices: cfg.devices.clone(),
            resident: None,
            cwd: None,
        };
        match &cfg.network {
            crate::config::Network::None => {}
            crate::config::Network::Host => network::host(&mut spec, self.ca.as_deref()),
            crate::config::Network::Egress(policy) => {
                network::egress(&mut spec, self.ca.as_deref(), policy)
            }
        }
        spec
    }

    /// A box for the session's own work (the pyc build, the requireLimits probe): the image's
    /// posture (account, limits, scratch, AppArmor) without the caller's mounts, devices, deps,
    /// `env` or network.
    fn bare_spec(
        &self,
        argv: Vec<String>,
        timeout_ms: u64,
        workspace: &std::path::Path,
    ) -> BoxSpec {
        let mut spec = self.spec(argv, &[], timeout_ms, false, workspace);
        spec.binds.clear();
        spec.devices.clear();
        spec.readonly_in_workspace.clear();
        spec.env = self.base_env.clone();
        spec.host_network = false;
        spec.egress = None;
        spec.etc.clear();
        spec
    }

    /// `requireLimits` at open(): one box running `true` under the session's caps, which kern
    /// refuses to start unless it read the caps back from the box's cgroup.
    async fn check_limits(&self, kern: &std::path::Path) -> Result<()> {
        let workspace = self.workspace_path()?;
        let mut spec = self.bare_spec(vec!["true".into()], 30_000, &workspace);
        // Only the caps are under test: an AppArmor refusal would come first and hide them.
        spec.apparmor = None;
        let outcome = Kern::spawn(kern, &spec.limits)?
            .run(
                &spec,
                1 << 16,
                None,
                self.closing.subscribe(),
                Default::default(),
            )
            .await?
            .ok_or_else(|| {
                Error::Runtime("the kern runtime exited before it read the spec".into())
            })?;
        match outcome.report.limits_refused {
            Some(why) => Err(Error::Invalid(why)),
            None => Ok(()),
        }
    }

    /// The egress line for a box of this session, when its boxes go through the proxy.
    fn egress_line(&self, spec: &BoxSpec) -> Result<Option<network::Line>> {
        match (&self.proxy, &spec.egress) {
            (Some(p), Some(_)) => Ok(Some(network::Line::open(p)?)),
            _ => Ok(None),
        }
    }

    /// What the session's options and network did during a call, as runtime notes; the
    /// options' own notes come with the first call only.
    fn session_notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self
            .option_notes
            .lock()
            .map(|mut n| std::mem::take(&mut *n))
            .unwrap_or_default();
        notes.extend(self.network_notes());
        notes
    }

    /// What the session's network did during a call, as runtime notes.
    fn network_notes(&self) -> Vec<String> {
        match (&self.config.network, &self.proxy) {
            (crate::config::Network::Host, _) => vec![
                "warning: network: true: this box shared the host's network (isolation relaxed: it could reach anything the host can)".into(),
            ],
            (_, Some(p)) => network::notes(p.take_decisions()),
            _ => Vec::new(),
        }
    }

    /// Takes a live prewarmed box, and starts one in its place.
    fn take_slot(&self) -> Option<longbox::Slot> {
        if self.config.prewarm == 0 {
            return None;
        }
        let mut pool = self.pool.lock().ok()?;
        let mut taken = None;
        while let Some(s) = pool.pop_front() {
            if s.is_alive() {
                taken = Some(s);
                break;
            }
        }
        taken
    }

    /// Tops the pool up to `prewarm` slots.
    fn fill_pool(&self, me: &Arc<Opened>, kern: &std::path::Path) {
        if *self.closing.borrow() {
            return;
        }
        let Ok(mut pool) = self.pool.lock() else {
            return;
        };
        pool.retain(longbox::Slot::is_alive);
        while pool.len() < self.config.prewarm {
            match longbox::Slot::start(me.clone(), kern) {
                Ok(s) => pool.push_back(s),
                Err(_) => break,
            }
        }
    }

    /// A kern for this session's next call: prepared with the caps of a fresh box, or, in a
    /// resident session, for a call into its box.
    fn spawn_kern(&self, path: &std::path::Path) -> Result<Kern> {
        match self.resident.get() {
            Some(r) => Kern::spawn_call(path, &r.target, &self.config.limits),
            None => Kern::spawn(path, &self.config.limits),
        }
    }

    /// Takes the oldest live spare (or starts a kern) and tops the spares up, so their cgroup
    /// moves overlap this call.
    fn kern(&self, path: &std::path::Path) -> Result<Kern> {
        let mut spares = self
            .spares
            .lock()
            .map_err(|_| Error::Runtime("spare lock poisoned".into()))?;
        let mut taken = None;
        while let Some(mut k) = spares.pop_front() {
            // A spare killed from outside is skipped (`is_alive` reaped it).
            if k.is_alive() {
                taken = Some(k);
                break;
            }
        }
        let kern = match taken {
            Some(k) => k,
            None => self.spawn_kern(path)?,
        };
        while spares.len() < SPARES {
            match self.spawn_kern(path) {
                Ok(k) => spares.push_back(k),
                Err(_) => break,
            }
        }
        Ok(kern)
    }
}

enum State {
    New,
    Open(Arc<Opened>),
    Closed,
}

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
    pub async fn open(&self, sink: Option<UnboundedSender<Chunk>>) -> Result<()> {
        let mut state = self.state.lock().await;
        match &*state {
            State::Open(_) => return Ok(()),
            State::Closed => {
                return Err(Error::Invalid(
                    "this Sandbox was closed; create a new Sandbox".into(),
                ))
            }
            State::New => {}
        }
        let config = options::parse(&self.options)?;
        if !self.kern.is_file() {
            return Err(Error::Runtime(format!(
                "the kern runtime is missing: looked for {}. Reinstall kern-sandbox (its platform package carries kern), run `npm run build:debug` in a source checkout, or set KERN_BIN to a kern binary",
                self.kern.display()
            )));
        }
        crate::engine::launch::check_version(&self.kern).await?;
        let source = config.image.clone();
        let image = tokio::task::spawn_blocking(move || {
            let policy = crate::image::PullPolicy::from_env()?;
            crate::image::open(&source, policy, &mut crate::image::Quiet)
        })
        .await
        .map_err(|e| Error::Runtime(format!("the image task failed: {e}")))??;
        let mut image = image;
        if let Some(account) = &config.user {
            image.user = crate::image::resolve_user(&image.root, account)?;
        }
        let home = if config.tmpfs.iter().any(|t| t.target == "/tmp") {
            "/tmp"
        } else {
            DEFAULT_WORKSPACE_TARGET
        };
        if let RootSpec::Dir { path } = &image.root {
            for m in &config.mounts {
                host_binds::check_target_in_image(path, &m.target, m.dir)?;
            }
        }
        let base_env = crate::image::manifest::base_env(&image.config, home);
        let workspace = match &config.workspace {
            Some(p) => Workspace::existing(p)?,
            None => Workspace::temporary()?,
        };
        // Before any box: a `.deps` a box made could hold what later boxes run.
        setup::make_deps_dir(&workspace.path)?;
        let deps = setup::has_deps(config.setup.is_some(), &workspace.path);
        let ca = crate::image::net::host_ca()?;
        let proxy = match &config.network {
            crate::config::Network::Egress(policy) => Some(network::proxy(policy.clone())?),
            _ => None,
        };
        let pyc = if config.pyc_cache {
            pyc::Cache::for_image(&image)?
        } else {
            None
        };
        // A resident session's spares wait until its box is known.
        let spares = if config.resident.is_some() {
            Default::default()
        } else {
            (0..SPARES)
                .filter_map(|_| Kern::spawn(&self.kern, &config.limits).ok())
                .collect()
        };
        let opened = Arc::new(Opened {
            option_notes: std::sync::Mutex::new(config.notes.clone()),
            config,
            image,
            base_env,
            deps,
            workspace: std::sync::Mutex::new(workspace),
            spares: std::sync::Mutex::new(spares),
            running: tokio::sync::RwLock::new(()),
            closing: tokio::sync::watch::channel(false).0,
            pool: std::sync::Mutex::new(std::collections::VecDeque::new()),
            pyc,
            active: AtomicUsize::new(0),
            exclusive: AtomicBool::new(false),
            ca,
            proxy,
            resident: std::sync::OnceLock::new(),
        });
        if opened.config.resident.is_some() {
            if opened.config.limits.require {
                if let Err(e) = opened.check_limits(&self.kern).await {
                    let _ = opened.shut_down().await;
                    return Err(e);
                }
            }
            match persist::attach_or_start(&opened, &self.kern, sink).await {
                Ok(a) => {
                    let _ = opened.resident.set(a);
                }
                Err(e) => {
                    let _ = opened.shut_down().await;
                    return Err(e);
                }
            }
            if let Ok(mut spares) = opened.spares.lock() {
                spares.extend(opened.spawn_kern(&self.kern).ok());
            }
            *state = State::Open(opened);
            return Ok(());
        }
        if let Some(cmd) = opened.config.setup.clone() {
            if let Err(e) = setup::run(&opened, &self.kern, &cmd, sink).await {
                let _ = opened.shut_down().await;
                return Err(e);
            }
        }
        if opened.config.limits.require {
            // Refused here, not at the first call: a box that runs `true` tells.
            if let Err(e) = opened.check_limits(&self.kern).await {
                let _ = opened.shut_down().await;
                return Err(e);
            }
        }
        opened.start_pyc_build(&opened, &self.kern);
        opened.fill_pool(&opened, &self.kern);
        *state = State::Open(opened);
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
            Some(r) => persist::destroy(r.name).await,
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
            State::New => Err(Error::Invalid(
                "the Sandbox is not open; call `await sandbox.open()` first (or use withSandbox)"
                    .into(),
            )),
            State::Closed => Err(Error::Invalid(
                "the Sandbox is closed; open a new Sandbox to run more code".into(),
            )),
        }
    }

    /// The open session, without waiting: for the synchronous snapshot()/restore().
    fn opened_now(&self) -> Result<Arc<Opened>> {
        match self.state.try_lock().as_deref() {
            Ok(State::Open(o)) => Ok(o.clone()),
            Ok(State::New) => crate::invalid!(
                "the Sandbox is not open; call `await sandbox.open()` first (or use withSandbox)"
            ),
            Ok(State::Closed) => crate::invalid!("the Sandbox is closed; open a new Sandbox"),
            Err(_) => crate::invalid!(
                "the Sandbox is opening or closing; await open()/close() before snapshot() or restore()"
            ),
        }
    }

    /// `readFile`: host-direct, no symlink followed anywhere in the path (see `workspace::files`).
    pub async fn read_file(&self, path: String, max_bytes: Option<u64>) -> Result<Vec<u8>> {
        let opened = self.opened().await?;
        let _active = Active::enter(&opened).await;
        let ws = opened.workspace_path()?;
        let max = max_bytes.unwrap_or(files::DEFAULT_MAX_READ);
        blocking(move || files::read_file(&ws, &path, max)).await
    }

    /// `writeFile`: host-direct and atomic; what it creates is owned like the workspace.
    pub async fn write_file(&self, path: String, data: Vec<u8>) -> Result<()> {
        let opened = self.opened().await?;
        let _active = Active::enter(&opened).await;
        let ws = opened.workspace_path()?;
        blocking(move || {
            let owner = workspace_owner(&ws)?;
            files::write_file(&ws, &path, &data, owner)
        })
        .await
    }

    /// `listFiles`: the regular files, `.deps` left out, bounded.
    pub async fn list_files(&self, subdir: Option<String>) -> Result<Vec<FileInfo>> {
        let opened = self.opened().await?;
        let ws = opened.workspace_path()?;
        let listed =
            blocking(move || files::list_files(&ws, subdir.as_deref(), files::MAX_LIST_ENTRIES))
                .await?;
        Ok(listed
            .into_iter()
            .map(|l| FileInfo {
                path: l.path,
                size: l.size,
                change: "created",
            })
            .collect())
    }

    /// `snapshot`: a gzip tar of the workspace, taken while no box of this session runs (it
    /// refuses otherwise, and calls made meanwhile wait for it).
    pub fn snapshot(&self, dest: &std::path::Path) -> Result<archive::SnapshotReport> {
        let opened = self.opened_now()?;
        let _still = Exclusive::take(&opened, "snapshot()")?;
        let ws = opened.workspace_path()?;
        archive::snapshot(&ws, dest, &archive::Limits::default())
    }

    /// `restore`: an archive from snapshot() unpacked into the workspace, every member checked
    /// before anything is written.
    pub fn restore(&self, src: &std::path::Path) -> Result<archive::RestoreReport> {
        let opened = self.opened_now()?;
        let _still = Exclusive::take(&opened, "restore()")?;
        let ws = opened.workspace_path()?;
        let owner = workspace_owner(&ws)?;
        archive::restore(&ws, src, &archive::Limits::default(), owner)
    }

    /// Opens a kernel: by default one long-lived box running our python driver; with `jupyter`,
    /// the image's Jupyter kernelspec of that name. `timeout_s` is its per-cell default (the
    /// session's `timeoutS` when absent).
    pub async fn kernel(
        &self,
        timeout_s: Option<&serde_json::Value>,
        jupyter: Option<&str>,
    ) -> Result<OpenKernel> {
        if let Some(name) = jupyter {
            crate::lang::jupyter::kernelspec::check_name(name)?;
        }
        let opened = self.opened().await?;
        if opened.config.resident.is_some() {
            return crate::invalid!("kernel() is not available with `persist`: a kernel is its own long-lived box; use runCode() (each call runs in the resident box), or open a Sandbox without `persist` for a kernel");
        }
        let timeout_ms = match timeout_s {
            None | Some(serde_json::Value::Null) => opened.config.timeout_ms,
            Some(v) => options::timeout_ms("timeoutS", v)?,
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
        let active = Active::enter(&opened).await;
        if let Some(name) = jupyter {
            let caller = kernel::jupyter::Caller {
                active,
                quota,
                max_output,
            };
            let k =
                kernel::jupyter::JupyterKernel::start(opened, &self.kern, timeout_ms, name, caller)
                    .await?;
            return Ok(OpenKernel::Jupyter(k));
        }
        let mut k = kernel::driver::Kernel::start(opened, &self.kern, timeout_ms)?;
        k.set_max_output(max_output);
        k.attach(active, quota);
        Ok(OpenKernel::Driver(k))
    }

    /// Runs one call in a fresh box.
    pub async fn exec(
        &self,
        req: ExecRequest,
        sink: Option<UnboundedSender<Chunk>>,
    ) -> Result<ExecResult> {
        let opened = self.opened().await?;
        let cfg = &opened.config;
        let (argv, lang_env, cell) = match (&req.argv, &req.code) {
            (Some(argv), None) => {
                if argv.is_empty() || argv[0].is_empty() {
                    return Err(Error::Invalid(
                        "run() needs a non-empty argv array, e.g. run([\"ls\", \"-la\"])".into(),
                    ));
                }
                if argv.iter().any(|a| a.contains('\0')) {
                    return Err(Error::Invalid("an argv element contains a NUL byte".into()));
                }
                (argv.clone(), Vec::new(), None)
            }
            (None, Some(code)) => {
                let l =
                    Language::parse(req.language.as_deref().unwrap_or("python"))?.launch(code)?;
                (l.argv, l.env, l.cell)
            }
            _ => return Err(Error::Invalid("a call needs either argv or code".into())),
        };
        let timeout_ms = match &req.timeout_s {
            None | Some(serde_json::Value::Null) => cfg.timeout_ms,
            Some(v) => options::timeout_ms("timeoutS", v)?,
        };
        let workspace = opened.workspace_path()?;
        let mut spec = opened.spec(argv, &lang_env, timeout_ms, cell.is_some(), &workspace);
        // What the kernel would refuse with E2BIG is the caller's mistake, said before a box.
        crate::config::check_exec_size(&spec.argv, &spec.env)?;
        let attached = opened.resident.get();
        if let Some(a) = attached {
            a.check()?;
            spec.resident = Some(crate::engine::spec::Resident::Exec {
                name: a.target.name.clone(),
                pid1: a.target.pid1,
            });
        }

        // Held until the workspace walks after the box are done: close() waits for it.
        let _running = opened.running.read().await;
        let _active = Active::enter(&opened).await;
        // Subscribed before anything slow, and `run` checks the current value first: a close()
        // from here on ends this call's box.
        let cancel = opened.closing.subscribe();
        if *cancel.borrow() {
            return Err(Error::Invalid(
                "the Sandbox is closed; open a new Sandbox to run more code".into(),
            ));
        }
        let track = cfg.track_files;
        let quota = cfg.workspace_max_bytes;
        let before = if track || quota.is_some() {
            let ws = workspace.clone();
            Some(
                tokio::task::spawn_blocking(move || track::snapshot(&ws, quota))
                    .await
                    .unwrap_or_else(|e| track::Snapshot::unmeasured(e.to_string())),
            )
        } else {
            None
        };
        if let (Some(cap), Some(b)) = (quota, &before) {
            if let Some(fault) = over_quota(b, cap) {
                return Ok(ExecResult::refused(fault));
            }
        }
        let before = if track { before } else { None };
        // A python cell that doesn't stream takes a prewarmed box when the pool has one.
        let slot = match (&cell, &sink) {
            (Some(_), None) => opened.take_slot(),
            _ => None,
        };
        if let (Some(slot), Some(code)) = (slot, &cell) {
            let r = slot.run(code, timeout_ms).await;
            // The pool refills after the call, so starting the next box doesn't compete with
            // this one for the CPU.
            opened.fill_pool(&opened, &self.kern);
            let mut r = r?;
            for n in opened.session_notes() {
                r.stderr.push_note(&n);
            }
            r.files = workspace_changes(before, &workspace, &mut r.stderr).await;
            return Ok(r);
        }
        // A python cell goes to the driver on its own socket, which also brings the
        // results back: read concurrently, so the box never blocks on a full socket.
        let (channel, results_rx) = match &cell {
            Some(code) => {
                let (ours, theirs) = box_socketpair("driver")?;
                (Some(theirs), Some(driver_io_on(ours, code)?))
            }
            None => (None, None),
        };
        let line = opened.egress_line(&spec)?;
        let fds = network::fds(channel.as_ref(), line.as_ref());
        let kern = opened.kern(&self.kern)?;
        let first = kern
            .run(&spec, cfg.max_output, sink.clone(), cancel.clone(), fds)
            .await?;
        let outcome = match first {
            Some(o) => o,
            // The spare died before it got the spec: nothing ran; use a fresh kern.
            None => opened
                .spawn_kern(&self.kern)?
                .run(&spec, cfg.max_output, sink, cancel, fds)
                .await?
                .ok_or_else(|| {
                    Error::Runtime("the kern runtime exited before it read the box spec".into())
                })?,
        };
        // Our copy of the box's end goes now: the reader sees EOF once the box's
        // copies are gone.
        drop(channel);
        if let Some(why) = outcome.report.limits_refused {
            return Err(Error::Invalid(why));
        }
        if outcome.report.resident_gone.is_some() {
            let name = attached.map(|a| a.target.name.as_str()).unwrap_or("?");
            return Err(persist::gone(name));
        }
        drop(line);
        let mut notes = opened.session_notes();
        notes.extend(attached.and_then(persist::Attached::first_call_note));
        let results = match results_rx {
            Some(rx) => {
                let (mut r, cut) = match tokio::time::timeout(RESULTS_GRACE, rx).await {
                    Ok(Ok(r)) => r,
                    _ => Default::default(),
                };
                if cut && outcome.report.fault.is_none() {
                    r.note("note: the python driver's last result frame was cut off".into());
                }
                let (bundles, n) = r.finish();
                notes.extend(n);
                bundles
            }
            None => Vec::new(),
        };
        if cell.is_some() {
            if let Some(why) = opened.pyc.as_ref().and_then(pyc::Cache::failure) {
                notes.push(format!("note: pycCache: the image's standard library could not be compiled ({why}); python compiles what it imports at every start"));
            }
        }
        let mut stderr = Stderr::of_box(
            outcome.stderr,
            &outcome.prepared_notes,
            &outcome.report.notes,
        );
        for n in &notes {
            stderr.push_note(n);
        }
        let files = workspace_changes(before, &workspace, &mut stderr).await;
        Ok(ExecResult {
            stdout: crate::lang::output_text(outcome.stdout),
            stderr,
            exit_code: outcome.report.exit_code,
            duration_ms: outcome.duration.as_secs_f64() * 1000.0,
            fault: outcome.report.fault,
            files,
            truncated: outcome.truncated,
            results,
        })
    }
}

/// The fault of a call refused because the workspace is over `workspaceMaxBytes`.
/// The `workspace_full` refusal when the walk before a call found the workspace over `cap`, or
/// could not measure all of it (fail closed: a box must not hide bytes in what kern can't read).
pub(super) fn over_quota(snap: &track::Snapshot, cap: u64) -> Option<Fault> {
    if let Some(why) = &snap.unmeasured {
        return Some(Fault::new(
            FaultKind::WorkspaceFull,
            format!(
                "kern could not measure the whole workspace against workspaceMaxBytes ({why}), so the call was not run; remove or fix what it names (listFiles() shows what is there)"
            ),
        ));
    }
    (snap.bytes > cap).then(|| workspace_full(snap.bytes, cap))
}

fn workspace_full(bytes: u64, cap: u64) -> Fault {
    Fault::new(
        FaultKind::WorkspaceFull,
        format!(
            "the workspace holds {} (allocated blocks, and at least 4 KiB an entry), over workspaceMaxBytes ({}); the call was not run. Free space (listFiles() shows sizes; writeFile(path, \"\") empties a file after you readFile what you need) or open a Sandbox with a larger workspaceMaxBytes",
            human_bytes(bytes),
            human_bytes(cap)
        ),
    )
}

impl ExecResult {
    /// A call the sandbox refused before starting a box.
    fn refused(fault: Fault) -> ExecResult {
        ExecResult {
            stdout: String::new(),
            stderr: Stderr::default(),
            exit_code: 125,
            duration_ms: 0.0,
            fault: Some(fault),
            files: Vec::new(),
            truncated: false,
            results: Vec::new(),
        }
    }
}

/// Runs blocking filesystem work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Runtime(format!("a workspace task failed: {e}")))?
}

/// Who files the host creates in the workspace should belong to: as root, the workspace's
/// owner (so the box, whose account the owner appears as, can change them); unprivileged, we
/// are the owner already.
fn workspace_owner(ws: &std::path::Path) -> Result<Option<(u32, u32)>> {
    use std::os::unix::fs::MetadataExt;
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let m = std::fs::metadata(ws)
        .map_err(|e| Error::Runtime(format!("stat the workspace {}: {e}", ws.display())))?;
    Ok(Some((m.uid(), m.gid())))
}

/// `1536` -> `1.5 KiB`.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["bytes", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} bytes")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}
