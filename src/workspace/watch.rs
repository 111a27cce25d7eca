//! `result.files` at the cost of what changed, not of what exists (issue 34): a Sandbox keeps
//! the workspace's file stamps in memory, kept current by inotify watches on its directories,
//! instead of walking the whole tree before and after each call (a 10,000-file workspace cost
//! 100-300 ms a call here, dev build).
//!
//! A call marks where it starts (`begin`); at its end (`end`) the events that came since are
//! read, each path they name is stat'ed again, and a path whose stamp differs from the one it
//! had at the mark is reported, as the walks reported it. What each change replaced is kept
//! (`undo`) while a call that may ask for it is in flight.
//!
//! Nothing is missed silently: a file written through a shared mapping is seen when the last
//! reference to it is closed (IN_CLOSE_WRITE, at the box's end at the latest); a write through
//! another hard link to a tracked file restats every known link of its inode; a new directory
//! is watched, then walked (what was made in it before the watch is found by the walk); an
//! event queue overflow, or a watched workspace replaced, makes the next `begin`/`end` walk the
//! tree once and go on from there. Where watches can't be had (the user's inotify limit, past
//! `MAX_TRACKERS` workspaces in this process or `MAX_WATCHES` directories in one), or the
//! workspace holds more than `MAX_ENTRIES` files, the Sandbox walks as before.
//!
//! It is also the set-id wall of the calls it watches (`BoxSpec::setid_watched`): every regular
//! file it stats for an event, or finds in a walk, loses its setuid/setgid bits, so kern need
//! not walk the workspace after each box for them. A file whose bits can't be cleared is tried
//! again at every call's end, and each end says so (`Ended::unswept`) until it is gone.
//!
//! Every path is opened beneath the workspace's own descriptor without following a symlink
//! (`fsx::open`, `fsx::walk`): a box that swaps a directory for a symlink to a host directory
//! can't get a host file stat'ed or watched.

use super::track::{FileInfo, Stamp, EXCLUDED, MAX_ENTRIES};
use crate::fsx::walk::{self, Closed, Visit};
use crate::fsx::{open_beneath, Resolve};
use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, WatchDescriptor};
use nix::sys::stat::{fstatat, FileStat, Mode, SFlag};
use std::collections::HashMap;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// At most this many workspaces are watched by one process: each holds an inotify instance, of
/// the 128 a user has by default, and the user's other programs (editors, file managers) need
/// theirs. Past it, a Sandbox walks.
const MAX_TRACKERS: usize = 32;
/// A workspace of more directories than this is walked: each is a watch, of the user's
/// `max_user_watches`, which the user's other programs share.
const MAX_WATCHES: usize = 16_384;
static TRACKERS: AtomicUsize = AtomicUsize::new(0);

