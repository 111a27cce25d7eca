use super::*;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::{Duration, Instant};
use tempfile::TempDir;

const CANARY: &[u8] = b"host secret: the canary 5e1f0c";

/// A workspace with hostile entries planted, and a canary file outside it.
struct Fixture {
    ws: TempDir,
    out: TempDir,
}

impl Fixture {
    fn new() -> Fixture {
        let ws = tempfile::tempdir().unwrap();
        let out = tempfile::tempdir().unwrap();
        let canary = out.path().join("canary");
        std::fs::write(&canary, CANARY).unwrap();
        let w = ws.path();
        std::os::unix::fs::symlink(&canary, w.join("a")).unwrap();
        std::os::unix::fs::symlink(out.path(), w.join("d")).unwrap();
        std::os::unix::fs::symlink("/", w.join("rootlink")).unwrap();
        // Relative links cross no mount, so RESOLVE_NO_XDEV alone would not stop them (an
        // absolute one may jump to another mount at /): they test the no-symlink rule itself.
        let out_rel = Path::new("..").join(out.path().file_name().unwrap());
        std::os::unix::fs::symlink(out_rel.join("canary"), w.join("rel")).unwrap();
        std::os::unix::fs::symlink(&out_rel, w.join("dr")).unwrap();
        // A second outside file for the hard link, so `canary` itself keeps one link.
        let linked = out.path().join("linked");
        std::fs::write(&linked, CANARY).unwrap();
        std::fs::hard_link(&linked, w.join("h")).unwrap();
        std::fs::write(w.join("ok"), "inside").unwrap();
        std::fs::create_dir(w.join("sub")).unwrap();
        std::fs::write(w.join("sub/f"), "in sub").unwrap();
        Fixture { ws, out }
    }

    fn w(&self) -> &Path {
        self.ws.path()
    }

    /// The outside dir holds the two canaries, unchanged, and nothing else.
    fn assert_outside_untouched(&self) {
        let mut names: Vec<_> = std::fs::read_dir(self.out.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        names.sort();
        assert_eq!(
            names,
            vec![OsString::from("canary"), OsString::from("linked")]
        );
        for name in names {
            assert_eq!(std::fs::read(self.out.path().join(name)).unwrap(), CANARY);
        }
    }

    /// `rootlink/<the outside dir, relative to />/<name>`.
    fn via_root(&self, name: &str) -> String {
        let out = self.out.path().to_str().unwrap().trim_start_matches('/');
        format!("rootlink/{out}/{name}")
    }
}

fn refused<T: std::fmt::Debug>(r: Result<T>, needle: &str) {
    match r {
        Err(Error::File(msg)) => assert!(msg.contains(needle), "{msg:?} lacks {needle:?}"),
        other => panic!("expected a refusal containing {needle:?}, got {other:?}"),
    }
}

fn temps_left(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    crate::fsx::walk::walk(dir, usize::MAX, |e| {
        if e.rel
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(TEMP_PREFIX))
        {
            found.push(e.rel.to_path_buf());
        }
        true
    });
    found
}

#[test]
fn read_range_gives_what_exists_and_follows_no_symlink() {
    let fx = Fixture::new();
    std::fs::write(fx.w().join("digits"), "0123456789").unwrap();
    let range = |o, l| read_range(fx.w(), "digits", o, l, DEFAULT_MAX_READ).unwrap();
    assert_eq!(range(3, Some(4)), b"3456");
    assert_eq!(range(8, Some(100)), b"89");
    assert_eq!(range(7, None), b"789");
    assert!(range(1000, Some(5)).is_empty());
    // Beyond what a filesystem can seek to (ext4: 16 TiB): still just empty.
    assert!(range((1 << 53) - 1, Some(10)).is_empty());
    assert!(range(u64::MAX, None).is_empty());
    refused(
        read_range(fx.w(), "digits", 2, None, 3),
        "the range holds 8 bytes",
    );
    for link in ["a", "rel", "d/canary", "h"] {
        refused(read_range(fx.w(), link, 0, None, DEFAULT_MAX_READ), "");
        assert!(matches!(open_read(fx.w(), link), Err(Error::File(_))));
    }
    fx.assert_outside_untouched();
}

