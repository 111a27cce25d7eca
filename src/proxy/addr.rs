//! IP addresses: every IPv4 spelling a C resolver accepts, and which addresses a name may reach.
//!
//! `inet_aton` (and so `getaddrinfo`, curl, Python's `socket`) reads `2130706433`, `0177.0.0.1`,
//! `0x7f.1` and `127.1` as 127.0.0.1. A proxy that only knows dotted quads would treat those as
//! names, so we parse them the way the C library does and classify the host as an address.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};

/// One inet_aton part: `0x…` hex (an empty `0x` is zero, as in the WHATWG URL parser), a leading
/// `0` octal, else decimal. `None` when the text is not a number in any of those bases; a value
/// too large for u64 saturates (it is out of range for any part anyway).
pub(super) fn parse_part(s: &str) -> Option<u64> {
    let (digits, radix) = if let Some(hex) = s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        (hex, 16)
    } else if s.len() > 1 && s.starts_with('0') {
        (&s[1..], 8)
    } else {
        (s, 10)
    };
    if digits.is_empty() {
        return (radix == 16).then_some(0);
    }
    let mut value: u64 = 0;
    for c in digits.chars() {
        let d = c.to_digit(radix)?;
        value = value
            .saturating_mul(u64::from(radix))
            .saturating_add(u64::from(d));
    }
    Some(value)
}

/// True when the last dot-separated label reads as a number. Such a host is an IPv4 literal or
/// nothing: we never hand it to a resolver as a name (the WHATWG URL "ends in a number" rule).
pub(super) fn ends_in_number(host: &str) -> bool {
    let last = host.rsplit('.').next().unwrap_or(host);
    !last.is_empty() && (last.bytes().all(|b| b.is_ascii_digit()) || parse_part(last).is_some())
}

/// Parses the inet_aton forms: `a`, `a.b`, `a.b.c`, `a.b.c.d`, each part decimal, octal or hex,
/// the last part filling the remaining bytes. `None` for anything else (including empty parts).
pub(super) fn parse_ipv4(s: &str) -> Option<Ipv4Addr> {
    let parts: Vec<&str> = s.split('.').collect();
    if parts.is_empty() || parts.len() > 4 {
        return None;
    }
    let mut values = Vec::with_capacity(parts.len());
    for p in &parts {
        values.push(parse_part(p)?);
    }
    let (last, leading) = values.split_last()?;
    if leading.iter().any(|&v| v > 255) {
        return None;
    }
    // The last part covers the bytes the leading parts did not: 32, 24, 16 or 8 bits.
    let last_bits = 8 * (4 - leading.len() as u32);
    if *last >= 1u64 << last_bits {
        return None;
    }
    let mut n: u64 = 0;
    for (i, &v) in leading.iter().enumerate() {
        n |= v << (24 - 8 * i as u32);
    }
    n |= last;
    u32::try_from(n).ok().map(Ipv4Addr::from)
}

/// Why an address is not a public unicast destination, or `None` when it is.
///
/// The tables follow IANA's special-purpose address registries (IPv4 and IPv6, as of 2025):
/// every block there that is not "globally reachable" is refused, and so are blocks that are
/// but are anycast services or translation prefixes no HTTP client means to reach (192.0.0.0/24
/// whole, 2001::/23 whole). Addresses that embed an IPv4 address the network would reach
/// (IPv4-mapped, NAT64's well-known prefix) are judged by that IPv4 address. One exception by
/// choice: the documentation ranges (192.0.2/24, 198.51.100/24, 203.0.113/24, 2001:db8::/32,
/// 3fff::/20) count as public: nothing routes them, and test networks (this project's CI
/// mirrors among them) give them to hosts that stand for public ones.
pub(super) fn non_public(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) => non_public_v4(v4),
        IpAddr::V6(v6) => non_public_v6(v6),
    }
}

/// IPv4 blocks that are not public destinations: (network, prefix length, what it is).
const V4_BLOCKS: &[([u8; 4], u8, &str)] = &[
    ([0, 0, 0, 0], 8, "\"this network\" (0.0.0.0/8)"),
    ([10, 0, 0, 0], 8, "private (10.0.0.0/8, RFC 1918)"),
    (
        [100, 64, 0, 0],
        10,
        "shared address space (100.64.0.0/10, CGNAT)",
    ),
    ([127, 0, 0, 0], 8, "loopback (127.0.0.0/8)"),
    (
        [169, 254, 0, 0],
        16,
        "link-local (169.254.0.0/16, cloud metadata)",
    ),
    ([172, 16, 0, 0], 12, "private (172.16.0.0/12, RFC 1918)"),
    (
        [192, 0, 0, 0],
        24,
        "IETF protocol assignments (192.0.0.0/24)",
    ),
    (
        [192, 88, 99, 0],
        24,
        "6to4 relay anycast (192.88.99.0/24, deprecated)",
    ),
    ([192, 168, 0, 0], 16, "private (192.168.0.0/16, RFC 1918)"),
    ([198, 18, 0, 0], 15, "benchmarking (198.18.0.0/15)"),
    ([224, 0, 0, 0], 4, "multicast (224.0.0.0/4)"),
    ([240, 0, 0, 0], 4, "reserved (240.0.0.0/4, and broadcast)"),
];

