//! Unit tests of snapshots and round trips, and the helpers both test files share: tar streams
//! built member by member, a workspace with a canary around it, listings.

use std::ffi::OsStr;
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use flate2::read::GzDecoder;
use flate2::write::GzEncoder;
use flate2::Compression;
use nix::sys::stat::Mode;
use tar::EntryType;

use crate::error::Error;

use super::members::*;
use super::restore::*;
use super::snapshot::*;
use super::*;
use proptest::strategy::Strategy;
use std::collections::BTreeMap;
use std::os::unix::fs::{FileExt, MetadataExt, PermissionsExt};
use std::path::Component;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tar::Header;

const MTIME: u64 = 1_600_000_000;

/// Every entry under `root`, never following a symlink: kind, mode and content or target.
pub(super) fn listing(root: &Path) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let mut todo = vec![root.to_path_buf()];
    while let Some(dir) = todo.pop() {
        for ent in std::fs::read_dir(&dir).unwrap() {
            let p = ent.unwrap().path();
            let md = std::fs::symlink_metadata(&p).unwrap();
            let mode = md.mode() & 0o7777;
            let desc = if md.file_type().is_symlink() {
                format!("link -> {:?}", std::fs::read_link(&p).unwrap())
            } else if md.is_dir() {
                todo.push(p.clone());
                format!("dir {mode:o}")
            } else if md.is_file() {
                format!("file {mode:o} {:?}", std::fs::read(&p).unwrap())
            } else {
                format!("other {:o}", md.mode())
            };
            out.insert(p.strip_prefix(root).unwrap().to_path_buf(), desc);
        }
    }
    out
}

pub(super) fn gzip(tar: &[u8]) -> Vec<u8> {
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    gz.write_all(tar).unwrap();
    gz.finish().unwrap()
}

/// Every byte of a snapshot, decompressed.
pub(super) fn gunzip(path: &Path) -> Vec<u8> {
    let mut out = Vec::new();
    GzDecoder::new(File::open(path).unwrap())
        .read_to_end(&mut out)
        .unwrap();
    out
}

/// A tar stream built member by member; `raw` writes name bytes straight into the header,
/// past the checks `set_path` would make.
pub(super) struct T(pub(super) tar::Builder<Vec<u8>>, Option<usize>);

impl T {
    pub(super) fn new() -> T {
        T(tar::Builder::new(Vec::new()), None)
    }

    /// Two harmless members first: a refusal later in the archive must still leave them
    /// unwritten.
    pub(super) fn benign() -> T {
        T::new().dir("ok").file("ok/fine.txt", b"fine")
    }

    pub(super) fn header(kind: EntryType, size: u64) -> Header {
        let mut h = Header::new_gnu();
        h.set_entry_type(kind);
        h.set_mode(if kind == EntryType::Directory {
            0o755
        } else {
            0o644
        });
        h.set_mtime(MTIME);
        h.set_size(size);
        h
    }

    pub(super) fn file(mut self, name: &str, data: &[u8]) -> T {
        let mut h = T::header(EntryType::Regular, data.len() as u64);
        self.0.append_data(&mut h, name, data).unwrap();
        self
    }

    pub(super) fn dir(mut self, name: &str) -> T {
        let mut h = T::header(EntryType::Directory, 0);
        self.0
            .append_data(&mut h, format!("{name}/"), io::empty())
            .unwrap();
        self
    }

    pub(super) fn raw(self, name: &[u8], kind: EntryType, data: &[u8]) -> T {
        self.raw_link(name, kind, b"", data)
    }

    pub(super) fn raw_link(mut self, name: &[u8], kind: EntryType, link: &[u8], data: &[u8]) -> T {
        let mut h = T::header(kind, data.len() as u64);
        h.as_old_mut().name[..name.len()].copy_from_slice(name);
        h.as_old_mut().linkname[..link.len()].copy_from_slice(link);
        h.set_cksum();
        self.0.append(&h, data).unwrap();
        self
    }

    /// A header that declares `size` bytes with none following.
    pub(super) fn declared(mut self, name: &str, size: u64) -> T {
        let mut h = T::header(EntryType::Regular, size);
        h.set_path(name).unwrap();
        h.set_cksum();
        self.0.get_mut().extend_from_slice(h.as_bytes());
        self
    }

