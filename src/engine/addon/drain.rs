//! The caller's reader of one of kern's streams (a box's stdout or stderr): it reads to the
//! stream's end, past the cap too, so the box never blocks on a full pipe; keeps what the call's
//! `Capture` keeps; forwards it to the call's sink as it comes, at the pace of a slow consumer;
//! and, once the box has ended, waits for the stream's end within a grace.

use super::capture::{Capture, SpillEnd};
use super::launch::{Chunk, ChunkSender, Stream};
use std::time::{Duration, Instant};
use tokio::io::AsyncReadExt;

/// How long to keep reading output after `kern`'s report, for a resident box: a call's
/// orphans, left in the box, keep that call's pipes. (The box's PID 1 lets go of its first
/// kern's once it is ready.) A reader given up on keeps what it read, and the rest counts as
/// cut.
const DRAIN_GRACE: Duration = Duration::from_secs(2);
/// The same for a fresh box. Every process of it is dead by the report and kern closed its own
/// ends before it, so EOF is certain and only the reader's turn on a busy host is waited for
/// (a fixed 2 s lost output under load); this bound is for a kern that broke its word.
const DRAIN_BOUND: Duration = Duration::from_secs(60);
/// The most a box's end waits, beyond its grace, for an output consumer that is slow to take
/// the last chunks (a slow `onStdout`): past it, what is still unread counts as cut.
const SLOW_CONSUMER_GRACE: Duration = Duration::from_secs(30);

/// What a stream's reader kept so far, shared with the caller, so that a reader given up on at
/// `DRAIN_GRACE` still hands over everything it read. Without a capture (a kernel's box, whose
/// output the kernel splits per cell) nothing is kept and everything is forwarded.
#[derive(Default)]
struct Drained {
    capture: Option<Capture>,
    /// Time the reader spent waiting for the sink to take a chunk, and since when it waits now.
    waited: Duration,
    waiting: Option<Instant>,
}

impl Drained {
    fn blocked(&self) -> Duration {
        self.waited + self.waiting.map_or(Duration::ZERO, |t| t.elapsed())
    }
}

type SharedDrained = std::sync::Arc<std::sync::Mutex<Drained>>;

/// The reader of one of kern's streams. The caller keeps its buffer, so it can take what was
/// read even if it gives the reader up.
pub(super) struct Reader {
    task: tokio::task::JoinHandle<()>,
    into: SharedDrained,
}

/// What a stream's reader kept, once the box has ended.
#[derive(Default)]
pub(super) struct Kept {
    pub bytes: Vec<u8>,
    /// It reached its cap and lost the rest, or its reader was given up on.
    pub truncated: bool,
    /// Where it went past its cap, with `spillOutput`.
    pub spill: Option<SpillEnd>,
}

impl Reader {
    /// Starts reading `r`: what `capture` keeps is kept, and forwarded to `sink`.
    pub(super) fn spawn<R: tokio::io::AsyncRead + Unpin + Send + 'static>(
        r: R,
        stream: Stream,
        capture: Option<Capture>,
        sink: Option<ChunkSender>,
    ) -> Reader {
        let into = SharedDrained::new(std::sync::Mutex::new(Drained {
            capture,
            ..Default::default()
        }));
        let task = tokio::spawn(drain(r, stream, sink, into.clone()));
        Reader { task, into }
    }

    /// Stops reading: nothing of it is wanted (the box never ran).
    pub(super) fn abort(self) {
        self.task.abort();
    }

    /// Once the box has ended: waits for the stream's end, within its grace, and gives what
    /// was kept. `resident`: the box is a resident one's call, whose pipes a process the call
    /// left may keep writing to.
    pub(super) async fn finish(self, resident: bool) -> Kept {
        let Reader { mut task, into } = self;
        let grace = if resident { DRAIN_GRACE } else { DRAIN_BOUND };
        // The grace is the reader's own time; what it spent waiting for a slow consumer
        // (`ChunkSender`) is added to it, so the output the box wrote before it ended is all
        // delivered and kept, however slow the callback.
        // Bounded: at most SLOW_CONSUMER_GRACE in all (a consumer that never reads must not hold
        // the call for ever), and none for a resident box's call.
        let mut wait = grace;
        let mut granted = Duration::ZERO;
        let ended = loop {
            if tokio::time::timeout(wait, &mut task).await.is_ok() {
                break true;
            }
            let blocked = into.lock().unwrap_or_else(|p| p.into_inner()).blocked();
            if resident || blocked <= granted || granted >= SLOW_CONSUMER_GRACE {
                break false;
            }
            wait = (blocked - granted)
                .max(Duration::from_millis(100))
                .min(SLOW_CONSUMER_GRACE - granted);
            granted = blocked;
        };
        task.abort();
        let captured = {
            let mut d = into.lock().unwrap_or_else(|p| p.into_inner());
            d.capture.as_mut().map(Capture::finish)
        };
        // Given up on: what was read is kept, and the rest counts as cut.
        match captured {
            Some(c) => {
                let mut spill = c.spill.wait().await;
                if let Some(s) = spill.as_mut().filter(|_| !ended) {
                    s.complete = false;
                    s.cut_by = Some("its reader gave up on it after the box ended");
                }
                Kept {
                    bytes: c.kept,
                    truncated: c.truncated || !ended,
                    spill,
                }
            }
            None => Kept {
                bytes: Vec::new(),
                truncated: !ended,
                spill: None,
            },
        }
    }
}

/// Reads a stream to its end (past the cap too, so the writer never blocks on a full pipe),
/// keeping what its capture keeps and forwarding that to `sink`.
async fn drain<R: tokio::io::AsyncRead + Unpin>(
    mut r: R,
    stream: Stream,
    sink: Option<ChunkSender>,
    into: SharedDrained,
) {
    let mut buf = vec![0u8; 64 * 1024];
    let mut sink = sink;
    loop {
        let n = match r.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let (take, overflow) = {
            let mut d = into.lock().unwrap_or_else(|p| p.into_inner());
            match d.capture.as_mut() {
                Some(c) => c.keep(&buf[..n]),
                None => (n, None),
            }
        };
        // Past the cap with `spillOutput`: waits while the spill's writer is behind.
        if let Some(o) = overflow {
            o.send().await;
        }
        let Some(s) = sink.as_ref().filter(|_| take > 0) else {
            continue;
        };
        // Waits while the consumer is behind: this read stops, the pipe fills, and the box's
        // next write blocks until the consumer catches up (past the cap, nothing is sent and
        // the rest is read and dropped at once).
        into.lock().unwrap_or_else(|p| p.into_inner()).waiting = Some(Instant::now());
        let sent = s
            .send(Chunk {
                stream,
                data: buf[..take].to_vec(),
            })
            .await;
        {
            let mut d = into.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(t) = d.waiting.take() {
                d.waited += t.elapsed();
            }
        }
        if sent.is_err() {
            // Nobody listens any more: keep reading (and keeping) without forwarding.
            sink = None;
        }
    }
}
