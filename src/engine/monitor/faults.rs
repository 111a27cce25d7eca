//! How a box (or one call into a resident box) ended, told from what its init said on the init
//! pipe (`handoff::msg`) and what kern saw: the report's exit code and fault (timeout, OOM with
//! the scratch that held the bytes, escape blocked, exec failed...), and the set-id sweep that
//! fails a call closed when it can't finish.

use crate::engine::shared::handoff::msg;
use crate::engine::shared::spec::BoxSpec;
use crate::engine::shared::status::{note, signal_name, BoxReport, Fault, FaultKind};
use nix::sys::wait::WaitStatus;

/// Clears set-id bits in everything the box could write (the workspace, `"rw"` binds): the
/// second wall behind the seccomp filter. A sweep that cannot finish is a fault, never a pass.
pub(in crate::engine) fn sweep_setid(spec: &BoxSpec) -> Option<Fault> {
    let writable = spec.binds.iter().filter(|b| b.writable).map(|b| &b.source);
    for root in std::iter::once(&spec.workspace).chain(writable) {
        if let Err(why) = crate::workspace::setid::strip_setid(root) {
            let message = format!(
                "kern could not check every file the box left in {} for set-id bits ({why}), so the call is failed closed; remove what the box left there",
                root.display()
            );
            note("warning", &message);
            return Some(Fault::new(FaultKind::Killed, message));
        }
    }
    None
}

/// Puts a failed sweep's fault on the report, unless the sandbox already acted.
pub(in crate::engine) fn fail_closed(report: &mut BoxReport, unswept: Option<Fault>) {
    if let Some(f) = unswept {
        if report.fault.is_none() {
            report.fault = Some(f);
        }
    }
}

/// How a box (or one call into a resident box) ended, from its init's messages on the init
/// pipe: `ended_by` is kern's own reason (timeout, caller gone), `oom` the cgroup's shmem bytes
/// when the OOM killer acted, `init_status` how the init (`who`) ended.
pub(in crate::engine) fn conclude(
    spec: &BoxSpec,
    messages: &str,
    ended_by: Option<Fault>,
    oom: Option<u64>,
    init_status: nix::Result<WaitStatus>,
    who: &str,
) -> BoxReport {
    let mut report = BoxReport {
        exit_code: 0,
        fault: None,
        ..Default::default()
    };
    let mut exited = false;
    let mut tmpfs_used: Vec<(u64, String)> = Vec::new();
    let mut blocked: Vec<&str> = Vec::new();
    for line in messages.lines() {
        let (kind, rest) = line.split_at(
            line.char_indices()
                .nth(1)
                .map(|(i, _)| i)
                .unwrap_or(line.len()),
        );
        let rest = rest.trim_start();
        match kind.chars().next() {
            Some(msg::SETUP_FAILED) if report.fault.is_none() => {
                report.exit_code = 125;
                report.fault = Some(Fault::new(
                    FaultKind::StartupFailed,
                    format!("the box could not be built: {rest}"),
                ));
            }
            Some(msg::CWD_REFUSED) if report.fault.is_none() => {
                report.exit_code = 125;
                report.cwd_refused = Some(rest.to_string());
                report.fault = Some(Fault::new(FaultKind::StartupFailed, rest));
            }
            Some(msg::EXEC_FAILED) if report.fault.is_none() => {
                let (errno, program) = rest.split_once(' ').unwrap_or((rest, ""));
                let errno: i32 = errno.parse().unwrap_or(libc::ENOENT);
                let why = std::io::Error::from_raw_os_error(errno);
                let hint = if errno == libc::ENOENT {
                    if program.contains('/') {
                        " (no such file in the box)".to_string()
                    } else {
                        format!(" (not found in the box's PATH {})", spec.path_var())
                    }
                } else {
                    String::new()
                };
                report.exit_code = 127;
                report.fault = Some(Fault::new(
                    FaultKind::ExecFailed,
                    format!("cannot run \"{program}\": {why}{hint}"),
                ));
            }
            Some(msg::BLOCKED) => blocked.push(rest),
            Some(msg::SIGNALED) => report.signal = rest.parse().ok().map(signal_name),
            Some(msg::EXITED) => {
                let mut parts = rest.split(' ');
                let code = parts.next().and_then(|c| c.parse().ok()).unwrap_or(255);
                if report.fault.is_none() {
                    report.exit_code = code;
                }
                exited = true;
                while let (Some(used), Some(target)) = (parts.next(), parts.next()) {
                    tmpfs_used.push((used.parse().unwrap_or(0), target.to_string()));
                }
            }
            _ => {}
        }
    }
    // kern (or the OOM killer) ends a box with SIGKILL.
    let killed = || Some(signal_name(libc::SIGKILL));
    if let Some(fault) = ended_by {
        report.exit_code = 137;
        report.fault = Some(fault);
        report.signal = killed();
        return report;
    }
    if let Some(shmem) = oom {
        report.fault = Some(oom_fault(spec, &tmpfs_used, shmem));
        if !exited {
            report.exit_code = 137;
            report.signal = killed();
        }
        return report;
    }
    if !exited && report.fault.is_none() {
        report.exit_code = 125;
        report.fault = Some(Fault::new(
            FaultKind::Killed,
            format!("the {who} ended before the workload reported an exit ({init_status:?})"),
        ));
    }
    if let Ok(WaitStatus::Signaled(_, sig, _)) = init_status {
        if report.fault.is_none() {
            report.fault = Some(Fault::new(
                FaultKind::Killed,
                format!("the {who} was killed by {sig}"),
            ));
        }
    }
    if report.fault.is_none() && spec.seccomp.is_some() {
        report.fault = escape_fault(&blocked, report.exit_code);
    }
    report
}

