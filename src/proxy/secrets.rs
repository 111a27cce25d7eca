//! `secrets`: values the box may use but never holds. The box's environment carries a random
//! placeholder per secret; the proxy writes the value in its place in the request headers a
//! secret names (`headers`, by default the credential headers of `DEFAULT_HEADERS`), in requests
//! to one of that secret's hosts, and nowhere else. A placeholder of a secret of that host
//! anywhere else in the request (its request line, a header name, another header, the body) is
//! refused (403) before the value is written anywhere: servers echo URLs (404 pages, redirects)
//! and some headers (CORS `Origin`, preflight headers), so the box would read the value back.
//! What the host answers is scrubbed (`scrub.rs`): the value in any form there matched becomes
//! the placeholder again before the box reads it.
//!
//! Over HTTPS the proxy must read the request to do so: for a tunnel to a secret's host it
//! terminates TLS with a certificate for that host signed by a CA made for this proxy alone
//! (its key stays in this process's memory; only its certificate is given to the box to trust),
//! and opens its own TLS connection to the real host, verified against the roots it was given
//! (the system store, as pulls use it). Only HTTP/1.1 is spoken there (ALPN `http/1.1`).
//!
//! One request per terminated connection (`exchange.rs`): its head is rewritten with
//! `Connection: close`, its body (by `Content-Length` or chunked) is forwarded, and nothing
//! after it; clients open a new connection for their next request when told to close.
//! That head must name the connection's host (origin-form, one `Host` equal to it): a server
//! doing virtual hosting would route a head naming another site, value and all, to that site.

use super::policy::{canonical_host, split_authority, Host, Policy};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, CidrSubnet, DnType, GeneralSubtree, IsCa,
    KeyPair, KeyUsagePurpose, NameConstraints,
};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio_rustls::rustls::{
    self,
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName},
    ClientConfig, RootCertStore, ServerConfig,
};

/// What a placeholder starts with; 32 to 34 random hex digits follow (at least 122 random
/// bits), as many as make its length equal to the value's modulo 3, so that a value found in
/// base64 in a response is replaced in place (`scrub.rs`).
pub const PLACEHOLDER_PREFIX: &str = "kern-secret-";

/// The headers a secret's value goes into when it names none: the credential headers common
/// APIs read (`Authorization`; `X-Api-Key`: Anthropic, many; `Api-Key`: Azure OpenAI;
/// `X-Goog-Api-Key`: Google; `X-Auth-Token`: OpenStack and others; `Private-Token`: GitLab).
/// Servers do not echo these back as they echo URLs and CORS headers. `Proxy-Authorization`
/// is the proxy's own and never forwarded.
pub const DEFAULT_HEADERS: &[&str] = &[
    "authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "x-auth-token",
    "private-token",
];

/// Headers a value may never go into, even when named: servers reflect them (the request's
/// routing and origin, CORS preflight lists, the agent string in debug pages) or they frame the
/// request, which the proxy checks itself.
const NEVER_HEADERS: &[&str] = &[
    "host",
    "origin",
    "referer",
    "access-control-request-headers",
    "access-control-request-method",
    "user-agent",
    "content-length",
    "content-type",
    "transfer-encoding",
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authorization",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "via",
    "forwarded",
    "x-forwarded-for",
    "x-forwarded-host",
    "x-forwarded-proto",
];
/// The only protocol spoken on a terminated connection.
const ALPN_HTTP11: &[u8] = b"http/1.1";

/// One secret as the options give it.
#[derive(Clone)]
pub struct SecretSpec {
    /// The environment variable the box sees the placeholder in.
    pub name: String,
    pub value: String,
    /// `host` or `host:port` (any port the policy allows when none is given).
    pub hosts: Vec<String>,
    /// The request headers the value may go into; empty: `DEFAULT_HEADERS`.
    pub headers: Vec<String>,
}

// The value must never reach a log or an error message through a `{:?}`.
impl std::fmt::Debug for SecretSpec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SecretSpec")
            .field("name", &self.name)
            .field("hosts", &self.hosts)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