fn non_public_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let n = u32::from(ip);
    V4_BLOCKS.iter().find_map(|&(net, len, what)| {
        let mask = u32::MAX << (32 - u32::from(len));
        (n & mask == u32::from_be_bytes(net)).then_some(what)
    })
}

/// IPv6 blocks that are not public destinations (besides `::`, `::1` and the embedded-IPv4
/// forms `non_public_v6` judges by their IPv4 address).
const V6_BLOCKS: &[([u16; 8], u8, &str)] = &[
    ([0; 8], 96, "IPv4-compatible (::/96, deprecated)"),
    (
        [0, 0, 0, 0, 0xffff, 0, 0, 0],
        96,
        "IPv4-translated (::ffff:0:0:0/96)",
    ),
    (
        [0x64, 0xff9b, 1, 0, 0, 0, 0, 0],
        48,
        "local-use NAT64 (64:ff9b:1::/48)",
    ),
    ([0x100, 0, 0, 0, 0, 0, 0, 0], 64, "discard-only (100::/64)"),
    (
        [0x100, 0, 0, 1, 0, 0, 0, 0],
        64,
        "dummy prefix (100:0:0:1::/64)",
    ),
    (
        [0x2001, 0, 0, 0, 0, 0, 0, 0],
        23,
        "IETF protocol assignments (2001::/23: Teredo, benchmarking, ORCHID)",
    ),
    (
        [0x2002, 0, 0, 0, 0, 0, 0, 0],
        16,
        "6to4 (2002::/16, deprecated; reaches the IPv4 address inside it)",
    ),
    ([0x5f00, 0, 0, 0, 0, 0, 0, 0], 16, "SRv6 SIDs (5f00::/16)"),
    ([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7, "unique local (fc00::/7)"),
    ([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10, "link-local (fe80::/10)"),
    (
        [0xfec0, 0, 0, 0, 0, 0, 0, 0],
        10,
        "site-local (fec0::/10, deprecated)",
    ),
    ([0xff00, 0, 0, 0, 0, 0, 0, 0], 8, "multicast (ff00::/8)"),
];

fn non_public_v6(ip: Ipv6Addr) -> Option<&'static str> {
    if ip.is_unspecified() {
        return Some("unspecified (::)");
    }
    if ip.is_loopback() {
        return Some("loopback (::1)");
    }
    if let Some(v4) = ip.to_ipv4_mapped() {
        // The socket layer dials the embedded IPv4 address, so that is what we judge.
        return non_public_v4(v4).map(|_| "IPv4-mapped (::ffff:0:0/96) non-public IPv4");
    }
    let s = ip.segments();
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        // NAT64's well-known prefix reaches the IPv4 address in its last 32 bits.
        let v4 = Ipv4Addr::from((u32::from(s[6]) << 16) | u32::from(s[7]));
        return non_public_v4(v4).map(|_| "NAT64 (64:ff9b::/96) of a non-public IPv4 address");
    }
    let n = u128::from(ip);
    V6_BLOCKS.iter().find_map(|&(net, len, what)| {
        let mask = u128::MAX << (128 - u32::from(len));
        (n & mask == u128::from(Ipv6Addr::from(net))).then_some(what)
    })
}

/// True when the address belongs to this machine: binding to it only succeeds for a local
/// address (with `ip_nonlocal_bind` set every bind succeeds, which fails closed). A public-looking
/// name that resolves to the host's own interface would otherwise reach services listening on
/// 0.0.0.0 there.
pub(super) fn is_local(ip: IpAddr) -> bool {
    UdpSocket::bind(SocketAddr::new(ip, 0)).is_ok()
}

