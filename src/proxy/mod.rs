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

mod addr;
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

pub use policy::Policy;
pub use resolve::Resolver;
pub use secrets::{SecretSpec, Secrets, SecretsError, DEFAULT_HEADERS};

use head::{parse_head, Head, HeadError, Target, MAX_HEAD};
use policy::{canonical_host, split_authority, Host};
use std::collections::{BTreeMap, VecDeque};
use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// A client must have sent its whole request head by then.
const HEAD_TIMEOUT: Duration = Duration::from_secs(30);
/// Per address dialled.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// From the first TLS byte (from the 200 on port 443) to a whole ClientHello.
const HELLO_TIMEOUT: Duration = Duration::from_secs(10);
/// Decisions kept until drained; past this the oldest go (a box cannot grow host memory).
const MAX_DECISIONS: usize = 10_000;
/// After answering, the client's leftover bytes are read and dropped for at most this long…
const DRAIN_TIME: Duration = Duration::from_secs(1);
/// …and at most this many.
const DRAIN_MAX: usize = 1024 * 1024;
/// How much of a client-supplied value a reason quotes.
const QUOTE_MAX: usize = 80;

/// The buffer of each direction of a tunnel: `tokio::io::copy`'s 8 KiB costs a wake-up and two
/// syscalls per 8 KiB; 256 KiB took a CONNECT tunnel from 769 to 995 MiB/s here (BENCHMARKS.md).
const RELAY_BUF: usize = 256 * 1024;

/// Copies `from` to `to` until EOF, through a `RELAY_BUF` buffer.
async fn relay<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    from: &mut R,
    to: &mut W,
) -> io::Result<u64> {
    let mut from = tokio::io::BufReader::with_capacity(RELAY_BUF, from);
    tokio::io::copy_buf(&mut from, to).await
}

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

