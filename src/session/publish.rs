//! Published ports (`publish()`): a URL on the host that carries an unguessable token and leads
//! into a box's loopback port, for a browser, `fetch()` or an agent harness. Nothing of the host
//! opens to the box: connections go host -> box only, each dialled by the box's own connector
//! (`engine::boxside::connector`, as `connect()` does), and the box's network is unchanged.
//!
//! HTTP and WebSocket, one request head at a time: a connection's first request must carry the
//! token (`?kern_token=`, the `X-Kern-Token` header, or the cookie the first answer set), and every
//! request on it is stripped of it before the box sees it, so the server in the box reads the
//! URLs its client sent and never the token. A request body is passed on by its own framing
//! (`Content-Length` or chunked); after an upgrade (a WebSocket) the bytes go both ways as they
//! are. Written by hand over `httparse` (which the egress proxy already uses): a full HTTP
//! library would reframe what the box answers, and the token is all this needs to read.

use super::opened::Opened;
use crate::engine::boxside::connector;
use crate::error::{Error, Result};
use std::net::{IpAddr, SocketAddr};
use std::os::fd::OwnedFd;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// The query parameter, header and cookie prefix that carry the token.
const TOKEN_PARAM: &str = "kern_token";
const TOKEN_HEADER: &str = "x-kern-token";
/// A request or response head larger than this is refused (a response's is passed on as is).
const MAX_HEAD: usize = 64 * 1024;
/// How long a connection may take to send its first request head.
const HEAD_WAIT: Duration = Duration::from_secs(30);
/// The most connections one published port carries at once; more are refused.
const MAX_CONNECTIONS: usize = 256;

/// `publish()`'s options, as the JS layer sends them.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PublishRequest {
    pub port: Option<serde_json::Value>,
    pub protocol: Option<String>,
    pub host: Option<String>,
}

/// The connector's line into a box, with whether the box's process has ended.
#[derive(Clone)]
pub struct Dialer {
    pub(super) line: Arc<Mutex<Option<connector::Line>>>,
    pub(super) ended: watch::Receiver<bool>,
}

impl Dialer {
    /// `line`, until `ended` turns true (`kern run -p`: its box's).
    pub fn new(line: connector::Line, ended: watch::Receiver<bool>) -> Dialer {
        Dialer {
            line: Arc::new(Mutex::new(Some(line))),
            ended,
        }
    }

    pub(super) fn live(&self) -> bool {
        !*self.ended.borrow()
    }

    /// A connection to the box's `127.0.0.1:port` (blocking the line: off the async threads).
    pub(super) async fn dial(&self, port: u16) -> Result<OwnedFd> {
        if !self.live() {
            return Err(Error::Invalid(connector::DialError::Gone.to_string()));
        }
        let line = self.line.clone();
        tokio::task::spawn_blocking(move || {
            let mut line = line
                .lock()
                .map_err(|_| Error::Runtime("connect lock poisoned".into()))?;
            // Let go of once the process ended.
            let Some(line) = line.as_mut() else {
                return Err(Error::Invalid(format!(
                    "connect(): {}",
                    connector::DialError::Gone
                )));
            };
            line.dial(port).map_err(|e| match e {
                connector::DialError::Io(e) => Error::Runtime(format!("connect(): {e}")),
                // Said whole by connect(), which may try it again.
                e @ connector::DialError::Refused { .. } => Error::ConnectionRefused(e.to_string()),
                e => Error::Invalid(format!("connect(): {e}")),
            })
        })
        .await
        .map_err(|e| Error::Runtime(format!("connect(): {e}")))?
    }
}

/// Where a published port's connections go.
pub(super) enum Target {
    /// One process's box; the port closes when the process ends.
    Process(Dialer),
    /// The newest of the Sandbox's running processes that accepts on the port, chosen for each
    /// connection (a server restarted in a new process is reached at the same URL).
    Sandbox(Arc<Opened>),
}

impl Target {
    async fn dial(&self, port: u16) -> std::result::Result<OwnedFd, String> {
        match self {
            Target::Process(d) => d.dial(port).await.map_err(|e| e.to_string()),
            Target::Sandbox(opened) => {
                let dialers = opened.dialers();
                if dialers.is_empty() {
                    return Err(format!(
                        "the Sandbox has no running process; spawn() the server that listens on {port}"
                    ));
                }
                for d in dialers.iter().rev() {
                    if let Ok(fd) = d.dial(port).await {
                        return Ok(fd);
                    }
                }
                Err(format!(
                    "none of the Sandbox's {} running processes accepts on 127.0.0.1:{port} in its box",
                    dialers.len()
                ))
            }
        }
    }
}

