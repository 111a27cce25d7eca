//! Just enough TLS to read the server name a client asks for: the ClientHello's SNI extension.
//!
//! A tunnel to an allowed host must not carry a TLS session for another one (domain fronting on
//! a shared CDN address), so the proxy reads the ClientHello before forwarding a byte of it.
//! Every length is checked against what is actually there; malformed input is `Invalid`, never a
//! panic.

use super::policy::{canonical_host, Host};

/// TLS record content type of handshake messages.
const HANDSHAKE: u8 = 22;
/// Handshake message type of a ClientHello.
const CLIENT_HELLO: u8 = 1;
/// Extension type of server_name (RFC 6066).
const SERVER_NAME: u16 = 0;
/// server_name entry type of a DNS host name.
const HOST_NAME: u8 = 0;
/// The largest record payload TLS allows (2^14).
const MAX_RECORD: usize = 16 * 1024;
/// How many bytes the proxy buffers at most to see a whole ClientHello: one full record.
pub(super) const MAX_HELLO: usize = 5 + MAX_RECORD;

/// What the bytes so far say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Hello {
    /// A prefix of a ClientHello: read more.
    NeedMore,
    /// Not a TLS handshake record at all.
    NotTls,
    /// TLS framing that is wrong, with what is wrong.
    Invalid(&'static str),
    /// A whole ClientHello; its host_name when it has one.
    Parsed { sni: Option<String> },
}

/// Parses the ClientHello at the start of `buf`, reassembling it when it spans several records.
pub(super) fn parse_client_hello(buf: &[u8]) -> Hello {
    let mut handshake: Vec<u8> = Vec::new();
    let mut pos = 0;
    loop {
        let Some(header) = buf.get(pos..pos + 5) else {
            // Decide NotTls as early as the first bytes allow.
            return match buf.get(pos..) {
                Some([first, ..]) if *first != HANDSHAKE => first_or_invalid(pos),
                Some([_, major, ..]) if *major != 3 => first_or_invalid(pos),
                _ => Hello::NeedMore,
            };
        };
        if header[0] != HANDSHAKE || header[1] != 3 {
            return first_or_invalid(pos);
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        if len == 0 || len > MAX_RECORD {
            return Hello::Invalid("bad record length");
        }
        let Some(fragment) = buf.get(pos + 5..pos + 5 + len) else {
            return Hello::NeedMore;
        };
        handshake.extend_from_slice(fragment);
        pos += 5 + len;
        if let Some(&[kind, a, b, c]) = handshake.get(..4) {
            if kind != CLIENT_HELLO {
                return Hello::Invalid("the first handshake message is not a ClientHello");
            }
            let body_len = usize::from(a) << 16 | usize::from(b) << 8 | usize::from(c);
            if let Some(body) = handshake.get(4..4 + body_len) {
                return match client_hello_sni(body) {
                    Ok(sni) => Hello::Parsed { sni },
                    Err(why) => Hello::Invalid(why),
                };
            }
        }
    }
}

/// Not TLS when the very first record is not a handshake; a bad later record is invalid TLS.
fn first_or_invalid(pos: usize) -> Hello {
    if pos == 0 {
        Hello::NotTls
    } else {
        Hello::Invalid("a non-handshake record inside the ClientHello")
    }
}

/// A cursor over a byte slice whose reads fail instead of running off the end.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], &'static str> {
        if n > self.0.len() {
            return Err("a length runs past the end of the ClientHello");
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8, &'static str> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, &'static str> {
        let b = self.take(2)?;
        Ok(u16::from_be_bytes([b[0], b[1]]))
    }
    /// A block prefixed by a one-byte length.
    fn block8(&mut self) -> Result<&'a [u8], &'static str> {
        let n = self.u8()?;
        self.take(usize::from(n))
    }
    /// A block prefixed by a two-byte length.
    fn block16(&mut self) -> Result<&'a [u8], &'static str> {
        let n = self.u16()?;
        self.take(usize::from(n))
    }
    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// The host_name of a ClientHello body (after the 4-byte handshake header).
fn client_hello_sni(body: &[u8]) -> Result<Option<String>, &'static str> {
    let mut r = Reader(body);
    r.take(2)?; // legacy_version
    r.take(32)?; // random
    if r.block8()?.len() > 32 {
        return Err("session id longer than 32 bytes");
    }
    r.block16()?; // cipher_suites
    r.block8()?; // legacy_compression_methods
    if r.is_empty() {
        return Ok(None); // no extensions at all
    }
    let mut exts = Reader(r.block16()?);
    if !r.is_empty() {
        return Err("bytes after the extensions");
    }
    let mut sni = None;
    let mut seen = false;
    while !exts.is_empty() {
        let kind = exts.u16()?;
        let data = exts.block16()?;
        if kind == SERVER_NAME {
            if seen {
                return Err("two server_name extensions");
            }
            seen = true;
            sni = server_name(data)?;
        }
    }
    Ok(sni)
}

/// The host_name entry of a server_name extension; at most one is allowed (RFC 6066).
fn server_name(data: &[u8]) -> Result<Option<String>, &'static str> {
    let mut outer = Reader(data);
    let mut list = Reader(outer.block16()?);
    if !outer.is_empty() {
        return Err("bytes after the server name list");
    }
    if list.is_empty() {
        return Err("an empty server name list");
    }
    let mut found = None;
    while !list.is_empty() {
        let kind = list.u8()?;
        let name = list.block16()?;
        if kind == HOST_NAME {
            if found.is_some() {
                return Err("two host names in server_name");
            }
            if name.is_empty() {
                return Err("an empty host name in server_name");
            }
            let name = std::str::from_utf8(name).map_err(|_| "a host name that is not UTF-8")?;
            found = Some(name.to_owned());
        }
    }
    Ok(found)
}

