//! Images from local files: an OCI image layout directory, and an image archive (`docker save`
//! / `podman save` in Docker's format, or an OCI archive), unpacked into the same store, with
//! the same verification, as a registry pull.

use super::build::{self, Layer, Recipe};
use super::digest::Digest;
use super::manifest::{self, Compression, Parsed};
use super::store::{self, Store, TagEntry};
use super::{Error, Progress};
use std::fs::File;
use std::io::{BufReader, Read};
use std::path::{Path, PathBuf};

const MAX_JSON: u64 = 16 << 20;

/// Reads a blob of a layout whole, checking its digest.
fn layout_blob(dir: &Path, d: &Digest, what: &str) -> Result<Vec<u8>, Error> {
    let path = dir.join("blobs/sha256").join(d.hex());
    super::digest::read_small(&path, d, MAX_JSON)
        .map_err(|e| {
            Error::NotFound(format!(
                "{what}: blob {d} is missing ({e}); the layout is incomplete"
            ))
        })?
        .ok_or_else(|| {
            Error::Verify(format!(
                "{what}: blob {d} does not match its digest; the layout is corrupt"
            ))
        })
}

/// Imports the image of an OCI layout for this platform; returns its digest.
pub fn import_layout(
    store: &Store,
    dir: &Path,
    progress: &mut dyn Progress,
) -> Result<Digest, Error> {
    let what = format!("image {}", dir.display());
    let index = std::fs::read(dir.join("index.json"))
        .map_err(|e| Error::Invalid(format!("{what}: cannot read index.json: {e}")))?;
    let mut bytes = index;
    // index.json may list a manifest, or an index (skopeo --all): walk down to a manifest.
    let mut image_digest = None;
    for _ in 0..4 {
        match manifest::parse(&bytes, Some(manifest::OCI_INDEX))
            .map_err(|e| Error::Invalid(format!("{what}: {e}")))?
        {
            Parsed::Manifest { .. } => break,
            Parsed::Index(entries) => {
                let chosen = if entries.len() == 1 && entries[0].platform.is_none() {
                    &entries[0]
                } else {
                    manifest::select(&entries, manifest::host_arch())
                        .map_err(|e| Error::Platform(format!("{what}: {e}")))?
                };
                let d = chosen
                    .digest()
                    .map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
                bytes = layout_blob(dir, &d, &what)?;
                image_digest = Some(d);
            }
        }
    }
    let image_digest = image_digest
        .ok_or_else(|| Error::Invalid(format!("{what}: index.json lists no manifest")))?;
    let (config_desc, layer_descs) = match manifest::parse(&bytes, None)
        .map_err(|e| Error::Invalid(format!("{what}: {e}")))?
    {
        Parsed::Manifest { config, layers } => (config, layers),
        Parsed::Index(_) => return Err(Error::Invalid(format!("{what}: indexes nest too deep"))),
    };
    let reference = dir.display().to_string();
    let _lock = store.building(&image_digest)?;
    if store.image(&image_digest)?.is_some() {
        store.note_reference(&image_digest, &reference)?;
        return Ok(image_digest);
    }
    let config_digest = config_desc
        .digest()
        .map_err(|e| Error::Invalid(format!("{what}: config: {e}")))?;
    let config_bytes = layout_blob(dir, &config_digest, &what)?;
    let config = manifest::parse_config(&config_bytes)
        .map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
    super::pull::check_platform(&config, &what)?;
    let descs = build::describe(&layer_descs, &what)?;
    let layers = build::layers(&config, &descs, &what)?;
    // Manifests and configs are small: keep them in the store like a pull does; layers are
    // read from the layout (and verified) without a copy.
    store.put_blob_bytes(&image_digest, &bytes)?;
    store.put_blob_bytes(&config_digest, &config_bytes)?;
    let recipe = Recipe {
        digest: image_digest.clone(),
        config_digest,
        config,
        layers,
        reference,
    };
    build::build(
        store,
        &recipe,
        &mut |l: &Layer| {
            let p = dir.join("blobs/sha256").join(l.digest.hex());
            File::open(&p)
                .map(|f| Box::new(BufReader::with_capacity(256 * 1024, f)) as _)
                .map_err(|e| {
                    Error::NotFound(format!(
                        "{what}: layer {} is missing ({e}); the layout is incomplete",
                        l.digest
                    ))
                })
        },
        progress,
    )?;
    Ok(image_digest)
}

