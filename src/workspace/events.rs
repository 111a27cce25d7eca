//! `sb.watch()` (issue 35): the changes below a workspace directory as events, seen from the host
//! by inotify. Nothing of it exists until a caller watches; each watch is one inotify instance.
//!
//! Only names travel: an event is built from what inotify says (the entry's name, whether it is
//! a directory), no file is opened or read. A directory is watched through a descriptor opened
//! beneath the workspace's own without following a symlink (`fsx::open`, the strict mode), and
//! through that descriptor's `/proc/self/fd` link, so a box that swaps a directory for a symlink
//! to a host directory gets nothing of the host watched. A directory that appears (made, or
//! moved in) is watched, then walked, and what was made in it before its watch is reported as
//! created; one moved within the tree keeps its watches under its new name; one moved out loses
//! them. The kernel's queue overflowing is an `Overflow` event, never a silent loss.

use crate::error::{Error, Result};
use crate::fsx::walk::{self, Closed, Visit};
use crate::fsx::{open_beneath, Resolve};
use globset::{GlobBuilder, GlobSet, GlobSetBuilder};
use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};

/// Directories one watch may hold: each is an inotify watch of the user's `max_user_watches`,
/// which the user's other programs share.
pub const MAX_WATCHED_DIRS: usize = 16_384;

/// What happened to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Create,
    Modify,
    Delete,
    /// `old_path` became `path`, both in the watched tree.
    Rename,
    /// Events were lost (the kernel's queue, or the caller's, overflowed): what happened in
    /// between is unknown; `dropped` says how many when known.
    Overflow,
}

impl Kind {
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Create => "create",
            Kind::Modify => "modify",
            Kind::Delete => "delete",
            Kind::Rename => "rename",
            Kind::Overflow => "overflow",
        }
    }
}

/// One change, its paths workspace-relative and `/`-separated (a name that is not UTF-8 is
/// shown with U+FFFD in its place).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Event {
    pub kind: Kind,
    pub path: String,
    pub old_path: Option<String>,
    pub is_dir: bool,
    /// For `Overflow`: how many events the caller's queue dropped (None: the kernel's queue
    /// overflowed, and the count is unknown).
    pub dropped: Option<u64>,
}

impl Event {
    fn new(kind: Kind, path: &Path, is_dir: bool) -> Event {
        Event {
            kind,
            path: path.to_string_lossy().into_owned(),
            old_path: None,
            is_dir,
            dropped: None,
        }
    }

    pub fn overflow(dropped: Option<u64>) -> Event {
        Event {
            kind: Kind::Overflow,
            path: String::new(),
            old_path: None,
            is_dir: false,
            dropped,
        }
    }
}

/// `include`/`exclude`: glob patterns on the workspace-relative path (`*` stays within one
/// component, `**` crosses them). An event passes when its path (or a rename's either path)
/// matches an include (or there are none) and no exclude.
pub struct Filter {
    include: Option<GlobSet>,
    exclude: Option<GlobSet>,
}

impl Filter {
    pub fn new(include: &[String], exclude: &[String]) -> Result<Filter> {
        Ok(Filter {
            include: globs("include", include)?,
            exclude: globs("exclude", exclude)?,
        })
    }

    fn admits(&self, path: &str) -> bool {
        self.include.as_ref().is_none_or(|g| g.is_match(path))
            && !self.exclude.as_ref().is_some_and(|g| g.is_match(path))
    }

    fn passes(&self, e: &Event) -> bool {
        e.kind == Kind::Overflow
            || self.admits(&e.path)
            || e.old_path.as_deref().is_some_and(|p| self.admits(p))
    }
}

fn globs(key: &str, patterns: &[String]) -> Result<Option<GlobSet>> {
    if patterns.is_empty() {
        return Ok(None);
    }
    let mut b = GlobSetBuilder::new();
    for p in patterns {
        // `*` stays within one component, as in a shell.
        let g = GlobBuilder::new(p)
            .literal_separator(true)
            .build()
            .map_err(|e| {
                Error::Invalid(format!(
                    "watch(): `{key}` pattern {p:?} is not a glob: {e}; e.g. \"**/*.py\" or \"out/*\""
                ))
            })?;
        b.add(g);
    }
    b.build()
        .map(Some)
        .map_err(|e| Error::Invalid(format!("watch(): `{key}`: {e}")))
}

fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
}

/// The inotify side of one `watch()`.
pub struct Watcher {
    root: OwnedFd,
    inotify: Inotify,
    /// The watched directory (workspace-relative).
    top: PathBuf,
    recursive: bool,
    /// Each watched directory's workspace-relative path.
    dirs: HashMap<WatchDescriptor, PathBuf>,
    filter: Filter,
}

impl AsRawFd for Watcher {
    fn as_raw_fd(&self) -> RawFd {
        self.inotify.as_fd().as_raw_fd()
    }
}

