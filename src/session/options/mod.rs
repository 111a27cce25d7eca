//! The Sandbox options as the spec defines them, checked one by one so that every mistake names
//! the option and says what to do. Options this release does not build are refused here, never
//! accepted and ignored.
//!
//! `parse` goes through the options by group, in a fixed order (a combination's mistake before
//! a single option's; `profiles` after the options it yields to): `network`, `runtime`,
//! `filesystem`, `limits`, `security`, each a file here, with `value` the readers they share.
//! The resolved `Config` and its bounds are `crate::config`, shared with `kern run`.

mod filesystem;
mod limits;
mod network;
mod runtime;
mod security;
mod value;

pub use crate::config::Config;
pub use limits::timeout_ms;
pub use network::{egress_list, egress_policy};
/// A call's `env` follows the Sandbox's rules (`session::percall`).
pub(crate) use runtime::parse_env;
pub(crate) use security::account;

use crate::error::Result;
use serde_json::{Map, Value};
use value::{strings, type_err};

const KNOWN: &[&str] = &[
    "image",
    "setup",
    "workspace",
    "workspaceMaxBytes",
    "workspaceMount",
    "name",
    "persist",
    "persistTtlS",
    "memoryMb",
    "cpus",
    "pids",
    "timeoutS",
    "network",
    "egressAllow",
    "secrets",
    "packageCache",
    "mounts",
    "volumes",
    "tmpfs",
    "profiles",
    "env",
    "maxOutputBytes",
    "spillOutput",
    "enforceLimits",
    "requireLimits",
    "securityProfile",
    "apparmor",
    "capDrop",
    "user",
    "depsReadonly",
    "setupNetwork",
    "pycCache",
    "trackFiles",
    "onStdout",
    "onStderr",
    "prewarm",
    "zygote",
    "spareMemoryMb",
    "requireIsolation",
];

/// Closest known option name, for "did you mean".
fn suggest(key: &str) -> Option<&'static str> {
    fn dist(a: &str, b: &str) -> usize {
        let (a, b): (Vec<char>, Vec<char>) = (
            a.to_lowercase().chars().collect(),
            b.to_lowercase().chars().collect(),
        );
        let mut prev: Vec<usize> = (0..=b.len()).collect();
        for (i, ca) in a.iter().enumerate() {
            let mut cur = vec![i + 1];
            for (j, cb) in b.iter().enumerate() {
                let cost = usize::from(ca != cb);
                cur.push((prev[j] + cost).min(prev[j + 1] + 1).min(cur[j] + 1));
            }
            prev = cur;
        }
        prev[b.len()]
    }
    KNOWN
        .iter()
        .map(|k| (dist(key, k), *k))
        .filter(|(d, _)| *d <= 3)
        .min()
        .map(|(_, k)| k)
}

/// Validates the options object (`null` = defaults).
pub fn parse(v: &Value) -> Result<Config> {
    let empty = Map::new();
    let map = match v {
        Value::Null => &empty,
        Value::Object(m) => m,
        other => return Err(type_err("options", "an object", other)),
    };
    for key in map.keys() {
        if !KNOWN.contains(&key.as_str()) {
            let hint = suggest(key)
                .map(|s| format!(" Did you mean `{s}`?"))
                .unwrap_or_default();
            return crate::invalid!(
                "unknown option `{key}`.{hint} See index.d.ts for the options a Sandbox takes."
            );
        }
    }
    let get = |k: &str| map.get(k);
    let mut cfg = Config::defaults();
    network::ways_out(map, &mut cfg)?;
    runtime::image_and_setup(map, &mut cfg)?;
    filesystem::workspace(map, &mut cfg)?;
    runtime::persist(map, &mut cfg)?;
    limits::caps(map, &mut cfg)?;
    filesystem::binds_and_scratch(map, &mut cfg)?;
    if let Some(v) = get("profiles").filter(|v| !v.is_null()) {
        // After memoryMb, cpus, mounts and tmpfs: a profile yields to those options and must
        // not land on their paths.
        super::profiles::apply(
            &mut cfg,
            &strings("profiles", v)?,
            get("memoryMb"),
            get("cpus"),
        )?;
    }
    filesystem::workspace_clear_of_scratch(&cfg)?;
    runtime::env(map, &mut cfg)?;
    network::secrets(map, &mut cfg)?;
    limits::output_and_enforcement(map, &mut cfg)?;
    security::posture(map, &mut cfg)?;
    runtime::switches(map, &mut cfg)?;
    runtime::resident_limits(map, &mut cfg)?;
    runtime::zygote_limits(&cfg)?;
    Ok(cfg)
}

/// Where the boxes of a Sandbox with these options see the workspace (`workspaceMount`, or
/// the default), for what is checked before open().
pub fn workspace_target(options: &Value) -> Result<String> {
    let Some(map) = options.as_object() else {
        return Ok(crate::engine::shared::spec::DEFAULT_WORKSPACE_TARGET.into());
    };
    Ok(filesystem::workspace_mount(map)?
        .unwrap_or_else(|| crate::engine::shared::spec::DEFAULT_WORKSPACE_TARGET.into()))
}

/// The checks that need nothing but the options themselves, made when a Sandbox is
/// constructed (the rest waits for open(), which may touch the filesystem and the network).
pub fn check_early(options: &Value) -> Result<()> {
    let Some(map) = options.as_object() else {
        return Ok(());
    };
    filesystem::workspace_mount(map)?;
    if let Some(v) = map.get("egressAllow").filter(|v| !v.is_null()) {
        let entries = strings("egressAllow", v)?;
        if map.get("network").and_then(Value::as_bool) == Some(true) {
            return crate::invalid!("`network: true` and `egressAllow` are mutually exclusive: network shares the host's network, egressAllow restricts it. Pick one.");
        }
        egress_policy(&entries)?;
    }
    if map.get("secrets").is_some_and(|v| !v.is_null()) {
        let mut cfg = crate::config::Config::defaults();
        network::ways_out(map, &mut cfg)?;
        if let Some(v) = map.get("env").filter(|v| !v.is_null()) {
            cfg.env = runtime::parse_env(v)?;
        }
        network::secrets(map, &mut cfg)?;
    }
    if let Some(v) = map.get("profiles").filter(|v| !v.is_null()) {
        super::profiles::check_tokens(&strings("profiles", v)?)?;
    }
    // ADDITION: unknown controls, and `network: true` with "network", before any box.
    crate::session::isolation::required(options)?;
    // An env the kernel can't exec is refused here, not by every box that tries.
    if let Some(v) = map.get("env").filter(|v| !v.is_null()) {
        runtime::parse_env(v)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
