//! Unit tests of layer application: real tar streams, hostile names and links, whiteouts,
//! limits, attributes.

use std::path::{Path, PathBuf};

use super::metadata::*;
use super::paths::*;
use super::*;
use std::os::unix::fs::{MetadataExt, PermissionsExt};

const MTIME: u64 = 1_600_000_000;

/// A tar stream built entry by entry from raw headers, so hostile names can be written.
struct T(Vec<u8>);

impl T {
    fn new() -> T {
        T(Vec::new())
    }

    fn raw(mut self, name: &[u8], kind: u8, data: &[u8], link: &[u8], mode: u32) -> T {
        let mut h = tar::Header::new_gnu();
        {
            let old = h.as_old_mut();
            old.name[..name.len()].copy_from_slice(name);
            old.linkname[..link.len()].copy_from_slice(link);
        }
        h.as_old_mut().linkflag[0] = kind;
        h.set_size(data.len() as u64);
        h.set_mode(mode);
        h.set_mtime(MTIME);
        h.set_uid(0);
        h.set_gid(0);
        h.set_cksum();
        self.0.extend_from_slice(h.as_bytes());
        self.0.extend_from_slice(data);
        let pad = (512 - data.len() % 512) % 512;
        self.0.extend(std::iter::repeat_n(0u8, pad));
        self
    }

    fn file(self, name: &str, data: &[u8]) -> T {
        self.raw(name.as_bytes(), b'0', data, b"", 0o644)
    }

    fn file_mode(self, name: &str, data: &[u8], mode: u32) -> T {
        self.raw(name.as_bytes(), b'0', data, b"", mode)
    }

    fn dir(self, name: &str, mode: u32) -> T {
        self.raw(name.as_bytes(), b'5', b"", b"", mode)
    }

    fn symlink(self, name: &str, target: &str) -> T {
        self.raw(name.as_bytes(), b'2', b"", target.as_bytes(), 0o777)
    }

    fn hardlink(self, name: &str, target: &str) -> T {
        self.raw(name.as_bytes(), b'1', b"", target.as_bytes(), 0o644)
    }

    fn done(mut self) -> Vec<u8> {
        self.0.extend(std::iter::repeat_n(0u8, 1024));
        self.0
    }
}

fn opts() -> UnpackOptions {
    UnpackOptions {
        chown: false,
        max_layer_bytes: 1 << 30,
        max_entries: 100_000,
    }
}

/// A scratch directory holding the image root and a sibling that must never be touched.
struct Scratch {
    _dir: tempfile::TempDir,
    root: PathBuf,
    sibling: PathBuf,
    base: PathBuf,
}

fn scratch() -> Scratch {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path().to_path_buf();
    let root = base.join("root");
    let sibling = base.join("sibling");
    std::fs::create_dir(&root).unwrap();
    std::fs::create_dir(&sibling).unwrap();
    std::fs::write(sibling.join("secret"), b"s").unwrap();
    Scratch {
        _dir: dir,
        root,
        sibling,
        base,
    }
}

impl Scratch {
    /// Nothing appeared outside the root but what `scratch` made.
    fn assert_untouched(&self) {
        let mut outside: Vec<String> = std::fs::read_dir(&self.base)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        outside.sort();
        assert_eq!(outside, ["root", "sibling"]);
        let sib: Vec<_> = std::fs::read_dir(&self.sibling).unwrap().collect();
        assert_eq!(sib.len(), 1);
        assert_eq!(std::fs::read(self.sibling.join("secret")).unwrap(), b"s");
    }
}

fn apply(u: &mut Unpacker, tar: &[u8]) -> Result<LayerStats, UnpackError> {
    u.apply_layer(&mut &tar[..])
}

fn unpack_all(root: &Path, layers: &[Vec<u8>]) -> Result<(), UnpackError> {
    let mut u = Unpacker::new(root, opts())?;
    for l in layers {
        apply(&mut u, l)?;
    }
    u.finish()
}

fn hostile_err(r: Result<impl std::fmt::Debug, UnpackError>, entry: &str) {
    match r {
        Err(e @ UnpackError::Hostile { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(entry), "{msg}");
        }
        other => panic!("expected a Hostile error for {entry}, got {other:?}"),
    }
}

