//! End to end: a `tokio::io::duplex` client, real TCP upstreams on 127.0.0.1 (reachable only
//! through IP-literal entries), and hosts files for names. No test dials anything but loopback;
//! names mapped to public test addresses are vetted but never dialled.

use super::head::MAX_HEAD;
use super::policy::Host;
use super::resolve::Refusal;
use super::*;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::DuplexStream;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::net::TcpStream;

const ESTABLISHED: &[u8] = b"HTTP/1.1 200 Connection established\r\n\r\n";
/// Generous: tests run on two shared cores.
const WAIT: Duration = Duration::from_secs(10);
/// The head and ClientHello deadlines in tests (30 s and 10 s in service).
const SHORT: Duration = Duration::from_secs(1);

fn entries(list: &[&str]) -> Policy {
    let v: Vec<String> = list.iter().map(|s| s.to_string()).collect();
    Policy::parse(&v).unwrap()
}

/// A proxy with these entries and, optionally, a hosts file (kept alive by the returned dir).
fn proxy(list: &[&str], hosts: Option<&str>) -> (Arc<Proxy>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let resolver = match hosts {
        Some(text) => {
            let path = dir.path().join("hosts");
            std::fs::write(&path, text).unwrap();
            Resolver::with_hosts_file(&path).unwrap()
        }
        None => Resolver::default(),
    };
    let p = Arc::new(Proxy {
        policy: RwLock::new(Arc::new(entries(list))),
        secrets: None,
        cache: None,
        cache_counts: Mutex::default(),
        pool: Default::default(),
        resolver,
        decisions: Mutex::default(),
        head_timeout: SHORT,
        hello_timeout: SHORT,
    });
    (p, dir)
}

/// Starts serving one client; returns the client's end.
fn client(p: &Arc<Proxy>) -> DuplexStream {
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    tokio::spawn(p.clone().serve(theirs));
    ours
}

async fn read_to_end(c: &mut DuplexStream) -> String {
    let mut out = Vec::new();
    timeout(WAIT, c.read_to_end(&mut out))
        .await
        .expect("the proxy should close")
        .unwrap();
    String::from_utf8_lossy(&out).into_owned()
}

/// Sends a request and returns the whole answer (the proxy closes after it).
async fn ask(p: &Arc<Proxy>, request: &str) -> String {
    let mut c = client(p);
    c.write_all(request.as_bytes()).await.unwrap();
    read_to_end(&mut c).await
}

/// What an echo upstream saw: connections accepted, bytes received.
#[derive(Default)]
struct Seen {
    accepted: AtomicUsize,
    bytes: AtomicUsize,
}

/// An upstream on 127.0.0.1 that echoes what it reads, counting connections and bytes.
async fn echo_upstream() -> (u16, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let seen = Arc::new(Seen::default());
    let counts = seen.clone();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            counts.accepted.fetch_add(1, Ordering::SeqCst);
            let counts = counts.clone();
            tokio::spawn(async move {
                let mut chunk = [0u8; 4096];
                while let Ok(n @ 1..) = s.read(&mut chunk).await {
                    counts.bytes.fetch_add(n, Ordering::SeqCst);
                    if s.write_all(&chunk[..n]).await.is_err() {
                        break;
                    }
                }
            });
        }
    });
    (port, seen)
}

/// An upstream that takes one HTTP request (head plus Content-Length body), reports exactly
/// the bytes it received within a short grace period after that, and answers `ok`.
async fn http_upstream() -> (u16, tokio::task::JoinHandle<Vec<u8>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let task = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        loop {
            if let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&got[..end]).to_lowercase();
                let body: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length: "))
                    .map_or(0, |v| v.trim().parse().unwrap());
                if got.len() >= end + 4 + body {
                    break;
                }
            }
            let n = s.read(&mut chunk).await.unwrap();
            assert!(n > 0, "upstream: early EOF");
            got.extend_from_slice(&chunk[..n]);
        }
        // Anything the client sent after its body must not arrive.
        if let Ok(Ok(n)) = timeout(Duration::from_millis(300), s.read(&mut chunk)).await {
            got.extend_from_slice(&chunk[..n]);
        }
        s.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
            .await
            .unwrap();
        got
    });
    (port, task)
}

