//! Inside a container (Docker, Podman, containerd under Kubernetes): what the runtime's defaults
//! refuse a box, told from the step that failed and this process's own posture, with the exact
//! flag or pod `securityContext` line that lifts each refusal. Measured with Podman 4.3 and
//! runc 1.1.5 on Linux 6.18 (README "Inside containers", issue 22):
//!
//! - masked and read-only `/proc` paths (`/proc/kcore`, `/proc/keys`... covered by bind mounts,
//!   `/proc/sys` read-only): the box can't limit nested user namespaces in its own namespace
//!   (`/proc/sys/user/max_user_namespaces`: EROFS), and the kernel refuses a box its own `proc`
//!   mount (EPERM) while a file under `/proc` is covered (`mount_too_revealing`);
//! - the runtime's seccomp profile: Podman's default answers `sethostname` and `setns` with
//!   EPERM without CAP_SYS_ADMIN (Docker's also `unshare`, `mount`, `pivot_root` and `clone`
//!   with namespace flags): the box can't name its UTS namespace, a resident box's call can't
//!   join it;
//! - container root that is host root without CAP_SYS_ADMIN (no user namespace of its own):
//!   kern maps a box of root to a range of host ids and attaches the workspace idmapped, which
//!   the kernel refuses it (EPERM); root of a user namespace of its own maps itself, which
//!   needs CAP_SETFCAP (`--cap-drop ALL` takes it: the uid map's write fails with EPERM);
//! - no user namespaces (`user.max_user_namespaces = 0`) or an AppArmor profile refusing mounts.

use std::fmt::Write as _;

/// The seccomp profile shipped in the npm package, as a user's `node_modules` has it.
pub const PROFILE_PATH: &str = "node_modules/kern-sandbox/seccomp.json";

/// One refusal of the container's runtime, and what lifts it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// `"seccomp"`, `"masked-proc"`, `"root-without-userns"`, `"root-without-setfcap"`,
    /// `"userns"`, `"apparmor"`.
    pub kind: &'static str,
    /// What the runtime refuses, with the facts read here.
    pub what: String,
    /// The Docker/Podman flag and the Kubernetes `securityContext` line that lift it.
    pub fix: String,
}

impl Refusal {
    /// One line: what, then the fix.
    pub fn line(&self) -> String {
        format!("{}; fix: {}", self.what, self.fix)
    }
}

/// The container runtime this process runs under, when it can tell: `"podman"`
/// (`/run/.containerenv`), `"docker"` (`/.dockerenv`), `"kubernetes"` (the service variables
/// every pod gets), `"container"` (PID 1's cgroup names one). `None` on a host.
pub fn runtime() -> Option<&'static str> {
    if std::path::Path::new("/run/.containerenv").exists() {
        return Some("podman");
    }
    if std::path::Path::new("/.dockerenv").exists() {
        return Some("docker");
    }
    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_some() {
        return Some("kubernetes");
    }
    let cgroup = std::fs::read_to_string("/proc/1/cgroup").unwrap_or_default();
    ["docker", "kubepods", "libpod", "containerd", "crio"]
        .iter()
        .any(|m| cgroup.contains(m))
        .then_some("container")
}

/// Whether anything here can refuse a box the way container runtimes do: a seccomp filter on
/// this process, paths covered under `/proc`, or root without CAP_SYS_ADMIN (or, in a user
/// namespace, CAP_SETFCAP). Cheap (a few reads); a marker file alone (`/.dockerenv` is left on some VM images) says nothing.
pub fn confined() -> bool {
    seccomp_mode() == Some(2)
        || !covered_proc().is_empty()
        || root_without_sys_admin()
        || root_without_setfcap()
}

/// This process's seccomp mode (`/proc/self/status`): 2 under a filter. kern installs its own
/// filters only in the box, so in kern or the addon a 2 is the runtime's profile.
pub fn seccomp_mode() -> Option<u8> {
    status_field("Seccomp:")?.parse().ok()
}

fn status_field(name: &str) -> Option<String> {
    std::fs::read_to_string("/proc/self/status")
        .ok()?
        .lines()
        .find_map(|l| l.strip_prefix(name).map(|v| v.trim().to_string()))
}

/// Files and directories under `/proc` that something is mounted over (the runtime's masked and
/// read-only paths), from `/proc/self/mountinfo`.
pub fn covered_proc() -> Vec<String> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let mut out: Vec<String> = info
        .lines()
        .filter_map(|l| l.split(' ').nth(4))
        .filter(|p| p.starts_with("/proc/"))
        // On an empty directory of its own, as on most hosts: the kernel allows that one.
        .filter(|p| *p != "/proc/sys/fs/binfmt_misc")
        .map(|p| p.replace("\\040", " "))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The AppArmor profile this process is confined by, when it is confined.
