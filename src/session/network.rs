//! The ways out of a box: none (the default: a namespace with only `lo`), the host's network
//! (`network: true`, and the `setup` box with `setupNetwork: "host"`), or the egress proxy
//! (`egressAllow`, and the `setup` box by default).
//!
//! A box with any network trusts the host's CA bundle: networks that intercept TLS (corporate
//! proxies, and this project's CI machine) present their own CA, and without it every TLS client
//! in the box fails verification. With the proxy, TLS still runs end to end between the box and
//! the server (CONNECT); only the names and addresses are the proxy's to decide, except for the
//! hosts of `secrets` and the package cache's (`proxy::PackageCache`), whose TLS the proxy
//! terminates with a CA of the session's own, which the boxes trust besides the host's CAs
//! (`intercepting`, `trust_bundle`).

use crate::engine::shared::handoff::BoxFds;
use crate::engine::shared::spec::{BoxSpec, EgressSpec, EtcOverride};
use crate::error::Error;
use crate::error::Result;
use crate::image::net::{NO_PROXY_VARS, PROXY_VARS};
use crate::proxy::{Decision, PackageCache, Policy, Proxy, SecretSpec, Secrets};
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::Path;
use std::sync::Arc;

/// The port the egress relay listens on inside the box (its own namespace: nothing else there).
pub const RELAY_PORT: u16 = 3128;
/// Node's switch to read the proxy variables, set with them.
const NODE_PROXY_VAR: &str = "NODE_USE_ENV_PROXY";
/// The host CA bundle's name in a networked box's `/etc`.
pub const CA_NAME: &str = "kern-host-ca.crt";
/// The variables TLS clients read for their CA bundle: OpenSSL and curl, Python's requests and
/// pip, Node.
const CA_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "CURL_CA_BUNDLE",
    "NODE_EXTRA_CA_CERTS",
];

fn set(env: &mut Vec<(String, String)>, k: &str, v: &str) {
    env.retain(|(ek, _)| ek != k);
    env.push((k.to_string(), v.to_string()));
}

/// Binds the host CA bundle at `/etc/kern-host-ca.crt` and points the TLS clients at it.
fn trust_host_ca(spec: &mut BoxSpec, ca: Option<&Path>) {
    let Some(ca) = ca else {
        return;
    };
    spec.etc.retain(|e| e.name() != CA_NAME);
    spec.etc.push(EtcOverride::HostFile {
        name: CA_NAME.into(),
        source: ca.to_path_buf(),
    });
    let path = format!("/etc/{CA_NAME}");
    for k in CA_VARS {
        set(&mut spec.env, k, &path);
    }
}

/// As `trust_host_ca`, with the bundle's text (`secrets`: the host's CAs and the secrets' CA).
pub fn trust_bundle(spec: &mut BoxSpec, pem: &str) {
    spec.etc.retain(|e| e.name() != CA_NAME);
    spec.etc.push(EtcOverride::Contents {
        name: CA_NAME.into(),
        contents: pem.to_owned(),
    });
    let path = format!("/etc/{CA_NAME}");
    for k in CA_VARS {
        set(&mut spec.env, k, &path);
    }
}

/// The host's network: its namespace, its resolver configuration and its CA bundle.
pub fn host(spec: &mut BoxSpec, ca: Option<&Path>) {
    spec.host_network = true;
    if spec.egress.take().is_some() {
        // The relay's variables would point at a relay this box doesn't have.
        spec.env.retain(|(k, _)| {
            !PROXY_VARS.contains(&k.as_str())
                && !NO_PROXY_VARS.contains(&k.as_str())
                && k != NODE_PROXY_VAR
        });
    }
    let resolv = std::fs::read_to_string("/etc/resolv.conf").unwrap_or_default();
    spec.etc.retain(|e| e.name() != "resolv.conf");
    spec.etc.push(EtcOverride::Contents {
        name: "resolv.conf".into(),
        contents: resolv,
    });
    trust_host_ca(spec, ca)
}

