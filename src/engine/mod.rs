//! The box: spec, namespaces, mounts, cgroups, init and faults. Knows nothing of napi.
//!
//! `launch` runs in the caller's process (the Node addon) and only spawns the `kern` binary;
//! everything else runs inside `kern`, which is single-threaded where it clones. By side of the
//! clone: `monitor` is the parent (with `trees` and `faults`), `init` the child, and `handoff`
//! what crosses between them (and from the caller to kern). `resident` holds the boxes that
//! outlive their call: their state files, their monitor's keep-alive and the calls into them.

pub mod apparmor;
pub mod caps;
pub mod cgroup;
pub mod connector;
pub mod container;
pub mod faults;
pub mod handoff;
pub mod idmap;
pub mod init;
pub mod landlock;
pub mod launch;
pub mod monitor;
pub mod mounts;
pub mod mq;
mod nest;
mod pid1_signals;
pub mod plan;
pub mod proxy;
pub mod pty;
pub mod relay;
pub mod resident;
pub mod rootfs;
pub mod seccomp;
pub mod setid;
pub mod spec;
pub mod status;
pub mod sys;
pub mod trees;
pub mod zygote;
