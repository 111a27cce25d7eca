//! What goes at the top of the box's root. The root itself is a fresh tmpfs "skeleton" that
//! `kern` fills with read-only binds of the image's top-level entries, so a mount point we need
//! (`/workspace`, `/tmp`) never has to be created inside the caller's image directory, and the
//! image's own symlinks are recreated as symlinks, never followed to a host path.

use crate::engine::shared::spec::{EtcOverride, RootSpec};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// One top-level entry of the box's root.
#[derive(Debug)]
pub enum Entry {
    /// Bind this host path (a directory or a regular file) read-only at `/name`.
    Bind {
        name: String,
        source: PathBuf,
        dir: bool,
    },
    /// Recreate a symlink `/name -> target`.
    Symlink { name: String, target: PathBuf },
    /// Write a small generated file at `/etc/<name>` (only for the host image's reduced /etc).
    EtcFile { name: String, contents: String },
    /// Bind a host file or directory read-only at `/etc/<name>`.
    EtcBind {
        name: String,
        source: PathBuf,
        dir: bool,
    },
    /// Bind the image's own `/etc/<name>` read-only (reached through the image fd, never
    /// followed): `/etc` rebuilt entry by entry because some of it is overridden.
    EtcImage { name: String, dir: bool },
    /// Recreate the image's symlink `/etc/<name> -> target`.
    EtcSymlink { name: String, target: PathBuf },
    /// Hide what is bound at `/<path>` behind an empty read-only tmpfs, then bind back only
    /// `keep` (`Bind`s and `Symlink`s named relative to `path`): the host image's /usr/local
    /// without its configuration.
    Mask { path: String, keep: Vec<Entry> },
}

/// The entries, and the image directory they come from (None for the host image).
#[derive(Debug)]
pub struct RootPlan {
    pub entries: Vec<Entry>,
    pub image: Option<PathBuf>,
}

/// Top-level names the box always provides itself.
const BOX_OWNED: &[&str] = &["proc", "dev", "sys", "tmp"];

/// The host image: the system's programs and libraries, never the host's data. Not /opt: what
/// lives there is the host's own (vendor software, its configuration and data), and nothing a
/// box's PATH reaches.
const HOST_TOP: &[&str] = &["usr", "bin", "sbin", "lib", "lib32", "lib64", "libx32"];

/// Of the host's /usr/local, the program directories only: its `etc` (an npmrc with a token,
/// say), `src` and anything else local stay outside the box.
const HOST_USR_LOCAL: &[&str] = &[
    "bin", "sbin", "lib", "lib32", "lib64", "libx32", "libexec", "include", "share",
];

/// The parts of the host's /etc that programs need to start and to verify TLS. Everything else
/// (shadow files, ssh keys, sudoers, machine credentials) stays outside the box.
const HOST_ETC: &[&str] = &[
    "ld.so.conf",
    "ld.so.conf.d",
    "ld.so.cache",
    "alternatives",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "nsswitch.conf",
    "localtime",
    "timezone",
    "mime.types",
    "os-release",
    "debian_version",
    "bash.bashrc",
    "inputrc",
    "profile",
    "python3",
    "python3.11",
    "python3.12",
    "python3.13",
];

