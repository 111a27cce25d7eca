//! The state file's tests: names, round trip, stale files, postures.

use super::*;
use crate::engine::shared::handoff::Fallback;
use crate::engine::shared::sys::ProcId;
use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::MetadataExt;
use std::time::Duration;

fn sample(name: &str, pid1: ProcId) -> State {
    State {
        name: name.into(),
        pid1,
        monitor: pid1,
        posture_hash: String::new(),
        posture: BTreeMap::new(),
        workspace: "/w".into(),
        created_unix_ms: 0,
        deadline_unix_ms: 0,
        spec: serde_json::from_value(serde_json::json!({
            "root": {"kind": "host"}, "workspace": "/w", "workspace_target": "/workspace",
            "tmpfs": [], "limits": {"memory_bytes": null, "pids": null, "cpus": null, "enforce": false},
            "timeout_ms": 1, "argv": [], "env": [], "hostname": "kern"
        }))
        .unwrap(),
        rlimits: Fallback::default(),
        cgroup_ns: false,
        ns_fds: Vec::new(),
    }
}

#[test]
fn names_are_strict() {
    for ok in ["a", "A-1", "x.y_z", &"a".repeat(64)] {
        assert!(check_name(ok).is_ok(), "{ok}");
    }
    for bad in [
        "",
        ".a",
        "-a",
        "a/b",
        "..",
        "a b",
        "a\0",
        &"a".repeat(65),
        "é",
    ] {
        assert!(check_name(bad).is_err(), "{bad:?}");
    }
}

#[test]
fn state_round_trip_and_stale_cleanup() {
    let dir = tempfile::tempdir().unwrap();
    let me = ProcId::of(std::process::id() as i32).unwrap();
    write(dir.path(), &sample("live", me)).unwrap();
    let mode = fs::metadata(dir.path().join("live.json")).unwrap().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(
        read(dir.path(), "live").unwrap().unwrap(),
        sample("live", me)
    );
    assert!(find(dir.path(), "live").unwrap().is_some());
    // This very process, with a start time it never had: a recycled pid, not the box.
    let wrong = ProcId {
        pid: me.pid,
        start: me.start + 1,
    };
    write(dir.path(), &sample("stale", wrong)).unwrap();
    assert!(find(dir.path(), "stale").unwrap().is_none());
    assert!(!dir.path().join("stale.json").exists());
    // A corrupt file is stale too.
    fs::write(dir.path().join("junk.json"), b"{").unwrap();
    assert!(find(dir.path(), "junk").unwrap().is_none());
    let names: Vec<String> = list(dir.path()).into_iter().map(|s| s.name).collect();
    assert_eq!(names, vec!["live".to_string()]);
    // Only the monitor named in the file may remove it.
    remove_if_monitor(dir.path(), "live", &wrong);
    assert!(dir.path().join("live.json").exists());
    remove_if_monitor(dir.path(), "live", &me);
    assert!(!dir.path().join("live.json").exists());
    assert!(!stop(dir.path(), "live", None, Duration::from_millis(10)).unwrap());
}

#[test]
fn posture_differences_are_named() {
    let a: BTreeMap<String, String> = [("memoryMb", "512"), ("network", "none")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let mut b = a.clone();
    assert_eq!(posture_hash(&a), posture_hash(&b));
    b.insert("memoryMb".into(), "256".into());
    b.insert("user".into(), "1000".into());
    assert_ne!(posture_hash(&a), posture_hash(&b));
    let d = posture_diff(&a, &b);
    assert_eq!(
        d,
        vec![
            "memoryMb (box: 512, here: 256)".to_string(),
            "user (box: unset, here: 1000)".to_string()
        ]
    );
}
