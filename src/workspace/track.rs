//! `result.files`: which regular files a call created or modified, found by walking the
//! workspace before and after the call. O(N) in the number of files each time; `trackFiles:
//! false` skips it.

use serde::Serialize;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

/// The walk stops after this many entries, so a million-file workspace costs a bounded amount
/// per call; a runtime note says when it was reached.
pub const MAX_ENTRIES: usize = 100_000;
/// Never reported: `setup`'s dependency directory.
const EXCLUDED: &str = ".deps";

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
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FileInfo {
    pub path: String,
    pub size: u64,
    pub change: &'static str,
}

/// Walks `root` without following symlinks.
pub fn snapshot(root: &Path) -> Snapshot {
    let mut snap = Snapshot::default();
    let mut stack = vec![(root.to_path_buf(), String::new())];
    let mut seen = 0usize;
    while let Some((dir, rel)) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in rd.flatten() {
            seen += 1;
            if seen > MAX_ENTRIES {
                snap.capped = true;
                return snap;
            }
            let Some(name) = e.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if rel.is_empty() && name == EXCLUDED {
                continue;
            }
            let Ok(m) = e.metadata() else { continue };
            let path = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            if m.is_dir() {
                stack.push((e.path(), path));
            } else if m.is_file() {
                let mtime_ns = m.mtime() as i128 * 1_000_000_000 + m.mtime_nsec() as i128;
                snap.files.insert(
                    path,
                    Stamp {
                        size: m.size(),
                        mtime_ns,
                        ino: m.ino(),
                    },
                );
            }
        }
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