#[test]
fn atomic_write_lands_at_commit_and_leaves_nothing_when_dropped() {
    let fx = Fixture::new();
    let mut w = AtomicWrite::begin(fx.w(), "ok", None).unwrap();
    w.write(b"new ").unwrap();
    w.write(b"bytes").unwrap();
    assert_eq!(std::fs::read(fx.w().join("ok")).unwrap(), b"inside");
    // Unnamed until commit: nothing in the tree to see or swap.
    assert!(temps_left(fx.w()).is_empty());
    w.commit().unwrap();
    assert_eq!(std::fs::read(fx.w().join("ok")).unwrap(), b"new bytes");
    assert!(temps_left(fx.w()).is_empty());

    let mut w = AtomicWrite::begin(fx.w(), "sub/f", None).unwrap();
    w.write(b"never lands").unwrap();
    drop(w);
    assert_eq!(std::fs::read(fx.w().join("sub/f")).unwrap(), b"in sub");
    assert!(temps_left(fx.w()).is_empty());

    for link in ["a", "rel", "d/x", "dr/x", "h"] {
        assert!(matches!(
            AtomicWrite::begin(fx.w(), link, None),
            Err(Error::File(_))
        ));
    }
    assert!(temps_left(fx.w()).is_empty());
    fx.assert_outside_untouched();
}

#[test]
fn parse_rel_refuses_bad_shapes() {
    let long_name = "x".repeat(256);
    let long_path = "a/".repeat(2048) + "b"; // 4097 bytes
    assert_eq!(long_path.len(), 4097);
    for (p, needle) in [
        ("", "is empty"),
        ("..", "'..'"),
        ("a/../../x", "'..'"),
        ("a/..", "'..'"),
        ("/abs", "is absolute"),
        ("/", "is absolute"),
        ("a\0b", "NUL"),
        ("a/", "trailing slash"),
        ("./", "trailing slash"),
        (long_name.as_str(), "256 bytes, over the 255-byte limit"),
        (long_path.as_str(), "4097 bytes, over the 4096-byte limit"),
    ] {
        refused(parse_rel(p), needle);
    }
    // The message names the path.
    refused(parse_rel("a/../../x"), "\"a/../../x\"");
}

#[test]
fn parse_rel_normalises() {
    let p = |s: &str| parse_rel(s).unwrap();
    assert_eq!(p("./a"), vec![OsString::from("a")]);
    assert_eq!(p("a//b"), vec![OsString::from("a"), OsString::from("b")]);
    assert_eq!(p("a/./b/."), vec![OsString::from("a"), OsString::from("b")]);
    assert_eq!(p("a\\b"), vec![OsString::from("a\\b")]);
    assert_eq!(
        p("..a/b.."),
        vec![OsString::from("..a"), OsString::from("b..")]
    );
    assert!(p(".").is_empty());
    assert_eq!(p(&"x".repeat(255)).len(), 1);
    let max_path = "a/".repeat(2047) + "bc"; // 4096 bytes
    assert_eq!(p(&max_path).len(), 2048);
}

#[test]
fn read_and_write_of_the_workspace_itself_are_refused() {
    let fx = Fixture::new();
    refused(read_file(fx.w(), ".", 100), "names the workspace itself");
    refused(
        write_file(fx.w(), "./.", b"x", None),
        "names the workspace itself",
    );
    refused(read_file(fx.w(), "", 100), "is empty");
}

#[test]
fn dot_slash_and_double_slash_work() {
    let fx = Fixture::new();
    assert_eq!(read_file(fx.w(), "./ok", 100).unwrap(), b"inside");
    assert_eq!(read_file(fx.w(), "sub//f", 100).unwrap(), b"in sub");
    write_file(fx.w(), "./new//x/./y", b"made", None).unwrap();
    assert_eq!(std::fs::read(fx.w().join("new/x/y")).unwrap(), b"made");
}

