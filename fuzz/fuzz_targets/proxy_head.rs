//! A box's request to the egress proxy: the request head as the proxy reads it (absolute form
//! or CONNECT), the target host canonicalised, `Host` and `Content-Length` checked, and the
//! head it would forward, which must be one whole head; then the same bytes as the first
//! request inside a terminated tunnel (origin form). `proxy::fuzzing`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kern_sandbox::proxy::fuzzing::request_head(data);
});
