//! Mount points inside the box's root, for the workspace, `mounts` and scratch. A path that
//! exists must be of the right kind all the way down, never through one of the image's
//! symlinks. A path the image lacks is made without writing into the image: under a directory
//! of our own skeleton it is simply made; under one of the image's, that directory is masked by
//! a small tmpfs that binds each of its entries back (directories and files read-only as they
//! were, symlinks recreated, never followed), the missing chain is made in it, and the mask
//! becomes read-only (`/home/user` for an image with `/home` and no `user` in it).

use super::mounts::{bind_new, mkdir, touch, SetupError};
use crate::engine::shared::spec::at_or_under;
use crate::engine::shared::sys::{self, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOSUID, MOUNT_ATTR_RDONLY};
use nix::fcntl::{openat, readlinkat, OFlag};
use nix::mount::{mount, MsFlags};
use nix::sys::stat::{fstat, Mode, SFlag};
use std::fs;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::fs::symlink;
use std::path::{Component, Path, PathBuf};

/// The most entries a masked directory may have: each is bound back, a mount in every box.
pub const MAX_MASKED_ENTRIES: usize = 1024;

/// Makes the mount point `target` (a path under the skeleton `root`): a directory, or with
/// `dir` false an empty file. `others` are the box paths of the mounts already made whose
/// insides are not the image's (binds, scratch): nothing is made inside one of those.
pub(super) fn make_mount_point(
    root: &Path,
    target: &Path,
    dir: bool,
    others: &[&str],
) -> Result<(), SetupError> {
    let rel = target.strip_prefix(root).unwrap_or(target);
    let parts: Vec<Component> = rel.components().collect();
    let shown = |n: usize| {
        let p: PathBuf = parts[..n].iter().collect();
        format!("/{}", p.display())
    };
    let mut cur = root.to_path_buf();
    for (i, c) in parts.iter().enumerate() {
        let want_dir = dir || i + 1 < parts.len();
        let next = cur.join(c);
        match fs::symlink_metadata(&next) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(SetupError(format!(
                    "{} is a symlink in the image; mount targets are never reached through symlinks (mounting at /{})",
                    shown(i + 1),
                    rel.display()
                )))
            }
            Ok(m) if m.is_dir() == want_dir && (want_dir || m.is_file()) => {}
            Ok(_) => {
                return Err(SetupError(format!(
                    "{} is not a {} in the image (mounting at /{})",
                    shown(i + 1),
                    if want_dir { "directory" } else { "regular file" },
                    rel.display()
                )))
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let parent = shown(i);
                if let Some(o) = others.iter().find(|o| at_or_under(&parent, o)) {
                    return Err(SetupError(format!(
                        "{} does not exist in the mount at {o}; nothing is made inside another mount (mounting at /{})",
                        shown(i + 1),
                        rel.display()
                    )));
                }
                return make_missing(root, &cur, &parts[i..], dir);
            }
            Err(e) => return Err(SetupError(format!("stat {}: {e}", shown(i + 1)))),
        }
        cur = next;
    }
    Ok(())
}

/// Makes `rest` under `parent`, the deepest directory of the path that exists: directly in our
/// own skeleton, or in a mask over the image's directory.
fn make_missing(
    root: &Path,
    parent: &Path,
    rest: &[Component],
    dir: bool,
) -> Result<(), SetupError> {
    let dev = |p: &Path| {
        fs::symlink_metadata(p)
            .map(|m| std::os::unix::fs::MetadataExt::dev(&m))
            .map_err(|e| SetupError(format!("stat {}: {e}", p.display())))
    };
    let ours = dev(parent)? == dev(root)?;
    if !ours {
        mask_open(parent)?;
    }
    let mut cur = parent.to_path_buf();
    for (i, c) in rest.iter().enumerate() {
        cur.push(c);
        if dir || i + 1 < rest.len() {
            mkdir(&cur, 0o755)?;
        } else {
            touch(&cur)?;
        }
    }
    if !ours {
        sys::mount_setattr(
            parent.to_str().unwrap_or_default(),
            MOUNT_ATTR_RDONLY,
            false,
        )
        .map_err(|e| {
            SetupError(format!(
                "make the mask on {} read-only: {e}",
                parent.display()
            ))
        })?;
    }
    Ok(())
}

/// Mounts a tmpfs over the image's directory `at` (its mode kept) and binds each of its entries
/// back, reached through a descriptor of `at` opened before, each opened without following
/// it: a directory or a file is bound read-only (with any mount on it), a symlink recreated.
/// The tmpfs stays writable for the caller to make the missing chain in, then seal.
fn mask_open(at: &Path) -> Result<(), SetupError> {
    let what = |e: &dyn std::fmt::Display| SetupError(format!("mask {}: {e}", at.display()));
    let dirfd: OwnedFd = nix::fcntl::open(
        at,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(|e| what(&e))?;
    let mode = fstat(&dirfd).map_err(|e| what(&e))?.st_mode & 0o1777;
    let dir_path = PathBuf::from(format!("/proc/self/fd/{}", dirfd.as_raw_fd()));
    let mut names: Vec<_> = fs::read_dir(&dir_path)
        .and_then(|d| {
            d.take(MAX_MASKED_ENTRIES + 1)
                .map(|e| e.map(|e| e.file_name()))
                .collect::<Result<_, _>>()
        })
        .map_err(|e| what(&e))?;
    if names.len() > MAX_MASKED_ENTRIES {
        return Err(what(&format_args!(
            "it has more than {MAX_MASKED_ENTRIES} entries, each of which would be a mount in every box; pick a mount point under a smaller directory, or make it in the image"
        )));
    }
    names.sort();
    // Each entry's descriptor, opened while `at` is still the image's.
    let mut entries = Vec::with_capacity(names.len());
    for name in names {
        let fd = openat(
            &dirfd,
            name.as_os_str(),
            OFlag::O_PATH | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(|e| what(&e))?;
        let kind =
            SFlag::from_bits_truncate(fstat(&fd).map_err(|e| what(&e))?.st_mode) & SFlag::S_IFMT;
        let link = if kind == SFlag::S_IFLNK {
            Some(readlinkat(&dirfd, name.as_os_str()).map_err(|e| what(&e))?)
        } else {
            None
        };
        entries.push((name, fd, kind, link));
    }
    // Mount points are empty; only long symlinks take pages.
    let data = format!("size={},mode={mode:o}", 1 << 20);
    mount(
        Some("tmpfs"),
        at,
        Some("tmpfs"),
        MsFlags::MS_NOSUID | MsFlags::MS_NODEV,
        Some(data.as_str()),
    )
    .map_err(|e| what(&e))?;
    let ro = MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV;
    for (name, fd, kind, link) in entries {
        let place = at.join(&name);
        match link {
            Some(target) => symlink(&target, &place)
                .map_err(|e| SetupError(format!("symlink {}: {e}", place.display())))?,
            None => {
                let source = PathBuf::from(format!("/proc/self/fd/{}", fd.as_raw_fd()));
                bind_new(&source, &place, kind == SFlag::S_IFDIR, ro)?;
            }
        }
    }
    Ok(())
}
