//! The `egressAllow` policy: parsing entries, canonicalising hosts, matching a request.
//!
//! Entries and requests go through the same canonicaliser (lowercase, IDNA to ASCII, one trailing
//! dot stripped, numeric hosts read as IPv4), so a spelling trick on either side cannot make a
//! name match an entry it should not, or an address pass as a name.

use super::addr;
use idna::uts46::{AsciiDenyList, DnsLength, Hyphens, Uts46};
use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

/// Ports an entry without `:port` allows.
const DEFAULT_PORTS: [u16; 2] = [80, 443];

/// Every printable ASCII character except letters, digits, `-`, `.` and `_` (which some real
/// hosts such as bucket names use). The output is checked again after IDNA mapping.
const DENY: AsciiDenyList = AsciiDenyList::new(true, "!\"#$%&'()*+,/:;<=>?@[\\]^`{|}~");

/// A canonical request or entry host.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Host {
    /// Lowercase ASCII (A-labels), no trailing dot, not numeric.
    Name(String),
    /// Any IP literal; IPv4-mapped IPv6 is stored as its IPv4 address.
    Ip(IpAddr),
}

impl Host {
    /// The host as `Decision::host` shows it (IPv6 without brackets).
    pub(super) fn text(&self) -> String {
        match self {
            Host::Name(n) => n.clone(),
            Host::Ip(ip) => ip.to_string(),
        }
    }
}

impl fmt::Display for Host {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Name(n) => f.write_str(n),
            Host::Ip(IpAddr::V6(v6)) => write!(f, "[{v6}]"),
            Host::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// Canonicalises a host as written in a request, an entry, a `Host` header or an SNI: brackets
/// hold an IPv6 literal; anything else is lowercased and mapped by UTS-46 to ASCII, loses one
/// trailing dot, and is an IPv4 literal when its last label is a number.
pub(super) fn canonical_host(raw: &str) -> Result<Host, String> {
    if raw.is_empty() {
        return Err("empty host".into());
    }
    if let Some(inner) = raw.strip_prefix('[') {
        let inner = inner
            .strip_suffix(']')
            .ok_or_else(|| format!("{raw:?}: unclosed `[`"))?;
        let v6: Ipv6Addr = inner
            .parse()
            .map_err(|_| format!("{raw:?} is not an IPv6 address (zone ids are not allowed)"))?;
        return Ok(Host::Ip(IpAddr::V6(v6).to_canonical()));
    }
    if raw.contains('%') {
        return Err(format!(
            "{raw:?}: `%` (percent-encoding) is not allowed in a host"
        ));
    }
    if raw.contains('@') {
        return Err(format!("{raw:?}: `@` (user info) is not allowed in a host"));
    }
    if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("{raw:?}: whitespace is not allowed in a host"));
    }
    if raw.contains(':') {
        return Err(format!(
            "{raw:?}: an IPv6 address must be in brackets, e.g. [::1]"
        ));
    }
    let ascii = Uts46::new()
        .to_ascii(
            raw.as_bytes(),
            DENY,
            Hyphens::Allow,
            DnsLength::VerifyAllowRootDot,
        )
        .map_err(|_| format!("{raw:?} is not a valid host name"))?;
    let host = ascii.strip_suffix('.').unwrap_or(&ascii);
    // Belt and braces: whatever the mapping did, only these characters go on.
    if host.is_empty()
        || host.ends_with('.')
        || !host
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-._".contains(&b))
    {
        return Err(format!("{raw:?} is not a valid host name"));
    }
    if addr::ends_in_number(host) {
        return addr::parse_ipv4(host)
            .map(|v4| Host::Ip(IpAddr::V4(v4)))
            .ok_or_else(|| format!("{raw:?} looks like an IPv4 address but is not a valid one"));
    }
    Ok(Host::Name(host.to_owned()))
}

