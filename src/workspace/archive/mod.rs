//! Snapshots of the workspace as a gzip tar (`snapshot`) and restoring such an archive into a
//! workspace (`restore`).
//!
//! Both sides face hostile input. A box may have planted symlinks, FIFOs, hardlinks or huge sparse
//! files in the workspace, and may swap a directory for a symlink while we work; an archive may
//! name paths outside the workspace or carry links and devices. So no path is ever resolved
//! through something a box could have planted: directories are opened one component at a time
//! relative to their parent's fd with `O_NOFOLLOW|O_DIRECTORY`, and files are read, written and
//! changed through their own fds. The tar crate only lays out and parses headers.
//!
//! Here: the limits, the reports and what both sides share. `snapshot` walks and writes,
//! `members` reads an archive's members, `restore` validates them all (the first pass), `place`
//! writes them (the second).

use std::os::fd::OwnedFd;
use std::path::Path;

use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;

use crate::error::{Error, Result};

mod members;
mod place;
mod restore;
#[cfg(test)]
mod restore_tests;
mod snapshot;
#[cfg(test)]
mod tests;

pub use restore::restore;
pub use snapshot::snapshot;

/// Bounds on what one snapshot or restore may contain. Every bound is checked before the data
/// it guards is read or written, so a hostile workspace or archive costs at most this much.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Entries (files, directories, and for a snapshot also the skipped symlinks and the like).
    /// Default 1,000,000.
    pub max_entries: u64,
    /// Sum of all file sizes. Default 64 GiB.
    pub max_total_bytes: u64,
    /// Size of any one file. Default 16 GiB.
    pub max_file_bytes: u64,
    /// Path components below the workspace root (`a/b.txt` is 2). Default 256.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_entries: 1_000_000,
            max_total_bytes: 64 << 30,
            max_file_bytes: 16 << 30,
            max_depth: 256,
        }
    }
}

/// What a snapshot archived.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotReport {
    /// Regular files archived (hardlinked ones once per name).
    pub files: u64,
    /// Directories archived.
    pub dirs: u64,
    /// Content bytes archived.
    pub bytes: u64,
    /// Workspace-relative paths left out: symlinks, FIFOs, sockets, devices, and names that are
    /// not UTF-8 (shown lossily; a directory so named is left out with everything in it). In
    /// walk order.
    pub skipped: Vec<String>,
}

/// What a restore wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Regular-file members written.
    pub files: u64,
    /// Directory members created or merged into (parents the archive only implies not counted).
    pub dirs: u64,
    /// Content bytes written.
    pub bytes: u64,
}

/// The dependency directory `setup` installs: never archived, never restored.
const DEPS: &str = ".deps";
/// Linux's NAME_MAX and PATH_MAX: a longer member name could not be created anyway.
const MAX_COMPONENT: usize = 255;
const MAX_PATH: usize = 4096;
/// Bytes the tar parser may read between one member's data and the next member's header: GNU
/// long names and PAX records, which it buffers whole. Ample for a 4096-byte path; a larger run
/// of extension headers is refused before it can fill memory.
const HEADER_ROOM: u64 = 64 * 1024;
const COPY_BUF: usize = 128 * 1024;
/// mtimes past 9999-12-31 are clamped: larger values overflow some filesystems' timestamps.
const MAX_MTIME: u64 = 253_402_300_799;
/// Attempts at replacing a path a racing box keeps changing.
const RACE_TRIES: u32 = 8;
const TEMP_PREFIX: &str = ".kern-restore-";

/// The caller's workspace root: trusted, so an ordinary (following) open. The error reads
/// "cannot open the workspace ROOT {why}: ERRNO{hint}".
fn open_workspace(root: &Path, why: &str, hint: &str) -> Result<OwnedFd> {
    open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        Error::Invalid(format!(
            "cannot open the workspace {} {why}: {e}{hint}",
            root.display()
        ))
    })
}

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}/{name}")
    }
}
