//! `kern doctor`: what kern-sandbox needs from this host, whether it has it, and the exact fix
//! when not. Each check asks the kernel itself where it can (a user namespace, a cgroup leaf, an
//! idmapped mount, `openat2`), rather than guessing from version numbers.

use kern_sandbox::engine::addon::launch;
use kern_sandbox::engine::boxside::{apparmor, landlock};
use kern_sandbox::engine::monitor::cgroup::{self, BoxCgroup, Version};
use kern_sandbox::engine::monitor::freezer;
use kern_sandbox::engine::monitor::idmap;
use kern_sandbox::engine::shared::spec::Limits;
use kern_sandbox::engine::shared::{container, sys};
use kern_sandbox::image::net::{self as pullnet, redact};
use kern_sandbox::image::store::Store;
use kern_sandbox::workspace::{self, Found};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const LOW_SPACE: u64 = 2 << 30;

#[derive(Serialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
enum Status {
    Ok,
    Degraded,
    Missing,
    /// Facts with nothing to fix (versions, variables).
    Info,
}

#[derive(Serialize)]
struct Check {
    name: &'static str,
    status: Status,
    /// What kern-sandbox needs here and what this host gives.
    detail: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    fix: Option<String>,
    /// A box can't run with enforced caps while this is not ok.
    blocking: bool,
}

impl Check {
    fn new(name: &'static str, status: Status, detail: impl Into<String>) -> Check {
        Check {
            name,
            status,
            detail: detail.into(),
            fix: None,
            blocking: false,
        }
    }
    fn fix(mut self, fix: impl Into<String>) -> Check {
        self.fix = Some(fix.into());
        self
    }
    fn blocking(mut self) -> Check {
        self.blocking = true;
        self
    }
    fn fails(&self) -> bool {
        self.blocking && self.status != Status::Ok
    }
}

#[derive(Serialize)]
struct Report {
    /// A box can run here with enforced caps.
    ok: bool,
    checks: Vec<Check>,
}

pub fn doctor(workspace: Option<PathBuf>, json: bool) -> ExitCode {
    let root = nix::unistd::geteuid().is_root();
    // By default, where temporary workspaces are made (inside it; itself it is no workspace).
    let given = workspace.is_some();
    let workspace = workspace.unwrap_or_else(std::env::temp_dir);
    // The namespace and idmap probes fork: they come first, while kern is single-threaded.
    let mut checks = vec![userns(root)];
    checks.extend(in_container());
    checks.push(idmapped(&workspace, given, root));
    checks.extend(cgroups(root));
    checks.push(seccomp());
    checks.push(landlock_check());
    checks.push(openat2());
    checks.push(store());
    checks.push(proxies());
    checks.push(ca_bundle());
    checks.extend(registries());
    let report = Report {
        ok: !checks.iter().any(Check::fails),
        checks,
    };
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(s) => println!("{s}"),
            Err(e) => {
                eprintln!("kern: {e}");
                return ExitCode::from(125);
            }
        }
    } else {
        print_text(&report);
    }
    if report.ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn print_text(report: &Report) {
    for c in &report.checks {
        let status = match c.status {
            Status::Ok => "ok",
            Status::Degraded => "degraded",
            Status::Missing => "missing",
            Status::Info => "info",
        };
        println!("{status:<9} {:<13} {}", c.name, c.detail);
        if let Some(fix) = &c.fix {
            for (i, line) in fix.lines().enumerate() {
                let lead = if i == 0 { "fix:" } else { "" };
                println!("{:<23} {lead:<4} {line}", "");
            }
        }
    }
    let why: Vec<&str> = report
        .checks
        .iter()
        .filter(|c| c.fails())
        .map(|c| c.name)
        .collect();
    if why.is_empty() {
        println!("kern doctor: boxes can run here with enforced caps");
    } else {
        println!(
            "kern doctor: boxes can't run here with enforced caps; see: {}",
            why.join(", ")
        );
    }
}