/// A published port: its URL (with the token) until `close()`.
pub struct Published {
    pub url: String,
    pub token: String,
    /// The host's address it listens on.
    pub address: SocketAddr,
    /// Shared with the listener, so that the port stays until `close()` even if this handle
    /// is let go.
    stop: Arc<watch::Sender<bool>>,
    /// The listener's task, until a `close()` has waited for it.
    served: tokio::sync::Mutex<Option<tokio::task::JoinHandle<()>>>,
}

impl Published {
    /// Revokes it; returns once the listener is closed and every connection through it ended.
    pub async fn close(&self) {
        self.stop.send_replace(true);
        if let Some(task) = self.served.lock().await.take() {
            let _ = task.await;
        }
    }
}

/// `publish` for one box's port (`kern run -p`): until `close()`, `closing` or the box's end.
pub async fn publish_box(
    dialer: Dialer,
    closing: watch::Receiver<bool>,
    req: &PublishRequest,
    what: &str,
) -> Result<Published> {
    publish(Target::Process(dialer), closing, req, what).await
}

/// Checks `req` and starts listening; `what` names the call in errors. The port closes at
/// `close()`, at `closing` (the Sandbox's close()) and, for a process's, at the process's end.
pub(super) async fn publish(
    target: Target,
    closing: watch::Receiver<bool>,
    req: &PublishRequest,
    what: &str,
) -> Result<Published> {
    let port = match req.port.as_ref().and_then(serde_json::Value::as_u64) {
        Some(p) if (1..=65535).contains(&p) => p as u16,
        _ => {
            return crate::invalid!(
                "{what}: the port must be a whole number from 1 to 65535, got {}",
                req.port
                    .as_ref()
                    .map_or("nothing".into(), crate::config::describe)
            )
        }
    };
    match req.protocol.as_deref() {
        None | Some("http") => {}
        Some(p) => {
            return crate::invalid!(
                "{what}: protocol {p:?} is not offered; \"http\" (the default) carries HTTP and WebSocket with a token. For a raw TCP connection from this program, use a process's connect({port})"
            )
        }
    }
    let host: IpAddr = match req.host.as_deref() {
        None => IpAddr::from([127, 0, 0, 1]),
        Some(h) => h.parse().map_err(|_| {
            Error::Invalid(format!(
                "{what}: host must be an IP address of this host to listen on, such as \"127.0.0.1\" (the default) or \"0.0.0.0\" for every interface, got {h:?}"
            ))
        })?,
    };
    if let Target::Process(d) = &target {
        if !d.live() {
            return Err(Error::Invalid(format!(
                "{what}: the process has ended; publish a port of a running one"
            )));
        }
    }
    let listener = TcpListener::bind((host, 0))
        .await
        .map_err(|e| Error::Runtime(format!("{what}: listen on {host}: {e}")))?;
    let address = listener
        .local_addr()
        .map_err(|e| Error::Runtime(format!("{what}: {e}")))?;
    let token = format!(
        "{}{}",
        uuid::Uuid::new_v4().simple(),
        uuid::Uuid::new_v4().simple()
    );
    let shown = match host {
        IpAddr::V6(_) => format!("[{host}]"),
        IpAddr::V4(_) => host.to_string(),
    };
    let url = format!("http://{shown}:{}/?{TOKEN_PARAM}={token}", address.port());
    let stop = Arc::new(watch::channel(false).0);
    let door = Arc::new(Door {
        target,
        port,
        cookie: format!("{TOKEN_PARAM}_{}", address.port()),
        token: token.clone(),
    });
    let served = tokio::spawn(serve(listener, door, stop.clone(), closing));
    Ok(Published {
        url,
        token,
        address,
        stop,
        served: tokio::sync::Mutex::new(Some(served)),
    })
}

/// What every connection of one published port checks and dials.
struct Door {
    target: Target,
    port: u16,
    /// The cookie that carries the token (named by the host port: cookies ignore ports).
    cookie: String,
    token: String,
}

