//! Checkpoints on disk (`kernel.checkpoint(dir)`, `sb.checkpoint(dir)`; `sb.restoreKernel`,
//! `Sandbox.fromCheckpoint`): a directory of the host's holding
//!
//! - `workspace/`: the Sandbox's workspace as it was (`.deps` left out: each Sandbox's `setup`
//!   makes its own), copied as `fork()` copies it;
//! - `state.bin`: a kernel's saved state (`KernelState`'s data), for a kernel's checkpoint;
//! - `checkpoint.json`: what it is (`Manifest`): the image, the kernel's options, the state's
//!   and the workspace's SHA-256;
//! - `checkpoint.mac`: HMAC-SHA256 of `checkpoint.json`'s bytes under the host's key
//!   (`$KERN_HOME/checkpoint.key`, made on first use, 0600), which no box can read.
//!
//! So a checkpoint changed, truncated or made by anything without the key is refused before any
//! of it is used: the manifest's MAC first, then the state's hash (read once, into memory), then
//! the workspace's digest, taken of the copy made from it (which no box can reach until the
//! restore returns), not of the directory it was read from.

use super::kernel::OpenKernel;
use super::opened::Opened;
use super::writers::Exclusive;
use crate::error::{Error, Result};
use crate::lang::state::KernelState;
use crate::workspace::{copy, digest};
use hmac::{Hmac, KeyInit, Mac};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::fs;
use std::io::{Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

const FORMAT: &str = "kern-sandbox checkpoint 1";
const MANIFEST: &str = "checkpoint.json";
const MAC: &str = "checkpoint.mac";
const STATE: &str = "state.bin";
const WORKSPACE: &str = "workspace";
/// Left out of a checkpoint's workspace, as of a fork's: the restored Sandbox's `setup` makes it.
const SKIP: &[&str] = &[".deps"];

/// What a checkpoint is: `checkpoint.json`.
#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Manifest {
    pub format: String,
    /// Random: a Sandbox made from this checkpoint knows its workspace came from it.
    pub id: String,
    pub kern_sandbox: String,
    /// Milliseconds since the epoch.
    pub created_ms: u64,
    /// The `image` option of the Sandbox it was taken in (None: the default), and the store's
    /// digest of that image (None for the host's root or a directory).
    pub image: Option<String>,
    pub image_digest: Option<String>,
    /// The kernel's options (a kernel's checkpoint), as the JS layer gave them.
    pub kernel: Option<serde_json::Value>,
    pub state: Option<StateInfo>,
    pub workspace: TreeInfo,
    /// Names of the kernel's namespace that were not carried, with why.
    pub left: Vec<(String, String)>,
}

#[derive(Serialize, Deserialize, Debug, Clone)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct StateInfo {
    pub head: serde_json::Map<String, serde_json::Value>,
    pub bytes: u64,
    pub sha256: String,
}

#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TreeInfo {
    pub entries: u64,
    pub bytes: u64,
    pub sha256: String,
}

impl From<digest::TreeDigest> for TreeInfo {
    fn from(d: digest::TreeDigest) -> TreeInfo {
        TreeInfo {
            entries: d.entries,
            bytes: d.bytes,
            sha256: d.sha256,
        }
    }
}

/// A checkpoint read and checked (`read`): its manifest and, for a kernel's, its state.
pub struct Checkpoint {
    pub manifest: Manifest,
    pub state: Option<std::sync::Arc<KernelState>>,
    dir: PathBuf,
}

/// What a checkpoint says of where it was taken: the Sandbox's `image` option (None: the
/// default), and a kernel's options (as the JS layer gives them).
#[derive(Deserialize, Debug, Default)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Meta {
    #[serde(skip)]
    pub image: Option<String>,
    pub kernel: Option<serde_json::Value>,
}

fn bad(dir: &Path, why: impl std::fmt::Display) -> Error {
    Error::Invalid(format!(
        "{} is not a checkpoint kern can restore: {why}; it was changed, cut short or not made by this host's kern (nothing was restored)",
        dir.display()
    ))
}

