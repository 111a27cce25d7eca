//! What crosses from one side of a box to the other, in one place: from the caller to `kern`
//! (`Caller`: the lifeline, the descriptors a spec announces as `BoxFds`, where the report goes;
//! `CallTarget`, the resident box a call is for), and across the clone between the monitor and the
//! box's init (the "go" message with the idmapped trees, the rlimit `Fallback`, and where init's
//! messages go: `send`, with their format in `protocol::pid1`). Both sides of each boundary read their format from here, so
//! they can't drift apart.

use crate::engine::boxside::mounts::Trees;
use crate::engine::shared::protocol::pid1::Pid1Msg;
use crate::engine::shared::protocol::Command;
use crate::engine::shared::spec::BoxSpec;
use crate::engine::shared::status::BoxReport;
use crate::engine::shared::sys::{self, ProcId};
use serde::{Deserialize, Serialize};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};

/// What the caller said on its lifeline since the last look: the commands of every complete
/// line in it (`pending` keeps a partial one). None: it hung up (EOF or an error), which is
/// "kill the box". A line that is no `Command` is skipped, and the first such said as a warning:
/// the addon sends only commands.
#[doc(hidden)]
pub fn read_commands(lifeline: BorrowedFd<'_>, pending: &mut Vec<u8>) -> Option<Vec<Command>> {
    let mut buf = [0u8; 1024];
    match nix::unistd::read(lifeline, &mut buf) {
        Ok(0) | Err(_) => return None,
        Ok(n) => pending.extend_from_slice(&buf[..n]),
    }
    let mut out = Vec::new();
    while let Some(i) = pending.iter().position(|b| *b == b'\n') {
        let line: Vec<u8> = pending.drain(..=i).collect();
        match Command::decode(&line[..i]) {
            Ok(c) => out.push(c),
            Err(e) if !GARBLED_SAID.swap(true, Ordering::Relaxed) => {
                crate::engine::shared::status::note("warning", &format!("{e}; ignored"))
            }
            Err(_) => {}
        }
    }
    Some(out)
}

/// After the report of a `BoxSpec::setid_watched` box: whether the caller says, within `bound`,
/// that it cleared the set-id bits of what the box changed (`Command::Swept`). False when it
/// hung up first, or was silent that long: kern then sweeps the workspace itself.
#[doc(hidden)]
pub fn wait_swept(lifeline: BorrowedFd<'_>, bound: std::time::Duration) -> bool {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    let until = std::time::Instant::now() + bound;
    let mut pending = Vec::new();
    loop {
        let left = until.saturating_duration_since(std::time::Instant::now());
        let ms = u16::try_from(left.as_millis()).unwrap_or(u16::MAX);
        if ms == 0 {
            return false;
        }
        let mut fds = [PollFd::new(lifeline, PollFlags::POLLIN)];
        match poll(&mut fds, PollTimeout::from(ms)) {
            Ok(0) => continue,
            Ok(_) => {}
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return false,
        }
        match read_commands(lifeline, &mut pending) {
            None => return false,
            Some(commands) if commands.contains(&Command::Swept) => return true,
            Some(_) => {}
        }
    }
}

/// Whether a line that is no command was said already (once per kern is enough, and the notes
/// are kept for the report).
static GARBLED_SAID: AtomicBool = AtomicBool::new(false);

/// The workload's pid in the box, once init's messages (`Pid1Msg::Workload`) say it.
#[doc(hidden)]
pub fn started_pid(messages: &[u8]) -> Option<i32> {
    Pid1Msg::decode_all(messages)
        .into_iter()
        .find_map(|m| match m {
            Ok(Pid1Msg::Workload(pid)) => Some(pid),
            _ => None,
        })
}

/// The signals a caller may send a workload by name, and their numbers. SIGKILL ends the whole
/// box instead (PID 1 can't forward what it can't catch); SIGSTOP is not here: the monitor's
/// deadline and kill would still run, but nothing could resume a stopped box's PID 1.
pub const SIGNALS: &[(&str, i32)] = &[
    ("SIGHUP", libc::SIGHUP),
    ("SIGINT", libc::SIGINT),
    ("SIGQUIT", libc::SIGQUIT),
    ("SIGABRT", libc::SIGABRT),
    ("SIGKILL", libc::SIGKILL),
    ("SIGUSR1", libc::SIGUSR1),
    ("SIGUSR2", libc::SIGUSR2),
    ("SIGALRM", libc::SIGALRM),
    ("SIGTERM", libc::SIGTERM),
    ("SIGCONT", libc::SIGCONT),
    ("SIGTSTP", libc::SIGTSTP),
    ("SIGWINCH", libc::SIGWINCH),
];

