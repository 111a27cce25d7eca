//! One origin-form HTTP/1.x request on a connection the proxy reads: inside a terminated tunnel
//! to a secret's host, a plain-HTTP request to one, and the plaintext HTTP a box sends through a
//! CONNECT tunnel or to a listed loopback address. Exactly one request per connection: its head
//! must name the connection's host (`Host`, origin-form target), it goes out with hop-by-hop
//! headers removed and `Connection: close`, its body is forwarded by its own framing
//! (`Content-Length`, or chunked, re-chunked) and nothing after it is: a second request on the
//! connection, naming another virtual host of the same server, never reaches it.
//!
//! With secrets (`secrets.rs`), the values are placed in the head (or the request refused, 403),
//! a body holding a placeholder is cut before its end reaches the server, the server is asked for
//! an uncompressed answer, and the answer is scrubbed (`scrub.rs`): its head, and its body,
//! de-chunked and sent on chunked (HTTP/1.1) or to the close (HTTP/1.0); a compressed body,
//! which could hide the value, is not passed (502).

use super::head::{
    self, check_host_header, content_length, drain, host_names_target, quote, respond, Head,
    Status, HOP_BY_HOP, MAX_HEAD,
};
use super::policy::{canonical_host, Host};
use super::scrub::Scrubber;
use super::secrets::Secrets;
use super::tunnel::relay;
use super::{Decision, Proxy};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};

/// A response head larger than this is not passed (cookies make them bigger than requests').
const MAX_RESPONSE_HEAD: usize = 64 * 1024;
/// A chunk-size or trailer line longer than this is malformed.
const MAX_LINE: u64 = 4096;
/// Bytes moved per read of a body.
const PIECE: usize = 64 * 1024;

/// An origin-form request head as the client sent it.
pub(super) struct Request {
    pub method: String,
    pub target: String,
    pub minor: u8,
    pub headers: Vec<(String, Vec<u8>)>,
}

impl Request {
    fn values<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a [u8]> + 'a {
        self.headers
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_slice())
    }

    /// Whether it has a header `name`.
    pub(super) fn has(&self, name: &str) -> bool {
        self.values(name).next().is_some()
    }
}

/// How a request's body ends.
pub(super) enum Body {
    Length(u64),
    Chunked,
}

/// Why a request is not forwarded: the answer to give, and whether it is a policy decision.
pub(super) struct Refused {
    pub status: Status,
    pub why: String,
}

fn refused(status: Status, why: impl Into<String>) -> Refused {
    Refused {
        status,
        why: why.into(),
    }
}

