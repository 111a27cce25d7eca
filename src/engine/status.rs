//! What `kern` reports about a box on its status pipe: one JSON object per line. The addon reads
//! them after the workload's stdout/stderr, so the outcome never has to be parsed out of the
//! workload's own output.

use serde::{Deserialize, Serialize};

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
    /// A resident box started: its PID 1 (the state file holds the rest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started: Option<super::resident::ProcId>,
    /// An exec found no resident box to run in (destroyed, or past its TTL): why. The caller
    /// throws it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resident_gone: Option<String>,
    /// kern's own `note:`/`warning:` lines, in the order it wrote them to stderr (kern fills
    /// this in as it sends the report): the caller's `runtimeNotes` come from here, never from
    /// matching the workload's text.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The line `kern box` sends on the control socket once it is prepared, before it reads the
/// spec: the notes it wrote so far, which stand at the very start of the box's stderr (nothing
/// of the box exists yet). A long-lived box's caller needs them long before the report.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Prepared {
    pub prepared_notes: Vec<String>,
}
