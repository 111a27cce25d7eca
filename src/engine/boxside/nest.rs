//! PID 1's nested user namespace, which locks the box's mount tree for a workload that keeps
//! CAP_SYS_ADMIN (`init::setup` calls it after `mounts::build`).

use crate::engine::boxside::mounts;
use crate::engine::shared::spec::BoxSpec;
use crate::engine::shared::sys::{self, Forked};
use nix::sys::wait::waitpid;
use nix::unistd::Pid;

/// Locks the mount tree just built, for a workload that keeps CAP_SYS_ADMIN: PID 1 moves into a
/// nested user namespace with a copy of the mount namespace, and mounts copied into a namespace
/// owned by a less privileged user namespace are locked by the kernel (a read-only mount can't be
/// remounted writable, a mount can't be taken off what it covers), even for a workload that keeps
/// CAP_SYS_ADMIN through `capDrop`. Without this, such a workload could remount the image (idmapped
/// to the host owner's ids) writable, or `.deps` under `depsReadonly`. The UTS, IPC and network
/// namespaces are made here too, owned by the namespace the workload's capabilities count in.
///
/// Only a process in the parent namespace may map the nested one, so a helper forked before the
/// unshare writes PID 1's maps: the box's ids, each to itself.
pub(super) fn nest(spec: &BoxSpec) -> Result<(), mounts::SetupError> {
    use nix::sched::CloneFlags;
    use std::io::{Read, Write};
    let err = |what: &str, e: &dyn std::fmt::Display| mounts::SetupError(format!("{what}: {e}"));
    let (mut ours, mut theirs) = std::os::unix::net::UnixStream::pair()
        .map_err(|e| err("socketpair for the nested maps", &e))?;
    let helper = match sys::clone_fork(0).map_err(|e| err("fork the map writer", &e))? {
        Forked::Child => {
            drop(ours);
            let mut go = [0u8; 1];
            let ok = theirs.read_exact(&mut go).is_ok() && write_identity_maps().is_ok();
            let _ = theirs.write_all(if ok { b"m" } else { b"x" });
            sys::exit_now(i32::from(!ok))
        }
        Forked::Parent(pid) => pid,
    };
    drop(theirs);
    let mut flags = CloneFlags::CLONE_NEWUSER
        | CloneFlags::CLONE_NEWNS
        | CloneFlags::CLONE_NEWUTS
        | CloneFlags::CLONE_NEWIPC;
    if !spec.host_network {
        flags |= CloneFlags::CLONE_NEWNET;
    }
    // Changing user namespace makes PID 1 non-dumpable, which would give its /proc files to an
    // owner the helper can't reach; dumpable for the moment the maps are written (no code of
    // the box runs yet), non-dumpable again right after (`setup`).
    let unshared = nix::sched::unshare(flags).and_then(|()| nix::sys::prctl::set_dumpable(true));
    // The helper goes either way: told to write, or hung up on.
    let mut reply = [0u8; 1];
    let answered = match unshared {
        Ok(()) => ours
            .write_all(b"n")
            .and_then(|_| ours.read_exact(&mut reply)),
        Err(_) => Ok(()),
    };
    drop(ours);
    let _ = waitpid(Pid::from_raw(helper), None);
    unshared.map_err(|e| err("nest the box's namespaces", &e))?;
    answered.map_err(|e| err("wait for the nested maps", &e))?;
    if reply[0] != b'm' {
        return Err(mounts::SetupError(
            "could not write the maps of the box's nested user namespace".into(),
        ));
    }
    Ok(())
}

/// In the helper (still in the box's user namespace): PID 1's nested namespace gets every id of
/// the box's, mapped to itself, and the box's setgroups policy.
fn write_identity_maps() -> std::io::Result<()> {
    let identity = |file: &str| -> std::io::Result<String> {
        let own = std::fs::read_to_string(format!("/proc/self/{file}"))?;
        Ok(own
            .lines()
            .filter_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() == 3).then(|| format!("{} {} {}\n", f[0], f[0], f[2]))
            })
            .collect())
    };
    let uid_map = identity("uid_map")?;
    let gid_map = identity("gid_map")?;
    std::fs::write("/proc/1/uid_map", uid_map)?;
    if std::fs::read_to_string("/proc/self/setgroups")?.trim() == "deny" {
        std::fs::write("/proc/1/setgroups", "deny")?;
    }
    std::fs::write("/proc/1/gid_map", gid_map)
}