/// Accepts until the port is closed, its process ends or its Sandbox closes; then every
/// connection ends too.
async fn serve(
    listener: TcpListener,
    door: Arc<Door>,
    stop: Arc<watch::Sender<bool>>,
    mut closing: watch::Receiver<bool>,
) {
    let mut stopped = stop.subscribe();
    // A Sandbox's port holds its session as a call does: close() returns once it is gone. (A
    // process's port ends with the process, which holds the session itself.)
    let _running = match &door.target {
        Target::Sandbox(opened) => Some(opened.running.read().await),
        Target::Process(_) => None,
    };
    let mut ended = match &door.target {
        Target::Process(d) => Some(d.ended.clone()),
        Target::Sandbox(_) => None,
    };
    let mut connections = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            // (Each wait as a unit: a watch's guard may not be held across the awaits below.)
            () = async { let _ = stopped.wait_for(|s| *s).await; } => break,
            // Also when the session is gone (its sender dropped).
            () = async { let _ = closing.wait_for(|c| *c).await; } => break,
            _ = async {
                if let Some(e) = ended.as_mut() {
                    let _ = e.wait_for(|e| *e).await;
                }
            }, if ended.is_some() => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let Ok((client, _)) = accepted else { continue };
                if connections.len() >= MAX_CONNECTIONS {
                    let mut client = client;
                    let _ = write_refusal(&mut client, "503 Service Unavailable", "too many connections through this published port at once").await;
                    continue;
                }
                let _ = client.set_nodelay(true);
                connections.spawn(carry(client, door.clone()));
            }
        }
    }
    // Revoked: the listener first (a connection that comes now is refused, not reset), then
    // every connection.
    drop(listener);
    connections.shutdown().await;
}

/// One client connection: its first request must carry the token; then requests go to the box
/// one head at a time, each stripped of the token, and the answers come back as they are (the
/// first one setting the cookie, when the token came in the URL).
async fn carry(client: TcpStream, door: Arc<Door>) {
    let (client_r, mut client_w) = client.into_split();
    let mut client_r = BufReader::new(client_r);
    let first = match tokio::time::timeout(HEAD_WAIT, read_head(&mut client_r)).await {
        Ok(Ok(Some(head))) => head,
        _ => return,
    };
    let Some(request) = Request::parse(&first) else {
        let _ = write_refusal(&mut client_w, "400 Bad Request", "not an HTTP request").await;
        return;
    };
    let via = request.token(&door);
    if via.is_none() {
        let _ = write_refusal(
            &mut client_w,
            "403 Forbidden",
            "this published port needs its token: open the URL publish() gave (with ?kern_token=...), or send the X-Kern-Token header",
        )
        .await;
        return;
    }
    let fd = match door.target.dial(door.port).await {
        Ok(fd) => fd,
        Err(why) => {
            let _ = write_refusal(&mut client_w, "502 Bad Gateway", &why).await;
            return;
        }
    };
    let upstream = std::net::TcpStream::from(fd);
    // tokio takes only a non-blocking socket (a blocking one is a panic).
    if upstream.set_nonblocking(true).is_err() {
        return;
    }
    let Ok(upstream) = TcpStream::from_std(upstream) else {
        return;
    };
    let (box_r, mut box_w) = upstream.into_split();
    // The answers: the first one sets the cookie when the token came in the URL (a browser's
    // first visit), so the page's own requests (scripts, images, a WebSocket) carry it.
    let cookie = (via == Some(Via::Query)).then(|| {
        format!(
            "Set-Cookie: {}={}; Path=/; HttpOnly; SameSite=Strict\r\n",
            door.cookie, door.token
        )
    });
    // Both ways in this task, so that revoking the port (which aborts it) closes both sockets.
    let answers = async {
        let _ = answer(box_r, &mut client_w, cookie).await;
        let _ = client_w.shutdown().await;
    };
    let asks = async {
        let _ = requests(&mut client_r, &mut box_w, request, &door).await;
        let _ = box_w.shutdown().await;
    };
    tokio::join!(answers, asks);
}

/// Answers `status` with `why` and closes.
async fn write_refusal<W: tokio::io::AsyncWrite + Unpin>(
    w: &mut W,
    status: &str,
    why: &str,
) -> std::io::Result<()> {
    let body = format!("kern-sandbox: {why}\n");
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    w.write_all(head.as_bytes()).await?;
    w.write_all(body.as_bytes()).await?;
    w.shutdown().await
}

