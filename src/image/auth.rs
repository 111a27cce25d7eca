//! Registry credentials and `WWW-Authenticate` challenges.
//!
//! Where credentials come from, first match wins:
//! 1. `KERN_REGISTRY_AUTH`: JSON shaped like the `auths` of Docker's config,
//!    `{"registry.example.com": {"auth": "<base64 user:pass>"}}` or
//!    `{"registry.example.com": {"username": "u", "password": "p"}}`.
//! 2. `$DOCKER_CONFIG/config.json` (default `~/.docker/config.json`): `auths` (what
//!    `docker login` writes), then `credHelpers` / `credsStore` via `docker-credential-<name> get`.

use super::Error;
use base64::Engine as _;
use serde_json::Value;

#[derive(Clone, PartialEq, Eq)]
pub struct Credentials {
    pub username: String,
    pub password: String,
}

// Never print a password, not even in a debug log.
impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Credentials({}, ***)", self.username)
    }
}

impl Credentials {
    pub fn basic_header(&self) -> String {
        let raw = format!("{}:{}", self.username, self.password);
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(raw)
        )
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Challenge {
    Bearer {
        realm: String,
        service: Option<String>,
        scope: Option<String>,
    },
    Basic,
}

/// Parses `Bearer realm="…",service="…",scope="…"` or `Basic realm="…"`. Values may be
/// quoted (with `\"` escapes) or bare tokens.
pub fn parse_challenge(header: &str) -> Option<Challenge> {
    let header = header.trim();
    let (scheme, rest) = header.split_once(' ').unwrap_or((header, ""));
    if scheme.eq_ignore_ascii_case("basic") {
        return Some(Challenge::Basic);
    }
    if !scheme.eq_ignore_ascii_case("bearer") {
        return None;
    }
    let mut realm = None;
    let mut service = None;
    let mut scope = None;
    let mut chars = rest.chars().peekable();
    loop {
        while chars.peek().is_some_and(|c| *c == ',' || c.is_whitespace()) {
            chars.next();
        }
        let key: String = chars
            .by_ref()
            .take_while(|c| *c != '=')
            .collect::<String>()
            .trim()
            .to_ascii_lowercase();
        if key.is_empty() {
            break;
        }
        let mut value = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            while let Some(c) = chars.next() {
                match c {
                    '\\' => value.extend(chars.next()),
                    '"' => break,
                    c => value.push(c),
                }
            }
        } else {
            while let Some(c) = chars.peek().copied() {
                if c == ',' {
                    break;
                }
                value.push(c);
                chars.next();
            }
            value = value.trim().to_string();
        }
        match key.as_str() {
            "realm" => realm = Some(value),
            "service" => service = Some(value),
            "scope" => scope = Some(value),
            _ => {}
        }
    }
    Some(Challenge::Bearer {
        realm: realm.filter(|r| r.starts_with("http://") || r.starts_with("https://"))?,
        service,
        scope,
    })
}

/// The token of a token-service answer (`token`, or OAuth's `access_token`).
pub fn parse_token(body: &[u8]) -> Option<String> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let t = v.get("token").or_else(|| v.get("access_token"))?.as_str()?;
    (!t.is_empty() && !t.contains(['\r', '\n'])).then(|| t.to_string())
}

/// Percent-encodes a query value (RFC 3986 unreserved characters pass).
pub fn query_escape(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    for b in v.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The key spellings Docker's config uses for a registry.
fn keys_match(key: &str, registry: &str) -> bool {
    let k = key
        .trim_start_matches("https://")
        .trim_start_matches("http://");
    let k = k.split('/').next().unwrap_or(k);
    let hub = |h: &str| matches!(h, "docker.io" | "index.docker.io" | "registry-1.docker.io");
    k == registry || (hub(k) && hub(registry))
}

fn from_entry(entry: &Value, source: &str, registry: &str) -> Result<Option<Credentials>, Error> {
    if let Some(auth) = entry
        .get("auth")
        .and_then(Value::as_str)
        .filter(|a| !a.is_empty())
    {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(auth.trim())
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| {
                Error::Invalid(format!(
                    "{source}: the `auth` for {registry} is not base64 of \"user:password\"; run `docker login {registry}` again"
                ))
            })?;
        let (u, p) = decoded.split_once(':').ok_or_else(|| {
            Error::Invalid(format!(
                "{source}: the `auth` for {registry} decodes to no \"user:password\" pair"
            ))
        })?;
        return Ok(Some(Credentials {
            username: u.into(),
            password: p.into(),
        }));
    }
    match (
        entry.get("username").and_then(Value::as_str),
        entry.get("password").and_then(Value::as_str),
    ) {
        (Some(u), Some(p)) => Ok(Some(Credentials {
            username: u.into(),
            password: p.into(),
        })),
        _ => Ok(None),
    }
}

fn from_auths(auths: &Value, source: &str, registry: &str) -> Result<Option<Credentials>, Error> {
    let Some(map) = auths.as_object() else {
        return Ok(None);
    };
    for (key, entry) in map {
        if keys_match(key, registry) {
            if let Some(c) = from_entry(entry, source, registry)? {
                return Ok(Some(c));
            }
        }
    }
    Ok(None)
}