fn read_trim(path: &str) -> Option<String> {
    std::fs::read_to_string(path)
        .ok()
        .map(|s| s.trim().to_string())
}

/// Every box is a new user namespace, as root too. Tried for real in a forked child.
fn userns(root: bool) -> Check {
    let mut facts = Vec::new();
    let debian = read_trim("/proc/sys/kernel/unprivileged_userns_clone");
    if let Some(v) = &debian {
        facts.push(format!("kernel.unprivileged_userns_clone = {v}"));
    }
    let max = read_trim("/proc/sys/user/max_user_namespaces");
    if let Some(v) = &max {
        facts.push(format!("user.max_user_namespaces = {v}"));
    }
    let restricted = read_trim("/proc/sys/kernel/apparmor_restrict_unprivileged_userns");
    if let Some(v) = &restricted {
        facts.push(format!(
            "kernel.apparmor_restrict_unprivileged_userns = {v}"
        ));
    }
    // Making the namespace is not enough: Ubuntu's AppArmor restriction lets the clone succeed
    // and takes the capabilities in it away. So the child also makes a mount namespace, which
    // needs CAP_SYS_ADMIN there, as every box does; it exits with the errno.
    let tried = match sys::clone_fork(libc::CLONE_NEWUSER) {
        Ok(sys::Forked::Child) => match nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS) {
            Ok(()) => sys::exit_now(0),
            Err(e) => sys::exit_now(e as i32),
        },
        Ok(sys::Forked::Parent(pid)) => {
            match nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None) {
                Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => Ok(()),
                Ok(nix::sys::wait::WaitStatus::Exited(_, code)) => Err(format!(
                    "a user namespace was made, but unshare(CLONE_NEWNS) inside it failed: {}",
                    std::io::Error::from_raw_os_error(code)
                )),
                other => Err(format!("the probe child ended unexpectedly: {other:?}")),
            }
        }
        Err(e) => Err(format!("unshare(CLONE_NEWUSER) failed: {e}")),
    };
    let who = if root { "as root" } else { "unprivileged" };
    let facts = if facts.is_empty() {
        String::new()
    } else {
        format!(" ({})", facts.join(", "))
    };
    match tried {
        Ok(()) => Check::new(
            "userns",
            Status::Ok,
            format!(
                "a new user namespace ({who}) could be made, with a mount namespace in it{facts}"
            ),
        )
        .blocking(),
        Err(e) => {
            let fix = if restricted.as_deref() == Some("1") && !root {
                apparmor_profile()
            } else if debian.as_deref() == Some("0") {
                "sudo sysctl -w kernel.unprivileged_userns_clone=1 (and put it in /etc/sysctl.d/ to keep it)".to_string()
            } else if max.as_deref() == Some("0") {
                "sudo sysctl -w user.max_user_namespaces=15000 (and put it in /etc/sysctl.d/ to keep it)".to_string()
            } else {
                "a kernel with user namespaces (CONFIG_USER_NS) is needed; inside a container, allow unshare(CLONE_NEWUSER) in its seccomp profile".to_string()
            };
            Check::new("userns", Status::Missing, format!("{who}: {e}{facts}"))
                .fix(fix)
                .blocking()
        }
    }
}

