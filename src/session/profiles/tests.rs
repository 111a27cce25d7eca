//! Tests of `profiles`: entries, the file, devices and precedence.

use super::*;
use crate::engine::shared::spec::TmpfsSpec;
use device::check_device;
use serde_json::json;

const MIB: u64 = 1 << 20;

fn tokens(list: &[&str]) -> Vec<Token> {
    check_tokens(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
}

/// kern.toml `text` in a temp dir, resolved for `list` with /tmp as the only scratch.
fn resolve(text: &str, list: &[&str]) -> Result<Chosen> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kern.toml");
    std::fs::write(&path, text).unwrap();
    let tmp = [TmpfsSpec {
        target: "/tmp".into(),
        size_bytes: MIB,
    }];
    let mounts = ["/data".to_string()];
    let taken = Taken {
        tmpfs: &tmp,
        mounts: &mounts,
    };
    load(&path, &tokens(list), &taken)
}

fn err(text: &str, list: &[&str]) -> String {
    resolve(text, list).unwrap_err().to_string()
}

#[test]
fn tokens_follow_the_grammar() {
    let t = parse_token("vcpu:heavy").unwrap();
    assert_eq!((t.kind, t.name.as_str()), (Kind::Vcpu, "heavy"));
    assert_eq!(parse_token("vdisk:A9").unwrap().kind, Kind::Vdisk);
    parse_token(&format!("vgpio:{}", "a".repeat(64))).unwrap();
    for bad in [
        "",
        "heavy",
        "vcpu:",
        "vcpu:--privileged",
        "vcpu:a b",
        "vcpu:a:b",
        "vcpu:../x",
        "vcpu:é",
        "VCPU:x",
        "vnet:x",
        " vcpu:x",
        "vcpu:x\n",
        &format!("vgpio:{}", "a".repeat(65)),
    ] {
        let e = parse_token(bad).unwrap_err().to_string();
        assert!(e.contains("option `profiles`"), "{bad:?}: {e}");
    }
    assert!(parse_token("vnet:x")
        .unwrap_err()
        .to_string()
        .contains("unknown kind"));
}

#[test]
fn token_lists() {
    assert!(check_tokens(&[]).unwrap().is_empty());
    let two = ["vcpu:a".to_string(), "vcpu:b".to_string()];
    assert!(check_tokens(&two)
        .unwrap_err()
        .to_string()
        .contains("two vcpu"));
    let dup = ["vdisk:a".to_string(), "vdisk:a".to_string()];
    assert!(check_tokens(&dup)
        .unwrap_err()
        .to_string()
        .contains("twice"));
}

#[test]
fn a_full_file_resolves() {
    let text = "[[vcpu]]\nname = \"heavy\"\ncpus = 1.5\nmemory = \"2G\"\n\n[[vcpu]]\nname = \"int\"\ncpus = 2\nmemory = 67108864\n\n[[vdisk]]\nname = \"scratch\"\nsize = \"256M\"\n\n[[vdisk]]\nname = \"other\"\nsize = 4096\npath = \"/var/cache/x\"\n";
    let c = resolve(text, &["vcpu:heavy", "vdisk:scratch", "vdisk:other"]).unwrap();
    assert_eq!(
        c.vcpu,
        Some(Vcpu {
            cpus: Some(1.5),
            memory_bytes: Some(2 << 30)
        })
    );
    assert_eq!(
        c.disks,
        vec![
            TmpfsSpec {
                target: "/scratch".into(),
                size_bytes: 256 * MIB
            },
            TmpfsSpec {
                target: "/var/cache/x".into(),
                size_bytes: 4096
            }
        ]
    );
    let c = resolve(text, &["vcpu:int"]).unwrap();
    assert_eq!(
        c.vcpu,
        Some(Vcpu {
            cpus: Some(2.0),
            memory_bytes: Some(64 * MIB)
        })
    );
    // A profile with neither key: no caps of its own.
    let c = resolve("[[vcpu]]\nname = \"bare\"\n", &["vcpu:bare"]).unwrap();
    assert_eq!(c.vcpu, Some(Vcpu::default()));
}