pub fn apparmor_label() -> Option<String> {
    let label = std::fs::read_to_string("/proc/self/attr/apparmor/current")
        .or_else(|_| std::fs::read_to_string("/proc/self/attr/current"))
        .ok()?;
    let label = label.trim_end_matches('\0').trim();
    (!label.is_empty() && label != "unconfined").then(|| label.to_string())
}

/// Whether this process's effective set holds capability `cap`.
fn has_cap(cap: u32) -> bool {
    status_field("CapEff:")
        .and_then(|v| u64::from_str_radix(&v, 16).ok())
        .is_some_and(|e| e & (1u64 << cap) != 0)
}

/// Root that is host root (no user namespace of its own) but lacks CAP_SYS_ADMIN: a container's
/// root under a runtime's default capability set.
pub fn root_without_sys_admin() -> bool {
    nix::unistd::geteuid().is_root()
        && crate::engine::monitor::idmap::in_initial_userns()
        && !has_cap(super::caps::SYS_ADMIN)
}

/// Root of a user namespace of its own without CAP_SETFCAP: since Linux 5.12 mapping uid 0
/// into a new namespace needs it (`--cap-drop ALL` takes it; measured: writing the uid map
/// fails with EPERM).
pub fn root_without_setfcap() -> bool {
    nix::unistd::geteuid().is_root()
        && !crate::engine::monitor::idmap::in_initial_userns()
        && !has_cap(super::caps::SETFCAP)
}

/// Lifts the masked `/proc` paths.
pub fn masked_proc_refusal(covered: &[String]) -> Refusal {
    let mut shown = covered
        .iter()
        .take(4)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if covered.len() > 4 {
        let _ = write!(shown, " and {} more", covered.len() - 4);
    }
    Refusal {
        kind: "masked-proc",
        what: format!(
            "the container runtime covers paths under /proc ({shown}): /proc/sys read-only refuses the box its limit on nested user namespaces (EROFS), and while a file is covered the kernel refuses a box its own /proc (mount: EPERM); the box masks those paths again in its own /proc"
        ),
        fix: "run the container with --security-opt systempaths=unconfined (Docker, Podman; Podman's narrower --security-opt unmask=/proc/* also works) and as a non-root user; Kubernetes: securityContext.procMount: Unmasked (needs hostUsers: false)".into(),
    }
}

/// Lifts the runtime's seccomp profile.
pub fn seccomp_refusal(step: &str) -> Refusal {
    Refusal {
        kind: "seccomp",
        what: format!(
            "the container's seccomp profile refused {step} (runtime default profiles allow sethostname and setns only with CAP_SYS_ADMIN; Docker's also unshare, mount and clone with namespace flags)"
        ),
        fix: format!(
            "run the container with kern-sandbox's profile (the runtime's default plus what a box needs): --security-opt seccomp={PROFILE_PATH}; Kubernetes: securityContext.seccompProfile: {{type: Localhost, localhostProfile: kern-sandbox.json}}, with the file copied into the kubelet's seccomp directory (/var/lib/kubelet/seccomp/) on every node"
        ),
    }
}

/// Lifts root-without-CAP_SYS_ADMIN.
pub fn root_refusal() -> Refusal {
    Refusal {
        kind: "root-without-userns",
        what: "kern runs as the container's root, which is the host's root without CAP_SYS_ADMIN: a box of root maps to a range of host ids and needs its workspace idmapped, which the kernel refuses (EPERM)".into(),
        fix: "run the container as a non-root user (--user 1000; Kubernetes: runAsUser: 1000, runAsNonRoot: true), or give it a user namespace of its own (podman --userns=auto or --uidmap; Kubernetes: hostUsers: false), where its root maps itself into the box".into(),
    }
}

/// Lifts root-without-CAP_SETFCAP.
pub fn setfcap_refusal() -> Refusal {
    Refusal {
        kind: "root-without-setfcap",
        what: "kern runs as the root of the container's user namespace without CAP_SETFCAP, which Linux (5.12+) requires to map uid 0 into the box's user namespace (writing the uid map: EPERM)".into(),
        fix: "keep CAP_SETFCAP (--cap-drop ALL --cap-add SETFCAP; Kubernetes: capabilities: {drop: [ALL], add: [SETFCAP]}), or run the container as a non-root user (--user 1000; Kubernetes: runAsUser: 1000), which needs no capability".into(),
    }
}