/// Inside a container (issue 22): each restriction of the runtime that stops a box, with the
/// flag or `securityContext` line that lifts it; nothing where no restriction of the kind is in
/// force (a host). Forks (the seccomp probe):
/// runs while kern is single-threaded.
fn in_container() -> Vec<Check> {
    if !container::confined() {
        return Vec::new();
    }
    let runtime = container::runtime().unwrap_or("no runtime named");
    let seccomp = container::seccomp_mode();
    let mut checks = vec![Check::new(
        "container",
        Status::Info,
        format!(
            "inside a container ({runtime}; this process's seccomp mode {}; AppArmor {})",
            seccomp.map_or("unknown".into(), |m| m.to_string()),
            container::apparmor_label().unwrap_or_else(|| "unconfined or absent".into())
        ),
    )];
    let refused = |name: &'static str, r: container::Refusal| {
        Check::new(name, Status::Missing, r.what)
            .fix(r.fix)
            .blocking()
    };
    let covered = container::covered_proc();
    if covered.is_empty() {
        checks.push(Check::new(
            "ctr-proc",
            Status::Ok,
            "nothing covers paths under /proc: a box can mount its own",
        ));
    } else {
        checks.push(refused(
            "ctr-proc",
            container::masked_proc_refusal(&covered),
        ));
    }
    // What a box does first in its new namespaces: name its UTS namespace. Only a filter
    // refuses that there (the child holds every capability in its own user namespace).
    let named = match sys::clone_fork(libc::CLONE_NEWUSER | libc::CLONE_NEWUTS) {
        Ok(sys::Forked::Child) => match nix::unistd::sethostname("kern") {
            Ok(()) => sys::exit_now(0),
            Err(e) => sys::exit_now(e as i32),
        },
        Ok(sys::Forked::Parent(pid)) => {
            match nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None) {
                Ok(nix::sys::wait::WaitStatus::Exited(_, 0)) => Ok(()),
                Ok(nix::sys::wait::WaitStatus::Exited(_, code)) => {
                    Err(nix::errno::Errno::from_raw(code))
                }
                _ => Err(nix::errno::Errno::UnknownErrno),
            }
        }
        // The userns check says why no namespace could be made.
        Err(_) => Ok(()),
    };
    match named {
        Ok(()) => checks.push(Check::new(
            "ctr-seccomp",
            Status::Ok,
            "the container's seccomp profile lets a box set up its namespaces (sethostname in its own UTS namespace)",
        )),
        Err(e) if seccomp == Some(2) => checks.push(refused(
            "ctr-seccomp",
            container::seccomp_refusal(&format!("sethostname in a new UTS namespace ({e})")),
        )),
        Err(e) => checks.push(
            Check::new(
                "ctr-seccomp",
                Status::Missing,
                format!("sethostname in a new UTS namespace failed ({e}) with no seccomp filter on this process"),
            )
            .blocking(),
        ),
    }
    if container::root_without_sys_admin() {
        checks.push(refused("ctr-root", container::root_refusal()));
    }
    if container::root_without_setfcap() {
        checks.push(refused("ctr-root", container::setfcap_refusal()));
    }
    checks
}

/// The README's profile for Ubuntu's restriction, with this kern binary's real path.
fn apparmor_profile() -> String {
    let exe = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map(|p| p.display().to_string())
        .unwrap_or_else(|_| "/path/to/kern".into());
    let hint = apparmor::userns_restriction_hint().unwrap_or_default();
    format!(
        "{hint}\nwrite /etc/apparmor.d/kern-sandbox:\n  abi <abi/4.0>,\n  include <tunables/global>\n  profile kern-sandbox {exe} flags=(unconfined) {{\n    userns,\n  }}\nthen: sudo apparmor_parser -r /etc/apparmor.d/kern-sandbox"
    )
}

