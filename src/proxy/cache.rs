//! The package cache: the package files a box downloads from PyPI (`files.pythonhosted.org`) and
//! the npm registry (`registry.npmjs.org`), kept on the host and served again to every later box
//! of this user, whatever its image.
//!
//! What enters it is only ever what the host fetched itself, never a byte a box sent or wrote:
//! the proxy terminates the box's TLS to those hosts (`secrets.rs`' CA, which the box trusts),
//! and for a package file's URL it opens its own TLS to the real host (verified against the
//! system's CAs), asks for the file with a request of its own, and keeps it only when whole;
//! a PyPI file only when its BLAKE2b-256 equals the digest its URL path names (PyPI's file
//! URLs are `/packages/<2>/<2>/<60 hex>/<name>`: the digest of the file). An npm tarball's URL
//! names no digest, so the host's own fetch from the registry is its check (the registry never
//! serves two contents under one version's tarball name). Anything else to those hosts (the
//! index pages, packuments, a ranged read, a POST) is forwarded as any request to them is.
//!
//! Layout: `<dir>/pypi/<64 hex>/<file name>` and `<dir>/npm/<sha256 of the URL path>`, 0700
//! directories; a file is written under `<dir>/tmp/` and renamed into place once checked, so
//! a name in the cache always holds a whole, checked file. Nothing evicts: remove the
//! directory (or a part of it) to reclaim space; nothing else keeps state there.

use super::exchange::Request;
use super::policy::{canonical_host, Host};
use super::upstream::{relay_answer, Answer, AnswerBody, Framing, Relayed, To};
use blake2::{Blake2b256, Digest as _};
use sha2::Sha256;
use std::io;
use std::os::unix::fs::{DirBuilderExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};
use tokio::io::{AsyncBufRead, AsyncSeekExt as _, AsyncWrite, AsyncWriteExt};

/// The hosts whose package files the cache keeps (on port 443 only).
pub const HOSTS: [&str; 2] = [PYPI_FILES, NPM_REGISTRY];
const PYPI_FILES: &str = "files.pythonhosted.org";
const NPM_REGISTRY: &str = "registry.npmjs.org";
/// A file larger than this is passed on but not kept (the largest wheels are about 2 GiB).
const MAX_FILE: u64 = 4 << 30;
/// Bytes read from a cached file at a time.
const SEND_BUF: usize = 256 << 10;
/// Half-written files older than this are what a dead process left.
const STALE: Duration = Duration::from_secs(24 * 3600);

/// Why the cache's directory can't be used.
#[derive(Debug, thiserror::Error)]
#[error("the package cache at {}: {why}", dir.display())]
pub struct CacheError {
    dir: PathBuf,
    why: String,
}

/// A user's package cache (one directory; any number of Sandboxes share it).
#[derive(Debug)]
pub struct PackageCache {
    dir: PathBuf,
}

/// A package file a request asks for: where the cache keeps it, and how it is checked.
pub(super) struct Artifact {
    /// The request's target, as the host asks for it again.
    target: String,
    /// Under the cache's directory.
    rel: PathBuf,
    check: Check,
}

enum Check {
    /// PyPI: the file's BLAKE2b-256, from its URL.
    Blake2b256([u8; 32]),
    /// npm: the host's own fetch from the registry.
    Fetched,
}

/// What a fetch came to.
pub(super) enum Served {
    /// Fetched by the host, checked, kept and sent (its size).
    Kept(u64),
    /// The server's answer was not a file (a 404, say): passed to the box as it came, not kept.
    Passed,
}

impl PackageCache {
    /// `$KERN_HOME/packages` (kern's home: see `home.rs`), the default directory.
    pub fn default_dir() -> Result<PathBuf, crate::home::HomeError> {
        Ok(crate::home::root()?.join("packages"))
    }

