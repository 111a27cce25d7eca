//! Images: references, the registry client, verified blobs, safe layer unpacking and the
//! content store. Everything here runs in the caller's process (the addon or `kern pull`), never
//! in a box, and treats what a registry or an archive sends as hostile.
//!
//! What `image` may name, tried in this order:
//! - `"host"`: the host's own /usr, /bin, /lib* and a reduced /etc, read-only;
//! - an absolute path: an OCI image layout directory (has `index.json`), a `docker save` /
//!   `podman save` / OCI archive tarball, or a plain root filesystem directory;
//! - anything else: a registry reference, normalised as Docker does (`python:3.12-slim` is
//!   `docker.io/library/python:3.12-slim`).

pub mod auth;
pub mod build;
pub mod digest;
pub mod local;
pub mod manifest;
pub mod net;
pub mod pull;
pub mod reference;
pub mod registry;
pub mod store;
pub mod unpack;
pub mod user;

use crate::engine::shared::spec::{BoxUser, RootSpec};
use digest::Digest;
use manifest::RunConfig;
use reference::Reference;
use std::path::{Path, PathBuf};

/// Everything that can go wrong getting an image. Each message names the image, where it came
/// from and what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The caller's mistake: a malformed reference, a path that is no image, bad credentials
    /// configuration.
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{0}")]
    Auth(String),
    #[error("{0}")]
    Unreachable(String),
    /// The image has no variant for this machine.
    #[error("{0}")]
    Platform(String),
    /// A digest or size did not match: corrupt or tampered content.
    #[error("{0}")]
    Verify(String),
    /// A layer we refuse to apply (hostile names, links out of the root) or cannot.
    #[error("{0}")]
    Unpack(String),
    /// The store's disk is full.
    #[error("{0}")]
    DiskFull(String),
    /// The store itself: permissions, locks, I/O.
    #[error("{0}")]
    Store(String),
    /// The registry answered something we can't use.
    #[error("{0}")]
    Registry(String),
}

impl Error {
    /// The same error with `note` appended to its message.
    pub fn with_note(self, note: &str) -> Error {
        let add = |m: String| m + note;
        match self {
            Error::Invalid(m) => Error::Invalid(add(m)),
            Error::NotFound(m) => Error::NotFound(add(m)),
            Error::Auth(m) => Error::Auth(add(m)),
            Error::Unreachable(m) => Error::Unreachable(add(m)),
            Error::Platform(m) => Error::Platform(add(m)),
            Error::Verify(m) => Error::Verify(add(m)),
            Error::Unpack(m) => Error::Unpack(add(m)),
            Error::DiskFull(m) => Error::DiskFull(add(m)),
            Error::Store(m) => Error::Store(add(m)),
            Error::Registry(m) => Error::Registry(add(m)),
        }
    }

    /// An I/O error of the store, with ENOSPC told apart: it is the one the user can fix.
    pub fn store_io(what: &str, e: std::io::Error) -> Error {
        if e.raw_os_error() == Some(libc::ENOSPC) || e.raw_os_error() == Some(libc::EDQUOT) {
            Error::DiskFull(format!(
                "{what}: the disk holding the image store ({}) is full; free space, run `kern prune`, or point KERN_HOME at a larger disk",
                store::Store::default_root()
                    .map(|p| p.display().to_string())
                    .unwrap_or_else(|_| "?".into())
            ))
        } else {
            Error::Store(format!("{what}: {e}"))
        }
    }
}

impl From<Error> for crate::error::Error {
    fn from(e: Error) -> Self {
        match e {
            Error::Invalid(m) => crate::error::Error::Invalid(m),
            other => crate::error::Error::Image(other.to_string()),
        }
    }
}

/// Where an `image` option points.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    Host,
    RootfsDir(PathBuf),
    OciLayout(PathBuf),
    Archive(PathBuf),
    Registry(Reference),
}

