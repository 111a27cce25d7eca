//! How pulls reach registries, read from the environment once per pull: the CAs they trust,
//! the proxy they go through and the Docker Hub mirrors they try first.
//!
//! - Trust: the system's CA store as curl and Docker use it (`SSL_CERT_FILE` / `SSL_CERT_DIR`
//!   when set, else the distribution's bundle and certificate directory), plus the PEM
//!   certificates in `KERN_REGISTRY_CA`. The compiled-in Mozilla roots stand in only when the
//!   system store is missing or empty.
//! - Proxies, as curl reads them: `https_proxy`/`HTTPS_PROXY` for https URLs,
//!   `http_proxy`/`HTTP_PROXY` for http URLs (curl reads only the lowercase one; Go and Docker
//!   read both), `all_proxy`/`ALL_PROXY` for either when the scheme's own is unset. `NO_PROXY`
//!   (or `no_proxy`) lists hosts reached directly. Loopback hosts are always reached directly,
//!   as Go's net/http (and so Docker) does it: a proxy elsewhere cannot reach this machine's
//!   loopback.
//! - Mirrors: `KERN_REGISTRY_MIRRORS`, URLs in the shape of Docker's `registry-mirrors`, tried
//!   in order for docker.io images before Docker Hub itself.
//!
//! The proxy variables' names and the host's CA bundle file are here for networked boxes too
//! (`session::network` sets the one and binds the other; `kern doctor` shows both): one place
//! knows where the host keeps its trust store, pulls and boxes alike.

use super::Error;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;
use ureq::tls::{Certificate, PemItem, RootCerts, TlsConfig};
use ureq::{Agent, Proxy};

/// The variables HTTP clients take their proxy from (curl, pip, requests, npm, Node's fetch
/// with a proxy agent): what the egress relay sets in a box, and what `kern doctor` shows.
pub const PROXY_VARS: &[&str] = &[
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "http_proxy",
    "https_proxy",
    "ALL_PROXY",
    "all_proxy",
];
/// The variables listing hosts reached without the proxy.
pub const NO_PROXY_VARS: &[&str] = &["NO_PROXY", "no_proxy"];
/// The proxy variables of https and http URLs, in the order pulls read them (curl's).
const HTTPS_PROXY_VARS: &[&str] = &["https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"];
const HTTP_PROXY_VARS: &[&str] = &["http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"];

/// The host's CA bundle as one PEM file, the one the system store's certificates come from when
/// pulls load it: `SSL_CERT_FILE` when set, else the distribution's bundle (openssl-probe's
/// search, which rustls-native-certs makes too). A networked box is given this file.
pub fn ca_bundle_file() -> Option<PathBuf> {
    openssl_probe::probe()
        .cert_file
        .and_then(|p| std::fs::canonicalize(p).ok())
        .filter(|c| c.is_file())
}

/// The CA bundle networked boxes trust: the host's (`ca_bundle_file`), unless `KERN_HOST_CA=0`
/// turns the trust off. Read once per session.
pub fn host_ca() -> Result<Option<PathBuf>, crate::error::Error> {
    match std::env::var("KERN_HOST_CA").ok().as_deref() {
        Some("0") | Some("false") | Some("no") => return Ok(None),
        None | Some("") | Some("1") | Some("true") | Some("yes") => {}
        Some(other) => {
            return crate::invalid!(
                "KERN_HOST_CA={other:?}: use 0 to stop networked boxes (setup, network: true, egressAllow) trusting the host's CA store, or 1 (the default)"
            )
        }
    }
    Ok(ca_bundle_file())
}

/// The extra CA file pulls trust besides the system store.
pub const CA_VAR: &str = "KERN_REGISTRY_CA";
pub const MIRRORS_VAR: &str = "KERN_REGISTRY_MIRRORS";

/// The certificates HTTPS pulls accept, and where they came from.
pub struct Trust {
    certs: Vec<Certificate<'static>>,
    /// Where the system store was looked for, e.g. `/etc/ssl/certs/ca-certificates.crt`.
    pub system_paths: String,
    pub system_count: usize,
    /// Why (part of) the system store could not be read.
    pub system_problems: Vec<String>,
    /// `KERN_REGISTRY_CA` and how many certificates it holds.
    pub extra: Option<(PathBuf, usize)>,
    /// The compiled-in roots stand in for an empty system store.
    pub fallback: bool,
}