fn only_decision(p: &Proxy) -> Decision {
    let mut d = p.take_decisions();
    assert_eq!(d.len(), 1, "{d:?}");
    d.remove(0)
}

#[tokio::test]
async fn connect_tunnel_echoes_bytes() {
    let (port, seen) = echo_upstream().await;
    let (p, _dir) = proxy(&[&format!("127.0.0.1:{port}")], None);
    let mut c = client(&p);
    // Bytes right behind the CONNECT head belong to the tunnel.
    c.write_all(
        format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n\x01early ")
            .as_bytes(),
    )
    .await
    .unwrap();
    let mut reply = vec![0u8; ESTABLISHED.len()];
    timeout(WAIT, c.read_exact(&mut reply))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(reply, ESTABLISHED);
    c.write_all(b"hello").await.unwrap();
    let mut echoed = [0u8; 12];
    timeout(WAIT, c.read_exact(&mut echoed))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&echoed, b"\x01early hello");
    c.shutdown().await.unwrap();
    assert_eq!(read_to_end(&mut c).await, "");
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
    let d = only_decision(&p);
    assert!(d.allowed, "{d}");
    assert_eq!((d.host.as_str(), d.port), ("127.0.0.1", port));
    assert!(d.resolved.is_empty());
    assert_eq!(
        d.to_string(),
        format!("egress allowed: 127.0.0.1:{port} (egressAllow `127.0.0.1:{port}`)")
    );
    assert!(p.lookups().is_empty());
}

#[tokio::test]
async fn connect_with_another_spelling_of_a_listed_address() {
    let (port, _) = echo_upstream().await;
    let (p, _dir) = proxy(&[&format!("127.0.0.1:{port}")], None);
    for host in ["0x7f.1", "2130706433", "[::ffff:127.0.0.1]"] {
        let mut c = client(&p);
        c.write_all(format!("CONNECT {host}:{port} HTTP/1.1\r\n\r\n\x01").as_bytes())
            .await
            .unwrap();
        let mut reply = vec![0u8; ESTABLISHED.len() + 1];
        timeout(WAIT, c.read_exact(&mut reply))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(&reply[..ESTABLISHED.len()], ESTABLISHED, "{host}");
        assert_eq!(reply[ESTABLISHED.len()], 1);
    }
}

#[tokio::test]
async fn plain_http_is_forwarded_in_origin_form() {
    let (port, upstream) = http_upstream().await;
    let (p, _dir) = proxy(&[&format!("127.0.0.1:{port}")], None);
    let request = format!(
        "POST http://127.0.0.1:{port}/path?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\
         Proxy-Connection: keep-alive\r\nConnection: keep-alive, X-Hop, Host\r\nX-Hop: 1\r\n\
         Keep-Alive: timeout=5\r\nTE: trailers\r\nTrailer: X\r\nUpgrade: h2c\r\n\
         Proxy-Authorization: Basic c2VjcmV0\r\nX-Keep: 2\r\nContent-Length: 5\r\n\r\n\
         helloGET http://127.0.0.1:{port}/smuggled HTTP/1.1\r\n\r\n"
    );
    let answer = ask(&p, &request).await;
    assert_eq!(answer, "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok");
    let got = String::from_utf8(upstream.await.unwrap()).unwrap();
    assert_eq!(
        got,
        format!(
            "POST /path?q=1 HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Keep: 2\r\n\
             Content-Length: 5\r\nConnection: close\r\n\r\nhello"
        )
    );
    let d = only_decision(&p);
    assert!(d.allowed, "{d}");
}

#[tokio::test]
async fn plain_http_get_keeps_host_and_version() {
    let (port, upstream) = http_upstream().await;
    let (p, _dir) = proxy(&[&format!("127.0.0.1:{port}")], None);
    let answer = ask(
        &p,
        &format!(
            "GET http://127.0.0.1:{port} HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAccept: */*\r\n\r\n"
        ),
    )
    .await;
    assert!(answer.ends_with("ok"), "{answer}");
    let got = String::from_utf8(upstream.await.unwrap()).unwrap();
    assert_eq!(
        got,
        format!(
            "GET / HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\nAccept: */*\r\nConnection: close\r\n\r\n"
        )
    );
}

