//! Kept-alive TLS connections from the proxy to the package cache's hosts, and the answers read
//! on them.
//!
//! Without this each request to a package host would cost the proxy a TLS handshake to it: a
//! packument per npm dependency, a file per pip download (0.3 to 0.6 s each through this
//! project's network). A terminated connection to such a host with no secret of its own
//! therefore asks on a connection of this pool when one is idle, reads the answer by its
//! framing, and gives the connection back when the answer was whole and the server keeps it
//! open; and the box's connection carries its next request too, while the box keeps it
//! (`To`; each request's head checked as the first's). Only bodiless GET and HEAD requests take
//! this way (`pooled_request`); anything else goes out on a connection of its own and is the
//! connection's last (`exchange.rs`).

use super::exchange::{self, forward_lines, Chunks, Request};
use super::head::HOP_BY_HOP;
use super::policy::Host;
use std::collections::HashMap;
use std::io;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use tokio::io::{
    AsyncBufRead, AsyncBufReadExt, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader,
};
use tokio::net::TcpStream;

/// A TLS connection to a package host, buffered (what was read past an answer stays with it).
pub(super) type Conn = BufReader<tokio_rustls::client::TlsStream<TcpStream>>;

/// Idle connections kept per host; more are closed.
const MAX_IDLE: usize = 8;
/// An idle connection older than this is closed rather than reused (servers close theirs
/// after some seconds of quiet; a request on one already closed costs a retry).
const IDLE: Duration = Duration::from_secs(20);
/// A response head larger than this is not read.
const MAX_HEAD: usize = 64 * 1024;
/// Bytes moved per read.
const PIECE: usize = 64 * 1024;

/// The idle connections of one proxy, per host.
#[derive(Default)]
pub(super) struct Pool {
    idle: Mutex<HashMap<String, Vec<(Instant, Conn)>>>,
}

impl Pool {
    /// The most recently idle connection to `host`, if one is fresh enough.
    pub(super) fn take(&self, host: &Host) -> Option<Conn> {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.get_mut(&host.text())?;
        while let Some((since, conn)) = list.pop() {
            if since.elapsed() < IDLE {
                return Some(conn);
            }
        }
        None
    }

    /// Whether no connection to `host` is idle.
    pub(super) fn is_empty(&self, host: &Host) -> bool {
        let idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        idle.get(&host.text()).is_none_or(|l| l.is_empty())
    }

    /// Keeps `conn` for the next request to `host`.
    pub(super) fn put(&self, host: &Host, conn: Conn) {
        let mut idle = self.idle.lock().unwrap_or_else(|p| p.into_inner());
        let list = idle.entry(host.text()).or_default();
        list.retain(|(since, _)| since.elapsed() < IDLE);
        if list.len() < MAX_IDLE {
            list.push((Instant::now(), conn));
        }
    }
}

/// How an answer's body ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Framing {
    /// No body (HEAD, 1xx, 204, 304).
    Empty,
    Length(u64),
    Chunked,
    /// At the server's close: the connection is not reused.
    ToClose,
}

/// An answer's head, as the pool and the cache need it.
pub(super) struct Answer {
    pub code: u16,
    /// As it came.
    pub raw: Vec<u8>,
    pub framing: Framing,
    /// A `Content-Encoding` other than identity.
    pub compressed: bool,
    /// The server keeps the connection open after it (HTTP/1.1, no `Connection: close`).
    pub keeps_open: bool,
}

/// A bodiless GET or HEAD with no `Upgrade` or `Expect`: what may go out on a pooled connection.
pub(super) fn poolable(req: &Request) -> bool {
    (req.method == "GET" || req.method == "HEAD")
        && !["content-length", "transfer-encoding", "upgrade", "expect"]
            .iter()
            .any(|h| req.has(h))
}

/// `req` (bodiless: `poolable`) as it goes out on a pooled connection: `exchange.rs`'s
/// `forward_head` with `Connection: keep-alive`.
pub(super) fn pooled_request(req: &Request) -> Vec<u8> {
    let mut out = forward_lines(req, &exchange::Body::Length(0), false);
    out.extend_from_slice(b"Connection: keep-alive\r\n\r\n");
    out
}

/// Sends `request` on `conn` and reads the answer's head (`head`: the request was a HEAD).
pub(super) async fn ask<C>(conn: &mut C, request: &[u8], head: bool) -> io::Result<Answer>
where
    C: AsyncBufRead + AsyncWrite + Unpin,
{
    // A buffered reader's writes go straight to the stream under it.
    conn.write_all(request).await?;
    conn.flush().await?;
    read_answer_head(conn, head).await
}

