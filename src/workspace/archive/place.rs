//! The restore side's second pass: placing validated members in the workspace through directory
//! fds (temp file and rename for files, merge or replace for directories), never following what a
//! box planted.

use std::collections::HashMap;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags};
use nix::sys::stat::{fchmod, fstatat, futimens, mkdirat, Mode};
use nix::sys::time::TimeSpec;
use nix::unistd::{fchown, unlinkat, Gid, Uid, UnlinkatFlags};

use super::members::{each_member, read_map, shown, Member};
use super::{dir_flags, Limits, RestoreReport, COPY_BUF, RACE_TRIES, TEMP_PREFIX};
use crate::error::{Error, Result};

/// The second pass.
pub(super) fn extract(
    top: &OwnedFd,
    file: &File,
    src: &Path,
    limits: &Limits,
    plan: &[[u8; 32]],
    owner: Option<(u32, u32)>,
) -> Result<RestoreReport> {
    let stopped = |what: &str, why: &str| {
        Error::Invalid(format!(
            "restore of {} stopped: {what} {why}; the members before it were written",
            src.display()
        ))
    };
    let owner = owner.map(|(u, g)| (Uid::from_raw(u), Gid::from_raw(g)));
    let mut report = RestoreReport::default();
    let mut make = Cursor::new(top);
    let mut files = FileWriter {
        owner,
        buf: vec![0u8; COPY_BUF],
        stopped: &stopped,
    };
    let mut dir_times: Vec<(String, TimeSpec)> = Vec::new();
    let mut index = 0usize;
    let count = each_member(file, limits, &stopped, |m, data| {
        let what = format!("member {}", shown(&m.path));
        if plan.get(index) != Some(&m.fingerprint()) {
            return Err(stopped(
                &what,
                "differs from the member validated before (the archive changed meanwhile)",
            ));
        }
        index += 1;
        let (dirs, name) = m.parent_and_name();
        let parent = make.make(&dirs, owner)?;
        if m.dir {
            let (fd, created) = make_dir(parent, name, &m.path, m.dir_mode(), owner)?;
            if !created {
                // Merged into an existing directory: the archive's mode wins.
                fchmod(&fd, m.dir_mode()).map_err(|e| {
                    Error::Runtime(format!("setting the mode of {:?}: {e}", m.path))
                })?;
            }
            // Writing its children changes a directory's mtime: set it at the end.
            dir_times.push((m.path.clone(), m.mtime()));
            report.dirs += 1;
        } else {
            files.write(parent, name, m, data)?;
            report.files += 1;
            report.bytes += m.size;
        }
        Ok(())
    })?;
    if usize::try_from(count).ok() != Some(plan.len()) {
        return Err(stopped(
            "the archive",
            "ended differently from when it was validated (it changed meanwhile)",
        ));
    }
    // Deepest first, so setting a child's mtime never comes after its parent's.
    dir_times.sort_by_key(|(p, _)| std::cmp::Reverse(p.split('/').count()));
    let mut look = Cursor::new(top);
    for (path, t) in dir_times {
        let comps: Vec<&str> = path.split('/').collect();
        // Gone or replaced meanwhile: nothing of ours to stamp.
        if let Some(fd) = look.find(&comps)? {
            futimens(fd, &t, &t)
                .map_err(|e| Error::Runtime(format!("setting the mtime of {path:?}: {e}")))?;
        }
    }
    Ok(report)
}

/// Writes file members: each to a fresh temp file in its directory, renamed over its name when
/// complete.
struct FileWriter<'a> {
    owner: Option<(Uid, Gid)>,
    buf: Vec<u8>,
    stopped: &'a dyn Fn(&str, &str) -> Error,
}

