//! A small blocking client for the registry v2 API: manifests and blobs, the anonymous and
//! basic-to-bearer token flow, basic auth, retries, timeouts and redirects.
//!
//! Written over `ureq` rather than taken whole from `oci-client`: that crate brings tokio,
//! reqwest and an async API to a path that runs once per image on a blocking thread, and we
//! must own the two behaviours that matter for safety here: a token is never sent to another
//! origin (registries redirect blobs to CDNs), and every digest is checked by us.

use super::auth::{self, Challenge, Credentials};
use super::digest::{Digest, Hashing};
use super::manifest::ACCEPT;
use super::net::{Net, ProxyUse};
use super::reference::Reference;
use super::Error;
use std::io::{Read, Write};
use std::time::Duration;

/// Manifests larger than this are refused (Docker's own limit is 4 MiB).
const MAX_MANIFEST: u64 = 4 << 20;
/// Transient failures (5xx, 429, timeouts) are retried this many times, backing off.
const RETRIES: u32 = 3;
const MAX_REDIRECTS: u32 = 5;

/// How long to wait for a registry: `KERN_REGISTRY_TIMEOUT_S` (default 30) bounds connecting,
/// each response's headers and each read of a body, so a stalled registry fails the pull
/// instead of hanging it; a slow but moving download is never cut off.
pub fn timeout() -> Duration {
    let s = std::env::var("KERN_REGISTRY_TIMEOUT_S")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .filter(|v| *v > 0.0)
        .unwrap_or(30.0);
    Duration::from_secs_f64(s)
}

/// The scheme and host a registry name is reached at. Loopback registries are plain HTTP, as
/// Docker does it; everything else is HTTPS.
pub fn endpoint(registry: &str) -> String {
    if registry == "docker.io" {
        return "https://registry-1.docker.io".into();
    }
    let host = match registry.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => registry.split(':').next().unwrap_or(""),
    };
    if super::net::is_loopback(host) {
        format!("http://{registry}")
    } else {
        format!("https://{registry}")
    }
}

/// `scheme://host[:port]` of a URL: what decides whether a credential may be sent.
fn origin(url: &str) -> &str {
    let after = url.find("://").map(|i| i + 3).unwrap_or(0);
    let end = url[after..]
        .find(['/', '?', '#'])
        .map(|i| after + i)
        .unwrap_or(url.len());
    &url[..end]
}

/// Where a pull asks: a Docker Hub mirror from `KERN_REGISTRY_MIRRORS`, or the registry.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Source {
    /// `scheme://host[:port]`
    pub base: String,
    pub mirror: bool,
}

impl Source {
    pub fn origin(reference: &Reference) -> Source {
        Source {
            base: endpoint(&reference.registry),
            mirror: false,
        }
    }
}

/// The mirrors a pull of `reference` tries before its registry: `KERN_REGISTRY_MIRRORS`, for
/// docker.io images only (as Docker's registry-mirrors).
pub fn mirrors(reference: &Reference) -> Result<Vec<Source>, Error> {
    // Checked for every pull, so a malformed list is reported whatever the image.
    let all = super::net::mirrors()?;
    if reference.registry != super::reference::DEFAULT_REGISTRY {
        return Ok(Vec::new());
    }
    Ok(all
        .into_iter()
        .map(|base| Source { base, mirror: true })
        .collect())
}

pub struct Client {
    net: Net,
    reference: Reference,
    endpoint: String,
    mirror: bool,
    creds: Option<Credentials>,
    /// The Authorization header value for the registry's origin, once known.
    authorization: Option<String>,
}

pub struct ManifestAnswer {
    pub bytes: Vec<u8>,
    pub content_type: Option<String>,
}