impl Trust {
    pub fn from_env() -> Result<Trust, Error> {
        // Read first: a broken KERN_REGISTRY_CA is the user's mistake, reported before anything.
        let extra = extra_ca()?;
        let native = rustls_native_certs::load_native_certs();
        let mut certs: Vec<Certificate<'static>> = native
            .certs
            .iter()
            .map(|c| Certificate::from_der(c.as_ref()).to_owned())
            .collect();
        let system_count = certs.len();
        let fallback = system_count == 0;
        if fallback {
            certs.extend(
                webpki_root_certs::TLS_SERVER_ROOT_CERTS
                    .iter()
                    .map(|c| Certificate::from_der(c.as_ref())),
            );
        }
        let extra = extra.map(|(path, list)| {
            let n = list.len();
            certs.extend(list);
            (path, n)
        });
        Ok(Trust {
            certs,
            system_paths: system_paths(),
            system_count,
            system_problems: native.errors.iter().map(|e| e.to_string()).collect(),
            extra,
            fallback,
        })
    }

    /// One line: what HTTPS pulls trust.
    pub fn describe(&self) -> String {
        let mut s = if self.fallback {
            format!(
                "no system CA store at {} (so kern's built-in Mozilla roots)",
                self.system_paths
            )
        } else {
            format!(
                "the system CA store ({} certificates from {})",
                self.system_count, self.system_paths
            )
        };
        match &self.extra {
            Some((p, n)) => s.push_str(&format!(" and {CA_VAR}={} ({n})", p.display())),
            None => s.push_str(&format!(" ({CA_VAR} unset)")),
        }
        s
    }

    /// The certificates, DER: what the egress proxy verifies a secret's host against.
    pub fn der_certificates(&self) -> Vec<Vec<u8>> {
        self.certs.iter().map(|c| c.der().to_vec()).collect()
    }

    fn tls_config(&self) -> TlsConfig {
        TlsConfig::builder()
            .root_certs(RootCerts::new_with_certs(&self.certs))
            .build()
    }
}

/// The system store's paths the way rustls-native-certs picks them: the SSL_CERT_* variables
/// when either is set, else what openssl-probe finds.
fn system_paths() -> String {
    let vars: Vec<String> = ["SSL_CERT_FILE", "SSL_CERT_DIR"]
        .iter()
        .filter_map(|k| std::env::var_os(k).map(|v| format!("{k}={}", v.to_string_lossy())))
        .collect();
    if !vars.is_empty() {
        return vars.join(", ");
    }
    let probe = openssl_probe::probe();
    let found: Vec<String> = probe
        .cert_file
        .iter()
        .chain(&probe.cert_dir)
        .map(|p| p.display().to_string())
        .collect();
    if found.is_empty() {
        "the usual paths (/etc/ssl/certs/ca-certificates.crt, /etc/pki/tls/certs, …)".into()
    } else {
        found.join(", ")
    }
}

/// `KERN_REGISTRY_CA`: a PEM file of one or more certificates. Unset or empty: none.
fn extra_ca() -> Result<Option<(PathBuf, Vec<Certificate<'static>>)>, Error> {
    let Some(path) = std::env::var_os(CA_VAR).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let path = PathBuf::from(path);
    let bytes = std::fs::read(&path).map_err(|e| {
        Error::Invalid(format!(
            "{CA_VAR}={}: cannot read it ({e}); point it at a PEM file of CA certificates, or unset it",
            path.display()
        ))
    })?;
    let mut certs = Vec::new();
    for item in ureq::tls::parse_pem(&bytes) {
        match item {
            Ok(PemItem::Certificate(c)) => certs.push(c),
            Ok(_) => {}
            Err(e) => {
                return Err(Error::Invalid(format!(
                "{CA_VAR}={}: not valid PEM ({e}); it must hold -----BEGIN CERTIFICATE----- blocks",
                path.display()
            )))
            }
        }
    }
    if certs.is_empty() {
        return Err(Error::Invalid(format!(
            "{CA_VAR}={}: holds no PEM certificate (-----BEGIN CERTIFICATE-----); point it at your registry's or proxy's CA certificate",
            path.display()
        )));
    }
    Ok(Some((path, certs)))
}

/// A proxy from the environment: the variable it came from and its URL without credentials.
#[derive(Clone)]
pub struct ProxyUse {
    pub var: &'static str,
    pub shown: String,
    proxy: Proxy,
}

impl std::fmt::Display for ProxyUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "proxy {} ({})", self.shown, self.var)
    }
}

