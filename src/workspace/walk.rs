//! A walk of the workspace that never follows a symlink, even one a running box swaps in while
//! we walk: every directory is opened relative to its parent's fd with O_NOFOLLOW, every entry
//! is examined with `fstatat(AT_SYMLINK_NOFOLLOW)`, and changes are made through O_PATH handles.
//! Path-based walks (`read_dir` on a joined path) can be redirected to host files by a box that
//! renames a directory into a symlink between two steps.

use nix::dir::Dir;
use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::Path;

/// Never reported or touched: `setup`'s dependency directory.
pub const EXCLUDED: &str = ".deps";

/// What the visitor sees of one entry.
pub struct Seen<'a> {
    /// Workspace-relative path.
    pub rel: &'a str,
    pub stat: &'a FileStat,
    parent: &'a OwnedFd,
    name: &'a str,
}

impl Seen<'_> {
    pub fn is_dir(&self) -> bool {
        SFlag::from_bits_truncate(self.stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
    }

    pub fn is_file(&self) -> bool {
        SFlag::from_bits_truncate(self.stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG
    }

    /// Sets the permission bits of this very entry (never a symlink's target): it is opened
    /// O_PATH|O_NOFOLLOW, checked to be the inode we saw, and changed through its fd.
    pub fn chmod(&self, mode: u32) -> nix::Result<()> {
        let fd = openat(
            self.parent.as_fd(),
            self.name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let now = fstat(&fd)?;
        if now.st_ino != self.stat.st_ino || now.st_dev != self.stat.st_dev {
            return Err(nix::errno::Errno::ESTALE);
        }
        // An O_PATH fd can't be fchmod'ed; its /proc magic link names the inode itself.
        nix::sys::stat::fchmodat(
            nix::fcntl::AT_FDCWD,
            format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str(),
            Mode::from_bits_truncate(mode),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        )
    }
}

/// Walks `root` depth-first, calling `visit` for every entry (directories before their
/// contents; a directory is entered only if `visit` returns true for it). Stops after `max`
/// entries and returns false then.
pub fn walk(root: &Path, max: usize, mut visit: impl FnMut(&Seen<'_>) -> bool) -> bool {
    let Ok(top) = open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) else {
        return true;
    };
    let mut stack: Vec<(OwnedFd, String)> = vec![(top, String::new())];
    let mut seen = 0usize;
    while let Some((dir_fd, rel)) = stack.pop() {
        let names: Vec<String> = match dir_fd
            .try_clone()
            .map_err(|_| nix::errno::Errno::EBADF)
            .and_then(Dir::from_fd)
        {
            Ok(mut dir) => dir
                .iter()
                .flatten()
                .filter_map(|e| e.file_name().to_str().ok().map(str::to_string))
                .filter(|n| n != "." && n != "..")
                .collect(),
            Err(_) => continue,
        };
        for name in names {
            if rel.is_empty() && name == EXCLUDED {
                continue;
            }
            seen += 1;
            if seen > max {
                return false;
            }
            let Ok(stat) = fstatat(
                dir_fd.as_fd(),
                name.as_str(),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            ) else {
                continue;
            };
            let path = if rel.is_empty() {
                name.clone()
            } else {
                format!("{rel}/{name}")
            };
            let entry = Seen {
                rel: &path,
                stat: &stat,
                parent: &dir_fd,
                name: &name,
            };
            let enter = visit(&entry) && entry.is_dir();
            if enter {
                let flags =
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                if let Ok(sub) = openat(dir_fd.as_fd(), name.as_str(), flags, Mode::empty()) {
                    stack.push((sub, path));
                }
            }
        }
    }
    true
}