impl Source {
    /// Classifies an `image` value without touching the network.
    pub fn parse(v: &str) -> Result<Source, Error> {
        if v == "host" {
            return Ok(Source::Host);
        }
        if v.starts_with('/') {
            let p = Path::new(v);
            let meta = std::fs::metadata(p).map_err(|e| {
                Error::Invalid(format!(
                    "image {v:?}: {e}; pass an OCI layout directory, an image archive (docker save), a root filesystem directory, \"host\" or a registry reference"
                ))
            })?;
            if meta.is_file() {
                return Ok(Source::Archive(p.to_path_buf()));
            }
            if !meta.is_dir() {
                return Err(Error::Invalid(format!(
                    "image {v:?} is neither a directory nor an archive file"
                )));
            }
            if p.join("index.json").is_file() {
                return Ok(Source::OciLayout(p.to_path_buf()));
            }
            if !p.join("usr").is_dir() && !p.join("bin").is_dir() {
                return Err(Error::Invalid(format!(
                    "image {v:?} has no index.json (so is no OCI layout) and neither usr/ nor bin/ (so is no root filesystem)"
                )));
            }
            return Ok(Source::RootfsDir(p.to_path_buf()));
        }
        if v.starts_with('.') && (v.starts_with("./") || v.starts_with("../") || v == ".") {
            return Err(Error::Invalid(format!(
                "image {v:?} is a relative path; pass an absolute path (e.g. path.resolve({v:?}))"
            )));
        }
        let r = Reference::parse(v).map_err(|why| {
            Error::Invalid(format!("image {v:?} is not a valid image reference: {why}"))
        })?;
        Ok(Source::Registry(r))
    }
}

/// When a cached tag is asked of the registry again. Set with `KERN_PULL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PullPolicy {
    /// Default: a tag in the cache opens with no network at all; `kern pull` refreshes it.
    Missing,
    /// Re-resolve the tag (a HEAD request) at every open; download only what changed.
    Always,
    /// Never touch the network: an image not in the cache is an error.
    Never,
}

impl PullPolicy {
    pub fn from_env() -> Result<PullPolicy, Error> {
        match std::env::var("KERN_PULL").as_deref() {
            Err(_) | Ok("") | Ok("missing") => Ok(PullPolicy::Missing),
            Ok("always") => Ok(PullPolicy::Always),
            Ok("never") => Ok(PullPolicy::Never),
            Ok(other) => Err(Error::Invalid(format!(
                "KERN_PULL={other:?} is not a pull policy; use missing (the default), always or never"
            ))),
        }
    }
}

/// Told how a pull goes; the CLI draws bars, the addon stays quiet.
pub trait Progress {
    fn layer_start(&mut self, _digest: &Digest, _size: u64, _cached: bool) {}
    fn layer_bytes(&mut self, _digest: &Digest, _done: u64) {}
    fn layer_done(&mut self, _digest: &Digest) {}
    fn message(&mut self, _msg: &str) {}
}

pub struct Quiet;
impl Progress for Quiet {}

/// An image ready for boxes.
pub struct Image {
    pub root: RootSpec,
    pub config: RunConfig,
    /// The store's name for it (manifest digest, or config digest for a `docker save`).
    pub digest: Option<Digest>,
    /// The image's `USER`, resolved in its own /etc/passwd; None runs as box root.
    pub user: Option<BoxUser>,
    /// Held for as long as a session uses the image: `kern rmi` and `kern prune` skip it.
    _in_use: Option<store::Hold>,
}

impl Image {
    /// A name for this image's contents that changes when they do: the store's digest; for a
    /// plain root directory (no digest), its path, identity and age, so a rebuilt directory gets
    /// a new name; None for the host's own root.
    pub fn identity(&self) -> std::io::Result<Option<String>> {
        use sha2::Digest as _;
        use std::os::unix::fs::MetadataExt;
        Ok(match (&self.digest, &self.root) {
            (Some(d), _) => Some(d.to_string().replace(':', "-")),
            (None, RootSpec::Dir { path }) => {
                let m = std::fs::metadata(path)?;
                let id = format!(
                    "{}\0{}\0{}\0{}",
                    path.display(),
                    m.dev(),
                    m.ino(),
                    m.mtime()
                );
                Some(format!(
                    "dir-{}",
                    hex::encode(&sha2::Sha256::digest(id.as_bytes())[..16])
                ))
            }
            (None, RootSpec::Host) => None,
        })
    }
}

