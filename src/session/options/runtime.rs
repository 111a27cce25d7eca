//! What runs and how: `image`, `setup`, `persist` (with `name`, `persistTtlS`), `env`, the
//! session's switches (`depsReadonly`, `setupNetwork`, `pycCache`, `trackFiles`, `prewarm`,
//! `zygote`, `spareMemoryMb`), and what a resident box can't combine with.

use super::value::{boolean, positive_at_most, type_err};
use crate::config::{
    check_env_size, Config, Network, ResidentOpts, DEFAULT_IMAGE, DEFAULT_PERSIST_TTL_S,
    MAX_PERSIST_TTL_S, MAX_PREWARM, MAX_SPARE_MEMORY_MB,
};
use crate::error::{Error, Result};
use crate::image::Source;
use serde_json::{Map, Value};

/// `image` and `setup`.
pub(super) fn image_and_setup(map: &Map<String, Value>, cfg: &mut Config) -> Result<()> {
    let get = |k: &str| map.get(k);
    match get("image") {
        None | Some(Value::Null) => cfg.image = Source::parse(DEFAULT_IMAGE)?,
        Some(Value::String(s)) => cfg.image = Source::parse(s)?,
        Some(v) => {
            return Err(type_err(
                "image",
                "a string (a reference like \"python:3.12-slim\", an absolute path, or \"host\")",
                v,
            ))
        }
    }
    if let Some(v) = get("setup") {
        match v {
            Value::Null => {}
            Value::String(s) if s.trim().is_empty() => {
                return crate::invalid!("option `setup` is an empty command; leave it out or pass a shell command such as \"pip install pandas\"")
            }
            Value::String(s) if s.contains('\0') => {
                return crate::invalid!("option `setup` contains a NUL byte")
            }
            Value::String(s) => cfg.setup = Some(s.clone()),
            other => return Err(type_err("setup", "a shell command string", other)),
        }
    }
    Ok(())
}

/// `name`, `persist` and `persistTtlS` (after `workspace`: a resident box needs one).
pub(super) fn persist(map: &Map<String, Value>, cfg: &mut Config) -> Result<()> {
    let get = |k: &str| map.get(k);
    let name = match get("name").filter(|v| !v.is_null()) {
        Some(v) => {
            let n = v
                .as_str()
                .ok_or_else(|| type_err("name", "a string or null", v))?;
            crate::engine::monitor::resident::check_name(n)
                .map_err(|e| Error::Invalid(format!("option `name`: {e}")))?;
            Some(n.to_string())
        }
        None => None,
    };
    let persist = match get("persist") {
        Some(v) => boolean("persist", v)?,
        None => false,
    };
    let ttl_s = match get("persistTtlS").filter(|v| !v.is_null()) {
        Some(v) => Some(positive_at_most(
            "persistTtlS",
            v,
            false,
            MAX_PERSIST_TTL_S,
            "seconds (a year)",
        )?),
        None => None,
    };
    if persist {
        let Some(name) = name else {
            return crate::invalid!("option `persist: true` needs a `name`: processes that name the same sandbox meet the same resident box");
        };
        if cfg.workspace.is_none() {
            return crate::invalid!("option `persist: true` needs a `workspace` (an absolute directory path): the resident box outlives this Sandbox, and a temporary workspace would be deleted at close()");
        }
        let ttl_s = ttl_s.unwrap_or(DEFAULT_PERSIST_TTL_S as f64);
        cfg.resident = Some(ResidentOpts {
            name,
            ttl_ms: (ttl_s * 1000.0).ceil() as u64,
        });
    } else if name.is_some() {
        return crate::invalid!("option `name` is only used with `persist: true` (it names the resident box); add `persist: true`, or leave `name` out");
    } else if ttl_s.is_some() {
        return crate::invalid!("option `persistTtlS` is only used with `persist: true`; add `persist: true`, or leave `persistTtlS` out");
    }
    Ok(())
}

