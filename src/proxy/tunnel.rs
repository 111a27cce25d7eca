//! Tunnels: a `CONNECT`'s bytes, or a box's connection to a listed loopback address.
//!
//! Who speaks first decides how a tunnel is read. A client that opens with a TLS ClientHello
//! must name the tunnel's host in its SNI (`tls.rs`) before a byte goes on. A client that opens
//! with an HTTP/1.x request line is read as HTTP (`exchange.rs`): its `Host` must name the
//! tunnel's host, and it gets one request per connection, so no request on that connection can
//! name another virtual host of the same server (Host-header fronting). Anything else (a
//! database's own protocol, a server that greets first) is relayed as it is. Inside TLS the
//! proxy sees nothing (except on a secret's host and the package cache's, whose TLS it
//! terminates): fronting there, by the `Host` inside the encrypted request, is a residual risk
//! no SNI check can stop.

use super::cache::{PackageCache, Served};
use super::exchange::read_origin_head;
use super::head::MAX_HEAD;
use super::head::{respond, Status};
use super::policy::canonical_host;
use super::policy::Host;
use super::resolve::Refusal;
use super::secrets::{self, Secrets};
use super::tls::{self, Hello, MAX_HELLO};
use super::upstream;
use super::{Decision, Proxy, CONNECT_TIMEOUT};
use std::io;
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

