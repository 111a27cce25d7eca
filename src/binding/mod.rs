//! The napi exports: JS values in, engine types out, errors as stable codes. The public JS layer
//! (`js/`) wraps these private classes and maps the codes to error classes. One module per
//! class, as `js/` has them: `sandbox` (`NativeSandbox`), `kernel`, `process`, `publish`, `streams`, `watch`, and `volume` (the `Volume` statics); with
//! the leaves they share: `errors` (codes), `aborts` (a call's `signal`), `callbacks` (output
//! and results delivered to JS), `result` (a call's result as JS sees it).

mod aborts;
mod callbacks;
mod errors;
mod kernel;
mod process;
mod publish;
mod result;
mod sandbox;
mod streams;
mod volume;
mod watch;

use napi_derive::napi;

/// The crate version, for `version`.
#[napi]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}
