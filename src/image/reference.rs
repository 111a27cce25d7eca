//! Image references, normalised the way Docker does it: `python` is
//! `docker.io/library/python:latest`, `host:port/repo:tag`, `repo@sha256:…`, tag and digest
//! together. Parsing happens before any network traffic, so a malformed reference is the
//! caller's mistake, reported as such.

use std::fmt;

pub const DEFAULT_REGISTRY: &str = "docker.io";
pub const DEFAULT_TAG: &str = "latest";
/// Docker's limit on a repository's full name.
const MAX_NAME: usize = 255;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    /// `docker.io`, `ghcr.io`, `localhost:5000`, …
    pub registry: String,
    /// `library/python`, `org/app`, …
    pub repository: String,
    /// None only when a digest pins the image and no tag was given.
    pub tag: Option<String>,
    /// `sha256:<64 hex>` (or `sha512:<128 hex>`).
    pub digest: Option<String>,
}

impl Reference {
    pub fn parse(input: &str) -> Result<Reference, String> {
        if input.is_empty() {
            return Err("the reference is empty".into());
        }
        if input.chars().any(|c| c.is_whitespace() || c.is_control()) {
            return Err("the reference contains whitespace".into());
        }
        let (rest, digest) = match input.split_once('@') {
            Some((r, d)) => (r, Some(check_digest(d)?)),
            None => (input, None),
        };
        // A tag is what follows the last ':' after the last '/' (a ':' before it is a port).
        let last_slash = rest.rfind('/').map(|i| i + 1).unwrap_or(0);
        let (name, tag) = match rest[last_slash..].rfind(':') {
            Some(i) => {
                let (n, t) = rest.split_at(last_slash + i);
                (n, Some(check_tag(&t[1..])?))
            }
            None => (rest, None),
        };
        let (registry, path) = match name.split_once('/') {
            Some((first, more)) if first.contains(['.', ':']) || first == "localhost" => {
                (first.to_string(), more.to_string())
            }
            _ => (DEFAULT_REGISTRY.to_string(), name.to_string()),
        };
        check_registry(&registry)?;
        let registry = if registry == "index.docker.io" {
            DEFAULT_REGISTRY.to_string()
        } else {
            registry
        };
        let repository = if registry == DEFAULT_REGISTRY && !path.contains('/') {
            format!("library/{path}")
        } else {
            path
        };
        check_repository(&repository)?;
        let tag = match (tag, &digest) {
            (None, None) => Some(DEFAULT_TAG.to_string()),
            (t, _) => t,
        };
        Ok(Reference {
            registry,
            repository,
            tag,
            digest,
        })
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

fn check_digest(d: &str) -> Result<String, String> {
    let (algo, hex) = d
        .split_once(':')
        .ok_or_else(|| format!("digest {d:?} is not algorithm:hex"))?;
    let len = match algo {
        "sha256" => 64,
        "sha512" => 128,
        _ => return Err(format!("digest algorithm {algo:?} is not sha256 or sha512")),
    };
    if hex.len() != len
        || !hex
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return Err(format!("digest {d:?} needs {len} lowercase hex digits"));
    }
    Ok(d.to_string())
}

fn check_tag(t: &str) -> Result<String, String> {
    let ok = !t.is_empty()
        && t.len() <= 128
        && t.starts_with(|c: char| c.is_ascii_alphanumeric() || c == '_')
        && t.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if ok {
        Ok(t.to_string())
    } else {
        Err(format!("tag {t:?} is not valid (letters, digits, '_', '.', '-'; at most 128; no leading '.' or '-')"))
    }
}

fn check_registry(r: &str) -> Result<(), String> {
    let (host, port) = match r.rsplit_once(':') {
        Some((h, p)) => (h, Some(p)),
        None => (r, None),
    };
    if let Some(p) = port {
        if p.parse::<u16>().is_err() {
            return Err(format!("registry port {p:?} is not a number"));
        }
    }
    let ok = !host.is_empty()
        && host.split('.').all(|label| {
            !label.is_empty()
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
        });
    if ok {
        Ok(())
    } else {
        Err(format!("registry {r:?} is not a valid host name"))
    }
}

/// Path components: lowercase letters and digits, separated by one '.', one or two '_', or
/// any number of '-'.
fn check_repository(repo: &str) -> Result<(), String> {
    if repo.len() > MAX_NAME {
        return Err(format!(
            "the repository name is longer than {MAX_NAME} characters"
        ));
    }
    if repo.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(format!("repository {repo:?} must be lowercase"));
    }
    for component in repo.split('/') {
        if !valid_component(component) {
            return Err(format!(
                "repository component {component:?} is not valid (lowercase letters and digits, separated by '.', '_', '__' or '-')"
            ));
        }
    }
    Ok(())
}

fn valid_component(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        match &c[start..i] {
            "." | "_" | "__" => {}
            sep if sep.bytes().all(|x| x == b'-') => {}
            _ => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> String {
        Reference::parse(s).unwrap().to_string()
    }

    #[test]
    fn docker_normalisation() {
        assert_eq!(canon("python"), "docker.io/library/python:latest");
        assert_eq!(
            canon("python:3.12-slim"),
            "docker.io/library/python:3.12-slim"
        );
        assert_eq!(canon("org/app"), "docker.io/org/app:latest");
        assert_eq!(
            canon("index.docker.io/library/python:3"),
            "docker.io/library/python:3"
        );
        assert_eq!(canon("ghcr.io/o/a/b:v1"), "ghcr.io/o/a/b:v1");
        assert_eq!(canon("localhost/app"), "localhost/app:latest");
        assert_eq!(canon("localhost:5000/test:1"), "localhost:5000/test:1");
        assert_eq!(
            canon("127.0.0.1:5000/a-b__c.d/e"),
            "127.0.0.1:5000/a-b__c.d/e:latest"
        );
    }

    #[test]
    fn digests_with_and_without_tags() {
        let d = format!("sha256:{}", "a".repeat(64));
        assert_eq!(
            canon(&format!("python@{d}")),
            format!("docker.io/library/python@{d}")
        );
        assert_eq!(
            canon(&format!("python:3@{d}")),
            format!("docker.io/library/python:3@{d}")
        );
        let r = Reference::parse(&format!("localhost:5000/x@{d}")).unwrap();
        assert_eq!((r.registry.as_str(), r.tag), ("localhost:5000", None));
    }

    #[test]
    fn malformed_references_say_why() {
        for (bad, why) in [
            ("", "empty"),
            ("Python", "lowercase"),
            ("python:", "tag"),
            ("python:-x", "tag"),
            ("python@sha256:abc", "hex"),
            ("python@md5:00", "algorithm"),
            ("a//b", "component"),
            ("a/-b", "component"),
            ("a..b", "component"),
            ("host:port/x", "port"),
            ("py thon", "whitespace"),
        ] {
            let e = Reference::parse(bad).unwrap_err();
            assert!(e.contains(why), "{bad:?}: {e}");
        }
        assert!(Reference::parse(&"a".repeat(256))
            .unwrap_err()
            .contains("longer"));
    }
}