impl Client {
    /// A client for `reference` at `source`. Credentials are looked up for the host actually
    /// asked: a mirror never gets Docker Hub's.
    pub fn new(reference: &Reference, source: &Source, net: &Net) -> Result<Client, Error> {
        let creds_key = if source.mirror {
            source.base.split_once("://").map_or("", |(_, a)| a)
        } else {
            reference.registry.as_str()
        };
        Ok(Client {
            net: net.clone(),
            reference: reference.clone(),
            endpoint: source.base.clone(),
            mirror: source.mirror,
            creds: auth::credentials_for(creds_key)?,
            authorization: None,
        })
    }

    /// `image REF (mirror URL)` or `image REF (registry HOST)`: the source a message is about.
    pub fn what(&self) -> String {
        let kind = if self.mirror { "mirror" } else { "registry" };
        format!(
            "image {} ({kind} {})",
            self.reference,
            origin(&self.endpoint)
        )
    }

    /// One request with auth, retries and redirects. Returns any final status; the caller
    /// decides what a 404 means.
    fn send(
        &mut self,
        method: &str,
        path: &str,
        accept: Option<&str>,
    ) -> Result<ureq::http::Response<ureq::Body>, Error> {
        let mut url = format!("{}{}", self.endpoint, path);
        let mut authed_retry = false;
        let mut redirects = 0;
        let mut attempt = 0;
        loop {
            let same_origin = origin(&url) == origin(&self.endpoint);
            let mut req = ureq::http::Request::builder().method(method).uri(&url);
            if let Some(a) = accept {
                req = req.header("Accept", a);
            }
            if same_origin {
                if let Some(a) = &self.authorization {
                    req = req.header("Authorization", a);
                }
            }
            let req = req.body(()).map_err(|e| {
                Error::Registry(format!("{}: bad request URL {url}: {e}", self.what()))
            })?;
            let (agent, via) = self.net.agent(&url);
            let via = via.cloned();
            let resp = match agent.run(req) {
                Ok(r) => r,
                Err(e) => {
                    // A refused connection or an unknown host will not change in a second;
                    // a timeout or a dropped connection may.
                    let transient = match &e {
                        ureq::Error::Timeout(_) => true,
                        ureq::Error::Io(io) => matches!(
                            io.kind(),
                            std::io::ErrorKind::ConnectionReset
                                | std::io::ErrorKind::ConnectionAborted
                                | std::io::ErrorKind::BrokenPipe
                                | std::io::ErrorKind::UnexpectedEof
                                | std::io::ErrorKind::TimedOut
                        ),
                        _ => false,
                    };
                    if transient && attempt < RETRIES {
                        attempt += 1;
                        backoff(attempt, None);
                        continue;
                    }
                    return Err(self.network_error(&url, via.as_ref(), e));
                }
            };
            let status = resp.status().as_u16();
            match status {
                401 if same_origin && !authed_retry => {
                    authed_retry = true;
                    let challenge = resp
                        .headers()
                        .get("www-authenticate")
                        .and_then(|h| h.to_str().ok())
                        .and_then(auth::parse_challenge);
                    self.authenticate(challenge)?;
                    continue;
                }
                401 | 403 => return Err(self.auth_error(status)),
                429 | 500..=599 if attempt < RETRIES => {
                    attempt += 1;
                    let after = resp
                        .headers()
                        .get("retry-after")
                        .and_then(|h| h.to_str().ok())
                        .and_then(|s| s.trim().parse::<u64>().ok());
                    backoff(attempt, after);
                    continue;
                }
                301 | 302 | 303 | 307 | 308 => {
                    redirects += 1;
                    let location = resp
                        .headers()
                        .get("location")
                        .and_then(|h| h.to_str().ok())
                        .map(str::to_string);
                    match location {
                        Some(loc) if redirects <= MAX_REDIRECTS => {
                            url = resolve(&url, &loc);
                            continue;
                        }
                        _ => {
                            return Err(Error::Registry(format!(
                                "{}: the registry redirected {url} without a usable Location (or more than {MAX_REDIRECTS} times)",
                                self.what()
                            )))
                        }
                    }
                }
                _ => return Ok(resp),
            }
        }
    }

