//! Applying image layers (uncompressed tar streams) to a root directory.
//!
//! The bytes come from a registry we do not trust, so the `tar` crate is used only to parse; every
//! entry is written here, relative to directory fds. Parents are resolved with `openat2` and
//! `RESOLVE_BENEATH`, so a symlink written by this or an earlier layer can never carry a write out
//! of the root: a layer that tries is refused. Final components are never followed: what is there
//! is removed and the new entry created with `O_EXCL`/`O_NOFOLLOW` semantics.
//!
//! Layer semantics follow the OCI image spec (layer.md): `.wh.NAME` whiteouts and
//! `.wh..wh..opq` opaque markers act on lower layers only; a directory over a directory merges,
//! anything else replaces. Directory modes and mtimes are deferred to [`Unpacker::finish`] so a
//! read-only directory cannot block later writes and its mtime is not disturbed by them.
//!
//! After any error the root is half-written and must be discarded.

use std::cell::Cell;
use std::cmp::Reverse;
use std::collections::{BTreeMap, HashSet};
use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::rc::Rc;

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, openat2, AtFlags, OFlag, OpenHow, ResolveFlag};
use nix::sys::stat::{
    fchmod, fstat, fstatat, futimens, mkdirat, mknodat, utimensat, FileStat, Mode, SFlag,
    UtimensatFlags,
};
use nix::sys::time::TimeSpec;
use nix::unistd::{fchown, fchownat, linkat, symlinkat, unlinkat, Gid, Uid, UnlinkatFlags};

use crate::engine::sys;

/// How layers are applied.
#[derive(Debug, Clone)]
pub struct UnpackOptions {
    /// true when running as root: lchown entries to the tar's uid/gid. false (rootless): never
    /// chown.
    pub chown: bool,
    /// Refuse a layer whose entries' total size exceeds this (zip-bomb guard).
    pub max_layer_bytes: u64,
    /// Refuse a layer with more entries than this.
    pub max_entries: u64,
}

/// What one layer contained.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayerStats {
    /// Every entry the archive yielded, written or not (whiteouts, skipped types included).
    pub entries: u64,
    /// The sum of the entries' sizes.
    pub bytes: u64,
    /// Char and block devices, never created (the box gets its own /dev).
    pub skipped_devices: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum UnpackError {
    #[error("cannot open the image root {}: {source}", path.display())]
    Root { path: PathBuf, source: io::Error },
    /// The layer tries something no honest image does (a write outside the root, `..`).
    #[error("refusing the layer: entry {entry:?} {why}")]
    Hostile { entry: String, why: String },
    /// A header field we need is unreadable or out of range.
    #[error("malformed layer entry {entry:?}: {why}")]
    Malformed { entry: String, why: String },
    #[error("layer entry {entry:?} is a hardlink to {target:?}, {why}")]
    BadLink {
        entry: String,
        target: String,
        why: &'static str,
    },
    #[error("layer entry {entry:?}: the archive ends after {got} of its {size} bytes")]
    Truncated { entry: String, got: u64, size: u64 },
    #[error("refusing the layer at entry {entry:?}: {what} exceeds the limit of {limit}")]
    TooLarge {
        entry: String,
        what: &'static str,
        limit: u64,
    },
    /// The tar stream itself is unreadable (bad checksum, short header, read error).
    #[error("reading the layer archive after entry {after:?}: {source}")]
    Archive { after: String, source: io::Error },
    #[error("layer entry {entry:?}: {what}: {source}")]
    Io {
        entry: String,
        what: String,
        source: io::Error,
    },
}

/// Applies layers in order to one root directory.
pub struct Unpacker {
    root: OwnedFd,
    opts: UnpackOptions,
    /// Directory path (normalised, relative to the root; "" is the root) → the mode and mtime to
    /// apply in `finish`. A later layer's entry for the same directory replaces the value; removing
    /// a directory drops it and everything under it.
    dirs: BTreeMap<Vec<u8>, DirAttrs>,
    /// Paths the current layer created or overwrote, with all their ancestors: what an opaque
    /// marker or a whiteout in this layer must leave alone.
    layer_paths: HashSet<Vec<u8>>,
    buf: Vec<u8>,
}

#[derive(Debug, Clone, Copy)]
struct DirAttrs {
    mode: u32,
    /// None: leave the mtime alone (directories we created implicitly).
    mtime: Option<TimeSpec>,
}

/// Content copy buffer.
const COPY_BUF: usize = 128 * 1024;
/// Directories we create stay owner-writable until `finish`, whatever the layer says.
const DIR_WORKING_MODE: u32 = 0o700;
/// Mode of directories no entry describes (missing parents, the root): what Docker uses.
const DIR_DEFAULT_MODE: u32 = 0o755;
/// Nesting bound for recursive removal (each level holds one fd). Real images stay far below.
const MAX_REMOVE_DEPTH: usize = 128;
/// Bytes the tar crate may read beyond the entries' own content: headers, padding, PAX records,
/// GNU long names (which it buffers whole in memory). A pool plus an allowance per entry.
const META_POOL: u64 = 16 << 20;
const META_PER_ENTRY: u64 = 4096;

const S_ISUID: u32 = 0o4000;
const S_ISGID: u32 = 0o2000;

impl Unpacker {
    /// `root` is an existing empty directory (a temp dir the caller later renames into place).
    pub fn new(root: &Path, opts: UnpackOptions) -> Result<Unpacker, UnpackError> {
        // The root path is the caller's, so following symlinks in it is fine. O_RDONLY (not
        // O_PATH) so `finish` can fchmod it.
        let root_fd = nix::fcntl::open(
            root,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| UnpackError::Root {
            path: root.to_path_buf(),
            source: e.into(),
        })?;
        Ok(Unpacker {
            root: root_fd,
            opts,
            dirs: BTreeMap::new(),
            layer_paths: HashSet::new(),
            buf: vec![0; COPY_BUF],
        })
    }

    /// Applies one uncompressed layer tar, in order, on top of what earlier layers wrote.
    /// Reads the tar to its end-of-archive marker; the caller drains any trailing bytes itself.
    pub fn apply_layer(&mut self, tar: &mut dyn Read) -> Result<LayerStats, UnpackError> {
        self.layer_paths.clear();
        let budget = Rc::new(Budget {
            allowed: Cell::new(META_POOL),
            over: Cell::new(false),
        });
        let mut archive = tar::Archive::new(Budgeted {
            inner: tar,
            read: 0,
            budget: budget.clone(),
        });
        let mut stats = LayerStats::default();
        let mut last = String::from("<start of archive>");
        let entries = archive
            .entries()
            .map_err(|e| stream_error(&budget, &last, e))?;
        for entry in entries {
            let mut entry = entry.map_err(|e| stream_error(&budget, &last, e))?;
            last = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
            stats.entries += 1;
            stats.bytes = stats.bytes.saturating_add(entry.size());
            if stats.entries > self.opts.max_entries {
                return Err(UnpackError::TooLarge {
                    entry: last,
                    what: "the number of entries",
                    limit: self.opts.max_entries,
                });
            }
            if stats.bytes > self.opts.max_layer_bytes {
                return Err(UnpackError::TooLarge {
                    entry: last,
                    what: "the total size of the entries",
                    limit: self.opts.max_layer_bytes,
                });
            }
            // The entry's content (read or skipped) and the next header may now be read.
            budget.allowed.set(
                budget
                    .allowed
                    .get()
                    .saturating_add(entry.size())
                    .saturating_add(META_PER_ENTRY),
            );
            self.apply_entry(&mut entry, &last, &budget, &mut stats)?;
        }
        Ok(stats)
    }

