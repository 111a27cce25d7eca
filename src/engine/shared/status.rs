//! What `kern` reports about a box on its status pipe: one JSON object per line. The addon reads
//! them after the workload's stdout/stderr, so the outcome never has to be parsed out of the
//! workload's own output. kern's own diagnostics (`note`) are kept here too, so the report can
//! say which lines of stderr are kern's.

use serde::{Deserialize, Serialize};

/// The lines `note` wrote, in order: the report carries them, so the caller knows which of the
/// stderr bytes are kern's rather than guessing from their text.
static NOTES: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Writes one of kern's own diagnostics to stderr, where it lands in order with the workload's
/// output, and keeps it for the report (`BoxReport::notes`).
pub fn note(kind: &str, text: &str) {
    use std::io::Write;
    let line = format!("{kind}: {text}");
    // Never `eprintln!`: it panics when the reader has gone (a caller that exited while this
    // kern was a spare), and a panic would skip the cgroup cleanup.
    let _ = writeln!(std::io::stderr(), "{line}");
    if let Ok(mut notes) = NOTES.lock() {
        notes.push(line);
    }
}

/// Every line `note` has written so far, in order.
pub fn notes() -> Vec<String> {
    NOTES.lock().map(|n| n.clone()).unwrap_or_default()
}

/// Why the sandbox, not the workload, ended or refused the run.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    Timeout,
    Oom,
    EscapeBlocked,
    Killed,
    StartupFailed,
    ExecFailed,
    WorkspaceFull,
}

impl FaultKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::Timeout => "timeout",
            FaultKind::Oom => "oom",
            FaultKind::EscapeBlocked => "escape_blocked",
            FaultKind::Killed => "killed",
            FaultKind::StartupFailed => "startup_failed",
            FaultKind::ExecFailed => "exec_failed",
            FaultKind::WorkspaceFull => "workspace_full",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Fault {
    #[serde(rename = "type")]
    pub kind: FaultKind,
    pub message: String,
}

impl Fault {
    pub fn new(kind: FaultKind, message: impl Into<String>) -> Self {
        Fault {
            kind,
            message: message.into(),
        }
    }
}

/// The last line `kern` writes: how the box ended.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct BoxReport {
    /// The workload's exit code; 128+N when a signal N ended it (the shell convention).
    pub exit_code: i32,
    pub fault: Option<Fault>,
    /// `requireLimits` refused the box before it started: why. The caller throws it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limits_refused: Option<String>,
    /// The name of the signal that ended the workload (`"SIGKILL"`), when one did: its own, or
    /// kern's when kern ended the box (a timeout, the caller gone or aborting, OOM).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signal: Option<String>,
    /// A call's `cwd` was missing in the box or led out of the workspace: why. The caller
    /// throws it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwd_refused: Option<String>,
    /// A resident box started: its PID 1 (the state file holds the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<super::sys::ProcId>,
    /// An exec found no resident box to run in (destroyed, or past its TTL): why. The caller
    /// throws it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident_gone: Option<String>,
    /// The box could not start because the container it runs in refuses a step (issue 22):
    /// `"seccomp"`, `"masked-proc"`, `"root-without-userns"`, `"root-without-setfcap"`,
    /// `"userns"` or `"apparmor"`
    /// (`engine::shared::container`). The fault's message names the refusal and its fix; `open()`
    /// throws it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_refusal: Option<String>,
    /// How kern applied the box's caps, read back (ADDITION, for `isolation()`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub applied: Option<Applied>,
    /// kern's own `note:`/`warning:` lines, in the order it wrote them to stderr (kern fills
    /// this in as it sends the report): the caller's `runtimeNotes` come from here, never from
    /// matching the workload's text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// How each cap of a box was applied: `"cgroup"` (read back from the box's cgroup as asked),
/// `"rlimit"` (the best-effort fallback), or `"none"` (not asked for, or in force neither way).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Applied {
    pub memory: String,
    pub pids: String,
    pub cpu: String,
    /// `"v1"` or `"v2"`: the hierarchy of the cgroup that holds the box; none without one.
    pub cgroup: Option<String>,
}

/// A signal's name as Node's `os.constants.signals` has it (`"SIGKILL"`; real-time ones
/// `"SIGRTMIN+n"`), or `"SIG<n>"` for a number Linux does not define.
pub fn signal_name(n: i32) -> String {
    if let Ok(s) = nix::sys::signal::Signal::try_from(n) {
        return s.as_str().to_string();
    }
    let (min, max) = (libc::SIGRTMIN(), libc::SIGRTMAX());
    if (min..=max).contains(&n) {
        return format!("SIGRTMIN+{}", n - min);
    }
    format!("SIG{n}")
}

impl BoxReport {
    /// The box (or call) never started: exit code 125 and why.
    pub fn startup_failed(message: impl Into<String>) -> BoxReport {
        BoxReport {
            exit_code: 125,
            fault: Some(Fault::new(FaultKind::StartupFailed, message)),
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::signal_name;

    #[test]
    fn signals_are_named_as_node_names_them() {
        assert_eq!(signal_name(libc::SIGKILL), "SIGKILL");
        assert_eq!(signal_name(libc::SIGTERM), "SIGTERM");
        assert_eq!(signal_name(libc::SIGRTMIN() + 2), "SIGRTMIN+2");
        assert_eq!(signal_name(99), "SIG99");
    }
}
