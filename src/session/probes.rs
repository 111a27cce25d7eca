//! ADDITION: the probes behind `isolation()` and `requireIsolation` (`measure`, `require`: a
//! probe box of the session's posture, once per session) and behind `isolation().routes`
//! (`measure_routes`). A call does not always run in a fresh box: a python cell may
//! be forked from the zygote or take a prewarmed box, a `persist` session's calls join its
//! resident box, kernels, `spawn()` and `terminal()` have boxes of their own. Each route this
//! session's options open is measured in the box that route really gives (a spare kern, a
//! zygote fork, a prewarmed box, a call into the resident box, a driver kernel, a
//! spawned process, a terminal), by the same probe as the top-level report and read the same
//! way (`isolation::read`): what the image's tools print can only lower it.

use super::isolation::{self, Isolation, PROBE};
use super::network;
use super::opened::Opened;
use super::prepared::{prepare, Workload};
use super::process::{Process, ProcessRequest};
use super::route;
use crate::config::Network;
use crate::engine::addon::capture::Keep;
use crate::engine::addon::launch::{Kern, Outcome};
use crate::engine::shared::handoff::BoxFds;
use crate::engine::shared::spec::BoxSpec;
use crate::error::{Error, Result};
use crate::lang::Language;
use std::collections::BTreeMap;
use std::os::fd::OwnedFd;
use std::path::Path;
use std::sync::Arc;

/// `PROBE` in python, for the routes that run a python cell (zygote, prewarm, kernel).
const PROBE_PY: &str = r#"
import os
for n in ("user", "mnt", "pid", "net"):
    print("ns", n, os.readlink("/proc/self/ns/" + n))
for l in open("/proc/self/status"):
    k, _, v = l.partition(":")
    if k == "Seccomp": print("seccomp", v.strip())
    if k == "Seccomp_filters": print("filters", v.strip())
for l in open("/proc/self/uid_map"):
    print("uidmap", *l.split())
"#;

/// How long a probe may take in any route.
const PROBE_TIMEOUT_MS: u64 = 30_000;

/// Every route a call of this session can take, each measured in its own box.
pub(super) async fn measure_routes(
    opened: &Arc<Opened>,
    kern: &Path,
) -> Result<BTreeMap<&'static str, Isolation>> {
    let mut out = BTreeMap::new();
    if opened.resident.get().is_some() {
        out.insert("resident", call_box(opened, kern).await?);
    } else {
        out.insert("fresh", call_box(opened, kern).await?);
        // An ended zygote takes no more calls: they run fresh, as measured above.
        if let Some(z) = zygote(opened, kern).await? {
            out.insert("zygote", z);
        }
        if opened.config.prewarm > 0 {
            out.insert("prewarm", prewarm(opened, kern).await?);
        }
        // A python kernel in an image without python is no route at all.
        if has_python(&opened.image.root) {
            out.insert("kernel", kernel(opened, kern).await?);
        }
    }
    out.insert("spawn", process(opened, kern, false).await?);
    out.insert("terminal", process(opened, kern, true).await?);
    Ok(out)
}

/// The box a `run()` gets: a spare kern of the session with the call's spec (its network and
/// mounts), or a call into the resident box of a `persist` session.
async fn call_box(opened: &Arc<Opened>, kern: &Path) -> Result<Isolation> {
    let route = route::plain(opened);
    let name = route.name();
    let argv = vec!["/bin/sh".into(), "-c".into(), PROBE.into()];
    let probe = Workload::Argv {
        what: "isolation()",
        argv,
    };
    let mut spec = prepare(opened, probe, PROBE_TIMEOUT_MS, Default::default())?.spec;
    if let Some(a) = opened.resident.get() {
        a.check()?;
        spec.resident = Some(crate::engine::shared::spec::Resident::Exec {
            name: a.target.name.clone(),
            pid1: a.target.pid1,
        });
    }
    let _running = opened.running.read().await;
    let line = opened.egress_line(&spec)?;
    let fds = network::fds(None, line.as_ref());
    let mut outcome = run_probe(route.kern(opened, kern)?, &spec, opened, fds).await?;
    // A call into the resident box runs under the box's caps, which its own report does not
    // restate: they are read back from the host, off the box's PID 1.
    if let (Some(a), Some(o)) = (opened.resident.get(), outcome.as_mut()) {
        if o.report.applied.is_none() {
            let said = String::from_utf8_lossy(&o.stdout).into_owned();
            o.report.applied = Some(held(a.target.pid1.pid, &opened.config.limits, &said));
        }
    }
    from_outcome(opened, name, outcome)
}

