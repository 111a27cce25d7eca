//! The host's file API on the workspace: `readFile`, `writeFile`, `listFiles`.
//!
//! The workspace root is a path the caller gave us and is trusted; everything below it was
//! written by the box, which may be hostile and may keep changing it while we work: symlinks to
//! host files, FIFOs, sockets, hard links, a directory renamed into a symlink between two of our
//! steps. So no workspace path is ever resolved by an ordinary path lookup:
//!
//! - parents are opened relative to a root fd with [`crate::fsx`]'s strict mode (`openat2` with
//!   `RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV`, or on
//!   kernels without it one `O_NOFOLLOW` component at a time), and every later step is relative
//!   to the resulting directory fd, so a swap after resolution cannot redirect us;
//! - the final component is only ever opened `O_NOFOLLOW` or stat'ed `AT_SYMLINK_NOFOLLOW`;
//! - a read opens the entry `O_PATH` first and reopens that very inode for reading only once it
//!   is known to be a regular file, so a FIFO or a device is never opened;
//! - a write goes to a fresh `O_EXCL` temp file in the resolved parent and is `renameat`'d over
//!   the final name: rename replaces a directory entry and never follows what it replaces.

use crate::error::{Error, Result};
use crate::fsx::{self, Via};
use nix::errno::Errno;
use nix::fcntl::{open, openat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, mkdirat, FileStat, Mode};
use nix::unistd::{fchown, unlinkat, Gid, Uid, UnlinkatFlags};
use std::ffi::{OsStr, OsString};
use std::fmt::Display;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

mod atomic;
pub use atomic::AtomicWrite;

/// `readFile`'s cap when the caller gives none: 1 GiB.
pub const DEFAULT_MAX_READ: u64 = 1 << 30;

/// `listFiles` refuses a tree with more entries than this (files, directories and anything
/// else, counted as the walk meets them).
pub const MAX_LIST_ENTRIES: usize = 100_000;

/// Linux's PATH_MAX and NAME_MAX: longer would fail in the kernel anyway, with a vaguer error.
const MAX_PATH: usize = 4096;
const MAX_NAME: usize = 255;

/// Temp files of `write_file` start with this; they only outlive a write if we are killed.
const TEMP_PREFIX: &str = ".kern-write-";

/// `setup`'s dependency directory at the workspace root: not the caller's files.
const DEPS: &str = ".deps";

const NO_SYMLINKS: &str =
    "there is a symlink (or non-directory) in the path; refused: the host never follows a symlink in the workspace";

/// Splits a workspace-relative path into its components, refusing any path that could name
/// something outside the workspace or that the kernel would reject.
///
/// Refused (`Error::File`): the empty path, an absolute path, a `..` component, a NUL byte,
/// a component over 255 bytes, a path over 4096 bytes, a trailing `/`. `.` and empty components
/// are dropped (`./a`, `a//b` and `a/./b` mean `a` and `a/b`); a backslash is an ordinary
/// character. The result may be empty (for `"."`): the workspace itself.
///
/// Every returned component is non-empty, is not `.` or `..`, and contains neither `/` nor NUL.
pub fn parse_rel(path: &str) -> Result<Vec<OsString>> {
    if path.is_empty() {
        return Err(bad(
            path,
            "is empty; give a path relative to the workspace, e.g. \"out/result.txt\"",
        ));
    }
    if path.contains('\0') {
        return Err(bad(path, "contains a NUL byte; refused"));
    }
    if path.len() > MAX_PATH {
        return Err(bad(
            path,
            format_args!("is {} bytes, over the {MAX_PATH}-byte limit", path.len()),
        ));
    }
    if path.starts_with('/') {
        return Err(bad(
            path,
            "is absolute; give it relative to the workspace (\"out/a\" for the box's /workspace/out/a, or <workspaceMount>/out/a)",
        ));
    }
    if path.ends_with('/') {
        return Err(bad(path, "has a trailing slash; name the entry without it"));
    }
    let mut comps = Vec::new();
    for comp in path.split('/') {
        match comp {
            "" | "." => {}
            ".." => {
                return Err(bad(
                    path,
                    "has a '..' component; refused: workspace paths only go down",
                ))
            }
            _ if comp.len() > MAX_NAME => {
                return Err(bad(
                    path,
                    format_args!(
                        "has a component of {} bytes, over the {MAX_NAME}-byte limit",
                        comp.len()
                    ),
                ))
            }
            _ => comps.push(OsString::from(comp)),
        }
    }
    Ok(comps)
}