impl Proxy {
    pub(super) async fn connect<S: AsyncRead + AsyncWrite + Unpin + Send>(
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

    /// A tunnel to a secret's host is terminated (to substitute); any other is relayed.
    pub(super) async fn tunnel_or_terminate<C: AsyncRead + AsyncWrite + Unpin + Send>(
        &self,
        client: C,
        upstream: TcpStream,
        first: Vec<u8>,
        host: &Host,
        port: u16,
        decision: Decision,
    ) {
        match &self.secrets {
            Some(s) if s.applies(host, port) => {
                self.terminate(s, client, upstream, first, host, port, decision)
                    .await
            }
            _ => {
                self.tunnel(client, upstream, first, host, port, decision)
                    .await
            }
        }
    }

    /// A tunnel to a secret's host or the package cache's: its first bytes screened as any
    /// tunnel's (the SNI must name the host); TLS is then terminated with a certificate from the
    /// proxy's CA; plain HTTP (not on 443) is read as it is. The first request is read: a
    /// package file the cache keeps is sent from it, or fetched by the proxy itself (`cache.rs`);
    /// any other gets TLS again to the real host, verified, the secrets substituted and
    /// `Connection: close`.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn terminate<C: AsyncRead + AsyncWrite + Unpin + Send>(
        &self,
        secrets: &Secrets,
        client: C,
        upstream: TcpStream,
        first: Vec<u8>,
        host: &Host,
        port: u16,
        mut decision: Decision,
    ) {
        let (mut cr, cw) = tokio::io::split(client);
        let mut buf = first;
        if let Err(why) = screen(&mut cr, &mut buf, host, port == 443, self.hello_timeout).await {
            decision.allowed = false;
            decision.reason = why;
            self.record(decision);
            return;
        }
        let tls = buf.first() == Some(&0x16);
        let client = tokio::io::join(std::io::Cursor::new(buf).chain(cr), cw);
        if !tls {
            self.record(decision);
            self.origin(Some(secrets), client, upstream, host, port, 80)
                .await;
            return;
        }
        let accepted = match secrets.server_config(host) {
            Ok(cfg) => {
                timeout(
                    self.hello_timeout,
                    tokio_rustls::TlsAcceptor::from(cfg).accept(client),
                )
                .await
            }
            Err(why) => {
                decision.reason = format!("{}; {why}", decision.reason);
                self.record(decision);
                return;
            }
        };
        let client = match accepted {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                decision.reason = format!(
                    "{}; the client refused the secrets proxy's certificate ({e})",
                    decision.reason
                );
                decision.problem = Some(format!("the box's TLS client did not accept the certificate the proxy presents for {host}, a host whose TLS it terminates (a secret's, or the package cache's: packageCache: false turns that off) ({e}): have it trust the bundle in $SSL_CERT_FILE (also named by REQUESTS_CA_BUNDLE, NODE_EXTRA_CA_CERTS, CURL_CA_BUNDLE, PIP_CERT), which holds the Sandbox's proxy CA"));
                self.record(decision);
                return;
            }
            Err(_) => {
                decision.reason = format!("{}; no TLS handshake in time", decision.reason);
                self.record(decision);
                return;
            }
        };
        let (mut cr, mut cw) = tokio::io::split(client);
        let mut buf = Vec::new();
        let mut tcp = Some(upstream);
        let mut decision = Some(decision);
        // A package host's connection carries request after request while the client keeps it
        // (each head checked as the first: `read_origin_head`); any other request is the last.
        loop {
            let head = timeout(
                self.head_timeout,
                read_origin_head(&mut cr, &mut buf, host, port, 443),
            )
            .await;
            let (req, len) = match head {
                Ok(Ok(Some(h))) => h,
                Ok(Err(r)) => {
                    self.record_once(&mut decision);
                    if matches!(r.status, Status::BadRequest) {
                        self.refuse_in_tunnel(host, port, &r.why);
                    }
                    respond(&mut tokio::io::join(cr, cw), r.status, &r.why).await;
                    return;
                }
                _ => {
                    self.record_once(&mut decision);
                    return;
                }
            };
            let early = buf.split_off(len);
            let to = upstream::To::of(&req);
            let cache = self.cache.as_deref();
            let artifact = cache.and_then(|c| c.artifact(host, port, &req));
            if let (Some(cache), Some(a)) = (cache, &artifact) {
                // A hit needs no TLS to the real host at all.
                match cache.send_hit(a, &mut cw, to).await {
                    Ok(None) => {}
                    Ok(Some(bytes)) => {
                        if let Some(d) = decision.as_mut() {
                            d.reason = format!("{}; sent from the package cache", d.reason);
                        }
                        self.record_once(&mut decision);
                        self.count(|c| {
                            c.served += 1;
                            c.served_bytes += bytes;
                        });
                        if to.keep {
                            buf = early;
                            continue;
                        }
                        let _ = cw.shutdown().await;
                        return;
                    }
                    // The box went away while it was sent: nothing more to send it.
                    Err(_) => {
                        self.record_once(&mut decision);
                        return;
                    }
                }
            }
            // The cache's hosts get no secret unless one names them: their answers go as they
            // come.
            let mine = secrets.substitutes(host, port).then_some(secrets);
            let pooled = cache.is_some()
                && (artifact.is_some() || (mine.is_none() && upstream::poolable(&req)));
            let tcp_now = match tcp.take() {
                Some(t) => Some(t),
                // A later request: the proxy dials again, as the policy says now.
                None if !pooled || self.pool.is_empty(host) => {
                    match self.redial(host, port).await {
                        Ok(t) => Some(t),
                        Err(why) => {
                            respond(&mut tokio::io::join(cr, cw), Status::BadGateway, &why).await;
                            return;
                        }
                    }
                }
                None => None,
            };
            if !pooled {
                let Some(t) = tcp_now else { return };
                let upstream = match self.tls_to(secrets, t, host, port).await {
                    Ok(u) => u,
                    Err((why, problem)) => {
                        if let Some(d) = decision.as_mut() {
                            d.reason = format!("{}; {why}", d.reason);
                            d.problem = problem;
                        }
                        self.record_once(&mut decision);
                        respond(&mut tokio::io::join(cr, cw), Status::BadGateway, &why).await;
                        return;
                    }
                };
                self.record_once(&mut decision);
                self.exchange(
                    mine,
                    tokio::io::join(cr, cw),
                    upstream,
                    req,
                    early,
                    host,
                    port,
                )
                .await;
                return;
            }
            let ask = match &artifact {
                Some(a) => PackageCache::request(host, a),
                None => upstream::pooled_request(&req),
            };
            let got = self
                .ask_pooled(secrets, tcp_now, host, port, &ask, req.method == "HEAD")
                .await;
            let got = match got {
                Ok(g) => {
                    self.record_once(&mut decision);
                    Ok(g)
                }
                Err(Asked::NoTls(why, problem)) => {
                    if let Some(d) = decision.as_mut() {
                        d.reason = format!("{}; {why}", d.reason);
                        d.problem = problem;
                    }
                    self.record_once(&mut decision);
                    Err(why)
                }
                Err(Asked::Failed(why)) => {
                    self.record_once(&mut decision);
                    Err(format!("asking https://{host}{}: {why}", req.target))
                }
            };
            let (mut conn, answer) = match got {
                Ok(g) => g,
                Err(why) => {
                    respond(&mut tokio::io::join(cr, cw), Status::BadGateway, &why).await;
                    return;
                }
            };
            let relayed = match (cache, &artifact) {
                (Some(cache), Some(a)) => {
                    match cache.take(host, a, &mut conn, &answer, &mut cw, to).await {
                        Ok((served, relayed)) => {
                            if let Served::Kept(bytes) = served {
                                self.count(|c| {
                                    c.kept += 1;
                                    c.kept_bytes += bytes;
                                });
                            }
                            relayed
                        }
                        Err(why) => {
                            self.refuse_in_tunnel(host, port, &why);
                            respond(&mut tokio::io::join(cr, cw), Status::BadGateway, &why).await;
                            return;
                        }
                    }
                }
                _ => match upstream::relay_answer(&mut conn, &answer, &mut cw, to).await {
                    Ok(r) => r,
                    Err(_) => return,
                },
            };
            if relayed.upstream {
                self.pool.put(host, conn);
            }
            if !relayed.client {
                let _ = cw.shutdown().await;
                return;
            }
            buf = early;
        }
    }

    /// Records a connection's decision the first time it is asked to.
    fn record_once(&self, decision: &mut Option<Decision>) {
        if let Some(d) = decision.take() {
            self.record(d);
        }
    }

    /// A new connection to `host:port` for a later request of a terminated connection: vetted
    /// against the policy as it is now, and dialled.
    async fn redial(&self, host: &Host, port: u16) -> Result<TcpStream, String> {
        let vetted = self.vet(host, port).await.map_err(|r| match r {
            Refusal::Denied { reason, .. } => format!("refused by the egress policy now: {reason}"),
            Refusal::Failed { reason } => reason,
        })?;
        super::resolve::dial(&vetted.dial, port).await
    }

    /// Sends `ask` to `host` on a kept-alive connection (`upstream.rs`), or on a new one over
    /// `tcp` (dialled again if the idle one turns out closed), and reads the answer's head.
    async fn ask_pooled(
        &self,
        secrets: &Secrets,
        tcp: Option<TcpStream>,
        host: &Host,
        port: u16,
        ask: &[u8],
        is_head: bool,
    ) -> Result<(upstream::Conn, upstream::Answer), Asked> {
        if let Some(mut conn) = self.pool.take(host) {
            if let Ok(answer) = upstream::ask(&mut conn, ask, is_head).await {
                return Ok((conn, answer));
            }
            // An idle connection the server had closed meanwhile: once more, anew.
        }
        let tcp = match tcp {
            Some(t) => t,
            None => self.redial(host, port).await.map_err(Asked::Failed)?,
        };
        let tls = self.tls_to(secrets, tcp, host, port).await;
        let mut conn = upstream::fresh(tls.map_err(|(why, problem)| Asked::NoTls(why, problem))?);
        match upstream::ask(&mut conn, ask, is_head).await {
            Ok(answer) => Ok((conn, answer)),
            Err(e) => Err(Asked::Failed(e.to_string())),
        }
    }

    /// TLS from the proxy to the real `host`, verified against the system's CAs (and
    /// `KERN_REGISTRY_CA`'s); `Err`: why not, and what to do about it.
    async fn tls_to(
        &self,
        secrets: &Secrets,
        upstream: TcpStream,
        host: &Host,
        port: u16,
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, (String, Option<String>)> {
        let name = secrets::server_name(host).map_err(|why| (why, None))?;
        match timeout(CONNECT_TIMEOUT, secrets.connector().connect(name, upstream)).await {
            Ok(Ok(u)) => Ok(u),
            Ok(Err(e)) => {
                let why = format!("TLS to {host}:{port} failed: {e}");
                let problem = format!("{why}. The proxy verifies the hosts whose TLS it terminates (a secret's, the package cache's) against the system's CA store and the certificates in {}: if {host} has a certificate from a private CA, set {} to a PEM file holding that CA in the environment of the process that opens the Sandbox, before open()", crate::image::net::CA_VAR, crate::image::net::CA_VAR);
                Err((why, Some(problem)))
            }
            Err(_) => Err((format!("TLS to {host}:{port} timed out"), None)),
        }
    }

    /// Reads one origin-form request from `client` (naming `host:port`; `default_port` when its
    /// `Host` gives none) and exchanges it with `upstream`, with `secrets` placed and scrubbed.
    pub(super) async fn origin<C, U>(
        &self,
        secrets: Option<&Secrets>,
        client: C,
        upstream: U,
        host: &Host,
        port: u16,
        default_port: u16,
    ) where
        C: AsyncRead + AsyncWrite + Unpin + Send,
        U: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let (mut cr, cw) = tokio::io::split(client);
        let mut buf = Vec::new();
        let head = timeout(
            self.head_timeout,
            read_origin_head(&mut cr, &mut buf, host, port, default_port),
        )
        .await;
        let (req, len) = match head {
            Ok(Ok(Some(h))) => h,
            Ok(Err(r)) => {
                if matches!(r.status, Status::BadRequest) {
                    self.refuse_in_tunnel(host, port, &r.why);
                }
                respond(&mut tokio::io::join(cr, cw), r.status, &r.why).await;
                return;
            }
            _ => return,
        };
        let early = buf.split_off(len);
        self.exchange(
            secrets,
            tokio::io::join(cr, cw),
            upstream,
            req,
            early,
            host,
            port,
        )
        .await;
    }

    /// Relays a tunnel to a host without secrets. The first bytes decide (see above): TLS is
    /// screened for its SNI (on 443 nothing else is allowed), an HTTP request is read as one,
    /// anything else is relayed, the server's side flowing meanwhile.
    pub(super) async fn tunnel<C, U>(
        &self,
        client: C,
        upstream: U,
        first: Vec<u8>,
        host: &Host,
        port: u16,
        mut decision: Decision,
    ) where
        C: AsyncRead + AsyncWrite + Unpin + Send,
        U: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let (mut cr, cw) = tokio::io::split(client);
        let (mut ur, uw) = tokio::io::split(upstream);
        let mut buf = first;
        let mut greeting = Vec::new();
        if port != 443 && buf.is_empty() {
            // HTTP and TLS clients speak first; a server that greets first is speaking
            // something else, which is relayed.
            let mut chunk = vec![0u8; 4096];
            tokio::select! {
                r = read_some(&mut cr, &mut buf) => if !matches!(r, Ok(n) if n > 0) {
                    decision.reason = format!("{}; the tunnel ended before the client sent anything", decision.reason);
                    self.record(decision);
                    return;
                },
                r = ur.read(&mut chunk) => match r {
                    Ok(n) if n > 0 => greeting.extend_from_slice(&chunk[..n]),
                    _ => {
                        decision.reason = format!("{}; the server closed the tunnel first", decision.reason);
                        self.record(decision);
                        return;
                    }
                },
            }
        }
        if greeting.is_empty() && port != 443 {
            match timeout(self.head_timeout, http_or_not(&mut cr, &mut buf)).await {
                Ok(Ok(false)) => {}
                Ok(Ok(true)) => {
                    self.record(decision);
                    let client = tokio::io::join(std::io::Cursor::new(buf).chain(cr), cw);
                    self.origin(None, client, tokio::io::join(ur, uw), host, port, 80)
                        .await;
                    return;
                }
                Ok(Err(why)) => {
                    decision.allowed = false;
                    decision.reason = why;
                    self.record(decision);
                    return;
                }
                Err(_) => {
                    decision.allowed = false;
                    decision.reason = format!("the tunnel's first line (which looks like an HTTP request) did not end within {:?}", self.head_timeout);
                    self.record(decision);
                    return;
                }
            }
        }
        self.relay_screened(cr, cw, ur, uw, buf, greeting, host, port, decision)
            .await;
    }

    /// Relays a tunnel, screening the client's first bytes: a TLS ClientHello must name
    /// the CONNECT host before any of it is forwarded (on 443 one is required). The server side
    /// flows meanwhile, so protocols where the server speaks first still work on other ports.
    /// The decision is recorded once the screening has a verdict.
    #[allow(clippy::too_many_arguments)]
    async fn relay_screened<CR, CW, UR, UW>(
        &self,
        mut cr: CR,
        mut cw: CW,
        mut ur: UR,
        mut uw: UW,
        first: Vec<u8>,
        greeting: Vec<u8>,
        host: &Host,
        port: u16,
        decision: Decision,
    ) where
        CR: AsyncRead + Unpin + Send,
        CW: AsyncWrite + Unpin + Send,
        UR: AsyncRead + Unpin + Send,
        UW: AsyncWrite + Unpin + Send,
    {
        let mut pending = Some(decision);
        let up = async {
            let mut buf = first;
            let verdict = screen(&mut cr, &mut buf, host, port == 443, self.hello_timeout).await;
            if let Some(mut d) = pending.take() {
                if let Err(why) = &verdict {
                    d.allowed = false;
                    d.reason.clone_from(why);
                }
                self.record(d);
            }
            if verdict.is_err() {
                // Dropping both halves closes both sides; the 200 is already out.
                return Err(io::Error::other("refused after screening"));
            }
            uw.write_all(&buf).await?;
            relay(&mut cr, &mut uw).await?;
            uw.shutdown().await
        };
        let down = async {
            cw.write_all(&greeting).await?;
            relay(&mut ur, &mut cw).await?;
            cw.shutdown().await
        };
        let _ = tokio::try_join!(up, down);
        if let Some(mut d) = pending {
            d.reason = format!(
                "{}; the tunnel ended before the client sent anything",
                d.reason
            );
            self.record(d);
        }
    }
}

