//! The set-id sweep after every box: no regular file under a tree a box could write keeps a
//! setuid or setgid bit. Walks with [`crate::fsx::walk`], so no symlink a box planted is followed.

use std::ffi::OsStr;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag};
use nix::sys::stat::{fstatat, Mode};

use crate::fsx::walk::{walk_below, Closed, Seen, Visit};

/// Clears the setuid/setgid bits of every regular file under `root`. The box's seccomp filter
/// refuses set-id modes at the source (`engine::boxside::setid`); this sweep after every box is
/// the second wall, for a kernel path the filter does not know. kern runs it before it reports,
/// so it covers the CLI and a caller that died mid-call too. It is complete or it fails: the
/// caller turns an error into a fault.
pub fn strip_setid(root: &Path) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt;
    // A single file (a writable file mount) is its own root.
    if let Ok(m) = std::fs::symlink_metadata(root) {
        if m.is_file() {
            let mode = m.permissions().mode();
            if mode & 0o6000 != 0 {
                std::fs::set_permissions(root, std::fs::Permissions::from_mode(mode & 0o1777))
                    .map_err(|e| format!("{}: {e}", root.display()))?;
            }
            return Ok(());
        }
    }
    match open_dir(root).map_err(|errno| format!("{}: {errno}", root.display()))? {
        Some(top) => strip_below(top, PathBuf::new()),
        None => Ok(()),
    }
}

/// The directory `root`, opened to walk; None when it is missing (nothing to sweep).
fn open_dir(root: &Path) -> nix::Result<Option<OwnedFd>> {
    match nix::fcntl::open(
        root,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => Ok(Some(fd)),
        Err(Errno::ENOENT) => Ok(None),
        Err(errno) => Err(errno),
    }
}

/// Clears one entry's setuid/setgid bits if it is a regular file with any, through the very
/// inode seen (`Seen::chmod`): the rule every sweep and the workspace's watch apply.
pub fn clear_setid(e: &Seen<'_>) -> nix::Result<()> {
    if !e.is_file() || e.stat.st_mode & 0o6000 == 0 {
        return Ok(());
    }
    e.chmod(e.stat.st_mode & 0o1777)
}

/// As `strip_setid`, for only the directory `name` in `root`, never through a symlink: the part
/// of a watched workspace its watch leaves out (`track::EXCLUDED`, which `watch::Tracker`
/// neither watches nor reports), when the caller clears the rest (`BoxSpec::setid_watched`).
pub fn strip_setid_in(root: &Path, name: &str) -> Result<(), String> {
    let at = |e: Errno| format!("{}/{name}: {e}", root.display());
    let Some(parent) = open_dir(root).map_err(at)? else {
        return Ok(());
    };
    // A symlink (or a file) there is not a directory to enter: a file is still checked.
    match nix::fcntl::openat(
        &parent,
        name,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => strip_below(fd, PathBuf::from(name)),
        Err(Errno::ENOENT) => Ok(()),
        Err(Errno::ENOTDIR | Errno::ELOOP) => {
            let st = fstatat(&parent, name, AtFlags::AT_SYMLINK_NOFOLLOW).map_err(at)?;
            let rel = Path::new(name);
            clear_setid(&Seen::at(&parent, OsStr::new(name), rel, &st)).map_err(at)
        }
        Err(errno) => Err(at(errno)),
    }
}

fn strip_below(top: OwnedFd, rel: PathBuf) -> Result<(), String> {
    let mut failed: Option<String> = None;
    let walked = walk_below(top, rel, Closed::PassOver, |e| {
        if let Err(errno) = clear_setid(e) {
            failed = Some(format!("{}: {errno}", e.rel.display()));
            return Visit::Stop;
        }
        Visit::Enter
    });
    match (walked, failed) {
        (_, Some(why)) => Err(format!("cannot clear the set-id bits of {why}")),
        (Err(e), None) => Err(e.to_string()),
        (Ok(_), None) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn setid_bits_are_stripped_inside_and_symlinks_never_followed() {
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let victim = outside.path().join("victim");
        std::fs::write(&victim, "x").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o4755)).unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join("dirlink")).unwrap();
        std::os::unix::fs::symlink(&victim, ws.path().join("filelink")).unwrap();
        let planted = ws.path().join("suid");
        std::fs::write(&planted, "x").unwrap();
        std::fs::set_permissions(&planted, std::fs::Permissions::from_mode(0o6755)).unwrap();

        let deps = ws.path().join(".deps");
        std::fs::create_dir(&deps).unwrap();
        let weird = ws.path().join(std::ffi::OsStr::from_bytes(b"bad\xffname"));
        std::fs::create_dir(&weird).unwrap();
        for p in [deps.join("hid"), weird.join("hid")] {
            std::fs::write(&p, "x").unwrap();
            std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o6755)).unwrap();
        }
        strip_setid(ws.path()).unwrap();
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        assert_eq!(mode(&planted), 0o755);
        assert_eq!(mode(&victim), 0o4755, "a file behind a symlink was changed");
        assert_eq!(mode(&deps.join("hid")), 0o755);
        assert_eq!(mode(&weird.join("hid")), 0o755);
    }

    #[test]
    fn only_the_named_directory_is_swept_and_never_through_a_symlink() {
        let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
        let setid = |p: &Path| {
            std::fs::write(p, "x").unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(0o4755)).unwrap();
        };
        let ws = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(ws.path().join(".deps/lib")).unwrap();
        setid(&ws.path().join(".deps/lib/x"));
        setid(&ws.path().join("elsewhere"));
        strip_setid_in(ws.path(), ".deps").unwrap();
        assert_eq!(mode(&ws.path().join(".deps/lib/x")), 0o755);
        assert_eq!(
            mode(&ws.path().join("elsewhere")),
            0o4755,
            "only .deps is this sweep's"
        );
        // `.deps` a symlink to a host directory: not entered; `.deps` a file: checked.
        setid(&outside.path().join("victim"));
        std::fs::remove_dir_all(ws.path().join(".deps")).unwrap();
        std::os::unix::fs::symlink(outside.path(), ws.path().join(".deps")).unwrap();
        strip_setid_in(ws.path(), ".deps").unwrap();
        assert_eq!(mode(&outside.path().join("victim")), 0o4755);
        std::fs::remove_file(ws.path().join(".deps")).unwrap();
        setid(&ws.path().join(".deps"));
        strip_setid_in(ws.path(), ".deps").unwrap();
        assert_eq!(mode(&ws.path().join(".deps")), 0o755);
        // None there: nothing to do.
        std::fs::remove_file(ws.path().join(".deps")).unwrap();
        strip_setid_in(ws.path(), ".deps").unwrap();
    }
}