/// How the caps asked for in `limits` hold the box whose PID 1 is `pid`: its cgroup's files,
/// read from the host (`box-*` cgroups only: kern's), or else the rlimits the probe `said` it
/// ran under.
fn held(
    pid: libc::pid_t,
    limits: &crate::engine::shared::spec::Limits,
    said: &str,
) -> crate::engine::shared::status::Applied {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    let v2 = Path::new("/sys/fs/cgroup/cgroup.controllers").exists();
    // The directory of kern's cgroup holding `pid` for `controller` (v1) or for all (v2).
    let dir = |controller: &str| {
        cgroups.lines().find_map(|l| {
            let mut f = l.splitn(3, ':');
            let (_, ctrls, path) = (f.next()?, f.next()?, f.next()?);
            let boxed = Path::new(path)
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("box-"));
            let base = if v2 && ctrls.is_empty() {
                std::path::PathBuf::from("/sys/fs/cgroup")
            } else if !v2 && ctrls.split(',').any(|c| c == controller) {
                Path::new("/sys/fs/cgroup").join(ctrls)
            } else {
                return None;
            };
            boxed.then(|| base.join(path.trim_start_matches('/')))
        })
    };
    let read = |controller: &str, file: &str| {
        dir(controller).and_then(|d| std::fs::read_to_string(d.join(file)).ok())
    };
    let capped = |v: Option<String>| {
        v.map(|s| s.trim().to_string()).is_some_and(|s| {
            s != "max"
                && s != "-1"
                && !s.starts_with("max ")
                && s.parse::<u64>().map_or(true, |n| n < 1 << 62)
        })
    };
    let rlimited = |name: &str| {
        said.lines()
            .filter_map(|l| l.strip_prefix("rlimit "))
            .filter_map(|l| l.strip_prefix(name))
            .any(|v| v.trim() != "unlimited")
    };
    let how = |asked: bool, cgroup: bool, rlimit: bool| -> String {
        match (asked, cgroup, rlimit) {
            (false, _, _) => "none",
            (true, true, _) => "cgroup",
            (true, false, true) => "rlimit",
            (true, false, false) => "none",
        }
        .into()
    };
    let (mem_file, pids_file, cpu_file) = if v2 {
        ("memory.max", "pids.max", "cpu.max")
    } else {
        ("memory.limit_in_bytes", "pids.max", "cpu.cfs_quota_us")
    };
    let memory = capped(read("memory", mem_file));
    let pids = capped(read("pids", pids_file));
    let cpu = capped(read("cpu", cpu_file));
    crate::engine::shared::status::Applied {
        memory: how(limits.memory_bytes.is_some(), memory, rlimited("data ")),
        pids: how(limits.pids.is_some(), pids, rlimited("nproc ")),
        cpu: how(limits.cpus.is_some(), cpu, false),
        cgroup: (memory || pids || cpu).then(|| if v2 { "v2" } else { "v1" }.to_string()),
    }
}

/// A python cell's box forked from the zygote, as a call takes it; None without a zygote, or
/// once it has ended.
async fn zygote(opened: &Arc<Opened>, kern: &Path) -> Result<Option<Isolation>> {
    if !opened.config.zygote {
        return Ok(None);
    }
    let Some(k) = super::route::zygote_fork(opened, kern) else {
        return Ok(None);
    };
    let workspace = opened.workspace_path()?;
    let launch = Language::Python.launch(PROBE_PY)?;
    let mut spec = opened.call_spec(
        launch.argv,
        &launch.env,
        &[],
        PROBE_TIMEOUT_MS,
        true,
        &workspace,
    );
    spec.zygote = true;
    let (ours, theirs) = network::box_socketpair("driver", Some(&opened.python_start()))?;
    let results = super::call::driver_io_on(ours, None, PROBE_PY, None)?;
    let _running = opened.running.read().await;
    let line = opened.egress_line(&spec)?;
    let fds = network::fds(Some(&theirs), line.as_ref());
    let outcome = run_probe(k, &spec, opened, fds).await?;
    drop(theirs);
    results.abort();
    // The spare died before it got the spec: nothing ran; such a call runs fresh.
    match outcome {
        Some(o) => from_outcome(opened, "zygote", Some(o)).map(Some),
        None => Ok(None),
    }
}

