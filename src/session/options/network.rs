//! The network options: `network`, `egressAllow` (the boxes' way out) and `setupNetwork`
//! (the `setup` box's).

use super::value::{boolean, strings, type_err};
use crate::config::{Config, Network, PackageCacheChoice, SetupNetwork};
use crate::error::{Error, Result};
use serde_json::{Map, Value};

/// `network` and `egressAllow`, checked together first: the mistake is the combination.
pub(super) fn ways_out(map: &Map<String, Value>, cfg: &mut Config) -> Result<()> {
    let get = |k: &str| map.get(k);
    let network = match get("network") {
        None => false,
        Some(v) => boolean("network", v)?,
    };
    let egress = match get("egressAllow") {
        None | Some(Value::Null) => None,
        Some(v) => Some(strings("egressAllow", v)?),
    };
    if network && get("egressAllow").is_some_and(|v| !v.is_null()) {
        return crate::invalid!("`network: true` and `egressAllow` are mutually exclusive: network shares the host's network, egressAllow restricts it. Pick one.");
    }
    if network {
        cfg.network = Network::Host;
    } else if let Some(egress) = egress {
        // An empty list allows nothing yet: the boxes have the proxy, which refuses every
        // destination until `setEgressAllow` widens it.
        cfg.network = Network::Egress(egress_policy(&egress)?);
    }

    Ok(())
}

/// `secrets` (after `egressAllow` and `env`): `{ NAME: { value, hosts } }`. Each name is a
/// plain variable name that `env` does not also set; each host is allowed by `egressAllow`.
/// Errors name the secret, never its value.
pub(super) fn secrets(map: &Map<String, Value>, cfg: &mut Config) -> Result<()> {
    let Some(v) = map.get("secrets").filter(|v| !v.is_null()) else {
        return Ok(());
    };
    const SHAPE: &str =
        "an object such as { API_KEY: { value: \"sk-…\", hosts: [\"api.example.com\"], headers: [\"Authorization\"] } }";
    let obj = v
        .as_object()
        .ok_or_else(|| Error::Invalid(format!("option `secrets` must be {SHAPE}")))?;
    let Network::Egress(policy) = &cfg.network else {
        return crate::invalid!("option `secrets` needs `egressAllow`: the values are written in by the egress proxy, on the way to the hosts it allows; add `egressAllow` listing each secret's hosts");
    };
    let mut specs = Vec::new();
    for (name, s) in obj {
        let valid = name
            .bytes()
            .next()
            .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            return crate::invalid!("option `secrets`: {name:?} is not a variable name; use letters, digits and `_`, not starting with a digit (e.g. API_KEY)");
        }
        if cfg.env.iter().any(|(k, _)| k == name) {
            return crate::invalid!("option `secrets`: {name:?} is also set by option `env`; a secret's variable holds its placeholder, so leave it out of `env`");
        }
        let value = s.get("value").and_then(Value::as_str);
        let hosts = s.get("hosts").and_then(Value::as_array).and_then(|a| {
            a.iter()
                .map(|h| h.as_str().map(str::to_owned))
                .collect::<Option<Vec<_>>>()
        });
        let headers = match s.get("headers").filter(|v| !v.is_null()) {
            None => Some(Vec::new()),
            Some(v) => v.as_array().and_then(|a| {
                a.iter()
                    .map(|h| h.as_str().map(str::to_owned))
                    .collect::<Option<Vec<_>>>()
            }),
        };
        let extra = s.as_object().and_then(|o| {
            o.keys()
                .find(|k| !["value", "hosts", "headers"].contains(&k.as_str()))
        });
        let (Some(value), Some(hosts), Some(headers), None) = (value, hosts, headers, extra) else {
            return crate::invalid!("option `secrets`: {name:?} must be {{ value: string, hosts: string[], headers?: string[] }} and nothing else");
        };
        if s.get("headers")
            .is_some_and(|v| v.as_array().is_some_and(Vec::is_empty))
        {
            return crate::invalid!("option `secrets`: {name:?}: `headers` is empty; name the request headers the value may go into (leave it out for the default: {})", crate::proxy::DEFAULT_HEADERS.join(", "));
        }
        specs.push(crate::proxy::SecretSpec {
            name: name.clone(),
            value: value.to_owned(),
            hosts,
            headers,
        });
    }
    crate::proxy::Secrets::check(&specs, policy)
        .map_err(|e| Error::Invalid(format!("option `secrets`: {e}")))?;
    cfg.secrets = specs;
    Ok(())
}

/// `setupNetwork`.
pub(super) fn setup_network(v: &Value) -> Result<SetupNetwork> {
    match v.as_str() {
        Some("public") => Ok(SetupNetwork::Public),
        Some("host") => Ok(SetupNetwork::Host),
        _ => Err(type_err(
            "setupNetwork",
            "\"public\" (the default) or \"host\"",
            v,
        )),
    }
}

/// `packageCache`: a boolean, or the absolute path of a directory to keep the files in.
pub(super) fn package_cache(v: &Value) -> Result<PackageCacheChoice> {
    match v {
        Value::Bool(true) => Ok(PackageCacheChoice::Default),
        Value::Bool(false) => Ok(PackageCacheChoice::Off),
        Value::String(s) if std::path::Path::new(s).is_absolute() => {
            Ok(PackageCacheChoice::At(s.into()))
        }
        Value::String(s) => crate::invalid!(
            "option `packageCache`: {s:?} is not an absolute path; name the cache's directory from the root (e.g. \"/var/cache/kern-packages\"), or pass true for the default ($KERN_HOME/packages)"
        ),
        other => Err(type_err(
            "packageCache",
            "a boolean (true, the default: the user's cache; false: none) or a directory's absolute path",
            other,
        )),
    }
}

/// Refuses a read-write mount of the package cache the caller named, or of a directory holding
/// it: a box could write the files later boxes install. (The default cache is in kern's store,
/// which `host_binds` refuses read-write.)
pub(super) fn cache_clear_of_mounts(cfg: &Config) -> Result<()> {
    let PackageCacheChoice::At(dir) = &cfg.package_cache else {
        return Ok(());
    };
    let real = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.clone());
    match cfg
        .mounts
        .iter()
        .filter(|m| m.writable)
        .find(|m| real.starts_with(&m.source) || m.source.starts_with(&real))
    {
        Some(m) => crate::invalid!(
            "option `mounts`: {} is mounted read-write, and the package cache is {}: a box could write the files later boxes install. Mount it read-only, or set packageCache to another directory (or false)",
            m.source.display(),
            real.display()
        ),
        None => Ok(()),
    }
}

/// The proxy's policy from an `egressAllow` list as JSON (`setEgressAllow`), checked as the
/// option is.
pub fn egress_list(v: &Value) -> Result<crate::proxy::Policy> {
    egress_policy(&strings("egressAllow", v)?)
}

/// The proxy's policy from `egressAllow` entries; a bad entry is the option's error.
pub fn egress_policy(entries: &[String]) -> Result<crate::proxy::Policy> {
    crate::proxy::Policy::parse(entries)
        .map_err(|e| Error::Invalid(format!("option `egressAllow`: {e}")))
}
