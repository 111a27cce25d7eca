//! A workspace copied into another (`Sandbox.fork`): directories, regular files and symlinks
//! (as links, never followed), read through the no-follow walk, so a box that swaps a symlink in
//! while the copy runs can't make it read a host file. Files are reflinked where the filesystem
//! shares extents (btrfs, xfs; `FICLONE`), else copied in the kernel (`copy_file_range`, which
//! `std::io::copy` uses between two files). Set-id bits are never copied; devices, FIFOs and
//! sockets are left out and counted. Written by hand: `reflink-copy` is not in our Cargo.lock,
//! and the clone must be of the walk's own descriptor, which path-based crates don't take.

use crate::error::{Error, Result};
use crate::fsx::walk::{walk_all, Closed, Visit};
use std::fs;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// What a copy did.
#[derive(Debug, Default, Clone)]
pub struct CopyReport {
    pub files: u64,
    pub bytes: u64,
    /// Files whose extents are shared with the source (no data copied).
    pub reflinked: u64,
    /// Workspace-relative paths of what was left out (devices, FIFOs, sockets).
    pub skipped: Vec<String>,
}

/// Copies the tree `src` into the directory `dst` (which exists), leaving out the top-level
/// names in `skip_top`; what is made is owned by `owner` when given (as root: the destination
/// workspace's owner).
pub fn copy_tree(
    src: &Path,
    dst: &Path,
    skip_top: &[&str],
    owner: Option<(u32, u32)>,
) -> Result<CopyReport> {
    let mut report = CopyReport::default();
    let mut failed: Option<Error> = None;
    // Directory modes are set once their contents are in (a read-only one would refuse them).
    let mut dir_modes: Vec<(PathBuf, u32)> = Vec::new();
    let fail = |what: &str, rel: &Path, e: &dyn std::fmt::Display| {
        Error::Runtime(format!("copying: {what} {}: {e}", rel.display()))
    };
    let complete = walk_all(src, Closed::Fail, |seen| {
        let rel = seen.rel;
        if rel.components().count() == 1 && skip_top.iter().any(|s| rel.as_os_str() == *s) {
            return Visit::Skip;
        }
        let to = dst.join(rel);
        let mode = seen.stat.st_mode & 0o1777;
        let step = if seen.is_dir() {
            let made = fs::DirBuilder::new().mode(0o700).create(&to);
            dir_modes.push((to.clone(), mode));
            made.map_err(|e| fail("make the directory", rel, &e))
        } else if seen.is_file() {
            copy_file(seen.open_file(), &to, mode, &mut report)
                .map_err(|e| fail("copy the file", rel, &e))
        } else if nix::sys::stat::SFlag::from_bits_truncate(seen.stat.st_mode)
            & nix::sys::stat::SFlag::S_IFMT
            == nix::sys::stat::SFlag::S_IFLNK
        {
            seen.read_link()
                .map_err(std::io::Error::from)
                .and_then(|target| std::os::unix::fs::symlink(target, &to))
                .map_err(|e| fail("copy the symlink", rel, &e))
        } else {
            report.skipped.push(rel.display().to_string());
            Ok(())
        };
        let step = step.and_then(|()| match owner {
            Some((uid, gid)) => std::os::unix::fs::lchown(&to, Some(uid), Some(gid))
                .map_err(|e| fail("give", rel, &e)),
            None => Ok(()),
        });
        match step {
            Ok(()) => Visit::Enter,
            Err(e) => {
                failed = Some(e);
                Visit::Stop
            }
        }
    })
    .map_err(|e| Error::Runtime(format!("fork: the workspace could not be read whole: {e}")))?;
    if let Some(e) = failed {
        return Err(e);
    }
    if !complete {
        return Err(Error::Runtime(
            "fork: the workspace copy stopped early".into(),
        ));
    }
    // Deepest first, so a read-only parent is closed after its children.
    for (dir, mode) in dir_modes.iter().rev() {
        fs::set_permissions(dir, fs::Permissions::from_mode(*mode))
            .map_err(|e| Error::Runtime(format!("fork: set the mode of {}: {e}", dir.display())))?;
    }
    Ok(report)
}

fn copy_file(
    from: nix::Result<OwnedFd>,
    to: &Path,
    mode: u32,
    report: &mut CopyReport,
) -> std::io::Result<()> {
    let from = fs::File::from(from.map_err(std::io::Error::from)?);
    let mut out = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW)
        .mode(0o600)
        .open(to)?;
    // SAFETY: FICLONE takes the source fd as its argument; both fds are open for the call.
    let cloned = unsafe { libc::ioctl(out.as_raw_fd(), libc::FICLONE, from.as_raw_fd()) } == 0;
    let bytes = if cloned {
        report.reflinked += 1;
        from.metadata()?.len()
    } else {
        std::io::copy(&mut &from, &mut out)?
    };
    out.set_permissions(fs::Permissions::from_mode(mode & 0o777))?;
    report.files += 1;
    report.bytes += bytes;
    Ok(())
}
