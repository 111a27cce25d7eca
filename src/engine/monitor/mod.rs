//! Runs in `kern`'s outer process, the monitor: the parent side of the clone, which stays in the
//! host's namespaces and is single-threaded where it clones.
//!
//! - `prepare`: a box's caps before its spec is known (the cgroup, the rlimit fallbacks, how each
//!   cap is in force); `parent`: the sources, clone its PID 1, write its id maps, enforce the
//!   deadline and report; also the calls forked by a zygote.
//! - `idmap`: who the box's root is on the host; `trees`: the idmapped source trees made before
//!   "go"; `cgroup`: the box's resource caps; `freezer`: pausing a live box; `faults`: how a
//!   box (or a call) ended.
//! - `resident`: boxes that outlive their call: state files (read by the addon too), the
//!   monitor's keep-alive and the calls into a live box.
//! - `zygote`: kern's side of a call forked by a zygote (the plans its fork carries out are
//!   `engine::plan`'s).

pub mod cgroup;
pub mod faults;
pub mod freezer;
pub mod idmap;
pub mod parent;
pub mod prepare;
pub mod resident;
pub mod trees;
pub mod zygote;
