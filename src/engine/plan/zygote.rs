//! A zygote's fork's own steps, before the workload's posture (`workload`): the three plans of
//! one call, for its three processes (see `zygote`): `call` (the zygote's fork: a user
//! namespace of its own, then the rest), `pid1` (PID 1 of the new PID namespace: a fresh
//! `/proc`, masked, fresh scratch mounts, hostname, loopback: `pid1`'s steps, as a fresh box's
//! PID 1 runs them) and `workload`
//! (the process that runs the cell: the same plan a fresh box's workload runs, `workload`).
//! kern builds them from the Sandbox's settings; the zygote's python runs them in order with
//! `ctypes` and stops at the first that fails.

use super::{int, pid1, sys, write, Arg, Op};
use crate::engine::shared::handoff::Fallback;
use serde::Serialize;

/// What the plans are made from: the Sandbox's settings every call of it shares, known when
/// kern starts, before the call (`launch::Kern::spawn_zygote`).
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Inputs {
    pub tmpfs: Vec<crate::engine::shared::spec::TmpfsSpec>,
    pub hostname: String,
}

/// The three plans of one call.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Plans {
    pub call: Vec<Op>,
    pub pid1: Vec<Op>,
    pub workload: Vec<Op>,
    /// The scratch tmpfs targets: P reports how full each was when the workload ended, as a
    /// fresh box's PID 1 does (`Pid1Msg::Exited`, in this order), so an OOM can name the one that held the bytes.
    pub tmpfs: Vec<String>,
}

/// The plans for `spec`'s call, with the caps kern could not put in a cgroup as rlimits
/// (`fallback`, as a fresh box's). `proc_kind`: whether a `/proc` name is a directory
/// (`Some(true)`), something else, or absent on this kernel (the box's `/proc` is this kernel's).
pub fn plans(
    spec: &Inputs,
    fallback: &Fallback,
    proc_kind: impl Fn(&str) -> Option<bool>,
) -> Plans {
    Plans {
        call: call_plan(),
        pid1: pid1_plan(spec, proc_kind),
        workload: super::Workload::of(&super::Posture::of_call(fallback)).into_ops(),
        tmpfs: spec.tmpfs.iter().map(|t| t.target.clone()).collect(),
    }
}

/// The zygote's fork, already in the call's cgroup: a user namespace of its own (one id, its
/// own: a fork of the zygote may map no more without help), then every other namespace in it.
fn call_plan() -> Vec<Op> {
    let rest = libc::CLONE_NEWNS
        | libc::CLONE_NEWPID
        | libc::CLONE_NEWNET
        | libc::CLONE_NEWIPC
        | libc::CLONE_NEWUTS
        | libc::CLONE_NEWCGROUP;
    vec![
        sys(
            "a user namespace for the call",
            libc::SYS_unshare,
            vec![int(libc::CLONE_NEWUSER)],
        ),
        write("deny setgroups", "/proc/self/setgroups", "deny"),
        write("map the call's uid", "/proc/self/uid_map", "0 0 1\n"),
        write("map the call's gid", "/proc/self/gid_map", "0 0 1\n"),
        sys(
            "the call's mount, PID, network, IPC, UTS and cgroup namespaces",
            libc::SYS_unshare,
            vec![int(rest)],
        ),
    ]
}

fn pid1_plan(spec: &Inputs, proc_kind: impl Fn(&str) -> Option<bool>) -> Vec<Op> {
    let mut p = vec![pid1::mount(
        "make every mount private".into(),
        Arg::Null,
        "/",
        Arg::Null,
        libc::MS_REC | libc::MS_PRIVATE,
        Arg::Null,
    )];
    p.push(pid1::proc("/proc", false));
    // No nested user namespace from the call (as a fresh box's PID 1); before /proc/sys turns
    // read-only.
    p.push(pid1::nested_userns_limit(0));
    p.extend(pid1::proc_masks("/proc", "/dev/null", proc_kind));
    // Every scratch mount fresh: a copied tmpfs would be the zygote's, shared by every call.
    for t in &spec.tmpfs {
        p.push(pid1::scratch(&t.target, t.size_bytes));
    }
    p.push(pid1::shm("/dev/shm"));
    p.push(pid1::devpts("/dev/pts"));
    p.push(pid1::hostname(&spec.hostname));
    p.extend(pid1::loopback());
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> Inputs {
        Inputs {
            tmpfs: vec![crate::engine::shared::spec::TmpfsSpec {
                target: "/tmp".into(),
                size_bytes: 64 << 20,
            }],
            hostname: "sandbox".into(),
        }
    }

    #[test]
    fn plans_are_plain_json_and_end_in_the_filter() {
        let p = plans(&spec(), &Fallback::default(), |n| {
            super::super::pid1::proc_kind_at("/proc", n)
        });
        let json = serde_json::to_string(&p).expect("json");
        if let Ok(out) = std::env::var("KERN_ZYGOTE_PLAN_OUT") {
            std::fs::write(out, &json).expect("write");
        }
        assert!(matches!(p.workload.last(), Some(Op::Sys { nr, .. }) if *nr == libc::SYS_seccomp));
        assert!(json.contains("\"fprog\""));
    }
}
