//! A workspace snapshot archive (a gzip tar a caller hands back, possibly crafted) restored
//! into a workspace, as `Sandbox.restore` does: both passes (validation, then placing). Input:
//! a flags byte (bit 0: the bytes are the archive file as given; else they are a tar whose
//! header checksums are made valid, gzipped here), then the bytes. Nothing may be written
//! beside the workspace (`Scratch` checks).
#![no_main]

use std::io::Write;

use kern_sandbox::workspace::archive::{restore, Limits};
use kern_sandbox_fuzz::{fix_tar_checksums, Scratch};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flags, data)) = data.split_first() else {
        return;
    };
    let scratch = Scratch::new("restore");
    let archive = scratch.path("input");
    let bytes = if flags & 1 == 1 {
        data.to_vec()
    } else {
        let mut tar = data.to_vec();
        fix_tar_checksums(&mut tar);
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar).expect("gzip into memory");
        gz.finish().expect("gzip into memory")
    };
    std::fs::write(&archive, bytes).expect("writing the archive");
    // A workspace that already holds something, as a real one does.
    std::fs::create_dir(scratch.root().join("dir")).expect("a workspace directory");
    std::fs::write(scratch.root().join("dir/file"), b"old").expect("a workspace file");
    let limits = Limits {
        max_entries: 10_000,
        max_total_bytes: 64 << 20,
        max_file_bytes: 16 << 20,
        max_depth: 64,
    };
    let owner = nix::unistd::geteuid()
        .is_root()
        .then_some((12345u32, 12345u32));
    let _ = restore(&scratch.root(), &archive, &limits, owner);
});