#[test]
fn symlinks_are_never_followed_for_read_or_write() {
    for use_openat2 in [true, false] {
        let fx = Fixture::new();
        let via_root = fx.via_root("canary");
        for p in ["a", "rel", "rootlink"] {
            refused(read_with(fx.w(), p, 1 << 20, use_openat2), "is a symlink");
            refused(
                write_with(fx.w(), p, b"pwned", None, use_openat2),
                "is a symlink",
            );
        }
        for p in [
            "d/canary",
            "dr/canary",
            "rootlink/etc/passwd",
            via_root.as_str(),
        ] {
            refused(read_with(fx.w(), p, 1 << 20, use_openat2), NO_SYMLINKS);
            refused(
                write_with(fx.w(), p, b"pwned", None, use_openat2),
                NO_SYMLINKS,
            );
        }
        // Creating through a symlinked parent must not create outside either.
        let via_root_new = fx.via_root("x");
        for p in ["d/x", "dr/x", "dr/new/deeper/x", via_root_new.as_str()] {
            refused(
                write_with(fx.w(), p, b"pwned", None, use_openat2),
                NO_SYMLINKS,
            );
        }
        // A file in the middle of the path.
        refused(read_with(fx.w(), "ok/x", 100, use_openat2), NO_SYMLINKS);
        refused(
            write_with(fx.w(), "ok/x", b"x", None, use_openat2),
            NO_SYMLINKS,
        );
        fx.assert_outside_untouched();
        assert_eq!(
            std::fs::read_link(fx.w().join("a")).unwrap(),
            fx.out.path().join("canary")
        );
        assert!(temps_left(fx.w()).is_empty());
        // Regular files still work along the same resolver.
        assert_eq!(
            read_with(fx.w(), "sub/f", 100, use_openat2).unwrap(),
            b"in sub"
        );
        write_with(fx.w(), "p/q/r", b"ok", None, use_openat2).unwrap();
        assert_eq!(std::fs::read(fx.w().join("p/q/r")).unwrap(), b"ok");
    }
}

#[test]
fn missing_files_are_refused_as_missing() {
    let fx = Fixture::new();
    refused(read_file(fx.w(), "nope", 100), "no such file");
    refused(read_file(fx.w(), "nope/deeper", 100), "no such file");
    refused(read_with(fx.w(), "nope/deeper", 100, false), "no such file");
}

#[test]
fn a_fifo_is_refused_without_hanging() {
    let fx = Fixture::new();
    nix::unistd::mkfifo(&fx.w().join("fifo"), Mode::from_bits_truncate(0o644)).unwrap();
    let w = fx.w().to_path_buf();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send((
            read_file(&w, "fifo", 100),
            write_file(&w, "fifo", b"x", None),
        ));
    });
    let (r, wr) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("readFile on a FIFO hung");
    refused(r, "is a FIFO");
    refused(wr, "is a FIFO");
    assert!(temps_left(fx.w()).is_empty());
}

#[test]
fn a_socket_and_a_directory_are_refused() {
    let fx = Fixture::new();
    let _listener = std::os::unix::net::UnixListener::bind(fx.w().join("sock")).unwrap();
    refused(read_file(fx.w(), "sock", 100), "is a socket");
    refused(write_file(fx.w(), "sock", b"x", None), "is a socket");
    refused(read_file(fx.w(), "sub", 100), "is a directory");
    refused(write_file(fx.w(), "sub", b"x", None), "is a directory");
    assert!(fx.w().join("sub/f").exists());
    assert!(temps_left(fx.w()).is_empty());
}

#[test]
fn a_hard_link_is_refused_for_read_and_write() {
    let fx = Fixture::new();
    refused(read_file(fx.w(), "h", 1 << 20), "hard link");
    refused(write_file(fx.w(), "h", b"pwned", None), "hard link");
    fx.assert_outside_untouched();
    assert_eq!(std::fs::read(fx.w().join("h")).unwrap(), CANARY);
    assert!(temps_left(fx.w()).is_empty());
}