struct Secret {
    name: String,
    placeholder: Vec<u8>,
    value: Vec<u8>,
    hosts: Vec<(Host, Option<u16>)>,
    /// Lowercase header names the value may go into.
    headers: Vec<String>,
}

/// The secrets of one Sandbox, the CA of the tunnels its proxy terminates (to the secrets' hosts,
/// and to the package cache's: `cache.rs`), and the TLS settings of both sides.
pub struct Secrets {
    list: Vec<Secret>,
    /// The package cache's hosts (on 443), terminated for it, no secret placed there.
    cached: Vec<Host>,
    env: Vec<(String, String)>,
    ca: CertifiedIssuer<'static, KeyPair>,
    /// Server settings per host, each with a certificate the CA signed for it.
    leaves: Mutex<HashMap<String, Arc<ServerConfig>>>,
    upstream: Arc<ClientConfig>,
}

/// Why a secret was refused; never quotes the value.
#[derive(Debug, thiserror::Error)]
pub enum SecretsError {
    #[error("secret {name:?}: host {host:?}: {why}")]
    Host {
        name: String,
        host: String,
        why: String,
    },
    #[error("secret {name:?}: {why}")]
    Shape { name: String, why: String },
    #[error("making the secrets' certificate authority failed: {0}")]
    Ca(String),
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

impl Secrets {
    /// Checks the secrets, draws their placeholders and makes the CA. `roots`: the certificates
    /// (DER) the real hosts are verified against.
    pub fn new(specs: &[SecretSpec], roots: &[Vec<u8>]) -> Result<Secrets, SecretsError> {
        Self::made(specs, Vec::new(), roots)
    }

    /// As `new`, the CA also vouching for the package cache's hosts, whose tunnels are then
    /// terminated too (`specs` may be empty).
    pub fn with_package_cache(
        specs: &[SecretSpec],
        roots: &[Vec<u8>],
    ) -> Result<Secrets, SecretsError> {
        Self::made(specs, super::cache::PackageCache::hosts(), roots)
    }

    fn made(
        specs: &[SecretSpec],
        cached: Vec<Host>,
        roots: &[Vec<u8>],
    ) -> Result<Secrets, SecretsError> {
        let mut list = Vec::new();
        let mut env = Vec::new();
        for s in specs {
            let hosts = check_shape(s)?;
            let headers = check_headers(s)?;
            let mut placeholder = format!("{PLACEHOLDER_PREFIX}{}", uuid::Uuid::new_v4().simple());
            let extra = uuid::Uuid::new_v4().simple().to_string();
            let mut extra = extra.chars();
            while placeholder.len() % 3 != s.value.len() % 3 {
                placeholder.extend(extra.next());
            }
            env.push((s.name.clone(), placeholder.clone()));
            list.push(Secret {
                name: s.name.clone(),
                placeholder: placeholder.into_bytes(),
                value: s.value.clone().into_bytes(),
                hosts,
                headers,
            });
        }
        let hosts: Vec<&Host> = list
            .iter()
            .flat_map(|s| s.hosts.iter().map(|(h, _)| h))
            .chain(&cached)
            .collect();
        let ca = make_ca(&hosts).map_err(|e| SecretsError::Ca(e.to_string()))?;
        let mut store = RootCertStore::empty();
        // Unparseable certificates in a system bundle are skipped, as rustls-native-certs does.
        let _ =
            store.add_parsable_certificates(roots.iter().map(|d| CertificateDer::from(d.clone())));
        let mut upstream = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(|e| SecretsError::Ca(e.to_string()))?
            .with_root_certificates(store)
            .with_no_client_auth();
        upstream.alpn_protocols = vec![ALPN_HTTP11.to_vec()];
        Ok(Secrets {
            list,
            cached,
            env,
            ca,
            leaves: Mutex::default(),
            upstream: Arc::new(upstream),
        })
    }

