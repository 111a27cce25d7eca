//! Resource caps through cgroupfs, written directly (a handful of files does not justify a
//! D-Bus stack). v1 (this test machine: hybrid, no systemd) and v2 (laptops: unified, systemd
//! with a delegated subtree for an unprivileged user) both end in one leaf per box that `kern`
//! creates before the box starts and removes after it ended.

use crate::engine::shared::spec::Limits;
use std::fs;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::path::{Path, PathBuf};

const CGROUP_ROOT: &str = "/sys/fs/cgroup";
const CFS_PERIOD_US: u64 = 100_000;

/// Which of the caps asked for a cgroup really enforces.
#[derive(Debug, Default, Clone, Copy)]
pub struct Enforced {
    pub memory: bool,
    pub pids: bool,
    pub cpu: bool,
}

#[derive(Debug)]
enum Layout {
    /// One directory per controller (memory, pids, cpu).
    V1 {
        memory: Option<PathBuf>,
        pids: Option<PathBuf>,
        cpu: Option<PathBuf>,
    },
    /// `origin`: the cgroup this process was in before it moved into `leaf`.
    V2 {
        leaf: PathBuf,
        origin: Option<PathBuf>,
    },
}

/// The cgroup hierarchy kern writes caps into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// Unified (`/sys/fs/cgroup` is cgroup2).
    V2,
    /// Controllers in v1 hierarchies; `hybrid`: a cgroup2 mount beside them, without
    /// controllers kern could use.
    V1 { hybrid: bool },
}

/// Which hierarchy this host has, `None` when no cgroup filesystem is mounted where kern looks.
pub fn version() -> Option<Version> {
    let root = Path::new(CGROUP_ROOT);
    if root.join("cgroup.controllers").exists() {
        Some(Version::V2)
    } else if root.join("memory").is_dir() {
        Some(Version::V1 {
            hybrid: root.join("unified/cgroup.controllers").exists(),
        })
    } else {
        None
    }
}

/// One box's cgroup leaf (or leaves, on v1).
#[derive(Debug)]
pub struct BoxCgroup {
    layout: Layout,
    pub enforced: Enforced,
}

impl BoxCgroup {
    /// Creates the leaf and writes the caps. `Err` carries a reason for the runtime note when no
    /// cap could be applied through a cgroup at all.
    pub fn create(limits: &Limits, id: &str) -> Result<BoxCgroup, String> {
        match version() {
            Some(Version::V2) => create_v2(limits, id),
            Some(Version::V1 { .. }) => create_v1(limits, id),
            None => Err(format!("no cgroup filesystem is mounted at {CGROUP_ROOT}")),
        }
    }

    /// The v2 leaf (the box's freezer there); None on v1.
    pub fn v2_leaf(&self) -> Option<&Path> {
        match &self.layout {
            Layout::V2 { leaf, .. } => Some(leaf),
            Layout::V1 { .. } => None,
        }
    }

