//! The egress proxy: a box with `egressAllow` has no network but this filtering HTTP proxy.
//! Pure tokio; it knows nothing of boxes: each client connection arrives as a connected stream.
//!
//! One connection carries one request: a `CONNECT host:port` tunnel, or one absolute-form plain
//! HTTP request. In order:
//! 1. The host is canonicalised (lowercase, IDNA, one trailing dot, numeric hosts read as IPv4
//!    in every inet_aton spelling) and checked against the policy, host and port, *before* any
//!    resolution: a denied name never reaches a resolver (no DNS exfiltration).
//! 2. An allowed name is resolved here, once; every address must be public and not this host's,
//!    else the request is denied (rebinding to loopback or metadata). An IP literal is allowed
//!    only when listed exactly, and then it may be private.
//! 3. The vetted address is dialled; nothing is resolved again.
//! 4. A tunnel's first bytes are read (`tunnel.rs`): a TLS ClientHello (always on 443; on other
//!    ports when the client opens with one) must name the CONNECT host in its SNI before a byte
//!    of it is forwarded; an HTTP/1.x request line makes the tunnel one HTTP request
//!    (`exchange.rs`), whose `Host` must name the target. Plain HTTP through the proxy
//!    (absolute-form) needs a `Host` equal to the target and no `Transfer-Encoding`, and is
//!    forwarded in origin-form with hop-by-hop headers removed and `Connection: close`.
//!
//! Choices: a CONNECT to an IP literal may carry no SNI (clients send none for addresses), but
//! an SNI naming anything but that same address is a mismatch. With ECH the outer SNI is what
//! is checked. `Transfer-Encoding` on absolute-form plain HTTP is refused (411): only
//! `Content-Length` bodies.
//!
//! The policy is read once per connection ([`Proxy::set_policy`] swaps it for the connections
//! that follow; those already admitted go on). With `secrets` (see `secrets.rs`), a tunnel to a
//! secret's host is screened as above, then terminated: TLS with a certificate from a CA of this
//! proxy alone, the request's placeholders placed where the secret allows (else refused), TLS
//! again to the real host, and the answer scrubbed of the values (`scrub.rs`).
//!
//! Every verdict on a destination is a [`Decision`], one per connection (and one more for a
//! request refused inside an allowed connection), logged with `tracing` and kept for
//! [`Proxy::take_decisions`]. Malformed requests (400 before the destination is known, 431, a
//! silent client) are only logged. Not covered (residual risks): data sent to an allowed host,
//! domain fronting inside TLS (a `Host` inside the encrypted request; no SNI check sees it) or
//! an ECH inner hello, and STARTTLS after plaintext on ports other than 443.
//!
//! Where each step is: `head.rs` reads a request head and gives the proxy's own short answers;
//! `policy.rs` and `addr.rs` judge a destination; `resolve.rs` resolves, vets and dials it;
//! `tunnel.rs` serves a `CONNECT` and relays or screens its bytes (`tls.rs` reads a ClientHello);
//! `exchange.rs` forwards one HTTP request (absolute-form, or read inside a tunnel), with
//! `secrets.rs` and `scrub.rs` when a secret's host is asked for. This file holds the `Proxy`,
//! its public surface and its [`Decision`]s.

mod addr;
mod cache;
mod exchange;
#[doc(hidden)]
pub mod fuzzing;
mod head;
mod policy;
mod resolve;
mod scrub;
mod secrets;
#[cfg(test)]
mod tests;
mod tls;
mod tunnel;
mod upstream;

pub use cache::{CacheError, PackageCache};
pub use policy::Policy;
pub use resolve::Resolver;
pub use secrets::{SecretSpec, Secrets, SecretsError, DEFAULT_HEADERS};

use head::{read_head, respond, Target};
use policy::canonical_host;
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::time::timeout;

/// A client must have sent its whole request head by then.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Per address dialled.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// From the first TLS byte (from the 200 on port 443) to a whole ClientHello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Decisions kept until drained; past this the oldest go (a box cannot grow host memory).
const MAX_DECISIONS: usize = 10_000;