    /// A PAX extended header for the next member.
    pub(super) fn pax(self, key: &str, value: &[u8]) -> T {
        let body = format!(" {key}=");
        // The record's length counts its own digits.
        let mut len = body.len() + value.len() + 1;
        len += len.to_string().len();
        if len.to_string().len() + body.len() + value.len() + 1 != len {
            len += 1;
        }
        let mut rec = format!("{len}{body}").into_bytes();
        rec.extend_from_slice(value);
        rec.push(b'\n');
        self.raw(b"PaxHeaders/x", EntryType::XHeader, &rec)
    }

    /// A GNU long-name header for the next member.
    pub(super) fn longname(self, name: &[u8]) -> T {
        let mut data = name.to_vec();
        data.push(0);
        self.raw(b"././@LongLink", EntryType::GNULongName, &data)
    }

    /// The stream ends here, without end-of-archive blocks.
    pub(super) fn cut(mut self) -> T {
        self.1 = Some(self.0.get_ref().len());
        self
    }

    pub(super) fn done(self) -> Vec<u8> {
        let mut bytes = self.0.into_inner().unwrap();
        if let Some(len) = self.1 {
            bytes.truncate(len);
        }
        bytes
    }
}

/// A workspace with some content, two levels below a base directory that also holds a
/// canary: anything escaping the workspace lands somewhere in `base`.
pub(super) struct Env {
    pub(super) base: tempfile::TempDir,
    pub(super) ws: PathBuf,
    pub(super) canary: PathBuf,
    pub(super) outside: PathBuf,
    pub(super) archives: tempfile::TempDir,
}

impl Env {
    pub(super) fn new() -> Env {
        let base = tempfile::tempdir().unwrap();
        let ws = base.path().join("a").join("ws");
        std::fs::create_dir_all(ws.join("keep")).unwrap();
        std::fs::write(ws.join("keep/old.txt"), "old").unwrap();
        std::fs::write(ws.join("x.txt"), "x").unwrap();
        let canary = base.path().join("canary.txt");
        std::fs::write(&canary, "canary").unwrap();
        let outside = base.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::write(outside.join("f.txt"), "outside").unwrap();
        Env {
            ws,
            canary,
            outside,
            base,
            archives: tempfile::tempdir().unwrap(),
        }
    }

    pub(super) fn write(&self, tar: &[u8]) -> PathBuf {
        let path = self.archives.path().join("in.tar.gz");
        std::fs::write(&path, gzip(tar)).unwrap();
        path
    }

    pub(super) fn canary_intact(&self) {
        assert_eq!(std::fs::read(&self.canary).unwrap(), b"canary");
    }
}

/// Restores the archive `build` makes into a fresh `Env`; it must be refused with the
/// workspace and everything around it byte-for-byte as before. Returns the message.
pub(super) fn refused(case: &str, limits: &Limits, build: impl FnOnce(&Path) -> T) -> String {
    let env = Env::new();
    let before = listing(env.base.path());
    let etc_x = Path::new("/etc/x").exists();
    let archive = env.write(&build(env.base.path()).done());
    let err = restore(&env.ws, &archive, limits, None).expect_err(case);
    assert!(matches!(err, Error::Invalid(_)), "{case}: {err}");
    assert_eq!(
        listing(env.base.path()),
        before,
        "{case}: the workspace or its surroundings changed"
    );
    env.canary_intact();
    assert_eq!(Path::new("/etc/x").exists(), etc_x, "{case}");
    eprintln!("{case}: {err}");
    err.to_string()
}

pub(super) fn contains(msg: &str, want: &str) {
    assert!(msg.contains(want), "{want:?} not in {msg:?}");
}

