//! Pulling a registry image into the store.
//!
//! The policy (`KERN_PULL`, see `PullPolicy`): a reference already in tags.json whose image is
//! complete opens with no network at all. Only `always` (or `kern pull`) asks the registry
//! again, with a HEAD (not counted against Docker Hub's pull limit), and downloads only when
//! the tag moved. A digest reference never needs the registry once cached.

use super::build::{self, Layer, Recipe};
use super::digest::Digest;
use super::manifest::{self, Parsed};
use super::net::Net;
use super::reference::Reference;
use super::registry::{self, Client, Source};
use super::store::{self, Store, TagEntry};
use super::{Error, Progress, PullPolicy};

const MAX_CONFIG: u64 = 16 << 20;

/// Makes `reference` present in the store and returns the image digest.
pub fn pull(
    store: &Store,
    reference: &Reference,
    policy: PullPolicy,
    progress: &mut dyn Progress,
) -> Result<Digest, Error> {
    let key = reference.to_string();
    let cached = match store.tag(&key)? {
        Some(t) => {
            let d = Digest::parse(&t.image).map_err(Error::Store)?;
            store.image(&d)?.map(|_| (d, t))
        }
        None => None,
    };
    match (&cached, policy) {
        (Some((d, _)), PullPolicy::Missing | PullPolicy::Never) => return Ok(d.clone()),
        // A digest names content that cannot change: nothing to ask.
        (Some((d, _)), PullPolicy::Always) if reference.digest.is_some() => return Ok(d.clone()),
        (None, PullPolicy::Never) => {
            return Err(Error::NotFound(format!(
                "image {reference} is not in the image store ({}) and KERN_PULL=never forbids pulling it; run `kern pull {reference}` where the registry is reachable",
                store.root().display()
            )))
        }
        _ => {}
    }
    // Settings first: a broken KERN_REGISTRY_CA, proxy or mirror list fails before any traffic.
    let mirrors = registry::mirrors(reference)?;
    let net = Net::from_env(registry::timeout())?;
    let from = |source: &Source, progress: &mut dyn Progress| {
        let mut client = Client::new(reference, source, &net)?;
        fetch(
            store,
            reference,
            &key,
            cached.as_ref(),
            &mut client,
            progress,
        )
    };
    let mut passed: Vec<String> = Vec::new();
    for source in &mirrors {
        match from(source, progress) {
            Ok(d) => {
                progress.message(&format!("{reference}: served by mirror {}", source.base));
                return Ok(d);
            }
            // As Docker does it: a mirror that lacks the image, fails or sends something that
            // does not verify is passed over; what it did deliver was checked by digest, so the
            // store keeps only good blobs.
            Err(e) if falls_back(&e) => {
                // The error names the mirror already.
                progress.message(&format!("{e}; trying the next source"));
                passed.push(first_sentence(&e));
            }
            Err(e) => return Err(e),
        }
    }
    from(&Source::origin(reference), progress).map_err(|e| {
        if passed.is_empty() {
            e
        } else {
            e.with_note(&format!(
                " (tried first, from {}: {})",
                super::net::MIRRORS_VAR,
                passed.join("; ")
            ))
        }
    })
}

/// Errors a mirror may be passed over for: it lacks the image, is down, refuses us, sent
/// something that did not verify, or holds a copy without this machine's platform (a mirror
/// that pulled one platform through, or was filled by hand). Not the caller's own (a bad
/// setting, a full disk), which the origin would repeat.
fn falls_back(e: &Error) -> bool {
    matches!(
        e,
        Error::NotFound(_)
            | Error::Unreachable(_)
            | Error::Auth(_)
            | Error::Registry(_)
            | Error::Verify(_)
            | Error::Platform(_)
    )
}