/// Reads the regular file at `path` in the workspace `root`, whole.
///
/// Guaranteed: no symlink in the workspace is followed, anywhere in the path; only a regular
/// file with a single link is read (a symlink, directory, FIFO, socket or device is refused
/// without being opened for reading, so nothing blocks); a file with more than one hard link is
/// refused, since a hard link may reach a file outside the workspace. At most `max_bytes` are
/// ever returned ([`DEFAULT_MAX_READ`], 1 GiB, is the binding's default): a larger file is
/// refused before any byte is read, and one that grows past the cap while being read is refused
/// too. Never a partial file.
pub fn read_file(root: &Path, path: &str, max_bytes: u64) -> Result<Vec<u8>> {
    read_with(root, path, max_bytes, true)
}

/// Writes `data` to `path` in the workspace `root`, creating missing parent directories (0755)
/// and replacing an existing regular file atomically (readers see the old or the new content,
/// never a mix). The file gets mode 0644 whatever the umask; with `owner`, it and every
/// directory created for it are chowned to that (uid, gid).
///
/// Guaranteed: no symlink in the workspace is followed, and nothing outside the workspace is
/// created or changed. Refused (`Error::File`): a parent that is a symlink or not a
/// directory; an existing entry at `path` that is not a regular file (symlink, directory, FIFO,
/// socket, device), or a regular file with more than one hard link. On an error the temp file
/// is removed; directories created before the error stay.
pub fn write_file(root: &Path, path: &str, data: &[u8], owner: Option<(u32, u32)>) -> Result<()> {
    write_with(root, path, data, owner, true)
}

/// Who files the host creates in the workspace `root` should belong to: as root, the
/// workspace's owner (so the box, whose account the owner appears as, can change them);
/// unprivileged, we are the owner already.
pub fn host_write_owner(root: &Path) -> Result<Option<(u32, u32)>> {
    use std::os::unix::fs::MetadataExt;
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let m = std::fs::metadata(root)
        .map_err(|e| Error::Runtime(format!("stat the workspace {}: {e}", root.display())))?;
    Ok(Some((m.uid(), m.gid())))
}

/// One regular file found by [`list_files`].
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Listed {
    /// Relative to the workspace root (not to the listed subdirectory), `/`-separated.
    pub path: String,
    pub size: u64,
}

/// The regular files under the workspace `root`, or under its `subdir`, sorted by path.
///
/// Guaranteed: no symlink is followed (the subdir is resolved like [`read_file`]'s parents, and
/// the walk never enters a symlink); symlinks, FIFOs, sockets and devices are not listed; the
/// `.deps` directory at the workspace root is skipped (a `subdir` of `.deps` lists it). A
/// missing `subdir` gives an empty list; a `subdir` that is a symlink or a file is refused. A
/// tree with more than `max_entries` entries (files, directories and others;
/// [`MAX_LIST_ENTRIES`], 100,000, is the binding's bound) is refused, never listed in part.
///
/// Names that are not valid UTF-8 cannot be addressed through the JS API: such files, and
/// everything under such directories, are left out. A directory the host user cannot read is
/// left out too (only possible when not running as root).
pub fn list_files(root: &Path, subdir: Option<&str>, max_entries: usize) -> Result<Vec<Listed>> {
    list_with(root, subdir, max_entries, true)
}

