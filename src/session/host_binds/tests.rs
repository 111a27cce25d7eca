//! Tests of the host-bind policy: what `mounts` may bind, and where.

use super::*;
use serde_json::json;
use std::os::unix::net::UnixListener;

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    home: PathBuf,
    ctx: Context,
}

/// A fake host: `root/home` with a project and credential entries, `root/run-user` as the
/// runtime dir. Under /tmp explicitly: its ancestors are then known not to be denied.
fn fixture() -> Fixture {
    let tmp = tempfile::Builder::new()
        .prefix("kern-mounts-")
        .tempdir_in("/tmp")
        .unwrap();
    let root = std::fs::canonicalize(tmp.path()).unwrap();
    let home = root.join("home");
    for d in ["project", ".ssh", ".config/app", ".aws", "x"] {
        std::fs::create_dir_all(home.join(d)).unwrap();
    }
    std::fs::write(home.join(".ssh/id_rsa"), "key").unwrap();
    std::fs::write(home.join(".netrc"), "machine x password y").unwrap();
    std::fs::create_dir(root.join("run-user")).unwrap();
    let ctx = Context {
        workspace_target: "/workspace".into(),
        homes: vec![home.clone()],
        runtime_dir: Some(root.join("run-user")),
        kern_home: Some(home.join(".cache/kern-sandbox")),
    };
    Fixture {
        _tmp: tmp,
        root,
        home,
        ctx,
    }
}

fn one(src: impl AsRef<Path>, ctx: &Context) -> Result<Vec<Mount>> {
    let src = src.as_ref().to_str().unwrap();
    parse(&json!({ src: "/data" }), ctx)
}

fn refused(r: Result<Vec<Mount>>) -> String {
    match r {
        Err(Error::MountRefused(m)) => m,
        other => panic!("expected MountRefused, got {other:?}"),
    }
}

