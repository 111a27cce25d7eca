//! Restore, and its first pass: every member validated (name, type, sparse map, limits, what it
//! would replace) before anything is written; `place` then writes them.

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::fd::OwnedFd;
use std::path::Path;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::openat;
use nix::sys::stat::Mode;

use super::members::{each_member, read_map, shown};
use super::place::{extract, Cursor, Names};
use super::{dir_flags, open_workspace, Limits, RestoreReport};
use crate::error::{Error, Result};

/// Unpacks the gzip tar `src` into the workspace `root`, merging with what is there.
///
/// Two passes. The first reads the whole archive and writes nothing: every member must have a
/// relative UTF-8 path without `..` or NUL (after GNU long-name and PAX `path` processing, and
/// after dropping `.` components; at most 255 bytes a component and 4096 in all), must be a regular
/// file, a PAX 1.0 sparse file (with a map that is in order, within its size and accounts for every
/// stored byte) or a directory (symlinks, hardlinks, devices, FIFOs, other sparse forms and
/// anything else are refused by name), must not be under the top-level `.deps`, must not repeat a
/// path or use a file's path as a directory, and must fit `limits` (entries, stored sizes per file
/// and in all, depth). The first pass also refuses a file member where the workspace has a
/// non-empty directory. If anything is refused, the error (`Error::Invalid`) names the member and
/// the workspace is untouched.
///
/// The second pass reads the archive again, checks each member is the one the first pass
/// validated, and writes it. Directories are created (mode from the archive, always
/// owner-rwx, set-id and sticky bits dropped; 0755 for parents the archive only implies) or
/// merged into when a real directory is there; whatever else is in a directory's way (a file, a
/// symlink, a FIFO) is removed, never followed. A file is written to a fresh temp name in its
/// directory (`O_CREAT|O_EXCL|O_NOFOLLOW`) and renamed over its final name, which replaces a
/// symlink or FIFO there rather than writing through it; an empty directory there is removed
/// first. Modes (permission bits only), mtimes and, when `owner` is given, uid/gid are set
/// through the fds of what was written (owner only on what restore creates). Every directory is
/// opened relative to its parent's fd with `O_NOFOLLOW|O_DIRECTORY` starting from `root`, so
/// nothing is written outside `root` even while a box races to plant symlinks.
///
/// Not atomic: if the workspace or the archive changes between the passes (a running box, a
/// rewritten archive), the second pass can still stop part-way (a directory filled meanwhile
/// where a file goes, a member that differs from the validated one), as can an I/O error (a
/// full disk, a workspace directory the caller may not write to); members before that point
/// stay written, and the error says so. Entries in the workspace that the archive does not
/// mention are left alone.
pub fn restore(
    root: &Path,
    src: &Path,
    limits: &Limits,
    owner: Option<(u32, u32)>,
) -> Result<RestoreReport> {
    let top = open_workspace(
        root,
        "to restore into it",
        "; it must be an existing directory",
    )?;
    let file = File::open(src)
        .map_err(|e| Error::Invalid(format!("cannot open the archive {}: {e}", src.display())))?;
    let plan = validate(&top, &file, src, limits)?;
    (&file)
        .seek(SeekFrom::Start(0))
        .map_err(|e| Error::Runtime(format!("cannot rewind the archive {}: {e}", src.display())))?;
    extract(&top, &file, src, limits, &plan, owner)
}

/// The first pass: everything `restore` documents, without writing. Returns the fingerprints
/// of the members in order.
pub(super) fn validate(
    top: &OwnedFd,
    file: &File,
    src: &Path,
    limits: &Limits,
) -> Result<Vec<[u8; 32]>> {
    let refuse = |what: &str, why: &str| {
        Error::Invalid(format!(
            "restore of {} refused: {what} {why}; nothing was written to the workspace",
            src.display()
        ))
    };
    let mut names = Names::default();
    let mut look = Cursor::new(top);
    let mut total = 0u64;
    let mut plan = Vec::new();
    each_member(file, limits, &refuse, |m, data| {
        let what = format!("member {}", shown(&m.path));
        if let Some(real) = m.sparse {
            read_map(data, m, real).map_err(|why| refuse(&what, &why))?;
        }
        total = total.saturating_add(m.size);
        if total > limits.max_total_bytes {
            return Err(refuse(
                &what,
                &format!(
                    "brings the declared sizes past the limit of {} bytes in all \
                     (max_total_bytes)",
                    limits.max_total_bytes
                ),
            ));
        }
        names
            .add(&m.path, m.dir)
            .map_err(|why| refuse(&what, &why))?;
        if !m.dir {
            let (dirs, name) = m.parent_and_name();
            // A non-directory in the way of a parent is replaced, so only a complete chain of
            // real directories can lead to a conflict.
            if let Some(parent) = look.find(&dirs)? {
                if non_empty_dir(parent, name, &m.path)? {
                    return Err(refuse(
                        &what,
                        "is a file, but the workspace has a non-empty directory there; remove \
                         that directory first, or restore into another workspace",
                    ));
                }
            }
        }
        plan.push(m.fingerprint());
        Ok(())
    })?;
    Ok(plan)
}

/// Whether `name` in `parent` is a directory with entries (never following a symlink).
fn non_empty_dir(parent: &OwnedFd, name: &str, rel: &str) -> Result<bool> {
    let cannot = |e: Errno| Error::Runtime(format!("cannot examine {rel:?} in the workspace: {e}"));
    let fd = match openat(parent, name, dir_flags(), Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => return Ok(false),
        Err(e) => return Err(cannot(e)),
    };
    let mut dir = Dir::from_fd(fd).map_err(cannot)?;
    for ent in dir.iter() {
        let ent = ent.map_err(cannot)?;
        let n = ent.file_name().to_bytes();
        if n != b"." && n != b".." {
            return Ok(true);
        }
    }
    Ok(false)
}