/// What identifies an archive file without reading it: a changed file is imported again.
fn fingerprint(path: &Path) -> Result<String, Error> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path)
        .map_err(|e| Error::Invalid(format!("image {}: {e}", path.display())))?;
    Ok(format!(
        "{}:{}:{}:{}",
        m.dev(),
        m.ino(),
        m.size(),
        m.mtime_nsec() + m.mtime() * 1_000_000_000
    ))
}

/// Imports a `docker save` / `podman save` / OCI archive; returns the image digest.
pub fn import_archive(
    store: &Store,
    path: &Path,
    progress: &mut dyn Progress,
) -> Result<Digest, Error> {
    let what = format!("image {}", path.display());
    let key = format!("archive:{}", path.display());
    let print = fingerprint(path)?;
    if let Some(t) = store.tag(&key)? {
        if t.resolved == print {
            let d = Digest::parse(&t.image).map_err(Error::Store)?;
            if store.image(&d)?.is_some() {
                return Ok(d);
            }
        }
    }
    // The archive's members are extracted into a private temp dir (regular files with plain
    // names only) and read from there: docker puts manifest.json last, so it must be read whole
    // anyway.
    let tmp = tempfile::Builder::new()
        .prefix("archive-")
        .tempdir_in(store.tmp_dir())
        .map_err(|e| Error::store_io("creating a temp dir in the store", e))?;
    extract_members(path, tmp.path(), &what)?;
    let digest = if tmp.path().join("index.json").is_file() && tmp.path().join("blobs").is_dir() {
        import_layout(store, tmp.path(), progress)?
    } else {
        import_docker(store, tmp.path(), &what, progress)?
    };
    store.note_reference(&digest, &path.display().to_string())?;
    let entry = TagEntry {
        resolved: print,
        image: digest.to_string(),
        at: store::now(),
    };
    store.update_tags(&mut |t| {
        t.insert(key.clone(), entry.clone());
    })?;
    Ok(digest)
}

/// A member name we extract: relative, no `..`, no odd characters.
fn member_name(name: &Path) -> Option<PathBuf> {
    let s = name.to_str()?.trim_start_matches("./");
    if s.is_empty() || s.starts_with('/') || s.len() > 512 {
        return None;
    }
    let ok = s.split('/').all(|c| {
        !c.is_empty()
            && c != ".."
            && c != "."
            && c.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-' | b':'))
    });
    ok.then(|| PathBuf::from(s))
}

fn extract_members(archive: &Path, dest: &Path, what: &str) -> Result<(), Error> {
    let f = File::open(archive).map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
    let mut magic = [0u8; 4];
    let compressed = {
        use std::io::{Seek, SeekFrom};
        let mut f2 = &f;
        let n = f2.read(&mut magic).unwrap_or(0);
        f2.seek(SeekFrom::Start(0))
            .map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
        n >= 2 && magic[..2] == [0x1f, 0x8b]
    };
    let reader: Box<dyn Read> = if compressed {
        Box::new(flate2::read::MultiGzDecoder::new(BufReader::new(f)))
    } else {
        Box::new(BufReader::new(f))
    };
    let mut archive_reader = tar::Archive::new(reader);
    let entries = archive_reader
        .entries()
        .map_err(|e| Error::Invalid(format!("{what} is not a tar archive: {e}")))?;
    let mut any = false;
    for entry in entries {
        let mut entry =
            entry.map_err(|e| Error::Invalid(format!("{what}: a damaged tar archive: {e}")))?;
        if !entry.header().entry_type().is_file() {
            continue;
        }
        let Some(name) = entry.path().ok().and_then(|p| member_name(&p)) else {
            continue;
        };
        let out = dest.join(&name);
        if let Some(parent) = out.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| Error::store_io("extracting an archive", e))?;
        }
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&out)
            .map_err(|e| Error::store_io(&format!("{what}: extracting {}", name.display()), e))?;
        std::io::copy(&mut entry, &mut file)
            .map_err(|e| Error::store_io(&format!("{what}: extracting {}", name.display()), e))?;
        any = true;
    }
    if !any {
        return Err(Error::Invalid(format!(
            "{what} holds no image files; pass a `docker save` archive, an OCI archive, an OCI layout directory or a root filesystem directory"
        )));
    }
    Ok(())
}

