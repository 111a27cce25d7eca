//! Unit tests of `secrets.rs`: shapes, placement, the CA.

use super::*;

fn spec(hosts: &[&str]) -> SecretSpec {
    SecretSpec {
        name: "KEY".into(),
        value: "s3cr3t-value".into(),
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        headers: Vec::new(),
    }
}

/// `head`'s headers with the secrets placed, or why not.
fn placed(
    s: &Secrets,
    host: &Host,
    port: u16,
    line: &str,
    headers: &[(&str, String)],
) -> Result<Vec<(String, String)>, String> {
    let mut h: Vec<(String, Vec<u8>)> = headers
        .iter()
        .map(|(n, v)| ((*n).to_owned(), v.clone().into_bytes()))
        .collect();
    s.place(host, port, line.as_bytes(), &mut h)?;
    Ok(h.into_iter()
        .map(|(n, v)| (n, String::from_utf8(v).unwrap()))
        .collect())
}

#[test]
fn substitutes_for_listed_hosts_only() {
    let s = Secrets::new(&[spec(&["API.example.com", "127.0.0.1:8443"])], &[]).unwrap();
    let (name, ph) = &s.env()[0];
    assert_eq!(name, "KEY");
    assert!(ph.starts_with(PLACEHOLDER_PREFIX));
    assert_eq!(ph.len() % 3, "s3cr3t-value".len() % 3);
    let api = Host::Name("api.example.com".into());
    let out = placed(
        &s,
        &api,
        443,
        "GET / HTTP/1.1",
        &[
            ("Authorization", format!("Bearer {ph}")),
            ("X-Other", "1".into()),
        ],
    )
    .unwrap();
    assert_eq!(out[0].1, "Bearer s3cr3t-value");
    assert_eq!(out[1].1, "1");
    let other = Host::Name("other.example.com".into());
    assert!(!s.applies(&other, 443));
    // Elsewhere the placeholder is worthless and passes as it is, wherever it is.
    let out = placed(
        &s,
        &other,
        443,
        &format!("GET /?k={ph} HTTP/1.1"),
        &[("Origin", ph.clone())],
    )
    .unwrap();
    assert_eq!(&out[0].1, ph);
    let lo = Host::Ip("127.0.0.1".parse().unwrap());
    assert!(s.applies(&lo, 8443));
    assert!(!s.applies(&lo, 443));
    assert!(s.server_config(&api).is_ok());
    assert!(s.server_config(&lo).is_ok());
}

#[test]
fn the_value_goes_only_where_the_secret_says() {
    let s = Secrets::new(&[spec(&["api.test"])], &[]).unwrap();
    let ph = s.env()[0].1.clone();
    let api = Host::Name("api.test".into());
    for (line, headers, says) in [
        (format!("GET /x?k={ph} HTTP/1.1"), vec![], "request line"),
        (format!("GET /{ph}/ HTTP/1.1"), vec![], "request line"),
        (
            "GET / HTTP/1.1".into(),
            vec![(format!("X-{ph}"), "1".to_owned())],
            "header name",
        ),
        (
            "GET / HTTP/1.1".into(),
            vec![("Origin".into(), format!("https://{ph}.test"))],
            "reflect",
        ),
        (
            "OPTIONS / HTTP/1.1".into(),
            vec![("Access-Control-Request-Headers".into(), ph.clone())],
            "reflect",
        ),
        (
            "GET / HTTP/1.1".into(),
            vec![("X-Custom".into(), ph.clone())],
            "add \"X-Custom\" to `secrets.KEY.headers`",
        ),
    ] {
        let h: Vec<(&str, String)> = headers
            .iter()
            .map(|(n, v)| (n.as_str(), v.clone()))
            .collect();
        let e = placed(&s, &api, 443, &line, &h).unwrap_err();
        assert!(e.contains(says), "{e}");
        assert!(!e.contains("s3cr3t-value"), "{e}");
    }
    // Every default credential header takes it, in any case; Basic credentials too.
    for h in DEFAULT_HEADERS {
        let out = placed(
            &s,
            &api,
            443,
            "GET / HTTP/1.1",
            &[(&h.to_ascii_uppercase(), ph.clone())],
        )
        .unwrap();
        assert_eq!(out[0].1, "s3cr3t-value");
    }
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let basic = format!("Basic {}", b64.encode(format!("user:{ph}")));
    let out = placed(&s, &api, 443, "GET / HTTP/1.1", &[("Authorization", basic)]).unwrap();
    assert_eq!(
        out[0].1,
        format!("Basic {}", b64.encode("user:s3cr3t-value"))
    );
    // A secret naming its headers: only those.
    let named = Secrets::new(
        &[SecretSpec {
            headers: vec!["X-Token".into()],
            ..spec(&["api.test"])
        }],
        &[],
    )
    .unwrap();
    let ph = named.env()[0].1.clone();
    assert_eq!(
        placed(
            &named,
            &api,
            443,
            "GET / HTTP/1.1",
            &[("x-token", ph.clone())]
        )
        .unwrap()[0]
            .1,
        "s3cr3t-value"
    );
    assert!(placed(
        &named,
        &api,
        443,
        "GET / HTTP/1.1",
        &[("Authorization", ph)]
    )
    .is_err());
}

