//! A tree's digest (a checkpoint's workspace): every entry's path, kind, mode, size and content
//! (a file's SHA-256, a symlink's target), in path order, hashed into one SHA-256. Read through
//! the no-follow walk, so a symlink is hashed as a link and never followed.

use crate::error::{Error, Result};
use crate::fsx::walk::{walk_all, Closed, Visit};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What a tree holds, in sum.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeDigest {
    pub entries: u64,
    pub bytes: u64,
    /// Hex SHA-256 over every entry's record.
    pub sha256: String,
}

/// The digest of the tree at `root`, leaving out the top-level names in `skip_top`.
pub fn tree_digest(root: &Path, skip_top: &[&str]) -> Result<TreeDigest> {
    let mut records: Vec<Vec<u8>> = Vec::new();
    let mut bytes = 0u64;
    let mut failed: Option<Error> = None;
    let complete = walk_all(root, Closed::Fail, |seen| {
        let rel = seen.rel;
        if rel.components().count() == 1 && skip_top.iter().any(|s| rel.as_os_str() == *s) {
            return Visit::Skip;
        }
        let mode = seen.stat.st_mode & 0o7777;
        let content = if seen.is_dir() {
            Ok(("d", Vec::new()))
        } else if seen.is_file() {
            hash_file(seen.open_file()).map(|(h, n)| {
                bytes += n;
                ("f", h)
            })
        } else {
            match seen.read_link() {
                Ok(target) => Ok(("l", target.as_bytes().to_vec())),
                // Not a link either: a device, FIFO or socket, recorded by its kind alone.
                Err(_) => Ok(("o", Vec::new())),
            }
        };
        match content {
            Ok((kind, data)) => {
                let mut r = Vec::new();
                r.extend_from_slice(kind.as_bytes());
                r.push(0);
                r.extend_from_slice(rel.as_os_str().as_bytes());
                r.push(0);
                r.extend_from_slice(format!("{mode:o}\0{}\0", seen.stat.st_size).as_bytes());
                r.extend_from_slice(&data);
                records.push(r);
                Visit::Enter
            }
            Err(e) => {
                failed = Some(Error::Runtime(format!(
                    "reading {} for its digest: {e}",
                    rel.display()
                )));
                Visit::Stop
            }
        }
    })
    .map_err(|e| Error::Runtime(format!("walking {}: {e}", root.display())))?;
    if let Some(e) = failed {
        return Err(e);
    }
    if !complete {
        return Err(Error::Runtime(format!(
            "{} changed while its digest was taken",
            root.display()
        )));
    }
    records.sort();
    let mut h = Sha256::new();
    for r in &records {
        h.update((r.len() as u64).to_be_bytes());
        h.update(r);
    }
    Ok(TreeDigest {
        entries: records.len() as u64,
        bytes,
        sha256: hex::encode(h.finalize()),
    })
}

fn hash_file(fd: nix::Result<std::os::fd::OwnedFd>) -> std::io::Result<(Vec<u8>, u64)> {
    let mut f = std::fs::File::from(fd.map_err(std::io::Error::from)?);
    let mut h = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0u64;
    loop {
        let got = f.read(&mut buf)?;
        if got == 0 {
            break;
        }
        h.update(&buf[..got]);
        n += got as u64;
    }
    Ok((h.finalize().to_vec(), n))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_of_content_mode_name_or_link_changes_the_digest() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::write(root.join("a"), b"one").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/b"), b"two").unwrap();
        std::os::unix::fs::symlink("a", root.join("l")).unwrap();
        std::fs::create_dir(root.join(".deps")).unwrap();
        let first = tree_digest(root, &[".deps"]).unwrap();
        assert_eq!((first.entries, first.bytes), (4, 6));
        std::fs::write(root.join(".deps/x"), b"skipped").unwrap();
        assert_eq!(tree_digest(root, &[".deps"]).unwrap(), first);
        std::fs::write(root.join("sub/b"), b"twO").unwrap();
        let changed = tree_digest(root, &[".deps"]).unwrap();
        assert_ne!(changed, first);
        std::fs::write(root.join("sub/b"), b"two").unwrap();
        assert_eq!(tree_digest(root, &[".deps"]).unwrap(), first);
        std::fs::remove_file(root.join("l")).unwrap();
        std::os::unix::fs::symlink("sub", root.join("l")).unwrap();
        assert_ne!(tree_digest(root, &[".deps"]).unwrap(), first);
    }
}