fn first_sentence(e: &Error) -> String {
    let s = e.to_string();
    match s.find(". ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// The pull from one source.
fn fetch(
    store: &Store,
    reference: &Reference,
    key: &str,
    cached: Option<&(Digest, TagEntry)>,
    client: &mut Client,
    progress: &mut dyn Progress,
) -> Result<Digest, Error> {
    let (top_ref, pinned) = match (&reference.digest, &reference.tag) {
        (Some(d), _) => (d.clone(), Some(Digest::parse(d).map_err(Error::Invalid)?)),
        (None, Some(t)) => (t.clone(), None),
        (None, None) => unreachable_ref(reference)?,
    };
    // A cached tag asked again: if it still points where it did, we are done.
    if let (Some((d, entry)), None) = (cached, &pinned) {
        if let Some(now) = client.head_manifest(&top_ref)? {
            if now.as_str() == entry.resolved {
                record_tag(store, key, &now, d)?;
                return Ok(d.clone());
            }
        }
    }
    progress.message(&format!("resolving {reference}"));
    let top = client.get_manifest(&top_ref)?;
    let top_digest = Digest::of(&top.bytes);
    if let Some(p) = &pinned {
        if *p != top_digest {
            return Err(Error::Verify(format!(
                "image {reference}: the registry answered digest {p} with content whose digest is {top_digest}; refused"
            )));
        }
    }
    let what = format!("image {reference}");
    let (image_digest, bytes) = match manifest::parse(&top.bytes, top.content_type.as_deref())
        .map_err(|e| Error::Registry(format!("{what}: {e}")))?
    {
        Parsed::Manifest { .. } => (top_digest.clone(), top.bytes),
        Parsed::Index(entries) => {
            let arch = manifest::host_arch();
            // Named by the source that answered: a mirror's copy may lack what the origin has.
            let chosen = manifest::select(&entries, arch)
                .map_err(|e| Error::Platform(format!("{}: {e}", client.what())))?;
            let d = chosen
                .digest()
                .map_err(|e| Error::Registry(format!("{what}: index entry: {e}")))?;
            let m = client.get_manifest(d.as_str())?;
            if Digest::of(&m.bytes) != d {
                return Err(Error::Verify(format!(
                    "{what}: manifest {d} arrived with a different digest; refused"
                )));
            }
            (d, m.bytes)
        }
    };
    let (config_desc, layer_descs) =
        match manifest::parse(&bytes, None).map_err(|e| Error::Registry(format!("{what}: {e}")))? {
            Parsed::Manifest { config, layers } => (config, layers),
            Parsed::Index(_) => {
                return Err(Error::Registry(format!(
                    "{what}: the index for this platform points at another index; not supported"
                )))
            }
        };

    // One process downloads and unpacks an image; another waits here and then finds it done.
    let _lock = store.building(&image_digest)?;
    if store.image(&image_digest)?.is_none() {
        store.put_blob_bytes(&image_digest, &bytes)?;
        let config_digest = config_desc
            .digest()
            .map_err(|e| Error::Registry(format!("{what}: config: {e}")))?;
        if !store.has_blob(&config_digest) {
            store.put_blob(&config_digest, &mut |w| {
                client.get_blob(&config_digest, config_desc.size, w, &mut |_| {})
            })?;
        }
        let config_bytes = store.read_blob(&config_digest, MAX_CONFIG)?;
        let config = manifest::parse_config(&config_bytes)
            .map_err(|e| Error::Registry(format!("{what}: {e}")))?;
        check_platform(&config, &client.what())?;
        let descs = build::describe(&layer_descs, &what)?;
        let layers = build::layers(&config, &descs, &what)?;
        for layer in &layers {
            download_layer(store, client, layer, progress)?;
        }
        let recipe = Recipe {
            digest: image_digest.clone(),
            config_digest,
            config,
            layers,
            reference: key.to_string(),
        };
        build::build(
            store,
            &recipe,
            &mut |l: &Layer| {
                let path = store.blob_path(&l.digest);
                std::fs::File::open(&path)
                    .map(|f| Box::new(std::io::BufReader::with_capacity(256 * 1024, f)) as _)
                    .map_err(|e| Error::store_io(&format!("opening {}", path.display()), e))
            },
            progress,
        )?;
    } else {
        store.note_reference(&image_digest, key)?;
    }
    record_tag(store, key, &top_digest, &image_digest)?;
    Ok(image_digest)
}

fn unreachable_ref(reference: &Reference) -> Result<(String, Option<Digest>), Error> {
    Err(Error::Invalid(format!(
        "image {reference} has neither a tag nor a digest"
    )))
}

fn download_layer(
    store: &Store,
    client: &mut Client,
    layer: &Layer,
    progress: &mut dyn Progress,
) -> Result<(), Error> {
    if store.has_blob(&layer.digest) {
        progress.layer_start(&layer.digest, layer.size, true);
        progress.layer_done(&layer.digest);
        return Ok(());
    }
    progress.layer_start(&layer.digest, layer.size, false);
    store.put_blob(&layer.digest, &mut |w| {
        client.get_blob(&layer.digest, layer.size, w, &mut |n| {
            progress.layer_bytes(&layer.digest, n)
        })
    })?;
    progress.layer_done(&layer.digest);
    Ok(())
}

/// An image config for another OS or architecture would fail at the first exec with a
/// confusing "Exec format error": say so now.
pub fn check_platform(config: &manifest::ImageConfig, what: &str) -> Result<(), Error> {
    let arch = manifest::host_arch();
    if (!config.os.is_empty() && config.os != "linux")
        || (!config.architecture.is_empty() && config.architecture != arch)
    {
        return Err(Error::Platform(format!(
            "{what} is built for {}/{}, and this machine is linux/{arch}; pick an image (or a tag of a multi-platform image) for linux/{arch}",
            config.os, config.architecture
        )));
    }
    Ok(())
}

fn record_tag(store: &Store, key: &str, resolved: &Digest, image: &Digest) -> Result<(), Error> {
    let entry = TagEntry {
        resolved: resolved.to_string(),
        image: image.to_string(),
        at: store::now(),
    };
    store.update_tags(&mut |t| {
        t.insert(key.to_string(), entry.clone());
    })
}
