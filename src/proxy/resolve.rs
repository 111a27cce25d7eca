//! Name resolution for the proxy: an optional hosts-format file first, then the system resolver.
//! Only names that passed the policy get here, and every lookup is counted.
//!
//! Then the proxy's own use of it (`Proxy::open`): the policy first, the name resolved once,
//! every address checked (public, not this host's), the vetted addresses dialled; a refusal is
//! recorded as a `Decision` and answered (403, or 502 when an allowed name fails).

use super::head::{respond, Status};
use super::policy::{canonical_host, Host};
use super::{addr, Decision, Proxy, CONNECT_TIMEOUT};
use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Mutex;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::time::timeout;

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

/// Why a destination was not dialled.
pub(super) enum Refusal {
    /// The policy says no: 403, `allowed: false`.
    Denied {
        reason: String,
        resolved: Vec<IpAddr>,
    },
    /// The policy said yes but the name did not resolve: 502, `allowed: true`.
    Failed { reason: String },
}

/// A destination that passed the policy, with the addresses to dial.
pub(super) struct Vetted {
    /// The entry that allowed it, as written.
    pub(super) entry: String,
    /// What the name resolved to (empty for an IP literal).
    pub(super) resolved: Vec<IpAddr>,
    /// Vetted addresses, in resolver order.
    pub(super) dial: Vec<IpAddr>,
}

impl Proxy {
    /// Policy, then resolution and address checks. Never resolves a name the policy refused.
    pub(super) async fn vet(&self, host: &Host, port: u16) -> Result<Vetted, Refusal> {
        let entry = self
            .policy()
            .check(host, port)
            .map_err(|reason| Refusal::Denied {
                reason,
                resolved: Vec::new(),
            })?
            .to_owned();
        let name = match host {
            // Listed exactly, so it may be private: that is what an address entry is for.
            Host::Ip(ip) => {
                return Ok(Vetted {
                    entry,
                    resolved: Vec::new(),
                    dial: vec![*ip],
                })
            }
            Host::Name(n) => n,
        };
        let resolved = self
            .resolver
            .resolve(name)
            .await
            .map_err(|e| Refusal::Failed {
                reason: format!("egressAllow `{entry}`; {e}"),
            })?;
        for &ip in &resolved {
            // Listing the address does not let a *name* reach it (names reach public addresses
            // only); what does is asking for the address itself, listed.
            let what = match addr::non_public(ip) {
                Some(range) => format!("a {range} address"),
                None if addr::is_local(ip) => "an address of this host".to_owned(),
                None => continue,
            };
            let literal = match ip {
                IpAddr::V6(v6) => format!("[{v6}]:{port}"),
                IpAddr::V4(v4) => format!("{v4}:{port}"),
            };
            let why = format!("{name} resolves to {ip}, {what}, and names only ever reach public addresses (listing the address does not change that for the name); to reach that service, list `{literal}` in egressAllow and connect to {literal} itself instead of {name}");
            return Err(Refusal::Denied {
                reason: why,
                resolved,
            });
        }
        Ok(Vetted {
            entry,
            dial: resolved.clone(),
            resolved,
        })
    }

    /// Records a refusal and answers it (403 denied, 502 failed).
    async fn refuse<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        client: &mut S,
        host: &Host,
        port: u16,
        refusal: Refusal,
    ) {
        let (status, allowed, reason, resolved) = match refusal {
            Refusal::Denied { reason, resolved } => (Status::Forbidden, false, reason, resolved),
            Refusal::Failed { reason } => (Status::BadGateway, true, reason, Vec::new()),
        };
        self.record(Decision {
            host: host.text(),
            port,
            allowed,
            reason: reason.clone(),
            resolved,
            problem: allowed.then(|| reason.clone()),
        });
        respond(client, status, &reason).await;
    }

    /// Records a request refused for its shape once its destination is known, and answers it.
    pub(super) async fn refuse_request<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        client: &mut S,
        host: &Host,
        port: u16,
        status: Status,
        reason: String,
    ) {
        self.record(Decision {
            host: host.text(),
            port,
            allowed: false,
            reason: reason.clone(),
            resolved: Vec::new(),
            problem: None,
        });
        respond(client, status, &reason).await;
    }

    /// Vets and dials; on failure records the decision and answers the client.
    pub(super) async fn open<S: AsyncRead + AsyncWrite + Unpin>(
        &self,
        client: &mut S,
        host: &Host,
        port: u16,
    ) -> Option<(TcpStream, Decision)> {
        let vetted = match self.vet(host, port).await {
            Ok(v) => v,
            Err(refusal) => {
                self.refuse(client, host, port, refusal).await;
                return None;
            }
        };
        let mut decision = Decision {
            host: host.text(),
            port,
            allowed: true,
            reason: format!("egressAllow `{}`", vetted.entry),
            resolved: vetted.resolved,
            problem: None,
        };
        match dial(&vetted.dial, port).await {
            Ok(upstream) => Some((upstream, decision)),
            Err(e) => {
                decision.reason = format!("{}; {e}", decision.reason);
                decision.problem = Some(e.clone());
                self.record(decision);
                respond(client, Status::BadGateway, &e).await;
                None
            }
        }
    }
}

/// Tries the vetted addresses in order; the first that connects wins.
pub(super) async fn dial(addrs: &[IpAddr], port: u16) -> Result<TcpStream, String> {
    let mut errors = Vec::new();
    for &ip in addrs {
        match timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect(SocketAddr::new(ip, port)),
        )
        .await
        {
            Ok(Ok(stream)) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Ok(Err(e)) => errors.push(format!("{ip}: {e}")),
            Err(_) => errors.push(format!("{ip}: timed out")),
        }
    }
    Err(format!(
        "could not connect to port {port} ({})",
        errors.join("; ")
    ))
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
