//! `result.files`: which regular files a call created or modified, found by walking the
//! workspace before and after the call. O(N) in the number of files each time; `trackFiles:
//! false` skips it. A Sandbox whose workspace is watched (`watch`) walks only where its
//! watches can't serve.

use crate::fsx::walk;
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

/// `result.files` covers this many files at most, so a million-file workspace costs a bounded
/// amount per call; a runtime note says when it was reached.
pub const MAX_ENTRIES: usize = 100_000;

/// What says a file changed: its size, modification time and inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    pub(crate) size: u64,
    mtime_ns: i128,
    ino: u64,
}

impl Stamp {
    pub(crate) fn of(st: &nix::sys::stat::FileStat) -> Stamp {
        Stamp {
            size: st.st_size as u64,
            mtime_ns: st.st_mtime as i128 * 1_000_000_000 + st.st_mtime_nsec as i128,
            ino: st.st_ino,
        }
    }
}

/// What each entry costs against `workspaceMaxBytes` at the least: one 4 KiB block, what a
/// filesystem spends on an inode. Empty files, symlinks and directories full of nothing would
/// otherwise cost nothing, and a box could make millions of them.
pub const MIN_ENTRY_BYTES: u64 = 4096;

#[derive(Debug, Default)]
pub struct Snapshot {
    files: HashMap<String, Stamp>,
    /// `result.files` covers only the first `MAX_ENTRIES` entries.
    pub capped: bool,
    /// What counts against `workspaceMaxBytes`, `.deps` excluded: each entry's allocated blocks
    /// (as `du` counts: a sparse file costs what it holds), at least `MIN_ENTRY_BYTES`. With a
    /// quota the walk is complete, or stops once past it.
    pub bytes: u64,
    /// The walk could not see every entry (a directory it could not read): the quota check then
    /// fails closed with this reason.
    pub unmeasured: Option<String>,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FileInfo {
    pub path: String,
    pub size: u64,
    pub change: &'static str,
}

/// A call's workspace as it was before the call: a walk's snapshot, or a mark in the watched
/// workspace (`watch`).
pub enum Before {
    Walked(Snapshot),
    Watched(super::watch::Mark),
}

/// Never reported: `setup`'s dependency directory.
pub(crate) const EXCLUDED: &str = ".deps";

impl Snapshot {
    /// A walk that did not happen (its task failed): nothing measured, so a quota fails closed.
    pub fn unmeasured(why: String) -> Snapshot {
        Snapshot {
            capped: true,
            unmeasured: Some(why),
            ..Default::default()
        }
    }
}

/// What one entry counts against a cap (the workspace's, a volume's): its allocated blocks, as
/// `du` counts (a sparse file costs what it holds), at least `MIN_ENTRY_BYTES`.
pub fn entry_bytes(st: &nix::sys::stat::FileStat) -> u64 {
    (st.st_blocks as u64 * 512).max(MIN_ENTRY_BYTES)
}

/// Walks `root` without following symlinks (see `walk`). Without a `quota` it stops after
/// `MAX_ENTRIES` (only `result.files` needs it); with one it counts every entry, and stops only
/// once the count is past the quota (which is then known to be exceeded).
pub fn snapshot(root: &Path, quota: Option<u64>) -> Snapshot {
    let mut snap = Snapshot::default();
    // The quota counts a closed directory too: one it can't open fails the check closed.
    let closed = if quota.is_some() {
        walk::Closed::Fail
    } else {
        walk::Closed::PassOver
    };
    let walked = walk::walk_all(root, closed, |e| {
        if e.rel == Path::new(EXCLUDED) {
            return walk::Visit::Skip;
        }
        snap.bytes = snap.bytes.saturating_add(entry_bytes(e.stat));
        if e.is_file() {
            if snap.files.len() < MAX_ENTRIES {
                snap.files
                    .insert(e.rel.to_string_lossy().into_owned(), Stamp::of(e.stat));
            } else {
                snap.capped = true;
            }
        }
        match quota {
            Some(q) if snap.bytes > q => walk::Visit::Stop,
            None if snap.capped => walk::Visit::Stop,
            _ => walk::Visit::Enter,
        }
    });
    if let Err(e) = walked {
        snap.capped = true;
        snap.unmeasured = Some(e.to_string());
    }
    snap
}

/// Files in `after` that are new or changed since `before`, sorted by path.
pub fn diff(before: &Snapshot, after: &Snapshot) -> Vec<FileInfo> {
    let mut out: Vec<FileInfo> = after
        .files
        .iter()
        .filter_map(|(path, st)| {
            let change = match before.files.get(path) {
                None => "created",
                Some(old) if old != st => "modified",
                Some(_) => return None,
            };
            Some(FileInfo {
                path: path.clone(),
                size: st.size,
                change,
            })
        })
        .collect();
    out.sort_by(|a, b| a.path.cmp(&b.path));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_quota_walk_counts_every_entry_past_the_tracking_cap() {
        // More entries than result.files tracks, all empty: each still costs a block, and a
        // file past them is counted too (the old walk stopped at MAX_ENTRIES and counted only
        // file blocks, so this tree measured 0 bytes).
        let dir = tempfile::tempdir().unwrap();
        let many = dir.path().join("a");
        std::fs::create_dir(&many).unwrap();
        for i in 0..MAX_ENTRIES + 10 {
            std::fs::File::create(many.join(i.to_string())).unwrap();
        }
        let untracked = snapshot(dir.path(), None);
        assert!(untracked.capped);
        let cap = 1 << 40;
        let counted = snapshot(dir.path(), Some(cap));
        assert!(counted.unmeasured.is_none());
        assert!(counted.bytes >= (MAX_ENTRIES as u64 + 11) * MIN_ENTRY_BYTES);
        // Past a small quota the walk stops early: it is over, which is all the check needs.
        let small = snapshot(dir.path(), Some(1 << 20));
        assert!(small.bytes > 1 << 20);
    }

    #[test]
    fn a_closed_directory_fails_the_quota_walk_for_its_owner() {
        if nix::unistd::geteuid().is_root() {
            return; // root opens any directory
        }
        let dir = tempfile::tempdir().unwrap();
        let closed = dir.path().join("closed");
        std::fs::create_dir(&closed).unwrap();
        std::fs::write(closed.join("big"), vec![1u8; 1 << 20]).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o000)).unwrap();
        let snap = snapshot(dir.path(), Some(1 << 30));
        std::fs::set_permissions(&closed, std::fs::Permissions::from_mode(0o700)).unwrap();
        assert!(snap.unmeasured.is_some(), "{snap:?}");
    }

    #[test]
    fn created_and_modified_files_are_reported_and_deps_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep.txt"), "a").unwrap();
        std::fs::write(dir.path().join("change.txt"), "a").unwrap();
        std::fs::create_dir(dir.path().join(".deps")).unwrap();
        let before = snapshot(dir.path(), None);
        std::fs::write(dir.path().join("change.txt"), "abc").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/new.txt"), "xy").unwrap();
        std::fs::write(dir.path().join(".deps/lib.py"), "x").unwrap();
        let after = snapshot(dir.path(), None);
        let changes = diff(&before, &after);
        assert_eq!(
            changes,
            vec![
                FileInfo {
                    path: "change.txt".into(),
                    size: 3,
                    change: "modified"
                },
                FileInfo {
                    path: "sub/new.txt".into(),
                    size: 2,
                    change: "created"
                },
            ]
        );
    }
}
