//! The control socket between the addon (`launch::Kern`) and `kern box` (`bin/kern/boxed.rs`):
//! one JSON line per message, each a tagged enum.

use super::ProtocolError;
use crate::engine::plan::Inputs;
use crate::engine::shared::handoff::CallTarget;
use crate::engine::shared::spec::{BoxSpec, Limits};
use crate::engine::shared::status::BoxReport;
use serde::{de::DeserializeOwned, Deserialize, Serialize};

/// addon -> kern, line 1: what to prepare before the spec comes (a session keeps such spares
/// started, so the cgroup move, an RCU grace period, is off a call's path). EOF instead of line
/// 2 means "not needed".
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "ask", rename_all = "snake_case", deny_unknown_fields)]
pub enum Ask {
    /// A fresh box with these caps: kern makes its cgroup and moves into it at once, or says
    /// which caps fall back to rlimits (`monitor::prepare`).
    Box { limits: Limits },
    /// A spare for the Sandbox's zygote: the caps, and what the zygote's fork makes the call's
    /// box from; the socket to that fork comes with the line (SCM_RIGHTS).
    Zygote { limits: Limits, inputs: Inputs },
    /// A call into the resident box `target`, whose caps are already in force: kern enters a
    /// per-call cgroup under it (`resident::call::prepare`).
    Call { target: CallTarget },
}

/// addon -> kern after the spec, while the box runs (and, for a `setid_watched` box, after its
/// report). EOF stays the lifeline's "kill the box".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "command", rename_all = "snake_case", deny_unknown_fields)]
pub enum Command {
    /// A signal for the workload's process group (`SandboxProcess.kill`), forwarded by the box's
    /// PID 1 (`init::forward_signals`); one of `handoff::SIGNALS`.
    Signal { signal: i32 },
    /// After the report of a `BoxSpec::setid_watched` box: the caller cleared the set-id bits
    /// of everything the box changed in the workspace, so kern need not sweep it.
    Swept,
}

/// kern -> addon, in this order: the notes kern wrote while preparing (they open the box's
/// stderr), that it took the spec, the workload's start (if it got that far), the report. kern
/// then closes the socket.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "said", rename_all = "snake_case", deny_unknown_fields)]
pub enum Said {
    /// The notes written while preparing (`status::notes`).
    Prepared { notes: Vec<String> },
    /// kern has read the spec and acts on it from here. A kern that dies before this line did
    /// nothing with the call (a spare killed from outside): the caller may run it in another.
    Took,
    /// The workload is about to exec, as this pid of the box (`SandboxProcess.pid`).
    Started { pid: i32 },
    /// How the box ended.
    Report { report: Box<BoxReport> },
}

/// One message as a line: its JSON and `\n`.
fn encode<T: Serialize>(what: &'static str, message: &T) -> Result<Vec<u8>, ProtocolError> {
    let mut line = serde_json::to_vec(message).map_err(|e| ProtocolError::Encode {
        what,
        why: e.to_string(),
    })?;
    line.push(b'\n');
    Ok(line)
}

/// One line (without its `\n`) as the message it must be.
fn decode<T: DeserializeOwned>(what: &'static str, line: &[u8]) -> Result<T, ProtocolError> {
    serde_json::from_slice(line).map_err(|e| ProtocolError::garbled(what, line, e))
}

impl Ask {
    pub fn encode(&self) -> Result<Vec<u8>, ProtocolError> {
        encode("kern's first line", self)
    }

    pub fn decode(line: &[u8]) -> Result<Ask, ProtocolError> {
        decode("kern's first line", line)
    }
}

impl Command {
    pub fn encode(&self) -> Result<Vec<u8>, ProtocolError> {
        encode("a command for kern", self)
    }

    pub fn decode(line: &[u8]) -> Result<Command, ProtocolError> {
        decode("a command for kern", line)
    }
}

impl Said {
    pub fn encode(&self) -> Result<Vec<u8>, ProtocolError> {
        encode("a line from kern", self)
    }

    pub fn decode(line: &[u8]) -> Result<Said, ProtocolError> {
        decode("a line from kern", line)
    }
}

/// addon -> kern, line 2: the box spec (its descriptors ride on the line's first byte).
pub fn encode_spec(spec: &BoxSpec) -> Result<Vec<u8>, ProtocolError> {
    encode("the box spec", spec)
}

/// Line 2 as kern reads it.
pub fn decode_spec(line: &[u8]) -> Result<BoxSpec, ProtocolError> {
    decode("the box spec", line)
}

/// The most unreadable lines a transcript keeps (kern is ours: one is already a bug).
const GARBLED_KEPT: usize = 4;

/// What kern said on the control socket so far, read line by line as its bytes come.
#[derive(Debug, Default)]
pub struct Transcript {
    /// A line not yet complete.
    pending: Vec<u8>,
    lines: usize,
    /// The prepared notes, once kern sent them.
    pub prepared: Option<Vec<String>>,
    /// kern said it took the spec.
    pub took: bool,
    /// The workload's pid in the box, once it started.
    pub started: Option<i32>,
    /// The report: the last one kern sent.
    pub report: Option<BoxReport>,
    /// Lines that are no `Said` (the first few).
    pub garbled: Vec<ProtocolError>,
}