/// Where caps are written: one line for the hierarchy, one for the caps (a real leaf made and
/// removed again), one for `KERN_CGROUP_PARENT` when it is set.
fn cgroups(root: bool) -> Vec<Check> {
    let version = cgroup::version();
    let mut out = vec![Check::new(
        "cgroup",
        Status::Info,
        match version {
            Some(Version::V2) => "cgroup v2 (unified)".to_string(),
            Some(Version::V1 { hybrid: true }) => {
                "cgroup v1 hybrid (v1 controllers, a controller-less cgroup2 at /sys/fs/cgroup/unified)".to_string()
            }
            Some(Version::V1 { hybrid: false }) => "cgroup v1".to_string(),
            None => "no cgroup filesystem at /sys/fs/cgroup".to_string(),
        },
    )];
    let parent = std::env::var_os("KERN_CGROUP_PARENT").map(PathBuf::from);
    let limits = Limits {
        memory_bytes: Some(64 << 20),
        pids: Some(64),
        cpus: Some(1.0),
        enforce: true,
        require: false,
    };
    // Named like a box's leaf, so a later box sweeps it up should this process die here.
    let id = format!("box-{}-doctor", std::process::id());
    let probe = BoxCgroup::create(&limits, &id);
    let fallback = "caps fall back to rlimits: memory (RLIMIT_DATA) and pids (RLIMIT_NPROC, per account) are best-effort, cpu is not capped, and requireLimits refuses to run";
    // pause()/resume() and `kern pause`: the freezer of a box's own cgroup.
    let mut pause = match (version, root) {
        (Some(Version::V1 { .. }), true) if cgroup::v1_mount("freezer").is_some() => Check::new(
            "pause",
            Status::Ok,
            "the cgroup v1 freezer hierarchy is mounted: pause() freezes kernels and resident boxes, and a kernel while fork() or checkpoint() copies its workspace",
        ),
        (Some(Version::V1 { .. }), true) => Check::new(
            "pause",
            Status::Missing,
            "no cgroup v1 freezer hierarchy is mounted: pause() is refused; kernel.fork() and checkpoint() hold the kernel between cells instead, where a thread it left running may still write",
        )
        .fix("mount it: mkdir -p /sys/fs/cgroup/freezer && mount -t cgroup -o freezer freezer /sys/fs/cgroup/freezer"),
        (Some(Version::V1 { .. }), false) => Check::new(
            "pause",
            Status::Missing,
            "unprivileged on cgroup v1, kern has no freezer: pause() is refused; kernel.fork() and checkpoint() hold the kernel between cells instead, where a thread it left running may still write",
        )
        .fix(freezer::V1_ROOTLESS),
        _ => Check::new(
            "pause",
            Status::Missing,
            "boxes get no cgroup of their own here, so pause() is refused; kernel.fork() and checkpoint() hold the kernel between cells instead, where a thread it left running may still write",
        )
        .fix("as for caps above: run as root, under a systemd user session, or set KERN_CGROUP_PARENT"),
    };
    let caps = match probe {
        Ok(cg) => {
            let e = cg.enforced;
            if let Some(leaf) = cg.v2_leaf() {
                pause = if leaf.join("cgroup.freeze").exists() {
                    Check::new(
                        "pause",
                        Status::Ok,
                        "a box's cgroup v2 leaf has cgroup.freeze: pause() freezes kernels and resident boxes, and a kernel while fork() or checkpoint() copies its workspace",
                    )
                } else {
                    Check::new(
                        "pause",
                        Status::Missing,
                        "a box's cgroup v2 leaf has no cgroup.freeze (Linux before 5.2): pause() is refused; kernel.fork() and checkpoint() hold the kernel between cells instead, where a thread it left running may still write",
                    )
                    .fix("a Linux 5.2 or later kernel")
                };
            }
            cg.remove();
            let missing: Vec<&str> = [("memory", e.memory), ("pids", e.pids), ("cpu", e.cpu)]
                .iter()
                .filter(|(_, on)| !on)
                .map(|(n, _)| *n)
                .collect();
            let whose = match (version, root, &parent) {
                (Some(Version::V2), _, Some(p)) => format!("under KERN_CGROUP_PARENT {}", p.display()),
                (Some(Version::V2), true, _) => "as root, under /sys/fs/cgroup/kern-sandbox".into(),
                (Some(Version::V2), false, _) => "in this process's delegated cgroup".into(),
                (_, true, _) => "as root, under this process's own v1 cgroups (.../kern-sandbox/)".into(),
                _ => "under this process's own v1 cgroups".into(),
            };
            if missing.is_empty() {
                Check::new(
                    "caps",
                    Status::Ok,
                    format!("a test leaf took memory, pids and cpu caps {whose} (removed again)"),
                )
            } else {
                let hard = !missing.contains(&"memory") && !missing.contains(&"pids");
                Check::new(
                    "caps",
                    if hard { Status::Ok } else { Status::Degraded },
                    format!(
                        "a test leaf {whose} took caps, but not {} (that controller is not offered)",
                        missing.join(", ")
                    ),
                )
            }
        }
        // Inside a container the runtime mounts /sys/fs/cgroup read-only (Podman here, v1).
        Err(reason) if container::confined() && reason.contains("Read-only file system") => {
            Check::new(
                "caps",
                Status::Degraded,
                format!("the container's /sys/fs/cgroup is read-only ({reason}); {fallback}"),
            )
            .fix("the container's own limits cap all its boxes together (--memory, --pids-limit; Kubernetes: resources.limits); per-box caps need a runtime that delegates a writable cgroup v2 subtree to the container (not measured here)")
        }
        Err(reason) => match (version, root, &parent) {
            (Some(Version::V2), false, None) => systemd_scope(&reason, fallback),
            (Some(Version::V1 { .. }), false, _) => Check::new(
                "caps",
                Status::Degraded,
                format!("unprivileged on cgroup v1 there is no delegation ({reason}); {fallback}"),
            )
            .fix("run as root, or use a host with cgroup v2 and a systemd user session (boot with systemd.unified_cgroup_hierarchy=1)"),
            _ => Check::new("caps", Status::Degraded, format!("{reason}; {fallback}")).fix(
                "run as root, or set KERN_CGROUP_PARENT to a cgroup v2 directory delegated to this user",
            ),
        },
    };
    out.push(caps.blocking());
    out.push(pause);
    if let Some(p) = parent {
        out.push(cgroup_parent(&p, version));
    }
    out
}

