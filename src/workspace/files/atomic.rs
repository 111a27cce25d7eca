//! `createWriteStream`'s file: written in pieces, put in place whole (`AtomicWrite`).

use super::{
    check_replaceable, create_temp, random_u64, replaceable_in, runtime, seal, TEMP_PREFIX,
};
use crate::error::{Error, Result};
use nix::errno::Errno;
use nix::fcntl::{openat, renameat, AtFlags, OFlag};
use nix::sys::stat::Mode;
use nix::unistd::{unlinkat, UnlinkatFlags};
use std::ffi::OsString;
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;

/// ADDITION (`createWriteStream`): `writeFile` in pieces. The bytes go to an unnamed file
/// (`O_TMPFILE`) in the directory of `path` (resolved and checked as `writeFile` does, when
/// the stream opens), so while the stream is open no box, listing or snapshot sees it, and
/// nothing can swap it; at [`AtomicWrite::commit`] it gets a fresh temp name (`linkat`) and is
/// `renameat`'d over `path`. Dropped uncommitted (an error, a `destroy()`), it vanishes with
/// its fd and `path` is untouched. Where the filesystem has no `O_TMPFILE`, a named temp file
/// as `writeFile`'s stands in from the start (removed on drop).
pub struct AtomicWrite {
    dir: OwnedFd,
    /// The temp file's name once it has one (empty: unnamed, or already renamed).
    temp: String,
    file: Option<File>,
    name: OsString,
    path: String,
    owner: Option<(u32, u32)>,
}

impl AtomicWrite {
    pub fn begin(root: &Path, path: &str, owner: Option<(u32, u32)>) -> Result<AtomicWrite> {
        const OP: &str = "createWriteStream";
        let (dir, name) = replaceable_in(OP, root, path, owner, true)?;
        let unnamed = openat(
            &dir,
            ".",
            OFlag::O_TMPFILE | OFlag::O_WRONLY | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        );
        let (temp, fd) = match unnamed {
            Ok(fd) => (String::new(), fd),
            Err(Errno::EOPNOTSUPP | Errno::EISDIR | Errno::EINVAL) => create_temp(&dir)
                .map_err(|e| runtime(OP, path, "cannot create a temporary file next to it", e))?,
            Err(e) => {
                return Err(runtime(
                    OP,
                    path,
                    "cannot create a temporary file next to it",
                    e,
                ))
            }
        };
        Ok(AtomicWrite {
            dir,
            temp,
            file: Some(File::from(fd)),
            name,
            path: path.to_owned(),
            owner,
        })
    }

    /// Appends `data` to the temp file.
    pub fn write(&mut self, data: &[u8]) -> Result<()> {
        let file = self
            .file
            .as_mut()
            .ok_or_else(|| Error::Closed("the write stream has ended; open a new one".into()))?;
        file.write_all(data)
            .map_err(|e| runtime("createWriteStream", &self.path, "cannot write it", e))
    }

    /// Puts the temp file in place of `path` (which may have changed kind meanwhile: refused
    /// as `writeFile` refuses it, the temp file removed).
    pub fn commit(mut self) -> Result<()> {
        const OP: &str = "createWriteStream";
        let file = self
            .file
            .take()
            .ok_or_else(|| Error::Closed("the write stream has ended".into()))?;
        seal(&file, self.owner).map_err(|e| runtime(OP, &self.path, "cannot finish it", e))?;
        check_replaceable(&self.dir, &self.name, &self.path)?;
        if self.temp.is_empty() {
            self.temp = self
                .name_it(&file)
                .map_err(|e| runtime(OP, &self.path, "cannot name the written file", e))?;
        }
        drop(file);
        renameat(
            &self.dir,
            self.temp.as_str(),
            &self.dir,
            self.name.as_os_str(),
        )
        .map_err(|e| runtime(OP, &self.path, "cannot put it in place", e))?;
        self.temp.clear();
        Ok(())
    }
}

impl AtomicWrite {
    /// Links the unnamed file into its directory under a fresh temp name (`O_EXCL`-like: an
    /// existing name, whatever it is, makes the link fail and another name is tried).
    fn name_it(&self, file: &File) -> nix::Result<String> {
        let me = format!("/proc/self/fd/{}", file.as_raw_fd());
        let mut last = Errno::EEXIST;
        for _ in 0..16 {
            let name = format!("{TEMP_PREFIX}{:016x}", random_u64());
            match nix::unistd::linkat(
                nix::fcntl::AT_FDCWD,
                me.as_str(),
                &self.dir,
                name.as_str(),
                AtFlags::AT_SYMLINK_FOLLOW,
            ) {
                Ok(()) => return Ok(name),
                Err(e @ Errno::EEXIST) => last = e,
                Err(e) => return Err(e),
            }
        }
        Err(last)
    }
}

impl Drop for AtomicWrite {
    fn drop(&mut self) {
        if !self.temp.is_empty() {
            let _ = unlinkat(&self.dir, self.temp.as_str(), UnlinkatFlags::NoRemoveDir);
        }
    }
}
