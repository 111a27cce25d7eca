//! ADDITION: what `isolation()` reports, and how a probe's output is read (`read`); the probes
//! themselves run in `probes`. What a box of this session really gets, measured, not inferred
//! from the options: a probe box with the session's posture (image,
//! account, limits, capabilities, seccomp, network) reads its own `/proc` (namespaces, seccomp
//! mode, uid map) and kern reports how it applied the caps, read back from the cgroup
//! (`engine::shared::status::Applied`). The host's namespaces are this process's own.
//!
//! The probe runs the image's `/bin/sh` and `readlink`, so an image can make them print
//! anything: what they say is never taken above what kern was asked to apply. A box of a
//! `network: true` session shares the host's network, and only one with the untrusted profile
//! has its filters, whatever the probe prints; the probe can only lower the report (a control
//! kern was asked for but that is not in force). kern makes the user, mount and PID namespaces
//! of every box and never maps every host id, so those fields are what kern applied unless
//! kern itself failed silently and the image lied about it too.

use crate::config::{Config, Network};
use crate::error::{Error, Result};
use std::collections::HashMap;

/// The controls `requireIsolation` may insist on.
pub const CONTROLS: &[&str] = &["filesystem", "network", "process", "limits", "seccomp"];

/// What the probe box prints: only `sh` builtins and `readlink`, from `/proc/self`.
pub(super) const PROBE: &str =
    "for n in user mnt pid net; do echo \"ns $n $(readlink /proc/self/ns/$n)\"; done; \
while read -r k v; do case $k in Seccomp:) echo \"seccomp $v\";; Seccomp_filters:) echo \"filters $v\";; esac; done < /proc/self/status; \
while read -r a b c; do echo \"uidmap $a $b $c\"; done < /proc/self/uid_map; \
while read -r a b c d e; do case \"$a $b $c\" in 'Max data size') echo \"rlimit data $d\";; 'Max processes '*) echo \"rlimit nproc $c\";; esac; done < /proc/self/limits";

/// The measured posture (`sb.isolation()`).
#[derive(Debug, Clone, serde::Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Isolation {
    /// The box has a mount namespace (its own root) of its own.
    pub filesystem: bool,
    /// `"none"`, `"allowlist"` (own network namespace, out only through the proxy) or `"host"`.
    pub network: &'static str,
    /// The box has a PID namespace of its own.
    pub process: bool,
    pub limits: Limits,
    /// `"untrusted"`: the profile's filters are in force in the box; `"standard"`: only kern's
    /// set-id filter (every box has it); `"none"`: no filter at all.
    pub seccomp: &'static str,
    /// The box runs in a user namespace of its own that does not map every host id.
    pub userns: bool,
    /// `"v1"`/`"v2"`: the cgroup hierarchy holding the box; `None` without one.
    pub cgroup: Option<String>,
    /// kern's notes of the probe (why a cap fell back), for `requireIsolation`'s message.
    #[serde(skip)]
    pub(super) notes: Vec<String>,
    /// ADDITION: the same, measured in the box each route a call of this session can take
    /// really runs in (`probes::measure_routes`), by route name; none inside a route's own report.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub routes: Option<std::collections::BTreeMap<&'static str, Isolation>>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct Limits {
    pub memory: String,
    pub pids: String,
    pub cpu: String,
}

/// The `requireIsolation` option, checked: known names only, and not with `network: true`.
/// Made when the Sandbox is constructed, before any box.
pub fn required(options: &serde_json::Value) -> Result<Vec<String>> {
    let Some(v) = options.get("requireIsolation").filter(|v| !v.is_null()) else {
        return Ok(Vec::new());
    };
    let wrong = || {
        Error::Invalid(format!(
            "option `requireIsolation` must be an array of control names, some of {}, e.g. [\"network\", \"limits\"]",
            names()
        ))
    };
    let list = v.as_array().ok_or_else(wrong)?;
    let mut out = Vec::new();
    for item in list {
        let name = item.as_str().ok_or_else(wrong)?;
        if !CONTROLS.contains(&name) {
            return crate::invalid!(
                "option `requireIsolation`: {name:?} is not a control; the controls are {}",
                names()
            );
        }
        if !out.iter().any(|n| n == name) {
            out.push(name.to_string());
        }
    }
    if out.iter().any(|n| n == "network")
        && options.get("network").and_then(serde_json::Value::as_bool) == Some(true)
    {
        return crate::invalid!("`requireIsolation: [\"network\"]` and `network: true` contradict each other: \"network\" requires no host network (none, or egressAllow's allowlist), and network: true shares the host's. Drop one.");
    }
    Ok(out)
}

