//! Who the box's root is on the host.
//!
//! Unprivileged, the box's uid 0 is the caller (one mapped id: all the kernel allows without
//! setuid helpers). As root, the box gets an unprivileged range of host ids instead, so its
//! root is never host root; the workspace (and the image directory) are then attached as
//! idmapped mounts through the box's user namespace, so what box root writes still lands owned
//! by the workspace's owner. Where the workspace can't be idmapped the box is refused: there is
//! no fallback to host root.

use super::sys;
use std::io;
use std::os::fd::{AsFd, OwnedFd};

/// The host range for boxes started by root, when /etc/subuid has no entry for root: the top
/// 64 Ki ids below 2^31, outside the ranges distributions hand out (useradd's SUB_UID_MAX is
/// 600,100,000; systemd's container ranges end at 1,879,048,191).
pub const DEFAULT_ROOT_BASE: u32 = 0x7fff_0000;
pub const RANGE: u32 = 65_536;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mapping {
    /// Box uid/gid 0 is the caller's uid/gid; nothing else is mapped.
    Caller { uid: u32, gid: u32 },
    /// Box ids 0..RANGE are host ids `base..base+RANGE`.
    Range { uid_base: u32, gid_base: u32 },
}

impl Mapping {
    /// The mapping for this process: a range as root, the caller otherwise.
    pub fn for_this_process() -> Mapping {
        let uid = nix::unistd::getuid().as_raw();
        let gid = nix::unistd::getgid().as_raw();
        if uid != 0 {
            return Mapping::Caller { uid, gid };
        }
        Mapping::Range {
            uid_base: sub_range("/etc/subuid").unwrap_or(DEFAULT_ROOT_BASE),
            gid_base: sub_range("/etc/subgid").unwrap_or(DEFAULT_ROOT_BASE),
        }
    }

    /// Writes the maps of the box's user namespace.
    pub fn write(self, pid: libc::pid_t) -> io::Result<()> {
        let base = format!("/proc/{pid}");
        match self {
            Mapping::Caller { uid, gid } => {
                std::fs::write(format!("{base}/uid_map"), format!("0 {uid} 1"))?;
                // Unprivileged, setgroups must be denied before a gid map may be written
                // (CVE-2014-8989).
                std::fs::write(format!("{base}/setgroups"), "deny")?;
                std::fs::write(format!("{base}/gid_map"), format!("0 {gid} 1"))
            }
            Mapping::Range { uid_base, gid_base } => {
                std::fs::write(format!("{base}/uid_map"), format!("0 {uid_base} {RANGE}"))?;
                std::fs::write(format!("{base}/gid_map"), format!("0 {gid_base} {RANGE}"))
            }
        }
    }
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

/// A detached copy of `path`, idmapped through the user namespace of `pid`, read-only or not.
pub fn idmapped_tree(path: &str, pid: libc::pid_t, attrs: u64) -> io::Result<OwnedFd> {
    let userns = std::fs::File::open(format!("/proc/{pid}/ns/user"))?;
    let tree = sys::open_tree_clone(path, true)?;
    sys::mount_setattr_fd(tree.as_fd(), attrs, Some(userns.as_fd()))?;
    Ok(tree)
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
