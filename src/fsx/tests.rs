//! Unit tests of the resolver: every mode through `openat2` and, for the no-follow modes,
//! through the component walk, against planted symlinks, `..` and a mount point.

use std::ffi::OsStr;
use std::os::fd::AsFd;
use std::os::unix::fs::symlink;
use std::path::Path;

use nix::errno::Errno;
use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;

use super::*;

fn dir_fd(p: &Path) -> std::os::fd::OwnedFd {
    open(
        p,
        OFlag::O_PATH | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .unwrap()
}

/// root/{sub/f, in -> sub, out -> ../outside, abs -> /sub/f, f}, and outside/secret.
fn tree() -> tempfile::TempDir {
    let base = tempfile::tempdir().unwrap();
    let root = base.path().join("root");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    std::fs::write(root.join("sub/f"), b"inside").unwrap();
    std::fs::write(root.join("f"), b"top").unwrap();
    std::fs::create_dir(base.path().join("outside")).unwrap();
    std::fs::write(base.path().join("outside/secret"), b"secret").unwrap();
    symlink("sub", root.join("in")).unwrap();
    symlink("../outside", root.join("out")).unwrap();
    symlink("/sub/f", root.join("abs")).unwrap();
    base
}

fn errno(r: Result<std::os::fd::OwnedFd, OpenError>) -> Errno {
    r.expect_err("must be refused").errno()
}

#[test]
fn no_follow_modes_agree_through_the_kernel_and_the_walk() {
    let base = tree();
    let root = dir_fd(&base.path().join("root"));
    let rd = OFlag::O_RDONLY;
    for via in [Via::Kernel, Via::Walk] {
        let open = |rel: &str, flags: OFlag, r: Resolve| {
            open_via(root.as_fd(), OsStr::new(rel), flags, r, via)
        };
        for r in [Resolve::Strict, Resolve::NoSymlinks] {
            assert!(open("sub/f", rd, r).is_ok(), "{via:?} {r:?}");
            assert!(open("sub/../f", rd, r).is_ok(), "{via:?} {r:?}");
            assert!(open("./sub/", OFlag::O_PATH, r).is_ok(), "{via:?} {r:?}");
            assert!(open(".", OFlag::O_PATH | OFlag::O_DIRECTORY, r).is_ok());
            assert_eq!(
                errno(open("", OFlag::O_PATH, r)),
                Errno::ENOENT,
                "{via:?} {r:?}"
            );
            // A symlink anywhere, even one that stays inside, is refused.
            let e = errno(open("in/f", rd, r));
            assert!(
                matches!(e, Errno::ELOOP | Errno::ENOTDIR),
                "{via:?} {r:?} {e}"
            );
            assert_eq!(errno(open("in", rd, r)), Errno::ELOOP, "{via:?} {r:?}");
            assert_eq!(
                errno(open("in", OFlag::O_PATH, r)),
                Errno::ELOOP,
                "{via:?} {r:?}"
            );
            assert_eq!(
                errno(open("out/secret", rd, r)),
                Errno::ELOOP,
                "{via:?} {r:?}"
            );
            assert_eq!(
                errno(open("missing/x", rd, r)),
                Errno::ENOENT,
                "{via:?} {r:?}"
            );
            assert_eq!(errno(open("f/x", rd, r)), Errno::ENOTDIR, "{via:?} {r:?}");
        }
        assert_eq!(
            errno(open("../outside/secret", rd, Resolve::Strict)),
            Errno::EXDEV
        );
        assert_eq!(
            errno(open("sub/../../x", rd, Resolve::Strict)),
            Errno::EXDEV
        );
        assert_eq!(
            errno(open("/etc/passwd", rd, Resolve::Strict)),
            Errno::EXDEV
        );
    }
}

#[test]
fn strict_never_crosses_a_mount() {
    if !Path::new("/proc/self").exists() {
        return;
    }
    let top = dir_fd(Path::new("/"));
    for via in [Via::Kernel, Via::Walk] {
        let open = |rel: &str, r| open_via(top.as_fd(), OsStr::new(rel), OFlag::O_PATH, r, via);
        assert_eq!(
            errno(open("proc/self", Resolve::Strict)),
            Errno::EXDEV,
            "{via:?}"
        );
        assert!(open("proc", Resolve::NoSymlinks).is_ok(), "{via:?}");
    }
}

#[test]
fn following_modes_stay_in_the_root_and_are_never_emulated() {
    let base = tree();
    let root = dir_fd(&base.path().join("root"));
    let rd = OFlag::O_RDONLY;
    assert!(open_beneath(&root, "in/f", rd, Resolve::Beneath).is_ok());
    assert_eq!(
        errno(open_beneath(&root, "out/secret", rd, Resolve::Beneath)),
        Errno::EXDEV
    );
    // In the root, `/sub/f` is the root's own sub/f, and `..` cannot climb out.
    let read = |rel: &str| {
        let fd = open_beneath(&root, rel, rd, Resolve::InRoot).unwrap();
        std::io::read_to_string(std::fs::File::from(fd)).unwrap()
    };
    assert_eq!(read("abs"), "inside");
    assert_eq!(read("../../f"), "top");
    for r in [Resolve::Beneath, Resolve::InRoot] {
        let got = open_via(root.as_fd(), OsStr::new("f"), rd, r, Via::Walk);
        assert_eq!(got.unwrap_err(), OpenError::NeedsOpenat2);
        assert_eq!(OpenError::NeedsOpenat2.errno(), Errno::ENOSYS);
    }
    assert_eq!(
        OpenError::NeedsOpenat2.to_string(),
        "openat2 is not available (Linux 5.6 or later is needed)"
    );
}

#[test]
fn read_in_root_resolves_inside_and_caps() {
    let base = tree();
    let root = base.path().join("root");
    assert_eq!(read_in_root(&root, "abs", 100).unwrap(), b"inside");
    assert_eq!(read_in_root(&root, "sub/f", 6).unwrap(), b"inside");
    assert!(matches!(
        read_in_root(&root, "sub/f", 5),
        Err(ReadError::TooLarge(5))
    ));
    assert!(matches!(
        read_in_root(&root, "missing", 5),
        Err(ReadError::Open(OpenError::Os(Errno::ENOENT)))
    ));
    nix::unistd::mkfifo(&root.join("fifo"), Mode::from_bits_truncate(0o600)).unwrap();
    assert_eq!(read_in_root(&root, "fifo", 5).unwrap(), b"");
}

#[test]
fn open_no_symlinks_refuses_a_symlink_on_the_way() {
    let base = tree();
    let root = base.path().join("root");
    let real = std::fs::canonicalize(&root).unwrap();
    assert!(open_no_symlinks(&real.join("sub/f")).is_ok());
    assert!(open_no_symlinks(Path::new("/")).is_ok());
    assert_eq!(errno(open_no_symlinks(&real.join("in/f"))), Errno::ELOOP);
    assert!(probe_openat2().is_ok());
}

#[test]
fn the_capped_reader_stops_at_its_cap_and_says_so() {
    use std::io::Read;
    let data = [7u8; 100];
    let cap = Cap::new(10);
    let mut r = Capped::new(&data[..], cap.clone());
    let mut buf = [0u8; 64];
    assert_eq!(r.read(&mut buf).unwrap(), 10);
    assert!(!cap.over());
    let e = r.read(&mut buf).unwrap_err();
    assert!(cap.over());
    let over = e.get_ref().and_then(|e| e.downcast_ref::<OverCap>());
    assert_eq!(over, Some(&OverCap { limit: 10 }));
    // A running budget grows by what is allowed next; a window counts from where the reader is.
    cap.raise(5);
    assert_eq!(r.read(&mut buf).unwrap(), 5);
    cap.allow_next(30);
    let mut rest = Vec::new();
    assert!(r.by_ref().take(1000).read_to_end(&mut rest).is_err());
    assert_eq!(rest.len(), 30);
    // An empty read never trips it.
    assert_eq!(r.read(&mut []).unwrap(), 0);
}