/// Unprivileged on v2 outside a delegated cgroup (as `kern doctor` from a terminal is): the
/// addon starts each kern in a delegated systemd scope where a user manager runs.
fn systemd_scope(reason: &str, fallback: &str) -> Check {
    let Some(run) = launch::systemd_user_scope_runner() else {
        return Check::new(
            "caps",
            Status::Degraded,
            format!("no systemd user manager (no $XDG_RUNTIME_DIR/systemd/private) or no systemd-run on PATH to start a delegated scope ({reason}); {fallback}"),
        )
        .fix("log in through a session with a systemd user manager (loginctl enable-linger $USER), or set KERN_CGROUP_PARENT to a delegated cgroup v2 directory");
    };
    let uid = nix::unistd::getuid();
    let service = format!("/sys/fs/cgroup/user.slice/user-{uid}.slice/user@{uid}.service");
    let offered = read_trim(&format!("{service}/cgroup.controllers")).unwrap_or_default();
    let has = |c: &str| offered.split_whitespace().any(|o| o == c);
    if has("memory") && has("pids") {
        Check::new(
            "caps",
            Status::Ok,
            format!("the addon starts each kern in a delegated scope ({} --user --scope -p Delegate=yes); user@{uid}.service delegates: {offered}", run.display()),
        )
    } else {
        Check::new(
            "caps",
            Status::Degraded,
            format!("{} can start a scope, but user@{uid}.service delegates only [{offered}], not memory and pids; {fallback}", run.display()),
        )
        .fix("sudo mkdir -p /etc/systemd/system/user@.service.d && printf '[Service]\\nDelegate=cpu memory pids\\n' | sudo tee /etc/systemd/system/user@.service.d/delegate.conf && sudo systemctl daemon-reload, then log in again")
    }
}

