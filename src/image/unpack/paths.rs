//! The plumbing under the entry loop: the budgeted stream, resolving parents beneath the root,
//! removing trees, entry names, and the error constructors.

use std::ffi::OsStr;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode};
use nix::unistd::{unlinkat, UnlinkatFlags};

use super::{UnpackError, MAX_REMOVE_DEPTH, META_POOL};
use crate::fsx::{self, Cap, Capped};

/// The layer stream, limited (by [`Cap`]) to the content of the entries seen so far plus some
/// room for headers: the tar crate buffers GNU long names and PAX records whole, and this keeps
/// a single huge one from exhausting memory before any size check of ours runs.
pub(super) type Budgeted<'a> = Capped<&'a mut dyn Read>;

pub(super) fn stream_error(budget: &Cap, after: &str, e: io::Error) -> UnpackError {
    if budget.over() {
        UnpackError::TooLarge {
            entry: after.to_string(),
            what: "metadata between entries (long names, PAX headers)",
            limit: META_POOL,
        }
    } else {
        UnpackError::Archive {
            after: after.to_string(),
            source: e,
        }
    }
}

pub(super) const ESCAPES: &str = "goes through a symlink that leaves the image root";

/// Resolves `path` beneath the root ([`fsx::Resolve::Beneath`]): a symlink is followed only while
/// it stays inside, no magic links. The errno view, for the many match arms here; a kernel
/// without `openat2` is `ENOSYS` (see [`resolve_error`]).
pub(super) fn open_beneath(root: &OwnedFd, path: &[u8], flags: OFlag) -> nix::Result<OwnedFd> {
    fsx::open_beneath(root, OsStr::from_bytes(path), flags, fsx::Resolve::Beneath)
        .map_err(fsx::OpenError::errno)
}

pub(super) fn resolve_error(shown: &str, e: Errno) -> UnpackError {
    match e {
        Errno::EXDEV => hostile(shown, ESCAPES),
        Errno::ELOOP => hostile(shown, "goes through a symlink loop or a magic link"),
        Errno::ENOTDIR => io(shown, "a parent of it is not a directory", e.into()),
        Errno::ENOSYS => io(shown, &fsx::OpenError::NeedsOpenat2.to_string(), e.into()),
        _ => io(shown, "resolving its parent", e.into()),
    }
}

pub(super) enum Removal {
    TooDeep,
    Sys(Errno),
}

/// Removes `name` in `dir`, recursively if it is a directory, never following a symlink (only
/// single-component, `O_NOFOLLOW` lookups). Gone already is fine.
pub(super) fn remove_tree<D: AsFd>(dir: &D, name: &[u8], level: usize) -> Result<(), Removal> {
    let st = match lstat(dir, name) {
        Ok(Some(st)) => st,
        Ok(None) => return Ok(()),
        Err(e) => return Err(Removal::Sys(errno_of(&e))),
    };
    if !is_dir_stat(&st) {
        return match unlinkat(dir, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(Removal::Sys(e)),
        };
    }
    if level >= MAX_REMOVE_DEPTH {
        return Err(Removal::TooDeep);
    }
    let mut sub = Dir::openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(Removal::Sys)?;
    for child in list(&mut sub).map_err(Removal::Sys)? {
        remove_tree(&sub, &child, level + 1)?;
    }
    drop(sub);
    match unlinkat(dir, name, UnlinkatFlags::RemoveDir) {
        Ok(()) | Err(Errno::ENOENT) => Ok(()),
        Err(e) => Err(Removal::Sys(e)),
    }
}

/// The names in a directory, "." and ".." left out; read whole before anything is removed.
pub(super) fn list(dir: &mut Dir) -> nix::Result<Vec<Vec<u8>>> {
    let mut names = Vec::new();
    for ent in dir.iter() {
        let name = ent?.file_name().to_bytes().to_vec();
        if name != b"." && name != b".." {
            names.push(name);
        }
    }
    Ok(names)
}

/// `fstatat(AT_SYMLINK_NOFOLLOW)`; a missing name is `None`.
pub(super) fn lstat<D: AsFd>(dir: &D, name: &[u8]) -> io::Result<Option<FileStat>> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Whether two directory fds name the same directory.
pub(super) fn same_dir(a: &OwnedFd, b: &OwnedFd) -> bool {
    match (fstat(a), fstat(b)) {
        (Ok(x), Ok(y)) => x.st_dev == y.st_dev && x.st_ino == y.st_ino,
        _ => false,
    }
}

pub(super) fn is_dir_stat(st: &FileStat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// An entry name as a path relative to the root: leading "/" and "./" dropped (as Docker does),
/// "a//b" and "a/./b" collapsed, trailing "/" dropped. "" is the root itself.
pub(super) fn normalise(raw: &[u8]) -> Result<Vec<u8>, &'static str> {
    if raw.is_empty() {
        return Err("has an empty name");
    }
    if raw.contains(&0) {
        return Err("has a NUL byte in its name");
    }
    let mut out = Vec::with_capacity(raw.len());
    for comp in raw.split(|b| *b == b'/') {
        match comp {
            b"" | b"." => {}
            b".." => return Err("has a `..` component in its name"),
            c => {
                if !out.is_empty() {
                    out.push(b'/');
                }
                out.extend_from_slice(c);
            }
        }
    }
    Ok(out)
}

pub(super) fn split_parent(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&path[..0], path),
    }
}

pub(super) fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(parent.len() + 1 + name.len());
    if !parent.is_empty() {
        p.extend_from_slice(parent);
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

pub(super) fn depth(path: &[u8]) -> usize {
    if path.is_empty() {
        0
    } else {
        1 + path.iter().filter(|b| **b == b'/').count()
    }
}

pub(super) fn show(path: &[u8]) -> String {
    if path.is_empty() {
        ".".to_string()
    } else {
        String::from_utf8_lossy(path).into_owned()
    }
}

pub(super) fn errno_of(e: &io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

pub(super) fn hostile(entry: &str, why: &str) -> UnpackError {
    UnpackError::Hostile {
        entry: entry.to_string(),
        why: why.to_string(),
    }
}

pub(super) fn malformed(entry: &str, why: &str) -> UnpackError {
    UnpackError::Malformed {
        entry: entry.to_string(),
        why: why.to_string(),
    }
}

pub(super) fn io(entry: &str, what: &str, source: io::Error) -> UnpackError {
    UnpackError::Io {
        entry: entry.to_string(),
        what: what.to_string(),
        source,
    }
}
