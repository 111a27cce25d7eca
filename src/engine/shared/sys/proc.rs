//! A process named so it can't be mistaken for another: a pid plus its start time, and the
//! pidfd that proves the process is still the one meant. Resident boxes record their PID 1 and
//! monitor this way (a pid on its own is recycled).

use serde::{Deserialize, Serialize};
use std::os::fd::OwnedFd;

/// A process as a pid plus its start time (clock ticks since boot, `/proc/<pid>/stat` field 22):
/// unlike a pid alone, never shared by two processes.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProcId {
    pub pid: i32,
    pub start: u64,
}

impl ProcId {
    /// The process `pid` is now.
    pub fn of(pid: i32) -> std::io::Result<ProcId> {
        Ok(ProcId {
            pid,
            start: start_time(pid)?,
        })
    }

    /// A pidfd on this very process, or None when it is gone (its pid free or reused).
    pub fn pidfd(&self) -> Option<OwnedFd> {
        if self.pid <= 0 {
            return None;
        }
        let fd = super::pidfd_open(self.pid).ok()?;
        // Checked after the pidfd is held: if the start time still matches, the pidfd is on
        // the process we mean (a pid is only reused after its process was reaped).
        (start_time(self.pid).ok()? == self.start).then_some(fd)
    }

    pub fn alive(&self) -> bool {
        self.pidfd().is_some()
    }
}

/// Field 22 of /proc/<pid>/stat, read after the command name (which may hold spaces and ')').
fn start_time(pid: i32) -> std::io::Result<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
    parse_start_time(&stat)
        .ok_or_else(|| std::io::Error::other(format!("/proc/{pid}/stat: unexpected format")))
}

fn parse_start_time(stat: &str) -> Option<u64> {
    let after = &stat[stat.rfind(')')? + 1..];
    // Field 3 (state) is the first after the name; the start time is field 22.
    after.split_whitespace().nth(22 - 3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn start_time_skips_odd_command_names() {
        let stat = "42 (a) b) c) S 1 42 42 0 -1 4194560 1 0 0 0 0 0 0 0 20 0 1 0 987654 1 2";
        assert_eq!(parse_start_time(stat), Some(987654));
        let me = std::process::id() as i32;
        assert!(ProcId::of(me).unwrap().alive());
    }
}
