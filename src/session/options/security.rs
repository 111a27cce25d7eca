//! The posture options: `securityProfile`, `user`, `apparmor`, `capDrop`.

use super::value::{strings, type_err};
use crate::config::Config;
use crate::error::{Error, Result};
use serde_json::{Map, Value};

/// `securityProfile`, `user`, `apparmor` and `capDrop`, in that order (capDrop is checked
/// against the profile).
pub(super) fn posture(map: &Map<String, Value>, cfg: &mut Config) -> Result<()> {
    let get = |k: &str| map.get(k);
    if let Some(v) = get("securityProfile").filter(|v| !v.is_null()) {
        let name = v
            .as_str()
            .ok_or_else(|| type_err("securityProfile", "\"untrusted\" or null", v))?;
        if name != "untrusted" {
            return crate::invalid!("option `securityProfile` {name:?} is not a profile: the one profile is \"untrusted\" (null keeps kern's standard posture)");
        }
        let programs = crate::engine::boxside::seccomp::untrusted()
            .map_err(|e| Error::HostUnsupported(format!("option `securityProfile`: {e}")))?;
        cfg.seccomp = Some(programs.clone());
    }
    if let Some(v) = get("user").filter(|v| !v.is_null()) {
        cfg.user = Some(account(v)?);
    }
    if let Some(v) = get("apparmor").filter(|v| !v.is_null()) {
        let name = v
            .as_str()
            .ok_or_else(|| type_err("apparmor", "a profile name or null", v))?;
        if name.is_empty()
            || name.len() > 255
            || name.chars().any(|c| c.is_control() || c.is_whitespace())
        {
            return crate::invalid!("option `apparmor` {name:?} is not an AppArmor profile name: give the name of a profile loaded on the host (no spaces or control characters, at most 255 bytes)");
        }
        cfg.apparmor = Some(name.to_string());
    }
    if let Some(v) = get("capDrop").filter(|v| !v.is_null()) {
        let drop = strings("capDrop", v)?;
        cfg.keep_caps = crate::engine::shared::caps::kept_after_dropping(&drop)
            .map_err(|e| Error::Invalid(format!("option `capDrop`: {e}")))?;
        if cfg.seccomp.is_some() && !cfg.keep_caps.is_empty() {
            return crate::invalid!("`securityProfile: \"untrusted\"` drops every capability, and `capDrop` keeps some: use capDrop [\"ALL\"] (or leave it out) with the untrusted profile, or drop the profile");
        }
        // Run as root, box root writes through the idmapped workspace as the workspace's owner:
        // a file capability it set (`setcap cap_setuid+ep`) would be one the host honours.
        if nix::unistd::geteuid().is_root()
            && cfg
                .keep_caps
                .contains(&crate::engine::shared::caps::SETFCAP)
        {
            return crate::invalid!("option `capDrop` keeps SETFCAP, and kern-sandbox runs as root: box root could then give a workspace file capabilities (`setcap cap_setuid+ep`) that the host honours; add \"SETFCAP\" to capDrop (e.g. capDrop: [\"SETFCAP\"] to keep every other capability)");
        }
    }
    Ok(())
}

/// `"<user>[:<group>]"`, each part a name or a number; names are looked up at open().
/// `user` (the Sandbox's, or a call's own): an account as `"<user>[:<group>]"`, checked.
pub(crate) fn account(v: &Value) -> Result<String> {
    let account = v
        .as_str()
        .ok_or_else(|| type_err("user", "\"<user>[:<group>]\" or null", v))?;
    Ok(check_account(account)?.to_string())
}

fn check_account(account: &str) -> Result<&str> {
    let part_ok = |p: &str| {
        !p.is_empty()
            && p.len() <= 32
            && p.chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '$'))
            && !p.starts_with('-')
    };
    let mut parts = account.split(':');
    let ok = parts.next().is_some_and(part_ok)
        && parts.next().is_none_or(part_ok)
        && parts.next().is_none();
    if !ok {
        return crate::invalid!("option `user` {account:?} is not \"<user>[:<group>]\": give a name or a numeric id for each, such as \"node\", \"1000\" or \"1000:1000\"");
    }
    let range = crate::engine::monitor::idmap::RANGE;
    for part in account.split(':') {
        let numeric = part.bytes().all(|b| b.is_ascii_digit());
        if numeric && part.parse::<u32>().map_or(true, |id| id >= range) {
            return crate::invalid!("option `user` {account:?}: id {part} is outside the {range} ids a box has (0 to {}), root or not; give an id below {range}", range - 1);
        }
    }
    Ok(account)
}