async fn read_answer_head<R: AsyncBufReadExt + Unpin>(r: &mut R, head: bool) -> io::Result<Answer> {
    let bad = |why: String| io::Error::new(io::ErrorKind::InvalidData, why);
    let mut raw = Vec::new();
    loop {
        let mut line = Vec::new();
        let n = (&mut *r)
            .take(MAX_HEAD as u64)
            .read_until(b'\n', &mut line)
            .await?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "the server closed before answering",
            ));
        }
        raw.extend_from_slice(&line);
        if raw.len() > MAX_HEAD {
            return Err(bad("a response head larger than 64 KiB".into()));
        }
        let mut slots = [httparse::EMPTY_HEADER; 128];
        let mut res = httparse::Response::new(&mut slots);
        match res.parse(&raw) {
            Ok(httparse::Status::Complete(_)) => {
                let code = res.code.unwrap_or(0);
                let mut length = None;
                let mut chunked = false;
                let mut compressed = false;
                let mut keeps_open = res.version == Some(1);
                for h in res.headers.iter() {
                    let v = h.value.trim_ascii();
                    if h.name.eq_ignore_ascii_case("content-length") {
                        length = std::str::from_utf8(v).ok().and_then(|s| s.parse().ok());
                        if length.is_none() {
                            return Err(bad("a malformed Content-Length".into()));
                        }
                    } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                        if !v.eq_ignore_ascii_case(b"chunked") {
                            return Err(bad("a Transfer-Encoding other than chunked".into()));
                        }
                        chunked = true;
                    } else if h.name.eq_ignore_ascii_case("content-encoding") {
                        compressed |= !v.is_empty() && !v.eq_ignore_ascii_case(b"identity");
                    } else if h.name.eq_ignore_ascii_case("connection") {
                        keeps_open &= !v
                            .split(|&b| b == b',')
                            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"));
                    }
                }
                let framing = if head || (100..200).contains(&code) || code == 204 || code == 304 {
                    Framing::Empty
                } else if chunked {
                    Framing::Chunked
                } else if let Some(n) = length {
                    Framing::Length(n)
                } else {
                    keeps_open = false;
                    Framing::ToClose
                };
                if (100..200).contains(&code) {
                    // An interim answer (100 Continue) on a request that sent no Expect.
                    return Err(bad(format!("an unasked-for interim answer ({code})")));
                }
                return Ok(Answer {
                    code,
                    raw,
                    framing,
                    compressed,
                    keeps_open,
                });
            }
            Ok(httparse::Status::Partial) => {}
            Err(e) => return Err(bad(format!("a malformed response head ({e})"))),
        }
    }
}

/// The body of an answer, read piece by piece by its framing.
pub(super) struct AnswerBody {
    framing: Framing,
    chunks: Chunks,
    got: u64,
    piece: Vec<u8>,
}

impl AnswerBody {
    pub(super) fn of(answer: &Answer) -> AnswerBody {
        AnswerBody {
            framing: answer.framing,
            chunks: Chunks::default(),
            got: 0,
            piece: Vec::new(),
        }
    }

    /// Bytes read so far.
    pub(super) fn got(&self) -> u64 {
        self.got
    }

    /// The next piece, `None` at the body's end; an answer cut short is an error.
    pub(super) async fn next<C: AsyncBufRead + Unpin>(
        &mut self,
        conn: &mut C,
    ) -> io::Result<Option<&[u8]>> {
        let n = match self.framing {
            Framing::Empty => return Ok(None),
            Framing::Chunked => match self.chunks.next(conn).await? {
                Some(p) => {
                    self.piece = p;
                    self.piece.len()
                }
                None => return Ok(None),
            },
            Framing::Length(_) | Framing::ToClose => {
                let left = match self.framing {
                    Framing::Length(all) => all - self.got,
                    _ => u64::MAX,
                };
                let want = usize::try_from(left).unwrap_or(PIECE).min(PIECE);
                if want == 0 {
                    return Ok(None);
                }
                self.piece.resize(want, 0);
                let n = conn.read(&mut self.piece[..want]).await?;
                if n == 0 {
                    let Framing::Length(all) = self.framing else {
                        return Ok(None);
                    };
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        format!("the answer ended after {} of its {all} bytes", self.got),
                    ));
                }
                n
            }
        };
        self.got += n as u64;
        Ok(Some(&self.piece[..n]))
    }
}

/// The client an answer goes to: its HTTP/1.x minor version, and whether it keeps its
/// connection for another request (HTTP/1.1 without `Connection: close`).
#[derive(Debug, Clone, Copy)]
pub(super) struct To {
    pub minor: u8,
    pub keep: bool,
}

