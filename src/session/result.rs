//! What a call returns (`ExecResult`) and how kern assembles it: the workspace's changes, the
//! refusal of a call over `workspaceMaxBytes`, and sizes in words.

use super::stderr::Stderr;
use crate::config::show_bytes;
use crate::engine::addon::capture::{SpillEnd, Spilled};
use crate::engine::addon::launch::{Outcome, SweptAck};
use crate::engine::shared::status::{Fault, FaultKind};
use crate::lang::driver;
use crate::workspace::track::{self, FileInfo};

/// What one call asks for.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ExecRequest {
    /// `run(argv)`.
    pub argv: Option<Vec<String>>,
    /// `runCode(code)`.
    pub code: Option<String>,
    pub language: Option<String>,
    /// Per-call override of `timeoutS`.
    pub timeout_s: Option<serde_json::Value>,
    /// Per-call `env`, over the Sandbox's (`percall`).
    pub env: Option<serde_json::Value>,
    /// Per-call `cwd`, workspace-relative (`percall`).
    pub cwd: Option<serde_json::Value>,
    /// Per-call `user`, the account this call's box runs as (`percall`).
    pub user: Option<serde_json::Value>,
}

/// What one call produced (`binding::NativeResult` carries it to the JS layer).
#[derive(Debug)]
pub struct ExecResult {
    pub stdout: String,
    /// The output and which of it is kern's notes (`runtimeNotes`, `codeStderr`).
    pub stderr: Stderr,
    pub exit_code: i32,
    pub duration_ms: f64,
    pub fault: Option<Fault>,
    pub files: Vec<FileInfo>,
    /// Each stream reached `maxOutputBytes` and lost the rest (`truncated` is either).
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// ADDITION (issue 35): where each stream went past the cap, with `spillOutput`.
    pub stdout_spill: Option<Spilled>,
    pub stderr_spill: Option<Spilled>,
    /// The name of the signal that ended the workload (`"SIGKILL"`), if one did.
    pub signal: Option<String>,
    /// Rich results of a python cell, in order.
    pub results: Vec<driver::Item>,
    /// The exception a cell raised (`ExecutionResult.error`); None when it did not, or when the
    /// call has a fault (a timeout's KeyboardInterrupt is the fault, not an error).
    pub error: Option<driver::CellError>,
    /// A kernel cell's number (an addition: `executionCount`); None for a one-shot call.
    pub execution_count: Option<u32>,
}

impl ExecResult {
    /// Takes each stream's spill (`spillOutput`): the result's field, and a note on its
    /// stderr when the file is not the whole stream.
    pub(super) fn take_spills(&mut self, (out, err): (Option<SpillEnd>, Option<SpillEnd>)) {
        for (end, name) in [(&out, "stdout"), (&err, "stderr")] {
            if let Some(note) = end.as_ref().and_then(|e| e.note(name)) {
                self.stderr.push_note(&note);
            }
        }
        self.stdout_spill = out.and_then(|e| e.spilled());
        self.stderr_spill = err.and_then(|e| e.spilled());
    }
}

/// How long to wait, after the box ended, for the last result bytes.
pub(super) const RESULTS_GRACE: std::time::Duration = std::time::Duration::from_secs(2);

/// The caller's mistakes a box reports instead of a result: caps `requireLimits` could not
/// have, a container that refuses boxes, or a `cwd` the box could not enter.
pub(super) fn refusal(outcome: &mut Outcome) -> crate::error::Result<()> {
    if let Some(why) = outcome.report.limits_refused.take() {
        return Err(crate::error::Error::IsolationUnavailable(why));
    }
    // The container kern runs in refuses a box (issue 22): the message names the refusal and
    // the flag that lifts it.
    if outcome.report.container_refusal.take().is_some() {
        let why = outcome.report.fault.as_ref().map(|f| f.message.clone());
        return Err(crate::error::Error::HostUnsupported(
            why.unwrap_or_default(),
        ));
    }
    match outcome.report.cwd_refused.take() {
        Some(why) => Err(crate::error::Error::Invalid(why)),
        None => Ok(()),
    }
}

/// A call's (or a steered process's) `ExecResult` from its box's outcome: kern's notes and
/// `notes` in its stderr, what changed in the workspace since `before`, and `results`.
pub(super) async fn of_box(
    outcome: Outcome,
    notes: &[String],
    results: Vec<driver::Item>,
    before: Option<track::Before>,
    workspace: &std::path::Path,
) -> ExecResult {
    let mut stderr = Stderr::of_box(
        outcome.stderr,
        &outcome.prepared_notes,
        &outcome.report.notes,
    );
    for n in notes {
        stderr.push_note(n);
    }
    let mut fault = outcome.report.fault;
    let files = workspace_changes(before, workspace, &mut stderr, outcome.swept, &mut fault).await;
    let mut result = ExecResult {
        stdout: crate::lang::output_text(outcome.stdout),
        stderr,
        exit_code: outcome.report.exit_code,
        duration_ms: outcome.duration.as_secs_f64() * 1000.0,
        fault,
        files,
        stdout_truncated: outcome.stdout_truncated,
        stderr_truncated: outcome.stderr_truncated,
        stdout_spill: None,
        stderr_spill: None,
        signal: outcome.report.signal,
        results,
        error: None,
        execution_count: None,
    };
    result.take_spills((outcome.stdout_spill, outcome.stderr_spill));
    result
}