/// Splits `host[:port]` (IPv6 in brackets). The port, when present, is 1..=65535 in decimal.
pub(super) fn split_authority(s: &str) -> Result<(&str, Option<u16>), String> {
    let (host, port) = if s.starts_with('[') {
        match s.find(']') {
            Some(end) => {
                let (h, rest) = s.split_at(end + 1);
                match rest {
                    "" => (h, None),
                    _ => match rest.strip_prefix(':') {
                        Some(p) => (h, Some(p)),
                        None => return Err(format!("{s:?}: junk after `]`")),
                    },
                }
            }
            None => return Err(format!("{s:?}: unclosed `[`")),
        }
    } else {
        match s.split_once(':') {
            Some((_, p)) if p.contains(':') => {
                return Err(format!(
                    "{s:?}: an IPv6 address must be in brackets, e.g. [::1]:443"
                ))
            }
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        }
    };
    let port = port.map(parse_port).transpose()?;
    Ok((host, port))
}

/// A port: 1 to 5 ASCII digits, 1..=65535.
fn parse_port(p: &str) -> Result<u16, String> {
    if p.is_empty() || p.len() > 5 || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("port {p:?} is not a number from 1 to 65535"));
    }
    match p.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("port {p:?} is not a number from 1 to 65535")),
    }
}

/// What one entry allows.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    /// Exactly this name.
    Exact(String),
    /// This name and every name under it.
    Suffix(String),
    /// Exactly this address.
    Ip(IpAddr),
    /// Any name (the setup box's public internet): still never a private, loopback or
    /// link-local address, which the proxy checks on what the name resolves to.
    AnyName,
    /// `*`: every public destination, named or literal, on any port (open internet through the
    /// proxy). A name still never reaches what it resolves to unless that is public; a literal
    /// matches only when it is public and not this host's.
    Anything,
}

#[derive(Debug, Clone)]
struct Entry {
    /// As the caller wrote it, for reasons.
    text: String,
    target: Target,
    port: Option<u16>,
}

impl Entry {
    fn matches_host(&self, host: &Host) -> bool {
        match (&self.target, host) {
            (Target::Exact(e), Host::Name(n)) => e == n,
            (Target::Suffix(d), Host::Name(n)) => {
                // `n` is `d` or ends with `.d`: a label boundary, never a substring.
                n == d
                    || (n.len() > d.len()
                        && n.ends_with(d.as_str())
                        && n.as_bytes()[n.len() - d.len() - 1] == b'.')
            }
            (Target::Ip(e), Host::Ip(ip)) => e == ip,
            (Target::AnyName | Target::Anything, Host::Name(_)) => true,
            (Target::Anything, Host::Ip(ip)) => {
                addr::non_public(*ip).is_none()
                    && addr::not_a_destination(*ip).is_none()
                    && !addr::is_local(*ip)
            }
            _ => false,
        }
    }

    fn matches_port(&self, port: u16) -> bool {
        match self.port {
            Some(p) => p == port,
            None if matches!(self.target, Target::Anything) => true,
            None => DEFAULT_PORTS.contains(&port),
        }
    }
}

/// The parsed `egressAllow` list. An empty list allows nothing.
#[derive(Debug, Clone, Default)]
pub struct Policy {
    entries: Vec<Entry>,
}

impl Policy {
    /// Parses egressAllow entries. Errors are messages naming the entry and saying what to write
    /// instead.
    ///
    /// Forms: `name` (that host), `.name` (that domain and every subdomain), an IP literal
    /// (`127.0.0.1`, `[::1]`: exactly that address, the only way to reach a private or loopback
    /// one), each with an optional `:port`; without one an entry allows ports 80 and 443. And
    /// `*` alone: every public destination on any port (private, loopback and link-local
    /// addresses still only when listed as literals).
    pub fn parse(entries: &[String]) -> Result<Policy, String> {
        let entries = entries
            .iter()
            .map(|e| parse_entry(e).map_err(|why| format!("egressAllow entry {e:?}: {why}")))
            .collect::<Result<_, _>>()?;
        Ok(Policy { entries })
    }