impl FileWriter<'_> {
    pub(super) fn write(
        &mut self,
        parent: &OwnedFd,
        name: &str,
        m: &Member,
        data: &mut dyn Read,
    ) -> Result<()> {
        let (tmp, fd) = create_temp(parent, &m.path)?;
        let result = self.fill_and_place(parent, name, &tmp, File::from(fd), m, data);
        if result.is_err() {
            let _ = unlinkat(parent, tmp.as_str(), UnlinkatFlags::NoRemoveDir);
        }
        result
    }

    /// Copies exactly `len` bytes of the member's data into `out`.
    pub(super) fn copy(
        &mut self,
        out: &mut File,
        data: &mut dyn Read,
        len: u64,
        m: &Member,
    ) -> Result<()> {
        let what = format!("member {}", shown(&m.path));
        let mut left = len;
        while left > 0 {
            let want = self
                .buf
                .len()
                .min(usize::try_from(left).unwrap_or(usize::MAX));
            let n = match data.read(&mut self.buf[..want]) {
                Ok(0) => {
                    return Err((self.stopped)(
                        &what,
                        "is cut short: the archive is truncated",
                    ))
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err((self.stopped)(&what, &format!("cannot be read ({e})"))),
            };
            out.write_all(&self.buf[..n]).map_err(|e| {
                Error::Runtime(format!("writing {:?} in the workspace: {e}", m.path))
            })?;
            left -= n as u64;
        }
        Ok(())
    }

    pub(super) fn fill_and_place(
        &mut self,
        parent: &OwnedFd,
        name: &str,
        tmp: &str,
        mut out: File,
        m: &Member,
        data: &mut dyn Read,
    ) -> Result<()> {
        let stopped = self.stopped;
        let what = format!("member {}", shown(&m.path));
        let io_err = |doing: &str, e: &dyn std::fmt::Display| {
            Error::Runtime(format!("{doing} {:?} in the workspace: {e}", m.path))
        };
        match m.sparse {
            None => self.copy(&mut out, data, m.size, m)?,
            Some(real) => {
                // The runs land at their offsets; what lies between stays a hole.
                let runs = read_map(data, m, real).map_err(|why| stopped(&what, &why))?;
                for (offset, len) in runs {
                    out.seek(SeekFrom::Start(offset))
                        .map_err(|e| io_err("writing", &e))?;
                    self.copy(&mut out, data, len, m)?;
                }
                out.set_len(real).map_err(|e| io_err("writing", &e))?;
            }
        }
        if let Some((uid, gid)) = self.owner {
            fchown(&out, Some(uid), Some(gid)).map_err(|e| io_err("setting the owner of", &e))?;
        }
        fchmod(&out, m.file_mode()).map_err(|e| io_err("setting the mode of", &e))?;
        let t = m.mtime();
        futimens(&out, &t, &t).map_err(|e| io_err("setting the mtime of", &e))?;
        drop(out);
        let in_the_way = || {
            stopped(
                &what,
                "is a file, but the workspace has a non-empty directory there (created since \
                 the archive was validated); remove it and restore again",
            )
        };
        // A rename cannot replace a directory: an empty one goes first. Anything else there (a
        // file, a symlink, a FIFO) is replaced by the rename itself, which never follows it.
        if let Ok(st) = fstatat(parent, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            if st.st_mode & libc::S_IFMT == libc::S_IFDIR {
                match unlinkat(parent, name, UnlinkatFlags::RemoveDir) {
                    Ok(()) | Err(Errno::ENOENT) => {}
                    Err(Errno::ENOTEMPTY | Errno::EEXIST) => return Err(in_the_way()),
                    Err(e) => return Err(io_err("removing the empty directory", &e)),
                }
            }
        }
        renameat(parent, tmp, parent, name).map_err(|e| match e {
            Errno::EISDIR | Errno::ENOTEMPTY | Errno::EEXIST => in_the_way(),
            e => io_err("moving into place", &e),
        })
    }
}

/// A new file with a name nobody else has, created `O_EXCL|O_NOFOLLOW` (a name a box guessed
/// and planted is skipped, never opened).
fn create_temp(parent: &OwnedFd, rel: &str) -> Result<(String, OwnedFd)> {
    crate::workspace::files::create_exclusive(parent, TEMP_PREFIX, 0o600).map_err(|e| match e {
        Errno::EEXIST => Error::Runtime(format!(
            "cannot find a free temp name next to {rel:?} in the workspace"
        )),
        e => Error::Runtime(format!(
            "cannot create a temp file next to {rel:?} in the workspace: {e}"
        )),
    })
}

/// `name` in `parent` as a real directory: reused if one is there, else created (after
/// removing whatever non-directory is in the way). Returns it and whether it was created; a
/// created one gets `mode` and `owner`.
fn make_dir(
    parent: &OwnedFd,
    name: &str,
    rel: &str,
    mode: Mode,
    owner: Option<(Uid, Gid)>,
) -> Result<(OwnedFd, bool)> {
    let io_err = |doing: &str, e: Errno| {
        Error::Runtime(format!(
            "{doing} the directory {rel:?} in the workspace: {e}"
        ))
    };
    // Retried: each step can race a box changing the same name; every retry starts over from
    // what is there now.
    for _ in 0..RACE_TRIES {
        match openat(parent, name, dir_flags(), Mode::empty()) {
            Ok(fd) => return Ok((fd, false)),
            Err(Errno::ENOENT) => {}
            // A symlink (ELOOP under O_NOFOLLOW), a file, a FIFO: the archive wins. unlinkat
            // removes the name itself, never what a symlink points to.
            Err(Errno::ELOOP | Errno::ENOTDIR) => {
                match unlinkat(parent, name, UnlinkatFlags::NoRemoveDir) {
                    Ok(()) | Err(Errno::ENOENT) => {}
                    // Became a directory meanwhile: use it.
                    Err(Errno::EISDIR) => continue,
                    Err(e) => return Err(io_err("removing what was in the way of", e)),
                }
            }
            Err(e) => return Err(io_err("opening", e)),
        }
        // Private until its mode is set; the umask does not get a say in the final mode.
        match mkdirat(parent, name, Mode::from_bits_truncate(0o700)) {
            Ok(()) => {}
            Err(Errno::EEXIST) => continue,
            Err(e) => return Err(io_err("creating", e)),
        }
        let fd = match openat(parent, name, dir_flags(), Mode::empty()) {
            Ok(fd) => fd,
            Err(Errno::ENOENT | Errno::ELOOP | Errno::ENOTDIR) => continue,
            Err(e) => return Err(io_err("opening", e)),
        };
        if let Some((uid, gid)) = owner {
            fchown(&fd, Some(uid), Some(gid)).map_err(|e| io_err("setting the owner of", e))?;
        }
        fchmod(&fd, mode).map_err(|e| io_err("setting the mode of", e))?;
        return Ok((fd, true));
    }
    Err(Error::Runtime(format!(
        "the workspace directory {rel:?} kept changing while it was restored; restore when no \
         box is running"
    )))
}