/// The proxies pulls use, per scheme, and the hosts that bypass them.
#[derive(Clone, Default)]
pub struct Proxies {
    pub https: Option<ProxyUse>,
    pub http: Option<ProxyUse>,
    pub no_proxy: Option<(&'static str, String)>,
    bypass: Vec<NoProxy>,
}

impl Proxies {
    pub fn from_env() -> Result<Proxies, Error> {
        let https = proxy_var(HTTPS_PROXY_VARS)?;
        let http = proxy_var(HTTP_PROXY_VARS)?;
        let no_proxy = ["no_proxy", "NO_PROXY"]
            .into_iter()
            .find_map(|k| std::env::var(k).ok().map(|v| (k, v)));
        let bypass = no_proxy
            .as_ref()
            .map(|(_, v)| parse_no_proxy(v))
            .unwrap_or_default();
        Ok(Proxies {
            https,
            http,
            no_proxy,
            bypass,
        })
    }

    /// The proxy a URL goes through, or None for a direct connection.
    pub fn route(&self, url: &str) -> Option<&ProxyUse> {
        let uri: ureq::http::Uri = url.parse().ok()?;
        let proxy = match uri.scheme_str() {
            Some("https") => self.https.as_ref()?,
            Some("http") => self.http.as_ref()?,
            _ => return None,
        };
        let host = uri.host()?;
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let port = uri
            .port_u16()
            .unwrap_or(if uri.scheme_str() == Some("https") {
                443
            } else {
                80
            });
        if is_loopback(host) || self.bypass.iter().any(|n| n.matches(host, port)) {
            None
        } else {
            Some(proxy)
        }
    }