    /// `"v1"` or `"v2"`: the hierarchy this cgroup is in.
    pub fn version_name(&self) -> &'static str {
        match self.layout {
            Layout::V1 { .. } => "v1",
            Layout::V2 { .. } => "v2",
        }
    }

    /// Reads the memory and pids caps back and checks `pid` (when given) is inside the leaf:
    /// what `requireLimits` trusts, rather than the writes having returned Ok.
    pub fn verify(&self, limits: &Limits, pid: Option<libc::pid_t>) -> Result<(), String> {
        let read = |p: PathBuf| {
            fs::read_to_string(&p)
                .map(|s| s.trim().to_string())
                .map_err(|e| format!("read {}: {e}", p.display()))
        };
        let (memory, pids) = match &self.layout {
            Layout::V1 { memory, pids, .. } => (
                memory.as_ref().map(|d| d.join("memory.limit_in_bytes")),
                pids.as_ref().map(|d| d.join("pids.max")),
            ),
            Layout::V2 { leaf, .. } => (Some(leaf.join("memory.max")), Some(leaf.join("pids.max"))),
        };
        if let Some(bytes) = limits.memory_bytes {
            let file = memory.ok_or("no memory cgroup holds the box")?;
            let got: u64 = read(file.clone())?
                .parse()
                .map_err(|_| format!("{} is not a number", file.display()))?;
            // The kernel rounds the cap down to whole pages.
            if got > bytes || bytes - got >= 4096 * 16 {
                return Err(format!(
                    "{} reads {got}, not the {bytes} asked for",
                    file.display()
                ));
            }
        }
        if let Some(max) = limits.pids {
            let file = pids.ok_or("no pids cgroup holds the box")?;
            let got = read(file.clone())?;
            if got != max.to_string() {
                return Err(format!(
                    "{} reads {got}, not the {max} asked for",
                    file.display()
                ));
            }
        }
        let Some(pid) = pid else { return Ok(()) };
        let mine = read(PathBuf::from(format!("/proc/{pid}/cgroup")))?;
        for dir in self.dirs() {
            let rel = dir.strip_prefix(CGROUP_ROOT).unwrap_or(dir);
            let tail = rel
                .components()
                .skip(usize::from(matches!(self.layout, Layout::V1 { .. })))
                .collect::<PathBuf>();
            let tail = format!("/{}", tail.display());
            if !mine.lines().any(|l| l.ends_with(&format!(":{tail}"))) {
                return Err(format!("process {pid} is not in {}", dir.display()));
            }
        }
        Ok(())
    }

    /// The v2 leaf opened for `clone3(CLONE_INTO_CGROUP)`, so the box's PID 1 is born in it
    /// without this process moving. None on v1.
    pub fn open_leaf(&self) -> Option<io::Result<OwnedFd>> {
        match &self.layout {
            Layout::V2 { leaf, .. } => Some(open_for_birth(leaf)),
            Layout::V1 { .. } => None,
        }
    }

    /// Moves `pid` (and so every process it will start) into the box's cgroup.
    pub fn add(&self, pid: libc::pid_t) -> io::Result<()> {
        let pid = pid.to_string();
        for dir in self.dirs() {
            fs::write(dir.join("cgroup.procs"), &pid)?;
        }
        Ok(())
    }

    /// How many times the kernel's OOM killer acted in this box.
    pub fn oom_kills(&self) -> u64 {
        let (file, key) = match &self.layout {
            Layout::V1 {
                memory: Some(m), ..
            } => (m.join("memory.oom_control"), "oom_kill"),
            Layout::V1 { memory: None, .. } => return 0,
            Layout::V2 { leaf, .. } => (leaf.join("memory.events"), "oom_kill"),
        };
        read_keyed(&file, key).unwrap_or(0)
    }

    /// Bytes of shared memory (tmpfs, /dev/shm) charged to the box: the pages stay charged
    /// while the box's mount namespace lives, even after its last process ended.
    pub fn shmem_bytes(&self) -> u64 {
        match &self.layout {
            Layout::V1 {
                memory: Some(m), ..
            } => read_keyed(&m.join("memory.stat"), "total_shmem").unwrap_or(0),
            Layout::V1 { memory: None, .. } => 0,
            Layout::V2 { leaf, .. } => read_keyed(&leaf.join("memory.stat"), "shmem").unwrap_or(0),
        }
    }

    /// Moves this process back to the cgroup(s) it came from, so the leaf can be removed.
    pub fn leave(&self) {
        let pid = std::process::id().to_string();
        for dir in self.dirs() {
            // v1: <mount>/<own>/kern-sandbox/<id> -> <mount>/<own>; v2: <parent>/<id> -> own.
            let origin = match &self.layout {
                Layout::V1 { .. } => dir.parent().and_then(Path::parent).map(Path::to_path_buf),
                Layout::V2 { origin, .. } => origin.clone(),
            };
            if let Some(origin) = origin {
                let _ = fs::write(origin.join("cgroup.procs"), &pid);
            }
        }
    }

    /// Kills anything left (v2 `cgroup.kill`) and removes the leaf. Best effort: a leaf that
    /// can't be removed is left for the next run of the same parent to find, never an error for
    /// the caller's result.
    pub fn remove(&self) {
        if let Layout::V2 { leaf, .. } = &self.layout {
            let _ = fs::write(leaf.join("cgroup.kill"), "1");
        }
        for dir in self.dirs() {
            // A resident box's per-call cgroups go first. Their box processes died with the box;
            // what is left are callers' spare kerns waiting for a call, sent back where this
            // process came from (their call will find the box gone).
            let origin = match &self.layout {
                Layout::V1 { .. } => dir.parent().and_then(Path::parent).map(Path::to_path_buf),
                Layout::V2 { origin, .. } => origin.clone(),
            };
            remove_calls(dir, origin.as_deref());
            for attempt in 0..50 {
                match fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.raw_os_error() == Some(libc::EBUSY) && attempt < 49 => {
                        // The last task of the box is still being torn down by the kernel.
                        std::thread::sleep(std::time::Duration::from_micros(200));
                    }
                    Err(_) => break,
                }
            }
        }
    }

    fn dirs(&self) -> Vec<&Path> {
        match &self.layout {
            Layout::V1 { memory, pids, cpu } => [memory, pids, cpu]
                .into_iter()
                .filter_map(|d| d.as_deref())
                .collect(),
            Layout::V2 { leaf, .. } => vec![leaf.as_path()],
        }
    }
}