    fn network_error(&self, url: &str, via: Option<&ProxyUse>, e: ureq::Error) -> Error {
        let mut why = match &e {
            ureq::Error::Timeout(t) => format!(
                "timed out ({t}) after {} tries; KERN_REGISTRY_TIMEOUT_S sets the wait",
                RETRIES + 1
            ),
            ureq::Error::HostNotFound => "the host name does not resolve".into(),
            ureq::Error::ConnectionFailed => "the connection was refused".into(),
            other => other.to_string(),
        };
        if let Some(p) = via {
            why.push_str(&format!(
                " (through {p}; NO_PROXY lists hosts to reach directly)"
            ));
        }
        if url.starts_with("https:") && is_certificate_error(&e) {
            return Error::Unreachable(format!(
                "{}: cannot reach {url}: {why}. The certificate it presented is not trusted: pulls trust {}. If a TLS-inspecting proxy or a private CA signs it, point {} at that CA's PEM file",
                self.what(),
                self.net.trust_line,
                super::net::CA_VAR
            ));
        }
        Error::Unreachable(format!(
            "{}: cannot reach {url}: {why}. Check the registry address and your network (behind a proxy: HTTPS_PROXY; for Docker Hub images, KERN_REGISTRY_MIRRORS names mirrors to try first). Without a registry: `image: \"host\"` (the host's own /usr, read-only), a root filesystem directory, an OCI layout directory or a `docker save` archive (`image: \"/path\"`); or pull once where the registry is reachable (`kern pull REF`) and run with KERN_PULL=never (a cached image opens offline; `kern images` lists the cache)",
            self.what()
        ))
    }

    fn auth_error(&self, status: u16) -> Error {
        let hint = if self.creds.is_some() {
            "the credentials found for it were refused; check them in ~/.docker/config.json or KERN_REGISTRY_AUTH"
        } else {
            "it needs credentials, or the repository does not exist (registries answer both the same way): `docker login` the registry (kern reads ~/.docker/config.json) or set KERN_REGISTRY_AUTH"
        };
        Error::Auth(format!(
            "{}: access denied (HTTP {status}); {hint}",
            self.what()
        ))
    }

    /// Answers a 401: a bearer token from the challenge's realm, or basic credentials.
    fn authenticate(&mut self, challenge: Option<Challenge>) -> Result<(), Error> {
        match challenge {
            Some(Challenge::Bearer {
                realm,
                service,
                scope,
            }) => {
                let scope = scope
                    .unwrap_or_else(|| format!("repository:{}:pull", self.reference.repository));
                let mut url = realm.clone();
                let mut sep = if url.contains('?') { '&' } else { '?' };
                for (k, v) in [("service", service.as_deref()), ("scope", Some(&scope))] {
                    if let Some(v) = v {
                        url.push(sep);
                        url.push_str(k);
                        url.push('=');
                        url.push_str(&auth::query_escape(v));
                        sep = '&';
                    }
                }
                let (agent, via) = self.net.agent(&url);
                let mut req = agent.get(&url);
                if let Some(c) = &self.creds {
                    req = req.header("Authorization", c.basic_header());
                }
                let mut resp = req.call().map_err(|e| self.network_error(&url, via, e))?;
                let status = resp.status().as_u16();
                if status == 401 || status == 403 {
                    return Err(self.auth_error(status));
                }
                if status != 200 {
                    return Err(Error::Registry(format!(
                        "{}: the token service {realm} answered HTTP {status}",
                        self.what()
                    )));
                }
                let body = resp
                    .body_mut()
                    .with_config()
                    .limit(1 << 20)
                    .read_to_vec()
                    .map_err(|e| self.network_error(&url, via, e))?;
                let token = auth::parse_token(&body).ok_or_else(|| {
                    Error::Registry(format!(
                        "{}: the token service {realm} answered without a token",
                        self.what()
                    ))
                })?;
                self.authorization = Some(format!("Bearer {token}"));
                Ok(())
            }
            Some(Challenge::Basic) => match &self.creds {
                Some(c) => {
                    self.authorization = Some(c.basic_header());
                    Ok(())
                }
                None => Err(self.auth_error(401)),
            },
            None => Err(self.auth_error(401)),
        }
    }