#[test]
fn file_mistakes_name_the_line() {
    let cases: &[(&str, &[&str], &str)] = &[
        (
            "[[vcpu]]\nname = \"a\"\ncpus = \n",
            &["vcpu:a"],
            "kern.toml:3:",
        ),
        (
            "[[vcpu]]\nname = \"a\"\nbogus = 1\n",
            &["vcpu:a"],
            "kern.toml:3:",
        ),
        (
            "[[vcpu]]\nname = \"a\"\nmemory_mb = 2048\n",
            &["vcpu:a"],
            "kern.toml:3: `memory_mb`",
        ),
        (
            "[[vcpu]]\nname = \"a\"\n\n[[vcpu]]\nname = \"a\"\n",
            &["vcpu:a"],
            "kern.toml:5: a second [[vcpu]] named \"a\" (the first is on line 2)",
        ),
        (
            "[[vcpu]]\nname = \"a-b\"\n",
            &["vcpu:x"],
            "kern.toml:2: [[vcpu]] name \"a-b\"",
        ),
        (
            "[[vcpu]]\nname = \"a\"\ncpus = -1\n",
            &["vcpu:a"],
            "kern.toml:3: cpus = -1",
        ),
        (
            "[[vcpu]]\nname = \"a\"\ncpus = \"2\"\n",
            &["vcpu:a"],
            "kern.toml:3:",
        ),
        (
            "[[vcpu]]\nname = \"a\"\nmemory = \"lots\"\n",
            &["vcpu:a"],
            "kern.toml:3: memory = \"lots\"",
        ),
        (
            "[[vcpu]]\nname = \"a\"\nmemory = 0\n",
            &["vcpu:a"],
            "kern.toml:3: memory = 0",
        ),
        (
            "[[vcpu]]\nname = \"a\"\nmemory = 96\n",
            &["vcpu:a"],
            "kern.toml:3: memory = 96 is 96 bytes, below the 32 MiB a box needs",
        ),
        (
            "[[vcpu]]\nname = \"a\"\nmemory = \"1P\"\n",
            &["vcpu:a"],
            "kern.toml:3:",
        ),
        (
            "[[vcpu]]\nname = \"a\"\nmemory = \"100T\"\n",
            &["vcpu:a"],
            "kern.toml:3: memory = \"100T\" is 100 TiB, over the",
        ),
        (
            "[[vcpu]]\nname = \"a\"\ncpus = 1e9\n",
            &["vcpu:a"],
            "kern.toml:3: cpus is 1000000000, over the 8192 cores",
        ),
        (
            "[[vdisk]]\nname = \"d\"\nsize = \"1e30g\"\n",
            &["vdisk:d"],
            "kern.toml:3: size = \"1e30g\" is",
        ),
        (
            "[[vdisk]]\nname = \"d\"\nsize = 1\n",
            &["vdisk:d"],
            "kern.toml:3: size = 1 is 1 bytes, below the 4096 bytes",
        ),
        ("[vnet]\nname = \"a\"\n", &["vcpu:a"], "kern.toml:1:"),
        (
            "[[vgpio]]\nname = \"g\"\ndevices = []\n",
            &["vgpio:g"],
            "kern.toml:3: [[vgpio]] \"g\" lists no devices",
        ),
        (
            "[[vgpio]]\nname = \"g\"\ndevices = [\"dev/x\"]\n",
            &["vgpio:g"],
            "kern.toml:3: device \"dev/x\"",
        ),
        (
            "[[vdisk]]\nname = \"d\"\nsize = \"1M\"\npath = \"scratch\"\n",
            &["vdisk:d"],
            "kern.toml:4: path \"scratch\"",
        ),
        (
            "[[vdisk]]\nname = \"d\"\nsize = \"1M\"\npath = \"/\"\n",
            &["vdisk:d"],
            "kern.toml:4:",
        ),
        (
            "[[vdisk]]\nname = \"d\"\nsize = \"1M\"\npath = \"/proc/x\"\n",
            &["vdisk:d"],
            "kern.toml:4: path \"/proc/x\" is at or under /proc",
        ),
        (
            "[[vdisk]]\nname = \"d\"\nsize = \"1M\"\npath = \"/etc\"\n",
            &["vdisk:d"],
            "under /etc",
        ),
        (
            "[[vdisk]]\nname = \"d\"\nsize = \"1M\"\npath = \"/tmp\"\n",
            &["vdisk:d"],
            "under /tmp",
        ),
        (
            "[[vdisk]]\nname = \"d\"\nsize = \"1M\"\npath = \"/workspace/x\"\n",
            &["vdisk:d"],
            "workspace",
        ),
        (
            "[[vdisk]]\nname = \"d\"\nsize = \"1M\"\npath = \"/a/../b\"\n",
            &["vdisk:d"],
            "normalised",
        ),
        (
            "[[vdisk]]\nname = \"d\"\nsize = \"1M\"\npath = \"/data/x\"\n",
            &["vdisk:d"],
            "kern.toml:4: [[vdisk]] \"d\" at /data/x overlaps the mount at /data",
        ),
        (
            "[[vdisk]]\nname = \"d\"\nsize = \"big\"\n",
            &["vdisk:d"],
            "kern.toml:3: size = \"big\"",
        ),
        ("[[vdisk]]\nname = \"d\"\n", &["vdisk:d"], "kern.toml:"),
    ];
    for (text, list, want) in cases {
        let e = err(text, list);
        assert!(e.contains(want), "{text:?}: {e}");
    }
}

