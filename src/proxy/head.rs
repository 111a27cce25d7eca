//! Proxy request heads: what the client asked for, before any policy.
//!
//! Only the two forms a proxy client sends are accepted: `CONNECT host:port` and absolute-form
//! `METHOD http://host[:port]/path`. Everything else is a 400 (or 431 for an oversized head).

use super::policy::split_authority;

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