/// Directories opened from the workspace root, one component at a time, never through a
/// symlink. Keeps the chain of the last lookup open: archives list a directory's members
/// together, so most lookups reuse it.
pub(super) struct Cursor<'a> {
    root: &'a OwnedFd,
    chain: Vec<(String, OwnedFd)>,
}

impl<'a> Cursor<'a> {
    pub(super) fn new(root: &'a OwnedFd) -> Cursor<'a> {
        Cursor {
            root,
            chain: Vec::new(),
        }
    }

    /// Drops the opened directories not on the way to `dirs`.
    pub(super) fn keep_prefix(&mut self, dirs: &[&str]) {
        let shared = self
            .chain
            .iter()
            .zip(dirs)
            .take_while(|((have, _), want)| have == *want)
            .count();
        self.chain.truncate(shared);
    }

    pub(super) fn deepest(&self) -> &OwnedFd {
        self.chain.last().map_or(self.root, |(_, fd)| fd)
    }

    /// The directory `dirs` if every step is a real directory now; None if one is missing or
    /// is something else.
    pub(super) fn find(&mut self, dirs: &[&str]) -> Result<Option<&OwnedFd>> {
        self.keep_prefix(dirs);
        while self.chain.len() < dirs.len() {
            let i = self.chain.len();
            match openat(self.deepest(), dirs[i], dir_flags(), Mode::empty()) {
                Ok(fd) => self.chain.push((dirs[i].to_string(), fd)),
                Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => return Ok(None),
                Err(e) => {
                    return Err(Error::Runtime(format!(
                        "cannot open the workspace directory {:?}: {e}",
                        dirs[..=i].join("/")
                    )))
                }
            }
        }
        Ok(Some(self.deepest()))
    }

    /// The directory `dirs`, creating missing steps (0755) and replacing non-directories.
    pub(super) fn make(&mut self, dirs: &[&str], owner: Option<(Uid, Gid)>) -> Result<&OwnedFd> {
        self.keep_prefix(dirs);
        while self.chain.len() < dirs.len() {
            let i = self.chain.len();
            let rel = dirs[..=i].join("/");
            let mode = Mode::from_bits_truncate(0o755);
            let (fd, _) = make_dir(self.deepest(), dirs[i], &rel, mode, owner)?;
            self.chain.push((dirs[i].to_string(), fd));
        }
        Ok(self.deepest())
    }
}

/// The paths the archive has used so far, as a tree of components (shared prefixes stored
/// once): finds repeats and paths used both as a file and as a directory.
#[derive(Default)]
pub(super) struct Names {
    kinds: Vec<Used>,
    children: HashMap<(usize, String), usize>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Used {
    /// A parent of some member, not a member itself.
    Implied,
    Dir,
    File,
}

impl Names {
    pub(super) fn add(&mut self, path: &str, dir: bool) -> std::result::Result<(), String> {
        if self.kinds.is_empty() {
            self.kinds.push(Used::Dir); // the root
        }
        let comps: Vec<&str> = path.split('/').collect();
        let mut node = 0;
        for (i, comp) in comps.iter().enumerate() {
            let last = i + 1 == comps.len();
            let key = (node, comp.to_string());
            if let Some(&child) = self.children.get(&key) {
                match (self.kinds[child], last) {
                    (Used::File, false) => {
                        return Err(format!(
                            "is inside {:?}, which the archive also has as a file",
                            comps[..=i].join("/")
                        ))
                    }
                    (Used::Implied, true) if dir => self.kinds[child] = Used::Dir,
                    (Used::Implied, true) => {
                        return Err(
                            "is a file, but earlier members are inside it as a directory".into(),
                        )
                    }
                    (_, true) => return Err("appears more than once in the archive".into()),
                    (_, false) => {}
                }
                node = child;
            } else {
                let used = match (last, dir) {
                    (false, _) => Used::Implied,
                    (true, true) => Used::Dir,
                    (true, false) => Used::File,
                };
                self.kinds.push(used);
                node = self.kinds.len() - 1;
                self.children.insert(key, node);
            }
        }
        Ok(())
    }
}