fn read_keyed(file: &Path, key: &str) -> Option<u64> {
    let text = fs::read_to_string(file).ok()?;
    text.lines().find_map(|line| {
        let (k, v) = line.split_once(' ')?;
        (k == key).then(|| v.trim().parse().ok()).flatten()
    })
}

/// This process's cgroup path for one v1 controller, or the v2 path (`controller` = "").
fn own_path(controller: &str) -> Option<String> {
    line_path(&fs::read_to_string("/proc/self/cgroup").ok()?, controller)
}

/// The path of `controller`'s line in a `/proc/<pid>/cgroup` text ("" for the v2 line).
pub(crate) fn line_path(text: &str, controller: &str) -> Option<String> {
    text.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let _id = parts.next()?;
        let ctrls = parts.next()?;
        let path = parts.next()?;
        let matches = if controller.is_empty() {
            ctrls.is_empty()
        } else {
            ctrls.split(',').any(|c| c == controller)
        };
        matches.then(|| path.to_string())
    })
}

pub fn v1_mount(controller: &str) -> Option<PathBuf> {
    let direct = Path::new(CGROUP_ROOT).join(controller);
    if direct.is_dir() {
        return Some(direct);
    }
    // Some distributions mount cpu as "cpu,cpuacct" without a "cpu" symlink.
    fs::read_dir(CGROUP_ROOT).ok()?.flatten().find_map(|e| {
        let name = e.file_name().into_string().ok()?;
        name.split(',').any(|c| c == controller).then(|| e.path())
    })
}

/// Removes leaves of boxes whose `kern` died without cleaning up (killed with SIGKILL): the
/// leaf's name carries the kern pid, and a leaf is removed only when that pid is gone and the
/// leaf holds no process.
pub(crate) fn sweep_stale(parent: &Path) {
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name
            .to_str()
            .and_then(|n| n.strip_prefix("box-"))
            .and_then(|n| n.split('-').next())
            .and_then(|p| p.parse::<i32>().ok())
        else {
            continue;
        };
        let alive = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), None).is_ok();
        let empty =
            fs::read_to_string(e.path().join("cgroup.procs")).is_ok_and(|p| p.trim().is_empty());
        if !alive && empty {
            remove_calls(&e.path(), None);
            let _ = fs::remove_dir(e.path());
        }
    }
}

fn v1_leaf(controller: &str, id: &str) -> io::Result<PathBuf> {
    let mount = v1_mount(controller).ok_or_else(|| {
        io::Error::new(
            io::ErrorKind::NotFound,
            format!("{controller} controller not mounted"),
        )
    })?;
    let own = own_path(controller).unwrap_or_else(|| "/".into());
    let parent = mount.join(own.trim_start_matches('/')).join("kern-sandbox");
    sweep_stale(&parent);
    let leaf = parent.join(id);
    fs::create_dir_all(&leaf)?;
    Ok(leaf)
}

/// Makes the v1 leaf of one controller and writes its caps with `write`; on failure the
/// reason goes to `errors` and the cap stays unenforced.
fn v1_capped(
    controller: &str,
    id: &str,
    errors: &mut Vec<String>,
    write: impl FnOnce(&Path) -> io::Result<()>,
) -> Option<PathBuf> {
    match v1_leaf(controller, id).and_then(|leaf| write(&leaf).map(|()| leaf)) {
        Ok(leaf) => Some(leaf),
        Err(e) => {
            errors.push(format!("{controller}: {e}"));
            None
        }
    }
}

