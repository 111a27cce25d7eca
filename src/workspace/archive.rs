//! Snapshots of the workspace as a gzip tar (`snapshot`) and restoring such an archive into a
//! workspace (`restore`).
//!
//! Both sides face hostile input. A box may have planted symlinks, FIFOs, hardlinks or huge sparse
//! files in the workspace, and may swap a directory for a symlink while we work; an archive may
//! name paths outside the workspace or carry links and devices. So no path is ever resolved
//! through something a box could have planted: directories are opened one component at a time
//! relative to their parent's fd with `O_NOFOLLOW|O_DIRECTORY`, and files are read, written and
//! changed through their own fds. The tar crate only lays out and parses headers.

use std::cell::Cell;
use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{open, openat, renameat, AtFlags, OFlag};
use nix::sys::stat::{fchmod, fstat, fstatat, futimens, mkdirat, FileStat, Mode};
use nix::sys::time::TimeSpec;
use nix::unistd::{fchown, unlinkat, Gid, Uid, UnlinkatFlags};
use sha2::{Digest, Sha256};
use tar::EntryType;

use crate::error::{Error, Result};

/// Bounds on what one snapshot or restore may contain. Every bound is checked before the data
/// it guards is read or written, so a hostile workspace or archive costs at most this much.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Entries (files, directories, and for a snapshot also the skipped symlinks and the like).
    /// Default 1,000,000.
    pub max_entries: u64,
    /// Sum of all file sizes. Default 64 GiB.
    pub max_total_bytes: u64,
    /// Size of any one file. Default 16 GiB.
    pub max_file_bytes: u64,
    /// Path components below the workspace root (`a/b.txt` is 2). Default 256.
    pub max_depth: usize,
}

impl Default for Limits {
    fn default() -> Limits {
        Limits {
            max_entries: 1_000_000,
            max_total_bytes: 64 << 30,
            max_file_bytes: 16 << 30,
            max_depth: 256,
        }
    }
}

/// What a snapshot archived.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SnapshotReport {
    /// Regular files archived (hardlinked ones once per name).
    pub files: u64,
    /// Directories archived.
    pub dirs: u64,
    /// Content bytes archived.
    pub bytes: u64,
    /// Workspace-relative paths left out: symlinks, FIFOs, sockets, devices, and names that are
    /// not UTF-8 (shown lossily; a directory so named is left out with everything in it). In
    /// walk order.
    pub skipped: Vec<String>,
}

/// What a restore wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RestoreReport {
    /// Regular-file members written.
    pub files: u64,
    /// Directory members created or merged into (parents the archive only implies not counted).
    pub dirs: u64,
    /// Content bytes written.
    pub bytes: u64,
}

/// The dependency directory `setup` installs: never archived, never restored.
const DEPS: &str = ".deps";
/// Linux's NAME_MAX and PATH_MAX: a longer member name could not be created anyway.
const MAX_COMPONENT: usize = 255;
const MAX_PATH: usize = 4096;
/// Bytes the tar parser may read between one member's data and the next member's header: GNU
/// long names and PAX records, which it buffers whole. Ample for a 4096-byte path; a larger run
/// of extension headers is refused before it can fill memory.
const HEADER_ROOM: u64 = 64 * 1024;
const COPY_BUF: usize = 128 * 1024;
/// mtimes past 9999-12-31 are clamped: larger values overflow some filesystems' timestamps.
const MAX_MTIME: u64 = 253_402_300_799;
/// Attempts at replacing a path a racing box keeps changing.
const RACE_TRIES: u32 = 8;
const TEMP_PREFIX: &str = ".kern-restore-";

fn dir_flags() -> OFlag {
    OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC
}

// ---------------------------------------------------------------------------------------------
// snapshot

/// Writes a gzip tar of the workspace `root` to `dest`.
///
/// Archived: regular files and directories, as `a/b.txt` and `a/` (GNU long names past 100
/// bytes), with their permission bits (set-id and sticky bits dropped), mtime, size, and uid/gid
/// 0 with no owner names. The top-level `.deps` directory is left out (`setup` reinstalls it).
/// Symlinks, FIFOs, sockets, devices and names that are not UTF-8 are never followed or archived;
/// they are listed in [`SnapshotReport::skipped`]. A file with several hardlinks is archived as a
/// plain file under each name, never as a tar link. Entries are in a stable order (names sorted
/// byte-wise, directories before their contents).
///
/// Every directory is opened relative to its parent with `O_NOFOLLOW|O_DIRECTORY` and every file
/// with `O_NOFOLLOW|O_NONBLOCK`, then checked to be the very inode the walk saw. So a box that
/// swaps a directory for a symlink to a host path cannot get host data into the archive: the
/// swap makes the snapshot fail with "changed while being archived" instead.
///
/// Consistency: the archive is what the walk saw; the caller makes sure no box writes to the
/// workspace meanwhile. A file that shrinks while it is read fails the snapshot; a file that
/// grows is archived at the size it had when opened.
///
/// A file with holes keeps them: its data runs (found with SEEK_DATA/SEEK_HOLE) are archived as
/// a PAX 1.0 sparse member, and the size limits count the bytes files hold, not their apparent
/// sizes (a 3 GiB sparse file holding 4 KiB costs 4 KiB).
///
/// Limits are checked before any data they guard is read: a file holding more than
/// `max_file_bytes` or a running total over `max_total_bytes` refuses the snapshot by name,
/// as do more than `max_entries` entries or a path deeper than `max_depth`.
///
/// `dest` must be absolute, its directory must exist and must not be inside `root` (the archive
/// would contain itself). The archive is written to a temp file in that directory and renamed
/// onto `dest` once complete; on any error the temp file is removed and `dest` is untouched.
pub fn snapshot(root: &Path, dest: &Path, limits: &Limits) -> Result<SnapshotReport> {
    let dest_dir = check_dest(root, dest)?;
    let top = open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        Error::Invalid(format!(
            "cannot open the workspace {} to snapshot it: {e}",
            root.display()
        ))
    })?;
    let tmp = tempfile::NamedTempFile::new_in(&dest_dir).map_err(|e| {
        Error::Runtime(format!(
            "cannot create a temp file in {} for the snapshot: {e}",
            dest_dir.display()
        ))
    })?;
    let failed =
        |e: io::Error| Error::Runtime(format!("writing the snapshot {}: {e}", dest.display()));
    // `builder` is declared after `tmp`, so on an error return it is dropped first, and then the
    // temp file is deleted.
    let mut builder = tar::Builder::new(GzEncoder::new(
        BufWriter::new(tmp.as_file()),
        Compression::default(),
    ));
    let report = archive_tree(top, &mut builder, limits)?;
    let gz = builder.into_inner().map_err(failed)?;
    let buffered = gz.finish().map_err(failed)?;
    buffered.into_inner().map_err(|e| failed(e.into_error()))?;
    // Durable before it gets its final name: a crash must not leave a truncated `dest`.
    tmp.as_file().sync_all().map_err(failed)?;
    tmp.persist(dest).map_err(|e| {
        Error::Runtime(format!(
            "cannot move the finished snapshot onto {}: {}",
            dest.display(),
            e.error
        ))
    })?;
    Ok(report)
}

/// The canonical directory `dest` goes in, after the checks `snapshot` documents.
fn check_dest(root: &Path, dest: &Path) -> Result<PathBuf> {
    if !dest.is_absolute() {
        return crate::invalid!(
            "snapshot destination {:?} is relative; pass an absolute path",
            dest
        );
    }
    let (Some(dir), Some(_)) = (dest.parent(), dest.file_name()) else {
        return crate::invalid!(
            "snapshot destination {:?} names no file; pass a path like /some/dir/workspace.tar.gz",
            dest
        );
    };
    let dir = dir.canonicalize().map_err(|e| {
        Error::Invalid(format!(
            "the directory of the snapshot destination {} cannot be used ({e}); create it first",
            dest.display()
        ))
    })?;
    let ws = root.canonicalize().map_err(|e| {
        Error::Invalid(format!(
            "cannot open the workspace {} to snapshot it: {e}",
            root.display()
        ))
    })?;
    if dir.starts_with(&ws) {
        return crate::invalid!(
            "snapshot destination {} is inside the workspace {}, so the archive would contain \
             itself; write it outside the workspace",
            dest.display(),
            root.display()
        );
    }
    Ok(dir)
}

/// One open directory of the walk and the names in it not visited yet.
struct Frame {
    fd: OwnedFd,
    rel: String,
    depth: usize,
    names: std::vec::IntoIter<OsString>,
}