/// The number of a signal named in `SIGNALS` (`"SIGTERM"`, or `"TERM"`).
pub fn signal_number(name: &str) -> Option<i32> {
    let full = if name.starts_with("SIG") {
        name.to_string()
    } else {
        format!("SIG{name}")
    };
    SIGNALS.iter().find(|(n, _)| *n == full).map(|(_, v)| *v)
}

/// Writes one message on the init pipe (one line, short enough to be an atomic write).
pub(in crate::engine) fn send(pipe: &OwnedFd, message: &Pid1Msg) {
    let _ = nix::unistd::write(pipe, message.encode().as_bytes());
}

/// rlimits the workload gets when a cap is not enforced by a cgroup. A resident box's state
/// file keeps them (`resident::State::rlimits`), so each call's workload gets the box's.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct Fallback {
    pub data_bytes: Option<u64>,
    pub nproc: Option<u64>,
}

/// The caller's descriptors for one box, as its spec announces them; they travel to kern with
/// the spec (SCM_RIGHTS), in this order. One shape at both ends: the addon sends borrowed ones
/// (`BoxFds<&OwnedFd>`, `launch::Kern::run`), kern receives and owns them (`BoxFds`), and the
/// box's init takes them over across the clone.
#[derive(Debug, Clone, Copy)]
pub struct BoxFds<F = OwnedFd> {
    /// Becomes the workload's fd 3 (`spec.channel`).
    pub channel: Option<F>,
    /// The egress relay's line to the caller's proxy (`spec.egress`).
    pub egress: Option<F>,
    /// The read end of the workload's stdin (`spec.stdin`).
    pub stdin: Option<F>,
    /// Where the workload's terminal master goes (`spec.tty`).
    pub tty: Option<F>,
    /// The connector's line to the caller (`spec.connector`).
    pub connect: Option<F>,
}

impl<F> Default for BoxFds<F> {
    fn default() -> Self {
        BoxFds {
            channel: None,
            egress: None,
            stdin: None,
            tty: None,
            connect: None,
        }
    }
}

impl<F: AsFd> BoxFds<F> {
    /// The descriptors in the order they travel.
    pub fn raw(&self) -> Vec<RawFd> {
        [
            &self.channel,
            &self.egress,
            &self.stdin,
            &self.tty,
            &self.connect,
        ]
        .into_iter()
        .flatten()
        .map(|f| f.as_fd().as_raw_fd())
        .collect()
    }
}

impl BoxFds {
    /// The descriptors that came with `spec`, in the order they travel (`raw`).
    pub fn received(spec: &BoxSpec, fds: Vec<OwnedFd>) -> BoxFds {
        let mut fds = fds.into_iter();
        let channel = if spec.channel { fds.next() } else { None };
        let egress = if spec.egress.is_some() {
            fds.next()
        } else {
            None
        };
        let stdin = if spec.stdin { fds.next() } else { None };
        let tty = if spec.tty.is_some() { fds.next() } else { None };
        let connect = if spec.connector { fds.next() } else { None };
        BoxFds {
            channel,
            egress,
            stdin,
            tty,
            connect,
        }
    }

    /// Whether the descriptors are the ones `spec` announces.
    pub fn match_spec(&self, spec: &BoxSpec) -> bool {
        spec.channel == self.channel.is_some()
            && spec.egress.is_some() == self.egress.is_some()
            && spec.stdin == self.stdin.is_some()
            && spec.tty.is_some() == self.tty.is_some()
            && spec.connector == self.connect.is_some()
    }
}

/// Who a call is for (line 1 of a call's protocol, `protocol::Ask::Call`): the resident box's
/// name and its PID 1 as the caller last saw it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct CallTarget {
    pub name: String,
    pub pid1: ProcId,
}

/// How a box's report reaches its caller (taken by whoever sends it).
pub(in crate::engine) type Reporter<'a> = Option<&'a mut dyn FnMut(&BoxReport)>;

/// What the caller hands kern with one box (`monitor::run_box`) or one call into a resident box
/// (`resident::call::run_call`).
pub struct Caller<'a> {
    /// A socket whose other end the caller holds: if it closes early (the caller died), the box
    /// (or the call) is killed.
    pub lifeline: Option<BorrowedFd<'a>>,
    /// The descriptors the spec announces.
    pub fds: BoxFds,
    /// Gets the outcome as soon as the box has ended, before the slower cgroup teardown.
    pub on_report: &'a mut dyn FnMut(&BoxReport),
    /// Told the workload's pid in the box once it is about to exec (`Pid1Msg::Workload`).
    pub on_started: Option<&'a mut dyn FnMut(i32)>,
}

