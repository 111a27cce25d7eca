//! Named volumes: directories kern keeps for a user beyond any box or Sandbox, mounted into
//! boxes by name (`volumes`, `kern run --volume`), made, listed and removed by `Volume.*` and
//! `kern volume`.
//!
//! Each volume is `<root>/<name>/` (0700): `volume.json` (its name, size cap, creation time),
//! `data/` (what boxes see), and two lock files. Every Sandbox using a volume holds a shared
//! flock on `use.lock` for as long as it is open, so `remove` (which takes it exclusively)
//! never pulls a volume from under a box; a writer holds `write.lock` exclusively (one writer)
//! or shared (`shared: true`: writers that said so). Locks go with the process however it dies,
//! so nothing is left claimed by a crashed host program.
//!
//! The data directory is a bind like a `"rw"` mount, with the same walls: nosuid and nodev in
//! the box, kern's set-id sweep after each box, no symlink a box made ever followed on the host
//! (the walks and removals here open every directory relative to its parent, without
//! following), and a hard link can't cross into it from elsewhere (bind mounts are separate
//! mounts to `link(2)`).

mod lock;
mod meta;

pub use lock::{Access, Held};
pub use meta::Meta;

use crate::error::{Error, Result};
use nix::errno::Errno;
use nix::fcntl::{renameat2, RenameFlags, AT_FDCWD};
use std::os::unix::fs::{DirBuilderExt, MetadataExt};
use std::path::{Path, PathBuf};

/// The directory boxes see, inside a volume's own.
const DATA: &str = "data";
/// The longest name: what `name` (a persist box's) allows too.
const MAX_NAME: usize = 64;
/// The largest `sizeMb`: 2^53 - 1 bytes (what JavaScript holds exactly), in MiB.
pub const MAX_SIZE_MB: u64 = ((1u64 << 53) - 1) / (1 << 20);
/// Left-over `.new-*`/`.gone-*` directories this old belong to a process that died making or
/// removing a volume: `create` and `list` finish the job.
const LEFT_AFTER: std::time::Duration = std::time::Duration::from_secs(60);

/// What `Volume.inspect()`/`list()` and `kern volume inspect|ls` show of a volume.
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Info {
    pub name: String,
    /// The host directory boxes see (`data/`).
    pub path: PathBuf,
    /// The cap on what the volume holds, in MiB; None: unbounded.
    pub size_mb: Option<u64>,
    /// Milliseconds since the epoch.
    pub created_at: u64,
    /// What it holds as `du` counts (allocated blocks, at least 4 KiB an entry); None when some
    /// of it could not be read.
    pub used_bytes: Option<u64>,
    /// A Sandbox (or `kern run`) has it mounted now.
    pub in_use: bool,
}

/// Where a volume lives, resolved for a mount: its data directory and that directory's identity
/// (kern binds only this inode), and its cap.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub name: String,
    pub data: PathBuf,
    pub dev: u64,
    pub ino: u64,
    pub size_mb: Option<u64>,
}

/// One volume a Sandbox mounts (the `volumes` option): where, and how.
#[derive(Debug, Clone)]
pub struct Use {
    pub volume: Resolved,
    pub target: String,
    pub access: Access,
}

impl Use {
    /// The bind the box gets: the data directory, by the inode `resolve` saw.
    pub fn bind(&self) -> crate::engine::shared::spec::BindSpec {
        crate::engine::shared::spec::BindSpec {
            source: self.volume.data.clone(),
            target: self.target.clone(),
            writable: self.access.writable(),
            dir: true,
            dev: self.volume.dev,
            ino: self.volume.ino,
        }
    }

    /// The cap a writer of this volume is held to, if it has one.
    pub fn cap(&self) -> Option<Cap> {
        if !self.access.writable() {
            return None;
        }
        Some(Cap {
            name: self.volume.name.clone(),
            data: self.volume.data.clone(),
            bytes: self.volume.size_mb?.saturating_mul(1 << 20),
        })
    }
}

/// A written volume's cap (`sizeMb`), checked before each call as `workspaceMaxBytes` is: the
/// call that crosses it completes, later calls are refused until the volume is below it.
#[derive(Debug, Clone)]
pub struct Cap {
    pub name: String,
    pub data: PathBuf,
    pub bytes: u64,
}