/// Writes a checkpoint into `dir` (which must not exist, or be an empty directory): the
/// workspace of `opened`, held still (but `frozen`, a kernel of it held still, may stay open), and
/// `state`, a kernel's. `dir` may not lie inside the workspace, where the Sandbox's boxes could
/// change it.
pub(super) fn write(
    opened: &Opened,
    dir: &Path,
    state: Option<&KernelState>,
    frozen: Option<&OpenKernel>,
    meta: Meta,
) -> Result<Manifest> {
    let ws = opened.workspace_path()?;
    let made = make_dir(dir, &ws)?;
    let result = (|| {
        let frozen = match frozen {
            None => 0,
            Some(k) if k.still_in(&opened.writers) => 1,
            Some(_) => {
                return Err(Error::Runtime(
                    "the kernel being checkpointed is not a kernel of this Sandbox held still (paused, or between cells)".into(),
                ))
            }
        };
        let to = dir.join(WORKSPACE);
        fs::DirBuilder::new()
            .mode(0o700)
            .create(&to)
            .map_err(|e| Error::Runtime(format!("checkpoint: make {}: {e}", to.display())))?;
        {
            let _still = Exclusive::take_beside(&opened.writers, "checkpoint()", frozen)?;
            copy::copy_tree(&ws, &to, SKIP, None)?;
        }
        let workspace = digest::tree_digest(&to, &[])?.into();
        let state_info = match state {
            Some(s) => {
                write_new(&dir.join(STATE), &s.data)?;
                Some(StateInfo {
                    head: s.head.clone(),
                    bytes: s.data.len() as u64,
                    sha256: hex::encode(Sha256::digest(&s.data)),
                })
            }
            None => None,
        };
        let manifest = Manifest {
            format: FORMAT.into(),
            id: random_hex(16)?,
            kern_sandbox: env!("CARGO_PKG_VERSION").into(),
            created_ms: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_millis() as u64)
                .unwrap_or(0),
            image: meta.image,
            image_digest: opened.image.digest.as_ref().map(|d| d.to_string()),
            kernel: meta.kernel,
            left: state.map(KernelState::left).unwrap_or_default(),
            state: state_info,
            workspace,
        };
        let bytes = serde_json::to_vec_pretty(&manifest)
            .map_err(|e| Error::Runtime(format!("checkpoint: {e}")))?;
        let mac = seal(&bytes)?;
        write_new(&dir.join(MANIFEST), &bytes)?;
        write_new(&dir.join(MAC), mac.as_bytes())?;
        Ok(manifest)
    })();
    if result.is_err() && made {
        let _ = fs::remove_dir_all(dir);
    }
    result
}

/// Reads the checkpoint in `dir` and checks its manifest and state (its workspace is checked
/// as it is restored: `restore_workspace`).
pub fn read(dir: &Path) -> Result<Checkpoint> {
    let bytes = read_capped(
        &dir.join(MANIFEST),
        2 * crate::lang::driver::MAX_FRAME as u64,
    )
    .map_err(|e| bad(dir, e))?;
    let mac = read_capped(&dir.join(MAC), 1024).map_err(|e| bad(dir, e))?;
    let mac = String::from_utf8(mac).map_err(|_| bad(dir, "its MAC is not text"))?;
    let sig = hex::decode(mac.trim()).map_err(|_| bad(dir, "its MAC is not hex"))?;
    mac_of(&bytes)?.verify_slice(&sig).map_err(|_| {
        bad(
            dir,
            "its MAC does not match (this host's key did not seal it)",
        )
    })?;
    let manifest: Manifest =
        serde_json::from_slice(&bytes).map_err(|e| bad(dir, format!("its manifest: {e}")))?;
    if manifest.format != FORMAT {
        return Err(bad(
            dir,
            format!("format {:?}, not {FORMAT:?}", manifest.format),
        ));
    }
    let state = match &manifest.state {
        None => None,
        Some(info) => {
            if info.bytes > crate::lang::state::MAX_STATE {
                return Err(bad(dir, "its state is over the size kern takes"));
            }
            let data = read_capped(&dir.join(STATE), info.bytes).map_err(|e| bad(dir, e))?;
            if data.len() as u64 != info.bytes || hex::encode(Sha256::digest(&data)) != info.sha256
            {
                return Err(bad(dir, "its state.bin does not match its manifest"));
            }
            let state = KernelState::of(info.head.clone(), data)
                .ok_or_else(|| bad(dir, "its state's parts do not add up"))?;
            Some(std::sync::Arc::new(state))
        }
    };
    Ok(Checkpoint {
        manifest,
        state,
        dir: dir.to_path_buf(),
    })
}

