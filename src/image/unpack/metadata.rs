//! Entry metadata: header fields with PAX overrides (`Meta`), and owners, modes, xattrs and
//! times set on what was written, through its fd.

use std::ffi::CString;
use std::io::{self};
use std::os::fd::{AsFd, OwnedFd};

use nix::sys::stat::{fchmod, futimens, Mode};
use nix::sys::time::TimeSpec;
use nix::unistd::{fchown, Gid, Uid};

use super::paths::{io, malformed, Budgeted};
use super::{DirAttrs, UnpackError, Unpacker, S_ISGID, S_ISUID};
use crate::engine::shared::sys;

impl Unpacker {
    /// Owner, mode (set-id bits stripped), xattrs and mtime of a regular file or FIFO, on its fd.
    pub(super) fn set_file_attrs<F: AsFd>(
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
    pub(super) fn set_dir_attrs(
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
pub(super) struct Meta {
    pub(super) mode: u32,
    pub(super) uid: Uid,
    pub(super) gid: Gid,
    pub(super) mtime: TimeSpec,
    /// `user.*` attributes only.
    pub(super) xattrs: Vec<(CString, Vec<u8>)>,
}

impl Meta {
    pub(super) fn read(
        entry: &mut tar::Entry<'_, Budgeted<'_>>,
        shown: &str,
    ) -> Result<Meta, UnpackError> {
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
pub(super) fn parse_pax_time(v: &[u8]) -> Option<TimeSpec> {
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