fn set_mode(p: &Path, mode: u32) {
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn round_trip_reproduces_files_dirs_and_modes() {
    let src = tempfile::tempdir().unwrap();
    let s = src.path();
    std::fs::create_dir_all(s.join("a/b/c")).unwrap();
    std::fs::write(s.join("a/b/c/deep.txt"), "deep").unwrap();
    std::fs::create_dir(s.join("empty")).unwrap();
    let binary: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    std::fs::write(s.join("bin.dat"), &binary).unwrap();
    std::fs::hard_link(s.join("bin.dat"), s.join("a/hardlinked.dat")).unwrap();
    std::fs::write(s.join("secret.txt"), "private").unwrap();
    set_mode(&s.join("secret.txt"), 0o600);
    std::fs::write(s.join("tool.sh"), "#!/bin/sh\n").unwrap();
    set_mode(&s.join("tool.sh"), 0o4755);
    set_mode(&s.join("a"), 0o750);
    std::fs::write(s.join("with space.txt"), "space").unwrap();
    std::fs::write(s.join("ünïcødé ✓.txt"), "unicode").unwrap();
    std::fs::write(s.join("line\nbreak.txt"), "newline").unwrap();
    let long = format!(
        "long/{}/{}/{}.txt",
        "x".repeat(60),
        "y".repeat(60),
        "z".repeat(70)
    );
    assert!(long.len() >= 200);
    std::fs::create_dir_all(s.join(&long).parent().unwrap()).unwrap();
    std::fs::write(s.join(&long), "long").unwrap();
    let long_name = format!("{}.txt", "n".repeat(150));
    std::fs::write(s.join(&long_name), "long name").unwrap();
    std::fs::create_dir_all(s.join(".deps/pkg")).unwrap();
    std::fs::write(s.join(".deps/pkg/index.js"), "dep").unwrap();
    std::fs::create_dir(s.join("sub")).unwrap();
    std::fs::create_dir(s.join("sub/.deps")).unwrap(); // only the top-level one is left out
    std::os::unix::fs::symlink("bin.dat", s.join("link")).unwrap();
    nix::unistd::mkfifo(&s.join("a/fifo"), Mode::from_bits_truncate(0o644)).unwrap();
    let bad = OsStr::from_bytes(b"bad\xffdir");
    std::fs::create_dir(s.join(bad)).unwrap();
    std::fs::write(s.join(bad).join("inner.txt"), "x").unwrap();
    let when = SystemTime::UNIX_EPOCH + Duration::from_secs(MTIME);
    File::options()
        .write(true)
        .open(s.join("bin.dat"))
        .unwrap()
        .set_modified(when)
        .unwrap();
    File::open(s.join("a/b"))
        .unwrap()
        .set_modified(when)
        .unwrap();

    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("ws.tar.gz");
    let report = snapshot(s, &dest, &Limits::default()).unwrap();
    let mut skipped = report.skipped.clone();
    skipped.sort();
    assert_eq!(skipped, ["a/fifo", "bad\u{fffd}dir", "link"]);
    assert_eq!(report.files, 10);
    assert_eq!(report.dirs, 9);
    assert_eq!(
        report.bytes,
        // deep, bin.dat twice, secret, tool.sh, space, unicode, newline, long path, long name
        4 + 2 * 70_000 + 7 + 10 + 5 + 7 + 7 + 4 + 9
    );

    // What the archive holds, member by member.
    let mut archive = tar::Archive::new(GzDecoder::new(File::open(&dest).unwrap()));
    let mut paths = Vec::new();
    for entry in archive.entries().unwrap() {
        let entry = entry.unwrap();
        let h = entry.header();
        let kind = h.entry_type();
        assert!(
            matches!(kind, EntryType::Regular | EntryType::Directory),
            "{kind:?}"
        );
        assert_eq!((h.uid().unwrap(), h.gid().unwrap()), (0, 0));
        assert!(h.username_bytes().is_none_or(|u| u.is_empty()));
        assert!(h.groupname_bytes().is_none_or(|g| g.is_empty()));
        assert_eq!(h.mode().unwrap() & 0o7000, 0);
        let path = String::from_utf8(entry.path_bytes().into_owned()).unwrap();
        assert_eq!(kind == EntryType::Directory, path.ends_with('/'), "{path}");
        paths.push(path);
    }
    assert!(paths.contains(&"empty/".to_string()));
    assert!(paths.contains(&long));
    assert!(paths.contains(&"sub/.deps/".to_string()));
    assert!(!paths.iter().any(|p| p.starts_with(".deps")), "{paths:?}");
    assert!(!paths.iter().any(|p| p == "link" || p == "a/fifo"));
    let mut sorted = paths.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), paths.len());

    let dst = tempfile::tempdir().unwrap();
    let restored = restore(dst.path(), &dest, &Limits::default(), None).unwrap();
    assert_eq!(
        (restored.files, restored.dirs, restored.bytes),
        (report.files, report.dirs, report.bytes)
    );
    let mut want = listing(s);
    want.retain(|p, _| {
        let first = p.components().next().unwrap().as_os_str();
        first != ".deps" && first != bad && p != Path::new("link") && p != Path::new("a/fifo")
    });
    // Set-id bits are not carried over.
    want.insert(
        PathBuf::from("tool.sh"),
        format!("file 755 {:?}", b"#!/bin/sh\n"),
    );
    assert_eq!(listing(dst.path()), want);
    let d = dst.path();
    assert_eq!(
        std::fs::metadata(d.join("secret.txt")).unwrap().mode() & 0o777,
        0o600
    );
    assert_eq!(
        std::fs::metadata(d.join("a")).unwrap().mode() & 0o777,
        0o750
    );
    assert_eq!(
        std::fs::metadata(d.join("bin.dat")).unwrap().mtime(),
        MTIME as i64
    );
    assert_eq!(
        std::fs::metadata(d.join("a/b")).unwrap().mtime(),
        MTIME as i64
    );
    // Hardlinks come back as independent files.
    assert_eq!(
        std::fs::metadata(d.join("a/hardlinked.dat"))
            .unwrap()
            .nlink(),
        1
    );
    assert_eq!(std::fs::read(d.join("a/hardlinked.dat")).unwrap(), binary);

    // Restoring again over the result merges to the same tree.
    restore(d, &dest, &Limits::default(), None).unwrap();
    assert_eq!(listing(d), want);
}