/// The walk: depth first with an explicit stack (a deep tree cannot overflow ours), one fd per
/// level.
fn archive_tree<W: Write>(
    top: OwnedFd,
    builder: &mut tar::Builder<W>,
    limits: &Limits,
) -> Result<SnapshotReport> {
    let mut report = SnapshotReport::default();
    // Names listed so far, visited or not: checked at listing time, so neither the walk nor the
    // pending names can grow past `max_entries`.
    let mut listed = 0u64;
    let names = list_names(&top, "", &mut listed, limits)?;
    let mut stack = vec![Frame {
        fd: top,
        rel: String::new(),
        depth: 0,
        names: names.into_iter(),
    }];
    while let Some(frame) = stack.last_mut() {
        let Some(name) = frame.names.next() else {
            stack.pop();
            continue;
        };
        let Some(utf8) = name.to_str() else {
            report
                .skipped
                .push(join(&frame.rel, &name.to_string_lossy()));
            continue;
        };
        let rel = join(&frame.rel, utf8);
        let depth = frame.depth + 1;
        let seen = match fstatat(&frame.fd, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => st,
            // Removed between the listing and now: the walk never saw it.
            Err(Errno::ENOENT) => continue,
            Err(e) => {
                return Err(Error::Runtime(format!(
                    "cannot examine {rel:?} in the workspace: {e}"
                )))
            }
        };
        match seen.st_mode & libc::S_IFMT {
            libc::S_IFDIR => {
                check_depth(&rel, depth, limits)?;
                let (fd, _) = open_seen(&frame.fd, &name, &seen, OFlag::O_DIRECTORY, &rel)?;
                let mut header = header_for(&seen, EntryType::Directory, 0);
                builder
                    .append_data(&mut header, format!("{rel}/"), io::empty())
                    .map_err(|e| Error::Runtime(format!("archiving {rel:?}: {e}")))?;
                report.dirs += 1;
                let names = list_names(&fd, &rel, &mut listed, limits)?;
                stack.push(Frame {
                    fd,
                    rel,
                    depth,
                    names: names.into_iter(),
                });
            }
            libc::S_IFREG => {
                check_depth(&rel, depth, limits)?;
                // O_NONBLOCK|O_NOCTTY: if a FIFO or a terminal was swapped in after the fstatat,
                // the open returns at once and the inode check below refuses it.
                let flags = OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
                let (fd, now) = open_seen(&frame.fd, &name, &seen, flags, &rel)?;
                let size = u64::try_from(now.st_size).unwrap_or(0);
                let file = File::from(fd);
                // A file with holes keeps them: only its data runs are archived, and only they
                // count against the limits (what the box used, not what it declared).
                let runs = data_runs(&file, size, &now)
                    .map_err(|e| Error::Runtime(format!("examining {rel:?}: {e}")))?;
                let used = runs
                    .as_ref()
                    .map_or(size, |r| r.iter().map(|&(_, len)| len).sum());
                if used > limits.max_file_bytes {
                    return crate::invalid!(
                        "snapshot refused: {rel:?} holds {used} bytes, over the limit of {} bytes \
                         per file (max_file_bytes); remove or shrink it, or raise the limit",
                        limits.max_file_bytes
                    );
                }
                let total = report.bytes.saturating_add(used);
                if total > limits.max_total_bytes {
                    return crate::invalid!(
                        "snapshot refused at {rel:?} ({used} bytes): the files come to more \
                         than the limit of {} bytes in all (max_total_bytes); remove large \
                         files, or raise the limit",
                        limits.max_total_bytes
                    );
                }
                let mut shrank = false;
                let appended = match runs {
                    None => {
                        let mut header = header_for(&now, EntryType::Regular, size);
                        let mut data = Exactly {
                            file,
                            left: size,
                            shrank: false,
                        };
                        let r = builder.append_data(&mut header, &rel, &mut data);
                        shrank = data.shrank;
                        r
                    }
                    Some(runs) => append_sparse(builder, &rel, &now, file, runs, &mut shrank),
                };
                if let Err(e) = appended {
                    return Err(if shrank {
                        changed(&rel)
                    } else {
                        Error::Runtime(format!("archiving {rel:?}: {e}"))
                    });
                }
                report.files += 1;
                report.bytes = total;
            }
            _ => report.skipped.push(rel),
        }
    }
    Ok(report)
}

/// The names in a directory, sorted, with "." and ".." (and at the top, `.deps`) left out.
fn list_names(fd: &OwnedFd, rel: &str, listed: &mut u64, limits: &Limits) -> Result<Vec<OsString>> {
    let place = if rel.is_empty() { "." } else { rel };
    let cannot = |e: Errno| Error::Runtime(format!("cannot list {place:?} in the workspace: {e}"));
    let dup = fd
        .try_clone()
        .map_err(|e| cannot(Errno::from_raw(e.raw_os_error().unwrap_or(libc::EBADF))))?;
    let mut dir = Dir::from_fd(dup).map_err(cannot)?;
    let mut names = Vec::new();
    for ent in dir.iter() {
        let ent = ent.map_err(cannot)?;
        let name = ent.file_name().to_bytes();
        if name == b"." || name == b".." || (rel.is_empty() && name == DEPS.as_bytes()) {
            continue;
        }
        *listed += 1;
        if *listed > limits.max_entries {
            return crate::invalid!(
                "snapshot refused: the workspace has more than {} entries (max_entries; found \
                 while listing {place:?}); remove files, or raise the limit",
                limits.max_entries
            );
        }
        names.push(OsStr::from_bytes(name).to_os_string());
    }
    names.sort();
    Ok(names)
}

fn check_depth(rel: &str, depth: usize, limits: &Limits) -> Result<()> {
    if depth > limits.max_depth {
        return crate::invalid!(
            "snapshot refused: {rel:?} is {depth} levels deep, over the limit of {} (max_depth); \
             flatten the tree, or raise the limit",
            limits.max_depth
        );
    }
    Ok(())
}

/// Opens `name` without following it and checks it is still the inode `seen` described (same
/// device, inode and type), so what we read is what the walk examined.
fn open_seen(
    parent: &OwnedFd,
    name: &OsStr,
    seen: &FileStat,
    extra: OFlag,
    rel: &str,
) -> Result<(OwnedFd, FileStat)> {
    let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC | extra;
    let fd = openat(parent, name, flags, Mode::empty()).map_err(|e| match e {
        // Gone, or now a symlink, a non-directory, a socket: not what the walk saw.
        Errno::ENOENT | Errno::ELOOP | Errno::ENOTDIR | Errno::ENXIO => changed(rel),
        e => Error::Runtime(format!(
            "cannot open {rel:?} in the workspace to archive it: {e}; make it readable, or \
             remove it"
        )),
    })?;
    let now = fstat(&fd).map_err(|e| Error::Runtime(format!("cannot examine {rel:?}: {e}")))?;
    if now.st_dev != seen.st_dev
        || now.st_ino != seen.st_ino
        || now.st_mode & libc::S_IFMT != seen.st_mode & libc::S_IFMT
    {
        return Err(changed(rel));
    }
    Ok((fd, now))
}

fn changed(rel: &str) -> Error {
    Error::Runtime(format!(
        "{rel:?} changed while being archived; snapshot again when no box is writing to the \
         workspace"
    ))
}

fn header_for(st: &FileStat, kind: EntryType, size: u64) -> tar::Header {
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(kind);
    // Permission bits only: set-id and sticky bits are not carried to wherever this is restored.
    h.set_mode(st.st_mode & 0o777);
    h.set_uid(0);
    h.set_gid(0);
    h.set_mtime(u64::try_from(st.st_mtime).unwrap_or(0));
    h.set_size(size);
    h
}

/// A file's content, exactly `left` bytes: the header already promised that size, so bytes the
/// file gained since are not read, and a file that shrank is an error (a short entry would
/// corrupt the archive).
struct Exactly {
    file: File,
    left: u64,
    shrank: bool,
}

impl Read for Exactly {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.left == 0 || buf.is_empty() {
            return Ok(0);
        }
        let want = buf
            .len()
            .min(usize::try_from(self.left).unwrap_or(usize::MAX));
        let n = self.file.read(&mut buf[..want])?;
        if n == 0 {
            self.shrank = true;
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the file shrank while being read",
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// Past this many data runs, the closest runs of a sparse file are merged (the holes between
/// them archived as zeros): restore reads a member's map whole, and keeps it small.
const MAX_RUNS: usize = 1024;
/// The most runs restore accepts in one sparse map (archives made elsewhere may have more).
const MAX_MAP_RUNS: u64 = 100_000;

/// The data runs `(offset, length)` of a file with holes, found with SEEK_DATA/SEEK_HOLE; None
/// for a file without holes (or on a filesystem that can't tell). A hole at the end is a run
/// of length 0 at `size`, as GNU tar writes it.
fn data_runs(file: &File, size: u64, st: &FileStat) -> io::Result<Option<Vec<(u64, u64)>>> {
    use nix::unistd::{lseek, Whence};
    // Cheap test first: blocks that cover the size leave no room for holes worth keeping.
    if u64::try_from(st.st_blocks)
        .unwrap_or(u64::MAX)
        .saturating_mul(512)
        >= size
    {
        return Ok(None);
    }
    let end = i64::try_from(size).map_err(io::Error::other)?;
    let mut runs: Vec<(u64, u64)> = Vec::new();
    let mut pos = 0i64;
    while pos < end {
        let start = match lseek(file, pos, Whence::SeekData) {
            Ok(o) => o,
            Err(Errno::ENXIO) => break,
            Err(Errno::EINVAL | Errno::EOPNOTSUPP) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        if start >= end {
            break;
        }
        let stop = lseek(file, start, Whence::SeekHole)?.min(end);
        if stop <= start {
            return Err(io::Error::other("the file changed while being archived"));
        }
        runs.push((start as u64, (stop - start) as u64));
        pos = stop;
    }
    let mut gap = 4096;
    while runs.len() > MAX_RUNS {
        runs = merge_runs(runs, gap);
        gap = gap.saturating_mul(2);
    }
    if runs.last().is_none_or(|&(o, l)| o + l < size) {
        runs.push((size, 0));
    }
    Ok(Some(runs))
}

/// `runs` with every two neighbours less than `gap` apart made one.
fn merge_runs(runs: Vec<(u64, u64)>, gap: u64) -> Vec<(u64, u64)> {
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(runs.len());
    for (o, l) in runs {
        match out.last_mut() {
            Some((po, pl)) if o - (*po + *pl) < gap => *pl = o + l - *po,
            _ => out.push((o, l)),
        }
    }
    out
}

/// A file with holes as a PAX 1.0 sparse member (what GNU tar writes with `--sparse
/// --format=posix`, and GNU tar, bsdtar and Python's tarfile read): PAX records naming the
/// file and its real size, then a member whose data is the map (the run count, then offset
/// and length of each run, one decimal number a line, padded to 512 bytes) and the runs' bytes.
fn append_sparse<W: Write>(
    builder: &mut tar::Builder<W>,
    rel: &str,
    st: &FileStat,
    file: File,
    runs: Vec<(u64, u64)>,
    shrank: &mut bool,
) -> io::Result<()> {
    let size = u64::try_from(st.st_size).unwrap_or(0);
    let mut records = Vec::new();
    for (k, v) in [
        ("GNU.sparse.major", "1"),
        ("GNU.sparse.minor", "0"),
        ("GNU.sparse.name", rel),
        ("GNU.sparse.realsize", &size.to_string()),
    ] {
        records.extend_from_slice(&pax_record(k, v));
    }
    let mut pax = tar::Header::new_ustar();
    pax.set_entry_type(EntryType::XHeader);
    pax.set_path("././@PaxHeader")?;
    pax.set_mode(0o644);
    pax.set_size(records.len() as u64);
    pax.set_cksum();
    builder.append(&pax, records.as_slice())?;

    let mut map = format!("{}\n", runs.len());
    for (o, l) in &runs {
        map.push_str(&format!("{o}\n{l}\n"));
    }
    let mut map = map.into_bytes();
    map.resize(map.len().div_ceil(512) * 512, 0);
    let data: u64 = runs.iter().map(|&(_, l)| l).sum();
    // Readers that know nothing of sparse files unpack it under this name, beside the real one.
    let fake = match rel.rsplit_once('/') {
        Some((dir, base)) => format!("{dir}/GNUSparseFile.0/{base}"),
        None => format!("GNUSparseFile.0/{rel}"),
    };
    let mut header = header_for(st, EntryType::Regular, map.len() as u64 + data);
    let mut body = Runs {
        run: Exactly {
            file,
            left: 0,
            shrank: false,
        },
        runs: runs.into_iter(),
    };
    let r = builder.append_data(&mut header, fake, map.as_slice().chain(&mut body));
    *shrank = body.run.shrank;
    r
}

/// One PAX record, `<length> <key>=<value>\n`, whose length counts its own digits.
fn pax_record(key: &str, value: &str) -> Vec<u8> {
    let rest = key.len() + value.len() + 3;
    let mut len = rest + rest.to_string().len();
    if len.to_string().len() + rest != len {
        len += 1;
    }
    format!("{len} {key}={value}\n").into_bytes()
}

/// The data runs of a file, one after the other, each read [`Exactly`] (a file that shrank is
/// an error).
struct Runs {
    run: Exactly,
    runs: std::vec::IntoIter<(u64, u64)>,
}

impl Read for Runs {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.run.left == 0 {
            let Some((offset, len)) = self.runs.next() else {
                return Ok(0);
            };
            self.run.file.seek(SeekFrom::Start(offset))?;
            self.run.left = len;
        }
        self.run.read(buf)
    }
}

fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}/{name}")
    }
}