fn create_v1(limits: &Limits, id: &str) -> Result<BoxCgroup, String> {
    let mut errors = Vec::new();
    let memory = limits.memory_bytes.and_then(|bytes| {
        v1_capped("memory", id, &mut errors, |leaf| {
            fs::write(leaf.join("memory.limit_in_bytes"), bytes.to_string())?;
            // Without a memsw cap the box could push its pages to swap and exceed the cap.
            let memsw = leaf.join("memory.memsw.limit_in_bytes");
            if memsw.exists() {
                fs::write(memsw, bytes.to_string())?;
            }
            Ok(())
        })
    });
    let pids = limits.pids.and_then(|max| {
        v1_capped("pids", id, &mut errors, |leaf| {
            fs::write(leaf.join("pids.max"), max.to_string())
        })
    });
    let cpu = limits.cpus.and_then(|cores| {
        v1_capped("cpu", id, &mut errors, |leaf| {
            fs::write(leaf.join("cpu.cfs_period_us"), CFS_PERIOD_US.to_string())?;
            fs::write(leaf.join("cpu.cfs_quota_us"), cfs_quota(cores).to_string())
        })
    });
    let enforced = Enforced {
        memory: memory.is_some(),
        pids: pids.is_some(),
        cpu: cpu.is_some(),
    };
    let cg = BoxCgroup {
        layout: Layout::V1 { memory, pids, cpu },
        enforced,
    };
    if !errors.is_empty() && cg.dirs().is_empty() {
        return Err(format!("cgroup v1: {}", errors.join("; ")));
    }
    Ok(cg)
}

fn cfs_quota(cores: f64) -> u64 {
    ((cores * CFS_PERIOD_US as f64).round() as u64).max(1000)
}

fn create_v2(limits: &Limits, id: &str) -> Result<BoxCgroup, String> {
    let own = own_path("").map(|p| Path::new(CGROUP_ROOT).join(p.trim_start_matches('/')));
    let (parent, delegated_self) =
        v2_parent(own.as_deref()).map_err(|e| format!("cgroup v2: {e}"))?;
    sweep_stale(&parent);
    let leaf = parent.join(id);
    let beside = parent.join(format!("{id}{MONITOR_SUFFIX}"));
    fs::create_dir(&leaf).map_err(|e| format!("cgroup v2: mkdir {}: {e}", leaf.display()))?;
    if delegated_self {
        // Our own delegated scope: leave it first, since controllers can only be enabled for a
        // cgroup's children while it holds no process itself. Into a sibling of the leaf, not
        // the leaf: the box is then born alone in its leaf (`open_leaf`), so its pids cap
        // counts only the box and the leaf can be frozen (`freezer`) without its monitor.
        fs::create_dir(&beside)
            .and_then(|()| fs::write(beside.join("cgroup.procs"), std::process::id().to_string()))
            .map_err(|e| format!("cgroup v2: move into {}: {e}", beside.display()))?;
        enable_controllers(&parent).map_err(|e| format!("cgroup v2: enable controllers: {e}"))?;
    }
    let available = fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap_or_default();
    let has = |c: &str| available.split_whitespace().any(|x| x == c);
    let mut enforced = Enforced::default();
    if let (Some(bytes), true) = (limits.memory_bytes, has("memory")) {
        enforced.memory = fs::write(leaf.join("memory.max"), bytes.to_string()).is_ok();
        let _ = fs::write(leaf.join("memory.swap.max"), "0");
    }
    if let (Some(max), true) = (limits.pids, has("pids")) {
        enforced.pids = fs::write(leaf.join("pids.max"), max.to_string()).is_ok();
    }
    if let (Some(cores), true) = (limits.cpus, has("cpu")) {
        let value = format!("{} {CFS_PERIOD_US}", cfs_quota(cores));
        enforced.cpu = fs::write(leaf.join("cpu.max"), value).is_ok();
    }
    Ok(BoxCgroup {
        layout: Layout::V2 {
            leaf,
            // In our own scope, back to kern's own cgroup beside the leaf (systemd removes the
            // scope and everything under it once kern has exited).
            origin: if delegated_self { Some(beside) } else { own },
        },
        enforced,
    })
}