/// Which of `Trees` follow the "go" byte.
const GO_WORKSPACE: u8 = 1;
const GO_IMAGE: u8 = 2;

/// The monitor's "go" to the box's init, once the id maps are written: `g`, which trees follow,
/// how many binds, and the trees themselves (SCM_RIGHTS).
pub(in crate::engine) fn send_go(go: &OwnedFd, trees: &Trees) -> std::io::Result<()> {
    let mut flags = 0u8;
    let mut fds = Vec::new();
    if let Some(w) = &trees.workspace {
        flags |= GO_WORKSPACE;
        fds.push(w.as_raw_fd());
    }
    if let Some(i) = &trees.image {
        flags |= GO_IMAGE;
        fds.push(i.as_raw_fd());
    }
    fds.extend(trees.binds.iter().map(|b| b.as_raw_fd()));
    sys::send_with_fds(go.as_fd(), &[b'g', flags, trees.binds.len() as u8], &fds).map(drop)
}

/// The box's init reads `send_go`'s message. None: the monitor is gone, or the message is not
/// what it sent.
pub(in crate::engine) fn receive_go(go: &OwnedFd) -> Option<Trees> {
    let mut buf = [0u8; 3];
    let (n, fds) = sys::recv_with_fds(go.as_raw_fd(), &mut buf).ok()?;
    if n != 3 {
        return None;
    }
    let flags = buf[1];
    let binds = buf[2] as usize;
    let mut fds = fds.into_iter();
    let workspace = if flags & GO_WORKSPACE != 0 {
        Some(fds.next()?)
    } else {
        None
    };
    let image = if flags & GO_IMAGE != 0 {
        Some(fds.next()?)
    } else {
        None
    };
    let trees: Vec<OwnedFd> = fds.collect();
    if trees.len() != binds {
        return None;
    }
    Some(Trees {
        workspace,
        image,
        binds: trees,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signals_are_named_with_or_without_sig_and_nothing_else() {
        assert_eq!(signal_number("SIGTERM"), Some(libc::SIGTERM));
        assert_eq!(signal_number("INT"), Some(libc::SIGINT));
        assert_eq!(signal_number("SIGKILL"), Some(libc::SIGKILL));
        for bad in ["SIGFOO", "sigterm", "15", "", "SIGSTOP", "SIG"] {
            assert_eq!(signal_number(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn commands_are_read_by_whole_lines_and_eof_is_the_caller_gone() {
        use std::io::Write;
        let (mut caller, kern) = std::os::unix::net::UnixStream::pair().unwrap();
        let mut pending = Vec::new();
        let first = Command::Signal { signal: 15 }.encode().unwrap();
        let second = Command::Signal { signal: 2 }.encode().unwrap();
        let (head, tail) = second.split_at(5);
        caller.write_all(&[&first[..], head].concat()).unwrap();
        let got = read_commands(kern.as_fd(), &mut pending).unwrap();
        assert_eq!(got, vec![Command::Signal { signal: 15 }]);
        // The half line waits for its end; a line that is no command is skipped.
        caller
            .write_all(&[tail, b"{\"signal\":9}\n"].concat())
            .unwrap();
        let got = read_commands(kern.as_fd(), &mut pending).unwrap();
        assert_eq!(got, vec![Command::Signal { signal: 2 }]);
        assert!(pending.is_empty());
        drop(caller);
        assert!(read_commands(kern.as_fd(), &mut pending).is_none());
    }

    #[test]
    fn swept_is_heard_among_other_lines_and_eof_or_silence_is_not_swept() {
        use std::io::Write;
        let short = std::time::Duration::from_millis(200);
        let (mut caller, kern) = std::os::unix::net::UnixStream::pair().unwrap();
        let signal = Command::Signal { signal: 15 }.encode().unwrap();
        let swept = Command::Swept.encode().unwrap();
        caller
            .write_all(&[&signal[..], &swept[..]].concat())
            .unwrap();
        assert!(wait_swept(kern.as_fd(), short));
        // Silence, then a hang-up: kern sweeps.
        assert!(!wait_swept(kern.as_fd(), short));
        caller.write_all(&signal).unwrap();
        drop(caller);
        assert!(!wait_swept(kern.as_fd(), short));
    }

    #[test]
    fn the_workloads_pid_is_read_from_inits_messages() {
        assert_eq!(started_pid(b"B ptrace\nW 7\nX 0\n"), Some(7));
        assert_eq!(started_pid(b"S setup failed\n"), None);
        assert_eq!(started_pid(b"W notanumber\n"), None);
    }
}
