//! Applying one tar entry: files, directories, links, devices, whiteouts and opaque markers, each
//! written relative to a directory fd beneath the root.

use std::ffi::CString;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};

use nix::dir::Dir;
use nix::errno::Errno;
use nix::fcntl::{openat, AtFlags, OFlag};
use nix::sys::stat::{mkdirat, mknodat, utimensat, Mode, SFlag, UtimensatFlags};
use nix::unistd::{fchownat, linkat, symlinkat};

use super::metadata::Meta;
use super::paths::{
    hostile, io, is_dir_stat, join, list, lstat, malformed, normalise, open_beneath, remove_tree,
    resolve_error, same_dir, split_parent, stream_error, Budgeted, Removal, ESCAPES,
};
use super::{
    DirAttrs, LayerStats, UnpackError, Unpacker, DIR_DEFAULT_MODE, DIR_WORKING_MODE,
    MAX_REMOVE_DEPTH,
};
use crate::fsx::Cap;

impl Unpacker {
    pub(super) fn apply_entry(
        &mut self,
        entry: &mut tar::Entry<'_, Budgeted<'_>>,
        shown: &str,
        budget: &Cap,
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
        budget: &Cap,
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
}
