//! Applying image layers (uncompressed tar streams) to a root directory.
//!
//! The bytes come from a registry we do not trust, so the `tar` crate is used only to parse; every
//! entry is written here, relative to directory fds. Parents are resolved with `openat2` and
//! `RESOLVE_BENEATH` ([`crate::fsx::Resolve::Beneath`]), so a symlink written by this or an earlier
//! layer can never carry a write out of the root: a layer that tries is refused. Final components
//! are never followed: what is there is removed and the new entry created with
//! `O_EXCL`/`O_NOFOLLOW` semantics.
//!
//! Layer semantics follow the OCI image spec (layer.md): `.wh.NAME` whiteouts and
//! `.wh..wh..opq` opaque markers act on lower layers only; a directory over a directory merges,
//! anything else replaces. Directory modes and mtimes are deferred to [`Unpacker::finish`] so a
//! read-only directory cannot block later writes and its mtime is not disturbed by them.
//!
//! After any error the root is half-written and must be discarded.
//!
//! Here: the options, the errors and the `Unpacker` loop. `entries` applies one entry,
//! `metadata` reads header fields and sets attributes, `paths` holds the stream's type,
//! resolution beneath the root, tree removal and entry names.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashSet};
use std::io::{self, Read};
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::sys::stat::{fchmod, futimens, Mode};
use nix::sys::time::TimeSpec;

mod entries;
mod metadata;
mod paths;
#[cfg(test)]
mod tests;

use crate::fsx::{Cap, Capped};
use paths::{depth, errno_of, open_beneath, show, stream_error};

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
        let budget = Cap::new(META_POOL);
        let mut archive = tar::Archive::new(Capped::new(tar, budget.clone()));
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
            budget.raise(entry.size().saturating_add(META_PER_ENTRY));
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
}
