//! `secrets` end to end: the value placed only where a secret allows, answers scrubbed, and
//! plaintext HTTP in tunnels held to the tunnel's host.

use super::*;

fn secrets_for(value: &str, hosts: Vec<String>, roots: &[Vec<u8>]) -> (Secrets, String) {
    let secrets = Secrets::new(
        &[SecretSpec {
            name: "KEY".into(),
            value: value.into(),
            hosts,
            headers: Vec::new(),
        }],
        roots,
    )
    .unwrap();
    let ph = secrets.env()[0].1.clone();
    (secrets, ph)
}

#[tokio::test]
async fn plain_http_to_a_secret_host_gets_the_value_in_a_credential_header_only() {
    let (port, upstream) = http_upstream().await;
    let (other_port, other) = http_upstream().await;
    let (refused_port, refused_upstream) = http_upstream().await;
    let (secrets, ph) = secrets_for(
        "the-real-value",
        vec![
            format!("127.0.0.1:{port}"),
            format!("127.0.0.1:{refused_port}"),
        ],
        &[],
    );
    let p = Proxy::with_secrets(
        entries(&[
            &format!("127.0.0.1:{port}"),
            &format!("127.0.0.1:{other_port}"),
            &format!("127.0.0.1:{refused_port}"),
        ]),
        Resolver::default(),
        Some(Arc::new(secrets)),
    );
    let req = |port: u16, path: &str| {
        format!(
            "POST http://127.0.0.1:{port}{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer {ph}\r\nAccept-Encoding: gzip\r\nContent-Length: 4\r\n\r\nbody"
        )
    };
    let answer = ask(&p, &req(port, "/")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(answer.ends_with("2\r\nok\r\n0\r\n\r\n"), "{answer}");
    let got = String::from_utf8(upstream.await.unwrap()).unwrap();
    assert_eq!(
        got,
        format!("POST / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nAuthorization: Bearer the-real-value\r\nContent-Length: 4\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\nbody")
    );
    // Another host gets the placeholder as it is, wherever it is.
    assert!(ask(&p, &req(other_port, &format!("/?k={ph}")))
        .await
        .starts_with("HTTP/1.1 200"));
    let got = String::from_utf8(other.await.unwrap()).unwrap();
    assert!(!got.contains("the-real-value"), "{got}");
    assert!(got.starts_with(&format!("POST /?k={ph} ")), "{got}");
    // The secret's host: a placeholder in the URL is refused, the value written nowhere.
    let _ = p.take_decisions();
    let answer = ask(&p, &req(refused_port, &format!("/?k={ph}"))).await;
    assert!(answer.starts_with("HTTP/1.1 403"), "{answer}");
    assert!(answer.contains("request line"), "{answer}");
    assert!(!answer.contains("the-real-value"), "{answer}");
    refused_upstream.abort();
    let denied: Vec<Decision> = p
        .take_decisions()
        .into_iter()
        .filter(|d| !d.allowed)
        .collect();
    assert_eq!(denied.len(), 1, "{denied:?}");
}

#[tokio::test]
async fn plaintext_http_in_a_tunnel_names_only_its_host_and_is_one_request() {
    let (port, upstream) = http_upstream().await;
    let (echo_port, seen) = echo_upstream().await;
    let (p, _dir) = proxy(
        &[
            &format!("127.0.0.1:{port}"),
            &format!("127.0.0.1:{echo_port}"),
        ],
        None,
    );
    let host = Host::Ip("127.0.0.1".parse().unwrap());
    let tunnel = |port: u16, sends: String| {
        let p = p.clone();
        let host = host.clone();
        async move {
            let (mut c, proxy_side) = tokio::io::duplex(1 << 16);
            let upstream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
            let d = test_decision(&host, port);
            let task = tokio::spawn(async move {
                p.tunnel(proxy_side, upstream, Vec::new(), &host, port, d)
                    .await
            });
            c.write_all(sends.as_bytes()).await.unwrap();
            let answer = read_to_end(&mut c).await;
            task.await.unwrap();
            answer
        }
    };
    // Another virtual host, even after empty lines: refused before a byte goes on.
    for (sends, says) in [
        (
            "GET / HTTP/1.1\r\nHost: other.test\r\n\r\n",
            "does not match",
        ),
        (
            "\r\n\r\nGET / HTTP/1.1\r\nHost: other.test\r\n\r\n",
            "does not match",
        ),
        ("get / http/1.1\r\nHost: other.test\r\n\r\n", "malformed"),
    ] {
        let answer = tunnel(echo_port, sends.into()).await;
        assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
        assert!(answer.contains(says), "{answer}");
    }
    assert_eq!(seen.bytes.load(Ordering::SeqCst), 0);
    // The honest request goes, closed after it; the one behind it never does.
    let answer = tunnel(port, format!("GET /a HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\nGET /b HTTP/1.1\r\nHost: other.test\r\n\r\n")).await;
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let got = String::from_utf8(upstream.await.unwrap()).unwrap();
    assert_eq!(
        got,
        format!("GET /a HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n")
    );
}

/// A TLS server on 127.0.0.1 for `name`, its certificate from a CA of its own: its port, that
/// CA (DER), and the request head it got (it answers 200 and closes).
async fn tls_upstream(
    name: &str,
    answer: &'static [u8],
) -> (u16, Vec<u8>, tokio::task::JoinHandle<Vec<u8>>) {
    use tokio_rustls::rustls::{pki_types::PrivateKeyDer, ServerConfig};
    let ca_key = rcgen::KeyPair::generate().unwrap();
    let mut ca_params = rcgen::CertificateParams::default();
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = rcgen::CertifiedIssuer::self_signed(ca_params, ca_key).unwrap();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec![name.to_owned()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    let cfg = ServerConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        PrivateKeyDer::try_from(key.serialize_der()).unwrap(),
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(cfg));
    let task = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        let mut s = acceptor.accept(tcp).await.unwrap();
        let mut got = Vec::new();
        let mut chunk = [0u8; 4096];
        while !got.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = s.read(&mut chunk).await.unwrap();
            assert!(n > 0, "upstream: early EOF");
            got.extend_from_slice(&chunk[..n]);
        }
        s.write_all(answer).await.unwrap();
        s.shutdown().await.unwrap();
        got
    });
    (port, ca.der().to_vec(), task)
}