/// Passes the client's requests on, the first one given; after an upgrade, every byte.
async fn requests(
    client: &mut BufReader<tokio::net::tcp::OwnedReadHalf>,
    upstream: &mut tokio::net::tcp::OwnedWriteHalf,
    first: Request,
    door: &Door,
) -> std::io::Result<()> {
    let mut request = first;
    loop {
        upstream.write_all(&request.stripped(door)).await?;
        match request.body {
            Body::None => {}
            Body::Length(n) => {
                let copied = tokio::io::copy(&mut (&mut *client).take(n), upstream).await?;
                if copied < n {
                    return Ok(());
                }
            }
            Body::Chunked => copy_chunked(client, upstream).await?,
            // An upgrade (a WebSocket) or a tunnel: from here on, bytes as they are.
            Body::Rest => {
                tokio::io::copy(client, upstream).await?;
                return Ok(());
            }
        }
        let Some(head) = read_head(client).await? else {
            return Ok(());
        };
        let Some(next) = Request::parse(&head) else {
            return Ok(());
        };
        request = next;
    }
}

/// The box's answers to the client; the first head gets `cookie` (unless it is a 1xx interim).
async fn answer(
    upstream: tokio::net::tcp::OwnedReadHalf,
    client: &mut tokio::net::tcp::OwnedWriteHalf,
    cookie: Option<String>,
) -> std::io::Result<()> {
    let mut upstream = BufReader::new(upstream);
    if let Some(cookie) = cookie {
        if let Some(head) = read_head(&mut upstream).await? {
            client.write_all(&with_header(&head, &cookie)).await?;
        }
    }
    tokio::io::copy(&mut upstream, client).await?;
    Ok(())
}

/// `head` with `line` added after its status line, for a final (non-1xx) answer; as is else.
fn with_header(head: &[u8], line: &str) -> Vec<u8> {
    let mut headers = [httparse::EMPTY_HEADER; 128];
    let mut response = httparse::Response::new(&mut headers);
    let interim = !matches!(response.parse(head), Ok(httparse::Status::Complete(_)))
        || response.code.is_none_or(|c| c < 200 && c != 101);
    let at = head.windows(2).position(|w| w == b"\r\n");
    match at {
        Some(at) if !interim => {
            let mut out = Vec::with_capacity(head.len() + line.len());
            out.extend_from_slice(&head[..at + 2]);
            out.extend_from_slice(line.as_bytes());
            out.extend_from_slice(&head[at + 2..]);
            out
        }
        _ => head.to_vec(),
    }
}

/// A head (through its empty line), or None at a clean EOF before one began. Longer than
/// `MAX_HEAD`: an error.
async fn read_head<R: tokio::io::AsyncBufRead + Unpin>(
    r: &mut R,
) -> std::io::Result<Option<Vec<u8>>> {
    let mut head = Vec::new();
    loop {
        let before = head.len();
        let n = (&mut *r)
            .take((MAX_HEAD - head.len()) as u64 + 1)
            .read_until(b'\n', &mut head)
            .await?;
        if n == 0 {
            return if head.is_empty() {
                Ok(None)
            } else {
                Err(std::io::ErrorKind::UnexpectedEof.into())
            };
        }
        if head.len() > MAX_HEAD {
            return Err(std::io::Error::other("head too large"));
        }
        let line = &head[before..];
        // A blank line before any other is a stray CRLF between requests: skipped.
        if line == b"\r\n" || line == b"\n" {
            if before == 0 {
                head.clear();
                continue;
            }
            return Ok(Some(head));
        }
    }
}