/// Resolves `source` to a root filesystem, pulling or importing it into the store when needed.
pub fn open(
    source: &Source,
    policy: PullPolicy,
    progress: &mut dyn Progress,
) -> Result<Image, Error> {
    let (store, digest) = match source {
        Source::Host => {
            return Ok(Image {
                root: RootSpec::Host,
                config: RunConfig::default(),
                digest: None,
                user: None,
                _in_use: None,
            })
        }
        Source::RootfsDir(p) => {
            return Ok(Image {
                root: RootSpec::Dir { path: p.clone() },
                config: RunConfig::default(),
                digest: None,
                user: None,
                _in_use: None,
            })
        }
        Source::Registry(r) => {
            let store = store::Store::open()?;
            let d = pull::pull(&store, r, policy, progress)?;
            (store, d)
        }
        Source::OciLayout(p) => {
            let store = store::Store::open()?;
            let d = local::import_layout(&store, p, progress)?;
            (store, d)
        }
        Source::Archive(p) => {
            let store = store::Store::open()?;
            let d = local::import_archive(&store, p, progress)?;
            (store, d)
        }
    };
    let hold = store.hold(&digest)?;
    let meta = store.image(&digest)?.ok_or_else(|| {
        Error::Store(format!(
            "image {digest} was removed from the store while it was being opened; open it again"
        ))
    })?;
    let rootfs = store.rootfs(&digest);
    let config = meta.run_config.unwrap_or_default();
    let user = match config
        .user
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
    {
        None => None,
        Some(u) => {
            let what = format!(
                "image {}",
                meta.references
                    .first()
                    .map(String::as_str)
                    .unwrap_or(digest.as_str())
            );
            let resolved = user::resolve(&rootfs, u, &what)?;
            check_range(&resolved, &what, false)?;
            (resolved.uid != 0 || resolved.gid != 0).then_some(resolved)
        }
    };
    Ok(Image {
        root: RootSpec::Dir { path: rootfs },
        config,
        digest: Some(digest),
        user,
        _in_use: Some(hold),
    })
}

/// The `user` option: `account` ("name", "uid", "name:group", "uid:gid") resolved in the image's
/// own /etc/passwd and /etc/group, as the image's USER is. Box root is None.
pub fn resolve_user(root: &RootSpec, account: &str) -> Result<Option<BoxUser>, Error> {
    let dir = match root {
        RootSpec::Dir { path } => path.as_path(),
        RootSpec::Host => std::path::Path::new("/"),
    };
    let what = "option `user`";
    let resolved = user::resolve(dir, account, what)?;
    check_range(&resolved, what, true)?;
    Ok((resolved.uid != 0 || resolved.gid != 0).then_some(resolved))
}

/// A box has 65,536 ids. As root that is the range it is mapped to; rootless the one id it
/// maps may be any, so an image's USER above them still runs there, but the `user` option
/// (`everywhere`) is held to the same bound either way: a value that works in one posture only
/// is a mistake found late.
fn check_range(u: &BoxUser, what: &str, everywhere: bool) -> Result<(), Error> {
    let range = crate::engine::monitor::idmap::RANGE;
    let applies = everywhere || nix::unistd::geteuid().is_root();
    if applies && (u.uid >= range || u.gid >= range) {
        return Err(Error::Invalid(format!(
            "{what}: its USER resolves to uid {} gid {}, outside the {range} ids a box has (0 to {}); pick an account below {range}",
            u.uid, u.gid, range - 1
        )));
    }
    Ok(())
}