/// The v2 directory under which box leaves are made, and whether it is this process's own
/// delegated cgroup. `KERN_CGROUP_PARENT` names one explicitly (a delegated subtree the caller
/// prepared). As root, `kern-sandbox` at the root of the hierarchy. Unprivileged, the cgroup
/// kern was started in, when it is delegated to us: the addon starts kern under
/// `systemd-run --user --scope -p Delegate=yes` where a systemd user manager runs.
fn v2_parent(own: Option<&Path>) -> io::Result<(PathBuf, bool)> {
    if let Ok(p) = std::env::var("KERN_CGROUP_PARENT") {
        let parent = PathBuf::from(p);
        fs::create_dir_all(&parent)?;
        enable_controllers(&parent)?;
        return Ok((parent, false));
    }
    if nix::unistd::geteuid().is_root() {
        let parent = Path::new(CGROUP_ROOT).join("kern-sandbox");
        fs::create_dir_all(&parent)?;
        enable_controllers(&parent)?;
        return Ok((parent, false));
    }
    let writable = |p: &Path| nix::unistd::access(p, nix::unistd::AccessFlags::W_OK).is_ok();
    match own {
        Some(dir)
            if writable(&dir.join("cgroup.procs"))
                && writable(&dir.join("cgroup.subtree_control")) =>
        {
            Ok((dir.to_path_buf(), true))
        }
        _ => Err(io::Error::other(
            "this process's cgroup is not delegated to this user (no systemd user manager to \
             delegate one, or kern was not started in a delegated scope); set KERN_CGROUP_PARENT \
             to a delegated cgroup directory",
        )),
    }
}

/// `dir` (a v2 cgroup) opened for `clone3(CLONE_INTO_CGROUP)`, if the kernel will let this
/// process put a child there. The rule is a move's: write access to `cgroup.procs` of the lowest
/// cgroup holding both this process's and `dir` (an unprivileged kern outside the delegated
/// subtree has none), checked here so a refusal is known before the clone, as a refused move is.
fn open_for_birth(dir: &Path) -> io::Result<OwnedFd> {
    let own =
        own_path("").ok_or_else(|| io::Error::other("no cgroup v2 line in /proc/self/cgroup"))?;
    let own = Path::new(CGROUP_ROOT).join(own.trim_start_matches('/'));
    let common: PathBuf = own
        .components()
        .zip(dir.components())
        .take_while(|(a, b)| a == b)
        .map(|(a, _)| a)
        .collect();
    nix::unistd::access(&common.join("cgroup.procs"), nix::unistd::AccessFlags::W_OK)
        .map_err(|e| io::Error::other(format!("{}: {e}", common.display())))?;
    // std opens O_RDONLY|O_CLOEXEC, which a directory allows.
    fs::File::open(dir).map(OwnedFd::from)
}

/// The name kern's own cgroup gets beside a box's leaf, in its own delegated scope.
pub(crate) const MONITOR_SUFFIX: &str = "-kern";

/// Whether a process can be born in a cgroup here (`sys::clone_fork_into`): cgroup v2 and a
/// kernel with `CLONE_INTO_CGROUP` (5.7+). `KERN_NO_CLONE_INTO_CGROUP=1` turns it off, to
/// measure or rule out this path (kern then moves itself in first, as on cgroup v1).
pub fn birth_possible() -> bool {
    let off =
        std::env::var_os("KERN_NO_CLONE_INTO_CGROUP").is_some_and(|v| !v.is_empty() && v != "0");
    !off && version() == Some(Version::V2)
        && crate::engine::shared::sys::clone_into_cgroup_supported()
}

/// Enables memory, pids and cpu (those the parent offers) for `dir`'s children. Fails with EBUSY
/// if `dir` holds processes itself (the no-internal-process rule): those are moved into a child
/// `idle` leaf first.
fn enable_controllers(dir: &Path) -> io::Result<()> {
    let offered = fs::read_to_string(dir.join("cgroup.controllers"))?;
    let wanted: Vec<String> = ["memory", "pids", "cpu"]
        .iter()
        .filter(|c| offered.split_whitespace().any(|o| o == **c))
        .map(|c| format!("+{c}"))
        .collect();
    if wanted.is_empty() {
        return Ok(());
    }
    let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    if !procs.trim().is_empty() {
        let idle = dir.join("idle");
        fs::create_dir_all(&idle)?;
        for pid in procs.lines() {
            let _ = fs::write(idle.join("cgroup.procs"), pid);
        }
    }
    fs::write(dir.join("cgroup.subtree_control"), wanted.join(" "))
}