/// One of at most so many (`MAX_TRACKERS` of `TRACKERS`), held while a tracker watches.
struct Slot(&'static AtomicUsize);

impl Slot {
    fn take(count: &'static AtomicUsize, max: usize) -> Option<Slot> {
        if count.fetch_add(1, Ordering::SeqCst) >= max {
            count.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Slot(count))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The events that can change a file's stamp, or the set of files, in a watched directory.
fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_ATTRIB
        | AddWatchFlags::IN_CLOSE_WRITE
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVE_SELF
        | AddWatchFlags::IN_ONLYDIR
}

/// A workspace's files, kept current (see the module doc).
pub struct Tracker {
    inner: Mutex<Inner>,
}

struct Inner {
    /// The workspace, opened at the start (a host path the caller gave).
    root: OwnedFd,
    /// The watches (none once stopped), by descriptor: each directory's workspace-relative path.
    inotify: Option<Inotify>,
    /// This tracker's place among the process's (`MAX_TRACKERS`), let go when it stops.
    slot: Option<Slot>,
    dirs: HashMap<WatchDescriptor, PathBuf>,
    /// Every regular file's stamp, `.deps` aside.
    files: HashMap<PathBuf, Stamp>,
    /// The paths of inodes with more than one link, to restat them all when one changes.
    links: HashMap<u64, Vec<PathBuf>>,
    /// Numbers each change; a call's mark is the number it started at.
    seq: u64,
    /// What each change since the oldest mark in flight replaced.
    undo: Vec<(u64, PathBuf, Option<Stamp>)>,
    /// The marks of the calls in flight.
    marks: Vec<u64>,
    /// Events were lost (the queue overflowed, the workspace itself moved): walk once.
    lost: bool,
    /// Watches can't be had, or there are too many files: calls walk, as without a tracker.
    given_up: bool,
    /// Files whose set-id bits could not be cleared, with why (retried at each `end`).
    setid_left: HashMap<PathBuf, String>,
}

/// What a call's end found (`Mark::end`).
pub struct Ended {
    /// The regular files created or modified since the mark, sorted by path.
    pub files: Vec<FileInfo>,
    /// The workspace went past `MAX_ENTRIES` files (or its watches were lost) meanwhile: the
    /// list is partial, and the set-id wall incomplete.
    pub capped: bool,
    /// A file that keeps a set-id bit the tracker could not clear, with why.
    pub unswept: Option<String>,
}

/// Where one call started (`Tracker::begin`); `Tracker::end` gives its changes. Dropped
/// without `end` (the call failed), it lets its history go.
pub struct Mark {
    tracker: Arc<Tracker>,
    seq: u64,
    ended: bool,
}

impl Tracker {
    /// Watches `root` and records its files; None where that can't be done (no watches, more
    /// than `MAX_ENTRIES` files): calls then walk.
    pub fn start(root: &Path) -> Option<Arc<Tracker>> {
        let fd = nix::fcntl::open(
            root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .ok()?;
        let slot = Slot::take(&TRACKERS, MAX_TRACKERS)?;
        let inotify = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC).ok()?;
        let mut inner = Inner {
            root: fd,
            inotify: Some(inotify),
            slot: Some(slot),
            dirs: HashMap::new(),
            files: HashMap::new(),
            links: HashMap::new(),
            seq: 0,
            undo: Vec::new(),
            marks: Vec::new(),
            lost: false,
            given_up: false,
            setid_left: HashMap::new(),
        };
        inner.rescan();
        if inner.given_up {
            return None;
        }
        Some(Arc::new(Tracker {
            inner: Mutex::new(inner),
        }))
    }

    /// Marks a call's start, or None when the tracker gave up (the call walks).
    pub fn begin(self: &Arc<Self>) -> Option<Mark> {
        let mut inner = self.inner.lock().ok()?;
        inner.sync();
        if inner.given_up {
            return None;
        }
        if inner.marks.is_empty() {
            inner.undo.clear();
        }
        let seq = inner.seq;
        inner.marks.push(seq);
        Some(Mark {
            tracker: self.clone(),
            seq,
            ended: false,
        })
    }

    /// Lets the watches go (the Sandbox closed): later calls, if any, walk.
    pub fn stop(&self) {
        if let Ok(mut inner) = self.inner.lock() {
            inner.given_up = true;
            inner.inotify = None;
            inner.slot = None;
            inner.dirs.clear();
            inner.files.clear();
            inner.links.clear();
            inner.setid_left.clear();
        }
    }
}

impl Mark {
    /// What changed since this mark (`Ended`), every set-id bit of it cleared.
    pub fn end(mut self) -> Ended {
        self.ended = true;
        let Ok(mut inner) = self.tracker.inner.lock() else {
            return Ended {
                files: Vec::new(),
                capped: true,
                unswept: None,
            };
        };
        inner.sync();
        // What could not be cleared before is tried again (it may be gone, or fixed).
        let left: Vec<PathBuf> = inner.setid_left.keys().cloned().collect();
        for rel in left {
            inner.setid_left.remove(&rel);
            inner.restat(&rel, false);
        }
        let mut first: HashMap<&Path, &Option<Stamp>> = HashMap::new();
        for (seq, path, old) in &inner.undo {
            if *seq >= self.seq {
                first.entry(path.as_path()).or_insert(old);
            }
        }
        let mut out: Vec<FileInfo> = first
            .into_iter()
            .filter_map(|(path, old)| {
                let now = inner.files.get(path)?;
                let change = match old {
                    None => "created",
                    Some(o) if o != now => "modified",
                    Some(_) => return None,
                };
                Some(FileInfo {
                    path: path.to_string_lossy().into_owned(),
                    size: now.size,
                    change,
                })
            })
            .collect();
        out.sort_by(|a, b| a.path.cmp(&b.path));
        let capped = inner.given_up;
        let unswept = inner
            .setid_left
            .iter()
            .min()
            .map(|(rel, why)| format!("{}: {why}", rel.display()));
        inner.forget(self.seq);
        Ended {
            files: out,
            capped,
            unswept,
        }
    }
}

impl Drop for Mark {
    fn drop(&mut self) {
        if !self.ended {
            if let Ok(mut inner) = self.tracker.inner.lock() {
                inner.forget(self.seq);
            }
        }
    }
}

impl Inner {
    /// A call's mark is gone: history older than every remaining mark goes too.
    fn forget(&mut self, seq: u64) {
        if let Some(i) = self.marks.iter().position(|&m| m == seq) {
            self.marks.swap_remove(i);
        }
        match self.marks.iter().min() {
            Some(&oldest) => self.undo.retain(|(s, _, _)| *s >= oldest),
            None => self.undo.clear(),
        }
    }

    /// Sets `rel`'s stamp (None: not a regular file there), keeping what it replaced while a
    /// call may ask.
    fn set(&mut self, rel: &Path, now: Option<Stamp>) {
        let old = match now {
            Some(st) => self.files.insert(rel.to_path_buf(), st),
            None => self.files.remove(rel),
        };
        if old != now {
            if !self.marks.is_empty() {
                self.undo.push((self.seq, rel.to_path_buf(), old));
            }
            self.seq += 1;
        }
        if self.files.len() > MAX_ENTRIES {
            self.given_up = true;
        }
    }

    /// Reads every event queued so far and applies it; then walks once if events were lost.
    fn sync(&mut self) {
        if self.given_up {
            return;
        }
        let Some(inotify) = self.inotify.as_ref() else {
            return;
        };
        let mut queued = Vec::new();
        loop {
            match inotify.read_events() {
                Ok(events) if !events.is_empty() => queued.extend(events),
                Ok(_) | Err(Errno::EAGAIN) => break,
                Err(Errno::EINTR) => continue,
                Err(_) => {
                    self.lost = true;
                    break;
                }
            }
        }
        for ev in queued {
            self.apply(ev.wd, ev.mask, ev.name.map(PathBuf::from));
        }
        if self.lost {
            self.rescan();
        }
    }

    fn apply(&mut self, wd: WatchDescriptor, mask: AddWatchFlags, name: Option<PathBuf>) {
        if mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            self.lost = true;
            return;
        }
        let Some(dir) = self.dirs.get(&wd).cloned() else {
            return;
        };
        if mask.contains(AddWatchFlags::IN_IGNORED) {
            self.dirs.remove(&wd);
            return;
        }
        let Some(name) = name else {
            // The directory itself was deleted or moved: its parent's event says what became
            // of its files; the workspace's own is a workspace to find again.
            if dir.as_os_str().is_empty() {
                self.lost = true;
            }
            return;
        };
        let rel = dir.join(name);
        if rel == Path::new(EXCLUDED) {
            return;
        }
        if !mask.contains(AddWatchFlags::IN_ISDIR) {
            self.restat(&rel, true);
        } else if mask.intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO) {
            self.scan_new(&rel);
        } else if mask.intersects(AddWatchFlags::IN_DELETE | AddWatchFlags::IN_MOVED_FROM) {
            self.drop_below(&rel);
        }
    }

    /// Stats `rel` again (never following a symlink anywhere on its path), clearing its set-id
    /// bits; with `links`, the other known links of its inode too.
    fn restat(&mut self, rel: &Path, links: bool) {
        let now = self.stat(rel).filter(is_file);
        let stamp = now.as_ref().map(Stamp::of);
        self.set(rel, stamp);
        let Some(st) = now.filter(|st| st.st_nlink > 1) else {
            return;
        };
        let known = self.links.entry(st.st_ino).or_default();
        if !known.iter().any(|p| p == rel) {
            known.push(rel.to_path_buf());
        }
        if links {
            for other in known.clone() {
                if other != rel {
                    self.restat(&other, false);
                }
            }
        }
    }

    /// `rel`'s stat, without following a symlink; a regular file's set-id bits are cleared.
    fn stat(&mut self, rel: &Path) -> Option<FileStat> {
        let name = rel.file_name()?;
        let parent = rel.parent().unwrap_or(Path::new(""));
        let fd;
        let dir = if parent.as_os_str().is_empty() {
            &self.root
        } else {
            fd = open_beneath(
                &self.root,
                parent,
                OFlag::O_PATH | OFlag::O_DIRECTORY,
                Resolve::Strict,
            )
            .ok()?;
            &fd
        };
        let st = fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW).ok()?;
        let seen = walk::Seen::at(dir, name, rel, &st);
        if let Err(why) = clear_setid(&seen) {
            self.setid_left.insert(rel.to_path_buf(), why);
        }
        Some(st)
    }

    /// A directory that appeared at `rel`: watched, then walked (its files, its directories
    /// watched in turn).
    fn scan_new(&mut self, rel: &Path) {
        let Ok(fd) = open_beneath(
            &self.root,
            rel,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW,
            Resolve::Strict,
        ) else {
            return; // gone already: its parent's events say so
        };
        if self.watch(&fd, rel).is_err() {
            self.given_up = true;
            return;
        }
        self.walk(fd, rel);
    }

    /// Walks below the directory `fd` (at `rel`, watched already): every directory watched,
    /// every regular file stat'ed.
    fn walk(&mut self, fd: OwnedFd, rel: &Path) {
        let mut found: Vec<(PathBuf, Stamp, FileStat)> = Vec::new();
        let mut dirs: Vec<(PathBuf, OwnedFd)> = Vec::new();
        let mut unswept: Vec<(PathBuf, String)> = Vec::new();
        let walked = walk::walk_below(fd, rel.to_path_buf(), Closed::PassOver, |e| {
            if e.rel == Path::new(EXCLUDED) {
                return Visit::Skip;
            }
            if let Err(why) = clear_setid(e) {
                unswept.push((e.rel.to_path_buf(), why));
            }
            if e.is_file() {
                found.push((e.rel.to_path_buf(), Stamp::of(e.stat), *e.stat));
            } else if e.is_dir() {
                match e.open_path() {
                    Ok(fd) => dirs.push((e.rel.to_path_buf(), fd)),
                    Err(_) => return Visit::Skip,
                }
            }
            if found.len() > MAX_ENTRIES {
                Visit::Stop
            } else {
                Visit::Enter
            }
        });
        self.setid_left.extend(unswept);
        for (rel, fd) in dirs {
            if self.watch(&fd, &rel).is_err() {
                self.given_up = true;
                return;
            }
        }
        for (rel, stamp, st) in found {
            self.set(&rel, Some(stamp));
            if st.st_nlink > 1 {
                self.links.entry(st.st_ino).or_default().push(rel);
            }
        }
        if !matches!(walked, Ok(true)) {
            // Stopped past MAX_ENTRIES, or a directory changed under the walk: one more walk
            // (the next sync) sets it right, unless there are too many files to track.
            if self.files.len() > MAX_ENTRIES {
                self.given_up = true;
            } else {
                self.lost = true;
            }
        }
    }

    fn watch(&mut self, fd: &OwnedFd, rel: &Path) -> nix::Result<()> {
        // The descriptor's /proc link names the very inode opened, whatever is at `rel` now.
        let inotify = self.inotify.as_ref().ok_or(Errno::EBADF)?;
        if self.dirs.len() >= MAX_WATCHES {
            return Err(Errno::ENOSPC);
        }
        let wd = inotify.add_watch(format!("/proc/self/fd/{}", fd.as_raw_fd()).as_str(), mask())?;
        self.dirs.insert(wd, rel.to_path_buf());
        Ok(())
    }

    /// A directory at `rel` went (deleted, or moved away): its files are gone from there, and
    /// the watches below it (a moved directory's) with them.
    fn drop_below(&mut self, rel: &Path) {
        let gone: Vec<PathBuf> = self
            .files
            .keys()
            .filter(|p| p.starts_with(rel))
            .cloned()
            .collect();
        for p in gone {
            self.set(&p, None);
        }
        let watches: Vec<WatchDescriptor> = self
            .dirs
            .iter()
            .filter(|(_, p)| p.starts_with(rel))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in watches {
            if let Some(i) = self.inotify.as_ref() {
                let _ = i.rm_watch(wd);
            }
            self.dirs.remove(&wd);
        }
    }

    /// Watches and walks the whole workspace anew (the start, or events lost), recording what
    /// differs from what was known.
    fn rescan(&mut self) {
        self.lost = false;
        let Ok(inotify) = Inotify::init(InitFlags::IN_NONBLOCK | InitFlags::IN_CLOEXEC) else {
            self.given_up = true;
            return;
        };
        self.inotify = Some(inotify);
        self.dirs.clear();
        self.links.clear();
        let known = std::mem::take(&mut self.files);
        // Walked into an empty map, then compared: each difference is a change.
        let Ok(top) = nix::fcntl::openat(
            &self.root,
            ".",
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        ) else {
            self.given_up = true;
            return;
        };
        let saved_marks = std::mem::take(&mut self.marks);
        if self.watch(&top, Path::new("")).is_err() {
            self.given_up = true;
        } else {
            self.walk(top, Path::new(""));
        }
        self.marks = saved_marks;
        let now = std::mem::replace(&mut self.files, known);
        let mut paths: Vec<PathBuf> = self.files.keys().cloned().collect();
        paths.extend(now.keys().filter(|p| !self.files.contains_key(*p)).cloned());
        for p in paths {
            self.set(&p, now.get(&p).copied());
        }
    }
}