    fn manifest_path(&self, tag_or_digest: &str) -> String {
        format!(
            "/v2/{}/manifests/{tag_or_digest}",
            self.reference.repository
        )
    }

    /// The digest a tag points at, by HEAD (Docker Hub does not count HEADs against its pull
    /// limit). None when the registry does not say (no `Docker-Content-Digest`): the caller
    /// then GETs and hashes.
    pub fn head_manifest(&mut self, tag: &str) -> Result<Option<Digest>, Error> {
        let resp = self.send("HEAD", &self.manifest_path(tag), Some(ACCEPT))?;
        match resp.status().as_u16() {
            200 => Ok(resp
                .headers()
                .get("docker-content-digest")
                .and_then(|h| h.to_str().ok())
                .and_then(|s| Digest::parse(s.trim()).ok())),
            404 => Err(self.not_found(tag)),
            // Some registries refuse HEAD; GET tells.
            405 | 400 => Ok(None),
            s => Err(self.unexpected(s, "HEAD of the manifest")),
        }
    }

    pub fn get_manifest(&mut self, tag_or_digest: &str) -> Result<ManifestAnswer, Error> {
        let mut resp = self.send("GET", &self.manifest_path(tag_or_digest), Some(ACCEPT))?;
        match resp.status().as_u16() {
            200 => {}
            404 => return Err(self.not_found(tag_or_digest)),
            s => return Err(self.unexpected(s, "GET of the manifest")),
        }
        let content_type = resp
            .headers()
            .get("content-type")
            .and_then(|h| h.to_str().ok())
            .map(str::to_string);
        let claimed = resp
            .headers()
            .get("docker-content-digest")
            .and_then(|h| h.to_str().ok())
            .and_then(|s| Digest::parse(s.trim()).ok());
        let what = self.what();
        let bytes = resp
            .body_mut()
            .with_config()
            .limit(MAX_MANIFEST)
            .read_to_vec()
            .map_err(|e| {
                Error::Registry(format!("{what}: reading the manifest {tag_or_digest}: {e}"))
            })?;
        // For a tag, the registry's own digest header is the only thing to check the bytes
        // against (a digest reference is checked by the caller).
        if let Some(c) = claimed {
            let got = Digest::of(&bytes);
            if got != c {
                return Err(Error::Verify(format!(
                    "{what}: manifest {tag_or_digest} arrived with digest {got}, but the registry says {c}; refused"
                )));
            }
        }
        Ok(ManifestAnswer {
            bytes,
            content_type,
        })
    }