/// `env`, checked against the exec limits.
pub(super) fn env(map: &Map<String, Value>, cfg: &mut Config) -> Result<()> {
    let get = |k: &str| map.get(k);
    if let Some(v) = get("env").filter(|v| !v.is_null()) {
        cfg.env = parse_env(v)?;
    }
    Ok(())
}

pub(crate) fn parse_env(v: &Value) -> Result<Vec<(String, String)>> {
    let map = v
        .as_object()
        .ok_or_else(|| type_err("env", "an object of string values", v))?;
    map.iter()
        .map(|(k, val)| {
            let s = val
                .as_str()
                .ok_or_else(|| Error::Invalid(format!("option `env`: the value of {k:?} must be a string, got {}", crate::config::describe(val))))?;
            if k.is_empty() || k.contains('=') || k.contains('\0') || s.contains('\0') {
                return crate::invalid!("option `env`: {k:?} is not a valid variable (no empty name, '=' in the name, or NUL bytes)");
            }
            Ok((k.clone(), s.to_string()))
        })
        .collect::<Result<Vec<_>>>()
        .and_then(|env| check_env_size(&env).map(|()| env))
}

/// `depsReadonly`, `setupNetwork`, `packageCache`, `pycCache`, `trackFiles`, `prewarm`, `zygote` and
/// `spareMemoryMb`.
pub(super) fn switches(map: &Map<String, Value>, cfg: &mut Config) -> Result<()> {
    let get = |k: &str| map.get(k);
    if let Some(v) = get("depsReadonly") {
        cfg.deps_readonly = boolean("depsReadonly", v)?;
    }
    if let Some(v) = get("setupNetwork").filter(|v| !v.is_null()) {
        cfg.setup_network = super::network::setup_network(v)?;
    }
    if let Some(v) = get("packageCache").filter(|v| !v.is_null()) {
        cfg.package_cache = super::network::package_cache(v)?;
        super::network::cache_clear_of_mounts(cfg)?;
    }
    if let Some(v) = get("pycCache") {
        cfg.pyc_cache = boolean("pycCache", v)?;
    }
    if let Some(v) = get("trackFiles") {
        cfg.track_files = boolean("trackFiles", v)?;
    }
    if let Some(v) = get("prewarm") {
        let n = v
            .as_f64()
            .ok_or_else(|| type_err("prewarm", "a non-negative integer", v))?;
        if !n.is_finite() || n < 0.0 || n.fract() != 0.0 {
            return Err(type_err("prewarm", "a non-negative integer", v));
        }
        if n > MAX_PREWARM as f64 {
            return crate::invalid!("option `prewarm` is {n}; at most {MAX_PREWARM} boxes are kept warm (each holds a booted interpreter for the whole session)");
        }
        cfg.prewarm = n as usize;
    }
    if let Some(v) = get("zygote") {
        cfg.zygote = boolean("zygote", v)?;
    }
    if let Some(v) = get("spareMemoryMb") {
        let n = v
            .as_f64()
            .filter(|n| n.is_finite() && *n >= 0.0 && n.fract() == 0.0)
            .ok_or_else(|| type_err("spareMemoryMb", "a non-negative integer", v))?;
        if n > MAX_SPARE_MEMORY_MB as f64 {
            return crate::invalid!("option `spareMemoryMb` is {n}; at most {MAX_SPARE_MEMORY_MB} MiB can go to spare boxes (0 keeps only the minimum)");
        }
        cfg.spare_memory_mb = n as u64;
    }
    Ok(())
}

