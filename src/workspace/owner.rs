//! Who owns a temporary workspace, so that one whose process died without close() (SIGKILL,
//! a Ctrl-C that skips Node's `exit`, a killed test runner) is removed at a later `open()`.
//!
//! Beside `<tmp>/kern-ws-XXXXXX` sits `<tmp>/.kern-ws-XXXXXX.owner` (0600), made first and
//! flock'ed by the owning process for the workspace's life: the kernel drops that lock when the
//! process dies, however it dies, so a sweeper that gets the lock knows the owner is gone, with
//! no pid to be reused. The sweep is driven by owner files only, so a directory without one (a
//! user's `workspace:`, a persist box's, anything else named alike) is never touched; it takes
//! only files and directories of this user, never through a symlink, and only a directory
//! whose owner file is still the one it locked.

use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

const DIR_PREFIX: &str = "kern-ws-";
const OWNER_PREFIX: &str = ".kern-ws-";
const OWNER_SUFFIX: &str = ".owner";

/// The lock on a temporary workspace's owner file, held while the workspace is in use.
#[derive(Debug)]
pub(crate) struct Owner {
    lock: Flock<File>,
    path: PathBuf,
}

impl Owner {
    /// Removes the owner file (the workspace itself is gone); the lock goes with `self`.
    pub(crate) fn release(self) {
        let _ = std::fs::remove_file(&self.path);
        drop(self.lock);
    }
}

/// Makes `<tmp>/kern-ws-XXXXXX` (0700) with its owner file, locked.
pub(crate) fn create(tmp: &Path) -> io::Result<(PathBuf, Owner)> {
    for _ in 0..64 {
        // O_CREAT|O_EXCL, 0600: never an existing file, never through a symlink.
        let file = tempfile::Builder::new()
            .prefix(OWNER_PREFIX)
            .suffix(OWNER_SUFFIX)
            .tempfile_in(tmp)?;
        let (file, path) = file.keep().map_err(|e| e.error)?;
        let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock)
            .map_err(|(_, e)| io::Error::from(e))?;
        let Some(id) = id_of(&path) else {
            let _ = std::fs::remove_file(&path);
            return Err(io::Error::other(
                "tempfile made an unexpected owner file name",
            ));
        };
        let dir = tmp.join(format!("{DIR_PREFIX}{id}"));
        match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                // The umask may take bits away from 0700, never add them: ask for it exactly.
                std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))?;
                return Ok((dir, Owner { lock, path }));
            }
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                let _ = std::fs::remove_file(&path);
            }
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        }
    }
    Err(io::Error::other("no free temporary workspace name"))
}

/// The `XXXXXX` of an owner file's path, when it is one of ours in form.
fn id_of(path: &Path) -> Option<&str> {
    let id = path
        .file_name()?
        .to_str()?
        .strip_prefix(OWNER_PREFIX)?
        .strip_suffix(OWNER_SUFFIX)?;
    (!id.is_empty() && id.len() <= 32 && id.bytes().all(|b| b.is_ascii_alphanumeric()))
        .then_some(id)
}

/// Removes the temporary workspaces in `tmp` whose owner died: those with an owner file of
/// this user that nobody holds locked. Returns the directories removed. Best effort: what
/// can't be removed now (a box of the dead owner still tearing down) is tried again next time.
pub(crate) fn sweep(tmp: &Path) -> Vec<PathBuf> {
    let mut removed = Vec::new();
    let Ok(entries) = std::fs::read_dir(tmp) else {
        return removed;
    };
    // SAFETY: geteuid has no failure mode and touches no memory.
    let me = unsafe { libc::geteuid() };
    for entry in entries.flatten() {
        let path = entry.path();
        let Some(id) = id_of(&path) else {
            continue;
        };
        let dir = tmp.join(format!("{DIR_PREFIX}{id}"));
        if let Some(d) = reap(&path, &dir, me) {
            removed.push(d);
        }
    }
    removed
}

/// One owner file: the directory it owns removed, then the file, when its owner is gone.
fn reap(owner: &Path, dir: &Path, me: u32) -> Option<PathBuf> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(owner)
        .ok()?;
    let meta = file.metadata().ok()?;
    if !meta.file_type().is_file() || meta.uid() != me {
        return None;
    }
    // Held: its owner lives.
    let lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).ok()?;
    // Still the file we locked (another sweeper may have removed it, and a new owner taken
    // the name since): else the directory of that name is not the dead owner's.
    let now = std::fs::symlink_metadata(owner).ok()?;
    if (now.dev(), now.ino()) != (meta.dev(), meta.ino()) {
        return None;
    }
    let gone = match std::fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => None,
        Err(_) => return None,
        Ok(d) if !d.file_type().is_dir() || d.uid() != me => return None,
        Ok(_) => {
            super::make_deletable(dir);
            // std's remove_dir_all never follows a symlink it meets inside.
            std::fs::remove_dir_all(dir).ok()?;
            Some(dir.to_path_buf())
        }
    };
    let _ = std::fs::remove_file(owner);
    drop(lock);
    gone
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_live_owners_workspace_stays_and_a_dead_ones_goes() {
        let tmp = tempfile::tempdir().expect("tmp");
        let (live, owner) = create(tmp.path()).expect("create");
        std::fs::write(live.join("f"), "x").expect("write");
        assert_eq!(sweep(tmp.path()), Vec::<PathBuf>::new());
        assert!(live.join("f").exists());
        // The owner's lock gone (as at its death), its file left behind.
        drop(owner.lock);
        assert_eq!(sweep(tmp.path()), vec![live.clone()]);
        assert!(!live.exists());
        assert_eq!(std::fs::read_dir(tmp.path()).expect("ls").count(), 0);
    }

    #[test]
    fn a_directory_without_an_owner_file_or_behind_a_symlink_is_left_alone() {
        let tmp = tempfile::tempdir().expect("tmp");
        let other = tempfile::tempdir().expect("other");
        std::fs::write(other.path().join("keep"), "x").expect("write");
        // A lookalike workspace with no owner file, and one whose name is a symlink.
        std::fs::create_dir(tmp.path().join("kern-ws-abcdef")).expect("mkdir");
        std::os::unix::fs::symlink(other.path(), tmp.path().join("kern-ws-zzzzzz")).expect("ln");
        std::fs::write(tmp.path().join(".kern-ws-zzzzzz.owner"), "").expect("owner");
        // An owner file that is a symlink to a dead owner's file.
        let (dead, owner) = create(tmp.path()).expect("create");
        let id = id_of(&owner.path).expect("id").to_string();
        drop(owner.lock);
        let link = tmp.path().join(".kern-ws-linked.owner");
        std::os::unix::fs::symlink(tmp.path().join(format!(".kern-ws-{id}.owner")), &link)
            .expect("ln");
        std::fs::create_dir(tmp.path().join("kern-ws-linked")).expect("mkdir");
        let removed = sweep(tmp.path());
        assert_eq!(removed, vec![dead]);
        assert!(tmp.path().join("kern-ws-abcdef").is_dir());
        assert!(tmp.path().join("kern-ws-linked").is_dir());
        assert!(other.path().join("keep").exists());
    }
}
