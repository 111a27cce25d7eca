//! What a registry (or an OCI layout / docker-save archive) sends about an image, parsed as a
//! pull does: a manifest or an index (with its Content-Type), the index entry for this
//! machine, descriptors' digests and layer media types, the image config and its platform
//! check; and the registry's auth answers (a `WWW-Authenticate` challenge, a token body).
//! Input: a selector byte, then the bytes (for a manifest, an optional Content-Type line first,
//! ended by `\n`).
#![no_main]

use kern_sandbox::image::{auth, digest::Digest, manifest, pull, reference::Reference};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, data)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => {
            let (ctype, body) = match data.iter().position(|b| *b == b'\n') {
                Some(i) => (std::str::from_utf8(&data[..i]).ok(), &data[i + 1..]),
                None => (None, data),
            };
            match manifest::parse(body, ctype) {
                Ok(manifest::Parsed::Index(entries)) => {
                    for arch in ["amd64", "arm64", manifest::host_arch()] {
                        if let Ok(d) = manifest::select(&entries, arch) {
                            let _ = d.digest();
                        }
                    }
                }
                Ok(manifest::Parsed::Manifest { config, layers }) => {
                    let _ = config.digest();
                    for l in &layers {
                        if let Ok(d) = l.digest() {
                            assert_eq!(Digest::parse(d.as_str()).as_ref(), Ok(&d));
                        }
                        let _ = manifest::layer_compression(&l.media_type);
                    }
                }
                Err(_) => {}
            }
        }
        1 => {
            if let Ok(config) = manifest::parse_config(data) {
                let _ = pull::check_platform(&config, "fuzz");
                for d in &config.rootfs.diff_ids {
                    let _ = Digest::parse(d);
                }
            }
        }
        2 => {
            if let Ok(header) = std::str::from_utf8(data) {
                let _ = auth::parse_challenge(header);
                // A reference names a registry image (from a manifest's annotations, a tag).
                if let Ok(r) = Reference::parse(header) {
                    // Its normal form names the same image.
                    assert_eq!(Reference::parse(&r.to_string()).as_ref(), Ok(&r));
                }
            }
        }
        _ => {
            let _ = auth::parse_token(data);
        }
    }
});
