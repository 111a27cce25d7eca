//! Bringing a session up (`open`): the image resolved, the workspace made, and what the options
//! ask for at open() (`setup`, `requireLimits`, `persist`'s resident box, `prewarm`, `pycCache`)
//! done, with one shut-down for whatever fails once the session exists.

use super::deps;
use super::host_binds;
use super::network;
use super::opened::{spare_max, spare_share_mb, Opened, KERN_SPARE_KIB, SPARE_KERNS};
use super::prewarm;
use super::pyc;
use super::resident;
use super::setup;
use super::spares::{self, Spares};
use crate::config::{Config, Network};
use crate::engine::addon::launch::ChunkSender;
use crate::engine::shared::spec::{Resident, RootSpec};
use crate::error::{Error, Result};
use crate::workspace::Workspace;
use std::path::Path;
use std::sync::Arc;

/// Brings a session up from its options: the image resolved, the workspace made, and what
/// the options ask for at open() (`setup`, `requireLimits`, `persist`) done. Whatever fails
/// once the session exists shuts it down again, so no box or workspace outlives the error.
pub(super) async fn open(
    mut config: Config,
    kern: &Path,
    sink: Option<ChunkSender>,
    required: &[String],
    mut abort: Option<tokio::sync::watch::Receiver<bool>>,
) -> Result<Arc<Opened>> {
    if super::percall::aborted(abort.as_ref()) {
        return Err(aborted());
    }
    if !kern.is_file() {
        return Err(Error::Runtime(format!(
            "the kern runtime is missing: looked for {}. Reinstall kern-sandbox (its platform package carries kern), run `npm run build:debug` in a source checkout, or set KERN_BIN to a kern binary",
            kern.display()
        )));
    }
    // Before anything is made or run: a volume another Sandbox writes alone fails open() at once.
    let volumes = config
        .volumes
        .iter()
        .map(|u| crate::volume::acquire(&u.volume, u.access))
        .collect::<Result<Vec<_>>>()?;
    crate::engine::addon::launch::check_version(kern).await?;
    let source = config.image.clone();
    let pull = tokio::task::spawn_blocking(move || {
        let policy = crate::image::PullPolicy::from_env()?;
        crate::image::open(&source, policy, &mut crate::image::Quiet)
    });
    // An abort leaves a pull under way to finish in the background (the store takes a layer
    // whole or not at all; a later open() finds it there), and makes nothing of the session.
    let image = tokio::select! {
        r = pull => r.map_err(|e| Error::Runtime(format!("the image task failed: {e}")))??,
        () = super::percall::abort_requested(&mut abort) => return Err(aborted()),
    };
    let mut image = image;
    if let Some(account) = &config.user {
        image.user = crate::image::resolve_user(&image.root, account)?;
    }
    let home = if config.tmpfs.iter().any(|t| t.target == "/tmp") {
        "/tmp"
    } else {
        config.workspace_target.as_str()
    };
    if let RootSpec::Dir { path } = &image.root {
        for m in &config.mounts {
            host_binds::check_target_in_image(path, &m.target, m.dir)?;
        }
        let ws = &config.workspace_target;
        if let Err(why) = host_binds::target_in_image(path, ws, true) {
            return crate::invalid!("option `workspaceMount` {ws:?}: {why}; pick a path whose existing parts are real directories of the image (a missing part is made in the box)");
        }
    }
    let base_env = crate::config::base_env(&image.config, home);
    let workspace = match &config.workspace {
        Some(p) => Workspace::existing(p)?,
        None => Workspace::temporary()?,
    };
    // Before any box: a `.deps` a box made could hold what later boxes run.
    deps::make_deps_dir(&workspace.path)?;
    let deps = deps::has_deps(config.setup.is_some(), &workspace.path);
    let ca = crate::image::net::host_ca()?;
    let mut cache_notes = Vec::new();
    let package_cache = network::package_cache(&config, ca.as_deref(), &mut cache_notes)?;
    config.notes.extend(cache_notes);
    let mut intercepting = None;
    let proxy = match &config.network {
        Network::Egress(policy) if !config.secrets.is_empty() || package_cache.is_some() => {
            let s = network::intercepting(
                policy.clone(),
                &config.secrets,
                package_cache.clone(),
                ca.as_deref(),
            )?;
            let proxy = s.proxy.clone();
            intercepting = Some(s);
            Some(proxy)
        }
        Network::Egress(policy) => Some(network::proxy(policy.clone())?),
        _ => None,
    };
    let pyc = if config.pyc_cache {
        pyc::Cache::for_image(&image)?
    } else {
        None
    };
    let prewarm = config.prewarm;
    let spare_kerns = spare_max(SPARE_KERNS, spare_share_mb(&config), KERN_SPARE_KIB);
    let opened = Arc::new(Opened {
        option_notes: std::sync::Mutex::new(config.notes.clone()),
        config,
        image,
        base_env,
        deps,
        workspace: std::sync::Mutex::new(workspace),
        kerns: Spares::new(SPARE_KERNS, spare_kerns),
        running: tokio::sync::RwLock::new(()),
        closing: tokio::sync::watch::channel(false).0,
        prewarmed: Spares::new(prewarm, prewarm),
        pyc,
        writers: Default::default(),
        ca,
        proxy,
        intercepting,
        package_cache,
        resident: std::sync::OnceLock::new(),
        isolation: tokio::sync::OnceCell::new(),
        isolation_routes: tokio::sync::OnceCell::new(),
        zygote: std::sync::OnceLock::new(),
        tracker: std::sync::OnceLock::new(),
        dialers: Default::default(),
        volumes: std::sync::Mutex::new(volumes),
    });
    // A resident session's spare kerns wait until its box is known.
    if opened.config.resident.is_none() {
        opened.top_up_kerns(kern);
    }
    trim_spares_when_idle(&opened);
    let started = {
        let run = start(&opened, kern, sink, required);
        tokio::pin!(run);
        tokio::select! {
        r = &mut run => r,
        () = super::percall::abort_requested(&mut abort) => {
            // The boxes open() runs (setup, the probes, a resident box's start, the zygote) end
            // with `closing`, and `start` returns once their kerns have reported them gone: so
            // nothing of the session outlives the rejection. Bounded, in case it waits on
            // something else (a `persist` name's lock); then it is dropped where it waits.
            opened.closing.send_replace(true);
            let _ = tokio::time::timeout(ABORT_GRACE, &mut run).await;
            Err(aborted())
        }
        }
    };
    match started {
        Ok(()) => Ok(opened),
        Err(e) => {
            let _ = opened.shut_down().await;
            Err(e)
        }
    }
}

