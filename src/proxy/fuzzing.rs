//! Entry points for the fuzz targets (`fuzz/`, docs/fuzzing.md): what the proxy does with a
//! client's first bytes, with a byte slice for the client and no sockets. Not an API.

use std::sync::OnceLock;
use std::time::Duration;

use super::exchange::{body_of, read_origin_head};
use super::head::Target;
use super::head::{check_host_header, content_length, forward_head, read_head};
use super::policy::{canonical_host, Host};
use super::tunnel::screen;
use super::{exchange, tls};

/// One runtime for every input: the readers below never wait, so each future finishes at once.
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .expect("a current-thread runtime")
    })
}

/// The host the origin-form and TLS checks compare against (the fuzz dictionary names it).
fn fixed_host() -> Host {
    Host::Name("a.test".into())
}

/// A proxy client's request head, as `serve` reads and vets it: the head itself, the target's
/// host, `Host` and `Content-Length`, and the head forwarded upstream, which must itself be one
/// whole request head. Then the same bytes as the first head inside a terminated tunnel.
pub fn request_head(data: &[u8]) {
    let rt = runtime();
    let mut buf = Vec::new();
    if let Ok(Some(head)) = rt.block_on(read_head(&mut &data[..], &mut buf)) {
        assert!(head.len <= buf.len());
        match &head.target {
            Target::Connect { host, port } => {
                assert!(*port != 0);
                let _ = canonical_host(host);
            }
            Target::Http { host, port, path } => {
                if let Ok(host) = canonical_host(host) {
                    let shape = check_host_header(&head, &host, *port);
                    let length = content_length(&head);
                    if shape.is_ok() && length.is_ok() {
                        let out = forward_head(&head, path);
                        assert_one_head(&out);
                    }
                }
            }
        }
    }
    let mut buf = Vec::new();
    let host = fixed_host();
    if let Ok(Some((req, len))) =
        rt.block_on(read_origin_head(&mut &data[..], &mut buf, &host, 443, 443))
    {
        assert!(len <= buf.len());
        // The head a terminated tunnel forwards, with or without secrets to scrub.
        if let Ok(body) = body_of(&req) {
            for scrubbing in [false, true] {
                assert_one_head(&exchange::forward_head(&req, &body, scrubbing));
            }
        }
    }
}

/// A rebuilt head is exactly one complete request head: nothing smuggled after it.
fn assert_one_head(out: &[u8]) {
    let mut slots = [httparse::EMPTY_HEADER; 128];
    let mut req = httparse::Request::new(&mut slots);
    match req.parse(out) {
        Ok(httparse::Status::Complete(n)) => assert_eq!(
            n,
            out.len(),
            "bytes after the rebuilt head: {:?}",
            String::from_utf8_lossy(out)
        ),
        other => panic!(
            "the rebuilt head does not parse ({other:?}): {:?}",
            String::from_utf8_lossy(out)
        ),
    }
}

/// A tunnel's first bytes, as the proxy screens them: the ClientHello parser as `screen` drives
/// it (the first byte says whether the port requires TLS), then the SNI checks.
pub fn client_hello(data: &[u8]) {
    let Some((&flags, data)) = data.split_first() else {
        return;
    };
    let rt = runtime();
    let mut buf = Vec::new();
    let _ = rt.block_on(screen(
        &mut &data[..],
        &mut buf,
        &fixed_host(),
        flags & 1 == 1,
        Duration::from_secs(5),
    ));
    if let tls::Hello::Parsed { sni: Some(sni) } = tls::parse_client_hello(data) {
        // An SNI always fits the host it names itself.
        if let Ok(host) = canonical_host(&sni) {
            assert_eq!(tls::check_sni(&host, Some(sni.as_str())), Ok(()), "{sni:?}");
        }
    }
}