/// The client end of a terminated tunnel to `host` (the proxy's half runs in `terminate`), as a
/// box would speak it: TLS trusting the secrets' CA, naming `sni`.
async fn through_terminated(
    name: &str,
    sni: &str,
    request: impl FnOnce(&str) -> String,
    answer: &'static [u8],
) -> (Result<String, String>, Vec<u8>, Decision) {
    use tokio_rustls::rustls::{pki_types::ServerName, ClientConfig, RootCertStore};
    let (port, upstream_ca, got) = tls_upstream(name, answer).await;
    let secrets = Secrets::new(
        &[SecretSpec {
            name: "KEY".into(),
            value: "v4lue".into(),
            hosts: vec![name.to_owned()],
            headers: Vec::new(),
        }],
        &[upstream_ca],
    )
    .unwrap();
    let placeholder = secrets.env()[0].1.clone();
    PLACEHOLDER.with(|p| p.replace(placeholder.clone()));
    let mut roots = RootCertStore::empty();
    roots.add(secrets.ca_der()).unwrap();
    let client_cfg = ClientConfig::builder_with_provider(Arc::new(
        tokio_rustls::rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let p = Proxy::new(entries(&[name]), Resolver::default());
    let host = Host::Name(name.to_owned());
    let upstream = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let decision = test_decision(&host, 443);
    let (ours, theirs) = tokio::io::duplex(1 << 16);
    let req = request(&placeholder);
    let sni = ServerName::try_from(sni.to_owned()).unwrap();
    let client = async move {
        let connector = tokio_rustls::TlsConnector::from(Arc::new(client_cfg));
        let mut tls = connector
            .connect(sni, ours)
            .await
            .map_err(|e| e.to_string())?;
        tls.write_all(req.as_bytes())
            .await
            .map_err(|e| e.to_string())?;
        let mut out = Vec::new();
        let _ = tls.read_to_end(&mut out).await;
        Ok(String::from_utf8_lossy(&out).into_owned())
    };
    let (answer, ()) = timeout(WAIT, async {
        tokio::join!(
            client,
            p.terminate(&secrets, theirs, upstream, Vec::new(), &host, 443, decision)
        )
    })
    .await
    .unwrap();
    let head = if answer.is_ok() {
        got.await.unwrap()
    } else {
        got.abort();
        Vec::new()
    };
    (answer, head, only_decision(&p))
}

const OK: &[u8] = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok";

thread_local! {
    /// The placeholder `through_terminated` drew last (tests check the box sees it).
    static PLACEHOLDER: std::cell::RefCell<String> = const { std::cell::RefCell::new(String::new()) };
}

#[tokio::test]
async fn a_terminated_tunnel_to_a_named_host_carries_the_value() {
    let (answer, head, decision) = through_terminated(
        "api.test",
        "api.test",
        |ph| {
            format!("GET /x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer {ph}\r\nConnection: keep-alive\r\n\r\n")
        },
        OK,
    )
    .await;
    let answer = answer.unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    assert!(answer.ends_with("\r\n\r\n2\r\nok\r\n0\r\n\r\n"), "{answer}");
    let head = String::from_utf8(head).unwrap();
    assert_eq!(
        head,
        "GET /x HTTP/1.1\r\nHost: api.test\r\nAuthorization: Bearer v4lue\r\nAccept-Encoding: identity\r\nConnection: close\r\n\r\n"
    );
    assert!(decision.allowed, "{decision}");
}

#[tokio::test]
async fn what_a_secret_host_echoes_reaches_the_box_as_the_placeholder() {
    // The value split across chunks, in a header, and base64 of it: all scrubbed.
    let (answer, _, _) = through_terminated(
        "api.test",
        "api.test",
        |ph| format!("GET /echo HTTP/1.1\r\nHost: api.test\r\nX-Api-Key: {ph}\r\n\r\n"),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Echo: v4lue\r\nConnection: close\r\n\r\n3\r\nv4l\r\n9\r\nue djRsdW\r\n1\r\nU\r\n0\r\n\r\n",
    )
    .await;
    let answer = answer.unwrap();
    let ph = PLACEHOLDER.with(|p| p.borrow().clone());
    assert!(
        !answer.contains("v4lue") && !answer.contains("djRsdWU"),
        "{answer}"
    );
    assert!(answer.contains(&format!("X-Echo: {ph}\r\n")), "{answer}");
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD_NO_PAD.encode(&ph);
    let body: String = answer
        .split("\r\n\r\n")
        .nth(1)
        .unwrap()
        .split("\r\n")
        .skip(1)
        .step_by(2)
        .collect();
    assert_eq!(body, format!("{ph} {b64}"));
}

#[tokio::test]
async fn a_compressed_answer_from_a_secret_host_is_not_passed() {
    let (answer, _, _) = through_terminated(
        "api.test",
        "api.test",
        |ph| format!("GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: {ph}\r\n\r\n"),
        b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 2\r\n\r\nxx",
    )
    .await;
    let answer = answer.unwrap();
    assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
    assert!(answer.contains("compressed"), "{answer}");
}

#[tokio::test]
async fn a_compressed_answer_in_another_spelling_is_not_passed_either() {
    // A transfer coding before chunked (the body, de-chunked, would still be gzip), and a second
    // Content-Encoding after an identity one: both 502, and the 502 quotes nothing of the
    // server's (a header it echoed could hold the value).
    for answer_bytes in [
        &b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nxx\r\n0\r\n\r\n"[..],
        &b"HTTP/1.1 200 OK\r\nContent-Encoding: identity\r\nContent-Encoding: v4lue-gzip\r\nContent-Length: 2\r\n\r\nxx"[..],
        &b"HTTP/1.1 200 OK\r\nContent-Encoding: identity, br\r\nContent-Length: 2\r\n\r\nxx"[..],
    ] {
        let (answer, _, _) = through_terminated(
            "api.test",
            "api.test",
            |ph| format!("GET / HTTP/1.1\r\nHost: api.test\r\nAuthorization: {ph}\r\n\r\n"),
            answer_bytes,
        )
        .await;
        let answer = answer.unwrap();
        assert!(answer.starts_with("HTTP/1.1 502"), "{answer}");
        assert!(!answer.contains("v4lue"), "{answer}");
    }
}

#[tokio::test]
async fn a_terminated_tunnel_naming_another_host_is_cut() {
    let (answer, _, decision) = through_terminated(
        "api.test",
        "other.test",
        |ph| format!("GET / HTTP/1.1\r\nHost: other.test\r\nAuthorization: Bearer {ph}\r\n\r\n"),
        OK,
    )
    .await;
    assert!(answer.is_err(), "{answer:?}");
    assert!(!decision.allowed);
    assert!(decision.reason.starts_with("SNI mismatch"), "{decision}");
}