/// Lets the spares that followed a burst of calls go once the session is idle (`spares::IDLE`),
/// until it closes. Holds the session weakly: a Sandbox dropped unclosed is not kept alive.
fn trim_spares_when_idle(opened: &Arc<Opened>) {
    // With no budget the spares never grow, and nothing wakes once a second for them.
    if opened.config.spare_memory_mb == 0 {
        return;
    }
    let me = Arc::downgrade(opened);
    let mut closing = opened.closing.subscribe();
    tokio::spawn(async move {
        loop {
            tokio::select! {
                () = tokio::time::sleep(spares::IDLE / 2) => {}
                // Closing, or the session is gone (its sender dropped).
                _ = closing.changed() => return,
            }
            let Some(o) = me.upgrade() else { return };
            if *o.closing.borrow() {
                return;
            }
            o.kerns.trim_idle(spares::IDLE);
            if let Some(z) = o.zygote.get() {
                z.trim_idle();
            }
        }
    });
}

/// How long an aborted open() waits for the boxes it started to be reported gone.
const ABORT_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// What an aborted open() says (JS rejects with the signal's reason instead).
fn aborted() -> Error {
    Error::Invalid(
        "open() was aborted; nothing of the Sandbox was left running (open() may be called again)"
            .into(),
    )
}