/// ADDITION (issue 21): what the zygote's forks can't be given (`zygote`): refused, never
/// accepted and ignored. (An image whose USER is not root is refused at open(), once known.)
pub(super) fn zygote_limits(cfg: &Config) -> Result<()> {
    if !cfg.zygote {
        return Ok(());
    }
    let with = if cfg.seccomp.is_some() {
        "`securityProfile: \"untrusted\"`"
    } else if cfg.apparmor.is_some() {
        "`apparmor`"
    } else if !cfg.keep_caps.is_empty() {
        "a `capDrop` that keeps capabilities"
    } else if cfg.user.is_some() {
        "`user`"
    } else if !matches!(cfg.network, Network::None) {
        "`network: true` or `egressAllow`"
    } else {
        return zygote_places(cfg);
    };
    crate::invalid!("option `zygote` can't be combined with {with} yet: the zygote's forks would not get it; leave `zygote` out")
}

/// What would make the zygote's python, which starts before any call and must run nothing a box
/// could have written, read a place a box writes at its start: refused.
fn zygote_places(cfg: &Config) -> Result<()> {
    if let Some((k, _)) = cfg
        .env
        .iter()
        .find(|(k, _)| crate::session::zygote::refused(k))
    {
        return crate::invalid!("option `zygote` can't be combined with the environment variable {k} in `env`: python or its loader reads it only at start, from a place a box could write, and the zygote's python starts before any call and runs nothing a box could have written; leave `zygote` out, or {k} out of `env`");
    }
    if let Some(v) = cfg.volumes.iter().find(|v| v.access.writable()) {
        return crate::invalid!("option `zygote` can't be combined with a writable volume (`volumes`: {:?} at {}): a box could write there, and the zygote's python reads the image's own paths at its start; leave `zygote` out, or mount it read-only ({{ path, readonly: true }})", v.volume.name, v.target);
    }
    if let Some(m) = cfg.mounts.iter().find(|m| m.writable) {
        return crate::invalid!("option `zygote` can't be combined with a writable mount (`mounts`: {} as \"rw\"): a box could write there, and the zygote's python reads the image's own paths at its start; leave `zygote` out, or mount it read-only", m.target);
    }
    Ok(())
}

/// What a resident box can't combine with: refused, never accepted and ignored.
pub(super) fn resident_limits(map: &Map<String, Value>, cfg: &mut Config) -> Result<()> {
    let get = |k: &str| map.get(k);
    if cfg.resident.is_some() {
        // Refused, never accepted and ignored: each needs something the resident box can't give.
        if matches!(cfg.network, Network::Egress(_)) {
            return crate::invalid!("options `persist` and `egressAllow` can't be combined yet: the allowlist proxy lives in the process that opened the Sandbox, and a resident box outlives it; use network: false or true");
        }
        if cfg.zygote {
            return crate::invalid!("options `persist` and `zygote` can't be combined: a resident box runs every call itself; leave `zygote` out");
        }
        if let Some(v) = cfg.volumes.first() {
            return crate::invalid!("options `persist` and `volumes` can't be combined yet: a volume is held by the process that opened the Sandbox (so no other writer takes it, and nobody removes it, while a box has it mounted), and a resident box outlives that process; mount the volume {:?} in a Sandbox without persist, or its directory ({}) with `mounts`", v.volume.name, v.volume.data.display());
        }
        if cfg.prewarm > 0 {
            return crate::invalid!("options `persist` and `prewarm` can't be combined: a resident box runs every call itself (each call still starts a fresh interpreter); leave `prewarm` out");
        }
        if cfg
            .keep_caps
            .contains(&crate::engine::shared::caps::SYS_ADMIN)
        {
            return crate::invalid!("options `persist` and a `capDrop` that keeps SYS_ADMIN can't be combined yet: such a box's mounts are locked in a nested namespace that resident calls do not join; drop SYS_ADMIN (the default capDrop [\"ALL\"] does)");
        }
        // The compiled stdlib is bound into a box when it starts; a resident box would miss a
        // cache built later, so its calls compile as they import.
        if get("pycCache").and_then(Value::as_bool) == Some(true) {
            return crate::invalid!("options `persist` and `pycCache: true` can't be combined yet: the cache is bound into a box when it starts, and a resident box starts before it is built; leave pycCache out (it is off for resident boxes)");
        }
        cfg.pyc_cache = false;
    }
    Ok(())
}
