//! kern-sandbox: run agent-written code in a fresh, isolated Linux box per call.
//!
//! The crate is three layers: `engine` builds boxes (no napi), `session`/`workspace`/`lang`
//! turn the published options into box specs, and `binding` (behind the `napi-binding`
//! feature) is the Node addon's thin surface.

pub mod config;
pub mod engine;
pub mod error;
pub mod fsx;
pub mod image;
pub mod lang;
pub mod proxy;
pub mod session;
pub mod workspace;

#[cfg(feature = "napi-binding")]
mod binding;