/// Credentials for `registry` (a reference's registry, e.g. `docker.io`, `localhost:5000`).
pub fn credentials_for(registry: &str) -> Result<Option<Credentials>, Error> {
    if let Ok(raw) = std::env::var("KERN_REGISTRY_AUTH") {
        let v: Value = serde_json::from_str(&raw).map_err(|e| {
            Error::Invalid(format!(
                "KERN_REGISTRY_AUTH is not JSON ({e}); expected {{\"registry.example.com\": {{\"username\": \"u\", \"password\": \"p\"}}}}"
            ))
        })?;
        if let Some(c) = from_auths(&v, "KERN_REGISTRY_AUTH", registry)? {
            return Ok(Some(c));
        }
    }
    let dir = match std::env::var_os("DOCKER_CONFIG") {
        Some(d) => std::path::PathBuf::from(d),
        None => match std::env::var_os("HOME") {
            Some(h) => std::path::PathBuf::from(h).join(".docker"),
            None => return Ok(None),
        },
    };
    let path = dir.join("config.json");
    let text = match std::fs::read_to_string(&path) {
        Ok(t) => t,
        Err(_) => return Ok(None),
    };
    let source = path.display().to_string();
    let v: Value = serde_json::from_str(&text).map_err(|e| {
        Error::Invalid(format!(
            "{source} is not valid JSON ({e}); fix or remove it"
        ))
    })?;
    if let Some(c) = v
        .get("auths")
        .map(|a| from_auths(a, &source, registry))
        .transpose()?
        .flatten()
    {
        return Ok(Some(c));
    }
    let helper = v
        .get("credHelpers")
        .and_then(Value::as_object)
        .and_then(|m| m.iter().find(|(k, _)| keys_match(k, registry)))
        .and_then(|(_, h)| h.as_str())
        .or_else(|| v.get("credsStore").and_then(Value::as_str));
    match helper {
        Some(h) => from_helper(h, registry),
        None => Ok(None),
    }
}

/// Asks `docker-credential-<helper> get`, the protocol Docker's helpers speak.
fn from_helper(helper: &str, registry: &str) -> Result<Option<Credentials>, Error> {
    use std::io::Write;
    if !helper
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    {
        return Err(Error::Invalid(format!(
            "the docker credential helper name {helper:?} is not a plain name"
        )));
    }
    let server = if keys_match("docker.io", registry) {
        "https://index.docker.io/v1/".to_string()
    } else {
        registry.to_string()
    };
    let program = format!("docker-credential-{helper}");
    let mut child = match std::process::Command::new(&program)
        .arg("get")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
    {
        Ok(c) => c,
        // Docker itself carries on anonymously when a configured helper is missing.
        Err(_) => return Ok(None),
    };
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(server.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|e| Error::Invalid(format!("{program} get failed: {e}")))?;
    if !out.status.success() {
        return Ok(None);
    }
    let v: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| Error::Invalid(format!("{program} get printed no JSON: {e}")))?;
    match (
        v.get("Username").and_then(Value::as_str),
        v.get("Secret").and_then(Value::as_str),
    ) {
        (Some(u), Some(p)) if !p.is_empty() => Ok(Some(Credentials {
            username: u.into(),
            password: p.into(),
        })),
        _ => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_hub_challenge() {
        let h = r#"Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:library/alpine:pull""#;
        assert_eq!(
            parse_challenge(h),
            Some(Challenge::Bearer {
                realm: "https://auth.docker.io/token".into(),
                service: Some("registry.docker.io".into()),
                scope: Some("repository:library/alpine:pull".into()),
            })
        );
    }

    #[test]
    fn challenge_variants() {
        assert_eq!(
            parse_challenge(r#"Basic realm="Registry Realm""#),
            Some(Challenge::Basic)
        );
        // Bare tokens, odd spacing, escaped quotes, scopes with commas inside quotes.
        let h = r#"bearer  realm=https://ghcr.io/token , service="ghcr.io",scope="repository:a/b:pull,push" ,error="insufficient_scope""#;
        assert_eq!(
            parse_challenge(h),
            Some(Challenge::Bearer {
                realm: "https://ghcr.io/token".into(),
                service: Some("ghcr.io".into()),
                scope: Some("repository:a/b:pull,push".into()),
            })
        );
        let h = r#"Bearer realm="https://x/t\"q""#;
        assert!(
            matches!(parse_challenge(h), Some(Challenge::Bearer { realm, .. }) if realm == "https://x/t\"q")
        );
        // No realm, or a realm that is not a URL, is not a challenge we can answer.
        assert_eq!(parse_challenge("Bearer service=\"x\""), None);
        assert_eq!(parse_challenge("Bearer realm=\"file:///etc/passwd\""), None);
        assert_eq!(parse_challenge("Negotiate abc"), None);
    }

    #[test]
    fn tokens_and_escapes() {
        assert_eq!(
            parse_token(br#"{"token":"abc","expires_in":300}"#).as_deref(),
            Some("abc")
        );
        assert_eq!(
            parse_token(br#"{"access_token":"xyz"}"#).as_deref(),
            Some("xyz")
        );
        assert_eq!(parse_token(br#"{"token":"a\r\nX-Evil: 1"}"#), None);
        assert_eq!(
            query_escape("repository:a/b:pull"),
            "repository%3Aa%2Fb%3Apull"
        );
    }

    #[test]
    fn config_auths() {
        let v: Value = serde_json::from_str(
            r#"{"https://index.docker.io/v1/":{"auth":"dTpw"},"localhost:5000":{"username":"kern","password":"s:3"}}"#,
        )
        .unwrap();
        let hub = from_auths(&v, "t", "docker.io").unwrap().unwrap();
        assert_eq!((hub.username.as_str(), hub.password.as_str()), ("u", "p"));
        let local = from_auths(&v, "t", "localhost:5000").unwrap().unwrap();
        assert_eq!(local.password, "s:3");
        assert_eq!(from_auths(&v, "t", "ghcr.io").unwrap(), None);
        let bad: Value = serde_json::from_str(r#"{"ghcr.io":{"auth":"!!"}}"#).unwrap();
        assert!(from_auths(&bad, "t", "ghcr.io").is_err());
        assert!(!format!("{local:?}").contains("s:3"));
    }
}
