//! A session's side of `persist`: meet the resident box of its name (or start it), and the
//! checks each call makes that the box is still the one this Sandbox opened. (open() runs
//! `setup` and starts the box between `meet` and `started`.)

use crate::engine::addon::launch::Outcome;
use crate::engine::monitor::resident as res;
use crate::engine::shared::handoff::CallTarget;
use crate::engine::shared::spec::BoxSpec;
use crate::error::{Error, Result};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

/// How long destroy() waits for the box's monitor to clean up.
const STOP_WAIT: Duration = Duration::from_secs(30);

/// The resident box a session runs its calls in.
pub(crate) struct Attached {
    pub target: CallTarget,
    /// The first call says what a resident box is not (a fresh one).
    noted: AtomicBool,
    /// pause() froze the box (calls are refused until resume(), or until it is found thawed
    /// from outside: `kern resume`), and its freezer.
    paused: AtomicBool,
    freezer: std::sync::Mutex<Option<crate::engine::monitor::freezer::Freezer>>,
    /// One pause() or resume() at a time.
    pausing: tokio::sync::Mutex<()>,
}

impl Attached {
    /// `Err` with the clear message when the box is gone (destroyed, or past its TTL) or paused.
    pub fn check(&self) -> Result<()> {
        if !self.target.pid1.alive() {
            return Err(gone(&self.target.name));
        }
        if self.is_paused() {
            return Err(crate::session::pause::paused_error(&format!(
                "the resident box {}",
                self.target.name
            )));
        }
        Ok(())
    }

    /// Whether the box is paused: this Sandbox paused it and it was not resumed since, here or
    /// from outside.
    pub fn is_paused(&self) -> bool {
        if !self.paused.load(Ordering::SeqCst) {
            return false;
        }
        let frozen = self
            .freezer
            .lock()
            .map(|f| f.as_ref().is_some_and(|f| f.is_frozen()))
            .unwrap_or(true);
        if !frozen {
            self.paused.store(false, Ordering::SeqCst);
        }
        frozen
    }

    /// Freezes (`frozen`) or thaws the box, processes its calls left running included.
    pub async fn set_paused(&self, frozen: bool) -> Result<()> {
        let _one = self.pausing.lock().await;
        if !self.target.pid1.alive() {
            return Err(gone(&self.target.name));
        }
        let name = self.target.name.clone();
        let live = tokio::task::spawn_blocking(move || res::find(&state_dir()?, &name))
            .await
            .map_err(|e| Error::Runtime(format!("pause: {e}")))??
            .filter(|l| l.state.pid1 == self.target.pid1)
            .ok_or_else(|| gone(&self.target.name))?;
        let target = crate::session::pause::Target {
            monitor: live.state.monitor.pid as u32,
            init: Some(live.state.pid1.pid),
        };
        let f = crate::session::pause::freezer(target, "the resident box").await?;
        crate::session::pause::set(&f, frozen, "the resident box").await?;
        if let Ok(mut slot) = self.freezer.lock() {
            *slot = Some(f);
        }
        self.paused.store(frozen, Ordering::SeqCst);
        Ok(())
    }

    /// The runtime note of the first call only.
    pub fn first_call_note(&self) -> Option<String> {
        (!self.noted.swap(true, Ordering::SeqCst)).then(|| {
            format!(
                "note: this call ran in the resident box {} (persist): it is not a fresh box; /tmp and the other scratch filesystems keep what earlier calls left (and count against memoryMb), and processes a call leaves running stay until the box ends (each call sees, traces and reads only its own: the others are hidden from it, but may still signal it by pid)",
                self.target.name
            )
        })
    }
}

pub(super) fn gone(name: &str) -> Error {
    Error::Invalid(format!(
        "the resident box {name} was destroyed (destroy(), `kern stop`, or its persistTtlS ran out) after this Sandbox opened it; open a new Sandbox to start a new one"
    ))
}

/// How long a resident box may take to build (its mounts, not any workload).
pub(super) const START_TIMEOUT_MS: u64 = 30_000;