/// Copies a checkpoint's workspace into `opened`'s, which must be empty (but `.deps`), then
/// checks the copy against the manifest; a copy that does not match is removed again.
/// `image`: this Sandbox's `image` option. The image must be the checkpoint's: the same digest
/// for an image of the store, else the same `image` option (the host's root, a directory).
pub(super) fn restore_workspace(
    opened: &Opened,
    image: Option<&str>,
    ckpt: &Checkpoint,
) -> Result<copy::CopyReport> {
    let m = &ckpt.manifest;
    let here = opened.image.digest.as_ref().map(|d| d.to_string());
    let same = match &m.image_digest {
        Some(_) => m.image_digest == here,
        None => here.is_none() && m.image.as_deref() == image,
    };
    if !same {
        return crate::invalid!(
            "the checkpoint in {} was taken in image {} ({}), and this Sandbox runs {} ({}): open the Sandbox with the checkpoint's image (Sandbox.fromCheckpoint(dir) does)",
            ckpt.dir.display(),
            m.image.as_deref().unwrap_or("(the default)"),
            m.image_digest.as_deref().unwrap_or("no digest"),
            image.unwrap_or("(the default)"),
            here.as_deref().unwrap_or("no digest"),
        );
    }
    let ws = opened.workspace_path()?;
    // Looked at before and after the workspace is held still: the first for the clearer error.
    must_be_empty(&ws)?;
    let _still = Exclusive::take(&opened.writers, "restoring a checkpoint")?;
    must_be_empty(&ws)?;
    let owner = crate::workspace::files::host_write_owner(&ws)?;
    // A `.deps` in the checkpoint (none is written there) is never copied over the Sandbox's own;
    // whatever fails, nothing of a copy that did not check out stays.
    let copied = copy::copy_tree(&ckpt.dir.join(WORKSPACE), &ws, SKIP, owner).and_then(|report| {
        let got: TreeInfo = digest::tree_digest(&ws, SKIP)?.into();
        if got != m.workspace {
            return Err(bad(&ckpt.dir, "its workspace does not match its manifest"));
        }
        Ok(report)
    });
    if copied.is_err() {
        wipe(&ws);
    }
    copied
}

fn must_be_empty(ws: &Path) -> Result<()> {
    let present: Vec<String> = fs::read_dir(ws)
        .map_err(|e| Error::Runtime(format!("read the workspace {}: {e}", ws.display())))?
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !SKIP.contains(&n.as_str()))
        .collect();
    if present.is_empty() {
        return Ok(());
    }
    crate::invalid!(
        "a checkpoint's workspace is restored into an empty workspace, and this one holds {} entr{} ({}); use Sandbox.fromCheckpoint(dir), or a Sandbox whose workspace is empty",
        present.len(),
        if present.len() == 1 { "y" } else { "ies" },
        present.iter().take(3).cloned().collect::<Vec<_>>().join(", ")
    )
}

/// Empties a workspace a failed restore wrote into (but `.deps`).
fn wipe(ws: &Path) {
    if let Ok(entries) = fs::read_dir(ws) {
        for e in entries.flatten() {
            if SKIP.contains(&e.file_name().to_string_lossy().as_ref()) {
                continue;
            }
            let p = e.path();
            let _ = match e.file_type() {
                Ok(t) if t.is_dir() => fs::remove_dir_all(&p),
                _ => fs::remove_file(&p),
            };
        }
    }
}

