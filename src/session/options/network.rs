//! The network options: `network`, `egressAllow` (the boxes' way out) and `setupNetwork`
//! (the `setup` box's).

use super::value::{boolean, strings, type_err};
use crate::config::{Config, Network, SetupNetwork};
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
        None | Some(Value::Null) => Vec::new(),
        Some(v) => strings("egressAllow", v)?,
    };
    if network && get("egressAllow").is_some_and(|v| !v.is_null()) {
        return crate::invalid!("`network: true` and `egressAllow` are mutually exclusive: network shares the host's network, egressAllow restricts it. Pick one.");
    }
    if network {
        cfg.network = Network::Host;
    } else if !egress.is_empty() {
        // An empty list allows nothing: the default, a box with no network at all.
        cfg.network = Network::Egress(egress_policy(&egress)?);
    }

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

/// The proxy's policy from `egressAllow` entries; a bad entry is the option's error.
pub fn egress_policy(entries: &[String]) -> Result<crate::engine::proxy::Policy> {
    crate::engine::proxy::Policy::parse(entries)
        .map_err(|e| Error::Invalid(format!("option `egressAllow`: {e}")))
}
