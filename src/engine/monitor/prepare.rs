//! Before the spec is known: the caps of a box, in force before its PID 1 exists. The cgroup is
//! made (and, where the box can't be born in it, entered), the caps it can't hold fall back to
//! rlimits, and how each cap is applied is read back for the report (`parent` runs the box).

use crate::engine::monitor::cgroup::{self, BoxCgroup};
use crate::engine::monitor::idmap::Mapping;
use crate::engine::shared::handoff::Fallback;
use crate::engine::shared::spec::Limits;
use crate::engine::shared::status::{note, Applied};
use std::os::fd::OwnedFd;

/// The caps of a box, applied before its spec is known: the cgroup exists, and the box will be
/// born inside it. Moving a process between cgroups waits for an RCU grace period (often 5-40 ms
/// on this kind of machine), so no process moves on a call's path: on cgroup v2 (Linux 5.7+)
/// PID 1 is cloned straight into the leaf with `clone3(CLONE_INTO_CGROUP)` and this process (the
/// monitor) stays where it is; otherwise the monitor has already moved itself in, which the
/// addon's spare `kern`s do ahead of each call.
pub struct Prepared {
    pub(super) limits: Limits,
    pub(super) cgroup: Option<BoxCgroup>,
    /// The v2 leaf, open, when PID 1 is to be born in it (the monitor never entered it).
    pub(super) birth: Option<OwnedFd>,
    pub(in crate::engine) fallback: Fallback,
    /// Our oom_score_adj before we protected ourselves: the box gets it back (see `supervise`).
    pub(super) oom_adj: Option<String>,
    /// `requireLimits` and a cap not verifiably in force: why no box may start.
    pub(super) refusal: Option<String>,
    /// How each cap was applied, read back: the report carries it.
    pub(super) applied: Applied,
}

/// Creates the cgroup, moves this process into it (unless the box can be born in it), and
/// decides which caps fall back to rlimits, saying so for each on stderr (where the next box's
/// output follows).
pub fn prepare(limits: &Limits) -> Prepared {
    let l = limits;
    let any = l.memory_bytes.is_some() || l.pids.is_some() || l.cpus.is_some();
    let mut fallback = Fallback::default();
    let mut cg = None;
    let mut birth = None;
    let mut reason = String::from("enforceLimits is false");
    let mut oom_adj = None;
    let born = l.enforce && any && cgroup::birth_possible();
    // Written as: a monitor inside the box's cgroup is one more task in its pids cap.
    let written = Limits {
        pids: l.pids.map(|p| p + u64::from(!born)),
        ..l.clone()
    };
    if l.enforce && any {
        match BoxCgroup::create(&written, &box_id()) {
            Ok(c) if born => match c.open_leaf() {
                Some(Ok(fd)) => {
                    // The monitor stays out of the box's memory cgroup, so the box's OOM killer
                    // cannot pick it: no need to protect it.
                    birth = Some(fd);
                    cg = Some(c);
                }
                Some(Err(e)) => {
                    c.remove();
                    reason = format!("cannot start the box inside its cgroup ({e})");
                }
                None => {
                    c.remove();
                    reason = String::from(
                        "internal error: kern is inside the cgroup it made for the box",
                    );
                }
            },
            Ok(c) => match c.add(std::process::id() as libc::pid_t) {
                Ok(()) => {
                    // The box's OOM killer must pick the workload, never its monitor: the
                    // monitor is what reports the OOM. Only root may lower this; elsewhere
                    // an OOM that outlives the workload may end in a `killed` fault.
                    let before = std::fs::read_to_string("/proc/self/oom_score_adj").ok();
                    if std::fs::write("/proc/self/oom_score_adj", "-1000").is_ok() {
                        oom_adj = before.map(|b| b.trim().to_string());
                    }
                    cg = Some(c);
                }
                Err(e) => {
                    c.remove();
                    reason = format!("cannot move into the box's cgroup ({e})");
                }
            },
            Err(e) => reason = format!("no writable cgroup ({e})"),
        }
    }
    let enforced = cg.as_ref().map(|c| c.enforced).unwrap_or_default();
    if cg.is_some() {
        // The cgroup exists, so a cap it lacks was not taken by its controller.
        reason = String::from(
            "the box's cgroup did not take it (its controller is not enabled there, or the \
             kernel refused the value)",
        );
    }
    let refusal = if l.require && (l.memory_bytes.is_some() || l.pids.is_some()) {
        // A box born in the leaf is checked to be there once it exists (`build_and_supervise`).
        let me = (!born).then_some(std::process::id() as libc::pid_t);
        let verified = match &cg {
            Some(c) => c.verify(&written, me),
            None => Err(reason.clone()),
        };
        verified.err().map(|why| {
            format!(
                "requireLimits: the memory and pids caps are not verifiably enforced here ({why}); \
                 run where kern can write a cgroup (as root, or under a delegated cgroup v2 \
                 subtree: systemd's user manager, or KERN_CGROUP_PARENT), or drop requireLimits \
                 to run with best-effort rlimits"
            )
        })
    } else {
        None
    };
    if refusal.is_some() {
        // Nothing will run: no rlimit fallback, and no warnings about one.
        return Prepared {
            limits: limits.clone(),
            cgroup: cg,
            birth,
            fallback,
            oom_adj,
            refusal,
            applied: Applied::default(),
        };
    }
    if let (Some(bytes), false) = (l.memory_bytes, enforced.memory) {
        fallback.data_bytes = Some(bytes);
        note(
            "warning",
            &format!(
                "memory cap of {} MiB is best-effort: {reason}; applied as RLIMIT_DATA, which does not count /tmp or shared memory",
                bytes >> 20
            ),
        );
    }
    if let (Some(max), false) = (l.pids, enforced.pids) {
        fallback.nproc = Some(nproc_cap(max));
        note(
            "warning",
            &format!("pids cap of {max} is best-effort: {reason}; applied as RLIMIT_NPROC"),
        );
    }
    if let (Some(cores), false) = (l.cpus, enforced.cpu) {
        note("warning", &format!("cpu cap of {cores} cores is not enforced: {reason}; there is no rlimit for a CPU rate"));
    }
    let applied = applied(&written, cg.as_ref(), enforced, &fallback);
    Prepared {
        limits: limits.clone(),
        cgroup: cg,
        birth,
        fallback,
        oom_adj,
        refusal: None,
        applied,
    }
}

