//! POSIX message queues' budget (`RLIMIT_MSGQUEUE`). The kernel charges a queue's bytes to its
//! creator's uid in every user namespace up to the host's, each level checked against the limit
//! of whoever made the namespace below it. Left alone, every box of one host user (rootless:
//! the caller; as root: root) draws on that user's single 800 KiB host budget, and about nine
//! queues in one box leave none for any other box.
//!
//! So kern lifts its own limit before it makes a box's namespaces, where it may (as root: the
//! host level then never refuses, and a queue's bytes are charged to the box's memory cgroup),
//! and each workload gets a budget of its own: the Linux default where the host level is lifted,
//! a quarter of the user's budget where it can't be (rootless, or root without
//! CAP_SYS_RESOURCE, as in many containers), so one box leaves the rest for the others.

use nix::sys::resource::{getrlimit, setrlimit, Resource, RLIM_INFINITY};

/// A box's budget where the host's is lifted: the kernel's default for one user.
pub const BOX_MQ_BYTES: u64 = 819_200;

/// Raises this process's `RLIMIT_MSGQUEUE` to unlimited if it may (CAP_SYS_RESOURCE): the user
/// namespaces it makes then put no ceiling on the host's count. Without the capability, the
/// limit stays and `box_budget` shares it.
pub fn lift_host_budget() {
    let _ = setrlimit(Resource::RLIMIT_MSGQUEUE, RLIM_INFINITY, RLIM_INFINITY);
}

/// The `RLIMIT_MSGQUEUE` a box's workload gets (soft and hard: box root can't raise a hard
/// limit), from the hard limit this process has (kern's, inherited).
pub fn box_budget() -> u64 {
    let hard = getrlimit(Resource::RLIMIT_MSGQUEUE).map_or(BOX_MQ_BYTES, |(_, hard)| hard);
    share_of(hard)
}

fn share_of(hard: u64) -> u64 {
    if hard == RLIM_INFINITY {
        BOX_MQ_BYTES
    } else {
        (hard / 4).min(BOX_MQ_BYTES)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_box_takes_a_quarter_of_a_budget_it_shares_and_the_default_of_a_lifted_one() {
        assert_eq!(share_of(RLIM_INFINITY), BOX_MQ_BYTES);
        assert_eq!(share_of(819_200), 204_800);
        assert_eq!(share_of(64 << 20), BOX_MQ_BYTES);
        assert_eq!(share_of(0), 0);
    }
}
