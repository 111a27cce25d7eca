//! A session's long-lived boxes (`spawn`): a box that lives until it is stopped or its session
//! closes. On it: boxes whose python driver is started before it has a cell (`start`), for the
//! driver kernel (many cells) and the prewarmed boxes (a kernel used for exactly one cell), both
//! spawned with the driver and a socket to it; and Jupyter kernels. Here too `kernel()`
//! (`open_kernel`): a kernel of either kind (`session::kernel`) in a box of the session.

use super::kernel::driver::{self, Driver};
use super::kernel::jupyter::{self, Jupyter};
use super::kernel::lifecycle::Lifecycle;
use super::kernel::OpenKernel;
use super::opened::Opened;
use super::percall::PerCall;
use super::prepared::{prepare, Workload};
use super::result::ExecRequest;
use super::writers::Active;
use crate::engine::addon::capture::Keep;
use crate::engine::addon::launch::{ChunkSender, Outcome};
use crate::engine::shared::spec::RootSpec;
use crate::error::{Error, Result};
use crate::lang::Language;
use std::path::Path;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use tokio::sync::{oneshot, watch};

/// How long a started driver box may wait and run: the kernel's lifetime, or an idle prewarmed
/// box's.
/// Per-cell deadlines are enforced by the caller, which stops the box.
pub const LIFETIME_MS: u64 = 7 * 86_400_000;

/// A started driver box.
pub struct DriverBox {
    /// Our end of the driver's channel.
    pub sock: tokio::net::UnixStream,
    /// Resolves when the box has ended.
    pub ended: tokio::task::JoinHandle<Result<Option<Outcome>>>,
    /// Turning true ends the box.
    pub stop: watch::Sender<bool>,
    /// kern's notes from preparing the box, which open its stderr (`Kern::run_forwarding`).
    pub prepared: oneshot::Receiver<Vec<String>>,
    /// The host pid of the box's monitor (`kern`), to interrupt a cell by.
    pub monitor: Monitor,
}

/// Starts a box running `lang`'s driver (python's or node's), in `place`'s directory and
/// environment, waiting for its first cell on the channel. Its output is forwarded to `sink`
/// as it comes and not kept: the kernel splits it per cell.
pub fn start(
    opened: Arc<Opened>,
    kern_path: &std::path::Path,
    sink: ChunkSender,
    lang: Language,
    place: &PerCall,
) -> Result<DriverBox> {
    let p = prepare(&opened, Workload::Driver(lang), LIFETIME_MS, place.clone())?;
    let (sock, channel) =
        super::network::box_socketpair("driver", p.first.as_deref().map(|v| &v[..]))?;
    let b = spawn(opened, kern_path, p.spec, Some(channel), sink)?;
    Ok(DriverBox {
        sock,
        ended: b.ended,
        stop: b.stop,
        prepared: b.prepared,
        monitor: b.monitor,
    })
}

/// The host pid of a long box's monitor (`kern`). Shared, because it can change once: a spare
/// kern that died before it took the box's spec is replaced by a fresh one.
#[derive(Debug, Clone, Default)]
pub struct Monitor(Arc<AtomicU32>);

impl Monitor {
    fn new(pid: Option<u32>) -> Monitor {
        Monitor(Arc::new(AtomicU32::new(pid.unwrap_or(0))))
    }

    /// The pid, if the kern had one.
    pub fn get(&self) -> Option<u32> {
        Some(self.0.load(Ordering::Relaxed)).filter(|p| *p != 0)
    }

    fn set(&self, pid: Option<u32>) {
        self.0.store(pid.unwrap_or(0), Ordering::Relaxed);
    }
}

/// A long-lived box started from `spec`.
pub struct LongBox {
    /// Resolves when the box has ended.
    pub ended: tokio::task::JoinHandle<Result<Option<Outcome>>>,
    /// Turning true ends the box.
    pub stop: watch::Sender<bool>,
    /// The host pid of the box's monitor (`kern`), to find the box's processes by.
    pub monitor: Monitor,
    /// kern's notes from preparing the box, which open its stderr (`Kern::run_forwarding`).
    pub prepared: oneshot::Receiver<Vec<String>>,
}

