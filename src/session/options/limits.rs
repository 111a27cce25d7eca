//! The resource options: the cgroup caps (`memoryMb`, `cpus`, `pids`), time and output
//! (`timeoutS`, `maxOutputBytes`, `spillOutput`) and how the caps are held (`enforceLimits`, `requireLimits`).

use super::value::{boolean, positive, positive_at_most};
use crate::config::{
    cpus_out_of_bounds, memory_out_of_bounds, pids_out_of_bounds, Config, MAX_OUTPUT_BYTES,
    MAX_TIMEOUT_S, MIB, MIN_TIMEOUT_S,
};
use crate::error::Result;
use serde_json::{Map, Value};

/// `memoryMb`, `cpus`, `pids` and `timeoutS`.
pub(super) fn caps(map: &Map<String, Value>, cfg: &mut Config) -> Result<()> {
    let get = |k: &str| map.get(k);
    match get("memoryMb") {
        None => {}
        Some(Value::Null) => cfg.limits.memory_bytes = None,
        Some(v) => {
            // Saturating: a value past u64 is reported as over the bound, not wrapped.
            let bytes = (positive("memoryMb", v, false)? * MIB as f64) as u64;
            if let Some(why) = memory_out_of_bounds(bytes) {
                return crate::invalid!("option `memoryMb` {why}");
            }
            cfg.limits.memory_bytes = Some(bytes)
        }
    }
    match get("cpus") {
        None | Some(Value::Null) => {}
        Some(v) => {
            let cores = positive("cpus", v, false)?;
            if let Some(why) = cpus_out_of_bounds(cores) {
                return crate::invalid!("option `cpus` {why}");
            }
            cfg.limits.cpus = Some(cores)
        }
    }
    match get("pids") {
        None => {}
        Some(Value::Null) => cfg.limits.pids = None,
        Some(v) => {
            let n = positive("pids", v, true)? as u64;
            if let Some(why) = pids_out_of_bounds(n) {
                return crate::invalid!("option `pids` {why}");
            }
            cfg.limits.pids = Some(n)
        }
    }
    if let Some(v) = get("timeoutS") {
        cfg.timeout_ms = timeout_ms("timeoutS", v)?;
    }
    Ok(())
}

/// `maxOutputBytes`, `spillOutput`, `enforceLimits` and `requireLimits`.
pub(super) fn output_and_enforcement(map: &Map<String, Value>, cfg: &mut Config) -> Result<()> {
    let get = |k: &str| map.get(k);
    if let Some(v) = get("maxOutputBytes") {
        cfg.max_output = positive_at_most(
            "maxOutputBytes",
            v,
            true,
            MAX_OUTPUT_BYTES as f64,
            "bytes (256 MiB per stream: what a JavaScript string of the output can hold)",
        )? as usize;
    }
    if let Some(v) = get("spillOutput") {
        cfg.spill_output = boolean("spillOutput", v)?;
    }
    if let Some(v) = get("enforceLimits") {
        cfg.limits.enforce = boolean("enforceLimits", v)?;
    }
    if let Some(v) = get("requireLimits") {
        cfg.limits.require = boolean("requireLimits", v)?;
        if cfg.limits.require && !cfg.limits.enforce {
            return crate::invalid!("`requireLimits: true` and `enforceLimits: false` contradict each other: requireLimits insists on the cgroup caps that enforceLimits: false turns off. Drop one.");
        }
    }
    Ok(())
}

/// A timeout in seconds as milliseconds, checked.
pub fn timeout_ms(key: &str, v: &Value) -> Result<u64> {
    let s = positive(key, v, false)?;
    if s < MIN_TIMEOUT_S {
        return crate::invalid!("option `{key}` is {s} s; the shortest timeout is {MIN_TIMEOUT_S} s (10 ms: no box starts sooner)");
    }
    if s > MAX_TIMEOUT_S {
        return crate::invalid!(
            "option `{key}` is {s} s; the longest supported timeout is 7 days ({MAX_TIMEOUT_S} s)"
        );
    }
    Ok((s * 1000.0).ceil() as u64)
}
