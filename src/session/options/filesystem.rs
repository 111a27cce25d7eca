//! The filesystem options: `workspace`, its cap and where the boxes see it (`workspaceMount`),
//! host binds (`mounts`, checked by `host_binds`) and scratch (`tmpfs`).

use super::value::{positive_at_most, type_err};
use crate::config::{
    at_or_under, check_target, check_workspace_mount, parse_size, tmpfs_out_of_bounds, Config,
    DEFAULT_TMPFS_MB, MAX_MOUNTS, MAX_SAFE_BYTES, MIB,
};
use crate::engine::shared::spec::TmpfsSpec;
use crate::error::{Error, Result};
use crate::session::host_binds;
use serde_json::{Map, Value};
use std::path::PathBuf;

/// `workspace`, `workspaceMount` and `workspaceMaxBytes`.
pub(super) fn workspace(map: &Map<String, Value>, cfg: &mut Config) -> Result<()> {
    let get = |k: &str| map.get(k);
    if let Some(v) = get("workspace") {
        match v {
            Value::Null => {}
            Value::String(s) if s.is_empty() => return crate::invalid!("option `workspace` is empty; pass an absolute directory path or leave it out"),
            Value::String(s) if !s.starts_with('/') => {
                return crate::invalid!("option `workspace` {s:?} is relative; pass an absolute path (e.g. path.resolve({s:?}))")
            }
            Value::String(s) => {
                let path = PathBuf::from(s);
                // Before anything is made there: kern itself writes a workspace.
                host_binds::check_workspace(&path)?;
                cfg.workspace = Some(path);
            }
            other => return Err(type_err("workspace", "an absolute directory path", other)),
        }
    }
    if let Some(t) = workspace_mount(map)? {
        cfg.workspace_target = t;
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
        if get("workspaceMount").is_some_and(|v| !v.is_null()) {
            mounts_clear_of_workspace(v, &cfg.workspace_target)?;
        }
        let ctx = host_binds::Context::from_host(&cfg.workspace_target);
        cfg.mounts = host_binds::parse(v, &ctx)?;
        if cfg.mounts.len() > MAX_MOUNTS {
            return crate::invalid!(
                "option `mounts` has {} entries; at most {MAX_MOUNTS} are allowed",
                cfg.mounts.len()
            );
        }
    }
    if let Some(v) = get("volumes").filter(|v| !v.is_null()) {
        volumes(v, cfg)?;
    }
    // Parents before children, so a nested target is mounted on top of its parent's.
    cfg.mounts.sort_by_key(|m| m.target.matches('/').count());
    let explicit_tmpfs = get("tmpfs").is_some_and(|v| !v.is_null());
    if explicit_tmpfs {
        cfg.tmpfs = parse_tmpfs(get("tmpfs").unwrap_or(&Value::Null), &cfg.workspace_target)?;
    }
    // A mount at /tmp replaces the default scratch; one the caller also asked for is a conflict.
    // Mounts and scratch never nest: one would hide the other.
    for m in &cfg.mounts {
        if !explicit_tmpfs && m.target == "/tmp" {
            cfg.tmpfs.retain(|t| t.target != "/tmp");
        }
        for t in &cfg.tmpfs {
            if at_or_under(&m.target, &t.target) || at_or_under(&t.target, &m.target) {
                return crate::invalid!("the mount at {} and the tmpfs at {} overlap; drop one of them (a mount at /tmp replaces the default /tmp scratch by itself)", m.target, t.target);
            }
        }
    }
    Ok(())
}

