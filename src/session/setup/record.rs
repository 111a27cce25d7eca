//! Whether `setup` may be skipped at open(): a kept workspace whose `.deps` still holds what the
//! same setup installed. After a setup that succeeded, the host records its inputs (the command,
//! the image, the setup box's posture, and the content of what the command names in the
//! workspace or a mount, such as `/workspace/requirements.txt`) and a fingerprint of `.deps` as
//! it then is. The record lives under kern's home, out of every box's reach: no box can forge
//! "done" (a package's install script in one setup must not make a later, different setup
//! skip). The next open() of that workspace with the same inputs and an unchanged `.deps` skips
//! setup and says so; anything else runs it, as before.
//!
//! A fingerprint is of metadata (names, types, modes, sizes, times, inode numbers; `ctime` moves
//! on any change, and no box can set it back), so a box that writes `.deps` (with `depsReadonly:
//! false`) makes the next open() run setup again.

use super::super::deps::DEPS_DIR;
use super::super::opened::Opened;
use crate::config::at_or_under;
use crate::fsx::walk::{walk_below, Closed, Visit};
use crate::fsx::{open_beneath, Resolve};
use nix::fcntl::OFlag;
use nix::sys::stat::{fstat, FileStat, SFlag};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io::Read;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};

/// Changed when what a record means changes (a record of another version never matches).
const VERSION: u32 = 1;
/// A named file larger than this is fingerprinted by its metadata, not read.
const READ_MAX: u64 = 64 << 20;

/// The record of one kept workspace's setup.
pub(in crate::session) struct Record {
    /// `<kern home>/setup/<workspace key>.json`.
    file: PathBuf,
    /// The workspace on the host.
    workspace: PathBuf,
    /// The inputs that do not depend on the files (command, image, posture), hashed.
    fixed: String,
    /// What the command names: (the path as named, where its tree is on the host, the path
    /// below that), for each absolute path of the command in the workspace or a mount.
    named: Vec<(String, PathBuf, String)>,
}

#[derive(Serialize, Deserialize, PartialEq, Eq)]
struct Saved {
    version: u32,
    /// Everything but `.deps`, hashed: `fixed` and what the command names.
    inputs: String,
    /// `.deps`' fingerprint.
    deps: String,
    /// When setup succeeded (seconds since the epoch).
    at: u64,
}

impl Record {
    /// The record for this session's setup; None for a temporary workspace (nothing outlives
    /// the session) or when kern has no home.
    pub(in crate::session) fn of(opened: &Opened, cmd: &str) -> Option<Record> {
        let cfg = &opened.config;
        let workspace = cfg.workspace.as_ref().and_then(|w| w.canonicalize().ok())?;
        let file = record_file(&workspace)?;
        let mut h = Parts::default();
        h.part("kern-sandbox", env!("CARGO_PKG_VERSION").as_bytes());
        h.part("command", cmd.as_bytes());
        let image = opened.image.identity().ok()?;
        h.part("image", image.as_deref().unwrap_or("host").as_bytes());
        h.part("user", cfg.user.as_deref().unwrap_or("").as_bytes());
        h.part(
            "setupNetwork",
            format!("{:?}", cfg.setup_network).as_bytes(),
        );
        h.part("network", format!("{:?}", cfg.network).as_bytes());
        h.part("workspaceMount", cfg.workspace_target.as_bytes());
        let mut env = cfg.env.clone();
        env.sort();
        for (k, v) in &env {
            h.part("env", format!("{k}={v}").as_bytes());
        }
        for m in &cfg.mounts {
            let line = format!(
                "{}\0{}\0{}\0{}\0{}",
                m.source.display(),
                m.target,
                m.writable,
                m.dev,
                m.ino
            );
            h.part("mount", line.as_bytes());
        }
        // Each named path under the workspace or a mount, by the deepest of them that holds it
        // (a mount inside the workspace shows its own tree there).
        let trees = std::iter::once((cfg.workspace_target.as_str(), &workspace))
            .chain(cfg.mounts.iter().map(|m| (m.target.as_str(), &m.source)));
        let trees: Vec<(&str, &PathBuf)> = trees.collect();
        let mut named = Vec::new();
        for token in absolute_paths(cmd) {
            let deepest = trees
                .iter()
                .filter(|(target, _)| at_or_under(&token, target))
                .max_by_key(|(target, _)| target.len());
            if let Some((target, root)) = deepest {
                let rel = below(&token, target);
                named.push((token, (*root).clone(), rel));
            }
        }
        Some(Record {
            file,
            workspace,
            fixed: h.finish(),
            named,
        })
    }

