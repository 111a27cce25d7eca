//! The workspace as the host reads and writes it for the caller: readFile, writeFile and
//! listFiles (counted as writers, off the async threads), snapshot() and restore() (with the
//! workspace held still).

use super::kernel::OpenKernel;
use super::opened::Opened;
use super::writers::{Active, Exclusive};
use crate::error::{Error, Result};
use crate::workspace::track::FileInfo;
use crate::workspace::{archive, copy, files};
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

/// ADDITION: `readFile` of a range (`offset`, `length`).
pub(super) async fn read_range(
    opened: Arc<Opened>,
    path: String,
    offset: u64,
    length: Option<u64>,
    max_bytes: Option<u64>,
) -> Result<Vec<u8>> {
    let _active = Active::enter(&opened.writers).await;
    let ws = opened.workspace_path()?;
    let max = max_bytes.unwrap_or(files::DEFAULT_MAX_READ);
    blocking(move || files::read_range(&ws, &path, offset, length, max)).await
}

/// ADDITION (`createReadStream`): a workspace file open for reading in chunks, and its size.
pub(super) async fn open_read(opened: Arc<Opened>, path: String) -> Result<ReadStream> {
    let _active = Active::enter(&opened.writers).await;
    let ws = opened.workspace_path()?;
    let (file, size) = blocking(move || files::open_read(&ws, &path)).await?;
    Ok(ReadStream {
        file: Arc::new(std::sync::Mutex::new(Some(file))),
        size,
        opened,
    })
}

/// A file `createReadStream` reads a chunk at a time; its fd goes at `close()` (or drop).
pub struct ReadStream {
    file: Arc<std::sync::Mutex<Option<std::fs::File>>>,
    /// Its size when opened.
    pub size: u64,
    opened: Arc<Opened>,
}

/// The most one `ReadStream::read` returns (Node's default highWaterMark is 64 KiB).
pub const MAX_CHUNK: usize = 1 << 20;

impl ReadStream {
    /// Up to `len` bytes (at most [`MAX_CHUNK`]) from `position`; empty at the end.
    pub async fn read(&self, position: u64, len: usize) -> Result<Vec<u8>> {
        if *self.opened.closing.borrow() {
            return Err(Error::Closed(
                "the Sandbox of this read stream is closed".into(),
            ));
        }
        let file = self.file.clone();
        let len = len.min(MAX_CHUNK);
        blocking(move || {
            use std::os::unix::fs::FileExt;
            let guard = file
                .lock()
                .map_err(|_| Error::Runtime("the read stream's lock is poisoned".into()))?;
            let f = guard
                .as_ref()
                .ok_or_else(|| Error::Closed("the read stream is closed".into()))?;
            let mut buf = vec![0u8; len];
            let n = f
                .read_at(&mut buf, position)
                .map_err(|e| Error::Runtime(format!("createReadStream: cannot read: {e}")))?;
            buf.truncate(n);
            Ok(buf)
        })
        .await
    }

    /// Closes the fd now; later reads are refused.
    pub fn close(&self) {
        if let Ok(mut f) = self.file.lock() {
            f.take();
        }
    }
}

/// ADDITION (`createWriteStream`): a write that lands atomically at `commit`.
pub(super) async fn begin_write(opened: Arc<Opened>, path: String) -> Result<WriteStream> {
    let _active = Active::enter(&opened.writers).await;
    let ws = opened.workspace_path()?;
    let w = blocking(move || {
        let owner = files::host_write_owner(&ws)?;
        files::AtomicWrite::begin(&ws, &path, owner)
    })
    .await?;
    Ok(WriteStream {
        inner: Arc::new(std::sync::Mutex::new(Some(w))),
        opened,
    })
}

/// The temp file of a `createWriteStream`; dropped or aborted, it is removed.
pub struct WriteStream {
    inner: Arc<std::sync::Mutex<Option<files::AtomicWrite>>>,
    opened: Arc<Opened>,
}

impl WriteStream {
    pub async fn write(&self, data: Vec<u8>) -> Result<()> {
        let _active = Active::enter(&self.opened.writers).await;
        let inner = self.inner.clone();
        blocking(move || {
            let mut g = inner
                .lock()
                .map_err(|_| Error::Runtime("the write stream's lock is poisoned".into()))?;
            g.as_mut()
                .ok_or_else(|| Error::Closed("the write stream has ended".into()))?
                .write(&data)
        })
        .await
    }

    /// Puts the file in place; refused once the Sandbox is closed (its temp file removed).
    pub async fn commit(&self) -> Result<()> {
        let _active = Active::enter(&self.opened.writers).await;
        let w = self
            .inner
            .lock()
            .map_err(|_| Error::Runtime("the write stream's lock is poisoned".into()))?
            .take()
            .ok_or_else(|| Error::Closed("the write stream has ended".into()))?;
        if *self.opened.closing.borrow() {
            return Err(Error::Closed(
                "the Sandbox of this write stream is closed; the file was not written".into(),
            ));
        }
        blocking(move || w.commit()).await
    }

    /// Drops the temp file; the file at the path is untouched.
    pub fn abort(&self) {
        if let Ok(mut g) = self.inner.lock() {
            g.take();
        }
    }
}

/// `writeFile`.
pub(super) async fn write_file(opened: Arc<Opened>, path: String, data: Vec<u8>) -> Result<()> {
    let _active = Active::enter(&opened.writers).await;
    let ws = opened.workspace_path()?;
    blocking(move || {
        let owner = files::host_write_owner(&ws)?;
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
    let owner = files::host_write_owner(&ws)?;
    archive::restore(&ws, src, &archive::Limits::default(), owner)
}

/// `fork()`'s copy: this session's workspace (but `.deps`, which the fork's own `setup` made)
/// into `child`'s, taken while no box of either runs (refused otherwise) but `frozen`, a
/// kernel of this session the caller holds still (`OpenKernel::still_in`: a kernel's fork).
pub(super) fn copy_workspace(
    from: &Opened,
    child: &Opened,
    frozen: Option<&OpenKernel>,
) -> Result<copy::CopyReport> {
    if from.resident.get().is_some() || child.resident.get().is_some() {
        return crate::invalid!("fork() of a `persist` Sandbox is not available: its resident box's running processes can't be copied into a new box safely yet (see docs/reference.md, \"Live state\"); fork a Sandbox without persist (its workspace is copied)");
    }
    let _still = Exclusive::take_beside(&from.writers, "fork()", frozen_count(from, frozen)?)?;
    let _child = Exclusive::take(&child.writers, "fork()")?;
    let src = from.workspace_path()?;
    let dst = child.workspace_path()?;
    let owner = files::host_write_owner(&dst)?;
    copy::copy_tree(&src, &dst, &[".deps"], owner)
}

/// 1 for a kernel of `opened` held still, 0 for none; an error for another.
fn frozen_count(opened: &Opened, frozen: Option<&OpenKernel>) -> Result<usize> {
    match frozen {
        None => Ok(0),
        Some(k) if k.still_in(&opened.writers) => Ok(1),
        Some(_) => Err(Error::Runtime(
            "the kernel being forked is not a kernel of this Sandbox held still (paused, or between cells)".into(),
        )),
    }
}

/// Runs blocking filesystem work off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| Error::Runtime(format!("a workspace task failed: {e}")))?
}