/// ADDITION: the bytes `offset..offset + length` (to the end without `length`) of the regular
/// file at `path`, under [`read_file`]'s rules. A range past the end returns what exists (maybe
/// nothing); one over `max_bytes` is refused before any byte is read.
pub fn read_range(
    root: &Path,
    path: &str,
    offset: u64,
    length: Option<u64>,
    max_bytes: u64,
) -> Result<Vec<u8>> {
    const OP: &str = "readFile";
    let (file, st) = open_for_read(root, path, true)?;
    let want = length
        .unwrap_or(u64::MAX)
        .min(size_of(&st).saturating_sub(offset));
    if want > max_bytes {
        return Err(Error::File(format!(
            "{OP} {}: the range holds {want} bytes, over maxBytes {max_bytes}; pass a larger maxBytes or a shorter length",
            shown(path)
        )));
    }
    // Past the end: nothing to read, and no seek (a filesystem refuses one beyond its largest
    // file size, e.g. 16 TiB on ext4, with EINVAL).
    if want == 0 {
        return Ok(Vec::new());
    }
    let mut buf = Vec::new();
    let cap = usize::try_from(want).unwrap_or(usize::MAX);
    buf.try_reserve_exact(cap).map_err(|_| {
        Error::Runtime(format!(
            "{OP} {}: cannot allocate {cap} bytes to read it",
            shown(path)
        ))
    })?;
    let mut file = file;
    file.seek(SeekFrom::Start(offset))
        .and_then(|_| file.take(want).read_to_end(&mut buf))
        .map_err(|e| runtime(OP, path, "cannot read it", e))?;
    Ok(buf)
}

/// ADDITION: the regular file at `path`, open for reading under [`read_file`]'s rules, and its
/// size then: for a stream that reads it a chunk at a time (`pread`), never whole.
pub fn open_read(root: &Path, path: &str) -> Result<(File, u64)> {
    let (file, st) = open_for_read(root, path, true)?;
    Ok((file, size_of(&st)))
}

fn read_with(root: &Path, path: &str, max_bytes: u64, use_openat2: bool) -> Result<Vec<u8>> {
    const OP: &str = "readFile";
    let (file, now) = open_for_read(root, path, use_openat2)?;
    check_size(path, &now, max_bytes)?;
    let size = size_of(&now);
    let mut buf = Vec::new();
    let cap = usize::try_from(size.min(max_bytes)).unwrap_or(usize::MAX);
    buf.try_reserve_exact(cap).map_err(|_| {
        Error::Runtime(format!(
            "{OP} {}: cannot allocate {cap} bytes to read it",
            shown(path)
        ))
    })?;
    // One byte over the cap tells a file that grew from one that is exactly at it.
    file.take(max_bytes.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| runtime(OP, path, "cannot read it", e))?;
    if buf.len() as u64 > max_bytes {
        return Err(Error::File(format!(
            "{OP} {}: grew past maxBytes {max_bytes} while being read; readFile never returns part of a file",
            shown(path)
        )));
    }
    Ok(buf)
}

/// Resolves and opens the regular, single-link file at `path` for reading (see [`read_file`]).
fn open_for_read(root: &Path, path: &str, use_openat2: bool) -> Result<(File, FileStat)> {
    const OP: &str = "readFile";
    let comps = parse_rel(path)?;
    let Some((name, parents)) = comps.split_last() else {
        return Err(names_workspace(OP, path));
    };
    let root_fd = open_root(root)?;
    let dir = open_dir(&root_fd, parents, use_openat2).map_err(|e| resolve_err(OP, path, e))?;
    // O_PATH opens nothing: a FIFO does not block, a device driver is not called.
    let entry = openat(
        &dir,
        name.as_os_str(),
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| resolve_err(OP, path, e))?;
    let st = fstat(&entry).map_err(|e| runtime(OP, path, "cannot stat it", e))?;
    check_kind(path, &st)?;

    // The magic link names the inode we just checked, not a path the box could swap.
    let file = open(
        format!("/proc/self/fd/{}", entry.as_raw_fd()).as_str(),
        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        runtime(
            OP,
            path,
            "cannot open it for reading (is /proc mounted?)",
            e,
        )
    })?;
    let now = fstat(&file).map_err(|e| runtime(OP, path, "cannot stat it", e))?;
    if (now.st_dev, now.st_ino) != (st.st_dev, st.st_ino) {
        return Err(Error::Runtime(format!(
            "{OP} {}: the file changed while being opened; try again",
            shown(path)
        )));
    }
    // Links may have changed between the two opens.
    check_kind(path, &now)?;
    Ok((File::from(file), now))
}

