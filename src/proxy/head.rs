//! Proxy request heads: what the client asked for, before any policy.
//!
//! Only the two forms a proxy client sends are accepted: `CONNECT host:port` and absolute-form
//! `METHOD http://host[:port]/path`. Everything else is a 400 (or 431 for an oversized head).
//!
//! Also what is read off a head before the destination is dialled (the `Host` it names, the
//! body's `Content-Length`), the head forwarded for a plain-HTTP request, and the proxy's own
//! short answers (`respond`, with the `Status` lines it may give).

use super::policy::{canonical_host, split_authority, Host};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::time::timeout;

/// The largest request head read; a longer one is answered 431.
pub(super) const MAX_HEAD: usize = 16 * 1024;
/// More header lines than this is answered 431 too.
const MAX_HEADERS: usize = 100;

/// Where the request goes, host text still raw (the caller canonicalises it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Target {
    /// `CONNECT host:port`.
    Connect { host: String, port: u16 },
    /// `http://host[:port]/path?query`: `path` is the origin-form to forward.
    Http {
        host: String,
        port: u16,
        path: String,
    },
}

/// A parsed request head.
#[derive(Debug, Clone)]
pub(super) struct Head {
    pub method: String,
    pub target: Target,
    /// The minor version of HTTP/1.x, forwarded as it came.
    pub minor: u8,
    /// Names as sent; values as raw bytes.
    pub headers: Vec<(String, Vec<u8>)>,
    /// Bytes of the head, including the blank line; what follows in the buffer is body or tunnel.
    pub len: usize,
}

impl Head {
    /// Every value of a header, case-insensitively by name.
    pub(super) fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }
}

/// Why a head could not be parsed yet, or at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum HeadError {
    /// The blank line has not arrived yet.
    Incomplete,
    /// 431: too many header lines (the caller also answers 431 past `MAX_HEAD` bytes).
    TooLarge,
    /// 400, with a short reason.
    Bad(String),
}

/// Parses a request head from the start of `buf`.
pub(super) fn parse_head(buf: &[u8]) -> Result<Head, HeadError> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut slots);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Err(HeadError::Incomplete),
        Err(httparse::Error::TooManyHeaders) => return Err(HeadError::TooLarge),
        Err(e) => return Err(HeadError::Bad(format!("malformed request head ({e})"))),
    };
    let bad = |s: String| Err(HeadError::Bad(s));
    // A complete parse fills these; their absence would be an httparse bug, answered 400.
    let (Some(method), Some(target), Some(minor)) = (req.method, req.path, req.version) else {
        return bad("malformed request line".into());
    };
    let headers = req
        .headers
        .iter()
        .map(|h| (h.name.to_owned(), h.value.to_vec()))
        .collect();
    let target = if method == "CONNECT" {
        let (host, port) = split_authority(target).map_err(HeadError::Bad)?;
        match port {
            Some(port) if !host.is_empty() => Target::Connect {
                host: host.to_owned(),
                port,
            },
            _ => return bad(format!("CONNECT needs host:port, got {target:?}")),
        }
    } else {
        parse_absolute(target).map_err(HeadError::Bad)?
    };
    Ok(Head {
        method: method.to_owned(),
        target,
        minor,
        headers,
        len,
    })
}

/// Parses an absolute-form `http://` target.
fn parse_absolute(target: &str) -> Result<Target, String> {
    let Some((scheme, rest)) = target.split_once("://") else {
        return Err(if target.starts_with('/') || target == "*" {
            format!("{target:?} is origin-form; send absolute-form (http://host/path) to a proxy, or CONNECT for https")
        } else {
            format!("{target:?} is not an http:// URL")
        });
    };
    if scheme.eq_ignore_ascii_case("https") {
        return Err("https:// must be tunnelled with CONNECT".into());
    }
    if !scheme.eq_ignore_ascii_case("http") {
        return Err(format!(
            "scheme {scheme:?} is not supported; only http:// and CONNECT"
        ));
    }
    if target.contains('#') {
        return Err("a fragment (#) does not belong in a request".into());
    }
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, path) = rest.split_at(end);
    if authority.contains('@') {
        return Err("user info (@) in the URL is not allowed".into());
    }
    let (host, port) = split_authority(authority)?;
    if host.is_empty() {
        return Err(format!("{target:?} has no host"));
    }
    let path = match path.chars().next() {
        None => "/".to_owned(),
        Some('?') => format!("/{path}"),
        Some(_) => path.to_owned(),
    };
    Ok(Target::Http {
        host: host.to_owned(),
        port: port.unwrap_or(80),
        path,
    })
}