/// Starts a box that lives until `stop` turns true or the session closes, its output forwarded
/// to `sink`; `channel` is the box's end of a socket to it, if any.
pub fn spawn(
    opened: Arc<Opened>,
    kern_path: &std::path::Path,
    spec: crate::engine::shared::spec::BoxSpec,
    channel: Option<std::os::fd::OwnedFd>,
    sink: ChunkSender,
) -> Result<LongBox> {
    let (stop, stop_rx) = watch::channel(false);
    // The session closing ends the box too.
    let mut closing = opened.closing.subscribe();
    let stop_on_close = stop.clone();
    tokio::spawn(async move {
        tokio::select! {
            r = closing.wait_for(|c| *c) => if r.is_ok() { stop_on_close.send_replace(true); },
            _ = stop_on_close.closed() => {}
        }
    });
    let line = opened.egress_line(&spec)?;
    let kern = opened.kern(kern_path)?;
    let monitor = Monitor::new(kern.pid());
    let (prepared_tx, prepared) = oneshot::channel();
    let (kern_path, now) = (kern_path.to_path_buf(), monitor.clone());
    let ended = tokio::spawn(async move {
        // Held for the box's life: the session's close() waits for it to end.
        let _running = opened.running.read().await;
        // Stopped before it started (its session closed meanwhile): start nothing.
        if *stop_rx.borrow() {
            kern.retire();
            return Ok(None);
        }
        let fds = || super::network::fds(channel.as_ref(), line.as_ref());
        let mut r = kern
            .run_forwarding(&spec, sink.clone(), stop_rx.clone(), fds(), prepared_tx)
            .await;
        if let Ok(None) = r {
            // The spare died before it took the spec: nothing ran; once more in a fresh kern
            // (its notes are the spare's kind, and already went to `prepared`).
            r = match opened.spawn_kern(&kern_path) {
                Ok(fresh) => {
                    now.set(fresh.pid());
                    fresh
                        .run_forwarding(&spec, sink, stop_rx, fds(), oneshot::channel().0)
                        .await
                }
                Err(e) => Err(e),
            };
        }
        drop(channel);
        drop(line);
        r
    });
    Ok(LongBox {
        ended,
        stop,
        monitor,
        prepared,
    })
}

/// `kernel()`'s options, as the JS layer sends them.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct KernelRequest {
    /// The per-cell default timeout (the session's `timeoutS` when absent).
    pub timeout_s: Option<serde_json::Value>,
    /// The image's Jupyter kernelspec of this name instead of a driver.
    pub jupyter: Option<String>,
    /// An addition: the driver's language, `python` (the default), `node` or `typescript`.
    pub language: Option<String>,
    /// An addition: the kernel's environment over the Sandbox's, as a call's `env`.
    pub env: Option<serde_json::Value>,
    /// An addition: the kernel's working directory, workspace-relative, as a call's `cwd`.
    pub cwd: Option<serde_json::Value>,
    /// An addition: what a cell past its timeout (or aborted) does to the kernel,
    /// `"teardown"` or `"interrupt"`.
    pub on_timeout: Option<String>,
}

/// A `KernelRequest`, checked: what can be said about it is said before any box starts.
pub(super) struct KernelPlan {
    timeout_s: Option<serde_json::Value>,
    jupyter: Option<String>,
    lang: Language,
    place: PerCall,
    /// A stopped cell is interrupted, the kernel kept (a Jupyter kernel's default).
    interrupt: bool,
}

impl KernelPlan {
    /// `target`: where the Sandbox's boxes see the workspace.
    pub(super) fn of(req: &KernelRequest, target: &str) -> Result<KernelPlan> {
        if let Some(name) = &req.jupyter {
            crate::lang::jupyter::kernelspec::check_name(name)?;
            if req.language.is_some() {
                return crate::invalid!("kernel() takes `jupyter` or `language`, not both: a Jupyter kernel's language is its kernelspec's");
            }
        }
        let lang = Language::parse(req.language.as_deref().unwrap_or("python"))?;
        if !lang.driven() {
            return crate::invalid!("kernel({{ language }}) takes \"python\", \"node\" or \"typescript\"; run bash or sh code with runCode()");
        }
        // The same checks as a call's env and cwd.
        let place = PerCall::of(
            &ExecRequest {
                env: req.env.clone(),
                cwd: req.cwd.clone(),
                ..Default::default()
            },
            target,
        )?;
        let interrupt = match (req.on_timeout.as_deref(), &req.jupyter) {
            (None, Some(_)) | (Some("interrupt"), Some(_)) => true,
            (None, None) | (Some("teardown"), _) => false,
            (Some("interrupt"), None) if lang == Language::Python => true,
            (Some("interrupt"), None) => {
                return crate::invalid!("kernel({{ onTimeout: \"interrupt\" }}) is for python kernels: a {} cell can't be stopped without ending Node; leave onTimeout out (a stopped cell ends the kernel)", req.language.as_deref().unwrap_or("node"));
            }
            (Some(other), _) => {
                return crate::invalid!("kernel({{ onTimeout }}) takes \"teardown\" (end the kernel, the driver kernel's default) or \"interrupt\" (interrupt the cell and keep the kernel, a Jupyter kernel's default), got {other:?}");
            }
        };
        Ok(KernelPlan {
            timeout_s: req.timeout_s.clone(),
            jupyter: req.jupyter.clone(),
            lang,
            place,
            interrupt,
        })
    }
}