#[test]
fn happy_path() {
    let s = scratch();
    let layer = T::new()
        .dir("./", 0o755)
        .dir("./usr/", 0o755)
        .dir("usr/bin", 0o755)
        .file_mode("usr/bin/tool", b"#!/bin/sh\necho hi\n", 0o755)
        .symlink("bin", "usr/bin")
        .symlink("abs", "/etc/nowhere")
        .hardlink("usr/bin/tool2", "usr/bin/tool")
        .raw(b"run/fifo", b'6', b"", b"", 0o644)
        .file("implicit/deep/file", b"x")
        .done();
    let mut u = Unpacker::new(&s.root, opts()).unwrap();
    let stats = apply(&mut u, &layer).unwrap();
    assert_eq!(stats.entries, 9);
    assert_eq!(stats.skipped_devices, 0);
    // A long name (GNU longname) and PAX records through tar::Builder.
    let mut b = tar::Builder::new(Vec::new());
    let long = format!("usr/{}/f", "d".repeat(150));
    let mut h = tar::Header::new_gnu();
    h.set_size(3);
    h.set_mode(0o600);
    h.set_mtime(MTIME);
    b.append_data(&mut h, &long, &b"abc"[..]).unwrap();
    b.append_pax_extensions([
        ("SCHILY.xattr.user.test", &b"v"[..]),
        ("SCHILY.xattr.security.capability", &b"x"[..]),
        ("mtime", &b"1500000000.5"[..]),
    ])
    .unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    h.set_mode(0o644);
    h.set_mtime(MTIME);
    b.append_data(&mut h, "usr/pax", &b"p"[..]).unwrap();
    apply(&mut u, &b.into_inner().unwrap()).unwrap();
    // Before finish, directories stay owner-writable.
    let m = std::fs::metadata(s.root.join("usr/bin")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o700);
    u.finish().unwrap();

    let tool = s.root.join("usr/bin/tool");
    assert_eq!(std::fs::read(&tool).unwrap(), b"#!/bin/sh\necho hi\n");
    let m = std::fs::metadata(&tool).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o755);
    assert_eq!(m.mtime(), MTIME as i64);
    let m2 = std::fs::metadata(s.root.join("usr/bin/tool2")).unwrap();
    assert_eq!(m.ino(), m2.ino());
    assert_eq!(
        std::fs::read_link(s.root.join("bin")).unwrap(),
        Path::new("usr/bin")
    );
    assert_eq!(
        std::fs::read_link(s.root.join("abs")).unwrap(),
        Path::new("/etc/nowhere")
    );
    let l = std::fs::symlink_metadata(s.root.join("bin")).unwrap();
    assert_eq!(l.mtime(), MTIME as i64);
    let fifo = std::fs::symlink_metadata(s.root.join("run/fifo")).unwrap();
    assert!(std::os::unix::fs::FileTypeExt::is_fifo(&fifo.file_type()));
    assert_eq!(fifo.permissions().mode() & 0o777, 0o644);
    assert_eq!(
        std::fs::read(s.root.join("implicit/deep/file")).unwrap(),
        b"x"
    );
    // Implicit parents get Docker's default mode; explicit dirs theirs, with their mtime.
    let m = std::fs::metadata(s.root.join("implicit/deep")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o755);
    let m = std::fs::metadata(s.root.join("usr/bin")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o755);
    assert_eq!(m.mtime(), MTIME as i64);
    let m = std::fs::metadata(&s.root).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o755);
    assert_eq!(std::fs::read(s.root.join(&long)).unwrap(), b"abc");
    let m = std::fs::metadata(s.root.join("usr/pax")).unwrap();
    assert_eq!((m.mtime(), m.mtime_nsec()), (1_500_000_000, 500_000_000));
    s.assert_untouched();
}