/// What the `untrusted` profile stopped, when it stopped something: the syscalls its supervisor
/// refused, or a process killed for a foreign architecture's syscall (SIGSYS from the filter's
/// architecture check; the supervisor never kills).
fn escape_fault(blocked: &[&str], exit_code: i32) -> Option<Fault> {
    if !blocked.is_empty() {
        return Some(Fault::new(
            FaultKind::EscapeBlocked,
            format!(
                "securityProfile \"untrusted\" refused {}: each attempt failed with EPERM and the code ran on",
                blocked.join(", ")
            ),
        ));
    }
    (exit_code == 128 + libc::SIGSYS).then(|| {
        Fault::new(
            FaultKind::EscapeBlocked,
            "securityProfile \"untrusted\" killed the workload (SIGSYS) for a system call of a foreign architecture, such as a 32-bit int 0x80 call on x86_64",
        )
    })
}

/// The OOM killer acted in the box: the cap, and the scratch tmpfs that held a real share of it.
fn oom_fault(spec: &BoxSpec, tmpfs_used: &[(u64, String)], shmem: u64) -> Fault {
    let cap = spec.limits.memory_bytes.unwrap_or(0);
    let mut message = format!(
        "the box reached its memory cap of {} MiB and the kernel's OOM killer ended a process",
        cap >> 20
    );
    // Scratch tmpfs pages are charged to the box: name the scratch when it held a real share.
    // PID 1's own reading names each mount, but PID 1 may itself have been OOM-killed; the
    // cgroup's shmem figure survives that.
    let significant = |bytes: u64| cap > 0 && bytes * 4 >= cap;
    let named: Vec<String> = tmpfs_used
        .iter()
        .filter(|(used, _)| significant(*used))
        .map(|(used, target)| format!("{target} held {} MiB", used >> 20))
        .collect();
    let scratch = if !named.is_empty() {
        Some(named.join(", "))
    } else if significant(shmem) {
        let targets: Vec<&str> = spec
            .tmpfs
            .iter()
            .map(|t| t.target.as_str())
            .chain(["/dev/shm"])
            .collect();
        Some(format!(
            "scratch filesystems ({}) held {} MiB",
            targets.join(", "),
            shmem >> 20
        ))
    } else {
        None
    };
    if let Some(s) = scratch {
        message.push_str(&format!(
            "; files in scratch tmpfs count against memoryMb, and {s}: delete scratch files, write big files to the workspace, or raise memoryMb"
        ));
    }
    Fault::new(FaultKind::Oom, message)
}