/// Reads an origin-form request head (the client speaks to the server it thinks it reaches)
/// into `buf`, checking it names `host:port` (`default_port` when `Host` names none); returns
/// it and its length in `buf`. `Ok(None)`: the client left first.
pub(super) async fn read_origin_head<S: AsyncRead + Unpin>(
    client: &mut S,
    buf: &mut Vec<u8>,
    host: &Host,
    port: u16,
    default_port: u16,
) -> Result<Option<(Request, usize)>, Refused> {
    let mut chunk = [0u8; 4096];
    loop {
        let mut slots = [httparse::EMPTY_HEADER; 100];
        let mut req = httparse::Request::new(&mut slots);
        match req.parse(buf) {
            Ok(httparse::Status::Complete(len)) => {
                let (Some(method), Some(path), Some(minor)) = (req.method, req.path, req.version)
                else {
                    return Err(refused(Status::BadRequest, "malformed request line"));
                };
                let origin_form = path.starts_with('/') || (method == "OPTIONS" && path == "*");
                if !origin_form {
                    return Err(refused(
                        Status::BadRequest,
                        format!(
                            "request target {} is not origin-form (`/path`); a request on this connection names no other site",
                            quote(path.as_bytes())
                        ),
                    ));
                }
                let named: Vec<&[u8]> = req
                    .headers
                    .iter()
                    .filter(|h| h.name.eq_ignore_ascii_case("host"))
                    .map(|h| h.value)
                    .collect();
                host_names_target(&named, host, port, default_port)
                    .map_err(|why| refused(Status::BadRequest, why))?;
                let request = Request {
                    method: method.to_owned(),
                    target: path.to_owned(),
                    minor,
                    headers: req
                        .headers
                        .iter()
                        .map(|h| (h.name.to_owned(), h.value.to_vec()))
                        .collect(),
                };
                return Ok(Some((request, len)));
            }
            Ok(httparse::Status::Partial) if buf.len() >= MAX_HEAD => {
                return Err(refused(
                    Status::HeadTooLarge,
                    "request head larger than 16 KiB",
                ))
            }
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => {
                return Err(refused(Status::HeadTooLarge, "too many header lines"))
            }
            Err(e) => {
                return Err(refused(
                    Status::BadRequest,
                    format!("malformed request head ({e})"),
                ))
            }
        }
        let room = (MAX_HEAD - buf.len()).min(chunk.len());
        match client.read(&mut chunk[..room]).await {
            Ok(0) | Err(_) => return Ok(None),
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The body framing of an origin-form request: chunked (the last coding, alone), a
/// `Content-Length`, or none. Two framings, or other codings, are refused (how requests are
/// smuggled).
pub(super) fn body_of(req: &Request) -> Result<Body, Refused> {
    let te: Vec<&[u8]> = req.values("transfer-encoding").collect();
    let cl: Vec<&[u8]> = req.values("content-length").collect();
    match (te.as_slice(), cl.as_slice()) {
        ([], []) => Ok(Body::Length(0)),
        ([t], []) if t.trim_ascii().eq_ignore_ascii_case(b"chunked") => Ok(Body::Chunked),
        ([_, ..], []) => Err(refused(
            Status::LengthRequired,
            "only `Transfer-Encoding: chunked` is supported; send the body chunked or with Content-Length",
        )),
        ([], [v]) if !v.is_empty() && v.len() <= 18 && v.iter().all(u8::is_ascii_digit) => {
            std::str::from_utf8(v)
                .ok()
                .and_then(|s| s.parse().ok())
                .map(Body::Length)
                .ok_or_else(|| refused(Status::BadRequest, "bad Content-Length"))
        }
        ([], _) => Err(refused(
            Status::BadRequest,
            "bad or repeated Content-Length",
        )),
        _ => Err(refused(
            Status::BadRequest,
            "both Transfer-Encoding and Content-Length",
        )),
    }
}

/// Finds any of some byte strings in a stream, across the pieces it comes in.
struct Finder {
    needles: Vec<(String, Vec<u8>)>,
    tail: Vec<u8>,
}

impl Finder {
    /// The name of the first needle found so far.
    fn push(&mut self, piece: &[u8]) -> Option<String> {
        if self.needles.is_empty() {
            return None;
        }
        let mut window = std::mem::take(&mut self.tail);
        window.extend_from_slice(piece);
        for (name, n) in &self.needles {
            if window.windows(n.len()).any(|w| w == n.as_slice()) {
                return Some(name.clone());
            }
        }
        let keep = self.needles.iter().map(|(_, n)| n.len()).max().unwrap_or(1) - 1;
        self.tail = window.split_off(window.len().saturating_sub(keep));
        None
    }
}

/// Why the request side stopped early.
enum UpError {
    Io(io::Error),
    /// A placeholder (of the named secret) in the body.
    Placeholder(String),
}

impl From<io::Error> for UpError {
    fn from(e: io::Error) -> Self {
        UpError::Io(e)
    }
}

/// Moves `n` bytes from `from` to `to`, checked by `finder`.
async fn copy_checked<R, W>(
    from: &mut R,
    to: &mut W,
    mut n: u64,
    finder: &mut Finder,
) -> Result<(), UpError>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let mut piece = vec![0u8; PIECE];
    while n > 0 {
        let want = usize::try_from(n).unwrap_or(PIECE).min(PIECE);
        let got = from.read(&mut piece[..want]).await?;
        if got == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof).into());
        }
        if let Some(name) = finder.push(&piece[..got]) {
            return Err(UpError::Placeholder(name));
        }
        to.write_all(&piece[..got]).await?;
        n -= got as u64;
    }
    Ok(())
}