/// `kernel()`: a driver kernel, or with `jupyter` the image's kernelspec of that name, counted
/// as a writer of the workspace until it is closed.
pub(super) async fn open_kernel(
    opened: Arc<Opened>,
    kern: &Path,
    plan: KernelPlan,
) -> Result<OpenKernel> {
    let timeout_s = plan.timeout_s.as_ref();
    if opened.config.resident.is_some() {
        return crate::invalid!("kernel() is not available with `persist`: a kernel is its own long-lived box; use runCode() (each call runs in the resident box), or open a Sandbox without `persist` for a kernel");
    }
    let timeout_ms = super::prepared::timeout_ms(timeout_s, opened.config.timeout_ms)?;
    if *opened.closing.borrow() {
        return Err(Error::Closed(
            "the Sandbox is closed; open a new Sandbox to run more code".into(),
        ));
    }
    let keep = opened.keep()?;
    let quota = match opened.config.workspace_max_bytes {
        Some(cap) => Some((opened.workspace_path()?, cap)),
        None => None,
    };
    let caps = opened
        .config
        .volumes
        .iter()
        .filter_map(crate::volume::Use::cap)
        .collect();
    let active = Active::enter(&opened.writers).await;
    Ok(match plan.jupyter.as_deref() {
        Some(name) => {
            let mut k = start_jupyter(
                opened,
                kern,
                timeout_ms,
                keep,
                name,
                &plan.place,
                plan.interrupt,
            )
            .await?;
            k.attach(active, quota, caps);
            OpenKernel::jupyter(k)
        }
        None => {
            let d = Driver {
                single: false,
                lang: plan.lang,
                interrupt: plan.interrupt,
            };
            let mut k = start_driver(opened, kern, timeout_ms, keep, d, &plan.place)?;
            // A node kernel's Node is checked before kernel() resolves.
            k.greet().await?;
            k.attach(active, quota, caps);
            OpenKernel::driver(k)
        }
    })
}

/// Starts a driver kernel's box; it runs as long as the kernel is open and the session too.
/// `d.single`: a prewarmed box's kernel, for one cell.
pub(super) fn start_driver(
    opened: Arc<Opened>,
    kern: &Path,
    timeout_ms: u64,
    keep: Keep,
    d: Driver,
    place: &PerCall,
) -> Result<Lifecycle<Driver>> {
    let session_closing = opened.closing.subscribe();
    let (sink, chunks) = crate::engine::addon::launch::chunk_channel();
    let started = start(opened, kern, sink, d.lang, place)?;
    let live = driver::Live::new(
        started.sock,
        chunks,
        started.ended,
        started.prepared,
        d.lang.setup_frame(),
        started.monitor.clone(),
    );
    Ok(Lifecycle::new(
        d,
        live,
        session_closing,
        started.stop,
        timeout_ms,
        keep,
        started.monitor,
    ))
}

/// Starts kernelspec `name` of the session's image in a box of the session, and waits until it
/// answers.
async fn start_jupyter(
    opened: Arc<Opened>,
    kern: &Path,
    timeout_ms: u64,
    keep: Keep,
    name: &str,
    place: &PerCall,
    interrupt: bool,
) -> Result<Lifecycle<Jupyter>> {
    let kernel = Workload::Own {
        argv: Vec::new(),
        env: Vec::new(),
        channel: false,
    };
    // Its cwd is the kernel's; its env goes in below, over the kernelspec's.
    let place_cwd = PerCall {
        env: Vec::new(),
        cwd: place.cwd.clone(),
        user: None,
    };
    let p = prepare(&opened, kernel, LIFETIME_MS, place_cwd)?;
    let (mut spec, workspace) = (p.spec, p.workspace);
    // The kernel's own env goes over the Sandbox's, both over the kernelspec's.
    let caller_env: Vec<(String, String)> = opened
        .config
        .env
        .iter()
        .chain(&place.env)
        .cloned()
        .collect();
    let root = match &opened.image.root {
        RootSpec::Dir { path } => path.clone(),
        RootSpec::Host => "/".into(),
    };
    let prepared = jupyter::start::prepare(&mut spec, root, workspace, &caller_env, name).await?;
    let session_closing = opened.closing.subscribe();
    let (sink, chunks) = crate::engine::addon::launch::chunk_channel();
    let b = spawn(opened, kern, spec, None, sink)?;
    let started = jupyter::start::Started {
        stop: b.stop,
        ended: b.ended,
        monitor: b.monitor,
        chunks,
        session_closing,
    };
    jupyter::start::connect_started(prepared, started, timeout_ms, keep, interrupt).await
}
