//! The content store: `$KERN_HOME`, default `$XDG_CACHE_HOME/kern-sandbox` (or
//! `~/.cache/kern-sandbox`).
//!
//! ```text
//! blobs/sha256/<hex>        verified blobs: manifests, configs, compressed layers
//! images/<hex>/rootfs/      one unpacked root per image (named by its manifest digest)
//! images/<hex>/image.json   what `kern images` shows and what a box uses of the config
//! tags.json                 reference -> image digest, so a cached tag opens offline
//! locks/                    flock files: one writer per blob and per image
//! tmp/                      work in progress, renamed into place when complete
//! ```
//!
//! A directory under `images/` exists only once it is complete (it is renamed there from
//! `tmp/`), so nobody ever sees a partial root. Builders take an exclusive build lock per
//! image; sessions using an image hold a shared in-use lock, which `kern rmi` respects.

use super::digest::{Digest, Hashing};
use super::manifest::RunConfig;
use super::Error;
use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

/// What the store records of an image.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ImageMeta {
    pub digest: String,
    pub config_digest: String,
    /// References and paths it was opened by.
    #[serde(default)]
    pub references: Vec<String>,
    /// Compressed layer digests, in order.
    pub layers: Vec<String>,
    /// Bytes of the unpacked root.
    pub size: u64,
    /// Unix seconds when it was unpacked.
    pub created: u64,
    pub architecture: String,
    pub run_config: Option<RunConfig>,
    /// Whether file owners were kept (unpacked as root).
    pub chown: bool,
}

/// A tag's entry in tags.json.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TagEntry {
    /// What the reference itself resolved to (an index, or a manifest).
    pub resolved: String,
    /// The image (platform manifest) digest under images/.
    pub image: String,
    /// Unix seconds of the last resolution.
    pub at: u64,
}

/// Held while an image is built.
pub struct Building {
    _build: Flock<File>,
    _gc: Flock<File>,
}

/// A shared lock on an image: it is in use.
pub struct Hold {
    _lock: Flock<File>,
}

pub struct Store {
    root: PathBuf,
}