impl Watcher {
    /// Watches `sub` (workspace-relative, `""` for the whole workspace) of the workspace `root`,
    /// and with `recursive` every directory below it. Refused: a `sub` that is missing, not a
    /// directory, or reached through a symlink.
    pub fn start(
        root: &Path,
        sub: &[std::ffi::OsString],
        recursive: bool,
        filter: Filter,
    ) -> Result<Watcher> {
        let root = nix::fcntl::open(
            root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            nix::sys::stat::Mode::empty(),
        )
        .map_err(|e| Error::Runtime(format!("watch(): open the workspace: {e}")))?;
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).map_err(|e| {
            Error::Runtime(format!(
                "watch(): no inotify instance ({e}): this user has used all of fs.inotify.max_user_instances; close other watches"
            ))
        })?;
        let rel: PathBuf = sub.iter().collect();
        let mut w = Watcher {
            root,
            inotify,
            top: rel.clone(),
            recursive,
            dirs: HashMap::new(),
            filter,
        };
        let shown = if rel.as_os_str().is_empty() {
            "the workspace".to_string()
        } else {
            format!("{:?}", rel.display().to_string())
        };
        let fd = w.open_dir(&rel).map_err(|e| {
            Error::File(match e {
                Errno::ENOENT => format!("watch(): {shown} does not exist; make the directory first"),
                Errno::ENOTDIR if w.is_symlink(&rel) => format!(
                    "watch(): {shown} is a symlink; refused: the host never follows a symlink in the workspace"
                ),
                Errno::ENOTDIR => format!("watch(): {shown} is not a directory"),
                Errno::ELOOP | Errno::EXDEV => format!(
                    "watch(): {shown}: there is a symlink (or a mount) in the path; refused: the host never follows a symlink in the workspace"
                ),
                e => format!("watch(): {shown}: {e}"),
            })
        })?;
        w.watch(&fd, &rel)?;
        if recursive {
            let mut ignored = Vec::new();
            w.walk(fd, &rel, &mut ignored, false)?;
        }
        Ok(w)
    }

    fn is_symlink(&self, rel: &Path) -> bool {
        open_beneath(
            &self.root,
            rel,
            OFlag::O_PATH | OFlag::O_NOFOLLOW,
            Resolve::Strict,
        )
        .ok()
        .and_then(|fd| nix::sys::stat::fstat(&fd).ok())
        .is_some_and(|st| {
            nix::sys::stat::SFlag::from_bits_truncate(st.st_mode) & nix::sys::stat::SFlag::S_IFMT
                == nix::sys::stat::SFlag::S_IFLNK
        })
    }

    fn open_dir(&self, rel: &Path) -> nix::Result<OwnedFd> {
        let how = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW;
        if rel.as_os_str().is_empty() {
            return nix::fcntl::openat(
                &self.root,
                ".",
                how | OFlag::O_CLOEXEC,
                nix::sys::stat::Mode::empty(),
            );
        }
        open_beneath(&self.root, rel, how, Resolve::Strict).map_err(|e| e.errno())
    }

    fn watch(&mut self, fd: &impl AsFd, rel: &Path) -> Result<()> {
        if self.dirs.len() >= MAX_WATCHED_DIRS {
            return Err(Error::Runtime(format!(
                "watch(): more than {MAX_WATCHED_DIRS} directories below {:?}; watch a subdirectory, or without `recursive`",
                rel.display().to_string()
            )));
        }
        // The descriptor's /proc link names the very inode opened, whatever is at `rel` now.
        let at = format!("/proc/self/fd/{}", fd.as_fd().as_raw_fd());
        let wd = self.inotify.add_watch(at.as_str(), mask()).map_err(|e| {
            Error::Runtime(match e {
                Errno::ENOSPC => format!(
                    "watch(): no inotify watch left for {:?}: this user has used all of fs.inotify.max_user_watches",
                    rel.display().to_string()
                ),
                e => format!("watch(): {:?}: {e}", rel.display().to_string()),
            })
        })?;
        self.dirs.insert(wd, rel.to_path_buf());
        Ok(())
    }

    /// Watches every directory below `fd` (at `rel`, watched already), each before its entries
    /// are read, so nothing made in it meanwhile is missed (it may then be reported twice: by
    /// its event and by the walk); with `report`, each entry found is a `Create`.
    fn walk(&mut self, fd: OwnedFd, rel: &Path, out: &mut Vec<Event>, report: bool) -> Result<()> {
        let mut failed = None;
        let _ = walk::walk_below(fd, rel.to_path_buf(), Closed::PassOver, |e| {
            if report {
                out.push(Event::new(Kind::Create, e.rel, e.is_dir()));
            }
            if !e.is_dir() {
                return Visit::Enter;
            }
            match e.open_path() {
                Ok(dir) => match self.watch(&dir, e.rel) {
                    Ok(()) => Visit::Enter,
                    Err(why) => {
                        failed = Some(why);
                        Visit::Stop
                    }
                },
                // Gone, or swapped, since the walk read it: its parent's events say so.
                Err(_) => Visit::Skip,
            }
        });
        failed.map_or(Ok(()), Err)
    }

    /// Reads what the kernel has queued (never blocks) and appends it to `out` as events;
    /// `WouldBlock` when nothing was queued.
    pub fn read(&mut self, out: &mut Vec<Event>) -> std::io::Result<()> {
        let events = match self.inotify.read_events() {
            Ok(ev) => ev,
            Err(Errno::EINTR) => return Ok(()),
            Err(e) => return Err(std::io::Error::from(e)),
        };
        let mut made = Vec::new();
        // A rename is two events with one cookie, adjacent in the queue: paired here, and an
        // unpaired half is a move out of (or into) the watched tree.
        let mut moved_from: Option<(u32, PathBuf, bool)> = None;
        for ev in events {
            let m = ev.mask;
            if m.contains(AddWatchFlags::IN_Q_OVERFLOW) {
                made.push(Event::overflow(None));
                continue;
            }
            if m.contains(AddWatchFlags::IN_IGNORED) {
                self.dirs.remove(&ev.wd);
                continue;
            }
            let Some(dir) = self.dirs.get(&ev.wd).cloned() else {
                continue;
            };
            let is_dir = m.contains(AddWatchFlags::IN_ISDIR);
            let Some(name) = ev.name else {
                // The watched directory itself: only the top one's fate is news (below it, its
                // parent's event said it).
                if dir == self.top
                    && m.intersects(AddWatchFlags::IN_DELETE_SELF | AddWatchFlags::IN_MOVE_SELF)
                {
                    made.push(Event::new(Kind::Delete, &dir, true));
                }
                continue;
            };
            let rel = dir.join(&name);
            if let Some((cookie, from, from_dir)) = moved_from.take() {
                if m.contains(AddWatchFlags::IN_MOVED_TO) && ev.cookie == cookie {
                    let mut e = Event::new(Kind::Rename, &rel, is_dir);
                    e.old_path = Some(from.to_string_lossy().into_owned());
                    made.push(e);
                    if is_dir {
                        self.renamed(&from, &rel);
                    }
                    continue;
                }
                self.moved_out(&from, from_dir, &mut made);
            }
            if m.contains(AddWatchFlags::IN_MOVED_FROM) {
                moved_from = Some((ev.cookie, rel, is_dir));
            } else if m.intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO) {
                made.push(Event::new(Kind::Create, &rel, is_dir));
                if is_dir && self.recursive {
                    if let Ok(fd) = self.open_dir(&rel) {
                        // Past the limit, what is below it is not watched: said as a loss.
                        if self.watch(&fd, &rel).is_err()
                            || self.walk(fd, &rel, &mut made, true).is_err()
                        {
                            made.push(Event::overflow(None));
                        }
                    }
                }
            } else if m.contains(AddWatchFlags::IN_DELETE) {
                made.push(Event::new(Kind::Delete, &rel, is_dir));
            } else if m.contains(AddWatchFlags::IN_MODIFY) {
                made.push(Event::new(Kind::Modify, &rel, false));
            }
        }
        if let Some((_, from, from_dir)) = moved_from {
            self.moved_out(&from, from_dir, &mut made);
        }
        out.extend(made.into_iter().filter(|e| self.filter.passes(e)));
        Ok(())
    }

    /// A directory moved within the tree: its watches (and those below) go by its new name.
    fn renamed(&mut self, from: &Path, to: &Path) {
        for p in self.dirs.values_mut() {
            if let Ok(below) = p.strip_prefix(from) {
                *p = to.join(below);
            }
        }
    }

    /// An entry moved out of the watched tree: a delete, and its watches go.
    fn moved_out(&mut self, from: &Path, is_dir: bool, made: &mut Vec<Event>) {
        made.push(Event::new(Kind::Delete, from, is_dir));
        if !is_dir {
            return;
        }
        let gone: Vec<WatchDescriptor> = self
            .dirs
            .iter()
            .filter(|(_, p)| p.starts_with(from))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            let _ = self.inotify.rm_watch(wd);
            self.dirs.remove(&wd);
        }
    }

    /// The inotify descriptor, to wait on.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.inotify.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(w: &mut Watcher) -> Vec<(Kind, String, Option<String>)> {
        let mut out = Vec::new();
        while w.read(&mut out).is_ok() {}
        out.into_iter()
            .map(|e| (e.kind, e.path, e.old_path))
            .collect()
    }

    fn watcher(root: &Path, sub: &str, recursive: bool) -> Watcher {
        let comps: Vec<std::ffi::OsString> = sub
            .split('/')
            .filter(|c| !c.is_empty())
            .map(Into::into)
            .collect();
        Watcher::start(root, &comps, recursive, Filter::new(&[], &[]).unwrap()).unwrap()
    }

    #[test]
    fn moves_pair_into_renames() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("d/sub")).unwrap();
        let mut w = watcher(root, "d", true);
        std::fs::write(root.join("d/sub/x"), b"1").unwrap();
        std::fs::rename(root.join("d/sub/x"), root.join("d/y")).unwrap();
        std::fs::remove_file(root.join("d/y")).unwrap();
        assert_eq!(
            events(&mut w),
            [
                (Kind::Create, "d/sub/x".into(), None),
                (Kind::Modify, "d/sub/x".into(), None),
                (Kind::Rename, "d/y".into(), Some("d/sub/x".into())),
                (Kind::Delete, "d/y".into(), None),
            ]
        );
    }
}
