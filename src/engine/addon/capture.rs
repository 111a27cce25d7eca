//! A stream's output as a call keeps it (every route: one-shot boxes, kernel cells, Jupyter
//! cells, processes and terminals): the first `maxOutputBytes` in memory and the rest dropped,
//! or with `spillOutput` the whole stream also written to a workspace file once it passes the
//! cap, so nothing is lost and the host's memory stays flat.
//!
//! The file is written by a thread of its own per spilling stream, fed through a bounded
//! channel: a box that writes faster than the disk waits on its pipe, not on our memory. It is
//! an unnamed file in `.kern-output/` (`files::AtomicWrite`: no symlink followed, nothing the box
//! can swap while it grows) and gets its name when the stream ends; so a box sees only whole
//! spills. It holds at most `workspaceMaxBytes` bytes when the Sandbox has one.

use crate::workspace::files::{self, AtomicWrite};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

/// The workspace directory spilled streams go to.
pub const SPILL_DIR: &str = ".kern-output";

/// Chunks (of at most 64 KiB from a pipe) waiting for a spill's writer.
const SPILL_QUEUED: usize = 16;

/// How long a finished stream waits for its spill to be written out and named.
const SPILL_GRACE: Duration = Duration::from_secs(30);

/// Where a Sandbox's spills go, when `spillOutput` is on.
#[derive(Debug, Clone)]
pub struct SpillRoot {
    /// The workspace on the host.
    pub root: PathBuf,
    /// The most one spill file holds (`workspaceMaxBytes`, else unbounded).
    pub limit: u64,
}

/// How a call keeps its output: the cap of each stream, and where the excess goes.
#[derive(Debug, Clone)]
pub struct Keep {
    pub cap: usize,
    pub spill: Option<SpillRoot>,
}

impl Keep {
    pub fn new(cap: usize, spill: Option<SpillRoot>) -> Keep {
        Keep { cap, spill }
    }

    /// One call's captures of stdout and stderr; their spill files (if any) share a name.
    pub fn captures(&self) -> (Capture, Capture) {
        let stem = self.spill.as_ref().map(|_| spill_stem());
        let one = |ext: &str| Capture {
            kept: Vec::new(),
            cap: self.cap,
            truncated: false,
            spill: match (&self.spill, &stem) {
                (Some(root), Some(stem)) => Spill::Ready(SpillTo {
                    root: root.clone(),
                    rel: format!("{SPILL_DIR}/{stem}.{ext}"),
                }),
                _ => Spill::Off,
            },
        };
        (one("stdout"), one("stderr"))
    }
}

/// `<seconds since the epoch>-<pid>-<sequence>`: unique on this host, sorted by time.
fn spill_stem() -> String {
    static SEQ: AtomicU64 = AtomicU64::new(0);
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let n = SEQ.fetch_add(1, Ordering::Relaxed);
    format!("{secs}-{}-{n}", std::process::id())
}

#[derive(Debug, Clone)]
struct SpillTo {
    root: SpillRoot,
    /// Workspace-relative path of the file.
    rel: String,
}

#[derive(Debug)]
enum Spill {
    Off,
    /// On, and the stream has not passed its cap yet.
    Ready(SpillTo),
    Writing {
        tx: mpsc::Sender<Vec<u8>>,
        end: oneshot::Receiver<SpillEnd>,
    },
    /// Could not start: its end, said at `finish`.
    Failed(oneshot::Receiver<SpillEnd>),
    /// Handed to `finish`.
    Done,
}

/// One stream's output as kept so far.
#[derive(Debug)]
pub struct Capture {
    kept: Vec<u8>,
    cap: usize,
    truncated: bool,
    spill: Spill,
}

/// Bytes past the cap on their way to the spill's writer (sent outside any lock the caller
/// holds the capture under).
#[must_use]
pub struct Overflow {
    tx: mpsc::Sender<Vec<u8>>,
    data: Vec<u8>,
}

impl Overflow {
    /// Waits while the writer is behind.
    pub async fn send(self) {
        // A writer that stopped (an error, the limit) still drains its queue; one that is gone
        // has ended the spill: either way nothing is owed to the stream.
        let _ = self.tx.send(self.data).await;
    }
}