impl To {
    pub(super) fn of(req: &Request) -> To {
        let close = req.headers.iter().any(|(n, v)| {
            n.eq_ignore_ascii_case("connection")
                && v.split(|&b| b == b',')
                    .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"))
        });
        To {
            minor: req.minor,
            keep: req.minor >= 1 && !close,
        }
    }

    /// The `Connection` header line of an answer that leaves the connection `open` or not.
    pub(super) fn connection(open: bool) -> &'static [u8] {
        if open {
            b"Connection: keep-alive\r\n"
        } else {
            b"Connection: close\r\n"
        }
    }
}

/// What `relay_answer` leaves open: the connection to the server, the client's.
pub(super) struct Relayed {
    pub upstream: bool,
    pub client: bool,
}

/// Passes `answer` (its head, and its body from `conn`) to the client as a whole answer (a
/// chunked body re-chunked; to an HTTP/1.0 client sent to the close); says which connections
/// may carry another request.
pub(super) async fn relay_answer<C: AsyncBufRead + Unpin, W: AsyncWrite + Unpin>(
    conn: &mut C,
    answer: &Answer,
    cw: &mut W,
    to: To,
) -> io::Result<Relayed> {
    let mut head = Vec::with_capacity(answer.raw.len());
    let mut lines = answer.raw.split_inclusive(|&b| b == b'\n');
    head.extend_from_slice(lines.next().unwrap_or_default());
    for line in lines {
        let name = line.split(|&b| b == b':').next().unwrap_or_default();
        let name = String::from_utf8_lossy(name.trim_ascii()).to_ascii_lowercase();
        if line.trim_ascii().is_empty() || HOP_BY_HOP.contains(&name.as_str()) {
            continue;
        }
        head.extend_from_slice(line);
    }
    let chunked = answer.framing == Framing::Chunked && to.minor >= 1;
    if chunked {
        head.extend_from_slice(b"Transfer-Encoding: chunked\r\n");
    }
    let delimited = match answer.framing {
        Framing::Empty | Framing::Length(_) => true,
        Framing::Chunked => chunked,
        Framing::ToClose => false,
    };
    let client = to.keep && delimited;
    head.extend_from_slice(To::connection(client));
    head.extend_from_slice(b"\r\n");
    cw.write_all(&head).await?;
    let mut body = AnswerBody::of(answer);
    while let Some(piece) = body.next(conn).await? {
        if chunked {
            cw.write_all(format!("{:x}\r\n", piece.len()).as_bytes())
                .await?;
            cw.write_all(piece).await?;
            cw.write_all(b"\r\n").await?;
        } else {
            cw.write_all(piece).await?;
        }
    }
    if chunked {
        cw.write_all(b"0\r\n\r\n").await?;
    }
    cw.flush().await?;
    Ok(Relayed {
        upstream: answer.keeps_open,
        client,
    })
}

/// A new connection, for the pool once used.
pub(super) fn fresh(conn: tokio_rustls::client::TlsStream<TcpStream>) -> Conn {
    BufReader::with_capacity(PIECE, conn)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a client of `minor` gets of `answer`, and whether the connection could be reused.
    async fn relayed(answer: &[u8], minor: u8) -> (String, bool) {
        let mut up = BufReader::new(answer);
        let head = read_answer_head(&mut up, false).await.unwrap();
        let mut client = Vec::new();
        let to = To { minor, keep: false };
        let relayed = relay_answer(&mut up, &head, &mut client, to).await.unwrap();
        (String::from_utf8(client).unwrap(), relayed.upstream)
    }

    #[tokio::test]
    async fn a_chunked_answer_is_rechunked_for_http11_and_sent_to_the_close_for_http10() {
        let answer =
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
        let (to11, reuse) = relayed(answer, 1).await;
        assert_eq!(
            to11,
            "HTTP/1.1 200 OK\r\nX-A: 1\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n"
        );
        assert!(reuse);
        let (to10, _) = relayed(answer, 0).await;
        assert_eq!(
            to10,
            "HTTP/1.1 200 OK\r\nX-A: 1\r\nConnection: close\r\n\r\nabcde"
        );
    }

    #[tokio::test]
    async fn a_connection_the_server_closes_or_reads_to_the_close_is_not_reused() {
        let (_, reuse) = relayed(
            b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok",
            1,
        )
        .await;
        assert!(!reuse);
        let (got, reuse) = relayed(b"HTTP/1.1 200 OK\r\n\r\nto the end", 1).await;
        assert!(got.ends_with("\r\n\r\nto the end"));
        assert!(!reuse);
        let (_, reuse) = relayed(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\nok", 1).await;
        assert!(!reuse);
    }
}
