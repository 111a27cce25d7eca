//! Runs in the caller's process: the Node addon (on tokio), or the `kern` CLI when it starts a
//! box of its own. Nothing here forks except through `Command`, which execs `kern` at once.
//!
//! - `capture`: a stream's output as a call keeps it: capped, or spilled to the workspace.
//! - `drain`: the reader of a box's stream: keeps, forwards, and waits for its end.
//! - `launch`: spawn `kern` with a `BoxSpec`, stream the workload's output, read the report.

pub mod capture;
mod drain;
pub mod launch;