    /// Every name on ports 80 and 443 (what installers use), plus `extra`'s entries: the setup
    /// box's way to the public internet. Private, loopback and link-local addresses stay out
    /// unless `extra` lists them as literals.
    pub fn public_names(extra: &Policy) -> Policy {
        let mut entries = vec![Entry {
            text: "any public host (setup)".into(),
            target: Target::AnyName,
            port: None,
        }];
        entries.extend(extra.entries.iter().cloned());
        Policy { entries }
    }

    /// The loopback addresses listed as literals, with their ports (80 and 443 without one).
    pub fn loopback_literals(&self) -> Vec<(IpAddr, u16)> {
        let mut out = Vec::new();
        for e in &self.entries {
            if let Target::Ip(ip) = e.target {
                if ip.is_loopback() {
                    match e.port {
                        Some(p) => out.push((ip, p)),
                        None => out.extend(DEFAULT_PORTS.iter().map(|p| (ip, *p))),
                    }
                }
            }
        }
        out.sort();
        out.dedup();
        out
    }

    /// The entry allowing `host:port`, or why none does. Nothing is resolved here.
    pub(super) fn check(&self, host: &Host, port: u16) -> Result<&str, String> {
        let mut host_matched = false;
        for e in &self.entries {
            if e.matches_host(host) {
                if e.matches_port(port) {
                    return Ok(&e.text);
                }
                host_matched = true;
            }
        }
        Err(match (host_matched, host) {
            (true, _) => format!(
                "port {port} is not in egressAllow for {host} (an entry without :port allows 80 and 443)"
            ),
            (false, Host::Ip(_)) => {
                "IP address not in egressAllow (an address is allowed only when listed exactly)"
                    .to_owned()
            }
            (false, Host::Name(_)) => "not in egressAllow".to_owned(),
        })
    }
}

const WRITE_INSTEAD: &str =
    "write a host (`pypi.org`), a domain and its subdomains (`.example.com`) or an address (`127.0.0.1`, `[::1]`), each with an optional `:port`";

