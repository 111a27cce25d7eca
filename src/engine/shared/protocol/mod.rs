//! Every message between the addon and `kern`, and between a box's PID 1 and its monitor, as
//! types: one encoder and one decoder each, so the two sides of a boundary can't drift apart, and
//! a line one side cannot read is a [`ProtocolError`] that says so, never a silent skip.
//!
//! On kern's control socket (`launch::Kern` <-> `bin/kern/boxed.rs`), one JSON line each:
//! - addon -> kern, line 1: an [`Ask`], what to prepare (a fresh box's caps, a zygote spare, a
//!   call into a resident box); line 2: the `BoxSpec` ([`decode_spec`]); then [`Command`]s;
//! - kern -> addon: [`Said`] lines, the prepared notes, the workload's start, the report
//!   ([`Transcript`] reads them as they come).
//!
//! On the init pipe (and a zygote call's socket): [`pid1::Pid1Msg`], one short text line each,
//! written by init in Rust and by the zygote in Python (`lang/zygote.py`, `_kern_pid1_msg`).
//!
//! On a fork server's call socket: [`fork::FromFork`] and [`fork::ToFork`] (the plans, `go`).
//!
//! The wire is not versioned: the addon refuses a `kern` of another version
//! (`launch::check_version`), and nothing here is persisted.

mod control;
pub mod fork;
pub mod pid1;

pub use control::{decode_spec, encode_spec, Ask, Command, Said, Transcript};

/// A message that could not be written or read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProtocolError {
    /// A line that is not the message its reader expects (unknown, garbled, or cut short).
    #[error("{what}: a line kern-sandbox cannot read ({why}): {excerpt:?}")]
    Garbled {
        what: &'static str,
        why: String,
        /// The line's first bytes, for the message.
        excerpt: String,
    },
    /// A message that could not be written (serde_json refused it).
    #[error("write {what}: {why}")]
    Encode { what: &'static str, why: String },
}

/// How much of a garbled line an error quotes.
const EXCERPT: usize = 120;

impl ProtocolError {
    pub(crate) fn garbled(what: &'static str, line: &[u8], why: impl ToString) -> Self {
        let text = String::from_utf8_lossy(&line[..line.len().min(EXCERPT)]).into_owned();
        ProtocolError::Garbled {
            what,
            why: why.to_string(),
            excerpt: text,
        }
    }
}

/// Runs `script` with zygote.py's source on its stdin (the file itself refuses to run outside
/// a zygote, so a test takes what it checks out of it with `ast`); its stdout.
#[cfg(test)]
fn on_zygote_py(script: &str) -> Vec<u8> {
    use std::io::Write;
    let mut python = std::process::Command::new("python3")
        .args(["-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3, which the zygote needs, runs here");
    python
        .stdin
        .take()
        .expect("stdin")
        .write_all(include_str!("../../../lang/zygote.py").as_bytes())
        .expect("write");
    let out = python.wait_with_output().expect("python3");
    assert!(out.status.success(), "{:?}", out.status);
    out.stdout
}
