//! The snapshot side: walking a workspace through directory fds and writing what it holds as a
//! gzip tar (sparse files as PAX 1.0 sparse members).

use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{self, BufWriter, Read, Seek, SeekFrom, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use flate2::Compression;
use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{fstat, fstatat, FileStat, Mode};
use tar::EntryType;

use super::{join, open_workspace, Limits, SnapshotReport, DEPS};
use crate::error::{Error, Result};

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
    let top = open_workspace(root, "to snapshot it", "")?;
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

pub(super) fn changed(rel: &str) -> Error {
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
pub(super) struct Exactly {
    pub(super) file: File,
    pub(super) left: u64,
    pub(super) shrank: bool,
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
pub(super) const MAX_MAP_RUNS: u64 = 100_000;

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
pub(super) fn pax_record(key: &str, value: &str) -> Vec<u8> {
    let rest = key.len() + value.len() + 3;
    let mut len = rest + rest.to_string().len();
    if len.to_string().len() + rest != len {
        len += 1;
    }
    format!("{len} {key}={value}\n").into_bytes()
}

/// The data runs of a file, one after the other, each read [`Exactly`] (a file that shrank is
/// an error).
pub(super) struct Runs {
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
