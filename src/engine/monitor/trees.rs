//! The box's sources as detached, idmapped mount trees, made by the monitor before "go" when
//! kern runs as root (`idmap::Mapping::Range`): the workspace, the image directory and each
//! extra mount, handed to the box's init with the "go" message (`handoff::send_go`).

use super::idmap;
use crate::engine::boxside::mounts::Trees;
use crate::engine::shared::spec::{BindSpec, BoxSpec, RootSpec};
use crate::engine::shared::sys;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// Detached, idmapped copies of the workspace and the image directory, made here because only
/// the host's root may idmap them, and because box root (an unprivileged host id) may not even
/// be able to traverse their paths.
pub(in crate::engine) fn idmapped_trees(
    spec: &BoxSpec,
    pid: libc::pid_t,
    uid_base: u32,
    gid_base: u32,
) -> Result<Trees, String> {
    let ws = spec.workspace.to_string_lossy();
    let box_ns = idmap::userns_of(pid).map_err(|e| format!("the box's user namespace: {e}"))?;
    let account = spec.user.as_ref().map_or((0, 0), |u| (u.uid, u.gid));
    let host_account = (uid_base + account.0, gid_base + account.1);
    // The directory's owner on disk appears as the box's account. For a root-owned directory
    // and box root, the box's own namespace does it and keeps every other owner in the tree
    // as the same id in the box; otherwise a namespace made for this owner and account.
    let owned_ns = |path: &std::path::Path| -> Result<OwnedFd, String> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(path).map_err(|e| format!("stat {}: {e}", path.display()))?;
        if (m.uid(), m.gid()) == (0, 0) && account == (0, 0) {
            return box_ns.try_clone().map_err(|e| e.to_string());
        }
        idmap::userns_owning_as((m.uid(), m.gid()), host_account).map_err(|e| {
            format!(
                "a user namespace showing {} (owned by {}:{}) as the box's account: {e}",
                path.display(),
                m.uid(),
                m.gid()
            )
        })
    };
    let ws_ns = owned_ns(&spec.workspace)?;
    // Never a fallback to mapping host root: without an idmapped workspace the box can't run.
    let workspace = idmap::idmapped_tree(&ws, ws_ns.as_fd(), sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV).map_err(|e| {
        format!(
            "running as root, kern maps the box to an unprivileged id range and attaches the workspace \
             {ws} as an idmapped mount, which failed ({e}); use a workspace on a filesystem that \
             supports idmapped mounts (ext4, xfs, btrfs; tmpfs from Linux 6.3), or run unprivileged"
        )
    })?;
    let image = match &spec.root {
        RootSpec::Dir { path } => {
            let p = path.to_string_lossy();
            let ro = sys::MOUNT_ATTR_RDONLY | sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;
            // An image on a filesystem that can't idmap is still usable read-only: its files
            // then show as owned by nobody inside the box.
            let tree = idmap::idmapped_tree(&p, box_ns.as_fd(), ro).or_else(|_| {
                let t = sys::open_tree_clone(&p, true)?;
                sys::mount_setattr_fd(t.as_fd(), ro, None)?;
                Ok::<_, std::io::Error>(t)
            });
            Some(tree.map_err(|e| format!("cannot attach the image {p}: {e}"))?)
        }
        RootSpec::Host => None,
    };
    let binds = spec
        .binds
        .iter()
        .map(|b| bind_tree(b, owned_ns(&b.source)?.as_fd()))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Trees {
        workspace: Some(workspace),
        image,
        binds,
    })
}

/// An extra mount as a detached tree, idmapped like the workspace (its owner appears as the
/// box's account), checked to be the very inode the caller checked.
fn bind_tree(b: &BindSpec, userns: BorrowedFd<'_>) -> Result<OwnedFd, String> {
    let src = b.source.to_string_lossy();
    let base = sys::MOUNT_ATTR_NOSUID | sys::MOUNT_ATTR_NODEV;
    let attrs = if b.writable {
        base
    } else {
        base | sys::MOUNT_ATTR_RDONLY
    };
    let tree = match idmap::idmapped_tree(&src, userns, attrs) {
        Ok(t) => t,
        // Read-only, an unmapped tree still works: its files show as owned by nobody.
        Err(_) if !b.writable => sys::open_tree_clone(&src, true)
            .and_then(|t| sys::mount_setattr_fd(t.as_fd(), attrs, None).map(|_| t))
            .map_err(|e| format!("cannot attach the mount {src}: {e}"))?,
        Err(e) => {
            return Err(format!(
                "running as root, kern attaches a writable mount as an idmapped mount, and {src} \
                 can't be idmapped ({e}); mount it read-only, or use a directory on ext4, xfs or \
                 btrfs"
            ))
        }
    };
    let st = nix::sys::stat::fstat(&tree).map_err(|e| format!("stat the mount {src}: {e}"))?;
    if st.st_dev != b.dev || st.st_ino != b.ino {
        return Err(format!(
            "the mount source {src} changed after it was checked; refusing to mount it"
        ));
    }
    Ok(tree)
}