#[tokio::test]
async fn a_body_arriving_later_is_forwarded_exactly() {
    let (port, upstream) = http_upstream().await;
    let (p, _dir) = proxy(&[&format!("127.0.0.1:{port}")], None);
    let mut c = client(&p);
    c.write_all(format!("PUT http://127.0.0.1:{port}/f HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Length: 10\r\n\r\n01234").as_bytes())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    c.write_all(b"56789 and more").await.unwrap();
    let answer = read_to_end(&mut c).await;
    assert!(answer.ends_with("ok"), "{answer}");
    let got = String::from_utf8(upstream.await.unwrap()).unwrap();
    assert!(got.ends_with("\r\n\r\n0123456789"), "{got:?}");
}

#[tokio::test]
async fn a_denied_name_is_never_resolved() {
    let (p, _dir) = proxy(
        &["pypi.org", ".example.com"],
        Some("198.51.100.7 evil.test\n"),
    );
    for request in [
        "CONNECT evil.test:443 HTTP/1.1\r\n\r\n",
        "GET http://evil.test/ HTTP/1.1\r\nHost: evil.test\r\n\r\n",
        "CONNECT example.com.evil.test:443 HTTP/1.1\r\n\r\n",
        "CONNECT badexample.com:443 HTTP/1.1\r\n\r\n",
    ] {
        let answer = ask(&p, request).await;
        assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
        assert!(answer.contains("\r\nConnection: close\r\n"), "{answer}");
        assert!(
            answer.ends_with("\r\n\r\nblocked by kern-sandbox egress policy: not in egressAllow\n"),
            "{answer}"
        );
    }
    assert!(p.lookups().is_empty(), "{:?}", p.lookups());
    let d = p.take_decisions();
    assert_eq!(d.len(), 4);
    assert!(d.iter().all(|d| !d.allowed && d.resolved.is_empty()));
    assert_eq!(
        d[0].to_string(),
        "egress denied: evil.test:443 (not in egressAllow; not resolved)"
    );
    assert!(p.take_decisions().is_empty(), "drained");
}

#[tokio::test]
async fn a_name_resolving_to_loopback_is_refused() {
    let (port, seen) = echo_upstream().await;
    let (p, _dir) = proxy(
        &[&format!("rebind.test:{port}")],
        Some("127.0.0.1 rebind.test\n"),
    );
    let answer = ask(&p, &format!("CONNECT rebind.test:{port} HTTP/1.1\r\n\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(
        answer.contains("rebind.test resolves to 127.0.0.1"),
        "{answer}"
    );
    assert_eq!(p.lookups().get("rebind.test"), Some(&1));
    let d = only_decision(&p);
    assert!(!d.allowed);
    assert_eq!(d.resolved, vec![IpAddr::from([127, 0, 0, 1])]);
    assert!(d.to_string().ends_with("; resolved 127.0.0.1)"), "{d}");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 0, "never dialled");
}

#[tokio::test]
async fn every_resolved_address_is_checked() {
    let hosts = "198.51.100.7 mixed.test\n169.254.169.254 mixed.test\n\
                 10.0.0.1 private.test\n::ffff:169.254.169.254 mapped.test\n\
                 fd00:ec2::254 metadata6.test\n64:ff9b::a9fe:a9fe nat64.test\n\
                 2002:a9fe:a9fe::1 sixtofour.test\n100.64.0.1 cgnat.test\n";
    let (p, _dir) = proxy(&[".test"], Some(hosts));
    for (name, ip) in [
        ("mixed.test", "169.254.169.254"),
        ("private.test", "10.0.0.1"),
        ("mapped.test", "169.254.169.254"),
        ("metadata6.test", "fd00:ec2::254"),
        ("nat64.test", "64:ff9b::a9fe:a9fe"),
        ("sixtofour.test", "2002:a9fe:a9fe::1"),
        ("cgnat.test", "100.64.0.1"),
    ] {
        let answer = ask(&p, &format!("CONNECT {name}:443 HTTP/1.1\r\n\r\n")).await;
        assert!(answer.starts_with("HTTP/1.1 403"), "{name}: {answer}");
        assert!(
            answer.contains(&format!("resolves to {ip}, a ")),
            "{name}: {answer}"
        );
    }
}

