//! Who the box's root is on the host.
//!
//! Unprivileged, the box's uid 0 is the caller (one mapped id: all the kernel allows without
//! setuid helpers). As root, the box gets an unprivileged range of host ids instead, so its
//! root is never host root; the workspace (and the image directory) are then attached as
//! idmapped mounts through the box's user namespace, so what box root writes still lands owned
//! by the workspace's owner. Where the workspace can't be idmapped the box is refused: there is
//! no fallback to host root.
//!
//! Root in a user namespace of its own (a container started with `--userns=auto`/`--uidmap`,
//! a Kubernetes pod with `hostUsers: false`) is not host root, and the host ids of a range are
//! not mapped there (writing such a map fails with EPERM, measured under Podman): it maps
//! itself alone, as an unprivileged caller does.

use crate::engine::shared::spec::BoxUser;
use crate::engine::shared::sys;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// The host range for boxes started by root, when /etc/subuid has no entry for root: the top
/// 64 Ki ids below 2^31, outside the ranges distributions hand out (useradd's SUB_UID_MAX is
/// 600,100,000; systemd's container ranges end at 1,879,048,191).
pub const DEFAULT_ROOT_BASE: u32 = 0x7fff_0000;
pub const RANGE: u32 = 65_536;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapping {
    /// The caller's uid/gid is the box's `box_uid`/`box_gid` (0, or the image's USER); nothing
    /// else is mapped.
    Caller {
        uid: u32,
        gid: u32,
        box_uid: u32,
        box_gid: u32,
    },
    /// Box ids 0..RANGE are host ids `base..base+RANGE`.
    Range { uid_base: u32, gid_base: u32 },
}

impl Mapping {
    /// The mapping for this process: a range as root, the caller otherwise, who is then the
    /// box's one account: root, or the image's USER (`user`).
    pub fn for_this_process(user: Option<&BoxUser>) -> Mapping {
        let uid = nix::unistd::getuid().as_raw();
        let gid = nix::unistd::getgid().as_raw();
        if uid != 0 || !in_initial_userns() {
            return Mapping::Caller {
                uid,
                gid,
                box_uid: user.map_or(0, |u| u.uid),
                box_gid: user.map_or(0, |u| u.gid),
            };
        }
        Mapping::Range {
            uid_base: sub_range("/etc/subuid").unwrap_or(DEFAULT_ROOT_BASE),
            gid_base: sub_range("/etc/subgid").unwrap_or(DEFAULT_ROOT_BASE),
        }
    }

    /// The ids the box's setup runs as: box root, or with a single mapped id, that id.
    pub fn setup_ids(self) -> (u32, u32) {
        match self {
            Mapping::Caller {
                box_uid, box_gid, ..
            } => (box_uid, box_gid),
            Mapping::Range { .. } => (0, 0),
        }
    }

    /// Writes the maps of the box's user namespace.
    pub fn write(self, pid: libc::pid_t) -> io::Result<()> {
        let base = format!("/proc/{pid}");
        match self {
            Mapping::Caller {
                uid,
                gid,
                box_uid,
                box_gid,
            } => {
                std::fs::write(format!("{base}/uid_map"), format!("{box_uid} {uid} 1"))?;
                // Unprivileged, setgroups must be denied before a gid map may be written
                // (CVE-2014-8989).
                std::fs::write(format!("{base}/setgroups"), "deny")?;
                std::fs::write(format!("{base}/gid_map"), format!("{box_gid} {gid} 1"))
            }
            Mapping::Range { uid_base, gid_base } => {
                std::fs::write(format!("{base}/uid_map"), format!("0 {uid_base} {RANGE}"))?;
                std::fs::write(format!("{base}/gid_map"), format!("0 {gid_base} {RANGE}"))
            }
        }
    }
}

/// Whether this process's user namespace is the host's: its uid map is the identity over every
/// id. Unreadable, it is taken to be the host's (the range, and its refusals, apply).
pub fn in_initial_userns() -> bool {
    std::fs::read_to_string("/proc/self/uid_map").map_or(true, |m| {
        m.split_whitespace().collect::<Vec<_>>() == ["0", "0", "4294967295"]
    })
}

/// The first range of at least `RANGE` ids that /etc/sub[ug]id gives root.
fn sub_range(file: &str) -> Option<u32> {
    std::fs::read_to_string(file).ok()?.lines().find_map(|l| {
        let mut f = l.split(':');
        let (who, start, count) = (f.next()?, f.next()?, f.next()?);
        let (start, count): (u32, u32) = (start.trim().parse().ok()?, count.trim().parse().ok()?);
        (matches!(who, "root" | "0") && count >= RANGE).then_some(start)
    })
}

/// A detached copy of `path`, idmapped through the user namespace `userns`, read-only or not.
pub fn idmapped_tree(path: &str, userns: BorrowedFd<'_>, attrs: u64) -> io::Result<OwnedFd> {
    let tree = sys::open_tree_clone(path, true)?;
    sys::mount_setattr_fd(tree.as_fd(), attrs, Some(userns))?;
    Ok(tree)
}

/// The user namespace of process `pid`.
pub fn userns_of(pid: libc::pid_t) -> io::Result<OwnedFd> {
    Ok(std::fs::File::open(format!("/proc/{pid}/ns/user"))?.into())
}

/// A user namespace whose only mapping is `owner` (the ids a directory has on disk) to host
/// `host` (the ids of a box account): idmapping a directory through it makes its owner appear
/// as that account, with nothing on disk changed. Other owners in it appear unmapped (nobody).
/// Root only (writing another process's maps); kern is single-threaded when it calls this.
pub fn userns_owning_as(owner: (u32, u32), host: (u32, u32)) -> io::Result<OwnedFd> {
    let ((uid, gid), (owner_uid, owner_gid)) = (host, owner);
    let (hold_r, hold_w) = nix::unistd::pipe()?;
    match sys::clone_fork(libc::CLONE_NEWUSER)? {
        sys::Forked::Child => {
            // Wait for the parent to take our namespace, then go.
            drop(hold_w);
            let mut b = [0u8; 1];
            let _ = nix::unistd::read(&hold_r, &mut b);
            sys::exit_now(0)
        }
        sys::Forked::Parent(pid) => {
            drop(hold_r);
            let made = (|| {
                std::fs::write(
                    format!("/proc/{pid}/uid_map"),
                    format!("{owner_uid} {uid} 1"),
                )?;
                std::fs::write(
                    format!("/proc/{pid}/gid_map"),
                    format!("{owner_gid} {gid} 1"),
                )?;
                userns_of(pid)
            })();
            drop(hold_w);
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
            made
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn root_range_comes_from_subuid_when_present() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("subuid");
        std::fs::write(&f, "alice:100000:65536\nroot:200000:65536\n").unwrap();
        assert_eq!(sub_range(f.to_str().unwrap()), Some(200_000));
        std::fs::write(&f, "alice:100000:65536\nroot:200000:100\n").unwrap();
        assert_eq!(sub_range(f.to_str().unwrap()), None);
    }
}
