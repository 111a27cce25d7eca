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

use nix::errno::Errno;
use nix::fcntl::{renameat2, Flock, FlockArg, RenameFlags, AT_FDCWD};
use std::fs::File;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

const DIR_PREFIX: &str = "kern-ws-";
const OWNER_PREFIX: &str = ".kern-ws-";
const OWNER_SUFFIX: &str = ".owner";
/// An owner file while it is being made (`create`), before it is locked.
const NEW_SUFFIX: &str = ".owner.new";
/// A `NEW_SUFFIX` file this old, and unlocked, was left by a process that died while making
/// it: the sweep removes it.
const NEW_LEFT_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

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
///
/// The owner file is made and locked under a name the sweep does not read (`…owner.new`), then
/// renamed into place without replacing anything: an `.owner` file is never seen unlocked while
/// its owner lives. (Made under its own name, another process's sweep could lock it in the
/// moment before its owner did, take it for a dead owner's and remove it, leaving this
/// workspace with no owner file for any later sweep, and failing this lock.)
pub(crate) fn create(tmp: &Path) -> io::Result<(PathBuf, Owner)> {
    for _ in 0..64 {
        // O_CREAT|O_EXCL, 0600: never an existing file, never through a symlink.
        let file = tempfile::Builder::new()
            .prefix(OWNER_PREFIX)
            .suffix(NEW_SUFFIX)
            .tempfile_in(tmp)?;
        let (file, new) = file.keep().map_err(|e| e.error)?;
        let lock = match Flock::lock(file, FlockArg::LockExclusiveNonblock) {
            Ok(lock) => lock,
            Err((_, e)) => {
                let _ = std::fs::remove_file(&new);
                return Err(io::Error::from(e));
            }
        };
        let Some(id) = new_id_of(&new) else {
            let _ = std::fs::remove_file(&new);
            return Err(io::Error::other(
                "tempfile made an unexpected owner file name",
            ));
        };
        let path = tmp.join(format!("{OWNER_PREFIX}{id}{OWNER_SUFFIX}"));
        let dir = tmp.join(format!("{DIR_PREFIX}{id}"));
        match renameat2(
            AT_FDCWD,
            &new,
            AT_FDCWD,
            &path,
            RenameFlags::RENAME_NOREPLACE,
        ) {
            Ok(()) => {}
            // A stale owner file of that name (or a filesystem without RENAME_NOREPLACE, where
            // the next name fails alike): another name.
            Err(Errno::EEXIST) => {
                let _ = std::fs::remove_file(&new);
                continue;
            }
            Err(e) => {
                let _ = std::fs::remove_file(&new);
                return Err(io::Error::from(e));
            }
        }
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
    id_with(path, OWNER_SUFFIX)
}

/// The `XXXXXX` of an owner file being made (`NEW_SUFFIX`).
fn new_id_of(path: &Path) -> Option<&str> {
    id_with(path, NEW_SUFFIX)
}

fn id_with<'a>(path: &'a Path, suffix: &str) -> Option<&'a str> {
    let id = path
        .file_name()?
        .to_str()?
        .strip_prefix(OWNER_PREFIX)?
        .strip_suffix(suffix)?;
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
        if new_id_of(&path).is_some() {
            drop_abandoned(&path, me);
            continue;
        }
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

/// An owner file its maker died before renaming (`create`): unlocked and old, it is removed.
/// A young one may be between its creation and its lock, so it is left for a later sweep.
fn drop_abandoned(new: &Path, me: u32) {
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(new)
    else {
        return;
    };
    let Ok(meta) = file.metadata() else {
        return;
    };
    let old = meta
        .modified()
        .ok()
        .and_then(|m| m.elapsed().ok())
        .is_some_and(|age| age >= NEW_LEFT_AFTER);
    if !meta.file_type().is_file() || meta.uid() != me || !old {
        return;
    }
    if let Ok(lock) = Flock::lock(file, FlockArg::LockExclusiveNonblock) {
        let _ = std::fs::remove_file(new);
        drop(lock);
    }
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

    #[test]
    fn a_sweep_racing_with_creation_never_takes_a_live_owners_workspace() {
        // Two makers and a sweeper in one directory, as two processes opening Sandboxes at once
        // are: every workspace made keeps its owner file until its owner lets it go.
        let tmp = tempfile::tempdir().expect("tmp");
        let stop = std::sync::atomic::AtomicBool::new(false);
        let (made, swept) = std::thread::scope(|s| {
            let sweeper = s.spawn(|| {
                let mut swept = Vec::new();
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    swept.extend(sweep(tmp.path()));
                }
                swept
            });
            let makers: Vec<_> = (0..2)
                .map(|_| {
                    s.spawn(|| -> Result<(), String> {
                        for _ in 0..400 {
                            let (dir, owner) = create(tmp.path()).map_err(|e| e.to_string())?;
                            if !owner.path.is_file() || !dir.is_dir() {
                                return Err(format!("{} lost its owner file", dir.display()));
                            }
                            std::fs::remove_dir(&dir).map_err(|e| e.to_string())?;
                            owner.release();
                        }
                        Ok(())
                    })
                })
                .collect();
            let made: Vec<_> = makers.into_iter().map(|m| m.join()).collect();
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            (made, sweeper.join())
        });
        for m in made {
            assert_eq!(m.expect("maker"), Ok(()));
        }
        assert_eq!(swept.expect("sweeper"), Vec::<PathBuf>::new());
        assert_eq!(std::fs::read_dir(tmp.path()).expect("ls").count(), 0);
    }

    #[test]
    fn an_owner_file_left_half_made_is_removed_once_old_and_unlocked() {
        let tmp = tempfile::tempdir().expect("tmp");
        let young = tmp.path().join(".kern-ws-young1.owner.new");
        let old = tmp.path().join(".kern-ws-old111.owner.new");
        std::fs::write(&young, "").expect("young");
        std::fs::write(&old, "").expect("old");
        let long_ago = std::time::SystemTime::now() - NEW_LEFT_AFTER * 2;
        std::fs::File::options()
            .write(true)
            .open(&old)
            .and_then(|f| f.set_modified(long_ago))
            .expect("age it");
        sweep(tmp.path());
        assert!(young.exists(), "a young one may be mid-creation");
        assert!(!old.exists());
    }
}
