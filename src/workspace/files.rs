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
use std::io::{Read, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

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
/// Refused (`Error::Invalid`): the empty path, an absolute path, a `..` component, a NUL byte,
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
            "is absolute; give it relative to the workspace (\"/workspace/out/a\" is \"out/a\")",
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
/// created or changed. Refused (`Error::Invalid`): a parent that is a symlink or not a
/// directory; an existing entry at `path` that is not a regular file (symlink, directory, FIFO,
/// socket, device), or a regular file with more than one hard link. On an error the temp file
/// is removed; directories created before the error stay.
pub fn write_file(root: &Path, path: &str, data: &[u8], owner: Option<(u32, u32)>) -> Result<()> {
    write_with(root, path, data, owner, true)
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

fn read_with(root: &Path, path: &str, max_bytes: u64, use_openat2: bool) -> Result<Vec<u8>> {
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
    check_readable(path, &st, max_bytes)?;

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
    // Links or size may have changed between the two opens.
    check_readable(path, &now, max_bytes)?;

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
    File::from(file)
        .take(max_bytes.saturating_add(1))
        .read_to_end(&mut buf)
        .map_err(|e| runtime(OP, path, "cannot read it", e))?;
    if buf.len() as u64 > max_bytes {
        return Err(Error::Invalid(format!(
            "{OP} {}: grew past maxBytes {max_bytes} while being read; readFile never returns part of a file",
            shown(path)
        )));
    }
    Ok(buf)
}

fn check_readable(path: &str, st: &FileStat, max_bytes: u64) -> Result<()> {
    const OP: &str = "readFile";
    if !is_regular(st) {
        let why = match st.st_mode & libc::S_IFMT {
            libc::S_IFLNK => "the host never follows a symlink in the workspace",
            libc::S_IFDIR => "use listFiles for a directory",
            _ => "readFile reads regular files only",
        };
        return Err(Error::Invalid(format!(
            "{OP} {}: is {}; refused: {why}",
            shown(path),
            kind(st)
        )));
    }
    if st.st_nlink > 1 {
        return Err(Error::Invalid(format!(
            "{OP} {}: has {} hard links; refused: a hard link may reach a file outside the workspace; copy it to a new file inside the box first (cp, not ln)",
            shown(path),
            st.st_nlink
        )));
    }
    let size = size_of(st);
    if size > max_bytes {
        return Err(Error::Invalid(format!(
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
    const OP: &str = "writeFile";
    let comps = parse_rel(path)?;
    let Some((name, parents)) = comps.split_last() else {
        return Err(names_workspace(OP, path));
    };
    let root_fd = open_root(root)?;
    let dir = make_dirs(&root_fd, parents, owner, use_openat2, path)?;
    check_replaceable(&dir, name, path)?;
    place(&dir, name, data, owner, path)
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
        return Err(Error::Invalid(format!(
            "{OP} {}: exists and is {}; refused: {why}",
            shown(path),
            kind(&st)
        )));
    }
    if st.st_nlink > 1 {
        return Err(Error::Invalid(format!(
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
    if let Some((uid, gid)) = owner {
        fchown(&file, Some(Uid::from_raw(uid)), Some(Gid::from_raw(gid)))?;
    }
    // After fchown, which may clear mode bits; and regardless of the umask.
    fchmod(&file, Mode::from_bits_truncate(0o644))?;
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
        return Err(Error::Invalid(format!(
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
    Error::Invalid(format!("workspace path {}: {rule}", shown(path)))
}

fn names_workspace(op: &str, path: &str) -> Error {
    Error::Invalid(format!(
        "{op} {}: names the workspace itself; give the path of a file in it",
        shown(path)
    ))
}

fn resolve_err(op: &str, path: &str, e: Errno) -> Error {
    match e {
        Errno::ELOOP | Errno::ENOTDIR | Errno::EXDEV => {
            Error::Invalid(format!("{op} {}: {NO_SYMLINKS}", shown(path)))
        }
        Errno::ENOENT => Error::Invalid(format!(
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
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::time::{Duration, Instant};
    use tempfile::TempDir;

    const CANARY: &[u8] = b"host secret: the canary 5e1f0c";

    /// A workspace with hostile entries planted, and a canary file outside it.
    struct Fixture {
        ws: TempDir,
        out: TempDir,
    }

    impl Fixture {
        fn new() -> Fixture {
            let ws = tempfile::tempdir().unwrap();
            let out = tempfile::tempdir().unwrap();
            let canary = out.path().join("canary");
            std::fs::write(&canary, CANARY).unwrap();
            let w = ws.path();
            std::os::unix::fs::symlink(&canary, w.join("a")).unwrap();
            std::os::unix::fs::symlink(out.path(), w.join("d")).unwrap();
            std::os::unix::fs::symlink("/", w.join("rootlink")).unwrap();
            // Relative links cross no mount, so RESOLVE_NO_XDEV alone would not stop them (an
            // absolute one may jump to another mount at /): they test the no-symlink rule itself.
            let out_rel = Path::new("..").join(out.path().file_name().unwrap());
            std::os::unix::fs::symlink(out_rel.join("canary"), w.join("rel")).unwrap();
            std::os::unix::fs::symlink(&out_rel, w.join("dr")).unwrap();
            // A second outside file for the hard link, so `canary` itself keeps one link.
            let linked = out.path().join("linked");
            std::fs::write(&linked, CANARY).unwrap();
            std::fs::hard_link(&linked, w.join("h")).unwrap();
            std::fs::write(w.join("ok"), "inside").unwrap();
            std::fs::create_dir(w.join("sub")).unwrap();
            std::fs::write(w.join("sub/f"), "in sub").unwrap();
            Fixture { ws, out }
        }

        fn w(&self) -> &Path {
            self.ws.path()
        }

        /// The outside dir holds the two canaries, unchanged, and nothing else.
        fn assert_outside_untouched(&self) {
            let mut names: Vec<_> = std::fs::read_dir(self.out.path())
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            assert_eq!(
                names,
                vec![OsString::from("canary"), OsString::from("linked")]
            );
            for name in names {
                assert_eq!(std::fs::read(self.out.path().join(name)).unwrap(), CANARY);
            }
        }

        /// `rootlink/<the outside dir, relative to />/<name>`.
        fn via_root(&self, name: &str) -> String {
            let out = self.out.path().to_str().unwrap().trim_start_matches('/');
            format!("rootlink/{out}/{name}")
        }
    }

    fn refused<T: std::fmt::Debug>(r: Result<T>, needle: &str) {
        match r {
            Err(Error::Invalid(msg)) => assert!(msg.contains(needle), "{msg:?} lacks {needle:?}"),
            other => panic!("expected a refusal containing {needle:?}, got {other:?}"),
        }
    }

    fn temps_left(dir: &Path) -> Vec<PathBuf> {
        let mut found = Vec::new();
        crate::fsx::walk::walk(dir, usize::MAX, |e| {
            if e.rel
                .file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with(TEMP_PREFIX))
            {
                found.push(e.rel.to_path_buf());
            }
            true
        });
        found
    }

    #[test]
    fn parse_rel_refuses_bad_shapes() {
        let long_name = "x".repeat(256);
        let long_path = "a/".repeat(2048) + "b"; // 4097 bytes
        assert_eq!(long_path.len(), 4097);
        for (p, needle) in [
            ("", "is empty"),
            ("..", "'..'"),
            ("a/../../x", "'..'"),
            ("a/..", "'..'"),
            ("/abs", "is absolute"),
            ("/", "is absolute"),
            ("a\0b", "NUL"),
            ("a/", "trailing slash"),
            ("./", "trailing slash"),
            (long_name.as_str(), "256 bytes, over the 255-byte limit"),
            (long_path.as_str(), "4097 bytes, over the 4096-byte limit"),
        ] {
            refused(parse_rel(p), needle);
        }
        // The message names the path.
        refused(parse_rel("a/../../x"), "\"a/../../x\"");
    }

    #[test]
    fn parse_rel_normalises() {
        let p = |s: &str| parse_rel(s).unwrap();
        assert_eq!(p("./a"), vec![OsString::from("a")]);
        assert_eq!(p("a//b"), vec![OsString::from("a"), OsString::from("b")]);
        assert_eq!(p("a/./b/."), vec![OsString::from("a"), OsString::from("b")]);
        assert_eq!(p("a\\b"), vec![OsString::from("a\\b")]);
        assert_eq!(
            p("..a/b.."),
            vec![OsString::from("..a"), OsString::from("b..")]
        );
        assert!(p(".").is_empty());
        assert_eq!(p(&"x".repeat(255)).len(), 1);
        let max_path = "a/".repeat(2047) + "bc"; // 4096 bytes
        assert_eq!(p(&max_path).len(), 2048);
    }

    #[test]
    fn read_and_write_of_the_workspace_itself_are_refused() {
        let fx = Fixture::new();
        refused(read_file(fx.w(), ".", 100), "names the workspace itself");
        refused(
            write_file(fx.w(), "./.", b"x", None),
            "names the workspace itself",
        );
        refused(read_file(fx.w(), "", 100), "is empty");
    }

    #[test]
    fn dot_slash_and_double_slash_work() {
        let fx = Fixture::new();
        assert_eq!(read_file(fx.w(), "./ok", 100).unwrap(), b"inside");
        assert_eq!(read_file(fx.w(), "sub//f", 100).unwrap(), b"in sub");
        write_file(fx.w(), "./new//x/./y", b"made", None).unwrap();
        assert_eq!(std::fs::read(fx.w().join("new/x/y")).unwrap(), b"made");
    }

    #[test]
    fn symlinks_are_never_followed_for_read_or_write() {
        for use_openat2 in [true, false] {
            let fx = Fixture::new();
            let via_root = fx.via_root("canary");
            for p in ["a", "rel", "rootlink"] {
                refused(read_with(fx.w(), p, 1 << 20, use_openat2), "is a symlink");
                refused(
                    write_with(fx.w(), p, b"pwned", None, use_openat2),
                    "is a symlink",
                );
            }
            for p in [
                "d/canary",
                "dr/canary",
                "rootlink/etc/passwd",
                via_root.as_str(),
            ] {
                refused(read_with(fx.w(), p, 1 << 20, use_openat2), NO_SYMLINKS);
                refused(
                    write_with(fx.w(), p, b"pwned", None, use_openat2),
                    NO_SYMLINKS,
                );
            }
            // Creating through a symlinked parent must not create outside either.
            let via_root_new = fx.via_root("x");
            for p in ["d/x", "dr/x", "dr/new/deeper/x", via_root_new.as_str()] {
                refused(
                    write_with(fx.w(), p, b"pwned", None, use_openat2),
                    NO_SYMLINKS,
                );
            }
            // A file in the middle of the path.
            refused(read_with(fx.w(), "ok/x", 100, use_openat2), NO_SYMLINKS);
            refused(
                write_with(fx.w(), "ok/x", b"x", None, use_openat2),
                NO_SYMLINKS,
            );
            fx.assert_outside_untouched();
            assert_eq!(
                std::fs::read_link(fx.w().join("a")).unwrap(),
                fx.out.path().join("canary")
            );
            assert!(temps_left(fx.w()).is_empty());
            // Regular files still work along the same resolver.
            assert_eq!(
                read_with(fx.w(), "sub/f", 100, use_openat2).unwrap(),
                b"in sub"
            );
            write_with(fx.w(), "p/q/r", b"ok", None, use_openat2).unwrap();
            assert_eq!(std::fs::read(fx.w().join("p/q/r")).unwrap(), b"ok");
        }
    }

    #[test]
    fn missing_files_are_refused_as_missing() {
        let fx = Fixture::new();
        refused(read_file(fx.w(), "nope", 100), "no such file");
        refused(read_file(fx.w(), "nope/deeper", 100), "no such file");
        refused(read_with(fx.w(), "nope/deeper", 100, false), "no such file");
    }

    #[test]
    fn a_fifo_is_refused_without_hanging() {
        let fx = Fixture::new();
        nix::unistd::mkfifo(&fx.w().join("fifo"), Mode::from_bits_truncate(0o644)).unwrap();
        let w = fx.w().to_path_buf();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send((
                read_file(&w, "fifo", 100),
                write_file(&w, "fifo", b"x", None),
            ));
        });
        let (r, wr) = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("readFile on a FIFO hung");
        refused(r, "is a FIFO");
        refused(wr, "is a FIFO");
        assert!(temps_left(fx.w()).is_empty());
    }

    #[test]
    fn a_socket_and_a_directory_are_refused() {
        let fx = Fixture::new();
        let _listener = std::os::unix::net::UnixListener::bind(fx.w().join("sock")).unwrap();
        refused(read_file(fx.w(), "sock", 100), "is a socket");
        refused(write_file(fx.w(), "sock", b"x", None), "is a socket");
        refused(read_file(fx.w(), "sub", 100), "is a directory");
        refused(write_file(fx.w(), "sub", b"x", None), "is a directory");
        assert!(fx.w().join("sub/f").exists());
        assert!(temps_left(fx.w()).is_empty());
    }

    #[test]
    fn a_hard_link_is_refused_for_read_and_write() {
        let fx = Fixture::new();
        refused(read_file(fx.w(), "h", 1 << 20), "hard link");
        refused(write_file(fx.w(), "h", b"pwned", None), "hard link");
        fx.assert_outside_untouched();
        assert_eq!(std::fs::read(fx.w().join("h")).unwrap(), CANARY);
        assert!(temps_left(fx.w()).is_empty());
    }

    #[test]
    fn max_bytes_is_checked_before_reading() {
        let fx = Fixture::new();
        std::fs::write(fx.w().join("ten"), b"0123456789").unwrap();
        refused(
            read_file(fx.w(), "ten", 9),
            "is 10 bytes, over maxBytes 9; readFile never returns part of a file",
        );
        assert_eq!(read_file(fx.w(), "ten", 10).unwrap(), b"0123456789");
        assert_eq!(read_file(fx.w(), "ten", u64::MAX).unwrap(), b"0123456789");
        std::fs::write(fx.w().join("empty"), b"").unwrap();
        assert_eq!(read_file(fx.w(), "empty", 0).unwrap(), b"");
    }

    #[test]
    fn write_creates_parents_and_replaces_atomically() {
        let fx = Fixture::new();
        write_file(fx.w(), "x/y/z.txt", b"first", None).unwrap();
        let file = fx.w().join("x/y/z.txt");
        assert_eq!(std::fs::read(&file).unwrap(), b"first");
        let meta = std::fs::symlink_metadata(&file).unwrap();
        assert_eq!(meta.permissions().mode() & 0o7777, 0o644);
        for d in ["x", "x/y"] {
            let m = std::fs::symlink_metadata(fx.w().join(d)).unwrap();
            assert!(m.is_dir());
            assert_eq!(m.permissions().mode() & 0o7777, 0o755);
        }
        // Replacing: a new inode under the name, so a reader never sees a half-written file.
        write_file(fx.w(), "x/y/z.txt", b"second, longer", None).unwrap();
        let after = std::fs::symlink_metadata(&file).unwrap();
        assert_ne!(after.ino(), meta.ino());
        assert_eq!(std::fs::read(&file).unwrap(), b"second, longer");
        // An existing file's mode is not kept: writeFile makes 0644 files.
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        write_file(fx.w(), "x/y/z.txt", b"", None).unwrap();
        let m = std::fs::symlink_metadata(&file).unwrap();
        assert_eq!((m.len(), m.permissions().mode() & 0o7777), (0, 0o644));
        assert!(temps_left(fx.w()).is_empty());
    }

    #[test]
    fn write_chowns_the_file_and_the_directories_it_made() {
        let fx = Fixture::new();
        let me = (Uid::effective().as_raw(), Gid::effective().as_raw());
        write_file(fx.w(), "o/f", b"x", Some(me)).unwrap();
        let m = std::fs::metadata(fx.w().join("o/f")).unwrap();
        assert_eq!((m.uid(), m.gid()), me);
        if Uid::effective().is_root() {
            let them = (4242, 4343);
            write_file(fx.w(), "sub/p/q/f", b"x", Some(them)).unwrap();
            for p in ["sub/p", "sub/p/q", "sub/p/q/f"] {
                let m = std::fs::metadata(fx.w().join(p)).unwrap();
                assert_eq!((m.uid(), m.gid()), them, "{p}");
            }
            // Existing directories are not ours to chown.
            let m = std::fs::metadata(fx.w().join("sub")).unwrap();
            assert_eq!((m.uid(), m.gid()), me);
        } else {
            // Not permitted: an error, and no temp file left behind.
            assert!(write_file(fx.w(), "g", b"x", Some((0, 0))).is_err());
            assert!(!fx.w().join("g").exists());
            assert!(temps_left(fx.w()).is_empty());
        }
    }

    #[test]
    fn a_failed_placement_removes_its_temp_file() {
        let fx = Fixture::new();
        let root_fd = open_root(fx.w()).unwrap();
        // A non-empty directory swapped in after the check: the rename fails.
        let r = place(&root_fd, OsStr::new("sub"), b"data", None, "sub");
        assert!(matches!(r, Err(Error::Runtime(_))), "{r:?}");
        assert!(temps_left(fx.w()).is_empty());
        assert_eq!(std::fs::read(fx.w().join("sub/f")).unwrap(), b"in sub");
    }

    #[test]
    fn list_files_lists_regular_files_only() {
        for use_openat2 in [true, false] {
            let fx = Fixture::new();
            let w = fx.w();
            std::fs::create_dir_all(w.join(".deps/lib")).unwrap();
            std::fs::write(w.join(".deps/lib/m.py"), "x").unwrap();
            std::fs::create_dir_all(w.join("sub/.deps")).unwrap();
            std::fs::write(w.join("sub/.deps/kept"), "12").unwrap();
            nix::unistd::mkfifo(&w.join("sub/fifo"), Mode::from_bits_truncate(0o644)).unwrap();
            std::os::unix::fs::symlink(fx.out.path(), w.join("sub/dl")).unwrap();
            let _l = std::os::unix::net::UnixListener::bind(w.join("sock")).unwrap();
            let bad = w.join(std::ffi::OsStr::from_bytes(b"bad\xffname"));
            std::fs::create_dir(&bad).unwrap();
            std::fs::write(bad.join("f"), "x").unwrap();
            std::fs::write(w.join(std::ffi::OsStr::from_bytes(b"bad\xfefile")), "x").unwrap();

            let all = list_with(w, None, MAX_LIST_ENTRIES, use_openat2).unwrap();
            let paths: Vec<(&str, u64)> = all.iter().map(|l| (l.path.as_str(), l.size)).collect();
            // `h` is a hard link: listing it leaks nothing but a size, and readFile refuses it.
            assert_eq!(
                paths,
                vec![
                    ("h", CANARY.len() as u64),
                    ("ok", 6),
                    ("sub/.deps/kept", 2),
                    ("sub/f", 6)
                ]
            );

            let sub = list_with(w, Some("./sub"), MAX_LIST_ENTRIES, use_openat2).unwrap();
            let paths: Vec<&str> = sub.iter().map(|l| l.path.as_str()).collect();
            assert_eq!(paths, vec!["sub/.deps/kept", "sub/f"]);
            let deps = list_with(w, Some(".deps"), MAX_LIST_ENTRIES, use_openat2).unwrap();
            assert_eq!(deps[0].path, ".deps/lib/m.py");
            assert_eq!(
                list_with(w, Some("."), MAX_LIST_ENTRIES, use_openat2).unwrap(),
                all
            );

            assert!(list_with(w, Some("missing/deeper"), 10, use_openat2)
                .unwrap()
                .is_empty());
            for p in ["d", "sub/dl", "rootlink", "rootlink/etc"] {
                refused(list_with(w, Some(p), 100, use_openat2), NO_SYMLINKS);
            }
            refused(list_with(w, Some("ok"), 100, use_openat2), NO_SYMLINKS);
            refused(list_with(w, Some("../x"), 100, use_openat2), "'..'");

            // 12 entries at the root (.deps counted, not entered; the non-UTF-8 directory not
            // entered), 4 in sub, 1 in sub/.deps: 17.
            refused(
                list_with(w, None, 16, use_openat2),
                "the workspace has more than 16 entries under \".\"; list a subdirectory",
            );
            assert!(list_with(w, None, 17, use_openat2).is_ok());
            fx.assert_outside_untouched();
        }
    }

    /// A box swapping `d` between a real directory and a symlink to the outside, as fast as it
    /// can, while the host reads and writes `d/f`.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn racing_a_directory_into_a_symlink_never_reaches_outside() {
        use nix::fcntl::{renameat2, RenameFlags};
        use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
        use std::sync::Arc;

        let ws = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        std::fs::write(out.path().join("f"), CANARY).unwrap();
        std::fs::create_dir(ws.path().join("d")).unwrap();
        std::fs::write(ws.path().join("d/f"), b"inside").unwrap();
        std::os::unix::fs::symlink(out.path(), ws.path().join("dl")).unwrap();

        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let swapper = {
            let (stop, swaps) = (stop.clone(), swaps.clone());
            let dir = File::open(ws.path()).unwrap();
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    // `d` is always there, a directory or a symlink in turn.
                    renameat2(&dir, "d", &dir, "dl", RenameFlags::RENAME_EXCHANGE).unwrap();
                    swaps.fetch_add(1, Ordering::Relaxed);
                }
            })
        };
        let (mut reads, mut writes) = (0, 0);
        let start = Instant::now();
        let mut i = 0u64;
        while start.elapsed() < Duration::from_secs(1) {
            let use_openat2 = i % 4 < 2;
            i += 1;
            if let Ok(bytes) = read_with(ws.path(), "d/f", 1 << 20, use_openat2) {
                assert_ne!(
                    bytes, CANARY,
                    "read the outside file through a swapped symlink"
                );
                assert_eq!(bytes, b"inside");
                reads += 1;
            }
            if write_with(ws.path(), "d/f", b"inside", None, use_openat2).is_ok() {
                writes += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        assert!(swaps.load(Ordering::Relaxed) > 0);
        eprintln!(
            "race: {} swaps, {reads} reads and {writes} writes got through",
            swaps.load(Ordering::Relaxed)
        );
        let names: Vec<_> = std::fs::read_dir(out.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(
            names,
            vec![OsString::from("f")],
            "something was created outside"
        );
        assert_eq!(std::fs::read(out.path().join("f")).unwrap(), CANARY);
    }

    mod props {
        use super::*;
        use proptest::prelude::*;
        use proptest::test_runner::{Config, TestRunner};

        /// Paths built from the tokens that matter (glued together, or as components joined
        /// with `/`), plus arbitrary strings.
        fn paths(tokens: Vec<String>) -> impl Strategy<Value = String> {
            prop_oneof![
                any::<String>(),
                proptest::collection::vec(proptest::sample::select(tokens.clone()), 0..8)
                    .prop_map(|parts| parts.concat()),
                proptest::collection::vec(proptest::sample::select(tokens), 1..6)
                    .prop_map(|parts| parts.join("/")),
            ]
        }

        fn base_tokens() -> Vec<String> {
            ["a", "b", "é", "/", "/", ".", "..", "\0", "\\", " ", "ä/"]
                .iter()
                .map(|s| s.to_string())
                .collect()
        }

        proptest! {
            #[test]
            fn parse_rel_only_yields_normal_components(path in paths(base_tokens())) {
                if let Ok(comps) = parse_rel(&path) {
                    for c in &comps {
                        let b = c.as_bytes();
                        prop_assert!(!b.is_empty() && b != b"." && b != b"..", "{c:?}");
                        prop_assert!(!b.contains(&b'/') && !b.contains(&0), "{c:?}");
                        prop_assert!(b.len() <= MAX_NAME);
                    }
                    let joined: PathBuf = comps.iter().collect();
                    prop_assert!(!joined.is_absolute());
                    prop_assert!(joined
                        .components()
                        .all(|c| matches!(c, std::path::Component::Normal(_))));
                    // Normalisation is stable: the joined form parses to the same components.
                    if !comps.is_empty() {
                        prop_assert_eq!(parse_rel(joined.to_str().unwrap()).unwrap(), comps);
                    }
                }
            }
        }

        #[test]
        fn read_file_never_returns_the_canary() {
            let fx = Fixture::new();
            let mut tokens: Vec<String> = [
                "a", "d", "dr", "rootlink", "rel", "h", "linked", "ok", "sub", "f", "canary",
                "etc", "passwd", "/", "/", "/", ".", "..", "\0",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            tokens.extend(
                fx.out
                    .path()
                    .iter()
                    .filter_map(|c| c.to_str())
                    .filter(|c| *c != "/")
                    .map(str::to_string),
            );
            let mut runner = TestRunner::new(Config {
                cases: 4096,
                failure_persistence: None,
                ..Config::default()
            });
            runner
                .run(&paths(tokens), |path| {
                    for use_openat2 in [true, false] {
                        if let Ok(bytes) = read_with(fx.w(), &path, 1 << 20, use_openat2) {
                            prop_assert_ne!(bytes, CANARY.to_vec(), "via {:?}", path);
                        }
                    }
                    Ok(())
                })
                .unwrap();
            fx.assert_outside_untouched();
        }
    }
}