/// Whether a ClientHello's server name fits the CONNECT host.
///
/// A named host needs an SNI naming that same host (after canonicalisation); no SNI is refused,
/// since then nothing shows which site the session is for. An IP-literal host was allowed as an
/// address, so a client may send no SNI (clients do not send one for addresses); but an SNI that
/// names anything other than that same address is refused: it names a host the policy never
/// checked. With ECH this is the outer (public) SNI.
pub(super) fn check_sni(host: &Host, sni: Option<&str>) -> Result<(), String> {
    let Some(sni) = sni else {
        return match host {
            Host::Ip(_) => Ok(()),
            Host::Name(n) => Err(format!(
                "SNI mismatch: the TLS ClientHello names no server, CONNECT named {n}"
            )),
        };
    };
    match canonical_host(sni) {
        Ok(s) if &s == host => Ok(()),
        Ok(s) => Err(format!(
            "SNI mismatch: the TLS ClientHello names {s}, CONNECT named {host}"
        )),
        Err(e) => Err(format!("SNI mismatch: the TLS ClientHello names {e}")),
    }
}

/// A server_name extension listing these host names, for tests.
#[cfg(test)]
pub(super) fn test_sni_extension(names: &[&str]) -> Vec<u8> {
    let mut list = Vec::new();
    for n in names {
        list.push(HOST_NAME);
        list.extend((n.len() as u16).to_be_bytes());
        list.extend(n.as_bytes());
    }
    let mut ext = SERVER_NAME.to_be_bytes().to_vec();
    ext.extend(((list.len() + 2) as u16).to_be_bytes());
    ext.extend((list.len() as u16).to_be_bytes());
    ext.extend(list);
    ext
}

/// ClientHello records for tests: these extension bytes (after a harmless supported_groups
/// extension the walk must skip), split into records of at most `record` bytes of handshake.
#[cfg(test)]
pub(super) fn test_hello_with(extensions: &[u8], record: usize) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend([7u8; 32]); // random
    body.push(0); // session id
    body.extend([0, 2, 0x13, 0x01]); // one cipher suite
    body.extend([1, 0]); // null compression
    let mut exts = vec![0x00, 0x0a, 0, 4, 0, 2, 0, 0x1d];
    exts.extend(extensions);
    body.extend((exts.len() as u16).to_be_bytes());
    body.extend(exts);
    let mut hs = vec![CLIENT_HELLO];
    hs.extend(&(body.len() as u32).to_be_bytes()[1..]);
    hs.extend(body);
    let mut out = Vec::new();
    for chunk in hs.chunks(record.max(1)) {
        out.extend([HANDSHAKE, 3, 1]);
        out.extend((chunk.len() as u16).to_be_bytes());
        out.extend(chunk);
    }
    out
}