// ---------------------------------------------------------------------------------------------
// restore

/// Unpacks the gzip tar `src` into the workspace `root`, merging with what is there.
///
/// Two passes. The first reads the whole archive and writes nothing: every member must have a
/// relative UTF-8 path without `..` or NUL (after GNU long-name and PAX `path` processing, and
/// after dropping `.` components; at most 255 bytes a component and 4096 in all), must be a
/// regular file, a PAX 1.0 sparse file (with a map that is in order, within its size and
/// accounts for every stored byte) or a directory (symlinks, hardlinks, devices, FIFOs, other
/// sparse forms and anything else are refused by name), must not be under the top-level
/// `.deps`, must not repeat a path or use a file's path as a directory, and must fit `limits`
/// (entries, stored sizes per file and in all, depth). The first pass also refuses a file member where the workspace has a non-empty
/// directory. If anything is refused, the error (`Error::Invalid`) names the member and the
/// workspace is untouched.
///
/// The second pass reads the archive again, checks each member is the one the first pass
/// validated, and writes it. Directories are created (mode from the archive, always
/// owner-rwx, set-id and sticky bits dropped; 0755 for parents the archive only implies) or
/// merged into when a real directory is there; whatever else is in a directory's way (a file, a
/// symlink, a FIFO) is removed, never followed. A file is written to a fresh temp name in its
/// directory (`O_CREAT|O_EXCL|O_NOFOLLOW`) and renamed over its final name, which replaces a
/// symlink or FIFO there rather than writing through it; an empty directory there is removed
/// first. Modes (permission bits only), mtimes and, when `owner` is given, uid/gid are set
/// through the fds of what was written (owner only on what restore creates). Every directory is
/// opened relative to its parent's fd with `O_NOFOLLOW|O_DIRECTORY` starting from `root`, so
/// nothing is written outside `root` even while a box races to plant symlinks.
///
/// Not atomic: if the workspace or the archive changes between the passes (a running box, a
/// rewritten archive), the second pass can still stop part-way (a directory filled meanwhile
/// where a file goes, a member that differs from the validated one), as can an I/O error (a
/// full disk, a workspace directory the caller may not write to); members before that point
/// stay written, and the error says so. Entries in the workspace that the archive does not
/// mention are left alone.
pub fn restore(
    root: &Path,
    src: &Path,
    limits: &Limits,
    owner: Option<(u32, u32)>,
) -> Result<RestoreReport> {
    let top = open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| {
        Error::Invalid(format!(
            "cannot open the workspace {} to restore into it: {e}; it must be an existing \
             directory",
            root.display()
        ))
    })?;
    let file = File::open(src)
        .map_err(|e| Error::Invalid(format!("cannot open the archive {}: {e}", src.display())))?;
    let plan = validate(&top, &file, src, limits)?;
    (&file)
        .seek(SeekFrom::Start(0))
        .map_err(|e| Error::Runtime(format!("cannot rewind the archive {}: {e}", src.display())))?;
    extract(&top, &file, src, limits, &plan, owner)
}

/// One member as both passes see it, validated.
struct Member {
    /// Normal components joined by `/`.
    path: String,
    dir: bool,
    /// Bytes the member stores (for a sparse file: its map and data runs).
    size: u64,
    /// A PAX 1.0 sparse file: its real size (the runs are in its map).
    sparse: Option<u64>,
    mode: u32,
    mtime: u64,
}

impl Member {
    /// What the second pass must find again, member for member.
    fn fingerprint(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        h.update([u8::from(self.dir)]);
        h.update(self.size.to_le_bytes());
        h.update(self.mode.to_le_bytes());
        h.update(self.mtime.to_le_bytes());
        h.update(self.sparse.map_or([0xff; 8], u64::to_le_bytes));
        h.update(self.path.as_bytes());
        let mut out = [0u8; 32];
        out.copy_from_slice(&h.finalize());
        out
    }

    fn parent_and_name(&self) -> (Vec<&str>, &str) {
        let mut comps: Vec<&str> = self.path.split('/').collect();
        // A validated path has at least one component.
        let name = comps.pop().unwrap_or("");
        (comps, name)
    }

    fn file_mode(&self) -> Mode {
        Mode::from_bits_truncate(self.mode & 0o777)
    }

    /// Owner-rwx so restore (and the owner) can always fill and enter it.
    fn dir_mode(&self) -> Mode {
        Mode::from_bits_truncate((self.mode & 0o777) | 0o700)
    }

    fn mtime(&self) -> TimeSpec {
        TimeSpec::new(i64::try_from(self.mtime).unwrap_or(0), 0)
    }
}

/// The member-path filter: the raw name (after long-name processing) as a workspace-relative
/// path of normal components joined by `/`, or why it is refused.
fn member_path(raw: &[u8]) -> std::result::Result<String, String> {
    if raw.is_empty() {
        return Err("has an empty name".into());
    }
    if raw.contains(&0) {
        return Err("has a NUL byte in its name".into());
    }
    if raw.len() > MAX_PATH {
        return Err(format!("has a name longer than {MAX_PATH} bytes"));
    }
    let Ok(text) = std::str::from_utf8(raw) else {
        return Err("has a name that is not valid UTF-8".into());
    };
    if text.starts_with('/') {
        return Err("has an absolute path".into());
    }
    let mut comps = Vec::new();
    for comp in text.split('/') {
        match comp {
            // `a//b`, `./a`, `a/.`, `a/`: nothing to resolve.
            "" | "." => {}
            ".." => return Err("has a `..` component".into()),
            c if c.len() > MAX_COMPONENT => {
                return Err(format!(
                    "has a name component longer than {MAX_COMPONENT} bytes"
                ))
            }
            c => comps.push(c),
        }
    }
    if comps.is_empty() {
        return Err(
            "names the workspace root itself; build the archive from the directory's entries, \
             not from `.`"
                .into(),
        );
    }
    Ok(comps.join("/"))
}

/// A member name for a message: quoted, escaped, and cut short (names run to 4 KiB and more).
fn shown(name: &str) -> String {
    const KEEP: usize = 160;
    match name.char_indices().nth(KEEP) {
        Some((cut, _)) => format!("{:?}… ({} bytes)", &name[..cut], name.len()),
        None => format!("{name:?}"),
    }
}

fn describe(kind: EntryType) -> String {
    match kind {
        EntryType::Symlink => "symlink".into(),
        EntryType::Link => "hardlink".into(),
        EntryType::Char => "character device".into(),
        EntryType::Block => "block device".into(),
        EntryType::Fifo => "FIFO".into(),
        EntryType::GNUSparse => "GNU sparse file".into(),
        EntryType::XGlobalHeader => "PAX global header".into(),
        other => format!("member of tar type {:?}", char::from(other.as_byte())),
    }
}

/// The checks that need only the member itself; both passes run them.
fn inspect<R: Read>(
    entry: &mut tar::Entry<'_, R>,
    limits: &Limits,
) -> std::result::Result<Member, String> {
    let sparse = sparse_of(entry)?;
    // `path()` applies GNU long names and PAX `path` records: the name anyone would unpack to;
    // a sparse file's real name is in its own record.
    let raw: Vec<u8> = match &sparse {
        Some((name, _)) => name.clone(),
        None => entry
            .path()
            .map_err(|e| format!("has an unreadable name ({e})"))?
            .as_os_str()
            .as_bytes()
            .to_vec(),
    };
    let raw = raw.as_slice();
    let path = member_path(raw)?;
    let kind = entry.header().entry_type();
    let dir = match kind {
        EntryType::Regular | EntryType::Continuous => false,
        EntryType::Directory if sparse.is_none() => true,
        other => {
            return Err(format!(
                "is a {}; only regular files and directories are restored",
                describe(other)
            ))
        }
    };
    if !dir && raw.ends_with(b"/") {
        return Err("is a regular file with a name ending in `/`".into());
    }
    if path.split('/').next() == Some(DEPS) {
        return Err(format!(
            "is in {DEPS}, which restore never writes (`setup` reinstalls dependencies)"
        ));
    }
    let depth = path.split('/').count();
    if depth > limits.max_depth {
        return Err(format!(
            "is {depth} levels deep, over the limit of {} (max_depth)",
            limits.max_depth
        ));
    }
    let size = entry.size();
    if !dir && size > limits.max_file_bytes {
        return Err(format!(
            "declares {size} bytes, over the limit of {} bytes per file (max_file_bytes)",
            limits.max_file_bytes
        ));
    }
    let header = entry.header();
    let mode = header
        .mode()
        .map_err(|e| format!("has an unreadable mode ({e})"))?;
    let mtime = header
        .mtime()
        .map_err(|e| format!("has an unreadable mtime ({e})"))?
        .min(MAX_MTIME);
    Ok(Member {
        path,
        dir,
        size,
        sparse: sparse.map(|(_, real)| real),
        mode,
        mtime,
    })
}