/// Entries may not name addresses that are not a single destination: 0.0.0.0 reaches this host
/// on Linux, and multicast or broadcast are not something to tunnel to.
pub(super) fn not_a_destination(ip: IpAddr) -> Option<&'static str> {
    match ip {
        IpAddr::V4(v4) if v4.octets()[0] == 0 => Some("an unspecified (0.0.0.0/8) address"),
        IpAddr::V4(v4) if v4.is_multicast() => Some("a multicast address"),
        IpAddr::V4(v4) if v4.is_broadcast() => Some("the broadcast address"),
        IpAddr::V6(v6) if v6.is_unspecified() => Some("the unspecified address"),
        IpAddr::V6(v6) if v6.is_multicast() => Some("a multicast address"),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v4(s: &str) -> Option<Ipv4Addr> {
        parse_ipv4(s)
    }

    #[test]
    fn every_ipv4_spelling_of_loopback() {
        let lo = Some(Ipv4Addr::new(127, 0, 0, 1));
        for s in [
            "127.0.0.1",
            "2130706433",
            "0177.0.0.1",
            "0x7f.1",
            "0x7F.0.0.1",
            "0X7f000001",
            "127.1",
            "127.0.1",
            "0177.1",
            "017700000001",
            "0x7f.0x0.0x0.0x1",
            "127.00.0.01",
        ] {
            assert_eq!(v4(s), lo, "{s}");
        }
        assert_eq!(v4("0"), Some(Ipv4Addr::UNSPECIFIED));
        assert_eq!(v4("0x"), Some(Ipv4Addr::UNSPECIFIED));
        assert_eq!(v4("4294967295"), Some(Ipv4Addr::BROADCAST));
        assert_eq!(v4("169.254.43518"), Some(Ipv4Addr::new(169, 254, 169, 254)));
        assert_eq!(v4("10.0x10203"), Some(Ipv4Addr::new(10, 1, 2, 3)));
    }

    #[test]
    fn ipv4_refusals() {
        for s in [
            "",
            ".",
            "1..2",
            "1.2.3.4.5",
            "256.0.0.1",
            "1.2.3.256",
            "1.2.65536",
            "1.16777216",
            "4294967296",
            "99999999999999999999999999",
            "08.0.0.1",
            "0x7g.1",
            "1.2.3.-1",
            "+1.2.3.4",
            "a.b.c.d",
        ] {
            assert_eq!(v4(s), None, "{s:?}");
        }
    }

    #[test]
    fn ends_in_number_rule() {
        assert!(ends_in_number("1.2.3.4"));
        assert!(ends_in_number("foo.123"));
        assert!(ends_in_number("foo.0x1f"));
        assert!(ends_in_number("08"));
        assert!(ends_in_number("0x"));
        assert!(!ends_in_number("example.com"));
        assert!(!ends_in_number("0x7f.example"));
        assert!(!ends_in_number("1.2.3.4a"));
        assert!(!ends_in_number("x0x1"));
    }

    #[test]
    fn every_non_public_range() {
        let denied = [
            "0.0.0.0",
            "0.1.2.3",
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "100.64.0.1",
            "100.127.255.255",
            "127.0.0.1",
            "127.255.0.9",
            "169.254.169.254",
            "169.254.0.1",
            "224.0.0.1",
            "239.255.255.255",
            "240.0.0.1",
            "255.255.255.255",
            "::",
            "::1",
            "::ffff:127.0.0.1",
            "::ffff:10.0.0.1",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "::ffff:0:7f00:1",
            "64:ff9b::7f00:1",
            "64:ff9b::a00:1",
            "64:ff9b::c612:1",
            "64:ff9b:1::1",
            "192.0.0.1",
            "192.0.0.9",
            "192.0.0.170",
            "192.88.99.1",
            "198.18.0.1",
            "198.19.255.255",
            "100::1",
            "100:0:0:1::1",
            "2001::1",
            "2001:2::1",
            "2001:1ff::1",
            "5f00::1",
            "::ffff:198.18.0.1",
            "2002:7f00:1::1",
            "2002:c633:6401::1",
            "fc00::1",
            "fd00::1",
            "fd00:ec2::254",
            "fe80::1",
            "febf::1",
            "fec0::1",
            "ff02::1",
        ];
        for s in denied {
            let ip: IpAddr = s.parse().unwrap();
            assert!(non_public(ip).is_some(), "{s} should be non-public");
        }
        let public = [
            "1.1.1.1",
            "8.8.8.8",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "169.255.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.167.255.255",
            "192.169.0.0",
            "223.255.255.255",
            "192.0.2.7",
            "198.51.100.7",
            "203.0.113.80",
            "151.101.0.223",
            "::ffff:151.101.0.223",
            "2a04:4e42::223",
            "2001:db8::1",
            "2606:4700::1111",
            "fbff::1",
            "fe7f::1",
            "64:ff9b::808:808",
            "192.0.1.1",
            "192.88.98.1",
            "198.17.255.255",
            "198.20.0.0",
            "2001:200::1",
            "3fff::1",
        ];
        for s in public {
            let ip: IpAddr = s.parse().unwrap();
            assert_eq!(non_public(ip), None, "{s} should be public");
        }
    }

    #[test]
    fn local_addresses_are_this_hosts() {
        assert!(is_local(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        assert!(!is_local("198.51.100.7".parse().unwrap()));
    }

    #[test]
    fn entry_addresses_must_be_destinations() {
        for s in [
            "0.0.0.0",
            "0.1.2.3",
            "224.0.0.1",
            "255.255.255.255",
            "::",
            "ff02::1",
        ] {
            let ip: IpAddr = s.parse().unwrap();
            assert!(not_a_destination(ip).is_some(), "{s}");
        }
        for s in ["127.0.0.1", "10.0.0.1", "::1", "198.51.100.7"] {
            let ip: IpAddr = s.parse().unwrap();
            assert_eq!(not_a_destination(ip), None, "{s}");
        }
    }
}
