//! The state file of resident boxes: one small JSON file per name in a private directory, so
//! processes that name the same sandbox meet the same box, and `kern ps`/`exec`/`stop` find it.
//!
//! `<dir>/<name>.json` (0600, written atomically) is guarded by an flock on `<dir>/<name>.lock`.
//! A pid on its own proves nothing (pids are recycled): every reader opens a pidfd and then checks
//! the process's start time against the file, so a recycled pid reads as "box gone", never as the
//! box. A file whose box is gone is removed under the lock by whoever finds it.

use crate::engine::shared::handoff::Fallback;
use crate::engine::shared::spec::BoxSpec;
use crate::engine::shared::sys::{self, ProcId};
use crate::error::{Error, Result};
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// One resident box, as its state file holds it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct State {
    pub name: String,
    /// The box's PID 1, in the host's pid namespace.
    pub pid1: ProcId,
    /// The `kern` that watches the box (TTL, cleanup).
    pub monitor: ProcId,
    pub posture_hash: String,
    /// The options that define the box, by option name.
    pub posture: BTreeMap<String, String>,
    pub workspace: PathBuf,
    pub created_unix_ms: u64,
    pub deadline_unix_ms: u64,
    /// The box's own spec: the posture every call into it gets (account, capabilities,
    /// seccomp, AppArmor) and the environment `kern exec` starts from.
    pub spec: BoxSpec,
    /// rlimits calls get when the box's caps are not in a cgroup (as a fresh box's workload
    /// would).
    pub rlimits: Fallback,
    /// The box has its own cgroup namespace (it has a cgroup of its own).
    #[serde(default)]
    pub cgroup_ns: bool,
    /// Descriptors of the box's namespaces that its monitor holds open, by kind ("user", "mnt",
    /// ...): a call opens them through `/proc/<monitor>/fd`. PID 1 is non-dumpable, so only root
    /// may open its `/proc/<pid>/ns` or setns through its pidfd; the monitor, the caller's own
    /// dumpable process outside the box, is reachable by the same user.
    #[serde(default)]
    pub ns_fds: Vec<(String, i32)>,
}

/// `^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`: a file name on its own, never a path.
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name.as_bytes()[0].is_ascii_alphanumeric()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        crate::invalid!("name {name:?} is not a valid sandbox name: use 1-64 letters, digits, '_', '.' or '-', starting with a letter or digit")
    }
}

/// `$XDG_RUNTIME_DIR/kern-sandbox`, else `<cache dir>/resident` (`$KERN_HOME`,
/// `$XDG_CACHE_HOME/kern-sandbox`, `~/.cache/kern-sandbox`). Created 0700; refused when it is
/// not ours or others can write it (their file could name any process as "the box").
pub fn state_dir() -> Result<PathBuf> {
    let dir = match std::env::var_os("XDG_RUNTIME_DIR").map(PathBuf::from) {
        Some(d) if d.is_absolute() => d.join("kern-sandbox"),
        _ => crate::home::root()
            .map_err(|e| Error::Invalid(e.to_string()))?
            .join("resident"),
    };
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&dir)
        .map_err(|e| Error::Runtime(format!("create {}: {e}", dir.display())))?;
    let m = fs::metadata(&dir).map_err(|e| Error::Runtime(format!("{}: {e}", dir.display())))?;
    if m.uid() != nix::unistd::geteuid().as_raw() || m.mode() & 0o022 != 0 {
        return crate::invalid!(
            "the resident-box state directory {} belongs to another user or is writable by others; remove it or fix its owner and mode (0700)",
            dir.display()
        );
    }
    Ok(dir)
}

fn state_path(dir: &Path, name: &str) -> PathBuf {
    dir.join(format!("{name}.json"))
}

/// The name's lock, held while a box is looked up and started, and while a state file is
/// removed.
pub struct Lock(#[allow(dead_code)] Flock<File>);

pub fn lock(dir: &Path, name: &str) -> Result<Lock> {
    check_name(name)?;
    let path = dir.join(format!("{name}.lock"));
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| Error::Runtime(format!("open {}: {e}", path.display())))?;
    Flock::lock(file, FlockArg::LockExclusive)
        .map(Lock)
        .map_err(|(_, e)| Error::Runtime(format!("lock {}: {e}", path.display())))
}

/// The state file as written, live or not; None when there is none.
pub fn read(dir: &Path, name: &str) -> Result<Option<State>> {
    check_name(name)?;
    let path = state_path(dir, name);
    match fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            Error::Runtime(format!(
                "the state file {} is not readable ({e}); remove it",
                path.display()
            ))
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::Runtime(format!("read {}: {e}", path.display()))),
    }
}

/// Writes the state atomically (a temporary file renamed over), 0600.
pub fn write(dir: &Path, state: &State) -> Result<()> {
    check_name(&state.name)?;
    let io = |e: std::io::Error| Error::Runtime(format!("write the state of {}: {e}", state.name));
    let mut tmp = tempfile::Builder::new()
        .prefix(".state-")
        .tempfile_in(dir)
        .map_err(io)?;
    // tempfile creates 0600 already; said again so it never depends on that.
    fs::set_permissions(
        tmp.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o600),
    )
    .map_err(io)?;
    let json = serde_json::to_vec(state).map_err(|e| Error::Runtime(e.to_string()))?;
    tmp.write_all(&json).map_err(io)?;
    tmp.as_file().sync_all().map_err(io)?;
    tmp.persist(state_path(dir, &state.name))
        .map_err(|e| io(e.error))?;
    Ok(())
}