/// One verdict on a destination a client asked for.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Decision {
    /// The canonical host (lowercase ASCII name, or IP address; IPv6 without brackets).
    pub host: String,
    /// The port asked for (80 when a plain-HTTP URL names none).
    pub port: u16,
    /// Whether the policy let it through. False for a denial (policy, address, SNI) and for a
    /// request refused for its shape (`Host` mismatch, `Transfer-Encoding`); true when allowed
    /// even if the name then did not resolve or the connect failed (said in `reason`).
    pub allowed: bool,
    /// Why: the entry that allowed it ("egressAllow `pypi.org`"), or what was refused.
    pub reason: String,
    /// Addresses the name resolved to; empty = never resolved (denied first, or an IP literal).
    pub resolved: Vec<IpAddr>,
    /// Allowed, but it did not work, and what to do about it (a TLS failure to a secret's host
    /// names the CA variable to set). The caller's runtime notes show it on a line of its own.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let addrs = || {
            self.resolved
                .iter()
                .map(IpAddr::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        };
        let verdict = if self.allowed { "allowed" } else { "denied" };
        if self.host.contains(':') {
            write!(f, "egress {verdict}: [{}]:{}", self.host, self.port)?;
        } else {
            write!(f, "egress {verdict}: {}:{}", self.host, self.port)?;
        }
        match (self.allowed, self.resolved.is_empty()) {
            (true, true) => write!(f, " ({})", self.reason),
            (true, false) => write!(f, " -> {} ({})", addrs(), self.reason),
            (false, true) => write!(f, " ({}; not resolved)", self.reason),
            (false, false) => write!(f, " ({}; resolved {})", self.reason, addrs()),
        }
    }
}

/// What the package cache did: files sent from it, and files fetched, checked and kept.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct CacheCounts {
    pub served: u64,
    pub kept: u64,
    /// Bytes sent from the cache (not fetched again).
    pub served_bytes: u64,
    /// Bytes fetched into it.
    pub kept_bytes: u64,
}

/// The filtering proxy for one box's policy. Share it (`Arc`) across that box's connections.
pub struct Proxy {
    /// Read once per connection: `set_policy` changes what every later connection sees, and
    /// leaves the connections already through the policy alone.
    policy: RwLock<Arc<Policy>>,
    /// `secrets`: substituted in requests to their hosts (tunnels to them are terminated, and
    /// to the package cache's hosts when there is a cache).
    secrets: Option<Arc<Secrets>>,
    /// The package cache, and what it did since the last `take_cache_counts`.
    cache: Option<Arc<PackageCache>>,
    cache_counts: Mutex<CacheCounts>,
    /// Idle TLS connections to the package cache's hosts (`upstream.rs`).
    pool: upstream::Pool,
    resolver: Resolver,
    decisions: Mutex<VecDeque<Decision>>,
    /// `HEAD_TIMEOUT` and `HELLO_TIMEOUT`; fields so tests need not wait 30 s.
    head_timeout: Duration,
    hello_timeout: Duration,
}

impl Proxy {
    /// A proxy enforcing `policy`, resolving allowed names with `resolver`.
    pub fn new(policy: Policy, resolver: Resolver) -> Arc<Proxy> {
        Self::with_secrets(policy, resolver, None)
    }

    /// As `new`, substituting `secrets` in requests to their hosts.
    pub fn with_secrets(
        policy: Policy,
        resolver: Resolver,
        secrets: Option<Arc<Secrets>>,
    ) -> Arc<Proxy> {
        Self::intercepting(policy, resolver, secrets, None)
    }

    /// As `with_secrets`, serving package files through `cache` (whose hosts `secrets` must
    /// terminate: `Secrets::with_package_cache`).
    pub fn intercepting(
        policy: Policy,
        resolver: Resolver,
        secrets: Option<Arc<Secrets>>,
        cache: Option<Arc<PackageCache>>,
    ) -> Arc<Proxy> {
        Arc::new(Proxy {
            policy: RwLock::new(Arc::new(policy)),
            secrets,
            cache,
            cache_counts: Mutex::default(),
            pool: upstream::Pool::default(),
            resolver,
            decisions: Mutex::default(),
            head_timeout: HEAD_TIMEOUT,
            hello_timeout: HELLO_TIMEOUT,
        })
    }