/// How each cap of `written` is in force: a cgroup cap only once read back from the cgroup
/// (`BoxCgroup::verify`), not because its write returned Ok.
fn applied(
    written: &Limits,
    cg: Option<&BoxCgroup>,
    enforced: cgroup::Enforced,
    fallback: &Fallback,
) -> Applied {
    let read_back = |only: Limits| cg.is_some_and(|c| c.verify(&only, None).is_ok());
    let how = |asked: bool, in_cgroup: bool, rlimit: bool| {
        match (asked, in_cgroup, rlimit) {
            (false, _, _) => "none",
            (true, true, _) => "cgroup",
            (true, false, true) => "rlimit",
            (true, false, false) => "none",
        }
        .to_string()
    };
    let memory_only = Limits {
        pids: None,
        ..written.clone()
    };
    let pids_only = Limits {
        memory_bytes: None,
        ..written.clone()
    };
    Applied {
        memory: how(
            written.memory_bytes.is_some(),
            enforced.memory && read_back(memory_only),
            fallback.data_bytes.is_some(),
        ),
        pids: how(
            written.pids.is_some(),
            enforced.pids && read_back(pids_only),
            fallback.nproc.is_some(),
        ),
        cpu: how(written.cpus.is_some(), enforced.cpu, false),
        cgroup: cg.map(|c| c.version_name().to_string()),
    }
}

impl Prepared {
    /// Leaves and removes the cgroup (when nothing ran in it, or after the box ended).
    pub fn release(self) {
        if let Some(cg) = &self.cgroup {
            // A monitor that never entered must not "move back": even a write of a process into
            // the cgroup it is already in waits for an RCU grace period.
            if self.birth.is_none() {
                cg.leave();
            }
            cg.remove();
        }
    }
}

/// The RLIMIT_NPROC that caps the box at `max` tasks. Since Linux 5.14 the count is kept per
/// user namespace, so the box's own namespace counts only the box's processes; before, it counted
/// every process of the real uid host-wide, so the cap goes on top of what that user already
/// runs.
fn nproc_cap(max: u64) -> u64 {
    let release = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    if version >= (5, 14) {
        return max;
    }
    let uid = match Mapping::for_this_process(None) {
        Mapping::Caller { uid, .. } => uid,
        Mapping::Range { uid_base, .. } => uid_base,
    };
    max + processes_of_uid(uid)
}

fn processes_of_uid(uid: u32) -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::read_dir("/proc")
        .map(|d| {
            d.flatten()
                .filter(|e| {
                    e.file_name()
                        .to_str()
                        .is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit()))
                })
                .filter(|e| e.metadata().map(|m| m.uid() == uid).unwrap_or(false))
                .count() as u64
        })
        .unwrap_or(0)
}

/// The cgroup's name: unique per monitor process and moment.
fn box_id() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("box-{}-{nanos:09}", std::process::id())
}
