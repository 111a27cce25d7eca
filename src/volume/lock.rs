//! Who has a volume: flocks on two files in its directory, held by the process that mounts
//! it (a Sandbox's host program, `kern run`) for as long as it may. The kernel drops them when
//! that process ends, however it ends.
//!
//! - `use.lock`: shared by every user; `remove` takes it exclusively, so it never removes a
//!   volume a box has mounted, and holds it until the volume is deleted; `create` holds a new
//!   volume's until it is in place, so a long copy is never taken for one a dead process left.
//!   `in_use`'s probe holds it exclusively for an instant, which users wait out.
//! - `write.lock`: exclusive for the one writer, shared among writers that all said `shared`.
//!   Never waited for: a conflict is the caller's to resolve.

use crate::error::Error;
use nix::errno::Errno;
use nix::fcntl::{Flock, FlockArg};
use std::fs::File;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

const USE: &str = "use.lock";
const WRITE: &str = "write.lock";

/// How a Sandbox mounts a volume.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read-only in the box; any number at once, beside a writer (they see its writes live).
    ReadOnly,
    /// Read-write, the only writer.
    Exclusive,
    /// Read-write beside other writers that said `shared` too (they coordinate themselves).
    Shared,
}

impl Access {
    pub fn writable(self) -> bool {
        self != Access::ReadOnly
    }
}

/// A volume held for a Sandbox: dropped, the volume is free again.
#[derive(Debug)]
pub struct Held {
    _use: Flock<File>,
    _write: Option<Flock<File>>,
}

#[derive(Debug)]
pub(super) enum LockError {
    Missing,
    /// `remove` found it mounted.
    InUse,
    /// A writer that excludes this one holds it.
    WriterBusy(Access),
    /// A Sandbox writes it: it can't be copied now.
    BeingWritten,
    /// `remove` has it.
    BeingRemoved,
    Io(String),
}

impl LockError {
    pub(super) fn into_error(self, name: &str) -> Error {
        let msg = match self {
            LockError::Missing => format!("there is no volume named {name:?}"),
            LockError::InUse => format!("the volume {name:?} is mounted by a Sandbox (or `kern run`) now; close it first, then remove the volume"),
            LockError::WriterBusy(Access::Shared) => format!("the volume {name:?} is mounted read-write by another Sandbox as its only writer; mount it read-only ({{ path, readonly: true }}), or close that Sandbox, or have every writer say {{ path, shared: true }}"),
            LockError::WriterBusy(_) => format!("the volume {name:?} is mounted read-write by another Sandbox; a volume has one writer at a time: mount it read-only ({{ path, readonly: true }}), close the other Sandbox, or have every writer say {{ path, shared: true }} to write it together"),
            LockError::BeingRemoved => format!("the volume {name:?} is being removed; make it again (Volume.create) to use the name"),
            LockError::BeingWritten => format!("the volume {name:?} is mounted read-write by a Sandbox, so a copy of it would be of no one moment; close the Sandboxes that write it (readers may stay), then copy it"),
            LockError::Io(why) => format!("the volume {name:?}: {why}"),
        };
        Error::Invalid(msg)
    }
}

/// The lock files of a new volume (before it is renamed into place).
pub(super) fn make_files(dir: &Path) -> crate::error::Result<()> {
    for f in [USE, WRITE] {
        open(dir, f, true).map_err(|e| {
            Error::Invalid(format!("volumes: making {}: {e:?}", dir.join(f).display()))
        })?;
    }
    Ok(())
}

fn open(dir: &Path, file: &str, create: bool) -> Result<File, LockError> {
    let mut o = std::fs::OpenOptions::new();
    o.read(true)
        .write(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    if create {
        o.create_new(true);
    }
    o.open(dir.join(file)).map_err(|e| match e.kind() {
        std::io::ErrorKind::NotFound => LockError::Missing,
        _ => LockError::Io(format!("{}: {e}", dir.join(file).display())),
    })
}

fn flock(mut f: File, how: FlockArg) -> Result<Flock<File>, Errno> {
    loop {
        match Flock::lock(f, how) {
            Ok(l) => return Ok(l),
            Err((back, Errno::EINTR)) => f = back,
            Err((_, e)) => return Err(e),
        }
    }
}

/// Holds the volume in `dir` as `access` says.
pub(super) fn take(dir: &Path, access: Access) -> Result<Held, LockError> {
    let using = exclusive_or_shared(dir, FlockArg::LockSharedNonblock).map_err(|e| match e {
        LockError::InUse => LockError::BeingRemoved,
        other => other,
    })?;
    let write = match access {
        Access::ReadOnly => None,
        Access::Exclusive | Access::Shared => {
            let how = if access == Access::Exclusive {
                FlockArg::LockExclusiveNonblock
            } else {
                FlockArg::LockSharedNonblock
            };
            Some(flock(open(dir, WRITE, false)?, how).map_err(|e| match e {
                Errno::EWOULDBLOCK => LockError::WriterBusy(access),
                e => LockError::Io(format!("locking {WRITE}: {e}")),
            })?)
        }
    };
    Ok(Held {
        _use: using,
        _write: write,
    })
}

/// `use.lock` of `dir` taken as `how` says (non-blocking), tried a few times: `in_use`'s probe
/// holds it exclusively for an instant. Still held by another: `InUse`.
fn exclusive_or_shared(dir: &Path, how: FlockArg) -> Result<Flock<File>, LockError> {
    for _ in 0..10 {
        match flock(open(dir, USE, false)?, how) {
            Ok(l) => return Ok(l),
            Err(Errno::EWOULDBLOCK) => std::thread::sleep(std::time::Duration::from_millis(20)),
            Err(e) => return Err(LockError::Io(format!("locking {USE}: {e}"))),
        }
    }
    Err(LockError::InUse)
}

/// The lock `remove` holds while it renames the volume away and deletes it, and `create` while
/// it makes one (copies included): held, the volume is nobody else's, and `sweep_left` leaves
/// its directory be however old it is.
pub(super) fn for_removal(dir: &Path) -> Result<Flock<File>, LockError> {
    exclusive_or_shared(dir, FlockArg::LockExclusiveNonblock)
}

/// What `create(.., from)` holds of the volume it copies: its use (so it isn't removed) and its
/// write lock exclusively (so nobody writes it while it is read: the copy is of one moment).
pub(super) fn for_copy(dir: &Path) -> Result<Held, LockError> {
    let held = take(dir, Access::ReadOnly)?;
    let write =
        flock(open(dir, WRITE, false)?, FlockArg::LockExclusiveNonblock).map_err(|e| match e {
            Errno::EWOULDBLOCK => LockError::BeingWritten,
            e => LockError::Io(format!("locking {WRITE}: {e}")),
        })?;
    Ok(Held {
        _use: held._use,
        _write: Some(write),
    })
}

/// Whether some process holds the volume now (a probe: a lock it can't take is held; a lock
/// file it can't open, no volume to hold).
pub(super) fn in_use(dir: &Path) -> bool {
    match open(dir, USE, false) {
        Ok(f) => flock(f, FlockArg::LockExclusiveNonblock).is_err(),
        Err(_) => false,
    }
}