/// ADDITION (issue 35): `volumes`, `{ name: "/data" | { path, readonly, shared } }`: each
/// named volume resolved (it must exist) and added to the mounts, where the mounts' rules on
/// targets apply; open() takes them.
fn volumes(v: &Value, cfg: &mut Config) -> Result<()> {
    use crate::volume::Access;
    let key = "volumes";
    let Some(map) = v.as_object() else {
        return Err(type_err(
            key,
            "an object { name: \"/data\" } or { name: { path: \"/data\", readonly: true } }",
            v,
        ));
    };
    for (name, spec) in map {
        crate::volume::check_name(name)
            .map_err(|e| Error::Invalid(format!("option `volumes`: {e}")))?;
        let shape = || {
            Error::Invalid(format!("option `volumes`: the value for {name:?} must be a box path such as \"/data\" or {{ path: \"/data\", readonly?: boolean, shared?: boolean }}, got {}", crate::config::describe(spec)))
        };
        let (path, access) = match spec {
            Value::String(p) => (p.as_str(), Access::Exclusive),
            Value::Object(o) => {
                if let Some(k) = o
                    .keys()
                    .find(|k| !matches!(k.as_str(), "path" | "readonly" | "shared"))
                {
                    return crate::invalid!("option `volumes`: {name:?} has the unknown key `{k}`; a volume takes path, readonly and shared");
                }
                let flag = |k: &str| match o.get(k) {
                    None | Some(Value::Null) => Ok(false),
                    Some(Value::Bool(b)) => Ok(*b),
                    Some(other) => {
                        Err(type_err(&format!("volumes.{name}.{k}"), "a boolean", other))
                    }
                };
                let (readonly, shared) = (flag("readonly")?, flag("shared")?);
                let access = match (readonly, shared) {
                    (true, true) => return crate::invalid!("option `volumes`: {name:?} is both readonly and shared; `shared` is for writers that write it together: drop one"),
                    (true, false) => Access::ReadOnly,
                    (false, true) => Access::Shared,
                    (false, false) => Access::Exclusive,
                };
                (
                    o.get("path").and_then(Value::as_str).ok_or_else(shape)?,
                    access,
                )
            }
            _ => return Err(shape()),
        };
        let target =
            host_binds::check_target(&format!("volumes: {name:?}"), path, &cfg.workspace_target)?;
        if let Some(m) = cfg
            .mounts
            .iter()
            .find(|m| at_or_under(&m.target, &target) || at_or_under(&target, &m.target))
        {
            return Err(Error::MountRefused(format!("volumes: {name:?}: target {target:?} is over, inside or at another mount or volume ({:?}); give each its own box path", m.target)));
        }
        let using = crate::volume::Use {
            volume: crate::volume::resolve(name)?,
            target,
            access,
        };
        cfg.mounts.push(using.bind());
        cfg.volumes.push(using);
    }
    if cfg.mounts.len() > MAX_MOUNTS {
        return crate::invalid!(
            "options `mounts` and `volumes` have {} entries together; at most {MAX_MOUNTS} are allowed",
            cfg.mounts.len()
        );
    }
    Ok(())
}

/// `workspaceMount` by itself (None: the default): also checked when the Sandbox is made.
pub(super) fn workspace_mount(map: &Map<String, Value>) -> Result<Option<String>> {
    let Some(v) = map.get("workspaceMount").filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let Value::String(s) = v else {
        return Err(type_err(
            "workspaceMount",
            "an absolute box path such as \"/home/user\"",
            v,
        ));
    };
    check_workspace_mount("workspaceMount", s).map(Some)
}

/// A chosen `workspaceMount` against the `mounts` that name it, over it or inside it: the
/// combination is the mistake, so it is said as `workspaceMount`'s (the mounts' own rule,
/// `host_binds`, refuses the same for the default mount point).
fn mounts_clear_of_workspace(mounts: &Value, ws: &str) -> Result<()> {
    let Some(map) = mounts.as_object() else {
        return Ok(());
    };
    for (src, spec) in map {
        let Some(t) = host_binds::target_of(src, spec) else {
            continue;
        };
        if at_or_under(t, ws) || at_or_under(ws, t) {
            return crate::invalid!("option `workspaceMount` {ws:?} clashes with the mount of {src:?} at {t:?} (`mounts`): one would be over or inside the other; pick a workspaceMount outside every mount target, or mount it elsewhere");
        }
    }
    Ok(())
}

/// The workspace mount against every scratch mount, the default `/tmp` and `vdisk:` profiles'
/// included (checked once those are known): one would hide the other.
pub(super) fn workspace_clear_of_scratch(cfg: &Config) -> Result<()> {
    let ws = &cfg.workspace_target;
    if let Some(t) = cfg
        .tmpfs
        .iter()
        .find(|t| at_or_under(ws, &t.target) || at_or_under(&t.target, ws))
    {
        return crate::invalid!("option `workspaceMount` {ws:?} is over or inside the scratch tmpfs at {:?} (the default /tmp, `tmpfs` or a `vdisk:` profile); pick a path outside it, or leave that scratch out", t.target);
    }
    Ok(())
}

fn parse_tmpfs(v: &Value, workspace: &str) -> Result<Vec<TmpfsSpec>> {
    let key = "tmpfs";
    let default = DEFAULT_TMPFS_MB * MIB;
    let mut out: Vec<TmpfsSpec> = Vec::new();
    let mut push = |target: &str, size: u64| -> Result<()> {
        let target = check_target(key, target, workspace)?;
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