#[test]
fn whiteouts_remove_lower_files_and_trees() {
    let s = scratch();
    let lower = T::new()
        .file("a/file", b"1")
        .file("a/keep", b"2")
        .file("tree/x/y/z", b"3")
        .symlink("tree/link", "/")
        .symlink("a/sl", "../tree")
        .done();
    let upper = T::new()
        .file("a/.wh.file", b"")
        .raw(b"a/.wh.sl", b'0', b"", b"", 0o644)
        .file(".wh.tree", b"")
        .file("a/.wh.missing", b"")
        .file("nope/.wh.missing", b"")
        .file("a/.wh..wh.plnk", b"")
        .done();
    unpack_all(&s.root, &[lower, upper]).unwrap();
    assert!(!s.root.join("a/file").exists());
    assert!(std::fs::symlink_metadata(s.root.join("a/sl")).is_err());
    assert!(s.root.join("a/keep").exists());
    assert!(!s.root.join("tree").exists());
    // Whiteout files themselves are never written, nor missing parents created.
    assert!(!s.root.join("a/.wh.file").exists());
    assert!(!s.root.join(".wh.tree").exists());
    assert!(!s.root.join("a/.wh..wh.plnk").exists());
    assert!(!s.root.join("nope").exists());
    s.assert_untouched();
}

#[test]
fn opaque_marker_before_own_entries() {
    let s = scratch();
    let lower = T::new()
        .file("d/old", b"1")
        .file("d/sub/old", b"2")
        .file("other", b"3")
        .done();
    let upper = T::new()
        .dir("d", 0o755)
        .file("d/.wh..wh..opq", b"")
        .file("d/new", b"4")
        .file("d/sub/new", b"5")
        .done();
    unpack_all(&s.root, &[lower, upper]).unwrap();
    assert!(!s.root.join("d/old").exists());
    assert!(!s.root.join("d/sub/old").exists());
    assert!(s.root.join("d/new").exists());
    assert!(s.root.join("d/sub/new").exists());
    assert!(s.root.join("other").exists());
    assert!(!s.root.join("d/.wh..wh..opq").exists());
}

#[test]
fn opaque_marker_after_own_entries() {
    let s = scratch();
    let lower = T::new()
        .file("d/old", b"1")
        .file("d/sub/old", b"2")
        .file("d/same", b"lower")
        .file("other", b"3")
        .done();
    // d/sub exists below and is only merged into by this layer (no entry of its own).
    let upper = T::new()
        .file("d/new", b"4")
        .file("d/sub/new", b"5")
        .file("d/same", b"upper")
        .file("d/.wh..wh..opq", b"")
        .done();
    unpack_all(&s.root, &[lower, upper]).unwrap();
    assert!(!s.root.join("d/old").exists());
    assert!(!s.root.join("d/sub/old").exists());
    assert!(s.root.join("d/new").exists());
    assert!(s.root.join("d/sub/new").exists());
    assert_eq!(std::fs::read(s.root.join("d/same")).unwrap(), b"upper");
    assert!(s.root.join("other").exists());
}

#[test]
fn opaque_root_and_missing_dir() {
    let s = scratch();
    let lower = T::new().file("x", b"1").file("y/z", b"2").done();
    let upper = T::new()
        .file("y/z", b"3")
        .file(".wh..wh..opq", b"")
        .file("missing/.wh..wh..opq", b"")
        .done();
    unpack_all(&s.root, &[lower, upper]).unwrap();
    assert!(!s.root.join("x").exists());
    assert_eq!(std::fs::read(s.root.join("y/z")).unwrap(), b"3");
    assert!(!s.root.join("missing").exists());
}