fn check_kind(path: &str, st: &FileStat) -> Result<()> {
    const OP: &str = "readFile";
    if !is_regular(st) {
        let why = match st.st_mode & libc::S_IFMT {
            libc::S_IFLNK => "the host never follows a symlink in the workspace",
            libc::S_IFDIR => "use listFiles for a directory",
            _ => "readFile reads regular files only",
        };
        return Err(Error::File(format!(
            "{OP} {}: is {}; refused: {why}",
            shown(path),
            kind(st)
        )));
    }
    if st.st_nlink > 1 {
        return Err(Error::File(format!(
            "{OP} {}: has {} hard links; refused: a hard link may reach a file outside the workspace; copy it to a new file inside the box first (cp, not ln)",
            shown(path),
            st.st_nlink
        )));
    }
    Ok(())
}

fn check_size(path: &str, st: &FileStat, max_bytes: u64) -> Result<()> {
    const OP: &str = "readFile";
    let size = size_of(st);
    if size > max_bytes {
        return Err(Error::File(format!(
            "{OP} {}: is {size} bytes, over maxBytes {max_bytes}; readFile never returns part of a file (pass a larger maxBytes)",
            shown(path)
        )));
    }
    Ok(())
}

fn write_with(
    root: &Path,
    path: &str,
    data: &[u8],
    owner: Option<(u32, u32)>,
    use_openat2: bool,
) -> Result<()> {
    let (dir, name) = replaceable_in("writeFile", root, path, owner, use_openat2)?;
    place(&dir, &name, data, owner, path)
}

/// The directory `path` goes in (made as needed, owned by `owner`) and its name there, once what
/// is there now may be replaced: `writeFile`'s and `createWriteStream`'s first steps.
fn replaceable_in(
    op: &str,
    root: &Path,
    path: &str,
    owner: Option<(u32, u32)>,
    use_openat2: bool,
) -> Result<(OwnedFd, OsString)> {
    let comps = parse_rel(path)?;
    let Some((name, parents)) = comps.split_last() else {
        return Err(names_workspace(op, path));
    };
    let root_fd = open_root(root)?;
    let dir = make_dirs(&root_fd, parents, owner, use_openat2, path)?;
    check_replaceable(&dir, name, path)?;
    Ok((dir, name.clone()))
}

/// Opens the directory `comps` below `root`, creating what is missing one level at a time.
fn make_dirs(
    root: &OwnedFd,
    comps: &[OsString],
    owner: Option<(u32, u32)>,
    use_openat2: bool,
    path: &str,
) -> Result<OwnedFd> {
    const OP: &str = "writeFile";
    match open_dir(root, comps, use_openat2) {
        Err(Errno::ENOENT) => {}
        r => return r.map_err(|e| resolve_err(OP, path, e)),
    }
    let mut cur = dup(root).map_err(|e| runtime(OP, path, "cannot open the workspace", e))?;
    for (i, comp) in comps.iter().enumerate() {
        cur = match fsx::child_dir(&cur, comp, true) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => create_dir(&cur, comp, owner).map_err(|e| match e {
                Errno::ELOOP | Errno::ENOTDIR | Errno::EXDEV => resolve_err(OP, path, e),
                _ => {
                    let made: PathBuf = comps[..=i].iter().collect();
                    runtime(
                        OP,
                        path,
                        format_args!("cannot create the directory {:?}", made),
                        e,
                    )
                }
            })?,
            Err(e) => return Err(resolve_err(OP, path, e)),
        };
    }
    Ok(cur)
}

/// `mkdirat` then an `O_NOFOLLOW` open of what is there: if the box swapped in a symlink or a
/// file meanwhile, the open fails rather than following it.
fn create_dir(parent: &OwnedFd, name: &OsStr, owner: Option<(u32, u32)>) -> nix::Result<OwnedFd> {
    match mkdirat(parent, name, Mode::from_bits_truncate(0o755)) {
        Ok(()) => {}
        // The box made it meanwhile: it is an existing component like any other.
        Err(Errno::EEXIST) => return fsx::child_dir(parent, name, true),
        Err(e) => return Err(e),
    }
    let fd = openat(
        parent,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    // mkdirat's mode went through the umask.
    fchmod(&fd, Mode::from_bits_truncate(0o755))?;
    if let Some((uid, gid)) = owner {
        fchown(&fd, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))?;
    }
    Ok(fd)
}

