//! The workspace on the host: creation of a temporary one, and change tracking.

pub mod archive;
pub mod files;
mod owner;
pub mod setid;
pub mod track;

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The host directory bound at `/workspace`.
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
        // `is_dir` follows a symlink: a caller's symlink to a directory is their workspace.
        if !path.is_dir() {
            if std::fs::symlink_metadata(path).is_ok() {
                return crate::invalid!(
                    "workspace {} exists and is not a directory",
                    path.display()
                );
            }
            std::fs::create_dir_all(path).map_err(|e| {
                Error::Invalid(format!(
                    "workspace {} does not exist and cannot be created: {e}",
                    path.display()
                ))
            })?;
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
