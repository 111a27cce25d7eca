//! Leaves read by more than one process (the addon, kern's monitor, the box): plain data and the
//! syscall edge, nothing that runs a box.
//!
//! - `spec`: the `BoxSpec` the addon writes and kern reads; `status`: kern's report back;
//!   `handoff`: what crosses each boundary (caller → kern, monitor ↔ init); `protocol`: every
//!   message's format, typed, with its one encoder and decoder (addon ↔ kern, init → monitor).
//! - `caps`: capability names; `mq`: the message-queue budget (lifted by kern, set in the box);
//!   `container`: what a container runtime refuses a box, and the line that lifts it.
//! - `sys`: the syscall edge, where every `unsafe` of the engine lives.

pub mod caps;
pub mod container;
pub mod handoff;
pub mod mq;
pub mod protocol;
pub mod spec;
pub mod status;
pub mod sys;