/// The final name may be absent or a single-link regular file; anything else is refused.
fn check_replaceable(dir: &OwnedFd, name: &OsStr, path: &str) -> Result<()> {
    const OP: &str = "writeFile";
    let st = match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::ENOENT) => return Ok(()),
        Err(e) => return Err(runtime(OP, path, "cannot stat it", e)),
    };
    if !is_regular(&st) {
        let why = match st.st_mode & libc::S_IFMT {
            libc::S_IFLNK => "the host never writes through a symlink in the workspace; remove it in the box first",
            _ => "writeFile replaces regular files only; remove it in the box first",
        };
        return Err(Error::File(format!(
            "{OP} {}: exists and is {}; refused: {why}",
            shown(path),
            kind(&st)
        )));
    }
    if st.st_nlink > 1 {
        return Err(Error::File(format!(
            "{OP} {}: has {} hard links; refused: a hard link may reach a file outside the workspace; remove it in the box first",
            shown(path),
            st.st_nlink
        )));
    }
    Ok(())
}

/// Writes a temp file next to `name` and renames it over `name`; removes the temp on failure.
fn place(
    dir: &OwnedFd,
    name: &OsStr,
    data: &[u8],
    owner: Option<(u32, u32)>,
    path: &str,
) -> Result<()> {
    const OP: &str = "writeFile";
    let (tmp, fd) = create_temp(dir)
        .map_err(|e| runtime(OP, path, "cannot create a temporary file next to it", e))?;
    let done = fill(fd, data, owner).and_then(|()| {
        renameat(dir, tmp.as_str(), dir, name)
            .map_err(|e| std::io::Error::other(format!("cannot put it in place: {e}")))
    });
    if let Err(e) = done {
        let _ = unlinkat(dir, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        return Err(Error::Runtime(format!("{OP} {}: {e}", shown(path))));
    }
    Ok(())
}

fn fill(fd: OwnedFd, data: &[u8], owner: Option<(u32, u32)>) -> std::io::Result<()> {
    let mut file = File::from(fd);
    file.write_all(data)?;
    seal(&file, owner)
}

/// The written file's owner and mode, as `writeFile` leaves them.
fn seal(file: &File, owner: Option<(u32, u32)>) -> std::io::Result<()> {
    if let Some((uid, gid)) = owner {
        fchown(file, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))?;
    }
    // After fchown, which may clear mode bits; and regardless of the umask.
    fchmod(file, Mode::from_bits_truncate(0o644))?;
    Ok(())
}

fn create_temp(dir: &OwnedFd) -> nix::Result<(String, OwnedFd)> {
    create_exclusive(dir, TEMP_PREFIX, 0o644)
}

/// A new file named `<prefix><random hex>` in `dir`, created `O_EXCL|O_NOFOLLOW`: whatever the
/// box planted under a guessed name (a symlink included) makes the create fail instead of being
/// used; we then pick another name, up to 16 times (EEXIST after that).
pub(super) fn create_exclusive(
    dir: &OwnedFd,
    prefix: &str,
    mode: u32,
) -> nix::Result<(String, OwnedFd)> {
    let mut last = Errno::EEXIST;
    for _ in 0..16 {
        let name = format!("{prefix}{:016x}", random_u64());
        match openat(
            dir,
            name.as_str(),
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(mode),
        ) {
            Ok(fd) => return Ok((name, fd)),
            Err(e @ Errno::EEXIST) => last = e,
            Err(e) => return Err(e),
        }
    }
    Err(last)
}

/// Unpredictable enough that a box cannot pre-plant the names; `O_EXCL` is what makes it safe.
fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // RandomState is seeded from the OS once per thread, then stepped per instance.
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    h.write_u32(std::process::id());
    h.finish()
}