/// The allowlist proxy: the box's own namespace with only `lo`, where the relay listens, the
/// proxy variables pointing at it, no resolver, and the host's CA bundle.
pub fn egress(spec: &mut BoxSpec, ca: Option<&Path>, policy: &Policy) {
    spec.host_network = false;
    spec.egress = Some(EgressSpec {
        port: RELAY_PORT,
        direct: policy.loopback_literals(),
    });
    let url = format!("http://127.0.0.1:{RELAY_PORT}");
    for k in PROXY_VARS {
        set(&mut spec.env, k, &url);
    }
    for k in NO_PROXY_VARS {
        set(&mut spec.env, k, "localhost,127.0.0.1,::1");
    }
    // Node's own fetch reads the proxy variables only when asked to (Node 24 and later).
    set(&mut spec.env, NODE_PROXY_VAR, "1");
    // Only the proxy resolves names: the box has no resolver to ask.
    spec.etc.retain(|e| e.name() != "resolv.conf");
    spec.etc.push(EtcOverride::Contents {
        name: "resolv.conf".into(),
        contents: "# kern-sandbox: no resolver in the box; names are resolved by the egress proxy (HTTP_PROXY)\n".into(),
    });
    trust_host_ca(spec, ca)
}

/// The filtering proxy for `policy`, resolving names as `KERN_EGRESS_HOSTS` and the system say.
pub fn proxy(policy: Policy) -> Result<Arc<Proxy>> {
    Ok(Proxy::new(policy, resolver()?))
}

fn resolver() -> Result<crate::proxy::Resolver> {
    crate::proxy::Resolver::from_env()
        .map_err(|e| crate::error::Error::Invalid(format!("KERN_EGRESS_HOSTS: {e}")))
}

/// A proxy that terminates some tunnels (`secrets`' hosts, the package cache's) at work: the
/// proxy, the placeholders for the boxes' environment, and the CA bundle the boxes trust
/// (`host_ca`'s certificates and the proxy's CA certificate; the CA's key is only in this
/// process's memory).
pub struct Intercepting {
    pub proxy: Arc<Proxy>,
    pub env: Vec<(String, String)>,
    /// PEM: the host's CA bundle (when boxes trust it) and the proxy's CA certificate.
    pub bundle: String,
}

/// The proxy for `policy` with `secrets` (maybe none) and `cache`: its CA made, the hosts it
/// terminates verified against the store pulls use (`image::net::Trust`: the system's, and
/// `KERN_REGISTRY_CA`).
pub fn intercepting(
    policy: Policy,
    secrets: &[SecretSpec],
    cache: Option<Arc<PackageCache>>,
    host_ca: Option<&Path>,
) -> Result<Intercepting> {
    let trust = crate::image::net::Trust::from_env()
        .map_err(|e| Error::Invalid(format!("the egress proxy: the system CA store: {e}")))?;
    let roots = trust.der_certificates();
    let made = match &cache {
        Some(_) => Secrets::with_package_cache(secrets, &roots),
        None => Secrets::new(secrets, &roots),
    }
    .map_err(|e| Error::Invalid(format!("option `secrets`: {e}")))?;
    let fail = |e: std::io::Error| Error::Runtime(format!("the egress proxy's CA bundle: {e}"));
    let mut pem = match host_ca {
        Some(p) => std::fs::read_to_string(p).map_err(fail)?,
        None => String::new(),
    };
    if !pem.is_empty() && !pem.ends_with('\n') {
        pem.push('\n');
    }
    pem.push_str(&made.ca_pem());
    let env = made.env().to_vec();
    let proxy = Proxy::intercepting(policy, resolver()?, Some(Arc::new(made)), cache);
    Ok(Intercepting {
        proxy,
        env,
        bundle: pem,
    })
}

/// The package cache of a session whose boxes reach the network through the egress proxy
/// (`packageCache`); `None` when off. The default place that can't be made turns it off with
/// a note in `notes`; a directory the caller named that can't be is an error. With no host CA
/// bundle (`host_ca`: `KERN_HOST_CA=0`, or none found) it is off too, with a note: the boxes
/// would have to trust a bundle of the proxy's CA alone, and every other host would fail.
pub fn package_cache(
    config: &crate::config::Config,
    host_ca: Option<&Path>,
    notes: &mut Vec<String>,
) -> Result<Option<Arc<PackageCache>>> {
    use crate::config::{Network, PackageCacheChoice, SetupNetwork};
    let proxied = matches!(config.network, Network::Egress(_))
        || (config.setup.is_some() && config.setup_network == SetupNetwork::Public);
    if !proxied {
        return Ok(None);
    }
    let dir = match &config.package_cache {
        PackageCacheChoice::Off => return Ok(None),
        PackageCacheChoice::At(dir) => dir.clone(),
        PackageCacheChoice::Default => match PackageCache::default_dir() {
            Ok(d) => d,
            Err(e) => {
                notes.push(format!("note: package cache off: {e}; set packageCache to a directory to keep package files in, or to false"));
                return Ok(None);
            }
        },
    };
    if host_ca.is_none() {
        notes.push("note: package cache off: the boxes trust no host CA bundle (KERN_HOST_CA=0, or none found), and the cache needs them to trust its proxy's CA beside the public ones; unset KERN_HOST_CA, or set packageCache: false to say so".into());
        return Ok(None);
    }
    match PackageCache::open(&dir) {
        Ok(c) => Ok(Some(Arc::new(c))),
        Err(e) if config.package_cache == PackageCacheChoice::Default => {
            notes.push(format!("note: package cache off: {e}; set packageCache to a directory to keep package files in, or to false"));
            Ok(None)
        }
        Err(e) => crate::invalid!("option `packageCache`: {e}"),
    }
}