fn names() -> String {
    CONTROLS
        .iter()
        .map(|c| format!("\"{c}\""))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Why a box's posture could not be measured.
pub(super) fn unmeasured(why: String) -> Error {
    Error::IsolationUnavailable(format!(
        "cannot measure the isolation of this Sandbox's boxes: {why}. The probe box runs /bin/sh and readlink from the image; an image without them can't be measured"
    ))
}

/// The report from what a probe printed in its box (`PROBE`'s lines, or `PROBE_PY`'s) and
/// how kern applied that box's caps (`None`: its report did not say, read as not in force).
pub(super) fn read(
    config: &Config,
    out: &str,
    applied: Option<crate::engine::shared::status::Applied>,
    notes: Vec<String>,
) -> Result<Isolation> {
    let mut ns = HashMap::new();
    let mut seccomp = None;
    let mut filters = None;
    let mut uid_map = Vec::new();
    for line in out.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        match f.as_slice() {
            ["ns", name, link] => {
                ns.insert(name.to_string(), link.to_string());
            }
            ["seccomp", mode] => seccomp = Some(mode.to_string()),
            ["filters", n] => filters = n.parse::<u32>().ok(),
            ["uidmap", a, b, c] => uid_map.push(format!("{a} {b} {c}")),
            _ => {}
        }
    }
    // A namespace of the box's own: its link (`net:[4026532261]`) differs from ours.
    let own = |name: &str| -> Result<bool> {
        let inside = ns
            .get(name)
            .filter(|l| !l.is_empty())
            .ok_or_else(|| unmeasured(format!("the probe did not read /proc/self/ns/{name}")))?;
        let host = std::fs::read_link(format!("/proc/self/ns/{name}"))
            .map_err(|e| unmeasured(format!("read /proc/self/ns/{name} on the host: {e}")))?;
        Ok(host.to_string_lossy() != inside.as_str())
    };
    let applied = applied.unwrap_or_default();
    let full_map = uid_map.iter().any(|m| m == "0 0 4294967295");
    Ok(Isolation {
        filesystem: own("mnt")?,
        network: match (own("net")?, &config.network) {
            (false, _) | (_, Network::Host) => "host",
            (true, Network::Egress(_)) => "allowlist",
            (true, _) => "none",
        },
        process: own("pid")?,
        limits: Limits {
            memory: or_none(applied.memory),
            pids: or_none(applied.pids),
            cpu: or_none(applied.cpu),
        },
        // Every box has kern's set-id filter; the untrusted profile stacks two more on it
        // (`engine::boxside::seccomp`). Kernels before 5.9 show no count: then the profile's presence
        // is what the spec asked for, which init enters or fails the box.
        seccomp: match (seccomp.as_deref(), filters) {
            (Some("0"), _) => "none",
            (Some(_), Some(n)) if n >= 3 && config.seccomp.is_some() => "untrusted",
            (Some(_), Some(_)) => "standard",
            (Some(_), None) if config.seccomp.is_some() => "untrusted",
            (Some(_), None) => "standard",
            (None, _) => return Err(unmeasured("the probe did not read its seccomp mode".into())),
        },
        userns: own("user")? && !full_map,
        cgroup: applied.cgroup,
        notes,
        routes: None,
    })
}

fn or_none(s: String) -> String {
    if s.is_empty() {
        "none".into()
    } else {
        s
    }
}