#[test]
fn snapshot_destination_is_checked() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("f"), "x").unwrap();
    let l = Limits::default();
    let err = snapshot(ws.path(), Path::new("rel.tar.gz"), &l).unwrap_err();
    contains(&err.to_string(), "relative");
    let err = snapshot(ws.path(), &ws.path().join("in.tar.gz"), &l).unwrap_err();
    contains(&err.to_string(), "inside the workspace");
    std::fs::create_dir(ws.path().join("sub")).unwrap();
    let err = snapshot(ws.path(), &ws.path().join("sub/in.tar.gz"), &l).unwrap_err();
    contains(&err.to_string(), "inside the workspace");
    // Through a symlink into the workspace, too.
    let other = tempfile::tempdir().unwrap();
    let alias = other.path().join("alias");
    std::os::unix::fs::symlink(ws.path().join("sub"), &alias).unwrap();
    let err = snapshot(ws.path(), &alias.join("in.tar.gz"), &l).unwrap_err();
    contains(&err.to_string(), "inside the workspace");
    let err = snapshot(ws.path(), &other.path().join("no/such/x.tar.gz"), &l).unwrap_err();
    contains(&err.to_string(), "create it first");
    assert!(matches!(err, Error::Invalid(_)));
    assert_eq!(std::fs::read_dir(ws.path().join("sub")).unwrap().count(), 0);
}