#[test]
fn headers_that_servers_reflect_are_refused() {
    for (h, says) in [
        ("Origin", "reflect"),
        ("host", "reflect"),
        ("Access-Control-Request-Headers", "reflect"),
        ("Referer", "reflect"),
        ("Bad Name", "not a header name"),
        ("", "not a header name"),
    ] {
        let e = Secrets::new(
            &[SecretSpec {
                headers: vec![h.into()],
                ..spec(&["a.test"])
            }],
            &[],
        )
        .err()
        .unwrap()
        .to_string();
        assert!(e.contains(says), "{h}: {e}");
        assert!(e.contains("`headers`"), "{e}");
    }
}

#[test]
fn refusals_never_quote_the_value() {
    for (bad, says) in [
        (
            SecretSpec {
                value: "a\r\nb".into(),
                ..spec(&["a.test"])
            },
            "CR",
        ),
        (
            SecretSpec {
                value: String::new(),
                ..spec(&["a.test"])
            },
            "empty",
        ),
        (spec(&[]), "hosts"),
        (spec(&[".a.test"]), "exactly"),
        (spec(&["a.test:0"]), "port"),
    ] {
        let e = Secrets::new(std::slice::from_ref(&bad), &[])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(says), "{e}");
        assert!(!e.contains(&bad.value) || bad.value.is_empty(), "{e}");
    }
    let policy = Policy::parse(&["a.test".into()]).unwrap();
    let e = Secrets::check(&[spec(&["b.test"])], &policy).unwrap_err();
    assert!(e.to_string().contains("egressAllow"), "{e}");
    assert!(Secrets::check(&[spec(&["a.test:443"])], &policy).is_ok());
    assert!(Secrets::check(&[spec(&["a.test"])], &policy).is_ok());
    assert!(Secrets::check(&[spec(&["a.test:8443"])], &policy).is_err());
}

/// A leaf for `name` signed by `s`'s CA, checked as a box's TLS client would check it.
fn verify_leaf(s: &Secrets, name: &str) -> Result<(), rustls::Error> {
    use rustls::client::danger::ServerCertVerifier;
    let params = CertificateParams::new(vec![name.to_owned()]).unwrap();
    let leaf = params
        .signed_by(&KeyPair::generate().unwrap(), &s.ca)
        .unwrap();
    let mut roots = RootCertStore::empty();
    roots.add(s.ca_der()).unwrap();
    let verifier =
        rustls::client::WebPkiServerVerifier::builder_with_provider(roots.into(), provider())
            .build()
            .unwrap();
    verifier
        .verify_server_cert(
            leaf.der(),
            &[],
            &ServerName::try_from(name.to_owned()).unwrap(),
            &[],
            rustls::pki_types::UnixTime::now(),
        )
        .map(|_| ())
}

#[test]
fn the_ca_vouches_for_the_secrets_hosts_only() {
    // Even a leaf the CA's own key signs (the key never leaves this process) is refused for
    // any other name or address: the CA is name-constrained.
    let s = Secrets::new(&[spec(&["api.example.com", "127.0.0.1:8443"])], &[]).unwrap();
    assert!(verify_leaf(&s, "api.example.com").is_ok());
    assert!(verify_leaf(&s, "127.0.0.1").is_ok());
    for other in ["example.com", "other.example.com", "127.0.0.2", "::1"] {
        let e = verify_leaf(&s, other).unwrap_err();
        assert!(
            format!("{e:?}").contains("NameConstraint"),
            "{other}: {e:?}"
        );
    }
    // Names only: no address at all; addresses only: no name at all.
    let names = Secrets::new(&[spec(&["api.example.com"])], &[]).unwrap();
    assert!(verify_leaf(&names, "api.example.com").is_ok());
    assert!(verify_leaf(&names, "10.0.0.1").is_err());
    let ips = Secrets::new(&[spec(&["127.0.0.1"])], &[]).unwrap();
    assert!(verify_leaf(&ips, "127.0.0.1").is_ok());
    assert!(verify_leaf(&ips, "api.example.com").is_err());
    // The proxy's own leaves pass.
    for s in [&s, &names, &ips] {
        for h in &s.list[0].hosts {
            assert!(s.server_config(&h.0).is_ok());
        }
    }
}

#[test]
fn placeholders_differ() {
    let a = Secrets::new(&[spec(&["a.test"])], &[]).unwrap();
    let b = Secrets::new(&[spec(&["a.test"])], &[]).unwrap();
    assert_ne!(a.env()[0].1, b.env()[0].1);
    assert_ne!(a.ca_pem(), b.ca_pem());
    assert!(a.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
}