    /// Streams a blob into `out`, checking its length and digest; `progress` gets the bytes
    /// read so far. A mismatch is an error and what was written must be discarded by the
    /// caller (the store writes into a temp file).
    pub fn get_blob(
        &mut self,
        digest: &Digest,
        size: u64,
        out: &mut dyn Write,
        progress: &mut dyn FnMut(u64),
    ) -> Result<(), Error> {
        let path = format!("/v2/{}/blobs/{digest}", self.reference.repository);
        let resp = self.send("GET", &path, None)?;
        match resp.status().as_u16() {
            200 => {}
            404 => {
                return Err(Error::NotFound(format!(
                    "{}: the registry has no blob {digest} the manifest lists; the image was pushed incompletely, push it again",
                    self.what()
                )))
            }
            s => return Err(self.unexpected(s, "GET of a blob")),
        }
        let mut body = resp.into_body().into_reader();
        let mut hashing = Hashing::new(out);
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = body.read(&mut buf).map_err(|e| {
                Error::Unreachable(format!(
                    "{}: the download of {digest} broke off: {e}",
                    self.what()
                ))
            })?;
            if n == 0 {
                break;
            }
            // More than the manifest declared is refused as it arrives, not after.
            if hashing.count() + n as u64 > size {
                return Err(Error::Verify(format!(
                    "{}: blob {digest} is larger than the {size} bytes its manifest declares; refused",
                    self.what()
                )));
            }
            hashing
                .write_all(&buf[..n])
                .map_err(|e| Error::store_io("writing a blob", e))?;
            progress(hashing.count());
        }
        let (got, n, _) = hashing.finish();
        if n != size || got != *digest {
            return Err(Error::Verify(format!(
                "{}: blob {digest} arrived with digest {got} and {n} bytes (expected {size}); the registry served corrupt data, nothing was kept",
                self.what()
            )));
        }
        Ok(())
    }

    fn not_found(&self, what: &str) -> Error {
        Error::NotFound(format!(
            "{}: the registry has no manifest {what:?} in repository {:?}; check the tag (`skopeo list-tags docker://{}/{}` lists them) and the repository name",
            self.what(),
            self.reference.repository,
            self.reference.registry,
            self.reference.repository
        ))
    }

    fn unexpected(&self, status: u16, what: &str) -> Error {
        Error::Registry(format!(
            "{}: the registry answered HTTP {status} to the {what}; try again later",
            self.what()
        ))
    }
}

/// A TLS failure about the server's certificate (rustls reports it as such, also inside an I/O
/// error), as opposed to a connection that broke.
fn is_certificate_error(e: &ureq::Error) -> bool {
    let text = match e {
        ureq::Error::Rustls(r) => r.to_string(),
        ureq::Error::Io(io) => io.to_string(),
        ureq::Error::Tls(t) => t.to_string(),
        _ => return false,
    };
    text.contains("certificate")
}

fn backoff(attempt: u32, retry_after: Option<u64>) {
    let base = Duration::from_millis(250 << attempt.min(4));
    let wait = retry_after
        .map(|s| Duration::from_secs(s.min(10)))
        .unwrap_or(base);
    std::thread::sleep(wait);
}

/// Resolves a Location header against the URL it came from.
fn resolve(base: &str, location: &str) -> String {
    if location.contains("://") {
        location.to_string()
    } else if location.starts_with("//") {
        let scheme = base.split("://").next().unwrap_or("https");
        format!("{scheme}:{location}")
    } else if location.starts_with('/') {
        format!("{}{location}", origin(base))
    } else {
        let dir = base.rfind('/').map(|i| &base[..=i]).unwrap_or(base);
        format!("{dir}{location}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_plain_http() {
        assert_eq!(endpoint("docker.io"), "https://registry-1.docker.io");
        assert_eq!(endpoint("localhost:5000"), "http://localhost:5000");
        assert_eq!(endpoint("127.0.0.1:5000"), "http://127.0.0.1:5000");
        assert_eq!(endpoint("127.9.8.7"), "http://127.9.8.7");
        assert_eq!(endpoint("[::1]:5000"), "http://[::1]:5000");
        assert_eq!(endpoint("ghcr.io"), "https://ghcr.io");
        assert_eq!(endpoint("128.0.0.1:5000"), "https://128.0.0.1:5000");
        assert_eq!(endpoint("localhost.evil.com"), "https://localhost.evil.com");
    }

    #[test]
    fn redirects_resolve_and_origins_compare() {
        assert_eq!(
            resolve("http://a:1/v2/x/blobs/s", "/b?x=1"),
            "http://a:1/b?x=1"
        );
        assert_eq!(resolve("https://a/v2/x", "https://cdn/y"), "https://cdn/y");
        assert_eq!(resolve("https://a/v2/x", "//cdn/y"), "https://cdn/y");
        assert_eq!(origin("http://a:1/v2/x?y"), "http://a:1");
        assert_ne!(
            origin("http://127.0.0.1:5000/x"),
            origin("http://localhost:5000/x")
        );
    }
}
