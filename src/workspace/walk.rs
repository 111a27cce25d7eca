//! A walk of the workspace that never follows a symlink, even one a running box swaps in while
//! we walk: every directory is opened relative to its parent's fd with O_NOFOLLOW, every entry
//! is examined with `fstatat(AT_SYMLINK_NOFOLLOW)`, and changes are made through O_PATH handles.
//! Path-based walks (`read_dir` on a joined path) can be redirected to host files by a box that
//! renames a directory into a symlink between two steps.

use nix::dir::Dir;
use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// What the visitor sees of one entry.
pub struct Seen<'a> {
    /// Workspace-relative path (names need not be UTF-8).
    pub rel: &'a Path,
    pub stat: &'a FileStat,
    parent: &'a OwnedFd,
    name: &'a OsStr,
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
    let mut stack: Vec<(OwnedFd, PathBuf)> = vec![(top, PathBuf::new())];
    let mut seen = 0usize;
    while let Some((dir_fd, rel)) = stack.pop() {
        let names: Vec<OsString> = match dir_fd
            .try_clone()
            .map_err(|_| nix::errno::Errno::EBADF)
            .and_then(Dir::from_fd)
        {
            Ok(mut dir) => dir
                .iter()
                .flatten()
                .map(|e| OsStr::from_bytes(e.file_name().to_bytes()).to_os_string())
                .filter(|n| n != "." && n != "..")
                .collect(),
            Err(_) => continue,
        };
        for name in names {
            seen += 1;
            if seen > max {
                return false;
            }
            let Ok(stat) = fstatat(
                dir_fd.as_fd(),
                name.as_os_str(),
                nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
            ) else {
                continue;
            };
            let path = rel.join(&name);
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
                if let Ok(sub) = openat(dir_fd.as_fd(), name.as_os_str(), flags, Mode::empty()) {
                    stack.push((sub, path));
                }
            }
        }
    }
    true
}

/// Clears the setuid/setgid bits of every regular file under `root`. A box may `chmod u+s` a
/// file it owns, and through the idmapped workspace that file is owned on the host by the
/// workspace's owner (root, when run as root): it must not stay set-id once the box is gone.
/// kern runs this after every box, before it reports, so it covers the CLI and a caller that
/// died mid-call too. A directory we can't open is skipped: nobody else can reach into it either.
pub fn strip_setid(root: &Path) {
    // A single file (a writable file mount) is its own root.
    if let Ok(m) = std::fs::symlink_metadata(root) {
        use std::os::unix::fs::PermissionsExt;
        if m.is_file() {
            let mode = m.permissions().mode();
            if mode & 0o6000 != 0 {
                let _ =
                    std::fs::set_permissions(root, std::fs::Permissions::from_mode(mode & 0o1777));
            }
            return;
        }
    }
    walk(root, usize::MAX, |e| {
        if e.is_file() && e.stat.st_mode & 0o6000 != 0 {
            let _ = e.chmod(e.stat.st_mode & 0o1777);
        }
        true
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn setid_bits_are_stripped_inside_and_symlinks_never_followed() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "x").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o4755)).unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join("dirlink")).unwrap();
        std::os::unix::fs::symlink(&victim, ws.path().join("filelink")).unwrap();
        let planted = ws.path().join("suid");
        std::fs::write(&planted, "x").unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o6755)).unwrap();

        let deps = ws.path().join(".deps");
        std::fs::create_dir(&deps).unwrap();
        let weird = ws.path().join(std::ffi::OsStr::from_bytes(b"bad\xffname"));
        std::fs::create_dir(&weird).unwrap();
        for p in [deps.join("hid"), weird.join("hid")] {
            std::fs::write(&p, "x").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o6755)).unwrap();
        }
        strip_setid(ws.path());
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&planted), 0o755);
        assert_eq!(mode(&victim), 0o4755, "a file behind a symlink was changed");
        assert_eq!(mode(&deps.join("hid")), 0o755);
        assert_eq!(mode(&weird.join("hid")), 0o755);
    }
}