/// One line (chunk size, trailer) of at most `MAX_LINE` bytes, without its CRLF.
async fn read_line<R: AsyncBufReadExt + Unpin>(r: &mut R) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    (&mut *r)
        .take(MAX_LINE)
        .read_until(b'\n', &mut line)
        .await?;
    if line.last() != Some(&b'\n') {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "a chunk line without its end",
        ));
    }
    line.pop();
    if line.last() == Some(&b'\r') {
        line.pop();
    }
    Ok(line)
}

/// A chunk-size line's size (extensions after `;` ignored).
fn chunk_size(line: &[u8]) -> io::Result<u64> {
    let hex = line.split(|&b| b == b';').next().unwrap_or_default();
    std::str::from_utf8(hex.trim_ascii())
        .ok()
        .filter(|s| !s.is_empty() && s.len() <= 15)
        .and_then(|s| u64::from_str_radix(s, 16).ok())
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "a bad chunk size"))
}

/// A chunked body read piece by piece; trailers are read and dropped.
#[derive(Default)]
pub(super) struct Chunks {
    /// Data left in the current chunk.
    left: u64,
    /// Inside a chunk (its CRLF is still to come after its data).
    inside: bool,
    done: bool,
}

impl Chunks {
    /// The next piece of data, `None` at the end of the body.
    pub(super) async fn next<R: AsyncBufReadExt + Unpin>(
        &mut self,
        r: &mut R,
    ) -> io::Result<Option<Vec<u8>>> {
        if self.done {
            return Ok(None);
        }
        if self.left == 0 {
            if self.inside && !read_line(r).await?.is_empty() {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "chunk data longer than its size",
                ));
            }
            let size = chunk_size(&read_line(r).await?)?;
            if size == 0 {
                while !read_line(r).await?.is_empty() {}
                self.done = true;
                return Ok(None);
            }
            self.left = size;
            self.inside = true;
        }
        let want = usize::try_from(self.left).unwrap_or(PIECE).min(PIECE);
        let mut piece = vec![0u8; want];
        let got = r.read(&mut piece).await?;
        if got == 0 {
            return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
        }
        piece.truncate(got);
        self.left -= got as u64;
        Ok(Some(piece))
    }
}

/// The head forwarded: same method, target and version; hop-by-hop headers (and those
/// `Connection` names) dropped, the framing as checked, `Connection: close`; with secrets, no
/// compressed answer asked for (it could not be scrubbed).
pub(super) fn forward_head(req: &Request, body: &Body, scrubbing: bool) -> Vec<u8> {
    let mut out = forward_lines(req, body, scrubbing);
    out.extend_from_slice(b"Connection: close\r\n\r\n");
    out
}

/// `forward_head` but its `Connection` line and the blank line that ends it.
pub(super) fn forward_lines(req: &Request, body: &Body, scrubbing: bool) -> Vec<u8> {
    let mut named = Vec::new();
    for value in req.values("connection") {
        for token in String::from_utf8_lossy(value).split(',') {
            named.push(token.trim().to_ascii_lowercase());
        }
    }
    let mut out = format!("{} {} HTTP/1.{}\r\n", req.method, req.target, req.minor).into_bytes();
    for (name, value) in &req.headers {
        let lower = name.to_ascii_lowercase();
        let framing = lower == "content-length" || lower == "transfer-encoding";
        let dropped = HOP_BY_HOP.contains(&lower.as_str())
            || (named.contains(&lower) && lower != "host")
            || framing
            || (scrubbing && lower == "accept-encoding");
        if dropped {
            continue;
        }
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    }
    match body {
        Body::Length(0) if !req.values("content-length").any(|_| true) => {}
        Body::Length(n) => out.extend_from_slice(format!("Content-Length: {n}\r\n").as_bytes()),
        Body::Chunked => out.extend_from_slice(b"Transfer-Encoding: chunked\r\n"),
    }
    if scrubbing {
        out.extend_from_slice(b"Accept-Encoding: identity\r\n");
    }
    out
}