/// `KERN_CGROUP_PARENT`: tried by making (and removing) a child directory in it.
fn cgroup_parent(p: &Path, version: Option<Version>) -> Check {
    // kern creates a missing parent (`create_dir_all`): then its nearest existing ancestor must
    // take the probe.
    let existing = p.ancestors().find(|a| a.exists()).unwrap_or(Path::new("/"));
    let probe = existing.join(format!("kern-doctor-{}", std::process::id()));
    let writable = std::fs::create_dir(&probe).and_then(|()| std::fs::remove_dir(&probe));
    let missing = if existing == p {
        String::new()
    } else {
        format!(
            " (it does not exist; kern would create it in {})",
            existing.display()
        )
    };
    let used = matches!(version, Some(Version::V2));
    let ignored = if used {
        ""
    } else {
        "; kern uses it only on cgroup v2, and this host is not"
    };
    match writable {
        Ok(()) => Check::new(
            "cgroup_parent",
            if used { Status::Ok } else { Status::Degraded },
            format!("KERN_CGROUP_PARENT={} is writable{missing}{ignored}", p.display()),
        ),
        Err(e) => Check::new(
            "cgroup_parent",
            Status::Missing,
            format!("KERN_CGROUP_PARENT={} is not writable{missing}: {e}{ignored}", p.display()),
        )
        .fix("point KERN_CGROUP_PARENT at a cgroup v2 directory delegated to this user (one systemd made with Delegate=yes), or unset it"),
    }
}

/// Every workload runs under kern's set-id seccomp filter.
fn seccomp() -> Check {
    let mode = std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Seccomp:").map(|v| v.trim().to_string()))
        });
    // SAFETY: PR_SET_SECCOMP with SECCOMP_MODE_FILTER and a null program installs nothing: it
    // fails with EFAULT where filters are supported (the pointer is checked last), EINVAL where not.
    let r = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER,
            std::ptr::null::<libc::c_void>(),
        )
    };
    let errno = std::io::Error::last_os_error();
    let filters = r == -1 && errno.raw_os_error() == Some(libc::EFAULT);
    let mode = mode.map_or(String::from("no Seccomp field in /proc/self/status"), |m| {
        format!("this process's Seccomp mode {m}")
    });
    if filters {
        Check::new(
            "seccomp",
            Status::Ok,
            format!("seccomp filters available ({mode})"),
        )
        .blocking()
    } else {
        Check::new(
            "seccomp",
            Status::Missing,
            format!("seccomp filters unavailable ({errno}; {mode}); every box runs under one"),
        )
        .fix("a kernel built with CONFIG_SECCOMP_FILTER is needed")
        .blocking()
    }
}

fn landlock_check() -> Check {
    if landlock::available() {
        Check::new(
            "landlock",
            Status::Ok,
            "Landlock available (a resident box's calls can't read each other)",
        )
    } else {
        Check::new(
            "landlock",
            Status::Degraded,
            "no Landlock: in a resident box (persist), processes left by one call can read a later call's memory and environment",
        )
        .fix("enable Landlock: add landlock to the lsm= boot parameter (kernel 5.13+)")
    }
}

fn openat2() -> Check {
    match kern_sandbox::fsx::probe_openat2() {
        Ok(()) => Check::new("openat2", Status::Ok, "openat2 with RESOLVE_NO_SYMLINKS works"),
        Err(e) => Check::new(
            "openat2",
            Status::Missing,
            format!(
                "openat2 on / failed ({e}): image layers can't be unpacked and image files \
                 (USER, kernelspecs) can't be read safely"
            ),
        )
        .fix("Linux 5.6 or later is needed (inside a container: allow openat2 in its seccomp profile)"),
    }
}