    /// Checks the secrets without making anything: their shape, and that `policy` allows each
    /// host (a host it refuses could never be sent the value).
    pub fn check(specs: &[SecretSpec], policy: &Policy) -> Result<(), SecretsError> {
        for s in specs {
            check_headers(s)?;
            for (h, (host, port)) in s.hosts.iter().zip(check_shape(s)?) {
                let ports = port.map_or(vec![443, 80], |p| vec![p]);
                if !ports.iter().any(|p| policy.check(&host, *p).is_ok()) {
                    return Err(host_err(
                        s,
                        h,
                        "is not allowed by `egressAllow`; add it there too".into(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// `NAME=placeholder` for each secret, for the box's environment.
    pub fn env(&self) -> &[(String, String)] {
        &self.env
    }

    /// The CA's certificate (PEM), which the box trusts. Its key never leaves this process.
    pub fn ca_pem(&self) -> String {
        self.ca.pem()
    }

    /// Whether a tunnel to `host:port` is terminated: some secret goes there, or the package
    /// cache keeps files of it.
    pub(super) fn applies(&self, host: &Host, port: u16) -> bool {
        self.substitutes(host, port) || (port == 443 && self.cached.contains(host))
    }

    /// Whether a request to `host:port` gets some secret substituted.
    pub(super) fn substitutes(&self, host: &Host, port: u16) -> bool {
        self.list.iter().any(|s| s.listed(host, port))
    }

    /// Writes the values of the secrets of `host:port` into a request head (`line`: its request
    /// line; `headers`: names and values, changed in place): into the headers each secret names,
    /// and only there. A placeholder of such a secret anywhere else is refused, with why, and
    /// then nothing was written (the caller drops the head). Placeholders of other secrets stay
    /// as they are: they are worthless outside this proxy.
    pub(super) fn place(
        &self,
        host: &Host,
        port: u16,
        line: &[u8],
        headers: &mut [(String, Vec<u8>)],
    ) -> Result<(), String> {
        let mine: Vec<&Secret> = self.list.iter().filter(|s| s.listed(host, port)).collect();
        for s in &mine {
            let ph = &s.placeholder;
            if contains(line, ph) {
                return Err(format!("the placeholder of secret {} is in the request line; servers echo URLs (error pages, redirects), so a secret's value goes only into the headers it names ({}), never the URL", s.name, s.header_list()));
            }
            for (name, value) in headers.iter() {
                if contains(name.as_bytes(), ph) {
                    return Err(format!(
                        "the placeholder of secret {} is in a header name; its value goes only into the values of {}",
                        s.name,
                        s.header_list()
                    ));
                }
                let lower = name.to_ascii_lowercase();
                let found = contains(value, ph) || basic_auth(value, ph, ph).is_some();
                if found && !s.headers.contains(&lower) {
                    let fix = if NEVER_HEADERS.contains(&lower.as_str()) {
                        "servers reflect or route by that header, so a value never goes there"
                            .to_owned()
                    } else {
                        format!("add {name:?} to `secrets.{}.headers` if the server needs the value there", s.name)
                    };
                    return Err(format!(
                        "the placeholder of secret {} is in header {name:?}, which is not one its value may go into ({}); {fix}",
                        s.name,
                        s.header_list()
                    ));
                }
            }
        }
        for (name, value) in headers.iter_mut() {
            let lower = name.to_ascii_lowercase();
            for s in mine.iter().filter(|s| s.headers.contains(&lower)) {
                *value = replace_all(value, &s.placeholder, &s.value);
                if let Some(v) = basic_auth(value, &s.placeholder, &s.value) {
                    *value = v;
                }
            }
        }
        Ok(())
    }

    /// The placeholders of the secrets of `host:port`, with their names: none may be in a body.
    pub(super) fn placeholders(&self, host: &Host, port: u16) -> Vec<(String, Vec<u8>)> {
        self.list
            .iter()
            .filter(|s| s.listed(host, port))
            .map(|s| (s.name.clone(), s.placeholder.clone()))
            .collect()
    }

    /// A scrubber turning every secret's value back into its placeholder.
    pub(super) fn scrubber(&self) -> super::scrub::Scrubber {
        super::scrub::Scrubber::new(
            self.list
                .iter()
                .map(|s| (s.value.as_slice(), s.placeholder.as_slice())),
        )
    }

    /// The server side of a terminated tunnel to `host`: a certificate for it, made once.
    pub(super) fn server_config(&self, host: &Host) -> Result<Arc<ServerConfig>, String> {
        let key = host.text();
        let mut leaves = self.leaves.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(c) = leaves.get(&key) {
            return Ok(c.clone());
        }
        let made = (|| -> Result<ServerConfig, Box<dyn std::error::Error>> {
            let mut params = CertificateParams::new(vec![key.clone()])?;
            // The name is in the SAN; a common name that is no host name is one OpenSSL does
            // not check against the CA's name constraints as one (a CN `127.0.0.1` would be).
            params
                .distinguished_name
                .push(DnType::CommonName, "kern-sandbox secret host");
            let leaf_key = KeyPair::generate()?;
            let cert = params.signed_by(&leaf_key, &self.ca)?;
            let chain = vec![cert.der().clone()];
            let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(leaf_key.serialize_der()));
            let mut cfg = ServerConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()?
                .with_no_client_auth()
                .with_single_cert(chain, private)?;
            cfg.alpn_protocols = vec![ALPN_HTTP11.to_vec()];
            Ok(cfg)
        })()
        .map_err(|e| format!("making a certificate for {key} failed: {e}"))?;
        let made = Arc::new(made);
        leaves.insert(key, made.clone());
        Ok(made)
    }

    /// The CA's certificate, DER (tests trust it as a box does).
    #[cfg(test)]
    pub(super) fn ca_der(&self) -> CertificateDer<'static> {
        self.ca.der().clone()
    }

    /// The client side towards the real host.
    pub(super) fn connector(&self) -> tokio_rustls::TlsConnector {
        tokio_rustls::TlsConnector::from(self.upstream.clone())
    }
}

impl Secret {
    fn header_list(&self) -> String {
        self.headers.join(", ")
    }

    fn listed(&self, host: &Host, port: u16) -> bool {
        self.hosts
            .iter()
            .any(|(h, p)| h == host && p.is_none_or(|p| p == port))
    }
}

/// A secret's value and hosts, checked; its hosts parsed.
fn check_shape(s: &SecretSpec) -> Result<Vec<(Host, Option<u16>)>, SecretsError> {
    let shape = |why: &str| SecretsError::Shape {
        name: s.name.clone(),
        why: why.into(),
    };
    if s.value.is_empty() {
        return Err(shape("`value` is empty"));
    }
    if s.value.bytes().any(|b| b == b'\r' || b == b'\n' || b == 0) {
        return Err(shape(
            "`value` holds CR, LF or NUL, which can't go in an HTTP header",
        ));
    }
    if s.hosts.is_empty() {
        return Err(shape(
            "`hosts` is empty; name the hosts the value may be sent to",
        ));
    }
    s.hosts
        .iter()
        .map(|h| parse_host(h).map_err(|why| host_err(s, h, why)))
        .collect()
}

/// A secret's `headers`, checked, lowercase; `DEFAULT_HEADERS` when it names none.
fn check_headers(s: &SecretSpec) -> Result<Vec<String>, SecretsError> {
    if s.headers.is_empty() {
        return Ok(DEFAULT_HEADERS.iter().map(|h| (*h).to_owned()).collect());
    }
    let mut out = Vec::new();
    for h in &s.headers {
        let lower = h.to_ascii_lowercase();
        let token = !h.is_empty()
            && h.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b));
        let why = if !token {
            Some("is not a header name (letters, digits and `-`)".to_owned())
        } else if NEVER_HEADERS.contains(&lower.as_str()) {
            Some("is a header servers reflect or route by, or that frames the request; name a credential header such as Authorization or X-Api-Key".to_owned())
        } else {
            None
        };
        if let Some(why) = why {
            return Err(SecretsError::Shape {
                name: s.name.clone(),
                why: format!("`headers`: {h:?} {why}"),
            });
        }
        if !out.contains(&lower) {
            out.push(lower);
        }
    }
    Ok(out)
}

/// For an `Authorization: Basic <base64>` value whose credentials hold `ph`: the value with
/// `ph` replaced by `with` inside them, encoded again (clients build it from a user and a
/// password, so the placeholder is never there as it is).
fn basic_auth(value: &[u8], ph: &[u8], with: &[u8]) -> Option<Vec<u8>> {
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let (scheme, token) = value.split_at_checked(6)?;
    if !scheme.eq_ignore_ascii_case(b"basic ") {
        return None;
    }
    let decoded = b64.decode(token.trim_ascii()).ok()?;
    if !contains(&decoded, ph) {
        return None;
    }
    let mut out = scheme.to_vec();
    out.extend(b64.encode(replace_all(&decoded, ph, with)).into_bytes());
    Some(out)
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && haystack.windows(needle.len()).any(|w| w == needle)
}

fn host_err(s: &SecretSpec, h: &str, why: String) -> SecretsError {
    SecretsError::Host {
        name: s.name.clone(),
        host: h.to_owned(),
        why,
    }
}

/// `host` or `host:port`, canonical as requests are.
fn parse_host(raw: &str) -> Result<(Host, Option<u16>), String> {
    if raw.starts_with('.') {
        return Err("a secret names hosts exactly, not domains".into());
    }
    let (host, port) = split_authority(raw)?;
    Ok((canonical_host(host)?, port))
}

/// The name the real host's certificate must carry.
pub(super) fn server_name(host: &Host) -> Result<ServerName<'static>, String> {
    match host {
        Host::Ip(ip) => Ok(ServerName::IpAddress((*ip).into())),
        Host::Name(n) => ServerName::try_from(n.clone()).map_err(|e| format!("{n}: {e}")),
    }
}

/// A CA for this proxy alone: ECDSA P-256, made in memory. Name-constrained to the hosts it
/// terminates (the secrets', the package cache's) (defence in depth: were its key ever out, it could vouch for no other site): names
/// under the listed names only (`.invalid`, which never resolves, when none is listed), and
/// the listed addresses only (none when none is listed).
fn make_ca(hosts: &[&Host]) -> Result<CertifiedIssuer<'static, KeyPair>, rcgen::Error> {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(
        DnType::CommonName,
        "kern-sandbox egress proxy (per Sandbox)",
    );
    let mut permitted = Vec::new();
    let mut names = false;
    let mut addresses = false;
    for h in hosts {
        match h {
            Host::Name(n) => {
                names = true;
                permitted.push(GeneralSubtree::DnsName(n.clone()));
            }
            Host::Ip(ip) => {
                addresses = true;
                let prefix = if ip.is_ipv4() { 32 } else { 128 };
                permitted.push(GeneralSubtree::IpAddress(CidrSubnet::from_addr_prefix(
                    *ip, prefix,
                )));
            }
        }
    }
    if !names {
        permitted.push(GeneralSubtree::DnsName("invalid".into()));
    }
    let excluded = if addresses {
        Vec::new()
    } else {
        vec![
            GeneralSubtree::IpAddress(CidrSubnet::V4([0; 4], [0; 4])),
            GeneralSubtree::IpAddress(CidrSubnet::V6([0; 16], [0; 16])),
        ]
    };
    params.name_constraints = Some(NameConstraints {
        permitted_subtrees: permitted,
        excluded_subtrees: excluded,
    });
    params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(params, KeyPair::generate()?)
}

/// `haystack` with every `needle` replaced by `with`.
fn replace_all(haystack: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(haystack.len());
    let mut i = 0;
    while i < haystack.len() {
        if haystack[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(haystack[i]);
            i += 1;
        }
    }
    out
}

#[cfg(test)]
#[path = "secrets_tests.rs"]
mod tests;