/// What a call changed in the workspace, from the walk or the mark before it (none when
/// `trackFiles` is off). A watched call's box (`setid_watched`) had its set-id bits cleared by
/// the watch: kern is told so (`swept`), unless the watch lost track (kern then walks the
/// workspace itself) or could not clear a file (the call fails closed: `fault`).
pub(super) async fn workspace_changes(
    before: Option<track::Before>,
    workspace: &std::path::Path,
    stderr: &mut Stderr,
    swept: Option<SweptAck>,
    fault: &mut Option<Fault>,
) -> Vec<FileInfo> {
    let (files, capped) = match before {
        None => return Vec::new(),
        Some(track::Before::Watched(mark)) => {
            let ended = tokio::task::spawn_blocking(move || mark.end()).await.ok();
            let Some(ended) = ended else {
                return Vec::new();
            };
            match (&ended.unswept, swept) {
                (Some(why), _) => {
                    if fault.is_none() {
                        *fault = Some(Fault::new(
                            FaultKind::Killed,
                            format!(
                                "kern could not clear the set-id bits of a file the box left in the workspace {} ({why}), so the call is failed closed; remove what the box left there",
                                workspace.display()
                            ),
                        ));
                    }
                }
                (None, Some(ack)) if !ended.capped => ack.swept(),
                // Dropped unsaid: kern sweeps the workspace itself.
                (None, _) => {}
            }
            (ended.files, ended.capped)
        }
        Some(track::Before::Walked(before)) => {
            let ws = workspace.to_path_buf();
            let after = tokio::task::spawn_blocking(move || track::snapshot(&ws, None))
                .await
                .unwrap_or_default();
            let capped = before.capped || after.capped;
            (track::diff(&before, &after), capped)
        }
    };
    if capped {
        stderr.push_note(&format!(
                "note: the workspace has more than {} entries; result.files covers only the first ones walked (trackFiles: false skips the walk)",
                track::MAX_ENTRIES
            ),
        );
    }
    files
}

/// The fault of a call refused because the workspace is over `workspaceMaxBytes`.
/// The `workspace_full` refusal when the walk before a call found the workspace over `cap`, or
/// could not measure all of it (fail closed: a box must not hide bytes in what kern can't read).
pub(super) fn over_quota(snap: &track::Snapshot, cap: u64) -> Option<Fault> {
    if let Some(why) = &snap.unmeasured {
        return Some(Fault::new(
            FaultKind::WorkspaceFull,
            format!(
                "kern could not measure the whole workspace against workspaceMaxBytes ({why}), so the call was not run; remove or fix what it names (listFiles() shows what is there)"
            ),
        ));
    }
    (snap.bytes > cap).then(|| workspace_full(snap.bytes, cap))
}

/// ADDITION (issue 35): the `workspace_full` refusal when a volume the session writes is past
/// its `sizeMb` (or could not all be measured), checked before each call and cell.
pub(super) async fn volumes_full(caps: &[crate::volume::Cap]) -> Option<Fault> {
    if caps.is_empty() {
        return None;
    }
    let caps = caps.to_vec();
    let checked = tokio::task::spawn_blocking(move || crate::volume::check_caps(&caps))
        .await
        .unwrap_or_else(|e| {
            Err(crate::volume::Full::Unmeasured {
                name: "?".into(),
                why: e.to_string(),
            })
        });
    let message = match checked.err()? {
        crate::volume::Full::Over {
            name,
            data,
            used,
            cap,
        } => format!(
            "the volume {name:?} holds {} (allocated blocks, and at least 4 KiB an entry), over its size ({}); the call was not run. Free space in it: its files are in {} on the host",
            show_bytes(used),
            show_bytes(cap),
            data.display()
        ),
        crate::volume::Full::Unmeasured { name, why } => format!(
            "kern could not measure the whole volume {name:?} against its size ({why}), so the call was not run; remove or fix what it names"
        ),
    };
    Some(Fault::new(FaultKind::WorkspaceFull, message))
}

fn workspace_full(bytes: u64, cap: u64) -> Fault {
    Fault::new(
        FaultKind::WorkspaceFull,
        format!(
            "the workspace holds {} (allocated blocks, and at least 4 KiB an entry), over workspaceMaxBytes ({}); the call was not run. Free space (listFiles() shows sizes; writeFile(path, \"\") empties a file after you readFile what you need) or open a Sandbox with a larger workspaceMaxBytes",
            show_bytes(bytes),
            show_bytes(cap)
        ),
    )
}

impl ExecResult {
    /// A call the sandbox refused before starting a box.
    pub(super) fn refused(fault: Fault) -> ExecResult {
        ExecResult {
            stdout: String::new(),
            stderr: Stderr::default(),
            exit_code: 125,
            duration_ms: 0.0,
            fault: Some(fault),
            files: Vec::new(),
            stdout_truncated: false,
            stdout_spill: None,
            stderr_spill: None,
            stderr_truncated: false,
            signal: None,
            results: Vec::new(),
            error: None,
            execution_count: None,
        }
    }
}