impl Proxy {
    /// Forwards `req` (its head already read; `early`: what followed it) to `upstream` and the
    /// answer back, once. `secrets`: those of this host, placed and scrubbed.
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn exchange<C, U>(
        &self,
        secrets: Option<&Secrets>,
        client: C,
        upstream: U,
        mut req: Request,
        early: Vec<u8>,
        host: &Host,
        port: u16,
    ) where
        C: AsyncRead + AsyncWrite + Unpin + Send,
        U: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let (cr, mut cw) = tokio::io::split(client);
        let (ur, mut uw) = tokio::io::split(upstream);
        let mut cr = BufReader::new(std::io::Cursor::new(early).chain(cr));
        let checked = body_of(&req).and_then(|body| {
            if let Some(s) = secrets {
                let line = format!("{} {} HTTP/1.{}", req.method, req.target, req.minor);
                s.place(host, port, line.as_bytes(), &mut req.headers)
                    .map_err(|why| refused(Status::Forbidden, why))?;
            }
            Ok(body)
        });
        let body = match checked {
            Ok(b) => b,
            Err(r) => {
                self.refuse_in_tunnel(host, port, &r.why);
                respond(&mut tokio::io::join(cr, cw), r.status, &r.why).await;
                return;
            }
        };
        let head = forward_head(&req, &body, secrets.is_some());
        let mut finder = Finder {
            needles: secrets
                .map(|s| s.placeholders(host, port))
                .unwrap_or_default(),
            tail: Vec::new(),
        };
        let started = AtomicBool::new(false);
        let is_head = req.method.eq_ignore_ascii_case("HEAD");
        let outcome = {
            let up = async {
                uw.write_all(&head).await?;
                match body {
                    Body::Length(n) => copy_checked(&mut cr, &mut uw, n, &mut finder).await?,
                    Body::Chunked => {
                        let mut chunks = Chunks::default();
                        while let Some(piece) = chunks.next(&mut cr).await? {
                            if let Some(name) = finder.push(&piece) {
                                return Err(UpError::Placeholder(name));
                            }
                            uw.write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                                .await?;
                            uw.write_all(&piece).await?;
                            uw.write_all(b"\r\n").await?;
                        }
                        uw.write_all(b"0\r\n\r\n").await?;
                    }
                }
                uw.flush().await?;
                Ok::<(), UpError>(())
            };
            let down = async {
                match secrets {
                    Some(s) => {
                        answer_scrubbed(ur, &mut cw, s.scrubber(), is_head, req.minor, &started)
                            .await
                    }
                    None => {
                        let mut ur = ur;
                        started.store(true, Ordering::Relaxed);
                        relay(&mut ur, &mut cw).await.map(drop)
                    }
                }
            };
            until_answered(up, down).await
        };
        match outcome {
            Ok(Ok(())) => {
                let _ = cw.shutdown().await;
                // What followed the request is dropped, but read, so the close is no reset.
                drain(&mut cr).await;
            }
            Ok(Err(e)) => {
                tracing::warn!(%e, "egress proxy: the answer from {host}:{port} was cut");
                if !started.load(Ordering::Relaxed) {
                    let why = format!("the answer from {host}:{port} was not passed: {e}");
                    respond(&mut tokio::io::join(cr, cw), Status::BadGateway, &why).await;
                }
            }
            Err(UpError::Placeholder(name)) => {
                let why = format!("the placeholder of secret {name} is in the request body; a secret's value goes only into the headers it names, so the request was cut before its end reached {host}:{port}");
                self.refuse_in_tunnel(host, port, &why);
                if !started.load(Ordering::Relaxed) {
                    respond(&mut tokio::io::join(cr, cw), Status::Forbidden, &why).await;
                }
            }
            Err(UpError::Io(e)) if e.kind() == io::ErrorKind::InvalidData => {
                if !started.load(Ordering::Relaxed) {
                    let why = format!("a malformed chunked body: {e}");
                    respond(&mut tokio::io::join(cr, cw), Status::BadRequest, &why).await;
                }
            }
            Err(UpError::Io(_)) => {}
        }
    }

    /// Records a request refused inside a connection already allowed.
    pub(super) fn refuse_in_tunnel(&self, host: &Host, port: u16, why: &str) {
        tracing::warn!(%why, "egress proxy: refused a request on an allowed connection");
        self.record(Decision {
            host: host.text(),
            port,
            allowed: false,
            reason: why.to_owned(),
            resolved: Vec::new(),
            problem: None,
        });
    }

    pub(super) async fn http<S: AsyncRead + AsyncWrite + Unpin + Send>(
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
            let req = Request {
                method: head.method.clone(),
                target: path.to_owned(),
                minor: head.minor,
                headers: head.headers.clone(),
            };
            self.exchange(Some(s), client, upstream, req, rest, &host, port)
                .await;
            return;
        }
        let forwarded = head::forward_head(head, path);
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
        if let Ok(Ok(())) = until_answered(up, down).await {
            // Whatever followed the request is dropped, but read, so the close is not a reset.
            drain(&mut cr).await;
        }
    }
}

