//! Unit tests of restore: what it refuses (names, types, links, limits, broken archives) and how
//! it treats what a box planted in the workspace.

use std::fs::File;
use std::io::{Seek, SeekFrom};
use std::os::unix::ffi::OsStrExt;

use nix::fcntl::{open, OFlag};
use nix::sys::stat::Mode;
use tar::EntryType;

use crate::error::Error;

use super::place::*;
use super::restore::*;
use super::tests::{contains, listing, refused, Env, T};
use super::*;
use std::os::unix::fs::MetadataExt;
use tar::Header;

#[test]
fn escaping_names_are_refused() {
    let d = Limits::default();
    let reg = EntryType::Regular;
    let msg = refused("../../x", &d, |_| T::benign().raw(b"../../x", reg, b"evil"));
    contains(&msg, "\"../../x\"");
    contains(&msg, "`..`");
    contains(&msg, "nothing was written");
    refused("../x/ dir", &d, |_| {
        T::benign().raw(b"../x/", EntryType::Directory, b"")
    });
    contains(
        &refused("/etc/x", &d, |_| T::benign().raw(b"/etc/x", reg, b"evil")),
        "absolute",
    );
    refused("absolute into base", &d, |base| {
        let p = base.join("abs-escape");
        T::benign().raw(p.as_os_str().as_bytes(), reg, b"evil")
    });
    refused("./../x", &d, |_| T::benign().raw(b"./../x", reg, b"evil"));
    refused("a/../../x", &d, |_| {
        T::benign().raw(b"a/../../x", reg, b"evil")
    });
    refused("ok/../../x", &d, |_| {
        T::benign().raw(b"ok/../../x", reg, b"evil")
    });
    refused("..", &d, |_| {
        T::benign().raw(b"..", EntryType::Directory, b"")
    });
    refused("empty name", &d, |_| T::benign().raw(b"", reg, b"evil"));
    refused(".", &d, |_| {
        T::benign().raw(b"./", EntryType::Directory, b"")
    });
    refused("ustar prefix ..", &d, |_| {
        let mut h = Header::new_ustar();
        h.set_entry_type(reg);
        h.set_mode(0o644);
        h.set_size(4);
        h.as_ustar_mut().unwrap().name[..1].copy_from_slice(b"x");
        h.as_ustar_mut().unwrap().prefix[..5].copy_from_slice(b"../..");
        h.set_cksum();
        let mut t = T::benign();
        t.0.append(&h, &b"evil"[..]).unwrap();
        t
    });
    refused("non-UTF-8 name", &d, |_| {
        T::benign().raw(b"bad\xff", reg, b"x")
    });
    refused("long component", &d, |_| {
        T::benign()
            .longname("c".repeat(256).as_bytes())
            .raw(b"short", reg, b"x")
    });
    refused("long path", &d, |_| {
        T::benign()
            .longname("ab/".repeat(1400).as_bytes())
            .raw(b"short", reg, b"x")
    });
}

#[test]
fn escaping_long_names_and_pax_paths_are_refused() {
    let d = Limits::default();
    let reg = EntryType::Regular;
    let msg = refused("PAX ../", &d, |_| {
        T::benign()
            .pax("path", b"../pax-escape")
            .raw(b"benign.txt", reg, b"evil")
    });
    contains(&msg, "pax-escape");
    refused("PAX absolute", &d, |base| {
        let p = base.join("pax-abs");
        T::benign()
            .pax("path", p.as_os_str().as_bytes())
            .raw(b"benign.txt", reg, b"evil")
    });
    refused("PAX NUL", &d, |_| {
        T::benign()
            .pax("path", b"ok/\0../../x")
            .raw(b"benign.txt", reg, b"evil")
    });
    refused("PAX dir ../..", &d, |_| {
        T::benign()
            .pax("path", b"ok/../../y/")
            .raw(b"benign/", EntryType::Directory, b"")
    });
    let msg = refused("GNU longname ../", &d, |_| {
        T::benign()
            .longname(b"../gnu-escape")
            .raw(b"benign.txt", reg, b"evil")
    });
    contains(&msg, "gnu-escape");
    refused("GNU longname long ../", &d, |_| {
        let name = format!("ok/{}/../../../../{}", "y".repeat(120), "z".repeat(120));
        T::benign()
            .longname(name.as_bytes())
            .raw(b"benign.txt", reg, b"evil")
    });
    refused("GNU longname absolute", &d, |base| {
        let p = base.join("gnu-abs");
        T::benign()
            .longname(p.as_os_str().as_bytes())
            .raw(b"benign.txt", reg, b"evil")
    });
    let msg = refused("huge extension header", &d, |_| {
        T::benign()
            .longname("n/".repeat(64 * 1024).as_bytes())
            .raw(b"benign.txt", reg, b"evil")
    });
    contains(&msg, "extension headers");
}