/// The per-call cgroups a resident box's calls left (see `CallCgroup`), once they are empty.
fn remove_calls(dir: &Path, move_to: Option<&Path>) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        if e.file_name()
            .to_str()
            .is_some_and(|n| n.starts_with(CALL_PREFIX))
        {
            if let Some(to) = move_to {
                let procs = fs::read_to_string(e.path().join("cgroup.procs")).unwrap_or_default();
                for pid in procs.lines() {
                    let _ = fs::write(to.join("cgroup.procs"), pid);
                }
            }
            for _ in 0..50 {
                match fs::remove_dir(e.path()) {
                    Err(err) if err.raw_os_error() == Some(libc::EBUSY) => {
                        std::thread::sleep(std::time::Duration::from_micros(200))
                    }
                    _ => break,
                }
            }
        }
    }
}

const CALL_PREFIX: &str = "call-";

/// One call into a resident box: a child of the box's cgroup (in each v1 controller the box
/// has, or its v2 leaf). The caps stay the box's (cgroups are hierarchical); the child exists so
/// a timeout can kill exactly this call's process tree, wherever its processes went in the PID
/// namespace. On cgroup v2 the call's init is cloned into it (`birth`); elsewhere the `kern`
/// that runs the call moves itself in first (off the call's path, like a spare for a fresh box),
/// so everything it forks is born inside.
#[derive(Debug)]
pub struct CallCgroup {
    dirs: Vec<PathBuf>,
    v2: bool,
    /// The box's memory cgroup, whose OOM counter tells whether the call met the cap.
    box_memory: Option<PathBuf>,
    /// Where this process was before, per dir, to go back to before the rmdir.
    origins: Vec<PathBuf>,
    /// The v2 call cgroup, open, when the call's init is born in it and this process stays out.
    birth: Option<OwnedFd>,
}

