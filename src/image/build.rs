//! Turning verified layers into an image root in the store: decompress, check each layer's
//! compressed digest and `diff_id`, apply it, and rename the finished tree into place.

use super::digest::{Digest, Hashing};
use super::manifest::{Compression, ImageConfig};
use super::store::{self, ImageMeta, Store};
use super::unpack::{UnpackOptions, Unpacker};
use super::{Error, Progress};
use std::io::Read;

/// One layer as the manifest and config describe it.
#[derive(Debug, Clone)]
pub struct Layer {
    pub digest: Digest,
    pub size: u64,
    pub compression: Compression,
    pub diff_id: Digest,
}

pub struct Recipe {
    /// The store's name for the image.
    pub digest: Digest,
    pub config_digest: Digest,
    pub config: ImageConfig,
    pub layers: Vec<Layer>,
    /// What the user asked for, for `kern images`.
    pub reference: String,
}

/// A layer's uncompressed size may not exceed this (a decompression-bomb guard). Override with
/// `KERN_MAX_LAYER_BYTES`.
const MAX_LAYER_BYTES: u64 = 32 << 30;
const MAX_ENTRIES: u64 = 4_000_000;

/// Gives a layer's compressed bytes.
pub type OpenBlob<'a> = dyn FnMut(&Layer) -> Result<Box<dyn Read>, Error> + 'a;

/// The digest, size and compression of each layer a manifest lists.
pub fn describe(
    descriptors: &[super::manifest::Descriptor],
    what: &str,
) -> Result<Vec<(Digest, u64, Compression)>, Error> {
    descriptors
        .iter()
        .map(|l| {
            let compression = super::manifest::layer_compression(&l.media_type).ok_or_else(|| {
                Error::Unpack(format!(
                    "{what}: layer media type {:?} is not one we can apply (tar, tar+gzip or tar+zstd)",
                    l.media_type
                ))
            })?;
            let d = l
                .digest()
                .map_err(|e| Error::Verify(format!("{what}: layer: {e}")))?;
            Ok((d, l.size, compression))
        })
        .collect()
}

/// Pairs a config's `diff_ids` with a manifest's layer descriptors.
pub fn layers(
    config: &ImageConfig,
    descriptors: &[(Digest, u64, Compression)],
    what: &str,
) -> Result<Vec<Layer>, Error> {
    if config.rootfs.diff_ids.len() != descriptors.len() {
        return Err(Error::Verify(format!(
            "{what}: the manifest lists {} layers but the config's rootfs.diff_ids lists {}; the image is malformed",
            descriptors.len(),
            config.rootfs.diff_ids.len()
        )));
    }
    descriptors
        .iter()
        .zip(&config.rootfs.diff_ids)
        .map(|((digest, size, compression), diff)| {
            Ok(Layer {
                digest: digest.clone(),
                size: *size,
                compression: *compression,
                diff_id: Digest::parse(diff)
                    .map_err(|e| Error::Verify(format!("{what}: diff_id: {e}")))?,
            })
        })
        .collect()
}

/// Builds `recipe` into the store. The caller holds the image's exclusive lock and has checked
/// that it is not there yet. `open_blob` gives a layer's compressed bytes.
pub fn build(
    store: &Store,
    recipe: &Recipe,
    open_blob: &mut OpenBlob,
    progress: &mut dyn Progress,
) -> Result<(), Error> {
    let work = store.tmp_dir().join(format!(
        "unpack-{}-{}",
        recipe.digest.hex(),
        std::process::id()
    ));
    // Left by a crashed earlier attempt of this same process id, or of ours: it is garbage.
    if work.exists() {
        store::remove_tree(&work)?;
    }
    let result = build_in(store, recipe, &work, open_blob, progress);
    if result.is_err() {
        // Nothing half-written stays.
        let _ = store::remove_tree(&work);
    }
    result
}

