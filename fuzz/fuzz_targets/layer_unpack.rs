//! Image layers (OCI layer tars, as a registry or an archive sends them) applied to a root the
//! way an image build does: several layers over one root, each read to its end, then `finish`.
//! Input: a flags byte (0/3: plain tar with its header checksums made valid, 1: a gzip stream,
//! 2: a zstd stream, both as given), then the layers, separated by `KERN-FUZZ-NEXT-LAYER`.
//! Nothing may be written beside the root (`Scratch` checks).
#![no_main]

use std::io::Read;

use kern_sandbox::image::unpack::{UnpackOptions, Unpacker};
use kern_sandbox_fuzz::{fix_tar_checksums, split, Scratch};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, data)) = data.split_first() else {
        return;
    };
    let scratch = Scratch::new("layer");
    let mut unpacker = Unpacker::new(
        &scratch.root(),
        UnpackOptions {
            chown: nix::unistd::geteuid().is_root(),
            max_layer_bytes: 64 << 20,
            max_entries: 100_000,
        },
    )
    .expect("an unpacker over an empty directory");
    for layer in split(data, b"KERN-FUZZ-NEXT-LAYER") {
        let mut fixed;
        let mut stream: Box<dyn Read + '_> = match flags % 4 {
            1 => Box::new(flate2::read::MultiGzDecoder::new(layer)),
            2 => match zstd::stream::read::Decoder::new(layer) {
                Ok(d) => Box::new(d),
                Err(_) => return,
            },
            _ => {
                fixed = layer.to_vec();
                fix_tar_checksums(&mut fixed);
                Box::new(&fixed[..])
            }
        };
        if unpacker.apply_layer(&mut stream).is_err() {
            // The build discards the root after any error.
            return;
        }
        // The build reads what follows the end-of-archive marker (for the diff id).
        let _ = std::io::copy(&mut stream, &mut std::io::sink());
    }
    let _ = unpacker.finish();
});