fn parse_entry(raw: &str) -> Result<Entry, String> {
    if raw.is_empty() {
        return Err(format!("empty; {WRITE_INSTEAD}"));
    }
    if raw.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "contains whitespace or a control character; {WRITE_INSTEAD}"
        ));
    }
    if raw.contains("://") || raw.contains(['/', '@', '?', '#']) {
        return Err("looks like a URL; write just the host and optional port, e.g. `pypi.org` or `example.com:8443`".into());
    }
    if raw == "*" {
        return Ok(Entry {
            text: raw.to_owned(),
            target: Target::Anything,
            port: None,
        });
    }
    if raw.contains('*') {
        return Err(
            "wildcards are not supported; write `.example.com` to allow example.com and every subdomain, or `*` alone for every public host".into(),
        );
    }
    let (host, port) = split_authority(raw).map_err(|e| format!("{e}; {WRITE_INSTEAD}"))?;
    let target = if let Some(domain) = host.strip_prefix('.') {
        if domain.is_empty() || domain == "." {
            return Err(
                "a lone `.` allows nothing; write `.example.com` for a domain and its subdomains"
                    .into(),
            );
        }
        match canonical_host(domain) {
            Ok(Host::Name(n)) => Target::Suffix(n),
            Ok(Host::Ip(_)) => {
                return Err("a domain suffix cannot be an IP address; write the address itself, e.g. `10.0.0.1`".into())
            }
            Err(e) => return Err(format!("{e}; write `.example.com` for a domain and its subdomains")),
        }
    } else {
        match canonical_host(host).map_err(|e| format!("{e}; {WRITE_INSTEAD}"))? {
            Host::Ip(ip) => {
                if let Some(what) = addr::not_a_destination(ip) {
                    return Err(format!("{ip} is {what}, not a destination"));
                }
                Target::Ip(ip)
            }
            Host::Name(n) => Target::Exact(n),
        }
    };
    if let Target::Exact(n) | Target::Suffix(n) = &target {
        // Names may never reach loopback, so these would deny every request; say so now.
        if n == "localhost" || n.ends_with(".localhost") {
            return Err(format!(
                "localhost is loopback, which names never reach; write the address instead, e.g. `127.0.0.1:{}`",
                port.unwrap_or(8080)
            ));
        }
    }
    Ok(Entry {
        text: raw.to_owned(),
        target,
        port,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn policy(entries: &[&str]) -> Policy {
        let v: Vec<String> = entries.iter().map(|s| s.to_string()).collect();
        Policy::parse(&v).unwrap()
    }

    fn allows(p: &Policy, host: &str, port: u16) -> bool {
        match canonical_host(host) {
            Ok(h) => p.check(&h, port).is_ok(),
            Err(_) => false,
        }
    }

    fn name(s: &str) -> Host {
        Host::Name(s.into())
    }

    #[test]
    fn canonicalises_case_dots_and_idna() {
        assert_eq!(canonical_host("PyPI.Org"), Ok(name("pypi.org")));
        assert_eq!(canonical_host("pypi.org."), Ok(name("pypi.org")));
        assert!(canonical_host("pypi.org..").is_err());
        assert_eq!(
            canonical_host("bücher.example"),
            Ok(name("xn--bcher-kva.example"))
        );
        assert_eq!(
            canonical_host("BÜCHER.example"),
            Ok(name("xn--bcher-kva.example"))
        );
        assert_eq!(
            canonical_host("xn--bcher-kva.example"),
            Ok(name("xn--bcher-kva.example"))
        );
        // Full-width dots and letters map to ASCII before matching.
        assert_eq!(canonical_host("ｐｙｐｉ。org"), Ok(name("pypi.org")));
        assert_eq!(
            canonical_host("my_bucket.s3.example"),
            Ok(name("my_bucket.s3.example"))
        );
        // Full-width digits map to an IP literal, not a name.
        assert_eq!(
            canonical_host("１２７.０.０.１"),
            Ok(Host::Ip("127.0.0.1".parse().unwrap()))
        );
    }

    #[test]
    fn request_host_refusals() {
        let long_label = "a".repeat(64);
        for h in [
            "",
            ".",
            "..",
            "a..b",
            "evil%2ecom",
            "evil.com%00",
            "user@evil.com",
            "evil .com",
            "evil.com\t",
            "evil\u{0}.com",
            "::1",
            "[::1",
            "[fe80::1%eth0]",
            "[1.2.3.4]",
            "evil＠host.com",
            "a*b.com",
            "xn--.com",
            "foo.123",
            "1.2.3.4.5",
            "256.1.1.1",
            "08.1.1.1",
            long_label.as_str(),
        ] {
            assert!(canonical_host(h).is_err(), "{h:?} should be refused");
        }
    }

    #[test]
    fn ip_literals_in_every_encoding() {
        let lo = Host::Ip("127.0.0.1".parse().unwrap());
        for h in [
            "127.0.0.1",
            "127.0.0.1.",
            "2130706433",
            "0177.0.0.1",
            "0x7f.1",
            "0X7F.0.0.1",
            "127.1",
            "[::ffff:127.0.0.1]",
            "[::FFFF:7f00:1]",
        ] {
            assert_eq!(canonical_host(h), Ok(lo.clone()), "{h}");
        }
        assert_eq!(
            canonical_host("[::1]"),
            Ok(Host::Ip("::1".parse().unwrap()))
        );
        assert_eq!(
            canonical_host("[0:0::1]"),
            Ok(Host::Ip("::1".parse().unwrap()))
        );
        // A name with a numeric-looking label that is not last stays a name.
        assert_eq!(canonical_host("0x7f.example"), Ok(name("0x7f.example")));
    }

    #[test]
    fn exact_and_suffix_matching() {
        let p = policy(&["pypi.org", ".example.com"]);
        assert!(allows(&p, "pypi.org", 443));
        assert!(allows(&p, "PYPI.ORG.", 80));
        assert!(!allows(&p, "files.pypi.org", 443));
        assert!(!allows(&p, "pypi.org.attacker.test", 443));
        assert!(!allows(&p, "xpypi.org", 443));
        assert!(allows(&p, "example.com", 443));
        assert!(allows(&p, "a.example.com", 443));
        assert!(allows(&p, "a.b.example.com.", 443));
        assert!(allows(&p, "A.Example.COM", 443));
        assert!(!allows(&p, "badexample.com", 443));
        assert!(!allows(&p, "example.com.attacker.test", 443));
        assert!(!allows(&p, "example.co", 443));
        assert!(!allows(&p, "com", 443));
        assert!(!allows(&p, "attacker.test", 443));
    }

    #[test]
    fn idna_entries_match_both_spellings() {
        let p = policy(&["bücher.example", ".ÉCOLE.test"]);
        assert!(allows(&p, "xn--bcher-kva.example", 443));
        assert!(allows(&p, "BÜCHER.example.", 443));
        assert!(allows(&p, "xn--cole-9oa.test", 443));
        assert!(allows(&p, "a.école.test", 443));
        assert!(!allows(&p, "bucher.example", 443));
    }

    #[test]
    fn ports() {
        let p = policy(&[
            "pypi.org",
            "host:8443",
            ".example.com:8080",
            "127.0.0.1:9000",
        ]);
        assert!(allows(&p, "pypi.org", 80));
        assert!(allows(&p, "pypi.org", 443));
        assert!(!allows(&p, "pypi.org", 22));
        assert!(!allows(&p, "pypi.org", 8443));
        assert!(allows(&p, "host", 8443));
        assert!(!allows(&p, "host", 443));
        assert!(!allows(&p, "host", 80));
        assert!(allows(&p, "a.example.com", 8080));
        assert!(!allows(&p, "a.example.com", 443));
        assert!(allows(&p, "127.0.0.1", 9000));
        assert!(allows(&p, "0x7f.1", 9000));
        assert!(allows(&p, "[::ffff:127.0.0.1]", 9000));
        assert!(!allows(&p, "127.0.0.1", 9001));
        assert!(!allows(&p, "127.0.0.2", 9000));
        let why = p.check(&name("pypi.org"), 22).unwrap_err();
        assert!(why.contains("port 22"), "{why}");
        assert_eq!(
            p.check(&name("evil.test"), 443).unwrap_err(),
            "not in egressAllow"
        );
    }

    #[test]
    fn star_allows_public_destinations_on_any_port_only() {
        let p = policy(&["*"]);
        assert!(allows(&p, "pypi.org", 443));
        assert!(allows(&p, "example.com", 22));
        assert!(allows(&p, "93.184.216.34", 8080));
        assert!(allows(&p, "[2606:2800:220:1::1]", 443));
        for private in [
            "127.0.0.1",
            "10.0.0.1",
            "169.254.169.254",
            "192.168.1.1",
            "[::1]",
            "[fd00::1]",
            "0.0.0.0",
            "224.0.0.1",
        ] {
            assert!(!allows(&p, private, 443), "{private} must stay out of `*`");
        }
        // A literal beside `*` still reaches exactly that private address.
        let p = policy(&["*", "127.0.0.1:8080"]);
        assert!(allows(&p, "127.0.0.1", 8080));
        assert!(!allows(&p, "127.0.0.1", 8081));
    }

    #[test]
    fn ip_entries_allow_exactly_that_address() {
        let p = policy(&["127.0.0.1", "[::1]:8443", "0x0a.1"]);
        assert!(allows(&p, "127.0.0.1", 443));
        assert!(allows(&p, "2130706433", 80));
        assert!(!allows(&p, "127.0.0.2", 443));
        assert!(allows(&p, "[::1]", 8443));
        assert!(allows(&p, "[0::1]", 8443));
        assert!(!allows(&p, "[::1]", 443));
        assert!(allows(&p, "10.0.0.1", 443));
        // Names never match an address entry, even one that would resolve there.
        assert!(!allows(&p, "localhost", 443));
    }

    #[test]
    fn every_parse_refusal() {
        for (entry, says) in [
            ("", "empty"),
            (" pypi.org", "whitespace"),
            ("pypi.org ", "whitespace"),
            ("py pi.org", "whitespace"),
            ("*:443", "wildcards"),
            ("**", "wildcards"),
            ("*.example.com", "wildcards"),
            ("ex*ample.com", "wildcards"),
            ("https://pypi.org", "URL"),
            ("pypi.org/simple", "URL"),
            ("user@pypi.org", "URL"),
            ("pypi.org?x", "URL"),
            ("pypi.org#x", "URL"),
            ("pypi.org:0", "port"),
            ("pypi.org:65536", "port"),
            ("pypi.org:99999", "port"),
            ("pypi.org:http", "port"),
            ("pypi.org:", "port"),
            ("pypi.org:-1", "port"),
            ("pypi.org:+443", "port"),
            (".", "lone"),
            ("..", "lone"),
            (".:443", "lone"),
            ("..example.com", "not a valid host name"),
            ("exa_mple..com", "not a valid host name"),
            ("evil%2ecom", "%"),
            ("a\u{0}b", "whitespace"),
            ("xn--.example", "not a valid host name"),
            ("::1", "brackets"),
            ("[::1", "unclosed"),
            ("[::1]x", "junk"),
            ("[fe80::1%eth0]", "zone"),
            ("[pypi.org]", "IPv6"),
            ("1.2.3.256", "IPv4"),
            ("foo.123", "IPv4"),
            (".10.0.0.1", "IP address"),
            ("0.0.0.0", "not a destination"),
            ("255.255.255.255", "not a destination"),
            ("[::]:80", "not a destination"),
            ("224.0.0.1", "not a destination"),
            ("localhost:9000", "127.0.0.1:9000"),
            (".localhost", "loopback"),
            ("pypi.org:443:443", "brackets"),
        ] {
            let err = Policy::parse(&[entry.to_string()]).expect_err(entry);
            assert!(err.contains(says), "{entry:?}: {err}");
            assert!(err.starts_with("egressAllow entry"), "{err}");
        }
    }

    #[test]
    fn the_briefs_example_parses() {
        let p = policy(&["pypi.org", ".example.com", "host:8443", "127.0.0.1:9000"]);
        assert_eq!(p.entries.len(), 4);
        assert!(Policy::parse(&[])
            .unwrap()
            .check(&name("pypi.org"), 443)
            .is_err());
    }

    proptest! {
        #[test]
        fn suffix_entry_never_matches_by_substring(label in "[a-zA-Z0-9._-]{0,40}") {
            let p = policy(&[".example.com"]);
            let expected = match canonical_host(&label) {
                Ok(Host::Name(n)) => n == "example.com" || n.ends_with(".example.com"),
                _ => false,
            };
            prop_assert_eq!(allows(&p, &label, 443), expected);
            let glued = format!("{label}example.com");
            let expected = match canonical_host(&glued) {
                Ok(Host::Name(n)) => n == "example.com" || n.ends_with(".example.com"),
                _ => false,
            };
            prop_assert_eq!(allows(&p, &glued, 443), expected);
            // Never a match as a prefix of another domain.
            let suffixed = format!("{label}example.com.attacker.test");
            prop_assert!(!allows(&p, &suffixed, 443));
        }

        #[test]
        fn canonical_host_never_panics(s in "\\PC{0,40}") {
            let _ = canonical_host(&s);
            let _ = split_authority(&s);
            let _ = Policy::parse(&[s]);
        }
    }
}