impl Capture {
    /// Keeps what fits under the cap and returns how many bytes of `data` that was (the part a
    /// live consumer is shown); the rest is dropped, or returned for the spill.
    pub fn keep(&mut self, data: &[u8]) -> (usize, Option<Overflow>) {
        let take = data.len().min(self.cap.saturating_sub(self.kept.len()));
        self.kept.extend_from_slice(&data[..take]);
        if take == data.len() {
            return (take, None);
        }
        self.truncated = true;
        let rest = &data[take..];
        if let Spill::Ready(to) = &self.spill {
            let to = to.clone();
            let (tx, rx) = mpsc::channel(SPILL_QUEUED);
            let (end_tx, end) = oneshot::channel();
            let path = to.rel.clone();
            let started = std::thread::Builder::new()
                .name("kern-spill".into())
                .spawn(move || {
                    let _ = end_tx.send(write_spill(to, rx));
                });
            if let Err(e) = started {
                // No thread to be had (the process's limit): said as a spill that failed.
                let (end_tx, end) = oneshot::channel();
                let _ = end_tx.send(SpillEnd {
                    path,
                    bytes: 0,
                    complete: false,
                    cut_by: None,
                    error: Some(format!("no thread to write it: {e}")),
                });
                self.spill = Spill::Failed(end);
                return (take, None);
            }
            // The file holds the whole stream, so its offsets are the stream's: the kept part
            // goes first (queued: the channel is empty).
            let _ = tx.try_send(self.kept.clone());
            self.spill = Spill::Writing { tx, end };
        }
        let overflow = match &self.spill {
            Spill::Writing { tx, .. } => Some(Overflow {
                tx: tx.clone(),
                data: rest.to_vec(),
            }),
            _ => None,
        };
        (take, overflow)
    }

    /// `keep` and the spill's send in one, for a caller that owns the capture.
    pub async fn push(&mut self, data: &[u8]) -> usize {
        let (take, overflow) = self.keep(data);
        if let Some(o) = overflow {
            o.send().await;
        }
        take
    }

    /// What was kept, whether the cap cut the stream, and the spill to wait for.
    pub fn finish(&mut self) -> Captured {
        let spill = match std::mem::replace(&mut self.spill, Spill::Done) {
            // Dropping `tx` here ends the writer once the senders in flight are gone.
            Spill::Writing { end, .. } | Spill::Failed(end) => Some(end),
            _ => None,
        };
        Captured {
            kept: std::mem::take(&mut self.kept),
            truncated: self.truncated,
            spill: SpillWait(spill),
        }
    }
}

/// A finished capture.
pub struct Captured {
    pub kept: Vec<u8>,
    pub truncated: bool,
    pub spill: SpillWait,
}

/// A spill being finished by its writer.
pub struct SpillWait(Option<oneshot::Receiver<SpillEnd>>);

impl SpillWait {
    /// None when the stream did not spill.
    pub async fn wait(self) -> Option<SpillEnd> {
        let rx = self.0?;
        Some(match tokio::time::timeout(SPILL_GRACE, rx).await {
            Ok(Ok(end)) => end,
            _ => SpillEnd {
                path: String::new(),
                bytes: 0,
                complete: false,
                cut_by: None,
                error: Some(format!(
                    "its writer did not finish within {} s",
                    SPILL_GRACE.as_secs()
                )),
            },
        })
    }
}

/// How a spill ended: its file (workspace-relative), its size, whether it holds the whole
/// stream, and why not when it could not be written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpillEnd {
    pub path: String,
    pub bytes: u64,
    pub complete: bool,
    /// Why it is not the whole stream, when it is not.
    pub cut_by: Option<&'static str>,
    pub error: Option<String>,
}

impl SpillEnd {
    /// The result's `stdoutSpill`/`stderrSpill`: None when no file was written.
    pub fn spilled(&self) -> Option<Spilled> {
        self.error.is_none().then(|| Spilled {
            path: self.path.clone(),
            bytes: self.bytes,
            complete: self.complete,
        })
    }

    /// The note the result carries when the spill is not the whole stream.
    pub fn note(&self, stream: &str) -> Option<String> {
        match (&self.error, self.complete) {
            (Some(why), _) => Some(format!(
                "warning: {stream} past maxOutputBytes could not be kept in the workspace ({why}); it was dropped"
            )),
            (None, false) => Some(format!(
                "note: {stream} was kept in {} up to its first {} bytes ({}); the rest was dropped",
                self.path,
                self.bytes,
                self.cut_by.unwrap_or("cut short")
            )),
            (None, true) => None,
        }
    }
}

/// A spilled stream, as the result reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spilled {
    pub path: String,
    pub bytes: u64,
    pub complete: bool,
}