    /// Opens (making it, 0700) the cache at `dir`, an absolute path, and clears what a process
    /// that died while writing left in it.
    pub fn open(dir: &Path) -> Result<PackageCache, CacheError> {
        let fail = |why: String| CacheError {
            dir: dir.to_path_buf(),
            why,
        };
        if !dir.is_absolute() {
            return Err(fail("not an absolute path".into()));
        }
        for sub in ["", "pypi", "npm", "tmp"] {
            let d = dir.join(sub);
            match std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&d)
            {
                Ok(()) => {}
                Err(e) => return Err(fail(format!("cannot make {}: {e}", d.display()))),
            }
            match std::fs::symlink_metadata(&d) {
                Ok(m) if m.is_dir() => {}
                Ok(_) => return Err(fail(format!("{} is not a directory", d.display()))),
                Err(e) => return Err(fail(format!("{}: {e}", d.display()))),
            }
        }
        let tmp = dir.join("tmp");
        if let Ok(entries) = std::fs::read_dir(&tmp) {
            let now = SystemTime::now();
            for e in entries.flatten() {
                let old = e
                    .metadata()
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| now.duration_since(t).ok())
                    .is_some_and(|age| age > STALE);
                if old {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
        Ok(PackageCache {
            dir: dir.to_path_buf(),
        })
    }

    /// Its directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Its hosts, canonical.
    pub(super) fn hosts() -> Vec<Host> {
        HOSTS
            .iter()
            .filter_map(|h| canonical_host(h).ok())
            .collect()
    }

    /// The package file `req` (to `host:port`) asks for, if it is one the cache keeps: a plain
    /// GET of a whole file (no `Range`) at one of its hosts on 443, by a path of the shape
    /// that host gives its files. Anything else is `None`, and forwarded as it is.
    pub(super) fn artifact(&self, host: &Host, port: u16, req: &Request) -> Option<Artifact> {
        let bodied = req.has("content-length") || req.has("transfer-encoding");
        if port != 443 || req.method != "GET" || req.has("range") || bodied {
            return None;
        }
        let Host::Name(name) = host else {
            return None;
        };
        let target = req.target.as_str();
        let (rel, check) = match name.as_str() {
            PYPI_FILES => pypi(target)?,
            NPM_REGISTRY => {
                npm(target)?;
                let key = hex::encode(Sha256::digest(target.as_bytes()));
                (Path::new("npm").join(key), Check::Fetched)
            }
            _ => return None,
        };
        Some(Artifact {
            target: target.to_owned(),
            rel,
            check,
        })
    }

    /// Sends `a` from the cache to `cw` (`to`: the client): its size, or `None`
    /// when the cache has no such file. A name there that is not a regular file is not followed.
    pub(super) async fn send_hit<W: AsyncWrite + Unpin>(
        &self,
        a: &Artifact,
        cw: &mut W,
        to: To,
    ) -> io::Result<Option<u64>> {
        let path = self.dir.join(&a.rel);
        let opened = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path);
        let file = match opened {
            Ok(f) if f.metadata().is_ok_and(|m| m.is_file()) => f,
            _ => return Ok(None),
        };
        send_file(tokio::fs::File::from_std(file), cw, to)
            .await
            .map(Some)
    }

    /// The request the host fetches `a` from `host` with: its own, not the box's.
    pub(super) fn request(host: &Host, a: &Artifact) -> Vec<u8> {
        format!(
            "GET {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: kern-sandbox/{} (package cache)\r\nAccept: */*\r\nAccept-Encoding: identity\r\nConnection: keep-alive\r\n\r\n",
            a.target,
            env!("CARGO_PKG_VERSION")
        )
        .into_bytes()
    }