#[test]
fn links_devices_and_other_types_are_refused() {
    let d = Limits::default();
    let cases: [(&str, EntryType, &[u8], &str); 11] = [
        (
            "symlink to /etc",
            EntryType::Symlink,
            b"/etc/passwd",
            "symlink",
        ),
        (
            "symlink out",
            EntryType::Symlink,
            b"../../canary.txt",
            "symlink",
        ),
        (
            "benign symlink",
            EntryType::Symlink,
            b"ok/fine.txt",
            "symlink",
        ),
        (
            "hardlink absolute",
            EntryType::Link,
            b"/etc/passwd",
            "hardlink",
        ),
        (
            "hardlink out",
            EntryType::Link,
            b"../../canary.txt",
            "hardlink",
        ),
        (
            "benign hardlink",
            EntryType::Link,
            b"ok/fine.txt",
            "hardlink",
        ),
        ("char device", EntryType::Char, b"", "character device"),
        ("block device", EntryType::Block, b"", "block device"),
        ("fifo", EntryType::Fifo, b"", "FIFO"),
        ("PAX global header", EntryType::XGlobalHeader, b"", "global"),
        ("vendor type", EntryType::new(b'V'), b"", "type 'V'"),
    ];
    for (case, kind, link, word) in cases {
        let msg = refused(case, &d, |_| {
            T::benign().raw_link(b"member", kind, link, b"")
        });
        contains(&msg, "\"member\"");
        contains(&msg, word);
    }
    let msg = refused("GNU sparse", &d, |_| {
        // 1 TiB of holes ending in one 512-byte block of data.
        let mut h = T::header(EntryType::GNUSparse, 512);
        h.set_path("sparse").unwrap();
        let gnu = h.as_gnu_mut().unwrap();
        gnu.set_real_size(1 << 40);
        gnu.sparse[0].set_offset((1 << 40) - 512);
        gnu.sparse[0].set_length(512);
        h.set_cksum();
        let mut t = T::benign();
        t.0.append(&h, &[7u8; 512][..]).unwrap();
        t
    });
    contains(&msg, "GNU sparse file");
    let msg = refused("symlink then through it", &d, |base| {
        T::benign()
            .raw_link(
                b"x",
                EntryType::Symlink,
                base.join("outside").as_os_str().as_bytes(),
                b"",
            )
            .raw(b"x/evil", EntryType::Regular, b"evil")
    });
    contains(&msg, "symlink");
}