/// The answers the proxy gives itself, before or instead of the destination's.
#[derive(Debug, Clone, Copy)]
enum Status {
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

/// Why a destination was not dialled.
enum Refusal {
    /// The policy says no: 403, `allowed: false`.
    Denied {
        reason: String,
        resolved: Vec<IpAddr>,
    },
    /// The policy said yes but the name did not resolve: 502, `allowed: true`.
    Failed { reason: String },
}

/// A destination that passed the policy, with the addresses to dial.
struct Vetted {
    /// The entry that allowed it, as written.
    entry: String,
    /// What the name resolved to (empty for an IP literal).
    resolved: Vec<IpAddr>,
    /// Vetted addresses, in resolver order.
    dial: Vec<IpAddr>,
}

/// The filtering proxy for one box's policy. Share it (`Arc`) across that box's connections.
pub struct Proxy {
    /// Read once per connection: `set_policy` changes what every later connection sees, and
    /// leaves the connections already through the policy alone.
    policy: RwLock<Arc<Policy>>,
    /// `secrets`: substituted in requests to their hosts (tunnels to them are terminated).
    secrets: Option<Arc<Secrets>>,
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
        Arc::new(Proxy {
            policy: RwLock::new(Arc::new(policy)),
            secrets,
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

    /// Policy, then resolution and address checks. Never resolves a name the policy refused.
    async fn vet(&self, host: &Host, port: u16) -> Result<Vetted, Refusal> {
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
    async fn refuse_request<S: AsyncRead + AsyncWrite + Unpin>(
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
    async fn open<S: AsyncRead + AsyncWrite + Unpin>(
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

    async fn connect<S: AsyncRead + AsyncWrite + Unpin + Send>(
        &self,
        mut client: S,
        raw_host: &str,
        port: u16,
        first: Vec<u8>,
    ) {
        let host = match canonical_host(raw_host) {
            Ok(h) => h,
            Err(why) => {
                tracing::warn!(%why, "egress proxy: bad CONNECT host");
                respond(&mut client, Status::BadRequest, &why).await;
                return;
            }
        };
        let Some((upstream, decision)) = self.open(&mut client, &host, port).await else {
            return;
        };
        let _ = upstream.set_nodelay(true);
        if let Err(e) = client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await
        {
            let mut decision = decision;
            decision.reason = format!("{}; the client went away ({e})", decision.reason);
            self.record(decision);
            return;
        }
        self.tunnel_or_terminate(client, upstream, first, &host, port, decision)
            .await;
    }

    async fn http<S: AsyncRead + AsyncWrite + Unpin + Send>(
        &self,
        mut client: S,
        head: &Head,
        raw_host: &str,
        port: u16,
        path: &str,
        rest: Vec<u8>,
    ) {
        let host = match canonical_host(raw_host) {
            Ok(h) => h,
            Err(why) => {
                tracing::warn!(%why, "egress proxy: bad request host");
                respond(&mut client, Status::BadRequest, &why).await;
                return;
            }
        };
        let shape = check_host_header(head, &host, port)
            .map_err(|why| (Status::BadRequest, why))
            .and_then(|()| content_length(head));
        let length = match shape {
            Ok(n) => n,
            Err((status, why)) => {
                self.refuse_request(&mut client, &host, port, status, why)
                    .await;
                return;
            }
        };
        let Some((upstream, decision)) = self.open(&mut client, &host, port).await else {
            return;
        };
        self.record(decision);
        if let Some(s) = self.secrets.as_ref().filter(|s| s.applies(&host, port)) {
            let req = exchange::Request {
                method: head.method.clone(),
                target: path.to_owned(),
                minor: head.minor,
                headers: head.headers.clone(),
            };
            self.exchange(Some(s), client, upstream, req, rest, &host, port)
                .await;
            return;
        }
        let forwarded = forward_head(head, path);
        let (mut cr, mut cw) = tokio::io::split(client);
        let (mut ur, mut uw) = upstream.into_split();
        let up = async {
            uw.write_all(&forwarded).await?;
            // Exactly Content-Length body bytes; whatever the client sends after is dropped.
            let early = usize::try_from(length)
                .unwrap_or(usize::MAX)
                .min(rest.len());
            uw.write_all(&rest[..early]).await?;
            let remaining = length - early as u64;
            let sent = tokio::io::copy(&mut (&mut cr).take(remaining), &mut uw).await?;
            if sent < remaining {
                return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
            }
            uw.flush().await
        };
        let down = async {
            relay(&mut ur, &mut cw).await?;
            cw.shutdown().await
        };
        let finished = {
            tokio::pin!(up, down);
            let mut body_done = false;
            // Done when the response has been relayed; a failed body ends it early. A client
            // that stalls mid-body does not hold a finished response open.
            loop {
                tokio::select! {
                    r = &mut up, if !body_done => match r {
                        Ok(()) => body_done = true,
                        Err(_) => break false,
                    },
                    r = &mut down => break r.is_ok(),
                }
            }
        };
        if finished {
            // Whatever followed the request is dropped, but read, so the close is not a reset.
            drain(&mut cr).await;
        }
    }
}

/// Reads until a whole request head is buffered. `Ok(None)` when the client left first;
/// `Err` is an answer to send.
async fn read_head<S: AsyncRead + Unpin>(
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
async fn respond<S: AsyncRead + AsyncWrite + Unpin>(client: &mut S, status: Status, reason: &str) {
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
async fn drain<S: AsyncRead + Unpin>(client: &mut S) {
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

/// Tries the vetted addresses in order; the first that connects wins.
async fn dial(addrs: &[IpAddr], port: u16) -> Result<TcpStream, String> {
    let mut errors = Vec::new();
    for &ip in addrs {
        match timeout(
            CONNECT_TIMEOUT,
            TcpStream::connect(SocketAddr::new(ip, port)),
        )
        .await
        {
            Ok(Ok(stream)) => return Ok(stream),
            Ok(Err(e)) => errors.push(format!("{ip}: {e}")),
            Err(_) => errors.push(format!("{ip}: timed out")),
        }
    }
    Err(format!(
        "could not connect to port {port} ({})",
        errors.join("; ")
    ))
}

/// A client-supplied value quoted safely and briefly for a reason.
fn quote(bytes: &[u8]) -> String {
    let text = String::from_utf8_lossy(bytes);
    let cut: String = text.chars().take(QUOTE_MAX).collect();
    format!("{cut:?}")
}

/// The one `Host` header must name the request target (same canonical host, same port with 80
/// as default): a different `Host` would let an allowed address serve another site.
fn check_host_header(head: &Head, host: &Host, port: u16) -> Result<(), String> {
    let values: Vec<&[u8]> = head.values("host").collect();
    host_names_target(&values, host, port, 80)
}

/// The `Host` values of a request name `host:port` (one value; `default_port` when it names
/// no port).
fn host_names_target(
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
fn content_length(head: &Head) -> Result<u64, (Status, String)> {
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
const HOP_BY_HOP: [&str; 9] = [
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
fn forward_head(head: &Head, path: &str) -> Vec<u8> {
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