fn list_with(
    root: &Path,
    subdir: Option<&str>,
    max_entries: usize,
    use_openat2: bool,
) -> Result<Vec<Listed>> {
    const OP: &str = "listFiles";
    let comps = match subdir {
        Some(s) => parse_rel(s)?,
        None => Vec::new(),
    };
    let under = subdir.unwrap_or(".");
    let root_fd = open_root(root)?;
    let dir = match open_dir(&root_fd, &comps, use_openat2) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(Vec::new()),
        Err(e) => return Err(resolve_err(OP, under, e)),
    };
    // walk() opens a path: this magic link is the directory just resolved, whatever the box
    // renames meanwhile.
    let top = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
    // walk() lists nothing when it cannot open its root; find out here, so that an empty list
    // means an empty directory.
    open(
        &top,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        runtime(
            OP,
            under,
            "cannot open the directory (is /proc mounted?)",
            e,
        )
    })?;

    let prefix: PathBuf = comps.iter().collect();
    let at_root = comps.is_empty();
    let mut out = Vec::new();
    let complete = fsx::walk::walk(&top, max_entries, |e| {
        if at_root && e.rel == Path::new(DEPS) {
            return false;
        }
        let rel = prefix.join(e.rel);
        let Some(rel) = rel.to_str() else {
            // Not addressable from JS; nothing under it is either.
            return false;
        };
        if e.is_file() {
            out.push(Listed {
                path: rel.to_owned(),
                size: size_of(e.stat),
            });
        }
        true
    });
    if !complete {
        return Err(Error::File(format!(
            "{OP}: the workspace has more than {max_entries} entries under {}; list a subdirectory",
            shown(under)
        )));
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(out)
}

/// The caller's path: trusted, so an ordinary (following) open.
fn open_root(root: &Path) -> Result<OwnedFd> {
    open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| Error::Runtime(format!("cannot open the workspace {}: {e}", root.display())))
}

/// Opens (`O_PATH`) the directory `comps` below `root` without following any symlink and
/// without leaving `root`'s mount ([`fsx::Resolve::Strict`]). Errors are the kernel's:
/// ELOOP/ENOTDIR/EXDEV for a symlink, a non-directory or a mount point on the way, ENOENT for a
/// missing component. `use_openat2: false` takes the old-kernel walk (the tests run both).
fn open_dir(root: &OwnedFd, comps: &[OsString], use_openat2: bool) -> nix::Result<OwnedFd> {
    if comps.is_empty() {
        return dup(root);
    }
    let rel: PathBuf = comps.iter().collect();
    let via = if use_openat2 { Via::Kernel } else { Via::Walk };
    fsx::open_via(
        root.as_fd(),
        rel.as_os_str(),
        OFlag::O_PATH | OFlag::O_DIRECTORY,
        fsx::Resolve::Strict,
        via,
    )
    .map_err(fsx::OpenError::errno)
}

fn dup(fd: &OwnedFd) -> nix::Result<OwnedFd> {
    fd.try_clone()
        .map_err(|e| Errno::from_raw(e.raw_os_error().unwrap_or(libc::EBADF)))
}

fn is_regular(st: &FileStat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFREG
}

fn size_of(st: &FileStat) -> u64 {
    u64::try_from(st.st_size).unwrap_or(0)
}

fn kind(st: &FileStat) -> &'static str {
    match st.st_mode & libc::S_IFMT {
        libc::S_IFREG => "a regular file",
        libc::S_IFDIR => "a directory",
        libc::S_IFLNK => "a symlink",
        libc::S_IFIFO => "a FIFO",
        libc::S_IFSOCK => "a socket",
        libc::S_IFCHR => "a character device",
        libc::S_IFBLK => "a block device",
        _ => "a file of unknown kind",
    }
}

/// The path for a message: quoted, and cut short if huge (paths may be 4 KiB of junk).
fn shown(path: &str) -> String {
    const MAX: usize = 120;
    if path.len() <= MAX {
        return format!("{path:?}");
    }
    let mut end = MAX;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{:?}… ({} bytes)", &path[..end], path.len())
}

fn bad(path: &str, rule: impl Display) -> Error {
    Error::File(format!("workspace path {}: {rule}", shown(path)))
}

fn names_workspace(op: &str, path: &str) -> Error {
    Error::File(format!(
        "{op} {}: names the workspace itself; give the path of a file in it",
        shown(path)
    ))
}

fn resolve_err(op: &str, path: &str, e: Errno) -> Error {
    match e {
        Errno::ELOOP | Errno::ENOTDIR | Errno::EXDEV => {
            Error::File(format!("{op} {}: {NO_SYMLINKS}", shown(path)))
        }
        Errno::ENOENT => Error::File(format!(
            "{op} {}: no such file or directory in the workspace",
            shown(path)
        )),
        _ => runtime(op, path, "cannot resolve it in the workspace", e),
    }
}

fn runtime(op: &str, path: &str, what: impl Display, e: impl Display) -> Error {
    Error::Runtime(format!("{op} {}: {what}: {e}", shown(path)))
}

#[cfg(test)]
mod tests;
