//! Name resolution for the proxy: an optional hosts-format file first, then the system resolver.
//! Only names that passed the policy get here, and every lookup is counted.

use super::policy::{canonical_host, Host};
use std::collections::{BTreeMap, HashMap};
use std::net::IpAddr;
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;

/// Env var naming a hosts-format file consulted before the system resolver.
const HOSTS_ENV: &str = "KERN_EGRESS_HOSTS";
/// A resolver that hangs must not hold a client forever.
const LOOKUP_TIMEOUT: Duration = Duration::from_secs(10);

/// Resolves names the policy allowed: the hosts file named by `KERN_EGRESS_HOSTS` (if any), then
/// the system resolver for names the file does not mention. `Resolver::default()` is the system
/// resolver alone.
#[derive(Debug, Default)]
pub struct Resolver {
    /// Canonical name → addresses, in file order.
    hosts: HashMap<String, Vec<IpAddr>>,
    lookups: Mutex<BTreeMap<String, u64>>,
}

impl Resolver {
    /// The system resolver (tokio::net::lookup_host), preceded by the hosts-format file named by
    /// env KERN_EGRESS_HOSTS when set (names found there never go to the system resolver).
    pub fn from_env() -> Result<Resolver, String> {
        match std::env::var_os(HOSTS_ENV) {
            Some(path) if !path.is_empty() => {
                Self::with_hosts_file(Path::new(&path)).map_err(|e| format!("{HOSTS_ENV}: {e}"))
            }
            _ => Ok(Resolver::default()),
        }
    }

    /// The system resolver preceded by this hosts-format file (`address name [alias…]` lines,
    /// `#` comments).
    pub fn with_hosts_file(path: &Path) -> Result<Resolver, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read hosts file {}: {e}", path.display()))?;
        let hosts =
            parse_hosts(&text).map_err(|e| format!("hosts file {}: {e}", path.display()))?;
        Ok(Resolver {
            hosts,
            lookups: Mutex::default(),
        })
    }

    /// Looks up a canonical name: every address, deduplicated, IPv4-mapped IPv6 as IPv4.
    pub(super) async fn resolve(&self, name: &str) -> Result<Vec<IpAddr>, String> {
        {
            let mut counts = self.lookups.lock().unwrap_or_else(|p| p.into_inner());
            *counts.entry(name.to_owned()).or_default() += 1;
        }
        if let Some(addrs) = self.hosts.get(name) {
            return Ok(addrs.clone());
        }
        // Port 0: only the addresses matter; the proxy dials the request's port itself.
        let found = tokio::time::timeout(LOOKUP_TIMEOUT, tokio::net::lookup_host((name, 0)))
            .await
            .map_err(|_| format!("resolving {name} timed out"))?
            .map_err(|e| format!("{name} did not resolve: {e}"))?;
        let mut addrs: Vec<IpAddr> = Vec::new();
        for a in found {
            let ip = a.ip().to_canonical();
            if !addrs.contains(&ip) {
                addrs.push(ip);
            }
        }
        if addrs.is_empty() {
            return Err(format!("{name} has no addresses"));
        }
        Ok(addrs)
    }

    /// Lookups so far, per canonical name.
    pub(super) fn lookups(&self) -> BTreeMap<String, u64> {
        self.lookups
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }
}

/// Parses `address name [alias…]` lines. Names are canonicalised like requests, so a file line
/// for `Bücher.example.` serves a request for `xn--bcher-kva.example`.
fn parse_hosts(text: &str) -> Result<HashMap<String, Vec<IpAddr>>, String> {
    let mut hosts: HashMap<String, Vec<IpAddr>> = HashMap::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or_default();
        let mut fields = line.split_whitespace();
        let Some(addr) = fields.next() else {
            continue;
        };
        let ip: IpAddr = addr
            .parse()
            .map_err(|_| format!("line {}: {addr:?} is not an IP address", i + 1))?;
        let ip = ip.to_canonical();
        let mut any = false;
        for raw in fields {
            any = true;
            let name = match canonical_host(raw) {
                Ok(Host::Name(n)) => n,
                Ok(Host::Ip(_)) => {
                    return Err(format!("line {}: {raw:?} is an address, not a name", i + 1))
                }
                Err(e) => return Err(format!("line {}: {e}", i + 1)),
            };
            let addrs = hosts.entry(name).or_default();
            if !addrs.contains(&ip) {
                addrs.push(ip);
            }
        }
        if !any {
            return Err(format!("line {}: an address with no names", i + 1));
        }
    }
    Ok(hosts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_file_format() {
        let h = parse_hosts(
            "# comment\n\n198.51.100.7  Mirror.Test.  alias.test # trailing\n\
             198.51.100.8 mirror.test\n::ffff:127.0.0.1 mapped.test\n2001:db8::1 v6.test\n\
             203.0.113.9\tbücher.example\n",
        )
        .unwrap();
        let ips = |s: &[&str]| -> Vec<IpAddr> { s.iter().map(|a| a.parse().unwrap()).collect() };
        assert_eq!(h["mirror.test"], ips(&["198.51.100.7", "198.51.100.8"]));
        assert_eq!(h["alias.test"], ips(&["198.51.100.7"]));
        assert_eq!(h["mapped.test"], ips(&["127.0.0.1"]));
        assert_eq!(h["v6.test"], ips(&["2001:db8::1"]));
        assert_eq!(h["xn--bcher-kva.example"], ips(&["203.0.113.9"]));
    }

    #[test]
    fn hosts_file_refusals() {
        for (text, says) in [
            ("not-an-ip name.test\n", "line 1"),
            ("198.51.100.7\n", "no names"),
            ("# ok\n198.51.100.7 a%b.test\n", "line 2"),
            ("198.51.100.7 10.0.0.1\n", "an address"),
        ] {
            let err = parse_hosts(text).unwrap_err();
            assert!(err.contains(says), "{text:?}: {err}");
        }
    }

    #[tokio::test]
    async fn hosts_names_never_reach_the_system_resolver() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hosts");
        std::fs::write(&path, "198.51.100.7 mirror.test\n").unwrap();
        let r = Resolver::with_hosts_file(&path).unwrap();
        assert_eq!(
            r.resolve("mirror.test").await.unwrap(),
            vec![IpAddr::from([198, 51, 100, 7])]
        );
        assert_eq!(r.resolve("mirror.test").await.unwrap().len(), 1);
        assert_eq!(r.lookups().get("mirror.test"), Some(&2));
        assert!(Resolver::with_hosts_file(&dir.path().join("missing")).is_err());
    }
}