fn build_in(
    store: &Store,
    recipe: &Recipe,
    work: &std::path::Path,
    open_blob: &mut OpenBlob,
    progress: &mut dyn Progress,
) -> Result<(), Error> {
    use std::os::unix::fs::DirBuilderExt;
    let rootfs = work.join("rootfs");
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(&rootfs)
        .map_err(|e| Error::store_io("creating the unpack directory", e))?;
    let chown = nix::unistd::geteuid().is_root();
    let max_layer_bytes = std::env::var("KERN_MAX_LAYER_BYTES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(MAX_LAYER_BYTES);
    let what = &recipe.reference;
    let mut unpacker = Unpacker::new(
        &rootfs,
        UnpackOptions {
            chown,
            max_layer_bytes,
            max_entries: MAX_ENTRIES,
        },
    )
    .map_err(|e| Error::Unpack(format!("{what}: {e}")))?;
    for (i, layer) in recipe.layers.iter().enumerate() {
        progress.message(&format!(
            "unpacking layer {}/{}",
            i + 1,
            recipe.layers.len()
        ));
        let mut compressed = Hashing::new(open_blob(layer)?);
        let decoded: Box<dyn Read + '_> = match layer.compression {
            Compression::None => Box::new(&mut compressed),
            Compression::Gzip => Box::new(flate2::read::MultiGzDecoder::new(&mut compressed)),
            Compression::Zstd => Box::new(
                zstd::stream::read::Decoder::new(&mut compressed).map_err(|e| {
                    Error::Unpack(format!("{what}: layer {}: zstd: {e}", layer.digest))
                })?,
            ),
        };
        let mut uncompressed = Hashing::new(decoded);
        unpacker
            .apply_layer(&mut uncompressed)
            .map_err(|e| match os_error(&e) {
                Some(libc::ENOSPC) | Some(libc::EDQUOT) => Error::store_io(
                    &format!("{what}: unpacking layer {}", layer.digest),
                    std::io::Error::from_raw_os_error(libc::ENOSPC),
                ),
                _ => Error::Unpack(format!(
                    "{what}: layer {} refused: {e}; nothing of the image was kept",
                    layer.digest
                )),
            })?;
        // The tar ends before the stream does (end-of-archive blocks, padding): the diff_id
        // covers every byte.
        std::io::copy(&mut uncompressed, &mut std::io::sink())
            .map_err(|e| Error::Unpack(format!("{what}: layer {}: {e}", layer.digest)))?;
        let (diff, _, decoded) = uncompressed.finish();
        drop(decoded);
        if diff != layer.diff_id {
            return Err(Error::Verify(format!(
                "{what}: layer {} uncompresses to {diff}, but the config says {}; the image is corrupt or tampered with, nothing was kept",
                layer.digest, layer.diff_id
            )));
        }
        std::io::copy(&mut compressed, &mut std::io::sink())
            .map_err(|e| Error::Unpack(format!("{what}: layer {}: {e}", layer.digest)))?;
        let (got, n, _) = compressed.finish();
        if got != layer.digest || n != layer.size {
            return Err(Error::Verify(format!(
                "{what}: layer {} has digest {got} ({n} bytes, {} declared); corrupt or tampered with, nothing was kept",
                layer.digest, layer.size
            )));
        }
    }
    unpacker
        .finish()
        .map_err(|e| Error::Unpack(format!("{what}: {e}")))?;
    crate::engine::boxside::rootfs::write_missing_identity(
        &rootfs,
        crate::engine::shared::spec::DEFAULT_HOSTNAME,
    )
    .map_err(|e| Error::Unpack(format!("{what}: writing /etc/hosts: {e}")))?;
    let meta = ImageMeta {
        digest: recipe.digest.to_string(),
        config_digest: recipe.config_digest.to_string(),
        references: vec![recipe.reference.clone()],
        layers: recipe.layers.iter().map(|l| l.digest.to_string()).collect(),
        size: store::tree_size(&rootfs),
        created: store::now(),
        architecture: recipe.config.architecture.clone(),
        run_config: recipe.config.config.clone(),
        chown,
    };
    let bytes = serde_json::to_vec_pretty(&meta)
        .map_err(|e| Error::Store(format!("serialising image.json: {e}")))?;
    std::fs::write(work.join("image.json"), bytes)
        .map_err(|e| Error::store_io("writing image.json", e))?;
    // One syncfs instead of an fsync per file: after a crash, a root that was renamed into
    // place is complete on disk.
    if let Ok(dir) = std::fs::File::open(work) {
        nix::unistd::syncfs(&dir)
            .map_err(|e| Error::store_io("syncing the unpacked image", std::io::Error::from(e)))?;
    }
    let dest = store.image_dir(&recipe.digest);
    std::fs::rename(work, &dest)
        .map_err(|e| Error::store_io(&format!("moving the image into {}", dest.display()), e))?;
    Ok(())
}

/// The errno of the first I/O error in an error's chain: a full disk is the user's to fix.
fn os_error(e: &(dyn std::error::Error + 'static)) -> Option<i32> {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            return io.raw_os_error();
        }
        cur = err.source();
    }
    None
}