pub fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Store {
    /// kern's home directory (`crate::home`), where the store lives.
    pub fn default_root() -> Result<PathBuf, Error> {
        crate::home::root().map_err(|e| Error::Invalid(e.to_string()))
    }

    pub fn open() -> Result<Store, Error> {
        Store::at(Store::default_root()?)
    }

    pub fn at(root: PathBuf) -> Result<Store, Error> {
        for sub in ["blobs/sha256", "images", "locks", "tmp"] {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(root.join(sub))
                .map_err(|e| {
                    Error::store_io(
                        &format!("creating the image store at {}", root.display()),
                        e,
                    )
                })?;
        }
        Ok(Store { root })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn blob_path(&self, d: &Digest) -> PathBuf {
        self.root.join("blobs/sha256").join(d.hex())
    }

    pub fn has_blob(&self, d: &Digest) -> bool {
        self.blob_path(d).is_file()
    }

    pub fn image_dir(&self, d: &Digest) -> PathBuf {
        self.root.join("images").join(d.hex())
    }

    pub fn rootfs(&self, d: &Digest) -> PathBuf {
        self.image_dir(d).join("rootfs")
    }

    pub fn tmp_dir(&self) -> PathBuf {
        self.root.join("tmp")
    }

    /// The image, if it is complete in the store.
    pub fn image(&self, d: &Digest) -> Result<Option<ImageMeta>, Error> {
        let path = self.image_dir(d).join("image.json");
        match fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
                Error::Store(format!(
                    "{} is damaged ({e}); `kern rmi {d}` removes it",
                    path.display()
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::store_io(&format!("reading {}", path.display()), e)),
        }
    }

    /// Takes a named lock, blocking until it is free.
    pub fn lock(&self, name: &str, exclusive: bool) -> Result<Flock<File>, Error> {
        self.lock_with(name, exclusive, true)?
            .ok_or_else(|| Error::Store(format!("lock {name} is busy")))
    }

    /// Takes a named lock; `wait: false` returns None when it is held elsewhere.
    pub fn lock_with(
        &self,
        name: &str,
        exclusive: bool,
        wait: bool,
    ) -> Result<Option<Flock<File>>, Error> {
        let path = self.root.join("locks").join(format!("{name}.lock"));
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(&path)
            .map_err(|e| Error::store_io(&format!("opening lock {}", path.display()), e))?;
        let arg = match (exclusive, wait) {
            (true, true) => FlockArg::LockExclusive,
            (true, false) => FlockArg::LockExclusiveNonblock,
            (false, true) => FlockArg::LockShared,
            (false, false) => FlockArg::LockSharedNonblock,
        };
        match Flock::lock(file, arg) {
            Ok(l) => Ok(Some(l)),
            Err((_, nix::errno::Errno::EWOULDBLOCK)) if !wait => Ok(None),
            Err((_, e)) => Err(Error::Store(format!("locking {}: {e}", path.display()))),
        }
    }

    /// The lock of whoever builds image `d`: one process downloads and unpacks it, another
    /// waits here and then finds it complete. Separate from the in-use lock, so a session
    /// holding the image never blocks a second opener.
    /// It also holds the store's collection lock shared: `prune` (which takes it exclusively)
    /// must not take the blobs a build has downloaded but not yet unpacked.
    pub fn building(&self, d: &Digest) -> Result<Building, Error> {
        let gc = self.lock("gc", false)?;
        Ok(Building {
            _build: self.lock(&format!("build-{}", d.hex()), true)?,
            _gc: gc,
        })
    }

    /// Marks an image in use until the Hold drops.
    pub fn hold(&self, d: &Digest) -> Result<Hold, Error> {
        Ok(Hold {
            _lock: self.lock(&format!("image-{}", d.hex()), false)?,
        })
    }

    /// Stores a blob produced by `fill`, checking that what it wrote has digest `d`. One
    /// writer per blob; a blob already present is not fetched again.
    pub fn put_blob(
        &self,
        d: &Digest,
        fill: &mut dyn FnMut(&mut dyn Write) -> Result<(), Error>,
    ) -> Result<(), Error> {
        let _lock = self.lock(&format!("blob-{}", d.hex()), true)?;
        if self.has_blob(d) {
            return Ok(());
        }
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!("blob-{}-", d.hex()))
            .tempfile_in(self.tmp_dir())
            .map_err(|e| Error::store_io("creating a temp file in the store", e))?;
        {
            let mut w = Hashing::new(std::io::BufWriter::with_capacity(
                256 * 1024,
                tmp.as_file_mut(),
            ));
            fill(&mut w)?;
            w.flush()
                .map_err(|e| Error::store_io("writing a blob to the store", e))?;
            let (got, _, _) = w.finish();
            if got != *d {
                return Err(Error::Verify(format!(
                    "blob {d} arrived with digest {got}; nothing was kept"
                )));
            }
        }
        tmp.as_file()
            .sync_all()
            .map_err(|e| Error::store_io("syncing a blob", e))?;
        tmp.persist(self.blob_path(d))
            .map_err(|e| Error::store_io("moving a blob into the store", e.error))?;
        Ok(())
    }

    pub fn put_blob_bytes(&self, d: &Digest, bytes: &[u8]) -> Result<(), Error> {
        self.put_blob(d, &mut |w| {
            w.write_all(bytes)
                .map_err(|e| Error::store_io("writing a blob", e))
        })
    }

    /// Reads a small blob (manifest, config) whole, checking its digest again: the store is
    /// a plain directory and may have been tampered with.
    pub fn read_blob(&self, d: &Digest, limit: u64) -> Result<Vec<u8>, Error> {
        let path = self.blob_path(d);
        super::digest::read_small(&path, d, limit)
            .map_err(|e| Error::store_io(&format!("reading {}", path.display()), e))?
            .ok_or_else(|| {
                Error::Verify(format!(
                    "the stored blob {d} does not match its digest; `kern prune` and pull again"
                ))
            })
    }

    pub fn tags(&self) -> Result<BTreeMap<String, TagEntry>, Error> {
        let path = self.root.join("tags.json");
        match fs::read(&path) {
            Ok(b) => serde_json::from_slice(&b).map_err(|e| {
                Error::Store(format!(
                    "{} is damaged ({e}); delete it (cached images stay, tags are re-resolved)",
                    path.display()
                ))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(BTreeMap::new()),
            Err(e) => Err(Error::store_io(&format!("reading {}", path.display()), e)),
        }
    }

    pub fn tag(&self, key: &str) -> Result<Option<TagEntry>, Error> {
        Ok(self.tags()?.remove(key))
    }

    /// Changes tags.json under its lock, atomically (temp file + rename).
    pub fn update_tags(
        &self,
        change: &mut dyn FnMut(&mut BTreeMap<String, TagEntry>),
    ) -> Result<(), Error> {
        let _lock = self.lock("tags", true)?;
        let mut tags = self.tags()?;
        change(&mut tags);
        let bytes = serde_json::to_vec_pretty(&tags)
            .map_err(|e| Error::Store(format!("serialising tags: {e}")))?;
        self.write_atomic(&self.root.join("tags.json"), &bytes)
    }

    pub fn write_atomic(&self, path: &Path, bytes: &[u8]) -> Result<(), Error> {
        let mut tmp = tempfile::Builder::new()
            .prefix("write-")
            .tempfile_in(self.tmp_dir())
            .map_err(|e| Error::store_io("creating a temp file in the store", e))?;
        tmp.write_all(bytes)
            .and_then(|_| tmp.as_file().sync_all())
            .map_err(|e| Error::store_io(&format!("writing {}", path.display()), e))?;
        tmp.persist(path)
            .map_err(|e| Error::store_io(&format!("replacing {}", path.display()), e.error))?;
        Ok(())
    }

    /// Adds a reference to an image's record (for `kern images`).
    pub fn note_reference(&self, d: &Digest, reference: &str) -> Result<(), Error> {
        let _lock = self.lock(&format!("meta-{}", d.hex()), true)?;
        if let Some(mut meta) = self.image(d)? {
            if !meta.references.iter().any(|r| r == reference) {
                meta.references.push(reference.to_string());
                let bytes = serde_json::to_vec_pretty(&meta)
                    .map_err(|e| Error::Store(format!("serialising image.json: {e}")))?;
                self.write_atomic(&self.image_dir(d).join("image.json"), &bytes)?;
            }
        }
        Ok(())
    }

    pub fn images(&self) -> Result<Vec<ImageMeta>, Error> {
        let mut out = Vec::new();
        let dir = self.root.join("images");
        let entries = fs::read_dir(&dir)
            .map_err(|e| Error::store_io(&format!("listing {}", dir.display()), e))?;
        for e in entries.flatten() {
            let Some(d) = e
                .file_name()
                .to_str()
                .and_then(|n| Digest::parse(&format!("sha256:{n}")).ok())
            else {
                continue;
            };
            if let Ok(Some(m)) = self.image(&d) {
                out.push(m);
            }
        }
        out.sort_by_key(|m| std::cmp::Reverse(m.created));
        Ok(out)
    }

    /// Finds an image by digest, digest prefix (12+ hex digits) or a reference it was opened by.
    pub fn find(&self, what: &str) -> Result<Option<ImageMeta>, Error> {
        let images = self.images()?;
        let hex = what.strip_prefix("sha256:").unwrap_or(what);
        if hex.len() >= 12 && hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            let hits: Vec<_> = images
                .iter()
                .filter(|m| m.digest[7..].starts_with(hex))
                .collect();
            if hits.len() == 1 {
                return Ok(Some(hits[0].clone()));
            }
        }
        let canonical = super::reference::Reference::parse(what)
            .map(|r| r.to_string())
            .unwrap_or_else(|_| what.to_string());
        if let Some(t) = self.tag(&canonical)? {
            if let Some(m) = images.iter().find(|m| m.digest == t.image) {
                return Ok(Some(m.clone()));
            }
        }
        Ok(images
            .into_iter()
            .find(|m| m.references.iter().any(|r| r == what || *r == canonical)))
    }

    /// Deletes an image unless a session holds it. Its tags go too; blobs stay for `prune`.
    pub fn remove_image(&self, d: &Digest) -> Result<bool, Error> {
        let Some(_lock) = self.lock_with(&format!("image-{}", d.hex()), true, false)? else {
            return Ok(false);
        };
        let dir = self.image_dir(d);
        if dir.exists() {
            // Rename first: the image vanishes at once, and a crash mid-delete leaves only
            // garbage in tmp/ for prune.
            let grave = self
                .tmp_dir()
                .join(format!("rm-{}-{}", d.hex(), std::process::id()));
            fs::rename(&dir, &grave)
                .map_err(|e| Error::store_io(&format!("removing {}", dir.display()), e))?;
            remove_tree(&grave)?;
        }
        let image = d.to_string();
        self.update_tags(&mut |t| t.retain(|_, e| e.image != image))?;
        Ok(true)
    }

    /// Removes what no image needs: blobs no image lists (other than the manifests and
    /// configs of images present), abandoned work in tmp/, and tags of missing images.
    /// Returns (files removed, bytes freed).
    pub fn prune(&self) -> Result<(u64, u64), Error> {
        // No build is between downloading its blobs and recording its image.
        let _gc = self.lock("gc", true)?;
        let images = self.images()?;
        let mut keep = std::collections::HashSet::new();
        for m in &images {
            keep.insert(m.digest[7..].to_string());
            keep.insert(m.config_digest[7..].to_string());
            for l in &m.layers {
                keep.insert(l.trim_start_matches("sha256:").to_string());
            }
        }
        let tags = self.tags()?;
        for t in tags.values() {
            if images.iter().any(|m| m.digest == t.image) {
                keep.insert(t.resolved.trim_start_matches("sha256:").to_string());
            }
        }
        let (mut files, mut bytes) = (0, 0);
        let blobs = self.root.join("blobs/sha256");
        for e in fs::read_dir(&blobs)
            .map_err(|e| Error::store_io("listing blobs", e))?
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            if keep.contains(&name) {
                continue;
            }
            // A blob being written holds its lock; leave it.
            if let Some(_l) = self.lock_with(&format!("blob-{name}"), true, false)? {
                let size = e.metadata().map(|m| m.len()).unwrap_or(0);
                if fs::remove_file(e.path()).is_ok() {
                    files += 1;
                    bytes += size;
                }
            }
        }
        // Work in progress holds its build (or blob) lock; an unlocked entry is abandoned.
        for e in fs::read_dir(self.tmp_dir())
            .map_err(|e| Error::store_io("listing tmp", e))?
            .flatten()
        {
            let name = e.file_name().to_string_lossy().into_owned();
            let busy = name
                .split('-')
                .nth(1)
                .filter(|h| h.len() == 64)
                .map(|h| {
                    let lock = if name.starts_with("blob-") {
                        format!("blob-{h}")
                    } else {
                        format!("build-{h}")
                    };
                    self.lock_with(&lock, true, false).map(|l| l.is_none())
                })
                .transpose()?
                .unwrap_or(false);
            // Other temp files (tags.json, image.json rewrites) live for milliseconds: only
            // an old one is abandoned.
            let stale = name.starts_with("unpack-")
                || name.starts_with("blob-")
                || name.starts_with("rm-")
                || e.metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| t.elapsed().ok())
                    .is_some_and(|age| age.as_secs() > 3600);
            if stale && !busy {
                let size = tree_size(&e.path());
                if remove_tree(&e.path()).is_ok() {
                    files += 1;
                    bytes += size;
                }
            }
        }
        let present: std::collections::HashSet<String> =
            images.iter().map(|m| m.digest.clone()).collect();
        self.update_tags(&mut |t| t.retain(|_, e| present.contains(&e.image)))?;
        Ok((files, bytes))
    }
}

/// Removes a tree we own, first reopening directories an image closed (0555), which would
/// otherwise stop an unprivileged owner.
pub fn remove_tree(path: &Path) -> Result<(), Error> {
    crate::workspace::make_deletable(path);
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => fs::remove_dir_all(path),
        Ok(_) => fs::remove_file(path),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e),
    }
    .map_err(|e| Error::store_io(&format!("removing {}", path.display()), e))
}

/// Bytes under a tree (regular files, by their length), without following symlinks. A single
/// file is its own size; what cannot be read counts as nothing.
pub fn tree_size(path: &Path) -> u64 {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_file() => return m.len(),
        Ok(m) if m.is_dir() => {}
        _ => return 0,
    }
    let mut total = 0;
    crate::fsx::walk::walk(path, usize::MAX, |e| {
        if e.is_file() {
            total += u64::try_from(e.stat.st_size).unwrap_or(0);
        }
        true
    });
    total
}
