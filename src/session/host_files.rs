//! The workspace as the host reads and writes it for the caller: readFile, writeFile and
//! listFiles (counted as writers, off the async threads), snapshot() and restore() (with the
//! workspace held still).

use super::opened::Opened;
use super::writers::{Active, Exclusive};
use crate::error::{Error, Result};
use crate::workspace::track::FileInfo;
use crate::workspace::{archive, files};
use std::path::Path;
use std::sync::Arc;

/// `readFile`.
pub(super) async fn read_file(
    opened: Arc<Opened>,
    path: String,
    max_bytes: Option<u64>,
) -> Result<Vec<u8>> {
    let _active = Active::enter(&opened.writers).await;
    let ws = opened.workspace_path()?;
    let max = max_bytes.unwrap_or(files::DEFAULT_MAX_READ);
    blocking(move || files::read_file(&ws, &path, max)).await
}

/// `writeFile`.
pub(super) async fn write_file(opened: Arc<Opened>, path: String, data: Vec<u8>) -> Result<()> {
    let _active = Active::enter(&opened.writers).await;
    let ws = opened.workspace_path()?;
    blocking(move || {
        let owner = workspace_owner(&ws)?;
        files::write_file(&ws, &path, &data, owner)
    })
    .await
}

/// `listFiles`.
pub(super) async fn list_files(
    opened: Arc<Opened>,
    subdir: Option<String>,
) -> Result<Vec<FileInfo>> {
    let ws = opened.workspace_path()?;
    let listed =
        blocking(move || files::list_files(&ws, subdir.as_deref(), files::MAX_LIST_ENTRIES))
            .await?;
    Ok(listed
        .into_iter()
        .map(|l| FileInfo {
            path: l.path,
            size: l.size,
            change: "created",
        })
        .collect())
}

/// `snapshot`.
pub(super) fn snapshot(opened: &Opened, dest: &Path) -> Result<archive::SnapshotReport> {
    let _still = Exclusive::take(&opened.writers, "snapshot()")?;
    let ws = opened.workspace_path()?;
    archive::snapshot(&ws, dest, &archive::Limits::default())
}

/// `restore`.
pub(super) fn restore(opened: &Opened, src: &Path) -> Result<archive::RestoreReport> {
    let _still = Exclusive::take(&opened.writers, "restore()")?;
    let ws = opened.workspace_path()?;
    let owner = workspace_owner(&ws)?;
    archive::restore(&ws, src, &archive::Limits::default(), owner)
}

/// Runs blocking filesystem work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Runtime(format!("a workspace task failed: {e}")))?
}

/// Who files the host creates in the workspace should belong to: as root, the workspace's
/// owner (so the box, whose account the owner appears as, can change them); unprivileged, we
/// are the owner already.
fn workspace_owner(ws: &Path) -> Result<Option<(u32, u32)>> {
    use std::os::unix::fs::MetadataExt;
    if !nix::unistd::geteuid().is_root() {
        return Ok(None);
    }
    let m = std::fs::metadata(ws)
        .map_err(|e| Error::Runtime(format!("stat the workspace {}: {e}", ws.display())))?;
    Ok(Some((m.uid(), m.gid())))
}
