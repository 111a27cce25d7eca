//! Tests of the options parser.

use super::*;
use crate::config::{check_exec_size, DEFAULT_PERSIST_TTL_S, MAX_ARG_STRLEN, MIB};
use crate::engine::shared::spec::TmpfsSpec;
use crate::image::Source;
use serde_json::json;

fn err(v: Value) -> String {
    parse(&v).unwrap_err().to_string()
}

#[test]
fn defaults_follow_the_spec() {
    let c = parse(&json!({"image": "host"})).unwrap();
    assert_eq!(c.limits.memory_bytes, Some(512 * MIB));
    assert_eq!(c.limits.pids, Some(256));
    assert_eq!(c.limits.cpus, None);
    assert_eq!(c.timeout_ms, 30_000);
    assert_eq!(c.max_output, 64 << 20);
    assert_eq!(
        c.tmpfs,
        vec![TmpfsSpec {
            target: "/tmp".into(),
            size_bytes: 64 * MIB
        }]
    );
    assert!(c.track_files && c.limits.enforce);
}

#[test]
fn null_uncaps_and_absent_keeps_the_default() {
    let c = parse(&json!({"image": "host", "memoryMb": null, "pids": null})).unwrap();
    assert_eq!((c.limits.memory_bytes, c.limits.pids), (None, None));
}

#[test]
fn mistakes_name_the_option() {
    assert!(err(json!({"image": "host", "memoryMB": 1})).contains("Did you mean `memoryMb`"));
    assert!(err(json!({"image": "host", "memoryMb": -1})).contains("memoryMb"));
    assert!(err(json!({"image": "host", "pids": 1.5})).contains("pids"));
    assert!(err(json!({"image": "host", "workspace": "rel/dir"})).contains("relative"));
    assert!(
        err(json!({"image": "host", "network": true, "egressAllow": ["a.com"]}))
            .contains("mutually exclusive")
    );
    assert!(err(json!({"image": "/nonexistent-rootfs"})).contains("No such file"));
    assert!(err(json!({"image": "host", "tmpfs": {"/proc/x": "1m"}})).contains("/proc"));
    assert!(err(json!({"image": "host", "tmpfs": {"/a/../b": "1m"}})).contains("normalised"));
    assert!(err(json!({"image": "host", "tmpfs": {"/x": "lots"}})).contains("size"));
    assert!(err(json!({"image": "host", "securityProfile": "strict"})).contains("untrusted"));
    for bad in ["", "a:b:c", ":0", "0:", "-x", "a b", "root\n"] {
        assert!(
            err(json!({"image": "host", "user": bad})).contains("<user>[:<group>]"),
            "{bad:?}"
        );
    }
    assert_eq!(
        parse(&json!({"image": "host", "user": "node:1000"}))
            .unwrap()
            .user
            .as_deref(),
        Some("node:1000")
    );
    assert!(
        err(json!({"image": "host", "securityProfile": "untrusted", "capDrop": []}))
            .contains("capDrop")
    );
    assert!(
        parse(&json!({"image": "host", "securityProfile": "untrusted"}))
            .unwrap()
            .seccomp
            .is_some()
    );
}

#[test]
fn numbers_are_bounded() {
    let host = |k: &str, v: Value| {
        let mut o = json!({"image": "host"});
        o[k] = v;
        o
    };
    for (k, v, want) in [
        ("memoryMb", json!(1), "below the 32 MiB"),
        ("memoryMb", json!(0.5), "is 512 KiB, below"),
        ("memoryMb", json!(31.9), "below the 32 MiB"),
        ("memoryMb", json!(1e12), "over the 16777216 MiB"),
        ("memoryMb", json!(1e300), "over the 16777216 MiB"),
        ("cpus", json!(1e9), "over the 8192 cores"),
        ("cpus", json!(0.001), "below the 0.01 cores"),
        ("pids", json!(1), "below the 8 tasks"),
        ("pids", json!(1e9), "over the 4194304 tasks"),
        (
            "maxOutputBytes",
            json!(1u64 << 60),
            "over the 268435456 bytes",
        ),
        ("maxOutputBytes", json!(1.5), "positive integer"),
        ("timeoutS", json!(1e-9), "shortest timeout"),
        ("timeoutS", json!(1e9), "longest supported timeout"),
        (
            "workspaceMaxBytes",
            json!(1e300),
            "over the 9007199254740991 bytes",
        ),
        ("tmpfs", json!({"/x": "1e30g"}), "over the 16777216 MiB"),
        ("tmpfs", json!({"/x": "1"}), "below the 4096 bytes"),
        ("user", json!("70000"), "outside the 65536 ids"),
        ("user", json!("0:65536"), "outside the 65536 ids"),
        (
            "user",
            json!("99999999999999999999"),
            "outside the 65536 ids",
        ),
        ("prewarm", json!(65), "at most 64"),
        ("prewarm", json!(0.5), "non-negative integer"),
        ("spareMemoryMb", json!(4097), "at most 4096 MiB"),
        ("spareMemoryMb", json!(-1), "non-negative integer"),
        ("spareMemoryMb", json!("64"), "non-negative integer"),
    ] {
        let e = err(host(k, v.clone()));
        assert!(e.contains(k) && e.contains(want), "{k}={v}: {e}");
    }
    let ws = tempfile::tempdir().unwrap();
    let ttl = err(
        json!({"image": "host", "persist": true, "name": "a", "workspace": ws.path(), "persistTtlS": 1e12}),
    );
    assert!(
        ttl.contains("persistTtlS") && ttl.contains("a year"),
        "{ttl}"
    );
    for (k, v) in [
        ("memoryMb", json!(32)),
        ("memoryMb", json!(16u64 << 20)),
        ("cpus", json!(0.01)),
        ("cpus", json!(8192)),
        ("pids", json!(8)),
        ("timeoutS", json!(0.01)),
        ("maxOutputBytes", json!(256u64 << 20)),
        ("user", json!("65535:65535")),
    ] {
        assert!(parse(&host(k, v.clone())).is_ok(), "{k}={v}");
    }
}