#[test]
fn replacements() {
    let s = scratch();
    let lower = T::new()
        .file("was_dir/child/deep", b"1")
        .dir("was_dir/ro", 0o555)
        .file("was_file", b"2")
        .dir("stays", 0o700)
        .file("stays/child", b"3")
        .symlink("was_link", "../sibling/secret")
        .file("hl_src", b"inode")
        .hardlink("hl", "hl_src")
        .done();
    let upper = T::new()
        .file("was_dir", b"now a file")
        .dir("was_file", 0o751)
        .dir("stays", 0o750)
        .file("was_link", b"replaced, not written through")
        .file("hl", b"new inode")
        .done();
    unpack_all(&s.root, &[lower, upper]).unwrap();
    assert_eq!(
        std::fs::read(s.root.join("was_dir")).unwrap(),
        b"now a file"
    );
    let m = std::fs::symlink_metadata(s.root.join("was_file")).unwrap();
    assert!(m.is_dir());
    assert_eq!(m.permissions().mode() & 0o7777, 0o751);
    // A directory over a directory merges; the later layer's mode wins.
    assert!(s.root.join("stays/child").exists());
    let m = std::fs::metadata(s.root.join("stays")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o750);
    assert!(!std::fs::symlink_metadata(s.root.join("was_link"))
        .unwrap()
        .is_symlink());
    // Replacing a hardlinked name does not write into the shared inode.
    assert_eq!(std::fs::read(s.root.join("hl_src")).unwrap(), b"inode");
    assert_eq!(std::fs::read(s.root.join("hl")).unwrap(), b"new inode");
    s.assert_untouched();
}

#[test]
fn dotdot_refused() {
    let s = scratch();
    let mut u = Unpacker::new(&s.root, opts()).unwrap();
    let r = apply(&mut u, &T::new().file("../escape", b"x").done());
    hostile_err(r, "../escape");
    let r = apply(
        &mut u,
        &T::new().file("a/../../sibling/secret", b"x").done(),
    );
    hostile_err(r, "a/../../sibling/secret");
    let r = apply(&mut u, &T::new().dir("..", 0o755).done());
    hostile_err(r, "..");
    s.assert_untouched();
    assert_eq!(std::fs::read_dir(&s.root).unwrap().count(), 0);
}

#[test]
fn nul_and_empty_names_refused() {
    let s = scratch();
    let mut u = Unpacker::new(&s.root, opts()).unwrap();
    let mut b = tar::Builder::new(Vec::new());
    b.append_pax_extensions([("path", &b"a\0b"[..])]).unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_size(0);
    h.set_mode(0o644);
    b.append_data(&mut h, "placeholder", &b""[..]).unwrap();
    hostile_err(apply(&mut u, &b.into_inner().unwrap()), "a\\0b");
    let r = apply(&mut u, &T::new().file("", b"x").done());
    hostile_err(r, "\"\"");
    let r = apply(&mut u, &T::new().file("./", b"x").done());
    hostile_err(r, "./");
}

#[test]
fn absolute_name_lands_inside() {
    let s = scratch();
    let layer = T::new()
        .file("/etc/x", b"in")
        .file("//etc/./y", b"in2")
        .done();
    unpack_all(&s.root, &[layer]).unwrap();
    assert_eq!(std::fs::read(s.root.join("etc/x")).unwrap(), b"in");
    assert_eq!(std::fs::read(s.root.join("etc/y")).unwrap(), b"in2");
    s.assert_untouched();
}

#[test]
fn symlinked_parent_leaving_root_refused() {
    let s = scratch();
    let sib = s.sibling.to_str().unwrap().to_string();
    for (link, target) in [
        ("evil", "/"),
        ("evil2", "../../.."),
        ("evil3", sib.as_str()),
    ] {
        let mut u = Unpacker::new(&s.root, opts()).unwrap();
        let entry = format!("{link}/pwned");
        let layer = T::new().symlink(link, target).file(&entry, b"x").done();
        hostile_err(apply(&mut u, &layer), &entry);
        // Also when the symlink came from an earlier layer, and for deeper paths.
        let entry = format!("{link}/deeper/pwned");
        hostile_err(apply(&mut u, &T::new().file(&entry, b"x").done()), &entry);
        let entry = format!("{link}/.wh.secret");
        hostile_err(apply(&mut u, &T::new().file(&entry, b"").done()), &entry);
        let entry = format!("{link}/sub/.wh..wh..opq");
        hostile_err(apply(&mut u, &T::new().file(&entry, b"").done()), &entry);
        // An opaque marker in the symlink itself is not followed: nothing to purge.
        let entry = format!("{link}/.wh..wh..opq");
        apply(&mut u, &T::new().file(&entry, b"").done()).unwrap();
    }
    assert!(!Path::new("/pwned").exists());
    s.assert_untouched();
}