/// After answering, the client's leftover bytes are read and dropped for at most this long…
const DRAIN_TIME: Duration = Duration::from_secs(1);
/// …and at most this many.
const DRAIN_MAX: usize = 1024 * 1024;
/// How much of a client-supplied value a reason quotes.
const QUOTE_MAX: usize = 80;

/// The answers the proxy gives itself, before or instead of the destination's.
#[derive(Debug, Clone, Copy)]
pub(super) enum Status {
    BadRequest,
    Forbidden,
    LengthRequired,
    HeadTooLarge,
    BadGateway,
}

impl Status {
    fn line(self) -> &'static str {
        match self {
            Status::BadRequest => "400 Bad Request",
            Status::Forbidden => "403 Forbidden",
            Status::LengthRequired => "411 Length Required",
            Status::HeadTooLarge => "431 Request Header Fields Too Large",
            Status::BadGateway => "502 Bad Gateway",
        }
    }
}

/// Reads until a whole request head is buffered. `Ok(None)` when the client left first;
/// `Err` is an answer to send.
pub(super) async fn read_head<S: AsyncRead + Unpin>(
    client: &mut S,
    buf: &mut Vec<u8>,
) -> Result<Option<Head>, (Status, String)> {
    let mut chunk = [0u8; 4096];
    loop {
        match parse_head(buf) {
            Ok(head) => return Ok(Some(head)),
            Err(HeadError::Incomplete) if buf.len() >= MAX_HEAD => {
                return Err((
                    Status::HeadTooLarge,
                    "request head larger than 16 KiB".into(),
                ))
            }
            Err(HeadError::Incomplete) => {}
            Err(HeadError::TooLarge) => {
                return Err((Status::HeadTooLarge, "too many header lines".into()))
            }
            Err(HeadError::Bad(why)) => return Err((Status::BadRequest, why)),
        }
        let room = (MAX_HEAD - buf.len()).min(chunk.len());
        match client.read(&mut chunk[..room]).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Answers the client with a short text body, closes its side, and drains what it still sends.
pub(super) async fn respond<S: AsyncRead + AsyncWrite + Unpin>(
    client: &mut S,
    status: Status,
    reason: &str,
) {
    let body = match status {
        Status::Forbidden => format!("blocked by kern-sandbox egress policy: {reason}\n"),
        _ => format!("kern-sandbox egress proxy: {reason}\n"),
    };
    let msg = format!(
        "HTTP/1.1 {}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        status.line(),
        body.len()
    );
    let _ = client.write_all(msg.as_bytes()).await;
    let _ = client.shutdown().await;
    drain(client).await;
}

/// Reads and discards what the client still sends (an unread body, a pipelined hello), for a
/// moment: a TCP socket closed with unread data is reset, and the reset can destroy the answer
/// before the client reads it.
pub(super) async fn drain<S: AsyncRead + Unpin>(client: &mut S) {
    let mut chunk = [0u8; 4096];
    let mut left = DRAIN_MAX;
    let _ = timeout(DRAIN_TIME, async {
        while left > 0 {
            match client.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => left = left.saturating_sub(n),
            }
        }
    })
    .await;
}

/// A client-supplied value quoted safely and briefly for a reason.
pub(super) fn quote(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let cut: String = text.chars().take(QUOTE_MAX).collect();
    format!("{cut:?}")
}

/// The one `Host` header must name the request target (same canonical host, same port with 80
/// as default): a different `Host` would let an allowed address serve another site.
pub(super) fn check_host_header(head: &Head, host: &Host, port: u16) -> Result<(), String> {
    let values: Vec<&[u8]> = head.values("host").collect();
    host_names_target(&values, host, port, 80)
}

/// The `Host` values of a request name `host:port` (one value; `default_port` when it names
/// no port).
pub(super) fn host_names_target(
    values: &[&[u8]],
    host: &Host,
    port: u16,
    default_port: u16,
) -> Result<(), String> {
    let value = match values {
        [] => return Err("no Host header".into()),
        [one] => *one,
        _ => return Err("more than one Host header".into()),
    };
    let named = std::str::from_utf8(value)
        .ok()
        .and_then(|v| split_authority(v).ok())
        .and_then(|(h, p)| Some((canonical_host(h).ok()?, p.unwrap_or(default_port))));
    // `localhost` names the loopback itself: a box's client for a listed 127.0.0.1:P (or ::1)
    // says `Host: localhost:P`, and means that address.
    let loopback_name = |h: &Host| {
        matches!(h, Host::Name(n) if n == "localhost")
            && matches!(host, Host::Ip(ip) if ip.is_loopback())
    };
    match named {
        Some((h, p)) if (&h == host || loopback_name(&h)) && p == port => Ok(()),
        _ => Err(format!(
            "Host header {} does not match the request target {host}:{port}",
            quote(value)
        )),
    }
}

/// The body length: `Content-Length` or none. `Transfer-Encoding` is refused outright (411):
/// relaying chunked bodies would mean re-framing them, and two framings are how requests are
/// smuggled.
pub(super) fn content_length(head: &Head) -> Result<u64, (Status, String)> {
    if head.values("transfer-encoding").next().is_some() {
        return Err((
            Status::LengthRequired,
            "Transfer-Encoding is not supported; send the body with Content-Length".into(),
        ));
    }
    let values: Vec<&[u8]> = head.values("content-length").collect();
    match values.as_slice() {
        [] => Ok(0),
        [v] if !v.is_empty() && v.len() <= 18 && v.iter().all(u8::is_ascii_digit) => {
            std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.parse().ok())
                .ok_or_else(|| (Status::BadRequest, "bad Content-Length".into()))
        }
        [v] => Err((
            Status::BadRequest,
            format!("bad Content-Length {}", quote(v)),
        )),
        _ => Err((
            Status::BadRequest,
            "more than one Content-Length header".into(),
        )),
    }
}

