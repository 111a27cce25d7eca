//! kern-sandbox: run agent-written code in a fresh, isolated Linux box per call.
//!
//! The crate is three layers: `engine` builds boxes (no napi; split by the process that runs
//! each part), `session`/`workspace`/`lang` turn the published options into box specs, and
//! `binding` (behind the `napi-binding` feature) is the Node addon's thin surface. Beside them:
//! `proxy`, the egress proxy the addon runs for a box with `egressAllow`; `image`, the image
//! store and registry client (it takes types from `engine`, never the other way); the leaves
//! every layer may use (`error`, `fsx`, `home`); and `config`, what the options resolve to.

pub mod config;
pub mod engine;
pub mod error;
pub mod fsx;
pub mod home;
pub mod image;
pub mod lang;
pub mod proxy;
pub mod session;
pub mod volume;
pub mod workspace;

#[cfg(feature = "napi-binding")]
mod binding;