#[test]
fn two_vdisks_at_one_path_clash() {
    let text = "[[vdisk]]\nname = \"a\"\nsize = \"1M\"\n[[vdisk]]\nname = \"b\"\nsize = \"1M\"\npath = \"/scratch/b\"\n";
    let e = err(text, &["vdisk:a", "vdisk:b"]);
    assert!(
        e.contains("kern.toml:7:") && e.contains("overlaps the scratch tmpfs at /scratch"),
        "{e}"
    );
}

#[test]
fn unknown_profiles_and_missing_files() {
    let e = err("[[vcpu]]\nname = \"light\"\n", &["vcpu:heavy"]);
    assert!(
        e.contains("vcpu:heavy is not in") && e.contains("are: light"),
        "{e}"
    );
    let e = err("", &["vdisk:x"]);
    assert!(e.contains("no [[vdisk]] sections"), "{e}");
    let dir = tempfile::tempdir().unwrap();
    let taken = Taken {
        tmpfs: &[],
        mounts: &[],
    };
    let e = load(&dir.path().join("kern.toml"), &tokens(&["vcpu:a"]), &taken)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("does not exist") && e.contains(CONFIG_ENV),
        "{e}"
    );
}

#[test]
fn devices_resolve_to_the_real_node() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("gpiochip9");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    let d = check_device(link.to_str().unwrap()).unwrap();
    assert_eq!(d.source, PathBuf::from("/dev/zero"));
    assert_eq!(d.target, "/dev/gpiochip9");
    assert_eq!(
        (nix::sys::stat::major(d.rdev), nix::sys::stat::minor(d.rdev)),
        (1, 5)
    );

    let file = dir.path().join("plain");
    std::fs::write(&file, "x").unwrap();
    let e = check_device(file.to_str().unwrap()).unwrap_err();
    assert!(e.contains("not a character device"), "{e}");
    let e = check_device(dir.path().join("none").to_str().unwrap()).unwrap_err();
    assert!(e.contains("does not exist"), "{e}");
    // The box's own nodes are not for hire.
    let e = check_device("/dev/null").unwrap_err();
    assert!(e.contains("its own /dev/null"), "{e}");
    if Path::new("/dev/mem").exists() {
        assert!(check_device("/dev/mem")
            .unwrap_err()
            .contains("physical memory"));
    }
}

#[test]
fn device_errors_name_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let link = dir.path().join("gpiochip8");
    std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
    let text = format!(
        "[[vgpio]]\nname = \"g\"\ndevices = [\n  {:?},\n  \"/nonexistent/gpiochip7\",\n]\n",
        link.to_str().unwrap()
    );
    let e = err(&text, &["vgpio:g"]);
    assert!(
        e.contains(
            "kern.toml:5: [[vgpio]] \"g\": device \"/nonexistent/gpiochip7\" does not exist"
        ),
        "{e}"
    );
    // An unchosen profile's devices are not looked at.
    let text = "[[vgpio]]\nname = \"g\"\ndevices = [\"/nonexistent/x\"]\n[[vcpu]]\nname = \"c\"\n";
    resolve(text, &["vcpu:c"]).unwrap();
}