    /// After the last layer: applies the deferred directory modes and mtimes (deepest first).
    /// The root gets 0755 unless a layer had a "." entry for it.
    pub fn finish(self) -> Result<(), UnpackError> {
        let mut dirs: Vec<(Vec<u8>, DirAttrs)> = self.dirs.into_iter().collect();
        if !dirs.iter().any(|(p, _)| p.is_empty()) {
            dirs.push((
                Vec::new(),
                DirAttrs {
                    mode: DIR_DEFAULT_MODE,
                    mtime: None,
                },
            ));
        }
        // Children before parents: a parent's mode may forbid reaching the child, and setting
        // the child's attributes must not come after the parent's mtime.
        dirs.sort_by_key(|(p, _)| Reverse(depth(p)));
        for (path, attrs) in dirs {
            let shown = show(&path);
            let io_err = |what: &str, e: Errno| UnpackError::Io {
                entry: shown.clone(),
                what: what.to_string(),
                source: e.into(),
            };
            let fd = if path.is_empty() {
                self.root
                    .try_clone()
                    .map_err(|e| io_err("duplicating the root fd", errno_of(&e)))?
            } else {
                match open_beneath(
                    &self.root,
                    &path,
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW,
                ) {
                    Ok(fd) => fd,
                    // Gone or no longer a plain directory: removals prune this list, so this is
                    // only defence in depth; never follow anything to apply a mode.
                    Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP | Errno::EXDEV) => continue,
                    Err(e) => return Err(io_err("opening the directory to set its mode", e)),
                }
            };
            fchmod(&fd, Mode::from_bits_truncate(attrs.mode))
                .map_err(|e| io_err("setting the directory mode", e))?;
            if let Some(t) = attrs.mtime {
                futimens(&fd, &t, &t).map_err(|e| io_err("setting the directory mtime", e))?;
            }
        }
        Ok(())
    }

    fn apply_entry(
        &mut self,
        entry: &mut tar::Entry<'_, Budgeted<'_>>,
        shown: &str,
        budget: &Budget,
        stats: &mut LayerStats,
    ) -> Result<(), UnpackError> {
        // The raw flag: the tar crate reads the pre-POSIX '\0' as '0', which we must tell apart.
        let kind = entry.header().as_old().linkflag[0];
        // Extension headers the iterator did not fold into an entry (PAX globals, or GNU/PAX
        // records behind a pre-POSIX header) carry nothing for us.
        if matches!(kind, b'x' | b'g' | b'L' | b'K') {
            return Ok(());
        }
        let raw = entry.path_bytes().into_owned();
        let path = normalise(&raw).map_err(|why| hostile(shown, why))?;
        // Pre-POSIX tars mark directories with a trailing slash on a '\0' (old regular) entry.
        let is_dir = kind == b'5' || (kind == b'\0' && raw.ends_with(b"/"));
        let (parent, name) = split_parent(&path);

        if name.starts_with(b".wh.") {
            return self.whiteout(shown, parent, name);
        }
        // A path under a whiteout-named directory (aufs's .wh..wh.plnk and the like) is not
        // image content.
        if path.split(|b| *b == b'/').any(|c| c.starts_with(b".wh.")) {
            return Ok(());
        }
        match kind {
            b'3' | b'4' => {
                stats.skipped_devices += 1;
                return Ok(());
            }
            b'0' | b'\0' | b'7' | b'1' | b'2' | b'5' | b'6' => {}
            // Sparse files, volume labels, multi-volume continuations, vendor types.
            _ => return Ok(()),
        }

        let meta = Meta::read(entry, shown)?;
        if path.is_empty() {
            if !is_dir {
                return Err(hostile(
                    shown,
                    "names the image root but is not a directory",
                ));
            }
            let root = self
                .root
                .try_clone()
                .map_err(|e| io(shown, "duplicating the root fd", e))?;
            return self.set_dir_attrs(shown, &path, &root, &meta);
        }

        let pfd = self
            .resolve_parent(shown, parent, true)?
            .ok_or_else(|| io(shown, "resolving its parent", Errno::ENOENT.into()))?;

        if kind == b'1' {
            return self.hardlink(shown, entry, &path, &pfd, name);
        }

        let existing =
            lstat(&pfd, name).map_err(|e| io(shown, "inspecting the existing path", e))?;
        let existing_dir = existing.as_ref().is_some_and(is_dir_stat);
        if existing.is_some() && !(is_dir && existing_dir) {
            self.remove(shown, &pfd, name, &path)?;
        }

        if is_dir {
            if !existing_dir {
                mkdirat(&pfd, name, Mode::from_bits_truncate(DIR_WORKING_MODE))
                    .map_err(|e| io(shown, "creating the directory", e.into()))?;
            }
            let fd = openat(
                &pfd,
                name,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(|e| io(shown, "opening the directory", e.into()))?;
            self.set_dir_attrs(shown, &path, &fd, &meta)?;
        } else {
            match kind {
                b'2' => {
                    let target = entry
                        .link_name_bytes()
                        .map(|t| t.into_owned())
                        .filter(|t| !t.is_empty())
                        .ok_or_else(|| malformed(shown, "is a symlink without a target"))?;
                    // Any target text is fine: it is only ever followed inside the box's root.
                    let target = CString::new(target)
                        .map_err(|_| hostile(shown, "has a NUL byte in its symlink target"))?;
                    symlinkat(target.as_c_str(), &pfd, name)
                        .map_err(|e| io(shown, "creating the symlink", e.into()))?;
                    if self.opts.chown {
                        fchownat(
                            &pfd,
                            name,
                            Some(meta.uid),
                            Some(meta.gid),
                            AtFlags::AT_SYMLINK_NOFOLLOW,
                        )
                        .map_err(|e| io(shown, "changing the symlink's owner", e.into()))?;
                    }
                    utimensat(
                        &pfd,
                        name,
                        &meta.mtime,
                        &meta.mtime,
                        UtimensatFlags::NoFollowSymlink,
                    )
                    .map_err(|e| io(shown, "setting the symlink's mtime", e.into()))?;
                }
                b'6' => {
                    mknodat(
                        &pfd,
                        name,
                        SFlag::S_IFIFO,
                        Mode::from_bits_truncate(0o600),
                        0,
                    )
                    .map_err(|e| io(shown, "creating the fifo", e.into()))?;
                    // Non-blocking read opens of a FIFO return at once; the fd lets us set the
                    // attributes without any path lookup that could follow something.
                    let fd = openat(
                        &pfd,
                        name,
                        OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                        Mode::empty(),
                    )
                    .map_err(|e| io(shown, "opening the fifo", e.into()))?;
                    self.set_file_attrs(shown, &fd, &meta, false)?;
                }
                _ => {
                    let fd = openat(
                        &pfd,
                        name,
                        OFlag::O_WRONLY
                            | OFlag::O_CREAT
                            | OFlag::O_EXCL
                            | OFlag::O_NOFOLLOW
                            | OFlag::O_CLOEXEC,
                        Mode::from_bits_truncate(0o600),
                    )
                    .map_err(|e| io(shown, "creating the file", e.into()))?;
                    let mut file = File::from(fd);
                    self.copy_content(shown, entry, &mut file, budget)?;
                    self.set_file_attrs(shown, &file, &meta, true)?;
                }
            }
        }
        self.mark(&path);
        Ok(())
    }

    /// `dir/.wh.NAME` removes `dir/NAME` from lower layers; `dir/.wh..wh..opq` empties `dir` of
    /// everything lower layers put there. Neither is ever written.
    fn whiteout(&mut self, shown: &str, parent: &[u8], name: &[u8]) -> Result<(), UnpackError> {
        if name == b".wh..wh..opq" {
            return self.opaque(shown, parent);
        }
        let victim = &name[4..];
        // Other `.wh.` names are reserved (aufs metadata and the like) and not image content;
        // "." and ".." are not names a whiteout can refer to.
        if victim.is_empty() || victim == b"." || victim == b".." || victim.starts_with(b".wh.") {
            return Ok(());
        }
        let path = join(parent, victim);
        if self.layer_paths.contains(&path) {
            return Ok(());
        }
        let Some(pfd) = self.resolve_parent(shown, parent, false)? else {
            return Ok(());
        };
        match lstat(&pfd, victim).map_err(|e| io(shown, "inspecting the whiteout's target", e))? {
            Some(_) => self.remove(shown, &pfd, victim, &path),
            None => Ok(()),
        }
    }

    /// Removes every child of `dir` this layer did not write, at any depth. Doing it when the
    /// marker is seen is right in either order: what this layer wrote before is tracked and kept,
    /// what it writes after is not there yet.
    fn opaque(&mut self, shown: &str, dir: &[u8]) -> Result<(), UnpackError> {
        let opened = if dir.is_empty() {
            openat(
                &self.root,
                ".",
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
        } else {
            open_beneath(
                &self.root,
                dir,
                OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW,
            )
        };
        let fd = match opened {
            Ok(fd) => fd,
            Err(Errno::EXDEV) => return Err(hostile(shown, ESCAPES)),
            // Nothing (or no directory) there: nothing lower to hide. A symlink there is
            // replaced when this layer's own entry for the directory comes.
            Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => return Ok(()),
            Err(e) => return Err(io(shown, "opening the opaque directory", e.into())),
        };
        let dirh =
            Dir::from_fd(fd).map_err(|e| io(shown, "reading the opaque directory", e.into()))?;
        self.purge(shown, dirh, dir, 0)
    }

    fn purge(
        &mut self,
        shown: &str,
        mut dirh: Dir,
        prefix: &[u8],
        level: usize,
    ) -> Result<(), UnpackError> {
        if level > MAX_REMOVE_DEPTH {
            return Err(hostile(
                shown,
                "makes an opaque directory deeper than 128 levels",
            ));
        }
        let names =
            list(&mut dirh).map_err(|e| io(shown, "listing the opaque directory", e.into()))?;
        for child in names {
            let path = join(prefix, &child);
            if !self.layer_paths.contains(&path) {
                self.remove(shown, &dirh, &child, &path)?;
                continue;
            }
            // Written by this layer: keep it, but a directory this layer merged into may still
            // hold lower-layer children.
            let st = lstat(&dirh, &child)
                .map_err(|e| io(shown, "inspecting an opaque directory's child", e))?;
            if st.as_ref().is_some_and(is_dir_stat) {
                let sub = Dir::openat(
                    &dirh,
                    child.as_slice(),
                    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
                    Mode::empty(),
                )
                .map_err(|e| io(shown, "opening an opaque directory's child", e.into()))?;
                self.purge(shown, sub, &path, level + 1)?;
            }
        }
        Ok(())
    }

    fn hardlink(
        &mut self,
        shown: &str,
        entry: &tar::Entry<'_, Budgeted<'_>>,
        path: &[u8],
        pfd: &OwnedFd,
        name: &[u8],
    ) -> Result<(), UnpackError> {
        let raw = entry
            .link_name_bytes()
            .map(|t| t.into_owned())
            .ok_or_else(|| malformed(shown, "is a hardlink without a target"))?;
        let target_shown = String::from_utf8_lossy(&raw).into_owned();
        let target = normalise(&raw).map_err(|why| {
            hostile(
                shown,
                &format!("is a hardlink to {target_shown:?}, which {why}"),
            )
        })?;
        let bad = |why| UnpackError::BadLink {
            entry: shown.to_string(),
            target: target_shown.clone(),
            why,
        };
        if target.is_empty() {
            return Err(bad("which is the image root"));
        }
        let (tparent, tname) = split_parent(&target);
        let tpfd = self
            .resolve_parent(shown, tparent, false)?
            .ok_or_else(|| bad("which does not exist"))?;
        match lstat(&tpfd, tname).map_err(|e| io(shown, "inspecting the hardlink's target", e))? {
            None => return Err(bad("which does not exist")),
            Some(st) if is_dir_stat(&st) => return Err(bad("which is a directory")),
            Some(_) => {}
        }
        if tname == name && same_dir(&tpfd, pfd) {
            // A link to itself (perhaps through an in-root symlink): unlinking first would lose it.
            self.mark(path);
            return Ok(());
        }
        if lstat(pfd, name)
            .map_err(|e| io(shown, "inspecting the existing path", e))?
            .is_some()
        {
            self.remove(shown, pfd, name, path)?;
        }
        // No AT_SYMLINK_FOLLOW: a link to a symlink is a link to the symlink itself.
        linkat(&tpfd, tname, pfd, name, AtFlags::empty()).map_err(|e| UnpackError::Io {
            entry: shown.to_string(),
            what: format!("linking to {target_shown:?}"),
            source: e.into(),
        })?;
        self.mark(path);
        Ok(())
    }

    /// Opens the directory `parent` (a normalised path) beneath the root. With `create`, missing
    /// directories are made; without, a missing one is `None`. A path that goes through a
    /// symlink leaving the root refuses the layer.
    fn resolve_parent(
        &mut self,
        shown: &str,
        parent: &[u8],
        create: bool,
    ) -> Result<Option<OwnedFd>, UnpackError> {
        if parent.is_empty() {
            return self
                .root
                .try_clone()
                .map(Some)
                .map_err(|e| io(shown, "duplicating the root fd", e));
        }
        match open_beneath(&self.root, parent, OFlag::O_PATH | OFlag::O_DIRECTORY) {
            Ok(fd) => Ok(Some(fd)),
            Err(Errno::ENOENT) if create => self.make_parents(shown, parent).map(Some),
            Err(Errno::ENOENT | Errno::ENOTDIR) if !create => Ok(None),
            Err(e) => Err(resolve_error(shown, e)),
        }
    }

    /// Creates the missing directories of `parent`, one component at a time, each resolved
    /// beneath the root like any other path.
    fn make_parents(&mut self, shown: &str, parent: &[u8]) -> Result<OwnedFd, UnpackError> {
        let mut fd = self
            .root
            .try_clone()
            .map_err(|e| io(shown, "duplicating the root fd", e))?;
        let mut end = 0;
        for comp in parent.split(|b| *b == b'/') {
            end += comp.len();
            let prefix = &parent[..end];
            end += 1;
            let flags = OFlag::O_PATH | OFlag::O_DIRECTORY;
            fd = match open_beneath(&self.root, prefix, flags) {
                Ok(next) => next,
                Err(Errno::ENOENT) => {
                    match mkdirat(&fd, comp, Mode::from_bits_truncate(DIR_WORKING_MODE)) {
                        Ok(()) => {
                            self.dirs.insert(
                                prefix.to_vec(),
                                DirAttrs {
                                    mode: DIR_DEFAULT_MODE,
                                    mtime: None,
                                },
                            );
                            self.mark(prefix);
                        }
                        // A dangling symlink: the open below reports it.
                        Err(Errno::EEXIST) => {}
                        Err(e) => return Err(io(shown, "creating a parent directory", e.into())),
                    }
                    open_beneath(&self.root, prefix, flags).map_err(|e| resolve_error(shown, e))?
                }
                Err(e) => return Err(resolve_error(shown, e)),
            };
        }
        Ok(fd)
    }

    /// Removes `name` in `dir` (a file, a symlink or a whole tree), never following symlinks, and
    /// forgets deferred attributes of directories that were in it.
    fn remove<D: AsFd>(
        &mut self,
        shown: &str,
        dir: &D,
        name: &[u8],
        path: &[u8],
    ) -> Result<(), UnpackError> {
        remove_tree(dir, name, 0).map_err(|e| match e {
            Removal::TooDeep => hostile(shown, "makes a directory tree deeper than 128 levels"),
            Removal::Sys(e) => io(shown, "removing what was there", e.into()),
        })?;
        self.forget_dirs(path);
        Ok(())
    }

    fn forget_dirs(&mut self, path: &[u8]) {
        self.dirs.remove(path);
        // Keys under `path/` sort between `path/` and `path0` ('0' follows '/').
        let lo = join(path, b"");
        let mut hi = path.to_vec();
        hi.push(b'0');
        let doomed: Vec<Vec<u8>> = self.dirs.range(lo..hi).map(|(k, _)| k.clone()).collect();
        for k in doomed {
            self.dirs.remove(&k);
        }
    }

    /// Records `path` and its ancestors as written by the current layer.
    fn mark(&mut self, path: &[u8]) {
        let mut p = path;
        while !p.is_empty() && self.layer_paths.insert(p.to_vec()) {
            p = match p.iter().rposition(|b| *b == b'/') {
                Some(i) => &p[..i],
                None => break,
            };
        }
    }

    fn copy_content(
        &mut self,
        shown: &str,
        entry: &mut tar::Entry<'_, Budgeted<'_>>,
        file: &mut File,
        budget: &Budget,
    ) -> Result<(), UnpackError> {
        let size = entry.size();
        let mut left = size;
        while left > 0 {
            let want = left.min(self.buf.len() as u64) as usize;
            let n = match entry.read(&mut self.buf[..want]) {
                // The tar size field is only trusted as far as the stream backs it.
                Ok(0) => {
                    return Err(UnpackError::Truncated {
                        entry: shown.to_string(),
                        got: size - left,
                        size,
                    })
                }
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(stream_error(budget, shown, e)),
            };
            file.write_all(&self.buf[..n])
                .map_err(|e| io(shown, "writing the file", e))?;
            left -= n as u64;
        }
        Ok(())
    }

    /// Owner, mode (set-id bits stripped), xattrs and mtime of a regular file or FIFO, on its fd.
    fn set_file_attrs<F: AsFd>(
        &self,
        shown: &str,
        fd: &F,
        meta: &Meta,
        xattrs: bool,
    ) -> Result<(), UnpackError> {
        if xattrs {
            set_xattrs(shown, fd, &meta.xattrs)?;
        }
        // chown before chmod: chown clears set-id bits (we strip them anyway).
        if self.opts.chown {
            fchown(fd, Some(meta.uid), Some(meta.gid))
                .map_err(|e| io(shown, "changing the owner", e.into()))?;
        }
        let mode = meta.mode & 0o7777 & !(S_ISUID | S_ISGID);
        fchmod(fd, Mode::from_bits_truncate(mode))
            .map_err(|e| io(shown, "setting the mode", e.into()))?;
        futimens(fd, &meta.mtime, &meta.mtime)
            .map_err(|e| io(shown, "setting the mtime", e.into()))?;
        Ok(())
    }

    /// Owner and xattrs now; mode and mtime deferred to `finish`.
    fn set_dir_attrs(
        &mut self,
        shown: &str,
        path: &[u8],
        fd: &OwnedFd,
        meta: &Meta,
    ) -> Result<(), UnpackError> {
        set_xattrs(shown, fd, &meta.xattrs)?;
        if self.opts.chown {
            fchown(fd, Some(meta.uid), Some(meta.gid))
                .map_err(|e| io(shown, "changing the owner", e.into()))?;
        }
        self.dirs.insert(
            path.to_vec(),
            DirAttrs {
                // Setuid means nothing on a directory; setgid and sticky do.
                mode: meta.mode & 0o7777 & !S_ISUID,
                mtime: Some(meta.mtime),
            },
        );
        Ok(())
    }
}

/// Header fields of one entry, PAX overrides applied.
struct Meta {
    mode: u32,
    uid: Uid,
    gid: Gid,
    mtime: TimeSpec,
    /// `user.*` attributes only.
    xattrs: Vec<(CString, Vec<u8>)>,
}

impl Meta {
    fn read(entry: &mut tar::Entry<'_, Budgeted<'_>>, shown: &str) -> Result<Meta, UnpackError> {
        let h = entry.header();
        let old = h.as_old();
        let mode = numeric(h.mode().map(u64::from), &old.mode)
            .map_err(|e| malformed(shown, &format!("unreadable mode: {e}")))?;
        let mode = u32::try_from(mode & 0o7777).unwrap_or(0);
        // The iterator already applied PAX uid/gid.
        let uid = numeric(h.uid(), &old.uid)
            .map_err(|e| malformed(shown, &format!("unreadable uid: {e}")))?;
        let gid = numeric(h.gid(), &old.gid)
            .map_err(|e| malformed(shown, &format!("unreadable gid: {e}")))?;
        let uid = u32::try_from(uid)
            .map_err(|_| malformed(shown, &format!("uid {uid} is out of range")))?;
        let gid = u32::try_from(gid)
            .map_err(|_| malformed(shown, &format!("gid {gid} is out of range")))?;
        let secs = numeric(h.mtime(), &old.mtime)
            .map_err(|e| malformed(shown, &format!("unreadable mtime: {e}")))?;
        let mut mtime = TimeSpec::new(i64::try_from(secs).unwrap_or(i64::MAX), 0);
        let mut xattrs = Vec::new();
        let pax = entry
            .pax_extensions()
            .map_err(|e| malformed(shown, &format!("unreadable PAX header: {e}")))?;
        // Records that do not parse are ignored, as the tar crate does for the path.
        for ext in pax.into_iter().flatten().flatten() {
            let key = ext.key_bytes();
            if key == b"mtime" {
                if let Some(t) = parse_pax_time(ext.value_bytes()) {
                    mtime = t;
                }
            } else if let Some(attr) = key.strip_prefix(b"SCHILY.xattr.") {
                // security.*, trusted.* and system.* are host policy (file caps, overlay
                // metadata, ACLs), never taken from an image.
                if attr.starts_with(b"user.") {
                    if let Ok(name) = CString::new(attr) {
                        xattrs.push((name, ext.value_bytes().to_vec()));
                    }
                }
            }
        }
        Ok(Meta {
            mode,
            uid: Uid::from_raw(uid),
            gid: Gid::from_raw(gid),
            mtime,
            xattrs,
        })
    }
}

/// A numeric header field. Empty (all NUL or space) reads as 0, as Go's archive/tar (which
/// wrote most layers) reads it; the tar crate calls it an error.
fn numeric(parsed: io::Result<u64>, raw: &[u8]) -> io::Result<u64> {
    if raw.iter().all(|b| *b == 0 || *b == b' ') {
        Ok(0)
    } else {
        parsed
    }
}

/// A PAX time: decimal seconds with an optional fraction. None for anything else (negative
/// times included), and the header's mtime stands.
fn parse_pax_time(v: &[u8]) -> Option<TimeSpec> {
    let (int, frac) = match v.iter().position(|b| *b == b'.') {
        Some(i) => (&v[..i], &v[i + 1..]),
        None => (v, &b""[..]),
    };
    if int.is_empty()
        || int.len() > 18
        || !int.iter().all(u8::is_ascii_digit)
        || !frac.iter().all(u8::is_ascii_digit)
    {
        return None;
    }
    let secs: i64 = std::str::from_utf8(int).ok()?.parse().ok()?;
    let mut nanos: i64 = 0;
    for i in 0..9 {
        nanos = nanos * 10 + frac.get(i).map_or(0, |d| i64::from(d - b'0'));
    }
    Some(TimeSpec::new(secs, nanos))
}

fn set_xattrs<F: AsFd>(
    shown: &str,
    fd: &F,
    xattrs: &[(CString, Vec<u8>)],
) -> Result<(), UnpackError> {
    for (name, value) in xattrs {
        match sys::fsetxattr(fd.as_fd(), name, value) {
            Ok(()) => {}
            // The store's filesystem has no user xattrs: the image works without them.
            Err(e) if e.raw_os_error() == Some(libc::EOPNOTSUPP) => {}
            Err(e) => {
                return Err(UnpackError::Io {
                    entry: shown.to_string(),
                    what: format!("setting xattr {}", name.to_string_lossy()),
                    source: e,
                })
            }
        }
    }
    Ok(())
}

/// Shared between the budgeted reader and the entry loop.
struct Budget {
    /// Total stream bytes that may be read so far.
    allowed: Cell<u64>,
    over: Cell<bool>,
}

/// The layer stream, limited to the content of the entries seen so far plus some room for
/// headers: the tar crate buffers GNU long names and PAX records whole, and this keeps a single
/// huge one from exhausting memory before any size check of ours runs.
struct Budgeted<'a> {
    inner: &'a mut dyn Read,
    read: u64,
    budget: Rc<Budget>,
}