/// A PAX 1.0 sparse file's name and real size, from its PAX records; None for any other
/// member. Other sparse formats are refused by name.
fn sparse_of<R: Read>(
    entry: &mut tar::Entry<'_, R>,
) -> std::result::Result<Option<(Vec<u8>, u64)>, String> {
    let Some(records) = entry
        .pax_extensions()
        .map_err(|e| format!("has unreadable PAX records ({e})"))?
    else {
        return Ok(None);
    };
    let (mut seen, mut major, mut minor, mut name, mut real) = (false, None, None, None, None);
    for record in records {
        let record = record.map_err(|e| format!("has an unreadable PAX record ({e})"))?;
        let key = record.key_bytes();
        if !key.starts_with(b"GNU.sparse.") {
            continue;
        }
        seen = true;
        let value = record.value_bytes().to_vec();
        match key {
            b"GNU.sparse.major" => major = Some(value),
            b"GNU.sparse.minor" => minor = Some(value),
            b"GNU.sparse.name" => name = Some(value),
            b"GNU.sparse.realsize" => real = Some(value),
            _ => {}
        }
    }
    if !seen {
        return Ok(None);
    }
    let real = real
        .as_deref()
        .and_then(|v| std::str::from_utf8(v).ok())
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|&r| i64::try_from(r).is_ok());
    match (major.as_deref(), minor.as_deref(), name, real) {
        (Some(b"1"), Some(b"0"), Some(name), Some(real)) => Ok(Some((name, real))),
        _ => Err(
            "is a sparse file in a form restore does not read (it reads PAX 1.0 sparse files, \
             as snapshot() and `tar --sparse --format=posix` write them)"
                .into(),
        ),
    }
}

/// Reads a sparse member's map from the start of its data: the runs `(offset, length)`,
/// checked to be in order, within the real size, and to account for every stored byte.
fn read_map(
    data: &mut dyn Read,
    m: &Member,
    real: u64,
) -> std::result::Result<Vec<(u64, u64)>, String> {
    let bad = |why: &str| format!("has a sparse map that {why}");
    let mut block = [0u8; 512];
    let mut consumed = 0u64;
    let mut nums: Vec<u64> = Vec::new();
    let (mut cur, mut digits) = (0u64, 0usize);
    let mut want: Option<u64> = None;
    while want.is_none_or(|n| nums.len() as u64 != 1 + 2 * n) {
        if consumed + 512 > m.size {
            return Err(bad("runs past the member's data"));
        }
        data.read_exact(&mut block)
            .map_err(|e| bad(&format!("cannot be read ({e})")))?;
        consumed += 512;
        for &b in &block {
            if want.is_some_and(|n| nums.len() as u64 == 1 + 2 * n) {
                break;
            }
            match b {
                b'0'..=b'9' if digits < 20 => {
                    cur = cur
                        .checked_mul(10)
                        .and_then(|c| c.checked_add(u64::from(b - b'0')))
                        .ok_or_else(|| bad("holds a number too large"))?;
                    digits += 1;
                }
                b'\n' if digits > 0 => {
                    nums.push(cur);
                    (cur, digits) = (0, 0);
                    if nums.len() == 1 {
                        if nums[0] > MAX_MAP_RUNS {
                            return Err(bad(&format!("lists more than {MAX_MAP_RUNS} runs")));
                        }
                        want = Some(nums[0]);
                    }
                }
                _ => return Err(bad("is malformed")),
            }
        }
    }
    let runs: Vec<(u64, u64)> = nums[1..].chunks(2).map(|c| (c[0], c[1])).collect();
    let mut end = 0u64;
    let mut stored = consumed;
    for &(o, l) in &runs {
        let stop = o.checked_add(l).filter(|&e| o >= end && e <= real);
        end = stop.ok_or_else(|| bad("has runs out of order or past the file's size"))?;
        stored = stored.saturating_add(l);
    }
    if stored != m.size {
        return Err(bad("does not match the member's size"));
    }
    Ok(runs)
}

/// Shared by the metered reader and the member loop.
struct Meter {
    left: Cell<u64>,
    tripped: Cell<bool>,
}

/// The decompressed stream, allowed to run only `left` bytes past the current member's header:
/// that member's data plus [`HEADER_ROOM`]. The tar parser buffers long names and PAX records
/// whole, and this keeps one huge record (a gzip bomb of a long name) from filling memory.
struct Metered<R> {
    inner: R,
    meter: Rc<Meter>,
}

impl<R: Read> Read for Metered<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let left = self.meter.left.get();
        if left == 0 && !buf.is_empty() {
            self.meter.tripped.set(true);
            return Err(io::Error::other("extension headers too large"));
        }
        let want = buf.len().min(usize::try_from(left).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..want])?;
        self.meter.left.set(left - n as u64);
        Ok(n)
    }
}

/// Runs `visit` on every member of the archive in order, after `inspect` and the entry-count
/// limit. `visit` gets the member's data as a reader (the second pass reads it; unread data is
/// skipped). `refuse` words the errors of the pass. Returns the number of members.
fn each_member(
    file: &File,
    limits: &Limits,
    refuse: &dyn Fn(&str, &str) -> Error,
    mut visit: impl FnMut(&Member, &mut dyn Read) -> Result<()>,
) -> Result<u64> {
    let meter = Rc::new(Meter {
        left: Cell::new(HEADER_ROOM),
        tripped: Cell::new(false),
    });
    let stream = Metered {
        inner: GzDecoder::new(BufReader::new(file)),
        meter: meter.clone(),
    };
    let mut archive = tar::Archive::new(stream);
    let mut last = String::new();
    let unreadable = |last: &str, e: io::Error| {
        let at = if last.is_empty() {
            "at its start".to_string()
        } else {
            format!("after member {}", shown(last))
        };
        if meter.tripped.get() {
            refuse(
                "the archive",
                &format!(
                    "has extension headers (long names, PAX records) over {HEADER_ROOM} bytes \
                     for one member {at}"
                ),
            )
        } else {
            refuse(
                "the archive",
                &format!("is not a complete, readable gzip tar: {e} {at}"),
            )
        }
    };
    let entries = archive.entries().map_err(|e| unreadable(&last, e))?;
    let mut count = 0u64;
    for entry in entries {
        let mut entry = entry.map_err(|e| unreadable(&last, e))?;
        let what = format!(
            "member {}",
            shown(&String::from_utf8_lossy(&entry.path_bytes()))
        );
        count += 1;
        if count > limits.max_entries {
            return Err(refuse(
                &what,
                &format!(
                    "is past the limit of {} members (max_entries)",
                    limits.max_entries
                ),
            ));
        }
        let member = inspect(&mut entry, limits).map_err(|why| refuse(&what, &why))?;
        // This member's data, padded to a 512-byte block, plus the next member's headers.
        let data = entry.size().saturating_add(511) & !511;
        meter.left.set(data.saturating_add(HEADER_ROOM));
        visit(&member, &mut entry)?;
        last = member.path;
    }
    Ok(count)
}

/// The first pass: everything `restore` documents, without writing. Returns the fingerprints
/// of the members in order.
fn validate(top: &OwnedFd, file: &File, src: &Path, limits: &Limits) -> Result<Vec<[u8; 32]>> {
    let refuse = |what: &str, why: &str| {
        Error::Invalid(format!(
            "restore of {} refused: {what} {why}; nothing was written to the workspace",
            src.display()
        ))
    };
    let mut names = Names::default();
    let mut look = Cursor::new(top);
    let mut total = 0u64;
    let mut plan = Vec::new();
    each_member(file, limits, &refuse, |m, data| {
        let what = format!("member {}", shown(&m.path));
        if let Some(real) = m.sparse {
            read_map(data, m, real).map_err(|why| refuse(&what, &why))?;
        }
        total = total.saturating_add(m.size);
        if total > limits.max_total_bytes {
            return Err(refuse(
                &what,
                &format!(
                    "brings the declared sizes past the limit of {} bytes in all \
                     (max_total_bytes)",
                    limits.max_total_bytes
                ),
            ));
        }
        names
            .add(&m.path, m.dir)
            .map_err(|why| refuse(&what, &why))?;
        if !m.dir {
            let (dirs, name) = m.parent_and_name();
            // A non-directory in the way of a parent is replaced, so only a complete chain of
            // real directories can lead to a conflict.
            if let Some(parent) = look.find(&dirs)? {
                if non_empty_dir(parent, name, &m.path)? {
                    return Err(refuse(
                        &what,
                        "is a file, but the workspace has a non-empty directory there; remove \
                         that directory first, or restore into another workspace",
                    ));
                }
            }
        }
        plan.push(m.fingerprint());
        Ok(())
    })?;
    Ok(plan)
}

/// Whether `name` in `parent` is a directory with entries (never following a symlink).
fn non_empty_dir(parent: &OwnedFd, name: &str, rel: &str) -> Result<bool> {
    let cannot = |e: Errno| Error::Runtime(format!("cannot examine {rel:?} in the workspace: {e}"));
    let fd = match openat(parent, name, dir_flags(), Mode::empty()) {
        Ok(fd) => fd,
        Err(Errno::ENOENT | Errno::ENOTDIR | Errno::ELOOP) => return Ok(false),
        Err(e) => return Err(cannot(e)),
    };
    let mut dir = Dir::from_fd(fd).map_err(cannot)?;
    for ent in dir.iter() {
        let ent = ent.map_err(cannot)?;
        let n = ent.file_name().to_bytes();
        if n != b"." && n != b".." {
            return Ok(true);
        }
    }
    Ok(false)
}