#[tokio::test]
async fn an_allowed_name_is_vetted_to_its_public_addresses() {
    // Vetted only: 198.51.100.0/24 is not this machine's to dial.
    let (p, _dir) = proxy(
        &[".mirror.test"],
        Some("198.51.100.7 a.mirror.test\n198.51.100.8 a.mirror.test\n"),
    );
    let host = Host::Name("a.mirror.test".into());
    let Ok(v) = p.vet(&host, 443).await else {
        panic!("should be allowed");
    };
    let want: Vec<IpAddr> = vec![[198, 51, 100, 7].into(), [198, 51, 100, 8].into()];
    assert_eq!(v.dial, want);
    assert_eq!(v.resolved, want);
    assert_eq!(v.entry, ".mirror.test");
    assert!(matches!(
        p.vet(&host, 22).await,
        Err(Refusal::Denied { .. })
    ));
    assert_eq!(
        p.lookups().get("a.mirror.test"),
        Some(&1),
        "the port is checked before resolving"
    );
    let d = Decision {
        host: "pypi.org".into(),
        port: 443,
        allowed: true,
        reason: "egressAllow `pypi.org`".into(),
        resolved: vec![[203, 0, 113, 80].into()],
        problem: None,
    };
    assert_eq!(
        d.to_string(),
        "egress allowed: pypi.org:443 -> 203.0.113.80 (egressAllow `pypi.org`)"
    );
}

#[tokio::test]
async fn loopback_literals_in_every_encoding_are_denied() {
    let (p, _dir) = proxy(&["pypi.org"], None);
    for host in [
        "127.0.0.1",
        "2130706433",
        "0177.0.0.1",
        "0x7f.1",
        "0x7f000001",
        "127.1",
        "127.0.0.1.",
        "[::1]",
        "[::ffff:127.0.0.1]",
        "[::ffff:7f00:1]",
    ] {
        for request in [
            format!("CONNECT {host}:443 HTTP/1.1\r\n\r\n"),
            format!("GET http://{host}/ HTTP/1.1\r\nHost: {host}\r\n\r\n"),
        ] {
            let answer = ask(&p, &request).await;
            assert!(answer.starts_with("HTTP/1.1 403"), "{request}: {answer}");
            assert!(answer.contains("IP address not in egressAllow"), "{answer}");
        }
    }
    assert!(p
        .take_decisions()
        .iter()
        .all(|d| !d.allowed && (d.host == "127.0.0.1" || d.host == "::1")));
}