/// Whether the client's first bytes are an HTTP/1.x request line (after the empty lines a
/// server skips): a token, a space, and a line whose last word starts `HTTP/` (any case).
/// Reads on while that is undecided; a line that never ends is refused, not relayed, so no
/// request head can start past the point of judging.
/// Why `ask_pooled` got no answer: no TLS to the host (why, and what to do), or a failed ask.
enum Asked {
    NoTls(String, Option<String>),
    Failed(String),
}

async fn http_or_not<R: AsyncRead + Unpin>(cr: &mut R, buf: &mut Vec<u8>) -> Result<bool, String> {
    loop {
        let start = buf
            .iter()
            .position(|b| !matches!(b, b'\r' | b'\n'))
            .unwrap_or(buf.len());
        let rest = &buf[start..];
        let token = rest
            .iter()
            .take_while(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(b))
            .count();
        match rest.get(token) {
            None => {}
            Some(b' ' | b'\t') if token > 0 => {
                if let Some(end) = rest.iter().position(|&b| b == b'\n') {
                    let line = String::from_utf8_lossy(&rest[..end]);
                    let last = line.split_ascii_whitespace().last().unwrap_or_default();
                    // Bytes, not a str slice: the line may hold multi-byte characters (a box's
                    // `\xff` became U+FFFD) and a char boundary need not fall at 5.
                    return Ok(last
                        .as_bytes()
                        .get(..5)
                        .is_some_and(|p| p.eq_ignore_ascii_case(b"http/")));
                }
            }
            Some(_) => return Ok(false),
        }
        if buf.len() >= MAX_HEAD {
            return Err(
                "the tunnel's first line looks like an HTTP request and is longer than 16 KiB"
                    .into(),
            );
        }
        let mut chunk = [0u8; 4096];
        let room = (MAX_HEAD - buf.len()).min(chunk.len());
        match cr.read(&mut chunk[..room]).await {
            Ok(0) | Err(_) => return Ok(false),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// What the first bytes of a tunnel turned out to be.
enum Screened {
    /// The client closed without sending anything.
    Quiet,
    /// Not TLS (allowed on ports other than 443).
    Plain,
    /// A whole ClientHello, with its SNI.
    Tls(Option<String>),
}

/// Reads the client's first bytes into `buf` until they can be judged, and judges them.
pub(super) async fn screen<R: AsyncRead + Unpin>(
    cr: &mut R,
    buf: &mut Vec<u8>,
    host: &Host,
    require_tls: bool,
    hello_timeout: Duration,
) -> Result<(), String> {
    if !require_tls {
        // No deadline here: in server-first protocols the client waits for the greeting.
        if buf.is_empty() && read_some(cr, buf).await? == 0 {
            return Ok(());
        }
        if buf.first() != Some(&0x16) {
            return Ok(());
        }
    }
    let screened = timeout(hello_timeout, read_hello(cr, buf, require_tls))
        .await
        .map_err(|_| format!("no complete TLS ClientHello within {hello_timeout:?}"))??;
    match screened {
        Screened::Quiet | Screened::Plain => Ok(()),
        Screened::Tls(sni) => tls::check_sni(host, sni.as_deref()),
    }
}

async fn read_hello<R: AsyncRead + Unpin>(
    cr: &mut R,
    buf: &mut Vec<u8>,
    require_tls: bool,
) -> Result<Screened, String> {
    loop {
        match tls::parse_client_hello(buf) {
            Hello::Parsed { sni } => return Ok(Screened::Tls(sni)),
            Hello::NotTls if require_tls => {
                return Err("port 443 carries only TLS, and this is not a TLS handshake".into())
            }
            Hello::NotTls => return Ok(Screened::Plain),
            Hello::Invalid(why) => return Err(format!("malformed TLS ClientHello: {why}")),
            Hello::NeedMore if buf.len() >= MAX_HELLO => {
                return Err("TLS ClientHello larger than 16 KiB".into())
            }
            Hello::NeedMore => {}
        }
        if read_some(cr, buf).await? == 0 {
            return if buf.is_empty() {
                Ok(Screened::Quiet)
            } else {
                Err("the client closed the tunnel inside its TLS ClientHello".into())
            };
        }
    }
}

/// One read appended to `buf`, never past `MAX_HELLO` in total.
async fn read_some<R: AsyncRead + Unpin>(cr: &mut R, buf: &mut Vec<u8>) -> Result<usize, String> {
    let mut chunk = [0u8; 4096];
    let room = MAX_HELLO.saturating_sub(buf.len()).clamp(1, chunk.len());
    let n = cr
        .read(&mut chunk[..room])
        .await
        .map_err(|e| format!("reading the tunnel's first bytes failed: {e}"))?;
    buf.extend_from_slice(&chunk[..n]);
    Ok(n)
}

/// The buffer of each direction of a tunnel: `tokio::io::copy`'s 8 KiB costs a wake-up and two
/// syscalls per 8 KiB; 256 KiB took a CONNECT tunnel from 769 to 995 MiB/s here (BENCHMARKS.md).
const RELAY_BUF: usize = 256 * 1024;

/// Copies `from` to `to` until EOF, through a `RELAY_BUF` buffer.
pub(super) async fn relay<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    from: &mut R,
    to: &mut W,
) -> io::Result<u64> {
    let mut from = tokio::io::BufReader::with_capacity(RELAY_BUF, from);
    tokio::io::copy_buf(&mut from, to).await
}

#[cfg(test)]
mod tests {
    use super::http_or_not;

    #[tokio::test]
    async fn a_first_line_with_multibyte_characters_is_judged_not_panicked_on() {
        // `\xff` becomes U+FFFD (3 bytes) in the lossy line, so byte 5 falls inside it.
        for line in [
            &b"GET / abcd\xff\n"[..],
            b"GET / \xc3\xa9\xc3\xa9\xc3\xa9\n",
            b"GET / HTTP/1.1\n",
        ] {
            let mut buf = Vec::new();
            let got = http_or_not(&mut &line[..], &mut buf).await;
            assert_eq!(got, Ok(line.ends_with(b"HTTP/1.1\n")), "{line:?}");
        }
    }
}