/// Hop-by-hop headers (RFC 9110 §7.6.1) plus the proxy's own; never forwarded.
pub(super) const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "proxy-connection",
    "proxy-authorization",
    "proxy-authenticate",
    "keep-alive",
    "te",
    "trailer",
    "upgrade",
    "transfer-encoding",
];

/// The request as forwarded: origin-form, same method and version, hop-by-hop headers (and
/// those `Connection` names) removed, `Connection: close` added. `Host` and `Content-Length`
/// stay even when `Connection` names them, so the upstream frames the request as we checked it.
pub(super) fn forward_head(head: &Head, path: &str) -> Vec<u8> {
    let mut named = Vec::new();
    for value in head.values("connection") {
        for token in String::from_utf8_lossy(value).split(',') {
            named.push(token.trim().to_ascii_lowercase());
        }
    }
    let mut out = format!("{} {path} HTTP/1.{}\r\n", head.method, head.minor).into_bytes();
    for (name, value) in &head.headers {
        let lower = name.to_ascii_lowercase();
        let kept = lower == "host" || lower == "content-length";
        if !kept && (HOP_BY_HOP.contains(&lower.as_str()) || named.contains(&lower)) {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn target(req: &str) -> Result<Target, HeadError> {
        parse_head(req.as_bytes()).map(|h| h.target)
    }

    fn is_bad(r: Result<Target, HeadError>, says: &str) {
        match r {
            Err(HeadError::Bad(why)) => assert!(why.contains(says), "{why}"),
            other => panic!("expected 400 saying {says:?}, got {other:?}"),
        }
    }

    #[test]
    fn connect_authority_form() {
        assert_eq!(
            target("CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n"),
            Ok(Target::Connect {
                host: "pypi.org".into(),
                port: 443
            })
        );
        assert_eq!(
            target("CONNECT [::1]:8443 HTTP/1.0\r\n\r\n"),
            Ok(Target::Connect {
                host: "[::1]".into(),
                port: 8443
            })
        );
        is_bad(target("CONNECT pypi.org HTTP/1.1\r\n\r\n"), "host:port");
        is_bad(target("CONNECT :443 HTTP/1.1\r\n\r\n"), "host:port");
        is_bad(target("CONNECT pypi.org:0 HTTP/1.1\r\n\r\n"), "port");
        is_bad(target("CONNECT pypi.org:65536 HTTP/1.1\r\n\r\n"), "port");
        is_bad(target("CONNECT ::1:443 HTTP/1.1\r\n\r\n"), "brackets");
    }

    #[test]
    fn absolute_form() {
        let h = parse_head(
            b"GET http://Example.com:8080/a/b?c=d HTTP/1.0\r\nHost: x\r\nX-A: 1\r\n\r\nBODY",
        )
        .unwrap();
        assert_eq!(h.method, "GET");
        assert_eq!(h.minor, 0);
        assert_eq!(
            h.target,
            Target::Http {
                host: "Example.com".into(),
                port: 8080,
                path: "/a/b?c=d".into()
            }
        );
        assert_eq!(h.headers.len(), 2);
        assert_eq!(h.values("host").collect::<Vec<_>>(), vec![b"x".as_slice()]);
        assert_eq!(
            &b"GET http://Example.com:8080/a/b?c=d HTTP/1.0\r\nHost: x\r\nX-A: 1\r\n\r\nBODY"
                [h.len..],
            b"BODY"
        );
        let path = |req: &str| match target(req) {
            Ok(Target::Http { path, port, .. }) => (path, port),
            other => panic!("{other:?}"),
        };
        assert_eq!(path("GET http://a.test HTTP/1.1\r\n\r\n"), ("/".into(), 80));
        assert_eq!(
            path("GET HTTP://a.test?q HTTP/1.1\r\n\r\n"),
            ("/?q".into(), 80)
        );
        assert_eq!(
            path("POST http://[::1]:81/x HTTP/1.1\r\n\r\n"),
            ("/x".into(), 81)
        );
    }

    #[test]
    fn refused_forms() {
        is_bad(
            target("GET / HTTP/1.1\r\nHost: a.test\r\n\r\n"),
            "origin-form",
        );
        is_bad(target("OPTIONS * HTTP/1.1\r\n\r\n"), "origin-form");
        is_bad(target("GET https://a.test/ HTTP/1.1\r\n\r\n"), "CONNECT");
        is_bad(target("GET ftp://a.test/ HTTP/1.1\r\n\r\n"), "scheme");
        is_bad(target("GET a.test:80 HTTP/1.1\r\n\r\n"), "not an http");
        is_bad(
            target("GET http://user@a.test/ HTTP/1.1\r\n\r\n"),
            "user info",
        );
        is_bad(target("GET http://a.test/#x HTTP/1.1\r\n\r\n"), "fragment");
        is_bad(target("GET http:///x HTTP/1.1\r\n\r\n"), "no host");
        is_bad(target("GET http://a.test:0/ HTTP/1.1\r\n\r\n"), "port");
        is_bad(target("GET http://a.test:/ HTTP/1.1\r\n\r\n"), "port");
        is_bad(target("GET http://a.test/ HTTP/2.0\r\n\r\n"), "malformed");
        is_bad(target("GET  http://a.test/ HTTP/1.1\r\n\r\n"), "malformed");
        assert_eq!(
            target("GET http://a.test/ HTTP/1.1\r\nHost: a"),
            Err(HeadError::Incomplete)
        );
        let many = format!(
            "GET http://a.test/ HTTP/1.1\r\n{}\r\n",
            "X: y\r\n".repeat(MAX_HEADERS + 1)
        );
        assert_eq!(target(&many), Err(HeadError::TooLarge));
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
            let _ = parse_head(&bytes);
        }

        #[test]
        fn never_panics_on_request_like_bytes(
            method in "(GET|CONNECT|POST)",
            target in "[ -~]{0,60}",
            rest in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let mut req = format!("{method} {target} HTTP/1.1\r\n").into_bytes();
            req.extend(rest);
            let _ = parse_head(&req);
        }
    }
}