    /// The policy connections are checked against now.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Replaces the policy for every connection from now on; those already allowed go on.
    pub fn set_policy(&self, policy: Policy) {
        *self.policy.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(policy);
    }

    /// Serves one client connection to the end (one CONNECT tunnel, or one plain-HTTP request).
    pub async fn serve<S: AsyncRead + AsyncWrite + Unpin + Send>(self: Arc<Self>, client: S) {
        self.serve_inner(client).await;
    }

    /// A raw tunnel to `raw_host:port`, for a box's connection to a listed loopback address that
    /// never spoke to the proxy (its client skipped it for loopback): vetted and dialled as a
    /// CONNECT to that address would be, then relayed.
    pub async fn serve_direct<S: AsyncRead + AsyncWrite + Unpin + Send>(
        self: Arc<Self>,
        mut client: S,
        raw_host: &str,
        port: u16,
    ) {
        let Ok(host) = canonical_host(raw_host) else {
            return;
        };
        let Some((upstream, decision)) = self.open(&mut client, &host, port).await else {
            return;
        };
        let _ = upstream.set_nodelay(true);
        self.tunnel_or_terminate(client, upstream, Vec::new(), &host, port, decision)
            .await;
    }

    /// Drains the decisions made since the last call, in order.
    pub fn take_decisions(&self) -> Vec<Decision> {
        self.decisions
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
            .collect()
    }

    /// What the package cache did for this proxy's boxes since the last call.
    pub fn take_cache_counts(&self) -> CacheCounts {
        std::mem::take(&mut *self.cache_counts.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The package cache's directory, if this proxy has one.
    pub fn cache_dir(&self) -> Option<&std::path::Path> {
        self.cache.as_deref().map(PackageCache::dir)
    }

    fn count(&self, f: impl FnOnce(&mut CacheCounts)) {
        f(&mut self.cache_counts.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// How many names were looked up (hosts file or system) since creation, per name — so a test
    /// can prove a denied name never reached the resolver.
    pub fn lookups(&self) -> BTreeMap<String, u64> {
        self.resolver.lookups()
    }

    fn record(&self, d: Decision) {
        if d.allowed {
            tracing::info!(host = %d.host, port = d.port, reason = %d.reason, resolved = ?d.resolved, "egress allowed");
        } else {
            tracing::warn!(host = %d.host, port = d.port, reason = %d.reason, resolved = ?d.resolved, "egress denied");
        }
        let mut q = self.decisions.lock().unwrap_or_else(|p| p.into_inner());
        if q.len() >= MAX_DECISIONS {
            q.pop_front();
            tracing::warn!("egress decisions not drained; dropping the oldest");
        }
        q.push_back(d);
    }

    async fn serve_inner<S: AsyncRead + AsyncWrite + Unpin + Send>(&self, mut client: S) {
        let mut buf = Vec::new();
        let head = match timeout(self.head_timeout, read_head(&mut client, &mut buf)).await {
            Err(_) => {
                tracing::info!("egress proxy: no whole request head in time; closing");
                return;
            }
            Ok(Err((status, why))) => {
                tracing::warn!(%why, "egress proxy: refused request");
                respond(&mut client, status, &why).await;
                return;
            }
            Ok(Ok(None)) => return,
            Ok(Ok(Some(head))) => head,
        };
        // What followed the head already: the start of a body, or of the tunnel's bytes.
        let rest = buf.split_off(head.len.min(buf.len()));
        match head.target.clone() {
            Target::Connect { host, port } => self.connect(client, &host, port, rest).await,
            Target::Http { host, port, path } => {
                self.http(client, &head, &host, port, &path, rest).await
            }
        }
    }
}