#[test]
fn sparse_files_keep_their_holes_both_ways() {
    let ws = tempfile::tempdir().unwrap();
    let size: u64 = 3 << 30;
    let f = File::create(ws.path().join("sparse")).unwrap();
    f.set_len(size).unwrap();
    f.write_all_at(b"head", 0).unwrap();
    f.write_all_at(&[9u8; 10_000], 1 << 30).unwrap();
    drop(f);
    // A file that is all hole, and one whose data ends it.
    File::create(ws.path().join("empty-hole"))
        .unwrap()
        .set_len(1 << 20)
        .unwrap();
    let g = File::create(ws.path().join("tail")).unwrap();
    g.write_all_at(b"end", (1 << 24) - 3).unwrap();
    drop(g);
    std::fs::set_permissions(
        ws.path().join("sparse"),
        std::fs::Permissions::from_mode(0o640),
    )
    .unwrap();
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("ws.tar.gz");
    let started = Instant::now();
    // A 1 MiB per-file limit: the 3 GiB file holds far less.
    let limits = Limits {
        max_file_bytes: 1 << 20,
        ..Limits::default()
    };
    let report = snapshot(ws.path(), &dest, &limits).unwrap();
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(report.files, 3);
    assert!(report.bytes < 64 << 10, "{report:?}");
    assert!(std::fs::metadata(&dest).unwrap().len() < 64 << 10);

    let back = tempfile::tempdir().unwrap();
    let r = restore(back.path(), &dest, &limits, None).unwrap();
    assert_eq!(r.files, 3);
    let p = back.path().join("sparse");
    let m = std::fs::metadata(&p).unwrap();
    assert_eq!(m.len(), size);
    assert_eq!(m.mode() & 0o777, 0o640);
    assert!(m.blocks() * 512 < 1 << 20, "{} blocks", m.blocks());
    let f = File::open(&p).unwrap();
    let mut buf = vec![0u8; 10_002];
    f.read_exact_at(&mut buf[..4], 0).unwrap();
    assert_eq!(&buf[..4], b"head");
    f.read_exact_at(&mut buf, (1 << 30) - 1).unwrap();
    assert_eq!(buf[0], 0);
    assert!(buf[1..10_001].iter().all(|&b| b == 9));
    assert_eq!(buf[10_001], 0);
    f.read_exact_at(&mut buf[..4096], size - 4096).unwrap();
    assert!(buf[..4096].iter().all(|&b| b == 0));
    let hole = std::fs::metadata(back.path().join("empty-hole")).unwrap();
    assert_eq!((hole.len(), hole.blocks()), (1 << 20, 0));
    let tail = std::fs::read(back.path().join("tail")).unwrap();
    assert_eq!(tail.len(), 1 << 24);
    assert_eq!(&tail[tail.len() - 3..], b"end");
    assert!(tail[..tail.len() - 3].iter().all(|&b| b == 0));

    // Python's tarfile (and GNU tar) read the same member as the same file.
    let py = std::process::Command::new("python3")
        .arg("-c")
        .arg("import sys, tarfile; t = tarfile.open(sys.argv[1]); m = t.getmember('sparse'); print(m.size, m.sparse is not None)")
        .arg(&dest)
        .output();
    if let Ok(py) = py {
        if py.status.success() {
            assert_eq!(
                String::from_utf8_lossy(&py.stdout).trim(),
                format!("{size} True")
            );
        }
    }
}

#[test]
fn sparse_maps_that_lie_are_refused() {
    let d = Limits::default();
    let sparse = |map: &str, data: &[u8], real: &str| {
        let mut body = map.as_bytes().to_vec();
        body.resize(512, 0);
        body.extend_from_slice(data);
        let body = body.clone();
        let real = real.to_string();
        move |_: &Path| {
            let mut rec = pax_record("GNU.sparse.major", "1");
            rec.extend(pax_record("GNU.sparse.minor", "0"));
            rec.extend(pax_record("GNU.sparse.name", "f"));
            rec.extend(pax_record("GNU.sparse.realsize", &real));
            T::new()
                .raw(b"PaxHeaders/f", EntryType::XHeader, &rec)
                .file("GNUSparseFile.0/f", &body)
        }
    };
    for (case, map, data, real) in [
        (
            "past the real size",
            "1\n100\n10\n",
            &b"0123456789"[..],
            "50",
        ),
        ("out of order", "2\n100\n1\n50\n1\n", b"ab", "200"),
        ("more data than listed", "1\n0\n1\n", b"ab", "10"),
        ("less data than listed", "1\n0\n5\n", b"ab", "10"),
        ("malformed", "1\nx\n1\n", b"a", "10"),
        ("too many runs", "999999999\n", b"", "10"),
    ] {
        let msg = refused(case, &d, sparse(map, data, real));
        contains(&msg, "sparse map");
    }
    let msg = refused("PAX sparse 0.1", &d, |_| {
        let mut rec = pax_record("GNU.sparse.numblocks", "1");
        rec.extend(pax_record("GNU.sparse.map", "0,1"));
        T::new()
            .raw(b"PaxHeaders/f", EntryType::XHeader, &rec)
            .file("f", b"a")
    });
    contains(&msg, "PAX 1.0 sparse");
}

