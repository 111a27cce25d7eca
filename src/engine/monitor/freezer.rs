//! Pausing a live box (`pause()`/`resume()` of a kernel or a `persist` Sandbox, `kern pause`):
//! the cgroup freezer stops every process of the box at once, its memory kept, no CPU used.
//!
//! cgroup v2: the box's own leaf, which holds only the box (its PID 1 is born there, its
//! monitor stays beside it: `cgroup::create_v2`), and a resident box's per-call cgroups under
//! it. cgroup v1 (as root): the freezer is a hierarchy of its own, so the box's processes are
//! moved into a freezer leaf of the box's monitor when it is first paused (never on a call's
//! path). The monitor thaws its box before it kills it (`thaw_own`): a v1-frozen process does
//! not die of SIGKILL until it is thawed. Written by hand, as the rest of `cgroup`: a few files.

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
/// How long the freezer may take to stop every task before pause() gives up and thaws.
const FREEZE_WAIT: Duration = Duration::from_secs(5);

/// Why a box can't be paused or resumed.
#[derive(Debug, thiserror::Error)]
pub enum FreezerError {
    /// This host or this box has no freezer kern may use.
    #[error("{0}")]
    Unsupported(String),
    /// A cgroup file could not be read or written.
    #[error("{what} {path}: {source}")]
    Io {
        what: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// Some task did not stop in time (the box is left running).
    #[error("the box did not stop within {}s (a process in uninterruptible sleep?); it was left running", FREEZE_WAIT.as_secs())]
    Stuck,
}

fn io<'a>(what: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> FreezerError + 'a {
    move |source| FreezerError::Io {
        what,
        path: path.to_path_buf(),
        source,
    }
}

/// What rootless callers on cgroup v1 lack, and the fix, for errors and `kern doctor`.
pub const V1_ROOTLESS: &str = "pausing a box needs a cgroup freezer kern can write: on cgroup v1 only root has one (run as root), or use cgroup v2 with a systemd user session (delegation) or KERN_CGROUP_PARENT";

/// One box's freezer.
#[derive(Debug, Clone)]
pub struct Freezer {
    dir: PathBuf,
    /// v1: the box's processes must be swept into `dir` before it is frozen.
    v1_sweep: Option<libc::pid_t>,
}

impl Freezer {
    /// The freezer of the box whose PID 1 is host pid `pid1`, watched by the `kern` at host pid
    /// `monitor`.
    pub fn for_box(monitor: libc::pid_t, pid1: libc::pid_t) -> Result<Freezer, FreezerError> {
        let cgroup = format!("/proc/{pid1}/cgroup");
        let text = fs::read_to_string(&cgroup).map_err(io("read", Path::new(&cgroup)))?;
        if Path::new(CGROUP_ROOT).join("cgroup.controllers").exists() {
            let path = super::cgroup::line_path(&text, "").unwrap_or_default();
            let is_box = Path::new(&path)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| {
                    n.starts_with("box-") && !n.ends_with(super::cgroup::MONITOR_SUFFIX)
                });
            if !is_box {
                return Err(FreezerError::Unsupported(format!(
                    "the box has no cgroup of its own to freeze (it is in {path:?}): its caps are not in a cgroup here (enforceLimits: false, or no delegated cgroup: run as root, under a systemd user session, or set KERN_CGROUP_PARENT)"
                )));
            }
            // Its monitor must stay out, or it would freeze with the box and could not end it.
            let monitor_in = fs::read_to_string(format!("/proc/{monitor}/cgroup"))
                .ok()
                .and_then(|t| super::cgroup::line_path(&t, ""));
            if monitor_in.as_deref() == Some(path.as_str()) {
                return Err(FreezerError::Unsupported(
                    "the box's monitor shares its cgroup here (the box could not be born in its own: KERN_NO_CLONE_INTO_CGROUP, or a kernel before 5.7), and would freeze with it".into(),
                ));
            }
            return Ok(Freezer {
                dir: Path::new(CGROUP_ROOT).join(path.trim_start_matches('/')),
                v1_sweep: None,
            });
        }
        if !nix::unistd::geteuid().is_root() {
            return Err(FreezerError::Unsupported(V1_ROOTLESS.into()));
        }
        Ok(Freezer {
            dir: v1_leaf(monitor)?,
            v1_sweep: Some(pid1),
        })
    }

    /// Stops every process of the box and waits until all are stopped.
    pub fn freeze(&self) -> Result<(), FreezerError> {
        if let Some(pid1) = self.v1_sweep {
            if let Some(parent) = self.dir.parent() {
                fs::create_dir_all(parent).map_err(io("create", parent))?;
                super::cgroup::sweep_stale(parent);
            }
            match fs::create_dir(&self.dir) {
                Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => {
                    return Err(io("create", &self.dir)(e))
                }
                _ => {}
            }
            sweep_into(&self.dir, pid1)?;
        }
        let (file, value) = self.control(true);
        fs::write(&file, value).map_err(io("write", &file))?;
        let until = Instant::now() + FREEZE_WAIT;
        while !self.is_frozen() {
            if Instant::now() >= until {
                let _ = self.thaw();
                return Err(FreezerError::Stuck);
            }
            std::thread::sleep(Duration::from_micros(500));
        }
        Ok(())
    }

