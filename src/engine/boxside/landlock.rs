//! Every workload enters a Landlock domain of its own just before its exec (`plan::workload`).
//!
//! The domain restricts nothing a box can do (it handles only the creation of block devices,
//! which a box can't do anyway, and moving files between directories, which it grants beneath
//! `/`: a domain that did not would refuse every such rename with EXDEV); it exists for the kernel's rule that a process in a Landlock
//! domain may trace, or read through `/proc/<pid>/{mem,environ,fd}`, only processes in the same
//! domain or one nested in it. In a resident box (`persist`) every call shares one PID
//! namespace and one account, so without this a process left running by one call could read a
//! later call's memory and environment, or write into its output. With it, sibling calls are
//! strangers to each other, and the box's `/proc` (mounted `hidepid=invisible` for resident
//! boxes) doesn't even list them. kern's own processes, outside every domain, keep their reach.

use landlock::{AccessFs, CompatLevel, Compatible, Ruleset, RulesetAttr};

/// Whether this kernel can make the workloads' domain: Landlock built in and enabled, with
/// the Refer right (ABI 2, Linux 5.19), without which a domain would break renames.
pub fn available() -> bool {
    Ruleset::default()
        .set_compatibility(CompatLevel::HardRequirement)
        .handle_access(AccessFs::MakeBlock | AccessFs::Refer)
        .and_then(|r| r.create())
        .is_ok()
}