/// The options that define a box, by option name, from the box's own spec: what a second
/// Sandbox of the same name must agree on.
fn posture(
    spec: &BoxSpec,
    image_digest: Option<String>,
    setup: Option<&str>,
) -> BTreeMap<String, String> {
    let l = &spec.limits;
    let num = |v: Option<String>| v.unwrap_or_else(|| "null".into());
    let mut p = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        p.insert(k.to_string(), v);
    };
    put("image", image_digest.unwrap_or_else(|| json(&spec.root)));
    put("workspace", spec.workspace.display().to_string());
    // Only when chosen: a box started before the option existed keeps its posture's hash.
    if spec.workspace_target != crate::engine::shared::spec::DEFAULT_WORKSPACE_TARGET {
        put("workspaceMount", spec.workspace_target.clone());
    }
    put(
        "memoryMb",
        num(l
            .memory_bytes
            .map(|b| (b as f64 / (1u64 << 20) as f64).to_string())),
    );
    put("pids", num(l.pids.map(|n| n.to_string())));
    put("cpus", num(l.cpus.map(|c| c.to_string())));
    put("enforceLimits", l.enforce.to_string());
    put("requireLimits", l.require.to_string());
    put(
        "network",
        if spec.host_network { "true" } else { "false" }.into(),
    );
    put("mounts", json(&spec.binds));
    put("tmpfs", json(&spec.tmpfs));
    put("user", json(&spec.user));
    put("capDrop", json(&spec.keep_caps));
    put(
        "securityProfile",
        if spec.seccomp.is_some() {
            "untrusted"
        } else {
            "standard"
        }
        .into(),
    );
    put("apparmor", json(&spec.apparmor));
    put("depsReadonly", json(&spec.readonly_in_workspace));
    put("setup", json(&setup));
    p
}

fn json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).unwrap_or_default()
}

/// How a `persist` session meets its box at open().
pub(super) enum Meeting {
    /// The live box of its name, of the same posture.
    Attached(Attached),
    /// No box of that name lives: this session starts it, holding the name's lock until it has
    /// started (`started`).
    Start {
        lock: res::Lock,
        posture: BTreeMap<String, String>,
    },
}

/// Under the name's lock, the live box of that name (refused when its posture differs from
/// `spec`'s), or the lock to start one.
pub(super) async fn meet(
    spec: &BoxSpec,
    image_digest: Option<String>,
    setup: Option<&str>,
    name: &str,
) -> Result<Meeting> {
    let posture = posture(spec, image_digest, setup);
    let dir = tokio::task::spawn_blocking(state_dir)
        .await
        .map_err(|e| Error::Runtime(format!("state task: {e}")))??;
    let (d, n) = (dir.clone(), name.to_string());
    let (lock, live) = tokio::task::spawn_blocking(move || {
        let lock = res::lock(&d, &n)?;
        let live = res::find(&d, &n)?;
        Ok::<_, Error>((lock, live))
    })
    .await
    .map_err(|e| Error::Runtime(format!("state task: {e}")))??;
    let Some(live) = live else {
        return Ok(Meeting::Start { lock, posture });
    };
    let s = &live.state;
    if s.posture_hash != res::posture_hash(&posture) {
        let diff = res::posture_diff(&s.posture, &posture);
        return crate::invalid!(
            "a resident box named {} already runs with another posture: {}; open it with the same options, use another name, or destroy() it first",
            name,
            diff.join("; ")
        );
    }
    drop(lock);
    Ok(Meeting::Attached(Attached {
        target: CallTarget {
            name: name.to_string(),
            pid1: s.pid1,
        },
        noted: AtomicBool::new(false),
        paused: AtomicBool::new(false),
        freezer: std::sync::Mutex::new(None),
        pausing: tokio::sync::Mutex::new(()),
    }))
}

/// The box this session started, from kern's outcome of its start; the name's lock goes then.
pub(super) fn started(outcome: Outcome, name: String, lock: res::Lock) -> Result<Attached> {
    if let Some(why) = outcome.report.limits_refused {
        return Err(Error::IsolationUnavailable(why));
    }
    let Some(pid1) = outcome.report.started else {
        let why = outcome
            .report
            .fault
            .map(|f| f.message)
            .unwrap_or_else(|| "no report".into());
        let stderr = String::from_utf8_lossy(&outcome.stderr);
        return Err(Error::Runtime(format!(
            "the resident box {} could not start: {why}{}",
            name,
            if stderr.trim().is_empty() {
                String::new()
            } else {
                format!(" ({})", stderr.trim())
            }
        )));
    };
    drop(lock);
    Ok(Attached {
        target: CallTarget { name, pid1 },
        noted: AtomicBool::new(false),
        paused: AtomicBool::new(false),
        freezer: std::sync::Mutex::new(None),
        pausing: tokio::sync::Mutex::new(()),
    })
}

/// destroy(): stops the box of this name, whoever started it. Idempotent.
pub(super) async fn destroy(name: String) -> Result<()> {
    tokio::task::spawn_blocking(move || {
        let dir = state_dir()?;
        res::stop(&dir, &name, None, STOP_WAIT).map(drop)
    })
    .await
    .map_err(|e| Error::Runtime(format!("destroy task: {e}")))?
}

fn state_dir() -> Result<PathBuf> {
    res::state_dir()
}