impl CallCgroup {
    /// The call cgroup under the box whose PID 1 is `pid1`, with this process inside, or, with
    /// `born` on cgroup v2, open for the call's init to be born in (`birth`). `Ok(None)` when the
    /// box has no cgroup of its own (rootless without delegation: its caps are rlimits, which the
    /// call inherits). An `Err` when it has one and the call can't be placed in it: run anyway,
    /// the call would escape the box's caps, so the caller fails it instead.
    pub fn enter(pid1: libc::pid_t, id: &str, born: bool) -> Result<Option<CallCgroup>, String> {
        let Ok(text) = fs::read_to_string(format!("/proc/{pid1}/cgroup")) else {
            return Ok(None);
        };
        let refused = |dir: &Path, e: io::Error| {
            format!(
                "this call could not be placed in the resident box's cgroup ({}: {e}), so it would run outside the box's caps; kern refused to run it (unprivileged on cgroup v2, calls need a systemd user manager to start them in a delegated scope, as the box was)",
                dir.display()
            )
        };
        let is_box = |p: &str| {
            Path::new(p)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("box-"))
        };
        let v2 = Path::new(CGROUP_ROOT).join("cgroup.controllers").exists();
        let mut boxes: Vec<(PathBuf, String)> = Vec::new();
        let mut box_memory = None;
        for line in text.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(_), Some(ctrls), Some(path)) = (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if !is_box(path) {
                continue;
            }
            let rel = path.trim_start_matches('/');
            let (dir, ctrl) = if v2 && ctrls.is_empty() {
                (Path::new(CGROUP_ROOT).join(rel), String::new())
            } else if !v2 {
                let Some(c) = ["memory", "pids", "cpu"]
                    .into_iter()
                    .find(|c| ctrls.split(',').any(|x| x == *c))
                else {
                    continue;
                };
                let Some(mount) = v1_mount(c) else { continue };
                (mount.join(rel), c.to_string())
            } else {
                continue;
            };
            if ctrl == "memory" || v2 {
                box_memory = Some(dir.clone());
            }
            boxes.push((dir, ctrl));
        }
        if boxes.is_empty() {
            return Ok(None);
        }
        let mut cg = CallCgroup {
            dirs: Vec::new(),
            v2,
            box_memory,
            origins: Vec::new(),
            birth: None,
        };
        if let ([(dir, _)], true, true) = (boxes.as_slice(), v2, born) {
            let call = dir.join(format!("{CALL_PREFIX}{id}"));
            let opened = fs::create_dir(&call).and_then(|()| open_for_birth(&call));
            cg.dirs.push(call);
            match opened {
                Ok(f) => cg.birth = Some(f),
                Err(e) => {
                    cg.leave_and_remove();
                    return Err(refused(dir, e));
                }
            }
            return Ok(Some(cg));
        }
        for (dir, ctrl) in &boxes {
            let origin = own_path(ctrl)
                .map(|p| {
                    let mount = if v2 {
                        PathBuf::from(CGROUP_ROOT)
                    } else {
                        v1_mount(ctrl).unwrap_or_default()
                    };
                    mount.join(p.trim_start_matches('/'))
                })
                .unwrap_or_default();
            let call = dir.join(format!("{CALL_PREFIX}{id}"));
            let moved = fs::create_dir(&call).and_then(|()| {
                fs::write(call.join("cgroup.procs"), std::process::id().to_string())
            });
            cg.dirs.push(call);
            cg.origins.push(origin);
            if let Err(e) = moved {
                cg.leave_and_remove();
                return Err(refused(dir, e));
            }
        }
        Ok(Some(cg))
    }

    /// How many times the OOM killer acted in the whole box so far.
    pub fn box_oom_kills(&self) -> u64 {
        let Some(m) = &self.box_memory else { return 0 };
        if self.v2 {
            read_keyed(&m.join("memory.events"), "oom_kill").unwrap_or(0)
        } else {
            read_keyed(&m.join("memory.oom_control"), "oom_kill").unwrap_or(0)
        }
    }

    /// OOM kills of this call's own processes. cgroup v1 counts a kill in the victim's memory
    /// cgroup (this call's) and not in the box's, whose limit was met; so both are read.
    pub fn call_oom_kills(&self) -> u64 {
        let (file, memory_dir) = if self.v2 {
            ("memory.events", self.dirs.first())
        } else {
            (
                "memory.oom_control",
                self.dirs
                    .iter()
                    .find(|d| d.components().any(|c| c.as_os_str() == "memory")),
            )
        };
        memory_dir
            .and_then(|d| read_keyed(&d.join(file), "oom_kill"))
            .unwrap_or(0)
    }

    /// Kills every process of the call but this one (the caller of this function stays in the
    /// cgroup until `leave_and_remove`). Repeated until the cgroup holds only us, since a
    /// process may fork while the list is read; the box's pids cap bounds how long that lasts.
    pub fn kill_others(&self) {
        let me = std::process::id().to_string();
        for _ in 0..1000 {
            let mut others = false;
            for dir in &self.dirs {
                let procs = fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
                for pid in procs.lines().filter(|p| *p != me) {
                    if let Ok(pid) = pid.parse::<i32>() {
                        others = true;
                        let _ = nix::sys::signal::kill(
                            nix::unistd::Pid::from_raw(pid),
                            nix::sys::signal::Signal::SIGKILL,
                        );
                    }
                }
            }
            if !others {
                return;
            }
            std::thread::sleep(std::time::Duration::from_micros(500));
        }
    }

    /// The call cgroup to clone the call's init into, when this process stayed out of it.
    pub fn birth(&self) -> Option<BorrowedFd<'_>> {
        self.birth.as_ref().map(|f| f.as_fd())
    }

    /// Goes back to where this process came from and removes the call's cgroup if it is empty
    /// (processes the call left running keep it until the box ends).
    pub fn leave_and_remove(&self) {
        let me = std::process::id().to_string();
        for (i, dir) in self.dirs.iter().enumerate() {
            // Born there, this process never entered (`origins` is empty): a write of a process
            // into the cgroup it is in still waits for an RCU grace period.
            if let Some(origin) = self.origins.get(i) {
                let _ = fs::write(origin.join("cgroup.procs"), &me);
            }
            let _ = fs::remove_dir(dir);
            // The box may have ended while this call's cgroup was being made (its monitor then
            // could not remove its own): an empty box cgroup goes too. A live box's holds its
            // monitor and PID 1, so this fails harmlessly there.
            if let Some(box_dir) = dir.parent() {
                let _ = fs::remove_dir(box_dir);
            }
        }
    }
}