/// Why a call is refused by a volume's cap.
#[derive(Debug, thiserror::Error)]
pub enum Full {
    #[error("the volume {name:?} holds {} bytes, over its size ({cap} bytes); free space in it (its files are in {})", .used, .data.display())]
    Over {
        name: String,
        data: PathBuf,
        used: u64,
        cap: u64,
    },
    /// Not all of it could be measured: refused closed (a box must not hide bytes there).
    #[error("the volume {name:?} could not all be measured against its size ({why})")]
    Unmeasured { name: String, why: String },
}

/// The first of `caps` its volume is past (blocking: it walks each).
pub fn check_caps(caps: &[Cap]) -> std::result::Result<(), Full> {
    for c in caps {
        match usage(&c.data, c.bytes) {
            Ok(used) if used > c.bytes => {
                return Err(Full::Over {
                    name: c.name.clone(),
                    data: c.data.clone(),
                    used,
                    cap: c.bytes,
                })
            }
            Ok(_) => {}
            Err(why) => {
                return Err(Full::Unmeasured {
                    name: c.name.clone(),
                    why,
                })
            }
        }
    }
    Ok(())
}

/// Where this user's volumes live: `$KERN_VOLUMES`, else `$KERN_HOME/volumes`, else
/// `$XDG_DATA_HOME/kern-sandbox/volumes`, else `~/.local/share/kern-sandbox/volumes`. Data,
/// not cache: never under the image store's `~/.cache`, which users clear.
pub fn root() -> Result<PathBuf> {
    let absolute = |var: &str| -> Result<Option<PathBuf>> {
        match std::env::var_os(var).filter(|v| !v.is_empty()) {
            Some(v) if Path::new(&v).is_absolute() => Ok(Some(PathBuf::from(v))),
            Some(v) => Err(Error::Invalid(format!(
                "{var}={} is relative; set it to an absolute path",
                Path::new(&v).display()
            ))),
            None => Ok(None),
        }
    };
    if let Some(p) = absolute("KERN_VOLUMES")? {
        return Ok(p);
    }
    if let Some(p) = absolute("KERN_HOME")? {
        return Ok(p.join("volumes"));
    }
    if let Some(p) = absolute("XDG_DATA_HOME")? {
        return Ok(p.join("kern-sandbox/volumes"));
    }
    match absolute("HOME")? {
        Some(h) => Ok(h.join(".local/share/kern-sandbox/volumes")),
        None => crate::invalid!("no place for volumes: set KERN_VOLUMES (or HOME)"),
    }
}

/// A volume name: 1-64 letters, digits, `_`, `.` or `-`, starting with a letter or digit (a
/// file name on every filesystem, never `.`, `..` or a path).
pub fn check_name(name: &str) -> Result<()> {
    let ok = !name.is_empty()
        && name.len() <= MAX_NAME
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        return Ok(());
    }
    let shown: String = name.chars().take(80).collect();
    crate::invalid!("the volume name {shown:?} is not allowed: use 1-{MAX_NAME} letters, digits, '_', '.' or '-', starting with a letter or digit")
}

/// A `sizeMb`: a positive whole number of MiB, at most `MAX_SIZE_MB`.
pub fn check_size(size_mb: f64) -> Result<u64> {
    if size_mb.fract() != 0.0 || !(1.0..=MAX_SIZE_MB as f64).contains(&size_mb) {
        return crate::invalid!("the volume size {size_mb} MiB is not allowed: give a whole number of MiB from 1 to {MAX_SIZE_MB}, or none for no cap");
    }
    Ok(size_mb as u64)
}

/// The volume `name`'s directory and `volume.json`: a clear error when there is none, or it is
/// damaged.
fn find(name: &str) -> Result<(PathBuf, Meta)> {
    check_name(name)?;
    let dir = root()?.join(name);
    let meta = Meta::read(&dir).map_err(|e| match e {
        meta::ReadError::Missing => missing(name),
        meta::ReadError::Bad(why) => Error::Invalid(format!(
            "the volume {name:?} at {} is damaged ({why}); remove it with `kern volume rm {name}`",
            dir.display()
        )),
    })?;
    Ok((dir, meta))
}

fn missing(name: &str) -> Error {
    Error::Invalid(format!(
        "there is no volume named {name:?}; make it first with Volume.create({name:?}) or `kern volume create {name}` (`kern volume ls` lists them)"
    ))
}