/// Passes a chunked body on: each chunk, the last one and its trailers.
async fn copy_chunked<R: tokio::io::AsyncBufRead + Unpin, W: tokio::io::AsyncWrite + Unpin>(
    r: &mut R,
    w: &mut W,
) -> std::io::Result<()> {
    loop {
        let mut line = Vec::new();
        (&mut *r).take(4096).read_until(b'\n', &mut line).await?;
        if !line.ends_with(b"\n") {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        w.write_all(&line).await?;
        let size = std::str::from_utf8(&line)
            .ok()
            .and_then(|l| l.trim().split(';').next())
            .and_then(|s| u64::from_str_radix(s.trim(), 16).ok())
            .ok_or_else(|| std::io::Error::other("bad chunk size"))?;
        if size == 0 {
            // Trailers, to the empty line.
            loop {
                let mut t = Vec::new();
                (&mut *r)
                    .take(MAX_HEAD as u64)
                    .read_until(b'\n', &mut t)
                    .await?;
                w.write_all(&t).await?;
                if t == b"\r\n" || t == b"\n" || t.is_empty() {
                    return Ok(());
                }
            }
        }
        // The data and its CRLF.
        let copied = tokio::io::copy(&mut (&mut *r).take(size + 2), w).await?;
        if copied < size + 2 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
}

/// How the token came.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Via {
    Query,
    Header,
    Cookie,
}

/// What follows a request's head.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    None,
    Length(u64),
    Chunked,
    /// An upgrade or CONNECT: the rest of the connection.
    Rest,
}

/// A request head, parsed.
struct Request {
    method: String,
    target: String,
    minor: u8,
    headers: Vec<(String, Vec<u8>)>,
    body: Body,
}

impl Request {
    fn parse(head: &[u8]) -> Option<Request> {
        let mut headers = [httparse::EMPTY_HEADER; 128];
        let mut req = httparse::Request::new(&mut headers);
        if !matches!(req.parse(head), Ok(httparse::Status::Complete(_))) {
            return None;
        }
        let method = req.method?.to_string();
        let target = req.path?.to_string();
        let minor = req.version?;
        let headers: Vec<(String, Vec<u8>)> = req
            .headers
            .iter()
            .map(|h| (h.name.to_ascii_lowercase(), h.value.to_vec()))
            .collect();
        let value = |name: &'static str| {
            headers
                .iter()
                .filter(move |(n, _)| n == name)
                .map(|(_, v)| String::from_utf8_lossy(v).to_ascii_lowercase())
        };
        let upgrade = value("connection").any(|v| v.split(',').any(|t| t.trim() == "upgrade"))
            && value("upgrade").next().is_some();
        let te: Vec<String> = value("transfer-encoding").collect();
        // Framing the box could read otherwise than we do (a request smuggled past the
        // stripping) is refused as unparsable: a transfer coding that does not end in chunked,
        // or one beside a Content-Length.
        if !te.is_empty()
            && (!te.last().is_some_and(|v| v.trim().ends_with("chunked"))
                || value("content-length").next().is_some())
        {
            return None;
        }
        let body = if upgrade || method == "CONNECT" {
            Body::Rest
        } else if !te.is_empty() {
            Body::Chunked
        } else {
            match value("content-length").next() {
                // Two differing lengths are a smuggling attempt: refused as unparsable.
                Some(n) => {
                    let n: u64 = n.trim().parse().ok()?;
                    if value("content-length").any(|m| m.trim() != n.to_string()) {
                        return None;
                    }
                    Body::Length(n)
                }
                None => Body::None,
            }
        };
        Some(Request {
            method,
            target,
            minor,
            headers,
            body,
        })
    }

    /// Whether (and how) it carries the token.
    fn token(&self, door: &Door) -> Option<Via> {
        let want = door.token.as_bytes();
        let (_, query) = self.target.split_once('?').unwrap_or((&self.target, ""));
        if query
            .split('&')
            .filter_map(|kv| kv.split_once('='))
            .any(|(k, v)| k == TOKEN_PARAM && same(v.as_bytes(), want))
        {
            return Some(Via::Query);
        }
        if self
            .headers
            .iter()
            .any(|(n, v)| n == TOKEN_HEADER && same(v, want))
        {
            return Some(Via::Header);
        }
        let cookie = door.cookie.as_bytes();
        for (_, v) in self.headers.iter().filter(|(n, _)| n == "cookie") {
            for c in v.split(|b| *b == b';') {
                let c = c.trim_ascii();
                if let Some(i) = c.iter().position(|b| *b == b'=') {
                    if &c[..i] == cookie && same(&c[i + 1..], want) {
                        return Some(Via::Cookie);
                    }
                }
            }
        }
        None
    }

    /// The head as the box gets it: no token in the URL, no token header, no token cookie.
    fn stripped(&self, door: &Door) -> Vec<u8> {
        let target = match self.target.split_once('?') {
            Some((path, query)) => {
                let kept: Vec<&str> = query
                    .split('&')
                    .filter(|kv| kv.split('=').next() != Some(TOKEN_PARAM))
                    .collect();
                if kept.is_empty() {
                    path.to_string()
                } else {
                    format!("{path}?{}", kept.join("&"))
                }
            }
            None => self.target.clone(),
        };
        let mut out = format!("{} {} HTTP/1.{}\r\n", self.method, target, self.minor).into_bytes();
        let cookie = door.cookie.as_bytes();
        for (name, value) in &self.headers {
            if name == TOKEN_HEADER {
                continue;
            }
            let value = if name == "cookie" {
                let kept: Vec<&[u8]> = value
                    .split(|b| *b == b';')
                    .map(<[u8]>::trim_ascii)
                    .filter(|c| !c.is_empty() && c.split(|b| *b == b'=').next() != Some(cookie))
                    .collect();
                if kept.is_empty() {
                    continue;
                }
                kept.join(&b"; "[..])
            } else {
                value.clone()
            };
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(b": ");
            out.extend_from_slice(&value);
            out.extend_from_slice(b"\r\n");
        }
        out.extend_from_slice(b"\r\n");
        out
    }
}