/// The second pass.
fn extract(
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
    fn write(
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
    fn copy(&mut self, out: &mut File, data: &mut dyn Read, len: u64, m: &Member) -> Result<()> {
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

    fn fill_and_place(
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
    super::files::create_exclusive(parent, TEMP_PREFIX, 0o600).map_err(|e| match e {
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
struct Cursor<'a> {
    root: &'a OwnedFd,
    chain: Vec<(String, OwnedFd)>,
}

impl<'a> Cursor<'a> {
    fn new(root: &'a OwnedFd) -> Cursor<'a> {
        Cursor {
            root,
            chain: Vec::new(),
        }
    }

    /// Drops the opened directories not on the way to `dirs`.
    fn keep_prefix(&mut self, dirs: &[&str]) {
        let shared = self
            .chain
            .iter()
            .zip(dirs)
            .take_while(|((have, _), want)| have == *want)
            .count();
        self.chain.truncate(shared);
    }

    fn deepest(&self) -> &OwnedFd {
        self.chain.last().map_or(self.root, |(_, fd)| fd)
    }

    /// The directory `dirs` if every step is a real directory now; None if one is missing or
    /// is something else.
    fn find(&mut self, dirs: &[&str]) -> Result<Option<&OwnedFd>> {
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
    fn make(&mut self, dirs: &[&str], owner: Option<(Uid, Gid)>) -> Result<&OwnedFd> {
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
struct Names {
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
    fn add(&mut self, path: &str, dir: bool) -> std::result::Result<(), String> {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::strategy::Strategy;
    use std::collections::BTreeMap;
    use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
    use std::path::Component;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant, SystemTime};
    use tar::Header;

    const MTIME: u64 = 1_600_000_000;

    /// Every entry under `root`, never following a symlink: kind, mode and content or target.
    fn listing(root: &Path) -> BTreeMap<PathBuf, String> {
        let mut out = BTreeMap::new();
        let mut todo = vec![root.to_path_buf()];
        while let Some(dir) = todo.pop() {
            for ent in std::fs::read_dir(&dir).unwrap() {
                let p = ent.unwrap().path();
                let md = std::fs::symlink_metadata(&p).unwrap();
                let mode = md.mode() & 0o7777;
                let desc = if md.file_type().is_symlink() {
                    format!("link -> {:?}", std::fs::read_link(&p).unwrap())
                } else if md.is_dir() {
                    todo.push(p.clone());
                    format!("dir {mode:o}")
                } else if md.is_file() {
                    format!("file {mode:o} {:?}", std::fs::read(&p).unwrap())
                } else {
                    format!("other {:o}", md.mode())
                };
                out.insert(p.strip_prefix(root).unwrap().to_path_buf(), desc);
            }
        }
        out
    }

    fn gzip(tar: &[u8]) -> Vec<u8> {
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(tar).unwrap();
        gz.finish().unwrap()
    }

    /// Every byte of a snapshot, decompressed.
    fn gunzip(path: &Path) -> Vec<u8> {
        let mut out = Vec::new();
        GzDecoder::new(File::open(path).unwrap())
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    /// A tar stream built member by member; `raw` writes name bytes straight into the header,
    /// past the checks `set_path` would make.
    struct T(tar::Builder<Vec<u8>>, Option<usize>);

    impl T {
        fn new() -> T {
            T(tar::Builder::new(Vec::new()), None)
        }

        /// Two harmless members first: a refusal later in the archive must still leave them
        /// unwritten.
        fn benign() -> T {
            T::new().dir("ok").file("ok/fine.txt", b"fine")
        }

        fn header(kind: EntryType, size: u64) -> Header {
            let mut h = Header::new_gnu();
            h.set_entry_type(kind);
            h.set_mode(if kind == EntryType::Directory {
                0o755
            } else {
                0o644
            });
            h.set_mtime(MTIME);
            h.set_size(size);
            h
        }

        fn file(mut self, name: &str, data: &[u8]) -> T {
            let mut h = T::header(EntryType::Regular, data.len() as u64);
            self.0.append_data(&mut h, name, data).unwrap();
            self
        }

        fn dir(mut self, name: &str) -> T {
            let mut h = T::header(EntryType::Directory, 0);
            self.0
                .append_data(&mut h, format!("{name}/"), io::empty())
                .unwrap();
            self
        }

        fn raw(self, name: &[u8], kind: EntryType, data: &[u8]) -> T {
            self.raw_link(name, kind, b"", data)
        }

        fn raw_link(mut self, name: &[u8], kind: EntryType, link: &[u8], data: &[u8]) -> T {
            let mut h = T::header(kind, data.len() as u64);
            h.as_old_mut().name[..name.len()].copy_from_slice(name);
            h.as_old_mut().linkname[..link.len()].copy_from_slice(link);
            h.set_cksum();
            self.0.append(&h, data).unwrap();
            self
        }

        /// A header that declares `size` bytes with none following.
        fn declared(mut self, name: &str, size: u64) -> T {
            let mut h = T::header(EntryType::Regular, size);
            h.set_path(name).unwrap();
            h.set_cksum();
            self.0.get_mut().extend_from_slice(h.as_bytes());
            self
        }

        /// A PAX extended header for the next member.
        fn pax(self, key: &str, value: &[u8]) -> T {
            let body = format!(" {key}=");
            // The record's length counts its own digits.
            let mut len = body.len() + value.len() + 1;
            len += len.to_string().len();
            if len.to_string().len() + body.len() + value.len() + 1 != len {
                len += 1;
            }
            let mut rec = format!("{len}{body}").into_bytes();
            rec.extend_from_slice(value);
            rec.push(b'\n');
            self.raw(b"PaxHeaders/x", EntryType::XHeader, &rec)
        }

        /// A GNU long-name header for the next member.
        fn longname(self, name: &[u8]) -> T {
            let mut data = name.to_vec();
            data.push(0);
            self.raw(b"././@LongLink", EntryType::GNULongName, &data)
        }

        /// The stream ends here, without end-of-archive blocks.
        fn cut(mut self) -> T {
            self.1 = Some(self.0.get_ref().len());
            self
        }

        fn done(self) -> Vec<u8> {
            let mut bytes = self.0.into_inner().unwrap();
            if let Some(len) = self.1 {
                bytes.truncate(len);
            }
            bytes
        }
    }

    /// A workspace with some content, two levels below a base directory that also holds a
    /// canary: anything escaping the workspace lands somewhere in `base`.
    struct Env {
        base: tempfile::TempDir,
        ws: PathBuf,
        canary: PathBuf,
        outside: PathBuf,
        archives: tempfile::TempDir,
    }

    impl Env {
        fn new() -> Env {
            let base = tempfile::tempdir().unwrap();
            let ws = base.path().join("a").join("ws");
            std::fs::create_dir_all(ws.join("keep")).unwrap();
            std::fs::write(ws.join("keep/old.txt"), "old").unwrap();
            std::fs::write(ws.join("x.txt"), "x").unwrap();
            let canary = base.path().join("canary.txt");
            std::fs::write(&canary, "canary").unwrap();
            let outside = base.path().join("outside");
            std::fs::create_dir(&outside).unwrap();
            std::fs::write(outside.join("f.txt"), "outside").unwrap();
            Env {
                ws,
                canary,
                outside,
                base,
                archives: tempfile::tempdir().unwrap(),
            }
        }

        fn write(&self, tar: &[u8]) -> PathBuf {
            let path = self.archives.path().join("in.tar.gz");
            std::fs::write(&path, gzip(tar)).unwrap();
            path
        }

        fn canary_intact(&self) {
            assert_eq!(std::fs::read(&self.canary).unwrap(), b"canary");
        }
    }

    /// Restores the archive `build` makes into a fresh `Env`; it must be refused with the
    /// workspace and everything around it byte-for-byte as before. Returns the message.
    fn refused(case: &str, limits: &Limits, build: impl FnOnce(&Path) -> T) -> String {
        let env = Env::new();
        let before = listing(env.base.path());
        let etc_x = Path::new("/etc/x").exists();
        let archive = env.write(&build(env.base.path()).done());
        let err = restore(&env.ws, &archive, limits, None).expect_err(case);
        assert!(matches!(err, Error::Invalid(_)), "{case}: {err}");
        assert_eq!(
            listing(env.base.path()),
            before,
            "{case}: the workspace or its surroundings changed"
        );
        env.canary_intact();
        assert_eq!(Path::new("/etc/x").exists(), etc_x, "{case}");
        eprintln!("{case}: {err}");
        err.to_string()
    }

    fn contains(msg: &str, want: &str) {
        assert!(msg.contains(want), "{want:?} not in {msg:?}");
    }

    #[test]
    fn escaping_names_are_refused() {
        let d = Limits::default();
        let reg = EntryType::Regular;
        let msg = refused("../../x", &d, |_| T::benign().raw(b"../../x", reg, b"evil"));
        contains(&msg, "\"../../x\"");
        contains(&msg, "`..`");
        contains(&msg, "nothing was written");
        refused("../x/ dir", &d, |_| {
            T::benign().raw(b"../x/", EntryType::Directory, b"")
        });
        contains(
            &refused("/etc/x", &d, |_| T::benign().raw(b"/etc/x", reg, b"evil")),
            "absolute",
        );
        refused("absolute into base", &d, |base| {
            let p = base.join("abs-escape");
            T::benign().raw(p.as_os_str().as_bytes(), reg, b"evil")
        });
        refused("./../x", &d, |_| T::benign().raw(b"./../x", reg, b"evil"));
        refused("a/../../x", &d, |_| {
            T::benign().raw(b"a/../../x", reg, b"evil")
        });
        refused("ok/../../x", &d, |_| {
            T::benign().raw(b"ok/../../x", reg, b"evil")
        });
        refused("..", &d, |_| {
            T::benign().raw(b"..", EntryType::Directory, b"")
        });
        refused("empty name", &d, |_| T::benign().raw(b"", reg, b"evil"));
        refused(".", &d, |_| {
            T::benign().raw(b"./", EntryType::Directory, b"")
        });
        refused("ustar prefix ..", &d, |_| {
            let mut h = Header::new_ustar();
            h.set_entry_type(reg);
            h.set_mode(0o644);
            h.set_size(4);
            h.as_ustar_mut().unwrap().name[..1].copy_from_slice(b"x");
            h.as_ustar_mut().unwrap().prefix[..5].copy_from_slice(b"../..");
            h.set_cksum();
            let mut t = T::benign();
            t.0.append(&h, &b"evil"[..]).unwrap();
            t
        });
        refused("non-UTF-8 name", &d, |_| {
            T::benign().raw(b"bad\xff", reg, b"x")
        });
        refused("long component", &d, |_| {
            T::benign()
                .longname("c".repeat(256).as_bytes())
                .raw(b"short", reg, b"x")
        });
        refused("long path", &d, |_| {
            T::benign()
                .longname("ab/".repeat(1400).as_bytes())
                .raw(b"short", reg, b"x")
        });
    }

    #[test]
    fn escaping_long_names_and_pax_paths_are_refused() {
        let d = Limits::default();
        let reg = EntryType::Regular;
        let msg = refused("PAX ../", &d, |_| {
            T::benign()
                .pax("path", b"../pax-escape")
                .raw(b"benign.txt", reg, b"evil")
        });
        contains(&msg, "pax-escape");
        refused("PAX absolute", &d, |base| {
            let p = base.join("pax-abs");
            T::benign()
                .pax("path", p.as_os_str().as_bytes())
                .raw(b"benign.txt", reg, b"evil")
        });
        refused("PAX NUL", &d, |_| {
            T::benign()
                .pax("path", b"ok/\0../../x")
                .raw(b"benign.txt", reg, b"evil")
        });
        refused("PAX dir ../..", &d, |_| {
            T::benign()
                .pax("path", b"ok/../../y/")
                .raw(b"benign/", EntryType::Directory, b"")
        });
        let msg = refused("GNU longname ../", &d, |_| {
            T::benign()
                .longname(b"../gnu-escape")
                .raw(b"benign.txt", reg, b"evil")
        });
        contains(&msg, "gnu-escape");
        refused("GNU longname long ../", &d, |_| {
            let name = format!("ok/{}/../../../../{}", "y".repeat(120), "z".repeat(120));
            T::benign()
                .longname(name.as_bytes())
                .raw(b"benign.txt", reg, b"evil")
        });
        refused("GNU longname absolute", &d, |base| {
            let p = base.join("gnu-abs");
            T::benign()
                .longname(p.as_os_str().as_bytes())
                .raw(b"benign.txt", reg, b"evil")
        });
        let msg = refused("huge extension header", &d, |_| {
            T::benign()
                .longname("n/".repeat(64 * 1024).as_bytes())
                .raw(b"benign.txt", reg, b"evil")
        });
        contains(&msg, "extension headers");
    }

    #[test]
    fn links_devices_and_other_types_are_refused() {
        let d = Limits::default();
        let cases: [(&str, EntryType, &[u8], &str); 11] = [
            (
                "symlink to /etc",
                EntryType::Symlink,
                b"/etc/passwd",
                "symlink",
            ),
            (
                "symlink out",
                EntryType::Symlink,
                b"../../canary.txt",
                "symlink",
            ),
            (
                "benign symlink",
                EntryType::Symlink,
                b"ok/fine.txt",
                "symlink",
            ),
            (
                "hardlink absolute",
                EntryType::Link,
                b"/etc/passwd",
                "hardlink",
            ),
            (
                "hardlink out",
                EntryType::Link,
                b"../../canary.txt",
                "hardlink",
            ),
            (
                "benign hardlink",
                EntryType::Link,
                b"ok/fine.txt",
                "hardlink",
            ),
            ("char device", EntryType::Char, b"", "character device"),
            ("block device", EntryType::Block, b"", "block device"),
            ("fifo", EntryType::Fifo, b"", "FIFO"),
            ("PAX global header", EntryType::XGlobalHeader, b"", "global"),
            ("vendor type", EntryType::new(b'V'), b"", "type 'V'"),
        ];
        for (case, kind, link, word) in cases {
            let msg = refused(case, &d, |_| {
                T::benign().raw_link(b"member", kind, link, b"")
            });
            contains(&msg, "\"member\"");
            contains(&msg, word);
        }
        let msg = refused("GNU sparse", &d, |_| {
            // 1 TiB of holes ending in one 512-byte block of data.
            let mut h = T::header(EntryType::GNUSparse, 512);
            h.set_path("sparse").unwrap();
            let gnu = h.as_gnu_mut().unwrap();
            gnu.set_real_size(1 << 40);
            gnu.sparse[0].set_offset((1 << 40) - 512);
            gnu.sparse[0].set_length(512);
            h.set_cksum();
            let mut t = T::benign();
            t.0.append(&h, &[7u8; 512][..]).unwrap();
            t
        });
        contains(&msg, "GNU sparse file");
        let msg = refused("symlink then through it", &d, |base| {
            T::benign()
                .raw_link(
                    b"x",
                    EntryType::Symlink,
                    base.join("outside").as_os_str().as_bytes(),
                    b"",
                )
                .raw(b"x/evil", EntryType::Regular, b"evil")
        });
        contains(&msg, "symlink");
    }

    #[test]
    fn duplicates_and_file_dir_clashes_are_refused() {
        let d = Limits::default();
        let msg = refused("file twice", &d, |_| {
            T::benign().file("dup.txt", b"1").file("dup.txt", b"2")
        });
        contains(&msg, "more than once");
        refused("dir twice", &d, |_| T::benign().dir("dd").dir("dd"));
        refused("file then dir", &d, |_| {
            T::benign().file("fd", b"1").dir("fd")
        });
        refused("spelled differently", &d, |_| {
            T::benign().file("ok/fine.txt", b"again")
        });
        refused("./ spelling", &d, |_| {
            T::benign().raw(b"./ok//fine.txt", EntryType::Regular, b"again")
        });
        let msg = refused("x file then x/y", &d, |_| {
            T::benign().file("x", b"1").file("x/y", b"2")
        });
        contains(&msg, "also has as a file");
        let msg = refused("g/y then g file", &d, |_| {
            T::benign().file("g/y", b"1").file("g", b"2")
        });
        contains(&msg, "inside it as a directory");
        refused("file with trailing slash", &d, |_| {
            T::benign().raw(b"slash/", EntryType::Regular, b"x")
        });
        // The workspace has keep/old.txt: a file cannot replace a non-empty directory.
        let msg = refused("file over a non-empty dir", &d, |_| {
            T::benign().file("keep", b"flat")
        });
        contains(&msg, "non-empty directory");
    }

    #[test]
    fn deps_and_limits_are_refused() {
        let d = Limits::default();
        for name in [".deps/evil.js", "./.deps/x", ".deps"] {
            let msg = refused(name, &d, |_| {
                T::benign().raw(name.as_bytes(), EntryType::Regular, b"x")
            });
            contains(&msg, ".deps");
        }
        refused(".deps dir", &d, |_| T::benign().dir(".deps"));
        // No data follows: the size alone refuses it, before anything is read.
        let msg = refused("1 TiB declared", &d, |_| {
            T::benign().declared("huge", 1 << 40)
        });
        contains(&msg, "max_file_bytes");
        let small = Limits {
            max_total_bytes: 1000,
            ..Limits::default()
        };
        let msg = refused("total", &small, |_| {
            T::benign().file("a", &[1; 600]).file("b", &[2; 600])
        });
        contains(&msg, "max_total_bytes");
        let few = Limits {
            max_entries: 3,
            ..Limits::default()
        };
        let msg = refused("entries", &few, |_| {
            T::benign().file("a", b"").file("b", b"").file("c", b"")
        });
        contains(&msg, "max_entries");
        let shallow = Limits {
            max_depth: 2,
            ..Limits::default()
        };
        let msg = refused("depth", &shallow, |_| T::benign().file("a/b/c", b""));
        contains(&msg, "max_depth");
    }

    #[test]
    fn broken_archives_are_refused() {
        let d = Limits::default();
        refused("truncated data", &d, |_| {
            let mut t = T::benign().declared("short", 100);
            t.0.get_mut().extend_from_slice(&[7; 10]);
            t.cut()
        });
        let env = Env::new();
        let before = listing(env.base.path());
        let junk = env.archives.path().join("junk");
        std::fs::write(&junk, b"not a gzip at all").unwrap();
        let err = restore(&env.ws, &junk, &d, None).unwrap_err();
        assert!(matches!(err, Error::Invalid(_)), "{err}");
        let missing = env.archives.path().join("missing.tar.gz");
        assert!(restore(&env.ws, &missing, &d, None).is_err());
        assert_eq!(listing(env.base.path()), before);
    }

    #[test]
    fn planted_links_and_oddities_are_replaced_never_followed() {
        let env = Env::new();
        let ws = &env.ws;
        std::os::unix::fs::symlink(&env.outside, ws.join("d")).unwrap();
        std::os::unix::fs::symlink(&env.outside, ws.join("dl")).unwrap();
        std::os::unix::fs::symlink(&env.canary, ws.join("f")).unwrap();
        std::os::unix::fs::symlink(env.outside.join("f.txt"), ws.join("ok")).unwrap();
        nix::unistd::mkfifo(&ws.join("p"), Mode::from_bits_truncate(0o600)).unwrap();
        std::fs::write(ws.join("q"), "was a file").unwrap();
        std::fs::create_dir(ws.join("e")).unwrap();
        let outside_before = listing(&env.outside);
        let tar = T::benign()
            .file("d/f.txt", b"from the archive")
            .dir("dl")
            .file("f", b"not the canary")
            .file("p", b"not a fifo")
            .file("q/r.txt", b"under q")
            .file("e", b"not a dir")
            .done();
        let archive = env.write(&tar);
        let report = restore(ws, &archive, &Limits::default(), None).unwrap();
        assert_eq!((report.files, report.dirs), (6, 2));
        assert_eq!(listing(&env.outside), outside_before);
        env.canary_intact();
        for dir in ["d", "dl", "q", "ok"] {
            let md = std::fs::symlink_metadata(ws.join(dir)).unwrap();
            assert!(md.is_dir(), "{dir} is not a real directory");
        }
        for file in ["f", "p", "e"] {
            let md = std::fs::symlink_metadata(ws.join(file)).unwrap();
            assert!(md.is_file(), "{file} is not a regular file");
        }
        assert_eq!(
            std::fs::read(ws.join("d/f.txt")).unwrap(),
            b"from the archive"
        );
        assert_eq!(std::fs::read(ws.join("f")).unwrap(), b"not the canary");
        assert_eq!(std::fs::read(ws.join("q/r.txt")).unwrap(), b"under q");
        assert_eq!(std::fs::read(ws.join("ok/fine.txt")).unwrap(), b"fine");
        // Merge: what the archive does not mention stays.
        assert_eq!(std::fs::read(ws.join("keep/old.txt")).unwrap(), b"old");
        // No temp files left behind.
        let names: Vec<String> = listing(ws)
            .keys()
            .map(|p| p.display().to_string())
            .collect();
        assert!(!names.iter().any(|n| n.contains(TEMP_PREFIX)), "{names:?}");
    }

    #[test]
    fn a_member_that_changed_since_validation_stops_the_second_pass() {
        let env = Env::new();
        let archive = env.write(&T::benign().file("late.txt", b"late").done());
        let top = open(&env.ws, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
        let file = File::open(&archive).unwrap();
        let limits = Limits::default();
        let mut plan = validate(&top, &file, &archive, &limits).unwrap();
        assert_eq!(plan.len(), 3);
        // As if the archive had been rewritten between the passes.
        plan[1][0] ^= 1;
        (&file).seek(SeekFrom::Start(0)).unwrap();
        let err = extract(&top, &file, &archive, &limits, &plan, None).unwrap_err();
        contains(&err.to_string(), "differs from the member validated");
        contains(&err.to_string(), "before it were written");
        assert!(env.ws.join("ok").is_dir());
        assert!(!env.ws.join("ok/fine.txt").exists());
        assert!(!env.ws.join("late.txt").exists());
        // Fewer members than validated is caught too.
        (&file).seek(SeekFrom::Start(0)).unwrap();
        let mut good = validate(&top, &file, &archive, &limits).unwrap();
        good.push([0; 32]);
        (&file).seek(SeekFrom::Start(0)).unwrap();
        let err = extract(&top, &file, &archive, &limits, &good, None).unwrap_err();
        contains(&err.to_string(), "ended differently");
    }

    #[test]
    fn restore_sets_owner_when_asked() {
        if !nix::unistd::geteuid().is_root() {
            return; // chown to another uid needs root
        }
        let env = Env::new();
        let tar = T::new().dir("o").file("o/p/f.txt", b"x").done();
        let archive = env.write(&tar);
        restore(&env.ws, &archive, &Limits::default(), Some((1234, 5678))).unwrap();
        for p in ["o", "o/p", "o/p/f.txt"] {
            let md = std::fs::symlink_metadata(env.ws.join(p)).unwrap();
            assert_eq!((md.uid(), md.gid()), (1234, 5678), "{p}");
        }
        // Only what restore created: the root and existing entries keep theirs.
        let md = std::fs::metadata(&env.ws).unwrap();
        assert_ne!(md.uid(), 1234);
    }

    fn set_mode(p: &Path, mode: u32) {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn round_trip_reproduces_files_dirs_and_modes() {
        let src = tempfile::tempdir().unwrap();
        let s = src.path();
        std::fs::create_dir_all(s.join("a/b/c")).unwrap();
        std::fs::write(s.join("a/b/c/deep.txt"), "deep").unwrap();
        std::fs::create_dir(s.join("empty")).unwrap();
        let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
        std::fs::write(s.join("bin.dat"), &binary).unwrap();
        std::fs::hard_link(s.join("bin.dat"), s.join("a/hardlinked.dat")).unwrap();
        std::fs::write(s.join("secret.txt"), "private").unwrap();
        set_mode(&s.join("secret.txt"), 0o600);
        std::fs::write(s.join("tool.sh"), "#!/bin/sh\n").unwrap();
        set_mode(&s.join("tool.sh"), 0o4755);
        set_mode(&s.join("a"), 0o750);
        std::fs::write(s.join("with space.txt"), "space").unwrap();
        std::fs::write(s.join("ünïcødé ✓.txt"), "unicode").unwrap();
        std::fs::write(s.join("line\nbreak.txt"), "newline").unwrap();
        let long = format!(
            "long/{}/{}/{}.txt",
            "x".repeat(60),
            "y".repeat(60),
            "z".repeat(70)
        );
        assert!(long.len() >= 200);
        std::fs::create_dir_all(s.join(&long).parent().unwrap()).unwrap();
        std::fs::write(s.join(&long), "long").unwrap();
        let long_name = format!("{}.txt", "n".repeat(150));
        std::fs::write(s.join(&long_name), "long name").unwrap();
        std::fs::create_dir_all(s.join(".deps/pkg")).unwrap();
        std::fs::write(s.join(".deps/pkg/index.js"), "dep").unwrap();
        std::fs::create_dir(s.join("sub")).unwrap();
        std::fs::create_dir(s.join("sub/.deps")).unwrap(); // only the top-level one is left out
        std::os::unix::fs::symlink("bin.dat", s.join("link")).unwrap();
        nix::unistd::mkfifo(&s.join("a/fifo"), Mode::from_bits_truncate(0o644)).unwrap();
        let bad = OsStr::from_bytes(b"bad\xffdir");
        std::fs::create_dir(s.join(bad)).unwrap();
        std::fs::write(s.join(bad).join("inner.txt"), "x").unwrap();
        let when = SystemTime::UNIX_EPOCH + Duration::from_secs(MTIME);
        File::options()
            .write(true)
            .open(s.join("bin.dat"))
            .unwrap()
            .set_modified(when)
            .unwrap();
        File::open(s.join("a/b"))
            .unwrap()
            .set_modified(when)
            .unwrap();

        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("ws.tar.gz");
        let report = snapshot(s, &dest, &Limits::default()).unwrap();
        let mut skipped = report.skipped.clone();
        skipped.sort();
        assert_eq!(skipped, ["a/fifo", "bad\u{fffd}dir", "link"]);
        assert_eq!(report.files, 10);
        assert_eq!(report.dirs, 9);
        assert_eq!(
            report.bytes,
            // deep, bin.dat twice, secret, tool.sh, space, unicode, newline, long path, long name
            4 + 2 * 70_000 + 7 + 10 + 5 + 7 + 7 + 4 + 9
        );

        // What the archive holds, member by member.
        let mut archive = tar::Archive::new(GzDecoder::new(File::open(&dest).unwrap()));
        let mut paths = Vec::new();
        for entry in archive.entries().unwrap() {
            let entry = entry.unwrap();
            let h = entry.header();
            let kind = h.entry_type();
            assert!(
                matches!(kind, EntryType::Regular | EntryType::Directory),
                "{kind:?}"
            );
            assert_eq!((h.uid().unwrap(), h.gid().unwrap()), (0, 0));
            assert!(h.username_bytes().is_none_or(|u| u.is_empty()));
            assert!(h.groupname_bytes().is_none_or(|g| g.is_empty()));
            assert_eq!(h.mode().unwrap() & 0o7000, 0);
            let path = String::from_utf8(entry.path_bytes().into_owned()).unwrap();
            assert_eq!(kind == EntryType::Directory, path.ends_with('/'), "{path}");
            paths.push(path);
        }
        assert!(paths.contains(&"empty/".to_string()));
        assert!(paths.contains(&long));
        assert!(paths.contains(&"sub/.deps/".to_string()));
        assert!(!paths.iter().any(|p| p.starts_with(".deps")), "{paths:?}");
        assert!(!paths.iter().any(|p| p == "link" || p == "a/fifo"));
        let mut sorted = paths.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), paths.len());

        let dst = tempfile::tempdir().unwrap();
        let restored = restore(dst.path(), &dest, &Limits::default(), None).unwrap();
        assert_eq!(
            (restored.files, restored.dirs, restored.bytes),
            (report.files, report.dirs, report.bytes)
        );
        let mut want = listing(s);
        want.retain(|p, _| {
            let first = p.components().next().unwrap().as_os_str();
            first != ".deps" && first != bad && p != Path::new("link") && p != Path::new("a/fifo")
        });
        // Set-id bits are not carried over.
        want.insert(
            PathBuf::from("tool.sh"),
            format!("file 755 {:?}", b"#!/bin/sh\n"),
        );
        assert_eq!(listing(dst.path()), want);
        let d = dst.path();
        assert_eq!(
            std::fs::metadata(d.join("secret.txt")).unwrap().mode() & 0o777,
            0o600
        );
        assert_eq!(
            std::fs::metadata(d.join("a")).unwrap().mode() & 0o777,
            0o750
        );
        assert_eq!(
            std::fs::metadata(d.join("bin.dat")).unwrap().mtime(),
            MTIME as i64
        );
        assert_eq!(
            std::fs::metadata(d.join("a/b")).unwrap().mtime(),
            MTIME as i64
        );
        // Hardlinks come back as independent files.
        assert_eq!(
            std::fs::metadata(d.join("a/hardlinked.dat"))
                .unwrap()
                .nlink(),
            1
        );
        assert_eq!(std::fs::read(d.join("a/hardlinked.dat")).unwrap(), binary);

        // Restoring again over the result merges to the same tree.
        restore(d, &dest, &Limits::default(), None).unwrap();
        assert_eq!(listing(d), want);
    }

    #[test]
    fn snapshot_destination_is_checked() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("f"), "x").unwrap();
        let l = Limits::default();
        let err = snapshot(ws.path(), Path::new("rel.tar.gz"), &l).unwrap_err();
        contains(&err.to_string(), "relative");
        let err = snapshot(ws.path(), &ws.path().join("in.tar.gz"), &l).unwrap_err();
        contains(&err.to_string(), "inside the workspace");
        std::fs::create_dir(ws.path().join("sub")).unwrap();
        let err = snapshot(ws.path(), &ws.path().join("sub/in.tar.gz"), &l).unwrap_err();
        contains(&err.to_string(), "inside the workspace");
        // Through a symlink into the workspace, too.
        let other = tempfile::tempdir().unwrap();
        let alias = other.path().join("alias");
        std::os::unix::fs::symlink(ws.path().join("sub"), &alias).unwrap();
        let err = snapshot(ws.path(), &alias.join("in.tar.gz"), &l).unwrap_err();
        contains(&err.to_string(), "inside the workspace");
        let err = snapshot(ws.path(), &other.path().join("no/such/x.tar.gz"), &l).unwrap_err();
        contains(&err.to_string(), "create it first");
        assert!(matches!(err, Error::Invalid(_)));
        assert_eq!(std::fs::read_dir(ws.path().join("sub")).unwrap().count(), 0);
    }

    #[test]
    fn sparse_files_keep_their_holes_both_ways() {
        let ws = tempfile::tempdir().unwrap();
        let size: u64 = 3 << 30;
        let f = File::create(ws.path().join("sparse")).unwrap();
        f.set_len(size).unwrap();
        f.write_all_at(b"head", 0).unwrap();
        f.write_all_at(&[9u8; 10_000], 1 << 30).unwrap();
        drop(f);
        // A file that is all hole, and one whose data ends it.
        File::create(ws.path().join("empty-hole"))
            .unwrap()
            .set_len(1 << 20)
            .unwrap();
        let g = File::create(ws.path().join("tail")).unwrap();
        g.write_all_at(b"end", (1 << 24) - 3).unwrap();
        drop(g);
        std::fs::set_permissions(
            ws.path().join("sparse"),
            std::fs::Permissions::from_mode(0o640),
        )
        .unwrap();
        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("ws.tar.gz");
        let started = Instant::now();
        // A 1 MiB per-file limit: the 3 GiB file holds far less.
        let limits = Limits {
            max_file_bytes: 1 << 20,
            ..Limits::default()
        };
        let report = snapshot(ws.path(), &dest, &limits).unwrap();
        assert!(started.elapsed() < Duration::from_secs(30));
        assert_eq!(report.files, 3);
        assert!(report.bytes < 64 << 10, "{report:?}");
        assert!(std::fs::metadata(&dest).unwrap().len() < 64 << 10);

        let back = tempfile::tempdir().unwrap();
        let r = restore(back.path(), &dest, &limits, None).unwrap();
        assert_eq!(r.files, 3);
        let p = back.path().join("sparse");
        let m = std::fs::metadata(&p).unwrap();
        assert_eq!(m.len(), size);
        assert_eq!(m.mode() & 0o777, 0o640);
        assert!(m.blocks() * 512 < 1 << 20, "{} blocks", m.blocks());
        let f = File::open(&p).unwrap();
        let mut buf = vec![0u8; 10_002];
        f.read_exact_at(&mut buf[..4], 0).unwrap();
        assert_eq!(&buf[..4], b"head");
        f.read_exact_at(&mut buf, (1 << 30) - 1).unwrap();
        assert_eq!(buf[0], 0);
        assert!(buf[1..10_001].iter().all(|&b| b == 9));
        assert_eq!(buf[10_001], 0);
        f.read_exact_at(&mut buf[..4096], size - 4096).unwrap();
        assert!(buf[..4096].iter().all(|&b| b == 0));
        let hole = std::fs::metadata(back.path().join("empty-hole")).unwrap();
        assert_eq!((hole.len(), hole.blocks()), (1 << 20, 0));
        let tail = std::fs::read(back.path().join("tail")).unwrap();
        assert_eq!(tail.len(), 1 << 24);
        assert_eq!(&tail[tail.len() - 3..], b"end");
        assert!(tail[..tail.len() - 3].iter().all(|&b| b == 0));

        // Python's tarfile (and GNU tar) read the same member as the same file.
        let py = std::process::Command::new("python3")
            .arg("-c")
            .arg("import sys, tarfile; t = tarfile.open(sys.argv[1]); m = t.getmember('sparse'); print(m.size, m.sparse is not None)")
            .arg(&dest)
            .output();
        if let Ok(py) = py {
            if py.status.success() {
                assert_eq!(
                    String::from_utf8_lossy(&py.stdout).trim(),
                    format!("{size} True")
                );
            }
        }
    }

    #[test]
    fn sparse_maps_that_lie_are_refused() {
        let d = Limits::default();
        let sparse = |map: &str, data: &[u8], real: &str| {
            let mut body = map.as_bytes().to_vec();
            body.resize(512, 0);
            body.extend_from_slice(data);
            let body = body.clone();
            let real = real.to_string();
            move |_: &Path| {
                let mut rec = pax_record("GNU.sparse.major", "1");
                rec.extend(pax_record("GNU.sparse.minor", "0"));
                rec.extend(pax_record("GNU.sparse.name", "f"));
                rec.extend(pax_record("GNU.sparse.realsize", &real));
                T::new()
                    .raw(b"PaxHeaders/f", EntryType::XHeader, &rec)
                    .file("GNUSparseFile.0/f", &body)
            }
        };
        for (case, map, data, real) in [
            (
                "past the real size",
                "1\n100\n10\n",
                &b"0123456789"[..],
                "50",
            ),
            ("out of order", "2\n100\n1\n50\n1\n", b"ab", "200"),
            ("more data than listed", "1\n0\n1\n", b"ab", "10"),
            ("less data than listed", "1\n0\n5\n", b"ab", "10"),
            ("malformed", "1\nx\n1\n", b"a", "10"),
            ("too many runs", "999999999\n", b"", "10"),
        ] {
            let msg = refused(case, &d, sparse(map, data, real));
            contains(&msg, "sparse map");
        }
        let msg = refused("PAX sparse 0.1", &d, |_| {
            let mut rec = pax_record("GNU.sparse.numblocks", "1");
            rec.extend(pax_record("GNU.sparse.map", "0,1"));
            T::new()
                .raw(b"PaxHeaders/f", EntryType::XHeader, &rec)
                .file("f", b"a")
        });
        contains(&msg, "PAX 1.0 sparse");
    }

    #[test]
    fn snapshot_limits_refuse_before_writing() {
        let ws = tempfile::tempdir().unwrap();
        std::fs::write(ws.path().join("small"), "x").unwrap();
        // The limits count what a file holds: 1 MiB of data 1 TB into a sparse file.
        let huge = File::create(ws.path().join("huge")).unwrap();
        huge.set_len(1 << 40).unwrap();
        huge.write_all_at(&vec![7u8; 1 << 20], (1 << 40) - (1 << 20))
            .unwrap();
        let out = tempfile::tempdir().unwrap();
        let dest = out.path().join("ws.tar.gz");
        let limits = Limits {
            max_file_bytes: 1 << 19,
            ..Limits::default()
        };
        let started = Instant::now();
        let err = snapshot(ws.path(), &dest, &limits).unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(30));
        let msg = err.to_string();
        contains(&msg, "\"huge\"");
        contains(&msg, "max_file_bytes");
        contains(&msg, &(1u64 << 19).to_string());
        assert!(matches!(err, Error::Invalid(_)));
        // Neither the archive nor its temp file is left.
        assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);

        let limits = Limits {
            max_total_bytes: 1 << 19,
            max_file_bytes: u64::MAX,
            ..Limits::default()
        };
        let msg = snapshot(ws.path(), &dest, &limits).unwrap_err().to_string();
        contains(&msg, "max_total_bytes");
        std::fs::remove_file(ws.path().join("huge")).unwrap();

        for i in 0..5 {
            std::fs::write(ws.path().join(format!("f{i}")), "x").unwrap();
        }
        let few = Limits {
            max_entries: 4,
            ..Limits::default()
        };
        let msg = snapshot(ws.path(), &dest, &few).unwrap_err().to_string();
        contains(&msg, "max_entries");
        std::fs::create_dir_all(ws.path().join("a/b/c")).unwrap();
        let shallow = Limits {
            max_depth: 2,
            ..Limits::default()
        };
        let msg = snapshot(ws.path(), &dest, &shallow)
            .unwrap_err()
            .to_string();
        contains(&msg, "\"a/b/c\"");
        contains(&msg, "max_depth");
        assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
        snapshot(ws.path(), &dest, &Limits::default()).unwrap();
        assert!(dest.is_file());
    }

    #[test]
    fn a_shrinking_file_is_an_error_and_a_growing_one_is_cut_to_size() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"12345").unwrap();
        let mut short = Exactly {
            file: File::open(&p).unwrap(),
            left: 10,
            shrank: false,
        };
        let mut sink = Vec::new();
        assert!(io::copy(&mut short, &mut sink).is_err());
        assert!(short.shrank);
        let mut cut = Exactly {
            file: File::open(&p).unwrap(),
            left: 3,
            shrank: false,
        };
        let mut got = Vec::new();
        io::copy(&mut cut, &mut got).unwrap();
        assert_eq!(got, b"123");
        assert!(!cut.shrank);
    }

    #[test]
    fn swapping_a_directory_for_a_symlink_never_leaks_outside_data() {
        const SECRET: &[u8] = b"SECRET-8d1f0c-outside-the-workspace";
        const SECRET_NAME: &str = "ONLY-OUTSIDE-7b2e";
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("f.txt"), SECRET).unwrap();
        std::fs::write(outside.path().join(SECRET_NAME), SECRET).unwrap();
        std::fs::create_dir(ws.path().join("d")).unwrap();
        std::fs::write(ws.path().join("d/f.txt"), "inside").unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join("d.link")).unwrap();

        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let ws = ws.path().to_path_buf();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(1);
                let mut swaps = 0u32;
                while Instant::now() < deadline {
                    std::fs::rename(ws.join("d"), ws.join("d.real")).unwrap();
                    std::fs::rename(ws.join("d.link"), ws.join("d")).unwrap();
                    std::thread::sleep(Duration::from_micros(50));
                    std::fs::rename(ws.join("d"), ws.join("d.link")).unwrap();
                    std::fs::rename(ws.join("d.real"), ws.join("d")).unwrap();
                    swaps += 1;
                }
                stop.store(true, Ordering::SeqCst);
                swaps
            })
        };
        let out = tempfile::tempdir().unwrap();
        let (mut ok, mut failed, mut saw_link) = (0u32, 0u32, 0u32);
        while !stop.load(Ordering::SeqCst) {
            let dest = out.path().join("s.tar.gz");
            match snapshot(ws.path(), &dest, &Limits::default()) {
                Ok(report) => {
                    saw_link += u32::from(report.skipped.iter().any(|p| p == "d"));
                    let bytes = gunzip(&dest);
                    for needle in [SECRET, SECRET_NAME.as_bytes()] {
                        assert!(
                            !bytes.windows(needle.len()).any(|w| w == needle),
                            "outside data in a snapshot"
                        );
                    }
                    ok += 1;
                }
                Err(_) => failed += 1,
            }
        }
        let swaps = swapper.join().unwrap();
        eprintln!("{swaps} swaps; {ok} snapshots ({saw_link} saw d as a symlink), {failed} failed");
        assert!(
            swaps > 0 && ok + failed > 0,
            "{swaps} swaps, {ok} ok, {failed} failed"
        );
        // The untouched tree snapshots fine afterwards.
        let dest = out.path().join("after.tar.gz");
        snapshot(ws.path(), &dest, &Limits::default()).unwrap();
        assert!(gunzip(&dest).windows(6).any(|w| w == b"inside"));
    }

    #[test]
    fn member_path_examples() {
        assert_eq!(member_path(b"a/b.txt").unwrap(), "a/b.txt");
        assert_eq!(member_path(b"./a//b/./c/").unwrap(), "a/b/c");
        assert_eq!(member_path(b"a/...").unwrap(), "a/...");
        for bad in [
            &b"../x"[..],
            b"/etc/x",
            b"./../x",
            b"a/../../x",
            b"a/..",
            b"",
            b".",
            b"./",
            b"//",
            b"a\0b",
            b"\xff",
        ] {
            assert!(member_path(bad).is_err(), "{bad:?}");
        }
        assert!(member_path("c".repeat(255).as_bytes()).is_ok());
        assert!(member_path("c".repeat(256).as_bytes()).is_err());
        assert!(member_path("c/".repeat(2048).as_bytes()).is_ok());
        assert!(member_path("c/".repeat(2049).as_bytes()).is_err());
    }

    /// The filter's promise: a refusal, or normal components only, joined under any root.
    fn check_filter(raw: &[u8]) {
        let Ok(p) = member_path(raw) else { return };
        assert!(
            !p.is_empty() && p.len() <= MAX_PATH && !p.contains('\0'),
            "{p:?}"
        );
        assert!(
            p.split('/')
                .all(|c| !c.is_empty() && c != "." && c != ".." && c.len() <= MAX_COMPONENT),
            "{p:?}"
        );
        let comps: Vec<Component> = Path::new(&p).components().collect();
        assert!(
            comps.iter().all(|c| matches!(c, Component::Normal(_))),
            "{p:?}"
        );
        assert_eq!(comps.len(), p.split('/').count(), "{p:?}");
        let root = Path::new("/srv/ws");
        let joined = root.join(&p);
        assert!(joined.starts_with(root), "{p:?}");
        assert_eq!(
            joined.components().count(),
            root.components().count() + comps.len()
        );
    }

    proptest::proptest! {
        #[test]
        fn member_filter_stays_beneath_the_root(raw in proptest::prop_oneof![
            proptest::arbitrary::any::<String>(),
            "[a./\\\\\u{0}é]{0,40}",
            proptest::collection::vec(
                proptest::sample::select(vec!["..", ".", "", "a", "/", "b\u{0}", "é", "..."]),
                0..10,
            ).prop_map(|v| v.join("/")),
        ]) {
            check_filter(raw.as_bytes());
        }

        #[test]
        fn member_filter_on_raw_bytes(raw in proptest::collection::vec(
            proptest::sample::select(vec![b'.', b'/', b'a', 0u8, 0xff, 0xc3, 0xa9]),
            0..40,
        )) {
            check_filter(&raw);
        }
    }
}