/// As root, the workspace (and writable mounts) reach the box as idmapped mounts; unprivileged,
/// the box maps the caller's own ids and needs none.
fn idmapped(workspace: &Path, given: bool, root: bool) -> Check {
    let ws = workspace.display();
    // What a Sandbox's `open()` accepts as its workspace, by the same check.
    let looked = std::path::absolute(workspace)
        .map_err(|e| format!("{ws}: {e}"))
        .and_then(|p| {
            let policy = match given {
                true => kern_sandbox::session::host_binds::check_workspace(&p),
                false => Ok(()),
            };
            policy
                .and_then(|()| workspace::look_at(&p))
                .map_err(|e| e.to_string())
        });
    match looked {
        Ok(Found::Dir) => {}
        Ok(Found::Missing) => {
            return Check::new(
                "idmap",
                Status::Missing,
                format!("{ws} does not exist, so its filesystem can't be checked (a Sandbox creates a missing workspace)"),
            )
            .fix(format!("create it (mkdir -p {ws}) and check again"))
            .blocking()
        }
        Err(why) => {
            return Check::new("idmap", Status::Missing, format!("{ws} can't be a workspace: {why}"))
                .fix("check a directory: --workspace DIR")
                .blocking()
        }
    }
    let fs = fs_type(workspace).unwrap_or_else(|| "unknown".into());
    let kernel = nix::sys::utsname::uname()
        .map(|u| u.release().to_string_lossy().into_owned())
        .unwrap_or_default();
    if root && !idmap::in_initial_userns() {
        return Check::new(
            "idmap",
            Status::Ok,
            format!("root in a user namespace of its own (a container's): the box maps this root alone, as an unprivileged caller's; no idmapped mount needed ({ws} is {fs}, kernel {kernel})"),
        );
    }
    if !root {
        return Check::new(
            "idmap",
            Status::Ok,
            format!("unprivileged, the workspace is bound with your own ids; no idmapped mount needed ({ws} is {fs}, kernel {kernel})"),
        );
    }
    let path = workspace.to_string_lossy();
    let tried = idmap::userns_owning_as((0, 0), (65534, 65534))
        .and_then(|ns| idmap::idmapped_tree(&path, std::os::fd::AsFd::as_fd(&ns), 0));
    match tried {
        Ok(_) => Check::new(
            "idmap",
            Status::Ok,
            format!("{ws} ({fs}, kernel {kernel}) can be an idmapped mount, as a workspace there must be when running as root"),
        )
        .blocking(),
        Err(e) => Check::new(
            "idmap",
            Status::Missing,
            format!("{ws} ({fs}, kernel {kernel}) can't be an idmapped mount ({e}); as root a workspace there can't be used"),
        )
        .fix("use a workspace on ext4, xfs or btrfs (tmpfs from Linux 6.3), check another with --workspace DIR, or run unprivileged")
        .blocking(),
    }
}

/// The filesystem type of the mount holding `path` (longest mount point prefix in mountinfo).
fn fs_type(path: &Path) -> Option<String> {
    let path = std::fs::canonicalize(path).ok()?;
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    info.lines()
        .filter_map(|l| {
            let fields: Vec<&str> = l.split(' ').collect();
            let mount_point = fields.get(4)?;
            let sep = fields.iter().position(|f| *f == "-")?;
            let fstype = fields.get(sep + 1)?;
            path.starts_with(mount_point)
                .then(|| (mount_point.len(), fstype.to_string()))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, t)| t)
}

fn store() -> Check {
    let root = match Store::default_root() {
        Ok(r) => r,
        Err(e) => {
            return Check::new("store", Status::Missing, format!("image store: {e}"))
                .fix("set KERN_HOME to an absolute directory")
        }
    };
    // The store may not exist yet: measure the nearest directory that does.
    let existing = root
        .ancestors()
        .find(|a| a.exists())
        .unwrap_or(Path::new("/"));
    match nix::sys::statvfs::statvfs(existing) {
        Ok(v) => {
            let free = v.blocks_available().saturating_mul(v.fragment_size());
            let gib = free as f64 / (1u64 << 30) as f64;
            let detail = format!("image store {} ({gib:.1} GiB free)", root.display());
            if free < LOW_SPACE {
                Check::new(
                    "store",
                    Status::Degraded,
                    format!("{detail}: under 2 GiB, an image pull may not fit"),
                )
                .fix("free space there, or set KERN_HOME to a directory on a larger filesystem")
            } else {
                Check::new("store", Status::Ok, detail)
            }
        }
        Err(e) => Check::new(
            "store",
            Status::Degraded,
            format!("image store {}: free space unknown ({e})", root.display()),
        ),
    }
}