#[derive(serde::Deserialize)]
struct DockerEntry {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "RepoTags", default)]
    repo_tags: Option<Vec<String>>,
    #[serde(rename = "Layers")]
    layers: Vec<String>,
}

/// The legacy `docker save` format: manifest.json naming a config file and layer tars.
fn import_docker(
    store: &Store,
    dir: &Path,
    what: &str,
    progress: &mut dyn Progress,
) -> Result<Digest, Error> {
    let m = std::fs::read(dir.join("manifest.json")).map_err(|_| {
        Error::Invalid(format!(
            "{what} has neither manifest.json (docker save) nor index.json (OCI archive)"
        ))
    })?;
    let mut entries: Vec<DockerEntry> = serde_json::from_slice(&m)
        .map_err(|e| Error::Invalid(format!("{what}: manifest.json: {e}")))?;
    if entries.len() != 1 {
        return Err(Error::Invalid(format!(
            "{what} holds {} images; save one image per archive",
            entries.len()
        )));
    }
    let entry = entries.remove(0);
    let member = |name: &str| -> Result<PathBuf, Error> {
        member_name(Path::new(name))
            .map(|n| dir.join(n))
            .filter(|p| p.is_file())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{what}: manifest.json names {name:?}, which the archive does not hold"
                ))
            })
    };
    let config_path = member(&entry.config)?;
    let mut config_bytes = Vec::new();
    File::open(&config_path)
        .and_then(|f| f.take(MAX_JSON + 1).read_to_end(&mut config_bytes))
        .map_err(|e| Error::Invalid(format!("{what}: config: {e}")))?;
    // docker save has no manifest: the image is named by its config digest (Docker's image ID).
    let config_digest = Digest::of(&config_bytes);
    let config = manifest::parse_config(&config_bytes)
        .map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
    super::pull::check_platform(&config, what)?;
    let mut descs = Vec::new();
    let mut paths = Vec::new();
    for l in &entry.layers {
        let p = member(l)?;
        let (digest, size, compression) = describe_layer(&p, what)?;
        paths.push((digest.clone(), p));
        descs.push((digest, size, compression));
    }
    let layers = build::layers(&config, &descs, what)?;
    let _lock = store.building(&config_digest)?;
    if store.image(&config_digest)?.is_none() {
        store.put_blob_bytes(&config_digest, &config_bytes)?;
        let recipe = Recipe {
            digest: config_digest.clone(),
            config_digest: config_digest.clone(),
            config,
            layers,
            reference: entry
                .repo_tags
                .and_then(|t| t.into_iter().next())
                .unwrap_or_else(|| what.trim_start_matches("image ").to_string()),
        };
        build::build(
            store,
            &recipe,
            &mut |l: &Layer| {
                let p = paths
                    .iter()
                    .find(|(d, _)| *d == l.digest)
                    .map(|(_, p)| p)
                    .ok_or_else(|| Error::Store(format!("{what}: layer {} vanished", l.digest)))?;
                File::open(p)
                    .map(|f| Box::new(BufReader::with_capacity(256 * 1024, f)) as _)
                    .map_err(|e| Error::store_io("reading a layer", e))
            },
            progress,
        )?;
    }
    Ok(config_digest)
}

/// A layer file's digest, size and compression (by its magic bytes: docker save writes plain
/// tars, newer tools may write compressed ones).
fn describe_layer(path: &Path, what: &str) -> Result<(Digest, u64, Compression), Error> {
    let f = File::open(path).map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
    let mut h = super::digest::Hashing::new(BufReader::new(f));
    let mut magic = [0u8; 4];
    let n = h
        .read(&mut magic)
        .map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
    std::io::copy(&mut h, &mut std::io::sink())
        .map_err(|e| Error::Invalid(format!("{what}: {e}")))?;
    let (d, size, _) = h.finish();
    let c = if n >= 2 && magic[..2] == [0x1f, 0x8b] {
        Compression::Gzip
    } else if n == 4 && magic == [0x28, 0xb5, 0x2f, 0xfd] {
        Compression::Zstd
    } else {
        Compression::None
    };
    Ok((d, size, c))
}