#[test]
fn symlinked_parent_inside_root_is_followed() {
    let s = scratch();
    let layer = T::new()
        .file("usr/lib/a", b"a")
        .symlink("lib", "usr/lib")
        .symlink("usr/l2", "../usr/lib")
        .file("lib/b", b"b")
        .file("usr/l2/c", b"c")
        .done();
    unpack_all(&s.root, &[layer]).unwrap();
    assert_eq!(std::fs::read(s.root.join("usr/lib/b")).unwrap(), b"b");
    assert_eq!(std::fs::read(s.root.join("usr/lib/c")).unwrap(), b"c");
}

#[test]
fn hardlink_escapes_refused() {
    let s = scratch();
    let mut u = Unpacker::new(&s.root, opts()).unwrap();
    let r = apply(&mut u, &T::new().hardlink("link", "../../outside").done());
    hostile_err(r, "link");
    let r = apply(
        &mut u,
        &T::new().hardlink("link", "../sibling/secret").done(),
    );
    hostile_err(r, "link");
    let sib = s.sibling.to_str().unwrap().to_string();
    let layer = T::new()
        .symlink("out", &sib)
        .hardlink("l", "out/secret")
        .done();
    hostile_err(apply(&mut u, &layer), "\"l\"");
    assert!(std::fs::symlink_metadata(s.root.join("l")).is_err());
    // Absolute link names are paths in the root, like entry names.
    let layer = T::new().file("f", b"1").hardlink("l2", "/f").done();
    apply(&mut u, &layer).unwrap();
    assert_eq!(std::fs::read(s.root.join("l2")).unwrap(), b"1");
    assert_eq!(
        std::fs::metadata(s.sibling.join("secret")).unwrap().nlink(),
        1
    );
    s.assert_untouched();
}

#[test]
fn bad_hardlinks_are_errors() {
    let s = scratch();
    let mut u = Unpacker::new(&s.root, opts()).unwrap();
    let r = apply(&mut u, &T::new().hardlink("l", "missing").done());
    let msg = r.unwrap_err().to_string();
    assert!(
        msg.contains("\"l\"") && msg.contains("\"missing\"") && msg.contains("does not exist"),
        "{msg}"
    );
    let r = apply(&mut u, &T::new().dir("d", 0o755).hardlink("l", "d").done());
    let msg = r.unwrap_err().to_string();
    assert!(msg.contains("\"d\"") && msg.contains("directory"), "{msg}");
    // A link to itself, directly or through an in-root symlink, leaves the file alone.
    let layer = T::new()
        .file("usr/lib/x", b"x")
        .symlink("lib", "usr/lib")
        .hardlink("usr/lib/x", "usr/lib/x")
        .hardlink("lib/x", "usr/lib/x")
        .done();
    apply(&mut u, &layer).unwrap();
    assert_eq!(std::fs::read(s.root.join("usr/lib/x")).unwrap(), b"x");
    let r = apply(&mut u, &T::new().hardlink("l", "./").done());
    assert!(matches!(r, Err(UnpackError::BadLink { .. })));
}

#[test]
fn setid_bits_stripped_from_files_only() {
    let s = scratch();
    let layer = T::new()
        .file_mode("suid", b"x", 0o4755)
        .file_mode("sgid", b"x", 0o2755)
        .dir("shared", 0o2775)
        .dir("tmp", 0o1777)
        .raw(b"fifo", b'6', b"", b"", 0o4644)
        .done();
    unpack_all(&s.root, &[layer]).unwrap();
    let mode = |p: &str| {
        std::fs::symlink_metadata(s.root.join(p))
            .unwrap()
            .permissions()
            .mode()
            & 0o7777
    };
    assert_eq!(mode("suid"), 0o755);
    assert_eq!(mode("sgid"), 0o755);
    assert_eq!(mode("shared"), 0o2775);
    assert_eq!(mode("tmp"), 0o1777);
    assert_eq!(mode("fifo"), 0o644);
}