/// The writer's thread: the whole stream into the file, up to the limit, then the file named.
/// It reads its queue to the end whatever happens, so the stream never waits on a writer that
/// stopped.
fn write_spill(to: SpillTo, mut rx: mpsc::Receiver<Vec<u8>>) -> SpillEnd {
    let mut end = SpillEnd {
        path: to.rel.clone(),
        bytes: 0,
        complete: true,
        cut_by: None,
        error: None,
    };
    let mut file = files::host_write_owner(&to.root.root)
        .and_then(|owner| AtomicWrite::begin(&to.root.root, &to.rel, owner))
        .map_err(|e| end.error = Some(e.to_string()))
        .ok();
    while let Some(chunk) = rx.blocking_recv() {
        let Some(f) = file.as_mut() else {
            continue;
        };
        let room = to.root.limit.saturating_sub(end.bytes);
        let n = chunk.len().min(usize::try_from(room).unwrap_or(usize::MAX));
        if n < chunk.len() {
            end.complete = false;
            end.cut_by = Some("workspaceMaxBytes");
        }
        if n == 0 {
            continue;
        }
        match f.write(&chunk[..n]) {
            Ok(()) => end.bytes += n as u64,
            Err(e) => {
                end.error = Some(e.to_string());
                file = None;
            }
        }
    }
    if let Some(f) = file {
        if let Err(e) = f.commit() {
            end.error = Some(e.to_string());
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keep(cap: usize, dir: &std::path::Path, limit: u64) -> Keep {
        Keep::new(
            cap,
            Some(SpillRoot {
                root: dir.to_path_buf(),
                limit,
            }),
        )
    }

    #[tokio::test]
    async fn a_stream_past_its_cap_spills_whole() {
        let dir = tempfile::tempdir().unwrap();
        let (mut out, mut err) = keep(4, dir.path(), u64::MAX).captures();
        assert_eq!(out.push(b"012").await, 3);
        assert_eq!(out.push(b"3456").await, 1);
        assert_eq!(out.push(b"789").await, 0);
        assert_eq!(err.push(b"e").await, 1);
        let c = out.finish();
        assert_eq!((c.kept.as_slice(), c.truncated), (&b"0123"[..], true));
        let end = c.spill.wait().await.unwrap();
        assert_eq!((end.bytes, end.complete, &end.error), (10, true, &None));
        assert!(end.path.starts_with(".kern-output/") && end.path.ends_with(".stdout"));
        assert_eq!(
            std::fs::read(dir.path().join(&end.path)).unwrap(),
            b"0123456789"
        );
        // A stream under its cap writes nothing.
        let e = err.finish();
        assert!(!e.truncated && e.spill.wait().await.is_none());
        assert_eq!(
            std::fs::read_dir(dir.path().join(SPILL_DIR))
                .unwrap()
                .count(),
            1
        );
    }

    #[tokio::test]
    async fn a_spill_stops_at_its_limit_and_says_so() {
        let dir = tempfile::tempdir().unwrap();
        let (mut out, _) = keep(2, dir.path(), 5).captures();
        out.push(b"0123456789").await;
        let end = out.finish().spill.wait().await.unwrap();
        assert_eq!((end.bytes, end.complete), (5, false));
        assert_eq!(std::fs::read(dir.path().join(&end.path)).unwrap(), b"01234");
        assert!(end.note("stdout").unwrap().contains("first 5 bytes"));
    }

    #[tokio::test]
    async fn a_symlinked_spill_dir_is_refused_and_nothing_is_written_through_it() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(outside.path(), dir.path().join(SPILL_DIR)).unwrap();
        let (mut out, _) = keep(1, dir.path(), u64::MAX).captures();
        out.push(b"abc").await;
        let c = out.finish();
        assert_eq!(c.kept, b"a");
        let end = c.spill.wait().await.unwrap();
        assert!(end.error.is_some() && end.spilled().is_none());
        assert_eq!(std::fs::read_dir(outside.path()).unwrap().count(), 0);
    }

    #[tokio::test]
    async fn without_a_spill_the_excess_is_dropped() {
        let (mut out, _) = Keep::new(3, None).captures();
        assert_eq!(out.push(b"abcdef").await, 3);
        let c = out.finish();
        assert_eq!((c.kept.as_slice(), c.truncated), (&b"abc"[..], true));
        assert!(c.spill.wait().await.is_none());
    }
}