impl RootPlan {
    /// `hostname` goes into the /etc/hosts and /etc/hostname given to an image without them.
    pub fn build(
        root: &RootSpec,
        workspace_target: &str,
        extra_reserved: &[String],
        etc: &[EtcOverride],
        hostname: &str,
    ) -> io::Result<RootPlan> {
        let mut etc = etc.to_vec();
        if let RootSpec::Dir { path } = root {
            etc.extend(missing_identity(path, &etc, hostname));
        }
        let etc = &etc[..];
        // Names the box mounts itself: the image's own entries of these names are not bound.
        let mut reserved: Vec<String> = BOX_OWNED.iter().map(|s| s.to_string()).collect();
        // A top-level workspace replaces the image's entry of its name; a deeper one lands in
        // the image's tree (`mountpoint`), whose other entries stay.
        if workspace_target.trim_matches('/').split('/').count() == 1 {
            reserved.extend(top_component(workspace_target));
        }
        reserved.extend(extra_reserved.iter().cloned());
        let mut plan = match root {
            RootSpec::Dir { path } if !etc.is_empty() => {
                reserved.push("etc".into());
                let mut plan = Self::from_dir(path, &reserved)?;
                plan.entries.extend(image_etc(path, etc)?);
                plan
            }
            RootSpec::Dir { path } => Self::from_dir(path, &reserved)?,
            RootSpec::Host => Self::host(hostname, workspace_target),
        };
        plan.entries.retain(|e| match e {
            Entry::EtcBind { name, .. } | Entry::EtcFile { name, .. } => {
                !etc.iter().any(|o| o.name() == name)
            }
            _ => true,
        });
        for o in etc {
            plan.entries.push(match o {
                EtcOverride::Contents { name, contents } => Entry::EtcFile {
                    name: name.clone(),
                    contents: contents.clone(),
                },
                EtcOverride::HostFile { name, source } => Entry::EtcBind {
                    name: name.clone(),
                    source: source.clone(),
                    dir: false,
                },
            });
        }
        Ok(plan)
    }

    fn from_dir(path: &Path, reserved: &[String]) -> io::Result<RootPlan> {
        let mut entries = Vec::new();
        let mut names: Vec<_> = fs::read_dir(path)?.collect::<Result<_, _>>()?;
        names.sort_by_key(|e| e.file_name());
        for e in names {
            let Some(name) = e.file_name().to_str().map(str::to_string) else {
                continue;
            };
            if reserved.contains(&name) {
                continue;
            }
            let ft = e.file_type()?;
            if ft.is_symlink() {
                entries.push(Entry::Symlink {
                    target: fs::read_link(e.path())?,
                    name,
                });
            } else if ft.is_dir() || ft.is_file() {
                entries.push(Entry::Bind {
                    source: e.path(),
                    dir: ft.is_dir(),
                    name,
                });
            }
        }
        Ok(RootPlan {
            entries,
            image: Some(path.to_path_buf()),
        })
    }

    fn host(hostname: &str, workspace_target: &str) -> RootPlan {
        let mut entries = host_entries(Path::new("/"), HOST_TOP);
        let usr_local = Path::new("/usr/local");
        if entries
            .iter()
            .any(|e| matches!(e, Entry::Bind { name, .. } if name == "usr"))
            && fs::symlink_metadata(usr_local).is_ok_and(|m| m.is_dir())
        {
            entries.push(Entry::Mask {
                path: "usr/local".into(),
                keep: host_entries(usr_local, HOST_USR_LOCAL),
            });
        }
        for name in HOST_ETC {
            let source = Path::new("/etc").join(name);
            if let Ok(m) = fs::metadata(&source) {
                entries.push(Entry::EtcBind {
                    name: name.to_string(),
                    source,
                    dir: m.is_dir(),
                });
            }
        }
        // The box's only accounts: its root (the caller, mapped) and nobody.
        let accounts = [
            ("passwd", format!("root:x:0:0:root:{workspace_target}:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n")),
            ("group", "root:x:0:\nnogroup:x:65534:\n".to_string()),
        ];
        for (name, contents) in accounts.into_iter().chain(identity(hostname)) {
            entries.push(Entry::EtcFile {
                name: name.into(),
                contents,
            });
        }
        RootPlan {
            entries,
            image: None,
        }
    }
}

/// Binds (or symlinks) of the host's `dir/<name>` for those of `names` that are directories.
fn host_entries(dir: &Path, names: &[&str]) -> Vec<Entry> {
    let mut entries = Vec::new();
    for name in names {
        let source = dir.join(name);
        match fs::symlink_metadata(&source) {
            Ok(m) if m.file_type().is_symlink() => {
                if let Ok(target) = fs::read_link(&source) {
                    entries.push(Entry::Symlink {
                        name: name.to_string(),
                        target,
                    });
                }
            }
            Ok(m) if m.is_dir() => entries.push(Entry::Bind {
                name: name.to_string(),
                source,
                dir: true,
            }),
            _ => {}
        }
    }
    entries
}