/// A ClientHello for tests with `sni` as its host_name (or none).
#[cfg(test)]
pub(super) fn test_client_hello(sni: Option<&str>, record: usize) -> Vec<u8> {
    let ext = sni.map(|n| test_sni_extension(&[n])).unwrap_or_default();
    test_hello_with(&ext, record)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn parsed(sni: Option<&str>) -> Hello {
        Hello::Parsed {
            sni: sni.map(str::to_owned),
        }
    }

    #[test]
    fn reads_sni_whole_and_fragmented() {
        let hello = test_client_hello(Some("pypi.org"), MAX_RECORD);
        assert_eq!(parse_client_hello(&hello), parsed(Some("pypi.org")));
        // Trailing tunnel bytes after the hello do not matter.
        let mut more = hello.clone();
        more.extend(b"junk");
        assert_eq!(parse_client_hello(&more), parsed(Some("pypi.org")));
        for record in [1, 3, 4, 5, 40] {
            let split = test_client_hello(Some("pypi.org"), record);
            assert_eq!(
                parse_client_hello(&split),
                parsed(Some("pypi.org")),
                "{record}"
            );
        }
        assert_eq!(
            parse_client_hello(&test_client_hello(None, MAX_RECORD)),
            parsed(None)
        );
    }

    #[test]
    fn every_prefix_needs_more() {
        let hello = test_client_hello(Some("files.pythonhosted.org"), 50);
        for n in 0..hello.len() {
            assert_eq!(parse_client_hello(&hello[..n]), Hello::NeedMore, "{n}");
        }
    }

    #[test]
    fn not_tls_and_invalid() {
        assert_eq!(parse_client_hello(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        assert_eq!(parse_client_hello(b"S"), Hello::NotTls);
        assert_eq!(parse_client_hello(&[22, 2]), Hello::NotTls);
        assert_eq!(
            parse_client_hello(&[22, 3, 1, 0, 0]),
            Hello::Invalid("bad record length")
        );
        assert_eq!(
            parse_client_hello(&[22, 3, 1, 0x40, 1]),
            Hello::Invalid("bad record length")
        );
        // A ServerHello where a ClientHello belongs.
        assert!(matches!(
            parse_client_hello(&[22, 3, 1, 0, 4, 2, 0, 0, 0]),
            Hello::Invalid(_)
        ));
        // A handshake message claiming more than its body holds, then an alert record.
        let mut bad = vec![22, 3, 1, 0, 4, 1, 0, 0, 9];
        bad.extend([21, 3, 1, 0, 2, 2, 40]);
        assert!(matches!(parse_client_hello(&bad), Hello::Invalid(_)));
        let invalid = |exts: &[u8]| parse_client_hello(&test_hello_with(exts, MAX_RECORD));
        assert_eq!(
            invalid(&test_sni_extension(&["a.test", "b.test"])),
            Hello::Invalid("two host names in server_name")
        );
        let mut twice = test_sni_extension(&["a.test"]);
        twice.extend(test_sni_extension(&["a.test"]));
        assert_eq!(
            invalid(&twice),
            Hello::Invalid("two server_name extensions")
        );
        assert_eq!(
            invalid(&test_sni_extension(&[])),
            Hello::Invalid("an empty server name list")
        );
        assert_eq!(
            invalid(&test_sni_extension(&[""])),
            Hello::Invalid("an empty host name in server_name")
        );
        assert_eq!(
            invalid(&[0, 0, 0, 9, 0, 7, 0, 0, 9, b'a']),
            Hello::Invalid("a length runs past the end of the ClientHello")
        );
        // A host name of another type only is no SNI.
        assert_eq!(invalid(&[0, 0, 0, 6, 0, 4, 1, 0, 1, b'x']), parsed(None));
    }

    #[test]
    fn sni_rule() {
        let name = Host::Name("pypi.org".into());
        let ip = Host::Ip("127.0.0.1".parse().unwrap());
        assert_eq!(check_sni(&name, Some("pypi.org")), Ok(()));
        assert_eq!(check_sni(&name, Some("PyPI.org.")), Ok(()));
        assert!(check_sni(&name, Some("other.test"))
            .unwrap_err()
            .starts_with("SNI mismatch"));
        assert!(check_sni(&name, Some("files.pypi.org")).is_err());
        assert!(check_sni(&name, Some("pypi.org%00")).is_err());
        assert!(check_sni(&name, None)
            .unwrap_err()
            .starts_with("SNI mismatch"));
        assert_eq!(check_sni(&ip, None), Ok(()));
        assert_eq!(check_sni(&ip, Some("127.0.0.1")), Ok(()));
        assert!(check_sni(&ip, Some("other.test"))
            .unwrap_err()
            .starts_with("SNI mismatch"));
        assert!(check_sni(&ip, Some("127.0.0.2")).is_err());
        let idn = Host::Name("xn--bcher-kva.example".into());
        assert_eq!(check_sni(&idn, Some("xn--bcher-kva.example")), Ok(()));
    }

    proptest! {
        #[test]
        fn never_panics_on_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
            let _ = parse_client_hello(&bytes);
        }

        #[test]
        fn never_panics_on_framed_garbage(body in proptest::collection::vec(any::<u8>(), 0..600)) {
            // Valid record and handshake headers around random bytes reach the extension walk.
            let mut hs = vec![CLIENT_HELLO];
            hs.extend(&(body.len() as u32).to_be_bytes()[1..]);
            hs.extend(&body);
            let mut rec = vec![HANDSHAKE, 3, 1];
            rec.extend((hs.len() as u16).to_be_bytes());
            rec.extend(hs);
            let _ = parse_client_hello(&rec);
        }

        #[test]
        fn mutated_hellos_never_panic(
            sni in "[a-z0-9.-]{1,40}",
            record in 1usize..64,
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
        ) {
            let mut hello = test_client_hello(Some(&sni), record);
            prop_assert_eq!(parse_client_hello(&hello), parsed(Some(&sni)));
            for (at, byte) in flips {
                let i = at % hello.len();
                hello[i] = byte;
            }
            let _ = parse_client_hello(&hello);
        }
    }
}