    /// When `.deps` still holds what the same setup left there: the time that setup succeeded.
    pub(in crate::session) fn done_at(&self) -> Option<std::time::SystemTime> {
        let text = std::fs::read(&self.file).ok()?;
        let saved: Saved = serde_json::from_slice(&text).ok()?;
        let now = self.current()?;
        (saved.version == VERSION && saved.inputs == now.inputs && saved.deps == now.deps)
            .then(|| std::time::UNIX_EPOCH + std::time::Duration::from_secs(saved.at))
    }

    /// Forgets the record: setup is about to run, and one that fails or is cut short leaves none.
    pub(in crate::session) fn forget(&self) {
        let _ = std::fs::remove_file(&self.file);
    }

    /// Records a setup that has just succeeded.
    pub(in crate::session) fn save(&self) -> std::io::Result<()> {
        let mut saved = self
            .current()
            .ok_or_else(|| std::io::Error::other("its .deps could not be walked whole"))?;
        saved.at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let dir = self.file.parent().unwrap_or(Path::new("/"));
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)?;
        let tmp = tempfile::NamedTempFile::new_in(dir)?;
        std::fs::write(tmp.path(), serde_json::to_vec(&saved)?)?;
        tmp.persist(&self.file).map_err(|e| e.error)?;
        Ok(())
    }

    /// The inputs and `.deps` as they are now; None when a tree could not be walked whole.
    fn current(&self) -> Option<Saved> {
        let mut h = Parts::default();
        h.part("fixed", self.fixed.as_bytes());
        for (token, root, rel) in &self.named {
            h.part("named", token.as_bytes());
            h.part("is", named(root, rel, *root == self.workspace).as_bytes());
        }
        let ws = open_dir(&self.workspace)?;
        let deps = open_beneath(
            &ws,
            DEPS_DIR,
            OFlag::O_RDONLY | OFlag::O_DIRECTORY,
            Resolve::Strict,
        )
        .ok()?;
        Some(Saved {
            version: VERSION,
            inputs: h.finish(),
            deps: tree(deps, false)?,
            at: 0,
        })
    }
}

/// Where records live: one file per workspace, keyed by its path and identity (a new directory
/// at the same path is another workspace).
fn record_file(workspace: &Path) -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(workspace).ok()?;
    let id = format!("{}\0{}\0{}", workspace.display(), m.dev(), m.ino());
    let key = hex::encode(&Sha256::digest(id.as_bytes())[..16]);
    let home = crate::home::root().ok()?;
    Some(home.join("setup").join(format!("{key}.json")))
}

/// Length-prefixed parts hashed together, so no two lists of parts hash alike.
#[derive(Default)]
struct Parts(Sha256);

impl Parts {
    fn part(&mut self, name: &str, value: &[u8]) {
        for p in [name.as_bytes(), value] {
            self.0.update((p.len() as u64).to_le_bytes());
            self.0.update(p);
        }
    }

    fn finish(self) -> String {
        hex::encode(self.0.finalize())
    }
}

/// The absolute paths a shell command names: its words (split at blanks, quotes and shell
/// punctuation, and at `=` for `--requirement=/path`) that start with `/`.
fn absolute_paths(cmd: &str) -> Vec<String> {
    let mut out: Vec<String> = cmd
        .split(|c: char| c.is_whitespace() || "'\"`;&|<>()=,".contains(c))
        .filter(|w| w.starts_with('/'))
        .map(|w| w.trim_end_matches('/').to_string())
        .map(|w| if w.is_empty() { "/".into() } else { w })
        .collect();
    out.sort();
    out.dedup();
    out
}

/// `path` relative to `top`, which it is at or under.
fn below(path: &str, top: &str) -> String {
    path.strip_prefix(top)
        .unwrap_or("")
        .trim_start_matches('/')
        .to_string()
}

