//! The workspace on the host: creation of a temporary one, and change tracking.

pub mod track;

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// The host directory bound at `/workspace`.
#[derive(Debug)]
pub struct Workspace {
    pub path: PathBuf,
    /// We created it, so `close()` deletes it.
    owned: bool,
}

impl Workspace {
    /// A fresh private (0700) directory under the system temp dir, deleted at close.
    pub fn temporary() -> Result<Workspace> {
        let dir = tempfile::Builder::new()
            .prefix("kern-ws-")
            .tempdir()
            .map_err(|e| Error::Runtime(format!("cannot create a temporary workspace: {e}")))?;
        Ok(Workspace {
            path: dir.keep(),
            owned: true,
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
        match std::fs::symlink_metadata(path) {
            Ok(m) if m.is_dir() => {}
            Ok(m) if m.file_type().is_symlink() && path.is_dir() => {}
            Ok(_) => {
                return crate::invalid!(
                    "workspace {} exists and is not a directory",
                    path.display()
                )
            }
            Err(_) => std::fs::create_dir_all(path).map_err(|e| {
                Error::Invalid(format!(
                    "workspace {} does not exist and cannot be created: {e}",
                    path.display()
                ))
            })?,
        }
        Ok(Workspace {
            path: path.to_path_buf(),
            owned: false,
        })
    }

    /// Deletes the directory if we created it. Idempotent.
    pub fn dispose(&mut self) -> Result<()> {
        if self.owned && self.path.exists() {
            std::fs::remove_dir_all(&self.path).map_err(|e| {
                Error::Runtime(format!(
                    "cannot delete the workspace {}: {e}",
                    self.path.display()
                ))
            })?;
        }
        self.owned = false;
        Ok(())
    }
}