/// The egress line of one box: the end kern passes to the box's relay, and a task on our end
/// that serves every connection the relay hands over, until the box is gone.
pub struct Line {
    theirs: OwnedFd,
}

impl Line {
    pub fn open(proxy: &Arc<Proxy>) -> Result<Line> {
        let (ours, theirs) = box_socketpair("egress relay", None)?;
        tokio::spawn(serve_box(ours, proxy.clone()));
        Ok(Line { theirs })
    }

    pub fn fd(&self) -> &OwnedFd {
        &self.theirs
    }
}

/// The descriptors for one box: its channel, and its egress line when it has one.
pub fn fds<'a>(channel: Option<&'a OwnedFd>, line: Option<&'a Line>) -> BoxFds<&'a OwnedFd> {
    BoxFds {
        channel,
        egress: line.map(Line::fd),
        ..BoxFds::default()
    }
}

/// How many connections one box may have open through the proxy at once. Each costs the
/// caller's process two descriptors: without a cap, a box could exhaust them and break its host.
pub const MAX_CONNECTIONS_PER_BOX: usize = 256;

/// Receives the box's connections (each a socket, by SCM_RIGHTS) and serves each with the
/// proxy, at most `MAX_CONNECTIONS_PER_BOX` at a time (one more is closed at once). Ends when
/// the box's relay is gone.
async fn serve_box(line: tokio::net::UnixStream, proxy: Arc<Proxy>) {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS_PER_BOX));
    let mut buf = [0u8; 64];
    loop {
        if line.readable().await.is_err() {
            return;
        }
        let got = line.try_io(tokio::io::Interest::READABLE, || {
            crate::engine::shared::sys::recv_with_fds(line.as_raw_fd(), &mut buf)
        });
        match got {
            Ok((0, _)) => return,
            Ok((n, fds)) => {
                // `c`: a client of the proxy; `d<ip> <port>`: a tunnel to a listed loopback
                // address (the proxy checks it as any other destination).
                let direct = std::str::from_utf8(&buf[..n])
                    .ok()
                    .and_then(|t| t.strip_prefix('d'))
                    .and_then(|t| t.split_once(' '))
                    .and_then(|(ip, port)| Some((ip.to_string(), port.parse::<u16>().ok()?)));
                for fd in fds {
                    let Ok(slot) = slots.clone().try_acquire_owned() else {
                        tracing::warn!("egress: a box has {MAX_CONNECTIONS_PER_BOX} connections open; closing another");
                        continue;
                    };
                    let conn = std::net::TcpStream::from(fd);
                    if conn.set_nonblocking(true).is_err() {
                        continue;
                    }
                    if let Ok(conn) = tokio::net::TcpStream::from_std(conn) {
                        // The proxy answers in a few writes (a head, then a body); with Nagle's
                        // algorithm the last of them waited for the box's delayed ACK, about
                        // 40 ms per answer on a kept-alive connection.
                        let _ = conn.set_nodelay(true);
                        let proxy = proxy.clone();
                        let direct = direct.clone();
                        tokio::spawn(async move {
                            match direct {
                                Some((ip, port)) => proxy.serve_direct(conn, &ip, port).await,
                                None => proxy.serve(conn).await,
                            }
                            drop(slot);
                        });
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return,
        }
    }
}

/// What `proxy` did since the last call, as runtime notes: its decisions (`decision_notes`),
/// then what the package cache did.
pub fn notes(proxy: &Proxy) -> Vec<String> {
    let mut notes = decision_notes(proxy.take_decisions());
    notes.extend(cache_note(proxy));
    notes
}

/// What the package cache did for `proxy`'s boxes since the last call, on one line.
pub fn cache_note(proxy: &Proxy) -> Option<String> {
    let c = proxy.take_cache_counts();
    if c.served == 0 && c.kept == 0 {
        return None;
    }
    let mb = |b: u64| match b {
        0..1_000_000 => format!("{} kB", b.div_ceil(1000)),
        _ => format!("{:.1} MB", b as f64 / 1e6),
    };
    let dir = proxy
        .cache_dir()
        .map(|d| d.display().to_string())
        .unwrap_or_default();
    Some(format!(
        "note: package cache ({dir}): {} file(s) sent from it ({}), {} fetched, checked and kept ({})",
        c.served,
        mb(c.served_bytes),
        c.kept,
        mb(c.kept_bytes)
    ))
}

/// The proxy's decisions, as runtime notes: each denial on a line of its own (the same one
/// once), the allowed destinations summed up on one line.
fn decision_notes(decisions: Vec<Decision>) -> Vec<String> {
    let mut notes: Vec<String> = Vec::new();
    let mut allowed: Vec<(String, usize)> = Vec::new();
    for d in decisions {
        if let Some(problem) = d.problem.as_ref().filter(|_| d.allowed) {
            // Allowed, and it did not work: the box saw only a 502; say why, and the fix.
            let line = format!("note: egress to {}:{} failed: {problem}", d.host, d.port);
            if !notes.contains(&line) {
                notes.push(line);
            }
        } else if d.allowed {
            let dest = format!("{}:{}", d.host, d.port);
            match allowed.iter_mut().find(|(h, _)| *h == dest) {
                Some((_, n)) => *n += 1,
                None => allowed.push((dest, 1)),
            }
        } else {
            let line = format!("note: {d}");
            if !notes.contains(&line) {
                notes.push(line);
            }
        }
    }
    if !allowed.is_empty() {
        let list: Vec<String> = allowed
            .iter()
            .map(|(h, n)| {
                if *n == 1 {
                    h.clone()
                } else {
                    format!("{h} ({n}x)")
                }
            })
            .collect();
        notes.push(format!("note: egress allowed: {}", list.join(", ")));
    }
    notes
}

/// What a driver channel's ends may hold in flight, each way.
const CHANNEL_SNDBUF: usize = 4 << 20;

/// Raises `end`'s send buffer to `CHANNEL_SNDBUF`: beyond `net.core.wmem_max` as root
/// (SO_SNDBUFFORCE), up to it otherwise. Best effort: the default only makes large states slower.
fn bigger_send_buffer(end: &std::os::unix::net::UnixStream) {
    use nix::sys::socket::{setsockopt, sockopt};
    if setsockopt(end, sockopt::SndBufForce, &CHANNEL_SNDBUF).is_err() {
        let _ = setsockopt(end, sockopt::SndBuf, &CHANNEL_SNDBUF);
    }
}

/// A socket to something in a box (`what`: the driver, the egress relay): our end for tokio,
/// the box's end to send to kern; `first`, what the box finds on it before anything else.
pub(super) fn box_socketpair(
    what: &str,
    first: Option<&[u8]>,
) -> Result<(tokio::net::UnixStream, OwnedFd)> {
    use std::io::Write as _;
    let fail = |e: std::io::Error| Error::Runtime(format!("socketpair for the {what}: {e}"));
    let (mut ours, theirs) = std::os::unix::net::UnixStream::pair().map_err(fail)?;
    // Large send buffers both ways: a kernel's state (100 MiB and more) crosses this socket, and
    // with the default (208 KiB) each side waits on the other some thousand times.
    for end in [&ours, &theirs] {
        bigger_send_buffer(end);
    }
    ours.set_nonblocking(true).map_err(fail)?;
    // What the box reads first (the python driver, 160 KB) waits there from now, while the box
    // starts: the buffer holds it (416 KiB at least, unprivileged), so it never waits for the
    // box; were it ever to, the call fails here rather than hang.
    if let Some(bytes) = first {
        ours.write_all(bytes).map_err(|e| {
            Error::Runtime(format!(
                "the {what}'s first {} bytes do not fit its socket's buffer: {e}",
                bytes.len()
            ))
        })?;
    }
    let ours = tokio::net::UnixStream::from_std(ours).map_err(fail)?;
    Ok((ours, OwnedFd::from(theirs)))
}