#[test]
fn duplicates_and_file_dir_clashes_are_refused() {
    let d = Limits::default();
    let msg = refused("file twice", &d, |_| {
        T::benign().file("dup.txt", b"1").file("dup.txt", b"2")
    });
    contains(&msg, "more than once");
    refused("dir twice", &d, |_| T::benign().dir("dd").dir("dd"));
    refused("file then dir", &d, |_| {
        T::benign().file("fd", b"1").dir("fd")
    });
    refused("spelled differently", &d, |_| {
        T::benign().file("ok/fine.txt", b"again")
    });
    refused("./ spelling", &d, |_| {
        T::benign().raw(b"./ok//fine.txt", EntryType::Regular, b"again")
    });
    let msg = refused("x file then x/y", &d, |_| {
        T::benign().file("x", b"1").file("x/y", b"2")
    });
    contains(&msg, "also has as a file");
    let msg = refused("g/y then g file", &d, |_| {
        T::benign().file("g/y", b"1").file("g", b"2")
    });
    contains(&msg, "inside it as a directory");
    refused("file with trailing slash", &d, |_| {
        T::benign().raw(b"slash/", EntryType::Regular, b"x")
    });
    // The workspace has keep/old.txt: a file cannot replace a non-empty directory.
    let msg = refused("file over a non-empty dir", &d, |_| {
        T::benign().file("keep", b"flat")
    });
    contains(&msg, "non-empty directory");
}

#[test]
fn deps_and_limits_are_refused() {
    let d = Limits::default();
    for name in [".deps/evil.js", "./.deps/x", ".deps"] {
        let msg = refused(name, &d, |_| {
            T::benign().raw(name.as_bytes(), EntryType::Regular, b"x")
        });
        contains(&msg, ".deps");
    }
    refused(".deps dir", &d, |_| T::benign().dir(".deps"));
    // No data follows: the size alone refuses it, before anything is read.
    let msg = refused("1 TiB declared", &d, |_| {
        T::benign().declared("huge", 1 << 40)
    });
    contains(&msg, "max_file_bytes");
    let small = Limits {
        max_total_bytes: 1000,
        ..Limits::default()
    };
    let msg = refused("total", &small, |_| {
        T::benign().file("a", &[1; 600]).file("b", &[2; 600])
    });
    contains(&msg, "max_total_bytes");
    let few = Limits {
        max_entries: 3,
        ..Limits::default()
    };
    let msg = refused("entries", &few, |_| {
        T::benign().file("a", b"").file("b", b"").file("c", b"")
    });
    contains(&msg, "max_entries");
    let shallow = Limits {
        max_depth: 2,
        ..Limits::default()
    };
    let msg = refused("depth", &shallow, |_| T::benign().file("a/b/c", b""));
    contains(&msg, "max_depth");
}

#[test]
fn broken_archives_are_refused() {
    let d = Limits::default();
    refused("truncated data", &d, |_| {
        let mut t = T::benign().declared("short", 100);
        t.0.get_mut().extend_from_slice(&[7; 10]);
        t.cut()
    });
    let env = Env::new();
    let before = listing(env.base.path());
    let junk = env.archives.path().join("junk");
    std::fs::write(&junk, b"not a gzip at all").unwrap();
    let err = restore(&env.ws, &junk, &d, None).unwrap_err();
    assert!(matches!(err, Error::Invalid(_)), "{err}");
    let missing = env.archives.path().join("missing.tar.gz");
    assert!(restore(&env.ws, &missing, &d, None).is_err());
    assert_eq!(listing(env.base.path()), before);
}