#[test]
fn devices_skipped() {
    let s = scratch();
    let mut u = Unpacker::new(&s.root, opts()).unwrap();
    let layer = T::new()
        .raw(b"dev/null", b'3', b"", b"", 0o666)
        .raw(b"dev/sda", b'4', b"", b"", 0o660)
        .raw(b"weird", b'Z', b"", b"", 0o644)
        .done();
    let stats = apply(&mut u, &layer).unwrap();
    assert_eq!(stats.skipped_devices, 2);
    assert_eq!(stats.entries, 3);
    u.finish().unwrap();
    assert_eq!(std::fs::read_dir(&s.root).unwrap().count(), 0);
}

#[test]
fn readonly_dir_filled_later() {
    let s = scratch();
    let l1 = T::new().dir("ro", 0o555).file("ro/a", b"a").done();
    let l2 = T::new()
        .file("ro/b", b"b")
        .dir("ro/sub", 0o500)
        .file("ro/sub/c", b"c")
        .done();
    let mut u = Unpacker::new(&s.root, opts()).unwrap();
    apply(&mut u, &l1).unwrap();
    let m = std::fs::metadata(s.root.join("ro")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o700);
    apply(&mut u, &l2).unwrap();
    u.finish().unwrap();
    let m = std::fs::metadata(s.root.join("ro")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o555);
    assert_eq!(m.mtime(), MTIME as i64);
    let m = std::fs::metadata(s.root.join("ro/sub")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o500);
    assert_eq!(std::fs::read(s.root.join("ro/sub/c")).unwrap(), b"c");
    assert_eq!(std::fs::read(s.root.join("ro/a")).unwrap(), b"a");
}

#[test]
fn chown_applies_header_ids() {
    if !nix::unistd::geteuid().is_root() {
        return; // chown to other ids needs root; the rootless path never chowns.
    }
    let s = scratch();
    let mut h = tar::Header::new_gnu();
    h.set_size(1);
    h.set_mode(0o644);
    h.set_uid(1234);
    h.set_gid(5678);
    let mut b = tar::Builder::new(Vec::new());
    b.append_data(&mut h.clone(), "owned", &b"x"[..]).unwrap();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, "owned_link", "owned").unwrap();
    let layer = b.into_inner().unwrap();
    let mut o = opts();
    o.chown = true;
    let mut u = Unpacker::new(&s.root, o).unwrap();
    apply(&mut u, &layer).unwrap();
    u.finish().unwrap();
    let m = std::fs::symlink_metadata(s.root.join("owned")).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 5678));
    let m = std::fs::symlink_metadata(s.root.join("owned_link")).unwrap();
    assert_eq!((m.uid(), m.gid()), (1234, 5678));
}