#[tokio::test]
async fn a_port_not_listed_is_denied() {
    let (port, seen) = echo_upstream().await;
    let (p, _dir) = proxy(
        &["pypi.org", &format!("127.0.0.1:{port}")],
        Some("203.0.113.80 pypi.org\n"),
    );
    let answer = ask(&p, "CONNECT pypi.org:22 HTTP/1.1\r\n\r\n").await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(
        answer.contains("port 22 is not in egressAllow for pypi.org"),
        "{answer}"
    );
    let other = if port == 65535 { port - 1 } else { port + 1 };
    let answer = ask(&p, &format!("CONNECT 127.0.0.1:{other} HTTP/1.1\r\n\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    let answer = ask(
        &p,
        "GET http://pypi.org:8080/ HTTP/1.1\r\nHost: pypi.org:8080\r\n\r\n",
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(p.lookups().is_empty(), "denied before resolving");
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn tls_with_another_sni_is_cut_before_a_byte_is_forwarded() {
    let (port, seen) = echo_upstream().await;
    let (p, _dir) = proxy(&[&format!("127.0.0.1:{port}")], None);
    let mut c = client(&p);
    let mut request = format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").into_bytes();
    request.extend(tls::test_client_hello(Some("other.test"), 100));
    c.write_all(&request).await.unwrap();
    // The 200 and then nothing: the echo upstream never saw the hello.
    assert_eq!(read_to_end(&mut c).await.as_bytes(), ESTABLISHED);
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(seen.bytes.load(Ordering::SeqCst), 0);
    let d = only_decision(&p);
    assert!(!d.allowed);
    assert!(d.reason.starts_with("SNI mismatch"), "{d}");
}

#[tokio::test]
async fn tls_without_sni_to_a_listed_address_passes() {
    let (port, _) = echo_upstream().await;
    let (p, _dir) = proxy(&[&format!("127.0.0.1:{port}")], None);
    let mut c = client(&p);
    c.write_all(format!("CONNECT 127.0.0.1:{port} HTTP/1.1\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let hello = tls::test_client_hello(None, 64);
    // In pieces, so the proxy has to reassemble before judging.
    for piece in hello.chunks(7) {
        c.write_all(piece).await.unwrap();
    }
    let mut back = vec![0u8; ESTABLISHED.len() + hello.len()];
    timeout(WAIT, c.read_exact(&mut back))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(&back[ESTABLISHED.len()..], hello.as_slice());
    assert!(only_decision(&p).allowed);
}

/// The tunnel on its own, with an in-memory upstream, for what loopback cannot show: named
/// hosts and port 443.
async fn run_tunnel(
    p: &Arc<Proxy>,
    host: &str,
    port: u16,
    client_sends: Vec<u8>,
) -> (Vec<u8>, Decision) {
    let (mut c, proxy_side) = tokio::io::duplex(1 << 16);
    let (upstream_here, mut upstream_far) = tokio::io::duplex(1 << 16);
    let host = canonical_host(host).unwrap();
    let d = test_decision(&host, port);
    let p2 = p.clone();
    let task = tokio::spawn(async move {
        p2.tunnel(proxy_side, upstream_here, Vec::new(), &host, port, d)
            .await
    });
    c.write_all(&client_sends).await.unwrap();
    c.shutdown().await.unwrap();
    let mut got = Vec::new();
    let _ = upstream_far.read_to_end(&mut got).await;
    drop(upstream_far);
    task.await.unwrap();
    (got, only_decision(p))
}

#[tokio::test]
async fn port_443_requires_a_hello_naming_the_host() {
    let (p, _dir) = proxy(&[], None);
    let hello = tls::test_client_hello(Some("Mirror.Test."), 16384);
    let (got, d) = run_tunnel(&p, "mirror.test", 443, hello.clone()).await;
    assert_eq!(got, hello);
    assert!(d.allowed, "{d}");
    let (got, d) = run_tunnel(
        &p,
        "mirror.test",
        443,
        tls::test_client_hello(Some("other.test"), 16384),
    )
    .await;
    assert!(got.is_empty());
    assert!(d.reason.starts_with("SNI mismatch") && !d.allowed, "{d}");
    let (got, d) = run_tunnel(&p, "mirror.test", 443, tls::test_client_hello(None, 16384)).await;
    assert!(got.is_empty());
    assert!(d.reason.starts_with("SNI mismatch"), "{d}");
    let (got, d) = run_tunnel(&p, "mirror.test", 443, b"GET / HTTP/1.1\r\n\r\n".to_vec()).await;
    assert!(got.is_empty());
    assert!(d.reason.contains("not a TLS handshake"), "{d}");
    let (got, d) = run_tunnel(&p, "mirror.test", 443, hello[..20].to_vec()).await;
    assert!(got.is_empty());
    assert!(!d.allowed, "{d}");
    // On other ports plain bytes pass, and TLS is screened all the same.
    let (got, d) = run_tunnel(&p, "mirror.test", 8443, b"SSH-2.0-x\r\n".to_vec()).await;
    assert_eq!(got, b"SSH-2.0-x\r\n");
    assert!(d.allowed);
    let (got, d) = run_tunnel(
        &p,
        "mirror.test",
        8443,
        tls::test_client_hello(Some("other.test"), 50),
    )
    .await;
    assert!(got.is_empty());
    assert!(d.reason.starts_with("SNI mismatch"), "{d}");
    // A client that sends nothing and leaves is not a refusal.
    let (got, d) = run_tunnel(&p, "mirror.test", 443, Vec::new()).await;
    assert!(got.is_empty());
    assert!(d.allowed, "{d}");
}

#[tokio::test]
async fn a_silent_tls_client_is_cut_at_the_deadline() {
    let (p, _dir) = proxy(&[], None);
    let (c, proxy_side) = tokio::io::duplex(1 << 16);
    let (upstream_here, _upstream_far) = tokio::io::duplex(1 << 16);
    let host = Host::Name("mirror.test".into());
    let d = test_decision(&host, 443);
    timeout(
        WAIT,
        p.tunnel(proxy_side, upstream_here, Vec::new(), &host, 443, d),
    )
    .await
    .unwrap();
    let d = only_decision(&p);
    assert!(
        d.reason.contains("no complete TLS ClientHello within"),
        "{d}"
    );
    drop(c);
}

#[tokio::test]
async fn host_header_must_match_the_target() {
    let (port, seen) = echo_upstream().await;
    let (p, _dir) = proxy(&[&format!("127.0.0.1:{port}")], None);
    for headers in [
        "Host: evil.test\r\n".to_owned(),
        format!("Host: 127.0.0.1:{}\r\n", port ^ 1),
        "Host: 127.0.0.1\r\n".to_owned(),
        String::new(),
        format!("Host: 127.0.0.1:{port}\r\nHost: evil.test\r\n"),
    ] {
        let answer = ask(
            &p,
            &format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\n{headers}\r\n"),
        )
        .await;
        assert!(
            answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{headers:?}: {answer}"
        );
        assert!(answer.contains("Host"), "{answer}");
    }
    assert_eq!(p.take_decisions().len(), 5);
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn a_matching_host_header_may_be_spelled_differently() {
    let (port, upstream) = http_upstream().await;
    let (p, _dir) = proxy(&[&format!("127.0.0.1:{port}")], None);
    let answer = ask(
        &p,
        &format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 0x7f.1:{port}\r\n\r\n"),
    )
    .await;
    assert!(answer.ends_with("ok"), "{answer}");
    upstream.await.unwrap();
}

#[tokio::test]
async fn malformed_requests_get_400() {
    let (p, _dir) = proxy(&["pypi.org"], None);
    for request in [
        "GET / HTTP/1.1\r\nHost: pypi.org\r\n\r\n",
        "GET https://pypi.org/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n",
        "GET http://pypi%2eorg/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n",
        "GET http://user@pypi.org/ HTTP/1.1\r\nHost: pypi.org\r\n\r\n",
        "CONNECT pypi.org HTTP/1.1\r\n\r\n",
        "CONNECT [::1:443 HTTP/1.1\r\n\r\n",
        "CONNECT pypi%2eorg:443 HTTP/1.1\r\n\r\n",
        "not http at all\r\n\r\n",
    ] {
        let answer = ask(&p, request).await;
        assert!(
            answer.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{request:?}: {answer}"
        );
        assert!(answer.contains("Connection: close"), "{answer}");
    }
    assert!(p.lookups().is_empty());
}

#[tokio::test]
async fn transfer_encoding_and_bad_lengths_are_refused() {
    let (p, _dir) = proxy(&["pypi.org"], None);
    let base = "POST http://pypi.org/ HTTP/1.1\r\nHost: pypi.org\r\n";
    let answer = ask(
        &p,
        &format!("{base}Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"),
    )
    .await;
    assert!(
        answer.starts_with("HTTP/1.1 411 Length Required\r\n"),
        "{answer}"
    );
    let answer = ask(
        &p,
        &format!("{base}Content-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n"),
    )
    .await;
    assert!(answer.starts_with("HTTP/1.1 411"), "{answer}");
    for cl in [
        "Content-Length: -1\r\n",
        "Content-Length: 1,1\r\n",
        "Content-Length: 1\r\nContent-Length: 1\r\n",
    ] {
        let answer = ask(&p, &format!("{base}{cl}\r\n")).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{cl:?}: {answer}");
    }
    assert!(p.lookups().is_empty(), "refused before resolving");
}

#[tokio::test]
async fn an_oversized_head_gets_431() {
    let (p, _dir) = proxy(&["pypi.org"], None);
    let mut c = client(&p);
    let big = format!(
        "GET http://pypi.org/ HTTP/1.1\r\nX: {}\r\n",
        "a".repeat(MAX_HEAD)
    );
    // The proxy may close before reading everything; only its answer matters.
    let _ = c.write_all(big.as_bytes()).await;
    let answer = read_to_end(&mut c).await;
    assert!(answer.starts_with("HTTP/1.1 431 "), "{answer}");
}

#[tokio::test]
async fn a_silent_client_is_dropped_at_the_deadline() {
    let (p, _dir) = proxy(&["pypi.org"], None);
    let (mut c, theirs) = tokio::io::duplex(1024);
    let started = tokio::time::Instant::now();
    timeout(WAIT, p.clone().serve(theirs)).await.unwrap();
    assert!(started.elapsed() >= SHORT);
    let mut out = Vec::new();
    c.read_to_end(&mut out).await.unwrap();
    assert!(out.is_empty());
}

#[test]
fn serve_is_send() {
    fn assert_send<T: Send>(_: T) {}
    let (p, _dir) = proxy(&[], None);
    let (_, theirs) = tokio::io::duplex(16);
    assert_send(p.serve(theirs));
}

#[test]
fn decisions_serialize() {
    let d = Decision {
        host: "::1".into(),
        port: 8443,
        allowed: false,
        reason: "IP address not in egressAllow".into(),
        resolved: Vec::new(),
        problem: None,
    };
    assert_eq!(
        d.to_string(),
        "egress denied: [::1]:8443 (IP address not in egressAllow; not resolved)"
    );
    let json = serde_json::to_value(&d).unwrap();
    assert_eq!(json["host"], "::1");
    assert_eq!(json["allowed"], false);
}

/// Sends a POST with a `len`-byte body to a denied host and insists the 403 arrives whole.
async fn refused_upload_is_answered<S: AsyncRead + AsyncWrite + Unpin>(mut c: S, len: usize) {
    let head = format!(
        "POST http://evil.test/upload HTTP/1.1\r\nHost: evil.test\r\nContent-Length: {len}\r\n\r\n"
    );
    c.write_all(head.as_bytes()).await.unwrap();
    c.write_all(&vec![b'x'; len]).await.unwrap();
    let mut answer = Vec::new();
    timeout(WAIT, c.read_to_end(&mut answer))
        .await
        .unwrap()
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
}

#[tokio::test]
async fn a_refused_body_over_real_tcp_still_gets_its_answer() {
    // Over TCP an unread body would turn the close into a reset that can eat the 403.
    let (p, _dir) = proxy(&["pypi.org"], None);
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = p.clone();
    tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        server.serve(s).await;
    });
    refused_upload_is_answered(TcpStream::connect(addr).await.unwrap(), 256 * 1024).await;
}

#[tokio::test]
async fn a_refused_body_over_a_unix_socket_still_gets_its_answer() {
    let (p, _dir) = proxy(&["pypi.org"], None);
    let (c, theirs) = tokio::net::UnixStream::pair().unwrap();
    tokio::spawn(p.clone().serve(theirs));
    refused_upload_is_answered(c, 100 * 1024).await;
}

#[tokio::test]
async fn a_new_policy_holds_for_the_next_connection() {
    let (port, upstream) = http_upstream().await;
    let (p, _dir) = proxy(&[], None);
    let req = format!("GET http://127.0.0.1:{port}/ HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n");
    assert!(ask(&p, &req).await.starts_with("HTTP/1.1 403"));
    p.set_policy(entries(&[&format!("127.0.0.1:{port}")]));
    assert!(ask(&p, &req).await.starts_with("HTTP/1.1 200"));
    upstream.await.unwrap();
    p.set_policy(entries(&[]));
    assert!(ask(&p, &req).await.starts_with("HTTP/1.1 403"));
}

/// The decision a test hands to an exchange it drives: `host:port`, allowed.
fn test_decision(host: &Host, port: u16) -> Decision {
    Decision {
        host: host.text(),
        port,
        allowed: true,
        reason: "test".into(),
        resolved: Vec::new(),
        problem: None,
    }
}

mod secrets;

#[test]
fn host_localhost_names_a_loopback_target_and_nothing_else() {
    use super::head::host_names_target;
    let v4 = Host::Ip("127.0.0.1".parse().unwrap());
    let v6 = Host::Ip("::1".parse().unwrap());
    let public = Host::Ip("93.184.216.34".parse().unwrap());
    let name = Host::Name("example.com".into());
    assert_eq!(
        host_names_target(&[b"localhost:8000"], &v4, 8000, 80),
        Ok(())
    );
    assert_eq!(
        host_names_target(&[b"LOCALHOST:8000"], &v6, 8000, 80),
        Ok(())
    );
    assert!(host_names_target(&[b"localhost:8001"], &v4, 8000, 80).is_err());
    assert!(host_names_target(&[b"localhost:8000"], &public, 8000, 80).is_err());
    assert!(host_names_target(&[b"localhost"], &name, 80, 80).is_err());
}