#[test]
fn snapshot_limits_refuse_before_writing() {
    let ws = tempfile::tempdir().unwrap();
    std::fs::write(ws.path().join("small"), "x").unwrap();
    // The limits count what a file holds: 1 MiB of data 1 TB into a sparse file.
    let huge = File::create(ws.path().join("huge")).unwrap();
    huge.set_len(1 << 40).unwrap();
    huge.write_all_at(&vec![7u8; 1 << 20], (1 << 40) - (1 << 20))
        .unwrap();
    let out = tempfile::tempdir().unwrap();
    let dest = out.path().join("ws.tar.gz");
    let limits = Limits {
        max_file_bytes: 1 << 19,
        ..Limits::default()
    };
    let started = Instant::now();
    let err = snapshot(ws.path(), &dest, &limits).unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(30));
    let msg = err.to_string();
    contains(&msg, "\"huge\"");
    contains(&msg, "max_file_bytes");
    contains(&msg, &(1u64 << 19).to_string());
    assert!(matches!(err, Error::Invalid(_)));
    // Neither the archive nor its temp file is left.
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);

    let limits = Limits {
        max_total_bytes: 1 << 19,
        max_file_bytes: u64::MAX,
        ..Limits::default()
    };
    let msg = snapshot(ws.path(), &dest, &limits).unwrap_err().to_string();
    contains(&msg, "max_total_bytes");
    std::fs::remove_file(ws.path().join("huge")).unwrap();

    for i in 0..5 {
        std::fs::write(ws.path().join(format!("f{i}")), "x").unwrap();
    }
    let few = Limits {
        max_entries: 4,
        ..Limits::default()
    };
    let msg = snapshot(ws.path(), &dest, &few).unwrap_err().to_string();
    contains(&msg, "max_entries");
    std::fs::create_dir_all(ws.path().join("a/b/c")).unwrap();
    let shallow = Limits {
        max_depth: 2,
        ..Limits::default()
    };
    let msg = snapshot(ws.path(), &dest, &shallow)
        .unwrap_err()
        .to_string();
    contains(&msg, "\"a/b/c\"");
    contains(&msg, "max_depth");
    assert_eq!(std::fs::read_dir(out.path()).unwrap().count(), 0);
    snapshot(ws.path(), &dest, &Limits::default()).unwrap();
    assert!(dest.is_file());
}

#[test]
fn a_shrinking_file_is_an_error_and_a_growing_one_is_cut_to_size() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    std::fs::write(&p, b"12345").unwrap();
    let mut short = Exactly {
        file: File::open(&p).unwrap(),
        left: 10,
        shrank: false,
    };
    let mut sink = Vec::new();
    assert!(io::copy(&mut short, &mut sink).is_err());
    assert!(short.shrank);
    let mut cut = Exactly {
        file: File::open(&p).unwrap(),
        left: 3,
        shrank: false,
    };
    let mut got = Vec::new();
    io::copy(&mut cut, &mut got).unwrap();
    assert_eq!(got, b"123");
    assert!(!cut.shrank);
}