/// What open() does once the session exists.
async fn start(
    opened: &Arc<Opened>,
    kern: &Path,
    sink: Option<ChunkSender>,
    required: &[String],
) -> Result<()> {
    container_preflight(opened, kern).await?;
    // `requireIsolation` (ADDITION): refused before `setup` or a resident box, on a probe
    // box's measurement.
    super::probes::require(opened, kern, required).await?;
    if opened.config.resident.is_some() {
        if opened.config.limits.require {
            opened.check_limits(kern).await?;
        }
        let attached = attach_or_start(opened, kern, sink).await?;
        let _ = opened.resident.set(attached);
        opened.watch_workspace().await;
        if let Ok(k) = opened.spawn_kern(kern) {
            opened.kerns.put(k);
        }
        return Ok(());
    }
    if let Some(cmd) = opened.config.setup.clone() {
        setup::run(opened, kern, &cmd, sink).await?;
    }
    if opened.config.limits.require {
        // Refused here, not at the first call: a box that runs `true` tells.
        opened.check_limits(kern).await?;
    }
    opened.start_pyc_build(opened, kern);
    opened.watch_workspace().await;
    prewarm::fill(opened, kern);
    if opened.config.zygote {
        let z = super::zygote_start::start(opened.clone(), kern).await?;
        let _ = opened.zygote.set(z);
    }
    Ok(())
}

/// Inside a container (issue 22), a box the runtime's restrictions stop (its seccomp profile,
/// masked `/proc`, root without a user namespace) is refused at open(), naming the restriction
/// and the flag that lifts it, rather than at each call as a `startup_failed` fault: where such
/// a restriction is in force (`container::confined`), a box runs `true` at the first open() of
/// the process, and again until one passes.
async fn container_preflight(opened: &Arc<Opened>, kern: &Path) -> Result<()> {
    static PASSED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if PASSED.load(std::sync::atomic::Ordering::Relaxed)
        || !crate::engine::shared::container::confined()
    {
        return Ok(());
    }
    let workspace = opened.workspace_path()?;
    let spec = opened.bare_spec(vec!["true".into()], 30_000, &workspace);
    let mut outcome = opened.run_own(kern, &spec).await?;
    super::result::refusal(&mut outcome)?;
    PASSED.store(true, std::sync::atomic::Ordering::Relaxed);
    Ok(())
}

/// open() of a `persist` session: under the name's lock, attach to the live box of that name
/// (refused when its posture differs), or run `setup` and start one.
async fn attach_or_start(
    opened: &Arc<Opened>,
    kern: &Path,
    sink: Option<ChunkSender>,
) -> Result<resident::Attached> {
    let cfg = &opened.config;
    let Some(r) = cfg.resident.clone() else {
        return Err(Error::Runtime(
            "internal error: not a resident session".into(),
        ));
    };
    let workspace = opened.workspace_path()?;
    let mut spec = opened.spec(
        Vec::new(),
        &[],
        resident::START_TIMEOUT_MS,
        false,
        &workspace,
    );
    let digest = opened.image.digest.as_ref().map(|d| d.to_string());
    let (lock, posture) = match resident::meet(&spec, digest, cfg.setup.as_deref(), &r.name).await?
    {
        resident::Meeting::Attached(a) => return Ok(a),
        resident::Meeting::Start { lock, posture } => (lock, posture),
    };
    // `setup` runs only when the box is created (its .deps are then in the box's mounts).
    if let Some(cmd) = cfg.setup.clone() {
        setup::run(opened, kern, &cmd, sink).await?;
    }
    spec.resident = Some(Resident::Start {
        name: r.name.clone(),
        ttl_ms: r.ttl_ms,
        posture,
    });
    let outcome = opened.run_own(kern, &spec).await?;
    resident::started(outcome, r.name, lock)
}