    /// Lets the box run again.
    pub fn thaw(&self) -> Result<(), FreezerError> {
        if self.v1_sweep.is_some() && !self.dir.exists() {
            return Ok(());
        }
        let (file, value) = self.control(false);
        fs::write(&file, value).map_err(io("write", &file))
    }

    /// Whether every process of the box is stopped.
    pub fn is_frozen(&self) -> bool {
        if self.v1_sweep.is_some() {
            fs::read_to_string(self.dir.join("freezer.state")).is_ok_and(|s| s.trim() == "FROZEN")
        } else {
            fs::read_to_string(self.dir.join("cgroup.events"))
                .is_ok_and(|s| s.lines().any(|l| l.trim() == "frozen 1"))
        }
    }

    fn control(&self, frozen: bool) -> (PathBuf, &'static str) {
        match (self.v1_sweep.is_some(), frozen) {
            (true, true) => (self.dir.join("freezer.state"), "FROZEN"),
            (true, false) => (self.dir.join("freezer.state"), "THAWED"),
            (false, true) => (self.dir.join("cgroup.freeze"), "1"),
            (false, false) => (self.dir.join("cgroup.freeze"), "0"),
        }
    }
}

/// The v1 freezer leaf of the box watched by `monitor`, beside its other leaves.
fn v1_leaf(monitor: libc::pid_t) -> Result<PathBuf, FreezerError> {
    let mount = super::cgroup::v1_mount("freezer").ok_or_else(|| {
        FreezerError::Unsupported("no cgroup v1 freezer hierarchy is mounted here".into())
    })?;
    let own = fs::read_to_string(format!("/proc/{monitor}/cgroup"))
        .ok()
        .and_then(|t| super::cgroup::line_path(&t, "freezer"))
        .unwrap_or_else(|| "/".into());
    Ok(mount
        .join(own.trim_start_matches('/'))
        .join("kern-sandbox")
        .join(format!("box-{monitor}-frozen")))
}

/// Moves every process in `pid1`'s PID namespace into `dir`, pass after pass until a pass finds
/// none outside: a process outside can only fork more outside, one inside only more inside, so
/// once none is outside none can appear (the box's pids cap bounds the passes).
fn sweep_into(dir: &Path, pid1: libc::pid_t) -> Result<(), FreezerError> {
    let ns = |pid: &str| fs::read_link(format!("/proc/{pid}/ns/pid")).ok();
    let pid1s = pid1.to_string();
    let target = ns(&pid1s).ok_or_else(|| {
        FreezerError::Unsupported(format!(
            "the box's PID 1 (host pid {pid1}) is gone or can't be read"
        ))
    })?;
    let mut inside: HashSet<String> = HashSet::new();
    let procs = dir.join("cgroup.procs");
    for _ in 0..1000 {
        let mut moved = false;
        let Ok(entries) = fs::read_dir("/proc") else {
            break;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(pid) = name
                .to_str()
                .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
            else {
                continue;
            };
            if inside.contains(pid) || ns(pid).as_ref() != Some(&target) {
                continue;
            }
            match fs::write(&procs, pid) {
                Ok(()) => {
                    moved = true;
                    inside.insert(pid.to_string());
                }
                // Gone meanwhile.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => return Err(io("move a process into", &procs)(e)),
            }
        }
        if !moved {
            return Ok(());
        }
    }
    Err(FreezerError::Stuck)
}

/// The monitor's part, before it kills its box: thaws a v1 freezer leaf it may have been
/// paused in (v2 kills frozen tasks; its leaf is thawed too, for the reaper's sake).
pub fn thaw_own(v2_leaf: Option<&Path>) {
    if let Some(leaf) = v2_leaf {
        let _ = fs::write(leaf.join("cgroup.freeze"), "0");
    }
    if let Ok(leaf) = v1_leaf(std::process::id() as libc::pid_t) {
        if leaf.exists() {
            let _ = fs::write(leaf.join("freezer.state"), "THAWED");
        }
    }
}

/// The monitor's part, once its box is gone: removes the v1 freezer leaf, if it made one.
pub fn remove_own() {
    if let Ok(leaf) = v1_leaf(std::process::id() as libc::pid_t) {
        for _ in 0..50 {
            match fs::remove_dir(&leaf) {
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {
                    std::thread::sleep(Duration::from_micros(200))
                }
                _ => break,
            }
        }
    }
}
