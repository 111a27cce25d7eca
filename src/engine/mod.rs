//! The box: spec, namespaces, mounts, cgroups, init and faults. Knows nothing of napi.
//!
//! Split by the process that runs the code, so the folder says where a thing happens:
//! - `addon`: the caller's process (the Node addon, or `kern`'s CLI front): it only spawns the
//!   `kern` binary with a spec and reads what comes back (`launch`).
//! - `monitor`: `kern`'s outer process, the parent side of the clone, on the host. It prepares
//!   the cgroup and the sources, clones the box, enforces the deadline and tells how the box
//!   ended; it also keeps resident boxes and runs the calls into them and into a zygote's forks.
//! - `boxside`: inside the box: the clone child that becomes PID 1 (`init`), the mount tree it
//!   builds, the workload's posture before exec, and the helpers PID 1 forks (`relay`,
//!   `connector`).
//! - `shared`: leaves more than one of those processes read: the spec, the report, what crosses
//!   between them (`handoff`), the syscall edge (`sys`).
//! - `plan`: the box's posture, written once, as data: built from the spec (or a zygote's
//!   inputs), carried out by `plan::run` in a fresh box and by the zygote's python in a fork.
//!
//! The egress proxy, which runs in the addon beside `launch`, is its own room (`crate::proxy`).

pub mod addon;
pub mod boxside;
pub mod monitor;
pub mod plan;
pub mod shared;
