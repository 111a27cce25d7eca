//! Readers of one option's JSON value: each mistake names the option and says what it wanted.

use crate::config::describe;
use crate::error::{Error, Result};
use serde_json::Value;

/// A positive number no larger than `max`; `what` says the unit for the message.
pub(super) fn positive_at_most(
    key: &str,
    v: &Value,
    integer: bool,
    max: f64,
    what: &str,
) -> Result<f64> {
    let n = positive(key, v, integer)?;
    if n > max {
        return crate::invalid!("option `{key}` is {n}, over the {max} {what} it may be");
    }
    Ok(n)
}

pub(super) fn type_err(key: &str, want: &str, v: &Value) -> Error {
    Error::Invalid(format!(
        "option `{key}` must be {want}, got {}",
        describe(v)
    ))
}

pub(super) fn positive(key: &str, v: &Value, integer: bool) -> Result<f64> {
    let want = if integer {
        "a positive integer"
    } else {
        "a positive number"
    };
    let n = v.as_f64().ok_or_else(|| type_err(key, want, v))?;
    if !n.is_finite() || n <= 0.0 || (integer && n.fract() != 0.0) {
        return Err(type_err(key, want, v));
    }
    Ok(n)
}

pub(super) fn boolean(key: &str, v: &Value) -> Result<bool> {
    v.as_bool().ok_or_else(|| type_err(key, "true or false", v))
}

pub(super) fn strings(key: &str, v: &Value) -> Result<Vec<String>> {
    let arr = v
        .as_array()
        .ok_or_else(|| type_err(key, "an array of strings", v))?;
    arr.iter()
        .map(|s| {
            s.as_str()
                .map(str::to_string)
                .ok_or_else(|| type_err(key, "an array of strings", v))
        })
        .collect()
}
