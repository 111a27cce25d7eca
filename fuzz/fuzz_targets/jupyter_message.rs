//! Messages from a Jupyter kernel, as a kernel session takes them: the wire decode (delimiter,
//! HMAC signature, four JSON frames) and, for those that pass, the cell's handling of IOPub
//! and shell messages (streams, rich results with their image checks, errors, the reply),
//! the output it shows kept as a session keeps it (`Capture`), then the cell's parts. Input: messages separated by `KERN-FUZZ-NEXT-MESSAGE`; each is a
//! flags byte then frames separated by `KERN-FUZZ-FRAME`. Flags bit 0: the frames are signed
//! here as header, parent header, metadata, content (+ buffers), so the decode reaches the
//! JSON; else they go to `decode` as they are. Bit 1: a shell message (else IOPub).
#![no_main]

use bytes::Bytes;
use kern_sandbox::engine::addon::capture::Keep;
use kern_sandbox::engine::addon::launch::Stream;
use kern_sandbox::lang::jupyter::cell::Cell;
use kern_sandbox::lang::jupyter::wire::{decode, Signer, DELIMITER};
use kern_sandbox_fuzz::split;
use libfuzzer_sys::fuzz_target;

const KEY: &[u8] = b"kern-fuzz-key";

fuzz_target!(|data: &[u8]| {
    let signer = Signer::new(KEY);
    let mut cell = Cell::new("req-1".into());
    let (mut out, mut err) = Keep::new(1 << 16, None).captures();
    for message in split(data, b"KERN-FUZZ-NEXT-MESSAGE") {
        let Some((&flags, message)) = message.split_first() else {
            continue;
        };
        let parts = split(message, b"KERN-FUZZ-FRAME");
        let frames: Vec<Bytes> = if flags & 1 == 1 {
            let p = |i: usize| parts.get(i).copied().unwrap_or(&b"{}"[..]);
            let signed = [p(0), p(1), p(2), p(3)];
            let mut f = vec![
                Bytes::from_static(b"kernel-identity"),
                Bytes::from_static(DELIMITER),
                Bytes::from(signer.sign(&signed)),
            ];
            f.extend(signed.iter().map(|s| Bytes::copy_from_slice(s)));
            f.extend(parts.iter().skip(4).map(|s| Bytes::copy_from_slice(s)));
            f
        } else {
            parts.iter().map(|s| Bytes::copy_from_slice(s)).collect()
        };
        let Ok(m) = decode(&signer, &frames) else {
            continue;
        };
        let shown = if flags & 2 == 2 {
            cell.on_reply(&m)
        } else {
            cell.on_iopub(&m)
        };
        for (stream, data) in shown {
            // No spill: nothing past the cap is returned.
            let (_, overflow) = match stream {
                Stream::Stdout => out.keep(&data),
                Stream::Stderr => err.keep(&data),
            };
            assert!(overflow.is_none(), "an overflow without a spill");
        }
        let _ = (cell.done(), cell.executing(), cell.failed());
    }
    let _ = cell.into_parts();
    // Kept output is capped in bytes.
    assert!(out.finish().kept.len() <= 1 << 16, "stdout over its cap");
    assert!(err.finish().kept.len() <= 1 << 16, "stderr over its cap");
});