fn proxies() -> Check {
    // The proxy variables HTTP clients read (the list the network relay sets in boxes).
    let set: Vec<String> = pullnet::PROXY_VARS
        .iter()
        .chain(pullnet::NO_PROXY_VARS)
        .filter_map(|k| {
            let v = std::env::var(k).ok().filter(|v| !v.is_empty())?;
            let shown = if k.eq_ignore_ascii_case("no_proxy") {
                v
            } else {
                redact(&v)
            };
            Some(format!("{k}={shown}"))
        })
        .collect();
    if set.is_empty() {
        Check::new("proxy", Status::Info, "no proxy variables set")
    } else {
        Check::new("proxy", Status::Info, set.join(" "))
    }
}

fn ca_bundle() -> Check {
    match pullnet::host_ca() {
        Ok(Some(p)) => Check::new(
            "ca",
            Status::Ok,
            format!("networked boxes trust the host CA bundle {}", p.display()),
        ),
        Ok(None) if std::env::var_os("KERN_HOST_CA").is_some() => Check::new(
            "ca",
            Status::Info,
            "KERN_HOST_CA turns the host CA bundle off: networked boxes trust only their image's",
        ),
        Ok(None) => Check::new(
            "ca",
            Status::Degraded,
            "no host CA bundle found: networked boxes trust only their image's CA store",
        )
        .fix("install the CA certificates (Debian/Ubuntu: apt install ca-certificates)"),
        Err(e) => {
            Check::new("ca", Status::Missing, e.to_string()).fix("set KERN_HOST_CA to 0 or 1")
        }
    }
}

/// What image pulls use, read as a pull reads it: the CAs they trust, how they reach
/// registries (proxies) and the Docker Hub mirrors they try first. A setting a pull would refuse
/// shows as missing, with its error.
fn registries() -> Vec<Check> {
    let trust = match pullnet::Trust::from_env() {
        Ok(t) if t.fallback => Check::new(
            "registry-ca",
            Status::Degraded,
            format!("pulls trust {}", t.describe()),
        )
        .fix("install the system CA certificates (Debian/Ubuntu: apt install ca-certificates) or set SSL_CERT_FILE"),
        // Part of the store unreadable (an SSL_CERT_FILE that is gone, a bad file): pulls go
        // on with the rest, and say here what was skipped.
        Ok(t) if !t.system_problems.is_empty() => Check::new(
            "registry-ca",
            Status::Degraded,
            format!(
                "pulls trust {}; skipped: {}",
                t.describe(),
                t.system_problems.join("; ")
            ),
        )
        .fix("check SSL_CERT_FILE and SSL_CERT_DIR (or the system CA files they name)"),
        Ok(t) => Check::new("registry-ca", Status::Ok, format!("pulls trust {}", t.describe())),
        Err(e) => Check::new("registry-ca", Status::Missing, e.to_string())
            .fix(format!("fix or unset {}", pullnet::CA_VAR)),
    };
    let route = match pullnet::Proxies::from_env() {
        Ok(p) => Check::new(
            "registry-net",
            Status::Info,
            format!("pulls: {}", p.describe()),
        ),
        Err(e) => Check::new("registry-net", Status::Missing, e.to_string())
            .fix("fix or unset the proxy variable"),
    };
    let mirrors = match pullnet::mirrors() {
        Ok(m) if m.is_empty() => Check::new(
            "mirrors",
            Status::Info,
            format!(
                "none ({} unset): docker.io pulls go to Docker Hub",
                pullnet::MIRRORS_VAR
            ),
        ),
        Ok(m) => Check::new(
            "mirrors",
            Status::Info,
            format!("docker.io pulls try {}, then Docker Hub", m.join(", ")),
        ),
        Err(e) => Check::new("mirrors", Status::Missing, e.to_string())
            .fix(format!("fix or unset {}", pullnet::MIRRORS_VAR)),
    };
    vec![trust, route, mirrors]
}