#[test]
fn an_env_the_kernel_cannot_exec_is_refused_early() {
    let big = "x".repeat(MAX_ARG_STRLEN);
    let e = check_early(&json!({"env": {"A": big}}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("option `env`") && e.contains("128 KiB"), "{e}");
    // Many variables each within the string cap, together over the budget.
    let v = "x".repeat(100 << 10);
    let many: Map<String, Value> = (0..70).map(|i| (format!("V{i}"), json!(v))).collect();
    let e = check_early(&json!({ "env": many }))
        .unwrap_err()
        .to_string();
    assert!(e.contains("option `env`") && e.contains("may take"), "{e}");
    assert!(check_early(&json!({"env": {"A": "x".repeat(MAX_ARG_STRLEN - 3)}})).is_ok());
    // The whole exec: argv and env together.
    let arg = "y".repeat(MAX_ARG_STRLEN);
    assert!(check_exec_size(&[arg], &[])
        .unwrap_err()
        .to_string()
        .contains("argument 0"));
    let args: Vec<String> = (0..100).map(|_| "y".repeat(100 << 10)).collect();
    assert!(check_exec_size(&args, &[])
        .unwrap_err()
        .to_string()
        .contains("stack rlimit"));
    assert!(check_exec_size(&["true".into()], &[("A".into(), "b".into())]).is_ok());
}

#[test]
fn resident_options_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let ws = json!(dir.path());
    assert!(err(json!({"image": "host", "persist": true})).contains("`name`"));
    assert!(err(json!({"image": "host", "persist": true, "name": "a"})).contains("`workspace`"));
    assert!(err(json!({"image": "host", "name": "a"})).contains("only used with `persist: true`"));
    assert!(
        err(json!({"image": "host", "persistTtlS": 5})).contains("only used with `persist: true`")
    );
    assert!(
        err(json!({"image": "host", "persist": true, "name": "../x", "workspace": ws}))
            .contains("not a valid sandbox name")
    );
    assert!(err(
        json!({"image": "host", "persist": true, "name": "a", "workspace": ws, "persistTtlS": 0})
    )
    .contains("persistTtlS"));
    assert!(err(
        json!({"image": "host", "persist": true, "name": "a", "workspace": ws, "prewarm": 1})
    )
    .contains("prewarm"));
    assert!(err(json!({"image": "host", "persist": true, "name": "a", "workspace": ws, "egressAllow": ["a.com"]})).contains("egressAllow"));
    let c = parse(&json!({"image": "host", "persist": true, "name": "a", "workspace": ws, "persistTtlS": 2.5})).unwrap();
    let r = c.resident.unwrap();
    assert_eq!((r.name.as_str(), r.ttl_ms), ("a", 2500));
    let c =
        parse(&json!({"image": "host", "persist": true, "name": "a", "workspace": ws})).unwrap();
    assert_eq!(c.resident.unwrap().ttl_ms, DEFAULT_PERSIST_TTL_S * 1000);
    // The default image is the spec's, as a registry reference (pulled at open()).
    let d = parse(&json!({})).unwrap();
    assert!(
        matches!(&d.image, Source::Registry(r) if r.to_string() == "docker.io/library/python:3.12-slim")
    );
}