#[test]
fn max_bytes_is_checked_before_reading() {
    let fx = Fixture::new();
    std::fs::write(fx.w().join("ten"), b"0123456789").unwrap();
    refused(
        read_file(fx.w(), "ten", 9),
        "is 10 bytes, over maxBytes 9; readFile never returns part of a file",
    );
    assert_eq!(read_file(fx.w(), "ten", 10).unwrap(), b"0123456789");
    assert_eq!(read_file(fx.w(), "ten", u64::MAX).unwrap(), b"0123456789");
    std::fs::write(fx.w().join("empty"), b"").unwrap();
    assert_eq!(read_file(fx.w(), "empty", 0).unwrap(), b"");
}

#[test]
fn write_creates_parents_and_replaces_atomically() {
    let fx = Fixture::new();
    write_file(fx.w(), "x/y/z.txt", b"first", None).unwrap();
    let file = fx.w().join("x/y/z.txt");
    assert_eq!(std::fs::read(&file).unwrap(), b"first");
    let meta = std::fs::symlink_metadata(&file).unwrap();
    assert_eq!(meta.permissions().mode() & 0o7777, 0o644);
    for d in ["x", "x/y"] {
        let m = std::fs::symlink_metadata(fx.w().join(d)).unwrap();
        assert!(m.is_dir());
        assert_eq!(m.permissions().mode() & 0o7777, 0o755);
    }
    // Replacing: a new inode under the name, so a reader never sees a half-written file.
    write_file(fx.w(), "x/y/z.txt", b"second, longer", None).unwrap();
    let after = std::fs::symlink_metadata(&file).unwrap();
    assert_ne!(after.ino(), meta.ino());
    assert_eq!(std::fs::read(&file).unwrap(), b"second, longer");
    // An existing file's mode is not kept: writeFile makes 0644 files.
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
    write_file(fx.w(), "x/y/z.txt", b"", None).unwrap();
    let m = std::fs::symlink_metadata(&file).unwrap();
    assert_eq!((m.len(), m.permissions().mode() & 0o7777), (0, 0o644));
    assert!(temps_left(fx.w()).is_empty());
}

#[test]
fn write_chowns_the_file_and_the_directories_it_made() {
    let fx = Fixture::new();
    let me = (Uid::effective().as_raw(), Gid::effective().as_raw());
    write_file(fx.w(), "o/f", b"x", Some(me)).unwrap();
    let m = std::fs::metadata(fx.w().join("o/f")).unwrap();
    assert_eq!((m.uid(), m.gid()), me);
    if Uid::effective().is_root() {
        let them = (4242, 4343);
        write_file(fx.w(), "sub/p/q/f", b"x", Some(them)).unwrap();
        for p in ["sub/p", "sub/p/q", "sub/p/q/f"] {
            let m = std::fs::metadata(fx.w().join(p)).unwrap();
            assert_eq!((m.uid(), m.gid()), them, "{p}");
        }
        // Existing directories are not ours to chown.
        let m = std::fs::metadata(fx.w().join("sub")).unwrap();
        assert_eq!((m.uid(), m.gid()), me);
    } else {
        // Not permitted: an error, and no temp file left behind.
        assert!(write_file(fx.w(), "g", b"x", Some((0, 0))).is_err());
        assert!(!fx.w().join("g").exists());
        assert!(temps_left(fx.w()).is_empty());
    }
}

#[test]
fn a_failed_placement_removes_its_temp_file() {
    let fx = Fixture::new();
    let root_fd = open_root(fx.w()).unwrap();
    // A non-empty directory swapped in after the check: the rename fails.
    let r = place(&root_fd, OsStr::new("sub"), b"data", None, "sub");
    assert!(matches!(r, Err(Error::Runtime(_))), "{r:?}");
    assert!(temps_left(fx.w()).is_empty());
    assert_eq!(std::fs::read(fx.w().join("sub/f")).unwrap(), b"in sub");
}