    /// One line: which proxy pulls use for what.
    pub fn describe(&self) -> String {
        let mut parts = Vec::new();
        for (scheme, p) in [("https", &self.https), ("http", &self.http)] {
            match p {
                Some(p) => parts.push(format!("{scheme} via {p}")),
                None => parts.push(format!("{scheme} direct")),
            }
        }
        if let Some((k, v)) = &self.no_proxy {
            parts.push(format!("{k}={v} direct"));
        }
        parts.push("loopback always direct".into());
        parts.join("; ")
    }
}

/// The first of `vars` that is set and not empty, parsed by ureq (which also takes the
/// credentials in `http://user:pass@host:port`).
fn proxy_var(vars: &[&'static str]) -> Result<Option<ProxyUse>, Error> {
    let Some((var, value)) = vars
        .iter()
        .find_map(|k| Some((*k, std::env::var(k).ok().filter(|v| !v.trim().is_empty())?)))
    else {
        return Ok(None);
    };
    let shown = redact(value.trim());
    let bad = |why: &str| {
        Error::Invalid(format!(
            "{var}={shown}: {why}; pulls take an http:// or https:// proxy URL (http://[user:password@]host:port), or unset it"
        ))
    };
    let proxy = Proxy::new(value.trim()).map_err(|_| bad("not a proxy URL"))?;
    match proxy.protocol() {
        ureq::ProxyProtocol::Http | ureq::ProxyProtocol::Https => {}
        other => return Err(bad(&format!("a {other} proxy is not supported for pulls"))),
    }
    Ok(Some(ProxyUse { var, shown, proxy }))
}

/// A proxy URL without its credentials: what may be printed.
pub fn redact(url: &str) -> String {
    let (scheme, rest) = url.split_once("://").map_or(("", url), |(s, r)| (s, r));
    // The last `@` anywhere, not only before the first `/`: a password may hold `/` (and a
    // URL that fails to parse is printed too). A path with an `@` is over-hidden, never leaked.
    let redacted = match rest.rfind('@') {
        Some(at) => format!("***@{}", &rest[at + 1..]),
        None => rest.to_string(),
    };
    if scheme.is_empty() {
        redacted
    } else {
        format!("{scheme}://{redacted}")
    }
}

/// Whether a host name or address is this machine's loopback: reached over plain HTTP, never
/// through a proxy (registries, mirrors and `NO_PROXY` alike).
pub(super) fn is_loopback(host: &str) -> bool {
    host.eq_ignore_ascii_case("localhost") || host.parse::<IpAddr>().is_ok_and(|a| a.is_loopback())
}

/// One `NO_PROXY` entry, with curl's meaning. Matched here rather than by ureq's own
/// `NO_PROXY` reading, which differs from curl where users notice: ` b.corp` (after a comma
/// and a space) never matches, `corp.example` does not cover its subdomains, and there are no
/// CIDR ranges (curl ≥ 7.86) or ports.
#[derive(Clone, Debug, PartialEq)]
enum NoProxy {
    All,
    /// A domain and every name under it; `.corp` and `*.corp` mean the same.
    Domain(String, Option<u16>),
    Net(IpAddr, u8),
}

fn parse_no_proxy(v: &str) -> Vec<NoProxy> {
    v.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|e| !e.is_empty())
        .map(|e| {
            if e == "*" {
                return NoProxy::All;
            }
            if let Some((ip, bits)) = e.split_once('/') {
                if let (Ok(ip), Ok(bits)) = (ip.parse::<IpAddr>(), bits.parse::<u8>()) {
                    return NoProxy::Net(ip, bits);
                }
            }
            let e = e.trim_start_matches('*').trim_start_matches('.');
            // `[v6]:port`, `[v6]`, a bare IPv6 address, `host:port`, `host`.
            let (host, port) = if let Some(rest) = e.strip_prefix('[') {
                let (h, after) = rest.split_once(']').unwrap_or((rest, ""));
                (h, after.strip_prefix(':').and_then(|p| p.parse().ok()))
            } else if e.parse::<IpAddr>().is_ok() {
                (e, None)
            } else {
                match e.rsplit_once(':') {
                    Some((h, p)) if p.parse::<u16>().is_ok() => (h, p.parse().ok()),
                    _ => (e, None),
                }
            };
            match host.parse::<IpAddr>() {
                Ok(ip) if port.is_none() => NoProxy::Net(ip, if ip.is_ipv4() { 32 } else { 128 }),
                _ => NoProxy::Domain(host.trim_end_matches('.').to_ascii_lowercase(), port),
            }
        })
        .collect()
}

impl NoProxy {
    fn matches(&self, host: &str, port: u16) -> bool {
        match self {
            NoProxy::All => true,
            NoProxy::Domain(d, p) => {
                let host = host.trim_end_matches('.').to_ascii_lowercase();
                p.is_none_or(|p| p == port)
                    && (host == *d
                        || host
                            .strip_suffix(d.as_str())
                            .is_some_and(|h| h.ends_with('.')))
            }
            NoProxy::Net(net, bits) => match (host.parse::<IpAddr>(), net) {
                (Ok(IpAddr::V4(h)), IpAddr::V4(n)) => {
                    let mask = u32::MAX
                        .checked_shl(32 - u32::from(*bits).min(32))
                        .unwrap_or(0);
                    u32::from(h) & mask == u32::from(*n) & mask
                }
                (Ok(IpAddr::V6(h)), IpAddr::V6(n)) => {
                    let mask = u128::MAX
                        .checked_shl(128 - u32::from(*bits).min(128))
                        .unwrap_or(0);
                    u128::from(h) & mask == u128::from(*n) & mask
                }
                _ => false,
            },
        }
    }
}

/// `KERN_REGISTRY_MIRRORS`: `scheme://host[:port]` each, comma or space separated, in order.
pub fn mirrors() -> Result<Vec<String>, Error> {
    let Ok(v) = std::env::var(MIRRORS_VAR) else {
        return Ok(Vec::new());
    };
    v.split(|c: char| c == ',' || c.is_whitespace())
        .filter(|m| !m.is_empty())
        .map(|m| {
            let bad = |why: &str| {
                Error::Invalid(format!(
                    "{MIRRORS_VAR}: {:?} {why}; list mirror URLs like https://mirror.example.com (comma or space separated), as Docker's registry-mirrors",
                    redact(m)
                ))
            };
            let uri: ureq::http::Uri = m.parse().map_err(|_| bad("is not a URL"))?;
            if !matches!(uri.scheme_str(), Some("http" | "https")) {
                return Err(bad("needs http:// or https://"));
            }
            let auth = uri.authority().ok_or_else(|| bad("has no host"))?;
            // As for registries (`registry::endpoint`): the tag's digest comes from the mirror,
            // so plain HTTP across a network would let anyone on the path choose the image.
            if uri.scheme_str() == Some("http")
                && !is_loopback(auth.host().trim_start_matches('[').trim_end_matches(']'))
            {
                return Err(bad("is plain HTTP to a host that is not loopback (anyone on the path could choose the image); use https://"));
            }
            if auth.as_str().contains('@') {
                return Err(bad("carries credentials: put them in ~/.docker/config.json or KERN_REGISTRY_AUTH under the mirror's host instead"));
            }
            if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
                return Err(bad("has a path or query (a mirror is a registry root)"));
            }
            Ok(format!("{}://{}", uri.scheme_str().unwrap_or("https"), auth))
        })
        .collect()
}