/// Makes a volume, `size_mb` its cap: empty, or with a copy of what the volume `from` holds
/// (taken while nobody writes it; reflinked where the filesystem can, symlinks as links, never
/// set-id bits; devices, FIFOs and sockets left out). Refused when the name is taken.
pub fn create(name: &str, size_mb: Option<u64>, from: Option<&str>) -> Result<Info> {
    check_name(name)?;
    if let Some(f) = from {
        check_name(f)?;
    }
    let root = root()?;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&root)
        .map_err(|e| io_err(&format!("making {}", root.display()), e))?;
    sweep_left(&root);
    // Made whole under a name nobody reads, then renamed into place without replacing: a
    // volume is there entirely or not at all.
    let new = tempfile::Builder::new()
        .prefix(&format!(".new-{name}-"))
        .tempdir_in(&root)
        .map_err(|e| io_err(&format!("making a volume in {}", root.display()), e))?;
    // Only its owner reaches in (a set-id file a box left is swept after the box, not before).
    std::fs::set_permissions(
        new.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .map_err(|e| io_err("making the volume private", e))?;
    let meta = Meta::new(name, size_mb);
    meta.write(new.path())?;
    std::fs::DirBuilder::new()
        .mode(0o755)
        .create(new.path().join(DATA))
        .map_err(|e| io_err("making the volume's data directory", e))?;
    lock::make_files(new.path())?;
    // Ours until it is in place: `sweep_left` never takes a volume being made, however long
    // its copy runs.
    let making = lock::for_removal(new.path()).map_err(|e| e.into_error(name))?;
    // Held until the copy is in place.
    let _source = match from {
        Some(f) => {
            let src = root.join(f);
            let held = lock::for_copy(&src).map_err(|e| match e {
                lock::LockError::Missing => missing(f),
                other => other.into_error(f),
            })?;
            crate::workspace::copy::copy_tree(&src.join(DATA), &new.path().join(DATA), &[], None)
                .map_err(|e| Error::Invalid(format!("copying the volume {f:?}: {e}")))?;
            Some(held)
        }
        None => None,
    };
    let at = root.join(name);
    match renameat2(
        AT_FDCWD,
        new.path(),
        AT_FDCWD,
        &at,
        RenameFlags::RENAME_NOREPLACE,
    ) {
        Ok(()) => {
            // Renamed away: nothing left for the guard to remove.
            let _ = new.keep();
        }
        Err(Errno::EEXIST | Errno::ENOTEMPTY) => {
            return crate::invalid!("a volume named {name:?} already exists; use it, remove it first (Volume.remove({name:?}), `kern volume rm {name}`), or pick another name")
        }
        Err(e) => {
            return Err(io_err(
                &format!("placing the volume at {}", at.display()),
                e.into(),
            ))
        }
    }
    drop(making);
    inspect(name)
}

/// The volume named `name`, with what it holds now.
pub fn inspect(name: &str) -> Result<Info> {
    let (dir, meta) = find(name)?;
    let data = dir.join(DATA);
    Ok(Info {
        name: name.to_string(),
        used_bytes: usage(&data, u64::MAX).ok(),
        in_use: lock::in_use(&dir),
        path: data,
        size_mb: meta.size_mb,
        created_at: meta.created_at,
    })
}

/// Every volume of this user, by name.
pub fn list() -> Result<Vec<Info>> {
    let root = root()?;
    let entries = match std::fs::read_dir(&root) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_err(&format!("reading {}", root.display()), e)),
    };
    sweep_left(&root);
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| check_name(n).is_ok())
        .collect();
    names.sort();
    // A volume removed between the listing and its look is simply not there.
    Ok(names.iter().filter_map(|n| inspect(n).ok()).collect())
}