/// Runs a request's two directions at once: `up` (the request and its body) and `down` (the
/// answer). Done when the answer has been relayed, `Ok` with how `down` ended; a request side
/// that fails ends it early, `Err`. A client that stalls mid-body does not hold a finished
/// answer open.
async fn until_answered<E, T>(
    up: impl std::future::Future<Output = Result<(), E>>,
    down: impl std::future::Future<Output = T>,
) -> Result<T, E> {
    tokio::pin!(up, down);
    let mut body_done = false;
    loop {
        tokio::select! {
            r = &mut up, if !body_done => match r {
                Ok(()) => body_done = true,
                Err(e) => break Err(e),
            },
            r = &mut down => break Ok(r),
        }
    }
}

/// Reads the upstream's answer and writes it to the client scrubbed, re-framed.
async fn answer_scrubbed<R, W>(
    ur: R,
    cw: &mut W,
    mut scrub: Scrubber,
    is_head: bool,
    minor: u8,
    started: &AtomicBool,
) -> io::Result<()>
where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin,
{
    let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    let mut ur = BufReader::with_capacity(PIECE, ur);
    loop {
        let mut buf = Vec::new();
        let (code, mut head, framing) = loop {
            let mut slots = [httparse::EMPTY_HEADER; 200];
            let mut res = httparse::Response::new(&mut slots);
            match res.parse(&buf) {
                Ok(httparse::Status::Complete(len)) => {
                    let code = res.code.unwrap_or(0);
                    let mut te = None;
                    let mut cl = None;
                    // Every Content-Encoding the answer names: one that is not identity (a
                    // second header after a first "gzip" included) can't be scrubbed.
                    let mut ce: Vec<Vec<u8>> = Vec::new();
                    let mut out =
                        format!("HTTP/1.{} {code} {}\r\n", minor, res.reason.unwrap_or(""))
                            .into_bytes();
                    for h in res.headers.iter() {
                        let lower = h.name.to_ascii_lowercase();
                        match lower.as_str() {
                            "transfer-encoding" => te = Some(h.value.to_vec()),
                            "content-length" => cl = Some(h.value.to_vec()),
                            "content-encoding" => ce.push(h.value.to_vec()),
                            _ => {}
                        }
                        if [
                            "transfer-encoding",
                            "content-length",
                            "connection",
                            "keep-alive",
                            "trailer",
                        ]
                        .contains(&lower.as_str())
                        {
                            continue;
                        }
                        out.extend_from_slice(h.name.as_bytes());
                        out.extend_from_slice(b": ");
                        out.extend_from_slice(h.value);
                        out.extend_from_slice(b"\r\n");
                    }
                    let bodiless =
                        is_head || (100..200).contains(&code) || code == 204 || code == 304;
                    if bodiless {
                        if let Some(cl) = &cl {
                            out.extend_from_slice(b"Content-Length: ");
                            out.extend_from_slice(cl);
                            out.extend_from_slice(b"\r\n");
                        }
                    } else if ce.iter().flat_map(|v| v.split(|&b| b == b',')).any(|v| {
                        !v.trim_ascii().is_empty()
                            && !v.trim_ascii().eq_ignore_ascii_case(b"identity")
                    }) {
                        // The server's value is not quoted: a host that echoes request headers
                        // could put the secret there, and this text reaches the box unscrubbed.
                        return Err(bad(
                            "it came compressed (a Content-Encoding other than identity) although the proxy asked for none, and a compressed body can't be checked for a secret's value".into(),
                        ));
                    }
                    let framing = if bodiless {
                        None
                    } else if let Some(te) = te {
                        // Exactly chunked: "gzip, chunked" would pass a compressed body, de-chunked,
                        // to the box unscrubbed.
                        if !te.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                            return Err(bad("a Transfer-Encoding other than chunked".into()));
                        }
                        Some(Body::Chunked)
                    } else {
                        let n = cl.and_then(|v| std::str::from_utf8(&v).ok()?.trim().parse().ok());
                        Some(n.map_or(Body::Length(u64::MAX), Body::Length))
                    };
                    let _ = buf.drain(..len);
                    break (code, out, framing);
                }
                Ok(httparse::Status::Partial) if buf.len() >= MAX_RESPONSE_HEAD => {
                    return Err(bad("a response head larger than 64 KiB".into()))
                }
                Ok(httparse::Status::Partial) => {}
                Err(e) => return Err(bad(format!("a malformed response head ({e})"))),
            }
            let mut line = Vec::new();
            let n = (&mut ur)
                .take(MAX_RESPONSE_HEAD as u64)
                .read_until(b'\n', &mut line)
                .await?;
            if n == 0 {
                return Err(bad("the server closed before answering".into()));
            }
            buf.extend_from_slice(&line);
        };
        if (100..200).contains(&code) && code != 101 {
            // An interim answer (100 Continue): as it came, scrubbed; the real one follows.
            head.extend_from_slice(b"\r\n");
            cw.write_all(&scrub.once(&head)).await?;
            cw.flush().await?;
            continue;
        }
        // Chunked to an HTTP/1.1 client, to the close for HTTP/1.0.
        let rechunk = minor >= 1 && framing.is_some();
        if rechunk {
            head.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
        }
        head.extend_from_slice(b"Connection: close\r\n\r\n");
        let head = scrub.once(&head);
        started.store(true, Ordering::Relaxed);
        cw.write_all(&head).await?;
        if code == 101 {
            return Err(bad(
                "a protocol switch, which a secret's host may not make".into()
            ));
        }
        let Some(framing) = framing else {
            return cw.flush().await;
        };
        match framing {
            Body::Chunked => {
                let mut chunks = Chunks::default();
                while let Some(piece) = chunks.next(&mut ur).await? {
                    emit(cw, &scrub.push(&piece), rechunk).await?;
                }
            }
            Body::Length(n) => {
                let mut left = n;
                let mut piece = vec![0u8; PIECE];
                while left > 0 {
                    let want = usize::try_from(left).unwrap_or(PIECE).min(PIECE);
                    let got = ur.read(&mut piece[..want]).await?;
                    if got == 0 {
                        if n == u64::MAX {
                            break;
                        }
                        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
                    }
                    left -= got as u64;
                    emit(cw, &scrub.push(&piece[..got]), rechunk).await?;
                }
            }
        }
        emit(cw, &scrub.finish(), rechunk).await?;
        if rechunk {
            cw.write_all(b"0\r\n\r\n").await?;
        }
        return cw.flush().await;
    }
}

/// Writes scrubbed bytes as one chunk (or as they are, to the close).
async fn emit<W: AsyncWrite + Unpin>(cw: &mut W, bytes: &[u8], chunked: bool) -> io::Result<()> {
    if bytes.is_empty() {
        return Ok(());
    }
    if chunked {
        cw.write_all(format!("{:x}\r\n", bytes.len()).as_bytes())
            .await?;
        cw.write_all(bytes).await?;
        cw.write_all(b"\r\n").await
    } else {
        cw.write_all(bytes).await
    }
}
