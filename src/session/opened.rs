//! The opened state of a session (`Opened`): its resolved options, image and workspace, the
//! boxes it keeps ready (its spares: kerns, prewarmed boxes) and its writers; how a box of it is
//! specified; and `shut_down`, which ends every box of it. `open` brings it up.

use super::deps;
use super::kernel::driver::Prewarmed;
use super::network;
use super::pyc;
use super::resident;
use super::spares::Spares;
use super::writers::Writers;
use crate::config::{Config, Network};
use crate::engine::addon::capture::{Keep, SpillRoot};
use crate::engine::addon::launch::{Kern, Outcome};
use crate::engine::shared::spec::{BoxSpec, DEFAULT_HOSTNAME};
use crate::error::{Error, Result};
use crate::workspace::Workspace;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// How many spare kerns a session keeps at least. Each has moved into its cgroup (an RCU grace
/// period, 5-40 ms here) before a call takes it; with two, a call that follows another at once
/// still finds one that finished its move during the call before. More follow the calls in
/// flight, within `spareMemoryMb` (`spares`).
pub(super) const SPARE_KERNS: usize = 2;

/// What one spare costs the host, rounded up from what was measured here (private memory and
/// page tables, `/proc/PID/smaps_rollup` and `VmPTE`, dev build, 2026-12-07): a kern waiting in
/// its cgroups 1.0-1.3 MiB; a zygote fork set up as a call's box, its kern's 1 MiB and the two
/// forked pythons' (the box's PID 1 and the workload) 1.5 MiB, the rest shared with the zygote.
pub(super) const KERN_SPARE_KIB: u64 = 1536;
pub(super) const ZYGOTE_SPARE_KIB: u64 = 4096;

/// The most spares of one kind a session keeps, whatever the budget.
const MAX_SPARES: usize = 64;
/// How long close() waits for its retired spare kerns to exit (each takes milliseconds: it
/// leaves its cgroup and removes it).
const RETIRE_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// How many spares of a kind costing `kib` each a session keeps at most: `min`, and what
/// `share_mb` of `spareMemoryMb` pays for.
pub(super) fn spare_max(min: usize, share_mb: u64, kib: u64) -> usize {
    let extra = usize::try_from(share_mb.saturating_mul(1024) / kib.max(1)).unwrap_or(MAX_SPARES);
    (min + extra).min(MAX_SPARES.max(min))
}

/// The share of `spareMemoryMb` each kind of spare gets: the kerns all of it, or, with a zygote,
/// the kerns and the zygote's forks half each.
pub(super) fn spare_share_mb(config: &Config) -> u64 {
    if config.zygote {
        config.spare_memory_mb / 2
    } else {
        config.spare_memory_mb
    }
}

pub(super) struct Opened {
    pub(super) config: Config,
    /// `config.notes`, until the first call takes them.
    pub(super) option_notes: std::sync::Mutex<Vec<String>>,
    /// The resolved image; holding it marks the image in use in the store.
    pub(super) image: crate::image::Image,
    /// The workload's environment before per-call additions.
    pub(super) base_env: Vec<(String, String)>,
    /// Boxes get the `.deps` environment: `setup` installs there, or an earlier session did.
    /// (`.deps` itself exists, read-only with `depsReadonly`, in every workspace.)
    pub(super) deps: bool,
    pub(super) workspace: std::sync::Mutex<Workspace>,
    /// Spare kerns that already sit in their cgroups.
    pub(super) kerns: Spares<Kern>,
    /// Every call holds a read guard; `close()` takes the write guard, after `closing` has told
    /// the calls still running to end their boxes.
    pub(super) running: tokio::sync::RwLock<()>,
    pub(super) closing: tokio::sync::watch::Sender<bool>,
    /// Spare one-cell python boxes (`prewarm`).
    pub(super) prewarmed: Spares<Prewarmed>,
    /// The compiled stdlib of this image (`pycCache`), once built.
    pub(super) pyc: Option<pyc::Cache>,
    /// The boxes that may be writing to the workspace (see `writers`).
    pub(super) writers: Arc<Writers>,
    /// The host CA bundle networked boxes trust (`KERN_HOST_CA=0`: none).
    pub(super) ca: Option<PathBuf>,
    /// The allowlist proxy of this session's boxes (`egressAllow`).
    pub(super) proxy: Option<Arc<crate::proxy::Proxy>>,
    /// The egress proxy when it terminates tunnels (`secrets`, the package cache): the
    /// placeholders boxes get, and the CA bundle they trust instead of `ca`.
    pub(super) intercepting: Option<network::Intercepting>,
    /// ADDITION (issue 35): the package cache of the session's proxies (`packageCache`).
    pub(super) package_cache: Option<Arc<crate::proxy::PackageCache>>,
    /// `persist`: the resident box every call runs in (set once open() met or started it).
    pub(super) resident: std::sync::OnceLock<resident::Attached>,
    /// ADDITION: the measured posture (`isolation()`), once measured.
    pub(super) isolation: tokio::sync::OnceCell<super::isolation::Isolation>,
    /// ADDITION: the same per route a call can take (`probes::measure_routes`), once measured.
    pub(super) isolation_routes: tokio::sync::OnceCell<
        std::collections::BTreeMap<&'static str, super::isolation::Isolation>,
    >,
    /// ADDITION (issue 21): the zygote that forks python cells (`zygote`), once started.
    pub(super) zygote: std::sync::OnceLock<super::zygote::Zygote>,
    /// The watched workspace (`trackFiles` without `workspaceMaxBytes`), once its first walk is
    /// done: calls then find their changes without walking it.
    pub(super) tracker: std::sync::OnceLock<Arc<crate::workspace::watch::Tracker>>,
    /// The connector lines of the background processes started (`spawn()`), oldest first: where
    /// the Sandbox's published ports lead (`publish()`). Ended ones are let go as more come.
    pub(super) dialers: std::sync::Mutex<Vec<super::publish::Dialer>>,
    /// ADDITION (issue 35): the volumes held for this session's boxes, let go once they are
    /// gone (`shut_down`).
    pub(super) volumes: std::sync::Mutex<Vec<crate::volume::Held>>,
}

