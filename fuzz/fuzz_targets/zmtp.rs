//! A Jupyter kernel's ZeroMQ stream (ZMTP 3 greeting and frames) through the size bound the
//! relay puts in front of the `zeromq` crate, fed in pieces (the first byte sets their size).
//! What it passes on must be a prefix-consistent ZMTP stream: fed whole or in pieces, the same.
#![no_main]

use kern_sandbox::lang::jupyter::zmtp::Bound;
use kern_sandbox_fuzz::chunks;
use libfuzzer_sys::fuzz_target;

const MAX: usize = 4096;

fuzz_target!(|data: &[u8]| {
    let pieces = chunks(data);
    let mut bound = Bound::new(MAX);
    let mut out = Vec::new();
    let mut broken = None;
    for p in &pieces {
        if let Err(e) = bound.feed(p, &mut out) {
            broken = Some(e);
            break;
        }
    }
    let mut whole = Bound::new(MAX);
    let mut out_whole = Vec::new();
    let whole_broken = whole.feed(&pieces.concat(), &mut out_whole).err();
    assert_eq!(broken, whole_broken);
    if broken.is_none() {
        assert_eq!(out, out_whole, "pieces and whole differ");
        assert_eq!(bound.dropped, whole.dropped);
    }
});
