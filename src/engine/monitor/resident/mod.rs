//! Resident boxes (`persist`): a box that outlives the call that started it, and the calls that
//! run in it later.
//!
//! - `state`: one state file per name (who the box is, its posture, the namespaces its monitor
//!   holds open), with its lock; what `kern ps`/`exec`/`stop` and the session look up.
//! - `keep`: the box's monitor once the box is up: write the state, report, detach, keep the
//!   box to its TTL.
//! - `call`: one call into a live box, from the `kern` that runs it.

pub mod call;
pub(in crate::engine) mod keep;
mod state;

pub use state::{
    check_name, find, list, lock, now_unix_ms, posture_diff, posture_hash, read, remove_if_monitor,
    state_dir, stop, write, Live, Lock, State,
};

#[cfg(test)]
mod tests;
