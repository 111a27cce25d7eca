//! The crate's one tree walk, for trees a box may write (a workspace, a build's output, an
//! image tree). It never follows a symlink, even one a running box swaps in while we walk:
//! every directory is opened relative to its parent's fd with O_NOFOLLOW, every entry is
//! examined with `fstatat(AT_SYMLINK_NOFOLLOW)`, and changes are made through O_PATH handles.
//! Path-based walks (`read_dir` on a joined path) can be redirected to host files by a box that
//! renames a directory into a symlink between two steps.
//!
//! The walk is complete whatever the tree's shape, and says so when it is not: it holds at most
//! `MAX_OPEN_DIRS` descriptors however wide or deep the tree (a box can make millions of
//! directories; one fd per pending directory ran into EMFILE and skipped the rest), climbs back
//! up through `..` checked against the inode it left, and reports every directory it could not
//! read as an error instead of passing over it.

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{open, openat, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode, SFlag};
use std::ffi::{OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// Directory descriptors one walk holds open at most (its depth beyond that is climbed back
/// through `..`).
const MAX_OPEN_DIRS: usize = 32;

/// Why a walk could not see every entry.
#[derive(Debug, thiserror::Error)]
pub enum WalkError {
    #[error("cannot read the directory {}: {errno}", shown(rel))]
    Unreadable { rel: PathBuf, errno: Errno },
    #[error("the directory {} changed while it was walked", shown(rel))]
    Changed { rel: PathBuf },
}

fn shown(rel: &Path) -> String {
    if rel.as_os_str().is_empty() {
        "(the top)".into()
    } else {
        rel.display().to_string()
    }
}

/// What a walk does with a directory it may not open although it owns it (an unprivileged caller,
/// a box's `chmod 000`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Closed {
    /// It is an error: the walk must count everything (the workspace quota).
    Fail,
    /// Pass over it: only its owner can reach inside, and that is us (the set-id sweep: a set-id
    /// file of ours grants nothing to ourselves, and nobody else can get at it).
    PassOver,
}

/// What the visitor wants done after seeing an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Visit {
    /// Go on; a directory is entered.
    Enter,
    /// Go on, but not into this directory.
    Skip,
    /// End the walk now (it then reports itself incomplete).
    Stop,
}

/// What the visitor sees of one entry.
pub struct Seen<'a> {
    /// Workspace-relative path (names need not be UTF-8).
    pub rel: &'a Path,
    pub stat: &'a FileStat,
    parent: &'a OwnedFd,
    name: &'a OsStr,
}

impl<'a> Seen<'a> {
    /// One entry seen outside a walk: `name` in the directory `parent`, as `stat` (from
    /// `fstatat(AT_SYMLINK_NOFOLLOW)`) found it, at `rel`.
    pub fn at(parent: &'a OwnedFd, name: &'a OsStr, rel: &'a Path, stat: &'a FileStat) -> Self {
        Seen {
            rel,
            stat,
            parent,
            name,
        }
    }
}

impl Seen<'_> {
    pub fn is_dir(&self) -> bool {
        SFlag::from_bits_truncate(self.stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFDIR
    }

    pub fn is_file(&self) -> bool {
        SFlag::from_bits_truncate(self.stat.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG
    }

    /// Sets the permission bits of this very entry (never a symlink's target): it is opened
    /// O_PATH|O_NOFOLLOW, checked to be the inode we saw, and changed through its fd.
    pub fn chmod(&self, mode: u32) -> nix::Result<()> {
        let fd = self.open_path()?;
        // An O_PATH fd can't be fchmod'ed; its /proc magic link names the inode itself.
        nix::sys::stat::fchmodat(
            nix::fcntl::AT_FDCWD,
            format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str(),
            Mode::from_bits_truncate(mode),
            nix::sys::stat::FchmodatFlags::FollowSymlink,
        )
    }
}

impl Seen<'_> {
    /// This very entry as an O_PATH handle (never a symlink's target), checked to be the inode
    /// the walk saw: its `/proc/self/fd` link names that inode to path-taking calls.
    pub fn open_path(&self) -> nix::Result<OwnedFd> {
        let fd = openat(
            self.parent.as_fd(),
            self.name,
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let now = fstat(&fd)?;
        if now.st_ino != self.stat.st_ino || now.st_dev != self.stat.st_dev {
            return Err(Errno::ESTALE);
        }
        Ok(fd)
    }

    /// This very regular file, opened for reading without following a symlink swapped in for
    /// it, checked to be the inode the walk saw.
    pub fn open_file(&self) -> nix::Result<OwnedFd> {
        let fd = openat(
            self.parent.as_fd(),
            self.name,
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )?;
        let now = fstat(&fd)?;
        if now.st_ino != self.stat.st_ino || now.st_dev != self.stat.st_dev {
            return Err(Errno::ESTALE);
        }
        Ok(fd)
    }

    /// This symlink's target, as written (never followed).
    pub fn read_link(&self) -> nix::Result<OsString> {
        nix::fcntl::readlinkat(self.parent.as_fd(), self.name)
    }
}

/// One directory on the way down: its names still to visit, and its fd while it holds one.
struct Frame {
    fd: Option<OwnedFd>,
    rel: PathBuf,
    dev: u64,
    ino: u64,
    names: std::vec::IntoIter<OsString>,
}

const DIR_FLAGS: OFlag = OFlag::O_RDONLY
    .union(OFlag::O_DIRECTORY)
    .union(OFlag::O_NOFOLLOW)
    .union(OFlag::O_CLOEXEC);

fn names_of(fd: &OwnedFd) -> nix::Result<Vec<OsString>> {
    let dup = fd.try_clone().map_err(|_| Errno::EMFILE)?;
    let mut dir = Dir::from_fd(dup)?;
    let mut out = Vec::new();
    for e in dir.iter() {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            out.push(OsStr::from_bytes(n).to_os_string());
        }
    }
    Ok(out)
}

