//! How a box (or one call into a resident box) ended, told from what its init said on the init
//! pipe (`protocol::pid1::Pid1Msg`) and what kern saw: the report's exit code and fault (timeout, OOM with
//! the scratch that held the bytes, escape blocked, exec failed...), and the set-id sweep that
//! fails a call closed when it can't finish.

use crate::engine::shared::protocol::pid1::Pid1Msg;
use crate::engine::shared::spec::BoxSpec;
use crate::engine::shared::status::{note, signal_name, BoxReport, Fault, FaultKind};
use nix::sys::wait::WaitStatus;

/// Clears set-id bits in everything the box could write (the workspace, `"rw"` binds): the
/// second wall behind the seccomp filter. A sweep that cannot finish is a fault, never a pass.
/// Of a `setid_watched` workspace only `.deps` is swept here: the caller's watch clears the
/// rest after the report (`sweep_unless_swept`).
pub(in crate::engine) fn sweep_setid(spec: &BoxSpec) -> Option<Fault> {
    let workspace = if spec.setid_watched {
        crate::workspace::setid::strip_setid_in(&spec.workspace, crate::workspace::track::EXCLUDED)
    } else {
        crate::workspace::setid::strip_setid(&spec.workspace)
    };
    let writable = spec.binds.iter().filter(|b| b.writable).map(|b| &b.source);
    let rest = writable.map(|root| (root, crate::workspace::setid::strip_setid(root)));
    for (root, swept) in std::iter::once((&spec.workspace, workspace)).chain(rest) {
        if let Err(why) = swept {
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

/// After the report of a `setid_watched` box: the whole workspace swept, unless the caller says
/// within `SWEPT_BOUND` that its watch cleared it (`handoff::wait_swept`). Nobody is left to
/// hear a failure here (the caller that would have is gone, or failed it already): it is only
/// noted on kern's stderr.
pub fn sweep_unless_swept(spec: &BoxSpec, lifeline: std::os::fd::BorrowedFd<'_>) {
    if !spec.setid_watched || crate::engine::shared::handoff::wait_swept(lifeline, SWEPT_BOUND) {
        return;
    }
    if let Err(why) = crate::workspace::setid::strip_setid(&spec.workspace) {
        eprintln!(
            "kern: could not clear the set-id bits the box may have left in {} ({why})",
            spec.workspace.display()
        );
    }
}

/// How long kern waits for a live caller's `Command::Swept` (it comes once the caller has read
/// the report and its watch's events: a few ms, more on a loaded host).
const SWEPT_BOUND: std::time::Duration = std::time::Duration::from_secs(60);

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
    let mut blocked: Vec<String> = Vec::new();
    for message in Pid1Msg::decode_all(messages.as_bytes()) {
        match message {
            Ok(Pid1Msg::SetupFailed(why)) if report.fault.is_none() => {
                report.exit_code = 125;
                report.fault = Some(Fault::new(
                    FaultKind::StartupFailed,
                    format!("the box could not be built: {}", why.trim_start()),
                ));
            }
            Ok(Pid1Msg::CwdRefused(why)) if report.fault.is_none() => {
                let why = why.trim_start();
                report.exit_code = 125;
                report.cwd_refused = Some(why.to_string());
                report.fault = Some(Fault::new(FaultKind::StartupFailed, why));
            }
            Ok(Pid1Msg::ExecFailed { errno, program }) if report.fault.is_none() => {
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
            Ok(Pid1Msg::Blocked(name)) => blocked.push(name),
            Ok(Pid1Msg::Signaled(sig)) => report.signal = Some(signal_name(sig)),
            Ok(Pid1Msg::Exited {
                code,
                tmpfs_used: used,
            }) => {
                if report.fault.is_none() {
                    report.exit_code = code;
                }
                exited = true;
                // In the spec's order: init and the zygote measure `spec.tmpfs` as listed.
                tmpfs_used.extend(
                    used.into_iter()
                        .zip(spec.tmpfs.iter().map(|t| t.target.clone())),
                );
            }
            Ok(_) => {}
            Err(e) => note("warning", &format!("{e}; ignored")),
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
fn escape_fault(blocked: &[String], exit_code: i32) -> Option<Fault> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use nix::unistd::Pid;

    fn spec(tmpfs: &[&str]) -> BoxSpec {
        let tmpfs: Vec<_> = tmpfs
            .iter()
            .map(|t| serde_json::json!({"target": t, "size_bytes": 64 << 20}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "root": {"kind": "host"}, "workspace": "/w", "workspace_target": "/workspace",
            "tmpfs": tmpfs,
            "limits": {"memory_bytes": 64 << 20, "pids": null, "cpus": null, "enforce": true},
            "timeout_ms": 1, "argv": [], "env": [], "hostname": "kern"
        }))
        .unwrap()
    }

    fn conclude_lines(spec: &BoxSpec, messages: &[Pid1Msg], oom: Option<u64>) -> BoxReport {
        let text: String = messages.iter().map(Pid1Msg::encode).collect();
        let exited = Ok(WaitStatus::Exited(Pid::from_raw(1), 0));
        conclude(spec, &text, None, oom, exited, "box's init")
    }

    #[test]
    fn the_workloads_end_is_its_signal_and_code() {
        let r = conclude_lines(
            &spec(&[]),
            &[
                Pid1Msg::Workload(2),
                Pid1Msg::Signaled(libc::SIGTERM),
                Pid1Msg::Exited {
                    code: 128 + libc::SIGTERM,
                    tmpfs_used: vec![],
                },
            ],
            None,
        );
        assert_eq!(r.exit_code, 128 + libc::SIGTERM);
        assert_eq!(r.signal.as_deref(), Some("SIGTERM"));
        assert!(r.fault.is_none(), "{:?}", r.fault);
    }

    #[test]
    fn an_oom_names_the_scratch_by_the_specs_order_even_with_a_space_in_it() {
        let s = spec(&["/tmp", "/scratch dir"]);
        let r = conclude_lines(
            &s,
            &[Pid1Msg::Exited {
                code: 137,
                tmpfs_used: vec![0, 48 << 20],
            }],
            Some(48 << 20),
        );
        let f = r.fault.unwrap();
        assert_eq!(f.kind, FaultKind::Oom);
        assert!(
            f.message.contains("/scratch dir held 48 MiB"),
            "{}",
            f.message
        );
        assert!(!f.message.contains("/tmp held"), "{}", f.message);
    }

    #[test]
    fn a_failed_exec_or_setup_is_the_fault_and_a_garbled_line_changes_nothing() {
        let exec = Pid1Msg::ExecFailed {
            errno: libc::ENOENT,
            program: "nope".into(),
        };
        let r = conclude_lines(&spec(&[]), &[exec], None);
        assert_eq!(r.exit_code, 127);
        let f = r.fault.unwrap();
        assert_eq!(f.kind, FaultKind::ExecFailed);
        assert!(
            f.message.starts_with("cannot run \"nope\""),
            "{}",
            f.message
        );

        let exited = Ok(WaitStatus::Exited(Pid::from_raw(1), 0));
        let text = "S mount /proc: EPERM\nQ what\nX 0\n";
        let r = conclude(&spec(&[]), text, None, None, exited, "box's init");
        assert_eq!(r.exit_code, 125);
        let f = r.fault.unwrap();
        assert_eq!(f.kind, FaultKind::StartupFailed);
        assert_eq!(f.message, "the box could not be built: mount /proc: EPERM");
    }
}
