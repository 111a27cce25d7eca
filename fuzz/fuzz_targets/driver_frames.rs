//! The frames a box's language driver sends on its channel (the python driver's and the node
//! driver's: a 4-byte length, then JSON), read as a call reads them: the frame reader fed the
//! stream in pieces (the first byte sets their size) with the results' room as its limit, each
//! frame taken by the results (display/result bundles, their MIME and image checks, charts,
//! errors), then the results finished. Whole or in pieces, the reader must see the same frames.
#![no_main]

use kern_sandbox::lang::driver::{FrameReader, Results};
use kern_sandbox_fuzz::chunks;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let pieces = chunks(data);
    let mut reader = FrameReader::default();
    let mut results = Results::default();
    let mut frames = Vec::new();
    for p in &pieces {
        for f in reader.feed(p, || results.room()) {
            results.frame(&f);
            frames.push(f);
        }
    }
    results.lost(reader.skipped);
    let cut = reader.cut();
    let _ = results.take_error();
    let (items, _notes) = results.finish();
    assert!(items.len() <= frames.len());

    // The limit never bites here (the results' room is far above these inputs), so the
    // frames do not depend on how the stream was cut.
    let mut whole = FrameReader::default();
    let again = whole.feed(&pieces.concat(), || usize::MAX);
    assert_eq!(again, frames, "pieces and whole differ");
    assert_eq!(whole.cut(), cut);
});
