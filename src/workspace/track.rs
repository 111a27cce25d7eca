//! `result.files`: which regular files a call created or modified, found by walking the
//! workspace before and after the call. O(N) in the number of files each time; `trackFiles:
//! false` skips it.

use super::walk;
use serde::Serialize;
use std::collections::HashMap;
use std::path::Path;

/// The walk stops after this many entries, so a million-file workspace costs a bounded amount
/// per call; a runtime note says when it was reached.
pub const MAX_ENTRIES: usize = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    size: u64,
    mtime_ns: i128,
    ino: u64,
}

#[derive(Debug, Default)]
pub struct Snapshot {
    files: HashMap<String, Stamp>,
    pub capped: bool,
    /// Disk space the regular files use (allocated blocks, as `du` counts: a sparse file costs
    /// what it holds), `.deps` excluded: what `workspaceMaxBytes` is checked against.
    pub bytes: u64,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FileInfo {
    pub path: String,
    pub size: u64,
    pub change: &'static str,
}

/// Never reported: `setup`'s dependency directory.
const EXCLUDED: &str = ".deps";

/// Walks `root` without following symlinks (see `walk`).
pub fn snapshot(root: &Path) -> Snapshot {
    let mut snap = Snapshot::default();
    let complete = walk::walk(root, MAX_ENTRIES, |e| {
        if e.rel == Path::new(EXCLUDED) {
            return false;
        }
        if e.is_file() {
            snap.bytes += e.stat.st_blocks as u64 * 512;
            snap.files.insert(
                e.rel.to_string_lossy().into_owned(),
                Stamp {
                    size: e.stat.st_size as u64,
                    mtime_ns: e.stat.st_mtime as i128 * 1_000_000_000
                        + e.stat.st_mtime_nsec as i128,
                    ino: e.stat.st_ino,
                },
            );
        }
        true
    });
    snap.capped = !complete;
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
    fn created_and_modified_files_are_reported_and_deps_ignored() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("keep.txt"), "a").unwrap();
        std::fs::write(dir.path().join("change.txt"), "a").unwrap();
        std::fs::create_dir(dir.path().join(".deps")).unwrap();
        let before = snapshot(dir.path());
        std::fs::write(dir.path().join("change.txt"), "abc").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/new.txt"), "xy").unwrap();
        std::fs::write(dir.path().join(".deps/lib.py"), "x").unwrap();
        let after = snapshot(dir.path());
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