    /// Takes `answer`, the host's answer on `up` to `request(host, a)`: a 200 is read whole,
    /// checked, kept and sent to `cw`; any other answer is passed on as it came, not kept.
    /// `Ok` also says which connections may carry another request; `Err`: why nothing was kept
    /// or sent (the caller answers 502).
    pub(super) async fn take<U, W>(
        &self,
        host: &Host,
        a: &Artifact,
        up: &mut U,
        answer: &Answer,
        cw: &mut W,
        to: To,
    ) -> Result<(Served, Relayed), String>
    where
        U: AsyncBufRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let url = format!("https://{host}{}", a.target);
        let io = |e: io::Error| format!("fetching {url}: {e}");
        if answer.code != 200 {
            let relayed = relay_answer(up, answer, cw, to).await.map_err(io)?;
            return Ok((Served::Passed, relayed));
        }
        if answer.compressed {
            return Err(format!(
                "{url} came compressed although the cache asked for none: not kept, not passed"
            ));
        }
        let too_big = || {
            format!(
                "{url} is larger than the package cache keeps ({} GiB): fetch it with the cache off (packageCache: false)",
                MAX_FILE >> 30
            )
        };
        if matches!(answer.framing, Framing::Length(n) if n > MAX_FILE) {
            return Err(too_big());
        }
        let tmp = tempfile::NamedTempFile::new_in(self.dir.join("tmp"))
            .map_err(|e| format!("the package cache's {}: {e}", self.dir.display()))?;
        let (file, tmp_path) = tmp.into_parts();
        let mut file = tokio::fs::File::from_std(file);
        let mut hash = Blake2b256::new();
        let mut body = AnswerBody::of(answer);
        loop {
            match body.next(up).await {
                Ok(Some(piece)) => {
                    hash.update(piece);
                    file.write_all(piece).await.map_err(io)?;
                }
                Ok(None) => break,
                Err(e) => return Err(format!("{}: not kept, not passed", io(e))),
            }
            if body.got() > MAX_FILE {
                return Err(too_big());
            }
        }
        let got = body.got();
        if let Check::Blake2b256(want) = &a.check {
            let have: [u8; 32] = hash.finalize().into();
            if &have != want {
                return Err(format!(
                    "{url} is not the file its URL names: its BLAKE2b-256 is {}, the URL says {}; not kept, not passed",
                    hex::encode(have),
                    hex::encode(want)
                ));
            }
        }
        file.flush().await.map_err(io)?;
        file.sync_data().await.map_err(io)?;
        let dest = self.dir.join(&a.rel);
        if let Some(parent) = dest.parent() {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(parent)
                .map_err(|e| format!("the package cache's {}: {e}", parent.display()))?;
        }
        // Two boxes fetching one file both rename a whole, checked copy: either is the same.
        tmp_path
            .persist(&dest)
            .map_err(|e| format!("the package cache's {}: {e}", dest.display()))?;
        file.rewind().await.map_err(io)?;
        send_file(file, cw, to).await.map_err(io)?;
        let relayed = Relayed {
            upstream: answer.keeps_open,
            client: to.keep,
        };
        Ok((Served::Kept(got), relayed))
    }
}

/// A PyPI file's URL path: `/packages/<2 hex>/<2 hex>/<60 hex>/<file name>`, the three parts the
/// BLAKE2b-256 of the file. The name is kept only when of the characters package files use.
fn pypi(target: &str) -> Option<(PathBuf, Check)> {
    let rest = target.strip_prefix("/packages/")?;
    let parts: Vec<&str> = rest.split('/').collect();
    let [a, b, c, file] = parts.as_slice() else {
        return None;
    };
    let hexes = |s: &str, n: usize| s.len() == n && s.bytes().all(|c| c.is_ascii_hexdigit());
    if !(hexes(a, 2) && hexes(b, 2) && hexes(c, 60) && file_name(file)) {
        return None;
    }
    let digest = format!("{a}{b}{c}").to_ascii_lowercase();
    let mut want = [0u8; 32];
    hex::decode_to_slice(&digest, &mut want).ok()?;
    Some((
        Path::new("pypi").join(&digest).join(file),
        Check::Blake2b256(want),
    ))
}