fn open_dir(path: &Path) -> Option<OwnedFd> {
    nix::fcntl::open(
        path,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )
    .ok()
}

/// What `rel` below `root` is now: a regular file's content, a directory's tree, or what else
/// it is. Opened beneath `root` with no symlink and no mount crossed, non-blocking (a box may
/// have planted a FIFO or a symlink to a host file there).
fn named(root: &Path, rel: &str, in_workspace: bool) -> String {
    let Some(top) = open_dir(root) else {
        return "no root".into();
    };
    let flags = OFlag::O_RDONLY | OFlag::O_NONBLOCK | OFlag::O_NOCTTY;
    let fd = if rel.is_empty() {
        Ok(top)
    } else {
        open_beneath(&top, rel, flags, Resolve::Strict).map_err(|e| e.errno())
    };
    let fd = match fd {
        Ok(fd) => fd,
        Err(errno) => return format!("unopened: {errno}"),
    };
    let Ok(st) = fstat(&fd) else {
        return "unstated".into();
    };
    match SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits()) {
        SFlag::S_IFREG if (st.st_size as u64) <= READ_MAX => {
            let mut content = Vec::new();
            match std::fs::File::from(fd)
                .take(READ_MAX + 1)
                .read_to_end(&mut content)
            {
                Ok(_) => format!("file {}", hex::encode(Sha256::digest(&content))),
                Err(e) => format!("unread: {e}"),
            }
        }
        // The workspace named whole (`pip install /workspace`): its `.deps` is setup's output.
        SFlag::S_IFDIR => tree(fd, rel.is_empty() && in_workspace)
            .map(|t| format!("dir {t}"))
            .unwrap_or_else(|| "dir unwalked".into()),
        _ => format!("other {}", meta(&st)),
    }
}

/// The fingerprint of the tree under the directory `top`: every entry's path and metadata, in
/// a fixed order. None when it could not be walked whole.
fn tree(top: OwnedFd, skip_deps: bool) -> Option<String> {
    let mut entries: Vec<(Vec<u8>, String)> = Vec::new();
    let whole = walk_below(top, PathBuf::new(), Closed::Fail, |e| {
        let rel = e.rel.as_os_str().as_bytes();
        if skip_deps && rel == DEPS_DIR.as_bytes() {
            return Visit::Skip;
        }
        entries.push((rel.to_vec(), meta(e.stat)));
        Visit::Enter
    })
    .ok()?;
    if !whole {
        return None;
    }
    entries.sort();
    let mut h = Parts::default();
    for (rel, m) in &entries {
        h.part("entry", rel);
        h.part("meta", m.as_bytes());
    }
    Some(h.finish())
}

fn meta(st: &FileStat) -> String {
    format!(
        "{:o} {} {}.{} {}.{} {}",
        st.st_mode,
        st.st_size,
        st.st_mtime,
        st.st_mtime_nsec,
        st.st_ctime,
        st.st_ctime_nsec,
        st.st_ino
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_paths_a_command_names() {
        assert_eq!(
            absolute_paths("pip install -r /workspace/req.txt --constraint=/data/c.txt 'x>=1' && sh \"/workspace/s.sh\";echo >/tmp/log"),
            vec!["/data/c.txt", "/tmp/log", "/workspace/req.txt", "/workspace/s.sh"]
        );
        assert_eq!(
            absolute_paths("pip install /workspace/ pandas"),
            vec!["/workspace"]
        );
        assert!(absolute_paths("pip install pandas").is_empty());
        assert_eq!(below("/workspace/a/b", "/workspace"), "a/b");
        assert_eq!(below("/workspace", "/workspace"), "");
    }

    #[test]
    fn parts_are_length_prefixed() {
        let hash = |parts: &[(&str, &str)]| {
            let mut h = Parts::default();
            for (n, v) in parts {
                h.part(n, v.as_bytes());
            }
            h.finish()
        };
        assert_ne!(
            hash(&[("env", "a=b"), ("env", "c")]),
            hash(&[("env", "a=bc")])
        );
        assert_eq!(hash(&[("env", "a")]), hash(&[("env", "a")]));
    }
}