/// A prewarmed box, taken as a call takes one (or started as `prewarm` starts them, when none
/// is ready); the spares are topped up after.
async fn prewarm(opened: &Arc<Opened>, kern: &Path) -> Result<Isolation> {
    let prewarmed = match super::prewarm::take(opened) {
        Some(s) => s,
        None => super::prewarm::start(opened.clone(), kern)?,
    };
    let (r, outcome) = prewarmed.run_measured(PROBE_PY, PROBE_TIMEOUT_MS).await;
    super::prewarm::fill(opened, kern);
    from_cell(opened, "prewarm", r, outcome)
}

/// A driver kernel's box, as `kernel()` starts it.
async fn kernel(opened: &Arc<Opened>, kern: &Path) -> Result<Isolation> {
    let d = super::kernel::driver::Driver {
        single: false,
        lang: Language::Python,
        interrupt: false,
    };
    let k = super::longbox::start_driver(
        opened.clone(),
        kern,
        PROBE_TIMEOUT_MS,
        Keep::new(1 << 16, None),
        d,
        &super::percall::PerCall::default(),
    )?;
    let r = k
        .run_code(
            super::kernel::lifecycle::CellInput::code(PROBE_PY),
            None,
            None,
            None,
            None,
        )
        .await;
    let outcome = k.close_outcome().await;
    from_cell(opened, "kernel", r, outcome)
}

/// Whether the image has a `python3` where a box's PATH finds it (resolved inside the image).
fn has_python(root: &crate::engine::shared::spec::RootSpec) -> bool {
    let root = match root {
        crate::engine::shared::spec::RootSpec::Dir { path } => path.clone(),
        crate::engine::shared::spec::RootSpec::Host => "/".into(),
    };
    let Ok(dir) = crate::fsx::open_no_symlinks(&root) else {
        return false;
    };
    ["usr/local/bin/python3", "usr/bin/python3", "bin/python3"]
        .iter()
        .any(|p| {
            crate::fsx::open_beneath(
                &dir,
                p,
                nix::fcntl::OFlag::O_PATH,
                crate::fsx::Resolve::InRoot,
            )
            .is_ok()
        })
}

/// A `spawn()`ed process's box, or a `terminal()`'s.
async fn process(opened: &Arc<Opened>, kern: &Path, terminal: bool) -> Result<Isolation> {
    let route = if terminal { "terminal" } else { "spawn" };
    let req = ProcessRequest {
        argv: Some(vec!["/bin/sh".into(), "-c".into(), PROBE.into()]),
        timeout_s: Some(serde_json::json!(PROBE_TIMEOUT_MS / 1000)),
        ..Default::default()
    };
    // Its output is kept in its result; nothing streams.
    let (sink, mut chunks) = crate::engine::addon::launch::chunk_channel();
    tokio::spawn(async move { while chunks.recv().await.is_some() {} });
    let p = Process::start(opened.clone(), kern, req, terminal, sink).await?;
    let r = p.wait().await?;
    if r.exit_code != 0 || r.fault.is_some() {
        return Err(failed(
            route,
            r.exit_code,
            r.fault.as_ref(),
            r.stderr.code(),
        ));
    }
    isolation::read(&opened.config, &r.stdout, p.applied(), Vec::new())
}

/// The report from a probe box's outcome.
fn from_outcome(opened: &Opened, route: &str, outcome: Option<Outcome>) -> Result<Isolation> {
    let o = outcome.ok_or_else(|| {
        Error::Runtime(format!(
            "isolation(): the {route} route's kern exited before it read the probe's spec"
        ))
    })?;
    let r = o.report;
    if r.exit_code != 0 || r.fault.is_some() {
        let stderr = String::from_utf8_lossy(&o.stderr);
        return Err(failed(route, r.exit_code, r.fault.as_ref(), &stderr));
    }
    isolation::read(
        &opened.config,
        &String::from_utf8_lossy(&o.stdout),
        r.applied,
        r.notes,
    )
}

/// The report from a probe cell's result and its box's outcome.
fn from_cell(
    opened: &Opened,
    route: &str,
    r: Result<super::result::ExecResult>,
    outcome: Option<Outcome>,
) -> Result<Isolation> {
    let r = r?;
    if r.exit_code != 0 || r.fault.is_some() || r.error.is_some() {
        let why = r
            .error
            .as_ref()
            .map(|e| format!("{}: {}", e.name, e.value))
            .unwrap_or_else(|| r.stderr.code().to_string());
        return Err(failed(route, r.exit_code, r.fault.as_ref(), &why));
    }
    let applied = outcome.and_then(|o| o.report.applied);
    isolation::read(&opened.config, &r.stdout, applied, Vec::new())
}