#[test]
fn swapping_a_directory_for_a_symlink_never_leaks_outside_data() {
    const SECRET: &[u8] = b"SECRET-8d1f0c-outside-the-workspace";
    const SECRET_NAME: &str = "ONLY-OUTSIDE-7b2e";
    let ws = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("f.txt"), SECRET).unwrap();
    std::fs::write(outside.path().join(SECRET_NAME), SECRET).unwrap();
    std::fs::create_dir(ws.path().join("d")).unwrap();
    std::fs::write(ws.path().join("d/f.txt"), "inside").unwrap();
    std::os::unix::fs::symlink(outside.path(), ws.path().join("d.link")).unwrap();

    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let ws = ws.path().to_path_buf();
        let stop = stop.clone();
        std::thread::spawn(move || {
            let deadline = Instant::now() + Duration::from_secs(1);
            let mut swaps = 0u32;
            while Instant::now() < deadline {
                std::fs::rename(ws.join("d"), ws.join("d.real")).unwrap();
                std::fs::rename(ws.join("d.link"), ws.join("d")).unwrap();
                std::thread::sleep(Duration::from_micros(50));
                std::fs::rename(ws.join("d"), ws.join("d.link")).unwrap();
                std::fs::rename(ws.join("d.real"), ws.join("d")).unwrap();
                swaps += 1;
            }
            stop.store(true, Ordering::SeqCst);
            swaps
        })
    };
    let out = tempfile::tempdir().unwrap();
    let (mut ok, mut failed, mut saw_link) = (0u32, 0u32, 0u32);
    while !stop.load(Ordering::SeqCst) {
        let dest = out.path().join("s.tar.gz");
        match snapshot(ws.path(), &dest, &Limits::default()) {
            Ok(report) => {
                saw_link += u32::from(report.skipped.iter().any(|p| p == "d"));
                let bytes = gunzip(&dest);
                for needle in [SECRET, SECRET_NAME.as_bytes()] {
                    assert!(
                        !bytes.windows(needle.len()).any(|w| w == needle),
                        "outside data in a snapshot"
                    );
                }
                ok += 1;
            }
            Err(_) => failed += 1,
        }
    }
    let swaps = swapper.join().unwrap();
    eprintln!("{swaps} swaps; {ok} snapshots ({saw_link} saw d as a symlink), {failed} failed");
    assert!(
        swaps > 0 && ok + failed > 0,
        "{swaps} swaps, {ok} ok, {failed} failed"
    );
    // The untouched tree snapshots fine afterwards.
    let dest = out.path().join("after.tar.gz");
    snapshot(ws.path(), &dest, &Limits::default()).unwrap();
    assert!(gunzip(&dest).windows(6).any(|w| w == b"inside"));
}

#[test]
fn member_path_examples() {
    assert_eq!(member_path(b"a/b.txt").unwrap(), "a/b.txt");
    assert_eq!(member_path(b"./a//b/./c/").unwrap(), "a/b/c");
    assert_eq!(member_path(b"a/...").unwrap(), "a/...");
    for bad in [
        &b"../x"[..],
        b"/etc/x",
        b"./../x",
        b"a/../../x",
        b"a/..",
        b"",
        b".",
        b"./",
        b"//",
        b"a\0b",
        b"\xff",
    ] {
        assert!(member_path(bad).is_err(), "{bad:?}");
    }
    assert!(member_path("c".repeat(255).as_bytes()).is_ok());
    assert!(member_path("c".repeat(256).as_bytes()).is_err());
    assert!(member_path("c/".repeat(2048).as_bytes()).is_ok());
    assert!(member_path("c/".repeat(2049).as_bytes()).is_err());
}

/// The filter's promise: a refusal, or normal components only, joined under any root.
fn check_filter(raw: &[u8]) {
    let Ok(p) = member_path(raw) else { return };
    assert!(
        !p.is_empty() && p.len() <= MAX_PATH && !p.contains('\0'),
        "{p:?}"
    );
    assert!(
        p.split('/')
            .all(|c| !c.is_empty() && c != "." && c != ".." && c.len() <= MAX_COMPONENT),
        "{p:?}"
    );
    let comps: Vec<Component> = Path::new(&p).components().collect();
    assert!(
        comps.iter().all(|c| matches!(c, Component::Normal(_))),
        "{p:?}"
    );
    assert_eq!(comps.len(), p.split('/').count(), "{p:?}");
    let root = Path::new("/srv/ws");
    let joined = root.join(&p);
    assert!(joined.starts_with(root), "{p:?}");
    assert_eq!(
        joined.components().count(),
        root.components().count() + comps.len()
    );
}

proptest::proptest! {
    #[test]
    fn member_filter_stays_beneath_the_root(raw in proptest::prop_oneof![
        proptest::arbitrary::any::<String>(),
        "[a./\\\\\u{0}é]{0,40}",
        proptest::collection::vec(
            proptest::sample::select(vec!["..", ".", "", "a", "/", "b\u{0}", "é", "..."]),
            0..10,
        ).prop_map(|v| v.join("/")),
    ]) {
        check_filter(raw.as_bytes());
    }

    #[test]
    fn member_filter_on_raw_bytes(raw in proptest::collection::vec(
        proptest::sample::select(vec![b'.', b'/', b'a', 0u8, 0xff, 0xc3, 0xa9]),
        0..40,
    )) {
        check_filter(&raw);
    }
}