/// Lifts a confining AppArmor profile.
pub fn apparmor_refusal(label: &str) -> Refusal {
    Refusal {
        kind: "apparmor",
        what: format!("the AppArmor profile {label:?} refuses the box's mounts"),
        fix: "run the container with --security-opt apparmor=unconfined, or a profile that allows mount and userns; Kubernetes: securityContext.appArmorProfile: {type: Unconfined}".into(),
    }
}

/// Lifts disabled user namespaces.
pub fn userns_refusal(why: &str) -> Refusal {
    Refusal {
        kind: "userns",
        what: format!("no user namespace can be made here ({why})"),
        fix: "user namespaces are a host setting: on the host (or node) sysctl -w user.max_user_namespaces=15000; inside a container also the seccomp fix (unshare and clone with CLONE_NEWUSER)".into(),
    }
}

/// Why a box could not be built here, when a container's restriction explains `step` (the
/// startup failure's message): the refusal, or `None` when nothing here accounts for it.
pub fn explain(step: &str) -> Option<Refusal> {
    let refused = |s: &str| {
        s.contains("EPERM")
            || s.contains("Operation not permitted")
            || s.contains("ENOSYS")
            || s.contains("Function not implemented")
            || s.contains("EACCES")
            || s.contains("Permission denied")
            || s.contains("Read-only file system")
    };
    if !refused(step) {
        return None;
    }
    if step.contains("mount /proc") || step.contains("/proc/sys") {
        let covered = covered_proc();
        if !covered.is_empty() {
            return Some(masked_proc_refusal(&covered));
        }
    }
    if step.contains("idmapped mount") && root_without_sys_admin() {
        return Some(root_refusal());
    }
    if step.contains("uid/gid maps") && root_without_setfcap() {
        return Some(setfcap_refusal());
    }
    let namespaced = [
        "sethostname",
        "join the resident box's namespaces",
        "cannot create the box's namespaces",
        "unshare",
        "pivot_root",
        "mount",
    ];
    let syscall = namespaced.iter().find(|s| step.contains(*s));
    // A filter answers EPERM (or ENOSYS for what it does not know), never EACCES: that is an LSM.
    let filtered = [
        "EPERM",
        "Operation not permitted",
        "ENOSYS",
        "Function not implemented",
    ]
    .iter()
    .any(|e| step.contains(e));
    if let (Some(s), Some(2), true) = (syscall, seccomp_mode(), filtered) {
        let name = match *s {
            "join the resident box's namespaces" => "setns",
            "cannot create the box's namespaces" => "clone with namespace flags",
            other => other,
        };
        return Some(seccomp_refusal(name));
    }
    if step.contains("cannot create the box's namespaces") {
        if let Some(max) = std::fs::read_to_string("/proc/sys/user/max_user_namespaces")
            .ok()
            .filter(|m| m.trim() == "0")
        {
            return Some(userns_refusal(&format!(
                "user.max_user_namespaces = {}",
                max.trim()
            )));
        }
    }
    if step.contains("mount") && (step.contains("EACCES") || step.contains("Permission denied")) {
        if let Some(label) = apparmor_label() {
            return Some(apparmor_refusal(&label));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_that_was_not_refused_is_not_explained() {
        assert_eq!(explain("sethostname: EINVAL: Invalid argument"), None);
        assert_eq!(explain("cannot read the image: No such file"), None);
    }

    #[test]
    fn eacces_is_never_blamed_on_seccomp() {
        // Under any filter or none: EACCES from a mount is an LSM's answer (AppArmor), not a
        // filter's; without a confining profile here it stays unexplained.
        let r = explain("pivot_root: EACCES: Permission denied");
        assert!(r.is_none_or(|r| r.kind == "apparmor"));
    }

    #[test]
    fn the_fixes_name_the_flags() {
        assert!(seccomp_refusal("sethostname")
            .line()
            .contains("--security-opt seccomp=node_modules/kern-sandbox/seccomp.json"));
        let masked = masked_proc_refusal(&["/proc/kcore".into(), "/proc/keys".into()]);
        assert!(masked.what.contains("/proc/kcore, /proc/keys"));
        assert!(masked.fix.contains("systempaths=unconfined"));
        assert!(masked.fix.contains("procMount: Unmasked"));
        let many: Vec<String> = (0..6).map(|i| format!("/proc/p{i}")).collect();
        assert!(masked_proc_refusal(&many).what.contains("and 2 more"));
    }
}