impl Read for Budgeted<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let room = self.budget.allowed.get().saturating_sub(self.read);
        if room == 0 && !buf.is_empty() {
            self.budget.over.set(true);
            return Err(io::Error::other("layer metadata exceeds its budget"));
        }
        let want = buf.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.read += n as u64;
        Ok(n)
    }
}

fn stream_error(budget: &Budget, after: &str, e: io::Error) -> UnpackError {
    if budget.over.get() {
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

const ESCAPES: &str = "goes through a symlink that leaves the image root";

/// `openat2` beneath the root: no component (symlinks included) may leave it, no magic links.
fn open_beneath(root: &OwnedFd, path: &[u8], flags: OFlag) -> nix::Result<OwnedFd> {
    let how = OpenHow::new()
        .flags(flags | OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    // EAGAIN: a concurrent rename raced the ".." checks; the kernel asks for a retry.
    let mut tries = 0;
    loop {
        match openat2(root, path, how) {
            Err(Errno::EAGAIN) if tries < 16 => tries += 1,
            r => return r,
        }
    }
}

fn resolve_error(shown: &str, e: Errno) -> UnpackError {
    match e {
        Errno::EXDEV => hostile(shown, ESCAPES),
        Errno::ELOOP => hostile(shown, "goes through a symlink loop or a magic link"),
        Errno::ENOTDIR => io(shown, "a parent of it is not a directory", e.into()),
        Errno::ENOSYS => io(
            shown,
            "openat2 is not available (Linux 5.6 or later is needed)",
            e.into(),
        ),
        _ => io(shown, "resolving its parent", e.into()),
    }
}

enum Removal {
    TooDeep,
    Sys(Errno),
}

/// Removes `name` in `dir`, recursively if it is a directory, never following a symlink (only
/// single-component, `O_NOFOLLOW` lookups). Gone already is fine.
fn remove_tree<D: AsFd>(dir: &D, name: &[u8], level: usize) -> Result<(), Removal> {
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
fn list(dir: &mut Dir) -> nix::Result<Vec<Vec<u8>>> {
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
fn lstat<D: AsFd>(dir: &D, name: &[u8]) -> io::Result<Option<FileStat>> {
    match fstatat(dir, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(st)),
        Err(Errno::ENOENT) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Whether two directory fds name the same directory.
fn same_dir(a: &OwnedFd, b: &OwnedFd) -> bool {
    match (fstat(a), fstat(b)) {
        (Ok(x), Ok(y)) => x.st_dev == y.st_dev && x.st_ino == y.st_ino,
        _ => false,
    }
}

fn is_dir_stat(st: &FileStat) -> bool {
    st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// An entry name as a path relative to the root: leading "/" and "./" dropped (as Docker does),
/// "a//b" and "a/./b" collapsed, trailing "/" dropped. "" is the root itself.
fn normalise(raw: &[u8]) -> Result<Vec<u8>, &'static str> {
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

fn split_parent(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|b| *b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&path[..0], path),
    }
}

fn join(parent: &[u8], name: &[u8]) -> Vec<u8> {
    let mut p = Vec::with_capacity(parent.len() + 1 + name.len());
    if !parent.is_empty() {
        p.extend_from_slice(parent);
        p.push(b'/');
    }
    p.extend_from_slice(name);
    p
}

fn depth(path: &[u8]) -> usize {
    if path.is_empty() {
        0
    } else {
        1 + path.iter().filter(|b| **b == b'/').count()
    }
}

fn show(path: &[u8]) -> String {
    if path.is_empty() {
        ".".to_string()
    } else {
        String::from_utf8_lossy(path).into_owned()
    }
}

fn errno_of(e: &io::Error) -> Errno {
    Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO))
}

fn hostile(entry: &str, why: &str) -> UnpackError {
    UnpackError::Hostile {
        entry: entry.to_string(),
        why: why.to_string(),
    }
}

fn malformed(entry: &str, why: &str) -> UnpackError {
    UnpackError::Malformed {
        entry: entry.to_string(),
        why: why.to_string(),
    }
}

fn io(entry: &str, what: &str, source: io::Error) -> UnpackError {
    UnpackError::Io {
        entry: entry.to_string(),
        what: what.to_string(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    const MTIME: u64 = 1_600_000_000;

    /// A tar stream built entry by entry from raw headers, so hostile names can be written.
    struct T(Vec<u8>);

    impl T {
        fn new() -> T {
            T(Vec::new())
        }

        fn raw(mut self, name: &[u8], kind: u8, data: &[u8], link: &[u8], mode: u32) -> T {
            let mut h = tar::Header::new_gnu();
            {
                let old = h.as_old_mut();
                old.name[..name.len()].copy_from_slice(name);
                old.linkname[..link.len()].copy_from_slice(link);
            }
            h.as_old_mut().linkflag[0] = kind;
            h.set_size(data.len() as u64);
            h.set_mode(mode);
            h.set_mtime(MTIME);
            h.set_uid(0);
            h.set_gid(0);
            h.set_cksum();
            self.0.extend_from_slice(h.as_bytes());
            self.0.extend_from_slice(data);
            let pad = (512 - data.len() % 512) % 512;
            self.0.extend(std::iter::repeat_n(0u8, pad));
            self
        }

        fn file(self, name: &str, data: &[u8]) -> T {
            self.raw(name.as_bytes(), b'0', data, b"", 0o644)
        }

        fn file_mode(self, name: &str, data: &[u8], mode: u32) -> T {
            self.raw(name.as_bytes(), b'0', data, b"", mode)
        }

        fn dir(self, name: &str, mode: u32) -> T {
            self.raw(name.as_bytes(), b'5', b"", b"", mode)
        }

        fn symlink(self, name: &str, target: &str) -> T {
            self.raw(name.as_bytes(), b'2', b"", target.as_bytes(), 0o777)
        }

        fn hardlink(self, name: &str, target: &str) -> T {
            self.raw(name.as_bytes(), b'1', b"", target.as_bytes(), 0o644)
        }

        fn done(mut self) -> Vec<u8> {
            self.0.extend(std::iter::repeat_n(0u8, 1024));
            self.0
        }
    }

    fn opts() -> UnpackOptions {
        UnpackOptions {
            chown: false,
            max_layer_bytes: 1 << 30,
            max_entries: 100_000,
        }
    }

    /// A scratch directory holding the image root and a sibling that must never be touched.
    struct Scratch {
        _dir: tempfile::TempDir,
        root: PathBuf,
        sibling: PathBuf,
        base: PathBuf,
    }

    fn scratch() -> Scratch {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().to_path_buf();
        let root = base.join("root");
        let sibling = base.join("sibling");
        std::fs::create_dir(&root).unwrap();
        std::fs::create_dir(&sibling).unwrap();
        std::fs::write(sibling.join("secret"), b"s").unwrap();
        Scratch {
            _dir: dir,
            root,
            sibling,
            base,
        }
    }

    impl Scratch {
        /// Nothing appeared outside the root but what `scratch` made.
        fn assert_untouched(&self) {
            let mut outside: Vec<String> = std::fs::read_dir(&self.base)
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            outside.sort();
            assert_eq!(outside, ["root", "sibling"]);
            let sib: Vec<_> = std::fs::read_dir(&self.sibling).unwrap().collect();
            assert_eq!(sib.len(), 1);
            assert_eq!(std::fs::read(self.sibling.join("secret")).unwrap(), b"s");
        }
    }

    fn apply(u: &mut Unpacker, tar: &[u8]) -> Result<LayerStats, UnpackError> {
        u.apply_layer(&mut &tar[..])
    }

    fn unpack_all(root: &Path, layers: &[Vec<u8>]) -> Result<(), UnpackError> {
        let mut u = Unpacker::new(root, opts())?;
        for l in layers {
            apply(&mut u, l)?;
        }
        u.finish()
    }

    fn hostile_err(r: Result<impl std::fmt::Debug, UnpackError>, entry: &str) {
        match r {
            Err(e @ UnpackError::Hostile { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(entry), "{msg}");
            }
            other => panic!("expected a Hostile error for {entry}, got {other:?}"),
        }
    }

    #[test]
    fn happy_path() {
        let s = scratch();
        let layer = T::new()
            .dir("./", 0o755)
            .dir("./usr/", 0o755)
            .dir("usr/bin", 0o755)
            .file_mode("usr/bin/tool", b"#!/bin/sh\necho hi\n", 0o755)
            .symlink("bin", "usr/bin")
            .symlink("abs", "/etc/nowhere")
            .hardlink("usr/bin/tool2", "usr/bin/tool")
            .raw(b"run/fifo", b'6', b"", b"", 0o644)
            .file("implicit/deep/file", b"x")
            .done();
        let mut u = Unpacker::new(&s.root, opts()).unwrap();
        let stats = apply(&mut u, &layer).unwrap();
        assert_eq!(stats.entries, 9);
        assert_eq!(stats.skipped_devices, 0);
        // A long name (GNU longname) and PAX records through tar::Builder.
        let mut b = tar::Builder::new(Vec::new());
        let long = format!("usr/{}/f", "d".repeat(150));
        let mut h = tar::Header::new_gnu();
        h.set_size(3);
        h.set_mode(0o600);
        h.set_mtime(MTIME);
        b.append_data(&mut h, &long, &b"abc"[..]).unwrap();
        b.append_pax_extensions([
            ("SCHILY.xattr.user.test", &b"v"[..]),
            ("SCHILY.xattr.security.capability", &b"x"[..]),
            ("mtime", &b"1500000000.5"[..]),
        ])
        .unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        h.set_mtime(MTIME);
        b.append_data(&mut h, "usr/pax", &b"p"[..]).unwrap();
        apply(&mut u, &b.into_inner().unwrap()).unwrap();
        // Before finish, directories stay owner-writable.
        let m = std::fs::metadata(s.root.join("usr/bin")).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o700);
        u.finish().unwrap();

        let tool = s.root.join("usr/bin/tool");
        assert_eq!(std::fs::read(&tool).unwrap(), b"#!/bin/sh\necho hi\n");
        let m = std::fs::metadata(&tool).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o755);
        assert_eq!(m.mtime(), MTIME as i64);
        let m2 = std::fs::metadata(s.root.join("usr/bin/tool2")).unwrap();
        assert_eq!(m.ino(), m2.ino());
        assert_eq!(
            std::fs::read_link(s.root.join("bin")).unwrap(),
            Path::new("usr/bin")
        );
        assert_eq!(
            std::fs::read_link(s.root.join("abs")).unwrap(),
            Path::new("/etc/nowhere")
        );
        let l = std::fs::symlink_metadata(s.root.join("bin")).unwrap();
        assert_eq!(l.mtime(), MTIME as i64);
        let fifo = std::fs::symlink_metadata(s.root.join("run/fifo")).unwrap();
        assert!(std::os::unix::fs::FileTypeExt::is_fifo(&fifo.file_type()));
        assert_eq!(fifo.permissions().mode() & 0o777, 0o644);
        assert_eq!(
            std::fs::read(s.root.join("implicit/deep/file")).unwrap(),
            b"x"
        );
        // Implicit parents get Docker's default mode; explicit dirs theirs, with their mtime.
        let m = std::fs::metadata(s.root.join("implicit/deep")).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o755);
        let m = std::fs::metadata(s.root.join("usr/bin")).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o755);
        assert_eq!(m.mtime(), MTIME as i64);
        let m = std::fs::metadata(&s.root).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o755);
        assert_eq!(std::fs::read(s.root.join(&long)).unwrap(), b"abc");
        let m = std::fs::metadata(s.root.join("usr/pax")).unwrap();
        assert_eq!((m.mtime(), m.mtime_nsec()), (1_500_000_000, 500_000_000));
        s.assert_untouched();
    }

    #[test]
    fn whiteouts_remove_lower_files_and_trees() {
        let s = scratch();
        let lower = T::new()
            .file("a/file", b"1")
            .file("a/keep", b"2")
            .file("tree/x/y/z", b"3")
            .symlink("tree/link", "/")
            .symlink("a/sl", "../tree")
            .done();
        let upper = T::new()
            .file("a/.wh.file", b"")
            .raw(b"a/.wh.sl", b'0', b"", b"", 0o644)
            .file(".wh.tree", b"")
            .file("a/.wh.missing", b"")
            .file("nope/.wh.missing", b"")
            .file("a/.wh..wh.plnk", b"")
            .done();
        unpack_all(&s.root, &[lower, upper]).unwrap();
        assert!(!s.root.join("a/file").exists());
        assert!(std::fs::symlink_metadata(s.root.join("a/sl")).is_err());
        assert!(s.root.join("a/keep").exists());
        assert!(!s.root.join("tree").exists());
        // Whiteout files themselves are never written, nor missing parents created.
        assert!(!s.root.join("a/.wh.file").exists());
        assert!(!s.root.join(".wh.tree").exists());
        assert!(!s.root.join("a/.wh..wh.plnk").exists());
        assert!(!s.root.join("nope").exists());
        s.assert_untouched();
    }

    #[test]
    fn opaque_marker_before_own_entries() {
        let s = scratch();
        let lower = T::new()
            .file("d/old", b"1")
            .file("d/sub/old", b"2")
            .file("other", b"3")
            .done();
        let upper = T::new()
            .dir("d", 0o755)
            .file("d/.wh..wh..opq", b"")
            .file("d/new", b"4")
            .file("d/sub/new", b"5")
            .done();
        unpack_all(&s.root, &[lower, upper]).unwrap();
        assert!(!s.root.join("d/old").exists());
        assert!(!s.root.join("d/sub/old").exists());
        assert!(s.root.join("d/new").exists());
        assert!(s.root.join("d/sub/new").exists());
        assert!(s.root.join("other").exists());
        assert!(!s.root.join("d/.wh..wh..opq").exists());
    }

    #[test]
    fn opaque_marker_after_own_entries() {
        let s = scratch();
        let lower = T::new()
            .file("d/old", b"1")
            .file("d/sub/old", b"2")
            .file("d/same", b"lower")
            .file("other", b"3")
            .done();
        // d/sub exists below and is only merged into by this layer (no entry of its own).
        let upper = T::new()
            .file("d/new", b"4")
            .file("d/sub/new", b"5")
            .file("d/same", b"upper")
            .file("d/.wh..wh..opq", b"")
            .done();
        unpack_all(&s.root, &[lower, upper]).unwrap();
        assert!(!s.root.join("d/old").exists());
        assert!(!s.root.join("d/sub/old").exists());
        assert!(s.root.join("d/new").exists());
        assert!(s.root.join("d/sub/new").exists());
        assert_eq!(std::fs::read(s.root.join("d/same")).unwrap(), b"upper");
        assert!(s.root.join("other").exists());
    }

    #[test]
    fn opaque_root_and_missing_dir() {
        let s = scratch();
        let lower = T::new().file("x", b"1").file("y/z", b"2").done();
        let upper = T::new()
            .file("y/z", b"3")
            .file(".wh..wh..opq", b"")
            .file("missing/.wh..wh..opq", b"")
            .done();
        unpack_all(&s.root, &[lower, upper]).unwrap();
        assert!(!s.root.join("x").exists());
        assert_eq!(std::fs::read(s.root.join("y/z")).unwrap(), b"3");
        assert!(!s.root.join("missing").exists());
    }

    #[test]
    fn replacements() {
        let s = scratch();
        let lower = T::new()
            .file("was_dir/child/deep", b"1")
            .dir("was_dir/ro", 0o555)
            .file("was_file", b"2")
            .dir("stays", 0o700)
            .file("stays/child", b"3")
            .symlink("was_link", "../sibling/secret")
            .file("hl_src", b"inode")
            .hardlink("hl", "hl_src")
            .done();
        let upper = T::new()
            .file("was_dir", b"now a file")
            .dir("was_file", 0o751)
            .dir("stays", 0o750)
            .file("was_link", b"replaced, not written through")
            .file("hl", b"new inode")
            .done();
        unpack_all(&s.root, &[lower, upper]).unwrap();
        assert_eq!(
            std::fs::read(s.root.join("was_dir")).unwrap(),
            b"now a file"
        );
        let m = std::fs::symlink_metadata(s.root.join("was_file")).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.permissions().mode() & 0o7777, 0o751);
        // A directory over a directory merges; the later layer's mode wins.
        assert!(s.root.join("stays/child").exists());
        let m = std::fs::metadata(s.root.join("stays")).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o750);
        assert!(!std::fs::symlink_metadata(s.root.join("was_link"))
            .unwrap()
            .is_symlink());
        // Replacing a hardlinked name does not write into the shared inode.
        assert_eq!(std::fs::read(s.root.join("hl_src")).unwrap(), b"inode");
        assert_eq!(std::fs::read(s.root.join("hl")).unwrap(), b"new inode");
        s.assert_untouched();
    }

    #[test]
    fn dotdot_refused() {
        let s = scratch();
        let mut u = Unpacker::new(&s.root, opts()).unwrap();
        let r = apply(&mut u, &T::new().file("../escape", b"x").done());
        hostile_err(r, "../escape");
        let r = apply(
            &mut u,
            &T::new().file("a/../../sibling/secret", b"x").done(),
        );
        hostile_err(r, "a/../../sibling/secret");
        let r = apply(&mut u, &T::new().dir("..", 0o755).done());
        hostile_err(r, "..");
        s.assert_untouched();
        assert_eq!(std::fs::read_dir(&s.root).unwrap().count(), 0);
    }

    #[test]
    fn nul_and_empty_names_refused() {
        let s = scratch();
        let mut u = Unpacker::new(&s.root, opts()).unwrap();
        let mut b = tar::Builder::new(Vec::new());
        b.append_pax_extensions([("path", &b"a\0b"[..])]).unwrap();
        let mut h = tar::Header::new_gnu();
        h.set_size(0);
        h.set_mode(0o644);
        b.append_data(&mut h, "placeholder", &b""[..]).unwrap();
        hostile_err(apply(&mut u, &b.into_inner().unwrap()), "a\\0b");
        let r = apply(&mut u, &T::new().file("", b"x").done());
        hostile_err(r, "\"\"");
        let r = apply(&mut u, &T::new().file("./", b"x").done());
        hostile_err(r, "./");
    }

    #[test]
    fn absolute_name_lands_inside() {
        let s = scratch();
        let layer = T::new()
            .file("/etc/x", b"in")
            .file("//etc/./y", b"in2")
            .done();
        unpack_all(&s.root, &[layer]).unwrap();
        assert_eq!(std::fs::read(s.root.join("etc/x")).unwrap(), b"in");
        assert_eq!(std::fs::read(s.root.join("etc/y")).unwrap(), b"in2");
        s.assert_untouched();
    }

    #[test]
    fn symlinked_parent_leaving_root_refused() {
        let s = scratch();
        let sib = s.sibling.to_str().unwrap().to_string();
        for (link, target) in [
            ("evil", "/"),
            ("evil2", "../../.."),
            ("evil3", sib.as_str()),
        ] {
            let mut u = Unpacker::new(&s.root, opts()).unwrap();
            let entry = format!("{link}/pwned");
            let layer = T::new().symlink(link, target).file(&entry, b"x").done();
            hostile_err(apply(&mut u, &layer), &entry);
            // Also when the symlink came from an earlier layer, and for deeper paths.
            let entry = format!("{link}/deeper/pwned");
            hostile_err(apply(&mut u, &T::new().file(&entry, b"x").done()), &entry);
            let entry = format!("{link}/.wh.secret");
            hostile_err(apply(&mut u, &T::new().file(&entry, b"").done()), &entry);
            let entry = format!("{link}/sub/.wh..wh..opq");
            hostile_err(apply(&mut u, &T::new().file(&entry, b"").done()), &entry);
            // An opaque marker in the symlink itself is not followed: nothing to purge.
            let entry = format!("{link}/.wh..wh..opq");
            apply(&mut u, &T::new().file(&entry, b"").done()).unwrap();
        }
        assert!(!Path::new("/pwned").exists());
        s.assert_untouched();
    }

    #[test]
    fn symlinked_parent_inside_root_is_followed() {
        let s = scratch();
        let layer = T::new()
            .file("usr/lib/a", b"a")
            .symlink("lib", "usr/lib")
            .symlink("usr/l2", "../usr/lib")
            .file("lib/b", b"b")
            .file("usr/l2/c", b"c")
            .done();
        unpack_all(&s.root, &[layer]).unwrap();
        assert_eq!(std::fs::read(s.root.join("usr/lib/b")).unwrap(), b"b");
        assert_eq!(std::fs::read(s.root.join("usr/lib/c")).unwrap(), b"c");
    }

    #[test]
    fn hardlink_escapes_refused() {
        let s = scratch();
        let mut u = Unpacker::new(&s.root, opts()).unwrap();
        let r = apply(&mut u, &T::new().hardlink("link", "../../outside").done());
        hostile_err(r, "link");
        let r = apply(
            &mut u,
            &T::new().hardlink("link", "../sibling/secret").done(),
        );
        hostile_err(r, "link");
        let sib = s.sibling.to_str().unwrap().to_string();
        let layer = T::new()
            .symlink("out", &sib)
            .hardlink("l", "out/secret")
            .done();
        hostile_err(apply(&mut u, &layer), "\"l\"");
        assert!(std::fs::symlink_metadata(s.root.join("l")).is_err());
        // Absolute link names are paths in the root, like entry names.
        let layer = T::new().file("f", b"1").hardlink("l2", "/f").done();
        apply(&mut u, &layer).unwrap();
        assert_eq!(std::fs::read(s.root.join("l2")).unwrap(), b"1");
        assert_eq!(
            std::fs::metadata(s.sibling.join("secret")).unwrap().nlink(),
            1
        );
        s.assert_untouched();
    }

    #[test]
    fn bad_hardlinks_are_errors() {
        let s = scratch();
        let mut u = Unpacker::new(&s.root, opts()).unwrap();
        let r = apply(&mut u, &T::new().hardlink("l", "missing").done());
        let msg = r.unwrap_err().to_string();
        assert!(
            msg.contains("\"l\"") && msg.contains("\"missing\"") && msg.contains("does not exist"),
            "{msg}"
        );
        let r = apply(&mut u, &T::new().dir("d", 0o755).hardlink("l", "d").done());
        let msg = r.unwrap_err().to_string();
        assert!(msg.contains("\"d\"") && msg.contains("directory"), "{msg}");
        // A link to itself, directly or through an in-root symlink, leaves the file alone.
        let layer = T::new()
            .file("usr/lib/x", b"x")
            .symlink("lib", "usr/lib")
            .hardlink("usr/lib/x", "usr/lib/x")
            .hardlink("lib/x", "usr/lib/x")
            .done();
        apply(&mut u, &layer).unwrap();
        assert_eq!(std::fs::read(s.root.join("usr/lib/x")).unwrap(), b"x");
        let r = apply(&mut u, &T::new().hardlink("l", "./").done());
        assert!(matches!(r, Err(UnpackError::BadLink { .. })));
    }

    #[test]
    fn setid_bits_stripped_from_files_only() {
        let s = scratch();
        let layer = T::new()
            .file_mode("suid", b"x", 0o4755)
            .file_mode("sgid", b"x", 0o2755)
            .dir("shared", 0o2775)
            .dir("tmp", 0o1777)
            .raw(b"fifo", b'6', b"", b"", 0o4644)
            .done();
        unpack_all(&s.root, &[layer]).unwrap();
        let mode = |p: &str| {
            std::fs::symlink_metadata(s.root.join(p))
                .unwrap()
                .permissions()
                .mode()
                & 0o7777
        };
        assert_eq!(mode("suid"), 0o755);
        assert_eq!(mode("sgid"), 0o755);
        assert_eq!(mode("shared"), 0o2775);
        assert_eq!(mode("tmp"), 0o1777);
        assert_eq!(mode("fifo"), 0o644);
    }

    #[test]
    fn devices_skipped() {
        let s = scratch();
        let mut u = Unpacker::new(&s.root, opts()).unwrap();
        let layer = T::new()
            .raw(b"dev/null", b'3', b"", b"", 0o666)
            .raw(b"dev/sda", b'4', b"", b"", 0o660)
            .raw(b"weird", b'Z', b"", b"", 0o644)
            .done();
        let stats = apply(&mut u, &layer).unwrap();
        assert_eq!(stats.skipped_devices, 2);
        assert_eq!(stats.entries, 3);
        u.finish().unwrap();
        assert_eq!(std::fs::read_dir(&s.root).unwrap().count(), 0);
    }

    #[test]
    fn readonly_dir_filled_later() {
        let s = scratch();
        let l1 = T::new().dir("ro", 0o555).file("ro/a", b"a").done();
        let l2 = T::new()
            .file("ro/b", b"b")
            .dir("ro/sub", 0o500)
            .file("ro/sub/c", b"c")
            .done();
        let mut u = Unpacker::new(&s.root, opts()).unwrap();
        apply(&mut u, &l1).unwrap();
        let m = std::fs::metadata(s.root.join("ro")).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o700);
        apply(&mut u, &l2).unwrap();
        u.finish().unwrap();
        let m = std::fs::metadata(s.root.join("ro")).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o555);
        assert_eq!(m.mtime(), MTIME as i64);
        let m = std::fs::metadata(s.root.join("ro/sub")).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o500);
        assert_eq!(std::fs::read(s.root.join("ro/sub/c")).unwrap(), b"c");
        assert_eq!(std::fs::read(s.root.join("ro/a")).unwrap(), b"a");
    }

    #[test]
    fn chown_applies_header_ids() {
        if !nix::unistd::geteuid().is_root() {
            return; // chown to other ids needs root; the rootless path never chowns.
        }
        let s = scratch();
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        h.set_uid(1234);
        h.set_gid(5678);
        let mut b = tar::Builder::new(Vec::new());
        b.append_data(&mut h.clone(), "owned", &b"x"[..]).unwrap();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        b.append_link(&mut h, "owned_link", "owned").unwrap();
        let layer = b.into_inner().unwrap();
        let mut o = opts();
        o.chown = true;
        let mut u = Unpacker::new(&s.root, o).unwrap();
        apply(&mut u, &layer).unwrap();
        u.finish().unwrap();
        let m = std::fs::symlink_metadata(s.root.join("owned")).unwrap();
        assert_eq!((m.uid(), m.gid()), (1234, 5678));
        let m = std::fs::symlink_metadata(s.root.join("owned_link")).unwrap();
        assert_eq!((m.uid(), m.gid()), (1234, 5678));
    }

    #[test]
    fn size_limit_refused() {
        let s = scratch();
        let mut o = opts();
        o.max_layer_bytes = 10;
        let mut u = Unpacker::new(&s.root, o).unwrap();
        let layer = T::new().file("a", b"123456").file("b", b"123456").done();
        let err = apply(&mut u, &layer).unwrap_err();
        assert!(
            matches!(err, UnpackError::TooLarge { limit: 10, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("\"b\""));
        assert!(!s.root.join("b").exists());
    }

    #[test]
    fn entry_limit_refused() {
        let s = scratch();
        let mut o = opts();
        o.max_entries = 2;
        let mut u = Unpacker::new(&s.root, o).unwrap();
        let layer = T::new().file("a", b"").file("b", b"").file("c", b"").done();
        let err = apply(&mut u, &layer).unwrap_err();
        assert!(
            matches!(err, UnpackError::TooLarge { limit: 2, .. }),
            "{err}"
        );
        assert!(err.to_string().contains("number of entries"));
    }

    #[test]
    fn huge_long_name_refused_before_buffering() {
        let s = scratch();
        let mut u = Unpacker::new(&s.root, opts()).unwrap();
        // A GNU long name record bigger than the metadata budget.
        let big = vec![b'a'; (META_POOL + 4096) as usize];
        let layer = T::new()
            .raw(b"././@LongLink", b'L', &big, b"", 0o644)
            .file("x", b"")
            .done();
        let err = apply(&mut u, &layer).unwrap_err();
        assert!(matches!(err, UnpackError::TooLarge { .. }), "{err}");
    }

    #[test]
    fn truncated_stream_is_an_error() {
        let s = scratch();
        let layer = T::new().file("a", &[7u8; 3000]).file("b", b"b").done();
        let mut u = Unpacker::new(&s.root, opts()).unwrap();
        // Cut inside a's content.
        let err = apply(&mut u, &layer[..512 + 1000]).unwrap_err();
        assert!(
            matches!(
                err,
                UnpackError::Truncated {
                    got: 1000,
                    size: 3000,
                    ..
                }
            ),
            "{err}"
        );
        // Cut inside the next header.
        let mut u = Unpacker::new(&s.root, opts()).unwrap();
        let err = apply(&mut u, &layer[..512 + 3072 + 100]).unwrap_err();
        assert!(matches!(err, UnpackError::Archive { .. }), "{err}");
        // A corrupt checksum.
        let mut bad = layer.clone();
        bad[0] = b'z';
        let err = apply(&mut u, &bad).unwrap_err();
        assert!(matches!(err, UnpackError::Archive { .. }), "{err}");
    }

    #[test]
    fn root_entry_sets_root_attributes() {
        let s = scratch();
        let layer = T::new().dir(".", 0o750).file("f", b"").done();
        unpack_all(&s.root, &[layer]).unwrap();
        let m = std::fs::metadata(&s.root).unwrap();
        assert_eq!(m.permissions().mode() & 0o7777, 0o750);
        assert_eq!(m.mtime(), MTIME as i64);
        let mut u = Unpacker::new(&s.root, opts()).unwrap();
        hostile_err(apply(&mut u, &T::new().file(".", b"x").done()), ".");
    }

    #[test]
    fn old_style_entries() {
        let s = scratch();
        let layer = T::new()
            .raw(b"olddir/", b'\0', b"", b"", 0o711)
            .raw(b"olddir/f", b'\0', b"f", b"", 0o644)
            .raw(b"contig", b'7', b"c", b"", 0o644)
            .done();
        unpack_all(&s.root, &[layer]).unwrap();
        let m = std::fs::metadata(s.root.join("olddir")).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.permissions().mode() & 0o7777, 0o711);
        assert_eq!(std::fs::read(s.root.join("olddir/f")).unwrap(), b"f");
        assert_eq!(std::fs::read(s.root.join("contig")).unwrap(), b"c");
    }

    #[test]
    fn whiteout_spares_this_layers_own_entry() {
        let s = scratch();
        let lower = T::new().file("a", b"lower").done();
        let upper = T::new().file("a", b"upper").file(".wh.a", b"").done();
        unpack_all(&s.root, &[lower, upper]).unwrap();
        assert_eq!(std::fs::read(s.root.join("a")).unwrap(), b"upper");
    }

    #[test]
    fn too_deep_tree_removal_refused() {
        let s = scratch();
        let deep = vec!["d"; MAX_REMOVE_DEPTH + 2].join("/");
        let mut u = Unpacker::new(&s.root, opts()).unwrap();
        let mut b = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(0);
        h.set_mode(0o644);
        b.append_data(&mut h, format!("{deep}/f"), &b""[..])
            .unwrap();
        apply(&mut u, &b.into_inner().unwrap()).unwrap();
        let err = apply(&mut u, &T::new().file(".wh.d", b"").done()).unwrap_err();
        assert!(matches!(err, UnpackError::Hostile { .. }), "{err}");
    }

    #[test]
    fn unpacker_and_errors_cross_threads() {
        fn send<T: Send>() {}
        fn send_sync<T: Send + Sync>() {}
        send::<Unpacker>();
        send_sync::<UnpackError>();
    }

    #[test]
    fn normalise_names() {
        assert_eq!(normalise(b"./a//b/./c/").unwrap(), b"a/b/c");
        assert_eq!(normalise(b"/").unwrap(), b"");
        assert_eq!(normalise(b".").unwrap(), b"");
        assert!(normalise(b"a/..").is_err());
        assert!(normalise(b"..a").is_ok());
        assert!(normalise(b"").is_err());
        assert_eq!(
            parse_pax_time(b"12.5").map(|t| (t.tv_sec(), t.tv_nsec())),
            Some((12, 500_000_000))
        );
        assert!(parse_pax_time(b"-1").is_none());
        assert!(parse_pax_time(b"1e9").is_none());
    }
}