#[test]
fn planted_links_and_oddities_are_replaced_never_followed() {
    let env = Env::new();
    let ws = &env.ws;
    std::os::unix::fs::symlink(&env.outside, ws.join("d")).unwrap();
    std::os::unix::fs::symlink(&env.outside, ws.join("dl")).unwrap();
    std::os::unix::fs::symlink(&env.canary, ws.join("f")).unwrap();
    std::os::unix::fs::symlink(env.outside.join("f.txt"), ws.join("ok")).unwrap();
    nix::unistd::mkfifo(&ws.join("p"), Mode::from_bits_truncate(0o600)).unwrap();
    std::fs::write(ws.join("q"), "was a file").unwrap();
    std::fs::create_dir(ws.join("e")).unwrap();
    let outside_before = listing(&env.outside);
    let tar = T::benign()
        .file("d/f.txt", b"from the archive")
        .dir("dl")
        .file("f", b"not the canary")
        .file("p", b"not a fifo")
        .file("q/r.txt", b"under q")
        .file("e", b"not a dir")
        .done();
    let archive = env.write(&tar);
    let report = restore(ws, &archive, &Limits::default(), None).unwrap();
    assert_eq!((report.files, report.dirs), (6, 2));
    assert_eq!(listing(&env.outside), outside_before);
    env.canary_intact();
    for dir in ["d", "dl", "q", "ok"] {
        let md = std::fs::symlink_metadata(ws.join(dir)).unwrap();
        assert!(md.is_dir(), "{dir} is not a real directory");
    }
    for file in ["f", "p", "e"] {
        let md = std::fs::symlink_metadata(ws.join(file)).unwrap();
        assert!(md.is_file(), "{file} is not a regular file");
    }
    assert_eq!(
        std::fs::read(ws.join("d/f.txt")).unwrap(),
        b"from the archive"
    );
    assert_eq!(std::fs::read(ws.join("f")).unwrap(), b"not the canary");
    assert_eq!(std::fs::read(ws.join("q/r.txt")).unwrap(), b"under q");
    assert_eq!(std::fs::read(ws.join("ok/fine.txt")).unwrap(), b"fine");
    // Merge: what the archive does not mention stays.
    assert_eq!(std::fs::read(ws.join("keep/old.txt")).unwrap(), b"old");
    // No temp files left behind.
    let names: Vec<String> = listing(ws)
        .keys()
        .map(|p| p.display().to_string())
        .collect();
    assert!(!names.iter().any(|n| n.contains(TEMP_PREFIX)), "{names:?}");
}

#[test]
fn a_member_that_changed_since_validation_stops_the_second_pass() {
    let env = Env::new();
    let archive = env.write(&T::benign().file("late.txt", b"late").done());
    let top = open(&env.ws, OFlag::O_RDONLY | OFlag::O_DIRECTORY, Mode::empty()).unwrap();
    let file = File::open(&archive).unwrap();
    let limits = Limits::default();
    let mut plan = validate(&top, &file, &archive, &limits).unwrap();
    assert_eq!(plan.len(), 3);
    // As if the archive had been rewritten between the passes.
    plan[1][0] ^= 1;
    (&file).seek(SeekFrom::Start(0)).unwrap();
    let err = extract(&top, &file, &archive, &limits, &plan, None).unwrap_err();
    contains(&err.to_string(), "differs from the member validated");
    contains(&err.to_string(), "before it were written");
    assert!(env.ws.join("ok").is_dir());
    assert!(!env.ws.join("ok/fine.txt").exists());
    assert!(!env.ws.join("late.txt").exists());
    // Fewer members than validated is caught too.
    (&file).seek(SeekFrom::Start(0)).unwrap();
    let mut good = validate(&top, &file, &archive, &limits).unwrap();
    good.push([0; 32]);
    (&file).seek(SeekFrom::Start(0)).unwrap();
    let err = extract(&top, &file, &archive, &limits, &good, None).unwrap_err();
    contains(&err.to_string(), "ended differently");
}

#[test]
fn restore_sets_owner_when_asked() {
    if !nix::unistd::geteuid().is_root() {
        return; // chown to another uid needs root
    }
    let env = Env::new();
    let tar = T::new().dir("o").file("o/p/f.txt", b"x").done();
    let archive = env.write(&tar);
    restore(&env.ws, &archive, &Limits::default(), Some((1234, 5678))).unwrap();
    for p in ["o", "o/p", "o/p/f.txt"] {
        let md = std::fs::symlink_metadata(env.ws.join(p)).unwrap();
        assert_eq!((md.uid(), md.gid()), (1234, 5678), "{p}");
    }
    // Only what restore created: the root and existing entries keep theirs.
    let md = std::fs::metadata(&env.ws).unwrap();
    assert_ne!(md.uid(), 1234);
}