/// Removes a volume and everything in it. Refused while a Sandbox has it mounted.
pub fn remove(name: &str) -> Result<()> {
    check_name(name)?;
    let root = root()?;
    let dir = root.join(name);
    let gone = lock::for_removal(&dir).map_err(|e| match e {
        lock::LockError::Missing => missing(name),
        other => other.into_error(name),
    })?;
    // Renamed away under the lock: the name is free at once, and a Sandbox that resolved it
    // before finds its inode gone (`acquire` checks).
    let away = root.join(format!(
        ".gone-{name}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::rename(&dir, &away).map_err(|e| io_err(&format!("removing {}", dir.display()), e))?;
    // Held to the end: a sweep never deletes it beside us, and a Sandbox that resolved the
    // name before is told it is being removed.
    let removed =
        crate::image::store::remove_tree(&away).map_err(|e| Error::Invalid(e.to_string()));
    drop(gone);
    removed
}

/// The volume `name` for a mount: it must exist; its data directory a real directory.
pub fn resolve(name: &str) -> Result<Resolved> {
    let (dir, meta) = find(name)?;
    let data = dir.join(DATA);
    let st = std::fs::symlink_metadata(&data).map_err(|_| missing(name))?;
    if !st.is_dir() {
        return crate::invalid!(
            "the volume {name:?} is damaged ({} is not a directory); remove it with `kern volume rm {name}`",
            data.display()
        );
    }
    Ok(Resolved {
        name: name.to_string(),
        data,
        dev: st.dev(),
        ino: st.ino(),
        size_mb: meta.size_mb,
    })
}

/// Takes `r` for a Sandbox's life, as `access` says: refused when another holds it in a way
/// that excludes this, or when it is no longer the volume `resolve` found.
pub fn acquire(r: &Resolved, access: Access) -> Result<Held> {
    // The directory `resolve` found, not the store looked up again: the locks must be the
    // mounted volume's even if the environment changed since.
    let dir = r.data.parent().unwrap_or(&r.data);
    let held = lock::take(dir, access).map_err(|e| match e {
        lock::LockError::Missing => missing(&r.name),
        other => other.into_error(&r.name),
    })?;
    // Under the lock: still the directory the mount will be checked against.
    match std::fs::symlink_metadata(&r.data) {
        Ok(st) if st.is_dir() && st.dev() == r.dev && st.ino() == r.ino => Ok(held),
        _ => crate::invalid!("the volume {:?} was removed (and maybe made again) while this Sandbox opened; open it again", r.name),
    }
}

/// Bytes under `data` as `du` counts them, each entry at least 4 KiB (as the workspace's cap
/// counts), stopping once past `cap`. Nothing is left out: unlike a workspace, a volume has no
/// `.deps` of kern's. Never follows a symlink; a directory it can't read is an error.
pub fn usage(data: &Path, cap: u64) -> std::result::Result<u64, String> {
    use crate::fsx::walk;
    let mut bytes: u64 = 0;
    walk::walk_all(data, walk::Closed::Fail, |e| {
        bytes = bytes.saturating_add(crate::workspace::track::entry_bytes(e.stat));
        if bytes > cap {
            walk::Visit::Stop
        } else {
            walk::Visit::Enter
        }
    })
    .map_err(|e| e.to_string())?;
    Ok(bytes)
}

/// Finishes what a process that died while making or removing a volume left.
fn sweep_left(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        if !(name.starts_with(".new-") || name.starts_with(".gone-")) {
            continue;
        }
        let old = e
            .metadata()
            .ok()
            .and_then(|m| m.modified().ok())
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > LEFT_AFTER);
        if !old {
            continue;
        }
        // Only what nobody holds: a maker or remover still at work holds its `use.lock`; one
        // that died before making it left none.
        let path = e.path();
        let free = match lock::for_removal(&path) {
            Ok(held) => Some(held),
            Err(lock::LockError::Missing) => None,
            Err(_) => continue,
        };
        let _ = crate::image::store::remove_tree(&path);
        drop(free);
    }
}

fn io_err(what: &str, e: std::io::Error) -> Error {
    Error::Invalid(format!("volumes: {what}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::{check_name, check_size, MAX_SIZE_MB};

    #[test]
    fn names_are_single_plain_file_names() {
        for good in ["a", "data", "v1.2_x-y", &"x".repeat(64)] {
            assert!(check_name(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            ".",
            "..",
            ".x",
            "-x",
            "_x",
            "a/b",
            "a\0b",
            "sp ace",
            &"x".repeat(65),
        ] {
            assert!(check_name(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn sizes_are_whole_mib_within_bounds() {
        assert_eq!(check_size(1.0).ok(), Some(1));
        assert_eq!(check_size(MAX_SIZE_MB as f64).ok(), Some(MAX_SIZE_MB));
        for bad in [
            0.0,
            -1.0,
            1.5,
            f64::NAN,
            f64::INFINITY,
            MAX_SIZE_MB as f64 + 1.0,
        ] {
            assert!(check_size(bad).is_err(), "{bad}");
        }
    }
}