/// The box's network identity, as container runtimes write it: `localhost` on both loopback
/// addresses, and the box's hostname on 127.0.0.1 (the only address every box has).
fn identity(hostname: &str) -> [(&'static str, String); 2] {
    [
        (
            "hosts",
            format!("127.0.0.1\tlocalhost {hostname}\n::1\tlocalhost ip6-localhost ip6-loopback\n"),
        ),
        ("hostname", format!("{hostname}\n")),
    ]
}

/// Writes /etc/hosts and /etc/hostname into an image root being unpacked into the store, where
/// the image has none (registry images rarely do: runtimes bind their own at run time), so its
/// boxes bind the image's /etc whole instead of rebuilding it entry by entry. Written through
/// descriptors that follow no symlink the layers planted; an `/etc` that is not a real
/// directory is left alone (`missing_identity` then decides at run time).
pub fn write_missing_identity(image: &Path, hostname: &str) -> io::Result<()> {
    use nix::fcntl::{openat, OFlag};
    use nix::sys::stat::Mode;
    let root = nix::fcntl::open(
        image,
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    )?;
    let etc = match openat(
        &root,
        "etc",
        OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(nix::errno::Errno::ENOENT | nix::errno::Errno::ENOTDIR | nix::errno::Errno::ELOOP) => {
            return Ok(())
        }
        Err(e) => return Err(e.into()),
    };
    for (name, contents) in identity(hostname) {
        let made = openat(
            &etc,
            name,
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
            Mode::from_bits_truncate(0o644),
        );
        match made {
            Ok(fd) => std::io::Write::write_all(&mut fs::File::from(fd), contents.as_bytes())?,
            // Present in any form (a symlink included): the image's own.
            Err(nix::errno::Errno::EEXIST) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// /etc/hosts and /etc/hostname for an image that has none (in any form, a dangling symlink
/// included) and no override of them: without a hosts file `localhost` does not resolve. An
/// image whose /etc is not a real directory is left as it is.
fn missing_identity(image: &Path, etc: &[EtcOverride], hostname: &str) -> Vec<EtcOverride> {
    let dir = image.join("etc");
    if fs::symlink_metadata(&dir).is_ok_and(|m| !m.is_dir()) {
        return Vec::new();
    }
    identity(hostname)
        .into_iter()
        .filter(|(name, _)| !etc.iter().any(|o| o.name() == *name))
        .filter(|(name, _)| fs::symlink_metadata(dir.join(name)).is_err())
        .map(|(name, contents)| EtcOverride::Contents {
            name: name.into(),
            contents,
        })
        .collect()
}

/// The image's `/etc` entries other than the overridden ones. An image whose `/etc` is not a
/// real directory contributes nothing (the box gets only the overrides).
fn image_etc(image: &Path, etc: &[EtcOverride]) -> io::Result<Vec<Entry>> {
    let dir = image.join("etc");
    match fs::symlink_metadata(&dir) {
        Ok(m) if m.is_dir() => {}
        _ => return Ok(Vec::new()),
    }
    let mut names: Vec<_> = fs::read_dir(&dir)?.collect::<Result<_, _>>()?;
    names.sort_by_key(|e| e.file_name());
    let mut entries = Vec::new();
    for e in names {
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            continue;
        };
        if etc.iter().any(|o| o.name() == name) {
            continue;
        }
        let ft = e.file_type()?;
        if ft.is_symlink() {
            entries.push(Entry::EtcSymlink {
                target: fs::read_link(e.path())?,
                name,
            });
        } else if ft.is_dir() || ft.is_file() {
            entries.push(Entry::EtcImage {
                dir: ft.is_dir(),
                name,
            });
        }
    }
    Ok(entries)
}

/// `/a/b` -> `a`.
pub fn top_component(path: &str) -> Option<String> {
    path.trim_start_matches('/')
        .split('/')
        .next()
        .filter(|s| !s.is_empty())
        .map(str::to_string)
}
