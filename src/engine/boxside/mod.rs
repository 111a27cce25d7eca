//! Runs inside the box: the clone child that waits for "go" and becomes PID 1, what PID 1 forks,
//! and the workload's last steps before its exec. None of it runs in the monitor.
//!
//! - `init`: PID 1 and a resident call's init; `pid1_signals`: PID 1's signal loop.
//! - `mounts` (with `rootfs`, the top of the box's root, and `mountpoint`, the places mounts
//!   land): the mount tree and the pivot.
//! - The workload's posture: `seccomp` (the profile's filters, compiled by the caller and carried
//!   in the spec), `setid`, `landlock`, `apparmor`.
//! - Helpers PID 1 forks: `relay` (egress), `connector` (`connect()`: the box serves, the
//!   caller's end is `connector::Line`), and `pty` (the box's terminal; the caller receives the
//!   master).

pub mod apparmor;
pub mod connector;
pub mod init;
pub mod landlock;
pub mod mountpoint;
pub mod mounts;
pub(in crate::engine) mod nest;
mod pid1_signals;
pub mod pty;
pub mod relay;
pub mod rootfs;
pub mod seccomp;
pub mod setid;
