//! Reading an archive's members: each header's name, type, sparse map and size checked
//! against the limits as it is read. Both restore passes read through here (`restore` validates,
//! `place` writes), so the two can't disagree about what a member is.

use std::fs::File;
use std::io::{self, BufReader, Read};
use std::os::unix::ffi::OsStrExt;

use flate2::read::GzDecoder;
use nix::sys::stat::Mode;
use nix::sys::time::TimeSpec;
use sha2::{Digest, Sha256};
use tar::EntryType;

use super::snapshot::MAX_MAP_RUNS;
use super::{Limits, DEPS, HEADER_ROOM, MAX_COMPONENT, MAX_MTIME, MAX_PATH};
use crate::error::{Error, Result};
use crate::fsx::{Cap, Capped};
/// One member as both passes see it, validated.
pub(super) struct Member {
    /// Normal components joined by `/`.
    pub(super) path: String,
    pub(super) dir: bool,
    /// Bytes the member stores (for a sparse file: its map and data runs).
    pub(super) size: u64,
    /// A PAX 1.0 sparse file: its real size (the runs are in its map).
    pub(super) sparse: Option<u64>,
    pub(super) mode: u32,
    pub(super) mtime: u64,
}

impl Member {
    /// What the second pass must find again, member for member.
    pub(super) fn fingerprint(&self) -> [u8; 32] {
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

    pub(super) fn parent_and_name(&self) -> (Vec<&str>, &str) {
        let mut comps: Vec<&str> = self.path.split('/').collect();
        // A validated path has at least one component.
        let name = comps.pop().unwrap_or("");
        (comps, name)
    }

    pub(super) fn file_mode(&self) -> Mode {
        Mode::from_bits_truncate(self.mode & 0o777)
    }

    /// Owner-rwx so restore (and the owner) can always fill and enter it.
    pub(super) fn dir_mode(&self) -> Mode {
        Mode::from_bits_truncate((self.mode & 0o777) | 0o700)
    }

    pub(super) fn mtime(&self) -> TimeSpec {
        TimeSpec::new(i64::try_from(self.mtime).unwrap_or(0), 0)
    }
}

/// The member-path filter: the raw name (after long-name processing) as a workspace-relative
/// path of normal components joined by `/`, or why it is refused.
pub(super) fn member_path(raw: &[u8]) -> std::result::Result<String, String> {
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
pub(super) fn shown(name: &str) -> String {
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
pub(super) fn read_map(
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

/// Runs `visit` on every member of the archive in order, after `inspect` and the entry-count
/// limit. `visit` gets the member's data as a reader (the second pass reads it; unread data is
/// skipped). `refuse` words the errors of the pass. Returns the number of members.
pub(super) fn each_member(
    file: &File,
    limits: &Limits,
    refuse: &dyn Fn(&str, &str) -> Error,
    mut visit: impl FnMut(&Member, &mut dyn Read) -> Result<()>,
) -> Result<u64> {
    // The decompressed stream may run only to the current member's data plus HEADER_ROOM: the
    // tar parser buffers long names and PAX records whole, and this keeps one huge record (a
    // gzip bomb of a long name) from filling memory.
    let meter = Cap::new(HEADER_ROOM);
    let stream = Capped::new(GzDecoder::new(BufReader::new(file)), meter.clone());
    let mut archive = tar::Archive::new(stream);
    let mut last = String::new();
    let unreadable = |last: &str, e: io::Error| {
        let at = if last.is_empty() {
            "at its start".to_string()
        } else {
            format!("after member {}", shown(last))
        };
        if meter.over() {
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
        meter.allow_next(data.saturating_add(HEADER_ROOM));
        visit(&member, &mut entry)?;
        last = member.path;
    }
    Ok(count)
}