/// Makes `dir` (0700), or takes it if it is an empty directory; true if made here. Refused
/// inside the workspace `ws`.
fn make_dir(dir: &Path, ws: &Path) -> Result<bool> {
    if !dir.is_absolute() {
        return crate::invalid!(
            "checkpoint(dir) takes an absolute path, got {}",
            dir.display()
        );
    }
    let parent = dir.parent().unwrap_or(dir);
    let real_parent = fs::canonicalize(parent).map_err(|e| {
        Error::Invalid(format!(
            "checkpoint(dir): {} can't be reached ({e}); make it first",
            parent.display()
        ))
    })?;
    let real_ws = fs::canonicalize(ws).unwrap_or_else(|_| ws.to_path_buf());
    if real_parent.starts_with(&real_ws) {
        return crate::invalid!(
            "checkpoint(dir): {} is inside the Sandbox's workspace, where its boxes could change it; put checkpoints in a directory of the host's",
            dir.display()
        );
    }
    match fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let empty = fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
                && fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none());
            if empty {
                Ok(false)
            } else {
                crate::invalid!(
                    "checkpoint(dir): {} already exists and is not an empty directory; give a new path (nothing is overwritten)",
                    dir.display()
                )
            }
        }
        Err(e) => crate::invalid!("checkpoint(dir): make {}: {e}", dir.display()),
    }
}

fn write_new(path: &Path, data: &[u8]) -> Result<()> {
    fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .and_then(|mut f| f.write_all(data).and_then(|()| f.sync_data()))
        .map_err(|e| Error::Runtime(format!("checkpoint: write {}: {e}", path.display())))
}

/// A regular file's bytes (never through a symlink), at most `cap` of them.
fn read_capped(path: &Path, cap: u64) -> std::result::Result<Vec<u8>, String> {
    let f = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    let m = f.metadata().map_err(|e| e.to_string())?;
    if !m.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    if m.len() > cap {
        return Err(format!("{} is larger than it may be", path.display()));
    }
    let mut out = Vec::with_capacity(m.len() as usize);
    f.take(cap + 1)
        .read_to_end(&mut out)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(out)
}

fn random_bytes(n: usize) -> Result<Vec<u8>> {
    let mut b = vec![0u8; n];
    fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut b))
        .map_err(|e| Error::Runtime(format!("reading /dev/urandom: {e}")))?;
    Ok(b)
}

fn random_hex(n: usize) -> Result<String> {
    Ok(hex::encode(random_bytes(n)?))
}

fn mac_of(bytes: &[u8]) -> Result<Hmac<Sha256>> {
    let key = host_key()?;
    let mut mac = <Hmac<Sha256> as KeyInit>::new_from_slice(&key)
        .map_err(|e| Error::Runtime(format!("checkpoint key: {e}")))?;
    mac.update(bytes);
    Ok(mac)
}

fn seal(bytes: &[u8]) -> Result<String> {
    Ok(hex::encode(mac_of(bytes)?.finalize().into_bytes()))
}

/// The host's checkpoint key: 32 random bytes in `$KERN_HOME/checkpoint.key`, made on first
/// use (linked into place whole, so a reader never sees half of one). One that is not ours,
/// or that others may read, is refused.
fn host_key() -> Result<Vec<u8>> {
    let home = crate::home::root().map_err(|e| Error::Invalid(e.to_string()))?;
    fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(&home)
        .map_err(|e| Error::Runtime(format!("make {}: {e}", home.display())))?;
    let path = home.join("checkpoint.key");
    for _ in 0..3 {
        match read_capped(&path, 64) {
            Ok(key) => {
                let m = fs::symlink_metadata(&path)
                    .map_err(|e| Error::Runtime(format!("{}: {e}", path.display())))?;
                if m.uid() != nix::unistd::geteuid().as_raw()
                    || m.mode() & 0o077 != 0
                    || key.len() != 32
                {
                    return Err(Error::Runtime(format!(
                        "{} is not a key kern made (another owner, readable by others, or not 32 bytes); remove it and kern makes a new one (checkpoints sealed with the old one can then not be restored)",
                        path.display()
                    )));
                }
                return Ok(key);
            }
            Err(_) if !path.exists() => {
                let tmp = home.join(format!(".checkpoint.key.{}", random_hex(8)?));
                write_new(&tmp, &random_bytes(32)?)?;
                let linked = fs::hard_link(&tmp, &path);
                let _ = fs::remove_file(&tmp);
                match linked {
                    Ok(()) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(Error::Runtime(format!("make {}: {e}", path.display()))),
                }
            }
            Err(e) => return Err(Error::Runtime(format!("the checkpoint key: {e}"))),
        }
    }
    Err(Error::Runtime(format!(
        "the checkpoint key {} could not be made",
        path.display()
    )))
}