/// Compares in time that depends on the length only.
fn same(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn door() -> Door {
        Door {
            target: Target::Process(Dialer {
                line: Arc::new(Mutex::new(None)),
                ended: watch::channel(true).1,
            }),
            port: 8000,
            cookie: "kern_token_41000".into(),
            token: "abc".into(),
        }
    }

    #[test]
    fn the_token_is_read_from_the_url_a_header_or_the_cookie_and_stripped() {
        let d = door();
        let r = Request::parse(b"GET /x?a=1&kern_token=abc&b=2 HTTP/1.1\r\nHost: h\r\nCookie: s=1; kern_token_41000=abc\r\nX-Kern-Token: abc\r\n\r\n").unwrap();
        assert_eq!(r.token(&d), Some(Via::Query));
        let s = String::from_utf8(r.stripped(&d)).unwrap();
        assert_eq!(
            s,
            "GET /x?a=1&b=2 HTTP/1.1\r\nhost: h\r\ncookie: s=1\r\n\r\n"
        );
        let r = Request::parse(b"GET / HTTP/1.1\r\nCookie: kern_token_41000=abc\r\n\r\n").unwrap();
        assert_eq!(r.token(&d), Some(Via::Cookie));
        assert_eq!(r.stripped(&d), b"GET / HTTP/1.1\r\n\r\n");
        let r = Request::parse(
            b"GET /?kern_token=abd HTTP/1.1\r\nCookie: kern_token_41001=abc\r\n\r\n",
        )
        .unwrap();
        assert_eq!(r.token(&d), None);
    }

    #[test]
    fn bodies_are_framed_and_upgrades_pass_through() {
        let body = |h: &[u8]| Request::parse(h).map(|r| r.body);
        assert_eq!(
            body(b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n"),
            Some(Body::Length(5))
        );
        assert_eq!(
            body(b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n"),
            Some(Body::Chunked)
        );
        assert_eq!(
            body(
                b"GET / HTTP/1.1\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\n\r\n"
            ),
            Some(Body::Rest)
        );
        assert_eq!(body(b"GET / HTTP/1.1\r\n\r\n"), Some(Body::None));
        // Two lengths that differ, a length beside chunked, a coding that isn't chunked last:
        // refused.
        for smuggled in [
            &b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"[..],
            b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
        ] {
            assert!(body(smuggled).is_none());
        }
        assert_eq!(
            body(b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"),
            Some(Body::Chunked)
        );
    }

    #[test]
    fn the_cookie_goes_into_a_final_answer_only() {
        let line = "Set-Cookie: k=v\r\n";
        assert_eq!(
            with_header(b"HTTP/1.1 200 OK\r\nA: b\r\n\r\n", line),
            b"HTTP/1.1 200 OK\r\nSet-Cookie: k=v\r\nA: b\r\n\r\n"
        );
        assert_eq!(
            with_header(b"HTTP/1.1 100 Continue\r\n\r\n", line),
            b"HTTP/1.1 100 Continue\r\n\r\n"
        );
    }
}