#[test]
fn size_limit_refused() {
    let s = scratch();
    let mut o = opts();
    o.max_layer_bytes = 10;
    let mut u = Unpacker::new(&s.root, o).unwrap();
    let layer = T::new().file("a", b"123456").file("b", b"123456").done();
    let err = apply(&mut u, &layer).unwrap_err();
    assert!(
        matches!(err, UnpackError::TooLarge { limit: 10, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("\"b\""));
    assert!(!s.root.join("b").exists());
}

#[test]
fn entry_limit_refused() {
    let s = scratch();
    let mut o = opts();
    o.max_entries = 2;
    let mut u = Unpacker::new(&s.root, o).unwrap();
    let layer = T::new().file("a", b"").file("b", b"").file("c", b"").done();
    let err = apply(&mut u, &layer).unwrap_err();
    assert!(
        matches!(err, UnpackError::TooLarge { limit: 2, .. }),
        "{err}"
    );
    assert!(err.to_string().contains("number of entries"));
}

#[test]
fn huge_long_name_refused_before_buffering() {
    let s = scratch();
    let mut u = Unpacker::new(&s.root, opts()).unwrap();
    // A GNU long name record bigger than the metadata budget.
    let big = vec![b'a'; (META_POOL + 4096) as usize];
    let layer = T::new()
        .raw(b"././@LongLink", b'L', &big, b"", 0o644)
        .file("x", b"")
        .done();
    let err = apply(&mut u, &layer).unwrap_err();
    assert!(matches!(err, UnpackError::TooLarge { .. }), "{err}");
}

#[test]
fn truncated_stream_is_an_error() {
    let s = scratch();
    let layer = T::new().file("a", &[7u8; 3000]).file("b", b"b").done();
    let mut u = Unpacker::new(&s.root, opts()).unwrap();
    // Cut inside a's content.
    let err = apply(&mut u, &layer[..512 + 1000]).unwrap_err();
    assert!(
        matches!(
            err,
            UnpackError::Truncated {
                got: 1000,
                size: 3000,
                ..
            }
        ),
        "{err}"
    );
    // Cut inside the next header.
    let mut u = Unpacker::new(&s.root, opts()).unwrap();
    let err = apply(&mut u, &layer[..512 + 3072 + 100]).unwrap_err();
    assert!(matches!(err, UnpackError::Archive { .. }), "{err}");
    // A corrupt checksum.
    let mut bad = layer.clone();
    bad[0] = b'z';
    let err = apply(&mut u, &bad).unwrap_err();
    assert!(matches!(err, UnpackError::Archive { .. }), "{err}");
}

#[test]
fn root_entry_sets_root_attributes() {
    let s = scratch();
    let layer = T::new().dir(".", 0o750).file("f", b"").done();
    unpack_all(&s.root, &[layer]).unwrap();
    let m = std::fs::metadata(&s.root).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o750);
    assert_eq!(m.mtime(), MTIME as i64);
    let mut u = Unpacker::new(&s.root, opts()).unwrap();
    hostile_err(apply(&mut u, &T::new().file(".", b"x").done()), ".");
}

#[test]
fn old_style_entries() {
    let s = scratch();
    let layer = T::new()
        .raw(b"olddir/", b'\0', b"", b"", 0o711)
        .raw(b"olddir/f", b'\0', b"f", b"", 0o644)
        .raw(b"contig", b'7', b"c", b"", 0o644)
        .done();
    unpack_all(&s.root, &[layer]).unwrap();
    let m = std::fs::metadata(s.root.join("olddir")).unwrap();
    assert!(m.is_dir());
    assert_eq!(m.permissions().mode() & 0o7777, 0o711);
    assert_eq!(std::fs::read(s.root.join("olddir/f")).unwrap(), b"f");
    assert_eq!(std::fs::read(s.root.join("contig")).unwrap(), b"c");
}

#[test]
fn whiteout_spares_this_layers_own_entry() {
    let s = scratch();
    let lower = T::new().file("a", b"lower").done();
    let upper = T::new().file("a", b"upper").file(".wh.a", b"").done();
    unpack_all(&s.root, &[lower, upper]).unwrap();
    assert_eq!(std::fs::read(s.root.join("a")).unwrap(), b"upper");
}

#[test]
fn too_deep_tree_removal_refused() {
    let s = scratch();
    let deep = vec!["d"; MAX_REMOVE_DEPTH + 2].join("/");
    let mut u = Unpacker::new(&s.root, opts()).unwrap();
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(0);
    h.set_mode(0o644);
    b.append_data(&mut h, format!("{deep}/f"), &b""[..])
        .unwrap();
    apply(&mut u, &b.into_inner().unwrap()).unwrap();
    let err = apply(&mut u, &T::new().file(".wh.d", b"").done()).unwrap_err();
    assert!(matches!(err, UnpackError::Hostile { .. }), "{err}");
}

#[test]
fn unpacker_and_errors_cross_threads() {
    fn send<T: Send>() {}
    fn send_sync<T: Send + Sync>() {}
    send::<Unpacker>();
    send_sync::<UnpackError>();
}

#[test]
fn normalise_names() {
    assert_eq!(normalise(b"./a//b/./c/").unwrap(), b"a/b/c");
    assert_eq!(normalise(b"/").unwrap(), b"");
    assert_eq!(normalise(b".").unwrap(), b"");
    assert!(normalise(b"a/..").is_err());
    assert!(normalise(b"..a").is_ok());
    assert!(normalise(b"").is_err());
    assert_eq!(
        parse_pax_time(b"12.5").map(|t| (t.tv_sec(), t.tv_nsec())),
        Some((12, 500_000_000))
    );
    assert!(parse_pax_time(b"-1").is_none());
    assert!(parse_pax_time(b"1e9").is_none());
}