fn invalid(r: Result<Vec<Mount>>) -> String {
    match r {
        Err(Error::Invalid(m)) => m,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn system_paths_are_refused() {
    let f = fixture();
    for (src, says) in [
        ("/", "is / (the host's root directory)"),
        ("/etc", "/etc"),
        ("/etc/ssl", "inside /etc"),
        ("/proc", "/proc"),
        ("/sys", "/sys"),
        ("/dev", "/dev"),
        ("/boot", "/boot"),
        ("/root", "/root"),
        ("/run", "is /run (runtime"),
        ("/var/run", "is /run (runtime"),
        ("/var", "contains /var/run"),
    ] {
        let m = refused(one(src, &f.ctx));
        assert!(m.contains(says), "{src}: {m}");
    }
}

#[test]
fn homes_and_credentials_are_refused() {
    let f = fixture();
    let h = &f.home;
    std::os::unix::fs::symlink(h.join(".ssh"), h.join("proj")).unwrap();
    let cases = [
        (h.clone(), format!("is {} (a home directory)", h.display())),
        (
            f.root.clone(),
            format!("contains {} (a home directory)", h.display()),
        ),
        (h.join(".ssh"), ".ssh".into()),
        (h.join(".ssh/id_rsa"), ".ssh".into()),
        (h.join(".config"), ".config (credentials)".into()),
        (h.join(".config/app"), "is inside".into()),
        (h.join(".aws"), ".aws".into()),
        (h.join(".netrc"), ".netrc".into()),
        (h.join("proj"), ".ssh".into()),
        (h.join("x/../.ssh"), ".ssh".into()),
        (f.root.join("run-user"), "runtime directory".into()),
    ];
    for (src, says) in cases {
        let m = refused(one(&src, &f.ctx));
        assert!(m.contains(&says), "{}: {m}", src.display());
    }
    // Refused for `.ssh` anywhere: another user's home is not in the context.
    let other = f.root.join("other/.ssh/keys");
    std::fs::create_dir_all(&other).unwrap();
    assert!(refused(one(&other, &f.ctx)).contains(".ssh"));
}

#[test]
fn a_hardlink_of_a_credential_file_is_refused_by_identity() {
    let f = fixture();
    let elsewhere = f.root.join("elsewhere");
    std::fs::create_dir(&elsewhere).unwrap();
    std::fs::hard_link(f.home.join(".netrc"), elsewhere.join("creds")).unwrap();
    let m = refused(one(elsewhere.join("creds"), &f.ctx));
    assert!(
        m.contains("device and inode") && m.contains(".netrc"),
        "{m}"
    );
}

#[test]
fn kerns_own_store_is_refused_read_write_only() {
    let f = fixture();
    let store = f.home.join(".cache/kern-sandbox");
    std::fs::create_dir_all(store.join("packages/pypi")).unwrap();
    for src in [
        store.clone(),
        store.join("packages/pypi"),
        f.home.join(".cache"),
    ] {
        let s = src.to_str().unwrap();
        let m = refused(parse(&json!({ s: ["/data", "rw"] }), &f.ctx));
        assert!(m.contains("kern's own store"), "{}: {m}", src.display());
        assert!(one(&src, &f.ctx).is_ok(), "{} read-only", src.display());
    }
}

#[test]
fn directories_holding_engine_sockets_are_refused() {
    let f = fixture();
    let a = f.root.join("a");
    std::fs::create_dir(&a).unwrap();
    let _docker = UnixListener::bind(a.join("docker.sock")).unwrap();
    let m = refused(one(&a, &f.ctx));
    assert!(m.contains("docker.sock"), "{m}");

    let b = f.root.join("b");
    std::fs::create_dir_all(b.join("l1/l2")).unwrap();
    let _bus = UnixListener::bind(b.join("l1/l2/bus")).unwrap();
    let m = refused(one(&b, &f.ctx));
    assert!(m.contains("l1/l2/bus"), "{m}");

    // Deeper than the scan looks, or another name: not refused.
    let c = f.root.join("c");
    std::fs::create_dir_all(c.join("l1/l2/l3")).unwrap();
    let _deep = UnixListener::bind(c.join("l1/l2/l3/docker.sock")).unwrap();
    let _app = UnixListener::bind(c.join("app.socket")).unwrap();
    assert_eq!(one(&c, &f.ctx).unwrap().len(), 1);
}

#[test]
fn bad_sources_are_refused() {
    let f = fixture();
    assert!(refused(one("project", &f.ctx)).contains("is relative; pass an absolute path"));
    assert!(refused(one(f.root.join("missing"), &f.ctx)).contains("does not exist"));
    let fifo = f.root.join("fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    assert!(refused(one(&fifo, &f.ctx)).contains("is a fifo"));
    let sock = f.root.join("lone.socket");
    let _l = UnixListener::bind(&sock).unwrap();
    assert!(refused(one(&sock, &f.ctx)).contains("is a socket"));
}

#[test]
fn allowed_sources() {
    let f = fixture();
    let got = one(f.home.join("project"), &f.ctx).unwrap();
    let st = std::fs::metadata(f.home.join("project")).unwrap();
    use std::os::unix::fs::MetadataExt;
    assert_eq!(
        got,
        vec![Mount {
            source: f.home.join("project"),
            target: "/data".into(),
            writable: false,
            dir: true,
            dev: st.dev(),
            ino: st.ino(),
        }]
    );

    let file = f.home.join("project/notes.txt");
    std::fs::write(&file, "hi").unwrap();
    let got = one(&file, &f.ctx).unwrap();
    assert!(!got[0].dir);

    let tmp = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    let got = one(tmp.path(), &f.ctx).unwrap();
    assert_eq!(got[0].source, std::fs::canonicalize(tmp.path()).unwrap());
}

#[test]
fn targets() {
    let f = fixture();
    let src = f.home.join("project");
    let s = src.to_str().unwrap();
    for t in [
        "data",
        "/a/../b",
        "/a/./b",
        "//a",
        "/data/",
        "/",
        "/proc/x",
        "/proc",
        "/sys/fs",
        "/dev",
        "/workspace",
        "/workspace/sub",
        "/a\0b",
    ] {
        let m = refused(parse(&json!({ s: t }), &f.ctx));
        assert!(m.contains("target"), "{t:?}: {m}");
    }
    let long = format!("/{}", "a".repeat(MAX_TARGET_BYTES));
    assert!(refused(parse(&json!({ s: long }), &f.ctx)).contains("longer than"));
    assert!(refused(parse(&json!({ s: "/a/../b" }), &f.ctx)).contains("relative or escapes"));
    assert!(refused(parse(&json!({ s: "/workspace/sub" }), &f.ctx)).contains("workspace"));
    for t in ["/data", "/opt/x", "/workspaces"] {
        assert_eq!(parse(&json!({ s: t }), &f.ctx).unwrap()[0].target, t);
    }
}

#[test]
fn duplicate_targets_are_invalid() {
    let f = fixture();
    let other = f.home.join("other");
    std::fs::create_dir(&other).unwrap();
    let v = json!({
        f.home.join("project").to_str().unwrap(): "/data",
        other.to_str().unwrap(): ["/data", "rw"],
    });
    assert!(invalid(parse(&v, &f.ctx)).contains("both target"));
}

#[test]
fn modes_and_shapes() {
    let f = fixture();
    let s = f.home.join("project");
    let s = s.to_str().unwrap();
    assert!(parse(&json!({ s: ["/d", "rw"] }), &f.ctx).unwrap()[0].writable);
    assert!(!parse(&json!({ s: ["/d", "ro"] }), &f.ctx).unwrap()[0].writable);
    assert!(!parse(&json!({ s: "/d" }), &f.ctx).unwrap()[0].writable);
    assert!(invalid(parse(&json!({ s: ["/d", "rx"] }), &f.ctx)).contains("\"rw\""));
    for bad in [
        json!({ s: 1 }),
        json!({ s: null }),
        json!({ s: ["/d"] }),
        json!({ s: ["/d", "ro", "x"] }),
        json!({ s: [1, "ro"] }),
        json!({ s: {"target": "/d"} }),
    ] {
        assert!(invalid(parse(&bad, &f.ctx)).contains("[\"/data\""), "{bad}");
    }
    assert!(invalid(parse(&json!(["/a", "/b"]), &f.ctx)).contains("must be an object"));
    assert_eq!(parse(&json!({}), &f.ctx).unwrap(), vec![]);
}

#[test]
fn host_context_lists_the_users_home() {
    let ctx = Context::from_host("/workspace");
    if let Ok(Some(u)) = User::from_uid(geteuid()) {
        if u.dir.is_absolute() {
            assert!(ctx.homes.contains(&u.dir), "{:?}", ctx.homes);
        }
    }
    assert!(ctx.homes.iter().all(|h| h.is_absolute()));
    assert_eq!(ctx.workspace_target, "/workspace");
}

#[test]
fn a_target_the_image_lacks_is_made_and_its_symlinks_refused() {
    let f = fixture();
    let image = f.root.join("image");
    std::fs::create_dir_all(image.join("home/other")).unwrap();
    std::fs::write(image.join("home/file"), "x").unwrap();
    std::os::unix::fs::symlink("/etc", image.join("home/link")).unwrap();
    // Missing below an existing directory, or missing from the top: made in the box.
    for t in ["/home/user", "/home/user/deep", "/nothere/x", "/home/other"] {
        assert!(target_in_image(&image, t, true).is_ok(), "{t}");
    }
    let why = target_in_image(&image, "/home/link/x", true).unwrap_err();
    assert!(why.contains("/home/link is a symlink"), "{why}");
    let why = target_in_image(&image, "/home/file/x", true).unwrap_err();
    assert!(why.contains("/home/file is not a directory"), "{why}");
    let why = target_in_image(&image, "/home/other", false).unwrap_err();
    assert!(why.contains("not a regular file"), "{why}");
    let e = check_target_in_image(&image, "/home/link/x", true).unwrap_err();
    assert!(matches!(e, Error::MountRefused(_)) && e.to_string().contains("symlink"));
}

#[test]
fn a_mask_of_a_huge_directory_is_refused() {
    let f = fixture();
    let image = f.root.join("image");
    let big = image.join("big");
    std::fs::create_dir_all(&big).unwrap();
    let max = crate::engine::boxside::mountpoint::MAX_MASKED_ENTRIES;
    for i in 0..max {
        std::fs::write(big.join(format!("f{i}")), "").unwrap();
    }
    assert!(target_in_image(&image, "/big/new", true).is_ok());
    std::fs::write(big.join("one-more"), "").unwrap();
    let why = target_in_image(&image, "/big/new", true).unwrap_err();
    assert!(why.contains("/big has more than 1024 entries"), "{why}");
    // An existing target needs no mask.
    assert!(target_in_image(&image, "/big/one-more", false).is_ok());
}

fn rw(src: impl AsRef<Path>, ctx: &Context) -> Result<Vec<Mount>> {
    let src = src.as_ref().to_str().unwrap();
    parse(&json!({ src: ["/data", "rw"] }), ctx)
}

fn ws_refused(p: impl AsRef<Path>, ctx: &Context) -> String {
    match check_workspace_in(p.as_ref(), ctx) {
        Err(Error::MountRefused(m)) => m,
        other => panic!(
            "{}: expected MountRefused, got {other:?}",
            p.as_ref().display()
        ),
    }
}

#[test]
fn system_trees_may_be_mounted_read_only_but_never_written() {
    let f = fixture();
    for (src, says) in [
        ("/usr", "is /usr (the host's installed software)"),
        ("/usr/bin", "is inside /usr"),
        ("/usr/share/doc", "is inside /usr"),
        ("/var/lib", "is /var/lib"),
        ("/var/spool", "is /var/spool"),
    ] {
        if !Path::new(src).exists() {
            continue;
        }
        assert_eq!(
            one(src, &f.ctx).unwrap()[0].source,
            std::fs::canonicalize(src).unwrap()
        );
        let m = refused(rw(src, &f.ctx));
        assert!(m.contains(says) && m.contains("read-only"), "{src}: {m}");
    }
    // Merged /usr: /bin is a symlink to usr/bin, refused in either spelling.
    let m = refused(rw("/bin", &f.ctx));
    assert!(m.contains("/usr") || m.contains("is /bin"), "{m}");
}

#[test]
fn a_shared_temporary_directory_is_refused_whole_but_not_what_is_inside() {
    let f = fixture();
    for src in ["/tmp", "/var/tmp"] {
        let m = refused(one(src, &f.ctx));
        assert!(m.contains("shared by every user"), "{src}: {m}");
    }
    let inside = tempfile::Builder::new().tempdir_in("/tmp").unwrap();
    assert!(one(inside.path(), &f.ctx).is_ok());
    assert!(rw(inside.path(), &f.ctx).is_ok());
}

#[test]
fn a_workspace_meets_the_writable_policy_before_anything_is_made() {
    let f = fixture();
    let link = f.root.join("to-usr");
    std::os::unix::fs::symlink("/usr", &link).unwrap();
    let docker = f.root.join("engine");
    std::fs::create_dir(&docker).unwrap();
    let _sock = UnixListener::bind(docker.join("docker.sock")).unwrap();
    for (p, says) in [
        (PathBuf::from("/"), "is / (the host's root directory)"),
        (PathBuf::from("/usr"), "is /usr"),
        (PathBuf::from("/usr/lib/kern-new"), "is inside /usr"),
        (PathBuf::from("/etc"), "is /etc"),
        (PathBuf::from("/etc/kern-new/deeper"), "is inside /etc"),
        (PathBuf::from("/dev/shm"), "is inside /dev"),
        (f.root.clone(), "contains"),
        (PathBuf::from("/tmp"), "shared by every user"),
        (PathBuf::from("/var/lib/kern-new"), "is inside /var/lib"),
        (f.home.clone(), "a home directory"),
        (f.home.join(".ssh/kern-new"), "credentials"),
        (f.home.join(".config"), "credentials"),
        (f.root.join("run-user/kern-new"), "XDG_RUNTIME_DIR"),
        // Not yet there, below a symlink to /usr: where it would be made.
        (link.join("kern-new"), "which resolves to /usr/kern-new"),
        (docker.clone(), "docker.sock"),
    ] {
        let m = ws_refused(&p, &f.ctx);
        assert!(
            m.starts_with(&format!("option `workspace` {:?}", p.to_string_lossy())),
            "{m}"
        );
        assert!(m.contains(says), "{}: {m}", p.display());
        assert!(
            m.contains("leave `workspace` out") || m.contains("docker.sock"),
            "{m}"
        );
    }
    // Nothing was made where a refused workspace would have been.
    for p in [
        "/usr/lib/kern-new",
        "/etc/kern-new",
        "/var/lib/kern-new",
        "/usr/kern-new",
    ] {
        assert!(!Path::new(p).exists(), "{p}");
    }
    assert!(!f.home.join(".ssh/kern-new").exists());
    // A project, and one still to be made, are fine; a symlink is look_at's to refuse.
    check_workspace_in(&f.home.join("project"), &f.ctx).unwrap();
    check_workspace_in(&f.home.join("project/new/deeper"), &f.ctx).unwrap();
    check_workspace_in(&f.home.join("x"), &f.ctx).unwrap();
    match check_workspace_in(&link, &f.ctx) {
        Err(Error::Invalid(m)) => assert!(m.contains("is a symlink"), "{m}"),
        other => panic!("{other:?}"),
    }
}