#[test]
fn options_win_over_a_vcpu_profile() {
    let v = Vcpu {
        cpus: Some(1.5),
        memory_bytes: Some(2 << 30),
    };
    let base = Limits {
        memory_bytes: Some(512 * MIB),
        pids: Some(256),
        cpus: None,
        enforce: true,
        require: false,
    };
    // memoryMb absent: the 512 MiB default stands; cpus absent: the profile's.
    let mut l = base.clone();
    with_vcpu(&mut l, &v, None, None);
    assert_eq!((l.memory_bytes, l.cpus), (Some(512 * MIB), Some(1.5)));
    // memoryMb null: the profile's memory; cpus null: the profile's cpus.
    let mut l = Limits {
        memory_bytes: None,
        ..base.clone()
    };
    with_vcpu(&mut l, &v, Some(&Value::Null), Some(&Value::Null));
    assert_eq!((l.memory_bytes, l.cpus), (Some(2 << 30), Some(1.5)));
    // Explicit numbers win.
    let mut l = Limits {
        memory_bytes: Some(100 * MIB),
        cpus: Some(0.5),
        ..base.clone()
    };
    with_vcpu(&mut l, &v, Some(&json!(100)), Some(&json!(0.5)));
    assert_eq!((l.memory_bytes, l.cpus), (Some(100 * MIB), Some(0.5)));
    // memoryMb null and a profile without memory: uncapped.
    let mut l = Limits {
        memory_bytes: None,
        ..base
    };
    with_vcpu(&mut l, &Vcpu::default(), Some(&Value::Null), None);
    assert_eq!((l.memory_bytes, l.cpus), (None, None));
}

#[test]
fn a_session_gets_what_its_profiles_say() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kern.toml");
    std::fs::write(
        &path,
        "[[vcpu]]\nname = \"big\"\ncpus = 2\nmemory = \"1G\"\n[[vdisk]]\nname = \"s\"\nsize = \"8M\"\n",
    )
    .unwrap();
    // The session as options::parse leaves it before `profiles`, then the profiles applied
    // with the same raw options.
    let session = |options: Value| -> Result<Config> {
        let mut o = options.clone();
        let entries = o
            .as_object_mut()
            .and_then(|m| m.remove("profiles"))
            .unwrap_or(json!([]));
        let mut cfg = crate::session::options::parse(&o)?;
        let entries: Vec<String> = serde_json::from_value(entries).unwrap();
        apply_from(&mut cfg, &entries, o.get("memoryMb"), o.get("cpus"), || {
            Ok(path.clone())
        })?;
        Ok(cfg)
    };
    let c =
        session(json!({"image": "host", "memoryMb": null, "profiles": ["vcpu:big", "vdisk:s"]}))
            .unwrap();
    assert_eq!(
        (c.limits.memory_bytes, c.limits.cpus),
        (Some(1 << 30), Some(2.0))
    );
    let scratch = TmpfsSpec {
        target: "/scratch".into(),
        size_bytes: 8 * MIB,
    };
    assert!(c.tmpfs.contains(&scratch), "{:?}", c.tmpfs);
    let c = session(json!({"image": "host", "profiles": ["vcpu:big"], "cpus": 0.25})).unwrap();
    assert_eq!(
        (c.limits.memory_bytes, c.limits.cpus),
        (Some(512 * MIB), Some(0.25))
    );
    // A vdisk on the caller's own tmpfs path clashes.
    let e = session(json!({"image": "host", "tmpfs": {"/scratch": "1m"}, "profiles": ["vdisk:s"]}))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("kern.toml:6:") && e.contains("overlaps the scratch tmpfs at /scratch"),
        "{e}"
    );
    // An empty list never asks where the file is, let alone reads it.
    let mut cfg = crate::session::options::parse(&json!({"image": "host"})).unwrap();
    apply_from(&mut cfg, &[], None, None, || {
        panic!("the file was looked for")
    })
    .unwrap();
    std::fs::write(&path, "not toml [").unwrap();
    let e = session(json!({"image": "host", "profiles": ["vcpu:big"]}))
        .unwrap_err()
        .to_string();
    assert!(e.contains("kern.toml:1:"), "{e}");
}