impl Transcript {
    /// Takes the next bytes read from kern; every line they complete is read.
    pub fn hear(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
        while let Some(i) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=i).collect();
            self.take(&line[..i]);
        }
    }

    /// kern closed the socket: a last line without its `\n` is read too.
    pub fn finish(&mut self) {
        let rest = std::mem::take(&mut self.pending);
        self.take(&rest);
    }

    /// Whether a whole line has come (kern's first is its prepared notes).
    pub fn heard_a_line(&self) -> bool {
        self.lines > 0
    }

    fn take(&mut self, line: &[u8]) {
        if line.iter().all(u8::is_ascii_whitespace) {
            return;
        }
        self.lines += 1;
        match Said::decode(line) {
            Ok(Said::Prepared { notes }) => {
                self.prepared.get_or_insert(notes);
            }
            Ok(Said::Took) => self.took = true,
            Ok(Said::Started { pid }) => {
                self.started.get_or_insert(pid);
            }
            Ok(Said::Report { report }) => self.report = Some(*report),
            Err(e) if self.garbled.len() < GARBLED_KEPT => self.garbled.push(e),
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::shared::status::{Fault, FaultKind};
    use crate::engine::shared::sys::ProcId;

    fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(
        m: T,
        enc: fn(&T) -> Result<Vec<u8>, ProtocolError>,
        dec: fn(&[u8]) -> Result<T, ProtocolError>,
    ) {
        let line = enc(&m).unwrap();
        assert_eq!(line.last(), Some(&b'\n'));
        assert_eq!(line.iter().filter(|b| **b == b'\n').count(), 1, "one line");
        assert_eq!(dec(&line[..line.len() - 1]).unwrap(), m);
    }

    #[test]
    fn every_message_round_trips() {
        let limits = Limits {
            memory_bytes: Some(256 << 20),
            pids: Some(64),
            cpus: Some(1.5),
            enforce: true,
            require: false,
        };
        let target = CallTarget {
            name: "r1".into(),
            pid1: ProcId { pid: 42, start: 7 },
        };
        for ask in [
            Ask::Box {
                limits: limits.clone(),
            },
            Ask::Zygote {
                limits,
                inputs: Inputs {
                    tmpfs: vec![crate::engine::shared::spec::TmpfsSpec {
                        target: "/tmp".into(),
                        size_bytes: 64 << 20,
                    }],
                    hostname: "box".into(),
                },
            },
            Ask::Call { target },
        ] {
            round_trip(ask, Ask::encode, Ask::decode);
        }
        for command in [Command::Signal { signal: 15 }, Command::Swept] {
            round_trip(command, Command::encode, Command::decode);
        }
        let report = BoxReport {
            exit_code: 137,
            fault: Some(Fault::new(FaultKind::Timeout, "30 s")),
            signal: Some("SIGKILL".into()),
            notes: vec!["note: x".into()],
            ..Default::default()
        };
        for said in [
            Said::Prepared {
                notes: vec!["warning: a\nb".into()],
            },
            Said::Took,
            Said::Started { pid: 7 },
            Said::Report {
                report: Box::new(report),
            },
        ] {
            round_trip(said, Said::encode, Said::decode);
        }
    }

    #[test]
    fn an_unknown_or_garbled_line_is_an_error_that_quotes_it() {
        for line in [
            &br#"{"ask":"reboot"}"#[..],
            br#"{"ask":"box"}"#,
            br#"{"ask":"call","target":{"name":"r","pid1":{"pid":1,"start":2}},"x":1}"#,
            br#"{"memory_bytes":1,"pids":null,"cpus":null,"enforce":true,"require":false}"#,
            b"",
            b"\xff",
        ] {
            let e = Ask::decode(line).unwrap_err();
            assert!(e.to_string().starts_with("kern's first line: "), "{e}");
        }
        let e = Command::decode(br#"{"signal":15}"#).unwrap_err();
        assert!(e.to_string().contains(r#"{\"signal\":15}"#), "{e}");
        assert!(Said::decode(br#"{"said":"started","pid":"7"}"#).is_err());
    }

    #[test]
    fn a_transcript_reads_lines_as_they_come_and_keeps_what_it_cannot_read() {
        let mut t = Transcript::default();
        t.hear(br#"{"said":"prepared","notes":["note: a"]}"#);
        assert!(!t.heard_a_line());
        t.hear(b"\n{\"said\":\"started\",\"pid\":7}\nnonsense\n\n");
        assert!(t.heard_a_line());
        assert_eq!(t.prepared.as_deref(), Some(&["note: a".to_string()][..]));
        assert_eq!(t.started, Some(7));
        assert_eq!(t.garbled.len(), 1);
        assert!(t.report.is_none());
        t.hear(br#"{"said":"report","report":{"exit_code":3,"fault":null}}"#);
        assert!(t.report.is_none());
        t.finish();
        assert_eq!(t.report.map(|r| r.exit_code), Some(3));
    }
}