#[test]
fn workspace_mount_is_checked() {
    let with = |v: Value| json!({"image": "host", "workspaceMount": v});
    assert_eq!(
        parse(&json!({"image": "host"})).unwrap().workspace_target,
        "/workspace"
    );
    let c = parse(&with(json!("/home/user"))).unwrap();
    assert_eq!(c.workspace_target, "/home/user");
    assert!(parse(&with(Value::Null)).is_ok());
    for ok in [
        "/workspace",
        "/w",
        "/home/user/project",
        "/opt/x",
        "/var/lib/app",
        "/root",
    ] {
        assert_eq!(parse(&with(json!(ok))).unwrap().workspace_target, ok);
    }
    for (bad, want) in [
        ("", "not an absolute path"),
        ("home/user", "not an absolute path"),
        ("/", "the box's root"),
        ("/home/user/", "not normalised"),
        ("/home//user", "not normalised"),
        ("/home/./user", "not normalised"),
        ("/home/../etc", "not normalised"),
        ("/proc", "/proc, which the box mounts itself"),
        ("/sys/x", "/sys"),
        ("/dev/shm/w", "/dev"),
        ("/etc/app", "/etc, the image's system files"),
        ("/usr/local/w", "/usr"),
        ("/lib64", "/lib64"),
        ("/.kern-pyc", "kern keeps for itself"),
        ("/tmp", "scratch tmpfs at \"/tmp\""),
        ("/tmp/w", "scratch tmpfs"),
        ("/a\0b", "NUL"),
    ] {
        let e = err(with(json!(bad)));
        assert!(
            e.contains("workspaceMount") && e.contains(want),
            "{bad:?}: {e}"
        );
        assert!(
            e.contains("/home/user") || e.contains("scratch"),
            "says what to do: {e}"
        );
    }
    let long = format!("/{}", "a".repeat(256));
    assert!(err(with(json!(long))).contains("longer than 256 bytes"));
    assert!(err(with(json!(7))).contains("must be an absolute box path"));
    // Refused when the Sandbox is made, not only at open().
    for bad in [json!("rel"), json!("/proc/x"), json!(false)] {
        let e = check_early(&json!({"workspaceMount": bad})).unwrap_err();
        assert!(e.to_string().contains("workspaceMount"), "{e}");
    }
    assert!(check_early(&json!({"workspaceMount": "/home/user"})).is_ok());
    assert_eq!(
        workspace_target(&json!({"workspaceMount": "/home/user"})).unwrap(),
        "/home/user"
    );
    assert_eq!(workspace_target(&json!({})).unwrap(), "/workspace");
}

#[test]
fn workspace_mount_and_scratch_never_nest() {
    let e = |o: Value| err(o);
    // /tmp is free when it is no scratch.
    let c =
        parse(&json!({"image": "host", "workspaceMount": "/tmp/w", "tmpfs": {"/scratch": "1m"}}))
            .unwrap();
    assert_eq!(c.workspace_target, "/tmp/w");
    // A tmpfs over, at or inside the mount.
    for t in ["/home", "/home/user", "/home/user/x"] {
        let msg = e(json!({"image": "host", "workspaceMount": "/home/user", "tmpfs": {t: "1m"}}));
        assert!(
            msg.contains("tmpfs") && msg.contains("/home/user"),
            "{t}: {msg}"
        );
    }
    // The default mount no longer reserved once another is chosen.
    let c = parse(&json!({"image": "host", "workspaceMount": "/home/user", "tmpfs": {"/workspace": "1m", "/tmp": "1m"}}))
        .unwrap();
    assert!(c.tmpfs.iter().any(|t| t.target == "/workspace"));
    assert!(e(json!({"image": "host", "tmpfs": {"/workspace": "1m"}})).contains("/workspace"));
}

#[test]
fn workspace_mount_and_mounts_never_nest() {
    let dir = tempfile::Builder::new()
        .prefix("kern-wsmount-")
        .tempdir_in("/tmp")
        .unwrap();
    let src = std::fs::canonicalize(dir.path()).unwrap();
    let src = src.to_str().unwrap();
    for t in ["/home", "/home/user", "/home/user/data"] {
        for spec in [json!(t), json!([t, "rw"])] {
            let msg = err(
                json!({"image": "host", "workspaceMount": "/home/user", "mounts": {src: spec}}),
            );
            assert!(
                msg.contains("option `workspaceMount`")
                    && msg.contains("clashes")
                    && msg.contains(t),
                "{t}: {msg}"
            );
        }
    }
    // A sibling, and the default mount point, are free once another is chosen.
    for t in ["/home/other", "/workspace"] {
        let c =
            parse(&json!({"image": "host", "workspaceMount": "/home/user", "mounts": {src: t}}))
                .unwrap();
        assert_eq!(c.mounts[0].target, t);
    }
    // Without workspaceMount, the mounts' own rule still holds at /workspace.
    let e = parse(&json!({"image": "host", "mounts": {src: "/workspace/x"}})).unwrap_err();
    assert!(matches!(e, crate::error::Error::MountRefused(_)), "{e}");
}
