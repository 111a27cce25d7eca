//! The filesystem options: `workspace` and its cap, host binds (`mounts`, checked by
//! `host_binds`) and scratch (`tmpfs`).

use super::value::{positive_at_most, type_err};
use crate::config::{
    check_target, parse_size, tmpfs_out_of_bounds, Config, DEFAULT_TMPFS_MB, MAX_MOUNTS,
    MAX_SAFE_BYTES, MIB,
};
use crate::engine::shared::spec::{TmpfsSpec, DEFAULT_WORKSPACE_TARGET};
use crate::error::{Error, Result};
use crate::session::host_binds;
use serde_json::{Map, Value};
use std::path::PathBuf;

/// `workspace` and `workspaceMaxBytes`.
pub(super) fn workspace(map: &Map<String, Value>, cfg: &mut Config) -> Result<()> {
    let get = |k: &str| map.get(k);
    if let Some(v) = get("workspace") {
        match v {
            Value::Null => {}
            Value::String(s) if s.is_empty() => return crate::invalid!("option `workspace` is empty; pass an absolute directory path or leave it out"),
            Value::String(s) if !s.starts_with('/') => {
                return crate::invalid!("option `workspace` {s:?} is relative; pass an absolute path (e.g. path.resolve({s:?}))")
            }
            Value::String(s) => cfg.workspace = Some(PathBuf::from(s)),
            other => return Err(type_err("workspace", "an absolute directory path", other)),
        }
    }
    if let Some(v) = get("workspaceMaxBytes").filter(|v| !v.is_null()) {
        cfg.workspace_max_bytes = Some(positive_at_most(
            "workspaceMaxBytes",
            v,
            true,
            MAX_SAFE_BYTES as f64,
            "bytes (2^53 - 1, the largest integer JavaScript holds exactly)",
        )? as u64);
    }
    Ok(())
}

/// `mounts` and `tmpfs`, and that no mount and scratch overlap.
pub(super) fn binds_and_scratch(map: &Map<String, Value>, cfg: &mut Config) -> Result<()> {
    let get = |k: &str| map.get(k);
    if let Some(v) = get("mounts").filter(|v| !v.is_null()) {
        if !v.is_object() {
            return Err(type_err("mounts", "an object { hostSrc: boxTarget }", v));
        }
        let ctx = host_binds::Context::from_host(DEFAULT_WORKSPACE_TARGET);
        cfg.mounts = host_binds::parse(v, &ctx)?;
        // Parents before children, so a nested target is mounted on top of its parent's.
        cfg.mounts.sort_by_key(|m| m.target.matches('/').count());
        if cfg.mounts.len() > MAX_MOUNTS {
            return crate::invalid!(
                "option `mounts` has {} entries; at most {MAX_MOUNTS} are allowed",
                cfg.mounts.len()
            );
        }
    }
    let explicit_tmpfs = get("tmpfs").is_some_and(|v| !v.is_null());
    if explicit_tmpfs {
        cfg.tmpfs = parse_tmpfs(get("tmpfs").unwrap_or(&Value::Null))?;
    }
    // A mount at /tmp replaces the default scratch; one the caller also asked for is a conflict.
    // Mounts and scratch never nest: one would hide the other.
    for m in &cfg.mounts {
        if !explicit_tmpfs && m.target == "/tmp" {
            cfg.tmpfs.retain(|t| t.target != "/tmp");
        }
        for t in &cfg.tmpfs {
            let nested = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}/"));
            if nested(&m.target, &t.target) || nested(&t.target, &m.target) {
                return crate::invalid!("the mount at {} and the tmpfs at {} overlap; drop one of them (a mount at /tmp replaces the default /tmp scratch by itself)", m.target, t.target);
            }
        }
    }
    Ok(())
}

fn parse_tmpfs(v: &Value) -> Result<Vec<TmpfsSpec>> {
    let key = "tmpfs";
    let default = DEFAULT_TMPFS_MB * MIB;
    let mut out: Vec<TmpfsSpec> = Vec::new();
    let mut push = |target: &str, size: u64| -> Result<()> {
        let target = check_target(key, target)?;
        if out.iter().any(|t| t.target == target) {
            return crate::invalid!("option `tmpfs` names {target:?} twice");
        }
        out.push(TmpfsSpec {
            target,
            size_bytes: size,
        });
        Ok(())
    };
    match v {
        Value::Array(items) => {
            for item in items {
                let t = item
                    .as_str()
                    .ok_or_else(|| type_err(key, "an array of absolute paths", item))?;
                push(t, default)?;
            }
        }
        Value::Object(map) => {
            for (target, size) in map {
                let bytes = match size {
                    Value::Null => default,
                    Value::String(s) => {
                        let bytes = parse_size(s).ok_or_else(|| {
                            Error::Invalid(format!("option `tmpfs`: size {s:?} for {target:?} is not a size like \"64m\", \"1g\" or \"512k\""))
                        })?;
                        if let Some(why) = tmpfs_out_of_bounds(bytes) {
                            return crate::invalid!(
                                "option `tmpfs`: size {s:?} for {target:?} {why}"
                            );
                        }
                        bytes
                    }
                    other => {
                        return Err(type_err(
                            key,
                            "a map of path -> size string (\"64m\") or null",
                            other,
                        ))
                    }
                };
                push(target, bytes)?;
            }
        }
        other => {
            return Err(type_err(
                key,
                "a map { \"/path\": \"64m\" } or an array [\"/path\"]",
                other,
            ))
        }
    }
    Ok(out)
}