#[test]
fn list_files_lists_regular_files_only() {
    for use_openat2 in [true, false] {
        let fx = Fixture::new();
        let w = fx.w();
        std::fs::create_dir_all(w.join(".deps/lib")).unwrap();
        std::fs::write(w.join(".deps/lib/m.py"), "x").unwrap();
        std::fs::create_dir_all(w.join("sub/.deps")).unwrap();
        std::fs::write(w.join("sub/.deps/kept"), "12").unwrap();
        nix::unistd::mkfifo(&w.join("sub/fifo"), Mode::from_bits_truncate(0o644)).unwrap();
        std::os::unix::fs::symlink(fx.out.path(), w.join("sub/dl")).unwrap();
        let _l = std::os::unix::net::UnixListener::bind(w.join("sock")).unwrap();
        let bad = w.join(std::ffi::OsStr::from_bytes(b"bad\xffname"));
        std::fs::create_dir(&bad).unwrap();
        std::fs::write(bad.join("f"), "x").unwrap();
        std::fs::write(w.join(std::ffi::OsStr::from_bytes(b"bad\xfefile")), "x").unwrap();

        let all = list_with(w, None, MAX_LIST_ENTRIES, use_openat2).unwrap();
        let paths: Vec<(&str, u64)> = all.iter().map(|l| (l.path.as_str(), l.size)).collect();
        // `h` is a hard link: listing it leaks nothing but a size, and readFile refuses it.
        assert_eq!(
            paths,
            vec![
                ("h", CANARY.len() as u64),
                ("ok", 6),
                ("sub/.deps/kept", 2),
                ("sub/f", 6)
            ]
        );

        let sub = list_with(w, Some("./sub"), MAX_LIST_ENTRIES, use_openat2).unwrap();
        let paths: Vec<&str> = sub.iter().map(|l| l.path.as_str()).collect();
        assert_eq!(paths, vec!["sub/.deps/kept", "sub/f"]);
        let deps = list_with(w, Some(".deps"), MAX_LIST_ENTRIES, use_openat2).unwrap();
        assert_eq!(deps[0].path, ".deps/lib/m.py");
        assert_eq!(
            list_with(w, Some("."), MAX_LIST_ENTRIES, use_openat2).unwrap(),
            all
        );

        assert!(list_with(w, Some("missing/deeper"), 10, use_openat2)
            .unwrap()
            .is_empty());
        for p in ["d", "sub/dl", "rootlink", "rootlink/etc"] {
            refused(list_with(w, Some(p), 100, use_openat2), NO_SYMLINKS);
        }
        refused(list_with(w, Some("ok"), 100, use_openat2), NO_SYMLINKS);
        refused(list_with(w, Some("../x"), 100, use_openat2), "'..'");

        // 12 entries at the root (.deps counted, not entered; the non-UTF-8 directory not
        // entered), 4 in sub, 1 in sub/.deps: 17.
        refused(
            list_with(w, None, 16, use_openat2),
            "the workspace has more than 16 entries under \".\"; list a subdirectory",
        );
        assert!(list_with(w, None, 17, use_openat2).is_ok());
        fx.assert_outside_untouched();
    }
}