/// The agents a pull's requests go out on: one direct and one per proxy, all trusting `Trust`.
#[derive(Clone)]
pub struct Net {
    pub proxies: Proxies,
    pub trust_line: String,
    direct: Agent,
    via_https: Option<Agent>,
    via_http: Option<Agent>,
}

impl Net {
    pub fn from_env(timeout: Duration) -> Result<Net, Error> {
        let trust = Trust::from_env()?;
        let proxies = Proxies::from_env()?;
        let tls = trust.tls_config();
        let agent = |proxy: Option<&ProxyUse>| -> Agent {
            Agent::config_builder()
                .http_status_as_error(false)
                .max_redirects(0)
                .timeout_connect(Some(timeout))
                .timeout_recv_response(Some(timeout))
                .timeout_per_read(Some(timeout))
                .user_agent(concat!("kern-sandbox/", env!("CARGO_PKG_VERSION")))
                .tls_config(tls.clone())
                // Explicit, also when None: ureq's default reads the environment its own way.
                .proxy(proxy.map(|p| p.proxy.clone()))
                .build()
                .into()
        };
        Ok(Net {
            direct: agent(None),
            via_https: proxies.https.as_ref().map(|p| agent(Some(p))),
            via_http: proxies.http.as_ref().map(|p| agent(Some(p))),
            trust_line: trust.describe(),
            proxies,
        })
    }

    /// The agent for `url`, and the proxy it goes through.
    pub fn agent(&self, url: &str) -> (&Agent, Option<&ProxyUse>) {
        let route = self.proxies.route(url);
        let agent = match (route, url.starts_with("https:")) {
            (Some(_), true) => self.via_https.as_ref(),
            (Some(_), false) => self.via_http.as_ref(),
            (None, _) => None,
        };
        (agent.unwrap_or(&self.direct), route)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matches(list: &str, host: &str, port: u16) -> bool {
        parse_no_proxy(list).iter().any(|n| n.matches(host, port))
    }

    #[test]
    fn no_proxy_reads_as_curl_does() {
        let l = "corp.example, .internal *.svc,10.0.0.0/8,fd00::/8,192.168.1.7,reg.local:5000";
        assert!(matches(l, "corp.example", 443));
        assert!(matches(l, "a.b.corp.example", 443));
        assert!(!matches(l, "notcorp.example", 443));
        assert!(matches(l, "internal", 443));
        assert!(matches(l, "x.internal", 443));
        assert!(matches(l, "x.svc", 443));
        assert!(matches(l, "10.1.2.3", 443));
        assert!(!matches(l, "11.1.2.3", 443));
        assert!(matches(l, "fd00::5", 443));
        assert!(matches(l, "192.168.1.7", 443));
        assert!(!matches(l, "192.168.1.8", 443));
        assert!(matches(l, "reg.local", 5000));
        assert!(!matches(l, "reg.local", 443));
        assert!(matches(l, "CORP.example.", 443));
        assert!(matches("*", "anything", 1));
        assert!(!matches("", "anything", 1));
    }

    #[test]
    fn loopback_never_goes_through_a_proxy() {
        let p = Proxies {
            https: Some(ProxyUse {
                var: "HTTPS_PROXY",
                shown: "http://p:3128".into(),
                proxy: Proxy::new("http://p:3128").unwrap(),
            }),
            bypass: parse_no_proxy("skip.me"),
            ..Default::default()
        };
        assert!(p.route("https://registry-1.docker.io/v2/").is_some());
        assert!(p.route("https://reg.skip.me:5000/v2/").is_none());
        assert!(p.route("https://127.0.0.2:5000/v2/").is_none());
        assert!(p.route("https://[::1]:5000/v2/").is_none());
        assert!(p.route("https://localhost/v2/").is_none());
        // No http proxy set: http URLs go direct.
        assert!(p.route("http://192.0.2.1/v2/").is_none());
    }

    #[test]
    fn proxy_credentials_are_hidden() {
        assert_eq!(redact("http://u:p@proxy:3128/"), "http://***@proxy:3128/");
        assert_eq!(redact("http://proxy:3128"), "http://proxy:3128");
        assert_eq!(redact("http://u:pa/ss@proxy:3128"), "http://***@proxy:3128");
        assert_eq!(redact("u:p@ss@proxy"), "***@proxy");
        assert_eq!(redact("u:p@proxy:3128"), "***@proxy:3128");
    }
}
