//! `openat2` below a directory fd with one of the few resolution modes kern uses, the component
//! walk standing in for it on old kernels (no-follow modes only), and the helpers built on it:
//! an absolute path from `/` with no symlink, and a small file read inside a root.

use std::ffi::OsStr;
use std::io::Read;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{open, openat, openat2, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{fstat, FileStat, Mode};

use super::capped::{Cap, Capped};

/// How a path below a root is resolved. Magic links (`/proc/*/fd/*` and the like) are refused
/// in every mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resolve {
    /// Beneath the root, no symlink anywhere, no mount crossed: a workspace a box writes.
    /// Emulated without `openat2`.
    Strict,
    /// No symlink anywhere, mounts crossed freely, `..` at the root stays there: an absolute
    /// path from `/` ([`open_no_symlinks`]). Emulated without `openat2`.
    NoSymlinks,
    /// Beneath the root; a symlink is followed while it stays beneath it (an image layer's own
    /// symlinked directory is legitimate; one pointing out is `EXDEV`). Needs `openat2`.
    Beneath,
    /// Every symlink (absolute ones too) resolved as if the root were `/`: a file of an image or
    /// a box read from the host. Needs `openat2`.
    InRoot,
}

impl Resolve {
    fn flags(self) -> ResolveFlag {
        let no_magic = ResolveFlag::RESOLVE_NO_MAGICLINKS;
        match self {
            Resolve::Strict => {
                no_magic
                    | ResolveFlag::RESOLVE_BENEATH
                    | ResolveFlag::RESOLVE_NO_SYMLINKS
                    | ResolveFlag::RESOLVE_NO_XDEV
            }
            Resolve::NoSymlinks => no_magic | ResolveFlag::RESOLVE_NO_SYMLINKS,
            Resolve::Beneath => no_magic | ResolveFlag::RESOLVE_BENEATH,
            Resolve::InRoot => no_magic | ResolveFlag::RESOLVE_IN_ROOT,
        }
    }

    /// Whether the component walk gives the same answer as the kernel: only when nothing is
    /// followed.
    fn emulated(self) -> bool {
        matches!(self, Resolve::Strict | Resolve::NoSymlinks)
    }
}

/// Why a path could not be opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// The mode follows symlinks, which only `openat2` does safely, and this kernel lacks it.
    #[error("openat2 is not available (Linux 5.6 or later is needed)")]
    NeedsOpenat2,
    /// The kernel's answer: `ENOENT`, `ELOOP` (a symlink where none may be), `EXDEV` (leaving
    /// the root or crossing a mount), `ENOTDIR`, ...
    #[error(transparent)]
    Os(#[from] Errno),
}

impl OpenError {
    /// The errno view, for callers that match on it (`NeedsOpenat2` is `ENOSYS`).
    pub fn errno(self) -> Errno {
        match self {
            OpenError::NeedsOpenat2 => Errno::ENOSYS,
            OpenError::Os(e) => e,
        }
    }
}

/// Why [`read_in_root`] read nothing.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error(transparent)]
    Open(#[from] OpenError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("larger than {0} bytes")]
    TooLarge(u64),
}

/// Which resolver [`open_via`] uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Via {
    /// `openat2`, falling back to the walk for emulated modes on `ENOSYS`.
    Kernel,
    /// The component walk only, as on a kernel without `openat2` (tests of the fallback).
    Walk,
}

/// Opens `rel` below the directory `root` with `flags` (`O_CLOEXEC` is always added), resolved
/// as `resolve` says. See the module doc for kernels without `openat2`. Not for creating:
/// callers create relative to the parent fd this returns.
pub fn open_beneath<R: AsRef<OsStr> + ?Sized>(
    root: impl AsFd,
    rel: &R,
    flags: OFlag,
    resolve: Resolve,
) -> Result<OwnedFd, OpenError> {
    open_via(root.as_fd(), rel.as_ref(), flags, resolve, Via::Kernel)
}

pub(crate) fn open_via(
    root: BorrowedFd<'_>,
    rel: &OsStr,
    flags: OFlag,
    resolve: Resolve,
    via: Via,
) -> Result<OwnedFd, OpenError> {
    let flags = flags | OFlag::O_CLOEXEC;
    if via == Via::Kernel {
        let how = OpenHow::new().flags(flags).resolve(resolve.flags());
        let mut tries = 0;
        loop {
            match openat2(root, rel, how) {
                // A concurrent rename raced the kernel's checks; it asks for a retry.
                Err(Errno::EAGAIN) if tries < 16 => tries += 1,
                Err(Errno::ENOSYS) if resolve.emulated() => break,
                Err(Errno::ENOSYS) => return Err(OpenError::NeedsOpenat2),
                r => return Ok(r?),
            }
        }
    }
    if !resolve.emulated() {
        return Err(OpenError::NeedsOpenat2);
    }
    Ok(walk_open(root, rel, flags, resolve == Resolve::Strict)?)
}