/// Removes the state file if it still describes the box watched by `monitor` (a newer box of
/// the same name keeps its file). Takes the lock.
pub fn remove_if_monitor(dir: &Path, name: &str, monitor: &ProcId) {
    let Ok(_lock) = lock(dir, name) else { return };
    if let Ok(Some(s)) = read(dir, name) {
        if &s.monitor == monitor {
            let _ = fs::remove_file(state_path(dir, name));
        }
    }
}

/// A live box and a pidfd on its PID 1.
pub struct Live {
    pub state: State,
    pub pid1: OwnedFd,
}

/// The live box of this name (the caller holds the lock). A file whose box is gone, or that
/// can't be read, is removed.
pub fn find(dir: &Path, name: &str) -> Result<Option<Live>> {
    let state = match read(dir, name) {
        Ok(Some(s)) => s,
        Ok(None) => return Ok(None),
        Err(Error::Runtime(_)) => {
            let _ = fs::remove_file(state_path(dir, name));
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    match state.pid1.pidfd() {
        Some(pid1) if state.name == name => Ok(Some(Live { state, pid1 })),
        _ => {
            let _ = fs::remove_file(state_path(dir, name));
            Ok(None)
        }
    }
}

/// Every live box (stale files are cleaned up on the way).
pub fn list(dir: &Path) -> Vec<State> {
    let Ok(entries) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .flatten()
        .filter_map(|e| {
            e.file_name()
                .to_str()
                .and_then(|n| n.strip_suffix(".json"))
                .filter(|n| check_name(n).is_ok())
                .map(str::to_string)
        })
        .collect();
    names.sort();
    names
        .into_iter()
        .filter_map(|n| {
            let _lock = lock(dir, &n).ok()?;
            find(dir, &n).ok().flatten().map(|l| l.state)
        })
        .collect()
}

/// Stops the box of this name: SIGKILL to its PID 1 (which ends the whole PID namespace), then
/// waits until its monitor has removed the state file and the cgroup and exited. Idempotent:
/// `Ok(false)` when there was no live box. `only`: stop it only if its PID 1 is this one.
pub fn stop(dir: &Path, name: &str, only: Option<&ProcId>, wait: Duration) -> Result<bool> {
    let (state, pid1) = {
        let _lock = lock(dir, name)?;
        match find(dir, name)? {
            Some(l) if only.is_none_or(|p| *p == l.state.pid1) => (l.state, l.pid1),
            _ => return Ok(false),
        }
    };
    // Opened before the kill, so the monitor's exit can be waited for without a pid race.
    let monitor = state.monitor.pidfd();
    sys::pidfd_kill(pid1.as_fd(), libc::SIGKILL)
        .map_err(|e| Error::Runtime(format!("stop the resident box {name}: {e}")))?;
    // A paused box is thawed, or on cgroup v1 its frozen tasks would not die (and the monitor,
    // waiting for PID 1, would not clean up).
    if let Ok(f) =
        crate::engine::monitor::freezer::Freezer::for_box(state.monitor.pid, state.pid1.pid)
    {
        let _ = f.thaw();
    }
    let deadline = Instant::now() + wait;
    if let Some(m) = &monitor {
        let mut fds = [nix::poll::PollFd::new(
            m.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let ms = left.as_millis().min(10_000) as u16;
            match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(ms)) {
                Ok(n) if n > 0 => break,
                Ok(_) | Err(nix::errno::Errno::EINTR) => continue,
                Err(_) => break,
            }
        }
    }
    // A monitor that was killed never cleaned up: the file goes here; its cgroup leaf is
    // swept by the next box (see `cgroup::sweep_stale`).
    remove_if_monitor(dir, name, &state.monitor);
    Ok(true)
}

/// A stable digest of the posture, for a quick comparison.
pub fn posture_hash(posture: &BTreeMap<String, String>) -> String {
    use sha2::{Digest, Sha256};
    let json = serde_json::to_vec(posture).unwrap_or_default();
    let digest = Sha256::digest(&json);
    hex::encode(digest)
}

/// The options whose values differ, as `option (box: a, here: b)`.
pub fn posture_diff(
    boxed: &BTreeMap<String, String>,
    here: &BTreeMap<String, String>,
) -> Vec<String> {
    let none = String::from("unset");
    let mut keys: Vec<&String> = boxed.keys().chain(here.keys()).collect();
    keys.sort();
    keys.dedup();
    keys.into_iter()
        .filter(|k| boxed.get(*k) != here.get(*k))
        .map(|k| {
            format!(
                "{k} (box: {}, here: {})",
                boxed.get(k).unwrap_or(&none),
                here.get(k).unwrap_or(&none)
            )
        })
        .collect()
}

pub fn now_unix_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
