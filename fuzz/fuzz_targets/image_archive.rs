//! An image archive a caller names (`image: "/path/to/image.tar"`): a `docker save` tarball or an
//! OCI archive, imported into a fresh store as `open()` does: members extracted, manifest.json or
//! index.json and the blobs they name read and verified, the config checked, the layers
//! unpacked. Input: a flags byte (bit 0: the bytes are the archive file as given; else a tar
//! whose header checksums are made valid here), then the bytes. Nothing may be written beside
//! the store (`Scratch` checks).
#![no_main]

use kern_sandbox::image::{local, store::Store, Quiet};
use kern_sandbox_fuzz::{fix_tar_checksums, Scratch};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, data)) = data.split_first() else {
        return;
    };
    let scratch = Scratch::new("archive");
    let archive = scratch.path("input");
    let mut bytes = data.to_vec();
    if flags & 1 == 0 {
        fix_tar_checksums(&mut bytes);
    }
    std::fs::write(&archive, bytes).expect("writing the archive");
    let store = Store::at(scratch.root()).expect("a store in an empty directory");
    let _ = local::import_archive(&store, &archive, &mut Quiet);
});