/// The no-follow resolution by hand: each component opened `O_NOFOLLOW` relative to the last
/// one's fd. `strict` adds the root as a floor for `..` and refuses crossing a mount.
fn walk_open(
    root: BorrowedFd<'_>,
    rel: &OsStr,
    flags: OFlag,
    strict: bool,
) -> nix::Result<OwnedFd> {
    let bytes = rel.as_bytes();
    if bytes.is_empty() {
        // As openat2: an empty path names nothing (there is no AT_EMPTY_PATH here).
        return Err(Errno::ENOENT);
    }
    if bytes.starts_with(b"/") {
        if strict {
            // RESOLVE_BENEATH refuses an absolute path.
            return Err(Errno::EXDEV);
        }
        // Without it an absolute path starts at `/`, whatever the dirfd.
        let top = open(
            "/",
            OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let rest: &[u8] = match &bytes[1..] {
            [] => b".",
            r => r,
        };
        return walk_open(top.as_fd(), OsStr::from_bytes(rest), flags, strict);
    }
    let mut comps: Vec<&OsStr> = bytes
        .split(|b| *b == b'/')
        .filter(|c| !c.is_empty() && *c != b".")
        .map(OsStr::from_bytes)
        .collect();
    let last = comps.pop();
    let mut chain: Vec<OwnedFd> = Vec::new();
    for comp in comps {
        if comp == ".." {
            climb(&mut chain, strict)?;
            continue;
        }
        let next = child_dir(top(root, &chain), comp, strict)?;
        chain.push(next);
    }
    let name = match last {
        Some(n) if n == ".." => {
            climb(&mut chain, strict)?;
            OsStr::new(".")
        }
        Some(n) => n,
        None => OsStr::new("."),
    };
    let parent = top(root, &chain);
    let fd = openat(parent, name, flags | OFlag::O_NOFOLLOW, Mode::empty())?;
    let st = fstat(&fd)?;
    // O_PATH|O_NOFOLLOW hands back a symlink itself; NO_SYMLINKS refuses it.
    if is_kind(&st, libc::S_IFLNK) {
        return Err(Errno::ELOOP);
    }
    if strict && st.st_dev != fstat(parent)?.st_dev {
        return Err(Errno::EXDEV);
    }
    Ok(fd)
}

/// The directory the walk is in: the last one opened, or the root.
fn top<'a>(root: BorrowedFd<'a>, chain: &'a [OwnedFd]) -> BorrowedFd<'a> {
    chain.last().map_or(root, |fd| fd.as_fd())
}

/// `..`: back to the directory before; at the root, `strict` refuses (as RESOLVE_BENEATH does)
/// and otherwise it stays there (as `/..` does).
fn climb(chain: &mut Vec<OwnedFd>, strict: bool) -> nix::Result<()> {
    if chain.pop().is_none() && strict {
        return Err(Errno::EXDEV);
    }
    Ok(())
}

/// One directory down from `dir`, never following a symlink: `name` is a single component, not
/// `..`. The result is an `O_PATH` fd. A symlink there is `ELOOP`, anything else not a
/// directory `ENOTDIR`, and with `same_mount` a mount point (another `st_dev`) `EXDEV`.
pub(crate) fn child_dir(dir: impl AsFd, name: &OsStr, same_mount: bool) -> nix::Result<OwnedFd> {
    let fd = openat(
        dir.as_fd(),
        name,
        OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let st = fstat(&fd)?;
    if is_kind(&st, libc::S_IFLNK) {
        return Err(Errno::ELOOP);
    }
    if !is_kind(&st, libc::S_IFDIR) {
        return Err(Errno::ENOTDIR);
    }
    // openat has no RESOLVE_NO_XDEV; a different device means a mount point.
    if same_mount && st.st_dev != fstat(dir.as_fd())?.st_dev {
        return Err(Errno::EXDEV);
    }
    Ok(fd)
}

fn is_kind(st: &FileStat, kind: libc::mode_t) -> bool {
    st.st_mode & libc::S_IFMT == kind
}

/// Opens the absolute `path` (`O_PATH`), resolved from `/` with no symlink or magic link
/// anywhere in it: a component swapped for a symlink after the caller canonicalised the path
/// fails with `ELOOP`. Emulated without `openat2`, so `NeedsOpenat2` never comes from here.
pub fn open_no_symlinks(path: &Path) -> Result<OwnedFd, OpenError> {
    let top = open(
        "/",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let rel = path.strip_prefix("/").unwrap_or(path);
    if rel.as_os_str().is_empty() {
        return Ok(top);
    }
    open_beneath(&top, rel, OFlag::O_PATH, Resolve::NoSymlinks)
}

/// Reads the file `rel` of the tree at `root`, every symlink resolved as if `root` were `/`
/// ([`Resolve::InRoot`]): an image's /etc/passwd that links to `/etc/shadow` reads the image's,
/// never the host's. Opened `O_NONBLOCK|O_NOCTTY`, so a FIFO or a terminal there reads as empty
/// rather than blocking. More than `max_bytes` is an error, never a silent cut.
pub fn read_in_root(root: &Path, rel: &str, max_bytes: u64) -> Result<Vec<u8>, ReadError> {
    // The caller's root is trusted: an ordinary (following) open.
    let dir = open(
        root,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(OpenError::from)?;
    let fd = open_beneath(
        &dir,
        rel,
        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY,
        Resolve::InRoot,
    )?;
    let mut out = Vec::new();
    // One byte over the cap tells a file larger than it from one exactly at it.
    let cap = Cap::new(max_bytes.saturating_add(1));
    match Capped::new(std::fs::File::from(fd), cap.clone()).read_to_end(&mut out) {
        Err(_) if cap.over() => Err(ReadError::TooLarge(max_bytes)),
        Err(e) => Err(e.into()),
        Ok(_) => Ok(out),
    }
}

/// Whether this kernel has a working `openat2` (`kern doctor`): `/` itself, no symlinks.
pub fn probe_openat2() -> nix::Result<()> {
    let root = open(
        "/",
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let how = OpenHow::new()
        .flags(OFlag::O_PATH | OFlag::O_CLOEXEC)
        .resolve(Resolve::NoSymlinks.flags());
    openat2(&root, ".", how).map(drop)
}