/// A directory only its owner may enter, and we are that owner (root opens anything).
fn ours_and_closed(errno: Errno, st: &FileStat) -> bool {
    errno == Errno::EACCES && st.st_uid == nix::unistd::geteuid().as_raw()
}

fn frame(fd: OwnedFd, rel: PathBuf) -> Result<Frame, WalkError> {
    let st = fstat(&fd).map_err(|errno| WalkError::Unreadable {
        rel: rel.clone(),
        errno,
    })?;
    let names = names_of(&fd).map_err(|errno| WalkError::Unreadable {
        rel: rel.clone(),
        errno,
    })?;
    Ok(Frame {
        fd: Some(fd),
        rel,
        dev: st.st_dev,
        ino: st.st_ino,
        names: names.into_iter(),
    })
}

/// Walks `root` depth-first, calling `visit` for every entry (directories before their
/// contents). `Ok(true)`: every entry was seen; `Ok(false)`: the visitor stopped the walk. An
/// error names the directory that could not be read, or that changed under the walk: nothing is
/// passed over silently. A missing `root` is an empty tree.
pub fn walk_all(
    root: &Path,
    closed: Closed,
    visit: impl FnMut(&Seen<'_>) -> Visit,
) -> Result<bool, WalkError> {
    let top = match open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOENT) => return Ok(true),
        Err(errno) => {
            return Err(WalkError::Unreadable {
                rel: PathBuf::new(),
                errno,
            })
        }
    };
    walk_below(top, PathBuf::new(), closed, visit)
}

/// As `walk_all`, below the directory `top` (opened O_RDONLY|O_DIRECTORY by the caller, without
/// following symlinks), whose entries are named `rel/...`.
pub fn walk_below(
    top: OwnedFd,
    rel: PathBuf,
    closed: Closed,
    mut visit: impl FnMut(&Seen<'_>) -> Visit,
) -> Result<bool, WalkError> {
    let mut stack = vec![frame(top, rel)?];
    let mut open_dirs = 1usize;
    while let Some(depth) = stack.len().checked_sub(1) {
        let Some(name) = stack[depth].names.next() else {
            // This directory is done: climb back to its parent, through `..` if the parent's
            // fd was given up, and only to the very inode we came down from.
            let done = stack.pop().and_then(|f| f.fd);
            if let (Some(child), Some(parent)) = (done, stack.last_mut()) {
                if parent.fd.is_none() {
                    let fd =
                        openat(child.as_fd(), "..", DIR_FLAGS, Mode::empty()).map_err(|errno| {
                            WalkError::Unreadable {
                                rel: parent.rel.clone(),
                                errno,
                            }
                        })?;
                    let st = fstat(&fd).map_err(|errno| WalkError::Unreadable {
                        rel: parent.rel.clone(),
                        errno,
                    })?;
                    if st.st_dev != parent.dev || st.st_ino != parent.ino {
                        return Err(WalkError::Changed {
                            rel: parent.rel.clone(),
                        });
                    }
                    parent.fd = Some(fd);
                } else {
                    open_dirs -= 1;
                }
            }
            continue;
        };
        let cur = &stack[depth];
        let Some(dir_fd) = cur.fd.as_ref() else {
            // The frame being read always holds its fd (only shallower ones give theirs up).
            return Err(WalkError::Changed {
                rel: cur.rel.clone(),
            });
        };
        let stat = match fstatat(
            dir_fd.as_fd(),
            name.as_os_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => st,
            // Gone since it was listed (a live resident box): nothing left to see.
            Err(Errno::ENOENT) => continue,
            Err(errno) => {
                return Err(WalkError::Unreadable {
                    rel: cur.rel.clone(),
                    errno,
                })
            }
        };
        let path = cur.rel.join(&name);
        let entry = Seen {
            rel: &path,
            stat: &stat,
            parent: dir_fd,
            name: &name,
        };
        match visit(&entry) {
            Visit::Stop => return Ok(false),
            Visit::Skip => continue,
            Visit::Enter if !entry.is_dir() => continue,
            Visit::Enter => {}
        }
        let sub = match openat(dir_fd.as_fd(), name.as_os_str(), DIR_FLAGS, Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT) => continue,
            Err(errno) if closed == Closed::PassOver && ours_and_closed(errno, &stat) => continue,
            Err(errno) => return Err(WalkError::Unreadable { rel: path, errno }),
        };
        let sub = frame(sub, path)?;
        if sub.dev != stat.st_dev || sub.ino != stat.st_ino {
            return Err(WalkError::Changed { rel: sub.rel });
        }
        stack.push(sub);
        open_dirs += 1;
        if open_dirs > MAX_OPEN_DIRS {
            // Give up the shallowest fd below the top one; `..` brings it back, checked.
            if let Some(f) = stack[1..].iter_mut().find(|f| f.fd.is_some()) {
                f.fd = None;
                open_dirs -= 1;
            }
        }
    }
    Ok(true)
}

/// Walks `root` as `walk_all` does, entering a directory when `visit` returns true, stopping
/// after `max` entries. True when every entry was seen; false when `max` was reached or a
/// directory could not be read (callers that must not miss anything use `walk_all`).
pub fn walk(root: &Path, max: usize, mut visit: impl FnMut(&Seen<'_>) -> bool) -> bool {
    let mut seen = 0usize;
    walk_all(root, Closed::PassOver, |e| {
        seen += 1;
        if seen > max {
            Visit::Stop
        } else if visit(e) {
            Visit::Enter
        } else {
            Visit::Skip
        }
    })
    .unwrap_or(false)
}
