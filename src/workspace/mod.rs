//! The workspace on the host: creation of a temporary one, and change tracking.

pub mod archive;
pub mod copy;
pub mod digest;
pub mod events;
pub mod files;
mod owner;
pub mod setid;
pub mod track;
pub mod watch;

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The host directory bound at `/workspace` (or where `workspaceMount` says).
#[derive(Debug)]
pub struct Workspace {
    pub path: PathBuf,
    /// We created it, so `close()` deletes it.
    owned: bool,
    /// A temporary one's owner lock (`owner`): held until it is deleted.
    owner: Option<owner::Owner>,
}

impl Workspace {
    /// A fresh private (0700) directory under the system temp dir, deleted at close. First,
    /// the temporary workspaces of this user's processes that died before their close() are
    /// removed (`owner`).
    pub fn temporary() -> Result<Workspace> {
        let tmp = std::env::temp_dir();
        owner::sweep(&tmp);
        let (path, owner) = owner::create(&tmp)
            .map_err(|e| Error::Runtime(format!("cannot create a temporary workspace: {e}")))?;
        Ok(Workspace {
            path,
            owned: true,
            owner: Some(owner),
        })
    }

    /// The caller's directory, created if missing, kept at close.
    pub fn existing(path: &Path) -> Result<Workspace> {
        if !path.is_absolute() {
            return crate::invalid!(
                "workspace {:?} is relative; pass an absolute path (e.g. path.resolve(dir))",
                path
            );
        }
        if let Found::Missing = look_at(path)? {
            std::fs::create_dir_all(path).map_err(|e| {
                Error::Invalid(format!(
                    "workspace {} does not exist and cannot be created: {e}",
                    path.display()
                ))
            })?;
            // What is there now (a racing process may have put something else).
            if let Found::Missing = look_at(path)? {
                return crate::invalid!("workspace {} vanished as it was created", path.display());
            }
        }
        Ok(Workspace {
            path: path.to_path_buf(),
            owned: false,
            owner: None,
        })
    }

    /// Deletes the directory if we created it. Idempotent.
    pub fn dispose(&mut self) -> Result<()> {
        if self.owned && self.path.exists() {
            // The box may have left directories it closed (chmod 0500); as the owner we may
            // reopen them, and must, or an unprivileged caller can't delete the tree.
            make_deletable(&self.path);
            std::fs::remove_dir_all(&self.path).map_err(|e| {
                Error::Runtime(format!(
                    "cannot delete the workspace {}: {e}",
                    self.path.display()
                ))
            })?;
        }
        self.owned = false;
        if let Some(o) = self.owner.take() {
            o.release();
        }
        Ok(())
    }
}

/// What `look_at` found at a workspace path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// A directory (not a symlink to one).
    Dir,
    /// Nothing: `open()` creates it.
    Missing,
}

/// The one check of a workspace path (`open()`'s `workspace`, `kern run --workspace`, `kern
/// doctor --workspace`): a real directory, looked at without following a symlink, or nothing
/// yet. Anything else (a symlink, even to a directory, a file, a FIFO, a socket, a device) is a
/// `SandboxError` saying what it is: the box's workspace is bound from this very path.
pub fn look_at(path: &Path) -> Result<Found> {
    use std::os::unix::fs::FileTypeExt;
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Found::Missing),
        Err(e) => return crate::invalid!("workspace {}: cannot look at it: {e}", path.display()),
    };
    let t = meta.file_type();
    if t.is_dir() {
        return Ok(Found::Dir);
    }
    if t.is_symlink() {
        let to = std::fs::read_link(path)
            .map(|p| format!(" (to {})", p.display()))
            .unwrap_or_default();
        return crate::invalid!(
            "workspace {} is a symlink{to}, and a workspace must be a directory itself; pass the directory it names (no symlink is followed)",
            path.display()
        );
    }
    let what = if t.is_fifo() {
        "a FIFO"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "a file"
    };
    crate::invalid!(
        "workspace {} is {what}, not a directory; pass a directory (or a path that does not exist yet, which is created)",
        path.display()
    )
}

/// Gives the owner rwx on every directory under `root`, so that `remove_dir_all` can empty
/// them. Only an owner bound by modes needs it (a root with CAP_DAC_OVERRIDE deletes regardless;
/// a container's root under `--cap-drop ALL` has none: its close() failed with EACCES on a
/// directory a box left mode 000), and it goes through `walk`, which never follows a symlink a
/// box may have planted.
pub(crate) fn make_deletable(root: &Path) {
    if overrides_modes() {
        return;
    }
    crate::fsx::walk::walk(root, usize::MAX, |e| {
        if e.is_dir() && e.stat.st_mode & 0o700 != 0o700 {
            let _ = e.chmod((e.stat.st_mode & 0o7777) | 0o700);
        }
        true
    });
}

/// Whether this process passes permission checks on modes: CAP_DAC_OVERRIDE (capability 1) in
/// its effective set, read from /proc/self/status. Unreadable, it is taken not to.
fn overrides_modes() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("CapEff:").map(|v| v.trim().to_string()))
        })
        .and_then(|v| u64::from_str_radix(&v, 16).ok())
        .is_some_and(|eff| eff & (1 << 1) != 0)
}

#[cfg(test)]
mod look_tests {
    use super::{look_at, Found};

    #[test]
    fn only_a_real_directory_or_nothing_passes() {
        let dir = tempfile::tempdir().unwrap();
        let p = |n: &str| dir.path().join(n);
        std::fs::create_dir(p("real")).unwrap();
        std::fs::write(p("file"), "x").unwrap();
        std::os::unix::fs::symlink(p("real"), p("to-dir")).unwrap();
        std::os::unix::fs::symlink("/etc/shadow", p("to-shadow")).unwrap();
        nix::unistd::mkfifo(&p("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
        let _sock = std::os::unix::net::UnixListener::bind(p("sock")).unwrap();
        assert_eq!(look_at(&p("real")).unwrap(), Found::Dir);
        assert_eq!(look_at(&p("none")).unwrap(), Found::Missing);
        for (name, what) in [
            ("file", "is a file"),
            ("to-dir", "is a symlink"),
            ("to-shadow", "is a symlink (to /etc/shadow)"),
            ("fifo", "is a FIFO"),
            ("sock", "is a socket"),
        ] {
            let e = look_at(&p(name)).unwrap_err().to_string();
            assert!(e.contains(what), "{name}: {e}");
        }
        let e = look_at(std::path::Path::new("/dev/null"))
            .unwrap_err()
            .to_string();
        assert!(e.contains("is a character device"), "{e}");
    }
}
