//! A box's first bytes in a CONNECT tunnel: the TLS ClientHello the proxy screens for its SNI
//! (records reassembled, every length checked), and the SNI checks. A flags byte first (bit 0:
//! the port requires TLS). `proxy::fuzzing`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    kern_sandbox::proxy::fuzzing::client_hello(data);
});