/// A box swapping `d` between a real directory and a symlink to the outside, as fast as it
/// can, while the host reads and writes `d/f`.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[test]
fn racing_a_directory_into_a_symlink_never_reaches_outside() {
    use nix::fcntl::{renameat2, RenameFlags};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::Arc;

    let ws = tempfile::tempdir().unwrap();
    let out = tempfile::tempdir().unwrap();
    std::fs::write(out.path().join("f"), CANARY).unwrap();
    std::fs::create_dir(ws.path().join("d")).unwrap();
    std::fs::write(ws.path().join("d/f"), b"inside").unwrap();
    std::os::unix::fs::symlink(out.path(), ws.path().join("dl")).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swaps = Arc::new(AtomicU64::new(0));
    let swapper = {
        let (stop, swaps) = (stop.clone(), swaps.clone());
        let dir = File::open(ws.path()).unwrap();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // `d` is always there, a directory or a symlink in turn.
                renameat2(&dir, "d", &dir, "dl", RenameFlags::RENAME_EXCHANGE).unwrap();
                swaps.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let (mut reads, mut writes) = (0, 0);
    let start = Instant::now();
    let mut i = 0u64;
    while start.elapsed() < Duration::from_secs(1) {
        let use_openat2 = i % 4 < 2;
        i += 1;
        if let Ok(bytes) = read_with(ws.path(), "d/f", 1 << 20, use_openat2) {
            assert_ne!(
                bytes, CANARY,
                "read the outside file through a swapped symlink"
            );
            assert_eq!(bytes, b"inside");
            reads += 1;
        }
        if write_with(ws.path(), "d/f", b"inside", None, use_openat2).is_ok() {
            writes += 1;
        }
    }
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    assert!(swaps.load(Ordering::Relaxed) > 0);
    eprintln!(
        "race: {} swaps, {reads} reads and {writes} writes got through",
        swaps.load(Ordering::Relaxed)
    );
    let names: Vec<_> = std::fs::read_dir(out.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(
        names,
        vec![OsString::from("f")],
        "something was created outside"
    );
    assert_eq!(std::fs::read(out.path().join("f")).unwrap(), CANARY);
}

mod props {
    use super::*;
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestRunner};

    /// Paths built from the tokens that matter (glued together, or as components joined
    /// with `/`), plus arbitrary strings.
    fn paths(tokens: Vec<String>) -> impl Strategy<Value = String> {
        prop_oneof![
            any::<String>(),
            proptest::collection::vec(proptest::sample::select(tokens.clone()), 0..8)
                .prop_map(|parts| parts.concat()),
            proptest::collection::vec(proptest::sample::select(tokens), 1..6)
                .prop_map(|parts| parts.join("/")),
        ]
    }

    fn base_tokens() -> Vec<String> {
        ["a", "b", "é", "/", "/", ".", "..", "\0", "\\", " ", "ä/"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    proptest! {
        #[test]
        fn parse_rel_only_yields_normal_components(path in paths(base_tokens())) {
            if let Ok(comps) = parse_rel(&path) {
                for c in &comps {
                    let b = c.as_bytes();
                    prop_assert!(!b.is_empty() && b != b"." && b != b"..", "{c:?}");
                    prop_assert!(!b.contains(&b'/') && !b.contains(&0), "{c:?}");
                    prop_assert!(b.len() <= MAX_NAME);
                }
                let joined: PathBuf = comps.iter().collect();
                prop_assert!(!joined.is_absolute());
                prop_assert!(joined
                    .components()
                    .all(|c| matches!(c, std::path::Component::Normal(_))));
                // Normalisation is stable: the joined form parses to the same components.
                if !comps.is_empty() {
                    prop_assert_eq!(parse_rel(joined.to_str().unwrap()).unwrap(), comps);
                }
            }
        }
    }

    #[test]
    fn read_file_never_returns_the_canary() {
        let fx = Fixture::new();
        let mut tokens: Vec<String> = [
            "a", "d", "dr", "rootlink", "rel", "h", "linked", "ok", "sub", "f", "canary", "etc",
            "passwd", "/", "/", "/", ".", "..", "\0",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        tokens.extend(
            fx.out
                .path()
                .iter()
                .filter_map(|c| c.to_str())
                .filter(|c| *c != "/")
                .map(str::to_string),
        );
        let mut runner = TestRunner::new(Config {
            cases: 4096,
            failure_persistence: None,
            ..Config::default()
        });
        runner
            .run(&paths(tokens), |path| {
                for use_openat2 in [true, false] {
                    if let Ok(bytes) = read_with(fx.w(), &path, 1 << 20, use_openat2) {
                        prop_assert_ne!(bytes, CANARY.to_vec(), "via {:?}", path);
                    }
                }
                Ok(())
            })
            .unwrap();
        fx.assert_outside_untouched();
    }
}