impl Opened {
    /// Adds a started process's connector line (`dialers`).
    pub(super) fn add_dialer(&self, d: super::publish::Dialer) {
        if let Ok(mut all) = self.dialers.lock() {
            all.retain(super::publish::Dialer::live);
            all.push(d);
        }
    }

    /// The lines of the processes still running, oldest first.
    pub(super) fn dialers(&self) -> Vec<super::publish::Dialer> {
        self.dialers
            .lock()
            .map(|all| all.iter().filter(|d| d.live()).cloned().collect())
            .unwrap_or_default()
    }

    /// Ends every box of the session and waits for them (the workspace must not be deleted, or
    /// walked, while a box can still write to it), then deletes the workspace if it is ours.
    pub(super) async fn shut_down(&self) -> Result<()> {
        self.closing.send_replace(true);
        let _quiet = self.running.write().await;
        // Unused prewarmed boxes go (their tasks already saw `closing`).
        self.prewarmed.retire_all();
        // A retired kern closes its lifeline: it leaves its cgroup and exits, and close()
        // returns once it has, and once every top-up in flight has ended and retired what it
        // made (bounded: a kern that hangs is reaped by its task later).
        let by = tokio::time::Instant::now() + RETIRE_GRACE;
        loop {
            let zygote = self.zygote.get();
            let mut gone = self.kerns.retire_all();
            gone.extend(zygote.map(|z| z.retire()).unwrap_or_default());
            for g in gone {
                let _ = tokio::time::timeout_at(by, g).await;
            }
            let making = self.kerns.making() || zygote.is_some_and(|z| z.making());
            if !making || tokio::time::Instant::now() >= by {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
        if let Some(t) = self.tracker.get() {
            t.stop();
        }
        if let Ok(mut v) = self.volumes.lock() {
            v.clear();
        }
        let mut ws = self
            .workspace
            .lock()
            .map_err(|_| Error::Runtime("workspace lock poisoned".into()))?;
        ws.dispose()
    }

    /// Builds the image's compiled python driver and stdlib in the background, if they aren't
    /// built yet; calls started meanwhile run without them. The session's close() ends the
    /// builds.
    pub(super) fn start_pyc_build(&self, me: &Arc<Opened>, kern: &Path) {
        let Some(cache) = self.pyc.clone() else {
            return;
        };
        let stdlib = cache.bind().is_none() && cache.failure().is_none();
        if !stdlib && !cache.needs_driver() {
            return;
        }
        // The builder replaces the workspace and everything else a box could have written
        // (pyc::builder_spec); the template brings the image and the session's limits.
        let template = self.bare_spec(Vec::new(), 0, Path::new("/nonexistent"));
        let (me, kern) = (me.clone(), kern.to_path_buf());
        tokio::spawn(async move {
            let _running = me.running.read().await;
            let cancel = me.closing.subscribe();
            if *cancel.borrow() {
                return;
            }
            // The driver first: a few ms off every cold python start, and a box of 50 ms to
            // build. A failure of the stdlib's is recorded in the cache and named in python
            // calls' notes; the driver's only means its source is compiled at each start.
            let _ = cache
                .build_driver(&kern, template.clone(), cancel.clone())
                .await;
            if stdlib {
                let _ = cache.build(&kern, template, cancel).await;
            }
        });
    }

    /// Watches the workspace (one walk), when calls track files and no quota needs the walk's
    /// byte count anyway; where it can't be watched, calls walk it.
    pub(super) async fn watch_workspace(&self) {
        if !self.config.track_files || self.config.workspace_max_bytes.is_some() {
            return;
        }
        let Ok(ws) = self.workspace_path() else {
            return;
        };
        let started =
            tokio::task::spawn_blocking(move || crate::workspace::watch::Tracker::start(&ws));
        if let Ok(Some(t)) = started.await {
            let _ = self.tracker.set(t);
        }
    }

    /// What a python driver's channel carries first (`sources::PY_LOADER` reads it): the driver
    /// as the image's python compiled it once `pycCache` has built that, else its source.
    pub(super) fn python_start(&self) -> Arc<Vec<u8>> {
        static SOURCE: std::sync::LazyLock<Arc<Vec<u8>>> =
            std::sync::LazyLock::new(|| Arc::new(crate::lang::sources::python_start(None)));
        self.pyc
            .as_ref()
            .and_then(pyc::Cache::python_start)
            .unwrap_or_else(|| SOURCE.clone())
    }

    pub(super) fn workspace_path(&self) -> Result<PathBuf> {
        Ok(self
            .workspace
            .lock()
            .map_err(|_| Error::Runtime("workspace lock poisoned".into()))?
            .path
            .clone())
    }

    /// The box for one call (or one kernel): the session's posture, this argv and environment.
    pub(super) fn spec(
        &self,
        argv: Vec<String>,
        lang_env: &[(String, String)],
        timeout_ms: u64,
        channel: bool,
        workspace: &Path,
    ) -> BoxSpec {
        self.call_spec(argv, lang_env, &[], timeout_ms, channel, workspace)
    }

    /// As `spec`, with a call's own `env` over the Sandbox's (and under nothing but the pyc
    /// hook, which goes in front of any PYTHONPATH).
    pub(super) fn call_spec(
        &self,
        argv: Vec<String>,
        lang_env: &[(String, String)],
        call_env: &[(String, String)],
        timeout_ms: u64,
        channel: bool,
        workspace: &Path,
    ) -> BoxSpec {
        let cfg = &self.config;
        let mut env = self.base_env.clone();
        if self.deps {
            deps::deps_env(&mut env, &cfg.workspace_target);
        }
        let mut binds = cfg.mounts.clone();
        for (k, v) in lang_env.iter().chain(&cfg.env).chain(call_env) {
            env.retain(|(ek, _)| ek != k);
            env.push((k.clone(), v.clone()));
        }
        // Last: a secret's variable always holds its placeholder (`env` may not name it; a
        // call's `env` naming it is overridden).
        for (k, v) in self.intercepting.iter().flat_map(|s| &s.env) {
            env.retain(|(ek, _)| ek != k);
            env.push((k.clone(), v.clone()));
        }
        if let Some(b) = self.pyc.as_ref().and_then(pyc::Cache::bind) {
            binds.push(b);
            // In front of the caller's own PYTHONPATH too: the hook takes itself off sys.path.
            deps::prepend(&mut env, "PYTHONPATH", pyc::HOOK_DIR);
        }
        let mut spec = BoxSpec {
            root: self.image.root.clone(),
            workspace: workspace.to_path_buf(),
            workspace_target: cfg.workspace_target.clone(),
            tmpfs: cfg.tmpfs.clone(),
            limits: cfg.limits.clone(),
            timeout_ms,
            argv,
            env,
            hostname: DEFAULT_HOSTNAME.into(),
            user: self.image.user.clone(),
            channel,
            stdin: false,
            tty: None,
            connector: false,
            binds,
            host_network: false,
            etc: Vec::new(),
            readonly_in_workspace: if cfg.deps_readonly {
                vec![deps::DEPS_DIR.into()]
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
            serves_zygote: false,
            zygote: false,
            setid_watched: false,
        };
        match &cfg.network {
            Network::None => {}
            Network::Host => network::host(&mut spec, self.ca.as_deref()),
            Network::Egress(policy) => {
                // The live policy (`setEgressAllow`) names the loopback addresses to relay.
                let live = self.proxy.as_ref().map(|p| p.policy());
                let policy = live.as_deref().unwrap_or(policy);
                network::egress(&mut spec, self.ca.as_deref(), policy);
                if let Some(s) = &self.intercepting {
                    network::trust_bundle(&mut spec, &s.bundle);
                }
            }
        }
        spec
    }

    /// A box for the session's own work (the pyc build, the requireLimits probe): the image's
    /// posture (account, limits, scratch, AppArmor) without the caller's mounts, devices, deps,
    /// `env` or network.
    pub(super) fn bare_spec(
        &self,
        argv: Vec<String>,
        timeout_ms: u64,
        workspace: &Path,
    ) -> BoxSpec {
        let mut spec = self.spec(argv, &[], timeout_ms, false, workspace);
        self.make_bare(&mut spec);
        spec
    }

    /// Takes the caller's mounts, devices, deps, `env` and network out of `spec` (`bare_spec`).
    pub(super) fn make_bare(&self, spec: &mut BoxSpec) {
        spec.binds.clear();
        spec.devices.clear();
        spec.readonly_in_workspace.clear();
        spec.env = self.base_env.clone();
        spec.host_network = false;
        spec.egress = None;
        spec.etc.clear();
    }

    /// `requireLimits` at open(): one box running `true` under the session's caps, which kern
    /// refuses to start unless it read the caps back from the box's cgroup.
    pub(super) async fn check_limits(&self, kern: &Path) -> Result<()> {
        let workspace = self.workspace_path()?;
        let mut spec = self.bare_spec(vec!["true".into()], 30_000, &workspace);
        // Only the caps are under test: an AppArmor refusal would come first and hide them.
        spec.apparmor = None;
        let outcome = self.run_own(kern, &spec).await?;
        match outcome.report.limits_refused {
            Some(why) => Err(Error::IsolationUnavailable(why)),
            None => Ok(()),
        }
    }

    /// How a call keeps its output: `maxOutputBytes`, and with `spillOutput` the excess in the
    /// workspace, up to `workspaceMaxBytes` a stream.
    pub(super) fn keep(&self) -> Result<Keep> {
        let spill = match self.config.spill_output {
            true => Some(SpillRoot {
                root: self.workspace_path()?,
                limit: self.config.workspace_max_bytes.unwrap_or(u64::MAX),
            }),
            false => None,
        };
        Ok(Keep::new(self.config.max_output, spill))
    }

    /// Runs a box of the session's own work (the requireLimits probe, the start of a resident
    /// box) in a fresh kern, its output bounded to 64 KiB, ended by the session's close().
    pub(super) async fn run_own(&self, kern: &Path, spec: &BoxSpec) -> Result<Outcome> {
        Kern::spawn(kern, &spec.limits)?
            .run(
                spec,
                &Keep::new(1 << 16, None),
                None,
                self.closing.subscribe(),
                Default::default(),
            )
            .await?
            .ok_or_else(|| Error::Runtime("the kern runtime exited before it read the spec".into()))
    }

    /// The egress line for a box of this session, when its boxes go through the proxy.
    pub(super) fn egress_line(&self, spec: &BoxSpec) -> Result<Option<network::Line>> {
        match (&self.proxy, &spec.egress) {
            (Some(p), Some(_)) => Ok(Some(network::Line::open(p)?)),
            _ => Ok(None),
        }
    }

    /// What the session's options and network did during a call, as runtime notes; the
    /// options' own notes come with the first call only.
    pub(super) fn session_notes(&self) -> Vec<String> {
        let mut notes: Vec<String> = self
            .option_notes
            .lock()
            .map(|mut n| std::mem::take(&mut *n))
            .unwrap_or_default();
        notes.extend(self.network_notes());
        notes.extend(self.zygote.get().and_then(super::zygote::Zygote::end_note));
        notes
    }

    /// What the session's network did during a call, as runtime notes.
    pub(super) fn network_notes(&self) -> Vec<String> {
        match (&self.config.network, &self.proxy) {
            (Network::Host, _) => vec![
                "warning: network: true: this box shared the host's network (isolation relaxed: it could reach anything the host can)".into(),
            ],
            (_, Some(p)) => network::notes(p),
            _ => Vec::new(),
        }
    }

    /// A kern for this session's next call: prepared with the caps of a fresh box, or, in a
    /// resident session, for a call into its box.
    pub(super) fn spawn_kern(&self, path: &Path) -> Result<Kern> {
        match self.resident.get() {
            Some(r) => Kern::spawn_call(path, &r.target, &self.config.limits),
            None => Kern::spawn(path, &self.config.limits),
        }
    }

    /// Takes the oldest live spare kern (or starts one), and tops the spares up beside the call.
    pub(super) fn kern(self: &Arc<Self>, path: &Path) -> Result<Kern> {
        let kern = match self.kerns.take() {
            Some(k) => k,
            None => self.spawn_kern(path)?,
        };
        // Not before the spec goes: starting a kern is a spawn from this large process, and it
        // was about 9 ms of a fresh box's 17 (`npm run bench:timeline`, BENCHMARKS.md). The
        // spares' cgroup moves then overlap this call.
        let (me, path) = (self.clone(), path.to_path_buf());
        tokio::task::spawn_blocking(move || me.top_up_kerns(&path));
        Ok(kern)
    }

    /// Starts spare kerns up to as many as are wanted now (`SPARE_KERNS` at least), unless the
    /// session is closing.
    pub(super) fn top_up_kerns(&self, path: &Path) {
        self.kerns
            .top_up(|| !*self.closing.borrow(), || self.spawn_kern(path).ok());
    }
}