/// An npm tarball's URL path: `/<name>/-/<file>.tgz` or `/@<scope>/<name>/-/<file>.tgz`.
fn npm(target: &str) -> Option<()> {
    let parts: Vec<&str> = target.strip_prefix('/')?.split('/').collect();
    let (names, file) = match parts.as_slice() {
        [name, "-", file] => (vec![*name], *file),
        [scope, name, "-", file] if scope.starts_with('@') => (vec![&scope[1..], *name], *file),
        _ => return None,
    };
    let npm_name = |s: &str| {
        !s.is_empty()
            && !s.starts_with('.')
            && s.bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || b"-._~".contains(&c))
    };
    (names.iter().all(|n| npm_name(n)) && file_name(file) && file.ends_with(".tgz")).then_some(())
}

/// A package file's name: letters, digits and `._+-!`, not starting with a dot, at most 255.
fn file_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 255
        && !s.starts_with('.')
        && s.bytes()
            .all(|c| c.is_ascii_alphanumeric() || b"._+-!".contains(&c))
}

/// Sends a file as a whole 200 answer, leaving the client's connection open if it keeps it;
/// gives its size.
async fn send_file<W: AsyncWrite + Unpin>(
    file: tokio::fs::File,
    cw: &mut W,
    to: To,
) -> io::Result<u64> {
    let len = file.metadata().await?.len();
    // Large reads: each read of a tokio file is a trip to the blocking pool, and each write a
    // TLS record or more.
    let mut file = tokio::io::BufReader::with_capacity(SEND_BUF, file);
    let head = format!(
        "HTTP/1.{} 200 OK\r\nContent-Type: application/octet-stream\r\nContent-Length: {len}\r\n",
        to.minor.min(1)
    );
    cw.write_all(head.as_bytes()).await?;
    cw.write_all(To::connection(to.keep)).await?;
    cw.write_all(b"\r\n").await?;
    let sent = tokio::io::copy_buf(&mut file, cw).await?;
    if sent != len {
        return Err(io::Error::from(io::ErrorKind::UnexpectedEof));
    }
    cw.flush().await?;
    Ok(len)
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::AsyncReadExt as _;

    #[test]
    fn pypi_paths_give_their_digest_and_odd_ones_none() {
        let d = "c8/0a/b6723e1bc4c516cb687841499455a8505b44607ab535be01091c0f24f079";
        let (rel, check) = pypi(&format!("/packages/{d}/six-1.10.0-py2.py3-none-any.whl")).unwrap();
        assert_eq!(
            rel,
            Path::new("pypi/c80ab6723e1bc4c516cb687841499455a8505b44607ab535be01091c0f24f079/six-1.10.0-py2.py3-none-any.whl")
        );
        assert!(matches!(check, Check::Blake2b256(w) if w[0] == 0xc8 && w[31] == 0x79));
        for odd in [
            format!("/packages/{d}/../x.whl"),
            format!("/packages/{d}/.x.whl"),
            format!("/packages/{d}/six%2F.whl"),
            format!("/packages/{d}/six.whl?x=1"),
            format!("/packages/{d}/a/six.whl"),
            "/packages/c8/0a/zz/six.whl".into(),
            "/simple/six/".into(),
        ] {
            assert!(pypi(&odd).is_none(), "{odd}");
        }
    }

    /// `fetch` of `target` from a server that answers `answer`: what it came to, what the client
    /// got, and the files the cache then holds.
    async fn fetch_from(target: &str, answer: Vec<u8>) -> (Result<(), String>, Vec<u8>, usize) {
        let dir = tempfile::tempdir().unwrap();
        let cache = PackageCache::open(&dir.path().join("c")).unwrap();
        let host = canonical_host(PYPI_FILES).unwrap();
        let (rel, check) = pypi(target).unwrap();
        let a = Artifact {
            target: target.into(),
            rel,
            check,
        };
        let (ours, mut theirs) = tokio::io::duplex(1 << 20);
        let server = tokio::spawn(async move {
            let mut asked = vec![0u8; 4096];
            let _ = theirs.read(&mut asked).await;
            theirs.write_all(&answer).await.unwrap();
        });
        let mut up = tokio::io::BufReader::new(ours);
        let mut client = Vec::new();
        let answer = crate::proxy::upstream::ask(&mut up, &PackageCache::request(&host, &a), false)
            .await
            .unwrap();
        let got = cache
            .take(
                &host,
                &a,
                &mut up,
                &answer,
                &mut client,
                To {
                    minor: 1,
                    keep: false,
                },
            )
            .await
            .map(|_| ());
        server.await.unwrap();
        let kept = walkdir(&dir.path().join("c/pypi"));
        (got, client, kept)
    }

    fn walkdir(d: &Path) -> usize {
        std::fs::read_dir(d).map_or(0, |rd| {
            rd.flatten()
                .map(|e| {
                    if e.path().is_dir() {
                        walkdir(&e.path())
                    } else {
                        1
                    }
                })
                .sum()
        })
    }

    fn target_of(body: &[u8]) -> String {
        let d = hex::encode(Blake2b256::digest(body));
        format!(
            "/packages/{}/{}/{}/x-1.0-py3-none-any.whl",
            &d[..2],
            &d[2..4],
            &d[4..]
        )
    }

    #[tokio::test]
    async fn a_file_that_is_not_what_its_url_names_is_neither_kept_nor_passed() {
        let target = target_of(b"the real wheel");
        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nevil wheel".to_vec();
        let (got, client, kept) = fetch_from(&target, answer).await;
        assert!(got.unwrap_err().contains("is not the file its URL names"));
        assert!(client.is_empty(), "nothing reached the box");
        assert_eq!(kept, 0);
    }

    #[tokio::test]
    async fn a_cut_file_is_neither_kept_nor_passed() {
        let target = target_of(b"the real wheel");
        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\nthe real".to_vec();
        let (got, client, kept) = fetch_from(&target, answer).await;
        assert!(got.unwrap_err().contains("ended after 8 of its 14 bytes"));
        assert!(client.is_empty());
        assert_eq!(kept, 0);
    }

    #[tokio::test]
    async fn the_file_its_url_names_is_kept_and_sent_chunked_or_not() {
        let target = target_of(b"the real wheel");
        for answer in [
            b"HTTP/1.1 200 OK\r\nContent-Length: 14\r\n\r\nthe real wheel".to_vec(),
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8\r\nthe real\r\n6\r\n wheel\r\n0\r\n\r\n".to_vec(),
        ] {
            let (got, client, kept) = fetch_from(&target, answer).await;
            assert_eq!(got, Ok(()));
            let client = String::from_utf8(client).unwrap();
            assert!(client.starts_with("HTTP/1.1 200 OK\r\n"), "{client}");
            assert!(client.ends_with("\r\n\r\nthe real wheel"), "{client}");
            assert_eq!(kept, 1);
        }
    }

    #[tokio::test]
    async fn a_404_is_passed_on_and_not_kept() {
        let target = target_of(b"the real wheel");
        let answer = b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found".to_vec();
        let (got, client, kept) = fetch_from(&target, answer).await;
        assert_eq!(got, Ok(()));
        let passed =
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\nConnection: close\r\n\r\nnot found";
        assert_eq!(
            String::from_utf8_lossy(&client),
            String::from_utf8_lossy(passed)
        );
        assert_eq!(kept, 0);
    }

    #[test]
    fn npm_tarball_paths_only() {
        assert!(npm("/is-number/-/is-number-7.0.0.tgz").is_some());
        assert!(npm("/@types/node/-/node-20.1.0.tgz").is_some());
        for odd in [
            "/is-number",
            "/is-number/-/is-number-7.0.0.tgz?x",
            "/../-/x.tgz",
            "/@types/../-/x.tgz",
            "/is-number/-/x.tar",
            "/Is-Number/-/x.tgz",
            "/a/b/-/x.tgz",
        ] {
            assert!(npm(odd).is_none(), "{odd}");
        }
    }
}