fn failed(
    route: &str,
    code: i32,
    fault: Option<&crate::engine::shared::status::Fault>,
    said: &str,
) -> Error {
    let why = fault
        .map(|f| f.message.clone())
        .unwrap_or_else(|| format!("the probe exited with code {code}: {}", said.trim()));
    isolation::unmeasured(format!("in the {route} route's box: {why}"))
}

/// Measures the posture a box of this session gets, once per session (later calls get the
/// same answer).
pub(super) async fn measure(opened: &Opened, kern: &Path) -> Result<Isolation> {
    opened
        .isolation
        .get_or_try_init(|| probe(opened, kern))
        .await
        .cloned()
}

async fn probe(opened: &Opened, kern: &Path) -> Result<Isolation> {
    let argv = vec!["/bin/sh".into(), "-c".into(), PROBE.into()];
    let probe = Workload::Argv {
        what: "isolation()",
        argv,
    };
    let mut spec = prepare(opened, probe, 30_000, Default::default())?.spec;
    opened.make_bare(&mut spec);
    // The network is the session's (a bare box has none): `host` shares the host's namespace;
    // an allowlist box has its own empty one, as here, and the proxy's line besides.
    if matches!(opened.config.network, Network::Host) {
        network::host(&mut spec, opened.ca.as_deref());
    }
    let outcome = opened.run_own(kern, &spec).await?;
    let report = outcome.report;
    if report.exit_code != 0 || report.fault.is_some() {
        let why = report
            .fault
            .as_ref()
            .map(|f| f.message.clone())
            .unwrap_or_else(|| {
                format!(
                    "the probe exited with code {}: {}",
                    report.exit_code,
                    String::from_utf8_lossy(&outcome.stderr).trim()
                )
            });
        return Err(isolation::unmeasured(why));
    }
    isolation::read(
        &opened.config,
        &String::from_utf8_lossy(&outcome.stdout),
        report.applied,
        report.notes,
    )
}

/// `requireIsolation` at open(): each control asked for that the measured posture lacks,
/// with why and what to do, in one error.
pub(super) async fn require(opened: &Opened, kern: &Path, required: &[String]) -> Result<()> {
    if required.is_empty() {
        return Ok(());
    }
    let m = measure(opened, kern).await?;
    let mut missing = Vec::new();
    for control in required {
        let lack = match control.as_str() {
            "filesystem" if !m.filesystem => Some("the box shares the host's mount namespace".to_string()),
            "process" if !m.process => Some("the box shares the host's PID namespace".to_string()),
            "network" if m.network == "host" => Some("the box shares the host's network namespace".to_string()),
            "seccomp" if m.seccomp != "untrusted" => Some(format!("the untrusted seccomp profile is not in force in the box (measured: {}); set `securityProfile: \"untrusted\"` (x86_64)", m.seccomp)),
            "limits" if m.limits.memory != "cgroup" || m.limits.pids != "cgroup" => {
                let why: Vec<&str> = m
                    .notes
                    .iter()
                    .filter(|n| n.contains("best-effort") || n.contains("not enforced"))
                    .map(String::as_str)
                    .collect();
                Some(format!(
                    "memory is capped by {}, pids by {} (not both by a cgroup){}; run where kern can write a cgroup (as root, or under a delegated cgroup v2 subtree: systemd's user manager, or KERN_CGROUP_PARENT; `kern doctor` says which applies here), and keep enforceLimits, memoryMb and pids on",
                    m.limits.memory,
                    m.limits.pids,
                    if why.is_empty() { String::new() } else { format!(" ({})", why.join("; ")) }
                ))
            }
            _ => None,
        };
        if let Some(why) = lack {
            missing.push(format!("{control}: {why}"));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::IsolationUnavailable(format!(
        "requireIsolation: this host cannot supply {} of the controls asked for: {}",
        missing.len(),
        missing.join(" | ")
    )))
}

/// Runs a probe's box in `kern`: its output bounded to 64 KiB, ended by the session's close().
async fn run_probe(
    kern: Kern,
    spec: &BoxSpec,
    opened: &Opened,
    fds: BoxFds<&OwnedFd>,
) -> Result<Option<Outcome>> {
    kern.run(
        spec,
        &Keep::new(1 << 16, None),
        None,
        opened.closing.subscribe(),
        fds,
    )
    .await
}