/// Clears a regular file's setuid/setgid bits, through the very inode seen; an error says why
/// it could not.
fn clear_setid(e: &walk::Seen<'_>) -> Result<(), String> {
    super::setid::clear_setid(e).map_err(|errno| format!("cannot clear its set-id bits: {errno}"))
}

fn is_file(st: &FileStat) -> bool {
    SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT == SFlag::S_IFREG
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(mark: Mark) -> Vec<(String, &'static str)> {
        let ended = mark.end();
        assert!(!ended.capped);
        assert_eq!(ended.unswept, None);
        ended
            .files
            .into_iter()
            .map(|f| (f.path, f.change))
            .collect()
    }

    #[test]
    fn what_changed_since_the_mark_is_reported_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("keep.txt"), "a").unwrap();
        std::fs::write(root.join("change.txt"), "a").unwrap();
        std::fs::create_dir_all(root.join(".deps/lib")).unwrap();
        std::fs::create_dir(root.join("old")).unwrap();
        std::fs::write(root.join("old/in.txt"), "a").unwrap();
        let t = Tracker::start(root).expect("tracker");
        let m = t.begin().unwrap();
        std::fs::write(root.join("change.txt"), "abc").unwrap();
        // A new tree, made faster than a watch can be put on each of its directories.
        std::fs::create_dir_all(root.join("new/deep/er")).unwrap();
        std::fs::write(root.join("new/deep/er/f.txt"), "x").unwrap();
        std::fs::write(root.join(".deps/lib/x.py"), "x").unwrap();
        // A directory moved: its files are new where they are now.
        std::fs::rename(root.join("old"), root.join("moved")).unwrap();
        assert_eq!(
            changes(m),
            vec![
                ("change.txt".into(), "modified"),
                ("moved/in.txt".into(), "created"),
                ("new/deep/er/f.txt".into(), "created"),
            ]
        );
        // The moved directory is watched where it is now.
        let m = t.begin().unwrap();
        std::fs::write(root.join("moved/in.txt"), "changed").unwrap();
        std::fs::write(root.join("new/deep/er/g.txt"), "y").unwrap();
        assert_eq!(
            changes(m),
            vec![
                ("moved/in.txt".into(), "modified"),
                ("new/deep/er/g.txt".into(), "created"),
            ]
        );
    }

    #[test]
    fn overlapping_calls_each_see_their_own_window() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("a"), "1").unwrap();
        let t = Tracker::start(root).unwrap();
        let first = t.begin().unwrap();
        std::fs::write(root.join("a"), "22").unwrap();
        let second = t.begin().unwrap();
        std::fs::write(root.join("b"), "3").unwrap();
        assert_eq!(changes(second), vec![("b".into(), "created")]);
        assert_eq!(
            changes(first),
            vec![("a".into(), "modified"), ("b".into(), "created")]
        );
        // Back and forth within a window is no change.
        let m = t.begin().unwrap();
        std::fs::write(root.join("c"), "x").unwrap();
        std::fs::remove_file(root.join("c")).unwrap();
        assert_eq!(changes(m), vec![]);
    }

    #[test]
    fn a_write_through_another_hard_link_and_a_mapping_are_seen() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("x")).unwrap();
        std::fs::create_dir(root.join("y")).unwrap();
        std::fs::write(root.join("x/f"), "1").unwrap();
        std::fs::hard_link(root.join("x/f"), root.join("y/f")).unwrap();
        std::fs::write(root.join("m"), vec![0u8; 4096]).unwrap();
        let t = Tracker::start(root).unwrap();
        let m = t.begin().unwrap();
        std::fs::write(root.join("x/f"), "22").unwrap();
        assert_eq!(
            changes(m),
            vec![("x/f".into(), "modified"), ("y/f".into(), "modified")]
        );
        // A write through a shared mapping: no write(2), seen when the file is closed. The
        // mtime is set on the first write fault; a second one in the same tick would not show.
        let m = t.begin().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        {
            let f = std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(root.join("m"))
                .unwrap();
            // SAFETY: a fresh shared mapping of a 4 KiB file we hold open; unmapped below.
            unsafe {
                let p = libc::mmap(
                    std::ptr::null_mut(),
                    4096,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    f.as_raw_fd(),
                    0,
                );
                assert_ne!(p, libc::MAP_FAILED);
                *(p as *mut u8) = 7;
                libc::munmap(p, 4096);
            }
        }
        assert_eq!(changes(m), vec![("m".into(), "modified")]);
    }

    #[test]
    fn lost_events_mean_one_walk_and_the_answer_is_still_right() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        let t = Tracker::start(root).unwrap();
        let m = t.begin().unwrap();
        std::fs::write(root.join("a"), "1").unwrap();
        t.inner.lock().unwrap().lost = true;
        std::fs::write(root.join("b"), "2").unwrap();
        assert_eq!(
            changes(m),
            vec![("a".into(), "created"), ("b".into(), "created")]
        );
    }

    #[test]
    fn one_process_watches_a_bounded_number_of_workspaces() {
        static COUNT: AtomicUsize = AtomicUsize::new(0);
        let a = Slot::take(&COUNT, 2).unwrap();
        let _b = Slot::take(&COUNT, 2).unwrap();
        assert!(Slot::take(&COUNT, 2).is_none());
        drop(a);
        assert!(Slot::take(&COUNT, 2).is_some());
        // A stopped tracker lets its place go.
        let dir = tempfile::tempdir().unwrap();
        let t = Tracker::start(dir.path()).unwrap();
        assert!(t.inner.lock().unwrap().slot.is_some());
        t.stop();
        assert!(t.inner.lock().unwrap().slot.is_none());
    }

    #[test]
    fn a_directory_swapped_for_a_symlink_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("secret"), "s").unwrap();
        let root = dir.path();
        std::fs::create_dir(root.join("d")).unwrap();
        let t = Tracker::start(root).unwrap();
        let m = t.begin().unwrap();
        std::fs::remove_dir(root.join("d")).unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("d")).unwrap();
        std::fs::write(outside.path().join("secret"), "changed").unwrap();
        assert_eq!(changes(m), vec![]);
    }

    #[test]
    fn set_id_bits_are_cleared_from_every_change_and_what_cannot_be_cleared_is_said() {
        use std::os::unix::fs::PermissionsExt;
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let chmod = |p: &Path, m: u32| {
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
        };
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("there"), "x").unwrap();
        chmod(&root.join("there"), 0o4755);
        let t = Tracker::start(root).expect("tracker");
        // The first walk clears what was there.
        assert_eq!(mode(&root.join("there")), 0o755);
        let m = t.begin().unwrap();
        chmod(&root.join("there"), 0o6711);
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(root.join("a/b/new"), "x").unwrap();
        chmod(&root.join("a/b/new"), 0o2755);
        // A directory's set-gid bit is no privilege: it stays.
        chmod(&root.join("a"), 0o2755);
        let ended = m.end();
        assert_eq!(ended.unswept, None);
        assert_eq!(mode(&root.join("there")), 0o711);
        assert_eq!(mode(&root.join("a/b/new")), 0o755);
        assert_eq!(mode(&root.join("a")), 0o2755);
        // Lost events: the walk that follows clears them too.
        t.inner.lock().unwrap().lost = true;
        std::fs::write(root.join("a/late"), "x").unwrap();
        chmod(&root.join("a/late"), 0o4700);
        let ended = t.begin().unwrap().end();
        assert_eq!(ended.unswept, None);
        assert_eq!(mode(&root.join("a/late")), 0o700);
    }
}
